//! The `pyigprof` command as a user types it: `record` runs a program under the profiler
//! and says where its profile is, `report` reads it, IgProf's `-pp -z -o FILE CMD`
//! spelling, exit statuses passed through, and clear errors.

use pyigprof_suite::*;

#[test]
fn record_profiles_a_program_and_report_reads_it() {
    let mixed = repo().join("examples/mixed.py");
    for python in interpreters_for("record", "interpreters", |_| true) {
        let dir = scratch_dir("command-record");
        let out = pyigprof(
            &[
                "record",
                "-r",
                "1000",
                "--",
                python.path.to_str().unwrap(),
                mixed.to_str().unwrap(),
                "0.6",
            ],
            &dir,
        );
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{}: {stderr}", python.name);
        // The program's own output is untouched; its measurements are its last line.
        let stdout = text(&out.stdout);
        let measured = |phase: &str| json_number(&stdout, phase);
        let total: f64 = ["python_work", "squeeze", "digest"]
            .iter()
            .map(|p| measured(p))
            .sum();
        // The command says where the profile is and how to read it.
        let mut written = file_names_in(&dir);
        written.retain(|n| n.starts_with("pyigprof.") && n.ends_with(".gz"));
        assert_eq!(written.len(), 1, "{}: {written:?}", python.name);
        let name = &written[0];
        assert!(
            stderr.contains(&format!("pyigprof: 1 profile: {name}\n"))
                && stderr.contains(&format!("read with: pyigprof report --top {name}\n")),
            "{}: {stderr}",
            python.name
        );
        // The profile's shares are the program's.
        let profile = igprof_analyse::read_profiles(&[dir.join(name)]).unwrap();
        for phase in ["python_work", "squeeze", "digest"] {
            let expected = 100.0 * measured(phase) / total;
            let got = share(&profile, |s| s.has(phase));
            assert!(
                (got - expected).abs() < 10.0,
                "{}: {phase} {got:.1} % in the profile, {expected:.1} % measured",
                python.name
            );
        }
        // `report` is the analyser. Every function (--top=0): python_work's self time is
        // not always among the five highest (on 3.12, l_mod and the allocator, named
        // functions of libpython, hold most of it: a full-matrix run saw it).
        let report = pyigprof(&["report", "--top=0", name], &dir);
        assert!(report.status.success(), "{}", text(&report.stderr));
        assert!(
            text(&report.stdout).contains("python_work"),
            "{}",
            text(&report.stdout)
        );
    }
}

#[test]
fn exit_statuses_and_signals_are_passed_through() {
    let python = python311("exit statuses")
        .into_iter()
        .next()
        .expect("a Python 3.11");
    let dir = scratch_dir("command-status");
    let py = python.path.to_str().unwrap();
    let out = pyigprof(
        &["record", "-q", "--", py, "-c", "import sys; sys.exit(3)"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(text(&out.stderr), "", "--quiet prints nothing");
    use std::os::unix::process::ExitStatusExt;
    let out = pyigprof(
        &[
            "record",
            "--",
            py,
            "-c",
            "import os, signal\nsum(range(3000000))\nos.kill(os.getpid(), signal.SIGTERM)",
        ],
        &dir,
    );
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{out:?}");
    // The profile was written before the program ended by the signal, and said.
    assert!(
        text(&out.stderr).contains("pyigprof: 1 profile: pyigprof."),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn igprofs_spelling_and_its_options() {
    let python = python311("igprof spelling")
        .into_iter()
        .next()
        .expect("a Python 3.11");
    let dir = scratch_dir("command-igprof");
    // About half a second of work (~120 ticks at the default rate): start-up, ~15 ms,
    // stays under a tenth of it. At 2,000,000 (~25 samples) four samples of start-up
    // decided the share, and a CI run saw 80 %.
    let program = "def work():\n    return sum(i * i for i in range(10000000))\nwork()\n";
    // -z adds .gz to a name without it; -pp samples CPU time.
    let out = pyigprof(
        &[
            "-pp",
            "-z",
            "-o",
            "igprof.out",
            python.path.to_str().unwrap(),
            "-c",
            program,
        ],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let profile = igprof_analyse::read_profiles(&[dir.join("igprof.out.gz")]).unwrap();
    let work = share(&profile, |s| s.has("work"));
    assert!(
        work > 80.0,
        "{}: work {work:.1} % of the profile",
        python.name
    );
    // -mp: the memory profiler.
    let out = pyigprof(
        &[
            "-mp",
            "-o",
            "mem.gz",
            python.path.to_str().unwrap(),
            "-c",
            "x = [bytes(1000) for i in range(50000)]",
        ],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let profile = igprof_analyse::read_profiles(&[dir.join("mem.gz")]).unwrap();
    assert!(
        profile.counter_id("MEM_TOTAL").is_some(),
        "{:?}",
        profile.counters()
    );
    // An option IgProf has and pyigprof does not take, named.
    let out = pyigprof(&["-pp", "-t", "python", "app.py"], &dir);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr)
        .starts_with("pyigprof: -t: not an option of IgProf's that pyigprof takes"));
}

#[test]
fn a_missing_program_or_library_is_one_clear_line() {
    let dir = scratch_dir("command-errors");
    // A program that cannot be executed at all: said, nothing written, 127 as a shell.
    let out = pyigprof(&["record", "--", "/nonexistent/python"], &dir);
    assert_eq!(out.status.code(), Some(127));
    let stderr = text(&out.stderr);
    assert!(
        stderr
            .starts_with("pyigprof: the program failed to start: cannot run /nonexistent/python: ")
            && stderr.trim_end().ends_with("; no profile was written")
            && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert_eq!(file_names_in(&dir), Vec::<String>::new());
    let out = pyigprof(
        &["record", "--lib", "/nonexistent/lib.so", "--", "true"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "pyigprof: /nonexistent/lib.so: no such library\n"
    );
}

#[test]
fn only_the_commands_process_unless_subprocesses() {
    let python = python311("subprocesses")
        .into_iter()
        .next()
        .expect("a Python 3.11");
    let py = python.path.to_str().unwrap();
    // Work in the process, in a fork child and in a Python program it runs.
    let program = "import os, subprocess, sys\ndef work():\n    return sum(i * i for i in range(1000000))\nwork()\npid = os.fork()\nif pid == 0:\n    work()\n    os._exit(0)\nos.waitpid(pid, 0)\nsubprocess.run([sys.executable, '-c', 'sum(i * i for i in range(1000000))'], check=True)\n";
    let count = |subprocesses: bool| {
        let dir = scratch_dir("command-subprocesses");
        let mut args = vec!["record"];
        if subprocesses {
            args.push("--subprocesses");
        }
        args.extend(["--", py, "-c", program]);
        let out = pyigprof(&args, &dir);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let written = file_names_in(&dir);
        assert!(
            text(&out.stderr).contains(&format!("pyigprof: {} profile", written.len())),
            "{}",
            text(&out.stderr)
        );
        written.len()
    };
    assert_eq!(count(false), 1, "the command's own process only");
    assert_eq!(
        count(true),
        3,
        "the process, its fork child and the program it ran"
    );
}

/// `record` leaves the program's streams as they are, in every process it profiles, and
/// lists every profile written when the program has ended, after the program's own
/// output: with `--subprocesses`, the process, its subprocess and its fork child, each
/// with its summary line, the `pyigprof: N profiles:` list naming exactly the files
/// written.
#[test]
fn record_leaves_the_programs_streams_alone_and_lists_every_profile() {
    let python = python311("record streams")
        .into_iter()
        .next()
        .expect("a Python 3.11");
    let py = python.path.to_str().unwrap();
    let plain = std::process::Command::new(py)
        .args(["-c", STREAMS_PROGRAM])
        .current_dir(scratch_dir("record-streams-plain"))
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert_eq!(plain.status.code(), Some(3), "{}", text(&plain.stderr));
    for (subprocesses, expected) in [(true, 3), (false, 1)] {
        let dir = scratch_dir("record-streams");
        let mut args = vec!["record"];
        if subprocesses {
            args.push("--subprocesses");
        }
        args.extend(["--", py, "-c", STREAMS_PROGRAM]);
        let out = pyigprof(&args, &dir);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        assert_eq!(out.stdout, plain.stdout, "stdout changed");
        // The program's stderr first, unchanged; then the command's lines.
        assert!(
            out.stderr.starts_with(&plain.stderr),
            "the program's stderr changed: {stderr}"
        );
        let ours = text(&out.stderr[plain.stderr.len()..]);
        let written = file_names_in(&dir);
        assert_eq!(written.len(), expected, "{ours}");
        assert_eq!(
            ours.lines()
                .filter(|l| l.starts_with("pyigprof: wrote "))
                .count(),
            expected,
            "one summary line per profile: {ours}"
        );
        let list = ours
            .lines()
            .find_map(|l| l.strip_prefix(&format!("pyigprof: {expected} profile")))
            .unwrap_or_else(|| panic!("no list of {expected} profiles: {ours}"));
        let mut listed: Vec<String> = list
            .trim_start_matches('s')
            .trim_start_matches(": ")
            .split(' ')
            .map(str::to_string)
            .collect();
        listed.sort();
        assert_eq!(listed, written, "{ours}");
    }
    // The help says what is profiled with and without --subprocesses.
    for args in [&["--help"][..], &["record", "--help"][..]] {
        let help = text(&pyigprof(args, &scratch_dir("record-help")).stdout);
        let record = help
            .lines()
            .find(|l| l.trim_start().starts_with("record") || l.starts_with("Runs CMD"))
            .unwrap_or_else(|| panic!("{help}"));
        assert!(
            record.contains("its own Python process writes a profile")
                && record.contains("with --subprocesses, every Python process"),
            "{args:?}: {record}"
        );
    }
}

/// `record`'s options are checked before anything runs: an unknown one is refused as
/// clap refuses `report`'s (with the option it resembles), not run as the program, and a
/// rate that is not a whole number from 1 to 100000 is refused (the library would take
/// 250 Hz instead with a warning), as by `attach` and `top`; exit status 2, nothing run.
#[test]
fn records_unknown_options_and_bad_rates_are_refused() {
    let dir = scratch_dir("command-options");
    let out = pyigprof(
        &["record", "--rate-hz", "100", "--", "python3", "-c", "pass"],
        &dir,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.lines().next(),
        Some("error: unexpected argument '--rate-hz' found"),
        "{stderr}"
    );
    assert!(
        stderr.contains("a similar argument exists: '--rate'"),
        "{stderr}"
    );
    for rate in ["abc", "0", "100001", "2.5"] {
        for command in ["record", "attach", "top"] {
            let mut args = vec![command, "-r", rate];
            args.extend(match command {
                "record" => &["--", "true"][..],
                _ => &["1"][..],
            });
            let out = pyigprof(&args, &dir);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} -r {rate}: {stderr}");
            assert_eq!(
                stderr.lines().next().unwrap_or_default(),
                format!(
                    "error: invalid value '{rate}' for '--rate <HZ>': \"{rate}\" is not a whole \
                     number of samples per second from 1 to 100000"
                ),
                "{command} -r {rate}"
            );
        }
    }
    // The program after the options, without `--`, keeps its own options.
    let out = pyigprof(
        &[
            "record",
            "-q",
            "-r",
            "100",
            "sh",
            "-c",
            "echo \"$0 $1\"",
            "-x",
            "--y",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "-x --y\n");
    assert_eq!(file_names_in(&dir), Vec::<String>::new());
}

/// A profile that cannot be written is said before anything starts, in one line, exit 2:
/// `record` does not run the program, `attach` does not attach, `top` does not start
/// (issue 58: `record -o /nonexistent/x.gz` ran the whole program first, then said the
/// profile could not be created with a wrong hint; `attach -d 60` sampled the minute and
/// lost it).
#[test]
fn an_output_that_cannot_be_written_is_said_before_the_program_runs() {
    let dir = scratch_dir("command-unwritable");
    let marker = dir.join("ran");
    let out = pyigprof(
        &[
            "record",
            "-o",
            "/nonexistent/x.gz",
            "--",
            "sh",
            "-c",
            &format!("touch {}", marker.display()),
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "pyigprof: cannot write the profile /nonexistent/x.gz: the directory /nonexistent \
         does not exist; the program was not started\n"
    );
    assert!(!marker.exists(), "the program ran");
    let file = dir.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let inside = file.join("x.gz");
    let out = pyigprof(
        &["attach", "-d", "60", "-o", inside.to_str().unwrap(), "1"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "pyigprof attach: cannot write the profile {}: the directory {} is not a \
             directory; process 1 was not attached to\n",
            inside.display(),
            file.display()
        )
    );
    let out = pyigprof(
        &["top", "--batch", "1", "-o", "/nonexistent/t.gz", "1"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with(
            "pyigprof top: cannot write the profile /nonexistent/t.gz: the directory \
             /nonexistent does not exist"
        ),
        "{}",
        text(&out.stderr)
    );
}

/// `pyigprof report --help` is pyigprof-analyse's help: its options, not a list of none.
#[test]
fn report_help_lists_the_analysers_options() {
    let dir = scratch_dir("command-report-help");
    for help in ["--help", "-h"] {
        let out = pyigprof(&["report", help], &dir);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with("Reads IgProf-format profiles"),
            "{help}: {stdout}"
        );
        for option in [
            "--top",
            "--tree",
            "--flamegraph",
            "--read-cut-short",
            "--diff",
        ] {
            assert!(stdout.contains(option), "{help}: no {option}: {stdout}");
        }
    }
}

/// One window of continuous profiling reads in the singular, in the library's line and in
/// the command's list, which still finds it (`1 window of 60 s: …`).
#[test]
fn one_window_is_singular_and_listed() {
    let python = python311("one window")
        .into_iter()
        .next()
        .expect("a Python 3.11");
    let dir = scratch_dir("command-one-window");
    let out = pyigprof(
        &[
            "record",
            "--window",
            "60",
            "--",
            python.path.to_str().unwrap(),
            "-c",
            "sum(i * i for i in range(1000000))",
        ],
        &dir,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let written = file_names_in(&dir);
    assert_eq!(written.len(), 1, "{written:?}: {stderr}");
    assert!(
        stderr.contains("pyigprof: wrote 1 window of 60 s: ")
            && stderr.contains(&format!("pyigprof: 1 window: {0} … {0}\n", written[0])),
        "{stderr}"
    );
}
