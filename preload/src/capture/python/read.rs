//! Reading the interpreter's memory from the signal handler.
//!
//! The handler runs on the interrupted thread itself, so that thread's own frame chain is
//! frozen at an instruction boundary and every object a live frame refers to is kept alive
//! by it. Reads are still checked before they are made: the address must be a plausible,
//! aligned user-space address, and objects are only trusted after their type pointer was
//! compared with the type's exported address (`PyCode_Type`, ...). A check that fails makes
//! the caller drop the Python part of the sample. The reads themselves cannot crash the
//! program: a page that is gone (an object freed and its arena returned, another thread's
//! frames popped while the wall-clock source reads them) makes them fail
//! ([`crate::capture::probe`]).

use crate::capture::probe;

/// Lowest address treated as readable (the first pages are never mapped).
const LOW: u64 = 0x10000;
/// End of the x86-64 user address space (47 bits).
const HIGH: u64 = 0x8000_0000_0000;

/// Whether `addr..addr+len` is a plausible user-space range aligned to `align`.
#[inline(always)]
pub fn plausible(addr: u64, len: u64, align: u64) -> bool {
    addr >= LOW
        && addr.checked_add(len).is_some_and(|end| end <= HIGH)
        && addr.is_multiple_of(align)
}

/// Reads a pointer-sized word at `addr`.
#[inline(always)]
pub fn word(addr: u64) -> Option<u64> {
    if !plausible(addr, 8, 8) {
        return None;
    }
    probe::u64_at(addr)
}

/// Reads a C `int` at `addr`.
#[inline(always)]
pub fn int(addr: u64) -> Option<i32> {
    if !plausible(addr, 4, 4) {
        return None;
    }
    probe::u32_at(addr).map(|v| v as i32)
}

/// Reads a C `unsigned int` at `addr`.
#[inline(always)]
pub fn uint(addr: u64) -> Option<u32> {
    int(addr).map(|v| v as u32)
}

/// Reads one byte at `addr`.
#[inline(always)]
pub fn byte(addr: u64) -> Option<u8> {
    if !plausible(addr, 1, 1) {
        return None;
    }
    probe::u8_at(addr)
}

/// Copies `len` bytes at `addr` into `out[..len]` (`len <= out.len()`).
pub fn bytes(addr: u64, len: usize, out: &mut [u8]) -> Option<()> {
    if len > out.len() || !plausible(addr, len as u64, 1) {
        return None;
    }
    probe::copy(addr, &mut out[..len]).then_some(())
}

/// The type object address of the object at `obj` (its `ob_type`, at offset 8 in every
/// CPython build without `Py_TRACE_REFS`).
#[inline(always)]
pub fn type_of(obj: u64) -> Option<u64> {
    word(obj + 8)
}

/// Whether the object at `obj` has type `type_addr` ([`type_of`]).
#[inline(always)]
pub fn has_type(obj: u64, type_addr: u64) -> bool {
    type_addr != 0 && type_of(obj) == Some(type_addr)
}
