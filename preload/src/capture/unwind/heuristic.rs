//! One step out of a frame of code without CFI: hand-written assembly without `.cfi_*`
//! directives (OpenBLAS's kernels, libjpeg-turbo's SIMD), objects without
//! `PT_GNU_EH_FRAME`, code generated at run time.
//!
//! Such code says nothing about its frame, so the step is a guess, validated as far as the
//! process's memory allows, and the sample is counted as approximate:
//!
//! 1. **Frame pointer**, where the chain is plausible: RBP points into the stack above RSP,
//!    the word above it is a return address after a call (`plausible_return`) from which
//!    the walk checks out, and the saved RBP below it is 0 or further out. Code built with
//!    frame pointers unwinds exactly so; code that leaves RBP alone would skip its caller.
//! 2. Else a **stack scan**: the first word from RSP outwards (at most [`MAX_SCAN_WORDS`])
//!    that is a plausible return address is taken as the frame's if the walk from it
//!    checks out; RBP is kept (the caller's CFI, if it uses RBP, then either finds it saved
//!    or fails validation). The thread's next sample at the same stack pointer reuses the
//!    finding ([`ScanHint`]).
//! 3. Else **scans from the registers** that point into the stack above that word, nearest
//!    first (at most [`SEED_SCAN_WORDS`] each, every plausible word in order): code that
//!    realigns its stack keeps its entry stack pointer in a register, and its return
//!    address lies just above it, past the registers it saved and the unwritten words of
//!    its frame (which can hold stale return addresses). If none checks out, the step
//!    fails (the stack is incomplete).
//!
//! A plausible return address lies in an object's executable segment right after a call
//! instruction ([`Snapshot::follows_call`]), and the walk from it must lead to a thread's
//! root by CFI (the caller's `leads_to_root`). The words a scan passes are not all the
//! frame's own: a BLAS kernel that realigns its stack (OpenBLAS's Haswell DGEMM) leaves
//! 28 KiB of stale stack below its return address, with the return addresses of calls
//! made earlier (the loader's, `printf`'s), which follow calls too; taking the first one
//! whose chain checks out put the kernel under a stale `dgemm_oncopy` frame, so the scan
//! from RSP stops at the first plausible one. The kernel keeps its entry stack pointer in
//! RBX (`mov %rsp, %rbx`, then RSP moves down to a page boundary): step 3 finds its
//! return address from there. Async-signal-safe: reads only the thread's stack (through
//! the caller's validated reader) and the mapped code.

use super::modules::Snapshot;
use super::Regs;
use crate::capture::unwind::cfi::Failed;

/// Most stack words a scan examines (64 KiB of stack: OpenBLAS's Haswell DGEMM kernel
/// keeps a 28 KiB buffer, page-aligned, between its stack pointer and its return address).
pub const MAX_SCAN_WORDS: u64 = 8192;

/// Where the last scan of a thread found its return address: a frame of code without CFI
/// keeps its stack pointer while it runs (a BLAS kernel's inner loops), so the next sample
/// of it reuses the finding while the same word still holds the same value, instead of
/// scanning up to [`MAX_SCAN_WORDS`] words again. All-zero is an empty hint.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScanHint {
    /// The stack pointer the scan started from.
    sp: u64,
    /// Where it found the return address, and the value it found.
    at: u64,
    value: u64,
    /// How far the walk from it checked out.
    check: Check,
}

/// How far the walk from a candidate return address must check out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Check {
    /// To a thread's root (or a signal frame) by CFI alone.
    #[default]
    Root,
    /// To the root, or to a return address after a call into other code without CFI, by at
    /// least one frame of CFI.
    Reachable,
}

/// Whether `value`, read from the stack, may be the return address of a frame of code
/// without CFI: inside an object's executable code, right after a call instruction.
fn plausible_return(snapshot: &Snapshot, value: u64) -> bool {
    snapshot.follows_call(value)
}

/// Unwinds one frame of code without CFI from `regs` (see the module documentation),
/// reading stack words with `read_stack` (which refuses words outside `stack`, the
/// thread's `[low, high)`). Returns the caller's return address and updates `regs`; fails
/// when neither step finds one.
pub fn step(
    snapshot: &Snapshot,
    stack: (u64, u64),
    hint: &mut ScanHint,
    regs: &mut Regs,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
    leads_to_root: &mut impl FnMut(&Regs, Check) -> bool,
) -> Result<Option<u64>, Failed> {
    let (sp, bp) = (regs.sp, regs.bp);
    if bp >= sp && bp < stack.1 && bp.is_multiple_of(8) {
        if let (Ok(ret), Ok(saved_bp)) = (read_stack(bp + 8), read_stack(bp)) {
            let caller = Regs::new(ret, bp + 16, saved_bp);
            if plausible_return(snapshot, ret)
                && (saved_bp == 0 || saved_bp > bp)
                && leads_to_root(&caller, Check::Reachable)
            {
                *regs = caller;
                return Ok(Some(ret));
            }
        }
    }
    // The word the last scan took, while it holds the same value and its walk still checks
    // out as it did: a stale word can keep its value while the frames it led through
    // change (OpenBLAS's kernel runs at the same page-aligned RSP on every call).
    if hint.sp == sp
        && hint.sp != 0
        && read_stack(hint.at) == Ok(hint.value)
        && leads_to_root(&Regs::new(hint.value, hint.at + 8, bp), hint.check)
    {
        *regs = Regs::new(hint.value, hint.at + 8, bp);
        return Ok(Some(hint.value));
    }
    // The scan from RSP: its first plausible return address. Going on past one that does
    // not check out would skip live frames whose return addresses fail the check for the
    // same reason, and take stale ones.
    let first = first_plausible(snapshot, sp, MAX_SCAN_WORDS, read_stack);
    // Else the scans from the registers that point into the stack above it, nearest first:
    // a kernel that realigns its stack keeps the stack pointer it was called with in a
    // register (OpenBLAS's Haswell DGEMM: `mov %rsp, %rbx`, then RSP moves 28 KiB down to
    // a page boundary), and its return address lies a few words above that value, past the
    // stale stack that the scan from RSP stopped in.
    let seed_of = |dwarf: u16| {
        let value = regs.get(dwarf)?;
        (value > sp && value < stack.1 && value.is_multiple_of(8)).then_some(value)
    };
    // Each candidate is checked first for a walk to the thread's root by CFI alone, then for
    // one that may end in other code without CFI. Among those that check out, the first
    // that returns into the object of the code running wins (code without CFI is called by
    // its own library: BLAS kernels by its drivers, SIMD routines by their C callers): a
    // stale word can check out too, as the return address into libc's `clock_gettime` that
    // `time.process_time()` left below OpenBLAS's kernel, whose chain runs through the live
    // evaluator frames to `_start`. Else the first that checks out.
    let here = regs.ip;
    for check in [Check::Root, Check::Reachable] {
        let mut fallback = None;
        let mut candidate = first;
        // The seed whose window is being scanned, and the window's end (exclusive): no word
        // below it is looked at again (the scan from RSP looked up to its first find).
        let mut previous = sp;
        let mut window_end = first.map_or(sp, |(at, _)| at + 8);
        loop {
            if let Some((at, word)) = candidate {
                if leads_to_root(&Regs::new(word, at + 8, bp), check) {
                    if snapshot.same_object(word, here) {
                        return Ok(Some(take(regs, hint, at, word, check)));
                    }
                    fallback.get_or_insert((at, word));
                }
            }
            // The next plausible word of the current seed's window: between a kernel's
            // entry stack pointer and its return address lie the registers it saved and
            // words of its frame it never writes, and either can look like a return
            // address (OpenBLAS's Haswell DGEMM: `sub $0x60, %rsp`, six registers saved,
            // then `mov %rsp, %rbx`; its saved R13 was a return address into this
            // library's handler code at 26 of 400 entries into the kernel, and taking only
            // the first plausible word made 4-6 % of a loaded run's samples incomplete).
            if let Some((at, _)) = candidate.filter(|&(at, _)| at + 8 < window_end) {
                let left = (window_end - at - 8) / 8;
                candidate = first_plausible(snapshot, at + 8, left, read_stack);
                if candidate.is_some() {
                    continue;
                }
            }
            // The nearest seed beyond the last one tried (at most 16 registers: no sorting),
            // its window starting past the words already scanned.
            let Some(seed) = (0..16u16)
                .filter_map(seed_of)
                .filter(|&value| value > previous)
                .min()
            else {
                break;
            };
            previous = seed;
            let (from, end) = (seed.max(window_end), seed + 8 * SEED_SCAN_WORDS);
            candidate = (from < end)
                .then(|| first_plausible(snapshot, from, (end - from) / 8, read_stack))
                .flatten();
            window_end = window_end.max(end);
        }
        if let Some((at, word)) = fallback {
            return Ok(Some(take(regs, hint, at, word, check)));
        }
    }
    Err(Failed)
}

/// Takes the return address `word` found at `at` as the frame's: the caller's registers
/// (RBP kept) and the thread's hint for its next sample.
fn take(regs: &mut Regs, hint: &mut ScanHint, at: u64, word: u64, check: Check) -> u64 {
    *hint = ScanHint {
        sp: regs.sp,
        at,
        value: word,
        check,
    };
    *regs = Regs::new(word, at + 8, regs.bp);
    word
}

/// Most stack words a scan from a register's value examines.
pub const SEED_SCAN_WORDS: u64 = 64;

/// The first word from `from` outwards, among at most `words`, that is a plausible return
/// address, with where it is.
fn first_plausible(
    snapshot: &Snapshot,
    from: u64,
    words: u64,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Option<(u64, u64)> {
    let mut at = from.next_multiple_of(8);
    for _ in 0..words {
        let word = read_stack(at).ok()?;
        if plausible_return(snapshot, word) {
            return Some((at, word));
        }
        at += 8;
    }
    None
}

/// Whether the bytes `code` (which end where a return address points) end with an x86-64
/// call instruction: `E8 rel32`, or `FF /2` (`call r/m64`, with an optional `notrack`
/// (3E) and REX prefix) in any of its addressing forms.
pub fn ends_with_call(code: &[u8]) -> bool {
    let len = code.len();
    if len >= 5 && code[len - 5] == 0xe8 {
        return true;
    }
    (2..=len.min(8)).any(|k| {
        let insn = &code[len - k..];
        let mut p = 0;
        if insn[p] == 0x3e {
            p += 1;
        }
        if p < insn.len() && insn[p] & 0xf0 == 0x40 {
            p += 1;
        }
        if p + 1 >= insn.len() || insn[p] != 0xff {
            return false;
        }
        let modrm = insn[p + 1];
        if (modrm >> 3) & 7 != 2 {
            return false;
        }
        let (mode, rm) = (modrm >> 6, modrm & 7);
        let sib = rm == 4 && mode != 3;
        let displacement = match mode {
            0 if rm == 5 => 4,
            0 if sib => match insn.get(p + 2) {
                Some(&s) if s & 7 == 5 => 4,
                Some(_) => 0,
                None => return false,
            },
            1 => 1,
            2 => 4,
            _ => 0,
        };
        p + 2 + usize::from(sib) + displacement == k
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::unwind::modules::ObjectInfo;

    /// Two "objects" of code, each a run of `call rel32` instructions: a return address
    /// into either follows a call.
    static CODE: [u8; 80] = {
        let mut code = [0u8; 80];
        let mut i = 0;
        while i < 80 {
            code[i] = 0xe8;
            i += 5;
        }
        code
    };

    /// A snapshot whose objects are `CODE`'s halves (the kernel's and another's).
    fn two_objects() -> (Snapshot, u64, u64) {
        let base = CODE.as_ptr() as u64;
        let object = |start: u64, end: u64| ObjectInfo {
            path: "test".into(),
            bias: 0,
            range: (start, end),
            in_memory: false,
            build_id: None,
        };
        let snapshot = Snapshot {
            cfi: Vec::new(),
            objects: vec![object(base, base + 40), object(base + 40, base + 80)],
            code: vec![(base, base + 40), (base + 40, base + 80)],
            spans: vec![(base, base + 40), (base + 40, base + 80)],
        };
        (snapshot, base, base + 40)
    }

    /// OpenBLAS's Haswell DGEMM: its stack pointer far below (page-aligned, over a buffer
    /// that holds nothing like code), RBX its stack pointer after `sub $0x60, %rsp`, six
    /// saved registers there of which one holds a return address into other code, six
    /// words, then the return address into its caller. The saved register is the first
    /// plausible word of both scans and does not check out; the return address does.
    #[test]
    fn a_kernel_is_stepped_out_of_past_a_saved_register_that_looks_like_a_return() {
        let (snapshot, kernel, other) = two_objects();
        let mut stack = [0u64; 64];
        let low = stack.as_ptr() as u64;
        let entry = 20; // RBX: index of the kernel's stack pointer after `sub $0x60`
        let (stale, real) = (other + 10, kernel + 15);
        stack[entry + 3] = stale; // saved R13
        stack[entry + 12] = real; // the return address, 0x60 above RBX
        let range = (low, low + 8 * stack.len() as u64);
        let mut read = |addr: u64| -> Result<u64, ()> {
            (range.0..range.1)
                .contains(&addr)
                .then(|| stack[((addr - low) / 8) as usize])
                .ok_or(())
        };
        // One step from the kernel's first instructions, with a fresh hint, RBX as given.
        let mut step_out = |rbx: Option<u64>| {
            let mut regs = Regs::new(kernel + 2, low, 0);
            if let Some(rbx) = rbx {
                regs.set(3, rbx);
            }
            let mut hint = ScanHint::default();
            let got = step(
                &snapshot,
                range,
                &mut hint,
                &mut regs,
                &mut read,
                &mut |caller, _| caller.ip == real,
            );
            (got, regs.sp)
        };
        let (got, sp) = step_out(Some(low + 8 * entry as u64));
        assert_eq!(got, Ok(Some(real)));
        assert_eq!(sp, low + 8 * (entry as u64 + 13));

        // Without a register pointing below the return address, the scan from RSP stops
        // at its first plausible word: it does not go on into stale stack.
        assert_eq!(step_out(None).0, Err(Failed));
    }

    #[test]
    fn call_instructions_are_recognised_in_every_form() {
        let calls: [&[u8]; 12] = [
            &[0xe8, 1, 2, 3, 4],                   // call rel32
            &[0xff, 0xd0],                         // call *%rax
            &[0x41, 0xff, 0xd3],                   // call *%r11
            &[0x3e, 0xff, 0xd0],                   // notrack call *%rax
            &[0xff, 0x10],                         // call *(%rax)
            &[0xff, 0x50, 0x08],                   // call *8(%rax)
            &[0xff, 0x90, 1, 2, 3, 4],             // call *disp32(%rax)
            &[0xff, 0x15, 1, 2, 3, 4],             // call *disp32(%rip)
            &[0xff, 0x14, 0x24],                   // call *(%rsp)
            &[0xff, 0x54, 0x24, 0x08],             // call *8(%rsp)
            &[0x41, 0xff, 0x94, 0x24, 1, 2, 3, 4], // call *disp32(%r12)
            &[0xff, 0x14, 0x25, 1, 2, 3, 4],       // call *disp32 (SIB, no base)
        ];
        for call in calls {
            let mut code = vec![0x90u8; 8];
            code.extend_from_slice(call);
            assert!(ends_with_call(&code), "{call:02x?}");
        }
        let not_calls: [&[u8]; 5] = [
            &[0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90], // nops
            &[0x48, 0x89, 0xe5],                               // mov %rsp,%rbp
            &[0xff, 0xe0],                                     // jmp *%rax
            &[0xc3],                                           // ret
            &[0x48, 0x83, 0xc4, 0x08],                         // add $8,%rsp
        ];
        for other in not_calls {
            let mut code = vec![0x90u8; 8];
            code.extend_from_slice(other);
            assert!(!ends_with_call(&code), "{other:02x?}");
        }
    }
}
