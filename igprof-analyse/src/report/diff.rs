//! The `--diff BASE NEW` report: per function, how its share of the samples changed
//! between two profiles, and whether the change is larger than sampling noise.
//!
//! Functions are matched by name and file (a Python function that moved to another line
//! of the same file is the same function). For each function with self samples in
//! either profile:
//! - its self and cumulative shares (percent of each profile's total amount) and
//!   seconds in both, and the *change*: new self share minus base self share, in
//!   percentage points;
//! - the pooled two-proportion z-test ([`crate::stats::two_proportion`]) of its self
//!   *samples* among all samples of each profile. n is the number of samples (the
//!   first number of `V:(samples,ticks,peak)`, i.e. signals), not ticks: a signal that
//!   stands for several ticks (timer expirations merged by the kernel, counted in the
//!   ticks) is still one observation of where the program was, so counting its ticks
//!   would overstate the evidence. Shares and changes are of ticks (CPU time); without
//!   overruns both are the same;
//! - p-values corrected over the m functions tested ([`Correction`]: Bonferroni by
//!   default, or Benjamini–Hochberg), significant when at most α (0.01 by default).
//!
//! Only tick counters (`PERF_TICKS`, …) can be compared: other counters (IgProf's
//! `MEM_TOTAL` bytes) are not samples.

use std::collections::HashMap;
use std::io::{self, Write};

use super::{describe, percent, table_line, FunctionAmounts, Measure, Unit, VIEW_NOTE};
use crate::error::Error;
use crate::profile::{FunctionId, Profile};
use crate::stats::{critical_z, two_proportion, Correction, ZTest};
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
    /// The correction for testing every function.
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
    /// Samples (signals) in the function itself: the `x` of the test.
    pub self_samples: i64,
    /// Ticks in the function itself.
    pub self_amount: i64,
    /// Ticks of the samples with the function anywhere on the stack.
    pub cumulative: i64,
    /// `self_amount` as a percentage of the profile's total ticks.
    pub self_percent: f64,
    /// `cumulative` as a percentage of the profile's total ticks.
    pub cumulative_percent: f64,
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
    /// The z-test of its self samples.
    pub test: ZTest,
    /// The p-value after the correction for the number of tests.
    pub p_adjusted: f64,
    /// Whether `p_adjusted` ≤ α.
    pub significant: bool,
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
    /// m: the number of functions tested (those with self samples in either profile).
    pub tested: usize,
    /// For Bonferroni, the |z| from which a change is significant; `None` for
    /// Benjamini–Hochberg, whose threshold depends on all p-values.
    pub critical_z: Option<f64>,
    /// Whether either profile is in the Python view with frames hidden.
    pub python_view: bool,
    /// Every function tested: the significant changes first, each group by decreasing
    /// size of the change, then by name.
    pub changes: Vec<Change>,
}

impl Diff {
    /// The significant changes.
    pub fn significant(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(|change| change.significant)
    }

    /// The functions whose self share grew by more than `points` percentage points,
    /// significantly: what `--fail-on-regression` fails on.
    pub fn regressions(&self, points: f64) -> Vec<&Change> {
        self.significant()
            .filter(|change| change.change > points && change.test.z > 0.0)
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
        cumulative,
        self_percent: percent(values.amount, total),
        cumulative_percent: percent(cumulative, total),
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
            let test = two_proportion(
                before.self_samples.max(0) as u64,
                n1,
                after.self_samples.max(0) as u64,
                n2,
            );
            Change {
                label,
                base: before,
                new: after,
                change: after.self_percent - before.self_percent,
                test,
                p_adjusted: 1.0,
                significant: false,
            }
        })
        // Only functions with self samples are tested; the others (callers only) have
        // no share of their own to compare.
        .filter(|change| change.base.self_samples > 0 || change.new.self_samples > 0)
        .collect();
    let p: Vec<f64> = changes.iter().map(|change| change.test.p).collect();
    for (change, adjusted) in changes.iter_mut().zip(options.correction.adjust(&p)) {
        change.p_adjusted = adjusted;
        change.significant = adjusted <= options.alpha;
    }
    changes.sort_by(|a, b| {
        b.significant
            .cmp(&a.significant)
            .then_with(|| b.change.abs().total_cmp(&a.change.abs()))
            .then_with(|| {
                (&a.label.name, &a.label.location).cmp(&(&b.label.name, &b.label.location))
            })
    });
    let tested = changes.len();
    let critical_z = match options.correction {
        Correction::Bonferroni if tested > 0 => Some(critical_z(options.alpha / tested as f64)),
        _ => None,
    };
    Ok(Diff {
        base: base_side,
        new: new_side,
        alpha: options.alpha,
        correction: options.correction,
        tested,
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
    /// `--fail-on-regression`: the growth in points above which a significant change is
    /// a regression, if asked.
    pub fail_on: Option<f64>,
}

/// The column headings of the table, before the function.
const HEADINGS: [&str; 12] = [
    "base %",
    "new %",
    "change",
    "base s",
    "new s",
    "base cum %",
    "new cum %",
    "base cum s",
    "new cum s",
    "z",
    "p (adj.)",
    "signif.",
];

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

/// The number cells of `change`, as [`HEADINGS`] names them.
fn cells(diff: &Diff, change: &Change) -> Vec<String> {
    let (base, new) = (&diff.base.measure, &diff.new.measure);
    vec![
        format!("{:.2}", change.base.self_percent),
        format!("{:.2}", change.new.self_percent),
        format_points(change.change),
        base.format_amount(change.base.self_amount),
        new.format_amount(change.new.self_amount),
        format!("{:.2}", change.base.cumulative_percent),
        format!("{:.2}", change.new.cumulative_percent),
        base.format_amount(change.base.cumulative),
        new.format_amount(change.new.cumulative),
        format!("{:+.2}", change.test.z),
        format_p(change.p_adjusted),
        if change.significant { "yes" } else { "no" }.to_string(),
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

/// One sentence on the test: `two-proportion z-test (pooled) on self samples,
/// Bonferroni correction over 40 functions, alpha 0.01`.
fn method(diff: &Diff) -> String {
    format!(
        "two-proportion z-test (pooled) on each function's self samples (n = all samples of each profile), {} correction over {} functions, alpha {}",
        diff.correction.name(),
        diff.tested,
        diff.alpha
    )
}

/// The verdict, as one line of text: the regressions when `fail_on` is given, the
/// significant changes otherwise.
fn verdict(diff: &Diff, output: &Output, name: impl Fn(&Label) -> String) -> String {
    let list = |changes: Vec<&Change>| -> String {
        changes
            .iter()
            .map(|change| {
                format!(
                    "{} {} points",
                    name(&change.label),
                    format_points(change.change)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let significant: Vec<&Change> = diff.significant().collect();
    match output.fail_on {
        Some(points) => {
            let regressions = diff.regressions(points);
            if regressions.is_empty() {
                format!(
                    "OK: no function's self share grew significantly by more than {points:.2} points ({} significant changes)",
                    significant.len()
                )
            } else {
                format!(
                    "REGRESSION: {} function(s) grew significantly by more than {points:.2} points: {}",
                    regressions.len(),
                    list(regressions)
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

/// Writes `diff` as plain text for a terminal or a CI log:
///
/// ```text
/// pyigprof-analyse: PERF_TICKS self share per function, base -> new
/// base: base.gz: python3 app.py (pid 1): 3754 samples, 3760 ticks of 4.000 ms = 15.040 s
/// new: new.gz: python3 app.py (pid 2): 3744 samples, 3758 ticks of 4.000 ms = 15.032 s
/// test: two-proportion z-test (pooled) on …, Bonferroni correction over 33 functions, alpha 0.01: significant when |z| >= 3.62
///  base %  new %  change  base s …       z  p (adj.)  signif.  function  (file)
///   30.93  36.72   +5.79   4.652 …   +5.33   3.2e-6      yes  python_work (/work/app.py:22)
/// result: 2 significant change(s): python_work (/work/app.py:22) +5.79 points, …
/// ```
///
/// # Errors
/// Those of `out`.
pub fn write_text(diff: &Diff, output: &Output, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "{}: {} self share per function, base -> new",
        crate::error::PROGRAM,
        diff.base.measure.counter
    )?;
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
        writeln!(out, "{}", table_line(row, &widths, &change.label.line()))?;
    }
    if diff.changes.len() > rows.len() {
        writeln!(
            out,
            "({} more functions without significant change; --top=0 lists them all)",
            diff.changes.len() - rows.len()
        )?;
    }
    writeln!(out, "result: {}", verdict(diff, output, Label::line))?;
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

/// How a function is named in markdown: its name as code, then where it is.
fn markdown_name(label: &Label) -> String {
    format!("{} ({})", code(&label.name), code(&label.location))
}

/// Writes `diff` as markdown for a pull-request comment: a heading, the two profiles,
/// the method, the verdict in bold, and the table of [`write_text`] with one row per
/// function.
///
/// # Errors
/// Those of `out`.
pub fn write_markdown(diff: &Diff, output: &Output, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "### {}: {} self share per function, base → new\n",
        crate::error::PROGRAM,
        diff.base.measure.counter
    )?;
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
    /// with 45 samples, g 50, and a g of another file with 5.
    const BASE: &[u8] = b"P=(HEX ID=1 N=(python3 app.py) T=0.004000)
C1 FN0=(F0=(/work/app.py)+a N=(f))+0 V0=(PERF_TICKS):(1e,1e,1)
C1 FN1=(F1=(/work/lib.py)+1 N=(g))+0 V0:(46,46,1)
";
    const NEW: &[u8] = b"P=(HEX ID=2 N=(python3 app.py) T=0.004000)
C1 FN0=(F0=(/work/app.py)+c N=(f))+0 V0=(PERF_TICKS):(2d,2d,1)
C1 FN1=(F1=(/work/lib.py)+1 N=(g))+0 V0:(32,32,1)
C1 FN2=(F2=(/work/other.py)+1 N=(g))+0 V0:(5,5,1)
";

    #[test]
    fn functions_match_by_name_and_file() {
        let diff = compute(
            &load("base.txt", BASE),
            &load("new.txt", NEW),
            &Options::default(),
        )
        .unwrap();
        assert_eq!(diff.tested, 3);
        let find = |location: &str| {
            diff.changes
                .iter()
                .find(|change| change.label.location.starts_with(location))
                .unwrap()
        };
        // f moved from line 10 to 12: still one function, named as in the new profile.
        let f = find("/work/app.py");
        assert_eq!(f.label.location, "/work/app.py:12");
        assert_eq!((f.base.self_samples, f.new.self_samples), (30, 45));
        // 30/100 → 45/100: z = 0.15 / √(0.375 × 0.625 × 0.02) = 2.19089, p = 0.0284597
        // (see stats), Bonferroni over 3: 0.0853792.
        assert!((f.test.z - 2.1908902300206647).abs() < 1e-12);
        assert!((f.p_adjusted - 3.0 * 0.02845973691631057).abs() < 1e-7);
        assert!(!f.significant);
        assert!((f.change - 15.0).abs() < 1e-9);
        let other = find("/work/other.py");
        assert_eq!((other.base.self_samples, other.new.self_samples), (0, 5));
        assert_eq!(other.base.self_percent, 0.0);
        assert!(diff.regressions(0.0).is_empty());
        // At α = 0.1, f's growth is significant.
        let lenient = Options {
            alpha: 0.1,
            ..Options::default()
        };
        let diff = compute(&load("base.txt", BASE), &load("new.txt", NEW), &lenient).unwrap();
        let names: Vec<&str> = diff
            .regressions(10.0)
            .iter()
            .map(|change| change.label.location.as_str())
            .collect();
        assert_eq!(names, ["/work/app.py:12"]);
        assert!(diff.regressions(15.0).is_empty());
    }
}
