//! The `--tree` report: the call tree ([`CallTree`]), indented, with each node's
//! cumulative and self share and amount: where the time went, path by path.
//!
//! A node is a function at one place of the tree (its callers up to the outermost
//! frame); its cumulative amount is its own plus its callees'. Children are listed by
//! decreasing cumulative amount. Each share has its 95 % interval and samples where it
//! has a sampling error ([`super::Measure::interval`]). Percents are of the counter's total; for tick counters,
//! seconds = amount × T; memory counters show bytes (`cum bytes`, `self bytes`:
//! [`super::memory`]), event counters events (`cum events`, `self events`:
//! [`super::events`]).

use std::io::{self, Write};

use super::{
    cumulative_counts, format_interval, interval_heading, percent, table_line, write_preamble,
    CallTree, Measure, Options, Unit,
};
use crate::error::Error;
use crate::profile::Profile;
use crate::symbol::Label;

/// Levels of nesting shown as indentation; deeper nodes (deep recursion) are indented as
/// much and say their depth instead, so that lines stay short.
pub const MAX_INDENT: usize = 40;

/// The computed report.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// The counter and its total.
    pub measure: Measure,
    /// The tree.
    pub calls: CallTree,
}

/// Computes the report on `profile` (`options.counter`; the limit and order do not
/// apply).
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`. A profile
/// without any counter gives an empty tree.
pub fn compute(profile: &Profile, options: &Options) -> Result<Tree, Error> {
    let (measure, counter) = Measure::select(profile, &options.counter)?;
    Ok(Tree {
        measure,
        calls: CallTree::of(profile, counter),
    })
}

/// Writes `tree` as text: the preamble of every report, then one line per node,
/// outermost first, each callee below its caller and indented two more spaces:
///
/// ```text
///     cum %     cum s   self %    self s   cum 95% CI  self 95% CI  cum samples  self samples  function
///     83.33     0.080     0.00     0.000  [60.2-89.0]   [0.0-22.8]           12             0  __libc_start_main  (/usr/lib/libc.so.6)
///     83.33     0.080     0.00     0.000  [60.2-89.0]   [0.0-22.8]           12             0    <module> (/work/rec.py:1)
///     66.67     0.064    12.50     0.012  [43.1-79.6]   [3.5-34.3]           10             2      fib (/work/rec.py:10)
/// ```
///
/// The 95 % intervals of the shares ([`Measure::interval`]) and the samples (cumulative:
/// the node's and its descendants') are there where shares have a sampling error
/// ([`Measure::sample_size`]): not for exact memory profiles, maxima, counters of calls.
///
/// Beyond [`MAX_INDENT`] levels the name is preceded by `[depth N] ` (1 for an
/// outermost frame, as `C<depth>` in the dump).
///
/// # Errors
/// Those of `out`.
pub fn write(profile: &Profile, tree: &Tree, out: &mut dyn Write) -> io::Result<()> {
    let measure = &tree.measure;
    write_preamble(profile, measure, out)?;
    let total = measure.total.amount;
    let intervals = measure.sample_size().is_some();
    let mut labels = vec![
        "cum %".to_string(),
        measure.heading("cum"),
        "self %".to_string(),
        measure.heading("self"),
    ];
    if intervals {
        let noun = measure.count_noun();
        labels.extend([
            interval_heading("cum"),
            interval_heading("self"),
            format!("cum {noun}"),
            format!("self {noun}"),
        ]);
    }
    // Nodes without any of the counter (a memory profile's nodes with allocations but
    // nothing live, a cpu,mem profile's allocation sites in a CPU report) are left out,
    // with their callees (which have none either), as IgProf leaves them out. So are a
    // time counter's nodes whose samples weigh no tick (a sample's time since the one
    // before, rounded at random, is 0 ticks one time in eight at the default spread): a
    // row of 0.000 s and 3 samples said nothing but looked like an error (issue 58).
    let order: Vec<_> = tree
        .calls
        .preorder()
        .into_iter()
        .filter(|&id| {
            let node = &tree.calls.nodes[id as usize];
            node.cumulative != 0 || (node.self_values.count != 0 && measure.unit != Unit::Ticks)
        })
        .collect();
    let counts = cumulative_counts(&tree.calls);
    let cells: Vec<Vec<String>> = order
        .iter()
        .map(|&id| {
            let node = &tree.calls.nodes[id as usize];
            let mut cells = vec![
                format!("{:.2}", percent(node.cumulative, total)),
                measure.format_amount(node.cumulative),
                format!("{:.2}", percent(node.self_values.amount, total)),
                measure.format_amount(node.self_values.amount),
            ];
            if intervals {
                cells.extend([
                    format_interval(measure.interval(node.cumulative, counts[id as usize])),
                    format_interval(
                        measure.interval(node.self_values.amount, node.self_values.count),
                    ),
                    counts[id as usize].to_string(),
                    node.self_values.count.to_string(),
                ]);
            }
            cells
        })
        .collect();
    let mut widths = vec![9usize, 10, 9, 10];
    widths.resize(labels.len(), 0);
    for (column, width) in widths.iter_mut().enumerate() {
        let longest = cells.iter().map(|row| row[column].len()).max().unwrap_or(0);
        *width = (*width).max(longest + 2).max(labels[column].len() + 2);
    }
    writeln!(out, "{}", table_line(&labels, &widths, "function"))?;
    let mut names: Vec<Option<String>> = vec![None; profile.functions().len()];
    for (&id, cell) in order.iter().zip(&cells) {
        let node = &tree.calls.nodes[id as usize];
        let name = names[node.function as usize].get_or_insert_with(|| {
            Label::of(profile, profile.function(node.function)).short_line()
        });
        let indent = "  ".repeat(node.depth.min(MAX_INDENT));
        let text = if node.depth > MAX_INDENT {
            // Depths as the dump counts them: 1 for an outermost frame.
            format!("{indent}[depth {}] {name}", node.depth + 1)
        } else {
            format!("{indent}{name}")
        };
        writeln!(out, "{}", table_line(cell, &widths, &text))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::load;
    use super::*;

    const RECURSIVE: &[u8] = include_bytes!("../../tests/data/recursive-hex.txt");

    fn text(profile: &Profile) -> String {
        let tree = compute(profile, &Options::default()).unwrap();
        let mut out = Vec::new();
        write(profile, &tree, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn nodes_without_the_counter_are_left_out() {
        // `temp` allocated (MEM_TOTAL) but keeps nothing (MEM_LIVE 0).
        let profile = load(
            "m.txt",
            b"P=(HEX ID=1 N=(p) T=0.01)
C1 FN0=(F0=(/a.py)+1 N=(main))+0
C2 FN1=(F0+5 N=(keep))+0 V0=(MEM_TOTAL):(1,64,64) V1=(MEM_LIVE):(1,64,64)
C2 FN2=(F0+9 N=(temp))+0 V0:(5,500,500) V1:(0,0,100)
C3 FN3=(F0+12 N=(inner))+0 V0:(1,10,10) V1:(0,0,10)
",
        );
        let text = |counter: &str| {
            let options = Options {
                counter: counter.to_string(),
                ..Options::default()
            };
            let tree = compute(&profile, &options).unwrap();
            let mut out = Vec::new();
            write(&profile, &tree, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let live = text("MEM_LIVE");
        assert!(
            live.contains("keep") && !live.contains("temp") && !live.contains("inner"),
            "{live}"
        );
        let total = text("MEM_TOTAL");
        assert!(total.contains("temp") && total.contains("inner"), "{total}");
    }

    #[test]
    fn samples_that_weigh_no_tick_make_no_row() {
        // `Balloc`'s three samples weighed 0 ticks (a sample's time rounded at random):
        // no row of 0.000 s (issue 58); its caller's samples still count them.
        let profile = load(
            "z.txt",
            b"P=(HEX ID=1 N=(p) T=0.004)
C1 FN0=(F0=(/a.py)+1 N=(main))+0 V0=(PERF_TICKS):(2,5,5)
C2 FN1=(F0+5 N=(work))+0 V0:(4,6,6)
C2 FN2=(F1=(/usr/lib/libpython3.12.so)+9 N=(Balloc))+0 V0:(3,0,0)
",
        );
        let text = text(&profile);
        assert!(text.contains("work") && !text.contains("Balloc"), "{text}");
        assert!(text.contains("PERF_TICKS: 9 samples, 11 ticks"), "{text}");
    }

    #[test]
    fn recursive_tree() {
        // By hand (ticks): libc → <module> → fib+2 (3) → fib+3 (1) → fib+2 (4) →
        // deflate_slow (8); libc → <module> → foo::bar (4); lang_start → deflate (4).
        // Total 24 ticks of 4 ms.
        assert_eq!(
            text(&load("rec.txt", RECURSIVE)),
            "\
pyigprof-analyse: rec.txt: python3 rec.py (pid 1234)
PERF_TICKS: 13 samples, 24 ticks of 4.000 ms = 0.096 s; a 10 % share is 2.1-36.1 % (95 %)
    cum %     cum s   self %    self s   cum 95% CI  self 95% CI  cum samples  self samples  function
    83.33     0.080     0.00     0.000  [60.2-89.0]   [0.0-22.8]           12             0  __libc_start_main  (/usr/lib/libc.so.6)
    83.33     0.080     0.00     0.000  [60.2-89.0]   [0.0-22.8]           12             0    <module> (/work/rec.py:1)
    66.67     0.064    12.50     0.012  [43.1-79.6]   [3.5-34.3]           10             2      fib (/work/rec.py:10)
    54.17     0.052     4.17     0.004  [31.3-72.4]   [0.7-18.0]            8             1        fib (/work/rec.py:10)
    50.00     0.048    16.67     0.016  [27.1-71.3]   [5.9-36.3]            7             3          fib (/work/rec.py:10)
    33.33     0.032    33.33     0.032  [13.7-62.4]  [13.7-62.4]            4             4            deflate_slow  (/usr/lib/libz.so.1)
    16.67     0.016    16.67     0.016   [4.7-45.8]   [4.7-45.8]            2             2      foo::bar()  (/usr/lib/libc.so.6)
    16.67     0.016     0.00     0.000   [3.0-72.2]   [0.0-22.8]            1             0  std::rt::lang_start  (/work/target/app)
    16.67     0.016    16.67     0.016   [3.0-72.2]   [3.0-72.2]            1             1    deflate  (/usr/lib/libz.so.1)
"
        );
    }

    #[test]
    fn self_amounts_sum_to_the_total_and_offsets_merge() {
        // fib is at two offsets (+2 and +3) under the same caller in the second thread:
        // one node of the tree.
        let profile = load(
            "t.txt",
            b"P=(HEX ID=1 N=(x) T=0.010000)
C1 FN0=(F0=(/x.py)+1 N=(<module>))+1
C2 FN1=(F0+5 N=(f))+1 V0=(PERF_TICKS):(1,2,2)
C2 FN1+2 V0:(1,3,3)
C2 FN2=(F0+9 N=(g))+0
C1 FN3=(F0+20 N=(h))+0 V0:(1,1,1)
",
        );
        let tree = compute(&profile, &Options::default()).unwrap();
        // g has no value: not in the tree.
        assert_eq!(tree.calls.nodes.len(), 3);
        let sum: i64 = tree.calls.nodes.iter().map(|n| n.self_values.amount).sum();
        assert_eq!(sum, tree.measure.total.amount);
        assert_eq!(
            text(&profile),
            "\
pyigprof-analyse: t.txt: x (pid 1)
PERF_TICKS: 3 samples, 6 ticks of 10.000 ms = 0.060 s; a 10 % share is 0.7-64.2 % (95 %)
    cum %     cum s   self %    self s    cum 95% CI   self 95% CI  cum samples  self samples  function
    83.33     0.050     0.00     0.000  [26.0-100.0]    [0.0-56.1]            2             0  <module> (/x.py:1)
    83.33     0.050    83.33     0.050  [26.0-100.0]  [26.0-100.0]            2             2    f (/x.py:5)
    16.67     0.010    16.67     0.010    [3.1-39.6]    [3.1-39.6]            1             1  h (/x.py:32)
"
        );
    }

    #[test]
    fn deep_trees_stay_readable() {
        let mut dump =
            b"P=(HEX ID=1 N=(deep) T=0.004000)\nC1 FN0=(F0=(/deep.py)+1 N=(f))+0\n".to_vec();
        for depth in 2..=50u32 {
            dump.extend_from_slice(format!("C{depth:x} FN0+0\n").as_bytes());
        }
        dump.extend_from_slice(b"C33 FN1=(F0+5 N=(g))+0 V0=(PERF_TICKS):(1,1,1)\n");
        let text = text(&load("deep.txt", &dump));
        let last = text.lines().last().unwrap();
        assert_eq!(
            last,
            format!(
                "   100.00     0.004   100.00     0.004  [20.7-100.0]  [20.7-100.0]            1             1  {}[depth 51] g (/deep.py:5)",
                "  ".repeat(MAX_INDENT)
            )
        );
    }

    #[test]
    fn unknown_counter_is_an_error() {
        let options = Options {
            counter: "MEM_LIVE".into(),
            ..Options::default()
        };
        assert_eq!(
            compute(&load("rec.txt", RECURSIVE), &options)
                .unwrap_err()
                .to_string(),
            "pyigprof-analyse: rec.txt: no counter MEM_LIVE in the profile; its counters: PERF_TICKS"
        );
    }
}
