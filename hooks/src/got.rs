//! Rebinding a C function in the objects a running process loaded before pyigprof: for
//! `pyigprof attach`, whose library is `dlopen`ed into the process, so that symbol
//! interposition (which needs the library first in the lookup order, as `LD_PRELOAD` puts
//! it) does not apply. The calls of those objects go through their global offset tables
//! (GOT): each slot that the dynamic loader bound to the function (an `R_X86_64_JUMP_SLOT`
//! or `R_X86_64_GLOB_DAT` relocation naming it, ELF x86-64 psABI §4.4) is pointed at the
//! replacement, under `PT_GNU_RELRO` made writable for the store and read-only again, and
//! put back by [`restore`]. An 8-byte aligned store is atomic: a thread calling through
//! the slot meanwhile reaches one function or the other.
//!
//! Objects loaded later bind to the C library's definition, as without pyigprof.

use std::ffi::{c_int, CStr};

/// One rewritten slot: its address and the value it held.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    at: usize,
    was: usize,
    /// Whether it lies in the object's `PT_GNU_RELRO` segment (read-only once relocated).
    relro: bool,
}

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_JMPREL: i64 = 23;
const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;
const PT_DYNAMIC: u32 = 2;
const PT_GNU_RELRO: u32 = 0x6474_e552;

/// `Elf64_Rela`.
#[repr(C)]
struct Rela {
    offset: u64,
    info: u64,
    addend: i64,
}

/// `Elf64_Sym`.
#[repr(C)]
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

struct Search<'a> {
    name: &'a [u8],
    replacement: usize,
    skip_base: usize,
    found: Vec<Slot>,
}

/// Points every GOT slot bound to the function `name` in the loaded objects (but the one
/// whose load address is `skip_base`: pyigprof's own) at `replacement`. Returns the slots
/// rewritten, for [`restore`].
pub fn rebind(name: &CStr, replacement: usize, skip_base: usize) -> Vec<Slot> {
    let mut search = Search {
        name: name.to_bytes(),
        replacement,
        skip_base,
        found: Vec::new(),
    };
    // SAFETY: the callback only reads the loaded objects' headers and dynamic sections, as
    // the dynamic loader left them, while dl_iterate_phdr holds the loader's lock.
    unsafe {
        libc::dl_iterate_phdr(Some(visit), (&mut search as *mut Search).cast());
    }
    search.found
}

/// Puts back the values [`rebind`] replaced.
pub fn restore(slots: &[Slot]) {
    for slot in slots {
        // SAFETY: a GOT slot rebind wrote; made writable as it was then.
        unsafe { store(slot.at, slot.was, slot.relro) };
    }
}

/// Stores `value` at GOT slot `at`; a slot of `PT_GNU_RELRO` (`relro`) has its page made
/// writable for the store and read-only again afterwards.
///
/// # Safety
/// `at` is a GOT slot of a loaded object.
unsafe fn store(at: usize, value: usize, relro: bool) {
    let page = (at & !4095) as *mut libc::c_void;
    // SAFETY: see the caller; mprotect on the slot's own page.
    unsafe {
        if relro && libc::mprotect(page, 4096, libc::PROT_READ | libc::PROT_WRITE) != 0 {
            return;
        }
        std::ptr::write_volatile(at as *mut usize, value);
        if relro {
            libc::mprotect(page, 4096, libc::PROT_READ);
        }
    }
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _: usize,
    data: *mut libc::c_void,
) -> c_int {
    // SAFETY: what dl_iterate_phdr passes; `data` is the Search of `rebind`.
    unsafe {
        let search = &mut *data.cast::<Search>();
        let info = &*info;
        let base = info.dlpi_addr as usize;
        let name = if info.dlpi_name.is_null() {
            &[][..]
        } else {
            CStr::from_ptr(info.dlpi_name).to_bytes()
        };
        // pyigprof's own slots, and the vDSO (whose dynamic section is not relocated and
        // which calls nothing).
        if base == search.skip_base
            || name.starts_with(b"linux-vdso")
            || name.starts_with(b"linux-gate")
        {
            return 0;
        }
        let mut dynamic = None;
        let mut relro = (0, 0);
        for i in 0..info.dlpi_phnum as usize {
            let ph = &*info.dlpi_phdr.add(i);
            let lo = base + ph.p_vaddr as usize;
            match ph.p_type {
                PT_DYNAMIC => dynamic = Some(lo as *const [i64; 2]),
                PT_GNU_RELRO => relro = (lo, lo + ph.p_memsz as usize),
                _ => {}
            }
        }
        let Some(mut entry) = dynamic else { return 0 };
        // The loader relocated these addresses in place (x86-64 glibc); an object whose
        // values are still offsets gets its load address added.
        let address = |value: i64| {
            let v = value as usize;
            if v < base {
                v + base
            } else {
                v
            }
        };
        let (mut symtab, mut strtab) = (0, 0);
        let (mut jmprel, mut pltrelsz, mut rela, mut relasz) = (0, 0, 0, 0);
        while (*entry)[0] != DT_NULL {
            let [tag, value] = *entry;
            match tag {
                DT_SYMTAB => symtab = address(value),
                DT_STRTAB => strtab = address(value),
                DT_JMPREL => jmprel = address(value),
                DT_PLTRELSZ => pltrelsz = value as usize,
                DT_RELA => rela = address(value),
                DT_RELASZ => relasz = value as usize,
                _ => {}
            }
            entry = entry.add(1);
        }
        if symtab == 0 || strtab == 0 {
            return 0;
        }
        for (table, size) in [(jmprel, pltrelsz), (rela, relasz)] {
            if table == 0 {
                continue;
            }
            let count = size / std::mem::size_of::<Rela>();
            let relocations = std::slice::from_raw_parts(table as *const Rela, count);
            for r in relocations {
                let kind = (r.info & 0xffff_ffff) as u32;
                if kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT {
                    continue;
                }
                let sym = &*((symtab as *const Sym).add((r.info >> 32) as usize));
                let sym_name = CStr::from_ptr((strtab + sym.name as usize) as *const libc::c_char);
                if sym_name.to_bytes() != search.name {
                    continue;
                }
                let at = base + r.offset as usize;
                let was = std::ptr::read_volatile(at as *const usize);
                if was == search.replacement {
                    continue;
                }
                let relro = relro.0 <= at && at < relro.1;
                store(at, search.replacement, relro);
                if std::ptr::read_volatile(at as *const usize) == search.replacement {
                    search.found.push(Slot { at, was, relro });
                }
            }
        }
    }
    0
}
