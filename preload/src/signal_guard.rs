//! Keeping the signal handler out of critical sections: blocking `SIGPROF` (and other
//! signals) in the calling thread, and waiting until no handler is running before memory
//! a handler reads is changed (an object's unwind data before `dlclose`, the trees before
//! they are written).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Handlers running now, in any thread.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Counts a running handler while alive (created on the handler's entry).
pub struct InFlight(());

impl InFlight {
    /// Counts the calling handler until the value is dropped. Async-signal-safe.
    pub fn enter() -> InFlight {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        InFlight(())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// In a fork child: no handler runs (only the forking thread exists, outside any
/// handler), whatever the parent's other threads, or wall mode's sampler process, were
/// doing at the fork. Without this a count copied in flight would make every
/// [`wait_for_handlers`] of the child wait its full second.
pub fn reset_after_fork() {
    IN_FLIGHT.store(0, Ordering::SeqCst);
}

/// Waits (up to about a second) until no signal handler is running. Not for use inside the
/// handler.
pub fn wait_for_handlers() {
    for _ in 0..100_000 {
        if IN_FLIGHT.load(Ordering::SeqCst) == 0 {
            return;
        }
        std::thread::yield_now();
    }
}

/// Signals the kernel raises for a fault of the calling thread's own instruction. They are
/// never blocked in a thread of pyigprof's: a fault raised while its signal is blocked is not
/// held back — the kernel resets its action to the default and the whole process dies (the
/// `pyigprof dump` crash of issue 52: a checked read of a freed thread state, from the control
/// thread, which had blocked every signal). Unblocked, `SIGSEGV`/`SIGBUS` reach the fault
/// handler, which recovers a checked read (`capture::probe`).
pub const FAULT_SIGNALS: [libc::c_int; 4] =
    [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL];

/// Blocks every signal in the calling thread but the [`FAULT_SIGNALS`], for good: for the
/// threads and fork children of pyigprof's own (the control thread of `attach`/`dump`/`top`,
/// a child writing a profile), which no signal of the program's must reach, yet whose checked
/// reads must be recoverable.
pub fn block_all_but_faults() {
    // SAFETY: plain signal-mask calls on initialised sets, for the calling thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for signal in FAULT_SIGNALS {
            libc::sigdelset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Keeps `SIGSEGV` and `SIGBUS` unblocked in the calling thread while alive, for checked
/// reads made on a thread of the program's outside a signal handler (a sampled allocation's
/// stack): a thread that blocks them would otherwise die of a fault those reads recover.
/// Costs one system call (the mask is read), two more only where they were blocked.
pub struct FaultsUnblocked {
    /// The mask to restore, when it had to be changed.
    old: Option<libc::sigset_t>,
}

impl FaultsUnblocked {
    /// Unblocks `SIGSEGV` and `SIGBUS` if the calling thread blocks them.
    #[allow(clippy::new_without_default)] // a guard that changes the thread's mask: made on purpose
    pub fn new() -> FaultsUnblocked {
        // SAFETY: plain signal-mask calls on initialised sets, for the calling thread.
        unsafe {
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut old);
            if libc::sigismember(&old, libc::SIGSEGV) != 1
                && libc::sigismember(&old, libc::SIGBUS) != 1
            {
                return FaultsUnblocked { old: None };
            }
            let mut faults: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut faults);
            libc::sigaddset(&mut faults, libc::SIGSEGV);
            libc::sigaddset(&mut faults, libc::SIGBUS);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &faults, std::ptr::null_mut());
            FaultsUnblocked { old: Some(old) }
        }
    }
}

impl Drop for FaultsUnblocked {
    fn drop(&mut self) {
        if let Some(old) = &self.old {
            // SAFETY: restoring the mask read in new().
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
        }
    }
}

/// Blocks signals in the calling thread while alive, restoring the previous mask when
/// dropped.
pub struct BlockSignals {
    old: libc::sigset_t,
}

impl BlockSignals {
    /// Blocks `signals` (added to the thread's current mask) until the guard is dropped.
    pub fn new(signals: &[libc::c_int]) -> BlockSignals {
        // SAFETY: plain signal-mask calls on initialised sets.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &signal in signals {
                libc::sigaddset(&mut set, signal);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            BlockSignals { old }
        }
    }

    /// Blocks `SIGPROF` (sampling of the calling thread) until the guard is dropped.
    pub fn sampling() -> BlockSignals {
        BlockSignals::new(&[libc::SIGPROF])
    }
}

impl Drop for BlockSignals {
    fn drop(&mut self) {
        // SAFETY: restoring the mask saved in new().
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}
