//! The exports for other tools, checked by reading them back as those tools would:
//! `--collapsed` (folded stacks for flamegraph.pl/inferno), `--flamegraph` (SVG, parsed
//! as XML), `--speedscope` (speedscope's JSON, parsed with serde_json) and `--json`.
//! Each is checked on a real profile of examples/mixed.py (tests/data/mixed-base-1.gz)
//! against the totals and shares that the `--top` report gives for the same file.

mod common;

use std::collections::HashMap;
use std::fs;

use common::{data, run, stderr, stdout, TempDir};
use serde_json::Value;

const PROFILE: &str = "mixed-base-1.gz";

/// The `--top` report's total ticks, seconds, and each function's self and cumulative
/// percent (by its one-line label), for `args`.
struct Top {
    ticks: i64,
    seconds: f64,
    percents: HashMap<String, (f64, f64)>,
}

fn top(extra: &[&str]) -> Top {
    let output = run(&[&[PROFILE, "--top=0"][..], extra].concat(), &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    let total = text.lines().nth(1).unwrap();
    // PERF_TICKS: 3754 samples, 3760 ticks of 4.000 ms = 15.040 s
    let words: Vec<&str> = total.split_whitespace().collect();
    // The label starts where the heading says "function", after the number columns
    // (shares, amounts, their intervals and samples).
    let header = text.lines().find(|line| line.contains("self %")).unwrap();
    let column = header.find("function").unwrap();
    let percents = text
        .lines()
        .skip_while(|line| !line.contains("self %"))
        .skip(1)
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            (
                line[column..].to_string(),
                (words[0].parse().unwrap(), words[2].parse().unwrap()),
            )
        })
        .collect();
    Top {
        ticks: words[3].parse().unwrap(),
        seconds: words[9].parse().unwrap(),
        percents,
    }
}

#[test]
fn collapsed_stacks_sum_to_the_total() {
    let output = run(&[PROFILE, "--collapsed"], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    let top = top(&[]);
    let mut sum = 0;
    let mut python_work = 0;
    // The stack of python_work's own samples, and its callees.
    let python_work_stack = text
        .lines()
        .map(|line| line.rsplit_once(' ').unwrap().0)
        .find(|stack| stack.ends_with(";python_work (/tmp/pyigprof-diff/mixed.py:22)"))
        .unwrap()
        .to_string();
    let python_work_depth = python_work_stack.split(';').count();
    let mut python_work_children: Vec<String> = Vec::new();
    for line in text.lines() {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        let count: i64 = count.parse().unwrap();
        assert!(count > 0, "{line}");
        sum += count;
        let frames: Vec<&str> = stack.split(';').collect();
        assert!(frames.iter().all(|frame| !frame.is_empty()), "{line}");
        if frames.last() == Some(&"python_work (/tmp/pyigprof-diff/mixed.py:22)") {
            python_work += count;
            // Python view: the Python caller directly above, no interpreter frame.
            assert_eq!(
                frames[frames.len() - 2],
                "timed (/tmp/pyigprof-diff/mixed.py:46)",
                "{line}"
            );
        }
        // Below the first Python frame the interpreter's frames are its work, never its
        // plumbing (evaluation loop, calls) nor unnamed.
        if let Some(first) = frames.iter().position(|frame| frame.contains(".py")) {
            for frame in &frames[first..] {
                if let Some(name) = frame.strip_suffix(" [libpython3.11.so.1.0]") {
                    assert!(!igprof_analyse::view::is_plumbing(name), "{line}");
                    assert!(!name.starts_with("_PyEval_EvalFrame"), "{line}");
                }
            }
        }
        if line.starts_with(&format!("{python_work_stack};")) {
            python_work_children.push(frames[python_work_depth].to_string());
        }
    }
    // python_work's `%` on integers is interpreter work: its child, as in perf.
    assert!(
        python_work_children
            .iter()
            .any(|child| child == "PyNumber_Remainder [libpython3.11.so.1.0]"),
        "{python_work_children:?}"
    );
    assert_eq!(sum, top.ticks);
    // python_work's own stacks give the same share as --top.
    let share = python_work as f64 / sum as f64 * 100.0;
    let (self_percent, _) = top.percents["python_work (/tmp/pyigprof-diff/mixed.py:22)"];
    assert!(
        (share - self_percent).abs() < 0.005,
        "{share} vs {self_percent}"
    );

    // With every frame, the evaluator's helpers are there and the total is the same.
    let all = stdout(&run(&[PROFILE, "--collapsed", "--all-frames"], &data()));
    assert!(all.contains(";l_mod [libpython3.11.so.1.0] "), "{all}");
    let all_sum: i64 = all
        .lines()
        .map(|line| line.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap())
        .sum();
    assert_eq!(all_sum, sum);
}

#[test]
fn flame_graph_is_well_formed_svg() {
    let dir = TempDir::new("flame_graph_is_well_formed_svg");
    let svg = dir.0.join("profile.svg");
    let output = run(&[PROFILE, "--flamegraph", svg.to_str().unwrap()], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // Only the file: nothing on stdout or stderr.
    assert_eq!(stdout(&output), "");
    assert_eq!(stderr(&output), "");
    let text = fs::read_to_string(&svg).unwrap();
    // inferno's SVG starts with the SVG 1.1 DOCTYPE.
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let document =
        roxmltree::Document::parse_with_options(&text, options).expect("well-formed XML");
    let root = document.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    // One <title> per frame, e.g. "python_work (/tmp/…:22) (1,163 × 4.000 ms tick,
    // 30.93%)"; the whole graph's frame is "all".
    let titles: Vec<&str> = root
        .descendants()
        .filter(|node| node.has_tag_name("title"))
        .filter_map(|node| node.text())
        .collect();
    let work = titles
        .iter()
        .find(|title| title.starts_with("python_work (/tmp/pyigprof-diff/mixed.py:22) ("))
        .unwrap_or_else(|| panic!("{titles:?}"));
    let top = top(&[]);
    let (_, cumulative) = top.percents["python_work (/tmp/pyigprof-diff/mixed.py:22)"];
    assert!(work.ends_with(&format!("{cumulative:.2}%)")), "{work}");
    assert!(
        titles
            .iter()
            .any(|title| title.starts_with("all (3,760 × 4.000 ms tick, 100%)")),
        "{titles:?}"
    );
    // Frames named `<module>` are escaped, and the subtitle gives the total.
    assert!(titles.iter().any(|title| title.starts_with("<module> (")));
    assert!(text.contains("PERF_TICKS: 3754 samples, 3760 ticks of 4.000 ms = 15.040 s"));
}

#[test]
fn speedscope_file_reads_back() {
    let dir = TempDir::new("speedscope_file_reads_back");
    let path = dir.0.join("profile.speedscope.json");
    let output = run(&[PROFILE, "--speedscope", path.to_str().unwrap()], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "");
    let file: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        file["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    let frames = file["shared"]["frames"].as_array().unwrap();
    let profile = &file["profiles"][0];
    assert_eq!(profile["type"], "sampled");
    assert_eq!(profile["unit"], "seconds");
    let samples = profile["samples"].as_array().unwrap();
    let weights: Vec<f64> = profile["weights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_f64().unwrap())
        .collect();
    assert_eq!(samples.len(), weights.len());
    let top = top(&[]);
    let sum: f64 = weights.iter().sum();
    assert!((sum - top.seconds).abs() < 1e-9, "{sum}");
    assert!((profile["endValue"].as_f64().unwrap() - sum).abs() < 1e-9);
    assert_eq!(profile["startValue"], 0.0);
    // Every index names a frame; frames are distinct functions.
    let mut work = 0.0;
    for (sample, weight) in samples.iter().zip(&weights) {
        let stack: Vec<usize> = sample
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as usize)
            .collect();
        assert!(stack.iter().all(|&i| i < frames.len()));
        let leaf = &frames[*stack.last().unwrap()];
        if leaf["name"] == "python_work" {
            assert_eq!(leaf["file"], "/tmp/pyigprof-diff/mixed.py");
            assert_eq!(leaf["line"], 22);
            work += weight;
        }
    }
    let (self_percent, _) = top.percents["python_work (/tmp/pyigprof-diff/mixed.py:22)"];
    assert!((work / sum * 100.0 - self_percent).abs() < 0.005);
    let mut keys: Vec<String> = frames
        .iter()
        .map(|f| format!("{}@{}", f["name"], f["file"]))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), frames.len());
}

#[test]
fn json_functions_and_tree() {
    let output = run(&[PROFILE, "--json"], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let document: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let top = top(&[]);
    assert_eq!(document["format"], "pyigprof-analyse");
    assert_eq!(document["version"], 1);
    assert_eq!(document["counter"], "PERF_TICKS");
    assert_eq!(document["unit"], "ticks");
    assert_eq!(document["total"]["amount"], top.ticks);
    assert_eq!(document["sources"][0]["path"], PROFILE);
    assert!(document["hidden_nodes"].as_u64().unwrap() > 0);
    let functions = document["functions"].as_array().unwrap();
    let tree = document["tree"].as_array().unwrap();
    // Functions ranked by self amount; their shares are --top's.
    let amounts: Vec<i64> = functions
        .iter()
        .map(|f| f["self"]["amount"].as_i64().unwrap())
        .collect();
    assert!(amounts.windows(2).all(|pair| pair[0] >= pair[1]));
    let work = functions
        .iter()
        .find(|f| f["name"] == "python_work")
        .unwrap();
    assert_eq!(work["python"], true);
    assert_eq!(work["line"], 22);
    let (self_percent, cumulative_percent) =
        top.percents["python_work (/tmp/pyigprof-diff/mixed.py:22)"];
    assert!((work["self"]["percent"].as_f64().unwrap() - self_percent).abs() < 0.005);
    assert!((work["cumulative"]["percent"].as_f64().unwrap() - cumulative_percent).abs() < 0.005);
    let seconds = work["self"]["seconds"].as_f64().unwrap();
    assert!((seconds - work["self"]["amount"].as_f64().unwrap() * 0.004).abs() < 1e-9);
    // The tree: parents first, each node's cumulative = self + its children's; the self
    // amounts add up to the total.
    let mut children_sum = vec![0i64; tree.len()];
    let mut self_sum = 0;
    for (index, node) in tree.iter().enumerate() {
        assert!(node["function"].as_u64().unwrap() < functions.len() as u64);
        self_sum += node["self"]["amount"].as_i64().unwrap();
        if let Some(parent) = node["parent"].as_u64() {
            let parent = parent as usize;
            assert!(parent < index);
            assert_eq!(
                tree[parent]["depth"].as_u64().unwrap() + 1,
                node["depth"].as_u64().unwrap()
            );
            children_sum[parent] += node["cumulative"]["amount"].as_i64().unwrap();
        } else {
            assert_eq!(node["depth"], 0);
        }
    }
    for (node, children) in tree.iter().zip(&children_sum) {
        assert_eq!(
            node["cumulative"]["amount"].as_i64().unwrap(),
            node["self"]["amount"].as_i64().unwrap() + children
        );
    }
    assert_eq!(self_sum, top.ticks);
}

#[test]
fn files_and_a_report_together() {
    let dir = TempDir::new("files_and_a_report_together");
    let svg = dir.0.join("f.svg");
    let json = dir.0.join("s.json");
    let output = run(
        &[
            PROFILE,
            "--flamegraph",
            svg.to_str().unwrap(),
            "--speedscope",
            json.to_str().unwrap(),
            "--top=3",
        ],
        &data(),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output).lines().count(), 3 + 3);
    assert!(svg.exists() && json.exists());
}

#[test]
fn output_errors_exit_2() {
    let dir = TempDir::new("output_errors_exit_2");
    dir.write("idle.txt", b"P=(HEX ID=8 N=(true) T=0.004000)\nC1 FN0=(F0=(/bin/true)+10 N=(main))+0 V0=(PERF_TICKS):(0,0,0)\n");
    let missing = dir.0.join("no/such/dir/f.svg");
    let output = run(
        &[
            data().join(PROFILE).to_str().unwrap(),
            "--flamegraph",
            missing.to_str().unwrap(),
        ],
        &dir.0,
    );
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "pyigprof-analyse: {}: cannot write: No such file or directory (os error 2)\n",
            missing.display()
        )
    );
    let output = run(&["idle.txt", "--flamegraph", "f.svg"], &dir.0);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "pyigprof-analyse: idle.txt: no samples of PERF_TICKS to draw a flame graph of\n"
    );
    assert!(!dir.0.join("f.svg").exists());
    // Two stdout reports at once are a usage error.
    let output = run(&["idle.txt", "--json", "--collapsed"], &dir.0);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).starts_with("error: "),
        "{}",
        stderr(&output)
    );
}

/// The `--top=0` report's self and cumulative ticks of the function labelled `label`.
fn top_ticks(label: &str) -> (i64, i64) {
    let output = run(&[PROFILE, "--top=0"], &data());
    let text = stdout(&output);
    let line = text
        .lines()
        .find(|line| line.ends_with(label))
        .unwrap_or_else(|| panic!("{label} in {text}"));
    let words: Vec<f64> = line
        .split_whitespace()
        .take(4)
        .map(|w| w.parse().unwrap())
        .collect();
    // Seconds of 4 ms ticks, printed with 3 decimals: exact.
    let ticks = |seconds: f64| (seconds / 0.004).round() as i64;
    (ticks(words[1]), ticks(words[3]))
}

const PYTHON_WORK: &str = "python_work (/tmp/pyigprof-diff/mixed.py:22)";

#[test]
fn sqlite_database_answers_queries() {
    let dir = TempDir::new("sqlite_database_answers_queries");
    let path = dir.0.join("profile.sqlite");
    let output = run(&[PROFILE, &format!("--sqlite={}", path.display())], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "");
    let top = top(&[]);
    let db = rusqlite::Connection::open(&path).unwrap();
    // The profile row: counter, totals, view.
    let (counter, samples, amount, seconds, view): (String, i64, i64, f64, String) = db
        .query_row(
            "SELECT counter, total_samples, total_amount, total_seconds, view FROM profile",
            [],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(
        (counter.as_str(), samples, amount, view.as_str()),
        ("PERF_TICKS", 3754, top.ticks, "python")
    );
    assert!((seconds - top.seconds).abs() < 1e-9);
    // The hottest function by self time and its share: SHA-256 in libcrypto, as --top.
    let (name, file, self_percent): (String, String, f64) = db
        .query_row(
            "SELECT name, file, self_percent FROM summary ORDER BY self_amount DESC LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap();
    assert_eq!(name, "@?0x29c240");
    assert_eq!(file, "/lib/x86_64-linux-gnu/libcrypto.so.3");
    let (top_self, _) = top.percents["@?0x29c240  (/lib/x86_64-linux-gnu/libcrypto.so.3)"];
    assert!((self_percent - top_self).abs() < 0.005, "{self_percent}");
    // python_work: Python, line 22, self and cumulative ticks as --top.
    let (line, python, own, cumulative): (i64, bool, i64, i64) = db
        .query_row(
            "SELECT line, python, self_amount, cum_amount FROM summary WHERE name = 'python_work'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .unwrap();
    assert_eq!((line, python), (22, true));
    assert_eq!((own, cumulative), top_ticks(PYTHON_WORK));
    // The call graph: all of python_work's time is called from timed.
    let from_timed: i64 = db
        .query_row(
            "SELECT c.amount FROM calls c
             JOIN functions caller ON caller.id = c.caller_id
             JOIN functions callee ON callee.id = c.callee_id
             WHERE caller.name = 'timed' AND callee.name = 'python_work'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(from_timed, cumulative);
    // The tree: self amounts add up to the total; a node's cumulative amount is its self
    // plus its children's.
    let sum: i64 = db
        .query_row("SELECT SUM(self_amount) FROM nodes", [], |row| row.get(0))
        .unwrap();
    assert_eq!(sum, top.ticks);
    let wrong: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM nodes n WHERE n.cum_amount != n.self_amount +
                (SELECT COALESCE(SUM(c.cum_amount), 0) FROM nodes c WHERE c.parent_id = n.id)",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(wrong, 0);
    // An existing file is replaced: writing again gives the same rows.
    let again = run(&[PROFILE, &format!("-s={}", path.display())], &data());
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let db = rusqlite::Connection::open(&path).unwrap();
    let rows: i64 = db
        .query_row("SELECT COUNT(*) FROM profile", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 1);
    // IgProf's spelling, -s without a file: the same database as SQL on stdout, for
    // "| sqlite3 FILE"; the profile named after it is read, never written.
    let sql = run(&["-s", PROFILE], &data());
    assert_eq!(sql.status.code(), Some(0), "{}", stderr(&sql));
    let text = stdout(&sql);
    assert!(
        text.starts_with("PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n"),
        "{text}"
    );
    assert!(text.ends_with("COMMIT;\n"));
    let loaded = rusqlite::Connection::open_in_memory().unwrap();
    loaded.execute_batch(&text).unwrap();
    for table in [
        "profile",
        "sources",
        "files",
        "functions",
        "nodes",
        "function_costs",
        "calls",
        "summary",
    ] {
        // The profile row records the analyser's arguments, which differ.
        let columns = if table == "profile" {
            "counter, total_samples, total_amount, view, creator"
        } else {
            "*"
        };
        let query = format!("SELECT {columns} FROM {table} ORDER BY 1, 2");
        let rows = |connection: &rusqlite::Connection| -> Vec<String> {
            let mut statement = connection.prepare(&query).unwrap();
            let columns = statement.column_count();
            statement
                .query_map([], |row| {
                    Ok((0..columns)
                        .map(|i| format!("{:?}", row.get_ref(i).unwrap()))
                        .collect::<Vec<_>>()
                        .join("|"))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        let written = rows(&db);
        assert!(!written.is_empty(), "{table}");
        assert_eq!(rows(&loaded), written, "{table}");
    }
}

/// A callgrind file as KCachegrind reads it: per function (file and name), its self
/// costs per line, and per call (caller, callee) the inclusive cost.
#[derive(Default)]
struct Callgrind {
    events: Vec<String>,
    totals: Vec<i64>,
    /// (file, function) → line → [costs]
    lines: HashMap<(String, String), HashMap<i64, Vec<i64>>>,
    /// (caller, callee) → inclusive [costs]
    calls: HashMap<(String, String), Vec<i64>>,
    /// (caller, callee) → the caller's lines that make the call
    call_lines: HashMap<(String, String), Vec<i64>>,
}

fn parse_callgrind(text: &str) -> Callgrind {
    let mut file = Callgrind::default();
    let mut names: HashMap<(char, String), String> = HashMap::new();
    // `(id) name` defines, `(id)` refers back; files and functions have tables of their
    // own ('f' and 'n').
    let mut resolve = |kind: char, value: &str| -> String {
        match value.strip_prefix('(') {
            Some(rest) => {
                let (id, name) = rest.split_once(')').unwrap();
                let name = name.trim_start();
                if name.is_empty() {
                    names[&(kind, id.to_string())].clone()
                } else {
                    names.insert((kind, id.to_string()), name.to_string());
                    name.to_string()
                }
            }
            None => value.to_string(),
        }
    };
    let (mut fl, mut fn_, mut cfn) = (String::new(), String::new(), String::new());
    let mut in_call = false;
    for line in text.lines() {
        if let Some(events) = line.strip_prefix("events: ") {
            file.events = events.split(' ').map(String::from).collect();
        } else if let Some(totals) = line.strip_prefix("totals: ") {
            file.totals = totals.split(' ').map(|v| v.parse().unwrap()).collect();
        } else if let Some(value) = line.strip_prefix("fl=") {
            fl = resolve('f', value);
        } else if let Some(value) = line.strip_prefix("fn=") {
            fn_ = resolve('n', value);
        } else if let Some(value) = line.strip_prefix("cfi=") {
            resolve('f', value);
        } else if let Some(value) = line.strip_prefix("cfn=") {
            cfn = resolve('n', value);
        } else if line.starts_with("calls=") {
            in_call = true;
        } else if line.starts_with(|c: char| c.is_ascii_digit()) {
            let numbers: Vec<i64> = line.split(' ').map(|v| v.parse().unwrap()).collect();
            let costs = numbers[1..].to_vec();
            if in_call {
                file.call_lines
                    .entry((fn_.clone(), cfn.clone()))
                    .or_default()
                    .push(numbers[0]);
                let slot = file
                    .calls
                    .entry((fn_.clone(), cfn.clone()))
                    .or_insert_with(|| vec![0; costs.len()]);
                for (slot, cost) in slot.iter_mut().zip(&costs) {
                    *slot += cost;
                }
                in_call = false;
            } else {
                let slot = file
                    .lines
                    .entry((fl.clone(), fn_.clone()))
                    .or_default()
                    .entry(numbers[0])
                    .or_insert_with(|| vec![0; costs.len()]);
                for (slot, cost) in slot.iter_mut().zip(&costs) {
                    *slot += cost;
                }
            }
        }
    }
    file
}

#[test]
fn callgrind_file_reads_back() {
    let dir = TempDir::new("callgrind_file_reads_back");
    let path = dir.0.join("callgrind.out.1");
    let output = run(&[PROFILE, "--callgrind", path.to_str().unwrap()], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "");
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# callgrind format\n"));
    let file = parse_callgrind(&text);
    assert_eq!(file.events, ["Ticks", "Samples"]);
    let top = top(&[]);
    assert_eq!(file.totals, [top.ticks, 3754]);
    // The self costs add up to the totals.
    let mut sums = [0i64; 2];
    for lines in file.lines.values() {
        for costs in lines.values() {
            sums[0] += costs[0];
            sums[1] += costs[1];
        }
    }
    assert_eq!(sums.to_vec(), file.totals);
    // python_work: in its source file, at its own lines (from its first line, 22), with
    // --top's self ticks.
    let (own, cumulative) = top_ticks(PYTHON_WORK);
    let work = &file.lines[&(
        "/tmp/pyigprof-diff/mixed.py".to_string(),
        "python_work".to_string(),
    )];
    assert!(
        work.keys().all(|&line| (22..30).contains(&line)),
        "{work:?}"
    );
    assert!(work.len() > 1, "{work:?}");
    assert_eq!(work.values().map(|costs| costs[0]).sum::<i64>(), own);
    // The call edge timed → python_work has python_work's inclusive cost.
    let edge = ("timed".to_string(), "python_work".to_string());
    assert_eq!(file.calls[&edge][0], cumulative);
    // ... made from a line of timed (first line 46; main starts at 52).
    let lines = &file.call_lines[&edge];
    assert!(
        lines.iter().all(|line| (46..52).contains(line)),
        "{lines:?}"
    );
    // Native code at line 0, in its object.
    let sha = &file.lines[&(
        "/lib/x86_64-linux-gnu/libcrypto.so.3".to_string(),
        "@?0x29c240".to_string(),
    )];
    assert_eq!(sha.keys().copied().collect::<Vec<_>>(), [0]);
}

use common::pprof as proto;

#[test]
fn pprof_profile_decodes() {
    use prost::Message;
    use std::io::Read;

    let dir = TempDir::new("pprof_profile_decodes");
    let path = dir.0.join("profile.pb.gz");
    let output = run(&[PROFILE, "--pprof", path.to_str().unwrap()], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "");
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(&fs::read(&path).unwrap()[..])
        .read_to_end(&mut bytes)
        .expect("gzip");
    let profile = proto::Profile::decode(&bytes[..]).unwrap();
    let text = |index: i64| profile.string_table[index as usize].as_str();
    assert_eq!(text(0), "");
    let types: Vec<(&str, &str)> = profile
        .sample_type
        .iter()
        .map(|t| (text(t.r#type), text(t.unit)))
        .collect();
    assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
    let period = profile.period_type.as_ref().unwrap();
    assert_eq!(
        (text(period.r#type), text(period.unit)),
        ("cpu", "nanoseconds")
    );
    assert_eq!(profile.period, 4_000_000);
    // Totals: every sample, every nanosecond.
    let top = top(&[]);
    let samples: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
    let nanoseconds: i64 = profile.sample.iter().map(|s| s.value[1]).sum();
    assert_eq!(samples, 3754);
    assert_eq!(nanoseconds, top.ticks * 4_000_000);
    // Stacks are distinct, innermost first; python_work's own samples are at lines of
    // python_work, under timed, and add up to its self time.
    let location = |id: u64| &profile.location[id as usize - 1];
    let function_of = |id: u64| {
        let line = &location(id).line[0];
        (&profile.function[line.function_id as usize - 1], line.line)
    };
    let mut stacks: Vec<&Vec<u64>> = profile.sample.iter().map(|s| &s.location_id).collect();
    stacks.sort();
    stacks.dedup();
    assert_eq!(stacks.len(), profile.sample.len());
    let (own, _) = top_ticks(PYTHON_WORK);
    let mut work_ns = 0;
    for sample in &profile.sample {
        let (leaf, line) = function_of(sample.location_id[0]);
        if text(leaf.name) == "python_work" {
            assert_eq!(text(leaf.filename), "/tmp/pyigprof-diff/mixed.py");
            assert_eq!(leaf.start_line, 22);
            assert!((22..30).contains(&line), "{line}");
            let (caller, _) = function_of(sample.location_id[1]);
            assert_eq!(text(caller.name), "timed");
            work_ns += sample.value[1];
        }
        // Outermost frame last: the executable's _start.
        let (root, _) = function_of(*sample.location_id.last().unwrap());
        assert_eq!(text(root.name), "_start");
    }
    assert_eq!(work_ns, own * 4_000_000);
}

#[test]
fn export_errors_exit_2() {
    let dir = TempDir::new("export_errors_exit_2");
    for option in ["--sqlite", "--callgrind", "--pprof"] {
        let missing = dir.0.join("no/such/dir/out");
        let profile = data().join(PROFILE);
        // --sqlite takes its file after "=" (alone, it prints SQL).
        let attached = format!("{option}={}", missing.display());
        let args: Vec<&str> = if option == "--sqlite" {
            vec![profile.to_str().unwrap(), &attached]
        } else {
            vec![profile.to_str().unwrap(), option, missing.to_str().unwrap()]
        };
        let output = run(&args, &dir.0);
        assert_eq!(output.status.code(), Some(2), "{option}");
        assert_eq!(stdout(&output), "");
        assert_eq!(
            stderr(&output),
            format!(
                "pyigprof-analyse: {}: cannot write: No such file or directory (os error 2)\n",
                missing.display()
            ),
            "{option}"
        );
    }
}
