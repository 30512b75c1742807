//! The overhead budget (`PYIGPROF_MAX_OVERHEAD=PERCENT`): the sampling interval is
//! lengthened (and shortened again, down to the one `PYIGPROF_HZ` asks for) so that the
//! profiler's cost — the signal handler's time in the program's threads plus the helper
//! process's CPU time — stays within PERCENT of the program's own CPU time.
//!
//! The helper process measures it every quarter of a second ([`CHECK_NS`]; the first time
//! after a tenth, [`FIRST_CHECK_NS`]) at its looks
//! ([`crate::sources::perf::Keeper::look`]): the handler's total time (shared memory:
//! [`crate::record::timing::HandlerTimes::total_ns`]), its own CPU clock and the program's
//! (raw `clock_gettime`: the helper touches no errno), and sets [`SCALE`], the mean
//! interval as a multiple of the period in 1/[`SCALE_ONE`]ths, which every draw of an
//! interval uses ([`crate::sources::perf::mean_interval`]). The tick stays the period:
//! each sample weighs the CPU time since the thread's previous one, so a longer interval
//! means heavier samples, not less time, and every share stays unbiased. The helper's
//! looks (each re-draws the intervals of the threads sampled since the last) become rarer
//! in the same proportion ([`crate::sources::perf::batch_ns`]): a look costs it tens of
//! microseconds whatever it finds. Perf events only (the POSIX timers' period is the
//! kernel's to keep).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// [`SCALE`] for the rate asked.
pub const SCALE_ONE: u32 = 16;
/// The longest mean interval, in [`SCALE_ONE`]ths of the period: 64 periods (at 4 kHz,
/// 62.5 samples per CPU second).
pub const SCALE_MAX: u32 = 64 * SCALE_ONE;
/// How often the helper process measures the cost, ns of wall time.
pub const CHECK_NS: u64 = 250_000_000;
/// The first check, sooner: until it the rate asked runs unchecked, which in a short run
/// is a share of the whole cost to reckon with (0.25 s at 4 kHz of a 3.8 s run: 0.26
/// points of a 1 % budget, measured on Debian's 3.11).
pub const FIRST_CHECK_NS: u64 = 100_000_000;

/// The mean sampling interval, in [`SCALE_ONE`]ths of the period.
pub static SCALE: AtomicU32 = AtomicU32::new(SCALE_ONE);
/// The budget, in millionths of the program's CPU time (0: none).
static BUDGET_PPM: AtomicU32 = AtomicU32::new(0);
/// The cost measured over the latest second, in millionths (for the statistics).
pub static MEASURED_PPM: AtomicU64 = AtomicU64::new(0);

/// Sets the budget to `ppm` millionths of the program's CPU time (from the constructor).
pub fn set(ppm: u32) {
    BUDGET_PPM.store(ppm, Ordering::Relaxed);
}

/// The budget in per cent, if one is set.
pub fn percent() -> Option<f64> {
    match BUDGET_PPM.load(Ordering::Relaxed) {
        0 => None,
        ppm => Some(f64::from(ppm) / 10_000.0),
    }
}

/// What the controller saw at its last check (CPU and wall clocks, ns).
#[derive(Default)]
pub struct Controller {
    at_ns: u64,
    program_ns: u64,
    helper_ns: u64,
    handler_ns: u64,
    /// A cost was measured already ([`FIRST_CHECK_NS`] then [`CHECK_NS`] apart).
    checked: bool,
}

/// `clock_gettime(clock)` by a raw system call (no errno): ns, or `None`.
fn clock(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; the raw call touches no thread-local state.
    let r = unsafe {
        crate::sources::helper::raw(
            libc::SYS_clock_gettime,
            [clock as u64, std::ptr::addr_of_mut!(ts) as u64, 0, 0],
        )
    };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

impl Controller {
    /// Every [`CHECK_NS`] at most: measures the cost since the last check and sets
    /// [`SCALE`].
    /// In the helper process: direct system calls and atomics only.
    pub fn check(&mut self, handler_total_ns: u64, program: libc::pid_t) {
        let budget = BUDGET_PPM.load(Ordering::Relaxed);
        if budget == 0 {
            return;
        }
        let Some(now) = clock(libc::CLOCK_MONOTONIC) else {
            return;
        };
        let due = if self.checked {
            CHECK_NS
        } else {
            FIRST_CHECK_NS
        };
        if now.saturating_sub(self.at_ns) < due {
            return;
        }
        let (Some(program_ns), Some(helper_ns)) = (
            clock(crate::sources::timer::process_cpu_clock(program)),
            clock(libc::CLOCK_PROCESS_CPUTIME_ID),
        ) else {
            return;
        };
        let first = self.at_ns == 0;
        let d_program = program_ns.saturating_sub(self.program_ns);
        let d_helper = helper_ns.saturating_sub(self.helper_ns);
        let d_handler = handler_total_ns.saturating_sub(self.handler_ns);
        *self = Controller {
            at_ns: now,
            program_ns,
            helper_ns,
            handler_ns: handler_total_ns,
            checked: !first,
        };
        // The program's own CPU time: its process's, less the handler's in its threads.
        let own = d_program.saturating_sub(d_handler);
        if first || own < 2_000_000 {
            // Nothing to go by (the first look, or a quarter second of next to no CPU).
            return;
        }
        let cost_ppm = (d_handler + d_helper).saturating_mul(1_000_000) / own;
        MEASURED_PPM.store(cost_ppm, Ordering::Relaxed);
        SCALE.store(
            next_scale(SCALE.load(Ordering::Relaxed), cost_ppm, u64::from(budget)),
            Ordering::Relaxed,
        );
    }
}

/// The scale after a check that measured `cost_ppm` under `scale`, for a budget of
/// `budget_ppm`: over nine tenths of the budget, the interval grows in proportion to bring
/// the cost to three quarters of it (the margin absorbs the helper's cost not falling as
/// fast as the samples, and what the start cost before the first check); under half of
/// it, it shrinks by a quarter; never below the rate asked nor above [`SCALE_MAX`].
pub fn next_scale(scale: u32, cost_ppm: u64, budget_ppm: u64) -> u32 {
    let scale = u64::from(scale);
    let next = if cost_ppm * 10 > budget_ppm * 9 {
        (scale * cost_ppm * 4).div_ceil(budget_ppm * 3)
    } else if cost_ppm * 2 < budget_ppm {
        scale * 3 / 4
    } else {
        scale
    };
    next.clamp(u64::from(SCALE_ONE), u64::from(SCALE_MAX)) as u32
}

/// The statistics line of the budget, if one is set: `#pyigprof budget
/// max_overhead_percent=1 overhead_percent=0.83 interval_scale=2.50 effective_hz=1600`
/// (the latest second's cost and scale; the rate `hz` asked divided by the scale).
pub fn statistics_line(hz: u32) -> Option<String> {
    let budget = percent()?;
    let scale = f64::from(SCALE.load(Ordering::Relaxed)) / f64::from(SCALE_ONE);
    Some(format!(
        "#pyigprof budget max_overhead_percent={budget} overhead_percent={:.3} interval_scale={scale:.2} effective_hz={:.0}",
        MEASURED_PPM.load(Ordering::Relaxed) as f64 / 10_000.0,
        f64::from(hz) / scale
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_follows_the_cost_within_its_bounds() {
        // 1 % budget (10,000 ppm): 4 % measured → ×16/3 (to 0.75 %).
        assert_eq!(next_scale(SCALE_ONE, 40_000, 10_000), 86);
        // 0.95 %: over nine tenths of the budget → ×1.27.
        assert_eq!(next_scale(80, 9_500, 10_000), 102);
        // Within nine tenths of the budget but above half of it: unchanged.
        assert_eq!(next_scale(80, 8_000, 10_000), 80);
        // Well under: a quarter shorter, never below the rate asked.
        assert_eq!(next_scale(80, 2_000, 10_000), 60);
        assert_eq!(next_scale(SCALE_ONE, 0, 10_000), SCALE_ONE);
        // Never longer than 64 periods.
        assert_eq!(next_scale(SCALE_MAX / 2, 1_000_000, 10_000), SCALE_MAX);
    }
}
