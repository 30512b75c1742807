//! Code records: what the profile needs to name a Python frame, captured in the handler's
//! own memory while the code object is alive (code objects can be freed, and their
//! addresses reused, before the profile is written).
//!
//! A record holds the qualified name, the file name, the first line and a copy of the line
//! table. A cache keyed by code object address finds the record again on later samples;
//! a hit is confirmed by comparing the code object's name, file and line-table object
//! pointers and first line with those captured, so a reused address gets a new record.

use super::layout::{Layout, StrModel};
use super::read;
use crate::mem::{Bytes, Pool, ZeroedArray};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Longest name or file name captured, in bytes of UTF-8 (longer ones are cut).
pub const MAX_TEXT: usize = 2048;
/// Longest line table captured, in bytes (a longer one is cut: lines past it are unknown).
pub const MAX_LINE_TABLE: usize = 64 * 1024;
/// Size of the code-address cache (entries of 16 bytes, a power of two).
const CACHE_SIZE: usize = 1 << 16;

/// One entry of the code-address cache. All-zero is an empty entry.
#[repr(C, align(16))]
struct CacheEntry {
    /// The code object's address (0 = empty).
    code: AtomicU64,
    /// Its record (0 = being captured).
    record: AtomicU32,
}

/// Asks the CPU to bring the cache line holding `addr` into its caches (`PREFETCHT0`, a
/// hint: it neither faults nor changes anything the program can see, whatever the
/// address).
#[inline(always)]
fn prefetch(addr: u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch hint neither reads architecturally nor faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// The cache entry where the search for the code object at `code` starts. Nearby
/// addresses get nearby entries: a module's code objects are allocated together as it is
/// imported, so the entries of the few objects a short run samples share pages instead of
/// taking a page fault each (the cache is 1 MiB of zero pages). Addresses 2 MiB apart
/// would share an entry, so the bits above are folded in.
#[inline]
fn home(code: u64) -> usize {
    ((code >> 5) ^ (code >> 21)) as usize & (CACHE_SIZE - 1)
}
/// Probes before giving up on a cache slot.
const MAX_PROBES: usize = 16;

/// A captured code object. All-zero is "not yet published".
#[repr(C)]
pub struct Record {
    /// 1 once every other field is written.
    ready: AtomicU32,
    first_line: i32,
    name: (u32, u32),
    file: (u32, u32),
    table: (u32, u32),
    /// The code object's name, file and line-table object addresses when captured.
    identity: [u64; 3],
}

/// Addresses of the type objects used to check what is read (`PyCode_Type`, the text type
/// and `PyBytes_Type`; 0 = unknown, which makes every check fail).
#[derive(Clone, Copy, Debug, Default)]
pub struct Types {
    /// `PyCode_Type`.
    pub code: u64,
    /// `PyUnicode_Type` (3.x) or `PyString_Type` (2.7).
    pub text: u64,
    /// `PyBytes_Type` (3.x) or `PyString_Type` (2.7).
    pub bytes: u64,
}

/// A record as read back when writing the profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured<'a> {
    /// Qualified name (3.11+) or name, UTF-8 (lossless for names CPython accepts).
    pub name: &'a [u8],
    /// `co_filename`, UTF-8.
    pub file: &'a [u8],
    /// `co_firstlineno`.
    pub first_line: i32,
    /// Copy of the line table (possibly cut at [`MAX_LINE_TABLE`]).
    pub line_table: &'a [u8],
}

/// Why a frame's code could not be captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeError {
    /// The pointer is not a code object (bad read, half-built frame).
    NotCode,
    /// A field of the code object could not be read or has the wrong type.
    BadField,
    /// The record pool or the text arena is full.
    Full,
}

/// All code records of the process and the cache that finds them.
pub struct Codes {
    records: Pool<Record>,
    text: Bytes,
    cache: ZeroedArray<CacheEntry>,
}

impl Codes {
    /// Reserves room for `records` records and `text_bytes` of names and line tables.
    pub fn new(records: usize, text_bytes: usize) -> Option<Codes> {
        Some(Codes {
            records: Pool::new(records)?,
            text: Bytes::new(text_bytes)?,
            cache: ZeroedArray::new(CACHE_SIZE)?,
        })
    }

    /// The record for the code object at `code`, capturing it if it is new. `scratch` is
    /// working space of at least [`MAX_TEXT`] bytes. Async-signal-safe.
    pub fn record_for(
        &self,
        code: u64,
        layout: &Layout,
        types: &Types,
        scratch: &mut [u8],
    ) -> Result<u32, CodeError> {
        if !read::has_type(code, types.code) {
            return Err(CodeError::NotCode);
        }
        let identity = identity(code, layout).ok_or(CodeError::BadField)?;
        let first_line =
            read::int(code + u64::from(layout.co_firstlineno)).ok_or(CodeError::BadField)?;
        let home = home(code);
        for probe in 0..MAX_PROBES {
            let entry = &self.cache[(home + probe) & (CACHE_SIZE - 1)];
            let cached = entry.code.load(Ordering::Acquire);
            if cached == code {
                let index = entry.record.load(Ordering::Acquire);
                if index != 0 && self.matches(index, &identity, first_line) {
                    return Ok(index);
                }
                // A new code object at a reused address (or a record being published).
                let index = self.capture(layout, types, identity, first_line, scratch)?;
                entry.record.store(index, Ordering::Release);
                return Ok(index);
            }
            if cached == 0
                && entry
                    .code
                    .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                let index = self.capture(layout, types, identity, first_line, scratch)?;
                entry.record.store(index, Ordering::Release);
                return Ok(index);
            }
        }
        // Crowded neighbourhood: capture without caching.
        self.capture(layout, types, identity, first_line, scratch)
    }

    /// Starts fetching into the CPU's cache the entry of the code-address cache where
    /// [`Codes::record_for`]'s search for the code object at `code` starts (see
    /// `stack::read_ahead`). Reads nothing and cannot fault. Async-signal-safe.
    #[inline]
    pub fn prefetch(&self, code: u64) {
        prefetch(&self.cache[home(code)] as *const CacheEntry as u64);
    }

    fn matches(&self, index: u32, identity: &[u64; 3], first_line: i32) -> bool {
        // SAFETY: the index came from this pool.
        let record = unsafe { &*self.records.at(index) };
        record.ready.load(Ordering::Acquire) == 1
            && record.identity == *identity
            && record.first_line == first_line
    }

    fn capture(
        &self,
        layout: &Layout,
        types: &Types,
        identity: [u64; 3],
        first_line: i32,
        scratch: &mut [u8],
    ) -> Result<u32, CodeError> {
        let [name_obj, file_obj, table_obj] = identity;
        let name = self.store_text(name_obj, layout, types, scratch)?;
        let file = self.store_text(file_obj, layout, types, scratch)?;
        let table = self.store_line_table(table_obj, layout, types)?;
        let index = self.records.alloc().ok_or(CodeError::Full)?;
        // SAFETY: freshly allocated, not yet visible to anyone else.
        let record = unsafe { &mut *self.records.at(index) };
        record.first_line = first_line;
        record.name = name;
        record.file = file;
        record.table = table;
        record.identity = identity;
        record.ready.store(1, Ordering::Release);
        Ok(index)
    }

    fn store_text(
        &self,
        obj: u64,
        layout: &Layout,
        types: &Types,
        scratch: &mut [u8],
    ) -> Result<(u32, u32), CodeError> {
        let len = read_text(obj, layout, types, scratch).ok_or(CodeError::BadField)?;
        let offset = self.text.alloc(len).ok_or(CodeError::Full)?;
        self.text
            .slice_mut(offset, len)
            .copy_from_slice(&scratch[..len]);
        Ok((offset, len as u32))
    }

    fn store_line_table(
        &self,
        obj: u64,
        layout: &Layout,
        types: &Types,
    ) -> Result<(u32, u32), CodeError> {
        if !read::has_type(obj, types.bytes) {
            return Err(CodeError::BadField);
        }
        let size = read::word(obj + 16).ok_or(CodeError::BadField)? as usize;
        if size > (1 << 30) {
            return Err(CodeError::BadField);
        }
        let len = size.min(MAX_LINE_TABLE);
        let offset = self.text.alloc(len).ok_or(CodeError::Full)?;
        read::bytes(
            obj + u64::from(layout.bytes_data),
            len,
            self.text.slice_mut(offset, len),
        )
        .ok_or(CodeError::BadField)?;
        Ok((offset, len as u32))
    }

    /// Reads record `index` back (when writing the profile). `None` for an index that was
    /// never published.
    pub fn get(&self, index: u32) -> Option<Captured<'_>> {
        if index == 0 || index as usize >= self.records.len() {
            return None;
        }
        // SAFETY: index is inside the allocated part of the pool.
        let record = unsafe { &*self.records.at(index) };
        if record.ready.load(Ordering::Acquire) != 1 {
            return None;
        }
        Some(Captured {
            name: self.text.slice(record.name.0, record.name.1 as usize),
            file: self.text.slice(record.file.0, record.file.1 as usize),
            first_line: record.first_line,
            line_table: self.text.slice(record.table.0, record.table.1 as usize),
        })
    }
}

/// The addresses of a code object's name (qualified name from 3.11), file name and line
/// table objects.
fn identity(code: u64, layout: &Layout) -> Option<[u64; 3]> {
    let name_field = layout.co_qualname.unwrap_or(layout.co_name);
    Some([
        read::word(code + u64::from(name_field))?,
        read::word(code + u64::from(layout.co_filename))?,
        read::word(code + u64::from(layout.co_linetable))?,
    ])
}

/// Whether the code object at `code` is interpreter plumbing rather than user code (3.13's
/// `_Py_InitCleanup` shim).
pub fn is_shim(code: u64, layout: &Layout) -> bool {
    match layout.shim_flag {
        Some((offset, bit)) => read::uint(code + u64::from(offset)).is_some_and(|f| f & bit != 0),
        None => false,
    }
}

/// Reads the text object at `obj` as UTF-8 into `out`, returning the length written (cut at
/// `out.len()` on a character boundary). Async-signal-safe.
pub fn read_text(obj: u64, layout: &Layout, types: &Types, out: &mut [u8]) -> Option<usize> {
    if !read::has_type(obj, types.text) {
        return None;
    }
    let length = read::word(obj + 16)? as usize;
    match layout.strings {
        StrModel::Bytes { data } => {
            let len = length.min(out.len());
            read::bytes(obj + u64::from(data), len, out)?;
            Some(len)
        }
        StrModel::Unicode {
            ascii_data,
            compact_data,
        } => {
            let state = read::uint(obj + 32)?;
            let kind = (state >> 2) & 7;
            let compact = state & (1 << 5) != 0;
            let ascii = state & (1 << 6) != 0;
            if !compact {
                return None;
            }
            if ascii {
                let len = length.min(out.len());
                read::bytes(obj + u64::from(ascii_data), len, out)?;
                return Some(len);
            }
            let data = obj + u64::from(compact_data);
            let mut written = 0;
            for i in 0..length.min(out.len()) {
                let ch = match kind {
                    1 => u32::from(read::byte(data + i as u64)?),
                    2 => {
                        let lo = read::byte(data + 2 * i as u64)?;
                        let hi = read::byte(data + 2 * i as u64 + 1)?;
                        u32::from(u16::from_le_bytes([lo, hi]))
                    }
                    4 => read::uint(data + 4 * i as u64)?,
                    _ => return None,
                };
                let ch = char::from_u32(ch).unwrap_or(char::REPLACEMENT_CHARACTER);
                if written + ch.len_utf8() > out.len() {
                    break;
                }
                written += ch.encode_utf8(&mut out[written..]).len();
            }
            Some(written)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_s_code_objects_share_the_cache_s_pages_without_sharing_entries() {
        // 100 code objects of 208 bytes, one after the other, as an import leaves them.
        let base = 0x7f3a_1c40_0000u64 + 0x1_2340;
        let homes: Vec<usize> = (0..100).map(|i| home(base + i * 208)).collect();
        let mut distinct = homes.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), homes.len());
        let mut pages: Vec<usize> = homes.iter().map(|h| h * 16 / 4096).collect();
        pages.sort();
        pages.dedup();
        assert!(pages.len() <= 3, "{} pages", pages.len());
        // Addresses a multiple of 2 MiB apart, where the low bits alone would repeat.
        let far: Vec<usize> = (0..64).map(|i| home(base + (i << 21))).collect();
        let mut distinct = far.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), far.len());
        assert_eq!(std::mem::size_of::<CacheEntry>(), 16);
    }
}
