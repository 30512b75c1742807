//! Where the interpreter keeps the functions of its `PyMutex`-based lock objects, so that
//! the lock profiler can wrap them ([`crate::sources::lock_objects`]): 3.13.1 made
//! `threading.Lock` (`_thread.lock`) a `PyMutex` (CPython gh-117721, backported from
//! 3.14), 3.14 `threading.RLock` (`_thread.RLock`) a `_PyRecursiveMutex` — taken and
//! released by atomic instructions, with no call the C library's hooks could see.
//!
//! What is read, from CPython's `Modules/_threadmodule.c` (3.13.1–3.15):
//! - each type's methods are a static, writable `PyMethodDef` array (`lock_methods`,
//!   `rlock_methods`; `Include/methodobject.h`: `{const char *ml_name; PyCFunction
//!   ml_meth; int ml_flags; const char *ml_doc}`, 32 bytes), whose `ml_meth` every call
//!   reads anew (a method descriptor keeps a pointer to its entry);
//! - each type is made from a static, writable `PyType_Slot` array (`lock_type_slots`,
//!   `rlock_type_slots`; `Include/object.h`: `{int slot; void *pfunc}`, 16 bytes), read
//!   once when the `_thread` module is initialised: its `Py_tp_new` (65) makes the object
//!   `threading.Lock()` (`RLock()`) returns, its `Py_tp_dealloc` (52) frees it;
//! - the module's own methods (`thread_methods`) have `allocate_lock` and `allocate`, which
//!   make a lock object too (`threading`'s `_allocate_lock`: a `Condition`'s waiters);
//! - the object is `{PyObject_HEAD; PyMutex lock; …}` (`_PyRecursiveMutex`, whose first
//!   member is its `PyMutex`, for `RLock`): the mutex is [`MUTEX_OFFSET`] bytes into it,
//!   the address the parking lot parks a waiter for
//!   ([`crate::sources::locks`]' `parked_for`).
//!
//! Nothing of the interpreter is called: the arrays are found by their entries' names in
//! the interpreter's object (libpython, or the executable of a static build) — its
//! read-only segments for the names, its initialized writable data for the arrays.

/// Bytes from a lock object's address to its `PyMutex`: `PyObject_HEAD` (reference count
/// and type pointer) in a default build.
pub const MUTEX_OFFSET: u64 = 16;

/// `Py_tp_dealloc`, `Py_tp_methods` and `Py_tp_new` (`Include/typeslots.h`).
const PY_TP_DEALLOC: u64 = 52;
const PY_TP_METHODS: u64 = 64;
const PY_TP_NEW: u64 = 65;

/// The `ml_flags` bits a `PyMethodDef` may have (`METH_VARARGS` … `METH_METHOD`, 0x200).
const METH_FLAGS: u32 = 0x3ff;

/// What a wrapped function does to the lock it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `acquire`, `acquire_lock`, `__enter__`: returns `True` when it acquired. `nests`:
    /// a recursive lock (`RLock`), whose owner's acquisitions nest.
    Acquire { nests: bool },
    /// `release`, `release_lock`, `__exit__`: returns non-NULL when it released.
    Release,
    /// `RLock._release_save` (a `Condition`'s wait): releases the lock whatever its depth.
    ReleaseSave,
    /// `RLock._acquire_restore`: takes it back at the depth `_release_save` saved.
    AcquireRestore,
    /// `Py_tp_new`, `_thread.allocate_lock`: returns the new lock object.
    Made,
    /// `Py_tp_dealloc`: frees the lock object it is given.
    Freed,
}

/// A function pointer of the interpreter's to wrap: the writable word that holds it, and
/// what the function does.
#[derive(Clone, Copy, Debug)]
pub struct Patch {
    /// The address of the `ml_meth` or `pfunc` word.
    pub at: usize,
    /// The function it points to now.
    pub original: usize,
    pub role: Role,
}

/// One lock type: a name its method array has (`marker`; other arrays may have it too),
/// and its methods' roles.
struct LockType {
    /// Python version (major, minor, micro) from which it is a `PyMutex`.
    since: (u8, u8, u8),
    marker: &'static [u8],
    methods: &'static [(&'static str, Role)],
    /// Whether the type's slot array is wrapped too (`tp_new`, `tp_dealloc`).
    slots: bool,
}

const LOCK: Role = Role::Acquire { nests: false };
const RLOCK: Role = Role::Acquire { nests: true };

/// The lock types and their functions (`Modules/_threadmodule.c`).
const TYPES: [LockType; 3] = [
    LockType {
        since: (3, 13, 1),
        marker: b"acquire_lock",
        methods: &[
            ("acquire_lock", LOCK),
            ("acquire", LOCK),
            ("__enter__", LOCK),
            ("release_lock", Role::Release),
            ("release", Role::Release),
            ("__exit__", Role::Release),
        ],
        slots: true,
    },
    LockType {
        since: (3, 14, 0),
        marker: b"_acquire_restore",
        methods: &[
            ("acquire", RLOCK),
            ("__enter__", RLOCK),
            ("release", Role::Release),
            ("__exit__", Role::Release),
            ("_release_save", Role::ReleaseSave),
            ("_acquire_restore", Role::AcquireRestore),
        ],
        slots: true,
    },
    LockType {
        since: (3, 13, 1),
        marker: b"allocate_lock",
        methods: &[("allocate_lock", Role::Made), ("allocate", Role::Made)],
        slots: false,
    },
];

/// Address ranges of one loaded object's segments.
#[derive(Default, Debug)]
struct Segments {
    /// Readable, neither writable nor executable: string literals.
    read_only: Vec<(usize, usize)>,
    /// Executable: functions.
    text: Vec<(usize, usize)>,
    /// Writable and initialized from the file, less the part made read-only after
    /// relocation (`PT_GNU_RELRO`).
    data: Vec<(usize, usize)>,
}

impl Segments {
    fn within(ranges: &[(usize, usize)], address: usize, len: usize) -> bool {
        ranges
            .iter()
            .any(|&(start, end)| address >= start && address.saturating_add(len) <= end)
    }

    /// The word at `address`, when it lies in the writable data.
    fn word(&self, address: usize) -> Option<usize> {
        // SAFETY: inside one of the object's mapped, initialized writable segments.
        Self::within(&self.data, address, 8)
            .then(|| unsafe { std::ptr::read_volatile(address as *const usize) })
    }

    /// The NUL-terminated name at `address` in the read-only segments (at most 64 bytes).
    fn name(&self, address: usize) -> Option<&'static [u8]> {
        let (_, end) = *self
            .read_only
            .iter()
            .find(|&&(start, end)| address >= start && address < end)?;
        let len = (end - address).min(64);
        // SAFETY: inside a mapped read-only segment of an object loaded for the process's
        // life (the interpreter's).
        let bytes = unsafe { std::slice::from_raw_parts(address as *const u8, len) };
        let nul = memchr::memchr(0, bytes)?;
        Some(&bytes[..nul])
    }

    /// Whether the 32 bytes at `at` look like a `PyMethodDef` entry (not the sentinel).
    fn method_def(&self, at: usize) -> bool {
        let (Some(name), Some(meth), Some(flags), Some(doc)) = (
            self.word(at),
            self.word(at + 8),
            self.word(at + 16),
            self.word(at + 24),
        ) else {
            return false;
        };
        Self::within(&self.read_only, name, 1)
            && Self::within(&self.text, meth, 1)
            && (flags as u32) & !METH_FLAGS == 0
            && (doc == 0 || Self::within(&self.read_only, doc, 1))
    }

    /// Whether the 16 bytes at `at` look like a `PyType_Slot` entry (not the sentinel).
    fn type_slot(&self, at: usize) -> bool {
        matches!((self.word(at), self.word(at + 8)), (Some(1..=100), Some(f)) if f != 0)
    }
}

/// The segments of the loaded object that holds `address`.
fn segments_of(address: usize) -> Option<Segments> {
    struct Search {
        address: usize,
        found: Option<Segments>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader's description of one object; `data` is our `Search`.
        let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
        let base = info.dlpi_addr as usize;
        // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
        let headers =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let holds = headers.iter().any(|h| {
            h.p_type == libc::PT_LOAD
                && (base + h.p_vaddr as usize..base + (h.p_vaddr + h.p_memsz) as usize)
                    .contains(&search.address)
        });
        if !holds {
            return 0;
        }
        let mut segments = Segments::default();
        let relro: Vec<(usize, usize)> = headers
            .iter()
            .filter(|h| h.p_type == libc::PT_GNU_RELRO)
            .map(|h| {
                (
                    base + h.p_vaddr as usize,
                    base + (h.p_vaddr + h.p_memsz) as usize,
                )
            })
            .collect();
        for h in headers.iter().filter(|h| h.p_type == libc::PT_LOAD) {
            let start = base + h.p_vaddr as usize;
            let (end_file, end) = (start + h.p_filesz as usize, start + h.p_memsz as usize);
            if h.p_flags & libc::PF_X != 0 {
                segments.text.push((start, end));
            } else if h.p_flags & libc::PF_W != 0 {
                // The part after the read-only-after-relocation range.
                let from = relro
                    .iter()
                    .filter(|&&(s, e)| s <= start && e > start)
                    .map(|&(_, e)| e)
                    .max()
                    .unwrap_or(start);
                if from < end_file {
                    segments.data.push((from, end_file));
                }
            } else if h.p_flags & libc::PF_R != 0 {
                segments.read_only.push((start, end_file.min(end)));
            }
        }
        search.found = Some(segments);
        1
    }
    let mut search = Search {
        address,
        found: None,
    };
    // SAFETY: the callback matches dl_iterate_phdr's; `search` outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut search as *mut Search as *mut libc::c_void) };
    search.found
}

/// The functions of this interpreter's `PyMutex` lock objects, found in the object that
/// holds `runtime` (an address of the interpreter's code), for Python `version`; empty
/// before 3.13.1 (whose locks are semaphores the C library's hooks see) or when an array
/// is not found (each type found is given whole or not at all). The slots' words are
/// given only when `before_types` (the interpreter has not made its types yet: a type
/// copies them when it is made). Reads only memory; allocates: not from a signal handler.
pub fn find(runtime: usize, version: (u8, u8, u8), before_types: bool) -> Vec<Patch> {
    let mut patches = Vec::new();
    let Some(segments) = segments_of(runtime) else {
        return patches;
    };
    for kind in TYPES.iter().filter(|t| version >= t.since) {
        // `_imp` has an `acquire_lock` too: the array is the one with every method named.
        let mut arrays = method_arrays(&segments, kind.marker)
            .into_iter()
            .map(|array| (array, entries(&segments, array, kind)))
            .filter(|(_, found)| found.len() == kind.methods.len());
        let (Some((array, mut found)), None) = (arrays.next(), arrays.next()) else {
            continue;
        };
        if kind.slots && before_types {
            found.extend(slots(&segments, array));
        }
        patches.extend(found);
    }
    patches
}

/// The entries of the `PyMethodDef` array at `array` that `kind` wraps.
fn entries(segments: &Segments, array: usize, kind: &LockType) -> Vec<Patch> {
    let mut found = Vec::new();
    let mut at = array;
    while segments.method_def(at) {
        let name = segments.word(at).and_then(|n| segments.name(n));
        if let Some(&(_, role)) = kind
            .methods
            .iter()
            .find(|(wanted, _)| Some(wanted.as_bytes()) == name)
        {
            found.push(Patch {
                at: at + 8,
                original: segments.word(at + 8).unwrap_or(0),
                role,
            });
        }
        at += 32;
    }
    found
}

/// The starts of the `PyMethodDef` arrays with an entry named `marker`.
fn method_arrays(segments: &Segments, marker: &[u8]) -> Vec<usize> {
    let mut needle = marker.to_vec();
    needle.push(0);
    let finder = memchr::memmem::Finder::new(&needle);
    let mut names = Vec::new();
    for &(start, end) in &segments.read_only {
        // SAFETY: a mapped read-only segment of the interpreter's object.
        let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, end - start) };
        names.extend(finder.find_iter(bytes).map(|i| start + i));
    }
    if names.is_empty() {
        return Vec::new();
    }
    let mut arrays = Vec::new();
    for &(start, end) in &segments.data {
        let mut at = (start + 7) & !7;
        while at + 32 <= end {
            // SAFETY: inside the initialized writable segment.
            let word = unsafe { std::ptr::read_volatile(at as *const usize) };
            if names.contains(&word) && segments.method_def(at) {
                let mut first = at;
                while first >= start + 32 && segments.method_def(first - 32) {
                    first -= 32;
                }
                if !arrays.contains(&first) {
                    arrays.push(first);
                }
            }
            at += 8;
        }
    }
    arrays
}

/// The `Py_tp_new` and `Py_tp_dealloc` words of the `PyType_Slot` array whose
/// `Py_tp_methods` is `methods`; none unless exactly one such array is found.
fn slots(segments: &Segments, methods: usize) -> Vec<Patch> {
    let mut arrays = Vec::new();
    for &(start, end) in &segments.data {
        let mut at = (start + 7) & !7;
        while at + 16 <= end {
            if segments.word(at) == Some(PY_TP_METHODS as usize)
                && segments.word(at + 8) == Some(methods)
            {
                let mut first = at;
                while first >= start + 16 && segments.type_slot(first - 16) {
                    first -= 16;
                }
                arrays.push(first);
            }
            at += 8;
        }
    }
    let [array] = arrays[..] else {
        return Vec::new();
    };
    let mut patches = Vec::new();
    let mut at = array;
    while segments.type_slot(at) {
        let (slot, original) = (
            segments.word(at).unwrap_or(0),
            segments.word(at + 8).unwrap_or(0),
        );
        let role = match slot as u64 {
            PY_TP_NEW => Some(Role::Made),
            PY_TP_DEALLOC => Some(Role::Freed),
            _ => None,
        };
        if let Some(role) = role {
            patches.push(Patch {
                at: at + 8,
                original,
                role,
            });
        }
        at += 16;
    }
    patches
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{c_char, c_void};

    /// A `PyMethodDef` (`Include/methodobject.h`), as the interpreter's tables hold them.
    #[repr(C)]
    struct Def {
        name: *const c_char,
        meth: Option<unsafe extern "C" fn()>,
        flags: i32,
        doc: *const c_char,
    }

    /// A `PyType_Slot` (`Include/object.h`): the `int` and its padding as one word.
    #[repr(C)]
    struct Slot {
        slot: u64,
        pfunc: *const c_void,
    }

    unsafe extern "C" fn acquire() {}
    unsafe extern "C" fn release() {}
    unsafe extern "C" fn other() {}
    unsafe extern "C" fn new() {}
    unsafe extern "C" fn dealloc() {}

    const fn def(name: &'static std::ffi::CStr, meth: unsafe extern "C" fn()) -> Def {
        Def {
            name: name.as_ptr(),
            meth: Some(meth),
            flags: 0x3,
            doc: std::ptr::null(),
        }
    }

    const SENTINEL: Def = Def {
        name: std::ptr::null(),
        meth: None,
        flags: 0,
        doc: std::ptr::null(),
    };

    // Writable, as CPython's (non-`const`) tables are: `static mut` keeps them out of the
    // read-only-after-relocation data.
    /// `_imp`'s methods, which have an `acquire_lock` too.
    static mut IMP_METHODS: [Def; 4] = [
        def(c"lock_held", other),
        def(c"acquire_lock", other),
        def(c"release_lock", other),
        SENTINEL,
    ];
    static mut LOCK_METHODS: [Def; 10] = [
        def(c"acquire_lock", acquire),
        def(c"acquire", acquire),
        def(c"release_lock", release),
        def(c"release", release),
        def(c"locked_lock", other),
        def(c"locked", other),
        def(c"__enter__", acquire),
        def(c"__exit__", release),
        def(c"_at_fork_reinit", other),
        SENTINEL,
    ];
    static mut LOCK_SLOTS: [Slot; 5] = [
        Slot {
            slot: PY_TP_DEALLOC,
            pfunc: dealloc as *const c_void,
        },
        Slot {
            slot: 56, // Py_tp_doc
            pfunc: c"a lock".as_ptr() as *const c_void,
        },
        Slot {
            slot: PY_TP_METHODS,
            pfunc: &raw const LOCK_METHODS as *const c_void,
        },
        Slot {
            slot: PY_TP_NEW,
            pfunc: new as *const c_void,
        },
        Slot {
            slot: 0,
            pfunc: std::ptr::null(),
        },
    ];

    #[test]
    fn a_lock_types_methods_and_slots_are_found_by_their_names_in_writable_data() {
        // Only the tables' addresses are taken.
        let (imp, methods, slots) = (
            std::hint::black_box(&raw const IMP_METHODS) as usize,
            std::hint::black_box(&raw const LOCK_METHODS) as usize,
            std::hint::black_box(&raw const LOCK_SLOTS) as usize,
        );
        type F = unsafe extern "C" fn();
        let (acquire, release, new, dealloc) = (
            acquire as F as usize,
            release as F as usize,
            new as F as usize,
            dealloc as F as usize,
        );
        let here = a_lock_types_methods_and_slots_are_found_by_their_names_in_writable_data
            as fn() as usize;
        let patches = find(here, (3, 13, 5), true);
        let at = |p: &Patch| (p.at, p.original, p.role);
        let meth = |i: usize| methods + 32 * i + 8;
        let lock = Role::Acquire { nests: false };
        let wanted = vec![
            (meth(0), acquire, lock),
            (meth(1), acquire, lock),
            (meth(2), release, Role::Release),
            (meth(3), release, Role::Release),
            (meth(6), acquire, lock),
            (meth(7), release, Role::Release),
            (slots + 8, dealloc, Role::Freed),
            (slots + 3 * 16 + 8, new, Role::Made),
        ];
        assert_eq!(patches.iter().map(at).collect::<Vec<_>>(), wanted);
        assert!(patches.iter().all(|p| !(imp..imp + 4 * 32).contains(&p.at)));
        // Once the interpreter has made its types, their slots are no longer read.
        assert_eq!(find(here, (3, 13, 5), false).len(), 6);
        // Before 3.13.1 the locks are semaphores: nothing to wrap.
        assert!(find(here, (3, 13, 0), true).is_empty());
    }
}
