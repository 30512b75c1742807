//! Writing the profile: every thread's trace tree merged into one tree of functions and
//! written in IgProf's text format (docs/dump-format.md; IgProf `doc/dump-format`, `HEX`
//! variant). Runs after sampling stopped (at exit), so it may allocate and read files.

use crate::capture::frames::{decode, Frame, Lock, WAITS};
use crate::capture::python::lines::line_for_offset;
use crate::capture::symbols::{name_at, save_names};
use crate::capture::unwind::copies;
use crate::capture::unwind::modules::{self, ObjectInfo};
use crate::sampler::Sampler;
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};

/// A function of the profile: where it is, where it starts, what it is called.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Function {
    /// The `F` file: an object's path or a Python source file.
    pub file: Vec<u8>,
    /// Function start inside the file: ELF virtual address, or Python first line.
    pub start: u64,
    /// The name: a symbol, a Python qualified name, `@?0x…`, or a marker.
    pub name: Vec<u8>,
}

/// A node of the merged tree.
pub(crate) struct OutNode {
    /// Its function: an index into [`Profile::functions`] (`u32::MAX` for the root).
    pub(crate) function: u32,
    /// Within the function: the line less its first line (Python), or bytes from its
    /// start (native).
    pub(crate) offset: u64,
    /// Its children's indices.
    pub(crate) children: Vec<u32>,
    /// Its own samples (signals), and their ticks (or events).
    pub(crate) samples: u64,
    pub(crate) ticks: u64,
    /// Its own memory counters.
    pub(crate) memory: Memory,
    /// Its own `LOCK_WAIT` and `LOCK_HOLD` ([`LOCK_COUNTERS`]): waits (holds) sampled
    /// and the ticks they stand for ([`crate::sources::locks`]).
    pub(crate) locks: [(u64, u64); 2],
}

impl OutNode {
    /// Adds a trace-tree node's counts (of one thread) to this merged node's own.
    fn count(&mut self, samples: u64, ticks: u64, memory: Memory, locks: [(u64, u64); 2]) {
        self.samples += samples;
        self.ticks += ticks;
        self.memory.add(memory);
        for (mine, theirs) in self.locks.iter_mut().zip(locks) {
            mine.0 += theirs.0;
            mine.1 += theirs.1;
        }
    }
}

/// The memory counters of a merged node, summed over threads (the largest allocation
/// kept): see [`crate::record::memory`]. Bytes, and estimated calls.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Memory {
    /// `MEM_TOTAL`: allocations, bytes.
    pub total: (u64, u64),
    /// `MEM_LIVE`: blocks, bytes, and the peak of bytes.
    pub live: (u64, u64, u64),
    /// `MEM_MAX`: the largest single allocation, bytes.
    pub max: u64,
    /// `MEM_LIVE_PEAK`: blocks and bytes live when the process's live bytes peaked.
    pub at_peak: (u64, u64),
}

impl Memory {
    fn of(index: u32) -> Memory {
        let Some(c) = crate::record::memory::counts_of(index) else {
            return Memory::default();
        };
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        Memory {
            total: (load(&c.total_calls), load(&c.total_bytes)),
            live: (load(&c.live_calls), load(&c.live_bytes), load(&c.live_peak)),
            max: load(&c.max_bytes),
            at_peak: c.at_peak(),
        }
    }

    fn add(&mut self, other: Memory) {
        self.total.0 += other.total.0;
        self.total.1 += other.total.1;
        self.live.0 += other.live.0;
        self.live.1 += other.live.1;
        self.live.2 += other.live.2;
        self.max = self.max.max(other.max);
        self.at_peak.0 += other.at_peak.0;
        self.at_peak.1 += other.at_peak.1;
    }

    fn is_empty(&self) -> bool {
        self.total.0 == 0 && self.total.1 == 0 && self.max == 0
    }
}

/// The counter of the lock profiler's waits ([`crate::sources::locks`]): per node, the
/// waits sampled there and the ticks of the period they stand for (time, as `PERF_TICKS`).
pub const LOCK_WAIT: &str = "LOCK_WAIT";

/// The lock profiler's counters, in [`crate::sources::locks::Counter`] order: waits, and
/// holds (from acquisition to release, recorded at the release).
pub const LOCK_COUNTERS: [&str; 2] = [LOCK_WAIT, "LOCK_HOLD"];

/// The merged profile, ready to be written.
pub struct Profile {
    /// The functions, referred to by index from the nodes.
    pub(crate) functions: Vec<Function>,
    /// The merged tree; the root (index 0) stands for no function.
    pub(crate) nodes: Vec<OutNode>,
    /// The functions that are Python code (their `start` is a first line).
    pub(crate) python: std::collections::HashSet<u32>,
    /// Tick period in nanoseconds.
    pub period_ns: u64,
    /// Process id.
    pub pid: u32,
    /// Program command line.
    pub program: Vec<u8>,
    /// The profiler's statistics, one `#pyigprof <section> key=value …` text each
    /// ([`crate::record::stats::Stats::lines`]), written after the call tree.
    pub statistics: Vec<String>,
    /// The counter the statistics define first, which readers take as the profile's
    /// default: the samples' counter, or `MEM_TOTAL` in a profile of allocations only.
    pub first_counter: &'static str,
    /// The counter the samples' ticks (or events) are written under: `PERF_TICKS`, or the
    /// perf event's (`PERF_PAGE_FAULTS`, …: [`crate::sources::Trigger::counter`]).
    pub counter: &'static str,
    /// What the run had cost when the profile was collected (also in `statistics`).
    pub cost: Cost,
}

/// Turns trace-tree keys into (function, offset) pairs, caching per key.
struct Resolver<'a> {
    sampler: &'a Sampler,
    objects: Vec<ObjectInfo>,
    functions: Vec<Function>,
    function_ids: HashMap<Function, u32>,
    by_key: HashMap<u64, (u32, u64)>,
    /// `/proc/self/maps`, read when the first address outside every object is met.
    maps: Option<String>,
    /// Path of this library, whose frames are not the program's ([`own_object_path`]).
    own: Option<Vec<u8>>,
    /// The functions that are Python code (from [`Frame::Python`] keys), by id.
    python: std::collections::HashSet<u32>,
}

/// The name of an asyncio task's frame: `<task NAME>` ([`crate::capture::python::tasks`]);
/// `<task>` for a name not stored.
fn task_frame_name(name: Option<&[u8]>) -> Vec<u8> {
    match name {
        Some(name) => [&b"<task "[..], name, b">"].concat(),
        None => b"<task>".to_vec(),
    }
}

/// The file of code outside every object ([`Resolver::anonymous`]).
const UNKNOWN_FILE: &[u8] = b"[unknown]";

/// The file of [`jit_function`].
pub const JIT_FILE: &[u8] = b"[jit]";

/// The one function that stands for machine code CPython's JIT compiled (3.13+ built with
/// `--enable-experimental-jit`, on with `PYTHON_JIT=1` where it is not by default: Debian's
/// 3.14 and 3.15): code in anonymous memory called by the evaluator, so by a Python frame
/// in a spliced stack ([`Profile::collect`]). One function, at offset 0, whatever the
/// address: the JIT's memory differs from run to run (and is freed before the profile is
/// written), and `--diff` matches functions by name. Its frame's caller is the Python
/// function whose trace runs; `pyigprof-analyse`'s Python view counts its time as that
/// function's own.
fn jit_function() -> Function {
    Function {
        file: JIT_FILE.to_vec(),
        start: 0,
        name: b"<jit>".to_vec(),
    }
}

impl<'a> Resolver<'a> {
    fn new(sampler: &'a Sampler) -> Self {
        Resolver {
            sampler,
            objects: modules::history(),
            functions: Vec::new(),
            function_ids: HashMap::new(),
            by_key: HashMap::new(),
            maps: None,
            own: own_object_path(),
            python: std::collections::HashSet::new(),
        }
    }

    /// Whether function `id` is code outside every object (`[unknown]`, [`Self::anonymous`]).
    fn is_anonymous(&self, id: u32) -> bool {
        self.functions[id as usize].file == UNKNOWN_FILE
    }

    fn intern(&mut self, f: Function) -> u32 {
        if let Some(&id) = self.function_ids.get(&f) {
            return id;
        }
        let id = self.functions.len() as u32;
        self.functions.push(f.clone());
        self.function_ids.insert(f, id);
        id
    }

    fn resolve(&mut self, key: u64) -> (u32, u64) {
        if let Some(&hit) = self.by_key.get(&key) {
            return hit;
        }
        let frame = decode(key);
        let (function, offset) = match frame {
            Frame::Native(pc) => self.native(pc),
            Frame::Python { record, instr } => self.python(record, instr),
            Frame::Marker(m) => (
                Function {
                    file: STATISTICS_FILE.to_vec(),
                    start: 0,
                    name: m.name().into(),
                },
                0,
            ),
            Frame::Task(name) => (
                Function {
                    file: STATISTICS_FILE.to_vec(),
                    start: 0,
                    name: task_frame_name(self.sampler.task_names.get(name)),
                },
                0,
            ),
            Frame::Lock(lock) => (
                Function {
                    file: STATISTICS_FILE.to_vec(),
                    start: 0,
                    name: self.lock_name(lock),
                },
                0,
            ),
        };
        let resolved = (self.intern(function), offset);
        if let Frame::Python { .. } = frame {
            self.python.insert(resolved.0);
        }
        self.by_key.insert(key, resolved);
        resolved
    }

    /// A lock frame's name: `<lock FILE:LINE>` for a Python lock (the file's last
    /// component, and its directory's for a package's `__init__.py`), `<lock first waited
    /// for at FILE:LINE>` for one named by its first waiter, `<mutex OBJECT+0xOFFSET>` for
    /// a native lock at a static address, `<mutex first locked in FUNCTION>` for one
    /// elsewhere.
    fn lock_name(&mut self, lock: Lock) -> Vec<u8> {
        let name = match lock {
            Lock::Python { record, instr } => {
                format!("<lock {}>", self.python_line(record, instr))
            }
            Lock::PythonWaiter { record, instr } => {
                format!(
                    "<lock first waited for at {}>",
                    self.python_line(record, instr)
                )
            }
            Lock::Static(address) => match self.object_at(address) {
                Some(index) => {
                    let object = &self.objects[index];
                    let file = object.path.file_name().unwrap_or(object.path.as_os_str());
                    format!(
                        "<mutex {}+{:#x}>",
                        file.to_string_lossy(),
                        address - object.bias
                    )
                }
                None => format!("<mutex {address:#x}>"),
            },
            Lock::FirstWaiter(pc) => {
                let (function, _) = self.native(pc);
                format!(
                    "<mutex first locked in {}>",
                    String::from_utf8_lossy(&function.name)
                )
            }
        };
        name.into_bytes()
    }

    /// `FILE:LINE` of a Python frame (code record `record`, instruction `instr`): the
    /// file's last component, and its directory's for a package's `__init__.py`.
    fn python_line(&mut self, record: u32, instr: Option<u32>) -> String {
        let (function, offset) = self.python(record, instr);
        let path = function.file.as_slice();
        let mut parts = path.rsplit(|&b| b == b'/');
        let last = parts.next().unwrap_or(path);
        let file = match parts.next() {
            Some(dir) if last == b"__init__.py" => [dir, b"/", last].concat(),
            _ => last.to_vec(),
        };
        format!(
            "{}:{}",
            String::from_utf8_lossy(&file),
            function.start + offset
        )
    }

    /// The index of the newest object that covered `address` (an address range can be
    /// reused after `dlclose`); the executable's is 0.
    fn object_at(&self, address: u64) -> Option<usize> {
        self.objects
            .iter()
            .rposition(|o| o.range.0 <= address && address < o.range.1)
    }

    fn native(&mut self, pc: u64) -> (Function, u64) {
        let Some(index) = self.object_at(pc) else {
            return self.anonymous(pc);
        };
        let object = &self.objects[index];
        let svma = pc - object.bias;
        let file = object.path.as_os_str().as_bytes().to_vec();
        if self.own.as_deref() == Some(file.as_slice()) {
            // The profiler's own frames are left out of the profile (`Profile::collect`):
            // no need to read its symbols (0.2-0.6 ms at exit) to name them.
            return (
                Function {
                    file,
                    start: 0,
                    name: Vec::new(),
                },
                0,
            );
        }
        // Code the program copies at run time, whose copies' frames are recorded at the
        // template (CPython's perf trampolines): named by its label, which has no type or
        // size in the symbol table (the table calls it a gap, `@?0x…`).
        if let Some((at, name)) = copies::covering(pc) {
            return (
                Function {
                    file,
                    start: at - object.bias,
                    name: name.as_bytes().to_vec(),
                },
                pc - at,
            );
        }
        match name_at(object, index == 0, svma) {
            Some(sym) => (
                Function {
                    file,
                    start: sym.start,
                    name: sym.name.clone().into_bytes(),
                },
                svma - sym.start,
            ),
            None => (
                Function {
                    file,
                    start: svma,
                    name: format!("@?{svma:#x}").into_bytes(),
                },
                0,
            ),
        }
    }

    /// Code outside every ELF object: jitted code (CPython's JIT maps each trace's code
    /// on its own), trampolines. One function per mapping that holds it now, named
    /// `@?0x<mapping start>` in the file `[unknown]`; code whose mapping is gone is one
    /// function `<unmapped code>`, its offset the address.
    fn anonymous(&mut self, pc: u64) -> (Function, u64) {
        let maps = self
            .maps
            .get_or_insert_with(|| std::fs::read_to_string("/proc/self/maps").unwrap_or_default());
        match modules::mapping_containing(maps, pc) {
            Some((start, _)) => (
                Function {
                    file: UNKNOWN_FILE.to_vec(),
                    start,
                    name: format!("@?{start:#x}").into_bytes(),
                },
                pc - start,
            ),
            None => (
                Function {
                    file: UNKNOWN_FILE.to_vec(),
                    start: 0,
                    name: b"<unmapped code>".to_vec(),
                },
                pc,
            ),
        }
    }

    fn python(&mut self, record: u32, instr: Option<u32>) -> (Function, u64) {
        let Some(rt) = &self.sampler.python else {
            return (
                Function {
                    file: b"[python]".to_vec(),
                    start: 0,
                    name: b"<unknown code>".to_vec(),
                },
                0,
            );
        };
        let Some(code) = self.sampler.codes.get(record) else {
            return (
                Function {
                    file: b"[python]".to_vec(),
                    start: 0,
                    name: b"<unknown code>".to_vec(),
                },
                0,
            );
        };
        let first = code.first_line.max(0);
        let line = instr.and_then(|offset| {
            line_for_offset(
                rt.layout.line_table,
                code.line_table,
                code.first_line,
                offset,
            )
        });
        let offset = line.map_or(0, |l| (l - first).max(0) as u64);
        (
            Function {
                file: code.file.to_vec(),
                start: first as u64,
                name: code.name.to_vec(),
            },
            offset,
        )
    }
}

/// One frame of a call stack named as a person reads it (`pyigprof dump`).
#[derive(Clone, Debug)]
pub struct Named {
    /// The function: a symbol, a Python qualified name, `@?0x…`, or a marker (`<…>`).
    pub name: String,
    /// The object's path, the Python source file, or `[pyigprof]` for a marker.
    pub file: String,
    /// Python frames: the line running (or the function's first line when the
    /// instruction is not known). Native frames: `None`.
    pub line: Option<u64>,
    /// Native frames: bytes from the function's start (from the object's start for
    /// `@?` names).
    pub offset: u64,
    /// Whether the frame is Python code.
    pub python: bool,
}

/// Names frames across calls, reading each object's symbols once (`pyigprof top`).
pub struct Namer {
    resolver: Resolver<'static>,
}

impl Namer {
    /// A namer for `sampler`'s frames.
    pub fn new(sampler: &'static Sampler) -> Namer {
        Namer {
            resolver: Resolver::new(sampler),
        }
    }

    /// The function of frame `key`: its id (stable for the namer's life) and whether it
    /// is Python code, or `None` for the profiler's own frames.
    pub fn function(&mut self, key: u64) -> Option<(u32, bool)> {
        let (id, _) = self.resolver.resolve(key);
        let own = self.resolver.own.as_deref();
        (own != Some(self.resolver.functions[id as usize].file.as_slice()))
            .then(|| (id, self.resolver.python.contains(&id)))
    }

    /// Function `id`'s file (object path or Python source), name, and whether it is Python
    /// code; its first line for Python code.
    pub fn describe(&self, id: u32) -> (String, String, bool, u64) {
        let f = &self.resolver.functions[id as usize];
        (
            String::from_utf8_lossy(&f.file).into_owned(),
            String::from_utf8_lossy(&f.name).into_owned(),
            self.resolver.python.contains(&id),
            f.start,
        )
    }
}

/// Names the frames of each call stack in `stacks` (frame keys, outermost first) as the
/// profile would name them ([`Resolver`]); the profiler's own frames are left out.
/// Not from a signal handler (reads symbol tables).
pub fn name_frames(sampler: &Sampler, stacks: &[Vec<u64>]) -> Vec<Vec<Named>> {
    let mut resolver = Resolver::new(sampler);
    let own = resolver.own.clone();
    stacks
        .iter()
        .map(|keys| {
            keys.iter()
                .filter_map(|&key| {
                    let (id, offset) = resolver.resolve(key);
                    let f = &resolver.functions[id as usize];
                    if own.as_deref() == Some(f.file.as_slice()) {
                        return None;
                    }
                    let python = resolver.python.contains(&id);
                    Some(Named {
                        name: String::from_utf8_lossy(&f.name).into_owned(),
                        file: String::from_utf8_lossy(&f.file).into_owned(),
                        line: python.then_some(f.start + offset),
                        offset: if python { 0 } else { offset },
                        python,
                    })
                })
                .collect()
        })
        .collect()
}

/// What a trace-tree node had counted when a window was written
/// ([`crate::output::windows`]): samples, ticks, and its `MEM_TOTAL` allocations and bytes.
pub type NodeCounts = [u64; 4];

/// A node's counts for a profile: its counters as they are, or, for a window, what they
/// counted since `before` (indexed by node; a node past its end counted nothing before),
/// the counters as read going to `after`.
struct Counting<'a> {
    window: Option<(&'a [NodeCounts], &'a mut Vec<NodeCounts>)>,
}

impl Counting<'_> {
    /// `(samples, ticks, memory)` of node `index`.
    fn of(&mut self, index: u32, node: &crate::record::trace::Node) -> (u64, u64, Memory) {
        let samples = node.samples.load(Ordering::Relaxed);
        let ticks = node.ticks.load(Ordering::Relaxed);
        let mut memory = Memory::of(node.memory.load(Ordering::Relaxed));
        let Some((before, after)) = &mut self.window else {
            return (samples, ticks, memory);
        };
        let now = [samples, ticks, memory.total.0, memory.total.1];
        let i = index as usize;
        if after.len() <= i {
            after.resize(i + 1, [0; 4]);
        }
        after[i] = now;
        let was = before.get(i).copied().unwrap_or([0; 4]);
        // Allocations since the window's start; what is live is what is live now.
        memory.total = (now[2].saturating_sub(was[2]), now[3].saturating_sub(was[3]));
        (
            samples.saturating_sub(was[0]),
            ticks.saturating_sub(was[1]),
            memory,
        )
    }
}

impl Profile {
    /// Merges the trace trees of every thread of `sampler` (sampling must have stopped,
    /// or the trees are read as the threads insert: a sample in flight is counted later).
    pub fn collect(sampler: &Sampler) -> Profile {
        Profile::collect_counting(sampler, Counting { window: None })
    }

    /// The profile of a window: what the trace trees counted since `before` (the counts
    /// of each node when the previous window was written, [`NodeCounts`]), read while the
    /// threads insert, their counts now going to `after`; the nodes that counted nothing
    /// in the window are left out. The statistics are the run's: the caller replaces them.
    pub fn collect_window(
        sampler: &Sampler,
        before: &[NodeCounts],
        after: &mut Vec<NodeCounts>,
    ) -> Profile {
        after.clear();
        let mut profile = Profile::collect_counting(
            sampler,
            Counting {
                window: Some((before, after)),
            },
        );
        profile.prune();
        profile
    }

    /// Leaves out the nodes whose subtree counted nothing (no samples, ticks or memory).
    fn prune(&mut self) {
        // Post-order: a node is kept when it or a child kept has counts.
        let mut keep = vec![false; self.nodes.len()];
        let mut order: Vec<u32> = Vec::with_capacity(self.nodes.len());
        let mut stack = vec![0u32];
        while let Some(index) = stack.pop() {
            order.push(index);
            stack.extend(self.nodes[index as usize].children.iter().copied());
        }
        for &index in order.iter().rev() {
            let node = &self.nodes[index as usize];
            keep[index as usize] = node.samples > 0
                || node.ticks > 0
                || node.locks != [(0, 0); 2]
                || !node.memory.is_empty()
                || node.memory.live.1 > 0
                || node.children.iter().any(|&c| keep[c as usize]);
        }
        keep[0] = true;
        // The nodes kept, renumbered in their order (a parent before its children).
        let mut renumbered = vec![u32::MAX; self.nodes.len()];
        let mut next = 0u32;
        for (index, &kept) in keep.iter().enumerate() {
            if kept {
                renumbered[index] = next;
                next += 1;
            }
        }
        let nodes = std::mem::take(&mut self.nodes);
        self.nodes = nodes
            .into_iter()
            .zip(&keep)
            .filter(|(_, &kept)| kept)
            .map(|(mut node, _)| {
                node.children = node
                    .children
                    .iter()
                    .filter(|&&c| keep[c as usize])
                    .map(|&c| renumbered[c as usize])
                    .collect();
                node
            })
            .collect();
    }

    fn collect_counting(sampler: &Sampler, mut counting: Counting<'_>) -> Profile {
        // The writing thread's bytes since its last recorded allocation.
        crate::sources::allocations::flush_thread_bytes();
        crate::sources::locks::flush_thread_tallies();
        let mut resolver = Resolver::new(sampler);
        // The merged tree has at most the trace trees' nodes and the root. Room for them
        // at once up to a few thousand: a short process's profile then grows no vector
        // (each doubling was fresh pages of the heap, 6 page faults at the exit of
        // `python -c pass`); a larger one grows as it needs (threads with the same stacks
        // merge into far fewer nodes than their trees hold).
        let expected = (sampler.trees.nodes_used() + 1).min(4096);
        let mut edges: HashMap<(u32, u32, u64), u32> = HashMap::with_capacity(expected);
        let mut nodes = Vec::with_capacity(expected);
        nodes.push(OutNode {
            function: u32::MAX,
            offset: 0,
            children: Vec::new(),
            samples: 0,
            ticks: 0,
            memory: Memory::default(),
            locks: [(0, 0); 2],
        });
        let own = resolver.own.clone();
        let jit = resolver.intern(jit_function());
        // Each thread's trace tree, then its trees of lock waits and holds, whose samples
        // and ticks are LOCK_WAIT's and LOCK_HOLD's.
        let roots = sampler.slots.roots().into_iter().map(|root| (root, None));
        let lock_roots = sampler
            .slots
            .lock_roots()
            .into_iter()
            .map(|(root, counter)| (root, Some(counter)));
        for (root, lock_counter) in roots.chain(lock_roots) {
            // path[d] = merged node at depth d (path[0] = root).
            let mut path: Vec<u32> = vec![0];
            sampler.trees.walk(root, &mut |depth, index, node| {
                path.truncate(depth);
                let (samples, ticks, memory) = counting.of(index, node);
                let mut locks = [(0, 0); 2];
                let (samples, ticks) = match lock_counter {
                    Some(counter) => {
                        locks[counter as usize] = (samples, ticks);
                        (0, 0)
                    }
                    None => (samples, ticks),
                };
                let parent = path[depth - 1];
                let (mut function, mut offset) = resolver.resolve(node.key.load(Ordering::Relaxed));
                // Code outside every object called by the evaluator (a Python frame in the
                // spliced stack), or by such code: the JIT's.
                let caller = nodes[parent as usize].function;
                if parent != 0
                    && resolver.is_anonymous(function)
                    && (caller == jit || resolver.python.contains(&caller))
                {
                    (function, offset) = (jit, 0);
                }
                if own.as_deref() == Some(resolver.functions[function as usize].file.as_slice()) {
                    // The profiler's own frames (the thread-start trampoline) are not the
                    // program's: their callees hang under their caller.
                    path.push(parent);
                    nodes[parent as usize].count(samples, ticks, memory, locks);
                    return;
                }
                let index = *edges.entry((parent, function, offset)).or_insert_with(|| {
                    nodes.push(OutNode {
                        function,
                        offset,
                        children: Vec::new(),
                        samples: 0,
                        ticks: 0,
                        memory: Memory::default(),
                        locks: [(0, 0); 2],
                    });
                    let index = (nodes.len() - 1) as u32;
                    nodes[parent as usize].children.push(index);
                    index
                });
                nodes[index as usize].count(samples, ticks, memory, locks);
                path.push(index);
            });
        }
        // The names the symbol tables gave, kept for the next process.
        save_names();
        let cost = Cost::now();
        Profile {
            functions: resolver.functions,
            nodes,
            python: resolver.python,
            period_ns: sampler.period_ns,
            pid: std::process::id(),
            program: command_line(),
            statistics: {
                let mut lines = sampler.stats.lines();
                lines.insert(2, sampling_line(sampler));
                if crate::sources::locks::enabled() {
                    lines.push(crate::sources::locks::statistics_line());
                }
                lines.extend(crate::sources::budget::statistics_line(
                    (1_000_000_000 / sampler.period_ns.max(1)) as u32,
                ));
                lines.push(cost_line(&cost));
                lines
            },
            cost,
            first_counter: if sampler.cpu {
                sampler.trigger.counter()
            } else if crate::sources::allocations::enabled() {
                "MEM_TOTAL"
            } else {
                LOCK_WAIT
            },
            counter: sampler.trigger.counter(),
        }
    }

    /// Ticks per wall-mode wait marker (`<waiting: GIL>`, …; the name without the
    /// brackets: `GIL`, `lock`, …), largest first; the markers are leaves, so a node's
    /// ticks are its own. Empty when no sample was of a blocked thread.
    pub fn waiting_ticks(&self) -> Vec<(String, u64)> {
        let mut by_function: HashMap<u32, u64> = HashMap::new();
        for node in self.nodes.iter().skip(1) {
            *by_function.entry(node.function).or_default() += node.ticks;
        }
        let mut out: Vec<(String, u64)> = by_function
            .into_iter()
            .filter_map(|(function, ticks)| {
                let f = &self.functions[function as usize];
                let marker = WAITS
                    .iter()
                    .find(|m| f.file == STATISTICS_FILE && f.name == m.name().as_bytes())?;
                let reason = marker.waiting_for()?;
                (ticks > 0).then(|| (reason.to_string(), ticks))
            })
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }

    /// Samples with a frame of JIT-compiled code ([`jit_function`]) in their stack: the
    /// samples under the outermost `<jit>` frames.
    pub fn jit_samples(&self) -> u64 {
        let jit = self
            .functions
            .iter()
            .position(|f| f.file == JIT_FILE)
            .map(|id| id as u32);
        let Some(jit) = jit else { return 0 };
        let mut total = 0;
        // (node, whether it is under a <jit> frame)
        let mut stack: Vec<(u32, bool)> = vec![(0, false)];
        while let Some((index, under)) = stack.pop() {
            let node = &self.nodes[index as usize];
            let under = under || (index != 0 && node.function == jit);
            if under {
                total += node.samples;
            }
            stack.extend(node.children.iter().map(|&child| (child, under)));
        }
        total
    }

    /// Total samples and ticks in the profile.
    pub fn totals(&self) -> (u64, u64) {
        self.nodes
            .iter()
            .fold((0, 0), |(s, t), n| (s + n.samples, t + n.ticks))
    }

    /// Writes the profile in IgProf's text format, in the grammar IgProf's own reader
    /// accepts (IgProf `src/analyse.cc`, `readDump`): function, file and counter ids are
    /// numbered 0, 1, 2, … in the order they are defined, each defined before it is
    /// referred to, and every line after the header is a call-tree line. The statistics
    /// come first, as depth-1 nodes without values (docs/dump-format.md, "The profiler's
    /// statistics"), the first of them (`#pyigprof tree lines=… samples=… jit_samples=…`:
    /// what the call tree holds) defining the counter (so that a profile without samples is read as
    /// one with a total of 0) and telling readers that names are escaped.
    pub fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        let mut header = b"P=(HEX ID=".to_vec();
        header.extend_from_slice(format!("{:x} N=(", self.pid).as_bytes());
        escape_into(&self.program, &mut header);
        header.extend_from_slice(format!(") T={:.6})\n", self.period_ns as f64 / 1e9).as_bytes());
        out.write_all(&header)?;

        let mut ids = Definitions::default();
        let mut line = Vec::with_capacity(256);
        // First the call tree that follows, announced so that a reader can tell a dump
        // whose writing stopped at a line boundary from a whole one; then the statistics.
        let announcement = format!(
            "#pyigprof tree lines={} samples={} jit_samples={}",
            self.nodes.len() - 1,
            self.totals().0,
            self.jit_samples()
        );
        for statistics in std::iter::once(&announcement).chain(&self.statistics) {
            line.clear();
            line.extend_from_slice(b"C1 ");
            let function = Function {
                file: STATISTICS_FILE.to_vec(),
                start: 0,
                name: statistics.as_bytes().to_vec(),
            };
            ids.function(&mut None, &function, &mut line);
            line.extend_from_slice(b"+0");
            if ids.counters.is_empty() {
                ids.counter(self.first_counter, (0, 0, 0), &mut line);
            }
            line.push(b'\n');
            out.write_all(&line)?;
        }
        let mut written: Vec<Option<u32>> = vec![None; self.functions.len()];
        // Depth-first, children in the order they were first seen.
        let mut stack: Vec<(u32, usize)> = self.nodes[0]
            .children
            .iter()
            .rev()
            .map(|&c| (c, 1))
            .collect();
        while let Some((index, depth)) = stack.pop() {
            let node = &self.nodes[index as usize];
            line.clear();
            line.extend_from_slice(format!("C{depth:x} ").as_bytes());
            let slot = &mut written[node.function as usize];
            ids.function(slot, &self.functions[node.function as usize], &mut line);
            line.extend_from_slice(format!("+{:x}", node.offset).as_bytes());
            // Ticks without samples: a thread's undelivered expirations (Marker::Unsampled).
            if node.samples > 0 || node.ticks > 0 {
                ids.counter(
                    self.counter,
                    (node.samples, node.ticks, node.ticks),
                    &mut line,
                );
            }
            for (name, &(count, ticks)) in LOCK_COUNTERS.iter().zip(&node.locks) {
                if (count, ticks) != (0, 0) {
                    ids.counter(name, (count, ticks, ticks), &mut line);
                }
            }
            let m = &node.memory;
            if !m.is_empty() {
                ids.counter("MEM_TOTAL", (m.total.0, m.total.1, m.total.1), &mut line);
                ids.counter("MEM_LIVE", m.live, &mut line);
                ids.counter("MEM_MAX", (m.total.0, m.max, m.max), &mut line);
                ids.counter(
                    "MEM_LIVE_PEAK",
                    (m.at_peak.0, m.at_peak.1, m.at_peak.1),
                    &mut line,
                );
            }
            line.push(b'\n');
            out.write_all(&line)?;
            stack.extend(node.children.iter().rev().map(|&c| (c, depth + 1)));
        }
        Ok(())
    }
}

/// The statistics line that says what sampled the threads: `#pyigprof sampling
/// trigger=<event>|posix-timer counter=<COUNTER> period=<ns or events> randomized=0|1
/// exclude_kernel=0|1 [why=<token>]` (docs/dump-format.md).
pub fn sampling_line(sampler: &Sampler) -> String {
    use crate::sources::Trigger;
    match sampler.trigger.used() {
        Trigger::Event(e) => format!(
            "#pyigprof sampling trigger={} counter={} period={} randomized={} exclude_kernel={}{}",
            e.name,
            e.counter,
            e.period,
            u8::from(e.randomized()),
            u8::from(crate::sources::perf::excludes_kernel()),
            if crate::sources::late::started_late() {
                format!(" timers_first_ns={}", crate::sources::late::TIMERS_FIRST_NS)
            } else {
                String::new()
            },
        ),
        Trigger::Timer { why } => format!(
            "#pyigprof sampling trigger=posix-timer counter=PERF_TICKS period={} randomized=0 \
             exclude_kernel=0 why={}",
            sampler.period_ns,
            // One word: the statistics are space-separated key=value pairs.
            why.replace(' ', "-"),
        ),
    }
}

/// What the profiled process and the profiler's helper process have cost so far, in CPU
/// time (user + system, ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cost {
    /// The profiled process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`: every thread, the
    /// signal handler's work included) since sampling began in it (its start, or when
    /// it was attached to), ns.
    pub process_ns: u64,
    /// The helper process's ([`crate::sources::helper::cpu_ns`]), ns; `None` without one.
    pub helper_ns: Option<u64>,
    /// The helper process's wake-ups.
    pub helper_wakeups: u64,
    /// Periods it armed on the threads' perf events.
    pub rearms: u64,
}

/// The profiled process's CPU time (ns) when sampling began in it: 0 when the library was
/// preloaded (it starts with the process), its CPU time so far when it was attached to
/// (`pyigprof attach`, `dump`, `top`): [`Cost::process_ns`] counts from there.
static PROCESS_NS_BEFORE: AtomicU64 = AtomicU64::new(0);

impl Cost {
    /// Counts the profiled process's CPU time from now on (attaching to a running
    /// process).
    pub fn start_here() {
        PROCESS_NS_BEFORE.store(Cost::process_cpu_ns(), Ordering::Relaxed);
    }

    /// The profiled process's CPU time since it started, ns: in the child that writes a
    /// snapshot or a fatal signal's profile for it, its parent's CPU clock (the child's
    /// own is a few milliseconds: a summary said the helper had used 1,368 % of it).
    fn process_cpu_ns() -> u64 {
        use crate::sources::timer::{clock_ns, process_cpu_clock};
        let owner = crate::output::lifecycle::owner();
        // SAFETY: getpid has no preconditions.
        let clock = match owner != 0 && owner != unsafe { libc::getpid() } {
            true => process_cpu_clock(owner),
            false => libc::CLOCK_PROCESS_CPUTIME_ID,
        };
        clock_ns(clock).unwrap_or(0)
    }

    /// The figures now, of the profiled process since sampling began in it
    /// ([`Cost::start_here`]).
    pub fn now() -> Cost {
        Cost {
            process_ns: Cost::process_cpu_ns()
                .saturating_sub(PROCESS_NS_BEFORE.load(Ordering::Relaxed)),
            helper_ns: crate::sources::helper::cpu_ns(),
            helper_wakeups: crate::sources::helper::WAKEUPS.load(Ordering::Relaxed),
            rearms: crate::sources::perf::REARMS.load(Ordering::Relaxed),
        }
    }

    /// The helper process's CPU time as a share of the profiled process's, in per cent.
    pub fn helper_percent(&self) -> Option<f64> {
        let helper = self.helper_ns?;
        (self.process_ns > 0).then(|| 100.0 * helper as f64 / self.process_ns as f64)
    }
}

/// The statistics line of what the run cost: `#pyigprof cost process_cpu_ns=…
/// helper_cpu_ns=… helper_wakeups=… helper_rearms=…` (docs/dump-format.md), read when the
/// profile is collected: the profiled process's CPU time and its helper process's (0
/// without one), which no `wait4` of the program's parent counts.
pub fn cost_line(cost: &Cost) -> String {
    format!(
        "#pyigprof cost process_cpu_ns={} helper_cpu_ns={} helper_wakeups={} helper_rearms={}",
        cost.process_ns,
        cost.helper_ns.unwrap_or(0),
        cost.helper_wakeups,
        cost.rearms,
    )
}

/// The `F` file of the profiler's markers (`<unsampled thread time>`, …) and of the nodes
/// that carry its statistics.
pub const STATISTICS_FILE: &[u8] = b"[pyigprof]";

/// The ids a dump has defined so far: functions, files and counters, numbered in the
/// order they are first written.
#[derive(Default)]
struct Definitions {
    functions: u32,
    files: HashMap<Vec<u8>, u32>,
    counters: Vec<&'static str>,
}

impl Definitions {
    /// Appends `FN<id>` for `f`, with its definition (and its file's) the first time:
    /// `slot` holds the id `f` was given, `None` before.
    fn function(&mut self, slot: &mut Option<u32>, f: &Function, line: &mut Vec<u8>) {
        if let Some(id) = *slot {
            line.extend_from_slice(format!("FN{id:x}").as_bytes());
            return;
        }
        let id = self.functions;
        self.functions += 1;
        *slot = Some(id);
        line.extend_from_slice(format!("FN{id:x}=(F").as_bytes());
        match self.files.get(f.file.as_slice()) {
            Some(&file) => line.extend_from_slice(format!("{file:x}").as_bytes()),
            None => {
                let file = self.files.len() as u32;
                self.files.insert(f.file.clone(), file);
                line.extend_from_slice(format!("{file:x}=(").as_bytes());
                escape_into(&f.file, line);
                line.push(b')');
            }
        }
        line.extend_from_slice(format!("+{:x} N=(", f.start).as_bytes());
        escape_into(&f.name, line);
        line.extend_from_slice(b"))");
    }

    /// Appends ` V<id>:(count,amount,peak)` for counter `name` (IgProf's names:
    /// `PERF_TICKS` samples and ticks, `MEM_TOTAL` allocations and bytes, …), defining
    /// it as ` V<id>=(NAME):(…)` the first time.
    fn counter(&mut self, name: &'static str, values: (u64, u64, u64), line: &mut Vec<u8>) {
        let (count, amount, peak) = values;
        match self.counters.iter().position(|&c| c == name) {
            Some(id) => line.extend_from_slice(format!(" V{id:x}:(").as_bytes()),
            None => {
                let id = self.counters.len();
                self.counters.push(name);
                line.extend_from_slice(format!(" V{id:x}=({name}):(").as_bytes());
            }
        }
        line.extend_from_slice(format!("{count:x},{amount:x},{peak:x})").as_bytes());
    }
}

/// Appends `text` to `out` escaped as docs/dump-format.md says: `%`, `)`, bytes below 0x20
/// and 0x7f become `%XX`; everything else, non-ASCII UTF-8 included, is written as it is,
/// which IgProf's reader takes (its names and paths end at the first `)` or newline).
pub fn escape_into(text: &[u8], out: &mut Vec<u8>) {
    for &b in text {
        if b == b'%' || b == b')' || b < 0x20 || b == 0x7f {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
}

/// Path of this library (`libpyigprof.so`) as the module list names it.
pub(crate) fn own_object_path() -> Option<Vec<u8>> {
    let here = own_object_path as *const () as usize as u64;
    modules::history()
        .into_iter()
        .rev()
        .find(|o| o.range.0 <= here && here < o.range.1)
        .map(|o| o.path.as_os_str().as_bytes().to_vec())
}

/// The process's command line, arguments joined by single spaces.
fn command_line() -> Vec<u8> {
    let raw = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let mut args: Vec<&[u8]> = raw.split(|&b| b == 0).collect();
    while args.last().is_some_and(|a| a.is_empty()) {
        args.pop();
    }
    args.join(&b' ')
}

/// Writes `profile` to a new file at `path`, or, when a file of that name exists already
/// (an earlier image of the same process, before an `exec`), at the first free name with
/// `.1`, `.2`, … inserted before the extension (`pyigprof.42.gz` → `pyigprof.42.1.gz`).
/// Never follows a symbolic link and never replaces a file. Returns the path written.
///
/// The profile is never half-written under its name: it is written to a hidden file
/// beside it (`.pyigprof.42.gz.partial`, [`partial`]) and then given its name with
/// `link(2)` (or `renameat2(RENAME_NOREPLACE)` where the file system has no hard links),
/// which fail rather than replace a file of that name. A process killed while writing
/// leaves only the hidden file. Where neither works, the profile is written under its
/// name directly.
pub fn write_unique(
    profile: &Profile,
    path: &std::path::Path,
) -> Result<std::path::PathBuf, String> {
    let gzip = path.as_os_str().as_bytes().ends_with(b".gz");
    let mut hidden = None;
    for n in 0..1000u32 {
        let candidate = partial(path, n);
        match write_new(profile, &candidate, gzip) {
            Ok(()) => {
                hidden = Some(candidate);
                break;
            }
            Err(Failed::Create(e)) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            // The directory refuses the hidden file (but might take the profile's name:
            // a file system without dot files is unheard of; say what failed).
            Err(Failed::Create(e)) => {
                return Err(format!("cannot create the profile {}: {e}", path.display()))
            }
            Err(Failed::Write(e)) => {
                return Err(format!("cannot write the profile {}: {e}", path.display()))
            }
        }
    }
    let Some(hidden) = hidden else {
        return Err(format!(
            "cannot write the profile {}: 1000 hidden files of that name exist",
            path.display()
        ));
    };
    let result = publish(&hidden, path);
    let _ = std::fs::remove_file(&hidden);
    match result {
        Publish::Named(named) => Ok(named),
        Publish::Failed(e) => Err(format!("cannot name the profile {}: {e}", path.display())),
        Publish::Unsupported => write_in_place(profile, path, gzip),
    }
}

/// What [`publish`] did.
enum Publish {
    /// The profile has this name.
    Named(std::path::PathBuf),
    /// Naming failed for another reason than a name in use.
    Failed(std::io::Error),
    /// The file system can neither link nor rename without replacing.
    Unsupported,
}

/// The names a profile for `path` may take, in order: `path`, then `path` numbered 1 to
/// 999 ([`numbered`]).
fn names(path: &std::path::Path) -> impl Iterator<Item = std::path::PathBuf> + '_ {
    std::iter::once(path.to_path_buf()).chain((1..1000u32).map(|n| numbered(path, n)))
}

/// Gives the written file `hidden` the first free name of `path`, `path.1`, … (see
/// [`write_unique`]).
fn publish(hidden: &std::path::Path, path: &std::path::Path) -> Publish {
    for candidate in names(path) {
        let error = match std::fs::hard_link(hidden, &candidate) {
            Ok(()) => return Publish::Named(candidate),
            Err(e) => e,
        };
        if error.kind() == std::io::ErrorKind::AlreadyExists {
            continue;
        }
        // No hard links here (EPERM on some file systems, EOPNOTSUPP, EMLINK, …): rename.
        match rename_noreplace(hidden, &candidate) {
            Ok(()) => return Publish::Named(candidate),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
                return Publish::Unsupported
            }
            Err(e) => return Publish::Failed(e),
        }
    }
    Publish::Failed(std::io::Error::other("1000 files of that name exist"))
}

/// `renameat2(from, to, RENAME_NOREPLACE)`: fails with `EEXIST` rather than replace `to`;
/// `EINVAL` where the file system does not support the flag.
fn rename_noreplace(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    use std::ffi::CString;
    let from = CString::new(from.as_os_str().as_bytes())?;
    let to = CString::new(to.as_os_str().as_bytes())?;
    // SAFETY: two NUL-terminated paths that live across the call.
    let result = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The way profiles were written before [`write_unique`] wrote beside them: straight
/// under the first free name, for file systems that can neither link nor rename without
/// replacing.
fn write_in_place(
    profile: &Profile,
    path: &std::path::Path,
    gzip: bool,
) -> Result<std::path::PathBuf, String> {
    for candidate in names(path) {
        match write_new(profile, &candidate, gzip) {
            Ok(()) => return Ok(candidate),
            Err(Failed::Create(e)) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(Failed::Create(e)) => {
                return Err(format!(
                    "cannot create the profile {}: {e}",
                    candidate.display()
                ))
            }
            Err(Failed::Write(e)) => {
                return Err(format!(
                    "cannot write the profile {}: {e}",
                    candidate.display()
                ))
            }
        }
    }
    Err(format!(
        "cannot write the profile {}: 1000 files of that name exist",
        path.display()
    ))
}

/// The hidden file a profile for `path` is written to before it gets its name:
/// `.<name>.partial` beside it, `.<name>.partial<n>` for `n` > 0.
pub fn partial(path: &std::path::Path, n: u32) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let suffix = if n == 0 { String::new() } else { n.to_string() };
    path.with_file_name(format!(".{name}.partial{suffix}"))
}

/// `path` with `.n` inserted before its extension (`.gz`, `.txt`, …) or appended.
pub fn numbered(path: &std::path::Path, n: u32) -> std::path::PathBuf {
    tagged(path, &n.to_string())
}

/// `path` with `.tag` inserted before its extension or appended
/// (`pyigprof.42.gz` → `pyigprof.42.snapshot1.gz`).
pub fn tagged(path: &std::path::Path, tag: &str) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let renamed = match name.rfind('.') {
        Some(dot) if dot > 0 => format!("{}.{tag}{}", &name[..dot], &name[dot..]),
        _ => format!("{name}.{tag}"),
    };
    path.with_file_name(renamed)
}

/// Why [`write_new`] failed.
enum Failed {
    /// The file could not be created (it exists, the directory is missing or unwritable).
    Create(std::io::Error),
    /// Writing it failed (a full disk); the partial file was removed.
    Write(std::io::Error),
}

/// Creates `path` (never following a symbolic link, never replacing a file; mode 0666
/// less the umask, as the program's own files) and writes `profile`, gzip-compressed
/// with `gzip`. A file left half-written by an I/O error is removed.
fn write_new(profile: &Profile, path: &std::path::Path, gzip: bool) -> Result<(), Failed> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o666)
        .open(path)
        .map_err(Failed::Create)?;
    let buffered = std::io::BufWriter::with_capacity(1 << 16, file);
    let result = if gzip {
        let mut gz = crate::output::gzip::Gzip::new(buffered, 6);
        profile
            .write(&mut gz)
            .and_then(|_| gz.finish())
            .and_then(|mut w| w.flush())
    } else {
        let mut w = buffered;
        profile.write(&mut w).and_then(|_| w.flush())
    };
    result.map_err(|e| {
        let _ = std::fs::remove_file(path);
        Failed::Write(e)
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn escaping_follows_the_documented_rule() {
        let mut out = Vec::new();
        escape_into("f(ü) 100%\n<lambda>\x7f".as_bytes(), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "f(ü%29 100%25%0A<lambda>%7F"
        );
        let mut out = Vec::new();
        escape_into(b"/tmp/a (1).py \xe9", &mut out);
        assert_eq!(out, b"/tmp/a (1%29.py \xe9");
    }

    /// `python3 app (1).py`: `__libc_start_main` → `<module>` (app.py:1) → `squeeze`
    /// (app.py:7) at lines 10 (5 samples, 20 ticks of 4 ms) and 11 (1, 1).
    pub(crate) fn sample_profile() -> Profile {
        let functions = vec![
            Function {
                file: b"/lib/libc.so.6".to_vec(),
                start: 0x271c0,
                name: b"__libc_start_main".to_vec(),
            },
            Function {
                file: b"/x/app.py".to_vec(),
                start: 1,
                name: b"<module>".to_vec(),
            },
            Function {
                file: b"/x/app.py".to_vec(),
                start: 7,
                name: b"squeeze".to_vec(),
            },
        ];
        let node = |function, offset, children: Vec<u32>, samples, ticks| OutNode {
            function,
            offset,
            children,
            samples,
            ticks,
            memory: Memory::default(),
            locks: [(0, 0); 2],
        };
        let nodes = vec![
            node(u32::MAX, 0, vec![1], 0, 0),
            node(0, 0x8a, vec![2], 0, 0),
            node(1, 0x1b, vec![3, 4], 0, 0),
            node(2, 3, vec![], 5, 20),
            node(2, 4, vec![], 1, 1),
        ];
        Profile {
            functions,
            nodes,
            python: [1, 2].into_iter().collect(),
            period_ns: 4_000_000,
            pid: 0x4d2,
            program: b"python3 app (1).py".to_vec(),
            statistics: vec!["#pyigprof stats samples=6".into()],
            first_counter: "PERF_TICKS",
            counter: "PERF_TICKS",
            cost: Cost {
                process_ns: 0,
                helper_ns: None,
                helper_wakeups: 0,
                rearms: 0,
            },
        }
    }

    #[test]
    fn writes_igprof_hex_text_with_each_definition_once() {
        let mut out = Vec::new();
        sample_profile().write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "P=(HEX ID=4d2 N=(python3 app (1%29.py) T=0.004000)\n\
             C1 FN0=(F0=([pyigprof])+0 N=(#pyigprof tree lines=4 samples=6 jit_samples=0))+0 V0=(PERF_TICKS):(0,0,0)\n\
             C1 FN1=(F0+0 N=(#pyigprof stats samples=6))+0\n\
             C1 FN2=(F1=(/lib/libc.so.6)+271c0 N=(__libc_start_main))+8a\n\
             C2 FN3=(F2=(/x/app.py)+1 N=(<module>))+1b\n\
             C3 FN4=(F2+7 N=(squeeze))+3 V0:(5,14,14)\n\
             C3 FN4+4 V0:(1,1,1)\n"
        );
        assert_eq!(sample_profile().totals(), (6, 21));
    }

    #[test]
    fn function_ids_follow_the_order_of_definition() {
        // The functions met first while sampling are written last: IgProf's reader wants
        // FN0, FN1, … defined in that order.
        let mut profile = sample_profile();
        profile.functions.reverse();
        for node in &mut profile.nodes[1..] {
            node.function = 2 - node.function;
        }
        let mut out = Vec::new();
        profile.write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let definitions: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once(" FN")?.1.split_once("=(").map(|(id, _)| id))
            .collect();
        assert_eq!(definitions, ["0", "1", "2", "3", "4"], "{text}");
        assert!(text.contains("C3 FN4+4 V0:(1,1,1)\n"), "{text}");
    }

    #[test]
    fn memory_counters_are_igprofs_with_their_ids_defined_once() {
        let mut profile = sample_profile();
        profile.first_counter = "MEM_TOTAL";
        for node in &mut profile.nodes {
            node.samples = 0;
            node.ticks = 0;
        }
        profile.nodes[3].memory = Memory {
            total: (3, 0x300),
            live: (1, 0x100, 0x200),
            max: 0x200,
            at_peak: (2, 0x180),
        };
        profile.nodes[4].memory = Memory {
            total: (1, 0x10),
            live: (0, 0, 0x10),
            max: 0x10,
            at_peak: (0, 0),
        };
        let mut out = Vec::new();
        profile.write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1],
            "C1 FN0=(F0=([pyigprof])+0 N=(#pyigprof tree lines=4 samples=0 jit_samples=0))+0 \
             V0=(MEM_TOTAL):(0,0,0)"
        );
        assert_eq!(
            lines[5],
            "C3 FN4=(F2+7 N=(squeeze))+3 V0:(3,300,300) V1=(MEM_LIVE):(1,100,200) \
             V2=(MEM_MAX):(3,200,200) V3=(MEM_LIVE_PEAK):(2,180,180)"
        );
        assert_eq!(
            lines[6],
            "C3 FN4+4 V0:(1,10,10) V1:(0,0,10) V2:(1,10,10) V3:(0,0,0)"
        );
        // Merging sums, but keeps the largest allocation.
        let mut merged = profile.nodes[3].memory;
        merged.add(profile.nodes[4].memory);
        assert_eq!(
            merged,
            Memory {
                total: (4, 0x310),
                live: (1, 0x100, 0x210),
                max: 0x200,
                at_peak: (2, 0x180),
            }
        );
    }

    #[test]
    fn a_profile_without_samples_still_defines_its_counter() {
        let mut profile = sample_profile();
        profile.nodes.truncate(1);
        profile.nodes[0].children.clear();
        profile
            .statistics
            .push("#pyigprof handler samples=0".into());
        let mut out = Vec::new();
        profile.write(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "P=(HEX ID=4d2 N=(python3 app (1%29.py) T=0.004000)\n\
             C1 FN0=(F0=([pyigprof])+0 N=(#pyigprof tree lines=0 samples=0 jit_samples=0))+0 V0=(PERF_TICKS):(0,0,0)\n\
             C1 FN1=(F0+0 N=(#pyigprof stats samples=6))+0\n\
             C1 FN2=(F0+0 N=(#pyigprof handler samples=0))+0\n"
        );
    }
}
