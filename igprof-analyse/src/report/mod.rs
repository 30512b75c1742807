//! Reports computed from a merged [`Profile`]. One module per report; what they share
//! (choosing the counter, describing the inputs) lives here.
//!
//! - [`top`]: the flat list of the functions with the most self or cumulative cost.

pub mod top;

use crate::error::Error;
use crate::profile::{CounterId, Profile};

/// The counter reported when none is asked for: CPU time in ticks.
pub const DEFAULT_COUNTER: &str = "PERF_TICKS";

/// What a counter's amount measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// CPU time in ticks of [`crate::profile::Source::tick_period`] seconds
    /// (`PERF_TICKS` and any other `*_TICKS` counter); the count is a number of samples.
    Ticks,
    /// Anything else (e.g. IgProf's `MEM_TOTAL` bytes); the count is a number of calls.
    Amount,
}

impl Unit {
    /// The unit of the counter called `name`.
    pub fn of(name: &str) -> Unit {
        if name.ends_with("_TICKS") {
            Unit::Ticks
        } else {
            Unit::Amount
        }
    }
}

/// The input files, comma separated, as errors and report headers name them.
pub fn subject(profile: &Profile) -> String {
    let paths: Vec<&str> = profile
        .sources
        .iter()
        .map(|source| source.path.as_str())
        .collect();
    paths.join(", ")
}

/// The first line of every report:
/// `pyigprof-analyse: <file>[, <file>…]: <program> (pid <pid>)[, …]`, each distinct
/// program and pid listed once.
pub fn header_line(profile: &Profile) -> String {
    let mut programs: Vec<String> = Vec::new();
    for source in &profile.sources {
        let program = format!("{} (pid {})", source.program, source.pid);
        if !programs.contains(&program) {
            programs.push(program);
        }
    }
    format!(
        "{}: {}: {}",
        crate::error::PROGRAM,
        subject(profile),
        programs.join(", ")
    )
}

/// The id of counter `name` in `profile`.
///
/// Returns `Ok(None)` when the profile has no counter at all (a run that took no
/// sample), so that reports can show an empty result instead of failing.
///
/// # Errors
/// [`Error::Report`] listing the profile's counters when it has some, but not `name`.
pub fn find_counter(profile: &Profile, name: &str) -> Result<Option<CounterId>, Error> {
    if let Some(id) = profile.counter_id(name) {
        return Ok(Some(id));
    }
    if profile.counters().is_empty() {
        return Ok(None);
    }
    Err(Error::Report {
        subject: subject(profile),
        message: format!(
            "no counter {name} in the profile; its counters: {}",
            profile.counters().join(", ")
        ),
    })
}
