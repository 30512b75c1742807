//! The options that reshape the call tree (IgProf's `--merge-libraries`,
//! `--merge-regexp`, `--min-count-value`/`--max-count-value`, `--value`; `--hide`,
//! `--merge-ancestors`) and IgProf's `--calls`/`--paths` columns, on the real profile of
//! examples/mixed.py (tests/data/mixed-base-1.gz): each checked against what the plain
//! `--top` report says of the same file, as a user would.

mod common;

use std::collections::HashMap;

use common::{assert_fails, data, run, stderr, stdout, TempDir};

const PROFILE: &str = "mixed-base-1.gz";
const LIBCRYPTO: &str = "/lib/x86_64-linux-gnu/libcrypto.so.3";
const LIBZ: &str = "/lib/x86_64-linux-gnu/libz.so.1";

/// A `--top=0` report: total ticks, and per function label its self and cumulative
/// ticks and the extra columns (self and cumulative samples, which come with the
/// intervals of the shares or `--calls`, then `--paths`).
struct Top {
    total: i64,
    rows: HashMap<String, (i64, i64, Vec<i64>)>,
    order: Vec<String>,
}

fn top(args: &[&str]) -> Top {
    let output = run(&[&[PROFILE, "--top=0"][..], args].concat(), &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stderr(&output), "");
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    // PERF_TICKS: 3754 samples, 3760 ticks of 4.000 ms = 15.040 s[; Python view: …]
    let total = lines[1].split_whitespace().nth(3).unwrap().parse().unwrap();
    // Seconds of 4 ms ticks with 3 decimals: exact.
    let ticks = |seconds: &str| (seconds.parse::<f64>().unwrap() / 0.004).round() as i64;
    let mut rows = HashMap::new();
    let mut order = Vec::new();
    for line in &lines[3..] {
        // The number columns (the intervals of the shares, [lo-hi], left out), then
        // the label.
        let mut rest = *line;
        let mut words = Vec::new();
        loop {
            let trimmed = rest.trim_start();
            let end = trimmed.find(' ').unwrap();
            let word = &trimmed[..end];
            if word.parse::<f64>().is_ok() {
                words.push(word);
            } else if !word.starts_with('[') {
                break;
            }
            rest = &trimmed[end..];
        }
        let label = rest.trim_start().to_string();
        let extra = words[4..].iter().map(|w| w.parse().unwrap()).collect();
        rows.insert(label.clone(), (ticks(words[1]), ticks(words[3]), extra));
        order.push(label);
    }
    Top { total, rows, order }
}

/// The sum of the self ticks of the functions of `file` in `top`.
fn self_of_file(top: &Top, file: &str) -> i64 {
    top.rows
        .iter()
        .filter(|(label, _)| label.ends_with(&format!("({file})")))
        .map(|(_, (own, _, _))| own)
        .sum()
}

#[test]
fn hide_gives_the_cost_to_the_caller() {
    let plain = top(&[]);
    // Unresolved symbols hidden: SHA-256's time shows in SHA256_Update, the function
    // of libcrypto that called the stripped code.
    let hidden = top(&["--hide", r"^@\?0x"]);
    assert_eq!(hidden.total, plain.total);
    assert!(hidden.order.iter().all(|label| !label.starts_with("@?")));
    let sha = format!("SHA256_Update  ({LIBCRYPTO})");
    assert_eq!(hidden.order[0], sha);
    assert_eq!(hidden.rows[&sha].0, plain.rows[&sha].1);
    // deflate gets its own plus every unresolved libz function's self time below it.
    let deflate = format!("deflate  ({LIBZ})");
    assert_eq!(hidden.rows[&deflate].1, plain.rows[&deflate].1);
    let libz_unresolved: i64 = plain
        .rows
        .iter()
        .filter(|(label, _)| label.starts_with("@?") && label.ends_with(&format!("({LIBZ})")))
        .map(|(_, (own, _, _))| own)
        .sum();
    assert_eq!(
        hidden.rows[&deflate].0,
        plain.rows[&deflate].0 + libz_unresolved
    );
}

#[test]
fn merge_ancestors_starts_stacks_at_the_match() {
    let output = run(
        &[PROFILE, "--tree", "--merge-ancestors", "^digest$"],
        &data(),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    let plain = top(&[]);
    let digest = "digest (/tmp/pyigprof-diff/mixed.py:38)";
    // Outermost lines (not indented): digest with all of its time, and _start with
    // the rest.
    let lines: Vec<&str> = text.lines().collect();
    let column = lines[2].find("function").unwrap();
    let roots: Vec<(&str, f64)> = lines[3..]
        .iter()
        .filter(|line| !line[column..].starts_with(' '))
        .map(|line| {
            let seconds = line.split_whitespace().nth(1).unwrap().parse().unwrap();
            (&line[column..], seconds)
        })
        .collect();
    let names: Vec<&str> = roots.iter().map(|(name, _)| *name).collect();
    assert!(names.contains(&digest), "{text}");
    let digest_s = roots.iter().find(|(n, _)| *n == digest).unwrap().1;
    assert!((digest_s / 0.004 - plain.rows[digest].1 as f64).abs() < 0.5);
    let start_s: f64 = roots
        .iter()
        .filter(|(n, _)| n.starts_with("_start "))
        .map(|(_, s)| s)
        .sum();
    assert!(
        ((start_s + digest_s) / 0.004 - plain.total as f64).abs() < 0.5,
        "{text}"
    );
    // --top agrees: digest's cumulative time is unchanged, _start lost it.
    let merged = top(&["--merge-ancestors", "^digest$"]);
    assert_eq!(merged.total, plain.total);
    assert_eq!(merged.rows[digest].1, plain.rows[digest].1);
    let start = "_start  (/root/.pyenv/versions/3.11.7/bin/python3.11)";
    assert_eq!(
        merged.rows[start].1,
        plain.rows[start].1 - plain.rows[digest].1
    );
}

#[test]
fn merge_libraries_sums_each_file() {
    let plain = top(&[]);
    for spelling in ["--merge-libraries", "-ml"] {
        let merged = top(&[spelling]);
        assert_eq!(merged.total, plain.total);
        // Every function is now a file; libcrypto's self time is that of all its
        // functions, and it is the hottest.
        let crypto = format!("{LIBCRYPTO}  ({LIBCRYPTO})");
        assert_eq!(merged.order[0], crypto);
        assert_eq!(merged.rows[&crypto].0, self_of_file(&plain, LIBCRYPTO));
        let libz = format!("{LIBZ}  ({LIBZ})");
        assert_eq!(merged.rows[&libz].0, self_of_file(&plain, LIBZ));
        // Each function is named after its file (Python modules keep a line).
        for label in &merged.order {
            let inner = &label[label.rfind('(').unwrap() + 1..label.len() - 1];
            let file = match label.contains("  (") {
                true => inner,
                false => inner.rsplit_once(':').unwrap().0,
            };
            assert!(label.starts_with(&format!("{file} ")), "{label}");
        }
    }
    // Only the files the pattern matches.
    let merged = top(&["--merge-libraries=libz"]);
    let libz = format!("{LIBZ}  ({LIBZ})");
    assert_eq!(merged.rows[&libz].0, self_of_file(&plain, LIBZ));
    assert!(merged
        .rows
        .contains_key(&format!("@?0x29c240  ({LIBCRYPTO})")));
}

#[test]
fn merge_regexp_collapses_matching_functions() {
    let plain = top(&[]);
    let unresolved: i64 = plain
        .rows
        .iter()
        .filter(|(label, _)| label.starts_with("@?"))
        .map(|(_, (own, _, _))| own)
        .sum();
    // IgProf's s/RE/WITH/ form: every unresolved function (in libz and libcrypto) is
    // one function, in the pseudo-file [merged].
    for spelling in ["--merge-regexp", "-mr"] {
        let merged = top(&[spelling, r"s/^@\?0x.*/unresolved/"]);
        assert_eq!(merged.total, plain.total);
        assert_eq!(merged.order[0], "unresolved  ([merged])");
        assert_eq!(merged.rows["unresolved  ([merged])"].0, unresolved);
    }
    // A plain pattern names the group by its first group: here, by library (matched on
    // the file's path when the name does not match).
    let merged = top(&["--merge-regexp", r"/lib/x86_64-linux-gnu/lib(z|crypto)\.so"]);
    assert_eq!(
        merged.rows[&format!("crypto  ({LIBCRYPTO})")].0,
        self_of_file(&plain, LIBCRYPTO)
    );
    assert_eq!(
        merged.rows[&format!("z  ({LIBZ})")].0,
        self_of_file(&plain, LIBZ)
    );
}

/// Per node of the profile's Python view, its own ticks (from the library).
fn node_ticks() -> Vec<i64> {
    let profile = igprof_analyse::read_profiles(&[data().join(PROFILE)]).unwrap();
    let view = igprof_analyse::view::python(&profile);
    let counter = view.counter_id("PERF_TICKS").unwrap();
    view.nodes()
        .iter()
        .map(|node| node.value(counter).amount)
        .collect()
}

#[test]
fn count_value_limits_drop_nodes() {
    let plain = top(&[]);
    let ticks = node_ticks();
    for limit in [2, 5, 50] {
        let limit_text = limit.to_string();
        let small = top(&["--max-count-value", &(limit - 1).to_string()]);
        let large = top(&["-mc", &limit_text]);
        // The two halves add up to the whole, and each is what the nodes say.
        assert_eq!(small.total + large.total, plain.total, "{limit}");
        let expected: i64 = ticks.iter().filter(|&&t| t >= limit).sum();
        assert_eq!(large.total, expected, "{limit}");
        assert!(large.total < plain.total);
    }
    // IgProf's spelling of the maximum, and no node above 10000 ticks: nothing dropped.
    assert_eq!(top(&["-Mc", "10000"]).total, plain.total);
    // At most 1 tick per node: python_work's own time (242 ticks over a few lines) is
    // gone; what is left under it is the interpreter work it called, node by node.
    let one = top(&["-Mc", "1"]);
    let work = &one.rows["python_work (/tmp/pyigprof-diff/mixed.py:22)"];
    assert_eq!(work.0, 0, "{work:?}");
    assert!(work.1 > 0 && work.1 < plain.rows["python_work (/tmp/pyigprof-diff/mixed.py:22)"].1);
}

#[test]
fn peak_values() {
    // pyigprof writes (samples, ticks, ticks): the peak is the ticks, same report.
    let plain = top(&[]);
    let peak = top(&["--value", "peak"]);
    assert_eq!(peak.total, plain.total);
    assert_eq!(peak.order, plain.order);
    // IgProf's MEM_LIVE counts (count, bytes, peak bytes): --value peak reports peaks.
    let dir = TempDir::new("peak_values");
    dir.write(
        "live.txt",
        b"P=(ID=7 N=(app) T=0.010000)
C1 FN0=(F0=(app)+100 N=(main))+5 V0=(MEM_LIVE):(1,100,400)
C2 FN1=(F0+200 N=(alloc))+0 V0:(2,722,3000)
",
    );
    let output = run(&["live.txt", "-r", "MEM_LIVE", "--value", "peak"], &dir.0);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "\
pyigprof-analyse: live.txt: app (pid 7)
MEM_LIVE: 3 blocks, 3.3 KiB in peaks of call-tree nodes (3,400 bytes)
   self %  self bytes    cum %  cum bytes  function  (file)
    88.24     2.9 KiB    88.24    2.9 KiB  alloc  (app)
    11.76       400 B   100.00    3.3 KiB  main  (app)
"
    );
}

#[test]
fn calls_and_paths_columns() {
    let plain = top(&[]);
    let counted = top(&["--calls", "--paths"]);
    assert_eq!(counted.order, plain.order);
    // python_work: its samples are those of the JSON report; it is called from one
    // place (timed).
    let output = run(&[PROFILE, "--json"], &data());
    let document: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    let work = document["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "python_work")
        .unwrap();
    let label = "python_work (/tmp/pyigprof-diff/mixed.py:22)";
    let extra = &counted.rows[label].2;
    assert_eq!(extra[0], work["self_samples"].as_i64().unwrap());
    // Its cumulative samples add those of the interpreter work it calls (no more than
    // its cumulative ticks: a sample is at least a tick); one path.
    assert!(extra[1] > extra[0], "{extra:?}");
    assert!(extra[1] <= counted.rows[label].1, "{extra:?}");
    assert_eq!(extra[2], 1);
    // _start is on every sample's stack.
    assert_eq!(
        counted.rows["_start  (/root/.pyenv/versions/3.11.7/bin/python3.11)"].2[1],
        3754
    );
    // --text: Samples and Paths columns, IgProf's short options.
    let output = run(&[PROFILE, "--text", "-c", "-p"], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("% total      Total        95% CI  Samples  Paths  Function\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{:>7}  {:>5}  {label}", extra[1], extra[2])),
        "{text}"
    );
    // Not for the reports that have no such columns.
    let output = run(&[PROFILE, "--tree", "--paths"], &data());
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn bad_patterns_exit_2() {
    let dir = TempDir::new("bad_patterns_exit_2");
    let profile = data().join(PROFILE);
    let profile = profile.to_str().unwrap();
    assert_fails(
        &run(&[profile, "--hide", "("], &dir.0),
        "pyigprof-analyse: --hide: invalid regular expression \"(\": unclosed group\n",
    );
    assert_fails(
        &run(&[profile, "--merge-ancestors", "a{2,1}"], &dir.0),
        "pyigprof-analyse: --merge-ancestors: invalid regular expression \"a{2,1}\": invalid repetition count range, the start must be <= the end\n",
    );
    assert_fails(
        &run(&[profile, "--merge-libraries=["], &dir.0),
        "pyigprof-analyse: --merge-libraries: invalid regular expression \"[\": unclosed character class\n",
    );
    assert_fails(
        &run(&[profile, "-mr", "s/x/y"], &dir.0),
        "pyigprof-analyse: --merge-regexp: expected s/REGEXP/REPLACEMENT/[;s/REGEXP/REPLACEMENT/...], found \"s/x/y\"\n",
    );
    // A bad pattern is reported before any profile is read.
    assert_fails(
        &run(&["missing.gz", "--hide", "("], &dir.0),
        "pyigprof-analyse: --hide: invalid regular expression \"(\": unclosed group\n",
    );
    // Limits are positive integers (clap's usage error, exit 2).
    let output = run(&[profile, "-mc", "0"], &dir.0);
    assert_eq!(output.status.code(), Some(2));
}
