//! `--diff BASE NEW` (and `-b BASE --diff-mode NEW`), `--fail-on-regression` and the
//! markdown format, run as a user runs them: on real profiles of examples/mixed.py and
//! on hand-written dumps with known counts. The output is parsed back and checked
//! against what the profiles hold and against the z-test computed here by hand.
//!
//! The real profiles (tests/data/mixed-*.gz) were made with
//! `LD_PRELOAD=libpyigprof.so python3 mixed.py 15`, twice with the example as it is
//! (`mixed-base-1.gz`, `mixed-base-2.gz`) and once with `python_work` doing 30 % more
//! iterations (`mixed-slow.gz`), all from /tmp/pyigprof-diff/mixed.py. The program's own
//! CPU-time measurements of each run are [`MEASURED`].

mod common;

use std::process::Output;

use common::{data, run, stderr, stdout, TempDir};
use igprof_analyse::report::{FunctionAmounts, Measure};

/// What mixed.py printed for each run: its process CPU time and that of python_work,
/// in seconds.
const MEASURED: [(&str, f64, f64); 3] = [
    ("mixed-base-1.gz", 15.049006118, 4.666422863999991),
    ("mixed-base-2.gz", 15.051743536, 4.596696085999989),
    ("mixed-slow.gz", 15.043351793, 5.518549505000016),
];

/// The pooled two-proportion z statistic, computed here independently of the crate.
fn z(x1: f64, n1: f64, x2: f64, n2: f64) -> f64 {
    let pooled = (x1 + x2) / (n1 + n2);
    (x2 / n2 - x1 / n1) / (pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2)).sqrt()
}

/// One row of the text table: its 12 number cells (as printed) and the function.
#[derive(Debug)]
struct Row {
    cells: Vec<String>,
    function: String,
}

impl Row {
    fn number(&self, column: usize) -> f64 {
        self.cells[column].parse().unwrap()
    }
    fn significant(&self) -> bool {
        self.cells[11] == "yes"
    }
}

const BASE_SELF: usize = 0;
const NEW_SELF: usize = 1;
const CHANGE: usize = 2;
const BASE_CUM: usize = 5;
const NEW_CUM: usize = 6;
const Z: usize = 9;
const P_ADJUSTED: usize = 10;

/// The table rows of a text diff.
fn rows(text: &str) -> Vec<Row> {
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .position(|line| line.trim_start().starts_with("base %"))
        .unwrap_or_else(|| panic!("no table in {text}"));
    assert_eq!(
        lines[header].split_whitespace().collect::<Vec<_>>().join(" "),
        "base % new % change base s new s base cum % new cum % base cum s new cum s z p (adj.) signif. function (file)"
    );
    lines[header + 1..]
        .iter()
        .take_while(|line| !line.starts_with('(') && !line.starts_with("result:"))
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            Row {
                cells: words[..12].iter().map(|w| w.to_string()).collect(),
                function: words[12..].join(" "),
            }
        })
        .collect()
}

/// The row of the function whose text starts with `name `.
fn row<'a>(rows: &'a [Row], name: &str) -> &'a Row {
    rows.iter()
        .find(|row| row.function.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no row for {name}: {rows:?}"))
}

/// The line starting with `prefix`.
fn line_with<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix} in {text}"))
}

/// The |z| from which the printed test line says a change is significant.
fn critical(text: &str) -> f64 {
    let test = line_with(text, "test: ");
    test.rsplit(">= ").next().unwrap().parse().unwrap()
}

/// What the comparisons of python_work add to the command line: `--hide libpython`, so
/// that the interpreter's work that python_work runs (`%` on integers, allocating them:
/// `l_mod`, `PyLong_FromLong`, `_PyObject_Malloc`, which the Python view shows as its
/// children) counts as python_work's own time, the slowdown of mixed-slow.gz being there.
const HIDE_INTERPRETER: [&str; 2] = ["--hide", "libpython"];

/// python_work's self samples and the total samples of a profile, in the Python view
/// with [`HIDE_INTERPRETER`].
fn python_work_samples(name: &str) -> (f64, f64) {
    let transform = igprof_analyse::transform::Options {
        hide: Some(
            igprof_analyse::transform::compile_option("--hide", HIDE_INTERPRETER[1]).unwrap(),
        ),
        ..Default::default()
    };
    let profile = transform.apply(igprof_analyse::view::python(
        &igprof_analyse::read_profiles(&[data().join(name)]).unwrap(),
    ));
    let (measure, counter) = Measure::select(&profile, "PERF_TICKS").unwrap();
    let amounts = FunctionAmounts::of(&profile, counter.unwrap());
    let id = profile
        .functions()
        .iter()
        .position(|f| f.name == "python_work")
        .unwrap();
    (
        amounts.self_values[id].count as f64,
        measure.total.count as f64,
    )
}

#[track_caller]
fn assert_status(output: &Output, status: i32) {
    assert_eq!(output.status.code(), Some(status), "{}", stderr(output));
    assert_eq!(stderr(output), "");
}

#[test]
fn repeated_runs_are_not_flagged() {
    let output = run(
        &["--diff", "mixed-base-1.gz", "mixed-base-2.gz", "--top=0"],
        &data(),
    );
    assert_status(&output, 0);
    let text = stdout(&output);
    assert!(
        line_with(&text, "test: ").contains("Bonferroni correction over"),
        "{text}"
    );
    let rows = rows(&text);
    let limit = critical(&text);
    assert!(limit > 3.0 && limit < 4.0, "{limit}");
    for row in &rows {
        assert!(!row.significant(), "{row:?}");
        assert!(row.number(Z).abs() < limit, "{row:?}");
    }
    assert_eq!(
        line_with(&text, "result: "),
        "result: no significant change"
    );
    // The largest functions' shares barely move: python_work by less than a point.
    let work = row(&rows, "python_work");
    assert!(work.number(CHANGE).abs() < 1.0, "{work:?}");
    assert!(work.number(Z).abs() < 2.0, "{work:?}");

    // Whatever the threshold, a run is no regression of its twin, in either order.
    for (base, new) in [
        ("mixed-base-1.gz", "mixed-base-2.gz"),
        ("mixed-base-2.gz", "mixed-base-1.gz"),
    ] {
        let output = run(&["--diff", base, new, "--fail-on-regression", "0"], &data());
        assert_status(&output, 0);
        assert!(
            line_with(&stdout(&output), "result: ").starts_with("result: OK: "),
            "{}",
            stdout(&output)
        );
    }
}

#[test]
fn slowed_function_is_flagged() {
    for base in ["mixed-base-1.gz", "mixed-base-2.gz"] {
        let output = run(
            &[&["--diff", base, "mixed-slow.gz"][..], &HIDE_INTERPRETER].concat(),
            &data(),
        );
        assert_status(&output, 0);
        let text = stdout(&output);
        let rows = rows(&text);
        let work = row(&rows, "python_work");
        assert!(work.significant(), "{text}");
        assert!(work.number(Z) > critical(&text), "{text}");
        // The shares agree with what the program measured itself (±1.5 points), and the
        // change is their difference.
        let share = |name: &str| {
            let (_, total, work) = MEASURED.iter().find(|m| m.0 == name).unwrap();
            work / total * 100.0
        };
        assert!(
            (work.number(BASE_SELF) - share(base)).abs() < 1.5,
            "{work:?}"
        );
        assert!(
            (work.number(NEW_SELF) - share("mixed-slow.gz")).abs() < 1.5,
            "{work:?}"
        );
        let change = work.number(NEW_SELF) - work.number(BASE_SELF);
        assert!((work.number(CHANGE) - change).abs() <= 0.011, "{work:?}");
        assert!(work.number(CHANGE) > 4.0, "{work:?}");
        // The interpreter's time hidden: python_work calls nothing, self = cumulative.
        assert_eq!(work.cells[BASE_SELF], work.cells[BASE_CUM]);
        assert_eq!(work.cells[NEW_SELF], work.cells[NEW_CUM]);
        // The z printed is the one of python_work's sample counts.
        let (x1, n1) = python_work_samples(base);
        let (x2, n2) = python_work_samples("mixed-slow.gz");
        assert!(
            (work.number(Z) - z(x1, n1, x2, n2)).abs() <= 0.005,
            "{work:?}"
        );
        // The program runs for a fixed CPU time: hashing got the smaller share.
        assert!(rows[..2]
            .iter()
            .any(|r| r.function.contains("libcrypto") && r.significant()));
        assert!(line_with(&text, "result: ")
            .starts_with("result: 2 significant change(s): python_work "));
    }
}

#[test]
fn fail_on_regression_exit_status() {
    let dir = data();
    let slow = run(
        &[
            "--diff",
            "mixed-base-1.gz",
            "mixed-slow.gz",
            "--fail-on-regression",
            "2",
            "--hide",
            "libpython",
        ],
        &dir,
    );
    assert_status(&slow, 1);
    let result = line_with(&stdout(&slow), "result: ").to_string();
    assert!(
        result.starts_with("result: REGRESSION: 1 function(s) grew significantly by more than 2.00 points: python_work (/tmp/pyigprof-diff/mixed.py:22) +"),
        "{result}"
    );
    // The growth (about 6 points) is below 10 points: no failure. The share of libcrypto
    // fell: never a regression.
    let output = run(
        &[
            "--diff",
            "mixed-base-1.gz",
            "mixed-slow.gz",
            "--fail-on-regression",
            "10",
            "--hide",
            "libpython",
        ],
        &dir,
    );
    assert_status(&output, 0);
    // The other way round python_work got faster, never a regression; hashing's share
    // grew back by about 5 points, significantly: a regression at 0 points.
    let output = run(
        &[
            "--diff",
            "mixed-slow.gz",
            "mixed-base-1.gz",
            "--fail-on-regression",
            "0",
        ],
        &dir,
    );
    assert_status(&output, 1);
    let result = line_with(&stdout(&output), "result: ").to_string();
    assert!(
        result.starts_with("result: REGRESSION: 1 function(s) grew significantly by more than 0.00 points: @?0x29c240  (/lib/x86_64-linux-gnu/libcrypto.so.3) +"),
        "{result}"
    );
    // IgProf's spelling gives the same report.
    let igprof = run(
        &[
            "-b",
            "mixed-base-1.gz",
            "--diff-mode",
            "mixed-slow.gz",
            "--fail-on-regression",
            "2",
            "--hide",
            "libpython",
        ],
        &dir,
    );
    assert_status(&igprof, 1);
    assert_eq!(stdout(&igprof), stdout(&slow));
}

#[test]
fn interpreter_work_spreads_the_slowdown() {
    // python_work's extra time is interpreter work (l_mod, PyLong_FromLong, …): the Python
    // view shows it as python_work's children, and with every frame shown it is the
    // same. No one function's self share grows significantly; python_work's cumulative
    // share grows by the slowdown. --hide libpython flags it (slowed_function_is_flagged).
    for view in [&[][..], &["--all-frames"]] {
        let output = run(
            &[
                &["--diff", "mixed-base-1.gz", "mixed-slow.gz", "--top=0"][..],
                view,
            ]
            .concat(),
            &data(),
        );
        assert_status(&output, 0);
        let text = stdout(&output);
        assert_eq!(text.contains("Python view"), view.is_empty(), "{text}");
        let rows = rows(&text);
        assert!(
            rows.iter().any(|r| r.function.starts_with("l_mod ")),
            "{text}"
        );
        let work = row(&rows, "python_work");
        assert!(!work.significant(), "{text}");
        assert!(
            work.number(NEW_CUM) - work.number(BASE_CUM) > 4.0,
            "{work:?}"
        );
        assert!(
            work.number(BASE_SELF) < work.number(BASE_CUM) / 2.0,
            "{work:?}"
        );
    }
}

/// A dump of `python3 app.py` with one function per entry (name, samples, ticks), each
/// called by `<module>`, in hex.
fn dump(pid: u32, functions: &[(&str, u64, u64)]) -> String {
    let mut text = format!(
        "P=(HEX ID={pid:x} N=(python3 app.py) T=0.004000)\nC1 FN0=(F0=(/work/app.py)+1 N=(<module>))+0\n"
    );
    for (index, (name, samples, ticks)) in functions.iter().enumerate() {
        let counter = if index == 0 { "=(PERF_TICKS)" } else { "" };
        text.push_str(&format!(
            "C2 FN{:x}=(F0+{:x} N=({name}))+1 V0{counter}:({samples:x},{ticks:x},1)\n",
            index + 1,
            10 * (index + 1)
        ));
    }
    text
}

/// Hand-written profiles: base f 300, g 600, h 100 samples of one tick each (n1 = 1000);
/// new f 400, g 450 and h 100 samples standing for 300 ticks (timer overruns): n2 = 950
/// samples, 1150 ticks.
///
/// By hand (shares of ticks, tests on samples, m = 3 tests; `<module>` has no samples of
/// its own and is not tested):
/// - f: 30 % → 400/1150 = 34.78 %, +4.78 points; p̂ = 700/1950,
///   z = (400/950 − 0.3) / √(p̂(1−p̂)(1/1000 + 1/950)) = +5.570, p = 2.55e-8,
///   Bonferroni 3p = 7.6e-8;
/// - g: 60 % → 39.13 %, −20.87 points; z = −5.593, p = 2.24e-8, 3p = 6.7e-8;
/// - h: 10 % → 26.09 %, +16.09 points in time, but 100 samples in both: z = +0.383,
///   p = 0.702, 3p ≥ 1: not significant. Counting ticks as samples would have
///   flagged it.
fn hand_dir(test: &str) -> TempDir {
    let dir = TempDir::new(test);
    dir.write(
        "base.txt",
        dump(1, &[("f", 300, 300), ("g", 600, 600), ("h", 100, 100)]).as_bytes(),
    );
    dir.write(
        "new.txt",
        dump(2, &[("f", 400, 400), ("g", 450, 450), ("h", 100, 300)]).as_bytes(),
    );
    dir
}

#[test]
fn hand_computed_counts() {
    let dir = hand_dir("hand_computed_counts");
    let output = run(&["--diff", "base.txt", "new.txt"], &dir.0);
    assert_status(&output, 0);
    let text = stdout(&output);
    assert_eq!(
        line_with(&text, "base: "),
        "base: base.txt: python3 app.py (pid 1): PERF_TICKS: 1000 samples, 1000 ticks of 4.000 ms = 4.000 s"
    );
    assert_eq!(
        line_with(&text, "new: "),
        "new: new.txt: python3 app.py (pid 2): PERF_TICKS: 950 samples, 1150 ticks of 4.000 ms = 4.600 s"
    );
    // Bonferroni over 3 tests at α = 0.01: |z| ≥ Φ⁻¹(1 − 0.01/6) = 2.935.
    assert!(line_with(&text, "test: ").ends_with(
        "Bonferroni correction over 3 functions, alpha 0.01: significant when |z| >= 2.94"
    ));
    let rows = rows(&text);
    let summary: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {} {} {} {}",
                r.function,
                r.cells[BASE_SELF],
                r.cells[NEW_SELF],
                r.cells[CHANGE],
                r.cells[Z],
                r.cells[P_ADJUSTED],
                r.cells[11]
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "g (/work/app.py:20) 60.00 39.13 -20.87 -5.59 6.7e-8 yes",
            "f (/work/app.py:10) 30.00 34.78 +4.78 +5.57 7.6e-8 yes",
            "h (/work/app.py:30) 10.00 26.09 +16.09 +0.38 1.000 no",
        ]
    );
    // The same z as computed here.
    assert!((row(&rows, "f").number(Z) - z(300.0, 1000.0, 400.0, 950.0)).abs() < 0.005);
    assert!((row(&rows, "h").number(Z) - z(100.0, 1000.0, 100.0, 950.0)).abs() < 0.005);

    // f grew by 4.78 points, significantly; h by 16.09, not significantly.
    for (points, status) in [("4", 1), ("4.78", 1), ("5", 0), ("15", 0)] {
        let output = run(
            &[
                "--diff",
                "base.txt",
                "new.txt",
                "--fail-on-regression",
                points,
            ],
            &dir.0,
        );
        assert_status(&output, status);
        if status == 1 {
            assert!(line_with(&stdout(&output), "result: ")
                .ends_with(": f (/work/app.py:10) +4.78 points"));
        }
    }
}

#[test]
fn benjamini_hochberg_and_alpha() {
    let dir = hand_dir("benjamini_hochberg_and_alpha");
    let output = run(
        &["--diff", "base.txt", "new.txt", "--correction", "bh"],
        &dir.0,
    );
    assert_status(&output, 0);
    let text = stdout(&output);
    // No single threshold for BH.
    assert!(line_with(&text, "test: ")
        .ends_with("Benjamini-Hochberg correction over 3 functions, alpha 0.01"));
    // By hand: sorted p 2.24e-8 (g), 2.55e-8 (f), 0.702 (h) times 3/1, 3/2, 3/3 =
    // 6.7e-8, 3.8e-8, 0.702; made monotone from the largest: g 3.8e-8, f 3.8e-8.
    let rows = rows(&text);
    assert_eq!(row(&rows, "g").cells[P_ADJUSTED], "3.8e-8");
    assert_eq!(row(&rows, "f").cells[P_ADJUSTED], "3.8e-8");
    assert_eq!(row(&rows, "h").cells[P_ADJUSTED], "0.702");

    // At α = 0.9, h's Bonferroni p (1.0) is still too large; with BH (0.702) it is not.
    let output = run(&["--diff", "base.txt", "new.txt", "--alpha", "0.9"], &dir.0);
    assert!(!row(&rows_of(&output), "h").significant());
    let output = run(
        &[
            "--diff",
            "base.txt",
            "new.txt",
            "--alpha",
            "0.9",
            "--correction",
            "bh",
        ],
        &dir.0,
    );
    assert!(row(&rows_of(&output), "h").significant());
}

fn rows_of(output: &Output) -> Vec<Row> {
    assert_status(output, 0);
    rows(&stdout(output))
}

/// The cells of a markdown table row.
fn cells(line: &str) -> Vec<String> {
    let inner = line
        .trim()
        .strip_prefix('|')
        .unwrap()
        .strip_suffix('|')
        .unwrap();
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut escaped = false;
    for c in inner.chars() {
        match c {
            '|' if !escaped => cells.push(std::mem::take(&mut cell).trim().to_string()),
            '\\' if !escaped => escaped = true,
            _ => {
                if escaped && c != '|' {
                    cell.push('\\');
                }
                escaped = false;
                cell.push(c);
            }
        }
    }
    cells.push(cell.trim().to_string());
    cells
}

#[test]
fn markdown_for_pull_requests() {
    let dir = data();
    let args = [
        "--diff",
        "mixed-base-1.gz",
        "mixed-slow.gz",
        "--fail-on-regression",
        "2",
        "--hide",
        "libpython",
    ];
    let markdown = run(&[&args[..], &["--markdown"]].concat(), &dir);
    assert_status(&markdown, 1);
    let format = run(&[&args[..], &["--format", "markdown"]].concat(), &dir);
    assert_eq!(stdout(&format), stdout(&markdown));
    let text = stdout(&markdown);
    assert!(
        text.starts_with("### pyigprof-analyse: PERF_TICKS self share per function, base → new\n"),
        "{text}"
    );
    assert!(text.contains("\n**REGRESSION: 1 function(s) grew significantly by more than 2.00 points: `python_work` (`/tmp/pyigprof-diff/mixed.py:22`) +"), "{text}");
    assert!(text.contains("Bonferroni correction over"), "{text}");

    let table: Vec<&str> = text
        .lines()
        .skip_while(|line| !line.starts_with("| function |"))
        .take_while(|line| line.starts_with('|'))
        .collect();
    let header = cells(table[0]);
    assert_eq!(header.len(), 13);
    assert_eq!(header[0], "function");
    assert_eq!(header[10], "z");
    assert!(table[1].starts_with("|---|--:|"), "{}", table[1]);
    let first = cells(table[2]);
    assert_eq!(first[0], "`python_work` (`/tmp/pyigprof-diff/mixed.py:22`)");
    assert_eq!(first[12], "yes");
    // Same numbers as the text format.
    let plain = run(&args, &dir);
    let work = rows(&stdout(&plain)).into_iter().next().unwrap();
    assert_eq!(&first[1..], &work.cells[..]);
    // Every row has every cell; names with `<…>` stay in code spans.
    for line in &table[2..] {
        assert_eq!(cells(line).len(), 13, "{line}");
    }
    assert!(text.contains("| `<module>` ("), "{text}");
    assert_eq!(table.len() - 2, 20);
}

#[test]
fn usage_and_input_errors_exit_2() {
    let dir = hand_dir("usage_and_input_errors_exit_2");
    dir.write(
        "mem.txt",
        b"P=(HEX ID=7 N=(app) T=0.010000)\nC1 FN0=(F0=(/work/app)+100 N=(main))+5 V0=(MEM_TOTAL):(1,64,64)\n",
    );
    dir.write("idle.txt", b"P=(HEX ID=8 N=(true) T=0.004000)\nC1 FN0=(F0=(/bin/true)+10 N=(main))+0 V0=(PERF_TICKS):(0,0,0)\n");
    let cases: [(&[&str], &str); 5] = [
        (
            &["--diff", "base.txt", "missing.txt"],
            "pyigprof-analyse: missing.txt: cannot read: No such file or directory (os error 2)\n",
        ),
        (
            &["--diff", "mem.txt", "mem.txt", "-r", "MEM_TOTAL"],
            "pyigprof-analyse: mem.txt: --diff compares sampled counters (PERF_TICKS or another *_TICKS counter), not MEM_TOTAL\n",
        ),
        (
            &["--diff", "base.txt", "mem.txt"],
            "pyigprof-analyse: mem.txt: no counter PERF_TICKS in the profile; its counters: MEM_TOTAL\n",
        ),
        (
            &["--diff", "idle.txt", "new.txt"],
            "pyigprof-analyse: idle.txt: no samples of PERF_TICKS to compare\n",
        ),
        (
            &["--diff", "base.txt", "new.txt", "--alpha", "1.5"],
            "error: invalid value '1.5' for '--alpha <ALPHA>': expected a number between 0 and 1 (exclusive), found \"1.5\"\n\nFor more information, try '--help'.\n",
        ),
    ];
    for (args, message) in cases {
        let output = run(args, &dir.0);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert_eq!(stdout(&output), "", "{args:?}");
        assert_eq!(stderr(&output), message, "{args:?}");
    }
    // Command-line mistakes: clap's message, status 2.
    for args in [
        &["--diff", "base.txt"][..],
        &["--fail-on-regression", "2", "base.txt"],
        &["--markdown", "base.txt"],
        &["-b", "base.txt", "new.txt"],
        &["--diff-mode", "new.txt"],
        &["--diff", "base.txt", "new.txt", "--tree"],
        &["--diff", "base.txt", "new.txt", "other.txt"],
        &[
            "--diff",
            "base.txt",
            "new.txt",
            "--fail-on-regression",
            "-1",
        ],
        &["--diff", "base.txt", "new.txt", "--correction", "holm"],
    ] {
        let output = run(args, &dir.0);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert_eq!(stdout(&output), "", "{args:?}");
        assert!(
            stderr(&output).starts_with("error: "),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}
