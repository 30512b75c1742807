//! Reading one thread's Python call stack from its signal handler: walk CPython's own
//! per-thread frame chain (its shadow stack) from the current frame outwards, capture each
//! frame's code, and cut the chain into the groups that each native evaluator activation
//! runs (shared/design/cpython.md §1).

use super::code::{is_shim, CodeError, Codes, Types};
use super::layout::{FrameModel, Layout, Position};
use super::read;
use crate::capture::frames::python_key;

/// Where the frames of a thread's Python stack were put, innermost first.
pub struct PyStack<'a> {
    /// Trace-tree keys of the Python frames, innermost first.
    pub keys: &'a mut [u64],
    /// `group_ends[g]` is the index in `keys` one past the last (outermost) frame of group
    /// `g`; group 0 is run by the innermost evaluator activation. Groups may be empty.
    pub group_ends: &'a mut [u16],
    /// `markers[g]` is the address of group `g`'s marker on the C stack of the evaluator
    /// activation that runs it (3.11: its `_PyCFrame`; 3.12+: its entry frame), 0 when the
    /// version has none (≤ 3.10) or it is unknown. At least as long as `group_ends`.
    pub markers: &'a mut [u64],
}

/// The result of a walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walked {
    /// Frames written to `keys`.
    pub frames: usize,
    /// Groups written to `group_ends`.
    pub groups: usize,
    /// The chain was longer than `keys` (or had more groups than `group_ends`): only the
    /// innermost part was read.
    pub truncated: bool,
    /// The index in `keys` of the first frame met at one of the walk's `anchors`
    /// addresses, and which anchor it is (its index in `anchors`).
    pub anchor_at: Option<(usize, usize)>,
}

/// Why a thread's Python stack could not be read; the sample keeps its native frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkError {
    /// A frame or code object failed validation.
    BadRead,
    /// Memory for captured names ran out.
    Full,
}

/// Walks the frame chain that starts at thread state `tstate`. `anchors` are addresses of
/// frames whose key's index the caller wants ([`Walked::anchor_at`]: the running asyncio
/// tasks' coroutines, [`super::tasks`]; empty for none). Async-signal-safe.
pub fn walk(
    tstate: u64,
    anchors: &[u64],
    layout: &Layout,
    types: &Types,
    codes: &Codes,
    out: PyStack<'_>,
    scratch: &mut [u8],
) -> Result<Walked, WalkError> {
    let mut frame = current_frame(tstate, layout).ok_or(WalkError::BadRead)?;
    let mut ahead = [(0u64, 0u64); READ_AHEAD];
    let ahead = read_ahead(frame, layout, codes, out.keys.len(), &mut ahead);
    let mut step = 0;
    let mut frames = 0usize;
    let mut groups = 0usize;
    let mut truncated = false;
    // 3.11: the innermost activation's `_PyCFrame`; each group's marker is the next one.
    let mut cframe = match layout.frame {
        FrameModel::IsEntry { .. } => {
            read::word(tstate + u64::from(layout.thread_frame)).unwrap_or(0)
        }
        _ => 0,
    };
    let (ends, markers) = (&mut *out.group_ends, &mut *out.markers);
    let limit = ends.len().min(markers.len());
    // Ends group `groups` after `frames` frames, with its marker; false when full.
    let mut close_group = |groups: &mut usize, frames: usize, marker: u64| -> bool {
        if *groups >= limit {
            return false;
        }
        ends[*groups] = frames as u16;
        markers[*groups] = marker;
        *groups += 1;
        true
    };
    let mut last_end = 0;
    let mut anchor_at = None;
    while frame != 0 {
        // The frame's code and caller, as the read-ahead read them (the same chain, frame
        // by frame), or read now past it.
        let (code, back) = match ahead.get(step) {
            Some(&pair) => pair,
            None => code_and_back(frame, layout).ok_or(WalkError::BadRead)?,
        };
        step += 1;
        match layout.frame {
            FrameModel::CStackOwner { offset, value } => {
                if read::byte(frame + u64::from(offset)).is_some_and(|owner| owner >= value) {
                    // The entry frame of an activation (a local of its C frame): ends its
                    // group and marks it, is not Python code.
                    if !close_group(&mut groups, frames, frame) {
                        truncated = true;
                        break;
                    }
                    last_end = frames;
                    frame = back;
                    continue;
                }
            }
            FrameModel::IsEntry { .. } | FrameModel::FrameObject => {}
        }
        if frames >= out.keys.len() {
            truncated = true;
            break;
        }
        if !(is_shim(code, layout) && read::has_type(code, types.code)) {
            let record = codes
                .record_for(code, layout, types, scratch)
                .map_err(|e| match e {
                    CodeError::Full => WalkError::Full,
                    CodeError::NotCode | CodeError::BadField => WalkError::BadRead,
                })?;
            out.keys[frames] = python_key(record, position(frame, code, layout));
            if anchor_at.is_none() {
                if let Some(which) = anchors.iter().position(|&a| a == frame) {
                    anchor_at = Some((frames, which));
                }
            }
            frames += 1;
        }
        let ends_group = match layout.frame {
            FrameModel::FrameObject => Some(0),
            FrameModel::IsEntry {
                offset,
                cframe_previous,
            } => read::byte(frame + u64::from(offset))
                .is_some_and(|b| b != 0)
                .then(|| {
                    let marker = cframe;
                    cframe = match cframe {
                        0 => 0,
                        c => read::word(c + u64::from(cframe_previous)).unwrap_or(0),
                    };
                    marker
                }),
            FrameModel::CStackOwner { .. } => None,
        };
        if let Some(marker) = ends_group {
            if !close_group(&mut groups, frames, marker) {
                truncated = true;
                break;
            }
            last_end = frames;
        }
        frame = back;
    }
    // Frames after the last marker belong to the outermost activation.
    if frames > last_end && !close_group(&mut groups, frames, cframe) {
        truncated = true;
    }
    Ok(Walked {
        frames,
        groups,
        truncated,
        anchor_at,
    })
}

/// Frames [`read_ahead`] looks at, at most.
const READ_AHEAD: usize = 48;

/// Reads the code and caller of the innermost frames of the chain from `frame` (at most
/// `limit` and [`READ_AHEAD`]) into `out`, for [`walk`] to use, and starts fetching the
/// code cache's entry of each code object, so that those cache misses overlap instead of
/// each stalling `record_for` in turn. Between two samples the program's own work evicts
/// the entries: on bench/overhead's `many_stacks.py` (3,000 functions) that miss and the
/// record's after it were 90 % of `record_for`'s time (`perf annotate`), and reading ahead
/// took the handler's median from 5.9 to 5.4 µs at 4 kHz and 8.7 to 7.9 at 1 kHz (3.12,
/// bench/overhead/results-2026-12-07-readahead.md). Fetching the
/// records too (a second pass reading each entry) or the code objects (the program has
/// just run them) gained nothing more and cost a hot cache more. Returns the frames read;
/// a frame that fails a check ends them, and [`walk`] then reads it and fails as before.
fn read_ahead<'a>(
    mut frame: u64,
    layout: &Layout,
    codes: &Codes,
    limit: usize,
    out: &'a mut [(u64, u64); READ_AHEAD],
) -> &'a [(u64, u64)] {
    let mut n = 0;
    while frame != 0 && n < limit.min(READ_AHEAD) {
        let Some((code, back)) = code_and_back(frame, layout) else {
            break;
        };
        codes.prefetch(code);
        out[n] = (code, back);
        n += 1;
        frame = back;
    }
    &out[..n]
}

/// The code object and the caller of the frame at `frame`, read checked; `None` when the
/// frame's address is implausible or a read fails.
fn code_and_back(frame: u64, layout: &Layout) -> Option<(u64, u64)> {
    if !read::plausible(frame, 80, 8) {
        return None;
    }
    let code = read::word(frame + u64::from(layout.frame_code))?;
    let back = read::word(frame + u64::from(layout.frame_back))?;
    Some((code & layout.frame_code_mask, back))
}

/// The thread's innermost frame (0 when it runs no Python code).
pub(crate) fn current_frame(tstate: u64, layout: &Layout) -> Option<u64> {
    let field = read::word(tstate + u64::from(layout.thread_frame))?;
    match layout.cframe_current {
        None => Some(field),
        Some(_) if field == 0 => Some(0),
        Some(offset) => read::word(field + u64::from(offset)),
    }
}

/// The byte offset of the frame's current instruction in its code's bytecode; `None`
/// before the first instruction.
pub(crate) fn position(frame: u64, code: u64, layout: &Layout) -> Option<u32> {
    let bytes: i64 = match layout.position {
        Position::LastiBytes { offset } => i64::from(read::int(frame + u64::from(offset))?),
        Position::LastiCodeUnits { offset } => 2 * i64::from(read::int(frame + u64::from(offset))?),
        Position::Pointer { offset, code_start } => {
            let ptr = read::word(frame + u64::from(offset))?;
            ptr as i64 - (code + u64::from(code_start)) as i64
        }
    };
    u32::try_from(bytes).ok()
}
