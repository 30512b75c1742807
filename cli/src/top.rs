//! `pyigprof top PID` and `pyigprof top -- CMD…`: a live, top-like view of the functions
//! with the most samples — Python and native — refreshed every interval (py-spy's `top`).
//!
//! The command opens a live window in the process as `pyigprof dump` does
//! ([`crate::attach::open_window`], `PYIGPROF_ATTACH_PURPOSE=live`: nothing is written when
//! it closes): a process started under pyigprof is read from its own sampler; another is
//! sampled for as long as `top` runs, then left as `attach` leaves it. `top -- CMD` starts
//! CMD with the library preloaded (as `pyigprof record` does; its profile is written when
//! it ends) and opens the window once its interpreter is up; while the live view owns the
//! terminal, the program's stdout and stderr go to `pyigprof-top.<top's pid>.out` in the
//! current directory (named when top starts; `--batch` leaves them as they are). Every interval the command
//! asks `snapshot` (each function's self and cumulative ticks so far, in the all-frames and
//! the Python views) and shows, per function, its share of the last interval and of the
//! time since sampling started, with the 95 % sampling error of the interval's share, the
//! process's CPU use (from `/proc/PID/stat`, ended threads included) and the samples per second.
//!
//! Keys: `s` sorts by the next column (self, total, self since start, total since start),
//! `v` switches between all frames and Python frames, `space` pauses, `w` writes the
//! profile so far (`--output` tagged `snapshotN`; a fork child writes it in a process
//! started under pyigprof, the live window's control thread in another), `q` (or Esc, Ctrl-C) quits, leaving
//! the program running. `--batch N` prints N reports as text instead (no terminal needed).
//!
//! Exit status: 0; the program's with `--` when it ends while shown; 1 when the process
//! cannot be read; 2 for a command-line error.

use crate::attach::{open_window, Refused, Session};
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::style::{Attribute, Print, SetAttribute};
use crossterm::terminal::{self, Clear, ClearType};
use crossterm::{cursor, execute, queue};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

/// What `pyigprof top` was asked.
#[derive(Debug, clap::Args)]
pub struct Top {
    /// The process to show (its process id); or give a program after `--`.
    #[arg(required_unless_present = "command")]
    pub pid: Option<i32>,

    /// Seconds between refreshes.
    #[arg(short, long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,

    /// Samples per second of each thread's CPU time in a process that was not started
    /// under pyigprof, or in the program started (default 250; a process started under
    /// pyigprof keeps its own).
    #[arg(short, long, value_name = "HZ", value_parser = crate::parse_rate)]
    pub rate: Option<u32>,

    /// Starts in the Python view: the time of native frames goes to the Python function
    /// that called them (`v` switches).
    #[arg(long)]
    pub python: bool,

    /// Starts in the asyncio task view: self and total by task (the task whose step ran,
    /// and every task of its await chain; `t` switches). Tasks are known on CPython 3.14+.
    #[arg(long, conflicts_with = "python")]
    pub tasks: bool,

    /// Prints N reports, one per interval, as text, instead of the live view. A program
    /// started with `--` runs on after them: top waits for it to end (saying so once on
    /// stderr) and ends with its exit status, as `pyigprof record` does.
    #[arg(long, value_name = "N")]
    pub batch: Option<u32>,

    /// Functions shown in each text report (`--batch`).
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub rows: usize,

    /// The profile's path (`%p`: the process id): `w` writes the profile so far to it
    /// tagged `snapshotN` (`pyigprof.1234.snapshot1.gz`), and the program started with `--`
    /// writes its whole profile there when it ends. Of a process given by PID nothing is
    /// written when top leaves; one started under pyigprof keeps its own `PYIGPROF_OUTPUT`.
    #[arg(short, long, value_name = "PATH", default_value = "pyigprof.%p.gz")]
    pub output: PathBuf,

    /// The library. Default: `$PYIGPROF_LIB`, else `libpyigprof.so` next to this command
    /// (or in `../lib`, or the installed Python package's).
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,

    /// The program to start under pyigprof and show.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// One function's ticks so far.
#[derive(Clone, Copy, Debug, Default)]
struct Ticks {
    python: bool,
    first_line: u64,
    /// [self, cumulative], all frames.
    all: [u64; 2],
    /// [self, cumulative], Python view.
    py: [u64; 2],
}

/// One `snapshot` answer (`preload/src/output/live.rs`).
#[derive(Clone, Debug, Default)]
struct Snapshot {
    samples: u64,
    ticks: u64,
    period_ns: u64,
    threads: u64,
    /// By (file, name).
    functions: HashMap<(String, String), Ticks>,
    /// asyncio tasks' [self, cumulative] ticks, by task name.
    tasks: HashMap<String, [u64; 2]>,
}

fn read_snapshot(lines: &mut impl BufRead) -> Result<Snapshot, String> {
    let mut snap = Snapshot::default();
    let mut line = String::new();
    for n in 1.. {
        line.clear();
        if lines
            .read_line(&mut line)
            .map_err(|e| format!("reading: {e}"))?
            == 0
        {
            return Err("the process closed the connection (it ended?)".into());
        }
        let fields: Vec<&str> = line.trim_end_matches('\n').split('\t').collect();
        let bad = || format!("line {n} of the library's snapshot is not as expected: {line:?}");
        let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
        match fields.as_slice() {
            ["end"] => return Ok(snap),
            ["totals", samples, ticks, period, threads] => {
                snap.samples = num(samples)?;
                snap.ticks = num(ticks)?;
                snap.period_ns = num(period)?;
                snap.threads = num(threads)?;
            }
            ["task", s, c, name] => {
                let entry = snap.tasks.entry(name.to_string()).or_default();
                entry[0] += num(s)?;
                entry[1] += num(c)?;
            }
            ["fn", python, s, c, ps, pc, first, file, name] => {
                let entry = snap
                    .functions
                    // Spelled as the reports spell it (`@{libz.so.1+23968}`, not `@?0x5da0`).
                    .entry((
                        file.to_string(),
                        igprof_analyse::resolve::report_name(file, name),
                    ))
                    .or_default();
                entry.python = *python == "1";
                entry.first_line = num(first)?;
                // Two functions of one name in one file (Python code objects of different
                // first lines) add up.
                entry.all[0] += num(s)?;
                entry.all[1] += num(c)?;
                entry.py[0] += num(ps)?;
                entry.py[1] += num(pc)?;
            }
            ["error", why] => return Err(why.to_string()),
            _ => return Err(bad()),
        }
    }
    unreachable!()
}

/// The columns rows can be sorted by.
const SORTS: [&str; 4] = ["self", "total", "self since start", "total since start"];

/// What the view shows now.
struct View {
    python: bool,
    /// The asyncio task view (by task), over `python`.
    tasks: bool,
    sort: usize,
    paused: bool,
    status: String,
}

/// A row of the table.
struct RowData {
    name: String,
    place: String,
    python: bool,
    /// Shares of the interval, %: self, total; its 95 % error for self, points.
    interval: [f64; 2],
    error: f64,
    /// Seconds since start: self, total.
    since: [f64; 2],
}

/// The rows of `now` against `before` (the interval), in `view`'s frames and order.
fn rows(now: &Snapshot, before: &Snapshot, view: &View) -> Vec<RowData> {
    let ticks_of = |t: &Ticks| if view.python { t.py } else { t.all };
    let interval_ticks = now.ticks.saturating_sub(before.ticks).max(1) as f64;
    let samples = now.samples.saturating_sub(before.samples).max(1) as f64;
    let period_s = now.period_ns as f64 / 1e9;
    let share = |x: u64| 100.0 * x as f64 / interval_ticks;
    let mut rows: Vec<RowData> = if view.tasks {
        // Shares of every sample of the interval, as the other views' (samples outside
        // any task are in none).
        now.tasks
            .iter()
            .filter(|(_, t)| **t != [0, 0])
            .map(|(name, &[s, c])| {
                let [s0, c0] = before.tasks.get(name).copied().unwrap_or_default();
                let self_share = share(s.saturating_sub(s0));
                let p = self_share / 100.0;
                RowData {
                    name: format!("<task {name}>"),
                    place: "asyncio task".into(),
                    python: false,
                    interval: [self_share, share(c.saturating_sub(c0))],
                    error: 196.0 * (p * (1.0 - p) / samples).sqrt(),
                    since: [s as f64 * period_s, c as f64 * period_s],
                }
            })
            .collect()
    } else {
        now.functions
            .iter()
            .filter_map(|((file, name), t)| {
                let [s, c] = ticks_of(t);
                if s == 0 && c == 0 {
                    return None;
                }
                let [s0, c0] = before
                    .functions
                    .get(&(file.clone(), name.clone()))
                    .map_or([0, 0], ticks_of);
                let self_share = share(s.saturating_sub(s0));
                let p = self_share / 100.0;
                let place = if t.python {
                    format!("{file}:{}", t.first_line)
                } else {
                    std::path::Path::new(file)
                        .file_name()
                        .map_or(file.clone(), |n| n.to_string_lossy().into_owned())
                };
                Some(RowData {
                    name: name.clone(),
                    place,
                    python: t.python,
                    interval: [self_share, share(c.saturating_sub(c0))],
                    error: 196.0 * (p * (1.0 - p) / samples).sqrt(),
                    since: [s as f64 * period_s, c as f64 * period_s],
                })
            })
            .collect()
    };
    let key = |r: &RowData| match view.sort {
        0 => r.interval[0],
        1 => r.interval[1],
        2 => r.since[0],
        _ => r.since[1],
    };
    rows.sort_by(|a, b| key(b).total_cmp(&key(a)).then_with(|| a.name.cmp(&b.name)));
    rows
}

/// CPU seconds of process `pid` (`/proc/PID/stat` utime + stime: its threads', those that
/// have ended included — a sum over `/proc/PID/task/*/stat` loses an ended thread's time,
/// and the header's CPU went negative while a pool's threads ended).
fn process_cpu_s(pid: i32) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| cpu_of_stat(&stat))
        .map_or(0.0, |ticks| ticks / hz)
}

/// utime + stime (clock ticks) of a `/proc/…/stat` line: fields 14 and 15, the 12th and
/// 13th after the state (the command's name, in parentheses, may hold spaces).
fn cpu_of_stat(stat: &str) -> Option<f64> {
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?)
}

/// The header's words: threads, CPU use, samples per second.
struct Rates {
    cpu_cores: f64,
    samples_per_s: f64,
}

fn header(pid: i32, comm: &str, now: &Snapshot, rates: &Rates, view: &View) -> Vec<String> {
    vec![
        format!(
            "pyigprof top — process {pid} ({comm}) — {} {} sampled, CPU {:.0} % of a core, {:.0} samples/s, {} {} since start",
            now.threads,
            pyigprof_pprof::plural(now.threads, "thread"),
            100.0 * rates.cpu_cores,
            rates.samples_per_s,
            now.samples,
            pyigprof_pprof::plural(now.samples, "sample")
        ),
        format!(
            "view: {} — sorted by {} — {}",
            if view.tasks {
                "asyncio tasks (self: the task whose step ran; total: and the tasks awaiting it)"
            } else if view.python {
                "Python frames (native time under its Python caller)"
            } else {
                "all frames"
            },
            SORTS[view.sort],
            if view.paused { "PAUSED" } else { "live" }
        ),
    ]
}

const COLUMNS: [&str; 7] = [
    "%self", "±", "%total", "self s", "total s", "function", "file",
];

fn cells(r: &RowData) -> [String; 7] {
    [
        format!("{:5.1}", r.interval[0]),
        format!("{:4.1}", r.error),
        format!("{:5.1}", r.interval[1]),
        format!("{:7.2}", r.since[0]),
        format!("{:7.2}", r.since[1]),
        r.name.clone(),
        r.place.clone(),
    ]
}

/// One text report (`--batch`).
fn report_text(lines: &[String], rows: &[RowData], n: usize) -> String {
    let mut out = lines.join("\n");
    out.push_str(&format!(
        "\n{:>6} {:>5} {:>6} {:>8} {:>8}  {}  ({})\n",
        COLUMNS[0], COLUMNS[1], COLUMNS[2], COLUMNS[3], COLUMNS[4], COLUMNS[5], COLUMNS[6]
    ));
    for r in rows.iter().take(n) {
        let c = cells(r);
        out.push_str(&format!(
            "{:>6} {:>5} {:>6} {:>8} {:>8}  {}  ({})\n",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6]
        ));
    }
    out
}

/// The process shown, and the program `top` started, if it did.
struct Target {
    pid: i32,
    child: Option<Child>,
}

/// Starts `command` under the library and opens the window once its interpreter is up.
fn start_program(args: &Top, lib: &std::path::Path) -> Result<(Target, Session), String> {
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("LD_PRELOAD", lib)
        .env("PYIGPROF_OUTPUT", &args.output)
        .env("PYIGPROF_ONLY_CHILD_OF", std::process::id().to_string());
    if let Some(rate) = args.rate {
        command.env("PYIGPROF_HZ", rate.to_string());
    }
    let mut output = None;
    if args.batch.is_none() {
        // The view owns the terminal: the program's output (and pyigprof's lines) would
        // land in the middle of it. They go to a file, named when top ends.
        let path = std::env::current_dir()
            .unwrap_or_default()
            .join(format!("pyigprof-top.{}.out", std::process::id()));
        let file = std::fs::File::create(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        let err = file.try_clone().map_err(|e| e.to_string())?;
        command
            .stdout(file)
            .stderr(err)
            .env("PYIGPROF_LOG", "stderr");
        output = Some(path);
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", args.command[0]))?;
    if let Some(path) = output {
        eprintln!(
            "pyigprof top: the program's output goes to {}",
            path.display()
        );
    }
    let pid = child.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(20);
    let output = crate::attach::absolute(args.output.clone());
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "the program ended before it could be shown ({status})"
            ));
        }
        match open_window(pid, lib, &output, "PYIGPROF_ATTACH_PURPOSE=live\n", "top") {
            Ok(session) => {
                return Ok((
                    Target {
                        pid,
                        child: Some(child),
                    },
                    session,
                ))
            }
            Err(Refused { why, .. }) if Instant::now() > deadline => {
                let _ = child.kill();
                return Err(why);
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// `pyigprof top`: see the module documentation.
pub fn top(args: &Top) -> ExitCode {
    let lib = match crate::launch::library(args.lib.as_deref()) {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!("pyigprof top: {e}");
            return ExitCode::from(2);
        }
    };
    if args.interval.is_nan() || args.interval <= 0.0 {
        eprintln!("pyigprof top: --interval must be a positive number of seconds");
        return ExitCode::from(2);
    }
    // Where `w` writes its profiles: checked before anything starts.
    if let Some(why) = crate::launch::unwritable(&crate::attach::absolute(args.output.clone())) {
        eprintln!("pyigprof top: {why} (the `w` key's profiles)");
        return ExitCode::from(2);
    }
    let (mut target, session) = if args.command.is_empty() {
        let pid = args.pid.unwrap_or(0);
        let rate = args
            .rate
            .map_or(String::new(), |r| format!("PYIGPROF_HZ={r}\n"));
        let output = crate::attach::absolute(args.output.clone());
        match open_window(
            pid,
            &lib,
            &output,
            &format!("PYIGPROF_ATTACH_PURPOSE=live\n{rate}"),
            "top",
        ) {
            Ok(session) => (Target { pid, child: None }, session),
            Err(refused) => {
                eprintln!("pyigprof top: process {pid}: {}", refused.why);
                return ExitCode::from(refused.status);
            }
        }
    } else {
        match start_program(args, &lib) {
            Ok(started) => started,
            Err(why) => {
                eprintln!("pyigprof top: {why}");
                return ExitCode::from(1);
            }
        }
    };
    let result = match args.batch {
        Some(n) => batch(args, &target, session, n).and_then(|()| wait_for_program(&mut target)),
        None => live(args, &mut target, session),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Ended::Program(code)) => ExitCode::from(code),
        Err(Ended::Failed(why)) => {
            eprintln!("pyigprof top: process {}: {why}", target.pid);
            ExitCode::from(1)
        }
    }
}

/// After `--batch`'s reports, the program `top` started with `--` (if any) runs on: `top`
/// waits for it, as `pyigprof record` does (its output then comes before the shell's
/// prompt, not after; issue 58), says so once on stderr, and ends with its exit status.
/// Ctrl-C and Ctrl-\ reach the program, not `top`.
fn wait_for_program(target: &mut Target) -> Result<(), Ended> {
    let Some(child) = target.child.as_mut() else {
        return Ok(());
    };
    if let Ok(Some(_)) = child.try_wait() {
        return program_ended(target).map_or(Ok(()), |code| Err(Ended::Program(code)));
    }
    eprintln!(
        "pyigprof top: reports done; waiting for the program (PID {}) to end",
        target.pid
    );
    crate::launch::leave_interrupts_to_the_program();
    let status = child
        .wait()
        .map_err(|e| Ended::Failed(format!("cannot wait for the program: {e}")))?;
    match exit_code(status) {
        0 => Ok(()),
        code => Err(Ended::Program(code)),
    }
}

/// Why the view ended before the user quit.
enum Ended {
    /// The program `top` started ended, with this exit status.
    Program(u8),
    /// The process could not be read any more.
    Failed(String),
}

/// Asks a snapshot.
fn ask(session: &mut Session) -> Result<Snapshot, String> {
    session
        .stream
        .write_all(b"snapshot\n")
        .map_err(|e| format!("the process closed the connection ({e}): it ended?"))?;
    read_snapshot(&mut session.lines)
}

/// The program's exit status, if `top` started it and it ended.
fn program_ended(target: &mut Target) -> Option<u8> {
    let status = target.child.as_mut()?.try_wait().ok()??;
    Some(exit_code(status))
}

/// A program's exit status as a shell gives it: its code, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .map_or_else(|| 128 + status.signal().unwrap_or(0) as u8, |c| c as u8)
}

fn batch(args: &Top, target: &Target, mut session: Session, n: u32) -> Result<(), Ended> {
    let view = View {
        python: args.python,
        tasks: args.tasks,
        sort: 0,
        paused: false,
        status: String::new(),
    };
    let mut before = ask(&mut session).map_err(Ended::Failed)?;
    let mut cpu_before = process_cpu_s(target.pid);
    for _ in 0..n {
        let started = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(args.interval));
        let now = ask(&mut session).map_err(Ended::Failed)?;
        let elapsed = started.elapsed().as_secs_f64();
        let cpu = process_cpu_s(target.pid);
        let rates = Rates {
            cpu_cores: (cpu - cpu_before) / elapsed,
            samples_per_s: now.samples.saturating_sub(before.samples) as f64 / elapsed,
        };
        let lines = header(target.pid, &session.comm, &now, &rates, &view);
        let table = rows(&now, &before, &view);
        println!("{}", report_text(&lines, &table, args.rows));
        let _ = std::io::stdout().flush();
        before = now;
        cpu_before = cpu;
    }
    session.close();
    Ok(())
}

fn live(args: &Top, target: &mut Target, mut session: Session) -> Result<(), Ended> {
    let mut view = View {
        python: args.python,
        tasks: args.tasks,
        sort: 0,
        paused: false,
        status:
            "keys: s sort · v Python/all frames · t asyncio tasks · space pause · w write profile · q quit"
                .into(),
    };
    let mut screen = match Screen::enter() {
        Ok(screen) => screen,
        Err(e) => return Err(Ended::Failed(format!("cannot use the terminal: {e}"))),
    };
    // The first screen shows the time since sampling started (a process started under
    // pyigprof has samples already), until the first interval has passed.
    let mut before = Snapshot::default();
    let mut now = match ask(&mut session) {
        Ok(s) => s,
        Err(e) => {
            drop(screen);
            return Err(Ended::Failed(e));
        }
    };
    let mut cpu_before = process_cpu_s(target.pid);
    let mut last = Instant::now();
    let mut rates = Rates {
        cpu_cores: 0.0,
        samples_per_s: 0.0,
    };
    let interval = Duration::from_secs_f64(args.interval);
    let outcome = loop {
        if let Some(code) = program_ended(target) {
            break Err(Ended::Program(code));
        }
        if last.elapsed() >= interval && !view.paused {
            match ask(&mut session) {
                Ok(s) => {
                    let elapsed = last.elapsed().as_secs_f64();
                    let cpu = process_cpu_s(target.pid);
                    rates = Rates {
                        cpu_cores: (cpu - cpu_before) / elapsed,
                        samples_per_s: s.samples.saturating_sub(now.samples) as f64 / elapsed,
                    };
                    cpu_before = cpu;
                    before = std::mem::replace(&mut now, s);
                }
                Err(e) => match program_ended(target) {
                    Some(code) => break Err(Ended::Program(code)),
                    None => break Err(Ended::Failed(e)),
                },
            }
            last = Instant::now();
        }
        let lines = header(target.pid, &session.comm, &now, &rates, &view);
        let table = rows(&now, &before, &view);
        let drawn = screen.draw(&lines, &table, &view.status);
        if let Err(e) = drawn {
            break Err(Ended::Failed(format!("cannot draw on the terminal: {e}")));
        }
        let wait = interval
            .saturating_sub(last.elapsed())
            .min(Duration::from_millis(200));
        if !event::poll(wait).unwrap_or(false) {
            continue;
        }
        let Ok(Event::Key(key)) = event::read() else {
            continue;
        };
        if key.kind != KeyEventKind::Press {
            continue;
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => break Ok(()),
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => break Ok(()),
            KeyCode::Char('s') => view.sort = (view.sort + 1) % SORTS.len(),
            KeyCode::Char('v') => {
                view.python = !view.python;
                view.tasks = false;
            }
            KeyCode::Char('t') => view.tasks = !view.tasks,
            KeyCode::Char(' ') => view.paused = !view.paused,
            KeyCode::Char('w') => {
                view.status = match write_now(&mut session) {
                    Ok(path) => format!("wrote {path}"),
                    Err(e) => format!("not written: {e}"),
                }
            }
            _ => {}
        }
    };
    drop(screen);
    if let Err(Ended::Program(code)) = &outcome {
        eprintln!("pyigprof top: the program ended (exit status {code})");
    } else {
        session.close();
    }
    outcome
}

/// The terminal while the live view owns it (crossterm): raw mode, the alternate screen,
/// the cursor hidden; all put back when dropped.
struct Screen {
    out: std::io::Stdout,
}

impl Screen {
    fn enter() -> std::io::Result<Screen> {
        terminal::enable_raw_mode()?;
        let mut out = std::io::stdout();
        execute!(out, terminal::EnterAlternateScreen, cursor::Hide)?;
        Ok(Screen { out })
    }

    /// Draws the header `lines`, the table of `rows` (as many as fit; the column
    /// headings reversed, Python functions bold) and the `status` line at the bottom,
    /// each line cut at the terminal's width.
    fn draw(&mut self, lines: &[String], rows: &[RowData], status: &str) -> std::io::Result<()> {
        let (width, height) = terminal::size()?;
        let (width, height) = (usize::from(width), usize::from(height));
        let fit = |text: &str| -> String { text.chars().take(width).collect() };
        let line = |c: &[String; 7]| {
            format!(
                "{:>6} {:>5} {:>6} {:>8} {:>8}  {:<40} {}",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6]
            )
        };
        let heading = COLUMNS.map(String::from);
        queue!(self.out, cursor::MoveTo(0, 0), Clear(ClearType::All))?;
        let mut y = 0u16;
        for text in lines {
            queue!(self.out, cursor::MoveTo(0, y), Print(fit(text)))?;
            y += 1;
        }
        queue!(
            self.out,
            cursor::MoveTo(0, y),
            SetAttribute(Attribute::Reverse),
            Print(fit(&format!("{:<width$}", line(&heading)))),
            SetAttribute(Attribute::Reset)
        )?;
        y += 1;
        let room = height.saturating_sub(usize::from(y) + 1);
        for row in rows.iter().take(room) {
            queue!(self.out, cursor::MoveTo(0, y))?;
            if row.python {
                queue!(self.out, SetAttribute(Attribute::Bold))?;
            }
            queue!(
                self.out,
                Print(fit(&line(&cells(row)))),
                SetAttribute(Attribute::Reset)
            )?;
            y += 1;
        }
        let bottom = u16::try_from(height.saturating_sub(1)).unwrap_or(u16::MAX);
        queue!(self.out, cursor::MoveTo(0, bottom), Print(fit(status)))?;
        self.out.flush()
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = execute!(self.out, cursor::Show, terminal::LeaveAlternateScreen);
        let _ = terminal::disable_raw_mode();
    }
}

/// Asks the process to write its profile so far: the path, or why not.
fn write_now(session: &mut Session) -> Result<String, String> {
    session
        .stream
        .write_all(b"write\n")
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    session
        .lines
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let line = line.trim_end();
    match line.strip_prefix("written ") {
        Some(path) => Ok(path.to_string()),
        None => Err(line.strip_prefix("error ").unwrap_or(line).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_time_is_read_from_the_processs_stat_line() {
        // A command name with spaces and parentheses; utime 250, stime 17.
        let stat =
            "4242 (my (odd) app) R 1 4242 4242 0 -1 4194304 5000 0 0 0 250 17 3 4 20 0 9 0 100 0 0";
        assert_eq!(cpu_of_stat(stat), Some(267.0));
        assert_eq!(cpu_of_stat("4242 (cut"), None);
        // This process's own, read as top reads it.
        let own = process_cpu_s(std::process::id() as i32);
        assert!(own >= 0.0, "{own}");
    }

    fn snapshot(text: &str) -> Snapshot {
        read_snapshot(&mut text.as_bytes()).unwrap()
    }

    #[test]
    fn the_interval_is_the_difference_of_two_snapshots_in_either_view() {
        let before = snapshot(
            "totals\t100\t100\t4000000\t2\n\
             fn\t1\t0\t100\t0\t60\t1\tapp.py\tmain\n\
             fn\t1\t60\t60\t60\t60\t5\tapp.py\tspin\n\
             fn\t0\t40\t40\t0\t0\t0\t/lib/libz.so.1\tdeflate\n\
             end\n",
        );
        let now = snapshot(
            "totals\t300\t300\t4000000\t2\n\
             fn\t1\t0\t300\t0\t100\t1\tapp.py\tmain\n\
             fn\t1\t100\t100\t100\t100\t5\tapp.py\tspin\n\
             fn\t0\t200\t200\t0\t0\t0\t/lib/libz.so.1\tdeflate\n\
             end\n",
        );
        let mut view = View {
            python: false,
            tasks: false,
            sort: 0,
            paused: false,
            status: String::new(),
        };
        let all = rows(&now, &before, &view);
        assert_eq!(all[0].name, "deflate");
        assert!(
            (all[0].interval[0] - 80.0).abs() < 1e-9,
            "{}",
            all[0].interval[0]
        );
        assert_eq!(all[0].place, "libz.so.1");
        assert!((all[1].interval[0] - 20.0).abs() < 1e-9);
        // 95 % error of an 80 % share over 200 samples: 1.96 × sqrt(0.8 × 0.2 / 200).
        assert!((all[0].error - 5.54).abs() < 0.01, "{}", all[0].error);
        // Since start, in seconds of 4 ms ticks: deflate 0.8 s.
        assert!((all[0].since[0] - 0.8).abs() < 1e-9);
        view.python = true;
        let py = rows(&now, &before, &view);
        assert_eq!(
            py.iter().find(|r| r.name == "main").unwrap().interval[1],
            20.0
        );
        view.sort = 3;
        let by_total = rows(&now, &before, &view);
        assert_eq!(by_total[0].name, "main");
        assert_eq!(by_total[0].place, "app.py:1");
    }

    #[test]
    fn the_task_view_gives_each_tasks_self_and_total_share() {
        let before = snapshot("totals\t0\t0\t4000000\t1\nend\n");
        // 200 ticks: 120 with `fetch` innermost (awaited by `handler`), 50 with `handler`
        // innermost, 30 outside tasks.
        let now = snapshot(
            "totals\t200\t200\t4000000\t1\n\
             fn\t0\t0\t170\t0\t0\t0\t[pyigprof]\t<task handler>\n\
             task\t50\t170\thandler\n\
             fn\t0\t0\t120\t0\t0\t0\t[pyigprof]\t<task fetch>\n\
             task\t120\t120\tfetch\n\
             end\n",
        );
        let view = View {
            python: false,
            tasks: true,
            sort: 0,
            paused: false,
            status: String::new(),
        };
        let tasks = rows(&now, &before, &view);
        let shares: Vec<(&str, [f64; 2])> = tasks
            .iter()
            .map(|r| (r.name.as_str(), r.interval))
            .collect();
        assert_eq!(
            shares,
            [
                ("<task fetch>", [60.0, 60.0]),
                ("<task handler>", [25.0, 85.0])
            ]
        );
    }

    #[test]
    fn a_malformed_snapshot_names_its_line() {
        let err = read_snapshot(&mut "totals\t1\t1\t1\t1\nfn\tx\n".as_bytes()).unwrap_err();
        assert!(err.starts_with("line 2 of the library's snapshot"), "{err}");
    }
}
