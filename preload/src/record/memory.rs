//! The memory counters: what the allocations the memory profiler samples add to the trace
//! tree, and the blocks that serve them.
//!
//! A sampled allocation (chosen by [`crate::sources::allocations`]) is served from the
//! profiler's sampled heap ([`crate::alloc::SAMPLED`]), with a `Header` in front of the
//! block that says which trace-tree node it was counted on and what it stands for, so
//! that its `free` — from any thread, through any allocator function — takes it off
//! that node's live counts. Blocks the program gets from its own allocator are never
//! looked up: `free` tells them apart by address ([`crate::alloc::is_sampled_block`]).
//!
//! The counters are IgProf's (`src/profile-mem.cc`, `src/profile-trace.h`), per node of
//! the trace tree, in bytes:
//! - `MEM_TOTAL`: allocations and bytes allocated;
//! - `MEM_LIVE`: blocks and bytes allocated and not freed, with the node's peak of live
//!   bytes. Frozen when the program's own code ends ([`freeze_live`]), so that the
//!   interpreter's finalisation, which frees what the program held, leaves it as the
//!   program left it;
//! - `MEM_MAX`: the largest single allocation;
//! - `MEM_LIVE_PEAK` (pyigprof's): the blocks and bytes each node held at the moment the
//!   whole process's live bytes (as sampled) peaked.
//!
//! With sampling, counts and bytes are unbiased estimates: each sampled allocation stands
//! for `1/p` allocations and `size/p` bytes, where `p` is its probability of being sampled.
//! Every update happens under the sampled heap's lock (each sampled allocation and free
//! takes it anyway), which keeps the process-wide live total and the peak exact.

use crate::alloc::SAMPLED;
use crate::mem::Pool;
use crate::record::trace::Trees;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// The memory counters of one trace-tree node (bytes, and estimated calls). All-zero is
/// a valid empty record.
#[repr(C)]
#[derive(Default)]
pub struct MemCounts {
    /// `MEM_TOTAL` count: allocations.
    pub total_calls: AtomicU64,
    /// `MEM_TOTAL` amount: bytes allocated.
    pub total_bytes: AtomicU64,
    /// `MEM_MAX`: the largest single allocation, bytes.
    pub max_bytes: AtomicU64,
    /// `MEM_LIVE` count: blocks not freed.
    pub live_calls: AtomicU64,
    /// `MEM_LIVE` amount: bytes not freed.
    pub live_bytes: AtomicU64,
    /// `MEM_LIVE` peak: the most bytes this node held at once.
    pub live_peak: AtomicU64,
    /// `live_calls` when the process's live bytes last peaked (valid when `last_change`
    /// is after that moment, see [`MemCounts::at_peak`]).
    at_peak_calls: AtomicU64,
    /// `live_bytes` then.
    at_peak_bytes: AtomicU64,
    /// Sequence number ([`State::sequence`]) of this node's latest live change.
    last_change: AtomicU64,
}

impl MemCounts {
    /// `MEM_LIVE_PEAK`: (blocks, bytes) this node held when the process's live bytes
    /// peaked. A node's live counts are copied aside the first time they change after a
    /// peak; one unchanged since then still holds what it held at the peak.
    pub fn at_peak(&self) -> (u64, u64) {
        if self.last_change.load(Ordering::Relaxed) <= STATE.peak_sequence.load(Ordering::Relaxed) {
            (
                self.live_calls.load(Ordering::Relaxed),
                self.live_bytes.load(Ordering::Relaxed),
            )
        } else {
            (
                self.at_peak_calls.load(Ordering::Relaxed),
                self.at_peak_bytes.load(Ordering::Relaxed),
            )
        }
    }

    fn init(&self) {
        for field in [
            &self.total_calls,
            &self.total_bytes,
            &self.max_bytes,
            &self.live_calls,
            &self.live_bytes,
            &self.live_peak,
            &self.at_peak_calls,
            &self.at_peak_bytes,
            &self.last_change,
        ] {
            field.store(0, Ordering::Relaxed);
        }
    }

    /// Adds `calls` blocks and `bytes` bytes (negative: taken off) to the live counts at
    /// sequence number `sequence`, keeping the value at the last peak first.
    fn change_live(&self, calls: i64, bytes: i64, sequence: u64) {
        if self.last_change.load(Ordering::Relaxed) <= STATE.peak_sequence.load(Ordering::Relaxed) {
            let (c, b) = (
                self.live_calls.load(Ordering::Relaxed),
                self.live_bytes.load(Ordering::Relaxed),
            );
            self.at_peak_calls.store(c, Ordering::Relaxed);
            self.at_peak_bytes.store(b, Ordering::Relaxed);
        }
        self.last_change.store(sequence, Ordering::Relaxed);
        let add = |field: &AtomicU64, by: i64| {
            let now = field.load(Ordering::Relaxed).saturating_add_signed(by);
            field.store(now, Ordering::Relaxed);
            now
        };
        add(&self.live_calls, calls);
        let live = add(&self.live_bytes, bytes);
        self.live_peak.fetch_max(live, Ordering::Relaxed);
    }
}

/// The process-wide state of the memory counters.
struct State {
    /// Memory counters, indexed by [`crate::record::trace::Node::memory`].
    counts: std::sync::OnceLock<Pool<MemCounts>>,
    /// Bytes live now (sampled estimate).
    live: AtomicU64,
    /// The most bytes live at once.
    peak: AtomicU64,
    /// Incremented at every change of live counts.
    sequence: AtomicU64,
    /// `sequence` when `peak` was reached.
    peak_sequence: AtomicU64,
    /// Live counts no longer change: the program's own code has ended.
    frozen: AtomicBool,
    /// Incremented in every fork child: blocks of an older generation were counted in
    /// the parent's trees and are freed without accounting.
    generation: AtomicU32,
}

static STATE: State = State {
    counts: std::sync::OnceLock::new(),
    live: AtomicU64::new(0),
    peak: AtomicU64::new(0),
    sequence: AtomicU64::new(0),
    peak_sequence: AtomicU64::new(0),
    frozen: AtomicBool::new(false),
    generation: AtomicU32::new(0),
};

/// What the memory profiler did, for the profile's statistics (`#pyigprof memory`,
/// [`crate::record::stats::memory_line`]).
pub struct Activity {
    /// Mean bytes between samples (1: every allocation); 0 while allocations are not
    /// sampled.
    pub rate: AtomicU64,
    /// Allocations recorded, all threads.
    pub sampled: AtomicU64,
    /// Recorded allocations whose call stack could not be recorded (counted nowhere).
    pub unrecorded: AtomicU64,
    /// Bytes allocated, all threads, counted exactly (each thread's count is added up
    /// when it samples, and when the profile is written).
    pub allocated_bytes: AtomicU64,
}

/// The memory profiler's [`Activity`].
pub static ACTIVITY: Activity = Activity {
    rate: AtomicU64::new(0),
    sampled: AtomicU64::new(0),
    unrecorded: AtomicU64::new(0),
    allocated_bytes: AtomicU64::new(0),
};

/// Most nodes with memory counters (72 bytes each, resident only when used).
const CAPACITY: usize = 1 << 22;

/// Maps the memory counters' pool. Returns false when the kernel refuses the mapping.
pub fn init() -> bool {
    if STATE.counts.get().is_some() {
        return true;
    }
    match Pool::new(CAPACITY) {
        Some(pool) => STATE.counts.set(pool).is_ok() || STATE.counts.get().is_some(),
        None => false,
    }
}

/// The memory counters of the node, `None` when it has none.
pub fn counts_of(memory: u32) -> Option<&'static MemCounts> {
    let pool = STATE.counts.get()?;
    // SAFETY: indexes come from this pool and are never freed.
    (memory != 0).then(|| unsafe { &*pool.at(memory) })
}

/// The process's live bytes now and at their peak (sampled estimates).
pub fn live_and_peak() -> (u64, u64) {
    (
        STATE.live.load(Ordering::Relaxed),
        STATE.peak.load(Ordering::Relaxed),
    )
}

/// Whether [`freeze_live`] has run.
pub fn frozen() -> bool {
    STATE.frozen.load(Ordering::Relaxed)
}

/// Freezes the live counts: frees and allocations from now on change `MEM_TOTAL` and
/// `MEM_MAX` only. Called when the program's own code has ended (before the interpreter
/// frees its objects).
pub fn freeze_live() {
    SAMPLED.with(|_| STATE.frozen.store(true, Ordering::Relaxed));
}

/// Forgets every count (a fork child, after the trace trees were forgotten): blocks
/// allocated before are freed without accounting.
pub fn reset() {
    if let Some(pool) = STATE.counts.get() {
        pool.reset();
    }
    STATE.generation.fetch_add(1, Ordering::Relaxed);
    for field in [
        &STATE.live,
        &STATE.peak,
        &STATE.sequence,
        &STATE.peak_sequence,
    ] {
        field.store(0, Ordering::Relaxed);
    }
    STATE.frozen.store(false, Ordering::Relaxed);
    for counter in [
        &ACTIVITY.sampled,
        &ACTIVITY.unrecorded,
        &ACTIVITY.allocated_bytes,
    ] {
        counter.store(0, Ordering::Relaxed);
    }
}

/// What one sampled allocation stands for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weight {
    /// Estimated allocations (1 when every allocation of this size is recorded).
    pub calls: u64,
    /// Estimated bytes.
    pub bytes: u64,
}

/// Written in front of every sampled block (40 bytes; the block's alignment is at least
/// 16).
#[repr(C)]
struct Header {
    /// Trace-tree node the block was counted on; 0 = none (not counted).
    node: u32,
    /// [`State::generation`] at allocation.
    generation: u32,
    /// Bytes the program asked for.
    size: u64,
    /// What the block stands for in the live counts.
    live: Weight,
    /// Bytes from the start of the heap's block to the program's pointer.
    offset: u32,
    /// Alignment the heap's block was asked for.
    align: u32,
}

/// Bytes in front of a block with alignment `align`.
fn offset_for(align: usize) -> usize {
    std::mem::size_of::<Header>().next_multiple_of(align)
}

/// Allocates a sampled block of `size` bytes aligned to `align` (a power of two; at least
/// 16 is given), zeroed if `zeroed`, and counts it on trace-tree node `node` of `trees`
/// (0 = not counted) with `weight`. Null when the heap cannot map memory (the caller then
/// serves the allocation from the program's allocator).
pub fn allocate(
    trees: &Trees,
    node: u32,
    size: usize,
    align: usize,
    zeroed: bool,
    weight: Weight,
) -> *mut u8 {
    let align = align.max(16);
    let offset = offset_for(align);
    let Some(total) = size.checked_add(offset) else {
        return std::ptr::null_mut();
    };
    if offset > u32::MAX as usize || align > u32::MAX as usize {
        return std::ptr::null_mut();
    }
    SAMPLED.with(|heap| {
        if total >= LARGE {
            let kept = RETAINED.load(Ordering::Relaxed);
            RETAINED.store(kept.saturating_sub(total), Ordering::Relaxed);
        }
        // SAFETY: a non-zero size and a power-of-two alignment.
        let base = unsafe {
            if zeroed {
                heap.calloc(total, align)
            } else {
                heap.malloc(total, align)
            }
        };
        if base.is_null() {
            return base;
        }
        // SAFETY: offset <= total bytes of the fresh block; the header is 16-aligned.
        let user = unsafe { base.add(offset) };
        let counted = node != 0 && count(trees, node, size as u64, weight);
        let header = Header {
            node: if counted { node } else { 0 },
            generation: STATE.generation.load(Ordering::Relaxed),
            size: size as u64,
            live: weight,
            offset: offset as u32,
            align: align as u32,
        };
        // SAFETY: the header fits in the offset in front of `user`.
        unsafe { header_of(user).write(header) };
        if counted && !STATE.frozen.load(Ordering::Relaxed) {
            change_live(trees, node, weight.calls as i64, weight.bytes as i64);
        }
        user
    })
}

/// The header in front of sampled block `user`.
fn header_of(user: *mut u8) -> *mut Header {
    // SAFETY: every sampled block has its header right in front of it.
    unsafe { user.sub(std::mem::size_of::<Header>()).cast::<Header>() }
}

/// Bytes the program asked for when it allocated sampled block `user`.
///
/// # Safety
/// `user` must be a live sampled block ([`crate::alloc::is_sampled_block`]).
pub unsafe fn size_of_block(user: *mut u8) -> usize {
    // SAFETY: the caller's guarantee.
    unsafe { (*header_of(user)).size as usize }
}

/// Frees sampled block `user`, taking it off its node's live counts.
///
/// # Safety
/// `user` must be a live sampled block ([`crate::alloc::is_sampled_block`]).
pub unsafe fn free(trees: &Trees, user: *mut u8) {
    // SAFETY: the caller's guarantee.
    let header = unsafe { header_of(user).read() };
    SAMPLED.with(|heap| {
        if header.node != 0
            && header.generation == STATE.generation.load(Ordering::Relaxed)
            && !STATE.frozen.load(Ordering::Relaxed)
        {
            change_live(
                trees,
                header.node,
                -(header.live.calls as i64),
                -(header.live.bytes as i64),
            );
        }
        let offset = header.offset as usize;
        let (base, total) = (user.wrapping_sub(offset), header.size as usize + offset);
        // SAFETY: the block was allocated from this heap with this size and alignment.
        unsafe { heap.free(base, total, header.align as usize) };
        if total >= LARGE {
            let kept = RETAINED.load(Ordering::Relaxed);
            if kept + total <= RETAINED_BUDGET {
                RETAINED.store(kept + total, Ordering::Relaxed);
            } else {
                // The pages inside the freed block go back to the kernel; the first and
                // last page, where dlmalloc keeps the chunk's boundary tags and free-list
                // links, stay. Under the lock: the chunk may be handed out again next.
                let start = (base as usize + 4096).next_multiple_of(4096);
                let end = (base as usize + total - 4096) & !4095;
                if end > start {
                    // SAFETY: free memory of the sampled heap, whose contents nothing reads.
                    unsafe {
                        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED)
                    };
                }
            }
        }
    });
}

/// Sampled blocks of at least this many bytes are large: freed, they keep their pages
/// only within [`RETAINED_BUDGET`].
const LARGE: usize = 1 << 20;

/// Bytes of freed large blocks the sampled heap keeps resident, as glibc keeps up to
/// twice its (dynamic) `mmap` threshold free at the top of its heap: a loop that
/// allocates and frees the same large temporary (numpy's arrays, zlib's state) reuses
/// pages already there instead of faulting them in again each time (×1.47 CPU on 8 MB
/// numpy temporaries when every freed page went back), while what the heap holds beyond
/// what the program holds stays bounded.
const RETAINED_BUDGET: usize = 32 << 20;

/// Bytes of freed large blocks kept resident now (an estimate: a large allocation is
/// taken to reuse them first). Changed with the sampled heap's lock held.
static RETAINED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The memory counters of `node`, made if it has none. Called with the sampled heap's
/// lock held.
fn counts_for(trees: &Trees, node: u32) -> Option<&'static MemCounts> {
    let pool = STATE.counts.get()?;
    let slot = &trees.node(node).memory;
    let mut index = slot.load(Ordering::Acquire);
    if index == 0 {
        index = pool.alloc()?;
        // SAFETY: a fresh index of the pool.
        unsafe { &*pool.at(index) }.init();
        slot.store(index, Ordering::Release);
    }
    counts_of(index)
}

/// Counts an allocation of `size` bytes standing for `weight` on `node`'s `MEM_TOTAL` and
/// `MEM_MAX`. False when the node could get no counters (the pool is full). Lock held.
fn count(trees: &Trees, node: u32, size: u64, weight: Weight) -> bool {
    let Some(counts) = counts_for(trees, node) else {
        return false;
    };
    counts
        .total_calls
        .fetch_add(weight.calls, Ordering::Relaxed);
    counts
        .total_bytes
        .fetch_add(weight.bytes, Ordering::Relaxed);
    counts.max_bytes.fetch_max(size, Ordering::Relaxed);
    true
}

/// Changes `node`'s live counts and the process's live total, noting a new peak. Lock
/// held.
fn change_live(trees: &Trees, node: u32, calls: i64, bytes: i64) {
    let Some(counts) = counts_for(trees, node) else {
        return;
    };
    let sequence = STATE.sequence.fetch_add(1, Ordering::Relaxed) + 1;
    counts.change_live(calls, bytes, sequence);
    let live = STATE
        .live
        .load(Ordering::Relaxed)
        .saturating_add_signed(bytes);
    STATE.live.store(live, Ordering::Relaxed);
    if live > STATE.peak.load(Ordering::Relaxed) {
        STATE.peak.store(live, Ordering::Relaxed);
        STATE.peak_sequence.store(sequence, Ordering::Relaxed);
    }
}

/// Most anonymous mappings of the program's recorded at once (see [`map`]); further ones
/// are counted in `MEM_TOTAL` and `MEM_MAX` but not live.
const MAX_MAPPINGS: usize = 4096;

/// The program's recorded anonymous mappings: start, length, node, generation (start 0 =
/// a free entry). Touched with the sampled heap's lock held.
struct Mappings {
    entries: std::cell::UnsafeCell<[(usize, usize, u32, u32); MAX_MAPPINGS]>,
    /// Entries in use.
    live: AtomicU32,
}

// SAFETY: entries are only touched with the sampled heap's lock held.
unsafe impl Sync for Mappings {}

static MAPPINGS: Mappings = Mappings {
    entries: std::cell::UnsafeCell::new([(0, 0, 0, 0); MAX_MAPPINGS]),
    live: AtomicU32::new(0),
};

/// Counts an anonymous mapping of `len` bytes at `start` that the program made with
/// `mmap` (exactly: mappings are only recorded from 4 MiB up) on `node`, and keeps it
/// live until [`unmap`] takes it off.
pub fn map(trees: &Trees, node: u32, start: usize, len: usize) {
    let weight = Weight {
        calls: 1,
        bytes: len as u64,
    };
    SAMPLED.with(|_| {
        if node == 0 || !count(trees, node, len as u64, weight) {
            return;
        }
        // SAFETY: the lock is held.
        let entries = unsafe { &mut *MAPPINGS.entries.get() };
        let Some(free) = entries.iter_mut().find(|e| e.0 == 0) else {
            return;
        };
        *free = (start, len, node, STATE.generation.load(Ordering::Relaxed));
        MAPPINGS.live.fetch_add(1, Ordering::Relaxed);
        if !STATE.frozen.load(Ordering::Relaxed) {
            change_live(trees, node, 1, len as i64);
        }
    });
}

/// Whether any mapping is recorded: `munmap` looks no further when none is.
#[inline(always)]
pub fn mappings_recorded() -> bool {
    MAPPINGS.live.load(Ordering::Relaxed) != 0
}

/// The program unmaps `[start, start + len)`: recorded mappings that begin inside it are
/// taken off their nodes' live counts, whole (a mapping whose tail alone is unmapped
/// stays counted as it was).
pub fn unmap(trees: &Trees, start: usize, len: usize) {
    SAMPLED.with(|_| {
        // SAFETY: the lock is held.
        let entries = unsafe { &mut *MAPPINGS.entries.get() };
        let generation = STATE.generation.load(Ordering::Relaxed);
        for entry in entries.iter_mut() {
            let (at, bytes, node, born) = *entry;
            if at == 0 || at < start || at - start >= len {
                continue;
            }
            *entry = (0, 0, 0, 0);
            MAPPINGS.live.fetch_sub(1, Ordering::Relaxed);
            if born == generation && !STATE.frozen.load(Ordering::Relaxed) {
                change_live(trees, node, -1, -(bytes as i64));
            }
        }
    });
}
