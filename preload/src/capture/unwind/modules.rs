//! The objects mapped into the process (executable, shared libraries, the vDSO), their
//! executable code and their CFI.
//!
//! Facts (shared/design/unwinding.md): `dl_iterate_phdr` takes the loader lock and
//! allocates, so the module list is rebuilt outside the handler — at start-up and after every `dlopen`/`dlclose` — and
//! published as an immutable [`Snapshot`] through an atomic pointer. Snapshots are never
//! freed: a handler may still be reading an old one. Unwind data points into the mapped
//! images (`PT_GNU_EH_FRAME`); before `dlclose` can unmap an object, its module is removed
//! and the samples in flight are waited for.

use crate::capture::unwind::cfi::CfiModule;
use std::ffi::CStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

/// One mapped object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Path of the file (the executable's real path for the main program), or the name the
    /// loader gives for objects without a file (`linux-vdso.so.1`).
    pub path: PathBuf,
    /// Load bias: run-time address minus the ELF virtual address.
    pub bias: u64,
    /// `[start, end)` run-time addresses covered by its `PT_LOAD` segments.
    pub range: (u64, u64),
    /// Whether the object has no file and must be read from memory (the vDSO).
    pub in_memory: bool,
    /// Its GNU build-id (`NT_GNU_BUILD_ID`), read from the `PT_NOTE` segments of the image
    /// in memory; `None` when it has none.
    pub build_id: Option<BuildId>,
}

/// A GNU build-id: the `NT_GNU_BUILD_ID` note's bytes (20 from GNU ld's SHA-1, 16 from
/// MD5 or a UUID, 8 from lld's xxHash; at most [`BuildId::MAX`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuildId {
    len: u8,
    bytes: [u8; BuildId::MAX],
}

impl BuildId {
    /// The longest build-id kept, in bytes.
    pub const MAX: usize = 64;

    /// The build-id `bytes`; `None` when empty or longer than [`BuildId::MAX`].
    pub fn new(bytes: &[u8]) -> Option<BuildId> {
        if bytes.is_empty() || bytes.len() > BuildId::MAX {
            return None;
        }
        let mut id = BuildId {
            len: bytes.len() as u8,
            bytes: [0; BuildId::MAX],
        };
        id.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(id)
    }

    /// Its bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The build-id in the ELF notes `notes` (`Elf64_Nhdr`s, each followed by its name and
    /// description padded to 4 bytes: the System V ABI's note section): the description of
    /// the first note of type `NT_GNU_BUILD_ID` (3) named `GNU`.
    pub fn in_notes(notes: &[u8]) -> Option<BuildId> {
        const NT_GNU_BUILD_ID: u32 = 3;
        let word = |at: usize| -> Option<usize> {
            Some(u32::from_ne_bytes(notes.get(at..at + 4)?.try_into().ok()?) as usize)
        };
        let mut at = 0;
        while at + 12 <= notes.len() {
            let (name_size, desc_size, kind) = (word(at)?, word(at + 4)?, word(at + 8)?);
            let name_at = at + 12;
            let desc_at = name_at.checked_add(name_size.checked_add(3)? & !3)?;
            let next = desc_at.checked_add(desc_size.checked_add(3)? & !3)?;
            if kind as u32 == NT_GNU_BUILD_ID
                && notes.get(name_at..name_at + name_size)? == b"GNU\0"
            {
                return BuildId::new(notes.get(desc_at..desc_at + desc_size)?);
            }
            at = next;
        }
        None
    }
}

/// An immutable view of the mapped objects, read by the handler.
pub struct Snapshot {
    /// The unwind sections of every object that has them (`cfi.rs`), sorted by start
    /// address.
    pub cfi: Vec<CfiModule>,
    /// The objects, in `dl_iterate_phdr` order.
    pub objects: Vec<ObjectInfo>,
    /// Run-time `[start, end)` of every object's executable segments (`PT_LOAD` with
    /// `PF_X`), sorted.
    pub code: Vec<(u64, u64)>,
    /// Run-time `[start, end)` of every object, sorted.
    pub spans: Vec<(u64, u64)>,
}

impl Snapshot {
    /// Whether `ret`, a return address read from the stack, can be one: inside an object's
    /// executable segment, or outside every object (code generated at run time, such as
    /// the JIT's) at a user-space address that is not in the thread's stack `stack`.
    /// Anything else — 0, small integers, stack addresses, an object's data, values above
    /// user space — is not code, and ends the walk. Async-signal-safe.
    #[inline]
    pub fn may_return_to(&self, ret: u64, stack: (u64, u64)) -> bool {
        if self.in_code(ret) {
            return true;
        }
        !inside(&self.spans, ret)
            && (MIN_CODE_ADDRESS..USER_SPACE_END).contains(&ret)
            && !(stack.0 <= ret && ret < stack.1)
    }

    /// Whether `addr` lies in an object's executable segment. Async-signal-safe.
    #[inline]
    pub fn in_code(&self, addr: u64) -> bool {
        inside(&self.code, addr)
    }

    /// Whether `addr` lies in a loaded object (its code or its data). Async-signal-safe.
    #[inline]
    pub fn in_object(&self, addr: u64) -> bool {
        inside(&self.spans, addr)
    }

    /// Whether `a` and `b` lie in the same loaded object. Async-signal-safe.
    pub fn same_object(&self, a: u64, b: u64) -> bool {
        let i = self.spans.partition_point(|r| r.0 <= a);
        i > 0 && {
            let (start, end) = self.spans[i - 1];
            a < end && (start..end).contains(&b)
        }
    }

    /// Whether `ret` lies in an object's executable segment right after a call instruction
    /// (`heuristic::ends_with_call` on the up to 8 bytes before it): what a return address
    /// of a frame of code without CFI must be. Async-signal-safe: reads only mapped code.
    pub fn follows_call(&self, ret: u64) -> bool {
        let i = self.code.partition_point(|r| r.0 <= ret);
        if i == 0 {
            return false;
        }
        let (start, end) = self.code[i - 1];
        if ret >= end || ret < start + 2 {
            return false;
        }
        let len = (ret - start).min(8) as usize;
        // `[ret - len, ret)` lies inside an executable PT_LOAD segment of a mapped object
        // (readable: x86-64 has no execute-only pages by default); an object is removed
        // from the snapshot before it is unmapped, and a read racing with that fails.
        let mut code = [0u8; 8];
        crate::capture::probe::copy(ret - len as u64, &mut code[..len])
            && super::heuristic::ends_with_call(&code[..len])
    }

    fn new(cfi: Vec<CfiModule>, found: &[Found]) -> Snapshot {
        let mut code: Vec<(u64, u64)> = found
            .iter()
            .flat_map(|f| {
                f.code
                    .iter()
                    .map(|&(lo, hi)| (lo + f.info.bias, hi + f.info.bias))
            })
            .collect();
        code.sort_unstable();
        let mut spans: Vec<(u64, u64)> = found.iter().map(|f| f.info.range).collect();
        spans.sort_unstable();
        Snapshot {
            cfi,
            objects: found.iter().map(|f| f.info.clone()).collect(),
            code,
            spans,
        }
    }
}

/// Whether `addr` lies in one of `ranges` (sorted, `[start, end)`, not overlapping).
#[inline]
fn inside(ranges: &[(u64, u64)], addr: u64) -> bool {
    let i = ranges.partition_point(|r| r.0 <= addr);
    i > 0 && addr < ranges[i - 1].1
}

/// Lowest address code can be at: Linux's default `vm.mmap_min_addr` (64 KiB) keeps the
/// pages below it unmapped.
const MIN_CODE_ADDRESS: u64 = 0x1_0000;
/// End of x86-64 user space (47-bit addresses).
const USER_SPACE_END: u64 = 1 << 47;

static CURRENT: AtomicPtr<Snapshot> = AtomicPtr::new(std::ptr::null_mut());
static UPDATE: Mutex<()> = Mutex::new(());
/// Every object ever seen, for naming frames of objects that have since been closed.
static HISTORY: Mutex<Vec<ObjectInfo>> = Mutex::new(Vec::new());

/// The object list's locks, for `fork` ([`crate::fork_locks`]), in the order [`rescan`]
/// takes them: its update lock, then its history (the window writer copies the history
/// for each window; a process that forked meanwhile left its child waiting for it at its
/// first `dlopen`).
pub(crate) fn fork_locks() -> (&'static Mutex<()>, &'static Mutex<Vec<ObjectInfo>>) {
    (&UPDATE, &HISTORY)
}

/// The current snapshot (`None` before the first scan). Async-signal-safe.
#[inline(always)]
pub fn current() -> Option<&'static Snapshot> {
    // SAFETY: snapshots are leaked boxes, never freed.
    unsafe { CURRENT.load(Ordering::Acquire).as_ref() }
}

/// Every object seen since start-up (or since the last fork), newest last.
pub fn history() -> Vec<ObjectInfo> {
    HISTORY.lock().map(|h| h.clone()).unwrap_or_default()
}

/// A module as found by `dl_iterate_phdr`, with what unwinding needs.
struct Found {
    info: ObjectInfo,
    /// ELF virtual `[start, end)` of the executable `PT_LOAD` segments (the first is the
    /// text that `DW_EH_PE_textrel` pointers are relative to).
    code: Vec<(u64, u64)>,
    eh_frame_hdr: Option<(u64, u64)>,
    segments: Vec<(u64, u64)>,
}

/// Re-reads the list of mapped objects and publishes a snapshot with the new ones added and
/// the vanished ones removed. Not async-signal-safe (called after dlopen/dlclose and at
/// start-up).
pub fn rescan() {
    let Ok(_guard) = UPDATE.lock() else { return };
    let found = enumerate();
    let old = current();
    let mut cfi = old.map(|s| s.cfi.clone()).unwrap_or_default();
    let old_objects: &[ObjectInfo] = old.map(|s| &s.objects[..]).unwrap_or(&[]);
    for gone in old_objects
        .iter()
        .filter(|o| !found.iter().any(|f| f.info == **o))
    {
        cfi.retain(|m| m.range.0 != gone.range.0);
    }
    let mut history = HISTORY.lock().ok();
    for f in &found {
        if old_objects.contains(&f.info) {
            continue;
        }
        if let Some(sections) = Sections::of(f) {
            cfi.extend(sections.cfi_module(f));
        }
        if let Some(h) = history.as_mut() {
            if !h.contains(&f.info) {
                h.push(f.info.clone());
            }
        }
    }
    cfi.sort_by_key(|m| m.range.0);
    publish(Snapshot::new(cfi, &found));
}

/// Removes the object that `handle` (from `dlopen`) refers to from the snapshot, so that
/// no sample reads its tables once `dlclose` may unmap it. Waits for samples in flight.
/// `handle` is the argument of an interposed `dlclose`: a handle `dlopen` returned (a
/// program passing anything else to `dlclose` is already undefined behaviour).
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn forget_handle(handle: *mut libc::c_void) {
    if handle.is_null() {
        return;
    }
    let mut map: *mut LinkMap = std::ptr::null_mut();
    // SAFETY: dlinfo with RTLD_DI_LINKMAP stores a `struct link_map *` into `map`.
    let rc = unsafe {
        libc::dlinfo(
            handle,
            libc::RTLD_DI_LINKMAP,
            (&mut map as *mut *mut LinkMap).cast(),
        )
    };
    if rc != 0 || map.is_null() {
        return;
    }
    // SAFETY: glibc returned a valid link map.
    let bias = unsafe { (*map).l_addr };
    let Ok(_guard) = UPDATE.lock() else { return };
    let Some(old) = current() else { return };
    let doomed: Vec<&ObjectInfo> = old
        .objects
        .iter()
        .filter(|o| o.bias == bias as u64 && !o.in_memory)
        .collect();
    if doomed.is_empty() {
        return;
    }
    let mut cfi = old.cfi.clone();
    for o in &doomed {
        cfi.retain(|m| m.range.0 != o.range.0);
    }
    let objects = old
        .objects
        .iter()
        .filter(|o| !doomed.contains(o))
        .cloned()
        .collect();
    let kept = |r: &&(u64, u64)| !doomed.iter().any(|o| o.range.0 <= r.0 && r.0 < o.range.1);
    publish(Snapshot {
        cfi,
        objects,
        code: old.code.iter().filter(kept).copied().collect(),
        spans: old.spans.iter().filter(kept).copied().collect(),
    });
    crate::signal_guard::wait_for_handlers();
}

/// glibc's `struct link_map` (public part, `<link.h>`).
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const libc::c_char,
    l_ld: *mut libc::c_void,
    l_next: *mut LinkMap,
    l_prev: *mut LinkMap,
}

fn publish(snapshot: Snapshot) {
    let fresh = Box::into_raw(Box::new(snapshot));
    // The previous snapshot is leaked on purpose: a handler may still hold it.
    CURRENT.store(fresh, Ordering::Release);
}

fn enumerate() -> Vec<Found> {
    let mut found: Vec<Found> = Vec::new();
    unsafe extern "C" fn callback(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info and our Vec.
        let (info, found) = unsafe { (&*info, &mut *data.cast::<Vec<Found>>()) };
        if let Some(f) = describe(info) {
            found.push(f);
        }
        0
    }
    // SAFETY: the callback matches the expected signature and only uses `found`.
    unsafe { libc::dl_iterate_phdr(Some(callback), (&mut found as *mut Vec<Found>).cast()) };
    found
}

fn describe(info: &libc::dl_phdr_info) -> Option<Found> {
    let bias = info.dlpi_addr;
    // SAFETY: the loader's program headers for this object.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let mut segments = Vec::new();
    let mut code = Vec::new();
    let mut eh_frame_hdr = None;
    let mut notes = Vec::new();
    for ph in phdrs {
        match ph.p_type {
            libc::PT_LOAD => {
                segments.push((ph.p_vaddr, ph.p_vaddr + ph.p_memsz));
                if ph.p_flags & libc::PF_X != 0 {
                    code.push((ph.p_vaddr, ph.p_vaddr + ph.p_memsz));
                }
            }
            libc::PT_GNU_EH_FRAME => eh_frame_hdr = Some((ph.p_vaddr, ph.p_vaddr + ph.p_memsz)),
            libc::PT_NOTE => notes.push((ph.p_vaddr, ph.p_vaddr + ph.p_filesz)),
            _ => {}
        }
    }
    let start = segments.iter().map(|s| s.0).min()? + bias;
    let end = segments.iter().map(|s| s.1).max()? + bias;
    let name = if info.dlpi_name.is_null() {
        &[][..]
    } else {
        // SAFETY: NUL-terminated name owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes()
    };
    let (path, in_memory) = if name.is_empty() {
        (std::fs::read_link("/proc/self/exe").ok()?, false)
    } else {
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(name));
        let in_memory = !path.is_absolute() && !path.exists();
        (path, in_memory)
    };
    let mut found = Found {
        info: ObjectInfo {
            path,
            bias,
            range: (start, end),
            in_memory,
            build_id: None,
        },
        code,
        eh_frame_hdr,
        segments,
    };
    // From notes inside a loaded segment (mapped, readable) only.
    found.info.build_id = notes
        .iter()
        .filter(|n| {
            found
                .segments
                .iter()
                .any(|s| s.0 <= n.0 && n.0 <= n.1 && n.1 <= s.1)
        })
        .find_map(|&(lo, hi)| BuildId::in_notes(image(&found, lo, hi)));
    Some(found)
}

/// Memory of the mapped image at ELF virtual addresses `[lo, hi)` of object `f`.
fn image(f: &Found, lo: u64, hi: u64) -> &'static [u8] {
    // SAFETY: the range lies inside a PT_LOAD segment of a mapped object; the module using
    // it is removed before the object is unmapped (forget_handle).
    unsafe { std::slice::from_raw_parts((f.info.bias + lo) as *const u8, (hi - lo) as usize) }
}

/// An object's unwind sections in its mapped image, at their ELF virtual addresses.
struct Sections {
    eh_frame_hdr: (&'static [u8], u64),
    eh_frame: (&'static [u8], u64),
    text: Option<(&'static [u8], u64)>,
}

impl Sections {
    /// Finds `.eh_frame_hdr` (`PT_GNU_EH_FRAME`) and the `.eh_frame` it points to; `None`
    /// for objects without them.
    fn of(f: &Found) -> Option<Sections> {
        let (hdr_lo, hdr_hi) = f.eh_frame_hdr?;
        let hdr = image(f, hdr_lo, hdr_hi);
        // .eh_frame_hdr: version 1, eh_frame_ptr encoding, fde count encoding, table
        // encoding, then the encoded eh_frame_ptr.
        if hdr.len() < 8 || hdr[0] != 1 {
            return None;
        }
        let field = i32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
        let eh_frame_lo = match hdr[1] {
            0x1b => (hdr_lo + 4).wrapping_add(field as i64 as u64), // DW_EH_PE_pcrel | sdata4
            0x03 => field as u32 as u64,                            // DW_EH_PE_udata4
            0x0b => field as i64 as u64,                            // DW_EH_PE_sdata4
            _ => return None,
        };
        let &(_, eh_frame_hi) = f
            .segments
            .iter()
            .find(|s| s.0 <= eh_frame_lo && eh_frame_lo < s.1)?;
        Some(Sections {
            eh_frame_hdr: (hdr, hdr_lo),
            eh_frame: (image(f, eh_frame_lo, eh_frame_hi), eh_frame_lo),
            text: f.code.first().map(|&(lo, hi)| (image(f, lo, hi), lo)),
        })
    }

    fn cfi_module(&self, f: &Found) -> Option<CfiModule> {
        CfiModule::new(
            f.info.range,
            f.info.bias,
            self.eh_frame_hdr,
            self.eh_frame,
            self.text.map(|t| t.1),
        )
    }
}

/// The `[start, end)` of the mapping in `maps` (the text of `/proc/self/maps`) that contains
/// `addr`: a thread's stack, or the anonymous mapping of jitted code. Parses text: not for
/// the signal handler.
pub fn mapping_containing(maps: &str, addr: u64) -> Option<(u64, u64)> {
    maps.lines().find_map(|line| {
        let range = line.split_whitespace().next()?;
        let (lo, hi) = range.split_once('-')?;
        let (lo, hi) = (
            u64::from_str_radix(lo, 16).ok()?,
            u64::from_str_radix(hi, 16).ok()?,
        );
        (lo <= addr && addr < hi).then_some((lo, hi))
    })
}

#[cfg(test)]
mod tests {
    use super::mapping_containing;

    #[test]
    fn finds_the_mapping_that_holds_an_address() {
        let maps = "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/dbus-daemon\n\
                    7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0 [stack]\n";
        assert_eq!(
            mapping_containing(maps, 0x7ffd1c000010),
            Some((0x7ffd1c000000, 0x7ffd1c021000))
        );
        assert_eq!(mapping_containing(maps, 0x00452000), None);
        assert_eq!(mapping_containing("garbage\n", 5), None);
    }
}
