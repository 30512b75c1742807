//! The lock profiler's hooks of the interpreter's `PyMutex` lock objects (3.13.1+'s
//! `threading.Lock`, 3.14+'s `RLock`), which are made, taken and released with no call the
//! C library's hooks ([`crate::sources::lock_calls`]) see. The functions behind them —
//! their methods, their type's `tp_new` and `tp_dealloc`, `_thread.allocate_lock` — are
//! found where the interpreter keeps pointers to them ([`crate::capture::python::lock_types`])
//! and those pointers replaced, in the constructor, by wrappers of this module that call
//! the interpreter's function and tell [`crate::sources::locks`] what it did:
//!
//! - an acquisition that returned `True` starts a hold ([`locks::acquired`]), a release
//!   that succeeded ends it ([`locks::released`], recorded on the release's call stack
//!   with the method as its innermost frame, as `sem_post` is on 3.7–3.13.0);
//! - a lock object made is named by its creator's Python frames ([`locks::object_made`]),
//!   its `PyMutex`'s address forgotten when it is freed ([`locks::destroyed`]).
//!
//! Waits are counted where the interpreter parks a waiter (the `sem_clockwait` hook) and
//! named through the `PyMutex` it parks for, which is the lock object's.
//!
//! A wrapper is one of [`WRAPPERS`] functions of five integer arguments returning one: on
//! x86-64 (System V) every calling convention of a `PyMethodDef` (at most `self`,
//! `defining_class`, `args`, `nargs`, `kwnames`), `tp_new` (three) and `tp_dealloc` (one,
//! no result) passes its arguments in those registers, so each forwards all five
//! unchanged. Nothing is patched while the lock profiler is off; a wrapper whose profiler
//! was turned off (a fork child not profiled) only forwards.

use crate::capture::python::lock_types::{self, Patch, Role, MUTEX_OFFSET};
use crate::sources::locks::{self, Kind};
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many functions can be wrapped: the `Lock`'s six methods, the `RLock`'s six, the two
/// types' `tp_new` and `tp_dealloc`, and `allocate_lock`'s two names (18).
const WRAPPERS: usize = 20;

/// Per wrapper: the interpreter's function it calls.
static ORIGINAL: [AtomicUsize; WRAPPERS] = [const { AtomicUsize::new(0) }; WRAPPERS];
/// Per wrapper: its [`Role`], encoded by [`encode`] (1 + its place in [`ROLES`]).
static ROLE: [AtomicUsize; WRAPPERS] = [const { AtomicUsize::new(0) }; WRAPPERS];
/// `Py_True`'s address (`&_Py_TrueStruct`): what a successful `acquire` returns.
static PY_TRUE: AtomicUsize = AtomicUsize::new(0);

/// The roles in the order [`ROLE`] numbers them (0: none).
const ROLES: [Role; 7] = [
    Role::Acquire { nests: false },
    Role::Acquire { nests: true },
    Role::Release,
    Role::ReleaseSave,
    Role::AcquireRestore,
    Role::Made,
    Role::Freed,
];

fn encode(role: Role) -> usize {
    ROLES.iter().position(|&r| r == role).map_or(0, |i| i + 1)
}

type Function = unsafe extern "C" fn(usize, usize, usize, usize, usize) -> usize;

/// Calls wrapper `i`'s function with the caller's arguments and tells the lock profiler
/// what it did.
#[inline(always)]
fn call(i: usize, a: usize, b: usize, c: usize, d: usize, e: usize) -> usize {
    let original = ORIGINAL[i].load(Ordering::Relaxed);
    // SAFETY: the interpreter's function this wrapper replaced; its arguments are the
    // caller's, passed on as they came (see the module's comment).
    let f = unsafe { std::mem::transmute::<usize, Function>(original) };
    let role = ROLE[i].load(Ordering::Relaxed);
    let role = role.checked_sub(1).and_then(|r| ROLES.get(r).copied());
    if !locks::enabled() {
        // SAFETY: as above.
        return unsafe { f(a, b, c, d, e) };
    }
    if role == Some(Role::Freed) {
        // Its `PyMutex` may be another lock's next.
        locks::destroyed(a as u64 + MUTEX_OFFSET);
        // SAFETY: as above.
        return unsafe { f(a, b, c, d, e) };
    }
    // SAFETY: as above.
    let result = unsafe { f(a, b, c, d, e) };
    if result == 0 {
        return result;
    }
    let mutex = a as u64 + MUTEX_OFFSET;
    match role {
        Some(Role::Acquire { nests }) if result == PY_TRUE.load(Ordering::Relaxed) => {
            let kind = if nests { Kind::Mutex } else { Kind::Semaphore };
            locks::acquired(mutex, kind);
        }
        Some(Role::Release) => locks::released(mutex, original),
        Some(Role::ReleaseSave) => locks::released_whole(mutex, original),
        Some(Role::AcquireRestore) => locks::reacquired(mutex),
        Some(Role::Made) => locks::object_made(result as u64 + MUTEX_OFFSET),
        _ => {}
    }
    result
}

macro_rules! wrappers {
    ($($i:literal)*) => {
        /// The wrappers' addresses, wrapper `i` calling `ORIGINAL[i]`.
        fn wrappers() -> [usize; WRAPPERS] {
            [$({
                unsafe extern "C" fn wrapper(a: usize, b: usize, c: usize, d: usize, e: usize) -> usize {
                    call($i, a, b, c, d, e)
                }
                wrapper as Function as usize
            }),*]
        }
    };
}

wrappers!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19);

/// Wraps the functions of this interpreter's `PyMutex` lock objects (Python `version`;
/// nothing before 3.13.1), whose code holds `runtime`; the types' `tp_new` and
/// `tp_dealloc` only when the interpreter is not initialised yet (`before_types`: it
/// copies them into each type it makes). Returns what was wrapped, for messages. Once per
/// process, in the constructor (or when the library is loaded into a running program).
pub fn install(runtime: usize, version: (u8, u8, u8), before_types: bool) -> Vec<Patch> {
    static DONE: std::sync::Once = std::sync::Once::new();
    let mut wrapped = Vec::new();
    DONE.call_once(|| {
        let py_true = pyigprof_hooks::cpython::symbol(c"_Py_TrueStruct");
        if runtime == 0 || py_true == 0 {
            return;
        }
        PY_TRUE.store(py_true, Ordering::Relaxed);
        let addresses = wrappers();
        for (i, patch) in lock_types::find(runtime, version, before_types)
            .into_iter()
            .take(WRAPPERS)
            .enumerate()
        {
            ORIGINAL[i].store(patch.original, Ordering::Relaxed);
            ROLE[i].store(encode(patch.role), Ordering::Release);
            // SAFETY: `at` is a pointer-sized, aligned word of the interpreter's writable
            // data that holds `original` (found so by `find`); one aligned store, which a
            // thread calling through it sees whole, before or after.
            unsafe { (*(patch.at as *const AtomicUsize)).store(addresses[i], Ordering::Release) };
            wrapped.push(patch);
        }
    });
    wrapped
}
