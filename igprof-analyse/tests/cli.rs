//! Runs the `pyigprof-analyse` binary on hand-written dumps (docs/dump-format.md) and
//! checks what a user sees: the report on stdout, errors on stderr, the exit status.
//! The dumps and reports that unit tests check too are files in tests/data/.

mod common;

use common::{assert_fails, assert_prints, gzip, run, stderr, stdout, TempDir};

/// Python `fib` recursing three deep under `<module>`, calling into libz; a C++ function;
/// a second thread tree rooted in a Rust function. Ticks of 4 ms. The unit tests of
/// src/report/top.rs read the same file.
///
/// By hand (amounts are ticks; total 3+1+4+8+4+4 = 24 ticks = 0.096 s, 13 samples):
/// - fib: self 3+1+4 = 8 (33.33 %, 0.032 s); cumulative = the outermost fib subtree
///   only, 8 + 8 (deflate_slow) = 16 (66.67 %, 0.064 s), not 16 + 13 + 12;
/// - deflate_slow: 8 / 8; foo::bar(): 4 / 4; deflate: 4 / 4;
/// - <module> and __libc_start_main: 0 / 20 (83.33 %); std::rt::lang_start: 0 / 4.
const RECURSIVE: &[u8] = include_bytes!("data/recursive-hex.txt");

/// The default `--top` report of `RECURSIVE` read as `rec.txt`; src/report/top.rs
/// checks the same text.
const RECURSIVE_TOP: &str = include_str!("data/recursive-top.txt");

#[test]
fn top_of_recursive_hex_dump() {
    let dir = TempDir::new("top_of_recursive_hex_dump");
    dir.write("rec.txt", RECURSIVE);
    assert_prints(&run(&["rec.txt"], &dir.0), RECURSIVE_TOP);
}

#[test]
fn top_flag_without_value_then_limit_and_cumulative_order() {
    let dir = TempDir::new("top_flag_without_value");
    dir.write("rec.gz", &gzip(RECURSIVE));
    // `--top` takes its value only with "=", so the profile is not taken for N.
    let plain = run(&["--top", "rec.gz"], &dir.0);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    assert_eq!(stdout(&plain).lines().count(), 3 + 7);

    let output = run(
        &[
            "--top=3",
            "--order",
            "cumulative",
            "-r",
            "PERF_TICKS",
            "rec.gz",
        ],
        &dir.0,
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "\
pyigprof-analyse: rec.gz: python3 rec.py (pid 1234)
PERF_TICKS: 13 samples, 24 ticks of 4.000 ms = 0.096 s; a 10 % share is 2.1-36.1 % (95 %)
   self %    self s    cum %     cum s  self 95% CI   cum 95% CI  self samples  cum samples  function  (file)
     0.00     0.000    83.33     0.080   [0.0-22.8]  [60.2-89.0]             0           12  <module> (/work/rec.py:1)
     0.00     0.000    83.33     0.080   [0.0-22.8]  [60.2-89.0]             0           12  __libc_start_main  (/usr/lib/libc.so.6)
    33.33     0.032    66.67     0.064  [16.8-51.2]  [43.1-79.6]             6           10  fib (/work/rec.py:10)
"
    );
}

#[test]
fn plain_and_gzip_profiles_merge() {
    let dir = TempDir::new("plain_and_gzip_profiles_merge");
    dir.write("a.txt", RECURSIVE);
    // Named .txt although compressed: gzip is recognised by its content.
    dir.write("b.txt", &gzip(RECURSIVE));
    let output = run(&["--top=2", "a.txt", "b.txt"], &dir.0);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // Same percentages, twice the ticks and seconds.
    assert_eq!(
        stdout(&output),
        "\
pyigprof-analyse: a.txt, b.txt: python3 rec.py (pid 1234)
PERF_TICKS: 26 samples, 48 ticks of 4.000 ms = 0.192 s; a 10 % share is 3.2-27.1 % (95 %)
   self %    self s    cum %     cum s  self 95% CI   cum 95% CI  self samples  cum samples  function  (file)
    33.33     0.064    66.67     0.128  [20.8-46.6]  [50.2-77.1]            12           20  fib (/work/rec.py:10)
    33.33     0.064    33.33     0.064  [17.9-54.2]  [17.9-54.2]             8            8  deflate_slow  (/usr/lib/libz.so.1)
"
    );
}

/// The example of IgProf's doc/dump-format: the older decimal variant, FN5 recursing.
/// The unit tests of src/parse.rs read the same file.
const IGPROF_DECIMAL: &[u8] = include_bytes!("data/igprof-ls-decimal.txt");

#[test]
fn top_of_igprof_decimal_dump() {
    let dir = TempDir::new("top_of_igprof_decimal_dump");
    dir.write("igprof.ls.txt", IGPROF_DECIMAL);
    let output = run(&["igprof.ls.txt"], &dir.0);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // 2 ticks of 10 ms. strftime has one tick itself and one below it (under FN2+8740);
    // the recursive @?0x13adab counts its tick once.
    assert_eq!(
        stdout(&output),
        "\
pyigprof-analyse: igprof.ls.txt: ls (pid 32365)
PERF_TICKS: 2 samples, 2 ticks of 10.000 ms = 0.020 s; a 10 % share is 0.5-72.1 % (95 %)
   self %    self s    cum %     cum s  self 95% CI    cum 95% CI  self samples  cum samples  function  (file)
    50.00     0.010   100.00     0.020   [9.5-90.5]  [34.2-100.0]             1            2  strftime  (ls)
    50.00     0.010    50.00     0.010   [9.5-90.5]    [9.5-90.5]             1            1  @?0x804c533  (ls)
     0.00     0.000   100.00     0.020   [0.0-65.8]  [34.2-100.0]             0            2  __libc_start_main  (/lib/tls/libc.so.6)
     0.00     0.000   100.00     0.020   [0.0-65.8]  [34.2-100.0]             0            2  strcoll  (ls)
     0.00     0.000    50.00     0.010   [0.0-65.8]    [9.5-90.5]             0            1  @?0x13ad84  (/lib/tls/libc.so.6)
     0.00     0.000    50.00     0.010   [0.0-65.8]    [9.5-90.5]             0            1  @?0x13adab  (/lib/tls/libc.so.6)
     0.00     0.000    50.00     0.010   [0.0-65.8]    [9.5-90.5]             0            1  @?0x13ae20  (/lib/tls/libc.so.6)
     0.00     0.000    50.00     0.010   [0.0-65.8]    [9.5-90.5]             0            1  @?0x804ca7c  (ls)
     0.00     0.000    50.00     0.010   [0.0-65.8]    [9.5-90.5]             0            1  @?0x804cd05  (ls)
     0.00     0.000    50.00     0.010   [0.0-65.8]    [9.5-90.5]             0            1  qsort  (/lib/tls/libc.so.6)
"
    );
}

/// A profile cut short, as a copy that stopped makes it: its gzip bytes cut in the
/// middle (`head -c 3000`, or all but the last 100 bytes), or its plain text cut in the
/// middle of a line. Refused with one line that names the file and suggests
/// `--read-cut-short`, exit status 2; with it, read up to the last whole line before the
/// cut, saying how many lines that is, exit status 0.
#[test]
fn a_profile_cut_short_is_refused_and_read_with_read_cut_short() {
    let dir = TempDir::new("a_profile_cut_short");
    let data = std::fs::read(common::data().join("mixed-base-1.gz")).unwrap();
    let mut plain = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&data[..]), &mut plain).unwrap();
    // 643 call-tree lines: the dump has no statistics announcing them (an older one).
    let all = plain.iter().filter(|&&b| b == b'\n').count() - 1;
    dir.write("whole.gz", &data);
    let whole = run(&["--top", "whole.gz"], &dir.0);
    assert_eq!(whole.status.code(), Some(0), "{}", stderr(&whole));
    let cuts = [
        (
            "cut.gz",
            data[..3000].to_vec(),
            "its gzip stream stops in the middle",
        ),
        (
            "end.gz",
            data[..data.len() - 100].to_vec(),
            "its gzip stream stops in the middle",
        ),
        (
            "cut.txt",
            plain[..plain.len() * 2 / 3].to_vec(),
            "its last line stops in the middle",
        ),
    ];
    for (name, bytes, ending) in cuts {
        dir.write(name, &bytes);
        let refused = run(&["--top", name], &dir.0);
        assert_eq!(
            refused.status.code(),
            Some(2),
            "{name}: {}",
            stderr(&refused)
        );
        assert!(stdout(&refused).is_empty(), "{name}: {}", stdout(&refused));
        let message = stderr(&refused);
        assert!(
            message.starts_with(&format!("pyigprof-analyse: {name}: cut short: read "))
                && message.contains(ending)
                && message.ends_with("(--read-cut-short reads what there is)\n")
                && message.lines().count() == 1,
            "{name}: {message}"
        );
        let read = run(&["--top", "--read-cut-short", name], &dir.0);
        assert_eq!(read.status.code(), Some(0), "{name}: {}", stderr(&read));
        let note = stderr(&read);
        let first = note.lines().next().unwrap_or_default();
        let lines: usize = first
            .strip_prefix(&format!("pyigprof-analyse: {name}: cut short: read "))
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {note}"));
        assert!(
            lines > 0 && lines < all && first.ends_with("reading what there is (--read-cut-short)"),
            "{name}: {lines} of {all} lines: {note}"
        );
        assert_eq!(
            stdout(&read).lines().next(),
            Some(format!("pyigprof-analyse: {name}: /root/.pyenv/versions/3.11.7/bin/python3 mixed.py 15 (pid 24288)").as_str()),
            "{name}"
        );
        // Fewer samples than the whole profile's.
        let samples = |out: &str| -> u64 {
            let line = out.lines().nth(1).unwrap_or_default();
            line.split(' ')
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        assert!(
            samples(&stdout(&read)) < samples(&stdout(&whole)),
            "{name}: {}",
            stdout(&read)
        );
    }
    // Cut inside the gzip header, before the dump's: nothing to read, with or without.
    dir.write("head.gz", &data[..5]);
    for args in [&["head.gz"][..], &["--read-cut-short", "head.gz"][..]] {
        assert_fails(
            &run(args, &dir.0),
            "pyigprof-analyse: head.gz: not a valid gzip stream: unexpected end of file\n",
        );
    }
}

#[test]
fn corrupt_dump_is_an_error_with_file_and_line() {
    let dir = TempDir::new("corrupt_dump_is_an_error");
    let mut text = RECURSIVE.to_vec();
    text.extend_from_slice(b"C4 FN2+1\n"); // line 11: C4 after a C2
    dir.write("bad.txt", &text);
    dir.write("good.txt", RECURSIVE);
    let output = run(&["good.txt", "bad.txt"], &dir.0);
    assert_fails(
        &output,
        "pyigprof-analyse: bad.txt:11: expected a depth from 1 to 3 (one more than the previous line at most), found \"C4\"\n",
    );
}

#[test]
fn empty_and_missing_files_are_errors() {
    let dir = TempDir::new("empty_and_missing_files_are_errors");
    dir.write("empty.gz", b"");
    let output = run(&["empty.gz"], &dir.0);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "pyigprof-analyse: empty.gz: empty file, expected a profile starting with P=(\n"
    );

    let output = run(&["missing.gz"], &dir.0);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).starts_with("pyigprof-analyse: missing.gz: cannot read: "),
        "{}",
        stderr(&output)
    );
    assert_eq!(stderr(&output).lines().count(), 1);
}

#[test]
fn unknown_counter_is_an_error_listing_the_counters() {
    let dir = TempDir::new("unknown_counter_is_an_error");
    dir.write("rec.txt", RECURSIVE);
    let output = run(&["-r", "MEM_TOTAL", "rec.txt"], &dir.0);
    assert_fails(
        &output,
        "pyigprof-analyse: rec.txt: no counter MEM_TOTAL in the profile; its counters: PERF_TICKS\n",
    );
}

#[test]
fn memory_counter_of_igprof_dump_with_leaks() {
    let dir = TempDir::new("memory_counter_of_igprof_dump");
    dir.write(
        "mem.txt",
        b"P=(HEX ID=7 N=(app) T=0.010000)
C1 FN0=(F0=(/work/app)+100 N=(main))+5 V0=(MEM_TOTAL):(1,64,64)
C2 FN1=(F0+200 N=(_Z5allocm))+0 V0:(2,2d2,267) V1=(MEM_LIVE):(2,2d2,2d2);LK=(0x91441c8,267);LK=(0x91633c0,6b)
",
    );
    let output = run(&["--report", "MEM_TOTAL", "mem.txt"], &dir.0);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "\
pyigprof-analyse: mem.txt: app (pid 7)
MEM_TOTAL: 3 allocations, 822 B allocated
   self %  self bytes    cum %  cum bytes  function  (file)
    87.83       722 B    87.83      722 B  alloc(unsigned long)  (/work/app)
    12.17       100 B   100.00      822 B  main  (/work/app)
"
    );
}

#[test]
fn usage_errors_exit_2() {
    let dir = TempDir::new("usage_errors_exit_2");
    let output = run(&[], &dir.0);
    assert_eq!(output.status.code(), Some(2));
    let output = run(&["--order", "sideways", "x.gz"], &dir.0);
    assert_eq!(output.status.code(), Some(2));
    let output = run(&["--help"], &dir.0);
    assert_eq!(output.status.code(), Some(0));
    assert!(stdout(&output).contains("--top"));
    assert!(stdout(&output).contains("--lines[=<N>]"));
    // IgProf's `-o ascending` works, and the help's list of values says so (issue 58).
    assert!(
        stdout(&output).contains("also `ascending`, IgProf's name for it"),
        "{}",
        stdout(&output)
    );
    let dir_profile = lines_dir("usage_errors_exit_2_ascending");
    let output = run(&["-o", "ascending", "--top", "lines.txt"], &dir_profile.0);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

/// `python3 app.py` with recursion, Python calling native code (and native code calling
/// back into Python), a generator expression, `exec` code and an extensionless script.
/// The unit tests of src/report/lines.rs read the same file and explain the amounts.
const LINES: &[u8] = include_bytes!("data/lines-hex.txt");

/// The `--lines` report of `LINES` read as `lines.txt` (11 rows, all of them);
/// src/report/lines.rs checks the same text.
const LINES_REPORT: &str = include_str!("data/lines-report.txt");

/// A directory of its own for test `test`, holding `LINES` as `lines.txt`.
fn lines_dir(test: &str) -> TempDir {
    let dir = TempDir::new(test);
    dir.write("lines.txt", LINES);
    dir
}

#[test]
fn lines_of_python_dump() {
    let dir = lines_dir("lines_of_python_dump");
    // `--lines` takes its value only with "=", so the profile is not taken for N.
    for args in [&["--lines", "lines.txt"][..], &["lines.txt", "--lines=0"]] {
        assert_prints(&run(args, &dir.0), LINES_REPORT);
    }

    dir.write("lines.gz", &gzip(LINES));
    // Line 12 of the recursive walk counts its samples once: 14 ticks, not 14 + 12.
    assert_prints(
        &run(&["--lines=3", "--order", "cumulative", "lines.gz"], &dir.0),
        "\
pyigprof-analyse: lines.gz: python3 app.py (pid 42)
PERF_TICKS: 18 samples, 33 ticks of 4.000 ms = 0.132 s; a 10 % share is 2.6-31.4 % (95 %); Python view: interpreter plumbing below Python code counts as its caller's (--all-frames shows it)
   self %    self s    cum %     cum s  self 95% CI   cum 95% CI  self samples  cum samples  line  (function)
     9.09     0.012    42.42     0.056   [2.5-26.8]  [20.7-71.6]             2            6  /work/app.py:12  (walk)
     0.00     0.000    42.42     0.056   [0.0-17.6]  [20.7-71.6]             0            6  /work/app.py:30  (<module>)
    33.33     0.044    33.33     0.044  [13.5-67.8]  [13.5-67.8]             4            4  /work/app.py:15  (walk)
",
    );
}

#[test]
fn lines_and_top_exclude_each_other() {
    let dir = lines_dir("lines_and_top_exclude_each_other");
    let output = run(&["--lines=5", "--top", "lines.txt"], &dir.0);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stdout(&output), "");
    assert!(
        stderr(&output).contains("'--lines[=<N>]' cannot be used with '--top[=<N>]'"),
        "{}",
        stderr(&output)
    );
    let output = run(&["--lines=x", "lines.txt"], &dir.0);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn lines_errors_like_top() {
    let dir = lines_dir("lines_errors_like_top");
    let output = run(&["--lines", "-r", "MEM_TOTAL", "lines.txt"], &dir.0);
    assert_fails(
        &output,
        "pyigprof-analyse: lines.txt: no counter MEM_TOTAL in the profile; its counters: PERF_TICKS\n",
    );
}

/// One sample of one tick reads in the singular, in the report's header and in the flame
/// graph's subtitle and tooltips; two in the plural.
#[test]
fn one_sample_and_one_tick_are_singular() {
    let dir = TempDir::new("one_sample_and_one_tick_are_singular");
    let dump = |count: u32| {
        format!(
            "P=(HEX ID=1 N=(python3 one.py) T=0.004000)\nC1 FN0=(F0=(/one.py)+1 N=(<module>))+2 V0=(PERF_TICKS):({count:x},{count:x},{count:x})\n"
        )
    };
    dir.write("one.txt", dump(1).as_bytes());
    dir.write("two.txt", dump(2).as_bytes());
    for (name, expected) in [
        (
            "one.txt",
            "PERF_TICKS: 1 sample, 1 tick of 4.000 ms = 0.004 s; ",
        ),
        (
            "two.txt",
            "PERF_TICKS: 2 samples, 2 ticks of 4.000 ms = 0.008 s; ",
        ),
    ] {
        let output = run(&["--top", name, "--flamegraph", "f.svg"], &dir.0);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let report = stdout(&output);
        let second = report.lines().nth(1).unwrap_or_default();
        assert!(second.starts_with(expected), "{name}: {second}");
        let svg = std::fs::read_to_string(dir.0.join("f.svg")).unwrap();
        assert!(
            svg.contains(expected.trim_end_matches("; ")),
            "{name}: {svg}"
        );
        let count = &name[..3];
        let tooltip = if count == "one" {
            "(1 × 4.000 ms tick, 100%)"
        } else {
            "(2 × 4.000 ms tick, 100%)"
        };
        assert!(svg.contains(tooltip), "{name}: {svg}");
        assert!(!svg.contains(" ticks of 4.000 ms, 100%"), "{name}");
    }
}

/// IgProf's `--top N`, with a space, keeps its meaning (the N heaviest call stacks), and
/// says once on stderr what it is and how to get the function table; `--top=N` says
/// nothing.
#[test]
fn top_with_a_space_is_igprofs_stack_listing_and_says_so() {
    let dir = TempDir::new("top_with_a_space");
    dir.write("rec.gz", &gzip(RECURSIVE));
    let spaced = run(&["--top", "2", "rec.gz"], &dir.0);
    assert_eq!(spaced.status.code(), Some(0), "{}", stderr(&spaced));
    assert!(
        stdout(&spaced).starts_with("## Entry 1"),
        "{}",
        stdout(&spaced)
    );
    assert_eq!(
        stderr(&spaced)
            .matches(
                "pyigprof-analyse: --top 2 (with a space) is IgProf's --top: the 2 heaviest \
                 call stacks; --top=2 lists the 2 functions with the most cost"
            )
            .count(),
        1,
        "{}",
        stderr(&spaced)
    );
    let joined = run(&["--top=2", "rec.gz"], &dir.0);
    assert_eq!(joined.status.code(), Some(0), "{}", stderr(&joined));
    assert!(
        !stderr(&joined).contains("with a space"),
        "{}",
        stderr(&joined)
    );
    assert!(
        stdout(&joined).starts_with("pyigprof-analyse: rec.gz"),
        "{}",
        stdout(&joined)
    );
}
