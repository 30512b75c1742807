//! `pyigprof-analyse`: prints reports from IgProf-format profiles written by pyigprof
//! or IgProf (docs/dump-format.md, IgProf doc/dump-format).
//!
//! Exit status: 0 on success; 1 when `--fail-on-regression` finds a regression; 2 when a
//! profile cannot be read, the report cannot be computed or a file cannot be written
//! (one line on stderr: `pyigprof-analyse: <file>[:<line>]: ...`) and for command-line
//! errors.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::ffi::OsString;

use clap::{ArgGroup, Parser, ValueEnum};
use igprof_analyse::report::{
    self, callgrind, collapsed, diff, flamegraph, json, lines, pprof, speedscope, sqlite, text,
    top, tree,
};
use igprof_analyse::resolve;
use igprof_analyse::stats::Correction;
use igprof_analyse::transform::{self, CountFilter, MergeRule, Value};
use igprof_analyse::view::View;
use igprof_analyse::{Error, Profile};

/// Reads IgProf-format profiles (from pyigprof or IgProf, plain or gzip) and prints
/// reports. Several profiles are merged into one. By default the Python view is shown
/// (see --all-frames) and the report is --top.
#[derive(Debug, Parser)]
#[command(name = "pyigprof-analyse", version)]
#[command(group(ArgGroup::new("report_kind").args(["top", "lines", "tree", "text", "collapsed", "json"])))]
#[command(group(ArgGroup::new("comparison").args(["diff", "baseline"])))]
struct Cli {
    /// Print the N functions with the most cost (default 20; --top=0 prints all). This
    /// is the report printed when none is asked for; with --diff, the number of
    /// functions listed. N must be attached with "=".
    #[arg(long, value_name = "N", num_args = 0..=1, require_equals = true, default_missing_value = "20")]
    top: Option<usize>,

    /// Print the N lines of Python code (file:line) with the most cost (default 20;
    /// --lines=0 prints all). A line's self cost is that of the samples whose innermost
    /// Python frame runs it, including the native code it called; its cumulative cost is
    /// that of the samples with it anywhere on the stack. N must be attached with "=".
    #[arg(long, value_name = "N", num_args = 0..=1, require_equals = true, default_missing_value = "20", conflicts_with = "comparison")]
    lines: Option<usize>,

    /// Print the call tree, indented, with each function's cumulative and self share
    /// and seconds; children by decreasing cumulative cost.
    #[arg(long, conflicts_with = "comparison")]
    tree: bool,

    /// Print an IgProf-like text report: flat profiles by cumulative and by self cost,
    /// then the call graph: for each function its callers and callees with their
    /// amounts.
    #[arg(long, conflicts_with = "comparison")]
    text: bool,

    /// Print folded stacks, one line per distinct stack: "frame;frame;frame TICKS"
    /// (outermost first), the input of flamegraph.pl and inferno-flamegraph.
    #[arg(long, conflicts_with = "comparison")]
    collapsed: bool,

    /// Print the profile as JSON: the counter and its total, every function with its
    /// self and cumulative amounts, and the call tree (docs/analyser.md).
    #[arg(long, conflicts_with = "comparison")]
    json: bool,

    /// Write a flame graph (SVG, made with inferno) to FILE. Nothing is printed unless a
    /// report is asked for too.
    #[arg(long, value_name = "FILE.svg", conflicts_with = "comparison")]
    flamegraph: Option<PathBuf>,

    /// Write the profile in speedscope's format (for www.speedscope.app) to FILE.
    /// Nothing is printed unless a report is asked for too.
    #[arg(long, value_name = "FILE.json", conflicts_with = "comparison")]
    speedscope: Option<PathBuf>,

    /// Write the profile as an SQLite database to FILE (tables files, functions, nodes,
    /// function_costs, calls, profile; view summary; docs/analyser.md). IgProf's -s.
    /// Nothing is printed unless a report is asked for too.
    #[arg(
        short = 's',
        long,
        value_name = "FILE.sqlite",
        conflicts_with = "comparison"
    )]
    sqlite: Option<PathBuf>,

    /// Write the profile in callgrind's format (for KCachegrind, callgrind_annotate) to
    /// FILE: self costs per function and line, calls with inclusive costs. Nothing is
    /// printed unless a report is asked for too.
    #[arg(long, value_name = "FILE", conflicts_with = "comparison")]
    callgrind: Option<PathBuf>,

    /// Write the profile as gzip-compressed pprof protobuf (profile.proto) to FILE, for
    /// `go tool pprof` and other tools: one sample per distinct stack with [samples, cpu
    /// nanoseconds]. Nothing is printed unless a report is asked for too.
    #[arg(long, value_name = "FILE.pb.gz", conflicts_with = "comparison")]
    pprof: Option<PathBuf>,

    /// Compare profile NEW with profile BASE: per function, the self and cumulative
    /// shares in both, their changes in percentage points and whether each is larger
    /// than sampling noise (two-proportion z-tests on samples, corrected for the number
    /// of tests).
    #[arg(long, num_args = 2, value_names = ["BASE", "NEW"], conflicts_with = "profiles")]
    diff: Option<Vec<PathBuf>>,

    /// IgProf's spelling of --diff: with --diff-mode, compare the PROFILEs (merged)
    /// with the baseline BASE.
    #[arg(
        short = 'b',
        long = "baseline",
        value_name = "BASE",
        requires = "diff_mode"
    )]
    baseline: Option<PathBuf>,

    /// With -b BASE: compare with the baseline (IgProf's --diff-mode).
    #[arg(long, requires = "baseline")]
    diff_mode: bool,

    /// The significance level of the comparison, after correction (0 < ALPHA < 1).
    #[arg(long, value_name = "ALPHA", default_value_t = diff::DEFAULT_ALPHA, value_parser = parse_alpha, requires = "comparison")]
    alpha: f64,

    /// The correction of the comparison's p-values for testing every function's self
    /// and cumulative share: bonferroni (family-wise error at most ALPHA) or bh
    /// (Benjamini-Hochberg, false discovery rate at most ALPHA).
    #[arg(long, value_enum, default_value_t = CorrectionArg::Bonferroni, requires = "comparison")]
    correction: CorrectionArg,

    /// With a comparison: exit with status 1 when some function's self or cumulative
    /// share grew by more than PCT percentage points and the growth is significant.
    #[arg(long, value_name = "PCT", value_parser = parse_points, requires = "comparison")]
    fail_on_regression: Option<f64>,

    /// The format of the comparison: text (for a terminal or a CI log) or markdown (a
    /// table for a pull-request comment).
    #[arg(long, value_enum, default_value_t = FormatArg::Text, requires = "comparison")]
    format: FormatArg,

    /// Same as --format markdown.
    #[arg(long, requires = "comparison", conflicts_with = "format")]
    markdown: bool,

    /// Show every frame as the profile has it. By default (the Python view) the
    /// interpreter's plumbing below a Python frame (evaluation loop, call dispatch,
    /// trampolines, and its unnamed frames) is hidden and its time counts as its
    /// caller's, so that stacks read Python function -> native function (builtin_sorted,
    /// sre_search, gc_collect_main, an extension's or a library's). Applies to every
    /// report.
    #[arg(long)]
    all_frames: bool,

    /// Which counter value to use: normal (the amount: ticks, bytes) or peak (the third
    /// value of the dump, e.g. IgProf's MEM_LIVE peak bytes; pyigprof writes ticks there
    /// too).
    #[arg(long, value_enum, default_value_t = ValueArg::Normal)]
    value: ValueArg,

    /// IgProf's -ml: make each file (library, executable, Python module) one function
    /// named after its path, consecutive frames of one file one frame. With =REGEXP,
    /// only the files whose path matches. REGEXP must be attached with "=".
    #[arg(long, value_name = "REGEXP", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    merge_libraries: Option<String>,

    /// IgProf's -mr: rename the functions that RULES match (by name, else by file) and
    /// make those with the same new name one function. RULES: s/REGEXP/REPLACEMENT/
    /// (several separated by ";", any punctuation instead of "/"), or a plain REGEXP:
    /// the new name is its first group's text, or the whole match. Repeatable.
    #[arg(long, value_name = "RULES")]
    merge_regexp: Vec<String>,

    /// Start the stacks that go through a function REGEXP matches (by name, else by
    /// file) at its outermost frame: its callers are left out of those stacks.
    #[arg(long, value_name = "REGEXP")]
    merge_ancestors: Option<String>,

    /// Leave out the frames of the functions REGEXP matches (by name, else by file):
    /// their cost counts as their caller's, as the Python view does for the
    /// interpreter's plumbing. Outermost frames are kept. E.g. --hide libpython (an
    /// interpreter built as a shared library) counts all the interpreter's work (integer
    /// arithmetic, allocation, list.sort) as the Python functions' own time.
    #[arg(long, value_name = "REGEXP")]
    hide: Option<String>,

    /// IgProf's -mc: drop the values of every call-tree node whose own amount (ticks,
    /// bytes) of the reported counter is below N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..))]
    min_count_value: Option<i64>,

    /// IgProf's -Mc: drop the values of every node whose own amount is above N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..))]
    max_count_value: Option<i64>,

    /// IgProf's -mf: drop the values of every node with fewer than N samples (calls).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..))]
    min_calls_value: Option<i64>,

    /// IgProf's -Mf: drop the values of every node with more than N samples (calls).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..))]
    max_calls_value: Option<i64>,

    /// IgProf's -ma: drop the values of every node whose amount per sample (call) is
    /// below N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..))]
    min_average_value: Option<i64>,

    /// IgProf's -Ma: drop the values of every node whose amount per sample (call) is
    /// above N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..))]
    max_average_value: Option<i64>,

    /// IgProf's --calls: --top and --text add the samples (calls, for counters that are
    /// not ticks) of each function and call.
    #[arg(short = 'c', long, conflicts_with_all = ["lines", "tree", "collapsed", "json", "comparison"])]
    calls: bool,

    /// IgProf's --paths: --top and --text add each function's (and call's) number of
    /// call paths: the places of the call tree where it is.
    #[arg(short = 'p', long, conflicts_with_all = ["lines", "tree", "collapsed", "json", "comparison"])]
    paths: bool,

    /// The counter to report on, e.g. PERF_TICKS (CPU time) or, for IgProf memory
    /// profiles, MEM_TOTAL.
    #[arg(short = 'r', long = "report", value_name = "COUNTER", default_value = report::DEFAULT_COUNTER)]
    counter: String,

    /// Sort the rows by self cost or by cumulative (inclusive) cost.
    #[arg(long, value_enum, default_value_t = OrderArg::SelfCost)]
    order: OrderArg,

    /// Leave the native functions that the profiles have no name for (@?0x…) as they
    /// are. By default they are named from the binaries on this machine: their symbol
    /// tables, separate debug files and DWARF (docs/analyser.md).
    #[arg(long)]
    no_resolve: bool,

    /// Look for separate debug files (by build-id: DIR/.build-id/xx/yyyy.debug, or by
    /// path) under DIR instead of /usr/lib/debug. May be given several times.
    #[arg(long, value_name = "DIR", conflicts_with = "no_resolve")]
    debug_dir: Vec<PathBuf>,

    /// The profiles to read (plain or gzip-compressed dumps).
    #[arg(value_name = "PROFILE", required_unless_present = "diff")]
    profiles: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OrderArg {
    /// Self (exclusive) cost first.
    #[value(name = "self")]
    SelfCost,
    /// Cumulative (inclusive) cost first.
    #[value(name = "cumulative")]
    Cumulative,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ValueArg {
    /// The amount (second value).
    Normal,
    /// The peak (third value).
    Peak,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CorrectionArg {
    /// Bonferroni.
    Bonferroni,
    /// Benjamini-Hochberg.
    Bh,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FormatArg {
    /// Plain text.
    Text,
    /// Markdown.
    Markdown,
}

/// A significance level: a number strictly between 0 and 1.
fn parse_alpha(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(alpha) if alpha > 0.0 && alpha < 1.0 => Ok(alpha),
        _ => Err(format!(
            "expected a number between 0 and 1 (exclusive), found {text:?}"
        )),
    }
}

/// A number of percentage points: a finite number from 0.
fn parse_points(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(points) if points >= 0.0 && points.is_finite() => Ok(points),
        _ => Err(format!(
            "expected a number of percentage points from 0, found {text:?}"
        )),
    }
}

/// What the command prints on stdout, and its exit status.
struct Done {
    stdout: Vec<u8>,
    status: u8,
}

/// IgProf's options spelt with one dash and two letters, and their long names.
const IGPROF_SPELLINGS: [(&str, &str); 8] = [
    ("-ml", "--merge-libraries"),
    ("-mr", "--merge-regexp"),
    ("-mc", "--min-count-value"),
    ("-Mc", "--max-count-value"),
    ("-mf", "--min-calls-value"),
    ("-Mf", "--max-calls-value"),
    ("-ma", "--min-average-value"),
    ("-Ma", "--max-average-value"),
];

/// Options whose value is the next argument (how many), so that a value spelt like
/// one of [`IGPROF_SPELLINGS`] is left alone.
const TAKES_VALUES: &[(&str, usize)] = &[
    ("-r", 1),
    ("--report", 1),
    ("--order", 1),
    ("--diff", 2),
    ("-b", 1),
    ("--baseline", 1),
    ("--alpha", 1),
    ("--correction", 1),
    ("--fail-on-regression", 1),
    ("--format", 1),
    ("--flamegraph", 1),
    ("--speedscope", 1),
    ("-s", 1),
    ("--sqlite", 1),
    ("--callgrind", 1),
    ("--pprof", 1),
    ("--value", 1),
    ("--merge-regexp", 1),
    ("-mr", 1),
    ("--merge-ancestors", 1),
    ("--hide", 1),
    ("--min-count-value", 1),
    ("-mc", 1),
    ("--max-count-value", 1),
    ("-Mc", 1),
    ("--min-calls-value", 1),
    ("-mf", 1),
    ("--max-calls-value", 1),
    ("-Mf", 1),
    ("--min-average-value", 1),
    ("-ma", 1),
    ("--max-average-value", 1),
    ("-Ma", 1),
];

/// The command line with IgProf's two-letter options (`-ml`, `-mr`, `-mc`, `-Mc`, `-mf`,
/// `-Mf`, `-ma`, `-Ma`) replaced by their long names, which clap understands; values of
/// options and everything after `--` are left as they are.
fn igprof_spellings(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut values = 0usize;
    let mut rest = false;
    for arg in args {
        if rest || values > 0 {
            values = values.saturating_sub(1);
            out.push(arg);
            continue;
        }
        let text = arg.to_str().unwrap_or("");
        if text == "--" {
            rest = true;
        }
        values = TAKES_VALUES
            .iter()
            .find(|(option, _)| *option == text)
            .map_or(0, |&(_, count)| count);
        match IGPROF_SPELLINGS.iter().find(|(short, _)| *short == text) {
            Some((_, long)) => out.push(OsString::from(long)),
            None => out.push(arg),
        }
    }
    out
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(igprof_spellings(std::env::args_os()));
    let view = if cli.all_frames {
        View::AllFrames
    } else {
        View::Python
    };
    let done = transforms(&cli).and_then(|transform| match (&cli.diff, &cli.baseline) {
        (Some(paths), _) => compare(&cli, view, &transform, &paths[..1], &paths[1..]),
        (None, Some(base)) => compare(
            &cli,
            view,
            &transform,
            std::slice::from_ref(base),
            &cli.profiles,
        ),
        (None, None) => reports(&cli, view, &transform),
    });
    let done = match done {
        Ok(done) => done,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    let mut stdout = io::stdout().lock();
    match stdout.write_all(&done.stdout).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::from(done.status),
        // `pyigprof-analyse ... | head` is fine.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(done.status),
        Err(error) => {
            eprintln!(
                "{}: cannot write the report: {error}",
                igprof_analyse::error::PROGRAM
            );
            ExitCode::from(2)
        }
    }
}

/// The reshaping options of the command line (regular expressions compiled).
///
/// # Errors
/// [`Error::Option`] for an invalid regular expression or `--merge-regexp` rule.
fn transforms(cli: &Cli) -> Result<transform::Options, Error> {
    let pattern = |option: &str, value: &Option<String>| {
        value
            .as_deref()
            .map(|pattern| transform::compile_option(option, pattern))
            .transpose()
    };
    let mut merge_rules = Vec::new();
    for rules in &cli.merge_regexp {
        merge_rules.extend(MergeRule::parse(rules).map_err(|message| Error::Option {
            option: "--merge-regexp".to_string(),
            message,
        })?);
    }
    Ok(transform::Options {
        value: match cli.value {
            ValueArg::Normal => Value::Normal,
            ValueArg::Peak => Value::Peak,
        },
        counter: cli.counter.clone(),
        counts: CountFilter {
            min_amount: cli.min_count_value,
            max_amount: cli.max_count_value,
            min_count: cli.min_calls_value,
            max_count: cli.max_calls_value,
            min_average: cli.min_average_value,
            max_average: cli.max_average_value,
        },
        hide: pattern("--hide", &cli.hide)?,
        merge_ancestors: pattern("--merge-ancestors", &cli.merge_ancestors)?,
        merge_libraries: match cli.merge_libraries.as_deref() {
            None => None,
            Some("") => Some(None),
            Some(files) => Some(Some(transform::compile_option("--merge-libraries", files)?)),
        },
        merge_rules,
    })
}

/// The profiles at `paths`, merged, with names for unnamed native functions (unless
/// --no-resolve; warnings on stderr), with the values `transform` selects, in `view`,
/// reshaped by `transform`.
fn read(
    cli: &Cli,
    paths: &[PathBuf],
    view: View,
    transform: &transform::Options,
) -> Result<Profile, Error> {
    let mut profile = igprof_analyse::progress::read_profiles(paths)?;
    if !cli.no_resolve {
        let mut options = resolve::Options::default();
        if !cli.debug_dir.is_empty() {
            options.debug_dirs = cli.debug_dir.clone();
        }
        let resolved = resolve::resolve(profile, &options);
        for warning in &resolved.warnings {
            eprintln!("{warning}");
        }
        profile = resolved.profile;
    }
    Ok(transform.apply(view.apply(transform.apply_value(profile))))
}

/// `--diff BASE NEW` or `-b BASE --diff-mode NEW…`.
fn compare(
    cli: &Cli,
    view: View,
    transform: &transform::Options,
    base: &[PathBuf],
    new: &[PathBuf],
) -> Result<Done, Error> {
    let base = read(cli, base, view, transform)?;
    let new = read(cli, new, view, transform)?;
    let options = diff::Options {
        counter: cli.counter.clone(),
        alpha: cli.alpha,
        correction: match cli.correction {
            CorrectionArg::Bonferroni => Correction::Bonferroni,
            CorrectionArg::Bh => Correction::BenjaminiHochberg,
        },
    };
    let compared = diff::compute(&base, &new, &options)?;
    let output = diff::Output {
        limit: cli.top.unwrap_or(report::Options::default().limit),
        fail_on: cli.fail_on_regression,
    };
    let mut stdout = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = if cli.markdown || cli.format == FormatArg::Markdown {
        diff::write_markdown(&compared, &output, &mut stdout)
    } else {
        diff::write_text(&compared, &output, &mut stdout)
    };
    let regressed = cli
        .fail_on_regression
        .is_some_and(|points| !compared.regressions(points).is_empty());
    Ok(Done {
        stdout,
        status: u8::from(regressed),
    })
}

/// Writes what `write` produces into the file at `path`.
fn write_file(
    path: &Path,
    write: impl FnOnce(&mut Vec<u8>) -> io::Result<()>,
) -> Result<(), Error> {
    let mut content = Vec::new();
    write(&mut content)
        .and_then(|()| fs::write(path, &content))
        .map_err(|error| Error::Write {
            file: path.display().to_string(),
            detail: error.to_string(),
        })
}

/// The reports on one profile (the merge of the PROFILEs).
fn reports(cli: &Cli, view: View, transform: &transform::Options) -> Result<Done, Error> {
    let profile = read(cli, &cli.profiles, view, transform)?;
    let options = report::Options {
        counter: cli.counter.clone(),
        limit: cli
            .lines
            .or(cli.top)
            .unwrap_or(report::Options::default().limit),
        order: match cli.order {
            OrderArg::SelfCost => report::Order::SelfAmount,
            OrderArg::Cumulative => report::Order::Cumulative,
        },
        calls: cli.calls,
        paths: cli.paths,
    };
    if let Some(path) = &cli.flamegraph {
        let graph = flamegraph::compute(&profile, &options)?;
        write_file(path, |out| flamegraph::write(&profile, &graph, out))?;
    }
    if let Some(path) = &cli.speedscope {
        let file = speedscope::compute(&profile, &options)?;
        write_file(path, |out| speedscope::write(&file, out))?;
    }
    if let Some(path) = &cli.sqlite {
        let database = sqlite::compute(&profile, &options)?;
        let settings = sqlite::Settings {
            view: match view {
                View::Python => "python",
                View::AllFrames => "all-frames",
            }
            .to_string(),
            value: match cli.value {
                ValueArg::Normal => "normal",
                ValueArg::Peak => "peak",
            }
            .to_string(),
            arguments: std::env::args_os()
                .skip(1)
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect::<Vec<String>>()
                .join(" "),
        };
        sqlite::write(&profile, &database, &settings, path)?;
    }
    if let Some(path) = &cli.callgrind {
        let file = callgrind::compute(&profile, &options)?;
        write_file(path, |out| callgrind::write(&file, out))?;
    }
    if let Some(path) = &cli.pprof {
        let file = pprof::compute(&profile, &options)?;
        write_file(path, |out| pprof::write(&file, out))?;
    }
    let files_only = cli.flamegraph.is_some()
        || cli.speedscope.is_some()
        || cli.sqlite.is_some()
        || cli.callgrind.is_some()
        || cli.pprof.is_some();
    let mut stdout = Vec::new();
    // Writing into a Vec cannot fail: only computing a report can.
    let _ = if cli.lines.is_some() {
        let computed = lines::compute(&profile, &options)?;
        report::write(&profile, &computed, &mut stdout)
    } else if cli.tree {
        let computed = tree::compute(&profile, &options)?;
        tree::write(&profile, &computed, &mut stdout)
    } else if cli.text {
        let computed = text::compute(&profile, &options)?;
        text::write(&profile, &computed, &mut stdout)
    } else if cli.collapsed {
        let computed = collapsed::compute(&profile, &options)?;
        collapsed::write(&computed, &mut stdout)
    } else if cli.json {
        let computed = json::compute(&profile, &options)?;
        json::write(&computed, &mut stdout)
    } else if cli.top.is_some() || !files_only {
        let computed = top::compute(&profile, &options)?;
        report::write(&profile, &computed, &mut stdout)
    } else {
        Ok(())
    };
    Ok(Done { stdout, status: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spelled(args: &[&str]) -> Vec<String> {
        igprof_spellings(args.iter().map(OsString::from))
            .into_iter()
            .map(|arg| arg.into_string().unwrap())
            .collect()
    }

    #[test]
    fn igprof_two_letter_options_become_long_ones() {
        assert_eq!(
            spelled(&[
                "pyigprof-analyse",
                "-ml",
                "-mr",
                "s/a/b/",
                "-mc",
                "5",
                "-Mc",
                "9",
                "p.gz"
            ]),
            [
                "pyigprof-analyse",
                "--merge-libraries",
                "--merge-regexp",
                "s/a/b/",
                "--min-count-value",
                "5",
                "--max-count-value",
                "9",
                "p.gz"
            ]
        );
        // Values of options and everything after "--" are left alone.
        assert_eq!(
            spelled(&["x", "--hide", "-mc", "-mr", "-ml", "--", "-Mc"]),
            ["x", "--hide", "-mc", "--merge-regexp", "-ml", "--", "-Mc"]
        );
        assert_eq!(
            spelled(&["x", "--diff", "-ml", "-mr", "-ma"]),
            ["x", "--diff", "-ml", "-mr", "--min-average-value"]
        );
    }

    #[test]
    fn command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
