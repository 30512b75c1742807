//! What a trace-tree key means. A key is a `u64`:
//!
//! | bits | meaning |
//! |---|---|
//! | bit 63 clear, bit 62 clear | a native frame: the instruction address. The interrupted frame keeps its exact address; a caller's return address is stored minus one, so that it points inside the call instruction (the right function and line even when the call is the last instruction of a function). |
//! | bit 63 set | a Python frame: bits 32–62 the code record ([`crate::capture::python::code`]), bits 0–31 the instruction index plus one (0 = the frame has not started executing). |
//! | bit 62 set, bit 63 clear, bit 61 clear | a marker frame ([`Marker`]), e.g. where a too-deep stack was cut. |
//! | bits 62 and 61 set, bits 63 and 60 clear | an asyncio task ([`crate::capture::python::tasks`]): bits 0–31 its name's index in the task names. |
//! | bits 62, 61 and 60 set, bit 63 clear | a lock ([`Lock`], [`crate::sources::locks`]): bit 59 clear, a Python lock named by the frame that created it (bits 28–58 the code record, bits 0–27 the instruction index plus one); bits 59 set and 58 clear, a native lock at a static address (bits 0–47); bits 59 and 58 set, a native lock named by the instruction that first waited for it (bits 0–47). |
//!
//! User-space addresses on x86-64 are below 2^47, so the three never collide.

/// Bit that marks a Python frame key.
pub const PYTHON_BIT: u64 = 1 << 63;
/// Bit that marks a marker frame key.
pub const MARKER_BIT: u64 = 1 << 62;
/// Bit that, with [`MARKER_BIT`], marks an asyncio task's frame key.
pub const TASK_BIT: u64 = 1 << 61;

/// Bit that, with [`MARKER_BIT`] and [`TASK_BIT`], marks a lock's frame key.
pub const LOCK_BIT: u64 = 1 << 60;
const LOCK_NATIVE: u64 = 1 << 59;
const LOCK_BY_WAITER: u64 = 1 << 58;
const ADDRESS: u64 = (1 << 48) - 1;

/// A lock, as its frame names it (at the leaf of a lock profile's call stacks, below the
/// call that waited for or released it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    /// A Python lock, named by where it was created: the Python frame's code record and
    /// instruction index (`None`: not started), as in [`python_key`] (records under
    /// 2^30).
    Python { record: u32, instr: Option<u32> },
    /// A Python lock made without a call to see (3.13.1+'s `PyMutex`-based locks), named
    /// by the Python frame that first waited for it, as [`Lock::Python`].
    PythonWaiter { record: u32, instr: Option<u32> },
    /// A native lock at a static address (inside a loaded object's data).
    Static(u64),
    /// A native lock elsewhere (the heap, a stack), named by the instruction that first
    /// waited for it: one name per lock whichever call site waits later.
    FirstWaiter(u64),
}

/// The key of a lock's frame.
pub fn lock_key(lock: Lock) -> u64 {
    let kind = MARKER_BIT | TASK_BIT | LOCK_BIT;
    match lock {
        Lock::Python { record, instr } => kind | python_lock_bits(record, instr),
        Lock::PythonWaiter { record, instr } => {
            kind | LOCK_BY_WAITER | python_lock_bits(record, instr)
        }
        Lock::Static(address) => kind | LOCK_NATIVE | (address & ADDRESS),
        Lock::FirstWaiter(pc) => kind | LOCK_NATIVE | LOCK_BY_WAITER | (pc & ADDRESS),
    }
}

/// A Python lock's code record (30 bits) and instruction index + 1 (28 bits) in a lock
/// frame's key.
fn python_lock_bits(record: u32, instr: Option<u32>) -> u64 {
    let pos = instr.map_or(0, |i| u64::from(i.saturating_add(1)).min((1 << 28) - 1));
    (u64::from(record & 0x3fff_ffff) << 28) | pos
}

/// Frames that stand for something other than code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Marker {
    /// The call stack was deeper than the profiler records (1024 native frames); its
    /// outermost frames were cut and this marker stands for them.
    Truncated = 1,
    /// Unwinding could not go further (code without unwind information or frame pointers,
    /// a corrupt stack); the frames outside the ones shown are unknown.
    Incomplete = 2,
    /// CPU time of a thread that ended before the kernel delivered the signals of its
    /// timer's last expirations (the kernel checks CPU timers on its tick, every 4 ms at
    /// 250 Hz, so a thread living a few milliseconds often ends first): counted in ticks,
    /// without samples, so that the profile's total still matches the CPU time.
    Unsampled = 3,
    /// The thread was running the interpreter's cyclic garbage collector (its interpreter's
    /// `collecting` flag was set and the thread held the GIL): put directly inside the
    /// innermost Python frame, whose work triggered the collection, or outermost when the
    /// stack has no Python frame (collections at shutdown).
    GarbageCollection = 4,
    /// Wall mode: the thread was blocked waiting for the GIL (a `futex` on a word of the
    /// GIL's condition variables or mutexes, [`crate::capture::waits`]). Wait markers are
    /// the innermost frame of a blocked sample, below the call that waits.
    WaitingGil = 5,
    /// Wall mode: blocked on a lock or condition other than the GIL (`futex`: a
    /// `threading.Lock`, a `queue.Queue`, a `join`; `flock`, semaphores).
    WaitingLock = 6,
    /// Wall mode: blocked on a file, pipe or socket (`read`, `write`, `recv*`, `send*`,
    /// `accept`, `connect`, `poll`, `select` with descriptors, `epoll_wait`, …).
    WaitingIo = 7,
    /// Wall mode: sleeping (`nanosleep`, `clock_nanosleep`, `select` without descriptors
    /// as `time.sleep` before 3.11 does it).
    WaitingSleep = 8,
    /// Wall mode: waiting for a child process to end (`wait4`, `waitid`).
    WaitingChild = 9,
    /// Wall mode: blocked in another system call.
    WaitingOther = 10,
    /// Wall mode: an asyncio task suspended in an `await` (or not started yet), sampled
    /// from outside ([`crate::capture::python::tasks`]): the innermost frame of its stack,
    /// below its await chain's `<task …>` frames and its coroutines' frames.
    Awaiting = 11,
    /// Wall mode: the thread was runnable, waiting for a CPU (its run delay, from the
    /// kernel's `schedstat`), at the stack where it last ran or the call it woke from.
    WaitingCpu = 12,
    /// Wall mode: the thread was blocked between two passes of the sampler process that
    /// both found it running (a wait shorter than their interval, mostly for the GIL), so
    /// no sample says on what: under its latest CPU sample, where it ran around the wait.
    WaitingBetween = 13,
}

impl Marker {
    /// The name written to the profile for this marker.
    pub fn name(self) -> &'static str {
        match self {
            Marker::Truncated => "<truncated stack>",
            Marker::Incomplete => "<incomplete stack>",
            Marker::Unsampled => "<unsampled thread time>",
            Marker::GarbageCollection => "<garbage collection>",
            Marker::WaitingGil => "<waiting: GIL>",
            Marker::WaitingLock => "<waiting: lock>",
            Marker::WaitingIo => "<waiting: I/O>",
            Marker::WaitingSleep => "<waiting: sleep>",
            Marker::WaitingChild => "<waiting: child process>",
            Marker::WaitingOther => "<waiting: other system call>",
            Marker::Awaiting => "<awaiting>",
            Marker::WaitingCpu => "<waiting: CPU>",
            Marker::WaitingBetween => "<waiting: between samples>",
        }
    }

    /// For a wait marker, what the thread waited for, as its name says it (`GIL`, `lock`,
    /// `I/O`, `sleep`, `child process`, `other system call`); `None` for the others.
    pub fn waiting_for(self) -> Option<&'static str> {
        Some(match self {
            Marker::WaitingGil => "GIL",
            Marker::WaitingLock => "lock",
            Marker::WaitingIo => "I/O",
            Marker::WaitingSleep => "sleep",
            Marker::WaitingChild => "child process",
            Marker::WaitingOther => "other system call",
            Marker::WaitingCpu => "CPU",
            Marker::WaitingBetween => "between samples",
            _ => return None,
        })
    }
}

/// The wall-mode wait markers, one per reason a blocked thread waits, runnable time's, and
/// the unseen waits'.
pub const WAITS: [Marker; 8] = [
    Marker::WaitingGil,
    Marker::WaitingLock,
    Marker::WaitingIo,
    Marker::WaitingSleep,
    Marker::WaitingChild,
    Marker::WaitingOther,
    Marker::WaitingCpu,
    Marker::WaitingBetween,
];

/// The key of a Python frame running code record `record` at instruction index `instr`
/// (`None` when the frame has not started).
#[inline(always)]
pub fn python_key(record: u32, instr: Option<u32>) -> u64 {
    let pos = instr.map_or(0, |i| u64::from(i.saturating_add(1)));
    PYTHON_BIT | (u64::from(record & 0x7fff_ffff) << 32) | pos
}

/// Whether `key` is a Python frame's.
#[inline(always)]
pub fn is_python(key: u64) -> bool {
    key & PYTHON_BIT != 0
}

/// The key of a marker frame.
pub fn marker_key(marker: Marker) -> u64 {
    MARKER_BIT | marker as u64
}

/// The key of the frame of an asyncio task whose name is `name` in the task names
/// ([`crate::capture::python::tasks::Names`]).
#[inline(always)]
pub fn task_key(name: u32) -> u64 {
    MARKER_BIT | TASK_BIT | u64::from(name)
}

/// A decoded key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A native instruction address.
    Native(u64),
    /// A Python frame: code record and instruction index (`None`: not started).
    Python { record: u32, instr: Option<u32> },
    /// A marker.
    Marker(Marker),
    /// An asyncio task: its name's index in the task names.
    Task(u32),
    /// A lock.
    Lock(Lock),
}

/// Decodes a key written by this module.
pub fn decode(key: u64) -> Frame {
    if key & PYTHON_BIT != 0 {
        let pos = (key & 0xffff_ffff) as u32;
        Frame::Python {
            record: ((key >> 32) & 0x7fff_ffff) as u32,
            instr: pos.checked_sub(1),
        }
    } else if key & (MARKER_BIT | TASK_BIT | LOCK_BIT) == MARKER_BIT | TASK_BIT | LOCK_BIT {
        let record = ((key >> 28) & 0x3fff_ffff) as u32;
        let instr = ((key & ((1 << 28) - 1)) as u32).checked_sub(1);
        Frame::Lock(if key & (LOCK_NATIVE | LOCK_BY_WAITER) == 0 {
            Lock::Python { record, instr }
        } else if key & LOCK_NATIVE == 0 {
            Lock::PythonWaiter { record, instr }
        } else if key & LOCK_BY_WAITER == 0 {
            Lock::Static(key & ADDRESS)
        } else {
            Lock::FirstWaiter(key & ADDRESS)
        })
    } else if key & (MARKER_BIT | TASK_BIT) == MARKER_BIT | TASK_BIT {
        Frame::Task(key as u32)
    } else if key & MARKER_BIT != 0 {
        Frame::Marker(match key & !MARKER_BIT {
            2 => Marker::Incomplete,
            3 => Marker::Unsampled,
            4 => Marker::GarbageCollection,
            5 => Marker::WaitingGil,
            6 => Marker::WaitingLock,
            7 => Marker::WaitingIo,
            8 => Marker::WaitingSleep,
            9 => Marker::WaitingChild,
            10 => Marker::WaitingOther,
            11 => Marker::Awaiting,
            12 => Marker::WaitingCpu,
            13 => Marker::WaitingBetween,
            _ => Marker::Truncated,
        })
    } else {
        Frame::Native(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_marker_round_trips_with_a_name_of_its_own() {
        let all = [
            Marker::Truncated,
            Marker::Incomplete,
            Marker::Unsampled,
            Marker::GarbageCollection,
            Marker::WaitingGil,
            Marker::WaitingLock,
            Marker::WaitingIo,
            Marker::WaitingSleep,
            Marker::WaitingChild,
            Marker::WaitingOther,
            Marker::Awaiting,
            Marker::WaitingCpu,
            Marker::WaitingBetween,
        ];
        for (i, &m) in all.iter().enumerate() {
            assert_eq!(decode(marker_key(m)), Frame::Marker(m));
            assert!(all[..i].iter().all(|o| o.name() != m.name()));
            assert_eq!(m.waiting_for().is_some(), WAITS.contains(&m));
            if let Some(word) = m.waiting_for() {
                assert_eq!(m.name(), format!("<waiting: {word}>"));
            }
        }
    }

    #[test]
    fn lock_keys_round_trip_apart_from_tasks() {
        for lock in [
            Lock::Python {
                record: 0x3fff_ffff,
                instr: Some(123_456),
            },
            Lock::PythonWaiter {
                record: 12,
                instr: Some(40),
            },
            Lock::Python {
                record: 3,
                instr: None,
            },
            Lock::Static(0x7fff_1234_5678),
            Lock::FirstWaiter(0x5555_1234_5678),
        ] {
            assert_eq!(decode(lock_key(lock)), Frame::Lock(lock));
        }
        assert_eq!(decode(task_key(u32::MAX)), Frame::Task(u32::MAX));
    }

    #[test]
    fn keys_round_trip() {
        assert_eq!(decode(0x7fff_1234_5678), Frame::Native(0x7fff_1234_5678));
        assert_eq!(
            decode(python_key(7, Some(0))),
            Frame::Python {
                record: 7,
                instr: Some(0)
            }
        );
        assert_eq!(
            decode(python_key(7, None)),
            Frame::Python {
                record: 7,
                instr: None
            }
        );
        assert_eq!(
            decode(python_key(0x7fff_ffff, Some(123_456))),
            Frame::Python {
                record: 0x7fff_ffff,
                instr: Some(123_456)
            }
        );
        assert_eq!(
            decode(marker_key(Marker::Truncated)),
            Frame::Marker(Marker::Truncated)
        );
        assert_eq!(
            decode(marker_key(Marker::Incomplete)),
            Frame::Marker(Marker::Incomplete)
        );
        assert_eq!(
            decode(marker_key(Marker::Unsampled)),
            Frame::Marker(Marker::Unsampled)
        );
        assert_eq!(
            decode(marker_key(Marker::GarbageCollection)),
            Frame::Marker(Marker::GarbageCollection)
        );
        assert_eq!(decode(task_key(0)), Frame::Task(0));
        assert_eq!(decode(task_key(u32::MAX)), Frame::Task(u32::MAX));
        assert!(!is_python(task_key(7)));
        assert!(is_python(python_key(1, None)));
        assert!(!is_python(marker_key(Marker::GarbageCollection)));
        assert!(!is_python(0x7fff_1234_5678));
    }
}
