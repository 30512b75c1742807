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
