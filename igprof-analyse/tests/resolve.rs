//! Naming `@?0x…` functions from the binaries on this machine (src/resolve.rs): a shared
//! library is built from C and C++ sources at test time, dumps that name its functions
//! only by address are written by hand, and the reports must show the functions' names
//! (demangled) and where their source starts. Then the same with the library stripped and
//! its symbols in a separate debug file found through `.gnu_debuglink` or, in a debug
//! directory the test chooses (`--debug-dir`), through its build-id.
//!
//! Skipped, with a line saying why, when `cc`, `c++`, `objcopy` or `strip` is missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{run_resolving, stderr, stdout, TempDir};
use object::{Object, ObjectSymbol};

/// A static function (only in `.symtab`, so gone once stripped) and an exported one.
const C_SOURCE: &str = "\
static __attribute__((noinline)) int mix(int x)
{
  int s = 0;
  for (int i = 0; i < x; i++) s += i * x;
  return s;
}
int crunch(int x)
{
  return mix(x) + 1;
}
";

/// A function in a namespace, exported with a mangled name.
const CXX_SOURCE: &str = "\
namespace geometry {
struct Shape { double w, h; };
__attribute__((noinline)) double area(const Shape &s, int scale)
{
  return s.w * s.h * scale;
}
}
extern \"C\" double call_area(double w) { geometry::Shape s{w, 2}; return geometry::area(s, 3); }
";

/// Runs `program` with `args` in `dir`; false if it cannot be started or fails.
fn tool(program: &str, args: &[&str], dir: &Path) -> bool {
    match Command::new(program).args(args).current_dir(dir).output() {
        Ok(output) if output.status.success() => true,
        Ok(output) => panic!(
            "{program} {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(_) => false,
    }
}

/// Whether the tools to build and strip a library are here; prints why not.
fn have_tools(test: &str) -> bool {
    for program in ["cc", "c++", "objcopy", "strip"] {
        if Command::new(program).arg("--version").output().is_err() {
            println!("{test}: skipped: `{program}` is not installed");
            return false;
        }
    }
    true
}

/// The library built in `dir`: `libdemo.so`, with debug information and a build-id.
struct Library {
    path: PathBuf,
    /// ELF virtual addresses of `mix`, `crunch` and `geometry::area`.
    mix: u64,
    crunch: u64,
    area: u64,
    /// The size of `crunch` in bytes.
    crunch_size: u64,
}

fn build(dir: &Path) -> Library {
    std::fs::write(dir.join("demo.c"), C_SOURCE).unwrap();
    std::fs::write(dir.join("demo.cc"), CXX_SOURCE).unwrap();
    assert!(tool(
        "cc",
        &["-g", "-O1", "-fPIC", "-c", "demo.c", "-o", "demo.o"],
        dir
    ));
    assert!(tool(
        "c++",
        &["-g", "-O1", "-fPIC", "-c", "demo.cc", "-o", "demo_cc.o"],
        dir
    ));
    assert!(tool(
        "cc",
        &[
            "-shared",
            "-Wl,--build-id",
            "-o",
            "libdemo.so",
            "demo.o",
            "demo_cc.o"
        ],
        dir
    ));
    let path = dir.join("libdemo.so");
    let data = std::fs::read(&path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let symbol = |name: &str| {
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("no {name} in libdemo.so"))
    };
    Library {
        mix: symbol("mix").address(),
        crunch: symbol("crunch").address(),
        area: symbol("_ZN8geometry4areaERKNS_5ShapeEi").address(),
        crunch_size: symbol("crunch").size(),
        path,
    }
}

/// A pyigprof dump (docs/dump-format.md): `<module>` of t.py calling `crunch` and
/// `geometry::area`, `crunch` calling `mix`, all three native functions written by
/// address as for a stripped library (name `@?0x<start>`, start = the address).
/// mix: 5 ticks; area: 3 ticks; crunch: 2 ticks itself.
fn pyigprof_dump(lib: &Library) -> String {
    let path = lib.path.display();
    let (mix, crunch, area) = (lib.mix, lib.crunch, lib.area);
    format!(
        "P=(HEX ID=1 N=(python3 t.py) T=0.004000)
C1 FN0=(F0=(/work/t.py)+1 N=(<module>))+2
C2 FN1=(F1=({path})+{crunch:x} N=(@?{crunch:#x}))+0 V0=(PERF_TICKS):(2,2,2)
C3 FN2=(F1+{mix:x} N=(@?{mix:#x}))+0 V0:(5,5,5)
C2 FN3=(F1+{area:x} N=(@?{area:#x}))+0 V0:(3,3,3)
"
    )
}

/// The `--top` rows (function column onwards) of a run that must succeed.
fn top_rows(output: &std::process::Output) -> Vec<String> {
    assert_eq!(output.status.code(), Some(0), "{}", stderr(output));
    let text = stdout(output);
    let header = text.lines().nth(2).unwrap();
    let column = header.find("function").unwrap();
    text.lines()
        .skip(3)
        .map(|line| line[column..].to_string())
        .collect()
}

#[test]
fn unstripped_library_names_and_demangles() {
    if !have_tools("unstripped_library_names_and_demangles") {
        return;
    }
    let dir = TempDir::new("resolve_unstripped");
    let lib = build(&dir.0);
    dir.write("p.txt", pyigprof_dump(&lib).as_bytes());
    let output = run_resolving(&["p.txt", "--top=0"], &dir.0);
    assert_eq!(stderr(&output), "");
    let path = lib.path.display();
    let src = dir.0.display();
    assert_eq!(
        top_rows(&output),
        [
            format!("mix  ({path}; {src}/demo.c:1)"),
            format!("geometry::area(geometry::Shape const&, int)  ({path}; {src}/demo.cc:3)"),
            format!("crunch  ({path}; {src}/demo.c:7)"),
            "<module> (/work/t.py:1)".to_string(),
        ]
    );

    // --no-resolve keeps the names of the dump.
    let output = run_resolving(&["--no-resolve", "p.txt", "--top=0"], &dir.0);
    assert_eq!(stderr(&output), "");
    assert_eq!(top_rows(&output)[0], format!("@?{:#x}  ({path})", lib.mix));
}

#[test]
fn igprof_addresses_inside_one_function_merge() {
    if !have_tools("igprof_addresses_inside_one_function_merge") {
        return;
    }
    let dir = TempDir::new("resolve_igprof");
    let lib = build(&dir.0);
    // IgProf names a frame by its run-time address (here loaded at 0x7f0000000000) and
    // gives the offset from the load base as start, one FN per sampled address.
    let base = 0x7f00_0000_0000u64;
    let path = lib.path.display();
    let (a, b) = (lib.crunch + 2, lib.crunch + 5);
    let dump = format!(
        "P=(HEX ID=7 N=(app) T=0.010000)
C1 FN0=(F0=({path})+{a:x} N=(@?{:#x}))+0 V0=(PERF_TICKS):(1,1,1)
C1 FN1=(F0+{b:x} N=(@?{:#x}))+0 V0:(2,2,2)
",
        base + a,
        base + b
    );
    dir.write("igprof.txt", dump.as_bytes());
    let output = run_resolving(&["igprof.txt", "--top=0"], &dir.0);
    assert_eq!(stderr(&output), "");
    // Both addresses are crunch: one function with 3 ticks.
    let text = stdout(&output);
    assert!(
        text.ends_with(&format!(
            "   100.00     0.030   100.00     0.030  crunch  ({path}; {}/demo.c:7)\n",
            dir.0.display()
        )),
        "{text}"
    );
    assert_eq!(top_rows(&output).len(), 1, "{text}");
}

/// Strips `libdemo.so` in `dir` as distributions do: its debug information and `.symtab`
/// go to `libdemo.so.debug`, and the library gets a `.gnu_debuglink` to it.
fn strip(dir: &Path) {
    assert!(tool(
        "objcopy",
        &["--only-keep-debug", "libdemo.so", "libdemo.so.debug"],
        dir
    ));
    assert!(tool(
        "strip",
        &["--strip-debug", "--strip-unneeded", "libdemo.so"],
        dir
    ));
    assert!(tool(
        "objcopy",
        &["--add-gnu-debuglink=libdemo.so.debug", "libdemo.so"],
        dir
    ));
}

#[test]
fn stripped_library_uses_its_debug_file() {
    if !have_tools("stripped_library_uses_its_debug_file") {
        return;
    }
    let dir = TempDir::new("resolve_stripped");
    let lib = build(&dir.0);
    strip(&dir.0);
    let stripped = std::fs::read(&lib.path).unwrap();
    let file = object::File::parse(&*stripped).unwrap();
    assert!(
        file.symbols().next().is_none(),
        "strip left a .symtab in libdemo.so"
    );
    let build_id = file.build_id().unwrap().unwrap().to_vec();
    dir.write("p.txt", pyigprof_dump(&lib).as_bytes());
    let path = lib.path.display();
    let src = dir.0.display();
    let named = [
        format!("mix  ({path}; {src}/demo.c:1)"),
        format!("geometry::area(geometry::Shape const&, int)  ({path}; {src}/demo.cc:3)"),
        format!("crunch  ({path}; {src}/demo.c:7)"),
        "<module> (/work/t.py:1)".to_string(),
    ];

    // Through .gnu_debuglink: the debug file next to the library.
    let output = run_resolving(&["p.txt", "--top=0"], &dir.0);
    assert_eq!(stderr(&output), "");
    assert_eq!(top_rows(&output), named);

    // Through the build-id, in a debug directory given with --debug-dir.
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    let by_id = dir.0.join("debug/.build-id").join(&hex[..2]);
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::rename(
        dir.0.join("libdemo.so.debug"),
        by_id.join(format!("{}.debug", &hex[2..])),
    )
    .unwrap();
    let output = run_resolving(&["p.txt", "--top=0", "--debug-dir", "debug"], &dir.0);
    assert_eq!(stderr(&output), "");
    assert_eq!(top_rows(&output), named);

    // Without it, only the exported functions are named, from .dynsym, and without
    // their source: mix (static) keeps its address.
    let output = run_resolving(&["p.txt", "--top=0"], &dir.0);
    assert_eq!(stderr(&output), "");
    assert_eq!(
        top_rows(&output),
        [
            format!("@?{:#x}  ({path})", lib.mix),
            format!("geometry::area(geometry::Shape const&, int)  ({path})"),
            format!("crunch  ({path})"),
            "<module> (/work/t.py:1)".to_string(),
        ]
    );
}

#[test]
fn missing_and_different_libraries_keep_addresses_with_one_warning_each() {
    if !have_tools("missing_and_different_libraries") {
        return;
    }
    let dir = TempDir::new("resolve_missing");
    let lib = build(&dir.0);
    let path = lib.path.display();
    // gone.so does not exist (two functions, one warning); in libdemo.so, a function
    // start of the profile falls inside crunch: the library was rebuilt since.
    let inside = lib.crunch + lib.crunch_size / 2;
    let dump = format!(
        "P=(HEX ID=1 N=(app) T=0.004000)
C1 FN0=(F0=(/nonexistent/gone.so)+1000 N=(@?0x1000))+0 V0=(PERF_TICKS):(1,1,1)
C2 FN1=(F0+2000 N=(@?0x2000))+0 V0:(1,1,1)
C1 FN2=(F1=({path})+{inside:x} N=(@?{inside:#x}))+0 V0:(1,1,1)
C1 FN3=(F1+{area:x} N=(@?{area:#x}))+0 V0:(1,1,1)
",
        area = lib.area
    );
    dir.write("p.txt", dump.as_bytes());
    let output = run_resolving(&["p.txt", "--top=0"], &dir.0);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        stderr(&output),
        format!(
            "pyigprof-analyse: warning: /nonexistent/gone.so: cannot read it to name its functions (No such file or directory (os error 2)); 2 function(s) keep their @?0x… names
pyigprof-analyse: warning: {path}: 1 function start(s) of the profile fall inside other functions of this file, so it is not the file that was profiled; its 2 function(s) keep their @?0x… names
"
        )
    );
    let mut rows = top_rows(&output);
    rows.sort();
    let mut expected = [
        format!("@?{inside:#x}  ({path})"),
        format!("@?{:#x}  ({path})", lib.area),
        "@?0x1000  (/nonexistent/gone.so)".to_string(),
        "@?0x2000  (/nonexistent/gone.so)".to_string(),
    ];
    expected.sort();
    assert_eq!(rows, expected);
}
