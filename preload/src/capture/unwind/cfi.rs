//! Unwind rules by CFI row: a per-thread cache of DWARF CFI rows, each valid over the
//! address range of its row, in front of framehop.
//!
//! framehop caches the rule it derives for one exact address (509 slots per thread, keyed by
//! address). In a profile most first frames are interrupted at a different instruction each
//! time, and a miss costs about 3 µs inside the handler after milliseconds of the program's
//! own work (module search, `.eh_frame_hdr` binary search, FDE and CIE parsing, gimli's
//! context: all cache misses). A CFI row, though, covers a whole run of instructions with
//! one rule: the body of CPython 3.11's `_PyEval_EvalFrameDefault` is one row of 41 KB (16
//! rows in all), and libpython's 5,359 FDEs have 10 rows each (median). Cached by range,
//! one lookup serves every instruction of the row.
//!
//! A row is evaluated with gimli over the same `.eh_frame_hdr`/`.eh_frame` framehop reads,
//! and translated into the same rules framehop's x86-64 DWARF path uses
//! (`framehop::x86_64::UnwindRuleX86_64`: offset from RSP, optionally restoring RBP; frame
//! pointer; end of stack), executed with the same checks. Anything else (CFA expressions as
//! in PLT entries, addresses without an FDE, objects without `PT_GNU_EH_FRAME`) is marked
//! in the cache as framehop's to unwind, and framehop does it.
//!
//! Async-signal-safe: no allocation (gimli runs with fixed-size storage kept in the
//! cache), no locks; reads only the mapped images' unwind sections.

use framehop::x86_64::UnwindRegsX86_64;
use gimli::{
    BaseAddresses, CfaRule, EhFrame, EndianSlice, LittleEndian, ParsedEhFrameHdr, Register,
    RegisterRule, UnwindContext, UnwindContextStorage, UnwindSection, UnwindTableRow, X86_64,
};

/// The reader over a mapped image's unwind section.
type Reader = EndianSlice<'static, LittleEndian>;

/// One object's unwind sections, as the handler needs them (built outside the handler).
#[derive(Clone)]
pub struct CfiModule {
    /// `[start, end)` run-time addresses of the object.
    pub range: (u64, u64),
    /// Load bias: run-time address minus ELF virtual address.
    pub bias: u64,
    /// The parsed `.eh_frame_hdr` (its binary-search table of FDEs).
    hdr: ParsedEhFrameHdr<Reader>,
    /// `.eh_frame`.
    eh_frame: EhFrame<Reader>,
    /// Section addresses (ELF virtual addresses) for pointer encodings.
    bases: BaseAddresses,
}

impl CfiModule {
    /// Describes an object from its mapped `.eh_frame_hdr` and `.eh_frame` (with their ELF
    /// virtual addresses) and `.text` address. `None` when the header does not parse or has
    /// no search table (framehop then unwinds the object alone).
    pub fn new(
        range: (u64, u64),
        bias: u64,
        eh_frame_hdr: (&'static [u8], u64),
        eh_frame: (&'static [u8], u64),
        text_svma: Option<u64>,
    ) -> Option<CfiModule> {
        let mut bases = BaseAddresses::default()
            .set_eh_frame_hdr(eh_frame_hdr.1)
            .set_eh_frame(eh_frame.1);
        if let Some(text) = text_svma {
            bases = bases.set_text(text);
        }
        let hdr = gimli::EhFrameHdr::new(eh_frame_hdr.0, LittleEndian)
            .parse(&bases, 8)
            .ok()?;
        hdr.table()?;
        let mut section = EhFrame::new(eh_frame.0, LittleEndian);
        section.set_address_size(8);
        Some(CfiModule {
            range,
            bias,
            hdr,
            eh_frame: section,
            bases,
        })
    }
}

/// How to find the caller's registers from a frame's (RSP, RBP); the return address is
/// always at `new_sp - 8`. The subset of framehop's `UnwindRuleX86_64` that DWARF CFI
/// rows translate into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// No return address: the outermost frame.
    EndOfStack,
    /// `new_sp = sp + 8 * sp_offset_by_8`, RBP unchanged.
    OffsetSp { sp_offset_by_8: u16 },
    /// `new_sp = sp + 8 * sp_offset_by_8`, `new_bp = *(sp + 8 * bp_offset_by_8)`.
    OffsetSpAndRestoreBp {
        sp_offset_by_8: u16,
        bp_offset_by_8: i16,
    },
    /// `new_sp = bp + 16`, `new_bp = *bp`.
    UseFramePointer,
    /// Not expressible here: framehop unwinds this frame.
    Framehop,
}

/// Translates a CFI row into a [`Rule`], exactly as framehop's x86-64 DWARF path does
/// (`translate_into_unwind_rule` in framehop 0.16 `x86_64/dwarf.rs`, including its integer
/// conversions), or [`Rule::Framehop`] where framehop takes its slow path.
fn translate<S: UnwindContextStorage<usize>>(row: &UnwindTableRow<usize, S>) -> Rule {
    fn cfa_offset(rule: Option<RegisterRule<usize>>) -> Result<Option<i64>, ()> {
        match rule {
            None | Some(RegisterRule::Undefined) | Some(RegisterRule::SameValue) => Ok(None),
            Some(RegisterRule::Offset(offset)) => Ok(Some(offset)),
            _ => Err(()),
        }
    }
    let translated = || -> Result<Rule, ()> {
        match row.register(X86_64::RA) {
            None | Some(RegisterRule::Undefined) => return Ok(Rule::EndOfStack),
            Some(RegisterRule::Offset(-8)) => {}
            _ => return Err(()),
        }
        let bp = row.register(X86_64::RBP);
        match *row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } if register == X86_64::RSP => {
                let sp_offset_by_8 = u16::try_from(offset / 8).map_err(|_| ())?;
                match cfa_offset(bp)? {
                    None => Ok(Rule::OffsetSp { sp_offset_by_8 }),
                    Some(bp_cfa_offset) => Ok(Rule::OffsetSpAndRestoreBp {
                        sp_offset_by_8,
                        bp_offset_by_8: i16::try_from((offset + bp_cfa_offset) / 8)
                            .map_err(|_| ())?,
                    }),
                }
            }
            CfaRule::RegisterAndOffset { register, offset } if register == X86_64::RBP => {
                match cfa_offset(bp)? {
                    Some(-16) if offset == 16 => Ok(Rule::UseFramePointer),
                    _ => Err(()),
                }
            }
            _ => Err(()),
        }
    };
    translated().unwrap_or(Rule::Framehop)
}

/// gimli's fixed-size storage for evaluating rows: up to 32 register rules per row (x86-64
/// CFI describes at most the 17 general registers and the return address) and 4 remembered
/// states. A row needing more fails to evaluate and is left to framehop.
pub struct Storage;

impl UnwindContextStorage<usize> for Storage {
    type Rules = [(Register, RegisterRule<usize>); 32];
    type Stack = [UnwindTableRow<usize, Self>; 4];
}

/// Sets of [`Entry`] (4 ways, one 64-byte cache line each), chosen by the 4 KiB page of the
/// looked-up address.
const SETS: usize = 256;
/// Ways per set.
const WAYS: usize = 4;
/// Longest row range an entry holds, in bytes (longer rows are cached in parts).
const MAX_LEN: u64 = (1 << 24) - 1;

/// One cached row: `[start, start + len)` run-time addresses and its rule. `len == 0` is
/// an empty entry.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
struct Entry {
    start: u64,
    /// Length (low 24 bits) and rule kind (high 8 bits).
    len_kind: u32,
    /// `sp_offset_by_8` (low 16 bits) and `bp_offset_by_8` (high 16 bits).
    operands: u32,
}

impl Entry {
    fn new(start: u64, end: u64, rule: Rule) -> Entry {
        let (kind, sp, bp): (u32, u16, i16) = match rule {
            Rule::EndOfStack => (1, 0, 0),
            Rule::OffsetSp { sp_offset_by_8 } => (2, sp_offset_by_8, 0),
            Rule::OffsetSpAndRestoreBp {
                sp_offset_by_8,
                bp_offset_by_8,
            } => (3, sp_offset_by_8, bp_offset_by_8),
            Rule::UseFramePointer => (4, 0, 0),
            Rule::Framehop => (5, 0, 0),
        };
        let len = end.saturating_sub(start).min(MAX_LEN) as u32;
        Entry {
            start,
            len_kind: len | kind << 24,
            operands: u32::from(sp) | (bp as u16 as u32) << 16,
        }
    }

    #[inline]
    fn covers(&self, address: u64) -> bool {
        address.wrapping_sub(self.start) < u64::from(self.len_kind & 0xff_ffff)
    }

    fn rule(&self) -> Rule {
        let (sp_offset_by_8, bp_offset_by_8) = (self.operands as u16, (self.operands >> 16) as i16);
        match self.len_kind >> 24 {
            1 => Rule::EndOfStack,
            2 => Rule::OffsetSp { sp_offset_by_8 },
            3 => Rule::OffsetSpAndRestoreBp {
                sp_offset_by_8,
                bp_offset_by_8,
            },
            4 => Rule::UseFramePointer,
            _ => Rule::Framehop,
        }
    }
}

/// Counters of a [`RowCache`], in lookups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowStats {
    /// Answered from a cached row.
    pub hits: u64,
    /// Rows evaluated from the CFI.
    pub misses: u64,
}

/// One thread's cache of CFI rows (16 KiB of entries plus gimli's evaluation context,
/// about 7 KB). All state for [`RowCache::rule`]; used only by its owner thread.
pub struct RowCache {
    /// Identity of the module list the entries were made from; entries of another are void.
    generation: usize,
    sets: [[Entry; WAYS]; SETS],
    context: UnwindContext<usize, Storage>,
    /// Lookup counters.
    pub stats: RowStats,
}

impl RowCache {
    /// An empty cache, made on the heap (it is too large for a small thread stack).
    pub fn new() -> Box<RowCache> {
        let mut cache = Box::<RowCache>::new_zeroed();
        // SAFETY: all-zero is a valid generation (no snapshot has identity 0), set of
        // empty entries and statistics; the context is written before the cache is used.
        unsafe {
            std::ptr::addr_of_mut!((*cache.as_mut_ptr()).context).write(UnwindContext::new_in());
            cache.assume_init()
        }
    }

    /// The rule for the frame at lookup address `address` (the instruction pointer for the
    /// interrupted frame, a return address minus one for the others), with `modules` the
    /// objects of the module list whose identity is `generation`. Async-signal-safe.
    pub fn rule(&mut self, modules: &[CfiModule], generation: usize, address: u64) -> Rule {
        if self.generation != generation {
            self.sets = [[Entry::default(); WAYS]; SETS];
            self.generation = generation;
        }
        let set = (address >> 12) as usize % SETS;
        if let Some(way) = self.sets[set].iter().position(|e| e.covers(address)) {
            self.stats.hits += 1;
            let entry = self.sets[set][way];
            // Most recently used first.
            self.sets[set].copy_within(0..way, 1);
            self.sets[set][0] = entry;
            return entry.rule();
        }
        self.stats.misses += 1;
        let (start, end, rule) = evaluate(modules, &mut self.context, address).unwrap_or((
            address,
            address + 1,
            Rule::Framehop,
        ));
        self.sets[set].copy_within(0..WAYS - 1, 1);
        self.sets[set][0] = Entry::new(start, end, rule);
        rule
    }
}

/// Finds the CFI row that covers `address` and returns its run-time range and rule; `None`
/// when no module, FDE or row covers it, or the CFI does not evaluate.
fn evaluate(
    modules: &[CfiModule],
    context: &mut UnwindContext<usize, Storage>,
    address: u64,
) -> Option<(u64, u64, Rule)> {
    let i = modules
        .partition_point(|m| m.range.0 <= address)
        .checked_sub(1)?;
    let module = &modules[i];
    if address >= module.range.1 {
        return None;
    }
    let svma = address.wrapping_sub(module.bias);
    let fde = module
        .hdr
        .table()?
        .fde_for_address(
            &module.eh_frame,
            &module.bases,
            svma,
            EhFrame::cie_from_offset,
        )
        .ok()?;
    let mut rows = fde.rows(&module.eh_frame, &module.bases, context).ok()?;
    while let Some(row) = rows.next_row().ok()? {
        if row.contains(svma) {
            return Some((
                row.start_address().wrapping_add(module.bias),
                row.end_address().wrapping_add(module.bias),
                translate(row),
            ));
        }
    }
    None
}

/// Why [`exec`] could not unwind a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failed;

/// Unwinds one frame with `rule` from `regs`, reading stack words with `read_stack`;
/// returns the caller's return address (and updates the registers), `None`
/// at the end of the stack. The checks are framehop's (`UnwindRuleX86_64::exec`): a zero
/// return address or frame pointer ends the stack; a frame that does not advance, or a
/// frame-pointer step that moves backwards, fails. `rule` must not be [`Rule::Framehop`].
pub fn exec(
    rule: Rule,
    is_first_frame: bool,
    regs: &mut UnwindRegsX86_64,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<Option<u64>, Failed> {
    let (ip, sp, bp) = (regs.ip(), regs.sp(), regs.bp());
    let (new_sp, new_bp) = match rule {
        Rule::EndOfStack => return Ok(None),
        Rule::OffsetSp { sp_offset_by_8 } => (
            sp.checked_add(u64::from(sp_offset_by_8) * 8)
                .ok_or(Failed)?,
            bp,
        ),
        Rule::OffsetSpAndRestoreBp {
            sp_offset_by_8,
            bp_offset_by_8,
        } => {
            let new_sp = sp
                .checked_add(u64::from(sp_offset_by_8) * 8)
                .ok_or(Failed)?;
            let at = sp
                .checked_add_signed(i64::from(bp_offset_by_8) * 8)
                .ok_or(Failed)?;
            let new_bp = match read_stack(at) {
                Ok(value) => value,
                // Epilogues that popped RBP already may still say where it was saved,
                // below the stack pointer.
                Err(()) if is_first_frame && at < sp => bp,
                Err(()) => return Err(Failed),
            };
            (new_sp, new_bp)
        }
        Rule::UseFramePointer => {
            if bp == 0 {
                return Ok(None);
            }
            let new_sp = bp.checked_add(16).ok_or(Failed)?;
            if new_sp <= sp {
                return Err(Failed);
            }
            (new_sp, read_stack(bp).map_err(|_| Failed)?)
        }
        Rule::Framehop => return Err(Failed),
    };
    let return_address = read_stack(new_sp - 8).map_err(|_| Failed)?;
    if return_address == 0 {
        return Ok(None);
    }
    if new_sp == sp && return_address == ip {
        return Err(Failed);
    }
    *regs = UnwindRegsX86_64::new(return_address, new_sp, new_bp);
    Ok(Some(return_address))
}

#[cfg(test)]
mod tests {
    use super::*;
    use framehop::x86_64::CacheX86_64;
    use framehop::{FrameAddress, MustNotAllocateDuringUnwind, Unwinder};

    /// A made-up stack: every aligned word of `[low, low + 4096)` holds a value derived
    /// from its address (some of them zero); reads elsewhere fail.
    fn read_fake(addr: u64, low: u64) -> Result<u64, ()> {
        if addr < low || addr >= low + 4096 || !addr.is_multiple_of(8) {
            return Err(());
        }
        let v = addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20;
        Ok(if v.is_multiple_of(97) { 0 } else { v })
    }

    #[test]
    fn every_rule_from_a_row_unwinds_as_framehop_does() {
        crate::capture::unwind::modules::rescan();
        let snapshot = crate::capture::unwind::modules::current().expect("modules");
        let identity = snapshot as *const _ as usize;
        let mut rows = RowCache::new();
        let mut framehop = CacheX86_64::<MustNotAllocateDuringUnwind>::new_in();
        let mut context = UnwindContext::<usize, Storage>::new_in();
        let (mut compared, mut delegated) = (0u64, 0u64);
        let mut objects = 0;
        for module in &snapshot.cfi {
            let Some(object) = snapshot
                .objects
                .iter()
                .find(|o| o.range.0 == module.range.0)
            else {
                continue;
            };
            objects += 1;
            // Every 5th byte of the object's first 1 MiB that has CFI, as an interrupted
            // instruction and as a return address, with the stack pointer at three
            // alignments.
            let end = module.range.1.min(module.range.0 + (1 << 20));
            for address in (module.range.0..end).step_by(5) {
                if evaluate(&snapshot.cfi, &mut context, address).is_none() {
                    continue;
                }
                for first in [true, false] {
                    let rule = rows.rule(&snapshot.cfi, identity, address);
                    if rule == Rule::Framehop {
                        delegated += 1;
                        continue;
                    }
                    let low = 0x7000_0000_0000u64;
                    let (sp, bp) = (low + 8 * (address % 3), low + 0x200);
                    let frame = if first {
                        FrameAddress::from_instruction_pointer(address)
                    } else {
                        FrameAddress::from_return_address(address + 1).unwrap()
                    };
                    let ip = if first { address } else { address + 1 };
                    let mut theirs = UnwindRegsX86_64::new(ip, sp, bp);
                    let expected = snapshot
                        .unwinder
                        .unwind_frame(frame, &mut theirs, &mut framehop, &mut |a| {
                            read_fake(a, low)
                        })
                        .map_err(|_| ());
                    let mut ours = UnwindRegsX86_64::new(ip, sp, bp);
                    let got =
                        exec(rule, first, &mut ours, &mut |a| read_fake(a, low)).map_err(|_| ());
                    assert_eq!(
                        (got, (ours.ip(), ours.sp(), ours.bp())),
                        (expected, (theirs.ip(), theirs.sp(), theirs.bp())),
                        "{} at {address:#x} (+{:#x}), first frame {first}, {rule:?}",
                        object.path.display(),
                        address - object.bias
                    );
                    compared += 1;
                }
            }
        }
        eprintln!(
            "{objects} objects: {compared} unwinds compared, {delegated} left to framehop, \
             row cache {:?}",
            rows.stats
        );
        assert!(
            objects >= 3,
            "libc, the loader and the test binary at least"
        );
        assert!(compared > 100_000, "{compared}");
        assert!(
            delegated * 20 < compared,
            "{delegated} of {compared} left to framehop"
        );
        assert!(rows.stats.hits > rows.stats.misses);
    }

    #[test]
    fn a_row_is_cached_for_its_whole_range_and_forgotten_with_its_modules() {
        crate::capture::unwind::modules::rescan();
        let snapshot = crate::capture::unwind::modules::current().expect("modules");
        let identity = snapshot as *const _ as usize;
        // A function of this object, away from its prologue: its body is one row.
        let address = every_rule_from_a_row_unwinds_as_framehop_does as *const () as u64 + 64;
        let mut rows = RowCache::new();
        let rule = rows.rule(&snapshot.cfi, identity, address);
        assert_ne!(rule, Rule::Framehop);
        assert_eq!(rows.stats, RowStats { hits: 0, misses: 1 });
        let (start, end, _) = evaluate(&snapshot.cfi, &mut rows.context, address).unwrap();
        assert!(start <= address && address < end, "{start:#x}..{end:#x}");
        for a in (start..end).step_by(3).filter(|a| a >> 12 == address >> 12) {
            assert_eq!(rows.rule(&snapshot.cfi, identity, a), rule);
        }
        assert_eq!(rows.stats.misses, 1);
        // Another module list: the entries are void.
        rows.rule(&snapshot.cfi, identity + 1, address);
        assert_eq!(rows.stats.misses, 2);
        // An address outside every object is framehop's, remembered for that address only.
        assert_eq!(rows.rule(&snapshot.cfi, identity, 8), Rule::Framehop);
        assert_eq!(rows.rule(&snapshot.cfi, identity, 8), Rule::Framehop);
        assert_eq!(rows.stats.misses, 3);
    }
}
