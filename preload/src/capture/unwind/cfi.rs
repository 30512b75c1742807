//! Unwind rules by CFI row: a per-thread cache of DWARF CFI rows, each valid over the
//! address range of its row, and the evaluation of rows the cache cannot express.
//!
//! A miss costs about 3 µs inside the handler after milliseconds of the program's own
//! work (module search, `.eh_frame_hdr` binary search, FDE and CIE parsing, gimli's
//! context: all cache misses). A CFI row, though, covers a whole run of instructions with
//! one rule: the body of CPython 3.11's `_PyEval_EvalFrameDefault` is one row of 41 KB (16
//! rows in all), and libpython's 5,359 FDEs have 10 rows each (median). Cached by range,
//! one lookup serves every instruction of the row.
//!
//! A row is evaluated with gimli over the mapped `.eh_frame_hdr`/`.eh_frame`. The rows
//! compilers write for ordinary functions translate into a compact [`Rule`] (CFA = RSP or
//! RBP + offset, RBP restored from the stack or kept, the return address at CFA − 8),
//! executed by [`exec`] without touching the CFI again. Every other row is
//! [`Rule::Evaluate`]: [`RowCache::unwind_by_row`] evaluates it in full each time —
//! the CFA from any register the frame knows (every register in the interrupted frame and
//! after a signal frame, RSP, RBP, RIP and the callee-saved registers the rules recovered
//! in outer frames) or from a DWARF expression (gimli's evaluator: OpenSSL's
//! `DW_OP_breg7 n; DW_OP_deref`, GCC's stack realignment `DW_OP_breg6 -8; DW_OP_deref`, the
//! PLT's RIP-based expression), registers restored by offset, register or expression.
//! An address no row covers is [`Rule::NoCfi`], for `heuristic.rs`.
//!
//! Async-signal-safe: no allocation (gimli runs with fixed-size storage kept in the
//! cache), no locks; reads only the mapped images' unwind sections and the thread's stack.

use super::Regs;
use gimli::{
    BaseAddresses, CfaRule, EhFrame, EndianSlice, Evaluation, EvaluationResult, EvaluationStorage,
    Expression, LittleEndian, Location, ParsedEhFrameHdr, Piece, Register, RegisterRule,
    UnwindContext, UnwindContextStorage, UnwindSection, UnwindTableRow, Value, X86_64,
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
    /// The same table when it has the usual layout ([`SearchTable`]), searched without
    /// gimli's generic pointer decoding.
    table: Option<SearchTable<'static>>,
    /// `.eh_frame`.
    eh_frame: EhFrame<Reader>,
    /// Section addresses (ELF virtual addresses) for pointer encodings.
    bases: BaseAddresses,
}

impl CfiModule {
    /// Describes an object from its mapped `.eh_frame_hdr` and `.eh_frame` (with their ELF
    /// virtual addresses) and `.text` address. `None` when the header does not parse or has
    /// no search table (its code is then unwound as code without CFI).
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
        let table = SearchTable::new(eh_frame_hdr.0, eh_frame_hdr.1);
        let mut section = EhFrame::new(eh_frame.0, LittleEndian);
        section.set_address_size(8);
        Some(CfiModule {
            range,
            bias,
            hdr,
            table,
            eh_frame: section,
            bases,
        })
    }
}

/// How to find the caller's registers from a frame's (RSP, RBP): the compact rules (the
/// return address at `new_sp - 8`) that most CFI rows translate into, or what else to do.
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
    /// A row the compact rules cannot express: evaluated in full each time
    /// ([`RowCache::unwind_by_row`]).
    Evaluate,
    /// No CFI covers the address (code without unwind tables, generated code, an object
    /// without `PT_GNU_EH_FRAME`).
    NoCfi,
}

/// Translates a CFI row into a compact [`Rule`] when one expresses it exactly (checked
/// against the full evaluation on every row of libcrypto, libpython and OpenBLAS by the
/// tests), else [`Rule::Evaluate`].
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
    translated().unwrap_or(Rule::Evaluate)
}

/// gimli's fixed-size storage for evaluating rows: up to 32 register rules per row (x86-64
/// CFI describes at most the 17 general registers and the return address) and 4 remembered
/// states. A row needing more fails to evaluate (its frame ends the walk).
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
            Rule::Evaluate => (5, 0, 0),
            Rule::NoCfi => (6, 0, 0),
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
            5 => Rule::Evaluate,
            _ => Rule::NoCfi,
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
    /// Rows whose CFA is a dereferenced expression ([`Deref`]), most recent first.
    derefs: [Deref; DEREFS],
    context: UnwindContext<usize, Storage>,
    /// Lookup counters.
    pub stats: RowStats,
}

/// How many [`Deref`] rows a [`RowCache`] keeps.
const DEREFS: usize = 16;

/// A row whose CFA is `base + offset` for a register other than RSP and RBP (OpenSSL's
/// assembly keeps the entry stack pointer in RAX or R11 through a function's body:
/// `.cfi_def_cfa_register %r11`), or `*(base + offset) + add`, the form of the CFA
/// expressions compilers and assemblers write for frames whose stack pointer moved by an
/// amount known only at run time (OpenSSL's `.cfi_cfa_expression $_rsp,deref,+8`:
/// `DW_OP_breg7 n; DW_OP_deref; DW_OP_plus_uconst 8`; GCC's stack realignment:
/// `DW_OP_breg6 -8; DW_OP_deref`), with the return address at CFA − 8 and RBP kept or
/// saved at an offset from the CFA. Run-time `[start, end)`; all-zero is an empty entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Deref {
    start: u64,
    end: u64,
    /// DWARF number of the base register.
    base: u16,
    /// Whether `base + offset` is dereferenced (else it is the CFA).
    deref: bool,
    offset: i64,
    add: u64,
    /// Whether RBP is restored from `cfa + bp_offset` (else kept).
    restores_bp: bool,
    bp_offset: i64,
}

impl Deref {
    /// The [`Deref`] form of `row` (of `module`, valid over run-time `[start, end)`), if it
    /// has it.
    fn of<S: UnwindContextStorage<usize>>(
        row: &UnwindTableRow<usize, S>,
        module: &CfiModule,
        start: u64,
        end: u64,
    ) -> Option<Deref> {
        if row.register(X86_64::RA) != Some(RegisterRule::Offset(-8)) {
            return None;
        }
        let (restores_bp, bp_offset) = match row.register(X86_64::RBP) {
            None | Some(RegisterRule::SameValue) => (false, 0),
            Some(RegisterRule::Offset(offset)) => (true, offset),
            _ => return None,
        };
        let (base, deref, offset, add) = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => (register.0, false, *offset, 0),
            CfaRule::Expression(e) => {
                let mut ops = e.get(&module.eh_frame).ok()?.0;
                use gimli::Reader as _;
                // DW_OP_breg0..DW_OP_breg15.
                let base = match ops.read_u8().ok()? {
                    op @ 0x70..=0x7f => u16::from(op - 0x70),
                    _ => return None,
                };
                let offset = ops.read_sleb128().ok()?;
                if ops.read_u8().ok()? != 0x06 {
                    return None; // DW_OP_deref
                }
                let add = if ops.is_empty() {
                    0
                } else if ops.read_u8().ok()? == 0x23 {
                    ops.read_uleb128().ok()? // DW_OP_plus_uconst
                } else {
                    return None;
                };
                if !ops.is_empty() {
                    return None;
                }
                (base, true, offset, add)
            }
        };
        Some(Deref {
            start,
            end,
            base,
            deref,
            offset,
            add,
            restores_bp,
            bp_offset,
        })
    }

    /// Unwinds one frame with this rule (as [`apply_row`] would, for RIP, RSP and RBP).
    fn exec(
        &self,
        is_first_frame: bool,
        regs: &mut Regs,
        read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> Result<Option<u64>, Failed> {
        let at = regs
            .get(self.base)
            .and_then(|base| base.checked_add_signed(self.offset))
            .ok_or(Failed)?;
        let cfa = if self.deref {
            read_stack(at)?.checked_add(self.add).ok_or(Failed)?
        } else {
            at
        };
        let return_address = read_stack(cfa.checked_sub(8).ok_or(Failed)?)?;
        let bp = if self.restores_bp {
            match read_stack(cfa.checked_add_signed(self.bp_offset).ok_or(Failed)?) {
                Ok(value) => value,
                Err(()) if is_first_frame => regs.bp,
                Err(()) => return Err(Failed),
            }
        } else {
            regs.bp
        };
        step_to(regs, Regs::new(return_address, cfa, bp))
    }
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
            self.derefs = [Deref::default(); DEREFS];
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
            Rule::NoCfi,
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
    with_row(modules, context, address, |row, module| {
        (
            row.start_address().wrapping_add(module.bias),
            row.end_address().wrapping_add(module.bias),
            translate(row),
        )
    })
}

/// Finds the CFI row of `modules` that covers run-time `address` and returns what `f` makes
/// of it (with its module); `None` when no module, FDE or row covers it, or the CFI does
/// not evaluate.
fn with_row<T>(
    modules: &[CfiModule],
    context: &mut UnwindContext<usize, Storage>,
    address: u64,
    f: impl FnOnce(&UnwindTableRow<usize, Storage>, &CfiModule) -> T,
) -> Option<T> {
    let (module, svma) = module_for(modules, address)?;
    let fde = match &module.table {
        Some(table) => {
            let fde_address = table.fde_address(svma)?;
            let offset = fde_address.checked_sub(module.bases.eh_frame.section?)?;
            let fde = module
                .eh_frame
                .fde_from_offset(
                    &module.bases,
                    gimli::EhFrameOffset(offset as usize),
                    EhFrame::cie_from_offset,
                )
                .ok()?;
            fde.contains(svma).then_some(fde)?
        }
        None => module
            .hdr
            .table()?
            .fde_for_address(
                &module.eh_frame,
                &module.bases,
                svma,
                EhFrame::cie_from_offset,
            )
            .ok()?,
    };
    let mut rows = fde.rows(&module.eh_frame, &module.bases, context).ok()?;
    while let Some(row) = rows.next_row().ok()? {
        if row.contains(svma) {
            return Some(f(row, module));
        }
    }
    None
}

/// The binary-search table of an `.eh_frame_hdr` in the layout every x86-64 linker
/// writes: version 1, a 4-byte `eh_frame_ptr`, a `udata4` count and `datarel|sdata4`
/// entries, each `(function start, FDE address)` relative to the header's address (LSB,
/// "Linux Standard Base Core Specification", `.eh_frame_hdr`). Read in place, in the
/// handler too: a lookup is a binary search over 8-byte entries, where gimli's generic
/// reader decodes each pointer through its encoding (a fifth of the handler's time in
/// call-heavy Python on a cache miss).
#[derive(Clone, Copy)]
pub struct SearchTable<'a> {
    /// The entries, 8 bytes each.
    entries: &'a [u8],
    /// ELF virtual address of `.eh_frame_hdr` (the entries' base).
    base: u64,
}

impl<'a> SearchTable<'a> {
    /// The table of the `.eh_frame_hdr` `bytes` at ELF virtual address `address`; `None`
    /// in any other layout (gimli reads those).
    pub fn new(bytes: &'a [u8], address: u64) -> Option<SearchTable<'a>> {
        const UDATA4: u8 = 0x03;
        const SDATA4: u8 = 0x0b;
        const DATAREL_SDATA4: u8 = 0x30 | SDATA4;
        let header = bytes.get(..12)?;
        if header[0] != 1
            || !matches!(header[1] & 0x0f, UDATA4 | SDATA4)
            || header[2] != UDATA4
            || header[3] != DATAREL_SDATA4
        {
            return None;
        }
        let count = u32::from_le_bytes([header[8], header[9], header[10], header[11]]) as usize;
        let entries = bytes.get(12..12 + count.checked_mul(8)?)?;
        Some(SearchTable {
            entries,
            base: address,
        })
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len() / 8
    }

    /// Whether the table has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entry `at`: `(function start, FDE address)`, ELF virtual addresses.
    pub fn entry(&self, at: usize) -> (u64, u64) {
        let e = &self.entries[at * 8..at * 8 + 8];
        let relative = |b: &[u8]| {
            self.base
                .wrapping_add_signed(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        };
        (relative(&e[..4]), relative(&e[4..]))
    }

    /// The index of the first entry whose function starts after `svma` (the table is
    /// sorted by start).
    pub fn after(&self, svma: u64) -> usize {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = low + (high - low) / 2;
            if self.entry(middle).0 <= svma {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }

    /// The FDE address of the last entry whose function starts at or before `svma`.
    pub fn fde_address(&self, svma: u64) -> Option<u64> {
        Some(self.entry(self.after(svma).checked_sub(1)?).1)
    }
}

/// Why a frame could not be unwound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failed;

/// Unwinds one frame with compact `rule` from `regs`, reading stack words with
/// `read_stack`; returns the caller's return address (and updates the registers: the
/// caller's RIP, RSP, RBP; no other register is known after a compact rule), `None` at
/// the end of the stack. A zero return address or frame pointer ends the stack; a frame
/// that does not advance, or a frame-pointer step that moves backwards, fails. `rule` must
/// be a compact one (not [`Rule::Evaluate`] or [`Rule::NoCfi`]).
pub fn exec(
    rule: Rule,
    is_first_frame: bool,
    regs: &mut Regs,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<Option<u64>, Failed> {
    let (sp, bp) = (regs.sp, regs.bp);
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
        Rule::Evaluate | Rule::NoCfi => return Err(Failed),
    };
    let return_address = read_stack(new_sp - 8).map_err(|_| Failed)?;
    step_to(regs, Regs::new(return_address, new_sp, new_bp))
}

/// Moves `regs` to `caller` (whose RIP is the frame's return address and RSP its CFA) and
/// returns the return address: `None` when it is 0 (no caller), a failure when the frame
/// does not advance (same stack pointer and instruction).
fn step_to(regs: &mut Regs, caller: Regs) -> Result<Option<u64>, Failed> {
    if caller.ip == 0 {
        return Ok(None);
    }
    if caller.sp == regs.sp && caller.ip == regs.ip {
        return Err(Failed);
    }
    *regs = caller;
    Ok(Some(caller.ip))
}

/// gimli's fixed-size storage for evaluating DWARF expressions: 16 stack values, no
/// nested expressions, 2 result pieces.
pub struct ExpressionStorage;

impl EvaluationStorage<Reader> for ExpressionStorage {
    type Stack = [Value; 16];
    type ExpressionStack = [(Reader, Reader); 1];
    type Result = [Piece<Reader>; 2];
}

/// Most operations one CFI expression may execute (the ones in use have 2 to 10).
const MAX_EXPRESSION_STEPS: u32 = 256;

/// Evaluates the CFI expression `expression` with `initial` pushed first (the CFA, for a
/// register's rule) and returns the address (or value) it computes. Registers come from
/// `regs`, memory from `read_stack` (8-byte words; narrower reads are masked). Fails on a
/// register the frame does not know, a read outside the stack, or an operation CFI does
/// not use.
fn evaluate_expression(
    expression: Expression<Reader>,
    initial: Option<u64>,
    regs: &Regs,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<u64, Failed> {
    let encoding = gimli::Encoding {
        address_size: 8,
        format: gimli::Format::Dwarf32,
        version: 4,
    };
    let mut evaluation = Evaluation::<Reader, ExpressionStorage>::new_in(expression.0, encoding);
    evaluation.set_max_iterations(MAX_EXPRESSION_STEPS);
    if let Some(value) = initial {
        evaluation.set_initial_value(value);
    }
    let mut state = evaluation.evaluate().map_err(|_| Failed)?;
    loop {
        state = match state {
            EvaluationResult::Complete => break,
            EvaluationResult::RequiresMemory {
                address,
                size,
                space: None,
                ..
            } if (1..=8).contains(&size) => {
                let word = read_stack(address)?;
                let value = if size == 8 {
                    word
                } else {
                    word & ((1u64 << (8 * u32::from(size))) - 1)
                };
                evaluation
                    .resume_with_memory(Value::Generic(value))
                    .map_err(|_| Failed)?
            }
            EvaluationResult::RequiresRegister { register, .. } => {
                let value = regs.get(register.0).ok_or(Failed)?;
                evaluation
                    .resume_with_register(Value::Generic(value))
                    .map_err(|_| Failed)?
            }
            _ => return Err(Failed),
        };
    }
    match evaluation.as_result() {
        [] => evaluation
            .value_result()
            .and_then(|v| v.to_u64(u64::MAX).ok())
            .ok_or(Failed),
        [Piece {
            location: Location::Address { address },
            ..
        }] => Ok(*address),
        [Piece {
            location: Location::Value { value },
            ..
        }] => value.to_u64(u64::MAX).map_err(|_| Failed),
        _ => Err(Failed),
    }
}

impl From<()> for Failed {
    fn from(_: ()) -> Failed {
        Failed
    }
}

/// Callee-saved registers of the System V x86-64 ABI other than RSP and RBP (DWARF
/// numbers: RBX, R12–R15): a row that does not mention them leaves them as they are.
const CALLEE_SAVED: [u16; 5] = [3, 12, 13, 14, 15];

/// Unwinds one frame by evaluating its CFI `row` of `module` in full: the CFA from any
/// register `regs` knows or from an expression; the return address, RBP and the other
/// callee-saved registers by their rules. Returns the caller's return address (and
/// updates `regs`), `None` when the row says there is no return address (the outermost
/// frame) or it is 0.
fn apply_row<S: UnwindContextStorage<usize>>(
    row: &UnwindTableRow<usize, S>,
    module: &CfiModule,
    is_first_frame: bool,
    regs: &mut Regs,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<Option<u64>, Failed> {
    let expression =
        |e: &gimli::UnwindExpression<usize>| e.get(&module.eh_frame).map_err(|_| Failed);
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => regs
            .get(register.0)
            .and_then(|value| value.checked_add_signed(*offset))
            .ok_or(Failed)?,
        CfaRule::Expression(e) => evaluate_expression(expression(e)?, None, regs, read_stack)?,
    };
    let mut restore = |rule: &RegisterRule<usize>,
                       current: Option<u64>|
     -> Result<Option<u64>, Failed> {
        Ok(match rule {
            RegisterRule::Undefined => None,
            RegisterRule::SameValue => current,
            RegisterRule::Offset(offset) => {
                Some(read_stack(cfa.checked_add_signed(*offset).ok_or(Failed)?)?)
            }
            RegisterRule::ValOffset(offset) => Some(cfa.checked_add_signed(*offset).ok_or(Failed)?),
            RegisterRule::Register(other) => Some(regs.get(other.0).ok_or(Failed)?),
            RegisterRule::Expression(e) => {
                let at = evaluate_expression(expression(e)?, Some(cfa), regs, read_stack)?;
                Some(read_stack(at)?)
            }
            RegisterRule::ValExpression(e) => Some(evaluate_expression(
                expression(e)?,
                Some(cfa),
                regs,
                read_stack,
            )?),
            _ => return Err(Failed),
        })
    };
    let return_address = match row.register(X86_64::RA) {
        None | Some(RegisterRule::Undefined) => return Ok(None),
        Some(rule) => restore(&rule, None)?.ok_or(Failed)?,
    };
    let bp = match row.register(X86_64::RBP) {
        None => regs.bp,
        Some(rule) => match restore(&rule, Some(regs.bp)) {
            Ok(value) => value.unwrap_or(regs.bp),
            // As in `exec`: an epilogue that popped RBP already.
            Err(Failed) if is_first_frame => regs.bp,
            Err(Failed) => return Err(Failed),
        },
    };
    let mut caller = Regs::new(return_address, cfa, bp);
    for register in CALLEE_SAVED {
        let current = regs.get(register);
        let value = match row.register(Register(register)) {
            None => current,
            Some(rule) => restore(&rule, current).ok().flatten(),
        };
        if let Some(value) = value {
            caller.set(register, value);
        }
    }
    step_to(regs, caller)
}

impl RowCache {
    /// Unwinds the frame at lookup address `address` by evaluating its CFI row in full
    /// (for [`Rule::Evaluate`]; see `apply_row`), or with the row's `Deref` form when
    /// it has one (cached: the full evaluation finds the FDE and runs its CFI program up to
    /// the row, 10-20 µs in OpenSSL's SHA-512). Fails when no row covers the address or the
    /// row does not evaluate with what the frame knows. Must follow [`RowCache::rule`] for
    /// the same module list. Async-signal-safe.
    pub fn unwind_by_row(
        &mut self,
        modules: &[CfiModule],
        address: u64,
        is_first_frame: bool,
        regs: &mut Regs,
        read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> Result<Option<u64>, Failed> {
        if let Some(i) = self
            .derefs
            .iter()
            .position(|d| d.start <= address && address < d.end)
        {
            let deref = self.derefs[i];
            self.derefs.copy_within(0..i, 1);
            self.derefs[0] = deref;
            return deref.exec(is_first_frame, regs, read_stack);
        }
        let derefs = &mut self.derefs;
        with_row(modules, &mut self.context, address, |row, module| {
            let (start, end) = (
                row.start_address().wrapping_add(module.bias),
                row.end_address().wrapping_add(module.bias),
            );
            if let Some(deref) = Deref::of(row, module, start, end) {
                derefs.copy_within(0..DEREFS - 1, 1);
                derefs[0] = deref;
            }
            apply_row(row, module, is_first_frame, regs, read_stack)
        })
        .unwrap_or(Err(Failed))
    }
}

/// The module that holds run-time `address`, and the address as an ELF virtual address.
fn module_for(modules: &[CfiModule], address: u64) -> Option<(&CfiModule, u64)> {
    let i = modules
        .partition_point(|m| m.range.0 <= address)
        .checked_sub(1)?;
    let module = &modules[i];
    (address < module.range.1).then(|| (module, address.wrapping_sub(module.bias)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gimli::CieOrFde;

    /// A made-up stack: every aligned word of `[low, low + 64 KiB)` holds a value derived
    /// from its address (some of them zero, many pointing back into the stack, so that
    /// expressions that dereference find stack addresses); reads elsewhere fail.
    fn read_fake(addr: u64, low: u64) -> Result<u64, ()> {
        if addr < low || addr >= low + 0x10000 || !addr.is_multiple_of(8) {
            return Err(());
        }
        let v = addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20;
        Ok(match v % 97 {
            0 => 0,
            1..=40 => low + 0x4000 + (v % 0x800) * 8,
            _ => v,
        })
    }

    /// The libraries whose CFI the comparison covers, where present: the system's
    /// libcrypto (OpenSSL's assembly: register-based CFA, expressions), a shared libpython,
    /// and OpenBLAS as numpy's wheel bundles it (from the tests' venvs or the benchmark's).
    fn libraries() -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        let globs = [
            "/usr/lib/x86_64-linux-gnu/libcrypto.so.3".to_string(),
            "/root/.pyenv/versions/3.11*/lib/libpython3.11.so.1.0".to_string(),
            format!(
                "{}/.cache/pyigprof/venvs/*/lib/python3*/site-packages/numpy.libs/*openblas*.so",
                std::env::var("HOME").unwrap_or_default()
            ),
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../bench/overhead/.venv-*/lib/python3*/site-packages/numpy.libs/*openblas*.so"
            )
            .to_string(),
        ];
        for pattern in globs {
            let out = std::process::Command::new("sh")
                .args(["-c", &format!("ls -d {pattern} 2>/dev/null | head -1")])
                .output()
                .expect("sh");
            let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !path.is_empty() {
                found.push(std::path::PathBuf::from(path));
            }
        }
        found
    }

    #[test]
    fn the_search_table_finds_the_fde_gimli_finds() {
        crate::capture::unwind::modules::rescan();
        let snapshot = crate::capture::unwind::modules::current().expect("modules");
        let mut searched = 0;
        for module in &snapshot.cfi {
            let Some(table) = module.table else { continue };
            let gimli = module.hdr.table().expect("a search table");
            for at in 0..table.len() {
                let (start, fde) = table.entry(at);
                for svma in [start.wrapping_sub(1), start, start + 1, start + 7] {
                    let ours = table.fde_address(svma);
                    if at == 0 && svma < start {
                        // Before every function: no FDE (gimli answers the first one, which
                        // then does not contain the address).
                        assert_eq!(ours, None);
                        continue;
                    }
                    let theirs = gimli.lookup(svma, &module.bases).ok().map(|p| p.pointer());
                    assert_eq!(
                        ours, theirs,
                        "{svma:#x} in the module at {:#x}",
                        module.range.0
                    );
                }
                assert_eq!(table.fde_address(start), Some(fde));
                searched += 1;
            }
        }
        assert!(searched > 1000, "only {searched} entries searched");
    }

    #[test]
    fn every_compact_rule_unwinds_as_the_full_evaluation_of_its_row() {
        let libraries = libraries();
        for library in &libraries {
            let name = std::ffi::CString::new(library.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: loading a library; its constructors run (OpenSSL, Python, OpenBLAS
            // are fine with that).
            let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            assert!(!handle.is_null(), "dlopen {}", library.display());
        }
        crate::capture::unwind::modules::rescan();
        let snapshot = crate::capture::unwind::modules::current().expect("modules");
        let mut context = UnwindContext::<usize, Storage>::new_in();
        let low = 0x7000_0000_0000u64;
        let mut report = Vec::new();
        for module in &snapshot.cfi {
            let Some(object) = snapshot
                .objects
                .iter()
                .find(|o| o.range.0 == module.range.0)
            else {
                continue;
            };
            let (mut rows, mut compact, mut evaluated, mut evaluates) = (0u64, 0u64, 0u64, 0u64);
            let mut derefs = 0u64;
            let mut entries = module.eh_frame.entries(&module.bases);
            while let Some(entry) = entries.next().expect("an .eh_frame entry") {
                let CieOrFde::Fde(partial) = entry else {
                    continue;
                };
                let fde = partial
                    .parse(EhFrame::cie_from_offset)
                    .expect("an FDE that parses");
                let mut table = fde
                    .rows(&module.eh_frame, &module.bases, &mut context)
                    .expect("rows");
                while let Some(row) = table.next_row().expect("a row") {
                    rows += 1;
                    let address = row.start_address().wrapping_add(module.bias);
                    let rule = translate(row);
                    for first in [true, false] {
                        // Every register known, pointing into the fake stack.
                        let mut regs = Regs::from_gregs(|reg| {
                            Some(low + 0x2000 + 8 * (reg as u64 % 7) + 8 * (address % 5))
                        })
                        .unwrap();
                        regs.ip = if first { address } else { address + 1 };
                        let mut full = regs;
                        let expected =
                            apply_row(row, module, first, &mut full, &mut |a| read_fake(a, low));
                        if rule == Rule::Evaluate {
                            evaluated += 1;
                            evaluates += u64::from(expected.is_ok());
                            if let Some(deref) = Deref::of(row, module, address, address + 1) {
                                let mut ours = regs;
                                let got = deref.exec(first, &mut ours, &mut |a| read_fake(a, low));
                                assert_eq!(
                                    (got, (ours.ip, ours.sp, ours.bp)),
                                    (expected, (full.ip, full.sp, full.bp)),
                                    "{} at {address:#x} (+{:#x}), first frame {first}, {deref:?}",
                                    object.path.display(),
                                    address - object.bias
                                );
                                derefs += 1;
                            }
                            continue;
                        }
                        let mut ours = regs;
                        let got = exec(rule, first, &mut ours, &mut |a| read_fake(a, low));
                        assert_eq!(
                            (got, (ours.ip, ours.sp, ours.bp)),
                            (expected, (full.ip, full.sp, full.bp)),
                            "{} at {address:#x} (+{:#x}), first frame {first}, {rule:?}",
                            object.path.display(),
                            address - object.bias
                        );
                        compact += 1;
                    }
                }
            }
            report.push(format!(
                "{}: {rows} rows, {compact} compact unwinds equal, {evaluated} evaluated in \
                 full ({evaluates} evaluate, {derefs} equal in the deref form)",
                object.path.display()
            ));
        }
        eprintln!("{}", report.join("\n"));
        for library in &libraries {
            let stem = library.file_name().unwrap().to_string_lossy().to_string();
            assert!(
                report.iter().any(|line| line.contains(&stem)),
                "{stem} was not compared"
            );
        }
        assert!(
            libraries
                .iter()
                .any(|l| l.to_string_lossy().contains("libcrypto")),
            "the system's libcrypto is needed: {libraries:?}"
        );
    }

    #[test]
    fn openssl_style_and_realigned_stack_expressions_give_the_cfa() {
        let low = 0x7000_0000_0000u64;
        // A stack whose word at sp + 0x38 holds the caller's stack pointer minus 8, and
        // whose word at bp - 8 holds another.
        let (sp, bp) = (low + 0x100, low + 0x400);
        let saved = low + 0x1000;
        let mut stack = |a: u64| -> Result<u64, ()> {
            match a {
                a if a == sp + 0x38 => Ok(saved),
                a if a == bp - 8 => Ok(saved + 0x100),
                _ => read_fake(a, low),
            }
        };
        let regs = Regs::new(0x40_1000, sp, bp);
        // DW_OP_breg7 (rsp) 0x38; DW_OP_deref; DW_OP_plus_uconst 8 (OpenSSL's
        // `.cfi_cfa_expression $_rsp,deref,+8`).
        let openssl: &'static [u8] = &[0x77, 0x38, 0x06, 0x23, 0x08];
        let e = Expression(EndianSlice::new(openssl, LittleEndian));
        assert_eq!(
            evaluate_expression(e, None, &regs, &mut stack),
            Ok(saved + 8)
        );
        // DW_OP_breg6 (rbp) -8; DW_OP_deref (GCC's stack realignment).
        let gcc: &'static [u8] = &[0x76, 0x78, 0x06];
        let e = Expression(EndianSlice::new(gcc, LittleEndian));
        assert_eq!(
            evaluate_expression(e, None, &regs, &mut stack),
            Ok(saved + 0x100)
        );
        // DW_OP_breg0 (rax): a register the frame does not know.
        let rax: &'static [u8] = &[0x70, 0x00];
        let e = Expression(EndianSlice::new(rax, LittleEndian));
        assert_eq!(evaluate_expression(e, None, &regs, &mut stack), Err(Failed));
        // A read outside the stack fails.
        let wild: &'static [u8] = &[0x77, 0x80, 0x80, 0x80, 0x80, 0x01, 0x06];
        let e = Expression(EndianSlice::new(wild, LittleEndian));
        assert_eq!(evaluate_expression(e, None, &regs, &mut stack), Err(Failed));
    }

    #[test]
    fn a_row_is_cached_for_its_whole_range_and_forgotten_with_its_modules() {
        crate::capture::unwind::modules::rescan();
        let snapshot = crate::capture::unwind::modules::current().expect("modules");
        let identity = snapshot as *const _ as usize;
        // A function of this object, away from its prologue: its body is one row.
        let address = read_fake as *const () as u64 + 32;
        let mut rows = RowCache::new();
        let rule = rows.rule(&snapshot.cfi, identity, address);
        assert!(!matches!(rule, Rule::Evaluate | Rule::NoCfi), "{rule:?}");
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
        // An address outside every object has no CFI, remembered for that address only.
        assert_eq!(rows.rule(&snapshot.cfi, identity, 8), Rule::NoCfi);
        assert_eq!(rows.rule(&snapshot.cfi, identity, 8), Rule::NoCfi);
        assert_eq!(rows.stats.misses, 3);
    }
}
