//! The sampled event counters: the profiler's perf-event sampling records, besides CPU
//! time (`PERF_TICKS`), at most one counter of kernel or hardware events named in
//! IgProf's style `PERF_<EVENT>`: `PERF_PAGE_FAULTS`, `PERF_CONTEXT_SWITCHES`,
//! `PERF_CPU_MIGRATIONS`, `PERF_MINOR_FAULTS`, `PERF_MAJOR_FAULTS`, `PERF_CYCLES`,
//! `PERF_INSTRUCTIONS`, `PERF_CACHE_MISSES`, `PERF_CACHE_REFERENCES`,
//! `PERF_BRANCH_MISSES`, `PERF_BRANCHES`, or `PERF_RAW_<hex>` for a raw event.
//!
//! In a node's `V<id>:(count,amount,peak)` of such a counter, `count` is the number of
//! samples taken there and `amount` the number of events they stand for: each sample
//! weighs the events the thread counted since its previous sample, so that `amount /
//! count` is the mean sample period, in events; `peak` is the amount. Reports show the
//! amounts as numbers of events ([`format_events`]: `12,345`) and the counts as samples
//! ([`super::Unit::Events`]); `--diff` tests the samples, which are what sampling makes
//! Poisson-distributed ([`super::diff`]).

/// Whether the counter called `name` is a sampled event counter: its name starts with
/// `PERF_` and does not end in `_TICKS` (CPU time, [`super::Unit::Ticks`]).
pub fn is_event_counter(name: &str) -> bool {
    name.starts_with("PERF_") && !name.ends_with("_TICKS")
}

/// The event of counter `name` in lower case, as the exports name it: `page_faults` for
/// `PERF_PAGE_FAULTS`, `raw_1a2b` for `PERF_RAW_1A2B`; `None` when `name` is not an event
/// counter ([`is_event_counter`]).
pub fn event_name(name: &str) -> Option<String> {
    if !is_event_counter(name) {
        return None;
    }
    name.strip_prefix("PERF_").map(str::to_ascii_lowercase)
}

/// The event of counter `name` in words, for a description: `page faults` for
/// `PERF_PAGE_FAULTS`, `raw event 0x1a2b` for `PERF_RAW_1a2b`; `None` when `name` is not
/// an event counter ([`is_event_counter`]).
pub fn event_words(name: &str) -> Option<String> {
    let event = event_name(name)?;
    Some(match event.strip_prefix("raw_") {
        Some(code) => format!("raw event 0x{code}"),
        None => event.replace('_', " "),
    })
}

/// A number of events as reports show it: the exact number with its thousands
/// separated by `,` (`12,345`, `-1,000`); the column heading or the words after it say
/// `events`.
pub fn format_events(events: i64) -> String {
    super::thousands(&events.to_string(), ',')
}

/// The mean number of events per sample (the mean sample period) of `count` samples
/// standing for `amount` events, rounded, at least 1: pprof's `period`.
pub fn mean_period(count: i64, amount: i64) -> i64 {
    if count <= 0 {
        return 1;
    }
    ((amount as f64 / count as f64).round() as i64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_counters_are_perf_counters_other_than_ticks() {
        for name in [
            "PERF_PAGE_FAULTS",
            "PERF_CONTEXT_SWITCHES",
            "PERF_CYCLES",
            "PERF_RAW_1a2b",
        ] {
            assert!(is_event_counter(name), "{name}");
        }
        for name in [
            "PERF_TICKS",
            "PERF_CPU_TICKS",
            "MEM_TOTAL",
            "PAGE_FAULTS",
            "ENERGY",
        ] {
            assert!(!is_event_counter(name), "{name}");
        }
    }

    #[test]
    fn event_counters_have_their_unit() {
        use crate::report::Unit;
        assert_eq!(Unit::of("PERF_PAGE_FAULTS"), Unit::Events);
        assert_eq!(Unit::of("PERF_RAW_c0"), Unit::Events);
        assert_eq!(Unit::of("PERF_TICKS"), Unit::Ticks);
        assert_eq!(Unit::of("MEM_LIVE"), Unit::Bytes);
        // pyigprof's lock profiler's waits are time, in ticks.
        assert_eq!(Unit::of("LOCK_WAIT"), Unit::Ticks);
        assert!(!is_event_counter("LOCK_WAIT"));
        assert_eq!(Unit::of("LOCK_HOLD"), Unit::Ticks);
        assert!(!is_event_counter("LOCK_HOLD"));
        assert_eq!(Unit::of("FD_USED"), Unit::Amount);
        assert_eq!(Unit::Events.name(), "events");
    }

    #[test]
    fn events_are_named_in_lower_case_and_in_words() {
        assert_eq!(
            event_name("PERF_PAGE_FAULTS").as_deref(),
            Some("page_faults")
        );
        assert_eq!(event_name("PERF_RAW_1A2B").as_deref(), Some("raw_1a2b"));
        assert_eq!(event_name("PERF_TICKS"), None);
        assert_eq!(
            event_words("PERF_CONTEXT_SWITCHES").as_deref(),
            Some("context switches")
        );
        assert_eq!(
            event_words("PERF_RAW_1a2b").as_deref(),
            Some("raw event 0x1a2b")
        );
        assert_eq!(event_words("MEM_LIVE"), None);
    }

    #[test]
    fn events_have_their_thousands_separated() {
        assert_eq!(format_events(0), "0");
        assert_eq!(format_events(999), "999");
        assert_eq!(format_events(12_345), "12,345");
        assert_eq!(format_events(-1_000), "-1,000");
        assert_eq!(format_events(12_345_678_901), "12,345,678,901");
    }

    #[test]
    fn the_mean_period_is_events_per_sample() {
        assert_eq!(mean_period(40, 12_345), 309);
        assert_eq!(mean_period(3, 1), 1);
        assert_eq!(mean_period(0, 0), 1);
    }
}
