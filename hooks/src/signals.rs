//! Sharing signal dispositions with the program: `sigaction` and `signal` interposed.
//!
//! pyigprof keeps handlers of its own under signals whose action, as far as the program
//! knows, is the default one ([`guard`]): `SIGPROF` (the sampler) and the signals whose
//! default action ends the process (so that the profile is written first). The program
//! must not see them: CPython reads every disposition at start-up (`signal.getsignal`
//! reports `None` for a handler it did not install) and installs its `SIGINT` handler only
//! over the default action. So while a guard holds, the program is shown its own view —
//! the default action, or whatever default/ignore setting it made since — and:
//!
//! - the program sets the default action: the guard stays, the view records it;
//! - the program installs a handler, or ignores a fatal signal: the program's wish is
//!   applied and the guard ends ([`Released`] callback, e.g. the sampler stops and says so
//!   once for `SIGPROF`).
//!
//! glibc's `signal()` and `sigset()` call `sigaction` through an internal alias, so
//! `signal` is interposed as well.

use crate::next::Next;
use libc::{c_int, sigaction as SigAction, sighandler_t};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static REAL_SIGACTION: Next = Next::new(c"sigaction");

/// Highest signal number handled (`_NSIG - 1` on Linux).
const MAX_SIGNAL: usize = 64;

/// Called (outside any signal handler) when the program takes signal `signal` over.
pub type Released = fn(signal: c_int);

struct Guard {
    /// Our handler (`sa_sigaction`), 0 when the signal is not guarded.
    ours: AtomicUsize,
    /// The program's view: 1 + `SIG_DFL`/`SIG_IGN` (0 = default).
    view: AtomicUsize,
    /// Whether the program ignoring the signal keeps the guard (for `SIGPROF`, whose
    /// handler ignores signals not sent by the sampler anyway).
    keep_when_ignored: AtomicBool,
    released: AtomicUsize,
    /// The `sa_flags` our handler was installed with.
    flags: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const UNGUARDED: Guard = Guard {
    ours: AtomicUsize::new(0),
    view: AtomicUsize::new(0),
    keep_when_ignored: AtomicBool::new(false),
    released: AtomicUsize::new(0),
    flags: AtomicUsize::new(0),
};
static GUARDS: [Guard; MAX_SIGNAL + 1] = [UNGUARDED; MAX_SIGNAL + 1];

/// The guard slot of `signal`, whether guarded or not; `None` for an invalid number.
fn guard_of(signal: c_int) -> Option<&'static Guard> {
    usize::try_from(signal).ok().and_then(|s| GUARDS.get(s))
}

/// The C library's own `sigaction`, for pyigprof's own use (its calls to `sigaction` would
/// otherwise reach the interposed one).
///
/// # Safety
/// As `sigaction(2)`.
pub unsafe fn real_sigaction(signal: c_int, act: *const SigAction, old: *mut SigAction) -> c_int {
    type F = unsafe extern "C" fn(c_int, *const SigAction, *mut SigAction) -> c_int;
    // SAFETY: the next definition is libc's sigaction.
    unsafe { std::mem::transmute::<usize, F>(REAL_SIGACTION.get())(signal, act, old) }
}

/// Installs `handler` (an `SA_SIGINFO` handler, with `flags` added) for `signal` if the
/// signal's action is the default one now (or, with `keep_when_ignored`, "ignore", as a
/// process may inherit it), and from then on shows the program that action. `released` is
/// called when the program takes the signal over. Returns whether the guard was installed.
/// `keep_when_ignored`: see [`Guard`].
pub fn guard(
    signal: c_int,
    handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut libc::c_void),
    flags: c_int,
    keep_when_ignored: bool,
    released: Released,
) -> bool {
    let Some(g) = guard_of(signal) else {
        return false;
    };
    // SAFETY: querying and setting a disposition with initialised structures.
    unsafe {
        let mut current: SigAction = std::mem::zeroed();
        if real_sigaction(signal, std::ptr::null(), &mut current) != 0 {
            return false;
        }
        let inherited = current.sa_sigaction;
        if !(inherited == libc::SIG_DFL || (inherited == libc::SIG_IGN && keep_when_ignored)) {
            return false;
        }
        g.view.store(inherited + 1, Ordering::Relaxed);
        let mut action: SigAction = std::mem::zeroed();
        action.sa_sigaction = handler as usize;
        action.sa_flags = libc::SA_SIGINFO | flags;
        libc::sigemptyset(&mut action.sa_mask);
        if real_sigaction(signal, &action, std::ptr::null_mut()) != 0 {
            return false;
        }
    }
    g.flags
        .store((libc::SA_SIGINFO | flags) as usize, Ordering::Relaxed);
    g.keep_when_ignored
        .store(keep_when_ignored, Ordering::Relaxed);
    g.released.store(released as usize, Ordering::Relaxed);
    g.ours.store(handler as usize, Ordering::Release);
    true
}

/// Whether `signal` is still guarded and the program's view of it is the default action
/// (for the fatal-signal handler: the process must then end as the default action would).
pub fn program_sees_default(signal: c_int) -> bool {
    // `view` is 0 (never set) or 1 + SIG_DFL for the default action.
    guard_of(signal).is_some_and(|g| {
        g.ours.load(Ordering::Acquire) != 0
            && g.view.load(Ordering::Relaxed).saturating_sub(1) == libc::SIG_DFL
    })
}

/// Whether the program's view of `signal` is "ignore" while it is guarded.
pub fn program_ignores(signal: c_int) -> bool {
    guard_of(signal).is_some_and(|g| {
        g.ours.load(Ordering::Acquire) != 0 && g.view.load(Ordering::Relaxed) == libc::SIG_IGN + 1
    })
}

/// Before an `exec`: the guarded signals the program ignores are ignored for real, since
/// `exec` keeps "ignore" (and resets handlers): the new image inherits what the program
/// set. Undone by [`exec_failed`].
pub fn before_exec() {
    for signal in 1..=MAX_SIGNAL as c_int {
        if program_ignores(signal) {
            // SAFETY: setting SIG_IGN with an initialised structure.
            unsafe {
                let mut action: SigAction = std::mem::zeroed();
                action.sa_sigaction = libc::SIG_IGN;
                libc::sigemptyset(&mut action.sa_mask);
                real_sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    }
}

/// The `exec` failed: our handlers are back on the signals [`before_exec`] ignored.
pub fn exec_failed() {
    for signal in 1..=MAX_SIGNAL as c_int {
        let Some(g) = guard_of(signal) else { continue };
        if !program_ignores(signal) {
            continue;
        }
        // SAFETY: reinstalling our handler with an initialised structure.
        unsafe {
            let mut action: SigAction = std::mem::zeroed();
            action.sa_sigaction = g.ours.load(Ordering::Acquire);
            action.sa_flags = g.flags.load(Ordering::Relaxed) as c_int;
            libc::sigemptyset(&mut action.sa_mask);
            real_sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Ends the guard of `signal` and restores the default action (before the process ends
/// by it). Async-signal-safe.
pub fn restore_default(signal: c_int) {
    if let Some(g) = guard_of(signal) {
        g.ours.store(0, Ordering::Release);
        // SAFETY: setting the default action with an initialised structure.
        unsafe {
            let mut action: SigAction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut action.sa_mask);
            real_sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Interposed `sigaction(2)`; see the module documentation.
///
/// # Safety
/// As `sigaction(2)`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    signal: c_int,
    act: *const SigAction,
    old: *mut SigAction,
) -> c_int {
    let guarded = guard_of(signal).filter(|g| g.ours.load(Ordering::Acquire) != 0);
    let Some(g) = guarded else {
        // SAFETY: forwarded unchanged.
        return unsafe { real_sigaction(signal, act, old) };
    };
    // SAFETY: the caller's pointers, as sigaction(2) requires.
    unsafe {
        let mut shown: SigAction = std::mem::zeroed();
        libc::sigemptyset(&mut shown.sa_mask);
        shown.sa_sigaction = g.view.load(Ordering::Relaxed).saturating_sub(1);
        if let Some(new) = act.as_ref() {
            let wanted = new.sa_sigaction;
            let keep = wanted == libc::SIG_DFL
                || (wanted == libc::SIG_IGN && g.keep_when_ignored.load(Ordering::Relaxed));
            if keep {
                g.view.store(wanted + 1, Ordering::Relaxed);
            } else {
                // The program takes the signal over.
                let rc = real_sigaction(signal, act, std::ptr::null_mut());
                if rc != 0 {
                    return rc;
                }
                g.ours.store(0, Ordering::Release);
                let released = g.released.load(Ordering::Relaxed);
                if released != 0 {
                    let released: Released = std::mem::transmute::<usize, Released>(released);
                    released(signal);
                }
            }
        }
        if let Some(old) = old.as_mut() {
            *old = shown;
        }
    }
    0
}

/// Interposed `signal(2)`: `sigaction` with `SA_RESTART`, as glibc's.
///
/// # Safety
/// As `signal(2)`.
#[no_mangle]
pub unsafe extern "C" fn signal(signum: c_int, handler: sighandler_t) -> sighandler_t {
    // SAFETY: initialised structures passed to the interposed sigaction.
    unsafe {
        let mut action: SigAction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaddset(&mut action.sa_mask, signum);
        let mut old: SigAction = std::mem::zeroed();
        if sigaction(signum, &action, &mut old) != 0 {
            return libc::SIG_ERR;
        }
        old.sa_sigaction
    }
}
