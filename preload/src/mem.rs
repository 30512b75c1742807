//! Memory mapped before sampling starts, handed out without locks inside the signal handler.
//!
//! Regions are reserved with `mmap(MAP_NORESERVE)`: address space is cheap, and only the
//! pages that are written become resident. Allocation is a single `fetch_add`; nothing is
//! ever freed while the process profiles (a fork child resets the regions it inherits).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Maps `bytes` of zeroed, private, read-write memory that is not backed by swap
/// reservation. Returns `None` when the kernel refuses.
pub fn map_region(bytes: usize) -> Option<*mut u8> {
    map_anonymous(unaligned_length(bytes)).map(|a| a as *mut u8)
}

/// `mmap` of `bytes` of private, anonymous, read-write memory without swap reservation,
/// made with the system call itself: the library's own mappings never reach its `mmap`
/// interposition ([`crate::sources::allocations`]), which records the program's.
pub fn map_anonymous(bytes: usize) -> Option<usize> {
    // SAFETY: an anonymous private mapping; the result is checked.
    let raw = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            0usize,
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0usize,
        )
    };
    // The kernel's errors are -4095..-1.
    (!(-4095..0).contains(&raw)).then_some(raw as usize)
}

/// `munmap` made with the system call itself (see [`map_anonymous`]).
///
/// # Safety
/// `[addr, addr + bytes)` must be a mapping of the library's own that nothing uses.
pub unsafe fn unmap(addr: usize, bytes: usize) -> bool {
    // SAFETY: the caller's guarantee.
    unsafe { libc::syscall(libc::SYS_munmap, addr, bytes) == 0 }
}

/// Huge-page size on x86-64 (the kernel's `PMD_SIZE`), bytes.
const HUGE_PAGE: usize = 2 << 20;

/// `bytes` rounded up to whole pages, plus one page when that is a whole number of huge
/// pages. Linux (6.7 and later; since 6.12 only for lengths that are multiples of
/// `PMD_SIZE`, commit d4148aeab412) places such anonymous mappings at a 2 MiB-aligned
/// address, which leaves a hole of up to 2 MiB above them. The program's next small
/// mappings fill that hole — pymalloc's 1 MiB arenas on either side of a region of ours
/// hundreds of MiB long — and CPython's arena radix tree then needed a second 128 KiB
/// bottom node in 1-2 % of runs (3.14, measured): the program's layout, and heap, changed
/// by the profiler. An unaligned length is placed right below the previous mapping.
fn unaligned_length(bytes: usize) -> usize {
    let page = 4096;
    let bytes = bytes.div_ceil(page) * page;
    if bytes % HUGE_PAGE == 0 {
        bytes + page
    } else {
        bytes
    }
}

/// A fixed array of `len` elements of `T` in a mapped region, all zero at first: the
/// kernel's zero pages, so only the pages written become resident (a 768 KiB cache that a
/// short process touches in a few pages costs those pages, not 192 page faults at
/// start-up). `T` must be valid when all-zero (atomics, integers).
pub struct ZeroedArray<T> {
    base: *const T,
    len: usize,
}

// SAFETY: a shared slice of `T`; Send and Sync as `T` is Sync (atomics).
unsafe impl<T: Sync> Sync for ZeroedArray<T> {}
unsafe impl<T: Sync> Send for ZeroedArray<T> {}

impl<T> ZeroedArray<T> {
    /// Maps `len` zeroed elements. `None` when the kernel refuses.
    pub fn new(len: usize) -> Option<Self> {
        let base = map_region(len.checked_mul(std::mem::size_of::<T>())?.max(1))?;
        Some(ZeroedArray {
            base: base.cast::<T>(),
            len,
        })
    }

    /// Makes every element zero again by giving its pages back to the kernel
    /// (`MADV_DONTNEED`: a private anonymous mapping reads as zero pages afterwards), which
    /// copies nothing in a fork child. Only safe when no other thread uses the array.
    pub fn clear(&self) {
        let bytes = self.len * std::mem::size_of::<T>();
        // SAFETY: the array's own mapping; its elements are valid when zero.
        unsafe {
            libc::madvise(
                self.base as *mut libc::c_void,
                bytes.max(1),
                libc::MADV_DONTNEED,
            )
        };
    }
}

impl<T> std::ops::Deref for ZeroedArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` elements mapped for the life of the array, valid when zero.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }
}

/// A fixed-capacity array of `T` in a reserved region, allocated by bumping an index.
/// Index 0 is never handed out, so that 0 can mean "none" in links between elements.
pub struct Pool<T> {
    base: *mut T,
    capacity: usize,
    next: AtomicUsize,
}

// SAFETY: elements are only written by the thread that allocated them (or after all
// writers have stopped); the allocation index is atomic.
unsafe impl<T> Sync for Pool<T> {}
unsafe impl<T> Send for Pool<T> {}

impl<T> Pool<T> {
    /// Reserves room for `capacity` elements. `T` must be valid when all-zero.
    pub fn new(capacity: usize) -> Option<Self> {
        let base = map_region(capacity * std::mem::size_of::<T>())?.cast::<T>();
        Some(Pool {
            base,
            capacity,
            next: AtomicUsize::new(1),
        })
    }

    /// Allocates one zeroed element and returns its index, or `None` when the pool is full.
    /// Async-signal-safe.
    pub fn alloc(&self) -> Option<u32> {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        if index >= self.capacity {
            self.next.store(self.capacity, Ordering::Relaxed);
            return None;
        }
        Some(index as u32)
    }

    /// A pointer to element `index` (which must have been allocated).
    #[inline(always)]
    pub fn at(&self, index: u32) -> *mut T {
        debug_assert!((index as usize) < self.capacity);
        // SAFETY: index is within the reserved region.
        unsafe { self.base.add(index as usize) }
    }

    /// How many elements have been handed out (plus the unused index 0).
    pub fn len(&self) -> usize {
        self.next.load(Ordering::Acquire).min(self.capacity)
    }

    /// Whether nothing was allocated yet.
    pub fn is_empty(&self) -> bool {
        self.len() <= 1
    }

    /// Forgets every element (a fork child starts afresh). Elements handed out after a
    /// reset hold stale data: the caller initialises every field. Not zeroing keeps the
    /// child from copying every page the parent used. Only safe when no other thread uses
    /// the pool.
    pub fn reset(&self) {
        self.next.store(1, Ordering::Release);
    }
}

/// A byte arena for text captured in the handler (Python names, file names, line tables).
pub struct Bytes {
    base: *mut u8,
    capacity: usize,
    next: AtomicUsize,
}

// SAFETY: as for Pool: bytes are written once by the allocating thread before publication.
unsafe impl Sync for Bytes {}
unsafe impl Send for Bytes {}

impl Bytes {
    /// Reserves `capacity` bytes.
    pub fn new(capacity: usize) -> Option<Self> {
        Some(Bytes {
            base: map_region(capacity)?,
            capacity,
            next: AtomicUsize::new(0),
        })
    }

    /// Allocates `len` bytes and returns their offset, or `None` when full.
    /// Async-signal-safe.
    pub fn alloc(&self, len: usize) -> Option<u32> {
        let offset = self.next.fetch_add(len, Ordering::Relaxed);
        if offset + len > self.capacity || offset + len > u32::MAX as usize {
            return None;
        }
        Some(offset as u32)
    }

    /// The writable bytes at `offset..offset+len`, which the caller allocated.
    #[allow(clippy::mut_from_ref)]
    pub fn slice_mut(&self, offset: u32, len: usize) -> &mut [u8] {
        // SAFETY: callers only pass ranges they allocated; each range has one writer.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(offset as usize), len) }
    }

    /// The bytes at `offset..offset+len`.
    pub fn slice(&self, offset: u32, len: usize) -> &[u8] {
        // SAFETY: as slice_mut; read after the writer published the range.
        unsafe { std::slice::from_raw_parts(self.base.add(offset as usize), len) }
    }
}
