//! Every way a process lives and dies leaves a correct profile and the program's behaviour
//! unchanged: `_exit`, signals, crashes, `exec`, `fork` and `multiprocessing`, children that
//! are not Python, snapshots on demand and periodically, a program that takes `SIGPROF`
//! for itself, `dlclose`, many threads, deep recursion, the output file's safety.

use pyigprof_suite::*;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

/// `spin()`: the hot function every program below runs before it ends its own way.
const SPIN: &str = "def spin():\n    t = 0\n    for i in range(3000000):\n        t += i % 3\n    return t\nspin()\n";

/// Whether a stack is in the code of the `-c` program (under its `<module>` frame, whose file
/// is `<string>`), not in the interpreter's start-up before it, which a site-packages `.pth`
/// file can make a tenth of a short run (pyenv's 3.11 here imports certifi from one). The
/// lines of a `.pth` file that `site` executes are a `<module>` of `<string>` too, under
/// `site`'s frames.
fn in_program(s: &Stack) -> bool {
    let site = |file: &str| file == "<frozen site>" || file.ends_with("/site.py");
    s.frames
        .iter()
        .any(|(name, file)| name == "<module>" && file == "<string>")
        && !s.frames.iter().any(|(_, file)| site(file))
}

/// The share (0–100) of the `-c` program's own time ([`in_program`]) whose stack `pred`
/// accepts.
fn program_share(profile: &igprof_analyse::Profile, pred: impl Fn(&Stack) -> bool) -> f64 {
    let program = share(profile, in_program);
    if program == 0.0 {
        return 0.0;
    }
    100.0 * share(profile, |s| in_program(s) && pred(s)) / program
}

fn python() -> Interpreter {
    python311("lifecycle")
        .into_iter()
        .next()
        .expect("a Python 3.11")
}

/// Runs `program` with and without the profiler; the exit status (code or signal), stdout
/// and stderr must be the same. Returns the profiled run.
fn same_behaviour(python: &Interpreter, program: &str, env: &[(&str, &str)]) -> Run {
    let plain = with_default_signals(&mut Command::new(&python.path))
        .args(["-c", program])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let mut with_quiet = env.to_vec();
    with_quiet.push(("PYIGPROF_QUIET", "1"));
    let run = run_profiled(&python.path, &["-c", program], &with_quiet);
    assert_eq!(
        run.output.status.code(),
        plain.status.code(),
        "exit code changed: {program}"
    );
    assert_eq!(
        run.output.status.signal(),
        plain.status.signal(),
        "ending signal changed: {program}"
    );
    assert_eq!(run.output.stdout, plain.stdout, "stdout changed: {program}");
    assert_eq!(run.output.stderr, plain.stderr, "stderr changed: {program}");
    run
}

#[test]
fn the_profile_is_written_however_the_process_ends() {
    let python = python();
    let endings: [(&str, &str); 10] = [
        ("os._exit", "import os\nos._exit(3)"),
        ("SIGTERM", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)"),
        ("SIGHUP", "import os, signal\nos.kill(os.getpid(), signal.SIGHUP)"),
        ("SIGQUIT", "import os, signal\nos.kill(os.getpid(), signal.SIGQUIT)"),
        ("SIGINT (KeyboardInterrupt)", "import os, signal\nos.kill(os.getpid(), signal.SIGINT)"),
        ("raise KeyboardInterrupt", "raise KeyboardInterrupt"),
        (
            "SIGTERM with a Python handler",
            "import os, signal, sys\nsignal.signal(signal.SIGTERM, lambda s, f: sys.exit(9))\nos.kill(os.getpid(), signal.SIGTERM)",
        ),
        ("signal.raise_signal", "import signal\nsignal.raise_signal(signal.SIGTERM)"),
        ("SIGSEGV (crash)", "import ctypes\nctypes.string_at(0)"),
        ("os.abort", "import os\nos.abort()"),
    ];
    for (how, ending) in endings {
        let program = format!("{SPIN}import faulthandler\nfaulthandler.disable()\n{ending}\n");
        let run = same_behaviour(&python, &program, &[]);
        let profile = run.profile();
        let spin = share(&profile, |s| s.has("spin"));
        eprintln!(
            "{how}: exit {:?}, spin {spin:.1}% of {:.3} s",
            run.output.status,
            seconds(&profile)
        );
        assert!(spin > 50.0, "{how}: spin {spin:.1}%");
    }
}

/// A parent that adopts orphans (a child subreaper, as a container's PID 1 is) and waits
/// only for the processes it started: runs the profiled program once per ending, in cpu
/// and in wall mode, waits for it, and lists its other children at once. Prints the
/// processes it adopted, one per line (`PID NAME STATE`), and `done`.
const SUBREAPER: &str = r#"
import ctypes, os, signal, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_CHILD_SUBREAPER = 36
assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
library, program = sys.argv[1], sys.argv[2]
for clock in ("cpu", "wall"):
    for ending in sys.argv[3:]:
        env = dict(os.environ, LD_PRELOAD=library, PYIGPROF_CLOCK=clock, PYIGPROF_QUIET="1")
        # More than the 20 ms of CPU time a process runs before its perf events start,
        # so that cpu mode has its helper process too.
        code = "sum(i * i for i in range(1000000))\n" + ending
        subprocess.run([program, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        me = str(os.getpid())
        for pid in os.listdir("/proc"):
            try:
                stat = open("/proc/%s/stat" % pid).read()
            except (OSError, ValueError):
                continue
            name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            if rest[1] == me:
                print(clock, repr(ending), pid, name, rest[0], flush=True)
                os.waitpid(int(pid), os.__dict__.get("__WALL", 0x40000000))
print("done")
"#;

/// No helper process is left to whoever adopts the program's orphans (issue 57): the
/// helper (a `clone` of the program, its child) is ended and reaped before the program
/// ends, however it ends short of `SIGKILL` — before, each profiled process left a zombie
/// `pyigprof-helper` to a child subreaper or a container's PID 1, which reap only what
/// they started.
#[test]
fn no_helper_process_is_left_to_the_process_that_adopts_orphans() {
    let python = python();
    let endings = [
        "",
        "import sys; sys.exit(3)",
        "import os; os._exit(0)",
        "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
        "import ctypes, faulthandler; faulthandler.disable(); ctypes.string_at(0)",
        "import os; os.execv('/bin/true', ['true'])",
    ];
    let mut args = vec![
        "-c".to_string(),
        SUBREAPER.to_string(),
        artifacts().preload.display().to_string(),
        python.path.display().to_string(),
    ];
    args.extend(endings.iter().map(|e| e.to_string()));
    let out = Command::new(&python.path)
        .args(&args)
        .current_dir(scratch_dir("subreaper"))
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert!(
        out.status.success() && said.ends_with("done\n"),
        "the subreaper failed: {}\n{said}",
        text(&out.stderr)
    );
    let adopted: Vec<&str> = said.lines().filter(|l| *l != "done").collect();
    eprintln!(
        "{}: {} endings × cpu, wall; processes left to the subreaper: {}",
        python.name,
        endings.len(),
        adopted.len()
    );
    assert!(
        adopted.is_empty(),
        "processes left to the subreaper (clock, ending, pid, name, state):\n{}",
        adopted.join("\n")
    );
}

/// A `SIGTERM` sent while the process is already ending (as `multiprocessing.Pool`'s
/// `terminate` does to workers that are exiting on their own) arrives while the profile is
/// being written.
const TERM_WHILE_EXITING: &str = r#"
import os, subprocess, sys
env = dict(os.environ)
env.pop("LD_PRELOAD", None)
killer = subprocess.Popen(
    [sys.executable, "-c",
     "import os, sys, signal\nprint('ready', flush=True)\nsys.stdin.read(1)\n"
     "os.kill(int(sys.argv[1]), signal.SIGTERM)", str(os.getpid())],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
killer.stdout.readline()
os.write(killer.stdin.fileno(), b"x")
os._exit(0)
"#;

#[test]
fn a_signal_while_the_profile_is_written_waits_for_it() {
    let python = python();
    let program = format!("{SPIN}{TERM_WHILE_EXITING}");
    for round in 0..5 {
        let run = run_profiled(&python.path, &["-c", &program], &[("PYIGPROF_QUIET", "1")]);
        // Ended by its own _exit(0) or by the SIGTERM (15) sent meanwhile, as without pyigprof
        // (where the race is the same, with a shorter window).
        let status = run.output.status;
        assert!(
            status.success() || status.signal() == Some(15),
            "round {round}: {status:?}\n{}",
            run.stderr()
        );
        let paths = run.profiles();
        assert_eq!(paths.len(), 1, "round {round}: {paths:?}");
        let profile = run.profile();
        let spin = share(&profile, |s| s.has("spin"));
        eprintln!("round {round}: {status:?}, spin {spin:.1}%");
        assert!(spin > 50.0, "round {round}: spin {spin:.1}%");
    }
}

#[test]
fn the_profile_carries_the_profilers_statistics() {
    let python = python();
    let (run, profile) = profiled_ok(&python, &["-c", SPIN], &[("PYIGPROF_HZ", "1000")]);
    let stats = run.statistics();
    let number = |key: &str| -> f64 {
        stats
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in {stats:?}"))
            .parse()
            .unwrap_or_else(|_| panic!("{key} = {} is not a number", stats[key]))
    };
    let (ticks, samples) = totals(&profile);
    let deepest = stacks(&profile)
        .iter()
        .map(|s| s.frames.len())
        .max()
        .unwrap();
    eprintln!(
        "{samples} samples, {ticks} ticks, deepest {deepest}; handler median {} ns, p99 {} ns, \
         {} ns + {} ns per native frame + {} ns per Python frame",
        stats["handler.median_ns"],
        stats["handler.p99_ns"],
        stats["handler.base_ns"],
        stats["handler.native_frame_ns"],
        stats["handler.python_frame_ns"]
    );
    // What the statistics say was taken is what the profile holds.
    assert_eq!(number("stats.samples"), samples as f64);
    assert_eq!(number("stats.ticks"), ticks as f64);
    assert!(number("stats.deepest") >= deepest as f64);
    // Samples whose stack holds a Python frame (a source file such as `<string>` or
    // `x.py`; native frames name a library). Start-up and finalization have none.
    let with_python: i64 = stacks(&profile)
        .iter()
        .filter(|s| {
            s.frames.iter().any(|(_, file)| {
                file.ends_with(".py") || (file.starts_with('<') && file.ends_with('>'))
            })
        })
        .map(|s| s.samples)
        .sum();
    assert_eq!(number("stats.with_python"), with_python as f64);
    assert!(
        with_python as f64 > 0.5 * samples as f64,
        "{with_python} of {samples}"
    );
    for why in [
        "dropped_no_slot",
        "dropped_tree_full",
        "dropped_no_stack_room",
        "dropped_ticks",
    ] {
        assert_eq!(number(&format!("stats.{why}")), 0.0, "{why}");
    }
    // Expirations whose signal the kernel had not delivered when sampling stopped (those
    // of its last tick or two, at 1000 Hz) are counted as ticks without samples.
    let unsampled = number("stats.unsampled_ticks");
    assert!(
        unsampled <= 0.05 * ticks as f64,
        "{unsampled} of {ticks} ticks unsampled"
    );
    assert_eq!(number("stats.threads"), 1.0);
    assert_eq!(number("handler.samples"), samples as f64);
    let (median, p99, max) = (
        number("handler.median_ns"),
        number("handler.p99_ns"),
        number("handler.max_ns"),
    );
    assert!(
        0.0 < median && median <= p99 && p99 <= max * 1.07,
        "{stats:?}"
    );
    assert!(number("handler.total_ns") >= median * samples as f64 / 2.0);
    // And one line on stderr says what was written.
    let stderr = run.stderr();
    let summary: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("pyigprof:"))
        .collect();
    assert_eq!(summary.len(), 1, "{stderr}");
    assert!(
        summary[0].contains(&format!("{samples} samples")) && summary[0].contains("µs median"),
        "{stderr}"
    );
}

/// The C library's view of a handler CPython installs without `SA_RESTART` (which
/// pyigprof runs behind a trampoline, hooks::interruptions): the object its address is in
/// and its flags.
const C_LEVEL_HANDLER: &str = r#"
import ctypes, os
class Sigaction(ctypes.Structure):
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]
class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
libc = ctypes.CDLL(None)
signal.signal(signal.SIGALRM, lambda s, f: None)
action = Sigaction()
assert libc.sigaction(signal.SIGALRM, None, ctypes.byref(action)) == 0
info = DlInfo()
libc.dladdr(ctypes.c_void_p(action.handler), ctypes.byref(info))
print("SIGALRM handler in", os.path.basename(info.fname.decode()), "flags", hex(action.flags))
"#;

#[test]
fn signal_dispositions_look_untouched_to_the_program() {
    let python = python();
    let program = format!(
        "import signal\nfor s in ('SIGTERM', 'SIGINT', 'SIGHUP', 'SIGQUIT', 'SIGSEGV', 'SIGABRT', 'SIGPROF', 'SIGUSR2'):\n    print(s, signal.getsignal(getattr(signal, s)))\n{C_LEVEL_HANDLER}"
    );
    let run = same_behaviour(&python, &program, &[("PYIGPROF_DUMP_SIGNAL", "SIGUSR2")]);
    assert!(
        run.stdout().contains("SIGALRM handler in ") && !run.stdout().contains("pyigprof"),
        "{}",
        run.stdout()
    );
    assert!(
        run.stdout()
            .contains("SIGINT <built-in function default_int_handler>"),
        "{}",
        run.stdout()
    );
}

#[test]
fn exec_writes_the_old_image_first_and_profiles_the_new_one_afresh() {
    let python = python();
    let new_image = "def after_exec():\n    return sum(i % 3 for i in range(3000000))\nafter_exec()\nprint('new image')";
    // Twelve failed execs, each followed by work: each must be sampled again (the
    // helper process that holds the perf events is started anew each time).
    let program = format!(
        "{SPIN}import os, sys\ndef again():\n    t = 0\n    for i in range(400000):\n        t += i % 3\n    return t\nfailed = 0\nfor _ in range(12):\n    try:\n        os.execv('/nonexistent', ['x'])\n    except OSError:\n        failed += 1\n    again()\nprint('exec failed', failed)\nos.execv(sys.executable, [sys.executable, '-c', {new_image:?}])\n"
    );
    let run = run_profiled(&python.path, &["-c", &program], &[("PYIGPROF_QUIET", "1")]);
    assert!(run.output.status.success(), "{}", run.stderr());
    assert_eq!(run.stdout(), "exec failed 12\nnew image\n");
    let paths = run.profiles();
    // pyigprof.<pid>.gz before the exec; the new image has the same pid: pyigprof.<pid>.1.gz.
    assert_eq!(paths.len(), 2, "{paths:?}");
    let read = |p: &std::path::Path| igprof_analyse::read_profiles(&[p]).unwrap();
    let renamed = paths
        .iter()
        .position(|p| p.to_string_lossy().ends_with(".1.gz"))
        .expect("a .1.gz profile");
    let (first, second) = (read(&paths[1 - renamed]), read(&paths[renamed]));
    // Of the time in the program's own code.
    let work = program_share(&first, |s| s.has("spin") || s.has("again"));
    assert!(
        work > 90.0,
        "{}: the old image's program has {work:.1} % of its time in spin and again; its \
         other stacks (ticks, innermost frames): {:#?}",
        python.name,
        stacks(&first)
            .iter()
            .filter(|s| in_program(s) && !s.has("spin") && !s.has("again"))
            .map(|s| {
                let inner: Vec<&str> = s
                    .frames
                    .iter()
                    .rev()
                    .take(8)
                    .map(|f| f.0.as_str())
                    .collect();
                (s.ticks, inner.join(" < "))
            })
            .collect::<Vec<_>>()
    );
    assert_eq!(share(&first, |s| s.has("after_exec")), 0.0);
    assert!(
        share(&second, |s| s.has("after_exec")) > 50.0,
        "the new image's profile"
    );
    assert_eq!(share(&second, |s| s.has("spin")), 0.0);
    // The work after the failed execs is in the old image's profile too, sampled: not
    // time the profile could not place.
    assert!(
        share(&first, |s| s.has("again")) > 40.0,
        "work after the failed execs is missing"
    );
    let unsampled = share(&first, |s| s.has("<unsampled thread time>"));
    assert!(
        unsampled < 5.0,
        "{unsampled:.1} % of the old image's time unsampled"
    );
}

#[test]
fn children_that_are_not_python_are_left_alone_unless_asked_for() {
    let python = python();
    let program = format!(
        "{SPIN}import subprocess\nsubprocess.run(['/bin/true'], check=True)\nsubprocess.run('i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo shell done', shell=True, check=True)\n"
    );
    let run = same_behaviour(&python, &program, &[]);
    assert_eq!(run.profiles().len(), 1, "{:?}", run.profiles());
    // Asked for: the shell gets a native profile of its own.
    let run = run_profiled(
        &python.path,
        &["-c", &program],
        &[("PYIGPROF_QUIET", "1"), ("PYIGPROF_ALL_PROCESSES", "1")],
    );
    assert!(run.output.status.success());
    let profiles: Vec<igprof_analyse::Profile> = run
        .profiles()
        .iter()
        .map(|p| igprof_analyse::read_profiles(&[p]).unwrap())
        .collect();
    let shell = profiles
        .iter()
        .filter(|p| p.sources[0].program.contains("sh -c"))
        .count();
    assert_eq!(shell, 1, "{:?}", run.profiles());
}

const MULTIPROCESSING: &str = r#"
import multiprocessing as mp, os, sys
def child_work(n):
    t = 0
    for i in range(n):
        t += i % 7
    return os.getpid()
def parent_work(n):
    t = 0
    for i in range(n):
        t += i % 7
if __name__ == "__main__":
    mp.set_start_method(sys.argv[1])
    with mp.Pool(2) as pool:
        pids = pool.map(child_work, [2000000] * 4)
    parent_work(3000000)
    print(len(set(pids)) >= 1)
"#;

#[test]
fn multiprocessing_children_write_their_own_profiles() {
    let python = python();
    let dir = scratch_dir("mp");
    let script = dir.join("mp.py");
    std::fs::write(&script, MULTIPROCESSING).unwrap();
    for method in ["fork", "forkserver", "spawn"] {
        let run = run_profiled(
            &python.path,
            &[script.to_str().unwrap(), method],
            &[("PYIGPROF_QUIET", "1")],
        );
        assert!(run.output.status.success(), "{method}: {}", run.stderr());
        assert_eq!(run.stdout(), "True\n");
        let mut parents = 0;
        let mut children = 0;
        for path in run.profiles() {
            // The forkserver and the resource tracker end after the parent: wait for their
            // profiles to be complete.
            let mut read = igprof_analyse::read_profiles(&[&path]);
            for _ in 0..100 {
                if read.is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
                read = igprof_analyse::read_profiles(&[&path]);
            }
            let profile = read.unwrap_or_else(|e| panic!("{method}: {e}"));
            let parent = share(&profile, |s| s.has("parent_work"));
            let child = share(&profile, |s| s.has("child_work"));
            assert!(
                parent == 0.0 || child == 0.0,
                "{method}: {}: parent and child work mixed",
                path.display()
            );
            parents += usize::from(parent > 0.0);
            children += usize::from(child > 0.0);
        }
        eprintln!("{method}: {parents} parent and {children} child profiles with work");
        assert_eq!(parents, 1, "{method}");
        assert!(children >= 1, "{method}");
    }
}

#[test]
fn snapshots_on_demand_and_periodically() {
    let python = python();
    // (Without pyigprof, SIGUSR2 would end this program: the signal is pyigprof's here.)
    let program = format!("{SPIN}import os, signal\nos.kill(os.getpid(), signal.SIGUSR2)\nspin()\nprint('still running')\n");
    let run = run_profiled(
        &python.path,
        &["-c", &program],
        &[("PYIGPROF_DUMP_SIGNAL", "SIGUSR2"), ("PYIGPROF_QUIET", "1")],
    );
    assert!(run.output.status.success(), "{}", run.stderr());
    assert_eq!(run.stdout(), "still running\n");
    let paths = run.profiles();
    assert_eq!(paths.len(), 2, "{paths:?}");
    let snapshot = paths
        .iter()
        .find(|p| p.to_string_lossy().contains(".snapshot1."))
        .expect("a snapshot");
    let last = paths
        .iter()
        .find(|p| !p.to_string_lossy().contains("snapshot"))
        .expect("the final profile");
    let (snap, fin) = (
        igprof_analyse::read_profiles(&[snapshot]).unwrap(),
        igprof_analyse::read_profiles(&[last]).unwrap(),
    );
    let ratio = seconds(&snap) / seconds(&fin);
    eprintln!(
        "snapshot {:.3} s, final {:.3} s",
        seconds(&snap),
        seconds(&fin)
    );
    assert!(
        (0.3..0.7).contains(&ratio),
        "the snapshot holds {ratio:.2} of the final profile"
    );

    // Under the profiler the program runs until the second periodic snapshot is there (at
    // most 10 s), not for a fixed time: the timer counts from the library's start, and a
    // start-up slowed by a busy machine once let a fixed 2.5 s of the program's own see a
    // third. Without the profiler it ends at once.
    let program = "import glob, os, time\nt = time.time()\n\
                   while 'LD_PRELOAD' in os.environ and time.time() - t < 10 \
                   and len(glob.glob('pyigprof.*.snapshot*.gz')) < 2: pass\n";
    let run = same_behaviour(&python, program, &[("PYIGPROF_DUMP_INTERVAL", "1")]);
    let snapshots = run
        .profiles()
        .iter()
        .filter(|p| p.to_string_lossy().contains("snapshot"))
        .count();
    assert_eq!(snapshots, 2, "{:?}", run.profiles());
}

#[test]
fn a_program_that_takes_the_dump_signal_keeps_it() {
    let python = python();
    let program = format!(
        "{SPIN}import os, signal\nsignal.signal(signal.SIGUSR2, lambda s, f: print('mine', flush=True))\nos.kill(os.getpid(), signal.SIGUSR2)\nspin()\nprint('still running')\n"
    );
    let run = run_profiled(
        &python.path,
        &["-c", &program],
        &[("PYIGPROF_DUMP_SIGNAL", "SIGUSR2")],
    );
    assert!(run.output.status.success(), "{}", run.stderr());
    // The program's handler ran; pyigprof said once that it no longer dumps on SIGUSR2
    // (and, at exit, its summary line).
    assert_eq!(run.stdout(), "mine\nstill running\n");
    let stderr = run.stderr();
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    assert_eq!(
        stderr
            .matches("installed its own handler for signal 12; PYIGPROF_DUMP_SIGNAL no longer writes profiles")
            .count(),
        1,
        "{stderr}"
    );
    // No snapshot; the final profile holds the whole run.
    assert_eq!(run.profiles().len(), 1, "{:?}", run.profiles());
    let spin = program_share(&run.profile(), |s| s.has("spin"));
    assert!(spin > 80.0, "spin {spin:.1} % of the program's time");
}

#[test]
fn a_program_with_its_own_sigprof_handler_wins() {
    let python = python();
    let program = format!(
        "{SPIN}import signal\nticks = []\nsignal.signal(signal.SIGPROF, lambda s, f: ticks.append(1))\nsignal.setitimer(signal.ITIMER_PROF, 0.005, 0.005)\nspin()\nsignal.setitimer(signal.ITIMER_PROF, 0, 0)\nprint('own handler ran', len(ticks) > 3)\n"
    );
    let run = run_profiled(&python.path, &["-c", &program], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    assert_eq!(run.stdout(), "own handler ran True\n");
    let says = run
        .stderr()
        .matches("installed its own SIGPROF handler")
        .count();
    assert_eq!(says, 1, "{}", run.stderr());
    // With PYIGPROF_QUIET, nothing is said.
    let quiet = run_profiled(&python.path, &["-c", &program], &[("PYIGPROF_QUIET", "1")]);
    assert_eq!(quiet.stderr(), "", "PYIGPROF_QUIET");
    let profile = run.profile();
    // Only the first spin() (before the program took SIGPROF) is in the profile.
    let spin = seconds(&profile) * share(&profile, |s| s.has("spin")) / 100.0;
    assert!(spin > 0.05, "{spin:.3} s");
}

/// `SIGPROF` keeps its meaning for a program that leaves it alone: someone else's
/// `SIGPROF` (`kill -PROF`, the program's own `ITIMER_PROF`) ends the process by that
/// signal, as its default action does (the profile written first); a `SIGPROF` the program
/// ignores stays ignored across `exec`, and one ignored by the parent is seen ignored.
#[test]
fn sigprof_keeps_its_default_and_ignored_meanings() {
    let python = python();
    let killed = format!(
        "{SPIN}import os, signal\nos.kill(os.getpid(), signal.SIGPROF)\nprint('survived')\n"
    );
    let itimer = format!(
        "{SPIN}import signal\nsignal.setitimer(signal.ITIMER_PROF, 0.05)\nspin()\nspin()\nprint('survived')\n"
    );
    for program in [&killed, &itimer] {
        let run = same_behaviour(&python, program, &[]);
        assert_eq!(run.output.status.signal(), Some(libc::SIGPROF), "{program}");
        assert!(
            share(&run.profile(), |s| s.has("spin")) > 50.0,
            "{program}: the profile of the time before"
        );
    }
    // Ignored by the program, then exec: the shell survives its own `kill -PROF`.
    let exec = "import os, signal\n\
                signal.signal(signal.SIGPROF, signal.SIG_IGN)\n\
                os.execv('/bin/sh', ['sh', '-c', 'kill -PROF $$; echo alive'])\n";
    let run = same_behaviour(&python, exec, &[]);
    assert_eq!(run.stdout(), "alive\n");
    // Ignored by the parent: the program sees it ignored, and so does what it execs.
    let inherited = "import os, signal\n\
                     print(signal.getsignal(signal.SIGPROF) == signal.SIG_IGN, flush=True)\n\
                     os.execv('/bin/sh', ['sh', '-c', 'kill -PROF $$; echo alive'])\n";
    let ignoring = |profiled: bool| {
        let mut command = Command::new(&python.path);
        command.args(["-c", inherited]);
        if profiled {
            command
                .env("LD_PRELOAD", &artifacts().preload)
                .env("PYIGPROF_QUIET", "1")
                .env("PYIGPROF_OUTPUT", scratch_dir("ignored").join("p.gz"));
        }
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                libc::signal(libc::SIGPROF, libc::SIG_IGN);
                Ok(())
            });
        }
        command.output().unwrap()
    };
    let (plain, profiled) = (ignoring(false), ignoring(true));
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "True\nalive\n");
    assert_eq!(profiled.stdout, plain.stdout);
    assert_eq!(profiled.status.code(), plain.status.code());
}

#[test]
fn a_closed_library_keeps_its_names() {
    let python = python();
    let dir = scratch_dir("dlclose");
    let library = c_library(
        &dir,
        "hot",
        "double closed_spin(long n) { double x = 0; for (long i = 0; i < n; i++) x += i * 0.5; return x; }\n",
        &["-O0"],
    );
    let program = format!(
        "import ctypes, _ctypes\nfor _ in range(3):\n    lib = ctypes.CDLL({:?})\n    lib.closed_spin(100000000)\n    _ctypes.dlclose(lib._handle)\n    del lib\n{SPIN}",
        library.to_str().unwrap()
    );
    let (_, profile) = profiled_ok(&python, &["-c", &program], &[]);
    let named = share(&profile, |s| {
        s.frames
            .iter()
            .any(|(n, f)| n == "closed_spin" && f.ends_with("libhot.so"))
    });
    eprintln!("dlclose: closed_spin named in {named:.1}% of samples");
    assert!(named > 20.0, "{named:.1}%");
}

/// 1000 threads, in batches of 100, each running about 3 ms; prints the process CPU time
/// and the peak resident memory.
const MANY_THREADS: &str = "import threading, time, json, resource\ndef short():\n    sum(i * i for i in range(60000))\nfor _ in range(10):\n    ts = [threading.Thread(target=short) for _ in range(100)]\n    [t.start() for t in ts]\n    [t.join() for t in ts]\nprint(json.dumps({'process_cpu_s': time.process_time(), 'maxrss_kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))\n";

#[test]
fn thousands_of_short_lived_threads() {
    let python = python();
    let plain = plain_ok(&python, &["-c", MANY_THREADS]);
    let plain_rss = json_number(&String::from_utf8_lossy(&plain.stdout), "maxrss_kb");
    let (run, profile) = profiled_ok(&python, &["-c", MANY_THREADS], &[]);
    let cpu = json_number(&run.stdout(), "process_cpu_s");
    let rss = json_number(&run.stdout(), "maxrss_kb");
    let reported = seconds(&profile);
    eprintln!("1000 threads: {reported:.3} s reported, {cpu:.3} s CPU; peak RSS {rss} kB vs {plain_rss} kB without pyigprof");
    // Per-thread CPU timers are checked on the kernel's tick, so most of these threads end
    // before their timer's signal is delivered; the expirations they missed are counted at
    // their end (as <unsampled thread time> when a thread has no sample): the total stays
    // the CPU time, less what a thread runs after its last sample within the interval
    // armed then (perf.rs `disarm`: left out, as the first samples' `before` stands for
    // it). Here that comes to 0.6-0.7 ms a thread on some days of this VM (-10 to -13 %
    // over 1000 threads of 6 ms; -0.8 % over 100 threads of 60 ms), within 10 % on
    // others; the bound is 15 % until that bias is found (docs/design.md).
    assert!(
        (reported - cpu).abs() <= 0.15 * cpu,
        "{reported:.3} s vs {cpu:.3} s"
    );
    let sampled = share(&profile, |s| s.has("short"));
    let unsampled = share(&profile, |s| s.has("<unsampled thread time>"));
    eprintln!("short() {sampled:.1}%, unsampled thread time {unsampled:.1}%");
    assert!(sampled > 5.0 && sampled + unsampled > 80.0);
    // Thread slots and unwinding caches are reused: memory does not grow with the number of
    // threads the program has made over its life.
    assert!(
        rss - plain_rss < 64.0 * 1024.0,
        "{rss} kB vs {plain_rss} kB"
    );
}

/// Computes with `SIGPROF` blocked (no timer signal reaches the thread, as when the kernel
/// does not deliver them) and ends through `os._exit` or normally; prints the process CPU
/// time.
const SIGNALS_NEVER_DELIVERED: &str = "import os, signal, sys, time, json\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGPROF])\ndef blind():\n    t = 0\n    for i in range(4000000):\n        t += i % 3\n    return t\nblind()\nprint(json.dumps({'process_cpu_s': time.process_time()}), flush=True)\nos._exit(0) if sys.argv[1] == '_exit' else None\n";

#[test]
fn time_whose_signals_never_arrive_is_in_the_profile() {
    // The kernel may not deliver a CPU timer's signals for tens of milliseconds (a fork
    // child that ran 50 ms got none in 15 % of runs under load); the expirations are known
    // from the thread's CPU clock and are counted when sampling stops, so a process's
    // profile is written and its total is its CPU time.
    let python = python();
    for ending in ["_exit", "normal"] {
        let run = run_profiled(
            &python.path,
            &["-c", SIGNALS_NEVER_DELIVERED, ending],
            &[("PYIGPROF_QUIET", "1")],
        );
        assert!(run.output.status.success(), "{}", run.stderr());
        let profile = run.profile();
        let cpu = json_number(&run.stdout(), "process_cpu_s");
        let reported = seconds(&profile);
        let unsampled = share(&profile, |s| s.has("<unsampled thread time>"));
        eprintln!("{ending}: {reported:.3} s reported, {cpu:.3} s CPU; {unsampled:.1}% unsampled thread time");
        // A normal ending finalizes the interpreter after the program measured its CPU
        // time: that time (20-31 ms here, more under load) is in the profile only.
        let finalization = if ending == "normal" { 0.05 } else { 0.0 };
        assert!(
            (reported - cpu).abs() <= 0.1 * cpu + finalization,
            "{ending}: {reported:.3} s vs {cpu:.3} s"
        );
        // Only the start-up before the mask could be sampled; the rest cannot be placed.
        assert!(unsampled > 50.0, "{ending}: {unsampled:.1}%");
    }
}

#[test]
fn deep_recursion_is_cut_with_a_marker() {
    let python = python();
    // 10 000 Python frames over a hot leaf.
    let program = "import sys\nsys.setrecursionlimit(30000)\ndef leaf():\n    return sum(i % 3 for i in range(3000000))\ndef down(n):\n    return leaf() if n == 0 else down(n - 1)\ndown(10000)\n";
    let (_, profile) = profiled_ok(&python, &["-c", program], &[]);
    let cut = share(&profile, |s| {
        s.frames.iter().any(|(n, _)| n == "<truncated stack>")
    });
    let leaf = share(&profile, |s| s.has("leaf"));
    eprintln!("10 000 Python frames: {cut:.1}% cut, leaf in {leaf:.1}%");
    assert!(cut > 50.0 && leaf > 50.0, "cut {cut:.1}%, leaf {leaf:.1}%");
}

#[test]
fn deep_native_recursion_is_cut_with_a_marker() {
    let python = python();
    let dir = scratch_dir("native-recursion");
    // 5000 native frames (no tail calls at -O0) over a hot leaf.
    let library = c_library(
        &dir,
        "deep",
        "double native_leaf(long n) { double x = 0; for (long i = 0; i < n; i++) x += i * 0.5; return x; }\n\
         double descend(int depth, long n) { return depth == 0 ? native_leaf(n) : descend(depth - 1, n) + 1; }\n",
        &["-O0", "-fno-optimize-sibling-calls"],
    );
    let program = format!(
        "import ctypes\nlib = ctypes.CDLL({:?})\nlib.descend.restype = ctypes.c_double\nlib.descend(5000, ctypes.c_long(300000000))\nprint('done')\n",
        library.to_str().unwrap()
    );
    let (run, profile) = profiled_ok(&python, &["-c", &program], &[]);
    assert_eq!(run.stdout(), "done\n");
    let cut = share(&profile, |s| {
        s.frames
            .first()
            .is_some_and(|(n, _)| n == "<truncated stack>")
    });
    let leaf = share(&profile, |s| {
        s.frames.last().is_some_and(|(n, _)| n == "native_leaf")
    });
    let deepest = stacks(&profile)
        .iter()
        .map(|s| s.frames.len())
        .max()
        .unwrap();
    eprintln!("5000 native frames: {cut:.1}% cut, native_leaf innermost in {leaf:.1}%, deepest stack {deepest} frames");
    assert!(cut > 50.0 && leaf > 50.0, "cut {cut:.1}%, leaf {leaf:.1}%");
    assert!(deepest <= 1026, "{deepest}");
}

#[test]
fn samples_in_malloc_the_loader_and_frame_pushes_do_not_hang_or_crash() {
    let python = python();
    // 10 kHz, while the program allocates, loads and unloads libraries and pushes frames.
    let program = "import ctypes, _ctypes, ctypes.util, time\nlibm = ctypes.util.find_library('m')\ndef f(n):\n    return n if n == 0 else f(n - 1)\nend = time.time() + 3\nwhile time.time() < end:\n    blobs = [bytearray(1000 + i) for i in range(2000)]\n    del blobs\n    lib = ctypes.CDLL(libm)\n    _ctypes.dlclose(lib._handle)\n    for _ in range(200):\n        f(50)\nprint('ok')\n";
    let dir = scratch_dir("stress");
    let mut child = Command::new(&python.path)
        .args(["-c", program])
        .current_dir(&dir)
        .env("LD_PRELOAD", &artifacts().preload)
        .env("PYIGPROF_HZ", "10000")
        .env("PYIGPROF_QUIET", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_at_most(&mut child, std::time::Duration::from_secs(60))
        .expect("the stress program hung");
    assert!(status.success(), "{status:?}");
    let profiles = files_in(&dir);
    let profile = igprof_analyse::read_profiles(&profiles).unwrap();
    assert!(share(&profile, |s| s.has("f")) > 5.0);
}

#[test]
fn the_profile_file_never_replaces_or_follows_anything() {
    let python = python();
    let dir = scratch_dir("safety");
    let target = dir.join("precious");
    std::fs::write(&target, "keep me").unwrap();
    std::os::unix::fs::symlink(&target, dir.join("link.gz")).unwrap();
    std::fs::write(dir.join("taken.gz"), "earlier file").unwrap();
    for (name, expected) in [("link.gz", "link.1.gz"), ("taken.gz", "taken.1.gz")] {
        let output = dir.join(name);
        let run = run_profiled(
            &python.path,
            &["-c", SPIN],
            &[("PYIGPROF_OUTPUT", output.to_str().unwrap())],
        );
        assert!(run.output.status.success());
        assert!(dir.join(expected).exists(), "{name}: {}", run.stderr());
    }
    // The profiles were written beside their names and renamed whole: nothing hidden left.
    let mut hidden = file_names_in(&dir);
    hidden.retain(|name| name.starts_with('.'));
    assert!(hidden.is_empty(), "left behind: {hidden:?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    assert_eq!(
        std::fs::read_to_string(dir.join("taken.gz")).unwrap(),
        "earlier file"
    );
    // Permissions: the program's umask applies, as to its own files.
    let private = dir.join("private.gz");
    let out = Command::new("/bin/sh")
        .args([
            "-c",
            &format!("umask 077; exec {} -c 'pass'", python.path.display()),
        ])
        .env("LD_PRELOAD", &artifacts().preload)
        .env("PYIGPROF_OUTPUT", &private)
        .output()
        .unwrap();
    assert!(out.status.success());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
}

#[test]
fn a_crash_goes_to_the_programs_fault_handler_and_the_profile_is_written() {
    // faulthandler installs its SIGSEGV handler over pyigprof's: the handler runs, prints
    // the traceback, and lets the signal end the process, with the profile written.
    let program = format!(
        "{SPIN}import ctypes, faulthandler, sys\nfaulthandler.enable()\nprint('crashing', flush=True)\nctypes.string_at(0)\n"
    );
    let thread_ids = |text: &[u8]| -> String {
        let text = String::from_utf8_lossy(text);
        text.split("0x")
            .enumerate()
            .map(|(i, part)| match i {
                0 => part.to_string(),
                _ => format!(
                    "0x…{}",
                    part.trim_start_matches(|c: char| c.is_ascii_hexdigit())
                ),
            })
            .collect()
    };
    for python in interpreters_for("fault_handler", "interpreters from 3.3", |p| {
        p.version >= (3, 3)
    }) {
        let plain = Command::new(&python.path)
            .args(["-c", &program])
            .output()
            .unwrap();
        let run = run_profiled(&python.path, &["-c", &program], &[("PYIGPROF_QUIET", "1")]);
        assert_eq!(
            run.output.status.signal(),
            Some(libc::SIGSEGV),
            "{}",
            python.name
        );
        assert_eq!(
            run.output.status.signal(),
            plain.status.signal(),
            "{}",
            python.name
        );
        assert_eq!(run.output.stdout, plain.stdout, "{}", python.name);
        let (with, without) = (thread_ids(&run.output.stderr), thread_ids(&plain.stderr));
        assert!(
            without.contains("Fatal Python error: Segmentation fault"),
            "{without}"
        );
        assert_eq!(with, without, "{}: stderr changed", python.name);
        let profile = run.profile();
        let spin = share(&profile, |s| s.has("spin"));
        eprintln!(
            "{}: faulthandler's report unchanged, spin {spin:.1}%",
            python.name
        );
        assert!(spin > 50.0, "{}: spin {spin:.1}%", python.name);
    }
}

/// A profile cut short — at any line boundary (a full disk, a process killed while
/// writing, a copy that stopped), mid-line, or mid-gzip — is refused by the analyser with
/// one line that names the file and says what is missing, never read as a whole one;
/// `--read-cut-short` reads what there is, saying so.
#[test]
fn a_profile_cut_short_is_never_read_as_whole() {
    use std::io::Read;
    let python = python();
    let (run, whole) = profiled_ok(&python, &[&example("mixed.py")], &[]);
    let path = &run.profiles()[0];
    let gzipped = std::fs::read(path).unwrap();
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(&gzipped[..])
        .read_to_end(&mut plain)
        .unwrap();
    let (_, samples) = totals(&whole);
    let lines: Vec<&[u8]> = plain.split_inclusive(|&b| b == b'\n').collect();
    assert!(lines.len() > 100, "{} lines", lines.len());
    // Every line boundary but the end, and the middle of every line.
    let mut cuts: Vec<usize> = Vec::new();
    let mut at = 0;
    for line in &lines {
        cuts.push(at + line.len() / 2);
        at += line.len();
        if at < plain.len() {
            cuts.push(at);
        }
    }
    for &cut in &cuts {
        let mut profile = igprof_analyse::Profile::new();
        let read = igprof_analyse::parse::load_reader(&mut profile, "cut.txt", &plain[..cut])
            .and_then(|()| igprof_analyse::parse::whole(&profile));
        assert!(
            read.is_err(),
            "cut after byte {cut} of {} ({} of {samples} samples) reads as a whole profile",
            plain.len(),
            totals(&profile).1
        );
    }
    // The whole text reads, with every sample.
    let mut profile = igprof_analyse::Profile::new();
    igprof_analyse::parse::load_reader(&mut profile, "whole.txt", &plain[..]).unwrap();
    igprof_analyse::parse::whole(&profile).unwrap();
    assert_eq!(totals(&profile).1, samples);

    // As a user meets it: the gzip file cut at a line boundary of its content, and the
    // compressed bytes cut in the middle.
    let dir = scratch_dir("cut-short");
    let half = lines.len() / 2;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut encoder, &lines[..half].concat()).unwrap();
    std::fs::write(dir.join("p.gz"), encoder.finish().unwrap()).unwrap();
    let output = analyse(&["--top", dir.join("p.gz").to_str().unwrap()]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(output.stdout.is_empty(), "{}", text(&output.stdout));
    let tree_lines = whole.sources[0].statistic("tree.lines").unwrap();
    let announced = format!("of the {tree_lines} call-tree lines its statistics announce");
    assert!(
        stderr.starts_with(&format!(
            "pyigprof-analyse: {}: cut short: ",
            dir.join("p.gz").display()
        )) && stderr.contains(&announced)
            && stderr.contains(&format!(" of {samples} samples"))
            && stderr.lines().count() == 1,
        "{stderr}"
    );
    let output = analyse(&[
        "--top",
        "--read-cut-short",
        dir.join("p.gz").to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("cut short"));
    std::fs::write(dir.join("q.gz"), &gzipped[..gzipped.len() / 2]).unwrap();
    let output = analyse(&["--top", dir.join("q.gz").to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("cut short: ")
            && text(&output.stderr).contains("its gzip stream stops in the middle"),
        "{}",
        text(&output.stderr)
    );
}
