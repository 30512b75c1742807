//! Two link-time choices that make loading `libpyigprof.so` cheaper in every Python process
//! (issue 57: what a short process pays, bench/startup).
//!
//! **GCC's unwinder (`libgcc_eh.a`) linked in** instead of depending on `libgcc_s.so.1`.
//! Rust's standard library on `*-linux-gnu` links `libgcc_s` for `_Unwind_*` (panics'
//! unwinding, backtraces), whatever the panic strategy. A Python that never loads it
//! (pyenv's, Debian's) then loads one more shared object at every start: +0.18 ms of
//! `python -c pass` (bench/startup, 3.12, 100 paired rounds: an empty preloaded library
//! +0.01 ms, the same linking `libgcc_s` +0.18). The static archive, whole (the standard
//! library's references come after this crate's on the link line), defines every
//! `_Unwind_*` first, so the linker's `--as-needed` drops `libgcc_s`; the symbols stay
//! local to the library (the cdylib's version script exports only pyigprof's own).
//! Without a C compiler that knows the archive (`cc -print-file-name` answers a bare
//! name), the library links `libgcc_s` as before.
//!
//! **Relative relocations packed** (`-z pack-relative-relocs`, `DT_RELR`): the library's
//! 2,038 `R_X86_64_RELATIVE` relocations (vtables, string tables, panic locations), 49 KB
//! of `.rela.dyn` that the dynamic linker reads at every start, become 664 bytes of
//! bitmaps: 8 fewer page faults and -0.04 ms of `python -c pass` (3.12, 300 paired rounds,
//! +1.26 -> +1.22 ms). Only when the C compiler's linker accepts the option and this
//! machine's glibc (`getconf GNU_LIBC_VERSION`) is 2.36 or later: the library then needs
//! `GLIBC_ABI_DT_RELR` (glibc 2.36+) of the glibc that loads it, as it already needs this
//! machine's glibc symbol versions (2.35 here).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let Ok(out) = Command::new(&cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
    else {
        return;
    };
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() && path.starts_with('/') && Path::new(&path).is_file() {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--whole-archive");
        println!("cargo:rustc-cdylib-link-arg={path}");
        println!("cargo:rustc-cdylib-link-arg=-Wl,--no-whole-archive");
    }
    if glibc_has_dt_relr() && links_with(&cc, "-Wl,-z,pack-relative-relocs") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this machine's glibc loads `DT_RELR` relocations (2.36 and later).
fn glibc_has_dt_relr() -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    // "glibc 2.36"
    let text = String::from_utf8_lossy(&out.stdout);
    let mut numbers = text
        .trim()
        .strip_prefix("glibc ")
        .unwrap_or_default()
        .split('.')
        .map(|n| n.parse::<u32>().ok());
    matches!(
        (numbers.next(), numbers.next()),
        (Some(Some(major)), Some(Some(minor))) if (major, minor) >= (2, 36)
    )
}

/// Whether `cc` links an empty shared object with `flag` without a complaint (an older
/// linker warns of an unknown `-z` option and goes on).
fn links_with(cc: &str, flag: &str) -> bool {
    let Some(dir) = std::env::var_os("OUT_DIR") else {
        return false;
    };
    let dir = Path::new(&dir);
    let source = dir.join("empty.c");
    if std::fs::write(&source, "int pyigprof_empty;\n").is_err() {
        return false;
    }
    let Ok(out) = Command::new(cc)
        .args(["-shared", "-fPIC", flag, "-o"])
        .arg(dir.join("empty.so"))
        .arg(&source)
        .output()
    else {
        return false;
    };
    out.status.success() && out.stderr.is_empty()
}
