//! Reads of the program's memory that cannot crash it.
//!
//! Every read the sampler makes of memory it does not own — the interrupted thread's stack,
//! the interpreter's frames and code objects, another thread's stack and frames when the
//! wall-clock source samples a blocked thread — goes through one of the loads below. Each
//! is a single instruction at a known address (a *fault site*, as the Linux kernel's
//! exception table has them for `copy_from_user`): when it faults (`SIGSEGV`: the page is
//! gone, a thread ended and its stack was unmapped, a block was freed and its arena
//! returned; `SIGBUS`: a file mapping shrank), the fault handler ([`fix_up`], called first
//! by the crash handler of [`crate::output::lifecycle`]) moves the interrupted instruction
//! pointer to the recovery code, which returns "not read". The caller then drops what it
//! was reading, as for any other failed check, and the fault is counted
//! (`#pyigprof stats faulted_reads`).
//!
//! A fault anywhere else is the program's own and goes to its handler or its default
//! action, as without pyigprof.

use std::sync::atomic::{AtomicU64, Ordering};

/// Reads that faulted and were recovered, since the process started.
pub static FAULTED_READS: AtomicU64 = AtomicU64::new(0);

/// What a load returns in RAX:RDX (System V: a two-word struct in registers).
#[repr(C)]
struct Loaded {
    value: u64,
    /// 1 when the load completed, 0 when it faulted.
    ok: u64,
}

std::arch::global_asm!(
    ".pushsection .text.pyigprof_probe,\"ax\",@progbits",
    ".p2align 4",
    // u64 load(addr in rdi)
    ".hidden pyigprof_load_u64",
    ".globl pyigprof_load_u64",
    ".type pyigprof_load_u64,@function",
    "pyigprof_load_u64:",
    ".hidden pyigprof_site_u64",
    ".globl pyigprof_site_u64",
    "pyigprof_site_u64:",
    "    mov rax, qword ptr [rdi]",
    "    mov edx, 1",
    "    ret",
    ".size pyigprof_load_u64, . - pyigprof_load_u64",
    // u32 load(addr in rdi), zero-extended
    ".hidden pyigprof_load_u32",
    ".globl pyigprof_load_u32",
    ".type pyigprof_load_u32,@function",
    "pyigprof_load_u32:",
    ".hidden pyigprof_site_u32",
    ".globl pyigprof_site_u32",
    "pyigprof_site_u32:",
    "    mov eax, dword ptr [rdi]",
    "    mov edx, 1",
    "    ret",
    ".size pyigprof_load_u32, . - pyigprof_load_u32",
    // u8 load(addr in rdi), zero-extended
    ".hidden pyigprof_load_u8",
    ".globl pyigprof_load_u8",
    ".type pyigprof_load_u8,@function",
    "pyigprof_load_u8:",
    ".hidden pyigprof_site_u8",
    ".globl pyigprof_site_u8",
    "pyigprof_site_u8:",
    "    movzx eax, byte ptr [rdi]",
    "    mov edx, 1",
    "    ret",
    ".size pyigprof_load_u8, . - pyigprof_load_u8",
    // copy(dst in rdi, src in rsi, len in rdx): value unused, ok in rdx
    ".hidden pyigprof_copy",
    ".globl pyigprof_copy",
    ".type pyigprof_copy,@function",
    "pyigprof_copy:",
    "    mov rcx, rdx",
    ".hidden pyigprof_site_copy",
    ".globl pyigprof_site_copy",
    "pyigprof_site_copy:",
    "    rep movsb",
    "    xor eax, eax",
    "    mov edx, 1",
    "    ret",
    ".size pyigprof_copy, . - pyigprof_copy",
    // Where a faulting site resumes: "not read".
    ".hidden pyigprof_recover",
    ".globl pyigprof_recover",
    "pyigprof_recover:",
    "    xor eax, eax",
    "    xor edx, edx",
    "    ret",
    ".popsection",
);

extern "C" {
    fn pyigprof_load_u64(addr: u64) -> Loaded;
    fn pyigprof_load_u32(addr: u64) -> Loaded;
    fn pyigprof_load_u8(addr: u64) -> Loaded;
    fn pyigprof_copy(dst: *mut u8, src: u64, len: usize) -> Loaded;
    static pyigprof_site_u64: u8;
    static pyigprof_site_u32: u8;
    static pyigprof_site_u8: u8;
    static pyigprof_site_copy: u8;
    static pyigprof_recover: u8;
}

/// Reads the `u64` at `addr`; `None` when the read faulted. The caller checks alignment
/// and plausibility first (a fault costs a signal).
#[inline(always)]
pub fn u64_at(addr: u64) -> Option<u64> {
    // SAFETY: a fault in the load is recovered by `fix_up`.
    let r = unsafe { pyigprof_load_u64(addr) };
    (r.ok != 0).then_some(r.value)
}

/// Reads the `u32` at `addr`; `None` when the read faulted.
#[inline(always)]
pub fn u32_at(addr: u64) -> Option<u32> {
    // SAFETY: as u64_at.
    let r = unsafe { pyigprof_load_u32(addr) };
    (r.ok != 0).then_some(r.value as u32)
}

/// Reads the byte at `addr`; `None` when the read faulted.
#[inline(always)]
pub fn u8_at(addr: u64) -> Option<u8> {
    // SAFETY: as u64_at.
    let r = unsafe { pyigprof_load_u8(addr) };
    (r.ok != 0).then_some(r.value as u8)
}

/// Copies `out.len()` bytes from `addr` into `out`; `false` when the read faulted (`out`
/// then holds a partial copy).
#[inline(always)]
pub fn copy(addr: u64, out: &mut [u8]) -> bool {
    // SAFETY: `out` is writable for its length; a fault in reading `addr` is recovered.
    unsafe { pyigprof_copy(out.as_mut_ptr(), addr, out.len()) }.ok != 0
}

/// The fault handler's part: if the fault that `info` and `uc` describe (a `SIGSEGV` or
/// `SIGBUS` raised by the kernel for an access, not sent) happened at one of the fault
/// sites above, resumes the thread at the recovery code and returns `true`.
/// Async-signal-safe.
///
/// # Safety
/// `info` and `uc` must be what the kernel passed to the handler of the signal.
pub unsafe fn fix_up(info: *const libc::siginfo_t, uc: *mut libc::c_void) -> bool {
    let uc = uc.cast::<libc::ucontext_t>();
    // SAFETY: the kernel's siginfo; si_code > 0 means raised by the kernel (SEGV_MAPERR ...).
    if uc.is_null() || info.is_null() || unsafe { (*info).si_code } <= 0 {
        return false;
    }
    // SAFETY: addresses of symbols defined in global_asm above; a valid ucontext.
    unsafe {
        let sites = [
            &raw const pyigprof_site_u64 as u64,
            &raw const pyigprof_site_u32 as u64,
            &raw const pyigprof_site_u8 as u64,
            &raw const pyigprof_site_copy as u64,
        ];
        let ip = &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize];
        if !sites.contains(&(*ip as u64)) {
            return false;
        }
        *ip = &raw const pyigprof_recover as i64;
    }
    FAULTED_READS.fetch_add(1, Ordering::Relaxed);
    true
}

/// A `SIGSEGV`/`SIGBUS` handler for a process of pyigprof's own that shares nothing the
/// program would see (the helper process, a child writing a profile): a fault of a checked
/// read is recovered; any other ends that process at once (`exit_group(1)`: not the profiled
/// one, and without running the program's fault handler in a copy of it, which would print
/// into the program's stderr). Async-signal-safe: direct system calls only.
///
/// # Safety
/// Only the kernel calls it, as an `SA_SIGINFO` handler: `info` and `uc` are what it
/// passed.
pub unsafe extern "C" fn recover_or_exit(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    uc: *mut libc::c_void,
) {
    // SAFETY: what the kernel passed to the handler.
    if !unsafe { fix_up(info, uc) } {
        // SAFETY: ends the calling process (its own thread group) only.
        unsafe { libc::syscall(libc::SYS_exit_group, 1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn on_fault(
        _signal: libc::c_int,
        info: *mut libc::siginfo_t,
        uc: *mut libc::c_void,
    ) {
        // SAFETY: the kernel's siginfo and ucontext.
        if !unsafe { fix_up(info, uc) } {
            // Not ours: die as the default action would.
            // SAFETY: plain calls.
            unsafe {
                libc::signal(libc::SIGSEGV, libc::SIG_DFL);
                libc::signal(libc::SIGBUS, libc::SIG_DFL);
            }
        }
    }

    #[test]
    fn reads_of_unmapped_or_truncated_memory_fail_instead_of_crashing() {
        // SAFETY: installing a handler and mapping memory of our own.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fault as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
            libc::sigaction(libc::SIGSEGV, &action, std::ptr::null_mut());
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
            let page = 4096;
            let map = libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(map, libc::MAP_FAILED);
            let base = map as u64;
            *(map as *mut u64) = 0x1122_3344_5566_7788;
            assert_eq!(u64_at(base), Some(0x1122_3344_5566_7788));
            assert_eq!(u32_at(base), Some(0x5566_7788));
            assert_eq!(u8_at(base + 7), Some(0x11));
            let mut out = [0u8; 8];
            assert!(copy(base, &mut out));
            assert_eq!(u64::from_le_bytes(out), 0x1122_3344_5566_7788);
            // The second page goes away: every read of it fails, one straddling it too.
            libc::munmap((base + page as u64) as *mut libc::c_void, page);
            let before = FAULTED_READS.load(Ordering::Relaxed);
            assert_eq!(u64_at(base + page as u64), None);
            assert_eq!(u32_at(base + page as u64 + 12), None);
            assert_eq!(u8_at(base + page as u64 + 1), None);
            assert!(!copy(base + page as u64 - 4, &mut out));
            assert_eq!(u64_at(8), None);
            assert_eq!(FAULTED_READS.load(Ordering::Relaxed) - before, 5);
            // A file mapping beyond the file's end: SIGBUS.
            let file = libc::tmpfile();
            let fd = libc::fileno(file);
            libc::ftruncate(fd, 16);
            let fmap = libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            );
            assert_ne!(fmap, libc::MAP_FAILED);
            assert_eq!(u64_at(fmap as u64), Some(0));
            assert_eq!(u64_at(fmap as u64 + page as u64), None);
            libc::munmap(fmap, 2 * page);
            libc::fclose(file);
            libc::munmap(map, page);
            libc::signal(libc::SIGSEGV, libc::SIG_DFL);
            libc::signal(libc::SIGBUS, libc::SIG_DFL);
        }
    }
}
