//! Everything pyigprof interposes on in the profiled process.
//!
//! The preloaded library (`libpyigprof.so`, crate `pyigprof-preload`) owns the sampler; this
//! crate owns the ways into the process:
//!
//! - [`cpython`]: attaching to the CPython runtime through an audit hook registered from the
//!   library constructor (facts: `shared/design/cpython.md` §4);
//! - [`threads`]: `pthread_create`, so that every thread registers its stack bounds and
//!   unwinding cache before it runs user code;
//! - [`dl`]: `dlopen`/`dlclose`, so that the unwinder's module list follows the code that
//!   is mapped;
//! - [`process`]: `_exit`, `exec*`, `kill`/`raise` of the process itself, so that the
//!   profile is written before the image ends or is replaced;
//! - [`signals`]: `sigaction`/`signal`, so that pyigprof's own handlers stay invisible to
//!   the program and give way when it installs its own;
//! - [`got`]: for `pyigprof attach`, which loads the library into a running process where
//!   interposition does not apply, `pthread_create` rebound in the objects loaded before;
//! - [`interruptions`]: the program's handlers without `SA_RESTART` behind a trampoline, so
//!   that a system call they interrupt returns `EINTR` even when a sample interrupted it
//!   too.
//!
//! The interposed C symbols are exported from the cdylib because they are `#[no_mangle]`.
//! They forward to the next definition (`dlsym(RTLD_NEXT, …)`) and call back into the sampler
//! through the function pointers given to [`install`]. Until [`install`] is called (and in a
//! process that is not being profiled) they only forward.

pub mod cpython;
pub mod dl;
pub mod got;
pub mod interruptions;
pub mod next;
pub mod process;
pub mod signals;
pub mod threads;

use std::sync::atomic::{AtomicPtr, Ordering};

/// What the sampler wants to hear about. Every callback runs outside any signal handler, in
/// the thread named in its description, and may allocate and lock.
#[derive(Clone, Copy)]
pub struct Callbacks {
    /// A new thread is about to run its start routine (runs in that thread).
    pub thread_started: fn(),
    /// `dlopen` returned a handle: the set of mapped objects may have grown.
    pub objects_added: fn(),
    /// `dlclose` is about to run on `handle`: stop reading the object's memory first.
    pub object_closing: fn(handle: *mut libc::c_void),
    /// `dlclose` has run: the set of mapped objects may have shrunk.
    pub objects_removed: fn(),
    /// `_exit`/`_Exit` is about to end the process (atexit handlers will not run).
    pub process_ending: fn(),
    /// An `exec` function is about to replace the process image.
    pub before_exec: fn(),
    /// That `exec` failed: the process goes on.
    pub exec_failed: fn(),
    /// The process is sending itself `signal` (`kill(getpid(), …)`, `raise`). May run inside
    /// a signal handler: must be async-signal-safe.
    pub signalling_self: fn(signal: libc::c_int),
}

static CALLBACKS: AtomicPtr<Callbacks> = AtomicPtr::new(std::ptr::null_mut());

/// Starts delivering events to `callbacks`. Called once, from the library constructor.
pub fn install(callbacks: Callbacks) {
    let leaked = Box::into_raw(Box::new(callbacks));
    CALLBACKS.store(leaked, Ordering::Release);
    interruptions::track_forks();
}

/// The installed callbacks, if any.
pub(crate) fn callbacks() -> Option<&'static Callbacks> {
    let ptr = CALLBACKS.load(Ordering::Acquire);
    // SAFETY: set once from a leaked Box and never freed.
    unsafe { ptr.as_ref() }
}
