//! The `--top` report: the functions with the most self (exclusive) or cumulative
//! (inclusive) cost of one counter.
//!
//! Functions are merged by (name, file): the same function at several offsets or call
//! paths is one row.
//! - *self* of a function: the sum of the counter's amount over the nodes of that
//!   function;
//! - *cumulative* of a function: the sum of the amounts of the subtrees rooted at the
//!   nodes of that function, each sample counted once even if the function recurses
//!   (a node whose ancestor is the same function adds nothing more).
//!
//! For tick counters, seconds = amount × T (the tick period of the `P=` line); memory
//! counters show bytes ([`super::memory`]); percents are of the counter's total amount
//! over the whole profile. Where shares have a sampling error each row gives their 95 %
//! intervals and its self and cumulative samples ([`super::Measure::interval`]).

use std::fmt;

pub use super::write;
use super::{
    paths, ranked, report, sample_columns, CallTree, Column, FunctionAmounts, Item, Keyed,
};
pub use super::{Options, Order};
use crate::error::Error;
use crate::profile::{CounterId, FunctionId, Profile};
use crate::symbol::Label;

/// What a row of the report is about: a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// The function.
    pub function: FunctionId,
    /// How it is shown.
    pub label: Label,
}

impl Item for Function {
    const HEADING: &'static str = "function  (file)";
}

impl fmt::Display for Function {
    /// [`Label::short_line`]: C++ names without their return type, long template
    /// arguments and parameters elided.
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        out.write_str(&self.label.short_line())
    }
}

/// One function's row: its self amount is the amount in the function itself, its
/// cumulative amount that in the function and everything it called, recursion counted
/// once.
pub type Row = super::Row<Function>;

/// The computed report.
pub type Top = super::Report<Function>;

/// Computes the report on `profile`.
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`. A profile
/// without any counter gives an empty report.
pub fn compute(profile: &Profile, options: &Options) -> Result<Top, Error> {
    let mut counter_id: Option<CounterId> = None;
    let mut top = report(profile, options, |counter| {
        counter_id = Some(counter);
        let amounts = FunctionAmounts::of(profile, counter);
        let self_amounts: Vec<i64> = amounts
            .self_values
            .iter()
            .map(|values| values.amount)
            .collect();
        let self_counts: Vec<i64> = amounts
            .self_values
            .iter()
            .map(|values| values.count)
            .collect();
        let item = |index: usize| {
            // Function counts fit in u32: Profile refuses more.
            let function = index as FunctionId;
            Function {
                function,
                label: Label::of(profile, profile.function(function)),
            }
        };
        let keyed = Keyed {
            self_amounts: &self_amounts,
            cumulative: &amounts.cumulative,
            self_counts: &self_counts,
            cumulative_counts: &amounts.cumulative_counts,
        };
        ranked(&keyed, item, options, |a, b| {
            (&a.label.name, &a.label.location).cmp(&(&b.label.name, &b.label.location))
        })
    })?;
    top.columns = columns(profile, &top, counter_id, options);
    Ok(top)
}

/// The columns added to `top` of `counter` (`None`: no counter, no rows): the self and
/// cumulative samples (or allocations, blocks, calls: [`super::Measure::count_noun`])
/// with `--calls` or the intervals ([`sample_columns`]), then the call paths with
/// `--paths`.
fn columns(
    profile: &Profile,
    top: &Top,
    counter: Option<CounterId>,
    options: &Options,
) -> Vec<Column> {
    let mut columns = sample_columns(&top.measure, &top.rows, options.calls);
    if options.paths {
        let paths = counter.map(|counter| paths(profile, &CallTree::of(profile, Some(counter))).0);
        columns.push(Column {
            heading: "paths".to_string(),
            values: paths.map_or_else(Vec::new, |paths| {
                top.rows
                    .iter()
                    .map(|row| paths[row.item.function as usize])
                    .collect()
            }),
        });
    }
    columns
}

#[cfg(test)]
mod tests {
    use super::super::testing::{load, text};
    use super::*;
    use crate::profile::Values;

    /// A tree with direct recursion (fib calls fib calls fib) and two threads; the CLI
    /// tests (tests/cli.rs) read the same file.
    const RECURSIVE: &[u8] = include_bytes!("../../tests/data/recursive-hex.txt");

    /// The full report of [`RECURSIVE`] read as `rec.txt`, which the CLI tests expect
    /// too.
    const RECURSIVE_TOP: &str = include_str!("../../tests/data/recursive-top.txt");

    fn profile(text: &[u8]) -> Profile {
        load("rec.txt", text)
    }

    fn amounts(top: &Top) -> Vec<(String, i64, i64)> {
        top.rows
            .iter()
            .map(|row| (row.item.label.name.clone(), row.self_amount, row.cumulative))
            .collect()
    }

    #[test]
    fn self_and_cumulative_with_recursion() {
        let top = compute(&profile(RECURSIVE), &Options::default()).unwrap();
        assert_eq!(
            top.measure.total,
            Values {
                count: 13,
                amount: 24,
                peak: 8
            }
        );
        assert_eq!(
            amounts(&top),
            vec![
                ("fib".to_string(), 8, 16),
                ("deflate_slow".to_string(), 8, 8),
                ("deflate".to_string(), 4, 4),
                ("foo::bar()".to_string(), 4, 4),
                ("<module>".to_string(), 0, 20),
                ("__libc_start_main".to_string(), 0, 20),
                ("std::rt::lang_start".to_string(), 0, 4),
            ]
        );
    }

    #[test]
    fn cumulative_order_and_limit() {
        let options = Options {
            order: Order::Cumulative,
            limit: 3,
            ..Options::default()
        };
        let top = compute(&profile(RECURSIVE), &options).unwrap();
        assert_eq!(
            amounts(&top),
            vec![
                ("<module>".to_string(), 0, 20),
                ("__libc_start_main".to_string(), 0, 20),
                ("fib".to_string(), 8, 16),
            ]
        );
    }

    #[test]
    fn text_output() {
        let profile = profile(RECURSIVE);
        let top = compute(
            &profile,
            &Options {
                limit: 0,
                ..Options::default()
            },
        )
        .unwrap();
        assert_eq!(text(&profile, &top), RECURSIVE_TOP);
    }

    #[test]
    fn calls_and_paths_columns() {
        let profile = profile(RECURSIVE);
        let options = Options {
            calls: true,
            paths: true,
            limit: 3,
            ..Options::default()
        };
        let top = compute(&profile, &options).unwrap();
        // fib: 2 + 1 + 3 self samples, 10 with fib on the stack, 3 places in the tree.
        // Its self share, 8 ticks of 24 in 6 samples of 13: Wilson's interval of 6 of 13,
        // [23.2 %, 70.9 %], times (1/3) / (6/13) = [16.8 %, 51.2 %]; cumulative, 16 ticks
        // in 10 samples: [49.7 %, 91.8 %] × (2/3) / (10/13) = [43.1 %, 79.6 %].
        assert_eq!(
            text(&profile, &top),
            "\
pyigprof-analyse: rec.txt: python3 rec.py (pid 1234)
PERF_TICKS: 13 samples, 24 ticks of 4.000 ms = 0.096 s; a 10 % share is 2.1-36.1 % (95 %)
   self %    self s    cum %     cum s  self 95% CI   cum 95% CI  self samples  cum samples  paths  function  (file)
    33.33     0.032    66.67     0.064  [16.8-51.2]  [43.1-79.6]             6           10      3  fib (/work/rec.py:10)
    33.33     0.032    33.33     0.032  [13.7-62.4]  [13.7-62.4]             4            4      1  deflate_slow  (/usr/lib/libz.so.1)
    16.67     0.016    16.67     0.016   [3.0-72.2]   [3.0-72.2]             1            1      1  deflate  (/usr/lib/libz.so.1)
"
        );
    }

    #[test]
    fn unknown_counter_lists_the_counters() {
        let options = Options {
            counter: "MEM_LIVE".into(),
            ..Options::default()
        };
        let error = compute(&profile(RECURSIVE), &options).unwrap_err();
        assert_eq!(
            error.to_string(),
            "pyigprof-analyse: rec.txt: no counter MEM_LIVE in the profile; its counters: PERF_TICKS"
        );
    }

    #[test]
    fn profile_without_samples_gives_an_empty_report() {
        let profile =
            profile(b"P=(HEX ID=1 N=(true) T=0.004000)\nC1 FN0=(F0=(/bin/true)+10 N=(main))+0\n");
        let top = compute(&profile, &Options::default()).unwrap();
        assert!(top.rows.is_empty());
        assert_eq!(
            text(&profile, &top),
            "pyigprof-analyse: rec.txt: true (pid 1)\nPERF_TICKS: 0 samples, 0 ticks of 4.000 ms = 0.000 s\n   self %    self s    cum %     cum s  function  (file)\n"
        );
    }

    #[test]
    fn memory_counters_show_bytes() {
        let profile = profile(
            b"P=(ID=7 N=(app) T=0.010000)
C1 FN0=(F0=(app)+100 N=(main))+5 V0=(MEM_TOTAL):(1,100,100)
C2 FN1=(F0+200 N=(alloc))+0 V0:(2,722,700);LK=(0x91441c8,615);LK=(0x91633c0,107)
",
        );
        let options = Options {
            counter: "MEM_TOTAL".into(),
            ..Options::default()
        };
        let top = compute(&profile, &options).unwrap();
        assert_eq!(
            text(&profile, &top),
            "\
pyigprof-analyse: rec.txt: app (pid 7)
MEM_TOTAL: 3 allocations, 822 B allocated
   self %  self bytes    cum %  cum bytes  function  (file)
    87.83       722 B    87.83      722 B  alloc  (app)
    12.17       100 B   100.00      822 B  main  (app)
"
        );
    }

    #[test]
    fn very_deep_recursion_needs_no_deep_stack() {
        // 200000 nested calls of one function: parsing and the walk are iterative.
        let mut dump =
            b"P=(HEX ID=1 N=(deep) T=0.004000)\nC1 FN0=(F0=(/deep.py)+1 N=(f))+0\n".to_vec();
        for depth in 2..=200_000u32 {
            dump.extend_from_slice(format!("C{depth:x} FN0+0\n").as_bytes());
        }
        dump.extend_from_slice(b"C30d41 FN1=(F0+5 N=(g))+0 V0=(PERF_TICKS):(1,2,2)\n");
        let top = compute(&profile(&dump), &Options::default()).unwrap();
        assert_eq!(
            amounts(&top),
            vec![("g".to_string(), 2, 2), ("f".to_string(), 0, 2)]
        );
    }

    #[test]
    fn wide_values_keep_columns_aligned() {
        let profile = profile(b"P=(HEX ID=1 N=(x) T=1.000000)\nC1 FN0=(F0=(/x)+0 N=(f))+0 V0=(PERF_TICKS):(1,5f5e100,1)\nC2 FN1=(F0+1 N=(g))+0 V0:(1,1,1)\n");
        let top = compute(&profile, &Options::default()).unwrap();
        let text = text(&profile, &top);
        let lines: Vec<&str> = text.lines().skip(2).collect();
        // Every column ends at the same position on every line.
        let ends = |line: &str| -> Vec<usize> {
            let mut ends = Vec::new();
            let bytes = line.as_bytes();
            for i in 0..bytes.len() {
                if bytes[i] != b' ' && bytes.get(i + 1) == Some(&b' ') {
                    ends.push(i);
                }
            }
            ends
        };
        let header = ends(lines[0]);
        for line in &lines[1..] {
            let row = ends(line);
            assert_eq!(
                &row[..4],
                &[header[1], header[3], header[5], header[7]],
                "{text}"
            );
        }
        assert!(text.contains("100000000.000"), "{text}");
    }
}
