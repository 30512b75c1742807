//! The profiled program behaves exactly as without the profiler; processes that are not
//! Python are left alone; settings are read as documented.

use pyigprof_suite::*;
use std::process::Command;

#[test]
fn a_process_that_is_not_python_is_left_alone() {
    let preload = &artifacts().preload;
    let dir = scratch_dir("notpython");
    let out = Command::new("/bin/true")
        .env("LD_PRELOAD", preload)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("/bin/sh")
        .args(["-c", "echo hello; exit 3"])
        .env("LD_PRELOAD", preload)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stdout, b"hello\n");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "a profile was written for a non-Python process"
    );
}

const SCRIPT: &str = r#"
import sys
def spin():
    t = 0
    for i in range(2000000):
        t += i % 3
    return t
spin()
print("out", spin())
sys.stderr.write("err\n")
mode = sys.argv[1]
if mode == "sys.exit":
    sys.exit(7)
elif mode == "raise":
    raise ValueError("boom")
elif mode == "exit":
    exit(5)
"#;

#[test]
fn output_and_exit_status_are_unchanged_and_the_profile_is_written_on_every_normal_exit() {
    for python in python311("exit_paths") {
        let dir = scratch_dir("exit");
        let script = dir.join("exits.py");
        std::fs::write(&script, SCRIPT).unwrap();
        for (mode, code) in [("end", 0), ("sys.exit", 7), ("raise", 1), ("exit", 5)] {
            let plain = Command::new(&python.path)
                .args([script.to_str().unwrap(), mode])
                .output()
                .unwrap();
            let run = run_profiled(
                &python.path,
                &[script.to_str().unwrap(), mode],
                &[("PYIGPROF_QUIET", "1")],
            );
            assert_eq!(
                run.output.status.code(),
                Some(code),
                "{} {mode}",
                python.name
            );
            assert_eq!(run.output.status.code(), plain.status.code());
            assert_eq!(
                run.output.stdout, plain.stdout,
                "{} {mode}: stdout changed",
                python.name
            );
            assert_eq!(
                run.output.stderr, plain.stderr,
                "{} {mode}: stderr changed (PYIGPROF_QUIET)",
                python.name
            );
            let profile = run.profile();
            assert!(
                share(&profile, |s| s.has("spin")) > 50.0,
                "{} {mode}: spin missing",
                python.name
            );
        }
    }
}

/// Development mode and CPython's debug allocators, as CI jobs run Python: `-X dev`,
/// `PYTHONDEVMODE=1`, `PYTHONMALLOC=debug` / `malloc_debug`. The debug allocator checks at
/// exit that each block is freed by the allocator that made it; the profiler's audit hook,
/// registered before Python chose its allocator, made 3.8+ stop with "Fatal Python error:
/// _PyMem_DebugRawFree: bad ID" (exit 134).
#[test]
fn development_mode_and_debug_allocators_change_nothing() {
    let program = "import warnings\n\
                   def spin():\n\
                   \x20   t = 0\n\
                   \x20   for i in range(2000000):\n\
                   \x20       t += i % 3\n\
                   \x20   return t\n\
                   print(spin())\n";
    // (name, interpreter flags, environment, first version that has it: -X dev and
    // PYTHONDEVMODE came in 3.7, PYTHONMALLOC in 3.6)
    type Mode<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)], (u32, u32));
    let modes: [Mode; 4] = [
        ("-X dev", &["-X", "dev"], &[], (3, 7)),
        ("PYTHONDEVMODE=1", &[], &[("PYTHONDEVMODE", "1")], (3, 7)),
        (
            "PYTHONMALLOC=debug",
            &[],
            &[("PYTHONMALLOC", "debug")],
            (3, 6),
        ),
        (
            "PYTHONMALLOC=malloc_debug",
            &[],
            &[("PYTHONMALLOC", "malloc_debug")],
            (3, 6),
        ),
    ];
    let covered = interpreters_for(
        "development_mode",
        "interpreters with development mode or PYTHONMALLOC (3.6+)",
        |p| p.version >= (3, 6),
    );
    for python in &covered {
        for (mode, flags, env, since) in modes {
            if python.version < since {
                continue;
            }
            let args: Vec<&str> = flags.iter().copied().chain(["-c", program]).collect();
            let plain = Command::new(&python.path)
                .args(&args)
                .envs(env.iter().copied())
                .output()
                .unwrap();
            let quiet: Vec<(&str, &str)> = env
                .iter()
                .copied()
                .chain([("PYIGPROF_QUIET", "1")])
                .collect();
            let run = run_profiled(&python.path, &args, &quiet);
            let who = format!("{} {mode}", python.name);
            assert!(plain.status.success(), "{who}: fails without the profiler");
            assert_eq!(
                run.output.status.code(),
                plain.status.code(),
                "{who}: exit status changed; stderr:\n{}",
                run.stderr()
            );
            assert_eq!(run.output.stdout, plain.stdout, "{who}: stdout changed");
            assert_eq!(
                run.output.stderr,
                plain.stderr,
                "{who}: stderr changed:\n{}",
                run.stderr()
            );
            let profile = run.profile();
            assert!(
                share(&profile, |s| s.has("spin")) > 50.0,
                "{who}: spin is missing from the profile"
            );
        }
    }
}

/// A library that loads a plugin by name from a directory its RUNPATH (or RPATH) names
/// with `$ORIGIN`, as wheels load their vendored libraries: glibc searches the RUNPATH of
/// the object that called `dlopen`, which the interposed `dlopen` must not replace with
/// libpyigprof.so's ("cannot open shared object file" under the profiler before).
#[test]
fn dlopen_by_name_searches_the_callers_runpath() {
    const PLUGIN: &str = "int plugin_value(void) { return 42; }\n";
    const LOADER: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
int load_plugin(void) {
    void *handle = dlopen("libplugin_by_name.so", RTLD_NOW);
    if (!handle) {
        fprintf(stderr, "%s\n", dlerror());
        return -1;
    }
    int (*value)(void) = (int (*)(void))dlsym(handle, "plugin_value");
    return value ? value() : -2;
}
"#;
    let program = "import ctypes, sys\n\
                   print(ctypes.CDLL(sys.argv[1]).load_plugin())\n";
    let covered = interpreters_for("dlopen_runpath", "interpreters", |_| true);
    for (kind, flags) in [
        (
            "RUNPATH",
            &["-Wl,-rpath,$ORIGIN/sub", "-Wl,--enable-new-dtags"][..],
        ),
        (
            "RPATH",
            &["-Wl,-rpath,$ORIGIN/sub", "-Wl,--disable-new-dtags"][..],
        ),
    ] {
        let dir = scratch_dir("dlopen-runpath");
        let sub = dir.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        c_library(&sub, "plugin_by_name", PLUGIN, &[]);
        let loader = c_library(&dir, "loader", LOADER, flags);
        let loader = loader.to_str().unwrap();
        for python in &covered {
            let plain = Command::new(&python.path)
                .args(["-c", program, loader])
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&plain.stdout).trim(),
                "42",
                "{} {kind}: without the profiler: {}",
                python.name,
                String::from_utf8_lossy(&plain.stderr)
            );
            let run = run_profiled(
                &python.path,
                &["-c", program, loader],
                &[("PYIGPROF_QUIET", "1")],
            );
            assert_eq!(
                run.stdout().trim(),
                "42",
                "{} {kind}: under the profiler: {}",
                python.name,
                run.stderr()
            );
            assert_eq!(run.output.stderr, plain.stderr, "{} {kind}", python.name);
        }
    }
}

#[test]
fn the_summary_line_names_the_profile() {
    let Some(python) = python311("summary").into_iter().next() else {
        return;
    };
    let run = run_profiled(
        &python.path,
        &["-c", "sum(i*i for i in range(2000000))"],
        &[],
    );
    let stderr = run.stderr();
    let path = run.profiles().pop().expect("profile");
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(stderr.starts_with("pyigprof: wrote "), "{stderr}");
    assert!(
        stderr.contains(&name) && stderr.contains("samples") && stderr.contains("s of CPU time"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn settings_output_rate_and_malformed_values() {
    let Some(python) = python311("settings").into_iter().next() else {
        return;
    };
    let program = ["-c", "print(sum(i*i for i in range(3000000)))"];
    // PYIGPROF_OUTPUT with %p and without .gz: plain text at that path.
    let run = run_profiled(
        &python.path,
        &program,
        &[("PYIGPROF_OUTPUT", "plain-%p.txt"), ("PYIGPROF_HZ", "500")],
    );
    assert!(run.output.status.success());
    let entries = files_in(&run.dir);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let name = entries[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with("plain-") && name.ends_with(".txt"),
        "{name}"
    );
    let pid: u32 = name
        .trim_start_matches("plain-")
        .trim_end_matches(".txt")
        .parse()
        .expect("pid in name");
    let text = std::fs::read_to_string(&entries[0]).expect("plain text profile");
    assert!(
        text.starts_with(&format!("P=(HEX ID={pid:x} N=(")),
        "{}",
        &text[..80.min(text.len())]
    );
    assert!(
        text.lines().next().unwrap().ends_with(" T=0.002000)"),
        "{}",
        text.lines().next().unwrap()
    );

    // A malformed rate: one clear line naming the variable, the default is used, the
    // program runs unchanged.
    let run = run_profiled(&python.path, &program, &[("PYIGPROF_HZ", "fast")]);
    assert!(run.output.status.success());
    assert_eq!(run.stdout().trim(), "8999995500000500000");
    let stderr = run.stderr();
    // That line, then the summary.
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    let stderr = stderr.lines().next().unwrap_or_default();
    assert!(
        stderr.contains("PYIGPROF_HZ")
            && stderr.contains("\"fast\"")
            && stderr.contains("default 250"),
        "{stderr}"
    );
    let profile = run.profile();
    assert!((profile.sources[0].tick_period - 0.004).abs() < 1e-9);
}

#[test]
fn an_unwritable_profile_path_is_reported_and_changes_nothing_else() {
    let Some(python) = python311("unwritable").into_iter().next() else {
        return;
    };
    let run = run_profiled(
        &python.path,
        &["-c", "import sys; print('done'); sys.exit(4)"],
        &[("PYIGPROF_OUTPUT", "/nonexistent-dir/p.gz")],
    );
    assert_eq!(run.output.status.code(), Some(4));
    assert_eq!(run.stdout(), "done\n");
    let stderr = run.stderr();
    assert!(
        stderr.contains("cannot create the profile /nonexistent-dir/p.gz"),
        "{stderr}"
    );
    // PYIGPROF_QUIET: nothing at all on stderr.
    let run = run_profiled(
        &python.path,
        &["-c", "import sys; print('done'); sys.exit(4)"],
        &[
            ("PYIGPROF_OUTPUT", "/nonexistent-dir/p.gz"),
            ("PYIGPROF_QUIET", "1"),
            ("PYIGPROF_HZ", "not a number"),
        ],
    );
    assert_eq!(run.output.status.code(), Some(4));
    assert_eq!(run.stdout(), "done\n");
    assert_eq!(run.stderr(), "", "PYIGPROF_QUIET");
}

/// Which of a series of `malloc` blocks glibc serves with `mmap` (`mallinfo2().hblks`): its
/// dynamic threshold depends on the large blocks freed before, the profiler's included.
const MMAP_THRESHOLD: &str = r#"
import ctypes
class MI(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MI
out = []
for kb in (140, 200, 300, 500, 800, 1500, 3000):
    before = libc.mallinfo2().hblks
    block = bytearray(kb << 10)
    out.append("%d KiB: %s" % (kb, "mmap" if libc.mallinfo2().hblks > before else "heap"))
    del block
print(", ".join(out))
"#;

#[test]
fn the_programs_malloc_tuning_is_left_alone() {
    let Some(python) = python311("malloc threshold").into_iter().next() else {
        return;
    };
    let plain = plain_ok(&python, &["-c", MMAP_THRESHOLD]);
    let run = run_profiled(
        &python.path,
        &["-c", MMAP_THRESHOLD],
        &[("PYIGPROF_QUIET", "1")],
    );
    assert!(run.output.status.success(), "{}", run.stderr());
    let plain = String::from_utf8_lossy(&plain.stdout);
    eprintln!("without pyigprof: {plain}with: {}", run.stdout());
    assert!(plain.contains("140 KiB: mmap"), "{plain}");
    assert_eq!(run.stdout(), plain);
}

/// The program's `malloc` heap after importing extension modules (each `dlopen` makes
/// pyigprof rescan the loaded objects): bytes in use, and the heap's size.
const HEAP_IN_USE: &str = r#"
import ctypes
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
import json, decimal, hashlib, zlib, bz2, csv, array, select
m = libc.mallinfo2()
print("%d %d" % (m.uordblks, m.arena))
"#;

#[test]
fn the_programs_heap_holds_none_of_pyigprofs_memory() {
    // pyigprof's blocks in the program's heap would change when it is trimmed: numpy_work
    // had 88 k page faults instead of its own 253 k. They come from a private heap.
    for python in interpreters_with_python_frames("program's heap") {
        let numbers = |stdout: &[u8]| -> (i64, i64) {
            let text = String::from_utf8_lossy(stdout);
            let mut it = text.split_whitespace().map(|w| w.parse::<i64>().unwrap());
            (it.next().unwrap(), it.next().unwrap())
        };
        let plain = plain_ok(&python, &["-c", HEAP_IN_USE]);
        let run = run_profiled(
            &python.path,
            &["-c", HEAP_IN_USE],
            &[("PYIGPROF_QUIET", "1")],
        );
        assert!(run.output.status.success(), "{}", run.stderr());
        let (used, arena) = numbers(&plain.stdout);
        let (used_profiled, arena_profiled) = numbers(&run.output.stdout);
        eprintln!(
            "{}: in use {used} B, heap {arena} B; profiled: {used_profiled} B, {arena_profiled} B",
            python.name
        );
        // glibc may keep a few small blocks of its own on pyigprof's behalf (dlerror state,
        // atfork handlers): far below the ~370 KB that pyigprof's own blocks were.
        assert!(
            (used_profiled - used).abs() <= 16384,
            "{}: {} bytes of the program's heap in use by pyigprof",
            python.name,
            used_profiled - used
        );
    }
}

#[test]
fn a_full_disk_is_reported_and_leaves_no_partial_profile() {
    let Some(python) = python311("full disk").into_iter().next() else {
        return;
    };
    // A 4 KiB tmpfs, filled up, mounted in a private user and mount namespace.
    let dir = scratch_dir("full-disk");
    let script = format!(
        "mount -t tmpfs -o size=4k tmpfs {dir} && head -c 4096 /dev/zero > {dir}/filler 2>/dev/null; \
         LD_PRELOAD={preload} PYIGPROF_LOG=stderr PYIGPROF_OUTPUT={dir}/p.gz {python} -c \"import sys; sum(i * i for i in range(2000000)); print('done'); sys.exit(4)\"; \
         echo status=$?; ls {dir}",
        dir = dir.display(),
        preload = artifacts().preload.display(),
        python = python.path.display(),
    );
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", &script])
        .output();
    let out = match out {
        Ok(out)
            if !String::from_utf8_lossy(&out.stderr).contains("mount:") && out.status.success() =>
        {
            out
        }
        other => {
            eprintln!("full disk: skipped, cannot mount a private tmpfs here: {other:?}");
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("full disk: stdout {stdout:?}, stderr {stderr:?}");
    // The program's output and exit status are its own; one line says what happened; the
    // partial file is removed.
    assert_eq!(stdout, "done\nstatus=4\nfiller\n");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with(&format!(
            "pyigprof: cannot write the profile {}/p.gz",
            dir.display()
        )) && lines[0].contains("No space left on device"),
        "{stderr}"
    );
}

#[test]
fn a_relative_profile_path_is_relative_to_the_start_directory() {
    let Some(python) = python311("chdir").into_iter().next() else {
        return;
    };
    let elsewhere = scratch_dir("elsewhere");
    let script = format!(
        "import os; os.chdir({:?}); sum(i*i for i in range(1000000))",
        elsewhere.to_str().unwrap()
    );
    let run = run_profiled(&python.path, &["-c", &script], &[("PYIGPROF_QUIET", "1")]);
    assert!(run.output.status.success(), "{}", run.stderr());
    assert_eq!(
        run.profiles().len(),
        1,
        "profile not in the start directory"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

const FORK: &str = r#"
import os
def parent_work():
    return sum(i * i for i in range(3000000))
def child_work():
    return sum(i * i for i in range(3000000))
pid = os.fork()
if pid == 0:
    child_work()
    raise SystemExit(0)
parent_work()
_, status = os.waitpid(pid, 0)
print("child status", status)
"#;

#[test]
fn a_fork_child_writes_its_own_profile_with_only_its_own_work() {
    let Some(python) = python311("fork").into_iter().next() else {
        return;
    };
    let run = run_profiled(&python.path, &["-c", FORK], &[("PYIGPROF_QUIET", "1")]);
    assert!(run.output.status.success(), "{}", run.stderr());
    assert_eq!(run.stdout(), "child status 0\n");
    let paths = run.profiles();
    assert_eq!(paths.len(), 2, "{paths:?}");
    let mut saw_parent = false;
    let mut saw_child = false;
    for path in paths {
        let profile = igprof_analyse::read_profiles(&[&path]).unwrap();
        let parent = share(&profile, |s| s.has("parent_work"));
        let child = share(&profile, |s| s.has("child_work"));
        assert!(
            parent == 0.0 || child == 0.0,
            "{}: parent {parent:.1}% and child {child:.1}% mixed",
            path.display()
        );
        saw_parent |= parent > 30.0;
        saw_child |= child > 30.0;
    }
    assert!(saw_parent && saw_child);
}

/// Runs `sys.argv[2]` as a program (with `LD_PRELOAD=sys.argv[1]` when that is not empty)
/// and prints the largest peak resident memory (KiB) of it and its descendants, exits
/// included.
const PEAK_OF_CHILD: &str = r#"
import os, resource, subprocess, sys
env = dict(os.environ)
if sys.argv[1]:
    env["LD_PRELOAD"] = sys.argv[1]
subprocess.check_call([sys.executable, "-c", sys.argv[2]], env=env)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"#;

/// Forks a child that computes for 50 ms of CPU time (so that it has samples and writes a
/// profile) and ends with `os._exit`.
const FORKS: &str = r#"
import os
pid = os.fork()
if pid == 0:
    start = sum(os.times()[:2])
    while sum(os.times()[:2]) - start < 0.05:
        pass
    os._exit(0)
os.waitpid(pid, 0)
"#;

#[test]
fn a_process_and_its_fork_child_stay_small() {
    // 4096 thread slots of ~92 KB are reserved; only those of live threads may become
    // resident. Visiting every slot at exit made a process 17 MB larger, and clearing
    // every slot in a fork child made the child 38 MB larger. What remains (2-6 MB) is
    // writing the profile: symbol tables read from the mapped libraries.
    for python in interpreters_with_python_frames("peak memory") {
        let dir = scratch_dir("peak");
        let peak = |preload: &str| -> i64 {
            let out = Command::new(&python.path)
                .args(["-c", PEAK_OF_CHILD, preload, FORKS])
                .env("PYIGPROF_QUIET", "1")
                .current_dir(&dir)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {}",
                python.name,
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        };
        let plain = peak("");
        let profiled = peak(artifacts().preload.to_str().unwrap());
        let profiles = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(profiles, 2, "{}: parent and child profiles", python.name);
        eprintln!("{}: peak KiB {plain} -> {profiled}", python.name);
        assert!(
            profiled - plain <= 8192,
            "{}: the program grew from {plain} KiB to {profiled} KiB under pyigprof",
            python.name
        );
    }
}

/// Blocking calls that a signal would cut short, each timed by the program: libc's
/// `sleep` and `usleep` (ctypes), `signal.pause` until an interval timer's `SIGALRM`, and
/// SQLite waiting for a lock another connection holds (its busy timeout sleeps in steps).
const BLOCKING_CALLS: &str = r#"
import ctypes, ctypes.util, os, signal, sqlite3, sys, tempfile, time
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
def in_libc_sleep():
    t = time.time(); left = libc.sleep(1); print("sleep", left, time.time() - t)
def in_usleep():
    t = time.time(); rc = libc.usleep(300000); print("usleep", rc, ctypes.get_errno(), time.time() - t)
def in_pause():
    signal.signal(signal.SIGALRM, lambda *a: None)
    signal.setitimer(signal.ITIMER_REAL, 0.4)
    t = time.time(); signal.pause(); print("pause", time.time() - t)
def in_sqlite_busy_wait():
    path = os.path.join(tempfile.mkdtemp(), "db")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("create table t (x)")
    holder.execute("begin exclusive")
    waiter = sqlite3.connect(path, timeout=0.5)
    t = time.time()
    try:
        waiter.execute("select * from t").fetchall()
        print("sqlite 0", time.time() - t)
    except sqlite3.OperationalError as e:
        print("sqlite", int("locked" in str(e)), time.time() - t)
in_libc_sleep(); in_usleep(); in_pause(); in_sqlite_busy_wait()
"#;

/// What a program can see of the wall-clock sampler: its threads, its children, and
/// CPython 3.12+'s warning that `os.fork()` in a multi-threaded process may deadlock.
const SEES_NO_SAMPLER: &str = r#"
import os, sys, time, warnings
warnings.simplefilter("error")
print("threads", len(os.listdir("/proc/self/task")))
time.sleep(0.05)
pid = os.fork()
if pid == 0:
    time.sleep(0.05)
    os._exit(7)
print("child", os.waitpid(pid, 0)[1] >> 8)
try:
    os.wait()
    print("another child")
except ChildProcessError:
    print("no other child")
"#;

#[test]
fn wall_mode_never_interrupts_a_blocked_thread() {
    let big = "import sys; sys.stdout.write('x' * (4 << 20))";
    for python in interpreters_for("wall_blocking", "interpreters from 3.5", |p| {
        p.version >= (3, 5)
    }) {
        // The sampler is neither a thread nor a child the program can wait for.
        let plain = plain_ok(&python, &["-c", SEES_NO_SAMPLER]);
        let run = run_profiled(
            &python.path,
            &["-c", SEES_NO_SAMPLER],
            &[("PYIGPROF_CLOCK", "wall"), ("PYIGPROF_QUIET", "1")],
        );
        assert!(
            run.output.status.success(),
            "{}: {}",
            python.name,
            run.stderr()
        );
        // The parent's profile and the fork child's.
        assert_eq!(run.profiles().len(), 2, "{}", python.name);
        assert_eq!(
            run.stdout(),
            String::from_utf8_lossy(&plain.stdout),
            "{}",
            python.name
        );
        assert_eq!(
            run.stderr(),
            String::from_utf8_lossy(&plain.stderr),
            "{}",
            python.name
        );

        // Unbuffered stdout into a pipe read slowly: every write blocks, and a short write
        // is not retried by CPython. In cpu mode too: a perf event's overflow in kernel
        // mode, in the write before it blocked, cut it short in every run until the events
        // sampled in user mode only.
        for clock in ["wall", "cpu"] {
            let dir = scratch_dir("wall-pipe");
            let mut child = Command::new(&python.path)
                .args(["-u", "-c", big])
                .current_dir(&dir)
                .env("LD_PRELOAD", &artifacts().preload)
                .env("PYIGPROF_CLOCK", clock)
                .env("PYIGPROF_HZ", "1000")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(600));
            let mut received = Vec::new();
            std::io::Read::read_to_end(child.stdout.as_mut().unwrap(), &mut received).unwrap();
            let status = child.wait().unwrap();
            assert!(status.success(), "{}: {clock}: {status:?}", python.name);
            assert_eq!(
                received.len(),
                4 << 20,
                "{}: {clock} mode: bytes delivered",
                python.name
            );
        }

        let (run, profile) = profiled_ok(
            &python,
            &["-c", BLOCKING_CALLS],
            &[("PYIGPROF_CLOCK", "wall"), ("PYIGPROF_HZ", "1000")],
        );
        let out = run.stdout();
        eprintln!("{}: {}", python.name, out.trim().replace('\n', "; "));
        // The numbers the program printed after `name`.
        let values = |name: &str| -> Vec<f64> {
            let line = out.lines().find(|l| l.starts_with(&format!("{name} ")));
            let line = line.unwrap_or_else(|| panic!("{}: no {name} in {out}", python.name));
            line.split_whitespace()
                .skip(1)
                .map(|v| v.parse().unwrap())
                .collect()
        };
        let at_least = |what: &str, got: f64, want: f64| {
            assert!(
                got >= want,
                "{}: {what} took {got:.3} s, not {want} s",
                python.name
            );
        };
        let sleep = values("sleep");
        assert_eq!(
            sleep[0], 0.0,
            "{}: sleep(1) left {} s",
            python.name, sleep[0]
        );
        at_least("sleep(1)", sleep[1], 0.99);
        let usleep = values("usleep");
        assert_eq!(
            usleep[0], 0.0,
            "{}: usleep failed, errno {}",
            python.name, usleep[1]
        );
        at_least("usleep(300000)", usleep[2], 0.29);
        at_least("pause until a 0.4 s alarm", values("pause")[0], 0.39);
        let sqlite = values("sqlite");
        assert_eq!(sqlite[0], 1.0, "{}: no 'database is locked'", python.name);
        at_least("the busy timeout of 0.5 s", sqlite[1], 0.45);
        // The time blocked is where the program blocked, under its Python caller, and was
        // sampled from outside the thread.
        let stats = run.statistics();
        let blocked: f64 = stats["stats.blocked"].parse().unwrap();
        let samples: f64 = stats["stats.samples"].parse().unwrap();
        let in_sleep = share(&profile, |s| s.has("in_libc_sleep") && s.has("sleep"));
        let in_pause = share(&profile, |s| s.has("in_pause") && s.has("pause"));
        let total = seconds(&profile);
        eprintln!(
            "{}: {:.0}% of samples taken while blocked; libc sleep {in_sleep:.1}%, pause {in_pause:.1}% of {total:.2} s",
            python.name,
            100.0 * blocked / samples
        );
        assert!(blocked > 0.5 * samples, "{}: {stats:?}", python.name);
        // sleep(1) is about 1 s of the run's 2.3–3 s; pause about 0.4 s.
        let expect = |what: &str, got: f64, seconds: f64| {
            let want = 100.0 * seconds / total;
            assert!(
                (got - want).abs() < 6.0,
                "{}: {what} {got:.1}%, expected about {want:.1}%",
                python.name
            );
        };
        expect("libc sleep", in_sleep, 1.0);
        expect("pause", in_pause, values("pause")[0]);
    }
}

/// Reads from a pipe that only the `SIGALRM` handler writes to. Another thread sends the
/// process `SIGALRM` once the main thread is blocked in the read, so that only a read that
/// returns `EINTR` lets Python run the handler (a read the kernel restarts blocks for
/// ever); it blocks the signal itself, so that only the main thread can take it. The main
/// thread spends some CPU time before each read, so that its CPU timer is due as the
/// signal wakes it.
const INTERRUPTED_READS: &str = r#"
import os, signal, sys, threading, time
r, w = os.pipe()
def handler(sig, frame):
    os.write(w, b"x")
signal.signal(signal.SIGALRM, handler)
n = int(sys.argv[1])
done = [0]
def sender():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    blocked = ("0 0x%x " % r).encode()
    path = "/proc/self/task/%d/syscall" % os.getpid()
    for i in range(n):
        while True:
            with open(path, "rb") as f:
                if f.read().startswith(blocked):
                    break
        os.kill(os.getpid(), signal.SIGALRM)
        while done[0] <= i:
            time.sleep(0.0001)
threading.Thread(target=sender, daemon=True).start()
for i in range(n):
    x = 0
    for j in range(2000):
        x += j
    assert os.read(r, 1) == b"x"
    done[0] = i + 1
print("%d interrupted reads" % n)
"#;

#[test]
fn a_signal_that_interrupts_a_blocked_call_still_interrupts_it() {
    // The thread's own SIGPROF is delivered before the process's SIGALRM: with SA_RESTART
    // it used to restart the read the signal interrupted, which then blocked for ever
    // (CPython's test_io hung so). Before the fix, 6 of 8 runs of 5,000 reads hung (3.6,
    // 3.12, Debian's 3.11 and 3.15, cpu and wall mode).
    const READS: &str = "5000";
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(90);
    for python in interpreters_for("interrupted_reads", "interpreters from 3.5", |p| {
        p.version >= (3, 5)
    }) {
        let plain = plain_ok(&python, &["-c", INTERRUPTED_READS, READS]);
        for clock in ["cpu", "wall"] {
            let dir = scratch_dir("interrupted-reads");
            let mut child = Command::new(&python.path)
                .args(["-c", INTERRUPTED_READS, READS])
                .current_dir(&dir)
                .env("LD_PRELOAD", &artifacts().preload)
                .env("PYIGPROF_CLOCK", clock)
                .env("PYIGPROF_HZ", "1000")
                .env("PYIGPROF_QUIET", "1")
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let Some(status) = wait_at_most(&mut child, LIMIT) else {
                panic!(
                    "{} ({clock}): a read interrupted by SIGALRM still blocked after {} s \
                     (without the profiler: {})",
                    python.name,
                    LIMIT.as_secs(),
                    String::from_utf8_lossy(&plain.stdout).trim()
                );
            };
            let mut out = String::new();
            std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
            assert!(status.success(), "{} ({clock}): {status:?}", python.name);
            assert_eq!(
                out,
                String::from_utf8_lossy(&plain.stdout),
                "{} ({clock})",
                python.name
            );
        }
    }
}

/// A handler the program installs (behind pyigprof's trampoline, hooks::interruptions)
/// still runs after a child that shares the program's memory reset every handler before
/// its `exec`.
const HANDLER_AFTER_VFORK_CHILD: &str = r#"
import multiprocessing, os, signal
got = []
if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
    # multiprocessing's spawn starts its child through _posixsubprocess, which uses vfork
    # on 3.13+ and then resets every handler in the child, before its exec.
    p = multiprocessing.get_context("spawn").Process(target=os.getpid)
    p.start()
    p.join()
    os.kill(os.getpid(), signal.SIGUSR1)
    print("handled" if got else "lost", p.exitcode)
"#;

#[test]
fn a_handler_still_runs_after_a_vfork_child_reset_the_handlers() {
    // Before the fix the vfork child cleared the parent's record of the handler: "lost" on
    // 3.12, 3.13 and 3.15 (multiprocessing's spawn tests lost their signals).
    for python in interpreters_for("vfork_child", "interpreters from 3.5", |p| {
        p.version >= (3, 5)
    }) {
        let dir = scratch_dir("vfork-child");
        let script = dir.join("program.py");
        std::fs::write(&script, HANDLER_AFTER_VFORK_CHILD).unwrap();
        let script = script.to_string_lossy().into_owned();
        let plain = plain_ok(&python, &[&script]);
        assert_eq!(
            String::from_utf8_lossy(&plain.stdout),
            "handled 0\n",
            "{}",
            python.name
        );
        let run = run_profiled(&python.path, &[&script], &[("PYIGPROF_QUIET", "1")]);
        assert!(
            run.output.status.success(),
            "{}: {}",
            python.name,
            run.stderr()
        );
        assert_eq!(run.stdout(), "handled 0\n", "{}", python.name);
    }
}

/// By default (no `PYIGPROF_LOG`, no `PYIGPROF_QUIET`) every profiled process's stdout and
/// stderr are what they are without the profiler: the process started, its subprocess and
/// its fork child (each of which writes a profile), a malformed setting's warning
/// included; `PYIGPROF_LOG=FILE` collects every process's lines there instead.
#[test]
fn the_programs_streams_are_byte_identical_in_every_process() {
    let Some(python) = python311("streams").into_iter().next() else {
        return;
    };
    let run = |env: &[(&str, &str)]| {
        let dir = scratch_dir("streams");
        let mut cmd = Command::new(&python.path);
        cmd.args(["-c", STREAMS_PROGRAM])
            .current_dir(&dir)
            .env_remove("PYIGPROF_LOG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        (cmd.output().expect("run python"), dir)
    };
    let (plain, _) = run(&[]);
    assert_eq!(plain.status.code(), Some(3), "{}", text(&plain.stderr));
    let preload = artifacts().preload.to_string_lossy().into_owned();
    for malformed in [false, true] {
        let mut env = vec![("LD_PRELOAD", preload.as_str())];
        if malformed {
            env.push(("PYIGPROF_HZ", "fast"));
        }
        let (profiled, dir) = run(&env);
        let what = if malformed {
            "with a malformed PYIGPROF_HZ"
        } else {
            "by default"
        };
        assert_eq!(
            profiled.status.code(),
            Some(3),
            "{what}: {}",
            text(&profiled.stderr)
        );
        assert_eq!(profiled.stdout, plain.stdout, "{what}: stdout changed");
        assert_eq!(profiled.stderr, plain.stderr, "{what}: stderr changed");
        let written = std::fs::read_dir(&dir).unwrap().flatten().count();
        assert_eq!(
            written, 3,
            "{what}: the parent, its subprocess and its fork child"
        );
    }
    // The lines go to a file when asked: one summary per profile, and the warning about
    // the malformed setting of each process that read the settings (the parent and its
    // subprocess: a fork child keeps its parent's).
    let log = scratch_dir("streams-log").join("pyigprof.log");
    let log_arg = log.to_string_lossy().into_owned();
    let (profiled, dir) = run(&[
        ("LD_PRELOAD", preload.as_str()),
        ("PYIGPROF_LOG", log_arg.as_str()),
        ("PYIGPROF_HZ", "fast"),
    ]);
    assert_eq!(
        profiled.stderr, plain.stderr,
        "PYIGPROF_LOG=FILE: stderr changed"
    );
    let said = std::fs::read_to_string(&log).expect("the log file");
    let mut named: Vec<String> = said
        .lines()
        .filter_map(|l| l.strip_prefix("pyigprof: wrote "))
        .map(|rest| rest[..rest.find(": ").unwrap()].to_string())
        .collect();
    named.sort();
    let written: Vec<String> = files_in(&dir)
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    assert_eq!(named, written, "{said}");
    assert_eq!(
        said.lines()
            .filter(|l| l.starts_with("pyigprof: PYIGPROF_HZ="))
            .count(),
        2,
        "{said}"
    );
}

/// The default destination of pyigprof's lines: the controlling terminal. A process on a
/// terminal whose output goes to pipes says its summary there, not in the pipes; a process
/// that leads its own session on a pseudo-terminal (as `pty.fork` and `pexpect` children
/// do, whose terminal a test reads) says nothing.
#[test]
fn the_summary_goes_to_the_terminal_and_not_into_a_session_leaders_own() {
    let Some(python) = python311("terminal").into_iter().next() else {
        return;
    };
    // Unprofiled: makes a pseudo-terminal the controlling terminal of a new session
    // (pty.fork), in which the profiled program runs as a child with pipes (`child`), or
    // as the session's leader itself (`leader`); prints what the terminal received, then
    // what the pipes did.
    let driver = r#"
import os, pty, subprocess, sys
mode, program = sys.argv[1], sys.argv[2]
pid, master = pty.fork()
if pid == 0:
    env = dict(os.environ, LD_PRELOAD=os.environ["PRELOAD"])
    if mode == "leader":
        os.execve(sys.executable, [sys.executable, "-c", program], env)
    out = subprocess.run([sys.executable, "-c", program], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open("pipes.txt", "wb") as f:
        f.write(out.stdout + b"|" + out.stderr)
    os._exit(0)
seen = b""
while True:
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
os.waitpid(pid, 0)
print(repr(seen))
"#;
    let program =
        "import sys; sum(i * i for i in range(2000000)); print('out'); sys.stderr.write('err\\n')";
    for mode in ["child", "leader"] {
        let dir = scratch_dir("terminal");
        let out = Command::new(&python.path)
            .args(["-c", driver, mode, program])
            .current_dir(&dir)
            .env_remove("LD_PRELOAD")
            .env_remove("PYIGPROF_LOG")
            .env("PRELOAD", &artifacts().preload)
            .output()
            .expect("run the driver");
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
        let terminal = text(&out.stdout);
        let profiles = file_names_in(&dir)
            .iter()
            .filter(|n| n.ends_with(".gz"))
            .count();
        assert_eq!(profiles, 1, "{mode}: {terminal}");
        if mode == "child" {
            assert!(
                terminal.contains("pyigprof: wrote "),
                "{mode}: the terminal got {terminal}"
            );
            let pipes = std::fs::read(dir.join("pipes.txt")).unwrap();
            assert_eq!(text(&pipes), "out\n|err\n", "{mode}: the pipes");
        } else {
            assert!(
                !terminal.contains("pyigprof"),
                "{mode}: the terminal got {terminal}"
            );
            assert!(
                terminal.contains("out") && terminal.contains("err"),
                "{terminal}"
            );
        }
    }
}

/// A C function that takes its thread's stack down to `leave` bytes above the stack's end
/// (as a deep recursion does) and spins there for `ms` ms of the thread's CPU time.
const DEEP_SPIN: &str = r#"
#define _GNU_SOURCE
#include <alloca.h>
#include <pthread.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

__attribute__((noinline)) static double spin(double ms) {
    double x = 0, end = cpu_ms() + ms;
    while (cpu_ms() < end)
        for (int i = 0; i < 1000; i++) x += i * 0.5;
    return x;
}

double deep_spin(long leave, double ms) {
    pthread_attr_t attr;
    void *low;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return -1;
    pthread_attr_getstack(&attr, &low, &size);
    pthread_attr_destroy(&attr);
    char here;
    long use = (long)(&here - (char *)low) - leave;
    if (use < 0) return -1;
    volatile char *deep = alloca(use);
    deep[0] = 1;
    return spin(ms);
}
"#;

/// A thread that spins with 6 KiB of its stack left (DEEP_SPIN), then the main thread's own
/// work.
const NEAR_THE_STACKS_END: &str = r#"
import ctypes, os, sys, threading
lib = ctypes.CDLL(sys.argv[1])
lib.deep_spin.restype = ctypes.c_double
lib.deep_spin.argtypes = [ctypes.c_long, ctypes.c_double]
threading.stack_size(1 << 20)
out = []
t = threading.Thread(target=lambda: out.append(lib.deep_spin(6144, 400.0)))
t.start()
t.join()
print("spun: %s, main: %d" % (out[0] >= 0, sum(i * i for i in range(300000))))
times = os.times()
sys.stderr.write("cpu_s=%.4f\n" % (times[0] + times[1]))
"#;

#[test]
fn a_thread_with_no_stack_room_left_is_not_sampled_and_not_crashed() {
    // The kernel puts the signal's frame (3.5 KB with AVX-512's state) below the spinning
    // code, and a capture needs up to 6.5 KB more: it would run off the stack's end into
    // its guard page, a SIGSEGV that ends the program (3.10's recursion in a 32 KiB
    // `threading.stack_size` thread did, at 250 Hz too). Such samples are dropped, counted.
    for python in interpreters_with_python_frames("no stack room") {
        let dir = scratch_dir("deep-spin");
        let lib = c_library(&dir, "deepspin", DEEP_SPIN, &["-O2"]);
        let lib = lib.to_str().unwrap();
        let plain = plain_ok(&python, &["-c", NEAR_THE_STACKS_END, lib]);
        let plain = String::from_utf8_lossy(&plain.stdout).into_owned();
        assert!(plain.starts_with("spun: True"), "{}: {plain}", python.name);
        // On perf events and on POSIX timers, whose expirations are reconciled with the
        // thread's ticks at its end (a dropped sample's ticks are not unsampled time).
        for events in ["1", "0"] {
            let run = run_profiled(
                &python.path,
                &["-c", NEAR_THE_STACKS_END, lib],
                &[("PYIGPROF_HZ", "4000"), ("PYIGPROF_PERF_EVENTS", events)],
            );
            let label = format!("{} (PYIGPROF_PERF_EVENTS={events})", python.name);
            assert!(
                run.output.status.success(),
                "{label}: exit {:?}\n{}",
                run.output.status,
                run.stderr()
            );
            assert_eq!(run.stdout(), plain, "{label}");
            let stats = run.statistics();
            let no_room = statistic(&stats, "stats.dropped_no_stack_room");
            let dropped_ticks = statistic(&stats, "stats.dropped_ticks");
            let seconds = statistic(&stats, "stats.ticks") * run.profile().sources[0].tick_period;
            let cpu: f64 = run
                .stderr()
                .lines()
                .find_map(|l| l.strip_prefix("cpu_s="))
                .and_then(|v| v.parse().ok())
                .expect("the program's CPU time");
            eprintln!(
                "{label}: {no_room} samples without stack room, {dropped_ticks} ticks dropped; \
                 {seconds:.3} s in the profile, {cpu:.3} s of CPU time"
            );
            // 400 ms spinning: about 1,600 ticks of 0.25 ms, in ~1,600 samples on perf
            // events, 40–90 on timers (the kernel's 250 Hz tick; the expirations a thread's
            // last tick did not deliver are placed at its end, 945 ticks dropped at least).
            assert!(no_room >= 30.0, "{label}: {no_room}");
            assert!(dropped_ticks >= 500.0, "{label}: {dropped_ticks}");
            // The dropped time is in the profile's total once, not twice.
            assert!(
                (seconds - cpu).abs() <= 0.1 * cpu,
                "{label}: {seconds:.3} s in the profile, {cpu:.3} s of CPU time"
            );
            assert!(
                run.stderr()
                    .contains("where the thread's stack had no room left for the profiler"),
                "{label}: {}",
                run.stderr()
            );
        }
    }
}
