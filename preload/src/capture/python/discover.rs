//! Finding this process's CPython runtime at start-up: its version's [`Layout`] (from the
//! tables, or from the interpreter's own `_Py_DebugOffsets`), the evaluator's address
//! ranges, the type objects, and how thread states are found. Runs in the constructor
//! (may allocate and read files); the result is the [`Runtime`] the handler uses.

use super::layout::Layout;
use super::{code, Runtime, ThreadStateSource};
use crate::capture::symbols;
use crate::capture::unwind::modules;
use pyigprof_hooks::cpython;

/// Describes the CPython runtime of this process, or says on stderr why Python frames will
/// be missing.
pub fn runtime(version: (u8, u8, u8)) -> Option<Runtime> {
    let (major, minor, micro) = version;
    let Some(layout) = layout_of(major, minor) else {
        eprintln!(
            "pyigprof: Python {major}.{minor}.{micro} is not a version pyigprof knows \
             (no layout table, and no plausible _Py_DebugOffsets); recording native frames only"
        );
        return None;
    };
    let evaluator_name = if major == 2 {
        "PyEval_EvalFrameEx"
    } else {
        "_PyEval_EvalFrameDefault"
    };
    let evaluator = evaluator_ranges(evaluator_name);
    let sym = |name: &std::ffi::CStr| cpython::symbol(name) as u64;
    let types = if major == 2 {
        code::Types {
            code: sym(c"PyCode_Type"),
            text: sym(c"PyString_Type"),
            bytes: sym(c"PyString_Type"),
        }
    } else {
        code::Types {
            code: sym(c"PyCode_Type"),
            text: sym(c"PyUnicode_Type"),
            bytes: sym(c"PyBytes_Type"),
        }
    };
    let source = thread_state_source(&layout);
    let runtime = Runtime::new(layout, &evaluator, types, source);
    if runtime.is_none() {
        eprintln!(
            "pyigprof: cannot find {evaluator_name} or the type objects of Python {major}.{minor}.{micro}; \
             recording native frames only"
        );
    }
    runtime
}

/// Resolves how this CPython's thread states are found to this process's addresses.
fn thread_state_source(layout: &Layout) -> ThreadStateSource {
    use super::layout::ThreadStateLookup as Lookup;
    use ThreadStateSource as Source;
    let exported =
        |name: &str| std::ffi::CString::new(name).map_or(0, |name| cpython::symbol(&name) as u64);
    match layout.thread_state {
        Lookup::AttachedKey => Source::AttachedKey,
        Lookup::RuntimeTss { offset } => match exported("_PyRuntime") {
            0 => Source::AttachedKey,
            runtime => Source::Tss {
                at: runtime + u64::from(offset),
            },
        },
        Lookup::StaticKey { symbol } => {
            // A local symbol of the object that defines the C-API.
            let api = exported("PyGILState_GetThisThreadState");
            let at = object_containing(api)
                .and_then(|(_, object)| symbols::data_symbol(&object, symbol));
            at.map_or(Source::AttachedKey, |at| Source::Key { at })
        }
        Lookup::GilHolder { symbol, offsets } => match exported(symbol) {
            0 => Source::AttachedKey,
            current => Source::GilHolder { current, offsets },
        },
    }
}

/// The loaded object whose segments contain `addr`, with its index in the module list.
fn object_containing(addr: u64) -> Option<(usize, modules::ObjectInfo)> {
    let snapshot = modules::current()?;
    snapshot
        .objects
        .iter()
        .enumerate()
        .find(|(_, o)| o.range.0 <= addr && addr < o.range.1)
        .map(|(index, object)| (index, object.clone()))
}

/// The frame layout of CPython `major.minor`: the table up to 3.12, the interpreter's own
/// `_Py_DebugOffsets` (at the start of `_PyRuntime`, statically initialised, so readable
/// before Python starts) from 3.13.
fn layout_of(major: u8, minor: u8) -> Option<Layout> {
    use super::layout::DEBUG_OFFSETS_WORDS;
    if (major, minor) < (3, 13) {
        return Layout::for_version(major, minor);
    }
    let runtime = cpython::symbol(c"_PyRuntime");
    if runtime == 0 {
        return None;
    }
    // SAFETY: _PyRuntime is a static object larger than its _Py_DebugOffsets header.
    let words = unsafe { std::slice::from_raw_parts(runtime as *const u64, DEBUG_OFFSETS_WORDS) };
    Layout::from_debug_offsets(words, major, minor)
}

/// Run-time address ranges of every part of the evaluator function: the symbol table of the
/// object that defines it (`.symtab` has the `.cold` parts), or its dynamic symbol's size.
fn evaluator_ranges(name: &str) -> Vec<(u64, u64)> {
    let Ok(cname) = std::ffi::CString::new(name) else {
        return Vec::new();
    };
    let addr = cpython::symbol(&cname) as u64;
    if addr == 0 {
        return Vec::new();
    }
    if let Some((index, object)) = object_containing(addr) {
        let table = symbols::table_for(&object, index == 0);
        let ranges: Vec<(u64, u64)> = table
            .ranges_of(name)
            .into_iter()
            .map(|(lo, hi)| (lo + object.bias, hi + object.bias))
            .collect();
        if ranges.iter().any(|&(lo, hi)| lo <= addr && addr < hi) {
            return ranges;
        }
    }
    // Fall back to the dynamic symbol's size.
    // SAFETY: dladdr1 with RTLD_DL_SYMENT stores a pointer to the ELF symbol.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let mut sym: *const libc::Elf64_Sym = std::ptr::null();
        let found = libc::dladdr1(
            addr as *const libc::c_void,
            &mut info,
            (&mut sym as *mut *const libc::Elf64_Sym).cast(),
            RTLD_DL_SYMENT,
        );
        if found != 0 && !sym.is_null() && (*sym).st_size > 0 {
            return vec![(addr, addr + (*sym).st_size)];
        }
    }
    Vec::new()
}

/// `dladdr1` request for the ELF symbol (`<dlfcn.h>`).
const RTLD_DL_SYMENT: libc::c_int = 1;
