//! The statistics of the reports: how precise a share of the samples is ([`wilson`], the
//! 95 % intervals every report shows), and, for `--diff`, whether a change of a
//! function's share is larger than sampling noise.
//!
//! A sampling profile is a series of observations of where the program was; a function's
//! self samples among all samples are a binomial count, and so are its cumulative samples
//! (those with the function anywhere on the stack). Two profiles are compared, per
//! function and per share, with the pooled two-proportion z-test ([`two_proportion`]); up
//! to two tests per function are made, so the p-values are corrected for multiple
//! comparisons ([`Correction`]) before being compared with the significance level α.

/// The standard normal quantile of a two-sided 95 % interval: Φ⁻¹(0.975).
pub const Z_95: f64 = 1.959_963_984_540_054;

/// The Wilson score interval of a binomial proportion: `successes` out of `trials`
/// observations, at the confidence of the two-sided normal quantile `z` ([`Z_95`] for
/// 95 %), as fractions `(low, high)` within [0, 1]:
///
/// ```text
/// p̂ = successes / trials
/// centre = (p̂ + z²/2n) / (1 + z²/n)
/// half-width = z / (1 + z²/n) × √(p̂ (1 − p̂) / n + z²/4n²)
/// ```
///
/// Unlike p̂ ± z √(p̂(1−p̂)/n) (Wald's), it behaves for few successes: 0 of n gives
/// [0, z²/(n + z²)], not [0, 0], and n of n gives [n/(n + z²), 1]; it is lopsided towards
/// ½ there, as the proportion's distribution is. `successes` need not be a whole number
/// (a share times the number of observations); it is taken within [0, `trials`].
/// `None` without observations (`trials` ≤ 0, or not a number).
///
/// Known values: 10 of 100 gives [5.52 %, 17.44 %], 0 of 20 [0, 16.11 %].
pub fn wilson(successes: f64, trials: f64, z: f64) -> Option<(f64, f64)> {
    if trials.is_nan() || trials <= 0.0 || trials.is_infinite() || successes.is_nan() {
        return None;
    }
    let n = trials;
    let p = (successes / n).clamp(0.0, 1.0);
    let z2 = z * z;
    let denominator = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denominator;
    let half = z / denominator * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    // At p̂ = 0 (1) the low (high) end is 0 (1) exactly, up to rounding.
    let low = if p == 0.0 {
        0.0
    } else {
        (centre - half).max(0.0)
    };
    let high = if p == 1.0 {
        1.0
    } else {
        (centre + half).min(1.0)
    };
    Some((low, high))
}

/// The result of a two-proportion z-test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ZTest {
    /// The standardised difference of the proportions, new minus base: positive when the
    /// share grew.
    pub z: f64,
    /// The two-sided p-value: the probability of a difference at least this large if both
    /// proportions were equal (from the normal approximation).
    pub p: f64,
}

/// The pooled two-proportion z-test of `x1` successes in `n1` trials (base) against `x2`
/// in `n2` (new):
///
/// ```text
/// p̂ = (x1 + x2) / (n1 + n2)
/// z = (x2/n2 − x1/n1) / √(p̂ (1 − p̂) (1/n1 + 1/n2))
/// p = 2 (1 − Φ(|z|)) = erfc(|z| / √2)
/// ```
///
/// When the pooled proportion is 0 or 1 (or a side has no trials) nothing can differ:
/// z = 0, p = 1.
pub fn two_proportion(x1: u64, n1: u64, x2: u64, n2: u64) -> ZTest {
    if n1 == 0 || n2 == 0 {
        return ZTest { z: 0.0, p: 1.0 };
    }
    let (x1, n1, x2, n2) = (x1 as f64, n1 as f64, x2 as f64, n2 as f64);
    let pooled = (x1 + x2) / (n1 + n2);
    let variance = pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2);
    if variance <= 0.0 {
        return ZTest { z: 0.0, p: 1.0 };
    }
    let z = (x2 / n2 - x1 / n1) / variance.sqrt();
    ZTest {
        z,
        p: two_sided_p(z),
    }
}

/// The two-sided p-value of a standard normal statistic `z`: erfc(|z| / √2).
pub fn two_sided_p(z: f64) -> f64 {
    erfc(z.abs() / std::f64::consts::SQRT_2).min(1.0)
}

/// The |z| at which the two-sided p-value is `p` (0 < `p` ≤ 1): the inverse of
/// [`two_sided_p`], found by bisection to 1e-9. Used to print the threshold of a
/// Bonferroni-corrected test.
pub fn critical_z(p: f64) -> f64 {
    let (mut low, mut high) = (0.0f64, 40.0f64);
    if p >= 1.0 {
        return 0.0;
    }
    while high - low > 1e-9 {
        let middle = (low + high) / 2.0;
        if two_sided_p(middle) > p {
            low = middle;
        } else {
            high = middle;
        }
    }
    (low + high) / 2.0
}

/// The complementary error function, erfc(x) = 1 − erf(x), with a relative error below
/// 1.2e-7 everywhere (the Chebyshev fit of Numerical Recipes, 2nd ed., §6.2).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let polynomial = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let value = t * polynomial.exp();
    if x >= 0.0 {
        value
    } else {
        2.0 - value
    }
}

/// How the p-values of the tests made (one per function and share) are corrected for
/// making many tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Correction {
    /// Bonferroni: each p-value times the number of tests m (at most 1). The chance that
    /// any function is flagged when nothing changed is at most α.
    #[default]
    Bonferroni,
    /// Benjamini–Hochberg: the i-th smallest of m p-values times m / i, made monotone
    /// (at most 1). Among the functions flagged, the expected share of false ones is at
    /// most α: more sensitive than Bonferroni when many functions changed.
    BenjaminiHochberg,
}

impl Correction {
    /// The name printed in reports.
    pub fn name(self) -> &'static str {
        match self {
            Correction::Bonferroni => "Bonferroni",
            Correction::BenjaminiHochberg => "Benjamini-Hochberg",
        }
    }

    /// The corrected p-values of `p` (one per test, in the same order); a test is
    /// significant at level α when its corrected p-value is at most α.
    pub fn adjust(self, p: &[f64]) -> Vec<f64> {
        let m = p.len() as f64;
        match self {
            Correction::Bonferroni => p.iter().map(|&p| (p * m).min(1.0)).collect(),
            Correction::BenjaminiHochberg => {
                let mut order: Vec<usize> = (0..p.len()).collect();
                order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
                let mut adjusted = vec![1.0; p.len()];
                let mut smallest = 1.0f64;
                for (rank, &index) in order.iter().enumerate().rev() {
                    smallest = smallest.min(p[index] * m / (rank + 1) as f64);
                    adjusted[index] = smallest;
                }
                adjusted
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn close(actual: f64, expected: f64, relative: f64) {
        let error = ((actual - expected) / expected).abs();
        assert!(error <= relative, "{actual} vs {expected}: {error}");
    }

    #[test]
    fn erfc_matches_python_math_erfc() {
        // math.erfc of CPython (libm) at each point.
        let expected = [
            (0.0, 1.0),
            (0.1, 0.8875370839817152),
            (0.5, 0.4795001221869535),
            (1.0, 0.15729920705028513),
            (2.0, 0.004677734981047265),
            (3.0, 2.2090496998585438e-05),
            (5.0, 1.5374597944280351e-12),
            (8.0, 1.1224297172982928e-29),
            (-1.0, 1.842700792949715),
            (-3.0, 1.9999779095030015),
        ];
        for (x, value) in expected {
            close(erfc(x), value, 1.2e-7);
        }
    }

    #[test]
    fn wilson_intervals_by_hand() {
        // Python, with z = 1.959963984540054: centre = (p + z²/2n) / (1 + z²/n),
        // half = z / (1 + z²/n) × √(p(1−p)/n + z²/4n²).
        let cases = [
            (10.0, 100.0, 0.05522914, 0.17436566),
            (200.0, 2000.0, 0.08760923, 0.11392441),
            (100.0, 1000.0, 0.08290944, 0.12015196),
            (1.0, 13.0, 0.01371042, 0.33313951),
            (12.0, 13.0, 0.66686049, 0.98628958),
        ];
        for (k, n, low, high) in cases {
            let (l, h) = wilson(k, n, Z_95).unwrap();
            close(l, low, 1e-6);
            close(h, high, 1e-6);
        }
        // None of 20: from 0 exactly to z²/(n + z²); all of 20: mirrored.
        let (l, h) = wilson(0.0, 20.0, Z_95).unwrap();
        assert_eq!(l, 0.0);
        close(h, Z_95 * Z_95 / (20.0 + Z_95 * Z_95), 1e-12);
        close(h, 0.16112516, 1e-6);
        let (l, h) = wilson(20.0, 20.0, Z_95).unwrap();
        close(l, 20.0 / (20.0 + Z_95 * Z_95), 1e-12);
        assert_eq!(h, 1.0);
        // One observation of one: wide, but within [0, 1].
        let (l, h) = wilson(1.0, 1.0, Z_95).unwrap();
        close(l, 0.20654931, 1e-6);
        assert_eq!(h, 1.0);
        // Symmetric around ½; out-of-range successes are clamped; no observations, none.
        let (l, h) = wilson(50.0, 100.0, Z_95).unwrap();
        close(l + h, 1.0, 1e-12);
        assert_eq!(wilson(-3.0, 20.0, Z_95), wilson(0.0, 20.0, Z_95));
        assert_eq!(wilson(25.0, 20.0, Z_95), wilson(20.0, 20.0, Z_95));
        assert_eq!(wilson(0.0, 0.0, Z_95), None);
        assert_eq!(wilson(1.0, f64::NAN, Z_95), None);
        // 95 % is the two-sided p-value 0.05 (erfc is good to 1.2e-7 here).
        close(critical_z(0.05), Z_95, 1e-7);
    }

    #[test]
    fn z_and_p_by_hand() {
        // 30 of 100 against 45 of 100: p̂ = 75/200 = 0.375,
        // se = √(0.375 × 0.625 × (1/100 + 1/100)) = 0.0684653, z = 0.15 / se = 2.19089,
        // p = erfc(2.19089 / √2) = 0.0284597 (Python: math.erfc).
        let test = two_proportion(30, 100, 45, 100);
        close(test.z, 2.1908902300206647, 1e-12);
        close(test.p, 0.02845973691631057, 1e-6);
        // A share that fell: 120/1000 → 80/1000.
        let test = two_proportion(120, 1000, 80, 1000);
        close(test.z, -2.9814239699997187, 1e-12);
        close(test.p, 0.0028691127920766257, 1e-6);
        // Different numbers of samples: 0/500 → 25/400.
        let test = two_proportion(0, 500, 25, 400);
        close(test.z, 5.669467095138408, 1e-12);
        close(test.p, 1.4324235676491382e-08, 1e-6);
    }

    #[test]
    fn nothing_to_compare() {
        assert_eq!(two_proportion(50, 200, 50, 200), ZTest { z: 0.0, p: 1.0 });
        assert_eq!(two_proportion(0, 10, 0, 10), ZTest { z: 0.0, p: 1.0 });
        assert_eq!(two_proportion(10, 10, 20, 20), ZTest { z: 0.0, p: 1.0 });
        assert_eq!(two_proportion(1, 0, 1, 5), ZTest { z: 0.0, p: 1.0 });
    }

    #[test]
    fn critical_z_inverts_the_p_value() {
        close(critical_z(0.05), 1.959964, 1e-6);
        close(critical_z(0.01), 2.575829, 1e-6);
        // α = 0.01 over 40 tests with Bonferroni.
        close(critical_z(0.01 / 40.0), 3.662260, 1e-6);
        assert_eq!(critical_z(1.0), 0.0);
    }

    #[test]
    fn corrections() {
        let p = [0.01, 0.04, 0.03, 0.005];
        let bonferroni = Correction::Bonferroni.adjust(&p);
        assert_eq!(bonferroni, [0.04, 0.16, 0.12, 0.02]);
        // BH by hand: sorted 0.005, 0.01, 0.03, 0.04 → ×4/1, ×4/2, ×4/3, ×4/4 =
        // 0.02, 0.02, 0.04, 0.04 (already monotone).
        let bh = Correction::BenjaminiHochberg.adjust(&p);
        for (actual, expected) in bh.iter().zip([0.02, 0.04, 0.04, 0.02]) {
            close(*actual, expected, 1e-12);
        }
        // Monotone step-up: 0.02 × 3/1 = 0.06 would exceed 0.03 × 3/2 = 0.045.
        let bh = Correction::BenjaminiHochberg.adjust(&[0.02, 0.03, 0.9]);
        for (actual, expected) in bh.iter().zip([0.045, 0.045, 0.9]) {
            close(*actual, expected, 1e-12);
        }
        assert!(Correction::Bonferroni
            .adjust(&[0.5, 0.6])
            .iter()
            .all(|&p| p == 1.0));
    }
}
