//! The symbol table as first written: every function of an object, sorted, named and
//! deduplicated up front. It defines what [`super::SymbolTable`] answers (which builds none
//! of it), and the tests compare the two address by address on real objects.

use super::fdes::ranges as fde_ranges;
use super::Symbol;
use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};

/// An object's function symbols, sorted by address.
///
/// Built once per object when the profile is written, so its construction is most of what
/// a short process pays at exit: entries are compact (addresses and a reference to the
/// name), names are copied into one buffer, and unnamed functions (`@?0x<start>`) are named
/// only when looked up.
#[derive(Debug, Default)]
pub struct ReferenceTable {
    entries: Vec<Entry>,
    /// The names of the entries that have one, one after the other.
    names: Vec<u8>,
}

/// One function of a [`ReferenceTable`]: `[start, end)` and its name.
#[derive(Clone, Copy, Debug)]
struct Entry {
    start: u64,
    end: u64,
    name: Name,
}

/// The name of an [`Entry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Name {
    /// `ReferenceTable::names[at..at + len]`.
    Text { at: u32, len: u32 },
    /// A function no symbol names: `@?0x<start>`.
    Unnamed,
}

/// A function symbol while the table is built: start, size, rank (global 0, weak 1, local
/// 2, the entry point 3, an FDE's 4: the lowest names a function when several start at one
/// address), name, and the end of its section.
#[derive(Clone, Copy, Debug)]
struct Raw {
    start: u64,
    size: u64,
    rank: u8,
    name: Name,
    section_end: u64,
}

impl ReferenceTable {
    /// Reads the function symbols of the ELF image `data`. When `name_entry` is set and no
    /// symbol covers the ELF entry point, it is named `_start` (what the entry point of an
    /// executable is, stripped or not).
    pub fn from_elf(data: &[u8], name_entry: bool) -> Option<ReferenceTable> {
        ReferenceTable::from_elf_with_debug(data, None, name_entry)
    }

    /// As [`ReferenceTable::from_elf`], adding the symbols of a separate debug file (the
    /// `.symtab` that a distribution strips from `data` and ships apart, found by build-id).
    pub fn from_elf_with_debug(
        data: &[u8],
        debug: Option<&[u8]>,
        name_entry: bool,
    ) -> Option<ReferenceTable> {
        let file = object::File::parse(data).ok()?;
        let mut table = ReferenceTable::default();
        let mut raw: Vec<Raw> = Vec::new();
        collect_functions(&file, &mut raw, &mut table.names);
        if let Some(debug) = debug.and_then(|d| object::File::parse(d).ok()) {
            collect_functions(&debug, &mut raw, &mut table.names);
        }
        let entry = file.entry();
        if name_entry && entry != 0 {
            let at = table.names.len() as u32;
            table.names.extend_from_slice(b"_start");
            raw.push(Raw {
                start: entry,
                size: 0,
                rank: 3,
                name: Name::Text { at, len: 6 },
                section_end: u64::MAX,
            });
        }
        // Where no symbol covers a function that has unwind information (stripped objects,
        // static functions of a library without .symtab), the FDE's start is the function's
        // start: name it `@?0x<start>` so that one function stays one entry.
        let fdes = fde_ranges(&file);
        table.sort_and_dedup(&mut raw);
        let sized: Vec<(u64, u64)> = raw
            .iter()
            .filter(|s| s.size > 0)
            .map(|s| (s.start, s.start + s.size))
            .collect();
        let covered = |addr: u64| {
            let at = sized.partition_point(|r| r.0 <= addr);
            at > 0 && addr < sized[at - 1].1
        };
        let named = raw.len();
        for &(start, end) in &fdes {
            if !covered(start)
                && raw[..named]
                    .binary_search_by_key(&start, |s| s.start)
                    .is_err()
            {
                raw.push(Raw {
                    start,
                    size: end - start,
                    rank: 4,
                    name: Name::Unnamed,
                    section_end: u64::MAX,
                });
            }
        }
        table.sort_and_dedup(&mut raw);
        table.entries = raw
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let next = raw.get(i + 1).map_or(u64::MAX, |n| n.start);
                let end = if s.size > 0 {
                    s.start + s.size
                } else {
                    next.min(s.section_end).max(s.start + 1)
                };
                Entry {
                    start: s.start,
                    end,
                    name: s.name,
                }
            })
            .collect();
        // Code that neither a symbol nor an FDE describes (hand-written assembly without
        // CFI in a stripped library, such as libjpeg-turbo's SIMD kernels) is one function
        // per gap, named `@?0x<start of the gap>`, rather than one per address.
        let gaps = uncovered_code(&file, &table.entries);
        table.entries.extend(gaps);
        table.entries.sort_by_key(|e| e.start);
        Some(table)
    }

    /// Sorts `raw` by start, then rank, then name, and keeps the first of each start.
    fn sort_and_dedup(&self, raw: &mut Vec<Raw>) {
        raw.sort_by(|a, b| {
            (a.start, a.rank).cmp(&(b.start, b.rank)).then_with(|| {
                self.name_bytes(a.name, a.start)
                    .cmp(&self.name_bytes(b.name, b.start))
            })
        });
        raw.dedup_by_key(|s| s.start);
    }

    /// The bytes of name `name` of the function at `start`.
    fn name_bytes(&self, name: Name, start: u64) -> std::borrow::Cow<'_, [u8]> {
        match name {
            Name::Text { at, len } => {
                std::borrow::Cow::Borrowed(&self.names[at as usize..(at + len) as usize])
            }
            Name::Unnamed => std::borrow::Cow::Owned(format!("@?{start:#x}").into_bytes()),
        }
    }

    /// `entry` as a [`Symbol`].
    fn symbol(&self, entry: &Entry) -> Symbol {
        let name = self.name_bytes(entry.name, entry.start);
        Symbol {
            start: entry.start,
            end: entry.end,
            // Names were checked to be UTF-8 when read.
            name: String::from_utf8_lossy(&name).into_owned(),
        }
    }

    /// The symbol containing ELF virtual address `svma`.
    pub fn lookup(&self, svma: u64) -> Option<Symbol> {
        let at = self.entries.partition_point(|s| s.start <= svma);
        let entry = self.entries.get(at.checked_sub(1)?)?;
        (svma < entry.end).then(|| self.symbol(entry))
    }

    /// Every symbol named `name` or `name.<suffix>` (compiler-split parts such as
    /// `.cold`), as `[start, end)` ranges.
    pub fn ranges_of(&self, name: &str) -> Vec<(u64, u64)> {
        self.entries
            .iter()
            .filter(|e| {
                let bytes = self.name_bytes(e.name, e.start);
                bytes.as_ref() == name.as_bytes()
                    || bytes
                        .strip_prefix(name.as_bytes())
                        .is_some_and(|rest| rest.starts_with(b"."))
            })
            .map(|e| (e.start, e.end))
            .collect()
    }

    /// Every function of the table, by address.
    pub fn symbols(&self) -> impl Iterator<Item = Symbol> + '_ {
        self.entries.iter().map(|e| self.symbol(e))
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The parts of `file`'s executable sections that no entry of `entries` (sorted by start)
/// covers, each an unnamed [`Entry`] (`@?0x<start>`; ELF virtual addresses).
fn uncovered_code(file: &object::File<'_>, entries: &[Entry]) -> Vec<Entry> {
    let mut regions = Vec::new();
    let gap = |start: u64, end: u64| Entry {
        start,
        end,
        name: Name::Unnamed,
    };
    for section in file.sections() {
        if section.kind() != SectionKind::Text || section.size() == 0 {
            continue;
        }
        let (begin, end) = (section.address(), section.address() + section.size());
        let first = entries.partition_point(|s| s.start < begin);
        let mut covered_to = match first.checked_sub(1) {
            Some(before) => entries[before].end.clamp(begin, end),
            None => begin,
        };
        for entry in entries[first..].iter().take_while(|s| s.start < end) {
            if entry.start > covered_to {
                regions.push(gap(covered_to, entry.start));
            }
            covered_to = covered_to.max(entry.end);
        }
        if covered_to < end {
            regions.push(gap(covered_to, end));
        }
    }
    regions
}

/// Appends the function symbols of `file` (`.symtab` and `.dynsym`) to `raw`, their names
/// to `names`. Symbols whose name is empty or not UTF-8 are left out.
fn collect_functions(file: &object::File<'_>, raw: &mut Vec<Raw>, names: &mut Vec<u8>) {
    // The end of each section, by index (a symbol's function ends there at the latest).
    let mut section_ends: Vec<Option<u64>> = Vec::new();
    for section in file.sections() {
        let index = section.index().0;
        if section_ends.len() <= index {
            section_ends.resize(index + 1, None);
        }
        section_ends[index] = Some(section.address() + section.size());
    }
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        if sym.kind() != SymbolKind::Text || sym.address() == 0 || sym.is_undefined() {
            continue;
        }
        let Ok(name) = sym.name_bytes() else { continue };
        if name.is_empty() || std::str::from_utf8(name).is_err() {
            continue;
        }
        let rank = if sym.is_global() && !sym.is_weak() {
            0
        } else if sym.is_weak() {
            1
        } else {
            2
        };
        let at = names.len() as u32;
        names.extend_from_slice(name);
        raw.push(Raw {
            start: sym.address(),
            size: sym.size(),
            rank,
            name: Name::Text {
                at,
                len: name.len() as u32,
            },
            section_end: sym
                .section_index()
                .and_then(|i| section_ends.get(i.0).copied().flatten())
                .unwrap_or(u64::MAX),
        });
    }
}
