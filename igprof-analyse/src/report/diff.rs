//! The `--diff BASE NEW` report: per function, how its self and cumulative shares of
//! the samples changed between two profiles, and whether each change is larger than
//! sampling noise.
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
//! Only tick counters (`PERF_TICKS`, …) can be compared: other counters (IgProf's
//! `MEM_TOTAL` bytes) are not samples.

use std::collections::HashMap;
use std::io::{self, Write};

use super::{describe, percent, table_line, FunctionAmounts, Measure, Unit, VIEW_NOTE};
use crate::error::Error;
use crate::profile::{FunctionId, Profile};
use crate::stats::{critical_z, two_proportion, Correction};
use crate::symbol::Label;

/// The significance level used when none is given.
pub const DEFAULT_ALPHA: f64 = 0.01;

/// What to compare.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The counter, e.g. `PERF_TICKS`; must be a tick counter.
    pub counter: String,
    /// The significance level α of the corrected tests, 0 < α < 1.
    pub alpha: f64,
    /// The correction for making many tests.
    pub correction: Correction,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            counter: super::DEFAULT_COUNTER.to_string(),
            alpha: DEFAULT_ALPHA,
            correction: Correction::default(),
        }
    }
}

/// One function's values in one profile, in the counter's units.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Amounts {
    /// Samples (signals) in the function itself: the `x` of the self test.
    pub self_samples: i64,
    /// Ticks in the function itself.
    pub self_amount: i64,
    /// Samples (signals) with the function anywhere on the stack, each counted once: the
    /// `x` of the cumulative test.
    pub cumulative_samples: i64,
    /// Ticks of the samples with the function anywhere on the stack.
    pub cumulative: i64,
    /// `self_amount` as a percentage of the profile's total ticks.
    pub self_percent: f64,
    /// `cumulative` as a percentage of the profile's total ticks.
    pub cumulative_percent: f64,
}

/// One test of a function's share: the pooled two-proportion z-test of its samples
/// among all samples of each profile, and its p-value corrected for the number of tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Test {
    /// The standardised difference of the proportions, new minus base (no unit):
    /// positive when the share grew.
    pub z: f64,
    /// The two-sided p-value of `z`, before the correction (probability, 0 to 1).
    pub p: f64,
    /// `p` after the correction for the number of tests (probability, 0 to 1).
    pub p_adjusted: f64,
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
    /// The test of its self samples; `None` when it has none in either profile.
    pub test: Option<Test>,
    /// New cumulative share minus base cumulative share, in percentage points.
    pub cumulative_change: f64,
    /// The test of its cumulative samples; `None` when it has none in either profile or
    /// is on every sample of both.
    pub cumulative_test: Option<Test>,
    /// Which of the two tests has a corrected p-value at most α.
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
    /// The counter and its total.
    pub measure: Measure,
}

/// A computed comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// The base profile.
    pub base: Side,
    /// The new profile.
    pub new: Side,
    /// The significance level.
    pub alpha: f64,
    /// The correction applied.
    pub correction: Correction,
    /// m: the number of tests made, self and cumulative, over which p-values are
    /// corrected.
    pub tests: usize,
    /// For Bonferroni, the |z| from which a change is significant; `None` for
    /// Benjamini–Hochberg, whose threshold depends on all p-values.
    pub critical_z: Option<f64>,
    /// Whether either profile is in the Python view with frames hidden.
    pub python_view: bool,
    /// Every function tested (with at least one test): the significant ones first, each
    /// group by decreasing [`Change::size`], then by name.
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
            significant && change > points && test.is_some_and(|test| test.z > 0.0)
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
    if measure.unit != Unit::Ticks {
        return Err(Error::Report {
            subject,
            message: format!(
                "--diff compares sampled counters (PERF_TICKS or another *_TICKS counter), not {counter}"
            ),
        });
    }
    let Some(id) = id.filter(|_| measure.total.count > 0) else {
        return Err(Error::Report {
            subject,
            message: format!("no samples of {counter} to compare"),
        });
    };
    let amounts = FunctionAmounts::of(profile, id);
    let side = Side {
        description: describe(profile),
        measure,
    };
    Ok((side, amounts))
}

/// A function's amounts in one profile.
fn amounts_of(side: &Side, amounts: &FunctionAmounts, function: Option<FunctionId>) -> Amounts {
    let Some(function) = function else {
        return Amounts::default();
    };
    let values = amounts.self_values[function as usize];
    let cumulative = amounts.cumulative[function as usize];
    let total = side.measure.total.amount;
    Amounts {
        self_samples: values.count,
        self_amount: values.amount,
        cumulative_samples: amounts.cumulative_counts[function as usize],
        cumulative,
        self_percent: percent(values.amount, total),
        cumulative_percent: percent(cumulative, total),
    }
}

/// The z-test of `x1` of `n1` samples against `x2` of `n2`, its p-value not yet
/// corrected.
fn test(x1: i64, n1: u64, x2: i64, n2: u64) -> Test {
    let test = two_proportion(x1.max(0) as u64, n1, x2.max(0) as u64, n2);
    Test {
        z: test.z,
        p: test.p,
        p_adjusted: 1.0,
    }
}

/// Compares `new` with `base`.
///
/// # Errors
/// [`Error::Report`] naming the profile at fault if either has no counter
/// `options.counter`, the counter is not a tick counter, or it has no samples.
pub fn compute(base: &Profile, new: &Profile, options: &Options) -> Result<Diff, Error> {
    let (base_side, base_amounts) = side(base, &options.counter)?;
    let (new_side, new_amounts) = side(new, &options.counter)?;

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

    let (n1, n2) = (
        base_side.measure.total.count as u64,
        new_side.measure.total.count as u64,
    );
    let mut changes: Vec<Change> = pairs
        .iter()
        .map(|&(in_base, in_new)| {
            let label = match (in_new, in_base) {
                (Some(id), _) => Label::of(new, new.function(id)),
                (None, Some(id)) => Label::of(base, base.function(id)),
                (None, None) => unreachable!("every pair has a side"),
            };
            let before = amounts_of(&base_side, &base_amounts, in_base);
            let after = amounts_of(&new_side, &new_amounts, in_new);
            // A function that is only a caller has no share of its own to compare; one on
            // every sample of both profiles has no cumulative share that could change.
            let self_tested = before.self_samples > 0 || after.self_samples > 0;
            let on_every_sample =
                before.cumulative_samples as u64 >= n1 && after.cumulative_samples as u64 >= n2;
            let cumulative_tested =
                (before.cumulative_samples > 0 || after.cumulative_samples > 0) && !on_every_sample;
            Change {
                label,
                base: before,
                new: after,
                change: after.self_percent - before.self_percent,
                test: self_tested.then(|| test(before.self_samples, n1, after.self_samples, n2)),
                cumulative_change: after.cumulative_percent - before.cumulative_percent,
                cumulative_test: cumulative_tested
                    .then(|| test(before.cumulative_samples, n1, after.cumulative_samples, n2)),
                significant: Significance::No,
            }
        })
        .filter(|change| change.test.is_some() || change.cumulative_test.is_some())
        .collect();

    // One correction over every test made, self and cumulative.
    let p: Vec<f64> = changes
        .iter()
        .flat_map(|change| [change.test, change.cumulative_test])
        .flatten()
        .map(|test| test.p)
        .collect();
    let tests = p.len();
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
        alpha: options.alpha,
        correction: options.correction,
        tests,
        critical_z,
        python_view: base.hidden_nodes > 0 || new.hidden_nodes > 0,
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
/// then the cumulative share's, then which is significant.
const HEADINGS: [&str; 15] = [
    "base %",
    "new %",
    "change",
    "base s",
    "new s",
    "z",
    "p (adj.)",
    "base cum %",
    "new cum %",
    "cum change",
    "base cum s",
    "new cum s",
    "cum z",
    "cum p (adj.)",
    "signif.",
];

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

/// The number cells of `change`, as [`HEADINGS`] names them.
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

/// One sentence on the test: `two-proportion z-test (pooled) on each function's self
/// samples and on its cumulative samples (…), Bonferroni correction over 199 tests of 155
/// functions, alpha 0.01`.
fn method(diff: &Diff) -> String {
    format!(
        "two-proportion z-test (pooled) on each function's self samples and on its cumulative samples (n = all samples of each profile), {} correction over {} of {}, alpha {}",
        diff.correction.name(),
        counted(diff.tests, "test"),
        counted(diff.changes.len(), "function"),
        diff.alpha
    )
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
/// cumulative`.
fn changes_in_words(change: &Change, shares: Significance) -> String {
    let (self_points, cumulative_points) = (
        format_points(change.change),
        format_points(change.cumulative_change),
    );
    match shares {
        Significance::No => String::new(),
        Significance::SelfShare => format!("{self_points} points self"),
        Significance::Cumulative => format!("{cumulative_points} points cumulative"),
        Significance::Both if self_points == cumulative_points => {
            format!("{self_points} points self and cumulative")
        }
        Significance::Both => {
            format!("{self_points} points self, {cumulative_points} points cumulative")
        }
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
                    changes_in_words(change, shares)
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
/// base: base.gz: python3 app.py (pid 1): 3754 samples, 3760 ticks of 4.000 ms = 15.040 s
/// new: new.gz: python3 app.py (pid 2): 3744 samples, 3758 ticks of 4.000 ms = 15.032 s
/// test: two-proportion z-test (pooled) on …, Bonferroni correction over 199 tests of 155 functions, alpha 0.01: significant when |z| >= 4.05
///  base %  new %  change …      z  p (adj.)  base cum %  new cum %  cum change …  cum z  cum p (adj.)  signif.  function  (file)
///    6.44   7.56   +1.12 …  +1.98     1.000       30.93      36.77       +5.84 …  +5.33        1.9e-5      cum  python_work (/work/app.py:22)
/// result: 5 significant change(s): python_work (/work/app.py:22) +5.84 points cumulative; …
/// ```
///
/// A test not made (a function with no self samples, or on every sample of both
/// profiles) has `-` as its z and p.
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
    let mut widths: Vec<usize> = HEADINGS.iter().map(|heading| heading.len() + 2).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len() + 2);
        }
    }
    let headings: Vec<String> = HEADINGS.iter().map(|heading| heading.to_string()).collect();
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
/// function.
///
/// # Errors
/// Those of `out`.
pub fn write_markdown(diff: &Diff, output: &Output, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "### {}\n", title(diff, "→"))?;
    writeln!(out, "| profile | files and program | samples | time |")?;
    writeln!(out, "|---|---|--:|--:|")?;
    for (name, side) in [("base", &diff.base), ("new", &diff.new)] {
        let measure = &side.measure;
        writeln!(
            out,
            "| {name} | {} | {} | {:.3} s |",
            code(&side.description),
            measure.total.count,
            measure.seconds(measure.total.amount)
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
    for heading in HEADINGS {
        write!(out, " {heading} |")?;
    }
    write!(out, "\n|---|")?;
    for _ in HEADINGS {
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
}
