//! Continuous profiling's pushes (`PYIGPROF_PUSH=URL`): each window's profile
//! ([`crate::output::windows`]) sent to Grafana Pyroscope's HTTP ingest API, or anything
//! that takes it (Grafana Alloy's `pyroscope.receive_http`).
//!
//! What is sent, as Pyroscope's server API page gives it: `POST URL/ingest?name=APP{k=v,…}
//! &from=S&until=S&format=pprof&sampleRate=HZ&spyName=pyigprof`, a `multipart/form-data`
//! body with the window as a gzip-compressed pprof in the file field `profile`
//! ([`crate::output::pprof`]) and its sample type configuration (JSON) in the file field
//! `sample_type_config`. `APP` is `PYIGPROF_APP_NAME` or the script's (module's) name;
//! Pyroscope adds each sample type's name (`APP.cpu`, `APP.wall`, `APP.alloc_space`, …).
//! The labels are `PYIGPROF_LABELS` and `pid`, `hostname` and `python` (the version).
//!
//! How: the window writer encodes the window and queues it (at most [`QUEUE`] windows;
//! when full the oldest is dropped, counted); a thread of pyigprof's, `pyigprof-push`
//! (not sampled, its allocations not recorded, every signal blocked but the faults),
//! sends them one at a time through `libpyigprof_push.so` (push/: ureq, rustls for
//! `https://`; loaded only when pushing, so that a process that does not push does not pay
//! for an HTTP client at start) with
//! timeouts ([`CONNECT_TIMEOUT`], [`REQUEST_TIMEOUT`]) and up to [`ATTEMPTS`] attempts,
//! [`BACKOFF`] doubling between them. Nothing waits for it but the end of the process,
//! which gives the last window at most [`EXIT_WAIT`], and no time at all when the backend
//! has just failed or is slow to answer ([`finish`]). It writes nothing on the program's
//! stdout or stderr; what it sent, gave up on and dropped is counted in every window's
//! statistics (`#pyigprof push …`, [`statistics_line`]) and said in the exit summary
//! ([`summary_line`]). A header's value (a token, a password) is never shown.
//!
//! After `fork` the child has no pusher thread and maybe a queue whose lock a thread of
//! the parent held: it makes a queue and a pusher of its own, its counts from 0
//! ([`restart_after_fork`]).
//!
//! A fatal signal's last window is written by a child forked in the signal handler
//! ([`crate::output::lifecycle`]), which has no pusher thread: the parent's pusher is told
//! to take no more windows ([`hand_over`]) and the child sends the last window itself, after
//! the windows its copy of the queue still holds, with one attempt each, all within
//! [`EXIT_WAIT`] — and, should a request hang on a lock a thread of the dying process held
//! at the fork (the HTTP client allocates with the program's `malloc`), `SIGALRM` ends the
//! child [`ALARM`] after it starts sending: the process then ends as the signal would have.

use crate::config::Push;
use crate::output::dump;
use crate::output::pprof::{self, Span};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Windows waiting to be sent, at most; a window queued when it is full drops the oldest.
pub const QUEUE: usize = 8;
/// Attempts per window (the first and the retries).
pub const ATTEMPTS: u32 = 3;
/// The wait before the first retry; doubled before each next.
pub const BACKOFF: Duration = Duration::from_millis(500);
/// How long a connection may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a request may take in all (connection, body, answer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the end of the process waits for the windows still queued (the last one
/// included) to be sent; what is left is counted as not sent.
pub const EXIT_WAIT: Duration = Duration::from_secs(2);
/// A request waiting this long for its answer makes the end of the process wait no more.
pub const SLOW: Duration = Duration::from_millis(500);
/// A child sending a fatal signal's last window is ended by `SIGALRM` this long after it
/// starts sending, whatever it is doing.
pub const ALARM: Duration = Duration::from_secs(3);

/// A window ready to send.
struct Job {
    /// The window's number.
    number: u32,
    /// The query string.
    query: String,
    /// The multipart body and its boundary.
    body: Vec<u8>,
    boundary: String,
}

/// The queue between the window writer and the pusher, and the pusher's state.
struct Shared {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    /// The process ends: send what is queued until the deadline, then stop.
    stopping: AtomicBool,
    /// The pusher is sending a window now.
    sending: AtomicBool,
    /// When the request in flight started (`CLOCK_MONOTONIC` ns; 0: none).
    since_ns: AtomicU64,
    /// The number of the window being sent.
    sending_number: std::sync::atomic::AtomicU32,
    /// The latest attempt that ended succeeded (or none ended yet).
    healthy: AtomicBool,
    /// Why the latest failed attempt failed (an HTTP status or an I/O error's kind), for
    /// the summary: a short text of ours, never a header or a body.
    last_error: Mutex<String>,
}

/// The current [`Shared`] (a fork child makes its own; the parent's is leaked there).
static SHARED: AtomicPtr<Shared> = AtomicPtr::new(std::ptr::null_mut());
/// The process whose pusher reads [`SHARED`]: a child forked to write a fatal signal's
/// last window has none, and queues nothing.
static PUSHER_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
/// Where and how ([`Push`]), and the name and labels sent (set once per process image).
static SETTINGS: std::sync::OnceLock<(Push, Option<(u8, u8)>)> = std::sync::OnceLock::new();
/// The application's name with its labels, as sent (`APP{k=v,…}`, [`application`]): made
/// again in a fork child, whose pid it names.
static NAME: AtomicPtr<String> = AtomicPtr::new(std::ptr::null_mut());

/// [`NAME`]'s text ("" before [`start`]).
fn name() -> &'static str {
    let name = NAME.load(Ordering::Acquire);
    if name.is_null() {
        ""
    } else {
        // SAFETY: a leaked Box, never freed.
        unsafe { &*name }
    }
}

/// Makes [`NAME`] for this process.
fn name_this_process() {
    if let Some((push, python)) = SETTINGS.get() {
        let name = Box::leak(Box::new(application(push, *python)));
        NAME.store(name, Ordering::Release);
    }
}

/// `pyigprof_push_post_v1` ([`Post`]) once the pusher has loaded it (0 before, or when it
/// could not be loaded): a child writing a fatal signal's last window sends with it.
static POST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// The process ends by a fatal signal and a child writes (and sends) its last window: the
/// pusher takes no more windows from the queue ([`hand_over`]).
static HANDED_OVER: AtomicBool = AtomicBool::new(false);
/// The last window of a process ending by a fatal signal, encoded by the child writing it
/// (not the pusher's process: [`enqueue`]) and sent by that child's [`finish`].
static LAST: AtomicPtr<Job> = AtomicPtr::new(std::ptr::null_mut());

/// Windows sent (answered 2xx).
static SENT: AtomicU64 = AtomicU64::new(0);
/// Windows given up on after [`ATTEMPTS`] attempts, or left at the end of the process.
static FAILED: AtomicU64 = AtomicU64::new(0);
/// Windows dropped because the queue was full.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Attempts that failed and were retried.
static RETRIES: AtomicU64 = AtomicU64::new(0);
/// Bytes of the bodies sent.
static BYTES: AtomicU64 = AtomicU64::new(0);

/// Whether windows are pushed in this process.
pub fn on() -> bool {
    !SHARED.load(Ordering::Acquire).is_null()
}

/// Starts pushing (from [`crate::output::windows::start`]): works out the application's
/// name and labels, and starts the pusher thread.
pub fn start(push: &Push, python: Option<(u8, u8)>) {
    let _ = SETTINGS.set((push.clone(), python));
    name_this_process();
    spawn();
}

/// In a fork child: a queue and a pusher of its own, its counts from 0.
pub fn restart_after_fork() {
    if !on() {
        return;
    }
    for counter in [&SENT, &FAILED, &DROPPED, &RETRIES, &BYTES] {
        counter.store(0, Ordering::Relaxed);
    }
    // The parent's queue may be locked for good here (its window writer held it at the
    // fork): it is left alone (leaked), and the child gets a new one; its name says its pid.
    name_this_process();
    spawn();
}

/// Makes a queue and starts the thread that sends it.
fn spawn() {
    let shared = Box::leak(Box::new(Shared {
        queue: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
        stopping: AtomicBool::new(false),
        sending: AtomicBool::new(false),
        since_ns: AtomicU64::new(0),
        sending_number: std::sync::atomic::AtomicU32::new(0),
        healthy: AtomicBool::new(true),
        last_error: Mutex::new(String::new()),
    }));
    SHARED.store(shared, Ordering::Release);
    PUSHER_PID.store(std::process::id(), Ordering::Release);
    let started = std::thread::Builder::new()
        .name("pyigprof-push".into())
        .spawn(move || pusher(shared));
    if let Err(e) = started {
        crate::notice!(
            "pyigprof: PYIGPROF_PUSH: cannot start the pusher thread ({e}); nothing is pushed"
        );
        SHARED.store(std::ptr::null_mut(), Ordering::Release);
    }
}

/// The application's name with its labels, as `name=` takes it: `APP{k=v,…}`.
fn application(push: &Push, python: Option<(u8, u8)>) -> String {
    let app = push.app_name.clone().unwrap_or_else(program_name);
    let mut labels = push.labels.clone();
    let mut add = |key: &str, value: String| {
        if !labels.iter().any(|(k, _)| k == key) && !value.is_empty() {
            labels.push((key.to_string(), value));
        }
    };
    add("pid", std::process::id().to_string());
    add("hostname", hostname());
    if let Some((major, minor)) = python {
        add("python", format!("{major}.{minor}"));
    }
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{app}{{{}}}", labels.join(","))
}

/// The name of what the interpreter runs, from the command line: the script's file name
/// without `.py`, the module of `-m`, `python-c` for `-c`, else the program's file name.
fn program_name() -> String {
    let raw = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    name_of_command(&args)
}

/// [`program_name`] of `args` (argv).
fn name_of_command(args: &[String]) -> String {
    let base = |path: &str| {
        let file = path.rsplit('/').next().unwrap_or(path);
        file.strip_suffix(".py").unwrap_or(file).to_string()
    };
    let clean = |name: String| -> String {
        let name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if name.is_empty() {
            "python".into()
        } else {
            name
        }
    };
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-m" => return clean(rest.next().cloned().unwrap_or_default()),
            "-c" => return "python-c".into(),
            // Options that take a value.
            "-X" | "-W" | "-Q" => {
                rest.next();
            }
            _ if arg.starts_with("-m") && arg.len() > 2 => return clean(arg[2..].to_string()),
            _ if arg.starts_with('-') => {}
            _ => return clean(base(arg)),
        }
    }
    clean(args.first().map(|a| base(a)).unwrap_or_default())
}

/// The machine's host name ("" if unknown).
fn hostname() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: a buffer of its length; the name is NUL-terminated when it fits.
    if unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } != 0 {
        return String::new();
    }
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end]).into_owned()
}

/// Encodes window `number` (`profile`, over `span`) and queues it for the pusher.
pub fn enqueue(
    profile: &dump::Profile,
    span: Span,
    number: u32,
    hz: u32,
    wall: bool,
    cpu: bool,
    memory: bool,
) {
    let shared = SHARED.load(Ordering::Acquire);
    let name = name();
    if shared.is_null() {
        return;
    }
    // SAFETY: a leaked Box, never freed.
    let shared = unsafe { &*shared };
    let types = pprof::sample_types(profile, wall, cpu, memory);
    let encoded = pyigprof_pprof::gzipped(&pprof::encode(profile, span, wall, cpu, memory));
    let config = pprof::sample_type_config(&types);
    let (body, boundary) = multipart(&[
        ("profile", "profile.pb.gz", &encoded),
        (
            "sample_type_config",
            "sample_type_config.json",
            config.as_bytes(),
        ),
    ]);
    let query = format!(
        "name={}&from={}&until={}&format=pprof&sampleRate={hz}&spyName=pyigprof",
        encode_component(name),
        span.start_ns / 1_000_000_000,
        span.end_ns.div_ceil(1_000_000_000),
    );
    let job = Job {
        number,
        query,
        body,
        boundary,
    };
    if PUSHER_PID.load(Ordering::Acquire) != std::process::id() {
        // The child writing a fatal signal's last window: its `finish` sends it.
        let previous = LAST.swap(Box::into_raw(Box::new(job)), Ordering::AcqRel);
        if !previous.is_null() {
            // SAFETY: a Box this function leaked.
            drop(unsafe { Box::from_raw(previous) });
        }
        return;
    }
    let Ok(mut queue) = shared.queue.lock() else {
        return;
    };
    if queue.len() >= QUEUE {
        queue.pop_front();
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
    queue.push_back(job);
    shared.ready.notify_one();
}

/// A `multipart/form-data` body of file fields `(name, file name, content)`, and its
/// boundary (one that none of the contents holds).
fn multipart(fields: &[(&str, &str, &[u8])]) -> (Vec<u8>, String) {
    let mut seed = crate::sources::random::seed(
        crate::sources::timer::clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
            ^ u64::from(std::process::id()),
    );
    let boundary = loop {
        let mut candidate = String::from("pyigprof-");
        for _ in 0..2 {
            let word = (crate::sources::random::uniform(&mut seed) * u64::MAX as f64) as u64;
            candidate.push_str(&format!("{word:016x}"));
        }
        if !fields.iter().any(|(_, _, content)| {
            content
                .windows(candidate.len())
                .any(|w| w == candidate.as_bytes())
        }) {
            break candidate;
        }
    };
    let mut body = Vec::new();
    for (name, file, content) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\n\
                 Content-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (body, boundary)
}

/// `text` percent-encoded for a query string (everything but letters, digits and `-._~`).
fn encode_component(text: &str) -> String {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(text, SET).to_string()
}

/// `pyigprof_push_post_v1` of `libpyigprof_push.so` (push/): posts a body, returns the
/// HTTP status or 0 with why in its error buffer.
type Post = unsafe extern "C" fn(
    *const u8,
    usize,
    *const u8,
    usize,
    *const u8,
    usize,
    u64,
    u64,
    *mut u8,
    usize,
    *mut usize,
) -> u16;

/// Loads the HTTP client, `libpyigprof_push.so` beside this library (in the Python
/// package: `pyigprof_push*.so`), and finds its function.
///
/// # Errors
/// Where it was looked for and what `dlopen`/`dlsym` said.
fn client() -> Result<Post, String> {
    use std::os::unix::ffi::OsStrExt;
    let own = crate::output::dump::own_object_path().ok_or("this library's path is unknown")?;
    let own = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&own));
    let dir = own.parent().ok_or("this library's directory is unknown")?;
    let mut candidates = vec![dir.join("libpyigprof_push.so")];
    if let Ok(entries) = std::fs::read_dir(dir) {
        let mut packaged: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("pyigprof_push") && n.ends_with(".so"))
            })
            .collect();
        packaged.sort();
        candidates.extend(packaged);
    }
    let path = candidates
        .iter()
        .find(|p| p.exists())
        .ok_or_else(|| format!("libpyigprof_push.so is not in {}", dir.display()))?;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated path; the library has no constructor of its own to run.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror's text, if any, is a C string valid until the next dl call.
        let why = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(format!("cannot load {}: {why}", path.display()));
    }
    // SAFETY: a handle dlopen gave; a NUL-terminated name.
    let symbol = unsafe { libc::dlsym(handle, c"pyigprof_push_post_v1".as_ptr()) };
    if symbol.is_null() {
        return Err(format!("{} has no pyigprof_push_post_v1", path.display()));
    }
    // SAFETY: the function push/src/lib.rs exports with this signature.
    Ok(unsafe { std::mem::transmute::<*mut libc::c_void, Post>(symbol) })
}

/// The pusher thread: sends the queued windows until the process ends.
fn pusher(shared: &'static Shared) {
    crate::signal_guard::block_all_but_faults();
    if let Some(s) = crate::sampler::get() {
        // The preloaded `pthread_create` registered this thread: it is not the program's.
        s.unregister_current_thread();
    }
    // Its allocations (the HTTP client's) are not the program's either.
    crate::sources::allocations::pass_through_in_this_thread();
    let Some((push, _)) = SETTINGS.get() else {
        return;
    };
    let post = match client() {
        Ok(post) => {
            POST.store(post as usize, Ordering::Release);
            Some(post)
        }
        Err(why) => {
            crate::notice!("pyigprof: PYIGPROF_PUSH: {why}; nothing is pushed");
            if let Ok(mut last) = shared.last_error.lock() {
                *last = why;
            }
            None
        }
    };
    let headers = header_lines(push);
    loop {
        let job = {
            let Ok(mut queue) = shared.queue.lock() else {
                return;
            };
            loop {
                if HANDED_OVER.load(Ordering::SeqCst) {
                    // A child sends what is left.
                    return;
                }
                if let Some(job) = queue.pop_front() {
                    shared.sending.store(true, Ordering::SeqCst);
                    break job;
                }
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                queue = match shared.ready.wait_timeout(queue, Duration::from_millis(200)) {
                    Ok((queue, _)) => queue,
                    Err(_) => return,
                };
            }
        };
        match post {
            Some(post) => send(
                post,
                push,
                &headers,
                shared,
                &job,
                ATTEMPTS,
                (CONNECT_TIMEOUT, REQUEST_TIMEOUT),
            ),
            None => {
                FAILED.fetch_add(1, Ordering::Relaxed);
            }
        }
        shared.sending.store(false, Ordering::SeqCst);
    }
}

/// `PYIGPROF_PUSH_HEADERS` (and the token's header) as `Name: value` lines.
fn header_lines(push: &Push) -> String {
    push.headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\n"))
        .collect()
}

/// Sends `job` with up to `attempts` attempts (fewer once the process ends), each waiting
/// at most `timeouts` (connection, whole request), counting the outcome.
fn send(
    post: Post,
    push: &Push,
    headers: &str,
    shared: &Shared,
    job: &Job,
    attempts: u32,
    (connect, total): (Duration, Duration),
) {
    let url = format!("{}?{}", push.url, job.query);
    let headers = format!(
        "{headers}Content-Type: multipart/form-data; boundary={}\n",
        job.boundary
    );
    let mut wait = BACKOFF;
    shared.sending_number.store(job.number, Ordering::Relaxed);
    for attempt in 1..=attempts {
        shared.since_ns.store(monotonic_ns(), Ordering::SeqCst);
        let mut error = [0u8; 256];
        let mut error_len = 0usize;
        // SAFETY: pointers and lengths of live buffers, as the function takes them.
        let status = unsafe {
            post(
                url.as_ptr(),
                url.len(),
                headers.as_ptr(),
                headers.len(),
                job.body.as_ptr(),
                job.body.len(),
                connect.as_millis() as u64,
                total.as_millis() as u64,
                error.as_mut_ptr(),
                error.len(),
                &mut error_len,
            )
        };
        if (200..300).contains(&status) {
            shared.healthy.store(true, Ordering::SeqCst);
            SENT.fetch_add(1, Ordering::Relaxed);
            BYTES.fetch_add(job.body.len() as u64, Ordering::Relaxed);
            return;
        }
        let failure = if status != 0 {
            format!("window {}: answered {status}", job.number)
        } else {
            format!(
                "window {}: {}",
                job.number,
                String::from_utf8_lossy(&error[..error_len.min(error.len())])
            )
        };
        shared.healthy.store(false, Ordering::SeqCst);
        if let Ok(mut last) = shared.last_error.lock() {
            *last = failure;
        }
        if attempt == attempts || shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        RETRIES.fetch_add(1, Ordering::Relaxed);
        // Waits in steps, so that the end of the process does not wait for it.
        let until = Instant::now() + wait;
        while Instant::now() < until && !shared.stopping.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        wait *= 2;
    }
    FAILED.fetch_add(1, Ordering::Relaxed);
}

/// `CLOCK_MONOTONIC` now, ns.
fn monotonic_ns() -> u64 {
    crate::sources::timer::clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

/// The process ends: waits at most [`EXIT_WAIT`] for the queued windows to be sent — and
/// not at all once the backend failed or a request has been waiting for its answer for
/// [`SLOW`] — then counts what is left as not sent and stops the pusher.
///
/// In the child writing a fatal signal's last window: sends it itself
/// ([`finish_in_fatal_child`]).
pub fn finish() {
    let shared = SHARED.load(Ordering::Acquire);
    if shared.is_null() {
        return;
    }
    // SAFETY: a leaked Box, never freed.
    let shared = unsafe { &*shared };
    if PUSHER_PID.load(Ordering::Acquire) != std::process::id() {
        finish_in_fatal_child(shared);
        return;
    }
    let deadline = Instant::now() + EXIT_WAIT;
    loop {
        let empty = shared.queue.lock().map(|q| q.is_empty()).unwrap_or(true);
        let sending = shared.sending.load(Ordering::SeqCst);
        if empty && !sending {
            break;
        }
        let slow = sending
            && monotonic_ns().saturating_sub(shared.since_ns.load(Ordering::SeqCst))
                > SLOW.as_nanos() as u64;
        if Instant::now() >= deadline || !shared.healthy.load(Ordering::SeqCst) || slow {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    shared.stopping.store(true, Ordering::SeqCst);
    shared.ready.notify_one();
    if let Ok(mut queue) = shared.queue.lock() {
        FAILED.fetch_add(queue.len() as u64, Ordering::Relaxed);
        queue.clear();
    }
    if shared.sending.load(Ordering::SeqCst) {
        // Still in a request: it is not waited for.
        FAILED.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = shared.last_error.lock() {
            if last.is_empty() {
                *last = format!(
                    "window {}: no answer before the process ended",
                    shared.sending_number.load(Ordering::Relaxed)
                );
            }
        }
    }
}

/// The process ends by a fatal signal and a child forked in its handler writes the last
/// window: the pusher takes no more windows from the queue, which the child sends.
/// Async-signal-safe (an atomic store).
pub fn hand_over() {
    HANDED_OVER.store(true, Ordering::SeqCst);
}

/// [`finish`] in the child writing a fatal signal's last window, the only thread of its
/// process: sends the windows its copy of the queue holds (unless the queue's lock was
/// held at the fork) and then the last window, one attempt each, all within [`EXIT_WAIT`];
/// none when the backend had just failed, as at a normal end. `SIGALRM` ends the child
/// [`ALARM`] after it starts, should a request hang.
fn finish_in_fatal_child(shared: &Shared) {
    let mut jobs: Vec<Job> = Vec::new();
    if let Ok(mut queue) = shared.queue.try_lock() {
        jobs.extend(queue.drain(..));
    }
    let last = LAST.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !last.is_null() {
        // SAFETY: the Box `enqueue` leaked.
        jobs.push(*unsafe { Box::from_raw(last) });
    }
    let post = POST.load(Ordering::Acquire);
    let settings = SETTINGS.get();
    let (Some((push, _)), true, true) =
        (settings, post != 0, shared.healthy.load(Ordering::SeqCst))
    else {
        FAILED.fetch_add(jobs.len() as u64, Ordering::Relaxed);
        return;
    };
    // SAFETY: the function `client` found, stored as an address.
    let post = unsafe { std::mem::transmute::<usize, Post>(post) };
    // SAFETY: signal calls on initialised structures, in this one-thread child.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        pyigprof_hooks::signals::real_sigaction(libc::SIGALRM, &action, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGALRM);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::alarm(ALARM.as_secs() as libc::c_uint);
    }
    let headers = header_lines(push);
    let deadline = Instant::now() + EXIT_WAIT;
    for job in &jobs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !shared.healthy.load(Ordering::SeqCst) {
            FAILED.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        send(
            post,
            push,
            &headers,
            shared,
            job,
            1,
            (left.min(CONNECT_TIMEOUT), left),
        );
    }
}

/// `#pyigprof push to=URL app=APP{labels} sent=N failed=N dropped=N retries=N bytes=N`
/// (the name and labels sent; the counts so far in this process: a window's line says
/// what happened to the windows before it).
pub fn statistics_line() -> Option<String> {
    let (push, _) = SETTINGS.get()?;
    on().then(|| {
        format!(
            "#pyigprof push to={} app={} sent={} failed={} dropped={} retries={} bytes={}",
            push.shown,
            name().replace(' ', "_"),
            SENT.load(Ordering::Relaxed),
            FAILED.load(Ordering::Relaxed),
            DROPPED.load(Ordering::Relaxed),
            RETRIES.load(Ordering::Relaxed),
            BYTES.load(Ordering::Relaxed),
        )
    })
}

/// The exit summary's line: `pyigprof: pushed N windows to URL as APP{…}` and, when some
/// were not, how many and the latest reason.
pub fn summary_line() -> Option<String> {
    let (push, _) = SETTINGS.get()?;
    let name = name();
    let sent = SENT.load(Ordering::Relaxed);
    let lost = FAILED.load(Ordering::Relaxed) + DROPPED.load(Ordering::Relaxed);
    let mut line = format!(
        "pyigprof: pushed {sent} windows to {} as {name}",
        push.shown
    );
    let shared = SHARED.load(Ordering::Acquire);
    if lost > 0 && !shared.is_null() {
        // SAFETY: a leaked Box, never freed.
        let shared = unsafe { &*shared };
        let why = shared
            .last_error
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default();
        line.push_str(&format!("; {lost} could not be sent (latest: {why})"));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_application_is_named_after_the_script_or_module() {
        let name = |args: &[&str]| {
            name_of_command(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(
            name(&["python3", "/srv/app/server.py", "--port", "80"]),
            "server"
        );
        assert_eq!(
            name(&["python3", "-X", "dev", "-u", "-m", "gunicorn", "app:app"]),
            "gunicorn"
        );
        assert_eq!(name(&["python3", "-mhttp.server"]), "http.server");
        assert_eq!(name(&["python3", "-c", "pass"]), "python-c");
        assert_eq!(name(&["/usr/bin/python3.12"]), "python3.12");
        assert_eq!(name(&["python3", "my app!.py"]), "my_app_");
    }

    #[test]
    fn a_multipart_body_holds_each_file_between_boundaries() {
        let (body, boundary) = multipart(&[
            ("profile", "p.pb.gz", b"\x1f\x8b\x00"),
            ("sample_type_config", "c.json", b"{}"),
        ]);
        let text = String::from_utf8_lossy(&body);
        assert!(
            boundary.starts_with("pyigprof-") && boundary.len() == 41,
            "{boundary}"
        );
        assert_eq!(
            text,
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"p.pb.gz\"\r\n\
                 Content-Type: application/octet-stream\r\n\r\n\x1f\u{fffd}\0\r\n\
                 --{boundary}\r\nContent-Disposition: form-data; name=\"sample_type_config\"; filename=\"c.json\"\r\n\
                 Content-Type: application/octet-stream\r\n\r\n{{}}\r\n--{boundary}--\r\n"
            )
        );
        assert_eq!(
            encode_component("app{env=prod,pid=12}"),
            "app%7Benv%3Dprod%2Cpid%3D12%7D"
        );
    }
}
