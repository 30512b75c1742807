//! Line numbers on real interpreters (unit tests of [`super`]): the profiler's line-table
//! decoder must give, for every instruction, the line CPython's own `PyCode_Addr2Line`
//! gives (what tracebacks show), on every interpreter present — each with its own table
//! format (co_lnotab, 3.10's co_linetable, 3.11+'s location table). A unit test rather
//! than one of the end-to-end suite's, which would then link this crate: cargo would build
//! `libpyigprof.so` for the tests (unwinding panics) over the one `cargo build --release`
//! made (aborting), and each would rebuild it after the other.

use super::line_for_offset;
use crate::capture::python::layout::{Layout, LineTable};
use crate::test_interpreters::{every_interpreter_for, plain_ok};

/// Compiles real standard-library modules and, for every code object, prints its line table
/// (hex), first line, the step between instruction offsets and PyCode_Addr2Line of each
/// offset (-1 = no line). Runs on 2.7 to 3.13.
const DUMP: &str = r#"
import binascii, ctypes, sys, types
addr2line = ctypes.pythonapi.PyCode_Addr2Line
addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
addr2line.restype = ctypes.c_int
def walk(co):
    yield co
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            for x in walk(c):
                yield x
step = 1 if sys.version_info[0] == 2 else 2
for name in ("os", "json.decoder", "inspect", "argparse", "textwrap"):
    mod = __import__(name, fromlist=["x"])
    path = mod.__file__
    if path.endswith(".pyc"):
        path = path[:-1]
    with open(path) as f:
        source = f.read()
    for co in walk(compile(source, path, "exec")):
        table = co.co_linetable if sys.version_info >= (3, 10) else co.co_lnotab
        lines = [addr2line(co, off) for off in range(0, len(co.co_code), step)]
        sys.stdout.write("%s %d %d %s\n" % (binascii.hexlify(table).decode("ascii") or "-", co.co_firstlineno, step,
                                          ",".join(str(l) for l in lines) or "-"))
"#;

fn format_of(version: (u32, u32)) -> LineTable {
    if version >= (3, 13) {
        LineTable::Locations
    } else {
        Layout::for_version(version.0 as u8, version.1 as u8)
            .expect("known version")
            .line_table
    }
}

fn unhex(text: &str) -> Vec<u8> {
    if text == "-" {
        return Vec::new();
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn lines_equal_pycode_addr2line_for_every_instruction_on_every_interpreter() {
    // Every interpreter in the fast tier too: a few seconds in all.
    let all = every_interpreter_for("line_tables", "interpreters", |_| true);
    assert!(!all.is_empty());
    for python in all {
        let out = plain_ok(&python, &["-c", DUMP]);
        let format = format_of(python.version);
        let (mut checked, mut codes) = (0usize, 0usize);
        for row in String::from_utf8(out.stdout).unwrap().lines() {
            let fields: Vec<&str> = row.split(' ').collect();
            let table = unhex(fields[0]);
            let first: i32 = fields[1].parse().unwrap();
            let step: u32 = fields[2].parse().unwrap();
            if fields[3] == "-" {
                continue;
            }
            codes += 1;
            for (i, expected) in fields[3].split(',').enumerate() {
                let expected: i32 = expected.parse().unwrap();
                let offset = i as u32 * step;
                let ours = line_for_offset(format, &table, first, offset).unwrap_or(-1);
                assert_eq!(
                    ours, expected,
                    "{}: offset {offset} of code at line {first}",
                    python.name
                );
                checked += 1;
            }
        }
        eprintln!(
            "{}: {checked} instruction offsets of {codes} code objects agree",
            python.name
        );
        assert!(
            checked > 10_000,
            "{}: only {checked} offsets checked",
            python.name
        );
    }
}
