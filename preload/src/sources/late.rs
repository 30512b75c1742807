//! Perf events started late: a process's first [`TIMERS_FIRST_NS`] of CPU time are sampled
//! on POSIX CPU timers, and the helper process that holds the perf events
//! ([`crate::sources::helper`], [`crate::sources::perf`]) starts only once the process has
//! run that long, or starts a thread (issue 57).
//!
//! Why: a `python -c pass` (10–12 ms of CPU here) paid 0.7 ms more on perf events than on
//! timers (`bench/startup`, 3.12, 200 rounds: +1.96 ms against +1.23): the helper's start
//! and end, the main thread's event opened from it, the first samples' wake-ups of it and
//! its looks re-arming the event (each a cross-CPU call). Test suites and build tools start
//! thousands of such processes. A process that ends within its first milliseconds never
//! starts the helper; one that lives on is sampled on perf events from then on, at the rate
//! asked for and at random instants (the timers fire on the kernel's 250 Hz tick: at
//! 1 kHz, 250 signals a CPU second carrying the expirations they merged).
//!
//! The switch, thread by thread, in the thread's own `SIGPROF` handler at its next timer
//! sample once the helper runs and has found that the event opens ([`confirm`],
//! [`on_timer_sample`]): the timer is deleted, the expirations it had not delivered are
//! added to that sample (as a thread's end counts them, [`crate::sources::timer`]), and
//! the helper is asked to open the thread's event,
//! its CPU time counted from the timer's last expiration, so that no time is lost or
//! counted twice. Threads that start once the helper runs get their event at once; a
//! thread that never runs again keeps its timer, which costs nothing while it does not
//! run. Whoever deletes a thread's timer (this switch, the thread's end, the end of
//! sampling) takes it from the slot first: only one of them counts its expirations.
//!
//! Only in cpu mode, sampling CPU time (`task-clock`): wall mode's helper samples blocked
//! threads from the start, and other events (`page-faults`, …) have no timer to stand for
//! them.

use crate::sampler::Sampler;
use crate::sources::timer::{self, clock_ns};
use crate::sources::{helper, perf};
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};

/// The process's CPU time sampled on POSIX timers before the helper process and the perf
/// events start, ns (counted in the ticks its samples took: every thread's). A
/// `python -c pass` takes 10–12 ms here; a program that imports numpy starts OpenBLAS's
/// threads, which start the helper at once.
pub const TIMERS_FIRST_NS: u64 = 20_000_000;

/// Perf events are not started late (they started with the process, or are not used).
const NOT_LATE: u8 = 0;
/// Threads are sampled on timers; the helper process has not started.
const WAITING: u8 = 1;
/// A thread started the helper process, which has not yet found that the event opens
/// ([`confirm`]): threads stay on their timers.
const STARTING: u8 = 2;
/// The helper process runs and the event opens: threads move to their perf events.
const STARTED: u8 = 3;
/// The helper process could not start, or the kernel refused the event: the threads stay
/// on their timers.
const FAILED: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(NOT_LATE);

/// Whether perf events start late under `config`: cpu mode sampling CPU time
/// (`task-clock`) with perf events on. Then the constructor neither probes the event
/// (`Trigger::choose`: 30–50 µs) nor starts the helper process: [`start_now`] starts it,
/// and it probes the event ([`confirm`]).
pub fn wanted(config: &crate::config::Config) -> bool {
    config.profile_cpu
        && config.perf_events
        && config.clock == crate::config::Clock::Cpu
        && config.event.is_time()
}

/// In the constructor, in place of starting the helper process: has threads sampled on
/// timers until [`start_now`].
pub fn defer() {
    helper::prepare(helper::Job::Events);
    STATE.store(WAITING, Ordering::Release);
}

/// Whether threads that register now get a POSIX timer although the trigger is a perf
/// event: the helper process has not started (or is starting, or failed to). At the end,
/// whether the process was sampled on timers only.
pub fn on_timers() -> bool {
    matches!(STATE.load(Ordering::Acquire), WAITING | STARTING | FAILED)
}

/// Whether perf events started late ([`TIMERS_FIRST_NS`] on timers first).
pub fn started_late() -> bool {
    STATE.load(Ordering::Acquire) == STARTED
}

/// The `errno` with which the kernel refused the event when the helper process probed it
/// ([`confirm`]; 0: not refused).
static REFUSED_ERRNO: AtomicI32 = AtomicI32::new(0);

/// The thread that started the helper process ([`start_now`]), whose event it probes.
static STARTED_BY: AtomicI32 = AtomicI32::new(0);

/// Starts the helper process now if perf events wait for it (a thread is starting, or the
/// process has run [`TIMERS_FIRST_NS`]). One caller starts it; others go on on timers. The
/// helper probes the event first ([`confirm`]); until it has, threads stay on their
/// timers. Async-signal-safe.
pub fn start_now(sampler: &'static Sampler) {
    if STATE
        .compare_exchange(WAITING, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    // SAFETY: gettid has no preconditions.
    STARTED_BY.store(unsafe { libc::gettid() }, Ordering::Release);
    if helper::start_prepared(sampler).is_err() {
        STATE.store(FAILED, Ordering::Release);
        // Async-signal-safe: the line is static and written without allocating.
        crate::messages::write_line(
            b"pyigprof: cannot start the keeper of the perf events; sampling stays on POSIX CPU timers\n",
        );
    }
}

/// In the helper process, before it serves the threads: when it was started late, opens
/// `event` on the thread that started it (the process's main thread if that one has ended)
/// and closes it again. The kernel refusing it (a container's seccomp filter,
/// `perf_event_paranoid` 3), the threads stay on their timers ([`refused`] says why) and
/// the helper ends; else they move to their events. Returns whether to serve. Opened from
/// the helper, not in the program's thread: a descriptor opened and closed in the
/// program's table while its other threads run could be the number one of them `dup2`s
/// onto in between, and the close would take theirs. Direct system calls only.
pub fn confirm(event: &perf::Event) -> bool {
    if STATE.load(Ordering::Acquire) != STARTING {
        return true; // not started late (or in a fork child whose parent's had started)
    }
    let mut opened = perf::open(event, STARTED_BY.load(Ordering::Acquire), u64::MAX >> 2);
    if opened == Err(libc::ESRCH) {
        opened = perf::open(event, helper::TARGET.load(Ordering::Acquire), u64::MAX >> 2);
    }
    match opened {
        Ok(fd) => {
            // SAFETY: closing the descriptor just opened, in the helper's own table.
            unsafe { helper::raw(libc::SYS_close, [fd as u64, 0, 0, 0]) };
            STATE.store(STARTED, Ordering::Release);
            true
        }
        Err(errno) => {
            REFUSED_ERRNO.store(errno, Ordering::Release);
            STATE.store(FAILED, Ordering::Release);
            false
        }
    }
}

/// The `errno` with which the kernel refused the perf event when the process had run long
/// enough to start it (the threads stayed on their timers), if it did.
pub fn refused() -> Option<i32> {
    match REFUSED_ERRNO.load(Ordering::Acquire) {
        0 => None,
        errno => Some(errno),
    }
}

/// In a fork child, whose parent's helper process is not its own: a child forked before
/// its parent's perf events started (or were confirmed) waits for its own
/// ([`TIMERS_FIRST_NS`] of its CPU time, or a thread), and no helper is started for it
/// now; one forked after has its helper started with it ([`helper::restart_after_fork`]).
/// Async-signal-safe.
pub fn reset_after_fork() {
    if STATE.load(Ordering::Acquire) == STARTING {
        STATE.store(WAITING, Ordering::Release);
        helper::forget_after_fork();
    }
}

/// For a sample of the calling thread's POSIX timer, worth `ticks`, in its `SIGPROF`
/// handler: when the trigger is a perf event started late, starts the helper process once
/// the process has run [`TIMERS_FIRST_NS`], and once the helper has confirmed the event
/// moves the thread to it. Returns the ticks to add to the sample: the expirations of the
/// timer the kernel had not delivered (0 when the thread stays on its timer). Looks the
/// thread's slot up only then: a process whose events were refused keeps its timers for
/// good. Async-signal-safe.
pub fn on_timer_sample(sampler: &'static Sampler, ticks: u64) -> u64 {
    let Some(event) = sampler.trigger.event() else {
        return 0;
    };
    if STATE.load(Ordering::Acquire) == WAITING {
        let ran = sampler.stats.ticks.load(Ordering::Relaxed) + ticks;
        if ran.saturating_mul(sampler.period_ns) < TIMERS_FIRST_NS {
            return 0;
        }
        start_now(sampler);
    }
    if STATE.load(Ordering::Acquire) != STARTED || !helper::running() || !crate::sampler::sampling()
    {
        return 0;
    }
    // SAFETY: pthread_self only reads the thread pointer; the owner thread, in its handler.
    let Some(slot) = (unsafe { sampler.slots.find_or_claim(libc::pthread_self() as usize) }) else {
        return 0;
    };
    if !timer::delete_timer(slot) {
        return 0; // the thread's end or the end of sampling took it
    }
    let Some(now) = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) else {
        return 0;
    };
    // The timer's expirations up to now (as a thread's end counts them), and the instant of
    // the last one, from which the event's samples count.
    let (expirations, last) = timer::expirations(slot, now, sampler.period_ns);
    let counted = slot.ticks.load(Ordering::Relaxed) + ticks;
    // False only when the helper has ended meanwhile (an `exec` on another thread): the
    // thread is then no longer sampled, as the others are not.
    perf::arm_after_timer(event, slot, slot.tid.load(Ordering::Relaxed), last);
    expirations.saturating_sub(counted)
}
