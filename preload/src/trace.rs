//! The trace tree: IgProf's `IgProfTrace` idea. Each thread owns one tree; a node is one
//! frame of a call stack, keyed by a [`FrameKey`](crate::frames) value, with the counters of
//! the samples whose stack ended exactly there (self counts). Cumulative counts are derived
//! when the profile is read.
//!
//! Nodes live in one [`Pool`] mapped before sampling. Only the thread that owns a tree
//! inserts into it (from its own signal handler), so insertion needs no lock; links are
//! published with release stores so that a reader on another thread sees whole nodes.

use crate::mem::Pool;
use crate::threads::MAX_STACK;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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
}

/// The call stack a thread recorded last and the trace-tree node of each of its frames
/// (see [`Trees::record_from`]). All-zero is a valid empty memo.
#[repr(C)]
pub struct PathMemo {
    /// Root of the tree the path is in; 0 = no path (cleared when trees are forgotten).
    pub root: AtomicU32,
    /// Frames of the path.
    pub len: usize,
    /// The frames' keys, outermost first.
    pub keys: [u64; MAX_STACK],
    /// The node of each frame.
    pub nodes: [u32; MAX_STACK],
}

/// All trace trees of the process.
pub struct Trees {
    nodes: Pool<Node>,
}

impl Trees {
    /// Reserves room for `capacity` nodes (48 bytes each, resident only when used).
    pub fn new(capacity: usize) -> Option<Trees> {
        Some(Trees {
            nodes: Pool::new(capacity)?,
        })
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
        let leaf = self.node(parent);
        leaf.samples.fetch_add(samples, Ordering::Relaxed);
        leaf.ticks.fetch_add(ticks, Ordering::Relaxed);
        Some(parent)
    }

    /// Like [`Trees::record`], starting below the frames this stack shares with the stack
    /// `memo` holds (the thread's previous sample in the same tree): consecutive samples of
    /// a thread share most of their outer frames, and looking those up again would touch
    /// one node (a likely cache miss) per frame and per sibling passed. Updates `memo` to
    /// this stack. Async-signal-safe; tree owner only.
    pub fn record_from(
        &self,
        memo: &mut PathMemo,
        root: u32,
        stack: &[u64],
        samples: u64,
        ticks: u64,
    ) -> Option<u32> {
        let stack = &stack[..stack.len().min(memo.keys.len())];
        let mut common = 0;
        if memo.root.load(Ordering::Relaxed) == root {
            let n = memo.len.min(stack.len());
            while common < n && memo.keys[common] == stack[common] {
                common += 1;
            }
        } else {
            memo.root.store(root, Ordering::Relaxed);
        }
        let mut parent = if common == 0 {
            root
        } else {
            memo.nodes[common - 1]
        };
        for (i, &key) in stack.iter().enumerate().skip(common) {
            let Some(child) = self.child(parent, key) else {
                memo.len = i;
                return None;
            };
            memo.keys[i] = key;
            memo.nodes[i] = child;
            parent = child;
        }
        memo.len = stack.len();
        let leaf = self.node(parent);
        leaf.samples.fetch_add(samples, Ordering::Relaxed);
        leaf.ticks.fetch_add(ticks, Ordering::Relaxed);
        Some(parent)
    }

    /// Finds or inserts the child of `parent` with `key`.
    #[inline]
    fn child(&self, parent: u32, key: u64) -> Option<u32> {
        let p = self.node(parent);
        let mut cursor = p.first_child.load(Ordering::Acquire);
        while cursor != 0 {
            let node = self.node(cursor);
            if node.key.load(Ordering::Relaxed) == key {
                return Some(cursor);
            }
            cursor = node.next_sibling.load(Ordering::Acquire);
        }
        let fresh = self.nodes.alloc()?;
        self.init(fresh, key);
        let node = self.node(fresh);
        node.next_sibling
            .store(p.first_child.load(Ordering::Relaxed), Ordering::Relaxed);
        p.first_child.store(fresh, Ordering::Release);
        Some(fresh)
    }

    /// Visits the tree at `root` depth-first; `visit(depth, node)` is called for every node
    /// below the root (depth 1 = the outermost frames).
    pub fn walk(&self, root: u32, visit: &mut impl FnMut(usize, &Node)) {
        let mut stack: Vec<(u32, usize)> = Vec::new();
        let mut child = self.node(root).first_child.load(Ordering::Acquire);
        while child != 0 {
            stack.push((child, 1));
            child = self.node(child).next_sibling.load(Ordering::Acquire);
        }
        while let Some((index, depth)) = stack.pop() {
            let node = self.node(index);
            visit(depth, node);
            let mut child = node.first_child.load(Ordering::Acquire);
            while child != 0 {
                stack.push((child, depth + 1));
                child = self.node(child).next_sibling.load(Ordering::Acquire);
            }
        }
    }

    /// Nodes in use, of all trees.
    pub fn nodes_used(&self) -> usize {
        self.nodes.len().saturating_sub(1)
    }

    /// Forgets every tree (fork child). Only safe while no thread samples.
    pub fn reset(&self) {
        self.nodes.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(trees: &Trees, root: u32) -> Vec<(Vec<u64>, u64, u64)> {
        // Rebuild root-to-leaf paths with their self counts.
        let mut out = Vec::new();
        let mut path: Vec<u64> = Vec::new();
        trees.walk(root, &mut |depth, node| {
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
    fn recording_from_the_previous_path_gives_the_same_tree() {
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
        // SAFETY: all-zero is a valid empty memo; boxed, it is too large for the stack.
        let mut memo: Box<PathMemo> = unsafe { Box::new(std::mem::zeroed()) };
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
    fn a_full_pool_drops_the_sample_instead_of_failing() {
        let trees = Trees::new(4).unwrap();
        let root = trees.new_root().unwrap();
        assert!(trees.record(root, &[1, 2], 1, 1).is_some());
        assert!(trees.record(root, &[7, 8, 9], 1, 1).is_none());
        assert!(trees.record(root, &[1, 2], 1, 1).is_some());
        assert_eq!(paths(&trees, root), vec![(vec![1, 2], 2, 2)]);
    }
}
