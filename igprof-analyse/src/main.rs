//! `pyigprof-analyse`: prints reports from IgProf-format profiles written by pyigprof
//! or IgProf (docs/dump-format.md, IgProf doc/dump-format).
//!
//! Exit status: 0 on success, 2 when a profile cannot be read or the report cannot be
//! computed (one line on stderr: `pyigprof-analyse: <file>[:<line>]: ...`) and for
//! command-line errors.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use igprof_analyse::report::{self, lines, top};
use igprof_analyse::view::View;

/// Reads IgProf-format profiles (from pyigprof or IgProf, plain or gzip) and prints
/// reports. Several profiles are merged into one.
#[derive(Debug, Parser)]
#[command(name = "pyigprof-analyse", version)]
struct Cli {
    /// Print the N functions with the most cost (default 20; --top=0 prints all). This
    /// is the report printed when none is asked for. N must be attached with "=".
    #[arg(long, value_name = "N", num_args = 0..=1, require_equals = true, default_missing_value = "20")]
    top: Option<usize>,

    /// Print the N lines of Python code (file:line) with the most cost (default 20;
    /// --lines=0 prints all). A line's self cost is that of the samples whose innermost
    /// Python frame runs it, including the native code it called; its cumulative cost is
    /// that of the samples with it anywhere on the stack. N must be attached with "=".
    /// Not with --top.
    #[arg(long, value_name = "N", num_args = 0..=1, require_equals = true, default_missing_value = "20", conflicts_with = "top")]
    lines: Option<usize>,

    /// The counter to report on, e.g. PERF_TICKS (CPU time) or, for IgProf memory
    /// profiles, MEM_TOTAL.
    #[arg(short = 'r', long = "report", value_name = "COUNTER", default_value = report::DEFAULT_COUNTER)]
    counter: String,

    /// Sort the rows by self cost or by cumulative (inclusive) cost.
    #[arg(long, value_enum, default_value_t = OrderArg::SelfCost)]
    order: OrderArg,

    /// Show every frame as the profile has it. By default (the Python view) the native
    /// frames of the interpreter itself (libpython*.so, the python executable) below a
    /// Python frame are hidden and their time counts as their caller's, so that stacks
    /// read Python function -> extension or library function. Applies to every report.
    #[arg(long)]
    all_frames: bool,

    /// The profiles to read (plain or gzip-compressed dumps).
    #[arg(value_name = "PROFILE", required = true)]
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let view = if cli.all_frames {
        View::AllFrames
    } else {
        View::Python
    };
    let profile = match igprof_analyse::read_profiles(&cli.profiles) {
        Ok(profile) => view.apply(profile),
        Err(error) => return fail(&error),
    };
    let options = report::Options {
        counter: cli.counter,
        limit: cli
            .lines
            .or(cli.top)
            .unwrap_or(report::Options::default().limit),
        order: match cli.order {
            OrderArg::SelfCost => report::Order::SelfAmount,
            OrderArg::Cumulative => report::Order::Cumulative,
        },
    };
    let mut text = Vec::new();
    let written = if cli.lines.is_some() {
        lines::compute(&profile, &options)
            .map(|computed| report::write(&profile, &computed, &mut text))
    } else {
        top::compute(&profile, &options)
            .map(|computed| report::write(&profile, &computed, &mut text))
    };
    // Writing into a Vec cannot fail: only computing the report can.
    if let Err(error) = written {
        return fail(&error);
    }
    let mut stdout = io::stdout().lock();
    match stdout.write_all(&text).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // `pyigprof-analyse ... | head` is fine.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!(
                "{}: cannot write the report: {error}",
                igprof_analyse::error::PROGRAM
            );
            ExitCode::from(2)
        }
    }
}

fn fail(error: &igprof_analyse::Error) -> ExitCode {
    eprintln!("{error}");
    ExitCode::from(2)
}
