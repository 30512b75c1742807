//! `pyigprof attach PID`: profiling a Python process that is already running.
//!
//! The command checks that the process is a Python interpreter (its program or a libpython
//! it has loaded defines `Py_IsInitialized`), stops its main thread with `ptrace`
//! ([`crate::inject`]) where calling into the C library is safe, has it call `dlopen` on
//! `libpyigprof.so` and `pyigprof_attach(settings)` (the library's side:
//! `preload/src/attach.rs`), and lets it go on. The library's control thread then talks to
//! this command over a Unix socket: it says how many threads it samples, the command waits
//! for the duration or Ctrl-C and says `stop`, and the library writes the profile, gives
//! the program its signal actions back and says where the profile is.
//!
//! Exit status: 0 when a profile was written; 1 when the process could not be profiled
//! (no such process, not Python, `ptrace` refused, the library refused) — one line says
//! why; 2 for a command-line error or a library that is not found.

use crate::inject::Tracee;
use object::{Object, ObjectSymbol};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// What `pyigprof attach` was asked.
#[derive(Debug, clap::Args)]
pub struct Attach {
    /// The process to profile (its process id).
    pub pid: i32,

    /// How long to sample, in seconds (default: until Ctrl-C).
    #[arg(short, long, value_name = "SECONDS")]
    pub duration: Option<f64>,

    /// Where the profile goes: `%p` is the process id; a name ending in `.gz` is
    /// compressed. Default: `pyigprof.%p.gz` in the current directory.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Samples per second of each thread's CPU time (default 250). A process keeps the
    /// rate of its first attachment.
    #[arg(short, long, value_name = "HZ", value_parser = crate::parse_rate)]
    pub rate: Option<u32>,

    /// The library to load. Default: `$PYIGPROF_LIB`, else `libpyigprof.so` next to this
    /// command (or in `../lib`, or the installed Python package's).
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
}

/// One line on stderr and exit status 1.
fn fail(pid: i32, why: impl std::fmt::Display) -> ExitCode {
    eprintln!("pyigprof attach: process {pid}: {why}");
    ExitCode::from(1)
}

/// A mapping of `/proc/PID/maps`: `[start, end)`, file offset, permissions, path.
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    perms: String,
    path: String,
}

fn mappings(pid: i32) -> Result<Vec<Mapping>, String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| format!("cannot read /proc/{pid}/maps: {e}"))?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (lo, hi) = fields.next()?.split_once('-')?;
            let perms = fields.next()?.to_string();
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            let path = fields.nth(2).unwrap_or("").to_string();
            Some(Mapping {
                start: u64::from_str_radix(lo, 16).ok()?,
                end: u64::from_str_radix(hi, 16).ok()?,
                offset,
                perms,
                path,
            })
        })
        .collect())
}

/// The address of the dynamic symbol `name` of the object mapped from `path` in the
/// process: its load address (the private mapping at file offset 0; shared objects are
/// linked at 0) plus the symbol's value. `None` when the object is not mapped or lacks the symbol.
fn symbol_in(maps: &[Mapping], path: &str, name: &str) -> Option<u64> {
    // Private mappings only: the process may map the file shared as well (the profiler's
    // own symbol reader does, once attached before).
    let base = maps
        .iter()
        .find(|m| m.path == path && m.offset == 0 && m.perms.ends_with('p'))?
        .start;
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let value = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok(name) && s.is_definition())?
        .address();
    Some(match file.kind() {
        // A program linked at a fixed address (not position-independent) is mapped there.
        object::ObjectKind::Executable => value,
        _ => base + value,
    })
}

/// The object of the process that holds its Python runtime: a libpython it has loaded,
/// else its program when that defines `Py_IsInitialized` (a static build).
fn python_object(pid: i32, maps: &[Mapping]) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()?
        .to_string_lossy()
        .into_owned();
    let mut candidates: Vec<&str> = maps
        .iter()
        .filter(|m| m.offset == 0 && m.path.contains("libpython"))
        .map(|m| m.path.as_str())
        .collect();
    candidates.push(&exe);
    candidates
        .into_iter()
        .find(|path| symbol_in(maps, path, "Py_IsInitialized").is_some())
        .map(str::to_string)
}

/// The C library's mapped file, and the code ranges of it and of the dynamic loader.
fn c_library(maps: &[Mapping]) -> Option<(String, Vec<(u64, u64)>)> {
    let libc = maps
        .iter()
        .find(|m| {
            let name = Path::new(&m.path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            name.starts_with("libc.so") || name.starts_with("libc-2.")
        })?
        .path
        .clone();
    let code = maps
        .iter()
        .filter(|m| m.perms.contains('x') && (m.path == libc || m.path.contains("/ld-linux")))
        .map(|m| (m.start, m.end))
        .collect();
    Some((libc, code))
}

/// Why `PTRACE_SEIZE` was refused, for the one line.
fn refusal(pid: i32, errno: i32) -> String {
    let error = std::io::Error::from_raw_os_error(errno);
    if errno == libc::ESRCH {
        return "no such process".into();
    }
    let field = |name: &str| status_field(pid, name);
    if let Some(tracer) = field("TracerPid:").filter(|t| t != "0") {
        return format!(
            "cannot trace it ({error}): process {tracer} traces it already (a debugger, strace, \
             another pyigprof attach)"
        );
    }
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    if field("Uid:").is_some_and(|uid| uid != me.to_string()) {
        return format!(
            "cannot trace it ({error}): it belongs to another user (run as that user or root)"
        );
    }
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").unwrap_or_default();
    match scope.trim() {
        "1" => format!(
            "cannot trace it ({error}): /proc/sys/kernel/yama/ptrace_scope is 1 (only a parent \
             may trace its children): run as root, or give the command CAP_SYS_PTRACE"
        ),
        "2" | "3" => {
            format!(
            "cannot trace it ({error}): /proc/sys/kernel/yama/ptrace_scope is {} (tracing needs \
             root{})",
            scope.trim(),
            if scope.trim() == "3" { "; 3 forbids it until reboot" } else { "" }
        )
        }
        _ => format!("cannot trace it ({error})"),
    }
}

/// The command's control socket: a listening socket in a directory of its own, removed
/// when dropped.
struct Control {
    dir: PathBuf,
    listener: UnixListener,
}

impl Control {
    fn new(target_uid: Option<u32>) -> Result<Control, String> {
        let dir = std::env::temp_dir().join(format!(
            "pyigprof-attach-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let socket = dir.join("control");
        let listener =
            UnixListener::bind(&socket).map_err(|e| format!("{}: {e}", socket.display()))?;
        // The process (perhaps another user's, when root attaches) connects to it.
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711));
        if let Some(uid) = target_uid {
            let _ = std::os::unix::fs::chown(&socket, Some(uid), None);
        }
        Ok(Control { dir, listener })
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("control")
    }

    /// The library's connection, within `timeout`.
    fn accept(&self, timeout: Duration) -> Option<UnixStream> {
        self.listener.set_nonblocking(true).ok()?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok((stream, _)) = self.listener.accept() {
                stream.set_nonblocking(false).ok()?;
                return Some(stream);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A window open in a process: the library's control thread connected to the command.
pub(crate) struct Session {
    /// The socket's directory (removed when dropped).
    _control: Control,
    /// The connection, for writing.
    pub stream: UnixStream,
    /// The connection, for reading lines.
    pub lines: BufReader<UnixStream>,
    /// The threads the library samples, as it said (`started N`).
    pub threads: String,
    /// The process's name (`/proc/PID/comm`).
    pub comm: String,
}

impl Session {
    /// Closes the window (`stop`: the process goes on as it was, nothing written for a
    /// live window) and waits, at most 5 s, for the library to say so, so that the
    /// command ends after it.
    pub fn close(mut self) {
        let _ = self.stream.write_all(b"stop\n");
        let _ = self.stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut line = String::new();
        while self.lines.read_line(&mut line).unwrap_or(0) > 0 {
            if line.starts_with("discarded") || line.starts_with("error") {
                break;
            }
            line.clear();
        }
    }
}

/// Why a window could not be opened: the line to say, and the exit status.
pub(crate) struct Refused {
    pub why: String,
    pub status: u8,
}

impl Refused {
    fn one(why: impl std::fmt::Display) -> Refused {
        Refused {
            why: why.to_string(),
            status: 1,
        }
    }
}

/// The name pyigprof's helper process gives itself (`preload/src/sources/helper.rs`,
/// `HELPER_NAME`).
const HELPER_COMM: &str = "pyigprof-helper";

/// When process `pid` (named `comm`) is pyigprof's helper process, the PID of the program
/// it serves: its parent (the helper is a `clone` of the program, `CLONE_VM` without
/// `CLONE_THREAD`, which ends with it).
fn helper_of(pid: i32, comm: &str) -> Option<i32> {
    if comm != HELPER_COMM {
        return None;
    }
    status_field(pid, "PPid:")?.parse().ok()
}

/// The first word of field `name` (with its colon: `"Uid:"`) of `/proc/PID/status`;
/// `None` when the process or the field is not there.
fn status_field(pid: i32, name: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .map(|value| value.split_whitespace().next().unwrap_or("").to_string())
}

/// Opens a window in process `pid`: checks that it is Python, loads the library into it
/// (`lib`; a process that has a `libpyigprof.so` mapped already gets that one, which may
/// be another build) and calls `pyigprof_attach` with the control socket's path,
/// `PYIGPROF_OUTPUT` = `output` and the `extra` settings lines, then waits for the
/// library to say `started N`; its `note` lines are printed as `pyigprof WHAT: …`.
pub(crate) fn open_window(
    pid: i32,
    lib: &Path,
    output: &Path,
    extra: &str,
    what: &str,
) -> Result<Session, Refused> {
    if pid <= 0 || !Path::new(&format!("/proc/{pid}")).exists() {
        return Err(Refused::one("no such process"));
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_default();
    if let Some(program) = helper_of(pid, &comm) {
        return Err(Refused {
            why: format!(
                "this is pyigprof's helper process for PID {program} (it shares that \
                 process's memory and command line): point `pyigprof {what}` at PID {program}"
            ),
            status: 2,
        });
    }
    let maps = mappings(pid).map_err(Refused::one)?;
    if python_object(pid, &maps).is_none() {
        return Err(Refused::one(format!(
            "{comm} is not a Python interpreter: neither its program nor a libpython it has \
             loaded defines Py_IsInitialized"
        )));
    }
    let Some((libc_path, unsafe_code)) = c_library(&maps) else {
        return Err(Refused::one("no C library (libc.so.6) is mapped in it"));
    };
    let find = |name: &str| symbol_in(&maps, &libc_path, name);
    let (Some(dlopen), Some(dlsym), Some(dlerror), Some(errno_location)) = (
        find("dlopen"),
        find("dlsym"),
        find("dlerror"),
        find("__errno_location"),
    ) else {
        return Err(Refused::one(format!(
            "{libc_path} defines no dlopen, dlsym, dlerror and __errno_location (glibc \
             before 2.34?)"
        )));
    };
    // The library the process has already (preloaded, or attached before): dlopen of
    // another file of the same name would load a second copy beside it.
    let loaded = maps
        .iter()
        .find(|m| {
            m.offset == 0
                && Path::new(&m.path)
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("libpyigprof"))
        })
        .map(|m| PathBuf::from(&m.path));
    let lib = loaded.as_deref().unwrap_or(lib);
    let target_uid = status_field(pid, "Uid:").and_then(|uid| uid.parse().ok());
    let control = Control::new(target_uid).map_err(|e| Refused {
        why: format!("cannot make the control socket: {e}"),
        status: 1,
    })?;
    // The main thread's system call, which the stop below interrupts (the kernel then
    // shows it resumed as `restart_syscall`): for `pyigprof dump` to name it.
    let main_syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall"))
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse::<i64>().ok())
        .filter(|&nr| nr >= 0)
        .map_or(String::new(), |nr| {
            format!("PYIGPROF_LIVE_MAIN_SYSCALL={nr}\n")
        });
    let settings = format!(
        "PYIGPROF_ATTACH_SOCKET={}\nPYIGPROF_OUTPUT={}\n{main_syscall}{extra}",
        control.socket().display(),
        output.display()
    );
    let libc_fns = (dlopen, dlsym, dlerror, errno_location);
    let rc = inject(pid, lib, &settings, libc_fns, &unsafe_code).map_err(Refused::one)?;
    match rc {
        0 => {}
        1 => {
            return Err(Refused::one(
                "it is profiled by its LD_PRELOAD already: its profile is written when it ends \
                 (PYIGPROF_DUMP_SIGNAL or PYIGPROF_DUMP_INTERVAL write profiles while it runs)",
            ))
        }
        2 => return Err(Refused::one("another pyigprof attach is profiling it now")),
        3 => {
            return Err(Refused::one(
                "its Python interpreter is not initialised (or is not CPython)",
            ))
        }
        HEAP_HELD => {
            return Err(Refused::one(
                "pyigprof's own heap stayed locked in it for 2 s; try again",
            ))
        }
        _ => {
            return Err(Refused::one(
                "the library could not start its control thread",
            ))
        }
    }
    let Some(stream) = control.accept(Duration::from_secs(10)) else {
        return Err(Refused::one(
            "the library did not connect to the command within 10 s",
        ));
    };
    let mut lines = BufReader::new(stream.try_clone().map_err(Refused::one)?);
    let threads = loop {
        let mut line = String::new();
        if lines.read_line(&mut line).unwrap_or(0) == 0 {
            return Err(Refused::one(
                "the library closed the connection before sampling started",
            ));
        }
        let line = line.trim_end();
        if let Some(n) = line.strip_prefix("started ") {
            break n.to_string();
        } else if let Some(note) = line.strip_prefix("note ") {
            eprintln!("pyigprof {what}: {note}");
        } else if let Some(e) = line.strip_prefix("error ") {
            return Err(Refused::one(e));
        }
    };
    Ok(Session {
        _control: control,
        stream,
        lines,
        threads,
        comm,
    })
}

/// `pyigprof attach`: see the module documentation.
pub fn attach(args: &Attach) -> ExitCode {
    let started = Instant::now();
    let pid = args.pid;
    let lib = match crate::launch::library(args.lib.as_deref()) {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!("pyigprof attach: {e}");
            return ExitCode::from(2);
        }
    };
    let output = absolute(
        args.output
            .clone()
            .unwrap_or_else(|| PathBuf::from("pyigprof.%p.gz")),
    );
    let rate = args
        .rate
        .map_or(String::new(), |rate| format!("PYIGPROF_HZ={rate}\n"));
    if let Some(why) = crate::launch::unwritable(&output) {
        eprintln!("pyigprof attach: {why}; process {pid} was not attached to");
        return ExitCode::from(2);
    }
    let session = match open_window(pid, &lib, &output, &rate, "attach") {
        Ok(session) => session,
        Err(refused) => {
            eprintln!("pyigprof attach: process {pid}: {}", refused.why);
            return ExitCode::from(refused.status);
        }
    };
    let Session {
        stream,
        lines,
        threads,
        comm,
        _control,
    } = session;
    let until = match args.duration {
        Some(s) => format!("for {s} s"),
        None => "until Ctrl-C".into(),
    };
    eprintln!(
        "pyigprof attach: sampling process {pid} ({comm}), {threads} {}, {until}; attached \
         in {} ms",
        pyigprof_pprof::plural(threads.trim().parse::<i64>().unwrap_or(0), "thread"),
        started.elapsed().as_millis()
    );
    let ended_early = wait(args.duration, &stream);
    if !ended_early {
        let _ = (&stream).write_all(b"stop\n");
    }
    let mut written = None;
    for line in lines.lines() {
        let Ok(line) = line else { break };
        if let Some(path) = line.strip_prefix("written ") {
            written = Some(path.to_string());
        } else if let Some(text) = line.strip_prefix("summary ") {
            eprintln!("{text}");
        } else if let Some(note) = line.strip_prefix("note ") {
            eprintln!("pyigprof attach: {note}");
        } else if let Some(e) = line.strip_prefix("error ") {
            return fail(pid, e);
        }
        if written.is_some() && !ended_early {
            // The library ends the connection after its last line; do not wait for more
            // than the notes that follow at once.
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        }
    }
    match written {
        Some(path) => {
            if ended_early {
                eprintln!("pyigprof attach: process {pid} ended during the window");
            }
            eprintln!("pyigprof: 1 profile: {path}");
            eprintln!("pyigprof: read with: pyigprof report --top {path}");
            ExitCode::SUCCESS
        }
        None => fail(
            pid,
            "it ended before the profile was written (os._exit or a signal during the window)",
        ),
    }
}

/// `path` made absolute against this command's directory (the process has its own).
pub(crate) fn absolute(path: PathBuf) -> PathBuf {
    if path.is_absolute() {
        path
    } else {
        std::env::current_dir()
            .map(|d| d.join(&path))
            .unwrap_or(path)
    }
}

/// What `pyigprof_attach` returns when the library's own heap is held (the library's
/// `attach::AGAIN`): nothing was done, and it is called again after the thread ran a
/// moment ([`inject`]).
const HEAP_HELD: u64 = 5;

/// Loads the library into process `pid` and calls `pyigprof_attach(settings)` there
/// (again, after letting the thread run 4 ms, while the library says its heap is held:
/// up to 2 s); returns its result. `libc_fns` are the process's `dlopen`, `dlsym`,
/// `dlerror` and `__errno_location`. The thread's `errno` is put back with its registers.
fn inject(
    pid: i32,
    lib: &Path,
    settings: &str,
    (dlopen, dlsym, dlerror, errno_location): (u64, u64, u64, u64),
    unsafe_code: &[(u64, u64)],
) -> Result<u64, String> {
    let mut tracee = Tracee::seize(pid).map_err(|e| match e {
        Ok(errno) => refusal(pid, errno),
        Err(message) => message,
    })?;
    // The strings the calls take, NUL-terminated: pushed anew onto the thread's stack at
    // each try (its stack pointer moves between tries).
    let cstr = |bytes: &[u8]| [bytes, b"\0"].concat();
    use std::os::unix::ffi::OsStrExt;
    let lib_bytes = cstr(lib.as_os_str().as_bytes());
    let name_bytes = cstr(b"pyigprof_attach");
    let settings_bytes = cstr(settings.as_bytes());
    let (mut tries, mut heap_held) = (0, 0);
    let (errno_at, errno, result) = loop {
        // A point where the thread holds no lock of the C library's: it runs Python or an
        // extension, or is blocked in a system call that is not an allocator's.
        while !tracee.at_safe_point(unsafe_code) {
            tries += 1;
            if tries > 500 {
                return Err(
                    "its main thread stayed inside the C library for 2 s; try again".into(),
                );
            }
            tracee.step_away(Duration::from_millis(4))?;
        }
        let mut below = tracee.stack_pointer();
        let lib_at = tracee.push_bytes(&mut below, &lib_bytes)?;
        let name_at = tracee.push_bytes(&mut below, &name_bytes)?;
        let settings_at = tracee.push_bytes(&mut below, &settings_bytes)?;
        let timeout = Duration::from_secs(10);
        let errno_at = tracee.call(errno_location, &[], below, timeout)?;
        let errno = tracee.read_u32(errno_at)?;
        let result = (|| {
            let handle = tracee.call(dlopen, &[lib_at, libc::RTLD_NOW as u64], below, timeout)?;
            if handle == 0 {
                let message = tracee.call(dlerror, &[], below, timeout)?;
                let text = tracee.read_string(message);
                return Err(format!("dlopen of {} failed in it: {text}", lib.display()));
            }
            let function = tracee.call(dlsym, &[handle, name_at], below, timeout)?;
            if function == 0 {
                return Err(format!("{} has no pyigprof_attach", lib.display()));
            }
            tracee.call(function, &[settings_at], below, timeout)
        })();
        // The library's own heap was held, maybe by this thread, stopped inside the
        // library: let it run on a moment (past the holder's few microseconds) and call
        // again, everything pushed anew (its stack moved).
        if matches!(result, Ok(rc) if rc & 0xffff_ffff == HEAP_HELD) && heap_held < 500 {
            heap_held += 1;
            tracee.write_u32(errno_at, errno)?;
            tracee.step_away(Duration::from_millis(4))?;
            continue;
        }
        break (errno_at, errno, result);
    };
    // The thread is put back whatever the calls did; a failure to put it back does not
    // hide why a call failed (both are said).
    let put_back = tracee
        .write_u32(errno_at, errno)
        .and_then(|()| tracee.release());
    match (result, put_back) {
        (Ok(rc), Ok(())) => Ok(rc & 0xffff_ffff),
        (Ok(_), Err(back)) => Err(back),
        (Err(why), Ok(())) => Err(why),
        (Err(why), Err(back)) => Err(format!("{why}; then, putting the thread back: {back}")),
    }
}

/// Waits for the duration (forever without one) or Ctrl-C/SIGTERM, or until the library
/// speaks first (the process is ending). Returns whether the process ended the window.
fn wait(duration: Option<f64>, stream: &UnixStream) -> bool {
    // SAFETY: blocking SIGINT and SIGTERM in this single-threaded command, then polling for
    // them with sigtimedwait.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let deadline = duration.map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    use std::os::unix::io::AsRawFd;
    loop {
        let mut poll = libc::pollfd {
            fd: stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut poll, 1, 0) } > 0 {
            return true;
        }
        let step = Duration::from_millis(50);
        let step = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return false;
                }
                left.min(step)
            }
            None => step,
        };
        let timeout = libc::timespec {
            tv_sec: 0,
            tv_nsec: step.as_nanos() as libc::c_long,
        };
        // SAFETY: a valid set and timeout; the siginfo is not wanted.
        let got = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
        if got == libc::SIGINT || got == libc::SIGTERM {
            return false;
        }
    }
}
