//! The lock profiler (`PYIGPROF_PROFILE=lock`, preload/src/sources/locks.rs): the time
//! threads wait to acquire Python's locks, `LOCK_WAIT`, on the mixed stack of each wait,
//! against the program's own measurement of its waits.

use pyigprof_suite::*;

/// Held by each test of this file: waits are measured in wall time, which other tests
/// running at once would stretch unevenly.
static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Four threads contending for one `threading.Lock`, each holding it for ~1 ms, `argv[1]`
/// times; each times its acquires with `perf_counter`. The main thread then waits in
/// `join`. Prints the seconds the workers spent acquiring. The hold sleeps: a holder that
/// ran Python code (or hashed, between buffers) kept the GIL that a thread woken with the
/// lock must take back before its `acquire` returns — time in the program's measure that
/// is the GIL's, not the lock's (3.7 under load: 1.75 s measured for 0.93 s waiting on
/// the lock; wall mode's `<waiting: GIL>` has it).
const CONTENTION: &str = r#"
import json, sys, threading, time
lock = threading.Lock()
guard = threading.Lock()
waited = {"worker": 0.0}
def hold_work():
    time.sleep(0.001)
def worker(n):
    w = 0.0
    for _ in range(n):
        t = time.perf_counter()
        with lock:
            w += time.perf_counter() - t
            hold_work()
    with guard:
        waited["worker"] += w
threads = [threading.Thread(target=worker, args=(int(sys.argv[1]),)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(waited))
"#;

/// `PYIGPROF_PROFILE=lock` on four threads contending for a `threading.Lock` (3.7–3.15,
/// the semaphore waits of 3.7–3.13's locks and of 3.14+'s parked `PyMutex`):
/// - `LOCK_WAIT`'s total is the exact time waited (`#pyigprof locks waited_ns`) within
///   3 %: Poisson sampling of nanoseconds is unbiased;
/// - the workers' part, under `worker` (the Python function that acquires), is the time
///   the workers measured acquiring within 10 %;
/// - the main thread's `join` is a lock's wait too;
/// - `pyigprof-analyse -r LOCK_WAIT --json` gives it in seconds, and the summary says it.
#[test]
fn the_waits_for_a_python_lock_are_counted_where_threads_wait() {
    let _machine = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let wanted = |i: &Interpreter| i.version >= (3, 7);
    for python in interpreters_for("locks", "interpreters from 3.7", wanted) {
        let (run, profile) = profiled_ok(
            &python,
            &["-c", CONTENTION, "150"],
            &[("PYIGPROF_PROFILE", "lock")],
        );
        let out = run.stdout();
        let measured = json_number(&out, "worker");
        let period = profile.sources[0].tick_period;
        let waits = stacks_of(&profile, "LOCK_WAIT");
        let seconds = |keep: &dyn Fn(&Stack) -> bool| -> f64 {
            waits
                .iter()
                .filter(|s| keep(s))
                .map(|s| s.ticks)
                .sum::<i64>() as f64
                * period
        };
        let all = seconds(&|_| true);
        let workers = seconds(&|s| s.has("worker"));
        // `Thread.join` (3.11+ name frames by their qualified names), `join` before.
        let joining = seconds(&|s| s.frames.iter().any(|(name, _)| name.ends_with("join")));
        let stats = &profile.sources[0].statistics;
        let exact = stats
            .iter()
            .find(|(k, _)| k == "locks.waited_ns")
            .and_then(|(_, v)| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{}: no #pyigprof locks waited_ns: {stats:?}", python.name))
            / 1e9;
        eprintln!(
            "locks: {}: LOCK_WAIT {all:.3} s ({exact:.3} s exact), workers {workers:.3} s \
             (measured {measured:.3} s), join {joining:.3} s",
            python.name
        );
        assert!(
            (all - exact).abs() <= 0.03 * exact,
            "{}: LOCK_WAIT {all:.3} s, {exact:.3} s waited",
            python.name
        );
        assert!(
            (workers - measured).abs() <= 0.10 * measured,
            "{}: the workers' LOCK_WAIT {workers:.3} s, measured {measured:.3} s",
            python.name
        );
        assert!(
            joining > 0.1 * all,
            "{}: join {joining:.3} s of {all:.3} s",
            python.name
        );
        assert!(
            run.stderr().contains("pyigprof: wrote ")
                && run.stderr().contains("threads waited ")
                && run.stderr().contains("-r LOCK_WAIT"),
            "{}: the summary:\n{}",
            python.name,
            run.stderr()
        );
        let path = run.profiles()[0].to_string_lossy().into_owned();
        let json = analyse(&[&path, "-r", "LOCK_WAIT", "--json"]);
        assert!(
            json.status.success(),
            "{}",
            String::from_utf8_lossy(&json.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        let reported = json["total"]["seconds"].as_f64().unwrap_or(-1.0);
        assert!(
            (reported - all).abs() < 0.01,
            "{}: --json says {reported} s, the profile {all:.3} s",
            python.name
        );
    }
}

/// `PYIGPROF_PROFILE` and `PYIGPROF_LOCK_RATE` refuse what they cannot use, in one line,
/// and the program runs as without them.
#[test]
fn bad_lock_settings_are_said_in_one_line() {
    let python = &interpreters_for("lock_settings", "3.x interpreters", |i| i.version >= (3, 7))[0];
    for (env, said) in [
        (
            [("PYIGPROF_PROFILE", "locks"), ("PYIGPROF_LOCK_RATE", "1ms")],
            "PYIGPROF_PROFILE=\"locks\" is not a list of \"cpu\", \"mem\" and \"lock\"",
        ),
        (
            [("PYIGPROF_PROFILE", "lock"), ("PYIGPROF_LOCK_RATE", "soon")],
            "PYIGPROF_LOCK_RATE=\"soon\" is not a duration above 0",
        ),
    ] {
        let run = run_profiled(&python.path, &["-c", "print('ok')"], &env);
        assert!(run.output.status.success(), "{}", run.stderr());
        assert_eq!(run.stdout().trim(), "ok");
        assert_eq!(
            run.stderr().matches(said).count(),
            1,
            "{env:?}:\n{}",
            run.stderr()
        );
    }
}
