//! CPython's own regression tests as a conformance suite (scripts/cpython-conformance.py):
//! a chosen set of CPython's test files (signals, threads, subprocesses, `os`, I/O, the
//! allocator, `sys`, `atexit`, `gc`, audit hooks, …) gives the same outcome for every test
//! without and with the profiler, in both clock modes (cpu, and wall, whose sampler
//! process reads blocked threads from outside), and every profile the profiled runs write
//! reads back.
//!
//! Every interpreter that has its `test` package runs the 18 files of [`TESTS`] (1–4
//! minutes each: one plain run, one per mode, with `-j2`); `test_asyncio` and
//! `test_multiprocessing_*`, several minutes per run, run on Debian's static sid 3.15.
//! Every interpreter with all of them: `python3 scripts/cpython-conformance.py --modes
//! cpu,wall`.

use pyigprof_suite::*;
use std::process::{Command, Stdio};

/// The script's CI set less `test_asyncio` and `test_multiprocessing_*` ([`LONG_TESTS`]).
const TESTS: &str = "test_signal,test_threading,test_threadsignals,test_subprocess,test_os,\
                     test_posix,test_faulthandler,test_sys,test_io,test_cmd_line,test_ctypes,\
                     test_mmap,test_time,test_pty,test_tracemalloc,test_audit,test_atexit,test_gc";

/// The files of the script's CI set that take several minutes per run (the interpreter
/// runs those it has).
const LONG_TESTS: &str = "test_asyncio,test_multiprocessing_fork,test_multiprocessing_forkserver,\
                          test_multiprocessing_spawn";

/// The interpreter that runs [`LONG_TESTS`]: the newest, static and stripped.
const LONG_TESTS_ON: &str = "debian-sid-3.15";

/// Whether `python` has CPython's regression tests: its `test` package with regrtest and
/// the test files (Debian's stripped-down `test` package has only regrtest; 2.7 has no
/// `test.libregrtest`).
fn has_test_package(python: &Interpreter) -> bool {
    let code = "import importlib.util, test.libregrtest\n\
                raise SystemExit(importlib.util.find_spec('test.test_os') is None)";
    Command::new(&python.path)
        .args(["-I", "-c", code])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `tests` on `chosen`, without and with the profiler in both modes, and checks that
/// the script passed and printed, for each interpreter and mode, no outcome that differs
/// and no unreadable profile.
fn conform(chosen: &[Interpreter], tests: &str) {
    let paths: Vec<String> = chosen
        .iter()
        .map(|p| format!("{}={}", p.name, p.path.display()))
        .collect();
    let artifacts = artifacts();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/cpython-conformance.py"
    );
    let output = Command::new("python3")
        .arg(script)
        .args([
            "--pythons",
            &paths.join(","),
            "--modes",
            "cpu,wall",
            "--tests",
            tests,
        ])
        .arg("--preload")
        .arg(&artifacts.preload)
        .arg("--analyse")
        .arg(&artifacts.analyse)
        // Its progress, and every test that differs, as it goes (it runs for many minutes).
        .stderr(Stdio::inherit())
        .output()
        .expect("run python3 scripts/cpython-conformance.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    {
        // Not through eprintln!, which the test harness captures: the summary is shown.
        use std::io::Write;
        let _ = std::io::stderr().lock().write_all(stdout.as_bytes());
    }
    assert!(
        output.status.success(),
        "CPython's tests differ under the profiler (exit {:?}; the tests that differ are \
         listed above):\n{stdout}",
        output.status
    );
    // One summary line per interpreter and mode, with nothing that differs.
    for python in chosen {
        for mode in ["cpu", "wall"] {
            let line = stdout
                .lines()
                .find(|l| {
                    l.trim_start()
                        .starts_with(&format!("{} {mode}:", python.name))
                })
                .unwrap_or_else(|| panic!("no {mode} result for {}:\n{stdout}", python.name));
            assert!(line.contains(" 0 outcomes differ"), "{line}");
            assert!(line.contains(" 0 unreadable"), "{line}");
        }
    }
}

#[test]
fn cpython_tests_give_the_same_outcomes_under_the_profiler() {
    // One test, not two: each run uses both cores (-j2), and timing-dependent tests of
    // CPython's suite must not share them with another.
    let chosen = interpreters_for(
        "cpython_conformance",
        "interpreters with CPython's test package",
        has_test_package,
    );
    if !chosen.is_empty() {
        conform(&chosen, TESTS);
    }
    let long = interpreters_for(
        "cpython_conformance",
        "test_asyncio and test_multiprocessing_*",
        |p| p.name == LONG_TESTS_ON && has_test_package(p),
    );
    if !long.is_empty() {
        conform(&long, LONG_TESTS);
    }
}
