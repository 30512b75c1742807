//! Python frames of every kind, on every interpreter with Python frames: deep recursion,
//! generators, coroutines and asyncio tasks, comprehensions, lambdas, methods called from C,
//! exec/eval code.

use pyigprof_suite::*;

const RECURSION: &str = r#"
import sys
sys.setrecursionlimit(10000)
def leaf():
    t = 0
    for i in range(100000):
        t += i % 3
    return t
def down(depth):
    if depth == 0:
        return leaf()
    return down(depth - 1)
for _ in range(40):
    down(70)
"#;

#[test]
fn deep_recursion_shows_every_python_frame_in_order() {
    for python in interpreters_with_python_frames("deep_recursion") {
        let (_, profile) = profiled_ok(&python, &["-c", RECURSION], &[("PYIGPROF_HZ", "1000")]);
        let leaf = stacks(&profile)
            .into_iter()
            .filter(|s| s.has("leaf"))
            .collect::<Vec<_>>();
        assert!(!leaf.is_empty(), "{}: no sample in leaf", python.name);
        let mut full = 0;
        for s in &leaf {
            let python_frames: Vec<&str> = s
                .frames
                .iter()
                .map(|(n, _)| n.as_str())
                .filter(|n| *n == "down" || *n == "leaf" || *n == "<module>")
                .collect();
            // <module>, 71 × down (depths 70..0), leaf — nothing missing, nothing else between.
            let expected: Vec<&str> = std::iter::once("<module>")
                .chain(std::iter::repeat_n("down", 71))
                .chain(std::iter::once("leaf"))
                .collect();
            if python_frames == expected {
                full += s.ticks;
            }
        }
        let total: i64 = leaf.iter().map(|s| s.ticks).sum();
        eprintln!(
            "{}: {full} of {total} leaf ticks show all 73 Python frames",
            python.name
        );
        assert!(
            full as f64 >= 0.95 * total as f64,
            "{}: {full} of {total}",
            python.name
        );
    }
}

/// `work(n)`, the hot Python function the programs below call; prepended to them.
const WORK: &str =
    "def work(n):\n    t = 0\n    for i in range(n):\n        t += i % 3\n    return t\n";

/// `WORK` followed by `program`.
fn with_work(program: &str) -> String {
    format!("{WORK}{program}")
}

/// Kinds of frames every interpreter has, 2.7 included.
const KINDS: &str = r#"
def gen(n):
    for _ in range(n):
        yield work(3000)
def keyfunc(v):
    work(300)
    return v
for _ in range(4):
    sum(gen(100))
    [work(3000) for _ in range(100)]
    (lambda: work(300000))()
    sorted(range(1000), key=keyfunc)
    list(map(keyfunc, range(1000)))
    exec("def from_exec():\n    return work(300000)\nfrom_exec()")
    eval("work(300000)")
"#;

/// Kinds of frames of Python 3: `yield from`, coroutines in asyncio tasks.
const PY3_KINDS: &str = r#"
import asyncio
def delegate(n):
    yield from gen(n)
async def coro(n):
    for _ in range(n):
        work(3000)
        await asyncio.sleep(0)
async def main():
    await asyncio.gather(coro(200), coro(200))
for _ in range(4):
    sum(delegate(100))
asyncio.new_event_loop().run_until_complete(main())
"#;

#[test]
fn frames_of_every_kind_are_named() {
    for python in interpreters_with_python_frames("frame_kinds") {
        let py3 = python.version >= (3, 0);
        let program = with_work(&format!("{KINDS}{}", if py3 { PY3_KINDS } else { "" }));
        let (_, profile) = profiled_ok(&python, &["-c", &program], &[("PYIGPROF_HZ", "1000")]);
        let mut checks: Vec<(&str, &str)> = vec![
            ("gen", "generator"),
            ("<lambda>", "lambda"),
            ("keyfunc", "key function called from C by sorted/map"),
            ("from_exec", "code from exec"),
        ];
        if py3 {
            checks.push(("delegate", "yield from"));
            checks.push(("coro", "coroutine in an asyncio task"));
        }
        // 3.12+ inlines list comprehensions into their function (PEP 709), and 2.7 always
        // did: no frame of their own.
        if (3, 0) <= python.version && python.version < (3, 12) {
            checks.push(("<listcomp>", "comprehension"));
        }
        for (caller, what) in checks {
            let hit = share(&profile, |s| {
                s.position("work")
                    .is_some_and(|w| s.frames[..w].iter().any(|(n, _)| n == caller))
            });
            assert!(
                hit > 0.5,
                "{}: no work() under {caller} ({what}): {hit:.2}%",
                python.name
            );
        }
        // eval code runs as a frame named <module> from file <string>.
        let eval = share(&profile, |s| {
            s.frames
                .iter()
                .any(|(n, f)| n == "<module>" && f == "<string>")
        });
        assert!(
            eval > 1.0,
            "{}: eval code missing ({eval:.2}%)",
            python.name
        );
    }
}

/// A thread created by C code (here `pthread_create` called through ctypes) that enters
/// Python through `PyGILState_Ensure` (ctypes callbacks do), code imported from a zip file,
/// and a class whose Python `__init__` CPython 3.13 runs through its `_Py_InitCleanup` shim.
const ENTRIES: &str = r#"
import ctypes, os, sys, tempfile, zipfile
START = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
def from_c_thread(arg):
    work(3000000)
    return None
start = START(from_c_thread)
libc = ctypes.CDLL(None)
tid = ctypes.c_ulong()
assert libc.pthread_create(ctypes.byref(tid), None, start, None) == 0
libc.pthread_join(tid, None)
d = tempfile.mkdtemp()
z = os.path.join(d, "lib.zip")
with zipfile.ZipFile(z, "w") as f:
    f.writestr("zipped.py", "def zipped_work(n):\n    t = 0\n    for i in range(n):\n        t += i % 3\n    return t\n")
sys.path.insert(0, z)
import zipped
zipped.zipped_work(3000000)
class Made:
    def __init__(self):
        work(20000)
for _ in range(150):
    Made()
"#;

#[test]
fn c_threads_zip_imports_and_init_shims() {
    for python in interpreters_with_python_frames("entries") {
        let (_, profile) = profiled_ok(&python, &["-c", &with_work(ENTRIES)], &[]);
        let c_thread = share(&profile, |s| {
            s.frames[0].0 != "_start" && s.has("from_c_thread") && s.has("work")
        });
        assert!(
            c_thread > 10.0,
            "{}: C-created thread {c_thread:.1}%",
            python.name
        );
        let zipped = share(&profile, |s| {
            s.frames
                .iter()
                .any(|(n, f)| n == "zipped_work" && f.ends_with("lib.zip/zipped.py"))
        });
        assert!(
            zipped > 10.0,
            "{}: zip-imported code {zipped:.1}%",
            python.name
        );
        let init = share(&profile, |s| {
            s.position("work").is_some_and(|w| {
                s.frames[..w]
                    .iter()
                    .any(|(n, f)| n.ends_with("__init__") && f == "<string>")
            })
        });
        assert!(init > 2.0, "{}: Made.__init__ {init:.1}%", python.name);
        // Interpreter plumbing is not shown as Python code: the 3.13 shim has no file of its own.
        // (Frozen stdlib modules are real Python code: zipimporter.__init__ runs from
        // `<frozen zipimport>` on 3.9+.)
        let shim = share(&profile, |s| {
            s.frames.iter().any(|(n, f)| {
                n == "__init__"
                    && !f.ends_with(".py")
                    && f != "<string>"
                    && !f.starts_with("<frozen ")
            })
        });
        assert_eq!(
            shim, 0.0,
            "{}: an __init__ frame that is not user code",
            python.name
        );
    }
}
