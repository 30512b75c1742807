//! Why a thread blocked in a system call waits, for wall mode's samples of blocked threads:
//! a marker frame ([`Marker::WaitingGil`] … [`Marker::WaitingOther`]) put below the call
//! that waits, so that reports group blocked time by its reason (`--top` lists
//! `<waiting: GIL>`, `<waiting: I/O>`, … by their self time; `--tree` shows each under the
//! Python line that waits).
//!
//! The reason comes from the call's number and arguments as
//! `/proc/<pid>/task/<tid>/syscall` gives them (x86-64 numbers, `asm/unistd_64.h`): a
//! `futex` waits for the GIL when its word lies in the GIL's condition variables or
//! mutexes ([`GilWords`]), for a lock otherwise; `select`/`pselect6` without descriptors
//! is how `time.sleep` slept before CPython 3.11 (`Modules/timemodule.c`, `pysleep`).
//! Async-signal-safe: comparisons only.

use crate::capture::frames::Marker;

/// The address ranges `[start, end)` of the words a thread waiting for the GIL blocks on,
/// found once at start-up by `capture::python::discover`:
///
/// - 3.7+: inside `_PyRuntime` (its `.dynsym` size): 3.7–3.11 keep the GIL in
///   `_PyRuntime.ceval.gil`, 3.12+ in each interpreter's `_gil`, the main interpreter's
///   being `_PyRuntime._main_interpreter._gil` (`pycore_runtime.h`, `pycore_interp.h`).
///   No other futex word of the runtime is waited on for long: `threading` locks are
///   allocated (≤ 3.12: a `sem_t` each) or park the thread on a semaphore of its own
///   (3.13+: `PyMutex`, `Python/parking_lot.c`). A subinterpreter with a GIL of its own
///   (3.12+) keeps it outside: its waits are counted as a lock's.
/// - 3.6: the statics `gil_cond`, `gil_mutex`, `switch_cond`, `switch_mutex` of
///   `Python/ceval_gil.h`, by symbol (absent from stripped builds).
/// - 2.7: none (its GIL is an allocated lock): GIL waits count as a lock's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GilWords {
    ranges: [(u64, u64); 4],
    len: usize,
}

impl GilWords {
    /// Adds the range of `size` bytes at `start`; ignored when all four are taken or the
    /// range is empty.
    pub fn add(&mut self, start: u64, size: u64) {
        if self.len < self.ranges.len() && size > 0 {
            self.ranges[self.len] = (start, start.saturating_add(size));
            self.len += 1;
        }
    }

    /// Whether any range is known.
    pub fn known(&self) -> bool {
        self.len > 0
    }

    /// Whether `word` (a futex's address) is one of the GIL's.
    pub fn contains(&self, word: u64) -> bool {
        self.ranges[..self.len]
            .iter()
            .any(|&(lo, hi)| word >= lo && word < hi)
    }
}

/// A system call as `/proc/<pid>/task/<tid>/syscall` shows a thread blocked in it: its
/// number and its six arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    /// The system call's number (x86-64).
    pub nr: u64,
    /// Its arguments, in order.
    pub args: [u64; 6],
}

/// Why a thread blocked in `call` waits; `gil` says which futex words are the GIL's.
pub fn reason(call: Call, gil: &GilWords) -> Marker {
    let nr = call.nr as libc::c_long;
    if nr == libc::SYS_futex && gil.contains(call.args[0]) {
        return Marker::WaitingGil;
    }
    // `select(0, NULL, NULL, NULL, &timeout)`: a sleep.
    if (nr == libc::SYS_select || nr == libc::SYS_pselect6) && call.args[0] == 0 {
        return Marker::WaitingSleep;
    }
    match nr {
        libc::SYS_futex
        | libc::SYS_futex_waitv
        | libc::SYS_flock
        | libc::SYS_semop
        | libc::SYS_semtimedop => Marker::WaitingLock,
        libc::SYS_read
        | libc::SYS_write
        | libc::SYS_pread64
        | libc::SYS_pwrite64
        | libc::SYS_readv
        | libc::SYS_writev
        | libc::SYS_preadv
        | libc::SYS_pwritev
        | libc::SYS_preadv2
        | libc::SYS_pwritev2
        | libc::SYS_recvfrom
        | libc::SYS_sendto
        | libc::SYS_recvmsg
        | libc::SYS_sendmsg
        | libc::SYS_recvmmsg
        | libc::SYS_sendmmsg
        | libc::SYS_accept
        | libc::SYS_accept4
        | libc::SYS_connect
        | libc::SYS_poll
        | libc::SYS_ppoll
        | libc::SYS_select
        | libc::SYS_pselect6
        | libc::SYS_epoll_wait
        | libc::SYS_epoll_pwait
        | libc::SYS_epoll_pwait2
        | libc::SYS_io_uring_enter
        | libc::SYS_io_getevents
        | libc::SYS_sendfile
        | libc::SYS_splice
        | libc::SYS_fsync
        | libc::SYS_fdatasync
        | libc::SYS_openat
        | libc::SYS_open => Marker::WaitingIo,
        libc::SYS_nanosleep | libc::SYS_clock_nanosleep => Marker::WaitingSleep,
        libc::SYS_wait4 | libc::SYS_waitid => Marker::WaitingChild,
        _ => Marker::WaitingOther,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(nr: libc::c_long, first: u64) -> Call {
        Call {
            nr: nr as u64,
            args: [first, 0, 0, 0, 0, 0],
        }
    }

    #[test]
    fn each_call_has_its_reason() {
        let mut gil = GilWords::default();
        assert!(!gil.known());
        gil.add(0x1000, 0x100);
        assert!(gil.known());
        let none = GilWords::default();
        for (nr, first, words, expected) in [
            (libc::SYS_futex, 0x1080, &gil, Marker::WaitingGil),
            (libc::SYS_futex, 0x1100, &gil, Marker::WaitingLock),
            (libc::SYS_futex, 0x1080, &none, Marker::WaitingLock),
            (libc::SYS_recvfrom, 5, &gil, Marker::WaitingIo),
            (libc::SYS_epoll_wait, 5, &gil, Marker::WaitingIo),
            (libc::SYS_select, 6, &gil, Marker::WaitingIo),
            (libc::SYS_select, 0, &gil, Marker::WaitingSleep),
            (libc::SYS_clock_nanosleep, 1, &gil, Marker::WaitingSleep),
            (libc::SYS_wait4, 77, &gil, Marker::WaitingChild),
            (libc::SYS_pause, 0, &gil, Marker::WaitingOther),
        ] {
            assert_eq!(reason(call(nr, first), words), expected, "{nr} {first:#x}");
        }
    }
}
