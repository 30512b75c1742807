//! The wall-clock source (`PYIGPROF_CLOCK=wall`): the time threads spend blocked, sampled
//! without interrupting them.
//!
//! A signal that reaches a thread blocked in a system call interrupts the call: a pipe
//! `write` returns short, `pause`, `nanosleep`, `usleep` and `select` return `EINTR`, and
//! code that does not retry (CPython's unbuffered stdout, libc's `sleep`, SQLite's busy
//! timeout) goes wrong. So wall mode sends no signal a CPU timer would not: each thread's
//! CPU timer ([`crate::sources::timer`], which fires only while the thread runs) samples
//! its running time as in CPU mode, and a *sampler process* samples the rest: a `clone`
//! that shares the program's memory but is neither one of its threads (CPython 3.12+
//! counts threads to warn about `os.fork()`) nor a child it can wait for (`spawn`).
//! Every period it reads each sampled thread's `/proc/<pid>/task/<tid>/syscall`; a thread
//! blocked in a
//! system call (`<nr> <args…> <sp> <pc>`) had its user registers saved by the kernel at
//! the call, and a thread that does not run changes neither its stack nor its Python
//! frames. Its call stack is captured from here (`Sampler::sample_blocked`), unwound from
//! that stack pointer and instruction pointer (RBP unknown: `UNKNOWN_BP`), with its
//! Python frames read from its thread state; the file is read again afterwards, and if
//! the thread ran meanwhile the capture is dropped. Reads of its memory cannot fault
//! ([`crate::capture::probe`]: its stack may be unmapped if it ends meanwhile).
//!
//! Each pass also reads each thread's `schedstat` (time on a CPU, run delay): its time
//! runnable without a CPU is counted as `<waiting: CPU>`, and its time blocked (its
//! elapsed time less both) weighs its samples blocked ([`visit`], [`account`]); its CPU
//! time is its CPU sampler's. So a thread's ticks add up to its elapsed time (the passes
//! come at random intervals around the period). A wait between two passes that found the
//! thread running goes under its latest sample (`<waiting: between samples>` below a CPU
//! sample), once a pass finds it on a CPU rather than runnable ([`on_a_cpu_now`]).
//! Without `schedstat`, a blocked pass counts the periods since the last, and periods its
//! CPU sampler did not count are added to its latest sample ([`count_waiting`]).

use crate::capture::frames::marker_key;
use crate::capture::unwind::{Regs, UNKNOWN_BP};
use crate::capture::waits::Call;
use crate::record::threads::{Slot, CAPTURING, FREE, RUN_DELAY_UNSET};
use crate::sampler::{Sampler, SAMPLING, STATE};
use crate::signal_guard::InFlight;
use crate::sources::helper::{self, raw};
use crate::sources::timer::clock_ns;
use std::sync::atomic::Ordering;

/// Starts the wall-clock source: its passes in the helper process, which also keeps the
/// perf events when they sample the running threads (`Job::WallAndEvents`, started
/// before the threads register). The threads' key slots must have been found
/// (`find_key_slots`). Not from a signal handler.
pub fn start(sampler: &'static Sampler) -> Result<(), String> {
    if sampler.trigger.event().is_some() {
        return Ok(());
    }
    helper::start(sampler, helper::Job::Wall)
}

/// The source's loop: one pass over the sampled threads after each interval, drawn at
/// random around the period ([`crate::sources::random::interval`]) so that a program that
/// blocks periodically cannot stay in step with the passes. Each pass counts the wall time
/// since the previous one, in ticks of the period (the remainder carried to the next pass):
/// time overslept is counted too.
pub(crate) fn run(sampler: &Sampler) {
    // Running threads sampled on perf events: their keeper works between the passes.
    let mut keeper = match helper::job() {
        helper::Job::WallAndEvents => crate::sources::perf::Keeper::start(sampler),
        _ => None,
    };
    let period = sampler.period_ns;
    let mut state = crate::sources::random::seed(period);
    let mut last = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0);
    let mut next = last + crate::sources::random::interval(&mut state, period, 1);
    let mut carry = 0;
    let mut pass = 0u64;
    let mut line = [0u8; 256];
    let mut again = [0u8; 256];
    loop {
        if !wait_until(next, sampler, keeper.as_mut()) {
            return;
        }
        let now = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(next);
        let elapsed = now.saturating_sub(last) + carry;
        let periods = elapsed / period;
        carry = elapsed % period;
        last = now;
        next = now + crate::sources::random::interval(&mut state, period, 1);
        if periods == 0 {
            continue;
        }
        let in_flight = InFlight::enter();
        if crate::sampler::PAUSED.load(Ordering::SeqCst) {
            // The trace trees are being forgotten between two windows: these periods are
            // the next pass's (a few ms later), not lost.
            carry += periods * period;
            continue;
        }
        pass += 1;
        if STATE.load(Ordering::SeqCst) == SAMPLING {
            // SAFETY: visit and sample_suspended_tasks use a slot's scratch only while they
            // hold it (CAPTURING).
            unsafe {
                sampler.slots.for_each_mut(|slot| {
                    if crate::sources::timer::sampled(slot) {
                        let u = crate::sources::random::uniform(&mut state);
                        visit(sampler, slot, periods, u, &mut line, &mut again);
                        sampler.sample_suspended_tasks(slot, periods, pass);
                    } else {
                        // Its thread has ended: the descriptor goes, as its perf event's
                        // does (the helper's table also holds the events).
                        forget_schedstat(slot);
                    }
                })
            };
        }
        drop(in_flight);
    }
}

/// One pass over one sampled thread. With the thread's `schedstat` readable (the usual
/// case), its time since the last pass is split exactly ([`account`]): its time runnable
/// goes to `<waiting: CPU>` at once ([`count_runnable`]), its time blocked (elapsed, less
/// on-CPU and runnable time) accrues until a pass finds it blocked in a system call and
/// samples its stack with that weight, and its CPU time is its CPU sampler's. Without
/// `schedstat`, a pass that finds it blocked counts the `periods` since the last pass, and
/// periods its CPU sampler did not count are estimated as runnable ([`count_waiting`]).
fn visit(
    sampler: &Sampler,
    slot: &mut Slot,
    periods: u64,
    u: f64,
    line: &mut [u8],
    again: &mut [u8],
) {
    let tid = slot.tid.load(Ordering::Relaxed);
    if tid == 0 || !slot.ready.load(Ordering::Acquire) {
        return;
    }
    // Its time runnable since the last pass is counted before this pass's sample (which
    // may move where that time goes); its state first, which says whether its time on a
    // CPU is up to date ([`account`]).
    let state = state_of(tid, line);
    let off_cpu = matches!(state, State::Blocked { .. });
    // (`u`'s low bits: a uniform draw of its own, for a first reading's phase.)
    let exact = account(sampler, slot, tid, off_cpu, again, (u * 65536.0).fract());
    if exact.is_some() {
        take_back(sampler, slot);
        if off_cpu {
            place_deferred(sampler, slot, (u * 4096.0).fract());
        }
    }
    let weight = match exact {
        Some(_) => blocked_ns(slot).max(0) as u64 / sampler.period_ns,
        None => periods,
    };
    let captured = match state {
        State::Blocked { len, call, sp, pc }
            if slot
                .busy
                .compare_exchange(FREE, CAPTURING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok() =>
        {
            let still_blocked = || {
                matches!(state_of(tid, again), State::Blocked { len: l, .. }
                    if again[..l] == line[..len])
            };
            // The slot is ours (CAPTURING) until released: the thread's handler does not
            // use it, and no other capture runs.
            let regs = Regs::new(pc, sp, UNKNOWN_BP);
            let why = marker_key(sampler.wait_reason(call));
            let captured = sampler.sample_blocked(slot, weight, regs, why, still_blocked);
            slot.busy.store(FREE, Ordering::Release);
            captured
        }
        // Running, runnable, or its handler runs now.
        _ => false,
    };
    match exact {
        Some(_) if captured => {
            add_blocked_ns(slot, -((weight * sampler.period_ns) as i64));
            let leaf = slot.last_leaf.load(Ordering::Relaxed);
            slot.pass_leaf.store(leaf, Ordering::Relaxed);
            if weight > 0 {
                gave(slot, leaf, weight);
            }
        }
        Some(reading) => {
            // Found running or runnable: the time it was blocked since the last pass ended
            // before this one. When the last pass found it blocked, that wait went on past
            // it: the time is that sample's, all of it (the part under a period rounded at
            // random; left for the next blocked sample, it went, in a thread that then ran
            // to its end, to its latest CPU sample). Else, found on a CPU after a CPU
            // sample, it waited between two passes that did not see it: a short wait of
            // the code it runs, under that sample ([`give_unseen`]); found runnable, once
            // it has run again ([`place_deferred`]). Else it waits for the next blocked
            // sample.
            let leaf = slot.pass_leaf.swap(0, Ordering::Relaxed);
            let weight = crate::sources::random::round_at_random(
                blocked_ns(slot).max(0) as u64,
                sampler.period_ns,
                u,
            );
            if weight > 0 && leaf != 0 {
                add_ticks(sampler, leaf, weight);
                add_blocked_ns(slot, -((weight * sampler.period_ns) as i64));
                gave(slot, leaf, weight);
            } else if leaf == 0 {
                let blocked_last = slot.blocked_last.load(Ordering::Relaxed);
                let at = Unseen {
                    leaf: match blocked_last {
                        true => slot.last_leaf.load(Ordering::Relaxed),
                        false => slot.last_cpu_leaf.load(Ordering::Relaxed),
                    },
                    blocked: blocked_last,
                };
                match reading.on_a_cpu {
                    Some(true) => {
                        // Only what this reading added (the blocked time left from before,
                        // a blocked sample's part of a period, is not this interval's:
                        // given here, at every pass until rounded up, it took a tick each
                        // time), with what passes that found it runnable kept, whose waits
                        // for a CPU this reading's run delay takes back.
                        let (at, kept) = take_deferred(slot).unwrap_or((at, 0));
                        let unseen = kept + reading.added;
                        if unseen > UNSEEN_WAIT_NS && !slot.event_gap_open.load(Ordering::Relaxed) {
                            give_unseen_wake(sampler, slot, at, reading.pending);
                            give_unseen(sampler, slot, at, unseen as u64, u);
                        }
                    }
                    Some(false) => defer(slot, at, reading.added),
                    None => {}
                }
            }
        }
        None if !captured => {
            slot.running_periods.fetch_add(periods, Ordering::Relaxed);
            count_waiting(sampler, slot);
        }
        None => {}
    }
}

/// Reads the `schedstat` of the thread of `slot` (kernel id `tid`): its run delay's growth
/// since the last reading is counted now ([`count_runnable`]); the wall time since the last
/// reading that knew its time on a CPU, less that time and its run delay since, was
/// blocked, and is added to [`Slot::blocked_ns`] for its blocked samples. The first
/// reading for a thread is the baseline (its run delay before it counts too, for a thread
/// started while sampling). `None` when the file cannot be read; `buf` is scratch; `u` a
/// uniform draw for the phase of a first reading ([`Slot::run_delay_phase`]).
///
/// Its time on a CPU comes from its `task-clock` event's count where it has one
/// ([`crate::sources::perf::thread_cpu_from_event`]), else from `schedstat` when the pass
/// found it off its CPU (`off_cpu`: blocked in a system call), and otherwise the reading
/// does not split its time. The kernel brings a running thread's `schedstat` time on a CPU
/// up to date at its ticks and switches only (it does not call `update_curr`, as the CPU
/// clock does): a thread that ran 3.7 ms without a switch showed no CPU time at three
/// readings, which counted that time blocked; a later reading took it back from the
/// blocked samples it had gone to, and at the thread's end what was left went to its last
/// CPU sample (a thread that slept 6 ms, then computed, had 6–10 % too much in its
/// computation).
///
/// Done holding the slot ([`CAPTURING`]), as the thread's own last accounting at its end
/// is ([`account_thread_end`]); while its handler holds it, nothing is read and the time
/// is the next pass's.
fn account(
    sampler: &Sampler,
    slot: &Slot,
    tid: libc::pid_t,
    off_cpu: bool,
    buf: &mut [u8],
    u: f64,
) -> Option<Reading> {
    let (on_cpu, run_delay) = schedstat(slot, tid, buf)?;
    // Its event's count, where it has one, is up to date even while it runs.
    let exact = sampler
        .trigger
        .event()
        .and_then(|event| crate::sources::perf::thread_cpu_from_event(event, slot));
    let on_a_cpu = exact.and_then(|event_cpu| on_a_cpu_now(slot, on_cpu, event_cpu, off_cpu));
    let schedstat_cpu = on_cpu;
    let (on_cpu, current) = match exact {
        Some(cpu) => (cpu, true),
        None => (on_cpu, off_cpu),
    };
    let now = clock_ns(libc::CLOCK_MONOTONIC)?;
    if slot
        .busy
        .compare_exchange(FREE, CAPTURING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Some(Reading {
            on_a_cpu: None,
            added: 0,
            pending: 0,
        });
    }
    let delay_before = slot.run_delay.load(Ordering::Relaxed);
    let first = slot.seen_at.load(Ordering::Relaxed) == 0;
    if first {
        let created = slot.created_ns.load(Ordering::Relaxed);
        let (at, cpu, delay) = if created != 0 && delay_before == 0 {
            // A thread started while sampling: its time so far counts from its creation
            // (its wait for a first CPU, in its run delay, included).
            slot.event_gap_open
                .store(exact.is_some(), Ordering::Relaxed);
            (created, 0, 0)
        } else {
            (now, on_cpu, run_delay)
        };
        slot.seen_at.store(at, Ordering::Relaxed);
        draw_run_delay_phase(slot, sampler.period_ns, (u * 4096.0).fract());
        slot.seen_cpu.store(cpu, Ordering::Relaxed);
        slot.seen_delay.store(delay, Ordering::Relaxed);
    }
    // The first reading of a thread started while sampling: its run delay so far is
    // mostly its wait for a first CPU after its creation (on a loaded machine, most of a
    // period), before any of its frames: at its tree's root, not at its latest sample.
    let pending = count_runnable(sampler, slot, run_delay, first, exact.is_some());
    match (on_a_cpu, off_cpu) {
        (Some(true), _) => slot.ran_since_woken.store(true, Ordering::Relaxed),
        (_, true) => slot.ran_since_woken.store(false, Ordering::Relaxed),
        _ => {}
    }
    let mut added = 0;
    if current && delay_before != RUN_DELAY_UNSET {
        // Signed: the kernel adds a wait for a CPU to the run delay when the wait ends, so
        // that a reading can count as blocked what a later one counts as runnable; the
        // later one then takes it back, and the sum over readings is exact.
        let seen_at = slot.seen_at.swap(now, Ordering::Relaxed);
        let seen_cpu = slot.seen_cpu.swap(on_cpu, Ordering::Relaxed);
        let seen_delay = slot.seen_delay.swap(run_delay, Ordering::Relaxed);
        let elapsed = now.saturating_sub(seen_at) as i64;
        let busy = on_cpu.saturating_sub(seen_cpu) + run_delay.saturating_sub(seen_delay);
        added = elapsed - busy.min(i64::MAX as u64) as i64;
        // A thread counted from its creation: what it ran between its arming and its
        // event's opening is in its `schedstat` time and in its first CPU sample's weight
        // (`perf::arm`), not in the event's count, so it counts as blocked here until a
        // reading finds the thread off its CPU, where the two differ by exactly that (on
        // a CPU, `schedstat` lags): then it is taken back. (Left as blocked, it went, as a
        // wait between two passes, under the thread's first CPU sample: 0.3 ms a thread
        // of a thread-per-request server, 1 % of its handlers' `cpu_part` counted twice.)
        if off_cpu && slot.event_gap_open.load(Ordering::Relaxed) {
            if let Some(event_cpu) = exact {
                let gap = schedstat_cpu.saturating_sub(event_cpu).min(i64::MAX as u64);
                added -= gap as i64;
                slot.event_gap_open.store(false, Ordering::Relaxed);
            }
        }
        add_blocked_ns(slot, added);
    }
    slot.busy.store(FREE, Ordering::Release);
    Some(Reading {
        on_a_cpu,
        added,
        pending,
    })
}

/// What a reading of a thread's `schedstat` found ([`account`]).
#[derive(Clone, Copy)]
struct Reading {
    /// Whether the thread is on a CPU now or runnable without one ([`on_a_cpu_now`]).
    on_a_cpu: Option<bool>,
    /// The blocked time this reading added to [`Slot::blocked_ns`] (ns; negative when it
    /// found run or runnable what the one before counted as blocked).
    added: i64,
    /// The ticks of its run delay this reading left for its next CPU sample
    /// ([`Slot::runnable_pending`]): taken for a preemption of the code it runs.
    pending: u64,
}

/// How far (ns) a thread's `schedstat` CPU time must be behind its event's count, less the
/// offset kept, for [`on_a_cpu_now`] to say it is on a CPU. The offset is not exactly
/// constant: at readings of blocked threads of a thread-per-request server (December 6,
/// 15,584 readings), the offset kept before predicted the new one within 2 µs in 72 %,
/// and was off by 16–18 µs on average in the others, either way. A running thread's lag is
/// the time since its last tick (up to 4 ms at the kernel's 250 Hz), so at 100 µs about 1
/// in 40 running threads is taken for runnable (its blocked time kept, not lost).
const ON_A_CPU_LAG_NS: u64 = 100_000;

/// Whether the thread of `slot`, found not blocked in a system call (`off_cpu` false), is
/// on a CPU now (`Some(true)`) or runnable without one (`Some(false)`), from its
/// `schedstat` CPU time `on_cpu` and its event's count `event_cpu` (ns): the kernel brings
/// `schedstat` up to date when the thread leaves its CPU, and for a running thread only at
/// its ticks, while the count is exact. Off its CPU, the two differ by what ran before its
/// event opened, which is kept ([`Slot::cpu_offset`]); on it, `schedstat` lags by the time
/// since its last tick or switch (a thread whose tick came within [`ON_A_CPU_LAG_NS`]
/// counts as runnable). Before a reading off its CPU, the largest difference seen stands
/// for that offset: never above it, so that a thread said to be on a CPU is. `None` for a
/// thread blocked (`off_cpu`).
fn on_a_cpu_now(slot: &Slot, on_cpu: u64, event_cpu: u64, off_cpu: bool) -> Option<bool> {
    if off_cpu {
        let offset = on_cpu.saturating_sub(event_cpu);
        slot.cpu_offset.store(offset + 1, Ordering::Relaxed);
        return None;
    }
    let seen = on_cpu.saturating_sub(event_cpu) + 1;
    let known = slot.cpu_offset.fetch_max(seen, Ordering::Relaxed).max(seen);
    Some((event_cpu + known - 1).saturating_sub(on_cpu) > ON_A_CPU_LAG_NS)
}

/// The calling thread is ending (wall mode): its time since the wall-clock source's last
/// reading of its `schedstat`, less its CPU time since (its CPU sampler's), and the
/// blocked time not yet given to a sample, go to its latest sample — the call it last
/// blocked in, mostly (a handler thread's last sleep), or where it last ran — so that its
/// ticks add up to its life (the file of an ended thread can no longer be read). Its run
/// delay since that reading is not known apart from its blocked time here. Waits for a
/// capture of the slot in progress (microseconds). Not from a signal handler.
pub(crate) fn account_thread_end(sampler: &Sampler, slot: &Slot) {
    let mut spins = 0;
    while slot
        .busy
        .compare_exchange(FREE, CAPTURING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        spins += 1;
        if spins > 10_000 {
            return;
        }
        std::thread::yield_now();
    }
    let seen_at = slot.seen_at.swap(0, Ordering::Relaxed);
    let now = clock_ns(libc::CLOCK_MONOTONIC);
    let cpu = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
    let leaf = slot.last_leaf.load(Ordering::Relaxed);
    // Time runnable that waited for a CPU sample the thread will not have: its latest.
    match slot.last_cpu_leaf.load(Ordering::Relaxed) {
        0 => {}
        cpu_leaf => sampler.record_runnable(slot, cpu_leaf),
    }
    if let (Some(now), Some(cpu), true) = (now, cpu, seen_at != 0 && leaf != 0) {
        let ran = cpu.saturating_sub(slot.seen_cpu.load(Ordering::Relaxed));
        // The run delay counted since that reading (at readings of it on a CPU).
        let delay = match slot.run_delay.load(Ordering::Relaxed) {
            RUN_DELAY_UNSET => 0,
            counted => counted.saturating_sub(slot.seen_delay.load(Ordering::Relaxed)),
        };
        let mut state = slot.random.load(Ordering::Relaxed);
        // What is left of its waits (under a period either way) is theirs: given to where
        // its blocked time last went, as `take_back` takes from there. (Given to its
        // latest CPU sample, a thread that slept 6 ms and then computed had 10 % too much
        // in its computation: its sleeps' remainders given there, their overshoots taken
        // back from the sleep.)
        let waits = match slot.given_node.load(Ordering::Relaxed) {
            0 => leaf,
            node => node,
        };
        settle(sampler, slot, waits, &mut state);
        // Its time since that reading neither on a CPU nor counted runnable. When the
        // last pass found it blocked, that wait went on past it, as a pass that finds it
        // running afterwards counts (`visit`): that sample's. Else mostly a wait for a CPU
        // as it ends (the thread its exit wakes, a joiner, takes its CPU; its run delay is
        // counted when it runs again, and it no longer does): `<waiting: CPU>` at its
        // tree's root, outside its code. (Given to its latest sample, a thread that slept
        // 6 ms, then computed, had 5-7 % too much in its computation.) Less than nothing
        // is taken back from where its blocked time last went.
        let end = now.saturating_sub(seen_at) as i64
            - ran.min(i64::MAX as u64) as i64
            - delay.min(i64::MAX as u64) as i64
            + slot.run_delay_carry.swap(0, Ordering::Relaxed) as i64
            - slot.run_delay_phase.swap(0, Ordering::Relaxed) as i64;
        let blocked_at = slot.pass_leaf.swap(0, Ordering::Relaxed);
        if end > 0 {
            let u = crate::sources::random::uniform(&mut state);
            let ticks = crate::sources::random::round_at_random(end as u64, sampler.period_ns, u);
            if blocked_at != 0 {
                if ticks > 0 {
                    add_ticks(sampler, blocked_at, ticks);
                    sampler.stats.tail_ticks.fetch_add(ticks, Ordering::Relaxed);
                }
            } else {
                sampler.record_waiting_cpu(sampler.tree_root(slot), ticks);
            }
        } else {
            add_blocked_ns(slot, end);
            settle(sampler, slot, waits, &mut state);
        }
        slot.random.store(state, Ordering::Relaxed);
    }
    slot.busy.store(FREE, Ordering::Release);
}

/// At a thread's end: gives its blocked time not yet given to a sample
/// ([`Slot::blocked_ns`]) to trace-tree node `node`, or takes what it owes back
/// ([`take_back`]), rounded at random, not down: a thread's last part of a period, counted
/// at each of a thousand short threads' ends, is not lost on average; nor is a part owed
/// kept. `state` is the random state.
fn settle(sampler: &Sampler, slot: &Slot, node: u32, state: &mut u64) {
    take_back(sampler, slot);
    let rest = slot.blocked_ns.swap(0, Ordering::Relaxed) as i64;
    let period = sampler.period_ns;
    let u = crate::sources::random::uniform(state);
    if rest < 0 && u * (period as f64) < rest.unsigned_abs() as f64 {
        add_blocked_ns(slot, -(period as i64));
        take_back(sampler, slot);
        slot.blocked_ns.store(0, Ordering::Relaxed);
    }
    let ticks = crate::sources::random::round_at_random(rest.max(0) as u64, period, u);
    if ticks > 0 {
        add_ticks(sampler, node, ticks);
        sampler.stats.tail_ticks.fetch_add(ticks, Ordering::Relaxed);
    }
}

/// Draws the phase (ns, `u` of the period `period_ns`, `u` uniform) from which the run
/// delay of the thread of `slot` is counted in periods ([`Slot::run_delay_phase`]), at its
/// first reading.
fn draw_run_delay_phase(slot: &Slot, period_ns: u64, u: f64) {
    let phase = (u * period_ns as f64) as u64;
    slot.run_delay_phase.store(phase, Ordering::Relaxed);
    slot.run_delay_carry.store(phase, Ordering::Relaxed);
}

/// Counts the time the thread of `slot` spent runnable, waiting for a CPU, since the last
/// pass: the growth of its run delay to `run_delay` (ns), in whole periods (the remainder
/// carried, [`Slot::run_delay_carry`]), as a `<waiting: CPU>` frame: under the call it woke
/// from ([`Slot::woke_node`]) when no reading found it on a CPU since one found it blocked
/// there ([`Slot::ran_since_woken`]; without its event's count to tell on a CPU from
/// runnable, `judged` false: when no CPU sample came since, [`Slot::blocked_last`]); else,
/// preempted while it ran, under its next CPU sample's stack
/// ([`Slot::runnable_pending`]); at its tree's root for its first reading (`at_start`) or
/// before any sample. Runnable time is in neither the CPU sampler's ticks nor the blocked
/// samples'. Returns the ticks left for the next CPU sample. The caller holds the slot
/// ([`CAPTURING`]).
fn count_runnable(
    sampler: &Sampler,
    slot: &Slot,
    run_delay: u64,
    at_start: bool,
    judged: bool,
) -> u64 {
    let base = slot.run_delay.load(Ordering::Relaxed);
    if base == RUN_DELAY_UNSET {
        slot.run_delay.store(run_delay, Ordering::Relaxed);
        return 0;
    }
    // Woken from the call it was last found blocked in, and not found on a CPU since:
    // the wait is its wake-up's, whatever CPU samples came since (the kernel counts a
    // wake-up's wait as the thread gets its CPU, before it runs any code). Without its
    // event's count to tell on a CPU from runnable (`judged` false): when no CPU sample
    // came since it was last found blocked.
    let woken = match judged {
        true => !slot.ran_since_woken.load(Ordering::Relaxed),
        false => slot.blocked_last.load(Ordering::Relaxed),
    };
    let woke = match woken {
        true => slot.woke_node.load(Ordering::Relaxed),
        false => 0,
    };
    let preempted = !at_start && woke == 0 && slot.last_cpu_leaf.load(Ordering::Relaxed) != 0;
    // In whole periods, the remainder carried to the next reading from a random phase
    // drawn at the thread's first ([`Slot::run_delay_phase`]): the tick of each period
    // goes to the reading whose wait crosses it, which for a phase uniform over the period
    // is each reading's own time in expectation, and the thread's total stays within a
    // period of its run delay. (From a phase of 0, a short thread's first period went to
    // its later, longer waits: a thread-per-request server's handlers, ~1 ms runnable
    // each, had `cpu_part` get 79 of its ~230 ticks of preemption. Rounded at random at
    // each reading instead, four busy threads' totals spread by ±2.5 % at 250 Hz.)
    let owed = run_delay.saturating_sub(base) + slot.run_delay_carry.load(Ordering::Relaxed);
    let ticks = owed / sampler.period_ns;
    slot.run_delay_carry
        .store(owed % sampler.period_ns, Ordering::Relaxed);
    if ticks == 0 {
        // Nothing to count.
    } else if at_start {
        sampler.record_waiting_cpu(sampler.tree_root(slot), ticks);
    } else if woke != 0 {
        sampler.record_waiting_cpu(Some(woke), ticks);
    } else if preempted {
        // Preempted while it ran. That wait lies among the CPU time its next CPU sample
        // weighs (the kernel adds it to the run delay only once the thread runs again),
        // and that sample records it under its own stack, as it records the CPU time
        // around it. (Put under the latest CPU sample or blocked call instead, a
        // thread-per-request server's `cpu_part` got 0.03 s of its 0.11 s runnable: that
        // node was mostly the GIL wait at the thread's start or a sample before the phase
        // began.)
        slot.runnable_pending.fetch_add(ticks, Ordering::Relaxed);
        slot.run_delay.store(run_delay, Ordering::Relaxed);
        return ticks;
    } else {
        // No CPU sample yet: the call it was last found blocked in, if any.
        let node = match slot.woke_node.load(Ordering::Relaxed) {
            0 => sampler.tree_root(slot),
            node => Some(node),
        };
        sampler.record_waiting_cpu(node, ticks);
    }
    slot.run_delay.store(run_delay, Ordering::Relaxed);
    0
}

/// The least blocked time (ns) that a reading finding a thread on a CPU, after one that
/// found it running, takes for a wait no pass saw ([`give_unseen`]): less is within the
/// readings' own error (`schedstat` and the event's count are read some microseconds
/// apart, and reading the count of a running thread is a cross-CPU call of ~20 µs), and
/// stays for the thread's next blocked sample.
const UNSEEN_WAIT_NS: i64 = 20_000;

/// A reading found the thread of `slot` on a CPU after a wait that no pass saw (between
/// two passes that found it running), and took the `ticks` of run delay it counted for a
/// preemption of the code it runs ([`count_runnable`]): most of it is that wait's wake-up
/// (the kernel counts the wait for a CPU after a wake-up as the thread gets its CPU), so it
/// goes where the wait goes ([`give_unseen`]), as `<waiting: CPU>`: under the call of the
/// blocked sample `at` names, or under its CPU sample. Left for the next CPU sample, a
/// thread that handed the GIL back and forth between passes had those wake-ups counted
/// in the code it ran next.
fn give_unseen_wake(sampler: &Sampler, slot: &Slot, at: Unseen, ticks: u64) {
    let node = match at.blocked {
        true => slot.woke_node.load(Ordering::Relaxed),
        false => at.leaf,
    };
    if ticks == 0 || node == 0 {
        return;
    }
    // The thread's own CPU sample may have recorded them since (the slot is not held).
    let Ok(before) =
        slot.runnable_pending
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |pending| {
                Some(pending.saturating_sub(ticks))
            })
    else {
        return;
    };
    sampler.record_waiting_cpu(Some(node), before.min(ticks));
}

/// Where a thread's waits that no pass saw go: under the leaf of its latest sample.
#[derive(Clone, Copy)]
struct Unseen {
    /// That sample's leaf (0: none yet).
    leaf: u32,
    /// The sample was of the thread blocked (its leaf a `<waiting: …>` frame, which gets
    /// the time: the thread woke from that wait and waited again before a CPU sample);
    /// else a CPU sample, under which a `<waiting: between samples>` frame gets it.
    blocked: bool,
}

/// Gives `ns` of the blocked time of the thread of `slot` (no more than it has not given
/// yet, in ticks of the period rounded at random with uniform `u`), found on a CPU by a
/// pass after one that found it running, to where it last was (`at`): waits that began and
/// ended between two passes (a GIL handed back and forth among threads that compute,
/// shorter than the passes' interval). Left for its next blocked sample, as before, they
/// went mostly to the long call that followed: a thread-per-request server's `cpu_part`
/// lost 3–4 % of its wall time to the sleep after it. Only once the thread is on its CPU
/// ([`on_a_cpu_now`]): a thread found runnable has its wait for a CPU so far counted as
/// blocked until the kernel adds it to its run delay, when it runs again; given at once,
/// that time was later owed and taken from the sleep (3 of 4 such gives were at passes
/// that found the thread runnable, and `cpu_part` came out +5 % over, `io_part` −4 %).
/// With the trees full, the time stays for the next blocked sample.
fn give_unseen(sampler: &Sampler, slot: &Slot, at: Unseen, ns: u64, u: f64) {
    let ns = ns.min(blocked_ns(slot).max(0) as u64);
    let ticks = crate::sources::random::round_at_random(ns, sampler.period_ns, u);
    if at.leaf == 0 || ticks == 0 {
        return;
    }
    let node = if at.blocked {
        Some(at.leaf)
    } else {
        let marker = [marker_key(crate::capture::frames::Marker::WaitingBetween)];
        sampler.trees.record(at.leaf, &marker, 0, 0)
    };
    if let Some(node) = node {
        add_ticks(sampler, node, ticks);
        add_blocked_ns(slot, -((ticks * sampler.period_ns) as i64));
    }
}

/// A pass found the thread of `slot` runnable, after a pass that found it running: the
/// blocked time its reading `added` (ns) may be its wait for a CPU so far, which the kernel
/// adds to its run delay only when it runs again, and the reading then takes back. Kept,
/// with where it goes (`at`, the first such pass's) and the thread's on-CPU time and run
/// delay at the first, until a pass finds it on a CPU ([`take_deferred`]) or blocked
/// ([`place_deferred`]).
fn defer(slot: &Slot, at: Unseen, added: i64) {
    if slot.deferred_leaf.load(Ordering::Relaxed) != 0 {
        slot.deferred_ns.fetch_add(added as u64, Ordering::Relaxed);
        return;
    }
    if at.leaf == 0 {
        return;
    }
    slot.deferred_ns.store(added as u64, Ordering::Relaxed);
    slot.deferred_blocked.store(at.blocked, Ordering::Relaxed);
    slot.deferred_cpu
        .store(slot.seen_cpu.load(Ordering::Relaxed), Ordering::Relaxed);
    slot.deferred_delay
        .store(slot.run_delay.load(Ordering::Relaxed), Ordering::Relaxed);
    slot.deferred_leaf.store(at.leaf, Ordering::Relaxed);
}

/// What [`defer`] kept for the thread of `slot`, if anything: where it goes and the blocked
/// time (ns, signed) its readings added; forgotten.
fn take_deferred(slot: &Slot) -> Option<(Unseen, i64)> {
    let leaf = slot.deferred_leaf.swap(0, Ordering::Relaxed);
    (leaf != 0).then(|| {
        let at = Unseen {
            leaf,
            blocked: slot.deferred_blocked.load(Ordering::Relaxed),
        };
        (at, slot.deferred_ns.swap(0, Ordering::Relaxed) as i64)
    })
}

/// A pass found the thread of `slot` blocked after passes that found it runnable: if it has
/// run since ([`defer`]), its wait for a CPU then has ended and is in its run delay, but
/// this reading's blocked time is mostly the wait it is in now, not told apart. What was
/// kept less the run delay added since (all of it) goes where it was to go
/// ([`give_unseen`], with uniform `u`); the rest to this pass's sample. Called before the pass's sample takes the blocked time.
fn place_deferred(sampler: &Sampler, slot: &Slot, u: f64) {
    if slot.seen_cpu.load(Ordering::Relaxed) <= slot.deferred_cpu.load(Ordering::Relaxed) {
        return;
    }
    let Some((at, kept)) = take_deferred(slot) else {
        return;
    };
    let delay = slot
        .run_delay
        .load(Ordering::Relaxed)
        .saturating_sub(slot.deferred_delay.load(Ordering::Relaxed));
    give_unseen(
        sampler,
        slot,
        at,
        (kept.max(0) as u64).saturating_sub(delay),
        u,
    );
}

/// Adds `ticks` without a sample to trace-tree node `node` and to the profile's total.
fn add_ticks(sampler: &Sampler, node: u32, ticks: u64) {
    sampler
        .trees
        .node(node)
        .ticks
        .fetch_add(ticks, Ordering::Relaxed);
    sampler.stats.ticks.fetch_add(ticks, Ordering::Relaxed);
}

/// Notes that `ticks` of blocked time went to node `leaf`: the latest attribution, which
/// a later reading may take back ([`take_back`]).
fn gave(slot: &Slot, leaf: u32, ticks: u64) {
    slot.given_node.store(leaf, Ordering::Relaxed);
    slot.given_ticks.store(ticks, Ordering::Relaxed);
}

/// When the thread's blocked time is negative by a period or more — a later reading found
/// that time run or runnable (the kernel counts a wait for a CPU when it ends, a running
/// thread's CPU time at its next tick) — takes the whole periods of it back from the
/// ticks its latest attribution gave ([`gave`]), where they were counted; a rest waits
/// for the next blocked time. Without this, a thread that ends owing (a thread-per-request
/// server's handler on a loaded machine) kept them: its sleep had 3-4 % too much.
fn take_back(sampler: &Sampler, slot: &Slot) {
    let period = sampler.period_ns;
    let owed = blocked_ns(slot).saturating_neg();
    let (node, given) = (
        slot.given_node.load(Ordering::Relaxed),
        slot.given_ticks.load(Ordering::Relaxed),
    );
    if owed < period as i64 || node == 0 || given == 0 {
        return;
    }
    let back = given.min(owed as u64 / period);
    let ticks = &sampler.trees.node(node).ticks;
    let back = back.min(ticks.load(Ordering::Relaxed));
    ticks.fetch_sub(back, Ordering::Relaxed);
    sampler.stats.ticks.fetch_sub(back, Ordering::Relaxed);
    slot.given_ticks.store(given - back, Ordering::Relaxed);
    add_blocked_ns(slot, (back * period) as i64);
}

/// [`Slot::blocked_ns`], an `i64` kept as its bits.
fn blocked_ns(slot: &Slot) -> i64 {
    slot.blocked_ns.load(Ordering::Relaxed) as i64
}

/// Adds `ns` (negative: takes back) to [`Slot::blocked_ns`].
fn add_blocked_ns(slot: &Slot, ns: i64) {
    slot.blocked_ns.fetch_add(ns as u64, Ordering::Relaxed);
}

/// Thread `tid`'s `(on-CPU ns, run delay ns)` since it started (the first two fields of
/// its `schedstat`, the kernel's `proc_pid_schedstat`), read through the descriptor kept
/// in its `slot` (opened on the first read for `tid`; one for a previous thread of the
/// slot is closed). `None` when the file cannot be opened (no `CONFIG_SCHED_INFO`, no
/// descriptor left) or read (the thread has ended). `buf` is scratch.
fn schedstat(slot: &Slot, tid: libc::pid_t, buf: &mut [u8]) -> Option<(u64, u64)> {
    let mut fd = slot.schedstat_fd.load(Ordering::Relaxed);
    if slot.schedstat_tid.load(Ordering::Relaxed) != tid {
        if fd != 0 {
            close(fd as u64 - 1);
        }
        fd = open_task_file(tid, b"/schedstat\0").map_or(0, |fd| fd as i32 + 1);
        slot.schedstat_fd.store(fd, Ordering::Relaxed);
        slot.schedstat_tid.store(tid, Ordering::Relaxed);
        slot.seen_at.store(0, Ordering::Relaxed);
        slot.blocked_ns.store(0, Ordering::Relaxed);
        slot.cpu_offset.store(0, Ordering::Relaxed);
        slot.event_gap_open.store(false, Ordering::Relaxed);
        slot.deferred_leaf.store(0, Ordering::Relaxed);
    }
    if fd == 0 {
        return None;
    }
    let len = read_from_start(fd as u64 - 1, buf)?;
    parse_schedstat(&buf[..len])
}

/// Closes the `schedstat` descriptor kept for the thread of `slot`, if any.
fn forget_schedstat(slot: &Slot) {
    let fd = slot.schedstat_fd.swap(0, Ordering::Relaxed);
    if fd != 0 {
        close(fd as u64 - 1);
        slot.schedstat_tid.store(0, Ordering::Relaxed);
    }
}

/// The first two fields of a `schedstat` line (`<on-CPU ns> <run delay ns>
/// <timeslices>`, the kernel's `proc_pid_schedstat`).
fn parse_schedstat(line: &[u8]) -> Option<(u64, u64)> {
    let mut fields = line.split(|&b| b == b' ').map(decimal_number);
    Some((fields.next()??, fields.next()??))
}

/// The unsigned decimal number that is all of `field`; `None` for an empty field, any other
/// byte, or a value beyond `u64`.
fn decimal_number(field: &[u8]) -> Option<u64> {
    if field.is_empty() {
        return None;
    }
    field.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
            .flatten()
    })
}

/// Periods of a running thread that its CPU sampler may not have counted yet: for a CPU
/// timer, whose expiry is noticed on the kernel's tick, the longest tick (10 ms, at `HZ` =
/// 100) plus one; for a perf event, which counts exactly, the longest random interval
/// and one re-arm ([`perf::longest_interval_ns`]), plus one.
///
/// [`perf::longest_interval_ns`]: crate::sources::perf::longest_interval_ns
fn slack(sampler: &Sampler) -> u64 {
    let period = sampler.period_ns;
    match sampler.trigger.event() {
        Some(event) => crate::sources::perf::longest_interval_ns(event).div_ceil(period) + 1,
        None => 10_000_000u64.div_ceil(period) + 1,
    }
}

/// A thread found not blocked for more periods than its CPU sampler counted ticks (beyond
/// the sampler's lag, [`slack`]) was runnable without a CPU for the difference: those
/// periods are wall time too, added to its latest sample, where it waited (counted as
/// `waiting_ticks`).
fn count_waiting(sampler: &Sampler, slot: &Slot) {
    let running = slot.running_periods.load(Ordering::Relaxed);
    let counted = slot.ticks.load(Ordering::Relaxed) + slot.waited.load(Ordering::Relaxed);
    let owed = running.saturating_sub(counted + slack(sampler));
    let leaf = slot.last_leaf.load(Ordering::Relaxed);
    if owed == 0 || leaf == 0 {
        return;
    }
    sampler
        .trees
        .node(leaf)
        .ticks
        .fetch_add(owed, Ordering::Relaxed);
    slot.waited.fetch_add(owed, Ordering::Relaxed);
    sampler.stats.ticks.fetch_add(owed, Ordering::Relaxed);
    sampler
        .stats
        .waiting_ticks
        .fetch_add(owed, Ordering::Relaxed);
}

/// What `/proc/self/task/<tid>/syscall` says of a thread.
enum State {
    /// In a system call: the line's length in the buffer, and the user stack and
    /// instruction pointers saved at its entry.
    Blocked {
        len: usize,
        call: Call,
        sp: u64,
        pc: u64,
    },
    /// Running, runnable, blocked outside a system call, or gone.
    Running,
}

/// Opens `/proc/<profiled pid>/task/<tid>/<file>` (`file` NUL-terminated) read-only in
/// the helper process's descriptor table; its descriptor, or `None`.
fn open_task_file(tid: libc::pid_t, file: &[u8]) -> Option<u64> {
    let mut path = [0u8; 64];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        path[n..n + bytes.len()].copy_from_slice(bytes);
        n += bytes.len();
    };
    put(b"/proc/");
    put(decimal(
        helper::TARGET.load(Ordering::Relaxed) as u32,
        &mut [0u8; 10],
    ));
    put(b"/task/");
    put(decimal(tid as u32, &mut [0u8; 10]));
    put(file);
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        let flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
        raw(
            libc::SYS_openat,
            [libc::AT_FDCWD as u64, path.as_ptr() as u64, flags, 0],
        )
    };
    (fd >= 0).then_some(fd as u64)
}

/// Reads the file open at `fd` from its start into `buf`: the bytes read, or `None`.
fn read_from_start(fd: u64, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: reading into our buffer.
    let got = unsafe {
        raw(
            libc::SYS_pread64,
            [fd, buf.as_mut_ptr() as u64, buf.len() as u64, 0],
        )
    };
    (got > 0).then_some(got as usize)
}

/// Closes the helper process's descriptor `fd`.
fn close(fd: u64) {
    // SAFETY: a descriptor of ours.
    unsafe { raw(libc::SYS_close, [fd, 0, 0, 0]) };
}

/// Reads `/proc/<profiled pid>/task/<tid>/syscall` into `buf` and parses it.
fn state_of(tid: libc::pid_t, buf: &mut [u8]) -> State {
    let Some(fd) = open_task_file(tid, b"/syscall\0") else {
        return State::Running;
    };
    let got = read_from_start(fd, buf);
    close(fd);
    let Some(len) = got else {
        return State::Running;
    };
    parse(&buf[..len]).map_or(State::Running, |(call, sp, pc)| State::Blocked {
        len,
        call,
        sp,
        pc,
    })
}

/// `value` in decimal, written at the end of `out`.
fn decimal(mut value: u32, out: &mut [u8; 10]) -> &[u8] {
    let mut at = out.len();
    loop {
        at -= 1;
        out[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &out[at..];
        }
    }
}

/// The call, stack and instruction pointers of a `/proc/<pid>/task/<tid>/syscall` line of
/// a thread in a system call (`<nr> <arg1> … <arg6> <sp> <pc>`, numbers after the first in
/// `0x` hex: the kernel's `proc_pid_syscall`): `(call, sp, pc)`; `None` for `running`, for
/// `-1 <sp> <pc>` (blocked, not in a system call) and for anything else.
pub(crate) fn parse(line: &[u8]) -> Option<(Call, u64, u64)> {
    let mut fields = line
        .split(|&b| b == b' ' || b == b'\n')
        .filter(|f| !f.is_empty());
    let nr = decimal_number(fields.next()?)?;
    let mut words = [0u64; 8];
    for word in &mut words {
        let f = fields.next()?;
        let hex = f.strip_prefix(b"0x")?;
        *word = hex.iter().try_fold(0u64, |v, &c| {
            let digit = (c as char).to_digit(16)? as u64;
            v.checked_mul(16)?.checked_add(digit)
        })?;
    }
    let mut args = [0u64; 6];
    args.copy_from_slice(&words[..6]);
    Some((Call { nr, args }, words[6], words[7]))
}

/// Waits until the monotonic clock reads `deadline_ns`, meanwhile doing the work of the
/// perf events' `keeper` if there is one, else sleeping on [`helper::QUIT`]; `false` when
/// told to end.
fn wait_until(
    deadline_ns: u64,
    sampler: &Sampler,
    mut keeper: Option<&mut crate::sources::perf::Keeper>,
) -> bool {
    // FUTEX_WAIT takes a relative timeout: recomputed from the clock on every wake-up.
    loop {
        if helper::quitting() {
            return false;
        }
        let seen = keeper.as_mut().map(|keeper| keeper.look(sampler));
        let now = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(deadline_ns);
        if now >= deadline_ns {
            return true;
        }
        // Returns on a wake (QUIT, or work for the keeper), the timeout, or a signal; the
        // loop checks again.
        match (keeper.as_mut(), seen) {
            (Some(keeper), Some(seen)) => keeper.wait(seen, deadline_ns - now),
            _ => helper::helper_wait(&helper::QUIT, 0, deadline_ns - now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_lines_give_the_saved_stack_and_instruction_pointers() {
        let blocked =
            b"230 0x1 0x1 0x7f4f15cadab0 0x0 0x0 0x7f4f1694e6e8 0x7f4f15cada70 0x7f4f162ed545\n";
        let (call, sp, pc) = parse(blocked).unwrap();
        assert_eq!((sp, pc), (0x7f4f15cada70, 0x7f4f162ed545));
        assert_eq!(call.nr, 230);
        assert_eq!(call.args, [1, 1, 0x7f4f15cadab0, 0, 0, 0x7f4f1694e6e8]);
        assert_eq!(parse(b"running\n"), None);
        assert_eq!(parse(b"-1 0x7ffd1234 0x55aa5678\n"), None);
        assert_eq!(parse(b"0 0x3 0x1 0x2000\n"), None);
        assert_eq!(
            parse(b"0 0x3 0x1 0x2000 0x0 0x0 0x0 0x7ffcef23d330 0xzz\n"),
            None
        );
    }

    #[test]
    fn short_preemptions_get_their_share_of_the_run_delay_next_to_long_wake_ups() {
        // 2,000 short threads at 1 kHz, each preempted four times for 50 µs while it runs,
        // then woken once after a wait for 800 µs: a fifth of their run delay is the
        // preemptions', which their next CPU samples get (`runnable_pending`). Counted in
        // periods from a phase of 0, every thread's one tick went to its wake-up.
        let period = 1_000_000;
        let sampler = Sampler::new(period, crate::config::Clock::Wall, None).unwrap();
        let slot = crate::record::threads::tests::zeroed_slot();
        let node = sampler.tree_root(&slot).unwrap();
        let mut state = 0x9e37_79b9_7f4a_7c15;
        let (mut preempted, mut woken) = (0, 0);
        for _ in 0..2_000 {
            slot.run_delay.store(0, Ordering::Relaxed);
            let u = crate::sources::random::uniform(&mut state);
            draw_run_delay_phase(&slot, period, u);
            slot.last_cpu_leaf.store(node, Ordering::Relaxed);
            slot.ran_since_woken.store(true, Ordering::Relaxed);
            let mut run_delay = 0;
            for _ in 0..4 {
                run_delay += 50_000;
                preempted += count_runnable(&sampler, &slot, run_delay, false, true);
            }
            slot.woke_node.store(node, Ordering::Relaxed);
            slot.ran_since_woken.store(false, Ordering::Relaxed);
            let before = sampler.stats.waiting_ticks.load(Ordering::Relaxed);
            run_delay += 800_000;
            assert_eq!(count_runnable(&sampler, &slot, run_delay, false, true), 0);
            woken += sampler.stats.waiting_ticks.load(Ordering::Relaxed) - before;
        }
        // Expected 400 and 1,600 ticks; the phases' spread is √(2000·0.2·0.8) ≈ 18.
        assert!(
            (330..=470).contains(&preempted),
            "{preempted} ticks of preemption"
        );
        assert!(
            (1_530..=1_670).contains(&woken),
            "{woken} ticks of wake-ups"
        );
        assert_eq!(
            slot.runnable_pending.load(Ordering::Relaxed),
            preempted,
            "the preemptions' ticks wait for the next CPU sample"
        );
    }

    #[test]
    fn a_thread_is_on_a_cpu_when_its_schedstat_lags_its_event_count() {
        let slot = crate::record::threads::tests::zeroed_slot();
        // Before a reading off its CPU: the largest difference seen so far (none here, and
        // schedstat 500 µs behind the count) stands for the offset.
        assert_eq!(on_a_cpu_now(&slot, 1_000_000, 1_500_000, false), Some(true));
        assert_eq!(
            on_a_cpu_now(&slot, 2_000_000, 2_000_000, false),
            Some(false)
        );
        // Off its CPU: schedstat 80 µs ahead of the count (what ran before the event
        // opened), kept.
        assert_eq!(on_a_cpu_now(&slot, 5_080_000, 5_000_000, true), None);
        // Runnable: schedstat exact, the same 80 µs ahead.
        assert_eq!(
            on_a_cpu_now(&slot, 7_080_000, 7_000_000, false),
            Some(false)
        );
        // Its tick 50 µs ago, within ON_A_CPU_LAG_NS: not told apart from runnable.
        assert_eq!(
            on_a_cpu_now(&slot, 7_030_000, 7_000_000, false),
            Some(false)
        );
        // Running for 300 µs since its last tick or switch.
        assert_eq!(on_a_cpu_now(&slot, 7_080_000, 7_300_000, false), Some(true));
        // A count behind schedstat (an event reopened): not on a CPU.
        assert_eq!(
            on_a_cpu_now(&slot, 9_000_000, 7_000_000, false),
            Some(false)
        );
    }

    #[test]
    fn schedstat_lines_give_the_time_on_a_cpu_and_the_run_delay() {
        assert_eq!(
            parse_schedstat(b"1234567 89012 34\n"),
            Some((1234567, 89012))
        );
        assert_eq!(parse_schedstat(b"5 0 1"), Some((5, 0)));
        assert_eq!(parse_schedstat(b"12 x3 1\n"), None);
        assert_eq!(parse_schedstat(b"12\n"), None);
        assert_eq!(parse_schedstat(b""), None);
        assert_eq!(parse_schedstat(b"99999999999999999999999 1 1\n"), None);
        // This thread's own: its CPU time grows by what it ran, once the kernel has
        // accounted for it (at a tick or a switch: the sleep; a running thread's value
        // lags, which `account` allows for).
        let read = || {
            let text = std::fs::read("/proc/thread-self/schedstat").unwrap();
            parse_schedstat(&text).unwrap()
        };
        let (cpu, _) = read();
        let start = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap();
        while clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap() < start + 20_000_000 {}
        std::thread::sleep(std::time::Duration::from_millis(1));
        let ran = read().0 - cpu;
        assert!((19_000_000..200_000_000).contains(&ran), "{ran} ns");
    }
}
