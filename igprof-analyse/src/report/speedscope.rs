//! `--speedscope FILE.json`: the profile in speedscope's file format
//! (<https://www.speedscope.app/file-format-schema.json>), to open in
//! <https://www.speedscope.app> or the `speedscope` command.
//!
//! One *sampled* profile: `shared.frames` holds each function once (`name`, `file`, and
//! for Python code `line`, its first line); each sample is a distinct stack of the
//! [`CallTree`] with a self amount, as frame indices from the outermost frame to the
//! innermost, and its weight is that amount: seconds (amount × T) for tick counters,
//! bytes (unit `bytes`) for the memory counters (`MEM_*`), the raw amount otherwise
//! (unit `none`: events for the sampled event counters such as `PERF_PAGE_FAULTS`, which
//! the profile's name says, as for any other counter). The weights sum to the
//! counter's total (of its positive amounts), which is also the profile's `endValue`.
//! As stacks are merged, speedscope's "Time Order" view shows them in call-tree order,
//! not in time; "Left Heavy" and "Sandwich" are exact.

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use super::{header_line, CallTree, Measure, Options, Unit};
use crate::error::Error;
use crate::profile::Profile;
use crate::symbol::Label;

/// The JSON schema every speedscope file names.
pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

/// A speedscope file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct File {
    /// Always [`SCHEMA`].
    #[serde(rename = "$schema")]
    pub schema: String,
    /// What the profiles share: the frames.
    pub shared: Shared,
    /// One sampled profile.
    pub profiles: Vec<Sampled>,
    /// The name shown: the report's header line.
    pub name: String,
    /// The profile shown first: 0.
    #[serde(rename = "activeProfileIndex")]
    pub active_profile_index: usize,
    /// `pyigprof-analyse <version>`.
    pub exporter: String,
}

/// The frames of a speedscope file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shared {
    /// Every function of the samples, once.
    pub frames: Vec<Frame>,
}

/// A function as speedscope shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// The function's name (demangled for native code, qualified for Python).
    pub name: String,
    /// Its file: the Python source, or the native object's path.
    pub file: String,
    /// For Python code, the function's first line.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub line: Option<i64>,
}

/// A speedscope sampled profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sampled {
    /// Always `sampled`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The counter's name, e.g. `PERF_TICKS`.
    pub name: String,
    /// The unit of the weights: `seconds`, `bytes` or `none`.
    pub unit: String,
    /// 0.
    #[serde(rename = "startValue")]
    pub start_value: f64,
    /// The sum of the weights.
    #[serde(rename = "endValue")]
    pub end_value: f64,
    /// Each stack: indices into [`Shared::frames`], outermost frame first.
    pub samples: Vec<Vec<usize>>,
    /// The weight of each stack, in `unit`.
    pub weights: Vec<f64>,
}

/// Computes the speedscope file of `options.counter` in `profile`.
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`. A profile
/// without any counter gives a file without samples.
pub fn compute(profile: &Profile, options: &Options) -> Result<File, Error> {
    let (measure, counter) = Measure::select(profile, &options.counter)?;
    let tree = CallTree::of(profile, counter);
    let (unit, scale) = match measure.unit {
        Unit::Ticks => ("seconds", measure.tick_period),
        Unit::Bytes => ("bytes", 1.0),
        // speedscope has no unit for events: the profile is named after the counter.
        Unit::Events | Unit::Amount => ("none", 1.0),
    };
    let mut frames: Vec<Frame> = Vec::new();
    let mut frame_of: Vec<Option<usize>> = vec![None; profile.functions().len()];
    let mut samples = Vec::new();
    let mut weights = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    let mut sum = 0i64;
    for id in tree.preorder() {
        let node = &tree.nodes[id as usize];
        stack.truncate(node.depth);
        let frame = *frame_of[node.function as usize].get_or_insert_with(|| {
            let function = profile.function(node.function);
            let label = Label::of(profile, function);
            frames.push(Frame {
                name: label.name,
                file: profile.file(function.file).to_string(),
                line: label.python.then_some(function.start),
            });
            frames.len() - 1
        });
        stack.push(frame);
        let amount = node.self_values.amount;
        if amount > 0 {
            samples.push(stack.clone());
            weights.push(amount as f64 * scale);
            sum = sum.saturating_add(amount);
        }
    }
    Ok(File {
        schema: SCHEMA.to_string(),
        shared: Shared { frames },
        profiles: vec![Sampled {
            kind: "sampled".to_string(),
            name: measure.counter.clone(),
            unit: unit.to_string(),
            start_value: 0.0,
            end_value: sum as f64 * scale,
            samples,
            weights,
        }],
        name: header_line(profile),
        active_profile_index: 0,
        exporter: format!("{} {}", crate::error::PROGRAM, env!("CARGO_PKG_VERSION")),
    })
}

/// Writes `file` as JSON.
///
/// # Errors
/// Those of `out`.
pub fn write(file: &File, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer(&mut *out, file).map_err(io::Error::from)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::super::testing::load;
    use super::*;

    const RECURSIVE: &[u8] = include_bytes!("../../tests/data/recursive-hex.txt");

    #[test]
    fn recursive_dump() {
        let file = compute(&load("rec.txt", RECURSIVE), &Options::default()).unwrap();
        let names: Vec<&str> = file.shared.frames.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "__libc_start_main",
                "<module>",
                "fib",
                "deflate_slow",
                "foo::bar()",
                "std::rt::lang_start",
                "deflate"
            ]
        );
        assert_eq!(file.shared.frames[2].line, Some(10));
        assert_eq!(file.shared.frames[2].file, "/work/rec.py");
        assert_eq!(file.shared.frames[3].line, None);
        let profile = &file.profiles[0];
        assert_eq!(
            profile.samples,
            [
                vec![0, 1, 2],
                vec![0, 1, 2, 2],
                vec![0, 1, 2, 2, 2],
                vec![0, 1, 2, 2, 2, 3],
                vec![0, 1, 4],
                vec![5, 6],
            ]
        );
        // Ticks of 4 ms: 3, 1, 4, 8, 4, 4.
        let expected = [0.012, 0.004, 0.016, 0.032, 0.016, 0.016];
        for (weight, expected) in profile.weights.iter().zip(expected) {
            assert!((weight - expected).abs() < 1e-12, "{weight}");
        }
        assert!((profile.end_value - 0.096).abs() < 1e-12);
        assert_eq!(profile.unit, "seconds");
    }

    #[test]
    fn memory_counters_weigh_bytes() {
        let profile = load(
            "mem.txt",
            b"P=(ID=7 N=(app) T=0.010000)
C1 FN0=(F0=(app)+100 N=(main))+5 V0=(MEM_TOTAL):(1,100,100)
C2 FN1=(F0+200 N=(alloc))+0 V0:(2,722,700)
",
        );
        let options = Options {
            counter: "MEM_TOTAL".into(),
            ..Options::default()
        };
        let file = compute(&profile, &options).unwrap();
        assert_eq!(file.profiles[0].unit, "bytes");
        assert_eq!(file.profiles[0].weights, [100.0, 722.0]);
        assert_eq!(file.profiles[0].end_value, 822.0);
    }
}
