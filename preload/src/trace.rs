//! The trace tree: IgProf's `IgProfTrace` idea. Each thread owns one tree; a node is one
//! frame of a call stack, keyed by a [`FrameKey`](crate::frames) value, with the counters of
//! the samples whose stack ended exactly there (self counts). Cumulative counts are derived
//! when the profile is read.
//!
//! Nodes live in one [`Pool`] mapped before sampling. Only the thread that owns a tree
//! inserts into it (from its own signal handler), so insertion needs no lock; links are
//! published with release stores so that a reader on another thread sees whole nodes.

use crate::mem::Pool;
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
    fn a_full_pool_drops_the_sample_instead_of_failing() {
        let trees = Trees::new(4).unwrap();
        let root = trees.new_root().unwrap();
        assert!(trees.record(root, &[1, 2], 1, 1).is_some());
        assert!(trees.record(root, &[7, 8, 9], 1, 1).is_none());
        assert!(trees.record(root, &[1, 2], 1, 1).is_some());
        assert_eq!(paths(&trees, root), vec![(vec![1, 2], 2, 2)]);
    }
}
