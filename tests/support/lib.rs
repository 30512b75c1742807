//! Support for pyigprof's end-to-end tests: building the preload library and the analyser,
//! finding the Python interpreters on the machine, running programs under the profiler,
//! and reading the profiles they write (with the analyser's own reader).

pub mod igprof_reader;
pub mod ingest;
pub mod interpreters;

pub use interpreters::*;

use igprof_analyse::Profile;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Built artifacts: `libpyigprof.so`, `pyigprof-analyse` and `pyigprof` (release, as a user
/// builds them).
pub struct Artifacts {
    /// Path of `libpyigprof.so`.
    pub preload: PathBuf,
    /// Path of the `pyigprof-analyse` binary.
    pub analyse: PathBuf,
    /// Path of the `pyigprof` command (`record`, `report`).
    pub command: PathBuf,
}

/// Removes from `command`'s environment the variables cargo sets for the crate it builds
/// or the test it runs (cargo's "Environment variables Cargo sets for crates":
/// `CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, `CARGO_CRATE_NAME`, `CARGO_BIN_EXE_*`, `OUT_DIR`,
/// …), for a build started from a test (`cargo build`, `pip install .`), which must see
/// the environment cargo itself was started in: `ring`'s build script watches
/// `CARGO_MANIFEST_DIR` and `CARGO_PKG_*` (`rerun-if-env-changed`), so a build that sees
/// the test's values rebuilds ring and everything above it (rustls, ureq, the analyser:
/// about a minute here), and the next `cargo build --release` or `cargo test --release`,
/// which does not see them, rebuilds them all again.
pub fn without_cargos_test_variables(command: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        if set_by_cargo_for_the_crate(&name.to_string_lossy()) {
            command.env_remove(name);
        }
    }
    command
}

/// Whether `name` is one of the variables [`without_cargos_test_variables`] removes.
fn set_by_cargo_for_the_crate(name: &str) -> bool {
    const EXACT: [&str; 9] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    EXACT.contains(&name)
        || name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
        || name.starts_with("CARGO_SBOM_")
}

/// Builds the release artifacts once per test process ([`build_artifacts`]) and returns
/// their paths.
pub fn artifacts() -> &'static Artifacts {
    static BUILT: OnceLock<Artifacts> = OnceLock::new();
    BUILT.get_or_init(build_artifacts)
}

/// Builds the release artifacts (`cargo build --release`, the command the README gives)
/// and returns their paths. After `cargo build --release` or a first `cargo test
/// --release` this compiles nothing: the build runs in the environment cargo itself was
/// started in ([`without_cargos_test_variables`]). Panics if the build fails.
pub fn build_artifacts() -> Artifacts {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = without_cargos_test_variables(&mut Command::new(cargo))
        .args([
            "build",
            "--release",
            "-p",
            "pyigprof-preload",
            "-p",
            "pyigprof-analyse",
            "-p",
            "pyigprof-cli",
        ])
        .current_dir(repo())
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build --release failed");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo().join("target"), PathBuf::from);
    let a = Artifacts {
        preload: target.join("release/libpyigprof.so"),
        analyse: target.join("release/pyigprof-analyse"),
        command: target.join("release/pyigprof"),
    };
    assert!(
        a.preload.exists() && a.analyse.exists() && a.command.exists(),
        "artifacts missing in {}",
        target.display()
    );
    a
}

/// A fresh, empty directory for one test run.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "pyigprof-test-{tag}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// The files in `dir` (a test's scratch directory: what the program and the profiler wrote
/// there), as paths sorted by name. Panics when `dir` cannot be read.
pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    files.sort();
    files
}

/// The names of the files in `dir`, sorted (see [`files_in`]).
pub fn file_names_in(dir: &Path) -> Vec<String> {
    files_in(dir)
        .iter()
        .map(|p| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// Waits for `child` at most `limit`; on the limit it is killed and reaped, and `None`
/// returned (it hung).
pub fn wait_at_most(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return Some(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A finished profiled run.
pub struct Run {
    /// The program's stdout, stderr and exit status.
    pub output: Output,
    /// The directory it ran in (its working directory).
    pub dir: PathBuf,
}

impl Run {
    /// The program's stdout as text.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    /// The program's stderr as text.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// Profiles written into the run's directory (`pyigprof.*`), sorted.
    pub fn profiles(&self) -> Vec<PathBuf> {
        let mut v = files_in(&self.dir);
        v.retain(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("pyigprof."))
        });
        v
    }

    /// The profiler's statistics in the single profile the run wrote, as the analyser
    /// reads them (`<section>.<key>` → value; docs/dump-format.md).
    pub fn statistics(&self) -> std::collections::HashMap<String, String> {
        let profile = self.profile();
        assert_eq!(profile.sources.len(), 1);
        profile_statistics(&profile)
    }

    /// The statistic `key` of [`Run::statistics`] (`stats.with_python`, …) as a fraction of
    /// the profile's samples (`stats.samples`).
    pub fn fraction_of_samples(&self, key: &str) -> f64 {
        let stats = self.statistics();
        statistic(&stats, key) / statistic(&stats, "stats.samples")
    }

    /// The single profile the run wrote, read with the analyser's reader.
    pub fn profile(&self) -> Profile {
        let paths = self.profiles();
        assert_eq!(
            paths.len(),
            1,
            "expected one profile in {}, stderr:\n{}",
            self.dir.display(),
            self.stderr()
        );
        igprof_analyse::read_profiles(&paths).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// The profiler's statistics of `profile`'s first source, as the analyser reads them
/// (`<section>.<key>` → value; docs/dump-format.md).
pub fn profile_statistics(
    profile: &igprof_analyse::Profile,
) -> std::collections::HashMap<String, String> {
    profile.sources[0].statistics.iter().cloned().collect()
}

/// Runs `python args…` in a fresh directory with the profiler preloaded and `env` set (and
/// signals as [`with_default_signals`] sets them). pyigprof's lines go to the program's
/// stderr (`PYIGPROF_LOG=stderr`), where the tests read them, unless `env` says otherwise.
pub fn run_profiled(python: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let dir = scratch_dir("run");
    let mut cmd = Command::new(python);
    with_default_signals(&mut cmd)
        .args(args)
        .current_dir(&dir)
        .env("LD_PRELOAD", &artifacts().preload)
        .env("PYIGPROF_LOG", "stderr");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd.output().expect("run python");
    Run { output, dir }
}

/// Runs `python args…` under the profiler like [`run_profiled`], asserts that it exited
/// successfully, and reads its profile.
pub fn profiled_ok(python: &Interpreter, args: &[&str], env: &[(&str, &str)]) -> (Run, Profile) {
    let run = run_profiled(&python.path, args, env);
    assert!(
        run.output.status.success(),
        "{}: exit {:?}\n{}",
        python.name,
        run.output.status,
        run.stderr()
    );
    let profile = run.profile();
    (run, profile)
}

/// Builds the shared library `dir/lib<name>.so` from the C source `source` with gcc and
/// `flags` (e.g. `-O0`), and returns its path. Panics with gcc's output if it fails.
pub fn c_library(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let flags = [flags, &["-shared", "-fPIC"]].concat();
    gcc(dir, name, source, &flags, &format!("lib{name}.so"))
}

/// Builds the program `dir/<name>` from the C source `source` with gcc and `flags`, and
/// returns its path. Panics with gcc's output if it fails.
pub fn c_program(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    gcc(dir, name, source, flags, name)
}

/// Builds the shared library `dir/lib<name>.so` from the assembler source `source` (a `.S`
/// file: GNU assembler syntax, run through the C preprocessor) with gcc, and returns its
/// path. Only what the source says goes into its unwind tables: an object assembled from
/// code without `.cfi_*` directives has no FDE for that code. Panics with gcc's output if
/// it fails.
pub fn asm_library(dir: &Path, name: &str, source: &str) -> PathBuf {
    let source_path = dir.join(format!("{name}.S"));
    std::fs::write(&source_path, source).unwrap();
    gcc_file(
        dir,
        &source_path,
        &["-shared", "-fPIC"],
        &format!("lib{name}.so"),
    )
}

fn gcc(dir: &Path, name: &str, source: &str, flags: &[&str], output: &str) -> PathBuf {
    let source_path = dir.join(format!("{name}.c"));
    std::fs::write(&source_path, source).unwrap();
    gcc_file(dir, &source_path, flags, output)
}

fn gcc_file(dir: &Path, source_path: &Path, flags: &[&str], output: &str) -> PathBuf {
    let name = source_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let built = dir.join(output);
    let out = Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&built)
        .arg(source_path)
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    built
}

/// Path of a file under `examples/`.
pub fn example(name: &str) -> String {
    repo()
        .join("examples")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// One recorded call stack: frames outermost first as (function name, file), and its
/// self amount (ticks) and count (samples).
#[derive(Clone, Debug)]
pub struct Stack {
    /// Frames, outermost first.
    pub frames: Vec<(String, String)>,
    /// Ticks that ended here.
    pub ticks: i64,
    /// Samples that ended here.
    pub samples: i64,
    /// Offset of each frame (bytes for native, lines past the first line for Python).
    pub offsets: Vec<i64>,
}

impl Stack {
    /// Whether a frame named `name` appears.
    pub fn has(&self, name: &str) -> bool {
        self.frames.iter().any(|(n, _)| n == name)
    }

    /// Index of the first frame named `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.frames.iter().position(|(n, _)| n == name)
    }
}

/// Every stack of the profile that has samples of its own (PERF_TICKS).
pub fn stacks(profile: &Profile) -> Vec<Stack> {
    stacks_of(profile, "PERF_TICKS")
}

/// Every stack of the profile with a value of its own for `counter`: for `PERF_TICKS`
/// ticks and samples, for the memory counters bytes (`ticks`) and allocations or blocks
/// (`samples`).
pub fn stacks_of(profile: &Profile, counter: &str) -> Vec<Stack> {
    let counter = profile
        .counter_id(counter)
        .unwrap_or_else(|| panic!("no {counter} counter"));
    let nodes = profile.nodes();
    let mut out = Vec::new();
    for (index, node) in nodes.iter().enumerate() {
        let v = node.value(counter);
        // (Ticks without samples: a thread's undelivered expirations counted at its end.)
        if v.count == 0 && v.amount == 0 {
            continue;
        }
        let mut frames = Vec::new();
        let mut offsets = Vec::new();
        let mut cursor = Some(index as u32);
        while let Some(i) = cursor {
            let n = &nodes[i as usize];
            let f = profile.function(n.function);
            frames.push((f.name.clone(), profile.file(f.file).to_string()));
            offsets.push(n.offset);
            cursor = n.parent;
        }
        frames.reverse();
        offsets.reverse();
        out.push(Stack {
            frames,
            ticks: v.amount,
            samples: v.count,
            offsets,
        });
    }
    out
}

/// Total ticks and samples of the profile.
pub fn totals(profile: &Profile) -> (i64, i64) {
    stacks(profile)
        .iter()
        .fold((0, 0), |(t, s), st| (t + st.ticks, s + st.samples))
}

/// Seconds of CPU time the profile reports (ticks × T).
pub fn seconds(profile: &Profile) -> f64 {
    totals(profile).0 as f64 * profile.sources[0].tick_period
}

/// Share (0–100) of ticks whose stack satisfies `pred`.
pub fn share(profile: &Profile, pred: impl Fn(&Stack) -> bool) -> f64 {
    share_by(profile, pred, |s| s.ticks)
}

/// Share (0–100) of samples (not ticks) whose stack satisfies `pred`: what
/// a statistic that counts samples (`stats.approximate_native`) is compared with.
pub fn share_of_samples(profile: &Profile, pred: impl Fn(&Stack) -> bool) -> f64 {
    share_by(profile, pred, |s| s.samples)
}

/// Share (0–100) of `amount` (a stack's ticks or samples) in the stacks that satisfy `pred`.
fn share_by(profile: &Profile, pred: impl Fn(&Stack) -> bool, amount: fn(&Stack) -> i64) -> f64 {
    let all = stacks(profile);
    let total: i64 = all.iter().map(amount).sum();
    let hit: i64 = all.iter().filter(|s| pred(s)).map(amount).sum();
    if total == 0 {
        0.0
    } else {
        100.0 * hit as f64 / total as f64
    }
}

/// Extracts the number after `"key":` in a flat JSON text (the example programs print
/// their measurements as JSON on their last line).
pub fn json_number(text: &str, key: &str) -> f64 {
    let needle = format!("\"{key}\": ");
    let at = text
        .find(&needle)
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        + needle.len();
    let end = text[at..].find([',', '}']).map_or(text.len(), |e| at + e);
    text[at..end]
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("bad number for {key} in {text}"))
}

/// Runs the analyser with `args`.
pub fn analyse(args: &[&str]) -> Output {
    Command::new(&artifacts().analyse)
        .args(args)
        .output()
        .expect("run pyigprof-analyse")
}

/// Where the tests keep the virtual environments they make (numpy from PyPI, …):
/// `$PYIGPROF_VENVS_DIR`, else `${XDG_CACHE_HOME:-$HOME/.cache}/pyigprof/venvs`.
pub fn venvs_dir() -> PathBuf {
    cache_dir("PYIGPROF_VENVS_DIR", "venvs")
        .unwrap_or_else(|| std::env::temp_dir().join("pyigprof-venvs"))
}

/// An exclusive lock on `path` (created if missing), held until the returned file is
/// dropped: `flock`, so it also keeps apart two tests of one process that open it.
fn lock_file(path: &Path) -> Result<std::fs::File, String> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    file.lock()
        .map_err(|e| format!("lock {}: {e}", path.display()))?;
    Ok(file)
}

/// Runs `program args…` and returns its stdout, or a one-line reason it failed (its last
/// line of stderr).
fn run_for_text(program: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .env_remove("LD_PRELOAD")
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
    Err(format!(
        "`{} {}` failed ({}): {}",
        program.display(),
        args.join(" "),
        out.status,
        last.unwrap_or("").trim()
    ))
}

/// A pip wheel from PyPI for interpreters whose venvs come without pip (Debian's, which
/// lack `ensurepip`): downloaded once into `venvs_dir()/.pip-wheel` by the pip of any
/// interpreter of 3.9+ that has one, and run from the wheel (`python pip.whl/pip install
/// pip.whl`, as pip documents) to install itself into a venv.
fn pip_wheel(root: &Path) -> Result<PathBuf, String> {
    let _lock = lock_file(&root.join(".pip-wheel.lock"))?;
    let dir = root.join(".pip-wheel");
    let find = || -> Option<PathBuf> {
        if !dir.join(".complete").exists() {
            return None;
        }
        std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with("pip-") && n.ends_with(".whl")
                })
            })
    };
    if let Some(wheel) = find() {
        return Ok(wheel);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let helper = interpreters()
        .into_iter()
        .filter(|i| i.version >= (3, 9))
        .find(|i| run_for_text(&i.path, &["-m", "pip", "--version"]).is_ok())
        .ok_or("no interpreter with pip to download pip from PyPI")?;
    let dest = dir.to_string_lossy().into_owned();
    run_for_text(
        &helper.path,
        &[
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "--no-deps",
            "-d",
            &dest,
            "pip",
        ],
    )?;
    std::fs::write(dir.join(".complete"), &helper.name).map_err(|e| e.to_string())?;
    find().ok_or_else(|| format!("no pip wheel in {dest} after pip download"))
}

/// A virtual environment of `base` with numpy from PyPI.
#[derive(Clone, Debug)]
pub struct NumpyVenv {
    /// The venv's interpreter, named as `base` is (its version is `base`'s).
    pub python: Interpreter,
    /// `numpy.__version__`.
    pub numpy: String,
    /// The OpenBLAS library numpy's wheel bundles (`numpy.libs/libscipy_openblas64_*.so`),
    /// if any.
    pub openblas: Option<PathBuf>,
}

/// The venv `venvs_dir()/<base name>-numpy` with numpy installed from PyPI (binary wheels
/// only: an interpreter without a numpy wheel is refused rather than compiled for), made
/// the first time it is asked for and reused after ([`package_venv`]). Returns why not
/// when it cannot be made.
pub fn numpy_venv(base: &Interpreter) -> Result<NumpyVenv, String> {
    let probe = |python: &Path| -> Result<(String, Option<PathBuf>), String> {
        let text = run_for_text(
            python,
            &[
                "-c",
                "import glob, os, numpy\n\
                 libs = os.path.join(os.path.dirname(os.path.dirname(numpy.__file__)), 'numpy.libs')\n\
                 print(numpy.__version__)\n\
                 print('\\n'.join(sorted(glob.glob(os.path.join(libs, 'libscipy_openblas*.so')))))",
            ],
        )?;
        let mut lines = text.lines();
        let version = lines.next().unwrap_or_default().trim().to_string();
        let openblas = lines.next().filter(|l| !l.is_empty()).map(PathBuf::from);
        Ok((version, openblas))
    };
    let (python, (numpy, openblas)) = package_venv(base, "numpy", &["numpy"], probe)?;
    Ok(NumpyVenv {
        python,
        numpy,
        openblas,
    })
}

/// The venv `venvs_dir()/<base name>-<tag>` with `packages` installed from PyPI (binary
/// wheels only), made the first time it is asked for and reused after: its interpreter
/// (named as `base` is) and what `probe` says of it. Made under an exclusive lock
/// (`<base name>-<tag>.lock` beside it), so that parallel tests and test processes wait for
/// one another, and marked complete (`.complete`, holding the base interpreter's path and
/// `sys.version`) only once `probe` succeeds; a venv without the marker, or made from
/// another build of the interpreter, is made anew. `python -m venv` where it works; where
/// it does not (no `ensurepip`), `--without-pip` and pip from PyPI (see `pip_wheel`).
/// Returns why not when it cannot be made.
pub fn package_venv<T>(
    base: &Interpreter,
    tag: &str,
    packages: &[&str],
    probe: impl Fn(&Path) -> Result<T, String>,
) -> Result<(Interpreter, T), String> {
    let root = venvs_dir();
    std::fs::create_dir_all(&root).map_err(|e| format!("create {}: {e}", root.display()))?;
    let dir = root.join(format!("{}-{tag}", base.name));
    let _lock = lock_file(&root.join(format!("{}-{tag}.lock", base.name)))?;
    let python = dir.join("bin/python");
    let marker = dir.join(".complete");
    let identity = format!(
        "{}\n{}",
        base.path.display(),
        run_for_text(&base.path, &["-c", "import sys; print(sys.version)"])?.trim()
    );
    let interpreter = Interpreter {
        name: base.name.clone(),
        path: python.clone(),
        version: base.version,
    };
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == identity) {
        if let Ok(found) = probe(&python) {
            return Ok((interpreter, found));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let target = dir.to_string_lossy().into_owned();
    if run_for_text(&base.path, &["-m", "venv", &target]).is_err() {
        let _ = std::fs::remove_dir_all(&dir);
        run_for_text(&base.path, &["-m", "venv", "--without-pip", &target])?;
        let wheel = pip_wheel(&root)?;
        let wheel = wheel.to_string_lossy().into_owned();
        run_for_text(
            &python,
            &[
                &format!("{wheel}/pip"),
                "install",
                "-q",
                "--no-index",
                &wheel,
            ],
        )?;
    }
    let mut install = vec!["-m", "pip", "install", "-q", "--only-binary=:all:"];
    install.extend_from_slice(packages);
    run_for_text(&python, &install)?;
    let found = probe(&python)?;
    std::fs::write(&marker, &identity).map_err(|e| format!("write {}: {e}", marker.display()))?;
    Ok((interpreter, found))
}

/// A venv of `base` with uvloop from PyPI ([`package_venv`]): its interpreter and uvloop's
/// version. Panics, saying why, when it cannot be made.
pub fn uvloop_venv(base: &Interpreter) -> (Interpreter, String) {
    package_venv(base, "uvloop", &["uvloop"], |python| {
        let out = Command::new(python)
            .args(["-c", "import uvloop; print(uvloop.__version__)"])
            .output()
            .map_err(|e| e.to_string())?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
    })
    .unwrap_or_else(|e| panic!("{}: a venv with uvloop: {e}", base.name))
}

/// `script` run on uvloop's event loop: its `asyncio.run(main())` under uvloop's policy.
pub fn on_uvloop(script: &str) -> String {
    let run = "asyncio.run(main())";
    assert!(script.contains(run), "no {run} in the script");
    script.replace(
        run,
        "import uvloop\nasyncio.set_event_loop_policy(uvloop.EventLoopPolicy())\nasyncio.run(main())",
    )
}

/// The numpy venvs ([`numpy_venv`]) of the present interpreters of 3.11 and newer (numpy's
/// wheels that bundle `libscipy_openblas64_`), made if missing: all of them in the whole
/// matrix; in the fast tier one, the same for every test that asks (so that a cold run
/// makes one venv: [`fast_order`] of the key `numpy`, the next where one cannot be made).
/// Prints on the test process's stderr which were covered and why the others were not.
pub fn numpy_interpreters(test: &str) -> Vec<NumpyVenv> {
    use std::io::Write;
    let mut covered = Vec::new();
    let mut names = Vec::new();
    let mut skipped = Vec::new();
    let (newer, older): (Vec<Interpreter>, Vec<Interpreter>) = interpreters()
        .into_iter()
        .partition(|i| i.version >= (3, 11));
    for base in &older {
        skipped.push(format!("{} (older than 3.11)", base.name));
    }
    let (bases, one) = match tier() {
        Tier::Full => (newer, false),
        Tier::Fast => (fast_order("numpy", newer), true),
    };
    for base in bases {
        if one && !covered.is_empty() {
            skipped.push(format!("{} (fast tier)", base.name));
            continue;
        }
        let started = std::time::Instant::now();
        match numpy_venv(&base) {
            Ok(venv) => {
                names.push(format!(
                    "{} (numpy {}, {:.1} s)",
                    base.name,
                    venv.numpy,
                    started.elapsed().as_secs_f64()
                ));
                covered.push(venv);
            }
            Err(why) => skipped.push(format!("{} ({why})", base.name)),
        }
    }
    let line = format!(
        "{test}: numpy venvs in {} covered: {}; skipped: {}\n",
        venvs_dir().display(),
        names.join(", "),
        skipped.join(", ")
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    covered
}

/// CPU time of process `pid` so far (user + system, from `/proc/PID/stat`), seconds; `None`
/// once it has ended.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().ok()? + fields[12].parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    Some(ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
}

/// A program's process that is killed when dropped: a test's program that never ends by
/// itself (a server, a hung program) must not outlive a failed assertion.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` (its signals as [`with_default_signals`] sets them, stdout piped) and
/// waits for its first line, which must be `ready`: a program that says so once its
/// threads are where the test wants them. Killed when dropped.
pub fn start_until_ready(command: &mut Command) -> Killed {
    let mut child = with_default_signals(command.stdout(std::process::Stdio::piped()))
        .spawn()
        .expect("start the program");
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut first,
    )
    .expect("the program's first line");
    let child = Killed(child);
    assert_eq!(first, "ready\n", "the program's first line");
    child
}

/// Runs the `pyigprof` command with `args` in `dir` (without an inherited `LD_PRELOAD`) and
/// returns what it did.
pub fn pyigprof(args: &[&str], dir: &Path) -> Output {
    Command::new(&artifacts().command)
        .args(args)
        .current_dir(dir)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run pyigprof")
}

/// Bytes of a command's output as text (lossily).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A program whose fork child and subprocess write known bytes (a NUL and a byte that is
/// not UTF-8 among them) to their stderr and stdout, which the parent reads through pipes
/// and checks; the parent writes to both streams itself and exits with status 3.
pub const STREAMS_PROGRAM: &str = r#"
import os, subprocess, sys
def work():
    return sum(i * i for i in range(300000))
work()
child = subprocess.run(
    [sys.executable, "-c",
     "import os; sum(i * i for i in range(300000)); os.write(2, b'child err \\x00\\xff\\n'); os.write(1, b'child out')"],
    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
assert child.stderr == b"child err \x00\xff\n", child.stderr
assert child.stdout == b"child out", child.stdout
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    os.dup2(w, 2)
    work()
    os.write(2, b"fork child err\n")
    os._exit(0)
os.close(w)
got = b""
while True:
    chunk = os.read(r, 4096)
    if not chunk:
        break
    got += chunk
os.waitpid(pid, 0)
assert got == b"fork child err\n", got
print("parent out", child.stdout, got)
sys.stderr.write("parent err\n")
sys.exit(3)
"#;

/// How the live commands' tests (`dump`, `top`) start their program: with the library
/// preloaded in cpu or in wall mode, or without it (the command attaches).
pub const LIVE_STARTS: [Option<&str>; 3] = [Some("cpu"), Some("wall"), None];

/// `python -c script` in `dir` for the live commands' tests, stdin closed and without an
/// inherited `LD_PRELOAD`; with `preloaded` (a clock) under the library in that mode,
/// writing its profile to `dir/<output>`, with the settings `env` too. Start it with
/// [`start_until_ready`].
pub fn live_program(
    python: &Path,
    script: &str,
    dir: &Path,
    preloaded: Option<&str>,
    output: &str,
    env: &[(&str, &str)],
) -> Command {
    let mut command = Command::new(python);
    command
        .args(["-c", script])
        .current_dir(dir)
        .env_remove("LD_PRELOAD")
        .stdin(std::process::Stdio::null());
    if let Some(clock) = preloaded {
        command
            .env("LD_PRELOAD", &artifacts().preload)
            .env("PYIGPROF_CLOCK", clock)
            .env("PYIGPROF_OUTPUT", dir.join(output))
            .envs(env.iter().copied());
    }
    command
}

/// `python`'s name and how its program was started (one of [`LIVE_STARTS`]), for a test's
/// messages: `pyenv-3.12.1 preloaded, wall mode`, `pyenv-3.12.1 attached`.
pub fn live_label(python: &str, preloaded: Option<&str>) -> String {
    match preloaded {
        Some(clock) => format!("{python} preloaded, {clock} mode"),
        None => format!("{python} attached"),
    }
}

/// The statistic `key` of a profile's statistics ([`Run::statistics`]: `stats.samples`,
/// `cost.helper_cpu_ns`, …) as a number; panics naming the key and the statistics when it
/// is missing or not a number.
pub fn statistic(stats: &std::collections::HashMap<String, String>, key: &str) -> f64 {
    stats
        .get(key)
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no number {key} in the profile's statistics: {stats:?}"))
}
