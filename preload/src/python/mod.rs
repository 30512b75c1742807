//! The CPython side of a sample: which native frames are the interpreter's evaluator, and
//! which Python frames each of them runs.
//!
//! - [`layout`]: version-specific knowledge, behind one [`Layout`] value;
//! - [`read`]: checked reads of interpreter memory;
//! - [`code`]: code records captured in the handler's own memory;
//! - [`stack`]: walking one thread's frame chain;
//! - [`lines`]: line tables, decoded when the profile is written.

pub mod code;
pub mod layout;
pub mod lines;
pub mod read;
pub mod stack;

use layout::Layout;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Most address ranges recorded for the evaluator function (its body and `.cold` parts).
pub const MAX_EVALUATOR_RANGES: usize = 4;

/// What the sampler knows about the process's CPython runtime.
pub struct Runtime {
    /// Where this version keeps things.
    pub layout: Layout,
    /// Type object addresses used to validate reads.
    pub types: code::Types,
    /// `[start, end)` address ranges of the evaluator (`_PyEval_EvalFrameDefault`, or
    /// `PyEval_EvalFrameEx` in 2.7), including compiler-split `.cold` parts.
    pub evaluator: [(u64, u64); MAX_EVALUATOR_RANGES],
    /// How many entries of `evaluator` are used.
    pub evaluator_ranges: usize,
    tss_key: AtomicU32,
    attached: AtomicBool,
}

impl Runtime {
    /// Builds the runtime description for a CPython with `layout`. `None` when the evaluator
    /// or the type objects cannot be found.
    pub fn new(layout: Layout, evaluator: &[(u64, u64)], types: code::Types) -> Option<Runtime> {
        if evaluator.is_empty() || types.code == 0 || types.text == 0 || types.bytes == 0 {
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
            tss_key: AtomicU32::new(0),
            attached: AtomicBool::new(false),
        })
    }

    /// Records the TSS key under which threads' `PyThreadState*` is kept; from then on
    /// samples carry Python frames.
    pub fn attach(&self, tss_key: u32) {
        self.tss_key.store(tss_key, Ordering::Relaxed);
        self.attached.store(true, Ordering::Release);
    }

    /// Whether Python frames can be read yet.
    pub fn is_attached(&self) -> bool {
        self.attached.load(Ordering::Acquire)
    }

    /// Whether `pc` is inside the evaluator.
    #[inline(always)]
    pub fn is_evaluator(&self, pc: u64) -> bool {
        self.evaluator[..self.evaluator_ranges].iter().any(|&(lo, hi)| pc >= lo && pc < hi)
    }

    /// The calling thread's `PyThreadState*` (0 when it has none). Async-signal-safe:
    /// `pthread_getspecific` reads the calling thread's own key slot without locking.
    #[inline(always)]
    pub fn current_thread_state(&self) -> u64 {
        if !self.is_attached() {
            return 0;
        }
        // SAFETY: a plain read of the calling thread's TSS slot.
        unsafe { libc::pthread_getspecific(self.tss_key.load(Ordering::Relaxed)) as u64 }
    }
}
