//! The in-memory profile: one merged call tree (the IgProf *trace tree*) plus the tables
//! of files, functions and counters it refers to.
//!
//! Everything is stored once per distinct item, so memory is proportional to the number
//! of distinct call-tree nodes and functions, never to the size of the dump files.
//! Several dumps (and the per-thread trees inside one dump) are merged: two nodes with
//! the same parent, the same function and the same offset are one node whose counter
//! values are summed. See docs/dump-format.md and IgProf doc/dump-format.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::symbol::{is_python_code_name, is_python_file};
use pyigprof_pprof::plural;

/// Index of a node in [`Profile::nodes`].
pub type NodeId = u32;
/// Index of a function in [`Profile::functions`].
pub type FunctionId = u32;
/// Index of a file (ELF object or Python source) in [`Profile::files`].
pub type FileId = u32;
/// Index of a counter name in [`Profile::counters`].
pub type CounterId = u32;

/// One input dump, as described by its `P=(...)` header line.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// The path given on the command line.
    pub path: String,
    /// The profiled command line (`N=` of the header), unescaped.
    pub program: String,
    /// The profiled process id (`ID=` of the header).
    pub pid: u64,
    /// The tick period `T`, in seconds per tick: seconds = ticks × `tick_period`.
    pub tick_period: f64,
    /// Whether the dump uses the `HEX` variant (integers in hexadecimal) rather than the
    /// older decimal one.
    pub hex: bool,
    /// pyigprof's statistics about the run (docs/dump-format.md, "The profiler's
    /// statistics"): `(<section>.<key>, <value>)` pairs such as `("stats.samples",
    /// "775")`, in the order written; empty for IgProf's dumps.
    pub statistics: Vec<(String, String)>,
    /// When the dump ends before the call tree its statistics announce (`#pyigprof tree
    /// lines=… samples=…`, docs/dump-format.md), or right after its header: what was read
    /// and what was announced. `None` for a whole dump, and for dumps with a call tree
    /// that announce nothing (IgProf's, and pyigprof's before November 2026).
    pub cut_short: Option<CutShort>,
}

impl Source {
    /// The statistic `key` (`<section>.<key>`, as in [`Source::statistics`]), as written;
    /// `None` when the dump has none of that name.
    pub fn statistic(&self, key: &str) -> Option<&str> {
        self.statistics
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

/// A dump that ends before its end: before the call tree it announces (its writer
/// stopped after a line boundary: a full disk, a process killed while writing), in the
/// middle of its last line, or where its gzip stream stops (a copy cut short).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutShort {
    /// Call-tree lines read (the statistics nodes not counted), whole lines only.
    pub lines: u64,
    /// Samples read: the counts of the counter the profile was sampled on
    /// (`sampling.counter`, `PERF_TICKS` when unnamed).
    pub samples: i64,
    /// What the statistics announce (`tree.lines`, `tree.samples`); `None` for a dump
    /// that announces nothing (IgProf's) or ends before its statistics.
    pub announced: Option<(u64, i64)>,
    /// Where the file stops: at a line boundary, or in the middle of a line or of its
    /// gzip stream.
    pub ending: Ending,
}

/// Where a dump that is [`CutShort`] stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// After a whole line.
    LineBoundary,
    /// In the middle of its last line, which is left out (it lacks its newline and does
    /// not follow the format).
    MidLine,
    /// Where its gzip stream stops before the stream's end (no checksum): what
    /// decompresses is read up to its last whole line.
    Gzip,
}

impl std::fmt::Display for CutShort {
    /// `35 of the 1312 call-tree lines its statistics announce, 4 of 3047 samples`,
    /// `read 35 call-tree lines before the cut`, or `nothing after its header`, then
    /// where it stops unless at a line boundary (`; its gzip stream stops in the middle`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.announced {
            Some((lines, samples)) => write!(
                f,
                "read {} of the {lines} {} its statistics announce, {} of {samples} {}",
                self.lines,
                plural(lines, "call-tree line"),
                self.samples,
                plural(samples, "sample")
            )?,
            None if self.lines > 0 => write!(
                f,
                "read {} {} before the cut",
                self.lines,
                plural(self.lines, "call-tree line")
            )?,
            None => write!(
                f,
                "nothing after its header, neither statistics nor call tree"
            )?,
        }
        match self.ending {
            Ending::LineBoundary => Ok(()),
            Ending::MidLine => write!(f, "; its last line stops in the middle (left out)"),
            Ending::Gzip => write!(
                f,
                "; its gzip stream stops in the middle (read up to the last whole line)"
            ),
        }
    }
}

/// A function: one `FN` of a dump. Functions are deduplicated by (name, file) across
/// all dumps, so the same function reached at several offsets or from several call
/// paths is one [`FunctionId`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// The name as written in the dump (`N=`), unescaped: a possibly mangled symbol,
    /// `@?0x<address>` for native code without a symbol, or a Python qualified name.
    pub name: String,
    /// The file the function belongs to.
    pub file: FileId,
    /// The number after the file (`F<fid>+<start>`): the function's ELF virtual address
    /// for native code, its first line (`co_firstlineno`) for Python code. The value of
    /// the first definition seen.
    pub start: i64,
    /// Where the function's code starts in its source, `file:line`, for native functions
    /// whose name was found by [`crate::resolve`] in DWARF debug information; `None`
    /// otherwise (Python functions are located by `file` and `start`).
    pub source: Option<String>,
}

/// The values of one counter: `V<cid>:(<count>,<amount>,<peak>)`.
///
/// For `PERF_TICKS`, `count` is the number of samples (signals) and `amount` the CPU
/// time they stand for, in ticks of [`Source::tick_period`] seconds. For the memory
/// counters (`MEM_*`, [`crate::report::memory`]), `count` is a number of allocations or
/// blocks and `amount` a number of bytes. For the sampled event counters
/// (`PERF_PAGE_FAULTS`, …, [`crate::report::events`]), `count` is a number of samples,
/// `amount` the number of events they stand for and `peak` the same as `amount`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Values {
    /// Number of events (samples, calls).
    pub count: i64,
    /// Sum of their amounts (ticks, bytes).
    pub amount: i64,
    /// The largest value seen (kept as a maximum when merging).
    pub peak: i64,
}

impl Values {
    /// Adds `other` into `self`: counts and amounts are summed (saturating), peaks are
    /// the maximum of both.
    pub fn merge(&mut self, other: Values) {
        self.count = self.count.saturating_add(other.count);
        self.amount = self.amount.saturating_add(other.amount);
        self.peak = self.peak.max(other.peak);
    }

    /// [`Values::merge`] for a counter whose amounts combine as `combine` says: summed,
    /// or (a [`Combine::Maximum`] counter such as `MEM_MAX`) the larger one kept.
    pub fn merge_as(&mut self, other: Values, combine: Combine) {
        let amount = self.amount;
        self.merge(other);
        if combine == Combine::Maximum {
            self.amount = amount.max(other.amount);
        }
    }
}

/// How the amounts of a counter add up over a subtree or a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// Summed: ticks, bytes allocated, bytes live.
    Sum,
    /// The largest one: a counter whose name ends in `_MAX` (IgProf's `MEM_MAX`, the
    /// largest single allocation), as IgProf's analyser combines it (`setKey`: `isMax`).
    /// Counts (calls) are still summed.
    Maximum,
}

impl Combine {
    /// How counter `name` combines.
    pub fn of(name: &str) -> Combine {
        if name.ends_with("_MAX") {
            Combine::Maximum
        } else {
            Combine::Sum
        }
    }

    /// `a` and `b` combined.
    pub fn apply(self, a: i64, b: i64) -> i64 {
        match self {
            Combine::Sum => a.saturating_add(b),
            Combine::Maximum => a.max(b),
        }
    }
}

/// One node of the merged call tree: a function at an offset, called from `parent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The caller, `None` for an outermost frame (depth 1 in the dump). A parent always
    /// has a smaller index than its children.
    pub parent: Option<NodeId>,
    /// The function this frame is in.
    pub function: FunctionId,
    /// The offset from the function's start: bytes for native frames, lines for Python
    /// frames (docs/dump-format.md, "What a function is").
    pub offset: i64,
    /// The node's *self* values per counter (at most one entry per counter; empty for a
    /// node without samples of its own).
    pub values: Vec<(CounterId, Values)>,
}

impl Node {
    /// The node's self values for `counter`, zero if it has none.
    pub fn value(&self, counter: CounterId) -> Values {
        self.values
            .iter()
            .find(|(id, _)| *id == counter)
            .map(|(_, values)| *values)
            .unwrap_or_default()
    }
}

/// A table is full: more than `u32::MAX` items of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityError;

/// A merged profile: the call tree of all the dumps read into it and its tables.
#[derive(Debug, Default, Clone)]
pub struct Profile {
    /// The dumps read, in the order they were read.
    pub sources: Vec<Source>,
    /// How many call-tree nodes of the dumps a view left out, their values merged into
    /// their nearest shown ancestor ([`crate::view`]); 0 for a profile as read.
    pub hidden_nodes: usize,
    /// Whether the nodes' amounts are the dumps' peaks (the third value, IgProf's
    /// `--value peak`: [`crate::transform::Value::Peak`]) rather than their amounts;
    /// false for a profile as read.
    pub peaks: bool,
    files: Vec<String>,
    file_index: HashMap<String, FileId>,
    /// Per file: whether its functions are Python code (see [`Profile::is_python_code`]).
    python_files: Vec<bool>,
    functions: Vec<Function>,
    function_index: HashMap<(String, FileId), FunctionId>,
    counters: Vec<String>,
    counter_index: HashMap<String, CounterId>,
    nodes: Vec<Node>,
    child_index: HashMap<(Option<NodeId>, FunctionId, i64), NodeId>,
}

/// `path` with its `.` components, empty components (`//`) and each `..` with the
/// component before it left out, as the path reads without following links:
/// `/x/numpy/_core/../../numpy.libs/a.so` is `/x/numpy.libs/a.so`. The filesystem is not
/// looked at (profiles are read on other machines than the one profiled). A `..` at the
/// start of a relative path stays, one at the root goes (`/..` is `/`). Pseudo-files
/// (`<frozen site>`, `[pyigprof]`) and paths without such components are unchanged.
pub fn lexical_path(path: &str) -> Cow<'_, str> {
    if path.starts_with('<') || path.starts_with('[') {
        return Cow::Borrowed(path);
    }
    let plain = !path.split('/').any(|c| c == "." || c == "..") && !path.contains("//");
    if plain {
        return Cow::Borrowed(path);
    }
    let absolute = path.starts_with('/');
    let mut kept: Vec<&str> = Vec::new();
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => match kept.last() {
                Some(&last) if last != ".." => {
                    kept.pop();
                }
                _ if absolute => {}
                _ => kept.push(".."),
            },
            component => kept.push(component),
        }
    }
    let joined = kept.join("/");
    Cow::Owned(match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    })
}

fn next_id(len: usize) -> Result<u32, CapacityError> {
    u32::try_from(len).map_err(|_| CapacityError)
}

/// The id of `name` in a table of names (`names`, and `index` from name to id), adding
/// it if new.
fn intern_name(
    names: &mut Vec<String>,
    index: &mut HashMap<String, u32>,
    name: &str,
) -> Result<u32, CapacityError> {
    if let Some(&id) = index.get(name) {
        return Ok(id);
    }
    let id = next_id(names.len())?;
    names.push(name.to_string());
    index.insert(name.to_string(), id);
    Ok(id)
}

impl Profile {
    /// An empty profile.
    pub fn new() -> Self {
        Self::default()
    }

    /// The file paths (unescaped), indexed by [`FileId`].
    pub fn files(&self) -> &[String] {
        &self.files
    }

    /// The functions, indexed by [`FunctionId`].
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The counter names (e.g. `PERF_TICKS`), indexed by [`CounterId`].
    pub fn counters(&self) -> &[String] {
        &self.counters
    }

    /// The call-tree nodes, indexed by [`NodeId`]; parents come before their children.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The path of file `id`.
    ///
    /// # Panics
    /// If `id` was not returned by this profile.
    pub fn file(&self, id: FileId) -> &str {
        &self.files[id as usize]
    }

    /// Function `id`.
    ///
    /// # Panics
    /// If `id` was not returned by this profile.
    pub fn function(&self, id: FunctionId) -> &Function {
        &self.functions[id as usize]
    }

    /// The id of the counter called `name` (e.g. `PERF_TICKS`), if any dump defined it.
    pub fn counter_id(&self, name: &str) -> Option<CounterId> {
        self.counter_index.get(name).copied()
    }

    /// Whether the functions of file `id` are Python code, so that their start and
    /// offsets are lines: its name says so ([`is_python_file`]) or one of its functions
    /// has a name only Python code has ([`is_python_code_name`], e.g. `<module>` of a
    /// script without an extension).
    ///
    /// # Panics
    /// If `id` was not returned by this profile.
    pub fn is_python_code(&self, id: FileId) -> bool {
        self.python_files[id as usize]
    }

    /// The id of file `path`, adding it if new. The path is stored in its
    /// [`lexical_path`] form, so that `/x/numpy/_core/../../numpy.libs/libz.so` and
    /// `/x/numpy.libs/libz.so` are one file, shown the short way in every report.
    pub fn intern_file(&mut self, path: &str) -> Result<FileId, CapacityError> {
        let path = lexical_path(path);
        let path = path.as_ref();
        let id = intern_name(&mut self.files, &mut self.file_index, path)?;
        if id as usize == self.python_files.len() {
            self.python_files.push(is_python_file(path));
        }
        Ok(id)
    }

    /// Records whether the functions of file `id` are Python code, overriding what its
    /// name and functions said (for a view that copies another profile's files).
    ///
    /// # Panics
    /// If `id` was not returned by this profile.
    pub fn set_python_code(&mut self, id: FileId, python: bool) {
        self.python_files[id as usize] = python;
    }

    /// The id of function (`name`, `file`), adding it with `start` if new; an existing
    /// function keeps the start it was first given.
    ///
    /// # Panics
    /// If `file` was not returned by this profile.
    pub fn intern_function(
        &mut self,
        name: &str,
        file: FileId,
        start: i64,
    ) -> Result<FunctionId, CapacityError> {
        let key = (name.to_string(), file);
        if let Some(&id) = self.function_index.get(&key) {
            return Ok(id);
        }
        let id = next_id(self.functions.len())?;
        if is_python_code_name(name) {
            self.python_files[file as usize] = true;
        }
        self.functions.push(Function {
            name: name.to_string(),
            file,
            start,
            source: None,
        });
        self.function_index.insert(key, id);
        Ok(id)
    }

    /// Records where function `id` starts in its source (`file:line`, see
    /// [`Function::source`]).
    ///
    /// # Panics
    /// If `id` was not returned by this profile.
    pub fn set_source(&mut self, id: FunctionId, source: Option<String>) {
        self.functions[id as usize].source = source;
    }

    /// The id of counter `name`, adding it if new.
    pub fn intern_counter(&mut self, name: &str) -> Result<CounterId, CapacityError> {
        intern_name(&mut self.counters, &mut self.counter_index, name)
    }

    /// The child of `parent` (`None`: a root) for `function` at `offset`, created
    /// without values if there is none yet. This is where trees merge.
    pub fn child(
        &mut self,
        parent: Option<NodeId>,
        function: FunctionId,
        offset: i64,
    ) -> Result<NodeId, CapacityError> {
        let key = (parent, function, offset);
        if let Some(&id) = self.child_index.get(&key) {
            return Ok(id);
        }
        let id = next_id(self.nodes.len())?;
        self.nodes.push(Node {
            parent,
            function,
            offset,
            values: Vec::new(),
        });
        self.child_index.insert(key, id);
        Ok(id)
    }

    /// Adds `values` of `counter` to node `node`'s self values.
    ///
    /// # Panics
    /// If `node` was not returned by this profile.
    pub fn add_values(&mut self, node: NodeId, counter: CounterId, values: Values) {
        let combine = self.combine(counter);
        let slots = &mut self.nodes[node as usize].values;
        match slots.iter_mut().find(|(id, _)| *id == counter) {
            Some((_, slot)) => slot.merge_as(values, combine),
            None => slots.push((counter, values)),
        }
    }

    /// How the amounts of `counter` combine ([`Combine::of`] its name; summed for an id
    /// the profile does not have).
    pub fn combine(&self, counter: CounterId) -> Combine {
        self.counters
            .get(counter as usize)
            .map_or(Combine::Sum, |name| Combine::of(name))
    }

    /// `counter` over all nodes: the profile's total (for a [`Combine::Maximum`]
    /// counter, the largest amount; counts are summed).
    pub fn total(&self, counter: CounterId) -> Values {
        let combine = self.combine(counter);
        let mut total = Values::default();
        for node in &self.nodes {
            total.merge_as(node.value(counter), combine);
        }
        total
    }

    /// The cumulative (inclusive) amount of `counter` of every node: its self amount
    /// plus its descendants' (the largest of them for a [`Combine::Maximum`] counter),
    /// indexed by [`NodeId`].
    pub fn subtree_amounts(&self, counter: CounterId) -> Vec<i64> {
        let combine = self.combine(counter);
        let mut amounts: Vec<i64> = self
            .nodes
            .iter()
            .map(|node| node.value(counter).amount)
            .collect();
        // Children always have larger indices than their parents, so one backward pass
        // has added every child's whole subtree before its parent is added to.
        for index in (0..self.nodes.len()).rev() {
            if let Some(parent) = self.nodes[index].parent {
                let amount = amounts[index];
                let slot = &mut amounts[parent as usize];
                *slot = combine.apply(*slot, amount);
            }
        }
        amounts
    }

    /// The children of every node, for walks from the roots down.
    pub fn children(&self) -> Children {
        Children::new(&self.nodes)
    }
}

/// Children lists of all nodes in one flat array (compressed sparse rows).
#[derive(Debug, Clone)]
pub struct Children {
    /// `starts[n]..starts[n + 1]` is the range of node `n`'s children in `list`.
    starts: Vec<usize>,
    list: Vec<NodeId>,
    roots: Vec<NodeId>,
}

impl Children {
    fn new(nodes: &[Node]) -> Self {
        let mut starts = vec![0usize; nodes.len() + 1];
        for node in nodes {
            if let Some(parent) = node.parent {
                starts[parent as usize + 1] += 1;
            }
        }
        for index in 1..starts.len() {
            starts[index] += starts[index - 1];
        }
        let mut fill = starts.clone();
        let mut list = vec![0; starts[nodes.len()]];
        let mut roots = Vec::new();
        for (index, node) in nodes.iter().enumerate() {
            // Node counts fit in u32: Profile::child refuses more.
            let id = index as NodeId;
            match node.parent {
                Some(parent) => {
                    let slot = &mut fill[parent as usize];
                    list[*slot] = id;
                    *slot += 1;
                }
                None => roots.push(id),
            }
        }
        Children {
            starts,
            list,
            roots,
        }
    }

    /// The outermost nodes (depth 1).
    pub fn roots(&self) -> &[NodeId] {
        &self.roots
    }

    /// The children of `node`, in creation order.
    pub fn of(&self, node: NodeId) -> &[NodeId] {
        let index = node as usize;
        &self.list[self.starts[index]..self.starts[index + 1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticks(count: i64, amount: i64) -> Values {
        Values {
            count,
            amount,
            peak: amount,
        }
    }

    #[test]
    fn same_function_and_offset_under_same_parent_merge() {
        let mut profile = Profile::new();
        let file = profile.intern_file("/lib/libc.so.6").unwrap();
        let main = profile.intern_function("main", file, 0x10).unwrap();
        let work = profile.intern_function("work", file, 0x20).unwrap();
        let ticks_id = profile.intern_counter("PERF_TICKS").unwrap();
        let root = profile.child(None, main, 4).unwrap();
        let a = profile.child(Some(root), work, 1).unwrap();
        let b = profile.child(Some(root), work, 1).unwrap();
        let c = profile.child(Some(root), work, 2).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(profile.child(None, main, 4).unwrap(), root);
        profile.add_values(a, ticks_id, ticks(1, 2));
        profile.add_values(b, ticks_id, ticks(3, 5));
        profile.add_values(c, ticks_id, ticks(1, 1));
        assert_eq!(
            profile.nodes()[a as usize].value(ticks_id),
            Values {
                count: 4,
                amount: 7,
                peak: 5
            }
        );
        assert_eq!(
            profile.total(ticks_id),
            Values {
                count: 5,
                amount: 8,
                peak: 5
            }
        );
        assert_eq!(profile.subtree_amounts(ticks_id), vec![8, 7, 1]);
        let children = profile.children();
        assert_eq!(children.roots(), &[root]);
        assert_eq!(children.of(root), &[a, c]);
        assert!(children.of(a).is_empty());
    }

    #[test]
    fn functions_are_deduplicated_by_name_and_file() {
        let mut profile = Profile::new();
        let x = profile.intern_file("x.py").unwrap();
        let y = profile.intern_file("y.py").unwrap();
        assert_eq!(profile.intern_file("x.py").unwrap(), x);
        let f = profile.intern_function("f", x, 3).unwrap();
        assert_eq!(profile.intern_function("f", x, 9).unwrap(), f);
        assert_eq!(profile.function(f).start, 3);
        assert_ne!(profile.intern_function("f", y, 3).unwrap(), f);
        assert_ne!(profile.intern_function("g", x, 3).unwrap(), f);
        assert_eq!(profile.functions().len(), 3);
    }

    #[test]
    fn paths_are_lexically_normal() {
        let normal = |path: &str| lexical_path(path).into_owned();
        assert_eq!(
            normal(
                "/x/site-packages/numpy/_core/../../numpy.libs/libscipy_openblas64_-ff651d7f.so"
            ),
            "/x/site-packages/numpy.libs/libscipy_openblas64_-ff651d7f.so"
        );
        assert_eq!(
            normal("/usr/lib/./x86_64-linux-gnu//libz.so.1"),
            "/usr/lib/x86_64-linux-gnu/libz.so.1"
        );
        assert_eq!(normal("/../lib/libc.so.6"), "/lib/libc.so.6");
        assert_eq!(normal("/a/b/.."), "/a");
        assert_eq!(normal("/.."), "/");
        assert_eq!(normal("./x.py"), "x.py");
        assert_eq!(normal("../../lib/x.py"), "../../lib/x.py");
        assert_eq!(normal("a/../../x.py"), "../x.py");
        assert_eq!(normal("a/.."), ".");
        // Names with dots that are not components, and pseudo-files, are left alone.
        for path in [
            "/lib/libpython3.11.so.1.0",
            "/x/..hidden/.a.so",
            "x.py",
            "..",
            "<frozen importlib._bootstrap>",
            "[pyigprof]",
            "",
        ] {
            assert_eq!(normal(path), path);
        }
    }

    #[test]
    fn files_are_interned_by_their_normal_path() {
        let mut profile = Profile::new();
        let long = profile
            .intern_file("/x/numpy/_core/../../numpy.libs/libopenblas.so")
            .unwrap();
        let short = profile.intern_file("/x/numpy.libs/libopenblas.so").unwrap();
        assert_eq!(long, short);
        assert_eq!(profile.file(long), "/x/numpy.libs/libopenblas.so");
        let script = profile.intern_file("/work/./app/../app.py").unwrap();
        assert_eq!(profile.file(script), "/work/app.py");
        assert!(profile.is_python_code(script));
    }
}
