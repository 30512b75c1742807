//! Names for the native functions a dump leaves unnamed, read from the binaries on this
//! machine.
//!
//! A native frame without a symbol is written `FN<id>=(F<fid>=(<object>)+<start>
//! N=(@?0x<address>))` (docs/dump-format.md, "What a function is"). Here each such name is
//! looked up in the object file `<object>`:
//! - its symbol tables, `.symtab` and `.dynsym`;
//! - a separate debug file: found by build-id as `<debug-dir>/.build-id/xx/yyyy.debug`,
//!   by the `.gnu_debuglink` section (next to the object, in its `.debug/` directory, or
//!   as `<debug-dir>/<object's directory>/<link>`, checked against the link's CRC), or as
//!   `<debug-dir>/<object path>.debug` or `<debug-dir>/<object path>` (the search of GDB,
//!   "Debugging Information in Separate Files"), and last from the debuginfod servers
//!   of `DEBUGINFOD_URLS` ([`crate::debuginfod`]); a debug file is only used if its
//!   build-id is the object's;
//! - DWARF (in the object or its debug file, via the `addr2line` crate) for the function
//!   name where no symbol covers the address, and for the source `file:line` where a
//!   resolved function starts ([`crate::profile::Function::source`]);
//! - the object's call frame information (`.eh_frame`) where nothing names an address of
//!   an IgProf dump: the FDE that covers it is the function, or else the gap between
//!   symbols and FDEs (see below).
//!
//! Which address a name stands for depends on who wrote the dump:
//! - pyigprof writes `@?0x<a>` with `<start>` = `<a>`, the ELF virtual address where the
//!   function starts (found from the unwind tables). Only a symbol that starts exactly
//!   there names it; an address that falls strictly inside another symbol shows that the
//!   file on this machine is not the one that was profiled (rebuilt, updated): then no
//!   name of that file is used and a warning says so.
//! - IgProf writes `@?0x<run-time address>` of the sampled instruction, with `<start>` =
//!   the address minus the object's load base (`dladdr`'s `dli_fbase`), and a separate
//!   `FN` for every such address. As IgProf's own `igprof-analyse` does
//!   (src/IgResolveSymbols.h, `FileInfo::createOffsetMap`), the ELF virtual address is
//!   `<start>` plus `p_vaddr - p_offset` of the object's first `PT_LOAD` segment; the name
//!   is the symbol covering it. The function's start becomes the symbol's, and the
//!   node's offset the distance from it, so that all the addresses of one function merge
//!   into one function.
//!
//! # Functions that stay unnamed: `@{<object>+<offset>}`
//!
//! A function that nothing names gets the name IgProf's own `igprof-analyse` gives it
//! (`symlookup` in src/analyse.cc): `@{<base name of the object>+<offset in decimal>}`,
//! e.g. `@{libcrypto.so.3+2736704}`, where the offset is the function's `<start>` in the
//! dump's own coordinates (see [`igprof_name`]): for pyigprof's dumps the ELF virtual
//! address of the function, for IgProf's the address minus the load base. Either way it
//! does not change with address randomisation, unlike a run-time address, so two runs of
//! one program have the same names and `--diff` can compare them, and it is exactly
//! what IgProf's analyser prints for the same dump. (For shared libraries and
//! position-independent executables, whose first `PT_LOAD` is at 0, both are the ELF
//! virtual address; for a non-PIE executable, IgProf's offset is the address minus the
//! first `PT_LOAD`'s, 0x400000 on x86-64.) As in IgProf, code in no object (an empty
//! file name `F<fid>=()`, which IgProf's analyser calls `<dynamically generated>`) is
//! `@?0x<start in hex>{<dynamically-generated>}`, and a function whose `<start>` is not
//! positive (0, or above 2^63 as the vsyscall page) keeps its name. Functions of Python
//! code files ([`Profile::is_python_code`]) are never renamed. The base name is the
//! dump's file name (IgProf's analyser first resolves symbolic links on the analysing
//! machine, which can give another base name, e.g. `libz.so.1.3` for `libz.so.1`).
//!
//! IgProf's analyser names each address of an IgProf dump on its own, so one stripped
//! function is as many rows as it had sampled addresses. Here, when no symbol or DWARF
//! names an address but an FDE of the object's `.eh_frame` covers it, the FDE's start is
//! the function's: all the addresses inside one FDE become one function,
//! `@{<object>+<FDE start>}` with the FDE start in the dump's coordinates, and the nodes'
//! offsets the distances from it, merged exactly as the addresses of one symbol are. This
//! grouping is pyigprof's own: the name is the one IgProf's analyser would show for a
//! sample on the function's first instruction. Code that neither a symbol nor an FDE
//! covers (hand-written assembly without CFI, as in OpenSSL or libjpeg-turbo) is grouped
//! the same way by the gap it lies in: the part of an executable section between the
//! symbols and FDEs around it, `@{<object>+<gap start>}`. These are the functions pyigprof
//! itself writes (docs/design.md), so pyigprof's dumps need no grouping: their `<start>`
//! already is the FDE's or the gap's.
//!
//! The unnamed functions of the interpreter itself (`libpython*.so*`, `python3.11`:
//! [`crate::symbol::is_interpreter_file`]) keep a `@?0x…` name instead, because the
//! Python view ([`crate::view::is_plumbing`]) hides exactly those: grouped by FDE, an
//! IgProf dump's addresses become `@?0x<ELF virtual address of the FDE start>`, the name
//! pyigprof writes for that function.
//!
//! With `--no-resolve` this module is not run: names stay exactly as the dump writes
//! them, `@?0x…` included (that option's documented meaning).
//!
//! Each object is read once, and each distinct address of it looked up once. Names that
//! are not `@?0x…` are never changed. Objects that cannot be read get no names, only the
//! `@{…}` renaming (which needs no file), with one warning per object.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use addr2line::gimli;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::error::PROGRAM;
use crate::profile::{FileId, FunctionId, Profile};
use crate::symbol::is_interpreter_file;

/// The directory searched for separate debug files when none is given: where Debian,
/// Ubuntu and Fedora install them (`…-dbgsym`, `…-dbg`, `…-debuginfo` packages).
pub const DEFAULT_DEBUG_DIR: &str = "/usr/lib/debug";

/// Where to look for separate debug files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Global debug directories, searched in order (GDB's `debug-file-directory`),
    /// [`DEFAULT_DEBUG_DIR`] by default.
    pub debug_dirs: Vec<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            debug_dirs: vec![PathBuf::from(DEFAULT_DEBUG_DIR)],
        }
    }
}

/// What [`resolve`] did.
#[derive(Debug)]
pub struct Resolved {
    /// The profile with the names found and the `@{…}` names of the functions that stay
    /// unnamed (the same profile if no name changed).
    pub profile: Profile,
    /// How many functions got a name from a binary (not counting the `@{…}` names of
    /// those that stay unnamed).
    pub named: usize,
    /// One line per object that could not be used, each starting with
    /// `pyigprof-analyse: warning: <object>: `, for the command to print on stderr.
    pub warnings: Vec<String>,
}

/// The address in a `@?0x<address>` name, if `name` is one.
pub fn unnamed_address(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("@?0x")?;
    if hex.is_empty() || hex.len() > 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// Whether `path` names something on disk that can hold native code, rather than a
/// pseudo-file of a profiler (`[vdso]`, `[unknown]`, `[python]`, IgProf's
/// `<dynamically generated>`), the kernel's vDSO as the dynamic loader names it
/// (`linux-vdso.so.1`, `linux-gate.so.1`: it has no file), or nothing at all.
fn is_object_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('[')
        && !path.starts_with('<')
        && !matches!(
            path,
            "linux-vdso.so.1" | "linux-vdso32.so.1" | "linux-vdso64.so.1" | "linux-gate.so.1"
        )
}

/// IgProf's name for an unnamed function (`@?…`) of `file` that starts at `start` (the
/// dump's `+<start>`): `@{<base name of file>+<start in decimal>}`, or
/// `@?0x<start in hex>{<dynamically-generated>}` for code in no file (`file` empty or
/// `<dynamically generated>`); `None` (the name stays) if `start` is not positive, as
/// `symlookup` in IgProf's src/analyse.cc does.
pub fn igprof_name(file: &str, start: i64) -> Option<String> {
    if start <= 0 {
        return None;
    }
    if file.is_empty() || file == "<dynamically generated>" {
        return Some(format!("@?{start:#x}{{<dynamically-generated>}}"));
    }
    let base = file.rsplit('/').next().unwrap_or(file);
    Some(format!("@{{{base}+{start}}}"))
}

/// How the reports spell function `name` of `file` when no symbol names it: a `@?0x<start>`
/// name of a native object gets IgProf's `@{<base name>+<start in decimal>}`
/// ([`igprof_name`]); the interpreter's stay `@?0x…` (the Python view hides them), as do
/// names that are not unnamed functions'. For the live views (`pyigprof dump`, `top`),
/// which get the library's names, so that one function has one name everywhere.
pub fn report_name(file: &str, name: &str) -> String {
    match unnamed_address(name) {
        Some(start) if !is_interpreter_file(file) && start <= i64::MAX as u64 => {
            igprof_name(file, start as i64).unwrap_or_else(|| name.to_string())
        }
        _ => name.to_string(),
    }
}

/// The name of an unnamed function of `file` that starts at `start` in the dump's
/// coordinates and at ELF virtual address `vaddr`: [`igprof_name`], except for the
/// interpreter, whose unnamed functions stay `@?0x<vaddr>` for the Python view to hide
/// (see the module documentation).
fn unnamed_name(file: &str, start: u64, vaddr: u64) -> String {
    if is_interpreter_file(file) {
        return format!("@?{vaddr:#x}");
    }
    igprof_name(file, start as i64).unwrap_or_else(|| format!("@?{vaddr:#x}"))
}

/// How the unnamed functions of `file` are shown, for warnings.
fn unnamed_form(file: &str) -> String {
    if is_interpreter_file(file) {
        return "@?0x<address>".to_string();
    }
    let base = file.rsplit('/').next().unwrap_or(file);
    format!("@{{{base}+<offset>}}")
}

/// Gives names to the `@?0x…` functions of `profile` from the object files they belong
/// to, and IgProf's `@{<object>+<offset>}` names to those that stay unnamed (see the
/// module documentation).
pub fn resolve(profile: Profile, options: &Options) -> Resolved {
    // The unnamed functions of every object.
    let mut by_file: Vec<(FileId, Vec<Unnamed>)> = Vec::new();
    let mut slot: HashMap<FileId, usize> = HashMap::new();
    for (id, function) in profile.functions().iter().enumerate() {
        let Some(address) = unnamed_address(&function.name) else {
            continue;
        };
        if profile.is_python_code(function.file) || !is_object_path(profile.file(function.file)) {
            continue;
        }
        let index = *slot.entry(function.file).or_insert_with(|| {
            by_file.push((function.file, Vec::new()));
            by_file.len() - 1
        });
        // Function counts fit in u32: Profile::intern_function refuses more.
        by_file[index]
            .1
            .push((id as FunctionId, address, function.start as u64));
    }

    let mut renames: HashMap<FunctionId, Rename> = HashMap::new();
    let mut named = 0usize;
    let mut warnings = Vec::new();
    for (file, functions) in &by_file {
        let path = profile.file(*file);
        let symbolizer = match Symbolizer::open(Path::new(path), options) {
            Ok(symbolizer) => symbolizer,
            Err(detail) => {
                warnings.push(format!(
                    "{PROGRAM}: warning: {path}: cannot read it to name its functions ({detail}); {} function(s) stay unnamed: {}",
                    functions.len(),
                    unnamed_form(path)
                ));
                continue;
            }
        };
        let mut found = Vec::new();
        let mut found_named = 0usize;
        let mut mismatched = 0usize;
        let mut cache: HashMap<(u64, bool), Option<(Rename, bool)>> = HashMap::new();
        for &(id, address, start) in functions {
            // pyigprof: the name is the start; IgProf: the name is a run-time address and
            // the start is relative to the load base.
            let exact = address == start;
            let rename = cache
                .entry((start, exact))
                .or_insert_with(|| match symbolizer.lookup(start, exact) {
                    Lookup::Found(rename) => Some((rename, true)),
                    Lookup::Frame {
                        start,
                        vaddr,
                        delta,
                    } => Some((
                        Rename {
                            name: unnamed_name(path, start, vaddr),
                            start,
                            delta,
                            source: None,
                        },
                        false,
                    )),
                    Lookup::Inside => {
                        mismatched += 1;
                        None
                    }
                    Lookup::Missing => None,
                })
                .clone();
            if let Some((rename, is_named)) = rename {
                found_named += usize::from(is_named);
                found.push((id, rename));
            }
        }
        if mismatched > 0 {
            warnings.push(format!(
                "{PROGRAM}: warning: {path}: {mismatched} function start(s) of the profile fall inside other functions of this file, so it is not the file that was profiled; its {} function(s) stay unnamed: {}",
                functions.len(),
                unnamed_form(path)
            ));
            continue;
        }
        named += found_named;
        renames.extend(found);
    }

    // What is still unnamed gets IgProf's name, readable object or not.
    for (id, function) in profile.functions().iter().enumerate() {
        let id = id as FunctionId;
        if renames.contains_key(&id)
            || unnamed_address(&function.name).is_none()
            || profile.is_python_code(function.file)
        {
            continue;
        }
        let file = profile.file(function.file);
        if is_interpreter_file(file) {
            continue;
        }
        if let Some(name) = igprof_name(file, function.start) {
            renames.insert(
                id,
                Rename {
                    name,
                    start: function.start as u64,
                    delta: 0,
                    source: function.source.clone(),
                },
            );
        }
    }

    if renames.is_empty() {
        return Resolved {
            profile,
            named: 0,
            warnings,
        };
    }
    Resolved {
        profile: rebuild(&profile, &renames),
        named,
        warnings,
    }
}

/// An unnamed function: its id, the address in its name, its start.
type Unnamed = (FunctionId, u64, u64);

/// The new identity of one function.
#[derive(Debug, Clone)]
struct Rename {
    /// The symbol (possibly mangled) or DWARF name.
    name: String,
    /// The function's start in the dump's coordinates.
    start: u64,
    /// What to add to the offsets of the function's nodes: the old start minus the new.
    delta: u64,
    /// `file:line` of the function's start, from DWARF.
    source: Option<String>,
}

/// `profile` with `renames` applied: renamed functions that become the same function
/// (same name and file) merge, and so do their nodes with the same parent and offset.
fn rebuild(profile: &Profile, renames: &HashMap<FunctionId, Rename>) -> Profile {
    // The new profile never has more items than the old one, so no table can overflow.
    const FITS: &str = "a renamed profile has no more items than the profile";
    let mut out = Profile::new();
    out.sources = profile.sources.clone();
    out.hidden_nodes = profile.hidden_nodes;
    out.peaks = profile.peaks;
    for name in profile.counters() {
        out.intern_counter(name).expect(FITS);
    }
    for file in profile.files() {
        out.intern_file(file).expect(FITS);
    }
    let mut functions = Vec::with_capacity(profile.functions().len());
    let mut deltas = Vec::with_capacity(profile.functions().len());
    for (id, function) in profile.functions().iter().enumerate() {
        // Files were interned in the same order: ids are unchanged.
        let new = match renames.get(&(id as FunctionId)) {
            Some(rename) => {
                let new = out
                    .intern_function(&rename.name, function.file, rename.start as i64)
                    .expect(FITS);
                if out.function(new).source.is_none() {
                    out.set_source(new, rename.source.clone());
                }
                deltas.push(rename.delta as i64);
                new
            }
            None => {
                let new = out
                    .intern_function(&function.name, function.file, function.start)
                    .expect(FITS);
                out.set_source(new, function.source.clone());
                deltas.push(0);
                new
            }
        };
        functions.push(new);
    }
    for (id, _) in profile.files().iter().enumerate() {
        let id = id as FileId;
        out.set_python_code(id, profile.is_python_code(id));
    }
    let mut mapped = Vec::with_capacity(profile.nodes().len());
    for node in profile.nodes() {
        let parent = node.parent.map(|parent| mapped[parent as usize]);
        let function = node.function as usize;
        let offset = node.offset.wrapping_add(deltas[function]);
        let id = out.child(parent, functions[function], offset).expect(FITS);
        for &(counter, values) in &node.values {
            out.add_values(id, counter, values);
        }
        mapped.push(id);
    }
    out
}

/// The answer for one address.
enum Lookup {
    Found(Rename),
    /// No name, but an FDE or a gap of code without symbol or FDE covers the address:
    /// the function starts at `start` in the dump's coordinates, ELF virtual address
    /// `vaddr`, and the address is `delta` bytes into it.
    Frame {
        start: u64,
        vaddr: u64,
        delta: u64,
    },
    /// The address (a function start) is strictly inside another symbol.
    Inside,
    /// Nothing names it.
    Missing,
}

/// One function symbol.
#[derive(Debug, Clone)]
struct Symbol {
    start: u64,
    /// One past the last byte: start + size, or the next symbol's start for symbols
    /// without a size.
    end: u64,
    /// Whether the symbol table gives the size, so that `end` is known, not guessed.
    sized: bool,
    name: String,
}

/// What one object file (with its debug file) says about addresses.
struct Symbolizer {
    /// Function symbols sorted by start, one per start.
    symbols: Vec<Symbol>,
    /// `p_vaddr - p_offset` of the first `PT_LOAD` segment: IgProf's base.
    vm_base: u64,
    dwarf: Option<addr2line::Context<Reader>>,
    /// The address ranges (start, end) of the FDEs of the object's `.eh_frame`, sorted.
    frames: Vec<(u64, u64)>,
    /// The parts (start, end) of the object's executable sections that no symbol and no
    /// FDE covers, sorted.
    gaps: Vec<(u64, u64)>,
}

type Reader = gimli::EndianRcSlice<gimli::RunTimeEndian>;

impl Symbolizer {
    /// Reads the object at `path` and its debug file, if one is found.
    ///
    /// # Errors
    /// Why the object cannot be used: it cannot be read, or it is not an object file.
    fn open(path: &Path, options: &Options) -> Result<Symbolizer, String> {
        let data = fs::read(path).map_err(|error| error.to_string())?;
        let file =
            object::File::parse(&*data).map_err(|error| format!("not an object file: {error}"))?;
        let vm_base = file
            .segments()
            .next()
            .and_then(|segment| {
                let (offset, _) = segment.file_range();
                segment.address().checked_sub(offset)
            })
            .unwrap_or(0);
        let frames = eh_frame_ranges(&file);
        let debug_data = find_debug_file(path, &file, options);
        let debug = debug_data
            .as_deref()
            .and_then(|data| object::File::parse(data).ok());

        let mut raw: Vec<(u64, u64, u8, String)> = Vec::new();
        collect_symbols(&file, &mut raw);
        if let Some(debug) = &debug {
            collect_symbols(debug, &mut raw);
        }
        let symbols = sort_symbols(raw);

        let has_dwarf = |file: &object::File| {
            file.section_by_name(".debug_info")
                .is_some_and(|section| section.size() > 0)
        };
        let dwarf_file = match &debug {
            Some(debug) if has_dwarf(debug) => Some(debug),
            _ if has_dwarf(&file) => Some(&file),
            _ => None,
        };
        let dwarf = dwarf_file.and_then(|dwarf_file| {
            let mut dwarf = load_dwarf(dwarf_file)?;
            if let Some(sup) = find_supplementary(path, dwarf_file, options) {
                if let Ok(sup_file) = object::File::parse(&*sup) {
                    if let Some(sup_dwarf) = load_dwarf(&sup_file) {
                        dwarf.set_sup(sup_dwarf);
                    }
                }
            }
            addr2line::Context::from_dwarf(dwarf).ok()
        });
        let gaps = uncovered_code(&file, &symbols, &frames);
        Ok(Symbolizer {
            symbols,
            vm_base,
            dwarf,
            frames,
            gaps,
        })
    }

    /// The name of the function at `start` (a dump's `<start>`): for an `exact` (pyigprof)
    /// address, the function that starts there; otherwise (IgProf) the function that
    /// covers `start` + the object's base, or if nothing names it, the FDE or the gap
    /// between them that covers it ([`Lookup::Frame`]).
    fn lookup(&self, start: u64, exact: bool) -> Lookup {
        let base = if exact { 0 } else { self.vm_base };
        let address = start.wrapping_add(base);
        let at = self
            .symbols
            .partition_point(|symbol| symbol.start <= address);
        if let Some(symbol) = at.checked_sub(1).map(|index| &self.symbols[index]) {
            if exact && symbol.start != address {
                // A function start inside a symbol of known extent: another build.
                if symbol.sized && address < symbol.end {
                    return Lookup::Inside;
                }
            } else if address < symbol.end {
                return Lookup::Found(Rename {
                    name: symbol.name.clone(),
                    start: symbol.start.wrapping_sub(base),
                    delta: address - symbol.start,
                    source: self.source(symbol.start),
                });
            }
        }
        if let Some(name) = self.dwarf_name(address) {
            return Lookup::Found(Rename {
                name,
                start,
                delta: 0,
                source: self.source(address),
            });
        }
        // A pyigprof start is already its FDE's (or gap's) start: only IgProf's addresses
        // group.
        if !exact {
            for ranges in [&self.frames, &self.gaps] {
                if let Some(begin) = covering(ranges, address) {
                    return Lookup::Frame {
                        start: begin.wrapping_sub(base),
                        vaddr: begin,
                        delta: address - begin,
                    };
                }
            }
        }
        Lookup::Missing
    }

    /// The name of the (outermost, not inlined) function that DWARF says covers
    /// `address`: its linkage name if it has one, else its name.
    fn dwarf_name(&self, address: u64) -> Option<String> {
        let dwarf = self.dwarf.as_ref()?;
        let mut frames = dwarf.find_frames(address).skip_all_loads().ok()?;
        let mut name = None;
        while let Ok(Some(frame)) = frames.next() {
            if let Some(function) = frame.function {
                if let Ok(raw) = function.raw_name() {
                    name = Some(raw.into_owned());
                }
            }
        }
        name.filter(|name| !name.is_empty())
    }

    /// Where the function at `address` is in its source, `file:line`: the line where
    /// DWARF says it is declared (`DW_AT_decl_file`, `DW_AT_decl_line`, also through the
    /// declaration a definition completes), else the line of its first instruction.
    fn source(&self, address: u64) -> Option<String> {
        self.declaration(address)
            .or_else(|| self.first_line(address))
    }

    /// `DW_AT_decl_file:DW_AT_decl_line` of the (outermost) function covering `address`.
    fn declaration(&self, address: u64) -> Option<String> {
        use gimli::Reader as _;
        let dwarf = self.dwarf.as_ref()?;
        let unit = dwarf.find_dwarf_and_unit(address).skip_all_loads()?;
        let mut frames = dwarf.find_frames(address).skip_all_loads().ok()?;
        let mut offset = None;
        while let Ok(Some(frame)) = frames.next() {
            offset = frame.dw_die_offset.or(offset);
        }
        let mut entry = unit.entry(offset?).ok()?;
        for _ in 0..2 {
            if entry.attr(gimli::DW_AT_decl_line).is_some() {
                break;
            }
            let origin = entry
                .attr_value(gimli::DW_AT_specification)
                .or_else(|| entry.attr_value(gimli::DW_AT_abstract_origin));
            let Some(gimli::AttributeValue::UnitRef(next)) = origin else {
                break;
            };
            entry = unit.entry(next).ok()?;
        }
        let line = entry.attr_value(gimli::DW_AT_decl_line)?.udata_value()?;
        let index = match entry.attr_value(gimli::DW_AT_decl_file)? {
            gimli::AttributeValue::FileIndex(index) => index,
            other => other.udata_value()?,
        };
        let header = unit.line_program.as_ref()?.header();
        let file = header.file(index)?;
        let text = |value| {
            unit.attr_string(value)
                .ok()
                .and_then(|text| text.to_string_lossy().ok().map(|t| t.into_owned()))
        };
        // Pushing an absolute part replaces what is before it.
        let mut path = PathBuf::new();
        if let Some(dir) = &unit.comp_dir {
            path.push(dir.to_string_lossy().ok()?.as_ref());
        }
        if let Some(dir) = file.directory(header).and_then(text) {
            path.push(dir);
        }
        path.push(text(file.path_name())?);
        Some(format!("{}:{line}", path.display()))
    }

    /// `file:line` of `address` according to DWARF's line table.
    fn first_line(&self, address: u64) -> Option<String> {
        let location = self.dwarf.as_ref()?.find_location(address).ok()??;
        match (location.file, location.line) {
            (Some(file), Some(line)) => Some(format!("{file}:{line}")),
            (Some(file), None) => Some(file.to_string()),
            _ => None,
        }
    }
}

/// The start of the range of `ranges` (sorted (start, end), by start) that covers
/// `address`: the last one that starts at or before it.
fn covering(ranges: &[(u64, u64)], address: u64) -> Option<u64> {
    let at = ranges.partition_point(|&(begin, _)| begin <= address);
    let &(begin, end) = ranges.get(at.checked_sub(1)?)?;
    (address < end).then_some(begin)
}

/// The parts of `file`'s executable sections that neither a symbol of `symbols` nor a
/// range of `frames` (both sorted by start) covers, sorted: code without symbol or CFI
/// (hand-written assembly of a stripped library), each part one function as pyigprof
/// makes it when it writes a dump (docs/design.md).
fn uncovered_code(
    file: &object::File,
    symbols: &[Symbol],
    frames: &[(u64, u64)],
) -> Vec<(u64, u64)> {
    let mut covered: Vec<(u64, u64)> = symbols
        .iter()
        .map(|symbol| (symbol.start, symbol.end))
        .chain(frames.iter().copied())
        .collect();
    covered.sort_unstable();
    let mut gaps = Vec::new();
    for section in file.sections() {
        if section.kind() != object::SectionKind::Text || section.size() == 0 {
            continue;
        }
        let begin = section.address();
        let end = begin.saturating_add(section.size());
        let mut covered_to = begin;
        for &(start, stop) in covered.iter().take_while(|range| range.0 < end) {
            if stop <= covered_to {
                continue;
            }
            if start > covered_to {
                gaps.push((covered_to, start));
            }
            covered_to = stop;
            if covered_to >= end {
                break;
            }
        }
        if covered_to < end {
            gaps.push((covered_to, end));
        }
    }
    gaps.sort_unstable();
    gaps
}

/// The address ranges (start, end) of the FDEs in the `.eh_frame` of `file`, sorted
/// by start, one per start (the longest); empty if it has none or it cannot be parsed
/// (the ranges read up to an error are kept).
fn eh_frame_ranges(file: &object::File) -> Vec<(u64, u64)> {
    use gimli::UnwindSection as _;
    let Some(section) = file.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    // A debug file's sections have no contents (SHT_NOBITS).
    let Ok(data) = section.uncompressed_data() else {
        return Vec::new();
    };
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let mut eh_frame = gimli::EhFrame::new(&data, endian);
    eh_frame.set_address_size(if file.is_64() { 8 } else { 4 });
    let address = |name: &str| file.section_by_name(name).map(|s| s.address());
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    if let Some(hdr) = address(".eh_frame_hdr") {
        bases = bases.set_eh_frame_hdr(hdr);
    }
    if let Some(text) = address(".text") {
        bases = bases.set_text(text);
    }
    if let Some(got) = address(".got") {
        bases = bases.set_got(got);
    }
    let mut ranges = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(gimli::EhFrame::cie_from_offset) else {
            continue;
        };
        let (begin, len) = (fde.initial_address(), fde.len());
        if begin != 0 && len > 0 {
            ranges.push((begin, begin.saturating_add(len)));
        }
    }
    ranges.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    ranges.dedup_by_key(|range| range.0);
    ranges
}

/// Adds the function symbols of `file` (`.symtab` and `.dynsym`) to `raw` as (start,
/// size, rank, name); rank prefers global over weak over local names of one address.
fn collect_symbols(file: &object::File, raw: &mut Vec<(u64, u64, u8, String)>) {
    for symbol in file.symbols().chain(file.dynamic_symbols()) {
        if symbol.kind() != SymbolKind::Text || !symbol.is_definition() || symbol.address() == 0 {
            continue;
        }
        let Ok(name) = symbol.name() else { continue };
        if name.is_empty() {
            continue;
        }
        let rank = if symbol.is_global() {
            0
        } else if symbol.is_weak() {
            1
        } else {
            2
        };
        raw.push((symbol.address(), symbol.size(), rank, name.to_string()));
    }
}

/// One symbol per start (the best ranked, then the first name), sorted, with ends.
fn sort_symbols(mut raw: Vec<(u64, u64, u8, String)>) -> Vec<Symbol> {
    // Sizes of aliases: the largest known one.
    raw.sort_by(|a, b| (a.0, a.2, &a.3).cmp(&(b.0, b.2, &b.3)));
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    for entry in &raw {
        let size = sizes.entry(entry.0).or_insert(0);
        *size = (*size).max(entry.1);
    }
    raw.dedup_by_key(|entry| entry.0);
    let starts: Vec<u64> = raw.iter().map(|entry| entry.0).collect();
    raw.into_iter()
        .enumerate()
        .map(|(index, (start, _, _, name))| {
            let size = sizes.get(&start).copied().unwrap_or(0);
            let end = if size > 0 {
                start.saturating_add(size)
            } else {
                starts.get(index + 1).copied().unwrap_or(u64::MAX)
            };
            Symbol {
                start,
                end,
                sized: size > 0,
                name,
            }
        })
        .collect()
}

/// The DWARF sections of `file`, decompressed.
fn load_dwarf(file: &object::File) -> Option<gimli::Dwarf<Reader>> {
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        let data = file
            .section_by_name(id.name())
            .and_then(|section| section.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[]));
        Ok(gimli::EndianRcSlice::new(Rc::from(&*data), endian))
    };
    gimli::Dwarf::load(load).ok()
}

/// The content of the separate debug file of `object` (read from `path`), if one is
/// found (see the module documentation for where).
fn find_debug_file(path: &Path, object: &object::File, options: &Options) -> Option<Vec<u8>> {
    let build_id = object.build_id().ok().flatten().map(<[u8]>::to_vec);
    let matches = |data: &[u8]| -> bool {
        match (&build_id, object::File::parse(data)) {
            (Some(id), Ok(debug)) => debug.build_id().ok().flatten() == Some(id.as_slice()),
            (None, Ok(_)) => true,
            (_, Err(_)) => false,
        }
    };
    if let Some(id) = &build_id {
        for dir in &options.debug_dirs {
            if let Some(data) = read_if(&build_id_path(dir, id), &matches) {
                return Some(data);
            }
        }
    }
    let directory = path.parent().unwrap_or(Path::new(""));
    let debuglink = object.gnu_debuglink().ok().flatten();
    if let Some((Ok(link), crc)) = debuglink.map(|(link, crc)| (std::str::from_utf8(link), crc)) {
        let link = Path::new(link);
        let mut candidates = vec![directory.join(link), directory.join(".debug").join(link)];
        for dir in &options.debug_dirs {
            candidates.push(under(dir, directory).join(link));
        }
        let with_crc = |data: &[u8]| {
            let mut sum = flate2::Crc::new();
            sum.update(data);
            sum.sum() == crc && matches(data)
        };
        for candidate in candidates {
            // The object itself may carry a link to a file of the same name.
            if candidate != path {
                if let Some(data) = read_if(&candidate, &with_crc) {
                    return Some(data);
                }
            }
        }
    }
    for dir in &options.debug_dirs {
        let mut with_suffix = under(dir, path).into_os_string();
        with_suffix.push(".debug");
        for candidate in [PathBuf::from(with_suffix), under(dir, path)] {
            if let Some(data) = read_if(&candidate, &matches) {
                return Some(data);
            }
        }
    }
    // Last, the debuginfod servers of DEBUGINFOD_URLS, by build-id.
    let id = build_id.as_deref()?;
    crate::debuginfod::debug_file(id).filter(|data| matches(data))
}

/// The supplementary debug file (`.gnu_debugaltlink`, written by `dwz`, as in Debian's
/// debug packages) that `debug` refers to, found by its build-id in the debug
/// directories or at the path it names (relative to the object's directory).
fn find_supplementary(path: &Path, debug: &object::File, options: &Options) -> Option<Vec<u8>> {
    let (link, id) = debug.gnu_debugaltlink().ok()??;
    let matches = |data: &[u8]| {
        object::File::parse(data)
            .ok()
            .and_then(|file| file.build_id().ok().flatten().map(<[u8]>::to_vec))
            .is_some_and(|found| found == id)
    };
    for dir in &options.debug_dirs {
        if let Some(data) = read_if(&build_id_path(dir, id), &matches) {
            return Some(data);
        }
    }
    let link = Path::new(std::str::from_utf8(link).ok()?);
    let candidate = path.parent().unwrap_or(Path::new("")).join(link);
    read_if(&candidate, &matches)
}

/// `<dir>/.build-id/<first byte>/<other bytes>.debug`, bytes in lower-case hex.
fn build_id_path(dir: &Path, id: &[u8]) -> PathBuf {
    let hex: String = id.iter().map(|byte| format!("{byte:02x}")).collect();
    let (first, rest) = hex.split_at(hex.len().min(2));
    dir.join(".build-id")
        .join(first)
        .join(format!("{rest}.debug"))
}

/// `path` (absolute or not) placed under directory `dir`.
fn under(dir: &Path, path: &Path) -> PathBuf {
    dir.join(path.strip_prefix("/").unwrap_or(path))
}

/// The content of the file at `path` if it can be read and `accept` accepts it.
fn read_if(path: &Path, accept: &dyn Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
    let data = fs::read(path).ok()?;
    accept(&data).then_some(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unnamed_addresses() {
        assert_eq!(unnamed_address("@?0x29c240"), Some(0x29c240));
        assert_eq!(
            unnamed_address("@?0xffffffffff600000"),
            Some(0xffff_ffff_ff60_0000)
        );
        for name in [
            "deflate",
            "@?0x",
            "@?(nil)",
            "@?0xzz",
            "@?0x10000000000000000",
            "",
        ] {
            assert_eq!(unnamed_address(name), None, "{name}");
        }
    }

    #[test]
    fn object_paths() {
        assert!(is_object_path("/lib/x86_64-linux-gnu/libz.so.1"));
        assert!(is_object_path("ls"));
        for path in [
            "",
            "[vdso]",
            "[unknown]",
            "[python]",
            "<dynamically generated>",
            "linux-vdso.so.1",
        ] {
            assert!(!is_object_path(path), "{path}");
        }
    }

    #[test]
    fn symbols_are_one_per_start_with_ends() {
        let symbols = sort_symbols(vec![
            (0x100, 0x20, 2, "local_alias".into()),
            (0x100, 0, 0, "global".into()),
            (0x200, 0, 1, "weak".into()),
            (0x300, 0x10, 0, "last".into()),
        ]);
        let shape: Vec<(u64, u64, &str)> = symbols
            .iter()
            .map(|s| (s.start, s.end, s.name.as_str()))
            .collect();
        assert_eq!(
            shape,
            [
                (0x100, 0x120, "global"),
                (0x200, 0x300, "weak"),
                (0x300, 0x310, "last")
            ]
        );
    }

    #[test]
    fn build_id_paths() {
        assert_eq!(
            build_id_path(Path::new("/usr/lib/debug"), &[0xab, 0xcd, 0x01]),
            Path::new("/usr/lib/debug/.build-id/ab/cd01.debug")
        );
        assert_eq!(
            under(Path::new("/usr/lib/debug"), Path::new("/lib/libz.so.1")),
            Path::new("/usr/lib/debug/lib/libz.so.1")
        );
    }

    fn symbolizer(symbols: Vec<(u64, u64, u8, String)>, vm_base: u64) -> Symbolizer {
        Symbolizer {
            symbols: sort_symbols(symbols),
            vm_base,
            dwarf: None,
            frames: Vec::new(),
            gaps: Vec::new(),
        }
    }

    #[test]
    fn exact_lookups_need_a_symbol_start() {
        let s = symbolizer(
            vec![(0x1000, 0x40, 0, "f".into()), (0x1040, 0x40, 0, "g".into())],
            0,
        );
        assert!(
            matches!(s.lookup(0x1040, true), Lookup::Found(r) if r.name == "g" && r.start == 0x1040 && r.delta == 0)
        );
        assert!(matches!(s.lookup(0x1010, true), Lookup::Inside));
        assert!(matches!(s.lookup(0x2000, true), Lookup::Missing));
    }

    #[test]
    fn igprof_lookups_add_the_base_and_cover() {
        // A non-PIE executable whose first PT_LOAD is at 0x8048000.
        let s = symbolizer(vec![(0x804c500, 0x100, 0, "sort_files".into())], 0x8048000);
        let Lookup::Found(rename) = s.lookup(0x4533, false) else {
            panic!("not found");
        };
        assert_eq!(
            (rename.name.as_str(), rename.start, rename.delta),
            ("sort_files", 0x4500, 0x33)
        );
        assert!(matches!(s.lookup(0x4700, false), Lookup::Missing));
    }

    #[test]
    fn igprof_names_as_igprof_analyse_gives_them() {
        assert_eq!(
            igprof_name("/lib/x86_64-linux-gnu/libcrypto.so.3", 0x29c240).as_deref(),
            Some("@{libcrypto.so.3+2736704}")
        );
        assert_eq!(igprof_name("prog", 4517).as_deref(), Some("@{prog+4517}"));
        // The live views' names, spelled as the reports spell them.
        assert_eq!(
            report_name("/lib/x86_64-linux-gnu/libcrypto.so.3", "@?0x29c240"),
            "@{libcrypto.so.3+2736704}"
        );
        assert_eq!(
            report_name("/usr/lib/libz.so.1", "@?0x5da0"),
            "@{libz.so.1+23968}"
        );
        assert_eq!(
            report_name(
                "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0",
                "@?0x5da0"
            ),
            "@?0x5da0"
        );
        assert_eq!(report_name("/usr/lib/libz.so.1", "deflate"), "deflate");
        for file in ["<dynamically generated>", ""] {
            assert_eq!(
                igprof_name(file, 0x7f00).as_deref(),
                Some("@?0x7f00{<dynamically-generated>}")
            );
        }
        assert_eq!(igprof_name("/lib/libz.so.1", 0), None);
        assert_eq!(
            igprof_name("[vsyscall]", 0xffff_ffff_ff60_0000u64 as i64),
            None
        );
        // The interpreter keeps a @?0x… name (of its ELF address) for the Python view.
        assert_eq!(
            unnamed_name("/usr/bin/python3.11", 0x1000, 0x401000),
            "@?0x401000"
        );
        assert_eq!(
            unnamed_name("/opt/libdemo.so", 0x1000, 0x1000),
            "@{libdemo.so+4096}"
        );
    }

    #[test]
    fn igprof_addresses_without_symbol_group_by_fde() {
        // A non-PIE executable: its first PT_LOAD at 0x400000; FDEs of two functions.
        let mut s = symbolizer(vec![(0x401000, 0x40, 0, "main".into())], 0x400000);
        s.frames = vec![(0x401000, 0x401040), (0x401100, 0x401180)];
        let Lookup::Frame {
            start,
            vaddr,
            delta,
        } = s.lookup(0x1133, false)
        else {
            panic!("no frame");
        };
        assert_eq!((start, vaddr, delta), (0x1100, 0x401100, 0x33));
        // A symbol comes first; outside every FDE nothing is found; pyigprof's starts
        // are already FDE starts.
        assert!(matches!(s.lookup(0x1010, false), Lookup::Found(r) if r.name == "main"));
        assert!(matches!(s.lookup(0x1180, false), Lookup::Missing));
        assert!(matches!(s.lookup(0x401100, true), Lookup::Missing));
        // Between them, in a gap of code.
        s.gaps = vec![(0x401040, 0x401100)];
        assert!(matches!(
            s.lookup(0x10a0, false),
            Lookup::Frame {
                start: 0x1040,
                vaddr: 0x401040,
                delta: 0x60
            }
        ));
    }

    #[test]
    fn ranges_cover_from_their_start() {
        let ranges = [(0x10, 0x20), (0x30, 0x40)];
        assert_eq!(covering(&ranges, 0x10), Some(0x10));
        assert_eq!(covering(&ranges, 0x1f), Some(0x10));
        assert_eq!(covering(&ranges, 0x20), None);
        assert_eq!(covering(&ranges, 0x3f), Some(0x30));
        assert_eq!(covering(&ranges, 0x5), None);
        assert_eq!(covering(&[], 0x5), None);
    }
}
