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
    /// The stack the creator asked for, read from its attributes (`None` if glibc would
    /// not say).
    stack: Option<StackRequest>,
}

std::thread_local! {
    /// When the calling thread's `pthread_create` was called (`CLOCK_MONOTONIC` ns; 0 for a
    /// thread not created through the interposed call).
    static CREATED_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The calling thread's stack `[low, high)` as its start found it ([`StackRequest::bounds`]);
    /// (0, 0) for a thread not created through the interposed call.
    static STACK: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// The stack a `pthread_create` caller asked for (read in the creating thread: the
/// attributes may be destroyed as soon as the call returns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackRequest {
    /// The stack's size in bytes (`pthread_attr_getstacksize`: the caller's, or glibc's
    /// default when the caller set none or passed no attributes).
    pub size: u64,
    /// The top of a stack the caller provides itself (`pthread_attr_setstack`), else 0.
    pub user_top: u64,
}

impl StackRequest {
    /// What `attr` (null: the defaults) asks for. Reads the attributes only: no system
    /// call. `None` if glibc will not say.
    ///
    /// # Safety
    /// `attr` is null or points to an initialised `pthread_attr_t`.
    pub unsafe fn of(attr: *const pthread_attr_t) -> Option<StackRequest> {
        // SAFETY: an initialised attribute object (ours is destroyed below); glibc's
        // getters only read it, and take the default size when none was set.
        unsafe {
            let mut own: pthread_attr_t = std::mem::zeroed();
            let attr = if attr.is_null() {
                if libc::pthread_attr_init(&mut own) != 0 {
                    return None;
                }
                &own as *const pthread_attr_t
            } else {
                attr
            };
            let mut size: libc::size_t = 0;
            let rc = libc::pthread_attr_getstacksize(attr, &mut size);
            // glibc: `pthread_attr_getstack` gives (stackaddr - stacksize, stacksize), where
            // stackaddr, the top, is null unless the caller provided the stack; newer
            // versions give a null address then.
            let mut low: *mut c_void = std::ptr::null_mut();
            let mut user_size: libc::size_t = 0;
            let user =
                libc::pthread_attr_getstack(attr, &mut low, &mut user_size) == 0 && !low.is_null();
            if std::ptr::eq(attr, &own) {
                libc::pthread_attr_destroy(&mut own);
            }
            let user_top = if user {
                (low as u64).wrapping_add(user_size as u64)
            } else {
                0
            };
            (rc == 0 && size > 0).then_some(StackRequest {
                size: size as u64,
                user_top,
            })
        }
    }

    /// The calling thread's stack `[low, high)`, for a thread glibc's `pthread_create`
    /// started with this request, without a system call (`pthread_getattr_np` reads the
    /// CPU affinity too: a system call and two allocations at every thread start):
    /// - a stack of the caller's: `[top - size, top)`;
    /// - one glibc allocated (`nptl/allocatestack.c`): a mapping of the guard area then
    ///   `size` bytes, with the thread descriptor (`struct pthread`, whose address
    ///   `pthread_self` returns, about 2.3 KB) at its very end, and the thread's frames and
    ///   static TLS below it. So `high` is `pthread_self()`, above every frame, and `low`,
    ///   the end of the page-aligned guard area, is `pthread_self() - size` rounded up to
    ///   a page, the descriptor being smaller than a page. A stack glibc reuses from an
    ///   ended thread may be larger than asked (up to 4 times): only `size` bytes of it
    ///   are counted, which a thread that keeps within what it asked for never passes.
    ///
    /// `here` is an address in the calling thread's current frame: `None` unless it lies
    /// inside the bounds found (another C library's layout), and then the caller asks
    /// `pthread_getattr_np`.
    pub fn bounds(&self, thread_self: u64, page: u64, here: u64) -> Option<(u64, u64)> {
        let (low, high) = if self.user_top != 0 {
            (self.user_top.checked_sub(self.size)?, self.user_top)
        } else {
            let low = thread_self
                .checked_sub(self.size)?
                .checked_next_multiple_of(page)?;
            (low, thread_self)
        };
        (low < here && here < high).then_some((low, high))
    }

    /// [`StackRequest::bounds`] for the calling thread, started with this request: its
    /// `pthread_self()`, the page size, and an address in this call's frame.
    pub fn bounds_of_calling_thread(&self) -> Option<(u64, u64)> {
        let here = 0u8;
        // SAFETY: pthread_self only reads the thread pointer; sysconf(_SC_PAGESIZE) is
        // glibc's recorded page size.
        let (thread_self, page) = unsafe {
            (
                libc::pthread_self() as u64,
                libc::sysconf(libc::_SC_PAGESIZE) as u64,
            )
        };
        self.bounds(thread_self, page, std::ptr::addr_of!(here) as u64)
    }
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
        stack,
    } = *unsafe { Box::from_raw(start.cast::<Start>()) };
    CREATED_NS.with(|c| c.set(created_ns));
    if let Some(bounds) = stack.and_then(|s| s.bounds_of_calling_thread()) {
        STACK.with(|c| c.set(bounds));
    }
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
        // SAFETY: the caller's attributes, as pthread_create(3) takes them.
        stack: unsafe { StackRequest::of(attr) },
    }));
    let rc = unsafe { real(thread, attr, trampoline, start.cast()) };
    if rc != 0 {
        // The thread was not created: the trampoline will never take the box.
        drop(unsafe { Box::from_raw(start) });
    }
    rc
}

/// The calling thread's stack as `[low, high)` addresses: for a thread started through
/// the interposed [`pthread_create`], as its start found it ([`StackRequest::bounds`]);
/// for the main thread from [`main_stack_top`] and the stack's size limit; for any other
/// from `pthread_getattr_np`. `None` when none can tell. May allocate: never call it from
/// a signal handler.
pub fn current_stack_bounds() -> Option<(u64, u64)> {
    let started = STACK.with(|c| c.get());
    if started.1 != 0 {
        return Some(started);
    }
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
    stack_bounds_from_glibc()
}

/// The calling thread's stack as `pthread_getattr_np` gives it (for a thread other than
/// the main one: its CPU affinity read too, a system call and two allocations). `None`
/// when glibc does not say.
fn stack_bounds_from_glibc() -> Option<(u64, u64)> {
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
    use super::StackRequest;
    use libc::{c_void, pthread_attr_t};

    /// What a thread created with `attr` finds: (the bounds [`StackRequest::bounds`] gives,
    /// those `pthread_getattr_np` gives).
    fn bounds_seen_by_a_thread(attr: *const pthread_attr_t) -> (Option<(u64, u64)>, (u64, u64)) {
        struct Seen {
            request: Option<StackRequest>,
            ours: Option<(u64, u64)>,
            glibc: (u64, u64),
        }
        extern "C" fn body(arg: *mut c_void) -> *mut c_void {
            // SAFETY: `arg` is the Seen below, alive until the join.
            let seen = unsafe { &mut *arg.cast::<Seen>() };
            seen.ours = seen.request.and_then(|r| r.bounds_of_calling_thread());
            seen.glibc = super::stack_bounds_from_glibc().expect("pthread_getattr_np's bounds");
            std::ptr::null_mut()
        }
        let mut seen = Seen {
            // SAFETY: null or an initialised attribute object.
            request: unsafe { StackRequest::of(attr) },
            ours: None,
            glibc: (0, 0),
        };
        // SAFETY: creating and joining a thread whose argument outlives it.
        unsafe {
            let mut thread: libc::pthread_t = std::mem::zeroed();
            assert_eq!(
                libc::pthread_create(&mut thread, attr, body, std::ptr::addr_of_mut!(seen).cast()),
                0
            );
            assert_eq!(libc::pthread_join(thread, std::ptr::null_mut()), 0);
        }
        (seen.ours, seen.glibc)
    }

    #[test]
    fn a_new_threads_stack_is_found_without_asking_glibc() {
        // The defaults, sizes in and out of whole pages, no guard page, a larger guard.
        let mut exact = 0;
        for (size, guard) in [
            (None, None),
            (Some(256 << 10), None),
            (Some(100_000), None),
            (Some(65_536 + 40), Some(0)),
            (Some(1 << 20), Some(3 * 4096)),
        ] {
            // SAFETY: an attribute object initialised, set and destroyed here.
            let (ours, glibc) = unsafe {
                let mut attr: pthread_attr_t = std::mem::zeroed();
                libc::pthread_attr_init(&mut attr);
                if let Some(size) = size {
                    assert_eq!(libc::pthread_attr_setstacksize(&mut attr, size), 0);
                }
                if let Some(guard) = guard {
                    assert_eq!(libc::pthread_attr_setguardsize(&mut attr, guard), 0);
                }
                let seen = bounds_seen_by_a_thread(&attr);
                libc::pthread_attr_destroy(&mut attr);
                seen
            };
            let (low, high) = ours.unwrap_or_else(|| panic!("no bounds for {size:?}/{guard:?}"));
            // The top is the thread descriptor's, within the stack's last page (glibc's top
            // includes the descriptor itself).
            assert!(
                high < glibc.1 && glibc.1 - high < 4096,
                "{size:?}/{guard:?}: {high:#x} {glibc:x?}"
            );
            // The same lowest address, unless glibc reused a larger stack of an ended thread
            // (the test harness's, another case's): then the part asked for.
            if glibc.1 - glibc.0 < (high - low) + 4096 {
                assert_eq!(low, glibc.0, "{size:?}/{guard:?}: low");
                exact += 1;
            } else {
                assert!(low > glibc.0, "{size:?}/{guard:?}: {low:#x} {glibc:x?}");
            }
        }
        assert!(exact >= 3, "only {exact} of 5 stacks were new");
        // No attributes at all: the defaults.
        let (ours, glibc) = bounds_seen_by_a_thread(std::ptr::null());
        assert_eq!(ours.map(|b| b.0), Some(glibc.0));
    }

    #[test]
    fn a_stack_the_caller_provides_is_taken_as_given() {
        let mut stack = vec![0u8; 512 << 10];
        let low = (stack.as_mut_ptr() as u64).next_multiple_of(64);
        let size = (512 << 10) - 4096;
        // SAFETY: an attribute object initialised, set and destroyed here; the stack
        // outlives the thread.
        let (ours, glibc) = unsafe {
            let mut attr: pthread_attr_t = std::mem::zeroed();
            libc::pthread_attr_init(&mut attr);
            assert_eq!(
                libc::pthread_attr_setstack(&mut attr, low as *mut c_void, size),
                0
            );
            let seen = bounds_seen_by_a_thread(&attr);
            libc::pthread_attr_destroy(&mut attr);
            seen
        };
        assert_eq!(ours, Some((low, low + size as u64)));
        assert_eq!(glibc, (low, low + size as u64));
    }

    #[test]
    fn bounds_that_do_not_hold_the_thread_are_refused() {
        let request = StackRequest {
            size: 1 << 20,
            user_top: 0,
        };
        let thread_self = 0x7f00_0010_06c0;
        assert_eq!(
            request.bounds(thread_self, 4096, thread_self - 100),
            Some((0x7f00_0000_1000, thread_self))
        );
        // An address above the descriptor or below the guard: not this layout.
        assert_eq!(request.bounds(thread_self, 4096, thread_self + 100), None);
        assert_eq!(request.bounds(thread_self, 4096, 0x7f00_0000_0800), None);
        // A size larger than the address: no wrap-around.
        assert_eq!(
            StackRequest {
                size: u64::MAX,
                user_top: 0
            }
            .bounds(thread_self, 4096, 1),
            None
        );
    }
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
