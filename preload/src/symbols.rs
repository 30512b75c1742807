//! Function symbols of ELF objects, from `.symtab` (static functions included) and
//! `.dynsym`, read with the `object` crate. Used when the profile is written and once at
//! start-up (to find every part of the evaluator); never in the signal handler.

use crate::modules::ObjectInfo;
use object::{Object, ObjectSymbol, SymbolKind};
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
        let file = object::File::parse(data).ok()?;
        // (start, size, rank, name): rank prefers global over weak over local names for
        // aliases at the same address.
        let mut raw: Vec<(u64, u64, u8, String)> = Vec::new();
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
            raw.push((sym.address(), sym.size(), rank, name.to_string()));
        }
        raw.sort_by(|a, b| (a.0, a.2, &a.3).cmp(&(b.0, b.2, &b.3)));
        raw.dedup_by_key(|s| s.0);
        let starts: Vec<u64> = raw.iter().map(|s| s.0).collect();
        let mut symbols: Vec<Symbol> = raw
            .into_iter()
            .enumerate()
            .map(|(i, (start, size, _, name))| {
                let next = starts.get(i + 1).copied().unwrap_or(u64::MAX);
                let end = if size > 0 { start + size } else { next };
                Symbol { start, end, name }
            })
            .collect();
        let entry = file.entry();
        if name_entry && entry != 0 && !symbols.iter().any(|s| s.start <= entry && entry < s.end) {
            let at = symbols.partition_point(|s| s.start < entry);
            let end = symbols.get(at).map_or(entry + 1, |s| s.start);
            symbols.insert(at, Symbol { start: entry, end, name: "_start".into() });
        }
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
            .filter(|s| s.name == name || s.name.strip_prefix(name).is_some_and(|rest| rest.starts_with('.')))
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

static LOADED: Mutex<Option<HashMap<(PathBuf, u64), Arc<SymbolTable>>>> = Mutex::new(None);

/// The symbol table of `object` (read once, then cached). An object without a readable
/// file (or ELF image in memory, for the vDSO) gets an empty table.
pub fn table_for(object: &ObjectInfo, is_main: bool) -> Arc<SymbolTable> {
    let key = (object.path.clone(), object.bias);
    if let Some(cached) = LOADED.lock().ok().and_then(|m| m.as_ref().and_then(|m| m.get(&key).cloned())) {
        return cached;
    }
    let table = Arc::new(load(object, is_main).unwrap_or_default());
    if let Ok(mut map) = LOADED.lock() {
        map.get_or_insert_with(HashMap::new).insert(key, table.clone());
    }
    table
}

fn load(object: &ObjectInfo, is_main: bool) -> Option<SymbolTable> {
    if object.in_memory {
        // The vDSO is a complete ELF image, mapped from its first address.
        let len = (object.range.1 - object.range.0) as usize;
        // SAFETY: the vDSO stays mapped for the life of the process.
        let image = unsafe { std::slice::from_raw_parts(object.range.0 as *const u8, len) };
        return SymbolTable::from_elf(image, false);
    }
    let file = std::fs::File::open(&object.path).ok()?;
    // SAFETY: a read-only private mapping of a file; shared objects are not rewritten in
    // place while mapped (installers replace them by rename).
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    SymbolTable::from_elf(&map, is_main)
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
    fn garbage_is_not_an_elf_file() {
        assert!(SymbolTable::from_elf(b"not an elf file at all", false).is_none());
    }
}
