//! `libpyigprof.so`: an in-process sampling profiler for CPython programs that records
//! *mixed* call stacks — Python functions and lines together with the native (C, C++,
//! Rust) frames they call — and writes an IgProf-format profile at exit.
//!
//! ```text
//! LD_PRELOAD=libpyigprof.so python3 app.py     # writes pyigprof.<pid>.gz
//! ```
//!
//! Start-up ([`init`], run from `.init_array`): in a process that is not Python nothing
//! happens. Otherwise the constructor reads the settings ([`config`]), finds the
//! interpreter's evaluator and layout ([`python`]), maps all sampler memory, installs the
//! `SIGPROF` handler and a CPU-time timer ([`sampler`]), and registers an audit hook that
//! attaches to the runtime once it exists. Each sample unwinds the interrupted thread
//! ([`unwind`]), splices in its Python frames ([`mixed`]) and counts the stack into the
//! thread's trace tree ([`trace`]). At exit the trees are merged, symbolized and written
//! ([`dump`]).

pub mod adopt;
pub mod alloc;
pub mod cfi;
pub mod config;
pub mod dump;
pub mod frames;
pub mod lifecycle;
pub mod mem;
pub mod mixed;
pub mod modules;
pub mod python;
pub mod sampler;
pub mod stats;
pub mod symbols;
pub mod threads;
pub mod timing;
pub mod trace;
pub mod unwind;

/// Large blocks of the library's own are mapped directly, not taken from the program's
/// `malloc` (see [`alloc`]).
#[global_allocator]
static ALLOCATOR: alloc::Allocator = alloc::Allocator;

use config::Config;
use pyigprof_hooks::{cpython, Callbacks};

/// The library constructor. Runs before `main` (and so before Python initialises).
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

/// Starts profiling if this process is a CPython interpreter (see the crate docs).
pub extern "C" fn init() {
    // Processes that are not Python (a shell, git: children inherit LD_PRELOAD) are left
    // alone unless PYIGPROF_ALL_PROCESSES asks for them. (Tests link this crate as an rlib
    // into ordinary binaries: never start there.)
    let version = cpython::version();
    if version.is_none()
        && !std::env::var_os("PYIGPROF_ALL_PROCESSES").is_some_and(|v| !v.is_empty() && v != "0")
    {
        return;
    }
    let mut config = Config::from_env();
    if config.clock == config::Clock::Wall && version.is_some_and(|v| v < (3, 5, 0)) {
        // Before PEP 475 (3.5) CPython does not retry system calls interrupted by a signal:
        // `time.sleep`, `select` and blocking reads would end early under a wall-clock timer,
        // which also fires while a thread is blocked. A CPU timer only fires while it runs.
        let (major, minor, micro) = version.unwrap_or_default();
        eprintln!(
            "pyigprof: PYIGPROF_CLOCK=wall is not used with Python {major}.{minor}.{micro}: \
             before 3.5 a signal ends time.sleep, select and blocking reads early; sampling CPU \
             time instead"
        );
        config.clock = config::Clock::Cpu;
    }
    modules::rescan();
    let runtime = version.and_then(python_runtime);
    let Some(sampler) = sampler::Sampler::new(config.period_ns(), config.clock, runtime) else {
        eprintln!("pyigprof: cannot map the profiler's memory; not profiling");
        return;
    };
    let sampler = match sampler.install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pyigprof: {e}; not profiling");
            return;
        }
    };
    lifecycle::start(config);
    pyigprof_hooks::install(Callbacks {
        thread_started: || with_sampler(|s| s.register_current_thread()),
        objects_added: || {
            modules::rescan();
            cpython::try_attach();
        },
        object_closing: modules::forget_handle,
        objects_removed: modules::rescan,
        process_ending: lifecycle::process_ending,
        before_exec: lifecycle::before_exec,
        exec_failed: lifecycle::exec_failed,
        signalling_self: lifecycle::signalling_self,
    });
    // 3.8+ (and a stripped 3.6) learn the thread-state key when they attach: from the first
    // audit event, or without audit hooks from the first extension-module import.
    if sampler
        .python
        .as_ref()
        .is_some_and(|rt| rt.needs_attachment())
        && !cpython::attach_by_audit_hook(on_attach)
    {
        cpython::attach_later(on_attach);
    }
    // SAFETY: registering plain extern "C" functions.
    unsafe {
        libc::pthread_atfork(
            Some(alloc::prepare_fork),
            Some(alloc::after_fork_in_parent),
            Some(alloc::after_fork_in_child),
        );
        libc::pthread_atfork(None, None, Some(lifecycle::after_fork_in_child));
        libc::atexit(lifecycle::at_exit);
    }
    // The main thread's timer; every later thread starts its own, and threads that already
    // exist are adopted.
    sampler.register_current_thread();
    for problem in adopt::adopt_existing_threads(sampler).1 {
        eprintln!("pyigprof: {problem}");
    }
}

fn with_sampler(f: impl FnOnce(&'static sampler::Sampler)) {
    if let Some(s) = sampler::get() {
        f(s)
    }
}

/// Describes the CPython runtime of this process, or says on stderr why Python frames will
/// be missing.
fn python_runtime(version: (u8, u8, u8)) -> Option<python::Runtime> {
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
        python::code::Types {
            code: sym(c"PyCode_Type"),
            text: sym(c"PyString_Type"),
            bytes: sym(c"PyString_Type"),
        }
    } else {
        python::code::Types {
            code: sym(c"PyCode_Type"),
            text: sym(c"PyUnicode_Type"),
            bytes: sym(c"PyBytes_Type"),
        }
    };
    let source = thread_state_source(&layout);
    let runtime = python::Runtime::new(layout, &evaluator, types, source);
    if runtime.is_none() {
        eprintln!(
            "pyigprof: cannot find {evaluator_name} or the type objects of Python {major}.{minor}.{micro}; \
             recording native frames only"
        );
    }
    runtime
}

/// Resolves how this CPython's thread states are found to this process's addresses.
fn thread_state_source(layout: &python::layout::Layout) -> python::ThreadStateSource {
    use python::{layout::ThreadStateLookup as Lookup, ThreadStateSource as Source};
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
fn layout_of(major: u8, minor: u8) -> Option<python::layout::Layout> {
    use python::layout::{Layout, DEBUG_OFFSETS_WORDS};
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

fn on_attach(attached: cpython::Attached) {
    with_sampler(|s| {
        if let Some(rt) = &s.python {
            rt.attach(attached.tss_key);
        }
    });
}
