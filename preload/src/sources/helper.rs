//! The helper process: a `clone` of the profiled process that shares its memory but is
//! neither one of its threads nor a child it can wait for. Wall mode samples blocked
//! threads from it ([`crate::sources::wall`]); with perf events it holds every thread's
//! event, so that the program's own descriptor table never shows one
//! ([`crate::sources::perf`]).
//!
//! A thread would show in `/proc/self/task` and in the thread count CPython 3.12+ reads to
//! warn that `os.fork()` in a multi-threaded process may deadlock; a child sending
//! `SIGCHLD` would be reaped by the program's `wait()`. The helper is neither: `CLONE_VM`
//! without `CLONE_THREAD`, exit signal 0. Its thread pointer is the creating thread's, so
//! it calls nothing that touches the C library's thread-local state (`errno`,
//! cancellation): system calls are made directly ([`raw`]).

use crate::sampler::Sampler;
use crate::sources::timer::{clock_ns, process_cpu_clock};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// What the helper process does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Job {
    /// Samples the threads blocked in system calls (wall mode, its running threads sampled
    /// on POSIX CPU timers).
    Wall,
    /// Holds the threads' perf events, opening, re-arming and closing them as asked.
    Events,
    /// Both: wall mode with its running threads sampled on perf events.
    WallAndEvents,
}

/// Whether the process has a helper process (started once; a fork child and a failed
/// `exec` start theirs again).
static WANTED: AtomicBool = AtomicBool::new(false);

/// The job of the helper process (0 = wall, 1 = events, 2 = both), read by it at its
/// start.
static JOB: AtomicU32 = AtomicU32::new(0);

/// The helper process's pid, 0 while there is none.
static HELPER: AtomicI32 = AtomicI32::new(0);
/// The profiled process's pid, whose threads the helper process reads in `/proc`.
pub(crate) static TARGET: AtomicI32 = AtomicI32::new(0);
/// The helper process's stack (mapped once: a fork child's sampler reuses its copy).
static STACK: AtomicUsize = AtomicUsize::new(0);
/// `SA_RESTORER` of the kernel's `struct sigaction` (`arch/x86/include/uapi/asm/signal.h`):
/// `sa_restorer` holds the signal trampoline.
const SA_RESTORER: u64 = 0x0400_0000;
/// Bytes of the helper process's stack.
const STACK_BYTES: usize = 1 << 20;
/// Set (1) to end the helper process; it waits on this word (a futex) between passes.
pub(crate) static QUIT: AtomicU32 = AtomicU32::new(0);
/// Longest wait for the helper process to end before an `exec`, ns.
const END_WAIT_NS: u64 = 200_000_000;
/// CPU time (user + system, ns) of this process image's helper processes that have ended
/// and been reaped ([`end`]: before an `exec`, at the end of an attachment), from
/// `wait4`'s `rusage`.
static ENDED_CPU_NS: AtomicU64 = AtomicU64::new(0);
/// The helper process's wake-ups: returns from its waits ([`wait`] called from it).
pub(crate) static WAKEUPS: AtomicU64 = AtomicU64::new(0);

/// Starts the helper process for `job`. Not from a signal handler.
///
/// # Errors
/// A message saying why it could not start.
pub fn start(sampler: &'static Sampler, job: Job) -> Result<(), String> {
    prepare(job);
    start_prepared(sampler).map_err(|e| format!("cannot start the helper process: {e}"))
}

/// Sets the helper process's job without starting it ([`start_prepared`] does, from
/// anywhere).
pub fn prepare(job: Job) {
    let code = match job {
        Job::Wall => 0,
        Job::Events => 1,
        Job::WallAndEvents => 2,
    };
    JOB.store(code, Ordering::Release);
}

/// Starts the helper process for the job [`prepare`] set, its stack mapped (once).
/// Async-signal-safe (a `SIGPROF` handler starts it
/// once the process has run a while: [`crate::sources::late`]).
///
/// # Errors
/// The `clone`'s error, or `ENOMEM` for its stack.
pub fn start_prepared(sampler: &'static Sampler) -> Result<(), std::io::Error> {
    if STACK.load(Ordering::Acquire) == 0 {
        let stack = crate::mem::map_region(STACK_BYTES)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        STACK.store(stack as usize, Ordering::Release);
    }
    WANTED.store(true, Ordering::Release);
    spawn(sampler)
}

/// Whether a helper process runs.
pub fn running() -> bool {
    HELPER.load(Ordering::Acquire) > 0
}

/// The CPU time (user + system, ns) of this process's helper processes so far: the one
/// running, read from its process CPU clock (`clock_gettime` on the clock id
/// `CPUCLOCK_SCHED` of its pid, Linux `include/linux/posix-timers.h`), plus those that
/// ended (reaped with `wait4`). `None` when none was started. The helper process is a
/// `CLONE_VM` clone without exit signal: neither `getrusage(RUSAGE_CHILDREN)` nor a
/// parent's `wait4` counts it, so every cost figure adds this.
pub fn cpu_ns() -> Option<u64> {
    if !WANTED.load(Ordering::Acquire) {
        return None;
    }
    let ended = ENDED_CPU_NS.load(Ordering::Acquire);
    let running = match HELPER.load(Ordering::Acquire) {
        pid if pid > 0 => clock_ns(process_cpu_clock(pid)).unwrap_or(0),
        _ => 0,
    };
    Some(ended + running)
}

/// The job of the helper process, if one was started.
pub fn job() -> Job {
    match JOB.load(Ordering::Acquire) {
        1 => Job::Events,
        2 => Job::WallAndEvents,
        _ => Job::Wall,
    }
}

/// Whether the helper process was asked to end (it checks between its waits).
pub fn quitting() -> bool {
    QUIT.load(Ordering::Acquire) != 0
}

/// Wakes whoever waits on `word` (a futex of this memory, which the helper process
/// shares). Async-signal-safe.
pub fn wake(word: &AtomicU32) {
    let op = (libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG) as u64;
    // SAFETY: a futex wake on our own word.
    unsafe {
        raw(
            libc::SYS_futex,
            [word.as_ptr() as u64, op, i32::MAX as u64, 0],
        )
    };
}

/// Waits on `word` while it holds `value`, at most `timeout_ns` (returns early on a wake,
/// a changed value or a signal). Async-signal-safe.
pub fn wait(word: &AtomicU32, value: u32, timeout_ns: u64) {
    let timeout = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    let op = (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as u64;
    // SAFETY: waiting on our own word with a valid timeout.
    unsafe {
        raw(
            libc::SYS_futex,
            [
                word.as_ptr() as u64,
                op,
                u64::from(value),
                &timeout as *const libc::timespec as u64,
            ],
        )
    };
}

/// [`wait`], in the helper process's loops: counts its wake-ups ([`WAKEUPS`]). A helper
/// started by a thread other than the main one (perf events started late by a thread's
/// start or its sample: [`crate::sources::late`]) ends here once the profiled process is
/// gone (its parent is then another process), since it has no `PR_SET_PDEATHSIG`.
pub(crate) fn helper_wait(word: &AtomicU32, value: u32, timeout_ns: u64) {
    wait(word, value, timeout_ns);
    WAKEUPS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: getppid and exit act on the helper process alone.
    unsafe {
        if !BY_MAIN_THREAD.load(Ordering::Relaxed)
            && raw(libc::SYS_getppid, [0; 4]) != i64::from(TARGET.load(Ordering::Acquire))
        {
            raw(libc::SYS_exit, [0; 4]);
        }
    }
}

/// Whether the helper process was started by the process's main thread. `PR_SET_PDEATHSIG`
/// is sent when the thread that created a process ends (prctl(2)), not its whole process:
/// a helper started by another thread (a request's thread starting the perf events late)
/// would be killed with that thread, so it watches its parent instead ([`helper_wait`]).
static BY_MAIN_THREAD: AtomicBool = AtomicBool::new(true);

/// In a fork child whose parent's helper process was starting late and had not yet said
/// whether perf events open ([`crate::sources::late`]): none is started for it now (it
/// starts its own later). Async-signal-safe.
pub(crate) fn forget_after_fork() {
    WANTED.store(false, Ordering::Release);
}

/// In a fork child (the parent's sampler process is not its own): starts a new one.
pub(crate) fn restart_after_fork(sampler: &Sampler) {
    if !WANTED.load(Ordering::Acquire) {
        return; // the parent had none
    }
    HELPER.store(0, Ordering::Relaxed);
    ENDED_CPU_NS.store(0, Ordering::Relaxed);
    WAKEUPS.store(0, Ordering::Relaxed);
    crate::sources::perf::REARMS.store(0, Ordering::Relaxed);
    // SAFETY: the sampler is the published, leaked one ('static).
    let sampler: &'static Sampler = unsafe { &*(sampler as *const Sampler) };
    if spawn(sampler).is_err() {
        let msg: &[u8] = match job() {
            Job::Wall => b"pyigprof: cannot start the wall-clock sampler in the fork child; its blocked time is not sampled\n",
            Job::Events | Job::WallAndEvents => b"pyigprof: cannot start the keeper of the perf events in the fork child; its threads are not sampled\n",
        };
        // Async-signal-safe: the line is static and written without allocating.
        crate::messages::write_line(msg);
    }
}

/// Before an `exec` and at the process's end (sampling stopped): ends the sampler process
/// and reaps it. Before an `exec` it would otherwise keep the old image's memory alive; at
/// the end, left to die with its parent (`PR_SET_PDEATHSIG`), it became a zombie of
/// whichever process adopted it — a container's PID 1 or a child subreaper that reaps
/// only what it started kept one per profiled process. Reaped here, it is gone before the
/// program's parent sees the program end. It is told through `QUIT`, not by a signal: a
/// fork child that changed its user before exec (`subprocess`'s `user=`) may no longer
/// signal it. Waits at most `END_WAIT_NS` (it ends within microseconds). Async-signal-safe.
pub fn end_and_reap() {
    end(END_WAIT_NS);
}

/// Ends the helper process as [`end_and_reap`] does, waiting at most `wait_ns` for it;
/// returns whether it has ended (or none ran). `pyigprof attach` waits longer: the perf
/// events the helper holds must be closed before `SIGPROF` gets its default action back.
pub fn end(wait_ns: u64) -> bool {
    let helper = HELPER.swap(0, Ordering::AcqRel);
    if helper <= 0 {
        return true;
    }
    QUIT.store(1, Ordering::Release);
    wake(&QUIT);
    crate::sources::perf::wake_keeper();
    // SAFETY: reaping our own child (__WALL: it sends no SIGCHLD), without blocking.
    unsafe {
        // It ends within microseconds (it checks QUIT first thing and between passes):
        // yield to it rather than sleep, since a `subprocess` child may exec many times
        // (every directory of PATH).
        let deadline = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0) + wait_ns;
        loop {
            let mut status = 0;
            let mut usage: libc::rusage = std::mem::zeroed();
            let reaped = libc::wait4(
                helper,
                &mut status,
                libc::__WALL | libc::WNOHANG,
                &mut usage,
            );
            if reaped != 0 {
                if reaped == helper {
                    let ns = |t: libc::timeval| {
                        t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000
                    };
                    ENDED_CPU_NS
                        .fetch_add(ns(usage.ru_utime) + ns(usage.ru_stime), Ordering::AcqRel);
                }
                return true;
            }
            if clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(u64::MAX) > deadline {
                return false;
            }
            libc::sched_yield();
        }
    }
}

/// The `exec` failed: a sampler process again.
pub fn resume_after_failed_exec(sampler: &'static Sampler) {
    if WANTED.load(Ordering::Acquire) && HELPER.load(Ordering::Acquire) == 0 {
        let _ = spawn(sampler);
    }
}

/// Starts the sampler process: a `clone` that shares the profiled process's memory (it
/// reads the threads' stacks and frames, and records into their trace trees, as the
/// handler does) but is not one of its threads — a thread would show in
/// `/proc/self/task` and in the thread count CPython 3.12+ reads to warn that `os.fork()`
/// in a multi-threaded process may deadlock — and sends no `SIGCHLD` (`wait()` and
/// `waitpid(-1)` do not see it). It runs only code that uses no thread-local state of the C
/// library ([`helper_process`]).
fn spawn(sampler: &'static Sampler) -> Result<(), std::io::Error> {
    QUIT.store(0, Ordering::Release);
    let stack = STACK.load(Ordering::Acquire);
    if stack == 0 {
        return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
    }
    // SAFETY: getpid has no preconditions; clone with a stack of ours, whose child runs
    // sampler_process (no thread-local state) and shares our memory.
    let child = unsafe {
        TARGET.store(libc::getpid(), Ordering::Release);
        BY_MAIN_THREAD.store(libc::gettid() == libc::getpid(), Ordering::Release);
        libc::clone(
            helper_process,
            (stack + STACK_BYTES - 64) as *mut libc::c_void,
            libc::CLONE_VM,
            sampler as *const Sampler as *mut libc::c_void,
        )
    };
    if child <= 0 {
        return Err(std::io::Error::last_os_error());
    }
    HELPER.store(child, Ordering::Release);
    // Where Yama restricts `ptrace` access to descendants (`kernel.yama.ptrace_scope` 1),
    // the helper may read the threads' state (and open their events) only as the process's
    // named ptracer; elsewhere this does nothing (`EINVAL` without Yama). Asked always,
    // rather than after reading `ptrace_scope`: a descriptor opened in the program's table
    // while its threads run (the helper may start from a thread's handler) could be the
    // number another thread `dup2`s onto or closes meanwhile, or come between two it
    // allocates.
    // SAFETY: naming our own child as a process that may read our threads' state; a
    // direct system call (errno untouched).
    unsafe {
        raw(
            libc::SYS_prctl,
            [libc::PR_SET_PTRACER as u64, child as u64, 0, 0],
        )
    };
    Ok(())
}

/// The sampler process. It shares the profiled process's memory but runs as a process of
/// its own: its signal dispositions are its own copy (every signal blocked but the faults
/// of its reads, recovered by [`crate::capture::probe`]), its file table its own copy
/// (closed at once), and it ends with its parent (`PR_SET_PDEATHSIG`). Its thread pointer is
/// the creating thread's, so it calls nothing that touches thread-local state (`errno`,
/// cancellation): system calls are made directly ([`raw`]).
extern "C" fn helper_process(arg: *mut libc::c_void) -> libc::c_int {
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
            crate::capture::probe::recover_or_exit as *const () as u64,
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
        if BY_MAIN_THREAD.load(Ordering::Acquire) {
            raw(
                libc::SYS_prctl,
                [libc::PR_SET_PDEATHSIG as u64, libc::SIGKILL as u64, 0, 0],
            );
        }
        if raw(libc::SYS_getppid, [0; 4]) != i64::from(TARGET.load(Ordering::Acquire)) {
            raw(libc::SYS_exit, [0; 4]);
        }
        ask_short_slice();
        // A name of its own (`ps`, `top`, `/proc/PID/comm`); its command line is the
        // program's (the memory it is read from is shared), so `pgrep -f app.py` finds it
        // too: `pgrep -f app.py | xargs ps -o pid,comm -p` tells them apart, and the CLI's
        // `dump`, `attach` and `top` say so when pointed at it.
        raw(
            libc::SYS_prctl,
            [libc::PR_SET_NAME as u64, HELPER_NAME.as_ptr() as u64, 0, 0],
        );
        match job() {
            Job::Wall | Job::WallAndEvents => crate::sources::wall::run(sampler),
            Job::Events => crate::sources::perf::serve(sampler),
        }
        raw(libc::SYS_exit, [0; 4]);
    }
    0
}

/// The helper process's name (`/proc/PID/comm`, at most 15 bytes and a NUL), which
/// `pyigprof dump`, `attach` and `top` recognize (`cli/src/attach.rs`).
pub const HELPER_NAME: &[u8; 16] = b"pyigprof-helper\0";

/// The scheduler's time slice the helper process asks for (`sched_attr.sched_runtime` of
/// `SCHED_OTHER`, ns; Linux 6.12+'s EEVDF: the shortest it allows).
const HELPER_SLICE_NS: u64 = 100_000;

/// Asks the kernel for a short time slice ([`HELPER_SLICE_NS`]), so that the helper
/// process, woken, takes its turn at once rather than after the program's thread on the
/// same CPU has run its slice. Woken by a starting thread, it waited for a CPU up to a
/// scheduler tick (4 ms), mostly queued behind that very thread (`perf sched timehist`):
/// in wall mode half of 1,200 short threads had their event opened 0.5 ms or more after
/// they started (1.46 ms on average), 8 % after their 3.7 ms of CPU time had run, which
/// then went unsampled. A short slice gives a task an early deadline at each wake-up, and
/// a wake-up preempts a task whose deadline is later (the kernel's `sched/eevdf: Allow
/// shorter slices to wakeup-preempt`, 6.12). The work of each wake-up is tens of
/// microseconds. Needs no privilege; an older kernel ignores the field (or refuses the
/// call: nothing changes then).
fn ask_short_slice() {
    // struct sched_attr (include/uapi/linux/sched/types.h), its first version's 48 bytes:
    // size, policy, flags, nice, priority, runtime, deadline, period.
    let attr: [u32; 12] = [48, 0, 0, 0, 0, 0, HELPER_SLICE_NS as u32, 0, 0, 0, 0, 0];
    // SAFETY: sched_setattr on the calling process with a valid sched_attr.
    unsafe { raw(libc::SYS_sched_setattr, [0, attr.as_ptr() as u64, 0, 0]) };
}

/// A system call made directly (no `errno`, no cancellation point: nothing of the C
/// library's thread-local state, which the sampler process shares with the thread that
/// created it). Returns the kernel's result (negative: `-errno`).
///
/// # Safety
/// As the system call `nr` with arguments `args`.
pub(crate) unsafe fn raw(nr: libc::c_long, args: [u64; 4]) -> i64 {
    // SAFETY: per the contract (the fifth and sixth arguments zero).
    unsafe { raw6(nr, [args[0], args[1], args[2], args[3], 0, 0]) }
}

/// As [`raw`], for a system call of up to six arguments.
///
/// # Safety
/// As the system call `nr` with arguments `args`.
pub(crate) unsafe fn raw6(nr: libc::c_long, args: [u64; 6]) -> i64 {
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
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}
