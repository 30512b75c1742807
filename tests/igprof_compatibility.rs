//! IgProf's own analyser reads every profile pyigprof writes, with the same totals: each
//! profile of a program with threads, a fork child, a snapshot on demand, names and paths
//! that need escaping, and a process too short to be sampled is checked against
//! [`igprof_reader`], IgProf's reader restated (IgProf `src/analyse.cc`, `readDump`): the
//! grammar it accepts, function ids defined in increasing order, nothing after the call
//! tree but call-tree lines. Its totals of the key counter must be the analyser's, and the
//! profiler's statistics must still be in the file, read by the analyser.

use pyigprof_suite::igprof_reader;
use pyigprof_suite::*;
use std::io::Read;
use std::path::Path;

/// A main thread and a worker thread spinning, a child made by `fork` that spins and
/// leaves with `os._exit`, a snapshot asked for with `SIGUSR2` in between, and (on
/// Python 3) a function whose name is not ASCII. The script's own name holds parentheses.
const PROGRAM: &str = r#"# -*- coding: utf-8 -*-
import os, signal, sys, threading
def spin(n):
    t = 0
    for i in range(n):
        t += i % 7
    return t
if sys.version_info[0] >= 3:
    exec("def naïve_λ(n):\n    return spin(n)\n")
    work = globals()["naïve_λ"]
else:
    work = spin
worker = threading.Thread(target=spin, args=(1000000,))
worker.start()
work(1000000)
worker.join()
os.kill(os.getpid(), signal.SIGUSR2)
pid = os.fork()
if pid == 0:
    spin(1000000)
    os._exit(0)
os.waitpid(pid, 0)
work(200000)
print("done")
"#;

/// Every profile `dir` holds, decompressed.
fn profiles_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".gz"))
        .map(|p| {
            let mut text = Vec::new();
            flate2::read::MultiGzDecoder::new(std::fs::File::open(&p).unwrap())
                .read_to_end(&mut text)
                .unwrap();
            (p.file_name().unwrap().to_string_lossy().into_owned(), text)
        })
        .collect();
    out.sort();
    out
}

/// Checks one profile: IgProf's reader accepts it, its key counter is `PERF_TICKS` with
/// the totals pyigprof-analyse reads, and the statistics are there (samples as many as
/// the profile counts). Returns the totals (samples, ticks).
fn check(who: &str, name: &str, text: &[u8], path: &Path) -> (i64, i64) {
    let igprof = igprof_reader::read(text)
        .unwrap_or_else(|e| panic!("{who}: IgProf's reader would stop on {name}: {e}"));
    assert_eq!(igprof.counter, "PERF_TICKS", "{who}: {name}");
    let profile = igprof_analyse::parse::read_profiles(&[path])
        .unwrap_or_else(|e| panic!("{who}: {name}: {e}"));
    let counter = profile.counter_id("PERF_TICKS").expect("PERF_TICKS");
    let total = profile.total(counter);
    assert_eq!(
        (igprof.count, igprof.amount),
        (total.count, total.amount),
        "{who}: {name}: IgProf's totals against pyigprof-analyse's"
    );
    let statistics = profile_statistics(&profile);
    assert_eq!(
        statistics.get("stats.samples").map(String::as_str),
        Some(total.count.to_string().as_str()),
        "{who}: {name}: statistics {statistics:?}"
    );
    assert!(
        statistics.contains_key("handler.median_ns"),
        "{who}: {name}"
    );
    (total.count, total.amount)
}

#[test]
fn igprofs_reader_reads_every_profile_with_the_analysers_totals() {
    let interpreters = interpreters_with_python_frames("igprof_compatibility");
    let mut ran = Vec::new();
    for python in &interpreters {
        let who = &python.name;
        let dir = scratch_dir("igprof-compat");
        let script = dir.join("a (1).py");
        std::fs::write(&script, PROGRAM).unwrap();
        let output = std::process::Command::new(&python.path)
            .arg(&script)
            .current_dir(&dir)
            .env("LD_PRELOAD", &artifacts().preload)
            .env("PYIGPROF_DUMP_SIGNAL", "SIGUSR2")
            .env("PYIGPROF_QUIET", "1")
            .output()
            .unwrap();
        assert!(output.status.success(), "{who}: {output:?}");
        let profiles = profiles_in(&dir);
        // The process's profile at exit, its snapshot and its fork child's.
        assert_eq!(
            profiles.len(),
            3,
            "{who}: {:?}",
            profiles.iter().map(|p| &p.0).collect::<Vec<_>>()
        );
        let mut samples = Vec::new();
        for (name, text) in &profiles {
            samples.push(check(who, name, text, &dir.join(name)).0);
        }
        assert!(samples.iter().all(|&s| s > 0), "{who}: samples {samples:?}");
        let all = profiles
            .iter()
            .map(|(_, t)| String::from_utf8_lossy(t))
            .collect::<String>();
        // Only ')' is escaped in the path; the name is raw UTF-8, as IgProf's reader
        // takes it; pyigprof-analyse reads both back as they were.
        assert!(all.contains("a (1%29.py"), "{who}: the script's path");
        let paths: Vec<_> = profiles.iter().map(|(name, _)| dir.join(name)).collect();
        let read = igprof_analyse::parse::read_profiles(&paths).unwrap();
        let script_path = script.to_string_lossy();
        let in_script = |name: &str| {
            read.functions()
                .iter()
                .any(|f| f.name == name && read.file(f.file) == script_path)
        };
        assert!(in_script("spin"), "{who}: spin in {script_path}");
        if python.version >= (3, 0) {
            assert!(
                all.contains("N=(naïve_λ)"),
                "{who}: the non-ASCII name as it is"
            );
            // (exec'd: its file is "<string>")
            let named = read.functions().iter().any(|f| f.name == "naïve_λ");
            assert!(named, "{who}: naïve_λ read back");
        }
        ran.push(format!(
            "{who} ({} profiles, samples {samples:?})",
            profiles.len()
        ));
    }
    // A process too short to be sampled at 1 Hz: a profile all the same, with its counter.
    let python = interpreters.last().expect("an interpreter");
    let dir = scratch_dir("igprof-compat-empty");
    let output = std::process::Command::new(&python.path)
        .args(["-c", "pass"])
        .current_dir(&dir)
        .env("LD_PRELOAD", &artifacts().preload)
        .env("PYIGPROF_HZ", "1")
        .env("PYIGPROF_QUIET", "1")
        .output()
        .unwrap();
    assert!(output.status.success());
    for (name, text) in profiles_in(&dir) {
        let (count, _) = check(&python.name, &name, &text, &dir.join(&name));
        ran.push(format!("{} -c pass at 1 Hz ({count} samples)", python.name));
    }
    eprintln!(
        "igprof_compatibility: read as IgProf would: {}",
        ran.join(", ")
    );
    assert!(!interpreters.is_empty());
}

/// Memory profiles (`PYIGPROF_PROFILE=mem` and `cpu,mem`) of a program with a thread and
/// a fork child: IgProf's reader accepts each, takes `MEM_TOTAL` (or `PERF_TICKS`) as the
/// key counter, and totals it as pyigprof-analyse does.
#[test]
fn igprof_reads_memory_profiles() {
    let program = r#"
import os, threading
def spin(n):
    t = 0
    for i in range(n):
        t += i % 7
    return t
def keep():
    return [bytearray(1 << 18) for _ in range(64)]
worker = threading.Thread(target=keep)
worker.start()
kept = keep()
worker.join()
pid = os.fork()
if pid == 0:
    more = keep()
    os._exit(0)
os.waitpid(pid, 0)
spin(300000)
"#;
    let pythons = interpreters_for("IgProf reads memory profiles", "3.x interpreters", |i| {
        i.version.0 == 3
    });
    for python in pythons {
        for (kinds, key) in [("mem", "MEM_TOTAL"), ("cpu,mem", "PERF_TICKS")] {
            let run = run_profiled(
                &python.path,
                &["-c", program],
                &[("PYIGPROF_PROFILE", kinds), ("PYIGPROF_QUIET", "1")],
            );
            assert!(
                run.output.status.success(),
                "{}: {}",
                python.name,
                run.stderr()
            );
            let profiles = profiles_in(&run.dir);
            assert_eq!(
                profiles.len(),
                2,
                "{}: {kinds}: parent and child",
                python.name
            );
            for (name, text) in &profiles {
                let who = format!("{} {kinds}", python.name);
                let igprof = igprof_reader::read(text)
                    .unwrap_or_else(|e| panic!("{who}: IgProf's reader would stop on {name}: {e}"));
                assert_eq!(igprof.counter, key, "{who}: {name}");
                let profile = igprof_analyse::parse::read_profiles(&[run.dir.join(name)])
                    .unwrap_or_else(|e| panic!("{who}: {name}: {e}"));
                let total = profile.total(profile.counter_id(key).unwrap());
                assert_eq!(
                    (igprof.count, igprof.amount),
                    (total.count, total.amount),
                    "{who}: {name}: IgProf's totals against pyigprof-analyse's"
                );
                // Each process allocates at least 16 MiB in 64 blocks of 256 KiB, sampled at
                // the default mean of 512 KiB: each block is recorded with probability 0.39
                // and weighs 651 KiB, about 25 recorded (σ 3.9). Below 8 MiB (12 or fewer,
                // binomial odds 3.5e-4 a profile) happened once in CI, on a fork child's
                // profile; below 4 MiB (6 or fewer) has odds 8e-8.
                let bytes = profile.total(profile.counter_id("MEM_TOTAL").unwrap());
                assert!(
                    bytes.amount >= 4 << 20,
                    "{who}: {name}: {} bytes",
                    bytes.amount
                );
            }
        }
    }
}
