//! The lock profiler's hooks (`PYIGPROF_PROFILE=lock`): the time threads spend waiting to
//! acquire a lock, `LOCK_WAIT`, on the mixed call stack of the wait.
//!
//! Python's locks wait on POSIX semaphores: `threading.Lock` (and `RLock`, `Condition`,
//! `Semaphore`, `Event`, `queue.Queue`, which are built on it) is a `sem_t` on 3.7–3.13,
//! acquired without waiting by `sem_trywait` and, when another thread holds it, by
//! `sem_wait` or `sem_clockwait`/`sem_timedwait` with the GIL released; from 3.14 a
//! `PyMutex` whose waiters park on their thread's semaphore. Measured with a counting
//! preload on pyenv's 3.7, 3.12, 3.13, Debian's static 3.11 and sid's 3.15: 100,000
//! uncontended `with lock:` made 100,000 `sem_trywait` and `sem_post` (3.7–3.13) or no call
//! (3.15), and two threads contending made 5–82 `sem_wait` calls. The GIL waits on a
//! condition variable, not a semaphore: it is not a lock here (wall mode's `<waiting:
//! GIL>` has it). The library defines `sem_wait`, `sem_timedwait` and `sem_clockwait`,
//! which, preloaded, every caller outside the C library reaches first (the interpreter,
//! shared or linked into the executable, calls them through its PLT); each times the
//! call it forwards to the C library's.
//!
//! Sampling is Poisson sampling of nanoseconds, as the memory profiler samples bytes
//! ([`crate::sources::allocations`]): each thread counts down the nanoseconds it waits from
//! a threshold drawn from an exponential distribution with mean `R`
//! (`PYIGPROF_LOCK_RATE`); the wait that crosses it is sampled, so a wait of `w` ns is
//! sampled with probability `p = 1 - exp(-w/R)` and stands for `w/p` ns: unbiased,
//! whatever the waits' lengths. A sampled wait captures the thread's mixed call stack
//! (`Sampler::lock_site`) into a trace tree of its own per thread, whose nodes count the
//! waits sampled and their time in ticks of the profile's period; every wait's time is
//! also summed exactly ([`Activity::waited_ns`]). A wait's capture comes after the lock
//! is taken (only then is its length known): it lengthens that critical section by the
//! capture (microseconds, once per `R` of waiting on average).

use crate::capture::unwind::registers_here;
use crate::sources::random::LocalRandom;
use libc::{c_int, clockid_t, sem_t, timespec};
use pyigprof_hooks::next::Next;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Default mean nanoseconds of waiting between samples (`PYIGPROF_LOCK_RATE`): 1 ms, as
/// the CPU profiler's 1 kHz samples one millisecond of CPU time in each.
pub const DEFAULT_RATE_NS: u64 = 1_000_000;

/// Whether waits are sampled.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// What the lock profiler did, for the profile's statistics (`#pyigprof locks`).
pub struct Activity {
    /// Mean nanoseconds of waiting between samples; 0 while waits are not sampled.
    pub rate_ns: AtomicU64,
    /// Waits timed, all threads.
    pub waits: AtomicU64,
    /// Their total time, ns, exact.
    pub waited_ns: AtomicU64,
    /// Waits sampled (their call stacks recorded).
    pub sampled: AtomicU64,
    /// Sampled waits whose call stack could not be recorded (counted nowhere).
    pub unrecorded: AtomicU64,
}

/// The lock profiler's [`Activity`].
pub static ACTIVITY: Activity = Activity {
    rate_ns: AtomicU64::new(0),
    waits: AtomicU64::new(0),
    waited_ns: AtomicU64::new(0),
    sampled: AtomicU64::new(0),
    unrecorded: AtomicU64::new(0),
};

/// Starts sampling waits, every `rate_ns` ns of waiting on average (1: every wait).
pub fn enable(rate_ns: u64) {
    ACTIVITY.rate_ns.store(rate_ns.max(1), Ordering::Relaxed);
    ENABLED.store(true, Ordering::Release);
}

/// Stops sampling waits (a fork child that is not profiled). Async-signal-safe.
pub fn disable() {
    ENABLED.store(false, Ordering::Release);
}

/// Whether waits are sampled.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Forgets what was counted before a fork (in the child, whose trees are forgotten).
pub fn reset_after_fork() {
    for counter in [
        &ACTIVITY.waits,
        &ACTIVITY.waited_ns,
        &ACTIVITY.sampled,
        &ACTIVITY.unrecorded,
    ] {
        counter.store(0, Ordering::Relaxed);
    }
}

/// The statistics line `#pyigprof locks rate_ns=<R> waits=<n> waited_ns=<exact total>
/// sampled=<n> unrecorded=<n>` (docs/dump-format.md).
pub fn statistics_line() -> String {
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    format!(
        "#pyigprof locks rate_ns={} waits={} waited_ns={} sampled={} unrecorded={}",
        load(&ACTIVITY.rate_ns),
        load(&ACTIVITY.waits),
        load(&ACTIVITY.waited_ns),
        load(&ACTIVITY.sampled),
        load(&ACTIVITY.unrecorded),
    )
}

/// The C library's definitions of the functions this library defines.
static NEXT_SEM_WAIT: Next = Next::new(c"sem_wait");
static NEXT_SEM_TIMEDWAIT: Next = Next::new(c"sem_timedwait");
static NEXT_SEM_CLOCKWAIT: Next = Next::new(c"sem_clockwait");

/// A thread's sampling state. All-zero (the initial value) is "not started".
struct PerThread {
    /// Nanoseconds of waiting before the next sample (≤ 0: the wait that made it so is
    /// sampled); `started` says whether a threshold was drawn.
    left: Cell<i64>,
    started: Cell<bool>,
    /// Its random draws.
    random: LocalRandom,
    /// The profiler is recording in this thread: its own waits are not the program's.
    inside: Cell<bool>,
}

thread_local! {
    static THREAD: PerThread = const {
        PerThread {
            left: Cell::new(0),
            started: Cell::new(false),
            random: LocalRandom::new(),
            inside: Cell::new(false),
        }
    };
}

impl PerThread {
    /// A threshold drawn from the exponential distribution with mean `rate` ns.
    fn draw(&self, rate: u64) -> i64 {
        (self.random.exponential(rate as f64) as i64).max(1)
    }
}

/// `CLOCK_MONOTONIC` now, ns (the vDSO's: no system call).
#[inline(always)]
fn now_ns() -> u64 {
    crate::sources::timer::clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

/// What a wait of `waited` ns stands for when sampled at a mean of `rate` ns:
/// `waited / p` ns with `p = 1 - exp(-waited/rate)` (every wait when `rate` is 1).
pub fn weight_ns(waited: u64, rate: u64) -> u64 {
    if rate <= 1 {
        return waited;
    }
    let p = -(-(waited as f64) / rate as f64).exp_m1();
    if p <= 0.0 {
        return 0;
    }
    (waited as f64 / p).round() as u64
}

/// Counts a wait of `waited` ns that the calling thread has just ended, in the C library's
/// `entry` (the function the program called: where the recorded stack ends), and records
/// its call stack when it crosses the thread's threshold. Keeps `errno`.
#[inline(never)]
fn waited(waited: u64, entry: usize) {
    ACTIVITY.waits.fetch_add(1, Ordering::Relaxed);
    ACTIVITY.waited_ns.fetch_add(waited, Ordering::Relaxed);
    let regs = registers_here();
    let _ = THREAD.try_with(|t| {
        if t.inside.get() {
            return;
        }
        let rate = ACTIVITY.rate_ns.load(Ordering::Relaxed);
        if !t.started.get() {
            t.left.set(t.draw(rate));
            t.started.set(true);
        }
        let left = t
            .left
            .get()
            .saturating_sub(waited.min(i64::MAX as u64) as i64);
        if left > 0 && rate > 1 {
            t.left.set(left);
            return;
        }
        // Crossed: sampled, and the next threshold is again exponential (memoryless).
        t.left.set(t.draw(rate));
        t.inside.set(true);
        // SAFETY: __errno_location is the calling thread's errno.
        let errno = unsafe { *libc::__errno_location() };
        let weight = weight_ns(waited, rate);
        let recorded = crate::sampler::get().is_some_and(|sampler| {
            sampler.record_lock_wait(regs, entry as u64, weight, t.random.uniform())
        });
        if recorded {
            ACTIVITY.sampled.fetch_add(1, Ordering::Relaxed);
        } else {
            ACTIVITY.unrecorded.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        t.inside.set(false);
    });
}

/// Interposed `sem_wait(3)`: the C library's, timed when the lock profiler runs.
///
/// # Safety
/// As `sem_wait(3)`.
#[no_mangle]
pub unsafe extern "C" fn sem_wait(sem: *mut sem_t) -> c_int {
    type F = unsafe extern "C" fn(*mut sem_t) -> c_int;
    let next = NEXT_SEM_WAIT.get();
    // SAFETY: the C library's sem_wait, with this signature.
    let real: F = unsafe { std::mem::transmute::<usize, F>(next) };
    if !ENABLED.load(Ordering::Relaxed) {
        return unsafe { real(sem) };
    }
    let start = now_ns();
    let rc = unsafe { real(sem) };
    waited(now_ns().saturating_sub(start), next);
    rc
}

/// Interposed `sem_timedwait(3)`: as [`sem_wait`].
///
/// # Safety
/// As `sem_timedwait(3)`.
#[no_mangle]
pub unsafe extern "C" fn sem_timedwait(sem: *mut sem_t, abstime: *const timespec) -> c_int {
    type F = unsafe extern "C" fn(*mut sem_t, *const timespec) -> c_int;
    let next = NEXT_SEM_TIMEDWAIT.get();
    // SAFETY: the C library's sem_timedwait, with this signature.
    let real: F = unsafe { std::mem::transmute::<usize, F>(next) };
    if !ENABLED.load(Ordering::Relaxed) {
        return unsafe { real(sem, abstime) };
    }
    let start = now_ns();
    let rc = unsafe { real(sem, abstime) };
    waited(now_ns().saturating_sub(start), next);
    rc
}

/// Interposed `sem_clockwait(3)` (glibc 2.30+; CPython 3.10+ waits with it): as
/// [`sem_wait`].
///
/// # Safety
/// As `sem_clockwait(3)`.
#[no_mangle]
pub unsafe extern "C" fn sem_clockwait(
    sem: *mut sem_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    type F = unsafe extern "C" fn(*mut sem_t, clockid_t, *const timespec) -> c_int;
    let next = NEXT_SEM_CLOCKWAIT.get();
    // SAFETY: the C library's sem_clockwait, with this signature.
    let real: F = unsafe { std::mem::transmute::<usize, F>(next) };
    if !ENABLED.load(Ordering::Relaxed) {
        return unsafe { real(sem, clock, abstime) };
    }
    let start = now_ns();
    let rc = unsafe { real(sem, clock, abstime) };
    waited(now_ns().saturating_sub(start), next);
    rc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampled_wait_stands_for_its_time_over_its_probability() {
        assert_eq!(weight_ns(5_000, 1), 5_000);
        // Long against the rate: nearly always sampled, standing for itself.
        let long = weight_ns(50_000_000, 1_000_000);
        assert!((50_000_000..50_000_100).contains(&long), "{long}");
        // Short: sampled with p ≈ w/R, standing for ≈ R.
        let short = weight_ns(1_000, 1_000_000);
        assert!((1_000_000..1_001_000).contains(&short), "{short}");
        // The expectation over many waits of one length is that length.
        let (w, r) = (300_000u64, 1_000_000u64);
        let p = -(-(w as f64) / r as f64).exp_m1();
        assert!(((weight_ns(w, r) as f64) * p - w as f64).abs() < 1.0);
    }
}
