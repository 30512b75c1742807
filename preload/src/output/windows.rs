//! Continuous profiling: a profile per time window (`PYIGPROF_WINDOW=SECONDS`).
//!
//! A thread of pyigprof's (the *window writer*, which blocks every signal but the faults of
//! its reads and is not sampled) wakes every window and writes what the trace trees counted
//! since the previous window as a complete profile of its own
//! ([`crate::output::dump::Profile::collect_window`]), to the output path with `%n` the
//! window's number. Sampling never pauses: the trees are read while the threads insert,
//! each node's counters once per window, and a window counts each node's counters since
//! the previous window read them — a sample in flight when a window is written (its
//! samples counted and not yet its ticks) is in the next one, so no sample is lost or
//! counted twice and the windows of a run add up to the run. The handler is untouched:
//! nothing it does waits for a window.
//!
//! What each node had counted is kept in two buffers ([`NodeCounts`] per node index): a
//! window reads the active one and fills the other, then makes that one active. A child
//! that writes a profile from a fatal signal's handler (a fork: [`crate::output::lifecycle`])
//! reads the active one whatever the writer was doing when it forked.
//!
//! The last, partial window is written when the process ends (exit, `exec`, the fatal
//! signals that write a profile), in place of the whole run's profile. A fork child starts
//! its own windows at 0 with its own pid (its trees start empty: it never has its parent's
//! samples). Each window's statistics add up over the windows (counters since the window
//! started, [`crate::record::stats::Stats::lines_since`]), and say the window:
//! `#pyigprof window number=N start_ns=… end_ns=… start=2026-12-05T01:02:03.456Z end=…
//! seconds=… last=0|1 tree_nodes=… readings_bytes=…` (UTC, ns since the epoch; the trace
//! trees' nodes in use and the bytes of the two buffers of readings, the profiler's memory
//! that grows with the program's distinct call stacks). Memory profiles: `MEM_TOTAL` is the window's
//! allocations, `MEM_LIVE` what is live at its end, `MEM_MAX` and `MEM_LIVE_PEAK` the run's
//! so far.
//!
//! The trees keep counting between windows until they hold `PYIGPROF_MAX_TREE_NODES`
//! (`Config::max_tree_nodes`); then, where no time is lost by it
//! ([`Sampler::can_forget_trees`]), the window is collected with sampling paused and the
//! trees are forgotten ([`Sampler::forget_trees`]): the profiler's memory stays bounded
//! however many distinct call stacks a long-running service goes through.

use crate::config::Config;
use crate::output::dump::{self, Cost, NodeCounts};
use crate::sampler::{self, Sampler};
use std::cell::UnsafeCell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Where a window starts: what the trees and the statistics had counted, what the run had
/// cost, and when.
#[derive(Default)]
struct Baseline {
    /// Per trace-tree node index (past the end: nothing counted).
    nodes: Vec<NodeCounts>,
    /// [`crate::record::stats::Stats::values`].
    stats: Vec<u64>,
    /// What the process and its helper had cost (CPU ns, wake-ups, re-arms).
    cost: Option<Cost>,
    /// Wall-clock time (ns since the Unix epoch).
    start_ns: u64,
}

/// The two baselines ([`Baseline`]) and which is active. Only the window writer — or,
/// once it has stopped, the thread writing the last window — changes them, and only the
/// inactive one; a fork child reads the active one (no lock: the child has one thread).
struct Baselines {
    buffers: [UnsafeCell<Baseline>; 2],
    active: AtomicUsize,
}

// SAFETY: the protocol above: one writer of the inactive buffer at a time (the window
// writer, or the last window's writer after `stop` saw it idle), readers of the active one.
unsafe impl Sync for Baselines {}

static BASELINES: Baselines = Baselines {
    buffers: [
        UnsafeCell::new(Baseline {
            nodes: Vec::new(),
            stats: Vec::new(),
            cost: None,
            start_ns: 0,
        }),
        UnsafeCell::new(Baseline {
            nodes: Vec::new(),
            stats: Vec::new(),
            cost: None,
            start_ns: 0,
        }),
    ],
    active: AtomicUsize::new(0),
};

/// The window's length, ms (0: windows are off).
static WINDOW_MS: AtomicU64 = AtomicU64::new(0);
/// The number of the next window to write.
static NEXT: AtomicU32 = AtomicU32::new(0);
/// The window writer is to stop (the process ends).
static STOP: AtomicBool = AtomicBool::new(false);
/// The writer that may run: one started later (after a failed `exec`) ends an earlier one.
static GENERATION: AtomicU32 = AtomicU32::new(0);
/// The writer is writing a window now.
static WRITING: AtomicBool = AtomicBool::new(false);
/// Windows written by this process (for the exit summary).
static WRITTEN: AtomicU32 = AtomicU32::new(0);
/// Windows that could not be written (a full disk, …).
static FAILED: AtomicU32 = AtomicU32::new(0);
/// Times the trace trees were forgotten between two windows.
static FORGOTTEN: AtomicU32 = AtomicU32::new(0);

/// Whether windows are on in this process.
pub fn on() -> bool {
    WINDOW_MS.load(Ordering::Relaxed) != 0
}

/// Windows written and windows that failed, in this process so far.
pub fn counts() -> (u32, u32) {
    (
        WRITTEN.load(Ordering::Relaxed),
        FAILED.load(Ordering::Relaxed),
    )
}

/// The exit summary's line on the windows of process `pid`: `pyigprof: wrote N windows of
/// S s: FIRST … LAST (F could not be written)`, the paths absolute (`pyigprof record` lists
/// them from it). The line before it, on the last window, is the usual one.
pub fn summary_line(config: &Config, pid: u32) -> String {
    let (written, failed) = counts();
    let path = |n: u32| {
        let path = crate::output::lifecycle::absolute(config, config.window_path(pid, n));
        path.display().to_string()
    };
    let last = NEXT.load(Ordering::Relaxed).saturating_sub(1);
    let failed = match failed {
        0 => String::new(),
        n => format!(" ({n} could not be written)"),
    };
    format!(
        "pyigprof: wrote {written} {} of {} s: {} … {}{failed}",
        pyigprof_pprof::plural(written, "window"),
        WINDOW_MS.load(Ordering::Relaxed) as f64 / 1000.0,
        path(0),
        path(last)
    )
}

/// Wall-clock time now, ns since the Unix epoch.
fn now_ns() -> u64 {
    crate::sources::timer::clock_ns(libc::CLOCK_REALTIME).unwrap_or(0)
}

/// Starts windows of `config.window_ms` (from the constructor, the sampler installed;
/// again in a fork child, [`restart_after_fork`]).
pub fn start(config: &Config) {
    let Some(ms) = config.window_ms else { return };
    WINDOW_MS.store(ms, Ordering::Relaxed);
    begin();
    if let Some(push) = &config.push {
        let python = sampler::get().and_then(|s| s.python.as_ref().map(|rt| rt.layout.version));
        crate::output::push::start(push, python);
    }
    spawn(ms);
}

/// The first window starts now, empty.
fn begin() {
    NEXT.store(0, Ordering::Relaxed);
    STOP.store(false, Ordering::Relaxed);
    WRITING.store(false, Ordering::Relaxed);
    let start = Baseline {
        nodes: Vec::new(),
        stats: sampler::get().map(|s| s.stats.values()).unwrap_or_default(),
        cost: Some(Cost::now()),
        start_ns: now_ns(),
    };
    // SAFETY: no writer runs yet (at start-up, or in a fork child, which has one thread).
    unsafe { *BASELINES.buffers[0].get() = start };
    BASELINES.active.store(0, Ordering::Release);
}

/// Starts the window writer thread for windows of `ms`.
fn spawn(ms: u64) {
    let generation = GENERATION.fetch_add(1, Ordering::SeqCst) + 1;
    let started = std::thread::Builder::new()
        .name("pyigprof-window".into())
        .spawn(move || writer(ms, generation));
    if let Err(e) = started {
        crate::notice!("pyigprof: PYIGPROF_WINDOW: cannot start the window writer ({e}); one profile for the whole run");
        WINDOW_MS.store(0, Ordering::Relaxed);
    }
}

/// In a fork child: the child's windows start now at 0, and its writer (the parent's does
/// not exist in it). The trees were emptied for the child ([`Sampler::restart_after_fork`]).
pub fn restart_after_fork() {
    let ms = WINDOW_MS.load(Ordering::Relaxed);
    if ms == 0 {
        return;
    }
    WRITTEN.store(0, Ordering::Relaxed);
    FAILED.store(0, Ordering::Relaxed);
    FORGOTTEN.store(0, Ordering::Relaxed);
    // SAFETY: the child has one thread; the other buffer may be half-written by the
    // parent's writer at the fork: both are set afresh.
    unsafe { *BASELINES.buffers[1].get() = Baseline::default() };
    begin();
    crate::output::push::restart_after_fork();
    spawn(ms);
}

/// The window writer's loop: a window every `ms` of wall time (the deadlines do not drift
/// with the writing), until [`stop`] (or a writer of a later `generation` starts).
fn writer(ms: u64, generation: u32) {
    crate::signal_guard::block_all_but_faults();
    if let Some(s) = sampler::get() {
        // The preloaded `pthread_create` registered this thread: it is not the program's.
        s.unregister_current_thread();
    }
    let period = Duration::from_millis(ms);
    let mut deadline = std::time::Instant::now() + period;
    loop {
        let ended =
            || STOP.load(Ordering::SeqCst) || GENERATION.load(Ordering::SeqCst) != generation;
        // Sleep in steps, so that the end of the process does not wait for a long window.
        while !ended() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
        WRITING.store(true, Ordering::SeqCst);
        if ended() {
            WRITING.store(false, Ordering::SeqCst);
            return;
        }
        write_next(false);
        WRITING.store(false, Ordering::SeqCst);
        deadline += period;
        let now = std::time::Instant::now();
        if deadline < now {
            // Writing took longer than a window: the next starts now.
            deadline = now + period;
        }
    }
}

/// Stops the window writer (waiting at most a few seconds for a window it is writing);
/// then the caller writes the last window ([`write_last`]). Not from a signal handler.
pub fn stop() {
    stop_now();
    wait_while_writing();
}

/// Tells the window writer to stop, without waiting: for a signal handler about to have
/// a child write the last window. Async-signal-safe.
pub fn stop_now() {
    STOP.store(true, Ordering::SeqCst);
}

/// Waits (at most 5 s) while the writer writes a window.
fn wait_while_writing() {
    for _ in 0..5_000 {
        if !WRITING.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The `exec` that the last window was written for failed: windows go on (a new writer;
/// the stopped one has ended or ends without writing).
pub fn resume_after_failed_exec() {
    let ms = WINDOW_MS.load(Ordering::Relaxed);
    if ms == 0 {
        return;
    }
    GENERATION.fetch_add(1, Ordering::SeqCst);
    wait_while_writing();
    STOP.store(false, Ordering::SeqCst);
    spawn(ms);
}

/// Writes the last, partial window (the process ends); returns its path (`None` when
/// windows are pushed and not written) and its profile. Called by the final profile's
/// writer after [`stop`], or by the child writing a fatal signal's profile (which reads the
/// active baseline whatever the parent's writer was doing).
pub fn write_last() -> Option<(Option<PathBuf>, dump::Profile)> {
    write_next(true)
}

/// Collects the next window, writes it (to disk unless it is only pushed: `PYIGPROF_PUSH`
/// without `PYIGPROF_OUTPUT`) and queues it for the pusher ([`crate::output::push`]), and
/// makes its end the next window's start.
fn write_next(last: bool) -> Option<(Option<PathBuf>, dump::Profile)> {
    let sampler = sampler::get()?;
    let config = crate::output::lifecycle::config()?;
    let pid = crate::output::lifecycle::owner() as u32;
    let active = BASELINES.active.load(Ordering::Acquire);
    // SAFETY: the protocol of `Baselines`: this is the one writer of the inactive buffer.
    let (before, after) = unsafe {
        (
            &*BASELINES.buffers[active].get(),
            &mut *BASELINES.buffers[1 - active].get(),
        )
    };
    let number = NEXT.fetch_add(1, Ordering::Relaxed);
    // The trees of a service whose distinct call stacks keep growing are forgotten once
    // they hold `PYIGPROF_MAX_TREE_NODES` (when that loses no time:
    // [`Sampler::can_forget_trees`]): sampling paused while this window is collected (its
    // CPU time goes to each thread's next sample), then the trees start empty.
    let forget = !last
        && sampler.trees.nodes_used() > config.max_tree_nodes
        && sampler.can_forget_trees(config.profile_memory);
    let paused = forget.then(|| sampler.pause());
    let mut profile = dump::Profile::collect_window(sampler, &before.nodes, &mut after.nodes);
    if let Some(paused) = &paused {
        sampler.forget_trees(paused);
        // The next window counts from empty trees.
        after.nodes.clear();
        FORGOTTEN.fetch_add(1, Ordering::Relaxed);
    }
    drop(paused);
    let end_ns = now_ns();
    let cost = profile.cost;
    profile.pid = pid;
    profile.statistics = window_statistics(sampler, before, &cost, number, end_ns, last);
    after.stats = sampler.stats.values();
    after.cost = Some(cost);
    after.start_ns = end_ns;
    if !last {
        BASELINES.active.store(1 - active, Ordering::Release);
    }
    let span = crate::output::pprof::Span {
        start_ns: before.start_ns,
        end_ns,
    };
    crate::output::push::enqueue(
        &profile,
        span,
        number,
        config.hz,
        config.clock == crate::config::Clock::Wall,
        sampler.cpu,
        config.profile_memory,
    );
    if config.push.is_some() && !config.output_given {
        return Some((None, profile));
    }
    let path = crate::output::lifecycle::absolute(config, config.window_path(pid, number));
    match dump::write_unique(&profile, &path) {
        Ok(written) => {
            WRITTEN.fetch_add(1, Ordering::Relaxed);
            Some((Some(written), profile))
        }
        Err(e) => {
            FAILED.fetch_add(1, Ordering::Relaxed);
            crate::notice!("pyigprof: window {number}: {e}");
            None
        }
    }
}

/// A window's statistics: the run's counters less those at the window's start, the
/// sampling line, the window line and the window's cost.
fn window_statistics(
    sampler: &Sampler,
    start: &Baseline,
    cost: &Cost,
    number: u32,
    end_ns: u64,
    last: bool,
) -> Vec<String> {
    let mut lines = sampler.stats.lines_since(&start.stats);
    lines.insert(2, dump::sampling_line(sampler));
    lines.push(format!(
        "{} tree_nodes={} trees_forgotten={} readings_bytes={}",
        window_line(number, start.start_ns, end_ns, last),
        sampler.trees.nodes_used(),
        FORGOTTEN.load(Ordering::Relaxed),
        2 * start.nodes.capacity().max(sampler.trees.nodes_used())
            * std::mem::size_of::<NodeCounts>()
    ));
    let since = start.cost.unwrap_or(Cost {
        process_ns: 0,
        helper_ns: None,
        helper_wakeups: 0,
        rearms: 0,
    });
    lines.extend(crate::output::push::statistics_line());
    lines.extend(crate::sources::budget::statistics_line(
        (1_000_000_000 / sampler.period_ns.max(1)) as u32,
    ));
    lines.push(dump::cost_line(&Cost {
        process_ns: cost.process_ns.saturating_sub(since.process_ns),
        helper_ns: cost
            .helper_ns
            .map(|h| h.saturating_sub(since.helper_ns.unwrap_or(0))),
        helper_wakeups: cost.helper_wakeups.saturating_sub(since.helper_wakeups),
        rearms: cost.rearms.saturating_sub(since.rearms),
    }));
    lines
}

/// `#pyigprof window number=N start_ns=… end_ns=… start=<UTC> end=<UTC> seconds=…
/// last=0|1`.
pub fn window_line(number: u32, start_ns: u64, end_ns: u64, last: bool) -> String {
    format!(
        "#pyigprof window number={number} start_ns={start_ns} end_ns={end_ns} start={} end={} seconds={:.3} last={}",
        utc(start_ns),
        utc(end_ns),
        end_ns.saturating_sub(start_ns) as f64 / 1e9,
        u8::from(last),
    )
}

/// `ns` since the Unix epoch as UTC, ISO 8601 with milliseconds:
/// `2026-12-05T01:02:03.456Z` (the proleptic Gregorian calendar; Howard Hinnant's
/// `civil_from_days`).
pub fn utc(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let millis = (ns / 1_000_000) % 1000;
    let days = (secs / 86_400) as i64;
    let rest = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times_are_iso_8601() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        // date -u -d @1796432523.456 → Sat Dec  5 01:02:03 UTC 2026
        assert_eq!(utc(1_796_432_523_456_000_000), "2026-12-05T01:02:03.456Z");
        // A leap day.
        assert_eq!(utc(951_782_400_000_000_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn the_window_line_says_number_times_and_length() {
        let line = window_line(
            3,
            1_796_432_523_456_000_000,
            1_796_432_524_456_000_000,
            true,
        );
        assert_eq!(
            line,
            "#pyigprof window number=3 start_ns=1796432523456000000 end_ns=1796432524456000000 \
             start=2026-12-05T01:02:03.456Z end=2026-12-05T01:02:04.456Z seconds=1.000 last=1"
        );
    }
}
