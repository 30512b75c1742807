//! How a profiled process ends, forks, execs and asks for profiles, and what is written
//! then.
//!
//! - Normal exit (`atexit`), `_exit`/`_Exit`: sampling stops and the profile is written.
//! - `exec*`: the profile of the image being replaced is written first (when it has
//!   samples: a `fork` child that execs at once, as `subprocess` does, writes nothing); if
//!   the exec fails, that file is removed and sampling resumes.
//! - Signals whose default action ends the process (`SIGTERM`, `SIGINT`, `SIGHUP`,
//!   `SIGQUIT`, and crashes: `SIGSEGV`, `SIGBUS`, `SIGFPE`, `SIGILL`, `SIGABRT`), while the
//!   program leaves them at their default action: the handler writes the profile, restores
//!   the default action and lets the signal end the process as it would have.
//! - `PYIGPROF_DUMP_SIGNAL` and `PYIGPROF_DUMP_INTERVAL`: snapshot profiles while the
//!   program runs on.
//!
//! Profiles written from a signal handler are written by a child made with `_Fork` (a copy
//! of the process that has only the handler's thread, and no `atfork` handlers), since
//! writing allocates and a handler must not: the handler waits for the child at most
//! [`CHILD_TIMEOUT`] (a child stuck on a lock some other thread held at the fork is
//! killed), so the process always goes on or ends as it would have.
//!
//! A `vfork` child (which shares the parent's memory until it execs) must not touch the
//! sampler: every entry point first checks that the calling process is the one that owns
//! the sampler ([`is_owner`]).

use crate::config::{Clock, Config};
use crate::output::dump;
use crate::sampler;
use crate::signal_guard::BlockSignals;
use crate::sources::{handler, timer};
use pyigprof_hooks::signals;
use pyigprof_pprof::plural;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Longest wait for a child writing a profile from a signal handler.
pub const CHILD_TIMEOUT: Duration = Duration::from_secs(10);

/// Signals whose default action ends the process, on which the profile is written first.
pub const FATAL_SIGNALS: [libc::c_int; 9] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGABRT,
];

/// The [`FATAL_SIGNALS`] that are sent rather than caused by a fault: while a thread writes
/// the final profile itself, they are blocked in it, and a handler taking one on another
/// thread waits for the profile before it lets the signal end the process.
const SENT_FATAL_SIGNALS: [libc::c_int; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGABRT,
];

/// `si_value` of the periodic-dump timer's signals ("pyigdump").
const DUMP_COOKIE: usize = 0x7079_6967_6475_6d70;

static CONFIG: OnceLock<Config> = OnceLock::new();
/// The working directory at start-up: a relative `PYIGPROF_OUTPUT` is relative to it, even
/// if the program changes directory.
static START_DIR: OnceLock<PathBuf> = OnceLock::new();
/// The process whose sampler this is (updated in fork children).
static OWNER: AtomicI32 = AtomicI32::new(0);
/// The final profile was written (or is being written).
static DUMPED: AtomicBool = AtomicBool::new(false);
/// The profile written before an `exec`, removed if the exec fails.
static BEFORE_EXEC: Mutex<Option<PathBuf>> = Mutex::new(None);
/// The thread (tid) writing the final profile itself, or 0.
static WRITER: AtomicI32 = AtomicI32::new(0);
/// Snapshots written so far.
static SNAPSHOTS: AtomicU32 = AtomicU32::new(0);
/// glibc's `_Fork` (2.34+), or 0: then the `fork` system call is used directly.
static FORK: AtomicUsize = AtomicUsize::new(0);

/// Sets up everything above for the process (from the constructor, after the sampler is
/// installed): the settings, the fatal-signal handlers, the dump signal and timer.
pub fn start(config: Config) {
    // SAFETY: getpid has no preconditions; dlsym with a valid name.
    unsafe {
        OWNER.store(libc::getpid(), Ordering::Relaxed);
        FORK.store(
            libc::dlsym(libc::RTLD_DEFAULT, c"_Fork".as_ptr()) as usize,
            Ordering::Relaxed,
        );
    }
    if let Ok(dir) = std::env::current_dir() {
        let _ = START_DIR.set(dir);
    }
    for signal in FATAL_SIGNALS {
        // SA_NODEFER: a crash inside the handler itself ends the process at once.
        // SA_ONSTACK: on the program's alternate stack, where it has one (a stack overflow).
        let flags = libc::SA_NODEFER | libc::SA_ONSTACK;
        if matches!(signal, libc::SIGSEGV | libc::SIGBUS) {
            // Faults of the sampler's own reads are recovered from whatever handler the
            // program installs (capture::probe): the program's is run behind ours.
            signals::guard_chained(signal, on_fault(), flags);
        } else {
            signals::guard(signal, on_fatal_signal, flags, false, |_| {});
        }
    }
    if let Some(signal) = config.dump_signal {
        if !signals::guard(
            signal,
            on_dump_signal,
            libc::SA_RESTART,
            false,
            program_took_dump_signal,
        ) {
            crate::notice!("pyigprof: PYIGPROF_DUMP_SIGNAL: signal {signal} already has a handler; no dump signal");
        }
    }
    if let Some(seconds) = config.dump_interval_s {
        if let Err(e) = start_dump_timer(seconds) {
            crate::notice!("pyigprof: PYIGPROF_DUMP_INTERVAL: {e}; no periodic profiles");
        }
    }
    let _ = CONFIG.set(config);
}

/// The settings [`start`] was given (`None` before).
pub fn config() -> Option<&'static Config> {
    CONFIG.get()
}

/// `path` made absolute as profile paths are: a relative one is relative to the working
/// directory at start-up (the program may have changed it since).
pub fn absolute(config: &Config, path: std::ffi::OsString) -> PathBuf {
    let _ = config;
    let path = PathBuf::from(path);
    match START_DIR.get() {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path,
    }
}

/// Whether the calling process owns the sampler (not a `vfork` child sharing its memory).
pub fn is_owner() -> bool {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() == OWNER.load(Ordering::Relaxed) }
}

/// The process whose sampler this is (0 before start-up): in the child that writes a
/// profile for it (a snapshot, a fatal signal's), its parent.
pub fn owner() -> libc::pid_t {
    OWNER.load(Ordering::Relaxed)
}

/// The profile path for process `pid`.
fn final_path(config: &Config, pid: u32) -> PathBuf {
    absolute(config, config.output_path(pid))
}

/// In a fork child (`pthread_atfork`): the child profiles into a profile of its own.
pub extern "C" fn after_fork_in_child() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    if CONFIG.get().is_some_and(Config::left_alone) {
        // Only the parent is profiled (`PYIGPROF_ONLY_CHILD_OF`): this child writes nothing.
        OWNER.store(0, Ordering::Relaxed);
        if let Some(s) = sampler::get() {
            s.leave_after_fork();
        }
        return;
    }
    OWNER.store(pid, Ordering::Relaxed);
    DUMPED.store(false, Ordering::Relaxed);
    SNAPSHOTS.store(0, Ordering::Relaxed);
    if let Some(s) = sampler::get() {
        s.restart_after_fork();
    }
    if let Some(seconds) = CONFIG.get().and_then(|c| c.dump_interval_s) {
        let _ = start_dump_timer(seconds);
    }
    crate::output::windows::restart_after_fork();
}

/// `atexit`: writes the profile.
pub extern "C" fn at_exit() {
    block_sigprof_for_good();
    write_profile();
    end_helper();
}

/// At the process's end, once its profile is written: the helper process ended and reaped
/// ([`crate::sources::helper::end_and_reap`]), so that no zombie of it is left to the
/// process that adopts it. (A process killed by `SIGKILL` leaves one: its helper then ends
/// by `PR_SET_PDEATHSIG`, after it.) Async-signal-safe.
fn end_helper() {
    if is_owner() {
        crate::sources::helper::end_and_reap();
    }
}

/// Blocks `SIGPROF` in the calling thread for the rest of its life: while the process
/// ends, writing the profile takes longer than the program's own exit would, and a
/// `SIGPROF` of the program's own `ITIMER_PROF` (whose handler Python removes when it
/// finalizes) must not end the process by its default action meanwhile.
fn block_sigprof_for_good() {
    std::mem::forget(BlockSignals::sampling());
}

/// Stops sampling and writes the profile (once per process image), then prints the
/// summary line unless `PYIGPROF_QUIET` is set. Returns the path written.
pub fn write_profile() -> Option<PathBuf> {
    if !is_owner() || DUMPED.swap(true, Ordering::AcqRel) {
        return None;
    }
    let (sampler, config) = (sampler::get()?, CONFIG.get()?);
    // A signal ending the process meanwhile (`Pool.terminate` sends `SIGTERM` to workers
    // that may be exiting on their own) ends it once the profile is written.
    let _deferred = BlockSignals::new(&SENT_FATAL_SIGNALS);
    // SAFETY: gettid has no preconditions.
    WRITER.store(unsafe { libc::gettid() }, Ordering::Release);
    crate::output::windows::stop();
    sampler.stop();
    let written = write(sampler, config, std::process::id(), None);
    WRITER.store(0, Ordering::Release);
    written
}

/// Waits (at most [`CHILD_TIMEOUT`]) while another thread writes the final profile.
/// Async-signal-safe.
fn wait_for_writer() {
    poll_until_timeout(|| {
        let writer = WRITER.load(Ordering::Acquire);
        // SAFETY: gettid has no preconditions.
        writer == 0 || writer == unsafe { libc::gettid() }
    });
}

/// Checks `done` every millisecond until it is true (returns `true`) or [`CHILD_TIMEOUT`]
/// has passed (returns `false`). Async-signal-safe when `done` is.
fn poll_until_timeout(mut done: impl FnMut() -> bool) -> bool {
    let step = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    for _ in 0..CHILD_TIMEOUT.as_millis() {
        if done() {
            return true;
        }
        // SAFETY: nanosleep with a valid duration.
        unsafe { libc::nanosleep(&step, std::ptr::null_mut()) };
    }
    done()
}

/// Collects and writes a profile for process `pid`: the final one, or snapshot number
/// `snapshot`. Says the summary line (its path absolute) where pyigprof's lines go, unless quiet.
fn write(
    sampler: &sampler::Sampler,
    config: &Config,
    pid: u32,
    snapshot: Option<u32>,
) -> Option<PathBuf> {
    if snapshot.is_none() && crate::output::windows::on() {
        // The last, partial window stands for the end of the run.
        let (written, profile) = crate::output::windows::write_last()?;
        // The last window (and any still queued) sent, or given up on.
        crate::output::push::finish();
        let Some(written) = written else {
            // Pushed only.
            if !config.quiet {
                crate::notice!(
                    "{}",
                    crate::output::push::summary_line().unwrap_or_default()
                );
            }
            return None;
        };
        let written = std::path::absolute(&written).unwrap_or(written);
        if !config.quiet {
            summary(sampler, config, &profile, &written);
            crate::notice!("{}", crate::output::windows::summary_line(config, pid));
            if let Some(line) = crate::output::push::summary_line() {
                crate::notice!("{line}");
            }
        }
        return Some(written);
    }
    let mut profile = dump::Profile::collect(sampler);
    profile.pid = pid;
    let path = final_path(config, pid);
    let path = match snapshot {
        Some(n) => dump::tagged(&path, &format!("snapshot{n}")),
        None => path,
    };
    match dump::write_unique(&profile, &path) {
        Ok(written) => {
            // Named from anywhere: `pyigprof record` lists the profiles of processes that
            // ran in other directories.
            let written = std::path::absolute(&written).unwrap_or(written);
            if !config.quiet {
                summary(sampler, config, &profile, &written);
            }
            Some(written)
        }
        Err(e) => {
            crate::notice!("pyigprof: {e}");
            None
        }
    }
}

/// Writes the profile of an attachment window (`pyigprof attach`, [`crate::attach`]) to
/// `config`'s output path for this process, sampling stopped by the caller: returns the
/// path written and the summary lines, or why nothing was written. Unlike
/// [`write_profile`], it may run any number of times in a process.
pub(crate) fn write_attached(
    sampler: &sampler::Sampler,
    config: &Config,
) -> Result<(PathBuf, Vec<String>), String> {
    let mut profile = dump::Profile::collect(sampler);
    profile.pid = std::process::id();
    let path = final_path(config, profile.pid);
    let written = dump::write_unique(&profile, &path)?;
    // Named from the command's directory, which is not the program's.
    let written = std::path::absolute(&written).unwrap_or(written);
    let lines = summary_lines(sampler, config, &profile, &written);
    Ok((written, lines))
}

/// Writes the profile of an attach window so far, while it samples, from the calling
/// thread (not a signal handler; the trace trees are read as threads insert, as a live
/// snapshot reads them): to `config`'s output path tagged `snapshotN` (`n`), absolute.
/// For `pyigprof top`'s `w` key on a process the preloaded library does not sample.
///
/// # Errors
/// Why the file could not be written ([`dump::write_unique`]).
pub(crate) fn write_attached_snapshot(
    sampler: &sampler::Sampler,
    config: &Config,
    n: u32,
) -> Result<PathBuf, String> {
    let mut profile = dump::Profile::collect(sampler);
    profile.pid = std::process::id();
    let path = dump::tagged(&final_path(config, profile.pid), &format!("snapshot{n}"));
    let written = dump::write_unique(&profile, &path)?;
    Ok(std::path::absolute(&written).unwrap_or(written))
}

/// Says the summary lines of a profile written to `path` ([`summary_lines`]).
fn summary(
    sampler: &sampler::Sampler,
    config: &Config,
    profile: &dump::Profile,
    path: &std::path::Path,
) {
    for line in summary_lines(sampler, config, profile, path) {
        crate::notice!("{line}");
    }
}

/// What the summary says of a profile written to `path`: a line `pyigprof: wrote PATH:
/// N samples, S s of CPU time (…), R samples per second by TRIGGER; shares…`, after a line
/// on the threads a perf event could not be opened for, if any.
fn summary_lines(
    sampler: &sampler::Sampler,
    config: &Config,
    profile: &dump::Profile,
    path: &std::path::Path,
) -> Vec<String> {
    let mut lines = Vec::new();
    let stats = &sampler.stats;
    let samples = stats.samples.load(Ordering::Relaxed);
    let percent = |n: u64| {
        if samples == 0 {
            0.0
        } else {
            100.0 * n as f64 / samples as f64
        }
    };
    let (recorded, ticks) = profile.totals();
    let task_ticks = stats.task_ticks.load(Ordering::Relaxed);
    let time = match config.clock {
        Clock::Cpu => "CPU time",
        Clock::Wall if task_ticks > 0 => {
            "wall time summed over threads and suspended asyncio tasks"
        }
        Clock::Wall => "wall time summed over threads",
    };
    let no_room = stats.dropped_no_stack_room.load(Ordering::Relaxed);
    let dropped = stats.dropped_no_slot.load(Ordering::Relaxed)
        + stats.dropped_tree_full.load(Ordering::Relaxed)
        + no_room;
    let dropped = match (dropped, no_room) {
        (0, _) => String::new(),
        (_, 0) => format!(", {dropped} {} dropped", plural(dropped, "sample")),
        _ => format!(
            ", {dropped} {} dropped ({no_room} where the thread's stack had no room left for \
             the profiler)",
            plural(dropped, "sample")
        ),
    };
    if !sampler.cpu {
        let parts: Vec<String> = [
            crate::sources::allocations::enabled().then(memory_summary),
            crate::sources::locks::enabled().then(lock_summary),
        ]
        .into_iter()
        .flatten()
        .collect();
        lines.push(format!(
            "pyigprof: wrote {}: {}",
            path.display(),
            parts.join("; ")
        ));
        return lines;
    }
    let memory = if crate::sources::allocations::enabled() {
        format!("; {}", memory_summary())
    } else {
        String::new()
    };
    let jit = match profile.jit_samples() {
        0 => String::new(),
        n => format!(", {:.1}% in JIT-compiled code", percent(n)),
    };
    let helper = match (profile.cost.helper_ns, profile.cost.helper_percent()) {
        (Some(ns), Some(percent)) => format!(
            ", helper process {:.3} s CPU ({percent:.1}% of the program's {:.3} s)",
            ns as f64 / 1e9,
            profile.cost.process_ns as f64 / 1e9
        ),
        _ => String::new(),
    };
    let shares = format!(
        "{:.1}% with Python frames{jit}, {:.1}% complete native stacks ({:.1}% approximate); \
         handler {:.1} µs median{helper}{dropped}{memory}",
        percent(stats.with_python.load(Ordering::Relaxed)),
        percent(stats.complete.load(Ordering::Relaxed)),
        percent(stats.approximate.load(Ordering::Relaxed)),
        stats.handler.summary().median_ns as f64 / 1e3,
    );
    if let (Some((threads, why)), Some(event)) =
        (crate::sources::perf::refusals(), sampler.trigger.event())
    {
        lines.push(format!(
            "pyigprof: {threads} {} not sampled: cannot open the {} event: {why}",
            if threads == 1 {
                "thread was"
            } else {
                "threads were"
            },
            event.name
        ));
    }
    let trigger = sampler.trigger.used().describe();
    if let Some(event) = sampler.trigger.event().filter(|e| !e.is_time()) {
        lines.push(format!(
            "pyigprof: wrote {}: {recorded} {} of {ticks} {} ({}, by {trigger}); {shares}",
            path.display(),
            plural(recorded, "sample"),
            event.name,
            event.counter,
        ));
        return lines;
    }
    let period_ns = match sampler.trigger.event() {
        Some(event) => event.period,
        None => sampler.period_ns,
    };
    let seconds = ticks as f64 * period_ns as f64 / 1e9;
    let rate = if seconds > 0.0 {
        recorded as f64 / seconds
    } else {
        0.0
    };
    lines.push(format!(
        "pyigprof: wrote {}: {recorded} {}, {:.3} s of {time} ({ticks} {} of {:.3} ms), \
         {rate:.0} samples per second by {trigger}; {shares}",
        path.display(),
        plural(recorded, "sample"),
        seconds,
        plural(ticks, "tick"),
        period_ns as f64 / 1e6,
    ));
    // Wall mode: what the blocked time waited for (the `<waiting: …>` frames).
    let waiting = match config.clock {
        Clock::Wall => profile.waiting_ticks(),
        Clock::Cpu => Vec::new(),
    };
    // Of the threads' wall time: the suspended tasks' samples are not a thread's.
    let threads_ticks = ticks.saturating_sub(task_ticks);
    if !waiting.is_empty() && threads_ticks > 0 {
        let share = |t: u64| 100.0 * t as f64 / threads_ticks as f64;
        // Runnable time (`<waiting: CPU>`) is waiting, not blocked.
        let cpu = crate::capture::frames::Marker::WaitingCpu.waiting_for();
        let runnable: u64 = waiting
            .iter()
            .filter(|(reason, _)| Some(reason.as_str()) == cpu)
            .map(|(_, t)| t)
            .sum();
        let blocked: u64 = waiting.iter().map(|(_, t)| t).sum::<u64>() - runnable;
        let each: Vec<String> = waiting
            .iter()
            .map(|(reason, t)| format!("{reason} {:.1}%", share(*t)))
            .collect();
        let runnable = if runnable > 0 {
            format!(" and runnable {:.1}%", share(runnable))
        } else {
            String::new()
        };
        lines.push(format!(
            "pyigprof: blocked {:.1}% of the wall time{runnable}, waiting for: {}",
            share(blocked),
            each.join(", ")
        ));
    }
    if sampler.gil_only {
        let left_out = stats.gil_free_ticks.load(Ordering::Relaxed);
        let all = ticks + left_out;
        lines.push(format!(
            "pyigprof: PYIGPROF_GIL=1: kept the samples of threads holding the GIL, {:.1}% of \
             the {}; left out {left_out} {}",
            if all == 0 {
                0.0
            } else {
                100.0 * ticks as f64 / all as f64
            },
            time,
            plural(left_out, "tick")
        ));
    }
    if crate::sources::locks::enabled() {
        lines.push(format!("pyigprof: {}", lock_summary()));
    }
    lines
}

/// The memory profiler's part of the summary line.
fn memory_summary() -> String {
    use crate::sources::allocations;
    let (live, peak) = crate::record::memory::live_and_peak();
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let sampled = crate::record::memory::ACTIVITY
        .sampled
        .load(Ordering::Relaxed);
    let rate = match allocations::rate() {
        1 => "every allocation recorded".to_string(),
        r => format!("sampled every {} KiB on average", r / 1024),
    };
    format!(
        "{sampled} {} recorded of {:.1} MiB allocated ({rate}); {:.1} MiB live {}, {:.1} MiB at the peak",
        plural(sampled, "allocation"),
        mib(crate::record::memory::ACTIVITY.allocated_bytes.load(Ordering::Relaxed)),
        mib(live),
        if crate::record::memory::frozen() { "when the program's code ended" } else { "at the end" },
        mib(peak),
    )
}

/// The lock profiler's part of the summary: the time waited for locks and held (exact),
/// the waits and holds and those sampled, and how to read them.
fn lock_summary() -> String {
    use crate::sources::locks::ACTIVITY;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let rate = match load(&ACTIVITY.rate_ns) {
        1 => "every one recorded".to_string(),
        r => format!(
            "sampled every {:.3} ms of waiting or holding on average",
            r as f64 / 1e6
        ),
    };
    let [wait, hold] = &ACTIVITY.tallies;
    format!(
        "threads waited {:.3} s for locks in {} {}, {} recorded, and held locks {:.3} s in {} {}, {} recorded ({rate}): pyigprof-analyse -r LOCK_WAIT, -r LOCK_HOLD",
        load(&wait.ns) as f64 / 1e9,
        load(&wait.count),
        plural(load(&wait.count), "wait"),
        load(&wait.sampled),
        load(&hold.ns) as f64 / 1e9,
        load(&hold.count),
        plural(load(&hold.count), "hold"),
        load(&hold.sampled),
    )
}

/// Stops sampling and tells whether the profile has anything in it: ticks of samples, or
/// of timer expirations the kernel had not delivered (see `Sampler::stop`). A `fork` child
/// that ran for less than a period before its `exec` failed and it ended with `_exit`
/// has none, mostly.
fn stop_with_ticks() -> bool {
    sampler::get().is_some_and(|s| {
        s.stop();
        s.stats.ticks.load(Ordering::Relaxed) > 0 || allocations_or_waits_sampled()
    })
}

/// Whether the memory profiler sampled an allocation.
fn allocations_or_waits_sampled() -> bool {
    crate::record::memory::ACTIVITY
        .sampled
        .load(Ordering::Relaxed)
        > 0
        || crate::sources::locks::ACTIVITY
            .tallies
            .iter()
            .any(|t| t.sampled.load(Ordering::Relaxed) > 0)
}

/// `_exit`/`_Exit`: writes the profile if there is anything in it.
pub fn process_ending() {
    if is_owner() {
        block_sigprof_for_good();
        if stop_with_ticks() {
            write_profile();
        }
        end_helper();
    }
}

/// Before an `exec`: writes the profile of the image about to be replaced, if there is
/// anything in it. Sampling stops either way.
pub fn before_exec() {
    // Samples, not only ticks: a fork child that execs at once (subprocess) may have run
    // past its timer's first expiry without a sample delivered, and would leave a profile
    // of nothing but `<unsampled thread time>`.
    let sampled = || {
        sampler::get().is_some_and(|s| s.stats.samples.load(Ordering::Relaxed) > 0)
            || allocations_or_waits_sampled()
    };
    if !is_owner() {
        return;
    }
    if stop_with_ticks() && sampled() {
        if let Some(path) = write_profile() {
            *BEFORE_EXEC.lock().unwrap_or_else(|e| e.into_inner()) = Some(path);
        }
    }
    crate::sources::helper::end_and_reap();
}

/// The `exec` failed: the process goes on, sampled again; its profile will be written at
/// its end.
pub fn exec_failed() {
    if !is_owner() {
        return;
    }
    if let Some(path) = BEFORE_EXEC.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = std::fs::remove_file(path);
        DUMPED.store(false, Ordering::Release);
        crate::output::windows::resume_after_failed_exec();
    }
    if let Some(s) = sampler::get() {
        // The helper process first: the threads' events are opened by it.
        crate::sources::helper::resume_after_failed_exec(s);
        s.resume();
    }
}

/// The process sends itself `signal` (`kill`, `raise`; Python 3.8+ ends a program
/// interrupted by Ctrl-C so): when the signal's action is the default one and it ends the
/// process, the profile is written first. Async-signal-safe.
pub fn signalling_self(signal: libc::c_int) {
    if !FATAL_SIGNALS.contains(&signal) || !is_owner() {
        return;
    }
    // SAFETY: querying the disposition and the signal mask.
    let default_and_deliverable = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        let mut mask: libc::sigset_t = std::mem::zeroed();
        signals::real_sigaction(signal, std::ptr::null(), &mut action) == 0
            && action.sa_sigaction == libc::SIG_DFL
            && libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut mask) == 0
            && libc::sigismember(&mask, signal) == 0
    };
    // A guarded signal reaches on_fatal_signal, which writes the profile itself.
    if default_and_deliverable {
        write_from_child(None);
        end_helper();
    }
}

/// Ends the process by `signal`, as its default action would, from a handler of it: writes
/// the profile, restores the default action and sends the signal again to this thread (it
/// is delivered when the handler returns). Async-signal-safe.
pub fn end_by_signal(signal: libc::c_int) {
    if is_owner() {
        write_from_child(None);
        end_helper();
    }
    signals::restore_default(signal);
    // SAFETY: raw system calls with valid arguments.
    unsafe {
        libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::gettid(), signal);
    }
}

// The handler of `SIGSEGV` and `SIGBUS` (`on_fault`): asks `fault_decision` with the
// kernel's arguments kept, then returns, or jumps to the program's handler with those
// arguments and the kernel's return address (its signal trampoline), so that the program's
// handler runs as if the kernel had called it directly.
std::arch::global_asm!(
    ".pushsection .text.pyigprof_on_fault,\"ax\",@progbits",
    ".p2align 4",
    ".hidden pyigprof_on_fault",
    ".globl pyigprof_on_fault",
    ".type pyigprof_on_fault,@function",
    "pyigprof_on_fault:",
    ".cfi_startproc",
    "    push rdi",
    ".cfi_adjust_cfa_offset 8",
    "    push rsi",
    ".cfi_adjust_cfa_offset 8",
    "    push rdx",
    ".cfi_adjust_cfa_offset 8",
    "    call {decide}",
    "    pop rdx",
    ".cfi_adjust_cfa_offset -8",
    "    pop rsi",
    ".cfi_adjust_cfa_offset -8",
    "    pop rdi",
    ".cfi_adjust_cfa_offset -8",
    "    test rax, rax",
    "    jz 1f",
    "    jmp rax",
    "1:",
    "    ret",
    ".cfi_endproc",
    ".size pyigprof_on_fault, . - pyigprof_on_fault",
    ".popsection",
    decide = sym fault_decision,
);

extern "C" {
    /// The `SIGSEGV`/`SIGBUS` handler (the `pyigprof_on_fault` entry above).
    #[link_name = "pyigprof_on_fault"]
    fn on_fault_entry(signal: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void);
}

/// The address of the `SIGSEGV`/`SIGBUS` handler, typed as a handler.
pub(crate) fn on_fault() -> extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) {
    type Unsafe = unsafe extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
    // SAFETY: the entry is a signal handler with the SA_SIGINFO calling convention, safe
    // for the kernel to call.
    unsafe { std::mem::transmute::<Unsafe, _>(on_fault_entry as Unsafe) }
}

/// What `SIGSEGV`/`SIGBUS` does: a fault of the sampler's own reads is recovered
/// (`capture::probe`) and 0 returned; for a handler the program installed, its address is
/// returned (mask set: `signals::pass_to_program`); otherwise the fatal-signal handling
/// runs and 0 is returned.
extern "C" fn fault_decision(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    uc: *mut libc::c_void,
) -> usize {
    // SAFETY: what the kernel passed to the handler.
    if unsafe { crate::capture::probe::fix_up(info, uc) } {
        return 0;
    }
    // SAFETY: as above.
    match unsafe { signals::pass_to_program(signal, info) } {
        signals::Passed::Run(handler) => handler,
        signals::Passed::Ignored => 0,
        signals::Passed::Default => {
            on_fatal_signal(signal, info, uc);
            0
        }
    }
}

/// Handler of the fatal signals while the program leaves them at their default action
/// (for `SIGSEGV` and `SIGBUS`, reached through `on_fault`'s decision): the profile is
/// written and the signal ends the process.
extern "C" fn on_fatal_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    uc: *mut libc::c_void,
) {
    let _ = uc;
    if is_owner() && signals::program_sees_default(signal) {
        write_from_child(None);
        end_helper();
    }
    signals::restore_default(signal);
    // SAFETY: the kernel passes a valid siginfo.
    let code = unsafe { (*info).si_code };
    let fault = matches!(
        signal,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL
    ) && code > 0;
    if !fault {
        // Sent (not a fault): send it again; it is delivered, with the default action,
        // when this handler returns. A fault recurs when the instruction runs again.
        // SAFETY: raw system calls with valid arguments.
        unsafe {
            libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::gettid(), signal);
        }
    }
}

/// Handler of `PYIGPROF_DUMP_SIGNAL`.
extern "C" fn on_dump_signal(
    _signal: libc::c_int,
    _info: *mut libc::siginfo_t,
    uc: *mut libc::c_void,
) {
    let entered = pyigprof_hooks::interruptions::entered();
    snapshot_from_handler();
    // SAFETY: the kernel's ucontext.
    unsafe { pyigprof_hooks::interruptions::keep(entered, uc.cast()) };
}

/// Writes a snapshot from a signal handler (the dump signal, the dump timer's `SIGPROF`).
/// Async-signal-safe.
pub fn snapshot_from_handler() {
    if is_owner() && !DUMPED.load(Ordering::Acquire) {
        let n = SNAPSHOTS.fetch_add(1, Ordering::Relaxed) + 1;
        write_from_child(Some(n));
    }
}

/// Writes a snapshot of the profile so far now, as the dump signal does (a fork child
/// writes it; sampling goes on), for `pyigprof top`'s `w` key; returns the path it is
/// written to (`PYIGPROF_OUTPUT` tagged `snapshotN`, absolute). `None` in a process the
/// preloaded library does not sample (an attach window) or whose final profile is written.
/// Not from a signal handler.
pub fn snapshot_now() -> Option<PathBuf> {
    let config = CONFIG.get()?;
    if !is_owner() || DUMPED.load(Ordering::Acquire) {
        return None;
    }
    let n = SNAPSHOTS.load(Ordering::Relaxed) + 1;
    snapshot_from_handler();
    let path = dump::tagged(
        &final_path(config, std::process::id()),
        &format!("snapshot{n}"),
    );
    Some(std::path::absolute(&path).unwrap_or(path))
}

fn program_took_dump_signal(signal: libc::c_int) {
    crate::notice!("pyigprof: the program installed its own handler for signal {signal}; PYIGPROF_DUMP_SIGNAL no longer writes profiles");
}

/// Writes the final profile (`snapshot` = `None`, marking it written) or a snapshot from a
/// child process, and waits for it (at most [`CHILD_TIMEOUT`]). Async-signal-safe in the
/// calling process: `_Fork`, `waitpid`, `nanosleep`, `kill`.
fn write_from_child(snapshot: Option<u32>) {
    if snapshot.is_none() && DUMPED.swap(true, Ordering::AcqRel) {
        wait_for_writer();
        return;
    }
    if snapshot.is_none() {
        // The child writes the last window: no more from the window writer, and the child
        // sends what the pusher has not.
        crate::output::windows::stop_now();
        crate::output::push::hand_over();
    }
    let (Some(sampler), Some(config)) = (sampler::get(), CONFIG.get()) else {
        return;
    };
    // SAFETY: getpid has no preconditions; _Fork/fork create a child that only runs
    // `child` below and then ends with exit_group.
    unsafe {
        let parent = libc::getpid();
        let fork = FORK.load(Ordering::Relaxed);
        let child = if fork != 0 {
            std::mem::transmute::<usize, extern "C" fn() -> libc::pid_t>(fork)()
        } else {
            libc::syscall(libc::SYS_fork) as libc::pid_t
        };
        if child == 0 {
            // The child's checked reads (naming frames) recover from faults; any other
            // fault ends the child, not the program's handler in a copy of the program.
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = crate::capture::probe::recover_or_exit as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
            for signal in [libc::SIGSEGV, libc::SIGBUS] {
                signals::real_sigaction(signal, &action, std::ptr::null_mut());
            }
            crate::signal_guard::block_all_but_faults();
            let ok = write(sampler, config, parent as u32, snapshot).is_some();
            libc::syscall(libc::SYS_exit_group, if ok { 0 } else { 1 });
        }
        if child < 0 {
            return;
        }
        let ended = poll_until_timeout(|| {
            let mut status = 0;
            libc::waitpid(child, &mut status, libc::WNOHANG) != 0
        });
        if ended {
            return;
        }
        libc::syscall(libc::SYS_kill, child, libc::SIGKILL);
        let mut status = 0;
        libc::waitpid(child, &mut status, 0);
    }
}

/// Starts the periodic-dump timer: every `seconds` of wall time, a `SIGPROF` carrying
/// [`DUMP_COOKIE`] to the process (any thread).
fn start_dump_timer(seconds: u32) -> Result<(), String> {
    let period_ns = u64::from(seconds) * 1_000_000_000;
    handler::on_timer(DUMP_COOKIE, snapshot_from_handler);
    timer::create_timer(
        "a timer",
        libc::CLOCK_MONOTONIC,
        None,
        DUMP_COOKIE,
        period_ns,
        period_ns,
    )
    .map(|_| ())
}
