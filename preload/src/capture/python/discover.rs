//! Finding this process's CPython runtime at start-up: its version's [`Layout`] (from the
//! tables, or from the interpreter's own `_Py_DebugOffsets`), the evaluator's address
//! ranges, the type objects, and how thread states are found. Runs in the constructor
//! (may allocate and read files); the result is the [`Runtime`] the handler uses.

use super::layout::{
    DebugOffsetsError, GcLayout, Layout, Place, TypeSizes, NEWEST_KNOWN, TP_BASICSIZE,
};
use super::{code, GcProbe, Runtime, ThreadStateSource, Where};
use crate::capture::symbols;
use crate::capture::unwind::{copies, modules};
use pyigprof_hooks::cpython;

/// Describes the CPython runtime of this process, or says on stderr (one line) why Python
/// frames will be missing.
pub fn runtime(version: (u8, u8, u8)) -> Option<Runtime> {
    let (major, minor, micro) = version;
    if (major, minor) >= (3, 12) {
        perf_trampolines();
    }
    let layout = match layout_of(major, minor) {
        Ok(layout) => layout,
        Err(why) => {
            crate::notice!(
                "pyigprof: cannot read the Python frames of Python {major}.{minor}.{micro}: {why}; \
                 recording native frames only"
            );
            return None;
        }
    };
    // Only interpreters whose evaluator leaves no marker on the C stack (≤ 3.10) need its
    // symbols.
    let evaluator_name = if major == 2 {
        "PyEval_EvalFrameEx"
    } else {
        "_PyEval_EvalFrameDefault"
    };
    let (evaluator, needed) = if layout.has_stack_markers() {
        (Vec::new(), "the type objects".to_string())
    } else {
        (
            function_ranges(evaluator_name),
            format!("{evaluator_name} or the type objects"),
        )
    };
    let types = types(major);
    let source = thread_state_source(&layout);
    let mut runtime = Runtime::new(layout, &evaluator, types, source);
    if let Some(runtime) = &mut runtime {
        runtime.gc = layout.gc.and_then(gc_probe);
        runtime.gil_words = gil_words(major, minor);
    }
    if runtime.is_none() {
        crate::notice!(
            "pyigprof: cannot find {needed} of Python {major}.{minor}.{micro}; \
             recording native frames only"
        );
    }
    runtime
}

/// Tells the unwinder the template of CPython's perf trampolines (3.12+: the bytes
/// `_Py_trampoline_func_start` … `_Py_trampoline_func_end` of `Python/asm_trampoline.S`,
/// exported; in `.text` up to 3.13, `.rodata` from 3.14), which `Python/perf_trampoline.c`
/// copies once per code object when `PYTHONPERFSUPPORT=1`, `-X perf` or `-X perf_jit` is on
/// ([`copies`]). A template of another shape is left alone: frames of its copies stay
/// code without CFI.
fn perf_trampolines() {
    let start = cpython::symbol(c"_Py_trampoline_func_start") as u64;
    let end = cpython::symbol(c"_Py_trampoline_func_end") as u64;
    if start == 0 || end <= start || end - start > 32 {
        return;
    }
    // SAFETY: the template's bytes, in a mapped segment of the object that exports them.
    let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, (end - start) as usize) };
    if let Some(template) = copies::Template::decode(bytes, start, "_Py_trampoline_func_start") {
        copies::register(template);
    }
}

/// The type objects that validate reads, from the exported symbols.
fn types(major: u8) -> code::Types {
    let sym = |name: &std::ffi::CStr| cpython::symbol(name) as u64;
    if major == 2 {
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
    }
}

/// How `PyGILState_GetThisThreadState` reads the calling thread's state, when its machine
/// code is a plain thread-local read (3.15 keeps the thread state in `_Py_tss_gilstate`, a
/// thread-local variable, not a pthread key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsRead {
    /// `mov %fs:disp32,%rax; ret` (local-exec TLS, executables): the variable is at this
    /// offset from the thread pointer (`%fs:0`).
    Offset(i64),
    /// `mov disp32(%rip),%rax; mov %fs:(%rax),%rax; ret` (initial-exec TLS, shared
    /// libraries): the offset is in the GOT slot at this run-time address.
    GotSlot(u64),
}

/// `endbr64`, which CET-enabled builds put first in every function.
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// A signed 32-bit displacement.
fn disp32(b: &[u8]) -> i64 {
    i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// `code` at run-time address `at` without a leading `endbr64`, and its new address.
fn skip_endbr64(code: &[u8], at: u64) -> (&[u8], u64) {
    match code.strip_prefix(&ENDBR64) {
        Some(rest) => (rest, at + ENDBR64.len() as u64),
        None => (code, at),
    }
}

/// `mov disp32(%rip),%rax` (`48 8b 05 <disp32>`) at the start of `code`, at run-time
/// address `at`: the address it loads from (the displacement counts from the next
/// instruction) and the code after it.
fn rip_relative_load(code: &[u8], at: u64) -> Option<(u64, &[u8])> {
    (code.len() >= 7 && code[..3] == [0x48, 0x8b, 0x05]).then(|| {
        (
            (at + 7).wrapping_add(disp32(&code[3..7]) as u64),
            &code[7..],
        )
    })
}

/// Decodes the code of `PyGILState_GetThisThreadState`, found at run-time address `at`,
/// after an optional `endbr64`; `None` for any code that is not one of the [`TlsRead`]
/// forms.
pub fn decode_tls_read(code: &[u8], at: u64) -> Option<TlsRead> {
    let (code, at) = skip_endbr64(code, at);
    // 64 48 8b 04 25 <disp32>   c3
    if code.len() >= 10 && code[..5] == [0x64, 0x48, 0x8b, 0x04, 0x25] && code[9] == 0xc3 {
        return Some(TlsRead::Offset(disp32(&code[5..9])));
    }
    // mov disp32(%rip),%rax   64 48 8b 00 (mov %fs:(%rax),%rax)   c3
    let (slot, rest) = rip_relative_load(code, at)?;
    rest.starts_with(&[0x64, 0x48, 0x8b, 0x00, 0xc3])
        .then_some(TlsRead::GotSlot(slot))
}

/// The address of the variable that a getter at run-time address `at` returns, when its
/// code is `[endbr64] mov disp32(%rip),%rax; ret` (2.7's `PyInterpreterState_Head`, which
/// returns the static `interp_head`).
pub fn decode_static_read(code: &[u8], at: u64) -> Option<u64> {
    let (code, at) = skip_endbr64(code, at);
    let (variable, rest) = rip_relative_load(code, at)?;
    rest.starts_with(&[0xc3]).then_some(variable)
}

/// The first 32 bytes of the code of the exported function `name`, and its address.
fn exported_code(name: &std::ffi::CStr) -> Option<(&'static [u8], u64)> {
    let at = cpython::symbol(name) as u64;
    // SAFETY: the first 32 bytes of an exported function's code, mapped and readable (a
    // function is longer than that, or followed by more code or padding in its segment,
    // which ends at a page boundary).
    (at != 0).then(|| {
        (
            unsafe { std::slice::from_raw_parts(at as *const u8, 32) },
            at,
        )
    })
}

/// Where `PyGILState_GetThisThreadState` reads the calling thread's state, as an offset
/// from the thread pointer, if it is a thread-local variable (see [`decode_tls_read`]).
fn thread_local_state() -> Option<i64> {
    let (code, at) = exported_code(c"PyGILState_GetThisThreadState")?;
    match decode_tls_read(code, at)? {
        TlsRead::Offset(offset) => Some(offset),
        // SAFETY: a GOT slot the function's own code reads.
        TlsRead::GotSlot(slot) => Some(unsafe { *(slot as *const i64) }),
    }
}

/// Resolves how this CPython's thread states are found to this process's addresses.
fn thread_state_source(layout: &Layout) -> ThreadStateSource {
    use super::layout::ThreadStateLookup as Lookup;
    use ThreadStateSource as Source;
    let exported =
        |name: &str| std::ffi::CString::new(name).map_or(0, |name| cpython::symbol(&name) as u64);
    if let Some(offset) = thread_local_state() {
        return Source::ThreadLocal { offset };
    }
    match layout.thread_state {
        Lookup::AttachedKey => Source::AttachedKey,
        Lookup::RuntimeTss { offset } => match exported("_PyRuntime") {
            0 => Source::AttachedKey,
            runtime => Source::Tss {
                at: runtime + u64::from(offset),
            },
        },
        Lookup::StaticKey { symbol } => {
            // A local symbol of the object that defines the C-API, or, stripped, the key
            // that `PyGILState_GetThisThreadState` passes to `PyThread_get_key_value`.
            let api = exported("PyGILState_GetThisThreadState");
            let at = object_containing(api)
                .and_then(|(_, object)| symbols::data_symbol(&object, symbol))
                .or_else(|| {
                    let (code, at) = exported_code(c"PyGILState_GetThisThreadState")?;
                    decode_int_load(code, at, Register::Edi).map(|(key, _)| key)
                });
            at.map_or(Source::AttachedKey, |at| Source::Key { at })
        }
        Lookup::GilHolder { symbol, offsets } => match exported(symbol) {
            0 => Source::AttachedKey,
            current => Source::GilHolder {
                current,
                offsets,
                interp_head: exported_code(c"PyInterpreterState_Head")
                    .and_then(|(code, at)| decode_static_read(code, at))
                    .unwrap_or(0),
            },
        },
    }
}

/// The address of the variable `name` of the object that defines the C-API: exported, or
/// a `static` one from its `.symtab` (or debug file); `None` when stripped.
fn variable(name: &str) -> Option<u64> {
    let cname = std::ffi::CString::new(name).ok()?;
    match cpython::symbol(&cname) as u64 {
        0 => {
            let api = cpython::symbol(c"PyGILState_GetThisThreadState") as u64;
            let (_, object) = object_containing(api)?;
            symbols::data_symbol(&object, name)
        }
        at => Some(at),
    }
}

/// A 32-bit register that [`decode_int_load`] looks for, by its ModRM byte with RIP-relative
/// addressing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Register {
    /// `%eax` (ModRM 0x05).
    Eax = 0x05,
    /// `%edi` (ModRM 0x3d), the first argument of a call.
    Edi = 0x3d,
}

/// The first `mov disp32(%rip),<register>` (`8b <modrm> <disp32>`) in `code`, which starts
/// at run-time address `at` (after an optional `endbr64`): the address of the `int`
/// variable it loads and the bytes after the instruction. 3.6's
/// `PyGILState_GetThisThreadState` loads the static `autoTLSkey` into `%edi` for
/// `PyThread_get_key_value`; 2.7's and 3.6's `PyGC_Collect` load `collecting` into `%eax`
/// after their prologue.
pub fn decode_int_load(code: &[u8], at: u64, register: Register) -> Option<(u64, &[u8])> {
    let (code, at) = skip_endbr64(code, at);
    (0..code.len().saturating_sub(5)).find_map(|i| {
        (code[i] == 0x8b && code[i + 1] == register as u8).then(|| {
            let end = i + 6;
            (
                (at + end as u64).wrapping_add(disp32(&code[i + 2..end]) as u64),
                &code[end..],
            )
        })
    })
}

/// The address of the `int` flag that the code at run-time address `at` tests first:
/// `mov disp32(%rip),%eax; test %eax,%eax` (2.7's and 3.6's `PyGC_Collect`:
/// `push %rbx; sub $0x20,%rsp;` then `if (collecting)`).
pub fn decode_flag_test(code: &[u8], at: u64) -> Option<u64> {
    let (flag, rest) = decode_int_load(code, at, Register::Eax)?;
    rest.starts_with(&[0x85, 0xc0]).then_some(flag)
}

/// The futex words of the GIL of CPython `major.minor` in this process
/// ([`crate::capture::waits::GilWords`] says where they are and why): `_PyRuntime`'s
/// range from 3.7, 3.6's four statics by symbol, none for 2.7.
fn gil_words(major: u8, minor: u8) -> crate::capture::waits::GilWords {
    // x86-64 glibc: sizeof(pthread_cond_t), sizeof(pthread_mutex_t).
    const COND: u64 = 48;
    const MUTEX: u64 = 40;
    let mut words = crate::capture::waits::GilWords::default();
    if (major, minor) >= (3, 7) {
        // Its size from the loader's symbol (`_PyRuntime` is exported by every build,
        // stripped or static), not the object list, which attach makes later.
        if let Some((at, size)) = cpython::variable_extent(c"_PyRuntime") {
            words.add(at as u64, size as u64);
        }
    } else if (major, minor) == (3, 6) {
        for (name, size) in [
            ("gil_cond", COND),
            ("gil_mutex", MUTEX),
            ("switch_cond", COND),
            ("switch_mutex", MUTEX),
        ] {
            if let Some(at) = variable(name) {
                words.add(at, size);
            }
        }
    }
    words
}

/// The garbage-collection check of `gc` at this process's addresses; `None` when a symbol
/// it needs is missing.
fn gc_probe(gc: GcLayout) -> Option<GcProbe> {
    let resolve = |place: Place| -> Option<Where> {
        Some(match place {
            Place::Interpreter(offset) => Where::Interpreter(offset),
            Place::ThroughInterpreter { pointer, offset } => {
                Where::ThroughInterpreter { pointer, offset }
            }
            Place::Runtime(offset) => match cpython::symbol(c"_PyRuntime") as u64 {
                0 => return None,
                runtime => Where::At(runtime + u64::from(offset)),
            },
            Place::Symbol(name) => Where::At(variable(name)?),
            Place::Flag { symbol, tester } => Where::At(variable(symbol).or_else(|| {
                let name = std::ffi::CString::new(tester).ok()?;
                let (code, at) = exported_code(&name)?;
                decode_flag_test(code, at)
            })?),
        })
    };
    Some(GcProbe {
        thread_interp: gc.thread_interp,
        collecting: resolve(gc.collecting)?,
        holder: resolve(gc.holder)?,
        locked: match gc.locked {
            Some(place) => Some(resolve(place)?),
            None => None,
        },
    })
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
/// before Python starts) from 3.13, checked against its type objects. The error is the
/// reason, for the one stderr line.
fn layout_of(major: u8, minor: u8) -> Result<Layout, String> {
    use super::layout::DEBUG_OFFSETS_WORDS;
    if (major, minor) < (3, 13) {
        return Layout::for_version(major, minor)
            .ok_or_else(|| "not a version pyigprof knows".to_string());
    }
    let runtime = cpython::symbol(c"_PyRuntime");
    if runtime == 0 {
        return Err("no _PyRuntime symbol".into());
    }
    // SAFETY: _PyRuntime is a static object larger than its _Py_DebugOffsets header.
    let words = unsafe { std::slice::from_raw_parts(runtime as *const u64, DEBUG_OFFSETS_WORDS) };
    let basic_size = |name: &std::ffi::CStr| match cpython::symbol(name) {
        0 => 0,
        // SAFETY: an exported type object: tp_basicsize is inside its header.
        ty => unsafe { *((ty as u64 + TP_BASICSIZE) as *const u64) },
    };
    let sizes = TypeSizes {
        code: basic_size(c"PyCode_Type"),
        bytes: basic_size(c"PyBytes_Type"),
        unicode: basic_size(c"PyUnicode_Type"),
    };
    Layout::from_debug_offsets(words, major, minor, &sizes).map_err(|e| match e {
        DebugOffsetsError::Inconsistent(_) if (major, minor) > NEWEST_KNOWN => {
            format!("newer than any pyigprof knows, and {e}")
        }
        e => e.to_string(),
    })
}

/// Run-time address ranges of every part of the exported function `name` (the evaluator,
/// the lock allocator): the symbol table of the object that defines it (`.symtab` has the
/// `.cold` parts), or its dynamic symbol's size. Empty when it is not found. Not from a
/// signal handler.
pub(crate) fn function_ranges(name: &str) -> Vec<(u64, u64)> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_collecting_flag_is_decoded_from_the_code_that_tests_it() {
        // pyenv's 2.7 and 3.6 keep `collecting` in .symtab: the decoded address must be it.
        let mut checked = 0;
        for pattern in ["2.7", "3.6"] {
            let Ok(dir) = std::fs::read_dir("/root/.pyenv/versions") else {
                return;
            };
            for entry in dir.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !name.starts_with(pattern) {
                    continue;
                }
                let lib = entry.path().join("lib");
                let Some(path) = std::fs::read_dir(&lib).ok().and_then(|d| {
                    d.flatten()
                        .map(|e| e.path())
                        .find(|p| p.to_string_lossy().ends_with(".so.1.0"))
                }) else {
                    continue;
                };
                use object::{Object, ObjectSection, ObjectSymbol};
                let data = std::fs::read(&path).unwrap();
                let elf = object::File::parse(&*data).unwrap();
                let find = |wanted: &str| {
                    elf.symbols()
                        .chain(elf.dynamic_symbols())
                        .find(|s| s.name() == Ok(wanted))
                        .map(|s| s.address())
                };
                let (Some(tester), Some(collecting)) = (find("PyGC_Collect"), find("collecting"))
                else {
                    continue;
                };
                let text = elf.section_by_name(".text").unwrap();
                let code = |at: u64| {
                    let offset = (at - text.address() + text.file_range().unwrap().0) as usize;
                    &data[offset..offset + 32]
                };
                assert_eq!(
                    decode_flag_test(code(tester), tester),
                    Some(collecting),
                    "{}",
                    path.display()
                );
                if let (Some(getter), Some(key)) =
                    (find("PyGILState_GetThisThreadState"), find("autoTLSkey"))
                {
                    assert_eq!(
                        decode_int_load(code(getter), getter, Register::Edi).map(|(at, _)| at),
                        Some(key),
                        "{}",
                        path.display()
                    );
                }
                checked += 1;
            }
        }
        eprintln!("collecting decoded from PyGC_Collect in {checked} libraries");
        // Code without the pattern.
        assert_eq!(decode_flag_test(&[0x90; 32], 0), None);
        assert_eq!(
            decode_flag_test(&[0x8b, 0x05, 1, 0, 0, 0, 0x85, 0xc1], 0),
            None
        );
        assert_eq!(
            decode_flag_test(&[0x53, 0x8b, 0x05, 0x10, 0, 0, 0, 0x85, 0xc0], 0x1000),
            Some(0x1000 + 7 + 0x10)
        );
    }

    #[test]
    fn a_thread_local_accessor_is_decoded_and_other_code_is_not() {
        // Debian sid's 3.15.2: endbr64; mov %fs:0xffffffffffffffd8,%rax; ret.
        let python_3_15 = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x64, 0x48, 0x8b, 0x04, 0x25, 0xd8, 0xff, 0xff, 0xff, 0xc3,
        ];
        assert_eq!(
            decode_tls_read(&python_3_15, 0),
            Some(TlsRead::Offset(-0x28))
        );
        assert_eq!(
            decode_tls_read(&python_3_15[4..], 0),
            Some(TlsRead::Offset(-0x28)),
            "without endbr64"
        );
        // Debian sid's 3.14.10: endbr64; cmpl $0,…(%rip) (is the pthread key created?): a
        // pthread key, not a thread-local variable.
        let python_3_14 = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x83, 0x3d, 0x3b, 0x49, 0x77, 0x00, 0x00, 0x74, 0x0a, 0xbf,
        ];
        assert_eq!(decode_tls_read(&python_3_14, 0), None);
        assert_eq!(decode_tls_read(&python_3_15[..9], 0), None, "cut short");
        // Initial-exec, as a shared libpython would have it: mov 0x100(%rip),%rax;
        // mov %fs:(%rax),%rax; ret — the GOT slot is 0x100 past the end of the first
        // instruction.
        let shared = [
            0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0x64, 0x48, 0x8b, 0x00, 0xc3,
        ];
        assert_eq!(
            decode_tls_read(&shared, 0x1000),
            Some(TlsRead::GotSlot(0x1000 + 7 + 0x100))
        );
        // 2.7.18's PyInterpreterState_Head: mov 0xe08c9(%rip),%rax; ret.
        let head = [0x48, 0x8b, 0x05, 0xc9, 0x08, 0x0e, 0x00, 0xc3];
        assert_eq!(decode_static_read(&head, 0x116e00), Some(0x1f76d0));
        assert_eq!(
            decode_static_read(&shared, 0x1000),
            None,
            "not followed by ret"
        );
        assert_eq!(decode_tls_read(&head, 0x116e00), None);
        let mut with_endbr = ENDBR64.to_vec();
        with_endbr.extend_from_slice(&shared);
        assert_eq!(
            decode_tls_read(&with_endbr, 0x1000),
            Some(TlsRead::GotSlot(0x1000 + 4 + 7 + 0x100))
        );
    }
}
