//! CPython's own regression tests as a conformance suite (scripts/cpython-conformance.py):
//! a chosen set of CPython's test files (signals, threads, subprocesses, `os`, I/O, the
//! allocator, `sys`, `atexit`, `gc`, audit hooks, `json.tool` and scripts run as
//! subprocesses, …) gives the same outcome for every test without and with the profiler, in
//! both clock modes ([`MODES`]: cpu through `pyigprof record --subprocesses`, and wall,
//! whose sampler process reads blocked threads from outside, through `LD_PRELOAD` alone),
//! neither with `PYIGPROF_QUIET` (tests that compare their subprocesses' stderr see the
//! profiler's lines if it writes any there), every profile the profiled runs write reads
//! back, and `record`'s list names every one of them.
//!
//! The whole matrix (`PYIGPROF_TESTS=full`): every interpreter that has its `test` package
//! runs the 20 files of [`TESTS`] (1–4 minutes each: one plain run, one per mode, with
//! `-j2`); `test_asyncio` and `test_multiprocessing_*`, several minutes per run, run on
//! Debian's static sid 3.15. The fast tier: the files of [`FAST_TESTS`] on three
//! interpreters ([`fast_interpreters`]). Every interpreter with all of them: `python3
//! scripts/cpython-conformance.py --modes record,wall`.

use pyigprof_suite::*;
use std::process::{Command, Stdio};

/// The script's CI set less `test_asyncio` and `test_multiprocessing_*` ([`LONG_TESTS`]).
const TESTS: &str = "test_signal,test_threading,test_threadsignals,test_subprocess,test_os,\
                     test_posix,test_faulthandler,test_sys,test_io,test_cmd_line,test_ctypes,\
                     test_mmap,test_time,test_pty,test_tracemalloc,test_audit,test_atexit,test_gc,\
                     test_json,test_cmd_line_script";

/// The profiled modes of every run: cpu mode through `pyigprof record --subprocesses`
/// (what a user types; its list of profiles is checked), and wall mode through
/// `LD_PRELOAD` alone.
const MODES: [&str; 2] = ["record", "wall"];

/// The whole matrix's modes: [`MODES`] and the lock profiler (`PYIGPROF_PROFILE=lock`),
/// whose hooks are written into every object's import table (`test_ctypes` loads
/// libraries whose constructors `dlopen`: opening objects by name there once crashed it).
const FULL_MODES: [&str; 3] = ["record", "wall", "lock"];

/// The fast tier's files, the longest first (regrtest hands them out in this order): those
/// whose tests found defects of the profiler so far (this repository's history) and those
/// about what the profiler interposes on. `test_io`: a read that the program's signal
/// interrupted was restarted and hung (d93905f); `test_subprocess`: a child listed a perf
/// event's descriptor (c6bc5c0, e08a2d8); `test_signal` and `test_threadsignals`: the
/// program's own handlers beside `SIGPROF`'s; `test_os`: descriptors, `fork`, `exec`;
/// `test_faulthandler`: fatal signals' handlers; `test_json` and `test_cmd_line_script`: run
/// Python subprocesses and compare their stderr (`json.tool`'s must be empty), which the
/// summary line broke when it went there. About 35–40 s a run at `-j4` on each of the three
/// interpreters, plain, so about 6 minutes for the nine runs.
const FAST_TESTS: &str = "test_io,test_subprocess,test_signal,test_os,test_faulthandler,\
                          test_threadsignals,test_cmd_line_script,test_json";

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

/// Runs `tests` on `chosen` with `jobs` regrtest workers, without and with the profiler in
/// both modes, and checks that the script passed and printed, for each interpreter and
/// mode, no outcome that differs and no unreadable profile.
fn conform(chosen: &[Interpreter], tests: &str, jobs: u32, modes: &[&str]) {
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
            &modes.join(","),
            "--tests",
            tests,
            "--jobs",
            &jobs.to_string(),
        ])
        .arg("--preload")
        .arg(&artifacts.preload)
        .arg("--analyse")
        .arg(&artifacts.analyse)
        .arg("--command")
        .arg(&artifacts.command)
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
        for mode in modes {
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

/// The fast tier's interpreters: the oldest Python 3 with its test package (pyenv's 3.6
/// here), one of pyenv's shared 3.11+ builds, and Debian's static, stripped sid 3.15
/// ([`LONG_TESTS_ON`]).
fn fast_interpreters() -> Vec<Interpreter> {
    let with_tests: Vec<Interpreter> = interpreters()
        .into_iter()
        .filter(|p| p.version.0 == 3 && has_test_package(p))
        .collect();
    let oldest = with_tests.first().cloned();
    let shared = fast_pick(
        "cpython_conformance",
        with_tests
            .iter()
            .filter(|p| p.name.starts_with("pyenv-") && p.version >= (3, 11))
            .cloned()
            .collect(),
    );
    let names: Vec<String> = oldest.into_iter().chain(shared).map(|p| p.name).collect();
    every_interpreter_for(
        "cpython_conformance",
        "interpreters with CPython's test package (fast tier: the oldest 3.x, a shared \
         pyenv build, Debian's static sid 3.15; PYIGPROF_TESTS=full runs all)",
        |p| names.contains(&p.name) || (p.name == LONG_TESTS_ON && has_test_package(p)),
    )
}

#[test]
fn cpython_tests_give_the_same_outcomes_under_the_profiler() {
    // One test, not two: each run uses both cores (-j2), and timing-dependent tests of
    // CPython's suite must not share them with another.
    if tier() == Tier::Fast {
        let chosen = fast_interpreters();
        if !chosen.is_empty() {
            // Four workers on the two cores: these files mostly wait (sleeps, timeouts,
            // children), and take about half the time they take with two (pyenv's 3.13,
            // plain: 21 s against 38 s for all but test_os). A test that differs runs
            // again in regrtest's own process before it counts.
            conform(&chosen, FAST_TESTS, 4, &MODES);
        }
        return;
    }
    let chosen = every_interpreter_for(
        "cpython_conformance",
        "interpreters with CPython's test package",
        has_test_package,
    );
    if !chosen.is_empty() {
        conform(&chosen, TESTS, 2, &FULL_MODES);
    }
    let long = every_interpreter_for(
        "cpython_conformance",
        "test_asyncio and test_multiprocessing_*",
        |p| p.name == LONG_TESTS_ON && has_test_package(p),
    );
    if !long.is_empty() {
        conform(&long, LONG_TESTS, 2, &MODES);
    }
}
