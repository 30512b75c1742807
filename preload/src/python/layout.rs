//! Where each CPython version keeps what the sampler reads: the one place that knows
//! version-specific layouts. Everything else asks a [`Layout`].
//!
//! Offsets are bytes on x86-64, read from each version's headers (`Include/cpython/
//! pystate.h`, `frameobject.h` / `Include/internal/pycore_frame.h`, `code.h`,
//! `unicodeobject.h`, `bytesobject.h`) and collected in `shared/design/cpython.md` §3.

/// How the frames of one thread are chained and grouped per native evaluator activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameModel {
    /// 2.7 – 3.10: `PyFrameObject`s linked by `f_back`; every evaluator activation runs
    /// exactly one of them.
    FrameObject,
    /// 3.11: `_PyInterpreterFrame`s linked by `previous`; the byte at `offset` (`is_entry`)
    /// is set on the outermost frame of each evaluator activation.
    IsEntry { offset: u16 },
    /// 3.12+: an activation's frames end at a frame whose `owner` byte (at `offset`) is
    /// `FRAME_OWNED_BY_CSTACK` (`value`); that frame is plumbing, not Python code.
    CStackOwner { offset: u16, value: u8 },
}

/// Where a frame keeps its current instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    /// `int f_lasti` at `offset`, a byte offset into `co_code` (2.7 – 3.9); -1 before the
    /// first instruction.
    LastiBytes { offset: u16 },
    /// `int f_lasti` at `offset`, in 2-byte code units (3.10).
    LastiCodeUnits { offset: u16 },
    /// A pointer at `offset` into the code object's own bytecode, which starts
    /// `code_start` bytes into the code object (`co_code_adaptive`; 3.11+).
    Pointer { offset: u16, code_start: u16 },
}

/// The format of a code object's line table (see [`crate::python::lines`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineTable {
    /// `co_lnotab` (≤ 3.9): (address step, line step) byte pairs; the line step is signed
    /// from 3.6, unsigned in 2.7.
    Lnotab { signed_lines: bool },
    /// `co_linetable` of 3.10: (byte step, signed line step, -128 = no line) pairs.
    Linetable310,
    /// The location table of 3.11+ (`Objects/locations.md`).
    Locations,
}

/// How names and file names are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrModel {
    /// 2.7 `PyStringObject`: `ob_size` at 16, bytes at `data`.
    Bytes { data: u16 },
    /// 3.x `PyUnicodeObject` (PEP 393): length at 16, state bits at 32; compact ASCII text
    /// starts at `ascii_data`, other compact strings at `compact_data`.
    Unicode { ascii_data: u16, compact_data: u16 },
}

/// Everything version-specific the sampler reads. All offsets in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `(major, minor)`.
    pub version: (u8, u8),
    /// Offset in `PyThreadState` of the current frame (≤3.10 `frame`, 3.13 `current_frame`)
    /// or of the `cframe` pointer (3.11, 3.12).
    pub thread_frame: u16,
    /// 3.11/3.12: offset of `current_frame` inside `_PyCFrame`.
    pub cframe_current: Option<u16>,
    /// How frames are grouped into evaluator activations.
    pub frame: FrameModel,
    /// Offset of the code object pointer in a frame (`f_code`, 3.13 `f_executable`).
    pub frame_code: u16,
    /// Offset of the caller link (`f_back` / `previous`).
    pub frame_back: u16,
    /// Where the current instruction is kept.
    pub position: Position,
    /// 3.13: (offset of `co_flags`, flag bit) that marks interpreter shim code such as
    /// `_Py_InitCleanup`, which is not user code.
    pub shim_flag: Option<(u16, u32)>,
    /// `co_filename`.
    pub co_filename: u16,
    /// `co_name`.
    pub co_name: u16,
    /// `co_qualname` (3.11+).
    pub co_qualname: Option<u16>,
    /// `co_firstlineno` (a C `int`).
    pub co_firstlineno: u16,
    /// `co_lnotab` (≤3.9) / `co_linetable` (3.10+): a bytes object.
    pub co_linetable: u16,
    /// Format of that table.
    pub line_table: LineTable,
    /// Offset of the data in a bytes object (`ob_sval`).
    pub bytes_data: u16,
    /// How text objects are laid out.
    pub strings: StrModel,
}

impl Layout {
    /// The layout of CPython `major.minor`, or `None` for a version this profiler does not
    /// know (the sampler then records native frames only).
    pub fn for_version(major: u8, minor: u8) -> Option<Layout> {
        let frame_object = |lasti: u16, filename: u16, first: u16, table: u16| Layout {
            version: (major, minor),
            thread_frame: 24,
            cframe_current: None,
            frame: FrameModel::FrameObject,
            frame_code: 32,
            frame_back: 24,
            position: if minor == 10 {
                Position::LastiCodeUnits { offset: lasti }
            } else {
                Position::LastiBytes { offset: lasti }
            },
            shim_flag: None,
            co_filename: filename,
            co_name: filename + 8,
            co_qualname: None,
            co_firstlineno: first,
            co_linetable: table,
            line_table: if minor == 10 {
                LineTable::Linetable310
            } else {
                LineTable::Lnotab { signed_lines: true }
            },
            bytes_data: 32,
            strings: StrModel::Unicode { ascii_data: 48, compact_data: 72 },
        };
        let interpreter_frame = |thread_frame: u16, cframe_current: Option<u16>| Layout {
            version: (major, minor),
            thread_frame,
            cframe_current,
            frame: FrameModel::CStackOwner { offset: 70, value: 3 },
            frame_code: 0,
            frame_back: 8,
            position: Position::Pointer { offset: 56, code_start: 192 },
            shim_flag: None,
            co_filename: 112,
            co_name: 120,
            co_qualname: Some(128),
            co_firstlineno: 68,
            co_linetable: 136,
            line_table: LineTable::Locations,
            bytes_data: 32,
            strings: StrModel::Unicode { ascii_data: 40, compact_data: 56 },
        };
        match (major, minor) {
            (2, 7) => Some(Layout {
                thread_frame: 16,
                position: Position::LastiBytes { offset: 120 },
                co_filename: 80,
                co_name: 88,
                co_firstlineno: 96,
                co_linetable: 104,
                line_table: LineTable::Lnotab { signed_lines: false },
                bytes_data: 36,
                strings: StrModel::Bytes { data: 36 },
                ..frame_object(0, 0, 0, 0)
            }),
            (3, 6) => Some(frame_object(120, 96, 36, 112)),
            (3, 7) => Some(frame_object(104, 96, 36, 112)),
            (3, 8) | (3, 9) => Some(frame_object(104, 104, 40, 120)),
            (3, 10) => Some(frame_object(96, 104, 40, 120)),
            (3, 11) => Some(Layout {
                frame: FrameModel::IsEntry { offset: 68 },
                frame_code: 32,
                frame_back: 48,
                position: Position::Pointer { offset: 56, code_start: 184 },
                co_firstlineno: 72,
                strings: StrModel::Unicode { ascii_data: 48, compact_data: 72 },
                ..interpreter_frame(56, Some(8))
            }),
            (3, 12) => Some(interpreter_frame(56, Some(0))),
            (3, 13) => Some(Layout {
                position: Position::Pointer { offset: 56, code_start: 200 },
                shim_flag: Some((48, 0x0200_0000)),
                ..interpreter_frame(72, None)
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_version_has_a_layout_and_others_do_not() {
        for (major, minor) in [(2, 7), (3, 6), (3, 7), (3, 8), (3, 9), (3, 10), (3, 11), (3, 12), (3, 13)] {
            let layout = Layout::for_version(major, minor).expect("known version");
            assert_eq!(layout.version, (major, minor));
        }
        assert!(Layout::for_version(3, 5).is_none());
        assert!(Layout::for_version(4, 0).is_none());
    }

    #[test]
    fn layouts_match_the_measured_table() {
        // Spot checks against shared/design/cpython.md §3.
        let l = Layout::for_version(3, 11).unwrap();
        assert_eq!((l.thread_frame, l.cframe_current, l.frame_code, l.frame_back), (56, Some(8), 32, 48));
        assert_eq!(l.frame, FrameModel::IsEntry { offset: 68 });
        assert_eq!((l.co_firstlineno, l.co_linetable, l.co_qualname), (72, 136, Some(128)));
        let l = Layout::for_version(3, 13).unwrap();
        assert_eq!((l.thread_frame, l.cframe_current, l.frame_code), (72, None, 0));
        assert_eq!(l.position, Position::Pointer { offset: 56, code_start: 200 });
        let l = Layout::for_version(2, 7).unwrap();
        assert_eq!((l.thread_frame, l.co_filename, l.co_name, l.co_firstlineno), (16, 80, 88, 96));
        let l = Layout::for_version(3, 10).unwrap();
        assert_eq!(l.position, Position::LastiCodeUnits { offset: 96 });
    }
}
