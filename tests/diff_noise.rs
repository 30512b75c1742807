//! `pyigprof-analyse --diff B1 B2 B3 -- N1 N2 N3` on real runs: does it keep its promise
//! between runs of the same program, whose shares vary from run to run by more than their
//! samples' binomial noise (CPython 3.12's specializing interpreter gives the same work
//! to a Python function or to `_PyLong_Add` differently per run), and does it still find
//! a function made 60 % heavier?
//!
//! bench/diff-calibration/programs.py's `two` (compute_hot ~75 % of the CPU time,
//! long_mod ~25 %) at 1 kHz, 2 CPU s per run: nine runs as it is and three with
//! compute_hot doing 60 % more work (`PYIGPROF_BENCH_HEAVY=1.6`), two at a time. Ten
//! comparisons of disjoint triples of the runs as it is may flag a regression once at
//! most (the bench's 40 pairs per program and rate measure the rate itself:
//! bench/diff-calibration/results-2026-12-05.md); a triple of them against the heavy
//! triple must name compute_hot among the regressions.

use pyigprof_suite::*;
use std::path::PathBuf;
use std::time::Instant;

/// CPU seconds per run.
const SECONDS: &str = "2";

/// Runs of the program as it is.
const BASE_RUNS: usize = 9;

/// Runs with compute_hot 60 % heavier.
const HEAVY_RUNS: usize = 3;

/// The ten same-vs-same comparisons: disjoint triples of the nine base runs (each run in
/// six or seven of them, never twice with the same five others).
const SAME: [([usize; 3], [usize; 3]); 10] = [
    ([0, 1, 2], [3, 4, 5]),
    ([6, 7, 8], [0, 1, 2]),
    ([3, 4, 5], [6, 7, 8]),
    ([0, 3, 6], [1, 4, 7]),
    ([2, 5, 8], [0, 3, 6]),
    ([1, 4, 7], [2, 5, 8]),
    ([0, 4, 8], [1, 5, 6]),
    ([2, 3, 7], [0, 4, 8]),
    ([1, 5, 6], [2, 3, 7]),
    ([0, 5, 7], [1, 3, 8]),
];

/// The profile of one run of `programs.py two` at 1 kHz, compute_hot's work times
/// `heavy`.
fn record(python: &Interpreter, heavy: &str) -> PathBuf {
    let programs = repo().join("bench/diff-calibration/programs.py");
    let programs = programs.to_str().expect("a UTF-8 path");
    let (run, _) = profiled_ok(
        python,
        &[programs, "two", SECONDS],
        &[("PYIGPROF_HZ", "1000"), ("PYIGPROF_BENCH_HEAVY", heavy)],
    );
    let profiles = run.profiles();
    assert_eq!(profiles.len(), 1, "{}", run.stderr());
    profiles[0].clone()
}

/// `--diff` of the runs `base` against the runs `new` with `--fail-on-regression 0`:
/// whether it says REGRESSION (exit status 1), and its test and result lines.
fn compare(base: &[&PathBuf], new: &[&PathBuf]) -> (bool, String, String) {
    let mut args: Vec<&str> = vec!["--diff"];
    args.extend(base.iter().map(|p| p.to_str().expect("a UTF-8 path")));
    args.push("--");
    args.extend(new.iter().map(|p| p.to_str().expect("a UTF-8 path")));
    args.extend(["--fail-on-regression", "0", "--top=0"]);
    let output = analyse(&args);
    let status = output.status.code();
    assert!(
        matches!(status, Some(0 | 1)),
        "{args:?}: {status:?}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let line = |prefix: &str| {
        text.lines()
            .find(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} line in {text}"))
            .to_string()
    };
    (status == Some(1), line("test: "), line("result: "))
}

#[test]
fn runs_of_the_same_program_are_not_flagged_and_a_heavier_function_is() {
    for python in interpreters_for("diff_noise", "interpreters of 3.6+", |i| {
        i.version >= (3, 6)
    }) {
        let started = Instant::now();
        // Two runs at a time (the machines have two cores or more).
        let jobs: Vec<&str> = [vec!["1"; BASE_RUNS], vec!["1.6"; HEAVY_RUNS]].concat();
        let mut profiles: Vec<PathBuf> = Vec::new();
        for pair in jobs.chunks(2) {
            let recorded: Vec<PathBuf> = std::thread::scope(|scope| {
                let running: Vec<_> = pair
                    .iter()
                    .map(|heavy| scope.spawn(|| record(&python, heavy)))
                    .collect();
                running
                    .into_iter()
                    .map(|run| run.join().expect("a recording thread"))
                    .collect()
            });
            profiles.extend(recorded);
        }
        let (base, heavy) = profiles.split_at(BASE_RUNS);
        let recorded = started.elapsed();

        let mut flagged = 0;
        for (a, b) in SAME {
            let (regression, test, result) = compare(&a.map(|i| &base[i]), &b.map(|i| &base[i]));
            flagged += usize::from(regression);
            eprintln!(
                "diff_noise: {}: base {a:?} vs base {b:?}: {result}",
                python.name
            );
            eprintln!("diff_noise:   {test}");
        }
        let (regression, test, result) = compare(
            &[&base[0], &base[1], &base[2]],
            &[&heavy[0], &heavy[1], &heavy[2]],
        );
        eprintln!(
            "diff_noise: {}: {flagged} of {} same-vs-same triple comparisons flagged; base [0, 1, 2] vs heavy [0, 1, 2]: {result}\ndiff_noise:   {test}\ndiff_noise: recorded in {:.1} s, compared in {:.1} s",
            python.name,
            SAME.len(),
            recorded.as_secs_f64(),
            (started.elapsed() - recorded).as_secs_f64()
        );
        assert!(
            flagged <= 1,
            "{}: {flagged} of {} comparisons of runs of the same program flagged a regression",
            python.name,
            SAME.len()
        );
        assert!(
            regression && result.contains(" compute_hot ("),
            "{}: compute_hot 60 % heavier is not among the regressions: {result}",
            python.name
        );
    }
}
