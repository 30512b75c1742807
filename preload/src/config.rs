//! Settings, read once from `PYIGPROF_*` environment variables by the library constructor.
//!
//! A malformed value gets one line that names the variable and what was expected, where
//! pyigprof's lines go (`PYIGPROF_LOG`, [`crate::messages`]), and the default is used: the
//! profiled program always runs.

use std::ffi::OsString;

/// Default sampling rate, in samples per second of CPU time. 250 Hz costs a program under
/// 1 % of its CPU time on this VM, the profiler's helper process included, where 1 kHz
/// costs 2–3 % (README, "Benchmarks": each sample costs 20–30 µs beyond the handler's own
/// time), and it is the finest rate at which every kernel tick of a `CONFIG_HZ=250` kernel
/// is its own signal where POSIX timers sample (`shared/design/timers.md`).
pub const DEFAULT_HZ: u32 = 250;

/// Highest accepted `PYIGPROF_HZ`: one sample every 10 µs of CPU.
pub const MAX_HZ: u32 = 100_000;

/// Default profile path; `%p` becomes the process id.
pub const DEFAULT_OUTPUT: &str = "pyigprof.%p.gz";

/// Which clock drives sampling (`PYIGPROF_CLOCK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// Each thread is sampled on its own CPU time (`CLOCK_THREAD_CPUTIME_ID`): the profile
    /// shows where CPU time goes, attributed to the thread that spent it.
    Cpu,
    /// Each thread is sampled on wall-clock time (`CLOCK_MONOTONIC`), running or not: time
    /// blocked in `sleep`, I/O or a lock shows up too (stackprof's `:wall` mode).
    Wall,
}

impl Clock {
    /// The name used in `PYIGPROF_CLOCK` and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Clock::Cpu => "cpu",
            Clock::Wall => "wall",
        }
    }
}

/// Trace-tree nodes from which the trees are forgotten between two windows
/// (`PYIGPROF_MAX_TREE_NODES`): 65,536 nodes of 40 bytes, with the child index and the
/// window writer's readings (32 bytes a node, twice), about 9 MiB.
pub const DEFAULT_MAX_TREE_NODES: usize = 1 << 16;

/// The window of continuous profiling when `PYIGPROF_PUSH` is set without
/// `PYIGPROF_WINDOW`, ms (Datadog's profiler uploads every 60 s).
pub const DEFAULT_PUSH_WINDOW_MS: u64 = 60_000;

/// Where and how windows are pushed (`PYIGPROF_PUSH`, [`crate::output::push`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Push {
    /// The ingest URL: `PYIGPROF_PUSH` without user and password, `/ingest` added unless
    /// it ends so.
    pub url: String,
    /// What messages say of the URL: scheme, host and port only (never a password, a
    /// token or a query).
    pub shown: String,
    /// Headers of every request, `(name, value)`: `PYIGPROF_PUSH_HEADERS`, basic
    /// authentication from the URL's `user:password@`, `PYIGPROF_PUSH_TOKEN` as a bearer
    /// token.
    pub headers: Vec<(String, String)>,
    /// `PYIGPROF_APP_NAME`; `None`: the script's or module's name.
    pub app_name: Option<String>,
    /// `PYIGPROF_LABELS`, `(key, value)` in the order given.
    pub labels: Vec<(String, String)>,
}

/// A parsed `PYIGPROF_PUSH`: the URL to post to, what messages show of it, and the
/// basic-authentication header `(name, value)` if the URL had a user.
pub type PushUrl = (String, String, Option<(String, String)>);

/// Parses `PYIGPROF_PUSH`'s URL (`http://` or `https://`, with an optional `user:password@`
/// for basic authentication). Returns the URL to post to, what messages show of it, and
/// the basic-authentication header if any.
///
/// # Errors
/// What is wrong with it, without its password.
pub fn parse_push_url(raw: &str) -> Result<PushUrl, String> {
    let raw = raw.trim();
    let (scheme, rest) = raw
        .split_once("://")
        .filter(|(scheme, _)| *scheme == "http" || *scheme == "https")
        .ok_or("expected an http:// or https:// URL (e.g. http://pyroscope:4040)")?;
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    if path.contains(['?', '#']) {
        return Err(format!(
            "expected no query or fragment after {scheme}://{}",
            authority.rsplit('@').next().unwrap_or("")
        ));
    }
    let (user, host) = match authority.rsplit_once('@') {
        Some((user, host)) => (Some(user), host),
        None => (None, authority),
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(format!("expected a host after {scheme}://"));
    }
    let basic = user.map(|user| {
        use base64::Engine;
        let decoded = percent_encoding::percent_decode_str(user).decode_utf8_lossy();
        (
            "Authorization".to_string(),
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(decoded.as_bytes())
            ),
        )
    });
    let path = path.trim_end_matches('/');
    let path = if path.ends_with("/ingest") {
        path.to_string()
    } else {
        format!("{path}/ingest")
    };
    Ok((
        format!("{scheme}://{host}{path}"),
        format!("{scheme}://{host}"),
        basic,
    ))
}

/// Whether `text` is a label name or application name Pyroscope takes: letters, digits,
/// `_`, `.` and `-`, not empty.
fn plain_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Parses `PYIGPROF_LABELS` (`k=v,k2=v2`).
///
/// # Errors
/// The first label that is not `name=value` with a plain name and a value without `,`,
/// `{`, `}` or `=`.
pub fn parse_labels(raw: &str) -> Result<Vec<(String, String)>, String> {
    raw.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| match item.split_once('=') {
            Some((key, value))
                if plain_name(key.trim())
                    && !value.trim().is_empty()
                    && !value.contains(['{', '}', '=']) =>
            {
                Ok((key.trim().to_string(), value.trim().to_string()))
            }
            _ => Err(format!(
                "{item:?} is not name=value (a name of letters, digits, _ . -; a value without {{ }} =)"
            )),
        })
        .collect()
}

/// Parses `PYIGPROF_PUSH_HEADERS` (`Name: value`, several separated by `;` or newlines).
///
/// # Errors
/// The first header without a name or a `:`, shown by name only (values may be secrets).
pub fn parse_headers(raw: &str) -> Result<Vec<(String, String)>, String> {
    raw.split([';', '\n'])
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| match item.split_once(':') {
            Some((name, value))
                if !name.trim().is_empty()
                    && name
                        .trim()
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-') =>
            {
                Ok((name.trim().to_string(), value.trim().to_string()))
            }
            _ => Err(format!(
                "a header ({} characters) is not \"Name: value\"",
                item.len()
            )),
        })
        .collect()
}

/// The profiler's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Sampling rate in samples per second of CPU time (`PYIGPROF_HZ`).
    pub hz: u32,
    /// Profile path template (`PYIGPROF_OUTPUT`); `%p` is the pid, `%%` a literal `%`.
    /// A name ending in `.gz` is gzip-compressed, any other is plain text.
    pub output: OsString,
    /// The clock that drives sampling (`PYIGPROF_CLOCK=cpu|wall`, default `cpu`).
    pub clock: Clock,
    /// Nothing said anywhere, neither the summary at exit nor warnings (`PYIGPROF_QUIET` set
    /// to anything but `0` or empty).
    pub quiet: bool,
    /// Keep only the samples of threads that hold the GIL (`PYIGPROF_GIL=1`, py-spy's
    /// `--gil`): what the interpreter does while others wait for it.
    pub gil_only: bool,
    /// Read asyncio's tasks (CPython 3.14+): `<task …>` frames, suspended tasks in wall
    /// mode (`PYIGPROF_ASYNCIO=0` turns it off; default on).
    pub asyncio: bool,
    /// Where pyigprof's lines go (`PYIGPROF_LOG`: `tty`, the default, `stderr`, or a file
    /// appended to); [`crate::messages`].
    pub log: crate::messages::Destination,
    /// Signal that writes a snapshot profile on demand (`PYIGPROF_DUMP_SIGNAL=SIGUSR2`, a
    /// name with or without `SIG`, or a number); `None` = off.
    pub dump_signal: Option<libc::c_int>,
    /// Seconds between periodic snapshot profiles (`PYIGPROF_DUMP_INTERVAL`); `None` = off.
    pub dump_interval_s: Option<u32>,
    /// Continuous profiling (`PYIGPROF_WINDOW=SECONDS`, a decimal number from 0.05 to
    /// 86,400): every so many seconds of wall time the samples of the window are written
    /// as a profile of their own and the next window starts empty
    /// ([`crate::output::windows`]); `%n` in the output path is the window's number.
    /// Milliseconds; `None` = one profile for the whole run.
    pub window_ms: Option<u64>,
    /// Where each window is pushed (`PYIGPROF_PUSH`, Grafana Pyroscope's ingest API), with
    /// what ([`Push`]); `None`: windows go to disk only.
    pub push: Option<Push>,
    /// Whether `PYIGPROF_OUTPUT` was set: with `PYIGPROF_PUSH`, windows go to disk too.
    pub output_given: bool,
    /// `PYIGPROF_MAX_OVERHEAD`: the profiler's cost (the handler's time and the helper
    /// process's CPU) at most this per cent of the program's CPU time, by lengthening the
    /// sampling interval ([`crate::sources::budget`]); `None`: the rate asked, whatever it
    /// costs. In millionths of the program's CPU time (1 % = 10,000).
    pub max_overhead_ppm: Option<u32>,
    /// `PYIGPROF_MAX_TREE_NODES`: with windows, the trace trees are forgotten at the next
    /// window once they hold this many nodes ([`crate::output::windows`]), so that a
    /// service's profiler memory stays bounded; default [`DEFAULT_MAX_TREE_NODES`].
    pub max_tree_nodes: usize,
    /// Profile processes that are not Python too, native frames only
    /// (`PYIGPROF_ALL_PROCESSES=1`); by default they are left alone.
    pub all_processes: bool,
    /// Only the process whose parent has this process id is profiled
    /// (`PYIGPROF_ONLY_CHILD_OF`; `pyigprof record` without `--subprocesses` sets its own):
    /// that process's fork children and the programs it runs, which inherit the preload,
    /// are left alone, and the programs it `exec`s in its place are profiled. `None` (the
    /// default): every Python process that inherits the preload is profiled.
    pub only_child_of: Option<u32>,
    /// Sample CPU (or wall) time (`PYIGPROF_PROFILE` names `cpu`; the default).
    pub profile_cpu: bool,
    /// Sample allocations (`PYIGPROF_PROFILE` names `mem`).
    pub profile_memory: bool,
    /// Sample the waits for locks and their holds (`PYIGPROF_PROFILE` names `lock`:
    /// `crate::sources::locks`).
    pub profile_locks: bool,
    /// Mean nanoseconds of waiting (of holding) between two sampled waits (holds)
    /// (`PYIGPROF_LOCK_RATE`, a duration: `500us`, `1ms`, `2ms`, or ns without a unit); 1
    /// records every one.
    pub lock_rate_ns: u64,
    /// Mean bytes allocated between two sampled allocations (`PYIGPROF_MEM_RATE`, a number
    /// of bytes with an optional `k`/`K`/`KiB`, `M`/`MiB` or `G`/`GiB` suffix); 1 records
    /// every allocation.
    pub mem_rate: u64,
    /// The event sampled in cpu mode (`PYIGPROF_EVENT`, perf's names: `task-clock`, the
    /// default, for CPU time; `page-faults`, `context-switches`, `cycles`, …, optionally
    /// with `/period=N/`), through per-thread perf events.
    pub event: crate::sources::perf::Event,
    /// Whether threads are sampled on perf events (the default in cpu mode;
    /// `PYIGPROF_PERF_EVENTS=0` asks for the POSIX CPU timers instead).
    pub perf_events: bool,
    /// Where the sorted function-symbol index of each object is kept between runs, by
    /// build-id (`PYIGPROF_SYMBOL_CACHE`; default `$XDG_CACHE_HOME/pyigprof/symbols`, else
    /// `$HOME/.cache/pyigprof/symbols`, when that cache directory exists; `0` or empty:
    /// none). See
    /// [`crate::capture::symbols::use_cache`].
    pub symbol_cache: Option<std::path::PathBuf>,
}

/// Parses a byte count: a whole number with an optional binary suffix (`512k`, `4MiB`).
/// A duration in nanoseconds: a number with `ns`, `us`, `ms` or `s` (ns without one); `None`
/// for anything else or 0.
fn parse_duration_ns(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, scale) = [("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)]
        .iter()
        .find_map(|(unit, scale)| Some((text.strip_suffix(unit)?, *scale)))
        .unwrap_or((text, 1.0));
    let value: f64 = number.trim().parse().ok()?;
    let ns = value * scale;
    (ns.is_finite() && (1.0..1e18).contains(&ns)).then_some(ns.round() as u64)
}

fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let scale: u64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(scale).filter(|&n| n > 0)
}

/// A setting `name` that is `1` (on: `meaning.0`) or `0` (off: `meaning.1`), `default`
/// when unset or empty; anything else is said in `complaints` (naming both meanings) and
/// gives `default`.
fn switch(
    lookup: &impl Fn(&str) -> Option<OsString>,
    name: &str,
    meaning: (&str, &str),
    default: bool,
    complaints: &mut Vec<String>,
) -> bool {
    let Some(raw) = lookup(name) else {
        return default;
    };
    match raw.to_str().map(str::trim) {
        Some("1") => true,
        Some("0") => false,
        Some("") => default,
        _ => {
            complaints.push(format!(
                "pyigprof: {name}={raw:?} is not 1 ({}) or 0 ({}); using {}",
                meaning.0,
                meaning.1,
                u8::from(default)
            ));
            default
        }
    }
}

/// Signals `PYIGPROF_DUMP_SIGNAL` may name: those whose default action the program is
/// unlikely to rely on.
const DUMP_SIGNALS: [(&str, libc::c_int); 4] = [
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("WINCH", libc::SIGWINCH),
    ("URG", libc::SIGURG),
];

/// Parses a signal name (`SIGUSR2`, `USR2`) or number among [`DUMP_SIGNALS`] and the
/// real-time signals.
fn parse_signal(text: &str) -> Option<libc::c_int> {
    let text = text.trim();
    let name = text.strip_prefix("SIG").unwrap_or(text);
    if let Some(&(_, number)) = DUMP_SIGNALS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
    {
        return Some(number);
    }
    let number: libc::c_int = text.parse().ok()?;
    (DUMP_SIGNALS.iter().any(|&(_, n)| n == number)
        || (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&number))
    .then_some(number)
}

impl Config {
    /// Whether this process is left alone because `PYIGPROF_ONLY_CHILD_OF` names another
    /// parent than its own. Async-signal-safe.
    pub fn left_alone(&self) -> bool {
        // SAFETY: getppid has no preconditions.
        self.only_child_of
            .is_some_and(|parent| parent != unsafe { libc::getppid() } as u32)
    }

    /// Reads the settings from the process environment, reporting malformed values where
    /// pyigprof's lines go ([`crate::messages`], `PYIGPROF_LOG`).
    pub fn from_env() -> Config {
        let (config, complaints) = Config::parse(|name| std::env::var_os(name));
        // Before the complaints, which go where it says; later lines (a fork child's) too.
        crate::messages::set(&config.log, config.quiet);
        for line in complaints {
            crate::notice!("{line}");
        }
        config
    }

    /// Parses settings from `lookup` (a stand-in for the environment). Returns the settings
    /// and one message per malformed variable.
    pub fn parse(lookup: impl Fn(&str) -> Option<OsString>) -> (Config, Vec<String>) {
        let mut complaints = Vec::new();
        let hz = match lookup("PYIGPROF_HZ") {
            None => DEFAULT_HZ,
            Some(raw) => match raw.to_str().and_then(|s| s.trim().parse::<u32>().ok()) {
                Some(hz) if (1..=MAX_HZ).contains(&hz) => hz,
                _ => {
                    complaints.push(format!(
                        "pyigprof: PYIGPROF_HZ={:?} is not a whole number of samples per second \
                         from 1 to {MAX_HZ}; using the default {DEFAULT_HZ}",
                        raw
                    ));
                    DEFAULT_HZ
                }
            },
        };
        let output = match lookup("PYIGPROF_OUTPUT") {
            Some(raw) if !raw.is_empty() => raw,
            Some(_) => {
                complaints.push(format!(
                    "pyigprof: PYIGPROF_OUTPUT is empty, expected a file path (with %p for the \
                     pid); using the default {DEFAULT_OUTPUT}"
                ));
                DEFAULT_OUTPUT.into()
            }
            None => DEFAULT_OUTPUT.into(),
        };
        let clock = match lookup("PYIGPROF_CLOCK") {
            None => Clock::Cpu,
            Some(raw) => match raw.to_str().map(str::trim) {
                Some("cpu") => Clock::Cpu,
                Some("wall") => Clock::Wall,
                _ => {
                    complaints.push(format!(
                        "pyigprof: PYIGPROF_CLOCK={raw:?} is not \"cpu\" or \"wall\"; using the default cpu"
                    ));
                    Clock::Cpu
                }
            },
        };
        let quiet = lookup("PYIGPROF_QUIET").is_some_and(|v| !v.is_empty() && v != "0");
        let gil_only = switch(
            &lookup,
            "PYIGPROF_GIL",
            (
                "only the samples of threads holding the GIL",
                "every sample",
            ),
            false,
            &mut complaints,
        );
        let asyncio = switch(
            &lookup,
            "PYIGPROF_ASYNCIO",
            ("asyncio's tasks read", "not read"),
            true,
            &mut complaints,
        );
        let log = lookup("PYIGPROF_LOG").map_or(crate::messages::Destination::Terminal, |raw| {
            crate::messages::Destination::parse(&raw)
        });
        let dump_signal = lookup("PYIGPROF_DUMP_SIGNAL").filter(|v| !v.is_empty()).and_then(|raw| {
            let parsed = raw.to_str().and_then(parse_signal);
            if parsed.is_none() {
                complaints.push(format!(
                    "pyigprof: PYIGPROF_DUMP_SIGNAL={raw:?} is not SIGUSR1, SIGUSR2, SIGWINCH, SIGURG or a \
                     real-time signal number; no dump signal"
                ));
            }
            parsed
        });
        let dump_interval_s = lookup("PYIGPROF_DUMP_INTERVAL")
            .filter(|v| !v.is_empty())
            .and_then(
                |raw| match raw.to_str().and_then(|s| s.trim().parse::<u32>().ok()) {
                    Some(s) if s > 0 => Some(s),
                    _ => {
                        complaints.push(format!(
                        "pyigprof: PYIGPROF_DUMP_INTERVAL={raw:?} is not a whole number of seconds \
                         above 0; no periodic profiles"
                    ));
                        None
                    }
                },
            );
        let window_ms = lookup("PYIGPROF_WINDOW")
            .filter(|v| !v.is_empty())
            .and_then(
                |raw| match raw.to_str().and_then(|s| s.trim().parse::<f64>().ok()) {
                    Some(s) if (0.05..=86_400.0).contains(&s) => Some((s * 1000.0).round() as u64),
                    _ => {
                        complaints.push(format!(
                            "pyigprof: PYIGPROF_WINDOW={raw:?} is not a number of seconds from \
                             0.05 to 86400; one profile for the whole run"
                        ));
                        None
                    }
                },
            );
        let push = lookup("PYIGPROF_PUSH").filter(|v| !v.is_empty()).and_then(|raw| {
            let text = raw.to_str().unwrap_or("");
            let (url, shown, basic) = match parse_push_url(text) {
                Ok(parsed) => parsed,
                Err(why) => {
                    complaints.push(format!("pyigprof: PYIGPROF_PUSH: {why}; nothing is pushed"));
                    return None;
                }
            };
            let mut headers = Vec::new();
            if let Some(raw) = lookup("PYIGPROF_PUSH_HEADERS").filter(|v| !v.is_empty()) {
                match parse_headers(&raw.to_string_lossy()) {
                    Ok(more) => headers.extend(more),
                    Err(why) => complaints.push(format!(
                        "pyigprof: PYIGPROF_PUSH_HEADERS: {why}; those headers are not sent"
                    )),
                }
            }
            headers.extend(basic);
            if let Some(token) = lookup("PYIGPROF_PUSH_TOKEN").filter(|v| !v.is_empty()) {
                headers.push((
                    "Authorization".into(),
                    format!("Bearer {}", token.to_string_lossy().trim()),
                ));
            }
            let app_name = lookup("PYIGPROF_APP_NAME").filter(|v| !v.is_empty()).and_then(|raw| {
                let name = raw.to_string_lossy().trim().to_string();
                if plain_name(&name) {
                    Some(name)
                } else {
                    complaints.push(format!(
                        "pyigprof: PYIGPROF_APP_NAME={raw:?} is not a name of letters, digits, _ . -; \
                         using the script's name"
                    ));
                    None
                }
            });
            let labels = match lookup("PYIGPROF_LABELS").filter(|v| !v.is_empty()) {
                None => Vec::new(),
                Some(raw) => parse_labels(&raw.to_string_lossy()).unwrap_or_else(|why| {
                    complaints.push(format!("pyigprof: PYIGPROF_LABELS: {why}; no labels of yours are sent"));
                    Vec::new()
                }),
            };
            Some(Push {
                url,
                shown,
                headers,
                app_name,
                labels,
            })
        });
        // Pushing needs windows: a minute's unless said.
        let window_ms = window_ms.or(push.as_ref().map(|_| DEFAULT_PUSH_WINDOW_MS));
        let output_given = lookup("PYIGPROF_OUTPUT").is_some_and(|v| !v.is_empty());
        let max_tree_nodes = match lookup("PYIGPROF_MAX_TREE_NODES").filter(|v| !v.is_empty()) {
            None => DEFAULT_MAX_TREE_NODES,
            Some(raw) => match raw.to_str().and_then(|s| s.trim().parse::<usize>().ok()) {
                Some(n) if (1024..=1 << 23).contains(&n) => n,
                _ => {
                    complaints.push(format!(
                        "pyigprof: PYIGPROF_MAX_TREE_NODES={raw:?} is not a number of nodes from 1024 \
                         to 8388608; using the default {DEFAULT_MAX_TREE_NODES}"
                    ));
                    DEFAULT_MAX_TREE_NODES
                }
            },
        };
        let max_overhead_ppm = lookup("PYIGPROF_MAX_OVERHEAD")
            .filter(|v| !v.is_empty())
            .and_then(
                |raw| match raw.to_str().and_then(|s| s.trim().trim_end_matches('%').parse::<f64>().ok()) {
                    Some(p) if (0.01..=50.0).contains(&p) => Some((p * 10_000.0).round() as u32),
                    _ => {
                        complaints.push(format!(
                            "pyigprof: PYIGPROF_MAX_OVERHEAD={raw:?} is not a per cent from 0.01 to 50; \
                             sampling at the rate asked, whatever it costs"
                        ));
                        None
                    }
                },
            );
        let all_processes =
            lookup("PYIGPROF_ALL_PROCESSES").is_some_and(|v| !v.is_empty() && v != "0");
        let only_child_of = match lookup("PYIGPROF_ONLY_CHILD_OF") {
            None => None,
            Some(raw) => match raw.to_str().and_then(|s| s.trim().parse::<u32>().ok()) {
                Some(pid) if pid > 0 => Some(pid),
                _ => {
                    complaints.push(format!(
                        "pyigprof: PYIGPROF_ONLY_CHILD_OF={raw:?} is not a process id; every \
                         Python process is profiled"
                    ));
                    None
                }
            },
        };
        let (profile_cpu, profile_memory, profile_locks) = match lookup("PYIGPROF_PROFILE") {
            None => (true, false, false),
            Some(raw) => {
                let text = raw.to_str().unwrap_or("");
                let parts: Vec<&str> = text.split(',').map(str::trim).collect();
                if !parts.is_empty() && parts.iter().all(|p| matches!(*p, "cpu" | "mem" | "lock")) {
                    (
                        parts.contains(&"cpu"),
                        parts.contains(&"mem"),
                        parts.contains(&"lock"),
                    )
                } else {
                    complaints.push(format!(
                        "pyigprof: PYIGPROF_PROFILE={raw:?} is not a list of \"cpu\", \"mem\" and \
                         \"lock\" (e.g. \"cpu,lock\"); using the default cpu"
                    ));
                    (true, false, false)
                }
            }
        };
        let default_lock_rate = crate::sources::locks::DEFAULT_RATE_NS;
        let lock_rate_ns = match lookup("PYIGPROF_LOCK_RATE") {
            None => default_lock_rate,
            Some(raw) => match raw.to_str().and_then(parse_duration_ns) {
                Some(rate) => rate,
                None => {
                    complaints.push(format!(
                        "pyigprof: PYIGPROF_LOCK_RATE={raw:?} is not a duration above 0 (e.g. \
                         500us, 1ms, 1 for every wait); using the default 1ms"
                    ));
                    default_lock_rate
                }
            },
        };
        let default_rate = crate::sources::allocations::DEFAULT_RATE;
        let mem_rate = match lookup("PYIGPROF_MEM_RATE") {
            None => default_rate,
            Some(raw) => match raw.to_str().and_then(parse_bytes) {
                Some(rate) => rate,
                None => {
                    complaints.push(format!(
                        "pyigprof: PYIGPROF_MEM_RATE={raw:?} is not a number of bytes above 0 \
                         (e.g. 512k, 4MiB, 1 for every allocation); using the default {default_rate}"
                    ));
                    default_rate
                }
            },
        };
        let period_ns = 1_000_000_000 / u64::from(hz);
        let task_clock = crate::sources::perf::Event::task_clock(period_ns);
        let event = match lookup("PYIGPROF_EVENT").filter(|v| !v.is_empty()) {
            None => task_clock,
            Some(raw) => match raw
                .to_str()
                .ok_or_else(|| "not text".to_string())
                .and_then(|text| crate::sources::perf::Event::parse(text, period_ns))
            {
                Ok(event) => event,
                Err(why) => {
                    complaints.push(format!(
                        "pyigprof: PYIGPROF_EVENT={raw:?}: {why}; sampling CPU time (task-clock)"
                    ));
                    task_clock
                }
            },
        };
        // Perf events unless turned off (the helper process holds their descriptors, out of
        // the program's sight).
        let perf_events = switch(
            &lookup,
            "PYIGPROF_PERF_EVENTS",
            (
                "perf events where the kernel allows them",
                "POSIX CPU timers",
            ),
            true,
            &mut complaints,
        );
        // The user's cache directory is used only where it exists: a program (a test suite)
        // that runs Python with HOME set to a fresh directory finds nothing added there.
        let symbol_cache = match lookup("PYIGPROF_SYMBOL_CACHE") {
            Some(raw) if raw.is_empty() || raw == "0" => None,
            Some(raw) => Some(std::path::PathBuf::from(raw)),
            None => lookup("XDG_CACHE_HOME")
                .filter(|d| std::path::Path::new(d).is_absolute())
                .map(std::path::PathBuf::from)
                .or_else(|| {
                    lookup("HOME")
                        .filter(|d| !d.is_empty())
                        .map(|home| std::path::Path::new(&home).join(".cache"))
                })
                .filter(|cache| cache.is_dir())
                .map(|cache| cache.join("pyigprof").join("symbols")),
        };
        (
            Config {
                hz,
                output,
                clock,
                quiet,
                gil_only,
                asyncio,
                log,
                dump_signal,
                dump_interval_s,
                window_ms,
                push,
                output_given,
                max_overhead_ppm,
                max_tree_nodes,
                all_processes,
                only_child_of,
                profile_cpu,
                profile_memory,
                profile_locks,
                lock_rate_ns,
                mem_rate,
                event,
                perf_events,
                symbol_cache,
            },
            complaints,
        )
    }

    /// The tick period in nanoseconds (the CPU time one timer expiration stands for).
    pub fn period_ns(&self) -> u64 {
        1_000_000_000 / u64::from(self.hz)
    }

    /// The profile path for process `pid`: `%p` replaced by the pid, `%%` by `%` (and a
    /// `%n` left out: see [`Config::window_path`]).
    pub fn output_path(&self, pid: u32) -> OsString {
        self.expand(pid, None)
    }

    /// The path of window `n` of process `pid` ([`Config::window_ms`]): `%n` replaced by
    /// `n`; an output path without `%n` gets `.w<n>` before its extension
    /// (`pyigprof.1234.w0.gz`).
    pub fn window_path(&self, pid: u32, n: u32) -> OsString {
        use std::os::unix::ffi::OsStrExt;
        if self.output.as_bytes().windows(2).any(|w| w == b"%n") {
            return self.expand(pid, Some(n));
        }
        crate::output::dump::tagged(
            std::path::Path::new(&self.expand(pid, None)),
            &format!("w{n}"),
        )
        .into_os_string()
    }

    /// The output path with `%p` (the pid), `%n` (`window`, or nothing) and `%%`
    /// replaced.
    fn expand(&self, pid: u32, window: Option<u32>) -> OsString {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let raw = self.output.as_bytes();
        let mut out = Vec::with_capacity(raw.len() + 8);
        let mut i = 0;
        while i < raw.len() {
            match (raw[i], raw.get(i + 1)) {
                (b'%', Some(b'p')) => {
                    out.extend_from_slice(pid.to_string().as_bytes());
                    i += 2;
                }
                (b'%', Some(b'n')) => {
                    if let Some(n) = window {
                        out.extend_from_slice(n.to_string().as_bytes());
                    }
                    i += 2;
                }
                (b'%', Some(b'%')) => {
                    out.push(b'%');
                    i += 2;
                }
                (b, _) => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        OsString::from_vec(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> (Config, Vec<String>) {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Config::parse(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        let (c, complaints) = parse(&[]);
        assert_eq!(c.hz, DEFAULT_HZ);
        assert_eq!(c.output, DEFAULT_OUTPUT);
        assert!(!c.quiet);
        assert!(!c.gil_only);
        assert!(c.asyncio);
        assert_eq!(c.clock, Clock::Cpu);
        assert!(complaints.is_empty());
        assert_eq!(c.period_ns(), 4_000_000);
    }

    #[test]
    fn gil_only_is_1_or_0_and_anything_else_is_said() {
        assert!(parse(&[("PYIGPROF_GIL", "1")]).0.gil_only);
        assert!(!parse(&[("PYIGPROF_GIL", "0")]).0.gil_only);
        let (c, complaints) = parse(&[("PYIGPROF_GIL", "yes")]);
        assert!(!c.gil_only);
        assert!(c.asyncio);
        assert_eq!(complaints.len(), 1);
        assert!(
            complaints[0].contains("PYIGPROF_GIL=\"yes\""),
            "{complaints:?}"
        );
    }

    #[test]
    fn the_symbol_cache_is_under_the_users_cache_directory_where_it_exists_unless_set() {
        let dir = |vars: &[(&str, &str)]| parse(vars).0.symbol_cache;
        let path = |p: &std::path::Path| Some(p.join("pyigprof").join("symbols"));
        let home =
            std::env::temp_dir().join(format!("pyigprof-config-home-{}", std::process::id()));
        let xdg = home.join("xdg");
        std::fs::create_dir_all(home.join(".cache")).unwrap();
        std::fs::create_dir_all(&xdg).unwrap();
        let (home_s, xdg_s) = (home.to_str().unwrap(), xdg.to_str().unwrap());
        assert_eq!(dir(&[("HOME", home_s)]), path(&home.join(".cache")));
        assert_eq!(
            dir(&[("HOME", home_s), ("XDG_CACHE_HOME", xdg_s)]),
            path(&xdg)
        );
        // A relative XDG_CACHE_HOME is ignored, as the XDG base directory spec says.
        assert_eq!(
            dir(&[("HOME", home_s), ("XDG_CACHE_HOME", "xdg")]),
            path(&home.join(".cache"))
        );
        // A home without a cache directory (a test's fresh HOME) gets none.
        let bare = home.join("bare");
        std::fs::create_dir_all(&bare).unwrap();
        assert_eq!(dir(&[("HOME", bare.to_str().unwrap())]), None);
        assert_eq!(
            dir(&[("HOME", home_s), ("PYIGPROF_SYMBOL_CACHE", "/tmp/s")]),
            Some(std::path::PathBuf::from("/tmp/s"))
        );
        assert_eq!(
            dir(&[("HOME", home_s), ("PYIGPROF_SYMBOL_CACHE", "0")]),
            None
        );
        assert_eq!(
            dir(&[("HOME", home_s), ("PYIGPROF_SYMBOL_CACHE", "")]),
            None
        );
        assert_eq!(dir(&[]), None);
        let _ = std::fs::remove_dir_all(&home);
    }

    #[test]
    fn malformed_rate_names_the_variable_and_falls_back() {
        for bad in ["fast", "0", "-5", "1000000", "2.5"] {
            let (c, complaints) = parse(&[("PYIGPROF_HZ", bad)]);
            assert_eq!(c.hz, DEFAULT_HZ, "{bad}");
            assert_eq!(complaints.len(), 1);
            assert!(complaints[0].contains("PYIGPROF_HZ"), "{}", complaints[0]);
            assert!(
                complaints[0].contains("from 1 to 100000"),
                "{}",
                complaints[0]
            );
        }
        let (c, complaints) = parse(&[("PYIGPROF_HZ", "1000")]);
        assert_eq!((c.hz, complaints.len()), (1000, 0));
    }

    #[test]
    fn dump_signal_interval_and_all_processes() {
        let (c, complaints) = parse(&[
            ("PYIGPROF_DUMP_SIGNAL", "SIGUSR2"),
            ("PYIGPROF_DUMP_INTERVAL", "60"),
        ]);
        assert_eq!(
            (c.dump_signal, c.dump_interval_s, c.all_processes),
            (Some(libc::SIGUSR2), Some(60), false)
        );
        assert!(complaints.is_empty());
        assert_eq!(
            parse(&[("PYIGPROF_DUMP_SIGNAL", "usr1")]).0.dump_signal,
            Some(libc::SIGUSR1)
        );
        assert_eq!(
            parse(&[("PYIGPROF_DUMP_SIGNAL", "10")]).0.dump_signal,
            Some(libc::SIGUSR1)
        );
        for bad in ["SIGTERM", "SIGKILL", "9", "banana"] {
            let (c, complaints) = parse(&[("PYIGPROF_DUMP_SIGNAL", bad)]);
            assert_eq!(c.dump_signal, None, "{bad}");
            assert!(
                complaints[0].contains("PYIGPROF_DUMP_SIGNAL"),
                "{complaints:?}"
            );
        }
        let (c, complaints) = parse(&[("PYIGPROF_DUMP_INTERVAL", "0")]);
        assert_eq!(c.dump_interval_s, None);
        assert!(complaints[0].contains("PYIGPROF_DUMP_INTERVAL"));
        assert!(parse(&[("PYIGPROF_ALL_PROCESSES", "1")]).0.all_processes);
        let (c, _) = parse(&[("PYIGPROF_ONLY_CHILD_OF", "4242")]);
        assert_eq!(c.only_child_of, Some(4242));
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        assert!(c.left_alone() != (parent == 4242));
        let (c, _) = parse(&[("PYIGPROF_ONLY_CHILD_OF", &parent.to_string())]);
        assert!(!c.left_alone());
        let (c, complaints) = parse(&[("PYIGPROF_ONLY_CHILD_OF", "me")]);
        assert_eq!(c.only_child_of, None);
        assert_eq!(
            complaints,
            ["pyigprof: PYIGPROF_ONLY_CHILD_OF=\"me\" is not a process id; every Python process is profiled"]
        );
        assert!(!parse(&[("PYIGPROF_ALL_PROCESSES", "0")]).0.all_processes);
    }

    #[test]
    fn clock_is_cpu_or_wall() {
        assert_eq!(parse(&[("PYIGPROF_CLOCK", "wall")]).0.clock, Clock::Wall);
        assert_eq!(parse(&[("PYIGPROF_CLOCK", "cpu")]).0.clock, Clock::Cpu);
        let (c, complaints) = parse(&[("PYIGPROF_CLOCK", "real")]);
        assert_eq!(c.clock, Clock::Cpu);
        assert_eq!(complaints.len(), 1);
        assert!(
            complaints[0].contains("PYIGPROF_CLOCK=\"real\"") && complaints[0].contains("\"wall\""),
            "{}",
            complaints[0]
        );
    }

    #[test]
    fn profile_kinds_and_memory_rate() {
        let (c, complaints) = parse(&[]);
        assert!(c.profile_cpu && !c.profile_memory && complaints.is_empty());
        let (c, _) = parse(&[("PYIGPROF_PROFILE", "mem")]);
        assert!(!c.profile_cpu && c.profile_memory);
        let (c, _) = parse(&[("PYIGPROF_PROFILE", "cpu, mem")]);
        assert!(c.profile_cpu && c.profile_memory);
        let (c, _) = parse(&[("PYIGPROF_PROFILE", "cpu,lock")]);
        assert!(c.profile_cpu && !c.profile_memory && c.profile_locks);
        assert_eq!(c.lock_rate_ns, crate::sources::locks::DEFAULT_RATE_NS);
        let (c, complaints) = parse(&[
            ("PYIGPROF_PROFILE", "lock"),
            ("PYIGPROF_LOCK_RATE", "250us"),
        ]);
        assert!(!c.profile_cpu && c.profile_locks && complaints.is_empty());
        assert_eq!(c.lock_rate_ns, 250_000);
        let (c, complaints) = parse(&[("PYIGPROF_PROFILE", "lock"), ("PYIGPROF_LOCK_RATE", "0")]);
        assert_eq!(c.lock_rate_ns, crate::sources::locks::DEFAULT_RATE_NS);
        assert!(
            complaints[0].contains("PYIGPROF_LOCK_RATE=\"0\""),
            "{complaints:?}"
        );
        let (c, complaints) = parse(&[("PYIGPROF_PROFILE", "memory")]);
        assert!(c.profile_cpu && !c.profile_memory);
        assert!(
            complaints[0].contains("PYIGPROF_PROFILE=\"memory\""),
            "{complaints:?}"
        );
        assert_eq!(c.mem_rate, 512 << 10);
        for (text, bytes) in [
            ("1", 1),
            ("4096", 4096),
            ("512k", 512 << 10),
            ("4MiB", 4 << 20),
            ("1 G", 1 << 30),
        ] {
            assert_eq!(
                parse(&[("PYIGPROF_MEM_RATE", text)]).0.mem_rate,
                bytes,
                "{text}"
            );
        }
        for bad in ["0", "-1", "lots", "5 TiB"] {
            let (c, complaints) = parse(&[("PYIGPROF_MEM_RATE", bad)]);
            assert_eq!(c.mem_rate, 512 << 10);
            assert!(
                complaints[0].contains("PYIGPROF_MEM_RATE"),
                "{complaints:?}"
            );
        }
    }

    #[test]
    fn events_and_the_perf_switch() {
        let (c, complaints) = parse(&[("PYIGPROF_HZ", "1000")]);
        assert_eq!(
            (c.event.counter, c.event.period, c.perf_events),
            ("PERF_TICKS", 1_000_000, true)
        );
        assert!(!parse(&[("PYIGPROF_PERF_EVENTS", "0")]).0.perf_events);
        assert!(complaints.is_empty());
        assert!(parse(&[("PYIGPROF_PERF_EVENTS", "1")]).0.perf_events);
        let (c, _) = parse(&[("PYIGPROF_EVENT", "page-faults/period=10/")]);
        assert_eq!(
            (c.event.counter, c.event.period, c.perf_events),
            ("PERF_PAGE_FAULTS", 10, true)
        );
        let (c, _) = parse(&[
            ("PYIGPROF_EVENT", "page-faults"),
            ("PYIGPROF_PERF_EVENTS", "0"),
        ]);
        assert!(!c.perf_events);
        let (c, complaints) = parse(&[("PYIGPROF_EVENT", "cyles"), ("PYIGPROF_PERF_EVENTS", "no")]);
        assert_eq!((c.event.counter, c.perf_events), ("PERF_TICKS", true));
        assert_eq!(complaints.len(), 2, "{complaints:?}");
        assert!(
            complaints[0]
                .starts_with("pyigprof: PYIGPROF_EVENT=\"cyles\": \"cyles\" is not an event"),
            "{complaints:?}"
        );
        assert!(
            complaints[1].contains("PYIGPROF_PERF_EVENTS=\"no\""),
            "{complaints:?}"
        );
    }

    #[test]
    fn output_template_expands_pid() {
        let (c, _) = parse(&[("PYIGPROF_OUTPUT", "/tmp/run-%p.%%.gz")]);
        assert_eq!(c.output_path(42), "/tmp/run-42.%.gz");
        let (c, complaints) = parse(&[("PYIGPROF_OUTPUT", "")]);
        assert_eq!(c.output, DEFAULT_OUTPUT);
        assert!(complaints[0].contains("PYIGPROF_OUTPUT"));
    }

    #[test]
    fn push_settings_are_parsed_and_secrets_never_shown() {
        let (c, complaints) = parse(&[
            (
                "PYIGPROF_PUSH",
                "https://12345:s3cret@profiles.example.net/",
            ),
            ("PYIGPROF_LABELS", "env=prod, region=eu-west"),
            ("PYIGPROF_PUSH_HEADERS", "X-Scope-OrgID: team-a; X-Other: 1"),
            ("PYIGPROF_APP_NAME", "checkout"),
        ]);
        assert!(complaints.is_empty(), "{complaints:?}");
        let push = c.push.unwrap();
        assert_eq!(push.url, "https://profiles.example.net/ingest");
        assert_eq!(push.shown, "https://profiles.example.net");
        assert_eq!(push.app_name.as_deref(), Some("checkout"));
        assert_eq!(
            push.labels,
            [
                ("env".to_string(), "prod".to_string()),
                ("region".into(), "eu-west".into())
            ]
        );
        // "12345:s3cret" in base64.
        assert_eq!(
            push.headers,
            [
                ("X-Scope-OrgID".to_string(), "team-a".to_string()),
                ("X-Other".into(), "1".into()),
                ("Authorization".into(), "Basic MTIzNDU6czNjcmV0".into()),
            ]
        );
        // Pushing without PYIGPROF_WINDOW: windows of a minute; not written to disk.
        assert_eq!(c.window_ms, Some(DEFAULT_PUSH_WINDOW_MS));
        assert!(!c.output_given);

        let (c, complaints) = parse(&[
            ("PYIGPROF_PUSH", "pyroscope:4040"),
            ("PYIGPROF_PUSH_TOKEN", "t0ken"),
        ]);
        assert_eq!(c.push, None);
        assert_eq!(
            complaints,
            ["pyigprof: PYIGPROF_PUSH: expected an http:// or https:// URL (e.g. http://pyroscope:4040); nothing is pushed"]
        );
        let (c, complaints) = parse(&[
            ("PYIGPROF_PUSH", "http://localhost:4040/ingest"),
            ("PYIGPROF_PUSH_TOKEN", "t0ken"),
            ("PYIGPROF_LABELS", "env=a{b}"),
            ("PYIGPROF_PUSH_HEADERS", "no colon s3cret"),
        ]);
        let push = c.push.unwrap();
        assert_eq!(push.url, "http://localhost:4040/ingest");
        assert_eq!(
            push.headers,
            [("Authorization".to_string(), "Bearer t0ken".to_string())]
        );
        assert!(push.labels.is_empty());
        assert_eq!(complaints.len(), 2, "{complaints:?}");
        assert!(
            complaints.iter().all(|c| !c.contains("s3cret")),
            "{complaints:?}"
        );
    }
}
