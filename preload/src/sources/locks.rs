//! The lock profiler (`PYIGPROF_PROFILE=lock`): the time threads spend waiting to acquire
//! a lock, `LOCK_WAIT`, and holding one, `LOCK_HOLD`, on the mixed call stack of the wait
//! (of the release), each lock named by where it was made. The calls are timed by the
//! hooks of [`crate::sources::lock_calls`]; this module counts, samples and names.
//!
//! Python's locks are POSIX semaphores on 3.7–3.13.0 (`threading.Lock`, `RLock`, and
//! `Condition`, `Semaphore`, `Event`, `queue.Queue`, `Thread.join` built on them), made by
//! `sem_init`, taken by `sem_trywait` when free (no wait) and by `sem_wait` or
//! `sem_clockwait` with the GIL released when another thread holds them, released by
//! `sem_post`. 3.13.1 made `threading.Lock` a `PyMutex` (CPython gh-117721), 3.14 `RLock`
//! too: taken and released without a call, a contended waiter parking on a semaphore made
//! for the wait. Measured with a counting preload on pyenv's 3.7, 3.12, 3.13.0, Debian's
//! static 3.11 and sid's 3.15: 100,000 uncontended `with lock:` made 100,000 `sem_trywait`
//! and `sem_post` (3.7–3.13.0) or none (trixie's 3.13.5, 3.15), and two threads contending
//! 5–82 `sem_wait` calls. So on 3.13.1+ the lock objects' own functions are wrapped
//! ([`crate::sources::lock_objects`]): holds start and end there, names are given when
//! the object is made, and waits are counted where a waiter parks, by the `PyMutex` it
//! parks for ([`parked_for`]).
//!
//! The GIL waits on a condition variable and its mutex, passed through: it is not a lock
//! here (wall mode's `<waiting: GIL>` has it). Native code's `pthread_mutex_*` and
//! `pthread_rwlock_*` are timed the same way (tried first; a wait when the `try` fails).
//!
//! Sampling is Poisson sampling of nanoseconds, as the memory profiler samples bytes
//! ([`crate::sources::allocations`]), for each counter apart: each thread counts down the
//! nanoseconds it waits (holds) from a threshold drawn from an exponential distribution
//! with mean `R` (`PYIGPROF_LOCK_RATE`); the wait that crosses it is sampled, so a wait of
//! `w` ns is sampled with probability `p = 1 - exp(-w/R)` and stands for `w/p` ns:
//! unbiased, whatever the lengths. A sampled wait (hold) captures the thread's mixed call
//! stack (`Sampler::record_lock`) into a trace tree of its own per thread and counter,
//! whose nodes count the waits sampled and their time in ticks of [`TICK_NS`]; every
//! one's time is also summed exactly ([`Tally::ns`]). A wait's capture comes after the
//! lock is taken (only then is its length known): it lengthens that critical section by
//! the capture (microseconds, once per `R` of waiting on average). A hold is recorded at
//! its release, on the release's call stack (for `with lock:`, the function that
//! acquired; Go's mutex profile does the same), and only when the thread that acquired
//! releases: a semaphore posted by another thread (a `Condition`'s waiter, notified)
//! ends no hold.
//!
//! Names: a Python lock's semaphore is named when `sem_init` makes it (3.13.1+'s lock
//! object when its type makes it, [`object_made`]), from the creating thread's Python
//! frames ([`crate::capture::python::creation`]), and the name is kept by address
//! ([`LockNames`]) until `sem_destroy` (the object's deallocation). A native lock is
//! named by its address when it lies in a loaded object's data (a `static
//! pthread_mutex_t`), else by the caller that first waited for it or released it.

use crate::capture::frames::{decode, is_python, lock_key, Frame, Lock};
use crate::capture::python::creation::{is_synchronization, lock_creation, Role};
use crate::capture::unwind::registers_here;
use crate::record::lock_names::LockNames;
use crate::sources::random::LocalRandom;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Default mean nanoseconds of waiting (of holding) between samples
/// (`PYIGPROF_LOCK_RATE`): 1 ms, as the CPU profiler's 1 kHz samples one millisecond of
/// CPU time in each.
pub const DEFAULT_RATE_NS: u64 = 1_000_000;

/// The lock counters' tick, ns: a microsecond, whatever the CPU profiler's period (waits
/// and holds are often shorter than its 4 ms, and a sample's time rounded at random to
/// whole periods would add that much noise). Written as `#pyigprof locks tick_ns`.
pub const TICK_NS: u64 = 1_000;

/// Whether waits and holds are sampled.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// The lock profiler's two measures, each a counter of the profile
/// ([`crate::output::dump::LOCK_COUNTERS`]) and a trace tree per thread
/// ([`crate::record::threads::Slot::lock_roots`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// `LOCK_WAIT`: from the call that acquires to the acquisition, recorded on the call
    /// stack of that call.
    Wait = 0,
    /// `LOCK_HOLD`: from the acquisition to the release, by the same thread, recorded on
    /// the call stack of the release (for `with lock:`, the same Python function's).
    Hold = 1,
}

/// What the lock profiler did for one [`Counter`], for the profile's statistics.
pub struct Tally {
    /// Waits (holds) timed, all threads.
    pub count: AtomicU64,
    /// Their total time, ns, exact.
    pub ns: AtomicU64,
    /// Those sampled (their call stacks recorded).
    pub sampled: AtomicU64,
    /// Those sampled whose call stack could not be recorded (counted nowhere).
    pub unrecorded: AtomicU64,
}

/// What the lock profiler did (`#pyigprof locks`).
pub struct Activity {
    /// Mean nanoseconds of waiting (holding) between samples; 0 while nothing is sampled.
    pub rate_ns: AtomicU64,
    /// Per [`Counter`].
    pub tallies: [Tally; 2],
}

/// The lock profiler's [`Activity`].
pub static ACTIVITY: Activity = Activity {
    rate_ns: AtomicU64::new(0),
    tallies: [Tally::zero(), Tally::zero()],
};

impl Tally {
    const fn zero() -> Tally {
        Tally {
            count: AtomicU64::new(0),
            ns: AtomicU64::new(0),
            sampled: AtomicU64::new(0),
            unrecorded: AtomicU64::new(0),
        }
    }

    fn counters(&self) -> [&AtomicU64; 4] {
        [&self.count, &self.ns, &self.sampled, &self.unrecorded]
    }
}

/// Which lock an address is: its frame key, and whether its holds are not counted (bit 63,
/// which no lock key uses: a thread's `join` lock, held by the thread for its whole life).
struct Tables {
    /// A semaphore's or mutex's address → its name.
    locks: LockNames,
    /// A Python object's address (an `Event`, a `Queue`, a `Thread` …) → the name of the
    /// locks made by its methods (its `__init__`'s creation site).
    owners: LockNames,
}

/// Set in a [`Tables::locks`] value: holds of this lock are not counted.
const NOT_HELD: u64 = 1 << 63;

static TABLES: OnceLock<Tables> = OnceLock::new();

/// The address of the interpreter's `PyThread_allocate_lock`: a semaphore made by code of
/// the object that holds it (libpython, or the executable of a static build, whose
/// link-time optimization inlines the allocator into its callers) is a Python lock (0 when
/// not found: no Python lock is named).
static RUNTIME: AtomicU64 = AtomicU64::new(0);

/// The address of the interpreter's `PyThread_allocate_lock` that [`enable`] found (0 when
/// not found, or before it ran).
pub fn lock_allocator() -> u64 {
    RUNTIME.load(Ordering::Relaxed)
}

/// Starts sampling waits and holds, every `rate_ns` ns of each on average (1: every one).
/// Maps the lock names' tables (64 Ki entries each) and finds the interpreter's lock
/// allocator. False, and nothing sampled, when the tables cannot be mapped. Not from a
/// signal handler.
pub fn enable(rate_ns: u64) -> bool {
    if TABLES.get().is_none() {
        let (Some(locks), Some(owners)) = (LockNames::new(16 * 1024), LockNames::new(16 * 1024))
        else {
            return false;
        };
        let _ = TABLES.set(Tables { locks, owners });
    }
    RUNTIME.store(
        pyigprof_hooks::cpython::symbol(c"PyThread_allocate_lock") as u64,
        Ordering::Relaxed,
    );
    calibrate_hold_clock();
    ACTIVITY.rate_ns.store(rate_ns.max(1), Ordering::Relaxed);
    ENABLED.store(true, Ordering::Release);
    true
}

/// Stops sampling (a fork child that is not profiled). Async-signal-safe.
pub fn disable() {
    ENABLED.store(false, Ordering::Release);
}

/// Whether waits and holds are sampled.
#[inline(always)]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Adds the calling thread's counts not yet added to the process's: at its exit (its
/// exit key's destructor), and in the thread writing the profile, before it reads them.
/// Other threads' counts since their last recorded wait or hold (less than `R` of their
/// time on average, or 4,096) are not yet in a profile written while they run.
pub fn flush_thread_tallies() {
    let _ = THREAD.try_with(|t| t.guarded(|t| (0..2).for_each(|c| t.flush(c))));
}

/// Forgets what was counted before a fork (in the child, whose trees are forgotten; the
/// lock names stay: the child has the same locks).
pub fn reset_after_fork() {
    for tally in &ACTIVITY.tallies {
        for counter in tally.counters() {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

/// The statistics line `#pyigprof locks tick_ns=<the counters' tick> rate_ns=<R> waits=<n> waited_ns=<exact total>
/// sampled=<n> unrecorded=<n> holds=<n> held_ns=<exact total> holds_sampled=<n>
/// holds_unrecorded=<n>` (docs/dump-format.md).
pub fn statistics_line() -> String {
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let [w, h] = &ACTIVITY.tallies;
    format!(
        "#pyigprof locks tick_ns={TICK_NS} rate_ns={} waits={} waited_ns={} sampled={} unrecorded={} holds={} held_ns={} holds_sampled={} holds_unrecorded={}",
        load(&ACTIVITY.rate_ns),
        load(&w.count),
        load(&w.ns),
        load(&w.sampled),
        load(&w.unrecorded),
        load(&h.count),
        load(&h.ns),
        load(&h.sampled),
        load(&h.unrecorded),
    )
}

/// Locks a thread holds at most in its table of acquisitions; an acquisition beyond
/// replaces the oldest (whose hold is then not counted).
const HELD: usize = 8;

/// A thread's sampling state. All-zero (the initial value) is "not started".
struct PerThread {
    /// Per [`Counter`]: nanoseconds before the next sample (≤ 0: the wait or hold that made
    /// it so is sampled); `started` says whether a threshold was drawn.
    left: [Cell<i64>; 2],
    started: [Cell<bool>; 2],
    /// Its random draws.
    random: LocalRandom,
    /// The profiler is at work in this thread (recording, or keeping its tables): a call
    /// it makes, or one from a signal handler that interrupted it, is passed through.
    inside: Cell<bool>,
    /// The locks it holds: address, when acquired (ns), acquisitions (a recursive mutex's
    /// depth); `held` are used, oldest first.
    addresses: [Cell<u64>; HELD],
    since: [Cell<u64>; HELD],
    depth: [Cell<u32>; HELD],
    held: Cell<usize>,
    /// The recursive lock a `Condition`'s wait released whatever its depth, and that
    /// depth ([`released_whole`]).
    saved: Cell<(u64, u32)>,
    /// The lock it last released, whether its holds are not counted ([`not_held`]), and
    /// [`NOT_HELD_CHANGES`] then.
    last_released: Cell<(u64, bool, u64)>,
    /// Per [`Counter`]: waits (holds) and their ns not yet added to [`ACTIVITY`].
    pending: [Cell<u64>; 2],
    pending_ns: [Cell<u64>; 2],
}

thread_local! {
    static THREAD: PerThread = const {
        PerThread {
            left: [const { Cell::new(0) }; 2],
            started: [const { Cell::new(false) }; 2],
            random: LocalRandom::new(),
            inside: Cell::new(false),
            addresses: [const { Cell::new(0) }; HELD],
            since: [const { Cell::new(0) }; HELD],
            depth: [const { Cell::new(0) }; HELD],
            held: Cell::new(0),
            saved: Cell::new((0, 0)),
            last_released: Cell::new((0, false, 0)),
            pending: [const { Cell::new(0) }; 2],
            pending_ns: [const { Cell::new(0) }; 2],
        }
    };
}

impl PerThread {
    /// A threshold drawn from the exponential distribution with mean `rate` ns.
    fn draw(&self, rate: u64) -> i64 {
        (self.random.exponential(rate as f64) as i64).max(1)
    }

    /// Adds the thread's counts for counter `c` to the process's.
    fn flush(&self, c: usize) {
        let tally = &ACTIVITY.tallies[c];
        tally
            .count
            .fetch_add(self.pending[c].replace(0), Ordering::Relaxed);
        tally
            .ns
            .fetch_add(self.pending_ns[c].replace(0), Ordering::Relaxed);
    }

    /// Runs `f` unless the profiler is already at work in this thread.
    #[inline(always)]
    fn guarded(&self, f: impl FnOnce(&PerThread)) {
        if !self.inside.replace(true) {
            f(self);
            self.inside.set(false);
        }
    }

    fn find(&self, address: u64) -> Option<usize> {
        (0..self.held.get())
            .rev()
            .find(|&i| self.addresses[i].get() == address)
    }

    fn remove(&self, i: usize) {
        let n = self.held.get();
        for j in i + 1..n {
            self.addresses[j - 1].set(self.addresses[j].get());
            self.since[j - 1].set(self.since[j].get());
            self.depth[j - 1].set(self.depth[j].get());
        }
        self.held.set(n - 1);
    }
}

/// `CLOCK_MONOTONIC` now, ns (the vDSO's: no system call).
#[inline(always)]
pub fn now_ns() -> u64 {
    crate::sources::timer::clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

/// Nanoseconds per TSC tick in fixed point (times 2^32), when holds are timed with the
/// TSC; 0 when they are timed with `CLOCK_MONOTONIC`. A hold is two readings on every uncontended
/// `with lock:` (3.7–3.13.0) and `pthread_mutex_lock`/`unlock`: `rdtsc` costs about a
/// third of the vDSO's `clock_gettime` (which reads the TSC too, then converts), so it is
/// used where the kernel's clock source is the TSC (`constant_tsc`, synchronized across
/// CPUs: a hold may end on another CPU than it began).
static NS_PER_TICK: AtomicU64 = AtomicU64::new(0);
/// The TSC and `CLOCK_MONOTONIC` when the lock profiler started: the ratio is refined
/// from them at each recorded hold.
static TSC_BASE: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// The time-stamp counter.
#[inline(always)]
fn tsc() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86-64.
    unsafe { std::arch::x86_64::_rdtsc() }
}

/// Chooses how holds are timed, and measures the TSC's rate over 200 µs when it is used.
fn calibrate_hold_clock() {
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    if source.trim() != "tsc" {
        return;
    }
    let (t0, n0) = (tsc(), now_ns());
    let (mut t1, mut n1) = (t0, n0);
    while n1.saturating_sub(n0) < 200_000 {
        (t1, n1) = (tsc(), now_ns());
    }
    if t1 > t0 {
        TSC_BASE[0].store(t0, Ordering::Relaxed);
        TSC_BASE[1].store(n0, Ordering::Relaxed);
        NS_PER_TICK.store(fixed_point(n1 - n0, t1 - t0), Ordering::Relaxed);
    }
}

/// `ns / ticks` times 2^32 (at least 1).
fn fixed_point(ns: u64, ticks: u64) -> u64 {
    (((ns as u128) << 32) / ticks.max(1) as u128).clamp(1, u64::MAX as u128) as u64
}

/// Now, in the hold clock's units (TSC ticks, or ns).
#[inline(always)]
fn hold_clock() -> u64 {
    if NS_PER_TICK.load(Ordering::Relaxed) != 0 {
        tsc()
    } else {
        now_ns()
    }
}

/// `units` of the hold clock in ns.
#[inline(always)]
fn hold_ns(units: u64) -> u64 {
    match NS_PER_TICK.load(Ordering::Relaxed) {
        0 => units,
        rate => ((units as u128 * rate as u128) >> 32) as u64,
    }
}

/// Refines the TSC's rate from the lock profiler's start to now (at each recorded hold:
/// microseconds apart at least).
fn refine_hold_clock() {
    if NS_PER_TICK.load(Ordering::Relaxed) == 0 {
        return;
    }
    let (t, n) = (tsc(), now_ns());
    let (t0, n0) = (
        TSC_BASE[0].load(Ordering::Relaxed),
        TSC_BASE[1].load(Ordering::Relaxed),
    );
    if t > t0 && n > n0 + 10_000_000 {
        NS_PER_TICK.store(fixed_point(n - n0, t - t0), Ordering::Relaxed);
    }
}

/// What a wait (hold) of `waited` ns stands for when sampled at a mean of `rate` ns:
/// `waited / p` ns with `p = 1 - exp(-waited/rate)` (every one when `rate` is 1).
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

/// How a semaphore or mutex was acquired, for [`acquired`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A semaphore: an acquisition while the thread's table has it means another thread
    /// released it meanwhile (a `Condition`'s waiter): the hold starts again.
    Semaphore,
    /// A mutex or read-write lock, which may be recursive: acquisitions nest.
    Mutex,
}

/// Counts a wait of `ns` ns for the lock at `address` that the calling thread has just
/// ended in the C library's `entry` (the function the program called: where the recorded
/// stack ends, above the lock's frame). Keeps `errno`.
#[inline(never)]
pub fn waited(ns: u64, entry: usize, address: u64) {
    let _ = THREAD.try_with(|t| t.guarded(|t| count(t, Counter::Wait, ns, entry, address)));
}

/// Notes that the calling thread has acquired the lock at `address`: its hold starts.
#[inline(always)]
pub fn acquired(address: u64, kind: Kind) {
    let _ = THREAD.try_with(|t| {
        t.guarded(|t| {
            if let Some(i) = t.find(address) {
                match kind {
                    Kind::Mutex => t.depth[i].set(t.depth[i].get() + 1),
                    Kind::Semaphore => t.since[i].set(hold_clock()),
                }
                return;
            }
            if t.held.get() == HELD {
                t.remove(0);
            }
            let i = t.held.get();
            t.addresses[i].set(address);
            t.since[i].set(hold_clock());
            t.depth[i].set(1);
            t.held.set(i + 1);
        })
    });
}

/// Notes that the calling thread releases the lock at `address` in the C library's
/// `entry`: a hold it began ends and is counted. A release of a lock the thread did not
/// acquire (another thread's, a semaphore posted as a signal) counts nothing. Keeps
/// `errno`.
#[inline(never)]
pub fn released(address: u64, entry: usize) {
    let _ = THREAD.try_with(|t| {
        t.guarded(|t| {
            let Some(i) = t.find(address) else {
                return;
            };
            let depth = t.depth[i].get();
            if depth > 1 {
                t.depth[i].set(depth - 1);
                return;
            }
            let ns = hold_ns(hold_clock().saturating_sub(t.since[i].get()));
            t.remove(i);
            if !not_held(t, address) {
                count(t, Counter::Hold, ns, entry, address);
            }
        })
    });
}

/// Bumped when a lock's [`NOT_HELD`] mark is set or cleared: the threads' [`not_held`]
/// answers kept before are stale.
static NOT_HELD_CHANGES: AtomicU64 = AtomicU64::new(0);

/// Sets the name of the lock at `address` (`None`: forgets it), telling the threads' kept
/// [`not_held`] answers when its mark changes.
fn set_name(tables: &Tables, address: u64, key: Option<u64>) {
    let old = tables.locks.get(address);
    match key {
        Some(key) => {
            tables.locks.insert(address, key);
        }
        None => tables.locks.remove(address),
    }
    if (old.unwrap_or(0) | key.unwrap_or(0)) & NOT_HELD != 0 {
        NOT_HELD_CHANGES.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether holds of the lock at `address` are not counted ([`NOT_HELD`]), asked of the
/// names' table once for a run of releases of the same lock by the thread (a loop's
/// `with lock:`).
#[inline(always)]
fn not_held(t: &PerThread, address: u64) -> bool {
    let changes = NOT_HELD_CHANGES.load(Ordering::Relaxed);
    let (last, flag, seen) = t.last_released.get();
    if last == address && seen == changes {
        return flag;
    }
    let flag = TABLES
        .get()
        .and_then(|tables| tables.locks.get(address))
        .is_some_and(|key| key & NOT_HELD != 0);
    t.last_released.set((address, flag, changes));
    flag
}

/// Notes that the calling thread releases the recursive lock at `address` whatever its
/// depth (`RLock._release_save`, a `Condition`'s wait): its hold ends and is counted, and
/// the depth is kept for [`reacquired`].
pub fn released_whole(address: u64, entry: usize) {
    let _ = THREAD.try_with(|t| {
        if let Some(i) = t.find(address) {
            t.saved.set((address, t.depth[i].get()));
            t.depth[i].set(1);
        }
    });
    released(address, entry);
}

/// Notes that the calling thread has taken the recursive lock at `address` back at the
/// depth [`released_whole`] kept (`RLock._acquire_restore`): a hold starts.
pub fn reacquired(address: u64) {
    acquired(address, Kind::Mutex);
    let _ = THREAD.try_with(|t| {
        let (saved, depth) = t.saved.replace((0, 0));
        if let (true, Some(i)) = (saved == address, t.find(address)) {
            t.depth[i].set(depth.max(1));
        }
    });
}

/// Notes that the lock at `address` is destroyed (`sem_destroy`, `pthread_mutex_destroy`):
/// its memory may hold another lock next.
pub fn destroyed(address: u64) {
    let _ = THREAD.try_with(|t| {
        t.guarded(|t| {
            if let Some(i) = t.find(address) {
                t.remove(i);
            }
            if let Some(tables) = TABLES.get() {
                set_name(tables, address, None);
            }
        })
    });
}

/// Counts `ns` for `counter` and records the call stack when it crosses the thread's
/// threshold (the profiler's guard held).
#[inline(always)]
fn count(t: &PerThread, counter: Counter, ns: u64, entry: usize, address: u64) {
    let c = counter as usize;
    // The exact totals: kept in the thread, added to the process's at each recorded one
    // (and every 4,096), so that an uncontended hold makes no atomic read-modify-write.
    t.pending[c].set(t.pending[c].get() + 1);
    t.pending_ns[c].set(t.pending_ns[c].get() + ns);
    if t.pending[c].get() >= 4096 {
        t.flush(c);
    }
    let rate = ACTIVITY.rate_ns.load(Ordering::Relaxed);
    if !t.started[c].get() {
        t.left[c].set(t.draw(rate));
        t.started[c].set(true);
    }
    let left = t.left[c]
        .get()
        .saturating_sub(ns.min(i64::MAX as u64) as i64);
    if left > 0 && rate > 1 {
        t.left[c].set(left);
        return;
    }
    record(t, counter, ns, rate, entry, address);
}

/// Records the wait (hold) of `ns` that crossed the thread's threshold for `counter`, at
/// the C library's `entry` on the lock at `address`, sampled at the mean `rate`; draws the
/// next threshold. Keeps `errno`.
#[cold]
#[inline(never)]
fn record(t: &PerThread, counter: Counter, ns: u64, rate: u64, entry: usize, address: u64) {
    let c = counter as usize;
    let tally = &ACTIVITY.tallies[c];
    // Crossed: sampled, and the next threshold is again exponential (memoryless).
    t.left[c].set(t.draw(rate));
    t.flush(c);
    if counter == Counter::Hold {
        refine_hold_clock();
    }
    // SAFETY: __errno_location is the calling thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    let weight = weight_ns(ns, rate);
    // Taken here, only for a recorded one: the profiler's frames (this function's and its
    // callers' in this library) are left out of the recorded stack.
    let regs = registers_here();
    let recorded = crate::sampler::get().is_some_and(|sampler| {
        sampler.record_lock(
            counter,
            regs,
            entry as u64,
            |caller, frames| name_of(sampler, address, caller, frames),
            weight,
            t.random.uniform(),
        )
    });
    if recorded {
        tally.sampled.fetch_add(1, Ordering::Relaxed);
    } else {
        tally.unrecorded.fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// The frame key that names the lock at `address`, acquired or released from `caller` (a
/// native instruction; 0 when unknown) in the call stack `frames` (keys, outermost first):
/// its name when the table has one; for a semaphore the interpreter parks a waiter on
/// (3.13+'s `PyMutex`), the name of the `PyMutex` it parks for ([`parked_for`]: a lock
/// object's, named when it was made), else that address named by its first waiter's
/// innermost Python frame outside the synchronization modules, kept for it; none for
/// another lock the interpreter made without being named (before the profiler attached
/// to it); a static native lock by its address; another native lock by the first caller
/// seen, kept for it.
fn name_of(
    sampler: &crate::sampler::Sampler,
    address: u64,
    caller: u64,
    frames: &[u64],
) -> Option<u64> {
    let tables = TABLES.get()?;
    if let Some(key) = tables.locks.get(address) {
        return Some(key & !NOT_HELD).filter(|&key| key != 0);
    }
    let snapshot = crate::capture::unwind::modules::current()?;
    let runtime = RUNTIME.load(Ordering::Relaxed);
    if sampler.python.is_some() && runtime != 0 && snapshot.same_object(caller, runtime) {
        let parked = parked_for(sampler, address)?;
        if let Some(key) = tables.locks.get(parked) {
            return Some(key & !NOT_HELD).filter(|&key| key != 0);
        }
        // The innermost Python frame outside `threading.py` and `queue.py` (a `join`'s
        // wait is named by the line that joins), else the innermost.
        let python = || {
            frames
                .iter()
                .rev()
                .filter(|&&key| is_python(key))
                .map(|&key| decode(key))
        };
        let outside = python().find(|frame| match *frame {
            Frame::Python { record, .. } => sampler
                .codes
                .get(record)
                .is_some_and(|code| !is_synchronization(code.file)),
            _ => false,
        });
        let Some(Frame::Python { record, instr }) = outside.or_else(|| python().next()) else {
            return None;
        };
        let key = lock_key(Lock::PythonWaiter { record, instr });
        tables.locks.insert(parked, key);
        return Some(key);
    }
    if snapshot.in_object(address) {
        return Some(lock_key(Lock::Static(address)));
    }
    if caller == 0 {
        return None;
    }
    let key = lock_key(Lock::FirstWaiter(caller));
    tables.locks.insert(address, key);
    Some(key)
}

/// The address a thread waiting on the semaphore at `sem` is parked for, when the
/// interpreter parks it (3.13+, `_PyParkingLot_Park`): the semaphore lies in the calling
/// thread's stack, in the parking lot's `struct wait_entry { void *park_arg; uintptr_t
/// addr; _PySemaphore sema; … }` (CPython's `Python/parking_lot.c`, 3.13–3.15), so the
/// address is the word before it — a `PyMutex`'s (`threading.Lock`'s on 3.13.1+, every
/// lock's on 3.14+) or an event's. `None` before 3.13, for a semaphore elsewhere, or a
/// word that is not an address.
fn parked_for(sampler: &crate::sampler::Sampler, sem: u64) -> Option<u64> {
    let version = sampler.python.as_ref()?.layout.version;
    let here = 0u8;
    let here = std::ptr::addr_of!(here) as u64;
    if version < (3, 13) || sem <= here || sem - here >= 1 << 20 {
        return None;
    }
    // SAFETY: the word before the semaphore is in the calling thread's own stack, below
    // its caller's frame (checked above), and readable.
    let addr = unsafe { std::ptr::read_volatile((sem - 8) as *const u64) };
    (addr > 4096 && addr < 1 << 47).then_some(addr)
}

/// Whether `address` is the GIL's (its mutex and condition variables, 3.7–3.12): not a
/// lock here.
#[inline]
pub fn is_gil(address: u64) -> bool {
    crate::sampler::get()
        .and_then(|s| s.python.as_ref())
        .is_some_and(|rt| rt.gil_words.contains(address))
}

/// Names the semaphore at `sem` that `sem_init` has just made, called from `caller`: when
/// the interpreter made it, by the creating thread's Python frames
/// ([`crate::capture::python::creation`]). A Python lock is a semaphore made by
/// `PyThread_allocate_lock` on 3.7–3.13.0 (`threading.Lock`, `RLock`); 3.13.1 made
/// `threading.Lock` a `PyMutex` (CPython gh-117721, backported), 3.14 `RLock` too, and
/// a `PyMutex` makes no semaphore: those are named when the lock object is made
/// ([`object_made`]), and their contended waits park on a semaphore made for the wait
/// (named only through its owner object, below). 3.14+: nothing is named here. Not from
/// a signal handler (`sem_init` is not async-signal-safe), but under the handler's rules
/// all the same: it runs inside the interpreter.
pub fn created(sem: u64, caller: u64) {
    let runtime = RUNTIME.load(Ordering::Relaxed);
    if runtime == 0
        || !crate::capture::unwind::modules::current()
            .is_some_and(|snapshot| snapshot.same_object(caller, runtime))
    {
        return;
    }
    let here = 0u8;
    let here = std::ptr::addr_of!(here) as u64;
    // A semaphore in a caller's frame is made for one wait.
    name_new_lock(sem, (3, 14), sem > here && sem - here < 1 << 20);
}

/// Names the `PyMutex` at `mutex` of a lock object the interpreter has just made
/// (3.13.1+'s `threading.Lock`, 3.14+'s `RLock`; [`crate::sources::lock_objects`]) by the
/// creating thread's Python frames, as [`created`] names a semaphore. With the GIL held.
pub fn object_made(mutex: u64) {
    name_new_lock(mutex, (u8::MAX, 0), false);
}

/// Names the lock at `address` made now, by the calling thread's Python frames, on
/// interpreters older than `before`; `one_wait`: a semaphore made for one wait.
fn name_new_lock(address: u64, before: (u8, u8), one_wait: bool) {
    let Some(tables) = TABLES.get() else {
        return;
    };
    let Some(sampler) = crate::sampler::get() else {
        return;
    };
    let Some(rt) = sampler
        .python
        .as_ref()
        .filter(|rt| rt.layout.version < before)
    else {
        return;
    };
    let _ = THREAD.try_with(|t| {
        t.guarded(|_| {
            let mut seen = 0;
            let tstate = rt.current_thread_state(&mut seen);
            let mut scratch = [0u8; crate::capture::python::code::MAX_TEXT];
            let creation = (tstate != 0)
                .then(|| lock_creation(tstate, &rt.layout, &rt.types, &sampler.codes, &mut scratch))
                .flatten();
            let Some(creation) = creation.filter(|c| c.site.is_some() || c.owner.is_some()) else {
                // The interpreter's own lock, made while no Python code runs (the import
                // lock, faulthandler's, at start-up): unnamed, its holds not counted
                // (faulthandler's is held from start to end).
                set_name(tables, address, Some(NOT_HELD));
                return;
            };
            let site = creation.site.map(lock_key);
            // A semaphore made for one wait: the one a thread parks on for a `PyMutex`
            // (3.13+'s `join`; 3.13.1+'s `threading.Lock`, 3.14+'s every lock), says
            // nothing of where the lock was made: named only as the object whose method
            // waits (a `Thread`'s, made when its `__init__` made a semaphore), never by
            // the line that waits.
            if one_wait {
                let key = creation
                    .owner
                    .and_then(|(owner, _)| tables.owners.get(owner));
                set_name(tables, address, key);
                return;
            }
            let key = match creation.owner {
                None => site,
                Some((owner, Role::Init)) => {
                    if let Some(site) = site {
                        tables.owners.insert(owner, site);
                    }
                    site
                }
                Some((owner, Role::Method)) => tables.owners.get(owner).or(site),
                Some((owner, Role::ThreadLock)) => {
                    tables.owners.get(owner).or(site).map(|k| k | NOT_HELD)
                }
            };
            set_name(tables, address, key);
        })
    });
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
