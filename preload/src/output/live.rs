//! What every thread does now: the call stacks `pyigprof dump PID` prints.
//!
//! A thread blocked in a system call (a lock, a sleep, a read) is captured as it is, from
//! the registers the kernel saved at the call (`/proc/self/task/<tid>/syscall`, as wall
//! mode's sampler does: [`crate::sampler::Sampler::stack_of_blocked`]), and re-read
//! afterwards to check it did not run meanwhile (if it did, it is looked at again). A
//! thread that runs is not stopped: its call stack is that of its latest CPU sample
//! (`Slot::last_cpu_leaf`, a few milliseconds old at the rate sampled), looked up in its
//! trace tree. A thread with neither yet (just attached, no sample) is waited for, up to
//! a deadline; then it is listed without frames.
//! Nothing is counted in the profile and no signal is sent: the program is left as it was.
//!
//! The answer goes to the `pyigprof` command over its control socket, one line per item,
//! fields separated by tabs ([`report`]); the command prints it as text or JSON.

use crate::capture::waits::Call;
use crate::output::dump::{name_frames, Named, Namer};
use crate::record::threads::{CAPTURING, FREE};
use crate::sampler::Sampler;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// The system call the main thread was in when the command stopped it to load the library
/// or start the control thread (`PYIGPROF_LIVE_MAIN_SYSCALL`, read by the command from
/// `/proc/PID/syscall` before): the stop interrupted it, and the kernel shows the call
/// resumed as `restart_syscall`. -1 when not known.
static MAIN_SYSCALL: AtomicI64 = AtomicI64::new(-1);

/// Remembers the main thread's system call before the command's stop (see
/// [`MAIN_SYSCALL`]); -1 forgets it.
pub fn set_main_syscall(nr: i64) {
    MAIN_SYSCALL.store(nr, Ordering::Relaxed);
}

/// Where a thread's call stack comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// Captured now, the thread blocked in a system call.
    Now,
    /// The thread's latest CPU sample (it was running or runnable).
    LatestSample,
    /// Neither: no sample yet, and not blocked when looked at.
    Unknown,
    /// Not a thread the sampler knows (it started before pyigprof and did not answer the
    /// roll call, it blocks `SIGPROF`, or every slot is taken): listed without frames.
    NotSampled,
}

impl Taken {
    fn word(self) -> &'static str {
        match self {
            Taken::Now => "now",
            Taken::LatestSample => "sample",
            Taken::Unknown => "none",
            Taken::NotSampled => "unsampled",
        }
    }
}

/// One thread of the process as `pyigprof dump` shows it.
#[derive(Debug)]
pub struct ThreadNow {
    /// Its kernel thread id.
    pub tid: i32,
    /// Its name (`/proc/self/task/<tid>/comm`).
    pub name: String,
    /// The name `threading` gave it (`Thread.name`), when it is a Python thread whose
    /// name could be read ([`crate::capture::python::Runtime::python_thread_name`]).
    pub python_name: Option<String>,
    /// The scheduler's state letter (`/proc/self/task/<tid>/stat`: R running, S sleeping,
    /// D uninterruptible, …).
    pub state: char,
    /// The system call it is blocked in, by name (`futex`, `clock_nanosleep`, `read`, …),
    /// when it is.
    pub syscall: Option<String>,
    /// Where [`ThreadNow::keys`] come from.
    pub taken: Taken,
    /// Whether it holds its interpreter's GIL: the holder read once per interpreter after
    /// every thread was looked at (read per thread, the GIL could pass from one thread to
    /// another between two reads, and two threads showed as holding it). `None` where that
    /// cannot be told (no Python frames read, no thread state, a failed read).
    pub gil: Option<bool>,
    /// What it waits for when blocked (`GIL`, `lock`, `I/O`, `sleep`, `child process`,
    /// `other system call`: [`crate::capture::waits::reason`]); `None` when running, or
    /// when the call's arguments are not known (the main thread's restarted call).
    pub waiting: Option<&'static str>,
    /// Its frame keys, outermost first (named by [`report`]).
    keys: Vec<u64>,
    /// The asyncio tasks it created that have not finished (3.14+), read after its stack.
    tasks: Vec<crate::capture::python::tasks::TaskNow>,
    /// Its `PyThreadState*`, 0 when not known.
    tstate: u64,
    /// Its `pthread_t`, which `tstate` must still name ([`crate::capture::python::Runtime::belongs_to`]).
    owner: u64,
}

/// Every sampled thread's call stack (see the module documentation), waiting up to `wait`
/// for threads that have neither been sampled nor are blocked. Not from a signal handler.
pub fn threads_now(sampler: &Sampler, wait: Duration) -> Vec<ThreadNow> {
    let deadline = Instant::now() + wait;
    // Other threads' Python frames are found through their key slots (as in wall mode);
    // CPU mode has not looked for them. Once: each search creates two pthread keys.
    static KEY_SLOTS: std::sync::Once = std::sync::Once::new();
    KEY_SLOTS.call_once(crate::capture::python::find_key_slots);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut found: Vec<ThreadNow> = Vec::new();
    loop {
        // SAFETY: a slot's scratch buffers are used only while it is held (CAPTURING).
        unsafe {
            sampler.slots.for_each_mut(|slot| {
                let tid = slot.tid.load(Ordering::Relaxed);
                // (The thread answering is not sampled: an attach window's control thread
                // is never registered, and the preloaded library's leaves as it starts.)
                if tid == 0 || !slot.ready.load(Ordering::Acquire) {
                    return;
                }
                if found
                    .iter()
                    .any(|t| t.tid == tid && t.taken != Taken::Unknown)
                {
                    return;
                }
                let (state, name) = stat_of(tid);
                let owner = slot.owner.load(Ordering::Relaxed) as u64;
                let tstate = sampler
                    .python
                    .as_ref()
                    .map_or(0, |rt| rt.thread_state_of(owner, slot.thread_state));
                let mut thread = ThreadNow {
                    tid,
                    name,
                    python_name: None,
                    state,
                    syscall: None,
                    taken: Taken::Unknown,
                    gil: None,
                    waiting: None,
                    keys: Vec::new(),
                    tasks: Vec::new(),
                    tstate,
                    owner,
                };
                if let Some((call, sp, pc)) = syscall_of(tid) {
                    let before = MAIN_SYSCALL.load(Ordering::Relaxed);
                    let restarted =
                        tid == pid && call.nr == libc::SYS_restart_syscall as u64 && before >= 0;
                    let shown = if restarted { before as u64 } else { call.nr };
                    thread.syscall = Some(syscall_name(shown));
                    // A restarted call's arguments are not shown: a futex's word unknown.
                    thread.waiting = (!restarted)
                        .then(|| sampler.wait_reason(call).waiting_for())
                        .flatten();
                    if slot
                        .busy
                        .compare_exchange(FREE, CAPTURING, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        let regs = crate::capture::unwind::Regs::new(
                            pc,
                            sp,
                            crate::capture::unwind::UNKNOWN_BP,
                        );
                        let still = || syscall_of(tid) == Some((call, sp, pc));
                        if let Some(keys) = sampler.stack_of_blocked(slot, regs, still) {
                            thread.keys = keys;
                            thread.taken = Taken::Now;
                        }
                        slot.busy.store(FREE, Ordering::Release);
                    }
                }
                // The main thread was in a system call when the command stopped it: once
                // let go it must be scheduled to go back in (the restart), which on busy
                // CPUs takes milliseconds; until then it shows as running, and its latest
                // sample may be from long before. It is looked at again, up to `wait`.
                let resuming = tid == pid
                    && thread.syscall.is_none()
                    && MAIN_SYSCALL.load(Ordering::Relaxed) >= 0
                    && Instant::now() < deadline;
                // A thread found blocked whose capture did not hold (it woke while being
                // read, or a sample held its slot) is looked at again, up to `wait`: its
                // latest CPU sample can be from long before (a server's main thread, which
                // rarely runs a whole sampling period, showed its imports).
                let woke = thread.syscall.is_some() && Instant::now() < deadline;
                if thread.taken == Taken::Unknown && !resuming && !woke {
                    let root = slot.root.load(Ordering::Acquire);
                    let leaf = slot.last_cpu_leaf.load(Ordering::Acquire);
                    if let Some(keys) = sampler.trees.path_to(root, leaf) {
                        thread.keys = keys;
                        thread.taken = Taken::LatestSample;
                    }
                }
                match found.iter_mut().find(|t| t.tid == tid) {
                    Some(old) => *old = thread,
                    None => found.push(thread),
                }
            })
        };
        if found.iter().all(|t| t.taken != Taken::Unknown) || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Some((rt, gc)) = sampler.python.as_ref().and_then(|rt| Some((rt, rt.gc?))) {
        // Each interpreter's holder, read once: (interpreter, holder).
        let mut holders: Vec<(u64, Option<u64>)> = Vec::new();
        for thread in found.iter_mut().filter(|t| t.tstate != 0) {
            // The thread may have ended since it was looked at, and its state been freed:
            // the interpreter is read only from a state that names the thread before and
            // after the read (a state freed but not yet reused still holds its values).
            let still = |t: &ThreadNow| rt.belongs_to(t.tstate, t.owner);
            if !still(thread) {
                thread.tstate = 0;
                continue;
            }
            let Some(interp) = gc.interpreter_of(thread.tstate).filter(|_| still(thread)) else {
                continue;
            };
            let holder = match holders.iter().find(|(i, _)| *i == interp) {
                Some(&(_, holder)) => holder,
                None => {
                    let holder = gc.gil_holder(interp);
                    holders.push((interp, holder));
                    holder
                }
            };
            thread.gil = holder.map(|holder| holder == thread.tstate);
        }
    }
    if let Some(rt) = sampler.python.as_ref() {
        for thread in found.iter_mut().filter(|t| t.tstate != 0) {
            // As for the GIL: kept only when the state still names the thread after.
            thread.python_name = rt
                .python_thread_name(thread.tstate)
                .filter(|_| rt.belongs_to(thread.tstate, thread.owner));
            let tasks = sampler.tasks_now(thread.tstate);
            if rt.belongs_to(thread.tstate, thread.owner) {
                thread.tasks = tasks;
            }
        }
    }
    // Every thread of the process is listed, those the sampler does not know too (not the
    // one answering: this thread of pyigprof's).
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    for tid in crate::sources::adopt::other_threads() {
        if tid == me || found.iter().any(|t| t.tid == tid) {
            continue;
        }
        let (state, name) = stat_of(tid);
        if state == '?' {
            continue; // ended meanwhile
        }
        let syscall = syscall_of(tid).map(|(call, _, _)| syscall_name(call.nr));
        found.push(ThreadNow {
            tid,
            name,
            python_name: None,
            state,
            syscall,
            taken: Taken::NotSampled,
            gil: None,
            waiting: None,
            keys: Vec::new(),
            tasks: Vec::new(),
            tstate: 0,
            owner: 0,
        });
    }
    found.sort_by_key(|t| t.tid);
    found
}

/// The answer to the command's `dump`: one `process` line, then per thread a `thread`
/// line and its `frame` lines, innermost frame first, then `end`. Fields are separated by
/// tabs (tabs and newlines in names become spaces):
///
/// - `process <pid> <python version or -> <command line>`
/// - `thread <tid> <main: 1|0> <state letter> <syscall or -> <now|sample|none|unsampled>
///   <holds the GIL: 1|0|-> <waiting for: GIL|lock|I/O|sleep|…|-> <name> <Python name or ->`
/// - `frame <python: 1|0> <line or -> <offset> <file> <name>`
///
/// and after the threads, per asyncio task (3.14+), a `task` line and the `frame` lines of
/// its coroutines where they wait, innermost first (none for a running task, whose frames
/// are its thread's; [`crate::capture::python::tasks::TaskNow`]):
///
/// - `task <address, hex> <thread tid, 0 when not known (before 3.14)> <running: 1|0>
///   <awaited by: address or -> <name>`
pub fn report(sampler: &Sampler, threads: &[ThreadNow]) -> String {
    let mut stacks: Vec<Vec<u64>> = threads.iter().map(|t| t.keys.clone()).collect();
    // Before 3.14 tasks are the interpreter's, not a thread's (thread 0: not known).
    let loose = threads
        .iter()
        .find(|t| t.tstate != 0)
        .map_or_else(Vec::new, |t| sampler.interpreter_tasks_now(t.tstate));
    let tasks: Vec<(i32, &crate::capture::python::tasks::TaskNow)> = threads
        .iter()
        .flat_map(|t| t.tasks.iter().map(move |task| (t.tid, task)))
        .chain(loose.iter().map(|task| (0, task)))
        .collect();
    stacks.extend(tasks.iter().map(|(_, task)| task.keys.clone()));
    let named = name_frames(sampler, &stacks);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let version = pyigprof_hooks::cpython::version()
        .map_or("-".to_string(), |(a, b, c)| format!("{a}.{b}.{c}"));
    let command = std::fs::read("/proc/self/cmdline")
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let mut out = format!("process\t{pid}\t{version}\t{}\n", clean(&command));
    for (thread, frames) in threads.iter().zip(&named) {
        out.push_str(&format!(
            "thread\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            thread.tid,
            u8::from(thread.tid == pid),
            thread.state,
            thread.syscall.as_deref().unwrap_or("-"),
            thread.taken.word(),
            thread.gil.map_or("-", |g| if g { "1" } else { "0" }),
            thread.waiting.unwrap_or("-"),
            clean(&thread.name),
            thread.python_name.as_deref().map_or("-".into(), clean)
        ));
        for frame in frames.iter().rev() {
            out.push_str(&frame_line(frame));
        }
    }
    for ((tid, task), frames) in tasks.iter().zip(&named[threads.len()..]) {
        // The first frame is `<task NAME>`.
        let Some((first, coroutines)) = frames.split_first() else {
            continue;
        };
        let name = first
            .name
            .strip_prefix("<task ")
            .and_then(|n| n.strip_suffix('>'))
            .unwrap_or(&first.name);
        out.push_str(&format!(
            "task\t{:#x}\t{tid}\t{}\t{}\t{}\n",
            task.address,
            u8::from(task.running),
            task.awaited_by.map_or("-".into(), |a| format!("{a:#x}")),
            clean(name)
        ));
        for frame in coroutines.iter().rev() {
            out.push_str(&frame_line(frame));
        }
    }
    out.push_str("end\n");
    out
}

/// Ticks (the sampler's period each) per function of the profile so far, in two views:
/// every frame (`all`), and Python code only, where the time of native frames goes to the
/// innermost Python function above them (`python`; a stack without Python code keeps its
/// innermost native function). `[self, cumulative]` each; a function that appears more
/// than once in a stack (recursion) counts once in its cumulative ticks.
#[derive(Clone, Copy, Default)]
struct Counts {
    all: [u64; 2],
    python: [u64; 2],
    /// For an asyncio task's frame (`<task NAME>`): `[self, cumulative]` by task, where a
    /// sample's self task is the innermost task of its chain (the task whose step ran) and
    /// every task of the chain gets it cumulatively.
    task: [u64; 2],
}

/// The answer to the command's `snapshot` (`pyigprof top`): the totals, then one line per
/// function that has ticks, then `end`. Fields separated by tabs:
///
/// - `totals <samples> <ticks> <period ns> <threads sampled>`
/// - `fn <python: 1|0> <self ticks> <cumulative ticks> <self ticks, Python view>
///   <cumulative ticks, Python view> <first line or 0> <file> <name>`
/// - `task <self ticks> <cumulative ticks> <name>`, per asyncio task frame (`<task NAME>`):
///   the ticks of the samples whose innermost task it is, and of those it is in the await
///   chain of (`top`'s task view)
///
/// The counts are since sampling started (the command takes the differences between
/// snapshots). Reads the trace trees while the threads insert into them: a node is counted
/// once its counters are published (a sample in flight is in the next snapshot).
pub fn snapshot(sampler: &Sampler, namer: &mut Namer) -> String {
    let mut counts: Vec<Counts> = Vec::new();
    let (mut samples, mut ticks) = (0u64, 0u64);
    // (node, depth) to visit, and the current branch's functions (`None`: the profiler's
    // own frame, left out), outermost first.
    let mut stack: Vec<(u32, usize)> = Vec::new();
    let mut path: Vec<Option<(u32, bool)>> = Vec::new();
    // Whether each function of `path` is an asyncio task's frame.
    let mut is_task: Vec<bool> = Vec::new();
    let mut counted: Vec<u32> = Vec::new();
    let trees = &sampler.trees;
    let push_children = |stack: &mut Vec<(u32, usize)>, of: u32, depth: usize| {
        let mut child = trees.node(of).first_child.load(Ordering::Acquire);
        while child != 0 {
            stack.push((child, depth));
            child = trees.node(child).next_sibling.load(Ordering::Acquire);
        }
    };
    for root in sampler.slots.roots() {
        path.clear();
        push_children(&mut stack, root, 1);
        while let Some((index, depth)) = stack.pop() {
            path.truncate(depth - 1);
            is_task.truncate(depth - 1);
            let node = trees.node(index);
            let key = node.key.load(Ordering::Relaxed);
            let function = namer.function(key);
            is_task.push(matches!(
                crate::capture::frames::decode(key),
                crate::capture::frames::Frame::Task(_)
            ));
            if let Some((id, _)) = function {
                if counts.len() <= id as usize {
                    counts.resize(id as usize + 1, Counts::default());
                }
            }
            path.push(function);
            let t = node.ticks.load(Ordering::Acquire);
            if t > 0 {
                samples += node.samples.load(Ordering::Relaxed);
                ticks += t;
                let mut functions = path.iter().flatten().copied();
                if let Some((leaf, _)) = functions.clone().last() {
                    counts[leaf as usize].all[0] += t;
                    let python_leaf = path
                        .iter()
                        .rev()
                        .flatten()
                        .find(|&&(_, python)| python)
                        .map_or(leaf, |&(id, _)| id);
                    counts[python_leaf as usize].python[0] += t;
                }
                // The innermost task of the chain is the sample's own.
                let tasks = path.iter().zip(&is_task).filter(|(_, &task)| task);
                if let Some((Some((id, _)), _)) = tasks.clone().next_back() {
                    counts[*id as usize].task[0] += t;
                }
                counted.clear();
                for (function, _) in tasks {
                    if let Some((id, _)) = function {
                        if !counted.contains(id) {
                            counted.push(*id);
                            counts[*id as usize].task[1] += t;
                        }
                    }
                }
                counted.clear();
                for (id, python) in functions.by_ref() {
                    if counted.contains(&id) {
                        continue;
                    }
                    counted.push(id);
                    counts[id as usize].all[1] += t;
                    if python {
                        counts[id as usize].python[1] += t;
                    }
                }
            }
            if depth < crate::record::threads::MAX_STACK {
                push_children(&mut stack, index, depth + 1);
            }
        }
    }
    let threads = sampler.sampled_threads().len();
    let mut out = format!(
        "totals\t{samples}\t{ticks}\t{}\t{threads}\n",
        sampler.period_ns
    );
    for (id, c) in counts.iter().enumerate() {
        if c.all == [0, 0] && c.python == [0, 0] && c.task == [0, 0] {
            continue;
        }
        let (file, name, python, first) = namer.describe(id as u32);
        out.push_str(&format!(
            "fn\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            u8::from(python),
            c.all[0],
            c.all[1],
            c.python[0],
            c.python[1],
            if python { first } else { 0 },
            clean(&file),
            clean(&name)
        ));
        if c.task != [0, 0] {
            let task = name
                .strip_prefix("<task ")
                .and_then(|n| n.strip_suffix('>'))
                .unwrap_or(&name);
            out.push_str(&format!(
                "task\t{}\t{}\t{}\n",
                c.task[0],
                c.task[1],
                clean(task)
            ));
        }
    }
    out.push_str("end\n");
    out
}

fn frame_line(frame: &Named) -> String {
    format!(
        "frame\t{}\t{}\t{}\t{}\t{}\n",
        u8::from(frame.python),
        frame.line.map_or("-".to_string(), |l| l.to_string()),
        frame.offset,
        clean(&frame.file),
        clean(&frame.name)
    )
}

/// `text` with tabs and line breaks made spaces (the report's separators).
fn clean(text: &str) -> String {
    text.replace(['\t', '\n', '\r'], " ")
}

/// The scheduler state letter and the name of thread `tid` of this process.
fn stat_of(tid: i32) -> (char, String) {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // `tid (comm) S …`: the name may hold spaces and parentheses; the state follows the
    // last `)`.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next())
        .unwrap_or('?');
    let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|n| n.trim_end().to_string())
        .unwrap_or_default();
    (state, name)
}

/// The system call thread `tid` is blocked in, with the user stack and instruction
/// pointers saved at its entry: `(call, sp, pc)`; `None` when it runs or is gone.
fn syscall_of(tid: i32) -> Option<(Call, u64, u64)> {
    let line = std::fs::read(format!("/proc/self/task/{tid}/syscall")).ok()?;
    crate::sources::wall::parse(&line)
}

/// The name of x86-64 system call `nr` (those a thread waits in), else `syscall <nr>`.
fn syscall_name(nr: u64) -> String {
    let names: &[(libc::c_long, &str)] = &[
        (libc::SYS_read, "read"),
        (libc::SYS_write, "write"),
        (libc::SYS_readv, "readv"),
        (libc::SYS_writev, "writev"),
        (libc::SYS_pread64, "pread64"),
        (libc::SYS_pwrite64, "pwrite64"),
        (libc::SYS_poll, "poll"),
        (libc::SYS_ppoll, "ppoll"),
        (libc::SYS_select, "select"),
        (libc::SYS_pselect6, "pselect6"),
        (libc::SYS_epoll_wait, "epoll_wait"),
        (libc::SYS_epoll_pwait, "epoll_pwait"),
        (libc::SYS_epoll_pwait2, "epoll_pwait2"),
        (libc::SYS_futex, "futex"),
        (libc::SYS_futex_waitv, "futex_waitv"),
        (libc::SYS_nanosleep, "nanosleep"),
        (libc::SYS_clock_nanosleep, "clock_nanosleep"),
        (libc::SYS_pause, "pause"),
        (libc::SYS_rt_sigsuspend, "rt_sigsuspend"),
        (libc::SYS_rt_sigtimedwait, "rt_sigtimedwait"),
        (libc::SYS_accept, "accept"),
        (libc::SYS_accept4, "accept4"),
        (libc::SYS_connect, "connect"),
        (libc::SYS_recvfrom, "recvfrom"),
        (libc::SYS_recvmsg, "recvmsg"),
        (libc::SYS_recvmmsg, "recvmmsg"),
        (libc::SYS_sendto, "sendto"),
        (libc::SYS_sendmsg, "sendmsg"),
        (libc::SYS_wait4, "wait4"),
        (libc::SYS_waitid, "waitid"),
        (libc::SYS_ioctl, "ioctl"),
        (libc::SYS_flock, "flock"),
        (libc::SYS_fcntl, "fcntl"),
        (libc::SYS_fsync, "fsync"),
        (libc::SYS_fdatasync, "fdatasync"),
        (libc::SYS_openat, "openat"),
        (libc::SYS_io_uring_enter, "io_uring_enter"),
        (libc::SYS_sched_yield, "sched_yield"),
        // A call interrupted by a signal handler or a tracer's stop, resumed by the kernel.
        (libc::SYS_restart_syscall, "restart_syscall"),
    ];
    names
        .iter()
        .find(|(n, _)| *n as u64 == nr)
        .map_or_else(|| format!("syscall {nr}"), |(_, name)| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_calls_are_named_and_unknown_ones_numbered() {
        assert_eq!(syscall_name(libc::SYS_futex as u64), "futex");
        assert_eq!(
            syscall_name(libc::SYS_clock_nanosleep as u64),
            "clock_nanosleep"
        );
        assert_eq!(syscall_name(100_000), "syscall 100000");
    }

    #[test]
    fn a_threads_state_and_name_are_read() {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        let (state, name) = stat_of(tid);
        assert_eq!(state, 'R');
        assert!(!name.is_empty());
    }

    #[test]
    fn a_sleeping_threads_system_call_is_found() {
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::syscall(libc::SYS_gettid) } as i32)
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(600));
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let (call, sp, pc) = syscall_of(tid).expect("the sleeper is in a system call");
        assert_eq!(syscall_name(call.nr), "clock_nanosleep");
        assert!(sp != 0 && pc != 0);
        assert_eq!(stat_of(tid).0, 'S');
        sleeper.join().unwrap();
    }
}
