//! Resolving the definition that an interposed symbol hides (`dlsym(RTLD_NEXT, name)`).

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A lazily resolved pointer to the next definition of a C symbol.
pub struct Next {
    name: &'static CStr,
    addr: AtomicUsize,
}

impl Next {
    pub const fn new(name: &'static CStr) -> Self {
        Next {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    /// The address of the next definition. Aborts the process with a message when there is
    /// none: an interposed libc function without a real one behind it cannot be forwarded.
    pub fn get(&self) -> usize {
        let cached = self.addr.load(Ordering::Relaxed);
        if cached != 0 {
            return cached;
        }
        // SAFETY: dlsym with a valid NUL-terminated name.
        let found = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
        if found == 0 {
            let msg = b"pyigprof: cannot find the next definition of an interposed function\n";
            // SAFETY: writing a static buffer to stderr.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::abort();
            }
        }
        self.addr.store(found, Ordering::Relaxed);
        found
    }
}
