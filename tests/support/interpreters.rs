//! The Python interpreters the tests run on, and how many of them each test runs on: the
//! tier of the suite.
//!
//! - **The fast tier** (the default; what `.ci/run` and `scripts/test` run): each
//!   end-to-end test runs on *one* of the interpreters it accepts, chosen by the test's
//!   name ([`interpreters_for`]), so that the tests spread over every interpreter present
//!   and a test always gets the same one on a given machine; a few tests run on every
//!   interpreter in every tier ([`every_interpreter_for`]), so that every family present
//!   (2.7; 3.6–3.10; pyenv's shared 3.11–3.13; Debian's static 3.11; trixie's 3.13; sid's
//!   3.14 and 3.15) profiles a program whose own measurement its Python frames are checked
//!   against.
//! - **The whole matrix** (`PYIGPROF_TESTS=full`, `scripts/test --full`): every test on
//!   every interpreter it accepts.
//!
//! `PYIGPROF_TEST_PYTHONS=NAME,…` restricts either tier to the interpreters so named
//! (`pyenv-2.7.18`, `debian-sid-3.15`, or a part of a name: `2.7`, `sid`).
//!
//! Std and `libc` only: the preload crate's unit tests use this file too (its line-table
//! test).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// How much of the matrix the end-to-end tests run, from `PYIGPROF_TESTS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// `PYIGPROF_TESTS` unset, empty or `fast`: each test on one interpreter of those it
    /// accepts, a few on all of them; CPython's conformance set on a subset of files and
    /// interpreters.
    Fast,
    /// `PYIGPROF_TESTS=full`: every test on every interpreter it accepts, CPython's
    /// conformance set on every interpreter with its test package, the long files too.
    Full,
}

/// The tier this test process runs. Panics, naming the variable and what it takes, on any
/// other value (a typo must not quietly run the fast tier).
pub fn tier() -> Tier {
    static TIER: OnceLock<Tier> = OnceLock::new();
    *TIER.get_or_init(|| match std::env::var("PYIGPROF_TESTS") {
        Err(std::env::VarError::NotPresent) => Tier::Fast,
        Ok(value) if value.is_empty() || value == "fast" => Tier::Fast,
        Ok(value) if value == "full" => Tier::Full,
        Ok(value) => panic!("PYIGPROF_TESTS={value:?}: expected `fast` or `full`"),
        Err(e) => panic!("PYIGPROF_TESTS: {e}"),
    })
}

/// A Python interpreter present on this machine.
#[derive(Clone, Debug)]
pub struct Interpreter {
    /// How tests name it, e.g. `pyenv-3.11.7` or `debian-3.11`.
    pub name: String,
    /// Executable path.
    pub path: PathBuf,
    /// `(major, minor)`.
    pub version: (u32, u32),
}

/// Where `scripts/install-debian-pythons.sh` installs Debian's newer interpreters (trixie's
/// 3.13, sid's 3.14 and 3.15): `$PYIGPROF_PYTHONS_DIR`, else
/// `${XDG_CACHE_HOME:-$HOME/.cache}/pyigprof/pythons`.
pub fn installed_pythons_dir() -> Option<PathBuf> {
    cache_dir("PYIGPROF_PYTHONS_DIR", "pythons")
}

/// `$<variable>`, else `${XDG_CACHE_HOME:-$HOME/.cache}/pyigprof/<leaf>` (empty variables
/// count as unset).
pub fn cache_dir(variable: &str, leaf: &str) -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var(variable)
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("pyigprof").join(leaf)))
        .or_else(|| var("HOME").map(|d| d.join(".cache/pyigprof").join(leaf)))
}

/// Every interpreter the brief lists that is present: pyenv's builds, Debian's static
/// `/usr/bin/python3.11`, and the Debian builds the install script put in
/// [`installed_pythons_dir`] (listed in its `interpreters.txt`), oldest first, less those
/// `PYIGPROF_TEST_PYTHONS` leaves out. Versions are asked of each interpreter, never taken
/// from its name. Found once per test process.
pub fn interpreters() -> Vec<Interpreter> {
    static FOUND: OnceLock<Vec<Interpreter>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let wanted = std::env::var("PYIGPROF_TEST_PYTHONS").unwrap_or_default();
            let wanted: Vec<&str> = wanted
                .split(',')
                .map(str::trim)
                .filter(|w| !w.is_empty())
                .collect();
            let mut found = present_interpreters();
            if !wanted.is_empty() {
                found.retain(|i| wanted.iter().any(|w| i.name.contains(w)));
            }
            found
        })
        .clone()
}

/// Every interpreter present, oldest first (see [`interpreters`]).
fn present_interpreters() -> Vec<Interpreter> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/root/.pyenv/versions") {
        for entry in entries.flatten() {
            let dir = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path().join("bin/python");
            if let Some(version) = version_of(&path) {
                found.push(Interpreter {
                    name: format!("pyenv-{dir}"),
                    path,
                    version,
                });
            }
        }
    }
    let debian = PathBuf::from("/usr/bin/python3.11");
    if let Some(version) = version_of(&debian) {
        found.push(Interpreter {
            name: "debian-3.11".into(),
            path: debian,
            version,
        });
    }
    if let Some(list) = installed_pythons_dir()
        .and_then(|dir| std::fs::read_to_string(dir.join("interpreters.txt")).ok())
    {
        for line in list.lines() {
            let Some((name, path)) = line.split_once(' ') else {
                continue;
            };
            let path = PathBuf::from(path.trim());
            if let Some(version) = version_of(&path) {
                found.push(Interpreter {
                    name: name.to_string(),
                    path,
                    version,
                });
            }
        }
    }
    found.sort_by(|a, b| (a.version, &a.name).cmp(&(b.version, &b.name)));
    found
}

fn version_of(path: &Path) -> Option<(u32, u32)> {
    let out = Command::new(path)
        .args(["-c", "import sys; print('%d %d' % sys.version_info[:2])"])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let mut parts = text.split_whitespace().map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// The interpreters a test runs on (each gets Python frames: 3.8+ through the audit hook,
/// 3.6/3.7 from the thread-state key in memory, 2.7 from the GIL holder's state and the
/// interpreter's list of thread states): every one present in the whole matrix, one in the
/// fast tier ([`interpreters_for`]); printed so that the test log says which ran.
pub fn interpreters_with_python_frames(test: &str) -> Vec<Interpreter> {
    interpreters_for(test, "interpreters", |_| true)
}

/// The 3.11 interpreters issue 2 is about (pyenv's shared build and Debian's static one):
/// both in the whole matrix, one in the fast tier; printed.
pub fn python311(test: &str) -> Vec<Interpreter> {
    interpreters_for(test, "3.11 interpreters", |i| i.version == (3, 11))
}

/// The present interpreters that `wanted` accepts: all of them in the whole matrix, and in
/// the fast tier the one [`fast_pick`] chooses for `test`; prints a line `test: KIND
/// covered: name, …` on the test process's stderr.
pub fn interpreters_for(
    test: &str,
    kind: &str,
    wanted: impl Fn(&Interpreter) -> bool,
) -> Vec<Interpreter> {
    if tier() == Tier::Full {
        return every_interpreter_for(test, kind, wanted);
    }
    let accepted = accepted_by(wanted);
    let of = accepted.len();
    let chosen = fast_pick(test, accepted);
    let note = if of > 1 {
        format!(" (fast tier: 1 of {of}; PYIGPROF_TESTS=full runs all)")
    } else {
        String::new()
    };
    say_covered(test, kind, &chosen, &note);
    chosen
}

/// The present interpreters that `wanted` accepts, all of them in every tier (for the few
/// tests that must cover every family in the fast tier too); printed as
/// [`interpreters_for`] prints.
pub fn every_interpreter_for(
    test: &str,
    kind: &str,
    wanted: impl Fn(&Interpreter) -> bool,
) -> Vec<Interpreter> {
    let accepted = accepted_by(wanted);
    say_covered(test, kind, &accepted, "");
    accepted
}

/// The present interpreters that `wanted` accepts.
fn accepted_by(wanted: impl Fn(&Interpreter) -> bool) -> Vec<Interpreter> {
    interpreters().into_iter().filter(|i| wanted(i)).collect()
}

/// The one interpreter of `candidates` that the fast tier runs the test named `key` on:
/// the first of [`fast_order`]. Empty when `candidates` is.
pub fn fast_pick(key: &str, candidates: Vec<Interpreter>) -> Vec<Interpreter> {
    let mut order = fast_order(key, candidates);
    order.truncate(1);
    order
}

/// `candidates` rotated so that the one at the FNV-1a hash of `key` modulo their number
/// comes first, then the ones after it: different tests land on different interpreters
/// (over the suite, every family gets tests of its own), a test lands on the same one
/// every time on a given machine, and a test that cannot use its first (a venv that cannot
/// be made) has the next.
pub fn fast_order(key: &str, mut candidates: Vec<Interpreter>) -> Vec<Interpreter> {
    if candidates.is_empty() {
        return candidates;
    }
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let at = (hash % candidates.len() as u64) as usize;
    candidates.rotate_left(at);
    candidates
}

/// Makes `command` start its process with `SIGINT`, `SIGQUIT` and `SIGHUP` at their
/// default action, as a program started from a terminal has them, whatever the test process
/// inherited: a shell's background job ignores `SIGINT` and `SIGQUIT`, `nohup` ignores
/// `SIGHUP`, and neither can be undone by the shell (bash: "signals ignored upon entry
/// cannot be trapped or reset"). An ignored signal stays ignored across `exec`, and Python
/// installs its `KeyboardInterrupt` handler only over a default `SIGINT`: tests that a
/// signal ends a process, or that the program sees its own handlers, would otherwise
/// depend on how the suite was started.
pub fn with_default_signals(command: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only `signal`, which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            for signal in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}

/// Runs `python args…` without the profiler (signals as [`with_default_signals`] sets
/// them) and asserts that it exited successfully.
pub fn plain_ok(python: &Interpreter, args: &[&str]) -> Output {
    let out = with_default_signals(&mut Command::new(&python.path))
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{} without pyigprof: exit {:?}\n{}",
        python.name,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Writes `test: KIND covered: name, …NOTE` to the test process's stderr handle rather than
/// through `eprintln!`, which the test harness captures (showing it only for failing
/// tests): the log of a passing run says which interpreters ran.
fn say_covered(test: &str, kind: &str, covered: &[Interpreter], note: &str) {
    use std::io::Write;
    let names: Vec<&str> = covered.iter().map(|i| i.name.as_str()).collect();
    let line = format!("{test}: {kind} covered: {}{note}\n", names.join(", "));
    // A log line that cannot be written changes nothing the test checks.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
