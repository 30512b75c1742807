//! `dlopen`/`dlclose` interposition, so that the sampler's module list (and with it the
//! unwinder's CFI and the symbolizer) follows the code mapped into the process.
//!
//! `dlclose` tells the sampler *before* the object can be unmapped: the sampler then stops
//! reading the object's unwind tables, waits for samples in flight, and only then is the
//! real `dlclose` run.
//!
//! `dlopen` of a name without `/` is looked up as glibc would for the object that called
//! it: glibc reads its caller from its own return address, and searches that object's
//! `DT_RPATH`/`DT_RUNPATH` (`$ORIGIN/…` in wheels that vendor libraries or load plugins by
//! name); called from here, it would search libpyigprof.so's instead.

use crate::next::Next;
use libc::{c_char, c_int, c_void};

static REAL_DLOPEN: Next = Next::new(c"dlopen");
static REAL_DLCLOSE: Next = Next::new(c"dlclose");

/// Interposed `dlopen(3)`: takes its caller's return address (the word at the stack
/// pointer on entry) as a third argument and jumps to `dlopen_from`, so that the library
/// is looked for as the caller would have it looked for (its RPATH/RUNPATH), not as
/// libpyigprof.so would: glibc's `dlopen` takes the object that called it from its own
/// return address, which the interposition would replace with one inside this library.
///
/// # Safety
/// As `dlopen(3)`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlopen(_filename: *const c_char, _flags: c_int) -> *mut c_void {
    std::arch::naked_asm!(
        "mov rdx, [rsp]",
        "jmp {from}",
        from = sym dlopen_from,
    )
}

/// `dlopen(filename, flags)` made by the code at `caller` (a return address). Then tells
/// the sampler that objects were added.
///
/// A name without a `/` is found as glibc would find it for `caller`: an object already
/// loaded under that name is returned (`RTLD_NOLOAD`); else the directories that glibc
/// searches for `caller` and would not search for this library (the caller's
/// `DT_RPATH`/`DT_RUNPATH`, `$ORIGIN` expanded: `dlinfo(RTLD_DI_SERINFO)`) are tried in
/// glibc's order, and the first that holds a file of that name is loaded by its path; a
/// name found first in a directory searched for both (`LD_LIBRARY_PATH`, the system's) is
/// left to glibc.
///
/// # Safety
/// As `dlopen(3)`.
unsafe extern "C" fn dlopen_from(
    filename: *const c_char,
    flags: c_int,
    caller: usize,
) -> *mut c_void {
    type F = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;
    // SAFETY: the next definition is libc's dlopen.
    let real: F = unsafe { std::mem::transmute(REAL_DLOPEN.get()) };
    let handle = match unsafe { search::path_for_caller(filename, flags, caller, real) } {
        search::Found::Loaded(handle) => handle,
        search::Found::Path(path) => unsafe { real(path.as_ptr(), flags) },
        search::Found::AsGiven => unsafe { real(filename, flags) },
    };
    if !handle.is_null() {
        if let Some(cb) = crate::callbacks() {
            (cb.objects_added)();
        }
    }
    handle
}

/// Finding a library by name for the object that asked for it.
mod search {
    use libc::{c_char, c_int, c_void};
    use std::ffi::{CStr, CString};

    /// What [`path_for_caller`] found.
    pub enum Found {
        /// The object is already loaded: its handle, from `dlopen(RTLD_NOLOAD)`.
        Loaded(*mut c_void),
        /// The path to load.
        Path(CString),
        /// Load the name as given: glibc finds it for this library as for the caller.
        AsGiven,
    }

    /// `dlinfo` requests (glibc `<dlfcn.h>`; not in the libc crate).
    const RTLD_DI_SERINFO: c_int = 4;
    const RTLD_DI_SERINFOSIZE: c_int = 5;
    /// `dladdr1` request for the object's `struct link_map *`.
    const RTLD_DL_LINKMAP: c_int = 2;

    /// glibc's `Dl_serinfo` header: the buffer's size and the number of paths, then the
    /// paths (`Dl_serpath`: a name and flags).
    #[repr(C)]
    struct SerInfo {
        size: usize,
        count: u32,
        paths: [SerPath; 0],
    }

    #[repr(C)]
    #[derive(Clone, Copy)]
    struct SerPath {
        name: *const c_char,
        flags: u32,
    }

    /// The directories glibc searches for a name without `/` dlopen-ed by `object` (a
    /// handle or `struct link_map *`), in its order.
    unsafe fn search_path(object: *mut c_void) -> Vec<Vec<u8>> {
        let mut header = SerInfo {
            size: 0,
            count: 0,
            paths: [],
        };
        // SAFETY: dlinfo fills the header's size and count for a valid handle.
        if unsafe {
            libc::dlinfo(
                object,
                RTLD_DI_SERINFOSIZE,
                (&mut header as *mut SerInfo).cast(),
            )
        } != 0
            || header.size < std::mem::size_of::<SerInfo>()
        {
            return Vec::new();
        }
        // A buffer of `size` bytes, 8-aligned, that starts with the header as filled.
        let mut buffer = vec![0u64; header.size.div_ceil(8)];
        let info = buffer.as_mut_ptr() as *mut SerInfo;
        // SAFETY: the buffer is large enough; dlinfo fills it for the same handle.
        unsafe {
            (*info).size = header.size;
            (*info).count = header.count;
            if libc::dlinfo(object, RTLD_DI_SERINFO, info.cast()) != 0 {
                return Vec::new();
            }
            let paths = std::slice::from_raw_parts(
                std::ptr::addr_of!((*info).paths) as *const SerPath,
                (*info).count as usize,
            );
            paths
                .iter()
                .filter(|p| !p.name.is_null())
                .map(|p| CStr::from_ptr(p.name).to_bytes().to_vec())
                .collect()
        }
    }

    /// The `struct link_map *` of the object that contains `address`.
    fn object_of(address: usize) -> Option<*mut c_void> {
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let mut map: *mut c_void = std::ptr::null_mut();
        // SAFETY: dladdr1 fills `info` and `map` for an address inside a loaded object.
        let found = unsafe {
            libc::dladdr1(
                address as *const c_void,
                &mut info,
                &mut map as *mut *mut c_void,
                RTLD_DL_LINKMAP,
            )
        };
        (found != 0 && !map.is_null()).then_some(map)
    }

    /// Whether `path` is a 64-bit x86-64 ELF file that can be read (glibc skips a file of
    /// the right name but another class or machine and goes on searching).
    fn loadable(path: &[u8]) -> bool {
        use std::io::Read;
        use std::os::unix::ffi::OsStrExt;
        let mut header = [0u8; 20];
        std::fs::File::open(std::ffi::OsStr::from_bytes(path))
            .and_then(|mut f| f.read_exact(&mut header))
            .is_ok()
            && header[..4] == *b"\x7fELF"
            && header[4] == 2
            && u16::from_le_bytes([header[18], header[19]]) == 62
    }

    /// Where `dlopen(filename, flags)` made by the code at `caller` should look (see
    /// `dlopen_from`).
    ///
    /// # Safety
    /// `filename` is NULL or a NUL-terminated string; `real` is libc's `dlopen`.
    pub unsafe fn path_for_caller(
        filename: *const c_char,
        flags: c_int,
        caller: usize,
        real: unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void,
    ) -> Found {
        if filename.is_null() {
            return Found::AsGiven;
        }
        // SAFETY: per the contract.
        let name = unsafe { CStr::from_ptr(filename) }.to_bytes();
        if name.is_empty() || name.contains(&b'/') {
            return Found::AsGiven;
        }
        let (Some(theirs), Some(ours)) = (object_of(caller), object_of(dlopen_address())) else {
            return Found::AsGiven;
        };
        if theirs == ours {
            return Found::AsGiven;
        }
        // SAFETY: per the contract; RTLD_NOLOAD only finds an object already loaded.
        let loaded = unsafe { real(filename, flags | libc::RTLD_NOLOAD) };
        if !loaded.is_null() {
            return Found::Loaded(loaded);
        }
        // SAFETY: link maps from dladdr1 are valid handles.
        let (their_path, our_path) = unsafe { (search_path(theirs), search_path(ours)) };
        for dir in &their_path {
            let mut path = dir.clone();
            path.push(b'/');
            path.extend_from_slice(name);
            if !loadable(&path) {
                continue;
            }
            if our_path.contains(dir) {
                // Found first where glibc looks for both: as without pyigprof.
                return Found::AsGiven;
            }
            return CString::new(path).map_or(Found::AsGiven, Found::Path);
        }
        Found::AsGiven
    }

    /// An address inside this library.
    fn dlopen_address() -> usize {
        path_for_caller as *const () as usize
    }
}

/// Interposed `dlclose(3)`.
///
/// # Safety
/// As `dlclose(3)`.
#[no_mangle]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    type F = unsafe extern "C" fn(*mut c_void) -> c_int;
    // SAFETY: the next definition is libc's dlclose.
    let real: F = unsafe { std::mem::transmute(REAL_DLCLOSE.get()) };
    let cb = crate::callbacks();
    if let Some(cb) = cb {
        (cb.object_closing)(handle);
    }
    let rc = unsafe { real(handle) };
    if let Some(cb) = cb {
        (cb.objects_removed)();
    }
    rc
}
