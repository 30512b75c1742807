//! CPython's own regression tests as a conformance suite (scripts/cpython-conformance.py):
//! a chosen set of CPython's test files (signals, threads, subprocesses, `os`, I/O, the
//! allocator, `sys`, `atexit`, `gc`, audit hooks, …) gives the same outcome for every test
//! without and with the profiler, and every profile the profiled run writes reads back.
//!
//! In the test suite it runs 18 test files in both clock modes (cpu, and wall, whose
//! sampler process reads blocked threads from outside) on three interpreters that stand
//! for the others: the oldest with audit hooks (3.8, shared libpython), a current shared
//! build (3.12) and a static, stripped Debian build (sid's 3.15), about 3 minutes each.
//! Every interpreter, with `test_asyncio` and `test_multiprocessing_*`:
//! `python3 scripts/cpython-conformance.py --modes cpu,wall`.

use pyigprof_suite::*;
use std::process::Command;

/// The script's CI set less `test_asyncio` and `test_multiprocessing_*`, which take several
/// minutes each per run (`python3 scripts/cpython-conformance.py` runs them).
const TESTS: &str = "test_signal,test_threading,test_threadsignals,test_subprocess,test_os,\
                     test_posix,test_faulthandler,test_sys,test_io,test_cmd_line,test_ctypes,\
                     test_mmap,test_time,test_pty,test_tracemalloc,test_audit,test_atexit,test_gc";

#[test]
fn cpython_tests_give_the_same_outcomes_under_the_profiler() {
    let chosen = interpreters_for(
        "cpython_conformance",
        "interpreters standing for the others (3.8, 3.12, Debian's static 3.15)",
        |p| {
            (p.name.starts_with("pyenv-") && matches!(p.version, (3, 8) | (3, 12)))
                || p.name == "debian-sid-3.15"
        },
    );
    if chosen.is_empty() {
        return;
    }
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
            TESTS,
        ])
        .arg("--preload")
        .arg(&artifacts.preload)
        .arg("--analyse")
        .arg(&artifacts.analyse)
        .output()
        .expect("run python3 scripts/cpython-conformance.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    {
        use std::io::Write;
        let _ = std::io::stderr()
            .lock()
            .write_all(format!("{stderr}{stdout}").as_bytes());
    }
    assert!(
        output.status.success(),
        "CPython's tests differ under the profiler (exit {:?}):\n{stdout}\n{stderr}",
        output.status
    );
    // One summary line per interpreter and mode, with nothing that differs.
    for python in &chosen {
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
