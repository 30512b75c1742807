//! `pyigprof top`: on a program that spends a known share of its CPU time in each of two
//! functions (it measures them itself), the text reports (`--batch`) give each function
//! that share within the sampling error, on a process started under pyigprof (cpu and wall
//! mode), on one that was not (attach) and on one `top -- CMD` starts; driven in a
//! terminal (tmux), the live view lists the functions, its keys switch the view and the
//! sort, `w` writes a snapshot, and `q` leaves the program running.

use pyigprof_suite::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Spends ~65 % of its CPU time in `python_loop` and ~35 % in `squeeze` (zlib, in C), in
/// cycles of 20 ms, forever; after each cycle writes the CPU seconds each used so far to
/// the file `measured` (replaced whole). Writes its process id to `pid` and prints `ready`
/// first.
const TWO_PARTS: &str = r#"
import os, sys, time, zlib
clock = lambda: time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
used = {"python_loop": 0.0, "squeeze": 0.0}
data = os.urandom(1 << 12) * 64
open("pid", "w").write(str(os.getpid()))
def python_loop(until):
    x = 0
    while clock() < until:
        for i in range(200):
            x += i
def squeeze(until):
    while clock() < until:
        zlib.compress(data, 6)
sys.stdout.write("ready\n")
sys.stdout.flush()
while True:
    for f, part in ((python_loop, 0.013), (squeeze, 0.007)):
        t = clock()
        f(t + part)
        used[f.__name__] += clock() - t
    with open("measured.tmp", "w") as out:
        out.write("%f %f" % (used["python_loop"], used["squeeze"]))
    os.rename("measured.tmp", "measured")
"#;

/// Kills the process whose id the program wrote to `dir/pid` when dropped (the program
/// `top -- CMD` started).
struct ProgramIn<'a>(&'a Path);

impl Drop for ProgramIn<'_> {
    fn drop(&mut self) {
        if let Some(pid) = std::fs::read_to_string(self.0.join("pid"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            // SAFETY: kill with a valid signal.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The program, with the library preloaded in `clock` mode (`None`: without it).
fn start(python: &Path, preloaded: Option<&str>, dir: &Path) -> Killed {
    let env = [("PYIGPROF_HZ", "1000"), ("PYIGPROF_QUIET", "1")];
    let mut command = live_program(python, TWO_PARTS, dir, preloaded, "two.%p.gz", &env);
    start_until_ready(command.stderr(Stdio::null()))
}

/// The program's own shares of its CPU time, %: (python_loop, squeeze).
fn measured(dir: &Path) -> (f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("measured")) {
            let v: Vec<f64> = text
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            if v.len() == 2 && v[0] + v[1] > 0.0 {
                let total = v[0] + v[1];
                return (100.0 * v[0] / total, 100.0 * v[1] / total);
            }
        }
        assert!(Instant::now() < deadline, "the program measured nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `%self` and `±` of function `name` in a text report's table.
fn self_share(report: &str, name: &str) -> Option<(f64, f64)> {
    report.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[5] != name {
            return None;
        }
        Some((f[0].parse().ok()?, f[1].parse().ok()?))
    })
}

/// Checks the last of `--batch` reports in `out` against the program's measurement.
fn check_report(out: &std::process::Output, dir: &Path, what: &str) {
    assert!(out.status.success(), "{what}: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let reports: Vec<&str> = stdout
        .split("pyigprof top — ")
        .filter(|r| r.starts_with("process "))
        .collect();
    assert_eq!(reports.len(), 2, "{what}: two reports in\n{stdout}");
    let last = reports[1];
    assert!(last.contains("view: Python frames"), "{what}:\n{last}");
    let (python_loop, squeeze) = measured(dir);
    for (name, expected) in [("python_loop", python_loop), ("squeeze", squeeze)] {
        let (got, error) = self_share(last, name)
            .unwrap_or_else(|| panic!("{what}: no row for {name} in\n{last}"));
        eprintln!(
            "top: {what}: {name} {got:.1} ± {error:.1} % in the interval, {expected:.1} % measured"
        );
        assert!(
            (got - expected).abs() <= error + 4.0,
            "{what}: {name} {got:.1} ± {error:.1} % shown, {expected:.1} % measured\n{last}"
        );
    }
}

/// `top`'s options for two text reports of 1.5 s in the Python view, at 1 kHz.
const REPORTS: [&str; 7] = [
    "--batch",
    "2",
    "--interval",
    "1.5",
    "--python",
    "--rate",
    "1000",
];

#[test]
fn top_reports_each_functions_share_in_a_started_an_attached_and_a_launched_program() {
    let pythons = interpreters_for("top", "interpreters from 3.3", |i| i.version >= (3, 3));
    for python in pythons {
        // In wall mode the program's time is its CPU time too: it never blocks.
        for preloaded in LIVE_STARTS {
            let what = live_label(&python.name, preloaded);
            let dir = scratch_dir("top");
            let mut program = start(&python.path, preloaded, &dir);
            let pid = program.0.id().to_string();
            let mut args = vec!["top", &pid];
            args.extend(REPORTS);
            let out = pyigprof(&args, &dir);
            check_report(&out, &dir, &what);
            assert!(
                program.0.try_wait().unwrap().is_none(),
                "{what}: the program ended"
            );
        }
        // `top -- CMD` starts the program under pyigprof.
        let what = format!("{} launched", python.name);
        let dir = scratch_dir("top-launched");
        let launched = ProgramIn(&dir);
        let python_path = python.path.to_string_lossy().into_owned();
        let mut top = Command::new(&artifacts().command)
            .arg("top")
            .args(REPORTS)
            .arg("--")
            .args([python_path.as_str(), "-c", TWO_PARTS])
            .current_dir(&dir)
            .env_remove("LD_PRELOAD")
            .env("PYIGPROF_LIB", &artifacts().preload)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pyigprof top --");
        // After its reports top waits for the program it started, as `record` does, and
        // says so once (issue 58: it returned while the program ran on, whose output then
        // came after the shell's prompt); it ends with the program's status.
        let stderr = top.stderr.take().unwrap();
        let (lines, said) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut all = String::new();
            for line in
                std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok)
            {
                let _ = lines.send(line.clone());
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let waiting = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match said.recv_timeout(left) {
                Ok(line) if line.contains("reports done; waiting for the program") => break line,
                Ok(_) => {}
                Err(_) => panic!("{what}: top did not say it waits for the program"),
            }
        };
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            top.try_wait().unwrap().is_none(),
            "{what}: top ended before the program ({waiting})"
        );
        let pid = std::fs::read_to_string(dir.join("pid")).unwrap();
        assert!(
            waiting.contains(&format!("(PID {})", pid.trim())),
            "{what}: {waiting}"
        );
        drop(launched);
        let deadline = Instant::now() + Duration::from_secs(60);
        while top.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "{what}: top did not end with its program"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut out = top.wait_with_output().unwrap();
        out.stderr = reader.join().unwrap().into_bytes();
        // SIGKILL: 128 + 9, as a shell says.
        assert_eq!(
            out.status.code(),
            Some(137),
            "{what}: {}",
            text(&out.stderr)
        );
        let stdout = text(&out.stdout);
        // The program's own `ready` is first on the shared stdout.
        assert!(stdout.starts_with("ready\n"), "{what}: {stdout}");
        out.status = std::process::ExitStatus::default();
        check_report(&out, &dir, &what);
    }
}

/// Runs `tmux` with `args`; its stdout.
fn tmux(socket: &str, args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(["-L", socket])
        .args(args)
        .output()
        .expect("tmux (the live view is tested in a terminal it makes: apt-get install tmux)");
    text(&out.stdout)
}

/// The screen after waiting until it shows every string of `wanted` (at most 10 s).
fn screen_with(socket: &str, wanted: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let screen = tmux(socket, &["capture-pane", "-p", "-t", "top"]);
        if wanted.iter().all(|w| screen.contains(w)) || Instant::now() > deadline {
            return screen;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_live_view_answers_its_keys_and_quits_leaving_the_program_running() {
    let python = interpreters_for("top live", "interpreters from 3.3", |i| i.version >= (3, 3))
        .into_iter()
        .next()
        .expect("an interpreter");
    // Started under pyigprof (`w`: a fork child writes the snapshot) and attached (the live
    // window's control thread writes it, to top's --output).
    for preloaded in [Some("cpu"), None] {
        let what = match preloaded {
            Some(_) => "preloaded",
            None => "attached",
        };
        live_view(&python, preloaded, what);
    }
}

/// Drives `pyigprof top PID` in tmux on the program started as `preloaded` says.
fn live_view(python: &Interpreter, preloaded: Option<&str>, what: &str) {
    let dir = scratch_dir("top-live");
    let mut program = start(&python.path, preloaded, &dir);
    let socket = format!("pyigprof-test-{}", std::process::id());
    let command = format!(
        "{} top {} --interval 0.5; sleep 30",
        artifacts().command.display(),
        program.0.id()
    );
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "top",
            "-c",
            &dir.to_string_lossy(),
            "-x",
            "150",
            "-y",
            "30",
            &command,
        ],
    );
    let screen = screen_with(&socket, &["python_loop"]);
    let ended = |child: &mut Child| child.try_wait().unwrap().is_some();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert!(
            screen.contains("pyigprof top — process"),
            "{what}: {screen}"
        );
        assert!(
            screen.contains("view: all frames — sorted by self"),
            "{what}: {screen}"
        );
        assert!(
            screen.contains("%self") && screen.contains("%total"),
            "{what}: {screen}"
        );
        tmux(&socket, &["send-keys", "-t", "top", "v"]);
        let screen = screen_with(&socket, &["view: Python frames", "python_loop", "squeeze"]);
        assert!(
            screen.contains("view: Python frames"),
            "{what}: v: {screen}"
        );
        assert!(
            screen.contains("python_loop") && screen.contains("squeeze"),
            "{what}: {screen}"
        );
        tmux(&socket, &["send-keys", "-t", "top", "s"]);
        let screen = screen_with(&socket, &["sorted by total"]);
        assert!(screen.contains("sorted by total"), "{what}: s: {screen}");
        tmux(&socket, &["send-keys", "-t", "top", "w"]);
        let screen = screen_with(&socket, &["wrote "]);
        assert!(screen.contains("wrote "), "{what}: w: {screen}");
        tmux(&socket, &["send-keys", "-t", "top", "q"]);
        let screen = screen_with(&socket, &["$"]);
        assert!(
            !screen.contains("pyigprof top — process"),
            "{what}: q leaves the view: {screen}"
        );
        // The program runs on: it goes on measuring.
        let before = std::fs::read_to_string(dir.join("measured")).unwrap_or_default();
        std::thread::sleep(Duration::from_millis(300));
        let after = std::fs::read_to_string(dir.join("measured")).unwrap_or_default();
        assert!(
            before != after,
            "{what}: the program stopped working after q"
        );
    }));
    tmux(&socket, &["kill-server"]);
    let running = !ended(&mut program.0);
    drop(program);
    let mut written = files_in(&dir);
    written.retain(|p| p.to_string_lossy().contains("snapshot"));
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(running, "{what}: the program ended when top quit");
    assert_eq!(
        written.len(),
        1,
        "{what}: w wrote one snapshot profile: {written:?}"
    );
    // The snapshot is a profile of the program so far: its two functions, by name.
    let profile = igprof_analyse::read_profiles(&written)
        .unwrap_or_else(|e| panic!("{what}: the snapshot: {e}"));
    for name in ["python_loop", "squeeze"] {
        assert!(
            share(&profile, |s| s.has(name)) > 5.0,
            "{what}: {name} in the snapshot {:?}",
            written[0]
        );
    }
    eprintln!("top live: {what}: w wrote {}", written[0].display());
}

/// A native function no symbol names (zlib's static functions in Debian's stripped
/// `libz.so.1`) has one name in `top` and in the reports of the profile: IgProf's
/// `@{libz.so.1+<start>}`, never the library's raw `@?0x<start>` in one and the other in the
/// other.
#[test]
fn top_and_the_reports_name_an_unnamed_native_function_alike() {
    let python = &interpreters_for("top_names", "3.x interpreters", |i| i.version >= (3, 6))[0];
    let dir = scratch_dir("top-names");
    let mut program = start(&python.path, Some("cpu"), &dir);
    let pid = program.0.id();
    let out = pyigprof(
        &[
            "top",
            &pid.to_string(),
            "--batch",
            "1",
            "--interval",
            "1.5",
            "--rows",
            "60",
        ],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    // SAFETY: kill with a valid signal; the program writes its profile and ends by it.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    program.0.wait().unwrap();
    let in_top: Vec<String> = report
        .split_whitespace()
        .filter(|w| w.starts_with("@{libz.so.1+"))
        .map(String::from)
        .collect();
    // (The interpreter's unnamed functions stay `@?0x…` in both: the Python view hides them.)
    assert!(
        !in_top.is_empty()
            && !report
                .lines()
                .any(|l| l.contains("@?0x") && l.contains("(libz.so.1)")),
        "top names zlib's unnamed functions otherwise:\n{report}"
    );
    let profile = files_in(&dir)
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(".gz"))
        .expect("the program's profile");
    let analysed = std::process::Command::new(&artifacts().analyse)
        .args(["--top=0", "--all-frames"])
        .arg(&profile)
        .output()
        .unwrap();
    let reported = text(&analysed.stdout);
    eprintln!(
        "top_names: {}: {} of zlib's unnamed functions in top: {in_top:?}",
        python.name,
        in_top.len()
    );
    for name in &in_top {
        assert!(
            reported.contains(name.as_str()),
            "{name} is in top, not in the report:\n{reported}"
        );
    }
}

/// A program whose threads keep ending (a pool of short CPU-bound threads): `top`'s header
/// gives its CPU use as the process's, ended threads included — it went negative when it
/// summed the threads alive at each reading.
#[test]
fn tops_cpu_use_counts_the_threads_that_ended() {
    const SHORT_THREADS: &str = r#"
import os, sys, threading, time
def work():
    end = time.thread_time() + 0.05
    while time.thread_time() < end:
        pass
open("pid", "w").write(str(os.getpid()))
sys.stdout.write("ready\n")
sys.stdout.flush()
while True:
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
"#;
    let python = &interpreters_for("top_cpu", "3.x interpreters", |i| i.version >= (3, 6))[0];
    let dir = scratch_dir("top-cpu");
    let mut command = live_program(
        &python.path,
        SHORT_THREADS,
        &dir,
        Some("cpu"),
        "short.%p.gz",
        &[("PYIGPROF_QUIET", "1")],
    );
    let program = start_until_ready(command.stderr(Stdio::null()));
    let pid = program.0.id().to_string();
    let out = pyigprof(&["top", &pid, "--batch", "3", "--interval", "0.5"], &dir);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    let shares: Vec<f64> = report
        .lines()
        .filter_map(|l| {
            let after = l.split("CPU ").nth(1)?;
            after.split(" % of a core").next()?.trim().parse().ok()
        })
        .collect();
    eprintln!(
        "top_cpu: {}: CPU % of a core per report: {shares:?}",
        python.name
    );
    assert_eq!(shares.len(), 3, "{report}");
    // Four busy threads at a time on two cores, a join between rounds: well above zero.
    assert!(
        shares.iter().all(|&s| (30.0..=210.0).contains(&s)),
        "{shares:?}\n{report}"
    );
}

/// Two tasks, gathered by the main task, that take turns spinning 21 and 9 ms of CPU time.
const TWO_TASKS: &str = r#"
import asyncio, os, sys, time
async def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
async def turns(seconds):
    while True:
        await spin(seconds)
        await asyncio.sleep(0)
async def main():
    open("pid", "w").write(str(os.getpid()))
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    await asyncio.gather(
        asyncio.create_task(turns(0.021), name="hot"),
        asyncio.create_task(turns(0.009), name="cool"),
    )
asyncio.run(main())
"#;

/// `top --tasks` (key `t`): each asyncio task's share — self, the samples whose innermost
/// task it is; total, with the tasks awaiting it — on a program whose two tasks take 70 %
/// and 30 % of its CPU time by construction, both awaited by `main` (3.11+, where samples
/// carry task frames).
#[test]
fn tops_task_view_gives_each_asyncio_tasks_share() {
    let pythons = interpreters_for("top_tasks", "interpreters from 3.11", |i| {
        i.version >= (3, 11)
    });
    for python in pythons {
        let dir = scratch_dir("top-tasks");
        let env = [("PYIGPROF_HZ", "1000"), ("PYIGPROF_QUIET", "1")];
        let mut command = live_program(&python.path, TWO_TASKS, &dir, Some("cpu"), "t.%p.gz", &env);
        let program = start_until_ready(command.stderr(Stdio::null()));
        let pid = program.0.id().to_string();
        let out = pyigprof(
            &["top", &pid, "--tasks", "--batch", "1", "--interval", "2"],
            &dir,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let report = text(&out.stdout);
        let share = |task: &str| -> (f64, f64) {
            report
                .lines()
                .find_map(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    line.contains(&format!("  <task {task}>  "))
                        .then(|| (f[0].parse().unwrap(), f[2].parse().unwrap()))
                })
                .unwrap_or_else(|| panic!("no row for {task} in\n{report}"))
        };
        let (hot, cool, main) = (share("hot"), share("cool"), share("main"));
        eprintln!(
            "top_tasks: {}: hot {hot:?}, cool {cool:?}, main {main:?} (self, total %)",
            python.name
        );
        assert!(report.contains("view: asyncio tasks"), "{report}");
        assert!((hot.0 - 70.0).abs() <= 8.0, "hot {hot:?}\n{report}");
        assert!((cool.0 - 30.0).abs() <= 8.0, "cool {cool:?}\n{report}");
        // main awaits both: their time is in its total, none of it its own.
        assert!(main.1 >= 90.0 && main.0 <= 5.0, "main {main:?}\n{report}");
    }
}
