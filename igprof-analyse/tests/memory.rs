//! The memory counters (`MEM_TOTAL`, `MEM_LIVE`, `MEM_MAX`, `MEM_LIVE_PEAK`) in every
//! report, export and comparison, run as a user runs them on pyigprof memory profiles
//! recorded by sampling bytes (tests/data/pyigprof-mem-*.txt) and on IgProf's exact
//! `igprof -mp` profile (tests/data/igprof-mem.txt).
//!
//! The pyigprof profiles are written as pyigprof writes its dumps: the statistics first
//! (`#pyigprof stats …`, `#pyigprof handler …` defining `PERF_TICKS` without values, and
//! `#pyigprof memory rate_bytes=524288 sampled=…`: one allocation recorded every 512 KiB
//! on average), then the call tree. `python3 app.py`: `<module>` calls, from line 28,
//! `load` (line 13, `list.append` → `list_resize` → `realloc`), from line 29 `Cache.add`
//! (line 22: `PyObject_Vectorcall` → `PyBytes_FromStringAndSize` → `pymalloc_alloc`,
//! the cache that leaks; line 23: bytes of its own), from line 30 `parse` (line 31, the
//! `_json` extension's `scanstring_unicode` → `malloc`); a native thread runs
//! `worker_main` (`malloc`). Live bytes, base: `pymalloc_alloc` 8 MiB, `Cache.add`
//! 512 KiB, `scanstring_unicode` 4 MiB, `list_resize` 2 MiB, `worker_main` 1 MiB (15.5
//! MiB). `pyigprof-mem-jitter.txt`, a second run: 8.5 MiB and 3.5 MiB instead of 8 and 4.
//! `pyigprof-mem-leak.txt`: the cache holds 72 MiB, 64 MiB more.

mod common;

use std::fs;

use common::{assert_fails, data, run, stderr, stdout, TempDir};
use serde_json::Value;

const BASE: &str = "pyigprof-mem-base.txt";
const JITTER: &str = "pyigprof-mem-jitter.txt";
const LEAK: &str = "pyigprof-mem-leak.txt";
const IGPROF: &str = "igprof-mem.txt";

/// 512 KiB: R, the mean bytes between recorded allocations of the pyigprof profiles.
const RATE: f64 = 524288.0;
const MIB: i64 = 1 << 20;

/// Runs the analyser in tests/data and returns what it printed, checking it succeeded.
fn report(args: &[&str]) -> String {
    let output = run(args, &data());
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}: {}",
        stderr(&output)
    );
    stdout(&output)
}

/// The summary line of the base profile's `MEM_LIVE` (the Python view adds its note):
/// 16,252,928 bytes sampled every 524,288 are 31 samples, among which a share of 10 %
/// (3.1 samples) has the Wilson interval 3.5-25.3 %.
const LIVE_TOTAL: &str = "MEM_LIVE: 59,363 blocks, 15.5 MiB live (16,252,928 bytes); estimates from sampling every 512.0 KiB allocated on average (493 allocations recorded); as 31 samples of 512.0 KiB, a 10 % share is 3.5-25.3 % (95 %)";

#[test]
fn top_shows_bytes_and_says_they_are_estimates() {
    assert_eq!(
        report(&["-r", "MEM_LIVE", "--top=4", BASE]),
        format!(
            "\
pyigprof-analyse: pyigprof-mem-base.txt: python3 app.py (pid 8000)
{LIVE_TOTAL}; Python view: interpreter plumbing below Python code counts as its caller's (--all-frames shows it)
   self %  self bytes    cum %  cum bytes  self 95% CI   cum 95% CI  self blocks  cum blocks  function  (file)
    51.61     8.0 MiB    51.61    8.0 MiB  [34.8-68.0]  [34.8-68.0]        16384       16384  pymalloc_alloc  (/usr/bin/python3.12)
    25.81     4.0 MiB    25.81    4.0 MiB  [13.7-43.2]  [13.7-43.2]        41943       41943  scanstring_unicode  (/usr/lib/python3.12/lib-dynload/_json.cpython-312-x86_64-linux-gnu.so)
    12.90     2.0 MiB    12.90    2.0 MiB   [5.1-28.9]   [5.1-28.9]            4           4  list_resize  (/usr/bin/python3.12)
     6.45     1.0 MiB     6.45    1.0 MiB   [1.8-20.7]   [1.8-20.7]            8           8  worker_main  (/work/libworker.so)
"
        )
    );
    // The count column is blocks for MEM_LIVE, allocations for MEM_TOTAL; --calls adds
    // nothing more where the intervals come with the counts.
    let calls = report(&["-r", "MEM_LIVE", "--top=1", "--calls", BASE]);
    assert!(
        calls.contains("   self %  self bytes    cum %  cum bytes  self 95% CI   cum 95% CI  self blocks  cum blocks  function  (file)\n    51.61     8.0 MiB    51.61    8.0 MiB  [34.8-68.0]  [34.8-68.0]        16384       16384  pymalloc_alloc"),
        "{calls}"
    );
    let total = report(&["-r", "MEM_TOTAL", "--top=1", "--calls", BASE]);
    assert!(
        total.contains("\nMEM_TOTAL: 214,176 allocations, 132.5 MiB allocated (138,936,320 bytes); estimates from sampling every 512.0 KiB"),
        "{total}"
    );
    assert!(
        total.contains("self allocations  cum allocations"),
        "{total}"
    );
}

#[test]
fn the_first_counter_with_values_is_the_default() {
    // PERF_TICKS is defined first, by the statistics, without values: MEM_TOTAL is
    // reported.
    let output = run(&["-v", "--top=1", BASE], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("\nMEM_TOTAL: 214,176 allocations, 132.5 MiB allocated"),
        "{}",
        stdout(&output)
    );
    assert!(
        stderr(&output).contains(
            "counters: PERF_TICKS, MEM_TOTAL, MEM_LIVE, MEM_MAX, MEM_LIVE_PEAK; reporting MEM_TOTAL (the first counter with values)"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn tree_lines_and_text_show_bytes() {
    let tree = report(&["-r", "MEM_LIVE", "--tree", BASE]);
    let lines: Vec<&str> = tree.lines().collect();
    assert_eq!(
        lines[2],
        "    cum %  cum bytes   self %  self bytes   cum 95% CI  self 95% CI  cum blocks  self blocks  function"
    );
    // Cache.add: its own 512 KiB and the 8 MiB of what it called; the interpreter's
    // PyObject_Vectorcall is hidden (Python view).
    assert!(
        tree.contains(
            "    54.84    8.5 MiB     3.23   512.0 KiB  [37.8-70.8]   [0.6-16.2]       17408         1024        Cache.add (/work/app.py:20)\n\
             \x20   51.61    8.0 MiB     0.00         0 B  [34.8-68.0]   [0.0-11.0]       16384            0          PyBytes_FromStringAndSize  (/usr/bin/python3.12)\n"
        ),
        "{tree}"
    );
    assert!(!tree.contains("PyObject_Vectorcall"), "{tree}");

    // Lines of Python code: the native allocations count for the line that called them.
    assert_eq!(
        report(&["-r", "MEM_LIVE", "--lines=3", BASE])
            .lines()
            .skip(2)
            .collect::<Vec<_>>(),
        [
            "   self %  self bytes    cum %  cum bytes  self 95% CI   cum 95% CI  self blocks  cum blocks  line  (function)",
            "    51.61     8.0 MiB    51.61    8.0 MiB  [34.8-68.0]  [34.8-68.0]        16384       16384  /work/app.py:22  (Cache.add)",
            "    25.81     4.0 MiB    25.81    4.0 MiB  [13.7-43.2]  [13.7-43.2]        41943       41943  /work/app.py:31  (parse)",
            "    12.90     2.0 MiB    12.90    2.0 MiB   [5.1-28.9]   [5.1-28.9]            4           4  /work/app.py:13  (load)",
        ]
    );

    let text = report(&["-r", "MEM_LIVE_PEAK", "--text", "--calls", BASE]);
    assert!(
        text.contains("\nMEM_LIVE_PEAK: 37,908 blocks, 55.5 MiB live at the program's peak (58,195,968 bytes); estimates from"),
        "{text}"
    );
    assert!(
        text.contains("% total      Total       95% CI  Blocks  Function\n  98.20   54.5 MiB  [93.7-99.5]   37900  <module> (/work/app.py:1) [1]\n"),
        "{text}"
    );
    assert!(
        text.contains("\n[4]       72.07   40.0 MiB   40.0 MiB / 0 B         20480           scanstring_unicode"),
        "{text}"
    );
}

#[test]
fn max_and_peak_values_are_bytes_too() {
    let max = report(&["-r", "MEM_MAX", "--top=2", BASE]);
    assert!(
        max.contains("\nMEM_MAX: 214,176 allocations, 2.0 MiB largest allocation (2,097,152 bytes); estimates"),
        "{max}"
    );
    assert!(
        max.contains("   100.00     2.0 MiB   100.00    2.0 MiB  list_resize  (/usr/bin/python3.12)\n    50.00     1.0 MiB    50.00    1.0 MiB  scanstring_unicode"),
        "{max}"
    );
    // --value peak: each node's own peak of live bytes (40 MiB for the JSON parser,
    // which holds 4 MiB at the end).
    let peak = report(&["-r", "MEM_LIVE", "--value", "peak", "--top=1", BASE]);
    assert!(
        peak.contains("\nMEM_LIVE: 59,363 blocks, 55.5 MiB in peaks of call-tree nodes (58,195,968 bytes); estimates"),
        "{peak}"
    );
    assert!(
        peak.contains("    72.07    40.0 MiB    72.07   40.0 MiB  scanstring_unicode"),
        "{peak}"
    );
    // IgProf's --top N keeps IgProf's own form, in exact bytes.
    let stacks = report(&["-r", "MEM_LIVE", "--top", "1", BASE]);
    assert!(
        stacks.starts_with("## Entry 1 (8'388'608 bytes)\n#0 pymalloc_alloc\n#1 PyBytes_FromStringAndSize\n#2 Cache.add\n"),
        "{stacks}"
    );
}

#[test]
fn igprof_profile_is_exact_bytes() {
    // No sampling statistics: the figures are exact, and said to be bytes.
    let top = report(&["-r", "MEM_TOTAL", "--top=3", IGPROF]);
    assert_eq!(
        top,
        "\
pyigprof-analyse: igprof-mem.txt: ./prog (pid 1)
MEM_TOTAL: 21 allocations, 6.2 KiB allocated (6,324 bytes)
   self %  self bytes    cum %  cum bytes  function  (file)
    79.06     4.9 KiB    80.65    5.0 KiB  fill()  (/bin/prog)
    16.05      1015 B    16.05     1015 B  make()  (/bin/prog)
     3.16       200 B     3.16      200 B  worker(void*)  (/bin/prog)
"
    );
    let document: Value =
        serde_json::from_str(&report(&["-r", "MEM_LIVE", "--json", IGPROF])).unwrap();
    assert_eq!(document["unit"], "bytes");
    assert_eq!(document["rate_bytes"], 1.0);
    assert_eq!(document["total"]["amount"], 6315);
    assert_eq!(document["total"]["seconds"], Value::Null);
}

#[test]
fn json_sqlite_speedscope_and_flame_graph_say_bytes() {
    let document: Value =
        serde_json::from_str(&report(&["-r", "MEM_LIVE", "--json", BASE])).unwrap();
    assert_eq!(document["counter"], "MEM_LIVE");
    assert_eq!(document["unit"], "bytes");
    assert_eq!(document["rate_bytes"], RATE);
    assert_eq!(document["total"]["amount"], 15 * MIB + MIB / 2);
    assert_eq!(document["total"]["samples"], 59363);
    let first = &document["functions"][0];
    assert_eq!(first["name"], "pymalloc_alloc");
    assert_eq!(first["self"]["amount"], 8 * MIB);
    assert_eq!(first["self"]["seconds"], Value::Null);
    // CPU profiles have no rate.
    let cpu: Value = serde_json::from_str(&report(&["--json", "mixed-base-1.gz"])).unwrap();
    assert_eq!(
        (&cpu["unit"], &cpu["rate_bytes"]),
        (&Value::from("ticks"), &Value::Null)
    );

    let dir = TempDir::new("memory_exports_say_bytes");
    let database = dir.0.join("m.sqlite");
    let speedscope = dir.0.join("m.json");
    let svg = dir.0.join("m.svg");
    let output = run(
        &[
            "-r",
            "MEM_LIVE",
            BASE,
            &format!("--sqlite={}", database.display()),
            "--speedscope",
            speedscope.to_str().unwrap(),
            "--flamegraph",
            svg.to_str().unwrap(),
        ],
        &data(),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let db = rusqlite::Connection::open(&database).unwrap();
    let row: (String, String, i64, Option<f64>, f64) = db
        .query_row(
            "SELECT counter, unit, total_amount, total_seconds, rate_bytes FROM profile",
            [],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(
        row,
        (
            "MEM_LIVE".into(),
            "bytes".into(),
            15 * MIB + MIB / 2,
            None,
            RATE
        )
    );
    let leak: i64 = db
        .query_row(
            "SELECT cum_amount FROM summary WHERE name = 'Cache.add'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(leak, 8 * MIB + MIB / 2);

    let file: Value = serde_json::from_slice(&fs::read(&speedscope).unwrap()).unwrap();
    let profile = &file["profiles"][0];
    assert_eq!(profile["unit"], "bytes");
    assert_eq!(profile["name"], "MEM_LIVE");
    assert_eq!(profile["endValue"], (15 * MIB + MIB / 2) as f64);

    // inferno's tooltips: "<frame> (<n> bytes, <share>%)".
    let svg = fs::read_to_string(&svg).unwrap();
    assert!(
        svg.contains("worker_main [libworker.so] (1,048,576 bytes, 6.45%)"),
        "{svg}"
    );
}

use common::pprof as proto;

#[test]
fn pprof_sample_types_are_go_heap_profiles() {
    use prost::Message;
    use std::io::Read;

    let dir = TempDir::new("pprof_sample_types_are_go_heap_profiles");
    let cases = [
        (
            "MEM_TOTAL",
            BASE,
            ["alloc_objects", "alloc_space"],
            214_176,
            138_936_320,
            524288,
        ),
        (
            "MEM_LIVE",
            BASE,
            ["inuse_objects", "inuse_space"],
            59_363,
            16_252_928,
            524288,
        ),
        (
            "MEM_LIVE_PEAK",
            BASE,
            ["inuse_objects", "inuse_space"],
            37_908,
            58_195_968,
            524288,
        ),
        // Exact: every allocation recorded, period 1.
        (
            "MEM_TOTAL",
            IGPROF,
            ["alloc_objects", "alloc_space"],
            21,
            6324,
            1,
        ),
    ];
    for (counter, file, names, objects, bytes, period) in cases {
        let path = dir.0.join(format!("{counter}.pb.gz"));
        report(&["-r", counter, file, "--pprof", path.to_str().unwrap()]);
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&fs::read(&path).unwrap()[..])
            .read_to_end(&mut plain)
            .unwrap();
        let profile = proto::Profile::decode(&plain[..]).unwrap();
        let text = |index: i64| profile.string_table[index as usize].as_str();
        let types: Vec<(&str, &str)> = profile
            .sample_type
            .iter()
            .map(|t| (text(t.r#type), text(t.unit)))
            .collect();
        assert_eq!(
            types,
            [(names[0], "count"), (names[1], "bytes")],
            "{counter}"
        );
        let period_type = profile.period_type.as_ref().unwrap();
        assert_eq!(
            (
                text(period_type.r#type),
                text(period_type.unit),
                profile.period
            ),
            ("space", "bytes", period),
            "{counter}"
        );
        assert_eq!(text(profile.default_sample_type), names[1]);
        let sum = |index: usize| -> i64 { profile.sample.iter().map(|s| s.value[index]).sum() };
        assert_eq!((sum(0), sum(1)), (objects, bytes), "{counter} {file}");
    }
    // MEM_MAX: a bytes type too.
    let path = dir.0.join("max.pb.gz");
    report(&["-r", "MEM_MAX", BASE, "--pprof", path.to_str().unwrap()]);
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(&fs::read(&path).unwrap()[..])
        .read_to_end(&mut plain)
        .unwrap();
    let profile = proto::Profile::decode(&plain[..]).unwrap();
    let text = |index: i64| profile.string_table[index as usize].as_str();
    let kind = &profile.sample_type[1];
    assert_eq!(
        (text(kind.r#type), text(kind.unit)),
        ("max_alloc_space", "bytes")
    );
}

#[test]
fn callgrind_events_are_bytes() {
    let dir = TempDir::new("callgrind_events_are_bytes");
    let path = dir.0.join("callgrind.out");
    report(&[
        "-r",
        "MEM_TOTAL",
        BASE,
        "--callgrind",
        path.to_str().unwrap(),
    ]);
    let text = fs::read_to_string(&path).unwrap();
    assert!(
        text.contains(
            "event: Bytes : MEM_TOTAL bytes allocated, estimates from sampling every 512.0 KiB allocated on average (493 allocations recorded)\n\
             event: Allocations : allocations\n\
             events: Bytes Allocations\n\
             summary: 138936320 214176\n"
        ),
        "{text}"
    );
}

/// The rows of a diff's text table: the 15 cells of each (bytes have a space in them:
/// cells are separated by two spaces or more) and its function.
fn diff_rows(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .skip_while(|line| !line.trim_start().starts_with("base %"))
        .skip(1)
        .take_while(|line| !line.starts_with("result:") && !line.starts_with('('))
        .map(|line| {
            let parts: Vec<&str> = line
                .split("  ")
                .map(str::trim)
                .filter(|part| !part.is_empty())
                .collect();
            let cells = parts[..15].iter().map(|cell| cell.to_string()).collect();
            (cells, parts[15..].join("  "))
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

#[test]
fn a_leak_of_64_mib_is_significant_and_jitter_is_not() {
    // The cache grows by 64 MiB: at 512 KiB a sample, 16 of 31 samples → 144 of 159.
    let output = run(
        &[
            "--diff",
            BASE,
            LEAK,
            "-r",
            "MEM_LIVE",
            "--fail-on-regression",
            "5",
        ],
        &data(),
    );
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}{}", stderr(&output));
    assert!(
        text.contains("\ntest: two-proportion z-test (pooled) on each function's self bytes and on its cumulative bytes, counted in samples of R bytes (R = 512.0 KiB in base, 512.0 KiB in new; n = all bytes of each profile / R), Bonferroni correction over 19 tests of 14 functions, alpha 0.01: significant when |z| >= 3.47\n"),
        "{text}"
    );
    assert!(
        text.contains("\nnew: pyigprof-mem-leak.txt: python3 app.py (pid 8002): MEM_LIVE: 190,435 blocks, 79.5 MiB live (83,361,792 bytes); estimates"),
        "{text}"
    );
    assert!(
        text.contains("  base %  new %  change  base bytes  new bytes      z  p (adj.)  base cum %  new cum %  cum change  base cum bytes  new cum bytes  cum z  cum p (adj.)  signif.  function  (file)\n"),
        "{text}"
    );
    let rows = diff_rows(&text);
    let malloc = cells(&rows, "pymalloc_alloc");
    assert_eq!(
        malloc,
        [
            "51.61", "90.57", "+38.95", "8.0 MiB", "72.0 MiB", "+5.44", "1.0e-6", "51.61", "90.57",
            "+38.95", "8.0 MiB", "72.0 MiB", "+5.44", "1.0e-6", "both"
        ]
    );
    assert_eq!(
        format!("{:+.2}", z(16.0, 31.0, 144.0, 159.0)),
        malloc[5],
        "z on bytes / R"
    );
    // Cache.add: its own 512 KiB share fell; its cumulative share is the leak.
    let cache = cells(&rows, "Cache.add");
    assert_eq!(
        [&cache[10], &cache[11], &cache[14]],
        ["8.5 MiB", "72.5 MiB", "cum"]
    );
    assert!(
        text.ends_with("Cache.add (/work/app.py:20) +36.36 points cumulative (+64.0 MiB)\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "result: REGRESSION: 3 function(s) grew significantly by more than 5.00 points: "
        ),
        "{text}"
    );

    // A second run of the same program: ±512 KiB here and there, nothing significant.
    let output = run(
        &[
            "--diff",
            BASE,
            JITTER,
            "-r",
            "MEM_LIVE",
            "--fail-on-regression",
            "0",
        ],
        &data(),
    );
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}{}", stderr(&output));
    let rows = diff_rows(&text);
    assert!(rows.iter().all(|(cells, _)| cells[14] == "no"), "{text}");
    let cache = cells(&rows, "Cache.add");
    assert_eq!([&cache[10], &cache[11]], ["8.5 MiB", "9.0 MiB"]);
    assert!(
        text.ends_with("result: OK: no function's self or cumulative share grew significantly by more than 0.00 points (0 significant changes)\n"),
        "{text}"
    );

    // Markdown: the totals in bytes.
    let markdown = report(&["--diff", BASE, LEAK, "-r", "MEM_LIVE", "--markdown"]);
    assert!(
        markdown.contains("| profile | files and program | blocks | bytes |\n|---|---|--:|--:|\n| base | `pyigprof-mem-base.txt: python3 app.py (pid 8000)` | 59363 | 15.5 MiB |\n"),
        "{markdown}"
    );
    assert!(
        markdown.contains("| base bytes | new bytes |"),
        "{markdown}"
    );
}

#[test]
fn exact_profiles_are_compared_by_the_size_of_the_change() {
    // IgProf's profile, and the same with fill() allocating 5000 bytes more.
    let dir = TempDir::new("exact_profiles_are_compared");
    let base = fs::read_to_string(data().join(IGPROF)).unwrap();
    let grown = base.replace(
        "C4 FN4+0 V0:(a,1388,3e8) V1:(a,1388,3e8)",
        "C4 FN4+0 V0:(14,2710,3e8) V1:(14,2710,3e8)",
    );
    assert_ne!(base, grown);
    dir.write("base.txt", base.as_bytes());
    dir.write("grown.txt", grown.as_bytes());
    let output = run(
        &[
            "--diff",
            "base.txt",
            "grown.txt",
            "-r",
            "MEM_LIVE",
            "--fail-on-regression",
            "5",
        ],
        &dir.0,
    );
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}{}", stderr(&output));
    assert!(
        text.contains("\ntest: none (both profiles record every allocation: exact figures, no sampling noise): a share is significant when it changed by at least 1.00 points (--min-change); 7 functions compared\n"),
        "{text}"
    );
    // fill(): 79.18 % → 88.38 % of the live bytes, no z or p; helper() changed by less
    // than a point.
    let rows = diff_rows(&text);
    assert_eq!(
        cells(&rows, "fill()"),
        [
            "79.18", "88.38", "+9.20", "4.9 KiB", "9.8 KiB", "-", "-", "80.76", "89.26", "+8.50",
            "5.0 KiB", "9.9 KiB", "-", "-", "both"
        ]
    );
    assert_eq!(cells(&rows, "helper()")[14], "no");
    assert!(
        text.ends_with("result: REGRESSION: 1 function(s) grew significantly by more than 5.00 points: fill()  (/bin/prog) +9.20 points self (+4.9 KiB), +8.50 points cumulative (+4.9 KiB)\n"),
        "{text}"
    );
    // A larger threshold: nothing is significant.
    let output = run(
        &[
            "--diff",
            "base.txt",
            "grown.txt",
            "-r",
            "MEM_LIVE",
            "--min-change",
            "10",
            "--fail-on-regression",
            "5",
        ],
        &dir.0,
    );
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    assert!(stdout(&output).contains("result: OK"));
    // The same profile twice: no change.
    assert!(report(&["--diff", IGPROF, IGPROF, "-r", "MEM_TOTAL"])
        .ends_with("result: no significant change\n"));
    // MEM_MAX is a maximum: compared without a test whatever the rate.
    let max = report(&["--diff", BASE, LEAK, "-r", "MEM_MAX"]);
    assert!(
        max.contains("\ntest: none (MEM_MAX is the largest single allocation, not a sum of samples): a share of each profile's largest allocation is significant when it changed by at least 1.00 points (--min-change); "),
        "{max}"
    );
}

#[test]
fn bad_memory_statistics_are_one_line_errors() {
    let dir = TempDir::new("bad_memory_statistics");
    let base = fs::read_to_string(data().join(BASE)).unwrap();
    dir.write(
        "bad.txt",
        base.replace("rate_bytes=524288", "rate_bytes=half")
            .as_bytes(),
    );
    assert_fails(
        &run(&["-r", "MEM_LIVE", "bad.txt"], &dir.0),
        "pyigprof-analyse: bad.txt: memory.rate_bytes is \"half\": expected a number of bytes from 1\n",
    );
    assert_fails(
        &run(&["--diff", "bad.txt", "bad.txt", "-r", "MEM_LIVE"], &dir.0),
        "pyigprof-analyse: bad.txt: memory.rate_bytes is \"half\": expected a number of bytes from 1\n",
    );
    // Not a memory counter: the statistics are not read.
    let output = run(&["-r", "PERF_TICKS", "bad.txt"], &dir.0);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

/// A sampled profile's `MEM_TOTAL` header gives the exact bytes allocated that the program
/// counted apart from its samples (`allocated_bytes`, which the summary line at exit
/// gives) beside the estimate, and says which is which (issue 58: `237.9 MiB allocated`
/// at exit and `248.1 MiB allocated … estimates` in the report looked like a
/// contradiction).
#[test]
fn the_exact_bytes_allocated_are_given_beside_the_estimate() {
    let dir = TempDir::new("the_exact_bytes_allocated_are_given_beside_the_estimate");
    let text = fs::read_to_string(data().join(BASE)).unwrap();
    let with_exact = text.replacen("sampled=493", "sampled=493 allocated_bytes=142606336", 1);
    assert_ne!(text, with_exact, "{BASE} has no `sampled=493`");
    dir.write("exact.txt", with_exact.as_bytes());
    let output = run(&["-r", "MEM_TOTAL", "--top=1", "exact.txt"], &dir.0);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("\nMEM_TOTAL: 214,176 allocations, 132.5 MiB allocated (138,936,320 bytes); estimates from sampling every 512.0 KiB allocated on average (493 allocations recorded); exactly 136.0 MiB allocated as counted apart from the samples (142,606,336 bytes); "),
        "{}",
        stdout(&output)
    );
    // MEM_LIVE's figures are all estimates: no exact figure is claimed for them.
    let live = stdout(&run(&["-r", "MEM_LIVE", "--top=1", "exact.txt"], &dir.0));
    assert!(!live.contains("exactly"), "{live}");
}
