//! How long the signal handler takes: a histogram of nanoseconds per sample, and sums for
//! the least-squares fit of that time against the number of native and Python frames in
//! the sample (`ns ≈ base + native × per_native + python × per_python`).
//!
//! Recording is a handful of relaxed atomic additions: async-signal-safe, no allocation.
//! The histogram is log-linear (8 sub-buckets per power of two), so a percentile read from
//! it is within 1/16 (6 %) of the true value.

use std::sync::atomic::{AtomicU64, Ordering};

/// Sub-buckets per power of two (a power of two itself).
const SUB: u64 = 8;
/// log2 of [`SUB`].
const SUB_BITS: u32 = 3;
/// Buckets: values below [`SUB`] exactly, then [`SUB`] per power of two up to 2^63.
const BUCKETS: usize = (SUB as usize) * (64 - SUB_BITS as usize + 1);
/// Samples that took longer than this (1 ms: a page fault, a preemption) are left out of
/// the per-frame fit, where a few of them would outweigh thousands of ordinary samples.
const FIT_LIMIT_NS: u64 = 1_000_000;

/// Handler times of one process.
pub struct HandlerTimes {
    /// Samples per bucket ([`bucket_of`]).
    buckets: [AtomicU64; BUCKETS],
    /// Samples timed.
    samples: AtomicU64,
    /// Their total time (ns).
    total_ns: AtomicU64,
    /// The longest (ns).
    max_ns: AtomicU64,
    /// Sums for the fit, over samples below [`FIT_LIMIT_NS`]: n, Σa, Σb, Σy, Σa², Σb², Σab,
    /// Σay, Σby with a = native frames, b = Python frames, y = ns.
    fit: [AtomicU64; 9],
}

/// What [`HandlerTimes::summary`] reports; times in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HandlerSummary {
    /// Samples timed.
    pub samples: u64,
    /// Total time in the handler (ns).
    pub total_ns: u64,
    /// Median time per sample (ns), to within 6 %.
    pub median_ns: u64,
    /// 99th percentile per sample (ns), to within 6 %.
    pub p99_ns: u64,
    /// Longest sample (ns).
    pub max_ns: u64,
    /// Fitted fixed cost per sample (ns); `None` with fewer than 3 samples.
    pub base_ns: Option<f64>,
    /// Fitted cost per native frame (ns); `None` when the native frame count never varied
    /// independently of the Python one.
    pub native_frame_ns: Option<f64>,
    /// Fitted cost per Python frame (ns); `None` when the Python frame count never varied.
    pub python_frame_ns: Option<f64>,
}

/// The bucket of a time `ns`.
fn bucket_of(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let exp = 63 - ns.leading_zeros(); // ≥ SUB_BITS
    let sub = (ns >> (exp - SUB_BITS)) & (SUB - 1);
    (SUB + u64::from(exp - SUB_BITS) * SUB + sub) as usize
}

/// The middle of bucket `index` (ns).
fn bucket_middle(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB {
        return index;
    }
    let exp = (index - SUB) / SUB + u64::from(SUB_BITS);
    let sub = (index - SUB) % SUB;
    let low = (SUB + sub) << (exp - u64::from(SUB_BITS));
    let width = 1u64 << (exp - u64::from(SUB_BITS));
    low + width / 2
}

impl Default for HandlerTimes {
    fn default() -> Self {
        HandlerTimes {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            samples: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
            fit: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl HandlerTimes {
    /// Records one sample that took `ns` and recorded `native` native and `python` Python
    /// frames. Async-signal-safe.
    pub fn record(&self, ns: u64, native: u64, python: u64) {
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.samples.fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
        if ns < FIT_LIMIT_NS {
            let (a, b, y) = (native, python, ns);
            for (sum, value) in self
                .fit
                .iter()
                .zip([1, a, b, y, a * a, b * b, a * b, a * y, b * y])
            {
                sum.fetch_add(value, Ordering::Relaxed);
            }
        }
    }

    /// The handler's total time so far, ns. Async-signal-safe.
    pub fn total_ns(&self) -> u64 {
        self.total_ns.load(Ordering::Relaxed)
    }

    /// Forgets everything (in a fork child).
    pub fn reset(&self) {
        for counter in self.buckets.iter().chain(&self.fit).chain([
            &self.samples,
            &self.total_ns,
            &self.max_ns,
        ]) {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// The percentiles and the per-frame fit of what was recorded.
    pub fn summary(&self) -> HandlerSummary {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        let percentile = |p: f64| -> u64 {
            if total == 0 {
                return 0;
            }
            let rank = ((p * total as f64).ceil() as u64).max(1);
            let mut seen = 0;
            for (i, &c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return bucket_middle(i);
                }
            }
            0
        };
        let sums: Vec<f64> = self
            .fit
            .iter()
            .map(|s| s.load(Ordering::Relaxed) as f64)
            .collect();
        let (base_ns, native_frame_ns, python_frame_ns) = fit_frames(&sums);
        HandlerSummary {
            samples: self.samples.load(Ordering::Relaxed),
            total_ns: self.total_ns.load(Ordering::Relaxed),
            median_ns: percentile(0.5),
            p99_ns: percentile(0.99),
            max_ns: self.max_ns.load(Ordering::Relaxed),
            base_ns,
            native_frame_ns,
            python_frame_ns,
        }
    }
}

/// Fitted costs (ns): fixed per sample, per native frame, per Python frame; each `None`
/// when undetermined.
type Fit = (Option<f64>, Option<f64>, Option<f64>);

/// Solves the least-squares normal equations for `y = c0 + c1·a + c2·b` from the sums
/// `[n, Σa, Σb, Σy, Σa², Σb², Σab, Σay, Σby]`. When one of the frame counts never varies
/// (CPython 3.11+ runs nested Python calls in one evaluator frame, so a Python recursion
/// changes only `b`; a native recursion only `a`), the fit is over the other alone and the
/// constant one's cost is `None`; all `None` when nothing varies.
fn fit_frames(s: &[f64]) -> Fit {
    let Ok([n, sa, sb, sy, saa, sbb, sab, say, sby]) = <[f64; 9]>::try_from(s) else {
        return (None, None, None);
    };
    if n < 3.0 {
        return (None, None, None);
    }
    // n² × the variances of a and b: zero when a count never varies.
    let (var_a, var_b) = (n * saa - sa * sa, n * sbb - sb * sb);
    let varies = |v: f64, squares: f64| v > 1e-9 * (n * squares).max(1.0);
    let (a_varies, b_varies) = (varies(var_a, saa), varies(var_b, sbb));
    if a_varies && b_varies {
        let m = [[n, sa, sb], [sa, saa, sab], [sb, sab, sbb]];
        let r = [sy, say, sby];
        let det3 = |m: [[f64; 3]; 3]| {
            m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
                - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
        };
        let d = det3(m);
        // Not when a and b move together (then their costs cannot be told apart).
        if d.abs() > 1e-6 * n * var_a.min(var_b) / n {
            let column = |k: usize| {
                let mut mk = m;
                for (row, value) in mk.iter_mut().zip(r) {
                    row[k] = value;
                }
                det3(mk) / d
            };
            return (Some(column(0)), Some(column(1)), Some(column(2)));
        }
    }
    // One variable: y = c0 + c·x.
    let single = |sx: f64, sxx: f64, sxy: f64, var: f64| {
        ((sxx * sy - sx * sxy) / var, (n * sxy - sx * sy) / var)
    };
    if b_varies {
        let (c0, c2) = single(sb, sbb, sby, var_b);
        (Some(c0), None, Some(c2))
    } else if a_varies {
        let (c0, c1) = single(sa, saa, say, var_a);
        (Some(c0), Some(c1), None)
    } else {
        (Some(sy / n), None, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_tight() {
        let mut last = 0;
        for ns in [0u64, 1, 7, 8, 9, 15, 16, 100, 1000, 4321, 1 << 40, u64::MAX] {
            let b = bucket_of(ns);
            assert!(b >= last, "{ns}");
            assert!(b < BUCKETS);
            last = b;
            if ns > 0 && ns < 1 << 60 {
                let middle = bucket_middle(b) as f64;
                assert!(
                    (middle - ns as f64).abs() / ns as f64 <= 1.0 / 16.0 + 1e-9,
                    "{ns} -> {middle}"
                );
            }
        }
    }

    #[test]
    fn percentiles_and_per_frame_costs_are_recovered() {
        let times = HandlerTimes::default();
        // 1000 samples: 500 ns + 40 ns per native frame + 90 ns per Python frame.
        for i in 0..1000u64 {
            let (native, python) = (10 + i % 50, i % 30);
            times.record(500 + 40 * native + 90 * python, native, python);
        }
        times.record(5_000_000, 10, 0); // an outlier: in the percentiles, not in the fit
        let s = times.summary();
        assert_eq!(s.samples, 1001);
        assert_eq!(s.max_ns, 5_000_000);
        let close = |got: f64, want: f64| (got - want).abs() < 1e-6 * want.max(1.0);
        assert!(close(s.base_ns.unwrap(), 500.0), "{s:?}");
        assert!(close(s.native_frame_ns.unwrap(), 40.0), "{s:?}");
        assert!(close(s.python_frame_ns.unwrap(), 90.0), "{s:?}");
        // True median: 500 + 40·34.5 + 90·14.5 ≈ 3185 ns.
        let median = s.median_ns as f64;
        assert!((median - 3185.0).abs() / 3185.0 < 0.1, "{s:?}");
        assert!(s.p99_ns >= s.median_ns && s.p99_ns <= s.max_ns);
        times.reset();
        assert_eq!(times.summary(), HandlerSummary::default());
    }

    #[test]
    fn a_count_that_never_varies_leaves_its_cost_undetermined() {
        let times = HandlerTimes::default();
        for native in 1..100u64 {
            times.record(300 + 25 * native, native, 0);
        }
        let s = times.summary();
        assert!((s.native_frame_ns.unwrap() - 25.0).abs() < 1e-6, "{s:?}");
        assert!((s.base_ns.unwrap() - 300.0).abs() < 1e-6, "{s:?}");
        assert_eq!(s.python_frame_ns, None);
        // A Python recursion on 3.11+: the native depth stays the same.
        let times = HandlerTimes::default();
        for python in 1..100u64 {
            times.record(900 + 60 * python, 20, python);
        }
        let s = times.summary();
        assert!((s.python_frame_ns.unwrap() - 60.0).abs() < 1e-6, "{s:?}");
        assert_eq!(s.native_frame_ns, None);
    }
}
