//! Writes a large, realistic pyigprof dump for the analyser benchmark
//! (bench/analyse/run.sh; docs/dump-format.md for the format).
//!
//! ```text
//! cargo run --release -p pyigprof-analyse --example gen_dump -- OUT SIZE_MB [STACKS] [SEED]
//! ```
//!
//! The profiled "program" has STACKS distinct call stacks (default 100000): native
//! start-up frames (`_start`, `__libc_start_main`, `Py_BytesMain`, …), then 4–40 Python
//! frames, each with 0–2 interpreter frames of libpython (`_PyEval_EvalFrameDefault`,
//! `PyObject_Vectorcall`, …) between them, and 0–3 frames of native libraries at the end
//! (libz, libcrypto, libc, some without symbol: `@?0x…`). Functions are drawn from pools
//! (5000 Python functions in 500 files, 2000 native symbols in 12 libraries) with a
//! skewed choice, and 97 % of the steps follow a path an earlier stack took, so stacks
//! share prefixes as real ones do. The dump holds one call tree
//! per thread, each the union of a random 30 % of the stacks, until the file reaches
//! SIZE_MB megabytes (10^6 bytes); the merged profile thus has at most one node per
//! distinct stack frame however large the file. A name ending in `.gz` is written
//! gzip-compressed (fast level). Prints the number of threads, lines and distinct nodes.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Skewed towards small values: the minimum of two draws.
    fn skewed(&mut self, n: u64) -> u64 {
        self.below(n).min(self.below(n))
    }
}

/// A function of the generated program.
struct Function {
    file: usize,
    start: u64,
    name: String,
}

/// One node of the universe of stacks: a function at an offset under a parent.
struct Node {
    function: u32,
    offset: u32,
    children: Vec<u32>,
    parent: u32,
}

const ROOT: u32 = u32::MAX;

struct Program {
    files: Vec<String>,
    functions: Vec<Function>,
    nodes: Vec<Node>,
    index: HashMap<(u32, u32, u32), u32>,
    roots: Vec<u32>,
    leaves: Vec<u32>,
}

impl Program {
    fn child(&mut self, parent: u32, function: u32, offset: u32) -> u32 {
        if let Some(&id) = self.index.get(&(parent, function, offset)) {
            return id;
        }
        let id = self.nodes.len() as u32;
        self.nodes.push(Node {
            function,
            offset,
            children: Vec::new(),
            parent,
        });
        self.index.insert((parent, function, offset), id);
        if parent == ROOT {
            self.roots.push(id);
        } else {
            self.nodes[parent as usize].children.push(id);
        }
        id
    }
}

fn program(stacks: usize, rng: &mut Rng) -> Program {
    let mut files = Vec::new();
    let mut functions = Vec::new();
    let libs = [
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/x86_64-linux-gnu/libcrypto.so.3",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/opt/app/lib/libengine.so",
        "/opt/venv/lib/python3.11/site-packages/numpy/core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so",
        "/opt/venv/lib/python3.11/site-packages/lxml/etree.cpython-311-x86_64-linux-gnu.so",
        "/usr/lib/x86_64-linux-gnu/libssl.so.3",
        "/usr/lib/x86_64-linux-gnu/libffi.so.8",
        "/usr/lib/x86_64-linux-gnu/libbz2.so.1.0",
        "/usr/lib/x86_64-linux-gnu/liblzma.so.5",
    ];
    for lib in libs {
        files.push(lib.to_string());
    }
    let python_lib = files.len();
    files.push("/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0".to_string());
    let python_exe = files.len();
    files.push("/root/.pyenv/versions/3.11.7/bin/python3.11".to_string());
    let first_source = files.len();
    for i in 0..500 {
        files.push(format!("/opt/app/src/package{}/module_{i}.py", i % 37));
    }
    // Native symbols: 2000 over the libraries, one in 8 without a name.
    for i in 0..2000u64 {
        let start = 0x1000 + i * 0x340;
        let name = match i % 8 {
            0 => format!("@?{start:#x}"),
            1 => format!("_ZN6engine7kernels{}7computeILi{}EEEvPKdm", i % 97, i % 5),
            _ => format!("native_function_{i}"),
        };
        functions.push(Function {
            file: (i as usize) % libs.len(),
            start,
            name,
        });
    }
    let interpreter = functions.len();
    for (i, name) in [
        "_PyEval_EvalFrameDefault",
        "PyObject_Vectorcall",
        "_PyFunction_Vectorcall",
        "cfunction_vectorcall_O",
        "method_vectorcall_FASTCALL",
        "slot_tp_call",
        "PyObject_Call",
        "_PyObject_MakeTpCall",
    ]
    .iter()
    .enumerate()
    {
        functions.push(Function {
            file: python_lib,
            start: 0x150000 + i as u64 * 0x2000,
            name: name.to_string(),
        });
    }
    let startup = functions.len();
    for (file, start, name) in [
        (python_exe, 0x1060, "_start"),
        (0, 0x27280, "__libc_start_main"),
        (0, 0x271d0, "__libc_start_call_main"),
        (python_exe, 0x1130, "main"),
        (python_lib, 0x2ba1d0, "Py_BytesMain"),
        (python_lib, 0x2b9a10, "Py_RunMain"),
        (python_lib, 0x2b1f40, "_PyRun_SimpleFileObject"),
    ] {
        functions.push(Function {
            file,
            start,
            name: name.to_string(),
        });
    }
    let first_python = functions.len();
    for i in 0..5000u64 {
        let file = first_source + (i as usize) % 500;
        let name = match i % 10 {
            0 => "<module>".to_string(),
            1 => format!("Handler{}.handle_request", i % 53),
            2 => format!("process.<locals>.step_{i}"),
            3 => "<genexpr>".to_string(),
            _ => format!("function_{i}"),
        };
        functions.push(Function {
            file,
            start: 1 + (i / 500) * 40 + i % 7,
            name,
        });
    }
    let python_count = functions.len() - first_python;

    let mut program = Program {
        files,
        functions,
        nodes: Vec::new(),
        index: HashMap::new(),
        roots: Vec::new(),
        leaves: Vec::new(),
    };
    for _ in 0..stacks {
        let mut node = ROOT;
        for step in 0..7 {
            node = program.child(node, (startup + step) as u32, 0x10 + step as u32 * 7);
        }
        let depth = 4 + rng.below(37);
        let mut python = 0;
        while python < depth {
            // Mostly down a path taken before (programs call the same things from the
            // same places), sometimes somewhere new.
            let children = &program.nodes[node as usize].children;
            if !children.is_empty() && rng.below(100) < 97 {
                let next = children[rng.skewed(children.len() as u64) as usize];
                python += u64::from(
                    program.functions[program.nodes[next as usize].function as usize].file
                        >= first_source,
                );
                node = next;
                continue;
            }
            for _ in 0..rng.below(3) {
                let f = interpreter + rng.skewed(8) as usize;
                node = program.child(node, f as u32, 0x20 + rng.below(4) as u32 * 0x31);
            }
            let f = first_python + rng.skewed(python_count as u64) as usize;
            node = program.child(node, f as u32, rng.skewed(30) as u32);
            python += 1;
        }
        for _ in 0..rng.below(4) {
            let f = rng.skewed(2000) as usize;
            node = program.child(node, f as u32, rng.below(0x300) as u32);
        }
        program.leaves.push(node);
    }
    program
}

fn escape(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        match byte {
            b'%' | b'(' | b')' | 0..=0x1f | 0x7f..=0xff => out.push_str(&format!("%{byte:02X}")),
            _ => out.push(byte as char),
        }
    }
    out
}

/// Counts what goes through it.
struct Counted<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let count = self.inner.write(buf)?;
        self.bytes += count as u64;
        Ok(count)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn write_dump(
    program: &Program,
    target: u64,
    rng: &mut Rng,
    out: &mut impl Write,
) -> io::Result<(u64, u64, u64)> {
    let mut out = Counted {
        inner: BufWriter::with_capacity(1 << 20, out),
        bytes: 0,
    };
    writeln!(
        out,
        "P=(HEX ID=3039 N=(python3 /opt/app/serve.py --workers 8) T=0.004000)"
    )?;
    let mut function_defined = vec![false; program.functions.len()];
    let mut file_defined = vec![false; program.files.len()];
    let mut counter_defined = false;
    let mut marked = vec![0u32; program.nodes.len()];
    let (mut threads, mut lines) = (0u64, 1u64);
    while out.bytes < target {
        threads += 1;
        let mark = threads as u32;
        // The union of a random 30 % of the stacks, with all their callers.
        for &leaf in &program.leaves {
            if rng.below(10) < 3 {
                let mut node = leaf;
                while node != ROOT && marked[node as usize] != mark {
                    marked[node as usize] = mark;
                    node = program.nodes[node as usize].parent;
                }
            }
        }
        let mut stack: Vec<(u32, u32)> = program
            .roots
            .iter()
            .rev()
            .filter(|&&root| marked[root as usize] == mark)
            .map(|&root| (root, 1))
            .collect();
        while let Some((id, depth)) = stack.pop() {
            let node = &program.nodes[id as usize];
            let f = node.function as usize;
            let function = &program.functions[f];
            write!(out, "C{depth:x} FN{f:x}")?;
            if !function_defined[f] {
                function_defined[f] = true;
                write!(out, "=(F{:x}", function.file)?;
                if !file_defined[function.file] {
                    file_defined[function.file] = true;
                    write!(out, "=({})", escape(&program.files[function.file]))?;
                }
                write!(out, "+{:x} N=({}))", function.start, escape(&function.name))?;
            }
            write!(out, "+{:x}", node.offset)?;
            let leaf = node.children.is_empty();
            if leaf || rng.below(10) == 0 {
                let samples = 1 + rng.skewed(20);
                let ticks = samples + u64::from(rng.below(8) == 0);
                if counter_defined {
                    write!(out, " V0:({samples:x},{ticks:x},{ticks:x})")?;
                } else {
                    counter_defined = true;
                    write!(out, " V0=(PERF_TICKS):({samples:x},{ticks:x},{ticks:x})")?;
                }
            }
            out.write_all(b"\n")?;
            lines += 1;
            for &child in node.children.iter().rev() {
                if marked[child as usize] == mark {
                    stack.push((child, depth + 1));
                }
            }
        }
    }
    writeln!(out, "#pyigprof stats threads={threads:x}")?;
    out.flush()?;
    Ok((threads, lines + 1, out.bytes))
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: gen_dump OUT SIZE_MB [STACKS] [SEED]");
        std::process::exit(2);
    }
    let out = &args[1];
    let size: u64 = args[2].parse().expect("SIZE_MB: a number of megabytes");
    let stacks: usize = args.get(3).map_or(100_000, |s| s.parse().expect("STACKS"));
    let seed: u64 = args.get(4).map_or(42, |s| s.parse().expect("SEED"));
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let program = program(stacks, &mut rng);
    let file = File::create(out)?;
    let (threads, lines, bytes) = if out.ends_with(".gz") {
        let mut encoder = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        let result = write_dump(&program, size * 1_000_000, &mut rng, &mut encoder)?;
        encoder.finish()?;
        result
    } else {
        let mut file = file;
        write_dump(&program, size * 1_000_000, &mut rng, &mut file)?
    };
    println!(
        "{out}: {bytes} bytes uncompressed, {lines} lines, {threads} thread trees; the program has {} distinct call-tree nodes, {} functions",
        program.nodes.len(),
        program.functions.len()
    );
    Ok(())
}
