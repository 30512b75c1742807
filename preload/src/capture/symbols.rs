//! Function symbols of ELF objects, from `.symtab` (static functions included) and
//! `.dynsym`, read with the `object` crate. Used when the profile is written and once at
//! start-up (to find every part of the evaluator); never in the signal handler.

use crate::capture::unwind::modules::ObjectInfo;
use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

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

/// An object's function symbols, sorted by address.
///
/// Built once per object when the profile is written, so its construction is most of what
/// a short process pays at exit: entries are compact (addresses and a reference to the
/// name), names are copied into one buffer, and unnamed functions (`@?0x<start>`) are named
/// only when looked up.
#[derive(Debug, Default)]
pub struct SymbolTable {
    entries: Vec<Entry>,
    /// The names of the entries that have one, one after the other.
    names: Vec<u8>,
}

/// One function of a [`SymbolTable`]: `[start, end)` and its name.
#[derive(Clone, Copy, Debug)]
struct Entry {
    start: u64,
    end: u64,
    name: Name,
}

/// The name of an [`Entry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Name {
    /// `SymbolTable::names[at..at + len]`.
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

impl SymbolTable {
    /// Reads the function symbols of the ELF image `data`. When `name_entry` is set and no
    /// symbol covers the ELF entry point, it is named `_start` (what the entry point of an
    /// executable is, stripped or not).
    pub fn from_elf(data: &[u8], name_entry: bool) -> Option<SymbolTable> {
        SymbolTable::from_elf_with_debug(data, None, name_entry)
    }

    /// As [`SymbolTable::from_elf`], adding the symbols of a separate debug file (the
    /// `.symtab` that a distribution strips from `data` and ships apart, found by build-id).
    pub fn from_elf_with_debug(
        data: &[u8],
        debug: Option<&[u8]>,
        name_entry: bool,
    ) -> Option<SymbolTable> {
        let file = object::File::parse(data).ok()?;
        let mut table = SymbolTable::default();
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
            if !covered(start) && raw[..named].binary_search_by_key(&start, |s| s.start).is_err() {
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
            (a.start, a.rank)
                .cmp(&(b.start, b.rank))
                .then_with(|| self.name_bytes(a.name, a.start).cmp(&self.name_bytes(b.name, b.start)))
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

    /// Whether the table has no symbol.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
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

/// The run-time address of the data symbol `name` of `object` (from `.symtab`, where
/// `static` variables are listed; or a separate debug file found by build-id), or `None`
/// when the object is stripped of it.
pub fn data_symbol(object: &ObjectInfo, name: &str) -> Option<u64> {
    let file = std::fs::File::open(&object.path).ok()?;
    // SAFETY: as in `load`.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let elf = object::File::parse(&*map).ok()?;
    let find = |file: &object::File<'_>| {
        file.symbols()
            .find(|s| s.kind() == SymbolKind::Data && !s.is_undefined() && s.name() == Ok(name))
            .map(|s| s.address() + object.bias)
    };
    find(&elf).or_else(|| {
        let debug = debug_file_for(elf.build_id().ok().flatten()?)?;
        find(&object::File::parse(&*debug).ok()?)
    })
}

/// The separate debug file of an object with build-id `id`, where Debian's `-dbg` and
/// `-dbgsym` packages put it: `/usr/lib/debug/.build-id/<first byte>/<rest>.debug`.
fn debug_file_for(id: &[u8]) -> Option<memmap2::Mmap> {
    let (first, rest) = id.split_first()?;
    let hex: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    let path = format!("/usr/lib/debug/.build-id/{first:02x}/{hex}.debug");
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: read-only private mapping of a file that is not modified while we read it.
    unsafe { memmap2::Mmap::map(&file) }.ok()
}

/// The `[start, end)` ELF virtual addresses of the functions that the object's `.eh_frame`
/// describes (one per FDE, read with gimli), sorted by start. Empty when it has none.
fn fde_ranges<'data>(file: &object::File<'data>) -> Vec<(u64, u64)> {
    use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
    let Some(section) = file.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    let Ok(data) = section.data() else {
        return Vec::new();
    };
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let eh_frame = EhFrame::new(data, LittleEndian);
    let mut ranges = Vec::new();
    type Reader<'data> = gimli::EndianSlice<'data, LittleEndian>;
    let mut cies: Vec<(gimli::EhFrameOffset, gimli::CommonInformationEntry<Reader<'data>>)> =
        Vec::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        // Objects have a few CIEs and thousands of FDEs: each CIE is parsed once.
        let cie = |section: &EhFrame<Reader<'data>>,
                   bases: &BaseAddresses,
                   offset: gimli::EhFrameOffset| {
            if let Some((_, cie)) = cies.iter().find(|(at, _)| *at == offset) {
                return Ok(cie.clone());
            }
            let cie = section.cie_from_offset(bases, offset)?;
            cies.push((offset, cie.clone()));
            Ok(cie)
        };
        if let Ok(fde) = partial.parse(cie) {
            if fde.len() > 0 {
                ranges.push((fde.initial_address(), fde.initial_address() + fde.len()));
            }
        }
    }
    ranges.sort_unstable();
    ranges
}

/// Tables already read, by (path, load bias).
type Loaded = HashMap<(PathBuf, u64), Arc<SymbolTable>>;

static LOADED: Mutex<Option<Loaded>> = Mutex::new(None);

/// The symbol table of `object` (read once, then cached). An object without a readable
/// file (or ELF image in memory, for the vDSO) gets an empty table.
pub fn table_for(object: &ObjectInfo, is_main: bool) -> Arc<SymbolTable> {
    let key = (object.path.clone(), object.bias);
    if let Some(cached) = LOADED
        .lock()
        .ok()
        .and_then(|m| m.as_ref().and_then(|m| m.get(&key).cloned()))
    {
        return cached;
    }
    let table = Arc::new(load(object, is_main).unwrap_or_default());
    if let Ok(mut map) = LOADED.lock() {
        map.get_or_insert_with(HashMap::new)
            .insert(key, table.clone());
    }
    table
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
        return SymbolTable::from_elf(image, false);
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
    SymbolTable::from_elf_with_debug(&map, debug.as_deref(), is_main)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_executable() -> SymbolTable {
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        SymbolTable::from_elf(&data, true).unwrap()
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

    #[test]
    fn stripped_functions_are_named_by_their_unwind_entry() {
        // Debian's libz is stripped of .symtab: static functions such as deflate_slow are only
        // known from .eh_frame_hdr.
        let Ok(data) = std::fs::read("/lib/x86_64-linux-gnu/libz.so.1") else {
            return;
        };
        let table = SymbolTable::from_elf(&data, false).unwrap();
        let unnamed: Vec<Symbol> = table
            .symbols()
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
            let table = SymbolTable::from_elf(&data, false).unwrap();
            let file = object::File::parse(&*data).unwrap();
            let text = file.section_by_name(".text").unwrap();
            let fdes = fde_ranges(&file);
            let mut unwound = 0;
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
            }
            assert!(unwound > 0, "{path}: no FDE read");
            if path.contains("libjpeg") {
                let gaps: Vec<Symbol> = table
                    .symbols()
                    .filter(|s| s.name.starts_with("@?") && !fdes.iter().any(|r| r.0 == s.start))
                    .filter(|s| s.end - s.start > 4096)
                    .collect();
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
        assert!(SymbolTable::from_elf(b"not an elf file at all", false).is_none());
    }
}
