//! `--flamegraph FILE.svg`: an interactive flame graph (SVG with JavaScript for zoom
//! and search) of the folded stacks of [`super::collapsed`], drawn by the `inferno`
//! crate (a Rust port of Brendan Gregg's `flamegraph.pl`).
//!
//! The width of a frame is its cumulative amount: ticks of T seconds for `PERF_TICKS`
//! (the tooltip gives ticks and the share of the total), bytes for IgProf's `MEM_TOTAL`.
//! Colours are chosen from each function's name, so the same function has the same
//! colour in every graph.

use std::io::{self, Write};

use inferno::flamegraph;

use super::collapsed::{self, Collapsed};
use super::{header_line, Options, Unit, VIEW_NOTE};
use crate::error::Error;
use crate::profile::Profile;

/// What is drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct FlameGraph {
    /// The stacks and the counter.
    pub stacks: Collapsed,
}

/// Computes the flame graph of `options.counter` in `profile`.
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`, or has no
/// positive amount of it to draw.
pub fn compute(profile: &Profile, options: &Options) -> Result<FlameGraph, Error> {
    let stacks = collapsed::compute(profile, options)?;
    if stacks.stacks.is_empty() {
        return Err(Error::Report {
            subject: super::subject(profile),
            message: format!("no samples of {} to draw a flame graph of", options.counter),
        });
    }
    Ok(FlameGraph { stacks })
}

/// Writes `graph` as SVG. The title is the program's header line
/// ([`header_line`]); the subtitle gives the counter's total, and notes the Python view
/// when frames were hidden.
///
/// # Errors
/// Those of `out`, and inferno's if it rejects the stacks.
pub fn write(profile: &Profile, graph: &FlameGraph, out: &mut dyn Write) -> io::Result<()> {
    let measure = &graph.stacks.measure;
    let mut options = flamegraph::Options::default();
    options.title = header_line(profile);
    let mut subtitle = measure.total_line();
    if profile.hidden_nodes > 0 {
        subtitle.push_str(". ");
        subtitle.push_str(VIEW_NOTE);
    }
    options.subtitle = Some(subtitle);
    options.count_name = match measure.unit {
        Unit::Ticks => format!("ticks of {:.3} ms", measure.tick_period * 1000.0),
        Unit::Amount => measure.counter.clone(),
    };
    options.hash = true;
    // inferno needs the lines sorted.
    let mut lines: Vec<String> = graph
        .stacks
        .stacks
        .iter()
        .map(|(stack, amount)| format!("{stack} {amount}"))
        .collect();
    lines.sort_unstable();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
}
