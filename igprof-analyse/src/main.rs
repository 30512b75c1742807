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
    self, callgrind, collapsed, diff, flamegraph, json, lines, pprof, speedscope, sqlite, stacks,
    text, top, tree,
};
use igprof_analyse::resolve;
use igprof_analyse::stats::Correction;
use igprof_analyse::transform::{self, AncestorRule, CountFilter, MergeRule, Value};
use igprof_analyse::view::View;
use igprof_analyse::{Error, Profile};
use pyigprof_pprof::plural;

/// Reads IgProf-format profiles (from pyigprof or IgProf, plain or gzip) and prints
/// reports. Several profiles are merged into one. By default the Python view is shown
/// (see --all-frames) and the report is --top.
#[derive(Debug, Parser)]
#[command(name = "pyigprof-analyse", version)]
#[command(group(ArgGroup::new("report_kind").args(["top", "top_stacks", "lines", "tree", "text", "collapsed", "json"])))]
#[command(group(ArgGroup::new("comparison").args(["diff", "baseline"])))]
struct Cli {
    /// Print the N functions with the most cost (default 20; --top=0 prints all), each
    /// share with its 95% confidence interval and samples where it has a sampling error
    /// (docs/analyser.md). This is the report printed when none is asked for; with
    /// --diff, the number of functions listed. N must be attached with "=": IgProf's
    /// "--top N", with a space, is --top-stacks.
    #[arg(long, value_name = "N", num_args = 0..=1, require_equals = true, default_missing_value = "20")]
    top: Option<usize>,

    /// IgProf's --top N (also -tn N, and --top N with a space): print the N call stacks
    /// with the most self cost, each from its innermost frame to the outermost, as
    /// IgProf prints them ("## Entry 1 (0.45 seconds)", "#0 function", ...).
    #[arg(long, value_name = "N", conflicts_with = "comparison")]
    top_stacks: Option<usize>,

    /// Print the N lines of Python code (file:line) with the most cost (default 20;
    /// --lines=0 prints all). A line's self cost is that of the samples whose innermost
    /// Python frame runs it, including the native code it called; its cumulative cost is
    /// that of the samples with it anywhere on the stack. N must be attached with "=".
    #[arg(long, value_name = "N", num_args = 0..=1, require_equals = true, default_missing_value = "20", conflicts_with = "comparison")]
    lines: Option<usize>,

    /// Print the call tree, indented, with each function's cumulative and self share
    /// and seconds; children by decreasing cumulative cost.
    #[arg(short = 'T', long, conflicts_with = "comparison")]
    tree: bool,

    /// Print an IgProf-like text report: flat profiles by cumulative and by self cost,
    /// then the call graph: for each function its callers and callees with their
    /// amounts. IgProf's -t.
    #[arg(short = 't', long, conflicts_with = "comparison")]
    text: bool,

    /// Print folded stacks, one line per distinct stack: "frame;frame;frame TICKS"
    /// (outermost first), the input of flamegraph.pl and inferno-flamegraph.
    #[arg(long, conflicts_with = "comparison")]
    collapsed: bool,

    /// Print the profile as JSON: the counter and its total, every function with its
    /// self and cumulative amounts, and the call tree (docs/analyser.md). IgProf's -js
    /// (whose JSON has another shape).
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

    /// --sqlite=FILE: write the profile as an SQLite database to FILE (tables files,
    /// functions, nodes, function_costs, calls, profile; view summary; docs/analyser.md);
    /// nothing is printed unless a report is asked for too. --sqlite or -s without a
    /// file (IgProf's spelling): print the same database as SQL on stdout, for
    /// "| sqlite3 FILE". FILE must be attached with "=".
    #[arg(
        short = 's',
        long,
        value_name = "FILE.sqlite",
        num_args = 0..=1,
        require_equals = true,
        conflicts_with = "comparison"
    )]
    sqlite: Option<Option<PathBuf>>,

    /// Write the profile in callgrind's format (for KCachegrind, callgrind_annotate) to
    /// FILE: self costs per function and line, calls with inclusive costs. Nothing is
    /// printed unless a report is asked for too.
    #[arg(long, value_name = "FILE", conflicts_with = "comparison")]
    callgrind: Option<PathBuf>,

    /// Write the profile as gzip-compressed pprof protobuf (profile.proto) to FILE, for
    /// `go tool pprof` and other tools: one sample per distinct stack with [samples, cpu
    /// nanoseconds], or for memory counters [objects, bytes] (alloc_space for MEM_TOTAL,
    /// inuse_space for MEM_LIVE), for event counters [samples, events] (page_faults for
    /// PERF_PAGE_FAULTS). Nothing is printed unless a report is asked for too.
    #[arg(long, value_name = "FILE.pb.gz", conflicts_with = "comparison")]
    pprof: Option<PathBuf>,

    /// --diff BASE NEW: compare profile NEW with profile BASE: per function, the self and
    /// cumulative shares in both, their changes in percentage points and whether each is
    /// larger than noise (two-proportion z-tests on samples, corrected for the number of
    /// tests). --diff B1 B2 B3 -- N1 N2 N3: several runs per side, each file one run;
    /// the shares are those of each side's runs merged, and each function's own
    /// run-to-run variation, measured between the runs, is allowed for (with one run per
    /// side a common one is estimated from the comparison). Event counters
    /// (PERF_PAGE_FAULTS, ...) are tested on their samples, as ticks are. Memory
    /// counters (MEM_*) are tested on their bytes divided by the mean bytes between
    /// recorded allocations; exact ones by --min-change.
    #[arg(long, num_args = 0.., value_name = "PROFILE", conflicts_with = "profiles")]
    diff: Option<Vec<PathBuf>>,

    /// The new side of --diff B1 B2 -- N1 N2: the command line's `--` right after
    /// --diff's profiles becomes this option ([`igprof_spellings`]), so that options may
    /// follow the new profiles.
    #[arg(long, num_args = 0.., value_name = "NEW", requires = "diff", hide = true)]
    diff_new: Option<Vec<PathBuf>>,

    /// IgProf's spelling of --diff: with --diff-mode, compare the PROFILEs with the
    /// baseline BASE. Repeatable: each BASE and each PROFILE is one run, as with --diff
    /// B1 B2 -- N1 N2.
    #[arg(
        short = 'b',
        long = "baseline",
        value_name = "BASE",
        requires = "diff_mode",
        action = clap::ArgAction::Append
    )]
    baseline: Vec<PathBuf>,

    /// With -b BASE: compare with the baseline (IgProf's --diff-mode, -D).
    #[arg(short = 'D', long, requires = "baseline")]
    diff_mode: bool,

    /// The significance level of the comparison, after correction (0 < ALPHA < 1).
    #[arg(long, value_name = "ALPHA", default_value_t = diff::DEFAULT_ALPHA, value_parser = parse_alpha, requires = "comparison")]
    alpha: f64,

    /// The correction of the comparison's p-values for testing every function's self
    /// and cumulative share: bonferroni (family-wise error at most ALPHA) or bh
    /// (Benjamini-Hochberg, false discovery rate at most ALPHA).
    #[arg(long, value_enum, default_value_t = CorrectionArg::Bonferroni, requires = "comparison")]
    correction: CorrectionArg,

    /// With several runs on a side of a comparison: the weight, in degrees of freedom, of
    /// the dispersion pooled over all shares in each share's own moderated one
    /// (docs/analyser.md; 3, chosen on bench/diff-calibration). 0: each share's own
    /// run-to-run variation alone; a large weight: the pooled one alone.
    #[arg(long, value_name = "D0", default_value_t = diff::DEFAULT_PRIOR_WEIGHT, value_parser = parse_weight, requires = "comparison")]
    prior_weight: f64,

    /// With a comparison: exit with status 1 when some function's self or cumulative
    /// share grew by more than PCT percentage points and the growth is significant.
    #[arg(long, value_name = "PCT", value_parser = parse_points, requires = "comparison")]
    fail_on_regression: Option<f64>,

    /// With a comparison of memory counters whose figures are exact in both profiles
    /// (every allocation recorded: IgProf's, pyigprof's at rate 1), which have no
    /// sampling noise to test, and of MEM_MAX: a share is significant when it changed
    /// by at least PCT percentage points.
    #[arg(long, value_name = "PCT", default_value_t = diff::DEFAULT_MIN_CHANGE, value_parser = parse_points, requires = "comparison")]
    min_change: f64,

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
    /// file) at its outermost frame: its callers are left out of those stacks. With a
    /// "/" (IgProf's form, also -ma): ANCESTOR[>ANCESTOR...]/NAME renames the frame the
    /// last ANCESTOR matches, below frames the others match in order, to NAME, and the
    /// frames it calls to NAME:CALLEE (their own names after the colon). Write "\\/"
    /// for a slash in a REGEXP.
    #[arg(long, value_name = "REGEXP|A>B/NAME")]
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

    /// Drop the values of every node whose amount per sample (call) is below N (IgProf's
    /// --min-average-value; its -ma is --merge-ancestors).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..))]
    min_average_value: Option<i64>,

    /// IgProf's -Ma: drop the values of every node whose amount per sample (call) is
    /// above N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..))]
    max_average_value: Option<i64>,

    /// IgProf's --calls: --top and --text add the samples (allocations or blocks for
    /// memory counters, calls for other counters that are neither ticks nor events) of
    /// each function and call. Their tables show them anyway where shares have a
    /// sampling error; --text's call graph only with --calls.
    #[arg(short = 'c', long, conflicts_with_all = ["lines", "tree", "collapsed", "json", "comparison"])]
    calls: bool,

    /// IgProf's --paths: --top and --text add each function's (and call's) number of
    /// call paths: the places of the call tree where it is.
    #[arg(short = 'p', long, conflicts_with_all = ["lines", "tree", "collapsed", "json", "comparison"])]
    paths: bool,

    /// The counter to report on, e.g. PERF_TICKS (CPU time) or, for memory profiles,
    /// MEM_TOTAL (bytes allocated), MEM_LIVE (bytes still allocated), MEM_MAX (largest
    /// allocation), MEM_LIVE_PEAK (bytes live at the program's peak), or a sampled event
    /// counter: PERF_PAGE_FAULTS, PERF_CONTEXT_SWITCHES, PERF_CYCLES, ... (events). By
    /// default the first counter of the (first) profile that has values, as IgProf does.
    #[arg(short = 'r', long = "report", value_name = "COUNTER")]
    counter: Option<String>,

    /// Sort the rows by self cost or by cumulative (inclusive) cost; IgProf's
    /// ascending (its default: by cumulative cost, largest first) and descending
    /// (smallest first).
    #[arg(short = 'o', long, value_enum, default_value_t = OrderArg::SelfCost)]
    order: OrderArg,

    /// IgProf's -v: say on stderr what was read (profiles, nodes, functions, counters),
    /// which counter is reported and which filters apply.
    #[arg(short = 'v', long)]
    verbose: bool,

    /// IgProf's -nf: turn off IgProf's default filters. By default, as IgProf, the
    /// frames of IgProf's own libraries are merged into their callers; for memory
    /// counters (MEM_*), allocation functions (malloc, calloc, realloc, operator new,
    /// ...) give their cost to their callers; for MEM_LIVE, libstdc++'s pool allocator
    /// is left out (docs/analyser.md).
    #[arg(long)]
    no_filter: bool,

    /// IgProf's -l: show each function's library (file) after its name. Every report
    /// here already does ("name  (/usr/lib/libz.so.1)"): accepted for IgProf's command
    /// lines.
    #[arg(short = 'l', long)]
    libs: bool,

    /// IgProf's -d: demangle C++ and Rust names. Always done here: accepted for IgProf's
    /// command lines.
    #[arg(short = 'd', long)]
    demangle: bool,

    /// IgProf's -g: name unnamed native functions from the binaries. Done here by
    /// default (see --no-resolve), without gdb: accepted for IgProf's command lines.
    #[arg(short = 'g', long, conflicts_with = "no_resolve")]
    gdb: bool,

    /// IgProf's memory-page reports (--dump-allocations, --show-pages,
    /// --show-page-ranges, --show-locality-metrics) read the addresses of live
    /// allocations (;LK= records): not offered here; exits with status 2.
    #[arg(long, hide = true)]
    dump_allocations: bool,

    #[arg(long, hide = true)]
    show_pages: bool,

    #[arg(long, hide = true)]
    show_page_ranges: bool,

    #[arg(long, hide = true)]
    show_locality_metrics: bool,

    /// Read a profile that stops before its end (its writing stopped: a full disk, a
    /// process killed while writing, a copy cut short; gzip or plain, cut anywhere) up to
    /// its last whole line, with a warning line saying how much was read, instead of
    /// refusing it. Its reports miss what was never written.
    #[arg(long)]
    read_cut_short: bool,

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
    /// Cumulative (inclusive) cost first (also `ascending`, IgProf's name for it).
    #[value(name = "cumulative", alias = "ascending")]
    Cumulative,
    /// IgProf's descending: the smallest cumulative cost first.
    #[value(name = "descending")]
    Descending,
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

/// A prior weight in degrees of freedom: a finite number from 0.
fn parse_weight(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(weight) if weight >= 0.0 && weight.is_finite() => Ok(weight),
        _ => Err(format!(
            "expected a number of degrees of freedom from 0, found {text:?}"
        )),
    }
}

/// What the command prints on stdout, and its exit status.
struct Done {
    stdout: Vec<u8>,
    status: u8,
}

/// IgProf's options spelt with one dash and two letters, and their long names.
const IGPROF_SPELLINGS: [(&str, &str); 11] = [
    ("-ml", "--merge-libraries"),
    ("-mr", "--merge-regexp"),
    ("-mc", "--min-count-value"),
    ("-Mc", "--max-count-value"),
    ("-mf", "--min-calls-value"),
    ("-Mf", "--max-calls-value"),
    ("-ma", "--merge-ancestors"),
    ("-Ma", "--max-average-value"),
    ("-nf", "--no-filter"),
    ("-js", "--json"),
    ("-tn", "--top-stacks"),
];

/// Options whose value is the next argument (how many), so that a value spelt like
/// one of [`IGPROF_SPELLINGS`] is left alone.
const TAKES_VALUES: &[(&str, usize)] = &[
    ("-r", 1),
    ("--report", 1),
    ("--order", 1),
    ("-o", 1),
    ("-tn", 1),
    ("--top-stacks", 1),
    ("-b", 1),
    ("--baseline", 1),
    ("--alpha", 1),
    ("--correction", 1),
    ("--fail-on-regression", 1),
    ("--min-change", 1),
    ("--prior-weight", 1),
    ("--format", 1),
    ("--flamegraph", 1),
    ("--speedscope", 1),
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

/// The command line with IgProf's two-letter options ([`IGPROF_SPELLINGS`]) replaced by
/// their long names, which clap understands, and IgProf's `--top N` (a number as the next
/// argument) by `--top-stacks N`; values of options and everything after `--` are left
/// as they are. The `--` of `--diff B1 B2 -- N1 N2`, right after --diff's profiles (the
/// arguments after it that do not start with `-`), becomes `--diff-new`: the new side's
/// profiles are then that option's values, and options may follow them (after a plain
/// `--` clap would take them as profiles).
fn igprof_spellings(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut values = 0usize;
    let mut rest = false;
    let mut args = args.into_iter().peekable();
    while let Some(arg) = args.next() {
        if rest || values > 0 {
            values = values.saturating_sub(1);
            out.push(arg);
            continue;
        }
        let text = arg.to_str().unwrap_or("");
        if text == "--diff" {
            out.push(arg);
            while let Some(profile) = args.next_if(|next| {
                next.to_str()
                    .is_none_or(|next| !next.starts_with('-') || next == "-")
            }) {
                out.push(profile);
            }
            if args.next_if(|next| next == "--").is_some() {
                out.push(OsString::from("--diff-new"));
            }
            continue;
        }
        if text == "--" {
            rest = true;
        }
        let number_follows = args
            .peek()
            .and_then(|next| next.to_str())
            .is_some_and(|next| !next.is_empty() && next.bytes().all(|b| b.is_ascii_digit()));
        let text = if text == "--top" && number_follows {
            "--top-stacks"
        } else {
            text
        };
        values = TAKES_VALUES
            .iter()
            .find(|(option, _)| *option == text)
            .map_or(0, |&(_, count)| count);
        match IGPROF_SPELLINGS.iter().find(|(short, _)| *short == text) {
            Some((_, long)) => out.push(OsString::from(long)),
            None if text == "--top-stacks" => out.push(OsString::from(text)),
            None => out.push(arg),
        }
    }
    out
}

/// The `N` of IgProf's `--top N` (with a space) on the command line `args`, before any
/// `--`: the stack listing, not the function table that `--top=N` prints.
fn igprof_top(args: &[OsString]) -> Option<&str> {
    args.iter()
        .take_while(|arg| *arg != "--")
        .zip(args.iter().skip(1))
        .find(|(arg, next)| {
            *arg == "--top"
                && next
                    .to_str()
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .and_then(|(_, n)| n.to_str())
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(n) = igprof_top(&args) {
        // Said once, on stderr: the report itself is what IgProf prints for it.
        eprintln!(
            "pyigprof-analyse: --top {n} (with a space) is IgProf's --top: the {n} heaviest call stacks; --top={n} lists the {n} functions with the most cost"
        );
    }
    let cli = Cli::parse_from(igprof_spellings(args));
    let view = if cli.all_frames {
        View::AllFrames
    } else {
        View::Python
    };
    let sides = match diff_sides(&cli) {
        Ok(sides) => sides,
        Err(message) => {
            // A command-line mistake, said as clap says its own.
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let done =
        unsupported(&cli)
            .and_then(|()| transforms(&cli))
            .and_then(|transform| match &sides {
                Some((base, new)) => compare(&cli, view, &transform, base, new),
                None => reports(&cli, view, &transform),
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

/// The profiles of a comparison's two sides, base and new: one file per run.
type Sides = (Vec<PathBuf>, Vec<PathBuf>);

/// The base and new runs of a comparison: `--diff BASE NEW`, `--diff B1 B2 -- N1 N2`
/// (its `--` made `--diff-new` by [`igprof_spellings`]) or `-b BASE… --diff-mode NEW…`;
/// `None` without a comparison.
///
/// # Errors
/// One line saying which side is missing, or that several profiles were given without
/// `--` between the sides.
fn diff_sides(cli: &Cli) -> Result<Option<Sides>, String> {
    const FORM: &str = "--diff BASE NEW, or several runs per side: --diff B1 B2 B3 -- N1 N2 N3";
    let Some(base) = &cli.diff else {
        return Ok((!cli.baseline.is_empty()).then(|| (cli.baseline.clone(), cli.profiles.clone())));
    };
    match (base.len(), &cli.diff_new) {
        (0, None) => Err(format!("--diff: no profiles to compare ({FORM})")),
        (0, Some(_)) => Err(format!(
            "--diff: the base side is missing: no profiles before `--` ({FORM})"
        )),
        (_, Some(new)) if new.is_empty() => Err(format!(
            "--diff: the new side is missing: no profiles after `--` ({FORM})"
        )),
        (_, Some(new)) => Ok(Some((base.clone(), new.clone()))),
        (1, None) => Err(format!(
            "--diff: the new side is missing: only {} given ({FORM})",
            base[0].display()
        )),
        (2, None) => Ok(Some((vec![base[0].clone()], vec![base[1].clone()]))),
        (count, None) => Err(format!(
            "--diff: {count} profiles without `--` between the sides: which are the new ones? ({FORM})"
        )),
    }
}

/// IgProf's options that this analyser does not offer, each refused with one line.
///
/// # Errors
/// [`Error::Option`] naming the option and why.
fn unsupported(cli: &Cli) -> Result<(), Error> {
    let pages = [
        ("--dump-allocations", cli.dump_allocations),
        ("--show-pages", cli.show_pages),
        ("--show-page-ranges", cli.show_page_ranges),
        ("--show-locality-metrics", cli.show_locality_metrics),
    ];
    if let Some((option, _)) = pages.iter().find(|(_, set)| *set) {
        return Err(Error::Option {
            option: option.to_string(),
            message: "IgProf's reports on the memory pages of live allocations need their \
                      addresses (;LK= records), which pyigprof-analyse does not keep: use \
                      IgProf's igprof-analyse for them"
                .to_string(),
        });
    }
    if let Some(counter) = cli.counter.as_deref().filter(|c| c.contains(',')) {
        return Err(Error::Option {
            option: "--report".to_string(),
            message: format!(
                "one counter per report, found {counter:?} (IgProf's igprof-analyse also \
                 reports one: it takes {counter:?} as one name); run once per counter"
            ),
        });
    }
    Ok(())
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
        // Set once the profiles are read ([`read`]): by default, their first counter.
        counter: String::new(),
        counts: CountFilter {
            min_amount: cli.min_count_value,
            max_amount: cli.max_count_value,
            min_count: cli.min_calls_value,
            max_count: cli.max_calls_value,
            min_average: cli.min_average_value,
            max_average: cli.max_average_value,
        },
        hide: pattern("--hide", &cli.hide)?,
        merge_ancestors: match cli.merge_ancestors.as_deref().map(AncestorRule::parse) {
            Some(None) => pattern("--merge-ancestors", &cli.merge_ancestors)?,
            _ => None,
        },
        ancestor_rule: cli
            .merge_ancestors
            .as_deref()
            .and_then(AncestorRule::parse)
            .transpose()
            .map_err(|message| Error::Option {
                option: "--merge-ancestors".to_string(),
                message,
            })?,
        merge_libraries: match cli.merge_libraries.as_deref() {
            None => None,
            Some("") => Some(None),
            Some(files) => Some(Some(transform::compile_option("--merge-libraries", files)?)),
        },
        merge_rules,
    })
}

/// The profiles at `paths`, merged, with names for unnamed native functions (unless
/// --no-resolve; warnings on stderr), with the values `transform` selects, IgProf's
/// default filters (unless --no-filter), in `view`, reshaped by `transform`; and the
/// counter reported: `counter`, else the first of the profile (IgProf's default), else
/// `PERF_TICKS`.
fn read(
    cli: &Cli,
    paths: &[PathBuf],
    view: View,
    transform: &transform::Options,
    counter: Option<&str>,
) -> Result<(Profile, String), Error> {
    read_with_notes(cli, paths, view, transform, counter, true)
}

/// [`read`] of `paths` on counter `counter` without its notes on stderr (warnings, -v):
/// for the runs of a comparison's side, read on their own after [`read`] read them
/// merged and said them.
fn read_quietly(
    cli: &Cli,
    paths: &[PathBuf],
    view: View,
    transform: &transform::Options,
    counter: &str,
) -> Result<Profile, Error> {
    read_with_notes(cli, paths, view, transform, Some(counter), false).map(|(profile, _)| profile)
}

/// [`read`], its notes on stderr (cut-short dumps, resolving's warnings, -v) written
/// when `notes` says so.
fn read_with_notes(
    cli: &Cli,
    paths: &[PathBuf],
    view: View,
    transform: &transform::Options,
    counter: Option<&str>,
    notes: bool,
) -> Result<(Profile, String), Error> {
    let mut profile = igprof_analyse::progress::read_profiles(paths, cli.read_cut_short)?;
    for source in profile.sources.iter().filter(|_| notes) {
        if let Some(what) = source.cut_short {
            eprintln!(
                "{}: {}: cut short: {what}; reading what there is (--read-cut-short)",
                igprof_analyse::error::PROGRAM,
                source.path
            );
        }
    }
    let first = report::default_counter(&profile);
    let default_is_first = first == profile.counters().first().map(String::as_str);
    let counter = counter
        .or(first)
        .unwrap_or(report::DEFAULT_COUNTER)
        .to_string();
    if cli.verbose && notes {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        eprintln!(
            "{}: read {}: {} {}, {} {}, {} {}, counters: {}; reporting {counter}{}",
            igprof_analyse::error::PROGRAM,
            names.join(", "),
            profile.nodes().len(),
            plural(profile.nodes().len(), "call-tree node"),
            profile.functions().len(),
            plural(profile.functions().len(), "function"),
            profile.files().len(),
            plural(profile.files().len(), "file"),
            profile.counters().join(", "),
            match (cli.counter.is_none(), default_is_first) {
                (false, _) => "",
                (true, true) => " (the first counter)",
                (true, false) => " (the first counter with values)",
            },
        );
    }
    if !cli.no_resolve {
        let mut options = resolve::Options::default();
        if !cli.debug_dir.is_empty() {
            options.debug_dirs = cli.debug_dir.clone();
        }
        let resolved = resolve::resolve(profile, &options);
        for warning in resolved.warnings.iter().filter(|_| notes) {
            eprintln!("{warning}");
        }
        profile = resolved.profile;
    }
    let mut profile = transform.apply_value(profile);
    if !cli.no_filter {
        let before = profile.nodes().len();
        profile = transform::igprof_filters(profile, &counter);
        if cli.verbose && notes {
            eprintln!(
                "{}: IgProf's default filters for {counter} (--no-filter turns them off): {} call-tree nodes merged or dropped",
                igprof_analyse::error::PROGRAM,
                before - profile.nodes().len(),
            );
        }
    }
    let transform = transform::Options {
        counter: counter.clone(),
        ..transform.clone()
    };
    Ok((transform.apply(view.apply(profile)), counter))
}

/// `--diff BASE NEW`, `--diff B1 B2 -- N1 N2` or `-b BASE… --diff-mode NEW…`: each side's
/// runs merged and, where a side has several, each run read on its own as well (the
/// same view, filters and transforms; its notes on stderr said once, by the merged
/// read) and its samples per function kept, to measure how much each share varies
/// between them.
fn compare(
    cli: &Cli,
    view: View,
    transform: &transform::Options,
    base: &[PathBuf],
    new: &[PathBuf],
) -> Result<Done, Error> {
    let (base_merged, counter) = read(cli, base, view, transform, cli.counter.as_deref())?;
    let (new_merged, _) = read(cli, new, view, transform, Some(&counter))?;
    // Each run's samples per function, its profile dropped once they are counted.
    let each = |paths: &[PathBuf]| -> Result<Vec<diff::RunSamples>, Error> {
        if paths.len() < 2 {
            return Ok(Vec::new());
        }
        paths
            .iter()
            .map(|path| {
                let run = read_quietly(cli, std::slice::from_ref(path), view, transform, &counter)?;
                diff::RunSamples::of(&run, &counter)
            })
            .collect()
    };
    let (base_each, new_each) = (each(base)?, each(new)?);
    let options = diff::Options {
        counter,
        alpha: cli.alpha,
        correction: match cli.correction {
            CorrectionArg::Bonferroni => Correction::Bonferroni,
            CorrectionArg::Bh => Correction::BenjaminiHochberg,
        },
        min_change: cli.min_change,
        prior_weight: cli.prior_weight,
    };
    let compared = diff::compute_runs(
        diff::Runs {
            merged: &base_merged,
            each: &base_each,
        },
        diff::Runs {
            merged: &new_merged,
            each: &new_each,
        },
        &options,
    )?;
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
    let (profile, counter) = read(cli, &cli.profiles, view, transform, cli.counter.as_deref())?;
    let options = report::Options {
        counter,
        limit: cli
            .lines
            .or(cli.top)
            .unwrap_or(report::Options::default().limit),
        order: match cli.order {
            OrderArg::SelfCost => report::Order::SelfAmount,
            OrderArg::Cumulative => report::Order::Cumulative,
            OrderArg::Descending => report::Order::CumulativeAscending,
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
    let mut stdout = Vec::new();
    if let Some(file) = &cli.sqlite {
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
        match file {
            Some(path) => sqlite::write(&profile, &database, &settings, path)?,
            None => sqlite::write_sql(&profile, &database, &settings, &mut stdout)?,
        }
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
    // Writing into a Vec cannot fail: only computing a report can.
    let _ = if let Some(limit) = cli.top_stacks {
        let computed = stacks::compute(&profile, &options, limit)?;
        stacks::write(&profile, &computed, &mut stdout)
    } else if cli.lines.is_some() {
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
        // --diff's profiles are left alone; its `--` (right after them) becomes
        // --diff-new, after which options are read again; a later `--` is the usual one.
        assert_eq!(
            spelled(&["x", "--diff", "b1", "b2", "--", "n1", "-ml", "--", "-mr"]),
            [
                "x",
                "--diff",
                "b1",
                "b2",
                "--diff-new",
                "n1",
                "--merge-libraries",
                "--",
                "-mr"
            ]
        );
        assert_eq!(
            spelled(&["x", "--diff", "b", "n", "-ml", "--", "-mr"]),
            ["x", "--diff", "b", "n", "--merge-libraries", "--", "-mr"]
        );
        assert_eq!(
            spelled(&["x", "--diff", "--", "n"]),
            ["x", "--diff", "--diff-new", "n"]
        );
        // IgProf's other spellings, and its --top N (a number follows) as --top-stacks.
        assert_eq!(
            spelled(&["x", "-nf", "-js", "-tn", "5", "--top", "3", "--top", "p.gz", "--top=4"]),
            [
                "x",
                "--no-filter",
                "--json",
                "--top-stacks",
                "5",
                "--top-stacks",
                "3",
                "--top",
                "p.gz",
                "--top=4"
            ]
        );
    }

    #[test]
    fn command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
