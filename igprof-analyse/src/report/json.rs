//! The `--json` report: the profile's functions and call tree as one JSON document, for
//! scripts. docs/analyser.md ("JSON") describes every field; [`Document`] is its Rust form
//! (it can be read back with serde).
//!
//! - `functions`: every function with a value, ranked as `--top` ranks them (by self
//!   amount, or cumulative with `--order cumulative`), each with its self and cumulative
//!   amount, seconds and percent; its index in the list is its id in `tree`;
//! - `tree`: the [`CallTree`] in depth-first order, each node with its parent's index,
//!   its depth, its function's index, and its self and cumulative values.
//!
//! Every percent has its 95 % confidence interval (`ci95`, [`Measure::interval`]) where
//! shares have a sampling error, and `total.sample_size` is the n it was computed with.

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use super::{
    cumulative_counts, percent, ranked, CallTree, FunctionAmounts, Keyed, Measure, Options, Unit,
};
use crate::error::Error;
use crate::profile::{FunctionId, Profile};
use crate::symbol::Label;

/// The value of [`Document::format`].
pub const FORMAT: &str = "pyigprof-analyse";

/// The value of [`Document::version`]; it changes when a field changes meaning or goes.
pub const VERSION: u32 = 1;

/// The whole document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// The dumps read, in order.
    pub sources: Vec<Source>,
    /// The counter reported on, e.g. `PERF_TICKS`.
    pub counter: String,
    /// What its amounts are: `ticks` (CPU time in ticks of `tick_period_s`), `bytes`
    /// (the memory counters, `MEM_*`), `events` (the sampled event counters such as
    /// `PERF_PAGE_FAULTS`: numbers of events, the samples standing for them) or `amount`
    /// (anything else).
    pub unit: String,
    /// Seconds per tick.
    pub tick_period_s: f64,
    /// For unit `bytes`: R, the mean number of bytes allocated between two recorded
    /// allocations (the largest of the dumps merged); 1 when every allocation was
    /// recorded (exact figures), more when they are estimates from sampling bytes
    /// ([`super::memory::Sampling`]). `null` for other units.
    #[serde(default)]
    pub rate_bytes: Option<f64>,
    /// The counter's total over the profile.
    pub total: Total,
    /// How many nodes of the dumps the Python view hid (0 with `--all-frames`).
    pub hidden_nodes: usize,
    /// The functions, ranked.
    pub functions: Vec<Function>,
    /// The call tree, parents before their children, children by decreasing cumulative
    /// amount.
    pub tree: Vec<Node>,
}

/// One dump read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// Its path as given on the command line.
    pub path: String,
    /// The profiled command line.
    pub program: String,
    /// The profiled process id.
    pub pid: u64,
    /// pyigprof's statistics about the run, `<section>.<key>` → value as written
    /// (docs/dump-format.md, "The profiler's statistics"); empty for IgProf's dumps.
    #[serde(default)]
    pub statistics: std::collections::BTreeMap<String, String>,
}

/// The counter's total.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Total {
    /// Samples (signals; allocations or blocks for memory counters).
    pub samples: i64,
    /// Amount: ticks, or bytes…
    pub amount: i64,
    /// For ticks, the amount in seconds; `null` otherwise.
    pub seconds: Option<f64>,
    /// n, the number of observations the shares are estimated from, which the intervals
    /// (`ci95`) are computed with: the samples for ticks and events, the total bytes / R
    /// for a memory counter recorded by sampling bytes ([`Measure::sample_size`]); `null`
    /// where shares have no sampling error (exact memory profiles, maxima, counters of
    /// calls).
    #[serde(default)]
    pub sample_size: Option<f64>,
}

/// A 95 % confidence interval of a share, in percent with 6 decimals
/// ([`Measure::interval`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Its low end.
    pub low: f64,
    /// Its high end.
    pub high: f64,
}

/// An amount with its seconds and share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// In the counter's unit.
    pub amount: i64,
    /// For ticks, `amount` × `tick_period_s`; `null` otherwise.
    pub seconds: Option<f64>,
    /// `amount` as a percentage of the total amount.
    pub percent: f64,
    /// The 95 % confidence interval of `percent` (Wilson's, among
    /// [`Total::sample_size`] observations); `null` where shares have no sampling error.
    #[serde(default)]
    pub ci95: Option<Interval>,
}

/// A function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Function {
    /// Its name: demangled for native code, the qualified name for Python.
    pub name: String,
    /// Its file: the Python source or the native object's path.
    pub file: String,
    /// For Python code, its first line; `null` for native code.
    pub line: Option<i64>,
    /// Whether it is Python code.
    pub python: bool,
    /// Its samples (signals) of its own.
    pub self_samples: i64,
    /// The samples with it anywhere on the stack, each counted once.
    #[serde(default)]
    pub cumulative_samples: i64,
    /// Its own cost.
    #[serde(rename = "self")]
    pub self_cost: Cost,
    /// The cost of the samples with it anywhere on the stack (each counted once).
    pub cumulative: Cost,
}

/// A node of the call tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The caller's index in `tree`; `null` for an outermost frame.
    pub parent: Option<usize>,
    /// 0 for an outermost frame.
    pub depth: usize,
    /// The function's index in `functions`.
    pub function: usize,
    /// Samples of the function itself at this place.
    pub self_samples: i64,
    /// Samples of the node and everything below it.
    #[serde(default)]
    pub cumulative_samples: i64,
    /// The function's own cost at this place.
    #[serde(rename = "self")]
    pub self_cost: Cost,
    /// The cost of the node and everything below it.
    pub cumulative: Cost,
}

/// Computes the document for `options.counter` (and `options.order`; the limit does not
/// apply: every function is listed).
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`.
pub fn compute(profile: &Profile, options: &Options) -> Result<Document, Error> {
    let (measure, counter) = Measure::select(profile, &options.counter)?;
    let total = measure.total.amount;
    let cost = |amount: i64, samples: i64| Cost {
        amount,
        seconds: (measure.unit == Unit::Ticks).then(|| measure.seconds(amount)),
        percent: percent(amount, total),
        ci95: measure
            .interval(amount, samples)
            .map(|(low, high)| Interval {
                low: micro(low),
                high: micro(high),
            }),
    };
    let calls = CallTree::of(profile, counter);
    let amounts = counter.map(|counter| FunctionAmounts::of(profile, counter));
    let mut ranked_ids: Vec<FunctionId> = match &amounts {
        Some(amounts) => {
            let self_amounts: Vec<i64> = amounts.self_values.iter().map(|v| v.amount).collect();
            let self_counts: Vec<i64> = amounts.self_values.iter().map(|v| v.count).collect();
            let all = Options {
                limit: 0,
                ..options.clone()
            };
            let label = |id: usize| Label::of(profile, profile.function(id as FunctionId));
            let keyed = Keyed {
                self_amounts: &self_amounts,
                cumulative: &amounts.cumulative,
                self_counts: &self_counts,
                cumulative_counts: &amounts.cumulative_counts,
            };
            ranked(
                &keyed,
                |id| (id, label(id)),
                &all,
                |a, b| (&a.1.name, &a.1.location).cmp(&(&b.1.name, &b.1.location)),
            )
            .into_iter()
            .map(|row| row.item.0 as FunctionId)
            .collect()
        }
        None => Vec::new(),
    };
    let mut index: Vec<Option<usize>> = vec![None; profile.functions().len()];
    for (position, &id) in ranked_ids.iter().enumerate() {
        index[id as usize] = Some(position);
    }
    let node_counts = cumulative_counts(&calls);
    let order = calls.preorder();
    let mut position_of = vec![0usize; calls.nodes.len()];
    let mut tree = Vec::with_capacity(order.len());
    for (position, &id) in order.iter().enumerate() {
        position_of[id as usize] = position;
        let node = &calls.nodes[id as usize];
        // A function in the tree has a value, so it is ranked, save for odd counters
        // whose amounts cancel out: list those after the others.
        let function = *index[node.function as usize].get_or_insert_with(|| {
            ranked_ids.push(node.function);
            ranked_ids.len() - 1
        });
        tree.push(Node {
            parent: node.parent.map(|parent| position_of[parent as usize]),
            depth: node.depth,
            function,
            self_samples: node.self_values.count,
            cumulative_samples: node_counts[id as usize],
            self_cost: cost(node.self_values.amount, node.self_values.count),
            cumulative: cost(node.cumulative, node_counts[id as usize]),
        });
    }
    let functions = ranked_ids
        .iter()
        .map(|&id| {
            let function = profile.function(id);
            let label = Label::of(profile, function);
            let (values, cumulative, cumulative_samples) =
                amounts.as_ref().map_or((Default::default(), 0, 0), |a| {
                    (
                        a.self_values[id as usize],
                        a.cumulative[id as usize],
                        a.cumulative_counts[id as usize],
                    )
                });
            Function {
                line: label.python.then_some(function.start),
                python: label.python,
                name: label.name,
                file: profile.file(function.file).to_string(),
                self_samples: values.count,
                cumulative_samples,
                self_cost: cost(values.amount, values.count),
                cumulative: cost(cumulative, cumulative_samples),
            }
        })
        .collect();
    Ok(Document {
        format: FORMAT.to_string(),
        version: VERSION,
        sources: profile
            .sources
            .iter()
            .map(|source| Source {
                path: source.path.clone(),
                program: source.program.clone(),
                pid: source.pid,
                statistics: source.statistics.iter().cloned().collect(),
            })
            .collect(),
        counter: measure.counter.clone(),
        unit: measure.unit.name().to_string(),
        tick_period_s: measure.tick_period,
        rate_bytes: measure.rate_bytes(),
        total: Total {
            samples: measure.total.count,
            amount: total,
            seconds: (measure.unit == Unit::Ticks).then(|| measure.seconds(total)),
            sample_size: measure.sample_size(),
        },
        hidden_nodes: profile.hidden_nodes,
        functions,
        tree,
    })
}

/// `value` rounded to 6 decimals, which JSON writes and reads back exactly.
fn micro(value: f64) -> f64 {
    (value * 1e6).round() / 1e6
}

/// Writes `document` as pretty-printed JSON.
///
/// # Errors
/// Those of `out`.
pub fn write(document: &Document, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, document).map_err(io::Error::from)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::super::testing::load;
    use super::*;

    const RECURSIVE: &[u8] = include_bytes!("../../tests/data/recursive-hex.txt");

    #[test]
    fn round_trip_and_shape() {
        let document = compute(&load("rec.txt", RECURSIVE), &Options::default()).unwrap();
        let mut out = Vec::new();
        write(&document, &mut out).unwrap();
        let back: Document = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, document);
        let names: Vec<&str> = document.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "fib",
                "deflate_slow",
                "deflate",
                "foo::bar()",
                "<module>",
                "__libc_start_main",
                "std::rt::lang_start"
            ]
        );
        let fib = &document.functions[0];
        assert_eq!(
            (fib.self_cost.amount, fib.cumulative.amount, fib.line),
            (8, 16, Some(10))
        );
        assert_eq!(fib.self_samples, 6);
        assert_eq!(document.tree.len(), 9);
        let self_sum: i64 = document.tree.iter().map(|n| n.self_cost.amount).sum();
        assert_eq!(self_sum, document.total.amount);
        // Every parent comes first and is one level up.
        for node in &document.tree {
            if let Some(parent) = node.parent {
                assert_eq!(document.tree[parent].depth + 1, node.depth);
            }
        }
    }
}
