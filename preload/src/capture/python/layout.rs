//! Where each CPython version keeps what the sampler reads: the one place that knows
//! version-specific layouts. Everything else asks a [`Layout`].
//!
//! Offsets are bytes on x86-64. Up to 3.12 they come from a table read from each version's
//! headers (`Include/cpython/pystate.h`, `frameobject.h` / `Include/internal/
//! pycore_frame.h`, `code.h`, `unicodeobject.h`, `bytesobject.h`), collected in
//! `shared/design/cpython.md` §3. From 3.13 the interpreter publishes them itself:
//! `_PyRuntime` starts with `_Py_DebugOffsets` (`Include/internal/pycore_runtime.h`), read
//! at start-up by [`Layout::from_debug_offsets`]; only what it lacks is kept here per
//! version (`DebugConstants`). A newer version is tried with the newest known struct
//! revision and constants, and refused unless the values it yields are plausible.

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

/// The format of a code object's line table (see [`crate::capture::python::lines`]).
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

/// How the handler finds the interrupted thread's `PyThreadState*`
/// (shared/design/cpython.md §3–4). Each way reads only memory, without locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadStateLookup {
    /// 3.8+: `pthread_getspecific` on the TSS key that the audit hook found when it attached
    /// (`_PyRuntime.gilstate.autoTSSkey`, whose offset changes with every version).
    AttachedKey,
    /// 3.7: the `Py_tss_t` (`int _is_initialized; pthread_key_t _key`) at `offset` bytes into
    /// the exported `_PyRuntime` (`gilstate.autoTSSkey`, `Include/internal/pystate.h`),
    /// readable from the first instruction; `_is_initialized` is 0 until `_PyGILState_Init`
    /// and after `_PyGILState_Fini`.
    RuntimeTss { offset: u16 },
    /// 3.6: `static int autoTLSkey` of `Python/pystate.c`, a local symbol (`.symtab` only);
    /// -1 until `_PyGILState_Init` and after `_PyGILState_Fini`. A stripped 3.6 falls back to
    /// [`ThreadStateLookup::AttachedKey`], attached at the first extension-module import.
    StaticKey { symbol: &'static str },
    /// 2.7: its thread-state TLS takes a mutex (`Python/thread.c` `keymutex`), so it is not
    /// read. Instead the exported `_PyThreadState_Current` (the GIL holder's state) is used
    /// when its `thread_id` (`pthread_self()` of its thread) is the interrupted thread's. A
    /// thread that does not hold the GIL finds its state in the interpreter's list of thread
    /// states (`interp->tstate_head`, linked by `next`), and remembers it: the next sample
    /// only checks that the remembered state is still its own and still alive.
    GilHolder {
        symbol: &'static str,
        offsets: ThreadStateOffsets,
    },
}

/// 2.7's `PyThreadState` and `PyInterpreterState` fields that find a thread's state without
/// its TLS (`Include/pystate.h` of 2.7). Bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadStateOffsets {
    /// `tstate->next`, the next state of the same interpreter.
    pub next: u16,
    /// `tstate->interp`.
    pub interp: u16,
    /// `tstate->thread_id` (a `long`: the `pthread_t` of the thread that owns it).
    pub thread_id: u16,
    /// `interp->tstate_head`, the first thread state of the interpreter.
    pub tstate_head: u16,
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
    /// How the interrupted thread's thread state is found.
    pub thread_state: ThreadStateLookup,
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
            strings: StrModel::Unicode {
                ascii_data: 48,
                compact_data: 72,
            },
            thread_state: ThreadStateLookup::AttachedKey,
        };
        let interpreter_frame = |thread_frame: u16, cframe_current: Option<u16>| Layout {
            version: (major, minor),
            thread_frame,
            cframe_current,
            frame: FrameModel::CStackOwner {
                offset: 70,
                value: 3,
            },
            frame_code: 0,
            frame_back: 8,
            position: Position::Pointer {
                offset: 56,
                code_start: 192,
            },
            shim_flag: None,
            co_filename: 112,
            co_name: 120,
            co_qualname: Some(128),
            co_firstlineno: 68,
            co_linetable: 136,
            line_table: LineTable::Locations,
            bytes_data: 32,
            strings: StrModel::Unicode {
                ascii_data: 40,
                compact_data: 56,
            },
            thread_state: ThreadStateLookup::AttachedKey,
        };
        match (major, minor) {
            (2, 7) => Some(Layout {
                thread_frame: 16,
                position: Position::LastiBytes { offset: 120 },
                co_filename: 80,
                co_name: 88,
                co_firstlineno: 96,
                co_linetable: 104,
                line_table: LineTable::Lnotab {
                    signed_lines: false,
                },
                bytes_data: 36,
                strings: StrModel::Bytes { data: 36 },
                thread_state: ThreadStateLookup::GilHolder {
                    symbol: "_PyThreadState_Current",
                    offsets: ThreadStateOffsets {
                        next: 0,
                        interp: 8,
                        thread_id: 144,
                        tstate_head: 8,
                    },
                },
                ..frame_object(0, 0, 0, 0)
            }),
            (3, 6) => Some(Layout {
                thread_state: ThreadStateLookup::StaticKey {
                    symbol: "autoTLSkey",
                },
                ..frame_object(120, 96, 36, 112)
            }),
            (3, 7) => Some(Layout {
                thread_state: ThreadStateLookup::RuntimeTss { offset: 1504 },
                ..frame_object(104, 96, 36, 112)
            }),
            (3, 8) | (3, 9) => Some(frame_object(104, 104, 40, 120)),
            (3, 10) => Some(frame_object(96, 104, 40, 120)),
            (3, 11) => Some(Layout {
                frame: FrameModel::IsEntry { offset: 68 },
                frame_code: 32,
                frame_back: 48,
                position: Position::Pointer {
                    offset: 56,
                    code_start: 184,
                },
                co_firstlineno: 72,
                strings: StrModel::Unicode {
                    ascii_data: 48,
                    compact_data: 72,
                },
                ..interpreter_frame(56, Some(8))
            }),
            (3, 12) => Some(interpreter_frame(56, Some(0))),
            // 3.13+: see from_debug_offsets.
            _ => None,
        }
    }

    /// The layout of CPython `major.minor` (3.13+) from the `_Py_DebugOffsets` at the start of
    /// its `_PyRuntime`, given as 64-bit words (at least [`DEBUG_OFFSETS_WORDS`]). `None` when
    /// the cookie is wrong or the offsets are implausible.
    pub fn from_debug_offsets(words: &[u64], major: u8, minor: u8) -> Option<Layout> {
        if words.len() < DEBUG_OFFSETS_WORDS || words[0].to_le_bytes() != *b"xdebugpy" {
            return None;
        }
        // `version` is the runtime's PY_VERSION_HEX: it must be the version we were told.
        let hex = words[1];
        if (hex >> 24) as u8 != major || ((hex >> 16) & 0xff) as u8 != minor || words[2] != 0 {
            return None; // other version, or a free-threaded build (different object layout)
        }
        let map = DebugOffsetsMap::for_version(major, minor);
        let constants = DebugConstants::for_version(major, minor);
        let w = |index: usize| -> Option<u16> { u16::try_from(words[index]).ok() };
        let frame_size = words[map.frame_size];
        let code_size = words[map.code_size];
        let layout = Layout {
            version: (major, minor),
            thread_frame: w(map.current_frame)?,
            cframe_current: None,
            frame: FrameModel::CStackOwner {
                offset: w(map.owner)?,
                value: constants.cstack_owner,
            },
            frame_code: w(map.executable)?,
            frame_back: w(map.previous)?,
            position: Position::Pointer {
                offset: w(map.instr_ptr)?,
                code_start: w(map.code_adaptive)?,
            },
            shim_flag: Some((constants.co_flags, constants.shim_flag)),
            co_filename: w(map.filename)?,
            co_name: w(map.name)?,
            co_qualname: Some(w(map.qualname)?),
            co_firstlineno: w(map.firstlineno)?,
            co_linetable: w(map.linetable)?,
            line_table: LineTable::Locations,
            bytes_data: w(map.bytes_sval)?,
            strings: StrModel::Unicode {
                ascii_data: w(map.ascii_size)?,
                // PyCompactUnicodeObject adds utf8_length and utf8 to PyASCIIObject.
                compact_data: w(map.ascii_size)? + 16,
            },
            thread_state: ThreadStateLookup::AttachedKey,
        };
        // Plausibility: every frame field inside the frame, every code field inside the code
        // object header, pointers aligned.
        let in_frame = |off: u16, len: u64| u64::from(off) + len <= frame_size;
        let in_code = |off: u16, len: u64| u64::from(off) + len <= code_size;
        let plausible = frame_size >= 16
            && in_frame(layout.frame_code, 8)
            && in_frame(layout.frame_back, 8)
            && matches!(layout.position, Position::Pointer { offset, .. } if in_frame(offset, 8))
            && matches!(layout.frame, FrameModel::CStackOwner { offset, .. } if in_frame(offset, 1))
            && [
                layout.co_filename,
                layout.co_name,
                layout.co_qualname.unwrap_or(1),
                layout.co_linetable,
            ]
            .iter()
            .all(|&o| o % 8 == 0)
            && in_code(layout.co_filename, 8)
            && in_code(layout.co_linetable, 8)
            && in_code(layout.co_firstlineno, 4)
            && matches!(layout.position, Position::Pointer { code_start, .. } if u64::from(code_start) <= code_size)
            && layout.thread_frame.is_multiple_of(8);
        plausible.then_some(layout)
    }
}

/// How many 64-bit words of `_Py_DebugOffsets` [`Layout::from_debug_offsets`] reads.
pub const DEBUG_OFFSETS_WORDS: usize = 72;

/// Word indexes, inside `_Py_DebugOffsets`, of the fields the sampler uses: one revision of
/// the struct. 3.13's, read from a 3.13.0 build: `cookie, version, free_threaded`, then
/// `runtime_state` (3 words), `interpreter_state` (13), `thread_state` (9),
/// `interpreter_frame` (6), `code_object` (10), `pyobject` (2), `type_object` (4),
/// `tuple_object` (3), `list_object` (3), `dict_object` (3), `float_object` (2),
/// `long_object` (3), `bytes_object` (3), `unicode_object` (4), each starting with its size.
#[derive(Clone, Copy, Debug)]
struct DebugOffsetsMap {
    current_frame: usize,
    frame_size: usize,
    previous: usize,
    executable: usize,
    instr_ptr: usize,
    owner: usize,
    code_size: usize,
    filename: usize,
    name: usize,
    qualname: usize,
    linetable: usize,
    firstlineno: usize,
    code_adaptive: usize,
    bytes_sval: usize,
    ascii_size: usize,
}

impl DebugOffsetsMap {
    /// The struct revision of `major.minor`; newer versions get the newest one known.
    fn for_version(_major: u8, _minor: u8) -> DebugOffsetsMap {
        DebugOffsetsMap {
            current_frame: 23,
            frame_size: 28,
            previous: 29,
            executable: 30,
            instr_ptr: 31,
            owner: 33,
            code_size: 34,
            filename: 35,
            name: 36,
            qualname: 37,
            linetable: 38,
            firstlineno: 39,
            code_adaptive: 43,
            bytes_sval: 66,
            ascii_size: 70,
        }
    }
}

/// What `_Py_DebugOffsets` does not publish, per version (`Include/internal/pycore_frame.h`,
/// `Include/cpython/code.h`).
#[derive(Clone, Copy, Debug)]
struct DebugConstants {
    /// `FRAME_OWNED_BY_CSTACK`.
    cstack_owner: u8,
    /// Offset of `co_flags` in a code object.
    co_flags: u16,
    /// The `co_flags` bit of interpreter shim code (`_Py_InitCleanup`).
    shim_flag: u32,
}

impl DebugConstants {
    /// The constants of `major.minor`; newer versions get the newest ones known.
    fn for_version(_major: u8, _minor: u8) -> DebugConstants {
        DebugConstants {
            cstack_owner: 3,
            co_flags: 48,
            shim_flag: 0x0200_0000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_version_has_a_layout_and_others_do_not() {
        for (major, minor) in [
            (2, 7),
            (3, 6),
            (3, 7),
            (3, 8),
            (3, 9),
            (3, 10),
            (3, 11),
            (3, 12),
        ] {
            let layout = Layout::for_version(major, minor).expect("known version");
            assert_eq!(layout.version, (major, minor));
        }
        assert!(Layout::for_version(3, 5).is_none());
        assert!(
            Layout::for_version(3, 13).is_none(),
            "3.13+ comes from _Py_DebugOffsets"
        );
        assert!(Layout::for_version(4, 0).is_none());
    }

    #[test]
    fn layouts_match_the_measured_table() {
        // Spot checks against shared/design/cpython.md §3.
        let l = Layout::for_version(3, 11).unwrap();
        assert_eq!(
            (l.thread_frame, l.cframe_current, l.frame_code, l.frame_back),
            (56, Some(8), 32, 48)
        );
        assert_eq!(l.frame, FrameModel::IsEntry { offset: 68 });
        assert_eq!(
            (l.co_firstlineno, l.co_linetable, l.co_qualname),
            (72, 136, Some(128))
        );
        let l = Layout::for_version(2, 7).unwrap();
        assert_eq!(
            (l.thread_frame, l.co_filename, l.co_name, l.co_firstlineno),
            (16, 80, 88, 96)
        );
        let l = Layout::for_version(3, 10).unwrap();
        assert_eq!(l.position, Position::LastiCodeUnits { offset: 96 });
    }

    /// The first 72 words of `_PyRuntime` of the pyenv 3.13.0 build on this machine.
    const DEBUG_OFFSETS_3_13_0: [u64; 72] = [
        u64::from_le_bytes(*b"xdebugpy"),
        0x030d_00f0,
        0,
        283320,
        608,
        632,
        194968,
        7272,
        7264,
        7344,
        7400,
        7656,
        7640,
        7648,
        16,
        7752,
        0,
        7768,
        7760,
        304,
        0,
        8,
        16,
        72,
        152,
        160,
        232,
        32,
        80,
        8,
        0,
        56,
        72,
        70,
        208,
        112,
        120,
        128,
        136,
        68,
        52,
        96,
        104,
        200,
        16,
        8,
        416,
        24,
        88,
        168,
        32,
        24,
        16,
        40,
        24,
        16,
        48,
        32,
        40,
        24,
        16,
        32,
        16,
        24,
        40,
        16,
        32,
        64,
        32,
        16,
        40,
        0,
    ];

    #[test]
    fn debug_offsets_of_3_13_give_the_measured_layout() {
        let l = Layout::from_debug_offsets(&DEBUG_OFFSETS_3_13_0, 3, 13).expect("plausible");
        // shared/design/cpython.md §3, 3.13 column.
        assert_eq!(
            (l.thread_frame, l.cframe_current, l.frame_code, l.frame_back),
            (72, None, 0, 8)
        );
        assert_eq!(
            l.position,
            Position::Pointer {
                offset: 56,
                code_start: 200
            }
        );
        assert_eq!(
            l.frame,
            FrameModel::CStackOwner {
                offset: 70,
                value: 3
            }
        );
        assert_eq!(
            (l.co_filename, l.co_name, l.co_qualname),
            (112, 120, Some(128))
        );
        assert_eq!(
            (l.co_firstlineno, l.co_linetable, l.bytes_data),
            (68, 136, 32)
        );
        assert_eq!(
            l.strings,
            StrModel::Unicode {
                ascii_data: 40,
                compact_data: 56
            }
        );
        assert_eq!(l.shim_flag, Some((48, 0x0200_0000)));
    }

    #[test]
    fn debug_offsets_are_refused_when_wrong() {
        let mut words = DEBUG_OFFSETS_3_13_0;
        assert!(
            Layout::from_debug_offsets(&words, 3, 14).is_none(),
            "version mismatch"
        );
        words[2] = 1;
        assert!(
            Layout::from_debug_offsets(&words, 3, 13).is_none(),
            "free-threaded build"
        );
        let mut words = DEBUG_OFFSETS_3_13_0;
        words[0] = 0;
        assert!(
            Layout::from_debug_offsets(&words, 3, 13).is_none(),
            "cookie"
        );
        let mut words = DEBUG_OFFSETS_3_13_0;
        words[33] = 4000; // frame owner outside the frame
        assert!(
            Layout::from_debug_offsets(&words, 3, 13).is_none(),
            "implausible"
        );
        assert!(
            Layout::from_debug_offsets(&DEBUG_OFFSETS_3_13_0[..10], 3, 13).is_none(),
            "short"
        );
    }
}
