//! Which frames the reports show.
//!
//! By default reports use the *Python view* ([`python`]): once a stack has entered
//! Python code, the native frames of the interpreter itself (files recognised by
//! [`is_interpreter_file`]: `libpython*.so*`, the `python` executable, Debian's statically
//! linked `/usr/bin/python3.11`) are left out, so that a stack reads
//! `<module> → squeeze → zlib_compress → deflate` instead of
//! `<module> → _PyEval_EvalFrameDefault → PyObject_Vectorcall → cfunction_vectorcall_O →
//! squeeze → …`. The time of a hidden frame (bytecode evaluation, calls, integer
//! arithmetic, built-ins such as `sorted`) counts as the time of its nearest shown
//! caller, which is the Python function that ran it, or a native frame of an extension
//! module or another library (`libz`, `libcrypto`) that called back into the interpreter.
//!
//! Frames are never hidden before the first Python frame of a stack (the interpreter's
//! start-up, `main`, `Py_RunMain`, and threads that never run Python code), and frames of
//! extension modules and other libraries are always shown. The *all-frames view*
//! ([`View::AllFrames`], `--all-frames`) shows the profile as written.

use crate::profile::{FileId, FunctionId, NodeId, Profile};
use crate::symbol::{is_interpreter_file, is_python_frame_file};

/// The frames reports show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum View {
    /// Interpreter frames below Python code hidden ([`python`]).
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

/// `profile` in the Python view: the same samples (totals are unchanged), without the
/// frames of interpreter files that have a Python frame among their callers. The values
/// of a hidden node are added to its nearest shown ancestor, its children become that
/// ancestor's children (merging with children of the same function and offset), and
/// [`Profile::hidden_nodes`] counts the nodes left out.
pub fn python(profile: &Profile) -> Profile {
    // A view never has more files, functions, counters or nodes than its profile, so
    // none of its tables can overflow.
    const FITS: &str = "a view has no more items than its profile";
    let mut view = Profile::new();
    view.sources = profile.sources.clone();
    for name in profile.counters() {
        // Same names in the same order: counter ids are unchanged.
        view.intern_counter(name).expect(FITS);
    }
    let interpreter: Vec<bool> = profile
        .files()
        .iter()
        .map(|file| is_interpreter_file(file))
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
            Some(parent) if under_python && interpreter[function.file as usize] => {
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
    fn interpreter_frames_under_python_are_hidden() {
        let profile = load(DUMP);
        let view = python(&profile);
        assert_eq!(
            stacks(&view),
            [
                // l_mod's 5 + 1 ticks went to work (same function and line).
                "_start+32;__libc_start_main+132;Py_RunMain+48 1",
                "_start+32;__libc_start_main+132;Py_RunMain+48;<module>+4 1",
                "_start+32;__libc_start_main+132;Py_RunMain+48;<module>+4;work+2 8",
                "_start+32;__libc_start_main+132;Py_RunMain+48;<module>+4;work+2;work.<locals>.<lambda>+0 1",
                "_start+32;__libc_start_main+132;Py_RunMain+48;<module>+4;work+2;zlib_compress+6 1",
                "_start+32;__libc_start_main+132;Py_RunMain+48;<module>+4;work+2;zlib_compress+6;deflate+31 4",
                "start_thread+195;PyGILState_Ensure+5 2",
            ]
        );
        // 5 nodes hidden: PyObject_Vectorcall, l_mod (one node, sampled twice),
        // cfunction_vectorcall_O, list_sort, _PyEval_Vector; Py_RunMain runs before any
        // Python frame and PyGILState_Ensure in a thread without Python: both shown.
        assert_eq!(view.hidden_nodes, 5);
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
        assert!(
            !names.contains(&"l_mod") && !names.contains(&"list_sort"),
            "{names:?}"
        );
        assert!(names.contains(&"PyGILState_Ensure"));
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
