//! Every live request on a busy server whose threads start and end all the time (issue 52:
//! `pyigprof dump` killed such a server at its first or second call).
//!
//! The program is a `ThreadingHTTPServer` (a thread per request) hashing and summing for each
//! request, under load from another process (4 client threads, a new connection per
//! request). While it serves, the commands a user runs on it are run interleaved: `dump`
//! ×50, `dump --json` ×20, `top --batch` ×10, `attach -d 0.5` ×10 and, where the library is
//! preloaded, 20 snapshot signals (`PYIGPROF_DUMP_SIGNAL`). The server must answer every
//! request and exit 0 when asked to; every command must exit 0, or say in one line why not
//! (`attach` on a process that runs under the preloaded library); the dumps must show the
//! server's main thread in `serve_forever`, the snapshots and the final profile must read.
//! Started preloaded in cpu and in wall mode, and without the library (the commands load
//! it). 3.12 in the fast tier; 3.7–3.15 in the whole matrix. The figures (commands,
//! requests, latencies) are printed.
//!
//! Also: a checked read that faults on the library's answering thread is recovered there
//! (`PYIGPROF_LIVE_FAULT_CHECK`), on a preloaded and on an attached process.

use pyigprof_suite::*;
use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server: a thread per request; `GET /quit` shuts it down. Writes its port to
/// `port`, says `ready`, and at the end `served N` (requests answered, /quit not counted).
const SERVER: &str = r#"
import hashlib, sys, threading
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
served = [0]
count = threading.Lock()
def work():
    h = hashlib.sha256()
    for _ in range(16):
        h.update(b"x" * 4096)
    return h.hexdigest() + str(sum(i * i for i in range(3000)))
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def do_GET(self):
        if self.path == "/quit":
            body = b"bye"
            threading.Thread(target=server.shutdown).start()
        else:
            body = work().encode()
            with count:
                served[0] += 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open("port", "w") as f:
    f.write(str(server.server_address[1]))
sys.stdout.write("ready\n")
sys.stdout.flush()
server.serve_forever()
server.server_close()
sys.stdout.write("served %d\n" % served[0])
"#;

/// The load: 4 threads, a new connection per request, until the file `stop` exists; then
/// `answered N failed F slowest_ms S`, and the first failure.
const CLIENT: &str = r#"
import os, sys, threading, time, urllib.request
port = int(open("port").read())
answered = [0]; failed = []; slowest = [0.0]
lock = threading.Lock()
def load():
    while not os.path.exists("stop"):
        t0 = time.time()
        try:
            body = urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=30).read()
            ok = len(body) > 64
        except Exception as e:
            ok = False; why = repr(e)
        took = time.time() - t0
        with lock:
            if ok:
                answered[0] += 1
                slowest[0] = max(slowest[0], took)
            else:
                failed.append(why if 'why' in dir() else "short body")
threads = [threading.Thread(target=load) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print("answered %d failed %d slowest_ms %.0f" % (answered[0], len(failed), slowest[0] * 1000))
if failed: print("first failure:", failed[0])
"#;

/// One kind of command run on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Dump,
    Json,
    Top,
    Attach,
    Snapshot,
}

/// The commands, interleaved (a fixed shuffle): dump ×50, dump --json ×20, top ×10,
/// attach ×10, and snapshot signals ×20 where `snapshots`.
fn schedule(snapshots: bool) -> Vec<Kind> {
    let mut kinds = Vec::new();
    for (kind, n) in [
        (Kind::Dump, 50),
        (Kind::Json, 20),
        (Kind::Top, 10),
        (Kind::Attach, 10),
        (Kind::Snapshot, if snapshots { 20 } else { 0 }),
    ] {
        kinds.extend(std::iter::repeat_n(kind, n));
    }
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for i in (1..kinds.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        kinds.swap(i, (state % (i as u64 + 1)) as usize);
    }
    kinds
}

/// What one command did: kind, how long it took, and a failure's words.
struct Ran {
    kind: Kind,
    took: Duration,
    problem: Option<String>,
}

/// Median and largest of `durations`, in ms.
fn median_max(mut durations: Vec<Duration>) -> (u128, u128) {
    durations.sort();
    match durations.len() {
        0 => (0, 0),
        n => (durations[n / 2].as_millis(), durations[n - 1].as_millis()),
    }
}

/// A command's failure in words, `None` when it did what it should: exit 0 (with output
/// that `check` accepts), or, when `may_refuse`, a non-zero exit with one line on stderr.
fn judge(
    out: &std::process::Output,
    may_refuse: bool,
    check: impl Fn(&str) -> Result<(), String>,
) -> Option<String> {
    let err = text(&out.stderr);
    if out.status.success() {
        return check(&text(&out.stdout)).err();
    }
    let lines = err.lines().count();
    if may_refuse && lines == 1 {
        return None;
    }
    Some(format!("{}: {err}", out.status))
}

/// Every thread's native call stack in process `pid`, by gdb (`thread apply all bt`), at
/// most 300 lines; or why it could not be had.
fn native_stacks(pid: u32) -> String {
    let out = Command::new("timeout")
        .args(["60", "gdb", "-batch", "-p", &pid.to_string()])
        .args(["-ex", "thread apply all bt 40"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(out) => text(&out.stdout)
            .lines()
            .filter(|l| l.starts_with('#') || l.starts_with("Thread"))
            .take(300)
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("(gdb could not run: {e})"),
    }
}

/// The dump's text names the process and shows the main thread serving — or caught
/// running, when what `dump` shows of it is its latest sample, which for a thread that
/// rarely runs a whole sampling period can be from before it served (the whole matrix,
/// 3.12 in wall mode, 1 dump in about 4,000: its latest sample was from the server's
/// imports; once in CI on December 6, with the GIL held, `(main), holds the GIL: running`).
/// Reading a running thread's Python frames as they are is left to do.
fn check_text(pid: u32) -> impl Fn(&str) -> Result<(), String> {
    move |shown: &str| {
        let header = format!("Process {pid}: ");
        // "(main): running …" or "(main), holds the GIL: running …".
        let main = format!("Thread {pid} \"MainThread\" (main)");
        let caught_running = shown.lines().any(|line| {
            line.starts_with(&main) && line.ends_with(": running (stack: its latest sample)")
        });
        if shown.starts_with(&header) && (shown.contains("serve_forever (") || caught_running) {
            Ok(())
        } else {
            Err(format!("not a dump of {pid} serving:\n{shown}"))
        }
    }
}

/// The JSON dump parses, and its main thread is in `serve_forever`.
fn check_json(json: &str) -> Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("not JSON ({e}): {json}"))?;
    let threads = value["threads"].as_array().cloned().unwrap_or_default();
    let main = threads
        .iter()
        .find(|t| t["main"] == true)
        .ok_or_else(|| format!("no main thread in {json}"))?;
    let serving = main["frames"].as_array().is_some_and(|f| {
        f.iter()
            .any(|f| f["name"] == "BaseServer.serve_forever" || f["name"] == "serve_forever")
    });
    // Caught running: its latest sample, which can predate serving ([`check_text`]).
    let caught_running = main["state"] == "running" && main["stack_from"] == "sample";
    if serving || caught_running {
        Ok(())
    } else {
        Err(format!("the main thread is not in serve_forever: {main}"))
    }
}

/// Runs the whole schedule on a server started on `python` (`preloaded`: the clock, or
/// `None` to attach) and checks it; returns the figures line.
fn churn(python: &Interpreter, preloaded: Option<&str>) -> String {
    let what = live_label(&python.name, preloaded);
    let dir = scratch_dir("live-churn");
    let mut server = live_program(
        &python.path,
        SERVER,
        &dir,
        preloaded,
        "server.%p.gz",
        &[("PYIGPROF_DUMP_SIGNAL", "USR2")],
    );
    let mut server = start_until_ready(server.stderr(Stdio::piped()));
    let pid = server.0.id();
    let mut client = Killed(
        Command::new(&python.path)
            .args(["-c", CLIENT])
            .current_dir(&dir)
            .env_remove("LD_PRELOAD")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the client"),
    );
    // The load running: threads start and end all the time.
    std::thread::sleep(Duration::from_millis(500));
    let pid_text = pid.to_string();
    let mut ran: Vec<Ran> = Vec::new();
    let mut stacks_when_stuck: Option<String> = None;
    let dead = |server: &mut Child| server.try_wait().ok().flatten();
    for kind in schedule(preloaded.is_some()) {
        let started = Instant::now();
        let problem = match kind {
            Kind::Dump => {
                let out = pyigprof(&["dump", &pid_text], &dir);
                judge(&out, false, check_text(pid))
            }
            Kind::Json => {
                let out = pyigprof(&["dump", "--json", &pid_text], &dir);
                judge(&out, false, check_json)
            }
            Kind::Top => {
                let out = pyigprof(&["top", &pid_text, "--batch", "1", "-i", "0.3"], &dir);
                judge(&out, false, |shown| {
                    if shown.contains("samples") {
                        Ok(())
                    } else {
                        Err(format!("no report:\n{shown}"))
                    }
                })
            }
            Kind::Attach => {
                let output = dir.join("attached.%p.gz");
                let out = pyigprof(
                    &[
                        "attach",
                        &pid_text,
                        "-d",
                        "0.5",
                        "-o",
                        output.to_str().unwrap(),
                    ],
                    &dir,
                );
                // A process under the preloaded library is profiled already: one line.
                judge(&out, preloaded.is_some(), |_| Ok(()))
            }
            Kind::Snapshot => {
                // SAFETY: a signal to the test's own child.
                unsafe { libc::kill(pid as i32, libc::SIGUSR2) };
                std::thread::sleep(Duration::from_millis(50));
                None
            }
        };
        // A call into the process that never returned: its threads' native stacks, once,
        // for the failure's message (a stop inside pyigprof's own heap hung the server so,
        // December 5).
        if stacks_when_stuck.is_none()
            && problem
                .as_deref()
                .is_some_and(|p| p.contains("did not stop or return in time"))
        {
            stacks_when_stuck = Some(native_stacks(pid));
        }
        ran.push(Ran {
            kind,
            took: started.elapsed(),
            problem,
        });
        if let Some(status) = dead(&mut server.0) {
            let mut err = String::new();
            let _ = server.0.stderr.take().unwrap().read_to_string(&mut err);
            panic!(
                "{what}: the server ended ({status}) after {} commands, the last {kind:?}; its stderr: {err}",
                ran.len()
            );
        }
    }
    let problems: Vec<String> = ran
        .iter()
        .filter_map(|r| r.problem.as_ref().map(|p| format!("{:?}: {p}", r.kind)))
        .collect();
    assert!(
        problems.is_empty(),
        "{what}: {} commands failed: {problems:#?}{}",
        problems.len(),
        stacks_when_stuck
            .map(|s| format!(
                "\nthe server's threads after the first call that did not return:\n{s}"
            ))
            .unwrap_or_default()
    );
    // The load ends; the server is asked to quit and must exit 0 having answered all.
    std::fs::write(dir.join("stop"), "").unwrap();
    let mut load = String::new();
    let client_done = wait_at_most(&mut client.0, Duration::from_secs(60));
    assert!(client_done.is_some(), "{what}: the client did not end");
    client
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut load)
        .unwrap();
    let port: u16 = std::fs::read_to_string(dir.join("port"))
        .unwrap()
        .parse()
        .unwrap();
    let mut quit = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to quit");
    quit.write_all(b"GET /quit HTTP/1.0\r\n\r\n").unwrap();
    let mut bye = String::new();
    let _ = quit.read_to_string(&mut bye);
    let status = wait_at_most(&mut server.0, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("{what}: the server did not end after /quit"));
    let mut said = String::new();
    let _ = std::io::BufReader::new(server.0.stdout.take().unwrap()).read_line(&mut said);
    let mut err = String::new();
    let _ = server.0.stderr.take().unwrap().read_to_string(&mut err);
    assert!(
        status.success(),
        "{what}: the server exited {status}; stderr: {err}"
    );
    let number = |text: &str, key: &str| -> u64 {
        text.split_whitespace()
            .skip_while(|w| *w != key)
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{what}: no {key} in {text:?}"))
    };
    let answered = number(&load, "answered");
    let failed = number(&load, "failed");
    let served = number(&said, "served");
    assert_eq!(failed, 0, "{what}: requests failed: {load}");
    assert!(
        answered > 100,
        "{what}: only {answered} requests answered: {load}"
    );
    assert_eq!(
        served, answered,
        "{what}: the server served {served}, the client got {answered}"
    );
    // Nothing of pyigprof's in the program's stderr.
    assert!(
        !err.contains("pyigprof") || preloaded.is_some(),
        "{what}: stderr: {err}"
    );
    if preloaded.is_some() {
        // The snapshots and the final profile read.
        let profiles = files_in(&dir)
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("server.")
            })
            .collect::<Vec<_>>();
        let snapshots = profiles
            .iter()
            .filter(|p| p.to_string_lossy().contains("snapshot"))
            .count();
        assert!(snapshots >= 1, "{what}: no snapshot written: {profiles:?}");
        for profile in &profiles {
            let out = analyse(&["--top", profile.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{what}: {} does not read: {}",
                profile.display(),
                text(&out.stderr)
            );
        }
        let last = profiles
            .iter()
            .find(|p| !p.to_string_lossy().contains("snapshot"))
            .unwrap_or_else(|| panic!("{what}: no final profile: {profiles:?}"));
        let out = analyse(&["--top", last.to_str().unwrap()]);
        assert!(
            text(&out.stdout).contains("do_GET"),
            "{what}: no do_GET in the final profile:\n{}",
            text(&out.stdout)
        );
    }
    let figures = |kind: Kind| {
        let took: Vec<Duration> = ran
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| r.took)
            .collect();
        let n = took.len();
        let (median, max) = median_max(took);
        format!("{kind:?} ×{n} median {median} ms max {max} ms")
    };
    format!(
        "{what}: {} commands, 0 failed; {}; {}; {}; {}; snapshots ×{}; requests answered {answered}, failed 0 ({})",
        ran.len(),
        figures(Kind::Dump),
        figures(Kind::Json),
        figures(Kind::Top),
        figures(Kind::Attach),
        ran.iter().filter(|r| r.kind == Kind::Snapshot).count(),
        load.trim()
    )
}

#[test]
fn every_live_request_on_a_server_whose_threads_come_and_go_leaves_it_serving() {
    let pythons = match tier() {
        Tier::Fast => every_interpreter_for("live_churn", "3.12", |i| i.version == (3, 12)),
        Tier::Full => {
            every_interpreter_for("live_churn", "3.7+ interpreters", |i| i.version >= (3, 7))
        }
    };
    assert!(!pythons.is_empty(), "no interpreter to run the server on");
    for python in &pythons {
        for preloaded in LIVE_STARTS {
            let figures = churn(python, preloaded);
            eprintln!("live_churn: {figures}");
        }
    }
}

/// Starts a program that only sleeps, preloaded (cpu mode) or not, says `ready`.
fn sleeper(python: &Path, preloaded: bool, dir: &Path) -> Killed {
    const SLEEPER: &str =
        "import sys, time\nsys.stdout.write('ready\\n'); sys.stdout.flush()\ntime.sleep(60)";
    let clock = preloaded.then_some("cpu");
    let mut command = live_program(python, SLEEPER, dir, clock, "sleeper.%p.gz", &[]);
    start_until_ready(command.stderr(Stdio::piped()))
}

#[test]
fn a_fault_of_a_checked_read_on_the_answering_thread_is_recovered() {
    let pythons = interpreters_for("fault_check", "3.7+ interpreters", |i| i.version >= (3, 7));
    for python in pythons {
        for preloaded in [true, false] {
            let what = live_label(&python.name, preloaded.then_some("cpu"));
            let dir = scratch_dir("fault-check");
            let mut program = sleeper(&python.path, preloaded, &dir);
            let pid = program.0.id().to_string();
            for round in 1..=2 {
                let out = Command::new(&artifacts().command)
                    .args(["dump", &pid])
                    .current_dir(&dir)
                    .env_remove("LD_PRELOAD")
                    .env("PYIGPROF_LIVE_FAULT_CHECK", "1")
                    .output()
                    .expect("run pyigprof");
                let err = text(&out.stderr);
                assert!(
                    out.status.success(),
                    "{what}, round {round}: {err}; the program {}",
                    match program.0.try_wait() {
                        Ok(Some(status)) => format!("ended: {status}"),
                        _ => "runs".into(),
                    }
                );
                assert!(
                    err.contains("pyigprof dump: fault-check recovered "),
                    "{what}, round {round}: {err}"
                );
                assert!(
                    text(&out.stdout).contains("time.sleep")
                        || text(&out.stdout).contains("<module>"),
                    "{what}: {}",
                    text(&out.stdout)
                );
            }
            assert!(
                program.0.try_wait().unwrap().is_none(),
                "{what}: the program ended"
            );
        }
    }
}

/// 500 `threading` workers, half waiting on an `Event`, half sleeping, named `worker-N`.
const MANY: &str = r#"
import sys, threading, time
stop = threading.Event()
def waiter():
    stop.wait()
def sleeper():
    while not stop.is_set():
        time.sleep(0.05)
workers = [threading.Thread(target=waiter if i % 2 else sleeper, name="worker-%d" % i, daemon=True)
           for i in range(500)]
for w in workers:
    w.start()
sys.stdout.write("ready\n")
sys.stdout.flush()
time.sleep(120)
"#;

#[test]
fn dump_lists_every_thread_of_a_process_with_501_threads() {
    let pythons = interpreters_for("dump_501", "3.7+ interpreters", |i| i.version >= (3, 7));
    for python in pythons {
        for preloaded in [Some("cpu"), None] {
            let what = live_label(&python.name, preloaded);
            let dir = scratch_dir("dump-501");
            let mut command = live_program(&python.path, MANY, &dir, preloaded, "many.%p.gz", &[]);
            let mut program = start_until_ready(command.stderr(Stdio::null()));
            let pid = program.0.id().to_string();
            let out = pyigprof(&["dump", "--json", &pid], &dir);
            assert!(out.status.success(), "{what}: {}", text(&out.stderr));
            let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
            let threads = json["threads"].as_array().unwrap();
            assert_eq!(threads.len(), 501, "{what}: threads listed");
            let unsampled = threads
                .iter()
                .filter(|t| t["stack_from"] == "unsampled")
                .count();
            assert_eq!(unsampled, 0, "{what}: every thread sampled");
            let waiting = |reason: &str| threads.iter().filter(|t| t["waiting"] == reason).count();
            // Event.wait is a lock's wait; the sleepers sleep (or run between two sleeps).
            assert!(
                waiting("lock") >= 250,
                "{what}: {} waiting for a lock",
                waiting("lock")
            );
            assert!(
                waiting("sleep") >= 200,
                "{what}: {} sleeping",
                waiting("sleep")
            );
            let shown = pyigprof(&["dump", &pid], &dir);
            assert!(shown.status.success(), "{what}: {}", text(&shown.stderr));
            assert!(
                text(&shown.stdout).contains("; 501 threads;"),
                "{what}: {}",
                text(&shown.stdout)
                    .lines()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            assert!(
                program.0.try_wait().unwrap().is_none(),
                "{what}: the program ended"
            );
        }
    }
}
