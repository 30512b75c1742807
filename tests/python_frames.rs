//! Python frames: names captured while the code object lives (so freed and reused code
//! objects keep the right names), qualified names, names and files that need escaping, and
//! threads each with their own stacks.

use pyigprof_suite::*;

/// Code objects are created, run hot and freed one after another, so their memory is reused
/// by the next ones; every function must still carry its own name and file.
const FREED: &str = r#"
import gc
for i in range(40):
    src = "def gen_%d():\n    t = 0\n    for k in range(400000):\n        t += k %% 5\n    return t\n" % i
    ns = {}
    exec(compile(src, "<gen-%d>" % i, "exec"), ns)
    ns["gen_%d" % i]()
    del ns
    gc.collect()
"#;

#[test]
fn freed_code_objects_keep_their_own_names() {
    for python in interpreters_with_python_frames("freed_code") {
        let (_, profile) = profiled_ok(&python, &["-c", FREED], &[("PYIGPROF_HZ", "1000")]);
        let mut seen = 0;
        for st in stacks(&profile) {
            for (name, file) in &st.frames {
                // gen_<n> only (libpython has native functions such as gen_iternext).
                if let Some(n) = name
                    .strip_prefix("gen_")
                    .filter(|n| n.chars().all(|c| c.is_ascii_digit()))
                {
                    assert_eq!(
                        file,
                        &format!("<gen-{n}>"),
                        "{}: {name} attributed to {file}",
                        python.name
                    );
                    seen += 1;
                }
            }
        }
        let distinct = stacks(&profile)
            .iter()
            .flat_map(|s| {
                s.frames
                    .iter()
                    .filter(|(_, f)| f.starts_with("<gen-"))
                    .map(|(n, _)| n.clone())
            })
            .collect::<std::collections::BTreeSet<_>>();
        assert!(
            distinct.len() >= 20,
            "{}: only {} generated functions seen",
            python.name,
            distinct.len()
        );
        assert!(seen > 0);
    }
}

/// Nested classes, a generator expression, a lambda and a function named `NAME` (non-ASCII
/// on Python 3; 2.7 identifiers are ASCII), in a file whose name needs escaping.
const NAMES: &str = r#"# -*- coding: utf-8 -*-
class Outer:
    class Inner:
        def method(self):
            return sum(i * i for i in range(400000))

def NAME():
    return Outer.Inner().method()

for _ in range(8):
    NAME()
    (lambda: sum(i % 7 for i in range(200000)))()
"#;

#[test]
fn qualified_non_ascii_and_escaped_names_survive() {
    for python in interpreters_with_python_frames("names") {
        let (function, escaped) = if python.version >= (3, 0) {
            ("grüße", "N=(grüße)")
        } else {
            ("gruesse", "N=(gruesse)")
        };
        // Qualified names (co_qualname) from 3.11; co_name before.
        let (method, genexpr) = if python.version >= (3, 11) {
            (
                "Outer.Inner.method",
                "Outer.Inner.method.<locals>.<genexpr>",
            )
        } else {
            ("method", "<genexpr>")
        };
        let dir = scratch_dir("names");
        let script = dir.join("odd (name) é.py");
        std::fs::write(&script, NAMES.replace("NAME", function)).unwrap();
        let run = run_profiled(&python.path, &[script.to_str().unwrap()], &[]);
        assert!(
            run.output.status.success(),
            "{}: {}",
            python.name,
            run.stderr()
        );
        let raw = run.profiles().pop().unwrap();
        let profile = run.profile();
        let file = script.to_string_lossy().into_owned();
        let in_file = |name: &str| {
            share(&profile, |s| {
                s.frames.iter().any(|(n, f)| n == name && *f == file)
            })
        };
        for (name, least) in [
            (method, 20.0),
            (function, 20.0),
            ("<lambda>", 5.0),
            (genexpr, 10.0),
        ] {
            let got = in_file(name);
            assert!(got > least, "{}: {name} in {file}: {got:.1}%", python.name);
        }
        // And IgProf's own parser rule holds: no raw ')' inside N=() / F=(); UTF-8 and
        // '(' are written as they are, for IgProf's reports to show them.
        let text = gunzip(&raw);
        assert!(
            text.contains("odd (name%29 é.py"),
            "{}: file name not escaped",
            python.name
        );
        assert!(
            text.contains(escaped),
            "{}: name not as expected",
            python.name
        );
    }
}

fn gunzip(path: &std::path::Path) -> String {
    use std::io::Read;
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .expect("ASCII text");
    text
}

#[test]
fn each_thread_gets_its_own_mixed_stacks_and_its_own_cpu_time() {
    // On 2.7 a thread that hashes with the GIL released from its start (hasher) finds its
    // state in the interpreter's list of thread states.
    for python in interpreters_with_python_frames("threads") {
        let run = run_profiled(&python.path, &[&example("threads.py")], &[]);
        assert!(run.output.status.success(), "{}", run.stderr());
        let stdout = run.stdout();
        let cpu = json_number(&stdout, "process_cpu_s");
        let profile = run.profile();
        let reported = seconds(&profile);
        assert!(
            (reported - cpu).abs() <= 0.10 * cpu,
            "{}: {reported:.3} s vs {cpu:.3} s",
            python.name
        );
        // Each thread's share of the profile is the share of CPU time it measured itself.
        for worker in ["worker_a", "worker_b", "worker_c", "hasher"] {
            let measured = 100.0 * json_number(&stdout, worker) / cpu;
            let profiled = share(&profile, |s| s.has(worker));
            eprintln!(
                "{}: {worker}: profile {profiled:.1}%, measured {measured:.1}%",
                python.name
            );
            assert!(
                (profiled - measured).abs() <= 4.0,
                "{}: {worker} {profiled:.1}% vs {measured:.1}%",
                python.name
            );
        }
        // Worker stacks start at the thread entry (named clone3 where libc has symbols;
        // Debian's stripped libc gives an @? name), and go down into native code.
        let thread_root =
            |s: &Stack| s.frames[0].0 != "_start" && s.frames[0].1.contains("libc.so");
        let hashing = share(&profile, |s| {
            // OpenSSL, or CPython's own _sha256 module in builds without it (pyenv's 3.6).
            let hashing_code = |f: &str| f.contains("libcrypto") || f.contains("_sha256");
            thread_root(s)
                && s.position("hasher")
                    .is_some_and(|at| s.frames[at..].iter().any(|(_, f)| hashing_code(f)))
        });
        assert!(
            hashing >= 0.8 * share(&profile, |s| s.has("hasher")),
            "{}: hasher not in SHA-256 code",
            python.name
        );
        // Qualified names (co_qualname) exist from 3.11; before, the frame is named `run`.
        let run_name = if python.version >= (3, 11) {
            "Thread.run"
        } else {
            "run"
        };
        assert!(
            share(&profile, |s| thread_root(s)
                && s.has("spin")
                && s.has(run_name))
                > 50.0,
            "{}",
            python.name
        );
        // The profiler's own frames (the pthread_create trampoline) are not shown.
        let own = share(&profile, |s| {
            s.frames.iter().any(|(_, f)| f.contains("libpyigprof"))
        });
        assert_eq!(own, 0.0, "{}: profiler frames in the profile", python.name);
        // No worker frame ever appears under the main thread's stack.
        let crossed = share(&profile, |s| {
            s.frames[0].0 == "_start" && (s.has("spin") || s.has("hasher"))
        });
        assert_eq!(crossed, 0.0, "{}", python.name);
    }
}

const WALL: &str = r#"
import threading, time
def sleeper():
    time.sleep(1.0)
def busy():
    end = time.time() + 1.0
    t = 0
    while time.time() < end:
        t += 1
s = threading.Thread(target=sleeper)
s.start()
busy()
s.join()
"#;

#[test]
fn wall_clock_mode_shows_time_spent_blocked() {
    for python in interpreters_with_python_frames("wall_clock") {
        if python.version < (3, 5) {
            // No PEP 475: a wall-clock signal would end the sleep early. pyigprof says so and
            // samples CPU time; the program sleeps as long as it asked.
            let program =
                format!("{WALL}\nimport sys; sys.stdout.write('%.2f' % (time.time() - started))");
            let program = program.replacen(
                "import threading, time",
                "import threading, time\nstarted = time.time()",
                1,
            );
            let (run, profile) =
                profiled_ok(&python, &["-c", &program], &[("PYIGPROF_CLOCK", "wall")]);
            let elapsed: f64 = run.stdout().trim().parse().expect("elapsed seconds");
            assert!(elapsed >= 1.0, "{}: slept only {elapsed} s", python.name);
            assert!(
                run.stderr()
                    .contains("PYIGPROF_CLOCK=wall is not used with Python 2.7"),
                "{}",
                run.stderr()
            );
            assert!(
                share(&profile, |s| s.has("sleeper")) < 3.0,
                "{}",
                python.name
            );
            continue;
        }
        let (_, profile) = profiled_ok(&python, &["-c", WALL], &[("PYIGPROF_CLOCK", "wall")]);
        let sleeping = share(&profile, |s| s.has("sleeper"));
        let busy = share(&profile, |s| s.has("busy"));
        eprintln!(
            "{}: wall: sleeper {sleeping:.1}%, busy {busy:.1}%, {:.3} s",
            python.name,
            seconds(&profile)
        );
        // Both threads live about one second of wall time.
        assert!(
            (35.0..=60.0).contains(&sleeping) && (35.0..=60.0).contains(&busy),
            "{sleeping:.1} / {busy:.1}"
        );
        let total = seconds(&profile);
        assert!(
            (1.8..=2.8).contains(&total),
            "{}: {total:.3} s of wall time over two threads",
            python.name
        );
        // In CPU mode, the sleeping thread is (almost) absent.
        let cpu = run_profiled(&python.path, &["-c", WALL], &[]).profile();
        assert!(share(&cpu, |s| s.has("sleeper")) < 3.0, "{}", python.name);
    }
}

/// Spends about the same CPU time in `before` (before the program's first extension-module
/// import) and `after`, and prints each one's CPU time (s), measured by the thread's own
/// clock (`CLOCK_THREAD_CPUTIME_ID`: 3.3+): `before=S after=S`.
const BEFORE_AND_AFTER_IMPORT: &str = r#"
import time
def cpu():
    return time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
def before():
    t = 0
    for i in range(1500000):
        t += i % 3
start = cpu()
before()
spent_before = cpu() - start
import math
def after():
    t = 0
    for i in range(1500000):
        t += i % 3
start = cpu()
after()
print("before=%f after=%f" % (spent_before, cpu() - start))
"#;

#[test]
fn stripped_3_6_has_python_frames_from_the_start() {
    // 3.6 keeps its thread-state key in a static variable known only from libpython's
    // .symtab. Stripped of it, pyigprof finds the key in the code of the exported
    // PyGILState_GetThisThreadState: Python frames from the start, before the program's
    // first extension-module import (math) as after it. Each function's share of the
    // profile is compared with its share of the process's CPU time as the program measured
    // it: the two do the same work, but their CPU times differ by up to a fifth from run to
    // run on this 2-CPU VM when other tests run (CI had 34.6 % against 57.7 % once, at 250 Hz).
    let covered = interpreters_for("stripped_3_6", "3.6 interpreters", |i| i.version == (3, 6));
    for python in covered {
        let library = python
            .path
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("lib/libpython3.6m.so.1.0");
        let dir = scratch_dir("stripped36");
        let stripped = dir.join("libpython3.6m.so.1.0");
        std::fs::copy(&library, &stripped).unwrap();
        let strip = std::process::Command::new("strip")
            .arg(&stripped)
            .status()
            .expect("strip");
        assert!(strip.success());
        let lib_dir = dir.to_str().unwrap();
        // 2 kHz: about 1,200 samples, so that a share of about 45 % is known within ±2.8
        // points (95 %).
        let (run, profile) = profiled_ok(
            &python,
            &["-c", BEFORE_AND_AFTER_IMPORT],
            &[("LD_LIBRARY_PATH", lib_dir), ("PYIGPROF_HZ", "2000")],
        );
        assert!(
            stacks(&profile)
                .iter()
                .any(|s| s.frames.iter().any(|(_, f)| f.starts_with(lib_dir))),
            "the stripped copy was not used"
        );
        let stdout = run.stdout();
        let measured = |key: &str| -> f64 {
            let word = stdout
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("{}: no {key}= in {stdout:?}", python.name));
            100.0 * word.parse::<f64>().unwrap() / seconds(&profile)
        };
        for function in ["before", "after"] {
            let seen = share(&profile, |s| s.has(function));
            let spent = measured(function);
            eprintln!(
                "{}: stripped libpython: {function} {seen:.1}% of the profile, {spent:.1}% of the CPU time measured",
                python.name
            );
            assert!(
                (seen - spent).abs() < 5.0,
                "{}: {function} {seen:.1}% of the profile, {spent:.1}% measured",
                python.name
            );
        }
    }
}

/// A library whose constructor starts a thread that spins 0.6 s of its own CPU time in
/// `early_spin`.
const EARLY_THREAD_C: &str = r#"
#include <pthread.h>
#include <time.h>
static volatile double sink;
static volatile int done;
__attribute__((noinline)) void early_spin(void) {
    struct timespec t;
    double x = 0;
    do {
        for (int i = 0; i < 100000; i++) x += i * 0.5;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while (t.tv_sec * 1e9 + t.tv_nsec < 0.6e9);  /* the thread's own CPU time */
    sink = x;
}
static void *run(void *arg) {
    /* Spin only once pyigprof's constructor has run (it adopts this thread), so that the
       time measured is the time sampled however long start-up takes on a loaded machine. */
    struct timespec start, now, pause = {0, 10000000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        nanosleep(&pause, 0);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1e9 + (now.tv_nsec - start.tv_nsec) < 0.3e9);
    early_spin();
    done = 1;
    /* Stay alive until the process ends: the profiler does not see an adopted thread end
       (only threads it started through pthread_create), and the expirations of its timer
       that the kernel had not delivered (tens of ms under load) are counted when sampling
       stops, for the threads alive then. */
    for (;;)
        nanosleep(&pause, 0);
    return 0;
}
/* Whether the thread has finished its spin: the program waits for it before exiting. */
int early_done(void) { return done; }
__attribute__((constructor)) static void start(void) {
    pthread_t t;
    pthread_create(&t, 0, run, 0);
}
"#;

/// Spins one second of the main thread's CPU time (`getrusage(RUSAGE_THREAD)`, 1 on Linux:
/// every interpreter has it, unlike `time.thread_time`), then waits until the early thread
/// of the library `sys.argv[1]` has finished (on a loaded machine it may not have).
const SPIN_ONE_SECOND: &str = "import ctypes, resource, sys, time\n\
    def cpu():\n    u = resource.getrusage(1)\n    return u.ru_utime + u.ru_stime\n\
    t = cpu()\nwhile cpu() - t < 1.0: pass\n\
    early = ctypes.CDLL(sys.argv[1])\nwhile not early.early_done(): time.sleep(0.01)\n";

#[test]
fn threads_started_before_and_after_the_constructor_are_sampled() {
    let dir = scratch_dir("early");
    let library = c_library(&dir, "early", EARLY_THREAD_C, &["-O1", "-g", "-lpthread"]);
    let ours = artifacts().preload.to_string_lossy().into_owned();
    let early = library.to_string_lossy().into_owned();
    // The dynamic loader runs the constructors of LD_PRELOAD objects last-listed first: with
    // libearly.so listed last its thread exists before pyigprof starts (adopted through the
    // roll call); listed first, its thread is created through pyigprof's pthread_create.
    for python in interpreters_with_python_frames("early_threads") {
        for (when, preload) in [
            ("before", format!("{ours}:{early}")),
            ("after", format!("{early}:{ours}")),
        ] {
            let (_, profile) = profiled_ok(
                &python,
                &["-c", SPIN_ONE_SECOND, &early],
                &[("LD_PRELOAD", &preload)],
            );
            let early_share = share(&profile, |s| s.has("early_spin"));
            let early_seconds = seconds(&profile) * early_share / 100.0;
            // Time whose timer signals the kernel never delivered (it may hold them back for
            // tens of ms under load) is in the profile, as <unsampled thread time>: no
            // sample says where it was spent.
            let unsampled =
                seconds(&profile) * share(&profile, |s| s.has("<unsampled thread time>")) / 100.0;
            eprintln!(
                "{}: thread started {when} the constructor: early_spin {early_share:.1}%, \
                 {early_seconds:.3} s; unsampled {unsampled:.3} s",
                python.name
            );
            assert!(
                early_seconds <= 0.66 && early_seconds + unsampled >= 0.54,
                "{}: {when}: early_spin {early_seconds:.3} s of 0.6 s ({unsampled:.3} s \
                 unsampled)",
                python.name
            );
            // Its stacks are whole: from the thread's start routine (in libc) down.
            let rooted = share(&profile, |s| {
                s.has("early_spin") && s.frames[0].1.contains("libc.so")
            });
            assert!(
                rooted >= 0.95 * early_share,
                "{}: {when}: {rooted:.1}% of {early_share:.1}% rooted",
                python.name
            );
            let main = share(&profile, |s| s.has("<module>"));
            assert!(main > 40.0, "{}: {when}: <module> {main:.1}%", python.name);
        }
    }
}

/// A program that presents itself as CPython `VERSION` (it exports `Py_GetVersion` and
/// `Py_Initialize`, and a `_PyRuntime` that starts with the words `RUNTIME`), spins in
/// `fake_eval_loop` and exits with status 7. The loop reads the process's CPU clock once
/// per 100,000 additions: reading it at every one, the loop ran mostly in the kernel
/// (`clock` is a system call), where perf events do not sample, and a second of it got
/// 24–33 samples of ~40 ticks each, one of which, outside the loop, took 23 % in a busy
/// run.
const FAKE_INTERPRETER: &str = r#"
#include <stdio.h>
#include <time.h>
const char *Py_GetVersion(void) { return VERSION " (fake, for pyigprof's tests)"; }
void Py_Initialize(void) {}
unsigned long long _PyRuntime[128] = { RUNTIME };
__attribute__((noinline)) double fake_eval_loop(double seconds) {
    double t = 0;
    clock_t start = clock();
    while ((double)(clock() - start) / CLOCKS_PER_SEC < seconds)
        for (int i = 0; i < 100000; i++) t += 1e-9 * t + 1;
    return t;
}
int main(void) {
    printf("%s %.0f\n", Py_GetVersion(), fake_eval_loop(1.0) > 0 ? 1.0 : 0.0);
    return 7;
}
"#;

/// 3.15.2's `_Py_DebugOffsets` after the header (the first 40 of its 108 words), with a
/// word inserted before the frame section: what a 3.16 that grew its struct would look
/// like to a reader that assumed 3.15's revision.
const GROWN_3_15_STRUCT: &str = "346568, 912, 936, 226240, 7272, 7264, 7336, 7352, 7400, 7592, \
    7576, 7584, 16, 7736, 0, 7752, 7744, 7944, 0, 888, 0, 0, 8, 16, 72, 80, 88, 96, 176, 184, \
    256, 32, 36, 40, 136, 288, 0, 88, 8, 0, 56, 80, 74, 64, 0, 216, 112, 120, 128, 136, 68, 52";

#[test]
fn an_interpreter_pyigprof_does_not_understand_gets_native_frames_and_one_line() {
    // Fake interpreters stand for ones whose frames pyigprof cannot read: (version,
    // _PyRuntime's first words, the reason said). "xdebugpy" is 0x7970677562656478.
    let grown = format!("0x7970677562656478ULL, 0x031000a1ULL, 0, {GROWN_3_15_STRUCT}");
    let cases = [
        (
            "3.99.0",
            "0x6775626564796e6fULL, 0x030d00f0ULL".to_string(),
            "_PyRuntime does not start with _Py_DebugOffsets",
        ),
        (
            "3.13.0",
            "0x6775626564796e6fULL, 0x030d00f0ULL".to_string(),
            "_PyRuntime does not start with _Py_DebugOffsets",
        ),
        (
            "3.14.0",
            "0x7970677562656478ULL, 0x030e00f0ULL, 1".to_string(),
            "it is a free-threaded build",
        ),
        (
            "3.16.0",
            grown,
            "newer than any pyigprof knows, and its _Py_DebugOffsets are not self-consistent",
        ),
    ];
    for (version, runtime, reason) in cases {
        let dir = scratch_dir("fake-python");
        let defines = [
            format!("-DVERSION=\"{version}\""),
            format!("-DRUNTIME={runtime}"),
        ];
        let program = c_program(
            &dir,
            "fake-python",
            FAKE_INTERPRETER,
            &["-O1", "-rdynamic", &defines[0], &defines[1]],
        );
        let run = run_profiled(&program, &[], &[]);
        assert_eq!(run.output.status.code(), Some(7), "{}", run.stderr());
        assert_eq!(
            run.stdout(),
            format!("{version} (fake, for pyigprof's tests) 1\n"),
            "the program's output is unchanged"
        );
        let stderr = run.stderr();
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("cannot read the Python frames"))
            .collect();
        assert_eq!(said.len(), 1, "{version}: {stderr}");
        let expected =
            format!("pyigprof: cannot read the Python frames of Python {version}: {reason}");
        assert!(
            said[0].starts_with(&expected) && said[0].ends_with("recording native frames only"),
            "{version}: {}\nexpected {expected}…",
            said[0]
        );
        let profile = run.profile();
        let hot = share(&profile, |s| s.has("fake_eval_loop"));
        eprintln!("fake {version}: fake_eval_loop {hot:.1}%");
        assert!(hot > 80.0, "{version}: fake_eval_loop only {hot:.1}%");
        let python = share(&profile, |s| {
            s.frames.iter().any(|(_, file)| file.ends_with(".py"))
        });
        assert_eq!(
            python, 0.0,
            "{version}: Python frames in a native-only profile"
        );
    }
}
