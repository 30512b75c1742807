//! Splicing a thread's Python frames into its native call stack.
//!
//! Pairing rule (shared/design/cpython.md §1): the k-th evaluator frame of the native stack
//! (innermost first) runs the k-th group of Python frames of the thread's frame chain. Each
//! paired evaluator frame is replaced by its group's Python frames; so different Python
//! functions running in the same C function become different trace-tree nodes.
//!
//! When the counts differ, the native stack and the chain disagree at one end: an evaluator
//! activation that is entering or leaving (no group yet, or already none) sits at the inner
//! end, so a complete native stack is paired from the outer end; a native stack that was
//! cut (or a chain that was cut) is paired from the inner end. Evaluator frames left
//! without a group, and paired with an empty group, stay as native frames.

use crate::capture::frames::{marker_key, Marker};

/// The native side of a sample.
pub struct Native<'a> {
    /// Frame addresses, innermost first.
    pub frames: &'a [u64],
    /// Whether unwinding reached the outermost frame (`_start`, a thread's start).
    pub complete: bool,
    /// Whether the stack was cut at the depth limit (rather than unwinding failing).
    pub cut: bool,
}

/// The Python side of a sample (see `python::stack::PyStack`).
pub struct Python<'a> {
    /// Python frame keys, innermost first.
    pub keys: &'a [u64],
    /// One past the last key of each group, innermost group first.
    pub group_ends: &'a [u16],
    /// Whether the chain was cut.
    pub truncated: bool,
}

/// What [`compose`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Composed {
    /// Frames written to `out`.
    pub len: usize,
    /// Evaluator frames on the native stack.
    pub evaluators: usize,
    /// Python groups that were spliced in.
    pub paired: usize,
}

/// Writes the call stack of a sample, outermost frame first, into `out`; returns what was
/// written. `is_evaluator(pc)` tells the evaluator's frames. Async-signal-safe.
pub fn compose(
    native: &Native<'_>,
    python: Option<&Python<'_>>,
    is_evaluator: impl Fn(u64) -> bool,
    out: &mut [u64],
) -> Composed {
    let evaluators = native.frames.iter().filter(|&&pc| is_evaluator(pc)).count();
    let groups = python.map_or(0, |p| p.group_ends.len());
    let pairs = evaluators.min(groups);
    // Evaluator number e (innermost = 0) pairs with group e - shift_eval + shift_group.
    let from_outer = native.complete && !python.is_some_and(|p| p.truncated);
    let (skip_eval, skip_group) = if from_outer {
        (evaluators - pairs, groups - pairs)
    } else {
        (0, 0)
    };

    let mut len = 0;
    let mut push = |key: u64, out: &mut [u64]| {
        if len < out.len() {
            out[len] = key;
            len += 1;
        }
    };
    // The outermost frames are missing: the native stack or the Python frame chain was
    // longer than the depth cap.
    if native.cut || python.is_some_and(|p| p.truncated) {
        push(marker_key(Marker::Truncated), out);
    } else if !native.complete {
        push(marker_key(Marker::Incomplete), out);
    }
    let mut paired = 0;
    // Walk the native stack from the outermost frame; `e` counts evaluator frames from the
    // innermost one.
    let mut e = evaluators;
    for &pc in native.frames.iter().rev() {
        if !is_evaluator(pc) {
            push(pc, out);
            continue;
        }
        e -= 1;
        let group = (e >= skip_eval && e - skip_eval < pairs).then(|| e - skip_eval + skip_group);
        match (group, python) {
            (Some(g), Some(p)) => {
                let start = if g == 0 {
                    0
                } else {
                    usize::from(p.group_ends[g - 1])
                };
                let end = usize::from(p.group_ends[g]);
                if start >= end {
                    push(pc, out);
                } else {
                    for &key in p.keys[start..end].iter().rev() {
                        push(key, out);
                    }
                    paired += 1;
                }
            }
            _ => push(pc, out),
        }
    }
    Composed {
        len,
        evaluators,
        paired,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVAL: u64 = 0x5000;
    fn is_eval(pc: u64) -> bool {
        (0x5000..0x6000).contains(&pc)
    }
    fn run(
        native: &[u64],
        complete: bool,
        keys: &[u64],
        ends: &[u16],
        truncated: bool,
    ) -> Vec<u64> {
        let mut out = [0u64; 64];
        let py = Python {
            keys,
            group_ends: ends,
            truncated,
        };
        let c = compose(
            &Native {
                frames: native,
                complete,
                cut: false,
            },
            Some(&py),
            is_eval,
            &mut out,
        );
        out[..c.len].to_vec()
    }

    #[test]
    fn each_evaluator_frame_is_replaced_by_its_group() {
        // native (inner first): leaf C, eval#0, glue, eval#1, main, _start
        let native = [0x9000, EVAL + 1, 0x7000, EVAL + 2, 0x1000, 0x100];
        // python (inner first): g0 = [f3, f2], g1 = [f1]
        let keys = [103, 102, 101];
        let out = run(&native, true, &keys, &[2, 3], false);
        assert_eq!(out, vec![0x100, 0x1000, 101, 0x7000, 102, 103, 0x9000]);
    }

    #[test]
    fn an_entering_activation_without_a_group_stays_native_when_the_stack_is_complete() {
        // Inner evaluator has just been entered: 2 evaluator frames, 1 group.
        let native = [EVAL + 9, 0x7000, EVAL + 2, 0x1000, 0x100];
        let out = run(&native, true, &[101], &[1], false);
        assert_eq!(out, vec![0x100, 0x1000, 101, 0x7000, EVAL + 9]);
    }

    #[test]
    fn a_cut_native_stack_pairs_from_the_inner_end_and_is_marked() {
        // Only the inner evaluator was unwound; the chain has two groups.
        let native = [0x9000, EVAL + 1, 0x7000];
        let out = run(&native, false, &[103, 101], &[1, 2], false);
        assert_eq!(
            out,
            vec![marker_key(Marker::Incomplete), 0x7000, 103, 0x9000]
        );
    }

    #[test]
    fn a_stack_cut_at_the_depth_limit_is_marked_as_truncated() {
        let mut out = [0u64; 8];
        let native = Native {
            frames: &[3, 2, 1],
            complete: false,
            cut: true,
        };
        let c = compose(&native, None, is_eval, &mut out);
        assert_eq!(&out[..c.len], &[marker_key(Marker::Truncated), 1, 2, 3]);
    }

    #[test]
    fn an_empty_group_keeps_the_evaluator_frame() {
        let native = [EVAL + 1, 0x1000];
        let out = run(&native, true, &[], &[0], false);
        assert_eq!(out, vec![0x1000, EVAL + 1]);
    }

    #[test]
    fn without_python_the_native_stack_is_recorded_outermost_first() {
        let mut out = [0u64; 8];
        let c = compose(
            &Native {
                frames: &[3, 2, 1],
                complete: true,
                cut: false,
            },
            None,
            is_eval,
            &mut out,
        );
        assert_eq!(&out[..c.len], &[1, 2, 3]);
        assert_eq!((c.evaluators, c.paired), (0, 0));
    }
}
