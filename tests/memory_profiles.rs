//! The memory profiler (`PYIGPROF_PROFILE=mem`): programs that know what they allocate
//! and keep, profiled as a user would, on every interpreter present. The sampled figures
//! are checked against the truth within the sampling error they can have: an allocation
//! of `s` bytes sampled with probability `p = 1 - exp(-s/R)` and weighted `s/p` adds
//! `s²(1-p)/p` to the variance of its estimate; the tests allow 4.5 standard deviations
//! (a chance below 1 in 100,000 of failing by sampling alone).

use igprof_analyse::Profile;
use pyigprof_suite::*;

/// The default mean bytes between samples.
const RATE: f64 = 512.0 * 1024.0;

/// The standard deviation of the sampled estimate of `count` allocations of `size` bytes.
fn sigma(count: f64, size: f64) -> f64 {
    let p = -(-size / RATE).exp_m1();
    (count * size * size * (1.0 - p) / p).sqrt()
}

/// Sum of `counter`'s own amounts (bytes) and counts over the stacks that pass `pred`.
fn sum(profile: &Profile, counter: &str, pred: impl Fn(&Stack) -> bool) -> (f64, f64) {
    stacks_of(profile, counter)
        .iter()
        .filter(|s| pred(s))
        .fold((0.0, 0.0), |(b, c), s| {
            (b + s.ticks as f64, c + s.samples as f64)
        })
}

/// Asserts that `estimate` is within 4.5 standard deviations (`sigma`) plus `slack` bytes
/// of `truth`.
fn assert_close(what: &str, estimate: f64, truth: f64, sigma: f64, slack: f64) {
    let bound = 4.5 * sigma + slack;
    assert!(
        (estimate - truth).abs() <= bound,
        "{what}: {:.1} MiB estimated, {:.1} MiB true (allowed ±{:.1} MiB)",
        estimate / 1048576.0,
        truth / 1048576.0,
        bound / 1048576.0
    );
}

const MIB: f64 = 1048576.0;

/// 256 MiB kept by `leak` in blocks of 256 KiB, among 400 MiB of 4 KiB temporaries that
/// `temporaries` frees; then the program ends.
const LEAK: &str = r#"
BLOCK = 256 * 1024
kept = []
def leak():
    for _ in range(64):
        kept.append(bytearray(BLOCK))
def temporaries():
    n = 0
    for _ in range(100):
        t = [bytearray(4096) for _ in range(64)]
        n += len(t)
    return n
for _ in range(16):
    leak()
    temporaries()
print(len(kept))
"#;

#[test]
fn a_leak_among_temporaries_is_the_top_live_entry_with_its_bytes() {
    for python in interpreters_with_python_frames("memory: leak among temporaries") {
        let plain = plain_ok(&python, &["-c", LEAK]);
        let (run, profile) = profiled_ok(&python, &["-c", LEAK], &[("PYIGPROF_PROFILE", "mem")]);
        assert_eq!(run.output.stdout, plain.stdout, "{}", python.name);
        let in_leak = |s: &Stack| s.has("leak");
        let in_temporaries = |s: &Stack| s.has("temporaries");
        // bytearray(n) allocates n + 1 bytes.
        let block = 256.0 * 1024.0 + 1.0;
        let truth = 1024.0 * block;
        let (live, _) = sum(&profile, "MEM_LIVE", in_leak);
        assert_close(
            &format!("{}: leak's live bytes", python.name),
            live,
            truth,
            sigma(1024.0, block),
            MIB,
        );
        // The temporaries were freed (what is left is small: list and frame objects).
        let (left, _) = sum(&profile, "MEM_LIVE", in_temporaries);
        assert!(
            left < 0.05 * truth,
            "{}: temporaries keep {:.1} MiB",
            python.name,
            left / MIB
        );
        // Allocated: 16 × 100 × 64 buffers of 4,097 bytes (and, as large, their objects
        // and lists: within 3 % more).
        let (total, _) = sum(&profile, "MEM_TOTAL", in_temporaries);
        let buffers = 16.0 * 100.0 * 64.0;
        let allocated = buffers * 4097.0;
        assert_close(
            &format!("{}: temporaries' bytes allocated", python.name),
            total,
            allocated * 1.015,
            sigma(buffers, 4097.0),
            0.015 * allocated,
        );
        // The top of `--top -r MEM_LIVE` among the program's functions.
        let out = analyse(&[
            "-r",
            "MEM_LIVE",
            "--top=0",
            "--order",
            "cumulative",
            run.profiles()[0].to_str().unwrap(),
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        let first = text
            .lines()
            .find(|l| l.contains("leak") || l.contains("temporaries"))
            .unwrap_or_default();
        assert!(
            first.contains("leak"),
            "{}: first of leak and temporaries in --top is {first:?}\n{text}",
            python.name
        );
        // What the profiler measured itself.
        let stats = run.statistics();
        assert_eq!(stats["memory.rate_bytes"], "524288", "{}", python.name);
        let exact: f64 = stats["memory.allocated_bytes"].parse().unwrap();
        let (all, _) = sum(&profile, "MEM_TOTAL", |_| true);
        assert_close(
            &format!(
                "{}: all bytes allocated against the exact count",
                python.name
            ),
            all,
            exact,
            (RATE * exact).sqrt(),
            0.01 * exact,
        );
        // 3.8+ freeze the live set when the program's code ends (an atexit callback);
        // older ones when the interpreter starts finalising (Py_FinalizeEx).
        assert_eq!(stats["memory.live_frozen"], "1", "{}", python.name);
    }
}

/// Exact mode: 1,000 blocks of 100,001 bytes from one line, half of them freed.
const KNOWN: &str = r#"
def alloc_known():
    keep = []
    for i in range(1000):
        keep.append(bytearray(100000))
    del keep[::2]
    return keep
k = alloc_known()
"#;

#[test]
fn exact_mode_counts_every_allocation() {
    let pythons = interpreters_for("memory: exact mode", "3.x interpreters", |i| {
        i.version.0 == 3
    });
    for python in pythons {
        let (_, profile) = profiled_ok(
            &python,
            &["-c", KNOWN],
            &[("PYIGPROF_PROFILE", "mem"), ("PYIGPROF_MEM_RATE", "1")],
        );
        // The stack that allocated the buffers: its largest allocation is one buffer
        // (100,001 bytes for bytearray(100000) until 3.14; 3.15 keeps a bytes object,
        // with its header, inside).
        let max = profile.counter_id("MEM_MAX").unwrap();
        let total = profile.counter_id("MEM_TOTAL").unwrap();
        let live = profile.counter_id("MEM_LIVE").unwrap();
        let nodes = profile.nodes();
        let buffers: Vec<usize> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| (100_000..100_100).contains(&n.value(max).amount))
            .map(|(i, _)| i)
            .collect();
        // (One stack, or a few: the interpreter specialises the call after a few
        // iterations, which changes its native frames.)
        assert!(!buffers.is_empty(), "{}: no buffer allocation", python.name);
        let size = nodes[buffers[0]].value(max).amount;
        let (mut calls, mut bytes, mut blocks, mut kept) = (0, 0, 0, 0);
        for &index in &buffers {
            let node = &nodes[index];
            assert_eq!(node.value(max).amount, size, "{}", python.name);
            let mut cursor = node.parent;
            let mut under_alloc_known = false;
            while let Some(i) = cursor {
                let n = &nodes[i as usize];
                under_alloc_known |= profile.function(n.function).name == "alloc_known";
                cursor = n.parent;
            }
            assert!(under_alloc_known, "{}", python.name);
            let (t, l) = (node.value(total), node.value(live));
            calls += t.count;
            bytes += t.amount;
            blocks += l.count;
            kept += l.amount;
        }
        assert_eq!(
            (calls, bytes, blocks, kept),
            (1000, 1000 * size, 500, 500 * size),
            "{}: every buffer of {size} bytes",
            python.name
        );
    }
}

/// A fork child's profile holds its own allocations, the parent's its own.
const FORK: &str = r#"
import os
def parent_work():
    return [bytearray(1 << 20) for _ in range(40)]
def child_work():
    return [bytearray(1 << 20) for _ in range(24)]
a = parent_work()
pid = os.fork()
if pid == 0:
    b = child_work()
    del a
    os._exit(0)
os.waitpid(pid, 0)
"#;

#[test]
fn fork_children_and_threads_keep_their_own_allocations() {
    let block = (1 << 20) as f64 + 1.0;
    for python in python311("memory: fork and threads") {
        let run = run_profiled(&python.path, &["-c", FORK], &[("PYIGPROF_PROFILE", "mem")]);
        assert!(run.output.status.success(), "{}", run.stderr());
        let paths = run.profiles();
        assert_eq!(paths.len(), 2, "{paths:?}");
        let mut seen = Vec::new();
        for path in &paths {
            let profile = igprof_analyse::read_profiles(std::slice::from_ref(path)).unwrap();
            let (parent, _) = sum(&profile, "MEM_LIVE", |s| s.has("parent_work"));
            let (child, _) = sum(&profile, "MEM_TOTAL", |s| s.has("child_work"));
            seen.push((parent, child));
        }
        seen.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (child_profile, parent_profile) = (seen[0], seen[1]);
        assert_eq!(
            child_profile.0, 0.0,
            "the child counts the parent's allocations"
        );
        assert_eq!(
            parent_profile.1, 0.0,
            "the parent counts the child's allocations"
        );
        assert_close(
            "parent_work",
            parent_profile.0,
            40.0 * block,
            sigma(40.0, block),
            MIB,
        );
        assert_close(
            "child_work",
            child_profile.1,
            24.0 * block,
            sigma(24.0, block),
            MIB,
        );

        // A thread keeps 128 MiB; the main thread frees half of it: the blocks leave the
        // thread's node.
        let threads = r#"
import threading
kept = []
def keeper():
    for _ in range(512):
        kept.append(bytearray(256 * 1024))
t = threading.Thread(target=keeper)
t.start()
t.join()
del kept[::2]
"#;
        let (_, profile) = profiled_ok(&python, &["-c", threads], &[("PYIGPROF_PROFILE", "mem")]);
        let block = 256.0 * 1024.0 + 1.0;
        let (live, _) = sum(&profile, "MEM_LIVE", |s| s.has("keeper"));
        let (total, _) = sum(&profile, "MEM_TOTAL", |s| s.has("keeper"));
        assert_close(
            "keeper's live bytes",
            live,
            256.0 * block,
            sigma(256.0, block),
            MIB,
        );
        assert_close(
            "keeper's allocated bytes",
            total,
            512.0 * block,
            sigma(512.0, block),
            MIB,
        );
    }
}

#[test]
fn cpu_and_memory_in_one_profile() {
    // spin's share of the CPU profile is checked against the program's own measurement
    // of spin's CPU time (how much of the run the 64 MiB of page faults, start-up and
    // exit take depends on the machine's load), within the sampling error of the
    // profile's samples.
    let program = r#"
import time, json
def spin():
    t = 0
    for i in range(10000000):
        t += i % 3
    return t
def leak():
    return [bytearray(1 << 20) for _ in range(64)]
kept = leak()
start = time.process_time()
spin()
print(json.dumps({"spin_s": time.process_time() - start}))
"#;
    for python in python311("memory: cpu,mem") {
        let (run, profile) = profiled_ok(
            &python,
            &["-c", program],
            &[("PYIGPROF_PROFILE", "cpu,mem"), ("PYIGPROF_HZ", "1000")],
        );
        let spin = share(&profile, |s| s.has("spin"));
        let truth = 100.0 * json_number(&run.stdout(), "spin_s") / seconds(&profile);
        let (_, samples) = totals(&profile);
        let p = truth / 100.0;
        let error = 100.0 * 4.5 * (p * (1.0 - p) / samples as f64).sqrt() + 2.0;
        assert!(
            (spin - truth).abs() <= error && truth > 50.0,
            "{}: spin has {spin:.1} % of the ticks; it measured {truth:.1} % of the \
             profile's CPU time ({samples} samples, allowed ±{error:.1} points)",
            python.name
        );
        let block = (1 << 20) as f64 + 1.0;
        let (live, _) = sum(&profile, "MEM_LIVE", |s| s.has("leak"));
        assert_close("leak", live, 64.0 * block, sigma(64.0, block), MIB);
        // The summary line names both.
        let stderr = run.stderr();
        assert!(
            stderr.contains(" samples, ") && stderr.contains("allocations recorded"),
            "{stderr}"
        );
        // PERF_TICKS stays the profile's first counter.
        assert_eq!(profile.counters()[0], "PERF_TICKS");
    }
}

#[test]
fn numpy_arrays_of_known_sizes_are_exact() {
    let program = r#"
import numpy as np
def make_arrays():
    return [np.ones(1000000) for _ in range(10)]
def scratch():
    for _ in range(20):
        np.ones(1000000).sum()
a = make_arrays()
scratch()
"#;
    for venv in numpy_interpreters("memory: numpy arrays") {
        let python = &venv.python;
        let (_, profile) = profiled_ok(python, &["-c", program], &[("PYIGPROF_PROFILE", "mem")]);
        // Allocations of 4 MiB and more are always recorded, with their exact size.
        let big = |s: &Stack| s.ticks >= 8_000_000;
        let (live, blocks) = sum(&profile, "MEM_LIVE", |s| s.has("make_arrays") && big(s));
        assert_eq!((live, blocks), (80_000_000.0, 10.0), "{}", python.name);
        let (total, calls) = sum(&profile, "MEM_TOTAL", |s| s.has("scratch") && big(s));
        assert_eq!((total, calls), (160_000_000.0, 20.0), "{}", python.name);
        let (live, _) = sum(&profile, "MEM_LIVE", |s| s.has("scratch"));
        assert!(live < 1e6, "{}: scratch keeps {live} bytes", python.name);
        let largest = stacks_of(&profile, "MEM_MAX")
            .iter()
            .filter(|s| s.has("make_arrays"))
            .map(|s| s.ticks)
            .max()
            .unwrap();
        assert_eq!(largest, 8_000_000, "{}", python.name);
    }
}

#[test]
fn anonymous_mappings_are_allocations_until_unmapped() {
    let program = r#"
import mmap
def mapper():
    return [mmap.mmap(-1, 16 << 20) for _ in range(4)]
def unmapper():
    for _ in range(10):
        m = mmap.mmap(-1, 8 << 20)
        m[0] = 1
        m.close()
kept = mapper()
unmapper()
"#;
    for python in python311("memory: mmap") {
        let (_, profile) = profiled_ok(&python, &["-c", program], &[("PYIGPROF_PROFILE", "mem")]);
        // Mappings of 4 MiB and more are recorded exactly.
        let (live, blocks) = sum(&profile, "MEM_LIVE", |s| s.has("mapper"));
        assert_eq!((live, blocks), (64.0 * MIB, 4.0), "{}", python.name);
        let (total, _) = sum(&profile, "MEM_TOTAL", |s| s.has("unmapper"));
        let (left, _) = sum(&profile, "MEM_LIVE", |s| s.has("unmapper"));
        assert!(
            total >= 80.0 * MIB && left < MIB,
            "{}: {total} allocated, {left} live",
            python.name
        );
    }
}

#[test]
fn the_live_set_at_the_peak_and_each_stacks_peak() {
    // 192 MiB held at once by `burst`, freed; then `steady` keeps 32 MiB.
    let program = r#"
def burst():
    held = [bytearray(1 << 20) for _ in range(192)]
    return len(held)
def steady():
    return [bytearray(1 << 20) for _ in range(32)]
burst()
kept = steady()
"#;
    let block = (1 << 20) as f64 + 1.0;
    for python in python311("memory: peak") {
        let (run, profile) = profiled_ok(&python, &["-c", program], &[("PYIGPROF_PROFILE", "mem")]);
        // At the process's peak, burst held everything and steady nothing.
        let (at_peak, _) = sum(&profile, "MEM_LIVE_PEAK", |s| s.has("burst"));
        let (steady_at_peak, _) = sum(&profile, "MEM_LIVE_PEAK", |s| s.has("steady"));
        assert_close(
            "burst at the peak",
            at_peak,
            192.0 * block,
            sigma(192.0, block),
            MIB,
        );
        assert!(steady_at_peak < MIB, "steady at the peak: {steady_at_peak}");
        // As the program left it: steady's 32 MiB, burst's nothing.
        let (burst_live, _) = sum(&profile, "MEM_LIVE", |s| s.has("burst"));
        let (steady_live, _) = sum(&profile, "MEM_LIVE", |s| s.has("steady"));
        assert!(burst_live < MIB, "burst live: {burst_live}");
        assert_close(
            "steady live",
            steady_live,
            32.0 * block,
            sigma(32.0, block),
            MIB,
        );
        // --value peak: each stack's own peak of live bytes.
        let out = analyse(&[
            "-r",
            "MEM_LIVE",
            "--value",
            "peak",
            "--json",
            run.profiles()[0].to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let burst = json["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "burst")
            .expect("burst in --json");
        let peak = burst["cumulative"]["amount"].as_f64().unwrap();
        assert_close(
            "burst's peak",
            peak,
            192.0 * block,
            sigma(192.0, block),
            MIB,
        );
        let stats = run.statistics();
        let process_peak: f64 = stats["memory.peak_live_bytes"].parse().unwrap();
        assert!(process_peak >= at_peak, "{process_peak} < {at_peak}");
    }
}

#[test]
fn every_exit_path_writes_the_memory_profile_and_keeps_the_status() {
    let keep = "kept = [bytearray(1 << 20) for _ in range(16)]\n";
    let endings = [
        ("os._exit", "import os\nos._exit(3)", Some(3), None),
        ("sys.exit", "import sys\nsys.exit(4)", Some(4), None),
        (
            "SIGTERM",
            "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)",
            None,
            Some(libc::SIGTERM),
        ),
        (
            "os.abort",
            "import os\nos.abort()",
            None,
            Some(libc::SIGABRT),
        ),
    ];
    use std::os::unix::process::ExitStatusExt;
    for python in python311("memory: exit paths") {
        for (what, ending, code, signal) in endings {
            let program = format!("{keep}{ending}\n");
            let run = run_profiled(
                &python.path,
                &["-c", &program],
                &[("PYIGPROF_PROFILE", "mem"), ("PYIGPROF_QUIET", "1")],
            );
            assert_eq!(run.output.status.code(), code, "{}: {what}", python.name);
            assert_eq!(
                run.output.status.signal(),
                signal,
                "{}: {what}",
                python.name
            );
            let profile = run.profile();
            let (total, _) = sum(&profile, "MEM_TOTAL", |_| true);
            assert!(
                total >= 16.0 * MIB * 0.5,
                "{}: {what}: {total} bytes",
                python.name
            );
        }
    }
}

#[test]
fn realloc_growth_is_counted_where_the_block_ends() {
    // Exact mode: a buffer grown by appends to 10 MB is reallocated many times; what is
    // live is its last size, what was allocated the sum of every size it had.
    let program = r#"
def grow():
    b = bytearray()
    for _ in range(10000):
        b += b"x" * 1000
    return b
kept = grow()
"#;
    for python in python311("memory: realloc") {
        let (_, profile) = profiled_ok(
            &python,
            &["-c", program],
            &[("PYIGPROF_PROFILE", "mem"), ("PYIGPROF_MEM_RATE", "1")],
        );
        let (live, blocks) = sum(&profile, "MEM_LIVE", |s| s.has("grow"));
        // bytearray over-allocates by 1/8 at most; the 1,000-byte temporaries are freed.
        assert!(
            (10e6..=10e6 * 1.2).contains(&live),
            "{}: {live} bytes in {blocks} blocks",
            python.name
        );
        let (total, _) = sum(&profile, "MEM_TOTAL", |s| s.has("grow"));
        assert!(total > 2.0 * live, "{}: {total} allocated", python.name);
    }
}

#[test]
fn failed_allocations_count_nothing_and_sampling_goes_on() {
    // CPython's own tests ask for sys.maxsize bytes (test_io's BufferedReader with such a
    // buffer size); the profiler once counted down through them one threshold at a time.
    let program = r#"
import io, sys
for _ in range(3):
    try:
        bytearray(sys.maxsize)
    except MemoryError:
        pass
try:
    io.BufferedReader(io.BytesIO(b"x"), buffer_size=sys.maxsize)
except MemoryError:
    pass
def leak():
    return [bytearray(1 << 20) for _ in range(64)]
kept = leak()
"#;
    for python in python311("memory: failed allocations") {
        let dir = scratch_dir("failed-allocations");
        let mut child = std::process::Command::new(&python.path)
            .args(["-c", program])
            .current_dir(&dir)
            .env("LD_PRELOAD", &artifacts().preload)
            .env("PYIGPROF_PROFILE", "mem")
            .env("PYIGPROF_QUIET", "1")
            .spawn()
            .unwrap();
        let status = wait_at_most(&mut child, std::time::Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{}: hung on a failed allocation", python.name));
        assert!(status.success(), "{}", python.name);
        let run = Run {
            output: std::process::Output {
                status,
                stdout: Vec::new(),
                stderr: Vec::new(),
            },
            dir,
        };
        let profile = run.profile();
        let block = (1 << 20) as f64 + 1.0;
        let (live, _) = sum(&profile, "MEM_LIVE", |s| s.has("leak"));
        assert_close(
            "leak after failures",
            live,
            64.0 * block,
            sigma(64.0, block),
            MIB,
        );
        let exact: f64 = run.statistics()["memory.allocated_bytes"].parse().unwrap();
        assert!(
            exact < 1e9,
            "{}: {exact} bytes counted as allocated",
            python.name
        );
    }
}

/// A parent that makes many small objects (pymalloc's pools and arenas, and its arena map,
/// which `_PyObject_Malloc` calloc's through code that is no allocator) and a fork child.
const SMALL_OBJECTS_AND_FORK: &str = r#"
import os
def parent_work():
    return [str(i) * 3 for i in range(300000)]
def child_work():
    return [bytearray(1 << 20) for _ in range(8)]
a = parent_work()
pid = os.fork()
if pid == 0:
    b = child_work()
    os._exit(0)
os.waitpid(pid, 0)
"#;

/// The totals of `counter` in `path` as each report states them: (what, bytes, count).
fn totals_in_reports(
    path: &std::path::Path,
    counter: &str,
    dir: &std::path::Path,
) -> Vec<(String, i64, i64)> {
    let file = path.to_str().unwrap();
    let mut seen = Vec::new();
    // The tables' heading line: "MEM_LIVE: 87,641 blocks, 27.9 MiB live (29,215,253 bytes); …".
    for view in [
        &["--top"][..],
        &["--tree"],
        &["--top", "--all-frames"],
        &["--top", "--no-filter"],
    ] {
        let mut args = vec!["-r", counter, file];
        args.extend_from_slice(view);
        let output = analyse(&args);
        let out = text(&output.stdout);
        assert!(
            output.status.success(),
            "{view:?}: {}",
            text(&output.stderr)
        );
        let heading = out
            .lines()
            .find(|line| line.starts_with(&format!("{counter}: ")))
            .unwrap_or_else(|| panic!("{view:?}: no heading in\n{out}"));
        let number = |text: &str| -> i64 { text.replace(',', "").parse().unwrap() };
        let count = number(heading[counter.len() + 2..].split(' ').next().unwrap());
        let bytes = heading
            .split_once('(')
            .and_then(|(_, rest)| rest.split_once(" bytes)"))
            .map(|(bytes, _)| number(bytes))
            .unwrap_or_else(|| panic!("{view:?}: no bytes in {heading}"));
        seen.push((format!("{view:?}"), bytes, count));
    }
    let output = analyse(&["-r", counter, file, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    seen.push((
        "--json".into(),
        json["total"]["amount"].as_i64().unwrap(),
        json["total"]["samples"].as_i64().unwrap(),
    ));
    let database = dir.join(format!("{counter}.sqlite"));
    let _ = std::fs::remove_file(&database);
    let output = analyse(&[
        "-r",
        counter,
        file,
        &format!("--sqlite={}", database.display()),
    ]);
    assert!(
        output.status.success(),
        "--sqlite: {}",
        text(&output.stderr)
    );
    let db = rusqlite::Connection::open(&database).unwrap();
    let (bytes, count) = db
        .query_row(
            "SELECT total_amount, total_samples FROM profile",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    seen.push(("--sqlite".into(), bytes, count));
    seen
}

/// Checks that every report of the profile at `path` (written by `run`) states the
/// profile's totals for each memory counter, and that the writer's own figures agree: its
/// statistics (`memory.live_bytes`; `memory.allocated_bytes` when every allocation is
/// recorded, `exact`) and its summary line's live MiB. `who` names the run in failures.
fn reports_agree(who: &str, run: &Run, path: &std::path::Path, exact: bool) {
    let profile = igprof_analyse::read_profiles(&[path]).unwrap();
    let stats = profile_statistics(&profile);
    let stat = |key: &str| -> i64 { stats[key].parse().unwrap() };
    for counter in ["MEM_TOTAL", "MEM_LIVE", "MEM_MAX"] {
        let id = profile.counter_id(counter).unwrap();
        let total = profile.total(id);
        let mut expected = vec![(total.amount, total.count)];
        match counter {
            "MEM_TOTAL" if exact => expected.push((stat("memory.allocated_bytes"), total.count)),
            "MEM_LIVE" => expected.push((stat("memory.live_bytes"), total.count)),
            _ => {}
        }
        for (what, bytes, count) in totals_in_reports(path, counter, &run.dir) {
            for &(amount, calls) in &expected {
                assert_eq!(
                    (bytes, count),
                    (amount, calls),
                    "{who}: {}: {counter}: {what} says {bytes} bytes in {count}, the profile \
                     {amount} in {calls}",
                    path.display()
                );
            }
        }
    }
    // The process's summary line says the profile's live bytes.
    let live = profile
        .total(profile.counter_id("MEM_LIVE").unwrap())
        .amount;
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let stderr = run.stderr();
    let line = stderr
        .lines()
        .find(|line| line.contains(&name))
        .unwrap_or_else(|| panic!("{who}: no summary line for {name}:\n{stderr}"));
    let said: f64 = line
        .split(" MiB live")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|mib| mib.parse().ok())
        .unwrap_or_else(|| panic!("{who}: no MiB live in {line}"));
    assert!(
        (said - live as f64 / MIB).abs() <= 0.05,
        "{who}: the summary line says {said} MiB live, the reports {live} bytes: {line}"
    );
}

#[test]
fn every_report_has_the_profiles_totals() {
    // pymalloc's arena map is 3.10's (`arena_map_mark_used`).
    for python in interpreters_for(
        "memory: every report's totals",
        "interpreters of 3.10+",
        |i| i.version >= (3, 10),
    ) {
        let run = run_profiled(
            &python.path,
            &["-c", SMALL_OBJECTS_AND_FORK],
            &[("PYIGPROF_PROFILE", "mem"), ("PYIGPROF_MEM_RATE", "1")],
        );
        assert!(run.output.status.success(), "{}", run.stderr());
        let paths = run.profiles();
        assert_eq!(paths.len(), 2, "{}: {paths:?}", python.name);
        let (mut arena_map, mut named) = (0, false);
        for path in &paths {
            reports_agree(&python.name, &run, path, true);
            let profile = igprof_analyse::read_profiles(std::slice::from_ref(path)).unwrap();
            // pymalloc's own allocations: a frame that is no allocator between
            // `_PyObject_Malloc` and the leaf (`allocate_from_new_pool →
            // arena_map_mark_used → calloc`, or `new_arena → mmap`).
            let (bytes, _) = sum(&profile, "MEM_TOTAL", |s| {
                s.position("_PyObject_Malloc").is_some_and(|at| {
                    s.frames[at + 1..].iter().any(|(name, _)| {
                        !igprof_analyse::transform::ALLOCATORS.contains(&name.as_str())
                    })
                })
            });
            arena_map += bytes as i64;
            named |= stacks_of(&profile, "MEM_TOTAL")
                .iter()
                .any(|s| s.has("_PyObject_Malloc"));
        }
        // The case that was lost is in the profiles where the interpreter has symbols
        // (Debian's static builds are stripped).
        assert!(
            arena_map > 0 || !named,
            "{}: no allocation of pymalloc's own under _PyObject_Malloc",
            python.name
        );
        // The example users run first, sampled (every 512 KiB on average).
        let run = run_profiled(
            &python.path,
            &[&example("memory.py")],
            &[("PYIGPROF_PROFILE", "mem")],
        );
        assert!(run.output.status.success(), "{}", run.stderr());
        let paths = run.profiles();
        assert_eq!(paths.len(), 1, "{}: {paths:?}", python.name);
        reports_agree(
            &format!("{} (memory.py)", python.name),
            &run,
            &paths[0],
            false,
        );
    }
}
