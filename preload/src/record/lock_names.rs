//! A table from an address (a semaphore's, a mutex's, a Python object's) to the frame key
//! that names a lock ([`crate::capture::frames::Lock`]), for the lock profiler
//! ([`crate::sources::locks`]).
//!
//! Lock-free and async-signal-safe, in memory mapped ahead of time: a set-associative
//! cache of [`WAYS`] entries per set, each guarded by a sequence number (odd while it is
//! written), so that a reader never takes an address from one write with a key from
//! another. When a set is full an entry is replaced: a lock that loses its entry (one of
//! more than `WAYS` live ones whose addresses share a set) is then unnamed, not misnamed.

use crate::mem::ZeroedArray;
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Entries per set.
pub const WAYS: usize = 4;

#[derive(Default)]
struct Entry {
    /// Even when the entry is stable, odd while a writer fills it.
    sequence: AtomicU64,
    /// The address the entry is for; 0 for none.
    address: AtomicU64,
    key: AtomicU64,
}

/// The table: `sets` × [`WAYS`] entries (24 bytes each; pages are touched as used).
pub struct LockNames {
    entries: ZeroedArray<Entry>,
    sets: usize,
}

impl LockNames {
    /// Maps a table of `sets` sets (a power of two). `None` when the kernel refuses.
    pub fn new(sets: usize) -> Option<LockNames> {
        let sets = sets.next_power_of_two();
        Some(LockNames {
            entries: ZeroedArray::new(sets * WAYS)?,
            sets,
        })
    }

    fn set(&self, address: u64) -> &[Entry] {
        // Allocations are 16-byte aligned: the low bits say little.
        let hash = (address >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20;
        let first = (hash as usize & (self.sets - 1)) * WAYS;
        &self.entries[first..first + WAYS]
    }

    /// The key stored for `address`.
    pub fn get(&self, address: u64) -> Option<u64> {
        if address == 0 {
            return None;
        }
        self.set(address).iter().find_map(|entry| {
            let before = entry.sequence.load(Ordering::Acquire);
            if before & 1 != 0 || entry.address.load(Ordering::Relaxed) != address {
                return None;
            }
            let key = entry.key.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            (entry.sequence.load(Ordering::Relaxed) == before).then_some(key)
        })
    }

    /// Stores `key` for `address` (replacing what it had, else in a free entry, else over
    /// another address's). False when another thread was writing the entry chosen.
    pub fn insert(&self, address: u64, key: u64) -> bool {
        if address == 0 {
            return false;
        }
        let set = self.set(address);
        let way = set
            .iter()
            .position(|e| e.address.load(Ordering::Relaxed) == address)
            .or_else(|| {
                set.iter()
                    .position(|e| e.address.load(Ordering::Relaxed) == 0)
            })
            .unwrap_or((address >> 4) as usize % WAYS);
        write(&set[way], address, key)
    }

    /// Forgets `address` (its lock is destroyed: the memory may hold another one next).
    pub fn remove(&self, address: u64) {
        if address == 0 {
            return;
        }
        for entry in self.set(address) {
            if entry.address.load(Ordering::Relaxed) == address {
                write(entry, 0, 0);
            }
        }
    }

    /// Forgets everything (a fork child). Only when no other thread uses the table.
    pub fn clear(&self) {
        self.entries.clear();
    }
}

fn write(entry: &Entry, address: u64, key: u64) -> bool {
    let before = entry.sequence.load(Ordering::Relaxed);
    if before & 1 != 0
        || entry
            .sequence
            .compare_exchange(before, before + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return false;
    }
    entry.address.store(address, Ordering::Relaxed);
    entry.key.store(key, Ordering::Relaxed);
    entry.sequence.store(before + 2, Ordering::Release);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_keeps_its_name_until_removed_or_replaced() {
        let names = LockNames::new(2).unwrap();
        assert!(names.insert(0x1000, 7));
        assert_eq!(names.get(0x1000), Some(7));
        assert!(names.insert(0x1000, 8));
        assert_eq!(names.get(0x1000), Some(8));
        names.remove(0x1000);
        assert_eq!(names.get(0x1000), None);
        // More addresses than entries: each found is right, the rest unnamed.
        for a in 1..=64u64 {
            names.insert(a << 4, a);
        }
        let found: Vec<u64> = (1..=64u64).filter_map(|a| names.get(a << 4)).collect();
        assert!(!found.is_empty() && found.len() <= 2 * WAYS);
        for a in 1..=64u64 {
            if let Some(k) = names.get(a << 4) {
                assert_eq!(k, a);
            }
        }
        assert_eq!(names.get(0), None);
    }
}
