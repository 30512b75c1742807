//! Naming `@?0x…` functions from the binaries on this machine (src/resolve.rs): a shared
//! library is built from C and C++ sources at test time, dumps that name its functions
//! only by address are written by hand, and the reports must show the functions' names
//! (demangled) and where their source starts. Then the same with the library stripped and
//! its symbols in a separate debug file found through `.gnu_debuglink` or, in a debug
//! directory the test chooses (`--debug-dir`), through its build-id. Functions that stay
//! unnamed get IgProf's `@{<object>+<offset>}` names, stable across address
//! randomisation; in IgProf's dumps of a fully stripped library or executable, the
//! addresses of one function (one FDE of `.eh_frame`) become one function, so that two
//! runs compare (`--diff`).
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
    /// The sizes of `mix` and `crunch` in bytes.
    mix_size: u64,
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
        mix_size: symbol("mix").size(),
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
            "   100.00     0.030   100.00     0.030  [43.9-100.0]  [43.9-100.0]             3            3  crunch  ({path}; {}/demo.c:7)\n",
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
    // their source: mix (static) gets IgProf's name, from its start.
    let output = run_resolving(&["p.txt", "--top=0"], &dir.0);
    assert_eq!(stderr(&output), "");
    assert_eq!(
        top_rows(&output),
        [
            format!("@{{libdemo.so+{}}}  ({path})", lib.mix),
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
            "pyigprof-analyse: warning: /nonexistent/gone.so: cannot read it to name its functions (No such file or directory (os error 2)); 2 function(s) stay unnamed: @{{gone.so+<offset>}}
pyigprof-analyse: warning: {path}: 1 function start(s) of the profile fall inside other functions of this file, so it is not the file that was profiled; its 2 function(s) stay unnamed: @{{libdemo.so+<offset>}}
"
        )
    );
    let mut rows = top_rows(&output);
    rows.sort();
    // They get IgProf's names: the start in decimal.
    let mut expected = [
        format!("@{{libdemo.so+{inside}}}  ({path})"),
        format!("@{{libdemo.so+{}}}  ({path})", lib.area),
        "@{gone.so+4096}  (/nonexistent/gone.so)".to_string(),
        "@{gone.so+8192}  (/nonexistent/gone.so)".to_string(),
    ];
    expected.sort();
    assert_eq!(rows, expected);
}

/// An IgProf dump (run-time addresses as names, `<start>` = address − `base`, one `FN`
/// per sampled address) of `object` with `samples` (offset of the address from the
/// object's first `PT_LOAD` − its file offset, i.e. IgProf's `<start>`; samples): the
/// first entry calls all the others.
fn igprof_dump(object: &Path, base: u64, samples: &[(u64, u64)]) -> String {
    let path = object.display();
    let mut text = String::from("P=(HEX ID=7 N=(app) T=0.010000)\n");
    for (index, &(start, count)) in samples.iter().enumerate() {
        let (depth, file, counter) = match index {
            0 => (1, format!("F0=({path})"), "=(PERF_TICKS)"),
            _ => (2, "F0".to_string(), ""),
        };
        text.push_str(&format!(
            "C{depth} FN{index:x}=({file}+{start:x} N=(@?{:#x}))+0 V0{counter}:({count:x},{count:x},{count:x})\n",
            base + start
        ));
    }
    text
}

/// `p_vaddr − p_offset` of the first `PT_LOAD` of the object at `path`: what IgProf's
/// `<start>` (address − load base) is relative to.
fn vm_base(path: &Path) -> u64 {
    use object::ObjectSegment;
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let segment = file.segments().next().unwrap();
    segment.address() - segment.file_range().0
}

#[test]
fn igprof_dumps_of_stripped_code_name_functions_by_offset() {
    if !have_tools("igprof_dumps_of_stripped_code_name_functions_by_offset") {
        return;
    }
    let dir = TempDir::new("resolve_igprof_stripped");
    let lib = build(&dir.0);
    // No .symtab, no debug file: mix is named by nothing but its FDE; crunch is in .dynsym.
    assert!(tool("strip", &["--strip-all", "libdemo.so"], &dir.0));
    assert_eq!(vm_base(&lib.path), 0);
    let path = lib.path.display();
    // crunch calls mix, sampled at two addresses inside it; the same run loaded at two
    // load bases.
    let samples = [
        (lib.crunch + 3, 1),
        (lib.mix + 1, 2),
        (lib.mix + lib.mix_size - 2, 3),
    ];
    let mut reports = Vec::new();
    for (name, base) in [("a.txt", 0x7f00_0000_0000u64), ("b.txt", 0x7fab_1234_5000)] {
        dir.write(name, igprof_dump(&lib.path, base, &samples).as_bytes());
        let output = run_resolving(&[name, "--top=0"], &dir.0);
        assert_eq!(stderr(&output), "");
        reports.push(top_rows(&output));
    }
    // One function for both addresses of mix (5 ticks), named after its start as IgProf's
    // analyser names it, the same whatever the load base.
    assert_eq!(
        reports[0],
        [
            format!("@{{libdemo.so+{}}}  ({path})", lib.mix),
            format!("crunch  ({path})"),
        ]
    );
    assert_eq!(reports[1], reports[0]);
    let output = run_resolving(&["a.txt", "--top=0"], &dir.0);
    assert!(
        stdout(&output).contains(&format!(
            "    83.33     0.050    83.33     0.050  [43.6-97.0]   [43.6-97.0]             5            5  @{{libdemo.so+{}}}  ({path})\n",
            lib.mix
        )),
        "{}",
        stdout(&output)
    );

    // --no-resolve leaves the names of the dump.
    let output = run_resolving(&["--no-resolve", "a.txt", "--top=0"], &dir.0);
    assert_eq!(stderr(&output), "");
    assert_eq!(
        top_rows(&output)[0],
        format!(
            "@?{:#x}  ({path})",
            0x7f00_0000_0000u64 + lib.mix + lib.mix_size - 2
        )
    );
}

/// A position-dependent executable: its first `PT_LOAD` is not at 0, so that IgProf's
/// offset (address − load base) is not the ELF virtual address; the names use IgProf's.
#[test]
fn igprof_names_of_an_executable_use_igprof_offsets() {
    if !have_tools("igprof_names_of_an_executable_use_igprof_offsets") {
        return;
    }
    let dir = TempDir::new("resolve_igprof_exe");
    std::fs::write(
        dir.0.join("prog.c"),
        "static __attribute__((noinline)) int spin(int x)
{
  int s = 0;
  for (int i = 0; i < x; i++) s += i * x;
  return s;
}
int main(int argc, char **argv) { (void)argv; return spin(argc * 1000) & 1; }
",
    )
    .unwrap();
    assert!(tool(
        "cc",
        &["-O1", "-fno-pie", "-no-pie", "prog.c", "-o", "prog"],
        &dir.0
    ));
    let prog = dir.0.join("prog");
    let data = std::fs::read(&prog).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let spin = file.symbols().find(|s| s.name() == Ok("spin")).unwrap();
    let (spin, size) = (spin.address(), spin.size());
    assert!(tool("strip", &["--strip-all", "prog"], &dir.0));
    let base = vm_base(&prog);
    assert_ne!(base, 0, "not a position-dependent executable");
    // Not relocated: the run-time address is the ELF one, and the load base the base.
    let offset = spin - base;
    let dump = igprof_dump(&prog, base, &[(offset + 1, 1), (offset + size - 1, 2)]);
    dir.write("p.txt", dump.as_bytes());
    let output = run_resolving(&["p.txt", "--top=0"], &dir.0);
    assert_eq!(stderr(&output), "");
    assert_eq!(
        top_rows(&output),
        [format!("@{{prog+{offset}}}  ({})", prog.display())]
    );
}

#[test]
fn unreadable_objects_get_igprof_names() {
    // No tools needed: nothing is read.
    let dir = TempDir::new("resolve_unreadable");
    // IgProf (run-time addresses), pyigprof (ELF addresses), code in no object (IgProf
    // writes no file name, and the address as start), the interpreter (kept @?0x… for
    // the Python view to hide), and a start of 0 (kept).
    let dump = "P=(HEX ID=1 N=(app) T=0.004000)
C1 FN0=(F0=(/nonexistent/prog)+1234 N=(@?0x55d0c0001234))+0 V0=(PERF_TICKS):(1,1,1)
C2 FN1=(F1=(/nonexistent/libgone.so.3)+29c240 N=(@?0x29c240))+0 V0:(1,1,1)
C2 FN2=(F2=()+7f0012345678 N=(@?0x7f0012345678))+0 V0:(1,1,1)
C2 FN3=(F3=(/nonexistent/libpython3.11.so.1.0)+1a2b N=(@?0x1a2b))+0 V0:(1,1,1)
C2 FN4=(F4=(/nonexistent/zero.so)+0 N=(@?0x7f0000000000))+0 V0:(1,1,1)
";
    dir.write("p.txt", dump.as_bytes());
    let output = run_resolving(&["p.txt", "--top=0", "--all-frames"], &dir.0);
    assert_eq!(output.status.code(), Some(0));
    let mut rows = top_rows(&output);
    rows.sort();
    assert_eq!(
        rows,
        [
            "@?0x1a2b  (/nonexistent/libpython3.11.so.1.0)",
            "@?0x7f0000000000  (/nonexistent/zero.so)",
            "@?0x7f0012345678{<dynamically-generated>}  ()",
            "@{libgone.so.3+2736704}  (/nonexistent/libgone.so.3)",
            "@{prog+4660}  (/nonexistent/prog)",
        ]
    );
    let warnings = stderr(&output);
    assert!(
        warnings.contains("/nonexistent/prog: cannot read it to name its functions (No such file or directory (os error 2)); 1 function(s) stay unnamed: @{prog+<offset>}\n"),
        "{warnings}"
    );
    assert!(
        warnings.contains("/nonexistent/libpython3.11.so.1.0: cannot read it to name its functions (No such file or directory (os error 2)); 1 function(s) stay unnamed: @?0x<address>\n"),
        "{warnings}"
    );
}

#[test]
fn diff_of_igprof_runs_with_other_load_bases_is_no_change() {
    if !have_tools("diff_of_igprof_runs_with_other_load_bases_is_no_change") {
        return;
    }
    let dir = TempDir::new("resolve_igprof_diff");
    let lib = build(&dir.0);
    assert!(tool("strip", &["--strip-all", "libdemo.so"], &dir.0));
    // Two runs of one program: about the same counts, at other addresses of the same
    // functions, in a library loaded elsewhere.
    let first = [
        (lib.crunch + 3, 400),
        (lib.mix + 1, 300),
        (lib.mix + 4, 300),
    ];
    let second = [
        (lib.crunch + 3, 410),
        (lib.mix + 1, 280),
        (lib.mix + lib.mix_size - 2, 310),
    ];
    dir.write(
        "base.txt",
        igprof_dump(&lib.path, 0x7f00_0000_0000, &first).as_bytes(),
    );
    dir.write(
        "new.txt",
        igprof_dump(&lib.path, 0x7fab_1234_5000, &second).as_bytes(),
    );
    let output = run_resolving(&["--diff", "base.txt", "new.txt", "--top=0"], &dir.0);
    assert_eq!(stderr(&output), "");
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    assert!(
        text.lines()
            .any(|line| line == "result: no significant change"),
        "{text}"
    );
    assert!(
        text.contains(&format!("@{{libdemo.so+{}}}", lib.mix)),
        "{text}"
    );
}

/// Hand-written assembly without CFI, with a symbol that stripping removes (hidden: not
/// in `.dynsym`), and C functions.
const ASM_SOURCE: &str = r#"
static __attribute__((noinline)) int before(int x)
{
  int s = 0;
  for (int i = 0; i < x; i++) s += i ^ x;
  return s;
}
__asm__(".text\n.p2align 4\n.globl blob\n.hidden blob\n.type blob,@function\nblob:\n"
        "  xorl %eax, %eax\n.rept 64\n  nop\n.endr\n  ret\n.size blob, .-blob\n");
int blob(void);
int entry(int x)
{
  return before(x) + blob();
}
"#;

#[test]
fn igprof_addresses_in_code_without_cfi_group_by_gap() {
    if !cfg!(target_arch = "x86_64") {
        println!("igprof_addresses_in_code_without_cfi_group_by_gap: skipped: x86-64 assembly");
        return;
    }
    if !have_tools("igprof_addresses_in_code_without_cfi_group_by_gap") {
        return;
    }
    let dir = TempDir::new("resolve_igprof_gap");
    std::fs::write(dir.0.join("gap.c"), ASM_SOURCE).unwrap();
    assert!(tool(
        "cc",
        &["-O1", "-fPIC", "-shared", "gap.c", "-o", "libgap.so"],
        &dir.0
    ));
    let lib = dir.0.join("libgap.so");
    let data = std::fs::read(&lib).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let address = |name: &str| {
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap()
            .address()
    };
    let (blob, before) = (address("blob"), address("before"));
    assert!(tool("strip", &["--strip-all", "libgap.so"], &dir.0));
    let path = lib.display();
    let mut reports = Vec::new();
    for base in [0x7f00_0000_0000u64, 0x7fab_1234_5000] {
        let dump = igprof_dump(
            &lib,
            base,
            &[(blob + 2, 1), (blob + 40, 2), (before + 1, 4)],
        );
        dir.write("p.txt", dump.as_bytes());
        let output = run_resolving(&["p.txt", "--top=0"], &dir.0);
        assert_eq!(stderr(&output), "");
        reports.push(top_rows(&output));
    }
    // before (an FDE) and the blob (a gap) are one function each, named by offset.
    let rows = &reports[0];
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0], format!("@{{libgap.so+{before}}}  ({path})"));
    let gap: u64 = rows[1]
        .strip_prefix("@{libgap.so+")
        .and_then(|rest| rest.strip_suffix(&format!("}}  ({path})")))
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("{rows:?}"));
    // The gap starts where the code before it that has CFI ends, at blob or before it
    // (alignment padding, GCC's crtstuff functions, which have no FDE either).
    assert!(
        gap <= blob && gap != before,
        "{gap:#x} {before:#x} {blob:#x}"
    );
    assert_eq!(reports[1], reports[0]);
}
