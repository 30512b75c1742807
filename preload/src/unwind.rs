//! Native unwinding of the interrupted thread, from the register state the kernel saved
//! (`ucontext_t`), with framehop: DWARF CFI where an object has it, frame pointers
//! otherwise (shared/design/unwinding.md).

use crate::modules::Snapshot;
use crate::threads::UnwindCache;
use framehop::x86_64::UnwindRegsX86_64;
use framehop::{FrameAddress, Unwinder};

/// The interrupted registers framehop starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
}

impl Regs {
    /// Reads RIP, RSP and RBP from a `ucontext_t`.
    ///
    /// # Safety
    /// `uc` must point to a readable `ucontext_t`.
    #[inline(always)]
    pub unsafe fn from_ucontext(uc: *const libc::ucontext_t) -> Regs {
        // SAFETY: per the contract.
        let gregs = unsafe { &(*uc).uc_mcontext.gregs };
        Regs {
            ip: gregs[libc::REG_RIP as usize] as u64,
            sp: gregs[libc::REG_RSP as usize] as u64,
            bp: gregs[libc::REG_RBP as usize] as u64,
        }
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
}

/// Unwinds from `regs` into `out` (innermost first): the interrupted instruction, then each
/// caller's return address minus one. Stack reads are limited to aligned words inside
/// `stack` (`[low, high)`). `restorer` is the signal trampoline's address (`__restore_rt`):
/// a frame returning into it was a signal handler, and unwinding continues from the
/// `ucontext_t` the kernel saved on the stack. Async-signal-safe.
pub fn unwind(
    snapshot: &Snapshot,
    cache: &mut UnwindCache,
    regs: Regs,
    stack: (u64, u64),
    restorer: u64,
    out: &mut [u64],
) -> Unwound {
    let (low, high) = (stack.0.max(regs.sp.saturating_sub(256)), stack.1);
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        if addr >= low
            && addr.checked_add(8).is_some_and(|end| end <= high)
            && addr.is_multiple_of(8)
        {
            // SAFETY: inside the thread's stack, below its top and above the interrupted sp.
            Ok(unsafe { std::ptr::read_volatile(addr as *const u64) })
        } else {
            Err(())
        }
    };
    let mut uregs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
    let mut address = FrameAddress::from_instruction_pointer(regs.ip);
    let mut n = 0;
    loop {
        if n == out.len() {
            return Unwound {
                frames: n,
                complete: false,
                cut: true,
            };
        }
        out[n] = address.address_for_lookup();
        n += 1;
        match snapshot
            .unwinder
            .unwind_frame(address, &mut uregs, cache, &mut read_stack)
        {
            Ok(Some(ret)) if ret == restorer && restorer != 0 => {
                // The frame below was a signal handler: the kernel's rt_sigframe holds the
                // ucontext right where the return address was popped from.
                let uc = uregs.sp();
                let field = |offset: usize| read_stack(uc + offset as u64);
                let (Ok(ip), Ok(sp), Ok(bp)) = (
                    field(greg_offset(libc::REG_RIP)),
                    field(greg_offset(libc::REG_RSP)),
                    field(greg_offset(libc::REG_RBP)),
                ) else {
                    return Unwound {
                        frames: n,
                        complete: false,
                        cut: false,
                    };
                };
                uregs = UnwindRegsX86_64::new(ip, sp, bp);
                address = FrameAddress::from_instruction_pointer(ip);
            }
            Ok(Some(ret)) => match FrameAddress::from_return_address(ret) {
                Some(next) => address = next,
                None => {
                    return Unwound {
                        frames: n,
                        complete: true,
                        cut: false,
                    }
                }
            },
            Ok(None) => {
                return Unwound {
                    frames: n,
                    complete: true,
                    cut: false,
                }
            }
            Err(_) => {
                return Unwound {
                    frames: n,
                    complete: false,
                    cut: false,
                }
            }
        }
    }
}

/// Offset of general register `reg` inside a `ucontext_t`.
fn greg_offset(reg: libc::c_int) -> usize {
    std::mem::offset_of!(libc::ucontext_t, uc_mcontext) + reg as usize * 8
}
