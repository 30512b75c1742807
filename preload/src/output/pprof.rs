//! A window's profile as pprof (`profile.proto`, [`pyigprof_pprof`]), for the pushes to
//! Grafana Pyroscope's ingest API ([`crate::output::push`]).
//!
//! - One `Sample` per trace-tree node with counts of its own, its stack innermost frame
//!   first. Values, by what the run samples (`sample_type`):
//!   - CPU or wall time: `samples/count`, the node's *ticks* — each one period of time, so
//!     that Pyroscope's `sampled` units (samples / sample rate) give its seconds — then
//!     `cpu/nanoseconds` (or `wall/nanoseconds`), ticks × the period. `period_type`
//!     `cpu/nanoseconds` (`wall/…`), `period` the tick period in ns. A sampled event
//!     (`PYIGPROF_EVENT`) gives `samples/count` and `<event>/count` instead (period 1);
//!   - memory (`PYIGPROF_PROFILE=mem`): `alloc_objects/count` and `alloc_space/bytes`
//!     (`MEM_TOTAL`: the window's allocations), `inuse_objects/count` and
//!     `inuse_space/bytes` (`MEM_LIVE`: live at the window's end), as Go's heap profiles
//!     name them.
//! - A `Location` per Python function and line (the function's first line plus the node's
//!   offset) and per native function (its start address, line 0); a `Function` per
//!   function with its name, file (source or object) and, for Python, its first line. No
//!   mappings: the locations are symbolized.
//! - `time_nanos` the window's start, `duration_nanos` its length; a comment says the
//!   program, pid and window.
//!
//! [`sample_type_config`] is the JSON Pyroscope takes beside such a profile to name and
//! unit each sample type (its HTTP API page, "Sample Type Configuration").

use crate::output::dump::Profile;
use pyigprof_pprof::{FunctionInfo, Places, PprofProfile, Sample, Strings, ValueType};

/// What a window covers: wall-clock start and end, ns since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Start, ns since the epoch.
    pub start_ns: u64,
    /// End, ns since the epoch.
    pub end_ns: u64,
}

/// The sample types a profile's values are given in, in order: `(type, unit)`.
pub fn sample_types(
    profile: &Profile,
    wall: bool,
    cpu: bool,
    memory: bool,
) -> Vec<(String, &'static str)> {
    let mut types = Vec::new();
    if cpu {
        types.push(("samples".to_string(), "count"));
        match event_name(profile.counter) {
            None => types.push((if wall { "wall" } else { "cpu" }.to_string(), "nanoseconds")),
            Some(event) => types.push((event, "count")),
        }
    }
    if memory {
        types.extend([
            ("alloc_objects".to_string(), "count"),
            ("alloc_space".to_string(), "bytes"),
            ("inuse_objects".to_string(), "count"),
            ("inuse_space".to_string(), "bytes"),
        ]);
    }
    types
}

/// A sampled event's name in lower case without `PERF_` (`page_faults` for
/// `PERF_PAGE_FAULTS`); `None` for time (`PERF_TICKS`).
fn event_name(counter: &str) -> Option<String> {
    (counter != "PERF_TICKS").then(|| counter.trim_start_matches("PERF_").to_ascii_lowercase())
}

/// `profile` (a window's, [`crate::output::dump::Profile::collect_window`]) as pprof:
/// time in `wall` or CPU time, its samples if `cpu`, its memory counters if `memory`.
pub fn encode(profile: &Profile, span: Span, wall: bool, cpu: bool, memory: bool) -> PprofProfile {
    let mut strings = Strings::new();
    let types = sample_types(profile, wall, cpu, memory);
    let sample_type: Vec<ValueType> = types
        .iter()
        .map(|(kind, unit)| ValueType {
            r#type: strings.get(kind),
            unit: strings.get(unit),
        })
        .collect();
    let time = cpu && event_name(profile.counter).is_none();
    let (period_type, period) = if cpu {
        (
            Some(sample_type[1].clone()),
            if time { profile.period_ns as i64 } else { 1 },
        )
    } else {
        (
            Some(ValueType {
                r#type: strings.get("space"),
                unit: strings.get("bytes"),
            }),
            1,
        )
    };
    let comment = vec![strings.get(&format!(
        "{} (pid {}): pyigprof window {:.3} s",
        String::from_utf8_lossy(&profile.program),
        profile.pid,
        span.end_ns.saturating_sub(span.start_ns) as f64 / 1e9
    ))];

    let mut places = Places::default();
    let mut samples = Vec::new();
    // Depth-first from the root's children, with each node's stack of location ids
    // (outermost first).
    let mut path: Vec<u64> = Vec::new();
    let mut stack: Vec<(u32, usize)> = profile.nodes[0]
        .children
        .iter()
        .rev()
        .map(|&c| (c, 0))
        .collect();
    while let Some((index, depth)) = stack.pop() {
        let node = &profile.nodes[index as usize];
        let python = profile.python.contains(&node.function);
        let function = &profile.functions[node.function as usize];
        let line = if python {
            function.start.saturating_add(node.offset) as i64
        } else {
            0
        };
        let address = if python { 0 } else { function.start };
        let location = places.location(
            &mut strings,
            u64::from(node.function),
            line,
            address,
            || {
                let name = String::from_utf8_lossy(&function.name).into_owned();
                FunctionInfo {
                    system_name: name.clone(),
                    name,
                    filename: String::from_utf8_lossy(&function.file).into_owned(),
                    start_line: if python { function.start as i64 } else { 0 },
                }
            },
        );
        path.truncate(depth);
        path.push(location);
        let mut value = Vec::with_capacity(types.len());
        if cpu {
            let ticks = node.ticks as i64;
            value.push(ticks);
            value.push(if time {
                ticks.saturating_mul(profile.period_ns as i64)
            } else {
                ticks
            });
        }
        if memory {
            let m = &node.memory;
            value.extend([
                m.total.0 as i64,
                m.total.1 as i64,
                m.live.0 as i64,
                m.live.1 as i64,
            ]);
        }
        if value.iter().any(|&v| v != 0) {
            samples.push(Sample {
                location_id: path.iter().rev().copied().collect(),
                value,
            });
        }
        stack.extend(node.children.iter().rev().map(|&c| (c, depth + 1)));
    }
    PprofProfile {
        sample_type,
        sample: samples,
        mapping: Vec::new(),
        location: places.locations,
        function: places.functions,
        string_table: strings.table,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: span.start_ns as i64,
        duration_nanos: span.end_ns.saturating_sub(span.start_ns) as i64,
        period_type,
        period,
        comment,
        default_sample_type: 0,
    }
}

/// Pyroscope's sample type configuration for the types of [`sample_types`] (JSON, its
/// HTTP API page): which of them it shows, under which name (the suffix of the
/// application's name: `APP.cpu`, `APP.wall`, `APP.alloc_space`, …), in which units, and
/// how it aggregates them. The nanoseconds types are left out: Pyroscope shows time from
/// the `samples` (ticks) and the period.
pub fn sample_type_config(types: &[(String, &'static str)]) -> String {
    let mut entries = Vec::new();
    for (index, (kind, _)) in types.iter().enumerate() {
        let (display, units, aggregation, sampled) = match kind.as_str() {
            "samples" => {
                // The display name: the next type's (cpu, wall or the event).
                let name = types
                    .get(index + 1)
                    .map_or("cpu", |(next, _)| next.as_str());
                (name, "samples", "sum", true)
            }
            "alloc_objects" => ("alloc_objects", "objects", "sum", false),
            "alloc_space" => ("alloc_space", "bytes", "sum", false),
            "inuse_objects" => ("inuse_objects", "objects", "average", false),
            "inuse_space" => ("inuse_space", "bytes", "average", false),
            _ => continue,
        };
        entries.push(format!(
            "\"{kind}\":{{\"units\":\"{units}\",\"aggregation\":\"{aggregation}\",\"display-name\":\"{display}\",\"sampled\":{sampled}}}"
        ));
    }
    format!("{{{}}}", entries.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::dump::tests::sample_profile;

    #[test]
    fn a_window_is_one_sample_per_node_with_counts_innermost_frame_first() {
        let profile = sample_profile();
        let span = Span {
            start_ns: 1_796_432_523_000_000_000,
            end_ns: 1_796_432_524_500_000_000,
        };
        let pprof = encode(&profile, span, false, true, false);
        let text = |index: i64| pprof.string_table[index as usize].as_str();
        let types: Vec<String> = pprof
            .sample_type
            .iter()
            .map(|t| format!("{}/{}", text(t.r#type), text(t.unit)))
            .collect();
        assert_eq!(types, ["samples/count", "cpu/nanoseconds"]);
        assert_eq!(pprof.period, 4_000_000);
        assert_eq!(pprof.time_nanos, 1_796_432_523_000_000_000);
        assert_eq!(pprof.duration_nanos, 1_500_000_000);
        let stacks = pyigprof_pprof::stack_lines(&pprof);
        // squeeze at app.py lines 7 + 3 and 7 + 4; <module> at 1 + 0x1b; native line 0.
        assert_eq!(
            stacks,
            [
                "squeeze:10;<module>:28;__libc_start_main:0 [20, 80000000]",
                "squeeze:11;<module>:28;__libc_start_main:0 [1, 4000000]",
            ]
        );
        let libc = pprof
            .function
            .iter()
            .find(|f| text(f.name) == "__libc_start_main")
            .unwrap();
        assert_eq!(text(libc.filename), "/lib/libc.so.6");
        assert_eq!(pprof.location[libc.id as usize - 1].address, 0x271c0);
        // Encoded and read back whole.
        assert_eq!(
            pyigprof_pprof::gunzipped(&pyigprof_pprof::gzipped(&pprof)).unwrap(),
            pprof
        );
    }

    #[test]
    fn pyroscope_is_told_each_sample_types_name_and_units() {
        let profile = sample_profile();
        let wall = sample_types(&profile, true, true, true);
        assert_eq!(
            sample_type_config(&wall),
            "{\"samples\":{\"units\":\"samples\",\"aggregation\":\"sum\",\"display-name\":\"wall\",\"sampled\":true},\
             \"alloc_objects\":{\"units\":\"objects\",\"aggregation\":\"sum\",\"display-name\":\"alloc_objects\",\"sampled\":false},\
             \"alloc_space\":{\"units\":\"bytes\",\"aggregation\":\"sum\",\"display-name\":\"alloc_space\",\"sampled\":false},\
             \"inuse_objects\":{\"units\":\"objects\",\"aggregation\":\"average\",\"display-name\":\"inuse_objects\",\"sampled\":false},\
             \"inuse_space\":{\"units\":\"bytes\",\"aggregation\":\"average\",\"display-name\":\"inuse_space\",\"sampled\":false}}"
        );
    }
}
