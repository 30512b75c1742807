//! Which frames the reports show.
//!
//! By default reports use the *Python view* ([`python`]): once a stack has entered
//! Python code, the interpreter's *plumbing* is left out: the frames that only carry a
//! call from one Python function, or from Python to a native function, to the next
//! ([`is_plumbing`]: the evaluation loop, the call and vectorcall machinery, trampolines,
//! frame push and pop), the interpreter's frames that have no name (`@?0x…`: a
//! stripped interpreter, where nothing can be told apart), and the code CPython's JIT
//! compiled (`<jit>` in [`JIT_FILE`], whose time is then the Python function's own, as
//! the evaluator's is). A stack then reads
//! `<module> → squeeze → zlib_compress → deflate` instead of
//! `<module> → _PyEval_EvalFrameDefault → PyObject_Vectorcall → cfunction_vectorcall_O →
//! squeeze → …`, and the time of a hidden frame counts as its nearest shown caller's.
//!
//! The interpreter's *work* stays: a named function of an interpreter file
//! ([`is_interpreter_file`]: `libpython*.so*`, the `python` executable, Debian's
//! statically linked `/usr/bin/python3.11`) that is not plumbing is shown as a native
//! child of the Python function that called it, as `perf` or `py-spy --native` show it:
//! `split → _sre_SRE_Pattern_split → sre_search`, `work → builtin_sorted → list_sort →
//! list_sort_impl`, `dumps → encoder_listencode_list → …`, the modules built into a static
//! executable (`compress → zlib_compress → deflate`), integer arithmetic (`l_mod`) and
//! the garbage collector (`gc_collect_main → deduce_unreachable`), each its own node.
//!
//! Frames are never hidden before the first Python frame of a stack (the interpreter's
//! start-up, `main`, `Py_RunMain`, and threads that never run Python code), frames of
//! extension modules and other libraries are always shown, and so are the markers the
//! profiler writes (file `[pyigprof]`: `<incomplete stack>`, `<truncated stack>`,
//! `<unsampled thread time>`, `<garbage collection>`, wall mode's `<waiting: GIL>`,
//! `<waiting: lock>`, …). The *all-frames view*
//! ([`View::AllFrames`], `--all-frames`) shows the profile as written.

use crate::profile::{FileId, FunctionId, NodeId, Profile};
use crate::symbol::{is_interpreter_file, is_python_frame_file};

/// The frames reports show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum View {
    /// The interpreter's plumbing below Python code hidden ([`python`]).
    #[default]
    Python,
    /// Every frame as the dumps have it.
    AllFrames,
}

impl View {
    /// `profile` as seen in this view: a new profile for [`View::Python`], `profile`
    /// itself for [`View::AllFrames`].
    pub fn apply(self, profile: Profile) -> Profile {
        match self {
            View::Python => python(&profile),
            View::AllFrames => profile,
        }
    }
}

/// The file of the frames of machine code that CPython's JIT compiled (`<jit>`, written
/// by pyigprof for code outside every object that the evaluator called): hidden below
/// Python code as plumbing is, so that their time is the Python function's own, whose
/// trace the code runs (`--all-frames` shows them).
pub const JIT_FILE: &str = "[jit]";

/// The interpreter's plumbing, which the Python view hides below Python code
/// ([`is_plumbing`]). A pattern ending in `*` matches the names that start with the rest,
/// where that rest ends in `_` or the name goes on with something other than a lower-case
/// letter (`PyObject_Call*` matches `PyObject_Call` and `PyObject_CallOneArg`, not
/// `PyObject_Calloc`); any other pattern matches that name only. Names are those of CPython
/// 2.7 to 3.15.
pub const PLUMBING: &[&str] = &[
    // The evaluation loop and its entry points.
    "_PyEval_EvalFrame*",
    "PyEval_EvalFrame*",
    "_PyEval_EvalCode*",
    "PyEval_EvalCode*",
    "_PyEval_Vector",
    "_PyEval_HandlePending",
    "_Py_HandlePending",
    "eval_frame_handle_pending",
    "function_code_fastcall",
    "fast_function",
    "function_call",
    // Frame push and pop.
    "_PyEvalFramePushAndInit*",
    "_PyEval_FrameClearAndPop",
    "_PyFrame_Push",
    "_PyFrame_Clear*",
    "_PyThreadState_PushFrame",
    "_PyThreadState_PopFrame",
    "_PyThreadState_BumpFramePointer*",
    "push_chunk",
    "clear_thread_frame",
    "clear_gen_frame",
    // Calls: vectorcall, tp_call, and the dispatch of the objects that can be called.
    "_PyObject_Vectorcall*",
    "PyObject_Vectorcall*",
    "_PyVectorcall_Call",
    "PyVectorcall_Call",
    "_PyObject_Call*",
    "PyObject_Call*",
    "_PyObject_FastCall*",
    "_PyObject_MakeTpCall",
    "PyEval_Call*",
    "object_vacall",
    "_PyFunction_Vectorcall",
    "_PyFunction_FastCall*",
    "PyCFunction_Call",
    "_PyCFunction_FastCall*",
    "_PyMethodDef_RawFastCall*",
    "_PyMethodDescr_FastCall*",
    "cfunction_call*",
    "cfunction_vectorcall_*",
    "method_vectorcall*",
    "method_call",
    "methoddescr_call",
    "classmethoddescr_call",
    "wrapperdescr_call",
    "wrapper_call",
    "instancemethod_call",
    "vectorcall_*",
    "call_unbound*",
    "slot_tp_call",
    "type_call",
    "type_vectorcall",
    "call_function",
    "do_call_core",
    "do_call",
    "ext_do_call",
    // 3.14's tail-calling evaluation loop: one function per instruction.
    "_TAIL_CALL_*",
    // Trampolines: perf's (3.12+) and those of tracing and profiling callbacks.
    "_Py_trampoline*",
    "py_trampoline_evaluator",
    "call_trampoline",
    "trace_trampoline",
    "profile_trampoline",
];

/// Whether `name`, a function of an interpreter file, is plumbing that the Python view
/// hides below Python code: it matches [`PLUMBING`], or it is no name at all (empty or
/// `@?0x…`, as every function of a stripped interpreter: they cannot be told apart, so
/// all are hidden). A compiler's suffix for a part or a copy of a function (`.cold`,
/// `.isra.0`, `.constprop.0`, `.part.0`, `.lto_priv.0`) is left out first, so that
/// `_PyEval_EvalFrameDefault.cold` is plumbing as `_PyEval_EvalFrameDefault` is. Markers
/// (`<…>`) never are.
pub fn is_plumbing(name: &str) -> bool {
    if name.is_empty() || name.starts_with("@?") {
        return true;
    }
    // C symbols have no dots: a dot starts a suffix of GCC's or Clang's.
    let base = name.split('.').next().unwrap_or(name);
    PLUMBING
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => base.strip_prefix(prefix).is_some_and(|rest| {
                prefix.ends_with('_') || !rest.starts_with(|c: char| c.is_ascii_lowercase())
            }),
            None => base == *pattern,
        })
}

/// `profile` in the Python view: the same samples (totals are unchanged), without the
/// frames of interpreter files that have a Python frame among their callers and are
/// plumbing ([`is_plumbing`]). The values
/// of a hidden node are added to its nearest shown ancestor, its children become that
/// ancestor's children (merging with children of the same function and offset), and
/// [`Profile::hidden_nodes`] counts the nodes left out.
pub fn python(profile: &Profile) -> Profile {
    // A view never has more files, functions, counters or nodes than its profile, so
    // none of its tables can overflow.
    const FITS: &str = "a view has no more items than its profile";
    let mut view = Profile::new();
    view.sources = profile.sources.clone();
    view.peaks = profile.peaks;
    for name in profile.counters() {
        // Same names in the same order: counter ids are unchanged.
        view.intern_counter(name).expect(FITS);
    }
    let interpreter: Vec<bool> = profile
        .files()
        .iter()
        .map(|file| is_interpreter_file(file))
        .collect();
    let jit: Vec<bool> = profile
        .files()
        .iter()
        .map(|file| file == JIT_FILE)
        .collect();
    let plumbing: Vec<bool> = profile
        .functions()
        .iter()
        .map(|function| {
            let file = function.file as usize;
            (interpreter[file] && is_plumbing(&function.name)) || jit[file]
        })
        .collect();
    let mut files: Vec<Option<FileId>> = vec![None; profile.files().len()];
    let mut functions: Vec<Option<FunctionId>> = vec![None; profile.functions().len()];
    let nodes = profile.nodes();
    // Per node of `profile`: its node in the view, and whether it or a caller is Python.
    let mut mapped: Vec<NodeId> = Vec::with_capacity(nodes.len());
    let mut in_python: Vec<bool> = Vec::with_capacity(nodes.len());
    let mut hidden = 0usize;
    // Parents come before their children.
    for node in nodes {
        let function = profile.function(node.function);
        let under_python = node.parent.is_some_and(|parent| in_python[parent as usize]);
        in_python.push(under_python || is_python_frame_file(profile, function.file));
        let id = match node.parent {
            Some(parent) if under_python && plumbing[node.function as usize] => {
                hidden += 1;
                mapped[parent as usize]
            }
            _ => {
                let id = *functions[node.function as usize].get_or_insert_with(|| {
                    let file = *files[function.file as usize].get_or_insert_with(|| {
                        let file = view.intern_file(profile.file(function.file)).expect(FITS);
                        view.set_python_code(file, profile.is_python_code(function.file));
                        file
                    });
                    let id = view
                        .intern_function(&function.name, file, function.start)
                        .expect(FITS);
                    view.set_source(id, function.source.clone());
                    id
                });
                let parent = node.parent.map(|parent| mapped[parent as usize]);
                view.child(parent, id, node.offset).expect(FITS)
            }
        };
        for &(counter, values) in &node.values {
            view.add_values(id, counter, values);
        }
        mapped.push(id);
    }
    view.hidden_nodes = profile.hidden_nodes + hidden;
    view
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Values;
    use crate::report::top;
    use crate::testing::{load, stacks_named};

    /// Every stack of `profile` with self values, as `frame+offset;… amount`, sorted.
    fn stacks(profile: &Profile) -> Vec<String> {
        stacks_named(profile, |profile, node| {
            format!("{}+{}", profile.function(node.function).name, node.offset)
        })
    }

    /// A pyenv interpreter (libpython) running Python that calls zlib through the
    /// extension module, sorts with a Python key (a callback from the interpreter), and a
    /// native thread that never runs Python.
    const DUMP: &[u8] = b"P=(HEX ID=1 N=(python3 x.py) T=0.004000)
C1 FN0=(F0=(/opt/py/bin/python3.11)+1060 N=(_start))+20
C2 FN1=(F1=(/lib/libc.so.6)+27280 N=(__libc_start_main))+84
C3 FN2=(F2=(/opt/py/lib/libpython3.11.so.1.0)+100 N=(Py_RunMain))+30 V0=(PERF_TICKS):(1,1,1)
C4 FN3=(F3=(/work/x.py)+1 N=(<module>))+4 V0:(1,1,1)
C5 FN4=(F2+200 N=(PyObject_Vectorcall))+10
C6 FN5=(F3+a N=(work))+2 V0:(2,2,2)
C7 FN6=(F2+300 N=(l_mod))+4 V0:(3,5,5)
C7 FN7=(F2+400 N=(cfunction_vectorcall_O))+8
C8 FN8=(F4=(/opt/py/lib/python3.11/lib-dynload/zlib.cpython-311-x86_64-linux-gnu.so)+50 N=(zlib_compress))+6 V0:(1,1,1)
C9 FN9=(F5=(/lib/libz.so.1)+2a40 N=(deflate))+1f V0:(4,4,4)
C7 FN6+4 V0:(1,1,1)
C7 FNa=(F2+500 N=(list_sort))+9
C8 FNb=(F2+600 N=(_PyEval_Vector))+1
C9 FNc=(F3+14 N=(work.<locals>.<lambda>))+0 V0:(1,1,1)
C1 FNd=(F1+9000 N=(start_thread))+c3
C2 FNe=(F2+700 N=(PyGILState_Ensure))+5 V0:(2,2,2)
";

    #[test]
    fn plumbing_under_python_is_hidden_and_work_shown() {
        let profile = load(DUMP);
        let view = python(&profile);
        assert_eq!(
            stacks(&view),
            [
                "_start+32;__libc_start_main+132;Py_RunMain+48 1",
                "_start+32;__libc_start_main+132;Py_RunMain+48;<module>+4 1",
                "_start+32;__libc_start_main+132;Py_RunMain+48;<module>+4;work+2 2",
                // Integer modulo is work of the interpreter: work's child.
                "_start+32;__libc_start_main+132;Py_RunMain+48;<module>+4;work+2;l_mod+4 6",
                // list.sort calls the key back through _PyEval_Vector (hidden).
                "_start+32;__libc_start_main+132;Py_RunMain+48;<module>+4;work+2;list_sort+9;work.<locals>.<lambda>+0 1",
                "_start+32;__libc_start_main+132;Py_RunMain+48;<module>+4;work+2;zlib_compress+6 1",
                "_start+32;__libc_start_main+132;Py_RunMain+48;<module>+4;work+2;zlib_compress+6;deflate+31 4",
                "start_thread+195;PyGILState_Ensure+5 2",
            ]
        );
        // 3 nodes hidden: PyObject_Vectorcall, cfunction_vectorcall_O, _PyEval_Vector;
        // Py_RunMain runs before any Python frame and PyGILState_Ensure in a thread
        // without Python: both shown.
        assert_eq!(view.hidden_nodes, 3);
        assert_eq!(view.total(0), profile.total(0));
        assert_eq!(
            view.total(0),
            Values {
                count: 16,
                amount: 18,
                peak: 5
            }
        );
        // The hidden functions are not in the view at all.
        let names: Vec<&str> = view.functions().iter().map(|f| f.name.as_str()).collect();
        for hidden in [
            "PyObject_Vectorcall",
            "cfunction_vectorcall_O",
            "_PyEval_Vector",
        ] {
            assert!(!names.contains(&hidden), "{hidden} in {names:?}");
        }
        assert!(names.contains(&"PyGILState_Ensure"));
    }

    /// Debian's static `/usr/bin/python3.11` (zlib and the `re` engine built in): `re`
    /// split, `sorted` with `list.sort`, zlib, the garbage collector from the eval
    /// breaker and under the profiler's marker, a `.cold` part of the evaluation loop,
    /// functions without a name, and the profiler's markers.
    const STATIC: &[u8] = b"P=(HEX ID=1 N=(python3 app.py) T=0.004000)
C1 FN0=(F0=(/usr/bin/python3.11)+100 N=(_start))+4
C2 FN1=(F0+200 N=(Py_BytesMain))+8
C3 FN2=(F1=(/work/app.py)+1 N=(<module>))+5 V0=(PERF_TICKS):(1,1,1)
C4 FN3=(F0+300 N=(PyObject_Vectorcall))+3
C5 FN4=(F0+400 N=(method_vectorcall_FASTCALL_KEYWORDS))+4
C6 FN5=(F0+500 N=(_sre_SRE_Pattern_split))+5 V0:(1,1,1)
C7 FN6=(F0+600 N=(sre_search))+6 V0:(3,3,3)
C4 FN7=(F0+700 N=(_PyEval_Vector))+7
C5 FN8=(F1+a N=(work))+c V0:(2,2,2)
C6 FN3+3
C7 FN9=(F0+800 N=(cfunction_vectorcall_FASTCALL_KEYWORDS))+8
C8 FNa=(F0+900 N=(builtin_sorted))+9 V0:(1,1,1)
C9 FNb=(F0+a00 N=(PyObject_VectorcallMethod))+a
Ca FN4+4
Cb FNc=(F0+b00 N=(list_sort))+b
Cc FNd=(F0+c00 N=(list_sort_impl))+c V0:(4,4,4)
Cd FNe=(F0+d00 N=(@?0xd00))+0 V0:(2,2,2)
C6 FNf=(F0+e00 N=(_PyObject_MakeTpCall))+e
C7 FN10=(F0+f00 N=(cfunction_call))+f
C8 FN11=(F0+1000 N=(zlib_compress))+10
C9 FN12=(F0+1100 N=(deflate))+11 V0:(5,5,5)
C6 FN13=(F0+1200 N=(_Py_HandlePending))+12
C7 FN14=(F0+1300 N=(_Py_RunGC))+13
C8 FN15=(F0+1400 N=(gc_collect_main))+14 V0:(1,1,1)
C9 FN16=(F0+1500 N=(deduce_unreachable))+15 V0:(2,2,2)
C4 FN17=(F2=([pyigprof])+0 N=(<garbage collection>))+0
C5 FN15+14
C6 FN18=(F0+1600 N=(move_unreachable))+16 V0:(2,2,2)
C4 FN19=(F0+1700 N=(_PyEval_EvalFrameDefault.cold))+17
C5 FN1a=(F0+1800 N=(@?0x1800))+0 V0:(1,1,1)
C1 FN1b=(F2+0 N=(<incomplete stack>))+0
C2 FN1c=(F0+1900 N=(@?0x1900))+0 V0:(1,1,1)
C2 FN8+d V0:(1,1,1)
C3 FN3+3
C4 FN1d=(F0+1a00 N=(builtin_len))+1a V0:(1,1,1)
C1 FN1e=(F2+0 N=(<unsampled thread time>))+0 V0:(0,3,3)
";

    #[test]
    fn interpreter_work_is_a_native_child_of_its_python_caller() {
        let profile = load(STATIC);
        let view = python(&profile);
        let names = |profile: &Profile, node: &crate::profile::Node| {
            profile.function(node.function).name.clone()
        };
        let main = "_start;Py_BytesMain;<module>";
        let expected: Vec<String> = [
            "<incomplete stack>;@?0x1900 1",
            "<incomplete stack>;work 1",
            "<incomplete stack>;work;builtin_len 1",
            "<unsampled thread time> 3",
            // The .cold part of the evaluation loop and the unnamed frame it ran: <module>'s.
            "M 2",
            "M;<garbage collection>;gc_collect_main;move_unreachable 2",
            "M;_sre_SRE_Pattern_split 1",
            "M;_sre_SRE_Pattern_split;sre_search 3",
            "M;work 2",
            // The eval breaker (hidden) ran the collector: a node of its own.
            "M;work;_Py_RunGC;gc_collect_main 1",
            "M;work;_Py_RunGC;gc_collect_main;deduce_unreachable 2",
            "M;work;builtin_sorted 1",
            // The unnamed frame list_sort_impl called counts as list_sort_impl's.
            "M;work;builtin_sorted;list_sort;list_sort_impl 6",
            "M;work;zlib_compress;deflate 5",
        ]
        .iter()
        .map(|stack| stack.replacen('M', main, 1))
        .collect();
        assert_eq!(stacks_named(&view, names), expected);
        assert_eq!(view.total(0), profile.total(0));
        assert_eq!(view.total(0).amount, 31);
        // PyObject_Vectorcall (3 nodes), method_vectorcall_FASTCALL_KEYWORDS (2),
        // _PyEval_Vector, cfunction_vectorcall_FASTCALL_KEYWORDS,
        // PyObject_VectorcallMethod, @?0xd00, _PyObject_MakeTpCall, cfunction_call,
        // _Py_HandlePending, _PyEval_EvalFrameDefault.cold, @?0x1800.
        assert_eq!(view.hidden_nodes, 14);

        // Self and cumulative amounts, as --top shows them.
        let options = top::Options {
            limit: 0,
            ..top::Options::default()
        };
        let report = top::compute(&view, &options).unwrap();
        let row = |name: &str| {
            let row = report
                .rows
                .iter()
                .find(|row| row.item.label.name == name)
                .unwrap_or_else(|| panic!("no row {name}"));
            (row.self_amount, row.cumulative)
        };
        assert_eq!(row("<module>"), (2, 25));
        // Two nodes: under <module>, and under <incomplete stack>.
        assert_eq!(row("work"), (3, 19));
        assert_eq!(row("builtin_sorted"), (1, 7));
        assert_eq!(row("list_sort"), (0, 6));
        assert_eq!(row("list_sort_impl"), (6, 6));
        // Two nodes: from the eval breaker, and under the profiler's marker.
        assert_eq!(row("gc_collect_main"), (1, 5));
        assert_eq!(row("zlib_compress"), (0, 5));
        assert_eq!(row("sre_search"), (3, 3));
        assert_eq!(row("<garbage collection>"), (0, 2));
        let shown: Vec<&str> = report
            .rows
            .iter()
            .map(|r| r.item.label.name.as_str())
            .collect();
        for hidden in [
            "PyObject_Vectorcall",
            "_PyEval_Vector",
            "cfunction_call",
            "_Py_HandlePending",
            "_PyEval_EvalFrameDefault.cold",
            "@?0xd00",
            "@?0x1800",
        ] {
            assert!(!shown.contains(&hidden), "{hidden} in {shown:?}");
        }

        // --all-frames: every frame, the same total.
        let all = View::AllFrames.apply(profile.clone());
        assert_eq!(all.hidden_nodes, 0);
        assert_eq!(all.nodes().len(), view.nodes().len() + 14);
        assert_eq!(all.total(0), view.total(0));
    }

    #[test]
    fn plumbing_patterns() {
        for name in [
            "_PyEval_EvalFrameDefault",
            "_PyEval_EvalFrameDefault.cold",
            "_PyEval_EvalFrame",
            "PyEval_EvalFrameEx",
            "PyEval_EvalCode",
            "PyEval_EvalCodeEx",
            "_PyEval_EvalCodeWithName",
            "_PyEval_Vector",
            "_PyEval_Vector.constprop.0",
            "_PyObject_VectorcallTstate.lto_priv.0",
            "PyObject_Vectorcall",
            "PyObject_VectorcallMethod",
            "_PyObject_Call",
            "PyObject_Call",
            "PyObject_CallOneArg",
            "_PyObject_MakeTpCall",
            "_PyFunction_Vectorcall",
            "method_vectorcall_O",
            "method_vectorcall",
            "cfunction_vectorcall_FASTCALL_KEYWORDS",
            "cfunction_call",
            "cfunction_call_varargs",
            "vectorcall_method",
            "slot_tp_call",
            "call_function",
            "do_call_core",
            "_Py_trampoline_func_start",
            "py_trampoline_evaluator",
            "_PyEvalFramePushAndInit",
            "_PyEval_FrameClearAndPop.isra.0",
            "_PyThreadState_PushFrame",
            "_TAIL_CALL_LOAD_FAST",
            "@?0x13adab",
            "",
        ] {
            assert!(is_plumbing(name), "{name:?}");
        }
        for name in [
            "sre_match",
            "sre_search.isra.0",
            "_sre_SRE_Pattern_split_impl",
            "list_sort_impl",
            "builtin_sorted",
            "builtin_len",
            "scanstring_unicode",
            "encoder_listencode_obj",
            "gc_collect_main",
            "gc_collect_region",
            "deduce_unreachable",
            "subtract_refs",
            "move_unreachable",
            "_PyGC_Collect",
            "gc_collect_impl",
            "zlib_compress",
            "PyObject_Calloc",
            "_PyObject_Calloc",
            "l_mod",
            "<garbage collection>",
            "<incomplete stack>",
            "<truncated stack>",
            "<unsampled thread time>",
        ] {
            assert!(!is_plumbing(name), "{name:?}");
        }
    }

    #[test]
    fn all_frames_is_the_profile_as_read() {
        let profile = load(DUMP);
        let same = View::AllFrames.apply(profile.clone());
        assert_eq!(stacks(&same), stacks(&profile));
        assert_eq!(same.hidden_nodes, 0);
        assert_eq!(
            stacks(&View::Python.apply(profile.clone())),
            stacks(&python(&profile))
        );
    }

    #[test]
    fn unknown_python_code_counts_as_python() {
        let profile = load(
            b"P=(HEX ID=1 N=(python3 x.py) T=0.004000)
C1 FN0=(F0=(/usr/bin/python3.11)+1 N=(main))+1
C2 FN1=(F1=([python])+0 N=(<unknown code>))+0
C3 FN2=(F0+2 N=(PyObject_Call))+1 V0=(PERF_TICKS):(1,1,1)
",
        );
        assert_eq!(stacks(&python(&profile)), ["main+1;<unknown code>+0 1"]);
    }

    #[test]
    fn python_files_stay_python() {
        // An extensionless script is Python because of its `<module>`; in the view its
        // other functions are still Python even if they come first.
        let profile = load(
            b"P=(HEX ID=1 N=(python3 tool) T=0.004000)
C1 FN0=(F0=(/venv/bin/tool)+3 N=(helper))+1 V0=(PERF_TICKS):(1,1,1)
C1 FN1=(F0+1 N=(<module>))+0 V0:(1,1,1)
",
        );
        let view = python(&profile);
        assert!(view.is_python_code(0));
    }
}
