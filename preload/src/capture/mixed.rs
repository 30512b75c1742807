//! Splicing a thread's Python frames into its native call stack.
//!
//! Each native activation of the interpreter's evaluator runs one *group* of Python frames
//! of the thread's frame chain (shared/design/cpython.md §1). [`pair`] finds which native
//! frame runs which group, and [`compose`] replaces each paired native frame by its group's
//! Python frames; so different Python functions running in the same C function become
//! different trace-tree nodes. Two ways to pair:
//!
//! - **By marker** (3.11+): every activation keeps a marker on its own C stack frame — 3.11
//!   its local `_PyCFrame` (the `tstate->cframe` chain), 3.12+ its local entry frame, which
//!   the frame chain reaches through `previous`. The native frame whose stack range
//!   `[sp, caller's sp)` holds a group's marker is that group's evaluator, whatever its
//!   symbols: a stripped interpreter whose loop is a local `.cold` symbol, or one whose
//!   evaluator is not in `.dynsym`, pairs the same way.
//! - **By address** (≤ 3.10, whose frames carry no marker on the C stack): the k-th frame
//!   inside the evaluator's symbol ranges (innermost first) runs the k-th group. When the
//!   counts differ, a complete native stack is paired from the outer end (an activation
//!   entering or leaving sits at the inner end); a cut one from the inner end.
//!
//! Groups no native frame was found for: when the native stack is incomplete (unwinding
//! stopped in code without unwind tables, such as the JIT's machine code), the unpaired
//! groups outside the outermost paired one are the callers of what was unwound, and are
//! put above it, under the `<incomplete stack>` marker; so a sample in jitted code still
//! carries its thread's Python frames. Otherwise an unpaired group is left out (counted,
//! [`Composed::unplaced`]), and an unpaired evaluator frame stays a native frame.

use crate::capture::frames::{is_python, marker_key, Marker};

/// The native side of a sample.
pub struct Native<'a> {
    /// Frame addresses, innermost first.
    pub frames: &'a [u64],
    /// Each frame's stack pointer (same length as `frames`): frame `k`'s locals lie in
    /// `[sps[k], sps[k + 1])`, the outermost frame's above `sps[last]`.
    pub sps: &'a [u64],
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
    /// Each group's marker address on the C stack (0 = none); empty when pairing by address.
    pub markers: &'a [u64],
    /// Whether the chain was cut.
    pub truncated: bool,
}

/// How evaluator frames are told apart.
pub enum Evaluator<F: Fn(u64) -> bool> {
    /// By the group markers' addresses on the C stack (3.11+).
    Marker,
    /// By instruction address (the evaluator's symbol ranges, ≤ 3.10).
    Address(F),
}

/// What [`compose`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Composed {
    /// Frames written to `out`.
    pub len: usize,
    /// Non-empty Python groups that were spliced in (in place of a native frame, or above
    /// an incomplete native stack).
    pub paired: usize,
    /// Non-empty Python groups that were left out: no native frame runs them and the
    /// native stack is whole.
    pub unplaced: usize,
}

/// "No native frame": a group's entry in [`pair`]'s output.
pub const UNPAIRED: u16 = u16::MAX;

/// Finds the native frame of each group of `python`: `paired[g]` becomes the index in
/// `native.frames` of the frame that runs group `g`, or [`UNPAIRED`]. Paired frames grow
/// outwards with `g`. Returns the number of groups written (`min` of the groups and
/// `paired.len()`). Async-signal-safe.
pub fn pair<F: Fn(u64) -> bool>(
    native: &Native<'_>,
    python: &Python<'_>,
    evaluator: &Evaluator<F>,
    paired: &mut [u16],
) -> usize {
    let groups = python.group_ends.len().min(paired.len());
    let paired = &mut paired[..groups];
    paired.fill(UNPAIRED);
    let frames = native.frames.len().min(native.sps.len());
    match evaluator {
        Evaluator::Marker => {
            // The outermost frame's range is open only if it really is the outermost.
            let (sps, bounded) = (&native.sps[..frames], native.complete);
            let mut floor = 0usize;
            for (g, &marker) in python.markers.iter().take(groups).enumerate() {
                if marker == 0 || frames == 0 || marker < sps[0] {
                    continue;
                }
                // The last frame whose stack pointer is at or below the marker.
                let k = sps.partition_point(|&sp| sp <= marker) - 1;
                if k < floor || (k + 1 == frames && !bounded) {
                    continue;
                }
                paired[g] = k as u16;
                floor = k + 1;
            }
        }
        Evaluator::Address(is_evaluator) => {
            let evaluators = native.frames[..frames]
                .iter()
                .filter(|&&pc| is_evaluator(pc))
                .count();
            let pairs = evaluators.min(groups);
            let from_outer = native.complete && !python.truncated;
            let (skip_eval, skip_group) = if from_outer {
                (evaluators - pairs, groups - pairs)
            } else {
                (0, 0)
            };
            let mut e = 0;
            for (k, &pc) in native.frames[..frames].iter().enumerate() {
                if !is_evaluator(pc) {
                    continue;
                }
                if e >= skip_eval && e - skip_eval < pairs {
                    paired[e - skip_eval + skip_group] = k as u16;
                }
                e += 1;
            }
        }
    }
    groups
}

/// Writes the call stack of a sample, outermost frame first, into `out`, with each group
/// of `python` spliced in where `paired` (from [`pair`]) says; returns what was written.
/// Async-signal-safe.
pub fn compose(
    native: &Native<'_>,
    python: Option<(&Python<'_>, &[u16])>,
    out: &mut [u64],
) -> Composed {
    let mut len = 0;
    let mut push = |key: u64, out: &mut [u64]| {
        if len < out.len() {
            out[len] = key;
            len += 1;
        }
    };
    let truncated = native.cut || python.is_some_and(|(p, _)| p.truncated);
    // The outermost frames are missing: the native stack or the Python frame chain was
    // longer than the depth cap, or unwinding stopped.
    if truncated {
        push(marker_key(Marker::Truncated), out);
    } else if !native.complete {
        push(marker_key(Marker::Incomplete), out);
    }
    fn group<'p>(p: &Python<'p>, g: usize) -> &'p [u64] {
        let start = if g == 0 {
            0
        } else {
            usize::from(p.group_ends[g - 1])
        };
        &p.keys[start.min(p.keys.len())..usize::from(p.group_ends[g]).min(p.keys.len())]
    }
    let (mut paired_groups, mut unplaced) = (0, 0);
    // Groups not yet met walking the native stack from the outermost frame in: those below
    // index `next`.
    let mut next = 0;
    if let Some((p, paired)) = python {
        // Unpaired groups outside the outermost paired one.
        let outermost = paired.iter().rposition(|&k| k != UNPAIRED);
        let above = outermost.map_or(0, |g| g + 1);
        for g in (above..paired.len()).rev() {
            let keys = group(p, g);
            if keys.is_empty() {
                continue;
            }
            if native.complete {
                unplaced += 1;
                continue;
            }
            for &key in keys.iter().rev() {
                push(key, out);
            }
            paired_groups += 1;
        }
        next = above;
    }
    for (k, &pc) in native.frames.iter().enumerate().rev() {
        let mut spliced = false;
        if let Some((p, paired)) = python {
            // Unpaired groups between paired ones cannot be placed.
            while next > 0 && paired[next - 1] == UNPAIRED {
                next -= 1;
                unplaced += usize::from(!group(p, next).is_empty());
            }
            if next > 0 && usize::from(paired[next - 1]) == k {
                next -= 1;
                let keys = group(p, next);
                if !keys.is_empty() {
                    for &key in keys.iter().rev() {
                        push(key, out);
                    }
                    paired_groups += 1;
                    spliced = true;
                }
            }
        }
        if !spliced {
            push(pc, out);
        }
    }
    if let Some((p, paired)) = python {
        // Unpaired groups inside the innermost paired one.
        unplaced += (0..next)
            .filter(|&g| paired[g] == UNPAIRED && !group(p, g).is_empty())
            .count();
    }
    Composed {
        len,
        paired: paired_groups,
        unplaced,
    }
}

/// Inserts the marker frame `key` into the composed stack `out[..len]` (outermost first)
/// directly inside its innermost Python frame — the frame whose work the marked activity
/// (a garbage collection) belongs to, so that the native frames of that activity come
/// under the marker — or as the outermost frame when the stack has no Python frame.
/// Returns the new length; when `out` is full, the innermost frame is dropped.
/// Async-signal-safe.
pub fn insert_below_innermost_python(out: &mut [u64], len: usize, key: u64) -> usize {
    let len = len.min(out.len());
    if out.is_empty() {
        return 0;
    }
    let at = out[..len]
        .iter()
        .rposition(|&k| is_python(k))
        .map_or(0, |i| i + 1)
        .min(out.len() - 1);
    let new_len = (len + 1).min(out.len());
    out.copy_within(at..new_len - 1, at + 1);
    out[at] = key;
    new_len
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::frames::python_key;

    const EVAL: u64 = 0x5000;
    fn is_eval(pc: u64) -> bool {
        (0x5000..0x6000).contains(&pc)
    }

    /// Composes by address (`markers` empty) or by marker; `sps` default to 0x100 apart.
    fn run(
        native: &[u64],
        complete: bool,
        keys: &[u64],
        ends: &[u16],
        markers: &[u64],
        truncated: bool,
    ) -> (Vec<u64>, Composed) {
        let sps: Vec<u64> = (0..native.len() as u64)
            .map(|k| 0x1000 + k * 0x100)
            .collect();
        let mut out = [0u64; 64];
        let py = Python {
            keys,
            group_ends: ends,
            markers,
            truncated,
        };
        let native = Native {
            frames: native,
            sps: &sps,
            complete,
            cut: false,
        };
        let mut paired = [0u16; 16];
        let n = if markers.is_empty() {
            pair(&native, &py, &Evaluator::Address(is_eval), &mut paired)
        } else {
            pair(
                &native,
                &py,
                &Evaluator::<fn(u64) -> bool>::Marker,
                &mut paired,
            )
        };
        let c = compose(&native, Some((&py, &paired[..n])), &mut out);
        (out[..c.len].to_vec(), c)
    }

    #[test]
    fn each_evaluator_frame_is_replaced_by_its_group() {
        // native (inner first): leaf C, eval#0, glue, eval#1, main, _start
        let native = [0x9000, EVAL + 1, 0x7000, EVAL + 2, 0x1000, 0x100];
        // python (inner first): g0 = [f3, f2], g1 = [f1]
        let keys = [103, 102, 101];
        let (out, c) = run(&native, true, &keys, &[2, 3], &[], false);
        assert_eq!(out, vec![0x100, 0x1000, 101, 0x7000, 102, 103, 0x9000]);
        assert_eq!((c.paired, c.unplaced), (2, 0));
    }

    #[test]
    fn markers_find_the_evaluator_frames_without_their_addresses() {
        // The same stack with no evaluator symbols: frame k spans [0x1000 + 0x100 k, ...);
        // group 0's marker lies in frame 1, group 1's in frame 3.
        let native = [0x9000, 0x5551, 0x7000, 0x5552, 0x1000, 0x100];
        let keys = [103, 102, 101];
        let (out, c) = run(&native, true, &keys, &[2, 3], &[0x1180, 0x1308], false);
        assert_eq!(out, vec![0x100, 0x1000, 101, 0x7000, 102, 103, 0x9000]);
        assert_eq!((c.paired, c.unplaced), (2, 0));
    }

    #[test]
    fn a_marker_off_the_stack_pairs_nothing_and_an_empty_group_is_not_counted() {
        // 3.15's base frame lives in the thread state, not on the C stack: its (empty)
        // group has a marker no frame holds.
        let native = [0x9000, 0x5551, 0x1000, 0x100];
        let (out, c) = run(
            &native,
            true,
            &[101],
            &[1, 1],
            &[0x1100, 0x7fff_0000_0000],
            false,
        );
        assert_eq!(out, vec![0x100, 0x1000, 101, 0x9000]);
        assert_eq!((c.paired, c.unplaced), (1, 0));
    }

    #[test]
    fn a_group_whose_marker_is_in_no_frame_of_a_whole_stack_is_left_out_and_counted() {
        let native = [0x9000, 0x5551, 0x1000, 0x100];
        let (out, c) = run(&native, true, &[102, 101], &[1, 2], &[0x1100, 0x10], false);
        assert_eq!(out, vec![0x100, 0x1000, 102, 0x9000]);
        assert_eq!((c.paired, c.unplaced), (1, 1));
    }

    #[test]
    fn python_frames_go_above_a_stack_that_unwinding_could_not_finish() {
        // A sample in jitted code: no unwind tables, one native frame, and every group's
        // marker is above it.
        let native = [0x7f00_0000_1234];
        let (out, c) = run(
            &native,
            false,
            &[103, 102, 101],
            &[2, 3],
            &[0x2000, 0x3000],
            false,
        );
        assert_eq!(
            out,
            vec![
                marker_key(Marker::Incomplete),
                101,
                102,
                103,
                0x7f00_0000_1234
            ]
        );
        assert_eq!((c.paired, c.unplaced), (2, 0));
    }

    #[test]
    fn the_last_frame_of_an_incomplete_stack_does_not_claim_markers_above_it() {
        // Unwound: leaf, evaluator (frame 1, holds group 0's marker), glue (frame 2, the
        // last one): group 1's marker is above frame 2's stack pointer, in frames not seen.
        let native = [0x9000, 0x5551, 0x7000];
        let (out, c) = run(
            &native,
            false,
            &[103, 101],
            &[1, 2],
            &[0x1180, 0x1290],
            false,
        );
        assert_eq!(
            out,
            vec![marker_key(Marker::Incomplete), 101, 0x7000, 103, 0x9000]
        );
        assert_eq!((c.paired, c.unplaced), (2, 0));
    }

    #[test]
    fn an_entering_activation_without_a_group_stays_native_when_the_stack_is_complete() {
        // Inner evaluator has just been entered: 2 evaluator frames, 1 group.
        let native = [EVAL + 9, 0x7000, EVAL + 2, 0x1000, 0x100];
        let (out, _) = run(&native, true, &[101], &[1], &[], false);
        assert_eq!(out, vec![0x100, 0x1000, 101, 0x7000, EVAL + 9]);
    }

    #[test]
    fn a_cut_native_stack_pairs_from_the_inner_end_and_is_marked() {
        // Only the inner evaluator was unwound; the chain has two groups: the outer one
        // goes above the unwound frames.
        let native = [0x9000, EVAL + 1, 0x7000];
        let (out, _) = run(&native, false, &[103, 101], &[1, 2], &[], false);
        assert_eq!(
            out,
            vec![marker_key(Marker::Incomplete), 101, 0x7000, 103, 0x9000]
        );
    }

    #[test]
    fn a_stack_cut_at_the_depth_limit_is_marked_as_truncated() {
        let mut out = [0u64; 8];
        let native = Native {
            frames: &[3, 2, 1],
            sps: &[1, 2, 3],
            complete: false,
            cut: true,
        };
        let c = compose(&native, None, &mut out);
        assert_eq!(&out[..c.len], &[marker_key(Marker::Truncated), 1, 2, 3]);
    }

    #[test]
    fn an_empty_group_keeps_the_evaluator_frame() {
        let native = [EVAL + 1, 0x1000];
        let (out, _) = run(&native, true, &[], &[0], &[], false);
        assert_eq!(out, vec![0x1000, EVAL + 1]);
    }

    #[test]
    fn without_python_the_native_stack_is_recorded_outermost_first() {
        let mut out = [0u64; 8];
        let c = compose(
            &Native {
                frames: &[3, 2, 1],
                sps: &[1, 2, 3],
                complete: true,
                cut: false,
            },
            None,
            &mut out,
        );
        assert_eq!(&out[..c.len], &[1, 2, 3]);
        assert_eq!((c.paired, c.unplaced), (0, 0));
    }

    #[test]
    fn a_marker_goes_directly_inside_the_innermost_python_frame_or_outermost() {
        let gc = marker_key(Marker::GarbageCollection);
        let (py1, py2) = (python_key(1, Some(0)), python_key(2, Some(4)));
        let mut out = [0x100, py1, 0x7000, py2, 0x9000, 0x9100, 0, 0];
        let n = insert_below_innermost_python(&mut out, 6, gc);
        assert_eq!(&out[..n], &[0x100, py1, 0x7000, py2, gc, 0x9000, 0x9100]);
        // The innermost frame is Python: the marker becomes the leaf.
        let mut out = [0x100, py1, 0];
        let n = insert_below_innermost_python(&mut out, 2, gc);
        assert_eq!(&out[..n], &[0x100, py1, gc]);
        // No Python frame (a collection at shutdown): outermost.
        let mut out = [0x100, 0x1000, 0x9000, 0];
        let n = insert_below_innermost_python(&mut out, 3, gc);
        assert_eq!(&out[..n], &[gc, 0x100, 0x1000, 0x9000]);
        // Full: the innermost frame is dropped.
        let mut out = [0x100, py1, 0x9000];
        let n = insert_below_innermost_python(&mut out, 3, gc);
        assert_eq!(&out[..n], &[0x100, py1, gc]);
        let mut out = [0x100, py1];
        let n = insert_below_innermost_python(&mut out, 2, gc);
        assert_eq!(&out[..n], &[0x100, gc]);
        let mut out: [u64; 0] = [];
        assert_eq!(insert_below_innermost_python(&mut out, 0, gc), 0);
    }
}
