//! The ways a process image ends without running `atexit` handlers, interposed so that the
//! profile is written first: `_exit`/`_Exit` (Python's `os._exit`, `multiprocessing`'s fork
//! children), the `exec` family (the image is replaced), and `kill`/`raise` of a fatal
//! signal at the process itself (Python 3.8+ ends a program interrupted by Ctrl-C with
//! `kill(getpid(), SIGINT)` after restoring the default action).
//!
//! glibc's `execl*` functions are variadic (not definable in stable Rust) and call `execve`
//! through an internal alias that interposition cannot see; Python's `os.exec*` and
//! `subprocess` use `execv`/`execve`/`fexecve`, which are covered.

use crate::next::Next;
use libc::{c_char, c_int, pid_t};

static REAL_EXIT: Next = Next::new(c"_exit");
static REAL_EXIT_UPPER: Next = Next::new(c"_Exit");
static REAL_EXECVE: Next = Next::new(c"execve");
static REAL_EXECV: Next = Next::new(c"execv");
static REAL_EXECVP: Next = Next::new(c"execvp");
static REAL_EXECVPE: Next = Next::new(c"execvpe");
static REAL_FEXECVE: Next = Next::new(c"fexecve");
static REAL_KILL: Next = Next::new(c"kill");
static REAL_RAISE: Next = Next::new(c"raise");

fn ending() {
    if let Some(cb) = crate::callbacks() {
        (cb.process_ending)();
    }
}

/// Runs `exec` between the `before_exec` and `exec_failed` callbacks.
fn around_exec(exec: impl FnOnce() -> c_int) -> c_int {
    let cb = crate::callbacks();
    if let Some(cb) = cb {
        (cb.before_exec)();
    }
    // After sampling stopped: the signals the program ignores are ignored for real, for the
    // new image to inherit.
    crate::signals::before_exec();
    let rc = exec();
    // Only reached when the exec failed.
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    crate::signals::exec_failed();
    if let Some(cb) = cb {
        (cb.exec_failed)();
    }
    // SAFETY: restoring errno for the caller.
    unsafe { *libc::__errno_location() = errno };
    rc
}

/// Interposed `_exit(2)`: writes the profile, then ends the process.
///
/// # Safety
/// As `_exit(2)`.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    ending();
    type F = unsafe extern "C" fn(c_int) -> !;
    // SAFETY: the next definition is libc's _exit.
    unsafe { std::mem::transmute::<usize, F>(REAL_EXIT.get())(status) }
}

/// Interposed `_Exit(2)`: as [`_exit`].
///
/// # Safety
/// As `_Exit(2)`.
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    ending();
    type F = unsafe extern "C" fn(c_int) -> !;
    // SAFETY: the next definition is libc's _Exit.
    unsafe { std::mem::transmute::<usize, F>(REAL_EXIT_UPPER.get())(status) }
}

type Argv = *const *const c_char;

/// Interposed `execve(2)`.
///
/// # Safety
/// As `execve(2)`.
#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;
    // SAFETY: the next definition is libc's execve.
    around_exec(|| unsafe { std::mem::transmute::<usize, F>(REAL_EXECVE.get())(path, argv, envp) })
}

/// Interposed `execv(3)`.
///
/// # Safety
/// As `execv(3)`.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, Argv) -> c_int;
    // SAFETY: the next definition is libc's execv.
    around_exec(|| unsafe { std::mem::transmute::<usize, F>(REAL_EXECV.get())(path, argv) })
}

/// Interposed `execvp(3)`.
///
/// # Safety
/// As `execvp(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, Argv) -> c_int;
    // SAFETY: the next definition is libc's execvp.
    around_exec(|| unsafe { std::mem::transmute::<usize, F>(REAL_EXECVP.get())(file, argv) })
}

/// Interposed `execvpe(3)`.
///
/// # Safety
/// As `execvpe(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;
    // SAFETY: the next definition is libc's execvpe.
    around_exec(|| unsafe { std::mem::transmute::<usize, F>(REAL_EXECVPE.get())(file, argv, envp) })
}

/// Interposed `fexecve(3)`.
///
/// # Safety
/// As `fexecve(3)`.
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    type F = unsafe extern "C" fn(c_int, Argv, Argv) -> c_int;
    // SAFETY: the next definition is libc's fexecve.
    around_exec(|| unsafe { std::mem::transmute::<usize, F>(REAL_FEXECVE.get())(fd, argv, envp) })
}

/// Interposed `kill(2)`: a signal the process sends itself is announced first (the
/// sampler writes the profile when it would end the process).
///
/// # Safety
/// As `kill(2)`.
#[no_mangle]
pub unsafe extern "C" fn kill(pid: pid_t, signal: c_int) -> c_int {
    // SAFETY: getpid has no preconditions.
    if signal != 0 && (pid == unsafe { libc::getpid() } || pid == 0) {
        if let Some(cb) = crate::callbacks() {
            (cb.signalling_self)(signal);
        }
    }
    type F = unsafe extern "C" fn(pid_t, c_int) -> c_int;
    // SAFETY: the next definition is libc's kill.
    unsafe { std::mem::transmute::<usize, F>(REAL_KILL.get())(pid, signal) }
}

/// Interposed `raise(3)`: as [`kill`] for the calling thread.
///
/// # Safety
/// As `raise(3)`.
#[no_mangle]
pub unsafe extern "C" fn raise(signal: c_int) -> c_int {
    if signal != 0 {
        if let Some(cb) = crate::callbacks() {
            (cb.signalling_self)(signal);
        }
    }
    type F = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: the next definition is libc's raise.
    unsafe { std::mem::transmute::<usize, F>(REAL_RAISE.get())(signal) }
}
