//! The `--diff BASE NEW` report (`--diff B1 B2 B3 -- N1 N2 N3` with several runs per
//! side): per function, how its self and cumulative shares of the samples (or of the
//! bytes, for memory counters) changed between two profiles, and whether each change is
//! larger than noise: its samples' and, for sampled counters, the share's variation
//! from run to run ([below](#run-to-run-variation)).
//!
//! Functions are matched by name and file (a Python function that moved to another line
//! of the same file is the same function). Each function is tested twice:
//! - on its *self* samples (those whose innermost frame is the function), when it has
//!   some in either profile;
//! - on its *cumulative* samples (those with the function anywhere on the stack, each
//!   counted once where it recurses), when it has some in either profile and is not on
//!   every sample of both (a share of 100 % on both sides leaves nothing to test).
//!
//! The cumulative test finds a slowdown that is spread over the function's callees: in
//! the Python view ([`crate::view`]) the interpreter's work that a Python function runs
//! (integer arithmetic, allocation: `l_mod`, `PyLong_FromLong`, …) is shown as its
//! native children, so a Python function that does more of it grows in cumulative share
//! while no one function's self share grows much.
//!
//! For each function the report gives:
//! - its self and cumulative shares (percent of each profile's total amount) and
//!   seconds in both, and the *changes*: new share minus base share, in percentage
//!   points, self and cumulative;
//! - the pooled two-proportion z-test ([`crate::stats::two_proportion`]) of its self
//!   samples, and that of its cumulative samples, among all samples of each profile. n
//!   is the number of samples (the first number of `V:(samples,ticks,peak)`, i.e.
//!   signals), not ticks: a signal that stands for several ticks (timer expirations
//!   merged by the kernel, counted in the ticks) is still one observation of where the
//!   program was, so counting its ticks would overstate the evidence. Shares and changes
//!   are of ticks (CPU time); without overruns both are the same;
//! - p-values corrected over all the tests made, self and cumulative ([`Correction`]:
//!   Bonferroni by default, or Benjamini–Hochberg); a test is significant when its
//!   corrected p-value is at most α (0.01 by default), and a function is significant
//!   when either of its tests is ([`Significance`]).
//!
//! Memory counters (`MEM_*`, [`super::memory`]) are compared by their bytes
//! ([`Method`]):
//! - when a profile was recorded by sampling bytes (pyigprof's, with a mean of R bytes
//!   between recorded allocations, `memory.rate_bytes`), the number of recorded
//!   allocations behind b bytes is about Poisson with mean b/R; so the same z-tests are
//!   made on sample-equivalents, each profile's bytes divided by its own R (x = a
//!   function's bytes / R, n = the profile's bytes / R; [`Method::SampledBytes`]). An
//!   allocation much larger than R is recorded almost surely, with less noise than its
//!   b/R samples suppose: the test errs on the safe side. A profile with every
//!   allocation recorded (R = 1) compared with a sampled one counts each byte as a
//!   sample: it adds next to no noise;
//! - when both profiles record every allocation (IgProf's `igprof -mp`, pyigprof's at
//!   R = 1), the figures are exact: there is no noise to test, and a share is
//!   significant when it changed by at least [`Options::min_change`] percentage points
//!   (`--min-change`, [`DEFAULT_MIN_CHANGE`] by default; [`Method::Threshold`]); so is
//!   a maximum (`MEM_MAX`), which is not a sum of samples whatever the rate.
//!
//! Shares of memory are of each profile's total bytes: a leak that grows makes its
//! function's share grow and every other function's fall (their bytes, printed too,
//! unchanged).
//!
//! The sampled event counters (`PERF_PAGE_FAULTS`, `PERF_CYCLES`, …: [`super::events`])
//! are compared as ticks are ([`Method::Samples`]): the z-tests are on the samples (the
//! first number of `V:(samples,events,events)`), which are what sampling makes
//! Poisson-distributed, while an amount of events is the samples times the mean sample
//! period; shares and changes are of events. The events' changes are printed too
//! (`+2,400 events`).
//!
//! Other counters, neither ticks, memory nor events, cannot be compared.
//!
//! # Run-to-run variation
//!
//! The z-test supposes that a share varies between two runs of the same program only by
//! its samples' binomial noise. Programs vary more: CPython 3.12's specializing
//! interpreter attributes the same work to a Python function or to `_PyLong_Add`
//! differently from one run to the next (a self share moving by 7 points where its
//! samples' noise is 0.6), while the cumulative share of the same function stays put. So
//! for ticks and sampled events ([`Method::Samples`]) each side may be several runs
//! ([`Runs`], `--diff B1 B2 B3 -- N1 N2 N3`), and that variation is measured per function
//! and per share:
//!
//! - on each side of R_s runs, the function's samples x_r of each run's n_r give Pearson's
//!   X²_s on R_s − 1 degrees of freedom ([`crate::stats::heterogeneity`]); a side of one
//!   run gives none;
//! - its own dispersion D = (X²_base + X²_new) / (df_base + df_new) (1: sampling noise
//!   alone) is shrunk towards φ̂, the typical dispersion of the comparison's shares whose
//!   runs have enough samples (the sides with min_r n_r p̂ (1 − p̂) ≥
//!   [`MIN_POOLED_VARIANCE`]): their bias-corrected geometric mean
//!   ([`crate::stats::typical_dispersion`]), at least 1, as limma shrinks a gene's
//!   variance: D̃ = (d0 φ̂ + df D) / (d0 + df), at least 1, with the prior weight d0 =
//!   [`Options::prior_weight`] ([`crate::stats::moderated_dispersion`]);
//! - the z of the runs merged is divided by √D̃ ([`Test::dispersion`]); its p-value, the
//!   correction and the rest are as above.
//!
//! With one run per side nothing can be measured per function: every z is divided by
//! the square root of one dispersion, max(1, λ), λ being the median z² over the tests with
//! at least [`MIN_INFLATION_SAMPLES`] samples on each side / 0.4549 ("genomic control",
//! [`crate::stats::inflation`]; 1 with fewer than [`MIN_INFLATION_TESTS`] such tests): it
//! absorbs variation common to all shares, not that of one function that varies more than
//! the others ([`Noise`]). Memory counters are compared as they were, on their
//! sample-equivalents alone.

use std::collections::HashMap;
use std::io::{self, Write};

use super::{describe, memory, percent, table_line, FunctionAmounts, Measure, Unit, VIEW_NOTE};
use crate::error::Error;
use crate::profile::{Combine, FunctionId, Profile};
use crate::stats::{
    critical_z, heterogeneity, inflation, moderated_dispersion, two_proportion, two_sided_p,
    typical_dispersion, Correction, Heterogeneity, MEDIAN_CHI_SQUARE_1,
};
use crate::symbol::Label;

/// The significance level used when none is given.
pub const DEFAULT_ALPHA: f64 = 0.01;

/// The change of a share, in percentage points, from which a change is significant when
/// there is nothing to test ([`Method::Threshold`]) and none is given.
pub const DEFAULT_MIN_CHANGE: f64 = 1.0;

/// The prior weight d0 of the pooled dispersion in each share's moderated one
/// ([`Options::prior_weight`]), in degrees of freedom. Chosen on bench/diff-calibration
/// (docs/analyser.md, results-2026-12-05.md): with three runs per side (4 degrees of
/// freedom per share), d0 from 1 to 3 kept the false alarms between runs of the same
/// program at 1 % or less and found the 60 % heavier function in 99–100 % of the pairs
/// in every program and rate measured; heavier weights give every function more of the
/// pooled dispersion, which a few functions that vary far more than the others (a run
/// where `_PyObject_Free` takes 48 % instead of 37 %) inflate, and lost power (`periodic`
/// at 250 Hz: 94 % at d0 = 5, 90 % at 10).
pub const DEFAULT_PRIOR_WEIGHT: f64 = 3.0;

/// The smallest binomial variance of a run's count, n_r p̂ (1 − p̂) (counts²), from which
/// a side's X² of a share enters the pooled dispersion φ̂: below it X² is far from its χ²
/// distribution (a share of a few samples per run).
pub const MIN_POOLED_VARIANCE: f64 = 5.0;

/// With one run per side: the samples a test needs on each side to enter the median of
/// z² that estimates the dispersion (λ): tests of a few samples have z² far from χ².
pub const MIN_INFLATION_SAMPLES: i64 = 10;

/// With one run per side: the number of tests with [`MIN_INFLATION_SAMPLES`] on each side
/// from which λ is estimated; with fewer the dispersion is 1 (sampling noise only).
pub const MIN_INFLATION_TESTS: usize = 10;

/// What to compare.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The counter, e.g. `PERF_TICKS`, `MEM_LIVE` or `PERF_PAGE_FAULTS`; must be a tick
    /// counter, a memory counter or a sampled event counter.
    pub counter: String,
    /// The significance level α of the corrected tests, 0 < α < 1.
    pub alpha: f64,
    /// The correction for making many tests.
    pub correction: Correction,
    /// For [`Method::Threshold`] (exact figures on both sides, or a maximum): the change
    /// of a share, in percentage points, from which it is significant.
    pub min_change: f64,
    /// With several runs on a side: the weight d0 of the pooled dispersion in each share's
    /// moderated one, in degrees of freedom ([`crate::stats::moderated_dispersion`];
    /// [`DEFAULT_PRIOR_WEIGHT`]). 0: each share's own alone.
    pub prior_weight: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            counter: super::DEFAULT_COUNTER.to_string(),
            alpha: DEFAULT_ALPHA,
            correction: Correction::default(),
            min_change: DEFAULT_MIN_CHANGE,
            prior_weight: DEFAULT_PRIOR_WEIGHT,
        }
    }
}

/// How the shares of two profiles are compared.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Method {
    /// Ticks and sampled events: z-tests on the samples (signals, or the samples of an
    /// event counter).
    Samples,
    /// Bytes of a memory counter, sampled in at least one profile: z-tests on
    /// sample-equivalents, each profile's bytes divided by its R (the number of
    /// recorded allocations behind b bytes is about Poisson with mean b/R).
    SampledBytes {
        /// R of the base profile, bytes (1: every allocation recorded).
        base_rate: f64,
        /// R of the new profile, bytes.
        new_rate: f64,
    },
    /// No test: a share is significant when it changed by at least `min_change`
    /// percentage points. For memory counters whose figures are exact in both profiles
    /// (every allocation recorded: no sampling noise), and for a maximum (`MEM_MAX`).
    Threshold {
        /// Percentage points.
        min_change: f64,
        /// Whether the counter is a maximum ([`Combine::Maximum`]) rather than a sum.
        maximum: bool,
    },
}

/// One function's values in one profile, in the counter's units.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Amounts {
    /// Samples (signals) in the function itself: the `x` of the self test. For memory
    /// counters the sample-equivalents of `self_amount`: bytes / R (bytes when every
    /// allocation is recorded).
    pub self_samples: i64,
    /// Ticks (bytes, events) in the function itself.
    pub self_amount: i64,
    /// Samples (signals) with the function anywhere on the stack, each counted once: the
    /// `x` of the cumulative test. For memory counters, `cumulative` / R.
    pub cumulative_samples: i64,
    /// Ticks (bytes, events) of the samples with the function anywhere on the stack.
    pub cumulative: i64,
    /// `self_amount` as a percentage of the profile's total amount.
    pub self_percent: f64,
    /// `cumulative` as a percentage of the profile's total amount.
    pub cumulative_percent: f64,
}

/// One test of a function's share: the pooled two-proportion z-test of its samples
/// among all samples of each side, its z divided by the root of the share's run-to-run
/// dispersion, and its p-value corrected for the number of tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Test {
    /// The standardised difference of the proportions, new minus base (no unit):
    /// positive when the share grew. `sampling_z / √dispersion`.
    pub z: f64,
    /// The two-sided p-value of `z`, before the correction (probability, 0 to 1).
    pub p: f64,
    /// `p` after the correction for the number of tests (probability, 0 to 1).
    pub p_adjusted: f64,
    /// The z of the samples alone ([`two_proportion`] of each side's runs merged): what
    /// `z` would be if the share varied between runs by binomial noise only.
    pub sampling_z: f64,
    /// The variance of the share between runs over its binomial variance that `z`
    /// allows for, at least 1 ([`Noise`]): the moderated dispersion of this share with
    /// several runs on a side, the comparison's λ with one run per side, 1 for memory
    /// counters.
    pub dispersion: f64,
    /// The share's own run-to-run variation: Pearson's X² of its samples between the runs
    /// of each side and their degrees of freedom, summed over the sides
    /// ([`crate::stats::heterogeneity`]; `smallest_variance` the smaller side's). `None`
    /// where no side has two runs with it (one run per side, or a share that is 0 or
    /// 100 % in every run of each side that has several).
    pub own: Option<Heterogeneity>,
}

impl Test {
    /// The test of `sampling_z` (its p-value not yet corrected) with sampling noise only.
    fn of_samples(sampling_z: f64) -> Test {
        Test {
            z: sampling_z,
            p: two_sided_p(sampling_z),
            p_adjusted: 1.0,
            sampling_z,
            dispersion: 1.0,
            own: None,
        }
    }

    /// Allows for a run-to-run `dispersion` (at least 1): z divided by its root.
    fn with_dispersion(&mut self, dispersion: f64) {
        self.dispersion = dispersion;
        self.z = self.sampling_z / dispersion.sqrt();
        self.p = two_sided_p(self.z);
    }
}

/// How the run-to-run variation of the shares was allowed for: what each test's
/// [`Test::dispersion`] is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Noise {
    /// None: the shares' sampling noise only. Memory counters (their sample-equivalents
    /// are tested as they were) and comparisons without a test ([`Method::Threshold`]).
    Sampling,
    /// One run per side: no share's own variation can be measured; every test has the
    /// same dispersion, from the comparison's own z-scores (genomic control,
    /// [`crate::stats::inflation`]).
    Estimated {
        /// λ = median z² / [`MEDIAN_CHI_SQUARE_1`] over the tests with at least
        /// [`MIN_INFLATION_SAMPLES`] samples on each side; `None` with fewer than
        /// [`MIN_INFLATION_TESTS`] of them.
        inflation: Option<f64>,
        /// The number of those tests.
        tests: usize,
        /// Every test's dispersion: max(1, λ), 1 without λ.
        dispersion: f64,
    },
    /// Several runs on at least one side: each share's own variation measured between
    /// the runs of each side, moderated by the pooled one
    /// ([`crate::stats::moderated_dispersion`]).
    Measured {
        /// φ̂ as measured: the typical dispersion of the tests whose sides' measurements
        /// have [`MIN_POOLED_VARIANCE`] ([`crate::stats::typical_dispersion`] of their X²
        /// and df, summed over those sides); `None` when none has.
        pooled: Option<f64>,
        /// φ̂ as used: `pooled`, at least 1.
        dispersion: f64,
        /// The number of tests (shares) whose measurement entered `pooled`.
        tests: usize,
        /// Σdf of those tests' measurements.
        df: usize,
        /// d0 ([`Options::prior_weight`]).
        prior_weight: f64,
    },
}

/// Which of a function's two tests, self and cumulative, is significant; also, for
/// [`Diff::regressions`], which of its shares regressed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Significance {
    /// Neither.
    #[default]
    No,
    /// The self share only.
    SelfShare,
    /// The cumulative share only.
    Cumulative,
    /// Both shares.
    Both,
}

impl Significance {
    /// The value for whether the self and the cumulative share are each significant.
    pub fn of(self_share: bool, cumulative: bool) -> Significance {
        match (self_share, cumulative) {
            (false, false) => Significance::No,
            (true, false) => Significance::SelfShare,
            (false, true) => Significance::Cumulative,
            (true, true) => Significance::Both,
        }
    }

    /// Whether the self share is one of them.
    pub fn self_share(self) -> bool {
        matches!(self, Significance::SelfShare | Significance::Both)
    }

    /// Whether the cumulative share is one of them.
    pub fn cumulative(self) -> bool {
        matches!(self, Significance::Cumulative | Significance::Both)
    }

    /// Whether either share is.
    pub fn any(self) -> bool {
        self != Significance::No
    }

    /// As the `signif.` column prints it: `self`, `cum`, `both` or `no`.
    pub fn name(self) -> &'static str {
        match self {
            Significance::No => "no",
            Significance::SelfShare => "self",
            Significance::Cumulative => "cum",
            Significance::Both => "both",
        }
    }
}

/// One function compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The function (as the new profile names it, or the base if it is only there).
    pub label: Label,
    /// Its values in the base profile (zero if absent).
    pub base: Amounts,
    /// Its values in the new profile (zero if absent).
    pub new: Amounts,
    /// New self share minus base self share, in percentage points.
    pub change: f64,
    /// The test of its self samples; `None` when it has none in either profile, and
    /// without a test ([`Method::Threshold`]).
    pub test: Option<Test>,
    /// New cumulative share minus base cumulative share, in percentage points.
    pub cumulative_change: f64,
    /// The test of its cumulative samples; `None` when it has none in either profile or
    /// is on every sample of both, and without a test ([`Method::Threshold`]).
    pub cumulative_test: Option<Test>,
    /// Which of the two tests has a corrected p-value at most α; with
    /// [`Method::Threshold`], which share changed by at least its points.
    pub significant: Significance,
}

impl Change {
    /// The larger of |`change`| and |`cumulative_change`|, in percentage points: how
    /// the report ranks functions.
    pub fn size(&self) -> f64 {
        self.change.abs().max(self.cumulative_change.abs())
    }
}

/// A function whose share grew significantly by more than the points given to
/// [`Diff::regressions`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Regression<'a> {
    /// The function's comparison.
    pub change: &'a Change,
    /// Which of its shares grew so: `SelfShare`, `Cumulative` or `Both`.
    pub shares: Significance,
}

/// One side of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    /// Its files, program and pid ([`describe`]).
    pub description: String,
    /// The counter and its total (of its runs merged).
    pub measure: Measure,
    /// The number of runs ([`Runs`]): 1 for one profile.
    pub runs: usize,
}

/// One side of a comparison as given: its runs' profiles merged and, when there are
/// several runs, each run's samples per function, to measure how much each share varies
/// between them ([`compute_runs`]).
#[derive(Debug, Clone, Copy)]
pub struct Runs<'a> {
    /// The side's runs merged into one profile (for one run, its profile): the side's
    /// shares, amounts, totals and description are this profile's.
    pub merged: &'a Profile,
    /// Each run's samples ([`RunSamples::of`] its own profile, read and reshaped as
    /// `merged` was: the same view, filters and transforms, so that its samples are
    /// `merged`'s of that run). Empty, or one, for a side of one run.
    pub each: &'a [RunSamples],
}

/// One run's samples of a counter per function, self and cumulative, and in all: what a
/// side's run-to-run variation is measured from, taken from the run's own profile so
/// that the profile itself need not be kept ([`Runs::each`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunSamples {
    /// All samples of the run (signals; for a memory counter, allocations or blocks):
    /// the n_r of each of its shares. 0 for a run without the counter's values.
    pub total: i64,
    /// Per function with a value, by (name, file) as the comparison matches functions:
    /// (self samples, cumulative samples, each sample once). Where a profile has several
    /// functions of one name and file, the last, as the comparison takes.
    pub functions: HashMap<(String, String), (i64, i64)>,
}

impl RunSamples {
    /// The samples of `counter` per function in `run`, one run's profile.
    ///
    /// # Errors
    /// Those of [`Measure::select`], naming the run's file (an unknown counter).
    pub fn of(run: &Profile, counter: &str) -> Result<RunSamples, Error> {
        let (measure, id) = Measure::select(run, counter)?;
        let Some(id) = id else {
            return Ok(RunSamples::default());
        };
        let amounts = FunctionAmounts::of(run, id);
        let mut functions = HashMap::new();
        for (id, function) in run.functions().iter().enumerate() {
            let values = amounts.self_values[id];
            if values == Default::default() && amounts.cumulative[id] == 0 {
                continue;
            }
            functions.insert(
                (function.name.clone(), run.file(function.file).to_string()),
                (values.count, amounts.cumulative_counts[id]),
            );
        }
        Ok(RunSamples {
            total: measure.total.count,
            functions,
        })
    }
}

impl<'a> Runs<'a> {
    /// A side of one run.
    pub fn one(profile: &'a Profile) -> Runs<'a> {
        Runs {
            merged: profile,
            each: &[],
        }
    }

    /// The number of runs, at least 1.
    pub fn count(&self) -> usize {
        self.each.len().max(1)
    }
}

/// A computed comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// The base profile.
    pub base: Side,
    /// The new profile.
    pub new: Side,
    /// How the shares are compared.
    pub method: Method,
    /// The significance level.
    pub alpha: f64,
    /// The correction applied.
    pub correction: Correction,
    /// m: the number of tests made, self and cumulative, over which p-values are
    /// corrected (0 for [`Method::Threshold`]).
    pub tests: usize,
    /// For Bonferroni, the |z| from which a change is significant; `None` for
    /// Benjamini–Hochberg, whose threshold depends on all p-values.
    pub critical_z: Option<f64>,
    /// Whether either profile is in the Python view with frames hidden.
    pub python_view: bool,
    /// How the shares' run-to-run variation was allowed for.
    pub noise: Noise,
    /// Every function compared (with at least one share tested, or compared with the
    /// threshold): the significant ones first, each group by decreasing
    /// [`Change::size`], then by name.
    pub changes: Vec<Change>,
}

impl Diff {
    /// The functions with a significant change of either share.
    pub fn significant(&self) -> impl Iterator<Item = &Change> {
        self.changes
            .iter()
            .filter(|change| change.significant.any())
    }

    /// The functions whose self or cumulative share grew by more than `points`
    /// percentage points, significantly: what `--fail-on-regression` fails on. Each
    /// says which of its shares grew so.
    pub fn regressions(&self, points: f64) -> Vec<Regression<'_>> {
        let grew = |significant: bool, change: f64, test: Option<Test>| {
            // Without a test (exact figures), a change above the points is a growth.
            significant && change > points && test.is_none_or(|test| test.z > 0.0)
        };
        self.changes
            .iter()
            .filter_map(|change| {
                let shares = Significance::of(
                    grew(change.significant.self_share(), change.change, change.test),
                    grew(
                        change.significant.cumulative(),
                        change.cumulative_change,
                        change.cumulative_test,
                    ),
                );
                shares.any().then_some(Regression { change, shares })
            })
            .collect()
    }
}

/// The side of `profile` for `counter`, with its per-function amounts.
fn side(profile: &Profile, counter: &str) -> Result<(Side, FunctionAmounts), Error> {
    let (measure, id) = Measure::select(profile, counter)?;
    let subject = super::subject(profile);
    let compared = match measure.unit {
        Unit::Ticks | Unit::Events => measure.total.count > 0,
        Unit::Bytes => measure.total.amount > 0,
        Unit::Amount => {
            return Err(Error::Report {
                subject,
                message: format!(
                    "--diff compares sampled counters (PERF_TICKS or another *_TICKS counter, PERF_* event counters such as PERF_PAGE_FAULTS) and memory counters (MEM_*), not {counter}"
                ),
            })
        }
    };
    let Some(id) = id.filter(|_| compared) else {
        let what = match measure.unit {
            Unit::Bytes => "bytes",
            Unit::Ticks | Unit::Events | Unit::Amount => "samples",
        };
        return Err(Error::Report {
            subject,
            message: format!("no {what} of {counter} to compare"),
        });
    };
    let amounts = FunctionAmounts::of(profile, id);
    let side = Side {
        description: describe(profile),
        measure,
        runs: 1,
    };
    Ok((side, amounts))
}

/// How `base` and `new`, on the same counter, are compared.
fn method_of(base: &Side, new: &Side, options: &Options) -> Method {
    let threshold = |maximum| Method::Threshold {
        min_change: options.min_change,
        maximum,
    };
    let rates = (base.measure.rate_bytes(), new.measure.rate_bytes());
    match rates {
        (Some(base_rate), Some(new_rate)) => {
            if Combine::of(&options.counter) == Combine::Maximum {
                threshold(true)
            } else if base_rate <= 1.0 && new_rate <= 1.0 {
                threshold(false)
            } else {
                Method::SampledBytes {
                    base_rate,
                    new_rate,
                }
            }
        }
        _ => Method::Samples,
    }
}

/// The number of observations behind `count` samples and `amount` in a profile compared
/// by `method` whose bytes were sampled every `rate` bytes: the samples for ticks,
/// `amount / rate` (rounded) for bytes.
fn observations(method: Method, rate: Option<f64>, count: i64, amount: i64) -> i64 {
    match method {
        Method::Samples => count,
        Method::SampledBytes { .. } | Method::Threshold { .. } => {
            (amount as f64 / rate.unwrap_or(1.0)).round() as i64
        }
    }
}

/// A function's amounts in one profile compared by `method`.
fn amounts_of(
    side: &Side,
    amounts: &FunctionAmounts,
    function: Option<FunctionId>,
    method: Method,
) -> Amounts {
    let Some(function) = function else {
        return Amounts::default();
    };
    let values = amounts.self_values[function as usize];
    let cumulative = amounts.cumulative[function as usize];
    let cumulative_count = amounts.cumulative_counts[function as usize];
    let total = side.measure.total.amount;
    let rate = side.measure.rate_bytes();
    Amounts {
        self_samples: observations(method, rate, values.count, values.amount),
        self_amount: values.amount,
        cumulative_samples: observations(method, rate, cumulative_count, cumulative),
        cumulative,
        self_percent: percent(values.amount, total),
        cumulative_percent: percent(cumulative, total),
    }
}

/// The z-test of `x1` of `n1` samples against `x2` of `n2`, with sampling noise only,
/// its p-value not yet corrected.
fn test(x1: i64, n1: u64, x2: i64, n2: u64) -> Test {
    let test = two_proportion(x1.max(0) as f64, n1 as f64, x2.max(0) as f64, n2 as f64);
    Test::of_samples(test.z)
}

/// The samples of one run of a side, per function compared: what the run-to-run
/// variation of its shares is measured from.
struct RunCounts {
    /// All samples of the run: the n_r of every share.
    total: f64,
    /// Per function compared (the index of its pair), its self samples and its
    /// cumulative samples in the run; zeros where the run does not have it.
    samples: Vec<(i64, i64)>,
}

/// The samples of `run`, one run of a side, per function compared: `index` gives the
/// place of a function (name, file) among the `functions` compared. A function of the
/// run that the merged profiles do not have (none, when the run was read as they were)
/// is left out.
fn run_counts(
    run: &RunSamples,
    index: &HashMap<(&str, &str), usize>,
    functions: usize,
) -> RunCounts {
    let mut samples = vec![(0, 0); functions];
    for ((name, file), &counts) in &run.functions {
        if let Some(&slot) = index.get(&(name.as_str(), file.as_str())) {
            samples[slot] = counts;
        }
    }
    RunCounts {
        total: run.total as f64,
        samples,
    }
}

/// The run-to-run variation of the share of function `slot` on one side of `runs`
/// (its self share, or with `cumulative` its cumulative share); `None` for fewer than
/// two runs.
fn variation(runs: &[RunCounts], slot: usize, cumulative: bool) -> Option<Heterogeneity> {
    let replicates: Vec<(f64, f64)> = runs
        .iter()
        .map(|run| {
            let (own, all) = run.samples[slot];
            let x = if cumulative { all } else { own };
            (x.max(0) as f64, run.total)
        })
        .collect();
    heterogeneity(&replicates)
}

/// The two sides' measurements of one share summed: X² and degrees of freedom added,
/// the smaller of the smallest variances.
fn both_sides(base: Option<Heterogeneity>, new: Option<Heterogeneity>) -> Option<Heterogeneity> {
    match (base, new) {
        (Some(a), Some(b)) => Some(Heterogeneity {
            chi_square: a.chi_square + b.chi_square,
            df: a.df + b.df,
            smallest_variance: a.smallest_variance.min(b.smallest_variance),
        }),
        (one, None) | (None, one) => one,
    }
}

/// What the pooled dispersion and λ are computed from, gathered while the tests are
/// made.
#[derive(Default)]
struct Pool {
    /// Per test (share) with a side's measurement of [`MIN_POOLED_VARIANCE`]: X² and df
    /// of those sides, summed.
    measured: Vec<(f64, usize)>,
    /// The sampling z of every test with [`MIN_INFLATION_SAMPLES`] on each side.
    z: Vec<f64>,
}

impl Pool {
    /// Counts in the measurements of one share on each side.
    fn add(&mut self, sides: [Option<Heterogeneity>; 2]) {
        let (mut chi_square, mut df) = (0.0, 0);
        for side in sides.into_iter().flatten() {
            if side.smallest_variance >= MIN_POOLED_VARIANCE {
                chi_square += side.chi_square;
                df += side.df;
            }
        }
        if df > 0 {
            self.measured.push((chi_square, df));
        }
    }

    /// How the variation of the shares is allowed for, with `several` runs on a side or
    /// one per side.
    fn noise(&self, several: bool, prior_weight: f64) -> Noise {
        if several {
            let pooled = typical_dispersion(&self.measured);
            Noise::Measured {
                pooled,
                dispersion: pooled.unwrap_or(1.0).max(1.0),
                tests: self.measured.len(),
                df: self.measured.iter().map(|&(_, df)| df).sum(),
                prior_weight,
            }
        } else {
            let inflation = inflation(&self.z, MIN_INFLATION_TESTS);
            Noise::Estimated {
                inflation,
                tests: self.z.len(),
                dispersion: inflation.unwrap_or(1.0).max(1.0),
            }
        }
    }
}

/// Compares `new` with `base`, one profile each: [`compute_runs`] with one run per side.
///
/// # Errors
/// Those of [`compute_runs`].
pub fn compute(base: &Profile, new: &Profile, options: &Options) -> Result<Diff, Error> {
    compute_runs(Runs::one(base), Runs::one(new), options)
}

/// Compares the runs of `new` with those of `base`: the shares of each side's runs
/// merged, each change's test allowing for how much the share varies from run to run
/// ([`Noise`]; module documentation).
///
/// # Errors
/// [`Error::Report`] naming the profile at fault if a side's has no counter
/// `options.counter`, the counter is neither a tick counter nor a memory counter, or it
/// has no samples (no bytes) in it; those of [`Measure::select`].
pub fn compute_runs(base: Runs, new: Runs, options: &Options) -> Result<Diff, Error> {
    let (mut base_side, base_amounts) = side(base.merged, &options.counter)?;
    let (mut new_side, new_amounts) = side(new.merged, &options.counter)?;
    base_side.runs = base.count();
    new_side.runs = new.count();
    let method = method_of(&base_side, &new_side, options);
    let (base_runs, new_runs) = (base, new);
    let (base, new) = (base.merged, new.merged);

    // The functions with a value on either side, matched by (name, file).
    let mut pairs: Vec<(Option<FunctionId>, Option<FunctionId>)> = Vec::new();
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    for (profile, amounts, is_new) in [(base, &base_amounts, false), (new, &new_amounts, true)] {
        for (id, function) in profile.functions().iter().enumerate() {
            if amounts.self_values[id] == Default::default() && amounts.cumulative[id] == 0 {
                continue;
            }
            // Function counts fit in u32: Profile refuses more.
            let id = id as FunctionId;
            let key = (function.name.as_str(), profile.file(function.file));
            let slot = *index.entry(key).or_insert_with(|| {
                pairs.push((None, None));
                pairs.len() - 1
            });
            if is_new {
                pairs[slot].1 = Some(id);
            } else {
                pairs[slot].0 = Some(id);
            }
        }
    }

    // Each run's samples per function, where a side has several runs: sampled counters
    // only (memory counters are tested on their sample-equivalents alone).
    let per_run = |runs: Runs| -> Vec<RunCounts> {
        if method != Method::Samples || runs.each.len() < 2 {
            return Vec::new();
        }
        runs.each
            .iter()
            .map(|run| run_counts(run, &index, pairs.len()))
            .collect()
    };
    let (base_counts, new_counts) = (per_run(base_runs), per_run(new_runs));

    let n = |side: &Side| {
        let total = side.measure.total;
        observations(method, side.measure.rate_bytes(), total.count, total.amount).max(0) as u64
    };
    let (n1, n2) = (n(&base_side), n(&new_side));
    let (total1, total2) = (
        base_side.measure.total.amount,
        new_side.measure.total.amount,
    );
    let mut pool = Pool::default();
    let mut changes: Vec<Change> = pairs
        .iter()
        .enumerate()
        .filter_map(|(slot, &(in_base, in_new))| {
            let label = match (in_new, in_base) {
                (Some(id), _) => Label::of(new, new.function(id)),
                (None, Some(id)) => Label::of(base, base.function(id)),
                (None, None) => unreachable!("every pair has a side"),
            };
            let before = amounts_of(&base_side, &base_amounts, in_base, method);
            let after = amounts_of(&new_side, &new_amounts, in_new, method);
            // A function that is only a caller has no share of its own to compare; one on
            // every sample of both profiles has no cumulative share that could change.
            // Ticks count by samples (a sample can hold several ticks), bytes by bytes.
            let (self_compared, on_every_sample, has_cumulative) = match method {
                Method::Samples => (
                    before.self_samples > 0 || after.self_samples > 0,
                    before.cumulative_samples as u64 >= n1 && after.cumulative_samples as u64 >= n2,
                    before.cumulative_samples > 0 || after.cumulative_samples > 0,
                ),
                Method::SampledBytes { .. } | Method::Threshold { .. } => (
                    before.self_amount != 0 || after.self_amount != 0,
                    before.cumulative >= total1 && after.cumulative >= total2,
                    before.cumulative != 0 || after.cumulative != 0,
                ),
            };
            let cumulative_compared = has_cumulative && !on_every_sample;
            if !self_compared && !cumulative_compared {
                return None;
            }
            let change = after.self_percent - before.self_percent;
            let cumulative_change = after.cumulative_percent - before.cumulative_percent;
            // The test of one share, x1 → x2 samples, with its run-to-run variation
            // measured and gathered into the pool.
            let mut share_test = |x1: i64, x2: i64, cumulative: bool| {
                let mut made = test(x1, n1, x2, n2);
                if method == Method::Samples {
                    let sides = [
                        variation(&base_counts, slot, cumulative),
                        variation(&new_counts, slot, cumulative),
                    ];
                    pool.add(sides);
                    made.own = both_sides(sides[0], sides[1]);
                    if x1 >= MIN_INFLATION_SAMPLES && x2 >= MIN_INFLATION_SAMPLES {
                        pool.z.push(made.sampling_z);
                    }
                }
                made
            };
            let (tests, significant) = match method {
                Method::Threshold { min_change, .. } => {
                    let beyond = |compared: bool, points: f64| {
                        compared && points != 0.0 && points.abs() >= min_change
                    };
                    (
                        (None, None),
                        Significance::of(
                            beyond(self_compared, change),
                            beyond(cumulative_compared, cumulative_change),
                        ),
                    )
                }
                Method::Samples | Method::SampledBytes { .. } => (
                    (
                        self_compared
                            .then(|| share_test(before.self_samples, after.self_samples, false)),
                        cumulative_compared.then(|| {
                            share_test(before.cumulative_samples, after.cumulative_samples, true)
                        }),
                    ),
                    // Set once the p-values are corrected.
                    Significance::No,
                ),
            };
            Some(Change {
                label,
                base: before,
                new: after,
                change,
                test: tests.0,
                cumulative_change,
                cumulative_test: tests.1,
                significant,
            })
        })
        .collect();

    // Each test allows for its share's run-to-run variation.
    let noise = match method {
        Method::Samples => pool.noise(
            base_side.runs > 1 || new_side.runs > 1,
            options.prior_weight,
        ),
        Method::SampledBytes { .. } | Method::Threshold { .. } => Noise::Sampling,
    };
    for change in &mut changes {
        for test in [&mut change.test, &mut change.cumulative_test]
            .into_iter()
            .flatten()
        {
            match noise {
                Noise::Sampling => {}
                Noise::Estimated { dispersion, .. } => test.with_dispersion(dispersion),
                Noise::Measured {
                    dispersion,
                    prior_weight,
                    ..
                } => test.with_dispersion(moderated_dispersion(
                    test.own.map(|own| (own.chi_square, own.df)),
                    dispersion,
                    prior_weight,
                )),
            }
        }
    }

    // One correction over every test made, self and cumulative.
    let p: Vec<f64> = changes
        .iter()
        .flat_map(|change| [change.test, change.cumulative_test])
        .flatten()
        .map(|test| test.p)
        .collect();
    let tests = p.len();
    if tests > 0 {
        let mut adjusted = options.correction.adjust(&p).into_iter();
        for change in &mut changes {
            let mut correct = |test: &mut Option<Test>| match test {
                Some(test) => {
                    test.p_adjusted = adjusted.next().expect("one corrected p-value per test");
                    test.p_adjusted <= options.alpha
                }
                None => false,
            };
            let self_share = correct(&mut change.test);
            let cumulative = correct(&mut change.cumulative_test);
            change.significant = Significance::of(self_share, cumulative);
        }
    }
    changes.sort_by(|a, b| {
        b.significant
            .any()
            .cmp(&a.significant.any())
            .then_with(|| b.size().total_cmp(&a.size()))
            .then_with(|| {
                (&a.label.name, &a.label.location).cmp(&(&b.label.name, &b.label.location))
            })
    });
    let critical_z = match options.correction {
        Correction::Bonferroni if tests > 0 => Some(critical_z(options.alpha / tests as f64)),
        _ => None,
    };
    Ok(Diff {
        base: base_side,
        new: new_side,
        method,
        alpha: options.alpha,
        correction: options.correction,
        tests,
        critical_z,
        python_view: base.hidden_nodes > 0 || new.hidden_nodes > 0,
        noise,
        changes,
    })
}

/// How a comparison is written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Output {
    /// How many functions to list at most (0: all); significant changes are always
    /// listed.
    pub limit: usize,
    /// `--fail-on-regression`: the growth in percentage points above which a
    /// significant growth of a self or cumulative share is a regression, if asked.
    pub fail_on: Option<f64>,
}

/// The column headings of the table, before the function: the self share's columns,
/// then the cumulative share's, then which is significant. The amounts' headings say
/// their unit ([`Measure::heading`]): `base s` for ticks, `base bytes` for memory,
/// `base events` for event counters.
fn headings(measure: &Measure) -> [String; 15] {
    [
        "base %".to_string(),
        "new %".to_string(),
        "change".to_string(),
        measure.heading("base"),
        measure.heading("new"),
        "z".to_string(),
        "p (adj.)".to_string(),
        "base cum %".to_string(),
        "new cum %".to_string(),
        "cum change".to_string(),
        measure.heading("base cum"),
        measure.heading("new cum"),
        "cum z".to_string(),
        "cum p (adj.)".to_string(),
        "signif.".to_string(),
    ]
}

/// What the z and p cells of a test not made show.
const NOT_TESTED: &str = "-";

/// A p-value as printed: 3 decimals from 0.001 up, else 2 significant digits.
fn format_p(p: f64) -> String {
    if p >= 0.001 {
        format!("{p:.3}")
    } else {
        format!("{p:.1e}")
    }
}

/// A change in points as printed, with its sign.
fn format_points(points: f64) -> String {
    format!("{points:+.2}")
}

/// The z and corrected p cells of `test`.
fn test_cells(test: Option<Test>) -> [String; 2] {
    match test {
        Some(test) => [format!("{:+.2}", test.z), format_p(test.p_adjusted)],
        None => [NOT_TESTED.to_string(), NOT_TESTED.to_string()],
    }
}

/// The number cells of `change`, as [`headings`] names them.
fn cells(diff: &Diff, change: &Change) -> Vec<String> {
    let (base, new) = (&diff.base.measure, &diff.new.measure);
    let [z, p] = test_cells(change.test);
    let [cumulative_z, cumulative_p] = test_cells(change.cumulative_test);
    vec![
        format!("{:.2}", change.base.self_percent),
        format!("{:.2}", change.new.self_percent),
        format_points(change.change),
        base.format_amount(change.base.self_amount),
        new.format_amount(change.new.self_amount),
        z,
        p,
        format!("{:.2}", change.base.cumulative_percent),
        format!("{:.2}", change.new.cumulative_percent),
        format_points(change.cumulative_change),
        base.format_amount(change.base.cumulative),
        new.format_amount(change.new.cumulative),
        cumulative_z,
        cumulative_p,
        change.significant.name().to_string(),
    ]
}

/// The changes to list: every significant one, then the largest others up to `limit`
/// rows in all (0: all).
fn listed<'a>(diff: &'a Diff, output: &Output) -> &'a [Change] {
    let significant = diff.significant().count();
    let count = if output.limit == 0 {
        diff.changes.len()
    } else {
        output.limit.max(significant).min(diff.changes.len())
    };
    &diff.changes[..count]
}

/// The test's allowance for run-to-run variation, in words ([`Noise`]): `run-to-run
/// variation measured between 3 base runs and 3 new runs: typical dispersion 1.84 (of 52
/// tests, 208 df), each function's own moderated by it (prior weight 3)`, or with one run
/// per side `one run per side: run-to-run variation estimated from the comparison's own
/// z-scores (dispersion 1.31, …); give several runs per side (…) to measure each
/// function's own`. `None` for sampling noise only.
fn noise_in_words(diff: &Diff) -> Option<String> {
    const SEVERAL: &str =
        "give several runs per side (--diff B1 B2 B3 -- N1 N2 N3) to measure each function's own";
    let tests_with = |tests: usize| {
        format!(
            "{} with at least {MIN_INFLATION_SAMPLES} samples on each side",
            counted(tests, "test")
        )
    };
    match diff.noise {
        Noise::Sampling => None,
        Noise::Estimated {
            inflation: Some(inflation),
            tests,
            dispersion,
        } => {
            let how = format!(
                "the median z² of the {} / {MEDIAN_CHI_SQUARE_1:.3}",
                tests_with(tests)
            );
            let value = if inflation >= 1.0 {
                format!("dispersion {dispersion:.2}, {how}")
            } else {
                format!("dispersion {dispersion:.2}: {how} is {inflation:.2}, at least 1 is used")
            };
            Some(format!(
                "one run per side: run-to-run variation estimated from the comparison's own z-scores ({value}); {SEVERAL}"
            ))
        }
        Noise::Estimated {
            inflation: None,
            tests,
            ..
        } => Some(format!(
            "one run per side: too few tests to estimate run-to-run variation from the comparison's own z-scores ({}, {MIN_INFLATION_TESTS} needed), sampling noise only; {SEVERAL}",
            tests_with(tests)
        )),
        Noise::Measured {
            pooled,
            dispersion,
            tests,
            df,
            prior_weight,
        } => {
            let pooled = match pooled {
                Some(pooled) if pooled >= 1.0 => format!(
                    "typical dispersion {pooled:.2} (of {}, {df} df)",
                    counted(tests, "test")
                ),
                Some(pooled) => format!(
                    "typical dispersion {pooled:.2} (of {}, {df} df; at least 1 is used)",
                    counted(tests, "test")
                ),
                None => format!(
                    "no share with a binomial variance of at least {MIN_POOLED_VARIANCE} samples² in each run to measure a typical dispersion ({dispersion:.2} used)"
                ),
            };
            Some(format!(
                "run-to-run variation measured between {} and {}: {pooled}, each function's own moderated by it (prior weight {prior_weight})",
                counted(diff.base.runs, "base run"),
                counted(diff.new.runs, "new run"),
            ))
        }
    }
}

/// One sentence on the test: `two-proportion z-test (pooled) on each function's self
/// samples and on its cumulative samples (…), <run-to-run variation>, Bonferroni
/// correction over 199 tests of 155 functions, alpha 0.01` ([`noise_in_words`]); for
/// sampled bytes, how they are counted in samples; without a test, why and the threshold.
fn method(diff: &Diff) -> String {
    let correction = || {
        format!(
            "{} correction over {} of {}, alpha {}",
            diff.correction.name(),
            counted(diff.tests, "test"),
            counted(diff.changes.len(), "function"),
            diff.alpha
        )
    };
    let bytes = |rate: f64| memory::format_bytes(rate.round() as i64);
    match diff.method {
        Method::Samples => format!(
            "two-proportion z-test (pooled) on each function's self samples and on its cumulative samples (n = all samples of each {}), {}{}",
            if diff.base.runs > 1 || diff.new.runs > 1 {
                "side's runs merged"
            } else {
                "profile"
            },
            noise_in_words(diff).map_or_else(String::new, |noise| noise + ", "),
            correction()
        ),
        Method::SampledBytes {
            base_rate,
            new_rate,
        } => format!(
            "two-proportion z-test (pooled) on each function's self bytes and on its cumulative bytes, counted in samples of R bytes (R = {} in base, {} in new; n = all bytes of each profile / R), {}",
            bytes(base_rate),
            bytes(new_rate),
            correction()
        ),
        Method::Threshold {
            min_change,
            maximum,
        } => {
            let (why, share) = if maximum {
                (
                    format!(
                        "{} is the largest single allocation, not a sum of samples",
                        diff.base.measure.counter
                    ),
                    "a share of each profile's largest allocation",
                )
            } else {
                (
                    "both profiles record every allocation: exact figures, no sampling noise"
                        .to_string(),
                    "a share",
                )
            };
            format!(
                "none ({why}): {share} is significant when it changed by at least {min_change:.2} points (--min-change); {} compared",
                counted(diff.changes.len(), "function")
            )
        }
    }
}

/// `count` and `noun`, plural unless `count` is 1: `1 test`, `199 tests`.
fn counted(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// The changes of `shares` of `change`, in words: `+5.84 points cumulative`,
/// `-4.97 points self and cumulative` (both the same), `+1.25 points self, +2.42 points
/// cumulative`. For memory and event counters each change of points is followed by that
/// of the amount ([`Measure::format_change`]): `+58.12 points self and cumulative (+64.0
/// MiB)`, `+40.00 points self (+2,400 events)`.
fn changes_in_words(measure: &Measure, change: &Change, shares: Significance) -> String {
    // (points, bytes) of a share.
    let of = |points: f64, delta: i64| {
        let bytes = match measure.unit {
            Unit::Bytes | Unit::Events => format!(" ({})", measure.format_change(delta)),
            Unit::Ticks | Unit::Amount => String::new(),
        };
        (format_points(points), bytes)
    };
    let own = of(
        change.change,
        change.new.self_amount - change.base.self_amount,
    );
    let cumulative = of(
        change.cumulative_change,
        change.new.cumulative - change.base.cumulative,
    );
    let words = |(points, bytes): &(String, String), shares: &str| {
        format!("{points} points {shares}{bytes}")
    };
    match shares {
        Significance::No => String::new(),
        Significance::SelfShare => words(&own, "self"),
        Significance::Cumulative => words(&cumulative, "cumulative"),
        Significance::Both if own == cumulative => words(&own, "self and cumulative"),
        Significance::Both => format!(
            "{}, {}",
            words(&own, "self"),
            words(&cumulative, "cumulative")
        ),
    }
}

/// The verdict, as one line of text: the regressions when `fail_on` is given, the
/// significant changes otherwise; functions separated by `; `.
fn verdict(diff: &Diff, output: &Output, name: impl Fn(&Label) -> String) -> String {
    let list = |changes: Vec<(&Change, Significance)>| -> String {
        changes
            .iter()
            .map(|&(change, shares)| {
                format!(
                    "{} {}",
                    name(&change.label),
                    changes_in_words(&diff.base.measure, change, shares)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let significant: Vec<(&Change, Significance)> = diff
        .significant()
        .map(|change| (change, change.significant))
        .collect();
    match output.fail_on {
        Some(points) => {
            let regressions = diff.regressions(points);
            if regressions.is_empty() {
                format!(
                    "OK: no function's self or cumulative share grew significantly by more than {points:.2} points ({} significant changes)",
                    significant.len()
                )
            } else {
                format!(
                    "REGRESSION: {} function(s) grew significantly by more than {points:.2} points: {}",
                    regressions.len(),
                    list(
                        regressions
                            .iter()
                            .map(|regression| (regression.change, regression.shares))
                            .collect()
                    )
                )
            }
        }
        None if significant.is_empty() => "no significant change".to_string(),
        None => format!(
            "{} significant change(s): {}",
            significant.len(),
            list(significant)
        ),
    }
}

/// The first line of the report, after `### ` in markdown.
fn title(diff: &Diff, arrow: &str) -> String {
    format!(
        "{}: {} self and cumulative shares per function, base {arrow} new",
        crate::error::PROGRAM,
        diff.base.measure.counter
    )
}

/// Writes `diff` as plain text for a terminal or a CI log (columns shortened here):
///
/// ```text
/// pyigprof-analyse: PERF_TICKS self and cumulative shares per function, base -> new
/// base: b1.gz, b2.gz: python3 app.py (pid 1), python3 app.py (pid 2): 7509 samples, 7521 ticks of 4.000 ms = 30.084 s
/// new: new.gz: python3 app.py (pid 3): 3744 samples, 3758 ticks of 4.000 ms = 15.032 s
/// test: two-proportion z-test (pooled) on …, run-to-run variation measured between 2 base runs and 1 new run: dispersion 1.08 pooled over 53 tests (53 df), each function's own moderated by it (prior weight 10), Bonferroni correction over 236 tests of 185 functions, alpha 0.01: significant when |z| >= 4.09
///  base %  new %  change …      z  p (adj.)  base cum %  new cum %  cum change …  cum z  cum p (adj.)  signif.  function  (file)
///    6.18   7.56   +1.37 …  +2.77     1.000       30.55      36.77       +6.22 …  +6.51        1.7e-8      cum  python_work (/work/app.py:22)
/// result: 6 significant change(s): python_work (/work/app.py:22) +6.22 points cumulative; …
/// ```
///
/// The amounts (seconds, events, bytes) of a side of several runs are their sums.
///
/// A test not made (a function with no self samples, or on every sample of both
/// profiles; every test with [`Method::Threshold`]) has `-` as its z and p. For memory
/// counters the amounts are bytes (`base bytes`, `8.0 MiB`: [`Measure::format_amount`])
/// and the result gives the change of bytes after that of points: `Cache.add
/// (/work/app.py:20) +36.36 points cumulative (+64.0 MiB)`; for event counters they are
/// events (`base events`, `1,200`), the result giving their change (`+2,400 events`).
///
/// # Errors
/// Those of `out`.
pub fn write_text(diff: &Diff, output: &Output, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "{}", title(diff, "->"))?;
    for (name, side) in [("base", &diff.base), ("new", &diff.new)] {
        writeln!(
            out,
            "{name}: {}: {}",
            side.description,
            side.measure.total_line()
        )?;
    }
    let threshold = diff
        .critical_z
        .map(|z| format!(": significant when |z| >= {z:.2}"))
        .unwrap_or_default();
    writeln!(out, "test: {}{threshold}", method(diff))?;
    if diff.python_view {
        writeln!(out, "{VIEW_NOTE}")?;
    }
    let rows: Vec<Vec<String>> = listed(diff, output)
        .iter()
        .map(|change| cells(diff, change))
        .collect();
    let headings = headings(&diff.base.measure);
    let mut widths: Vec<usize> = headings.iter().map(|heading| heading.len() + 2).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len() + 2);
        }
    }
    writeln!(
        out,
        "{}",
        table_line(&headings, &widths, "function  (file)")
    )?;
    for (row, change) in rows.iter().zip(listed(diff, output)) {
        writeln!(
            out,
            "{}",
            table_line(row, &widths, &change.label.short_line())
        )?;
    }
    if diff.changes.len() > rows.len() {
        writeln!(
            out,
            "({} more functions without significant change; --top=0 lists them all)",
            diff.changes.len() - rows.len()
        )?;
    }
    writeln!(out, "result: {}", verdict(diff, output, Label::short_line))?;
    Ok(())
}

/// `text` as a markdown code span that is safe in a table cell: `|` escaped, enough
/// backticks around text that has some.
fn code(text: &str) -> String {
    let text = text.replace('|', "\\|");
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

/// How a function is named in markdown: its name as code (C++ names short, as in the
/// text tables), then where it is.
fn markdown_name(label: &Label) -> String {
    format!("{} ({})", code(&label.short), code(&label.location))
}

/// Writes `diff` as markdown for a pull-request comment: a heading, the two profiles,
/// the method, the verdict in bold, and the table of [`write_text`] with one row per
/// function; with run-to-run variation measured ([`Noise::Measured`]), a second table of
/// each listed function's dispersions per test, its own and the one its z allows for.
///
/// # Errors
/// Those of `out`.
pub fn write_markdown(diff: &Diff, output: &Output, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "### {}\n", title(diff, "→"))?;
    let amount_heading = match diff.base.measure.unit {
        Unit::Ticks => "time",
        Unit::Events => "events",
        Unit::Bytes | Unit::Amount => "bytes",
    };
    writeln!(
        out,
        "| profile | files and program | {} | {amount_heading} |",
        diff.base.measure.count_noun()
    )?;
    writeln!(out, "|---|---|--:|--:|")?;
    for (name, side) in [("base", &diff.base), ("new", &diff.new)] {
        let measure = &side.measure;
        // The column says events; seconds and bytes say their unit.
        let amount = match measure.unit {
            Unit::Events => measure.format_amount(measure.total.amount),
            Unit::Ticks | Unit::Bytes | Unit::Amount => {
                measure.format_with_unit(measure.total.amount)
            }
        };
        writeln!(
            out,
            "| {name} | {} | {} | {amount} |",
            code(&side.description),
            measure.total.count,
        )?;
    }
    let threshold = diff
        .critical_z
        .map(|z| format!(" (significant when |z| ≥ {z:.2})"))
        .unwrap_or_default();
    writeln!(
        out,
        "\nTest: {}{threshold}.",
        method(diff).replace('|', "\\|")
    )?;
    if diff.python_view {
        writeln!(out, "\n{VIEW_NOTE}.")?;
    }
    writeln!(out, "\n**{}**\n", verdict(diff, output, markdown_name))?;
    write!(out, "| function |")?;
    let headings = headings(&diff.base.measure);
    for heading in &headings {
        write!(out, " {heading} |")?;
    }
    write!(out, "\n|---|")?;
    for _ in &headings {
        write!(out, "--:|")?;
    }
    writeln!(out)?;
    let listed = listed(diff, output);
    for change in listed {
        write!(out, "| {} |", markdown_name(&change.label))?;
        for cell in cells(diff, change) {
            write!(out, " {cell} |")?;
        }
        writeln!(out)?;
    }
    if diff.changes.len() > listed.len() {
        writeln!(
            out,
            "\n{} more functions without significant change.",
            diff.changes.len() - listed.len()
        )?;
    }
    if matches!(diff.noise, Noise::Measured { .. }) {
        write_dispersions(listed, out)?;
    }
    Ok(())
}

/// The dispersion cells of `test`: its own (`2.31 (4 df)`, `-` where not measured) and
/// the one its z allows for; `-` for both when it was not made.
fn dispersion_cells(test: Option<Test>) -> [String; 2] {
    match test {
        Some(test) => [
            test.own
                .and_then(|own| Some(format!("{:.2} ({} df)", own.dispersion()?, own.df)))
                .unwrap_or_else(|| NOT_TESTED.to_string()),
            format!("{:.2}", test.dispersion),
        ],
        None => [NOT_TESTED.to_string(), NOT_TESTED.to_string()],
    }
}

/// The markdown table of each listed function's run-to-run variation, per test: its
/// own dispersion measured between the runs (with its degrees of freedom) and the
/// moderated one its z was divided by the root of.
fn write_dispersions(listed: &[Change], out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "\nRun-to-run variation per test: the variance of the share between the runs of each side over its binomial variance (1: sampling noise only), the function's own (degrees of freedom) and, moderated by the pooled one, what its z allows for (z = sampling z / √dispersion).\n"
    )?;
    writeln!(
        out,
        "| function | own dispersion | dispersion used | own cum dispersion | cum dispersion used |"
    )?;
    writeln!(out, "|---|--:|--:|--:|--:|")?;
    for change in listed {
        let [own, used] = dispersion_cells(change.test);
        let [cumulative_own, cumulative_used] = dispersion_cells(change.cumulative_test);
        writeln!(
            out,
            "| {} | {own} | {used} | {cumulative_own} | {cumulative_used} |",
            markdown_name(&change.label)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::load;
    use super::*;

    /// Base: f (app.py, first line 10) 30 samples, g (lib.py) 70; new: f moved to line 12
    /// with 45 samples, g 50, and a g of another file with 5. Every function is a root
    /// that calls nothing: its cumulative samples are its self samples.
    const BASE: &[u8] = b"P=(HEX ID=1 N=(python3 app.py) T=0.004000)
C1 FN0=(F0=(/work/app.py)+a N=(f))+0 V0=(PERF_TICKS):(1e,1e,1)
C1 FN1=(F1=(/work/lib.py)+1 N=(g))+0 V0:(46,46,1)
";
    const NEW: &[u8] = b"P=(HEX ID=2 N=(python3 app.py) T=0.004000)
C1 FN0=(F0=(/work/app.py)+c N=(f))+0 V0=(PERF_TICKS):(2d,2d,1)
C1 FN1=(F1=(/work/lib.py)+1 N=(g))+0 V0:(32,32,1)
C1 FN2=(F2=(/work/other.py)+1 N=(g))+0 V0:(5,5,1)
";

    /// The change of the function whose location starts with `location`.
    /// `diff` as `write` renders it with `limit` rows and no threshold.
    fn rendered(
        diff: &Diff,
        limit: usize,
        write: fn(&Diff, &Output, &mut dyn Write) -> io::Result<()>,
    ) -> String {
        let mut out = Vec::new();
        write(
            diff,
            &Output {
                limit,
                fail_on: None,
            },
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    fn find<'a>(diff: &'a Diff, location: &str) -> &'a Change {
        diff.changes
            .iter()
            .find(|change| change.label.location.starts_with(location))
            .unwrap_or_else(|| panic!("no {location} in {:?}", diff.changes))
    }

    #[test]
    fn functions_match_by_name_and_file() {
        let diff = compute(
            &load("base.txt", BASE),
            &load("new.txt", NEW),
            &Options::default(),
        )
        .unwrap();
        // 3 functions, each with a self and a cumulative test.
        assert_eq!((diff.changes.len(), diff.tests), (3, 6));
        // f moved from line 10 to 12: still one function, named as in the new profile.
        let f = find(&diff, "/work/app.py");
        assert_eq!(f.label.location, "/work/app.py:12");
        assert_eq!((f.base.self_samples, f.new.self_samples), (30, 45));
        // 30/100 → 45/100: z = 0.15 / √(0.375 × 0.625 × 0.02) = 2.19089, p = 0.0284597
        // (see stats), Bonferroni over 6 tests: 0.170758.
        let test = f.test.unwrap();
        assert!((test.z - 2.1908902300206647).abs() < 1e-12);
        assert!((test.p_adjusted - 6.0 * 0.02845973691631057).abs() < 1e-6);
        // f calls nothing: its cumulative test is its self test.
        assert_eq!(f.cumulative_test, f.test);
        assert_eq!(f.cumulative_change, f.change);
        assert_eq!(f.significant, Significance::No);
        assert!((f.change - 15.0).abs() < 1e-9);
        let other = find(&diff, "/work/other.py");
        assert_eq!((other.base.self_samples, other.new.self_samples), (0, 5));
        assert_eq!(other.base.self_percent, 0.0);
        assert!(diff.regressions(0.0).is_empty());
        // At α = 0.2, f's growth is significant, in both shares.
        let lenient = Options {
            alpha: 0.2,
            ..Options::default()
        };
        let diff = compute(&load("base.txt", BASE), &load("new.txt", NEW), &lenient).unwrap();
        let regressions: Vec<(&str, Significance)> = diff
            .regressions(10.0)
            .iter()
            .map(|r| (r.change.label.location.as_str(), r.shares))
            .collect();
        assert_eq!(regressions, [("/work/app.py:12", Significance::Both)]);
        assert!(diff.regressions(15.0).is_empty());
    }

    /// Base, 200 samples of one tick: `<module>` (no samples of its own) calls `work`
    /// (self 20) and `other` (110); `work` calls `l_mod` (30), `PyLong_FromLong` (20)
    /// and itself (self 10), which calls `l_mod` (10). New, 200 samples: work 25,
    /// l_mod 45, PyLong_FromLong 30, work → work 10 → l_mod 15, other 75.
    const CALLS_BASE: &[u8] = b"P=(HEX ID=1 N=(python3 app.py) T=0.004000)
C1 FN0=(F0=(/work/app.py)+1 N=(<module>))+0
C2 FN1=(F0+a N=(work))+1 V0=(PERF_TICKS):(14,14,1)
C3 FN2=(F1=(/usr/lib/libpython3.11.so)+100 N=(l_mod))+4 V0:(1e,1e,1)
C3 FN3=(F1+200 N=(PyLong_FromLong))+8 V0:(14,14,1)
C3 FN1+2 V0:(a,a,1)
C4 FN2+4 V0:(a,a,1)
C2 FN4=(F0+20 N=(other))+1 V0:(6e,6e,1)
";
    const CALLS_NEW: &[u8] = b"P=(HEX ID=2 N=(python3 app.py) T=0.004000)
C1 FN0=(F0=(/work/app.py)+1 N=(<module>))+0
C2 FN1=(F0+a N=(work))+1 V0=(PERF_TICKS):(19,19,1)
C3 FN2=(F1=(/usr/lib/libpython3.11.so)+100 N=(l_mod))+4 V0:(2d,2d,1)
C3 FN3=(F1+200 N=(PyLong_FromLong))+8 V0:(1e,1e,1)
C3 FN1+2 V0:(a,a,1)
C4 FN2+4 V0:(f,f,1)
C2 FN4=(F0+20 N=(other))+1 V0:(4b,4b,1)
";

    #[test]
    fn cumulative_share_finds_a_slowdown_spread_over_callees() {
        let diff = compute(
            &load("base.txt", CALLS_BASE),
            &load("new.txt", CALLS_NEW),
            &Options::default(),
        )
        .unwrap();
        // <module> is on every sample of both: no cumulative test, and no self samples:
        // not listed. work, l_mod, PyLong_FromLong, other: 4 self + 4 cumulative tests.
        assert!(diff.changes.iter().all(|c| c.label.name != "<module>"));
        assert_eq!((diff.changes.len(), diff.tests), (4, 8));
        // Bonferroni at α = 0.01 over 8 tests: |z| ≥ Φ⁻¹(1 − 0.01/16) = 3.2272.
        assert!((diff.critical_z.unwrap() - 3.2272).abs() < 1e-4);

        let work = find(&diff, "/work/app.py:10");
        // Self: 20 + 10 (recursive call) = 30 → 25 + 10 = 35 samples.
        assert_eq!((work.base.self_samples, work.new.self_samples), (30, 35));
        // Cumulative, each sample once (the recursive call's 10 + 10 are not counted
        // again): 20 + 30 + 20 + 10 + 10 = 90 → 25 + 45 + 30 + 10 + 15 = 125.
        assert_eq!(
            (work.base.cumulative_samples, work.new.cumulative_samples),
            (90, 125)
        );
        assert!((work.cumulative_change - (62.5 - 45.0)).abs() < 1e-9);
        assert!((work.change - (17.5 - 15.0)).abs() < 1e-9);
        // Self: 30/200 → 35/200, p̂ = 65/400: z = 0.025 / √(0.1625 × 0.8375 × 0.01) =
        // 0.677674, p = 0.497978, × 8 > 1.
        let test = work.test.unwrap();
        assert!((test.z - 0.677674147571697).abs() < 1e-12);
        assert_eq!(test.p_adjusted, 1.0);
        // Cumulative: 90/200 → 125/200, p̂ = 215/400: z = 0.175 / √(0.5375 × 0.4625 ×
        // 0.01) = 3.509885, p = 4.48300e-4 (Python: math.erfc), × 8 = 3.58640e-3 ≤ 0.01.
        let cumulative = work.cumulative_test.unwrap();
        assert!((cumulative.z - 3.5098854739473015).abs() < 1e-12);
        assert!((cumulative.p - 4.482997378110543e-4).abs() < 1e-9);
        assert!((cumulative.p_adjusted - 3.5863979024884345e-3).abs() < 1e-8);
        assert_eq!(work.significant, Significance::Cumulative);

        // other fell by as much (110 → 75 of 200, z = −3.509885): both shares, as it
        // calls nothing. l_mod (40 → 60, z = 2.309401, 8p = 0.167) is not significant.
        let other = find(&diff, "/work/app.py:32");
        assert_eq!(other.significant, Significance::Both);
        assert!((other.cumulative_test.unwrap().z + 3.5098854739473015).abs() < 1e-12);
        let l_mod = find(&diff, "/usr/lib/libpython3.11.so");
        assert_eq!(l_mod.label.name, "l_mod");
        assert!((l_mod.test.unwrap().z - 2.3094010767585025).abs() < 1e-12);
        assert_eq!(l_mod.significant, Significance::No);

        // Significant first, by the larger change: work (+17.50 cumulative) before
        // other (−17.50 both; tie broken by name).
        let order: Vec<&str> = diff.changes.iter().map(|c| c.label.name.as_str()).collect();
        assert_eq!(order, ["other", "work", "l_mod", "PyLong_FromLong"]);

        // A regression of the cumulative share only; other's share fell.
        let regressions = diff.regressions(17.0);
        assert_eq!(regressions.len(), 1);
        assert_eq!(regressions[0].change.label.name, "work");
        assert_eq!(regressions[0].shares, Significance::Cumulative);
        assert!(diff.regressions(17.5).is_empty());
        let mut text = Vec::new();
        let output = Output {
            limit: 0,
            fail_on: Some(2.0),
        };
        write_text(&diff, &output, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("Bonferroni correction over 8 tests of 4 functions"));
        assert!(text.ends_with(
            "result: REGRESSION: 1 function(s) grew significantly by more than 2.00 points: work (/work/app.py:10) +17.50 points cumulative\n"
        ), "{text}");
    }

    /// A memory profile of `f` and `g` with `f_bytes` and `g_bytes` live, recorded every
    /// `rate` bytes (no memory statistics for 1, as IgProf's).
    fn live(f_bytes: i64, g_bytes: i64, rate: u32) -> Profile {
        let statistics = if rate > 1 {
            format!(
                "C1 FN0=(F0=([pyigprof])+0 N=(#pyigprof stats samples=0))+0 V0=(PERF_TICKS):(0,0,0)\n\
                 C1 FN1=(F0+0 N=(#pyigprof memory rate_bytes={rate}))+0\n"
            )
        } else {
            "C1 FN0=(F0=([none])+0 N=(start))+0\nC1 FN1=(F0+0 N=(end))+0\n".to_string()
        };
        load(
            "m.txt",
            format!(
                "P=(HEX ID=1 N=(python3 m.py) T=0.004000)\n{statistics}\
                 C1 FN2=(F1=(/work/m.py)+1 N=(f))+0 V1=(MEM_LIVE):(1,{f_bytes:x},0)\n\
                 C1 FN3=(F1+9 N=(g))+0 V1:(1,{g_bytes:x},0)\n"
            )
            .as_bytes(),
        )
    }

    #[test]
    fn memory_is_tested_in_samples_of_r_bytes_or_by_the_threshold() {
        let options = Options {
            counter: "MEM_LIVE".to_string(),
            ..Options::default()
        };
        // Sampled every 1 KiB: f 30 KiB of 100 → 45 KiB of 100, the z of 30/100 → 45/100
        // samples (the first test of this module).
        let diff = compute(
            &live(30 << 10, 70 << 10, 1024),
            &live(45 << 10, 55 << 10, 1024),
            &options,
        )
        .unwrap();
        assert_eq!(
            diff.method,
            Method::SampledBytes {
                base_rate: 1024.0,
                new_rate: 1024.0
            }
        );
        let f = find(&diff, "/work/m.py:1");
        assert_eq!((f.base.self_samples, f.new.self_samples), (30, 45));
        assert!((f.test.unwrap().z - 2.1908902300206647).abs() < 1e-12);
        // Exact on one side only: still a test, the exact side counting every byte.
        let diff = compute(
            &live(30 << 10, 70 << 10, 1),
            &live(45 << 10, 55 << 10, 1024),
            &options,
        )
        .unwrap();
        assert_eq!(
            diff.method,
            Method::SampledBytes {
                base_rate: 1.0,
                new_rate: 1024.0
            }
        );
        assert_eq!(find(&diff, "/work/m.py:1").base.self_samples, 30 << 10);
        // Exact on both sides: no test; f's +15 points are significant, and a regression
        // beyond 10 points, g's -15 points are significant but no regression.
        let diff = compute(
            &live(30 << 10, 70 << 10, 1),
            &live(45 << 10, 55 << 10, 1),
            &options,
        )
        .unwrap();
        assert_eq!(
            diff.method,
            Method::Threshold {
                min_change: DEFAULT_MIN_CHANGE,
                maximum: false
            }
        );
        assert_eq!(diff.tests, 0);
        let f = find(&diff, "/work/m.py:1");
        assert_eq!((f.test, f.significant), (None, Significance::Both));
        assert_eq!(find(&diff, "/work/m.py:9").significant, Significance::Both);
        let regressions = diff.regressions(10.0);
        assert_eq!(regressions.len(), 1);
        assert_eq!(regressions[0].change.label.name, "f");
        // Below the threshold: not significant.
        let strict = Options {
            min_change: 20.0,
            ..options.clone()
        };
        let diff = compute(
            &live(30 << 10, 70 << 10, 1),
            &live(45 << 10, 55 << 10, 1),
            &strict,
        )
        .unwrap();
        assert_eq!(diff.significant().count(), 0);
    }
    /// A profile of one run of `python3 app.py`: each (name, samples) a function of
    /// /work/app.py called by nothing and calling nothing (its cumulative samples are its
    /// self samples), each sample one tick.
    fn leaves(file: &str, pid: u32, samples: &[(String, u64)]) -> Profile {
        let mut text = format!("P=(HEX ID={pid:x} N=(python3 app.py) T=0.004000)\n");
        for (index, (name, count)) in samples.iter().enumerate() {
            let (source, counter) = if index == 0 {
                ("F0=(/work/app.py)", "=(PERF_TICKS)")
            } else {
                ("F0", "")
            };
            text.push_str(&format!(
                "C1 FN{index:x}=({source}+{:x} N=({name}))+0 V0{counter}:({count:x},{count:x},1)\n",
                index + 1
            ));
        }
        load(file, text.as_bytes())
    }

    /// Runs in which f has `f` samples and g0…g39 have 20 each.
    fn runs_of_f(f: &[u64]) -> Vec<Profile> {
        f.iter()
            .enumerate()
            .map(|(run, &f)| {
                let mut samples = vec![("f".to_string(), f)];
                samples.extend((0..40).map(|g| (format!("g{g}"), 20)));
                leaves(&format!("run{run}.txt"), run as u32 + 1, &samples)
            })
            .collect()
    }

    /// The profiles of `runs` merged: their dumps read one after the other.
    fn merged(f: &[u64]) -> Profile {
        let mut profile = Profile::new();
        for (run, &f) in f.iter().enumerate() {
            let mut text = format!("P=(HEX ID={:x} N=(python3 app.py) T=0.004000)\n", run + 1);
            text.push_str(&format!(
                "C1 FN0=(F0=(/work/app.py)+1 N=(f))+0 V0=(PERF_TICKS):({f:x},{f:x},1)\n"
            ));
            for g in 0..40 {
                text.push_str(&format!(
                    "C1 FN{:x}=(F0+{:x} N=(g{g}))+0 V0:(14,14,1)\n",
                    g + 1,
                    g + 2
                ));
            }
            crate::parse::load_reader(&mut profile, &format!("run{run}.txt"), text.as_bytes())
                .unwrap();
        }
        profile
    }

    #[test]
    fn a_function_that_varies_between_runs_has_its_z_shrunk() {
        // f: 100, 200, 300 samples in the base runs (of 900, 1000, 1100), 250, 350, 450 in
        // the new ones: its share grew from 600/3000 = 20 % to 1050/3450 = 30.4 %, but it
        // moves by ±80 samples between runs of the same side where binomial noise is ±13.
        // g0…g39: 20 samples in every run (shares that move with the totals only).
        let (base_f, new_f) = ([100, 200, 300], [250, 350, 450]);
        let (base_each, new_each) = (runs_of_f(&base_f), runs_of_f(&new_f));
        let samples = |runs: &[Profile]| -> Vec<RunSamples> {
            runs.iter()
                .map(|run| RunSamples::of(run, "PERF_TICKS").unwrap())
                .collect()
        };
        let (base_samples, new_samples) = (samples(&base_each), samples(&new_each));
        assert_eq!(base_samples[1].total, 1000);
        assert_eq!(
            base_samples[1].functions[&("f".to_string(), "/work/app.py".to_string())],
            (200, 200)
        );
        let (base_merged, new_merged) = (merged(&base_f), merged(&new_f));
        let runs = |merged, each| Runs { merged, each };
        let diff = compute_runs(
            runs(&base_merged, &base_samples),
            runs(&new_merged, &new_samples),
            &Options::default(),
        )
        .unwrap();
        assert_eq!((diff.base.runs, diff.new.runs), (3, 3));
        let f = find(&diff, "/work/app.py:1");
        let test = f.test.unwrap();
        // The z of the samples alone: p̂ = 1650/6450, z = (1050/3450 − 0.2) / √(p̂ (1 − p̂)
        // (1/3000 + 1/3450)) = 9.57.
        let pooled: f64 = 1650.0 / 6450.0;
        let sampling_z = (1050.0 / 3450.0 - 0.2)
            / (pooled * (1.0 - pooled) * (1.0 / 3000.0 + 1.0 / 3450.0)).sqrt();
        assert!((test.sampling_z - sampling_z).abs() < 1e-9, "{test:?}");
        // Its own X²: base p̂ 0.2, expected 180, 200, 220, variances n p̂ (1 − p̂) 144,
        // 160, 176: 80²/144 + 0 + 80²/176; new p̂ = 1050/3450, the same way.
        let chi_square = |f: [f64; 3], n: [f64; 3]| {
            let p = f.iter().sum::<f64>() / n.iter().sum::<f64>();
            (0..3)
                .map(|r| (f[r] - n[r] * p).powi(2) / (n[r] * p * (1.0 - p)))
                .sum::<f64>()
        };
        let own = chi_square([100.0, 200.0, 300.0], [900.0, 1000.0, 1100.0])
            + chi_square([250.0, 350.0, 450.0], [1050.0, 1150.0, 1250.0]);
        let measured = test.own.unwrap();
        assert!((measured.chi_square - own).abs() < 1e-9, "{measured:?}");
        assert_eq!(measured.df, 4);
        // The g's X² are all but 0: the pooled dispersion (f's two tests, 8 df, and the
        // g's 80 tests, 320 df) is below 1, so 1 is used: f's moderated dispersion is
        // (d0 × 1 + X²) / (d0 + 4), its z 9.57 / √that (2.3 for d0 = 3, 3.1 for 10): not
        // significant (Bonferroni over 82 tests: |z| ≥ 3.84).
        let Noise::Measured {
            pooled: Some(pooled),
            dispersion,
            tests,
            df,
            prior_weight,
        } = diff.noise
        else {
            panic!("{:?}", diff.noise)
        };
        assert!(pooled < 1.0, "{pooled}");
        let d0 = DEFAULT_PRIOR_WEIGHT;
        assert_eq!((dispersion, tests, df, prior_weight), (1.0, 82, 328, d0));
        let moderated = (d0 + own) / (d0 + 4.0);
        assert!((test.dispersion - moderated).abs() < 1e-9, "{test:?}");
        assert!(
            (test.z - sampling_z / moderated.sqrt()).abs() < 1e-9,
            "{test:?}"
        );
        assert!(test.z > 2.0 && test.z < 3.84, "{test:?}");
        assert_eq!(f.cumulative_test, f.test);
        assert_eq!(f.significant, Significance::No);
        // The g's keep their z: their shares fell from 60/3000 to 60/3450 (z −0.77), and
        // nothing varies between runs beyond the totals' change.
        for change in diff
            .changes
            .iter()
            .filter(|c| c.label.name.starts_with('g'))
        {
            let test = change.test.unwrap();
            assert_eq!(
                (test.dispersion, test.z),
                (1.0, test.sampling_z),
                "{change:?}"
            );
            assert!((test.z + 0.7734).abs() < 1e-4, "{change:?}");
        }

        // The test line says what was measured.
        let text = rendered(&diff, 3, write_text);
        let line = text.lines().find(|l| l.starts_with("test: ")).unwrap();
        assert_eq!(
            line,
            format!(
                "test: two-proportion z-test (pooled) on each function's self samples and on its cumulative samples (n = all samples of each side's runs merged), run-to-run variation measured between 3 base runs and 3 new runs: typical dispersion {pooled:.2} (of 82 tests, 328 df; at least 1 is used), each function's own moderated by it (prior weight {d0}), Bonferroni correction over 82 tests of 41 functions, alpha 0.01: significant when |z| >= 3.84"
            )
        );
        // The markdown gives each listed function's dispersions.
        let markdown = rendered(&diff, 1, write_markdown);
        assert!(
            markdown.contains(&format!(
                "| own dispersion | dispersion used | own cum dispersion | cum dispersion used |\n|---|--:|--:|--:|--:|\n| `f` (`/work/app.py:1`) | {:.2} (4 df) | {moderated:.2} | {:.2} (4 df) | {moderated:.2} |\n",
                own / 4.0,
                own / 4.0
            )),
            "{markdown}"
        );

        // With one run per side (the first of each), nothing is measured per function:
        // the dispersion comes from the z-scores, here below 1 (1 used), and f is
        // significant on its samples alone (100/900 → 250/1050).
        let diff = compute(&base_each[0], &new_each[0], &Options::default()).unwrap();
        assert!(
            matches!(diff.noise, Noise::Estimated { inflation: Some(l), tests: 82, dispersion } if l < 1.0 && dispersion == 1.0),
            "{:?}",
            diff.noise
        );
        assert_eq!(
            find(&diff, "/work/app.py:1").significant,
            Significance::Both
        );
    }

    #[test]
    fn one_run_per_side_divides_every_z_by_the_root_of_lambda() {
        // 20 functions of 50 samples each in base; in new, ten of 35 and ten of 65: every
        // share moves by ±1.5 points, several times its binomial noise. z = +1.4408 (50 →
        // 65 of 1000) or −1.6628 (50 → 35), twice each (self and cumulative): the median
        // of the 40 z² is (1.4408² + 1.6628²) / 2 = 2.4205, λ = 2.4205 / 0.45494 = 5.3204.
        let base: Vec<(String, u64)> = (0..20).map(|i| (format!("h{i}"), 50)).collect();
        let new: Vec<(String, u64)> = (0..20)
            .map(|i| (format!("h{i}"), if i % 2 == 0 { 35 } else { 65 }))
            .collect();
        let diff = compute(
            &leaves("base.txt", 1, &base),
            &leaves("new.txt", 2, &new),
            &Options::default(),
        )
        .unwrap();
        let z = |x1: f64, x2: f64| {
            let p = (x1 + x2) / 2000.0;
            (x2 / 1000.0 - x1 / 1000.0) / (p * (1.0 - p) * 0.002).sqrt()
        };
        let (up, down) = (z(50.0, 65.0), z(50.0, 35.0));
        let lambda = (up * up + down * down) / 2.0 / MEDIAN_CHI_SQUARE_1;
        assert!((lambda - 5.3204).abs() < 1e-3, "{lambda}");
        let Noise::Estimated {
            inflation: Some(inflation),
            tests: 40,
            dispersion,
        } = diff.noise
        else {
            panic!("{:?}", diff.noise)
        };
        assert!((inflation - lambda).abs() < 1e-9 && dispersion == inflation);
        for change in &diff.changes {
            for test in [change.test, change.cumulative_test] {
                let test = test.unwrap();
                assert_eq!(test.own, None);
                assert_eq!(test.dispersion, lambda);
                assert!((test.z - test.sampling_z / lambda.sqrt()).abs() < 1e-12);
                assert!(test.sampling_z == up || test.sampling_z == down, "{test:?}");
            }
            assert_eq!(change.significant, Significance::No, "{change:?}");
        }
        let text = rendered(&diff, 1, write_text);
        assert!(
            text.contains("\ntest: two-proportion z-test (pooled) on each function's self samples and on its cumulative samples (n = all samples of each profile), one run per side: run-to-run variation estimated from the comparison's own z-scores (dispersion 5.32, the median z² of the 40 tests with at least 10 samples on each side / 0.455); give several runs per side (--diff B1 B2 B3 -- N1 N2 N3) to measure each function's own, Bonferroni correction over 40 tests of 20 functions, alpha 0.01: significant when |z| >= 3.66\n"),
            "{text}"
        );
        // No table of dispersions in markdown: they are all the same.
        let markdown = rendered(&diff, 1, write_markdown);
        assert!(!markdown.contains("own dispersion"));

        // Too few tests with 10 samples on each side (f and g of the first test: 2 of 6):
        // sampling noise only, and the line says why.
        let diff = compute(
            &load("base.txt", BASE),
            &load("new.txt", NEW),
            &Options::default(),
        )
        .unwrap();
        assert_eq!(
            diff.noise,
            Noise::Estimated {
                inflation: None,
                tests: 4,
                dispersion: 1.0
            }
        );
        assert!(method(&diff).contains(", one run per side: too few tests to estimate run-to-run variation from the comparison's own z-scores (4 tests with at least 10 samples on each side, 10 needed), sampling noise only; give several runs per side (--diff B1 B2 B3 -- N1 N2 N3) to measure each function's own, Bonferroni correction over 6 tests"), "{}", method(&diff));
    }
}
