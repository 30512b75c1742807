//! `libpyigprof_push.so`: the HTTP(S) client of continuous profiling's pushes
//! (`PYIGPROF_PUSH`). `libpyigprof.so`'s pusher thread loads it with `dlopen` when it
//! starts (only then: linked into the preloaded library, ureq and rustls cost every
//! profiled process +0.3 ms of CPU at start), and calls [`pyigprof_push_post_v1`] for each
//! window. ureq (rustls for `https://`) does the work; this is its C interface.

use std::time::Duration;

/// Bytes of a request's reason for failing, at most (what [`pyigprof_push_post_v1`]
/// writes to `error`).
pub const ERROR_CAPACITY: usize = 256;

/// Posts `body` to `url` with `headers` (`Name: value` lines, `\n`-separated), waiting at
/// most `connect_ms` for the connection and `total_ms` for the whole request. Returns the
/// answer's HTTP status, or 0 when there was none, with a few words on why in `error`
/// (never the URL or a header: they may hold secrets), its length in `error_len`.
///
/// # Safety
/// `url`, `headers` and `body` point to that many readable bytes (UTF-8 for the first
/// two); `error` to `error_capacity` writable bytes; `error_len` to a writable `usize`.
#[no_mangle]
pub unsafe extern "C" fn pyigprof_push_post_v1(
    url: *const u8,
    url_len: usize,
    headers: *const u8,
    headers_len: usize,
    body: *const u8,
    body_len: usize,
    connect_ms: u64,
    total_ms: u64,
    error: *mut u8,
    error_capacity: usize,
    error_len: *mut usize,
) -> u16 {
    // SAFETY: the caller's promise.
    let (url, headers, body) = unsafe {
        (
            std::slice::from_raw_parts(url, url_len),
            std::slice::from_raw_parts(headers, headers_len),
            std::slice::from_raw_parts(body, body_len),
        )
    };
    let outcome = post(
        &String::from_utf8_lossy(url),
        &String::from_utf8_lossy(headers),
        body,
        Duration::from_millis(connect_ms),
        Duration::from_millis(total_ms),
    );
    match outcome {
        Ok(status) => status,
        Err(why) => {
            let n = why.len().min(error_capacity);
            // SAFETY: the caller's promise; n ≤ error_capacity.
            unsafe {
                std::ptr::copy_nonoverlapping(why.as_ptr(), error, n);
                *error_len = n;
            }
            0
        }
    }
}

/// The request itself: the status, or why there was none.
pub fn post(
    url: &str,
    headers: &str,
    body: &[u8],
    connect: Duration,
    total: Duration,
) -> Result<u16, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(connect))
        .timeout_global(Some(total))
        .http_status_as_error(false)
        .user_agent(concat!("pyigprof/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let mut request = agent.post(url);
    for line in headers.lines() {
        if let Some((name, value)) = line.split_once(':') {
            request = request.header(name.trim(), value.trim());
        }
    }
    match request.send(body) {
        Ok(response) => Ok(response.status().as_u16()),
        Err(e) => Err(describe(&e)),
    }
}

/// A request's error in a few words of ours (ureq's own messages may quote the URL).
fn describe(error: &ureq::Error) -> String {
    match error {
        ureq::Error::Timeout(what) => format!("timed out ({what:?})"),
        ureq::Error::ConnectionFailed => "connection failed".into(),
        ureq::Error::HostNotFound => "host not found".into(),
        ureq::Error::Io(e) => match e.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
            std::io::ErrorKind::ConnectionReset => "connection reset".into(),
            std::io::ErrorKind::TimedOut => "timed out".into(),
            std::io::ErrorKind::UnexpectedEof => "connection closed mid-answer".into(),
            kind => format!("{kind:?}"),
        },
        ureq::Error::Tls(_) => "TLS error".into(),
        _ => "request failed".into(),
    }
}
