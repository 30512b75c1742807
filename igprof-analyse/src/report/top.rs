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
//! For tick counters, seconds = amount × T (the tick period of the `P=` line); percents
//! are of the counter's total amount over the whole profile.

use std::io::{self, Write};

use super::{find_counter, header_line, Unit};
use crate::error::Error;
use crate::profile::{FunctionId, NodeId, Profile, Values};
use crate::symbol::Label;

/// Which column sorts the rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// Self amount descending, then cumulative descending, then name.
    #[default]
    SelfAmount,
    /// Cumulative amount descending, then self descending, then name.
    Cumulative,
}

/// What to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The counter, e.g. `PERF_TICKS` ([`super::DEFAULT_COUNTER`]).
    pub counter: String,
    /// How many rows to keep; 0 keeps them all.
    pub limit: usize,
    /// The sort order.
    pub order: Order,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            counter: super::DEFAULT_COUNTER.to_string(),
            limit: 20,
            order: Order::SelfAmount,
        }
    }
}

/// One function's line of the report. Amounts are in the counter's unit (ticks for
/// `PERF_TICKS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The function.
    pub function: FunctionId,
    /// How it is shown.
    pub label: Label,
    /// The amount in the function itself.
    pub self_amount: i64,
    /// The amount in the function and everything it called, recursion counted once.
    pub cumulative: i64,
}

/// The computed report.
#[derive(Debug, Clone, PartialEq)]
pub struct Top {
    /// The counter's name.
    pub counter: String,
    /// What its amounts measure.
    pub unit: Unit,
    /// The counter's total over the profile: samples (or calls) and amount.
    pub total: Values,
    /// Seconds per tick (of the first dump; all merged dumps have the same).
    pub tick_period: f64,
    /// The rows, sorted and cut to the limit; functions with neither self nor
    /// cumulative amount are left out.
    pub rows: Vec<Row>,
}

/// Computes the report on `profile`.
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`. A profile
/// without any counter gives an empty report.
pub fn compute(profile: &Profile, options: &Options) -> Result<Top, Error> {
    let tick_period = profile
        .sources
        .first()
        .map_or(0.0, |source| source.tick_period);
    let unit = Unit::of(&options.counter);
    let Some(counter) = find_counter(profile, &options.counter)? else {
        return Ok(Top {
            counter: options.counter.clone(),
            unit,
            total: Values::default(),
            tick_period,
            rows: Vec::new(),
        });
    };

    let functions = profile.functions().len();
    let nodes = profile.nodes();
    let mut self_amounts = vec![0i64; functions];
    for node in nodes {
        let slot = &mut self_amounts[node.function as usize];
        *slot = slot.saturating_add(node.value(counter).amount);
    }

    // Depth-first walk keeping, per function, how many of the current node's ancestors
    // (itself included) are that function: a subtree counts only for the outermost one.
    let subtrees = profile.subtree_amounts(counter);
    let children = profile.children();
    let mut active = vec![0u32; functions];
    let mut cumulative = vec![0i64; functions];
    let mut stack: Vec<(NodeId, bool)> = children
        .roots()
        .iter()
        .rev()
        .map(|&root| (root, false))
        .collect();
    while let Some((node, leaving)) = stack.pop() {
        let function = nodes[node as usize].function as usize;
        if leaving {
            active[function] -= 1;
            continue;
        }
        if active[function] == 0 {
            cumulative[function] = cumulative[function].saturating_add(subtrees[node as usize]);
        }
        active[function] += 1;
        stack.push((node, true));
        stack.extend(children.of(node).iter().rev().map(|&child| (child, false)));
    }

    let mut rows: Vec<Row> = (0..functions)
        .filter(|&index| self_amounts[index] != 0 || cumulative[index] != 0)
        .map(|index| {
            // Function counts fit in u32: Profile refuses more.
            let function = index as FunctionId;
            Row {
                function,
                label: Label::of(profile, profile.function(function)),
                self_amount: self_amounts[index],
                cumulative: cumulative[index],
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        let amounts = match options.order {
            Order::SelfAmount => b
                .self_amount
                .cmp(&a.self_amount)
                .then(b.cumulative.cmp(&a.cumulative)),
            Order::Cumulative => b
                .cumulative
                .cmp(&a.cumulative)
                .then(b.self_amount.cmp(&a.self_amount)),
        };
        amounts
            .then_with(|| a.label.name.cmp(&b.label.name))
            .then_with(|| a.label.location.cmp(&b.label.location))
    });
    if options.limit != 0 {
        rows.truncate(options.limit);
    }
    Ok(Top {
        counter: options.counter.clone(),
        unit,
        total: profile.total(counter),
        tick_period,
        rows,
    })
}

/// `part` as a percentage of `total`, 0 when the total is 0.
fn percent(part: i64, total: i64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 / total as f64 * 100.0
    }
}

/// Writes the report as text:
///
/// ```text
/// pyigprof-analyse: <file(s)>: <program> (pid <pid>)
/// PERF_TICKS: 617 samples, 2468 ticks of 4.000 ms = 9.872 s
///    self %    self s    cum %     cum s  function  (file)
///     41.23     1.016    41.23     1.016  deflate_slow  (/usr/lib/x86_64-linux-gnu/libz.so.1)
/// ```
///
/// Percents have 2 decimals, seconds 3; columns widen to fit their values. Counters
/// that are not ticks show raw amounts in `self` and `cum` columns instead of seconds.
///
/// # Errors
/// Those of `out`.
pub fn write(profile: &Profile, top: &Top, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "{}", header_line(profile))?;
    let total = top.total.amount;
    let (amount_labels, amount_cell): ([&str; 2], Box<dyn Fn(i64) -> String>) = match top.unit {
        Unit::Ticks => {
            writeln!(
                out,
                "{}: {} samples, {} ticks of {:.3} ms = {:.3} s",
                top.counter,
                top.total.count,
                total,
                top.tick_period * 1000.0,
                total as f64 * top.tick_period
            )?;
            let period = top.tick_period;
            (
                ["self s", "cum s"],
                Box::new(move |amount| format!("{:.3}", amount as f64 * period)),
            )
        }
        Unit::Amount => {
            writeln!(
                out,
                "{}: {} calls, {} total",
                top.counter, top.total.count, total
            )?;
            (["self", "cum"], Box::new(|amount: i64| amount.to_string()))
        }
    };

    let labels = ["self %", amount_labels[0], "cum %", amount_labels[1]];
    let cells: Vec<[String; 4]> = top
        .rows
        .iter()
        .map(|row| {
            [
                format!("{:.2}", percent(row.self_amount, total)),
                amount_cell(row.self_amount),
                format!("{:.2}", percent(row.cumulative, total)),
                amount_cell(row.cumulative),
            ]
        })
        .collect();
    let mut widths = [9usize, 10, 9, 10];
    for (column, width) in widths.iter_mut().enumerate() {
        let longest = cells.iter().map(|row| row[column].len()).max().unwrap_or(0);
        *width = (*width).max(longest + 2).max(labels[column].len() + 2);
    }
    writeln!(
        out,
        "{:>w0$}{:>w1$}{:>w2$}{:>w3$}  function  (file)",
        labels[0],
        labels[1],
        labels[2],
        labels[3],
        w0 = widths[0],
        w1 = widths[1],
        w2 = widths[2],
        w3 = widths[3]
    )?;
    for (row, cell) in top.rows.iter().zip(&cells) {
        writeln!(
            out,
            "{:>w0$}{:>w1$}{:>w2$}{:>w3$}  {}",
            cell[0],
            cell[1],
            cell[2],
            cell[3],
            row.label.line(),
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::load_reader;

    /// A tree with direct recursion (fib calls fib calls fib) and two threads; the CLI
    /// tests (tests/cli.rs) read the same file.
    const RECURSIVE: &[u8] = include_bytes!("../../tests/data/recursive-hex.txt");

    /// The full report of [`RECURSIVE`] read as `rec.txt`, which the CLI tests expect
    /// too.
    const RECURSIVE_TOP: &str = include_str!("../../tests/data/recursive-top.txt");

    fn profile(text: &[u8]) -> Profile {
        let mut profile = Profile::new();
        load_reader(&mut profile, "rec.txt", text).unwrap();
        profile
    }

    fn amounts(top: &Top) -> Vec<(String, i64, i64)> {
        top.rows
            .iter()
            .map(|row| (row.label.name.clone(), row.self_amount, row.cumulative))
            .collect()
    }

    #[test]
    fn self_and_cumulative_with_recursion() {
        let top = compute(&profile(RECURSIVE), &Options::default()).unwrap();
        assert_eq!(
            top.total,
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
        let mut out = Vec::new();
        write(&profile, &top, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), RECURSIVE_TOP);
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
        let mut out = Vec::new();
        write(&profile, &top, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "pyigprof-analyse: rec.txt: true (pid 1)\nPERF_TICKS: 0 samples, 0 ticks of 4.000 ms = 0.000 s\n   self %    self s    cum %     cum s  function  (file)\n"
        );
    }

    #[test]
    fn memory_counters_show_amounts() {
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
        let mut out = Vec::new();
        write(&profile, &top, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\
pyigprof-analyse: rec.txt: app (pid 7)
MEM_TOTAL: 3 calls, 822 total
   self %      self    cum %       cum  function  (file)
    87.83       722    87.83       722  alloc  (app)
    12.17       100   100.00       822  main  (app)
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
        let mut out = Vec::new();
        write(&profile, &top, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
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
