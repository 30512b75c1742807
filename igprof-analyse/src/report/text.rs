//! The `--text` report, laid out as IgProf's `igprof-analyse --text` (and gprof): two
//! flat profiles, then the call graph.
//!
//! - *Flat profile (cumulative >= 1%)*: the functions by decreasing cumulative amount,
//!   each with its rank `[n]`;
//! - *Flat profile (self >= 0.01%)*: the functions by decreasing self amount;
//! - *Call tree profile (cumulative)*: for each function, by rank, a block with its
//!   callers above it, the function's line (`[rank]`, cumulative percent, total,
//!   self / children), and its callees below it. A caller line gives the amount of the
//!   samples in which that caller called the function directly (the *arc*), as a
//!   percent of the total and `arc / caller's total`; a callee line the arc to that
//!   callee and `arc / callee's total`. Outermost frames have the caller
//!   `<spontaneous>`. Every sample counts once per arc, even where the arc recurs on
//!   its stack.
//!
//! Amounts are seconds for tick counters (amount × T), bytes in IEC units for memory
//! counters ([`super::memory`]), raw amounts otherwise; percents are of the counter's
//! total. Where shares have a sampling error, the flat profiles give each its 95 %
//! interval and samples ([`super::Measure::interval`]).

use std::collections::HashMap;
use std::io::{self, Write};

use super::{
    capitalized, format_interval, paths, percent, write_preamble, Arcs, CallTree, FunctionAmounts,
    Measure, Options,
};
use crate::error::Error;
use crate::profile::{FunctionId, Profile};
use crate::symbol::Label;

/// The name IgProf gives the caller of outermost frames.
pub const SPONTANEOUS: &str = "<spontaneous>";

/// Cumulative share (percent) from which a function is in the first flat profile.
pub const FLAT_CUMULATIVE_MIN: f64 = 1.0;

/// Self share (percent) from which a function is in the second flat profile.
pub const FLAT_SELF_MIN: f64 = 0.01;

/// A direct call between two functions, seen from one of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arc {
    /// The other function (the caller or the callee); `None` for [`SPONTANEOUS`].
    pub other: Option<FunctionId>,
    /// The amount of the samples whose stack has this call, each counted once.
    pub amount: i64,
    /// The number of those samples (allocations or blocks for memory counters).
    pub count: i64,
    /// In how many places of the call tree the call is (IgProf's paths).
    pub paths: i64,
}

/// A function of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The function.
    pub function: FunctionId,
    /// How it is shown.
    pub label: Label,
    /// Its rank, from 1: its place by decreasing cumulative amount.
    pub rank: usize,
    /// Its self amount.
    pub self_amount: i64,
    /// Its cumulative amount (recursion counted once).
    pub cumulative: i64,
    /// Its self samples (allocations or blocks for memory counters).
    pub self_count: i64,
    /// Its cumulative samples (calls), recursion counted once.
    pub cumulative_count: i64,
    /// In how many places of the call tree it is (IgProf's paths).
    pub paths: i64,
    /// Who called it, by increasing amount (the largest next to the function's line).
    pub callers: Vec<Arc>,
    /// What it called, by decreasing amount.
    pub callees: Vec<Arc>,
}

/// The computed report.
#[derive(Debug, Clone, PartialEq)]
pub struct Text {
    /// The counter and its total.
    pub measure: Measure,
    /// The functions with a value, by rank.
    pub entries: Vec<Entry>,
    /// Whether to print the samples (calls) columns (`--calls`).
    pub calls: bool,
    /// Whether to print the paths columns (`--paths`).
    pub paths: bool,
}

/// Computes the report of `options.counter` in `profile` (the limit and order do not
/// apply: IgProf's thresholds do).
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`.
pub fn compute(profile: &Profile, options: &Options) -> Result<Text, Error> {
    let (measure, counter) = Measure::select(profile, &options.counter)?;
    let Some(counter) = counter else {
        return Ok(Text {
            measure,
            entries: Vec::new(),
            calls: options.calls,
            paths: options.paths,
        });
    };
    let amounts = FunctionAmounts::of(profile, counter);
    let arcs = Arcs::of(profile, counter);
    let (function_paths, arc_paths) = paths(profile, &CallTree::of(profile, Some(counter)));

    let mut order: Vec<FunctionId> = (0..profile.functions().len() as FunctionId)
        .filter(|&id| {
            amounts.self_values[id as usize].amount != 0 || amounts.cumulative[id as usize] != 0
        })
        .collect();
    let labels: Vec<Label> = Label::all(profile);
    amounts.rank(&mut order, &labels);
    let mut rank_of: Vec<usize> = vec![0; profile.functions().len()];
    for (position, &id) in order.iter().enumerate() {
        rank_of[id as usize] = position + 1;
    }
    let mut callers: Vec<Vec<Arc>> = vec![Vec::new(); profile.functions().len()];
    let mut callees: Vec<Vec<Arc>> = vec![Vec::new(); profile.functions().len()];
    for (index, &(caller, callee)) in arcs.pairs.iter().enumerate() {
        let amount = arcs.amounts[index];
        if amount == 0 {
            continue;
        }
        let count = arcs.counts[index];
        let paths = arc_paths.get(&(caller, callee)).copied().unwrap_or(0);
        callers[callee as usize].push(Arc {
            other: caller,
            amount,
            count,
            paths,
        });
        if let Some(caller) = caller {
            callees[caller as usize].push(Arc {
                other: Some(callee),
                amount,
                count,
                paths,
            });
        }
    }
    // Ties by rank, spontaneous first.
    let rank = |arc: &Arc| arc.other.map_or(0, |id| rank_of[id as usize]);
    let entries = order
        .iter()
        .map(|&id| {
            let mut up = std::mem::take(&mut callers[id as usize]);
            up.sort_by(|a, b| a.amount.cmp(&b.amount).then_with(|| rank(b).cmp(&rank(a))));
            let mut down = std::mem::take(&mut callees[id as usize]);
            down.sort_by(|a, b| b.amount.cmp(&a.amount).then_with(|| rank(a).cmp(&rank(b))));
            Entry {
                function: id,
                label: labels[id as usize].clone(),
                rank: rank_of[id as usize],
                self_amount: amounts.self_values[id as usize].amount,
                cumulative: amounts.cumulative[id as usize],
                self_count: amounts.self_values[id as usize].count,
                cumulative_count: amounts.cumulative_counts[id as usize],
                paths: function_paths[id as usize],
                callers: up,
                callees: down,
            }
        })
        .collect();
    Ok(Text {
        measure,
        entries,
        calls: options.calls,
        paths: options.paths,
    })
}

/// The heading of the flat profiles' column of 95 % intervals.
const INTERVAL_HEADING: &str = "95% CI";

/// The line between sections.
const RULE: &str = "----------------------------------------------------------------------";

/// Writes `text` (see the module documentation for the layout):
///
/// ```text
/// ----------------------------------------------------------------------
/// Call tree profile (cumulative)
///
/// Rank    % total      Total       Self / Children     Function
///           66.67  .........      0.064 / 0.080          <module> (/work/rec.py:1) [2]
/// [3]       66.67      0.064      0.032 / 0.032        fib (/work/rec.py:10)
///           33.33  .........      0.032 / 0.032          deflate_slow  (/usr/lib/libz.so.1) [4]
/// ```
///
/// With [`Text::calls`] and [`Text::paths`] (IgProf's `--calls` and `--paths`) the flat
/// profiles add a `Samples` (`Allocations` or `Blocks` for memory counters, `Calls` for
/// other counters that are not ticks: [`Measure::count_noun`]) and a `Paths`
/// column: the function's cumulative (first profile) or self (second) samples, and its
/// number of call paths; the call graph adds `Samples / Total` and `Paths / Total`: for
/// the function its cumulative samples and paths, for a caller or callee those of the
/// call, over the other function's.
///
/// Where shares have a sampling error ([`Measure::sample_size`]) the flat profiles add,
/// after the amount, the share's 95 % interval (`95% CI`, [`Measure::interval`]) and the
/// `Samples` column, with or without [`Text::calls`]:
///
/// ```text
/// % total      Total       95% CI  Samples  Function
///   66.67      0.064  [43.1-79.6]       10  fib (/work/rec.py:10) [3]
/// ```
///
/// # Errors
/// Those of `out`.
pub fn write(profile: &Profile, text: &Text, out: &mut dyn Write) -> io::Result<()> {
    let measure = &text.measure;
    write_preamble(profile, measure, out)?;
    let total = measure.total.amount;
    let total_count = measure.total.count;
    let calls_heading = capitalized(measure.count_noun());
    let calls_heading = calls_heading.as_str();
    // The flat profiles show the 95 % interval of each share and its samples where
    // shares have a sampling error; the call graph shows samples with --calls only.
    let intervals = measure.sample_size().is_some();
    let flat_samples = text.calls || intervals;
    let interval_of = |value: i64, count: i64| format_interval(measure.interval(value, count));
    let interval_width = if intervals {
        text.entries
            .iter()
            .flat_map(|entry| {
                [
                    (entry.cumulative, entry.cumulative_count),
                    (entry.self_amount, entry.self_count),
                ]
            })
            .map(|(value, count)| interval_of(value, count).len())
            .chain([INTERVAL_HEADING.len()])
            .max()
            .unwrap_or(0)
    } else {
        0
    };
    // Widths of the optional columns; 0 when not shown.
    let count_width = if flat_samples {
        text.entries
            .iter()
            .map(|entry| entry.cumulative_count.to_string().len())
            .chain([total_count.to_string().len(), calls_heading.len()])
            .max()
            .unwrap_or(0)
    } else {
        0
    };
    let paths_width = if text.paths {
        text.entries
            .iter()
            .map(|entry| entry.paths.to_string().len())
            .chain(["Paths".len()])
            .max()
            .unwrap_or(0)
    } else {
        0
    };
    // One value per optional column: "  <value>" right-aligned.
    let flat_extra = |value: i64, count: i64, paths: i64| -> String {
        let mut cells = String::new();
        if intervals {
            cells.push_str(&format!("  {:>interval_width$}", interval_of(value, count)));
        }
        if flat_samples {
            cells.push_str(&format!("  {count:>count_width$}"));
        }
        if text.paths {
            cells.push_str(&format!("  {paths:>paths_width$}"));
        }
        cells
    };
    // A fraction per optional column: "  <part> / <whole>" (no "/" without a whole).
    let fraction = |(part, whole): (String, String), width: usize| -> String {
        let slash = if whole.is_empty() { ' ' } else { '/' };
        format!("  {part:>width$} {slash} {whole:<width$}")
    };
    let fraction_extra = |count: (String, String), paths: (String, String)| -> String {
        let mut cells = String::new();
        if text.calls {
            cells.push_str(&fraction(count, count_width));
        }
        if text.paths {
            cells.push_str(&fraction(paths, paths_width));
        }
        cells
    };
    let amount = |value: i64| measure.format_amount(value);
    // Every amount printed fits: for bytes a smaller amount can be longer (1000.0 KiB
    // against 1.0 MiB).
    let width = text
        .entries
        .iter()
        .flat_map(|entry| {
            let arcs = entry.callers.iter().chain(&entry.callees);
            [
                entry.cumulative,
                entry.self_amount,
                entry.cumulative - entry.self_amount,
            ]
            .into_iter()
            .chain(arcs.map(|arc| arc.amount))
        })
        .map(|value| amount(value).len())
        .chain([amount(total).len(), 9])
        .max()
        .unwrap_or(9);
    let entry_of: HashMap<FunctionId, &Entry> = text
        .entries
        .iter()
        .map(|entry| (entry.function, entry))
        .collect();
    // The other function of an arc: its name, cumulative amount, samples and paths.
    let name_of = |other: Option<FunctionId>| -> (String, i64, i64, i64) {
        match other.and_then(|id| entry_of.get(&id)) {
            Some(entry) => (
                format!("{} [{}]", entry.label.short_line(), entry.rank),
                entry.cumulative,
                entry.cumulative_count,
                entry.paths,
            ),
            None => (SPONTANEOUS.to_string(), total, total_count, 1),
        }
    };

    // The two flat profiles: every function with its cumulative amount, then (hottest
    // first) every function with self time, each above its own share threshold.
    let mut headings = String::new();
    if intervals {
        headings.push_str(&format!("  {INTERVAL_HEADING:>interval_width$}"));
    }
    if flat_samples {
        headings.push_str(&format!("  {calls_heading:>count_width$}"));
    }
    if text.paths {
        headings.push_str(&format!("  {:>paths_width$}", "Paths"));
    }
    let flat = |out: &mut dyn Write,
                title: &str,
                column: &str,
                rows: &[(&Entry, i64, i64)]|
     -> io::Result<()> {
        writeln!(out, "\n{RULE}\n{title}\n")?;
        writeln!(
            out,
            "{:>7}  {:>width$}{headings}  Function",
            "% total", column
        )?;
        for &(entry, value, count) in rows {
            writeln!(
                out,
                "{:>7.2}  {:>width$}{}  {} [{}]",
                percent(value, total),
                amount(value),
                flat_extra(value, count, entry.paths),
                entry.label.short_line(),
                entry.rank
            )?;
        }
        Ok(())
    };
    let by_cumulative: Vec<(&Entry, i64, i64)> = text
        .entries
        .iter()
        .map(|entry| (entry, entry.cumulative, entry.cumulative_count))
        .filter(|&(_, value, _)| percent(value, total) >= FLAT_CUMULATIVE_MIN)
        .collect();
    flat(
        out,
        &format!("Flat profile (cumulative >= {FLAT_CUMULATIVE_MIN}%)"),
        "Total",
        &by_cumulative,
    )?;
    let mut by_self: Vec<(&Entry, i64, i64)> = text
        .entries
        .iter()
        .map(|entry| (entry, entry.self_amount, entry.self_count))
        .filter(|&(_, value, _)| value > 0 && percent(value, total) >= FLAT_SELF_MIN)
        .collect();
    by_self.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.rank.cmp(&b.0.rank)));
    flat(
        out,
        &format!("Flat profile (self >= {FLAT_SELF_MIN}%)"),
        "Self",
        &by_self,
    )?;

    writeln!(out, "\n{RULE}\nCall tree profile (cumulative)\n")?;
    let dots = ".".repeat(width);
    writeln!(
        out,
        "{:<8}{:>7}  {:>width$}  {:>width$} / {:<width$}{}  Function",
        "Rank",
        "% total",
        "Total",
        "Self",
        "Children",
        fraction_extra(
            (calls_heading.to_string(), "Total".to_string()),
            ("Paths".to_string(), "Total".to_string())
        )
    )?;
    let arc_line = |out: &mut dyn Write, arc: &Arc| -> io::Result<()> {
        let (name, other_total, other_count, other_paths) = name_of(arc.other);
        writeln!(
            out,
            "{:<8}{:>7.2}  {dots}  {:>width$} / {:<width$}{}    {name}",
            "",
            percent(arc.amount, total),
            amount(arc.amount),
            amount(other_total),
            fraction_extra(
                (arc.count.to_string(), other_count.to_string()),
                (arc.paths.to_string(), other_paths.to_string())
            )
        )
    };
    for entry in &text.entries {
        writeln!(out, "{}", "- ".repeat(35).trim_end())?;
        for arc in &entry.callers {
            arc_line(out, arc)?;
        }
        writeln!(
            out,
            "{:<8}{:>7.2}  {:>width$}  {:>width$} / {:<width$}{}  {}",
            format!("[{}]", entry.rank),
            percent(entry.cumulative, total),
            amount(entry.cumulative),
            amount(entry.self_amount),
            amount(entry.cumulative - entry.self_amount),
            fraction_extra(
                (entry.cumulative_count.to_string(), String::new()),
                (entry.paths.to_string(), String::new())
            ),
            entry.label.short_line()
        )?;
        for arc in &entry.callees {
            arc_line(out, arc)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::load;
    use super::*;

    const RECURSIVE: &[u8] = include_bytes!("../../tests/data/recursive-hex.txt");

    /// Each entry as `[rank] name self cumulative | callers | callees`, arcs as
    /// `name:amount`.
    fn summary(text: &Text) -> Vec<String> {
        let name = |other: Option<FunctionId>| {
            other.map_or(SPONTANEOUS.to_string(), |id| {
                text.entries
                    .iter()
                    .find(|e| e.function == id)
                    .unwrap()
                    .label
                    .name
                    .clone()
            })
        };
        let arcs = |arcs: &[Arc]| {
            arcs.iter()
                .map(|arc| format!("{}:{}", name(arc.other), arc.amount))
                .collect::<Vec<_>>()
                .join(",")
        };
        text.entries
            .iter()
            .map(|e| {
                format!(
                    "[{}] {} {} {} | {} | {}",
                    e.rank,
                    e.label.name,
                    e.self_amount,
                    e.cumulative,
                    arcs(&e.callers),
                    arcs(&e.callees)
                )
            })
            .collect()
    }

    /// The `--text` report of `profile` with `options`.
    fn written(profile: &Profile, options: &Options) -> String {
        let text = compute(profile, options).unwrap();
        let mut out = Vec::new();
        write(profile, &text, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The lines of the `n`-th block between the call graph's dashed rules.
    fn call_graph_entry(out: &str, n: usize) -> Vec<&str> {
        let rule = format!("{}\n", "- ".repeat(35).trim_end());
        out.split(rule.as_str()).nth(n).unwrap().lines().collect()
    }

    #[test]
    fn callers_and_callees_with_recursion() {
        let text = compute(&load("rec.txt", RECURSIVE), &Options::default()).unwrap();
        // By hand (ticks): <module> → fib: every fib sample, 16; fib → fib: the samples
        // at depth ≥ 2 of the recursion, 1 + 4 + 8 = 13, counted once although the arc is
        // twice on the deepest stacks; fib → deflate_slow 8.
        assert_eq!(
            summary(&text),
            [
                "[1] <module> 0 20 | __libc_start_main:20 | fib:16,foo::bar():4",
                "[2] __libc_start_main 0 20 | <spontaneous>:20 | <module>:20",
                "[3] fib 8 16 | fib:13,<module>:16 | fib:13,deflate_slow:8",
                "[4] deflate_slow 8 8 | fib:8 | ",
                "[5] deflate 4 4 | std::rt::lang_start:4 | ",
                "[6] foo::bar() 4 4 | <module>:4 | ",
                "[7] std::rt::lang_start 0 4 | <spontaneous>:4 | deflate:4",
            ]
        );
    }

    #[test]
    fn calls_and_paths_columns() {
        let profile = load("rec.txt", RECURSIVE);
        let options = Options {
            calls: true,
            paths: true,
            ..Options::default()
        };
        let out = written(&profile, &options);
        // fib: 10 samples with fib on the stack, 3 call paths; fib → fib: 8 samples on 2
        // paths, over fib's 10 and 3; <module> → fib: all of fib's, on 1 path of 3.
        let block = call_graph_entry(&out, 3);
        assert_eq!(
            block,
            [
                "          54.17  .........      0.052 / 0.064            8 / 10           2 / 3        fib (/work/rec.py:10) [3]",
                "          66.67  .........      0.064 / 0.080           10 / 12           1 / 1        <module> (/work/rec.py:1) [1]",
                "[3]       66.67      0.064      0.032 / 0.032           10                3          fib (/work/rec.py:10)",
                "          54.17  .........      0.052 / 0.064            8 / 10           2 / 3        fib (/work/rec.py:10) [3]",
                "          33.33  .........      0.032 / 0.032            4 / 4            1 / 1        deflate_slow  (/usr/lib/libz.so.1) [4]",
            ]
        );
        assert!(out.contains("Flat profile (cumulative >= 1%)\n\n% total      Total       95% CI  Samples  Paths  Function\n  83.33      0.080  [60.2-89.0]       12      1  <module> (/work/rec.py:1) [1]\n"), "{out}");
        assert!(
            out.contains(
                "\n  33.33      0.032  [16.8-51.2]        6      3  fib (/work/rec.py:10) [3]\n"
            ),
            "{out}"
        );
    }

    #[test]
    fn layout() {
        let profile = load("rec.txt", RECURSIVE);
        let out = written(&profile, &Options::default());
        let block = call_graph_entry(&out, 3);
        assert_eq!(
            block,
            [
                "          54.17  .........      0.052 / 0.064        fib (/work/rec.py:10) [3]",
                "          66.67  .........      0.064 / 0.080        <module> (/work/rec.py:1) [1]",
                "[3]       66.67      0.064      0.032 / 0.032      fib (/work/rec.py:10)",
                "          54.17  .........      0.052 / 0.064        fib (/work/rec.py:10) [3]",
                "          33.33  .........      0.032 / 0.032        deflate_slow  (/usr/lib/libz.so.1) [4]",
            ]
        );
        assert!(out.contains(
            "\nFlat profile (self >= 0.01%)\n\n% total       Self       95% CI  Samples  Function\n  33.33      0.032  [16.8-51.2]        6  fib (/work/rec.py:10) [3]\n  33.33      0.032  [13.7-62.4]        4  deflate_slow  (/usr/lib/libz.so.1) [4]\n"
        ), "{out}");
    }
}
