//! Profiling a process that is already running: the library's side of `pyigprof attach
//! PID` (the command's side, the `ptrace` injection, is `cli/src/attach.rs`).
//!
//! The command stops the process's main thread, has it call `dlopen` on this library —
//! whose constructor does nothing in an interpreter that is initialised already — and then
//! [`pyigprof_attach`] with the settings, and lets it go on. [`pyigprof_attach`] finds the
//! interpreter's thread-state key on that thread (the main thread of a Python program has
//! its thread state bound: `hooks::cpython::find_thread_state_key`) and starts the
//! *control thread*, which does the rest while the program runs on:
//!
//! 1. connects to the command's Unix socket (`PYIGPROF_ATTACH_SOCKET`);
//! 2. builds the sampler (or takes back the one of an earlier window) — sampling on
//!    `task-clock` perf events, opened by the helper process, where the kernel opens them,
//!    else on POSIX CPU timers, as the preloaded library chooses — installs the
//!    `SIGPROF` handler and the fault handler the sampler's reads need (a handler the
//!    program has there, `faulthandler`'s, is kept behind it), and adopts every thread
//!    (`sources::adopt`: the roll call), then says `started N`;
//! 3. rebinds `pthread_create` in the objects the process had loaded
//!    (`hooks::got`: a library loaded late is not interposed on anything), so that a
//!    thread the program starts registers as it starts, and every [`POLL`] adopts the
//!    threads started otherwise (by objects loaded since, or by `clone` directly) and
//!    deletes the timers of those that ended, until the command says `stop` or its socket
//!    closes (the command was killed);
//! 4. puts the GOT slots back, stops sampling, ends the helper process, writes the profile (`output::lifecycle::write_attached`), gives
//!    the program back its actions for `SIGSEGV` and `SIGBUS`, says `written PATH` and the
//!    summary, and ends. `SIGPROF` keeps pyigprof's handler, which ignores it while sampling
//!    is off: a timer expiration or perf event overflow still in flight when sampling stops
//!    must not meet the default action, which ends the process. The library stays loaded (unloading code that
//!    signal frames or a late handler may still reference is not safe); a later attach
//!    uses it again.
//!
//! If the program exits during the window, an `atexit` callback writes the profile first.
//! What stays different while attached: one more thread (the control thread, with every
//! signal blocked), the helper process, the profiler's memory, and the `SIGPROF` the
//! threads receive; afterwards, the library's mapping and its `SIGPROF` handler. The
//! program's output is untouched: nothing is printed in it ([`crate::messages::silence`]).
//!
//! Lines to the command: `started THREADS`, `note TEXT`, `written PATH`, `summary TEXT`,
//! `error TEXT`, `discarded`; from it: `stop`, and at any time while sampling the live
//! requests of [`Live`] (`dump`, `snapshot`, `write`).
//!
//! `pyigprof dump` and `pyigprof top` use the same window with
//! `PYIGPROF_ATTACH_PURPOSE=live`: they ask live requests, then `stop`, and nothing is
//! written (`discarded`). In a process that runs under the preloaded library, whose
//! sampler already samples every thread, such a call starts no window: a control thread
//! (which leaves the sampled threads as it starts: the preloaded `pthread_create`
//! registered it) only answers live requests until the command goes ([`serve_dumps`]).

use crate::capture::python::discover;
use crate::capture::unwind::modules;
use crate::config::Config;
use crate::output::lifecycle;
use crate::sampler::{self, Sampler};
use crate::sources::{adopt, handler, helper};
use pyigprof_hooks::{cpython, got, signals};
use std::collections::HashSet;
use std::ffi::{c_char, c_int, CStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

/// How often the control thread looks for threads started since its last look.
pub const POLL: Duration = Duration::from_millis(10);

/// [`pyigprof_attach`]: the control thread was started.
pub const STARTED: c_int = 0;
/// [`pyigprof_attach`]: the process is profiled by its `LD_PRELOAD` already.
pub const PRELOADED: c_int = 1;
/// [`pyigprof_attach`]: another attachment's window is open.
pub const BUSY: c_int = 2;
/// [`pyigprof_attach`]: the process's interpreter is not initialised (or not CPython).
pub const NOT_PYTHON: c_int = 3;
/// [`pyigprof_attach`]: the settings are missing or the control thread cannot start.
pub const CANNOT_START: c_int = 4;
/// [`pyigprof_attach`]: the library's own heap is held ([`crate::alloc::own_heap_held`]),
/// maybe by the very thread the call runs in: nothing was done; the command lets the
/// thread run a moment and calls again.
pub const AGAIN: c_int = 5;

/// Whether an attachment window is open (from [`pyigprof_attach`] until the profile is
/// written).
static OPEN: AtomicBool = AtomicBool::new(false);
/// Whether the window is being ended (by the control thread, or by the program's exit).
static ENDING: AtomicBool = AtomicBool::new(false);
/// The open window: its settings and the command's socket.
static WINDOW: Mutex<Option<Window>> = Mutex::new(None);
/// The GOT slots rebound to pyigprof's `pthread_create` during the window.
static REBOUND: Mutex<Vec<got::Slot>> = Mutex::new(Vec::new());
/// The sampling rate of the sampler made by the first attachment (Hz; 0 before, and in a
/// process whose sampler the constructor made).
static FIRST_HZ: AtomicU32 = AtomicU32::new(0);

struct Window {
    config: Config,
    socket: UnixStream,
    /// A window for `pyigprof dump`: nothing is written at its end.
    discard: bool,
}

/// Starts an attachment window (see the module documentation). Called by `pyigprof attach`
/// through `ptrace` on the process's main thread, wherever it was stopped: does only what
/// must run on a Python thread and starts the control thread. `settings` is a
/// NUL-terminated text of `NAME=value` lines: `PYIGPROF_*` settings as the environment
/// would give them, and `PYIGPROF_ATTACH_SOCKET`. Returns [`STARTED`], or [`PRELOADED`],
/// [`BUSY`], [`NOT_PYTHON`], [`CANNOT_START`], [`AGAIN`].
///
/// # Safety
/// `settings` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pyigprof_attach(settings: *const c_char) -> c_int {
    if settings.is_null() {
        return CANNOT_START;
    }
    // Before anything allocates: the thread may have been stopped holding the heap.
    if crate::alloc::own_heap_held() {
        return AGAIN;
    }
    // SAFETY: the caller's NUL-terminated string.
    let text = unsafe { CStr::from_ptr(settings) }
        .to_string_lossy()
        .into_owned();
    // A sampler that no attachment made (none set the first rate) is the constructor's.
    if sampler::get().is_some() && FIRST_HZ.load(Ordering::Acquire) == 0 {
        if !text.lines().any(|l| l == "PYIGPROF_ATTACH_PURPOSE=live") {
            return PRELOADED;
        }
        let served = std::thread::Builder::new()
            .name("pyigprof".into())
            .spawn(move || serve_dumps(&text));
        return if served.is_ok() {
            STARTED
        } else {
            CANNOT_START
        };
    }
    let Some(version) = cpython::version().filter(|_| cpython::initialized()) else {
        return NOT_PYTHON;
    };
    if OPEN.swap(true, Ordering::AcqRel) {
        return BUSY;
    }
    let key = cpython::find_thread_state_key();
    let started = std::thread::Builder::new()
        .name("pyigprof".into())
        .spawn(move || control(&text, version, key));
    if started.is_err() {
        OPEN.store(false, Ordering::Release);
        return CANNOT_START;
    }
    STARTED
}

/// The control thread (see the module documentation).
fn control(settings: &str, version: (u8, u8, u8), key: Option<libc::pthread_key_t>) {
    // No signal of the program's is delivered here, and the roll call skips this thread;
    // the faults of its checked reads are (recovered).
    crate::signal_guard::block_all_but_faults();
    let vars: Vec<(String, String)> = settings
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let lookup = |name: &str| {
        vars.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| OsString::from(v))
    };
    let Some(socket) = lookup("PYIGPROF_ATTACH_SOCKET").and_then(|p| UnixStream::connect(p).ok())
    else {
        OPEN.store(false, Ordering::Release);
        return;
    };
    crate::messages::silence();
    let (config, complaints) = Config::parse(lookup);
    let say = |socket: &UnixStream, line: String| {
        let _ = (&*socket).write_all(format!("{}\n", line.replace('\n', " ")).as_bytes());
    };
    for line in complaints {
        say(&socket, format!("note {line}"));
    }
    let sampler = match start(&config, version, key) {
        Ok((sampler, notes)) => {
            for note in notes {
                say(&socket, format!("note {note}"));
            }
            sampler
        }
        Err(e) => {
            say(&socket, format!("error {e}"));
            OPEN.store(false, Ordering::Release);
            return;
        }
    };
    let mut known: HashSet<libc::pid_t> = HashSet::new();
    let (adopted, problems) = adopt_new(sampler, &mut known);
    for problem in problems {
        say(&socket, format!("note {problem}"));
    }
    say(&socket, format!("started {adopted}"));
    let reader = socket.try_clone().ok();
    crate::output::live::set_main_syscall(main_syscall(
        vars.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    ));
    let discard = lookup("PYIGPROF_ATTACH_PURPOSE").is_some_and(|p| p == "live");
    *WINDOW.lock().unwrap_or_else(|e| e.into_inner()) = Some(Window {
        config,
        socket,
        discard,
    });
    wait_for_stop(sampler, reader.as_ref(), &mut known);
    end_window();
}

/// Builds (or takes back) the sampler and starts sampling; returns it and notes for the
/// command.
fn start(
    config: &Config,
    version: (u8, u8, u8),
    key: Option<libc::pthread_key_t>,
) -> Result<(&'static Sampler, Vec<String>), String> {
    let mut notes = Vec::new();
    if !config.profile_cpu || config.profile_memory {
        return Err(
            "attach samples CPU time only: the memory profiler needs the library \
                    preloaded (pyigprof record --profile mem)"
                .into(),
        );
    }
    if config.clock != crate::config::Clock::Cpu {
        return Err("attach samples CPU time only (--clock wall needs pyigprof record)".into());
    }
    let hz = config.hz;
    let sampler = match sampler::get() {
        Some(s) => {
            let first = FIRST_HZ.load(Ordering::Relaxed);
            if first != hz {
                return Err(format!(
                    "this process was attached at {first} Hz before; the library keeps that \
                     rate (attach again with --rate {first})"
                ));
            }
            s.forget_window();
            s
        }
        None => {
            crate::capture::symbols::use_cache(config.symbol_cache.clone());
            let runtime = discover::runtime(version);
            let Some(mut s) = Sampler::new(config.period_ns(), config.clock, runtime) else {
                return Err("cannot map the profiler's memory".into());
            };
            // perf events where the kernel opens them (sampled at random instants of
            // each thread's CPU time); POSIX timers otherwise.
            s.trigger = crate::sources::Trigger::choose(config);
            FIRST_HZ.store(hz, Ordering::Release);
            s.publish()
        }
    };
    modules::rescan();
    sampler.asyncio.store(config.asyncio, Ordering::Relaxed);
    sampler.discover_tasks();
    if let Some(rt) = sampler.python.as_ref().filter(|rt| rt.needs_attachment()) {
        match key {
            Some(key) => rt.attach(key),
            None => notes.push(
                "the main thread has no Python thread state: Python frames are not read".into(),
            ),
        }
    }
    if sampler.python.is_none() {
        let (major, minor, micro) = version;
        notes.push(format!(
            "Python {major}.{minor}.{micro}: frames not read; recording native frames only"
        ));
    }
    // Faults of the sampler's own reads are recovered from; the program's handler
    // (faulthandler's) runs behind ours for every other fault.
    for signal in [libc::SIGSEGV, libc::SIGBUS] {
        if !signals::guard_chained_over_current(
            signal,
            lifecycle::on_fault(),
            libc::SA_NODEFER | libc::SA_ONSTACK,
        ) {
            return Err(format!("cannot install the handler of signal {signal}"));
        }
    }
    if let Err(e) = handler::install_attached(sampler) {
        for signal in [libc::SIGSEGV, libc::SIGBUS] {
            signals::unguard(signal);
        }
        return Err(e);
    }
    // The program's CPU time before it was attached to is not the profile's: what the
    // profile and its summary say the run cost is from here (issue 58: the helper's cost
    // of a 2.3 s window was given as 0.1 % of the program's 104 s).
    crate::output::dump::Cost::start_here();
    if sampler.trigger.event().is_some() {
        // The helper process opens every thread's perf event (sources::helper).
        if let Err(e) = helper::start(sampler, helper::Job::Events) {
            sampler.stop();
            for signal in [libc::SIGSEGV, libc::SIGBUS, libc::SIGPROF] {
                signals::unguard(signal);
            }
            return Err(e);
        }
    }
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // As the preloaded library does: the heaps, then the library's locks, then the
        // child's own start.
        crate::alloc::register_fork_handlers();
        crate::fork_locks::register();
        // SAFETY: registering plain extern "C" functions.
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
        }
        crate::sources::timer::watch_thread_exits(sampler);
        pyigprof_hooks::install(pyigprof_hooks::Callbacks {
            thread_started: || {
                if let Some(s) = sampler::get() {
                    s.register_current_thread(crate::sources::perf::Wait::Wake);
                }
            },
            objects_added: || {},
            object_closing: |_| {},
            objects_removed: || {},
            process_ending: || {},
            before_exec: || {},
            exec_failed: || {},
            signalling_self: |_| {},
        });
    });
    // Threads the program starts from now on register as they start (their first tick is
    // not lost to the poll's delay): pthread_create rebound in the objects loaded before.
    let slots = got::rebind(
        c"pthread_create",
        pyigprof_hooks::threads::create_registered as *const () as usize,
        own_base(),
    );
    if slots.is_empty() {
        notes.push(
            "no object calls pthread_create through its GOT: threads the program starts are \
             found every 10 ms instead (their first milliseconds are not sampled)"
                .into(),
        );
    }
    *REBOUND.lock().unwrap_or_else(|e| e.into_inner()) = slots;
    Ok((sampler, notes))
}

/// Adopts the threads not in `known` (and remembers them, answered or not); deletes the
/// timers of known threads that ended. Returns how many were adopted, and the problems.
fn adopt_new(sampler: &Sampler, known: &mut HashSet<libc::pid_t>) -> (usize, Vec<String>) {
    let alive = adopt::other_threads();
    let sampled: HashSet<libc::pid_t> = sampler.sampled_threads().into_iter().collect();
    let new: Vec<libc::pid_t> = alive
        .iter()
        .copied()
        .filter(|t| !known.contains(t) && !sampled.contains(t))
        .collect();
    let now: HashSet<libc::pid_t> = alive.iter().copied().collect();
    if known.iter().any(|t| !now.contains(t)) {
        sampler.forget_ended_threads(|tid| now.contains(&tid));
        known.retain(|t| now.contains(t));
    }
    known.extend(&new);
    if new.is_empty() {
        return (0, Vec::new());
    }
    adopt::adopt(sampler, &new)
}

/// How long a `dump` waits for threads that are neither blocked nor sampled yet (just
/// adopted): a few intervals of the slowest rate, 250 Hz.
const DUMP_WAIT: Duration = Duration::from_millis(100);

/// What the live commands (`pyigprof dump`, `pyigprof top`) ask of a sampling process,
/// answered on the control socket ([`crate::output::live`]):
///
/// - `dump`: every sampled thread's call stack now;
/// - `snapshot`: the ticks per function so far;
/// - `write`: a snapshot profile written now (`written PATH`, or `error …`): by a fork
///   child in a process the preloaded library samples, by the control thread in an attach
///   window (its output path tagged `snapshotN`);
/// - `fault-check`: a checked read, on the answering thread, of an address known unmapped
///   (a page mapped and unmapped again): `fault-check recovered N` when it faulted and the
///   fault was recovered (N: reads recovered in this process so far), `fault-check
///   mapped` if something mapped the page meanwhile. What `pyigprof dump` asks first with
///   `PYIGPROF_LIVE_FAULT_CHECK=1` set: the tests' proof that a fault of the control
///   thread's reads cannot end the program.
struct Live {
    sampler: &'static Sampler,
    /// Names frames across snapshots; made again when objects are loaded or unloaded.
    namer: Option<(usize, crate::output::dump::Namer)>,
}

impl Live {
    fn new(sampler: &'static Sampler) -> Live {
        Live {
            sampler,
            namer: None,
        }
    }

    /// Answers `request` on `socket`; `Ok(false)` when it is none of the above.
    fn answer(&mut self, request: &str, mut socket: &UnixStream) -> std::io::Result<bool> {
        let text = match request {
            "dump" => {
                let threads = crate::output::live::threads_now(self.sampler, DUMP_WAIT);
                crate::output::live::report(self.sampler, &threads)
            }
            "snapshot" => {
                let objects = modules::history().len();
                let namer = match &mut self.namer {
                    Some((n, namer)) if *n == objects => namer,
                    slot => {
                        let namer = crate::output::dump::Namer::new(self.sampler);
                        &mut slot.insert((objects, namer)).1
                    }
                };
                crate::output::live::snapshot(self.sampler, namer)
            }
            "write" => match lifecycle::snapshot_now().map(Ok).or_else(window_snapshot) {
                Some(Ok(path)) => format!("written {}\n", path.display()),
                Some(Err(why)) => format!("error {}\n", why.replace('\n', " ")),
                None => "error the profile has been written: the program is ending\n".into(),
            },
            "fault-check" => fault_check(),
            _ => return Ok(false),
        };
        socket.write_all(text.as_bytes())?;
        Ok(true)
    }
}

/// The `fault-check` request of [`Live`]: a checked read of a page just unmapped.
fn fault_check() -> String {
    // SAFETY: a fresh anonymous mapping of one page, unmapped again; nothing else uses it.
    let page = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return "error cannot map a page\n".into();
        }
        libc::munmap(p, 4096);
        p as u64
    };
    match crate::capture::probe::u64_at(page) {
        None => format!(
            "fault-check recovered {}\n",
            crate::capture::probe::FAULTED_READS.load(Ordering::Relaxed)
        ),
        Some(_) => "fault-check mapped\n".into(),
    }
}

/// Snapshots written from attach windows in this process (their `snapshotN` tags).
static WINDOW_SNAPSHOTS: AtomicU32 = AtomicU32::new(0);

/// In an open attach window: writes its profile so far
/// ([`lifecycle::write_attached_snapshot`]) to its output path tagged `snapshotN`; `None`
/// when no window is open (or it is ending).
fn window_snapshot() -> Option<Result<std::path::PathBuf, String>> {
    let sampler = sampler::get()?;
    let window = WINDOW.lock().unwrap_or_else(|e| e.into_inner());
    let window = window.as_ref()?;
    let n = WINDOW_SNAPSHOTS.fetch_add(1, Ordering::Relaxed) + 1;
    Some(lifecycle::write_attached_snapshot(
        sampler,
        &window.config,
        n,
    ))
}

/// `PYIGPROF_LIVE_MAIN_SYSCALL` of the settings: the system call the main thread was in
/// before the command stopped it ([`crate::output::live::set_main_syscall`]), or -1.
fn main_syscall<'a>(mut settings: impl Iterator<Item = (&'a str, &'a str)>) -> i64 {
    settings
        .find(|(k, _)| *k == "PYIGPROF_LIVE_MAIN_SYSCALL")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(-1)
}

/// The control thread of a `pyigprof dump` in a process the preloaded library samples:
/// connects to the command's socket, says `started N` (the threads sampled), answers
/// each `dump`, and says `discarded` and ends at anything else or when the socket closes.
fn serve_dumps(settings: &str) {
    // Every signal blocked in this thread but the faults of its checked reads.
    crate::signal_guard::block_all_but_faults();
    let Some(sampler) = sampler::get() else {
        return;
    };
    // The preloaded `pthread_create` registered this thread as the program's: it is not
    // (in wall mode its wait for the command was half of what top showed).
    sampler.unregister_current_thread();
    crate::output::live::set_main_syscall(main_syscall(
        settings.lines().filter_map(|l| l.split_once('=')),
    ));
    let Some(mut socket) = settings
        .lines()
        .find_map(|l| l.strip_prefix("PYIGPROF_ATTACH_SOCKET="))
        .and_then(|p| UnixStream::connect(p).ok())
    else {
        return;
    };
    let threads = sampler.sampled_threads().len();
    if socket
        .write_all(format!("started {threads}\n").as_bytes())
        .is_err()
    {
        return;
    }
    let Ok(reader) = socket.try_clone() else {
        return;
    };
    let mut live = Live::new(sampler);
    for line in BufReader::new(reader).lines() {
        match line.map(|l| live.answer(&l, &socket)) {
            Ok(Ok(true)) => {}
            Ok(Err(_)) => return,
            _ => break,
        }
    }
    let _ = socket.write_all(b"discarded\n");
}

/// Adopts new threads every [`POLL`] until the command says `stop` or its socket closes;
/// answers `dump` meanwhile.
fn wait_for_stop(
    sampler: &'static Sampler,
    socket: Option<&UnixStream>,
    known: &mut HashSet<libc::pid_t>,
) {
    let Some(socket) = socket else { return };
    let mut reader = BufReader::new(socket);
    let mut live = Live::new(sampler);
    loop {
        let mut poll = libc::pollfd {
            fd: socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, POLL.as_millis() as c_int) };
        if ready > 0 {
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            if let Ok(true) = live.answer(line.trim_end(), socket) {
                continue;
            }
            // "stop", or the end of the stream (the command ended): either ends the window.
            return;
        }
        if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
        let _ = adopt_new(sampler, known);
    }
}

/// Ends the open window once: stops sampling, writes the profile, gives the program its
/// signal actions back and tells the command. Called by the control thread, or by the
/// program's exit (then the control thread finds it done).
fn end_window() {
    if ENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    let window = WINDOW.lock().unwrap_or_else(|e| e.into_inner()).take();
    got::restore(&std::mem::take(
        &mut *REBOUND.lock().unwrap_or_else(|e| e.into_inner()),
    ));
    if let (Some(sampler), Some(window)) = (sampler::get(), window) {
        sampler.stop();
        // The perf events are the helper's descriptors: closed when it ends.
        let helper_ended = helper::end(5_000_000_000);
        let written = match window.discard {
            true => Ok(None),
            false => lifecycle::write_attached(sampler, &window.config).map(Some),
        };
        let mut lines = match written {
            Ok(None) => vec!["discarded".to_string()],
            Ok(Some((path, summary))) => {
                let mut lines = vec![format!("written {}", path.display())];
                lines.extend(summary.into_iter().map(|l| format!("summary {l}")));
                lines
            }
            Err(e) => vec![format!("error {e}")],
        };
        for signal in [libc::SIGSEGV, libc::SIGBUS] {
            signals::unguard(signal);
        }
        if !helper_ended {
            lines.push(
                "note the helper process did not end within 5 s; its perf events close when \
                 it does"
                    .into(),
            );
        }
        // SIGPROF keeps pyigprof's handler, which ignores every signal while sampling is
        // off: its default action would end the process, and an expiration still in flight
        // (a thread registering as sampling stopped) did, once in ~120 windows back to back.
        for line in lines {
            let _ = (&window.socket).write_all(format!("{line}\n").as_bytes());
        }
    }
    ENDING.store(false, Ordering::Release);
    OPEN.store(false, Ordering::Release);
}

/// `atexit`: the program ends during a window; its profile is written first.
extern "C" fn at_exit() {
    if !OPEN.load(Ordering::Acquire) {
        return;
    }
    end_window();
    // The control thread may be writing it: the process ends once it is written.
    for _ in 0..2000 {
        if !OPEN.load(Ordering::Acquire) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// In a fork child: the window is the parent's; the child is not sampled.
extern "C" fn after_fork_in_child() {
    if OPEN.swap(false, Ordering::AcqRel) {
        if let Some(s) = sampler::get() {
            s.leave_after_fork();
        }
    }
}

/// The load address of this library (to leave its own GOT alone).
fn own_base() -> usize {
    // SAFETY: dladdr fills `info` for an address of this library.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        libc::dladdr(own_base as *const libc::c_void, &mut info);
        info.dli_fbase as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_made_while_the_heap_is_held_does_nothing_and_says_again() {
        // The heap held by the calling thread itself, as by a thread that `dump` stopped
        // inside the library: the call returns at once, before anything allocates (which
        // would wait for the holder, itself, forever).
        let settings = c"PYIGPROF_ATTACH_PURPOSE=live\n";
        // SAFETY: a NUL-terminated string.
        let rc = crate::alloc::with_own_heap_held(|| unsafe { pyigprof_attach(settings.as_ptr()) });
        assert_eq!(rc, AGAIN);
        // SAFETY: as above.
        assert_ne!(unsafe { pyigprof_attach(settings.as_ptr()) }, AGAIN);
    }
}
