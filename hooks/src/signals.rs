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
//! A *chained* guard ([`guard_chained`], for `SIGSEGV` and `SIGBUS`, where pyigprof must
//! recover from faults of its own reads whatever the program installs) never ends: a
//! handler the program installs is recorded, shown to it, and run in ours' place for every
//! signal that is not pyigprof's ([`pass_to_program`]), with the program's flags and mask.
//!
//! The program's own handlers without `SA_RESTART` go in behind a trampoline
//! ([`crate::interruptions`]), so that the system calls they interrupt stay interrupted.
//!
//! glibc's `signal()` and `sigset()` call `sigaction` through an internal alias, so
//! `signal` is interposed as well.

use crate::next::Next;
use libc::{c_int, sigaction as SigAction, sighandler_t};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

static REAL_SIGACTION: Next = Next::new(c"sigaction");

/// Highest signal number handled (`_NSIG - 1` on Linux).
pub(crate) const MAX_SIGNAL: usize = 64;

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
    /// Whether the program's handlers are kept behind ours (see [`guard_chained`]).
    chained: AtomicBool,
    /// A chained guard: the `sa_flags` of the program's handler in `view`.
    program_flags: AtomicUsize,
    /// A chained guard: the `sa_mask` of the program's handler, signals 1–64 (bit n − 1).
    program_mask: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const UNGUARDED: Guard = Guard {
    ours: AtomicUsize::new(0),
    view: AtomicUsize::new(0),
    keep_when_ignored: AtomicBool::new(false),
    released: AtomicUsize::new(0),
    flags: AtomicUsize::new(0),
    chained: AtomicBool::new(false),
    program_flags: AtomicUsize::new(0),
    program_mask: AtomicU64::new(0),
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

/// The kernel's action for `signal` now, `None` when `sigaction` fails.
fn current_action(signal: c_int) -> Option<SigAction> {
    // SAFETY: querying a disposition into an initialised structure.
    unsafe {
        let mut current: SigAction = std::mem::zeroed();
        (real_sigaction(signal, std::ptr::null(), &mut current) == 0).then_some(current)
    }
}

/// Makes `handler` (an `SA_SIGINFO` handler, with `flags` added and an empty mask) the
/// kernel's action for `signal`; returns whether `sigaction` took it.
fn install_ours(
    signal: c_int,
    handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut libc::c_void),
    flags: c_int,
) -> bool {
    // SAFETY: setting a disposition with an initialised structure.
    unsafe {
        let mut action: SigAction = std::mem::zeroed();
        action.sa_sigaction = handler as usize;
        action.sa_flags = libc::SA_SIGINFO | flags;
        libc::sigemptyset(&mut action.sa_mask);
        real_sigaction(signal, &action, std::ptr::null_mut()) == 0
    }
}

/// Installs `handler` (an `SA_SIGINFO` handler, with `flags` added) for `signal` if the
/// signal's action is the default one now (or, with `keep_when_ignored`, "ignore", as a
/// process may inherit it), and from then on shows the program that action. `released` is
/// called when the program takes the signal over. Returns whether the guard was installed.
/// `keep_when_ignored` also keeps the guard when the program sets the signal to "ignore"
/// (for `SIGPROF`, whose handler ignores signals not sent by the sampler anyway).
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
    let Some(current) = current_action(signal) else {
        return false;
    };
    let inherited = current.sa_sigaction;
    // Ours already: a guard kept from an earlier `pyigprof attach` window; the program's
    // view stays what it was.
    let already = inherited == handler as usize;
    if !(already || inherited == libc::SIG_DFL || (inherited == libc::SIG_IGN && keep_when_ignored))
    {
        return false;
    }
    if !already {
        g.view.store(inherited + 1, Ordering::Relaxed);
    }
    if !install_ours(signal, handler, flags) {
        return false;
    }
    g.flags
        .store((libc::SA_SIGINFO | flags) as usize, Ordering::Relaxed);
    g.keep_when_ignored
        .store(keep_when_ignored, Ordering::Relaxed);
    g.released.store(released as usize, Ordering::Relaxed);
    g.ours.store(handler as usize, Ordering::Release);
    true
}

/// Installs `handler` for `signal` as [`guard`] does, for good: a handler the program
/// installs later is kept behind ours and run by [`pass_to_program`] (for `SIGSEGV` and
/// `SIGBUS`, whose faults in pyigprof's own reads its handler recovers from). Returns
/// whether the guard was installed (the signal's action was the default one).
pub fn guard_chained(
    signal: c_int,
    handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut libc::c_void),
    flags: c_int,
) -> bool {
    let installed = guard(signal, handler, flags, false, |_| {});
    if let (true, Some(g)) = (installed, guard_of(signal)) {
        g.chained.store(true, Ordering::Release);
    }
    installed
}

/// [`guard_chained`] for a process that is already running (`pyigprof attach`): a handler
/// the program installed before is kept behind ours, with its flags and mask, as if it
/// had been installed through the interposed `sigaction` (3.x's `faulthandler`, enabled by
/// `-X faulthandler` or pytest, holds `SIGSEGV` and `SIGBUS`). Returns whether the guard
/// was installed; [`unguard`] puts the program's action back.
pub fn guard_chained_over_current(
    signal: c_int,
    handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut libc::c_void),
    flags: c_int,
) -> bool {
    let Some(g) = guard_of(signal) else {
        return false;
    };
    let Some(current) = current_action(signal) else {
        return false;
    };
    if current.sa_sigaction == handler as usize {
        return true; // ours already (attached before, never ended)
    }
    g.program_flags
        .store(current.sa_flags as usize, Ordering::Relaxed);
    g.program_mask
        .store(bits_of(&current.sa_mask), Ordering::Relaxed);
    g.view.store(current.sa_sigaction + 1, Ordering::Relaxed);
    g.chained.store(true, Ordering::Release);
    if !install_ours(signal, handler, flags) {
        g.chained.store(false, Ordering::Release);
        return false;
    }
    g.flags
        .store((libc::SA_SIGINFO | flags) as usize, Ordering::Relaxed);
    g.released.store(0, Ordering::Relaxed);
    g.ours.store(handler as usize, Ordering::Release);
    true
}

/// Ends the guard of `signal` and gives the program back the action it sees: its handler
/// (with the flags and mask it was installed with), "ignore" or the default action — for
/// `pyigprof attach`, when sampling ends. When the installed handler is no longer ours
/// (a library dlopen'ed beside pyigprof does not pass its `sigaction` calls through ours,
/// so a handler installed since is the kernel's current one), it is left as it is.
pub fn unguard(signal: c_int) {
    let Some(g) = guard_of(signal) else {
        return;
    };
    let ours = g.ours.swap(0, Ordering::AcqRel);
    if ours == 0 {
        return;
    }
    // SAFETY: querying and setting a disposition with initialised structures.
    unsafe {
        let mut current: SigAction = std::mem::zeroed();
        if real_sigaction(signal, std::ptr::null(), &mut current) != 0
            || current.sa_sigaction != ours
        {
            g.chained.store(false, Ordering::Release);
            return;
        }
        let mut action: SigAction = std::mem::zeroed();
        action.sa_sigaction = g.view.load(Ordering::Acquire).saturating_sub(1);
        libc::sigemptyset(&mut action.sa_mask);
        if g.chained.load(Ordering::Acquire)
            && action.sa_sigaction != libc::SIG_DFL
            && action.sa_sigaction != libc::SIG_IGN
        {
            action.sa_flags = g.program_flags.load(Ordering::Relaxed) as c_int;
            action.sa_mask = sigset_of(g.program_mask.load(Ordering::Relaxed));
        }
        real_sigaction(signal, &action, std::ptr::null_mut());
    }
    g.chained.store(false, Ordering::Release);
}

/// What the program wants done with a signal of a chained guard ([`pass_to_program`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passed {
    /// Run the program's handler at this address (called as `handler(signal, info, uc)`,
    /// which also serves a handler without `SA_SIGINFO`), with the mask already set.
    Run(usize),
    /// The program ignores the (sent) signal: nothing to do.
    Ignored,
    /// The program leaves the signal at its default action (or ignores a fault, which the
    /// kernel would not let it ignore): the caller ends the process by it.
    Default,
}

/// From our handler of a chained guard's `signal`: what the program's disposition asks.
/// For a handler, the thread's mask is first set as the kernel would have set it for the
/// program's handler (its `sa_mask`, and the signal itself unless `SA_NODEFER`; the kernel
/// restores the interrupted mask when our handler returns) and `SA_RESETHAND` is honoured;
/// the caller then jumps to the handler in its own place (so that a handler that prints
/// the C stack, as 3.14's faulthandler does, sees the same frames as without pyigprof).
/// Async-signal-safe.
///
/// # Safety
/// `info` must be what the kernel passed to our handler of `signal`.
pub unsafe fn pass_to_program(signal: c_int, info: *const libc::siginfo_t) -> Passed {
    let Some(g) = guard_of(signal).filter(|g| g.chained.load(Ordering::Acquire)) else {
        return Passed::Default;
    };
    let action = g.view.load(Ordering::Acquire).saturating_sub(1);
    // SAFETY: the kernel's siginfo; si_code > 0: raised by the kernel for a fault.
    let fault = unsafe { (*info).si_code } > 0;
    match action {
        libc::SIG_DFL => return Passed::Default,
        libc::SIG_IGN if fault => return Passed::Default,
        libc::SIG_IGN => return Passed::Ignored,
        _ => {}
    }
    let flags = g.program_flags.load(Ordering::Relaxed) as c_int;
    let mask = g.program_mask.load(Ordering::Relaxed);
    if flags & libc::SA_RESETHAND != 0 {
        g.view.store(libc::SIG_DFL + 1, Ordering::Release);
    }
    let mut block = sigset_of(mask);
    // SAFETY: sigset and mask calls with initialised sets.
    unsafe {
        if flags & libc::SA_NODEFER == 0 {
            libc::sigaddset(&mut block, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, std::ptr::null_mut());
    }
    Passed::Run(action)
}

/// The bit of `signal` (1–64) in a mask of signals.
const fn bit(signal: c_int) -> u64 {
    1 << (signal - 1)
}

/// The set of the signals of `bits` (1–64, bit n − 1; glibc's own 32 and 33 left out).
fn sigset_of(bits: u64) -> libc::sigset_t {
    // SAFETY: an initialised set, filled by sigaddset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for n in 1..=64 {
            if bits & bit(n) != 0 {
                libc::sigaddset(&mut set, n);
            }
        }
        set
    }
}

/// The signals 1–64 of `set` as bits (bit n − 1).
fn bits_of(set: &libc::sigset_t) -> u64 {
    // SAFETY: sigismember reads an initialised set.
    (1..=64)
        .filter(|&n| unsafe { libc::sigismember(set, n) } == 1)
        .fold(0, |bits, n| bits | bit(n))
}

/// Whether a guard installed with `SA_RESTART` (one that [`crate::interruptions::keep`]
/// serves) holds with a handler that `handler` accepts: `|address| address == pc` asks
/// whether `pc` is such a handler, `|_| true` whether any holds (the sampler's
/// `SIGPROF`). Async-signal-safe.
pub(crate) fn restarting_guard(handler: impl Fn(usize) -> bool) -> bool {
    GUARDS.iter().any(|g| {
        let ours = g.ours.load(Ordering::Relaxed);
        ours != 0
            && handler(ours)
            && g.flags.load(Ordering::Relaxed) as c_int & libc::SA_RESTART != 0
    })
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
        // SAFETY: the program's own action (a handler that interrupts system calls behind
        // a trampoline of crate::interruptions).
        return unsafe { crate::interruptions::install(signal, act, old) };
    };
    // SAFETY: the caller's pointers, as sigaction(2) requires.
    unsafe {
        let mut shown: SigAction = std::mem::zeroed();
        libc::sigemptyset(&mut shown.sa_mask);
        shown.sa_sigaction = g.view.load(Ordering::Relaxed).saturating_sub(1);
        let chained = g.chained.load(Ordering::Acquire);
        if chained && shown.sa_sigaction != libc::SIG_DFL && shown.sa_sigaction != libc::SIG_IGN {
            shown.sa_flags = g.program_flags.load(Ordering::Relaxed) as c_int;
            shown.sa_mask = sigset_of(g.program_mask.load(Ordering::Relaxed));
        }
        if let Some(new) = act.as_ref() {
            let wanted = new.sa_sigaction;
            if chained {
                // Kept behind ours: recorded and shown, run by pass_to_program.
                let mask = bits_of(&new.sa_mask);
                g.program_flags
                    .store(new.sa_flags as usize, Ordering::Relaxed);
                g.program_mask.store(mask, Ordering::Relaxed);
                g.view.store(wanted + 1, Ordering::Release);
                if let Some(old) = old.as_mut() {
                    *old = shown;
                }
                return 0;
            }
            let keep = wanted == libc::SIG_DFL
                || (wanted == libc::SIG_IGN && g.keep_when_ignored.load(Ordering::Relaxed));
            if keep {
                g.view.store(wanted + 1, Ordering::Relaxed);
            } else {
                // The program takes the signal over.
                let rc = crate::interruptions::install(signal, act, std::ptr::null_mut());
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
