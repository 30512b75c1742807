//! Where a Python lock is created, and for which object: read from the creating thread's
//! own Python frames when the interpreter makes the lock's semaphore (3.7–3.13, whose
//! `threading.Lock` is a `sem_t` made by `PyThread_allocate_lock`; [`crate::sources::locks`]).
//!
//! A lock is named by the innermost frame outside the standard library's synchronization
//! modules (`threading.py`, `queue.py`): for `threading.Lock()` the line that calls it; for
//! an `Event`, a `Condition`, a `Semaphore`, a `queue.Queue` or a `Thread` (whose `join`
//! waits on a lock), the line that creates that object, since their locks are made in
//! their `__init__` (or, a thread's, in its `_bootstrap`).
//!
//! A `Condition`'s waits go through a lock of their own, made by each `wait` (its
//! "waiter"), whose creating line is in `threading.py`. So the outermost frame inside
//! those modules is also read: its function and its first local, `self` (the `Event`, the
//! `Queue`, the `Condition` the program called), which the caller keeps while that object's
//! `__init__` runs, and finds again when a `wait` inside one of its methods makes a waiter.

use super::code::{is_shim, Codes, Types};
use super::layout::{FrameModel, Layout};
use super::read;
use super::stack::{current_frame, position};
use crate::capture::frames::Lock;

/// Frames read at most, innermost first, before giving up on finding one outside the
/// synchronization modules.
const MAX_FRAMES: usize = 32;

/// What the creating thread's Python frames say about a lock made now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Creation {
    /// The innermost frame outside the synchronization modules (`None`: there is none
    /// within [`MAX_FRAMES`]).
    pub site: Option<Lock>,
    /// The outermost frame inside them: the object it runs a method of (its first local,
    /// 0 when unreadable) and what the lock is to it (`None`: the lock is made outside
    /// them, as `threading.Lock()` is).
    pub owner: Option<(u64, Role)>,
}

/// What a lock made inside the synchronization modules is to the object whose method
/// made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Made by its `__init__`: one of its own locks, named where the object is created.
    Init,
    /// Made by another method (a `Condition`'s waiter): one of the object's waits.
    Method,
    /// A `Thread`'s lock that its `join` waits on, made by `Thread._set_tstate_lock`
    /// (3.7–3.12), which the thread holds for its whole life.
    ThreadLock,
}

impl Creation {
    /// The creation at `site`, the owner's role made [`Role::ThreadLock`] when the
    /// innermost synchronization frame is `Thread._set_tstate_lock` (`thread_lock`).
    fn of(site: Option<Lock>, owner: Option<(u64, Role)>, thread_lock: Option<bool>) -> Self {
        let owner = owner.map(|(this, role)| match thread_lock {
            Some(true) => (this, Role::ThreadLock),
            _ => (this, role),
        });
        Creation { site, owner }
    }
}

/// Whether `file` (a code object's `co_filename`) is one of the standard library's
/// synchronization modules.
pub fn is_synchronization(file: &[u8]) -> bool {
    file.ends_with(b"/threading.py") || file.ends_with(b"/queue.py")
}

/// Reads the calling thread's frames (its thread state `tstate`) for a lock being created
/// now. `scratch` is [`super::code::MAX_TEXT`] bytes of working space. `None` when the
/// thread runs no Python code, the version keeps no first local where it is known
/// ([`Layout::frame_locals`]), or a read fails. Async-signal-safe.
pub fn lock_creation(
    tstate: u64,
    layout: &Layout,
    types: &Types,
    codes: &Codes,
    scratch: &mut [u8],
) -> Option<Creation> {
    let locals = layout.frame_locals?;
    let mut frame = current_frame(tstate, layout)?;
    let mut owner = None;
    let mut thread_lock = None;
    for _ in 0..MAX_FRAMES {
        if frame == 0 || !read::plausible(frame, 80, 8) {
            break;
        }
        let code = read::word(frame + u64::from(layout.frame_code))? & layout.frame_code_mask;
        let back = read::word(frame + u64::from(layout.frame_back))?;
        let entry = match layout.frame {
            FrameModel::CStackOwner { offset, value } => {
                read::byte(frame + u64::from(offset)).is_some_and(|owner| owner >= value)
            }
            _ => false,
        };
        // 3.13's `_Py_InitCleanup` shim (between a class's call and its `__init__`) is not
        // the program's code: skipped, as the sampler skips it.
        if !entry && !is_shim(code, layout) && read::has_type(code, types.code) {
            let record = codes.record_for(code, layout, types, scratch).ok()?;
            let captured = codes.get(record)?;
            if !is_synchronization(captured.file) {
                let site = Lock::Python {
                    record,
                    instr: position(frame, code, layout),
                };
                return Some(Creation::of(Some(site), owner, thread_lock));
            }
            thread_lock.get_or_insert(captured.name.ends_with(b"_set_tstate_lock"));
            let this = read::word(frame + u64::from(locals)).unwrap_or(0);
            let role = if captured.name.ends_with(b"__init__") {
                Role::Init
            } else {
                Role::Method
            };
            owner = Some((this, role));
        }
        frame = back;
    }
    Some(Creation::of(None, owner, thread_lock))
}
