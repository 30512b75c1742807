//! Function symbols of ELF objects, from `.symtab` (static functions included) and
//! `.dynsym`, read with the `object` crate. Used when the profile is written and once at
//! start-up (to find every part of the evaluator); never in the signal handler.

use crate::capture::unwind::modules::ObjectInfo;
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
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
        let fdes = fde_starts(&file);
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
        for (i, &start) in fdes.iter().enumerate() {
            if !covered(start) && raw.binary_search_by_key(&start, |s| s.0).is_err() {
                let end = fdes.get(i + 1).copied().unwrap_or(u64::MAX);
                raw.push((
                    start,
                    end.saturating_sub(start),
                    4,
                    format!("@?{start:#x}"),
                    u64::MAX,
                ));
            }
        }
        raw.sort_by(|a, b| (a.0, a.2, &a.3).cmp(&(b.0, b.2, &b.3)));
        raw.dedup_by_key(|s| s.0);
        let starts: Vec<u64> = raw.iter().map(|s| s.0).collect();
        let symbols = raw
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

/// Start addresses of the functions described by the object's `.eh_frame_hdr` search
/// table, sorted. Empty when the object has none or it uses an encoding other than the one
/// GNU ld writes (`DW_EH_PE_datarel | DW_EH_PE_sdata4`).
fn fde_starts(file: &object::File<'_>) -> Vec<u64> {
    let Some(section) = file.section_by_name(".eh_frame_hdr") else {
        return Vec::new();
    };
    let (Ok(hdr), base) = (section.data(), section.address()) else {
        return Vec::new();
    };
    // version, eh_frame_ptr encoding, fde_count encoding, table encoding.
    if hdr.len() < 12 || hdr[0] != 1 || hdr[2] != 0x03 || hdr[3] != 0x3b {
        return Vec::new();
    }
    let pointer_size = match hdr[1] & 0x0f {
        0x03 | 0x0b => 4,
        0x04 | 0x0c => 8,
        _ => return Vec::new(),
    };
    let count_at = 4 + pointer_size;
    let Some(count) = hdr
        .get(count_at..count_at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    else {
        return Vec::new();
    };
    let table = &hdr[count_at + 4..];
    let mut starts: Vec<u64> = table
        .chunks_exact(8)
        .take(count as usize)
        .map(|entry| {
            base.wrapping_add(
                i32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]) as i64 as u64,
            )
        })
        .collect();
    starts.sort_unstable();
    starts
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
