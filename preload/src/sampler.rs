//! The sampler: the state every source of samples shares, and the one operation they all
//! perform — capture the interrupted thread's call stack and count it into its trace tree
//! (`Sampler::sample`).
//!
//! The flow of a sample, folder by folder:
//! - [`crate::sources`]: what triggers a sample (per-thread timers delivering `SIGPROF`,
//!   the signal handler, threads that existed before the constructor);
//! - [`crate::capture`]: native unwinding, CPython's frame chain, and the splice of the two
//!   into one mixed call stack;
//! - [`crate::record`]: the per-thread trace trees the stack is counted into, per-thread
//!   slots and the sampler's own statistics;
//! - [`crate::output`]: when and how the trees are written (exit, fork, exec, signals,
//!   snapshots) in IgProf's format.
//!
//! Handler rules: no allocation, no locks, no C-API calls; memory comes from regions mapped
//! before sampling; every read of the interrupted program's memory is checked; `errno` is
//! preserved (by the handler, [`crate::sources::handler`]).

use crate::capture::frames::{decode, marker_key, Frame, Marker};
use crate::capture::mixed::{
    compose, insert_below_innermost_python, pair, Evaluator, Native, Python,
};
use crate::capture::python::code::Codes;
use crate::capture::python::stack::{walk, PyStack};
use crate::capture::python::tasks;
use crate::capture::python::Runtime;
use crate::capture::unwind::{modules, unwind, Frames, Regs};
use crate::config::Clock;
pub use crate::record::stats::Stats;
use crate::record::threads::{Slot, Slots, CAPTURING, FREE, HANDLING};
use crate::record::trace::Trees;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Most suspended asyncio tasks of one thread given a sample in one wall-mode pass
/// ([`Sampler::sample_suspended_tasks`]).
pub const MAX_TASK_SAMPLES: usize = 16;

/// Stack a capture may use below the frame that checks for it ([`Sampler::stack_room`]),
/// bytes. The deepest measured was 6.5 KB (painted stacks under every example program and
/// bench/overhead's at 4 kHz, with the memory profiler at every allocation: a frame's CFI
/// evaluated by gimli, whose rows of 32 register rules are copied on the stack, under the
/// handler's own frames); the kernel's signal frame (3.5 KB here with AVX-512's state) is
/// already below the interrupted code when the handler checks. A thread with less room
/// left (a 32 KiB `threading.stack_size` deep in recursion) is not captured: its samples
/// are counted as dropped, where the capture would have run off its stack's end.
pub const CAPTURE_STACK: u64 = 12 << 10;

/// Everything the handler uses, built by the constructor before the timer starts.
pub struct Sampler {
    /// Tick period in nanoseconds.
    pub period_ns: u64,
    /// The clock each thread is sampled on.
    pub clock: Clock,
    /// What interrupts each thread for a sample: a perf event or a POSIX timer.
    pub trigger: crate::sources::Trigger,
    /// Whether threads get sampling timers (`PYIGPROF_PROFILE` names `cpu`); false when
    /// only allocations are sampled.
    pub cpu: bool,
    /// Only samples of threads holding the GIL are recorded (`PYIGPROF_GIL=1`); where the
    /// runtime cannot tell ([`crate::capture::python::Runtime::gc`] unknown), every sample.
    pub gil_only: bool,
    /// asyncio's tasks are read (`PYIGPROF_ASYNCIO`, default on; [`Sampler::discover_tasks`]);
    /// each attach sets it anew.
    pub asyncio: std::sync::atomic::AtomicBool,
    /// All trace trees.
    pub trees: Trees,
    /// Per-thread state.
    pub slots: Slots,
    /// Captured code objects.
    pub codes: Codes,
    /// The names of the asyncio tasks in samples' await chains.
    pub task_names: crate::capture::python::tasks::Names,
    /// The CPython runtime, when the process is Python.
    pub python: Option<Runtime>,
    /// Counters of the sampler's own work.
    pub stats: Stats,
    /// glibc's signal trampoline (`__restore_rt`), where the unwinder finds the interrupted
    /// registers of a nested signal frame; 0 when unknown.
    pub(crate) restorer: AtomicU64,
    /// `pthread_key_t` whose destructor tells us a registered thread is exiting.
    pub(crate) exit_key: AtomicUsize,
}

/// Whose call stack is captured.
#[derive(Clone, Copy)]
enum Thread {
    /// The calling thread's (from its signal handler).
    Current,
    /// Another thread's, blocked; its `pthread_t`.
    Other(u64),
}

/// Sampling state: no timer fires samples.
pub(crate) const OFF: u8 = 0;
/// Sampling state: samples are taken.
pub(crate) const SAMPLING: u8 = 1;
/// The program took `SIGPROF` over: no timer is armed again, not even in fork children.
pub(crate) const YIELDED: u8 = 2;

static SAMPLER: AtomicPtr<Sampler> = AtomicPtr::new(std::ptr::null_mut());
/// [`OFF`], [`SAMPLING`] or [`YIELDED`].
pub(crate) static STATE: AtomicU8 = AtomicU8::new(OFF);

/// The installed sampler, if any.
pub fn get() -> Option<&'static Sampler> {
    // SAFETY: set once from a leaked Box.
    unsafe { SAMPLER.load(Ordering::Acquire).as_ref() }
}

/// Set while the window writer forgets the trace trees between two windows
/// ([`Sampler::forget_trees`]): the handler and the wall passes take no sample meanwhile,
/// and a thread that ends places no tail; threads still start and get their timers or
/// events (unlike `STATE` off).
pub(crate) static PAUSED: AtomicBool = AtomicBool::new(false);

/// Whether samples are being taken. SeqCst: [`Sampler::pause`] sets [`PAUSED`], then
/// waits for the handlers counted in flight before they read it.
pub fn sampling() -> bool {
    STATE.load(Ordering::Acquire) == SAMPLING && !PAUSED.load(Ordering::SeqCst)
}

/// Whether sampling is on but paused ([`Sampler::pause`]): what a sample would count then
/// is kept for the thread's next one.
pub fn paused() -> bool {
    STATE.load(Ordering::Acquire) == SAMPLING && PAUSED.load(Ordering::SeqCst)
}

/// Sampling paused while it lives ([`Sampler::pause`]).
pub struct Paused(());

impl Drop for Paused {
    fn drop(&mut self) {
        PAUSED.store(false, Ordering::SeqCst);
    }
}

impl Sampler {
    /// Pauses sampling until the value is dropped: once it returns, no handler, wall pass
    /// or thread end touches the trace trees. Not from a signal handler.
    pub fn pause(&self) -> Paused {
        PAUSED.store(true, Ordering::SeqCst);
        crate::signal_guard::wait_for_handlers();
        Paused(())
    }

    /// Whether the trace trees can be forgotten between two windows without losing time:
    /// the threads are sampled on their CPU time or wall time (a perf event's overflow
    /// skipped while paused leaves its CPU time to the thread's next sample, a POSIX
    /// timer's expiration its ticks ([`paused`]), a wall pass its periods to the next pass,
    /// an ending thread waits for the pause's end), and no memory profiler runs (its live
    /// blocks hold node indices, which would name other call stacks).
    pub fn can_forget_trees(&self, memory: bool) -> bool {
        self.cpu && !memory
    }

    /// Forgets every thread's trace tree, sampling paused ([`Sampler::pause`]): the pool
    /// is reused from its start and each thread makes a new root at its next sample (its
    /// path memo's caches then stale).
    pub fn forget_trees(&self, _paused: &Paused) {
        self.trees.reset();
        self.slots.for_each(|slot| {
            slot.root.store(0, Ordering::Relaxed);
            slot.last_leaf.store(0, Ordering::Relaxed);
            slot.last_cpu_leaf.store(0, Ordering::Relaxed);
            slot.lock_roots
                .iter()
                .for_each(|r| r.store(0, Ordering::Relaxed));
            slot.forget_wall_nodes();
            slot.path.root.store(0, Ordering::Relaxed);
        });
    }

    /// Maps the sampler's memory. `None` when the kernel refuses the mappings.
    pub fn new(period_ns: u64, clock: Clock, python: Option<Runtime>) -> Option<Sampler> {
        Some(Sampler {
            period_ns,
            clock,
            trigger: crate::sources::Trigger::Timer {
                why: "not chosen yet",
            },
            cpu: true,
            gil_only: false,
            asyncio: std::sync::atomic::AtomicBool::new(false),
            trees: Trees::new(1 << 24)?,
            slots: Slots::new()?,
            codes: Codes::new(1 << 20, 256 << 20)?,
            task_names: crate::capture::python::tasks::Names::new()?,
            python,
            stats: Stats::default(),
            restorer: AtomicU64::new(0),
            exit_key: AtomicUsize::new(usize::MAX),
        })
    }

    /// Makes `self` the process's sampler (leaked: handlers may run until the process
    /// ends) and starts sampling. The handler must be installed before timers fire.
    pub(crate) fn publish(self) -> &'static Sampler {
        let sampler: &'static Sampler = Box::leak(Box::new(self));
        SAMPLER.store(sampler as *const Sampler as *mut Sampler, Ordering::Release);
        sampler
    }

    /// Counts `ticks` of `slot`'s thread's CPU time, spent since its previous sample in
    /// kernel mode where its perf event's overflows were skipped, at that previous CPU
    /// sample's node (`kernel_ticks`). Returns the ticks it could not place there (all of
    /// them when the thread has no sample yet), for the sample being taken. From the
    /// thread's own handler.
    pub(crate) fn count_before_sample(&self, slot: &Slot, ticks: u64) -> u64 {
        let leaf = slot.last_cpu_leaf.load(Ordering::Relaxed);
        if ticks == 0 || leaf == 0 {
            return ticks;
        }
        self.trees
            .node(leaf)
            .ticks
            .fetch_add(ticks, Ordering::Relaxed);
        slot.ticks.fetch_add(ticks, Ordering::Relaxed);
        self.stats.ticks.fetch_add(ticks, Ordering::Relaxed);
        self.stats.kernel_ticks.fetch_add(ticks, Ordering::Relaxed);
        0
    }

    /// Captures the calling thread's call stack from the registers the kernel saved when
    /// its signal arrived, and counts it into the thread's trace tree with `weight` ticks.
    /// Called by a source from its signal handler, on the sampled thread. Returns the
    /// numbers of native and Python frames recorded (for the handler's timing).
    pub(crate) fn sample(&self, weight: u64, regs: Regs) -> (u64, u64) {
        // SAFETY: pthread_self only reads the thread pointer.
        let thread = unsafe { libc::pthread_self() } as usize;
        // SAFETY: this is the owner thread and SIGPROF is blocked while the handler runs.
        let Some(slot) = (unsafe { self.slots.find_or_claim(thread) }) else {
            self.stats.dropped_no_slot.fetch_add(1, Ordering::Relaxed);
            self.drop_sample(weight);
            return (0, 0);
        };
        if !self.stack_room(slot) {
            // The thread's ticks all the same: its timer's expirations are reconciled with
            // them at its end, and the dropped ones are not unsampled time.
            slot.ticks.fetch_add(weight, Ordering::Relaxed);
            self.drop_sample(weight);
            return (0, 0);
        }
        if slot
            .busy
            .compare_exchange(FREE, HANDLING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // The wall-clock source is capturing this thread as blocked (it has just woken
            // up): the ticks go to its next sample.
            slot.pending.fetch_add(weight, Ordering::Relaxed);
            return (0, 0);
        }
        let weight = weight + slot.pending.swap(0, Ordering::Relaxed);
        let captured = self.capture(slot, regs, Thread::Current);
        let recorded = self.record(slot, weight, Thread::Current, &captured);
        slot.busy.store(FREE, Ordering::Release);
        recorded
    }

    /// Captures the calling thread's call stack at an allocation the memory profiler
    /// sampled, from `regs` (taken inside the profiler's allocator hook), and returns the
    /// trace-tree node it ends at, where the allocation is counted. The profiler's own
    /// innermost frames (the hook and what it called) are replaced by one frame at
    /// `entry`, the allocator function the program called as the program sees it (glibc's
    /// `malloc`, CPython's object allocator), as IgProf's memory profiles end. Called in
    /// the allocating thread, not in a signal handler, under the handler's rules (it may be
    /// inside anything the program does). `None` when the thread's slot is busy (a
    /// `SIGPROF` handler cannot be, but wall mode's source can) or the tree is full.
    pub(crate) fn allocation_site(&self, regs: Regs, entry: u64) -> Option<u32> {
        self.call_site(regs, entry, |slot| self.tree_root(slot), |_, _| None)
    }

    /// Records a wait for a lock, or a hold of one, that the calling thread has just ended
    /// in `entry` (the C library's function it called; [`crate::sources::locks`]) and that
    /// stands for `weight_ns` ns: its call stack, in the thread's tree for `counter` (its
    /// own root, [`Slot::lock_roots`]), with the lock's frame that `lock` gives (from the
    /// innermost frame of the program's, the instruction that called `entry`, and the
    /// stack's frame keys; `None`: no lock frame) at the leaf, one sample and `weight_ns`
    /// in ticks of [`crate::sources::locks::TICK_NS`] (rounded at random with `unit`,
    /// uniform in `(0, 1]`). False when it could not be recorded (the slot busy, the trees
    /// full). Not from a signal handler.
    pub(crate) fn record_lock(
        &self,
        counter: crate::sources::locks::Counter,
        regs: Regs,
        entry: u64,
        lock: impl FnOnce(u64, &[u64]) -> Option<u64>,
        weight_ns: u64,
        unit: f64,
    ) -> bool {
        let ticks = crate::sources::random::round_at_random(
            weight_ns,
            crate::sources::locks::TICK_NS,
            unit,
        );
        let node = self.call_site(
            regs,
            entry,
            |slot| self.root_in(&slot.lock_roots[counter as usize]),
            lock,
        );
        let Some(node) = node else {
            return false;
        };
        let node = self.trees.node(node);
        node.samples.fetch_add(1, Ordering::Relaxed);
        node.ticks.fetch_add(ticks, Ordering::Relaxed);
        true
    }

    /// The trace-tree node of the calling thread's call stack, from registers `regs` taken
    /// in the profiler's code, less the profiler's frames, with `entry` (the function of
    /// the C library the program called) as its innermost frame, in the tree whose root
    /// `root` gives (made on first use), and below it the frame `leaf` gives (from the
    /// instruction that called `entry`, 0 when unknown, and the stack's frame keys,
    /// outermost first), if any. Takes the slot as the handler does. `None` when the slot
    /// is busy or the trees are full.
    fn call_site(
        &self,
        regs: Regs,
        entry: u64,
        root: impl FnOnce(&Slot) -> Option<u32>,
        leaf: impl FnOnce(u64, &[u64]) -> Option<u64>,
    ) -> Option<u32> {
        // SAFETY: pthread_self only reads the thread pointer.
        let thread = unsafe { libc::pthread_self() } as usize;
        // SAFETY: this is the owner thread; a SIGPROF handler arriving meanwhile finds the
        // slot busy and leaves its scratch buffers alone.
        let slot = unsafe { self.slots.find_or_claim(thread) }?;
        if !self.stack_room(slot) {
            return None;
        }
        slot.busy
            .compare_exchange(FREE, HANDLING, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        let captured = self.capture(slot, regs, Thread::Current);
        // The profiler's frames are the innermost native ones.
        let here = Self::allocation_site as *const () as u64;
        let ours = match modules::current() {
            Some(snapshot) => slot.native[..captured.native as usize]
                .iter()
                .take_while(|&&pc| snapshot.same_object(pc, here))
                .count(),
            None => 1,
        };
        let mut len = captured.len.saturating_sub(ours);
        let caller = match len.checked_sub(1).map(|i| decode(slot.out[i])) {
            Some(Frame::Native(pc)) => pc,
            _ => 0,
        };
        for key in [Some(entry), leaf(caller, &slot.out[..len])]
            .into_iter()
            .flatten()
        {
            if len < slot.out.len() {
                slot.out[len] = key;
                len += 1;
            }
        }
        let node = root(slot)
            .and_then(|root| self.trees.find_from(&mut slot.path, root, &slot.out[..len]));
        slot.busy.store(FREE, Ordering::Release);
        node
    }

    /// Captures the call stack of another thread, blocked in a system call, from the
    /// registers the kernel saved at its entry (`regs`: only the instruction and stack
    /// pointers are known), and counts it into that thread's trace tree with `weight`
    /// ticks, `why` (a wait marker's key, [`crate::capture::waits`]) as its innermost
    /// frame — unless `still_blocked()`, asked after the capture and before recording,
    /// says the thread ran meanwhile (its stack may have changed under the reads). Called
    /// by the wall-clock source from its own thread, holding the slot ([`crate::record::threads::CAPTURING`]).
    /// Returns whether the sample was recorded.
    pub(crate) fn sample_blocked(
        &self,
        slot: &mut Slot,
        weight: u64,
        regs: Regs,
        why: u64,
        still_blocked: impl FnOnce() -> bool,
    ) -> bool {
        let thread = slot.owner.load(Ordering::Relaxed) as u64;
        let mut captured = self.capture(slot, regs, Thread::Other(thread));
        if !still_blocked() {
            return false;
        }
        // The reason it waits, below the call that waits (when the stack leaves room).
        let call = captured.len;
        if captured.len < slot.out.len() {
            slot.out[captured.len] = why;
            captured.len += 1;
        }
        if weight > 0 {
            self.record(slot, weight, Thread::Other(thread), &captured);
            self.stats.blocked.fetch_add(1, Ordering::Relaxed);
        } else if let Some(root) = self.tree_root(slot) {
            // Nothing to count yet (wall mode's exact accounting: less than a period
            // blocked since the last pass), but where it waits is known now: its latest
            // position (a node without counts is left out of the profile).
            if let Some(leaf) =
                self.trees
                    .find_from(&mut slot.path, root, &slot.out[..captured.len])
            {
                slot.last_leaf.store(leaf, Ordering::Relaxed);
            }
        }
        // Its time waiting for a CPU once woken goes to the call that waits (the node
        // just recorded, found again through the path memo: no new node).
        if let Some(root) = self.tree_root(slot) {
            if let Some(node) = self
                .trees
                .find_from(&mut slot.path, root, &slot.out[..call])
                .filter(|_| call > 0)
            {
                slot.blocked_last.store(true, Ordering::Relaxed);
                slot.woke_node.store(node, Ordering::Relaxed);
                slot.ran_since_woken.store(false, Ordering::Relaxed);
            }
        }
        true
    }

    /// Wall mode: counts `periods` ticks of wall time for each suspended asyncio task that
    /// `slot`'s thread created ([`tasks`]: 3.14+, once `asyncio` is imported), each at its
    /// own stack (`<task …>` frames, its coroutines, `<awaiting>`) in the thread's trace
    /// tree. At most [`MAX_TASK_SAMPLES`] tasks get a sample per pass: with more, an evenly
    /// spaced subset starting at `pass` (the pass's number) does, each weighted by the
    /// share of the tasks it stands for, so the ticks still add up to `periods` per task.
    /// Called by the wall-clock source from its own thread; takes the slot
    /// ([`crate::record::threads::CAPTURING`]) and does nothing when the thread's handler
    /// holds it. Returns the samples recorded.
    pub(crate) fn sample_suspended_tasks(&self, slot: &mut Slot, periods: u64, pass: u64) -> u64 {
        let Some(rt) = self.python.as_ref() else {
            return 0;
        };
        if !self.asyncio.load(Ordering::Relaxed) {
            return 0;
        }
        let thread = slot.owner.load(Ordering::Relaxed) as u64;
        let tstate = rt.thread_state_of(thread, slot.thread_state);
        if tstate == 0 {
            return 0;
        }
        let readers = self.task_readers(rt);
        let Some(found) = tasks::Tasks::find(&readers, tstate) else {
            return 0;
        };
        let model = found.model();
        // The main thread's kernel id is the process's (the helper's target).
        let main = slot.tid.load(Ordering::Relaxed)
            == crate::sources::helper::TARGET.load(Ordering::Acquire);
        let mut listed = [0u64; tasks::MAX_TASKS_LISTED];
        let n = model.suspended_tasks(tstate, thread, main, &readers, &mut listed);
        if n == 0
            || slot
                .busy
                .compare_exchange(FREE, CAPTURING, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return 0;
        }
        let Some(root) = self.tree_root(slot) else {
            slot.busy.store(FREE, Ordering::Release);
            return 0;
        };
        let chosen = n.min(MAX_TASK_SAMPLES);
        let total = periods * n as u64;
        let mut recorded = 0;
        for i in 0..chosen {
            let task = listed[(pass as usize % n + i * n / chosen) % n];
            let weight = total / chosen as u64 + u64::from((i as u64) < total % chosen as u64);
            let Some(len) =
                tasks::suspended_stack(model, task, &readers, &mut slot.text, &mut slot.out)
            else {
                continue;
            };
            if self
                .trees
                .record_from(&mut slot.path, root, &slot.out[..len], 1, weight)
                .is_some()
            {
                self.stats.ticks.fetch_add(weight, Ordering::Relaxed);
                self.stats.task_ticks.fetch_add(weight, Ordering::Relaxed);
                self.stats.task_samples.fetch_add(1, Ordering::Relaxed);
                recorded += 1;
            }
        }
        slot.busy.store(FREE, Ordering::Release);
        recorded
    }

    /// The root of `slot`'s thread's trace tree, made on its first use; `None` when the
    /// trees have no room for it. From whoever holds the slot.
    pub(crate) fn tree_root(&self, slot: &Slot) -> Option<u32> {
        self.root_in(&slot.root)
    }

    /// The root a slot keeps in `root` (its trace tree's, its lock waits'), made on first
    /// use; `None` when the trees have no room for it. From whoever holds the slot.
    fn root_in(&self, root: &std::sync::atomic::AtomicU32) -> Option<u32> {
        match root.load(Ordering::Relaxed) {
            0 => {
                let fresh = self.trees.new_root()?;
                root.store(fresh, Ordering::Release);
                Some(fresh)
            }
            root => Some(root),
        }
    }

    /// Looks for asyncio's task offsets in the objects mapped now
    /// ([`tasks::discover`]), unless `PYIGPROF_ASYNCIO=0` or the process is not Python.
    /// Not from a signal handler (reads files).
    pub(crate) fn discover_tasks(&self) {
        let asyncio = self.asyncio.load(Ordering::Relaxed);
        if let Some(rt) = self.python.as_ref().filter(|_| asyncio) {
            tasks::discover(&rt.layout);
        }
    }

    /// What reading asyncio's tasks needs of this sampler and runtime `rt`.
    fn task_readers<'a>(&'a self, rt: &'a Runtime) -> tasks::Readers<'a> {
        tasks::Readers {
            names: &self.task_names,
            codes: &self.codes,
            layout: &rt.layout,
            types: &rt.types,
        }
    }

    /// The asyncio tasks of the thread whose state is `tstate` (3.14+: the tasks it created
    /// that have not finished, [`tasks::Asyncio::tasks_of_thread`]), each as `pyigprof dump`
    /// lists it; empty without asyncio's offsets. Not from a signal handler (allocates).
    pub(crate) fn tasks_now(&self, tstate: u64) -> Vec<tasks::TaskNow> {
        let (Some(rt), Some(asyncio)) = (self.python.as_ref(), tasks::published()) else {
            return Vec::new();
        };
        let with = self.task_readers(rt);
        let mut scratch = vec![0u8; crate::capture::python::code::MAX_TEXT];
        let (listed, running) = asyncio.tasks_of_thread(tstate);
        listed
            .into_iter()
            .filter_map(|task| tasks::task_now(asyncio, task, task == running, &with, &mut scratch))
            .collect()
    }

    /// asyncio's tasks before 3.14 in the interpreter of the thread whose state is
    /// `tstate` ([`tasks::interpreter_tasks`]: not per thread), as `pyigprof dump` lists
    /// them; empty from 3.14 ([`Sampler::tasks_now`] gives them by thread) or without asyncio.
    /// Not from a signal handler (allocates).
    pub(crate) fn interpreter_tasks_now(&self, tstate: u64) -> Vec<tasks::TaskNow> {
        let Some(rt) = self
            .python
            .as_ref()
            .filter(|rt| rt.layout.version < (3, 14))
        else {
            return Vec::new();
        };
        let Some(objects) = rt.layout.objects.as_ref() else {
            return Vec::new();
        };
        let Some(interp) = tstate
            .checked_add(u64::from(objects.thread_interp))
            .and_then(crate::capture::python::read::word)
        else {
            return Vec::new();
        };
        tasks::interpreter_tasks(interp, &self.task_readers(rt))
    }

    /// Why a thread blocked in `call` waits ([`crate::capture::waits::reason`], with this
    /// runtime's GIL words: none without Python frames).
    pub(crate) fn wait_reason(&self, call: crate::capture::waits::Call) -> Marker {
        let none = crate::capture::waits::GilWords::default();
        let gil = self.python.as_ref().map_or(&none, |rt| &rt.gil_words);
        crate::capture::waits::reason(call, gil)
    }

    /// The call stack of another thread blocked in a system call, captured from the
    /// registers the kernel saved at its entry as [`Sampler::sample_blocked`] does, but
    /// counted nowhere: the frame keys, outermost first, for `pyigprof dump`. `None` when
    /// `still_blocked()`, asked after the capture, says the thread ran meanwhile. The
    /// caller holds the slot ([`crate::record::threads::CAPTURING`]).
    pub(crate) fn stack_of_blocked(
        &self,
        slot: &mut Slot,
        regs: Regs,
        still_blocked: impl FnOnce() -> bool,
    ) -> Option<Vec<u64>> {
        let thread = slot.owner.load(Ordering::Relaxed) as u64;
        let captured = self.capture(slot, regs, Thread::Other(thread));
        still_blocked().then(|| slot.out[..captured.len].to_vec())
    }

    /// Counts a sample of `weight` ticks that is not recorded (the caller counts why): in
    /// `samples`, `ticks` and `dropped_ticks`, so that the profile's totals still hold its
    /// time.
    fn drop_sample(&self, weight: u64) {
        self.stats.samples.fetch_add(1, Ordering::Relaxed);
        self.stats.ticks.fetch_add(weight, Ordering::Relaxed);
        self.stats
            .dropped_ticks
            .fetch_add(weight, Ordering::Relaxed);
    }

    /// Whether the calling thread, `slot`'s owner, has room on its stack below the
    /// caller's frame for a capture ([`CAPTURE_STACK`]); counts it in
    /// `dropped_no_stack_room` when it has not. True when its stack's bounds are unknown,
    /// or when it runs on another stack than the one they give (a coroutine library's own
    /// stacks: what room those have is not known, and the capture proceeds as before).
    /// Async-signal-safe.
    #[inline(never)]
    fn stack_room(&self, slot: &Slot) -> bool {
        let (low, high) = (
            slot.stack.0.load(Ordering::Relaxed),
            slot.stack.1.load(Ordering::Relaxed),
        );
        let here = std::hint::black_box(&low) as *const u64 as u64;
        if !slot.ready.load(Ordering::Acquire)
            || !(low..high).contains(&here)
            || here - low >= CAPTURE_STACK
        {
            return true;
        }
        self.stats
            .dropped_no_stack_room
            .fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Captures the call stack of `slot`'s thread (`whose`) from `regs` into the slot's
    /// buffers (`slot.out[..len]`, outermost frame first); counts nothing.
    fn capture(&self, slot: &mut Slot, regs: Regs, whose: Thread) -> Captured {
        // Native frames.
        let cache = slot.cache.load(Ordering::Acquire);
        let (native_len, complete, cut, approximate) = match (
            modules::current(),
            slot.ready.load(Ordering::Acquire),
            cache.is_null(),
        ) {
            (Some(snapshot), true, false) => {
                let bounds = (
                    slot.stack.0.load(Ordering::Relaxed),
                    slot.stack.1.load(Ordering::Relaxed),
                );
                // SAFETY: the cache belongs to this slot, used only by its owner thread.
                let cache = unsafe { &mut *cache };
                let restorer = self.restorer.load(Ordering::Relaxed);
                let u = unwind(
                    snapshot,
                    cache,
                    &mut slot.unwound,
                    regs,
                    bounds,
                    restorer,
                    Frames {
                        pcs: &mut slot.native,
                        sps: &mut slot.native_sps,
                    },
                );
                (u.frames, u.complete, u.cut, u.approximate)
            }
            _ => {
                slot.native[0] = regs.ip;
                slot.native_sps[0] = regs.sp;
                (1, false, false, false)
            }
        };

        // Python frames.
        let mut python = None;
        let mut python_abandoned = false;
        let mut collecting = false;
        // Without a runtime (or without --gil) every sample is kept.
        let mut holds_gil = true;
        if let Some(rt) = &self.python {
            // Without markers, a whole stack without evaluator frames has no Python frames
            // to place: skip the walk. (An incomplete one places them above what was
            // unwound.)
            let walk_python = rt.pairs_by_marker()
                || !complete
                || slot.native[..native_len]
                    .iter()
                    .any(|&pc| rt.is_evaluator(pc));
            let tstate = match (walk_python || rt.gc.is_some() || self.gil_only, whose) {
                (false, _) => 0,
                (true, Thread::Current) => rt.current_thread_state(&mut slot.thread_state),
                (true, Thread::Other(thread)) => rt.thread_state_of(thread, slot.thread_state),
            };
            collecting = tstate != 0 && rt.gc.is_some_and(|gc| gc.collecting(tstate));
            if self.gil_only {
                holds_gil = match rt.gc {
                    Some(gc) => tstate != 0 && gc.holds_gil(tstate) == Some(true),
                    None => true,
                };
            }
            if tstate != 0 && walk_python {
                // The asyncio task the thread runs, whose await chain goes outside its
                // coroutine's frame: 3.14+ from the thread state; before, one of the tasks
                // the event loops run now (every thread's), the one whose coroutine's frame
                // the walk meets.
                let readers = self.task_readers(rt);
                let found = self
                    .asyncio
                    .load(Ordering::Relaxed)
                    .then(|| tasks::Tasks::find(&readers, tstate))
                    .flatten();
                let mut running = [(0u64, 0u64); 4];
                let count = found
                    .as_ref()
                    .map_or(0, |t| t.model().running(tstate, &readers, &mut running));
                let mut anchors = [0u64; 4];
                for (anchor, (_, frame)) in anchors.iter_mut().zip(&running[..count]) {
                    *anchor = *frame;
                }
                let out = PyStack {
                    keys: &mut slot.python,
                    group_ends: &mut slot.groups,
                    markers: &mut slot.markers,
                };
                match walk(
                    tstate,
                    &anchors[..count],
                    &rt.layout,
                    &rt.types,
                    &self.codes,
                    out,
                    &mut slot.text,
                ) {
                    Ok(mut w) => {
                        if let Some((after, which)) = w.anchor_at {
                            let task = running[which].0;
                            // The chain's keys in `slot.out`, which the stack is
                            // composed into only afterwards.
                            let n = found.as_ref().map_or(0, |t| {
                                tasks::chain(
                                    t.model(),
                                    task,
                                    &readers,
                                    &mut slot.text,
                                    &mut slot.out,
                                )
                            });
                            w.frames = tasks::insert(
                                &mut slot.python,
                                w.frames,
                                &mut slot.groups[..w.groups],
                                after,
                                &slot.out[..n],
                            );
                        }
                        python = Some(w)
                    }
                    Err(_) => python_abandoned = true,
                }
            }
        }
        let python_len = python.as_ref().map_or(0, |w| w.frames as u64);

        let native = Native {
            frames: &slot.native[..native_len],
            sps: &slot.native_sps[..native_len],
            complete,
            cut,
        };
        let (composed, with_python, python_unplaced) = match (&self.python, python) {
            (Some(rt), Some(w)) => {
                let py = Python {
                    keys: &slot.python[..w.frames],
                    group_ends: &slot.groups[..w.groups],
                    markers: &slot.markers[..w.groups],
                    truncated: w.truncated,
                };
                let evaluator = if rt.pairs_by_marker() {
                    Evaluator::Marker
                } else {
                    Evaluator::Address(|pc| rt.is_evaluator(pc))
                };
                let n = pair(&native, &py, &evaluator, &mut slot.paired);
                let c = compose(&native, Some((&py, &slot.paired[..n])), &mut slot.out);
                (c.len, c.paired > 0, c.unplaced > 0)
            }
            _ => (compose(&native, None, &mut slot.out).len, false, false),
        };
        let len = match collecting {
            true => {
                let gc = marker_key(Marker::GarbageCollection);
                insert_below_innermost_python(&mut slot.out, composed, gc)
            }
            false => composed,
        };
        Captured {
            native: native_len as u64,
            python: python_len,
            len,
            complete,
            approximate,
            with_python,
            python_abandoned,
            python_unplaced,
            holds_gil,
        }
    }

    /// Counts the stack [`Sampler::capture`] left in `slot.out` into the slot's trace tree
    /// with `weight` ticks, and what it found into the statistics. Returns the numbers of
    /// native and Python frames captured (0, 0 when the sample was dropped).
    fn record(
        &self,
        slot: &mut Slot,
        weight: u64,
        whose: Thread,
        captured: &Captured,
    ) -> (u64, u64) {
        let stats = &self.stats;
        stats.samples.fetch_add(1, Ordering::Relaxed);
        stats.ticks.fetch_add(weight, Ordering::Relaxed);
        // The ticks of the thread's CPU timer (Slot::ticks), not those of its time blocked.
        if let Thread::Current = whose {
            slot.ticks.fetch_add(weight, Ordering::Relaxed);
        }
        for (counter, counted) in [
            (&stats.complete, captured.complete),
            (&stats.approximate, captured.approximate),
            (&stats.with_python, captured.with_python),
            (&stats.python_abandoned, captured.python_abandoned),
            (&stats.python_mismatches, captured.python_unplaced),
        ] {
            if counted {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        if !captured.holds_gil {
            // `PYIGPROF_GIL=1`: counted, not recorded; the kernel time that follows goes
            // with the next sample, not to this thread's earlier stack.
            stats.gil_free_ticks.fetch_add(weight, Ordering::Relaxed);
            slot.last_cpu_leaf.store(0, Ordering::Relaxed);
            return (0, 0);
        }
        let dropped = || {
            stats.dropped_tree_full.fetch_add(1, Ordering::Relaxed);
            stats.dropped_ticks.fetch_add(weight, Ordering::Relaxed);
            (0, 0)
        };
        let Some(root) = self.tree_root(slot) else {
            return dropped();
        };
        stats
            .deepest
            .fetch_max(captured.len as u64, Ordering::Relaxed);
        match self
            .trees
            .record_from(&mut slot.path, root, &slot.out[..captured.len], 1, weight)
        {
            Some(leaf) => {
                stats.recorded_samples.fetch_add(1, Ordering::Relaxed);
                stats.recorded_ticks.fetch_add(weight, Ordering::Relaxed);
                stats
                    .recorded_ticks_squared
                    .fetch_add(weight.saturating_mul(weight), Ordering::Relaxed);
                slot.last_leaf.store(leaf, Ordering::Relaxed);
                if let Thread::Current = whose {
                    slot.last_cpu_leaf.store(leaf, Ordering::Relaxed);
                    slot.blocked_last.store(false, Ordering::Relaxed);
                    self.record_runnable(slot, leaf);
                }
            }
            None => return dropped(),
        }
        (captured.native, captured.python)
    }

    /// Wall mode: records the thread's time runnable that waits for its next CPU sample
    /// ([`Slot::runnable_pending`], ticks) as `<waiting: CPU>` under trace-tree node
    /// `node`: the sample's leaf, or at the thread's end its latest CPU sample's. From
    /// whoever holds the slot; async-signal-safe.
    pub(crate) fn record_runnable(&self, slot: &Slot, node: u32) {
        if slot.runnable_pending.load(Ordering::Relaxed) == 0 {
            return;
        }
        let ticks = slot.runnable_pending.swap(0, Ordering::Relaxed);
        self.record_waiting_cpu(Some(node), ticks);
    }

    /// Wall mode: records `ticks` of time runnable, waiting for a CPU, as a `<waiting:
    /// CPU>` frame under trace-tree node `node`, counted in the profile's total and in
    /// `waiting_ticks`; with no node (no root could be made) or the trees full, counted
    /// as dropped, as a dropped sample is. Async-signal-safe.
    pub(crate) fn record_waiting_cpu(&self, node: Option<u32>, ticks: u64) {
        if ticks == 0 {
            return;
        }
        let marker = [marker_key(Marker::WaitingCpu)];
        if node
            .and_then(|node| self.trees.record(node, &marker, 0, ticks))
            .is_some()
        {
            self.stats.ticks.fetch_add(ticks, Ordering::Relaxed);
            self.stats.waiting_ticks.fetch_add(ticks, Ordering::Relaxed);
        } else {
            self.stats.dropped_ticks.fetch_add(ticks, Ordering::Relaxed);
        }
    }
}

/// What [`Sampler::capture`] found, to be counted once the sample is kept.
struct Captured {
    /// Native frames unwound.
    native: u64,
    /// Python frames read.
    python: u64,
    /// Frames of the mixed call stack in `Slot::out`.
    len: usize,
    /// The native unwind reached the thread's root.
    complete: bool,
    /// Some native frame was found by a heuristic step (code without CFI: a frame-pointer
    /// step or a stack scan).
    approximate: bool,
    /// Python frames were spliced into the native stack.
    with_python: bool,
    /// The walk of the Python frames was abandoned after a read that failed validation.
    python_abandoned: bool,
    /// A group of Python frames found no native evaluator frame to sit under (left out).
    python_unplaced: bool,
    /// The thread held the GIL, or `PYIGPROF_GIL=1` is not asked for (or cannot be told).
    holds_gil: bool,
}
