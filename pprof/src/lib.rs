//! The subset of pprof's `profile.proto`
//! (<https://github.com/google/pprof/blob/main/proto/profile.proto>) that pyigprof writes:
//! the analyser's `--pprof` export and the library's pushes to Grafana Pyroscope
//! (`PYIGPROF_PUSH`) build a [`PprofProfile`] and [`gzipped`] encodes it. The structs
//! use prost's derive (no code generation at build time); they decode real pprof files
//! too (unknown fields are skipped).

use std::collections::HashMap;
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
pub use prost::Message;

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct PprofProfile {
    /// What each value of a sample is.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples: one per distinct stack.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Mappings (none written).
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Locations, referred to by id from samples.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions, referred to by id from locations' lines.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string, referred to by index; index 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regular expression of frames to drop (index into `string_table`; 0: none).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regular expression of frames to keep (index into `string_table`; 0: none).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When the profile was taken, ns since the epoch (0: unknown).
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long the profile took, ns (0: unknown).
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What one sampling period measures.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling period, in `period_type`'s unit (ns for ticks).
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (indices into `string_table`).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The index of the sample type shown by default (into `string_table`).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`: a type and a unit, as indices into the string table.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// E.g. `cpu`.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// E.g. `nanoseconds`.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`: a stack and its values.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Location ids, innermost frame first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per `sample_type`.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
}

/// `Mapping` (decoded from other files; never written here).
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    /// Its id, from 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The object file (index into the string table).
    #[prost(int64, tag = "5")]
    pub filename: i64,
}

/// `Location`: a place in the code.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Its id, from 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its mapping (0: none).
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The address: a native function's start (ELF virtual address), 0 for Python.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// The function and line (one: no inlining information).
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// `Line`: a function and a line in it.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// The line number (0 for native code).
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Its id, from 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its name as shown (index into the string table).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Its name as in the dump, e.g. mangled (index into the string table).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Its file (index into the string table).
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// Its first line (Python), 0 for native code.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// The strings of a profile, each stored once.
#[derive(Default)]
pub struct Strings {
    /// The strings by index; index 0 is "".
    pub table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    /// A table holding "" at index 0, as the format requires.
    pub fn new() -> Self {
        let mut strings = Strings::default();
        strings.get("");
        strings
    }

    /// The index of `text`, added if new.
    pub fn get(&mut self, text: &str) -> i64 {
        if let Some(&id) = self.index.get(text) {
            return id;
        }
        let id = self.table.len() as i64;
        self.table.push(text.to_string());
        self.index.insert(text.to_string(), id);
        id
    }
}

/// `profile` encoded and gzip-compressed, as pprof files and Pyroscope's ingest API take it.
pub fn gzipped(profile: &PprofProfile) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    // Writing to a Vec cannot fail.
    encoder
        .write_all(&profile.encode_to_vec())
        .and_then(|()| encoder.finish())
        .expect("gzip into memory")
}

/// What a [`Function`] is called and where it is: its name as shown, its name in the
/// profile it comes from (e.g. mangled), its file (a Python source or a native object) and
/// its first line (Python; 0 for native code).
pub struct FunctionInfo {
    pub name: String,
    pub system_name: String,
    pub filename: String,
    pub start_line: i64,
}

/// The functions and locations of a profile being built, each added once: a location per
/// function and line (Python) or per function (native, at its start `address`, line 0).
#[derive(Default)]
pub struct Places {
    /// The functions, ids from 1 in order.
    pub functions: Vec<Function>,
    /// The locations, ids from 1 in order.
    pub locations: Vec<Location>,
    function_ids: HashMap<u64, u64>,
    location_ids: HashMap<(u64, i64), u64>,
}

impl Places {
    /// The id of the location of `line` in the function the caller knows as `key`, at
    /// `address` (0 for Python code); the function is added the first time, as
    /// `describe` says.
    pub fn location(
        &mut self,
        strings: &mut Strings,
        key: u64,
        line: i64,
        address: u64,
        describe: impl FnOnce() -> FunctionInfo,
    ) -> u64 {
        let functions = &mut self.functions;
        let function_id = *self.function_ids.entry(key).or_insert_with(|| {
            let info = describe();
            let id = functions.len() as u64 + 1;
            functions.push(Function {
                id,
                name: strings.get(&info.name),
                system_name: strings.get(&info.system_name),
                filename: strings.get(&info.filename),
                start_line: info.start_line,
            });
            id
        });
        let locations = &mut self.locations;
        *self.location_ids.entry((key, line)).or_insert_with(|| {
            let id = locations.len() as u64 + 1;
            locations.push(Location {
                id,
                mapping_id: 0,
                address,
                line: vec![Line { function_id, line }],
            });
            id
        })
    }
}

/// `bytes` (a gzip-compressed `profile.proto` message, as [`gzipped`] writes it) decoded.
///
/// # Errors
/// What is wrong: not gzip, or not a profile.
pub fn gunzipped(bytes: &[u8]) -> Result<PprofProfile, String> {
    let mut plain = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut plain)
        .map_err(|e| format!("not gzip: {e}"))?;
    PprofProfile::decode(&plain[..]).map_err(|e| format!("not a pprof profile: {e}"))
}

/// Each sample of `profile` as a line: its frames innermost first as `name:line`, joined
/// by `;`, then its values (`fib:12;<module>:5;main:0 [2, 8000000]`), in the profile's
/// order: for tests and for reading a profile by eye.
pub fn stack_lines(profile: &PprofProfile) -> Vec<String> {
    let text = |index: i64| profile.string_table[index as usize].as_str();
    let frame = |id: u64| {
        let line = &profile.location[id as usize - 1].line[0];
        let function = &profile.function[line.function_id as usize - 1];
        format!("{}:{}", text(function.name), line.line)
    };
    profile
        .sample
        .iter()
        .map(|sample| {
            let frames: Vec<String> = sample.location_id.iter().map(|&id| frame(id)).collect();
            format!("{} {:?}", frames.join(";"), sample.value)
        })
        .collect()
}

/// `noun` as it follows the number `count`: as given (singular) for 1 and -1, with an `s`
/// otherwise (`1 sample`, `2 samples`, `0 samples`). Here because this crate is the one the
/// library's summary lines, the analyser and the command all build on.
pub fn plural<N: TryInto<i64>>(count: N, noun: &str) -> String {
    match count.try_into() {
        Ok(1 | -1) => noun.to_string(),
        _ => format!("{noun}s"),
    }
}

#[cfg(test)]
mod plural_tests {
    use super::plural;

    #[test]
    fn singular_for_one_only() {
        assert_eq!(plural(1u64, "sample"), "sample");
        assert_eq!(plural(-1i64, "tick"), "tick");
        assert_eq!(plural(0usize, "thread"), "threads");
        assert_eq!(plural(2u32, "call-tree line"), "call-tree lines");
        assert_eq!(plural(u64::MAX, "sample"), "samples");
    }
}
