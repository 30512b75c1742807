//! Per-thread sampler state: a slot per thread, found from the signal handler by the
//! thread's `pthread_t`, holding its stack bounds, its unwinding cache, its trace tree and
//! scratch buffers, all mapped before the thread is sampled.
//!
//! A thread registers itself when it starts (through the `pthread_create` interposition)
//! or, for the main thread, in the library constructor; registration may allocate. A
//! thread the handler meets unregistered gets a slot claimed by compare-and-swap, without
//! stack bounds: its samples keep only the interrupted instruction. Slots are never freed;
//! a new thread whose `pthread_t` equals that of a finished one (glibc reuses thread
//! descriptors and their stacks) takes over its slot and adds to its tree.

use crate::mem::map_region;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

/// Most native frames unwound per sample; a deeper stack is cut (outermost frames lost)
/// and a `<truncated stack>` marker stands for the rest.
pub const MAX_NATIVE_FRAMES: usize = 1024;
/// Most Python frames read per sample.
pub const MAX_PYTHON_FRAMES: usize = 1024;
/// Most frames in one recorded call stack.
pub const MAX_STACK: usize = MAX_NATIVE_FRAMES + MAX_PYTHON_FRAMES + 1;
/// Most threads with a slot; further threads' samples are counted as dropped.
pub const MAX_THREADS: usize = 4096;

/// [`Slot::busy`]: nobody uses the slot's scratch buffers.
pub const FREE: u8 = 0;
/// [`Slot::busy`]: the thread's own signal handler is sampling it.
pub const HANDLING: u8 = 1;
/// [`Slot::busy`]: the wall-clock source captures the (blocked) thread's stack.
pub const CAPTURING: u8 = 2;
/// [`Slot::run_delay`] of a thread whose run delay has not been read yet and started
/// before sampling: its first reading is only a baseline.
pub const RUN_DELAY_UNSET: u64 = u64::MAX;

pub use crate::capture::unwind::UnwindCache;

/// One thread's state. All-zero is a free slot.
#[repr(C)]
pub struct Slot {
    /// `pthread_t` of the owner; 0 = free.
    pub owner: AtomicUsize,
    /// Root of the thread's trace tree (0 = none yet).
    pub root: AtomicU32,
    /// Roots of the thread's trees of lock waits and lock holds, in
    /// [`crate::sources::locks::Counter`] order (samples are sampled waits or holds, ticks
    /// their time; 0 = none yet).
    pub lock_roots: [AtomicU32; 2],
    /// Set once `stack` and `cache` are valid.
    pub ready: AtomicBool,
    /// `[low, high)` of the thread's stack.
    pub stack: (AtomicU64, AtomicU64),
    /// The thread's unwinding cache.
    pub cache: AtomicPtr<UnwindCache>,
    /// The thread's sampling timer (`timer_t` + 1, as kernel timer ids start at 0; 0 = none).
    pub timer: AtomicUsize,
    /// Who uses the slot's scratch buffers and trace tree now: [`FREE`], [`HANDLING`] (the
    /// thread's own handler) or [`CAPTURING`] (wall mode's source, for the thread while it
    /// is blocked).
    pub busy: AtomicU8,
    /// Ticks of the thread's samples that found the slot [`CAPTURING`] (its timer fired as
    /// it woke up), counted by its next sample.
    pub pending: AtomicU64,
    /// Wall mode: periods in which the wall-clock source found the thread not blocked in a
    /// system call (running, or runnable and waiting for a CPU).
    pub running_periods: AtomicU64,
    /// Wall mode: ticks added for periods the thread waited for a CPU (see
    /// `sources::wall`).
    pub waited: AtomicU64,
    /// Wall mode: the thread's run delay (ns it has spent runnable, waiting for a CPU, the
    /// second field of `/proc/<pid>/task/<tid>/schedstat`) when the wall-clock source last
    /// counted it; [`RUN_DELAY_UNSET`] for a thread that existed before sampling began,
    /// whose first reading is its baseline.
    pub run_delay: AtomicU64,
    /// Wall mode: run delay read but not yet counted as ticks (ns, less than a period),
    /// plus [`Slot::run_delay_phase`] (`sources::wall::count_runnable`).
    pub run_delay_carry: AtomicU64,
    /// Wall mode: the random phase (ns, under a period) the thread's run delay is counted
    /// in periods from, drawn at its first reading: uniform, so that the tick of each
    /// period goes to each reading with the chance of its share.
    pub run_delay_phase: AtomicU64,
    /// Wall mode: the thread's `schedstat` file open in the helper process's descriptor
    /// table, + 1 (0: none), and the thread it was opened for. The helper's alone.
    pub schedstat_fd: AtomicI32,
    pub schedstat_tid: AtomicI32,
    /// When the thread's creation was asked for (`CLOCK_MONOTONIC` ns; 0: not known, a
    /// thread that existed before sampling or the main thread): wall mode counts its
    /// time from there.
    pub created_ns: AtomicU64,
    /// Wall mode: when the thread's time was last split (`CLOCK_MONOTONIC` ns; 0: its
    /// `schedstat` not yet read), and its on-CPU time then (ns; from its event's count, or
    /// its `schedstat` read while it was off its CPU: `sources::wall::account`).
    pub seen_at: AtomicU64,
    pub seen_cpu: AtomicU64,
    /// Wall mode: the thread's run delay (ns, its `schedstat`) at `seen_at`.
    pub seen_delay: AtomicU64,
    /// Wall mode: its `schedstat` CPU time less its event's count (ns, + 1; 0: none seen),
    /// as read while it was off its CPU, or the largest seen before such a reading
    /// (`sources::wall::on_a_cpu_now`).
    pub cpu_offset: AtomicU64,
    /// Wall mode: the thread is counted from its creation, and what it ran before its
    /// event opened (in its `schedstat` time, not in the event's count) counts as blocked
    /// until a reading finds it off its CPU and takes it back (`sources::wall::account`).
    pub event_gap_open: AtomicBool,
    /// Wall mode: blocked time (ns, an `i64` kept as its bits) that passes finding the
    /// thread runnable could not place yet, part of it maybe its wait for a CPU so far;
    /// where it goes (the leaf of its latest sample then, 0: nothing kept; whether that
    /// sample was of it blocked), and its on-CPU time and run delay at the first such pass
    /// (ns): placed once it has run again (`sources::wall::defer`).
    pub deferred_ns: AtomicU64,
    pub deferred_leaf: AtomicU32,
    pub deferred_blocked: AtomicBool,
    pub deferred_cpu: AtomicU64,
    pub deferred_delay: AtomicU64,
    /// Wall mode: time the thread spent blocked (neither on a CPU nor runnable) not yet
    /// given to a blocked sample of it (ns, an `i64` kept as its bits: negative when a
    /// reading counted as blocked what a later one found run or runnable).
    pub blocked_ns: AtomicU64,
    /// Wall mode: the leaf of the blocked sample the latest pass took of the thread (0:
    /// it found the thread running): where blocked time that ended before the next
    /// pass goes.
    pub pass_leaf: AtomicU32,
    /// Wall mode: the node and ticks of the latest blocked time given to a sample of the
    /// thread, which a later reading may take back (`sources::wall::take_back`).
    pub given_node: AtomicU32,
    pub given_ticks: AtomicU64,
    /// Wall mode: ticks of time the thread spent runnable, waiting for a CPU, while it ran
    /// code (not woken from a call it was seen blocked in), which its next CPU sample
    /// records as `<waiting: CPU>` under its own stack (`sources::wall::count_runnable`,
    /// `Sampler::record_runnable`).
    pub runnable_pending: AtomicU64,
    /// Wall mode: whether the latest the sampler saw of the thread was a sample of it
    /// blocked (set by the sampler process's capture, cleared by the thread's CPU
    /// samples): waits no pass saw then go to that sample (`sources::wall::visit`), and,
    /// without the thread's event count to tell when it ran (POSIX timers), its next wait
    /// for a CPU is its wake-up's, under the call it blocked in ([`Slot::woke_node`]).
    pub blocked_last: AtomicBool,
    /// Wall mode: the trace-tree node of the call the sampler process last found the
    /// thread blocked in (0: none yet), whose wake-up's wait for a CPU is that call's
    /// (`sources::wall::count_runnable`), whether or not a CPU sample came since.
    pub woke_node: AtomicU32,
    /// Wall mode: whether a reading found the thread on a CPU since it was last found
    /// blocked ([`Slot::woke_node`]; cleared then): its wake-up's wait for a CPU is
    /// counted by then (the kernel adds a wait to the run delay as the thread gets its
    /// CPU), so later waits for a CPU are preemptions of the code it runs.
    pub ran_since_woken: AtomicBool,
    /// Kernel thread id the timer signals (0 = none).
    pub tid: AtomicI32,
    /// The timer's first expiry after arming (ns of the thread's clock).
    pub first_ns: AtomicU64,
    /// The thread's CPU clock when its timer was armed (ns).
    pub armed_cpu_ns: AtomicU64,
    /// Ticks of the signals the thread's CPU timer delivered since it was armed.
    pub ticks: AtomicU64,
    /// The thread's CPU clock (ns) when sampling stopped with its timer armed; 0 = not
    /// stopped so (see `Sampler::stop`).
    pub stopped_cpu_ns: AtomicU64,
    /// The trace-tree node of the thread's latest recorded sample (0 = none yet).
    pub last_leaf: AtomicU32,
    /// The trace-tree node of the thread's latest sample taken by its own CPU sampler
    /// (its handler; not one of wall mode's samples of it blocked): where the CPU time
    /// after it most likely went (0 = none yet).
    pub last_cpu_leaf: AtomicU32,
    /// The thread's perf event (`crate::sources::perf`): its descriptor in the helper
    /// process's table + 1 (0 = none).
    pub event_fd: AtomicI32,
    /// The thread's request to the helper process to open its event (`perf.rs`: idle,
    /// asked, opened, refused); a futex the thread waits on.
    pub open_state: AtomicU32,
    /// The thread the event is opened for.
    pub open_tid: AtomicI32,
    /// The first interval of the event asked for (ns or events).
    pub open_first: AtomicU64,
    /// For a first interval too short to arm on the thread's event (`sources::perf::arm`):
    /// the interval after the first sample (ns of CPU time), the event being opened with
    /// `open_first` + this and a one-shot event taking the first sample; 0 = none.
    pub open_next: AtomicU64,
    /// The one-shot event of the thread's first sample (`sources::perf::arm`): its
    /// descriptor in the helper process's table + 1 (0 = none, or taken).
    pub first_shot_fd: AtomicI32,
    /// Why the helper process could not open the event (`errno`).
    pub open_errno: AtomicI32,
    /// Whether the thread waits for the answer to its request (else a refusal is counted
    /// for the exit's message: `sources::perf::refusals`).
    pub open_waits: AtomicBool,
    /// Non-zero when the thread was sampled since the helper process last armed its
    /// event: on its next look the helper draws a new interval and arms it
    /// (`sources::perf::Keeper::look`); above 1, the interval the thread's first sample
    /// drew (ns of CPU time), armed as it is.
    pub want_period: AtomicU64,
    /// Whether the thread's perf event has given it a sample since it was armed.
    pub had_sample: AtomicBool,
    /// The thread's CPU time at its latest sample (ns).
    pub counted: AtomicU64,
    /// Nanoseconds of CPU time counted but not yet turned into ticks, an `i64` kept as its
    /// bits: negative when a sample's ticks were rounded up (within a period either way;
    /// `sources::perf::take_since_last`).
    pub carry: AtomicU64,
    /// How much shorter than the period the mean of the thread's random intervals is
    /// drawn (ns of CPU time, an `i64` stored as its bits: negative when longer), so that
    /// its samples come at the rate asked for (`sources::perf::weigh`).
    pub short: AtomicU64,
    /// The part of the thread's first sampling interval that fell before its event was
    /// armed (ns of CPU time; `sources::random::first_interval`): added to its first
    /// sample's weight, then 0.
    pub before_start: AtomicU64,
    /// The interval the thread's event was last armed with (ns of CPU time), written by
    /// the helper process when it arms one: with `armed_at_sample`, the longest the
    /// thread's current interval can be, beyond which the time after its last sample was
    /// missed or spent in the kernel (`sources::perf::weigh`, `disarm`).
    pub drawn: AtomicU64,
    /// The count of the thread's event (ns of CPU time for `task-clock`) when the helper
    /// process last armed it (0: opened, not re-armed since): from it, `drawn` and the
    /// count now, the helper finds how long ago the latest overflow was
    /// (`sources::perf::Keeper::look`, wall mode).
    pub arm_count: AtomicU64,
    /// `drawn` as the thread's latest sample saw it (ns of CPU time): when it differs from
    /// `drawn`, the helper re-armed the event since that sample.
    pub armed_at_sample: AtomicU64,
    /// State of the generator of the thread's random intervals (`crate::sources::random`).
    pub random: AtomicU64,
    /// What the thread's perf event counted after its last sample (ticks or events) + 1,
    /// taken when sampling stopped and placed once no handler runs (0 = none).
    pub tail: AtomicU64,
    /// Scratch: native frame addresses, innermost first.
    pub native: [u64; MAX_NATIVE_FRAMES],
    /// Scratch: each native frame's stack pointer.
    pub native_sps: [u64; MAX_NATIVE_FRAMES],
    /// Scratch: Python frame keys, innermost first.
    pub python: [u64; MAX_PYTHON_FRAMES],
    /// Scratch: Python group ends (see `python::stack`).
    pub groups: [u16; MAX_NATIVE_FRAMES],
    /// Scratch: each Python group's marker on the C stack (see `python::stack`).
    pub markers: [u64; MAX_NATIVE_FRAMES],
    /// Scratch: the native frame of each Python group (see `mixed::pair`).
    pub paired: [u16; MAX_NATIVE_FRAMES],
    /// Scratch: the call stack being recorded, outermost first.
    pub out: [u64; MAX_STACK],
    /// Scratch for text captured from the interpreter.
    pub text: [u8; crate::capture::python::code::MAX_TEXT],
    /// The thread's latest native unwinding, replayed by the next one.
    pub unwound: crate::capture::unwind::Memo,
    /// The thread's latest recorded call stack and its trace-tree nodes.
    pub path: crate::record::trace::PathMemo,
    /// The `PyThreadState*` last found for the thread (see
    /// `python::Runtime::current_thread_state`); 0 = none.
    pub thread_state: u64,
}

/// All slots.
pub struct Slots {
    base: *mut Slot,
    /// One bit per slot, set when the slot is claimed (slots are never released): the
    /// loops over every thread visit only these. Reading a field of each of the
    /// [`MAX_THREADS`] slots, one page apart, cost a page fault each (4096 faults, ~8 ms at
    /// every exit), and resetting them in a fork child made 38 MB of them resident.
    claimed: [AtomicU64; MAX_THREADS / 64],
}

// SAFETY: a slot's scratch buffers are only used by its owner thread; shared fields are
// atomics.
unsafe impl Sync for Slots {}
unsafe impl Send for Slots {}

impl Slot {
    /// Wall mode: forgets what the thread's accounting kept of trace-tree nodes and the
    /// ticks waiting for one (a new thread in the slot, or the trees forgotten).
    pub fn forget_wall_nodes(&self) {
        self.runnable_pending.store(0, Ordering::Relaxed);
        self.blocked_last.store(false, Ordering::Relaxed);
        self.woke_node.store(0, Ordering::Relaxed);
        self.pass_leaf.store(0, Ordering::Relaxed);
        self.given_node.store(0, Ordering::Relaxed);
    }
}

impl Slots {
    /// Reserves [`MAX_THREADS`] slots (`size_of::<Slot>()`, 243,968 bytes, each; a
    /// page is resident once used).
    pub fn new() -> Option<Slots> {
        let base = map_region(MAX_THREADS * std::mem::size_of::<Slot>())?.cast::<Slot>();
        Some(Slots {
            base,
            claimed: [const { AtomicU64::new(0) }; MAX_THREADS / 64],
        })
    }

    /// Indices of the claimed slots, ascending.
    fn claimed(&self) -> impl Iterator<Item = usize> + '_ {
        self.claimed.iter().enumerate().flat_map(|(word, bits)| {
            let mut bits = bits.load(Ordering::Acquire);
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let bit = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    word * 64 + bit
                })
            })
        })
    }

    fn at(&self, i: usize) -> &Slot {
        // SAFETY: i < MAX_THREADS; the mapping is zeroed, which is a valid free Slot.
        unsafe { &*self.base.add(i) }
    }

    /// The calling thread's slot, mutable. Async-signal-safe.
    ///
    /// # Safety
    /// Only the owner thread may hold the returned reference, and not twice at once (the
    /// SIGPROF handler is not re-entered while it runs).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn find_or_claim(&self, thread: usize) -> Option<&mut Slot> {
        let home = thread.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52;
        for probe in 0..MAX_THREADS {
            let i = (home + probe) % MAX_THREADS;
            let slot = self.at(i);
            let owner = slot.owner.load(Ordering::Acquire);
            // Lost to `thread` itself: a handler of its own claimed the slot in between.
            let claimed_now =
                || match slot
                    .owner
                    .compare_exchange(0, thread, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => {
                        self.claimed[i / 64].fetch_or(1 << (i % 64), Ordering::Release);
                        true
                    }
                    Err(owner) => owner == thread,
                };
            if owner == thread || (owner == 0 && claimed_now()) {
                // SAFETY: see the function contract.
                return Some(unsafe { &mut *self.base.add(i) });
            }
        }
        None
    }

    /// Registers the calling thread: stack bounds, an unwinding cache, then `arm(slot)`
    /// (which starts its timer). Not async-signal-safe (allocates); call at thread start.
    ///
    /// `SIGPROF` is not blocked meanwhile (two system calls at every thread start): no
    /// sampling signal comes to a thread before `arm` gives it a trigger, and `arm` fills
    /// the slot before it starts the trigger ([`crate::sources::timer`]).
    pub fn register_current(&self, arm: impl FnOnce(&Slot)) {
        // SAFETY: pthread_self is always valid.
        let thread = unsafe { libc::pthread_self() } as usize;
        let bounds = pyigprof_hooks::threads::current_stack_bounds();
        // SAFETY: we are the owner thread, without a trigger until `arm` starts one.
        unsafe { self.register(thread, bounds, arm) };
    }

    /// Registers thread `thread` (a `pthread_t`) with stack `bounds`, then `arm(slot)`.
    ///
    /// # Safety
    /// No sample may be taken of `thread` before `arm` starts its trigger: it is the
    /// calling thread, or a thread adopted at start-up, either without a timer or event
    /// until `arm`, which fills the slot before starting one.
    pub unsafe fn register(
        &self,
        thread: usize,
        bounds: Option<(u64, u64)>,
        arm: impl FnOnce(&Slot),
    ) {
        // SAFETY: see the function contract.
        if let Some(slot) = unsafe { self.find_or_claim(thread) } {
            // A slot may be reused by a new thread with the same pthread_t.
            slot.thread_state = 0;
            if slot.cache.load(Ordering::Acquire).is_null() {
                slot.cache
                    .store(Box::into_raw(UnwindCache::new()), Ordering::Release);
            }
            if let Some((lo, hi)) = bounds {
                slot.stack.0.store(lo, Ordering::Relaxed);
                slot.stack.1.store(hi, Ordering::Relaxed);
                slot.ready.store(true, Ordering::Release);
            }
            arm(slot);
        }
    }

    /// The calling thread is exiting: `disarm(slot)` (stop its timer) and mark its stack as
    /// no longer valid. Its trace tree stays.
    ///
    /// `SIGPROF` is not blocked meanwhile: a sample that comes before `disarm` has stopped
    /// the trigger is taken and counted before `disarm` counts what its thread ran (the
    /// handler runs to its end first); after, none comes of a timer (deleted: a signal it
    /// had queued is delivered as `timer_delete` returns), and a perf event's signals are
    /// dropped (the slot no longer holds its descriptor).
    pub fn unregister_current(&self, disarm: impl FnOnce(&Slot)) {
        // SAFETY: pthread_self is always valid.
        let thread = unsafe { libc::pthread_self() } as usize;
        // SAFETY: owner thread; its slot exists (registered), so nothing is claimed.
        if let Some(slot) = unsafe { self.find_or_claim(thread) } {
            disarm(slot);
            slot.ready.store(false, Ordering::Release);
        }
    }

    /// Calls `f` on every claimed slot (for stopping every thread's timer).
    pub fn for_each(&self, mut f: impl FnMut(&Slot)) {
        self.claimed().for_each(|i| f(self.at(i)));
    }

    /// Calls `f` on every claimed slot, mutable (for the wall-clock source, which captures
    /// blocked threads' stacks into their slots).
    ///
    /// # Safety
    /// `f` may use a slot's scratch buffers and trace tree only while it holds the slot
    /// ([`Slot::busy`] is [`CAPTURING`], set by `f`): its owner's handler does not run then.
    pub unsafe fn for_each_mut(&self, mut f: impl FnMut(&mut Slot)) {
        // SAFETY: see the function contract; i < MAX_THREADS.
        self.claimed()
            .for_each(|i| f(unsafe { &mut *self.base.add(i) }));
    }

    /// Roots of every thread's trace tree.
    pub fn roots(&self) -> Vec<u32> {
        self.claimed()
            .map(|i| self.at(i).root.load(Ordering::Acquire))
            .filter(|&r| r != 0)
            .collect()
    }

    /// Roots of every thread's trees of lock waits and holds, each with its counter.
    pub fn lock_roots(&self) -> Vec<(u32, crate::sources::locks::Counter)> {
        use crate::sources::locks::Counter;
        self.claimed()
            .flat_map(|i| {
                let roots = &self.at(i).lock_roots;
                [Counter::Wait, Counter::Hold]
                    .map(|c| (roots[c as usize].load(Ordering::Acquire), c))
            })
            .filter(|&(r, _)| r != 0)
            .collect()
    }

    /// After `fork`: only the calling thread exists, and no timer (timers are not
    /// inherited). Forgets every tree, timer and other thread's stack; slots stay claimed
    /// (a new thread with a reused `pthread_t` takes its slot over). Takes no lock.
    pub fn reset_after_fork(&self) {
        // SAFETY: pthread_self is always valid.
        let me = unsafe { libc::pthread_self() } as usize;
        self.for_each(|slot| {
            slot.root.store(0, Ordering::Relaxed);
            slot.lock_roots
                .iter()
                .for_each(|r| r.store(0, Ordering::Relaxed));
            slot.timer.store(0, Ordering::Relaxed);
            slot.tail.store(0, Ordering::Relaxed);
            slot.busy.store(FREE, Ordering::Relaxed);
            slot.pending.store(0, Ordering::Relaxed);
            slot.running_periods.store(0, Ordering::Relaxed);
            slot.waited.store(0, Ordering::Relaxed);
            slot.ticks.store(0, Ordering::Relaxed);
            slot.last_leaf.store(0, Ordering::Relaxed);
            // A new process: its one thread's run delay starts at 0; the descriptors
            // were the parent's helper process's.
            slot.run_delay.store(0, Ordering::Relaxed);
            slot.run_delay_carry.store(0, Ordering::Relaxed);
            slot.run_delay_phase.store(0, Ordering::Relaxed);
            slot.created_ns.store(0, Ordering::Relaxed);
            slot.schedstat_fd.store(0, Ordering::Relaxed);
            slot.schedstat_tid.store(0, Ordering::Relaxed);
            slot.seen_at.store(0, Ordering::Relaxed);
            slot.blocked_ns.store(0, Ordering::Relaxed);
            slot.forget_wall_nodes();
            slot.last_cpu_leaf.store(0, Ordering::Relaxed);
            slot.path.root.store(0, Ordering::Relaxed);
            if slot.owner.load(Ordering::Relaxed) != me {
                slot.ready.store(false, Ordering::Relaxed);
            }
        });
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A free slot on the heap, for unit tests of what reads or writes one.
    pub(crate) fn zeroed_slot() -> Box<Slot> {
        let layout = std::alloc::Layout::new::<Slot>();
        // SAFETY: all-zero is a valid Slot; the layout is Slot's.
        unsafe { Box::from_raw(std::alloc::alloc_zeroed(layout).cast::<Slot>()) }
    }

    #[test]
    fn loops_over_threads_visit_the_claimed_slots_only() {
        let slots = Slots::new().expect("mapping");
        let mut visited = 0;
        slots.for_each(|_| visited += 1);
        assert_eq!(visited, 0);
        // Made-up pthread_t values; claiming twice finds the same slot.
        let threads = [0x7f00_1000usize, 0x7f00_2000, 0x7f00_3000, 0x7f55_0000];
        for &t in threads.iter().chain(&threads[..2]) {
            // SAFETY: no handler runs on these made-up threads.
            let slot = unsafe { slots.find_or_claim(t) }.expect("a free slot");
            slot.root.store(t as u32 >> 12, Ordering::Relaxed);
        }
        let mut owners = Vec::new();
        slots.for_each(|slot| owners.push(slot.owner.load(Ordering::Relaxed)));
        owners.sort_unstable();
        assert_eq!(owners, threads);
        let mut roots = slots.roots();
        roots.sort_unstable();
        assert_eq!(roots, [0x7f001, 0x7f002, 0x7f003, 0x7f550]);
        eprintln!("size of a slot: {} bytes", std::mem::size_of::<Slot>());
    }
}
