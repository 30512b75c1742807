//! The lock profiler's hooks of the C library's semaphore, mutex, read-write lock and
//! condition variable functions, installed only when the lock profiler runs: [`install`]
//! writes them into the import tables (the GOT entries behind the PLT, `JUMP_SLOT` and
//! `GLOB_DAT` relocations; kubo's plthook, through the `plthook` crate) of every object
//! loaded — the executable (a static Python's interpreter), libpython, C/C++ extensions —
//! and of each object `dlopen` adds later; never into the C library, the loader or this
//! library. A program profiled without the lock profiler runs the C library's functions
//! untouched: defining them in this library instead, as its other hooks are, cost every
//! `pthread_mutex_lock` and `unlock` 1.7 ns (a C loop of 20 M lock/unlock pairs, 125 ms
//! plain, 194 ms with the preload's default CPU profile). Each hook forwards to the C
//! library's definition and, while the lock profiler runs ([`locks::enabled`]), times it
//! for [`crate::sources::locks`]:
//!
//! - a wait: the time a call that acquires spends before it returns, when the lock was
//!   not free (`sem_wait`, `sem_timedwait`, `sem_clockwait`; `pthread_mutex_lock` and the
//!   read-write locks' after their `try` form failed);
//! - a hold: from a successful acquisition (the `try` forms included) to the same thread's
//!   release (`sem_post`, `pthread_mutex_unlock`, `pthread_rwlock_unlock`); a condition
//!   variable's wait releases its mutex and takes it back, so it ends a hold and starts
//!   another;
//! - `sem_init` names a Python lock where it is created, and `sem_destroy`,
//!   `pthread_mutex_destroy` and `pthread_rwlock_destroy` forget a lock.
//!
//! The GIL's mutex and condition variables (3.7–3.12; [`locks::is_gil`]) are passed
//! through: waiting for the GIL is wall mode's `<waiting: GIL>`.

use crate::capture::unwind::modules;
use crate::sources::locks::{self, Kind};
use libc::{
    c_int, c_uint, clockid_t, pthread_cond_t, pthread_mutex_t, pthread_rwlock_t, sem_t, timespec,
};
use pyigprof_hooks::next::Next;
use std::ffi::{c_void, CStr};
use std::sync::Mutex;

/// The hooks, by the name of the C library's function each stands for.
fn hooks() -> [(&'static CStr, *const c_void); 20] {
    [
        (c"sem_init", sem_init as *const c_void),
        (c"sem_destroy", sem_destroy as *const c_void),
        (c"sem_wait", sem_wait as *const c_void),
        (c"sem_timedwait", sem_timedwait as *const c_void),
        (c"sem_clockwait", sem_clockwait as *const c_void),
        (c"sem_trywait", sem_trywait as *const c_void),
        (c"sem_post", sem_post as *const c_void),
        (c"pthread_mutex_lock", pthread_mutex_lock as *const c_void),
        (
            c"pthread_mutex_trylock",
            pthread_mutex_trylock as *const c_void,
        ),
        (
            c"pthread_mutex_unlock",
            pthread_mutex_unlock as *const c_void,
        ),
        (
            c"pthread_mutex_destroy",
            pthread_mutex_destroy as *const c_void,
        ),
        (
            c"pthread_rwlock_rdlock",
            pthread_rwlock_rdlock as *const c_void,
        ),
        (
            c"pthread_rwlock_wrlock",
            pthread_rwlock_wrlock as *const c_void,
        ),
        (
            c"pthread_rwlock_tryrdlock",
            pthread_rwlock_tryrdlock as *const c_void,
        ),
        (
            c"pthread_rwlock_trywrlock",
            pthread_rwlock_trywrlock as *const c_void,
        ),
        (
            c"pthread_rwlock_unlock",
            pthread_rwlock_unlock as *const c_void,
        ),
        (
            c"pthread_rwlock_destroy",
            pthread_rwlock_destroy as *const c_void,
        ),
        (c"pthread_cond_wait", pthread_cond_wait as *const c_void),
        (
            c"pthread_cond_timedwait",
            pthread_cond_timedwait as *const c_void,
        ),
        (
            c"pthread_cond_clockwait",
            pthread_cond_clockwait as *const c_void,
        ),
    ]
}

/// Objects whose import tables [`install`] has seen, by load bias and start.
static SEEN: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// The list of objects whose lock calls are wrapped, for `fork` ([`crate::fork_locks`]): a
/// thread of the program that has just loaded an object holds it while it wraps that
/// object's calls.
pub(crate) fn fork_lock() -> &'static Mutex<Vec<(u64, u64)>> {
    &SEEN
}

/// Whether the object at `path` keeps the C library's functions: the C library itself and
/// the loader (whose own calls do not go through their import tables), the old
/// `libpthread`, and pyigprof's libraries (whose threads' locks are not the program's).
fn left_alone(path: &std::path::Path) -> bool {
    let name = path.file_name().map_or(&b""[..], |n| {
        use std::os::unix::ffi::OsStrExt;
        n.as_bytes()
    });
    [
        &b"libc.so"[..],
        b"ld-linux",
        b"libpthread.so",
        b"libpyigprof",
        b"linux-vdso",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

/// Writes the hooks into the import tables of every loaded object not seen yet (see the
/// module's documentation): at start-up when the lock profiler is on, and after each
/// `dlopen`. An object that imports none of the functions is left as it is. Not from a
/// signal handler (allocates, may `mprotect`). A call made while one runs in the same
/// thread returns at once.
pub fn install() {
    thread_local! {
        static INSTALLING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if INSTALLING.with(|i| i.replace(true)) {
        return;
    }
    install_into_new_objects();
    INSTALLING.with(|i| i.set(false));
}

fn install_into_new_objects() {
    let Some(snapshot) = modules::current() else {
        return;
    };
    let own = install as *const () as u64;
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    for object in &snapshot.objects {
        let key = (object.bias, object.range.0);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        if object.in_memory
            || left_alone(&object.path)
            || (object.range.0..object.range.1).contains(&own)
        {
            continue;
        }
        let mut file: *mut c_void = std::ptr::null_mut();
        // SAFETY: an address inside a loaded object; plthook finds its link map with
        // `dladdr1`, reads its dynamic section and writes its GOT entries (making a
        // read-only page writable for the write). Not `plthook_open` by name: that is a
        // `dlopen(RTLD_NOLOAD)`, which, called from an object's constructor (a library
        // that `dlopen`s in its initializer, as libGLdispatch does), runs the
        // constructors of objects loaded with it before their dependencies' finished.
        unsafe {
            if plthook_open_by_address(&mut file, object.range.0 as *mut c_void) != 0 {
                continue;
            }
            for (name, hook) in hooks() {
                plthook_replace(
                    file,
                    name.as_ptr(),
                    hook as *mut c_void,
                    std::ptr::null_mut(),
                );
            }
            plthook_close(file);
        }
    }
}

// kubo's plthook (C, built and linked by the `plthook` crate, whose Rust API opens objects
// only by name or handle): `plthook.h`.
use plthook as _;
extern "C" {
    fn plthook_open_by_address(out: *mut *mut c_void, address: *mut c_void) -> libc::c_int;
    fn plthook_replace(
        plthook: *mut c_void,
        name: *const libc::c_char,
        address: *mut c_void,
        old: *mut *mut c_void,
    ) -> libc::c_int;
    fn plthook_close(plthook: *mut c_void);
}

static NEXT_SEM_INIT: Next = Next::new(c"sem_init");
static NEXT_SEM_DESTROY: Next = Next::new(c"sem_destroy");
static NEXT_SEM_WAIT: Next = Next::new(c"sem_wait");
static NEXT_SEM_TIMEDWAIT: Next = Next::new(c"sem_timedwait");
static NEXT_SEM_CLOCKWAIT: Next = Next::new(c"sem_clockwait");
static NEXT_SEM_TRYWAIT: Next = Next::new(c"sem_trywait");
static NEXT_SEM_POST: Next = Next::new(c"sem_post");
static NEXT_MUTEX_LOCK: Next = Next::new(c"pthread_mutex_lock");
static NEXT_MUTEX_TRYLOCK: Next = Next::new(c"pthread_mutex_trylock");
static NEXT_MUTEX_UNLOCK: Next = Next::new(c"pthread_mutex_unlock");
static NEXT_MUTEX_DESTROY: Next = Next::new(c"pthread_mutex_destroy");
static NEXT_RWLOCK_RDLOCK: Next = Next::new(c"pthread_rwlock_rdlock");
static NEXT_RWLOCK_WRLOCK: Next = Next::new(c"pthread_rwlock_wrlock");
static NEXT_RWLOCK_TRYRDLOCK: Next = Next::new(c"pthread_rwlock_tryrdlock");
static NEXT_RWLOCK_TRYWRLOCK: Next = Next::new(c"pthread_rwlock_trywrlock");
static NEXT_RWLOCK_UNLOCK: Next = Next::new(c"pthread_rwlock_unlock");
static NEXT_RWLOCK_DESTROY: Next = Next::new(c"pthread_rwlock_destroy");
static NEXT_COND_CLOCKWAIT: Next = Next::new(c"pthread_cond_clockwait");

/// `pthread_cond_wait` and `pthread_cond_timedwait` of the version programs link to
/// ([`Next::versioned`]).
static NEXT_COND_WAIT: Next = Next::versioned(c"pthread_cond_wait", c"GLIBC_2.3.2");
static NEXT_COND_TIMEDWAIT: Next = Next::versioned(c"pthread_cond_timedwait", c"GLIBC_2.3.2");

/// The C library's function at `next`, as `F`.
///
/// # Safety
/// `next` must be a function of type `F`.
#[inline(always)]
unsafe fn real<F: Copy>(next: usize) -> F {
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
    // SAFETY: as the caller says.
    unsafe { std::mem::transmute_copy::<usize, F>(&next) }
}

/// Calls `acquire` (the C library's blocking acquisition at `next`), timed as a wait for
/// the lock at `lock`, and notes the acquisition when `acquire` says it succeeded.
#[inline(always)]
fn timed_acquire(
    next: usize,
    lock: u64,
    kind: Kind,
    acquire: impl FnOnce() -> c_int,
    succeeded: impl Fn(c_int) -> bool,
) -> c_int {
    let start = locks::now_ns();
    let rc = acquire();
    locks::waited(locks::now_ns().saturating_sub(start), next, lock);
    if succeeded(rc) {
        locks::acquired(lock, kind);
    }
    rc
}

/// Interposed `sem_init(3)`: the C library's; while the lock profiler runs, a semaphore
/// made by the interpreter's lock allocator is named by the Python frame creating it. The
/// caller's address (the return address, at the stack pointer on entry) is passed to
/// [`sem_init_from`] as a fourth argument.
///
/// # Safety
/// As `sem_init(3)`.
#[unsafe(naked)]
unsafe extern "C" fn sem_init(sem: *mut sem_t, pshared: c_int, value: c_uint) -> c_int {
    std::arch::naked_asm!("mov rcx, [rsp]", "jmp {target}", target = sym sem_init_from)
}

/// [`sem_init`] with its caller's return address.
unsafe extern "C" fn sem_init_from(
    sem: *mut sem_t,
    pshared: c_int,
    value: c_uint,
    caller: u64,
) -> c_int {
    type F = unsafe extern "C" fn(*mut sem_t, c_int, c_uint) -> c_int;
    // SAFETY: the C library's sem_init, with this signature.
    let rc = unsafe { real::<F>(NEXT_SEM_INIT.get())(sem, pshared, value) };
    if rc == 0 && locks::enabled() {
        locks::created(sem as u64, caller);
    }
    rc
}

/// Interposed `sem_destroy(3)`.
///
/// # Safety
/// As `sem_destroy(3)`.
unsafe extern "C" fn sem_destroy(sem: *mut sem_t) -> c_int {
    type F = unsafe extern "C" fn(*mut sem_t) -> c_int;
    if locks::enabled() {
        locks::destroyed(sem as u64);
    }
    // SAFETY: the C library's sem_destroy, with this signature.
    unsafe { real::<F>(NEXT_SEM_DESTROY.get())(sem) }
}

/// Interposed `sem_wait(3)`: timed as a wait.
///
/// # Safety
/// As `sem_wait(3)`.
unsafe extern "C" fn sem_wait(sem: *mut sem_t) -> c_int {
    type F = unsafe extern "C" fn(*mut sem_t) -> c_int;
    let next = NEXT_SEM_WAIT.get();
    // SAFETY: the C library's sem_wait, with this signature.
    let f = unsafe { real::<F>(next) };
    if !locks::enabled() {
        return unsafe { f(sem) };
    }
    timed_acquire(
        next,
        sem as u64,
        Kind::Semaphore,
        || unsafe { f(sem) },
        |rc| rc == 0,
    )
}

/// Interposed `sem_timedwait(3)`: as [`sem_wait`].
///
/// # Safety
/// As `sem_timedwait(3)`.
unsafe extern "C" fn sem_timedwait(sem: *mut sem_t, abstime: *const timespec) -> c_int {
    type F = unsafe extern "C" fn(*mut sem_t, *const timespec) -> c_int;
    let next = NEXT_SEM_TIMEDWAIT.get();
    // SAFETY: the C library's sem_timedwait, with this signature.
    let f = unsafe { real::<F>(next) };
    if !locks::enabled() {
        return unsafe { f(sem, abstime) };
    }
    timed_acquire(
        next,
        sem as u64,
        Kind::Semaphore,
        || unsafe { f(sem, abstime) },
        |rc| rc == 0,
    )
}

/// Interposed `sem_clockwait(3)` (glibc 2.30+; CPython 3.10+ waits with it): as
/// [`sem_wait`].
///
/// # Safety
/// As `sem_clockwait(3)`.
unsafe extern "C" fn sem_clockwait(
    sem: *mut sem_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    type F = unsafe extern "C" fn(*mut sem_t, clockid_t, *const timespec) -> c_int;
    let next = NEXT_SEM_CLOCKWAIT.get();
    // SAFETY: the C library's sem_clockwait, with this signature.
    let f = unsafe { real::<F>(next) };
    if !locks::enabled() {
        return unsafe { f(sem, clock, abstime) };
    }
    timed_acquire(
        next,
        sem as u64,
        Kind::Semaphore,
        || unsafe { f(sem, clock, abstime) },
        |rc| rc == 0,
    )
}

/// Interposed `sem_trywait(3)`: a success starts a hold (CPython's uncontended acquire).
///
/// # Safety
/// As `sem_trywait(3)`.
unsafe extern "C" fn sem_trywait(sem: *mut sem_t) -> c_int {
    type F = unsafe extern "C" fn(*mut sem_t) -> c_int;
    // SAFETY: the C library's sem_trywait, with this signature.
    let rc = unsafe { real::<F>(NEXT_SEM_TRYWAIT.get())(sem) };
    if rc == 0 && locks::enabled() {
        locks::acquired(sem as u64, Kind::Semaphore);
    }
    rc
}

/// Interposed `sem_post(3)`: ends the calling thread's hold (async-signal-safe as the C
/// library's: a post from a signal handler that interrupted the profiler's work in its
/// thread is passed through).
///
/// # Safety
/// As `sem_post(3)`.
unsafe extern "C" fn sem_post(sem: *mut sem_t) -> c_int {
    type F = unsafe extern "C" fn(*mut sem_t) -> c_int;
    let next = NEXT_SEM_POST.get();
    if locks::enabled() {
        locks::released(sem as u64, next);
    }
    // SAFETY: the C library's sem_post, with this signature.
    unsafe { real::<F>(next)(sem) }
}

/// Interposed `pthread_mutex_lock(3)`: tried first; when the mutex is taken, the blocking
/// call is timed as a wait.
///
/// # Safety
/// As `pthread_mutex_lock(3)`.
unsafe extern "C" fn pthread_mutex_lock(mutex: *mut pthread_mutex_t) -> c_int {
    type F = unsafe extern "C" fn(*mut pthread_mutex_t) -> c_int;
    let next = NEXT_MUTEX_LOCK.get();
    // SAFETY: the C library's pthread_mutex_lock, with this signature.
    let lock = unsafe { real::<F>(next) };
    if !locks::enabled() || locks::is_gil(mutex as u64) {
        return unsafe { lock(mutex) };
    }
    // SAFETY: the C library's pthread_mutex_trylock, with this signature.
    let rc = unsafe { real::<F>(NEXT_MUTEX_TRYLOCK.get())(mutex) };
    if rc == 0 || rc == libc::EOWNERDEAD {
        locks::acquired(mutex as u64, Kind::Mutex);
        return rc;
    }
    timed_acquire(
        next,
        mutex as u64,
        Kind::Mutex,
        || unsafe { lock(mutex) },
        |rc| rc == 0 || rc == libc::EOWNERDEAD,
    )
}

/// Interposed `pthread_mutex_trylock(3)`: a success starts a hold.
///
/// # Safety
/// As `pthread_mutex_trylock(3)`.
unsafe extern "C" fn pthread_mutex_trylock(mutex: *mut pthread_mutex_t) -> c_int {
    type F = unsafe extern "C" fn(*mut pthread_mutex_t) -> c_int;
    // SAFETY: the C library's pthread_mutex_trylock, with this signature.
    let rc = unsafe { real::<F>(NEXT_MUTEX_TRYLOCK.get())(mutex) };
    if (rc == 0 || rc == libc::EOWNERDEAD) && locks::enabled() && !locks::is_gil(mutex as u64) {
        locks::acquired(mutex as u64, Kind::Mutex);
    }
    rc
}

/// Interposed `pthread_mutex_unlock(3)`: ends the calling thread's hold.
///
/// # Safety
/// As `pthread_mutex_unlock(3)`.
unsafe extern "C" fn pthread_mutex_unlock(mutex: *mut pthread_mutex_t) -> c_int {
    type F = unsafe extern "C" fn(*mut pthread_mutex_t) -> c_int;
    let next = NEXT_MUTEX_UNLOCK.get();
    if locks::enabled() && !locks::is_gil(mutex as u64) {
        locks::released(mutex as u64, next);
    }
    // SAFETY: the C library's pthread_mutex_unlock, with this signature.
    unsafe { real::<F>(next)(mutex) }
}

/// Interposed `pthread_mutex_destroy(3)`.
///
/// # Safety
/// As `pthread_mutex_destroy(3)`.
unsafe extern "C" fn pthread_mutex_destroy(mutex: *mut pthread_mutex_t) -> c_int {
    type F = unsafe extern "C" fn(*mut pthread_mutex_t) -> c_int;
    if locks::enabled() {
        locks::destroyed(mutex as u64);
    }
    // SAFETY: the C library's pthread_mutex_destroy, with this signature.
    unsafe { real::<F>(NEXT_MUTEX_DESTROY.get())(mutex) }
}

/// A read-write lock's blocking acquisition (`rdlock`/`wrlock` at `next`), tried first with
/// its `try` form at `try_next`.
fn rwlock_acquire(rwlock: *mut pthread_rwlock_t, next: usize, try_next: usize) -> c_int {
    type F = unsafe extern "C" fn(*mut pthread_rwlock_t) -> c_int;
    // SAFETY: the C library's functions at `next` and `try_next` have this signature.
    let (lock, try_lock) = unsafe { (real::<F>(next), real::<F>(try_next)) };
    if !locks::enabled() {
        return unsafe { lock(rwlock) };
    }
    let rc = unsafe { try_lock(rwlock) };
    if rc == 0 {
        locks::acquired(rwlock as u64, Kind::Mutex);
        return rc;
    }
    timed_acquire(
        next,
        rwlock as u64,
        Kind::Mutex,
        || unsafe { lock(rwlock) },
        |rc| rc == 0,
    )
}

/// A read-write lock's `try` acquisition at `next`: a success starts a hold.
fn rwlock_try(rwlock: *mut pthread_rwlock_t, next: usize) -> c_int {
    type F = unsafe extern "C" fn(*mut pthread_rwlock_t) -> c_int;
    // SAFETY: the C library's function at `next` has this signature.
    let rc = unsafe { real::<F>(next)(rwlock) };
    if rc == 0 && locks::enabled() {
        locks::acquired(rwlock as u64, Kind::Mutex);
    }
    rc
}

/// Interposed `pthread_rwlock_rdlock(3)`: as [`pthread_mutex_lock`].
///
/// # Safety
/// As `pthread_rwlock_rdlock(3)`.
unsafe extern "C" fn pthread_rwlock_rdlock(rwlock: *mut pthread_rwlock_t) -> c_int {
    rwlock_acquire(
        rwlock,
        NEXT_RWLOCK_RDLOCK.get(),
        NEXT_RWLOCK_TRYRDLOCK.get(),
    )
}

/// Interposed `pthread_rwlock_wrlock(3)`: as [`pthread_mutex_lock`].
///
/// # Safety
/// As `pthread_rwlock_wrlock(3)`.
unsafe extern "C" fn pthread_rwlock_wrlock(rwlock: *mut pthread_rwlock_t) -> c_int {
    rwlock_acquire(
        rwlock,
        NEXT_RWLOCK_WRLOCK.get(),
        NEXT_RWLOCK_TRYWRLOCK.get(),
    )
}

/// Interposed `pthread_rwlock_tryrdlock(3)`: a success starts a hold.
///
/// # Safety
/// As `pthread_rwlock_tryrdlock(3)`.
unsafe extern "C" fn pthread_rwlock_tryrdlock(rwlock: *mut pthread_rwlock_t) -> c_int {
    rwlock_try(rwlock, NEXT_RWLOCK_TRYRDLOCK.get())
}

/// Interposed `pthread_rwlock_trywrlock(3)`: a success starts a hold.
///
/// # Safety
/// As `pthread_rwlock_trywrlock(3)`.
unsafe extern "C" fn pthread_rwlock_trywrlock(rwlock: *mut pthread_rwlock_t) -> c_int {
    rwlock_try(rwlock, NEXT_RWLOCK_TRYWRLOCK.get())
}

/// Interposed `pthread_rwlock_unlock(3)`: ends the calling thread's hold.
///
/// # Safety
/// As `pthread_rwlock_unlock(3)`.
unsafe extern "C" fn pthread_rwlock_unlock(rwlock: *mut pthread_rwlock_t) -> c_int {
    type F = unsafe extern "C" fn(*mut pthread_rwlock_t) -> c_int;
    let next = NEXT_RWLOCK_UNLOCK.get();
    if locks::enabled() {
        locks::released(rwlock as u64, next);
    }
    // SAFETY: the C library's pthread_rwlock_unlock, with this signature.
    unsafe { real::<F>(next)(rwlock) }
}

/// Interposed `pthread_rwlock_destroy(3)`.
///
/// # Safety
/// As `pthread_rwlock_destroy(3)`.
unsafe extern "C" fn pthread_rwlock_destroy(rwlock: *mut pthread_rwlock_t) -> c_int {
    type F = unsafe extern "C" fn(*mut pthread_rwlock_t) -> c_int;
    if locks::enabled() {
        locks::destroyed(rwlock as u64);
    }
    // SAFETY: the C library's pthread_rwlock_destroy, with this signature.
    unsafe { real::<F>(NEXT_RWLOCK_DESTROY.get())(rwlock) }
}

/// A condition variable's wait (`wait`, run by the caller): it releases `mutex` and takes
/// it back, so the thread's hold of `mutex` ends (counted, at the wait's call stack) and
/// another starts when it returns. The wait itself is neither a lock wait nor a hold
/// (wall mode has it). The GIL's are passed through.
fn condition_wait(mutex: *mut pthread_mutex_t, next: usize, wait: impl FnOnce() -> c_int) -> c_int {
    if !locks::enabled() || locks::is_gil(mutex as u64) {
        return wait();
    }
    locks::released(mutex as u64, next);
    let rc = wait();
    locks::acquired(mutex as u64, Kind::Mutex);
    rc
}

/// Interposed `pthread_cond_wait(3)` (the `GLIBC_2.3.2` version).
///
/// # Safety
/// As `pthread_cond_wait(3)`.
unsafe extern "C" fn pthread_cond_wait(
    cond: *mut pthread_cond_t,
    mutex: *mut pthread_mutex_t,
) -> c_int {
    type F = unsafe extern "C" fn(*mut pthread_cond_t, *mut pthread_mutex_t) -> c_int;
    let next = NEXT_COND_WAIT.get();
    // SAFETY: the C library's pthread_cond_wait, with this signature.
    let f = unsafe { real::<F>(next) };
    condition_wait(mutex, next, || unsafe { f(cond, mutex) })
}

/// Interposed `pthread_cond_timedwait(3)` (the `GLIBC_2.3.2` version).
///
/// # Safety
/// As `pthread_cond_timedwait(3)`.
unsafe extern "C" fn pthread_cond_timedwait(
    cond: *mut pthread_cond_t,
    mutex: *mut pthread_mutex_t,
    abstime: *const timespec,
) -> c_int {
    type F =
        unsafe extern "C" fn(*mut pthread_cond_t, *mut pthread_mutex_t, *const timespec) -> c_int;
    let next = NEXT_COND_TIMEDWAIT.get();
    // SAFETY: the C library's pthread_cond_timedwait, with this signature.
    let f = unsafe { real::<F>(next) };
    condition_wait(mutex, next, || unsafe { f(cond, mutex, abstime) })
}

/// Interposed `pthread_cond_clockwait(3)` (glibc 2.30+).
///
/// # Safety
/// As `pthread_cond_clockwait(3)`.
unsafe extern "C" fn pthread_cond_clockwait(
    cond: *mut pthread_cond_t,
    mutex: *mut pthread_mutex_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    type F = unsafe extern "C" fn(
        *mut pthread_cond_t,
        *mut pthread_mutex_t,
        clockid_t,
        *const timespec,
    ) -> c_int;
    let next = NEXT_COND_CLOCKWAIT.get();
    // SAFETY: the C library's pthread_cond_clockwait, with this signature.
    let f = unsafe { real::<F>(next) };
    condition_wait(mutex, next, || unsafe { f(cond, mutex, clock, abstime) })
}
