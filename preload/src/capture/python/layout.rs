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
    /// is set on the outermost frame of each evaluator activation. Each activation's local
    /// `_PyCFrame` is its marker on the C stack: `tstate->cframe` is the innermost one, and
    /// each links to the next outer one at `cframe_previous`.
    IsEntry { offset: u16, cframe_previous: u16 },
    /// 3.12+: an activation's frames end at its entry frame, a local of the evaluator's C
    /// frame (so also its marker on the C stack), whose `owner` byte (at `offset`) is at
    /// least `value`: `FRAME_OWNED_BY_CSTACK` (3) in 3.12/3.13, `FRAME_OWNED_BY_INTERPRETER`
    /// (3) from 3.14, where `FRAME_OWNED_BY_CSTACK` became 4 (`pycore_frame.h`,
    /// `pycore_interpframe_structs.h`). That frame is plumbing, not Python code. 3.15 also
    /// ends every chain with the thread's base frame (same owner, kept in the thread state,
    /// not on the C stack).
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
    /// -1 until `_PyGILState_Init` and after `_PyGILState_Fini`. In a stripped 3.6 it is the
    /// variable that `PyGILState_GetThisThreadState` loads into `%edi` for
    /// `PyThread_get_key_value`.
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

/// Where a variable that the garbage-collection check reads lives (see [`GcLayout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// `offset` bytes into the sampled thread's interpreter state (`tstate->interp`).
    Interpreter(u16),
    /// `offset` bytes into the struct that the pointer `pointer` bytes into the interpreter
    /// state points to (3.12+: `interp->ceval.gil`, the GIL that interpreter uses — its own
    /// `_gil`, or the main interpreter's when it shares it).
    ThroughInterpreter { pointer: u16, offset: u16 },
    /// `offset` bytes into the exported `_PyRuntime` (3.7 – 3.11).
    Runtime(u16),
    /// A variable of the object that defines the C-API, by symbol: exported (`.dynsym`), or
    /// a `static` one from `.symtab` (absent from stripped builds).
    Symbol(&'static str),
    /// A `static int` flag by symbol as [`Place::Symbol`]; in a build stripped of it, the
    /// flag that the exported function `tester` tests first
    /// (`mov disp32(%rip),%eax; test %eax,%eax`, as 2.7's and 3.6's `PyGC_Collect` start
    /// with `if (collecting)`).
    Flag {
        symbol: &'static str,
        tester: &'static str,
    },
}

/// How a sample tells that its thread is running the cyclic garbage collector: the
/// collector's `collecting` flag is set, and the thread holds the GIL (a collection runs
/// with the GIL held, on the thread that triggered it — from 3.12 whichever thread's eval
/// breaker saw it scheduled; another thread seen then runs without the GIL, or runs
/// Python code of a finalizer that released it). Offsets in bytes, from each version's
/// headers (`offsetof` compiled against pyenv's installed `include/`), checked on every
/// installed interpreter by reading them with `ctypes` inside a collection (a finalizer
/// run by `gc.collect()`: flag 1 and this thread the holder) and outside it (flag 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcLayout {
    /// `PyThreadState.interp`.
    pub thread_interp: u16,
    /// A C `int`, non-zero while the interpreter collects.
    pub collecting: Place,
    /// A `PyThreadState*` that is the GIL holder's state.
    pub holder: Place,
    /// A C `int`, non-zero while the GIL is held, when `holder` keeps its value after the GIL
    /// is released (`gil->last_holder`); `None` when the holder is cleared on release
    /// (`_PyThreadState_Current`, `gilstate.tstate_current`).
    pub locked: Option<Place>,
}

impl GcLayout {
    /// The garbage-collection check of `major.minor` ≤ 3.12 (3.13+: from `_Py_DebugOffsets`,
    /// [`Layout::from_debug_offsets`]).
    fn for_version(major: u8, minor: u8) -> Option<GcLayout> {
        let runtime = |collecting: Place, tstate_current: u16| GcLayout {
            thread_interp: 16,
            collecting,
            holder: Place::Runtime(tstate_current),
            locked: None,
        };
        Some(match (major, minor) {
            // 2.7 and 3.6: `static int collecting` of `Modules/gcmodule.c`, and the exported
            // `_PyThreadState_Current` (`Python/pystate.c`), cleared when the GIL is
            // released. `PyThreadState.interp` follows `next` in 2.7 (`Include/pystate.h`).
            (2, 7) | (3, 6) => GcLayout {
                thread_interp: if major == 2 { 8 } else { 16 },
                collecting: Place::Flag {
                    symbol: "collecting",
                    tester: "PyGC_Collect",
                },
                holder: Place::Symbol("_PyThreadState_Current"),
                locked: None,
            },
            // 3.7, 3.8: `_PyRuntime.gc.collecting` (`struct _gc_runtime_state` moved into
            // `_PyRuntimeState`: 3.7 `Include/internal/pystate.h`, 3.8
            // `Include/internal/pycore_pystate.h`), `_PyRuntime.gilstate.tstate_current`.
            (3, 7) => runtime(Place::Runtime(632), 1480),
            (3, 8) => runtime(Place::Runtime(544), 1368),
            // 3.9 – 3.11: per interpreter, `interp->gc.collecting` (`pycore_interp.h`);
            // `_PyRuntime.gilstate.tstate_current` (`pycore_runtime.h`). Debian's 3.11.2
            // equals 3.11.7.
            (3, 9) | (3, 10) => runtime(Place::Interpreter(816), 568),
            (3, 11) => runtime(Place::Interpreter(848), 576),
            // 3.12: `interp->gc.collecting`; the GIL is `*interp->ceval.gil`
            // (`pycore_ceval_state.h`), whose `last_holder` (8) and `locked` (16) are those of
            // `struct _gil_runtime_state` (`pycore_gil.h`) in every version from 3.7.
            (3, 12) => GcLayout {
                thread_interp: 16,
                collecting: Place::Interpreter(312),
                holder: Place::ThroughInterpreter {
                    pointer: 384,
                    offset: 8,
                },
                locked: Some(Place::ThroughInterpreter {
                    pointer: 384,
                    offset: 16,
                }),
            },
            _ => return None,
        })
    }
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
    /// Bits of the word at `frame_code` that hold the pointer: 3.14 made `f_executable` a
    /// tagged `_PyStackRef` whose low two bits are flags (`pycore_stackref.h`).
    pub frame_code_mask: u64,
    /// Offset of the caller link (`f_back` / `previous`).
    pub frame_back: u16,
    /// Where the current instruction is kept.
    pub position: Position,
    /// Offset of the frame's first local (`f_localsplus` ≤ 3.10, `localsplus` 3.11+): a
    /// method's `self` while it runs (lock names, [`super::creation`]). Measured with
    /// ctypes (the address of a function's argument found in its frame): 360 on 3.7–3.9,
    /// 352 on 3.10, 72 on 3.11 and 3.12 (`Include/internal/pycore_frame.h`); 3.13+ from
    /// `_Py_DebugOffsets` (a tagged `_PyStackRef` from 3.14). `None` before 3.7.
    pub frame_locals: Option<u16>,
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
    /// `PyThreadState.thread_id`: the `pthread_t` of the thread the state belongs to
    /// (`PyThread_get_thread_ident()`, set when the state is bound to its thread). A state
    /// read for *another* thread (wall mode, `pyigprof dump`) is used only while this still
    /// names that thread: a state freed by a thread that ended, and its memory reused, no
    /// longer does. Measured with `ctypes` on every interpreter here (the value of
    /// `threading.get_ident()` in the calling thread's state): 2.7 144, 3.6 152,
    /// 3.7–3.10 176, 3.11 152, 3.12 136; 3.13+ from `_Py_DebugOffsets` (3.13 and 3.14 152,
    /// 3.15 176).
    pub thread_id: u16,
    /// How a sample tells that its thread is collecting garbage; `None` when unknown.
    pub gc: Option<GcLayout>,
    /// Where a coroutine keeps its frame and names (3.14+, from `_Py_DebugOffsets`' gen
    /// section: asyncio task stacks); `None` before.
    pub coroutine: Option<CoroutineLayout>,
    /// Where `threading`'s thread names are read (`pyigprof dump`, names.rs); `None` when
    /// `_Py_DebugOffsets` disagrees with the table.
    pub objects: Option<ObjectLayout>,
}

impl Layout {
    /// Whether each evaluator activation keeps a marker on its C stack frame (3.11+: its
    /// `_PyCFrame` or entry frame), by which its native frame is found
    /// (`capture::mixed`); ≤ 3.10 have none and need the evaluator's symbols.
    pub fn has_stack_markers(&self) -> bool {
        !matches!(self.frame, FrameModel::FrameObject)
    }

    /// The layout of CPython `major.minor`, or `None` for a version this profiler does not
    /// know (the sampler then records native frames only).
    pub fn for_version(major: u8, minor: u8) -> Option<Layout> {
        let frame_object = |lasti: u16, filename: u16, first: u16, table: u16| Layout {
            version: (major, minor),
            thread_frame: 24,
            cframe_current: None,
            frame: FrameModel::FrameObject,
            frame_code: 32,
            frame_code_mask: u64::MAX,
            frame_back: 24,
            position: if minor == 10 {
                Position::LastiCodeUnits { offset: lasti }
            } else {
                Position::LastiBytes { offset: lasti }
            },
            frame_locals: match (major, minor) {
                (3, 7..=9) => Some(360),
                (3, 10) => Some(352),
                _ => None,
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
            thread_id: match (major, minor) {
                (2, 7) => 144,
                (3, 6) => 152,
                _ => 176,
            },
            gc: GcLayout::for_version(major, minor),
            coroutine: None,
            objects: ObjectLayout::for_version(major, minor),
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
            frame_code_mask: u64::MAX,
            frame_back: 8,
            position: Position::Pointer {
                offset: 56,
                code_start: 192,
            },
            frame_locals: Some(72),
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
            thread_id: if minor == 11 { 152 } else { 136 },
            gc: GcLayout::for_version(major, minor),
            coroutine: CoroutineLayout::before_314(major, minor),
            objects: ObjectLayout::for_version(major, minor),
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
                frame: FrameModel::IsEntry {
                    offset: 68,
                    cframe_previous: 16,
                },
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
    /// its `_PyRuntime`, given as 64-bit words (at least [`DEBUG_OFFSETS_WORDS`]), read with
    /// the struct revision of that version (the newest known for a newer one). `sizes` are
    /// the interpreter's own type objects' sizes: the offsets must agree with them. An error
    /// says what is wrong (for the one stderr line the caller prints).
    pub fn from_debug_offsets(
        words: &[u64],
        major: u8,
        minor: u8,
        sizes: &TypeSizes,
    ) -> Result<Layout, DebugOffsetsError> {
        if words.len() < DEBUG_OFFSETS_WORDS {
            return Err(DebugOffsetsError::Short);
        }
        if words[0].to_le_bytes() != *b"xdebugpy" {
            return Err(DebugOffsetsError::NoCookie);
        }
        // `version` is the runtime's PY_VERSION_HEX: it must be the version we were told.
        let hex = words[1];
        if (hex >> 24) as u8 != major || ((hex >> 16) & 0xff) as u8 != minor {
            return Err(DebugOffsetsError::OtherVersion { hex });
        }
        if words[2] != 0 {
            return Err(DebugOffsetsError::FreeThreaded);
        }
        let map = DebugOffsetsMap::for_version(major, minor);
        let constants = DebugConstants::for_version(major, minor);
        let w = |index: usize| -> Result<u16, DebugOffsetsError> {
            u16::try_from(words[index])
                .map_err(|_| DebugOffsetsError::Inconsistent("an offset above 64 KiB"))
        };
        let frame_size = words[map.frame_size];
        let code_size = words[map.code_size];
        let layout = Layout {
            version: (major, minor),
            thread_frame: w(map.current_frame)?,
            cframe_current: None,
            frame: FrameModel::CStackOwner {
                offset: w(map.owner)?,
                value: constants.entry_owner,
            },
            frame_code: w(map.executable)?,
            frame_code_mask: constants.executable_mask,
            frame_back: w(map.previous)?,
            position: Position::Pointer {
                offset: w(map.instr_ptr)?,
                code_start: w(map.code_adaptive)?,
            },
            frame_locals: Some(w(map.localsplus)?),
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
            thread_id: w(map.thread_id)?,
            gc: None,
            coroutine: None,
            objects: None,
        };
        // Self-consistency: the sizes the struct gives agree with the interpreter's own type
        // objects (a struct read with the wrong revision gives other numbers), every frame
        // field is inside the frame, every code field inside the code object header,
        // pointers aligned.
        let check = |ok: bool, what: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(DebugOffsetsError::Inconsistent(what))
            }
        };
        check(
            u64::from(w(map.code_adaptive)?) == sizes.code,
            "co_code_adaptive is not the code type's basic size",
        )?;
        check(
            u64::from(layout.bytes_data) + 1 == sizes.bytes,
            "ob_sval is not the bytes type's basic size less 1",
        )?;
        check(
            words[map.unicode_size] == sizes.unicode,
            "the unicode object size is not the str type's basic size",
        )?;
        let in_frame = |off: u16, len: u64| u64::from(off) + len <= frame_size;
        let in_code = |off: u16, len: u64| u64::from(off) + len <= code_size;
        check(
            frame_size >= 16
                && in_frame(layout.frame_code, 8)
                && in_frame(layout.frame_back, 8)
                && matches!(layout.position, Position::Pointer { offset, .. } if in_frame(offset, 8))
                && matches!(layout.frame, FrameModel::CStackOwner { offset, .. } if in_frame(offset, 1)),
            "a frame field outside the frame",
        )?;
        check(
            [
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
                && u64::from(w(map.code_adaptive)?) <= code_size
                && layout.thread_frame.is_multiple_of(8),
            "a code field outside the code object or misaligned",
        )?;
        check(
            layout.thread_id.is_multiple_of(8)
                && layout.thread_id != layout.thread_frame
                && u64::from(layout.thread_id) + 8 <= words[map.thread_size],
            "the thread id outside the thread state or misaligned",
        )?;
        Ok(Layout {
            gc: gc_from_debug_offsets(words, &map),
            objects: ObjectLayout::from_debug_offsets(words, &map, major, minor),
            coroutine: match map.gen_object {
                Some(gen) => coroutine_from_debug_offsets(
                    words,
                    (gen, map.frame_size + 6),
                    frame_size,
                    &constants,
                ),
                None => CoroutineLayout::before_314(major, minor),
            },
            ..layout
        })
    }
}

/// The garbage-collection check from `_Py_DebugOffsets` (3.13+): `interpreter_state.gc` plus
/// the `gc` section's `collecting` (3.13 added that section), the GIL through
/// `interpreter_state.ceval_gil`, at the offsets of `last_holder` and `locked` inside it
/// (`gil_runtime_state_holder` and `_locked` less `gil_runtime_state`, all offsets into the
/// interpreter state). `None` when the values do not fit together (the frames may still be
/// read).
fn gc_from_debug_offsets(words: &[u64], map: &DebugOffsetsMap) -> Option<GcLayout> {
    let w = |index: usize| u16::try_from(words[index]).ok();
    let interp_size = words[map.interp_size];
    let (gc, gc_size, collecting) = (
        words[map.interp_gc],
        words[map.gc_size],
        w(map.gc_collecting)?,
    );
    let gil = words[map.gil_state];
    let holder = u16::try_from(words[map.gil_holder].checked_sub(gil)?).ok()?;
    let locked = u16::try_from(words[map.gil_locked].checked_sub(gil)?).ok()?;
    let ceval_gil = w(map.ceval_gil)?;
    let fits = u64::from(collecting) + 4 <= gc_size
        && gc.checked_add(gc_size)? <= interp_size
        && u64::from(ceval_gil) + 8 <= interp_size
        && ceval_gil % 8 == 0
        && holder % 8 == 0
        && gil + u64::from(holder.max(locked)) + 8 <= interp_size
        && holder != locked;
    fits.then_some(GcLayout {
        thread_interp: w(map.thread_interp)?,
        collecting: Place::Interpreter(u16::try_from(gc + u64::from(collecting)).ok()?),
        holder: Place::ThroughInterpreter {
            pointer: ceval_gil,
            offset: holder,
        },
        locked: Some(Place::ThroughInterpreter {
            pointer: ceval_gil,
            offset: locked,
        }),
    })
}

/// Where a coroutine object keeps its embedded frame, names and state, and how a
/// suspended one's frame says what it awaits: `PyGenObject`'s `gi_iframe`, `gi_name`,
/// `gi_qualname`, `gi_frame_state` (`Include/internal/pycore_interpframe_structs.h`,
/// `_PyGenObject_HEAD`), the frame's `stackpointer`. Offsets in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoroutineLayout {
    /// `gi_iframe`: the coroutine's `_PyInterpreterFrame`, embedded in the object; the
    /// thread's frame chain goes through it while the coroutine runs.
    pub frame: u16,
    /// `gi_qualname`, a str.
    pub qualname: u16,
    /// `gi_frame_state`, an `int8_t`.
    pub state: u16,
    /// `gi_frame_state` values (`PyFrameState`, `Include/internal/pycore_frame.h`): not
    /// started, suspended at a `yield`, suspended in an `await` (`yield from`).
    pub created: i8,
    pub suspended: i8,
    pub suspended_yield_from: i8,
    /// Where a coroutine suspended in an `await` keeps the object it awaits.
    pub awaited: Awaited,
}

/// Where a coroutine suspended in an `await` keeps the object it awaits, in its frame's
/// value stack (offsets in bytes into `_PyInterpreterFrame`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Awaited {
    /// 3.14+: `words` below the frame's `stackpointer` (a pointer one past the top of the
    /// value stack, at offset `stackpointer`), a tagged stack reference (low two bits
    /// flags): 1 word in 3.14, 2 in 3.15 (measured on Debian's 3.14.10 and 3.15.2; CPython's
    /// own reader, `Modules/_remote_debugging/asyncio.c`, uses 2 from 3.15).
    BelowStackPointer { stackpointer: u16, words: u8 },
    /// 3.11–3.13: the top of the value stack, `localsplus[stacktop - 1]`, with `stacktop`
    /// an `int` at offset `stacktop` and `localsplus` at offset `localsplus`
    /// (`Include/internal/pycore_frame.h`: 64 and 72 in all three, measured with ctypes on
    /// pyenv's 3.11.7, 3.12.1, 3.13.0 and Debian's 3.11.2 and 3.13.5).
    StackTop { stacktop: u16, localsplus: u16 },
}

impl CoroutineLayout {
    /// 3.11–3.13's, which `_Py_DebugOffsets` does not give (3.13's has no gen section):
    /// `PyGenObject`'s `gi_iframe`, `gi_qualname`, `gi_frame_state` and the frame-state
    /// numbers (`Include/internal/pycore_frame.h`; 3.11 and 3.12 have no
    /// `FRAME_SUSPENDED_YIELD_FROM`: a coroutine suspended in an `await` is `FRAME_SUSPENDED`,
    /// and what it awaits is told by its stack top's type), measured with ctypes on a
    /// coroutine created, and suspended in an `await`, on pyenv's 3.11.7, 3.12.1, 3.13.0 and
    /// Debian's 3.11.2 and 3.13.5. `None` for other versions.
    pub fn before_314(major: u8, minor: u8) -> Option<CoroutineLayout> {
        let awaited = Awaited::StackTop {
            stacktop: 64,
            localsplus: 72,
        };
        match (major, minor) {
            (3, 11) => Some(CoroutineLayout {
                frame: 80,
                qualname: 40,
                state: 75,
                created: -2,
                suspended: -1,
                suspended_yield_from: -1,
                awaited,
            }),
            (3, 12) => Some(CoroutineLayout {
                frame: 72,
                qualname: 32,
                state: 67,
                created: -2,
                suspended: -1,
                suspended_yield_from: -1,
                awaited,
            }),
            (3, 13) => Some(CoroutineLayout {
                frame: 72,
                qualname: 32,
                state: 67,
                created: -3,
                suspended: -2,
                suspended_yield_from: -1,
                awaited,
            }),
            _ => None,
        }
    }
}

/// The gen section of `_Py_DebugOffsets` (3.14+), at word `gen`: `size, gi_name, gi_iframe,
/// gi_frame_state`; the frame's `stackpointer` at word `stackpointer`. `gi_qualname` is
/// not published: it follows `gi_name` in every version that has the section
/// (`_PyGenObject_HEAD`: `weakreflist, name, qualname, …`). `None` when the values do not
/// fit (the frame's header must fit in the object after `gi_iframe`).
fn coroutine_from_debug_offsets(
    words: &[u64],
    (gen, stackpointer): (usize, usize),
    frame_size: u64,
    constants: &DebugConstants,
) -> Option<CoroutineLayout> {
    let (size, name, iframe, state) = (
        *words.get(gen)?,
        *words.get(gen + 1)?,
        *words.get(gen + 2)?,
        *words.get(gen + 3)?,
    );
    let stackpointer = *words.get(stackpointer)?;
    // The object ends with the frame's header (its `localsplus` is allocated past `size`).
    let fits = name % 8 == 0
        && name + 16 <= iframe
        && iframe % 8 == 0
        && iframe + frame_size.min(64) <= size
        && state < iframe
        && stackpointer % 8 == 0
        && stackpointer + 8 <= frame_size
        && size < 4096;
    let (created, suspended, suspended_yield_from, awaited_below) = constants.coroutine;
    fits.then_some(CoroutineLayout {
        frame: u16::try_from(iframe).ok()?,
        qualname: u16::try_from(name + 8).ok()?,
        state: u16::try_from(state).ok()?,
        created,
        suspended,
        suspended_yield_from,
        awaited: Awaited::BelowStackPointer {
            stackpointer: u16::try_from(stackpointer).ok()?,
            words: awaited_below,
        },
    })
}

/// `_asyncio.Task`'s C struct (`TaskObj`, `Modules/_asynciomodule.c`) before 3.14, which
/// publishes no offsets (uvloop's tasks are these too). Offsets in bytes, measured with
/// ctypes on a live task (its words matched against `id()`s; the state of a pending, a
/// cancelled and a finished one) on pyenv's 3.11.7, 3.12.1, 3.13.0 and Debian's 3.11.2 and
/// 3.13.5 (`shared/design/cpython.md` §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskObjectLayout {
    /// `tp_basicsize` of the type: 176 (3.11, 3.12), 144 (3.13).
    pub size: u16,
    /// `task_state`, an `int` (`fut_state`): 0 pending, 1 cancelled, 2 finished.
    pub state: u16,
    /// `task_coro`.
    pub coro: u16,
    /// `task_name`: a str, or an int (asyncio numbers unnamed tasks `Task-<n>` when asked).
    pub name: u16,
}

impl TaskObjectLayout {
    /// 3.11–3.13's; `None` for other versions (3.14+ publish theirs: [`AsyncioLayout`]).
    pub fn before_314(major: u8, minor: u8) -> Option<TaskObjectLayout> {
        match (major, minor) {
            (3, 11) | (3, 12) => Some(TaskObjectLayout {
                size: 176,
                state: 88,
                coro: 136,
                name: 144,
            }),
            (3, 13) => Some(TaskObjectLayout {
                size: 144,
                state: 96,
                coro: 120,
                name: 128,
            }),
            _ => None,
        }
    }
}

/// What asyncio tells profilers about its tasks (3.14+): the `_asyncio` module's
/// `_Py_AsyncioModuleDebugOffsets`, in its ELF section `.AsyncioDebug`
/// (`Modules/_asynciomodule.c`; read the same way by CPython's own
/// `Modules/_remote_debugging/asyncio.c`). Offsets in bytes into a C `TaskObj` (which
/// starts with a `FutureObj`'s fields: a future has the same `awaited_by` fields) and into
/// the thread state. Measured: Debian's 3.14.10 and 3.15.2 give task size 168, name 136,
/// awaited_by 96, is_task 108, awaited_by_is_set 109, coro 128; running task 872 (3.14) and
/// 1032 (3.15) into the thread state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncioLayout {
    /// `task_name`: a str the program gave, or an int (asyncio numbers unnamed tasks,
    /// `Task-<n>`, only when asked for the name).
    pub task_name: u16,
    /// `task_awaited_by` (a future's too): the one future or task that awaits it, or a set
    /// of them when `task_awaited_by_is_set`; NULL when nothing does.
    pub awaited_by: u16,
    /// `task_is_task`: a `char`, 1 for a task, 0 for a plain future.
    pub is_task: u16,
    /// `task_awaited_by_is_set`: a `char`.
    pub awaited_by_is_set: u16,
    /// `task_coro`: the task's coroutine.
    pub coro: u16,
    /// The thread state's `asyncio_running_task`: the task whose step the thread runs
    /// (NULL between steps).
    pub running_task: u16,
    /// `task_node`: the task's `struct llist_node` (`next`, `prev`) in the list of the
    /// tasks its thread created.
    pub task_node: u16,
    /// The thread state's `asyncio_tasks_head`: the head node of that list (circular; a
    /// task's node points into the next task).
    pub thread_tasks: u16,
}

/// Words of `_Py_AsyncioModuleDebugOffsets` in 3.14 and 3.15: the task section (7: size,
/// task_name, task_awaited_by, task_is_task, task_awaited_by_is_set, task_coro,
/// task_node), the interpreter section (2: size, asyncio_tasks_head) and the thread
/// section (4: size, asyncio_running_loop, asyncio_running_task, asyncio_tasks_head).
pub const ASYNCIO_DEBUG_WORDS: usize = 13;

impl AsyncioLayout {
    /// Reads `_Py_AsyncioModuleDebugOffsets` (`words`, the whole section) of CPython
    /// `major.minor` (3.14+; a newer one with 3.15's revision). An error says what does not
    /// fit (a section of another size, offsets outside their structs).
    pub fn from_debug_section(words: &[u64], major: u8, minor: u8) -> Result<Self, &'static str> {
        if (major, minor) < (3, 14) {
            return Err("asyncio publishes its task offsets from 3.14");
        }
        if words.len() != ASYNCIO_DEBUG_WORDS {
            return Err("the section is not 13 words (another revision of the struct)");
        }
        let (task_size, thread_size) = (words[0], words[9]);
        let field = |index: usize, size: u64, len: u64| -> Result<u16, &'static str> {
            let offset = words[index];
            if offset + len > size || offset >= 1 << 16 {
                return Err("an offset outside its struct");
            }
            Ok(offset as u16)
        };
        if !(64..4096).contains(&task_size) || !(64..65536).contains(&thread_size) {
            return Err("a struct size out of range");
        }
        let layout = AsyncioLayout {
            task_name: field(1, task_size, 8)?,
            awaited_by: field(2, task_size, 8)?,
            is_task: field(3, task_size, 1)?,
            awaited_by_is_set: field(4, task_size, 1)?,
            coro: field(5, task_size, 8)?,
            running_task: field(11, thread_size, 8)?,
            task_node: field(6, task_size, 16)?,
            thread_tasks: field(12, thread_size, 16)?,
        };
        let aligned = [
            layout.task_name,
            layout.awaited_by,
            layout.coro,
            layout.running_task,
            layout.task_node,
            layout.thread_tasks,
        ]
        .iter()
        .all(|o| o % 8 == 0);
        if !aligned {
            return Err("a pointer field misaligned");
        }
        Ok(layout)
    }
}

/// `PySetObject` (`Include/cpython/setobject.h`, the same from 3.5 to 3.15): `mask` at 32,
/// `table` at 40, a table of `mask + 1` entries of 16 bytes whose first word is the key
/// (NULL: empty; `_PySet_Dummy`: deleted).
pub const SET_MASK: u16 = 32;
/// See [`SET_MASK`].
pub const SET_TABLE: u16 = 40;
/// Bytes of one `setentry` (`key`, `hash`).
pub const SET_ENTRY: u64 = 16;

/// Why `_Py_DebugOffsets` could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugOffsetsError {
    /// Fewer words than [`DEBUG_OFFSETS_WORDS`].
    Short,
    /// `_PyRuntime` does not start with the cookie `"xdebugpy"`.
    NoCookie,
    /// The struct's `version` (`PY_VERSION_HEX`) is not the interpreter's.
    OtherVersion {
        /// The `version` found.
        hex: u64,
    },
    /// A free-threaded build (`free_threaded` is set): objects use tagged, deferred
    /// references and each thread runs its own copy of the bytecode (docs/design.md).
    FreeThreaded,
    /// The offsets disagree with each other or with the interpreter's type objects.
    Inconsistent(&'static str),
}

impl std::fmt::Display for DebugOffsetsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DebugOffsetsError::Short => write!(f, "its _Py_DebugOffsets are too short"),
            DebugOffsetsError::NoCookie => {
                write!(f, "_PyRuntime does not start with _Py_DebugOffsets")
            }
            DebugOffsetsError::OtherVersion { hex } => {
                write!(f, "its _Py_DebugOffsets are of another version ({hex:#x})")
            }
            DebugOffsetsError::FreeThreaded => write!(
                f,
                "it is a free-threaded build, whose frames pyigprof cannot read yet"
            ),
            DebugOffsetsError::Inconsistent(what) => {
                write!(f, "its _Py_DebugOffsets are not self-consistent ({what})")
            }
        }
    }
}

/// The interpreter's own sizes of three object types (`tp_basicsize` of `PyCode_Type`,
/// `PyBytes_Type`, `PyUnicode_Type`), against which `_Py_DebugOffsets` is checked:
/// `offsetof(PyCodeObject, co_code_adaptive)`, `offsetof(PyBytesObject, ob_sval) + 1` and
/// `sizeof(PyUnicodeObject)` (`Objects/codeobject.c`, `bytesobject.c`, `unicodeobject.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeSizes {
    /// `PyCode_Type.tp_basicsize`.
    pub code: u64,
    /// `PyBytes_Type.tp_basicsize`.
    pub bytes: u64,
    /// `PyUnicode_Type.tp_basicsize`.
    pub unicode: u64,
}

/// Offset of `tp_basicsize` in a type object (after `PyObject_VAR_HEAD` and `tp_name`), the
/// same in every CPython 3.
pub const TP_BASICSIZE: u64 = 32;

/// The newest CPython whose `_Py_DebugOffsets` revision is known here; newer ones are read
/// with it and used only if self-consistent.
pub const NEWEST_KNOWN: (u8, u8) = (3, 15);

/// How many 64-bit words of `_Py_DebugOffsets` [`Layout::from_debug_offsets`] reads (3.15's
/// struct has 111).
pub const DEBUG_OFFSETS_WORDS: usize = 112;

/// Word indexes, inside `_Py_DebugOffsets`, of the fields the sampler uses: one revision of
/// the struct (each version's `Include/internal/pycore_debug_offsets.h`; the struct is
/// `cookie, version, free_threaded`, then sections that each start with their struct's
/// size). Measured on the builds of shared/design/cpython.md §6.
#[derive(Clone, Copy, Debug)]
struct DebugOffsetsMap {
    interp_size: usize,
    interp_gc: usize,
    ceval_gil: usize,
    gil_state: usize,
    gil_locked: usize,
    gil_holder: usize,
    thread_interp: usize,
    /// `thread_state.size`.
    thread_size: usize,
    /// `thread_state.thread_id`.
    thread_id: usize,
    gc_size: usize,
    gc_collecting: usize,
    current_frame: usize,
    frame_size: usize,
    previous: usize,
    executable: usize,
    instr_ptr: usize,
    localsplus: usize,
    owner: usize,
    code_size: usize,
    filename: usize,
    name: usize,
    qualname: usize,
    linetable: usize,
    firstlineno: usize,
    code_adaptive: usize,
    bytes_sval: usize,
    unicode_size: usize,
    ascii_size: usize,
    /// The gen section (`size, gi_name, gi_iframe, gi_frame_state`; 3.14+).
    gen_object: Option<usize>,
    /// `interpreter_state.imports_modules` (`sys.modules`).
    imports_modules: usize,
    /// The first words (`size`) of the sections `type_object` (`size, tp_name, tp_repr,
    /// tp_flags`), `tuple_object` (`size, ob_item, ob_size`), `dict_object` (`size, ma_keys,
    /// ma_values`) and `long_object` (`size, lv_tag, ob_digit`).
    type_object: usize,
    tuple_object: usize,
    dict_object: usize,
    long_object: usize,
}

impl DebugOffsetsMap {
    /// The struct revision of `major.minor`; newer versions get the newest one known.
    fn for_version(major: u8, minor: u8) -> DebugOffsetsMap {
        // Within the code object section the fields keep their order in every revision:
        // size, filename, name, qualname, linetable, firstlineno, argcount,
        // localsplusnames, localspluskinds, co_code_adaptive.
        let code = |at: usize| (at, at + 1, at + 2, at + 3, at + 4, at + 5, at + 9);
        let (thread, frame, owner, code_at, bytes, unicode, gc) = match (major, minor) {
            // 3.13: runtime_state (3 words), interpreter_state (13: size, id, next,
            // threads_head, gc, imports_modules, sysdict, builtins, ceval_gil,
            // gil_runtime_state, _enabled, _locked, _holder), thread_state (9: size, prev,
            // next, interp, current_frame, …), interpreter_frame (6: size, previous,
            // executable, instr_ptr, localsplus, owner), code_object (10), then pyobject,
            // type, tuple, list, dict, float, long, bytes, unicode, gc (size, collecting).
            (3, 13) => (23, 28, 33, 34, 66, 67, 71),
            // 3.14: interpreter_state grows to 16 words (threads_main after threads_head);
            // interpreter_frame adds stackpointer and tlbc_index (8 words, owner 6th);
            // code_object adds co_tlbc; a set section comes before gc.
            (3, 14) => (26, 31, 36, 39, 76, 77, 81),
            // 3.15: thread_state adds base_frame, last_profiled_frame, holds_gil, … (17
            // words); the rest shifts; gc adds frame.
            _ => (26, 39, 44, 47, 88, 89, 94),
        };
        // The interpreter_state section: 3.14 inserted threads_main before gc.
        let gc_field = if (major, minor) == (3, 13) { 10 } else { 11 };
        // After the code object: pyobject (2 words), type_object (4; 8 in 3.15, whose four
        // more read 32, 288, 944 and 888 on Debian's 3.15.2: the measured tp_basicsize,
        // tp_dictoffset, sizeof(PyHeapTypeObject) and ht_cached_keys), tuple_object (3),
        // list_object (3), set_object (4, 3.14+), dict_object (3), float_object (2),
        // long_object (3), then bytes_object.
        let (type_object, tuple_object, dict_object, long_object) = match (major, minor) {
            (3, 13) => (46, 50, 56, 61),
            (3, 14) => (52, 56, 66, 71),
            _ => (60, 68, 78, 83),
        };
        let (code_size, filename, name, qualname, linetable, firstlineno, code_adaptive) =
            code(code_at);
        DebugOffsetsMap {
            interp_size: 6,
            interp_gc: gc_field,
            ceval_gil: gc_field + 4,
            gil_state: gc_field + 5,
            gil_locked: gc_field + 7,
            gil_holder: gc_field + 8,
            thread_interp: thread - 1,
            // thread_state: size, prev, next, interp, current_frame, then (3.13, 3.14)
            // thread_id; 3.15 inserts three words before it (base_frame and
            // last_profiled_frame among them: thread_id measured at 176 with ctypes).
            thread_size: thread - 4,
            thread_id: if (major, minor) <= (3, 14) {
                thread + 1
            } else {
                thread + 4
            },
            gc_size: gc,
            gc_collecting: gc + 1,
            current_frame: thread,
            frame_size: frame,
            previous: frame + 1,
            executable: frame + 2,
            instr_ptr: frame + 3,
            localsplus: frame + 4,
            owner,
            code_size,
            filename,
            name,
            qualname,
            linetable,
            firstlineno,
            code_adaptive,
            bytes_sval: bytes,
            unicode_size: unicode,
            ascii_size: unicode + 3,
            // 3.14: after gc (2 words); 3.15: after gc (3 words) and before llist_node.
            gen_object: match (major, minor) {
                (3, 13) => None,
                (3, 14) => Some(gc + 2),
                _ => Some(gc + 5),
            },
            imports_modules: gc_field + 1,
            type_object,
            tuple_object,
            dict_object,
            long_object,
        }
    }
}

/// What `_Py_DebugOffsets` does not publish, per version (`Include/internal/pycore_frame.h`
/// or `pycore_interpframe_structs.h`, `Include/cpython/code.h`, `pycore_stackref.h`).
#[derive(Clone, Copy, Debug)]
struct DebugConstants {
    /// The lowest `owner` of an entry frame: `FRAME_OWNED_BY_CSTACK` (3) in 3.13,
    /// `FRAME_OWNED_BY_INTERPRETER` (3) from 3.14 (entry and base frames;
    /// `FRAME_OWNED_BY_CSTACK` is 4 there).
    entry_owner: u8,
    /// Mask of `f_executable`'s pointer bits (3.14+: a tagged `_PyStackRef`).
    executable_mask: u64,
    /// Offset of `co_flags` in a code object.
    co_flags: u16,
    /// The `co_flags` bit of interpreter shim code (`_Py_InitCleanup`,
    /// `CO_NO_MONITORING_EVENTS`).
    shim_flag: u32,
    /// [`CoroutineLayout`]'s `created`, `suspended`, `suspended_yield_from` and
    /// `awaited_below` (3.14+; measured with `ctypes` on a coroutine at each point).
    coroutine: (i8, i8, i8, u8),
}

impl DebugConstants {
    /// The constants of `major.minor`; newer versions get the newest ones known.
    fn for_version(major: u8, minor: u8) -> DebugConstants {
        DebugConstants {
            entry_owner: 3,
            executable_mask: if (major, minor) >= (3, 14) {
                !3
            } else {
                u64::MAX
            },
            co_flags: 48,
            shim_flag: 0x0200_0000,
            // 3.14: FRAME_CREATED -3, FRAME_SUSPENDED -2, FRAME_SUSPENDED_YIELD_FROM -1;
            // 3.15 renumbered them from 0.
            coroutine: if (major, minor) <= (3, 14) {
                (-3, -2, -1, 1)
            } else {
                (0, 1, 2, 2)
            },
        }
    }
}

/// What `pyigprof dump` reads to name a thread as `threading` does (`Thread.name`; names.rs):
/// the interpreter's modules (`sys.modules`), dicts and their keys, the instance attributes
/// of a `Thread`, ints, tuples and type objects. Offsets in bytes on x86-64; every one was
/// measured on the 13 interpreters here (pyenv's 2.7.18, 3.6.15, 3.7.16, 3.8.18, 3.9.18,
/// 3.10.13, 3.11.7, 3.12.1, 3.13.0; Debian's 3.11.2, 3.13.5, 3.14.10, 3.15.2) with `ctypes`
/// (an object's fields read at `id(obj) + offset` and compared with what Python says of
/// them), and for pyenv's builds also with `offsetof` compiled against their `include/`
/// (but 3.6–3.10's keys objects: `Objects/dict-common.h` is not installed); both agree.
/// From 3.13 the fields `_Py_DebugOffsets` publishes are taken from it
/// ([`ObjectLayout::from_debug_offsets`]); the table gives the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectLayout {
    /// `PyThreadState.interp` (`Include/pystate.h`, `cpython/pystate.h`): 2.7 8, 3.x 16
    /// (3.13+ `thread_state.interp`).
    pub thread_interp: u16,
    /// The interpreter's modules dict (`sys.modules`): `PyInterpreterState.modules`
    /// (`Include/pystate.h`; 3.8 `internal/pycore_pystate.h`; 3.9+ `pycore_interp.h`),
    /// 3.12+ `imports.modules`: 2.7 16, 3.6 16, 3.7 40, 3.8 56, 3.9 856, 3.10 856, 3.11
    /// 888 (Debian's 3.11.2 too), 3.12 944; 3.13+ `interpreter_state.imports_modules`: 3.13
    /// 7656 (pyenv's 3.13.0 and Debian's 3.13.5), 3.14 7688, 3.15 7592.
    pub interp_modules: u16,
    /// `PyTypeObject.tp_name`, a C string: 24 (3.13+ `type_object.tp_name`).
    pub type_name: u16,
    /// `PyTypeObject.tp_flags`, an `unsigned long`: 168 (3.13+ `type_object.tp_flags`).
    pub type_flags: u16,
    /// `PyTupleObject.ob_item`, the first item: 24; 32 from 3.14, which added `ob_hash`
    /// (3.13+ `tuple_object.ob_item`).
    pub tuple_items: u16,
    /// How a dict finds its entries.
    pub dict: DictLayout,
    /// How the values of a split table are kept.
    pub values: SplitValues,
    /// Where an instance keeps its attributes.
    pub instance: InstanceDict,
    /// How an int is stored.
    pub int: IntLayout,
    /// The instance attribute of a `threading.Thread` that holds its name (`Lib/threading.py`):
    /// `_name`; 2.7's `self.__name`, mangled to `_Thread__name`.
    pub thread_name: &'static str,
}

/// Where a dict's entries are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DictLayout {
    /// 2.7 (`Include/dictobject.h`): `ma_mask` at `mask` and the table `ma_table` at `table`
    /// (32, 40), `ma_mask + 1` [`DICT_ENTRY`]s; an entry is used when its value is not NULL.
    Open { mask: u16, table: u16 },
    /// 3.6+: `ma_keys` (the keys object, entries included) at `keys` and `ma_values` at
    /// `values` (32, 40; 3.13+ `dict_object.ma_keys`, `ma_values`): NULL, or the values
    /// of a split table, whose keys object is shared by the instances of a class.
    Compact {
        keys: u16,
        values: u16,
        table: KeysLayout,
    },
}

/// `PyDictKeysObject`: a hash index, then the entries in insertion order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeysLayout {
    /// 3.6–3.10 (`Objects/dict-common.h`): `Py_ssize_t dk_size` at `size` (8),
    /// `dk_nentries` at `nentries` (32), `dk_indices` at `indices` (40): `dk_size` indexes
    /// of 1, 2, 4 or 8 bytes (`DK_IXSIZE`: up to 0xff entries, 0xffff, 0xffffffff, more),
    /// then [`DICT_ENTRY`]s.
    Sized {
        size: u16,
        nentries: u16,
        indices: u16,
    },
    /// 3.11+ (`Include/internal/pycore_dict.h`): `uint8_t dk_log2_size` at `log2_size`
    /// (8), `dk_log2_index_bytes` (9), `dk_kind` (10), `Py_ssize_t dk_nentries` (24), the
    /// index at `indices` (32, `1 << dk_log2_index_bytes` bytes), then [`DICT_ENTRY`]s
    /// when `dk_kind` is [`DICT_KEYS_GENERAL`], else (str keys only, or split)
    /// [`DICT_UNICODE_ENTRY`]s.
    Log2 {
        log2_size: u16,
        log2_index_bytes: u16,
        kind: u16,
        nentries: u16,
        indices: u16,
    },
}

/// The shape of one dict entry: its size and where its key and value pointers are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DictEntry {
    pub size: u64,
    pub key: u64,
    pub value: u64,
}

/// `PyDictKeyEntry` (2.7 `PyDictEntry`): `{me_hash, me_key, me_value}`, in every version.
pub const DICT_ENTRY: DictEntry = DictEntry {
    size: 24,
    key: 8,
    value: 16,
};
/// 3.11+ `PyDictUnicodeEntry`: `{me_key, me_value}`.
pub const DICT_UNICODE_ENTRY: DictEntry = DictEntry {
    size: 16,
    key: 0,
    value: 8,
};
/// `dk_kind` of a table whose keys may be anything (3.11+ `DictKeysKind`); 1 is str keys
/// only, [`DICT_KEYS_SPLIT`] the keys shared by the instances of a class.
pub const DICT_KEYS_GENERAL: u8 = 0;
/// `dk_kind` of a split table (`DICT_KEYS_SPLIT`).
pub const DICT_KEYS_SPLIT: u8 = 2;

/// How the values of a split table (`ma_values`, or an instance's own) are kept; the value
/// of the key at entry `ix` of the shared keys is the `ix`-th.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitValues {
    /// 3.6–3.10: `PyObject **`, as many as the keys' usable entries (`new_values`), so
    /// every entry of the shared keys has its slot.
    Array,
    /// 3.11, 3.12 (`pycore_dict.h` `_PyDictValues_AddToInsertionOrder`): `PyObject *values[]`
    /// preceded by bytes: at -1 the size of that prefix, at -2 how many values are set,
    /// below it their entry indexes. The array is only as long as the keys were when it
    /// was made (other instances may add keys since): an index not among those is not
    /// this object's.
    Ordered,
    /// 3.13+ (`struct _dictvalues`): `uint8_t capacity` at `capacity` (0), `valid` at
    /// `valid` (3: 0 once a dict took over an object's inline values), the values at
    /// `values` (8), `capacity` of them.
    Sized {
        capacity: u16,
        valid: u16,
        values: u16,
    },
}

/// Where an instance of a class keeps its attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceDict {
    /// ≤ 3.10, and types without a managed dict: its `__dict__` at `tp_dictoffset`
    /// ([`TP_DICTOFFSET`]) bytes into it (16 for a `Thread`; a negative offset, counted
    /// from the end of a variable-size object, is not read).
    Offset,
    /// 3.11+: a type with `Py_TPFLAGS_MANAGED_DICT` (`flag`, 1 << 4, `Include/object.h`)
    /// keeps the object's dict pointer `dict_before` bytes before it (24:
    /// `_PyObject_ManagedDictPointer`, 3.13 `MANAGED_DICT_OFFSET`), and, until a dict
    /// takes them, its values without a dict as `values` says, indexed by the keys in its
    /// class's `PyHeapTypeObject.ht_cached_keys` (`cached_keys`: 3.11 872, 3.12–3.14 880,
    /// 3.15 888).
    Managed {
        flag: u64,
        dict_before: u16,
        values: ManagedValues,
        cached_keys: u16,
    },
}

/// Where an object with a managed dict keeps its values while it has no dict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManagedValues {
    /// 3.11: a `PyDictValues *` `before` bytes before the object (32,
    /// `_PyObject_ValuesPointer`), NULL once a dict took them.
    Pointer { before: u16 },
    /// 3.12 (`PyDictOrValues`, `pycore_object.h`): the dict pointer's word holds, tagged by
    /// its low bit, the values' address less 1.
    Tagged,
    /// 3.13+: inline, `tp_basicsize` bytes into the object (`_PyObject_InlineValues`),
    /// when its type has `Py_TPFLAGS_INLINE_VALUES` (`flag`, 1 << 2) and the values are
    /// `valid`.
    Inline { flag: u64 },
}

/// How an int is stored (a thread's ident, the key of `threading._active`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntLayout {
    /// 2.7 `PyIntObject` (`Include/intobject.h`): a C `long` at `value` (16).
    Small { value: u16 },
    /// 3.x `PyLongObject`: [`LONG_DIGIT_BITS`]-bit digits (`uint32_t`) from `digits` (24)
    /// and their count in the word at `size` (16): ≤ 3.11 `ob_size`, negative for a
    /// negative number; when `tagged` (3.12+, `long_value.lv_tag`, `pycore_long.h`) the
    /// count shifted left by 3 (`NON_SIZE_BITS`) over the sign in the low 2 bits
    /// (`SIGN_MASK`: 0 positive). 3.13+ `long_object.lv_tag`, `ob_digit`.
    Digits {
        size: u16,
        digits: u16,
        tagged: bool,
    },
}

/// Bits per digit of an int (`PYLONG_BITS_IN_DIGIT`): 30 in every build here
/// (`sys.int_info.bits_per_digit`; 2.7 `sys.long_info`).
pub const LONG_DIGIT_BITS: u64 = 30;
/// `PyTypeObject.tp_dictoffset`, a `Py_ssize_t`: 288 in every version (not in
/// `_Py_DebugOffsets`' 3.13 and 3.14 revisions).
pub const TP_DICTOFFSET: u64 = 288;
/// `PyTypeObject.tp_mro`, the tuple of the type and its bases in method resolution
/// order: 344 in every version.
pub const TP_MRO: u64 = 344;
/// `PyVarObject.ob_size` (a tuple's length) and a str's length (`PyASCIIObject.length`,
/// 2.7 `PyStringObject.ob_size`): 16 in every version.
pub const OB_SIZE: u64 = 16;
/// `PyModuleObject.md_dict`, the module's globals (`Objects/moduleobject.c`, 3.11+
/// `pycore_moduleobject.h`): 16 in every version.
pub const MODULE_DICT: u64 = 16;
/// `Py_TPFLAGS_HEAPTYPE` (`Include/object.h`): a type made at run time (a class
/// statement), not a static one of C; the same bit in every version.
pub const TPFLAGS_HEAPTYPE: u64 = 1 << 9;

impl ObjectLayout {
    /// The table of CPython `major.minor` (2.7, 3.6+; a version newer than 3.15 gets
    /// 3.15's). From 3.13 [`ObjectLayout::from_debug_offsets`] replaces what the
    /// interpreter publishes.
    pub fn for_version(major: u8, minor: u8) -> Option<ObjectLayout> {
        let version = (major, minor);
        if !matches!(version, (2, 7) | (3, 6..)) {
            return None;
        }
        let managed = |values: ManagedValues, cached_keys: u16| InstanceDict::Managed {
            flag: 1 << 4,
            dict_before: 24,
            values,
            cached_keys,
        };
        let compact = |table: KeysLayout| DictLayout::Compact {
            keys: 32,
            values: 40,
            table,
        };
        let log2 = KeysLayout::Log2 {
            log2_size: 8,
            log2_index_bytes: 9,
            kind: 10,
            nentries: 24,
            indices: 32,
        };
        let table = ObjectLayout {
            thread_interp: 16,
            interp_modules: match version {
                (2, 7) | (3, 6) => 16,
                (3, 7) => 40,
                (3, 8) => 56,
                (3, 9) | (3, 10) => 856,
                (3, 11) => 888,
                (3, 12) => 944,
                (3, 13) => 7656,
                (3, 14) => 7688,
                _ => 7592,
            },
            type_name: 24,
            type_flags: 168,
            tuple_items: if version >= (3, 14) { 32 } else { 24 },
            dict: compact(KeysLayout::Sized {
                size: 8,
                nentries: 32,
                indices: 40,
            }),
            values: SplitValues::Array,
            instance: InstanceDict::Offset,
            int: IntLayout::Digits {
                size: 16,
                digits: 24,
                tagged: version >= (3, 12),
            },
            thread_name: "_name",
        };
        Some(match version {
            (2, 7) => ObjectLayout {
                thread_interp: 8,
                dict: DictLayout::Open {
                    mask: 32,
                    table: 40,
                },
                int: IntLayout::Small { value: 16 },
                thread_name: "_Thread__name",
                ..table
            },
            (3, 6..=10) => table,
            (3, 11) | (3, 12) => ObjectLayout {
                dict: compact(log2),
                values: SplitValues::Ordered,
                instance: if minor == 11 {
                    managed(ManagedValues::Pointer { before: 32 }, 872)
                } else {
                    managed(ManagedValues::Tagged, 880)
                },
                ..table
            },
            _ => ObjectLayout {
                dict: compact(log2),
                values: SplitValues::Sized {
                    capacity: 0,
                    valid: 3,
                    values: 8,
                },
                instance: managed(
                    ManagedValues::Inline { flag: 1 << 2 },
                    if version >= (3, 15) { 888 } else { 880 },
                ),
                ..table
            },
        })
    }

    /// 3.13+: the table with what `_Py_DebugOffsets` (`words`, read with `map`) publishes
    /// in its place: `thread_state.interp`, `interpreter_state.imports_modules`,
    /// `type_object.tp_name` and `tp_flags`, `tuple_object.ob_item`, `dict_object.ma_keys`
    /// and `ma_values`, `long_object.lv_tag` and `ob_digit`. `None` when one of them does
    /// not fit its struct (size, alignment): names are then not read, frames still are.
    fn from_debug_offsets(
        words: &[u64],
        map: &DebugOffsetsMap,
        major: u8,
        minor: u8,
    ) -> Option<ObjectLayout> {
        let table = ObjectLayout::for_version(major, minor)?;
        // The offset at word `at`, of a field `len` bytes long aligned to `align`, inside
        // the struct whose size is at word `size`.
        let field = |at: usize, size: usize, len: u64, align: u64| {
            let offset = *words.get(at)?;
            (offset % align == 0 && offset + len <= *words.get(size)?)
                .then(|| u16::try_from(offset).ok())
                .flatten()
        };
        let (dict, long) = (map.dict_object, map.long_object);
        let (keys, values) = (field(dict + 1, dict, 8, 8)?, field(dict + 2, dict, 8, 8)?);
        let (size, digits) = (field(long + 1, long, 8, 8)?, field(long + 2, long, 4, 4)?);
        let DictLayout::Compact {
            table: keys_table, ..
        } = table.dict
        else {
            return None;
        };
        (keys != values && size < digits).then_some(ObjectLayout {
            thread_interp: field(map.thread_interp, map.thread_size, 8, 8)?,
            interp_modules: field(map.imports_modules, map.interp_size, 8, 8)?,
            type_name: field(map.type_object + 1, map.type_object, 8, 8)?,
            type_flags: field(map.type_object + 3, map.type_object, 8, 8)?,
            tuple_items: field(map.tuple_object + 1, map.tuple_object, 8, 8)?,
            dict: DictLayout::Compact {
                keys,
                values,
                table: keys_table,
            },
            int: IntLayout::Digits {
                size,
                digits,
                tagged: true,
            },
            ..table
        })
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
        assert_eq!(
            l.frame,
            FrameModel::IsEntry {
                offset: 68,
                cframe_previous: 16
            }
        );
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

    /// `_Py_DebugOffsets` after `cookie, version, free_threaded`: pyenv's 3.13.0 (73 words).
    const STRUCT_3_13_0: &[u64] = &[
        283320, 608, 632, 194968, 7272, 7264, 7344, 7400, 7656, 7640, 7648, 16, 7752, 0, 7768,
        7760, 304, 0, 8, 16, 72, 152, 160, 232, 32, 80, 8, 0, 56, 72, 70, 208, 112, 120, 128, 136,
        68, 52, 96, 104, 200, 16, 8, 416, 24, 88, 168, 32, 24, 16, 40, 24, 16, 48, 32, 40, 24, 16,
        32, 16, 24, 40, 16, 32, 64, 32, 16, 40, 240, 200,
    ];
    /// The same of Debian sid's 3.14.10 (91 words).
    const STRUCT_3_14_10: &[u64] = &[
        316616, 784, 808, 225864, 7280, 7272, 7344, 7360, 7408, 7688, 7672, 7680, 16, 7784, 0,
        7800, 7792, 7992, 0, 832, 0, 8, 16, 72, 152, 160, 232, 32, 88, 8, 0, 56, 80, 74, 64, 0,
        216, 112, 120, 128, 136, 68, 52, 96, 104, 208, 0, 16, 8, 416, 24, 88, 168, 40, 32, 16, 40,
        24, 16, 200, 24, 40, 32, 48, 32, 40, 24, 16, 32, 16, 24, 40, 16, 32, 64, 32, 16, 40, 264,
        192, 160, 24, 72, 67, 0, 8, 24, 304,
    ];
    /// The same of Debian sid's 3.15.2 (111 words).
    const STRUCT_3_15_2: &[u64] = &[
        346568, 912, 936, 226240, 7272, 7264, 7336, 7352, 7400, 7592, 7576, 7584, 16, 7736, 0,
        7752, 7744, 7944, 0, 888, 0, 8, 16, 72, 80, 88, 96, 176, 184, 256, 32, 36, 40, 136, 288, 0,
        88, 8, 0, 56, 80, 74, 64, 0, 216, 112, 120, 128, 136, 68, 52, 96, 104, 208, 0, 16, 8, 424,
        24, 88, 168, 32, 288, 944, 888, 40, 32, 16, 40, 24, 16, 200, 24, 40, 32, 48, 32, 40, 24,
        16, 32, 16, 24, 40, 16, 32, 64, 32, 16, 40, 56, 176, 112, 120, 1120, 104, 160, 24, 72, 67,
        0, 8, 24, 344, 8028, 0, 4, 512,
    ];

    /// The `_PyRuntime` words of an interpreter with `struct_words` and version `hex`.
    fn runtime(hex: u64, struct_words: &[u64]) -> Vec<u64> {
        let mut words = vec![u64::from_le_bytes(*b"xdebugpy"), hex, 0];
        words.extend_from_slice(struct_words);
        words.resize(DEBUG_OFFSETS_WORDS, 0);
        words
    }

    /// `tp_basicsize` of code, bytes and str objects (`type(c).__basicsize__`, …).
    const SIZES_3_13: TypeSizes = TypeSizes {
        code: 200,
        bytes: 33,
        unicode: 64,
    };
    const SIZES_3_14: TypeSizes = TypeSizes {
        code: 208,
        bytes: 33,
        unicode: 64,
    };

    #[test]
    fn debug_offsets_of_each_version_give_its_measured_layout() {
        // (version, words, sizes, owner offset, co_code_adaptive, f_executable mask): the
        // byte offsets of shared/design/cpython.md §3 and §6.
        let cases = [
            (
                (3, 13),
                0x030d_00f0,
                STRUCT_3_13_0,
                SIZES_3_13,
                70,
                200,
                u64::MAX,
            ),
            (
                (3, 14),
                0x030e_0af0,
                STRUCT_3_14_10,
                SIZES_3_14,
                74,
                208,
                !3,
            ),
            ((3, 15), 0x030f_02f0, STRUCT_3_15_2, SIZES_3_14, 74, 208, !3),
        ];
        for ((major, minor), hex, words, sizes, owner, code_start, mask) in cases {
            let l = Layout::from_debug_offsets(&runtime(hex, words), major, minor, &sizes)
                .unwrap_or_else(|e| panic!("{major}.{minor}: {e}"));
            assert_eq!(
                (l.thread_frame, l.cframe_current, l.frame_code, l.frame_back),
                (72, None, 0, 8),
                "{major}.{minor}"
            );
            assert_eq!(
                l.position,
                Position::Pointer {
                    offset: 56,
                    code_start
                }
            );
            assert_eq!(
                l.frame,
                FrameModel::CStackOwner {
                    offset: owner,
                    value: 3
                }
            );
            assert_eq!(l.frame_code_mask, mask);
            assert_eq!(
                (
                    l.co_filename,
                    l.co_name,
                    l.co_qualname,
                    l.co_firstlineno,
                    l.co_linetable
                ),
                (112, 120, Some(128), 68, 136)
            );
            assert_eq!(l.bytes_data, 32);
            assert_eq!(
                l.strings,
                StrModel::Unicode {
                    ascii_data: 40,
                    compact_data: 56
                }
            );
            assert_eq!(l.shim_flag, Some((48, 0x0200_0000)));
            // interp->gc.collecting and the GIL through interp->ceval.gil, as read with
            // ctypes inside a collection on pyenv's 3.13.0 and Debian's 3.13.5, 3.14.10,
            // 3.15.2 (interpreter_state.gc 7400/7408/7400 + gc.collecting 200/192/112).
            let collecting = match (major, minor) {
                (3, 13) | (3, 14) => 7600,
                _ => 7512,
            };
            assert_eq!(
                l.gc,
                Some(GcLayout {
                    thread_interp: 16,
                    collecting: Place::Interpreter(collecting),
                    holder: Place::ThroughInterpreter {
                        pointer: 16,
                        offset: 8
                    },
                    locked: Some(Place::ThroughInterpreter {
                        pointer: 16,
                        offset: 16
                    }),
                }),
                "{major}.{minor}"
            );
            // The coroutine's frame, qualname and state (measured with ctypes on a
            // coroutine suspended in an await: its frame state byte at 67, the awaited
            // coroutine 1 word (3.14) or 2 words (3.15) below the frame's stack pointer).
            let coroutine = match (major, minor) {
                (3, 13) => None,
                (3, 14) => Some((-3, -2, -1, 1)),
                _ => Some((0, 1, 2, 2)),
            };
            if (major, minor) == (3, 13) {
                // No gen section: the measured table.
                assert_eq!(l.coroutine, CoroutineLayout::before_314(3, 13));
                continue;
            }
            assert_eq!(
                l.coroutine,
                coroutine.map(
                    |(created, suspended, suspended_yield_from, awaited_below)| {
                        CoroutineLayout {
                            frame: 72,
                            qualname: 32,
                            state: 67,
                            created,
                            suspended,
                            suspended_yield_from,
                            awaited: Awaited::BelowStackPointer {
                                stackpointer: 64,
                                words: awaited_below,
                            },
                        }
                    }
                ),
                "{major}.{minor}"
            );
        }
    }

    #[test]
    fn asyncio_debug_sections_give_the_measured_task_offsets() {
        // `.AsyncioDebug` of Debian's 3.14.10 (`_asyncio` extension module) and 3.15.2
        // (built into the executable), read with ctypes.
        let s314 = [
            168, 136, 96, 108, 109, 128, 152, 225864, 10880, 936, 864, 872, 880,
        ];
        let s315 = [
            168, 136, 96, 108, 109, 128, 152, 226240, 10856, 1104, 1024, 1032, 1048,
        ];
        for (minor, words, running, tasks) in [(14, s314, 872, 880), (15, s315, 1032, 1048)] {
            assert_eq!(
                AsyncioLayout::from_debug_section(&words, 3, minor),
                Ok(AsyncioLayout {
                    task_name: 136,
                    awaited_by: 96,
                    is_task: 108,
                    awaited_by_is_set: 109,
                    coro: 128,
                    running_task: running,
                    task_node: 152,
                    thread_tasks: tasks,
                })
            );
        }
        // Before 3.14, another revision (3.14's alphas had 9 words), an offset past its
        // struct, a misaligned pointer.
        assert!(AsyncioLayout::from_debug_section(&s314, 3, 13).is_err());
        assert!(AsyncioLayout::from_debug_section(&s314[..9], 3, 14).is_err());
        let mut past = s314;
        past[11] = 936;
        assert!(AsyncioLayout::from_debug_section(&past, 3, 14).is_err());
        let mut odd = s314;
        odd[5] = 130;
        assert!(AsyncioLayout::from_debug_section(&odd, 3, 14).is_err());
    }

    #[test]
    fn object_layouts_match_the_measured_table() {
        let o = |major: u8, minor: u8| ObjectLayout::for_version(major, minor).unwrap();
        let l = o(2, 7);
        assert_eq!(
            (l.thread_interp, l.interp_modules, l.thread_name),
            (8, 16, "_Thread__name")
        );
        assert_eq!(
            (l.dict, l.int),
            (
                DictLayout::Open {
                    mask: 32,
                    table: 40
                },
                IntLayout::Small { value: 16 }
            )
        );
        // sys.modules in the interpreter state (ctypes: its word equal to id(sys.modules)).
        for (minor, modules) in [
            (6, 16),
            (7, 40),
            (8, 56),
            (9, 856),
            (10, 856),
            (11, 888),
            (12, 944),
            (13, 7656),
            (14, 7688),
            (15, 7592),
        ] {
            assert_eq!(o(3, minor).interp_modules, modules, "3.{minor}");
            assert_eq!(o(3, minor).thread_interp, 16, "3.{minor}");
        }
        assert_eq!(
            (o(3, 10).instance, o(3, 10).values),
            (InstanceDict::Offset, SplitValues::Array)
        );
        // Where managed values are, and the class's shared keys (ht_cached_keys).
        let managed = |minor: u8| match o(3, minor).instance {
            InstanceDict::Managed {
                values,
                cached_keys,
                dict_before: 24,
                flag: 16,
            } => (values, cached_keys),
            other => panic!("3.{minor}: {other:?}"),
        };
        assert_eq!(managed(11), (ManagedValues::Pointer { before: 32 }, 872));
        assert_eq!(managed(12), (ManagedValues::Tagged, 880));
        assert_eq!(managed(14), (ManagedValues::Inline { flag: 4 }, 880));
        assert_eq!(managed(15).1, 888);
        assert_eq!((o(3, 13).tuple_items, o(3, 14).tuple_items), (24, 32));
        assert_eq!(
            o(3, 12).int,
            IntLayout::Digits {
                size: 16,
                digits: 24,
                tagged: true
            }
        );
        assert_eq!(Layout::for_version(3, 9).unwrap().objects, Some(o(3, 9)));
        for (major, minor) in [(2, 6), (3, 5), (4, 0)] {
            assert_eq!(ObjectLayout::for_version(major, minor), None);
        }
    }

    #[test]
    fn debug_offsets_give_the_object_offsets_of_the_table() {
        let cases = [
            (13, 0x030d_00f0, STRUCT_3_13_0, SIZES_3_13),
            (14, 0x030e_0af0, STRUCT_3_14_10, SIZES_3_14),
            (15, 0x030f_02f0, STRUCT_3_15_2, SIZES_3_14),
        ];
        for (minor, hex, words, sizes) in cases {
            let l = Layout::from_debug_offsets(&runtime(hex, words), 3, minor, &sizes).unwrap();
            assert_eq!(l.objects, ObjectLayout::for_version(3, minor), "3.{minor}");
            // The long section ends where the bytes section (whose ob_sval is known) starts.
            let map = DebugOffsetsMap::for_version(3, minor);
            assert_eq!(map.long_object + 5, map.bytes_sval, "3.{minor}");
        }
        // A dict section whose ma_keys is past its size: no names, the frames still.
        let mut words = runtime(0x030d_00f0, STRUCT_3_13_0);
        words[DebugOffsetsMap::for_version(3, 13).dict_object + 1] = 48;
        let l = Layout::from_debug_offsets(&words, 3, 13, &SIZES_3_13).expect("frames");
        assert_eq!(l.objects, None);
    }

    #[test]
    fn every_table_version_knows_where_the_collector_says_it_collects() {
        let gc = |minor: u8| Layout::for_version(3, minor).unwrap().gc.unwrap();
        assert_eq!(
            gc(6).collecting,
            Place::Flag {
                symbol: "collecting",
                tester: "PyGC_Collect"
            }
        );
        assert_eq!(gc(6).holder, Place::Symbol("_PyThreadState_Current"));
        assert_eq!(
            Layout::for_version(2, 7).unwrap().gc.unwrap().thread_interp,
            8
        );
        assert_eq!(gc(7).collecting, Place::Runtime(632));
        assert_eq!(gc(8).holder, Place::Runtime(1368));
        assert_eq!(gc(10).collecting, Place::Interpreter(816));
        assert_eq!(gc(11).collecting, Place::Interpreter(848));
        assert_eq!(gc(11).holder, Place::Runtime(576));
        assert_eq!(gc(12).collecting, Place::Interpreter(312));
        assert!(gc(12).locked.is_some() && gc(11).locked.is_none());
    }

    #[test]
    fn a_gc_section_that_does_not_fit_leaves_the_frames_readable() {
        let mut words = runtime(0x030d_00f0, STRUCT_3_13_0);
        words[72] = 4000; // gc.collecting outside struct _gc_runtime_state
        let l = Layout::from_debug_offsets(&words, 3, 13, &SIZES_3_13).expect("frames");
        assert_eq!(l.gc, None);
    }

    #[test]
    fn a_newer_version_is_read_with_the_newest_revision_when_it_is_consistent() {
        let words = runtime(0x0310_00a1, STRUCT_3_15_2);
        let l = Layout::from_debug_offsets(&words, 3, 16, &SIZES_3_14).expect("consistent");
        assert_eq!(l.version, (3, 16));
        // A struct that grew a field before the frame section: refused, never misread.
        let mut grown = STRUCT_3_15_2.to_vec();
        grown.insert(20, 0);
        let words = runtime(0x0310_00a1, &grown);
        assert!(matches!(
            Layout::from_debug_offsets(&words, 3, 16, &SIZES_3_14),
            Err(DebugOffsetsError::Inconsistent(_))
        ));
    }

    #[test]
    fn debug_offsets_are_refused_when_wrong() {
        let good = runtime(0x030d_00f0, STRUCT_3_13_0);
        let read = |words: &[u64], minor: u8, sizes: &TypeSizes| {
            Layout::from_debug_offsets(words, 3, minor, sizes)
        };
        assert!(read(&good, 13, &SIZES_3_13).is_ok());
        assert_eq!(
            read(&good, 14, &SIZES_3_13),
            Err(DebugOffsetsError::OtherVersion { hex: 0x030d_00f0 })
        );
        // The 3.14 revision's positions do not fit 3.13's struct.
        let mut as_314 = good.clone();
        as_314[1] = 0x030e_0af0;
        assert!(matches!(
            read(&as_314, 14, &SIZES_3_14),
            Err(DebugOffsetsError::Inconsistent(_))
        ));
        let mut free_threaded = good.clone();
        free_threaded[2] = 1;
        assert_eq!(
            read(&free_threaded, 13, &SIZES_3_13),
            Err(DebugOffsetsError::FreeThreaded)
        );
        let mut no_cookie = good.clone();
        no_cookie[0] = 0;
        assert_eq!(
            read(&no_cookie, 13, &SIZES_3_13),
            Err(DebugOffsetsError::NoCookie)
        );
        let mut outside = good.clone();
        outside[33] = 4000; // frame owner outside the frame
        assert!(matches!(
            read(&outside, 13, &SIZES_3_13),
            Err(DebugOffsetsError::Inconsistent(_))
        ));
        assert!(matches!(
            read(&good, 13, &SIZES_3_14),
            Err(DebugOffsetsError::Inconsistent(_))
        ));
        assert_eq!(
            read(&good[..10], 13, &SIZES_3_13),
            Err(DebugOffsetsError::Short)
        );
    }
}
