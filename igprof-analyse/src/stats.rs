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
//!
//! A share also varies from run to run of the same program, by more than its samples'
//! binomial noise where the program itself does not do the same each time. That
//! variation is measured between the runs of each side ([`heterogeneity`]), shrunk
//! towards that of all shares ([`typical_dispersion`], [`moderated_dispersion`]) or, with
//! one run per side,
//! estimated from the comparison's own z-scores ([`inflation`]); `--diff` divides each
//! z by the square root of the dispersion found (`report::diff`).

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
///
/// The counts need not be whole: observations worth less than a sample each (samples
/// divided by a design effect, `report::Measure::design_effect`) are counted as such.
pub fn two_proportion(x1: f64, n1: f64, x2: f64, n2: f64) -> ZTest {
    if n1.is_nan() || n2.is_nan() || n1 <= 0.0 || n2 <= 0.0 {
        return ZTest { z: 0.0, p: 1.0 };
    }
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

/// The median of the χ² distribution with one degree of freedom, Φ⁻¹(¾)² = 0.454936…:
/// the median of z² for a standard normal z ([`inflation`]).
pub const MEDIAN_CHI_SQUARE_1: f64 = 0.454_936_423_119_572_7;

/// How much one proportion varies between replicates beyond binomial noise: Pearson's
/// X² of the replicates' counts against their pooled proportion ([`heterogeneity`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Heterogeneity {
    /// X² = Σ_r (x_r − n_r p̂)² / (n_r p̂ (1 − p̂)), p̂ = Σx / Σn (no unit). With binomial
    /// counts (no variation between replicates but sampling's) it is about χ² with
    /// `df` degrees of freedom, of mean `df`.
    pub chi_square: f64,
    /// Its degrees of freedom: the number of replicates with trials, less one.
    pub df: usize,
    /// min_r n_r p̂ (1 − p̂): the smallest binomial variance of a replicate's count
    /// (counts²). X² is close to its χ² distribution when it is at least about 5.
    pub smallest_variance: f64,
}

impl Heterogeneity {
    /// X² / df: the dispersion, the variance of the counts between replicates over the
    /// binomial one (1 for sampling noise alone); `None` without degrees of freedom.
    pub fn dispersion(&self) -> Option<f64> {
        (self.df > 0).then(|| self.chi_square / self.df as f64)
    }
}

/// The [`Heterogeneity`] of `replicates`, each `(x, n)`: x successes (samples of a
/// function) in n trials (all samples of that run). Replicates without trials (n ≤ 0)
/// are left out. `None` with fewer than two replicates left, or when the pooled
/// proportion p̂ is 0 or 1 (nothing can vary).
///
/// This is the dispersion test of a binomial proportion over several samples (Cochran
/// 1954, "Some methods for strengthening the common χ² tests"; the quasi-binomial
/// dispersion of a GLM with one parameter, McCullagh & Nelder §4.5).
pub fn heterogeneity(replicates: &[(f64, f64)]) -> Option<Heterogeneity> {
    let replicates: Vec<(f64, f64)> = replicates
        .iter()
        .copied()
        .filter(|&(_, n)| n > 0.0)
        .collect();
    if replicates.len() < 2 {
        return None;
    }
    let x: f64 = replicates.iter().map(|&(x, _)| x).sum();
    let n: f64 = replicates.iter().map(|&(_, n)| n).sum();
    let pooled = x / n;
    if !(pooled > 0.0 && pooled < 1.0) {
        return None;
    }
    let variance = |n: f64| n * pooled * (1.0 - pooled);
    let chi_square = replicates
        .iter()
        .map(|&(x, n)| (x - n * pooled).powi(2) / variance(n))
        .sum();
    let smallest_variance = replicates
        .iter()
        .map(|&(_, n)| variance(n))
        .fold(f64::INFINITY, f64::min);
    Some(Heterogeneity {
        chi_square,
        df: replicates.len() - 1,
        smallest_variance,
    })
}

/// The moderated dispersion of one share: its own X² on `df` degrees of freedom
/// ([`Heterogeneity`], summed over the sides compared) shrunk towards `pooled`, the
/// dispersion of all shares, as if that were measured on `prior_weight` degrees of
/// freedom:
///
/// ```text
/// D̃ = (d0 φ̂ + X²) / (d0 + df)        (= (d0 φ̂ + df D) / (d0 + df), D = X² / df)
/// ```
///
/// at least 1. This is the empirical-Bayes posterior variance of limma (Smyth 2004,
/// "Linear models and empirical Bayes methods for assessing differential expression in
/// microarray experiments", eq. 3, s̃² = (d0 s0² + d s²) / (d0 + d)) with a fixed prior
/// weight d0: a share measured on few runs borrows the others' variation, one that
/// varies far more than the others keeps much of its own. Without a measurement
/// (`None`, or 0 degrees of freedom) it is `pooled` (at least 1).
pub fn moderated_dispersion(own: Option<(f64, usize)>, pooled: f64, prior_weight: f64) -> f64 {
    let (chi_square, df) = own.unwrap_or((0.0, 0));
    let weight = prior_weight + df as f64;
    let moderated = if weight > 0.0 {
        (prior_weight * pooled + chi_square) / weight
    } else {
        pooled
    };
    moderated.max(1.0)
}

/// The typical dispersion of many shares, from each one's Pearson X² on its degrees of
/// freedom (`measured`: (X², df), df ≥ 1): the geometric mean of their dispersions
/// D = X² / df, each log corrected for the bias of the log of a χ² over its degrees of
/// freedom (E log(χ²_k / k) = ψ(k/2) − log(k/2), ψ the [`digamma`] function):
///
/// ```text
/// φ̂ = exp(mean over the shares of (log D − ψ(df/2) + log(df/2)))
/// ```
///
/// This is how limma estimates the location of its prior variance from the genes'
/// log-variances (Smyth 2004, §6.2, with the prior's degrees of freedom large): a few
/// shares that vary far more than the others (a run whose `_PyObject_Free` takes 11 %
/// instead of 37 %) move it far less than they move ΣX² / Σdf. A dispersion of 0 (every
/// run exactly at the pooled proportion) is taken as 10⁻⁵ times the median dispersion,
/// as limma floors its variances. `None` without any share.
pub fn typical_dispersion(measured: &[(f64, usize)]) -> Option<f64> {
    let mut dispersions: Vec<(f64, f64)> = measured
        .iter()
        .filter(|&&(_, df)| df > 0)
        .map(|&(chi_square, df)| (chi_square / df as f64, df as f64))
        .collect();
    if dispersions.is_empty() {
        return None;
    }
    let mut sorted: Vec<f64> = dispersions.iter().map(|&(d, _)| d).collect();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let floor = (1e-5 * median).max(f64::MIN_POSITIVE);
    for (dispersion, _) in &mut dispersions {
        *dispersion = dispersion.max(floor);
    }
    let mean = dispersions
        .iter()
        .map(|&(d, df)| d.ln() - digamma(df / 2.0) + (df / 2.0).ln())
        .sum::<f64>()
        / dispersions.len() as f64;
    Some(mean.exp())
}

/// The digamma function ψ(x) = d/dx log Γ(x), x > 0: the recurrence ψ(x) = ψ(x + 1) −
/// 1/x up to x ≥ 10, then the asymptotic series log x − 1/2x − Σ B₂ₖ / 2k x²ᵏ
/// (Abramowitz & Stegun 6.3.18) to the x⁻¹⁰ term: an error below 1e-13 there.
pub fn digamma(x: f64) -> f64 {
    let (mut x, mut shift) = (x, 0.0);
    while x < 10.0 {
        shift -= 1.0 / x;
        x += 1.0;
    }
    let f = 1.0 / (x * x);
    let series =
        f * (1.0 / 12.0 - f * (1.0 / 120.0 - f * (1.0 / 252.0 - f * (1.0 / 240.0 - f / 132.0))));
    shift + x.ln() - 0.5 / x - series
}

/// The genomic-control inflation factor λ (Devlin & Roeder 1999, "Genomic control for
/// association studies"): median(z²) / [`MEDIAN_CHI_SQUARE_1`] over `z`, the factor by
/// which the variance of the statistics exceeds that of a standard normal when most of
/// them test nothing that changed (the median resists the few that did). `None` with
/// fewer than `minimum` values (at least one).
pub fn inflation(z: &[f64], minimum: usize) -> Option<f64> {
    if z.len() < minimum.max(1) {
        return None;
    }
    let mut squares: Vec<f64> = z.iter().map(|z| z * z).collect();
    squares.sort_by(f64::total_cmp);
    let middle = squares.len() / 2;
    let median = if squares.len() % 2 == 1 {
        squares[middle]
    } else {
        (squares[middle - 1] + squares[middle]) / 2.0
    };
    Some(median / MEDIAN_CHI_SQUARE_1)
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
        let test = two_proportion(30.0, 100.0, 45.0, 100.0);
        close(test.z, 2.1908902300206647, 1e-12);
        close(test.p, 0.02845973691631057, 1e-6);
        // A share that fell: 120/1000 → 80/1000.
        let test = two_proportion(120.0, 1000.0, 80.0, 1000.0);
        close(test.z, -2.9814239699997187, 1e-12);
        close(test.p, 0.0028691127920766257, 1e-6);
        // Different numbers of samples: 0/500 → 25/400.
        let test = two_proportion(0.0, 500.0, 25.0, 400.0);
        close(test.z, 5.669467095138408, 1e-12);
        close(test.p, 1.4324235676491382e-08, 1e-6);
    }

    #[test]
    fn nothing_to_compare() {
        assert_eq!(
            two_proportion(50.0, 200.0, 50.0, 200.0),
            ZTest { z: 0.0, p: 1.0 }
        );
        assert_eq!(
            two_proportion(0.0, 10.0, 0.0, 10.0),
            ZTest { z: 0.0, p: 1.0 }
        );
        assert_eq!(
            two_proportion(10.0, 10.0, 20.0, 20.0),
            ZTest { z: 0.0, p: 1.0 }
        );
        assert_eq!(two_proportion(1.0, 0.0, 1.0, 5.0), ZTest { z: 0.0, p: 1.0 });
    }

    #[test]
    fn heterogeneity_by_hand() {
        // 30, 45, 60 of 100 each: p̂ = 135/300 = 0.45, n p̂ (1 − p̂) = 24.75, deviations
        // −15, 0, +15: X² = 450 / 24.75 = 18.1818 on 2 degrees of freedom.
        let h = heterogeneity(&[(30.0, 100.0), (45.0, 100.0), (60.0, 100.0)]).unwrap();
        close(h.chi_square, 450.0 / 24.75, 1e-12);
        assert_eq!(h.df, 2);
        close(h.smallest_variance, 24.75, 1e-12);
        close(h.dispersion().unwrap(), 225.0 / 24.75, 1e-12);
        // Unequal runs: 10 of 100 and 40 of 200, p̂ = 50/300 = 1/6: expected 16.67 and
        // 33.33, variances 13.89 and 27.78: X² = 44.44/13.89 + 44.44/27.78 = 4.8.
        let h = heterogeneity(&[(10.0, 100.0), (40.0, 200.0)]).unwrap();
        close(h.chi_square, 4.8, 1e-12);
        assert_eq!(h.df, 1);
        close(h.smallest_variance, 100.0 / 6.0 * 5.0 / 6.0, 1e-12);
        // Counts exactly at the pooled proportion: no variation at all.
        let h = heterogeneity(&[(10.0, 100.0), (20.0, 200.0), (5.0, 50.0)]).unwrap();
        assert_eq!((h.chi_square, h.df), (0.0, 2));
        // Nothing to measure: one replicate (runs without trials do not count), or a
        // proportion of 0 or 1 in all of them.
        assert_eq!(heterogeneity(&[(10.0, 100.0), (0.0, 0.0)]), None);
        assert_eq!(heterogeneity(&[(0.0, 100.0), (0.0, 50.0)]), None);
        assert_eq!(heterogeneity(&[(100.0, 100.0), (50.0, 50.0)]), None);
    }

    #[test]
    fn moderated_dispersion_by_hand() {
        // Own X² 40 on 4 df (dispersion 10), pooled 2, prior weight 10:
        // (10 × 2 + 40) / 14 = 4.2857.
        close(
            moderated_dispersion(Some((40.0, 4)), 2.0, 10.0),
            60.0 / 14.0,
            1e-12,
        );
        // Without a measurement of its own: the pooled one; never below 1.
        assert_eq!(moderated_dispersion(None, 1.7, 10.0), 1.7);
        assert_eq!(moderated_dispersion(Some((0.0, 0)), 1.7, 10.0), 1.7);
        assert_eq!(moderated_dispersion(Some((0.4, 4)), 1.0, 10.0), 1.0);
        // Prior weight 0: its own alone; the weight grows, the pooled one dominates.
        assert_eq!(moderated_dispersion(Some((40.0, 4)), 2.0, 0.0), 10.0);
        close(moderated_dispersion(Some((40.0, 4)), 2.0, 1e9), 2.0, 1e-6);
    }

    #[test]
    fn digamma_known_values() {
        // ψ(1) = −γ, ψ(½) = −γ − 2 log 2, ψ(2) = 1 − γ, ψ(10) = H₉ − γ.
        let gamma = 0.577_215_664_901_532_9;
        close(digamma(1.0), -gamma, 1e-12);
        close(digamma(0.5), -gamma - 2.0 * std::f64::consts::LN_2, 1e-12);
        close(digamma(2.0), 1.0 - gamma, 1e-12);
        let h9: f64 = (1..=9).map(|k| 1.0 / k as f64).sum();
        close(digamma(10.0), h9 - gamma, 1e-12);
    }

    #[test]
    fn typical_dispersion_is_a_bias_corrected_geometric_mean() {
        // One share of dispersion 1 on 4 df: log(χ²₄/4) has mean ψ(2) − log 2 = −0.27036,
        // so φ̂ = exp(0.27036) = 1.31043.
        let lifted = (-(digamma(2.0) - 2f64.ln())).exp();
        close(typical_dispersion(&[(4.0, 4)]).unwrap(), lifted, 1e-12);
        close(lifted, 1.310_439_85, 1e-8);
        // Geometric, not arithmetic: dispersions 1, 1, 1 and 100 on 4 df each give
        // 100^(1/4) × 1.31 = 4.14, where ΣX² / Σdf is 25.75.
        let shares = [(4.0, 4), (4.0, 4), (4.0, 4), (400.0, 4)];
        close(
            typical_dispersion(&shares).unwrap(),
            100f64.powf(0.25) * lifted,
            1e-12,
        );
        // Different degrees of freedom are corrected each by its own: 2 on 1 df and
        // 2 on 9 df.
        let expected = ((2f64.ln() - digamma(0.5) + 0.5f64.ln())
            + (2f64.ln() - digamma(4.5) + 4.5f64.ln()))
            / 2.0;
        close(
            typical_dispersion(&[(2.0, 1), (18.0, 9)]).unwrap(),
            expected.exp(),
            1e-12,
        );
        // A share exactly at its pooled proportion counts as 1e-5 of the median.
        let floored = typical_dispersion(&[(0.0, 4), (4.0, 4), (8.0, 4)]).unwrap();
        let expected = ((1e-5f64).ln() + 0.0 + 2f64.ln()) / 3.0 + lifted.ln();
        close(floored, expected.exp(), 1e-12);
        assert_eq!(typical_dispersion(&[]), None);
        assert_eq!(typical_dispersion(&[(3.0, 0)]), None);
    }

    #[test]
    fn inflation_is_the_median_z_squared_over_its_expectation() {
        // Median of z² = 4 (odd count) and (1 + 4) / 2 = 2.5 (even count), over
        // 0.4549364231195727 (Python: NormalDist().inv_cdf(0.75) ** 2).
        close(
            inflation(&[-1.0, 2.0, 3.0], 3).unwrap(),
            8.79243735327093,
            1e-12,
        );
        close(
            inflation(&[1.0, -2.0, 3.0, 0.5], 1).unwrap(),
            5.495273345794331,
            1e-12,
        );
        assert_eq!(inflation(&[1.0, 2.0], 3), None);
        assert_eq!(inflation(&[], 0), None);
        close(MEDIAN_CHI_SQUARE_1, 0.4549364231195727, 1e-15);
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
