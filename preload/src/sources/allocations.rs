//! The allocator hooks: what happens on `malloc`.
//!
//! The library defines the C allocator's functions (`malloc`, `calloc`, `realloc`,
//! `free`, `posix_memalign`, `aligned_alloc`, `memalign`, `valloc`, `pvalloc`,
//! `reallocarray`, `malloc_usable_size`), which, preloaded, every caller in the process
//! reaches first (glibc's own internal calls included: glibc supports replacing `malloc`
//! this way), and wraps CPython's object and mem allocator domains
//! ([`install_python_allocators`]), whose small blocks pymalloc serves from its arenas
//! without calling `malloc`. Each forwards to the next definition (`dlsym(RTLD_NEXT)`:
//! glibc's, or another preloaded allocator's) unless the allocation is sampled.
//!
//! Sampling is Poisson sampling of bytes, as tcmalloc and jemalloc do it: each thread
//! counts down the bytes it allocates from a threshold drawn from an exponential
//! distribution with mean `R` (`PYIGPROF_MEM_RATE`); the allocation that crosses it is
//! sampled and a new threshold is drawn. An allocation of `s` bytes is then sampled with
//! probability `p = 1 - exp(-s/R)`, independently of every other, and stands for `1/p`
//! allocations and `s/p` bytes: unbiased estimates, whatever the program's pattern of
//! sizes. Allocations of [`ALWAYS_SAMPLED`] bytes or more are always sampled, with weight
//! 1; `R = 1` samples every allocation (IgProf's exact mode).
//!
//! Unsampled allocations cost a thread-local decrement and a compare; `free` of a block
//! the program's allocator served costs one load ([`crate::alloc::is_sampled_block`]).
//! A sampled allocation captures the thread's mixed call stack
//! (`Sampler::allocation_site`, under the signal handler's rules: the
//! program may hold any lock) and is served from the profiler's sampled heap with a header
//! ([`crate::record::memory`]). Allocations the profiler's own code makes while it samples
//! pass straight through.

use crate::capture::unwind::{registers_here, Regs};
use crate::record::memory::{self, Weight, ACTIVITY};
use crate::sources::random::LocalRandom;
use libc::{c_int, c_void};
use std::cell::Cell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};

/// Allocations of at least this many bytes are always sampled, with weight 1: the largest
/// allocations (and so `MEM_MAX`) are exact.
pub const ALWAYS_SAMPLED: usize = 4 << 20;

/// Default mean bytes between samples (`PYIGPROF_MEM_RATE`), as tcmalloc's and jemalloc's
/// heap profilers.
pub const DEFAULT_RATE: u64 = 512 << 10;

/// Whether allocations are sampled (set once the sampler exists).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Starts sampling allocations every `rate` bytes on average (1 = every allocation).
pub fn enable(rate: u64) {
    ACTIVITY.rate.store(rate.max(1), Ordering::Relaxed);
    ENABLED.store(true, Ordering::Release);
}

/// Stops sampling allocations (a fork child that is not profiled). Async-signal-safe.
pub fn disable() {
    ENABLED.store(false, Ordering::Release);
}

/// Whether allocations are sampled.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Mean bytes between samples.
pub fn rate() -> u64 {
    ACTIVITY.rate.load(Ordering::Relaxed)
}

/// Forgets the bytes the thread that forked counted in the parent (in a fork child,
/// after [`memory::reset`]).
pub fn reset_after_fork() {
    let _ = THREAD.try_with(|t| t.countdown.forget());
    INTERPRETER.forget();
}

/// Adds the bytes the calling thread and the interpreter allocated and did not count yet
/// to the exact count ([`memory::Activity::allocated_bytes`]).
pub fn flush_thread_bytes() {
    let _ = THREAD.try_with(|t| t.countdown.flush());
    INTERPRETER.flush();
}

/// Bytes to count down before the next sample, and the bytes counted. All-zero (the
/// initial value) is "not started". Relaxed loads and stores, never read-modify-write:
/// each countdown has one writer at a time (its thread, or the thread holding the GIL).
struct Countdown {
    /// Bytes to allocate before the next sample (≤ 0: the allocation that made it so is
    /// sampled).
    left: AtomicI64,
    /// Sum of the thresholds drawn: `drawn - left` is the bytes allocated.
    drawn: AtomicU64,
    /// Of those, the bytes added to the exact count ([`memory::Activity::allocated_bytes`]).
    flushed: AtomicU64,
}

impl Countdown {
    const fn new() -> Countdown {
        Countdown {
            left: AtomicI64::new(0),
            drawn: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
        }
    }

    /// Counts `size` bytes down; true when the threshold is crossed (or the allocation is
    /// large): the caller then asks [`sample`]. The fast path of every allocation.
    #[inline(always)]
    fn take(&self, size: usize) -> bool {
        let left = self.left.load(Ordering::Relaxed).wrapping_sub(size as i64);
        self.left.store(left, Ordering::Relaxed);
        left <= 0 || size >= ALWAYS_SAMPLED
    }

    /// After [`Countdown::take`] said so: whether this allocation of `size` bytes is
    /// sampled, drawing the next threshold (`draw`) when it crossed the current one.
    fn cross(&self, size: usize, rate: u64, mut draw: impl FnMut() -> u64) -> bool {
        let mut left = self.left.load(Ordering::Relaxed);
        let mut sampled = size >= ALWAYS_SAMPLED || rate <= 1;
        if self.drawn.load(Ordering::Relaxed) == 0 {
            // The first allocation starts the count.
            let first = draw();
            self.drawn.store(first, Ordering::Relaxed);
            left += first as i64;
        }
        if left <= 0 {
            // Crossed: sampled. The distance to the next sample point is again
            // exponential with mean R (the exponential is memoryless), however far past
            // the threshold the allocation went (one of sys.maxsize bytes included); the
            // bytes allocated, `drawn - left`, stay what they were. Exact mode needs no
            // draw: every allocation crosses.
            sampled = true;
            let next = if rate <= 1 { 1 } else { draw() };
            let drawn = self.drawn.load(Ordering::Relaxed);
            self.drawn.store(
                drawn
                    .saturating_add(left.unsigned_abs())
                    .saturating_add(next),
                Ordering::Relaxed,
            );
            left = next as i64;
        }
        self.left.store(left, Ordering::Relaxed);
        self.flush();
        sampled
    }

    /// Adds the bytes counted since the last flush to the exact count.
    fn flush(&self) {
        let allocated = self.allocated();
        let new = allocated.saturating_sub(self.flushed.load(Ordering::Relaxed));
        if new > 0 {
            ACTIVITY.allocated_bytes.fetch_add(new, Ordering::Relaxed);
            self.flushed.store(allocated, Ordering::Relaxed);
        }
    }

    fn allocated(&self) -> u64 {
        self.drawn
            .load(Ordering::Relaxed)
            .saturating_add_signed(-self.left.load(Ordering::Relaxed))
    }

    /// Takes the `size` bytes of an allocation that failed back off the count. `left`, the
    /// distance to the next sample, stays: given that it is positive it is still
    /// exponential (memoryless).
    fn uncount(&self, size: usize) {
        let drawn = self.drawn.load(Ordering::Relaxed);
        self.drawn
            .store(drawn.saturating_sub(size as u64), Ordering::Relaxed);
        let allocated = self.allocated();
        let flushed = self.flushed.load(Ordering::Relaxed);
        if flushed > allocated {
            ACTIVITY
                .allocated_bytes
                .fetch_sub(flushed - allocated, Ordering::Relaxed);
            self.flushed.store(allocated, Ordering::Relaxed);
        }
    }

    /// Forgets the bytes counted before a fork (in the child).
    fn forget(&self) {
        self.flushed.store(self.allocated(), Ordering::Relaxed);
    }
}

/// A thread's sampling state. All-zero (the initial value) is "not started".
struct PerThread {
    /// The thread's countdown, for the allocator functions.
    countdown: Countdown,
    /// Its random draws.
    random: LocalRandom,
    /// The profiler is sampling in this thread: its own allocations pass through.
    inside: Cell<bool>,
}

thread_local! {
    static THREAD: PerThread = const {
        PerThread {
            countdown: Countdown::new(),
            random: LocalRandom::new(),
            inside: Cell::new(false),
        }
    };
}

/// Makes the calling thread's allocations pass through unrecorded for the rest of its
/// life: a thread of pyigprof's whose work is not the program's (the pusher,
/// [`crate::output::push`]).
pub fn pass_through_in_this_thread() {
    let _ = THREAD.try_with(|t| t.inside.set(true));
}

/// The countdown of CPython's mem and object domains. Their functions are called with
/// the GIL held (the C-API's rule for them), so one countdown for the interpreter has one
/// writer at a time, and the path of every Python allocation reads no thread-local
/// variable. Sampling the interpreter's stream of bytes as a whole samples each
/// allocation with the same probability, `1 - exp(-s/R)`.
static INTERPRETER: Countdown = Countdown::new();

impl PerThread {
    /// A threshold drawn from the exponential distribution with mean `rate` bytes.
    fn draw(&self, rate: u64) -> u64 {
        (self.random.exponential(rate as f64) as u64).max(1)
    }
}

/// Counts `size` bytes allocated by the calling thread through the allocator functions;
/// true when the allocation may be sampled ([`Countdown::take`]).
#[inline(always)]
fn crossed(size: usize) -> bool {
    ENABLED.load(Ordering::Relaxed) && THREAD.try_with(|t| t.countdown.take(size)).unwrap_or(false)
}

/// Counts `size` bytes allocated through CPython's domains ([`INTERPRETER`]).
#[inline(always)]
fn crossed_in_interpreter(size: usize) -> bool {
    ENABLED.load(Ordering::Relaxed) && INTERPRETER.take(size)
}

/// What an allocation of `size` bytes stands for when sampled at `rate` (see the module
/// docs); `unit` is a uniform number in `(0, 1]` for the unbiased rounding of the count.
pub fn weight(size: usize, rate: u64, unit: f64) -> Weight {
    if rate <= 1 || size >= ALWAYS_SAMPLED {
        return Weight {
            calls: 1,
            bytes: size as u64,
        };
    }
    let p = -(-(size as f64) / rate as f64).exp_m1();
    if p <= 0.0 {
        return Weight { calls: 0, bytes: 0 };
    }
    let calls = 1.0 / p;
    let whole = calls.floor();
    Weight {
        calls: whole as u64 + u64::from(unit <= calls - whole),
        bytes: (size as f64 / p).round() as u64,
    }
}

/// The slow path of an allocation whose countdown (`countdown`, or the thread's when
/// `None`) crossed its threshold (or of a large one): draws the next threshold, and, when
/// the allocation is sampled, records its call stack and serves it from the sampled heap.
/// `entry` is the allocator function the program called (where the recorded stack ends).
/// `None`: not sampled, or the sampled heap could not serve it; the caller forwards the
/// allocation.
#[inline(never)]
#[cold]
fn sample(
    size: usize,
    align: usize,
    zeroed: bool,
    entry: usize,
    countdown: Option<&Countdown>,
) -> Option<*mut c_void> {
    let regs = registers_here();
    THREAD
        .try_with(|t| {
            if t.inside.get() {
                return None;
            }
            let rate = rate();
            let countdown = countdown.unwrap_or(&t.countdown);
            if !countdown.cross(size, rate, || t.draw(rate)) {
                return None;
            }
            t.inside.set(true);
            let weight = weight(size, rate, t.random.uniform());
            let served = record(regs, size, align, zeroed, entry, weight);
            t.inside.set(false);
            served
        })
        .ok()
        .flatten()
}

/// Records a sampled allocation and serves it from the sampled heap.
fn record(
    regs: Regs,
    size: usize,
    align: usize,
    zeroed: bool,
    entry: usize,
    weight: Weight,
) -> Option<*mut c_void> {
    let sampler = crate::sampler::get()?;
    ACTIVITY.sampled.fetch_add(1, Ordering::Relaxed);
    // The stack is read with checked reads, whose faults must reach the fault handler.
    let _faults = crate::signal_guard::FaultsUnblocked::new();
    let node = sampler
        .allocation_site(regs, entry as u64)
        .unwrap_or_else(|| {
            ACTIVITY.unrecorded.fetch_add(1, Ordering::Relaxed);
            0
        });
    let block = memory::allocate(&sampler.trees, node, size, align, zeroed, weight);
    (!block.is_null()).then_some(block.cast())
}

/// Frees a sampled block (the caller checked [`crate::alloc::is_sampled_block`]).
#[cold]
#[inline(never)]
fn free_sampled(ptr: *mut c_void) {
    if let Some(sampler) = crate::sampler::get() {
        // SAFETY: a live sampled block.
        unsafe { memory::free(&sampler.trees, ptr.cast()) };
    }
}

// ---------------------------------------------------------------------------------------
// The next definitions of the allocator's functions.

/// A lazily resolved pointer to the next definition of an allocator function.
struct Next {
    name: &'static CStr,
    addr: AtomicUsize,
}

/// `pthread_self()` of the thread looking the next definitions up with `dlsym` (0 =
/// none): `dlsym` may allocate, and its allocations are served from [`BOOTSTRAP`]; other
/// threads wait for it.
static RESOLVER: AtomicUsize = AtomicUsize::new(0);

impl Next {
    const fn new(name: &'static CStr) -> Next {
        Next {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    /// The next definition's address; 0 while the calling thread is looking the next
    /// definitions up, or when there is none.
    #[inline(always)]
    fn get(&self) -> usize {
        match self.addr.load(Ordering::Acquire) {
            0 => resolve_all(self),
            addr => addr,
        }
    }
}

/// Looks every next definition up (once), and returns `wanted`'s.
#[cold]
fn resolve_all(wanted: &Next) -> usize {
    // SAFETY: pthread_self only reads the thread pointer.
    let me = unsafe { libc::pthread_self() } as usize;
    loop {
        match RESOLVER.compare_exchange(0, me, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => break,
            // dlsym allocating: served from the bootstrap memory.
            Err(holder) if holder == me => return 0,
            Err(_) => std::hint::spin_loop(),
        }
    }
    for next in ALL_NEXT {
        if next.addr.load(Ordering::Relaxed) == 0 {
            // SAFETY: dlsym with a valid name.
            let found = unsafe { libc::dlsym(libc::RTLD_NEXT, next.name.as_ptr()) } as usize;
            next.addr.store(found, Ordering::Release);
        }
    }
    RESOLVER.store(0, Ordering::Release);
    wanted.addr.load(Ordering::Acquire)
}

static NEXT_MALLOC: Next = Next::new(c"malloc");
static NEXT_CALLOC: Next = Next::new(c"calloc");
static NEXT_REALLOC: Next = Next::new(c"realloc");
static NEXT_FREE: Next = Next::new(c"free");
static NEXT_MEMALIGN: Next = Next::new(c"memalign");
static NEXT_USABLE_SIZE: Next = Next::new(c"malloc_usable_size");
static NEXT_MMAP: Next = Next::new(c"mmap");
static NEXT_MUNMAP: Next = Next::new(c"munmap");
static ALL_NEXT: [&Next; 8] = [
    &NEXT_MALLOC,
    &NEXT_CALLOC,
    &NEXT_REALLOC,
    &NEXT_FREE,
    &NEXT_MEMALIGN,
    &NEXT_USABLE_SIZE,
    &NEXT_MMAP,
    &NEXT_MUNMAP,
];

/// Memory for the allocations `dlsym` makes while the next `malloc` is looked up (before
/// it is known): handed out by bumping an offset, never reused; each block is preceded by
/// its size.
struct Bootstrap {
    bytes: std::cell::UnsafeCell<[u8; BOOTSTRAP_BYTES]>,
    next: AtomicUsize,
}

const BOOTSTRAP_BYTES: usize = 64 << 10;

// SAFETY: disjoint ranges are handed out by an atomic offset.
unsafe impl Sync for Bootstrap {}

#[repr(align(64))]
struct Aligned(Bootstrap);

static BOOTSTRAP: Aligned = Aligned(Bootstrap {
    bytes: std::cell::UnsafeCell::new([0; BOOTSTRAP_BYTES]),
    next: AtomicUsize::new(0),
});

impl Bootstrap {
    fn alloc(&self, size: usize, align: usize) -> *mut c_void {
        let align = align.max(16);
        let base = self.bytes.get() as usize;
        loop {
            let offset = self.next.load(Ordering::Relaxed);
            let start = (base + offset + 16).next_multiple_of(align);
            let end = start + size;
            if end > base + BOOTSTRAP_BYTES {
                return std::ptr::null_mut();
            }
            if self
                .next
                .compare_exchange(offset, end - base, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: the 16 bytes in front of `start` belong to this block.
                unsafe { ((start - 8) as *mut usize).write(size) };
                return start as *mut c_void;
            }
        }
    }

    fn contains(&self, ptr: *const c_void) -> bool {
        let base = self.bytes.get() as usize;
        (base..base + BOOTSTRAP_BYTES).contains(&(ptr as usize))
    }

    fn size_of(&self, ptr: *const c_void) -> usize {
        // SAFETY: written in front of every block.
        unsafe { ((ptr as usize - 8) as *const usize).read() }
    }
}

type MallocFn = unsafe extern "C" fn(usize) -> *mut c_void;
type CallocFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type ReallocFn = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type MemalignFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type SizeFn = unsafe extern "C" fn(*mut c_void) -> usize;

/// The next `malloc`, or the bootstrap memory while it is unknown.
fn next_malloc(size: usize) -> *mut c_void {
    match NEXT_MALLOC.get() {
        // SAFETY: the next definition of malloc.
        f if f != 0 => unsafe { std::mem::transmute::<usize, MallocFn>(f)(size) },
        _ => BOOTSTRAP.0.alloc(size, 16),
    }
}

fn next_memalign(align: usize, size: usize) -> *mut c_void {
    match NEXT_MEMALIGN.get() {
        // SAFETY: the next definition of memalign.
        f if f != 0 => unsafe { std::mem::transmute::<usize, MemalignFn>(f)(align, size) },
        _ => BOOTSTRAP.0.alloc(size, align),
    }
}

// ---------------------------------------------------------------------------------------
// The program's allocator functions.

/// Serves an allocation of `size` bytes aligned to `align`: sampled, or by `forward`.
#[inline(always)]
fn allocate(
    size: usize,
    align: usize,
    zeroed: bool,
    entry: &Next,
    forward: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    if !ENABLED.load(Ordering::Relaxed) {
        // The memory profiler is off: the next allocator's own call, and nothing after it
        // (a tail call: about 1 ns a malloc-free pair over the allocator's, where the
        // failed-allocation check below made it 3 ns).
        return forward();
    }
    if crossed(size) {
        if let Some(block) = sample(size, align, zeroed, entry.get(), None) {
            return block;
        }
    }
    let block = forward();
    if block.is_null() && size != 0 {
        uncount(size);
    }
    block
}

/// Takes `size` bytes of an allocation that failed back off the calling thread's count
/// (`bytearray(sys.maxsize)` allocates nothing).
#[cold]
fn uncount(size: usize) {
    if enabled() {
        let _ = THREAD.try_with(|t| t.countdown.uncount(size));
    }
}

/// `malloc(3)`.
#[no_mangle]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    allocate(size, 16, false, &NEXT_MALLOC, || next_malloc(size))
}

/// `calloc(3)`.
#[no_mangle]
pub extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    let Some(total) = count.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    allocate(total, 16, true, &NEXT_CALLOC, || match NEXT_CALLOC.get() {
        // SAFETY: the next definition of calloc.
        f if f != 0 => unsafe { std::mem::transmute::<usize, CallocFn>(f)(count, size) },
        // Bootstrap memory is zero and never reused.
        _ => BOOTSTRAP.0.alloc(total, 16),
    })
}

/// `free(3)`.
///
/// # Safety
/// `ptr` is null or a block of this process's allocator, not freed yet.
#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if crate::alloc::is_sampled_block(ptr.cast()) {
        free_sampled(ptr);
    } else if !ptr.is_null() && !BOOTSTRAP.0.contains(ptr) {
        let next = NEXT_FREE.get();
        if next != 0 {
            // SAFETY: the next definition of free, for a block the next allocator served.
            unsafe { std::mem::transmute::<usize, FreeFn>(next)(ptr) }
        }
    }
}

/// Bytes usable in a block the program holds (`malloc_usable_size(3)`).
fn usable_size(ptr: *mut c_void) -> usize {
    if ptr.is_null() {
        0
    } else if crate::alloc::is_sampled_block(ptr.cast()) {
        // SAFETY: a live sampled block.
        unsafe { memory::size_of_block(ptr.cast()) }
    } else if BOOTSTRAP.0.contains(ptr) {
        BOOTSTRAP.0.size_of(ptr)
    } else {
        match NEXT_USABLE_SIZE.get() {
            0 => 0,
            // SAFETY: the next definition, for a block its allocator served.
            next => unsafe { std::mem::transmute::<usize, SizeFn>(next)(ptr) },
        }
    }
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// `ptr` is null or a live block of this process's allocator.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    usable_size(ptr)
}

/// Moves the `old` bytes at `ptr` (a block served by `free_old`'s allocator) into a
/// fresh block from `alloc`, freeing the old one; null (the old block kept) when `alloc`
/// fails.
fn move_block(
    ptr: *mut c_void,
    old: usize,
    size: usize,
    alloc: impl FnOnce() -> *mut c_void,
    free_old: impl FnOnce(*mut c_void),
) -> *mut c_void {
    let fresh = alloc();
    if !fresh.is_null() {
        // SAFETY: both blocks hold at least min(old, size) bytes and do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), fresh.cast(), old.min(size)) };
        free_old(ptr);
    }
    fresh
}

/// `realloc(3)`. A block that moves into or out of the sampled heap is copied; glibc's
/// `realloc(ptr, 0)` frees and returns null, and so does this.
///
/// # Safety
/// `ptr` is null or a live block of this process's allocator.
#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    if ptr.is_null() {
        return malloc(size);
    }
    let sampled_block = crate::alloc::is_sampled_block(ptr.cast());
    if sampled_block || BOOTSTRAP.0.contains(ptr) {
        if size == 0 {
            // SAFETY: the caller's block.
            unsafe { free(ptr) };
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's block.
        return move_block(
            ptr,
            usable_size(ptr),
            size,
            || malloc(size),
            |p| unsafe { free(p) },
        );
    }
    let next = || match NEXT_REALLOC.get() {
        // SAFETY: the next definition of realloc, for a block its allocator served.
        f if f != 0 => unsafe { std::mem::transmute::<usize, ReallocFn>(f)(ptr, size) },
        _ => std::ptr::null_mut(),
    };
    if size == 0 || !crossed(size) {
        return next();
    }
    let moved = next();
    if moved.is_null() {
        return moved;
    }
    match sample(size, 16, false, NEXT_REALLOC.get(), None) {
        Some(block) => {
            // SAFETY: both hold `size` bytes.
            unsafe { std::ptr::copy_nonoverlapping(moved.cast::<u8>(), block.cast(), size) };
            // SAFETY: the block the next realloc returned.
            unsafe { free(moved) };
            block
        }
        None => moved,
    }
}

/// `reallocarray(3)`.
///
/// # Safety
/// `ptr` is null or a live block of this process's allocator.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: the caller's guarantee.
        Some(total) => unsafe { realloc(ptr, total) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// An aligned allocation (`memalign`, `aligned_alloc`, `valloc`, `pvalloc`,
/// `posix_memalign`); `align` is a power of two.
fn allocate_aligned(align: usize, size: usize) -> *mut c_void {
    allocate(size, align, false, &NEXT_MEMALIGN, || {
        next_memalign(align, size)
    })
}

/// `memalign(3)`.
#[no_mangle]
pub extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    allocate_aligned(align, size)
}

/// `aligned_alloc(3)` (C11).
#[no_mangle]
pub extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    memalign(align, size)
}

/// `valloc(3)`: page-aligned.
#[no_mangle]
pub extern "C" fn valloc(size: usize) -> *mut c_void {
    allocate_aligned(page_size(), size)
}

/// `pvalloc(3)`: page-aligned, the size rounded up to whole pages.
#[no_mangle]
pub extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let page = page_size();
    match size.max(1).checked_next_multiple_of(page) {
        Some(rounded) => allocate_aligned(page, rounded),
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// `posix_memalign(3)`.
///
/// # Safety
/// `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<usize>()) {
        return libc::EINVAL;
    }
    let block = allocate_aligned(align, size);
    if block.is_null() && size != 0 {
        return libc::ENOMEM;
    }
    // SAFETY: the caller's guarantee.
    unsafe { out.write(block) };
    0
}

/// Anonymous mappings (private or shared) of at least this many bytes that the program
/// makes with `mmap` are allocations (Python's `mmap.mmap(-1, n)`, allocators of libraries that map
/// their own memory), recorded exactly. Smaller ones are not: pymalloc maps its arenas
/// (256 KiB, 1 MiB from 3.10), whose objects the domain wrappers count already. glibc's
/// `malloc` maps large blocks with internal calls that never come here.
pub const SMALLEST_MAPPING: usize = ALWAYS_SAMPLED;

type MmapFn =
    unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, c_int, libc::off_t) -> *mut c_void;
type MunmapFn = unsafe extern "C" fn(*mut c_void, usize) -> c_int;

/// `mmap(2)`.
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    let next = NEXT_MMAP.get();
    let mapped = if next == 0 {
        // While dlsym runs: the system call itself.
        // SAFETY: the caller's arguments.
        unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, offset) as *mut c_void }
    } else {
        // SAFETY: the next definition, with the caller's arguments.
        unsafe { std::mem::transmute::<usize, MmapFn>(next)(addr, len, prot, flags, fd, offset) }
    };
    let anonymous = flags & libc::MAP_ANONYMOUS != 0;
    if mapped != libc::MAP_FAILED && anonymous && len >= SMALLEST_MAPPING && enabled() {
        record_mapping(mapped, len);
    }
    mapped
}

/// `mmap64`, glibc's other name of `mmap` on 64-bit systems.
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: libc::off_t,
) -> *mut c_void {
    // SAFETY: the caller's guarantee.
    unsafe { mmap(addr, len, prot, flags, fd, offset) }
}

/// `munmap(2)`.
///
/// # Safety
/// As `munmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    if memory::mappings_recorded() {
        if let Some(sampler) = crate::sampler::get() {
            memory::unmap(&sampler.trees, addr as usize, len);
        }
    }
    match NEXT_MUNMAP.get() {
        // SAFETY: the system call itself, with the caller's arguments.
        0 => unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int },
        // SAFETY: the next definition, with the caller's arguments.
        next => unsafe { std::mem::transmute::<usize, MunmapFn>(next)(addr, len) },
    }
}

/// Records a mapping the program made, with its call stack, unless the profiler itself
/// made it while sampling.
#[inline(never)]
#[cold]
fn record_mapping(start: *mut c_void, len: usize) {
    let regs = registers_here();
    let _ = THREAD.try_with(|t| {
        if t.inside.get() {
            return;
        }
        let Some(sampler) = crate::sampler::get() else {
            return;
        };
        t.inside.set(true);
        ACTIVITY.sampled.fetch_add(1, Ordering::Relaxed);
        ACTIVITY
            .allocated_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        let node = sampler
            .allocation_site(regs, NEXT_MMAP.get() as u64)
            .unwrap_or_else(|| {
                ACTIVITY.unrecorded.fetch_add(1, Ordering::Relaxed);
                0
            });
        memory::map(&sampler.trees, node, start as usize, len);
        t.inside.set(false);
    });
}

fn page_size() -> usize {
    4096
}

fn set_errno(value: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = value };
}

// ---------------------------------------------------------------------------------------
// CPython's allocator domains.

/// `PyMemAllocatorEx` of CPython's `Include/cpython/pymem.h` (3.5+).
#[repr(C)]
#[derive(Clone, Copy)]
struct PyMemAllocatorEx {
    ctx: *mut c_void,
    malloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    calloc: unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void,
    realloc: unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void, *mut c_void),
}

/// `PYMEM_DOMAIN_MEM` and `PYMEM_DOMAIN_OBJ` of `PyMemAllocatorDomain`.
const DOMAIN_MEM: c_int = 1;
const DOMAIN_OBJ: c_int = 2;

/// pymalloc's `SMALL_REQUEST_THRESHOLD` (`Objects/obmalloc.c`, 512 bytes since 3.8, 256
/// before): larger requests go on to the raw allocator, `malloc`, whose hook counts them,
/// so the domain wrappers count only requests up to it (never an allocation twice).
const PYMALLOC_LARGEST: usize = 512;

/// The allocators the wrappers forward to, one per installation (a domain may be wrapped
/// again when the interpreter replaced the wrapper, e.g. with its debug hooks).
struct Wrapped {
    slots: [std::cell::UnsafeCell<Option<PyMemAllocatorEx>>; 8],
    used: AtomicUsize,
}

// SAFETY: each slot is written once, before the wrapper that reads it is installed.
unsafe impl Sync for Wrapped {}

/// The `malloc` of each domain (mem, object) when it was first wrapped.
static FIRST_SEEN: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

static WRAPPED: Wrapped = Wrapped {
    slots: [const { std::cell::UnsafeCell::new(None) }; 8],
    used: AtomicUsize::new(0),
};

/// The wrapped allocator a wrapper's `ctx` points to.
///
/// # Safety
/// `ctx` must be a `ctx` of a wrapper this module installed.
unsafe fn wrapped(ctx: *mut c_void) -> &'static PyMemAllocatorEx {
    // SAFETY: the caller's guarantee; slots are written before installation and never
    // again.
    unsafe {
        (*(ctx as *const Option<PyMemAllocatorEx>))
            .as_ref()
            .unwrap_unchecked()
    }
}

unsafe extern "C" fn py_malloc(ctx: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: installed with a slot's ctx.
    let next = unsafe { wrapped(ctx) };
    if size <= PYMALLOC_LARGEST && crossed_in_interpreter(size) {
        if let Some(block) = sample(size, 16, false, next.malloc as usize, Some(&INTERPRETER)) {
            return block;
        }
    }
    // SAFETY: the wrapped allocator.
    unsafe { (next.malloc)(next.ctx, size) }
}

unsafe extern "C" fn py_calloc(ctx: *mut c_void, count: usize, size: usize) -> *mut c_void {
    // SAFETY: installed with a slot's ctx.
    let next = unsafe { wrapped(ctx) };
    if let Some(total) = count.checked_mul(size) {
        if total <= PYMALLOC_LARGEST && crossed_in_interpreter(total) {
            if let Some(block) = sample(total, 16, true, next.calloc as usize, Some(&INTERPRETER)) {
                return block;
            }
        }
    }
    // SAFETY: the wrapped allocator.
    unsafe { (next.calloc)(next.ctx, count, size) }
}

unsafe extern "C" fn py_realloc(ctx: *mut c_void, ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: installed with a slot's ctx.
    let next = unsafe { wrapped(ctx) };
    if crate::alloc::is_sampled_block(ptr.cast()) {
        return move_block(
            ptr,
            usable_size(ptr),
            size,
            // SAFETY: the wrapper itself, with its own ctx.
            || unsafe { py_malloc(ctx, size) },
            free_sampled,
        );
    }
    if size == 0 || size > PYMALLOC_LARGEST || !crossed_in_interpreter(size) {
        // SAFETY: the wrapped allocator, for its own block.
        return unsafe { (next.realloc)(next.ctx, ptr, size) };
    }
    // SAFETY: as above.
    let moved = unsafe { (next.realloc)(next.ctx, ptr, size) };
    if moved.is_null() {
        return moved;
    }
    match sample(size, 16, false, next.realloc as usize, Some(&INTERPRETER)) {
        Some(block) => {
            // SAFETY: both hold `size` bytes.
            unsafe { std::ptr::copy_nonoverlapping(moved.cast::<u8>(), block.cast(), size) };
            // SAFETY: the wrapped allocator's block.
            unsafe { (next.free)(next.ctx, moved) };
            block
        }
        None => moved,
    }
}

unsafe extern "C" fn py_free(ctx: *mut c_void, ptr: *mut c_void) {
    if crate::alloc::is_sampled_block(ptr.cast()) {
        free_sampled(ptr);
        return;
    }
    // SAFETY: installed with a slot's ctx; the wrapped allocator's block.
    unsafe {
        let next = wrapped(ctx);
        (next.free)(next.ctx, ptr)
    }
}

/// Wraps CPython's object and mem allocator domains (pymalloc) so that their small blocks
/// are sampled too: at start-up (`PyMem_SetAllocator` may be called before
/// initialisation), and again when the interpreter attaches or imports an extension, for
/// a domain the interpreter reset to the allocator it had then (3.6). A domain the
/// interpreter gave another allocator (`-X dev`, `PYTHONMALLOC=debug` install CPython's
/// debug hooks after the constructor) is left as it is: its small objects are not seen.
/// (Wrapped, the object domain is not pymalloc's to CPython's introspection:
/// `sys._debugmallocstats()` prints no pymalloc statistics.) Python 3.6+ (the mem domain is pymalloc's since
/// 3.6; 3.5's `PyMemAllocatorEx` is the same, its mem domain `malloc`'s); not when
/// `PYTHONMALLOC` makes `malloc` the allocator (then the `malloc` hook sees every block).
/// `initialised`: the interpreter runs, and the domains are only touched by a thread that
/// holds the GIL (`PyGILState_Check`), since another thread may be allocating; false
/// before initialisation. Returns the number of domains wrapped now.
pub fn install_python_allocators(version: (u8, u8, u8), initialised: bool) -> usize {
    if !enabled() || version < (3, 6, 0) {
        return 0;
    }
    if initialised {
        let check = pyigprof_hooks::cpython::symbol(c"PyGILState_Check");
        // SAFETY: `int PyGILState_Check(void)`, callable from any thread.
        if check == 0
            || unsafe { std::mem::transmute::<usize, extern "C" fn() -> c_int>(check)() } != 1
        {
            return 0;
        }
    }
    if std::env::var("PYTHONMALLOC").is_ok_and(|v| v.starts_with("malloc")) {
        return 0;
    }
    let get = pyigprof_hooks::cpython::symbol(c"PyMem_GetAllocator");
    let set = pyigprof_hooks::cpython::symbol(c"PyMem_SetAllocator");
    if get == 0 || set == 0 {
        return 0;
    }
    type Access = unsafe extern "C" fn(c_int, *mut PyMemAllocatorEx);
    // SAFETY: `void PyMem_GetAllocator(PyMemAllocatorDomain, PyMemAllocatorEx *)` and
    // `void PyMem_SetAllocator(PyMemAllocatorDomain, PyMemAllocatorEx *)`.
    let (get, set) = unsafe {
        (
            std::mem::transmute::<usize, Access>(get),
            std::mem::transmute::<usize, Access>(set),
        )
    };
    let mut wrapped_now = 0;
    for (domain, first) in [DOMAIN_MEM, DOMAIN_OBJ].into_iter().zip(&FIRST_SEEN) {
        let mut current = std::mem::MaybeUninit::<PyMemAllocatorEx>::uninit();
        // SAFETY: a valid out-pointer, which PyMem_GetAllocator fills.
        let current = unsafe {
            get(domain, current.as_mut_ptr());
            current.assume_init()
        };
        let seen = current.malloc as *const () as usize;
        if seen == py_malloc as *const () as usize {
            continue;
        }
        // Wrapped again only when the interpreter put back the allocator it had when the
        // constructor wrapped it (3.6's Py_Main resets pymalloc); another one is its
        // debug hooks (-X dev, PYTHONMALLOC=debug), whose name `_testinternalcapi.
        // pymem_getallocatorsname()` and dev mode's checks must find as they are.
        match first.compare_exchange(0, seen, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {}
            Err(original) if original == seen => {}
            Err(_) => continue,
        }
        let index = WRAPPED.used.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = WRAPPED.slots.get(index) else {
            break;
        };
        // SAFETY: a fresh slot, read only by the wrapper installed below.
        unsafe { *slot.get() = Some(current) };
        let mut wrapper = PyMemAllocatorEx {
            ctx: slot.get().cast(),
            malloc: py_malloc,
            calloc: py_calloc,
            realloc: py_realloc,
            free: py_free,
        };
        // SAFETY: CPython copies the struct.
        unsafe { set(domain, &mut wrapper) };
        wrapped_now += 1;
    }
    wrapped_now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_unbiased_estimates() {
        // Exact mode and large blocks: weight 1.
        assert_eq!(
            weight(100, 1, 0.5),
            Weight {
                calls: 1,
                bytes: 100
            }
        );
        assert_eq!(
            weight(ALWAYS_SAMPLED, DEFAULT_RATE, 0.5),
            Weight {
                calls: 1,
                bytes: ALWAYS_SAMPLED as u64
            }
        );
        // A block of the mean size is sampled with p = 1 - 1/e.
        let w = weight(DEFAULT_RATE as usize, DEFAULT_RATE, 0.99);
        let p = 1.0 - (-1.0f64).exp();
        assert_eq!(w.bytes, (DEFAULT_RATE as f64 / p).round() as u64);
        assert_eq!(w.calls, 1);
        // Small blocks: about rate/size allocations each; the count rounds up or down so
        // that its mean is 1/p.
        let (size, rate) = (64usize, DEFAULT_RATE);
        let p = 1.0 - (-(size as f64) / rate as f64).exp();
        let mean: f64 = (1..=1000)
            .map(|i| weight(size, rate, i as f64 / 1000.0).calls as f64)
            .sum::<f64>()
            / 1000.0;
        assert!((mean - 1.0 / p).abs() < 0.01, "{mean} vs {}", 1.0 / p);
    }

    #[test]
    fn a_countdown_samples_crossings_and_counts_every_byte() {
        let c = Countdown::new();
        let mut draws = [100u64, 50, 1000, 7].into_iter();
        let mut draw = || draws.next().unwrap();
        // First allocation: starts the count (threshold 100), not crossed.
        assert!(c.take(30));
        assert!(!c.cross(30, 512, &mut draw));
        assert_eq!(c.left.load(Ordering::Relaxed), 70);
        assert!(!c.take(60));
        // 80 more: crossed at 10 left; the next threshold (50) starts afresh.
        assert!(c.take(80));
        assert!(c.cross(80, 512, &mut draw));
        assert_eq!(c.left.load(Ordering::Relaxed), 50);
        assert_eq!(c.allocated(), 30 + 60 + 80);
        // A huge allocation: one draw, however many thresholds it passes.
        assert!(c.take(1 << 40));
        assert!(c.cross(1 << 40, 512, &mut draw));
        assert_eq!(c.left.load(Ordering::Relaxed), 1000);
        assert_eq!(c.allocated(), 170 + (1 << 40));
        // It failed: its bytes leave the count, the distance to the next sample stays.
        c.uncount(1 << 40);
        assert_eq!((c.allocated(), c.left.load(Ordering::Relaxed)), (170, 1000));
    }

    #[test]
    fn thresholds_are_exponential_with_the_rate_as_mean() {
        let t = PerThread {
            countdown: Countdown::new(),
            random: LocalRandom::new(),
            inside: Cell::new(false),
        };
        let n = 200_000;
        let draws: Vec<f64> = (0..n).map(|_| t.draw(1000) as f64).collect();
        let mean = draws.iter().sum::<f64>() / n as f64;
        assert!((mean - 1000.0).abs() < 10.0, "mean {mean}");
        // P(X > mean) = 1/e for an exponential distribution.
        let above = draws.iter().filter(|&&d| d > 1000.0).count() as f64 / n as f64;
        assert!((above - (-1.0f64).exp()).abs() < 0.005, "{above}");
        // Memoryless: P(X > 2 mean | X > mean) = 1/e too.
        let above2 = draws.iter().filter(|&&d| d > 2000.0).count() as f64 / n as f64;
        assert!((above2 / above - (-1.0f64).exp()).abs() < 0.01);
    }
}
