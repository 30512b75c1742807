//! The CPython side of a sample: which native frames are the interpreter's evaluator, and
//! which Python frames each of them runs.
//!
//! - [`layout`]: version-specific knowledge, behind one [`Layout`] value;
//! - [`read`]: checked reads of interpreter memory;
//! - [`code`]: code records captured in the handler's own memory;
//! - [`stack`]: walking one thread's frame chain;
//! - [`creation`]: where a lock is created (the lock profiler's names);
//! - [`lock_types`]: the functions of 3.13.1+'s `PyMutex` lock objects, to wrap;
//! - [`lines`]: line tables, decoded when the profile is written;
//! - [`tasks`]: asyncio's task await chains (3.14+);
//! - [`names`]: the names `threading` gives threads, for `pyigprof dump`.

pub mod code;
pub mod creation;
pub mod discover;
pub mod layout;
pub mod lines;
pub mod lock_types;
pub mod names;
pub mod objects;
pub mod read;
pub mod stack;
pub mod tasks;

use layout::Layout;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Where the handler finds the interrupted thread's `PyThreadState*`: a
/// [`layout::ThreadStateLookup`] resolved to this process's addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadStateSource {
    /// The TSS key given to [`Runtime::attach`]; no Python frames before that.
    AttachedKey,
    /// 3.7: a `Py_tss_t` (`int _is_initialized; pthread_key_t _key`) at this address.
    Tss { at: u64 },
    /// 3.6: an `int` key at this address, -1 while there is none.
    Key { at: u64 },
    /// 3.15+: a thread-local variable at `offset` bytes from the thread pointer (`%fs:0`),
    /// found by decoding `PyGILState_GetThisThreadState` (discover.rs).
    ThreadLocal { offset: i64 },
    /// 2.7: the address of `_PyThreadState_Current`, and where thread states keep their
    /// owner, interpreter and list link.
    GilHolder {
        current: u64,
        offsets: layout::ThreadStateOffsets,
        /// The address of the static `interp_head` (decoded from `PyInterpreterState_Head`,
        /// discover.rs), 0 when unknown: the interpreter before any GIL holder is sampled.
        interp_head: u64,
    },
}

/// A [`layout::Place`] resolved to this process's addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Where {
    /// A fixed address (a variable of libpython, or inside `_PyRuntime`).
    At(u64),
    /// `offset` bytes into the sampled thread's interpreter state.
    Interpreter(u16),
    /// `offset` bytes into what the pointer `pointer` bytes into the interpreter state
    /// points to.
    ThroughInterpreter { pointer: u16, offset: u16 },
}

/// How the handler tells that the sampled thread is collecting garbage: a
/// [`layout::GcLayout`] resolved to this process's addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcProbe {
    /// `PyThreadState.interp`.
    pub thread_interp: u16,
    /// The `int` set while the interpreter collects.
    pub collecting: Where,
    /// The GIL holder's `PyThreadState*`.
    pub holder: Where,
    /// The `int` set while the GIL is held, when `holder` is not cleared at release.
    pub locked: Option<Where>,
}

impl GcProbe {
    /// Whether the thread whose state is `tstate` (the sampled thread's own, so alive) is
    /// running a garbage collection: its interpreter's collector is collecting and the
    /// thread holds the GIL. Every read is checked; a failed one answers `false`.
    /// Async-signal-safe.
    #[inline]
    pub fn collecting(&self, tstate: u64) -> bool {
        self.check(tstate).unwrap_or(false)
    }

    /// Whether the thread whose state is `tstate` holds its interpreter's GIL: the GIL's
    /// holder is `tstate` (and the GIL is locked, where the holder keeps its value after a
    /// release: `gil->last_holder`). `None` when a read fails (checked reads, no fault).
    /// Async-signal-safe.
    pub fn holds_gil(&self, tstate: u64) -> Option<bool> {
        let holder = self.gil_holder(self.interpreter_of(tstate)?)?;
        Some(holder == tstate)
    }

    /// The interpreter state (`PyInterpreterState*`) of the thread whose state is
    /// `tstate`. `None` when the read fails. Async-signal-safe.
    pub fn interpreter_of(&self, tstate: u64) -> Option<u64> {
        read::word(tstate + u64::from(self.thread_interp))
    }

    /// The `PyThreadState*` that holds the GIL of interpreter `interp`, 0 when the GIL is
    /// free (`gil->locked` is 0, where the holder keeps its value after a release). `None`
    /// when a read fails. For `pyigprof dump`, read once per interpreter so that one
    /// thread at most is shown holding it. Async-signal-safe.
    pub fn gil_holder(&self, interp: u64) -> Option<u64> {
        let holder = read::word(self.address(interp, self.holder)?)?;
        match self.locked {
            Some(locked) if holder != 0 => {
                Some(if read::int(self.address(interp, locked)?)? != 0 {
                    holder
                } else {
                    0
                })
            }
            _ => Some(holder),
        }
    }

    /// The address of `place` for a thread of interpreter `interp`.
    fn address(&self, interp: u64, place: Where) -> Option<u64> {
        match place {
            Where::At(at) => Some(at),
            Where::Interpreter(offset) => interp.checked_add(u64::from(offset)),
            Where::ThroughInterpreter { pointer, offset } => {
                read::word(interp.checked_add(u64::from(pointer))?)?.checked_add(u64::from(offset))
            }
        }
    }

    fn check(&self, tstate: u64) -> Option<bool> {
        let interp = read::word(tstate + u64::from(self.thread_interp))?;
        if read::int(self.address(interp, self.collecting)?)? == 0 {
            return Some(false);
        }
        self.holds_gil(tstate)
    }
}

/// Most address ranges recorded for the evaluator function (its body and `.cold` parts).
pub const MAX_EVALUATOR_RANGES: usize = 4;

/// What the sampler knows about the process's CPython runtime.
pub struct Runtime {
    /// Where this version keeps things.
    pub layout: Layout,
    /// Type object addresses used to validate reads.
    pub types: code::Types,
    /// `[start, end)` address ranges of the evaluator (`_PyEval_EvalFrameDefault`, or
    /// `PyEval_EvalFrameEx` in 2.7), including compiler-split `.cold` parts; used only where
    /// activations leave no marker on the C stack (≤ 3.10, [`Runtime::pairs_by_marker`]).
    pub evaluator: [(u64, u64); MAX_EVALUATOR_RANGES],
    /// How many entries of `evaluator` are used.
    pub evaluator_ranges: usize,
    /// How thread states are found.
    pub source: ThreadStateSource,
    /// How a sample tells that its thread collects garbage (set by `discover`); `None` when
    /// the places are unknown (stripped 2.7 and 3.6, free-threaded builds).
    pub gc: Option<GcProbe>,
    /// The futex words a thread waiting for the GIL blocks on (set by `discover`; none
    /// known for 2.7 and stripped 3.6): wall mode's `<waiting: GIL>`.
    pub gil_words: crate::capture::waits::GilWords,
    tss_key: AtomicU32,
    attached: AtomicBool,
    /// 2.7: the `PyInterpreterState*` of the GIL holder last seen.
    interpreter: AtomicU64,
}

impl Runtime {
    /// Builds the runtime description for a CPython with `layout`, whose thread states are
    /// found through `source`. `None` when the type objects cannot be found, or the
    /// evaluator's ranges when the version needs them.
    pub fn new(
        layout: Layout,
        evaluator: &[(u64, u64)],
        types: code::Types,
        source: ThreadStateSource,
    ) -> Option<Runtime> {
        if (evaluator.is_empty() && !layout.has_stack_markers())
            || types.code == 0
            || types.text == 0
            || types.bytes == 0
        {
            return None;
        }
        let mut ranges = [(0, 0); MAX_EVALUATOR_RANGES];
        let n = evaluator.len().min(MAX_EVALUATOR_RANGES);
        ranges[..n].copy_from_slice(&evaluator[..n]);
        Some(Runtime {
            layout,
            types,
            evaluator: ranges,
            evaluator_ranges: n,
            source,
            gc: None,
            gil_words: Default::default(),
            tss_key: AtomicU32::new(0),
            attached: AtomicBool::new(false),
            interpreter: AtomicU64::new(0),
        })
    }

    /// Records the TSS key under which threads' `PyThreadState*` is kept (for
    /// [`ThreadStateSource::AttachedKey`]); from then on samples carry Python frames.
    pub fn attach(&self, tss_key: u32) {
        self.tss_key.store(tss_key, Ordering::Relaxed);
        self.attached.store(true, Ordering::Release);
    }

    /// Whether this runtime waits for [`Runtime::attach`] before it can read Python frames.
    pub fn needs_attachment(&self) -> bool {
        self.source == ThreadStateSource::AttachedKey
    }

    /// Whether evaluator activations are paired with their Python frames by the markers
    /// they keep on the C stack (3.11+), rather than by the evaluator's addresses.
    #[inline(always)]
    pub fn pairs_by_marker(&self) -> bool {
        self.layout.has_stack_markers()
    }

    /// Whether `pc` is inside the evaluator.
    #[inline(always)]
    pub fn is_evaluator(&self, pc: u64) -> bool {
        self.evaluator[..self.evaluator_ranges]
            .iter()
            .any(|&(lo, hi)| pc >= lo && pc < hi)
    }

    /// The calling thread's `PyThreadState*`, 0 when it has none (or none can be found yet).
    /// `seen` is the calling thread's own memory of the state last found for it (used by
    /// 2.7, where only the GIL holder's state is published). Async-signal-safe: plain reads
    /// and `pthread_getspecific`, which reads the calling thread's own key slot without
    /// locking.
    #[inline(always)]
    pub fn current_thread_state(&self, seen: &mut u64) -> u64 {
        match self.source {
            ThreadStateSource::ThreadLocal { offset } => {
                let thread_pointer: u64;
                // SAFETY: reads the TCB's self pointer (x86-64 glibc: `%fs:0`).
                unsafe {
                    std::arch::asm!("mov {}, fs:0", out(reg) thread_pointer,
                        options(nostack, readonly, preserves_flags));
                }
                read::word(thread_pointer.wrapping_add(offset as u64)).unwrap_or(0)
            }
            ThreadStateSource::GilHolder {
                current,
                offsets,
                interp_head,
            } => {
                // SAFETY: pthread_self only reads the thread pointer.
                let me = unsafe { libc::pthread_self() } as u64;
                self.gil_holder_state(me, current, offsets, interp_head, seen)
            }
            // SAFETY: reads the calling thread's own TSS slot.
            _ => self
                .thread_state_key()
                .map_or(0, |key| unsafe { libc::pthread_getspecific(key) as u64 }),
        }
    }

    /// The `PyThreadState*` of another thread, `thread` (its `pthread_t`), 0 when it has
    /// none; read by the wall-clock source while that thread is blocked. `seen` is the
    /// state last found for it by its own samples, the answer where the thread's key slots
    /// cannot be read (a key ≥ 32, glibc's descriptor layout not found); 2.7 (no key)
    /// looks for the state whose `thread_id` is `thread` in the interpreter's list, as for
    /// the calling thread. Reads are checked and cannot fault.
    ///
    /// The state is returned only while its `thread_id` is `thread`
    /// ([`Runtime::belongs_to`]): the other thread may end at any instant, and CPython frees
    /// its state (3.8–3.11 before clearing its key); a state found so, freed and its memory
    /// reused, is 0 here, not garbage to read through. A caller that reads through it for a
    /// while checks again after (`pyigprof dump`). Async-signal-safe.
    pub fn thread_state_of(&self, thread: u64, seen: u64) -> u64 {
        let tstate = match self.source {
            // x86-64 glibc: a thread's pthread_t is its thread pointer (`%fs:0`).
            ThreadStateSource::ThreadLocal { offset } => {
                read::word(thread.wrapping_add(offset as u64)).unwrap_or(0)
            }
            ThreadStateSource::GilHolder {
                current,
                offsets,
                interp_head,
            } => {
                let mut seen = seen;
                self.gil_holder_state(thread, current, offsets, interp_head, &mut seen)
            }
            _ => self
                .thread_state_key()
                .map_or(0, |key| key_value_of(thread, key).unwrap_or(seen)),
        };
        if self.belongs_to(tstate, thread) {
            tstate
        } else {
            0
        }
    }

    /// Whether `tstate` is (still) the thread state of `thread` (its `pthread_t`): its
    /// `thread_id` ([`Layout::thread_id`]) reads as `thread`. False for 0 and for a failed
    /// read. Async-signal-safe.
    pub fn belongs_to(&self, tstate: u64, thread: u64) -> bool {
        tstate != 0
            && thread != 0
            && read::word(tstate.wrapping_add(u64::from(self.layout.thread_id))) == Some(thread)
    }

    /// The pthread key under which threads keep their `PyThreadState*` (3.6–3.14), `None`
    /// while it is not known yet or where states are found otherwise.
    #[inline(always)]
    fn thread_state_key(&self) -> Option<u32> {
        match self.source {
            ThreadStateSource::AttachedKey if self.attached.load(Ordering::Acquire) => {
                Some(self.tss_key.load(Ordering::Relaxed))
            }
            ThreadStateSource::Tss { at } => match (read::int(at), read::uint(at + 4)) {
                (Some(1), Some(key)) => Some(key),
                _ => None,
            },
            ThreadStateSource::Key { at } => match read::int(at) {
                Some(key) if key >= 0 => Some(key as u32),
                _ => None,
            },
            _ => None,
        }
    }

    /// 2.7's [`ThreadStateSource::GilHolder`] lookup, see [`layout::ThreadStateLookup`]:
    /// the state of thread `me` (a `pthread_t`: the calling thread's, or another's
    /// blocked in a system call, for the wall-clock source and `pyigprof dump`).
    /// Thread states of other threads may be freed while they are read (a thread ending on
    /// another CPU): a freed small block stays mapped, and a state is only used when its
    /// `thread_id` is the calling thread's and its `interp` is the interpreter, which
    /// `free` overwrites (the second word of a chunk holds glibc's tcache key or free-list
    /// link).
    #[inline(never)]
    fn gil_holder_state(
        &self,
        me: u64,
        current: u64,
        offsets: layout::ThreadStateOffsets,
        interp_head: u64,
        seen: &mut u64,
    ) -> u64 {
        /// Most thread states looked at in the interpreter's list.
        const MAX_THREAD_STATES: usize = 1024;
        let field = |tstate: u64, offset: u16| read::word(tstate + u64::from(offset));
        let owned_by_me = |tstate: u64| tstate != 0 && field(tstate, offsets.thread_id) == Some(me);
        let holder = read::word(current).unwrap_or(0);
        if owned_by_me(holder) {
            // Our own state cannot be freed under us: the interpreter read from it is sound.
            if let Some(interpreter) = field(holder, offsets.interp) {
                self.interpreter.store(interpreter, Ordering::Relaxed);
            }
            *seen = holder;
            return holder;
        }
        let mut interpreter = self.interpreter.load(Ordering::Relaxed);
        if interpreter == 0 {
            // No GIL holder sampled on its own thread yet (a program whose first work is a
            // C call that released the GIL): the runtime's first interpreter
            // (`interp_head`), else another thread's holder's interpreter (the holder
            // pointer is cleared before a state is freed).
            interpreter = match interp_head {
                0 => 0,
                head => read::word(head).unwrap_or(0),
            };
            if interpreter == 0 && holder != 0 {
                interpreter = field(holder, offsets.interp).unwrap_or(0);
            }
            self.interpreter.store(interpreter, Ordering::Relaxed);
        }
        if interpreter == 0 {
            return 0;
        }
        let alive = |tstate: u64| field(tstate, offsets.interp) == Some(interpreter);
        if owned_by_me(*seen) && alive(*seen) {
            return *seen;
        }
        *seen = 0;
        let mut tstate = field(interpreter, offsets.tstate_head).unwrap_or(0);
        for _ in 0..MAX_THREAD_STATES {
            if tstate == 0 || !alive(tstate) {
                break;
            }
            if owned_by_me(tstate) {
                *seen = tstate;
                return tstate;
            }
            tstate = field(tstate, offsets.next).unwrap_or(0);
        }
        0
    }
}

/// Where glibc keeps a thread's values of pthread keys 0–31, as an offset from its
/// `pthread_t` plus one (0 = not found): `struct pthread`'s `specific_1stblock[key]`, a
/// `{ seq, data }` pair of words each (glibc's nptl/descr.h). Set by [`find_key_slots`].
static KEY_DATA: AtomicU64 = AtomicU64::new(0);

/// Finds where glibc keeps threads' values of pthread keys (`KEY_DATA`), so that another
/// thread's can be read: sets two fresh keys to marker values in the calling thread and
/// looks for them in its descriptor (the first 4 KiB from its `pthread_t`, read through
/// checked reads). Calls `pthread_key_create`: not from a signal handler.
pub fn find_key_slots() {
    const MARKS: [u64; 2] = [0x7079_6967_6b65_7931, 0x7079_6967_6b65_7932];
    // SAFETY: creating, setting and deleting keys of our own.
    unsafe {
        let mut keys: [libc::pthread_key_t; 2] = [0; 2];
        if libc::pthread_key_create(&mut keys[0], None) != 0 {
            return;
        }
        if libc::pthread_key_create(&mut keys[1], None) != 0 {
            libc::pthread_key_delete(keys[0]);
            return;
        }
        if keys.iter().all(|&k| k < 32) {
            for (k, mark) in keys.iter().zip(MARKS) {
                libc::pthread_setspecific(*k, mark as *const libc::c_void);
            }
            let me = libc::pthread_self() as u64;
            let found = (0..4096u64).step_by(8).find_map(|offset| {
                let base = offset.checked_sub(u64::from(keys[0]) * 16)?;
                (read::word(me + offset) == Some(MARKS[0])
                    && read::word(me + base + u64::from(keys[1]) * 16) == Some(MARKS[1]))
                .then_some(base)
            });
            if let Some(base) = found {
                KEY_DATA.store(base + 1, Ordering::Relaxed);
            }
            for k in keys {
                libc::pthread_setspecific(k, std::ptr::null());
            }
        }
        for k in keys {
            libc::pthread_key_delete(k);
        }
    }
}

/// The value of pthread key `key` in thread `thread` (its `pthread_t`); `None` when it
/// cannot be read (see [`find_key_slots`]).
fn key_value_of(thread: u64, key: u32) -> Option<u64> {
    let base = KEY_DATA.load(Ordering::Relaxed).checked_sub(1)?;
    if key >= 32 {
        return None;
    }
    read::word(thread.checked_add(base + u64::from(key) * 16)?)
}
