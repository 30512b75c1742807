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
    /// `CLOCK_MONOTONIC` when `pthread_create` was called (ns).
    created_ns: u64,
}

std::thread_local! {
    /// When the calling thread's `pthread_create` was called (`CLOCK_MONOTONIC` ns; 0 for a
    /// thread not created through the interposed call).
    static CREATED_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// When the calling thread's creation was asked for (`CLOCK_MONOTONIC` ns, read by the
/// interposed [`pthread_create`] in the creating thread): its life, its wait for a first
/// CPU included, starts there. 0 for the main thread and threads created before the
/// interposition.
pub fn created_ns() -> u64 {
    CREATED_NS.with(|c| c.get())
}

/// `CLOCK_MONOTONIC` now (ns); 0 if it cannot be read.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the struct.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

extern "C" fn trampoline(start: *mut c_void) -> *mut c_void {
    // SAFETY: `start` is the Box leaked by `pthread_create` below, handed over exactly once.
    let Start {
        routine,
        arg,
        created_ns,
    } = *unsafe { Box::from_raw(start.cast::<Start>()) };
    CREATED_NS.with(|c| c.set(created_ns));
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
    // SAFETY: the caller's arguments, as pthread_create(3) takes them.
    unsafe { create_registered(thread, attr, routine, arg) }
}

/// The body of the interposed [`pthread_create`], under a name of its own: the address
/// `pyigprof attach` puts in the GOT slots it rebinds (`crate::got`). The exported name
/// would not do — in a library loaded late, a reference to it from the library's own code
/// binds to the C library's definition, which comes first in the lookup order.
///
/// # Safety
/// As `pthread_create(3)`.
pub unsafe extern "C" fn create_registered(
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
    let start = Box::into_raw(Box::new(Start {
        routine,
        arg,
        created_ns: monotonic_ns(),
    }));
    let rc = unsafe { real(thread, attr, trampoline, start.cast()) };
    if rc != 0 {
        // The thread was not created: the trampoline will never take the box.
        drop(unsafe { Box::from_raw(start) });
    }
    rc
}

/// The calling thread's stack as `[low, high)` addresses: for the main thread from
/// [`main_stack_top`] and the stack's size limit, for any other from
/// `pthread_getattr_np`. `None` when neither can tell. May allocate: never call it from a
/// signal handler.
pub fn current_stack_bounds() -> Option<(u64, u64)> {
    // SAFETY: plain system calls.
    if unsafe { libc::gettid() == libc::getpid() } {
        if let Some(high) = main_stack_top() {
            // SAFETY: getrlimit fills the struct.
            let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
            let size = if unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut limit) } == 0 {
                limit.rlim_cur
            } else {
                8 << 20
            };
            return Some((high.saturating_sub(size).max(0x10000), high));
        }
    }
    // For the main thread glibc would read `/proc/self/maps` (0.1 ms).
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

/// The end of the main thread's stack mapping. Linux's `exec` puts the executable's file
/// name at the very top of the new stack, followed only by a null pointer (`fs/exec.c`:
/// `bprm->p = vma->vm_end - sizeof(void *)`, then `copy_string_kernel(bprm->filename)`),
/// and passes its address as the auxiliary vector's `AT_EXECFN`: the stack ends 8 bytes
/// after that string. `None` when the vector has no `AT_EXECFN` or the end is not a page
/// boundary (not the kernel's layout).
pub fn main_stack_top() -> Option<u64> {
    // SAFETY: getauxval is always callable; AT_EXECFN is a NUL-terminated string.
    let execfn = unsafe { libc::getauxval(libc::AT_EXECFN) };
    if execfn == 0 {
        return None;
    }
    // SAFETY: as above.
    let len = unsafe { libc::strlen(execfn as *const libc::c_char) } as u64;
    let top = execfn + len + 1 + 8;
    top.is_multiple_of(4096).then_some(top)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_main_stack_ends_where_the_kernel_mapped_it() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps
            .lines()
            .find(|l| l.ends_with("[stack]"))
            .expect("a [stack] mapping");
        let (_, end) = line
            .split_whitespace()
            .next()
            .unwrap()
            .split_once('-')
            .unwrap();
        assert_eq!(
            super::main_stack_top(),
            Some(u64::from_str_radix(end, 16).unwrap())
        );
    }
}
