//! The library's own heap allocations, kept from changing how the program's `malloc`
//! behaves.
//!
//! glibc's `malloc` serves blocks of 128 KiB and more with `mmap`, and when such a block is
//! freed it raises that threshold to the block's size (`M_MMAP_THRESHOLD` is dynamic, see
//! mallopt(3)). pyigprof reads symbol tables and builds the profile in large temporary
//! buffers: freed through `malloc`, they would raise the threshold for the whole process, and
//! the program's own large allocations (numpy temporaries of a few MB) would then come from
//! the heap instead of fresh mappings — measured: numpy_work's system time fell from 0.44 s
//! to 0.12 s under the preload, a 28 % change in the program's CPU time that is not the
//! program's. So blocks of [`LARGE`] bytes and more are mapped and unmapped here directly;
//! smaller ones go to the system allocator as before.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks of this many bytes or more are mapped directly (below glibc's initial 128 KiB
/// threshold, so none of ours is ever an `mmap`-ed `malloc` block).
pub const LARGE: usize = 64 * 1024;
/// Page size on x86-64 Linux; the alignment every mapping has.
const PAGE: usize = 4096;

/// The allocator of the library's Rust code.
pub struct Allocator;

fn mapped(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= PAGE
}

fn map(size: usize) -> *mut u8 {
    // SAFETY: anonymous private mapping; the result is checked.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        ptr.cast()
    }
}

// SAFETY: every block is either mapped here (size ≥ LARGE, page-aligned, unmapped with the
// same size) or comes from and returns to `System`; `mapped(layout)` tells which, for the
// same layout at allocation and deallocation.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if mapped(layout) {
            map(layout.size())
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if mapped(layout) {
            // Fresh anonymous mappings are zeroed.
            map(layout.size())
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mapped(layout) {
            // SAFETY: a mapping of this size made by `map`.
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees a valid layout for the new size.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (mapped(layout), mapped(new_layout)) {
            // SAFETY: forwarded with the caller's guarantees.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            (true, true) => {
                // SAFETY: a mapping of the old size made by `map`; it may move.
                let moved = unsafe {
                    libc::mremap(ptr.cast(), layout.size(), new_size, libc::MREMAP_MAYMOVE)
                };
                if moved == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    moved.cast()
                }
            }
            _ => {
                // SAFETY: as `alloc`/`dealloc` above, copying the bytes both blocks hold.
                unsafe {
                    let fresh = self.alloc(new_layout);
                    if !fresh.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    fresh
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_grow_shrink_and_keep_their_bytes() {
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
        }
    }
}
