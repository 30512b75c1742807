//! The library's own heap, apart from the program's.
//!
//! Every allocation of pyigprof's Rust code (symbol tables, module snapshots, the profile
//! being written, per-thread unwinding caches) comes from a private `dlmalloc` heap whose
//! memory is mapped with `mmap`, never from the program's `malloc`. Blocks of ours inside the
//! program's heap change how it behaves: glibc raises its dynamic `M_MMAP_THRESHOLD` when a
//! large `mmap`-ed block is freed, and a long-lived block of ours near the top of the heap
//! keeps `free` from trimming it. Measured on numpy_work (3.11, 100 loops): with pyigprof's
//! small blocks in the program's heap, 88 k page faults and 66 MB peak RSS instead of the
//! program's own 253 k and 43 MB, and 0.14 s of system time instead of 0.41 s: a profile of
//! a program that is not the one being run.
//!
//! The heap is guarded by a spin lock that records the process that holds it: a child made
//! by `fork`/`_Fork` while another thread held it (that thread does not exist in the child)
//! takes it over instead of waiting forever. `fork` itself runs [`prepare_fork`] /
//! [`after_fork_in_parent`] / [`after_fork_in_child`] (registered with `pthread_atfork`), so that the child's copy of the heap is
//! never caught in the middle of an update. The signal handler never allocates.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};

/// The allocator of the library's Rust code: the private heap.
pub struct Allocator;

/// A `dlmalloc` heap behind a spin lock that records the process holding it (see the
/// module docs). `A` is where the heap gets its memory from.
pub struct Heap<A> {
    locked: AtomicBool,
    /// Process id of the holder (valid while `locked`).
    holder: AtomicI32,
    heap: UnsafeCell<dlmalloc::Dlmalloc<A>>,
}

// SAFETY: `heap` is only touched with `locked` held.
unsafe impl<A> Sync for Heap<A> {}

/// The heap of the library's own data.
static OWN: Heap<Mapped> = Heap::new(dlmalloc::Dlmalloc::new_with_allocator(Mapped {
    marked: false,
}));

/// The heap that serves the program's sampled allocations (the memory profiler's,
/// [`crate::record::memory`]): its memory is mapped in 2 MiB-aligned regions marked in
/// `OWNED`, so that `free` tells a sampled block from the program's by one load.
pub static SAMPLED: Heap<Mapped> = Heap::new(dlmalloc::Dlmalloc::new_with_allocator(Mapped {
    marked: true,
}));

/// Whether the library's own heap is held now, by any thread of this process.
/// [`crate::attach::pyigprof_attach`], called by `pyigprof attach`/`dump` in a thread
/// stopped wherever it was, must not allocate while it is: that thread may be the holder
/// (a server's main thread starts a thread per request, and the library's `pthread_create`
/// allocates), and the spin lock would wait for it forever — a `dump` of such a server
/// hung it, once in a few hundred.
pub fn own_heap_held() -> bool {
    OWN.locked.load(Ordering::Acquire)
}

/// Runs `f` with the library's own heap held by the calling thread (tests: a thread
/// stopped inside the library). `f` must not allocate from it.
#[cfg(test)]
pub(crate) fn with_own_heap_held<R>(f: impl FnOnce() -> R) -> R {
    OWN.with(|_| f())
}

fn pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// The process id a holder records, read once (a system call per allocation otherwise) and
/// again in a `fork` child ([`after_fork_in_child`]). A `_Fork` child keeps its parent's:
/// a heap held at the fork then still shows a foreign holder there, and is taken over.
static RECORDED_PID: AtomicI32 = AtomicI32::new(0);

fn recorded_pid() -> i32 {
    match RECORDED_PID.load(Ordering::Relaxed) {
        0 => {
            let p = pid();
            RECORDED_PID.store(p, Ordering::Relaxed);
            p
        }
        p => p,
    }
}

impl<A: dlmalloc::Allocator> Heap<A> {
    const fn new(heap: dlmalloc::Dlmalloc<A>) -> Self {
        Heap {
            locked: AtomicBool::new(false),
            holder: AtomicI32::new(0),
            heap: UnsafeCell::new(heap),
        }
    }

    fn lock(&self) {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins.is_multiple_of(64) {
                if self.holder.load(Ordering::Relaxed) != pid() {
                    // Held by a thread of the parent when this process was forked: it will
                    // never be released here.
                    break;
                }
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            } else {
                std::hint::spin_loop();
            }
        }
        self.holder.store(recorded_pid(), Ordering::Relaxed);
    }

    fn unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }

    /// Runs `f` on the heap with its lock held. `f` must not allocate from the same heap.
    pub fn with<R>(&self, f: impl FnOnce(&mut dlmalloc::Dlmalloc<A>) -> R) -> R {
        self.lock();
        // SAFETY: the lock is held.
        let r = f(unsafe { &mut *self.heap.get() });
        self.unlock();
        r
    }
}

/// Registers [`prepare_fork`], [`after_fork_in_parent`] and [`after_fork_in_child`] with
/// `pthread_atfork` (once per process), before the handlers of code that allocates under
/// its own locks ([`crate::fork_locks`]). Not from a signal handler.
pub fn register_fork_handlers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: registering plain extern "C" functions, once per process.
    ONCE.call_once(|| unsafe {
        libc::pthread_atfork(
            Some(prepare_fork),
            Some(after_fork_in_parent),
            Some(after_fork_in_child),
        );
    });
}

/// `pthread_atfork` prepare handler: holds both heaps across `fork`.
pub extern "C" fn prepare_fork() {
    SAMPLED.lock();
    OWN.lock();
}

/// `pthread_atfork` parent handler: releases the heaps after `fork`.
pub extern "C" fn after_fork_in_parent() {
    OWN.unlock();
    SAMPLED.unlock();
}

/// `pthread_atfork` child handler: records the child's process id, releases the heaps.
pub extern "C" fn after_fork_in_child() {
    let child = pid();
    RECORDED_PID.store(child, Ordering::Relaxed);
    // The parent's pid would read as a holder that does not exist here: a thread spinning
    // while the next one takes the heap (before it records itself) would take it over too.
    for heap in [&OWN.holder, &SAMPLED.holder] {
        heap.store(child, Ordering::Relaxed);
    }
    OWN.unlock();
    SAMPLED.unlock();
}

// SAFETY: every block is allocated from and returned to the one private heap, with the
// layout the caller gives (dlmalloc's contract: the same size and alignment on free).
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        OWN.with(|h| unsafe { h.malloc(layout.size(), layout.align()) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        OWN.with(|h| unsafe { h.calloc(layout.size(), layout.align()) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        OWN.with(|h| unsafe { h.free(ptr, layout.size(), layout.align()) })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        OWN.with(|h| unsafe { h.realloc(ptr, layout.size(), layout.align(), new_size) })
    }
}

/// Granularity of [`OWNED`]: the sampled heap maps whole, aligned regions of this size.
const REGION: usize = 2 << 20;

/// One byte per [`REGION`] of the 47-bit user address space (64 MiB of address space,
/// resident only where read or written), non-zero where the region belongs to the sampled
/// heap. Null until the sampled heap maps its first region.
static OWNED: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());

/// Whether `ptr` lies in memory of the sampled heap ([`SAMPLED`]): one compare and one
/// load, what `free` of every block the program frees costs.
#[inline(always)]
pub fn is_sampled_block(ptr: *const u8) -> bool {
    let map = OWNED.load(Ordering::Relaxed);
    let index = ptr as usize / REGION;
    // SAFETY: the map covers every index below 2^47 / REGION.
    !map.is_null() && index < (1 << 47) / REGION && unsafe { *map.add(index) } != 0
}

/// Where a heap gets its memory: anonymous private mappings, returned whole. For
/// [`SAMPLED`] (`marked`), aligned to and rounded up to 2 MiB regions, and marked in
/// `OWNED` while they are mapped.
pub struct Mapped {
    marked: bool,
}

impl Mapped {
    fn mark(ptr: *mut u8, size: usize, value: u8) {
        let map = OWNED.load(Ordering::Acquire);
        for index in (ptr as usize / REGION)..(ptr as usize + size).div_ceil(REGION) {
            // SAFETY: the map covers user-space indexes; written under the heap's lock.
            unsafe { *map.add(index) = value };
        }
    }

    fn map(bytes: usize) -> Option<usize> {
        crate::mem::map_anonymous(bytes)
    }
}

// SAFETY: regions are fresh private anonymous mappings, returned whole.
unsafe impl dlmalloc::Allocator for Mapped {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        let failed = (std::ptr::null_mut(), 0, 0);
        if !self.marked {
            return match Self::map(size) {
                Some(start) => (start as *mut u8, size, 0),
                None => failed,
            };
        }
        if OWNED.load(Ordering::Acquire).is_null() {
            let Some(map) = crate::mem::map_region((1 << 47) / REGION) else {
                return failed;
            };
            OWNED.store(map, Ordering::Release);
        }
        let size = size.div_ceil(REGION) * REGION;
        let Some(raw) = Self::map(size + REGION) else {
            return failed;
        };
        let start = raw.next_multiple_of(REGION);
        // SAFETY: the unaligned ends of the mapping just made.
        unsafe {
            if start > raw {
                crate::mem::unmap(raw, start - raw);
            }
            let tail = raw + size + REGION - (start + size);
            if tail > 0 {
                crate::mem::unmap(start + size, tail);
            }
        }
        Self::mark(start as *mut u8, size, 1);
        (start as *mut u8, size, 0)
    }

    fn remap(&self, _ptr: *mut u8, _old: usize, _new: usize, _can_move: bool) -> *mut u8 {
        std::ptr::null_mut()
    }

    fn free_part(&self, _ptr: *mut u8, _old: usize, _new: usize) -> bool {
        false
    }

    fn free(&self, ptr: *mut u8, size: usize) -> bool {
        if self.marked {
            // The sampled heap keeps its regions: its pages are given back to the kernel
            // (RSS falls as it would with the program's allocator), but the address space
            // stays the heap's, to be used again without mapping, aligning and marking a
            // region anew for every large sampled block the program allocates and frees
            // (zlib's state, numpy's temporaries). `false` tells dlmalloc to keep it.
            // SAFETY: a region this allocator mapped; its contents are free.
            unsafe { libc::madvise(ptr.cast(), size, libc::MADV_DONTNEED) };
            return false;
        }
        // SAFETY: a region this allocator mapped, whole.
        unsafe { crate::mem::unmap(ptr as usize, size) }
    }

    fn can_release_part(&self, _flags: u32) -> bool {
        false
    }

    fn allocates_zeros(&self) -> bool {
        true
    }

    fn page_size(&self) -> usize {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_grow_shrink_and_keep_their_bytes() {
        let a = Allocator;
        let small = Layout::from_size_align(1000, 8).unwrap();
        // SAFETY: layouts of non-zero size; every block is freed with its layout.
        unsafe {
            let p = a.alloc_zeroed(small);
            assert!(!p.is_null() && *p == 0);
            p.write_bytes(7, 1000);
            // small -> large -> larger -> small, the first 1000 bytes kept throughout
            let p = a.realloc(p, small, 100_000);
            let large = Layout::from_size_align(100_000, 8).unwrap();
            assert_eq!(*p.add(999), 7);
            let p = a.realloc(p, large, 5_000_000);
            let larger = Layout::from_size_align(5_000_000, 8).unwrap();
            assert_eq!(*p.add(999), 7);
            *p.add(4_999_999) = 1;
            let p = a.realloc(p, larger, 500);
            assert_eq!(*p.add(499), 7);
            a.dealloc(p, Layout::from_size_align(500, 8).unwrap());
            let z = a.alloc_zeroed(large);
            assert_eq!(*z.add(99_999), 0);
            a.dealloc(z, large);
            // Over-aligned blocks.
            let page = Layout::from_size_align(3000, 4096).unwrap();
            let q = a.alloc(page);
            assert!(!q.is_null() && (q as usize).is_multiple_of(4096));
            a.dealloc(q, page);
        }
    }

    #[test]
    fn a_fork_child_takes_over_a_heap_its_parent_held() {
        // Another thread holds the heap while this one forks (no atfork handlers in the
        // test binary): the child allocates anyway instead of waiting forever.
        // (The holder must not allocate while it holds the heap: no channel.)
        static HELD: AtomicBool = AtomicBool::new(false);
        let holder = std::thread::spawn(|| {
            OWN.lock();
            HELD.store(true, Ordering::Release);
            std::thread::sleep(std::time::Duration::from_millis(300));
            OWN.unlock();
        });
        while !HELD.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        // SAFETY: the child only allocates, frees and exits.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let v = vec![7u8; 1000];
            let ok = v.iter().all(|&b| b == 7);
            drop(v);
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        assert!(child > 0);
        let mut status = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
            if r == child {
                break;
            }
            if std::time::Instant::now() > deadline {
                // SAFETY: our own child.
                unsafe { libc::kill(child, libc::SIGKILL) };
                panic!("the fork child waited for a heap lock nobody would release");
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status}"
        );
        holder.join().unwrap();
    }
}
