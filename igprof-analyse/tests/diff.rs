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
use igprof_analyse::report::Measure;

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

/// One row of the text table: its 15 number cells (as printed) and the function.
#[derive(Debug)]
struct Row {
    cells: Vec<String>,
    function: String,
}

impl Row {
    fn number(&self, column: usize) -> f64 {
        self.cells[column]
            .parse()
            .unwrap_or_else(|_| panic!("column {column} of {self:?}"))
    }
    fn significant(&self) -> bool {
        self.cells[SIGNIFICANT] != "no"
    }
}

const BASE_SELF: usize = 0;
const NEW_SELF: usize = 1;
const CHANGE: usize = 2;
const Z: usize = 5;
const P_ADJUSTED: usize = 6;
const BASE_CUM: usize = 7;
const NEW_CUM: usize = 8;
const CUM_CHANGE: usize = 9;
const CUM_Z: usize = 12;
const CUM_P_ADJUSTED: usize = 13;
const SIGNIFICANT: usize = 14;

/// The table rows of a text diff.
fn rows(text: &str) -> Vec<Row> {
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .position(|line| line.trim_start().starts_with("base %"))
        .unwrap_or_else(|| panic!("no table in {text}"));
    assert_eq!(
        lines[header].split_whitespace().collect::<Vec<_>>().join(" "),
        "base % new % change base s new s z p (adj.) base cum % new cum % cum change base cum s new cum s cum z cum p (adj.) signif. function (file)"
    );
    lines[header + 1..]
        .iter()
        .take_while(|line| !line.starts_with('(') && !line.starts_with("result:"))
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            Row {
                cells: words[..15].iter().map(|w| w.to_string()).collect(),
                function: words[15..].join(" "),
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

/// The number of tests m the printed test line says the correction is over.
fn tests_made(text: &str) -> f64 {
    let test = line_with(text, "test: ");
    let after = test.split(" correction over ").nth(1).unwrap();
    after.split(' ').next().unwrap().parse().unwrap()
}

/// python_work's samples in a profile in the Python view, counted here from the call
/// tree: (self samples, cumulative samples, cumulative ticks, total samples, total
/// ticks). A node is under python_work when it or one of its callers is python_work;
/// each node's samples are counted once, however often python_work recurses above it.
fn python_work_samples(name: &str) -> (f64, f64, f64, f64, f64) {
    let profile =
        igprof_analyse::view::python(&igprof_analyse::read_profiles(&[data().join(name)]).unwrap());
    let (_, counter) = Measure::select(&profile, "PERF_TICKS").unwrap();
    let counter = counter.unwrap();
    let work = profile
        .functions()
        .iter()
        .position(|f| f.name == "python_work")
        .unwrap() as u32;
    let nodes = profile.nodes();
    let mut under = vec![false; nodes.len()];
    let (mut own, mut cumulative, mut cumulative_ticks, mut samples, mut ticks) = (0, 0, 0, 0, 0);
    for (index, node) in nodes.iter().enumerate() {
        // Callers come before their callees.
        under[index] =
            node.function == work || node.parent.is_some_and(|parent| under[parent as usize]);
        let values = node.value(counter);
        samples += values.count;
        ticks += values.amount;
        if under[index] {
            cumulative += values.count;
            cumulative_ticks += values.amount;
        }
        if node.function == work {
            own += values.count;
        }
    }
    (
        own as f64,
        cumulative as f64,
        cumulative_ticks as f64,
        samples as f64,
        ticks as f64,
    )
}

#[track_caller]
fn assert_status(output: &Output, status: i32) {
    assert_eq!(output.status.code(), Some(status), "{}", stderr(output));
    assert_eq!(stderr(output), "");
}

#[test]
fn repeated_runs_are_not_flagged() {
    for (base, new) in [
        ("mixed-base-1.gz", "mixed-base-2.gz"),
        ("mixed-base-2.gz", "mixed-base-1.gz"),
    ] {
        let output = run(&["--diff", base, new, "--top=0"], &data());
        assert_status(&output, 0);
        let text = stdout(&output);
        assert!(
            line_with(&text, "test: ").contains("Bonferroni correction over"),
            "{text}"
        );
        let rows = rows(&text);
        let limit = critical(&text);
        assert!(limit > 3.0 && limit < 4.5, "{limit}");
        // Every function has at least one test, and every test made is below the
        // threshold, self and cumulative.
        let mut made = 0.0;
        for row in &rows {
            assert!(!row.significant(), "{row:?}");
            for column in [Z, CUM_Z] {
                if row.cells[column] != "-" {
                    made += 1.0;
                    assert!(row.number(column).abs() < limit, "{row:?}");
                }
            }
            assert!(made > 0.0, "{row:?}");
        }
        assert_eq!(made, tests_made(&text), "{text}");
        assert_eq!(
            line_with(&text, "result: "),
            "result: no significant change"
        );
        // The largest functions' shares barely move: python_work by less than a point,
        // self and cumulative.
        let work = row(&rows, "python_work");
        for column in [CHANGE, CUM_CHANGE] {
            assert!(work.number(column).abs() < 1.0, "{work:?}");
        }
        for column in [Z, CUM_Z] {
            assert!(work.number(column).abs() < 2.0, "{work:?}");
        }

        // Whatever the threshold, a run is no regression of its twin.
        let output = run(&["--diff", base, new, "--fail-on-regression", "0"], &data());
        assert_status(&output, 0);
        assert!(
            line_with(&stdout(&output), "result: ").starts_with(
                "result: OK: no function's self or cumulative share grew significantly by more than 0.00 points (0 significant changes)"
            ),
            "{}",
            stdout(&output)
        );
    }
}

/// The dispersion the test line gives: with one run per side the one every z was divided
/// by the root of, with several the pooled one.
fn dispersion(text: &str) -> f64 {
    let test = line_with(text, "test: ");
    let after = test
        .split("dispersion ")
        .nth(1)
        .unwrap_or_else(|| panic!("no dispersion in {test}"));
    let number: String = after
        .chars()
        .take_while(|c| *c == '.' || c.is_ascii_digit())
        .collect();
    number.parse().unwrap_or_else(|_| panic!("{test}"))
}

/// The runs of the base side, each mixed.py as it is.
const BASE_RUNS: [&str; 2] = ["mixed-base-1.gz", "mixed-base-2.gz"];

#[test]
fn slowed_function_is_flagged() {
    // One run per side: the comparison's own z-scores give its dispersion (λ). Here they
    // hold real changes (python_work's interpreter work, hashing's share), so λ is about
    // 3: python_work's cumulative growth, significant on its samples alone, is not
    // beyond it.
    for base in BASE_RUNS {
        // The options a user gives: none.
        let output = run(&["--diff", base, "mixed-slow.gz"], &data());
        assert_status(&output, 0);
        let text = stdout(&output);
        assert!(text.contains("\nPython view: "), "{text}");
        assert!(
            line_with(&text, "test: ").contains(", one run per side: run-to-run variation estimated from the comparison's own z-scores (dispersion "),
            "{text}"
        );
        let lambda = dispersion(&text);
        assert!(lambda > 2.5 && lambda < 3.5, "{text}");
        let rows = rows(&text);
        let work = row(&rows, "python_work");

        // The figures are those of the call tree, counted here.
        let (self1, x1, ticks1, n1, total1) = python_work_samples(base);
        let (self2, x2, ticks2, n2, total2) = python_work_samples("mixed-slow.gz");
        let (share1, share2) = (ticks1 / total1 * 100.0, ticks2 / total2 * 100.0);
        assert!((work.number(BASE_CUM) - share1).abs() <= 0.005, "{work:?}");
        assert!((work.number(NEW_CUM) - share2).abs() <= 0.005, "{work:?}");
        assert!(
            (work.number(CUM_CHANGE) - (share2 - share1)).abs() <= 0.005,
            "{work:?}"
        );
        assert!(work.number(CUM_CHANGE) > 4.0, "{work:?}");
        // z: the samples' z over √λ (λ printed to 2 decimals).
        let cumulative_z = z(x1, n1, x2, n2);
        assert!(cumulative_z > critical(&text), "{text}");
        assert!(
            (work.number(CUM_Z) - cumulative_z / lambda.sqrt()).abs() <= 0.01,
            "{work:?}"
        );
        assert!(
            (work.number(Z) - z(self1, n1, self2, n2) / lambda.sqrt()).abs() <= 0.01,
            "{work:?}"
        );
        assert!(work.number(CUM_Z) < critical(&text), "{text}");
        assert_eq!(work.cells[SIGNIFICANT], "no", "{text}");
        // Bonferroni: p × m, printed with 3 decimals (here ≥ 0.001).
        let p = igprof_analyse::stats::two_sided_p(work.number(CUM_Z)) * tests_made(&text);
        assert!(
            (work.number(CUM_P_ADJUSTED) - p.min(1.0)).abs() <= 0.01,
            "{p} {work:?}"
        );
        // The cumulative shares agree with what the program measured itself (±1.5
        // points): python_work's CPU time, with everything it calls.
        let share = |name: &str| {
            let (_, total, work) = MEASURED.iter().find(|m| m.0 == name).unwrap();
            work / total * 100.0
        };
        assert!((share1 - share(base)).abs() < 1.5, "{share1}");
        assert!((share2 - share("mixed-slow.gz")).abs() < 1.5, "{share2}");
    }

    // Both runs of the program as it is against the slowed one: how much each share
    // varies between runs is measured on the base side (1 degree of freedom per share),
    // and python_work's cumulative growth is significant.
    let output = run(
        &["--diff", BASE_RUNS[0], BASE_RUNS[1], "--", "mixed-slow.gz"],
        &data(),
    );
    assert_status(&output, 0);
    let text = stdout(&output);
    assert!(
        line_with(&text, "test: ").contains(
            "(n = all samples of each side's runs merged), run-to-run variation measured between 2 base runs and 1 new run: typical dispersion "
        ),
        "{text}"
    );
    // The two runs differ by about their samples' noise: the typical dispersion is near
    // 1 (at least 1 is used).
    let pooled = dispersion(&text);
    assert!(pooled > 0.5 && pooled < 1.5, "{text}");
    let rows = rows(&text);
    let work = row(&rows, "python_work");
    // python_work's extra time is interpreter work (`%` on integers, allocating them)
    // that the Python view shows as its children: its cumulative share grew
    // significantly, not its self share.
    assert_eq!(work.cells[SIGNIFICANT], "cum", "{text}");
    assert!(work.number(CUM_Z) > critical(&text), "{text}");
    assert!(work.number(Z).abs() < critical(&text), "{text}");
    // Listed first: the largest significant change.
    assert!(rows[0].function.starts_with("python_work "), "{text}");
    // The shares are those of the base runs merged.
    let runs = BASE_RUNS.map(python_work_samples);
    let merged = |pick: fn(&(f64, f64, f64, f64, f64)) -> f64| runs.iter().map(pick).sum::<f64>();
    let (x1, ticks1, n1, total1) = (
        merged(|r| r.1),
        merged(|r| r.2),
        merged(|r| r.3),
        merged(|r| r.4),
    );
    let (_, x2, ticks2, n2, total2) = python_work_samples("mixed-slow.gz");
    assert!(
        (work.number(BASE_CUM) - ticks1 / total1 * 100.0).abs() <= 0.005,
        "{work:?}"
    );
    assert!((work.number(NEW_CUM) - ticks2 / total2 * 100.0).abs() <= 0.005);
    // Its z: the samples' z over the root of its moderated dispersion, (d0 φ̂ + X²) / (d0
    // + 1), X² the Pearson statistic of its cumulative samples in the two base runs.
    let p = x1 / n1;
    let chi_square: f64 = runs
        .iter()
        .map(|r| (r.1 - r.3 * p).powi(2) / (r.3 * p * (1.0 - p)))
        .sum();
    let d0 = igprof_analyse::report::diff::DEFAULT_PRIOR_WEIGHT;
    let moderated = ((d0 * pooled.max(1.0) + chi_square) / (d0 + 1.0)).max(1.0);
    assert!(
        (work.number(CUM_Z) - z(x1, n1, x2, n2) / moderated.sqrt()).abs() <= 0.02,
        "{work:?} {chi_square} {moderated}"
    );

    // The program runs for a fixed CPU time: hashing got the smaller share, in
    // libcrypto's own code (self and cumulative) and its callers (cumulative).
    let hashing = row(&rows, "@?0x29c240");
    assert_eq!(hashing.cells[SIGNIFICANT], "both", "{hashing:?}");
    assert!(hashing.number(CHANGE) < -4.0, "{hashing:?}");
    assert_eq!(row(&rows, "digest").cells[SIGNIFICANT], "cum");
    let result = line_with(&text, "result: ");
    assert!(
        result.contains(" significant change(s): python_work (/tmp/pyigprof-diff/mixed.py:22) +"),
        "{result}"
    );
    assert!(
        result.contains(&format!(
            "python_work (/tmp/pyigprof-diff/mixed.py:22) {} points cumulative; ",
            work.cells[CUM_CHANGE]
        )),
        "{result}"
    );
}

#[test]
fn fail_on_regression_exit_status() {
    // Two runs of the program as it is against the slowed one (one run per side does not
    // tell python_work's growth from the comparison's own variation: above).
    let dir = data();
    let slow = run(
        &[
            "--diff",
            BASE_RUNS[0],
            BASE_RUNS[1],
            "--",
            "mixed-slow.gz",
            "--fail-on-regression",
            "2",
        ],
        &dir,
    );
    assert_status(&slow, 1);
    let text = stdout(&slow);
    let growth = row(&rows(&text), "python_work").cells[CUM_CHANGE].clone();
    assert_eq!(
        line_with(&text, "result: "),
        format!("result: REGRESSION: 1 function(s) grew significantly by more than 2.00 points: python_work (/tmp/pyigprof-diff/mixed.py:22) {growth} points cumulative")
    );
    // The growth (about 6 points) is below 10 points: no failure. The share of libcrypto
    // fell: never a regression.
    let output = run(
        &[
            "--diff",
            BASE_RUNS[0],
            BASE_RUNS[1],
            "--",
            "mixed-slow.gz",
            "--fail-on-regression",
            "10",
        ],
        &dir,
    );
    assert_status(&output, 0);
    assert!(line_with(&stdout(&output), "result: ").starts_with(
        "result: OK: no function's self or cumulative share grew significantly by more than 10.00 points ("
    ));
    // The other way round python_work got faster, never a regression; hashing's share
    // grew back by about 5 points, significantly: a regression at 0 points, of
    // libcrypto's own code (self and cumulative) and of its callers (cumulative).
    let output = run(
        &[
            "--diff",
            "mixed-slow.gz",
            "--",
            BASE_RUNS[0],
            BASE_RUNS[1],
            "--fail-on-regression",
            "0",
        ],
        &dir,
    );
    assert_status(&output, 1);
    let result = line_with(&stdout(&output), "result: ").to_string();
    assert!(result.starts_with("result: REGRESSION: "), "{result}");
    assert!(!result.contains("python_work"), "{result}");
    assert!(
        result.contains("; @?0x29c240  (/lib/x86_64-linux-gnu/libcrypto.so.3) +5.36 points self and cumulative; "),
        "{result}"
    );
    assert!(
        result.contains("digest (/tmp/pyigprof-diff/mixed.py:38) +5.35 points cumulative"),
        "{result}"
    );
    // IgProf's spelling, -b once per base run, gives the same report.
    let igprof = run(
        &[
            "-b",
            BASE_RUNS[0],
            "-b",
            BASE_RUNS[1],
            "--diff-mode",
            "mixed-slow.gz",
            "--fail-on-regression",
            "2",
        ],
        &dir,
    );
    assert_status(&igprof, 1);
    assert_eq!(stdout(&igprof), text);
}

#[test]
fn cumulative_test_finds_interpreter_work() {
    // python_work's extra time is interpreter work (l_mod, PyLong_FromLong, …): the Python
    // view shows it as python_work's children, and with every frame shown it is the
    // same. No function's self share grows significantly; python_work's cumulative
    // share does.
    for view in [&[][..], &["--all-frames"]] {
        let output = run(
            &[
                &[
                    "--diff",
                    BASE_RUNS[0],
                    BASE_RUNS[1],
                    "--",
                    "mixed-slow.gz",
                    "--top=0",
                ][..],
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
        // The only self shares that changed significantly are those that fell
        // (libcrypto's hashing).
        for row in &rows {
            if matches!(row.cells[SIGNIFICANT].as_str(), "self" | "both") {
                assert!(row.number(CHANGE) < 0.0, "{row:?}");
            }
        }
        let work = row(&rows, "python_work");
        assert_eq!(work.cells[SIGNIFICANT], "cum", "{text}");
        assert!(work.number(CUM_CHANGE) > 4.0, "{work:?}");
        assert!(
            work.number(BASE_SELF) < work.number(BASE_CUM) / 2.0,
            "{work:?}"
        );
    }
    // With the interpreter hidden (--hide libpython) its work is python_work's own time:
    // both shares grow by the same, significantly.
    let output = run(
        &[
            "--diff",
            BASE_RUNS[0],
            BASE_RUNS[1],
            "--",
            "mixed-slow.gz",
            "--hide",
            "libpython",
        ],
        &data(),
    );
    assert_status(&output, 0);
    let work = row(&rows(&stdout(&output)), "python_work").cells.clone();
    assert_eq!(work[SIGNIFICANT], "both");
    assert_eq!(work[BASE_SELF], work[BASE_CUM]);
    assert_eq!(work[NEW_SELF], work[NEW_CUM]);
    assert_eq!(work[CHANGE], work[CUM_CHANGE]);
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
/// By hand (shares of ticks, tests on samples). f, g and h call nothing: each has a self
/// and a cumulative test, the same; `<module>` has no samples of its own and is on every
/// sample of both profiles, so it has no test. m = 6 tests of 3 functions:
/// - f: 30 % → 400/1150 = 34.78 %, +4.78 points; p̂ = 700/1950,
///   z = (400/950 − 0.3) / √(p̂(1−p̂)(1/1000 + 1/950)) = +5.570, p = 2.55e-8,
///   Bonferroni 6p = 1.5e-7;
/// - g: 60 % → 39.13 %, −20.87 points; z = −5.593, p = 2.24e-8, 6p = 1.3e-7;
/// - h: 10 % → 26.09 %, +16.09 points in time, but 100 samples in both: z = +0.383,
///   p = 0.702, 6p ≥ 1: not significant. Counting ticks as samples would have
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
        "base: base.txt: python3 app.py (pid 1): PERF_TICKS: 1000 samples, 1000 ticks of 4.000 ms = 4.000 s; a 10 % share is ±1.9 points (95 %)"
    );
    assert_eq!(
        line_with(&text, "new: "),
        "new: new.txt: python3 app.py (pid 2): PERF_TICKS: 950 samples, 1150 ticks of 4.000 ms = 4.600 s; a 10 % share is 8.3-12.1 % (95 %)"
    );
    // Bonferroni over 6 tests at α = 0.01: |z| ≥ Φ⁻¹(1 − 0.01/12) = 3.144.
    assert!(line_with(&text, "test: ").ends_with(
        "Bonferroni correction over 6 tests of 3 functions, alpha 0.01: significant when |z| >= 3.14"
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
                r.cells[SIGNIFICANT]
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "g (/work/app.py:20) 60.00 39.13 -20.87 -5.59 1.3e-7 both",
            "f (/work/app.py:10) 30.00 34.78 +4.78 +5.57 1.5e-7 both",
            "h (/work/app.py:30) 10.00 26.09 +16.09 +0.38 1.000 no",
        ]
    );
    // Leaves: the cumulative columns repeat the self ones.
    for row in &rows {
        assert_eq!(row.cells[BASE_CUM], row.cells[BASE_SELF], "{row:?}");
        assert_eq!(row.cells[NEW_CUM], row.cells[NEW_SELF], "{row:?}");
        assert_eq!(row.cells[CUM_CHANGE], row.cells[CHANGE], "{row:?}");
        assert_eq!(row.cells[CUM_Z], row.cells[Z], "{row:?}");
        assert_eq!(row.cells[CUM_P_ADJUSTED], row.cells[P_ADJUSTED], "{row:?}");
    }
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
                .ends_with(": f (/work/app.py:10) +4.78 points self and cumulative"));
        }
    }
}

#[test]
fn cpp_functions_are_named_as_in_the_other_tables() {
    // `std::map<std::string, std::vector<int>>::find`, mangled: 240 characters demangled,
    // `std::map<…>::find(…)` in --top's table and in the diff's.
    let find = "_ZNSt3mapINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt6vectorIiSaIiEESt4lessIS5_ESaISt4pairIKS5_S8_EEE4findERSC_";
    let dir = TempDir::new("cpp_names");
    // `find` in a native library, called by `<module>`; `g` in app.py.
    let native = |pid: u32, find_samples: u64, g_samples: u64| {
        format!(
            "P=(HEX ID={pid:x} N=(python3 app.py) T=0.004000)\n\
             C1 FN0=(F0=(/work/app.py)+1 N=(<module>))+0\n\
             C2 FN1=(F1=(/usr/lib/libmaps.so)+1000 N=({find}))+10 V0=(PERF_TICKS):({find_samples:x},{find_samples:x},1)\n\
             C2 FN2=(F0+a N=(g))+1 V0:({g_samples:x},{g_samples:x},1)\n"
        )
    };
    dir.write("base.txt", native(1, 300, 700).as_bytes());
    dir.write("new.txt", native(2, 450, 550).as_bytes());
    let output = run(
        &["--diff", "base.txt", "new.txt", "--fail-on-regression", "5"],
        &dir.0,
    );
    assert_status(&output, 1);
    let text = stdout(&output);
    let rows = rows(&text);
    assert_eq!(
        rows[0].function,
        "std::map<…>::find(…) (/usr/lib/libmaps.so)"
    );
    let result = line_with(&text, "result: ");
    assert!(
        result.contains("std::map<…>::find(…)") && result.contains("+15.00 points"),
        "{result}"
    );
    assert!(!text.contains("basic_string"), "{text}");
    let output = run(&["--diff", "base.txt", "new.txt", "--markdown"], &dir.0);
    assert_status(&output, 0);
    assert!(stdout(&output).contains("`std::map<…>::find(…)`"));
}

#[test]
fn function_on_every_sample_has_no_cumulative_test() {
    // f is on every sample of both profiles (10 of 10, 30 of 30): its self test is made
    // (z 0, p 1), its cumulative test is not; `<module>` has no test at all.
    let dir = TempDir::new("function_on_every_sample_has_no_cumulative_test");
    dir.write("base.txt", dump(1, &[("f", 10, 10)]).as_bytes());
    dir.write("new.txt", dump(2, &[("f", 30, 30)]).as_bytes());
    let output = run(&["--diff", "base.txt", "new.txt"], &dir.0);
    assert_status(&output, 0);
    let text = stdout(&output);
    assert!(
        line_with(&text, "test: ").ends_with(
            "Bonferroni correction over 1 test of 1 function, alpha 0.01: significant when |z| >= 2.58"
        ),
        "{text}"
    );
    let rows = rows(&text);
    assert_eq!(rows.len(), 1, "{text}");
    let f = &rows[0];
    assert_eq!(f.function, "f (/work/app.py:10)");
    assert_eq!(
        f.cells[..],
        [
            "100.00", "100.00", "+0.00", "0.040", "0.120", "+0.00", "1.000", "100.00", "100.00",
            "+0.00", "0.040", "0.120", "-", "-", "no"
        ]
    );
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
        .ends_with("Benjamini-Hochberg correction over 6 tests of 3 functions, alpha 0.01"));
    // By hand: sorted p 2.24e-8 (g self, g cumulative), 2.55e-8 (f, f), 0.702 (h, h)
    // times 6/1, …, 6/6 = 1.3e-7, 6.7e-8, 5.1e-8, 3.8e-8, 0.842, 0.702; made monotone
    // from the largest: g 3.8e-8, f 3.8e-8, h 0.702, the same for both tests.
    let rows = rows(&text);
    for (name, p) in [("g", "3.8e-8"), ("f", "3.8e-8"), ("h", "0.702")] {
        assert_eq!(row(&rows, name).cells[P_ADJUSTED], p);
        assert_eq!(row(&rows, name).cells[CUM_P_ADJUSTED], p);
    }

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
    assert_eq!(row(&rows_of(&output), "h").cells[SIGNIFICANT], "both");
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
        BASE_RUNS[0],
        BASE_RUNS[1],
        "--",
        "mixed-slow.gz",
        "--fail-on-regression",
        "2",
    ];
    let markdown = run(&[&args[..], &["--markdown"]].concat(), &dir);
    assert_status(&markdown, 1);
    let format = run(&[&args[..], &["--format", "markdown"]].concat(), &dir);
    assert_eq!(stdout(&format), stdout(&markdown));
    let text = stdout(&markdown);
    assert!(
        text.starts_with(
            "### pyigprof-analyse: PERF_TICKS self and cumulative shares per function, base → new\n"
        ),
        "{text}"
    );
    assert!(text.contains("\n**REGRESSION: 1 function(s) grew significantly by more than 2.00 points: `python_work` (`/tmp/pyigprof-diff/mixed.py:22`) +"), "{text}");
    assert!(text.contains(" points cumulative**\n"), "{text}");
    assert!(text.contains("Bonferroni correction over"), "{text}");

    let table: Vec<&str> = text
        .lines()
        .skip_while(|line| !line.starts_with("| function |"))
        .take_while(|line| line.starts_with('|'))
        .collect();
    let header = cells(table[0]);
    assert_eq!(header.len(), 16);
    assert_eq!(header[0], "function");
    assert_eq!(header[1 + Z], "z");
    assert_eq!(header[1 + CUM_Z], "cum z");
    assert_eq!(header[1 + SIGNIFICANT], "signif.");
    assert!(table[1].starts_with("|---|--:|"), "{}", table[1]);
    let first = cells(table[2]);
    assert_eq!(first[0], "`python_work` (`/tmp/pyigprof-diff/mixed.py:22`)");
    assert_eq!(first[1 + SIGNIFICANT], "cum");
    // Same numbers as the text format.
    let plain = run(&args, &dir);
    let work = rows(&stdout(&plain)).into_iter().next().unwrap();
    assert_eq!(&first[1..], &work.cells[..]);
    // Every row has every cell.
    for line in &table[2..] {
        assert_eq!(cells(line).len(), 16, "{line}");
    }
    assert_eq!(table.len() - 2, 20);
    // Several runs on a side: each listed function's dispersions follow, in a table of
    // their own; python_work's own, on the 1 degree of freedom of the two base runs.
    let dispersions: Vec<&str> = text
        .lines()
        .skip_while(|line| !line.starts_with("| function | own dispersion |"))
        .take_while(|line| line.starts_with('|'))
        .collect();
    assert_eq!(
        dispersions[0],
        "| function | own dispersion | dispersion used | own cum dispersion | cum dispersion used |"
    );
    assert_eq!(dispersions.len() - 2, 20, "{text}");
    let work = cells(dispersions[2]);
    assert_eq!(work[0], first[0]);
    assert!(work[3].ends_with(" (1 df)"), "{work:?}");
    assert!(work[4].parse::<f64>().unwrap() >= 1.0, "{work:?}");
    // Names with `<…>` stay in code spans.
    let all = stdout(&run(
        &[&args[..], &["--markdown", "--top=0"]].concat(),
        &dir,
    ));
    assert!(
        all.contains("\n| `<module>` (`<frozen site>:1`) |"),
        "{all}"
    );
}

#[test]
fn usage_and_input_errors_exit_2() {
    let dir = hand_dir("usage_and_input_errors_exit_2");
    dir.write(
        "mem.txt",
        b"P=(HEX ID=7 N=(app) T=0.010000)\nC1 FN0=(F0=(/work/app)+100 N=(main))+5 V0=(MEM_TOTAL):(1,64,64)\n",
    );
    dir.write(
        "fd.txt",
        b"P=(HEX ID=7 N=(app) T=0.010000)\nC1 FN0=(F0=(/work/app)+100 N=(main))+5 V0=(FD_USED):(1,3,3)\n",
    );
    dir.write(
        "freed.txt",
        b"P=(HEX ID=7 N=(app) T=0.010000)\nC1 FN0=(F0=(/work/app)+100 N=(main))+5 V0=(MEM_LIVE):(0,0,0)\n",
    );
    dir.write("idle.txt", b"P=(HEX ID=8 N=(true) T=0.004000)\nC1 FN0=(F0=(/bin/true)+10 N=(main))+0 V0=(PERF_TICKS):(0,0,0)\n");
    let cases: [(&[&str], &str); 6] = [
        (
            &["--diff", "base.txt", "missing.txt"],
            "pyigprof-analyse: missing.txt: cannot read: No such file or directory (os error 2)\n",
        ),
        (
            &["--diff", "fd.txt", "fd.txt", "-r", "FD_USED"],
            "pyigprof-analyse: fd.txt: --diff compares sampled counters (PERF_TICKS or another *_TICKS counter, PERF_* event counters such as PERF_PAGE_FAULTS) and memory counters (MEM_*), not FD_USED\n",
        ),
        (
            &["--diff", "freed.txt", "mem.txt", "-r", "MEM_LIVE"],
            "pyigprof-analyse: freed.txt: no bytes of MEM_LIVE to compare\n",
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
