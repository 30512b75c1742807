//! An HTTP server that takes what pyigprof pushes (`PYIGPROF_PUSH`) as Grafana
//! Pyroscope's server API page describes its ingest API: `POST /ingest?name=…&from=…&
//! until=…&format=pprof…` with a `multipart/form-data` body holding the pprof profile in
//! the file field `profile`. It keeps every request and answers as told ([`Backend`]).

use pyigprof_pprof::PprofProfile;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The request line's target: path and query.
    pub target: String,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Request {
    /// The query's parameters, percent-decoded.
    pub fn query(&self) -> HashMap<String, String> {
        let query = self.target.split_once('?').map_or("", |(_, q)| q);
        query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_string(), percent_decode(v)))
            .collect()
    }

    /// The file fields of the multipart body, by name.
    pub fn fields(&self) -> HashMap<String, Vec<u8>> {
        let content_type = &self.headers["content-type"];
        let boundary = content_type
            .strip_prefix("multipart/form-data; boundary=")
            .unwrap_or_else(|| panic!("content type {content_type}"));
        let delimiter = format!("--{boundary}");
        let mut fields = HashMap::new();
        let body = &self.body;
        let mut at = find(body, delimiter.as_bytes(), 0).expect("a first boundary");
        loop {
            at += delimiter.len();
            if body[at..].starts_with(b"--") {
                break;
            }
            let head_end = find(body, b"\r\n\r\n", at).expect("a part's headers");
            let head = String::from_utf8_lossy(&body[at..head_end]).into_owned();
            let name = head
                .split("name=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .expect("a field name")
                .to_string();
            let start = head_end + 4;
            let end = find(body, format!("\r\n{delimiter}").as_bytes(), start)
                .expect("the next boundary");
            fields.insert(name, body[start..end].to_vec());
            at = end + 2;
        }
        fields
    }

    /// The pushed profile, decoded.
    pub fn profile(&self) -> PprofProfile {
        pyigprof_pprof::gunzipped(&self.fields()["profile"]).expect("a pprof profile")
    }
}

/// Where `needle` starts in `haystack` from `from`.
fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// `text` with its `%XX` escapes decoded.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// How the test's backend answers.
#[derive(Clone, Copy)]
pub enum Backend {
    /// 200 at once.
    Ok,
    /// 500 at once.
    Failing,
    /// 200 after this long.
    Late(Duration),
    /// Closes the connection in the middle of the request's body, answering nothing.
    HangUp,
}

/// An ingest server on a port of its own: every request it read, answered as `backend`.
pub fn serve(backend: Backend) -> (u16, Arc<Mutex<Vec<Request>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let _ = answer(stream, backend, &seen);
            });
        }
    });
    (port, requests)
}

/// Reads one request from `stream` (HTTP/1.1 with a Content-Length), keeps it, answers.
fn answer(stream: TcpStream, backend: Backend, seen: &Mutex<Vec<Request>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    if let Backend::HangUp = backend {
        let mut half = vec![0; length / 2];
        reader.read_exact(&mut half)?;
        seen.lock().unwrap().push(Request {
            target,
            headers,
            body: half,
        });
        return stream.shutdown(std::net::Shutdown::Both);
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    seen.lock().unwrap().push(Request {
        target,
        headers,
        body,
    });
    let status = match backend {
        Backend::Ok => "200 OK",
        Backend::Failing => "500 Internal Server Error",
        Backend::Late(wait) => {
            std::thread::sleep(wait);
            "200 OK"
        }
        Backend::HangUp => unreachable!("answered above"),
    };
    let mut stream = stream;
    stream.write_all(
        format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}
