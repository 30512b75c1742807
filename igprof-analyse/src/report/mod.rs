//! Reports computed from a merged [`Profile`]. One module per report; what they share
//! (the options, choosing the counter, the walk that counts each sample once, sorting,
//! the text table) lives here.
//!
//! - [`top`]: the flat list of the functions with the most self or cumulative cost;
//! - [`lines`]: the same for the lines of Python code;
//! - [`tree`]: the indented call tree;
//! - [`text`]: IgProf's text report: flat profiles and the call graph (callers and
//!   callees of every function);
//! - [`collapsed`]: folded stacks for flame-graph tools;
//! - [`flamegraph`]: a flame graph (SVG) drawn with inferno;
//! - [`speedscope`]: a file for the speedscope viewer;
//! - [`callgrind`]: a callgrind file for KCachegrind and `callgrind_annotate`;
//! - [`pprof`]: a gzip-compressed pprof `profile.proto` message;
//! - [`sqlite`]: an SQLite database of functions, call tree and call graph;
//! - [`json`]: functions and call tree as JSON;
//! - [`diff`]: the comparison of two profiles with a significance test per function.
//!
//! [`memory`] says what the memory counters (`MEM_*`) measure and writes their bytes;
//! [`events`] does the same for the sampled event counters (`PERF_PAGE_FAULTS`, …).
//!
//! Shares are estimates from samples: [`Measure::interval`] gives the 95 % confidence
//! interval of one (Wilson's, [`crate::stats::wilson`]), which the text reports print
//! with each share and `--json` and `--sqlite` store; [`Measure::error_note`] ends the
//! total line with the error of a share of 10 %.
//!
//! Reports work on the profile as the chosen view ([`crate::view`]) shows it, reshaped by
//! the options of [`crate::transform`].

pub mod callgrind;
pub mod collapsed;
pub mod diff;
pub mod events;
pub mod flamegraph;
pub mod json;
pub mod lines;
pub mod memory;
pub mod pprof;
pub mod speedscope;
pub mod sqlite;
pub mod stacks;
pub mod text;
pub mod top;
pub mod tree;

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt::Display;
use std::io::{self, Write};

use crate::error::Error;
use crate::profile::{Combine, CounterId, FunctionId, NodeId, Profile, Values};
use pyigprof_pprof::plural;

/// The counter reported when none is asked for: CPU time in ticks.
pub const DEFAULT_COUNTER: &str = "PERF_TICKS";

/// Which column sorts the rows of a report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// Self amount descending, then cumulative descending, then the row's name.
    #[default]
    SelfAmount,
    /// Cumulative amount descending, then self descending, then the row's name.
    Cumulative,
    /// Cumulative amount ascending, then self ascending, then the row's name (IgProf's
    /// `--order descending`: the smallest first).
    CumulativeAscending,
}

/// What to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The counter, e.g. `PERF_TICKS` ([`DEFAULT_COUNTER`]).
    pub counter: String,
    /// How many rows to keep; 0 keeps them all.
    pub limit: usize,
    /// The sort order.
    pub order: Order,
    /// IgProf's `--calls`: `--top` and `--text` add the samples (allocations or blocks
    /// for memory counters, calls for counters of no known unit) of each row. Where
    /// shares have a sampling error ([`Measure::sample_size`]) their tables have them
    /// anyway.
    pub calls: bool,
    /// IgProf's `--paths`: `--top` and `--text` add each function's (and call's) number
    /// of call paths, the places of the call tree ([`CallTree`]) where it is.
    pub paths: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            counter: DEFAULT_COUNTER.to_string(),
            limit: 20,
            order: Order::SelfAmount,
            calls: false,
            paths: false,
        }
    }
}

/// What a counter's amount measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// CPU time in ticks of [`crate::profile::Source::tick_period`] seconds
    /// (`PERF_TICKS` and any other `*_TICKS` counter); the count is a number of samples.
    Ticks,
    /// Bytes: the memory counters (`MEM_*`, [`memory`]); the count is a number of
    /// allocations or blocks.
    Bytes,
    /// Events: the sampled event counters (`PERF_PAGE_FAULTS`, `PERF_CYCLES`, …: names
    /// starting with `PERF_` and not ending in `_TICKS`, [`events`]). The amount is a
    /// number of events (page faults, cycles, …), the count the number of samples that
    /// stand for them: amount / count is the mean sample period, in events.
    Events,
    /// Anything else; the count is a number of calls.
    Amount,
}

impl Unit {
    /// The unit of the counter called `name`.
    pub fn of(name: &str) -> Unit {
        // pyigprof's lock profiler writes its waits' time in ticks of the period too.
        if name.ends_with("_TICKS") || is_lock_time(name) {
            Unit::Ticks
        } else if memory::Kind::of(name).is_some() {
            Unit::Bytes
        } else if events::is_event_counter(name) {
            Unit::Events
        } else {
            Unit::Amount
        }
    }

    /// Its name in the JSON document and the SQLite database: `ticks`, `bytes`,
    /// `events` or `amount`.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Ticks => "ticks",
            Unit::Bytes => "bytes",
            Unit::Events => "events",
            Unit::Amount => "amount",
        }
    }
}

/// Whether the counter called `name` is pyigprof's lock profiler's time: `LOCK_WAIT`, the
/// time threads waited to acquire locks, or `LOCK_HOLD`, the time they held them, in ticks
/// of the profile's period, its count the waits (holds) sampled (docs/dump-format.md).
pub fn is_lock_time(name: &str) -> bool {
    name == "LOCK_WAIT" || name == "LOCK_HOLD"
}

/// `value` (an integer or a decimal number as text) with its thousands separated by
/// `separator`: `thousands("2127280", ',')` is `2,127,280`.
pub fn thousands(value: &str, separator: char) -> String {
    let (integer, fraction) = value
        .split_once('.')
        .map_or((value, None), |(i, f)| (i, Some(f)));
    let (sign, digits) = integer
        .strip_prefix('-')
        .map_or(("", integer), |digits| ("-", digits));
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            grouped.push(separator);
        }
        grouped.push(digit);
    }
    match fraction {
        Some(fraction) => format!("{sign}{grouped}.{fraction}"),
        None => format!("{sign}{grouped}"),
    }
}

/// `word` with its first letter in upper case: `Allocations` (a heading, a callgrind
/// event).
pub(crate) fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

/// The counter a report is on when none is asked for: the first counter of `profile`
/// that has a value (IgProf's rule is the first counter; pyigprof's statistics define
/// `PERF_TICKS` first, without values, even in a profile of memory only), else the first
/// counter; `None` for a profile without counters.
pub fn default_counter(profile: &Profile) -> Option<&str> {
    let counters = profile.counters();
    let has_values = |id: usize| {
        profile
            .nodes()
            .iter()
            .any(|node| node.value(id as CounterId) != Values::default())
    };
    (0..counters.len())
        .find(|&id| has_values(id))
        .or((!counters.is_empty()).then_some(0))
        .map(|id| counters[id].as_str())
}

/// The input files, comma separated, as errors and report headers name them.
pub fn subject(profile: &Profile) -> String {
    let paths: Vec<&str> = profile
        .sources
        .iter()
        .map(|source| source.path.as_str())
        .collect();
    match paths.as_slice() {
        [first, .., last] if paths.len() > 3 => {
            format!("{first} … {last} ({} profiles)", paths.len())
        }
        _ => paths.join(", "),
    }
}

/// The first line of every report:
/// `pyigprof-analyse: <file>[, <file>…]: <program> (pid <pid>)[, …]` ([`describe`]).
pub fn header_line(profile: &Profile) -> String {
    format!("{}: {}", crate::error::PROGRAM, describe(profile))
}

/// Most process ids listed for one program in [`describe`]; the rest are counted.
const PIDS_LISTED: usize = 4;

/// The profile's files and what they profiled, in one line however many were merged:
/// `<file>[, <file>…]: <program> (pid <pid>)[, …]`, each distinct program once with its
/// process ids (`(pids 11, 12, 13, 14 and 6 more)`); more than 3 files are named by the
/// first and the last (`a.gz … z.gz (300 profiles)`, [`subject`]); the windows of
/// continuous profiling among them are counted with the first start and the last end
/// (`; 300 windows, 2026-12-05T01:00:00.000Z to 2026-12-05T06:00:00.000Z`).
pub fn describe(profile: &Profile) -> String {
    let mut programs: Vec<(&str, Vec<u64>)> = Vec::new();
    for source in &profile.sources {
        match programs.iter_mut().find(|(p, _)| *p == source.program) {
            Some((_, pids)) if pids.contains(&source.pid) => {}
            Some((_, pids)) => pids.push(source.pid),
            None => programs.push((&source.program, vec![source.pid])),
        }
    }
    let programs: Vec<String> = programs
        .iter()
        .map(|(program, pids)| match pids.as_slice() {
            [pid] => format!("{program} (pid {pid})"),
            _ => {
                let listed: Vec<String> =
                    pids.iter().take(PIDS_LISTED).map(u64::to_string).collect();
                let more = match pids.len().saturating_sub(PIDS_LISTED) {
                    0 => String::new(),
                    n => format!(" and {n} more"),
                };
                format!("{program} (pids {}{more})", listed.join(", "))
            }
        })
        .collect();
    let windows: Vec<(&str, &str)> = profile
        .sources
        .iter()
        .filter_map(|s| Some((s.statistic("window.start")?, s.statistic("window.end")?)))
        .collect();
    let windows = match windows
        .iter()
        .map(|w| w.0)
        .min()
        .zip(windows.iter().map(|w| w.1).max())
    {
        // ISO 8601 in UTC: the text's order is the time's.
        Some((first, last)) => format!("; {} windows, {first} to {last}", windows.len()),
        None => String::new(),
    };
    format!("{}: {}{windows}", subject(profile), programs.join(", "))
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

/// The counter a report is on and its total over the profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Measure {
    /// The counter's name.
    pub counter: String,
    /// What its amounts measure.
    pub unit: Unit,
    /// The counter's total over the profile: samples (or allocations, blocks, calls) and
    /// amount.
    pub total: Values,
    /// Seconds per tick (of the first dump; all merged dumps have the same).
    pub tick_period: f64,
    /// For a memory counter of a profile recorded by sampling bytes, how: its figures
    /// are estimates. `None` for exact figures (every allocation recorded: IgProf's
    /// profiles, pyigprof's at rate 1) and for counters that are not memory counters.
    pub sampling: Option<memory::Sampling>,
    /// Whether the amounts are the dumps' peaks (`--value peak`, [`Profile::peaks`]).
    pub peaks: bool,
    /// How much more a share of this counter varies than a share of as many samples of
    /// equal weight: the design effect of the samples' weights, `n · Σw² / (Σw)²` over
    /// the samples recorded (pyigprof's `stats.recorded_samples`, `recorded_ticks`,
    /// `recorded_ticks_squared`, summed over the dumps merged), at least 1. Every
    /// sampling error of the reports and `--diff`'s test count `n / design_effect`
    /// observations. 1 for other counters and for dumps without those statistics
    /// (IgProf's, pyigprof's before December 2026).
    pub design_effect: f64,
}

impl Measure {
    /// `amount` as the reports show it: seconds with 3 decimals for ticks (without
    /// unit: the column heading says `s`), bytes in IEC units for memory counters
    /// ([`memory::format_bytes`]: `82.7 MiB`), events with their thousands separated for
    /// event counters (without unit: the heading says `events`; [`events::format_events`]:
    /// `12,345`), the raw number otherwise.
    pub fn format_amount(&self, amount: i64) -> String {
        match self.unit {
            Unit::Ticks => format!("{:.3}", self.seconds(amount)),
            Unit::Bytes => memory::format_bytes(amount),
            Unit::Events => events::format_events(amount),
            Unit::Amount => amount.to_string(),
        }
    }

    /// `amount` with its unit, where [`Measure::format_amount`] leaves it to the
    /// heading: `0.096 s` for ticks, `12,345 events` for event counters, as
    /// [`Measure::format_amount`] otherwise.
    pub fn format_with_unit(&self, amount: i64) -> String {
        match self.unit {
            Unit::Ticks => format!("{} s", self.format_amount(amount)),
            Unit::Events => format!("{} events", self.format_amount(amount)),
            Unit::Bytes | Unit::Amount => self.format_amount(amount),
        }
    }

    /// A change of `delta` as [`Measure::format_with_unit`] writes it, with its sign:
    /// `+64.0 MiB`, `-0.012 s`, `+2,400 events`, `0 B`.
    pub fn format_change(&self, delta: i64) -> String {
        let text = self.format_with_unit(delta);
        if delta > 0 {
            format!("+{text}")
        } else {
            text
        }
    }

    /// The heading of an amount column: `prefix` and the unit of
    /// [`Measure::format_amount`]'s numbers: `self s` for ticks, `self bytes` for memory
    /// counters, `self events` for event counters, `self` otherwise.
    pub fn heading(&self, prefix: &str) -> String {
        match self.unit {
            Unit::Ticks => format!("{prefix} s"),
            Unit::Bytes => format!("{prefix} bytes"),
            Unit::Events => format!("{prefix} events"),
            Unit::Amount => prefix.to_string(),
        }
    }

    /// What the counts are a number of: `samples` for ticks and event counters,
    /// `allocations` or `blocks` for memory counters ([`memory::Kind::count_noun`]),
    /// `calls` otherwise.
    pub fn count_noun(&self) -> &'static str {
        match self.unit {
            Unit::Ticks | Unit::Events => "samples",
            Unit::Bytes => memory::Kind::of(&self.counter).map_or("calls", |k| k.count_noun()),
            Unit::Amount => "calls",
        }
    }

    /// What the amounts of a memory counter are, in words to follow a number of bytes:
    /// `allocated`, `live`, … ([`memory::Kind::amount_words`]), `in peaks of call-tree
    /// nodes` with `--value peak`; empty for other counters.
    pub fn amount_words(&self) -> &'static str {
        match (self.unit, memory::Kind::of(&self.counter)) {
            (Unit::Bytes, _) if self.peaks => "in peaks of call-tree nodes",
            (Unit::Bytes, Some(kind)) => kind.amount_words(),
            _ => "",
        }
    }

    /// For a memory counter, R: the mean number of bytes allocated between two recorded
    /// allocations ([`memory::Sampling::rate_bytes`]), 1 when every allocation was
    /// recorded; `None` for other counters.
    pub fn rate_bytes(&self) -> Option<f64> {
        (self.unit == Unit::Bytes)
            .then(|| self.sampling.map_or(1.0, |sampling| sampling.rate_bytes))
    }

    /// `amount` ticks in seconds (`amount` × [`Measure::tick_period`]); only meaningful
    /// for [`Unit::Ticks`].
    pub fn seconds(&self, amount: i64) -> f64 {
        amount as f64 * self.tick_period
    }

    /// The line giving the counter's total:
    /// `PERF_TICKS: 617 samples, 2468 ticks of 4.000 ms = 9.872 s` for ticks;
    /// `MEM_TOTAL: 20 allocations, 6.2 KiB allocated (6,317 bytes)` for memory counters
    /// (blocks and `live` for `MEM_LIVE`, …: [`memory::Kind`]; the exact bytes from
    /// 1 KiB), the amount said to be peaks with `--value peak`, followed for a sampled
    /// profile by `; ` and [`memory::Sampling::note`];
    /// `PERF_PAGE_FAULTS: 40 samples, 12,345 events` for event counters (thousands
    /// separated); `COUNTER: 3 calls, 822 total` otherwise. Where shares have a sampling
    /// error ([`Measure::sample_size`]) the line ends with `; ` and
    /// [`Measure::error_note`]: `…; a 10 % share is ±1.3 points (95 %)`.
    pub fn total_line(&self) -> String {
        let mut line = self.plain_total_line();
        if let Some(note) = self.error_note() {
            line.push_str("; ");
            line.push_str(&note);
        }
        line
    }

    /// [`Measure::total_line`] without its sampling error.
    fn plain_total_line(&self) -> String {
        let total = self.total.amount;
        match self.unit {
            Unit::Ticks => format!(
                "{}: {} {}, {} {} of {:.3} ms = {:.3} s",
                self.counter,
                self.total.count,
                plural(self.total.count, "sample"),
                total,
                plural(total, "tick"),
                self.tick_period * 1000.0,
                self.seconds(total)
            ),
            Unit::Bytes => {
                let words = self.amount_words();
                let mut line = format!(
                    "{}: {} {}, {}",
                    self.counter,
                    thousands(&self.total.count.to_string(), ','),
                    self.count_noun(),
                    self.format_amount(total)
                );
                if !words.is_empty() {
                    line.push(' ');
                    line.push_str(words);
                }
                if total.unsigned_abs() >= 1024 {
                    line.push_str(&format!(" ({} bytes)", thousands(&total.to_string(), ',')));
                }
                if let Some(sampling) = &self.sampling {
                    line.push_str("; ");
                    line.push_str(&sampling.note());
                    // The exact figure beside the estimate (issue 58): the summary line
                    // at exit gives it, and the two must not look like a contradiction.
                    let exact = sampling.allocated.filter(|_| {
                        !self.peaks && memory::Kind::of(&self.counter) == Some(memory::Kind::Total)
                    });
                    if let Some(bytes) = exact {
                        line.push_str(&format!(
                            "; exactly {} {} as counted apart from the samples ({} bytes)",
                            memory::format_bytes(bytes.min(i64::MAX as u64) as i64),
                            words,
                            thousands(&bytes.to_string(), ',')
                        ));
                    }
                }
                line
            }
            Unit::Events => format!(
                "{}: {} {}, {} {}",
                self.counter,
                thousands(&self.total.count.to_string(), ','),
                plural(self.total.count, "sample"),
                events::format_events(total),
                plural(total, "event")
            ),
            Unit::Amount => format!(
                "{}: {} calls, {} total",
                self.counter, self.total.count, total
            ),
        }
    }

    /// n, the number of independent observations a share of this counter is estimated
    /// from, which sets its sampling error ([`Measure::interval`]):
    /// - ticks and event counters: the profile's samples (the count of the total, not
    ///   the ticks or events: a sample that weighs more is still one observation);
    /// - a memory counter of a profile recorded by sampling bytes every R bytes on
    ///   average ([`memory::Sampling`]): the total bytes / R, the recorded allocations
    ///   they stand for (about Poisson: the same sample-equivalents as `--diff`'s);
    ///
    /// `None` where a share has no sampling error, or none that can be told: memory
    /// counters recorded exactly (every allocation: IgProf's, pyigprof's at rate 1),
    /// memory peaks (`--value peak`), maxima (`MEM_MAX`, any `*_MAX` counter), counters
    /// of calls ([`Unit::Amount`]), and a profile without samples or amount.
    pub fn sample_size(&self) -> Option<f64> {
        if self.total.amount <= 0 || Combine::of(&self.counter) == Combine::Maximum {
            return None;
        }
        let n = match self.unit {
            Unit::Ticks | Unit::Events => self.total.count as f64 / self.design_effect,
            Unit::Bytes if self.peaks => return None,
            Unit::Bytes => self.total.amount as f64 / self.sampling?.rate_bytes,
            Unit::Amount => return None,
        };
        (n > 0.0).then_some(n)
    }

    /// The 95 % confidence interval of the share of `amount` in the total, which `count`
    /// samples make up, in percent `(low, high)`; `None` where [`Measure::sample_size`]
    /// is.
    ///
    /// - Ticks and event counters: the Wilson score interval ([`crate::stats::wilson`])
    ///   of k = `count` samples among the profile's n, both divided by the
    ///   [`Measure::design_effect`] of the samples' weights, moved to the share shown (of
    ///   the amounts, p̂ = amount / total): both ends times p̂ / (k / n), at most 100 %.
    ///   Where every sample weighs the same (ticks without overruns, events at a fixed
    ///   period) p̂ = k / n and it is Wilson's interval itself; where a row's samples
    ///   weigh more than the others' (2 context switches each), the share keeps the
    ///   relative precision of its k samples. pyigprof's CPU samples weigh the CPU time
    ///   since the thread's previous sample in whole ticks (random intervals, rounded at
    ///   random), whose spread the design effect measures (1.4–1.5 measured here). A row
    ///   without samples, or without amount, has the interval of p̂ n samples: from 0 to
    ///   z²/(n + z²) for none.
    /// - Memory counters recorded by sampling bytes: Wilson's interval of the share's
    ///   sample-equivalents, p̂ n of n = total bytes / R.
    pub fn interval(&self, amount: i64, count: i64) -> Option<(f64, f64)> {
        use crate::stats::{wilson, Z_95};
        let n = self.sample_size()?;
        let share = amount as f64 / self.total.amount as f64;
        let counted = matches!(self.unit, Unit::Ticks | Unit::Events);
        let (low, high) = if counted && count > 0 && share > 0.0 {
            let k = (count as f64 / self.design_effect).min(n);
            let (low, high) = wilson(k, n, Z_95)?;
            let scale = share / (k / n);
            (low * scale, (high * scale).min(1.0))
        } else {
            wilson(share * n, n, Z_95)?
        };
        Some((low * 100.0, high * 100.0))
    }

    /// What the total line says of the sampling error: how precise a share of 10 % is,
    /// `a 10 % share is ±1.3 points (95 %)` (the half-width of its [`Measure::interval`],
    /// for 1,000 observations or more), `a 10 % share is 5.5-17.4 % (95 %)` (the interval
    /// itself, lopsided for fewer); for a sampled memory counter preceded by its n, `as
    /// 31 samples of 512.0 KiB, `. `None` without sampling error ([`Measure::sample_size`]).
    pub fn error_note(&self) -> Option<String> {
        let n = self.sample_size()?;
        let (low, high) = crate::stats::wilson(0.1 * n, n, crate::stats::Z_95)?;
        let (low, high) = (low * 100.0, high * 100.0);
        let error = if n >= 1000.0 {
            format!("a 10 % share is ±{:.1} points (95 %)", (high - low) / 2.0)
        } else {
            format!("a 10 % share is {low:.1}-{high:.1} % (95 %)")
        };
        Some(match (self.unit, self.sampling) {
            (Unit::Bytes, Some(sampling)) => format!(
                "as {} samples of {}, {error}",
                thousands(&format!("{n:.0}"), ','),
                memory::format_bytes(sampling.rate_bytes.round() as i64)
            ),
            _ => error,
        })
    }

    /// The measure of counter `name` in `profile`, and the counter's id: `None` when the
    /// profile has no counter at all, the total then being zero.
    ///
    /// # Errors
    /// Those of [`find_counter`], and for a memory counter those of
    /// [`memory::Sampling::of`].
    pub fn select(profile: &Profile, name: &str) -> Result<(Measure, Option<CounterId>), Error> {
        let id = find_counter(profile, name)?;
        let unit = Unit::of(name);
        let sampling = match unit {
            Unit::Bytes => memory::Sampling::of(profile)?,
            Unit::Ticks | Unit::Events | Unit::Amount => None,
        };
        let measure = Measure {
            counter: name.to_string(),
            unit,
            total: id.map_or_else(Values::default, |id| profile.total(id)),
            tick_period: profile.sources.first().map_or(0.0, |source| {
                // The lock counters' own tick (`#pyigprof locks tick_ns`; the period `T`
                // in profiles written before it).
                let lock_tick = source
                    .statistic("locks.tick_ns")
                    .and_then(|ns| ns.parse::<f64>().ok())
                    .filter(|&ns| ns > 0.0);
                match lock_tick {
                    Some(ns) if is_lock_time(name) => ns / 1e9,
                    _ => source.tick_period,
                }
            }),
            sampling,
            peaks: profile.peaks,
            design_effect: match unit {
                Unit::Ticks => design_effect(profile, name),
                Unit::Bytes | Unit::Events | Unit::Amount => 1.0,
            },
        };
        Ok((measure, id))
    }
}

/// The design effect of the weights of the samples of tick counter `counter` in
/// `profile` ([`Measure::design_effect`]): from the dumps whose sampling counter it is
/// (`sampling.counter`, `PERF_TICKS` when not said) and that say their recorded samples'
/// weights; 1 without any.
fn design_effect(profile: &Profile, counter: &str) -> f64 {
    let (mut n, mut sum, mut squares) = (0f64, 0f64, 0f64);
    for source in &profile.sources {
        if source.statistic("sampling.counter").unwrap_or("PERF_TICKS") != counter {
            continue;
        }
        let number = |key: &str| source.statistic(key).and_then(|v| v.parse::<f64>().ok());
        if let (Some(k), Some(w), Some(w2)) = (
            number("stats.recorded_samples"),
            number("stats.recorded_ticks"),
            number("stats.recorded_ticks_squared"),
        ) {
            n += k;
            sum += w;
            squares += w2;
        }
    }
    if n > 0.0 && sum > 0.0 {
        (n * squares / (sum * sum)).max(1.0)
    } else {
        1.0
    }
}

/// Per key, the sum (or, with [`Combine::Maximum`], the largest) over the samples whose
/// stack holds a node of that key of their `subtrees` values (e.g. [`Profile::subtree_amounts`] for amounts, [`subtree_counts`]
/// for samples), each sample counted once however many of its frames have the key
/// (recursion). `keys[node]` is the key of each node (indexed by [`NodeId`]), `None` for
/// none; keys are below `key_count`.
///
/// A depth-first walk keeps, per key, how many of the current node's ancestors (itself
/// included) have that key: a subtree counts only for the outermost one.
pub(crate) fn cumulative_once(
    profile: &Profile,
    subtrees: &[i64],
    keys: &[Option<u32>],
    key_count: usize,
    combine: Combine,
) -> Vec<i64> {
    let children = profile.children();
    let mut active = vec![0u32; key_count];
    let mut cumulative = vec![0i64; key_count];
    let mut stack: Vec<(NodeId, bool)> = children
        .roots()
        .iter()
        .rev()
        .map(|&root| (root, false))
        .collect();
    while let Some((node, leaving)) = stack.pop() {
        let key = keys[node as usize].map(|key| key as usize);
        if leaving {
            if let Some(key) = key {
                active[key] -= 1;
            }
            continue;
        }
        if let Some(key) = key {
            if active[key] == 0 {
                cumulative[key] = combine.apply(cumulative[key], subtrees[node as usize]);
            }
            active[key] += 1;
            stack.push((node, true));
        }
        stack.extend(children.of(node).iter().rev().map(|&child| (child, false)));
    }
    cumulative
}

/// The cumulative (inclusive) count of `counter` (samples, calls) of every node: its
/// own count plus its descendants', indexed by [`NodeId`]; the counterpart of
/// [`Profile::subtree_amounts`].
pub fn subtree_counts(profile: &Profile, counter: CounterId) -> Vec<i64> {
    let nodes = profile.nodes();
    let mut counts: Vec<i64> = nodes.iter().map(|node| node.value(counter).count).collect();
    // Children have larger indices than their parents.
    for index in (0..nodes.len()).rev() {
        if let Some(parent) = nodes[index].parent {
            let count = counts[index];
            let slot = &mut counts[parent as usize];
            *slot = slot.saturating_add(count);
        }
    }
    counts
}

/// Per function of a profile (indexed by [`crate::profile::FunctionId`]): its self
/// values of one counter and its cumulative amount and count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionAmounts {
    /// The sum of the function's nodes' values: samples (`count`) and amount.
    pub self_values: Vec<Values>,
    /// The amount of the samples with the function anywhere on their stack, each
    /// sample counted once even where the function recurses.
    pub cumulative: Vec<i64>,
    /// The number of those samples (allocations or blocks for memory counters), counted the same way.
    pub cumulative_counts: Vec<i64>,
}

impl FunctionAmounts {
    /// The amounts of `counter` of every function of `profile`.
    pub fn of(profile: &Profile, counter: CounterId) -> FunctionAmounts {
        let functions = profile.functions().len();
        let nodes = profile.nodes();
        let combine = profile.combine(counter);
        let mut self_values = vec![Values::default(); functions];
        for node in nodes {
            self_values[node.function as usize].merge_as(node.value(counter), combine);
        }
        let keys: Vec<Option<u32>> = nodes.iter().map(|node| Some(node.function)).collect();
        FunctionAmounts {
            self_values,
            cumulative: cumulative_once(
                profile,
                &profile.subtree_amounts(counter),
                &keys,
                functions,
                combine,
            ),
            cumulative_counts: cumulative_once(
                profile,
                &subtree_counts(profile, counter),
                &keys,
                functions,
                Combine::Sum,
            ),
        }
    }

    /// Sorts `ids` as IgProf's text report ranks functions: by decreasing cumulative
    /// amount, then decreasing self amount, then by shown name and location (`labels`,
    /// indexed by function id), so that ranks are the same in every report.
    pub fn rank(&self, ids: &mut [FunctionId], labels: &[crate::symbol::Label]) {
        ids.sort_by(|&a, &b| {
            let key = |id: FunctionId| {
                (
                    std::cmp::Reverse(self.cumulative[id as usize]),
                    std::cmp::Reverse(self.self_values[id as usize].amount),
                )
            };
            key(a).cmp(&key(b)).then_with(|| {
                let (a, b) = (&labels[a as usize], &labels[b as usize]);
                (&a.name, &a.location).cmp(&(&b.name, &b.location))
            })
        });
    }
}

/// The direct calls (arcs) between functions in a profile, with the cost of the samples
/// whose stack has each: gprof's and IgProf's call graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arcs {
    /// Each arc: (caller, callee); the caller is `None` for outermost frames (IgProf's
    /// `<spontaneous>`).
    pub pairs: Vec<(Option<FunctionId>, FunctionId)>,
    /// Per arc, the amount of the samples whose stack has that call, each sample
    /// counted once even where the call recurs on its stack.
    pub amounts: Vec<i64>,
    /// Per arc, the number of those samples (allocations or blocks for memory counters).
    pub counts: Vec<i64>,
}

impl Arcs {
    /// The arcs of `counter` in `profile`, in the order of their first node.
    pub fn of(profile: &Profile, counter: CounterId) -> Arcs {
        let nodes = profile.nodes();
        let mut pairs: Vec<(Option<FunctionId>, FunctionId)> = Vec::new();
        let mut index: HashMap<(Option<FunctionId>, FunctionId), u32> = HashMap::new();
        let keys: Vec<Option<u32>> = nodes
            .iter()
            .map(|node| {
                let caller = node.parent.map(|parent| nodes[parent as usize].function);
                let key = (caller, node.function);
                // Arcs are no more than nodes, whose count fits in u32.
                let next = pairs.len() as u32;
                Some(*index.entry(key).or_insert_with(|| {
                    pairs.push(key);
                    next
                }))
            })
            .collect();
        let amounts = cumulative_once(
            profile,
            &profile.subtree_amounts(counter),
            &keys,
            pairs.len(),
            profile.combine(counter),
        );
        let counts = cumulative_once(
            profile,
            &subtree_counts(profile, counter),
            &keys,
            pairs.len(),
            Combine::Sum,
        );
        Arcs {
            pairs,
            amounts,
            counts,
        }
    }
}

/// Per arc (caller, callee; the caller `None` for outermost frames), a number.
pub type ArcCounts = HashMap<(Option<FunctionId>, FunctionId), i64>;

/// IgProf's *paths* (`--paths`): in how many places of a [`CallTree`] each function is
/// (per [`FunctionId`]), and each arc is: the number of distinct call paths that reach
/// it with a cost.
pub fn paths(profile: &Profile, tree: &CallTree) -> (Vec<i64>, ArcCounts) {
    let mut functions = vec![0i64; profile.functions().len()];
    let mut arcs = ArcCounts::new();
    for node in &tree.nodes {
        functions[node.function as usize] += 1;
        let caller = node
            .parent
            .map(|parent| tree.nodes[parent as usize].function);
        *arcs.entry((caller, node.function)).or_default() += 1;
    }
    (functions, arcs)
}

/// One node of a [`CallTree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallNode {
    /// The caller's node, `None` for an outermost frame.
    pub parent: Option<u32>,
    /// The function.
    pub function: FunctionId,
    /// The samples (`count`) and amount of the function itself at this place of the tree.
    pub self_values: Values,
    /// The amount of the node and all its descendants.
    pub cumulative: i64,
    /// How deep the node is: 0 for an outermost frame.
    pub depth: usize,
    /// The callees' nodes, by decreasing cumulative amount, then by function name and
    /// file.
    pub children: Vec<u32>,
}

/// The call tree by function: the profile's tree with the children of a node that run
/// the same function (at different offsets, i.e. lines or instructions) made one, and
/// without the branches that have no value of the counter at all. Every sample is at
/// exactly one node, so the self amounts sum to the counter's total.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallTree {
    /// The nodes; a parent always comes before its children.
    pub nodes: Vec<CallNode>,
    /// The outermost nodes, ordered as children are.
    pub roots: Vec<u32>,
}

impl CallTree {
    /// The call tree of `counter` in `profile` (empty for `None`: a profile without
    /// counters).
    pub fn of(profile: &Profile, counter: Option<CounterId>) -> CallTree {
        let Some(counter) = counter else {
            return CallTree::default();
        };
        let combine = profile.combine(counter);
        let nodes = profile.nodes();
        // Whether a node's subtree has any value: one backward pass, children having
        // larger indices than their parents.
        let mut live: Vec<bool> = nodes
            .iter()
            .map(|node| node.value(counter) != Values::default())
            .collect();
        for index in (0..nodes.len()).rev() {
            if let (true, Some(parent)) = (live[index], nodes[index].parent) {
                live[parent as usize] = true;
            }
        }
        let mut tree = CallTree::default();
        let mut mapped: Vec<u32> = vec![u32::MAX; nodes.len()];
        let mut index: HashMap<(Option<u32>, FunctionId), u32> = HashMap::new();
        for (at, node) in nodes.iter().enumerate() {
            if !live[at] {
                continue;
            }
            // A live node's parent is live, and was mapped before it.
            let parent = node.parent.map(|parent| mapped[parent as usize]);
            // Call nodes are no more than nodes, whose count fits in u32.
            let next = tree.nodes.len() as u32;
            let id = *index.entry((parent, node.function)).or_insert_with(|| {
                let depth = parent.map_or(0, |parent| tree.nodes[parent as usize].depth + 1);
                tree.nodes.push(CallNode {
                    parent,
                    function: node.function,
                    self_values: Values::default(),
                    cumulative: 0,
                    depth,
                    children: Vec::new(),
                });
                next
            });
            tree.nodes[id as usize]
                .self_values
                .merge_as(node.value(counter), combine);
            mapped[at] = id;
        }
        for id in (0..tree.nodes.len()).rev() {
            let node = &mut tree.nodes[id];
            node.cumulative = combine.apply(node.cumulative, node.self_values.amount);
            let (cumulative, parent) = (node.cumulative, node.parent);
            match parent {
                Some(parent) => {
                    let parent = &mut tree.nodes[parent as usize];
                    parent.cumulative = combine.apply(parent.cumulative, cumulative);
                    parent.children.push(id as u32);
                }
                None => tree.roots.push(id as u32),
            }
        }
        let mut roots = std::mem::take(&mut tree.roots);
        let mut children: Vec<Vec<u32>> = tree
            .nodes
            .iter_mut()
            .map(|node| std::mem::take(&mut node.children))
            .collect();
        {
            let key = |id: &u32| {
                let node = &tree.nodes[*id as usize];
                let function = profile.function(node.function);
                (
                    std::cmp::Reverse(node.cumulative),
                    function.name.as_str(),
                    profile.file(function.file),
                )
            };
            roots.sort_by_cached_key(key);
            for list in &mut children {
                list.sort_by_cached_key(key);
            }
        }
        for (node, list) in tree.nodes.iter_mut().zip(children) {
            node.children = list;
        }
        tree.roots = roots;
        tree
    }

    /// The nodes in depth-first order, each before its children, children in their
    /// order (the order of an indented tree or of a flame graph's stacks).
    pub fn preorder(&self) -> Vec<u32> {
        let mut order = Vec::with_capacity(self.nodes.len());
        let mut stack: Vec<u32> = self.roots.iter().rev().copied().collect();
        while let Some(id) = stack.pop() {
            order.push(id);
            stack.extend(self.nodes[id as usize].children.iter().rev());
        }
        order
    }
}

/// The cumulative count (samples) of every node of `tree`: its own plus its
/// descendants'.
pub(crate) fn cumulative_counts(tree: &CallTree) -> Vec<i64> {
    let mut counts: Vec<i64> = tree
        .nodes
        .iter()
        .map(|node| node.self_values.count)
        .collect();
    // Parents come before their children.
    for id in (0..tree.nodes.len()).rev() {
        if let Some(parent) = tree.nodes[id].parent {
            let count = counts[id];
            counts[parent as usize] = counts[parent as usize].saturating_add(count);
        }
    }
    counts
}

/// One row of a report: what it is about and its amounts, in the counter's unit (ticks
/// for `PERF_TICKS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row<T> {
    /// What the row is about: a function ([`top::Function`]) or a line of Python code
    /// ([`lines::Line`]). Its `Display` form ends the row in the text table.
    pub item: T,
    /// The self (exclusive) amount.
    pub self_amount: i64,
    /// The cumulative (inclusive) amount, each sample counted once even where the item
    /// recurses.
    pub cumulative: i64,
    /// The samples of the self amount (allocations or blocks for memory counters, calls
    /// for counters of calls).
    pub self_count: i64,
    /// The samples of the cumulative amount, each counted once.
    pub cumulative_count: i64,
}

/// What the rows of a report are about; the `Display` form ends each row of the text.
pub trait Item: Display {
    /// The heading of that last column, e.g. `function  (file)`.
    const HEADING: &'static str;
}

/// A column a report adds after its amounts (`--calls`, `--paths`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Its heading, e.g. `self samples`.
    pub heading: String,
    /// One value per row of the report.
    pub values: Vec<i64>,
}

/// A computed report.
#[derive(Debug, Clone, PartialEq)]
pub struct Report<T> {
    /// The counter reported on and its total.
    pub measure: Measure,
    /// The rows, sorted and cut to the limit; items with neither self nor cumulative
    /// amount are left out.
    pub rows: Vec<Row<T>>,
    /// Extra columns, printed after the amounts and their intervals: the samples (where
    /// shares have a sampling error, or with `--calls`), the paths (`--paths`).
    pub columns: Vec<Column>,
}

/// The report on `profile` of `options.counter`, whose rows `rows` computes from the
/// counter's id; no rows when the profile has no counter at all.
///
/// # Errors
/// Those of [`find_counter`].
pub(crate) fn report<T>(
    profile: &Profile,
    options: &Options,
    rows: impl FnOnce(CounterId) -> Vec<Row<T>>,
) -> Result<Report<T>, Error> {
    let (measure, counter) = Measure::select(profile, &options.counter)?;
    Ok(Report {
        measure,
        rows: counter.map_or_else(Vec::new, rows),
        columns: Vec::new(),
    })
}

/// Per key, the self and cumulative amounts of a report's rows and their samples: what
/// [`ranked`] ranks.
pub(crate) struct Keyed<'a> {
    /// The self amounts.
    pub self_amounts: &'a [i64],
    /// The cumulative amounts.
    pub cumulative: &'a [i64],
    /// The self samples.
    pub self_counts: &'a [i64],
    /// The cumulative samples.
    pub cumulative_counts: &'a [i64],
}

/// The rows of the keys `0..keyed.self_amounts.len()` with some self or cumulative
/// amount (`item` makes what a key stands for), sorted by `options.order`, ties broken
/// by `name` (ascending), and cut to `options.limit` (all for 0).
pub(crate) fn ranked<T>(
    keyed: &Keyed<'_>,
    mut item: impl FnMut(usize) -> T,
    options: &Options,
    name: impl Fn(&T, &T) -> Ordering,
) -> Vec<Row<T>> {
    let Keyed {
        self_amounts,
        cumulative,
        self_counts,
        cumulative_counts,
    } = *keyed;
    let mut rows: Vec<Row<T>> = (0..self_amounts.len())
        .filter(|&key| self_amounts[key] != 0 || cumulative[key] != 0)
        .map(|key| Row {
            item: item(key),
            self_amount: self_amounts[key],
            cumulative: cumulative[key],
            self_count: self_counts[key],
            cumulative_count: cumulative_counts[key],
        })
        .collect();
    rows.sort_by(|a, b| {
        let by_amounts = match options.order {
            Order::SelfAmount => (b.self_amount, b.cumulative).cmp(&(a.self_amount, a.cumulative)),
            Order::Cumulative => (b.cumulative, b.self_amount).cmp(&(a.cumulative, a.self_amount)),
            Order::CumulativeAscending => {
                (a.cumulative, a.self_amount).cmp(&(b.cumulative, b.self_amount))
            }
        };
        by_amounts.then_with(|| name(&a.item, &b.item))
    });
    if options.limit != 0 {
        rows.truncate(options.limit);
    }
    rows
}

/// `part` as a percentage of `total`, 0 when the total is 0.
pub fn percent(part: i64, total: i64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 / total as f64 * 100.0
    }
}

/// A share's 95 % interval ([`Measure::interval`]) as the tables show it, percents with
/// one decimal in brackets: `[5.5-17.4]`; empty for `None`.
pub fn format_interval(interval: Option<(f64, f64)>) -> String {
    interval.map_or_else(String::new, |(low, high)| format!("[{low:.1}-{high:.1}]"))
}

/// The heading of the column of the 95 % intervals of the `prefix` shares: `self 95% CI`.
pub(crate) fn interval_heading(prefix: &str) -> String {
    format!("{prefix} 95% CI")
}

/// The columns of the rows' self and cumulative samples (`self samples`, `cum samples`;
/// allocations or blocks for memory counters: [`Measure::count_noun`]), which IgProf's
/// `--calls` asks for and which come with the intervals ([`Measure::sample_size`]):
/// empty unless one of them is wanted.
pub(crate) fn sample_columns<T>(measure: &Measure, rows: &[Row<T>], calls: bool) -> Vec<Column> {
    if !calls && measure.sample_size().is_none() {
        return Vec::new();
    }
    let noun = measure.count_noun();
    vec![
        Column {
            heading: format!("self {noun}"),
            values: rows.iter().map(|row| row.self_count).collect(),
        },
        Column {
            heading: format!("cum {noun}"),
            values: rows.iter().map(|row| row.cumulative_count).collect(),
        },
    ]
}

/// The number columns, right-aligned to `widths`, then two spaces and `text`.
pub(crate) fn table_line(cells: &[String], widths: &[usize], text: &str) -> String {
    let mut line = String::new();
    for (cell, &width) in cells.iter().zip(widths) {
        line.push_str(&format!("{cell:>width$}"));
    }
    line.push_str("  ");
    line.push_str(text);
    line
}

/// Writes `report` as text: the [`header_line`], the counter's total, then a table with
/// self and cumulative percents and amounts, the 95 % intervals of the percents and the
/// report's extra [`Column`]s, and the rows' items ([`Item::HEADING`]):
///
/// ```text
/// pyigprof-analyse: <file(s)>: <program> (pid <pid>)
/// PERF_TICKS: 100 samples, 100 ticks of 4.000 ms = 0.400 s; a 10 % share is 5.5-17.4 % (95 %)
///    self %    self s    cum %     cum s  self 95% CI    cum 95% CI  self samples  cum samples  function  (file)
///     50.00     0.200    50.00     0.200  [40.4-59.6]   [40.4-59.6]            50           50  hot (/work/app.py:16)
///      0.00     0.000   100.00     0.400    [0.0-3.7]  [96.3-100.0]             0          100  main (/work/app.py:1)
/// ```
///
/// or, for [`lines`]:
///
/// ```text
/// pyigprof-analyse: p.gz: python3 app.py (pid 42)
/// PERF_TICKS: 100 samples, 100 ticks of 4.000 ms = 0.400 s; a 10 % share is 5.5-17.4 % (95 %)
///    self %    self s    cum %     cum s  self 95% CI    cum 95% CI  self samples  cum samples  line  (function)
///     50.00     0.200    50.00     0.200  [40.4-59.6]   [40.4-59.6]            50           50  /work/app.py:16  (hot)
/// ```
///
/// Percents (of the counter's total) have 2 decimals, seconds 3; columns widen to fit
/// their values. Memory counters show bytes in IEC units in `self bytes` and `cum bytes`
/// columns ([`Measure::format_amount`]: `82.7 MiB`), event counters numbers of events,
/// thousands separated, in `self events` and `cum events` columns (`12,345`), other
/// counters that are not ticks raw amounts in `self` and `cum` columns. Where shares
/// have a sampling error ([`Measure::sample_size`]) the `self 95% CI` and `cum 95% CI`
/// columns ([`Measure::interval`], [`format_interval`]) follow the amounts, and the
/// report's columns start with the rows' self and cumulative samples; its other extra
/// [`Column`]s come next.
///
/// # Errors
/// Those of `out`.
pub fn write<T: Item>(
    profile: &Profile,
    report: &Report<T>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let measure = &report.measure;
    write_preamble(profile, measure, out)?;
    let total = measure.total.amount;
    let intervals = measure.sample_size().is_some();
    let mut labels: Vec<String> = vec![
        "self %".to_string(),
        measure.heading("self"),
        "cum %".to_string(),
        measure.heading("cum"),
    ];
    if intervals {
        labels.push(interval_heading("self"));
        labels.push(interval_heading("cum"));
    }
    labels.extend(report.columns.iter().map(|column| column.heading.clone()));
    let cells: Vec<Vec<String>> = report
        .rows
        .iter()
        .enumerate()
        .map(|(index, row)| {
            let mut cells = vec![
                format!("{:.2}", percent(row.self_amount, total)),
                measure.format_amount(row.self_amount),
                format!("{:.2}", percent(row.cumulative, total)),
                measure.format_amount(row.cumulative),
            ];
            if intervals {
                cells.push(format_interval(
                    measure.interval(row.self_amount, row.self_count),
                ));
                cells.push(format_interval(
                    measure.interval(row.cumulative, row.cumulative_count),
                ));
            }
            cells.extend(report.columns.iter().map(|column| {
                column
                    .values
                    .get(index)
                    .map_or(String::new(), i64::to_string)
            }));
            cells
        })
        .collect();
    let mut widths = vec![9usize, 10, 9, 10];
    widths.resize(labels.len(), 0);
    for (column, width) in widths.iter_mut().enumerate() {
        let longest = cells.iter().map(|row| row[column].len()).max().unwrap_or(0);
        *width = (*width).max(longest + 2).max(labels[column].len() + 2);
    }
    writeln!(out, "{}", table_line(&labels, &widths, T::HEADING))?;
    for (row, cell) in report.rows.iter().zip(&cells) {
        writeln!(out, "{}", table_line(cell, &widths, &row.item.to_string()))?;
    }
    Ok(())
}

/// Writes the two lines every text report starts with: the [`header_line`], then the
/// counter's total with its sampling error ([`Measure::total_line`]) followed, when the
/// Python view hid frames ([`Profile::hidden_nodes`]), by `; ` and [`VIEW_NOTE`]:
///
/// ```text
/// pyigprof-analyse: p.gz: python3 app.py (pid 42)
/// PERF_TICKS: 3754 samples, 3760 ticks of 4.000 ms = 15.040 s; a 10 % share is ±1.0 points (95 %); Python view: interpreter plumbing below Python code counts as its caller's (--all-frames shows it)
/// ```
///
/// # Errors
/// Those of `out`.
pub fn write_preamble(profile: &Profile, measure: &Measure, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "{}", header_line(profile))?;
    if profile.hidden_nodes > 0 {
        writeln!(out, "{}; {VIEW_NOTE}", measure.total_line())
    } else {
        writeln!(out, "{}", measure.total_line())
    }
}

/// The line reports print when the Python view ([`crate::view`]) hid frames.
pub const VIEW_NOTE: &str =
    "Python view: interpreter plumbing below Python code counts as its caller's (--all-frames shows it)";

#[cfg(test)]
mod tests {
    use super::testing::load;
    use super::*;

    /// A measure of `counter` whose total is `count` samples (allocations) and `amount`.
    fn measure(counter: &str, count: i64, amount: i64, rate: Option<f64>) -> Measure {
        Measure {
            counter: counter.to_string(),
            unit: Unit::of(counter),
            total: Values {
                count,
                amount,
                peak: amount,
            },
            tick_period: 0.004,
            sampling: rate.map(|rate_bytes| memory::Sampling {
                rate_bytes,
                mixed: false,
                recorded: None,
                allocated: None,
            }),
            peaks: false,
            design_effect: 1.0,
        }
    }

    #[track_caller]
    fn near(actual: Option<(f64, f64)>, expected: (f64, f64)) {
        let (low, high) = actual.expect("an interval");
        assert!(
            (low - expected.0).abs() < 1e-4 && (high - expected.1).abs() < 1e-4,
            "{actual:?} vs {expected:?}"
        );
    }

    #[test]
    fn intervals_of_shares() {
        // Ticks of one each: Wilson's interval of k of n (by hand, z = 1.96: 10 of 100 is
        // 5.5229-17.4366 %, 0 of 100 0-3.6993 %, 100 of 100 96.3007-100 %).
        let ticks = measure("PERF_TICKS", 100, 100, None);
        assert_eq!(ticks.sample_size(), Some(100.0));
        near(ticks.interval(10, 10), (5.5229, 17.4366));
        near(ticks.interval(0, 0), (0.0, 3.6993));
        near(ticks.interval(100, 100), (96.3007, 100.0));
        // Samples of 2 ticks among samples of 1: 20 samples of 100 (13.3367-28.8829 %)
        // are 40 ticks of 120, a third: the interval times (1/3) / (20/100).
        let weighted = measure("PERF_TICKS", 100, 120, None);
        near(weighted.interval(40, 20), (22.2278, 48.1382));
        // Events too; the high end stays at most 100 %.
        let events = measure("PERF_PAGE_FAULTS", 10, 1000, None);
        let (_, high) = events.interval(990, 9).unwrap();
        assert!(high <= 100.0, "{high}");
        // Sampled bytes: 100,000 bytes every 1,000 are 100 samples; 10,000 bytes are 10
        // of them, whatever the allocations' count.
        let sampled = measure("MEM_LIVE", 7, 100_000, Some(1000.0));
        assert_eq!(sampled.sample_size(), Some(100.0));
        near(sampled.interval(10_000, 1), (5.5229, 17.4366));
        // No interval: exact bytes, peaks, maxima, counters of calls, nothing sampled.
        assert_eq!(measure("MEM_LIVE", 7, 100_000, None).interval(10, 1), None);
        let peaks = Measure {
            peaks: true,
            ..sampled.clone()
        };
        assert_eq!(peaks.interval(10_000, 1), None);
        assert_eq!(
            measure("MEM_MAX", 7, 100_000, Some(1000.0)).sample_size(),
            None
        );
        assert_eq!(measure("FD_USED", 7, 100, None).sample_size(), None);
        assert_eq!(measure("PERF_TICKS", 0, 0, None).interval(0, 0), None);
    }

    #[test]
    fn the_total_line_says_the_error_of_a_tenth() {
        // 2,000 samples: 8.7609-11.3924 %, ±1.3 points; under 1,000 the interval itself.
        let big = measure("PERF_TICKS", 2000, 2000, None);
        assert_eq!(
            big.total_line(),
            "PERF_TICKS: 2000 samples, 2000 ticks of 4.000 ms = 8.000 s; a 10 % share is ±1.3 points (95 %)"
        );
        assert_eq!(
            measure("PERF_PAGE_FAULTS", 100, 12_345, None).total_line(),
            "PERF_PAGE_FAULTS: 100 samples, 12,345 events; a 10 % share is 5.5-17.4 % (95 %)"
        );
        assert_eq!(
            measure("MEM_LIVE", 7, 100_000, Some(1000.0)).total_line(),
            "MEM_LIVE: 7 blocks, 97.7 KiB live (100,000 bytes); estimates from sampling every 1000 B allocated on average; as 100 samples of 1000 B, a 10 % share is 5.5-17.4 % (95 %)"
        );
        // Exact: the line as before.
        assert_eq!(
            measure("MEM_LIVE", 7, 100_000, None).total_line(),
            "MEM_LIVE: 7 blocks, 97.7 KiB live (100,000 bytes)"
        );
        assert_eq!(format_interval(Some((5.5229, 17.4366))), "[5.5-17.4]");
        assert_eq!(format_interval(None), "");
    }

    #[test]
    fn every_report_survives_deep_recursion() {
        // 200000 nested calls of one function, then a leaf with 2 ticks: no report walks
        // the tree recursively, and each finds the same total.
        let mut dump =
            b"P=(HEX ID=1 N=(deep) T=0.004000)\nC1 FN0=(F0=(/deep.py)+1 N=(f))+0\n".to_vec();
        for depth in 2..=200_000u32 {
            dump.extend_from_slice(format!("C{depth:x} FN0+0\n").as_bytes());
        }
        dump.extend_from_slice(b"C30d41 FN1=(F0+5 N=(g))+0 V0=(PERF_TICKS):(1,2,2)\n");
        let profile = crate::view::python(&load("deep.txt", &dump));
        let options = Options::default();
        let mut out = Vec::new();
        let tree = tree::compute(&profile, &options).unwrap();
        assert_eq!(tree.calls.nodes.len(), 200_001);
        tree::write(&profile, &tree, &mut out).unwrap();
        let text = text::compute(&profile, &options).unwrap();
        assert_eq!(text.entries[0].cumulative, 2);
        text::write(&profile, &text, &mut out).unwrap();
        let stacks = collapsed::compute(&profile, &options).unwrap();
        assert_eq!(stacks.stacks.len(), 1);
        assert_eq!(stacks.stacks[0].0.matches(';').count(), 200_000);
        let file = speedscope::compute(&profile, &options).unwrap();
        assert_eq!(file.profiles[0].samples[0].len(), 200_001);
        let document = json::compute(&profile, &options).unwrap();
        assert_eq!(document.tree.last().unwrap().depth, 200_000);
        json::write(&document, &mut out).unwrap();
        let graph = flamegraph::compute(&profile, &options).unwrap();
        assert_eq!(graph.stacks.stacks[0].1, 2);
    }
}

/// What the tests of the reports share.
#[cfg(test)]
pub(crate) mod testing {
    use crate::parse::load_reader;
    use crate::profile::Profile;

    /// The profile of dump `text`, read as a file called `name`.
    pub fn load(name: &str, text: &[u8]) -> Profile {
        let mut profile = Profile::new();
        load_reader(&mut profile, name, text).unwrap();
        profile
    }

    /// `report` on `profile` as [`super::write`] writes it.
    pub fn text<T: super::Item>(profile: &Profile, report: &super::Report<T>) -> String {
        let mut out = Vec::new();
        super::write(profile, report, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }
}
