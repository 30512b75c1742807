//! Per-thread perf events (`perf_event_open`): the source of CPU-time samples where the
//! kernel allows it, and of samples of other events (page faults, context switches,
//! hardware counters).
//!
//! One event per thread, counting that thread only (`pid` = its tid, any CPU), its
//! overflow signal sent to that thread: `O_ASYNC`, `F_SETSIG` `SIGPROF`, `F_SETOWN_EX`
//! `F_OWNER_TID` (shared/design/timers.md). The signal arrives with `si_code` `POLL_IN`
//! and `si_fd` the event's descriptor, which tells it from a timer's. Unlike the POSIX CPU
//! timers ([`crate::sources::timer`]), which the kernel checks on its scheduler tick
//! (250 Hz here, whatever the rate asked for), the `task-clock` event runs on an hrtimer:
//! measured here, 995, 3954 and 9718 signals per CPU second for periods of 1 ms, 250 µs and
//! 100 µs.
//!
//! **Random intervals.** For `task-clock` intervals are drawn at random
//! ([`crate::sources::random::interval`]: uniform over half to one and a half of a mean)
//! and armed by the helper process ([`crate::sources::helper`], which holds the
//! descriptors) with `PERF_EVENT_IOC_PERIOD`, which restarts the hrtimer with the new
//! period from then, in batches: on each of its looks (every 4 ms or a period,
//! [`batch_ns`], while threads start; every 16 periods, [`quiet_batch_ns`], once none
//! did) it draws and arms a new interval for every thread sampled since the last one; the
//! event runs on at the interval last armed meanwhile. The draws' mean follows
//! the intervals each thread gets (`weigh`), so samples come at the rate
//! asked for. Counting events (page faults, context switches, …) keep the
//! kernel's fixed period: `PERF_EVENT_IOC_PERIOD` on a software counting event zeroes the
//! count left to the next overflow, so the next single event overflows (Linux
//! `perf_swevent_event`; measured here: a period of 100 re-armed in each handler sampled
//! 97,807 of 100,000 page faults one by one).
//!
//! **Weights.** Each `task-clock` sample weighs the CPU time the thread used since its
//! previous sample, read from its CPU clock (`CLOCK_THREAD_CPUTIME_ID`, which counts what
//! the event counts; the handler has no descriptor to read), turned into ticks of the mean
//! period with the remainder carried to the next sample. Overflows the kernel skipped (in
//! kernel mode with `exclude_kernel`) or merged into one signal are in the next sample's
//! weight, so the profile's total is the thread's CPU time, whatever the rate. A sample of
//! another event weighs one period of events.

use crate::record::threads::Slot;
use crate::sampler::Sampler;
use crate::sources::helper::{raw, raw6};
use crate::sources::timer::clock_ns;
use perf_event_open_sys::bindings as sys;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

/// An event to sample on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The name as `PYIGPROF_EVENT` spells it, perf's (`task-clock`, `page-faults`,
    /// `cycles`, `r1a8`).
    pub name: &'static str,
    /// `perf_event_attr.type` (`PERF_TYPE_SOFTWARE`, `_HARDWARE` or `_RAW`).
    pub kind: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// The counter its samples are counted under in the profile, in IgProf's style:
    /// `PERF_TICKS` for `task-clock`, `PERF_PAGE_FAULTS`, `PERF_CYCLES`, `PERF_RAW_1A8`, ….
    pub counter: &'static str,
    /// Mean events between two samples: nanoseconds of the thread's CPU time for
    /// `task-clock`, a count of events otherwise.
    pub period: u64,
}

impl Event {
    /// Whether the event measures the thread's CPU time (`task-clock`), its samples
    /// counted in ticks of [`Event::period`] nanoseconds.
    pub fn is_time(&self) -> bool {
        self.kind == sys::PERF_TYPE_SOFTWARE
            && self.config == u64::from(sys::PERF_COUNT_SW_TASK_CLOCK)
    }

    /// Whether each interval is drawn at random ([`crate::sources::random::interval`]):
    /// for the hrtimer-based `task-clock`; counting events keep a fixed period (see the
    /// module's documentation).
    pub fn randomized(&self) -> bool {
        self.is_time()
    }

    /// The `task-clock` event with a mean period of `period_ns` nanoseconds of CPU time.
    pub fn task_clock(period_ns: u64) -> Event {
        Event {
            name: "task-clock",
            kind: sys::PERF_TYPE_SOFTWARE,
            config: u64::from(sys::PERF_COUNT_SW_TASK_CLOCK),
            counter: "PERF_TICKS",
            period: period_ns,
        }
    }

    /// Parses `PYIGPROF_EVENT`: an event name of [`NAMED`] or a raw event `rNNNN` (hex),
    /// optionally followed by perf's `/period=N/` (events between samples; ns for
    /// `task-clock`). `period_ns` is `task-clock`'s period when none is given
    /// (`PYIGPROF_HZ`). The error says what was expected.
    pub fn parse(text: &str, period_ns: u64) -> Result<Event, String> {
        let text = text.trim();
        let (name, period) = match text.split_once('/') {
            None => (text, None),
            Some((name, rest)) => {
                let value = rest
                    .trim_end_matches('/')
                    .strip_prefix("period=")
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .filter(|&p| p > 0)
                    .ok_or_else(|| {
                        format!("{rest:?} is not /period=N/ with N a whole number above 0")
                    })?;
                (name, Some(value))
            }
        };
        let mut event = if let Some(&(names, kind, config, counter, default)) =
            NAMED.iter().find(|(names, ..)| names.contains(&name))
        {
            Event {
                name: names[0],
                kind,
                config,
                counter,
                period: default,
            }
        } else if let Some(code) = name
            .strip_prefix('r')
            .filter(|hex| !hex.is_empty() && hex.len() <= 16)
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        {
            // Leaked once, at start-up: the event lives as long as the process.
            let counter: &'static str = Box::leak(format!("PERF_RAW_{code:X}").into_boxed_str());
            let name: &'static str = Box::leak(format!("r{code:x}").into_boxed_str());
            Event {
                name,
                kind: sys::PERF_TYPE_RAW,
                config: code,
                counter,
                period: 1_000_000,
            }
        } else {
            let names: Vec<&str> = NAMED.iter().map(|(names, ..)| names[0]).collect();
            return Err(format!(
                "{name:?} is not an event: expected one of {} or a raw event rNNNN (hex), \
                 optionally with /period=N/",
                names.join(", ")
            ));
        };
        event.period = match (period, event.is_time()) {
            (Some(p), true) => p.max(MIN_PERIOD_NS),
            (Some(p), false) => p,
            (None, true) => period_ns,
            (None, false) => event.period,
        };
        Ok(event)
    }
}

/// The events `PYIGPROF_EVENT` names (perf's names and aliases first): type, config,
/// counter, and the default period (events between samples; `task-clock`'s comes from
/// `PYIGPROF_HZ`). The defaults give tens to thousands of samples per second on common
/// programs: every context switch and migration, one page fault in 100, one cycle or
/// instruction in 10 million.
pub const NAMED: [(&[&str], u32, u64, &str, u64); 12] = [
    (
        &["task-clock"],
        sys::PERF_TYPE_SOFTWARE,
        sys::PERF_COUNT_SW_TASK_CLOCK as u64,
        "PERF_TICKS",
        0,
    ),
    (
        &["page-faults", "faults"],
        sys::PERF_TYPE_SOFTWARE,
        sys::PERF_COUNT_SW_PAGE_FAULTS as u64,
        "PERF_PAGE_FAULTS",
        100,
    ),
    (
        &["minor-faults"],
        sys::PERF_TYPE_SOFTWARE,
        sys::PERF_COUNT_SW_PAGE_FAULTS_MIN as u64,
        "PERF_MINOR_FAULTS",
        100,
    ),
    (
        &["major-faults"],
        sys::PERF_TYPE_SOFTWARE,
        sys::PERF_COUNT_SW_PAGE_FAULTS_MAJ as u64,
        "PERF_MAJOR_FAULTS",
        1,
    ),
    (
        &["context-switches", "cs"],
        sys::PERF_TYPE_SOFTWARE,
        sys::PERF_COUNT_SW_CONTEXT_SWITCHES as u64,
        "PERF_CONTEXT_SWITCHES",
        1,
    ),
    (
        &["cpu-migrations", "migrations"],
        sys::PERF_TYPE_SOFTWARE,
        sys::PERF_COUNT_SW_CPU_MIGRATIONS as u64,
        "PERF_CPU_MIGRATIONS",
        1,
    ),
    (
        &["cycles", "cpu-cycles"],
        sys::PERF_TYPE_HARDWARE,
        sys::PERF_COUNT_HW_CPU_CYCLES as u64,
        "PERF_CYCLES",
        10_000_000,
    ),
    (
        &["instructions"],
        sys::PERF_TYPE_HARDWARE,
        sys::PERF_COUNT_HW_INSTRUCTIONS as u64,
        "PERF_INSTRUCTIONS",
        10_000_000,
    ),
    (
        &["cache-references"],
        sys::PERF_TYPE_HARDWARE,
        sys::PERF_COUNT_HW_CACHE_REFERENCES as u64,
        "PERF_CACHE_REFERENCES",
        1_000_000,
    ),
    (
        &["cache-misses"],
        sys::PERF_TYPE_HARDWARE,
        sys::PERF_COUNT_HW_CACHE_MISSES as u64,
        "PERF_CACHE_MISSES",
        100_000,
    ),
    (
        &["branches", "branch-instructions"],
        sys::PERF_TYPE_HARDWARE,
        sys::PERF_COUNT_HW_BRANCH_INSTRUCTIONS as u64,
        "PERF_BRANCHES",
        1_000_000,
    ),
    (
        &["branch-misses"],
        sys::PERF_TYPE_HARDWARE,
        sys::PERF_COUNT_HW_BRANCH_MISSES as u64,
        "PERF_BRANCH_MISSES",
        100_000,
    ),
];

/// The shortest period the kernel arms for its hrtimer-based events, ns
/// (`perf_swevent_init_hrtimer`: 10 µs).
pub const MIN_PERIOD_NS: u64 = 10_000;

/// `fcntl` commands and values the `libc` crate lacks (Linux `include/uapi/asm-generic/fcntl.h`).
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;

/// `struct f_owner_ex` (`include/uapi/asm-generic/fcntl.h`): whom `O_ASYNC` signals.
#[repr(C)]
struct OwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

/// `si_code` of a signal sent for `O_ASYNC` input or hang-up (`include/uapi/asm-generic/siginfo.h`).
const POLL_IN: libc::c_int = 1;
const POLL_HUP: libc::c_int = 6;

/// Whether events are opened with `exclude_kernel` (and `exclude_hv`): always. An
/// overflow in kernel mode sends its signal while the thread is in a system call, which,
/// if it then blocks, ends early: a short `write` or `EINTR` that the program sees (measured
/// with `exclude_kernel` off where the kernel allowed it: `python -u` writing 4 MiB into a
/// pipe read slowly delivered 384 KiB, in 10 runs of 10 at 1 kHz, cpu and wall mode). With
/// it the kernel skips overflows in kernel mode (`perf_swevent_hrtimer`,
/// `perf_exclude_event`): the signal comes in user mode, between system calls, and the
/// time the thread spent in the kernel is in its next sample's weight.
pub fn excludes_kernel() -> bool {
    true
}

/// Opens `event` on thread `tid`, counting from now, its overflow signal (`SIGPROF`) sent
/// to that thread, the first overflow after `first` (ns of CPU time or events). Returns
/// the descriptor, close-on-exec. Made of direct system calls (no `errno`): the helper
/// process, which holds the events, runs it with another thread's thread pointer.
///
/// # Errors
/// The `errno` of the step that failed ([`describe`] names it).
pub fn open(event: &Event, tid: libc::pid_t, first: u64) -> Result<libc::c_int, i32> {
    open_as(event, tid, first, false)
}

/// Opens `event` on thread `tid` as [`open`] does, disabled: it counts nothing and sends
/// nothing until [`fire_once`]. In the helper process.
///
/// # Errors
/// As [`open`].
fn open_one_shot(event: &Event, tid: libc::pid_t, first: u64) -> Result<libc::c_int, i32> {
    open_as(event, tid, first, true)
}

/// Enables the event behind `fd` (from [`open_one_shot`]) for one overflow, after which the
/// kernel disables it and its signal says `POLL_HUP` (`PERF_EVENT_IOC_REFRESH` 1: Linux
/// `_perf_event_refresh`, `event_limit`; the hrtimer is not restarted, `perf_swevent_hrtimer`).
/// Returns whether the kernel accepted it. In the helper process.
fn fire_once(fd: libc::c_int) -> bool {
    // SAFETY: an ioctl with an integer argument on our descriptor.
    unsafe { raw(libc::SYS_ioctl, [fd as u64, sys::REFRESH as u64, 1, 0]) == 0 }
}

/// [`open`], or with `disabled` set, [`open_one_shot`].
fn open_as(
    event: &Event,
    tid: libc::pid_t,
    first: u64,
    disabled: bool,
) -> Result<libc::c_int, i32> {
    // SAFETY: a zeroed perf_event_attr is valid (all features off).
    let mut attr: sys::perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = event.kind;
    attr.size = std::mem::size_of::<sys::perf_event_attr>() as u32;
    attr.config = event.config;
    attr.__bindgen_anon_1.sample_period = first.max(1);
    attr.set_disabled(u64::from(disabled));
    attr.set_exclude_kernel(u64::from(excludes_kernel()));
    attr.set_exclude_hv(u64::from(excludes_kernel()));
    // SAFETY: a valid attr; the kernel copies it.
    let fd = unsafe {
        raw6(
            libc::SYS_perf_event_open,
            [
                &mut attr as *mut sys::perf_event_attr as u64,
                tid as u64,
                -1i64 as u64,
                -1i64 as u64,
                u64::from(sys::PERF_FLAG_FD_CLOEXEC),
                0,
            ],
        )
    };
    if fd < 0 {
        return Err(-fd as i32);
    }
    let fd = fd as libc::c_int;
    let owner = OwnerEx {
        kind: F_OWNER_TID,
        pid: tid,
    };
    // The event counts from here (opened enabled: enabling it afterwards was a second
    // cross-CPU call to a running thread's CPU). Its signal is set up before `O_ASYNC`
    // turns it on, so that no overflow meanwhile is sent to anyone (nor as `SIGIO`).
    // `F_SETFL` sets the flags it can change, of which a new perf descriptor has none.
    // SAFETY: fcntl on the descriptor just opened.
    unsafe {
        let fd64 = fd as u64;
        for args in [
            [fd64, F_SETSIG as u64, libc::SIGPROF as u64, 0],
            [fd64, F_SETOWN_EX as u64, &owner as *const OwnerEx as u64, 0],
            [fd64, libc::F_SETFL as u64, libc::O_ASYNC as u64, 0],
        ] {
            let done = raw(libc::SYS_fcntl, args);
            if done < 0 {
                raw(libc::SYS_close, [fd64, 0, 0, 0]);
                return Err(-done as i32);
            }
        }
    }
    Ok(fd)
}

/// Whether `event` can be sampled here: opens it on the calling thread, and closes it.
///
/// # Errors
/// The `errno` of `perf_event_open` ([`describe`] names it).
pub fn probe(event: &Event) -> Result<(), i32> {
    // SAFETY: gettid has no preconditions.
    let fd = open(event, unsafe { libc::gettid() }, u64::MAX >> 2)?;
    // SAFETY: the descriptor just opened.
    unsafe { libc::close(fd) };
    Ok(())
}

/// Why `perf_event_open` (or the set-up of its descriptor) failed, for a user: the errno's
/// name and what it means here.
pub fn describe(errno: i32) -> String {
    let meaning = match errno {
        libc::ENOENT | libc::EOPNOTSUPP => "this CPU or kernel does not offer the event",
        libc::EACCES | libc::EPERM => {
            "not permitted (kernel.perf_event_paranoid, a seccomp filter or a container)"
        }
        libc::ENOSYS => "this kernel has no perf events",
        libc::EINVAL => "the kernel refused the event's settings",
        libc::EMFILE | libc::ENFILE => "no file descriptor left",
        _ => "",
    };
    let name = errno_name(errno);
    if meaning.is_empty() {
        format!("perf_event_open: {name}")
    } else {
        format!("perf_event_open: {name}, {meaning}")
    }
}

/// The symbolic name of `errno` (`EACCES`), or `errno N`.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::ENOENT => "ENOENT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOSYS => "ENOSYS",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::E2BIG => "E2BIG",
        libc::EBUSY => "EBUSY",
        libc::ETIMEDOUT => "ETIMEDOUT",
        _ => return format!("errno {errno}"),
    };
    name.to_string()
}

/// Whether the signal `info` describes is a perf event's overflow (`si_code` `POLL_IN`
/// or `POLL_HUP`, sent by the kernel through the descriptor's `O_ASYNC`); its `si_fd`
/// (the descriptor's number in the helper process's table).
pub(crate) fn overflow_fd(info: *const libc::siginfo_t) -> Option<libc::c_int> {
    // SAFETY: the kernel passes a valid siginfo; for SIGPOLL-style signals si_fd is the
    // int at offset 24 (after si_band, a long at offset 16).
    unsafe {
        let code = (*info).si_code;
        (code == POLL_IN || code == POLL_HUP)
            .then(|| *(info as *const u8).add(24).cast::<libc::c_int>())
    }
}

/// Bumped whenever the helper process has work (an event to open, a period to arm, a
/// descriptor to close); it waits on this word.
static WORK: AtomicU32 = AtomicU32::new(0);

/// `Slot::want_period` of a thread sampled since the helper's last look: draw its next
/// interval. A larger value is the interval a thread's first sample drew itself.
const ANY_DRAW: u64 = 1;

/// Periods the helper process armed (`PERF_EVENT_IOC_PERIOD` calls), for the profile's
/// cost statistics.
pub(crate) static REARMS: AtomicU64 = AtomicU64::new(0);

/// Threads whose first sample came from a one-shot event ([`arm`]), for the profile's
/// statistics (`first_shots`).
pub(crate) static FIRST_SHOTS: AtomicU64 = AtomicU64::new(0);

/// Descriptors (of the helper process's table) to close, + 1; 0 = a free entry.
static CLOSING: [AtomicI32; 256] = [const { AtomicI32::new(0) }; 256];

/// `Slot::open_state`: nothing asked.
const IDLE: u32 = 0;
/// `Slot::open_state`: the thread asks the helper process to open its event.
const ASKED: u32 = 1;
/// `Slot::open_state`: opened (`Slot::event_fd` set).
const OPENED: u32 = 2;
/// `Slot::open_state`: refused (`Slot::open_errno` says why).
const REFUSED: u32 = 3;
/// `Slot::open_state`: the helper process is opening the event.
const OPENING: u32 = 4;
/// `Slot::open_state`: the thread stopped sampling before its event was open; the helper
/// process closes what it opens for it.
const CANCELLED: u32 = 5;

/// Threads whose event the helper process could not open after they went on without
/// waiting for it ([`arm`]), and the `errno` of the last refusal: said at exit
/// ([`refusals`]).
static REFUSED_THREADS: AtomicU64 = AtomicU64::new(0);
static REFUSED_ERRNO: AtomicI32 = AtomicI32::new(0);

/// How many threads went unsampled because the helper process could not open their event
/// after they started, and why (the last refusal, as [`describe`] says it); `None` when
/// none did.
pub fn refusals() -> Option<(u64, String)> {
    match REFUSED_THREADS.load(Ordering::Relaxed) {
        0 => None,
        n => Some((n, describe(REFUSED_ERRNO.load(Ordering::Relaxed)))),
    }
}

/// Whether `slot`'s thread has asked for its event and the helper process has not opened
/// it yet.
pub fn pending(slot: &Slot) -> bool {
    matches!(slot.open_state.load(Ordering::Acquire), ASKED | OPENING)
}

/// Longest wait for the helper process to open a thread's event, ns.
const OPEN_WAIT_NS: u64 = 2_000_000_000;

/// Set while the helper process sleeps until a thread wakes it (no interval was asked
/// for over its last [`IDLE_POLLS`] looks); clear while it looks for requests on its own
/// timer.
static ASLEEP: AtomicBool = AtomicBool::new(true);

/// Looks in a row that found no interval to arm before the helper process stops looking
/// on its own timer and sleeps until woken.
const IDLE_POLLS: u32 = 8;

/// Set while the helper process waits a quiet look's interval ([`quiet_batch_ns`]): a
/// thread's first sample then wakes it, so that the interval the sample drew is armed
/// at once rather than after its first interval repeated for up to 16 periods.
static QUIET: AtomicBool = AtomicBool::new(false);

/// The mean wait between the helper process's looks now, ns ([`batch_ns`] or
/// [`quiet_batch_ns`]): how many samples a look's re-arm is spread over, for `weigh`.
static LOOK_NS: AtomicU64 = AtomicU64::new(4_000_000);

/// Looks at the quick cadence ([`batch_ns`]) after one that found a thread starting (an
/// event to open, or the interval a first sample drew) before the helper process looks
/// at the quiet cadence again ([`quiet_batch_ns`]).
const QUICK_LOOKS: u32 = 4;

/// Draws between two quiet looks: a quiet look comes every this many mean intervals.
const QUIET_LOOK_SAMPLES: u64 = 16;

/// Tells the helper process there is work, and wakes it. Async-signal-safe.
pub fn wake_keeper() {
    WORK.fetch_add(1, Ordering::Release);
    crate::sources::helper::wake(&WORK);
}

/// Tells the helper process there is an interval to arm, waking it only if it sleeps
/// (or, with `soon` — a thread's first sample, whose drawn interval should be armed at
/// once — if it waits a quiet look's interval, [`QUIET`]): while samples come, it looks on
/// its own timer, and the handler makes no system call for it. (A futex wake of a process
/// on another CPU sends an inter-processor interrupt, which in this VM cost the handler
/// 7 µs at 1 kHz and 15 µs at 250 Hz.) Async-signal-safe.
fn nudge_keeper(soon: bool) {
    // With the helper's stores of ASLEEP and QUIET and its load of WORK (all SeqCst,
    // [`wait_telling`]): either it sees this increment and looks again, or this load sees
    // the flag set and wakes it.
    WORK.fetch_add(1, Ordering::SeqCst);
    if ASLEEP.load(Ordering::SeqCst) || (soon && QUIET.load(Ordering::SeqCst)) {
        crate::sources::helper::wake(&WORK);
    }
}

/// The helper process's wait on [`WORK`] (still `seen`) for at most `timeout_ns`, with
/// `flag` ([`ASLEEP`] or [`QUIET`]) set meanwhile, so that a handler that must have it
/// look wakes it ([`nudge_keeper`]). In the helper process.
fn wait_telling(flag: &AtomicBool, seen: u32, timeout_ns: u64) {
    flag.store(true, Ordering::SeqCst);
    // Work posted before the flag was seen did not wake us: look again.
    if WORK.load(Ordering::SeqCst) == seen {
        crate::sources::helper::helper_wait(&WORK, seen, timeout_ns);
    }
    flag.store(false, Ordering::SeqCst);
}

/// How long the helper process waits between its own looks while samples come and threads
/// start ([`quiet_batch_ns`] once none did for [`QUICK_LOOKS`] looks), ns: 4 ms, or the
/// period where that is longer (each wait drawn uniformly over half to one and a half of
/// it, so that its looks keep no fixed phase). At each look it draws a new
/// interval for every thread sampled since the last one and arms it
/// (`PERF_EVENT_IOC_PERIOD`, which restarts the thread's event from then); in between, a
/// thread's event overflows at the interval last armed. Looking after every sample cost
/// the helper 20–40 µs of CPU per sample on this VM (two wake-ups and a cross-CPU call
/// each), a quarter of the program's CPU time at 10 kHz; now at most 250 looks a second.
///
/// The samples stay at random instants: each look comes at a time that has nothing to do
/// with what the program runs, and starts a new interval from there, so every sample's
/// phase against any period of the program is uniform and a weighted share is unbiased
/// ([`crate::sources::random::interval`]). Consecutive samples between two looks are a
/// drawn interval apart, so they are not independent: a program with a period
/// commensurate with one draw sees the same phase for at most one look's worth of samples
/// (4 at 1 kHz at this cadence, 16 at the quiet one; 40 at 10 kHz), which adds to a share's
/// variance, not to its expectation.
pub(crate) fn batch_ns(event: &Event) -> u64 {
    // Under an overhead budget the looks are as much rarer as the samples: a look costs
    // the helper tens of microseconds whatever it finds.
    let scale = u64::from(crate::sources::budget::SCALE.load(Ordering::Relaxed));
    let looks = 4_000_000 * scale / u64::from(crate::sources::budget::SCALE_ONE);
    mean_interval(event).max(looks)
}

/// How long the helper process waits between its looks once no thread started over its
/// last [`QUICK_LOOKS`] looks, ns: [`QUIET_LOOK_SAMPLES`] mean intervals (16 ms at 1 kHz,
/// 64 ms at the default 250 Hz), or [`batch_ns`] where that is longer (4 kHz and faster).
///
/// A look costs the helper a wake-up and, for each thread sampled since the last one, a
/// cross-CPU call to re-arm it: on this VM a helper thread doing only that for one busy
/// thread sampled at 1 kHz took 1.1 % of the thread's CPU time with a look every 4 ms,
/// 0.4 % every 16 ms (`bench/floor/helper.py`). What the rarer looks change is how many
/// consecutive samples share one draw: 16 at every rate up to 4 kHz (as 4 kHz always had),
/// 40 at 10 kHz. Threads that start are looked after at the quick cadence: the interval
/// a thread's first sample draws is armed at once (a first sample wakes a quietly waiting
/// helper, [`QUIET`]), since until then the thread's first interval, a fraction of a
/// period, repeats and is not sampled.
pub(crate) fn quiet_batch_ns(event: &Event) -> u64 {
    mean_interval(event)
        .saturating_mul(QUIET_LOOK_SAMPLES)
        .max(batch_ns(event))
}

/// The mean interval between a thread's samples, in the event's unit: its period, times
/// the overhead budget's scale for a time event ([`crate::sources::budget::SCALE`]; 1
/// without a budget). The tick stays the period.
pub fn mean_interval(event: &Event) -> u64 {
    if !event.is_time() {
        return event.period;
    }
    let scale = crate::sources::budget::SCALE.load(Ordering::Relaxed);
    event.period.saturating_mul(u64::from(scale)) / u64::from(crate::sources::budget::SCALE_ONE)
}

/// The helper process's loop with perf events: opens the events threads ask for, draws
/// and arms the intervals of the threads sampled since its last look, closes the
/// descriptors of threads that ended; waits on [`WORK`] in between ([`batch_ns`]). Runs
/// in the helper process (direct system calls only).
pub fn serve(sampler: &Sampler) {
    if !sampler
        .trigger
        .event()
        .is_some_and(crate::sources::late::confirm)
    {
        return;
    }
    let Some(mut keeper) = Keeper::start(sampler) else {
        return;
    };
    while !crate::sources::helper::quitting() {
        let seen = keeper.look(sampler);
        keeper.wait(seen, u64::MAX);
    }
}

/// The keeper of the threads' perf events in the helper process: [`serve`]'s work, in
/// steps that wall mode's loop interleaves with its passes
/// ([`crate::sources::wall::run`]).
pub struct Keeper {
    event: Event,
    /// The random state of its waits.
    state: u64,
    /// Looks in a row that found no interval to arm.
    idle: u32,
    /// Looks left at the quick cadence ([`QUICK_LOOKS`] after one that found a thread
    /// starting).
    quick: u32,
    /// The overhead budget's measurements ([`crate::sources::budget`]).
    budget: crate::sources::budget::Controller,
    /// Whether a re-arm keeps the thread's sampling phase ([`next_period`]): in wall
    /// mode, whose loop looks at every pass.
    keep_phase: bool,
}

impl Keeper {
    /// Prepares the helper process to keep the events of `sampler`'s trigger; `None` when
    /// it samples on timers. In the helper process.
    pub fn start(sampler: &Sampler) -> Option<Keeper> {
        let event = sampler.trigger.event().copied()?;
        // SAFETY: prctl on the helper process itself: its timed waits end on time rather
        // than up to 50 µs late (the default slack of a timer).
        unsafe { raw(libc::SYS_prctl, [libc::PR_SET_TIMERSLACK as u64, 1, 0, 0]) };
        // Descriptors queued for closing by a previous helper process (one that ended
        // before an `exec` that then failed) were numbers of its table, which ended with
        // it: here they would close this one's new events.
        for entry in &CLOSING {
            entry.store(0, Ordering::Relaxed);
        }
        // A fork child's copy says how its parent's helper waited at the fork.
        QUIET.store(false, Ordering::SeqCst);
        LOOK_NS.store(batch_ns(&event), Ordering::Relaxed);
        Some(Keeper {
            event,
            state: 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(WORK.load(Ordering::Relaxed)),
            idle: IDLE_POLLS,
            quick: QUICK_LOOKS,
            budget: crate::sources::budget::Controller::default(),
            keep_phase: sampler.clock == crate::config::Clock::Wall && event.is_time(),
        })
    }

    /// One look at the work threads asked for: opens their events, draws and arms a new
    /// interval for every thread sampled since the last look (the one a thread's first
    /// sample drew, for that thread), closes the descriptors of threads that ended.
    /// Returns the value of [`WORK`] it saw first, for [`Keeper::wait`].
    pub fn look(&mut self, sampler: &Sampler) -> u32 {
        let seen = WORK.load(Ordering::Acquire);
        self.budget.check(
            sampler.stats.handler.total_ns(),
            crate::sources::helper::TARGET.load(Ordering::Relaxed),
        );
        let mut armed = false;
        let mut starting = false;
        sampler.slots.for_each(|slot| {
            if slot.open_state.load(Ordering::Acquire) == ASKED
                && slot
                    .open_state
                    .compare_exchange(ASKED, OPENING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                open_for(&self.event, slot);
                starting = true;
            }
            let wanted = slot.want_period.swap(0, Ordering::AcqRel);
            let fd = slot.event_fd.load(Ordering::Acquire);
            if wanted != 0 && fd != 0 {
                // The mean of the draws follows the intervals the thread got (`weigh`); a
                // thread's first sample drew its next interval itself.
                let draw = match wanted {
                    ANY_DRAW => crate::sources::random::interval(
                        &mut self.state,
                        mean_draw(&self.event, slot),
                        MIN_PERIOD_NS,
                    ),
                    draw => {
                        starting = true;
                        draw
                    }
                };
                let period = if self.keep_phase {
                    next_period(fd - 1, slot, draw, wanted == ANY_DRAW)
                } else {
                    draw
                };
                slot.drawn.store(period, Ordering::Relaxed);
                rearm(fd - 1, period);
                armed = true;
            }
        });
        for entry in &CLOSING {
            // Read first: a swap writes, and the helper looks here on every pass.
            let fd = match entry.load(Ordering::Acquire) {
                0 => 0,
                _ => entry.swap(0, Ordering::AcqRel),
            };
            if fd != 0 {
                // SAFETY: a descriptor of this process's table that a thread gave up.
                unsafe { raw(libc::SYS_close, [(fd - 1) as u64, 0, 0, 0]) };
            }
        }
        self.idle = if armed {
            0
        } else {
            self.idle.saturating_add(1)
        };
        self.quick = if starting {
            QUICK_LOOKS
        } else {
            self.quick.saturating_sub(1)
        };
        seen
    }

    /// Waits for more work after a [`Keeper::look`] that saw `seen`: while samples come,
    /// for a random interval around [`batch_ns`]; else until a thread wakes it. At most
    /// `at_most_ns`.
    pub fn wait(&mut self, seen: u32, at_most_ns: u64) {
        if self.event.randomized() && self.idle < IDLE_POLLS {
            // Wall mode's loop looks at every pass (`at_most_ns`, a period at most): its
            // cadence is the quick one, as before.
            let quick = batch_ns(&self.event);
            let mean = if self.quick > 0 || self.keep_phase {
                quick
            } else {
                quiet_batch_ns(&self.event)
            };
            let wait = crate::sources::random::interval(&mut self.state, mean, 1).min(at_most_ns);
            LOOK_NS.store(mean, Ordering::Relaxed);
            if mean == quick {
                crate::sources::helper::helper_wait(&WORK, seen, wait);
            } else {
                wait_telling(&QUIET, seen, wait);
            }
        } else {
            wait_telling(&ASLEEP, seen, at_most_ns.min(1_000_000_000));
        }
    }
}

/// Opens the event `slot`'s thread asked for (its state `OPENING`) and says how it went:
/// `OPENED` with `Slot::event_fd` set, or `REFUSED`. A thread that stopped sampling
/// meanwhile (`CANCELLED`, or a new request of the slot's next thread, `ASKED`) does not
/// get it: the descriptor is closed unless `disarm` already took it. In the helper process.
fn open_for(event: &Event, slot: &Slot) {
    let tid = slot.open_tid.load(Ordering::Relaxed);
    let first = slot.open_first.load(Ordering::Relaxed);
    // A first interval taken by a one-shot event ([`arm`]): the thread's event overflows
    // first `next` after it.
    let next = slot.open_next.load(Ordering::Relaxed);
    match open(event, tid, first + next) {
        Ok(fd) => {
            slot.arm_count.store(0, Ordering::Relaxed);
            // Published before the state: a `disarm` that cancels from here on takes it.
            slot.event_fd.store(fd + 1, Ordering::Release);
            let opened = slot
                .open_state
                .compare_exchange(OPENING, OPENED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if !opened
                && slot
                    .event_fd
                    .compare_exchange(fd + 1, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                // SAFETY: the descriptor just opened, which nobody else took.
                unsafe { raw(libc::SYS_close, [fd as u64, 0, 0, 0]) };
            } else if opened && next != 0 {
                add_one_shot(event, slot, tid, first, fd);
            }
        }
        Err(e) => {
            slot.open_errno.store(e, Ordering::Relaxed);
            if slot
                .open_state
                .compare_exchange(OPENING, REFUSED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
                && !slot.open_waits.load(Ordering::Acquire)
            {
                REFUSED_ERRNO.store(e, Ordering::Relaxed);
                REFUSED_THREADS.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    crate::sources::helper::wake(&slot.open_state);
}

/// Gives `slot`'s thread `tid`, whose event `fd` was just opened to overflow first `next`
/// after `first`, the one-shot event of its first sample, after `first` (at least
/// [`ONE_SHOT_SHORTEST_NS`]; [`arm`]). When the kernel refuses it, the thread's first
/// sample comes from its own event, `next` later than drawn (armed at `first` instead, the
/// event would overflow at it again and again). In the helper process.
fn add_one_shot(event: &Event, slot: &Slot, tid: libc::pid_t, first: u64, fd: libc::c_int) {
    let take_back = |once: libc::c_int| {
        if slot
            .first_shot_fd
            .compare_exchange(once + 1, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: our descriptor, which the thread did not take.
            unsafe { raw(libc::SYS_close, [once as u64, 0, 0, 0]) };
        }
    };
    if let Ok(once) = open_one_shot(event, tid, first.max(ONE_SHOT_SHORTEST_NS)) {
        // Published before it can fire, and taken back when the thread stopped sampling
        // meanwhile (its `disarm` took the event, or will take this).
        slot.first_shot_fd.store(once + 1, Ordering::Release);
        if slot.event_fd.load(Ordering::Acquire) != fd + 1 || !fire_once(once) {
            take_back(once);
        }
    }
}

/// Sets the event behind `fd` to overflow `period` ns of CPU time from now, and every
/// `period` ns after that until the next call (`PERF_EVENT_IOC_PERIOD`, which restarts
/// the event's hrtimer with the new period: Linux `__perf_event_period`). The event keeps
/// running meanwhile: were the helper process late, the thread's next sample comes at the
/// previous interval rather than not at all. One cross-CPU call to the thread's CPU where
/// it runs (`event_function_call`); disabling the event at each overflow
/// (`PERF_EVENT_IOC_REFRESH` 1) took a second one to enable it again. In the helper process.
fn rearm(fd: libc::c_int, period: u64) {
    REARMS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: PERF_EVENT_IOC_PERIOD reads a u64 through the pointer.
    unsafe {
        raw(
            libc::SYS_ioctl,
            [
                fd as u64,
                sys::PERIOD as u64,
                &period as *const u64 as u64,
                0,
            ],
        );
    }
}

/// The period to arm on `slot`'s event (descriptor `fd`, a time event) for its next sample
/// to come `draw` ns of CPU time after its latest one rather than after the re-arm (wall
/// mode). `PERF_EVENT_IOC_PERIOD` restarts the event: re-armed while the thread was
/// blocked, as a wall pass often finds it, the restart fell where it blocked, and the CPU
/// time right after each blocking call (a handler's reply after its sleep) was sampled
/// less than the rest. The handler threads of a thread-per-request server then had their
/// sampled CPU time ending 0.92 ms after their last sample on average, where the `before`
/// of first samples stands for 0.54 (`random::first_interval`): 4–6 % of their CPU time
/// was missing, and their `cpu_part` 2–5 % short.
///
/// The latest overflow is found from the event's count now (one `read`) and at the last
/// arming ([`Slot::arm_count`], with the period then, [`Slot::drawn`]): for a request of a
/// thread's first sample (`any_draw` false), its first overflow, whose repeats were not
/// samples ([`weigh`]); else the latest. When more than half the draw has run since, the
/// draw is armed from now as before: a short period would repeat until the next look (the
/// kernel repeats the period armed), each repeat a sample. In the helper process.
fn next_period(fd: libc::c_int, slot: &Slot, draw: u64, any_draw: bool) -> u64 {
    let Some(count) = event_count(fd) else {
        return draw;
    };
    let since_arm = count.saturating_sub(slot.arm_count.swap(count, Ordering::Relaxed));
    period_keeping_phase(
        since_arm,
        slot.drawn.load(Ordering::Relaxed),
        draw,
        any_draw,
    )
}

/// [`next_period`]'s arithmetic: the event counted `since_arm` ns since it was last armed
/// with period `armed` (overflowing every `armed` ns since); the next sample is wanted
/// `draw` ns after the latest overflow (`any_draw`) or after the first (a thread's first
/// sample, whose repeats were not samples). Returns the period to arm now.
fn period_keeping_phase(since_arm: u64, armed: u64, draw: u64, any_draw: bool) -> u64 {
    let armed = armed.max(1);
    let elapsed = if any_draw {
        since_arm % armed
    } else {
        since_arm.saturating_sub(armed)
    };
    if elapsed < draw / 2 {
        draw - elapsed
    } else {
        draw
    }
}

/// The CPU time of `slot`'s thread (ns since it started, less what it ran between its
/// [`arm`] and its event's opening), from its `task-clock` event's count: exact at any
/// moment, where its `schedstat` is brought up to date only at the thread's ticks and
/// switches. `None` without an open time event (not yet opened, POSIX timers, other
/// events). In the helper process (which holds the descriptor); reading a running
/// thread's count interrupts its CPU briefly (the kernel's cross-CPU read).
pub fn thread_cpu_from_event(event: &Event, slot: &Slot) -> Option<u64> {
    if !event.is_time() {
        return None;
    }
    let fd = slot.event_fd.load(Ordering::Acquire);
    if fd == 0 {
        return None;
    }
    let count = event_count(fd - 1)?;
    Some(slot.armed_cpu_ns.load(Ordering::Relaxed) + count)
}

/// The count of the perf event behind `fd` (`read_format` 0: one `u64`; ns of CPU time for
/// `task-clock`). `None` when the read fails. In the helper process.
fn event_count(fd: libc::c_int) -> Option<u64> {
    let mut count = 0u64;
    // SAFETY: reads at most 8 bytes into `count`.
    let n = unsafe {
        raw(
            libc::SYS_read,
            [fd as u64, &mut count as *mut u64 as u64, 8, 0],
        )
    };
    (n == 8).then_some(count)
}

/// The CPU time of thread `tid` (of this process), ns; `None` once it has ended.
fn thread_cpu_ns(tid: libc::pid_t) -> Option<u64> {
    clock_ns(crate::sources::timer::thread_cpu_clock(tid))
}

/// The weight of a sample the overflow of descriptor `fd` triggers on `slot`'s thread:
/// for `task-clock`, the CPU time the thread used since its previous sample (its CPU
/// clock, which counts what the event counts), in ticks of `event.period` ns with the
/// remainder carried in the slot; for other events, one period of events. For a
/// randomized event, the helper process is asked to draw and arm a new interval on its
/// next look. `None` when `fd` is neither the thread's event nor its one-shot event (a
/// signal of an event already closed), the one-shot came after the thread's first sample,
/// or the overflow is a thread's first interval repeating.
/// Async-signal-safe; called by the owner thread's handler.
pub fn weigh(event: &Event, slot: &Slot, fd: libc::c_int) -> Option<Weight> {
    // The one-shot event of the thread's first sample ([`arm`]) fires once: its descriptor
    // is given back to the helper process to close, and it is the first sample unless the
    // thread's own event came first.
    // Read first: a compare-exchange writes, and this runs at every sample.
    let one_shot = slot.first_shot_fd.load(Ordering::Relaxed) == fd + 1
        && slot
            .first_shot_fd
            .compare_exchange(fd + 1, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
    if one_shot {
        queue_close(fd + 1);
        if slot.had_sample.load(Ordering::Relaxed) {
            return None;
        }
    } else {
        let own = slot.event_fd.load(Ordering::Relaxed);
        if own == 0 || own - 1 != fd {
            return None;
        }
    }
    if !event.is_time() {
        return Some(Weight {
            here: event.period,
            before: 0,
        });
    }
    let now = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)?;
    let interval = now.saturating_sub(slot.counted.load(Ordering::Relaxed));
    let asked = slot.want_period.load(Ordering::Acquire);
    if asked > ANY_DRAW && interval < asked - asked / 8 {
        // The thread's first interval repeating until the helper process arms the one its
        // first sample drew: not a sample the draws asked for (a thread shorter than a
        // period would otherwise be sampled at its first interval's multiples, its last
        // moments left out). Its time is in the next sample's weight.
        return None;
    }
    // The period armed now, and the longest interval this one can be (a re-arm since the
    // previous sample makes it what had run of the period armed then, plus the new one).
    let armed = slot.drawn.load(Ordering::Relaxed);
    let bound = interval_bound(slot);
    slot.armed_at_sample.store(armed, Ordering::Relaxed);
    // The thread's first sample also stands for the part of its interval before the
    // thread's start ([`crate::sources::random::first_interval`]).
    let before = slot.before_start.swap(0, Ordering::Relaxed);
    slot.carry.fetch_add(before, Ordering::Relaxed);
    let weight = take_since_last(event, slot, now);
    // Overflows that fell in kernel mode were skipped (`exclude_kernel`), each a period
    // later than the last: what the interval holds beyond its bound and a period is that
    // time, spent in the kernel (page faults, system calls) by the code that ran since the
    // previous sample. It goes to the previous sample (the code before it, as a 64 MiB
    // buffer's page faults before the next phase starts) rather than to this one.
    let usual = bound.div_ceil(event.period) + 1;
    let before = weight.saturating_sub(usual);
    let weight = Weight {
        here: weight - before,
        before,
    };
    if event.randomized() {
        // The helper process draws the next interval on its next look ([`Keeper::look`])
        // and the event overflows at it until the look after, so that an interval that
        // holds a re-arm is longer than its draw by what had run of the previous one, and
        // a short draw gives more samples than a long one (the samples' mean interval is
        // the draws' harmonic mean, 9 % below their mean at 10 kHz). So the draws' mean is
        // the period less `short`, which follows the intervals the thread gets: each
        // sample adds its interval's difference from the period (within a period),
        // divided by 16 and by the samples per look, so that every look moves it by about
        // a sixteenth of the last look's mean difference; within half a period either
        // way. Samples then come at the rate asked for, and the draws keep their spread.
        let period = event.period as i64;
        let error = (interval.min(i64::MAX as u64) as i64 - period).clamp(-period, period);
        let per_look = (LOOK_NS.load(Ordering::Relaxed) / event.period).max(1) as i64;
        let short = (slot.short.load(Ordering::Relaxed) as i64 + error / (16 * per_look))
            .clamp(-period / 2, period / 2);
        slot.short.store(short as u64, Ordering::Relaxed);
        let first_sample = !slot.had_sample.swap(true, Ordering::Relaxed);
        if first_sample && one_shot {
            // The thread's first sample, from its one-shot event: its own event overflows
            // `open_next` after it, an interval drawn already ([`arm`]); nothing to arm.
            FIRST_SHOTS.fetch_add(1, Ordering::Relaxed);
        } else if first_sample {
            // The thread's first sample: its first interval was drawn from zero up
            // (`random::first_interval`), and its repeats until the helper arms the next
            // one are not samples (above). The next interval is drawn here and armed at
            // once if the first was shorter than any draw.
            let mut state = slot.random.load(Ordering::Relaxed);
            let draw =
                crate::sources::random::interval(&mut state, mean_draw(event, slot), MIN_PERIOD_NS);
            slot.random.store(state, Ordering::Relaxed);
            slot.want_period
                .store(draw.max(ANY_DRAW + 1), Ordering::Release);
            if armed < event.period / 4 {
                wake_keeper();
            } else {
                nudge_keeper(true);
            }
        } else if slot
            .want_period
            .compare_exchange(0, ANY_DRAW, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            // One request per look: a request still pending is not repeated.
            nudge_keeper(false);
        }
    }
    Some(weight)
}

/// The mean of `slot`'s thread's next random interval, ns of CPU time: the period less
/// `Slot::short` (which `weigh` keeps following the intervals the thread gets), and at
/// least twice the shortest period the kernel arms.
fn mean_draw(event: &Event, slot: &Slot) -> u64 {
    let short = slot.short.load(Ordering::Relaxed) as i64;
    (mean_interval(event) as i64 - short).max(2 * MIN_PERIOD_NS as i64) as u64
}

/// The longest interval a thread's current one can be, ns of CPU time: the period armed
/// now, plus, when the helper process re-armed the event since the thread's latest
/// sample, what had run of the period armed then (less than all of it).
fn interval_bound(slot: &Slot) -> u64 {
    let armed = slot.drawn.load(Ordering::Relaxed);
    match slot.armed_at_sample.load(Ordering::Relaxed) {
        then if then == armed => armed,
        then => armed + then,
    }
}

/// Of `since` ns of CPU time after a thread's last sample, the part up to its event's latest
/// overflow since, which took no sample: the first such overflow came at most `due` ns
/// after the sample ([`interval_bound`]) and the next ones every `armed` ns (the period
/// armed now). 0 when none can have come (`since` ≤ `due`): all of it is the tail.
fn before_last_overflow(since: u64, due: u64, armed: u64) -> u64 {
    if since <= due {
        return 0;
    }
    since - (since - due) % armed.max(1)
}

/// The longest interval between two samples of a thread on `event`, ns of CPU time: a
/// re-arm's ([`interval_bound`]), two of the longest draws (1.5 periods each).
pub fn longest_interval_ns(event: &Event) -> u64 {
    3 * mean_interval(event)
}

/// A `task-clock` sample's weight, in ticks ([`weigh`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Weight {
    /// Ticks for the stack the sample captures.
    pub here: u64,
    /// Ticks of overflows skipped in kernel mode, for the thread's previous sample.
    pub before: u64,
}

/// Counts `now` (the thread's CPU time, ns) as read: returns what it counted since the
/// previous reading, in ticks of `event.period` ns, rounded at random with the remainder
/// carried (`Slot::carry`, within a period either way).
///
/// Why at random: rounded down with the remainder carried, the ticks a sample gets depend
/// on where the carry wraps, which moves with the samples' CPU time exactly as their phase
/// against a program that repeats with the period does — the carry and the phase advance
/// by the same amount at every sample — so which phase got the extra ticks was fixed for a
/// whole run. A loop repeating every 1 ms (75 % / 25 %) sampled at 1 kHz had its share off
/// by up to 4 points from run to run (sd 2.2 points, the samples' own 0.6), in ticks only.
/// Rounding `x` up with probability `frac(x)` (`floor(x + u)`, `u` uniform) is unbiased at
/// every sample and independent of the phase; the carry keeps the total exact (within a
/// tick). The weights then vary a little more (their squares are counted:
/// `Stats::ticks_squared`, which every report's interval takes into account).
pub fn take_since_last(event: &Event, slot: &Slot, now: u64) -> u64 {
    let last = slot.counted.swap(now, Ordering::Relaxed);
    let delta = now.saturating_sub(last).min(i64::MAX as u64 / 2) as i64;
    let period = event.period as i64;
    // The carry is an i64 kept as its bits.
    let total = delta + slot.carry.load(Ordering::Relaxed) as i64;
    let mut state = slot.random.load(Ordering::Relaxed);
    let dither = (crate::sources::random::uniform(&mut state) * period as f64) as i64;
    slot.random.store(state, Ordering::Relaxed);
    let ticks = (total + dither.min(period - 1)).div_euclid(period).max(0);
    slot.carry
        .store((total - ticks * period) as u64, Ordering::Relaxed);
    ticks as u64
}

/// The first intervals that a one-shot event takes ([`arm`]), ns of CPU time: below 100 µs
/// (three times what an hrtimer expiry costs a thread in this VM), and below half the
/// mean interval (every later draw's least) at rates above 5 kHz: 2.5 % of threads' first
/// intervals at the default 250 Hz, 10 % at 1 kHz.
fn one_shot_below(event: &Event) -> u64 {
    ONE_SHOT_BELOW_NS.min(mean_interval(event) / 2)
}

/// [`one_shot_below`]'s bound, ns.
const ONE_SHOT_BELOW_NS: u64 = 100_000;

/// The shortest interval a one-shot event is armed with, ns of CPU time: a first interval
/// drawn shorter is taken at this one (0.6 % of threads at 250 Hz, 2.5 % at 1 kHz; their
/// first sample at most 15 µs later than drawn). An expiry in kernel mode is skipped
/// (`exclude_kernel`) without using up the event's one overflow, and the hrtimer expires
/// again a period later: at 10 µs, a system call that copied 256 MiB took 160 ms instead
/// of 20–29 ms, at 15 µs 29 ms, at 25 µs 23 ms (a C test on this VM, where an expiry costs
/// 13–16 µs without a signal).
const ONE_SHOT_SHORTEST_NS: u64 = 25_000;

/// How [`arm`] asks the helper process for a thread's event, and whether it waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Returns at once, waking the helper only if it sleeps (a fork child, or threads
    /// re-armed after a failed `exec`).
    No,
    /// A thread that starts: wakes the helper process, so that the event opens within its
    /// wake-up (tens of microseconds) rather than at its next look (up to 2 ms later), and
    /// goes on; a refusal is counted and said at exit ([`refusals`]).
    Wake,
    /// The constructor and the threads it adopts: waits at most 2 s and says whether the
    /// event opened, so that a refusal is said at once.
    ForAnswer,
}

/// Starts sampling `event` on `slot`'s thread `tid`: has the helper process open its
/// event, the first sample after a random interval for a randomized event
/// ([`crate::sources::random::first_interval`]: a thread running less than half a period
/// is sampled with probability its time / period) and after a period otherwise, as `wait`
/// says.
///
/// A thread that starts wakes the helper process. When it was left to the helper's next
/// look, a thread was not sampled in its first hundreds of microseconds, and a server that
/// starts a thread per request had its handlers' work, often all of it, under
/// `<unsampled thread time>` (shares of 15–23 % where the handlers measured 37 %). Waiting
/// for the event as well cost each thread start +50 µs wall on this VM, and sampled the
/// handlers no better (docs/design.md). Time until the event opens is in the thread's
/// first sample's weight (or its tail, [`disarm`]).
///
/// A first interval shorter than [`one_shot_below`] is not armed on the thread's event,
/// which would overflow at it again and again until the helper process re-arms it: the
/// kernel restarts the hrtimer of a `task-clock` event a period after each expiry,
/// whatever the expiry cost, and in this VM an expiry costs the thread 28–36 µs (a timer
/// interrupt through the hypervisor, and the signal). At a period of 10–15 µs a thread
/// hardly ran: 25 µs of work in a handler took 1.6–90 ms, and a thread's first sample
/// (40–80 µs on a short thread) was held up to 0.47 s while the helper waited for it to
/// ask for its next interval (1 run in 2 of 2,000 short threads at 250 Hz had such a
/// handler; their CPU time went from 0.2 s to 0.3–1.2 s). Raising the first interval
/// instead moves short threads' first samples later (a floor at an eighth of the mean put
/// 6.8 points of 3,000 0.4 ms threads' first phase into their second). So the thread's
/// event is opened with the first interval plus a next one drawn now (`Slot::open_next`),
/// and a one-shot event, enabled for a single overflow (`PERF_EVENT_IOC_REFRESH` 1, after
/// which the kernel disables it), takes the first sample at the first interval; the
/// sample gives its descriptor back ([`weigh`]), and no re-arm is needed for the next.
///
/// # Errors
/// A message naming what failed: the helper process is not running, or (with
/// [`Wait::ForAnswer`]) the kernel refused the event or the helper did not answer in 2 s.
pub fn arm(event: &Event, slot: &Slot, tid: libc::pid_t, wait: Wait) -> Result<(), String> {
    let mut state = crate::sources::random::seed(tid as u64);
    let (first, before) = if event.randomized() {
        crate::sources::random::first_interval(&mut state, mean_interval(event), MIN_PERIOD_NS)
    } else {
        (event.period, 0)
    };
    let now = thread_cpu_ns(tid).unwrap_or(0);
    ask_for_event(event, slot, tid, (first, before), state, now, wait);
    let failed = |why: String| format!("cannot open the {} event: {why}", event.name);
    if !crate::sources::helper::running() {
        slot.open_state.store(IDLE, Ordering::Relaxed);
        return Err(failed(
            "the helper process that holds the events is not running".into(),
        ));
    }
    match wait {
        Wait::No => {
            // Woken only if it sleeps: while samples come it looks on its own timer.
            nudge_keeper(false);
            return Ok(());
        }
        Wait::Wake => {
            wake_keeper();
            return Ok(());
        }
        Wait::ForAnswer => wake_keeper(),
    }
    let deadline = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0) + OPEN_WAIT_NS;
    loop {
        let state = slot.open_state.load(Ordering::Acquire);
        match state {
            OPENED => {
                slot.open_state.store(IDLE, Ordering::Relaxed);
                return Ok(());
            }
            REFUSED => {
                slot.open_state.store(IDLE, Ordering::Relaxed);
                return Err(failed(describe(slot.open_errno.load(Ordering::Relaxed))));
            }
            _ => {}
        }
        let now = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(u64::MAX);
        if now > deadline {
            slot.open_state.store(IDLE, Ordering::Relaxed);
            return Err(failed(describe(libc::ETIMEDOUT)));
        }
        crate::sources::helper::wait(&slot.open_state, state, 50_000_000);
    }
}

/// Sets `slot` up for its thread `tid`'s event and asks the helper process to open it
/// ([`open_for`]): the first interval `first.0` ns of CPU time (with `first.1` ns before
/// it that the first sample stands for, [`crate::sources::random::first_interval`]), a
/// one-shot event for a first interval below [`one_shot_below`], the thread's CPU time
/// counted from `counted` ns of its clock, `state` the thread's random state. Does not
/// wake the helper. Async-signal-safe.
fn ask_for_event(
    event: &Event,
    slot: &Slot,
    tid: libc::pid_t,
    first: (u64, u64),
    mut state: u64,
    counted: u64,
    wait: Wait,
) {
    let (first, before) = first;
    let next = if event.randomized() && first < one_shot_below(event) {
        crate::sources::random::interval(&mut state, mean_interval(event), MIN_PERIOD_NS)
    } else {
        0
    };
    give_back_one_shot(slot);
    slot.open_next.store(next, Ordering::Relaxed);
    slot.random.store(state, Ordering::Relaxed);
    slot.counted.store(counted, Ordering::Relaxed);
    slot.armed_cpu_ns.store(counted, Ordering::Relaxed);
    slot.carry.store(0, Ordering::Relaxed);
    slot.before_start.store(before, Ordering::Relaxed);
    // The period the thread's event is opened with ([`open_for`]).
    slot.drawn.store(first + next, Ordering::Relaxed);
    slot.armed_at_sample.store(first + next, Ordering::Relaxed);
    slot.had_sample.store(false, Ordering::Relaxed);
    slot.short.store(0, Ordering::Relaxed);
    slot.want_period.store(0, Ordering::Relaxed);
    slot.open_tid.store(tid, Ordering::Relaxed);
    slot.open_first.store(first, Ordering::Relaxed);
    slot.open_waits
        .store(wait == Wait::ForAnswer, Ordering::Relaxed);
    slot.open_state.store(ASKED, Ordering::Release);
}

/// Moves the calling thread `tid`, whose POSIX timer has just been deleted in its
/// `SIGPROF` handler ([`crate::sources::late`]), to its perf event: the helper process is
/// woken to open it. Its CPU time is counted from `counted` ns of its clock (its timer's
/// last expiration), so that the time until the event's first sample is in that sample's
/// weight; its first interval is an ordinary draw, the time before it counted already.
/// False when no helper process runs. Async-signal-safe.
pub fn arm_after_timer(event: &Event, slot: &Slot, tid: libc::pid_t, counted: u64) -> bool {
    if !crate::sources::helper::running() {
        return false;
    }
    let mut state = slot.random.load(Ordering::Relaxed);
    if state == 0 {
        state = crate::sources::random::seed(tid as u64);
    }
    let first = if event.randomized() {
        crate::sources::random::interval(&mut state, mean_interval(event), MIN_PERIOD_NS)
    } else {
        event.period
    };
    ask_for_event(event, slot, tid, (first, 0), state, counted, Wait::Wake);
    wake_keeper();
    true
}

/// Stops sampling on `slot`'s thread: has the helper process close its event and
/// returns the CPU time the thread used since its last sample, in ticks (as
/// [`take_since_last`], the remainder rounded at random), for `task-clock`; `None` for
/// other events, a thread without event, or one that has ended. −1 when the thread's
/// last samples were rounded up beyond what it ran after them (a negative carry), with the
/// probability of that excess's share of a period: the caller takes that tick back, so
/// that a thread's ticks are its CPU time in expectation however short it is (a thread per
/// request sampled once: rounded up without being taken back, such threads were counted
/// a sixth of a period too much each). Async-signal-safe.
pub fn disarm(event: &Event, slot: &Slot) -> Option<i64> {
    // An event asked for and not open yet: the helper process closes it when it is.
    let mut cancelled = false;
    for pending in [ASKED, OPENING] {
        cancelled |= slot
            .open_state
            .compare_exchange(pending, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
    }
    // A one-shot event that has not fired (a thread that ended before its first sample).
    give_back_one_shot(slot);
    let fd = slot.event_fd.swap(0, Ordering::AcqRel);
    if fd == 0 && !cancelled {
        return None;
    }
    slot.want_period.store(0, Ordering::Relaxed);
    if fd != 0 {
        queue_close(fd);
    }
    if !event.is_time() {
        return None;
    }
    let now = thread_cpu_ns(slot.open_tid.load(Ordering::Relaxed))?;
    // What the thread ran after its last sampling instant is not counted: the `before` of
    // first samples stands for it (`random::first_interval`). An overflow after its last
    // sample that took none (in kernel mode, `exclude_kernel`; a repeat of its first
    // interval, [`weigh`]; a signal lost) was a sampling instant all the same: the time up
    // to the latest such overflow is counted, and only what follows it is the tail.
    // (Counted from the first such overflow on, as before, up to an interval per thread
    // went missing.) A thread never sampled has no `before` to count either, and its
    // first overflow may not have come at all (its event opened after it had run a
    // while): its time beyond its first interval is counted, as before (counted up to the
    // latest overflow, 3,000 threads of 0.4 ms had 13 % of the profile unsampled, where
    // 5–7 % was).
    slot.before_start.store(0, Ordering::Relaxed);
    let since = now.saturating_sub(slot.counted.swap(now, Ordering::Relaxed));
    let due = interval_bound(slot);
    let missed = if slot.had_sample.load(Ordering::Relaxed) {
        before_last_overflow(since, due, slot.drawn.load(Ordering::Relaxed))
    } else {
        since.saturating_sub(due)
    };
    // The carry is an i64 kept as its bits (`take_since_last`): it is negative when the
    // ticks counted ran ahead of the CPU time.
    let total =
        missed.min(i64::MAX as u64 / 2) as i64 + slot.carry.swap(0, Ordering::Relaxed) as i64;
    let period = event.period as i64;
    let mut tail = total.div_euclid(period);
    // The CPU time left over from the ticks (less than one): one more tick with the
    // probability of its share of a period (for a negative total, the tick taken back
    // one fewer).
    let left = total.rem_euclid(period);
    if left > 0 {
        let mut state = slot.random.load(Ordering::Relaxed);
        if crate::sources::random::uniform(&mut state) * event.period as f64 <= left as f64 {
            tail += 1;
        }
        slot.random.store(state, Ordering::Relaxed);
    }
    Some(tail.max(-1))
}

/// Queues descriptor `fd_plus_one` − 1 of the helper process's table for closing on its
/// next pass (within its longest sleep, 1 s): an event whose thread has ended no longer
/// counts, and a wake-up here cost each thread's exit a cross-CPU interrupt. Only a queue
/// filling up (a program that ends many threads while the helper sleeps) wakes it.
/// Async-signal-safe.
fn queue_close(fd_plus_one: libc::c_int) {
    let queued = CLOSING.iter().position(|entry| {
        entry
            .compare_exchange(0, fd_plus_one, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    });
    if queued.is_none_or(|at| at >= CLOSING.len() / 4) {
        wake_keeper();
    }
}

/// Gives `slot`'s one-shot event, if it has one that has not fired, back to the helper
/// process to close ([`queue_close`]). Async-signal-safe.
fn give_back_one_shot(slot: &Slot) {
    let shot = slot.first_shot_fd.swap(0, Ordering::AcqRel);
    if shot != 0 {
        queue_close(shot);
    }
}

/// In a fork child: the events the slots name are in the parent's helper process;
/// forget them (the child's helper process opens its own, and drops the parent's queue
/// of descriptors to close when it starts: [`serve`]). Async-signal-safe.
pub fn forget_after_fork(slot: &Slot) {
    slot.event_fd.store(0, Ordering::Release);
    slot.first_shot_fd.store(0, Ordering::Relaxed);
    slot.want_period.store(0, Ordering::Relaxed);
    slot.open_state.store(IDLE, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_up_to_the_latest_overflow_without_a_sample_is_counted() {
        // No overflow can have come yet: all of it is the tail.
        assert_eq!(before_last_overflow(900, 1_000, 1_000), 0);
        assert_eq!(before_last_overflow(1_000, 1_000, 1_000), 0);
        // The first overflow at 1,000, the next every 300: 1,300 and 1,600 came by 1,750.
        assert_eq!(before_last_overflow(1_200, 1_000, 300), 1_000);
        assert_eq!(before_last_overflow(1_750, 1_000, 300), 1_600);
        assert_eq!(before_last_overflow(1_600, 1_000, 300), 1_600);
    }

    #[test]
    fn a_rearm_keeps_the_phase_of_the_latest_overflow() {
        // Armed with 1,000, the event counted 2,300: it overflowed at 1,000 and 2,000, the
        // latest 300 ago; a draw of 900 is then due in 600.
        assert_eq!(period_keeping_phase(2_300, 1_000, 900, true), 600);
        // A thread's first sample came at the first overflow (1,000): 1,300 since then, more
        // than half the draw of 2,000, so the draw is armed from now.
        assert_eq!(period_keeping_phase(2_300, 1_000, 2_000, false), 2_000);
        assert_eq!(period_keeping_phase(1_100, 1_000, 2_000, false), 1_900);
        // More than half the draw has run since the latest overflow: armed whole (a short
        // period would repeat until the next look).
        assert_eq!(period_keeping_phase(1_950, 1_000, 1_000, true), 1_000);
        // Nothing counted since the arming (a thread blocked since): the draw minus nothing.
        assert_eq!(period_keeping_phase(0, 1_000, 800, true), 800);
    }

    #[test]
    fn quiet_looks_come_every_sixteen_periods_and_never_more_often_than_quick_ones() {
        let ms = 1_000_000;
        // 1 kHz: 4 ms quick, 16 ms quiet; the default 250 Hz: 4 and 64 ms; from 4 kHz on
        // both 4 ms (16 periods are 4 ms or less).
        for (hz, quick, quiet) in [
            (1_000, 4, 16),
            (250, 4, 64),
            (4_000, 4, 4),
            (10_000, 4, 4),
            (100, 10, 160),
        ] {
            let event = Event::task_clock(1_000_000_000 / hz);
            assert_eq!(batch_ns(&event), quick * ms, "{hz} Hz");
            assert_eq!(quiet_batch_ns(&event), quiet * ms, "{hz} Hz");
        }
    }

    #[test]
    fn events_by_name_with_periods() {
        let e = Event::parse("task-clock", 1_000_000).unwrap();
        assert_eq!(
            (e.counter, e.period, e.is_time()),
            ("PERF_TICKS", 1_000_000, true)
        );
        let e = Event::parse("page-faults", 4_000_000).unwrap();
        assert_eq!(
            (e.name, e.counter, e.period),
            ("page-faults", "PERF_PAGE_FAULTS", 100)
        );
        assert!(!e.randomized());
        let e = Event::parse("cs/period=3/", 4_000_000).unwrap();
        assert_eq!(
            (e.name, e.counter, e.period),
            ("context-switches", "PERF_CONTEXT_SWITCHES", 3)
        );
        let e = Event::parse("cycles", 4_000_000).unwrap();
        assert_eq!(
            (e.kind, e.counter),
            (sys::PERF_TYPE_HARDWARE, "PERF_CYCLES")
        );
        let e = Event::parse("r1a8/period=5000/", 4_000_000).unwrap();
        assert_eq!(
            (e.kind, e.config, e.counter, e.period),
            (sys::PERF_TYPE_RAW, 0x1a8, "PERF_RAW_1A8", 5000)
        );
        // task-clock's period is nanoseconds, at least the kernel's 10 µs.
        assert_eq!(
            Event::parse("task-clock/period=500/", 1).unwrap().period,
            MIN_PERIOD_NS
        );
        let bad = Event::parse("cycels", 1).unwrap_err();
        assert!(
            bad.contains("\"cycels\" is not an event") && bad.contains("page-faults"),
            "{bad}"
        );
        let bad = Event::parse("cycles/period=0/", 1).unwrap_err();
        assert!(bad.contains("/period=N/"), "{bad}");
    }

    #[test]
    fn time_is_counted_in_ticks_rounded_at_random_with_the_remainder_carried() {
        let e = Event::task_clock(1_000_000);
        // Whole periods are whole ticks; the total is exact within a tick.
        let slot: Box<Slot> = crate::record::threads::tests::zeroed_slot();
        let (mut counted, mut now) = (0, 0);
        for step in [2_500_000, 500_000, 400_000, 600_000, 1_000_000, 3_000_000] {
            now += step;
            let ticks = take_since_last(&e, &slot, now);
            assert!(
                (ticks as f64 - step as f64 / 1e6).abs() < 2.0,
                "{step} ns: {ticks} ticks"
            );
            counted += ticks;
        }
        let carry = slot.carry.load(Ordering::Relaxed) as i64;
        assert_eq!(counted as i64 * 1_000_000 + carry, 8_000_000);
        assert!(carry.abs() < 1_000_000, "carry {carry}");
        // A program that repeats with the period (75 % of each in one phase), sampled at
        // random intervals (uniform over half to one and a half periods) as the helper
        // draws them: the phase's share of the ticks, over 100 runs of 3,000 samples, is
        // unbiased and varies about as much as the samples' own share (binomial sd 0.79
        // points). Rounded down with the remainder carried, it varied by 5.3 points: which
        // phase got the carried ticks was fixed for a whole run.
        let mut draws = 0x1234_5678_9abc_def1u64;
        let shares: Vec<f64> = (0..100)
            .map(|_| {
                let slot: Box<Slot> = crate::record::threads::tests::zeroed_slot();
                let (mut now, mut in_phase, mut all) = (0u64, 0u64, 0u64);
                now += (crate::sources::random::uniform(&mut draws) * 1e6) as u64;
                take_since_last(&e, &slot, now);
                for _ in 0..3000 {
                    now += crate::sources::random::interval(&mut draws, 1_000_000, 1);
                    let ticks = take_since_last(&e, &slot, now);
                    all += ticks;
                    if now % 1_000_000 < 750_000 {
                        in_phase += ticks;
                    }
                }
                100.0 * in_phase as f64 / all as f64
            })
            .collect();
        let mean = shares.iter().sum::<f64>() / shares.len() as f64;
        let sd = (shares.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / 99.0).sqrt();
        assert!((mean - 75.0).abs() < 0.5, "mean share {mean:.2}");
        assert!(
            sd < 1.2,
            "share's sd {sd:.2} points across runs (binomial 0.79)"
        );
    }

    #[test]
    fn a_thread_whose_event_is_refused_after_it_went_on_is_counted_and_said() {
        let e = Event::task_clock(1_000_000);
        if let Err(err) = probe(&e) {
            eprintln!("skipped: {} (perf events unavailable here)", describe(err));
            return;
        }
        // A thread that is gone by the time its event is opened: no such process.
        let gone = std::thread::spawn(|| unsafe { libc::gettid() })
            .join()
            .unwrap();
        let ask = |waits: bool| {
            let slot: Box<Slot> = crate::record::threads::tests::zeroed_slot();
            slot.open_tid.store(gone, Ordering::Relaxed);
            slot.open_first.store(1_000_000, Ordering::Relaxed);
            slot.open_waits.store(waits, Ordering::Relaxed);
            slot.open_state.store(OPENING, Ordering::Relaxed);
            let before = REFUSED_THREADS.load(Ordering::Relaxed);
            open_for(&e, &slot);
            assert_eq!(slot.open_state.load(Ordering::Relaxed), REFUSED);
            assert_eq!(slot.event_fd.load(Ordering::Relaxed), 0);
            assert_eq!(slot.open_errno.load(Ordering::Relaxed), libc::ESRCH);
            REFUSED_THREADS.load(Ordering::Relaxed) - before
        };
        // The constructor waits and says a refusal at once: not counted for the exit line.
        assert_eq!(ask(true), 0);
        // A thread that went on without waiting: counted, and said at exit with the reason.
        assert_eq!(ask(false), 1);
        let (threads, why) = refusals().unwrap();
        assert!(threads >= 1);
        assert_eq!(why, describe(libc::ESRCH));
    }

    #[test]
    fn task_clock_counts_the_threads_cpu_time() {
        let e = Event::task_clock(1_000_000);
        if let Err(err) = probe(&e) {
            eprintln!("skipped: {} (perf events unavailable here)", describe(err));
            return;
        }
        // No overflow in this test (its process has no SIGPROF handler).
        // SAFETY: gettid has no preconditions.
        let fd = open(&e, unsafe { libc::gettid() }, u64::MAX >> 2).unwrap();
        // SAFETY: fcntl on our descriptor.
        assert_ne!(
            unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC,
            0
        );
        let read_count = |fd: libc::c_int| {
            let mut value: u64 = 0;
            // SAFETY: reading 8 bytes into a u64.
            let n = unsafe { libc::read(fd, (&mut value as *mut u64).cast(), 8) };
            assert_eq!(n, 8);
            value
        };
        let cpu = || crate::sources::timer::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap();
        // The event counts what the thread's CPU clock counts: the handler weighs samples
        // by the clock, the helper process holding the event. Time the hypervisor takes
        // from a running vCPU (steal) is in the event's count and not in the clock: on a
        // loaded host one 20 ms window of the full matrix counted 23.7 ms, and in a
        // clean-clone CI three windows in a row were 11 % over. The first window within 5 %
        // is taken, of up to ten (the closest when none is).
        let window = || {
            let (start, cpu_start) = (read_count(fd), cpu());
            while cpu() - cpu_start < 20_000_000 {
                std::hint::black_box((0..1000).sum::<u64>());
            }
            (read_count(fd) - start, cpu() - cpu_start)
        };
        let close = |(counted, used): &(u64, u64)| counted.abs_diff(*used) < used / 20;
        let mut windows = Vec::new();
        for _ in 0..10 {
            windows.push(window());
            if windows.last().is_some_and(close) {
                break;
            }
        }
        let (counted, used) = windows
            .into_iter()
            .min_by_key(|(counted, used)| counted.abs_diff(*used))
            .unwrap();
        assert!(
            counted.abs_diff(used) < used / 20,
            "task-clock {counted} ns, CPU clock {used} ns"
        );
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn a_one_shot_event_overflows_once_and_then_stops() {
        let e = Event::task_clock(1_000_000);
        if let Err(err) = probe(&e) {
            eprintln!("skipped: {} (perf events unavailable here)", describe(err));
            return;
        }
        // SIGPROF blocked in this thread: the overflow's signal stays pending, to be read
        // here (the test process has no handler).
        // SAFETY: plain signal-set calls on local sets.
        let (sigprof, old) = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPROF);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            (set, old)
        };
        let pending = || {
            // SAFETY: a zero timeout; `info` is written by the kernel.
            unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                let zero = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                (libc::sigtimedwait(&sigprof, &mut info, &zero) == libc::SIGPROF).then_some(info)
            }
        };
        let count = |fd: libc::c_int| {
            let mut value: u64 = 0;
            // SAFETY: reading 8 bytes into a u64.
            assert_eq!(
                unsafe { libc::read(fd, (&mut value as *mut u64).cast(), 8) },
                8
            );
            value
        };
        // `ns` of CPU time, nearly all in user mode: the clock is read (a system call) once
        // per ~100 µs of work, since expiries in kernel mode are skipped (`exclude_kernel`)
        // and a loop of clock reads alone had none in user mode in 5 ms on a loaded machine.
        let spin = |ns: u64| {
            let cpu = || crate::sources::timer::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap();
            let start = cpu();
            let mut x = 0u64;
            while cpu() - start < ns {
                for i in 0..100_000u64 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                }
            }
        };
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        // A short first interval: a thread's own event armed so would overflow every 50 µs
        // (at 10 µs, this thread would hardly run again: `arm`).
        let once = open_one_shot(&e, tid, 50_000).unwrap();
        spin(2_000_000);
        assert_eq!(
            count(once),
            0,
            "a one-shot event counts nothing until fired"
        );
        assert!(pending().is_none());
        assert!(fire_once(once));
        spin(5_000_000);
        // One overflow at 50 µs, then disabled by the kernel: it counted ~50 µs of the 5 ms.
        let counted = count(once);
        let signal = pending().expect("the one-shot event's overflow sends SIGPROF");
        assert!(pending().is_none(), "a second signal");
        assert_eq!(overflow_fd(&signal), Some(once));
        assert_eq!(signal.si_code, POLL_HUP);
        assert!(
            (50_000..1_000_000).contains(&counted),
            "counted {counted} ns of 5 ms after its overflow"
        );
        // The thread's own event goes on counting and overflowing.
        let own = open(&e, tid, 200_000).unwrap();
        spin(5_000_000);
        assert!(count(own) > 4_000_000, "{} ns", count(own));
        assert_eq!(pending().map(|s| s.si_code), Some(POLL_IN));
        // SAFETY: our descriptors; the mask as it was, nothing left pending.
        unsafe {
            libc::close(once);
            libc::close(own);
            while pending().is_some() {}
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
    }
}
