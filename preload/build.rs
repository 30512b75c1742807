//! Links GCC's unwinder (`libgcc_eh.a`) into `libpyigprof.so` instead of depending on
//! `libgcc_s.so.1` (issue 57).
//!
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

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let Ok(out) = std::process::Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
    else {
        return;
    };
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() && path.starts_with('/') && std::path::Path::new(&path).is_file() {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--whole-archive");
        println!("cargo:rustc-cdylib-link-arg={path}");
        println!("cargo:rustc-cdylib-link-arg=-Wl,--no-whole-archive");
    }
}
