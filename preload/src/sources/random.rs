//! Random draws for the sources: where the next sample is taken.
//!
//! Samples taken at fixed intervals see a program whose work repeats with a commensurate
//! period at the same phase every time, and its shares are then wrong by any amount, however
//! many samples are taken (Mytkowicz et al., "Evaluating the accuracy of Java profilers",
//! PLDI 2010). Intervals drawn at random cannot lock onto any period: every share is an
//! unbiased estimate ([`interval`] says why its intervals are uniform). The draws here are
//! async-signal-safe (a generator state the caller owns, no allocation, no lock) and cheap
//! (a xorshift64* step, and a logarithm for the exponential).

use std::sync::atomic::{AtomicU64, Ordering};

/// Seeds handed out to generators, each a new one.
static SEEDS: AtomicU64 = AtomicU64::new(0x853c_49e6_748f_ea9b);

/// A fresh, non-zero generator state, different for every call (a counter mixed with the
/// monotonic clock and `salt`, e.g. a stack address or a thread id). Async-signal-safe.
pub fn seed(salt: u64) -> u64 {
    let now = crate::sources::timer::clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0);
    let x = SEEDS
        .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
        .wrapping_mul(0x2545_f491_4f6c_dd1d)
        ^ salt
        ^ now;
    x | 1
}

/// A uniform number in `(0, 1]` from the xorshift64* generator whose state is `*state`
/// (seeded by [`seed`] when 0), which it advances.
pub fn uniform(state: &mut u64) -> f64 {
    let mut x = *state;
    if x == 0 {
        x = seed(state as *const u64 as u64);
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    ((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) + 1) as f64 / (1u64 << 53) as f64
}

/// A draw from the exponential distribution with mean `mean` (any unit): the memory
/// profiler's byte thresholds.
pub fn exponential(state: &mut u64, mean: f64) -> f64 {
    -uniform(state).ln() * mean
}

/// A generator whose state lives in a `Cell`: one thread's own (a thread-local sampling
/// state: the memory profiler's, the lock profiler's). All-zero is a valid, unseeded state
/// (seeded by [`uniform`] at its first draw).
pub struct LocalRandom(std::cell::Cell<u64>);

impl LocalRandom {
    /// An unseeded generator.
    pub const fn new() -> LocalRandom {
        LocalRandom(std::cell::Cell::new(0))
    }

    /// A uniform number in `(0, 1]` ([`uniform`]).
    pub fn uniform(&self) -> f64 {
        let mut x = self.0.get();
        let u = uniform(&mut x);
        self.0.set(x);
        u
    }

    /// A draw from the exponential distribution with mean `mean` ([`exponential`]).
    pub fn exponential(&self, mean: f64) -> f64 {
        let mut x = self.0.get();
        let draw = exponential(&mut x, mean);
        self.0.set(x);
        draw
    }
}

impl Default for LocalRandom {
    fn default() -> Self {
        LocalRandom::new()
    }
}

/// `amount` in whole `unit`s, its remainder rounded up with the probability of its share of
/// a unit (`u`: uniform in `(0, 1]`): unbiased, whatever the amounts' pattern (a weight in
/// ns turned into ticks of the period).
pub fn round_at_random(amount: u64, unit: u64, u: f64) -> u64 {
    let left = amount % unit;
    amount / unit + u64::from(left > 0 && u * unit as f64 <= left as f64)
}

/// The interval to the next sample, in the unit of `mean` (nanoseconds of CPU time for a
/// clock): uniform between half and one and a half times `mean`, and at least `floor` (the
/// shortest period the kernel arms, 10 µs for its hrtimer-based events).
///
/// Why uniform on `[mean/2, 3·mean/2]`, not exponential: samples whose intervals are spread
/// over a whole mean cannot stay in step with a program's period — the phase of the next
/// sample against a period `P` is uniform after one interval when `P` divides the spread
/// (`mean`), and for any `P` up to the mean within a few samples (the characteristic
/// function of the interval, `sinc(π·mean/P)`, is at most 0.22 there), while a longer
/// period is covered by several samples per period anyway. Each sample weighs the time
/// since the previous one; with this spread the weights vary by 29 % (coefficient of
/// variation 1/√12), which makes a share's variance 1.08 times that of fixed weights, where
/// exponential intervals (variation 100 %) double it. Since the phase at a sample is uniform
/// and independent of the interval that led to it, weighted shares are unbiased.
pub fn interval(state: &mut u64, mean: u64, floor: u64) -> u64 {
    let draw = mean as f64 * (0.5 + uniform(state));
    (draw.round() as u64).max(floor)
}

/// The first interval of a thread's samples, drawn as if its samples had started long
/// before it (the thread's start is a random point of a running sequence of [`interval`]s):
/// returns `(first, before)`, the time to its first sample and the part of that sample's
/// interval that lies before the start, in the unit of `mean`.
///
/// The interval that a random point falls in is drawn length-biased (density `x/mean` times
/// the interval's own: a long interval is more likely to hold the point), and the point
/// uniformly within it. So `first` has the residual's density `(1 - F(x))/mean`, which is
/// `1/mean` below `mean/2`: a thread that runs `t < mean/2` is sampled with probability
/// `t/mean`, and one that runs longer than `3·mean/2` always. Its first sample weighs the
/// whole interval (`before` + the time it ran), the one a sample of a thread that started
/// long before would weigh; what the thread runs after its last sample, up to the interval
/// armed then, is not counted. The expected weight of any stretch of a thread's time is
/// then that time, however short the thread: the threads that end before their first
/// sample are made up for by the `before` of those that do not (Palm calculus for
/// stationary renewal processes; tested in `first_intervals_make_short_threads_add_up`).
pub fn first_interval(state: &mut u64, mean: u64, floor: u64) -> (u64, u64) {
    let (low, high) = (mean as f64 * 0.5, mean as f64 * 1.5);
    // Length-biased on [low, high]: the inverse of its distribution (x² - low²) / (high² - low²).
    let whole = (low * low + uniform(state) * (high * high - low * low)).sqrt();
    let first = whole * uniform(state);
    let before = whole - first;
    ((first.round() as u64).max(floor), before.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_spread_evenly_over_a_whole_mean() {
        let mut state = 0;
        let n = 200_000;
        let mean = 1_000_000u64;
        let draws: Vec<u64> = (0..n).map(|_| interval(&mut state, mean, 10_000)).collect();
        let average = draws.iter().sum::<u64>() as f64 / n as f64;
        // Standard error of the mean: 289 µs / sqrt(200,000) = 0.65 µs.
        assert!((average - mean as f64).abs() < 3_000.0, "mean {average}");
        assert!(draws.iter().all(|&d| (500_000..=1_500_000).contains(&d)));
        // Uniform: each tenth of the range holds a tenth of the draws.
        let mut tenths = [0u32; 10];
        for &d in &draws {
            tenths[(((d - 500_000) * 10 / 1_000_001) as usize).min(9)] += 1;
        }
        for t in tenths {
            assert!((f64::from(t) / n as f64 - 0.1).abs() < 0.005, "{tenths:?}");
        }
        // No lattice: the draws' phases against a program's period (here 40 µs, 4 ms and
        // 0.7 ms) are spread evenly.
        for period in [40_000u64, 4_000_000, 700_000] {
            let mut bins = [0u32; 10];
            let mut t = 0u64;
            for &d in &draws {
                t += d;
                bins[((t % period) * 10 / period) as usize] += 1;
            }
            for b in bins {
                assert!(
                    (f64::from(b) / n as f64 - 0.1).abs() < 0.01,
                    "{period}: {bins:?}"
                );
            }
        }
    }

    #[test]
    fn first_intervals_make_short_threads_add_up() {
        // Threads that run `t` each, sampled from their start by `first_interval` then
        // `interval`: each sample weighs the time since the previous one (`before` added to
        // the first), the time after the last one is not counted. The weights add up to
        // the threads' time, whether they are far shorter than the mean or far longer.
        let mean = 1_000_000u64;
        let mut state = 11;
        for t in [50_000u64, 300_000, 700_000, 1_200_000, 5_300_000] {
            let threads = 400_000 / (1 + t / 200_000);
            let (mut weight, mut sampled) = (0u64, 0u64);
            for _ in 0..threads {
                let (first, before) = first_interval(&mut state, mean, 10_000);
                let (mut at, mut last) = (first, 0u64);
                let mut extra = before;
                if at <= t {
                    sampled += 1;
                }
                while at <= t {
                    weight += at - last + extra;
                    extra = 0;
                    last = at;
                    at += interval(&mut state, mean, 10_000);
                }
            }
            let truth = (threads * t) as f64;
            let error = (weight as f64 - truth) / truth;
            assert!(error.abs() < 0.01, "{t} ns: weights {weight}, time {truth}");
            // Below half the mean a thread is sampled with probability t / mean.
            if t < mean / 2 {
                let p = sampled as f64 / threads as f64;
                assert!((p - t as f64 / mean as f64).abs() < 0.01, "{t} ns: {p}");
            } else if t > 3 * mean / 2 {
                assert_eq!(sampled, threads);
            }
        }
    }

    #[test]
    fn no_interval_is_shorter_than_the_floor() {
        let mut state = 7;
        assert!((0..10_000).all(|_| interval(&mut state, 15_000, 10_000) >= 10_000));
    }

    #[test]
    fn generators_seeded_apart_differ() {
        let (mut a, mut b) = (0, 0);
        let x: Vec<u64> = (0..4).map(|_| (uniform(&mut a) * 1e9) as u64).collect();
        let y: Vec<u64> = (0..4).map(|_| (uniform(&mut b) * 1e9) as u64).collect();
        assert_ne!(x, y);
        assert!((0..1000).all(|_| {
            let u = uniform(&mut a);
            u > 0.0 && u <= 1.0
        }));
    }
}
