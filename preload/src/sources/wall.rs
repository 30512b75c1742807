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
//! A period in which a thread is blocked is one tick (the passes come at random intervals
//! around the period, each counting the wall time since the last); a period in which it
//! runs is counted by its CPU timer; periods in which it was not
//! blocked and its CPU timer counted nothing (it waited, runnable, for a CPU: a loaded
//! machine) are added to its latest sample (`count_waiting`). So a thread's ticks add up
//! to its wall time, less a few periods of timer lag at its end.

use crate::capture::frames::marker_key;
use crate::capture::unwind::{Regs, UNKNOWN_BP};
use crate::capture::waits::Call;
use crate::record::threads::{Slot, CAPTURING, FREE};
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
                        visit(sampler, slot, periods, &mut line, &mut again);
                        sampler.sample_suspended_tasks(slot, periods, pass);
                    }
                })
            };
        }
        drop(in_flight);
    }
}

/// One period of one sampled thread: its sample, if it is blocked in a system call; else
/// the period is its CPU timer's to count, and what that timer does not count is time it
/// waited for a CPU ([`count_waiting`]).
fn visit(sampler: &Sampler, slot: &mut Slot, periods: u64, line: &mut [u8], again: &mut [u8]) {
    let tid = slot.tid.load(Ordering::Relaxed);
    if tid == 0 || !slot.ready.load(Ordering::Acquire) {
        return;
    }
    let captured = match state_of(tid, line) {
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
            let captured = sampler.sample_blocked(slot, periods, regs, why, still_blocked);
            slot.busy.store(FREE, Ordering::Release);
            captured
        }
        // Running, runnable, or its handler runs now.
        _ => false,
    };
    if !captured {
        slot.running_periods.fetch_add(periods, Ordering::Relaxed);
        count_waiting(sampler, slot);
    }
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

/// Reads `/proc/<profiled pid>/task/<tid>/syscall` into `buf` and parses it.
fn state_of(tid: libc::pid_t, buf: &mut [u8]) -> State {
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
    put(b"/syscall\0");
    // SAFETY: a NUL-terminated path; reading into our buffer; closing what we opened.
    let len = unsafe {
        let flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
        let fd = raw(
            libc::SYS_openat,
            [libc::AT_FDCWD as u64, path.as_ptr() as u64, flags, 0],
        );
        if fd < 0 {
            return State::Running;
        }
        let got = raw(
            libc::SYS_read,
            [fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64, 0],
        );
        raw(libc::SYS_close, [fd as u64, 0, 0, 0]);
        if got <= 0 {
            return State::Running;
        }
        got as usize
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
    let nr = fields.next()?;
    if nr.is_empty() || !nr.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let nr = nr.iter().try_fold(0u64, |v, &c| {
        v.checked_mul(10)?.checked_add(u64::from(c - b'0'))
    })?;
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
}
