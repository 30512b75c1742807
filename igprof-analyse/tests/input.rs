//! What users see for inputs that are not good dumps (one line naming the file, the line
//! and what was expected, exit status 2, never a panic), for comments in dumps, and for
//! the progress bar (only on a terminal).

mod common;

use std::process::Command;

use common::{assert_fails, assert_prints, gzip, run, stderr, stdout, TempDir};

/// A small pyigprof dump (tests/data/recursive-hex.txt) and its `--top` report.
const RECURSIVE: &[u8] = include_bytes!("data/recursive-hex.txt");
const RECURSIVE_TOP: &str = include_str!("data/recursive-top.txt");

#[test]
fn comment_lines_are_skipped() {
    let dir = TempDir::new("comment_lines_are_skipped");
    let mut text = RECURSIVE.to_vec();
    // After the header, between call-tree lines, and the profiler's statistics at the end.
    let header_end = text.iter().position(|&b| b == b'\n').unwrap() + 1;
    text.splice(
        header_end..header_end,
        b"# written by hand\n".iter().copied(),
    );
    text.extend_from_slice(b"#pyigprof stats samples=13 ticks=24 dropped=0 truncated=0\n");
    text.extend_from_slice(b"#pyigprof stats threads=2\n");
    dir.write("rec.txt", &text);
    assert_prints(&run(&["rec.txt"], &dir.0), RECURSIVE_TOP);
    dir.write("rec.txt", &gzip(&text));
    assert_prints(&run(&["rec.txt"], &dir.0), RECURSIVE_TOP);
}

#[test]
fn unsupported_files_are_named() {
    let dir = TempDir::new("unsupported_files_are_named");
    dir.write("p.bz2", b"BZh91AY&SY\x8a\x1c\x02\x00\n");
    assert_fails(
        &run(&["p.bz2"], &dir.0),
        "pyigprof-analyse: p.bz2:1: expected a profile header starting with P=(, found bzip2-compressed data (decompress it first: bunzip2)\n",
    );
    let analyser = env!("CARGO_BIN_EXE_pyigprof-analyse");
    assert_fails(
        &run(&[analyser], &dir.0),
        &format!("pyigprof-analyse: {analyser}:1: expected a profile header starting with P=(, found an ELF binary\n"),
    );
    // A gzip file whose content is not a dump.
    dir.write("notes.gz", &gzip(b"just some notes\n"));
    assert_fails(
        &run(&["notes.gz"], &dir.0),
        "pyigprof-analyse: notes.gz:1: expected a profile header starting with P=(, found \"just some notes\"\n",
    );
    // A directory.
    std::fs::create_dir(dir.0.join("d")).unwrap();
    assert_fails(
        &run(&["d"], &dir.0),
        "pyigprof-analyse: d: cannot read: Is a directory (os error 21)\n",
    );
}

#[test]
fn broken_dumps_name_file_line_and_expectation() {
    let dir = TempDir::new("broken_dumps_name_file_line");
    let header = "P=(HEX ID=1 N=(python3 x.py) T=0.004000)\n";
    let cases = [
        (
            "C1 FN0=(F0=(/x.py)+1 N=(<module>))+2\nC2 FN7+0 V0=(PERF_TICKS):(1,1,1)\n",
            "3: expected a function defined on an earlier line, found undefined FN7",
        ),
        (
            "C1 FN0=(F0=(/x.py)+1 N=(<module>))+2 V0:(1,1,1)\n",
            "2: expected a counter defined on an earlier line, found undefined V0",
        ),
        (
            "C1 FN0=(F0=(/x.py)+1 N=(<module>))+2\nC5 FN0+3\n",
            "3: expected a depth from 1 to 2 (one more than the previous line at most), found \"C5\"",
        ),
        (
            // With its newline: a line that does not follow the format (without it, the
            // last line cut in the middle: cli.rs's cut-short test).
            "C1 FN0=(F0=(/x.py)+1 N=(<modu\n",
            "2: expected \")\" closing the function name, found end of line",
        ),
        (
            "C1 FN0=(F0=(/x.py)+1 N=(<module>))+2 V0=(PERF_TICKS):(1,1)\n",
            "2: expected \",\" after the amount, found \")\"",
        ),
    ];
    for (body, message) in cases {
        dir.write("bad.gz", &gzip(format!("{header}{body}").as_bytes()));
        assert_fails(
            &run(&["--top", "bad.gz"], &dir.0),
            &format!("pyigprof-analyse: bad.gz:{message}\n"),
        );
    }
}

#[test]
fn unknown_counter_in_a_comparison_is_an_error() {
    let dir = TempDir::new("unknown_counter_in_a_comparison");
    dir.write("a.txt", RECURSIVE);
    let output = run(&["--diff", "a.txt", "a.txt", "-r", "MEM_LIVE"], &dir.0);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stdout(&output), "");
    let message = stderr(&output);
    assert!(
        message.starts_with("pyigprof-analyse: a.txt: ") && message.contains("MEM_LIVE"),
        "{message}"
    );
    assert_eq!(message.lines().count(), 1, "{message}");
}

/// A dump big enough that reading it takes a little while (about 8 MB).
fn big_dump() -> Vec<u8> {
    let mut text =
        b"P=(HEX ID=1 N=(python3 big.py) T=0.004000)\nC1 FN0=(F0=(/big.py)+1 N=(<module>))+1\n"
            .to_vec();
    for i in 0..200_000u32 {
        text.extend_from_slice(
            format!(
                "C2 FN{:x}=(F0+{:x} N=(f{i}))+3 V0{}:(1,1,1)\n",
                i + 1,
                i + 1,
                if i == 0 { "=(PERF_TICKS)" } else { "" }
            )
            .as_bytes(),
        );
    }
    text
}

#[test]
fn progress_is_shown_on_a_terminal_only() {
    let dir = TempDir::new("progress_is_shown_on_a_terminal_only");
    dir.write("big.txt", &big_dump());
    // stderr is a pipe here: nothing but the report, even with the bar due at once.
    let output = Command::new(env!("CARGO_BIN_EXE_pyigprof-analyse"))
        .args(["--no-resolve", "--top=1", "big.txt"])
        .env("PYIGPROF_ANALYSE_PROGRESS_DELAY", "0")
        .current_dir(&dir.0)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(stderr(&output), "");
    assert!(
        stdout(&output).contains("f0 (/big.py:1)"),
        "{}",
        stdout(&output)
    );

    // On a terminal (util-linux `script` runs the command on a pseudo-terminal), the bar
    // names the file being read.
    let command = format!(
        "PYIGPROF_ANALYSE_PROGRESS_DELAY=0 {} --no-resolve --top=1 big.txt >/dev/null",
        env!("CARGO_BIN_EXE_pyigprof-analyse")
    );
    match Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(&dir.0)
        .output()
    {
        Ok(output) if output.status.success() => {
            assert!(
                stdout(&output).contains("reading big.txt"),
                "{:?}",
                stdout(&output)
            );
        }
        _ => println!("progress_is_shown_on_a_terminal_only: terminal part skipped: no working `script` (util-linux)"),
    }
}
