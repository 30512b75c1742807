//! `pyigprof attach PID` on a running server that was started without the profiler: the
//! profile's shares are those the server measured over the attached window, in every
//! thread, those started during it included; the server's responses, output, threads,
//! signal handlers (but `SIGPROF`'s, which keeps pyigprof's, ignoring it) and exit status
//! are the same before, during and after; attaching twice and ten times back to back
//! works; a process that is not Python, one that does not exist and one that another
//! tracer holds get one clear line and exit status 1.

use pyigprof_suite::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A thread-per-connection server (`socketserver.ThreadingTCPServer`) on a local port. A
/// request `work N` runs `python_work` (a Python loop) and `digest` (SHA-256 of 4 MiB in
/// OpenSSL, which releases the GIL) N times on the connection's own thread and answers
/// their results; `cpu` answers the CPU time (s) each function has used in all threads
/// (each thread's own clock, summed); `threads` how many of the kernel's threads are not
/// Python's (0 unless something runs a native thread); `signals` the caught-signal mask of `/proc/self/status`; `quit` ends it.
/// A thread `background` does the same work on its own, started before any attach.
const SERVER: &str = r#"
import hashlib, json, os, socketserver, sys, threading, time
lock = threading.Lock()
used = {"python_work": 0.0, "digest": 0.0}
def timed(name, f, *a):
    t = time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
    r = f(*a)
    d = time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID) - t
    with lock:
        used[name] += d
    return r
def python_work(n):
    t = 0
    for i in range(n):
        t += i % 7
    return t
BLOCK = b"pyigprof" * (1 << 19)
def digest():
    return hashlib.sha256(BLOCK).hexdigest()[:16]
def work():
    return "%d %s" % (timed("python_work", python_work, 60000), timed("digest", digest))
def background():
    while True:
        work()
        time.sleep(0.01)
class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            words = line.decode().split()
            if words[0] == "work":
                answer = " ".join(work() for _ in range(int(words[1])))
            elif words[0] == "cpu":
                with lock:
                    answer = json.dumps(used)
            elif words[0] == "threads":
                answer = str(len(os.listdir("/proc/self/task")) - threading.active_count())
            elif words[0] == "signals":
                answer = [l for l in open("/proc/self/status") if l.startswith("SigCgt")][0].split()[1]
            elif words[0] == "quit":
                self.wfile.write(b"bye\n")
                self.server.quit = True
                return
            self.wfile.write((answer + "\n").encode())
class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    quit = False
server = Server(("127.0.0.1", 0), Handler)
server.timeout = 0.1
threading.Thread(target=background, daemon=True).start()
print("port", server.server_address[1], flush=True)
while not server.quit:
    server.handle_request()
print("served", flush=True)
sys.exit(3)
"#;

/// The request made during the window, each on a connection of its own: its thread lives
/// ~100 ms. (With shorter ones, ~20 ms, the first sample of each thread — which stands for
/// its whole first interval — lands in `digest` more often than the thread's first
/// function, `python_work`: 5-8 points of the share moved, under `record` too.)
const REQUEST: &str = "work 6";

struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(python: &Path) -> Server {
        let mut command = Command::new(python);
        command
            .args(["-c", SERVER])
            .env_remove("LD_PRELOAD")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = with_default_signals(&mut command)
            .spawn()
            .expect("start the server");
        let mut first = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut first)
            .expect("the server's port");
        let port = first
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the server's first line: {first:?}"));
        Server { child, port }
    }

    /// One request on a new connection (a new thread of the server's), and its answer.
    fn ask(&self, request: &str) -> String {
        self.try_ask(request).unwrap()
    }

    /// [`Server::ask`], with what went wrong.
    fn try_ask(&self, request: &str) -> Result<String, String> {
        let mut stream =
            TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| format!("connect: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        stream
            .write_all(format!("{request}\n").as_bytes())
            .map_err(|e| format!("write: {e}"))?;
        let mut answer = String::new();
        BufReader::new(stream)
            .read_line(&mut answer)
            .map_err(|e| format!("read: {e}"))?;
        Ok(answer.trim_end().to_string())
    }

    fn cpu(&self) -> (f64, f64) {
        let text = self.ask("cpu");
        (
            json_number(&text, "python_work"),
            json_number(&text, "digest"),
        )
    }

    /// "the server runs", or how it ended (for failure messages).
    fn condition(&mut self) -> String {
        let status = match self.child.try_wait() {
            Ok(Some(status)) => format!("the server ended: {status}"),
            _ => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                "the server ran".into()
            }
        };
        let mut err = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = stderr.read_to_string(&mut err);
        }
        format!("{status}; its stderr: {err:?}")
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Ends the server: its exit status, stdout and stderr.
    fn quit(mut self) -> (Option<i32>, String, String) {
        assert_eq!(self.ask("quit"), "bye");
        let status = self.child.wait().expect("the server ends");
        let mut out = String::new();
        let mut err = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (status.code(), out, err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A failed assertion must not leave the server running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server's mask of caught signals (`SigCgt`) but `SIGPROF`, whose handler pyigprof
/// keeps, ignoring it, once attached (its default action would end the process were an
/// expiration still in flight when sampling stopped).
fn caught_but_sigprof(server: &Server) -> u64 {
    let mask = u64::from_str_radix(&server.ask("signals"), 16).expect("a SigCgt mask");
    mask & !(1 << (libc::SIGPROF - 1))
}

/// The server's count of threads that are not Python's, once it is 0 (a connection's
/// thread that has just left Python may not have ended yet) or after 2 s.
fn settled(server: &Server) -> String {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let now = server.ask("threads");
        if now == "0" || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Requests on new connections, one after another, until `stop`; every answer must be
/// `expected`. Returns how many were answered.
fn keep_asking(server: &Server, expected: &str, stop: &std::sync::atomic::AtomicBool) -> usize {
    let mut answered = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        assert_eq!(server.ask(REQUEST), expected, "an answer changed");
        answered += 1;
    }
    answered
}

#[test]
fn attach_profiles_a_running_server_and_leaves_it_as_it_was() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let pythons = interpreters_for("attach", "interpreters from 3.3", |i| i.version >= (3, 3));
    for python in pythons {
        let dir = scratch_dir("attach");
        let mut server = Server::start(&python.path);
        let expected = server.ask(REQUEST);
        let threads_before = settled(&server);
        let signals_before = caught_but_sigprof(&server);
        let (py0, dg0) = server.cpu();
        let process_cpu = |pid: i32| cpu_seconds(pid as u32).expect("the server runs");
        let cpu_before = process_cpu(server.pid());
        let stop = AtomicBool::new(false);
        let (out, answered) = std::thread::scope(|scope| {
            let asking = scope.spawn(|| keep_asking(&server, &expected, &stop));
            let started = Instant::now();
            let pid = server.pid().to_string();
            let out = pyigprof(
                &["attach", &pid, "--duration", "3", "-o", "window.gz"],
                &dir,
            );
            // Before any assertion: a failing one would otherwise leave the scope waiting
            // for the asking thread for ever.
            stop.store(true, Ordering::Relaxed);
            let took = started.elapsed();
            assert!(took < Duration::from_secs(20), "attach took {took:?}");
            (out, asking.join().unwrap())
        });
        let (py1, dg1) = server.cpu();
        let window_cpu = process_cpu(server.pid()) - cpu_before;
        let stderr = text(&out.stderr);
        assert!(
            out.status.success(),
            "{}: {stderr} ({})",
            python.name,
            server.condition()
        );
        eprintln!(
            "attach: {}: {}",
            python.name,
            stderr.lines().next().unwrap_or("")
        );
        assert!(
            answered > 5,
            "{}: {answered} requests during the window",
            python.name
        );
        // The summary gives the helper's cost against the program's CPU time over the
        // window, not over its life (issue 58: "0.1 % of the program's 104.443 s" for a
        // 2.3 s window).
        let program_s: f64 = stderr
            .split("of the program's ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{}: no helper cost in {stderr}", python.name));
        assert!(
            program_s <= window_cpu + 0.1 && program_s >= 0.7 * window_cpu - 0.1,
            "{}: the summary's program CPU {program_s:.3} s, {window_cpu:.2} s over the window",
            python.name
        );
        // The command says where the profile is and how to read it.
        let path = dir.join("window.gz");
        assert!(
            stderr.contains(&format!("pyigprof: 1 profile: {}\n", path.display()))
                && stderr.contains(&format!(
                    "read with: pyigprof report --top {}",
                    path.display()
                )),
            "{}: {stderr}",
            python.name
        );
        // The shares of the window are what the server measured over it.
        let profile = igprof_analyse::read_profiles(&[path]).unwrap();
        let (python_work, digest) = (py1 - py0, dg1 - dg0);
        let total = python_work + digest;
        for (name, measured) in [("python_work", python_work), ("digest", digest)] {
            let expected_share = 100.0 * measured / total;
            let got = share(&profile, |s| s.has(name));
            eprintln!(
                "attach: {}: {name} {got:.1} % of the profile, {expected_share:.1} % measured \
                 ({measured:.2} s of CPU)",
                python.name
            );
            assert!(
                (got - expected_share).abs() < 10.0,
                "{}: {name} {got:.1} % in the profile, {expected_share:.1} % measured",
                python.name
            );
        }
        // digest's time is in native code under its Python caller (OpenSSL's libcrypto, or
        // CPython's own _sha256 where the interpreter was built without OpenSSL), in the
        // threads of requests that started during the window as in the others.
        let native_leaf = |s: &Stack| s.frames.last().is_some_and(|f| f.1.contains(".so"));
        let digest_share = share(&profile, |s| s.has("digest"));
        let digest_native = share(&profile, |s| s.has("digest") && native_leaf(s));
        assert!(
            digest_native > 0.8 * digest_share,
            "{}: {digest_native:.1} % of {digest_share:.1} % in native code",
            python.name
        );
        // Afterwards: the same answers, threads and signal handlers.
        assert_eq!(server.ask(REQUEST), expected, "{}", python.name);
        assert_eq!(threads_before, "0", "{}", python.name);
        assert_eq!(
            settled(&server),
            "0",
            "{}: a thread of pyigprof's is left",
            python.name
        );
        assert_eq!(
            caught_but_sigprof(&server),
            signals_before,
            "{}",
            python.name
        );
        // Attaching twice works.
        let pid = server.pid().to_string();
        let again = pyigprof(&["attach", &pid, "-d", "0.5", "-o", "again.gz"], &dir);
        assert!(
            again.status.success(),
            "{}: {} ({})",
            python.name,
            text(&again.stderr),
            server.condition()
        );
        let again = igprof_analyse::read_profiles(&[dir.join("again.gz")]).unwrap();
        assert!(
            share(&again, |s| s.has("background")) > 50.0,
            "{}",
            python.name
        );
        assert_eq!(
            caught_but_sigprof(&server),
            signals_before,
            "{}",
            python.name
        );
        // Its output and exit status are its own.
        let (code, stdout, stderr) = server.quit();
        assert_eq!(code, Some(3), "{}: {stderr}", python.name);
        assert_eq!(stdout, "served\n", "{}", python.name);
        assert_eq!(stderr, "", "{}", python.name);
    }
}

#[test]
fn what_cannot_be_attached_to_gets_one_line() {
    let dir = scratch_dir("attach-refused");
    // Not Python.
    let mut sleep = Command::new("sleep").arg("30").spawn().unwrap();
    // Until its exec is done, the child is a copy of this test (its name the test thread's).
    let comm = format!("/proc/{}/comm", sleep.id());
    for _ in 0..1000 {
        if std::fs::read_to_string(&comm).is_ok_and(|name| name.trim() == "sleep") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = pyigprof(&["attach", &sleep.id().to_string(), "-d", "1"], &dir);
    let _ = sleep.kill();
    let _ = sleep.wait();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("sleep is not a Python interpreter") && stderr.lines().count() == 1,
        "{stderr}"
    );
    // No such process (above the kernel's largest process id).
    let out = pyigprof(&["attach", "2147483646", "-d", "1"], &dir);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "pyigprof attach: process 2147483646: no such process\n"
    );
    // Traced by another: this test holds it with PTRACE_SEIZE.
    let python = interpreters_for("attach refused", "interpreters from 3.3", |i| {
        i.version >= (3, 3)
    })
    .into_iter()
    .next()
    .expect("a Python 3");
    let mut held = Command::new(&python.path)
        .args(["-c", "import time; time.sleep(30)"])
        .env_remove("LD_PRELOAD")
        .spawn()
        .unwrap();
    let pid = held.id() as libc::pid_t;
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: seizing a child of ours; it keeps running.
    let seized = unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    assert_eq!(
        seized,
        0,
        "PTRACE_SEIZE: {}",
        std::io::Error::last_os_error()
    );
    let out = pyigprof(&["attach", &pid.to_string(), "-d", "1"], &dir);
    let _ = held.kill();
    let _ = held.wait();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("traces it already") && stderr.lines().count() == 1,
        "{stderr}"
    );
}

/// Windows back to back while requests come: every attach succeeds and every answer is
/// the same. (Before the handler's per-thread counts left thread-local storage, a sample
/// that interrupted `malloc` in a thread older than the library allocated that thread's
/// TLS block with `malloc` from the handler: 2 of ~110 windows hung a thread or ended the
/// process on Debian's 3.11.)
#[test]
fn attaches_back_to_back_keep_the_server_answering() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let pythons = interpreters_for("attach again", "interpreters from 3.3", |i| {
        i.version >= (3, 3)
    });
    for python in pythons {
        let dir = scratch_dir("attach-again");
        let mut server = Server::start(&python.path);
        let expected = server.ask("work 1");
        let stop = AtomicBool::new(false);
        let (failed, answered) = std::thread::scope(|scope| {
            let asking = scope.spawn(|| {
                let mut answered = 0;
                while !stop.load(Ordering::Relaxed) {
                    let answer = server.try_ask("work 1");
                    if answer.as_ref() != Ok(&expected) {
                        return Err(format!("answer {answered}: {answer:?}"));
                    }
                    answered += 1;
                }
                Ok(answered)
            });
            let pid = server.pid().to_string();
            let mut failed = None;
            for window in 0..10 {
                let out = pyigprof(&["attach", &pid, "-d", "0.4", "-o", "w%p.gz"], &dir);
                if !out.status.success() {
                    failed = Some(format!("window {window}: {}", text(&out.stderr)));
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
            (failed, asking.join().unwrap())
        });
        if let Some(failed) = failed {
            panic!("{}: {failed} ({})", python.name, server.condition());
        }
        match answered {
            Ok(n) => assert!(n > 10, "{}: {n} answers", python.name),
            Err(e) => panic!("{}: {e} ({})", python.name, server.condition()),
        }
        let (code, _, stderr) = server.quit();
        assert_eq!(code, Some(3), "{}: {stderr}", python.name);
    }
}
