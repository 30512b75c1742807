//! Running a program under the profiler, and handing `report` to the analyser.

use crate::{Record, What};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

/// IgProf's options that start its spelling (`igprof -pp -z -o FILE CMD`).
const IGPROF_OPTIONS: [&str; 4] = ["-pp", "-mp", "-z", "-o"];

/// Whether `arg`, the first argument, starts IgProf's spelling.
pub fn is_igprof_option(arg: &str) -> bool {
    IGPROF_OPTIONS.contains(&arg)
}

/// Reads IgProf's spelling: `-pp` (CPU time, the default), `-mp` (the memory profiler;
/// both give both), `-z` (compressed: `.gz` is added to an `-o` name without it),
/// `-o FILE`, then the command.
///
/// # Errors
/// A message naming the option that is not IgProf's or lacks its value, or the missing
/// command.
pub fn igprof_style(args: &[OsString]) -> Result<Record, String> {
    let (mut cpu, mut mem, mut gzip, mut output) = (false, false, false, None::<PathBuf>);
    let mut at = 0;
    while let Some(arg) = args.get(at).and_then(|a| a.to_str()) {
        match arg {
            "-pp" => cpu = true,
            "-mp" => mem = true,
            "-z" => gzip = true,
            "-o" => {
                at += 1;
                let file = args.get(at).ok_or("-o needs a file name")?;
                output = Some(PathBuf::from(file));
            }
            "--" => {
                at += 1;
                break;
            }
            _ if arg.starts_with('-') => {
                return Err(format!(
                    "{arg}: not an option of IgProf's that pyigprof takes (-pp, -mp, -z, -o FILE); \
                     `pyigprof record --help` lists its own"
                ))
            }
            _ => break,
        }
        at += 1;
    }
    let command: Vec<OsString> = args[at..].to_vec();
    if command.is_empty() {
        return Err("no command to profile: pyigprof -pp [-z] [-o FILE] CMD [ARGS...]".into());
    }
    if let Some(file) = &mut output {
        if gzip && !file.as_os_str().as_bytes().ends_with(b".gz") {
            let mut name = file.clone().into_os_string();
            name.push(".gz");
            *file = PathBuf::from(name);
        }
    }
    Ok(Record {
        output,
        rate: None,
        clock: None,
        profile: match (cpu, mem) {
            (true, true) => vec![What::Cpu, What::Mem],
            (false, true) => vec![What::Mem],
            _ => vec![What::Cpu],
        },
        event: None,
        // IgProf profiles the children it starts: -pp covers them too.
        subprocesses: true,
        all_processes: false,
        gil: false,
        window: None,
        push: None,
        labels: None,
        app_name: None,
        max_overhead: None,
        quiet: false,
        lib: None,
        command,
    })
}

/// The directory of this executable (symbolic links resolved).
fn own_dir() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.canonicalize().ok())
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
}

/// The library to preload: `--lib`, `$PYIGPROF_LIB`, else `libpyigprof.so` next to this
/// executable or in `../lib`.
///
/// # Errors
/// A message naming where it was looked for.
pub(crate) fn library(asked: Option<&Path>) -> Result<PathBuf, String> {
    let given = asked
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("PYIGPROF_LIB").map(PathBuf::from));
    if let Some(path) = given {
        return match path.canonicalize() {
            Ok(path) if path.is_file() => Ok(path),
            _ => Err(format!("{}: no such library", path.display())),
        };
    }
    let dir = own_dir().ok_or("cannot tell where this command is installed")?;
    let mut candidates = vec![
        dir.join("libpyigprof.so"),
        dir.join("../lib/libpyigprof.so"),
    ];
    candidates.extend(installed_package(&dir));
    candidates
        .iter()
        .find(|p| p.is_file())
        .and_then(|p| p.canonicalize().ok())
        .ok_or_else(|| {
            format!(
                "libpyigprof.so not found next to this command ({}), in ../lib, nor in a \
                 pyigprof package of ../lib/python3.*; give it with --lib or PYIGPROF_LIB",
                dir.display()
            )
        })
}

/// The library of the Python package `pip install` put beside this command (`bin/` and
/// `lib/python3.X/site-packages/pyigprof/pyigprof.abi3.so` of one prefix: a venv, `~/.local`
/// or `/usr/local`), for each Python 3 of the prefix, newest first.
fn installed_package(bin: &Path) -> Vec<PathBuf> {
    let lib = bin.join("../lib");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .flat_map(|e| {
            ["site-packages", "dist-packages"]
                .map(|packages| e.path().join(packages).join("pyigprof/pyigprof.abi3.so"))
        })
        .collect();
    found.sort();
    found.reverse();
    found
}

/// `LD_PRELOAD` with `lib` first and what the environment had after it.
fn preload_with(lib: &Path) -> OsString {
    let mut value = lib.as_os_str().to_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        value.push(":");
        value.push(old);
    }
    value
}

/// Runs `record.command` under the profiler and returns its exit status (a program ended
/// by a signal ends this process by the same signal). The program's processes say nothing
/// on their own stdout or stderr: their lines (each profile's summary, warnings) go to a
/// file of this command's (`PYIGPROF_LOG`), which it prints on its own stderr when the
/// program has ended, with the list of every profile written and how to read them.
/// Why profiles named by `pattern` (`%p`, `%n` and the like in the file name only) could
/// not be written: its directory does not exist, is not a directory or cannot be written.
/// Checked before a program is started or attached to, so that the run is not lost at its
/// end (issue 58: `record -o /nonexistent/x.gz` ran the whole program, `attach -d 60` sampled
/// a minute). `None` when it can be.
pub fn unwritable(pattern: &Path) -> Option<String> {
    let dir = match pattern.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let problem = match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "does not exist".to_string(),
        Err(e) => e.to_string(),
        Ok(meta) if !meta.is_dir() => "is not a directory".to_string(),
        Ok(_) => {
            let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
            // SAFETY: a NUL-terminated path.
            if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } == 0 {
                return None;
            }
            format!("cannot be written ({})", std::io::Error::last_os_error())
        }
    };
    Some(format!(
        "cannot write the profile {}: the directory {} {problem}",
        pattern.display(),
        dir.display()
    ))
}

pub fn record(record: &Record) -> ExitCode {
    let lib = match library(record.lib.as_deref()) {
        Ok(lib) => lib,
        Err(message) => {
            eprintln!("pyigprof: {message}");
            return ExitCode::from(2);
        }
    };
    let settings = record.settings();
    let pattern = record
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("pyigprof.%p.gz"));
    let pushed_only = record.push.is_some() && record.output.is_none();
    if let Some(why) = unwritable(&pattern).filter(|_| !pushed_only) {
        eprintln!("pyigprof: {why}; the program was not started");
        return ExitCode::from(2);
    }
    let log = match Log::create() {
        Ok(log) => log,
        Err(message) => {
            eprintln!("pyigprof: {message}");
            return ExitCode::from(2);
        }
    };
    let mut command = std::process::Command::new(&record.command[0]);
    command
        .args(&record.command[1..])
        .env("LD_PRELOAD", preload_with(&lib))
        .env("PYIGPROF_LOG", &log.path);
    for (name, value) in &settings {
        command.env(name, value);
    }
    if !record.subprocesses && !record.all_processes {
        // The command's own process only: the one whose parent is this process.
        command.env("PYIGPROF_ONLY_CHILD_OF", std::process::id().to_string());
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            // It never ran: no process of it wrote anything.
            eprintln!(
                "pyigprof: the program failed to start: cannot run {}: {e}; no profile was written",
                record.command[0].to_string_lossy()
            );
            return ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    // Ctrl-C and Ctrl-\ reach the program (the terminal's process group): this command
    // waits for it to end, then says where its profile is.
    leave_interrupts_to_the_program();
    let status = match child.wait() {
        Ok(status) => status,
        Err(e) => {
            eprintln!("pyigprof: cannot wait for the program: {e}");
            return ExitCode::from(2);
        }
    };
    if !record.quiet {
        let lines = log.lines();
        for line in &lines {
            eprintln!("{line}");
        }
        let written = profiles_written(&lines);
        let windows = windows_written(&lines);
        match written.len() {
            _ if !windows.is_empty() => {
                for (count, first, last) in &windows {
                    eprintln!(
                        "pyigprof: {count} {}: {} … {}",
                        pyigprof_pprof::plural(*count, "window"),
                        shown(first),
                        shown(last)
                    );
                }
                let globs: Vec<String> = windows
                    .iter()
                    .map(|(_, first, last)| glob_of(&shown(first), &shown(last)))
                    .collect();
                eprintln!(
                    "pyigprof: read with: pyigprof report --top {} (the whole run; one window: pyigprof report --top {})",
                    globs.join(" "),
                    shown(&windows[0].2)
                );
            }
            // Pushed only: the library's line said where.
            0 if record.push.is_some() && record.output.is_none() => {}
            // The library's own line said why it could not write one.
            0 if lines.iter().any(|l| l.contains("cannot create the profile") || l.contains("cannot write the profile")) => {}
            0 => eprintln!(
                "pyigprof: no profile was written to {} (a program that runs no Python writes none unless --all-processes)",
                pattern.display()
            ),
            _ => {
                let names: Vec<String> = written.iter().map(|p| shown(p)).collect();
                eprintln!(
                    "pyigprof: {} profile{}: {}",
                    names.len(),
                    if names.len() == 1 { "" } else { "s" },
                    names.join(" ")
                );
                eprintln!("pyigprof: read with: pyigprof report --top {}", names.join(" "));
            }
        }
    }
    pass_through(status)
}

/// The file the program's processes append their lines to (`PYIGPROF_LOG`), removed when
/// dropped.
struct Log {
    path: PathBuf,
}

impl Log {
    /// Creates an empty file of this command's in the temporary directory.
    ///
    /// # Errors
    /// A message naming the file that could not be created.
    fn create() -> Result<Log, String> {
        let dir = std::env::temp_dir();
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = dir.join(format!(
            "pyigprof-record-{}-{nanos}.log",
            std::process::id()
        ));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(Log { path })
    }

    /// The lines the program's processes wrote, in the order they wrote them.
    fn lines(&self) -> Vec<String> {
        std::fs::read(&self.path)
            .map(|bytes| {
                String::from_utf8_lossy(&bytes)
                    .lines()
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The profiles that the summary lines among `lines` name (`pyigprof: wrote PATH: …`, PATH
/// absolute), in their order: the longest part before a `: ` that is a file.
fn profiles_written(lines: &[String]) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    for rest in lines
        .iter()
        .filter_map(|l| l.strip_prefix("pyigprof: wrote "))
    {
        let path = rest
            .match_indices(": ")
            .map(|(at, _)| Path::new(&rest[..at]))
            .filter(|p| p.is_file())
            .last();
        if let Some(path) = path {
            if !found.iter().any(|f| f == path) {
                found.push(path.to_path_buf());
            }
        }
    }
    found
}

/// The windows that the summary lines among `lines` name (`pyigprof: wrote N windows of S
/// s: FIRST … LAST`, `1 window of` for one, from `PYIGPROF_WINDOW`): (N, FIRST, LAST) per process.
fn windows_written(lines: &[String]) -> Vec<(u32, PathBuf, PathBuf)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("pyigprof: wrote "))
        .filter_map(|rest| {
            let (count, rest) = rest
                .split_once(" windows of ")
                .or_else(|| rest.split_once(" window of "))?;
            let (_, paths) = rest.split_once(" s: ")?;
            let (first, last) = paths.split_once(" … ")?;
            let last = last.split(" (").next().unwrap_or(last);
            Some((
                count.parse().ok()?,
                PathBuf::from(first),
                PathBuf::from(last),
            ))
        })
        .collect()
}

/// A shell pattern for the windows from `first` to `last`: their common beginning and end
/// around `*` (`pyigprof.1234.w*.gz`).
fn glob_of(first: &str, last: &str) -> String {
    let head = first
        .chars()
        .zip(last.chars())
        .take_while(|(a, b)| a == b)
        .count();
    let tail = first[head..]
        .chars()
        .rev()
        .zip(last[head..].chars().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let first: Vec<char> = first.chars().collect();
    let start: String = first[..head].iter().collect();
    let end: String = first[first.len() - tail..].iter().collect();
    // Digits shared at the start of the number (w1 … w19) are part of what varies.
    let start = start.trim_end_matches(|c: char| c.is_ascii_digit());
    format!("{start}*{end}")
}

/// `path` as a user in this command's directory would type it: relative when it is under
/// the working directory.
fn shown(path: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf())
        .display()
        .to_string()
}

/// Ignores Ctrl-C and Ctrl-\ (`SIGINT`, `SIGQUIT`) in this command while it waits for a
/// program it started: the terminal sends them to its whole process group, and the
/// program decides what they do (`record`, `top --batch … -- CMD`).
pub fn leave_interrupts_to_the_program() {
    // SAFETY: setting dispositions of this process to "ignore".
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
}

/// The program's exit status as this command's: its exit code, or its signal sent again
/// to this process with the default action.
fn pass_through(status: std::process::ExitStatus) -> ExitCode {
    if let Some(code) = status.code() {
        return ExitCode::from(code as u8);
    }
    if let Some(signal) = status.signal() {
        // SAFETY: restoring the default action and ending this process by the signal.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(signal);
        }
        return ExitCode::from(128u8.wrapping_add(signal as u8));
    }
    ExitCode::from(1)
}

/// `pyigprof report ARGS…`: runs `pyigprof-analyse ARGS…` (next to this command, else on
/// `PATH`) in place of this process.
pub fn report(args: &[OsString]) -> ExitCode {
    let beside = own_dir()
        .map(|dir| dir.join("pyigprof-analyse"))
        .filter(|p| p.is_file());
    let analyser = beside.unwrap_or_else(|| PathBuf::from("pyigprof-analyse"));
    let error = std::process::Command::new(&analyser)
        .arg0(OsStr::new("pyigprof-analyse"))
        .args(args)
        .exec();
    eprintln!("pyigprof: cannot run {}: {error}", analyser.display());
    ExitCode::from(2)
}
