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
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The allocator of the library's Rust code: the private heap.
pub struct Allocator;

struct Heap {
    locked: AtomicBool,
    /// Process id of the holder (valid while `locked`).
    holder: AtomicI32,
    heap: UnsafeCell<dlmalloc::Dlmalloc>,
}

// SAFETY: `heap` is only touched with `locked` held.
unsafe impl Sync for Heap {}

static HEAP: Heap = Heap {
    locked: AtomicBool::new(false),
    holder: AtomicI32::new(0),
    heap: UnsafeCell::new(dlmalloc::Dlmalloc::new()),
};

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

fn lock() {
    let mut spins = 0u32;
    while HEAP
        .locked
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins.is_multiple_of(64) {
            if HEAP.holder.load(Ordering::Relaxed) != pid() {
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
    HEAP.holder.store(recorded_pid(), Ordering::Relaxed);
}

fn unlock() {
    HEAP.locked.store(false, Ordering::Release);
}

fn with_heap<R>(f: impl FnOnce(&mut dlmalloc::Dlmalloc) -> R) -> R {
    lock();
    // SAFETY: the lock is held.
    let r = f(unsafe { &mut *HEAP.heap.get() });
    unlock();
    r
}

/// `pthread_atfork` prepare handler: holds the heap across `fork`.
pub extern "C" fn prepare_fork() {
    lock();
}

/// `pthread_atfork` parent handler: releases the heap after `fork`.
pub extern "C" fn after_fork_in_parent() {
    unlock();
}

/// `pthread_atfork` child handler: records the child's process id, releases the heap.
pub extern "C" fn after_fork_in_child() {
    let child = pid();
    RECORDED_PID.store(child, Ordering::Relaxed);
    // The parent's pid would read as a holder that does not exist here: a thread spinning
    // while the next one takes the heap (before it records itself) would take it over too.
    HEAP.holder.store(child, Ordering::Relaxed);
    unlock();
}

// SAFETY: every block is allocated from and returned to the one private heap, with the
// layout the caller gives (dlmalloc's contract: the same size and alignment on free).
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        with_heap(|h| unsafe { h.malloc(layout.size(), layout.align()) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        with_heap(|h| unsafe { h.calloc(layout.size(), layout.align()) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        with_heap(|h| unsafe { h.free(ptr, layout.size(), layout.align()) })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        with_heap(|h| unsafe { h.realloc(ptr, layout.size(), layout.align(), new_size) })
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
            lock();
            HELD.store(true, Ordering::Release);
            std::thread::sleep(std::time::Duration::from_millis(300));
            unlock();
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
