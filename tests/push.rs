//! Continuous profiling pushed to Grafana Pyroscope (`PYIGPROF_PUSH`, `pyigprof record
//! --push`): each window is POSTed to an HTTP server in the test that takes requests as
//! Pyroscope's server API page gives them (`/ingest?name=APP{labels}&from=&until=&format=
//! pprof&…`, a `multipart/form-data` body with the pprof in the file field `profile` and
//! the sample type configuration in `sample_type_config`) and decodes each body with prost.
//! The windows' CPU time adds up to the process's; the labels, the token and the pid are
//! where they belong and nowhere else. A backend that is down, answers 500, answers late or
//! closes the connection mid-body changes nothing of the program but its losses, counted
//! and said.

use pyigprof_pprof::PprofProfile;
use pyigprof_suite::ingest::{serve, Backend};
use pyigprof_suite::*;
use std::collections::HashMap;
use std::net::TcpListener;
use std::time::Duration;

/// Two phases of ~0.75 s of CPU each; prints the process's CPU time at the end (and, with
/// an argument, its own wall time from its first line to its last, the work it did in loop
/// iterations, and the CPU time of the process's other threads in seconds).
const PHASED: &str = r#"
import sys, time
started = time.perf_counter()
def spin(seconds):
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        x += 1
    return x
def early():
    return spin(0.75)
def late():
    return spin(0.75)
work = early() + late()
sys.stdout.write("%.6f\n" % time.process_time())
if len(sys.argv) > 1:
    # The CPU time of every thread but this one (the profiler's window writer and
    # pusher), in seconds, from /proc/self/task/TID/stat's utime and stime (clock ticks).
    import os
    others = 0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != os.getpid():
            with open("/proc/self/task/%s/stat" % tid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            others += int(fields[11]) + int(fields[12])
    sys.stdout.write("%.6f\n%d\n%.3f\n" % (time.perf_counter() - started, work,
                     others / float(os.sysconf("SC_CLK_TCK"))))
"#;

/// Go's `pprof` (github.com/google/pprof), built once from Debian's
/// `golang-github-google-pprof-dev` with `golang-go` in GOPATH mode: the real reader every
/// pushed body must satisfy. `None` (said) where they are not installed in the fast tier;
/// the whole matrix requires them.
fn go_pprof() -> Option<std::path::PathBuf> {
    static BUILT: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let source = std::path::Path::new("/usr/share/gocode/src/github.com/google/pprof");
            let go = std::process::Command::new("go").arg("version").output();
            if !source.is_dir() || !go.is_ok_and(|o| o.status.success()) {
                let how = "apt-get install golang-go golang-github-google-pprof-dev";
                assert!(
                    tier() != Tier::Full,
                    "push: the whole matrix reads every pushed body with Go's pprof: {how}"
                );
                eprintln!("push: Go's pprof not checked (not installed: {how})");
                return None;
            }
            let out = scratch_dir("go-pprof").join("pprof");
            let built = std::process::Command::new("go")
                .args(["build", "-o"])
                .arg(&out)
                .arg("github.com/google/pprof")
                .env("GOPATH", "/usr/share/gocode")
                .env("GO111MODULE", "off")
                .env("GOFLAGS", "")
                .env("GOCACHE", scratch_dir("go-cache"))
                .output()
                .expect("go build");
            assert!(
                built.status.success(),
                "go build pprof: {}",
                String::from_utf8_lossy(&built.stderr)
            );
            Some(out)
        })
        .clone()
}

/// What Go's `pprof -raw` prints of the gzip-compressed profile `body` (it must read it).
fn read_with_go_pprof(pprof: &std::path::Path, body: &[u8]) -> String {
    let file = scratch_dir("go-pprof-read").join("window.pb.gz");
    std::fs::write(&file, body).unwrap();
    let output = std::process::Command::new(pprof)
        .arg("-raw")
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "pprof -raw: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

/// Strings of `profile` by index.
fn text(profile: &PprofProfile, index: i64) -> &str {
    &profile.string_table[index as usize]
}

/// The profile's values of sample type `kind`, summed, and by function name anywhere on
/// the stack.
fn totals(profile: &PprofProfile, kind: &str) -> (i64, HashMap<String, i64>) {
    let slot = profile
        .sample_type
        .iter()
        .position(|t| text(profile, t.r#type) == kind)
        .unwrap_or_else(|| panic!("no {kind} sample type"));
    let mut by_function = HashMap::new();
    let mut total = 0;
    for sample in &profile.sample {
        let value = sample.value[slot];
        total += value;
        let mut names: Vec<&str> = sample
            .location_id
            .iter()
            .map(|&id| {
                let location = &profile.location[id as usize - 1];
                let function = &profile.function[location.line[0].function_id as usize - 1];
                text(profile, function.name)
            })
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            *by_function.entry(name.to_string()).or_insert(0) += value;
        }
    }
    (total, by_function)
}

#[test]
fn each_window_is_pushed_to_pyroscopes_ingest_api_and_adds_up_to_the_run() {
    for python in interpreters_for("push", "3.x interpreters", |i| i.version >= (3, 6)) {
        let (port, requests) = serve(Backend::Ok);
        let url = format!("http://127.0.0.1:{port}");
        // Pushed only (no PYIGPROF_OUTPUT): nothing on disk.
        let run = run_profiled(
            &python.path,
            &["-c", PHASED],
            &[
                ("PYIGPROF_PUSH", url.as_str()),
                ("PYIGPROF_WINDOW", "0.5"),
                ("PYIGPROF_HZ", "1000"),
                ("PYIGPROF_APP_NAME", "phased"),
                ("PYIGPROF_LABELS", "env=test,team=profiling"),
                ("PYIGPROF_PUSH_TOKEN", "s3cret-t0ken"),
            ],
        );
        let label = &python.name;
        assert!(run.output.status.success(), "{label}: {}", run.stderr());
        let cpu: f64 = run.stdout().trim().parse().expect("the program's CPU time");
        assert!(
            files_in(&run.dir)
                .iter()
                .all(|p| !p.to_string_lossy().ends_with(".gz")),
            "{label}: a profile on disk"
        );
        let stderr = run.stderr();
        assert!(
            !stderr.contains("s3cret"),
            "{label}: the token in the output: {stderr}"
        );
        let requests = requests.lock().unwrap().clone();
        assert!(
            requests.len() >= 3,
            "{label}: {} pushes\n{stderr}",
            requests.len()
        );
        assert!(
            stderr.contains(&format!(
                "pyigprof: pushed {} windows to {url} as phased{{env=test,team=profiling,pid=",
                requests.len()
            )),
            "{label}: {stderr}"
        );
        let go_pprof = go_pprof();
        let mut seconds = 0.0;
        let mut early = Vec::new();
        let mut late = Vec::new();
        let mut previous_until = 0u64;
        for (n, request) in requests.iter().enumerate() {
            assert!(request.target.starts_with("/ingest?"), "{}", request.target);
            let query = request.query();
            let name = &query["name"];
            assert!(
                name.starts_with("phased{env=test,team=profiling,pid="),
                "{name}"
            );
            assert!(
                name.contains(",hostname=")
                    && name.contains(&format!(
                        ",python={}.{}}}",
                        python.version.0, python.version.1
                    )),
                "{name}"
            );
            assert_eq!(query["format"], "pprof");
            assert_eq!(query["spyName"], "pyigprof");
            assert_eq!(query["sampleRate"], "1000");
            let (from, until): (u64, u64) = (
                query["from"].parse().unwrap(),
                query["until"].parse().unwrap(),
            );
            assert!(
                from < until && from + 1 >= previous_until,
                "window {n}: from {from} until {until}"
            );
            previous_until = until;
            assert_eq!(request.headers["authorization"], "Bearer s3cret-t0ken");
            // The sample type configuration names what Pyroscope shows.
            let config = String::from_utf8(request.fields()["sample_type_config"].clone()).unwrap();
            assert_eq!(config, "{\"samples\":{\"units\":\"samples\",\"aggregation\":\"sum\",\"display-name\":\"cpu\",\"sampled\":true}}");
            if let Some(pprof) = &go_pprof {
                let raw = read_with_go_pprof(pprof, &request.fields()["profile"]);
                assert!(
                    raw.contains("samples/count cpu/nanoseconds"),
                    "window {n}: {raw}"
                );
                assert!(raw.contains("Period: 1000000"), "window {n}: {raw}");
            }
            let profile = request.profile();
            let types: Vec<String> = profile
                .sample_type
                .iter()
                .map(|t| format!("{}/{}", text(&profile, t.r#type), text(&profile, t.unit)))
                .collect();
            assert_eq!(types, ["samples/count", "cpu/nanoseconds"]);
            assert_eq!(profile.period, 1_000_000);
            assert!(
                profile.time_nanos as u64 / 1_000_000_000 >= from && profile.duration_nanos > 0
            );
            let (ns, by_function) = totals(&profile, "cpu");
            let (ticks, _) = totals(&profile, "samples");
            assert_eq!(ns, ticks * 1_000_000, "samples are ticks of the period");
            seconds += ns as f64 / 1e9;
            early.push(by_function.get("early").copied().unwrap_or(0));
            late.push(by_function.get("late").copied().unwrap_or(0));
        }
        eprintln!(
            "push: {label}: {} windows pushed, {seconds:.3} s of CPU in them, {cpu:.3} s measured; {}",
            requests.len(),
            if go_pprof.is_some() { "each read by Go's pprof -raw" } else { "Go's pprof not run" }
        );
        assert!(
            (seconds - cpu).abs() <= 0.05 * cpu,
            "{label}: pushed {seconds:.3} s, the process {cpu:.3} s"
        );
        assert!(
            early[0] > 0 && late[0] == 0,
            "{label}: the first window: early {early:?} late {late:?}"
        );
        let last = requests.len() - 1;
        assert!(
            late[last] > 0 && early[last] == 0,
            "{label}: the last window: early {early:?} late {late:?}"
        );
    }
}

#[test]
fn pyigprof_record_pushes_with_its_options() {
    let python = &interpreters_for("push_record", "3.x interpreters", |i| i.version >= (3, 6))[0];
    let (port, requests) = serve(Backend::Ok);
    let url = format!("http://127.0.0.1:{port}");
    let dir = scratch_dir("push-record");
    let output = std::process::Command::new(&artifacts().command)
        .args([
            "record",
            "--push",
            &url,
            "--window",
            "0.5",
            "--labels",
            "env=ci",
            "--app-name",
            "svc",
            "--",
        ])
        .arg(&python.path)
        .args(["-c", PHASED])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // Pushed only: no profile on disk, and no "no profile was written" either.
    assert!(files_in(&dir).is_empty(), "{:?}", files_in(&dir));
    assert!(!stderr.contains("no profile was written"), "{stderr}");
    let requests = requests.lock().unwrap();
    assert!(
        stderr.contains(&format!(
            "pyigprof: pushed {} windows to {url} as svc{{env=ci,pid=",
            requests.len()
        )),
        "{stderr}"
    );
    assert!(requests.len() >= 3, "{} pushes", requests.len());
    assert!(requests
        .iter()
        .all(|r| r.query()["name"].starts_with("svc{env=ci,pid=")));
    // A URL that is not one is refused before the program runs.
    let refused = std::process::Command::new(&artifacts().command)
        .args(["record", "--push", "pyroscope:4040", "--"])
        .arg(&python.path)
        .args(["-c", "print('ran')"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is not an http:// or https:// URL"));
    assert!(refused.stdout.is_empty());
}

#[test]
fn a_backend_down_failing_or_late_changes_nothing_but_the_windows_lost() {
    let python = &interpreters_for("push_faults", "3.x interpreters", |i| i.version >= (3, 6))[0];
    // A port nobody listens on: bound, then closed.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (failing, failing_requests) = serve(Backend::Failing);
    let (late, _) = serve(Backend::Late(Duration::from_secs(30)));
    let (hangup, _) = serve(Backend::HangUp);
    let plain = std::process::Command::new(&python.path)
        .args(["-c", PHASED, "timed"])
        .output()
        .unwrap();
    // The same windows without a push: the CPU time of the profiler's own threads.
    let unpushed = run_profiled(
        &python.path,
        &["-c", PHASED, "timed"],
        &[("PYIGPROF_WINDOW", "0.5"), ("PYIGPROF_HZ", "1000")],
    );
    let unpushed_threads: f64 = unpushed.stdout().lines().nth(3).unwrap().parse().unwrap();
    for (case, port, why) in [
        ("down", closed, "connection"),
        ("failing", failing, "answered 500"),
        ("late", late, "no answer before the process ended"),
        ("hang-up", hangup, "window"),
    ] {
        let url = format!("http://127.0.0.1:{port}");
        let started = std::time::Instant::now();
        let run = run_profiled(
            &python.path,
            &["-c", PHASED, "timed"],
            &[
                ("PYIGPROF_PUSH", url.as_str()),
                ("PYIGPROF_WINDOW", "0.5"),
                ("PYIGPROF_HZ", "1000"),
            ],
        );
        let took = started.elapsed().as_secs_f64();
        let stderr = run.stderr();
        assert!(run.output.status.success(), "{case}: {stderr}");
        // The program's output is its own: three numbers, as without the profiler.
        let stdout = run.stdout();
        let figures: Vec<f64> = stdout.lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(figures.len(), 4, "{case}: {stdout}");
        assert_eq!(String::from_utf8_lossy(&plain.stdout).lines().count(), 4);
        let (cpu, own_wall, threads) = (figures[0], figures[1], figures[3]);
        let summary = stderr
            .lines()
            .find(|l| l.starts_with("pyigprof: pushed "))
            .unwrap_or_else(|| panic!("{case}: no summary in {stderr}"));
        // What the process took beyond its own code: start-up, and the end's wait for
        // the pusher.
        let beyond = took - own_wall;
        eprintln!("push_faults: {case}: {took:.2} s wall ({beyond:.2} s beyond the program's own), {cpu:.3} s CPU, the profiler's threads {threads:.2} s CPU (without push {unpushed_threads:.2} s): {summary}");
        assert!(summary.contains("could not be sent"), "{case}: {summary}");
        assert!(summary.contains(why), "{case}: {summary}");
        // The program spins 1.5 s of CPU; the end does not wait for a backend that
        // failed or is slow (0.5 s at most for the answer to the last window's request).
        assert!(
            beyond < 1.2,
            "{case}: {beyond:.2} s beyond the program's own {own_wall:.2} s"
        );
        // A backend that fails does not make the pusher spin: the CPU time of the
        // profiler's threads (kernel clock ticks of 10 ms) stays near a run's without push,
        // where a retry loop without a pause would take most of the 1.5 s.
        assert!(
            threads <= unpushed_threads + 0.1,
            "{case}: the profiler's threads took {threads:.2} s of CPU, {unpushed_threads:.2} s without push"
        );
    }
    // A failed window is tried again (after 0.5 s, then 1 s: two attempts fit in the run).
    let attempts = failing_requests.lock().unwrap().len();
    assert!(attempts >= 2, "{attempts} requests to the failing backend");
}

/// A `multiprocessing` pool (fork): each worker pushes its own windows from its fork on,
/// under its own pid, holding its own work (`square_sum`), and the parent's hold none of
/// it; every worker's last window is pushed when the pool is closed and joined.
#[test]
fn multiprocessing_workers_push_their_own_windows() {
    const POOL: &str = r#"
import multiprocessing as mp, os, sys
def square_sum(n):
    return sum(i * i for i in range(n))
if __name__ == "__main__":
    ctx = mp.get_context("fork")
    with ctx.Pool(2) as pool:
        for _ in range(3):
            pool.map(square_sum, [300000] * 8)
        pool.close()
        pool.join()
    print(os.getpid())
"#;
    let python = &interpreters_for("push_pool", "3.x interpreters", |i| i.version >= (3, 6))[0];
    let (port, requests) = serve(Backend::Ok);
    let url = format!("http://127.0.0.1:{port}");
    let dir = scratch_dir("push-pool");
    let script = dir.join("pool.py");
    std::fs::write(&script, POOL).unwrap();
    let run = run_profiled(
        &python.path,
        &[script.to_str().unwrap()],
        &[
            ("PYIGPROF_PUSH", url.as_str()),
            ("PYIGPROF_WINDOW", "0.3"),
            ("PYIGPROF_HZ", "1000"),
        ],
    );
    assert!(run.output.status.success(), "{}", run.stderr());
    let parent: u32 = run.stdout().trim().parse().unwrap();
    let requests = requests.lock().unwrap();
    // Pushes by pid, and the seconds of square_sum in them.
    let mut by_pid: HashMap<u32, (usize, f64)> = HashMap::new();
    for request in requests.iter() {
        let name = &request.query()["name"];
        let pid: u32 = name
            .split("pid=")
            .nth(1)
            .and_then(|rest| rest.split([',', '}']).next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {name}"));
        let (_, by_function) = totals(&request.profile(), "cpu");
        let entry = by_pid.entry(pid).or_default();
        entry.0 += 1;
        entry.1 += by_function.get("square_sum").copied().unwrap_or(0) as f64 / 1e9;
    }
    eprintln!("push_pool: {}: parent {parent}: {by_pid:?}", python.name);
    let workers: Vec<_> = by_pid.iter().filter(|(pid, _)| **pid != parent).collect();
    assert_eq!(workers.len(), 2, "{by_pid:?}\n{}", run.stderr());
    for (pid, (windows, seconds)) in &workers {
        assert!(
            *windows >= 1 && *seconds > 0.1,
            "worker {pid}: {windows} windows, {seconds:.3} s of square_sum"
        );
    }
    let (_, parent_seconds) = by_pid.get(&parent).copied().unwrap_or_default();
    assert_eq!(
        parent_seconds, 0.0,
        "the parent's windows hold its workers' work"
    );
}

/// A service that crashes (a segmentation fault in native code) still pushes its last,
/// partial window — written by the child the fatal signal's handler forks, which sends it
/// itself — and ends by its signal as it would have: the windows pushed add up to its CPU
/// time and the last holds what it ran last.
#[test]
fn a_process_ended_by_a_fault_pushes_its_last_window() {
    let crash = format!(
        "{PHASED}\nsys.stdout.flush()\nimport ctypes\nctypes.string_at(0)\nprint('not reached')\n"
    );
    let python = &interpreters_for("push_fault", "3.x interpreters", |i| i.version >= (3, 6))[0];
    let (port, requests) = serve(Backend::Ok);
    let url = format!("http://127.0.0.1:{port}");
    let run = run_profiled(
        &python.path,
        &["-c", &crash],
        &[
            ("PYIGPROF_PUSH", url.as_str()),
            ("PYIGPROF_WINDOW", "60"),
            ("PYIGPROF_HZ", "1000"),
        ],
    );
    let stderr = run.stderr();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        run.output.status.signal(),
        Some(libc::SIGSEGV),
        "{}: {:?}\n{stderr}",
        python.name,
        run.output.status
    );
    assert!(!run.stdout().contains("not reached"));
    let cpu: f64 = run.stdout().trim().parse().expect("the program's CPU time");
    let requests = requests.lock().unwrap().clone();
    // 1.5 s of CPU in a window of 60 s: the last, partial window, which only the fault's
    // child sends, is the whole run.
    assert_eq!(requests.len(), 1, "{stderr}");
    let mut seconds = 0.0;
    let mut late = Vec::new();
    for request in &requests {
        let (ns, by_function) = totals(&request.profile(), "cpu");
        seconds += ns as f64 / 1e9;
        late.push(by_function.get("late").copied().unwrap_or(0));
    }
    eprintln!(
        "push_fault: {}: {} windows pushed, {seconds:.3} s of CPU in them, {cpu:.3} s measured before the fault",
        python.name,
        requests.len()
    );
    assert!(
        stderr.contains(&format!(
            "pyigprof: pushed {} windows to {url}",
            requests.len()
        )),
        "{stderr}"
    );
    // The windows hold the run: its CPU time to the fault (a few ms more: the fault's).
    assert!(
        (seconds - cpu).abs() <= 0.05 * cpu,
        "pushed {seconds:.3} s, the process {cpu:.3} s before the fault; late by window {late:?}"
    );
    assert!(
        late.last().is_some_and(|&ns| ns > 0),
        "the last window pushed holds no `late`: {late:?}"
    );
}
