//! Resolving the definition that an interposed symbol hides (`dlsym(RTLD_NEXT, name)`,
//! or `dlvsym` for one version of it).

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A lazily resolved pointer to the next definition of a C symbol.
pub struct Next {
    name: &'static CStr,
    /// The symbol version wanted (`dlvsym`); `None`: the default one (`dlsym`).
    version: Option<&'static CStr>,
    addr: AtomicUsize,
}

impl Next {
    pub const fn new(name: &'static CStr) -> Self {
        Next {
            name,
            version: None,
            addr: AtomicUsize::new(0),
        }
    }

    /// The next definition of version `version` of `name`: for a symbol the C library has
    /// in two versions, where `dlsym` may give the old one (x86-64 glibc's
    /// `pthread_cond_wait` and `pthread_cond_timedwait`: `GLIBC_2.2.5`, LinuxThreads'
    /// layout, and `GLIBC_2.3.2`, what programs link to).
    pub const fn versioned(name: &'static CStr, version: &'static CStr) -> Self {
        Next {
            name,
            version: Some(version),
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
        // SAFETY: dlsym or dlvsym with valid NUL-terminated names.
        let found = unsafe {
            match self.version {
                None => libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()),
                Some(v) => libc::dlvsym(libc::RTLD_NEXT, self.name.as_ptr(), v.as_ptr()),
            }
        } as usize;
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
