//! `pyigprof dump PID` on a program whose threads are in known places — one spinning in a
//! Python function, one blocked on a lock that is never released, one sleeping, one inside
//! zlib, two deadlocked on each other's lock and the main thread joining one of them (the
//! program hangs): each thread's stack names its function and what it waits in, as text
//! and as JSON, both on a program started under pyigprof and, through attach, on one that
//! was not; the program's output and life go on unchanged, and nothing is written. Each
//! thread is named as `threading` names it (`Thread.name`, read from the interpreter's
//! memory): the main thread `MainThread`, the others after their function, one renamed
//! after it started, one with a name longer than the system's 15 bytes and not ASCII.
//! A hung asyncio program's tasks are listed after its threads (3.14+), each with its
//! coroutines where they wait and the task that awaits it.

use pyigprof_suite::*;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Threads in known places; prints `ready` once they are there, then hangs on a deadlock.
/// Each is named after its function but `renamed`, renamed to [`RENAMED`] once started, and
/// `long_named`, named [`LONG_NAME`] (written with escapes: 3.6 decodes `-c` by the
/// locale, and 2.7's names are bytes, UTF-8 here).
const PLACES: &str = r#"
import os, sys, threading, time, zlib
held = threading.Lock()
held.acquire()
a, b = threading.Lock(), threading.Lock()
def spin():
    x = 0
    while True:
        x += 1
def wait_on_lock():
    held.acquire()
def sleeper():
    while True:
        time.sleep(10)
def squeeze():
    data = os.urandom(1 << 14) * 256
    # One stream: zlib.compress sets up and frees zlib's state at each call, where a dump
    # can find the thread in free(), outside zlib.
    stream = zlib.compressobj(9)
    while True:
        stream.compress(data)
def left():
    with a:
        time.sleep(0.2)
        with b:
            pass
def right():
    with b:
        time.sleep(0.2)
        with a:
            pass
def renamed():
    while True:
        time.sleep(10)
def long_named():
    while True:
        time.sleep(10)
LONG = u"\u0437\u0430\u043f\u0440\u043e\u0441-\u043e\u0431\u0440\u0430\u0431\u043e\u0442\u0447\u0438\u043a-1"
if sys.version_info[0] == 2:
    LONG = LONG.encode("utf-8")
threads = [threading.Thread(target=f, name=LONG if f is long_named else f.__name__) for f in
           (spin, wait_on_lock, sleeper, squeeze, left, right, renamed, long_named)]
for t in threads:
    t.daemon = True
    t.start()
threads[6].name = "renamed-after-start"
time.sleep(0.6)
sys.stdout.write("ready\n")
sys.stdout.flush()
threads[4].join()
"#;

/// The name `renamed` is given once its thread runs.
const RENAMED: &str = "renamed-after-start";
/// `long_named`'s thread's name: 37 bytes of UTF-8, the system's names keep 15.
const LONG_NAME: &str = "запрос-обработчик-1";

/// The program, started with or without the library preloaded (killed when dropped);
/// its first line read.
fn start(python: &Path, preloaded: Option<&str>, dir: &Path) -> Killed {
    let mut command = live_program(python, PLACES, dir, preloaded, "places.%p.gz", &[]);
    start_until_ready(command.stderr(Stdio::piped()))
}

/// For a failed command's message: whether `child` (the dumped program) still runs, and
/// what it wrote to stderr (it is killed to read it: the test ends there).
fn program_state(child: &mut std::process::Child) -> String {
    let state = match child.try_wait() {
        Ok(None) => "the program still ran".to_string(),
        Ok(Some(status)) => format!("the program had ended ({status})"),
        Err(e) => format!("the program's state is unknown ({e})"),
    };
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut err);
    }
    format!("{state}; its stderr: {err:?}")
}

/// One thread of a JSON dump: its Python functions, its native frames' files and names,
/// and the system call it waits in.
struct Seen {
    tid: i64,
    /// The name shown: `threading`'s when read, else the system's.
    name: String,
    main: bool,
    python: Vec<String>,
    native: Vec<(String, String)>,
    syscall: Option<String>,
    from: String,
    gil: Option<bool>,
    /// What it waits for, when blocked (`lock`, `sleep`, `GIL`, …).
    waiting: Option<String>,
}

fn threads_of(json: &serde_json::Value) -> Vec<Seen> {
    json["threads"]
        .as_array()
        .expect("a threads array")
        .iter()
        .map(|t| {
            let frames = t["frames"].as_array().expect("a frames array");
            Seen {
                tid: t["tid"].as_i64().expect("a tid"),
                name: t["name"].as_str().expect("a name").to_string(),
                main: t["main"] == true,
                python: frames
                    .iter()
                    .filter(|f| f["python"] == true)
                    .map(|f| f["name"].as_str().unwrap().to_string())
                    .collect(),
                native: frames
                    .iter()
                    .filter(|f| f["python"] == false)
                    .map(|f| {
                        (
                            f["file"].as_str().unwrap().to_string(),
                            f["name"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect(),
                syscall: t["syscall"].as_str().map(str::to_string),
                from: t["stack_from"].as_str().unwrap().to_string(),
                gil: t["gil"].as_bool(),
                waiting: t["waiting"].as_str().map(str::to_string),
            }
        })
        .collect()
}

/// The one thread whose innermost Python function is `name`.
fn thread_in<'a>(threads: &'a [Seen], name: &str, what: &str) -> &'a Seen {
    let found: Vec<&Seen> = threads
        .iter()
        .filter(|t| t.python.first().map(String::as_str) == Some(name))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{what}: one thread in {name}; innermost Python functions: {:?}",
        threads.iter().map(|t| t.python.first()).collect::<Vec<_>>()
    );
    found[0]
}

/// Each thread's innermost Python function and the name `threading` gives it.
const NAMES: [(&str, &str); 8] = [
    ("spin", "spin"),
    ("wait_on_lock", "wait_on_lock"),
    ("sleeper", "sleeper"),
    ("squeeze", "squeeze"),
    ("left", "left"),
    ("right", "right"),
    ("renamed", RENAMED),
    ("long_named", LONG_NAME),
];

/// Every thread is named as `threading` names it (JSON `name`), the main thread
/// `MainThread`: each thread's id and name, for the text dump.
fn check_names(threads: &[Seen], what: &str) -> Vec<(i64, &'static str)> {
    let mut named: Vec<(i64, &'static str)> = NAMES
        .iter()
        .map(|&(function, name)| {
            let t = thread_in(threads, function, what);
            assert_eq!(t.name, name, "{what}: the name of the thread in {function}");
            (t.tid, name)
        })
        .collect();
    let main: Vec<&Seen> = threads.iter().filter(|t| t.main).collect();
    assert_eq!(main.len(), 1, "{what}: one main thread");
    assert_eq!(main[0].name, "MainThread", "{what}: the main thread's name");
    named.push((main[0].tid, "MainThread"));
    named
}

/// A blocked thread's wait: a sleep's system call, or the GIL's futex (a signal of the
/// attach's roll call interrupts the sleep, and CPython takes the GIL before sleeping on).
fn sleeps(call: Option<&str>) -> bool {
    matches!(
        call,
        Some("clock_nanosleep" | "nanosleep" | "select" | "pselect6" | "futex")
    )
}

/// `gil_known`: the interpreter's GIL waits are told from other futex waits (3.7+).
fn check(threads: &[Seen], what: &str, gil_known: bool) {
    assert_eq!(threads.len(), 9, "{what}: the main thread and eight others");
    let spin = thread_in(threads, "spin", what);
    assert!(
        spin.from == "sample" || spin.syscall.as_deref() == Some("futex"),
        "{what}: spin runs (or waits for the GIL): {:?} {}",
        spin.syscall,
        spin.from
    );
    // What the blocked threads wait for: a lock, sleeping; the GIL for the Python loop.
    if spin.syscall.is_some() && gil_known {
        assert_eq!(spin.waiting.as_deref(), Some("GIL"), "{what}: spin");
    }
    for (name, reason) in [("wait_on_lock", "lock"), ("left", "lock")] {
        let t = thread_in(threads, name, what);
        assert_eq!(
            t.waiting.as_deref(),
            Some(reason),
            "{what}: {name} waits for"
        );
    }
    // The sleeper sleeps, or takes the GIL back after a signal cut its sleep short (attach
    // adopts each thread by a signal): a lock's wait where the GIL is not told apart.
    let sleeper = thread_in(threads, "sleeper", what);
    let woken = if gil_known { "GIL" } else { "lock" };
    assert!(
        matches!(sleeper.waiting.as_deref(), Some(w) if w == "sleep" || w == woken),
        "{what}: sleeper waits for {:?}",
        sleeper.waiting
    );
    let locked = thread_in(threads, "wait_on_lock", what);
    assert_eq!(
        locked.syscall.as_deref(),
        Some("futex"),
        "{what}: wait_on_lock"
    );
    assert_eq!(
        locked.from, "now",
        "{what}: wait_on_lock's stack is taken as it waits"
    );
    let sleeper = thread_in(threads, "sleeper", what);
    assert!(
        sleeps(sleeper.syscall.as_deref()),
        "{what}: sleeper waits in {:?}",
        sleeper.syscall
    );
    // squeeze runs in zlib (named where the interpreter's objects have symbols), or waits
    // for the GIL after a call (Debian's static, stripped builds: zlib inside the program).
    let squeeze = thread_in(threads, "squeeze", what);
    let in_zlib = squeeze.native.iter().any(|(file, name)| {
        file.contains("zlib") || file.contains("libz") || name.contains("deflate")
    });
    assert!(
        in_zlib || (squeeze.syscall.as_deref() == Some("futex") && !squeeze.native.is_empty()),
        "{what}: squeeze's native frames name zlib, or it waits for the GIL: {:?} {:?}",
        squeeze.syscall,
        squeeze.native
    );
    // A thread waiting on a lock does not hold the GIL (every version pyigprof reads tells);
    // at most one thread does.
    for name in ["wait_on_lock", "left", "right"] {
        let t = thread_in(threads, name, what);
        assert_eq!(t.gil, Some(false), "{what}: {name} holds the GIL?");
    }
    let holders = threads.iter().filter(|t| t.gil == Some(true)).count();
    assert!(holders <= 1, "{what}: {holders} threads hold the GIL");
    for name in ["left", "right"] {
        let t = thread_in(threads, name, what);
        assert_eq!(
            t.syscall.as_deref(),
            Some("futex"),
            "{what}: {name} is deadlocked"
        );
    }
    // The main thread joins `left` from the module's code (`Thread.join` →
    // `_wait_for_tstate_lock`, qualified names from 3.11 on).
    let main: Vec<&Seen> = threads
        .iter()
        .filter(|t| t.python.last().map(String::as_str) == Some("<module>"))
        .collect();
    assert_eq!(
        main.len(),
        1,
        "{what}: one thread runs <module>; Python frames: {:?}",
        threads
            .iter()
            .map(|t| (t.tid, &t.python))
            .collect::<Vec<_>>()
    );
    assert!(
        main[0].python.iter().any(|f| f.ends_with("join"))
            && main[0].syscall.as_deref() == Some("futex"),
        "{what}: the main thread waits in join: {:?} {:?}",
        main[0].python,
        main[0].syscall
    );
    // Native frames lie between the Python ones: the lock's wait is in the C library.
    assert!(
        locked
            .native
            .iter()
            .any(|(file, _)| file.contains("libc.so") || file.contains("libpthread")),
        "{what}: wait_on_lock's native frames: {:?}",
        locked.native
    );
}

#[test]
fn dump_shows_every_threads_place_on_a_hung_program_started_with_and_without_pyigprof() {
    let pythons = interpreters_with_python_frames("dump");
    for python in pythons {
        for preloaded in LIVE_STARTS {
            let what = live_label(&python.name, preloaded);
            let dir = scratch_dir("dump");
            let mut program = start(&python.path, preloaded, &dir);
            let child = &mut program.0;
            let pid = child.id().to_string();
            // The main thread takes the GIL back after its write before it joins.
            std::thread::sleep(Duration::from_millis(300));
            let started = Instant::now();
            let out = pyigprof(&["dump", "--json", &pid], &dir);
            let took = started.elapsed();
            if !out.status.success() {
                panic!("{what}: {}; {}", text(&out.stderr), program_state(child));
            }
            let json: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}", text(&out.stdout)));
            assert_eq!(json["pid"].as_i64(), Some(child.id() as i64), "{what}");
            let threads = threads_of(&json);
            check(&threads, &what, python.version >= (3, 7));
            let named = check_names(&threads, &what);
            // The text says the same, innermost frame first, for a person.
            let shown = pyigprof(&["dump", &pid], &dir);
            if !shown.status.success() {
                panic!("{what}: {}; {}", text(&shown.stderr), program_state(child));
            }
            let shown = text(&shown.stdout);
            for (tid, name) in named {
                let line = format!("\nThread {tid} \"{name}\"");
                assert!(shown.contains(&line), "{what}: no {line:?} in\n{shown}");
            }
            let block = shown
                .split("\nThread ")
                .find(|b| b.contains("wait_on_lock ("))
                .unwrap_or_else(|| panic!("{what}: no wait_on_lock in\n{shown}"));
            let at = |s: &str| {
                block
                    .find(s)
                    .unwrap_or_else(|| panic!("{what}: no {s:?} in\n{block}"))
            };
            assert!(
                at("wait_on_lock (") < at("_bootstrap_inner ("),
                "{what}: innermost first\n{block}"
            );
            assert!(
                block.contains(": waiting for a lock in futex (stack: now)\n"),
                "{what}:\n{block}"
            );
            let python_only = pyigprof(&["dump", "--python", &pid], &dir);
            if !python_only.status.success() {
                panic!(
                    "{what}: {}; {}",
                    text(&python_only.stderr),
                    program_state(child)
                );
            }
            let python_only = text(&python_only.stdout);
            assert!(
                !python_only.contains("libc.so") && python_only.contains("wait_on_lock ("),
                "{what}: --python leaves native frames out:\n{python_only}"
            );
            eprintln!(
                "dump: {what}: {} ms to the first JSON dump",
                took.as_millis()
            );
            assert!(took < Duration::from_secs(10), "{what}: took {took:?}");
            // The program goes on: still hung, nothing written, no output but its own.
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                child.try_wait().unwrap().is_none(),
                "{what}: the program ended"
            );
            let _ = child.kill();
            let _ = child.wait();
            let mut rest = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut rest)
                .unwrap();
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert_eq!(rest, "", "{what}: the program's stdout after ready");
            assert_eq!(err, "", "{what}: the program's stderr");
            let written = file_names_in(&dir);
            assert!(written.is_empty(), "{what}: files written: {written:?}");
        }
    }
}

#[test]
fn dump_refuses_a_process_that_is_not_python_in_one_line() {
    let dir = scratch_dir("dump-refused");
    let mut sleep = Command::new("sleep").arg("30").spawn().expect("sleep");
    let out = pyigprof(&["dump", &sleep.id().to_string()], &dir);
    let _ = sleep.kill();
    let _ = sleep.wait();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is not a Python interpreter"), "{err}");
    let out = pyigprof(&["dump", "999999999"], &dir);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no such process"),
        "{}",
        text(&out.stderr)
    );
}

/// pyigprof's helper process shares the program's memory, so `ps` and `pgrep -f` show its
/// command line as the program's: it names itself `pyigprof-helper`, and `dump`, `attach`
/// and `top` pointed at it say whose helper it is, in one line, exit 2 (issue 58: `dump`
/// printed `Thread 22058 "": state ?`).
#[test]
fn dump_attach_and_top_pointed_at_the_helper_process_name_its_program() {
    let python = &interpreters_with_python_frames("dump")[0];
    let dir = scratch_dir("dump-helper");
    // A thread started, so that the helper process runs (a process starts it once it has
    // run 20 ms of CPU time or starts a thread: sources::late).
    let script = "import sys, threading, time\nthreading.Thread(target=int).start()\n\
                  sys.stdout.write('ready\\n')\nsys.stdout.flush()\ntime.sleep(60)\n";
    let program = start_until_ready(&mut live_program(
        &python.path,
        script,
        &dir,
        Some("cpu"),
        "helper.%p.gz",
        &[],
    ));
    let pid = program.0.id();
    // The helper: the process whose parent is the program and whose name is its own.
    let helper = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .find(|&candidate| {
            let status =
                std::fs::read_to_string(format!("/proc/{candidate}/status")).unwrap_or_default();
            status.lines().any(|l| l == format!("PPid:\t{pid}"))
                && status.lines().any(|l| l == "Name:\tpyigprof-helper")
        })
        .unwrap_or_else(|| {
            panic!(
                "{}: no process named pyigprof-helper under {pid}",
                python.name
            )
        });
    for what in [
        vec!["dump".to_string(), helper.to_string()],
        vec![
            "attach".to_string(),
            "-d".to_string(),
            "1".to_string(),
            helper.to_string(),
        ],
        vec![
            "top".to_string(),
            "--batch".to_string(),
            "1".to_string(),
            helper.to_string(),
        ],
    ] {
        let args: Vec<&str> = what.iter().map(String::as_str).collect();
        let out = pyigprof(&args, &dir);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "this is pyigprof's helper process for PID {pid} (it shares that process's \
                 memory and command line): point `pyigprof {}` at PID {pid}",
                args[0]
            )),
            "{args:?}: {err}"
        );
    }
    drop(program);
}

/// Three named tasks awaiting, through a coroutine, an event nobody sets, gathered by the
/// main task: the program hangs with its one thread in `epoll_wait`.
const HUNG_TASKS: &str = r#"
import asyncio, sys
async def wait_for(ev):
    await ev.wait()
async def worker(ev):
    await wait_for(ev)
async def main():
    ev = asyncio.Event()
    tasks = [asyncio.create_task(worker(ev), name="worker-%d" % i) for i in range(3)]
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    await asyncio.gather(*tasks)
asyncio.run(main())
"#;

/// `pyigprof dump` of a hung asyncio program lists its tasks after its threads (3.14+ from
/// each thread's task list, as asyncio describes it in `.AsyncioDebug`; 3.11–3.13 from the
/// `_asyncio` module's task sets), started under pyigprof and not:
/// each named task with its coroutines where they wait (`Event.wait`, `wait_for` line 4,
/// `worker` line 6), awaited by the task that gathers them (`main`, unnamed: named after
/// its coroutine), as text and JSON.
#[test]
fn dump_lists_a_hung_asyncio_programs_tasks_with_their_coroutines() {
    let pythons = interpreters_for("dump_tasks", "interpreters from 3.11", |i| {
        i.version >= (3, 11)
    });
    for python in pythons {
        for preloaded in [Some("cpu"), None] {
            let what = live_label(&python.name, preloaded);
            check_hung_tasks(&python.path, &what, HUNG_TASKS, preloaded);
        }
        check_hung_group(&python.path, &live_label(&python.name, None));
    }
}

/// A task awaited directly by the main task, holding a `TaskGroup` whose one member
/// awaits an event nobody sets: the program hangs.
const HUNG_GROUP: &str = r#"
import asyncio, sys
async def member(ev):
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    await ev.wait()
async def group(ev):
    async with asyncio.TaskGroup() as tg:
        tg.create_task(member(ev), name="member")
async def main():
    ev = asyncio.Event()
    await asyncio.create_task(group(ev), name="group")
asyncio.run(main())
"#;

/// `dump` of [`HUNG_GROUP`] (not started under pyigprof): `member` awaited by `group`
/// (through its `TaskGroup`), `group` by `main` (awaited directly), `main` by nothing.
fn check_hung_group(python: &Path, what: &str) {
    let dir = scratch_dir("dump-group");
    let mut command = live_program(python, HUNG_GROUP, &dir, None, "group.%p.gz", &[]);
    let program = start_until_ready(command.stderr(Stdio::null()));
    let pid = program.0.id().to_string();
    let out = pyigprof(&["dump", "--json", &pid], &dir);
    assert!(out.status.success(), "{what}: {}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut seen: Vec<(String, Option<String>)> = json["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or("").to_string(),
                t["awaited_by_name"].as_str().map(String::from),
            )
        })
        .collect();
    seen.sort();
    eprintln!("dump_tasks: {what}, a TaskGroup: {seen:?}");
    let expected: Vec<(String, Option<String>)> = [
        ("group", Some("main")),
        ("main", None),
        ("member", Some("group")),
    ]
    .iter()
    .map(|(name, by)| (name.to_string(), by.map(String::from)))
    .collect();
    assert_eq!(seen, expected, "{what}: the tasks and who awaits them");
}

/// The same program on uvloop (from PyPI, in a venv of one interpreter of 3.11–3.13):
/// its loop runs asyncio's C tasks, listed the same.
#[test]
fn dump_lists_the_tasks_of_a_program_on_uvloop() {
    let base = &interpreters_for("dump_uvloop", "interpreters 3.11-3.13", |i| {
        (3, 11) <= i.version && i.version < (3, 14)
    })[0];
    let (python, version) = uvloop_venv(base);
    let on_uvloop = on_uvloop(HUNG_TASKS);
    for preloaded in [Some("cpu"), None] {
        let what = format!(
            "{} on uvloop {version}",
            live_label(&python.name, preloaded)
        );
        check_hung_tasks(&python.path, &what, &on_uvloop, preloaded);
    }
}

/// Starts `script` (a [`HUNG_TASKS`]), dumps it and checks its four tasks: `main` awaited by
/// nothing, at its `gather`; each worker awaited by `main`, at `Event.wait`, `wait_for` and
/// `worker`'s lines.
fn check_hung_tasks(python: &Path, what: &str, script: &str, preloaded: Option<&str>) {
    let dir = scratch_dir("dump-tasks");
    let mut command = live_program(python, script, &dir, preloaded, "tasks.%p.gz", &[]);
    let program = start_until_ready(command.stderr(Stdio::null()));
    let pid = program.0.id().to_string();
    let out = pyigprof(&["dump", "--json", &pid], &dir);
    assert!(out.status.success(), "{what}: {}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tasks = json["tasks"].as_array().cloned().unwrap_or_default();
    let seen: Vec<(String, Option<String>, Vec<String>)> = tasks
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or("").to_string(),
                t["awaited_by_name"].as_str().map(String::from),
                t["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| format!("{}:{}", f["name"].as_str().unwrap(), f["line"]))
                    .collect(),
            )
        })
        .collect();
    eprintln!("dump_tasks: {what}: {seen:?}");
    assert_eq!(seen.len(), 4, "{what}: {seen:?}");
    assert!(
        seen.iter().any(|(name, by, frames)| name == "main"
            && by.is_none()
            && frames == &["main:12".to_string()]),
        "{what}: the main task: {seen:?}"
    );
    for i in 0..3 {
        let name = format!("worker-{i}");
        let (_, by, frames) = seen
            .iter()
            .find(|(n, _, _)| *n == name)
            .unwrap_or_else(|| panic!("{what}: no {name} in {seen:?}"));
        assert_eq!(by.as_deref(), Some("main"), "{what}: {name}");
        assert_eq!(frames.len(), 3, "{what}: {name}: {frames:?}");
        assert!(frames[0].starts_with("Event.wait:"), "{what}: {frames:?}");
        assert_eq!(frames[1..], ["wait_for:4", "worker:6"], "{what}: {name}");
    }
    let shown = text(&pyigprof(&["dump", &pid], &dir).stdout);
    assert!(
        shown.contains("\nTask \"worker-2\"")
            && shown.contains(", awaited by \"main\": waiting\n    Event.wait ("),
        "{what}:\n{shown}"
    );
}
