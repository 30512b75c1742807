//! The exports for other tools, checked by reading them back as those tools would:
//! `--collapsed` (folded stacks for flamegraph.pl/inferno), `--flamegraph` (SVG, parsed
//! as XML), `--speedscope` (speedscope's JSON, parsed with serde_json) and `--json`.
//! Each is checked on a real profile of examples/mixed.py (tests/data/mixed-base-1.gz)
//! against the totals and shares that the `--top` report gives for the same file.

mod common;

use std::collections::HashMap;
use std::fs;

use common::{data, run, stderr, stdout, TempDir};
use serde_json::Value;

const PROFILE: &str = "mixed-base-1.gz";

/// The `--top` report's total ticks, seconds, and each function's self and cumulative
/// percent (by its one-line label), for `args`.
struct Top {
    ticks: i64,
    seconds: f64,
    percents: HashMap<String, (f64, f64)>,
}

fn top(extra: &[&str]) -> Top {
    let output = run(&[&[PROFILE, "--top=0"][..], extra].concat(), &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    let total = text.lines().nth(1).unwrap();
    // PERF_TICKS: 3754 samples, 3760 ticks of 4.000 ms = 15.040 s
    let words: Vec<&str> = total.split_whitespace().collect();
    let percents = text
        .lines()
        .skip_while(|line| !line.contains("self %"))
        .skip(1)
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            // The label is what follows the four number columns.
            let mut rest = line;
            for _ in 0..4 {
                rest = rest.trim_start();
                rest = &rest[rest.find(' ').unwrap()..];
            }
            (
                rest.trim_start().to_string(),
                (words[0].parse().unwrap(), words[2].parse().unwrap()),
            )
        })
        .collect();
    Top {
        ticks: words[3].parse().unwrap(),
        seconds: words[9].parse().unwrap(),
        percents,
    }
}

#[test]
fn collapsed_stacks_sum_to_the_total() {
    let output = run(&[PROFILE, "--collapsed"], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    let top = top(&[]);
    let mut sum = 0;
    let mut python_work = 0;
    for line in text.lines() {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        let count: i64 = count.parse().unwrap();
        assert!(count > 0, "{line}");
        sum += count;
        let frames: Vec<&str> = stack.split(';').collect();
        assert!(frames.iter().all(|frame| !frame.is_empty()), "{line}");
        if frames.last() == Some(&"python_work (/tmp/pyigprof-diff/mixed.py:22)") {
            python_work += count;
            // Python view: the Python caller directly above, no interpreter frame.
            assert_eq!(
                frames[frames.len() - 2],
                "timed (/tmp/pyigprof-diff/mixed.py:46)",
                "{line}"
            );
        }
        // Below the first Python frame no frame is the interpreter's.
        if let Some(first) = frames.iter().position(|frame| frame.contains(".py")) {
            for frame in &frames[first..] {
                assert!(!frame.ends_with("[libpython3.11.so.1.0]"), "{line}");
            }
        }
    }
    assert_eq!(sum, top.ticks);
    // python_work's own stacks give the same share as --top.
    let share = python_work as f64 / sum as f64 * 100.0;
    let (self_percent, _) = top.percents["python_work (/tmp/pyigprof-diff/mixed.py:22)"];
    assert!(
        (share - self_percent).abs() < 0.005,
        "{share} vs {self_percent}"
    );

    // With every frame, the evaluator's helpers are there and the total is the same.
    let all = stdout(&run(&[PROFILE, "--collapsed", "--all-frames"], &data()));
    assert!(all.contains(";l_mod [libpython3.11.so.1.0] "), "{all}");
    let all_sum: i64 = all
        .lines()
        .map(|line| line.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap())
        .sum();
    assert_eq!(all_sum, sum);
}

#[test]
fn flame_graph_is_well_formed_svg() {
    let dir = TempDir::new("flame_graph_is_well_formed_svg");
    let svg = dir.0.join("profile.svg");
    let output = run(&[PROFILE, "--flamegraph", svg.to_str().unwrap()], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // Only the file: nothing on stdout or stderr.
    assert_eq!(stdout(&output), "");
    assert_eq!(stderr(&output), "");
    let text = fs::read_to_string(&svg).unwrap();
    // inferno's SVG starts with the SVG 1.1 DOCTYPE.
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let document =
        roxmltree::Document::parse_with_options(&text, options).expect("well-formed XML");
    let root = document.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    // One <title> per frame, e.g. "python_work (/tmp/…:22) (1,163 ticks of 4.000 ms,
    // 30.93%)"; the whole graph's frame is "all".
    let titles: Vec<&str> = root
        .descendants()
        .filter(|node| node.has_tag_name("title"))
        .filter_map(|node| node.text())
        .collect();
    let work = titles
        .iter()
        .find(|title| title.starts_with("python_work (/tmp/pyigprof-diff/mixed.py:22) ("))
        .unwrap_or_else(|| panic!("{titles:?}"));
    let top = top(&[]);
    let (_, cumulative) = top.percents["python_work (/tmp/pyigprof-diff/mixed.py:22)"];
    assert!(work.ends_with(&format!("{cumulative:.2}%)")), "{work}");
    assert!(
        titles
            .iter()
            .any(|title| title.starts_with("all (3,760 ticks of 4.000 ms")),
        "{titles:?}"
    );
    // Frames named `<module>` are escaped, and the subtitle gives the total.
    assert!(titles.iter().any(|title| title.starts_with("<module> (")));
    assert!(text.contains("PERF_TICKS: 3754 samples, 3760 ticks of 4.000 ms = 15.040 s"));
}

#[test]
fn speedscope_file_reads_back() {
    let dir = TempDir::new("speedscope_file_reads_back");
    let path = dir.0.join("profile.speedscope.json");
    let output = run(&[PROFILE, "--speedscope", path.to_str().unwrap()], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "");
    let file: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        file["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    let frames = file["shared"]["frames"].as_array().unwrap();
    let profile = &file["profiles"][0];
    assert_eq!(profile["type"], "sampled");
    assert_eq!(profile["unit"], "seconds");
    let samples = profile["samples"].as_array().unwrap();
    let weights: Vec<f64> = profile["weights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_f64().unwrap())
        .collect();
    assert_eq!(samples.len(), weights.len());
    let top = top(&[]);
    let sum: f64 = weights.iter().sum();
    assert!((sum - top.seconds).abs() < 1e-9, "{sum}");
    assert!((profile["endValue"].as_f64().unwrap() - sum).abs() < 1e-9);
    assert_eq!(profile["startValue"], 0.0);
    // Every index names a frame; frames are distinct functions.
    let mut work = 0.0;
    for (sample, weight) in samples.iter().zip(&weights) {
        let stack: Vec<usize> = sample
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as usize)
            .collect();
        assert!(stack.iter().all(|&i| i < frames.len()));
        let leaf = &frames[*stack.last().unwrap()];
        if leaf["name"] == "python_work" {
            assert_eq!(leaf["file"], "/tmp/pyigprof-diff/mixed.py");
            assert_eq!(leaf["line"], 22);
            work += weight;
        }
    }
    let (self_percent, _) = top.percents["python_work (/tmp/pyigprof-diff/mixed.py:22)"];
    assert!((work / sum * 100.0 - self_percent).abs() < 0.005);
    let mut keys: Vec<String> = frames
        .iter()
        .map(|f| format!("{}@{}", f["name"], f["file"]))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), frames.len());
}

#[test]
fn json_functions_and_tree() {
    let output = run(&[PROFILE, "--json"], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let document: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let top = top(&[]);
    assert_eq!(document["format"], "pyigprof-analyse");
    assert_eq!(document["version"], 1);
    assert_eq!(document["counter"], "PERF_TICKS");
    assert_eq!(document["unit"], "ticks");
    assert_eq!(document["total"]["amount"], top.ticks);
    assert_eq!(document["sources"][0]["path"], PROFILE);
    assert!(document["hidden_nodes"].as_u64().unwrap() > 0);
    let functions = document["functions"].as_array().unwrap();
    let tree = document["tree"].as_array().unwrap();
    // Functions ranked by self amount; their shares are --top's.
    let amounts: Vec<i64> = functions
        .iter()
        .map(|f| f["self"]["amount"].as_i64().unwrap())
        .collect();
    assert!(amounts.windows(2).all(|pair| pair[0] >= pair[1]));
    let work = functions
        .iter()
        .find(|f| f["name"] == "python_work")
        .unwrap();
    assert_eq!(work["python"], true);
    assert_eq!(work["line"], 22);
    let (self_percent, cumulative_percent) =
        top.percents["python_work (/tmp/pyigprof-diff/mixed.py:22)"];
    assert!((work["self"]["percent"].as_f64().unwrap() - self_percent).abs() < 0.005);
    assert!((work["cumulative"]["percent"].as_f64().unwrap() - cumulative_percent).abs() < 0.005);
    let seconds = work["self"]["seconds"].as_f64().unwrap();
    assert!((seconds - work["self"]["amount"].as_f64().unwrap() * 0.004).abs() < 1e-9);
    // The tree: parents first, each node's cumulative = self + its children's; the self
    // amounts add up to the total.
    let mut children_sum = vec![0i64; tree.len()];
    let mut self_sum = 0;
    for (index, node) in tree.iter().enumerate() {
        assert!(node["function"].as_u64().unwrap() < functions.len() as u64);
        self_sum += node["self"]["amount"].as_i64().unwrap();
        if let Some(parent) = node["parent"].as_u64() {
            let parent = parent as usize;
            assert!(parent < index);
            assert_eq!(
                tree[parent]["depth"].as_u64().unwrap() + 1,
                node["depth"].as_u64().unwrap()
            );
            children_sum[parent] += node["cumulative"]["amount"].as_i64().unwrap();
        } else {
            assert_eq!(node["depth"], 0);
        }
    }
    for (node, children) in tree.iter().zip(&children_sum) {
        assert_eq!(
            node["cumulative"]["amount"].as_i64().unwrap(),
            node["self"]["amount"].as_i64().unwrap() + children
        );
    }
    assert_eq!(self_sum, top.ticks);
}

#[test]
fn files_and_a_report_together() {
    let dir = TempDir::new("files_and_a_report_together");
    let svg = dir.0.join("f.svg");
    let json = dir.0.join("s.json");
    let output = run(
        &[
            PROFILE,
            "--flamegraph",
            svg.to_str().unwrap(),
            "--speedscope",
            json.to_str().unwrap(),
            "--top=3",
        ],
        &data(),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output).lines().count(), 3 + 3);
    assert!(svg.exists() && json.exists());
}

#[test]
fn output_errors_exit_2() {
    let dir = TempDir::new("output_errors_exit_2");
    dir.write("idle.txt", b"P=(HEX ID=8 N=(true) T=0.004000)\nC1 FN0=(F0=(/bin/true)+10 N=(main))+0 V0=(PERF_TICKS):(0,0,0)\n");
    let missing = dir.0.join("no/such/dir/f.svg");
    let output = run(
        &[
            data().join(PROFILE).to_str().unwrap(),
            "--flamegraph",
            missing.to_str().unwrap(),
        ],
        &dir.0,
    );
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "pyigprof-analyse: {}: cannot write: No such file or directory (os error 2)\n",
            missing.display()
        )
    );
    let output = run(&["idle.txt", "--flamegraph", "f.svg"], &dir.0);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "pyigprof-analyse: idle.txt: no samples of PERF_TICKS to draw a flame graph of\n"
    );
    assert!(!dir.0.join("f.svg").exists());
    // Two stdout reports at once are a usage error.
    let output = run(&["idle.txt", "--json", "--collapsed"], &dir.0);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).starts_with("error: "),
        "{}",
        stderr(&output)
    );
}
