//! Each thread's sampling clock: registering threads, and arming, stopping and accounting
//! for what interrupts them — a POSIX timer (below: the default, and always in wall mode,
//! which adds the time threads spend blocked, [`crate::sources::wall`]) or, opt-in, a perf
//! event ([`crate::sources::perf`]). See [`crate::sources::Trigger`].
//!
//! Timers (shared/design/timers.md): one POSIX timer per thread, created by the thread
//! itself when it registers, on its own CPU clock (`CLOCK_THREAD_CPUTIME_ID`), delivering
//! `SIGPROF` to that thread (`SIGEV_THREAD_ID`). A CPU timer fires only while its thread
//! runs, so a thread blocked in a system call is never interrupted by it. So each thread's time is attributed to that thread. The kernel
//! checks CPU timers on its scheduler tick, so at rates above the tick rate several
//! expirations merge into one signal; a POSIX timer reports how many in `si_overrun`, and
//! each sample counts `1 + si_overrun` ticks (`ticks_of`). Profile time = ticks × period
//! therefore matches the time used, whatever the rate.

use crate::capture::frames::{marker_key, Marker};
use crate::record::threads::{Slot, CAPTURING, FREE};
use crate::sampler::{get, Sampler, OFF, SAMPLING, STATE, YIELDED};
use crate::signal_guard::wait_for_handlers;
use crate::sources::{late, perf, Trigger};
use std::sync::atomic::Ordering;

/// `sigev_value` our sampling timers' signals carry, to tell them from anybody else's
/// `SIGPROF` ("pyigprof").
pub(crate) const TIMER_COOKIE: usize = 0x7079_6967_7072_6f66;

impl Sampler {
    /// Registers the calling thread and starts its timer (at thread start, and for the main
    /// thread in the constructor). Reports a failure to start the timer on stderr. With
    /// perf events, `wait` says how long to wait for the helper process to open the
    /// thread's event (see [`perf::arm`]).
    pub fn register_current_thread(&self, wait: perf::Wait) {
        let mut failure = None;
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.slots.register_current(|slot| {
            slot.created_ns
                .store(pyigprof_hooks::threads::created_ns(), Ordering::Relaxed);
            if let Err(e) = self.arm(slot, tid, wait) {
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
            crate::notice!("pyigprof: {e}; this thread is not sampled");
        }
    }

    /// Registers a thread that existed before the constructor (see [`crate::sources::adopt`]):
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
            self.slots.register(thread, Some(bounds), |slot| {
                slot.created_ns.store(0, Ordering::Relaxed);
                result = self.arm(slot, tid, perf::Wait::ForAnswer);
                // Its time runnable before sampling began is not the profile's.
                slot.run_delay
                    .store(crate::record::threads::RUN_DELAY_UNSET, Ordering::Relaxed);
            })
        };
        result
    }

    /// Creates and arms the timer of thread `tid` (on its CPU clock) and stores it in its
    /// `slot`, or has its perf event opened (waiting for it as `wait` says).
    fn arm(&self, slot: &Slot, tid: libc::pid_t, wait: perf::Wait) -> Result<(), String> {
        if !self.cpu || STATE.load(Ordering::Acquire) != SAMPLING {
            return Ok(());
        }
        if sampled(slot) {
            if slot.tid.load(Ordering::Relaxed) == tid {
                return Ok(());
            }
            // The slot's last owner was an adopted thread that ended, and a new thread got
            // its pthread_t.
            self.disarm(slot);
        }
        // The wall-clock source may be capturing the slot's previous owner (a thread that
        // ended, whose pthread_t this thread reuses): it is done within microseconds.
        for _ in 0..10_000 {
            if slot.busy.load(Ordering::Acquire) != CAPTURING {
                break;
            }
            std::thread::yield_now();
        }
        slot.busy.store(FREE, Ordering::Release);
        slot.pending.store(0, Ordering::Relaxed);
        slot.running_periods.store(0, Ordering::Relaxed);
        slot.waited.store(0, Ordering::Relaxed);
        // A thread's run delay counts from its start (register_existing_thread: from
        // its first reading).
        slot.run_delay.store(0, Ordering::Relaxed);
        slot.run_delay_carry.store(0, Ordering::Relaxed);
        slot.run_delay_phase.store(0, Ordering::Relaxed);
        slot.forget_wall_nodes();
        // Everything a sample reads or counts into is set before the trigger starts: the
        // calling thread registering itself does not block SIGPROF meanwhile
        // ([`crate::record::threads::Slots::register_current`]).
        slot.ticks.store(0, Ordering::Relaxed);
        slot.last_leaf.store(0, Ordering::Relaxed);
        slot.last_cpu_leaf.store(0, Ordering::Relaxed);
        // With perf events started late, a timer until the helper process runs.
        if let (Trigger::Event(event), false) = (&self.trigger, late::on_timers()) {
            perf::arm(event, slot, tid, wait)?;
            slot.tid.store(tid, Ordering::Relaxed);
            self.stats.threads.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let clock = thread_cpu_clock(tid);
        // The first expiry at a random point of the first period: a thread that runs for
        // less than a period (thousands of short-lived threads) is then sampled with
        // probability (its time / period), so the expected ticks equal its time, instead
        // of never.
        let mut state = crate::sources::random::seed(tid as u64);
        let draw = crate::sources::random::uniform(&mut state) * self.period_ns as f64;
        let first = 1 + (draw as u64).min(self.period_ns - 1);
        slot.tid.store(tid, Ordering::Relaxed);
        slot.first_ns.store(first, Ordering::Relaxed);
        // Read before the timer starts, so the expirations counted from it
        // (`count_undelivered`) include the few microseconds creating the timer takes:
        // the thread's own CPU time all the same.
        slot.armed_cpu_ns
            .store(clock_ns(clock).unwrap_or(0), Ordering::Relaxed);
        let timer = create_timer(
            "a sampling timer",
            clock,
            Some(tid),
            TIMER_COOKIE,
            first,
            self.period_ns,
        )?;
        self.stats.threads.fetch_add(1, Ordering::Relaxed);
        // Kernel timer ids start at 0: the slot keeps id + 1.
        slot.timer.store(timer as usize + 1, Ordering::Release);
        Ok(())
    }

    /// Deletes the timer stored in `slot`, or closes its perf event, if any. Returns
    /// whether it deleted a timer (then its expirations are the caller's to count:
    /// [`Sampler::count_undelivered`]) and, for a perf event, what its thread counted after
    /// its last sample (ticks or events, −1 a tick to take back: see [`perf::disarm`]).
    fn disarm(&self, slot: &Slot) -> (bool, Option<i64>) {
        let timed = delete_timer(slot);
        let tail = self
            .trigger
            .event()
            .and_then(|event| perf::disarm(event, slot));
        (timed, tail)
    }

    /// Stops sampling: deletes the timer and waits for handlers in flight. Afterwards the
    /// trees can be read safely.
    ///
    /// The expirations of each thread's timer that the kernel had not delivered by then are counted as ticks (see `count_undelivered`): the
    /// profile's total stays the threads' CPU time, and a process that ran for several
    /// periods without a single signal delivered (one polling its own CPU clock) still has
    /// its time in its profile.
    pub fn stop(&self) {
        // SeqCst: the wall-clock source counts itself in flight, then checks the state.
        STATE.store(OFF, Ordering::SeqCst);
        self.slots.for_each(|slot| {
            let tid = slot.tid.load(Ordering::Relaxed);
            let (timed, tail) = self.disarm(slot);
            if tid != 0 && timed {
                // Its timer deleted: its expirations are counted up to this reading. A
                // thread that has ended has no clock.
                let now = clock_ns(thread_cpu_clock(tid)).unwrap_or(0);
                slot.stopped_cpu_ns.store(now, Ordering::Relaxed);
            }
            if let Some(tail) = tail {
                // Stored plus 2 (0: none; a tail is at least −1).
                slot.tail.store((tail + 2) as u64, Ordering::Relaxed);
            }
        });
        // Handlers already past the STATE check finish adding their ticks first.
        wait_for_handlers();
        self.slots.for_each(|slot| {
            let now = slot.stopped_cpu_ns.swap(0, Ordering::Relaxed);
            if now != 0 {
                self.count_undelivered(slot, now);
            }
            let tail = slot.tail.swap(0, Ordering::Relaxed);
            if tail != 0 {
                self.place_unsampled(slot, tail as i64 - 2, false);
            }
        });
    }

    /// Deletes the timers of adopted threads that have ended (`alive` says which kernel
    /// thread ids still exist): for `pyigprof attach`, whose library is not interposed on
    /// thread creation and exit, so that a server starting a thread per request does not
    /// keep a timer per thread it ever had. The thread's ticks stay in its tree.
    pub fn forget_ended_threads(&self, alive: impl Fn(libc::pid_t) -> bool) {
        self.slots.for_each(|slot| {
            let tid = slot.tid.load(Ordering::Relaxed);
            if tid != 0 && sampled(slot) && !alive(tid) {
                self.disarm(slot);
            }
        });
    }

    /// The kernel ids of the threads that are sampled ([`sampled`]).
    pub fn sampled_threads(&self) -> Vec<libc::pid_t> {
        let mut tids = Vec::new();
        self.slots.for_each(|slot| {
            if sampled(slot) {
                tids.push(slot.tid.load(Ordering::Relaxed));
            }
        });
        tids
    }

    /// Forgets every sample, thread and statistic of an earlier attachment window, sampling
    /// stopped ([`Sampler::stop`]): the next window's profile is its own. Slots stay
    /// claimed (a thread registered again takes its slot back).
    pub fn forget_window(&self) {
        self.trees.reset();
        self.slots.reset_after_fork();
        self.stats.reset();
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
                let _ = self.arm(slot, tid, perf::Wait::No);
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
        // Forked while the window writer had paused sampling: not paused in the child.
        crate::sampler::PAUSED.store(false, Ordering::SeqCst);
        crate::signal_guard::reset_after_fork();
        // The parent's perf events came with its descriptors: not this process's.
        self.slots.for_each(perf::forget_after_fork);
        self.trees.reset();
        crate::record::memory::reset();
        crate::sources::allocations::reset_after_fork();
        crate::sources::locks::reset_after_fork();
        self.slots.reset_after_fork();
        self.stats.reset();
        // No locks here: another thread of the parent may have held one at fork time.
        STATE.store(SAMPLING, Ordering::Release);
        // The parent's helper process (wall mode's sampler, or the keeper of the perf
        // events) is not this child's.
        crate::sources::late::reset_after_fork();
        crate::sources::helper::restart_after_fork(self);
        let mut armed = false;
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.slots
            .register_current(|slot| armed = self.arm(slot, tid, perf::Wait::No).is_ok());
        if !armed {
            // Async-signal-safe: the line is static and written without allocating.
            crate::messages::write_line(
                b"pyigprof: cannot start a sampling timer in the fork child; it is not profiled\n",
            );
        }
    }

    /// In a fork child that is not profiled (`PYIGPROF_ONLY_CHILD_OF`):
    /// sampling stays off, and nothing of the parent's is left for it to act on (its
    /// threads' exits delete no timer and close no event of the parent's, and no
    /// allocation is sampled). Takes no lock.
    pub fn leave_after_fork(&self) {
        STATE.store(OFF, Ordering::Release);
        crate::signal_guard::reset_after_fork();
        self.slots.for_each(perf::forget_after_fork);
        crate::sources::allocations::disable();
        crate::sources::allocations::reset_after_fork();
        crate::sources::locks::disable();
        self.slots.reset_after_fork();
    }

    /// The calling thread leaves the sampled threads: as when it ends,
    /// its timer or event is stopped and its slot freed. For a thread of the library's own
    /// that the preloaded `pthread_create` registered (the live requests' control thread).
    pub(crate) fn unregister_current_thread(&self) {
        self.slots
            .unregister_current(|slot| self.thread_ending(slot));
    }

    /// The calling thread is ending (its exit key's destructor): stops
    /// its timer and counts the ticks of the expirations the kernel had not delivered yet
    /// ([`Sampler::count_undelivered`]).
    fn thread_ending(&self, slot: &Slot) {
        // A thread of pyigprof's unregistered at its start (the window writer, the pusher,
        // the live requests' control thread) ends here again, through its exit key, with
        // no timer: its CPU time is not the program's.
        let (timed, tail) = self.disarm(slot);
        let tid = slot.tid.load(Ordering::Relaxed);
        // Counted in flight like a handler: the trees are not forgotten meanwhile
        // ([`Sampler::pause`]); while they are (a few ms at a window's end), the thread
        // waits, so that its tail is placed in the new trees.
        let _in_flight = loop {
            while crate::sampler::PAUSED.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let in_flight = crate::signal_guard::InFlight::enter();
            if !crate::sampler::PAUSED.load(Ordering::SeqCst) {
                break in_flight;
            }
        };
        if tid == 0 || STATE.load(Ordering::Acquire) != SAMPLING {
            return;
        }
        if self.clock == crate::config::Clock::Wall {
            crate::sources::wall::account_thread_end(self, slot);
        }
        if !timed {
            // A perf event's thread (or one of pyigprof's, with neither).
            self.place_unsampled(slot, tail.unwrap_or(0), false);
            return;
        }
        if let Some(now) = clock_ns(thread_cpu_clock(tid)) {
            self.count_undelivered(slot, now);
        }
    }

    /// Adds to `slot`'s thread the ticks of the expirations of its CPU timer up to its CPU
    /// clock reading `now` (ns) that the kernel did not deliver as signals. Its timer is
    /// deleted and no handler runs for it.
    ///
    /// The kernel checks a thread's CPU timer on its tick, so a thread that ends a few
    /// milliseconds after an expiry loses that signal: a thread living less than a tick is
    /// mostly never sampled. And expirations are lost while the thread runs, too: measured
    /// in this project's VM (Linux 6.18, 2 CPUs), a C thread on a 4 ms CPU timer got, for
    /// 50 ms of CPU time, no signal at all in 4 of 6 runs of a compute loop; for 200 ms,
    /// 49 of 50 ticks (signals plus `si_overrun`) in a compute loop but 23-49 in a loop of
    /// `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`. From the thread's CPU time, the random first
    /// expiry and the period, the expirations that occurred are known exactly; those not
    /// delivered are added as ticks without samples, so that the profile's total stays the
    /// CPU time: those that fit in the thread's last kernel tick ([`TAIL_NS`]) to its latest
    /// sample, where it most likely still was, the rest (and all of them when it has no
    /// sample) to an `<unsampled thread time>` marker, which says how much of its time the
    /// profile could not place.
    fn count_undelivered(&self, slot: &Slot, now: u64) {
        let (expirations, _) = expirations(slot, now, self.period_ns);
        let missed = expirations.saturating_sub(slot.ticks.load(Ordering::Relaxed));
        self.place_unsampled(slot, missed.min(i64::MAX as u64) as i64, true);
    }

    /// Counts `missed` ticks (or events) of `slot`'s thread that no sample took: a share of
    /// them, those of its last moments (the last kernel tick, [`TAIL_NS`], for a timer;
    /// up to two mean intervals for a perf event), to the thread's latest CPU sample, where it
    /// most likely still was, the rest (all of them when it has no sample) to an
    /// `<unsampled thread time>` marker. The thread's sampling has stopped: no handler
    /// runs for it. A negative `missed` (−1: a tick its last samples were rounded up by,
    /// [`perf::disarm`]) is taken back from its latest CPU sample.
    fn place_unsampled(&self, slot: &Slot, missed: i64, timed: bool) {
        if missed < 0 {
            let leaf = slot.last_cpu_leaf.load(Ordering::Relaxed);
            let back = missed.unsigned_abs();
            if leaf != 0 && self.trees.node(leaf).ticks.load(Ordering::Relaxed) >= back {
                self.trees
                    .node(leaf)
                    .ticks
                    .fetch_sub(back, Ordering::Relaxed);
                self.stats.ticks.fetch_sub(back, Ordering::Relaxed);
                self.stats.recorded_ticks.fetch_sub(back, Ordering::Relaxed);
            }
            return;
        }
        let mut missed = missed as u64;
        if missed == 0 {
            return;
        }
        self.stats.ticks.fetch_add(missed, Ordering::Relaxed);
        // The thread's latest CPU sample, not a wall-mode sample of it blocked: the time is
        // CPU time.
        let leaf = slot.last_cpu_leaf.load(Ordering::Relaxed);
        if leaf != 0 {
            let near = match &self.trigger {
                _ if timed => TAIL_NS.div_ceil(self.period_ns),
                Trigger::Event(e) if e.is_time() => 2,
                Trigger::Event(e) => 2 * e.period,
                Trigger::Timer { .. } => TAIL_NS.div_ceil(self.period_ns),
            };
            let tail = missed.min(near);
            self.trees
                .node(leaf)
                .ticks
                .fetch_add(tail, Ordering::Relaxed);
            self.stats.tail_ticks.fetch_add(tail, Ordering::Relaxed);
            missed -= tail;
            if missed == 0 {
                return;
            }
        }
        self.stats
            .unsampled_ticks
            .fetch_add(missed, Ordering::Relaxed);
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

/// The longest kernel tick (`HZ` = 100), ns: a CPU timer's expiry is noticed at most this
/// late, so the undelivered expirations of this much CPU time at a thread's end belong to
/// where its latest sample was.
const TAIL_NS: u64 = 10_000_000;

/// Creates the key whose destructor tells the sampler that a registered thread is
/// exiting ([`thread_exiting`]). Without it, threads' timers live until sampling stops.
pub(crate) fn watch_thread_exits(sampler: &Sampler) {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: creating a key with a plain extern "C" destructor.
    if unsafe { libc::pthread_key_create(&mut key, Some(thread_exiting)) } == 0 {
        sampler.exit_key.store(key as usize, Ordering::Relaxed);
    }
}

/// The CPU clock of thread `tid` (`MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)` of the
/// kernel's posix-timers.h, as glibc's `pthread_getcpuclockid` computes it).
pub(crate) fn thread_cpu_clock(tid: libc::pid_t) -> libc::clockid_t {
    (!tid << 3) | 6
}

/// The clock id of process `pid`'s CPU time: `CPUCLOCK_SCHED` of the whole process
/// (Linux `include/linux/posix-timers.h`: `(~pid << 3) | clock`, without the per-thread
/// bit [`thread_cpu_clock`] sets).
pub(crate) fn process_cpu_clock(pid: libc::pid_t) -> libc::clockid_t {
    (!pid << 3) | 2
}

/// Whether `slot`'s thread is sampled: its POSIX timer is armed, or its perf event is open
/// or asked for from the helper process. Async-signal-safe.
pub(crate) fn sampled(slot: &Slot) -> bool {
    slot.timer.load(Ordering::Acquire) != 0
        || slot.event_fd.load(Ordering::Acquire) != 0
        || perf::pending(slot)
}

/// Takes `slot`'s POSIX timer from it and deletes it. Returns whether it had one: whoever
/// takes it (the thread's end, the end of sampling, the move to a perf event started late:
/// [`crate::sources::late`]) is the one that counts its expirations. Async-signal-safe.
pub(crate) fn delete_timer(slot: &Slot) -> bool {
    let timer = slot.timer.swap(0, Ordering::AcqRel);
    if timer != 0 {
        // SAFETY: a timer we created (stored as id + 1) and nobody else deletes (the swap
        // took it).
        unsafe { libc::timer_delete((timer - 1) as libc::timer_t) };
    }
    timer != 0
}

/// The expirations of `slot`'s timer (armed at `Slot::armed_cpu_ns` of its thread's CPU
/// clock, first after `Slot::first_ns`, then every `period_ns`) up to its clock's reading
/// `now` (ns), and the CPU time of the last one (`now` when there was none).
pub(crate) fn expirations(slot: &Slot, now: u64, period_ns: u64) -> (u64, u64) {
    let armed = slot.armed_cpu_ns.load(Ordering::Relaxed);
    let first = slot.first_ns.load(Ordering::Relaxed);
    let ran = now.saturating_sub(armed);
    if ran < first {
        return (0, now);
    }
    let after_first = (ran - first) / period_ns.max(1);
    (
        after_first + 1,
        armed + first + after_first * period_ns.max(1),
    )
}

/// The time of `clock` in nanoseconds. Async-signal-safe.
pub(crate) fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
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

/// Destructor of the exit key: a registered thread is exiting; stop its timer.
extern "C" fn thread_exiting(_value: *mut libc::c_void) {
    // The exact totals of the lock profiler's waits and holds: the thread's own part.
    crate::sources::locks::flush_thread_tallies();
    if let Some(sampler) = get() {
        sampler.unregister_current_thread();
    }
}

/// How many ticks a signal stands for: 1 plus the expirations the kernel merged into it.
pub(crate) fn ticks_of(info: *const libc::siginfo_t) -> u64 {
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
