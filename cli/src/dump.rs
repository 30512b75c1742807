//! `pyigprof dump PID`: every thread's call stack in a running Python process, once —
//! Python functions and lines with the native frames between them (py-spy's `dump`).
//!
//! The command opens a window in the process as `pyigprof attach` does
//! ([`crate::attach::open_window`], with `PYIGPROF_ATTACH_PURPOSE=live`: nothing is
//! written), asks `dump`, prints the answer and closes the window. In a process started
//! under pyigprof the preloaded library answers at once (its sampler has every thread's
//! latest sample); in one that was not, the library is loaded, samples the threads for a
//! moment, answers, and stops sampling, leaving the program as `attach` does. The library
//! captures a thread blocked in a system call as it is now, and gives a running thread
//! its latest CPU sample (`preload/src/output/live.rs`).
//!
//! Output: per thread, its id, name, what it does (running, or waiting — for the GIL, a
//! lock, I/O, sleeping, … — in which system call) and its frames, innermost first (the most recent call on top, as py-spy prints),
//! each `function (file:line)` for Python code, `function (object)` for native code;
//! `--json` gives the same as one JSON object.
//!
//! Exit status: 0 when the stacks were printed; 1 when the process could not be read (one
//! line says why); 2 for a command-line error or a library that is not found.

use crate::attach::open_window;
use serde_json::json;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// What `pyigprof dump` was asked.
#[derive(Debug, clap::Args)]
pub struct Dump {
    /// The process (its process id).
    pub pid: i32,

    /// Prints one JSON object instead of text: `{"pid", "python", "command", "threads":
    /// [{"tid", "name", "system_name", "main", "state", "syscall", "stack_from", "gil",
    /// "waiting", "frames": [{"name",
    /// "file", "line", "offset", "python"}]}], "tasks": [{"address", "name", "thread",
    /// "running", "awaited_by", "awaited_by_name", "frames": [{"name", "file", "line",
    /// "python"}]}]}`, frames innermost first; `tasks` lists asyncio's pending tasks (3.11+;
    /// `thread` null before 3.14).
    #[arg(long)]
    pub json: bool,

    /// Python frames only (the native frames between them left out).
    #[arg(long)]
    pub python: bool,

    /// The library to load into a process that has none. Default: `$PYIGPROF_LIB`, else
    /// `libpyigprof.so` next to this command (or in `../lib`, or the installed Python
    /// package's).
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
}

/// One frame as the library reported it.
#[derive(Debug)]
struct Frame {
    python: bool,
    line: Option<u64>,
    offset: u64,
    file: String,
    name: String,
}

/// One thread as the library reported it.
#[derive(Debug)]
struct Thread {
    tid: i32,
    main: bool,
    state: char,
    syscall: Option<String>,
    from: String,
    /// Whether it holds the GIL; `None` where the library cannot tell.
    gil: Option<bool>,
    /// What it waits for when blocked: `GIL`, `lock`, `I/O`, `sleep`, `child process`,
    /// `other system call` (wall mode's `<waiting: …>` words); `None` when not known.
    waiting: Option<String>,
    /// The system's name of the thread (`comm`).
    system_name: String,
    /// The name `threading` gave it, when read.
    python_name: Option<String>,
    frames: Vec<Frame>,
}

impl Thread {
    /// The name shown: `threading`'s (`Thread.name`, as py-spy shows it) when known, else
    /// the system's.
    fn name(&self) -> &str {
        self.python_name.as_deref().unwrap_or(&self.system_name)
    }
}

/// One asyncio task as the library reported it (3.14+).
#[derive(Debug)]
struct Task {
    /// The task object's address, as the library wrote it (`0x…`).
    address: String,
    /// The thread whose task list holds it (the one that created it; 3.14+), 0 when not
    /// known (before 3.14 tasks are the interpreter's).
    tid: i32,
    /// Whether its thread runs its step now.
    running: bool,
    /// The address of the task that awaits it.
    awaited_by: Option<String>,
    name: String,
    /// Its coroutines where they wait, innermost first (none while it runs).
    frames: Vec<Frame>,
}

/// The library's answer (`preload/src/output/live.rs`, `report`).
#[derive(Debug, Default)]
struct Answer {
    pid: i32,
    python: String,
    command: String,
    threads: Vec<Thread>,
    tasks: Vec<Task>,
}

impl Answer {
    /// The name of the task at `address`, if listed.
    fn task_name(&self, address: &str) -> Option<&str> {
        self.tasks
            .iter()
            .find(|t| t.address == address)
            .map(|t| t.name.as_str())
    }
}

/// Parses the answer's lines up to `end`. An error names the line that is not as expected.
fn read_answer(lines: &mut impl BufRead) -> Result<Answer, String> {
    let mut answer = Answer::default();
    for (n, line) in lines.lines().enumerate() {
        let line = line.map_err(|e| format!("reading the answer: {e}"))?;
        let fields: Vec<&str> = line.split('\t').collect();
        let bad = || {
            format!(
                "line {} of the library's answer is not as expected: {line:?}",
                n + 1
            )
        };
        match fields.as_slice() {
            ["end"] => return Ok(answer),
            ["process", pid, python, command] => {
                answer.pid = pid.parse().map_err(|_| bad())?;
                answer.python = python.to_string();
                answer.command = command.to_string();
            }
            ["thread", tid, main, state, syscall, from, gil, waiting, name, python_name] => {
                answer.threads.push(Thread {
                    tid: tid.parse().map_err(|_| bad())?,
                    main: *main == "1",
                    state: state.chars().next().unwrap_or('?'),
                    syscall: (*syscall != "-").then(|| syscall.to_string()),
                    from: from.to_string(),
                    gil: match *gil {
                        "1" => Some(true),
                        "0" => Some(false),
                        _ => None,
                    },
                    waiting: (*waiting != "-").then(|| waiting.to_string()),
                    system_name: name.to_string(),
                    python_name: (*python_name != "-").then(|| python_name.to_string()),
                    frames: Vec::new(),
                })
            }
            ["frame", python, line_no, offset, file, name] => {
                let frame = Frame {
                    python: *python == "1",
                    line: line_no.parse().ok(),
                    offset: offset.parse().map_err(|_| bad())?,
                    file: file.to_string(),
                    // Spelled as the reports spell it (`@{libz.so.1+23968}`, not `@?0x5da0`).
                    name: igprof_analyse::resolve::report_name(file, name),
                };
                // After the threads come the tasks, each with its frames.
                match answer.tasks.last_mut() {
                    Some(task) => task.frames.push(frame),
                    None => answer
                        .threads
                        .last_mut()
                        .ok_or_else(bad)?
                        .frames
                        .push(frame),
                }
            }
            ["task", address, tid, running, awaited_by, name] => {
                answer.tasks.push(Task {
                    address: address.to_string(),
                    tid: tid.parse().map_err(|_| bad())?,
                    running: *running == "1",
                    awaited_by: (*awaited_by != "-").then(|| awaited_by.to_string()),
                    name: name.to_string(),
                    frames: Vec::new(),
                });
            }
            ["error", why] => return Err(why.to_string()),
            ["note", ..] => {}
            _ => return Err(bad()),
        }
    }
    Err("the library closed the connection before the end of its answer".into())
}

/// What a thread does, in words: `running`, `waiting for a lock in futex`, `sleeping in
/// clock_nanosleep`, `waiting in futex` (what for not known), ….
fn doing(thread: &Thread) -> String {
    let what = match thread.waiting.as_deref() {
        Some("GIL") => "waiting for the GIL",
        Some("lock") => "waiting for a lock",
        Some("I/O") => "waiting for I/O",
        Some("sleep") => "sleeping",
        Some("child process") => "waiting for a child process",
        _ => "waiting",
    };
    match (&thread.syscall, thread.state) {
        (Some(call), _) => format!("{what} in {call}"),
        (None, 'R') => "running".into(),
        (None, 'S') | (None, 'D') => "waiting".into(),
        (None, 'T') | (None, 't') => "stopped".into(),
        (None, other) => format!("state {other}"),
    }
}

/// Where the stack comes from, in words.
fn from_words(from: &str) -> &'static str {
    match from {
        "now" => "now",
        "sample" => "its latest sample",
        "unsampled" => "not sampled",
        _ => "no sample yet",
    }
}

/// The file part of a frame: `file:line` for Python, the object's file name for native.
fn place(frame: &Frame) -> String {
    match frame.line {
        Some(line) => format!("{}:{line}", frame.file),
        None => Path::new(&frame.file)
            .file_name()
            .map_or(frame.file.clone(), |n| n.to_string_lossy().into_owned()),
    }
}

fn text(answer: &Answer, python_only: bool) -> String {
    let mut out = format!(
        "Process {}: {}\nPython {}; {} {}; frames innermost first\n",
        answer.pid,
        answer.command,
        answer.python,
        answer.threads.len(),
        pyigprof_pprof::plural(answer.threads.len(), "thread")
    );
    for thread in &answer.threads {
        out.push_str(&format!(
            "\nThread {} \"{}\"{}{}: {} (stack: {})\n",
            thread.tid,
            thread.name(),
            if thread.main { " (main)" } else { "" },
            if thread.gil == Some(true) {
                ", holds the GIL"
            } else {
                ""
            },
            doing(thread),
            from_words(&thread.from)
        ));
        for frame in thread.frames.iter().filter(|f| f.python || !python_only) {
            out.push_str(&format!("    {} ({})\n", frame.name, place(frame)));
        }
    }
    if !answer.tasks.is_empty() {
        out.push_str(&format!(
            "\nasyncio tasks: {}; each one's coroutines where they wait, innermost first\n",
            answer.tasks.len()
        ));
    }
    for task in &answer.tasks {
        let awaited = match &task.awaited_by {
            Some(by) => format!(
                ", awaited by \"{}\"",
                answer.task_name(by).unwrap_or("a task not listed")
            ),
            None => String::new(),
        };
        let thread = match task.tid {
            0 => String::new(),
            tid => format!(" (thread {tid})"),
        };
        out.push_str(&format!(
            "\nTask \"{}\"{thread}{awaited}: {}\n",
            task.name,
            if task.running {
                "running (its frames are its thread's)"
            } else {
                "waiting"
            }
        ));
        for frame in &task.frames {
            out.push_str(&format!("    {} ({})\n", frame.name, place(frame)));
        }
    }
    out
}

fn to_json(answer: &Answer, python_only: bool) -> serde_json::Value {
    json!({
        "pid": answer.pid,
        "python": answer.python,
        "command": answer.command,
        "threads": answer.threads.iter().map(|t| json!({
            "tid": t.tid,
            "name": t.name(),
            "system_name": t.system_name,
            "main": t.main,
            "state": doing(t),
            "syscall": t.syscall,
            "stack_from": t.from,
            "gil": t.gil,
            "waiting": t.waiting,
            "frames": t.frames.iter().filter(|f| f.python || !python_only).map(|f| json!({
                "name": f.name,
                "file": f.file,
                "line": f.line,
                "offset": f.offset,
                "python": f.python,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "tasks": answer.tasks.iter().map(|t| json!({
            "address": t.address,
            "name": t.name,
            "thread": (t.tid != 0).then_some(t.tid),
            "running": t.running,
            "awaited_by": t.awaited_by,
            "awaited_by_name": t.awaited_by.as_deref().and_then(|a| answer.task_name(a)),
            "frames": t.frames.iter().map(|f| json!({
                "name": f.name,
                "file": f.file,
                "line": f.line,
                "python": f.python,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// `pyigprof dump`: see the module documentation.
pub fn dump(args: &Dump) -> ExitCode {
    let started = Instant::now();
    let pid = args.pid;
    let lib = match crate::launch::library(args.lib.as_deref()) {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!("pyigprof dump: {e}");
            return ExitCode::from(2);
        }
    };
    // Nothing is written; the setting only has to be valid.
    let output = std::env::temp_dir().join("pyigprof-dump-unused.%p.gz");
    let session = match open_window(pid, &lib, &output, "PYIGPROF_ATTACH_PURPOSE=live\n", "dump") {
        Ok(session) => session,
        Err(refused) => {
            eprintln!("pyigprof dump: process {pid}: {}", refused.why);
            return ExitCode::from(refused.status);
        }
    };
    let mut session = session;
    if std::env::var_os("PYIGPROF_LIVE_FAULT_CHECK").is_some() {
        // For the tests: the library's answering thread reads an unmapped address first
        // (its answer, or why there is none, on stderr).
        let mut line = String::new();
        let asked = session
            .stream
            .write_all(b"fault-check\n")
            .and_then(|()| session.lines.read_line(&mut line));
        match asked {
            Ok(n) if n > 0 => eprint!("pyigprof dump: {line}"),
            _ => eprintln!("pyigprof dump: fault-check: no answer"),
        }
    }
    let answer = session
        .stream
        .write_all(b"dump\n")
        .map_err(|e| format!("cannot ask: {e}"))
        .and_then(|()| read_answer(&mut session.lines));
    // Closed either way: the process goes on as it was.
    session.close();
    let answer = match answer {
        Ok(answer) => answer,
        Err(why) => {
            eprintln!("pyigprof dump: process {pid}: {why}");
            return ExitCode::from(1);
        }
    };
    let printed = if args.json {
        format!("{}\n", to_json(&answer, args.python))
    } else {
        text(&answer, args.python)
    };
    let _ = std::io::stdout().write_all(printed.as_bytes());
    if std::env::var_os("PYIGPROF_DUMP_TIMING").is_some() {
        eprintln!(
            "pyigprof dump: {} ms from the command's start",
            started.elapsed().as_millis()
        );
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_read_and_printed_innermost_first() {
        let raw = "process\t42\t3.12.1\tpython app.py\n\
                   thread\t42\t1\tS\tfutex\tnow\t0\tlock\tpython\tMainThread\n\
                   frame\t0\t-\t12\t/usr/lib/libc.so.6\t__futex_abstimed_wait_common\n\
                   frame\t1\t7\t0\tapp.py\twait_on_lock\n\
                   frame\t1\t20\t0\tapp.py\t<module>\n\
                   thread\t43\t0\tR\t-\tsample\t1\t-\tworker\t-\n\
                   frame\t1\t3\t0\tapp.py\tspin\n\
                   thread\t44\t0\tS\tfutex\tunsampled\t-\t-\tblas\t-\n\
                   end\n";
        let answer = read_answer(&mut raw.as_bytes()).unwrap();
        assert_eq!(answer.threads.len(), 3);
        let shown = text(&answer, false);
        assert!(
            shown.contains("Thread 44 \"blas\": waiting in futex (stack: not sampled)\n"),
            "{shown}"
        );
        assert!(shown.contains("Thread 42 \"MainThread\" (main): waiting for a lock in futex (stack: now)\n    __futex_abstimed_wait_common (libc.so.6)\n    wait_on_lock (app.py:7)\n"), "{shown}");
        assert!(
            shown.contains(
                "Thread 43 \"worker\", holds the GIL: running (stack: its latest sample)\n    spin (app.py:3)\n"
            ),
            "{shown}"
        );
        assert!(!text(&answer, true).contains("libc"));
        let json = to_json(&answer, false);
        assert_eq!(json["threads"][0]["syscall"], "futex");
        assert_eq!(json["threads"][0]["waiting"], "lock");
        assert_eq!(json["threads"][1]["waiting"], serde_json::Value::Null);
        assert_eq!(json["threads"][0]["frames"][1]["line"], 7);
        assert_eq!(json["threads"][0]["gil"], false);
        assert_eq!(json["threads"][1]["gil"], true);
        assert_eq!(json["threads"][0]["name"], "MainThread");
        assert_eq!(json["threads"][0]["system_name"], "python");
        assert_eq!(json["threads"][1]["name"], "worker");
    }

    #[test]
    fn a_malformed_answer_names_its_line() {
        let raw = "process\t42\t3.12.1\tpython\nthread\tx\n";
        let err = read_answer(&mut raw.as_bytes()).unwrap_err();
        assert!(err.starts_with("line 2 of the library's answer"), "{err}");
        let cut = "process\t42\t3.12.1\tpython\n";
        let err = read_answer(&mut cut.as_bytes()).unwrap_err();
        assert!(err.contains("before the end"), "{err}");
    }
}
