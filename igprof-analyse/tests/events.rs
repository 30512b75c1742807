//! The sampled event counters (`PERF_PAGE_FAULTS`, `PERF_CONTEXT_SWITCHES`, …) in the
//! reports, the exports and `--diff`, run as a user runs them on synthetic dumps written
//! as pyigprof writes them with perf-event sampling: the statistics first (`#pyigprof
//! stats …`, `#pyigprof handler …`, defining `PERF_TICKS`), then the call tree, each
//! node's `V1=(PERF_<EVENT>):(samples,events,events)`: the samples taken there and the
//! events they stand for.
//!
//! The page-fault profiles are of `python3 app.py`: `<module>` calls, from line 28,
//! `load` (line 10; faults at its line 13 and in libc's `__memmove_avx_unaligned_erms`
//! below it), and from line 29 `build` (line 20; faults at its line 22, and in numpy's
//! `PyArray_Zeros` → libc's `memset`); a native thread runs `worker_main`. Every place
//! also has 5 samples of `PERF_TICKS`, so that `-r` has to choose. The figures
//! (samples, events) of each place are in [`Faults`]; every expected figure below is
//! computed by hand from them.

mod common;

use std::fs;
use std::path::Path;

use common::{assert_fails, run, stderr, stdout, TempDir};
use serde_json::Value;

/// (samples, events) of `PERF_PAGE_FAULTS` at each of the five places that fault.
#[derive(Debug, Clone, Copy)]
struct Faults {
    /// `load`'s own, at /work/app.py:13.
    load: (i64, i64),
    /// `__memmove_avx_unaligned_erms`, called by `load`.
    memmove: (i64, i64),
    /// `build`'s own, at /work/app.py:22.
    build: (i64, i64),
    /// `memset`, called by numpy's `PyArray_Zeros`, called by `build`.
    memset: (i64, i64),
    /// `worker_main`, the native thread.
    worker: (i64, i64),
}

/// The profile of the `--top` tests: 40 samples standing for 12,345 page faults
/// (6000 + 2400 + 2145 + 1200 + 600).
const SMALL: Faults = Faults {
    load: (4, 1200),
    memmove: (8, 2400),
    build: (2, 600),
    memset: (20, 6000),
    worker: (6, 2145),
};

/// The base of the comparisons: ten times [`SMALL`], 400 samples and 123,450 faults.
const BASE: Faults = Faults {
    load: (40, 12000),
    memmove: (80, 24000),
    build: (20, 6000),
    memset: (200, 60000),
    worker: (60, 21450),
};

/// [`BASE`] with three times the faults in `__memmove_avx_unaligned_erms` (240 samples,
/// 72,000 faults): 560 samples, 171,450 faults.
const GROWN: Faults = Faults {
    memmove: (240, 72000),
    ..BASE
};

/// A second run of [`BASE`]: 400 samples again, a few more or fewer here and there, and
/// the mean period a little different (so that the events differ by more than the
/// samples do).
const JITTER: Faults = Faults {
    load: (37, 11470),
    memmove: (86, 25370),
    build: (23, 7130),
    memset: (190, 58900),
    worker: (64, 22880),
};

/// A pyigprof dump of `python3 app.py` (pid `pid`) with the page faults of `faults`.
fn page_faults(pid: u32, faults: Faults) -> String {
    let v = |(samples, events): (i64, i64)| format!("({samples:x},{events:x},{events:x})");
    let samples =
        faults.load.0 + faults.memmove.0 + faults.build.0 + faults.memset.0 + faults.worker.0;
    format!(
        "\
P=(HEX ID={pid:x} N=(python3 app.py) T=0.004000)
C1 FN0=(F0=([pyigprof])+0 N=(#pyigprof stats samples={samples} ticks=25 with_python=20 complete_native=25 approximate_native=0 dropped_no_slot=0 dropped_tree_full=0 dropped_ticks=0 python_abandoned=0 python_mismatches=0 deepest=6 unsampled_ticks=0 threads=2 blocked=0 waiting_ticks=0 faulted_reads=0))+0 V0=(PERF_TICKS):(0,0,0)
C1 FN1=(F0+0 N=(#pyigprof handler samples={samples} total_ns=0 median_ns=0 p99_ns=0 max_ns=0 base_ns=- native_frame_ns=- python_frame_ns=-))+0
C1 FN2=(F1=(/usr/lib/x86_64-linux-gnu/libc.so.6)+271c0 N=(__libc_start_main))+8a
C2 FN3=(F2=(/usr/bin/python3.12)+1130 N=(Py_BytesMain))+12
C3 FN4=(F3=(/work/app.py)+1 N=(<module>))+1b
C4 FN5=(F3+a N=(load))+3 V0:(5,5,5) V1=(PERF_PAGE_FAULTS):{load}
C5 FN6=(F1+a5d40 N=(__memmove_avx_unaligned_erms))+1c V0:(5,5,5) V1:{memmove}
C3 FN4+1c
C4 FN7=(F3+14 N=(build))+2 V0:(5,5,5) V1:{build}
C5 FN8=(F4=(/usr/lib/python3/dist-packages/numpy/_core/_multiarray_umath.cpython-312-x86_64-linux-gnu.so)+5a10 N=(PyArray_Zeros))+1d3
C6 FN9=(F1+a4e50 N=(memset))+21 V0:(5,5,5) V1:{memset}
C1 FNa=(F1+129a40 N=(__clone3))+2c
C2 FNb=(F1+94ac0 N=(start_thread))+2f1
C3 FNc=(F5=(/work/libworker.so)+1240 N=(worker_main))+58 V0:(5,5,5) V1:{worker}
",
        load = v(faults.load),
        memmove = v(faults.memmove),
        build = v(faults.build),
        memset = v(faults.memset),
        worker = v(faults.worker),
    )
}

/// A pyigprof dump of `python3 server.py` sampling context switches only (`PERF_TICKS`
/// defined by the statistics, without values): `<module>` → `wait` (line 5) →
/// `clock_nanosleep` 1200 samples of one switch each, `<module>` → `poll` (line 9) →
/// `__poll` 50 samples of 2 switches, a native thread's `pthread_cond_wait` 16 samples
/// of one: 1,266 samples, 1,316 switches.
const CONTEXT_SWITCHES: &str = "\
P=(HEX ID=2af8 N=(python3 server.py) T=0.004000)
C1 FN0=(F0=([pyigprof])+0 N=(#pyigprof stats samples=1266 ticks=0 with_python=1250 complete_native=1266 approximate_native=0 dropped_no_slot=0 dropped_tree_full=0 dropped_ticks=0 python_abandoned=0 python_mismatches=0 deepest=5 unsampled_ticks=0 threads=2 blocked=0 waiting_ticks=0 faulted_reads=0))+0 V0=(PERF_TICKS):(0,0,0)
C1 FN1=(F0+0 N=(#pyigprof handler samples=1266 total_ns=0 median_ns=0 p99_ns=0 max_ns=0 base_ns=- native_frame_ns=- python_frame_ns=-))+0
C1 FN2=(F1=(/usr/lib/x86_64-linux-gnu/libc.so.6)+271c0 N=(__libc_start_main))+8a
C2 FN3=(F2=(/usr/bin/python3.12)+1130 N=(Py_BytesMain))+12
C3 FN4=(F3=(/work/server.py)+1 N=(<module>))+b
C4 FN5=(F3+5 N=(wait))+1
C5 FN6=(F1+e5a40 N=(clock_nanosleep))+3e V1=(PERF_CONTEXT_SWITCHES):(4b0,4b0,4b0)
C3 FN4+c
C4 FN7=(F3+9 N=(poll))+1
C5 FN8=(F1+11e3c0 N=(__poll))+4b V1:(32,64,64)
C1 FN9=(F1+129a40 N=(__clone3))+2c
C2 FNa=(F1+94ac0 N=(start_thread))+2f1
C3 FNb=(F1+91d60 N=(pthread_cond_wait))+1a9 V1:(10,10,10)
";

/// Runs the analyser in `dir` and returns what it printed, checking it succeeded.
fn report(args: &[&str], dir: &Path) -> String {
    let output = run(args, dir);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}: {}",
        stderr(&output)
    );
    stdout(&output)
}

/// A directory holding the dumps: `small.txt` ([`SMALL`]), `base.txt`, `grown.txt`,
/// `jitter.txt` and `switches.txt` ([`CONTEXT_SWITCHES`]).
fn dumps(test: &str) -> TempDir {
    let dir = TempDir::new(test);
    dir.write("small.txt", page_faults(9000, SMALL).as_bytes());
    dir.write("base.txt", page_faults(9001, BASE).as_bytes());
    dir.write("grown.txt", page_faults(9002, GROWN).as_bytes());
    dir.write("jitter.txt", page_faults(9003, JITTER).as_bytes());
    dir.write("switches.txt", CONTEXT_SWITCHES.as_bytes());
    dir
}

/// `-r PERF_PAGE_FAULTS --top=5` on [`SMALL`]: 40 samples, 12,345 faults; shares of the
/// faults (memset 6000 / 12345 = 48.60 %, build's cumulative 600 + 6000 = 6600 is
/// 53.46 %), events with their thousands separated.
const SMALL_TOP: &str = "\
pyigprof-analyse: small.txt: python3 app.py (pid 9000)
PERF_PAGE_FAULTS: 40 samples, 12,345 events; a 10 % share is 4.0-23.1 % (95 %)
   self %  self events    cum %  cum events  self 95% CI   cum 95% CI  self samples  cum samples  function  (file)
    48.60        6,000    48.60       6,000  [34.2-63.0]  [34.2-63.0]            20           20  memset  (/usr/lib/x86_64-linux-gnu/libc.so.6)
    19.44        2,400    19.44       2,400  [10.2-33.8]  [10.2-33.8]             8            8  __memmove_avx_unaligned_erms  (/usr/lib/x86_64-linux-gnu/libc.so.6)
    17.38        2,145    17.38       2,145   [8.2-33.7]   [8.2-33.7]             6            6  worker_main  (/work/libworker.so)
     9.72        1,200    29.16       3,600   [3.8-22.4]  [17.6-44.2]             4           12  load (/work/app.py:10)
     4.86          600    53.46       6,600   [1.3-16.0]  [38.7-67.4]             2           22  build (/work/app.py:20)
";

#[test]
fn top_shows_events_and_samples() {
    let dir = dumps("top_shows_events_and_samples");
    assert_eq!(
        report(&["-r", "PERF_PAGE_FAULTS", "--top=5", "small.txt"], &dir.0),
        SMALL_TOP
    );
    // --report is -r; --calls adds the samples: memset's 20, build's 2 + 20.
    let calls = report(
        &[
            "--report",
            "PERF_PAGE_FAULTS",
            "--top=5",
            "--calls",
            "small.txt",
        ],
        &dir.0,
    );
    let lines: Vec<&str> = calls.lines().skip(2).collect();
    assert_eq!(
        lines[0],
        "   self %  self events    cum %  cum events  self 95% CI   cum 95% CI  self samples  cum samples  function  (file)"
    );
    assert_eq!(
        lines[1],
        "    48.60        6,000    48.60       6,000  [34.2-63.0]  [34.2-63.0]            20           20  memset  (/usr/lib/x86_64-linux-gnu/libc.so.6)"
    );
    assert_eq!(
        lines[5],
        "     4.86          600    53.46       6,600   [1.3-16.0]  [38.7-67.4]             2           22  build (/work/app.py:20)"
    );
    // The first counter with values is the CPU time's: 5 places of 5 ticks.
    let ticks = report(&["--top=1", "small.txt"], &dir.0);
    assert!(
        ticks.contains(
            "\nPERF_TICKS: 25 samples, 25 ticks of 4.000 ms = 0.100 s; a 10 % share is 3.2-27.5 % (95 %)\n   self %    self s"
        ),
        "{ticks}"
    );
    // An event counter the profile does not have.
    assert_fails(
        &run(&["-r", "PERF_CYCLES", "small.txt"], &dir.0),
        "pyigprof-analyse: small.txt: no counter PERF_CYCLES in the profile; its counters: PERF_TICKS, PERF_PAGE_FAULTS\n",
    );
}

#[test]
fn tree_lines_text_and_stacks_show_events() {
    let dir = dumps("tree_lines_text_and_stacks_show_events");
    let tree = report(&["-r", "PERF_PAGE_FAULTS", "--tree", "small.txt"], &dir.0);
    let lines: Vec<&str> = tree.lines().collect();
    assert_eq!(
        lines[1],
        "PERF_PAGE_FAULTS: 40 samples, 12,345 events; a 10 % share is 4.0-23.1 % (95 %)"
    );
    assert_eq!(
        lines[2],
        "    cum %  cum events   self %  self events   cum 95% CI  self 95% CI  cum samples  self samples  function"
    );
    // <module>: 1200 + 2400 + 600 + 6000 = 10,200 faults of 12,345 (82.62 %).
    assert_eq!(
        lines[5],
        "    82.62      10,200     0.00            0  [68.9-90.3]    [0.0-8.8]           34             0      <module> (/work/app.py:1)"
    );
    assert!(
        tree.contains("\n    48.60       6,000    48.60        6,000  [34.2-63.0]  [34.2-63.0]           20            20            memset  (/usr/lib/x86_64-linux-gnu/libc.so.6)\n"),
        "{tree}"
    );

    // Lines of Python code: the native faults count for the line that called them.
    assert_eq!(
        report(
            &["-r", "PERF_PAGE_FAULTS", "--lines=2", "small.txt"],
            &dir.0
        )
        .lines()
        .skip(1)
        .collect::<Vec<_>>(),
        [
            "PERF_PAGE_FAULTS: 40 samples, 12,345 events; a 10 % share is 4.0-23.1 % (95 %)",
            "   self %  self events    cum %  cum events  self 95% CI   cum 95% CI  self samples  cum samples  line  (function)",
            "    53.46        6,600    53.46       6,600  [38.7-67.4]  [38.7-67.4]            22           22  /work/app.py:22  (build)",
            "    29.16        3,600    29.16       3,600  [17.6-44.2]  [17.6-44.2]            12           12  /work/app.py:13  (load)",
        ]
    );

    // IgProf's text report: events in its Total column, samples in Samples.
    let text = report(
        &["-r", "PERF_PAGE_FAULTS", "--text", "--calls", "small.txt"],
        &dir.0,
    );
    assert!(
        text.contains("% total      Total       95% CI  Samples  Function\n  82.62     10,200  [68.9-90.3]       34  <module> (/work/app.py:1) [1]\n"),
        "{text}"
    );
    assert!(
        text.contains("% total       Self       95% CI  Samples  Function\n  48.60      6,000  [34.2-63.0]       20  memset  (/usr/lib/x86_64-linux-gnu/libc.so.6) [5]\n"),
        "{text}"
    );
    assert!(
        text.contains("\n[7]       29.16      3,600      1,200 / 2,400           12            load (/work/app.py:10)\n"),
        "{text}"
    );

    // IgProf's --top N: the heaviest stacks, their events in IgProf's form.
    assert_eq!(
        report(&["-r", "PERF_PAGE_FAULTS", "--top", "1", "small.txt"], &dir.0),
        "## Entry 1 (6'000 events)\n#0 memset\n#1 PyArray_Zeros\n#2 build\n#3 <module>\n#4 Py_BytesMain\n#5 __libc_start_main\n#6 <spontaneous>\n\n"
    );
}

#[test]
fn context_switches_are_events_too() {
    let dir = dumps("context_switches_are_events_too");
    // PERF_TICKS has no values: the context switches are reported by default.
    let output = run(&["-v", "--top=3", "switches.txt"], &dir.0);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "\
pyigprof-analyse: switches.txt: python3 server.py (pid 11000)
PERF_CONTEXT_SWITCHES: 1,266 samples, 1,316 events; a 10 % share is ±1.7 points (95 %)
   self %  self events    cum %  cum events  self 95% CI   cum 95% CI  self samples  cum samples  function  (file)
    91.19        1,200    91.19       1,200  [89.9-92.2]  [89.9-92.2]          1200         1200  clock_nanosleep  (/usr/lib/x86_64-linux-gnu/libc.so.6)
     7.60          100     7.60         100    [5.8-9.9]    [5.8-9.9]            50           50  __poll  (/usr/lib/x86_64-linux-gnu/libc.so.6)
     1.22           16     1.22          16    [0.7-2.0]    [0.7-2.0]            16           16  pthread_cond_wait  (/usr/lib/x86_64-linux-gnu/libc.so.6)
"
    );
    assert!(
        stderr(&output).contains(
            "counters: PERF_TICKS, PERF_CONTEXT_SWITCHES; reporting PERF_CONTEXT_SWITCHES (the first counter with values)"
        ),
        "{}",
        stderr(&output)
    );
    let document: Value =
        serde_json::from_str(&report(&["--json", "switches.txt"], &dir.0)).unwrap();
    assert_eq!(document["counter"], "PERF_CONTEXT_SWITCHES");
    assert_eq!(document["unit"], "events");
    assert_eq!(
        (&document["total"]["samples"], &document["total"]["amount"]),
        (&Value::from(1266), &Value::from(1316))
    );
    // pprof: the event's name in lower case, 1316 / 1266 events per sample.
    let path = dir.0.join("switches.pb.gz");
    report(&["switches.txt", "--pprof", path.to_str().unwrap()], &dir.0);
    let profile = pprof(&path);
    assert_eq!(
        profile.types(),
        [("samples", "count"), ("context_switches", "count")]
    );
    assert_eq!(profile.period(), ("context_switches", "count", 1));
    assert_eq!(profile.sums(), (1266, 1316));
}

use common::pprof as proto;

/// The pprof profile written at `path`.
fn pprof(path: &Path) -> proto::Profile {
    use prost::Message;
    use std::io::Read;

    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(&fs::read(path).unwrap()[..])
        .read_to_end(&mut plain)
        .unwrap();
    proto::Profile::decode(&plain[..]).unwrap()
}

#[test]
fn exports_say_events() {
    let dir = dumps("exports_say_events");
    let document: Value = serde_json::from_str(&report(
        &["-r", "PERF_PAGE_FAULTS", "--json", "small.txt"],
        &dir.0,
    ))
    .unwrap();
    assert_eq!(document["counter"], "PERF_PAGE_FAULTS");
    assert_eq!(document["unit"], "events");
    assert_eq!(document["rate_bytes"], Value::Null);
    assert_eq!(document["total"]["samples"], 40);
    assert_eq!(document["total"]["amount"], 12345);
    assert_eq!(document["total"]["seconds"], Value::Null);
    let first = &document["functions"][0];
    assert_eq!(first["name"], "memset");
    assert_eq!(first["self"]["amount"], 6000);
    assert_eq!(first["self"]["seconds"], Value::Null);

    let path = |name: &str| dir.0.join(name).to_str().unwrap().to_string();
    let (database, speedscope, svg, callgrind, pb) = (
        path("f.sqlite"),
        path("f.json"),
        path("f.svg"),
        path("callgrind.out"),
        path("f.pb.gz"),
    );
    report(
        &[
            "-r",
            "PERF_PAGE_FAULTS",
            "small.txt",
            &format!("--sqlite={database}"),
            "--speedscope",
            &speedscope,
            "--flamegraph",
            &svg,
            "--callgrind",
            &callgrind,
            "--pprof",
            &pb,
        ],
        &dir.0,
    );

    let db = rusqlite::Connection::open(&database).unwrap();
    let row: (String, String, i64, i64, Option<f64>, Option<f64>) = db
        .query_row(
            "SELECT counter, unit, total_samples, total_amount, total_seconds, rate_bytes FROM profile",
            [],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(
        row,
        (
            "PERF_PAGE_FAULTS".into(),
            "events".into(),
            40,
            12345,
            None,
            None
        )
    );
    let build: (i64, i64) = db
        .query_row(
            "SELECT cum_amount, cum_samples FROM summary WHERE name = 'build'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(build, (6600, 22));

    // speedscope has no unit for events: none, the profile named after the counter.
    let file: Value = serde_json::from_slice(&fs::read(&speedscope).unwrap()).unwrap();
    let profile = &file["profiles"][0];
    assert_eq!(profile["unit"], "none");
    assert_eq!(profile["name"], "PERF_PAGE_FAULTS");
    assert_eq!(profile["endValue"], 12345.0);

    // inferno's tooltips: "<frame> (<n> events, <share>%)".
    let svg = fs::read_to_string(&svg).unwrap();
    assert!(
        svg.contains("memset [libc.so.6] (6,000 events, 48.60%)"),
        "{svg}"
    );
    assert!(
        svg.contains(
            "PERF_PAGE_FAULTS: 40 samples, 12,345 events; a 10 % share is 4.0-23.1 % (95 %)"
        ),
        "{svg}"
    );

    let callgrind = fs::read_to_string(&callgrind).unwrap();
    assert!(
        callgrind.contains(
            "event: PERF_PAGE_FAULTS : page faults\n\
             event: Samples : samples\n\
             events: PERF_PAGE_FAULTS Samples\n\
             summary: 12345 40\n"
        ),
        "{callgrind}"
    );

    // pprof: samples and page faults, 12345 / 40 = 308.6 faults per sample.
    let profile = pprof(Path::new(&pb));
    assert_eq!(
        profile.types(),
        [("samples", "count"), ("page_faults", "count")]
    );
    assert_eq!(profile.period(), ("page_faults", "count", 309));
    assert_eq!(profile.text(profile.default_sample_type), "page_faults");
    assert_eq!(profile.sums(), (40, 12345));

    // Folded stacks: the faults of each stack.
    let collapsed = report(
        &["-r", "PERF_PAGE_FAULTS", "--collapsed", "small.txt"],
        &dir.0,
    );
    assert!(
        collapsed.contains("\n__libc_start_main [libc.so.6];Py_BytesMain [python3.12];<module> (/work/app.py:1);build (/work/app.py:20);PyArray_Zeros [_multiarray_umath.cpython-312-x86_64-linux-gnu.so];memset [libc.so.6] 6000\n"),
        "{collapsed}"
    );
    assert!(
        collapsed.ends_with(
            "\n__clone3 [libc.so.6];start_thread [libc.so.6];worker_main [libworker.so] 2145\n"
        ),
        "{collapsed}"
    );
    let sum: i64 = collapsed
        .lines()
        .map(|line| line.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap())
        .sum();
    assert_eq!(sum, 12345);
}

/// The rows of a diff's text table: the 15 cells of each and its function.
fn diff_rows(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .skip_while(|line| !line.trim_start().starts_with("base %"))
        .skip(1)
        .take_while(|line| !line.starts_with("result:") && !line.starts_with('('))
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let cells = words[..15].iter().map(|cell| cell.to_string()).collect();
            (cells, words[15..].join(" "))
        })
        .collect()
}

/// The cells of `function`'s row in `rows`.
fn cells<'a>(rows: &'a [(Vec<String>, String)], function: &str) -> &'a [String] {
    rows.iter()
        .find(|(_, name)| name.starts_with(function))
        .map(|(cells, _)| cells.as_slice())
        .unwrap_or_else(|| panic!("no {function} in {rows:?}"))
}

/// The pooled two-proportion z statistic, computed here independently of the crate.
fn z(x1: f64, n1: f64, x2: f64, n2: f64) -> f64 {
    let pooled = (x1 + x2) / (n1 + n2);
    (x2 / n2 - x1 / n1) / (pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2)).sqrt()
}

/// |z| from which a test is significant: Bonferroni over the 16 tests of these
/// comparisons (11 functions with faults: 5 self tests and 11 cumulative ones) at
/// alpha 0.01, as the report says.
const CRITICAL_Z: f64 = 3.42;

#[test]
fn diff_flags_tripled_faults_and_not_jitter() {
    let dir = dumps("diff_flags_tripled_faults_and_not_jitter");
    // Two runs of the base (base.txt and its second run, jitter.txt), one of the grown
    // program: memmove 80 + 86 of 800 samples (49,370 of 249,200 faults) → 240 of 560
    // (72,000 of 171,450). The base runs differ by less than sampling noise (typical
    // dispersion 0.71: 1 is used).
    let output = run(
        &[
            "--diff",
            "base.txt",
            "jitter.txt",
            "--",
            "grown.txt",
            "-r",
            "PERF_PAGE_FAULTS",
            "--fail-on-regression",
            "5",
        ],
        &dir.0,
    );
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}{}", stderr(&output));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "pyigprof-analyse: PERF_PAGE_FAULTS self and cumulative shares per function, base -> new",
            "base: base.txt, jitter.txt: python3 app.py (pids 9001, 9003): PERF_PAGE_FAULTS: 800 samples, 249,200 events; a 10 % share is 8.1-12.3 % (95 %)",
            "new: grown.txt: python3 app.py (pid 9002): PERF_PAGE_FAULTS: 560 samples, 171,450 events; a 10 % share is 7.8-12.8 % (95 %)",
            "test: two-proportion z-test (pooled) on each function's self samples and on its cumulative samples (n = all samples of each side's runs merged), run-to-run variation measured between 2 base runs and 1 new run: typical dispersion 0.71 (of 16 tests, 16 df; at least 1 is used), each function's own moderated by it (prior weight 3), Bonferroni correction over 16 tests of 11 functions, alpha 0.01: significant when |z| >= 3.42",
        ]
    );
    assert_eq!(
        lines[4],
        "  base %  new %  change  base events  new events      z  p (adj.)  base cum %  new cum %  cum change  base cum events  new cum events  cum z  cum p (adj.)  signif.  function  (file)"
    );
    let rows = diff_rows(&text);
    // The first row: the largest significant change. Shares of faults: 49370 / 249200
    // = 19.81 %, 72000 / 171450 = 41.99 %; z on the samples.
    assert!(
        rows[0].1.starts_with("__memmove_avx_unaligned_erms"),
        "{text}"
    );
    let memmove = cells(&rows, "__memmove_avx_unaligned_erms");
    assert_eq!(
        memmove,
        [
            "19.81", "41.99", "+22.18", "49,370", "72,000", "+8.77", "2.9e-17", "19.81", "41.99",
            "+22.18", "49,370", "72,000", "+8.77", "2.9e-17", "both"
        ]
    );
    assert_eq!(
        format!("{:+.2}", z(166.0, 800.0, 240.0, 560.0)),
        memmove[5],
        "z on the samples"
    );
    // load: its own 40 + 37 samples, and memmove's: 243 of 800 → 280 of 560.
    let load = cells(&rows, "load");
    assert_eq!(
        [&load[9], &load[10], &load[11], &load[12], &load[14]],
        ["+19.76", "72,840", "84,000", "+7.32", "cum"]
    );
    assert_eq!(format!("{:+.2}", z(243.0, 800.0, 280.0, 560.0)), load[12]);
    // worker_main's faults did not change: its share fell by less than noise.
    assert_eq!(cells(&rows, "worker_main")[14], "no");
    // The events of each side are its runs' summed (two base runs, one new).
    assert!(
        text.ends_with("\nresult: REGRESSION: 2 function(s) grew significantly by more than 5.00 points: __memmove_avx_unaligned_erms  (/usr/lib/x86_64-linux-gnu/libc.so.6) +22.18 points self and cumulative (+22,630 events); load (/work/app.py:10) +19.76 points cumulative (+11,160 events)\n"),
        "{text}"
    );

    // One run per side: the tripling moves every share (16 tests, z from −4.3 to +7.4),
    // and the dispersion estimated from those z-scores (λ = 8.61) takes it for
    // run-to-run variation: z = 7.41 / √8.61 = 2.52, not significant.
    let output = run(
        &["--diff", "base.txt", "grown.txt", "-r", "PERF_PAGE_FAULTS"],
        &dir.0,
    );
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}{}", stderr(&output));
    assert!(
        text.contains(", one run per side: run-to-run variation estimated from the comparison's own z-scores (dispersion 8.61, the median z² of the 16 tests with at least 10 samples on each side / 0.455); give several runs per side (--diff B1 B2 B3 -- N1 N2 N3) to measure each function's own, "),
        "{text}"
    );
    let memmove = cells(&diff_rows(&text), "__memmove_avx_unaligned_erms").to_vec();
    assert_eq!(
        format!("{:+.2}", z(80.0, 400.0, 240.0, 560.0) / 8.61f64.sqrt()),
        memmove[5]
    );
    assert_eq!(memmove[14], "no");

    // A second run: a few samples more or fewer here and there, and faults that differ
    // by more (the mean period changed). Nothing is significant on the samples
    // (memmove: 80 → 86 of 400)...
    let output = run(
        &[
            "--diff",
            "base.txt",
            "jitter.txt",
            "-r",
            "PERF_PAGE_FAULTS",
            "--fail-on-regression",
            "0",
        ],
        &dir.0,
    );
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}{}", stderr(&output));
    let rows = diff_rows(&text);
    assert_eq!(rows.len(), 11, "{text}");
    assert!(rows.iter().all(|(cells, _)| cells[14] == "no"), "{text}");
    let memmove = cells(&rows, "__memmove_avx_unaligned_erms");
    assert_eq!(
        [&memmove[3], &memmove[4], &memmove[5]],
        ["24,000", "25,370", "+0.52"]
    );
    assert_eq!(format!("{:+.2}", z(80.0, 400.0, 86.0, 400.0)), memmove[5]);
    assert!(
        text.ends_with("\nresult: OK: no function's self or cumulative share grew significantly by more than 0.00 points (0 significant changes)\n"),
        "{text}"
    );
    // ... while a test counting every fault as an observation would have flagged
    // memmove and memset.
    assert!(z(24000.0, 123450.0, 25370.0, 125750.0) > CRITICAL_Z);
    assert!(z(60000.0, 123450.0, 58900.0, 125750.0) < -CRITICAL_Z);

    // Markdown: samples and events per profile.
    let markdown = report(
        &[
            "--diff",
            "base.txt",
            "grown.txt",
            "-r",
            "PERF_PAGE_FAULTS",
            "--markdown",
        ],
        &dir.0,
    );
    assert!(
        markdown.contains("| profile | files and program | samples | events |\n|---|---|--:|--:|\n| base | `base.txt: python3 app.py (pid 9001)` | 400 | 123,450 |\n| new | `grown.txt: python3 app.py (pid 9002)` | 560 | 171,450 |\n"),
        "{markdown}"
    );
    assert!(
        markdown.contains("| base events | new events |"),
        "{markdown}"
    );
}
