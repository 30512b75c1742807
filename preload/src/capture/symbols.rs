//! Function symbols of ELF objects, from `.symtab` (static functions included) and
//! `.dynsym`, read with the `object` crate. Used when the profile is written and once at
//! start-up (to find every part of the evaluator); never in the signal handler. The sorted
//! records of each object are kept between runs in the symbol cache
//! (`PYIGPROF_SYMBOL_CACHE`, [`use_cache`]), by build-id.

use crate::capture::unwind::modules::ObjectInfo;
use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

mod fdes;
mod names;
#[cfg(test)]
mod reference;

use fdes::Fdes;

/// One function symbol: `[start, end)` ELF virtual addresses and its (mangled) name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// First address (ELF virtual address, i.e. before the load bias is added).
    pub start: u64,
    /// One past the last address; for symbols without a size, the next symbol's start.
    pub end: u64,
    /// The name as in the symbol table (not demangled).
    pub name: String,
}

/// The bytes of an ELF object that a [`SymbolTable`] reads names from, for as long as it
/// lives.
pub enum Image {
    /// A read-only mapping of the object's file.
    Mapped(memmap2::Mmap),
    /// An image that stays in memory for the life of the process (the vDSO).
    Memory(&'static [u8]),
    /// A copy (tests).
    Owned(Vec<u8>),
}

impl Image {
    fn bytes(&self) -> &[u8] {
        match self {
            Image::Mapped(map) => map,
            Image::Memory(bytes) => bytes,
            Image::Owned(bytes) => bytes,
        }
    }
}

/// An object's function symbols, answering "which function holds this address" without
/// building the object's whole table.
///
/// A short process touches a few dozen addresses in a handful of objects, and its profile
/// is written in its last milliseconds: sorting and naming the 20,000 functions of
/// libpython for them was most of what it paid at exit. This table keeps one compact
/// record per function symbol (address, size, rank, where its name is), sorted by address
/// alone; names are read from the mapped file only for the symbols a lookup returns, and the
/// rules that pick a name (symbol ranks, functions known only by an unwind entry, code
/// known by neither) are applied around the address looked up. The answers are exactly
/// those of the table built in full (`reference.rs`, which the tests compare with it on real
/// objects):
/// - of several symbols at one address, a global one names the function before a weak, a
///   weak before a local, then the lowest name; a symbol without size ends where the next
///   function starts (or its section ends);
/// - a function that no symbol covers but `.eh_frame` describes (stripped objects, static
///   functions of a library without `.symtab`) is `@?0x<start>` of its FDE;
/// - executable code that neither covers (hand-written assembly without CFI) is one
///   function per gap, `@?0x<start of the gap>`.
pub struct SymbolTable {
    /// The object's file, and its separate debug file when there is one.
    images: Vec<Image>,
    /// The string tables the records' names are in.
    strings: Vec<Strings>,
    /// Per image, the end address of each section, by section index.
    section_ends: Vec<Vec<u64>>,
    /// One per function symbol of `.symtab` and `.dynsym` (both files), sorted by start.
    records: Records,
    /// The functions `.eh_frame` describes (of the main file), sorted by start.
    fdes: Fdes,
    /// `[start, end)` of the main file's executable sections.
    text: Vec<(u64, u64)>,
    /// Per executable section, the code no function covers (`gaps_of`).
    gaps: Vec<OnceLock<Vec<(u64, u64)>>>,
    /// The main file's GNU build-id, if it has one.
    build_id: Option<Vec<u8>>,
}

impl Default for SymbolTable {
    /// A table without symbols: every lookup is `None`.
    fn default() -> Self {
        SymbolTable {
            images: Vec::new(),
            strings: Vec::new(),
            section_ends: Vec::new(),
            records: Records::Built(Vec::new()),
            fdes: Fdes::default(),
            text: Vec::new(),
            gaps: Vec::new(),
            build_id: None,
        }
    }
}

/// A string table: the image it is in and its byte range there.
struct Strings {
    image: usize,
    range: (usize, usize),
    /// The symbol table whose names these are: `.symtab` (false) or `.dynsym` (true).
    dynamic: bool,
}

/// A function symbol of a [`SymbolTable`] (24 bytes): `[start, start + size)` (ELF virtual
/// addresses), its section (`section_ends` of its image; where a symbol without size ends
/// at the latest; `NO_SECTION` for none), its rank (global 0, weak 1, local 2, the entry
/// point 3), and its name: `name` bytes into string table `strings` (`NAMED_ENTRY` for the
/// entry point's `_start`).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Record {
    start: u64,
    size: u32,
    name: u32,
    section: u16,
    strings: u8,
    rank: u8,
    /// Zero: makes the padding a field, so that the cache's files hold no uninitialized
    /// bytes.
    zero: u32,
}

const _: () = assert!(std::mem::size_of::<Record>() == 24);

/// The records of a [`SymbolTable`]: built from the object's symbol tables, or read from
/// the cache an earlier run left ([`CacheKey`]).
enum Records {
    Built(Vec<Record>),
    /// A cache file: a [`CACHE_HEADER`]-byte header, then the records as they are in
    /// memory (`#[repr(C)]`, this machine's byte order), checked when read.
    Cached(memmap2::Mmap),
}

impl std::ops::Deref for Records {
    type Target = [Record];

    fn deref(&self) -> &[Record] {
        match self {
            Records::Built(records) => records,
            Records::Cached(map) => {
                let bytes = &map[CACHE_HEADER..];
                // SAFETY: `CacheKey::read` checked the length (a whole number of records)
                // and the alignment (a page-aligned mapping, a header of 64 bytes); every bit
                // pattern is a valid `Record`.
                unsafe {
                    std::slice::from_raw_parts(
                        bytes.as_ptr().cast::<Record>(),
                        bytes.len() / std::mem::size_of::<Record>(),
                    )
                }
            }
        }
    }
}

/// How many intervals the records a cache file's spot check reads divide it into
/// ([`CacheKey::read`]).
const SPOT_CHECKS: usize = 16;

/// Bytes before the records in a cache file: magic (8), shape hash (8), record count (8),
/// zeros.
const CACHE_HEADER: usize = 64;

/// The first bytes of a cache file; the last digit is the format's version.
const CACHE_MAGIC: &[u8; 8] = b"PYIGSYM1";

/// Where the sorted records of one object are cached: `<dir>/<build-id>.<d|n><e|->.symbols`
/// (`d` with its separate debug file, `e` with the entry point named).
struct CacheKey {
    path: PathBuf,
}

impl CacheKey {
    fn new(dir: &Path, build_id: &[u8], debug: bool, name_entry: bool) -> CacheKey {
        CacheKey {
            path: cache_file(dir, build_id, debug, name_entry, "symbols"),
        }
    }

    /// The cached records, when the file is there, whole (its length matches its record
    /// count), written for the same `shape` ([`shape_hash`]) and passing a spot check;
    /// `None` otherwise.
    ///
    /// Not every record is checked: reading all of them faulted in the whole file (libc's
    /// 9,600 records with its debug file, 230 KB; libpython's 7,300) for the few dozen
    /// that a short process's lookups touch — 0.1 ms of the 1.1 ms a `python -c pass` paid
    /// for being profiled. The files are written whole and renamed into place
    /// ([`CacheKey::write`]) and their header is checked. Of the records, one more than
    /// [`SPOT_CHECKS`], evenly spaced (the first that any binary search reads), must be
    /// well formed (string tables among the `strings` read, ranks known, ends not past
    /// 2^64) and in order: a file of garbage or of another layout fails that. Every use of
    /// a record is bounds-checked besides, so a record damaged after the file was written
    /// can misname the functions around it, not stop the process.
    fn read(&self, shape: u64, strings: usize) -> Option<Records> {
        let file = std::fs::File::open(&self.path).ok()?;
        // SAFETY: a read-only private mapping; the cache's files are replaced by rename,
        // never rewritten in place.
        let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let size = std::mem::size_of::<Record>();
        let word = |at: usize| u64::from_ne_bytes(map[at..at + 8].try_into().unwrap_or_default());
        if map.len() < CACHE_HEADER
            || &map[..8] != CACHE_MAGIC
            || word(8) != shape
            || !(map.len() - CACHE_HEADER).is_multiple_of(size)
            || word(16) != ((map.len() - CACHE_HEADER) / size) as u64
            || !(map.as_ptr() as usize).is_multiple_of(std::mem::align_of::<Record>())
        {
            return None;
        }
        let records = Records::Cached(map);
        let n = records.len();
        let well_formed = |r: &Record| {
            (usize::from(r.strings) < strings || r.strings == NAMED_ENTRY)
                && r.rank <= 3
                && r.start.checked_add(u64::from(r.size)).is_some()
        };
        let mut spots = (0..=SPOT_CHECKS).map(|k| n.saturating_sub(1) * k / SPOT_CHECKS);
        let mut last = 0;
        let passed = n == 0
            || spots.all(|at| {
                let record = &records[at];
                let in_order = record.start >= last;
                last = record.start;
                well_formed(record) && in_order
            });
        passed.then_some(records)
    }

    /// Writes `records` for `shape`: to a file of its own first, renamed into place, so
    /// that a reader sees a whole file or none. Failures (a read-only home) are ignored.
    fn write(&self, shape: u64, records: &[Record]) {
        let mut header = [0u8; CACHE_HEADER];
        header[..8].copy_from_slice(CACHE_MAGIC);
        header[8..16].copy_from_slice(&shape.to_ne_bytes());
        header[16..24].copy_from_slice(&(records.len() as u64).to_ne_bytes());
        // SAFETY: `Record` is `#[repr(C)]` without padding (24 bytes of fields).
        let body = unsafe {
            std::slice::from_raw_parts(
                records.as_ptr().cast::<u8>(),
                std::mem::size_of_val(records),
            )
        };
        write_whole(&self.path, &[&header, body], Place::Replace);
    }
}

/// How [`write_whole`] puts a file in place.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Renamed over the file there, if any.
    Replace,
    /// Linked: a file there already is kept.
    IfNone,
}

/// Writes `parts` as the file at `path`, whole: into a file of its own beside it, then
/// put in place as `place` says, so that a reader sees a whole file or the one before.
/// Returns whether `parts` are the file now (failures, such as a read-only home, leave
/// what was there).
fn write_whole(path: &Path, parts: &[&[u8]], place: Place) -> bool {
    use std::io::Write;
    let Some(dir) = path.parent() else {
        return false;
    };
    let _ = std::fs::create_dir_all(dir);
    // Unique to this write: two threads of one process may write the same file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let own = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let written = std::fs::File::create(&own)
        .and_then(|mut file| parts.iter().try_for_each(|part| file.write_all(part)));
    let placed = written.is_ok()
        && match place {
            Place::Replace => std::fs::rename(&own, path).is_ok(),
            Place::IfNone => std::fs::hard_link(&own, path).is_ok(),
        };
    if !placed || place == Place::IfNone {
        let _ = std::fs::remove_file(&own);
    }
    placed
}

/// A hash of what an object's records are built from besides its build-id: the numbers of
/// entries of the symbol tables read (`shape`, from [`string_tables`]) and the main file's
/// length, so that a file rebuilt with the same build-id but other symbols is not taken
/// for the cached one. FNV-1a over the numbers' bytes.
fn shape_hash(shape: &[u64], main_len: usize) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for word in shape.iter().chain(std::iter::once(&(main_len as u64))) {
        for byte in word.to_le_bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// `Record::section` of a symbol outside every section (or past index 65,534).
const NO_SECTION: u16 = u16::MAX;

/// `Record::strings` of the entry point, named `_start` by the table itself.
const NAMED_ENTRY: u8 = u8::MAX;

/// A function of the table as its rules define it: a symbol's (its record) or a nameless
/// one (an FDE's, or a gap's).
#[derive(Clone, Copy, Debug)]
struct Entry {
    start: u64,
    end: u64,
    record: Option<usize>,
}

impl SymbolTable {
    /// The function symbols of the ELF image `main`, with those of its separate debug file
    /// `debug` (the `.symtab` a distribution strips and ships apart, found by build-id).
    /// When `name_entry` is set and no symbol covers the ELF entry point, it is named
    /// `_start` (what the entry point of an executable is, stripped or not). `None` when
    /// `main` is not a 64-bit ELF file.
    pub fn new(main: Image, debug: Option<Image>, name_entry: bool) -> Option<SymbolTable> {
        SymbolTable::cached(main, debug, name_entry, None)
    }

    /// As [`SymbolTable::new`], keeping the sorted records in directory `cache` between
    /// runs: read from there when an earlier run left them for this object (by its
    /// build-id, whether it has a debug file, and the shape of its symbol tables), else
    /// built and written there. Objects without a build-id are not cached.
    pub fn cached(
        main: Image,
        debug: Option<Image>,
        name_entry: bool,
        cache: Option<&Path>,
    ) -> Option<SymbolTable> {
        let file = object::File::parse(main.bytes()).ok()?;
        let fdes = Fdes::new(&file, main.bytes());
        let text: Vec<(u64, u64)> = file
            .sections()
            .filter(|s| s.kind() == SectionKind::Text && s.size() > 0)
            .map(|s| (s.address(), s.address() + s.size()))
            .collect();
        let entry = file.entry();
        let name_entry = name_entry && entry != 0;
        let mut strings = Vec::new();
        let mut shape = Vec::new();
        let build_id = file.build_id().ok().flatten();
        // The key of the records in the cache, and what they were built from.
        let key = cache
            .zip(build_id)
            .map(|(dir, id)| CacheKey::new(dir, id, debug.is_some(), name_entry));
        let build_id = build_id.map(<[u8]>::to_vec);
        let mut section_ends = vec![string_tables(main.bytes(), 0, &mut strings, &mut shape)?];
        let mut images = vec![main];
        if let Some(debug) = debug {
            if let Some(ends) = string_tables(debug.bytes(), 1, &mut strings, &mut shape) {
                section_ends.push(ends);
                images.push(debug);
            }
        }
        let shape = shape_hash(&shape, images[0].bytes().len());
        let read = key.as_ref().and_then(|key| key.read(shape, strings.len()));
        let records = match read {
            Some(records) => records,
            None => {
                let mut records = Vec::new();
                for (image, data) in images.iter().enumerate() {
                    collect_functions(data.bytes(), image, &strings, &mut records);
                }
                if name_entry {
                    records.push(Record {
                        start: entry,
                        size: 0,
                        name: 0,
                        section: NO_SECTION,
                        strings: NAMED_ENTRY,
                        rank: 3,
                        zero: 0,
                    });
                }
                sort_by_start(&mut records);
                if let Some(key) = &key {
                    key.write(shape, &records);
                }
                Records::Built(records)
            }
        };
        let gaps = text.iter().map(|_| OnceLock::new()).collect();
        Some(SymbolTable {
            section_ends,
            gaps,
            images,
            strings,
            records,
            fdes,
            text,
            build_id,
        })
    }

    /// As [`SymbolTable::new`] for an image without debug file.
    pub fn from_elf(main: Image, name_entry: bool) -> Option<SymbolTable> {
        SymbolTable::new(main, None, name_entry)
    }

    /// The function containing ELF virtual address `svma`, or `None` outside every
    /// function and every executable section.
    pub fn lookup(&self, svma: u64) -> Option<Symbol> {
        let before = self.entry_before(svma);
        if let Some(entry) = before.filter(|e| svma < e.end) {
            return Some(self.symbol(entry));
        }
        // Not inside the last function that starts before it: in a gap of executable code?
        let section = self.text.iter().position(|t| t.0 <= svma && svma < t.1)?;
        let gaps = self.gaps_of(section);
        let at = gaps.partition_point(|g| g.0 <= svma);
        let &(start, end) = gaps.get(at.checked_sub(1)?)?;
        (svma < end).then(|| {
            self.symbol(Entry {
                start,
                end,
                record: None,
            })
        })
    }

    /// As [`SymbolTable::lookup`], with the ELF virtual addresses `[lo, hi)` around `svma`
    /// that every lookup answers the same: the function's start up to its end or the next
    /// function's start, whichever comes first (a function that starts inside another
    /// answers from there); a gap's bounds; `svma` alone where no function is found.
    pub fn lookup_extent(&self, svma: u64) -> (Option<Symbol>, (u64, u64)) {
        let before = self.entry_before(svma);
        if let Some(entry) = before.filter(|e| svma < e.end) {
            // No function starts in `(entry.start, svma]` (it is the one before `svma`), and
            // none in `(svma, next)`: every address of `[entry.start, min(end, next))` has
            // `entry` as the function before it, and lies inside it.
            let next = self.next_entry(svma).map_or(u64::MAX, |e| e.start);
            return (Some(self.symbol(entry)), (entry.start, entry.end.min(next)));
        }
        let gap = self
            .text
            .iter()
            .position(|t| t.0 <= svma && svma < t.1)
            .and_then(|section| {
                let gaps = self.gaps_of(section);
                let at = gaps.partition_point(|g| g.0 <= svma);
                let &(start, end) = gaps.get(at.checked_sub(1)?)?;
                (svma < end).then_some((start, end))
            });
        match gap {
            Some((start, end)) => (
                Some(self.symbol(Entry {
                    start,
                    end,
                    record: None,
                })),
                (start, end),
            ),
            None => (None, (svma, svma.saturating_add(1))),
        }
    }

    /// The parts of executable section `section` that no function covers, `[start, end)`
    /// sorted (worked out on the first lookup that needs them).
    fn gaps_of(&self, section: usize) -> &[(u64, u64)] {
        self.gaps[section].get_or_init(|| {
            let (begin, end) = self.text[section];
            // Covered from the section's start by the function just before it, if any.
            let mut covered_to = begin
                .checked_sub(1)
                .and_then(|b| self.entry_before(b))
                .map_or(begin, |e| e.end.clamp(begin, end));
            let mut gaps = Vec::new();
            let mut next = begin.checked_sub(1).and_then(|b| self.next_entry(b));
            while let Some(entry) = next.filter(|e| e.start < end) {
                if entry.start > covered_to {
                    gaps.push((covered_to, entry.start));
                }
                covered_to = covered_to.max(entry.end);
                next = self.next_entry(entry.start);
            }
            if covered_to < end {
                gaps.push((covered_to, end));
            }
            gaps
        })
    }

    /// Every function named `name` or `name.<suffix>` (compiler-split parts such as
    /// `.cold`), as `[start, end)` ranges sorted by start.
    pub fn ranges_of(&self, name: &str) -> Vec<(u64, u64)> {
        let wanted = name.as_bytes();
        let matches = |bytes: &[u8]| {
            bytes == wanted
                || bytes
                    .strip_prefix(wanted)
                    .is_some_and(|rest| rest.starts_with(b"."))
        };
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (at, record) in self.records.iter().enumerate() {
            if ranges.last().is_some_and(|r| r.0 == record.start)
                || !self.starts_with(record, wanted)
            {
                continue;
            }
            if !self.usable(at) {
                continue;
            }
            let Some(winner) = self.winner_at(record.start) else {
                continue;
            };
            if matches(self.name(&self.records[winner]).unwrap_or_default()) {
                ranges.push((record.start, self.symbol_end(winner)));
            }
        }
        ranges
    }

    /// Number of function symbols read (before those at one address are merged).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the object has no function symbol.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// `entry` as a [`Symbol`].
    fn symbol(&self, entry: Entry) -> Symbol {
        let name = match entry.record {
            Some(at) => {
                let bytes = self.name(&self.records[at]).unwrap_or_default();
                // Usable names were checked to be UTF-8.
                String::from_utf8_lossy(bytes).into_owned()
            }
            None => format!("@?{:#x}", entry.start),
        };
        Symbol {
            start: entry.start,
            end: entry.end,
            name,
        }
    }

    /// The name bytes of `record`: up to the NUL in its string table; `None` when the table
    /// has no NUL after it.
    fn name(&self, record: &Record) -> Option<&[u8]> {
        if record.strings == NAMED_ENTRY {
            return Some(b"_start");
        }
        let strings = self.strings.get(record.strings as usize)?;
        let bytes = self.images[strings.image].bytes();
        let from = strings.range.0 + record.name as usize;
        let rest = bytes.get(from..strings.range.1)?;
        // Not `memchr`: its first call asks the CPU which instructions it has (`CPUID`s,
        // 66–70 µs in this VM); a name is a few dozen bytes.
        let len = rest.iter().position(|&b| b == 0)?;
        Some(&rest[..len])
    }

    /// Whether the name of `record` begins with `prefix` (without reading all of it).
    fn starts_with(&self, record: &Record, prefix: &[u8]) -> bool {
        if record.strings == NAMED_ENTRY {
            return b"_start".starts_with(prefix);
        }
        let Some(strings) = self.strings.get(record.strings as usize) else {
            return false;
        };
        let from = strings.range.0 + record.name as usize;
        self.images[strings.image]
            .bytes()
            .get(from..strings.range.1)
            .is_some_and(|rest| rest.starts_with(prefix))
    }

    /// Whether record `at` has a usable name: not empty, UTF-8 (a symbol whose name is not
    /// names nothing, as if absent). Checked at each use, not remembered: a lookup checks
    /// the few records at one address, and a flag per record (17,000 bytes for libc and
    /// libpython) was pages a short process faulted in at exit for a few dozen of them.
    fn usable(&self, at: usize) -> bool {
        self.name(&self.records[at])
            .is_some_and(|n| !n.is_empty() && std::str::from_utf8(n).is_ok())
    }

    /// The records that start at `records[at].start`, as an index range.
    fn group(&self, at: usize) -> std::ops::Range<usize> {
        let start = self.records[at].start;
        let lo = self.records[..at].partition_point(|r| r.start < start);
        let hi = at + self.records[at..].partition_point(|r| r.start == start);
        lo..hi
    }

    /// The record that names the function at a start: the lowest rank, then the lowest
    /// name, of the records of `group` with a usable name; of a symbol listed twice
    /// (`.symtab` and `.dynsym`), the first read (string tables in the order read: the main
    /// file's `.symtab`, its `.dynsym`, the debug file's; then the name's place there).
    fn winner(&self, group: std::ops::Range<usize>) -> Option<usize> {
        let key = |at: usize| {
            let r = &self.records[at];
            (r.rank, self.name(r), r.strings, r.name)
        };
        group
            .filter(|&at| self.usable(at))
            .min_by(|&a, &b| key(a).cmp(&key(b)))
    }

    /// The winning record of the symbols that start exactly at `start`.
    fn winner_at(&self, start: u64) -> Option<usize> {
        let at = self.records.partition_point(|r| r.start < start);
        (self.records.get(at)?.start == start).then(|| self.winner(self.group(at)))?
    }

    /// The winning record of the greatest symbol start `<= addr`.
    fn symbol_before(&self, addr: u64) -> Option<usize> {
        let mut hi = self.records.partition_point(|r| r.start <= addr);
        while hi > 0 {
            let group = self.group(hi - 1);
            let lo = group.start;
            if let Some(winner) = self.winner(group) {
                return Some(winner);
            }
            hi = lo;
        }
        None
    }

    /// The winning record of the least symbol start `> addr`.
    fn symbol_after(&self, addr: u64) -> Option<usize> {
        let mut lo = self.records.partition_point(|r| r.start <= addr);
        while lo < self.records.len() {
            let group = self.group(lo);
            let hi = group.end;
            if let Some(winner) = self.winner(group) {
                return Some(winner);
            }
            lo = hi;
        }
        None
    }

    /// Whether a symbol with a size covers `addr`: the one with the greatest start `<=
    /// addr` among the winners that have a size.
    fn covered(&self, addr: u64) -> bool {
        let mut below = addr;
        while let Some(winner) = self.symbol_before(below) {
            let record = &self.records[winner];
            if record.size > 0 {
                return addr < record.start.saturating_add(u64::from(record.size));
            }
            let Some(lower) = record.start.checked_sub(1) else {
                return false;
            };
            below = lower;
        }
        false
    }

    /// The main image's bytes (empty for a table of nothing).
    fn main_bytes(&self) -> &[u8] {
        self.images.first().map_or(&[], |image| image.bytes())
    }

    /// The function FDE `at` names, `[start, end)`: the first FDE of its start (the
    /// shortest non-empty one of those that start there), where no symbol starts and none
    /// covers.
    fn fde_entry(&self, at: usize) -> Option<Entry> {
        let data = self.main_bytes();
        let start = self.fdes.start(at, data);
        if at > 0 && self.fdes.start(at - 1, data) == start {
            return None;
        }
        if self.winner_at(start).is_some() || self.covered(start) {
            return None;
        }
        let end = (at..self.fdes.len())
            .take_while(|&i| self.fdes.start(i, data) == start)
            .filter_map(|i| self.fdes.end(i, data))
            .min()?;
        Some(Entry {
            start,
            end,
            record: None,
        })
    }

    /// The end of the function that `winner` names: its size, or where the next function
    /// starts (its section's end at the latest).
    fn symbol_end(&self, winner: usize) -> u64 {
        let record = &self.records[winner];
        if record.size > 0 {
            return record.start.saturating_add(u64::from(record.size));
        }
        let next = self.next_entry(record.start).map_or(u64::MAX, |e| e.start);
        let section_end = match self.strings.get(record.strings as usize) {
            Some(strings) if record.section != NO_SECTION => self.section_ends[strings.image]
                .get(record.section as usize)
                .copied()
                .unwrap_or(u64::MAX),
            _ => u64::MAX,
        };
        next.min(section_end).max(record.start.saturating_add(1))
    }

    /// The function with the greatest start `<= addr`.
    fn entry_before(&self, addr: u64) -> Option<Entry> {
        let symbol = self.symbol_before(addr);
        let floor = symbol.map(|w| self.records[w].start);
        let data = self.main_bytes();
        let mut at = self.fdes.after(addr, data);
        while at > 0 && floor.is_none_or(|f| self.fdes.start(at - 1, data) > f) {
            at -= 1;
            if let Some(entry) = self.fde_entry(at) {
                return Some(entry);
            }
        }
        symbol.map(|w| Entry {
            start: self.records[w].start,
            end: self.symbol_end(w),
            record: Some(w),
        })
    }

    /// The function with the least start `> addr`.
    fn next_entry(&self, addr: u64) -> Option<Entry> {
        let symbol = self.symbol_after(addr);
        let ceiling = symbol.map_or(u64::MAX, |w| self.records[w].start);
        let data = self.main_bytes();
        let mut at = self.fdes.after(addr, data);
        while at < self.fdes.len() && self.fdes.start(at, data) < ceiling {
            if let Some(entry) = self.fde_entry(at) {
                return Some(entry);
            }
            at += 1;
        }
        symbol.map(|w| Entry {
            start: self.records[w].start,
            end: self.symbol_end(w),
            record: Some(w),
        })
    }
}

/// Sorts `records` by start, in place: distributed into buckets by address first (function
/// starts spread evenly over an object's code; an American flag sort's one permutation
/// pass), then each bucket of about four sorted. Three times faster than sorting the whole
/// array on this machine's libpython (11,000 records), which every short process pays once
/// per object its samples touch, and without a second copy of the records to fault in.
fn sort_by_start(records: &mut [Record]) {
    let n = records.len();
    let (Some(low), Some(high)) = (
        records.iter().map(|r| r.start).min(),
        records.iter().map(|r| r.start).max(),
    ) else {
        return;
    };
    // About four records a bucket: bucket = (start - low) >> shift.
    let span = high - low;
    let shift = (64 - span.leading_zeros()).saturating_sub((n / 4).max(1).ilog2());
    let buckets = (span >> shift) as usize + 1;
    let bucket = |start: u64| ((start - low) >> shift) as usize;
    let mut first = vec![0usize; buckets + 1];
    for r in records.iter() {
        first[bucket(r.start) + 1] += 1;
    }
    for b in 0..buckets {
        first[b + 1] += first[b];
    }
    // next[b]: the first place of bucket b not yet holding one of its records.
    let mut next = first[..buckets].to_vec();
    for b in 0..buckets {
        while next[b] < first[b + 1] {
            let home = bucket(records[next[b]].start);
            if home == b {
                next[b] += 1;
            } else {
                records.swap(next[b], next[home]);
                next[home] += 1;
            }
        }
    }
    for b in 0..buckets {
        records[first[b]..first[b + 1]].sort_unstable_by_key(|r| r.start);
    }
}

/// The symbol tables of ELF image `data` that [`collect_functions`] reads (`.symtab`, then
/// `.dynsym`, those that are not empty and have a string table): appends where their
/// names are to `strings`, as image number `image`, and their numbers of entries to
/// `shape`. Returns the end address of each of its sections, by index; `None` when `data`
/// is not 64-bit ELF.
fn string_tables(
    data: &[u8],
    image: usize,
    strings: &mut Vec<Strings>,
    shape: &mut Vec<u64>,
) -> Option<Vec<u64>> {
    use object::read::elf::{ElfFile64, SectionHeader};
    let file = ElfFile64::<object::Endianness>::parse(data).ok()?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    // The end of each section, by index (a symbol's function ends there at the latest).
    let section_ends: Vec<u64> = sections
        .iter()
        .map(|s| s.sh_addr(endian) + s.sh_size(endian))
        .collect();
    for (dynamic, table) in [
        (false, file.elf_symbol_table()),
        (true, file.elf_dynamic_symbol_table()),
    ] {
        if table.is_empty() || strings.len() >= usize::from(u8::MAX) {
            continue;
        }
        let Some(range) = sections
            .section(table.string_section())
            .ok()
            .and_then(|s| s.data(endian, data).ok())
            .map(|d| {
                let from = d.as_ptr() as usize - data.as_ptr() as usize;
                (from, from + d.len())
            })
        else {
            continue;
        };
        strings.push(Strings {
            image,
            range,
            dynamic,
        });
        shape.push(table.len() as u64);
    }
    Some(section_ends)
}

/// Appends a [`Record`] for each function symbol of the ELF image `data` (defined, at a
/// non-zero address) to `records`, from the symbol tables that [`string_tables`] listed in
/// `strings` for image number `image`.
fn collect_functions(data: &[u8], image: usize, strings: &[Strings], records: &mut Vec<Record>) {
    use object::elf;
    use object::read::elf::{ElfFile64, Sym};
    let Ok(file) = ElfFile64::<object::Endianness>::parse(data) else {
        return;
    };
    let endian = file.endian();
    let sections = file.elf_section_table();
    let section_count = sections.len();
    for (index, listed) in strings.iter().enumerate().filter(|(_, s)| s.image == image) {
        let table = if listed.dynamic {
            file.elf_dynamic_symbol_table()
        } else {
            file.elf_symbol_table()
        };
        // `string_tables` lists at most 255 tables.
        let index = index as u8;
        // Room for all of them at once: growing by copying would fault in every page twice.
        records.reserve(table.len());
        for (symbol_index, sym) in table.enumerate() {
            if !matches!(sym.st_type(), elf::STT_FUNC | elf::STT_GNU_IFUNC) {
                continue;
            }
            let shndx = sym.st_shndx(endian);
            let start = sym.st_value(endian);
            if start == 0 || shndx == elf::SHN_UNDEF {
                continue;
            }
            let section = match shndx {
                elf::SHN_XINDEX => table
                    .shndx(endian, symbol_index)
                    .filter(|&i| i != 0)
                    .map(|i| i as usize),
                i if i < elf::SHN_LORESERVE => Some(i as usize),
                _ => None,
            };
            let rank = match sym.st_bind() {
                elf::STB_LOCAL => 2,
                elf::STB_WEAK => 1,
                _ => 0,
            };
            records.push(Record {
                start,
                size: u32::try_from(sym.st_size(endian)).unwrap_or(u32::MAX),
                name: sym.st_name(endian),
                section: section
                    .filter(|&i| i < section_count)
                    .and_then(|i| u16::try_from(i).ok())
                    .filter(|&i| i != NO_SECTION)
                    .unwrap_or(NO_SECTION),
                strings: index,
                rank,
                zero: 0,
            });
        }
    }
}

/// The run-time address of the data symbol `name` of `object` (from `.symtab`, where
/// `static` variables are listed; or a separate debug file found by build-id), or `None`
/// when the object is stripped of it.
pub fn data_symbol(object: &ObjectInfo, name: &str) -> Option<u64> {
    let find = |file: &object::File<'_>| {
        file.symbols()
            .find(|s| s.kind() == SymbolKind::Data && !s.is_undefined() && s.name() == Ok(name))
            .map(|s| s.address() + object.bias)
    };
    with_file(object, |elf| {
        find(elf).or_else(|| {
            let debug = debug_file_for(elf.build_id().ok().flatten()?)?;
            find(&object::File::parse(&*debug).ok()?)
        })
    })
}

/// The run-time address and size (bytes) of section `name` of `object` (asyncio's
/// `.AsyncioDebug`), from its file's section headers, which the loaded image does not
/// keep; `None` when the object has no such section.
pub fn section(object: &ObjectInfo, name: &str) -> Option<(u64, u64)> {
    with_file(object, |elf| {
        let section = elf.section_by_name(name)?;
        Some((object.bias.wrapping_add(section.address()), section.size()))
    })
}

/// `read` of the ELF file of `object` (by its path), mapped read-only.
fn with_file<T>(
    object: &ObjectInfo,
    read: impl FnOnce(&object::File<'_>) -> Option<T>,
) -> Option<T> {
    let file = std::fs::File::open(&object.path).ok()?;
    // SAFETY: as in `load`.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    read(&object::File::parse(&*map).ok()?)
}

/// `bytes` in lower-case hexadecimal, two digits each (how build-ids name files).
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        text.push(char::from(DIGITS[usize::from(b >> 4)]));
        text.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    text
}

/// The separate debug file of an object with build-id `id`, where Debian's `-dbg` and
/// `-dbgsym` packages put it: `/usr/lib/debug/.build-id/<first byte>/<rest>.debug`.
fn debug_file_for(id: &[u8]) -> Option<memmap2::Mmap> {
    let file = std::fs::File::open(debug_path(id)?).ok()?;
    // SAFETY: read-only private mapping of a file that is not modified while we read it.
    unsafe { memmap2::Mmap::map(&file) }.ok()
}

/// Where [`debug_file_for`] looks for the debug file of build-id `id`.
fn debug_path(id: &[u8]) -> Option<String> {
    let (first, rest) = id.split_first()?;
    Some(format!(
        "/usr/lib/debug/.build-id/{first:02x}/{}.debug",
        hex(rest)
    ))
}

/// The directory of the symbol cache ([`use_cache`]); unset or `None`: no cache.
static CACHE_DIR: OnceLock<Option<PathBuf>> = OnceLock::new();

/// Keeps the sorted function-symbol records of the objects whose tables are built in
/// `dir` (`PYIGPROF_SYMBOL_CACHE`), by build-id: the next process that names addresses of
/// the same object reads them instead of reading its whole `.symtab` and sorting it (libc
/// with its debug file, 0.5–3 ms; libpython 0.5 ms on this machine). Set once, by the
/// constructor, before any table is built; `None` turns the cache off.
pub fn use_cache(dir: Option<PathBuf>) {
    let _ = CACHE_DIR.set(dir);
}

/// Tables already read, and the names kept between runs of the objects named so far
/// ([`name_at`]), by (path, load bias).
#[derive(Default)]
pub(crate) struct Loaded {
    tables: HashMap<(PathBuf, u64), Arc<SymbolTable>>,
    names: HashMap<(PathBuf, u64), names::Names>,
}

static LOADED: Mutex<Option<Loaded>> = Mutex::new(None);

/// The tables read so far, for `fork` ([`crate::fork_locks`]): the window writer and
/// `attach`'s control thread look tables up while they write a profile.
pub(crate) fn fork_lock() -> &'static Mutex<Option<Loaded>> {
    &LOADED
}

/// The symbol table of `object` (read once, then cached). An object without a readable
/// file (or ELF image in memory, for the vDSO) gets an empty table.
pub fn table_for(object: &ObjectInfo, is_main: bool) -> Arc<SymbolTable> {
    let key = (object.path.clone(), object.bias);
    if let Some(cached) = LOADED
        .lock()
        .ok()
        .and_then(|m| m.as_ref().and_then(|m| m.tables.get(&key).cloned()))
    {
        return cached;
    }
    let table = Arc::new(load(object, is_main).unwrap_or_default());
    if let Ok(mut map) = LOADED.lock() {
        map.get_or_insert_with(Loaded::default)
            .tables
            .insert(key, table.clone());
    }
    table
}

/// The function at ELF virtual address `svma` of `object` (the main program when
/// `is_main`), as [`table_for`]'s [`SymbolTable::lookup`] answers: from the names kept
/// between runs (`names.rs`) when an earlier answer covers `svma`, else from the table,
/// the answer then kept ([`save_names`] writes it). Objects without a build-id, the vDSO,
/// and every object when the symbol cache is off are named from their tables alone.
pub fn name_at(object: &ObjectInfo, is_main: bool, svma: u64) -> Option<Symbol> {
    let key = (object.path.clone(), object.bias);
    let kept = {
        let Ok(mut loaded) = LOADED.lock() else {
            return table_for(object, is_main).lookup(svma);
        };
        let names = loaded
            .get_or_insert_with(Loaded::default)
            .names
            .entry(key.clone())
            .or_insert_with(|| names::Names::open(names_path(object, is_main)));
        if let Some(answer) = names.find(svma) {
            return answer;
        }
        names.kept()
    };
    let table = table_for(object, is_main);
    if !kept {
        return table.lookup(svma);
    }
    let (answer, range) = table.lookup_extent(svma);
    // The file read is the image loaded (not one replaced on disk since).
    if table.build_id.as_deref() == object.build_id.as_ref().map(|id| id.as_bytes()) {
        if let Ok(mut loaded) = LOADED.lock() {
            if let Some(names) = loaded.as_mut().and_then(|l| l.names.get_mut(&key)) {
                names.add(range, answer.clone());
            }
        }
    }
    answer
}

/// Writes the names [`name_at`] took from the tables since the last time, object by
/// object, for the next process (called once a profile's functions are named).
pub fn save_names() {
    if let Ok(mut loaded) = LOADED.lock() {
        for names in loaded.iter_mut().flat_map(|l| l.names.values_mut()) {
            names.save();
        }
    }
}

/// Where the names of `object` are kept: `<cache>/<build-id>.<d|n><e|->.names` (`d` when
/// it has a separate debug file, whose symbols name more; `e` for the main program, whose
/// entry point is named), or `None` when it cannot have them.
fn names_path(object: &ObjectInfo, is_main: bool) -> Option<PathBuf> {
    let dir = CACHE_DIR.get()?.as_deref()?;
    let id = object.build_id.filter(|_| !object.in_memory)?;
    let debug = Path::new(&debug_path(id.as_bytes())?).exists();
    Some(cache_file(dir, id.as_bytes(), debug, is_main, "names"))
}

/// A file of the symbol cache's directory `dir` about the object with build-id `id`:
/// `<build-id>.<d|n><e|->.<kind>`, `d` when it has a separate debug file, `e` when its
/// entry point is named.
fn cache_file(dir: &Path, id: &[u8], debug: bool, entry: bool, kind: &str) -> PathBuf {
    let mut name = hex(id);
    name.push('.');
    name.push(if debug { 'd' } else { 'n' });
    name.push(if entry { 'e' } else { '-' });
    name.push('.');
    name.push_str(kind);
    dir.join(name)
}

fn load(object: &ObjectInfo, is_main: bool) -> Option<SymbolTable> {
    if object.in_memory {
        // The vDSO is a complete ELF image, mapped in whole pages from its first address. Its
        // `PT_LOAD` ends before the section headers (0x1522 vs 0x15e0 on this machine's
        // kernel), which are on the last page: the image read ends at the page boundary.
        let page = 4096;
        let len = (object.range.1.div_ceil(page) * page - object.range.0) as usize;
        // SAFETY: the vDSO stays mapped for the life of the process.
        let image = unsafe { std::slice::from_raw_parts(object.range.0 as *const u8, len) };
        return SymbolTable::from_elf(Image::Memory(image), false);
    }
    let file = std::fs::File::open(&object.path).ok()?;
    // SAFETY: a read-only private mapping of a file; shared objects are not rewritten in
    // place while mapped (installers replace them by rename).
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let debug = object::File::parse(&*map)
        .ok()?
        .build_id()
        .ok()
        .flatten()
        .and_then(debug_file_for);
    let cache = CACHE_DIR.get().and_then(|dir| dir.as_deref());
    SymbolTable::cached(Image::Mapped(map), debug.map(Image::Mapped), is_main, cache)
}

#[cfg(test)]
mod tests {
    use super::reference::ReferenceTable;
    use super::*;

    fn own_executable() -> SymbolTable {
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        SymbolTable::from_elf(Image::Owned(data), true).unwrap()
    }

    #[test]
    fn finds_static_and_exported_functions_of_a_real_binary() {
        let table = own_executable();
        assert!(table.len() > 100, "only {} symbols", table.len());
        let main = table.ranges_of("main");
        assert_eq!(main.len(), 1, "{main:?}");
        let (start, end) = main[0];
        assert_eq!(table.lookup(start).unwrap().name, "main");
        assert_eq!(table.lookup(end - 1).unwrap().name, "main");
        assert!(table.ranges_of("_start").len() == 1);
    }

    #[test]
    fn lookup_outside_every_symbol_is_none() {
        let table = own_executable();
        assert!(table.lookup(0).is_none());
        assert!(table.lookup(u64::MAX - 1).is_none());
    }

    /// Objects of this machine that cover the cases: `.symtab` (libpython, this test
    /// binary), only `.dynsym` and `.eh_frame` (Debian's libz, libcrypto, libc), SIMD code
    /// without CFI (libjpeg-turbo), a static stripped executable (Debian's python3.11).
    fn real_objects() -> Vec<(String, Vec<u8>, bool)> {
        let mut paths: Vec<(String, bool)> = vec![(
            std::env::current_exe()
                .unwrap()
                .to_string_lossy()
                .into_owned(),
            true,
        )];
        for path in [
            "/lib/x86_64-linux-gnu/libz.so.1",
            "/usr/lib/x86_64-linux-gnu/libjpeg.so.62",
            "/usr/lib/x86_64-linux-gnu/libcrypto.so.3",
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0",
        ] {
            paths.push((path.to_string(), false));
        }
        paths.push(("/usr/bin/python3.11".to_string(), true));
        paths
            .into_iter()
            .filter_map(|(path, main)| Some((path.clone(), std::fs::read(&path).ok()?, main)))
            .collect()
    }

    /// What `lookup_extent` says holds for a range (the names kept between runs answer
    /// from it) holds at its first, middle and last address, on real objects: symbols
    /// inside others, functions known by their unwind entry, gaps, stripped executables.
    #[test]
    fn an_answer_holds_over_the_whole_range_lookup_extent_gives() {
        let objects = real_objects();
        assert!(objects.len() >= 3, "too few objects: {}", objects.len());
        for (path, data, main) in objects {
            let reference = ReferenceTable::from_elf(&data, main).unwrap();
            let table = SymbolTable::from_elf(Image::Owned(data.clone()), main).unwrap();
            let file = object::File::parse(&*data).unwrap();
            let mut addresses: Vec<u64> = Vec::new();
            for s in reference.symbols().step_by(3) {
                addresses.extend([s.start, s.end - 1, s.end]);
            }
            for section in file.sections().filter(|s| s.kind() == SectionKind::Text) {
                addresses.extend(
                    (section.address()..section.address() + section.size() + 64).step_by(991),
                );
            }
            addresses.extend([0, 1, u64::MAX - 1]);
            let mut wide = 0;
            for &svma in &addresses {
                let (answer, (lo, hi)) = table.lookup_extent(svma);
                assert_eq!(answer, table.lookup(svma), "{path}: {svma:#x}");
                assert!(
                    lo <= svma && svma < hi,
                    "{path}: {svma:#x} not in {lo:#x}..{hi:#x}"
                );
                for x in [lo, lo + (hi - lo) / 2, hi - 1] {
                    assert_eq!(
                        reference.lookup(x),
                        answer,
                        "{path}: {x:#x} in {lo:#x}..{hi:#x} (from {svma:#x})"
                    );
                }
                if hi - lo > 1 {
                    wide += 1;
                }
            }
            assert!(
                wide * 10 >= addresses.len() * 9,
                "{path}: {wide} of {} ranges wider than their address",
                addresses.len()
            );
        }
    }

    #[test]
    fn every_address_resolves_as_the_table_built_in_full() {
        let objects = real_objects();
        assert!(
            objects.len() >= 3,
            "too few objects to compare: {}",
            objects.len()
        );
        for (path, data, main) in objects {
            let reference = ReferenceTable::from_elf(&data, main).unwrap();
            let table = SymbolTable::from_elf(Image::Owned(data.clone()), main).unwrap();
            let file = object::File::parse(&*data).unwrap();
            // Every boundary the full table has, the addresses around it, and a stride
            // through every executable section.
            let mut addresses: Vec<u64> = Vec::new();
            for s in reference.symbols() {
                addresses.extend([
                    s.start.wrapping_sub(1),
                    s.start,
                    s.start + 1,
                    s.end - 1,
                    s.end,
                ]);
            }
            for section in file.sections().filter(|s| s.kind() == SectionKind::Text) {
                addresses.extend(
                    (section.address()..section.address() + section.size() + 64).step_by(97),
                );
            }
            addresses.extend([0, 1, u64::MAX - 1]);
            let mut compared = 0;
            for &addr in &addresses {
                assert_eq!(
                    table.lookup(addr),
                    reference.lookup(addr),
                    "{path}: {addr:#x}"
                );
                compared += 1;
            }
            for name in [
                "main",
                "_start",
                "deflate",
                "_PyEval_EvalFrameDefault",
                "malloc",
                "memcpy",
            ] {
                assert_eq!(
                    table.ranges_of(name),
                    reference.ranges_of(name),
                    "{path}: {name}"
                );
            }
            eprintln!(
                "{path}: {compared} addresses, {} functions: same",
                reference.len()
            );
        }
    }

    /// A fresh directory for a test's symbol cache.
    fn cache_dir(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("pyigprof-symcache-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// The one cache file in `dir`.
    fn only_file(dir: &Path) -> PathBuf {
        let files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files[0].clone()
    }

    #[test]
    fn a_cached_table_answers_as_the_table_it_was_written_from() {
        let dir = cache_dir("same");
        let mut objects = 0;
        for (path, data, main) in real_objects() {
            let Ok(Some(id)) = object::File::parse(&*data)
                .unwrap()
                .build_id()
                .map(|i| i.map(<[u8]>::to_vec))
            else {
                continue;
            };
            let built = SymbolTable::from_elf(Image::Owned(data.clone()), main).unwrap();
            let first =
                SymbolTable::cached(Image::Owned(data.clone()), None, main, Some(&dir)).unwrap();
            assert!(
                matches!(first.records, Records::Built(_)),
                "{path}: nothing cached yet"
            );
            let read =
                SymbolTable::cached(Image::Owned(data.clone()), None, main, Some(&dir)).unwrap();
            assert!(
                matches!(read.records, Records::Cached(_)),
                "{path}: not read from the cache"
            );
            assert!(
                dir.join(format!(
                    "{}.n{}.symbols",
                    hex(&id),
                    if main { 'e' } else { '-' }
                ))
                .exists()
                    || !main,
                "{path}: no cache file named by its build-id"
            );
            assert_eq!(read.len(), built.len(), "{path}");
            let file = object::File::parse(&*data).unwrap();
            let mut compared = 0;
            for section in file.sections().filter(|s| s.kind() == SectionKind::Text) {
                for addr in (section.address()..section.address() + section.size() + 64).step_by(61)
                {
                    assert_eq!(read.lookup(addr), built.lookup(addr), "{path}: {addr:#x}");
                    compared += 1;
                }
            }
            for name in [
                "main",
                "_start",
                "deflate",
                "_PyEval_EvalFrameDefault",
                "malloc",
            ] {
                assert_eq!(
                    read.ranges_of(name),
                    built.ranges_of(name),
                    "{path}: {name}"
                );
            }
            eprintln!(
                "{path}: {compared} addresses, {} records read back: same",
                read.len()
            );
            objects += 1;
        }
        assert!(objects >= 3, "too few objects with a build-id: {objects}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// libpython's bytes (this test binary's without it), its table built in full, and a
    /// fresh cache directory for `test` with the one file its records were written to.
    fn written_cache(test: &str) -> (Vec<u8>, SymbolTable, PathBuf, PathBuf) {
        let path = "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0";
        let data = std::fs::read(path)
            .or_else(|_| std::fs::read(std::env::current_exe().unwrap()))
            .unwrap();
        let built = SymbolTable::from_elf(Image::Owned(data.clone()), false).unwrap();
        let dir = cache_dir(test);
        SymbolTable::cached(Image::Owned(data.clone()), None, false, Some(&dir)).unwrap();
        let file = only_file(&dir);
        (data, built, dir, file)
    }

    #[test]
    fn a_damaged_or_foreign_cache_file_is_not_used() {
        let (data, built, dir, file) = written_cache("damaged");
        let eval = built.ranges_of("_PyEval_EvalFrameDefault");
        let good = std::fs::read(&file).unwrap();
        let mut unsorted = good.clone();
        // The first and last records swapped: out of order.
        let (a, b) = (CACHE_HEADER, CACHE_HEADER + 24 * (built.len() - 1));
        let first: Vec<u8> = unsorted[a..a + 24].to_vec();
        let second: Vec<u8> = unsorted[b..b + 24].to_vec();
        unsorted[a..a + 24].copy_from_slice(&second);
        unsorted[b..b + 24].copy_from_slice(&first);
        let mut other_shape = good.clone();
        other_shape[8] ^= 1;
        let mut bad_strings = good.clone();
        bad_strings[CACHE_HEADER + 18] = 9; // `strings` of the first record
        for (what, bytes) in [
            ("truncated", good[..good.len() - 7].to_vec()),
            ("empty", Vec::new()),
            ("unsorted", unsorted),
            ("of another shape", other_shape),
            ("naming a string table that is not there", bad_strings),
        ] {
            std::fs::write(&file, &bytes).unwrap();
            let table =
                SymbolTable::cached(Image::Owned(data.clone()), None, false, Some(&dir)).unwrap();
            assert!(
                matches!(table.records, Records::Built(_)),
                "a cache file {what} was used"
            );
            assert_eq!(table.ranges_of("_PyEval_EvalFrameDefault"), eval, "{what}");
            // Rewritten whole.
            assert!(
                std::fs::read(&file).unwrap() == good,
                "{what}: not rewritten"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A cache file with two records damaged in the middle after it was written, between
    /// the records the spot check reads: used, every lookup answers without a panic, and
    /// the functions away from the damaged records keep their names.
    #[test]
    fn a_cache_file_damaged_in_the_middle_names_the_rest_as_before() {
        let (data, built, dir, file) = written_cache("damaged-middle");
        let mut bytes = std::fs::read(&file).unwrap();
        // Between two of the records the spot check reads.
        let middle = built.len() / 2 + 3;
        for (at, (strings, size)) in [(middle, (9u8, 0u32)), (middle + 1, (0, u32::MAX))] {
            let record = CACHE_HEADER + 24 * at;
            bytes[record + 18] = strings;
            bytes[record + 8..record + 12].copy_from_slice(&size.to_ne_bytes());
            // Starts at the top of the address space: out of order as well.
            bytes[record..record + 8].copy_from_slice(&(u64::MAX - 1).to_ne_bytes());
        }
        std::fs::write(&file, &bytes).unwrap();
        let table =
            SymbolTable::cached(Image::Owned(data.clone()), None, false, Some(&dir)).unwrap();
        assert!(matches!(table.records, Records::Cached(_)));
        let (mut same, mut tried) = (0, 0);
        for record in built.records.iter().step_by(7) {
            tried += 1;
            if table.lookup(record.start) == built.lookup(record.start) {
                same += 1;
            }
        }
        for address in [0, u64::MAX - 1, u64::MAX] {
            let _ = table.lookup(address);
        }
        assert_eq!(
            table.ranges_of("_PyEval_EvalFrameDefault"),
            built.ranges_of("_PyEval_EvalFrameDefault")
        );
        assert!(
            same * 100 >= tried * 99,
            "{same} of {tried} functions named as before"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn stripped_functions_are_named_by_their_unwind_entry() {
        // Debian's libz is stripped of .symtab: static functions such as deflate_slow are only
        // known from .eh_frame.
        let Ok(data) = std::fs::read("/lib/x86_64-linux-gnu/libz.so.1") else {
            return;
        };
        let table = SymbolTable::from_elf(Image::Owned(data.clone()), false).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let unnamed: Vec<Symbol> = fdes::ranges(&file)
            .iter()
            .filter_map(|&(start, _)| table.lookup(start))
            .filter(|s| s.name.starts_with("@?"))
            .collect();
        assert!(!unnamed.is_empty());
        let f = &unnamed[0];
        assert_eq!(f.name, format!("@?{:#x}", f.start));
        // Every address inside it resolves to the same function.
        assert_eq!(table.lookup(f.start).unwrap().start, f.start);
        assert_eq!(table.lookup(f.end - 1).unwrap().start, f.start);
        assert_eq!(table.ranges_of("deflate").len(), 1);
    }

    #[test]
    fn code_without_symbol_or_unwind_entry_is_one_function_per_gap() {
        // Debian's libjpeg-turbo is stripped, and its SIMD kernels (NASM) have no FDE: 76 KB
        // of .text after the last C function that only a gap can name.
        for path in [
            "/usr/lib/x86_64-linux-gnu/libjpeg.so.62",
            "/lib/x86_64-linux-gnu/libz.so.1",
            "/usr/lib/x86_64-linux-gnu/libcrypto.so.3",
        ] {
            let Ok(data) = std::fs::read(path) else {
                continue;
            };
            let table = SymbolTable::from_elf(Image::Owned(data.clone()), false).unwrap();
            let file = object::File::parse(&*data).unwrap();
            let text = file.section_by_name(".text").unwrap();
            let fdes = fdes::ranges(&file);
            let mut unwound = 0;
            let mut gaps: Vec<Symbol> = Vec::new();
            // Every instruction address of the code resolves to a function that holds it.
            for addr in (text.address()..text.address() + text.size()).step_by(7) {
                let symbol = table
                    .lookup(addr)
                    .unwrap_or_else(|| panic!("{path}: nothing at {addr:#x}"));
                assert!(symbol.start <= addr && addr < symbol.end);
                let at = fdes.partition_point(|r| r.0 <= addr);
                if at > 0 && addr < fdes[at - 1].1 {
                    unwound += 1;
                    // Code with an FDE is never named after a gap.
                    assert!(
                        !symbol.name.starts_with("@?") || fdes.iter().any(|r| r.0 == symbol.start),
                        "{path}: {addr:#x} has an FDE but is in {symbol:?}"
                    );
                }
                let is_gap = symbol.name.starts_with("@?")
                    && !fdes.iter().any(|r| r.0 == symbol.start)
                    && symbol.end - symbol.start > 4096;
                if is_gap && !gaps.contains(&symbol) {
                    gaps.push(symbol);
                }
            }
            assert!(unwound > 0, "{path}: no FDE read");
            if path.contains("libjpeg") {
                assert_eq!(gaps.len(), 1, "{path}: {gaps:?}");
                let gap = &gaps[0];
                let middle = table.lookup(gap.start + (gap.end - gap.start) / 2).unwrap();
                assert_eq!(&middle, gap);
                assert_eq!(gap.name, format!("@?{:#x}", gap.start));
            }
        }
    }

    #[test]
    fn functions_of_the_vdso_are_named_from_its_image_in_memory() {
        crate::capture::unwind::modules::rescan();
        let snapshot = crate::capture::unwind::modules::current().expect("modules");
        let Some(vdso) = snapshot.objects.iter().find(|o| o.in_memory) else {
            return; // a kernel without a vDSO
        };
        let table = table_for(vdso, false);
        let (start, end) = *table
            .ranges_of("__vdso_clock_gettime")
            .first()
            .expect("__vdso_clock_gettime in the vDSO's symbols");
        // An address inside the function (the profile's frames are return addresses - 1).
        let inside = table.lookup(start + (end - start) / 2).expect("a symbol");
        assert!(inside.name.contains("clock_gettime"), "{}", inside.name);
    }

    #[test]
    fn garbage_is_not_an_elf_file() {
        assert!(
            SymbolTable::from_elf(Image::Owned(b"not an elf file at all".to_vec()), false)
                .is_none()
        );
    }
}
