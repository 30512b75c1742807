//! `--pprof FILE`: the profile as a gzip-compressed `profile.proto` message
//! (<https://github.com/google/pprof/blob/main/proto/profile.proto>), for `pprof`
//! (`go tool pprof -http=: FILE`), Grafana Pyroscope, Speedscope and other tools.
//!
//! - One [`Sample`] per distinct stack with values `[samples, cpu nanoseconds]`
//!   (`sample_type` `samples/count` and `cpu/nanoseconds`, `period_type`
//!   `cpu/nanoseconds`, `period` = the tick period in ns). For the memory counters
//!   `[count, bytes]` as Go's heap profiles name them: `alloc_objects/count` and
//!   `alloc_space/bytes` for `MEM_TOTAL`, `inuse_objects/count` and `inuse_space/bytes`
//!   for `MEM_LIVE` and `MEM_LIVE_PEAK`, `alloc_objects/count` and
//!   `max_alloc_space/bytes` for `MEM_MAX`, `calls/count` and `<counter>/bytes` for other
//!   `MEM_*` counters; `period_type` `space/bytes`, `period` the mean bytes between
//!   recorded allocations (1 when every allocation is recorded). For the sampled event
//!   counters `[samples, events]`: `samples/count` and `<event>/count`, the event
//!   named in lower case without `PERF_` (`page_faults` for `PERF_PAGE_FAULTS`:
//!   [`super::events::event_name`]); `period_type` the event's, `period` the mean
//!   number of events per sample (rounded, at least 1). For other counters:
//!   `[calls, amount]` (`calls/count` and `<counter>/count`; period 1).
//! - A [`Location`] per Python function and line (its [`Line`] has the line being run,
//!   the function's first line plus the node's offset) and per native function (at the
//!   function's start address, line 0: native offsets are merged). Stacks are written
//!   innermost frame first, as the format requires.
//! - A [`Function`] per function: its name as reports show it (`system_name`: as in
//!   the dump, e.g. mangled), its file (Python source or native object) and, for
//!   Python, its first line (`start_line`).
//! - No mappings (`mapping_id` 0): the locations are already symbolized.
//!
//! The structs are the subset of `profile.proto` written here, with prost's derive (no
//! code generation at build time); they decode real pprof files too (unknown fields are
//! skipped).

use std::collections::HashMap;
use std::io::{self, Write};

use pyigprof_pprof::{FunctionInfo, Places, PprofProfile, Sample, Strings, ValueType};

use super::memory::{self, Kind};
use super::{header_line, Measure, Options, Unit};
use crate::error::Error;
use crate::profile::{NodeId, Profile};
use crate::symbol::Label;

/// The sample types of memory counter `counter`: its count and its bytes, named as Go's
/// heap profiles name them where they mean the same (`alloc_objects`/`alloc_space` for
/// `MEM_TOTAL`, `inuse_objects`/`inuse_space` for `MEM_LIVE` and `MEM_LIVE_PEAK`).
fn memory_types(counter: &str) -> [(&str, &'static str); 2] {
    match memory::Kind::of(counter) {
        Some(Kind::Total) => [("alloc_objects", "count"), ("alloc_space", "bytes")],
        Some(Kind::Live | Kind::LivePeak) => [("inuse_objects", "count"), ("inuse_space", "bytes")],
        Some(Kind::Max) => [("alloc_objects", "count"), ("max_alloc_space", "bytes")],
        Some(Kind::Other) | None => [("calls", "count"), (counter, "bytes")],
    }
}

/// Computes the pprof profile of `options.counter` in `profile` (the limit and order do
/// not apply).
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`. A profile
/// without any counter gives a profile without samples.
pub fn compute(profile: &Profile, options: &Options) -> Result<PprofProfile, Error> {
    let (measure, counter) = Measure::select(profile, &options.counter)?;
    let mut strings = Strings::new();
    let event = super::events::event_name(&measure.counter);
    // Ticks: values [samples, ns], amount × ns per tick.
    let (types, scale, period) = match measure.unit {
        Unit::Ticks => {
            let period = (measure.tick_period * 1e9).round() as i64;
            (
                [("samples", "count"), ("cpu", "nanoseconds")],
                period,
                period,
            )
        }
        Unit::Bytes => {
            // As Go's heap profiles: the period is the mean bytes between samples.
            let rate = measure.rate_bytes().unwrap_or(1.0).round() as i64;
            (memory_types(&measure.counter), 1, rate)
        }
        Unit::Events => (
            [
                ("samples", "count"),
                (event.as_deref().unwrap_or(&measure.counter), "count"),
            ],
            1,
            super::events::mean_period(measure.total.count, measure.total.amount),
        ),
        Unit::Amount => (
            [("calls", "count"), (measure.counter.as_str(), "count")],
            1,
            1,
        ),
    };
    let sample_type: Vec<ValueType> = types
        .iter()
        .map(|(kind, unit)| ValueType {
            r#type: strings.get(kind),
            unit: strings.get(unit),
        })
        .collect();
    let period_type = Some(match measure.unit {
        Unit::Bytes => ValueType {
            r#type: strings.get("space"),
            unit: strings.get("bytes"),
        },
        Unit::Ticks | Unit::Events | Unit::Amount => sample_type[1].clone(),
    });
    let default_sample_type = sample_type[1].r#type;
    let comment = vec![
        strings.get(&header_line(profile)),
        strings.get(&measure.total_line()),
    ];

    let mut places = Places::default();
    // Distinct stacks: (caller's stack, location) → stack id; per stack its values.
    let mut stack_ids: HashMap<(Option<u32>, u64), u32> = HashMap::new();
    let mut stacks: Vec<(Option<u32>, u64)> = Vec::new();
    let mut values: Vec<(i64, i64)> = Vec::new();
    let mut stack_of: Vec<u32> = Vec::with_capacity(profile.nodes().len());
    if let Some(counter) = counter {
        for node in profile.nodes() {
            let function = profile.function(node.function);
            let python = profile.is_python_code(function.file);
            let line = if python {
                function.start.saturating_add(node.offset)
            } else {
                0
            };
            let address = if python { 0 } else { function.start as u64 };
            let location = places.location(
                &mut strings,
                u64::from(node.function),
                line,
                address,
                || FunctionInfo {
                    name: Label::of(profile, function).name,
                    system_name: function.name.to_string(),
                    filename: profile.file(function.file).to_string(),
                    start_line: if python { function.start } else { 0 },
                },
            );
            let caller = node.parent.map(|parent: NodeId| stack_of[parent as usize]);
            let next = stacks.len() as u32;
            let stack = *stack_ids.entry((caller, location)).or_insert_with(|| {
                stacks.push((caller, location));
                values.push((0, 0));
                next
            });
            stack_of.push(stack);
            let own = node.value(counter);
            let slot = &mut values[stack as usize];
            slot.0 = slot.0.saturating_add(own.count);
            slot.1 = slot.1.saturating_add(own.amount.saturating_mul(scale));
        }
    }
    let sample = stacks
        .iter()
        .zip(&values)
        .enumerate()
        .filter(|(_, (_, &(count, amount)))| count != 0 || amount != 0)
        .map(|(index, (_, &(count, amount)))| {
            let mut location_id = Vec::new();
            let mut at = Some(index as u32);
            while let Some(stack) = at {
                let (caller, location) = stacks[stack as usize];
                location_id.push(location);
                at = caller;
            }
            Sample {
                location_id,
                value: vec![count, amount],
            }
        })
        .collect();
    Ok(PprofProfile {
        sample_type,
        sample,
        mapping: Vec::new(),
        location: places.locations,
        function: places.functions,
        string_table: strings.table,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: 0,
        duration_nanos: 0,
        period_type,
        period,
        comment,
        default_sample_type,
    })
}

/// Writes `profile` encoded and gzip-compressed ([`pyigprof_pprof::gzipped`]).
///
/// # Errors
/// Those of `out`.
pub fn write(profile: &PprofProfile, out: &mut dyn Write) -> io::Result<()> {
    out.write_all(&pyigprof_pprof::gzipped(profile))
}

#[cfg(test)]
mod tests {
    use super::super::testing::load;
    use super::*;

    const RECURSIVE: &[u8] = include_bytes!("../../tests/data/recursive-hex.txt");

    #[test]
    fn recursive_dump_round_trip() {
        let profile = compute(&load("rec.txt", RECURSIVE), &Options::default()).unwrap();
        let mut bytes = Vec::new();
        write(&profile, &mut bytes).unwrap();
        let back = pyigprof_pprof::gunzipped(&bytes).unwrap();
        assert_eq!(back, profile);
        let text = |index: i64| back.string_table[index as usize].as_str();
        assert_eq!(text(back.sample_type[1].r#type), "cpu");
        assert_eq!(text(back.sample_type[1].unit), "nanoseconds");
        assert_eq!(back.period, 4_000_000);
        // Every stack with samples, innermost first, as name:line.
        let mut stacks = pyigprof_pprof::stack_lines(&back);
        stacks.sort();
        assert_eq!(
            stacks,
            [
                "deflate:0;std::rt::lang_start:0 [1, 16000000]",
                "deflate_slow:0;fib:12;fib:13;fib:12;<module>:5;__libc_start_main:0 [4, 32000000]",
                "fib:12;<module>:5;__libc_start_main:0 [2, 12000000]",
                "fib:12;fib:13;fib:12;<module>:5;__libc_start_main:0 [3, 16000000]",
                "fib:13;fib:12;<module>:5;__libc_start_main:0 [1, 4000000]",
                "foo::bar():0;<module>:5;__libc_start_main:0 [2, 16000000]",
            ]
        );
        let foo = back
            .function
            .iter()
            .find(|f| text(f.name) == "foo::bar()")
            .unwrap();
        assert_eq!(text(foo.system_name), "_ZN3foo3barEv");
        assert_eq!(text(foo.filename), "/usr/lib/libc.so.6");
        let fib = back
            .function
            .iter()
            .find(|f| text(f.name) == "fib")
            .unwrap();
        assert_eq!(fib.start_line, 10);
    }
}
