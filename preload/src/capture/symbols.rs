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
#[derive(Debug, Default)]
pub struct SymbolTable {
    symbols: Vec<Symbol>,
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
        // (start, size, rank, name, end of its section): rank prefers global over weak over
        // local names for aliases at the same address.
        let mut raw: Vec<(u64, u64, u8, String, u64)> = Vec::new();
        collect_functions(&file, &mut raw);
        if let Some(debug) = debug.and_then(|d| object::File::parse(d).ok()) {
            collect_functions(&debug, &mut raw);
        }
        let entry = file.entry();
        if name_entry && entry != 0 {
            raw.push((entry, 0, 3, "_start".into(), u64::MAX));
        }
        // Where no symbol covers a function that has unwind information (stripped objects,
        // static functions of a library without .symtab), the FDE's start is the function's
        // start: name it `@?0x<start>` so that one function stays one entry.
        let fdes = fde_ranges(&file);
        raw.sort_by(|a, b| (a.0, a.2, &a.3).cmp(&(b.0, b.2, &b.3)));
        raw.dedup_by_key(|s| s.0);
        let sized: Vec<(u64, u64)> = raw
            .iter()
            .filter(|s| s.1 > 0)
            .map(|s| (s.0, s.0 + s.1))
            .collect();
        let covered = |addr: u64| {
            let at = sized.partition_point(|r| r.0 <= addr);
            at > 0 && addr < sized[at - 1].1
        };
        for &(start, end) in &fdes {
            if !covered(start) && raw.binary_search_by_key(&start, |s| s.0).is_err() {
                raw.push((start, end - start, 4, format!("@?{start:#x}"), u64::MAX));
            }
        }
        raw.sort_by(|a, b| (a.0, a.2, &a.3).cmp(&(b.0, b.2, &b.3)));
        raw.dedup_by_key(|s| s.0);
        let starts: Vec<u64> = raw.iter().map(|s| s.0).collect();
        let mut symbols: Vec<Symbol> = raw
            .into_iter()
            .enumerate()
            .map(|(i, (start, size, _, name, section_end))| {
                let next = starts.get(i + 1).copied().unwrap_or(u64::MAX);
                let end = if size > 0 {
                    start + size
                } else {
                    next.min(section_end).max(start + 1)
                };
                Symbol { start, end, name }
            })
            .collect();
        // Code that neither a symbol nor an FDE describes (hand-written assembly without
        // CFI in a stripped library, such as libjpeg-turbo's SIMD kernels) is one function
        // per gap, named `@?0x<start of the gap>`, rather than one per address.
        let regions = uncovered_code(&file, &symbols);
        symbols.extend(regions);
        symbols.sort_by_key(|s| s.start);
        Some(SymbolTable { symbols })
    }

    /// The symbol containing ELF virtual address `svma`.
    pub fn lookup(&self, svma: u64) -> Option<&Symbol> {
        let at = self.symbols.partition_point(|s| s.start <= svma);
        let sym = self.symbols.get(at.checked_sub(1)?)?;
        (svma < sym.end).then_some(sym)
    }

    /// Every symbol named `name` or `name.<suffix>` (compiler-split parts such as
    /// `.cold`), as `[start, end)` ranges.
    pub fn ranges_of(&self, name: &str) -> Vec<(u64, u64)> {
        self.symbols
            .iter()
            .filter(|s| {
                s.name == name
                    || s.name
                        .strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with('.'))
            })
            .map(|s| (s.start, s.end))
            .collect()
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// Whether the table has no symbol.
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }
}

/// The parts of `file`'s executable sections that no symbol of `symbols` (sorted by start)
/// covers, each as a [`Symbol`] named `@?0x<start>` (ELF virtual addresses).
fn uncovered_code(file: &object::File<'_>, symbols: &[Symbol]) -> Vec<Symbol> {
    let mut regions = Vec::new();
    for section in file.sections() {
        if section.kind() != SectionKind::Text || section.size() == 0 {
            continue;
        }
        let (begin, end) = (section.address(), section.address() + section.size());
        // Walk the symbols that overlap the section, keeping the end of what is covered.
        let first = symbols.partition_point(|s| s.start < begin);
        let mut covered_to = match first.checked_sub(1) {
            Some(before) => symbols[before].end.clamp(begin, end),
            None => begin,
        };
        for symbol in symbols[first..].iter().take_while(|s| s.start < end) {
            if symbol.start > covered_to {
                regions.push(Symbol {
                    start: covered_to,
                    end: symbol.start,
                    name: format!("@?{covered_to:#x}"),
                });
            }
            covered_to = covered_to.max(symbol.end);
        }
        if covered_to < end {
            regions.push(Symbol {
                start: covered_to,
                end,
                name: format!("@?{covered_to:#x}"),
            });
        }
    }
    regions
}

/// Appends the function symbols of `file` (`.symtab` and `.dynsym`) to `raw` as
/// (start, size, rank, name, end of its section).
fn collect_functions(file: &object::File<'_>, raw: &mut Vec<(u64, u64, u8, String, u64)>) {
    let section_end = |index: Option<object::SectionIndex>| -> u64 {
        index
            .and_then(|i| file.section_by_index(i).ok())
            .map_or(u64::MAX, |sec| sec.address() + sec.size())
    };
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        if sym.kind() != SymbolKind::Text || sym.address() == 0 || sym.is_undefined() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() {
            continue;
        }
        let rank = if sym.is_global() && !sym.is_weak() {
            0
        } else if sym.is_weak() {
            1
        } else {
            2
        };
        raw.push((
            sym.address(),
            sym.size(),
            rank,
            name.to_string(),
            section_end(sym.section_index()),
        ));
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
fn fde_ranges(file: &object::File<'_>) -> Vec<(u64, u64)> {
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
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
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
        let unnamed: Vec<&Symbol> = table
            .symbols
            .iter()
            .filter(|s| s.name.starts_with("@?"))
            .collect();
        assert!(!unnamed.is_empty());
        let f = unnamed[0];
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
                let gaps: Vec<&Symbol> = table
                    .symbols
                    .iter()
                    .filter(|s| s.name.starts_with("@?") && !fdes.iter().any(|r| r.0 == s.start))
                    .filter(|s| s.end - s.start > 4096)
                    .collect();
                assert_eq!(gaps.len(), 1, "{path}: {gaps:?}");
                let gap = gaps[0];
                let middle = table.lookup(gap.start + (gap.end - gap.start) / 2).unwrap();
                assert_eq!(middle, gap);
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
