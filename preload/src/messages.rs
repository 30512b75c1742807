//! Where pyigprof's own lines go (`PYIGPROF_LOG`): the summary at exit, warnings and
//! errors. Never the program's stdout or stderr unless asked for: a profiled process's
//! output streams stay byte-identical, in the process the user started and in every
//! subprocess, fork child and exec'd program (a test that runs `python -m json.tool` and
//! checks that its stderr is empty passes under the profiler).
//!
//! - [`Destination::Terminal`] (the default): the process's controlling terminal
//!   (`/dev/tty`), when it has one and is not its session's leader. A user who runs
//!   `python app.py` from a shell sees the lines where the program's output goes, and a
//!   test harness that reads its subprocesses' stderr through pipes sees nothing. A
//!   process that leads its own session took its terminal for itself: a pseudo-terminal a
//!   test reads (`pty.fork`, `pexpect`, `start_new_session`), or a container's or
//!   daemon's; it says nothing there. Without a terminal (CI, cron, services), nothing is
//!   said: `PYIGPROF_LOG=stderr` or a file keeps the lines.
//! - [`Destination::Stderr`] (`PYIGPROF_LOG=stderr`): file descriptor 2, as before.
//! - [`Destination::File`] (`PYIGPROF_LOG=PATH`): appended to PATH (created 0644), one
//!   `write(2)` per line with `O_APPEND`, so that the lines of concurrent processes do not
//!   interleave. `pyigprof record` gives its processes a file of its own and prints what
//!   they wrote when the command ends.
//!
//! `PYIGPROF_QUIET` says nothing anywhere. Every write here is async-signal-safe (`open`,
//! `write`, `close` and a signal mask), so that a fork child can report too.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Where pyigprof's lines go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// The controlling terminal, unless the process leads its session (`tty`, the default).
    Terminal,
    /// File descriptor 2 (`stderr`).
    Stderr,
    /// Appended to this file (any other value; relative to the working directory at start).
    File(std::ffi::OsString),
}

impl Destination {
    /// Reads `PYIGPROF_LOG`'s value: `tty`, `stderr`, or a path.
    pub fn parse(raw: &std::ffi::OsStr) -> Destination {
        match raw.to_str().map(str::trim) {
            Some("tty") | Some("") => Destination::Terminal,
            Some("stderr") => Destination::Stderr,
            _ => Destination::File(raw.to_os_string()),
        }
    }
}

/// Whether nothing is said ([`silence`], `PYIGPROF_QUIET`).
static QUIET: AtomicBool = AtomicBool::new(false);

/// 0: terminal, 1: stderr, 2: the file in [`PATH`].
static KIND: AtomicU8 = AtomicU8::new(0);

/// Longest log path kept (NUL included); a longer one is said once and stderr used.
const PATH_MAX: usize = 4096;

/// The log file's absolute path, NUL-terminated (set once by [`set`], before threads).
static mut PATH: [u8; PATH_MAX] = [0; PATH_MAX];

/// Makes `destination` where every line goes, and `quiet` silence them all. Called by the
/// constructor before any thread starts, and by tests.
pub fn set(destination: &Destination, quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
    let kind = match destination {
        Destination::Terminal => 0,
        Destination::Stderr => 1,
        Destination::File(path) => {
            use std::os::unix::ffi::OsStrExt;
            let absolute = std::path::absolute(path).unwrap_or_else(|_| path.into());
            let bytes = absolute.as_os_str().as_bytes();
            if bytes.len() >= PATH_MAX || bytes.contains(&0) {
                KIND.store(1, Ordering::Relaxed);
                line(&format!(
                    "pyigprof: PYIGPROF_LOG: {} is not a usable path (NUL or over {} bytes); \
                     using stderr",
                    absolute.display(),
                    PATH_MAX - 1
                ));
                return;
            }
            // SAFETY: written before any other thread runs (the constructor) and read only
            // after; a single writer.
            unsafe {
                let path = &mut *std::ptr::addr_of_mut!(PATH);
                path[..bytes.len()].copy_from_slice(bytes);
                path[bytes.len()] = 0;
            }
            2
        }
    };
    KIND.store(kind, Ordering::Relaxed);
}

/// Whether pyigprof says nothing (`PYIGPROF_QUIET`, or [`silence`]). Async-signal-safe.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Silences every line for the rest of the process: in a process profiled by `pyigprof
/// attach`, messages go to the command instead.
pub fn silence() {
    QUIET.store(true, Ordering::Relaxed);
}

/// Says `text` (one line, without its newline) where lines go, unless quiet.
pub fn line(text: &str) {
    let mut bytes = Vec::with_capacity(text.len() + 1);
    bytes.extend_from_slice(text.as_bytes());
    bytes.push(b'\n');
    write_line(&bytes);
}

/// Says `bytes` (a whole line, its newline included) where lines go, unless quiet.
/// Async-signal-safe: for a fork child, which may not allocate.
pub fn write_line(bytes: &[u8]) {
    if quiet() {
        return;
    }
    match KIND.load(Ordering::Relaxed) {
        1 => write_all(2, bytes),
        2 => {
            // PATH is NUL-terminated and no longer written (set before threads).
            let path = std::ptr::addr_of!(PATH).cast::<libc::c_char>();
            // SAFETY: open/close with a NUL-terminated path.
            let fd = unsafe {
                libc::open(
                    path,
                    libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC,
                    0o644,
                )
            };
            if fd >= 0 {
                write_all(fd, bytes);
                // SAFETY: the descriptor opened above.
                unsafe { libc::close(fd) };
            }
        }
        _ => to_terminal(bytes),
    }
}

/// Writes `bytes` to the controlling terminal, unless the process has none or leads its
/// session ([`Destination::Terminal`]). `SIGTTOU` is blocked meanwhile, so that a
/// background job on a terminal with `tostop` is not stopped by pyigprof's line.
fn to_terminal(bytes: &[u8]) {
    // SAFETY: getsid/getpid have no preconditions.
    if unsafe { libc::getsid(0) == libc::getpid() } {
        return;
    }
    // SAFETY: a NUL-terminated literal path.
    let fd = unsafe {
        libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_WRONLY | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return;
    }
    // SAFETY: signal sets on the stack, the calling thread's mask.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        write_all(fd, bytes);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        libc::close(fd);
    }
}

/// Writes all of `bytes` to `fd`, retrying short writes and `EINTR`; gives up on errors.
fn write_all(fd: libc::c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writing a live buffer.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n > 0 {
            bytes = &bytes[n as usize..];
        } else if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        } else {
            return;
        }
    }
}

/// Says one line, formatted as `format!`, where pyigprof's lines go ([`line`]) unless
/// `PYIGPROF_QUIET` is set: every message pyigprof prints (the summary, warnings, errors)
/// goes through it.
#[macro_export]
macro_rules! notice {
    ($($arg:tt)*) => {
        if !$crate::messages::quiet() {
            $crate::messages::line(&format!($($arg)*));
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_values_name_the_terminal_stderr_or_a_file() {
        assert_eq!(Destination::parse("tty".as_ref()), Destination::Terminal);
        assert_eq!(Destination::parse("".as_ref()), Destination::Terminal);
        assert_eq!(Destination::parse(" stderr ".as_ref()), Destination::Stderr);
        assert_eq!(
            Destination::parse("/tmp/p.log".as_ref()),
            Destination::File("/tmp/p.log".into())
        );
    }
}
