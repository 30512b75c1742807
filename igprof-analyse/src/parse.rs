//! Streaming reader of IgProf text dumps (docs/dump-format.md, IgProf doc/dump-format).
//!
//! A dump is read line by line, gzip-compressed or not (detected from the magic bytes
//! 1f 8b, never from the file name), and merged into a [`Profile`] as it is read: the
//! memory used is proportional to the distinct call-tree nodes and functions, not to
//! the size of the file.
//!
//! Both variants of the format are accepted:
//! - `P=(HEX ID=4d2 N=(python3 x.py) T=0.004000)`: every integer in hexadecimal
//!   (what pyigprof and current IgProf write);
//! - `P=(ID=32365 N=(ls) T=0.010000)`: every integer in decimal (older IgProf).
//!
//! `T` is a decimal number of seconds per tick in both. Call-tree lines are
//! `C<depth> FN<id>[=(F<fid>[=(<path>)]+<start> N=(<name>))]+<offset>` followed by zero
//! or more ` V<cid>[=(<counter>)]:(<count>,<amount>,<peak>)`, each possibly followed by
//! IgProf leak records `;LK=(0x<address>,<size>)`, which are skipped. After the header, a
//! line starting with `#` is a comment and is skipped (older pyigprof dumps ended with
//! `#pyigprof stats …` comment lines).
//!
//! pyigprof's statistics are depth-1 nodes in the file `[pyigprof]` named
//! `#pyigprof <section> key=value …` ([`crate::profile::Source::statistics`]), not
//! call-tree nodes.
//! When the first call-tree line of a dump is one, the dump is pyigprof's and its names,
//! paths and program are `%XX`-escaped ([`crate::escape`]); in any other dump (IgProf's)
//! they are taken as written.
//!
//! Any input that does not follow the format is reported as an [`Error`]; no input
//! makes the reader panic.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;

use crate::error::{describe_found, Error};
use crate::escape::unescape;
use crate::profile::{CapacityError, CutShort, Ending, Profile, Source, Values};

/// The first two bytes of every gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Reads every dump in `paths`, in order, and merges them into one profile.
///
/// # Errors
/// The first [`Error`] met: a file that cannot be read, is empty, is not valid gzip,
/// does not follow the dump format, or has a tick period different from the first
/// dump's.
pub fn read_profiles<P: AsRef<Path>>(paths: &[P]) -> Result<Profile, Error> {
    let mut profile = Profile::new();
    for path in paths {
        load_path(&mut profile, path.as_ref())?;
    }
    whole(&profile)?;
    Ok(profile)
}

/// Whether every dump of `profile` is whole: the first one cut short
/// ([`Source::cut_short`]) as an error. [`load_reader`] and [`load_path`] read such a dump
/// without a word (a caller that wants what there is can have it); [`read_profiles`]
/// refuses it with this.
///
/// # Errors
/// [`Error::CutShort`] naming the file and the figures.
pub fn whole(profile: &Profile) -> Result<(), Error> {
    match profile
        .sources
        .iter()
        .find(|source| source.cut_short.is_some())
    {
        Some(source) => Err(Error::CutShort {
            file: source.path.clone(),
            what: source.cut_short.expect("found"),
        }),
        None => Ok(()),
    }
}

/// Reads the dump at `path` (plain or gzip) into `profile`. Errors name the file as
/// `path.display()` shows it.
///
/// # Errors
/// See [`read_profiles`]. After an error `profile` may hold part of the file.
pub fn load_path(profile: &mut Profile, path: &Path) -> Result<(), Error> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|error| Error::Io {
        file: name.clone(),
        detail: error.to_string(),
    })?;
    load_reader(profile, &name, file)
}

/// Reads one dump from `reader` into `profile`; `name` is the file name used in
/// [`Profile::sources`] and in error messages. The content is decompressed if it
/// starts with the gzip magic bytes 1f 8b (several concatenated gzip members are read
/// as one stream).
///
/// # Errors
/// See [`read_profiles`]. After an error `profile` may hold part of the dump.
pub fn load_reader<R: Read>(profile: &mut Profile, name: &str, mut reader: R) -> Result<(), Error> {
    let mut head = [0u8; 2];
    let mut filled = 0;
    while filled < head.len() {
        match reader.read(&mut head[filled..]) {
            Ok(0) => break,
            Ok(count) => filled += count,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                return Err(Error::Io {
                    file: name.to_string(),
                    detail: error.to_string(),
                })
            }
        }
    }
    if filled == 0 {
        return Err(Error::Empty {
            file: name.to_string(),
        });
    }
    let whole = io::Cursor::new(head[..filled].to_vec()).chain(reader);
    if head[..filled] == GZIP_MAGIC {
        parse_lines(
            profile,
            name,
            BufReader::new(MultiGzDecoder::new(whole)),
            true,
        )
    } else {
        parse_lines(profile, name, BufReader::new(whole), false)
    }
}

/// Why a line was rejected: the two halves of an [`Error::Syntax`].
#[derive(Debug)]
struct Fail {
    expected: String,
    found: String,
}

impl From<CapacityError> for Fail {
    fn from(_: CapacityError) -> Self {
        Fail {
            expected: "at most 2^32 distinct nodes, functions, files and counters".to_string(),
            found: "more".to_string(),
        }
    }
}

/// Reads all lines of one dump. A dump that stops before its end is read as far as it
/// goes, its [`Source::cut_short`] saying so (after its header: before it, the error
/// stands): a gzip stream that stops in the middle (an error of kind `UnexpectedEof`)
/// is read up to its last whole line, and a last line without its newline that does not
/// follow the format is left out.
fn parse_lines<R: BufRead>(
    profile: &mut Profile,
    name: &str,
    mut reader: R,
    gzip: bool,
) -> Result<(), Error> {
    let mut line = Vec::new();
    let mut number: u64 = 0;
    let mut state: Option<DumpState> = None;
    let mut ending = Ending::LineBoundary;
    loop {
        line.clear();
        let read = match reader.read_until(b'\n', &mut line) {
            Ok(read) => read,
            // The compressed stream stops mid-way: what came before it is read, the line
            // it stops in is not.
            Err(error)
                if gzip && error.kind() == io::ErrorKind::UnexpectedEof && state.is_some() =>
            {
                ending = Ending::Gzip;
                break;
            }
            Err(error) => {
                let detail = error.to_string();
                let file = name.to_string();
                return Err(if gzip {
                    Error::Gzip { file, detail }
                } else {
                    Error::Io { file, detail }
                });
            }
        };
        if read == 0 {
            break;
        }
        number += 1;
        let ended = line.last() == Some(&b'\n');
        if let Some(state) = &mut state {
            state.last_line_ended = ended;
        }
        let text = trim_line(&line);
        let counted = state.as_ref().map(|s| (s.lines, s.tree_lines));
        let result = match &mut state {
            // A comment, e.g. the profiler's own statistics (`#pyigprof stats …`).
            Some(_) if text.first() == Some(&b'#') => Ok(()),
            Some(state) => state.call_line(profile, text),
            None if number == 1 => match unsupported(text) {
                Some(kind) => Err(Fail {
                    expected: "a profile header starting with P=(".to_string(),
                    found: kind.to_string(),
                }),
                None => header(profile, name, text).map(|h| state = Some(DumpState::new(h))),
            },
            None => header(profile, name, text).map(|hex| state = Some(DumpState::new(hex))),
        };
        match (result, &mut state, counted) {
            (Ok(()), _, _) => {}
            // The last line (no newline), cut in the middle: left out, and not counted.
            (Err(_), Some(state), Some((lines, tree_lines))) if !ended => {
                state.lines = lines;
                state.tree_lines = tree_lines;
                ending = Ending::MidLine;
            }
            (Err(fail), _, _) => {
                return Err(Error::Syntax {
                    file: name.to_string(),
                    line: number,
                    expected: fail.expected,
                    found: fail.found,
                })
            }
        }
    }
    if number == 0 {
        return Err(Error::Empty {
            file: name.to_string(),
        });
    }
    if let Some(state) = state {
        let cut_short = state.cut_short(profile, ending);
        if let Some(source) = profile.sources.last_mut() {
            source.cut_short = cut_short;
        }
    }
    Ok(())
}

/// What a file that starts with `first_line` is, when its magic bytes show a kind of
/// file that is not a dump (so that the error says so rather than quoting binary data).
fn unsupported(first_line: &[u8]) -> Option<&'static str> {
    const KINDS: [(&[u8], &str); 6] = [
        (
            b"BZh",
            "bzip2-compressed data (decompress it first: bunzip2)",
        ),
        (
            b"\xfd7zXZ\0",
            "xz-compressed data (decompress it first: unxz)",
        ),
        (
            b"\x28\xb5\x2f\xfd",
            "zstd-compressed data (decompress it first: unzstd)",
        ),
        (b"PK\x03\x04", "a zip archive"),
        (b"\x7fELF", "an ELF binary"),
        (b"SQLite format 3\0", "an SQLite database"),
    ];
    KINDS
        .iter()
        .find(|(magic, _)| first_line.starts_with(magic))
        .map(|(_, kind)| *kind)
}

/// `line` without its newline and trailing blanks (`\r`, spaces, tabs), which can never
/// be part of a name since names are enclosed in parentheses.
fn trim_line(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\n' | b'\r' | b' ' | b'\t') {
        end -= 1;
    }
    &line[..end]
}

/// Parses the `P=(...)` header and records it in `profile.sources`; returns whether
/// the dump is in the HEX variant.
fn header(profile: &mut Profile, name: &str, line: &[u8]) -> Result<(bool, Vec<u8>), Fail> {
    let mut cursor = Cursor::new(line);
    if !cursor.eat(b"P=(") {
        return Err(cursor.fail("a profile header starting with P=("));
    }
    let hex = cursor.eat(b"HEX ");
    cursor.expect(b"ID=", "ID=<pid> in the header")?;
    let pid = cursor.unsigned(hex, "the process id after ID=")?;
    cursor.expect(b" N=(", "\" N=(\" and the program name")?;
    let program = {
        // The program is the longest text followed by ") T=", so that even a raw
        // (unescaped) IgProf command line with parentheses is read whole.
        let rest = cursor.rest();
        let Some(end) = rest.windows(4).rposition(|window| window == b") T=") else {
            return Err(cursor.fail("the program name followed by \") T=\""));
        };
        let program = rest[..end].to_vec();
        cursor.pos += end + 4;
        program
    };
    let tick_period = cursor.decimal("the tick period after T= as a decimal number of seconds")?;
    cursor.expect(b")", "\")\" closing the header")?;
    cursor.expect_end("end of line after the header")?;
    if let Some(first) = profile.sources.first() {
        if first.tick_period != tick_period {
            return Err(Fail {
                expected: format!(
                    "the tick period T={} of {} (profiles with different tick periods cannot be merged)",
                    first.tick_period, first.path
                ),
                found: format!("T={tick_period}"),
            });
        }
    }
    profile.sources.push(Source {
        path: name.to_string(),
        program: String::from_utf8_lossy(&program).into_owned(),
        pid,
        tick_period,
        hex,
        statistics: Vec::new(),
        cut_short: None,
    });
    Ok((hex, program))
}

/// What one dump's lines refer to: its own ids of functions, files and counters, and
/// the node at each depth of the current stack.
struct DumpState {
    hex: bool,
    /// Whether names and paths are `%XX`-escaped: the dump is pyigprof's (its first
    /// call-tree line carries pyigprof's statistics). IgProf writes them raw.
    escaped: bool,
    /// Call-tree lines read so far.
    lines: u64,
    /// Call-tree lines read so far that are not statistics nodes.
    tree_lines: u64,
    /// Whether the last line read ended with a newline (pyigprof ends every line with
    /// one: a dump cut in its last line lacks it).
    last_line_ended: bool,
    /// The sum of the counts read so far, per counter (the profile's [`CounterId`]s).
    ///
    /// [`CounterId`]: crate::profile::CounterId
    counts: HashMap<u32, i64>,
    /// The header's program name as written (decoded once the dump shows it is escaped).
    program: Vec<u8>,
    functions: HashMap<u64, u32>,
    files: HashMap<u64, u32>,
    counters: HashMap<u64, u32>,
    /// `stack[d - 1]` is the last node seen at depth `d`.
    stack: Vec<u32>,
}

impl DumpState {
    fn new((hex, program): (bool, Vec<u8>)) -> Self {
        DumpState {
            hex,
            escaped: false,
            lines: 0,
            tree_lines: 0,
            last_line_ended: true,
            counts: HashMap::new(),
            program,
            functions: HashMap::new(),
            files: HashMap::new(),
            counters: HashMap::new(),
            stack: Vec::new(),
        }
    }

    /// At the end of the dump (the last of `profile.sources`), which stops as `ending`
    /// says: what is missing when its statistics announce more of the call tree
    /// (`tree.lines`, `tree.samples` of the counter `sampling.counter`) than was read or
    /// its last line lacks its newline, when nothing followed its header, or when it
    /// stops in the middle of a line or of its gzip stream.
    fn cut_short(&self, profile: &Profile, ending: Ending) -> Option<CutShort> {
        let source = profile.sources.last()?;
        let stat = |key: &str| source.statistic(key);
        let counter = stat("sampling.counter").unwrap_or("PERF_TICKS");
        let read = profile
            .counter_id(counter)
            .and_then(|id| self.counts.get(&id))
            .copied()
            .unwrap_or(0);
        let announced = stat("tree.lines")
            .and_then(|v| v.parse::<u64>().ok())
            .map(|lines| {
                let samples = stat("tree.samples")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                (lines, samples)
            });
        let cut = CutShort {
            lines: self.tree_lines,
            samples: read,
            announced,
            ending,
        };
        if self.lines == 0 || ending != Ending::LineBoundary {
            return Some(cut);
        }
        let (lines, samples) = announced?;
        // A cut inside the last line can leave it well-formed (an offset or the values
        // cut off): its newline is missing, and maybe its samples.
        if self.tree_lines >= lines && read >= samples && self.last_line_ended {
            return None;
        }
        Some(cut)
    }

    /// Parses one `C<depth> ...` line and merges it into `profile`.
    fn call_line(&mut self, profile: &mut Profile, line: &[u8]) -> Result<(), Fail> {
        let hex = self.hex;
        let mut cursor = Cursor::new(line);
        cursor.escaped = self.escaped;
        self.lines += 1;
        if !cursor.eat(b"C") {
            return Err(cursor.fail("a call-tree line C<depth> FN<id>..."));
        }
        let depth = cursor.unsigned(hex, "the depth after C")?;
        let deepest = self.stack.len() as u64 + 1;
        if depth == 0 || depth > deepest {
            let expected = if deepest == 1 {
                "depth 1 on the first call-tree line".to_string()
            } else if hex {
                format!("a depth from 1 to {deepest:x} (one more than the previous line at most)")
            } else {
                format!("a depth from 1 to {deepest} (one more than the previous line at most)")
            };
            return Err(Fail {
                expected,
                found: describe_found(&line[..cursor.pos]),
            });
        }
        // depth <= stack.len() + 1, so this fits in usize.
        self.stack.truncate(depth as usize - 1);
        let parent = self.stack.last().copied();

        cursor.expect(b" FN", "\" FN<id>\" after the depth")?;
        let reference = cursor.reference(b"FN", hex, "the function id after FN")?;
        let function = resolve(
            &mut self.functions,
            &mut cursor,
            &reference,
            "a function defined on an earlier line",
            |cursor| function_definition(profile, &mut self.files, hex, cursor),
        )?;
        cursor.expect(b"+", "\"+<offset>\" after the function")?;
        let offset = cursor.signed(hex, "the offset after \"+\"")?;
        // pyigprof's statistics: a depth-1 node of its own, not part of the call tree.
        let node = match statistics(profile, depth, function) {
            Some(pairs) => {
                if let Some(source) = profile.sources.last_mut() {
                    source.statistics.extend(pairs);
                    if self.lines == 1 {
                        // pyigprof's dump: its names are escaped, from the next line on
                        // (the statistics have nothing to escape), and so is the header.
                        self.escaped = true;
                        source.program = cursor.unescape_all(&self.program)?;
                    }
                }
                None
            }
            None => {
                let node = profile.child(parent, function, offset)?;
                self.stack.push(node);
                self.tree_lines += 1;
                Some(node)
            }
        };

        while !cursor.rest().is_empty() {
            cursor.expect(b" V", "\" V<counter id>\" or end of line")?;
            let reference = cursor.reference(b"V", hex, "the counter id after V")?;
            // Not resolve(): a counter used without definition must be followed by ":(",
            // which is checked before the lookup.
            let counter = if cursor.eat(b"=(") {
                let name = cursor.until_close("\")\" closing the counter name")?;
                let name = cursor.unescape(name)?;
                cursor.expect(b"):(", "\"):(\" after the counter name")?;
                let counter = profile.intern_counter(&name)?;
                define(&mut self.counters, &reference, counter)?;
                counter
            } else {
                cursor.expect(b":(", "\":(\" or \"=(\" after the counter id")?;
                lookup(
                    &self.counters,
                    &reference,
                    "a counter defined on an earlier line",
                )?
            };
            let count = cursor.signed(hex, "the count of the counter")?;
            cursor.expect(b",", "\",\" after the count")?;
            let amount = cursor.signed(hex, "the amount of the counter")?;
            cursor.expect(b",", "\",\" after the amount")?;
            let peak = cursor.signed(hex, "the peak of the counter")?;
            cursor.expect(b")", "\")\" closing the counter values")?;
            while cursor.eat(b";LK=(") {
                cursor.until_close("\")\" closing the leak record")?;
                cursor.pos += 1;
            }
            if let Some(node) = node {
                *self.counts.entry(counter).or_default() += count;
                let values = Values {
                    count,
                    amount,
                    peak,
                };
                profile.add_values(node, counter, values);
            }
        }
        Ok(())
    }
}

/// The file of the nodes that carry pyigprof's statistics.
const STATISTICS_FILE: &str = "[pyigprof]";

/// When `function` on a line at `depth` is one of the nodes that carry pyigprof's
/// statistics (depth 1, file `[pyigprof]`, named `#pyigprof <section> <key>=<value> …`):
/// its `(<section>.<key>, <value>)` pairs. Words without `=` are left out.
fn statistics(profile: &Profile, depth: u64, function: u32) -> Option<Vec<(String, String)>> {
    let f = profile.function(function);
    let text = f.name.strip_prefix("#pyigprof ")?;
    if depth != 1 || profile.file(f.file) != STATISTICS_FILE {
        return None;
    }
    let mut words = text.split(' ');
    let section = words.next().unwrap_or_default();
    Some(
        words
            .filter_map(|word| word.split_once('='))
            .map(|(key, value)| (format!("{section}.{key}"), value.to_string()))
            .collect(),
    )
}

/// Parses `F<fid>[=(<path>)]+<start> N=(<name>))` after `FN<id>=(`; `files` are the
/// dump's file ids.
fn function_definition(
    profile: &mut Profile,
    files: &mut HashMap<u64, u32>,
    hex: bool,
    cursor: &mut Cursor,
) -> Result<u32, Fail> {
    cursor.expect(b"F", "\"F<id>\" (the function's file) after \"=(\"")?;
    let reference = cursor.reference(b"F", hex, "the file id after F")?;
    let file = resolve(
        files,
        cursor,
        &reference,
        "a file defined on an earlier line",
        |cursor| {
            let path = cursor.until_close("\")\" closing the file path")?;
            let path = cursor.unescape(path)?;
            cursor.pos += 1;
            Ok(profile.intern_file(&path)?)
        },
    )?;
    cursor.expect(b"+", "\"+<start>\" after the file")?;
    let start = cursor.signed(hex, "the function start after \"+\"")?;
    cursor.expect(b" N=(", "\" N=(\" and the function name")?;
    let name = cursor.until_close("\")\" closing the function name")?;
    let name = cursor.unescape(name)?;
    cursor.expect(b"))", "\"))\" closing the function definition")?;
    Ok(profile.intern_function(&name, file, start)?)
}

/// An id as a line refers to it: the dump's own number, and the text naming it in
/// error messages (e.g. `FN5`).
struct Reference<'a> {
    local: u64,
    token: &'a [u8],
}

/// The profile's id that `reference` stands for in this dump (`ids`). If the line
/// continues with `=(`, `definition` parses the definition that follows and its result
/// is recorded for the rest of the dump; otherwise the id must have been defined on an
/// earlier line (`expected` tells so in the error).
fn resolve<'a>(
    ids: &mut HashMap<u64, u32>,
    cursor: &mut Cursor<'a>,
    reference: &Reference,
    expected: &str,
    definition: impl FnOnce(&mut Cursor<'a>) -> Result<u32, Fail>,
) -> Result<u32, Fail> {
    if cursor.eat(b"=(") {
        let id = definition(cursor)?;
        define(ids, reference, id)?;
        Ok(id)
    } else {
        lookup(ids, reference, expected)
    }
}

/// Records that `reference` means `id`; a second definition of the same id is
/// accepted only if it says the same thing.
fn define(ids: &mut HashMap<u64, u32>, reference: &Reference, id: u32) -> Result<(), Fail> {
    match ids.insert(reference.local, id) {
        Some(previous) if previous != id => Err(Fail {
            expected: "each id defined once".to_string(),
            found: format!(
                "a second, different definition of {}",
                String::from_utf8_lossy(reference.token)
            ),
        }),
        _ => Ok(()),
    }
}

/// The id that `reference`, defined on an earlier line, means.
fn lookup(ids: &HashMap<u64, u32>, reference: &Reference, expected: &str) -> Result<u32, Fail> {
    ids.get(&reference.local).copied().ok_or_else(|| Fail {
        expected: expected.to_string(),
        found: format!("undefined {}", String::from_utf8_lossy(reference.token)),
    })
}

/// A position in one line.
struct Cursor<'a> {
    line: &'a [u8],
    pos: usize,
    /// Whether names and paths are `%XX`-escaped ([`DumpState::escaped`]).
    escaped: bool,
}

impl<'a> Cursor<'a> {
    fn new(line: &'a [u8]) -> Self {
        Cursor {
            line,
            pos: 0,
            escaped: false,
        }
    }

    fn rest(&self) -> &'a [u8] {
        &self.line[self.pos..]
    }

    /// A failure at the current position.
    fn fail(&self, expected: &str) -> Fail {
        Fail {
            expected: expected.to_string(),
            found: describe_found(self.rest()),
        }
    }

    /// Skips `literal` if the line continues with it.
    fn eat(&mut self, literal: &[u8]) -> bool {
        if self.rest().starts_with(literal) {
            self.pos += literal.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, literal: &[u8], expected: &str) -> Result<(), Fail> {
        if self.eat(literal) {
            Ok(())
        } else {
            Err(self.fail(expected))
        }
    }

    fn expect_end(&self, expected: &str) -> Result<(), Fail> {
        if self.rest().is_empty() {
            Ok(())
        } else {
            Err(self.fail(expected))
        }
    }

    /// The id after `prefix` (e.g. `FN`), which has just been read.
    fn reference(&mut self, prefix: &[u8], hex: bool, what: &str) -> Result<Reference<'a>, Fail> {
        let start = self.pos - prefix.len();
        debug_assert_eq!(&self.line[start..self.pos], prefix);
        let local = self.unsigned(hex, what)?;
        Ok(Reference {
            local,
            token: &self.line[start..self.pos],
        })
    }

    /// An unsigned integer in hex (`hex`) or decimal, without prefix.
    fn unsigned(&mut self, hex: bool, what: &str) -> Result<u64, Fail> {
        let radix: u32 = if hex { 16 } else { 10 };
        let kind = if hex { "hexadecimal" } else { "decimal" };
        let digits = self
            .rest()
            .iter()
            .take_while(|byte| (**byte as char).is_digit(radix))
            .count();
        if digits == 0 {
            return Err(self.fail(&format!("{what} as a {kind} integer")));
        }
        let mut value: u64 = 0;
        for &byte in &self.rest()[..digits] {
            let digit = (byte as char).to_digit(radix).unwrap_or(0);
            match value
                .checked_mul(u64::from(radix))
                .and_then(|v| v.checked_add(u64::from(digit)))
            {
                Some(next) => value = next,
                None => return Err(self.fail(&format!("{what} as a {kind} integer below 2^64"))),
            }
        }
        self.pos += digits;
        Ok(value)
    }

    /// An integer with an optional `-` sign. Magnitudes from 2^63 up keep their bit
    /// pattern (wrap), so that 64-bit addresses such as IgProf's `ffffffffff600000`
    /// survive.
    fn signed(&mut self, hex: bool, what: &str) -> Result<i64, Fail> {
        let negative = self.eat(b"-");
        let magnitude = self.unsigned(hex, what)? as i64;
        Ok(if negative {
            magnitude.wrapping_neg()
        } else {
            magnitude
        })
    }

    /// A finite, non-negative decimal number such as `0.004000`.
    fn decimal(&mut self, what: &str) -> Result<f64, Fail> {
        let length = self
            .rest()
            .iter()
            .take_while(|byte| matches!(byte, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-'))
            .count();
        let text = std::str::from_utf8(&self.rest()[..length]).unwrap_or("");
        match text.parse::<f64>() {
            Ok(value) if value.is_finite() && value >= 0.0 => {
                self.pos += length;
                Ok(value)
            }
            _ => Err(self.fail(what)),
        }
    }

    /// The text up to the next `)`, which is left unconsumed.
    fn until_close(&mut self, expected: &str) -> Result<&'a [u8], Fail> {
        let rest = self.rest();
        match rest.iter().position(|&byte| byte == b')') {
            Some(end) => {
                self.pos += end;
                Ok(&rest[..end])
            }
            None => Err(Fail {
                expected: expected.to_string(),
                found: "end of line".to_string(),
            }),
        }
    }

    /// `raw`, a name or path of this line, as text: `%XX` decoded where the dump is
    /// escaped, as written (bytes that are not UTF-8 replaced) where it is IgProf's.
    fn unescape(&self, raw: &[u8]) -> Result<String, Fail> {
        if !self.escaped {
            return Ok(String::from_utf8_lossy(raw).into_owned());
        }
        self.unescape_all(raw)
    }

    /// `raw` with its `%XX` escapes decoded, reporting a bad escape where it is.
    fn unescape_all(&self, raw: &[u8]) -> Result<String, Fail> {
        unescape(raw).map_err(|at| {
            let end = (at + 3).min(raw.len());
            Fail {
                expected: "a %XX escape with two hexadecimal digits".to_string(),
                found: describe_found(&raw[at..end]),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Values;
    use std::io::Write;

    fn parse(text: &[u8]) -> Result<Profile, Error> {
        let mut profile = Profile::new();
        load_reader(&mut profile, "t.txt", text)?;
        Ok(profile)
    }

    fn error(text: &[u8]) -> String {
        match parse(text) {
            Ok(_) => panic!("accepted {:?}", String::from_utf8_lossy(text)),
            Err(error) => error.to_string(),
        }
    }

    fn gzip(text: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(text).unwrap();
        encoder.finish().unwrap()
    }

    /// (function name, offset, depth, self values of counter 0) of every node, in
    /// depth-first order following `children`.
    fn shape(profile: &Profile) -> Vec<(String, i64, usize, Values)> {
        fn walk(
            profile: &Profile,
            children: &crate::profile::Children,
            node: u32,
            depth: usize,
            out: &mut Vec<(String, i64, usize, Values)>,
        ) {
            let n = &profile.nodes()[node as usize];
            out.push((
                profile.function(n.function).name.clone(),
                n.offset,
                depth,
                n.value(0),
            ));
            for &child in children.of(node) {
                walk(profile, children, child, depth + 1, out);
            }
        }
        let children = profile.children();
        let mut out = Vec::new();
        for &root in children.roots() {
            walk(profile, &children, root, 1, &mut out);
        }
        out
    }

    fn ticks(count: i64, amount: i64, peak: i64) -> Values {
        Values {
            count,
            amount,
            peak,
        }
    }

    const HEX_DUMP: &[u8] = b"P=(HEX ID=4d2 N=(python3 examples/compress.py) T=0.004000)
C1 FN0=(F0=(/usr/lib/x86_64-linux-gnu/libc.so.6)+271c0 N=(__libc_start_main))+8a
C2 FN1=(F1=(/root/.pyenv/versions/3.11.7/bin/python3.11)+1130 N=(main))+12
C3 FN2=(F2=(/work/examples/compress.py)+1 N=(<module>))+1b
C4 FN3=(F2+7 N=(squeeze))+3 V0=(PERF_TICKS):(5,14,14)
C4 FN3+4
C5 FN4=(F3=(/usr/lib/x86_64-linux-gnu/libz.so.1.2.13)+2a40 N=(deflate))+1f V0:(2,8,8)
";

    #[test]
    fn hex_dump_from_the_doc() {
        let profile = parse(HEX_DUMP).unwrap();
        assert_eq!(
            profile.sources,
            vec![Source {
                path: "t.txt".into(),
                program: "python3 examples/compress.py".into(),
                pid: 0x4d2,
                tick_period: 0.004,
                hex: true,
                statistics: Vec::new(),
                cut_short: None,
            }]
        );
        assert_eq!(profile.counters(), &["PERF_TICKS".to_string()]);
        assert_eq!(
            shape(&profile),
            vec![
                ("__libc_start_main".into(), 0x8a, 1, Values::default()),
                ("main".into(), 0x12, 2, Values::default()),
                ("<module>".into(), 0x1b, 3, Values::default()),
                ("squeeze".into(), 3, 4, ticks(5, 0x14, 0x14)),
                ("squeeze".into(), 4, 4, Values::default()),
                ("deflate".into(), 0x1f, 5, ticks(2, 8, 8)),
            ]
        );
        let squeeze = profile.function(profile.nodes()[3].function);
        assert_eq!(profile.file(squeeze.file), "/work/examples/compress.py");
        assert_eq!(squeeze.start, 7);
        let deflate = profile.function(profile.nodes()[5].function);
        assert_eq!(
            profile.file(deflate.file),
            "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13"
        );
        assert_eq!(deflate.start, 0x2a40);
        assert_eq!(profile.total(0), ticks(7, 0x1c, 0x14));
    }

    /// The example of IgProf's doc/dump-format (decimal variant); the CLI tests
    /// (tests/cli.rs) read the same file.
    const DECIMAL_DUMP: &[u8] = include_bytes!("../tests/data/igprof-ls-decimal.txt");

    #[test]
    fn decimal_dump_from_igprof_doc() {
        let profile = parse(DECIMAL_DUMP).unwrap();
        let source = &profile.sources[0];
        assert_eq!(
            (
                source.pid,
                source.program.as_str(),
                source.tick_period,
                source.hex
            ),
            (32365, "ls", 0.01, false)
        );
        let nodes = shape(&profile);
        assert_eq!(nodes.len(), 16);
        assert_eq!(
            nodes[0],
            ("__libc_start_main".into(), 218, 1, Values::default())
        );
        assert_eq!(nodes[6], ("@?0x13adab".into(), 0, 7, Values::default()));
        assert_eq!(nodes[13], ("@?0x804c533".into(), 0, 14, ticks(1, 1, 1)));
        assert_eq!(nodes[14], ("strftime".into(), 8334, 3, ticks(1, 1, 1)));
        assert_eq!(nodes[15], ("strftime".into(), 8538, 3, Values::default()));
        // FN5 is one function at several depths, FN2 one function at three offsets.
        assert_eq!(profile.functions().len(), 10);
        let strftime = profile
            .functions()
            .iter()
            .find(|f| f.name == "strftime")
            .unwrap();
        assert_eq!((profile.file(strftime.file), strftime.start), ("ls", 14168));
        assert_eq!(profile.total(0), ticks(2, 2, 1));
    }

    #[test]
    fn gzip_is_detected_by_content() {
        let profile = parse(&gzip(HEX_DUMP)).unwrap();
        assert_eq!(shape(&profile), shape(&parse(HEX_DUMP).unwrap()));
    }

    #[test]
    fn escapes_are_decoded_in_pyigprofs_dumps_only() {
        // pyigprof's: its statistics come first, then escaped names (raw UTF-8 too).
        let profile = parse(
            "P=(HEX ID=1 N=(python3 %2Ftmp/a (1%29.py) T=0.004000)
C1 FN0=(F0=([pyigprof])+0 N=(#pyigprof stats samples=3))+0 V0=(PERF_TICKS):(0,0,0)
C1 FN1=(F1=(/tmp/a (1%29.py)+3 N=(f%28%C3%BC%29))+2 V0:(1,1,1)
C1 FN2=(F2=(/data/caf%E9.so)+10 N=(g_ü))+0 V0:(1,1,1)
"
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(profile.sources[0].program, "python3 /tmp/a (1).py");
        let named = |name: &str| profile.functions().iter().find(|f| f.name == name);
        let f = named("f(\u{fc})").expect("f(ü)");
        assert_eq!(profile.file(f.file), "/tmp/a (1).py");
        let g = named("g_\u{fc}").expect("g_ü");
        assert_eq!(profile.file(g.file), "/data/caf\u{fffd}.so");
        // IgProf's: names are raw, a % is a %.
        let profile = parse(
            b"P=(HEX ID=1 N=(./pct%41dir/app 100%) T=0.004000)
C1 FN0=(F0=(/opt/pct%41dir/libx.so)+3 N=(ratio_100%))+2 V0=(PERF_TICKS):(1,1,1)
",
        )
        .unwrap();
        assert_eq!(profile.sources[0].program, "./pct%41dir/app 100%");
        let f = &profile.functions()[0];
        assert_eq!(
            (f.name.as_str(), profile.file(f.file)),
            ("ratio_100%", "/opt/pct%41dir/libx.so")
        );
    }

    #[test]
    fn leak_records_are_skipped_and_several_counters_kept() {
        let profile = parse(
            b"P=(ID=7 N=(app) T=0.010000)
C1 FN0=(F0=(app)+100 N=(main))+5
C2 FN1=(F0+200 N=(alloc))+0 V0=(MEM_TOTAL):(2,722,0) V1=(MEM_LIVE):(2,722,722);LK=(0x91441c8,615);LK=(0x91633c0,107)
C2 FN1+0 V1:(1,-3,4)
",
        )
        .unwrap();
        assert_eq!(
            profile.counters(),
            &["MEM_TOTAL".to_string(), "MEM_LIVE".to_string()]
        );
        let alloc = &profile.nodes()[1];
        assert_eq!(alloc.value(0), ticks(2, 722, 0));
        assert_eq!(alloc.value(1), ticks(3, 719, 722));
    }

    #[test]
    fn threads_in_one_dump_and_several_dumps_merge() {
        let thread = b"C1 FN0+8a V0:(1,2,2)
C2 FN5=(F4=(/lib/libm.so)+40 N=(sin))+4 V0:(3,3,3)
";
        let mut one = HEX_DUMP.to_vec();
        one.extend_from_slice(thread);
        let profile = parse(&one).unwrap();
        let nodes = shape(&profile);
        assert_eq!(nodes.len(), 7);
        assert_eq!(
            nodes[0],
            ("__libc_start_main".into(), 0x8a, 1, ticks(1, 2, 2))
        );
        assert_eq!(nodes[6], ("sin".into(), 4, 2, ticks(3, 3, 3)));

        // The same dump read twice: same tree, doubled values, two sources.
        let mut twice = Profile::new();
        load_reader(&mut twice, "a.txt", HEX_DUMP).unwrap();
        load_reader(&mut twice, "b.gz", gzip(HEX_DUMP).as_slice()).unwrap();
        assert_eq!(twice.sources.len(), 2);
        assert_eq!(twice.nodes().len(), 6);
        let single = parse(HEX_DUMP).unwrap();
        assert_eq!(twice.total(0), ticks(14, 0x38, 0x14));
        for (a, b) in shape(&twice).iter().zip(shape(&single)) {
            assert_eq!((&a.0, a.1, a.2), (&b.0, b.1, b.2));
            assert_eq!(a.3.amount, 2 * b.3.amount);
        }
    }

    #[test]
    fn ids_are_per_dump() {
        // Both dumps use FN0/F0/V0 for different things.
        let mut profile = Profile::new();
        load_reader(
            &mut profile,
            "a",
            &b"P=(HEX ID=1 N=(a) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(x))+0 V0=(PERF_TICKS):(1,1,1)\n"
                [..],
        )
        .unwrap();
        load_reader(
            &mut profile,
            "b",
            &b"P=(HEX ID=2 N=(b) T=0.004000)\nC1 FN0=(F0=(/b)+0 N=(y))+0 V0=(PERF_TICKS):(1,1,1)\n"
                [..],
        )
        .unwrap();
        assert_eq!(profile.nodes().len(), 2);
        assert_eq!(profile.functions().len(), 2);
        assert_eq!(profile.counters().len(), 1);
    }

    #[test]
    fn header_only_and_crlf_are_accepted() {
        let profile = parse(b"P=(HEX ID=1 N=(x) T=0.004000)\r\n").unwrap();
        assert!(profile.nodes().is_empty());
        let profile = parse(
            b"P=(ID=1 N=(ls) T=0.010000)\r\nC1 FN0=(F0=(ls)+1 N=(m))+2 V0=(PERF_TICKS):(1,1,1)\r\n",
        )
        .unwrap();
        assert_eq!(profile.total(0).amount, 1);
        // No newline at the end of the last line.
        let profile = parse(b"P=(ID=1 N=(ls) T=0.010000)\nC1 FN0=(F0=(ls)+1 N=(m))+2").unwrap();
        assert_eq!(profile.nodes().len(), 1);
    }

    #[test]
    fn addresses_above_2_63_survive() {
        let profile = parse(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=([vsyscall])+ffffffffff600000 N=(@?0xffffffffff600000))+0\n").unwrap();
        assert_eq!(profile.functions()[0].start as u64, 0xffff_ffff_ff60_0000);
    }

    #[test]
    fn error_empty_file() {
        assert_eq!(
            error(b""),
            "pyigprof-analyse: t.txt: empty file, expected a profile starting with P=("
        );
        assert_eq!(
            error(&gzip(b"")),
            "pyigprof-analyse: t.txt: empty file, expected a profile starting with P=("
        );
    }

    /// What reading `text` as a whole dump says: its error, or that it is cut short.
    fn refused(text: &[u8]) -> String {
        match parse(text).and_then(|profile| whole(&profile)) {
            Ok(()) => panic!("accepted {:?}", String::from_utf8_lossy(text)),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn truncated_gzip_is_cut_short_up_to_its_last_whole_line() {
        let data = gzip(HEX_DUMP);
        // Cut in the compressed data: the lines before the cut are read, the one it
        // stops in is not (the deflate stream's last block holds all six here, so a
        // cut 12 bytes before the end leaves none of the tree: the header at most).
        for cut in [data.len() - 12, data.len() - 4] {
            let text = refused(&data[..cut]);
            assert!(
                text.starts_with("pyigprof-analyse: t.txt: cut short: ")
                    && text.contains("its gzip stream stops in the middle")
                    && text.ends_with("(--read-cut-short reads what there is)"),
                "{cut}: {text}"
            );
        }
        // Cut in the trailer (CRC and size): every line is read, and still said.
        let profile = parse(&data[..data.len() - 4]).unwrap();
        assert_eq!(profile.total(0).amount, 0x1c);
        assert_eq!(
            profile.sources[0].cut_short,
            Some(CutShort {
                lines: 6,
                samples: 7,
                announced: None,
                ending: Ending::Gzip
            })
        );
        // A larger dump cut in the middle of its compressed bytes: every whole line
        // before the cut, none after.
        let mut big = HEX_DUMP.to_vec();
        for i in 0..2000 {
            big.extend_from_slice(format!("C4 FN3+{i:x} V0:(1,1,1)\n").as_bytes());
        }
        let whole_profile = parse(&gzip(&big)).unwrap();
        let compressed = gzip(&big);
        let profile = parse(&compressed[..compressed.len() / 2]).unwrap();
        let cut = profile.sources[0].cut_short.expect("cut short");
        assert_eq!(cut.ending, Ending::Gzip);
        assert!(
            cut.lines > 6 && cut.lines < 2006,
            "{} of 2006 lines",
            cut.lines
        );
        assert_eq!(profile.total(0).amount, 0x1c + cut.lines as i64 - 6);
        assert!(profile.total(0).amount < whole_profile.total(0).amount);
        // Cut in the gzip header, before the dump's header: nothing to read.
        assert_eq!(
            error(&data[..5]),
            "pyigprof-analyse: t.txt: not a valid gzip stream: unexpected end of file"
        );
    }

    #[test]
    fn error_corrupt_gzip() {
        let mut data = gzip(HEX_DUMP);
        let last = data.len() - 5;
        data[last] ^= 0xff; // the checksum
        let text = error(&data);
        assert!(
            text.starts_with("pyigprof-analyse: t.txt: not a valid gzip stream: "),
            "{text}"
        );
    }

    #[test]
    fn error_first_line_not_a_header() {
        assert_eq!(
            error(b"C1 FN0=(F0=(ls)+1 N=(m))+2\n"),
            "pyigprof-analyse: t.txt:1: expected a profile header starting with P=(, found \"C1 FN0=(F0=(ls)+1 N=(m))+2\""
        );
        assert_eq!(
            error(b"\n"),
            "pyigprof-analyse: t.txt:1: expected a profile header starting with P=(, found end of line"
        );
        assert_eq!(
            error(b"P=(HEX ID=4d2 N=(x) T=fast)\n"),
            "pyigprof-analyse: t.txt:1: expected the tick period after T= as a decimal number of seconds, found \"fast)\""
        );
        assert_eq!(
            error(b"P=(HEX ID=4d2 N=(x)\n"),
            "pyigprof-analyse: t.txt:1: expected the program name followed by \") T=\", found \"x)\""
        );
    }

    #[test]
    fn error_unknown_reference() {
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(x))+0\nC2 FN5+0\n"),
            "pyigprof-analyse: t.txt:3: expected a function defined on an earlier line, found undefined FN5"
        );
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F2+0 N=(x))+0\n"),
            "pyigprof-analyse: t.txt:2: expected a file defined on an earlier line, found undefined F2"
        );
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(x))+0 V1:(1,1,1)\n"),
            "pyigprof-analyse: t.txt:2: expected a counter defined on an earlier line, found undefined V1"
        );
    }

    #[test]
    fn error_depth_jump() {
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(x))+0\nC3 FN0+1\n"),
            "pyigprof-analyse: t.txt:3: expected a depth from 1 to 2 (one more than the previous line at most), found \"C3\""
        );
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC2 FN0=(F0=(/a)+0 N=(x))+0\n"),
            "pyigprof-analyse: t.txt:2: expected depth 1 on the first call-tree line, found \"C2\""
        );
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(x))+0\nC0 FN0+1\n"),
            "pyigprof-analyse: t.txt:3: expected a depth from 1 to 2 (one more than the previous line at most), found \"C0\""
        );
    }

    #[test]
    fn error_malformed_numbers() {
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(x))+zz\n"),
            "pyigprof-analyse: t.txt:2: expected the offset after \"+\" as a hexadecimal integer, found \"zz\""
        );
        // Decimal dumps do not accept hex digits.
        assert_eq!(
            error(b"P=(ID=1 N=(x) T=0.010000)\nC1 FN0=(F0=(/a)+1f N=(x))+0\n"),
            "pyigprof-analyse: t.txt:2: expected \" N=(\" and the function name, found \"f N=(x))+0\""
        );
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(x))+0 V0=(PERF_TICKS):(1,,1)\n"),
            "pyigprof-analyse: t.txt:2: expected the amount of the counter as a hexadecimal integer, found \",1)\""
        );
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(x))+10000000000000000\n"),
            "pyigprof-analyse: t.txt:2: expected the offset after \"+\" as a hexadecimal integer below 2^64, found \"10000000000000000\""
        );
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nCx FN0=(F0=(/a)+0 N=(x))+0\n"),
            "pyigprof-analyse: t.txt:2: expected the depth after C as a hexadecimal integer, found \"x FN0=(F0=(/a)+0 N=(x))+0\""
        );
    }

    #[test]
    fn error_unknown_line_kind() {
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(x))+0\nX1 something\n"),
            "pyigprof-analyse: t.txt:3: expected a call-tree line C<depth> FN<id>..., found \"X1 something\""
        );
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(x))+0 W0:(1,1,1)\n"),
            "pyigprof-analyse: t.txt:2: expected \" V<counter id>\" or end of line, found \" W0:(1,1,1)\""
        );
    }

    #[test]
    fn error_invalid_escape() {
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=([pyigprof])+0 N=(#pyigprof stats samples=0))+0\nC1 FN1=(F1=(/a)+0 N=(f%G1))+0\n"),
            "pyigprof-analyse: t.txt:3: expected a %XX escape with two hexadecimal digits, found \"%G1\""
        );
    }

    #[test]
    fn a_last_line_cut_in_the_middle_is_left_out() {
        let text = b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(f))+0 V0=(PERF_TICKS):(1,1,1)\nC1 FN1=(F0+0 N=(squ";
        assert_eq!(
            refused(text),
            "pyigprof-analyse: t.txt: cut short: read 1 call-tree line before the cut; its last line stops in the middle (left out); its writing stopped before the end (--read-cut-short reads what there is)"
        );
        let profile = parse(text).unwrap();
        assert_eq!(profile.total(0).amount, 1);
        assert_eq!(profile.functions().len(), 1);
        // A line that is not the last one (it has its newline) is an error as before.
        let mut text = text.to_vec();
        text.push(b'\n');
        assert_eq!(
            error(&text),
            "pyigprof-analyse: t.txt:3: expected \")\" closing the function name, found end of line"
        );
    }

    #[test]
    fn error_redefinition_and_tick_mismatch() {
        assert_eq!(
            error(b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(x))+0\nC1 FN0=(F0+0 N=(y))+0\n"),
            "pyigprof-analyse: t.txt:3: expected each id defined once, found a second, different definition of FN0"
        );
        let mut profile = Profile::new();
        load_reader(&mut profile, "a.txt", HEX_DUMP).unwrap();
        let error = load_reader(&mut profile, "b.txt", DECIMAL_DUMP).unwrap_err();
        assert_eq!(
            error.to_string(),
            "pyigprof-analyse: b.txt:1: expected the tick period T=0.004 of a.txt (profiles with different tick periods cannot be merged), found T=0.01"
        );
    }

    #[test]
    fn statistics_nodes_are_read_apart_from_the_call_tree() {
        let mut text = HEX_DUMP.to_vec();
        text.extend_from_slice(
            b"C1 FN5=(F4=([pyigprof])+0 N=(#pyigprof stats samples=775 ticks=3042))+0\n\
              C1 FN6=(F4+0 N=(#pyigprof handler median_ns=6400 base_ns=-))+0\n",
        );
        let profile = parse(&text).unwrap();
        let plain = parse(HEX_DUMP).unwrap();
        assert_eq!(shape(&profile), shape(&plain));
        let counter = profile.counter_id("PERF_TICKS").unwrap();
        assert_eq!(profile.total(counter), plain.total(counter));
        let pairs: Vec<(&str, &str)> = profile.sources[0]
            .statistics
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("stats.samples", "775"),
                ("stats.ticks", "3042"),
                ("handler.median_ns", "6400"),
                ("handler.base_ns", "-")
            ]
        );
        // Only at depth 1 and in the file [pyigprof]: elsewhere it is a function.
        let mut text = HEX_DUMP.to_vec();
        text.extend_from_slice(
            b"C1 FN5=(F4=(/x.py)+0 N=(#pyigprof stats samples=1))+0 V0:(1,1,1)\n",
        );
        let profile = parse(&text).unwrap();
        assert!(profile.sources[0].statistics.is_empty());
        assert_eq!(profile.total(counter).count, plain.total(counter).count + 1);
    }

    #[test]
    fn a_profile_whose_only_node_carries_statistics_has_a_total_of_zero() {
        let profile = parse(
            b"P=(HEX ID=1 N=(x) T=0.004000)\n\
              C1 FN0=(F0=([pyigprof])+0 N=(#pyigprof stats samples=0))+0 V0=(PERF_TICKS):(0,0,0)\n",
        )
        .unwrap();
        assert_eq!(profile.counters(), &["PERF_TICKS".to_string()]);
        assert!(profile.nodes().is_empty());
        assert_eq!(profile.sources[0].statistics.len(), 1);
    }

    #[test]
    fn comments_after_the_header_are_skipped() {
        let mut text =
            b"P=(HEX ID=1 N=(x) T=0.004000)\n#pyigprof stats samples=1 ticks=2\n".to_vec();
        text.extend_from_slice(b"C1 FN0=(F0=(/a)+0 N=(x))+0 V0=(PERF_TICKS):(1,2,2)\n#\n");
        text.extend_from_slice(
            b"# a comment (with parentheses) and %%\nC2 FN1=(F0+10 N=(y))+0 V0:(1,1,1)\n",
        );
        text.extend_from_slice(b"#pyigprof stats samples=120 ticks=130 dropped=0\n");
        let profile = parse(&text).unwrap();
        assert_eq!(profile.nodes().len(), 2);
        assert_eq!(profile.total(0), ticks(2, 3, 2));
        // The same gzip-compressed.
        assert_eq!(parse(&gzip(&text)).unwrap().total(0), ticks(2, 3, 2));
        // Line numbers still count comment lines.
        text.extend_from_slice(b"C4 FN1+0\n");
        assert_eq!(
            error(&text),
            "pyigprof-analyse: t.txt:8: expected a depth from 1 to 3 (one more than the previous line at most), found \"C4\""
        );
        // Not before the header: the first line must be the header.
        assert_eq!(
            error(b"#pyigprof\nP=(HEX ID=1 N=(x) T=0.004000)\n"),
            "pyigprof-analyse: t.txt:1: expected a profile header starting with P=(, found \"#pyigprof\""
        );
    }

    #[test]
    fn error_unsupported_files_say_what_they_are() {
        for (data, kind) in [
            (
                &b"BZh91AY&SY\x01\x02"[..],
                "bzip2-compressed data (decompress it first: bunzip2)",
            ),
            (
                b"\xfd7zXZ\0\0\x04",
                "xz-compressed data (decompress it first: unxz)",
            ),
            (
                b"\x28\xb5\x2f\xfd\x00",
                "zstd-compressed data (decompress it first: unzstd)",
            ),
            (b"\x7fELF\x02\x01\x01\0\n\0", "an ELF binary"),
            (b"PK\x03\x04\x14\0", "a zip archive"),
            (b"SQLite format 3\0\x10\0", "an SQLite database"),
        ] {
            assert_eq!(
                error(data),
                format!("pyigprof-analyse: t.txt:1: expected a profile header starting with P=(, found {kind}")
            );
        }
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let error = read_profiles(&["/nonexistent/pyigprof-analyse-test.gz"]).unwrap_err();
        assert!(
            error.to_string().starts_with(
                "pyigprof-analyse: /nonexistent/pyigprof-analyse-test.gz: cannot read: "
            ),
            "{error}"
        );
    }

    /// A small deterministic generator (xorshift64*), so that the fuzz test needs no crate.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn random_and_mutated_input_never_panics() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let alphabet = b"PCFNVLKHEXIDT=()+:;,% -0123456789abcdefx\n";
        let seeds = [
            HEX_DUMP.to_vec(),
            DECIMAL_DUMP.to_vec(),
            gzip(HEX_DUMP),
            gzip(DECIMAL_DUMP),
        ];
        for round in 0..20000 {
            let mut data = seeds[round % seeds.len()].clone();
            match round % 5 {
                0 => data.truncate(rng.below(data.len() + 1)),
                1 => {
                    for _ in 0..1 + rng.below(4) {
                        let at = rng.below(data.len());
                        data[at] = rng.next() as u8;
                    }
                }
                2 => {
                    for _ in 0..1 + rng.below(4) {
                        let at = rng.below(data.len());
                        data[at] = alphabet[rng.below(alphabet.len())];
                    }
                }
                3 => {
                    let at = rng.below(data.len());
                    let len = rng.below(data.len() - at + 1);
                    data.drain(at..at + len);
                }
                _ => {
                    let len = rng.below(300);
                    data = (0..len)
                        .map(|_| alphabet[rng.below(alphabet.len())])
                        .collect();
                    if round % 2 == 0 {
                        data.splice(0..0, b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 ".iter().copied());
                    }
                }
            }
            match parse(&data) {
                Ok(profile) => {
                    // Whatever was accepted must be a consistent tree.
                    for (index, node) in profile.nodes().iter().enumerate() {
                        assert!(node.parent.is_none_or(|parent| (parent as usize) < index));
                        assert!((node.function as usize) < profile.functions().len());
                    }
                }
                Err(error) => {
                    let text = error.to_string();
                    assert!(text.starts_with("pyigprof-analyse: t.txt"), "{text}");
                    assert!(!text.contains('\n'), "{text}");
                }
            }
        }
    }
}
