//! The sampler: a CPU-time timer that sends `SIGPROF`, and the handler that turns each
//! signal into one counted call stack.
//!
//! Timers (shared/design/timers.md): one POSIX timer per thread, created by the thread
//! itself when it registers, on its own CPU clock (`CLOCK_THREAD_CPUTIME_ID`, or
//! `CLOCK_MONOTONIC` in wall mode), delivering `SIGPROF` to that thread
//! (`SIGEV_THREAD_ID`). So each thread's time is attributed to that thread. The kernel
//! checks CPU timers on its scheduler tick, so at rates above the tick rate several
//! expirations merge into one signal; a POSIX timer reports how many in `si_overrun`, and
//! each sample counts `1 + si_overrun` ticks. Profile time = ticks × period therefore
//! matches the time used, whatever the rate.
//!
//! Handler rules: no allocation, no locks, no C-API calls; memory comes from regions mapped
//! before sampling; every read of the interrupted program's memory is checked; `errno` is
//! preserved.

use crate::config::Clock;
use crate::frames::{marker_key, Marker};
use crate::mixed::{compose, Native, Python};
use crate::modules;
use crate::python::code::Codes;
use crate::python::stack::{walk, PyStack};
use crate::python::Runtime;
pub use crate::stats::Stats;
use crate::threads::{Slot, Slots};
use crate::trace::Trees;
use crate::unwind::{unwind, Regs};
use pyigprof_hooks::signals;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// `sigev_value` our timer's signals carry, to tell them from anybody else's `SIGPROF`.
const TIMER_COOKIE: usize = 0x7079_6967_7072_6f66; // "pyigprof"

/// Everything the handler uses, built by the constructor before the timer starts.
pub struct Sampler {
    /// Tick period in nanoseconds.
    pub period_ns: u64,
    /// The clock each thread is sampled on.
    pub clock: Clock,
    /// All trace trees.
    pub trees: Trees,
    /// Per-thread state.
    pub slots: Slots,
    /// Captured code objects.
    pub codes: Codes,
    /// The CPython runtime, when the process is Python.
    pub python: Option<Runtime>,
    /// Counters of the sampler's own work.
    pub stats: Stats,
    restorer: AtomicU64,
    /// `pthread_key_t` whose destructor tells us a registered thread is exiting.
    exit_key: AtomicUsize,
}

const OFF: u8 = 0;
const SAMPLING: u8 = 1;
/// The program took `SIGPROF` over: no timer is armed again, not even in fork children.
const YIELDED: u8 = 2;

static SAMPLER: AtomicPtr<Sampler> = AtomicPtr::new(std::ptr::null_mut());
static STATE: AtomicU8 = AtomicU8::new(OFF);
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// The installed sampler, if any.
pub fn get() -> Option<&'static Sampler> {
    // SAFETY: set once from a leaked Box.
    unsafe { SAMPLER.load(Ordering::Acquire).as_ref() }
}

impl Sampler {
    /// Maps the sampler's memory. `None` when the kernel refuses the mappings.
    pub fn new(period_ns: u64, clock: Clock, python: Option<Runtime>) -> Option<Sampler> {
        Some(Sampler {
            period_ns,
            clock,
            trees: Trees::new(1 << 24)?,
            slots: Slots::new()?,
            codes: Codes::new(1 << 20, 256 << 20)?,
            python,
            stats: Stats::default(),
            restorer: AtomicU64::new(0),
            exit_key: AtomicUsize::new(usize::MAX),
        })
    }

    /// Installs `self` as the process's sampler and the `SIGPROF` handler. Returns an error
    /// message when the handler cannot be installed.
    pub fn install(self) -> Result<&'static Sampler, String> {
        let sampler: &'static Sampler = Box::leak(Box::new(self));
        SAMPLER.store(sampler as *const Sampler as *mut Sampler, Ordering::Release);
        // The handler, kept invisible to the program while it leaves SIGPROF alone
        // (hooks::signals); an inherited "ignore" is overridden.
        if !signals::guard(
            libc::SIGPROF,
            on_sigprof,
            libc::SA_RESTART,
            true,
            program_took_sigprof,
        ) {
            // SAFETY: installing a SA_SIGINFO handler with a valid function.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_sigprof as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                if signals::real_sigaction(libc::SIGPROF, &action, std::ptr::null_mut()) != 0 {
                    return Err(format!(
                        "cannot install the SIGPROF handler: {}",
                        std::io::Error::last_os_error()
                    ));
                }
            }
        }
        // SAFETY: querying the installed action, then creating the exit key.
        unsafe {
            // glibc fills in its signal trampoline (`__restore_rt`) as sa_restorer.
            let mut installed: libc::sigaction = std::mem::zeroed();
            signals::real_sigaction(libc::SIGPROF, std::ptr::null(), &mut installed);
            sampler.restorer.store(
                installed.sa_restorer.map_or(0, |f| f as usize as u64),
                Ordering::Relaxed,
            );
            let mut key: libc::pthread_key_t = 0;
            if libc::pthread_key_create(&mut key, Some(thread_exiting)) == 0 {
                sampler.exit_key.store(key as usize, Ordering::Relaxed);
            }
        }
        STATE.store(SAMPLING, Ordering::Release);
        Ok(sampler)
    }

    /// Registers the calling thread and starts its timer (at thread start, and for the main
    /// thread in the constructor). Reports a failure to start the timer on stderr.
    pub fn register_current_thread(&self) {
        let mut failure = None;
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.slots.register_current(|slot| {
            if let Err(e) = self.arm(slot, tid) {
                failure = Some(e);
            }
        });
        let key = self.exit_key.load(Ordering::Relaxed);
        if key != usize::MAX {
            // A non-null value makes the key's destructor run when the thread exits.
            // SAFETY: a key we created.
            unsafe {
                libc::pthread_setspecific(
                    key as libc::pthread_key_t,
                    std::ptr::dangling::<libc::c_void>(),
                )
            };
        }
        if let Some(e) = failure {
            eprintln!("pyigprof: {e}; this thread is not sampled");
        }
    }

    /// Registers a thread that existed before the constructor (see [`crate::adopt`]):
    /// `thread` is its `pthread_t`, `tid` its kernel id, `bounds` its stack. Its timer is
    /// created here, on that thread's CPU clock; it is deleted when sampling stops (the
    /// thread's exit is not seen, and a dead thread's CPU clock no longer runs).
    pub fn register_existing_thread(
        &self,
        thread: usize,
        tid: libc::pid_t,
        bounds: (u64, u64),
    ) -> Result<(), String> {
        let mut result = Ok(());
        // SAFETY: the thread's timer is not armed yet, so the handler does not run for it.
        unsafe {
            self.slots
                .register(thread, Some(bounds), |slot| result = self.arm(slot, tid))
        };
        result
    }

    /// Creates and arms the timer of thread `tid` (its CPU clock, or the monotonic clock in
    /// wall mode) and stores it in its `slot`.
    fn arm(&self, slot: &Slot, tid: libc::pid_t) -> Result<(), String> {
        if STATE.load(Ordering::Acquire) != SAMPLING {
            return Ok(());
        }
        if slot.timer.load(Ordering::Acquire) != 0 {
            if slot.tid.load(Ordering::Relaxed) == tid {
                return Ok(());
            }
            // The slot's last owner was an adopted thread that ended, and a new thread got
            // its pthread_t.
            Sampler::disarm(slot);
        }
        let clock = match self.clock {
            Clock::Cpu => thread_cpu_clock(tid),
            Clock::Wall => libc::CLOCK_MONOTONIC,
        };
        // The first expiry at a random point of the first period: a thread that runs for
        // less than a period (thousands of short-lived threads) is then sampled with
        // probability (its time / period), so the expected ticks equal its time, instead
        // of never.
        let first = 1 + random(tid as u64) % self.period_ns;
        let timer = create_timer(
            "a sampling timer",
            clock,
            Some(tid),
            TIMER_COOKIE,
            first,
            self.period_ns,
        )?;
        slot.tid.store(tid, Ordering::Relaxed);
        slot.first_ns.store(first, Ordering::Relaxed);
        slot.armed_cpu_ns
            .store(clock_ns(clock).unwrap_or(0), Ordering::Relaxed);
        slot.ticks.store(0, Ordering::Relaxed);
        slot.last_leaf.store(0, Ordering::Relaxed);
        self.stats.threads.fetch_add(1, Ordering::Relaxed);
        // Kernel timer ids start at 0: the slot keeps id + 1.
        slot.timer.store(timer as usize + 1, Ordering::Release);
        Ok(())
    }

    /// Deletes the timer stored in `slot`, if any.
    fn disarm(slot: &Slot) {
        let timer = slot.timer.swap(0, Ordering::AcqRel);
        if timer != 0 {
            // SAFETY: a timer we created (stored as id + 1) and nobody else deletes (the swap
            // took it).
            unsafe { libc::timer_delete((timer - 1) as libc::timer_t) };
        }
    }

    /// Stops sampling: deletes the timer and waits for handlers in flight. Afterwards the
    /// trees can be read safely.
    pub fn stop(&self) {
        STATE.store(OFF, Ordering::Release);
        self.slots.for_each(Sampler::disarm);
        wait_for_handlers();
    }

    /// Starts sampling again after [`Sampler::stop`] (an `exec` that failed): re-arms the
    /// timer of every registered thread.
    pub fn resume(&self) {
        if STATE
            .compare_exchange(OFF, SAMPLING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        self.slots.for_each(|slot| {
            let tid = slot.tid.load(Ordering::Relaxed);
            if slot.ready.load(Ordering::Acquire)
                && slot.owner.load(Ordering::Relaxed) != 0
                && tid != 0
            {
                let _ = self.arm(slot, tid);
            }
        });
    }

    /// In a fork child: forget the parent's samples, and start a timer of our own (timers
    /// are not inherited by `fork`). Takes no lock.
    pub fn restart_after_fork(&self) {
        if STATE.load(Ordering::Acquire) == YIELDED {
            return;
        }
        STATE.store(OFF, Ordering::Release);
        self.trees.reset();
        self.slots.reset_after_fork();
        self.stats.reset();
        // No locks here: another thread of the parent may have held one at fork time.
        STATE.store(SAMPLING, Ordering::Release);
        let mut armed = false;
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.slots
            .register_current(|slot| armed = self.arm(slot, tid).is_ok());
        if !armed {
            let msg =
                b"pyigprof: cannot start a sampling timer in the fork child; it is not profiled\n";
            // SAFETY: writing a static buffer to stderr.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        }
    }

    /// Handles one signal (called from [`on_sigprof`]). Returns the numbers of native and
    /// Python frames recorded (for the handler's timing).
    fn sample(&self, info: *const libc::siginfo_t, uc: *const libc::ucontext_t) -> (u64, u64) {
        let weight = ticks_of(info);
        let stats = &self.stats;
        stats.samples.fetch_add(1, Ordering::Relaxed);
        stats.ticks.fetch_add(weight, Ordering::Relaxed);
        let dropped = |why: &AtomicU64| {
            why.fetch_add(1, Ordering::Relaxed);
            stats.dropped_ticks.fetch_add(weight, Ordering::Relaxed);
            (0, 0)
        };
        // SAFETY: pthread_self only reads the thread pointer.
        let thread = unsafe { libc::pthread_self() } as usize;
        // SAFETY: this is the owner thread and SIGPROF is blocked while the handler runs.
        let Some(slot) = (unsafe { self.slots.find_or_claim(thread) }) else {
            return dropped(&stats.dropped_no_slot);
        };
        slot.ticks.fetch_add(weight, Ordering::Relaxed);
        let mut root = slot.root.load(Ordering::Relaxed);
        if root == 0 {
            let Some(fresh) = self.trees.new_root() else {
                return dropped(&stats.dropped_tree_full);
            };
            slot.root.store(fresh, Ordering::Release);
            root = fresh;
        }
        // SAFETY: the kernel passes a valid ucontext to SA_SIGINFO handlers.
        let regs = unsafe { Regs::from_ucontext(uc) };

        // Native frames.
        let cache = slot.cache.load(Ordering::Acquire);
        let (native_len, complete, cut) = match (
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
                    &mut slot.native,
                );
                (u.frames, u.complete, u.cut)
            }
            _ => {
                slot.native[0] = regs.ip;
                (1, false, false)
            }
        };
        if complete {
            stats.complete.fetch_add(1, Ordering::Relaxed);
        }

        // Python frames.
        let mut python = None;
        if let Some(rt) = &self.python {
            let has_evaluator = slot.native[..native_len]
                .iter()
                .any(|&pc| rt.is_evaluator(pc));
            let tstate = if has_evaluator {
                rt.current_thread_state(&mut slot.thread_state)
            } else {
                0
            };
            if tstate != 0 {
                let out = PyStack {
                    keys: &mut slot.python,
                    group_ends: &mut slot.groups,
                };
                match walk(
                    tstate,
                    &rt.layout,
                    &rt.types,
                    &self.codes,
                    out,
                    &mut slot.text,
                ) {
                    Ok(w) => python = Some(w),
                    Err(_) => {
                        stats.python_abandoned.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        let python_len = python.as_ref().map_or(0, |w| w.frames as u64);

        let native = Native {
            frames: &slot.native[..native_len],
            complete,
            cut,
        };
        let composed = match (&self.python, python) {
            (Some(rt), Some(w)) => {
                let py = Python {
                    keys: &slot.python[..w.frames],
                    group_ends: &slot.groups[..w.groups],
                    truncated: w.truncated,
                };
                let c = compose(&native, Some(&py), |pc| rt.is_evaluator(pc), &mut slot.out);
                if c.paired > 0 {
                    stats.with_python.fetch_add(1, Ordering::Relaxed);
                }
                if c.evaluators != w.groups {
                    stats.python_mismatches.fetch_add(1, Ordering::Relaxed);
                }
                c
            }
            _ => compose(&native, None, |_| false, &mut slot.out),
        };
        stats
            .deepest
            .fetch_max(composed.len as u64, Ordering::Relaxed);
        match self
            .trees
            .record_from(&mut slot.path, root, &slot.out[..composed.len], 1, weight)
        {
            Some(leaf) => slot.last_leaf.store(leaf, Ordering::Relaxed),
            None => return dropped(&stats.dropped_tree_full),
        }
        (native_len as u64, python_len)
    }

    /// The calling thread is ending (its exit key's destructor, `SIGPROF` blocked): stops
    /// its timer and counts the ticks of the expirations the kernel had not delivered yet.
    ///
    /// The kernel checks a thread's CPU timer on its tick (every 4 ms at 250 Hz), so a
    /// thread that ends a few milliseconds after an expiry loses that signal: a thread
    /// living less than a tick is mostly never sampled. From the thread's CPU time, the
    /// random first expiry and the period, the expirations that occurred are known exactly;
    /// those not delivered are added as ticks (without samples) to the thread's latest
    /// sample, or to an `<unsampled thread time>` marker when it has none, so the profile's
    /// total stays equal to the CPU time. (Wall-clock timers fire precisely: no correction.)
    fn thread_ending(&self, slot: &Slot) {
        Sampler::disarm(slot);
        let tid = slot.tid.load(Ordering::Relaxed);
        if self.clock != Clock::Cpu || tid == 0 || STATE.load(Ordering::Acquire) != SAMPLING {
            return;
        }
        let Some(now) = clock_ns(thread_cpu_clock(tid)) else {
            return;
        };
        let ran = now.saturating_sub(slot.armed_cpu_ns.load(Ordering::Relaxed));
        let first = slot.first_ns.load(Ordering::Relaxed);
        let expirations = if ran >= first {
            (ran - first) / self.period_ns + 1
        } else {
            0
        };
        let missed = expirations.saturating_sub(slot.ticks.load(Ordering::Relaxed));
        if missed == 0 {
            return;
        }
        self.stats
            .unsampled_ticks
            .fetch_add(missed, Ordering::Relaxed);
        self.stats.ticks.fetch_add(missed, Ordering::Relaxed);
        let leaf = slot.last_leaf.load(Ordering::Relaxed);
        if leaf != 0 {
            self.trees
                .node(leaf)
                .ticks
                .fetch_add(missed, Ordering::Relaxed);
            return;
        }
        let mut root = slot.root.load(Ordering::Relaxed);
        if root == 0 {
            let Some(fresh) = self.trees.new_root() else {
                return;
            };
            slot.root.store(fresh, Ordering::Release);
            root = fresh;
        }
        let marker = [marker_key(Marker::Unsampled)];
        let _ = self.trees.record(root, &marker, 0, missed);
    }
}

/// The CPU clock of thread `tid` (`MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)` of the
/// kernel's posix-timers.h, as glibc's `pthread_getcpuclockid` computes it).
fn thread_cpu_clock(tid: libc::pid_t) -> libc::clockid_t {
    (!tid << 3) | 6
}

/// The time of `clock` in nanoseconds. Async-signal-safe.
fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The program installed a `SIGPROF` handler of its own: it wins; sampling stops, and the
/// profile written at exit covers the time before.
fn program_took_sigprof(_signal: libc::c_int) {
    if let Some(sampler) = get() {
        sampler.stop();
        STATE.store(YIELDED, Ordering::Release);
        eprintln!(
            "pyigprof: the program installed its own SIGPROF handler; sampling stopped \
             (the profile covers the time before)"
        );
    }
}

/// Creates and arms a POSIX timer on `clock` that sends `SIGPROF` carrying `cookie` in
/// `si_value` — to thread `tid` (`SIGEV_THREAD_ID`), or to the process when `None` — first
/// after `first_ns`, then every `period_ns` nanoseconds. The error ("cannot create/arm
/// `what`: …") says which step failed.
pub fn create_timer(
    what: &str,
    clock: libc::clockid_t,
    tid: Option<libc::pid_t>,
    cookie: usize,
    first_ns: u64,
    period_ns: u64,
) -> Result<libc::timer_t, String> {
    let timespec = |ns: u64| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: plain timer_create/timer_settime calls with initialised structures.
    unsafe {
        let mut event: libc::sigevent = std::mem::zeroed();
        event.sigev_signo = libc::SIGPROF;
        event.sigev_value = libc::sigval {
            sival_ptr: cookie as *mut libc::c_void,
        };
        match tid {
            Some(tid) => {
                event.sigev_notify = libc::SIGEV_THREAD_ID;
                event.sigev_notify_thread_id = tid;
            }
            None => event.sigev_notify = libc::SIGEV_SIGNAL,
        }
        let mut timer: libc::timer_t = std::ptr::null_mut();
        if libc::timer_create(clock, &mut event, &mut timer) != 0 {
            return Err(format!(
                "cannot create {what}: {}",
                std::io::Error::last_os_error()
            ));
        }
        let spec = libc::itimerspec {
            it_interval: timespec(period_ns),
            it_value: timespec(first_ns),
        };
        if libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) != 0 {
            let err = std::io::Error::last_os_error();
            libc::timer_delete(timer);
            return Err(format!("cannot arm {what}: {err}"));
        }
        Ok(timer)
    }
}

/// A pseudo-random number from `seed` and the monotonic clock (splitmix64).
fn random(seed: u64) -> u64 {
    let now = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0);
    let mut z = seed ^ now.wrapping_mul(1_000_000_007);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Destructor of the exit key: a registered thread is exiting; stop its timer.
extern "C" fn thread_exiting(_value: *mut libc::c_void) {
    if let Some(sampler) = get() {
        sampler
            .slots
            .unregister_current(|slot| sampler.thread_ending(slot));
    }
}

/// How many ticks a signal stands for: 1 plus the expirations the kernel merged into it.
fn ticks_of(info: *const libc::siginfo_t) -> u64 {
    // SAFETY: the kernel passes a valid siginfo; for SI_TIMER signals si_overrun is the int
    // at offset 20 (after si_signo, si_errno, si_code, padding, si_tid).
    unsafe {
        if (*info).si_code == libc::SI_TIMER {
            let overrun = *(info as *const u8).add(20).cast::<i32>();
            1 + overrun.max(0) as u64
        } else {
            1
        }
    }
}

/// Whether the signal was sent by a sampling timer (si_value carries our cookie).
fn is_ours(info: *const libc::siginfo_t) -> bool {
    is_timer_with(info, TIMER_COOKIE)
}

/// Whether the signal was sent by a POSIX timer whose `si_value` is `cookie`.
fn is_timer_with(info: *const libc::siginfo_t, cookie: usize) -> bool {
    // SAFETY: for SI_TIMER signals si_value is at offset 24 (after si_tid, si_overrun).
    unsafe {
        (*info).si_code == libc::SI_TIMER && *(info as *const u8).add(24).cast::<usize>() == cookie
    }
}

pub extern "C" fn on_sigprof(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    uc: *mut libc::c_void,
) {
    // SAFETY: __errno_location is the calling thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    if STATE.load(Ordering::Acquire) == SAMPLING && is_ours(info) {
        if let Some(sampler) = get() {
            let start = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0);
            let (native, python) = sampler.sample(info, uc.cast());
            let end = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(start);
            sampler
                .stats
                .handler
                .record(end.saturating_sub(start), native, python);
        }
    } else if crate::adopt::is_roll_call(info) {
        crate::adopt::answer(uc.cast());
    } else if is_timer_with(info, crate::lifecycle::DUMP_COOKIE) {
        crate::lifecycle::snapshot_from_handler();
    }
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
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
