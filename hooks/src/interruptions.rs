//! System calls the program's signals interrupt stay interrupted.
//!
//! A program that installs a handler without `SA_RESTART` (CPython does, for every Python
//! signal handler and for `SIGINT`) relies on a blocked system call returning `EINTR` when
//! the signal arrives: CPython runs Python-level handlers only then, so a `read` that is
//! restarted instead blocks for ever, with the handler that should have ended it pending.
//!
//! pyigprof's handlers have `SA_RESTART` (a sample must not end a system call). The kernel
//! delivers a thread's own signals (its CPU timer's `SIGPROF`) before the process's
//! (`kill`, `alarm`), and decides whether an interrupted call restarts by the flags of the
//! first handler it sets up alone. So when the program's `SIGALRM` wakes a thread blocked
//! in `read` just as its CPU timer expires, the `SIGPROF` frame is set up first, with the
//! `read` to be restarted; the program's handler runs on top of it, or while our handler
//! runs; and the `read` then restarts (CPython's `test_io` hung so).
//!
//! The cure: the program's handlers without `SA_RESTART` are installed behind a trampoline
//! (`install`, from the interposed `sigaction`) that counts, per thread, that one ran —
//! and notes whether it ran right at the entry of a handler of pyigprof's. A handler of
//! pyigprof's takes the count when it starts ([`entered`]) and, when one ran meanwhile and
//! it interrupted a system call the kernel is about to restart, makes the call return
//! `EINTR` instead ([`keep`]), as it would have without pyigprof. The program sees its own
//! handler and flags in every `sigaction` query.

use crate::signals::{real_sigaction, restarting_guard, MAX_SIGNAL};
use libc::{c_int, sigaction as SigAction};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};

/// A program's handler run behind [`trampoline`].
struct Wrapped {
    /// The program's handler (`sa_sigaction`), 0 when the signal's handler is not wrapped.
    handler: AtomicUsize,
    /// The program's `sa_flags` for it.
    flags: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const UNWRAPPED: Wrapped = Wrapped {
    handler: AtomicUsize::new(0),
    flags: AtomicUsize::new(0),
};
static WRAPPED: [Wrapped; MAX_SIGNAL + 1] = [UNWRAPPED; MAX_SIGNAL + 1];

/// The process whose memory [`WRAPPED`] is: set by the first wrap and in every `fork` child
/// (`pthread_atfork`). A process that differs shares it without owning it — a `vfork`
/// child, as `_posixsubprocess` makes (CPython 3.13+), which resets every handler before
/// its `exec`: it must not clear the parent's records, or the parent's handlers would no
/// longer run (multiprocessing's spawn tests lost their signals).
static TABLE_PID: AtomicI32 = AtomicI32::new(0);

/// Registers the `fork` child handler that makes the child own its copy of the records.
/// Called once, from the constructor (`pthread_atfork` allocates).
pub(crate) fn track_forks() {
    extern "C" fn child() {
        // SAFETY: getpid has no preconditions.
        TABLE_PID.store(unsafe { libc::getpid() }, Ordering::Release);
    }
    // SAFETY: registering a handler that only stores the child's pid.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
}

/// Whether the calling process may write the records: it owns them (or nobody does yet).
fn owns_records() -> bool {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    match TABLE_PID.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => true,
        Err(owner) => owner == pid,
    }
}

/// Most threads that keep a count of their own ([`ThreadCounts`]) at once.
const COUNTED_THREADS: usize = 4096;

/// Each thread's count of the program's handlers without `SA_RESTART` that ran on it
/// (wraps), and whether one ran right at the entry of a handler of pyigprof's with
/// `SA_RESTART`, on top of its frame (both signals delivered at once), before that handler
/// could take the count.
///
/// Not `thread_local!`: in a library loaded with `dlopen` (`pyigprof attach`) the first
/// access to a thread-local variable from a thread that existed before allocates the
/// thread's block with `malloc` (`__tls_get_addr`), and a signal handler that does it in a
/// thread interrupted inside `malloc` deadlocks on the arena's lock (seen: a connection
/// thread of a server stopped for good). The counts live in a table keyed by
/// `pthread_self()` (the thread pointer, read without a system call), claimed with one
/// compare-and-swap by a thread's first count; a thread reusing an ended thread's
/// `pthread_t` takes its entry over (counts are only compared with themselves).
struct ThreadCounts {
    owners: [AtomicUsize; COUNTED_THREADS],
    ran: [AtomicU32; COUNTED_THREADS],
    at_entry: [AtomicBool; COUNTED_THREADS],
}

#[allow(clippy::declare_interior_mutable_const)]
const NO_OWNER: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const NONE_RAN: AtomicU32 = AtomicU32::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const NOT_AT_ENTRY: AtomicBool = AtomicBool::new(false);
static COUNTS: ThreadCounts = ThreadCounts {
    owners: [NO_OWNER; COUNTED_THREADS],
    ran: [NONE_RAN; COUNTED_THREADS],
    at_entry: [NOT_AT_ENTRY; COUNTED_THREADS],
};

/// The index of the calling thread's entry in [`COUNTS`]; with `claim`, a free entry is
/// taken when it has none. `None` when it has none (or, claiming, when 64 probes found
/// none free: its handlers are then not counted). Async-signal-safe.
fn counts_entry(claim: bool) -> Option<usize> {
    // SAFETY: pthread_self reads the thread pointer.
    let me = unsafe { libc::pthread_self() } as usize;
    let start = ((me as u64 >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize;
    for probe in 0..64 {
        let at = (start + probe) % COUNTED_THREADS;
        let owner = COUNTS.owners[at].load(Ordering::Acquire);
        if owner == me {
            return Some(at);
        }
        if owner == 0 {
            if !claim {
                return None;
            }
            match COUNTS.owners[at].compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(at),
                Err(now) if now == me => return Some(at),
                Err(_) => continue,
            }
        }
    }
    None
}

/// The calling thread's count of the program's handlers without `SA_RESTART`.
fn ran_count() -> u32 {
    counts_entry(false).map_or(0, |at| COUNTS.ran[at].load(Ordering::Relaxed))
}

/// Installs the program's action `act` for `signal` (unguarded, or taken over from a
/// guard), a handler without `SA_RESTART` behind [`trampoline`], and returns in `old` the
/// previous action as the program set it. As `sigaction(2)`.
///
/// # Safety
/// As `sigaction(2)`.
pub(crate) unsafe fn install(signal: c_int, act: *const SigAction, old: *mut SigAction) -> c_int {
    let Some(slot) = usize::try_from(signal).ok().and_then(|s| WRAPPED.get(s)) else {
        // SAFETY: forwarded unchanged (the C library reports the invalid signal).
        return unsafe { real_sigaction(signal, act, old) };
    };
    let before = (
        slot.handler.load(Ordering::Acquire),
        slot.flags.load(Ordering::Relaxed),
    );
    // SAFETY: the caller's pointers, as sigaction(2) requires; initialised structures.
    unsafe {
        let mut previous: SigAction = std::mem::zeroed();
        let rc = match act.as_ref() {
            // A vfork child: the kernel's action only (its exec resets it anyway). Asked
            // only of a change: CPython's start queries every signal's action (64 calls),
            // and each `getpid` is a system call.
            Some(_) if !owns_records() => real_sigaction(signal, act, &mut previous),
            Some(new) if wraps(signal, new) => {
                // Recorded first: a signal arriving as soon as the trampoline is in place
                // finds the handler to run.
                slot.flags.store(new.sa_flags as usize, Ordering::Relaxed);
                slot.handler.store(new.sa_sigaction, Ordering::Release);
                let mut ours = *new;
                ours.sa_sigaction = trampoline as *const () as usize;
                ours.sa_flags |= libc::SA_SIGINFO;
                let rc = real_sigaction(signal, &ours, &mut previous);
                if rc != 0 {
                    slot.flags.store(before.1, Ordering::Relaxed);
                    slot.handler.store(before.0, Ordering::Release);
                }
                rc
            }
            Some(_) => {
                let rc = real_sigaction(signal, act, &mut previous);
                if rc == 0 {
                    slot.handler.store(0, Ordering::Release);
                }
                rc
            }
            None => real_sigaction(signal, act, &mut previous),
        };
        if rc != 0 {
            return rc;
        }
        if previous.sa_sigaction == trampoline as *const () as usize {
            // The kernel's flags (with the C library's SA_RESTORER), SA_SIGINFO as the
            // program asked.
            previous.sa_sigaction = before.0;
            previous.sa_flags =
                (previous.sa_flags & !libc::SA_SIGINFO) | (before.1 as c_int & libc::SA_SIGINFO);
        }
        if let Some(old) = old.as_mut() {
            *old = previous;
        }
        0
    }
}

/// Whether the program's action `new` for `signal` is run behind [`trampoline`]: a handler
/// (not the default action, not "ignore") without `SA_RESTART`, in a process where a
/// handler of pyigprof's with `SA_RESTART` samples (others are left alone).
fn wraps(signal: c_int, new: &SigAction) -> bool {
    restarting_guard(|_| true)
        && new.sa_sigaction != libc::SIG_DFL
        && new.sa_sigaction != libc::SIG_IGN
        && new.sa_flags & libc::SA_RESTART == 0
        && signal != libc::SIGKILL
        && signal != libc::SIGSTOP
}

/// The kernel's handler of a signal whose program handler has no `SA_RESTART`: counts it
/// for this thread, then runs the program's handler as the kernel would have (with `info`
/// and `uc` when it asked for `SA_SIGINFO`). Async-signal-safe; `errno` is left to the
/// program's handler.
extern "C" fn trampoline(signal: c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    let entry = counts_entry(true);
    if let Some(at) = entry {
        COUNTS.ran[at].fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: the kernel's ucontext.
    let interrupted =
        unsafe { (*uc.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_RIP as usize] };
    if restarting_guard(|ours| ours == interrupted as usize) {
        if let Some(at) = entry {
            COUNTS.at_entry[at].store(true, Ordering::Relaxed);
        }
    }
    let Some(slot) = usize::try_from(signal).ok().and_then(|s| WRAPPED.get(s)) else {
        return;
    };
    let handler = slot.handler.load(Ordering::Acquire);
    let flags = slot.flags.load(Ordering::Relaxed) as c_int;
    if flags & libc::SA_RESETHAND != 0 {
        // The kernel has set the default action back: so does the record.
        slot.handler.store(0, Ordering::Release);
    }
    if handler == 0 || handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        return;
    }
    // SAFETY: the program installed `handler` for this signal with these flags.
    unsafe {
        if flags & libc::SA_SIGINFO != 0 {
            type Action = extern "C" fn(c_int, *mut libc::siginfo_t, *mut libc::c_void);
            std::mem::transmute::<usize, Action>(handler)(signal, info, uc);
        } else {
            type Handler = extern "C" fn(c_int);
            std::mem::transmute::<usize, Handler>(handler)(signal);
        }
    }
}

/// What a handler of pyigprof's found when it started: see [`entered`].
#[derive(Clone, Copy, Debug)]
pub struct Entered {
    ran: u32,
    at_entry: bool,
}

/// Called first thing by a handler of pyigprof's that has `SA_RESTART`: the thread's
/// count of the program's handlers without `SA_RESTART`, and whether one ran on top of
/// this handler's frame before it started. Async-signal-safe.
pub fn entered() -> Entered {
    match counts_entry(false) {
        Some(at) => Entered {
            ran: COUNTS.ran[at].load(Ordering::Relaxed),
            at_entry: COUNTS.at_entry[at].swap(false, Ordering::Relaxed),
        },
        None => Entered {
            ran: 0,
            at_entry: false,
        },
    }
}

/// `clone`, `fork`, `vfork`, `clone3`: the kernel restarts them whatever the handler's
/// flags (`-ERESTARTNOINTR`), so an interruption never makes them return `EINTR`.
const ALWAYS_RESTARTED: [i64; 4] = [56, 57, 58, 435];

/// Called last thing by a handler of pyigprof's that has `SA_RESTART`, with what
/// [`entered`] returned: when it interrupted a system call that the kernel is about to
/// restart, and one of the program's handlers without `SA_RESTART` ran since (on top of
/// it, or while it ran), the call returns `EINTR` instead, as it would have without
/// pyigprof. Returns whether it did.
///
/// A restart is recognised from the registers the kernel set (x86-64): the instruction
/// pointer back on the 2-byte `syscall` instruction, and `RCX`, which `syscall` loaded
/// with the address after itself, equal to it plus 2. Async-signal-safe.
///
/// # Safety
/// `uc` must be the `ucontext_t` the kernel passed to the handler.
pub unsafe fn keep(entered: Entered, uc: *mut libc::ucontext_t) -> bool {
    let ran = entered.at_entry || ran_count() != entered.ran;
    if !ran {
        return false;
    }
    // SAFETY: per the contract.
    let gregs = unsafe { &mut (*uc).uc_mcontext.gregs };
    let ip = gregs[libc::REG_RIP as usize];
    let restarting = gregs[libc::REG_RCX as usize] == ip.wrapping_add(2)
        && !ALWAYS_RESTARTED.contains(&gregs[libc::REG_RAX as usize]);
    if restarting {
        gregs[libc::REG_RAX as usize] = -(libc::EINTR as i64);
        gregs[libc::REG_RIP as usize] = ip.wrapping_add(2);
    }
    restarting
}
