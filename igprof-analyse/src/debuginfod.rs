//! Debug files by build-id from debuginfod servers, as gdb, perf and valgrind get them
//! (elfutils' `debuginfod-client`, `man debuginfod_find_debuginfo`):
//! - the servers are the URLs of `DEBUGINFOD_URLS`, separated by spaces; without the
//!   variable nothing is asked;
//! - a debug file is `GET <url>/buildid/<build-id in lower-case hex>/debuginfo`;
//! - it is cached where elfutils' client caches it: `$DEBUGINFOD_CACHE_PATH`, else
//!   `$XDG_CACHE_HOME/debuginfod_client`, else `~/.cache/debuginfod_client`, as
//!   `<build-id>/debuginfo`, and read from there the next time, without asking;
//! - `DEBUGINFOD_TIMEOUT` is the seconds one request may take (elfutils' default, 90).
//!
//! A server that cannot be reached, or that does not have the file, is passed over
//! silently (offline, nothing changes); the caller checks that a file it got has the
//! build-id it asked for.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

/// elfutils' default for `DEBUGINFOD_TIMEOUT`, seconds.
const DEFAULT_TIMEOUT_S: u64 = 90;

/// The servers of `DEBUGINFOD_URLS`, in order.
fn servers() -> Vec<String> {
    std::env::var("DEBUGINFOD_URLS")
        .unwrap_or_default()
        .split_whitespace()
        .map(|url| url.trim_end_matches('/').to_string())
        .collect()
}

/// Where elfutils' client caches what it fetched.
fn cache_dir() -> Option<PathBuf> {
    let set = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    set("DEBUGINFOD_CACHE_PATH")
        .or_else(|| set("XDG_CACHE_HOME").map(|d| d.join("debuginfod_client")))
        .or_else(|| set("HOME").map(|d| d.join(".cache/debuginfod_client")))
}

/// The debug file of the object whose build-id is `id`, from the cache or, if
/// `DEBUGINFOD_URLS` names servers, from the first that has it (then cached). `None`
/// without servers, offline, or when none has it.
pub fn debug_file(id: &[u8]) -> Option<Vec<u8>> {
    let servers = servers();
    if servers.is_empty() || id.is_empty() {
        return None;
    }
    let hex: String = id.iter().map(|byte| format!("{byte:02x}")).collect();
    let cached = cache_dir().map(|dir| dir.join(&hex).join("debuginfo"));
    if let Some(data) = cached.as_ref().and_then(|path| std::fs::read(path).ok()) {
        if !data.is_empty() {
            return Some(data);
        }
    }
    let timeout = std::env::var("DEBUGINFOD_TIMEOUT")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_TIMEOUT_S);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(timeout.max(1))))
        .build()
        .into();
    let data = servers.iter().find_map(|server| {
        let url = format!("{server}/buildid/{hex}/debuginfo");
        let response = agent.get(&url).call().ok()?;
        let mut data = Vec::new();
        response
            .into_body()
            .into_reader()
            .read_to_end(&mut data)
            .ok()?;
        (!data.is_empty()).then_some(data)
    })?;
    if let Some(path) = cached {
        store(&path, &data);
    }
    Some(data)
}

/// Writes `data` to `path` through a temporary file renamed into place, so that a reader
/// never sees half a file. A cache that cannot be written is only not written.
fn store(path: &std::path::Path, data: &[u8]) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let temporary = dir.join(format!(".debuginfo.{}", std::process::id()));
    if std::fs::write(&temporary, data).is_ok() && std::fs::rename(&temporary, path).is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
}
