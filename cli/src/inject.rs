//! Calling functions inside another process with `ptrace(2)`: how `pyigprof attach` loads
//! `libpyigprof.so` into a running program (as gdb's `call`, which `memray attach` and
//! `pyrasite` drive; no debugger needed). x86-64 Linux only.
//!
//! Only the thread given (the main thread) is stopped; the others run on. A call sets the
//! stopped thread's registers as the System V ABI wants them for `function(args…)` with a
//! return address of 0, lets it run, and takes the result from `rax` when the return
//! faults at address 0 (`SIGSEGV`, which is not delivered). The thread's registers are put
//! back afterwards, `orig_rax` included, so that a system call it was stopped in is
//! restarted by the kernel as after any stop (`-ERESTART*` in `rax`). A signal that arrives
//! for the thread meanwhile is delivered at once, with its own `siginfo` (its handler runs
//! on top of the call, as for any signal): keeping it for later would have the kernel make
//! up a `siginfo` for it, and pyigprof's own `SIGPROF` handler tells its signals apart by
//! theirs (the roll call of `sources::adopt` reaches the main thread while it calls).
//!
//! During the calls the thread's signal mask is its own less `SIGSEGV` and `SIGBUS`
//! (`PTRACE_SETSIGMASK`; its own mask is put back with its registers). The return to 0
//! raises a `SIGSEGV` as a fault, and a fault the kernel raises while its signal is blocked
//! resets that signal's action to the default *for the whole process* before the tracer
//! sees it: a thread stopped in `clone3` inside `pthread_create` (which blocks every
//! signal around it: what a server that starts a thread per request does all the time)
//! lost pyigprof's `SIGSEGV` handler that way, and the next fault of a checked read, which
//! that handler recovers, ended the program (issue 52).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// A thread of another process, stopped under `ptrace` ([`Tracee::seize`]); let go by
/// [`Tracee::release`] (or when dropped).
pub struct Tracee {
    tid: libc::pid_t,
    /// Its registers when it was stopped, put back by [`Tracee::release`].
    saved: libc::user_regs_struct,
    /// Its floating-point and vector registers then (the `XSAVE` area: x87, SSE, AVX,
    /// AVX-512 — `NT_X86_XSTATE`), put back too: code stopped outside a system call may
    /// hold live values in them, which the calls made meanwhile overwrite.
    saved_xstate: Vec<u8>,
    /// Its signal mask when it was stopped (signals 1–64, bit n − 1), put back by
    /// [`Tracee::release`].
    saved_mask: u64,
    /// `/proc/TID/mem`, for writing the arguments.
    mem: File,
    released: bool,
}

/// The regset of the `XSAVE` area (`<elf.h>`'s `NT_X86_XSTATE`).
const NT_X86_XSTATE: usize = 0x202;

/// `ptrace` with the kernel's `long` result; `Err` carries errno.
fn ptrace(request: libc::c_uint, tid: libc::pid_t, addr: usize, data: usize) -> Result<i64, i32> {
    // SAFETY: requests whose addr/data are plain values or point to live structures.
    let rc = unsafe {
        libc::ptrace(
            request,
            tid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    };
    if rc == -1 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if errno != 0 {
            return Err(errno);
        }
    }
    Ok(rc)
}

fn errno_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

/// The way a thread stopped, from `waitpid`.
enum Stop {
    /// A `PTRACE_INTERRUPT` (or group) stop: the `PTRACE_EVENT_STOP` event.
    Interrupted,
    /// A signal about to be delivered.
    Signal(libc::c_int),
    /// The process ended.
    Ended(String),
}

fn wait_stop(tid: libc::pid_t, deadline: Instant) -> Result<Stop, String> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer.
        let got = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if got < 0 {
            return Err(format!("waitpid: {}", std::io::Error::last_os_error()));
        }
        if got == 0 {
            if Instant::now() > deadline {
                return Err("the process did not stop or return in time".into());
            }
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        if libc::WIFEXITED(status) {
            return Ok(Stop::Ended(format!(
                "exited with status {}",
                libc::WEXITSTATUS(status)
            )));
        }
        if libc::WIFSIGNALED(status) {
            return Ok(Stop::Ended(format!(
                "was ended by signal {}",
                libc::WTERMSIG(status)
            )));
        }
        if libc::WIFSTOPPED(status) {
            let event = status >> 16;
            if event == libc::PTRACE_EVENT_STOP {
                return Ok(Stop::Interrupted);
            }
            return Ok(Stop::Signal(libc::WSTOPSIG(status)));
        }
    }
}

/// The System V return from a function called with a return address of 0: the fault at 0.
fn returned(regs: &libc::user_regs_struct) -> bool {
    regs.rip == 0
}

impl Tracee {
    /// Attaches to thread `tid` (`PTRACE_SEIZE`) and stops it (`PTRACE_INTERRUPT`).
    ///
    /// # Errors
    /// errno of a refused `PTRACE_SEIZE` (`EPERM`: another tracer, Yama, another user's
    /// process; `ESRCH`: no such process), or a message.
    pub fn seize(tid: libc::pid_t) -> Result<Tracee, Result<i32, String>> {
        ptrace(libc::PTRACE_SEIZE, tid, 0, 0).map_err(Ok)?;
        let mem = File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/{tid}/mem"))
            .map_err(|e| Err(format!("/proc/{tid}/mem: {e}")))?;
        let mut tracee = Tracee {
            tid,
            // SAFETY: all-zero is a valid register set (replaced before use).
            saved: unsafe { std::mem::zeroed() },
            saved_xstate: Vec::new(),
            saved_mask: 0,
            mem,
            released: false,
        };
        tracee.stop().map_err(Err)?;
        Ok(tracee)
    }

    /// Stops the thread and saves its registers.
    fn stop(&mut self) -> Result<(), String> {
        ptrace(libc::PTRACE_INTERRUPT, self.tid, 0, 0)
            .map_err(|e| format!("PTRACE_INTERRUPT: {}", errno_text(e)))?;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match wait_stop(self.tid, deadline)? {
                Stop::Interrupted => break,
                Stop::Signal(signal) => {
                    // Delivered now; the interrupt's stop follows.
                    ptrace(libc::PTRACE_CONT, self.tid, 0, signal as usize)
                        .map_err(|e| format!("PTRACE_CONT: {}", errno_text(e)))?;
                }
                Stop::Ended(how) => return Err(format!("the process {how}")),
            }
        }
        self.saved = self.regs()?;
        self.saved_xstate = self.xstate()?;
        self.saved_mask = self.mask()?;
        Ok(())
    }

    /// The thread's blocked signals (`PTRACE_GETSIGMASK`: the kernel's 8-byte set).
    fn mask(&self) -> Result<u64, String> {
        let mut mask = 0u64;
        ptrace(
            libc::PTRACE_GETSIGMASK,
            self.tid,
            8,
            &mut mask as *mut u64 as usize,
        )
        .map_err(|e| format!("PTRACE_GETSIGMASK: {}", errno_text(e)))?;
        Ok(mask)
    }

    fn set_mask(&self, mask: u64) -> Result<(), String> {
        ptrace(
            libc::PTRACE_SETSIGMASK,
            self.tid,
            8,
            &mask as *const u64 as usize,
        )
        .map(|_| ())
        .map_err(|e| format!("PTRACE_SETSIGMASK: {}", errno_text(e)))
    }

    /// The thread's `XSAVE` area (`PTRACE_GETREGSET`, `NT_X86_XSTATE`), as long as the
    /// kernel says it is.
    fn xstate(&self) -> Result<Vec<u8>, String> {
        let mut buf = vec![0u8; 16 << 10];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        ptrace(
            libc::PTRACE_GETREGSET,
            self.tid,
            NT_X86_XSTATE,
            &mut iov as *mut libc::iovec as usize,
        )
        .map_err(|e| format!("PTRACE_GETREGSET: {}", errno_text(e)))?;
        buf.truncate(iov.iov_len);
        Ok(buf)
    }

    fn set_xstate(&self, state: &[u8]) -> Result<(), String> {
        let mut iov = libc::iovec {
            iov_base: state.as_ptr() as *mut libc::c_void,
            iov_len: state.len(),
        };
        ptrace(
            libc::PTRACE_SETREGSET,
            self.tid,
            NT_X86_XSTATE,
            &mut iov as *mut libc::iovec as usize,
        )
        .map(|_| ())
        .map_err(|e| format!("PTRACE_SETREGSET: {}", errno_text(e)))
    }

    /// Lets the thread run for `pause`, then stops it again (to leave a point where calling
    /// into the C library is not safe: see [`Tracee::at_safe_point`]).
    pub fn step_away(&mut self, pause: Duration) -> Result<(), String> {
        // As it was stopped, whatever calls were made in it since.
        self.put_back()?;
        ptrace(libc::PTRACE_CONT, self.tid, 0, 0)
            .map_err(|e| format!("PTRACE_CONT: {}", errno_text(e)))?;
        std::thread::sleep(pause);
        self.stop()
    }

    fn regs(&self) -> Result<libc::user_regs_struct, String> {
        // SAFETY: all-zero is a valid register set, filled by PTRACE_GETREGS.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        ptrace(
            libc::PTRACE_GETREGS,
            self.tid,
            0,
            &mut regs as *mut libc::user_regs_struct as usize,
        )
        .map_err(|e| format!("PTRACE_GETREGS: {}", errno_text(e)))?;
        Ok(regs)
    }

    fn set_regs(&self, regs: &libc::user_regs_struct) -> Result<(), String> {
        ptrace(
            libc::PTRACE_SETREGS,
            self.tid,
            0,
            regs as *const libc::user_regs_struct as usize,
        )
        .map(|_| ())
        .map_err(|e| format!("PTRACE_SETREGS: {}", errno_text(e)))
    }

    /// Whether the thread was stopped where calling `dlopen` cannot deadlock it: not
    /// inside the C library or the dynamic loader (whose `malloc` or loader lock it might
    /// hold), unless blocked in a system call that holds neither (not an allocator's
    /// `mmap`, `munmap`, `mremap`, `mprotect` or `brk`). `unsafe_code` gives the address
    /// ranges of the C library and the loader.
    pub fn at_safe_point(&self, unsafe_code: &[(u64, u64)]) -> bool {
        let regs = &self.saved;
        let in_syscall = (regs.orig_rax as i64) >= 0;
        if in_syscall {
            let allocating = [
                libc::SYS_mmap,
                libc::SYS_munmap,
                libc::SYS_mremap,
                libc::SYS_mprotect,
                libc::SYS_brk,
            ];
            return !allocating.contains(&(regs.orig_rax as i64));
        }
        !unsafe_code
            .iter()
            .any(|&(lo, hi)| lo <= regs.rip && regs.rip < hi)
    }

    /// Copies `bytes` into the thread's stack, below the red zone and below what earlier
    /// calls of this method copied (`*below`, starting at the saved stack pointer), and
    /// returns their address.
    pub fn push_bytes(&self, below: &mut u64, bytes: &[u8]) -> Result<u64, String> {
        let at = (below.saturating_sub(128 + bytes.len() as u64)) & !15;
        self.mem
            .write_all_at(bytes, at)
            .map_err(|e| format!("writing the process's memory: {e}"))?;
        *below = at;
        Ok(at)
    }

    /// The saved stack pointer: where [`Tracee::push_bytes`] starts.
    pub fn stack_pointer(&self) -> u64 {
        self.saved.rsp
    }

    /// Calls `function(args…)` (at most six integer arguments) in the thread, its stack
    /// starting below `below`, and returns `rax`. Waits at most `timeout`.
    pub fn call(
        &mut self,
        function: u64,
        args: &[u64],
        below: u64,
        timeout: Duration,
    ) -> Result<u64, String> {
        let mut regs = self.saved;
        // The return address (0) at an address ≡ 8 (mod 16), as after a `call`.
        let sp = ((below - 256) & !15) - 8;
        self.mem
            .write_all_at(&0u64.to_ne_bytes(), sp)
            .map_err(|e| format!("writing the process's memory: {e}"))?;
        regs.rsp = sp;
        regs.rip = function;
        regs.rax = 0;
        // Not in a system call: the kernel must not restart one when the thread resumes.
        regs.orig_rax = u64::MAX;
        let slots = [
            &mut regs.rdi,
            &mut regs.rsi,
            &mut regs.rdx,
            &mut regs.rcx,
            &mut regs.r8,
            &mut regs.r9,
        ];
        for (slot, &arg) in slots.into_iter().zip(args) {
            *slot = arg;
        }
        // Faults must not meet a blocked SIGSEGV/SIGBUS (see the module documentation).
        let faults = (1u64 << (libc::SIGSEGV - 1)) | (1u64 << (libc::SIGBUS - 1));
        self.set_mask(self.saved_mask & !faults)?;
        self.set_regs(&regs)?;
        ptrace(libc::PTRACE_CONT, self.tid, 0, 0)
            .map_err(|e| format!("PTRACE_CONT: {}", errno_text(e)))?;
        let deadline = Instant::now() + timeout;
        loop {
            match wait_stop(self.tid, deadline)? {
                Stop::Signal(libc::SIGSEGV) => {
                    let now = self.regs()?;
                    if returned(&now) {
                        return Ok(now.rax);
                    }
                    return Err(format!(
                        "the call crashed at 0x{:x} (SIGSEGV); the process was left as it was",
                        now.rip
                    ));
                }
                Stop::Signal(signal) => {
                    // Delivered now, on top of the call, with its own siginfo.
                    ptrace(libc::PTRACE_CONT, self.tid, 0, signal as usize)
                        .map_err(|e| format!("PTRACE_CONT: {}", errno_text(e)))?;
                }
                Stop::Interrupted => {
                    ptrace(libc::PTRACE_CONT, self.tid, 0, 0)
                        .map_err(|e| format!("PTRACE_CONT: {}", errno_text(e)))?;
                }
                Stop::Ended(how) => return Err(format!("the process {how} during the call")),
            }
        }
    }

    /// Reads 4 bytes of the process at `at`.
    pub fn read_u32(&self, at: u64) -> Result<u32, String> {
        let mut bytes = [0u8; 4];
        self.mem
            .read_exact_at(&mut bytes, at)
            .map_err(|e| format!("reading the process's memory: {e}"))?;
        Ok(u32::from_ne_bytes(bytes))
    }

    /// Writes 4 bytes of the process at `at`.
    pub fn write_u32(&self, at: u64, value: u32) -> Result<(), String> {
        self.mem
            .write_all_at(&value.to_ne_bytes(), at)
            .map_err(|e| format!("writing the process's memory: {e}"))
    }

    /// Reads a NUL-terminated string of the process (at most 4 KiB).
    pub fn read_string(&self, at: u64) -> String {
        let mut buf = vec![0u8; 4096];
        let n = self.mem.read_at(&mut buf, at).unwrap_or(0);
        buf.truncate(n);
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    }

    /// Puts the thread's registers back and lets it go (`PTRACE_DETACH`); signals sent to
    /// it since its last stop are delivered then, as pending signals are.
    pub fn release(mut self) -> Result<(), String> {
        self.released = true;
        self.let_go()
    }

    /// Puts back the registers, extended state and signal mask saved at its last stop.
    fn put_back(&self) -> Result<(), String> {
        self.set_regs(&self.saved)?;
        self.set_xstate(&self.saved_xstate)?;
        self.set_mask(self.saved_mask)
    }

    fn let_go(&mut self) -> Result<(), String> {
        self.put_back()?;
        ptrace(libc::PTRACE_DETACH, self.tid, 0, 0)
            .map(|_| ())
            .map_err(|e| format!("PTRACE_DETACH: {}", errno_text(e)))
    }
}

impl Drop for Tracee {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.let_go();
        }
    }
}
