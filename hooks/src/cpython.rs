//! Attaching to the CPython runtime of the current process, if there is one.
//!
//! Facts (shared/design/cpython.md §4): the library constructor runs before Python
//! initialises; `PySys_AddAuditHook` (3.8+) may be called then and keeps the hook across
//! runtime initialisation; the first audit event that has a thread state is raised before
//! any Python frame runs. Every symbol is resolved with `dlsym` at run time, so that a
//! process that is not Python (`/bin/sh`, `/bin/true`, which inherit `LD_PRELOAD`) is left
//! alone.
//!
//! What the sampler needs from the attachment is the thread-specific-storage key under which
//! CPython binds each thread's `PyThreadState*` (`PyGILState_GetThisThreadState()` is
//! `pthread_getspecific` on `_PyRuntime`'s `autoTSSkey`). Rather than reading the key's
//! offset inside `_PyRuntime` (which changes with every version), the audit hook finds the
//! key whose value for the current thread is the current thread state: a signal handler can
//! then call `pthread_getspecific(key)`, a lock-free read of the calling thread's own slot.

use libc::{c_char, c_int, c_void};
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// `dlsym(RTLD_DEFAULT, name)`, as an address; 0 when the process has no such symbol.
pub fn symbol(name: &CStr) -> usize {
    // SAFETY: dlsym with a valid NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

/// The address and size (bytes, its ELF `st_size`) of the exported variable `name`, from
/// the dynamic symbol the loader resolves it to (`dladdr1` with `RTLD_DL_SYMENT`);
/// `None` when it is not exported or its size is not recorded.
pub fn variable_extent(name: &CStr) -> Option<(usize, usize)> {
    const RTLD_DL_SYMENT: libc::c_int = 1;
    let at = symbol(name);
    if at == 0 {
        return None;
    }
    // SAFETY: dladdr1 fills `info` and points `sym` at the loader's own symbol table entry
    // (read-only, alive as long as the object is loaded: ours for the process's life).
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let mut sym: *mut libc::c_void = std::ptr::null_mut();
        if libc::dladdr1(
            at as *const libc::c_void,
            &mut info,
            &mut sym,
            RTLD_DL_SYMENT,
        ) == 0
            || sym.is_null()
        {
            return None;
        }
        let size = (*(sym as *const libc::Elf64_Sym)).st_size as usize;
        (size > 0).then_some((at, size))
    }
}

/// The CPython version of this process as `(major, minor, micro)`, read from
/// `Py_GetVersion()` (callable before initialisation in every version, 2.7 included).
/// `None` when the process has no Python runtime.
pub fn version() -> Option<(u8, u8, u8)> {
    let get = symbol(c"Py_GetVersion");
    if get == 0 || symbol(c"Py_Initialize") == 0 {
        return None;
    }
    // SAFETY: Py_GetVersion has the signature `const char *Py_GetVersion(void)` and returns a
    // static NUL-terminated string.
    let text = unsafe {
        let f: extern "C" fn() -> *const c_char = std::mem::transmute(get);
        CStr::from_ptr(f())
    };
    parse_version(text.to_bytes())
}

/// Whether this process's interpreter is initialised already (`Py_IsInitialized()`, a
/// read of one field in every version): true when the library is loaded into a running
/// program (`pyigprof attach`, ctypes) rather than preloaded.
pub fn initialized() -> bool {
    let is = symbol(c"Py_IsInitialized");
    // SAFETY: `int Py_IsInitialized(void)`, callable at any time.
    is != 0 && unsafe { std::mem::transmute::<usize, extern "C" fn() -> libc::c_int>(is)() } != 0
}

/// Parses the leading `X.Y.Z` of a `Py_GetVersion()` string such as
/// `3.11.7 (main, Jan  1 2024, 00:00:00) [GCC 12.2.0]` or `3.13.0rc1+ (…)`.
pub fn parse_version(text: &[u8]) -> Option<(u8, u8, u8)> {
    let head = text.split(|&b| b == b' ').next()?;
    let mut parts = head.split(|&b| b == b'.');
    let number = |part: Option<&[u8]>| -> Option<u8> {
        let digits: Vec<u8> = part?
            .iter()
            .copied()
            .take_while(u8::is_ascii_digit)
            .collect();
        std::str::from_utf8(&digits).ok()?.parse().ok()
    };
    let major = number(parts.next())?;
    let minor = number(parts.next())?;
    let micro = number(parts.next()).unwrap_or(0);
    Some((major, minor, micro))
}

/// What the sampler learns when it attaches.
#[derive(Clone, Copy, Debug)]
pub struct Attached {
    /// The `pthread_key_t` under which CPython keeps each thread's `PyThreadState*`.
    pub tss_key: libc::pthread_key_t,
}

static ON_ATTACH: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());
static ATTACHED: AtomicBool = AtomicBool::new(false);

type AuditHook = extern "C" fn(*const c_char, *mut c_void, *mut c_void) -> c_int;

/// Registers the audit hook; `on_attach` is called once, from the first audit event raised
/// by a thread that has a thread state (with the GIL held). Returns `false` when this
/// CPython has no audit hooks (before 3.8) or the registration failed.
pub fn attach_by_audit_hook(on_attach: fn(Attached)) -> bool {
    if HOOKED.swap(true, Ordering::AcqRel) {
        return true;
    }
    let add = symbol(c"PySys_AddAuditHook");
    if add == 0 {
        return false;
    }
    ON_ATTACH.store(on_attach as *mut (), Ordering::Release);
    // SAFETY: `int PySys_AddAuditHook(Py_AuditHookFunction hook, void *userData)`; CPython
    // documents that it may be called before Py_Initialize.
    let rc = unsafe {
        let f: extern "C" fn(AuditHook, *mut c_void) -> c_int = std::mem::transmute(add);
        f(audit_hook, std::ptr::null_mut())
    };
    rc == 0
}

/// Whether the audit hook was registered.
static HOOKED: AtomicBool = AtomicBool::new(false);
/// What to call when the program's main code starts (a `fn()`; null = nothing, or done).
static ON_RUN: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// Calls `on_run` (with the GIL held) from the audit hook ([`attach_by_audit_hook`], which
/// must be registered too) at the event CPython raises right before it runs the
/// program's main code, with the interpreter fully initialised: `cpython.run_file`,
/// `cpython.run_command`, `cpython.run_module`, `cpython.run_stdin` or
/// `cpython.run_interactivehook` (3.8+; an embedding application raises none of them).
/// Until then the audit hook stays registered.
pub fn call_when_program_runs(on_run: fn()) {
    ON_RUN.store(on_run as *mut (), Ordering::Release);
}

extern "C" fn audit_hook(event: *const c_char, _args: *mut c_void, _data: *mut c_void) -> c_int {
    try_attach();
    if !ON_RUN.load(Ordering::Acquire).is_null()
        && !event.is_null()
        // SAFETY: CPython passes the event's NUL-terminated name.
        && unsafe { CStr::from_ptr(event) }
            .to_bytes()
            .starts_with(b"cpython.run_")
    {
        let on_run = ON_RUN.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !on_run.is_null() {
            // SAFETY: stored from a `fn()` by call_when_program_runs.
            let on_run: fn() = unsafe { std::mem::transmute(on_run) };
            on_run();
            if ATTACHED.load(Ordering::Acquire) {
                unlink_audit_hook();
            }
        }
    }
    0
}

/// What to call when the interpreter starts finalising (a `fn()`; null = nothing).
static ON_FINALIZE: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// Calls `on_finalize` when `Py_FinalizeEx` or `Py_Finalize` is called through the
/// dynamic linker: by an embedding application, or by `Py_Main` of an interpreter built
/// as a shared `libpython` with semantic interposition (GCC's default for `-fPIC`; CPython
/// turns it off from 3.10 in optimised builds). The first thing finalisation does, before
/// threads are joined and `atexit` callbacks run: for interpreters without audit hooks
/// (before 3.8), the nearest point to the end of the program's code.
pub fn call_before_finalize(on_finalize: fn()) {
    ON_FINALIZE.store(on_finalize as *mut (), Ordering::Release);
}

fn finalizing() {
    let cb = ON_FINALIZE.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !cb.is_null() {
        // SAFETY: stored from a `fn()` by call_before_finalize.
        let cb: fn() = unsafe { std::mem::transmute(cb) };
        cb();
    }
}

static NEXT_FINALIZE_EX: crate::next::Next = crate::next::Next::new(c"Py_FinalizeEx");
static NEXT_FINALIZE: crate::next::Next = crate::next::Next::new(c"Py_Finalize");

/// `int Py_FinalizeEx(void)` (3.6+), interposed: see [`call_before_finalize`].
#[no_mangle]
pub extern "C" fn Py_FinalizeEx() -> c_int {
    finalizing();
    // SAFETY: the next definition, CPython's.
    unsafe { std::mem::transmute::<usize, extern "C" fn() -> c_int>(NEXT_FINALIZE_EX.get())() }
}

/// `void Py_Finalize(void)`, interposed: see [`call_before_finalize`].
#[no_mangle]
pub extern "C" fn Py_Finalize() {
    finalizing();
    // SAFETY: the next definition, CPython's.
    unsafe { std::mem::transmute::<usize, extern "C" fn()>(NEXT_FINALIZE.get())() }
}

/// `PyMethodDef` of CPython's `Include/methodobject.h`.
#[repr(C)]
struct MethodDef {
    name: *const c_char,
    method: usize,
    flags: c_int,
    doc: *const c_char,
}

/// `METH_NOARGS`.
const METH_NOARGS: c_int = 0x0004;

struct AtExit {
    def: std::cell::UnsafeCell<MethodDef>,
    callback: AtomicPtr<()>,
}

// SAFETY: written once, with the GIL held, before CPython reads it.
unsafe impl Sync for AtExit {}

static AT_EXIT: AtExit = AtExit {
    def: std::cell::UnsafeCell::new(MethodDef {
        name: c"pyigprof_program_ended".as_ptr(),
        method: 0,
        flags: METH_NOARGS,
        doc: std::ptr::null(),
    }),
    callback: AtomicPtr::new(std::ptr::null_mut()),
};

extern "C" fn at_exit_trampoline(_module: *mut c_void, _args: *mut c_void) -> *mut c_void {
    let callback = AT_EXIT.callback.load(Ordering::Acquire);
    if !callback.is_null() {
        // SAFETY: stored from a `fn()` by register_atexit.
        let callback: fn() = unsafe { std::mem::transmute(callback) };
        callback();
    }
    // `Py_BuildValue("")` is a new reference to None.
    call_c_api::<extern "C" fn(*const c_char) -> *mut c_void>(c"Py_BuildValue")
        .map_or(std::ptr::null_mut(), |build| build(c"".as_ptr()))
}

/// The C-API function `name`, typed `F` (the caller gives its C signature).
fn call_c_api<F: Copy>(name: &CStr) -> Option<F> {
    let address = symbol(name);
    // SAFETY: F is a function pointer type with the symbol's signature (the caller's
    // contract), of the size of an address.
    (address != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&address) })
}

/// Registers `callback` with Python's `atexit` module: it runs when the program's code
/// has ended (after the program's own `atexit` callbacks, which were registered later,
/// and after non-daemon threads were joined) and before the interpreter frees the
/// program's objects. Call with the GIL held, once the interpreter is initialised (from
/// [`call_when_program_runs`]). Returns false when anything fails (the error is cleared).
pub fn register_atexit(callback: fn()) -> bool {
    type Import = extern "C" fn(*const c_char) -> *mut c_void;
    type GetAttr = extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
    type NewFunction = extern "C" fn(*mut MethodDef, *mut c_void, *mut c_void) -> *mut c_void;
    type Call = extern "C" fn(*mut c_void, *mut c_void, *mut c_void) -> *mut c_void;
    type DecRef = extern "C" fn(*mut c_void);
    type Clear = extern "C" fn();
    let (Some(import), Some(get_attr), Some(new_function), Some(call), Some(dec_ref), Some(clear)) = (
        call_c_api::<Import>(c"PyImport_ImportModule"),
        call_c_api::<GetAttr>(c"PyObject_GetAttrString"),
        call_c_api::<NewFunction>(c"PyCFunction_NewEx"),
        call_c_api::<Call>(c"PyObject_CallFunctionObjArgs"),
        call_c_api::<DecRef>(c"Py_DecRef"),
        call_c_api::<Clear>(c"PyErr_Clear"),
    ) else {
        return false;
    };
    AT_EXIT
        .callback
        .store(callback as *mut (), Ordering::Release);
    // SAFETY: the definition is static; written before CPython first reads it.
    unsafe { (*AT_EXIT.def.get()).method = at_exit_trampoline as *const () as usize };
    let module = import(c"atexit".as_ptr());
    if module.is_null() {
        clear();
        return false;
    }
    let register = get_attr(module, c"register".as_ptr());
    let function = new_function(
        AT_EXIT.def.get(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    let mut done = false;
    if !register.is_null() && !function.is_null() {
        let result = call(register, function, std::ptr::null_mut());
        done = !result.is_null();
        if done {
            dec_ref(result);
        }
    }
    for object in [function, register, module] {
        if !object.is_null() {
            dec_ref(object);
        }
    }
    if !done {
        clear();
    }
    done
}

/// For interpreters without audit hooks whose key cannot be read from memory (a 3.6 whose
/// libpython is stripped of `.symtab`): remembers `on_attach`, to be called by the first
/// [`try_attach`] made from a thread that has a thread state.
pub fn attach_later(on_attach: fn(Attached)) {
    ON_ATTACH.store(on_attach as *mut (), Ordering::Release);
}

/// Attaches if not done yet and the calling thread has a Python thread state (from the
/// audit hook, or from the `dlopen` interposition: an import runs with the GIL held).
/// Returns whether the process is attached.
pub fn try_attach() -> bool {
    if ATTACHED.load(Ordering::Relaxed) {
        return true;
    }
    let cb = ON_ATTACH.load(Ordering::Acquire);
    if cb.is_null() {
        return false;
    }
    let Some(key) = find_thread_state_key() else {
        return false;
    };
    if !ATTACHED.swap(true, Ordering::AcqRel) {
        // SAFETY: stored from a `fn(Attached)` by attach_by_audit_hook or attach_later.
        let cb: fn(Attached) = unsafe { std::mem::transmute(cb) };
        cb(Attached { tss_key: key });
        if ON_RUN.load(Ordering::Acquire).is_null() {
            unlink_audit_hook();
        }
    }
    true
}

/// `dladdr1`'s request for the symbol's `Elf64_Sym` (glibc `<dlfcn.h>`; not in the libc
/// crate).
const RTLD_DL_SYMENT: libc::c_int = 1;

/// One entry of CPython's list of audit hooks (`_Py_AuditHookEntry` of `Python/sysmodule.c`,
/// the same in 3.8–3.15): the next entry, the hook, its user data.
#[repr(C)]
struct AuditHookEntry {
    next: *mut AuditHookEntry,
    hook: usize,
    data: usize,
}

/// Takes the audit hook out of CPython's list once it has done its work, so that the
/// program's interpreter ends as if pyigprof had never registered it.
///
/// The hook was registered from the constructor, before Python chose its allocator: CPython
/// allocated its entry with the raw allocator of that moment (`malloc`) and frees it at
/// finalization (`_PySys_ClearAuditHooks`) with the one of then. In development mode
/// (`-X dev`, `PYTHONDEVMODE`, `PYTHONMALLOC=debug`) that is the debug allocator, which
/// finds no header and stops the process ("_PyMem_DebugRawFree: bad ID"). The list's head
/// is a field of the exported `_PyRuntime` whose offset changes with every version; it is
/// found as the one word of `_PyRuntime` that points to a mapped entry holding this hook.
/// The entry is unlinked but not freed: CPython is calling it now and reads its `next`
/// after the call (24 bytes stay allocated). Called with the GIL held (from the first audit
/// event); when anything does not match, the list is left as it is.
fn unlink_audit_hook() {
    let runtime = symbol(c"_PyRuntime");
    if runtime == 0 {
        return;
    }
    // The size of `_PyRuntime` from its symbol table entry.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut entry: *const libc::Elf64_Sym = std::ptr::null();
    // SAFETY: dladdr1 fills `info` and `entry` for an address inside a loaded object.
    let found = unsafe {
        libc::dladdr1(
            runtime as *const c_void,
            &mut info,
            &mut entry as *mut *const libc::Elf64_Sym as *mut *mut c_void,
            RTLD_DL_SYMENT,
        )
    };
    // SAFETY: when dladdr1 succeeds with RTLD_DL_SYMENT, `entry` points to the symbol.
    let size = if found != 0 && !entry.is_null() {
        unsafe { (*entry).st_size as usize }
    } else {
        0
    };
    if size == 0 {
        return;
    }
    // The entry was allocated by `malloc` from the constructor, on the main thread: in
    // the heap that `brk` extends, one mapping, readable and writable. Looking there first
    // spares reading `/proc/self/maps` (0.1 ms) in nearly every process.
    if let Some(heap) = brk_heap() {
        if unlink_within(runtime, size, &[heap]) {
            return;
        }
    }
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let writable: Vec<(usize, usize)> = maps
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (lo, hi) = fields.next()?.split_once('-')?;
            let perms = fields.next()?;
            perms.starts_with("rw").then(|| {
                Some((
                    usize::from_str_radix(lo, 16).ok()?,
                    usize::from_str_radix(hi, 16).ok()?,
                ))
            })?
        })
        .collect();
    unlink_within(runtime, size, &writable);
}

/// Unlinks the entry of [`audit_hook`] from the list whose head is one of the words of
/// `_PyRuntime` (at `runtime`, `size` bytes), if it is the head and lies in one of the
/// readable and writable `[low, high)` address ranges of `mapped`; returns whether it did.
fn unlink_within(runtime: usize, size: usize, mapped: &[(usize, usize)]) -> bool {
    let entry_readable = |p: usize| {
        p.is_multiple_of(8)
            && mapped
                .iter()
                .any(|&(lo, hi)| lo <= p && p + std::mem::size_of::<AuditHookEntry>() <= hi)
    };
    let hook = audit_hook as AuditHook as usize;
    for offset in (0..size.saturating_sub(7)).step_by(8) {
        let head = (runtime + offset) as *mut *mut AuditHookEntry;
        // SAFETY: inside `_PyRuntime`, aligned (the struct is 8-aligned, offsets step by 8).
        let first = unsafe { head.read() };
        if !entry_readable(first as usize) {
            continue;
        }
        // SAFETY: `first` points to readable, writable memory large enough for an entry.
        let candidate = unsafe { &*first };
        if candidate.hook == hook && candidate.data == 0 {
            // SAFETY: the head of the list, written with the GIL held, as CPython does.
            unsafe { head.write(candidate.next) };
            return true;
        }
    }
    false
}

/// The heap that `brk` extends, `[start, current break)`: its start is field 47
/// (`start_brk`) of `/proc/self/stat` (proc(5)); `None` when it cannot be read or is empty.
fn brk_heap() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces: the
    // first of them is field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    let start: usize = rest.split_whitespace().nth(47 - 3)?.parse().ok()?;
    // SAFETY: sbrk(0) only reports the current break.
    let end = unsafe { libc::sbrk(0) } as usize;
    (start != 0 && start < end).then_some((start, end))
}

/// Finds the TSS key that holds the calling thread's `PyThreadState*`. Must be called by a
/// thread that has a Python thread state (with the GIL held, e.g. from an audit hook).
pub fn find_thread_state_key() -> Option<libc::pthread_key_t> {
    let get = symbol(c"PyGILState_GetThisThreadState");
    if get == 0 {
        return None;
    }
    // SAFETY: `PyThreadState *PyGILState_GetThisThreadState(void)` returns NULL when the
    // thread has no thread state.
    let tstate = unsafe {
        let f: extern "C" fn() -> *mut c_void = std::mem::transmute(get);
        f()
    };
    if tstate.is_null() {
        return None;
    }
    // glibc's PTHREAD_KEYS_MAX is 1024; pthread_getspecific returns NULL for keys that were
    // never created.
    (0..1024u32).find(|&key| unsafe { libc::pthread_getspecific(key) } == tstate)
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn the_brk_heap_is_the_heap_mapping() {
        let (start, end) = super::brk_heap().expect("a brk heap");
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let heap = maps
            .lines()
            .find(|l| l.ends_with("[heap]"))
            .expect("a [heap] mapping");
        let (lo, hi) = heap
            .split_whitespace()
            .next()
            .unwrap()
            .split_once('-')
            .unwrap();
        assert_eq!(start, usize::from_str_radix(lo, 16).unwrap());
        assert_eq!(end, usize::from_str_radix(hi, 16).unwrap());
    }

    #[test]
    fn parses_release_and_prerelease_versions() {
        assert_eq!(
            parse_version(b"3.11.7 (main, Jan  1 2024) [GCC]"),
            Some((3, 11, 7))
        );
        assert_eq!(
            parse_version(b"3.13.0rc1+ (heads/3.13:abc)"),
            Some((3, 13, 0))
        );
        assert_eq!(
            parse_version(b"2.7.18 (default, Apr 20 2020)"),
            Some((2, 7, 18))
        );
        assert_eq!(parse_version(b"garbage"), None);
    }
}
