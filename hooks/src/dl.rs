//! `dlopen`/`dlclose` interposition, so that the sampler's module list (and with it the
//! unwinder's CFI and the symbolizer) follows the code mapped into the process.
//!
//! `dlclose` tells the sampler *before* the object can be unmapped: the sampler then stops
//! reading the object's unwind tables, waits for samples in flight, and only then is the
//! real `dlclose` run.

use crate::next::Next;
use libc::{c_char, c_int, c_void};

static REAL_DLOPEN: Next = Next::new(c"dlopen");
static REAL_DLCLOSE: Next = Next::new(c"dlclose");

/// Interposed `dlopen(3)`.
///
/// # Safety
/// As `dlopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void {
    type F = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;
    // SAFETY: the next definition is libc's dlopen.
    let real: F = unsafe { std::mem::transmute(REAL_DLOPEN.get()) };
    let handle = unsafe { real(filename, flags) };
    if !handle.is_null() {
        if let Some(cb) = crate::callbacks() {
            (cb.objects_added)();
        }
    }
    handle
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
