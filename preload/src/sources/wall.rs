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

use crate::capture::unwind::{Regs, UNKNOWN_BP};
use crate::record::threads::{Slot, CAPTURING, FREE};
use crate::sampler::{Sampler, SAMPLING, STATE};
use crate::signal_guard::InFlight;
use crate::sources::timer::clock_ns;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};

/// The sampler process's pid, 0 while there is none.
static HELPER: AtomicI32 = AtomicI32::new(0);
/// The profiled process's pid, whose threads the sampler process reads in `/proc`.
static TARGET: AtomicI32 = AtomicI32::new(0);
/// The sampler process's stack (mapped once: a fork child's sampler reuses its copy).
static STACK: AtomicUsize = AtomicUsize::new(0);
/// `SA_RESTORER` of the kernel's `struct sigaction` (`arch/x86/include/uapi/asm/signal.h`):
/// `sa_restorer` holds the signal trampoline.
const SA_RESTORER: u64 = 0x0400_0000;
/// Bytes of the sampler process's stack.
const STACK_BYTES: usize = 1 << 20;
/// Set (1) to end the sampler process; it waits on this word (a futex) between passes.
static QUIT: AtomicU32 = AtomicU32::new(0);
/// Longest wait for the sampler process to end before an `exec`, ns.
const END_WAIT_NS: u64 = 200_000_000;
/// Whether Yama restricts `ptrace` access to descendants (`kernel.yama.ptrace_scope` 1),
/// so that the profiled process must name the sampler process as one that may read its
/// threads' state (`PR_SET_PTRACER`).
static YAMA_RESTRICTED: AtomicBool = AtomicBool::new(false);

/// Starts the wall-clock source. Not from a signal handler.
pub fn start(sampler: &'static Sampler) -> Result<(), String> {
    crate::capture::python::find_key_slots();
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").unwrap_or_default();
    YAMA_RESTRICTED.store(scope.trim() == "1", Ordering::Relaxed);
    spawn(sampler)
}

/// In a fork child (the parent's sampler process is not its own): starts a new one.
pub(crate) fn restart_after_fork(sampler: &Sampler) {
    HELPER.store(0, Ordering::Relaxed);
    // SAFETY: the sampler is the published, leaked one ('static).
    let sampler: &'static Sampler = unsafe { &*(sampler as *const Sampler) };
    if spawn(sampler).is_err() && !crate::config::quiet() {
        let msg = b"pyigprof: cannot start the wall-clock sampler in the fork child; its blocked time is not sampled\n";
        // SAFETY: writing a static buffer to stderr.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
}

/// Before an `exec` (sampling stopped): ends the sampler process, which would otherwise
/// keep the old image's memory alive, and reaps it. It is told through `QUIT`, not by a
/// signal: a fork child that changed its user before exec (`subprocess`'s `user=`) may no
/// longer signal it. Waits at most `END_WAIT_NS`.
pub fn end_before_exec() {
    let helper = HELPER.swap(0, Ordering::AcqRel);
    if helper <= 0 {
        return;
    }
    QUIT.store(1, Ordering::Release);
    // SAFETY: waking the sampler process from its wait on QUIT; reaping our own child
    // (__WALL: it sends no SIGCHLD), without blocking.
    unsafe {
        let op = (libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG) as u64;
        raw(libc::SYS_futex, [QUIT.as_ptr() as u64, op, 1, 0]);
        // It ends within microseconds (it checks QUIT first thing and between passes):
        // yield to it rather than sleep, since a `subprocess` child may exec many times
        // (every directory of PATH).
        let deadline = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0) + END_WAIT_NS;
        loop {
            let mut status = 0;
            let reaped = libc::waitpid(helper, &mut status, libc::__WALL | libc::WNOHANG);
            if reaped != 0 || clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(u64::MAX) > deadline {
                break;
            }
            libc::sched_yield();
        }
    }
}

/// The `exec` failed: a sampler process again.
pub fn resume_after_failed_exec(sampler: &'static Sampler) {
    if HELPER.load(Ordering::Acquire) == 0 {
        let _ = spawn(sampler);
    }
}

/// Starts the sampler process: a `clone` that shares the profiled process's memory (it
/// reads the threads' stacks and frames, and records into their trace trees, as the
/// handler does) but is not one of its threads — a thread would show in
/// `/proc/self/task` and in the thread count CPython 3.12+ reads to warn that `os.fork()`
/// in a multi-threaded process may deadlock — and sends no `SIGCHLD` (`wait()` and
/// `waitpid(-1)` do not see it). It runs only code that uses no thread-local state of the C
/// library ([`sampler_process`]).
fn spawn(sampler: &'static Sampler) -> Result<(), String> {
    QUIT.store(0, Ordering::Release);
    let mut stack = STACK.load(Ordering::Acquire);
    if stack == 0 {
        stack = crate::mem::map_region(STACK_BYTES)
            .ok_or("cannot start the wall-clock sampler: no memory for its stack")?
            as usize;
        STACK.store(stack, Ordering::Release);
    }
    // SAFETY: getpid has no preconditions; clone with a stack of ours, whose child runs
    // sampler_process (no thread-local state) and shares our memory.
    let child = unsafe {
        TARGET.store(libc::getpid(), Ordering::Release);
        libc::clone(
            sampler_process,
            (stack + STACK_BYTES - 64) as *mut libc::c_void,
            libc::CLONE_VM,
            sampler as *const Sampler as *mut libc::c_void,
        )
    };
    if child <= 0 {
        return Err(format!(
            "cannot start the wall-clock sampler: {}",
            std::io::Error::last_os_error()
        ));
    }
    HELPER.store(child, Ordering::Release);
    if YAMA_RESTRICTED.load(Ordering::Relaxed) {
        // SAFETY: naming our own child as a process that may read our threads' state.
        unsafe { libc::prctl(libc::PR_SET_PTRACER, child as libc::c_ulong, 0, 0, 0) };
    }
    Ok(())
}

/// The sampler process. It shares the profiled process's memory but runs as a process of
/// its own: its signal dispositions are its own copy (every signal blocked but the faults
/// of its reads, recovered by [`crate::capture::probe`]), its file table its own copy
/// (closed at once), and it ends with its parent (`PR_SET_PDEATHSIG`). Its thread pointer is
/// the creating thread's, so it calls nothing that touches thread-local state (`errno`,
/// cancellation): system calls are made directly ([`raw`]).
extern "C" fn sampler_process(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the 'static sampler given to clone; the system calls below act on
    // this process only.
    unsafe {
        let sampler = &*(arg as *const Sampler);
        if QUIT.load(Ordering::Acquire) != 0 {
            raw(libc::SYS_exit, [0; 4]);
        }
        // Every signal blocked but the faults of its reads (SIGKILL, for PR_SET_PDEATHSIG,
        // cannot be blocked).
        let restorer = sampler.restorer.load(Ordering::Relaxed);
        let faults = (1u64 << (libc::SIGSEGV - 1)) | (1u64 << (libc::SIGBUS - 1));
        let blocked = match restorer {
            0 => !0u64,
            _ => !faults,
        };
        raw(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as u64,
                &blocked as *const u64 as u64,
                0,
                8,
            ],
        );
        let recover: [u64; 4] = [
            on_fault as *const () as u64,
            (libc::SA_SIGINFO | libc::SA_NODEFER) as u64 | SA_RESTORER,
            restorer,
            0,
        ];
        if restorer != 0 {
            for signal in [libc::SIGSEGV, libc::SIGBUS] {
                raw(
                    libc::SYS_rt_sigaction,
                    [signal as u64, recover.as_ptr() as u64, 0, 8],
                );
            }
        }
        raw(libc::SYS_close_range, [0, u32::MAX as u64, 0, 0]);
        raw(
            libc::SYS_prctl,
            [libc::PR_SET_PDEATHSIG as u64, libc::SIGKILL as u64, 0, 0],
        );
        if raw(libc::SYS_getppid, [0; 4]) != i64::from(TARGET.load(Ordering::Acquire)) {
            raw(libc::SYS_exit, [0; 4]);
        }
        run(sampler);
        raw(libc::SYS_exit, [0; 4]);
    }
    0
}

/// The sampler process's `SIGSEGV`/`SIGBUS` handler: a fault of a checked read is
/// recovered; any other ends the sampler process (not the profiled one).
extern "C" fn on_fault(_signal: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: what the kernel passed to the handler.
    if !unsafe { crate::capture::probe::fix_up(info, uc) } {
        // SAFETY: ends this process only (it is not a thread of the profiled one).
        unsafe { raw(libc::SYS_exit, [1, 0, 0, 0]) };
    }
}

/// A system call made directly (no `errno`, no cancellation point: nothing of the C
/// library's thread-local state, which the sampler process shares with the thread that
/// created it). Returns the kernel's result (negative: `-errno`).
///
/// # Safety
/// As the system call `nr` with arguments `args`.
unsafe fn raw(nr: libc::c_long, args: [u64; 4]) -> i64 {
    let ret: i64;
    // SAFETY: per the contract; `syscall` clobbers RCX and R11.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// The source's loop: one pass over the sampled threads after each interval, drawn at
/// random around the period ([`crate::sources::random::interval`]) so that a program that
/// blocks periodically cannot stay in step with the passes. Each pass counts the wall time
/// since the previous one, in ticks of the period (the remainder carried to the next pass):
/// time overslept is counted too.
fn run(sampler: &Sampler) {
    let period = sampler.period_ns;
    let mut state = crate::sources::random::seed(period);
    let mut last = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0);
    let mut next = last + crate::sources::random::interval(&mut state, period, 1);
    let mut carry = 0;
    let mut line = [0u8; 256];
    let mut again = [0u8; 256];
    loop {
        if !sleep_until(next) {
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
        if STATE.load(Ordering::SeqCst) == SAMPLING {
            // SAFETY: visit uses a slot's scratch only while it holds it (CAPTURING).
            unsafe {
                sampler.slots.for_each_mut(|slot| {
                    if slot.timer.load(Ordering::Acquire) != 0 {
                        visit(sampler, slot, periods, &mut line, &mut again);
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
        State::Blocked { len, sp, pc }
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
            let captured = sampler.sample_blocked(slot, periods, regs, still_blocked);
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

/// Periods a CPU timer's expiry may be noticed late: the longest kernel tick (10 ms, at
/// `HZ` = 100) plus one.
fn slack(period_ns: u64) -> u64 {
    10_000_000u64.div_ceil(period_ns) + 1
}

/// A thread found not blocked for more periods than its CPU timer counted ticks (beyond
/// the timer's delivery lag, [`slack`]) was runnable without a CPU for the difference: those
/// periods are wall time too, added to its latest sample, where it waited (counted as
/// `waiting_ticks`).
fn count_waiting(sampler: &Sampler, slot: &Slot) {
    let running = slot.running_periods.load(Ordering::Relaxed);
    let counted = slot.ticks.load(Ordering::Relaxed) + slot.waited.load(Ordering::Relaxed);
    let owed = running.saturating_sub(counted + slack(sampler.period_ns));
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
    Blocked { len: usize, sp: u64, pc: u64 },
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
        TARGET.load(Ordering::Relaxed) as u32,
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
    parse(&buf[..len]).map_or(State::Running, |(sp, pc)| State::Blocked { len, sp, pc })
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

/// The stack and instruction pointers of a `/proc/<pid>/task/<tid>/syscall` line of a
/// thread in a system call (`<nr> <arg1> … <arg6> <sp> <pc>`, numbers after the first in
/// `0x` hex: the kernel's `proc_pid_syscall`); `None` for `running`, for `-1 <sp> <pc>`
/// (blocked, not in a system call) and for anything else.
fn parse(line: &[u8]) -> Option<(u64, u64)> {
    let mut fields = line
        .split(|&b| b == b' ' || b == b'\n')
        .filter(|f| !f.is_empty());
    let nr = fields.next()?;
    if !nr.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut words = [0u64; 8];
    for word in &mut words {
        let f = fields.next()?;
        let hex = f.strip_prefix(b"0x")?;
        *word = hex.iter().try_fold(0u64, |v, &c| {
            let digit = (c as char).to_digit(16)? as u64;
            v.checked_mul(16)?.checked_add(digit)
        })?;
    }
    Some((words[6], words[7]))
}

/// Sleeps until the monotonic clock reads `deadline_ns`, waiting on [`QUIT`]; `false`
/// when told to end.
fn sleep_until(deadline_ns: u64) -> bool {
    // FUTEX_WAIT takes a relative timeout: recomputed from the clock on every wake-up.
    loop {
        if QUIT.load(Ordering::Acquire) != 0 {
            return false;
        }
        let now = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(deadline_ns);
        if now >= deadline_ns {
            return true;
        }
        let left = deadline_ns - now;
        let timeout = libc::timespec {
            tv_sec: (left / 1_000_000_000) as libc::time_t,
            tv_nsec: (left % 1_000_000_000) as libc::c_long,
        };
        let op = (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as u64;
        // SAFETY: waiting on our own word with a valid timeout (returns on wake, timeout,
        // a changed value or a signal; the loop checks again).
        unsafe {
            raw(
                libc::SYS_futex,
                [
                    QUIT.as_ptr() as u64,
                    op,
                    0,
                    &timeout as *const libc::timespec as u64,
                ],
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_lines_give_the_saved_stack_and_instruction_pointers() {
        let blocked =
            b"230 0x1 0x1 0x7f4f15cadab0 0x0 0x0 0x7f4f1694e6e8 0x7f4f15cada70 0x7f4f162ed545\n";
        assert_eq!(parse(blocked), Some((0x7f4f15cada70, 0x7f4f162ed545)));
        assert_eq!(parse(b"running\n"), None);
        assert_eq!(parse(b"-1 0x7ffd1234 0x55aa5678\n"), None);
        assert_eq!(parse(b"0 0x3 0x1 0x2000\n"), None);
        assert_eq!(
            parse(b"0 0x3 0x1 0x2000 0x0 0x0 0x0 0x7ffcef23d330 0xzz\n"),
            None
        );
    }
}
