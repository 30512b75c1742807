//! Random draws for the sources: where the next sample is taken.
//!
//! Samples taken at fixed intervals see a program whose work repeats with a commensurate
//! period at the same phase every time, and its shares are then wrong by any amount, however
//! many samples are taken (Mytkowicz et al., "Evaluating the accuracy of Java profilers",
//! PLDI 2010). Intervals drawn at random cannot lock onto any period: every share is an
//! unbiased estimate. The draws here are async-signal-safe (a generator state the caller
//! owns, no allocation, no lock) and cheap (a xorshift64* step and a logarithm).

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

/// A draw from the exponential distribution with mean `mean` (any unit).
pub fn exponential(state: &mut u64, mean: f64) -> f64 {
    -uniform(state).ln() * mean
}

/// The interval to the next sample, in the unit of `mean` and `floor` (nanoseconds of CPU
/// time for a clock): `floor` plus an exponential draw of mean `mean - floor`, so that its
/// mean is exactly `mean` and no interval is shorter than `floor` (the shortest period the
/// kernel arms, 10 µs for its hrtimer-based events). Past the floor it is memoryless: the
/// chance of a sample in the next instant does not depend on when the last one was, so no
/// period of the program can line up with the samples. `floor` is capped at half the mean.
pub fn interval(state: &mut u64, mean: u64, floor: u64) -> u64 {
    let floor = floor.min(mean / 2);
    floor + exponential(state, (mean - floor) as f64).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_have_the_mean_asked_for_and_an_exponential_tail() {
        let mut state = 0;
        let n = 200_000;
        let (mean, floor) = (1_000_000u64, 10_000u64);
        let draws: Vec<u64> = (0..n).map(|_| interval(&mut state, mean, floor)).collect();
        let average = draws.iter().sum::<u64>() as f64 / n as f64;
        // Standard error of the mean: 990 µs / sqrt(200,000) = 2.2 µs; 4.5 of them.
        assert!((average - mean as f64).abs() < 10_000.0, "mean {average}");
        assert!(draws.iter().all(|&d| d >= floor));
        // Memoryless past the floor: P(X - floor > m) = e^-1, and P(X - floor > 2m | X - floor > m) too.
        let m = (mean - floor) as f64;
        let above = |t: f64| draws.iter().filter(|&&d| (d - floor) as f64 > t).count() as f64 / n as f64;
        let (p1, p2) = (above(m), above(2.0 * m));
        assert!((p1 - (-1.0f64).exp()).abs() < 0.005, "{p1}");
        assert!((p2 / p1 - (-1.0f64).exp()).abs() < 0.01, "{p2} {p1}");
        // No lattice: the draws' phases against a program's period (here 40 µs, short
        // against the mean) are spread evenly.
        let mut bins = [0u32; 10];
        for &d in &draws {
            bins[((d % 40_000) / 4_000) as usize] += 1;
        }
        for b in bins {
            assert!((f64::from(b) / n as f64 - 0.1).abs() < 0.01, "{bins:?}");
        }
    }

    #[test]
    fn a_floor_above_half_the_mean_is_capped() {
        let mut state = 7;
        let n = 100_000;
        let sum: u64 = (0..n).map(|_| interval(&mut state, 15_000, 10_000)).sum();
        let average = sum as f64 / n as f64;
        assert!((average - 15_000.0).abs() < 150.0, "{average}");
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
