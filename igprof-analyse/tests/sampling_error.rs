//! The sampling error of the shares (issue 20): `--top`, `--lines`, `--tree` and `--text`
//! give each row's samples and the 95 % confidence interval of its share, the total line
//! says how precise a share of 10 % is, and `--json` and `--sqlite` carry the same
//! figures; exact memory profiles have none. Run as a user runs them on synthetic dumps.
//!
//! Every expected interval was computed by hand (Python, z = 1.959963984540054) with
//! Wilson's score interval of k samples among n:
//!
//! ```text
//! centre = (k/n + z²/2n) / (1 + z²/n)
//! half-width = z / (1 + z²/n) × √((k/n)(1 − k/n)/n + z²/4n²)
//! ```
//!
//! | k of n = 100 | interval (%) |
//! |---|---|
//! | 0 | 0.0000 – 3.6993 |
//! | 1 | 0.1767 – 5.4486 |
//! | 10 | 5.5229 – 17.4366 |
//! | 39 | 30.0169 – 48.7970 |
//! | 50 | 40.3832 – 59.6168 |
//! | 90 | 82.5634 – 94.4771 |
//! | 100 | 96.3007 – 100 |
//!
//! and 200 of 2,000: 8.7609 – 11.3924 %, a half-width of 1.316 points.

mod common;

use common::{assert_prints, run, stdout, TempDir};
use serde_json::Value;

/// `python3 app.py`: `main` (/work/app.py, line 1) calls `hot` (line 0x10 = 16), `mid`
/// (32), `warm` (48) and `rare` (64), which take 50, 39, 10 and 1 samples of one tick:
/// 100 samples, 100 ticks.
const APP: &str = "\
P=(HEX ID=1 N=(python3 app.py) T=0.004000)
C1 FN0=(F0=(/work/app.py)+1 N=(main))+1
C2 FN1=(F0+10 N=(hot))+0 V0=(PERF_TICKS):(32,32,32)
C2 FN2=(F0+20 N=(mid))+0 V0:(27,27,27)
C2 FN3=(F0+30 N=(warm))+0 V0:(a,a,a)
C2 FN4=(F0+40 N=(rare))+0 V0:(1,1,1)
";

/// `--top` on [`APP`]: each share with its interval (the table in the module's
/// documentation: warm's 10 of 100 samples is [5.5 %, 17.4 %], main's 0 self and 100
/// cumulative [0, 3.7 %] and [96.3 %, 100 %]) and its samples; the total line gives the
/// interval of a share of 10 % among 100 samples, the same 5.5-17.4 %.
const APP_TOP: &str = "\
pyigprof-analyse: app.txt: python3 app.py (pid 1)
PERF_TICKS: 100 samples, 100 ticks of 4.000 ms = 0.400 s; a 10 % share is 5.5-17.4 % (95 %)
   self %    self s    cum %     cum s  self 95% CI    cum 95% CI  self samples  cum samples  function  (file)
    50.00     0.200    50.00     0.200  [40.4-59.6]   [40.4-59.6]            50           50  hot (/work/app.py:16)
    39.00     0.156    39.00     0.156  [30.0-48.8]   [30.0-48.8]            39           39  mid (/work/app.py:32)
    10.00     0.040    10.00     0.040   [5.5-17.4]    [5.5-17.4]            10           10  warm (/work/app.py:48)
     1.00     0.004     1.00     0.004    [0.2-5.4]     [0.2-5.4]             1            1  rare (/work/app.py:64)
     0.00     0.000   100.00     0.400    [0.0-3.7]  [96.3-100.0]             0          100  main (/work/app.py:1)
";

/// A directory holding [`APP`] as `app.txt`.
fn app_dir(test: &str) -> TempDir {
    let dir = TempDir::new(test);
    dir.write("app.txt", APP.as_bytes());
    dir
}

/// What a successful run prints.
fn report(args: &[&str], dir: &TempDir) -> String {
    let output = run(args, &dir.0);
    assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
    stdout(&output)
}

#[track_caller]
fn close(actual: &Value, expected: f64) {
    let actual = actual
        .as_f64()
        .unwrap_or_else(|| panic!("{actual} is no number"));
    assert!((actual - expected).abs() < 1e-4, "{actual} vs {expected}");
}

#[test]
fn top_gives_each_share_its_interval_and_samples() {
    let dir = app_dir("top_gives_each_share_its_interval_and_samples");
    assert_prints(&run(&["app.txt"], &dir.0), APP_TOP);
    // --calls adds no second samples column; --paths comes after the samples.
    let calls = report(&["--top=1", "--calls", "--paths", "app.txt"], &dir);
    assert_eq!(
        calls.lines().skip(2).collect::<Vec<_>>(),
        [
            "   self %    self s    cum %     cum s  self 95% CI   cum 95% CI  self samples  cum samples  paths  function  (file)",
            "    50.00     0.200    50.00     0.200  [40.4-59.6]  [40.4-59.6]            50           50      1  hot (/work/app.py:16)",
        ]
    );
}

#[test]
fn lines_tree_and_text_give_the_same_intervals() {
    let dir = app_dir("lines_tree_and_text_give_the_same_intervals");
    let lines = report(&["--lines=3", "app.txt"], &dir);
    assert_eq!(
        lines.lines().skip(2).collect::<Vec<_>>(),
        [
            "   self %    self s    cum %     cum s  self 95% CI   cum 95% CI  self samples  cum samples  line  (function)",
            "    50.00     0.200    50.00     0.200  [40.4-59.6]  [40.4-59.6]            50           50  /work/app.py:16  (hot)",
            "    39.00     0.156    39.00     0.156  [30.0-48.8]  [30.0-48.8]            39           39  /work/app.py:32  (mid)",
            "    10.00     0.040    10.00     0.040   [5.5-17.4]   [5.5-17.4]            10           10  /work/app.py:48  (warm)",
        ]
    );
    let tree = report(&["--tree", "app.txt"], &dir);
    assert_eq!(
        tree.lines().skip(2).take(2).collect::<Vec<_>>(),
        [
            "    cum %     cum s   self %    self s    cum 95% CI  self 95% CI  cum samples  self samples  function",
            "   100.00     0.400     0.00     0.000  [96.3-100.0]    [0.0-3.7]          100             0  main (/work/app.py:1)",
        ]
    );
    assert!(
        tree.contains("\n    10.00     0.040    10.00     0.040    [5.5-17.4]   [5.5-17.4]           10            10    warm (/work/app.py:48)\n"),
        "{tree}"
    );
    // IgProf's flat profiles: the share's interval and its samples after the amount.
    let text = report(&["--text", "app.txt"], &dir);
    assert!(
        text.contains("\n% total      Total        95% CI  Samples  Function\n 100.00      0.400  [96.3-100.0]      100  main (/work/app.py:1) [1]\n"),
        "{text}"
    );
    assert!(
        text.contains("\n% total       Self        95% CI  Samples  Function\n  50.00      0.200   [40.4-59.6]       50  hot (/work/app.py:16) [2]\n"),
        "{text}"
    );
    assert!(
        text.contains("\n   1.00      0.004     [0.2-5.4]        1  rare (/work/app.py:64) [5]\n"),
        "{text}"
    );
}

#[test]
fn the_total_line_gives_the_error_of_a_tenth() {
    // 2,000 samples: a share of 10 % is 8.8-11.4 %, ±1.3 points (from 1,000 samples on
    // the line gives the half-width; below, the interval itself, as for APP).
    let dir = TempDir::new("the_total_line_gives_the_error_of_a_tenth");
    dir.write(
        "big.txt",
        b"P=(HEX ID=3 N=(python3 big.py) T=0.004000)
C1 FN0=(F0=(/work/big.py)+1 N=(f))+0 V0=(PERF_TICKS):(c8,c8,c8)
C1 FN1=(F0+5 N=(g))+0 V0:(708,708,708)
",
    );
    let top = report(&["big.txt"], &dir);
    let lines: Vec<&str> = top.lines().collect();
    assert_eq!(
        lines[1],
        "PERF_TICKS: 2000 samples, 2000 ticks of 4.000 ms = 8.000 s; a 10 % share is ±1.3 points (95 %)"
    );
    assert!(
        lines[4].starts_with("    10.00     0.800    10.00     0.800   [8.8-11.4]   [8.8-11.4]           200          200  f "),
        "{top}"
    );
}

#[test]
fn weighted_samples_keep_their_relative_precision() {
    // `double`: 20 samples of 2 ticks each (40 ticks), `single`: 80 of 1 tick; 100
    // samples, 120 ticks. double's share, 33.33 % of the ticks, has the relative
    // precision of its 20 samples of 100: Wilson's [13.3367 %, 28.8829 %] times
    // (40/120) / (20/100) = 5/3, [22.2 %, 48.1 %]; single's 80 of 100, [71.1171 %,
    // 86.6633 %] times (80/120) / (80/100) = 5/6, [59.3 %, 72.2 %].
    let dir = TempDir::new("weighted_samples_keep_their_relative_precision");
    dir.write(
        "w.txt",
        b"P=(HEX ID=4 N=(python3 w.py) T=0.004000)
C1 FN0=(F0=(/work/w.py)+1 N=(double))+0 V0=(PERF_TICKS):(14,28,28)
C1 FN1=(F0+5 N=(single))+0 V0:(50,50,50)
",
    );
    assert_eq!(
        report(&["w.txt"], &dir)
            .lines()
            .skip(1)
            .collect::<Vec<_>>(),
        [
            "PERF_TICKS: 100 samples, 120 ticks of 4.000 ms = 0.480 s; a 10 % share is 5.5-17.4 % (95 %)",
            "   self %    self s    cum %     cum s  self 95% CI   cum 95% CI  self samples  cum samples  function  (file)",
            "    66.67     0.320    66.67     0.320  [59.3-72.2]  [59.3-72.2]            80           80  single (/work/w.py:5)",
            "    33.33     0.160    33.33     0.160  [22.2-48.1]  [22.2-48.1]            20           20  double (/work/w.py:1)",
        ]
    );
}

#[test]
fn json_and_sqlite_carry_the_intervals() {
    let dir = app_dir("json_and_sqlite_carry_the_intervals");
    let document: Value = serde_json::from_str(&report(&["--json", "app.txt"], &dir)).unwrap();
    assert_eq!(document["total"]["samples"], 100);
    assert_eq!(document["total"]["sample_size"], 100.0);
    let function = |name: &str| {
        document["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .clone()
    };
    let warm = function("warm");
    assert_eq!(
        (&warm["self_samples"], &warm["cumulative_samples"]),
        (&10.into(), &10.into())
    );
    close(&warm["self"]["ci95"]["low"], 5.5229);
    close(&warm["self"]["ci95"]["high"], 17.4366);
    let main = function("main");
    assert_eq!(
        (&main["self_samples"], &main["cumulative_samples"]),
        (&0.into(), &100.into())
    );
    close(&main["self"]["ci95"]["low"], 0.0);
    close(&main["self"]["ci95"]["high"], 3.6993);
    close(&main["cumulative"]["ci95"]["low"], 96.3007);
    close(&main["cumulative"]["ci95"]["high"], 100.0);
    // The tree's nodes too: main's, first, then hot's.
    let tree = document["tree"].as_array().unwrap();
    assert_eq!(tree[0]["cumulative_samples"], 100);
    close(&tree[0]["cumulative"]["ci95"]["low"], 96.3007);
    assert_eq!(tree[1]["cumulative_samples"], 50);
    close(&tree[1]["self"]["ci95"]["low"], 40.3832);
    close(&tree[1]["self"]["ci95"]["high"], 59.6168);

    let output = run(&["--sqlite=app.sqlite", "app.txt"], &dir.0);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let db = rusqlite::Connection::open(dir.0.join("app.sqlite")).unwrap();
    let n: f64 = db
        .query_row("SELECT sample_size FROM profile", [], |row| row.get(0))
        .unwrap();
    assert_eq!(n, 100.0);
    let (samples, low, high, cum_low, cum_high): (i64, f64, f64, f64, f64) = db
        .query_row(
            "SELECT self_samples, self_ci_low, self_ci_high, cum_ci_low, cum_ci_high FROM summary WHERE name = 'mid'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)),
        )
        .unwrap();
    assert_eq!(samples, 39);
    for (actual, expected) in [
        (low, 30.0169),
        (high, 48.7970),
        (cum_low, 30.0169),
        (cum_high, 48.7970),
    ] {
        assert!((actual - expected).abs() < 1e-4, "{actual} vs {expected}");
    }
    let (node_low, node_high): (f64, f64) = db
        .query_row(
            "SELECT n.cum_ci_low, n.cum_ci_high FROM nodes n JOIN functions f ON f.id = n.function_id WHERE f.name = 'main'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert!(
        (node_low - 96.3007).abs() < 1e-4 && node_high == 100.0,
        "{node_low} {node_high}"
    );
    // A call's share: main → rare, 1 sample of 100.
    let (call_low, call_high): (f64, f64) = db
        .query_row(
            "SELECT c.ci_low, c.ci_high FROM calls c JOIN functions f ON f.id = c.callee_id WHERE f.name = 'rare'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert!((call_low - 0.1767).abs() < 1e-4 && (call_high - 5.4486).abs() < 1e-4);
}

/// A pyigprof memory dump of `python3 mem.py` recording allocations every `rate` bytes:
/// `build` keeps 10 blocks of 10,000 bytes, `cache` 90 of 90,000.
fn memory(rate: u32) -> String {
    format!(
        "\
P=(HEX ID=2 N=(python3 mem.py) T=0.004000)
C1 FN0=(F0=([pyigprof])+0 N=(#pyigprof stats samples=0))+0 V0=(PERF_TICKS):(0,0,0)
C1 FN1=(F0+0 N=(#pyigprof memory rate_bytes={rate} sampled=100))+0
C1 FN2=(F1=(/work/mem.py)+1 N=(<module>))+1
C2 FN3=(F1+a N=(build))+0 V1=(MEM_LIVE):(a,2710,2710)
C2 FN4=(F1+14 N=(cache))+0 V1:(5a,15f90,15f90)
"
    )
}

#[test]
fn sampled_memory_counts_samples_of_r_bytes() {
    // 100,000 bytes sampled every 1,000: 100 samples; build's 10,000 bytes are 10 of
    // them, [5.5 %, 17.4 %]; cache's 90, [82.6 %, 94.5 %].
    let dir = TempDir::new("sampled_memory_counts_samples_of_r_bytes");
    dir.write("mem.txt", memory(1000).as_bytes());
    assert_eq!(
        report(&["-r", "MEM_LIVE", "mem.txt"], &dir)
            .lines()
            .skip(1)
            .collect::<Vec<_>>(),
        [
            "MEM_LIVE: 100 blocks, 97.7 KiB live (100,000 bytes); estimates from sampling every 1000 B allocated on average (100 allocations recorded); as 100 samples of 1000 B, a 10 % share is 5.5-17.4 % (95 %)",
            "   self %  self bytes    cum %  cum bytes  self 95% CI    cum 95% CI  self blocks  cum blocks  function  (file)",
            "    90.00    87.9 KiB    90.00   87.9 KiB  [82.6-94.5]   [82.6-94.5]           90          90  cache (/work/mem.py:20)",
            "    10.00     9.8 KiB    10.00    9.8 KiB   [5.5-17.4]    [5.5-17.4]           10          10  build (/work/mem.py:10)",
            "     0.00         0 B   100.00   97.7 KiB    [0.0-3.7]  [96.3-100.0]            0         100  <module> (/work/mem.py:1)",
        ]
    );
    let document: Value =
        serde_json::from_str(&report(&["-r", "MEM_LIVE", "--json", "mem.txt"], &dir)).unwrap();
    assert_eq!(document["total"]["sample_size"], 100.0);
    let build = &document["functions"][1];
    assert_eq!(build["name"], "build");
    close(&build["self"]["ci95"]["low"], 5.5229);
    close(&build["self"]["ci95"]["high"], 17.4366);
}

#[test]
fn exact_memory_profiles_have_no_interval() {
    // Every allocation recorded (rate 1, or IgProf's dumps without the statistic): the
    // shares are exact; neither the total line nor the table gives an interval.
    let dir = TempDir::new("exact_memory_profiles_have_no_interval");
    dir.write("exact.txt", memory(1).as_bytes());
    dir.write(
        "igprof.txt",
        b"P=(ID=7 N=(app) T=0.010000)
C1 FN0=(F0=(app)+100 N=(main))+5 V0=(MEM_TOTAL):(1,100,100)
C2 FN1=(F0+200 N=(alloc))+0 V0:(2,722,700)
",
    );
    assert_eq!(
        report(&["-r", "MEM_LIVE", "exact.txt"], &dir),
        "\
pyigprof-analyse: exact.txt: python3 mem.py (pid 2)
MEM_LIVE: 100 blocks, 97.7 KiB live (100,000 bytes)
   self %  self bytes    cum %  cum bytes  function  (file)
    90.00    87.9 KiB    90.00   87.9 KiB  cache (/work/mem.py:20)
    10.00     9.8 KiB    10.00    9.8 KiB  build (/work/mem.py:10)
     0.00         0 B   100.00   97.7 KiB  <module> (/work/mem.py:1)
"
    );
    assert_eq!(
        report(&["-r", "MEM_TOTAL", "igprof.txt"], &dir),
        "\
pyigprof-analyse: igprof.txt: app (pid 7)
MEM_TOTAL: 3 allocations, 822 B allocated
   self %  self bytes    cum %  cum bytes  function  (file)
    87.83       722 B    87.83      722 B  alloc  (app)
    12.17       100 B   100.00      822 B  main  (app)
"
    );
    // --calls still adds the counts, without intervals.
    assert!(report(&["-r", "MEM_LIVE", "--calls", "exact.txt"], &dir)
        .contains("   self %  self bytes    cum %  cum bytes  self blocks  cum blocks  function  (file)\n"));
    for args in [
        ["--tree", "exact.txt"],
        ["--lines", "exact.txt"],
        ["--text", "exact.txt"],
    ] {
        let text = report(&[&["-r", "MEM_LIVE"][..], &args[..]].concat(), &dir);
        assert!(
            !text.contains("95%") && !text.contains("share is"),
            "{text}"
        );
    }
    // JSON and SQLite: null.
    let document: Value =
        serde_json::from_str(&report(&["-r", "MEM_LIVE", "--json", "exact.txt"], &dir)).unwrap();
    assert_eq!(document["rate_bytes"], 1.0);
    assert!(document["total"]["sample_size"].is_null(), "{document}");
    assert!(
        document["functions"][0]["self"]["ci95"].is_null(),
        "{document}"
    );
    assert!(
        document["tree"][0]["cumulative"]["ci95"].is_null(),
        "{document}"
    );
    let output = run(
        &["-r", "MEM_LIVE", "--sqlite=exact.sqlite", "exact.txt"],
        &dir.0,
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let db = rusqlite::Connection::open(dir.0.join("exact.sqlite")).unwrap();
    let nulls: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM function_costs WHERE self_ci_low IS NULL AND cum_ci_high IS NULL",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(nulls, 3);
    let n: Option<f64> = db
        .query_row("SELECT sample_size FROM profile", [], |row| row.get(0))
        .unwrap();
    assert_eq!(n, None);
    // The largest allocation is a maximum, not a sum of samples: no interval either,
    // even when sampled.
    dir.write(
        "sampled.txt",
        memory(1000).replace("MEM_LIVE", "MEM_MAX").as_bytes(),
    );
    let max = report(&["-r", "MEM_MAX", "sampled.txt"], &dir);
    assert!(!max.contains("95%") && !max.contains("share is"), "{max}");
}
