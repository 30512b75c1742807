//! `pthread_create` interposition: each new thread tells the sampler it exists (so the
//! sampler can record its stack bounds and give it an unwinding cache) before running the
//! start routine it was created with.

use crate::next::Next;
use libc::{c_int, c_void, pthread_attr_t, pthread_t};

static REAL_PTHREAD_CREATE: Next = Next::new(c"pthread_create");

type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;
type PthreadCreate =
    unsafe extern "C" fn(*mut pthread_t, *const pthread_attr_t, StartRoutine, *mut c_void) -> c_int;

struct Start {
    routine: StartRoutine,
    arg: *mut c_void,
}

extern "C" fn trampoline(start: *mut c_void) -> *mut c_void {
    // SAFETY: `start` is the Box leaked by `pthread_create` below, handed over exactly once.
    let Start { routine, arg } = *unsafe { Box::from_raw(start.cast::<Start>()) };
    if let Some(cb) = crate::callbacks() {
        (cb.thread_started)();
    }
    routine(arg)
}

/// Interposed `pthread_create(3)`: same contract; the thread runs `routine(arg)` after
/// registering with the sampler.
///
/// # Safety
/// As `pthread_create(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut pthread_t,
    attr: *const pthread_attr_t,
    routine: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: the next definition is libc's pthread_create, with this exact signature.
    let real: PthreadCreate = unsafe { std::mem::transmute(REAL_PTHREAD_CREATE.get()) };
    if crate::callbacks().is_none() {
        return unsafe { real(thread, attr, routine, arg) };
    }
    let start = Box::into_raw(Box::new(Start { routine, arg }));
    let rc = unsafe { real(thread, attr, trampoline, start.cast()) };
    if rc != 0 {
        // The thread was not created: the trampoline will never take the box.
        drop(unsafe { Box::from_raw(start) });
    }
    rc
}

/// The calling thread's stack as `[low, high)` addresses, from `pthread_getattr_np`.
/// `None` when the C library cannot tell. May allocate (for the main thread glibc reads
/// `/proc/self/maps`): never call it from a signal handler.
pub fn current_stack_bounds() -> Option<(u64, u64)> {
    // SAFETY: plain libc calls on a zeroed attribute object that is destroyed afterwards.
    unsafe {
        let mut attr: pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 || addr.is_null() || size == 0 {
            return None;
        }
        Some((addr as u64, addr as u64 + size as u64))
    }
}
