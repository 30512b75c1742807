//! What the command-line tests share: a temporary directory per test, running the
//! binary, and checking its output and exit status.
#![allow(dead_code)]

pub mod pprof;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A directory of its own for one test, removed when the test ends.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(test: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "pyigprof-analyse-cli-{}-{test}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn write(&self, name: &str, content: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, content).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub fn gzip(text: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(text).unwrap();
    encoder.finish().unwrap()
}

/// Runs the analyser with `args` in `dir`, with `--no-resolve` first: the profiles of the
/// tests name libraries (`/lib/x86_64-linux-gnu/libz.so.1`, …) that may be missing, or
/// carry debug symbols, on the machine running the tests, and what those give is not
/// what these tests check (tests/resolve.rs does, with libraries it builds).
pub fn run(args: &[&str], dir: &Path) -> Output {
    let mut all = vec!["--no-resolve"];
    all.extend_from_slice(args);
    run_resolving(&all, dir)
}

/// Runs the analyser with exactly `args` in `dir`.
pub fn run_resolving(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pyigprof-analyse"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// Checks a failed run: exit status 2, nothing on stdout, exactly `message` on stderr.
#[track_caller]
pub fn assert_fails(output: &Output, message: &str) {
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stdout(output), "");
    assert_eq!(stderr(output), message);
}

/// Checks a successful run: exit status 0, nothing on stderr, exactly `report` on stdout.
#[track_caller]
pub fn assert_prints(output: &Output, report: &str) {
    assert_eq!(stderr(output), "");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(stdout(output), report);
}

/// The directory of the test profiles (tests/data). Tests on the real profiles run in
/// it, so that reports name the files briefly; they write nothing there.
pub fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}
