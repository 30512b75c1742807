//! The functions an object's `.eh_frame` describes, one per FDE, for naming code that no
//! symbol covers. Their starts come sorted from `.eh_frame_hdr`'s binary-search table,
//! read where it is mapped (the linker sorts it, and the CFI unwinder searches the same
//! table); an FDE is parsed (with gimli) only when its end is asked for. Objects without
//! the header in the usual layout have every FDE parsed up front.

use crate::capture::unwind::cfi::SearchTable;
use gimli::{
    BaseAddresses, CieOrFde, EhFrame, EhFrameHdr, EhFrameOffset, LittleEndian, UnwindSection,
};
use object::{Object, ObjectSection};

type Reader<'data> = gimli::EndianSlice<'data, LittleEndian>;

/// The FDEs of one object, sorted by the start of their function. The methods that take
/// `data` want the image the table was made from.
#[derive(Default)]
pub struct Fdes {
    index: Index,
    /// Where `.eh_frame` is (its bytes in the image, its address) and the bases its
    /// pointers are relative to; `None` when every entry was parsed up front.
    section: Option<Section>,
}

/// Where the FDEs' starts are.
enum Index {
    /// `.eh_frame_hdr`'s table in the image: the header's bytes, its address and its
    /// number of entries (`(start, FDE address)` each, [`SearchTable`]).
    Table {
        bytes: (usize, usize),
        address: u64,
        len: usize,
    },
    /// `(start, FDE address)` read by gimli from a header of another layout, or
    /// `(start, end)` when every FDE was parsed.
    Read(Vec<(u64, u64)>),
}

impl Default for Index {
    fn default() -> Index {
        Index::Read(Vec::new())
    }
}

struct Section {
    bytes: (usize, usize),
    bases: BaseAddresses,
    address: u64,
}

/// Where `bytes`, a slice of `data`, is in it.
fn range_in(data: &[u8], bytes: &[u8]) -> (usize, usize) {
    let from = bytes.as_ptr() as usize - data.as_ptr() as usize;
    (from, from + bytes.len())
}

impl Fdes {
    /// The FDEs of ELF image `data` (parsed as `file`).
    pub fn new(file: &object::File<'_>, data: &[u8]) -> Fdes {
        let named = Named::find(file);
        let Some(eh_frame) = &named.eh_frame else {
            return Fdes::default();
        };
        let Ok(eh_frame_bytes) = eh_frame.data() else {
            return Fdes::default();
        };
        let bases = named.bases();
        let indexed = named.eh_frame_hdr.as_ref().and_then(|hdr| {
            let bytes = hdr.data().ok()?;
            let bases = bases.clone().set_eh_frame_hdr(hdr.address());
            if let Some(table) = SearchTable::new(bytes, hdr.address()) {
                let index = Index::Table {
                    bytes: range_in(data, bytes),
                    address: hdr.address(),
                    len: table.len(),
                };
                return Some((index, bases));
            }
            let parsed = EhFrameHdr::new(bytes, LittleEndian).parse(&bases, 8).ok()?;
            let table = parsed.table()?;
            let mut entries = Vec::new();
            let mut iter = table.iter(&bases);
            while let Ok(Some((start, fde))) = iter.next() {
                entries.push((start.pointer(), fde.pointer()));
            }
            // Sorted by the linker; an object that breaks that is parsed.
            entries
                .is_sorted_by_key(|e| e.0)
                .then_some((Index::Read(entries), bases))
        });
        match indexed {
            Some((index, bases)) => Fdes {
                index,
                section: Some(Section {
                    bytes: range_in(data, eh_frame_bytes),
                    bases,
                    address: eh_frame.address(),
                }),
            },
            None => Fdes {
                index: Index::Read(ranges_of(&named)),
                section: None,
            },
        }
    }

    /// Number of FDEs.
    pub fn len(&self) -> usize {
        match &self.index {
            Index::Table { len, .. } => *len,
            Index::Read(entries) => entries.len(),
        }
    }

    /// `.eh_frame_hdr`'s table in `data`, for [`Index::Table`]; `None` otherwise.
    fn table<'d>(&self, data: &'d [u8]) -> Option<SearchTable<'d>> {
        let Index::Table { bytes, address, .. } = &self.index else {
            return None;
        };
        SearchTable::new(data.get(bytes.0..bytes.1)?, *address)
    }

    /// Entry `at`: `(start, FDE address)`, or `(start, end)` when parsed up front.
    fn entry(&self, at: usize, data: &[u8]) -> (u64, u64) {
        match &self.index {
            Index::Table { .. } => self
                .table(data)
                .filter(|table| at < table.len())
                .map_or((u64::MAX, 0), |table| table.entry(at)),
            Index::Read(entries) => entries[at],
        }
    }

    /// The start of FDE `at`'s function (ELF virtual address).
    pub fn start(&self, at: usize, data: &[u8]) -> u64 {
        self.entry(at, data).0
    }

    /// The index of the first FDE that starts after `addr`.
    pub fn after(&self, addr: u64, data: &[u8]) -> usize {
        match &self.index {
            Index::Table { .. } => self.table(data).map_or(0, |table| table.after(addr)),
            Index::Read(entries) => entries.partition_point(|e| e.0 <= addr),
        }
    }

    /// One past the last address of FDE `at`'s function, or `None` when it is empty or
    /// cannot be read.
    pub fn end(&self, at: usize, data: &[u8]) -> Option<u64> {
        let (start, second) = self.entry(at, data);
        let Some(section) = &self.section else {
            return (second > start).then_some(second);
        };
        let bytes = data.get(section.bytes.0..section.bytes.1)?;
        let eh_frame = EhFrame::new(bytes, LittleEndian);
        let offset = EhFrameOffset(second.checked_sub(section.address)? as usize);
        let fde = eh_frame
            .fde_from_offset(&section.bases, offset, EhFrame::cie_from_offset)
            .ok()?;
        (fde.len() > 0).then(|| fde.initial_address() + fde.len())
    }
}

/// The sections an object's FDEs are read with, found in one pass over its section
/// headers: each `section_by_name` is a pass that reads every section's name, and the five
/// they took were a tenth of what a short process spent writing its profile (`perf
/// record` of `python -c pass`, 3.12). The names are compared in the section-name table
/// directly: `object` finds each name's end with `memchr`, whose first call asks the CPU
/// which instructions it has (`CPUID`s, 66–70 µs of every process in this VM).
struct Named<'data, 'file> {
    eh_frame: Option<object::Section<'data, 'file>>,
    eh_frame_hdr: Option<object::Section<'data, 'file>>,
    text: Option<object::Section<'data, 'file>>,
    got: Option<object::Section<'data, 'file>>,
}

impl<'data, 'file> Named<'data, 'file> {
    /// The first section of each name, as `section_by_name` finds it (none in an object
    /// that is not 64-bit ELF).
    fn find(file: &'file object::File<'data>) -> Named<'data, 'file> {
        use object::read::elf::{FileHeader, SectionHeader};
        let mut named = Named {
            eh_frame: None,
            eh_frame_hdr: None,
            text: None,
            got: None,
        };
        let object::File::Elf64(elf) = file else {
            return named;
        };
        let (endian, data) = (elf.endian(), elf.data());
        let table = elf.elf_section_table();
        let Some(names) = elf
            .elf_header()
            .shstrndx(endian, data)
            .ok()
            .and_then(|at| table.section(object::SectionIndex(at as usize)).ok())
            .and_then(|header| header.data(endian, data).ok())
        else {
            return named;
        };
        for (index, header) in table.enumerate() {
            let at = header.sh_name(endian) as usize;
            // The name at `at`, ended by its NUL.
            let is = |name: &[u8]| {
                names
                    .get(at..at + name.len() + 1)
                    .is_some_and(|b| b[..name.len()] == *name && b[name.len()] == 0)
            };
            let slot = if is(b".eh_frame") {
                &mut named.eh_frame
            } else if is(b".eh_frame_hdr") {
                &mut named.eh_frame_hdr
            } else if is(b".text") {
                &mut named.text
            } else if is(b".got") {
                &mut named.got
            } else {
                continue;
            };
            if slot.is_none() {
                *slot = file.section_by_index(index).ok();
            }
        }
        named
    }

    /// The bases `.eh_frame`'s pointers can be relative to.
    fn bases(&self) -> BaseAddresses {
        let mut bases = BaseAddresses::default();
        if let Some(section) = &self.eh_frame {
            bases = bases.set_eh_frame(section.address());
        }
        if let Some(text) = &self.text {
            bases = bases.set_text(text.address());
        }
        if let Some(got) = &self.got {
            bases = bases.set_got(got.address());
        }
        bases
    }
}

/// [`ranges_of`] the object's sections (the tests' reference: every FDE parsed).
#[cfg(test)]
pub fn ranges(file: &object::File<'_>) -> Vec<(u64, u64)> {
    ranges_of(&Named::find(file))
}

/// The `[start, end)` ELF virtual addresses of the functions that the object's `.eh_frame`
/// (in `named`) describes (one per non-empty FDE, every FDE parsed), sorted. Empty when it
/// has none.
fn ranges_of<'data>(named: &Named<'data, '_>) -> Vec<(u64, u64)> {
    let Some(section) = &named.eh_frame else {
        return Vec::new();
    };
    let Ok(data) = section.data() else {
        return Vec::new();
    };
    let bases = named.bases();
    let eh_frame = EhFrame::new(data, LittleEndian);
    let mut ranges = Vec::new();
    let mut cies: Vec<(EhFrameOffset, gimli::CommonInformationEntry<Reader<'data>>)> = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        // Objects have a few CIEs and thousands of FDEs: each CIE is parsed once.
        let cie =
            |section: &EhFrame<Reader<'data>>, bases: &BaseAddresses, offset: EhFrameOffset| {
                if let Some((_, cie)) = cies.iter().find(|(at, _)| *at == offset) {
                    return Ok(cie.clone());
                }
                let cie = section.cie_from_offset(bases, offset)?;
                cies.push((offset, cie.clone()));
                Ok(cie)
            };
        if let Ok(fde) = partial.parse(cie) {
            if fde.len() > 0 {
                ranges.push((fde.initial_address(), fde.initial_address() + fde.len()));
            }
        }
    }
    ranges.sort_unstable();
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_table_is_read_as_gimli_reads_it() {
        let mut compared = 0;
        for path in [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/x86_64-linux-gnu/libz.so.1",
            "/usr/bin/python3.11",
        ] {
            let Ok(data) = std::fs::read(path) else {
                continue;
            };
            let file = object::File::parse(&*data).unwrap();
            let hdr = file.section_by_name(".eh_frame_hdr").unwrap();
            let bytes = hdr.data().unwrap();
            let table = SearchTable::new(bytes, hdr.address()).expect("the usual layout");
            let ours: Vec<(u64, u64)> = (0..table.len()).map(|at| table.entry(at)).collect();
            let bases = Named::find(&file).bases().set_eh_frame_hdr(hdr.address());
            let parsed = EhFrameHdr::new(bytes, LittleEndian)
                .parse(&bases, 8)
                .unwrap();
            let table = parsed.table().unwrap();
            let mut iter = table.iter(&bases);
            let mut gimli = Vec::new();
            while let Some((start, fde)) = iter.next().unwrap() {
                gimli.push((start.pointer(), fde.pointer()));
            }
            assert_eq!(ours, gimli, "{path}");
            assert!(ours.len() > 100, "{path}: {} entries", ours.len());
            // Every FDE's start is where the table says, and its end after it.
            let fdes = Fdes::new(&file, &data);
            let full = ranges(&file);
            assert_eq!(fdes.len(), ours.len());
            for at in (0..fdes.len()).step_by(17) {
                let end = fdes.end(at, &data).unwrap();
                assert!(
                    full.contains(&(fdes.start(at, &data), end)),
                    "{path}: FDE {at}"
                );
                let start = ours[at].0;
                assert_eq!(
                    fdes.after(start, &data),
                    ours.partition_point(|e| e.0 <= start)
                );
                assert_eq!(
                    fdes.after(start - 1, &data),
                    ours.partition_point(|e| e.0 < start)
                );
            }
            compared += 1;
        }
        assert!(compared > 0, "no object to compare");
    }

    #[test]
    fn another_layout_is_left_to_gimli() {
        let mut bytes = vec![
            1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0,
        ];
        let table = SearchTable::new(&bytes, 0x1000).unwrap();
        assert_eq!((table.len(), table.entry(0)), (1, (0x1000, 0x1008)));
        bytes[3] = 0x1b; // pcrel entries
        assert!(SearchTable::new(&bytes, 0x1000).is_none());
        assert!(SearchTable::new(&bytes[..10], 0x1000).is_none());
    }
}
