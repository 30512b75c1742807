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
//! A file is `<build-id>.<d|n><e|->.names` in the symbol cache's directory: [`MAGIC`]
//! (8 bytes), then [`Answer`]s, each followed by its name padded to 8 bytes. It only grows:
//! a process appends the answers its tables gave in one `write` (`O_APPEND`, so that
//! processes writing at once do not mix their bytes); one that finds no file makes it
//! whole under another name and links it into place (a reader sees the magic or no
//! file). Replacing the file at every new answer instead deleted an inode each time, and
//! ext4 skips recently deleted inodes one by one when it allocates the next (a profile's
//! file among them). A reader takes the answers up to the first that does not fit (a
//! write cut short); the build-id is read from the image in memory (`PT_NOTE`), and an
//! answer is only kept when the file the tables were read from has the same one: an object
//! replaced on disk while the process ran (an upgrade) names nothing into the loaded
//! image's answers. A file stops growing at [`MAX_FILE`] bytes.

use super::Symbol;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The first bytes of a file; the last digit is the format's version, which changes with
/// the rules that name functions too (`SymbolTable`'s), so that answers given under
/// other rules are not read.
const MAGIC: &[u8; 8] = b"PYIGNAM1";

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
    /// The file read, when it was there.
    file: Option<memmap2::Mmap>,
    /// The answers of `file`: `[lo, hi)` and the byte where the answer starts, sorted by
    /// `lo`, overlapping ones left out.
    index: Vec<(u64, u64, usize)>,
    /// Answers the tables gave in this process: `[lo, hi)` and the function.
    added: Vec<(u64, u64, Option<Symbol>)>,
    /// How many of `added` are in the file.
    saved: usize,
}

impl Names {
    /// The names kept at `path` (`None`: an object without them), read if the file is
    /// there.
    pub(super) fn open(path: Option<PathBuf>) -> Names {
        let file = path.as_deref().and_then(read);
        let mut index = Vec::new();
        if let Some(file) = file.as_deref() {
            // About one answer per 64 bytes.
            index.reserve(file.len() / 64);
            let mut at = MAGIC.len();
            while let Some((answer, next)) = Answer::read(file, at) {
                index.push((answer.lo, answer.hi, at));
                at = next;
            }
            // Of answers for the same range (two processes that added it at once), the
            // first in the file.
            index.sort_unstable_by_key(|a| (a.0, a.2));
            index.dedup_by(|later, kept| later.0 < kept.1);
        }
        Names {
            path,
            file,
            index,
            added: Vec::new(),
            saved: 0,
        }
    }

    /// Whether answers can be kept for this object.
    pub(super) fn kept(&self) -> bool {
        self.path.is_some()
    }

    /// The function at ELF virtual address `svma` as answered before (`Some(None)`: no
    /// function there), or `None` when no range answered holds it.
    pub(super) fn find(&self, svma: u64) -> Option<Option<Symbol>> {
        if let Some(found) = self.find_in_file(svma) {
            return Some(found);
        }
        self.added
            .iter()
            .find(|(lo, hi, _)| *lo <= svma && svma < *hi)
            .map(|(_, _, answer)| answer.clone())
    }

    fn find_in_file(&self, svma: u64) -> Option<Option<Symbol>> {
        let file = self.file.as_deref()?;
        let at = self.index.partition_point(|a| a.0 <= svma).checked_sub(1)?;
        let (_, hi, offset) = self.index[at];
        if svma >= hi {
            return None;
        }
        let (answer, _) = Answer::read(file, offset)?;
        if answer.len == NO_FUNCTION {
            return Some(None);
        }
        let name = file.get(offset + ANSWER..offset + ANSWER + answer.len as usize)?;
        Some(Some(Symbol {
            start: answer.start,
            end: answer.end,
            name: std::str::from_utf8(name).ok()?.to_string(),
        }))
    }

    /// Adds what the tables answered for `[lo, hi)`.
    pub(super) fn add(&mut self, range: (u64, u64), answer: Option<Symbol>) {
        self.added.push((range.0, range.1, answer));
    }

    /// Appends the answers added since the last time to the file (making it if there is
    /// none). Failures (a read-only home, a full file) leave the file as it was.
    pub(super) fn save(&mut self) {
        let Some(path) = self.path.as_deref() else {
            return;
        };
        if self.saved == self.added.len() {
            return;
        }
        let mut bytes = Vec::new();
        for (lo, hi, answer) in &self.added[self.saved..] {
            Answer::write(&mut bytes, (*lo, *hi), answer.as_ref());
        }
        if append(path, &bytes) {
            self.saved = self.added.len();
        }
    }
}

/// The file at `path` mapped, if it begins with [`MAGIC`].
fn read(path: &Path) -> Option<memmap2::Mmap> {
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: a read-only mapping of a file that only grows; the answers read are those
    // whole when it was mapped (bounds-checked).
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    map.starts_with(MAGIC).then_some(map)
}

/// Appends `bytes` to the file at `path` in one `write`; a file not there yet is made with
/// them, whole, under a name of its own and linked into place (if another process linked
/// its own meanwhile, appended to that one). Returns whether the bytes are in the file.
fn append(path: &Path, bytes: &[u8]) -> bool {
    let appended = |file: std::fs::File| {
        let size = file.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
        size < MAX_FILE && (&file).write_all(bytes).is_ok()
    };
    let existing = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    match existing {
        Ok(file) => return appended(file),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return false,
        Err(_) => {}
    }
    let Some(dir) = path.parent() else {
        return false;
    };
    let _ = std::fs::create_dir_all(dir);
    // Unique to this write: two threads of one process may make the same file.
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let own = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id(),
        MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let made = std::fs::File::create(&own).and_then(|mut file| {
        let mut whole = MAGIC.to_vec();
        whole.extend_from_slice(bytes);
        file.write_all(&whole)
    });
    let linked = made.is_ok() && std::fs::hard_link(&own, path).is_ok();
    let _ = std::fs::remove_file(&own);
    if linked {
        return true;
    }
    // Made by another process meanwhile.
    std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .is_ok_and(appended)
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
        // Another process added the same range meanwhile.
        let mut other = Names::open(None);
        other.path = Some(path.clone());
        other.add((0x1000, 0x1040), symbol(0x1000, 0x1040, "main"));
        other.save();
        let again = Names::open(Some(path.clone()));
        assert_eq!(again.index.len(), 3, "{:?}", again.index);
        assert_eq!(again.find(0x1000), Some(symbol(0x1000, 0x1040, "main")));
        assert_eq!(again.find(0x103f), Some(symbol(0x1000, 0x1040, "main")));
        assert_eq!(again.find(0x1040), Some(symbol(0x1040, 0x1200, "helper_7")));
        assert_eq!(again.find(0x10ff), Some(symbol(0x1040, 0x1200, "helper_7")));
        assert_eq!(again.find(0x1100), None, "past every range: not answered");
        assert_eq!(again.find(0x2000), Some(None), "answered: no function");
        assert_eq!(again.find(0xfff), None);
        // Made once, then appended to: no file of its own left behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_cut_short_keeps_its_whole_answers_and_one_of_another_format_none() {
        let dir = dir("damaged");
        let path = dir.join("ab.n-.names");
        let mut names = Names::open(Some(path.clone()));
        names.add((0x1000, 0x1040), symbol(0x1000, 0x1040, "main"));
        names.add((0x2000, 0x2040), symbol(0x2000, 0x2040, "other"));
        names.save();
        let good = std::fs::read(&path).unwrap();
        std::fs::write(&path, &good[..good.len() - 1]).unwrap();
        let cut = Names::open(Some(path.clone()));
        assert_eq!(cut.find(0x1000), Some(symbol(0x1000, 0x1040, "main")));
        assert_eq!(cut.find(0x2000), None, "the answer cut short");
        let mut other = good.clone();
        other[7] = b'9';
        for bytes in [other, Vec::new()] {
            std::fs::write(&path, &bytes).unwrap();
            assert_eq!(Names::open(Some(path.clone())).find(0x1000), None);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
