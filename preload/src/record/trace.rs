//! The trace tree: IgProf's `IgProfTrace` idea. Each thread owns one tree; a node is one
//! frame of a call stack, keyed by a [`FrameKey`](crate::capture::frames) value, with the counters of
//! the samples whose stack ended exactly there (self counts). Cumulative counts are derived
//! when the profile is read.
//!
//! Nodes live in one [`Pool`] mapped before sampling. Only the thread that owns a tree
//! inserts into it (from its own signal handler), so insertion needs no lock; links are
//! published with release stores so that a reader on another thread sees whole nodes.

use crate::mem::{Pool, ZeroedArray};
use crate::record::threads::MAX_STACK;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// One node of a trace tree. All-zero is a valid empty node.
#[repr(C)]
pub struct Node {
    /// The frame this node stands for (see `frames.rs` for the encoding).
    pub key: AtomicU64,
    /// First child (0 = none).
    pub first_child: AtomicU32,
    /// Next sibling under the same parent (0 = none).
    pub next_sibling: AtomicU32,
    /// Number of samples (signals) that ended at this node.
    pub samples: AtomicU64,
    /// CPU time those samples stand for, in ticks (1 + merged timer expirations each).
    pub ticks: AtomicU64,
    /// The node's memory counters ([`crate::record::memory`]); 0 = none (no sampled
    /// allocation ended here).
    pub memory: AtomicU32,
    /// How many children the node has (in the 4 bytes the fields above leave before the
    /// node's 8-byte alignment): from [`INDEXED_FANOUT`] on they are in the child index.
    children: AtomicU32,
}

/// Entries of the child index (a power of two; 8 bytes each, mapped as zero pages and
/// resident only where written): 2 MiB at most, for up to 196,608 indexed children (three
/// quarters full; beyond, lookups search lists again).
pub const CHILD_INDEX: usize = 1 << 18;

/// Children a node has before they are indexed ([`Trees::child`]).
pub const INDEXED_FANOUT: u32 = 8;

/// Entries probed before an index lookup or insertion gives up (the index is then
/// treated as full, and lookups search sibling lists).
const INDEX_PROBES: usize = 64;

/// Entries in a [`PathMemo`]'s leaf cache (a power of two; 16 bytes each).
pub const LEAF_CACHE: usize = 2048;

/// Lookups a thread makes through its [`PathMemo`] before it uses the leaf and edge caches.
/// The caches are 128 KiB of zero pages, and each entry made lands on a page of its own
/// until they fill: a thread's first samples would take a page fault (two: the read maps
/// the zero page, the write copies it) for nearly every new frame, 27 of them for the
/// three samples of `python -c pass` (measured with `perf record -e page-faults`). While
/// the tree is that small, searching it from the previous path costs less.
pub const MEMO_WARMUP: u32 = 64;

/// One entry of the leaf cache: a whole call stack, by its [`stack_hash`], and the node
/// its samples were counted on. All-zero is an empty entry.
#[derive(Clone, Copy)]
#[repr(C)]
struct LeafEntry {
    /// [`stack_hash`] of the call stack.
    hash: u64,
    /// The trace-tree node of the stack's innermost frame.
    node: u32,
    /// The [`PathMemo::epoch`] the entry was made in; older entries are stale.
    epoch: u32,
}

/// Entries in a [`PathMemo`]'s edge cache (a power of two; 24 bytes each).
pub const EDGE_CACHE: usize = 4096;

/// One entry of the edge cache: the child of `parent` with `key`. All-zero is an empty
/// entry.
#[derive(Clone, Copy)]
#[repr(C)]
struct EdgeEntry {
    key: u64,
    parent: u32,
    child: u32,
    /// The [`PathMemo::epoch`] the entry was made in; older entries are stale.
    epoch: u32,
}

/// What a thread remembers of the call stacks it recorded, so that the next sample
/// touches few trace-tree nodes (see [`Trees::record_from`]): the previous call stack with
/// the node of each frame, and a direct-mapped cache from whole call stacks to their
/// innermost node. All-zero is a valid empty memo.
#[repr(C)]
pub struct PathMemo {
    /// Root of the tree the path and the leaf cache are in; 0 = none (cleared when trees
    /// are forgotten).
    pub root: AtomicU32,
    /// Generation of the leaf cache: incremented whenever `root` changes, which makes
    /// every entry stale at once (node indexes are reused after trees are forgotten).
    epoch: u32,
    /// Lookups made, up to [`MEMO_WARMUP`]: the caches are used from then on.
    lookups: u32,
    /// Frames of the path.
    pub len: usize,
    /// The frames' keys, outermost first.
    pub keys: [u64; MAX_STACK],
    /// The node of each frame.
    pub nodes: [u32; MAX_STACK],
    /// Whole call stacks recorded before, by hash.
    leaves: [LeafEntry; LEAF_CACHE],
    /// Children found before, by (parent, key): a node with hundreds of children (the
    /// leaf frames of an evaluator function, one per instruction address sampled) is
    /// otherwise searched sibling by sibling, a cache miss each, and that search was a
    /// fifth of the handler's time in call-heavy Python.
    edges: [EdgeEntry; EDGE_CACHE],
}

/// A 64-bit hash of a whole call stack (its keys and their order), for the leaf cache.
/// Each step is a bijection of the running value for a given key, so distinct stacks
/// collide only by chance (about 2^-64 per pair); a hit is checked against the innermost
/// frame's key as well.
#[inline]
fn stack_hash(stack: &[u64]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (stack.len() as u64).wrapping_mul(K);
    for &key in stack {
        h = (h.rotate_left(26) ^ key).wrapping_mul(K);
    }
    h ^ (h >> 32)
}

/// All trace trees of the process.
///
/// A node's children are a linked list, searched sibling by sibling; a node with many
/// children (a dispatch loop calling thousands of functions, an evaluator's leaf frames
/// one per instruction sampled) also has them in the child index, a hash table of
/// `(parent, child)` pairs keyed by the parent and the child's frame key, so that finding
/// a child does not take longer as the tree grows (issue 39: on a program calling 3,000
/// functions in random chains, the handler's mean time grew to 25 µs at 1 kHz, a cache
/// miss per sibling passed).
pub struct Trees {
    nodes: Pool<Node>,
    /// The child index: `parent << 32 | child` per entry, 0 = empty. Written by each tree's
    /// owner for its own nodes (claimed by compare-and-swap: the trees share it).
    index: ZeroedArray<AtomicU64>,
    /// Set when an insertion found no free entry within [`INDEX_PROBES`]: from then on a
    /// child missing from the index is looked for in its parent's list too.
    index_full: AtomicBool,
}

/// What the child index says of a `(parent, key)`.
enum Indexed {
    /// The child.
    Found(u32),
    /// No such child (the parent's children are all indexed).
    Absent,
    /// Not known: the index gave up or is full; search the list.
    Unknown,
}

impl Trees {
    /// Reserves room for `capacity` nodes (40 bytes each, resident only when used) and the
    /// child index.
    pub fn new(capacity: usize) -> Option<Trees> {
        Some(Trees {
            nodes: Pool::new(capacity)?,
            index: ZeroedArray::new(CHILD_INDEX)?,
            index_full: AtomicBool::new(false),
        })
    }

    /// The first entry to probe for the child of `parent` with `key`.
    #[inline]
    fn index_slot(parent: u32, key: u64) -> usize {
        // Another multiplier than the edge cache's, so that entries that collide there do
        // not collide here too.
        const K: u64 = 0xff51_afd7_ed55_8ccd;
        let hash = (key ^ u64::from(parent).rotate_left(32)).wrapping_mul(K);
        (hash >> (64 - CHILD_INDEX.trailing_zeros())) as usize
    }

    /// Looks up the child of `parent` with `key` in the child index.
    fn index_find(&self, parent: u32, key: u64) -> Indexed {
        let mut slot = Self::index_slot(parent, key);
        for _ in 0..INDEX_PROBES {
            let entry = self.index[slot].load(Ordering::Acquire);
            if entry == 0 {
                return if self.index_full.load(Ordering::Relaxed) {
                    Indexed::Unknown
                } else {
                    Indexed::Absent
                };
            }
            let child = entry as u32;
            if (entry >> 32) as u32 == parent && self.node(child).key.load(Ordering::Relaxed) == key
            {
                return Indexed::Found(child);
            }
            slot = (slot + 1) & (CHILD_INDEX - 1);
        }
        Indexed::Unknown
    }

    /// Enters `child` of `parent` in the child index; when no entry is free within
    /// [`INDEX_PROBES`], marks the index full instead.
    fn index_insert(&self, parent: u32, child: u32) {
        let key = self.node(child).key.load(Ordering::Relaxed);
        let entry = u64::from(parent) << 32 | u64::from(child);
        let mut slot = Self::index_slot(parent, key);
        for _ in 0..INDEX_PROBES {
            let cell = &self.index[slot];
            if cell.load(Ordering::Relaxed) == 0
                && cell
                    .compare_exchange(0, entry, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            slot = (slot + 1) & (CHILD_INDEX - 1);
        }
        self.index_full.store(true, Ordering::Relaxed);
    }

    /// A new empty tree; returns its root node, or `None` when the pool is full.
    /// Async-signal-safe.
    pub fn new_root(&self) -> Option<u32> {
        let root = self.nodes.alloc()?;
        self.init(root, 0);
        Some(root)
    }

    /// Sets every field of a freshly allocated node (the pool may hand out stale memory
    /// after a reset).
    fn init(&self, index: u32, key: u64) {
        let node = self.node(index);
        node.key.store(key, Ordering::Relaxed);
        node.first_child.store(0, Ordering::Relaxed);
        node.next_sibling.store(0, Ordering::Relaxed);
        node.samples.store(0, Ordering::Relaxed);
        node.ticks.store(0, Ordering::Relaxed);
        node.memory.store(0, Ordering::Relaxed);
        node.children.store(0, Ordering::Relaxed);
    }

    /// The node at `index`.
    #[inline(always)]
    pub fn node(&self, index: u32) -> &Node {
        // SAFETY: indexes come from this pool; nodes are never freed.
        unsafe { &*self.nodes.at(index) }
    }

    /// Counts `samples` signals standing for `ticks` ticks whose call stack is `stack`
    /// (outermost frame first) into the tree at `root`, on the node of the innermost frame,
    /// and returns that node. Returns `None` (counting nothing) when the node pool is full.
    /// Async-signal-safe; must only be called by the tree's owning thread.
    pub fn record(&self, root: u32, stack: &[u64], samples: u64, ticks: u64) -> Option<u32> {
        let mut parent = root;
        for &key in stack {
            parent = self.child(parent, key)?;
        }
        self.count(parent, samples, ticks);
        Some(parent)
    }

    /// Adds `samples` signals and `ticks` ticks to the self counts of node `index`.
    #[inline]
    fn count(&self, index: u32, samples: u64, ticks: u64) {
        let node = self.node(index);
        node.samples.fetch_add(samples, Ordering::Relaxed);
        node.ticks.fetch_add(ticks, Ordering::Relaxed);
    }

    /// Like [`Trees::record`], using what `memo` remembers of the thread's earlier samples
    /// in the same tree, and updating it. Consecutive samples of a thread repeat whole
    /// call stacks, or at least share most of their outer frames, and looking their frames
    /// up again would touch one node (a likely cache miss after milliseconds of the
    /// program's own work) per frame and per sibling passed:
    /// - a call stack recorded before is found in the leaf cache by its hash, and only its
    ///   innermost node is touched;
    /// - otherwise the lookup starts below the frames the stack shares with the previous
    ///   path that missed the leaf cache.
    ///
    /// The two caches are used from the thread's [`MEMO_WARMUP`]th lookup on.
    ///
    /// Async-signal-safe; tree owner only.
    pub fn record_from(
        &self,
        memo: &mut PathMemo,
        root: u32,
        stack: &[u64],
        samples: u64,
        ticks: u64,
    ) -> Option<u32> {
        let leaf = self.find_from(memo, root, stack)?;
        self.count(leaf, samples, ticks);
        Some(leaf)
    }

    /// The node of `stack`'s innermost frame in the tree at `root`, inserted if new, found
    /// as [`Trees::record_from`] finds it; counts nothing. `None` when the node pool is
    /// full. Async-signal-safe; tree owner only.
    pub fn find_from(&self, memo: &mut PathMemo, root: u32, stack: &[u64]) -> Option<u32> {
        let stack = &stack[..stack.len().min(memo.keys.len())];
        if memo.root.load(Ordering::Relaxed) != root {
            memo.root.store(root, Ordering::Relaxed);
            memo.len = 0;
            memo.epoch = memo.epoch.wrapping_add(1).max(1);
        }
        let cached = memo.lookups >= MEMO_WARMUP;
        if !cached {
            memo.lookups += 1;
        }
        let hash = stack_hash(stack);
        let slot = (hash >> (64 - LEAF_CACHE.trailing_zeros())) as usize;
        if cached {
            let entry = memo.leaves[slot];
            if let Some(&innermost) = stack.last() {
                if entry.epoch == memo.epoch
                    && entry.hash == hash
                    && self.node(entry.node).key.load(Ordering::Relaxed) == innermost
                {
                    return Some(entry.node);
                }
            }
        }
        let n = memo.len.min(stack.len());
        let mut common = 0;
        while common < n && memo.keys[common] == stack[common] {
            common += 1;
        }
        let mut parent = if common == 0 {
            root
        } else {
            memo.nodes[common - 1]
        };
        for (i, &key) in stack.iter().enumerate().skip(common) {
            let found = if cached {
                self.child_cached(memo, parent, key)
            } else {
                self.child(parent, key)
            };
            let Some(child) = found else {
                memo.len = i;
                return None;
            };
            memo.keys[i] = key;
            memo.nodes[i] = child;
            parent = child;
        }
        memo.len = stack.len();
        if cached {
            memo.leaves[slot] = LeafEntry {
                hash,
                node: parent,
                epoch: memo.epoch,
            };
        }
        Some(parent)
    }

    /// [`Trees::child`] through `memo`'s edge cache. Nodes are never removed from a tree
    /// while its epoch lasts, so a cached child stays its parent's.
    #[inline]
    fn child_cached(&self, memo: &mut PathMemo, parent: u32, key: u64) -> Option<u32> {
        let hash = (key ^ u64::from(parent).rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let slot = (hash >> (64 - EDGE_CACHE.trailing_zeros())) as usize;
        let entry = memo.edges[slot];
        if entry.epoch == memo.epoch && entry.parent == parent && entry.key == key {
            return Some(entry.child);
        }
        let child = self.child(parent, key)?;
        memo.edges[slot] = EdgeEntry {
            key,
            parent,
            child,
            epoch: memo.epoch,
        };
        Some(child)
    }

    /// Finds or inserts the child of `parent` with `key`: in the child index when the
    /// parent has [`INDEXED_FANOUT`] children or more, else in its list. Owner only.
    #[inline]
    fn child(&self, parent: u32, key: u64) -> Option<u32> {
        let p = self.node(parent);
        let children = p.children.load(Ordering::Relaxed);
        let listed = if children >= INDEXED_FANOUT {
            match self.index_find(parent, key) {
                Indexed::Found(child) => return Some(child),
                Indexed::Absent => None,
                Indexed::Unknown => self.listed_child(parent, key),
            }
        } else {
            self.listed_child(parent, key)
        };
        if listed.is_some() {
            return listed;
        }
        let fresh = self.nodes.alloc()?;
        self.init(fresh, key);
        let node = self.node(fresh);
        node.next_sibling
            .store(p.first_child.load(Ordering::Relaxed), Ordering::Relaxed);
        p.first_child.store(fresh, Ordering::Release);
        let children = children + 1;
        p.children.store(children, Ordering::Relaxed);
        if children == INDEXED_FANOUT {
            // From now on the parent's children are looked up in the index: all of them.
            let mut cursor = fresh;
            while cursor != 0 {
                self.index_insert(parent, cursor);
                cursor = self.node(cursor).next_sibling.load(Ordering::Relaxed);
            }
        } else if children > INDEXED_FANOUT {
            self.index_insert(parent, fresh);
        }
        Some(fresh)
    }

    /// The child of `parent` with `key` found in its list of children.
    #[inline]
    fn listed_child(&self, parent: u32, key: u64) -> Option<u32> {
        let mut cursor = self.node(parent).first_child.load(Ordering::Acquire);
        while cursor != 0 {
            let node = self.node(cursor);
            if node.key.load(Ordering::Relaxed) == key {
                return Some(cursor);
            }
            cursor = node.next_sibling.load(Ordering::Acquire);
        }
        None
    }

    /// Visits the tree at `root` depth-first; `visit(depth, index, node)` is called for
    /// every node below the root (depth 1 = the outermost frames; `index` the node's, as
    /// [`Trees::node`] takes it).
    pub fn walk(&self, root: u32, visit: &mut impl FnMut(usize, u32, &Node)) {
        let mut stack: Vec<(u32, usize)> = Vec::new();
        let mut child = self.node(root).first_child.load(Ordering::Acquire);
        while child != 0 {
            stack.push((child, 1));
            child = self.node(child).next_sibling.load(Ordering::Acquire);
        }
        while let Some((index, depth)) = stack.pop() {
            let node = self.node(index);
            visit(depth, index, node);
            let mut child = node.first_child.load(Ordering::Acquire);
            while child != 0 {
                stack.push((child, depth + 1));
                child = self.node(child).next_sibling.load(Ordering::Acquire);
            }
        }
    }

    /// The keys of the frames from `root` (excluded) down to `leaf`, outermost first:
    /// the call stack of the samples counted at `leaf`. `None` when `leaf` is not in the
    /// tree (nodes have no parent links: this searches the tree depth-first, for
    /// `pyigprof dump`, not for the handler). May run while the owner inserts.
    pub fn path_to(&self, root: u32, leaf: u32) -> Option<Vec<u64>> {
        if root == 0 || leaf == 0 || leaf == root {
            return None;
        }
        // (node, depth) to visit; `path[d]` is the key at depth d + 1 of the current branch.
        let mut stack: Vec<(u32, usize)> = Vec::new();
        let mut path: Vec<u64> = Vec::new();
        let push_children = |stack: &mut Vec<(u32, usize)>, of: u32, depth: usize| {
            let mut child = self.node(of).first_child.load(Ordering::Acquire);
            while child != 0 {
                stack.push((child, depth));
                child = self.node(child).next_sibling.load(Ordering::Acquire);
            }
        };
        push_children(&mut stack, root, 1);
        while let Some((index, depth)) = stack.pop() {
            if depth > MAX_STACK {
                continue;
            }
            path.truncate(depth - 1);
            path.push(self.node(index).key.load(Ordering::Relaxed));
            if index == leaf {
                return Some(path);
            }
            push_children(&mut stack, index, depth + 1);
        }
        None
    }

    /// Nodes in use, of all trees.
    pub fn nodes_used(&self) -> usize {
        self.nodes.len().saturating_sub(1)
    }

    /// Forgets every tree (fork child). Only safe while no thread samples.
    pub fn reset(&self) {
        self.nodes.reset();
        self.index.clear();
        self.index_full.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(trees: &Trees, root: u32) -> Vec<(Vec<u64>, u64, u64)> {
        // Rebuild root-to-leaf paths with their self counts.
        let mut out = Vec::new();
        let mut path: Vec<u64> = Vec::new();
        trees.walk(root, &mut |depth, _, node| {
            path.truncate(depth - 1);
            path.push(node.key.load(Ordering::Relaxed));
            let s = node.samples.load(Ordering::Relaxed);
            if s > 0 {
                out.push((path.clone(), s, node.ticks.load(Ordering::Relaxed)));
            }
        });
        out.sort();
        out
    }

    #[test]
    fn counts_land_on_the_innermost_frame_and_prefixes_are_shared() {
        let trees = Trees::new(1000).unwrap();
        let root = trees.new_root().unwrap();
        assert!(trees.record(root, &[1, 2, 3], 1, 1).is_some());
        assert!(trees.record(root, &[1, 2, 3], 1, 4).is_some());
        assert!(trees.record(root, &[1, 2], 1, 1).is_some());
        assert!(trees.record(root, &[1, 5], 1, 2).is_some());
        assert_eq!(
            paths(&trees, root),
            vec![
                (vec![1, 2], 1, 1),
                (vec![1, 2, 3], 2, 5),
                (vec![1, 5], 1, 2)
            ]
        );
        // root + nodes 1, 2, 3, 5
        assert_eq!(trees.nodes_used(), 5);
    }

    #[test]
    fn the_path_to_a_leaf_is_the_stack_its_samples_had() {
        let trees = Trees::new(1000).unwrap();
        let root = trees.new_root().unwrap();
        let other = trees.new_root().unwrap();
        trees.record(root, &[1, 2, 3], 1, 1).unwrap();
        let leaf = trees.record(root, &[1, 4, 5, 6], 1, 1).unwrap();
        trees.record(root, &[1, 4, 7], 1, 1).unwrap();
        let short = trees.record(root, &[1], 1, 1).unwrap();
        assert_eq!(trees.path_to(root, leaf), Some(vec![1, 4, 5, 6]));
        assert_eq!(trees.path_to(root, short), Some(vec![1]));
        let elsewhere = trees.record(other, &[9, 8], 1, 1).unwrap();
        assert_eq!(trees.path_to(root, elsewhere), None);
        assert_eq!(trees.path_to(root, root), None);
    }

    /// A memo past its warm-up, which uses its caches from the first lookup.
    fn warm_memo() -> Box<PathMemo> {
        // SAFETY: all-zero is a valid empty memo; boxed, it is too large for the stack.
        let mut memo: Box<PathMemo> = unsafe { Box::new(std::mem::zeroed()) };
        memo.lookups = MEMO_WARMUP;
        memo
    }

    #[test]
    fn recording_from_the_previous_path_gives_the_same_tree() {
        // A memo that has not warmed up, then one that has.
        for warm in [false, true] {
            recording_from_the_previous_path_gives_the_same_tree_with(warm);
        }
    }

    fn recording_from_the_previous_path_gives_the_same_tree_with(warm: bool) {
        // The same stacks, recorded with and without the memo, in trees of one pool.
        let stacks: [&[u64]; 7] = [
            &[1, 2, 3],
            &[1, 2, 3],
            &[1, 2, 4, 5],
            &[1, 2],
            &[1, 6],
            &[],
            &[1, 2, 4, 5, 7],
        ];
        let trees = Trees::new(100).unwrap();
        let plain = trees.new_root().unwrap();
        let memoized = trees.new_root().unwrap();
        let other = trees.new_root().unwrap();
        let mut memo = warm_memo();
        if !warm {
            memo.lookups = 0;
        }
        for (i, stack) in stacks.iter().enumerate() {
            let a = trees.record(plain, stack, 1, i as u64).unwrap();
            let b = trees
                .record_from(&mut memo, memoized, stack, 1, i as u64)
                .unwrap();
            assert_eq!(
                trees.node(a).key.load(Ordering::Relaxed),
                trees.node(b).key.load(Ordering::Relaxed)
            );
            // A sample in another tree must not reuse this tree's path.
            trees.record_from(&mut memo, other, &[9], 1, 1).unwrap();
        }
        assert_eq!(paths(&trees, plain), paths(&trees, memoized));
        assert_eq!(paths(&trees, other), vec![(vec![9], 7, 7)]);
        // A full pool keeps the memo to the prefix that exists.
        let small = Trees::new(4).unwrap();
        let root = small.new_root().unwrap();
        assert!(small
            .record_from(&mut memo, root, &[1, 2, 3, 4], 1, 1)
            .is_none());
        assert_eq!(memo.len, 2);
        assert!(small.record_from(&mut memo, root, &[1, 2], 1, 1).is_some());
        assert_eq!(paths(&small, root), vec![(vec![1, 2], 1, 1)]);
    }

    #[test]
    fn a_repeated_call_stack_is_counted_on_its_node_and_stale_entries_are_never_used() {
        let trees = Trees::new(100).unwrap();
        let root = trees.new_root().unwrap();
        let mut memo = warm_memo();
        let first = trees
            .record_from(&mut memo, root, &[1, 2, 3], 1, 1)
            .unwrap();
        trees.record_from(&mut memo, root, &[1, 4], 1, 1).unwrap();
        let used = trees.nodes_used();
        // Found by its hash: same node, nothing inserted, and the previous path (which the
        // next miss starts from) is still the one that missed.
        assert_eq!(
            trees.record_from(&mut memo, root, &[1, 2, 3], 1, 2),
            Some(first)
        );
        assert_eq!(trees.nodes_used(), used);
        assert_eq!(memo.keys[..memo.len], [1, 4]);
        assert_eq!(
            paths(&trees, root),
            vec![(vec![1, 2, 3], 2, 3), (vec![1, 4], 1, 1)]
        );
        // Trees forgotten (a fork child): node indexes are handed out again over stale
        // nodes. Node 4 held key 3 for [1, 2, 3]; after [7, 3] and [9] it is free again
        // but still holds key 3, and the old entry for [1, 2, 3] points at it.
        trees.reset();
        memo.root.store(0, Ordering::Relaxed);
        let root = trees.new_root().unwrap();
        trees.record_from(&mut memo, root, &[7, 3], 1, 1).unwrap();
        trees
            .record_from(&mut memo, root, &[1, 2, 3], 1, 1)
            .unwrap();
        assert_eq!(
            paths(&trees, root),
            vec![(vec![1, 2, 3], 1, 1), (vec![7, 3], 1, 1)]
        );
    }

    #[test]
    fn a_thread_s_first_samples_leave_the_caches_untouched() {
        // Their pages stay unmapped zero pages until the thread has taken MEMO_WARMUP
        // samples; from then on the stacks it records are remembered.
        let trees = Trees::new(1000).unwrap();
        let root = trees.new_root().unwrap();
        // SAFETY: all-zero is a valid empty memo; boxed, it is too large for the stack.
        let mut memo: Box<PathMemo> = unsafe { Box::new(std::mem::zeroed()) };
        let untouched = |memo: &PathMemo| {
            memo.leaves.iter().all(|e| e.epoch == 0) && memo.edges.iter().all(|e| e.epoch == 0)
        };
        for i in 0..u64::from(MEMO_WARMUP) {
            trees
                .record_from(&mut memo, root, &[1, 2 + i % 5, 10 + i], 1, 1)
                .unwrap();
        }
        assert!(untouched(&memo));
        let leaf = trees
            .record_from(&mut memo, root, &[1, 3, 99], 1, 1)
            .unwrap();
        assert!(!untouched(&memo));
        // Found again through the leaf cache, after a different stack moved the path on.
        trees
            .record_from(&mut memo, root, &[1, 4, 98], 1, 1)
            .unwrap();
        assert_eq!(
            trees.record_from(&mut memo, root, &[1, 3, 99], 1, 1),
            Some(leaf)
        );
        assert_eq!(memo.keys[..memo.len], [1, 4, 98]);
        assert_eq!(trees.node(leaf).samples.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_full_pool_drops_the_sample_instead_of_failing() {
        let trees = Trees::new(4).unwrap();
        let root = trees.new_root().unwrap();
        assert!(trees.record(root, &[1, 2], 1, 1).is_some());
        assert!(trees.record(root, &[7, 8, 9], 1, 1).is_none());
        assert!(trees.record(root, &[1, 2], 1, 1).is_some());
        assert_eq!(paths(&trees, root), vec![(vec![1, 2], 2, 2)]);
    }

    #[test]
    fn a_node_with_thousands_of_children_finds_each_through_the_index() {
        assert_eq!(std::mem::size_of::<Node>(), 40);
        let trees = Trees::new(20_000).unwrap();
        let mut roots = vec![];
        // Two trees (two threads) sharing the index, with children of the same keys.
        for _ in 0..2 {
            let root = trees.new_root().unwrap();
            for key in 1..=5000u64 {
                trees.record(root, &[7, key * 0x1_0001], 1, key).unwrap();
            }
            roots.push(root);
        }
        let used = trees.nodes_used();
        for &root in &roots {
            // Found again, not inserted again: the index knows every child past the eighth.
            for key in (1..=5000u64).rev() {
                trees.record(root, &[7, key * 0x1_0001], 1, 0).unwrap();
            }
            let p = paths(&trees, root);
            assert_eq!(p.len(), 5000);
            assert!(p
                .iter()
                .all(|(path, samples, ticks)| *samples == 2 && *ticks == path[1] / 0x1_0001));
        }
        assert_eq!(trees.nodes_used(), used);
        assert!(!trees.index_full.load(Ordering::Relaxed));
        // A fork child forgets the trees and the index with them.
        trees.reset();
        assert!(trees.index.iter().all(|e| e.load(Ordering::Relaxed) == 0));
        let root = trees.new_root().unwrap();
        for key in 1..=100u64 {
            trees.record(root, &[3, key], 1, 1).unwrap();
        }
        assert_eq!(paths(&trees, root).len(), 100);
    }

    #[test]
    fn a_full_index_falls_back_on_the_lists() {
        let trees = Trees::new(2_000).unwrap();
        let root = trees.new_root().unwrap();
        for key in 1..=500u64 {
            trees.record(root, &[key], 1, 1).unwrap();
        }
        trees.index_full.store(true, Ordering::Relaxed);
        // Children entered before are found in the index; a lookup the index cannot answer
        // searches the list: nothing is inserted twice.
        for e in trees.index.iter() {
            e.store(0, Ordering::Relaxed);
        }
        for key in 1..=500u64 {
            trees.record(root, &[key], 1, 1).unwrap();
        }
        assert_eq!(paths(&trees, root).len(), 500);
        assert!(paths(&trees, root).iter().all(|(_, s, _)| *s == 2));
    }
}
