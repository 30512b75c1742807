//! `--callgrind FILE`: the profile in the callgrind format
//! (<https://valgrind.org/docs/manual/cl-format.html>), for KCachegrind, QCachegrind and
//! `callgrind_annotate`.
//!
//! - `events:` two events per cost: for tick counters `Ticks` (CPU time in ticks of T
//!   seconds; the `event:` line says how long a tick is) and `Samples`; for the memory
//!   counters `Bytes` (the `event:` line says which bytes: `MEM_LIVE bytes live`, and
//!   whether they are estimates from sampling) and `Allocations` or `Blocks`; for the
//!   sampled event counters the counter itself (`PERF_PAGE_FAULTS`, a number of events;
//!   the `event:` line says which: `page faults`) and `Samples`; for other counters the
//!   counter itself and `Calls`.
//! - `positions: line`. A Python frame's position is the line it was running (the
//!   function's first line plus the node's offset, docs/dump-format.md); native frames
//!   have no line and are at line 0.
//! - One block per function: `fl=` (its file: the Python source, or the native object)
//!   and `fn=` (its name as reports show it; when two functions share a name, the
//!   frame form `name (file:line)` / `name [object]` keeps them apart), then its *self*
//!   cost per line, then its calls: `cfi=`/`cfn=` the callee, `calls=<samples> <callee's
//!   first line>` and the caller's line with the *inclusive* cost of the callee's
//!   subtrees called from there. Calls are counted in samples: sampling does not see
//!   calls that took no sample.
//! - Names and files use callgrind's name compression: `(id) name` the first time,
//!   `(id)` after.
//!
//! The self costs add up to the `totals:` line, the counter's total.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

use super::{capitalized, Measure, Options, Unit};
use crate::error::Error;
use crate::profile::{FunctionId, Node, Profile, Values};
use crate::symbol::Label;

/// An amount and the number of samples (or calls) it is made of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// In the counter's unit (ticks for `PERF_TICKS`).
    pub amount: i64,
    /// Samples (or allocations, blocks for memory counters; samples for event counters).
    pub count: i64,
}

impl Cost {
    fn add(&mut self, amount: i64, count: i64) {
        self.amount = self.amount.saturating_add(amount);
        self.count = self.count.saturating_add(count);
    }
}

/// A call from one line of a function to another function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CallSite {
    /// The caller's line (0 for native code).
    pub line: i64,
    /// The callee (index into [`Callgrind::functions`]).
    pub callee: usize,
}

/// One function of the file.
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    /// Its name in the file (unique in the file).
    pub name: String,
    /// Its file: Python source or native object.
    pub file: String,
    /// Its first line for Python code, 0 for native code.
    pub first_line: i64,
    /// The self cost per line.
    pub lines: BTreeMap<i64, Cost>,
    /// The inclusive cost of its calls, per call site.
    pub calls: BTreeMap<CallSite, Cost>,
}

/// The computed file.
#[derive(Debug, Clone, PartialEq)]
pub struct Callgrind {
    /// The counter and its total.
    pub measure: Measure,
    /// The profiled command lines and pids (`cmd:`, `pid:`), one per distinct program.
    pub programs: Vec<(String, u64)>,
    /// The functions with a cost, in the order of the call tree.
    pub functions: Vec<Function>,
}

/// The line of `node` for callgrind: the executed line for Python code, 0 for native.
fn line(profile: &Profile, node: &Node) -> i64 {
    let function = profile.function(node.function);
    if profile.is_python_code(function.file) {
        function.start.saturating_add(node.offset)
    } else {
        0
    }
}

/// Computes the callgrind file of `options.counter` in `profile` (the limit and order
/// do not apply).
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`. A profile
/// without any counter gives a file without costs.
pub fn compute(profile: &Profile, options: &Options) -> Result<Callgrind, Error> {
    let (measure, counter) = Measure::select(profile, &options.counter)?;
    let mut programs: Vec<(String, u64)> = Vec::new();
    for source in &profile.sources {
        let program = (source.program.clone(), source.pid);
        if !programs.contains(&program) {
            programs.push(program);
        }
    }
    let mut functions: Vec<Function> = Vec::new();
    let Some(counter) = counter else {
        return Ok(Callgrind {
            measure,
            programs,
            functions,
        });
    };
    let nodes = profile.nodes();
    let amounts = profile.subtree_amounts(counter);
    let counts = super::subtree_counts(profile, counter);
    let labels: Vec<Label> = Label::all(profile);
    let mut shared: HashMap<&str, usize> = HashMap::new();
    for label in &labels {
        *shared.entry(label.name.as_str()).or_default() += 1;
    }
    let mut index: Vec<Option<usize>> = vec![None; labels.len()];
    let mut slot = |functions: &mut Vec<Function>, id: FunctionId| -> usize {
        *index[id as usize].get_or_insert_with(|| {
            let label = &labels[id as usize];
            let function = profile.function(id);
            functions.push(Function {
                name: if shared[label.name.as_str()] > 1 {
                    label.frame()
                } else {
                    label.name.clone()
                },
                file: profile.file(function.file).to_string(),
                first_line: if label.python { function.start } else { 0 },
                lines: BTreeMap::new(),
                calls: BTreeMap::new(),
            });
            functions.len() - 1
        })
    };
    for (at, node) in nodes.iter().enumerate() {
        if amounts[at] == 0 && counts[at] == 0 {
            continue;
        }
        let own: Values = node.value(counter);
        let function = slot(&mut functions, node.function);
        if own.amount != 0 || own.count != 0 {
            functions[function]
                .lines
                .entry(line(profile, node))
                .or_default()
                .add(own.amount, own.count);
        }
        if let Some(parent) = node.parent {
            let parent = &nodes[parent as usize];
            let caller = slot(&mut functions, parent.function);
            let site = CallSite {
                line: line(profile, parent),
                callee: function,
            };
            functions[caller]
                .calls
                .entry(site)
                .or_default()
                .add(amounts[at], counts[at]);
        }
    }
    Ok(Callgrind {
        measure,
        programs,
        functions,
    })
}

/// Writes `file` in the callgrind format (see the module documentation).
///
/// # Errors
/// Those of `out`.
pub fn write(file: &Callgrind, out: &mut dyn Write) -> io::Result<()> {
    let measure = &file.measure;
    writeln!(out, "# callgrind format")?;
    writeln!(out, "version: 1")?;
    writeln!(
        out,
        "creator: {} {}",
        crate::error::PROGRAM,
        env!("CARGO_PKG_VERSION")
    )?;
    for (program, pid) in &file.programs {
        writeln!(out, "pid: {pid}")?;
        writeln!(out, "cmd: {}", one_line(program))?;
    }
    writeln!(out, "part: 1")?;
    writeln!(out, "positions: line")?;
    let events = match measure.unit {
        Unit::Ticks => {
            writeln!(
                out,
                "event: Ticks : {} ticks of {:.3} ms",
                measure.counter,
                measure.tick_period * 1000.0
            )?;
            writeln!(out, "event: Samples : samples")?;
            "Ticks Samples".to_string()
        }
        Unit::Bytes => {
            let mut bytes = format!("{} bytes {}", measure.counter, measure.amount_words());
            bytes.truncate(bytes.trim_end().len());
            if let Some(sampling) = &measure.sampling {
                bytes = format!("{bytes}, {}", sampling.note());
            }
            writeln!(out, "event: Bytes : {bytes}")?;
            let noun = measure.count_noun();
            let event = capitalized(noun);
            writeln!(out, "event: {event} : {noun}")?;
            format!("Bytes {event}")
        }
        Unit::Events => {
            let words = super::events::event_words(&measure.counter)
                .unwrap_or_else(|| measure.counter.clone());
            writeln!(out, "event: {} : {words}", measure.counter)?;
            writeln!(out, "event: Samples : samples")?;
            format!("{} Samples", measure.counter)
        }
        Unit::Amount => {
            writeln!(out, "event: Calls : calls")?;
            format!("{} Calls", measure.counter)
        }
    };
    writeln!(out, "events: {events}")?;
    let total = measure.total;
    writeln!(out, "summary: {} {}", total.amount, total.count)?;
    // Name compression: ids from 1, per kind.
    let mut files: HashMap<String, usize> = HashMap::new();
    let mut named: Vec<bool> = vec![false; file.functions.len()];
    let mut file_ref = |out: &mut dyn Write, key: &str, path: &str| -> io::Result<()> {
        let next = files.len() + 1;
        match files.get(path) {
            Some(id) => writeln!(out, "{key}=({id})"),
            None => {
                files.insert(path.to_string(), next);
                writeln!(out, "{key}=({next}) {}", one_line(path))
            }
        }
    };
    let mut function_ref = |out: &mut dyn Write, key: &str, index: usize| -> io::Result<()> {
        let id = index + 1;
        if std::mem::replace(&mut named[index], true) {
            writeln!(out, "{key}=({id})")
        } else {
            writeln!(
                out,
                "{key}=({id}) {}",
                one_line(&file.functions[index].name)
            )
        }
    };
    for (index, function) in file.functions.iter().enumerate() {
        writeln!(out)?;
        file_ref(out, "fl", &function.file)?;
        function_ref(out, "fn", index)?;
        for (line, cost) in &function.lines {
            writeln!(out, "{line} {} {}", cost.amount, cost.count)?;
        }
        for (site, cost) in &function.calls {
            let callee = &file.functions[site.callee];
            file_ref(out, "cfi", &callee.file)?;
            function_ref(out, "cfn", site.callee)?;
            writeln!(out, "calls={} {}", cost.count, callee.first_line)?;
            writeln!(out, "{} {} {}", site.line, cost.amount, cost.count)?;
        }
    }
    writeln!(out)?;
    writeln!(out, "totals: {} {}", total.amount, total.count)
}

/// `text` without line breaks (they would end a callgrind line).
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], "?")
}

#[cfg(test)]
mod tests {
    use super::super::testing::load;
    use super::*;

    const RECURSIVE: &[u8] = include_bytes!("../../tests/data/recursive-hex.txt");

    fn text(profile: &Profile) -> String {
        let file = compute(profile, &Options::default()).unwrap();
        let mut out = Vec::new();
        write(&file, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn recursive_dump() {
        let text = text(&load("rec.txt", RECURSIVE));
        let body = text.split_once("summary: 24 13\n").unwrap().1;
        // By hand (ticks, samples): fib (first line 10) runs line 12 (offset 2: 3 + 4
        // ticks, 2 + 3 samples) and line 13 (offset 3: 1, 1); it calls fib from line 12
        // (the 1 + 4 + 8 ticks below the outermost fib) and from line 13 (4 + 8), and
        // deflate_slow from line 12 (8). <module> calls fib from its line 5.
        assert_eq!(
            body,
            "
fl=(1) /usr/lib/libc.so.6
fn=(1) __libc_start_main
cfi=(2) /work/rec.py
cfn=(2) <module>
calls=12 1
0 20 12

fl=(2)
fn=(2)
cfi=(2)
cfn=(3) fib
calls=10 10
5 16 10
cfi=(1)
cfn=(5) foo::bar()
calls=2 0
5 4 2

fl=(2)
fn=(3)
12 7 5
13 1 1
cfi=(2)
cfn=(3)
calls=8 10
12 13 8
cfi=(3) /usr/lib/libz.so.1
cfn=(4) deflate_slow
calls=4 0
12 8 4
cfi=(2)
cfn=(3)
calls=7 10
13 12 7

fl=(3)
fn=(4)
0 8 4

fl=(1)
fn=(5)
0 4 2

fl=(4) /work/target/app
fn=(6) std::rt::lang_start
cfi=(3)
cfn=(7) deflate
calls=1 0
0 4 1

fl=(3)
fn=(7)
0 4 1

totals: 24 13
"
        );
        assert!(text.starts_with("# callgrind format\nversion: 1\ncreator: pyigprof-analyse "));
        assert!(text.contains(
            "pid: 1234\ncmd: python3 rec.py\npart: 1\npositions: line\nevent: Ticks : PERF_TICKS ticks of 4.000 ms\nevent: Samples : samples\nevents: Ticks Samples\n"
        ));
    }
}
