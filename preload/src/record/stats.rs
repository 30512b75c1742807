//! The sampler's own statistics: what it sampled, what it dropped and why, how deep the
//! stacks went and how long the handler took. Written at the end of every profile as
//! `#pyigprof` lines (docs/dump-format.md, "The profiler's statistics") and summed up in
//! the line printed at exit.

use crate::record::timing::{HandlerSummary, HandlerTimes};
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the sampler's own work, all in samples (signals handled) unless named
/// otherwise. Relaxed atomics, updated from the signal handler.
#[derive(Default)]
pub struct Stats {
    /// Signals handled.
    pub samples: AtomicU64,
    /// Ticks counted (1 + merged expirations per signal).
    pub ticks: AtomicU64,
    /// Samples recorded with Python frames spliced in.
    pub with_python: AtomicU64,
    /// Samples whose native stack reached its outermost frame.
    pub complete: AtomicU64,
    /// Samples whose native stack has a frame found by a heuristic step (code without CFI:
    /// a frame-pointer step or a stack scan, `capture::unwind::heuristic`).
    pub approximate: AtomicU64,
    /// Samples dropped because every thread slot was taken (more than
    /// [`crate::record::threads::MAX_THREADS`] threads at once).
    pub dropped_no_slot: AtomicU64,
    /// Samples dropped because the trace-tree node pool was full.
    pub dropped_tree_full: AtomicU64,
    /// Samples (and memory or lock profiler events) not captured because the sampled
    /// thread's stack had less room left below the handler than a capture may use
    /// ([`crate::sampler::CAPTURE_STACK`]): a thread of a small stack deep in it.
    pub dropped_no_stack_room: AtomicU64,
    /// Ticks of the dropped samples.
    pub dropped_ticks: AtomicU64,
    /// Samples whose Python part was abandoned after a read that failed validation (the
    /// native part is kept).
    pub python_abandoned: AtomicU64,
    /// Samples with a non-empty group of Python frames that no native evaluator frame was
    /// found for, in a whole native stack: the group was left out (`capture::mixed`).
    pub python_mismatches: AtomicU64,
    /// Deepest recorded call stack, in frames.
    pub deepest: AtomicU64,
    /// Ticks of threads that no sample took and no sample could be given: counted at the
    /// threads' end on an `<unsampled thread time>` marker
    /// ([`crate::capture::frames::Marker::Unsampled`]).
    pub unsampled_ticks: AtomicU64,
    /// Ticks of threads' last moments after their last sample (a perf event's count since
    /// it, or a CPU timer's expirations the kernel had not delivered), counted at their
    /// end on that last CPU sample, where they most likely still were.
    pub tail_ticks: AtomicU64,
    /// Ticks of CPU time in which a thread's perf event overflowed in kernel mode (skipped:
    /// events sample in user mode only), counted at its previous sample.
    pub kernel_ticks: AtomicU64,
    /// Threads whose timer was armed (or, in wall mode, that the wall-clock source watches).
    pub threads: AtomicU64,
    /// Wall mode: samples of threads blocked in a system call, taken from the wall-clock
    /// source's own thread without interrupting them (`crate::sources::wall`).
    pub blocked: AtomicU64,
    /// Wall mode: ticks of periods in which a thread was runnable but got no CPU (found not
    /// blocked, with no CPU-timer tick for the period), added to its latest sample.
    pub waiting_ticks: AtomicU64,
    /// Wall mode: samples of suspended asyncio tasks (each a stack ending in
    /// `<awaiting>`, [`crate::capture::python::tasks`]), and their ticks (in `ticks` too;
    /// not in `samples`, which counts the threads' samples).
    pub task_samples: AtomicU64,
    /// See `task_samples`.
    pub task_ticks: AtomicU64,
    /// `PYIGPROF_GIL=1`: ticks of samples left out because their thread did not hold the
    /// GIL (in `ticks` too, not in the trace trees).
    pub gil_free_ticks: AtomicU64,
    /// The samples recorded into the trace trees (`samples` less those dropped or left
    /// out), their ticks (each sample's weight) and the sum of their squares: what a
    /// share's sampling error depends on when samples weigh different numbers of ticks —
    /// the analyser's design effect, `n · Σw² / (Σw)²` (docs/analyser.md, "Sampling
    /// error").
    pub recorded_samples: AtomicU64,
    /// See `recorded_samples`.
    pub recorded_ticks: AtomicU64,
    /// See `recorded_ticks`.
    pub recorded_ticks_squared: AtomicU64,
    /// Time spent in the handler.
    pub handler: HandlerTimes,
}

impl Stats {
    /// The counters by their names in the profile, in the order written.
    fn counters(&self) -> [(&'static str, &AtomicU64); 26] {
        [
            ("samples", &self.samples),
            ("ticks", &self.ticks),
            ("with_python", &self.with_python),
            ("complete_native", &self.complete),
            ("approximate_native", &self.approximate),
            ("dropped_no_slot", &self.dropped_no_slot),
            ("dropped_tree_full", &self.dropped_tree_full),
            ("dropped_no_stack_room", &self.dropped_no_stack_room),
            ("dropped_ticks", &self.dropped_ticks),
            ("python_abandoned", &self.python_abandoned),
            ("python_mismatches", &self.python_mismatches),
            ("deepest", &self.deepest),
            ("unsampled_ticks", &self.unsampled_ticks),
            ("tail_ticks", &self.tail_ticks),
            ("kernel_ticks", &self.kernel_ticks),
            ("threads", &self.threads),
            ("blocked", &self.blocked),
            ("waiting_ticks", &self.waiting_ticks),
            ("task_samples", &self.task_samples),
            ("task_ticks", &self.task_ticks),
            ("gil_free_ticks", &self.gil_free_ticks),
            ("faulted_reads", &crate::capture::probe::FAULTED_READS),
            ("first_shots", &crate::sources::perf::FIRST_SHOTS),
            ("recorded_samples", &self.recorded_samples),
            ("recorded_ticks", &self.recorded_ticks),
            ("recorded_ticks_squared", &self.recorded_ticks_squared),
        ]
    }

    /// Forgets everything (in a fork child). Takes no lock.
    pub fn reset(&self) {
        for (_, counter) in self.counters() {
            counter.store(0, Ordering::Relaxed);
        }
        self.handler.reset();
    }

    /// The statistics as the texts the profile carries after its call tree
    /// (docs/dump-format.md): `#pyigprof stats <name>=<decimal> …` and
    /// `#pyigprof handler samples=… total_ns=… median_ns=… p99_ns=… max_ns=… base_ns=…
    /// native_frame_ns=… python_frame_ns=…` (the fitted costs with one decimal, `-` when
    /// undetermined).
    pub fn lines(&self) -> Vec<String> {
        self.lines_since(&[])
    }

    /// The counters' values now, in the order [`Stats::lines`] writes them: what a
    /// window's statistics are counted from ([`Stats::lines_since`]).
    pub fn values(&self) -> Vec<u64> {
        self.counters()
            .iter()
            .map(|(_, counter)| counter.load(Ordering::Relaxed))
            .collect()
    }

    /// [`Stats::lines`] with each counter less its value in `before` ([`Stats::values`]
    /// when a window started; a counter `before` does not have counts from 0): a window's
    /// statistics, which add up over the windows of a run. `deepest` (a maximum) and
    /// `threads` (threads sampled) are as they are now; the handler's times are the run's.
    pub fn lines_since(&self, before: &[u64]) -> Vec<String> {
        let mut out = String::from("#pyigprof stats");
        for (i, (name, counter)) in self.counters().iter().enumerate() {
            let now = counter.load(Ordering::Relaxed);
            let value = match *name {
                "deepest" | "threads" => now,
                _ => now.saturating_sub(before.get(i).copied().unwrap_or(0)),
            };
            out.push_str(&format!(" {name}={value}"));
        }
        let h: HandlerSummary = self.handler.summary();
        let fitted = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        out.push_str(&format!(
            "\n#pyigprof handler samples={} total_ns={} median_ns={} p99_ns={} max_ns={} \
             base_ns={} native_frame_ns={} python_frame_ns={}",
            h.samples,
            h.total_ns,
            h.median_ns,
            h.p99_ns,
            h.max_ns,
            fitted(h.base_ns),
            fitted(h.native_frame_ns),
            fitted(h.python_frame_ns),
        ));
        if crate::record::memory::ACTIVITY.rate.load(Ordering::Relaxed) != 0 {
            out.push('\n');
            out.push_str(&memory_line());
        }
        out.lines().map(str::to_string).collect()
    }
}

/// The memory profiler's statistics: `#pyigprof memory rate_bytes=… sampled=…
/// unrecorded=… allocated_bytes=… live_bytes=… peak_live_bytes=… live_frozen=0|1`: the
/// mean bytes between samples (1: every allocation), the allocations sampled and those
/// whose stack could not be recorded, the bytes the program allocated (counted exactly,
/// up to the last sample of each thread but the writer's, which the writer adds first), and the sampled estimates of
/// the bytes live now (or when the program's code ended: `live_frozen=1`) and at the peak.
pub fn memory_line() -> String {
    use crate::record::memory::{self, ACTIVITY as a};
    let (live, peak) = memory::live_and_peak();
    format!(
        "#pyigprof memory rate_bytes={} sampled={} unrecorded={} allocated_bytes={} \
         live_bytes={live} peak_live_bytes={peak} live_frozen={}",
        a.rate.load(Ordering::Relaxed),
        a.sampled.load(Ordering::Relaxed),
        a.unrecorded.load(Ordering::Relaxed),
        a.allocated_bytes.load(Ordering::Relaxed),
        u8::from(memory::frozen()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_name_every_counter() {
        let stats = Stats::default();
        stats.samples.store(12, Ordering::Relaxed);
        stats.dropped_tree_full.store(2, Ordering::Relaxed);
        stats.handler.record(2000, 10, 3);
        let lines = stats.lines();
        let text = lines.join("\n");
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].starts_with("#pyigprof stats samples=12 ticks=0 "),
            "{text}"
        );
        assert!(lines[0].contains(" dropped_tree_full=2 "), "{text}");
        assert!(
            lines[1].starts_with("#pyigprof handler samples=1 total_ns=2000 "),
            "{text}"
        );
        assert!(
            lines[1].ends_with("base_ns=- native_frame_ns=- python_frame_ns=-"),
            "{text}"
        );
        stats.reset();
        assert!(stats.lines()[0].starts_with("#pyigprof stats samples=0 "));
    }
}
