//! Names answered in earlier runs: per object (by the build-id of the image loaded, its
//! separate debug file's presence and whether it is the main program), the functions that
//! [`SymbolTable::lookup`](super::SymbolTable::lookup) gave for the addresses profiles
//! named, each with the range of addresses it answers for.
//!
//! A short process names a few dozen addresses in three or four objects at exit. From the
//! symbol tables that meant, per object, opening and parsing its ELF file, probing for its
//! debug file and opening it, finding its unwind and string tables and mapping its cached
//! records: 0.1 ms for `python -c pass`'s three objects on this machine, mostly first
//! touches of pages of five files. The same program's next run samples mostly the same
//! functions: when every address of an object falls in a range answered before, the
//! object is named from one small file, and its symbol tables are not opened at all.
//!
//! A file is `<build-id>.<d|n><e|->.names` in the symbol cache's directory: a
//! [`HEADER`]-byte header ([`MAGIC`], the number of sorted answers, the byte where the
//! appended ones begin), the sorted answers' places (4 bytes each), the sorted
//! [`Answer`]s, then answers appended since, unsorted; each answer is followed by its name
//! padded to 8 bytes. A reader finds an address among the sorted answers by binary search
//! in place, and reads only the appended ones into an index.
//!
//! A process appends the answers its tables gave in one `write` (`O_APPEND`, so that
//! processes writing at once do not mix their bytes). When the appended answers would
//! outnumber [`APPENDED_MAX`] or half the sorted ones, it writes the whole file sorted
//! instead, under a name of its own renamed into place; one that finds no file makes it so
//! too (linked into place: a reader sees a whole file or none). Rewriting the file at
//! every new answer created and deleted a file per process (a directory operation and an
//! inode each, 20–30 µs on this machine's ext4); sorted this way, a file is rewritten a
//! few times in its life. Answers appended by a process while another renamed the file
//! are lost (the next run adds them again). A reader takes the
//! appended answers up to the first that does not fit (a write cut short); the build-id
//! is read from the image in memory (`PT_NOTE`), and an answer is only kept when the file
//! the tables were read from has the same one: an object replaced on disk while the
//! process ran (an upgrade) names nothing into the loaded image's answers. A file stops
//! growing at [`MAX_FILE`] bytes.

use super::{write_whole, Place, Symbol};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The first bytes of a file; the last digit is the format's version, which changes with
/// the rules that name functions too (`SymbolTable`'s), so that answers given under
/// other rules are not read.
const MAGIC: &[u8; 8] = b"PYIGNAM2";

/// Bytes before the sorted answers' places: magic (8), number of sorted answers (8),
/// byte where the appended answers begin (8), zeros.
const HEADER: usize = 64;

/// The most answers appended after the sorted ones before the file is written sorted
/// again (or half the sorted ones, if more).
const APPENDED_MAX: usize = 64;

/// The size of a file beyond which no answer is appended (libpython's 11,000 functions
/// with their names are about 0.7 MB).
const MAX_FILE: u64 = 4 << 20;

/// [`Answer::len`] of a range where no function is found (the lookup's `None`).
const NO_FUNCTION: u32 = u32::MAX;

/// What the tables answer for ELF virtual addresses `[lo, hi)` of an object: the function
/// `[start, end)` whose name is the `len` bytes that follow (40 bytes, this machine's byte
/// order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Answer {
    lo: u64,
    hi: u64,
    start: u64,
    end: u64,
    len: u32,
}

/// Bytes of an [`Answer`] before its name.
const ANSWER: usize = 40;

impl Answer {
    /// The answer at byte `at` of `file` and where the next one starts; `None` past the
    /// last whole one.
    fn read(file: &[u8], at: usize) -> Option<(Answer, usize)> {
        let bytes = file.get(at..at.checked_add(ANSWER)?)?;
        let word = |i: usize| u64::from_ne_bytes(bytes[i..i + 8].try_into().unwrap_or_default());
        let answer = Answer {
            lo: word(0),
            hi: word(8),
            start: word(16),
            end: word(24),
            len: u32::from_ne_bytes(bytes[32..36].try_into().unwrap_or_default()),
        };
        let name = if answer.len == NO_FUNCTION {
            0
        } else {
            answer.len as usize
        };
        let next = (at + ANSWER).checked_add(name.checked_add(7)? & !7)?;
        (answer.lo < answer.hi && next <= file.len()).then_some((answer, next))
    }

    /// Appends the answer `[lo, hi)` → `function` to `out`, its name padded to 8 bytes.
    fn write(out: &mut Vec<u8>, range: (u64, u64), function: Option<&Symbol>) {
        let (start, end, name) = match function {
            Some(s) => (s.start, s.end, s.name.as_bytes()),
            None => (0, 0, &[][..]),
        };
        let len = if function.is_some() {
            name.len() as u32
        } else {
            NO_FUNCTION
        };
        for word in [range.0, range.1, start, end] {
            out.extend_from_slice(&word.to_ne_bytes());
        }
        out.extend_from_slice(&len.to_ne_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(name);
        out.resize(out.len().next_multiple_of(8), 0);
    }
}

/// The names of one object: the answers read, and those added since.
pub(super) struct Names {
    /// Where the answers are kept; `None` for an object that cannot have them (no
    /// build-id).
    path: Option<PathBuf>,
    /// The file read, when it was there and its header holds.
    file: Option<memmap2::Mmap>,
    /// Number of sorted answers in `file`.
    sorted: usize,
    /// The appended answers of `file`: `[lo, hi)` and the byte where the answer starts,
    /// sorted by `lo`, overlapping ones left out.
    appended: Vec<(u64, u64, usize)>,
    /// Answers the tables gave in this process: `[lo, hi)` and the function, in the
    /// order given.
    added: Vec<(u64, u64, Option<Symbol>)>,
    /// `added` by `lo`: a profile of thousands of functions named from the tables looks
    /// each up among those before it.
    added_by_lo: BTreeMap<u64, usize>,
    /// How many of `added` are in the file.
    saved: usize,
    /// The file as this process last knew it: its sorted and appended answers (`None`:
    /// no file).
    on_disk: Option<(usize, usize)>,
}

impl Names {
    /// The names kept at `path` (`None`: an object without them), read if the file is
    /// there.
    pub(super) fn open(path: Option<PathBuf>) -> Names {
        let file = path.as_deref().and_then(read);
        let (mut sorted, mut appended) = (0, Vec::new());
        if let Some(file) = file.as_deref() {
            sorted = word(file, 8) as usize;
            let mut at = word(file, 16) as usize;
            while let Some((answer, next)) = Answer::read(file, at) {
                appended.push((answer.lo, answer.hi, at));
                at = next;
            }
            // Of answers for the same range (two processes that added it at once), the
            // first in the file.
            appended.sort_unstable_by_key(|a| (a.0, a.2));
            appended.dedup_by(|later, kept| later.0 < kept.1);
        }
        let on_disk = file.as_ref().map(|_| (sorted, appended.len()));
        Names {
            path,
            file,
            sorted,
            appended,
            added: Vec::new(),
            added_by_lo: BTreeMap::new(),
            saved: 0,
            on_disk,
        }
    }

    /// Whether answers can be kept for this object.
    pub(super) fn kept(&self) -> bool {
        self.path.is_some()
    }

    /// The function at ELF virtual address `svma` as answered before (`Some(None)`: no
    /// function there), or `None` when no range answered holds it.
    pub(super) fn find(&self, svma: u64) -> Option<Option<Symbol>> {
        if let Some(file) = self.file.as_deref() {
            let sorted = sorted_at(file, self.sorted, svma);
            let appended = || {
                let at = self
                    .appended
                    .partition_point(|a| a.0 <= svma)
                    .checked_sub(1)?;
                let (_, hi, offset) = self.appended[at];
                (svma < hi).then_some(offset)
            };
            if let Some((_, _, function)) =
                sorted.or_else(appended).and_then(|at| entry_at(file, at))
            {
                return Some(function);
            }
        }
        let (_, &at) = self.added_by_lo.range(..=svma).next_back()?;
        let (_, hi, answer) = &self.added[at];
        (svma < *hi).then(|| answer.clone())
    }

    /// Adds what the tables answered for `[lo, hi)`.
    pub(super) fn add(&mut self, range: (u64, u64), answer: Option<Symbol>) {
        self.added_by_lo.insert(range.0, self.added.len());
        self.added.push((range.0, range.1, answer));
    }

    /// Writes the answers added since the last time into the file: appended, or the
    /// whole file sorted when it has none yet or would have too many appended ones.
    /// Failures (a read-only home, a full file) leave the file as it was.
    pub(super) fn save(&mut self) {
        let Some(path) = self.path.as_deref() else {
            return;
        };
        let new = &self.added[self.saved..];
        if new.is_empty() {
            return;
        }
        let resort = match self.on_disk {
            None => true,
            Some((sorted, appended)) => appended + new.len() > APPENDED_MAX.max(sorted / 2),
        };
        let append_new = || {
            let mut bytes = Vec::new();
            for (lo, hi, answer) in new {
                Answer::write(&mut bytes, (*lo, *hi), answer.as_ref());
            }
            append(path, &bytes)
        };
        let written = if resort {
            let all = self.all_answers();
            let whole = sorted_file(&all);
            let size: usize = whole.iter().map(Vec::len).sum();
            let existing = self.on_disk.is_some();
            let place = if existing {
                Place::Replace
            } else {
                Place::IfNone
            };
            let parts: Vec<&[u8]> = whole.iter().map(Vec::as_slice).collect();
            if size as u64 <= MAX_FILE && write_whole(path, &parts, place) {
                self.on_disk = Some((all.len(), 0));
                true
            } else if !existing && append_new() {
                // Made by another process meanwhile.
                self.on_disk = Some((0, APPENDED_MAX));
                true
            } else {
                false
            }
        } else if append_new() {
            if let Some((_, appended)) = self.on_disk.as_mut() {
                *appended += new.len();
            }
            true
        } else {
            false
        };
        if written {
            self.saved = self.added.len();
        }
    }

    /// Every answer known, the file's read when it was opened and all added in this
    /// process (those appended since are not in that reading), sorted by address, the
    /// first of overlapping ones kept.
    fn all_answers(&self) -> Vec<(u64, u64, Option<Symbol>)> {
        let mut all = Vec::new();
        if let Some(file) = self.file.as_deref() {
            let places = (0..self.sorted).filter_map(|i| place(file, i));
            let read = places.chain(self.appended.iter().map(|a| a.2));
            all.extend(read.filter_map(|at| entry_at(file, at)));
        }
        all.extend(self.added.iter().cloned());
        all.sort_by_key(|a| a.0);
        all.dedup_by(|later, kept| later.0 < kept.1);
        all
    }
}

/// A whole file of the sorted answers `all` (sorted by address, not overlapping), in
/// parts: the header, the answers' places, the answers.
fn sorted_file(all: &[(u64, u64, Option<Symbol>)]) -> [Vec<u8>; 3] {
    let mut answers = Vec::new();
    let mut places = Vec::new();
    let start = HEADER + (4 * all.len()).next_multiple_of(8);
    for (lo, hi, answer) in all {
        places.extend_from_slice(&((start + answers.len()) as u32).to_ne_bytes());
        Answer::write(&mut answers, (*lo, *hi), answer.as_ref());
    }
    places.resize(start - HEADER, 0);
    let mut header = vec![0u8; HEADER];
    header[..8].copy_from_slice(MAGIC);
    header[8..16].copy_from_slice(&(all.len() as u64).to_ne_bytes());
    header[16..24].copy_from_slice(&((start + answers.len()) as u64).to_ne_bytes());
    [header, places, answers]
}

/// The header's word at byte `at` of a file [`read`] accepted.
fn word(file: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(file[at..at + 8].try_into().unwrap_or_default())
}

/// The byte where sorted answer `i` starts (bounds-checked).
fn place(file: &[u8], i: usize) -> Option<usize> {
    let at = HEADER.checked_add(i.checked_mul(4)?)?;
    Some(u32::from_ne_bytes(file.get(at..at + 4)?.try_into().ok()?) as usize)
}

/// The byte where the sorted answer that holds `svma` starts, found by binary search
/// among the `sorted` answers of `file`; `None` when none does. A file damaged after it
/// was written can misname here, not stop the process (every read is bounds-checked).
fn sorted_at(file: &[u8], sorted: usize, svma: u64) -> Option<usize> {
    let lo_of = |i: usize| Some(Answer::read(file, place(file, i)?)?.0.lo);
    let (mut lo, mut hi) = (0, sorted);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if lo_of(mid)? <= svma {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let at = place(file, lo.checked_sub(1)?)?;
    let (answer, _) = Answer::read(file, at)?;
    (svma < answer.hi).then_some(at)
}

/// The answer at byte `at`: its range `[lo, hi)` and its function (`None`: no function
/// there); `None` when it is not whole.
fn entry_at(file: &[u8], at: usize) -> Option<(u64, u64, Option<Symbol>)> {
    let (answer, _) = Answer::read(file, at)?;
    if answer.len == NO_FUNCTION {
        return Some((answer.lo, answer.hi, None));
    }
    let name = file.get(at + ANSWER..at + ANSWER + answer.len as usize)?;
    let function = Symbol {
        start: answer.start,
        end: answer.end,
        name: std::str::from_utf8(name).ok()?.to_string(),
    };
    Some((answer.lo, answer.hi, Some(function)))
}

/// The file at `path` mapped, if it begins with [`MAGIC`] and its header holds: the
/// sorted answers' places and the appended answers' start inside the file, in that order.
fn read(path: &Path) -> Option<memmap2::Mmap> {
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: a read-only mapping of a file that only grows, or is replaced by rename;
    // every read of it is bounds-checked.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    if map.len() < HEADER || !map.starts_with(MAGIC) {
        return None;
    }
    let (sorted, appended) = (word(&map, 8), word(&map, 16));
    let places_end = (HEADER as u64).checked_add(sorted.checked_mul(4)?)?;
    (places_end <= appended && appended <= map.len() as u64).then_some(map)
}

/// Appends `bytes` to the file at `path` in one `write`, unless it has grown to
/// [`MAX_FILE`]. Returns whether the bytes are in the file.
fn append(path: &Path, bytes: &[u8]) -> bool {
    let Ok(file) = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    else {
        return false;
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
    size < MAX_FILE && (&file).write_all(bytes).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("pyigprof-names-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn symbol(start: u64, end: u64, name: &str) -> Option<Symbol> {
        Some(Symbol {
            start,
            end,
            name: name.to_string(),
        })
    }

    #[test]
    fn answers_saved_are_found_again_by_the_next_reader() {
        let dir = dir("saved");
        let path = dir.join("ab.n-.names");
        let mut names = Names::open(Some(path.clone()));
        assert_eq!(names.find(0x1000), None);
        names.add((0x1000, 0x1040), symbol(0x1000, 0x1040, "main"));
        names.add((0x2000, 0x2001), None);
        names.save();
        assert_eq!(names.find(0x1000), Some(symbol(0x1000, 0x1040, "main")));
        names.add((0x1040, 0x1100), symbol(0x1040, 0x1200, "helper_7"));
        names.save();
        names.save();
        // Another process added one of the same ranges meanwhile.
        let mut other = Names::open(Some(path.clone()));
        other.add((0x1040, 0x1100), symbol(0x1040, 0x1200, "helper_7"));
        other.save();
        let again = Names::open(Some(path.clone()));
        assert_eq!(
            (again.sorted, again.appended.len()),
            (2, 1),
            "made sorted, then appended to"
        );
        assert_eq!(again.find(0x1000), Some(symbol(0x1000, 0x1040, "main")));
        assert_eq!(again.find(0x103f), Some(symbol(0x1000, 0x1040, "main")));
        assert_eq!(again.find(0x1040), Some(symbol(0x1040, 0x1200, "helper_7")));
        assert_eq!(again.find(0x10ff), Some(symbol(0x1040, 0x1200, "helper_7")));
        assert_eq!(again.find(0x1100), None, "past every range: not answered");
        assert_eq!(again.find(0x2000), Some(None), "answered: no function");
        assert_eq!(again.find(0xfff), None);
        // No file of its own left behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn answers_added_in_any_order_are_found_before_they_are_saved() {
        let mut names = Names::open(None);
        for i in (0..1000u64).rev() {
            let lo = 0x10_0000 + 0x100 * i;
            names.add((lo, lo + 0x80), symbol(lo, lo + 0x80, &format!("f{i}")));
        }
        for i in 0..1000u64 {
            let lo = 0x10_0000 + 0x100 * i;
            assert_eq!(
                names.find(lo),
                Some(symbol(lo, lo + 0x80, &format!("f{i}")))
            );
            assert_eq!(names.find(lo + 0x80), None, "between two ranges");
        }
        assert_eq!(names.find(0xf_ffff), None);
    }

    #[test]
    fn a_file_with_many_appended_answers_is_written_sorted_again() {
        let dir = dir("resorted");
        let path = dir.join("ab.n-.names");
        let mut inodes = Vec::new();
        // From the top down, one answer a process.
        for i in (0..200u64).rev() {
            let mut names = Names::open(Some(path.clone()));
            let lo = 0x10_0000 + 0x100 * i;
            names.add((lo, lo + 0x80), symbol(lo, lo + 0x80, &format!("f{i}")));
            names.save();
            use std::os::unix::fs::MetadataExt;
            inodes.push(std::fs::metadata(&path).unwrap().ino());
        }
        inodes.dedup();
        let names = Names::open(Some(path.clone()));
        assert!(
            names.appended.len() <= APPENDED_MAX && names.sorted >= 200 - APPENDED_MAX,
            "{} sorted, {} appended",
            names.sorted,
            names.appended.len()
        );
        assert!(
            inodes.len() <= 4,
            "the file was written whole {} times",
            inodes.len()
        );
        for i in 0..200u64 {
            let lo = 0x10_0000 + 0x100 * i;
            assert_eq!(
                names.find(lo + 0x7f),
                Some(symbol(lo, lo + 0x80, &format!("f{i}")))
            );
            assert_eq!(names.find(lo + 0x80), None);
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_cut_short_keeps_its_whole_answers_and_one_of_another_format_none() {
        let dir = dir("damaged");
        let path = dir.join("ab.n-.names");
        let mut names = Names::open(Some(path.clone()));
        names.add((0x1000, 0x1040), symbol(0x1000, 0x1040, "main"));
        names.save();
        names.add((0x2000, 0x2040), symbol(0x2000, 0x2040, "other"));
        names.add((0x3000, 0x3040), symbol(0x3000, 0x3040, "third"));
        names.save();
        let good = std::fs::read(&path).unwrap();
        std::fs::write(&path, &good[..good.len() - 1]).unwrap();
        let cut = Names::open(Some(path.clone()));
        assert_eq!(cut.find(0x1000), Some(symbol(0x1000, 0x1040, "main")));
        assert_eq!(cut.find(0x2000), Some(symbol(0x2000, 0x2040, "other")));
        assert_eq!(cut.find(0x3000), None, "the answer cut short");
        let mut other = good.clone();
        other[7] = b'9';
        for bytes in [other, good[..40].to_vec(), Vec::new()] {
            std::fs::write(&path, &bytes).unwrap();
            assert_eq!(Names::open(Some(path.clone())).find(0x1000), None);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
