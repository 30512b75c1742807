//! Names for a stripped library's functions from a debuginfod server: elfutils' own
//! `debuginfod` (Debian package `debuginfod`) on loopback serves the debug file of a
//! library the test builds and strips; the analyser names the library's static function
//! with `DEBUGINFOD_URLS` set, caches the file as elfutils' client does, and changes
//! nothing without the variable or offline.

use pyigprof_suite::*;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LIBRARY: &str = r#"
#include <stdint.h>
__attribute__((noinline)) static uint64_t mix_rounds(uint64_t x, long n) {
    for (long i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    return x;
}
uint64_t run(long n) { return mix_rounds(88172645463325252ull, n) + 1; }
"#;

const PROGRAM: &str = "import ctypes, sys\nlib = ctypes.CDLL(sys.argv[1])\nlib.run.restype = ctypes.c_uint64\ndef hot():\n    return lib.run(300000000)\nprint(hot() > 0)\n";

/// The debuginfod server, ended with the test.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tool(program: &str, args: &[&str], dir: &Path) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The HTTP status of `GET path` on `port` of loopback, if it answers.
fn status(port: u16, path: &str) -> Option<u16> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// `pyigprof-analyse --top=0 profile` with `env`; its report.
fn analyse(profile: &Path, env: &[(&str, &str)]) -> String {
    let mut command = Command::new(&artifacts().analyse);
    command
        .args(["--top=0"])
        .arg(profile)
        .env_remove("DEBUGINFOD_URLS");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("run pyigprof-analyse");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_stripped_librarys_functions_are_named_from_debuginfod() {
    let Ok(debuginfod) = which("debuginfod") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "debuginfod is not installed (.ci/run installs Debian's package)"
        );
        eprintln!("debuginfod test skipped: no debuginfod (apt-get install debuginfod)");
        return;
    };
    let python = python311("debuginfod")
        .into_iter()
        .next()
        .expect("a Python 3.11");
    let dir = scratch_dir("debuginfod");
    std::fs::write(dir.join("hot.c"), LIBRARY).unwrap();
    std::fs::create_dir(dir.join("debug")).unwrap();
    tool(
        "gcc",
        &[
            "-O2",
            "-g",
            "-shared",
            "-fPIC",
            "-Wl,--build-id",
            "-o",
            "libhot.so",
            "hot.c",
        ],
        &dir,
    );
    tool(
        "objcopy",
        &["--only-keep-debug", "libhot.so", "debug/libhot.debug"],
        &dir,
    );
    tool("strip", &["--strip-all", "libhot.so"], &dir);
    let notes = tool("readelf", &["-n", "libhot.so"], &dir);
    let id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build-id")
        .to_string();

    let library = dir.join("libhot.so");
    std::fs::write(dir.join("use.py"), PROGRAM).unwrap();
    let (run, _) = profiled_ok(
        &python,
        &[
            dir.join("use.py").to_str().unwrap(),
            library.to_str().unwrap(),
        ],
        &[("PYIGPROF_QUIET", "1")],
    );
    let profile = run.profiles()[0].clone();

    // Without the variable: the function is named by the library and its offset.
    let plain = analyse(&profile, &[]);
    assert!(
        plain.contains("@{libhot.so+") && !plain.contains("mix_rounds"),
        "{plain}"
    );

    // The server, on a free port of loopback.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _server = Server(
        Command::new(debuginfod)
            .args(["-F", "debug", "-p", &port.to_string(), "-d"])
            .arg(dir.join("index.sqlite"))
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start debuginfod"),
    );
    let path = format!("/buildid/{id}/debuginfo");
    let ready = Instant::now();
    while status(port, &path) != Some(200) {
        assert!(
            ready.elapsed() < Duration::from_secs(60),
            "debuginfod never served {path}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let cache = dir.join("cache");
    let url = format!("http://127.0.0.1:{port}");
    let env = [
        ("DEBUGINFOD_URLS", url.as_str()),
        ("DEBUGINFOD_CACHE_PATH", cache.to_str().unwrap()),
    ];
    let named = analyse(&profile, &env);
    let row = named
        .lines()
        .find(|l| l.contains("mix_rounds"))
        .unwrap_or_else(|| panic!("mix_rounds not named:\n{named}"));
    // The function takes the program's time: its self share is the first column.
    let self_share: f64 = row.split_whitespace().next().unwrap().parse().unwrap();
    assert!(self_share > 70.0, "{row}");
    assert!(
        row.contains("hot.c:"),
        "its source line, from the debug file's DWARF: {row}"
    );
    // Cached where elfutils' client caches it: read from there with no server.
    assert!(cache.join(&id).join("debuginfo").is_file());
    drop(_server);
    let again = analyse(&profile, &env);
    assert!(again.contains("mix_rounds"), "{again}");

    // Offline (nothing listens) with an empty cache: as without the variable.
    let empty = dir.join("empty-cache");
    let offline = analyse(
        &profile,
        &[
            ("DEBUGINFOD_URLS", &format!("http://127.0.0.1:{port}")),
            ("DEBUGINFOD_CACHE_PATH", empty.to_str().unwrap()),
        ],
    );
    assert_eq!(offline, plain);
}

/// The path of `program` on the `PATH`.
fn which(program: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or(())
}
