//! The `--lines` report: the lines of Python code with the most self (exclusive) or
//! cumulative (inclusive) cost of one counter, to answer "which line of my code is
//! slow".
//!
//! A Python frame executes line `start + offset` of its file (docs/dump-format.md, "What
//! a function is"); rows are per line `file:line`, whatever the call path, merging the
//! functions seen on it (a generator expression and the function running it can share a
//! line).
//! - *self* of a line: the sum of the counter's amount over the nodes whose innermost
//!   *Python* frame (the node itself, or its nearest Python ancestor) executes that line:
//!   a sample's time goes to the line the innermost Python function was running,
//!   including time in the native code it called. Samples with no Python frame at all
//!   (an interpreter's start-up, a native thread) are in no row, but in the total.
//! - *cumulative* of a line: the sum of the amounts of the samples with the line
//!   anywhere on their stack, each sample counted once even if the line is on it
//!   several times (recursion).
//!
//! For tick counters, seconds = amount × T; percents are of the counter's total amount
//! over the whole profile, as in [`super::top`], with their 95 % intervals and the
//! rows' samples (counted as the amounts are) where shares have a sampling error.

use std::collections::HashMap;
use std::fmt;

pub use super::write;
use super::{cumulative_once, ranked, report, sample_columns, subtree_counts, Item, Keyed};
pub use super::{Options, Order};
use crate::error::Error;
use crate::profile::{Combine, FileId, FunctionId, Profile};

/// What a row of the report is about: a line of Python code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The Python source file (`co_filename`).
    pub file: String,
    /// The line number in it.
    pub line: i64,
    /// The Python functions seen executing the line: the one with the most self amount
    /// on it first, then by name.
    pub functions: Vec<String>,
}

impl Item for Line {
    const HEADING: &'static str = "line  (function)";
}

impl fmt::Display for Line {
    /// `file:line  (function[, function…])`.
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let functions = self.functions.join(", ");
        write!(out, "{}:{}  ({functions})", self.file, self.line)
    }
}

/// One line's row: its self amount is that of the samples whose innermost Python frame
/// executes the line, its cumulative amount that of the samples with the line anywhere
/// on their stack.
pub type Row = super::Row<Line>;

/// The computed report.
pub type Lines = super::Report<Line>;

/// A distinct line of Python code seen in the profile.
struct Seen {
    file: FileId,
    line: i64,
    /// The functions seen on it, each with its self amount there.
    functions: Vec<(FunctionId, i64)>,
}

/// Computes the report on `profile`.
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`. A profile
/// without any counter gives an empty report.
pub fn compute(profile: &Profile, options: &Options) -> Result<Lines, Error> {
    let mut lines = report(profile, options, |counter| {
        let nodes = profile.nodes();
        let mut index: HashMap<(FileId, i64), u32> = HashMap::new();
        let mut seen: Vec<Seen> = Vec::new();
        // Per node: the line it executes if it is a Python frame (an index into `seen`),
        // and the innermost Python frame of its stack, as (line, function).
        let mut line_of: Vec<Option<u32>> = Vec::with_capacity(nodes.len());
        let mut innermost: Vec<Option<(u32, FunctionId)>> = Vec::with_capacity(nodes.len());
        let mut self_amounts: Vec<i64> = Vec::new();
        let mut self_counts: Vec<i64> = Vec::new();
        // Parents come before their children, so one forward pass sees every parent
        // first.
        for node in nodes {
            let function = profile.function(node.function);
            let own = if profile.is_python_code(function.file) {
                let key = (function.file, function.start.saturating_add(node.offset));
                // Lines are fewer than nodes, whose count fits in u32.
                let next = seen.len() as u32;
                let line = *index.entry(key).or_insert_with(|| {
                    seen.push(Seen {
                        file: key.0,
                        line: key.1,
                        functions: Vec::new(),
                    });
                    self_amounts.push(0);
                    self_counts.push(0);
                    next
                });
                let functions = &mut seen[line as usize].functions;
                if !functions.iter().any(|&(id, _)| id == node.function) {
                    functions.push((node.function, 0));
                }
                Some((line, node.function))
            } else {
                None
            };
            line_of.push(own.map(|(line, _)| line));
            let inner = own.or_else(|| node.parent.and_then(|parent| innermost[parent as usize]));
            innermost.push(inner);
            let values = node.value(counter);
            let amount = values.amount;
            if let Some((line, _)) = inner {
                let line = line as usize;
                self_counts[line] = self_counts[line].saturating_add(values.count);
            }
            if let Some((line, function)) = inner.filter(|_| amount != 0) {
                let line = line as usize;
                self_amounts[line] = self_amounts[line].saturating_add(amount);
                let functions = &mut seen[line].functions;
                if let Some(slot) = functions.iter_mut().find(|(id, _)| *id == function) {
                    slot.1 = slot.1.saturating_add(amount);
                }
            }
        }
        let cumulative = cumulative_once(
            profile,
            &profile.subtree_amounts(counter),
            &line_of,
            seen.len(),
            profile.combine(counter),
        );
        let cumulative_counts = cumulative_once(
            profile,
            &subtree_counts(profile, counter),
            &line_of,
            seen.len(),
            Combine::Sum,
        );

        let name = |id: FunctionId| &profile.function(id).name;
        let item = |line: usize| {
            let seen = &mut seen[line];
            seen.functions
                .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| name(a.0).cmp(name(b.0))));
            Line {
                file: profile.file(seen.file).to_string(),
                line: seen.line,
                functions: seen
                    .functions
                    .iter()
                    .map(|&(id, _)| name(id).clone())
                    .collect(),
            }
        };
        let keyed = Keyed {
            self_amounts: &self_amounts,
            cumulative: &cumulative,
            self_counts: &self_counts,
            cumulative_counts: &cumulative_counts,
        };
        ranked(&keyed, item, options, |a, b| {
            (&a.file, a.line).cmp(&(&b.file, b.line))
        })
    })?;
    lines.columns = sample_columns(&lines.measure, &lines.rows, options.calls);
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{load, text};
    use super::*;
    use crate::profile::Values;

    /// `python3 app.py`: recursion on one line and across lines, Python calling native
    /// code, a generator expression sharing its caller's line, `exec` code (`<string>`),
    /// a script without an extension run through runpy with a native callback into a
    /// lambda, and samples without any Python frame. The CLI tests (tests/cli.rs) read
    /// the same file.
    const LINES: &[u8] = include_bytes!("../../tests/data/lines-hex.txt");

    /// The full report of [`LINES`] read as `lines.txt`, which the CLI tests expect too.
    const LINES_REPORT: &str = include_str!("../../tests/data/lines-report.txt");

    /// The report on `dump` (read as `lines.txt`) with `options`.
    fn report(dump: &[u8], options: &Options) -> Lines {
        compute(&load("lines.txt", dump), options).unwrap()
    }

    /// Each row as `<text> <self> <cumulative>`.
    fn rows(lines: &Lines) -> Vec<String> {
        let row = |row: &Row| format!("{} {} {}", row.item, row.self_amount, row.cumulative);
        lines.rows.iter().map(row).collect()
    }

    fn all() -> Options {
        Options {
            limit: 0,
            ..Options::default()
        }
    }

    /// By hand, in ticks (the total is 33 ticks in 18 samples):
    /// - app.py:12 (walk, first line 0xa = 10, offset 2) runs twice nested: self 2 + 1;
    ///   cumulative is the outer node's subtree only, 2+1+3+6+2 = 14;
    /// - app.py:15 (walk+5): self 3, plus deflate's 6 and crc32's 2 below it (native
    ///   code takes the line of the innermost Python frame) = 11 = cumulative;
    /// - app.py:40 (`<module>`+0x27 = 1+39): builtin_sum's 1 and the `<genexpr>` (first
    ///   line 0x28 = 40, offset 0) 4: self 5, cumulative 5, not 5+4; the generator
    ///   expression, with more self, is named first;
    /// - `<string>`:3: 2 / 2; app.py:50 (`<module>` running exec): 0 / 2;
    /// - /work/bin/tool is Python for its `<module>`: tool:4 (helper) 2 + list_sort's 1
    ///   = 3, cumulative 3+1+3 = 7; tool:5 (the lambda called back by list_sort) 1 + 3
    ///   = 4 / 4; tool:7, runpy.py:88 (0x56 + 2) and app.py:60: 0 / 7;
    /// - app.py:30: 0 / 14. The 1 tick in __libc_start_main alone and the 4 of the
    ///   native thread have no Python frame: in no row.
    #[test]
    fn self_and_cumulative_per_line() {
        let lines = report(LINES, &all());
        assert_eq!(
            lines.measure.total,
            Values {
                count: 18,
                amount: 33,
                peak: 6
            }
        );
        assert_eq!(
            rows(&lines),
            [
                "/work/app.py:15  (walk) 11 11",
                "/work/app.py:40  (<genexpr>, <module>) 5 5",
                "/work/bin/tool:5  (helper.<locals>.<lambda>) 4 4",
                "/work/app.py:12  (walk) 3 14",
                "/work/bin/tool:4  (helper) 3 7",
                "<string>:3  (<module>) 2 2",
                "/work/app.py:30  (<module>) 0 14",
                "/usr/lib/python3.12/runpy.py:88  (_run_code) 0 7",
                "/work/app.py:60  (<module>) 0 7",
                "/work/bin/tool:7  (<module>) 0 7",
                "/work/app.py:50  (<module>) 0 2",
            ]
        );
        let self_total: i64 = lines.rows.iter().map(|row| row.self_amount).sum();
        assert_eq!(self_total, 33 - 1 - 4);
    }

    #[test]
    fn orders_and_limits() {
        let cases: [(Order, usize, &[&str]); 2] = [
            (
                Order::SelfAmount,
                2,
                &[
                    "/work/app.py:15  (walk) 11 11",
                    "/work/app.py:40  (<genexpr>, <module>) 5 5",
                ],
            ),
            (
                Order::Cumulative,
                4,
                &[
                    "/work/app.py:12  (walk) 3 14",
                    "/work/app.py:30  (<module>) 0 14",
                    "/work/app.py:15  (walk) 11 11",
                    "/work/bin/tool:4  (helper) 3 7",
                ],
            ),
        ];
        for (order, limit, expected) in cases {
            let options = Options {
                order,
                limit,
                ..Options::default()
            };
            assert_eq!(rows(&report(LINES, &options)), expected, "{order:?}");
        }
    }

    #[test]
    fn text_output() {
        // In the Python view, as the command shows it by default.
        let profile = crate::view::python(&load("lines.txt", LINES));
        let lines = compute(&profile, &all()).unwrap();
        assert_eq!(text(&profile, &lines), LINES_REPORT);
    }

    #[test]
    fn python_view_changes_no_line() {
        // Hiding the interpreter's plumbing (PyObject_Vectorcall, PyEval_EvalCode here)
        // moves no sample to another line; its work (builtin_sum, builtin_exec,
        // list_sort, PyObject_RichCompare) is shown.
        let profile = load("lines.txt", LINES);
        let view = crate::view::python(&profile);
        assert_eq!(view.hidden_nodes, 2);
        let names: Vec<&str> = view.functions().iter().map(|f| f.name.as_str()).collect();
        assert!(
            names.contains(&"builtin_sum") && names.contains(&"list_sort"),
            "{names:?}"
        );
        assert!(!names.contains(&"PyObject_Vectorcall"), "{names:?}");
        assert_eq!(
            rows(&compute(&view, &all()).unwrap()),
            rows(&compute(&profile, &all()).unwrap())
        );
    }

    #[test]
    fn native_profile_has_no_lines() {
        let profile = load(
            "ls.txt",
            include_bytes!("../../tests/data/igprof-ls-decimal.txt"),
        );
        let lines = compute(&profile, &Options::default()).unwrap();
        assert!(lines.rows.is_empty());
        assert_eq!(
            text(&profile, &lines),
            "\
pyigprof-analyse: ls.txt: ls (pid 32365)
PERF_TICKS: 2 samples, 2 ticks of 10.000 ms = 0.020 s; a 10 % share is 0.5-72.1 % (95 %)
   self %    self s    cum %     cum s  self 95% CI  cum 95% CI  self samples  cum samples  line  (function)
"
        );
    }

    #[test]
    fn unknown_counter_is_an_error() {
        let options = Options {
            counter: "MEM_TOTAL".into(),
            ..Options::default()
        };
        let error = compute(&load("lines.txt", LINES), &options).unwrap_err();
        assert_eq!(
            error.to_string(),
            "pyigprof-analyse: lines.txt: no counter MEM_TOTAL in the profile; its counters: PERF_TICKS"
        );
    }

    #[test]
    fn same_line_in_recursion_counts_once_at_any_depth() {
        // f recursing on line 3, 100 deep; each level has one tick of its own.
        let mut dump = b"P=(HEX ID=1 N=(deep) T=0.004000)
C1 FN0=(F0=(/deep.py)+1 N=(f))+2 V0=(PERF_TICKS):(1,1,1)
"
        .to_vec();
        for depth in 2..=100u32 {
            dump.extend_from_slice(format!("C{depth:x} FN0+2 V0:(1,1,1)\n").as_bytes());
        }
        assert_eq!(
            rows(&report(&dump, &Options::default())),
            ["/deep.py:3  (f) 100 100"]
        );
    }
}
