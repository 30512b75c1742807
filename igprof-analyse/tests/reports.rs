//! `--tree`, `--text` and the Python view (`--all-frames`) on a real profile of
//! examples/mixed.py (tests/data/mixed-base-1.gz), read back as a user reads them: the
//! tree's amounts add up, the call graph's arcs match the functions' totals, and every
//! report shows the same view.

mod common;

use common::{data, run, stderr, stdout};

const PROFILE: &str = "mixed-base-1.gz";

fn output(args: &[&str]) -> String {
    let output = run(args, &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stderr(&output), "");
    stdout(&output)
}

/// A line of the tree: depth (from the indentation), numbers and the function.
#[derive(Debug)]
struct TreeLine {
    depth: usize,
    cum_percent: f64,
    cum_s: f64,
    self_percent: f64,
    self_s: f64,
    cum_samples: f64,
    self_samples: f64,
    function: String,
}

fn tree_lines(text: &str) -> Vec<TreeLine> {
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .position(|line| line.trim_start().starts_with("cum %"))
        .unwrap();
    // The function column starts where the heading says "function".
    let column = lines[header].find("function").unwrap();
    lines[header + 1..]
        .iter()
        .map(|line| {
            // The shares and amounts, then their intervals ([lo-hi]) and samples.
            let words: Vec<f64> = line[..column]
                .split_whitespace()
                .filter(|w| !w.starts_with('['))
                .map(|w| w.parse().unwrap())
                .collect();
            let name = &line[column..];
            let function = name.trim_start();
            // Beyond 40 levels the depth is written out, from 1 for an outermost frame.
            let (depth, function) = match function.strip_prefix("[depth ") {
                Some(rest) => {
                    let (depth, function) = rest.split_once("] ").unwrap();
                    (depth.parse::<usize>().unwrap() - 1, function)
                }
                None => ((name.len() - function.len()) / 2, function),
            };
            TreeLine {
                depth,
                cum_percent: words[0],
                cum_s: words[1],
                self_percent: words[2],
                self_s: words[3],
                cum_samples: words[4],
                self_samples: words[5],
                function: function.to_string(),
            }
        })
        .collect()
}

#[test]
fn tree_adds_up() {
    let text = output(&[PROFILE, "--tree"]);
    assert!(
        text.lines()
            .nth(1)
            .unwrap()
            .contains("= 15.040 s; a 10 % share is ±1.0 points (95 %); Python view: "),
        "{text}"
    );
    let lines = tree_lines(&text);
    assert_eq!(lines[0].depth, 0);
    assert!(lines[0].function.starts_with("_start  ("), "{:?}", lines[0]);
    // Every node: cumulative = self + the children's cumulative (seconds rounded to
    // 1 ms each), and a child is one level deeper than its parent.
    for (index, line) in lines.iter().enumerate() {
        let children: Vec<&TreeLine> = lines[index + 1..]
            .iter()
            .take_while(|next| next.depth > line.depth)
            .filter(|next| next.depth == line.depth + 1)
            .collect();
        let sum: f64 = line.self_s + children.iter().map(|c| c.cum_s).sum::<f64>();
        assert!(
            (line.cum_s - sum).abs() <= 0.0005 * (children.len() + 2) as f64,
            "{line:?}"
        );
        // So do the samples, exactly.
        let samples: f64 = line.self_samples + children.iter().map(|c| c.cum_samples).sum::<f64>();
        assert_eq!(line.cum_samples, samples, "{line:?}");
        assert!(line.cum_percent + 0.005 >= line.self_percent);
        if index > 0 {
            assert!(line.depth <= lines[index - 1].depth + 1);
        }
    }
    let self_total: f64 = lines.iter().map(|line| line.self_s).sum();
    assert!((self_total - 15.040).abs() < 0.0005 * lines.len() as f64);
    // python_work is called by timed, which main calls.
    let work = lines
        .iter()
        .position(|line| line.function.starts_with("python_work ("))
        .unwrap();
    let parent = lines[..work]
        .iter()
        .rev()
        .find(|line| line.depth < lines[work].depth)
        .unwrap();
    assert!(parent.function.starts_with("timed ("), "{parent:?}");
    // Its interpreter work (integer `%` first) is below it, its own time the rest.
    assert!((lines[work].cum_percent - 30.93).abs() < 0.01);
    assert!((lines[work].self_percent - 6.44).abs() < 0.01);
    let child = &lines[work + 1];
    assert_eq!(child.depth, lines[work].depth + 1);
    assert!(
        child.function.starts_with("PyNumber_Remainder  ("),
        "{child:?}"
    );
}

/// One block of the call graph: caller lines, the function's line, callee lines.
#[derive(Debug, Default)]
struct Block {
    rank: usize,
    total: f64,
    self_s: f64,
    children: f64,
    function: String,
    /// (amount, other's total, name with its rank)
    callers: Vec<(f64, f64, String)>,
    callees: Vec<(f64, f64, String)>,
}

fn blocks(text: &str) -> Vec<Block> {
    let graph = text
        .split("Call tree profile (cumulative)\n")
        .nth(1)
        .unwrap();
    let rule = format!("{}\n", "- ".repeat(35).trim_end());
    graph
        .split(rule.as_str())
        .skip(1)
        .map(|block| {
            let mut parsed = Block::default();
            let mut seen_main = false;
            for line in block.lines() {
                let words: Vec<&str> = line.split_whitespace().collect();
                if line.starts_with('[') {
                    // [3]  66.67  0.064  0.032 / 0.032  fib (/work/rec.py:10)
                    parsed.rank = words[0]
                        .trim_matches(|c| c == '[' || c == ']')
                        .parse()
                        .unwrap();
                    parsed.total = words[2].parse().unwrap();
                    parsed.self_s = words[3].parse().unwrap();
                    parsed.children = words[5].parse().unwrap();
                    parsed.function = words[6..].join(" ");
                    seen_main = true;
                } else {
                    //   54.17  .........  0.052 / 0.064  fib (/work/rec.py:10) [3]
                    assert_eq!(words[1], ".........", "{line}");
                    let arc = (
                        words[2].parse().unwrap(),
                        words[4].parse().unwrap(),
                        words[5..].join(" "),
                    );
                    if seen_main {
                        parsed.callees.push(arc);
                    } else {
                        parsed.callers.push(arc);
                    }
                }
            }
            parsed
        })
        .collect()
}

#[test]
fn text_call_graph_is_consistent() {
    let text = output(&[PROFILE, "--text"]);
    for section in [
        // Each flat profile's share with its 95 % interval and its samples: all 3754
        // samples have _start on their stack; SHA-256's 2146 make up 57.15 % of the
        // ticks (Wilson's interval of 2146 of 3754, moved from 57.17 % to 57.15 %).
        "\nFlat profile (cumulative >= 1%)\n\n% total      Total        95% CI  Samples  Function\n 100.00     15.040  [99.9-100.0]     3754  ",
        "\n 100.00     15.040  [99.9-100.0]     3754  _start  (/root/.pyenv/versions/3.11.7/bin/python3.11) [",
        "\nFlat profile (self >= 0.01%)\n\n% total       Self        95% CI  Samples  Function\n  57.15      8.596   [55.6-58.7]     2146  @?0x29c240  (/lib/x86_64-linux-gnu/libcrypto.so.3) [",
        "\nCall tree profile (cumulative)\n\nRank    % total      Total       Self / Children   Function\n",
    ] {
        assert!(text.contains(section), "{section}\n{text}");
    }
    let blocks = blocks(&text);
    let rank_of = |function: &str| {
        blocks
            .iter()
            .find(|block| block.function == function)
            .map(|block| block.rank)
            .unwrap_or_else(|| panic!("no block for {function}"))
    };
    for (index, block) in blocks.iter().enumerate() {
        assert_eq!(block.rank, index + 1);
        assert!(
            (block.total - block.self_s - block.children).abs() < 0.0015,
            "{block:?}"
        );
        // Every sample of the function came through a caller, and every sample below it
        // through a callee (more than once only where it recurses).
        let callers: f64 = block.callers.iter().map(|arc| arc.0).sum();
        assert!(
            callers + 0.0005 * block.callers.len() as f64 >= block.total,
            "{block:?}"
        );
        let callees: f64 = block.callees.iter().map(|arc| arc.0).sum();
        assert!(
            callees + 0.0005 * block.callees.len() as f64 >= block.children,
            "{block:?}"
        );
        // An arc's other side is a function with its block, whose total is the one
        // given after the slash.
        for (amount, other_total, name) in block.callers.iter().chain(&block.callees) {
            assert!(amount <= other_total, "{block:?}");
            if name == "<spontaneous>" {
                assert_eq!(*other_total, 15.040);
                continue;
            }
            let (function, rank) = name.rsplit_once(" [").unwrap();
            let rank: usize = rank.trim_end_matches(']').parse().unwrap();
            assert_eq!(rank_of(function), rank, "{name}");
            assert_eq!(blocks[rank - 1].total, *other_total, "{name}");
        }
    }
    // python_work: called by timed only; in the Python view it calls the interpreter's
    // work directly (integer `%`, `*`, allocation), no evaluation loop or call machinery
    // in between.
    let work = &blocks[rank_of("python_work (/tmp/pyigprof-diff/mixed.py:22)") - 1];
    assert_eq!(work.total, 4.652);
    assert_eq!((work.self_s, work.children), (0.968, 3.684));
    assert_eq!(work.callers.len(), 1);
    assert_eq!(work.callers[0].0, 4.652);
    assert!(work.callers[0]
        .2
        .starts_with("timed (/tmp/pyigprof-diff/mixed.py:46) ["));
    assert!(
        work.callees[0].2.starts_with("PyNumber_Remainder ("),
        "{work:?}"
    );
    assert_eq!(work.callees[0].0, 1.720);
    for callee in &work.callees {
        assert!(callee.2.contains("/libpython3.11.so.1.0) ["), "{work:?}");
        let name = callee.2.split(" (").next().unwrap();
        assert!(!igprof_analyse::view::is_plumbing(name), "{work:?}");
    }
    // squeeze → zlib_compress (the extension module) → deflate (libz), no interpreter
    // frame in between.
    let squeeze = &blocks[rank_of("squeeze (/tmp/pyigprof-diff/mixed.py:30)") - 1];
    assert!(
        squeeze.callees[0].2.starts_with("zlib_compress ("),
        "{squeeze:?}"
    );
}

#[test]
fn python_view_in_every_report() {
    // cfunction_call (the call machinery of built-in functions, in libpython) runs below
    // Python code only: hidden by default, shown with --all-frames, in every report;
    // l_mod (integer modulo, work of the interpreter) is shown in both. The totals do
    // not change.
    for report in [
        "--top=0",
        "--tree",
        "--text",
        "--collapsed",
        "--json",
        "--lines=0",
    ] {
        let python = output(&[PROFILE, report]);
        let all = output(&[PROFILE, report, "--all-frames"]);
        assert!(!python.contains("cfunction_call"), "{report}");
        if report != "--lines=0" {
            assert!(all.contains("cfunction_call"), "{report}");
            assert!(
                python.contains("l_mod") && all.contains("l_mod"),
                "{report}"
            );
        }
        if !matches!(report, "--collapsed" | "--json") {
            // The total is the same; the Python view says so after it.
            let total = all.lines().nth(1).unwrap();
            assert_eq!(
                python.lines().nth(1).unwrap(),
                format!("{total}; Python view: interpreter plumbing below Python code counts as its caller's (--all-frames shows it)"),
                "{report}"
            );
            assert!(!all.contains("Python view"), "{report}");
        }
    }
    // The lines report is the same in both views but for the note.
    let python = output(&[PROFILE, "--lines=0"]);
    let all = output(&[PROFILE, "--lines=0", "--all-frames"]);
    let without_note: Vec<&str> = python
        .lines()
        .map(|line| line.split("; Python view:").next().unwrap())
        .collect();
    assert_eq!(without_note, all.lines().collect::<Vec<_>>());
    // Interpreter frames before the first Python frame stay: how Python was started.
    let tree = output(&[PROFILE, "--tree"]);
    assert!(tree.contains("Py_RunMain  (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)"));
}
