//! Native unwinding of the interrupted thread, from the register state the kernel saved
//! (`ucontext_t`): DWARF CFI where an object has it ([`cfi`]: compact rules cached by row,
//! full evaluation of the others), and for code without CFI a frame-pointer step where the
//! chain is plausible, else a validated stack scan ([`heuristic`]; such stacks are
//! approximate). shared/design/unwinding.md has the facts.

pub mod cfi;
pub mod copies;
pub mod heuristic;
pub mod modules;

use crate::capture::probe;
use cfi::{RowCache, Rule};
use modules::Snapshot;

/// One thread's unwinding caches: CFI rows by address range ([`RowCache`], about 23 KB)
/// and the last stack scan's finding. Allocated when the thread registers, never in the
/// handler.
pub struct UnwindCache {
    /// The row cache.
    pub rows: Box<RowCache>,
    /// Where the last stack scan found a return address.
    pub scan: heuristic::ScanHint,
}

impl UnwindCache {
    /// Empty caches.
    pub fn new() -> Box<UnwindCache> {
        Box::new(UnwindCache {
            rows: RowCache::new(),
            scan: heuristic::ScanHint::default(),
        })
    }
}

/// Register state of a frame: RIP, RSP and RBP always, and the other general registers
/// where known (all of them in the interrupted frame and after a signal frame, from the
/// `ucontext_t`; in outer frames those the CFI rules recovered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
    /// General registers by DWARF number (0 RAX, 1 RDX, 2 RCX, 3 RBX, 4 RSI, 5 RDI, 8–15
    /// R8–R15; the System V x86-64 psABI's numbering); RBP and RSP are in `bp`/`sp`.
    others: [u64; 16],
    /// Bit `n` set when `others[n]` is known.
    known: u16,
}

/// `ucontext_t` general-register index (`REG_*` of `<sys/ucontext.h>`) of each DWARF
/// register number 0–16 (RIP is 16).
const GREG_OF_DWARF: [libc::c_int; 17] = [
    libc::REG_RAX,
    libc::REG_RDX,
    libc::REG_RCX,
    libc::REG_RBX,
    libc::REG_RSI,
    libc::REG_RDI,
    libc::REG_RBP,
    libc::REG_RSP,
    libc::REG_R8,
    libc::REG_R9,
    libc::REG_R10,
    libc::REG_R11,
    libc::REG_R12,
    libc::REG_R13,
    libc::REG_R14,
    libc::REG_R15,
    libc::REG_RIP,
];

/// Stack addresses above RSP tried as RBP for a frame whose CFA comes from an unknown RBP.
const BP_GUESSES: u64 = 512;

/// The RBP of [`Regs`] whose frame pointer is not known (a thread sampled while blocked in
/// a system call: the kernel tells its stack and instruction pointers only). Not a multiple
/// of 8 and not addable to: every rule that uses it fails, and a frame that restores RBP
/// from the stack replaces it.
pub const UNKNOWN_BP: u64 = u64::MAX;

impl Regs {
    /// RIP, RSP and RBP only ([`UNKNOWN_BP`] when RBP is not known).
    pub fn new(ip: u64, sp: u64, bp: u64) -> Regs {
        Regs {
            ip,
            sp,
            bp,
            others: [0; 16],
            known: 0,
        }
    }

    /// Every general register, from a `ucontext_t`'s `gregs` read with `greg`.
    fn from_gregs(mut greg: impl FnMut(libc::c_int) -> Option<u64>) -> Option<Regs> {
        let mut regs = Regs::new(
            greg(libc::REG_RIP)?,
            greg(libc::REG_RSP)?,
            greg(libc::REG_RBP)?,
        );
        for (dwarf, &index) in GREG_OF_DWARF[..16].iter().enumerate() {
            if !matches!(dwarf, 6 | 7) {
                regs.set(dwarf as u16, greg(index)?);
            }
        }
        Some(regs)
    }

    /// Reads every general register from a `ucontext_t`.
    ///
    /// # Safety
    /// `uc` must point to a readable `ucontext_t`.
    #[inline(always)]
    pub unsafe fn from_ucontext(uc: *const libc::ucontext_t) -> Regs {
        // SAFETY: per the contract.
        let gregs = unsafe { &(*uc).uc_mcontext.gregs };
        Regs::from_gregs(|i| Some(gregs[i as usize] as u64)).expect("every register is read")
    }

    /// The value of DWARF register `dwarf` (16 = RIP), if known.
    #[inline]
    pub fn get(&self, dwarf: u16) -> Option<u64> {
        match dwarf {
            6 => Some(self.bp),
            7 => Some(self.sp),
            16 => Some(self.ip),
            n if n < 16 && self.known & (1 << n) != 0 => Some(self.others[n as usize]),
            _ => None,
        }
    }

    /// Sets DWARF register `dwarf` (0–16).
    #[inline]
    pub fn set(&mut self, dwarf: u16, value: u64) {
        match dwarf {
            6 => self.bp = value,
            7 => self.sp = value,
            16 => self.ip = value,
            n if n < 16 => {
                self.others[n as usize] = value;
                self.known |= 1 << n;
            }
            _ => {}
        }
    }

    /// Whether registers other than RIP, RSP and RBP are known.
    fn knows_others(&self) -> bool {
        self.known != 0
    }
}

/// Result of unwinding one stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unwound {
    /// Frames written (innermost first).
    pub frames: usize,
    /// Whether the outermost frame was reached.
    pub complete: bool,
    /// Whether unwinding stopped because `out` was full (rather than because it failed).
    pub cut: bool,
    /// How many of the outer frames were replayed from the [`Memo`] instead of unwound.
    pub replayed: usize,
    /// Whether a frame was found by a heuristic step (code without CFI, [`heuristic`]).
    pub approximate: bool,
}

/// Most frames a [`Memo`] holds; the outer part of deeper stacks is unwound every time.
pub const MEMO_FRAMES: usize = 256;
/// Most stack words the unwinding of one memoized frame may read (its return address and a
/// saved frame pointer).
const MEMO_READS: usize = 2;

/// One frame of an unwinding, as [`Memo`] keeps it: where it was and what its unwinding
/// read. All-zero is a valid (unused) frame.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct MemoFrame {
    /// The lookup address written to `out` for this frame.
    pc: u64,
    /// Stack pointer at this frame.
    sp: u64,
    /// Frame pointer at this frame.
    bp: u64,
    /// The stack words read to unwind this frame to its caller: `(address, value)`.
    reads: [(u64, u64); MEMO_READS],
    /// How many of `reads` are used; [`UNMEMOIZABLE`] when the frame cannot be replayed
    /// (more reads, a read refused, a signal frame, registers other than RIP, RSP and RBP
    /// used, a heuristic step).
    nreads: u8,
    /// Whether `pc` came from a return address (the first frame and frames after a signal
    /// frame, reached by instruction pointer, are looked up and unwound differently).
    from_return: bool,
}

/// `MemoFrame::nreads` of a frame that cannot be replayed.
const UNMEMOIZABLE: u8 = u8::MAX;

/// The previous unwinding of one thread's stack, so that the next sample only unwinds the
/// frames that changed: consecutive samples of a thread share their outer frames (`_start`
/// … the interpreter's main loop), and unwinding each of them costs a module lookup, a
/// rule-cache lookup and its stack reads, mostly cache misses after milliseconds of the
/// program's own work.
///
/// Replaying is exact: the unwinding of a frame is a function of the frame's address, its
/// registers (ip, sp, bp; a frame that used others is not memoized) and the stack words it
/// reads, under one set of modules. When
/// unwinding reaches a frame whose address, kind, sp and bp equal a memoized frame's, and
/// every stack word the memoized unwinding read from there outwards still holds the value
/// it read (and is still readable), the rest of the stack is the memoized one. All-zero is
/// a valid empty memo. Used only by the owner thread, from its signal handler.
#[repr(C)]
pub struct Memo {
    /// Identity (address) of the module snapshot the frames were unwound with; 0 = empty.
    snapshot: usize,
    /// Frames in `frames`.
    len: usize,
    /// Whether that unwinding reached the outermost frame.
    complete: bool,
    /// The frames, outermost first.
    frames: [MemoFrame; MEMO_FRAMES],
    /// Scratch: the frames of the unwinding in progress, innermost first.
    fresh: [MemoFrame; MEMO_FRAMES],
}

/// Where [`unwind`] writes the frames it finds, innermost first.
pub struct Frames<'a> {
    /// Frame addresses: the interrupted instruction, then each caller's return address
    /// minus one.
    pub pcs: &'a mut [u64],
    /// `sps[n]` is frame `n`'s stack pointer, so that frame `n`'s locals lie in
    /// `[sps[n], sps[n + 1])` (the evaluator's marker is found that way,
    /// [`crate::capture::mixed`]). At most `min(pcs.len(), sps.len())` frames are written.
    pub sps: &'a mut [u64],
}

/// The registers where this (inlined) function is called, for unwinding the calling
/// thread's own stack from the profiler's code (a sampled allocation, a sampled lock wait):
/// the instruction, stack and frame pointers. Touches no memory.
#[inline(always)]
pub fn registers_here() -> Regs {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers, touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags)
        );
    }
    Regs::new(ip, sp, bp)
}

/// Unwinds from `regs` into `into` (see [`Frames`]). Stack reads are limited to aligned words inside
/// `stack` (`[low, high)`). `restorer` is the signal trampoline's address (`__restore_rt`):
/// a frame returning into it was a signal handler, and unwinding continues from the
/// `ucontext_t` the kernel saved on the stack. The outer frames shared with the previous
/// unwinding in `memo` are replayed from it (see [`Memo`]), and `memo` is updated.
/// Async-signal-safe.
pub fn unwind(
    snapshot: &Snapshot,
    cache: &mut UnwindCache,
    memo: &mut Memo,
    regs: Regs,
    stack: (u64, u64),
    restorer: u64,
    into: Frames<'_>,
) -> Unwound {
    let Frames { pcs: out, sps } = into;
    let frames = sps.len().min(out.len());
    let out = &mut out[..frames];
    let (low, high) = (stack.0.max(regs.sp.saturating_sub(256)), stack.1);
    let readable = |addr: u64| {
        addr >= low && addr.checked_add(8).is_some_and(|end| end <= high) && addr.is_multiple_of(8)
    };
    let identity = snapshot as *const Snapshot as usize;
    // Candidates for a match are memo.frames[..next]: the merge below walks both stacks
    // outwards (stack pointers grow) and compares frames at equal stack pointers.
    let mut next = if memo.snapshot == identity {
        memo.len
    } else {
        0
    };
    let mut regs = regs;
    // The frame's lookup address and whether it came from a return address (minus one, so
    // that it lies inside the call instruction) or is an interrupted instruction.
    let (mut pc, mut from_return) = (regs.ip, false);
    let mut approximate = false;
    let mut n = 0;
    let result = loop {
        if n == out.len() {
            break Unwound {
                frames: n,
                complete: false,
                cut: true,
                replayed: 0,
                approximate,
            };
        }
        // A copy of a template made at run time (CPython's perf trampolines) is recorded
        // and stepped out of as the template.
        let copied = if from_return {
            copies::lookup(snapshot, pc + 1).map(|(ret, rule)| (ret - 1, rule))
        } else {
            copies::lookup_interrupted(snapshot, pc)
        };
        out[n] = copied.map_or(pc, |(at, _)| at);
        let (sp, bp) = (regs.sp, regs.bp);
        sps[n] = sp;
        while next > 0 && memo.frames[next - 1].sp < sp {
            next -= 1;
        }
        if next > 0 {
            let at = next - 1;
            let f = &memo.frames[at];
            if f.sp == sp
                && f.bp == bp
                && f.pc == out[n]
                && f.from_return == from_return
                && n + 1 + at <= out.len()
                && still_holds(&memo.frames[..next], &readable)
            {
                let mut unwound = replay(memo, at, n, out, sps);
                unwound.approximate = approximate;
                return unwound;
            }
        }
        let mut frame = MemoFrame {
            pc: out[n],
            sp,
            bp,
            from_return,
            ..MemoFrame::default()
        };
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            if !readable(addr) {
                frame.nreads = UNMEMOIZABLE;
                return Err(());
            }
            // Inside the thread's stack, below its top and above the interrupted sp; a stack
            // unmapped meanwhile (a blocked thread that ended) fails the read.
            let Some(value) = probe::u64_at(addr) else {
                frame.nreads = UNMEMOIZABLE;
                return Err(());
            };
            if (frame.nreads as usize) < MEMO_READS {
                frame.reads[frame.nreads as usize] = (addr, value);
                frame.nreads += 1;
            } else {
                frame.nreads = UNMEMOIZABLE;
            }
            Ok(value)
        };
        let rule = match copied {
            Some((_, rule)) => rule,
            None => cache.rows.rule(&snapshot.cfi, identity, pc),
        };
        // Only CFI that says "no return address" (`_start`, `clone3`: `.cfi_undefined rip`)
        // ends a stack at a thread's true root. A zero or absent return address anywhere
        // else (a heuristic step in code without CFI, such as BLAS kernels whose rbp is a
        // general register) ends the walk as incomplete.
        let mut at_root = matches!(rule, Rule::EndOfStack);
        let used_others = regs.knows_others() && rule == Rule::Evaluate;
        // A thread sampled while blocked has no known RBP until a frame restores it: a rule
        // that needs it fails, and RBP is then guessed (below).
        let before = regs;
        let step = match rule {
            Rule::Evaluate => {
                let step = cache.rows.unwind_by_row(
                    &snapshot.cfi,
                    pc,
                    !from_return,
                    &mut regs,
                    &mut read_stack,
                );
                at_root = matches!(step, Ok(None));
                step
            }
            Rule::NoCfi => Err(cfi::Failed),
            rule => cfi::exec(rule, !from_return, &mut regs, &mut read_stack),
        };
        // A rule that needed the unknown RBP: a full row with a CFA from RBP (libffi's and
        // hand-written assembly's), or the frame-pointer rule of code built with frame
        // pointers (every function of sid's CPython 3.15 and of distributions that build
        // so, where a blocked thread's stack stopped at the first frame out of the C
        // library's system call wrapper, under `<incomplete stack>`). RBP is guessed among
        // the stack addresses above RSP, and a guess is taken only if its caller's walk
        // reaches the thread's root by CFI.
        let mut step = step;
        let mut guessed_bp = false;
        let needs_bp = matches!(rule, Rule::Evaluate | Rule::UseFramePointer);
        let guess_bp = step.is_err() && before.bp == UNKNOWN_BP && needs_bp;
        if guess_bp {
            for candidate in (0..BP_GUESSES).map(|i| before.sp + 8 * i) {
                let mut trial = before;
                trial.bp = candidate;
                let got = if rule == Rule::Evaluate {
                    cache.rows.unwind_by_row(
                        &snapshot.cfi,
                        pc,
                        !from_return,
                        &mut trial,
                        &mut read_stack,
                    )
                } else {
                    cfi::exec(rule, !from_return, &mut trial, &mut read_stack)
                };
                if let Ok(Some(ret)) = got {
                    if snapshot.may_return_to(ret, stack)
                        && leads_to_root(
                            snapshot,
                            &mut cache.rows,
                            identity,
                            stack,
                            restorer,
                            trial,
                            heuristic::Check::Root,
                        )
                    {
                        (regs, step, guessed_bp) = (trial, got, true);
                        break;
                    }
                }
            }
        }
        approximate |= guessed_bp;
        // Code without CFI, or a full row that needed the unknown RBP and no guess checked
        // out: a heuristic step.
        let guessed = guessed_bp || rule == Rule::NoCfi || guess_bp;
        let step = if guessed && !guessed_bp {
            regs = before;
            let (rows, scan) = (&mut cache.rows, &mut cache.scan);
            let step = heuristic::step(
                snapshot,
                stack,
                scan,
                &mut regs,
                &mut read_stack,
                &mut |caller: &Regs, check| {
                    leads_to_root(snapshot, rows, identity, stack, restorer, *caller, check)
                },
            );
            approximate |= matches!(step, Ok(Some(_)));
            step
        } else {
            step
        };
        n += 1;
        let mut signal_frame = false;
        let ended = match step {
            Ok(Some(ret)) if ret == restorer && restorer != 0 => {
                // The frame below was a signal handler: the kernel's rt_sigframe holds the
                // ucontext right where the return address was popped from. (Not replayed:
                // more reads than a frame keeps.)
                signal_frame = true;
                let uc = regs.sp;
                match Regs::from_gregs(|reg| read_stack(uc + greg_offset(reg) as u64).ok()) {
                    Some(interrupted) => {
                        regs = interrupted;
                        (pc, from_return) = (regs.ip, false);
                        None
                    }
                    None => Some(false),
                }
            }
            // A value that cannot be a return address (0, a stack address, data, a small
            // integer): the rule was wrong for this frame (code without CFI, a frame-pointer
            // guess); the walk ends here rather than making it a frame.
            Ok(Some(ret)) if !snapshot.may_return_to(ret, stack) => Some(false),
            Ok(Some(ret)) => {
                (pc, from_return) = (ret - 1, true);
                None
            }
            Ok(None) => Some(at_root),
            Err(_) => Some(false),
        };
        if signal_frame || used_others || guessed {
            frame.nreads = UNMEMOIZABLE;
        }
        if n <= MEMO_FRAMES {
            memo.fresh[n - 1] = frame;
        }
        if let Some(complete) = ended {
            break Unwound {
                frames: n,
                complete,
                cut: false,
                replayed: 0,
                approximate,
            };
        }
    };
    // Nothing replayed: this unwinding becomes the memo, if it is whole and fits.
    memo.len = 0;
    if !result.cut && result.frames <= MEMO_FRAMES {
        for (to, from) in memo.frames[..result.frames]
            .iter_mut()
            .zip(memo.fresh[..result.frames].iter().rev())
        {
            *to = *from;
        }
        memo.len = result.frames;
        memo.complete = result.complete;
        memo.snapshot = identity;
    }
    result
}

/// Most frames [`leads_to_root`] walks.
const PROBE_FRAMES: usize = 256;

/// Whether unwinding from `caller`, the registers a heuristic step proposes for a frame's
/// caller, reaches a thread's root (CFI that says there is no return address), a signal
/// frame, or (with [`heuristic::Check::Reachable`]) a return address after a call into code
/// without CFI, by at least one frame of CFI, through return addresses that may be code:
/// the check that tells a frame's real return address from the stale ones a stack scan
/// passes. Reads only the thread's stack (`stack`).
fn leads_to_root(
    snapshot: &Snapshot,
    rows: &mut RowCache,
    identity: usize,
    stack: (u64, u64),
    restorer: u64,
    caller: Regs,
    check: heuristic::Check,
) -> bool {
    let mut read = |addr: u64| -> Result<u64, ()> {
        if addr >= stack.0
            && addr.checked_add(8).is_some_and(|end| end <= stack.1)
            && addr.is_multiple_of(8)
        {
            probe::u64_at(addr).ok_or(())
        } else {
            Err(())
        }
    };
    let mut regs = caller;
    for depth in 0..PROBE_FRAMES {
        let pc = regs.ip - 1;
        let rule = match copies::lookup(snapshot, regs.ip) {
            Some((_, rule)) => rule,
            None => rows.rule(&snapshot.cfi, identity, pc),
        };
        let step = match rule {
            Rule::EndOfStack => return true,
            // Code without CFI further out: as far as the chain can be checked, if it is a
            // return address into an object's code after a call.
            Rule::NoCfi => {
                return check == heuristic::Check::Reachable
                    && depth > 0
                    && snapshot.follows_call(regs.ip)
            }
            Rule::Evaluate => {
                match rows.unwind_by_row(&snapshot.cfi, pc, false, &mut regs, &mut read) {
                    // The row says there is no return address: the root.
                    Ok(None) => return true,
                    step => step,
                }
            }
            rule => cfi::exec(rule, false, &mut regs, &mut read),
        };
        match step {
            Ok(Some(ret)) if ret == restorer && restorer != 0 => return depth > 0,
            Ok(Some(ret)) if snapshot.may_return_to(ret, stack) => {}
            _ => return false,
        }
    }
    false
}

/// Whether every stack word that unwinding `frames` read is still readable and unchanged.
#[inline]
fn still_holds(frames: &[MemoFrame], readable: &impl Fn(u64) -> bool) -> bool {
    frames.iter().all(|f| {
        f.nreads != UNMEMOIZABLE
            && f.reads[..f.nreads as usize]
                .iter()
                .all(|&(addr, value)| readable(addr) && probe::u64_at(addr) == Some(value))
    })
}

/// Completes `out`, whose frame `n` (just written) is memoized frame `at`, with the
/// memoized frames outwards of it, and makes the memo this unwinding.
fn replay(memo: &mut Memo, at: usize, n: usize, out: &mut [u64], sps: &mut [u64]) -> Unwound {
    for ((slot, sp), frame) in out[n + 1..]
        .iter_mut()
        .zip(sps[n + 1..].iter_mut())
        .zip(memo.frames[..at].iter().rev())
    {
        *slot = frame.pc;
        *sp = frame.sp;
    }
    let unwound = Unwound {
        frames: n + 1 + at,
        complete: memo.complete,
        cut: false,
        replayed: at,
        approximate: false,
    };
    // The memo keeps frames 0..=at (outermost … this one); the fresh inner frames follow.
    if at + 1 + n <= MEMO_FRAMES {
        let (outer, fresh) = (&mut memo.frames, &memo.fresh);
        for (to, from) in outer[at + 1..at + 1 + n]
            .iter_mut()
            .zip(fresh[..n].iter().rev())
        {
            *to = *from;
        }
        memo.len = at + 1 + n;
    } else {
        memo.len = 0;
    }
    unwound
}

/// Offset of general register `reg` inside a `ucontext_t`.
fn greg_offset(reg: libc::c_int) -> usize {
    std::mem::offset_of!(libc::ucontext_t, uc_mcontext) + reg as usize * 8
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hint::black_box;

    /// The registers of the caller at the point of the call: its frame stays live while
    /// `f` runs.
    #[inline(never)]
    fn at_depth(depth: usize, f: &mut dyn FnMut(Regs)) -> usize {
        if depth > 0 {
            return black_box(at_depth(depth - 1, f)) + 1;
        }
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads registers only.
        unsafe {
            std::arch::asm!("lea {0}, [rip]", "mov {1}, rsp", "mov {2}, rbp",
                out(reg) ip, out(reg) sp, out(reg) bp);
        }
        f(Regs::new(ip, sp, bp));
        0
    }

    #[test]
    fn replaying_the_memo_gives_the_frames_a_full_unwinding_gives() {
        crate::capture::unwind::modules::rescan();
        let snapshot = crate::capture::unwind::modules::current().expect("modules");
        let bounds = pyigprof_hooks::threads::current_stack_bounds().expect("stack bounds");
        let mut cache = UnwindCache::new();
        // SAFETY: all-zero is an empty memo; boxed, it is too large for the stack.
        let mut memo: Box<Memo> = unsafe { Box::new(std::mem::zeroed()) };
        let mut replayed = 0;
        for depth in [5, 5, 3, 9, 9, 2, 6, 0, 6] {
            at_depth(depth, &mut |regs| {
                let mut fresh: Box<Memo> = unsafe { Box::new(std::mem::zeroed()) };
                let (mut full, mut fast) = ([0u64; 128], [0u64; 128]);
                let (mut full_sps, mut fast_sps) = ([0u64; 128], [0u64; 128]);
                let a = unwind(
                    snapshot,
                    &mut cache,
                    &mut fresh,
                    regs,
                    bounds,
                    0,
                    Frames {
                        pcs: &mut full,
                        sps: &mut full_sps,
                    },
                );
                let b = unwind(
                    snapshot,
                    &mut cache,
                    &mut memo,
                    regs,
                    bounds,
                    0,
                    Frames {
                        pcs: &mut fast,
                        sps: &mut fast_sps,
                    },
                );
                assert!(a.frames > depth + 2, "{a:?}");
                assert_eq!(a.replayed, 0);
                assert_eq!((a.frames, a.complete, a.cut), (b.frames, b.complete, b.cut));
                assert_eq!(full[..a.frames], fast[..b.frames], "depth {depth}");
                assert_eq!(full_sps[..a.frames], fast_sps[..b.frames], "depth {depth}");
                // Stack pointers grow outwards: each frame's locals lie below its caller's.
                assert!(
                    full_sps[..a.frames].windows(2).all(|w| w[0] <= w[1]),
                    "{:?}",
                    &full_sps[..a.frames]
                );
                replayed += b.replayed;
            });
        }
        assert!(replayed > 0, "the memo was never replayed");
    }
}
