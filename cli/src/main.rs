//! `pyigprof`: the one command a user types.
//!
//! - `pyigprof record [OPTIONS] -- CMD [ARGS…]` runs `CMD` with `libpyigprof.so` preloaded
//!   and the settings of its options set (`PYIGPROF_*`, README's table), passes its exit
//!   status through, and when the program has ended prints what its processes said (each
//!   profile's summary, warnings; `PYIGPROF_LOG` points them to a file of its own, so that
//!   the program's streams stay as they are), which profiles were written and how to read
//!   them (py-spy's `record`).
//! - `pyigprof attach PID [--duration S] [-o FILE] [--rate HZ]` profiles a Python process
//!   that is already running (module `attach`; `memray attach`'s habit).
//! - `pyigprof dump PID [--json] [--python]` prints every thread's call stack in a running
//!   Python process once (module `dump`; py-spy's `dump`).
//! - `pyigprof top PID` / `pyigprof top -- CMD…` shows the hottest functions live (module
//!   `top`; py-spy's `top`).
//! - `pyigprof report FILE… [OPTIONS]` is `pyigprof-analyse` (the same options).
//! - IgProf's spelling: `pyigprof -pp [-z] [-o FILE] CMD [ARGS…]` (`-mp` for the memory
//!   profiler), as `igprof -pp -z -o FILE CMD`.
//!
//! Exit status: the program's (a program ended by a signal ends this command by the same
//! signal); 2 for a command-line error or when the library or the analyser is not found.

mod attach;
mod dump;
mod inject;
mod launch;
mod top;

use clap::{Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

/// Runs a Python program under pyigprof and reads the profiles it writes.
#[derive(Debug, Parser)]
#[command(name = "pyigprof", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs CMD with the profiler: its own Python process writes a profile (with
    /// --subprocesses, every Python process it starts does: fork children too), then lists
    /// them. The program's stdout and stderr are left as they are.
    Record(Record),
    /// Profiles a running Python process (its process id) for a while, or until Ctrl-C,
    /// without restarting it: loads the library into it with ptrace, samples every
    /// thread's CPU time, writes the profile and leaves the process as it was.
    Attach(attach::Attach),
    /// Prints every thread's call stack in a running Python process, once: Python
    /// functions and lines with the native frames between them, and the system call each
    /// waiting thread waits in. Works on a process started under pyigprof and, loading
    /// the library as attach does, on one that was not; the process goes on as it was.
    Dump(dump::Dump),
    /// Shows the functions with the most samples in a running Python process, refreshed
    /// every second: Python and native, self and total, over the last interval and since
    /// the start. `pyigprof top PID`, or `pyigprof top -- python app.py`.
    Top(top::Top),
    /// Prints reports from profiles: pyigprof-analyse, with the same options
    /// (`pyigprof report --help` lists them).
    #[command(disable_help_flag = true)]
    Report {
        /// Profiles and pyigprof-analyse's options; `--help` prints pyigprof-analyse's.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<OsString>,
    },
}

/// What is sampled (`PYIGPROF_PROFILE`; several, comma-separated, in one profile).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum What {
    /// CPU time (or wall time with --clock wall).
    Cpu,
    /// Allocations (the memory profiler).
    Mem,
    /// The time threads wait for and hold locks (the lock profiler: LOCK_WAIT, LOCK_HOLD).
    Lock,
}

impl What {
    /// Its name in `PYIGPROF_PROFILE`.
    fn name(self) -> &'static str {
        match self {
            What::Cpu => "cpu",
            What::Mem => "mem",
            What::Lock => "lock",
        }
    }
}

/// The clock that samples (`PYIGPROF_CLOCK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Clock {
    /// Each thread's CPU time.
    Cpu,
    /// CPU time plus time blocked in system calls.
    Wall,
}

#[derive(Debug, clap::Args)]
struct Record {
    /// Where the profile goes (`PYIGPROF_OUTPUT`): `%p` is the process id; a name ending
    /// in `.gz` is compressed. Default: `pyigprof.%p.gz` in the current directory.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,

    /// Samples per second of each thread's CPU (or wall) time (`PYIGPROF_HZ`; default
    /// 250): a whole number from 1 to 100000.
    #[arg(short, long, value_name = "HZ", value_parser = parse_rate)]
    rate: Option<u32>,

    /// The clock that samples (`PYIGPROF_CLOCK`).
    #[arg(long, value_enum)]
    clock: Option<Clock>,

    /// What is sampled (`PYIGPROF_PROFILE`): cpu, mem, lock, or several comma-separated
    /// (`cpu,lock`).
    #[arg(long, value_enum, value_delimiter = ',')]
    profile: Vec<What>,

    /// A perf event to sample instead of CPU time, by perf's name, e.g. `page-faults`
    /// (`PYIGPROF_EVENT`).
    #[arg(long, value_name = "EVENT")]
    event: Option<String>,

    /// Profiles the command's subprocesses too: its fork children (`multiprocessing`) and
    /// the Python programs it runs, each into a profile of its own. Without it, only the
    /// command's own process (and the programs it `exec`s in its place) is profiled.
    #[arg(long)]
    subprocesses: bool,

    /// Profiles the processes that are not Python too, native frames only
    /// (`PYIGPROF_ALL_PROCESSES`; implies --subprocesses).
    #[arg(long)]
    all_processes: bool,

    /// Keeps only the samples of threads that hold the GIL (`PYIGPROF_GIL=1`, py-spy's
    /// `--gil`).
    #[arg(long)]
    gil: bool,

    /// Continuous profiling (`PYIGPROF_WINDOW`): every SECONDS of wall time the samples of
    /// that window are written as a profile of their own (`%n` in --output is the window's
    /// number; without it `.w<n>` is added: `pyigprof.1234.w0.gz`), the last one when the
    /// process ends. `pyigprof-analyse p.*.gz` merges them into the whole run.
    #[arg(long, value_name = "SECONDS", value_parser = parse_window)]
    window: Option<f64>,

    /// Continuous profiling to Grafana Pyroscope (`PYIGPROF_PUSH`): each window is sent to
    /// its ingest API at URL (`http://pyroscope:4040`, or Grafana Alloy's
    /// `pyroscope.receive_http`; `https://user:token@…` for basic authentication), as
    /// pprof, from a thread of pyigprof's. Windows of 60 s unless --window; with --output
    /// they are written to disk too.
    #[arg(long, value_name = "URL", value_parser = parse_push)]
    push: Option<String>,

    /// With --push: labels of every window (`PYIGPROF_LABELS`), e.g. `env=prod,region=eu`;
    /// pid, hostname and python (the version) are added.
    #[arg(long, value_name = "K=V,...", requires = "push")]
    labels: Option<String>,

    /// With --push: the application's name in Pyroscope (`PYIGPROF_APP_NAME`; default the
    /// script's or module's name). Pyroscope shows `NAME.cpu`, `NAME.wall`, ….
    #[arg(long, value_name = "NAME", requires = "push")]
    app_name: Option<String>,

    /// The profiler's cost at most PERCENT of the program's CPU time
    /// (`PYIGPROF_MAX_OVERHEAD`): the sampling interval is lengthened as needed (and
    /// shortened again, down to --rate's), measured every quarter second; shares stay
    /// unbiased. Perf events only.
    #[arg(long, value_name = "PERCENT", value_parser = parse_overhead)]
    max_overhead: Option<f64>,

    /// Prints nothing but the program's own output (`PYIGPROF_QUIET`).
    #[arg(short, long)]
    quiet: bool,

    /// The library to preload. Default: `$PYIGPROF_LIB`, else `libpyigprof.so` next to
    /// this command (or in `../lib`).
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,

    /// The program and its arguments (after `--`, or after the options: an unknown
    /// option before the program is refused, not run as the program).
    #[arg(required = true, trailing_var_arg = true, num_args = 1..)]
    command: Vec<OsString>,
}

impl Record {
    /// The `PYIGPROF_*` settings the options ask for, as (name, value).
    fn settings(&self) -> Vec<(&'static str, OsString)> {
        let mut settings = Vec::new();
        if let Some(output) = &self.output {
            settings.push(("PYIGPROF_OUTPUT", output.clone().into_os_string()));
        }
        if let Some(rate) = self.rate {
            settings.push(("PYIGPROF_HZ", rate.to_string().into()));
        }
        if let Some(clock) = self.clock {
            let name = match clock {
                Clock::Cpu => "cpu",
                Clock::Wall => "wall",
            };
            settings.push(("PYIGPROF_CLOCK", name.into()));
        }
        if !self.profile.is_empty() {
            let names: Vec<&str> = self.profile.iter().map(|what| what.name()).collect();
            settings.push(("PYIGPROF_PROFILE", names.join(",").into()));
        }
        if let Some(event) = &self.event {
            settings.push(("PYIGPROF_EVENT", event.into()));
        }
        if self.all_processes {
            settings.push(("PYIGPROF_ALL_PROCESSES", "1".into()));
        }
        if self.gil {
            settings.push(("PYIGPROF_GIL", "1".into()));
        }
        if let Some(seconds) = self.window {
            settings.push(("PYIGPROF_WINDOW", seconds.to_string().into()));
        }
        if let Some(url) = &self.push {
            settings.push(("PYIGPROF_PUSH", url.into()));
        }
        if let Some(labels) = &self.labels {
            settings.push(("PYIGPROF_LABELS", labels.into()));
        }
        if let Some(name) = &self.app_name {
            settings.push(("PYIGPROF_APP_NAME", name.into()));
        }
        if let Some(percent) = self.max_overhead {
            settings.push(("PYIGPROF_MAX_OVERHEAD", percent.to_string().into()));
        }
        if self.quiet {
            settings.push(("PYIGPROF_QUIET", "1".into()));
        }
        settings
    }
}

/// `--max-overhead`'s value: a per cent from 0.01 to 50 (what the library takes).
fn parse_overhead(text: &str) -> Result<f64, String> {
    match text.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.01..=50.0).contains(&p) => Ok(p),
        _ => Err(format!("{text:?} is not a per cent from 0.01 to 50")),
    }
}

/// `--push`'s value: an `http://` or `https://` URL with a host.
fn parse_push(text: &str) -> Result<String, String> {
    let host = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"))
        .map(|rest| rest.split(['/', '?']).next().unwrap_or(""));
    match host {
        Some(host) if !host.is_empty() && !host.ends_with('@') => Ok(text.to_string()),
        _ => Err(format!(
            "{text:?} is not an http:// or https:// URL with a host (e.g. http://pyroscope:4040)"
        )),
    }
}

/// The highest sampling rate the library takes (`PYIGPROF_HZ`, the preload's `MAX_HZ`).
const MAX_HZ: u32 = 100_000;

/// `--rate`'s value: a whole number of samples per second from 1 to [`MAX_HZ`] (what the
/// library takes; it would replace another by its default with only a warning).
pub(crate) fn parse_rate(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(hz) if (1..=MAX_HZ).contains(&hz) => Ok(hz),
        _ => Err(format!(
            "{text:?} is not a whole number of samples per second from 1 to {MAX_HZ}"
        )),
    }
}

/// `--window`'s value: seconds from 0.05 to 86,400 (what the library takes).
fn parse_window(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if (0.05..=86_400.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "{text:?} is not a number of seconds from 0.05 to 86400"
        )),
    }
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let record = match args.get(1).and_then(|a| a.to_str()) {
        Some(first) if launch::is_igprof_option(first) => match launch::igprof_style(&args[1..]) {
            Ok(record) => record,
            Err(message) => {
                eprintln!("pyigprof: {message}");
                return ExitCode::from(2);
            }
        },
        _ => match Cli::parse().command {
            Command::Record(record) => record,
            Command::Report { args } => return launch::report(&args),
            Command::Attach(attach) => return attach::attach(&attach),
            Command::Dump(dump) => return dump::dump(&dump),
            Command::Top(top) => return top::top(&top),
        },
    };
    launch::record(&record)
}
