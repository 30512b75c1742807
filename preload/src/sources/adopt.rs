//! Threads that existed before the library constructor ran (started by another library's
//! constructor, or by a program that loads pyigprof late): they never passed through the
//! `pthread_create` interposition, so nothing registered them.
//!
//! The constructor finds them in `/proc/self/task` and holds a roll call: it sends each a
//! `SIGPROF` carrying `ROLL_CALL_COOKIE` (`rt_tgsigqueueinfo`), and the handler, running on
//! that thread, answers with its `pthread_t` and stack pointer (`answer`, a few atomic
//! stores). The constructor then finds the stack mapping that holds the stack pointer in
//! `/proc/self/maps`, registers the thread with those bounds, and creates its timer on that
//! thread's CPU clock. A thread that has `SIGPROF` blocked does not answer within
//! [`WAIT`] and is left unsampled.

use crate::capture::unwind::modules;
use crate::sampler::Sampler;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Most threads asked in one roll call; more are asked in further calls of as many.
pub const MAX_ADOPTED: usize = 256;
/// How long the constructor waits for the answers.
pub const WAIT: Duration = Duration::from_millis(200);
/// `si_value` of the roll-call signal ("pyigcall").
const ROLL_CALL_COOKIE: usize = 0x7079_6967_6361_6c6c;

/// One thread's answer.
struct Answer {
    /// Kernel thread id asked (0 = unused).
    tid: AtomicI32,
    /// Its `pthread_t` (0 = no answer yet).
    thread: AtomicUsize,
    /// Its stack pointer when it answered.
    sp: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const NO_ANSWER: Answer = Answer {
    tid: AtomicI32::new(0),
    thread: AtomicUsize::new(0),
    sp: AtomicU64::new(0),
};
static ANSWERS: [Answer; MAX_ADOPTED] = [NO_ANSWER; MAX_ADOPTED];

/// Whether `info` is the roll call (queued by this process with our cookie).
pub(crate) fn is_roll_call(info: *const libc::siginfo_t) -> bool {
    // SAFETY: the kernel passes a valid siginfo; for SI_QUEUE signals si_value is at offset
    // 24 (after si_pid, si_uid).
    unsafe {
        (*info).si_code == libc::SI_QUEUE
            && *(info as *const u8).add(24).cast::<usize>() == ROLL_CALL_COOKIE
    }
}

/// Answers the roll call from the signal handler. Async-signal-safe.
pub(crate) fn answer(uc: *const libc::ucontext_t) {
    // SAFETY: gettid and pthread_self have no preconditions; the kernel passes a valid
    // ucontext to SA_SIGINFO handlers.
    let (tid, thread, sp) = unsafe {
        (
            libc::gettid(),
            libc::pthread_self() as usize,
            (*uc).uc_mcontext.gregs[libc::REG_RSP as usize] as u64,
        )
    };
    if let Some(a) = ANSWERS
        .iter()
        .find(|a| a.tid.load(Ordering::Acquire) == tid)
    {
        a.sp.store(sp, Ordering::Relaxed);
        a.thread.store(thread, Ordering::Release);
    }
}

/// Finds, registers and starts sampling the threads other than the caller that exist now.
/// Returns how many were adopted, and messages for those that could not be.
pub fn adopt_existing_threads(sampler: &Sampler) -> (usize, Vec<String>) {
    if only_ever_one_thread() {
        return (0, Vec::new());
    }
    adopt(sampler, &other_threads())
}

/// Whether the C library says the process has only ever had one thread: glibc's
/// `__libc_single_threaded` (2.32+), which its `pthread_create` clears. Then there is no
/// thread to adopt, and the constructor of a `python` that starts none (nearly every one)
/// does not list `/proc/self/task` (five system calls). False where the C library has no
/// such variable (an older glibc, musl): the list is read. A thread made by a raw `clone`
/// (not `pthread_create`) in another library's constructor would go unseen.
fn only_ever_one_thread() -> bool {
    // SAFETY: looking a symbol up; a byte of the C library's, read once.
    unsafe {
        let flag = libc::dlsym(libc::RTLD_DEFAULT, c"__libc_single_threaded".as_ptr());
        !flag.is_null() && flag.cast::<u8>().read_volatile() != 0
    }
}

/// The kernel ids of the process's threads other than the caller, from `/proc/self/task`
/// (empty when it cannot be read).
pub fn other_threads() -> Vec<libc::pid_t> {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    let Ok(entries) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&tid| tid != me)
        .collect()
}

/// Registers and starts sampling the threads `tids` (not the caller), by the roll call of
/// the module documentation, [`MAX_ADOPTED`] at a time (a process attached to with 500
/// threads had its first 256 adopted and the rest left out). Returns how many were adopted,
/// and messages for those that could not be (a thread that ended meanwhile is not one).
pub fn adopt(sampler: &Sampler, tids: &[libc::pid_t]) -> (usize, Vec<String>) {
    let mut adopted = 0;
    let mut problems = Vec::new();
    for batch in tids.chunks(MAX_ADOPTED) {
        let (n, mut more) = roll_call(sampler, batch);
        adopted += n;
        problems.append(&mut more);
    }
    (adopted, problems)
}

/// Whether thread `tid` of this process still exists.
fn alive(tid: libc::pid_t) -> bool {
    std::path::Path::new(&format!("/proc/self/task/{tid}")).exists()
}

/// [`adopt`] for at most [`MAX_ADOPTED`] threads.
fn roll_call(sampler: &Sampler, tids: &[libc::pid_t]) -> (usize, Vec<String>) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    debug_assert!(tids.len() <= MAX_ADOPTED);
    if tids.is_empty() {
        return (0, Vec::new());
    }
    for answer in &ANSWERS[..tids.len()] {
        answer.thread.store(0, Ordering::Relaxed);
    }
    for (answer, &tid) in ANSWERS.iter().zip(tids) {
        answer.tid.store(tid, Ordering::Release);
        // SAFETY: a siginfo for rt_tgsigqueueinfo, zeroed then filled in.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            info.si_signo = libc::SIGPROF;
            info.si_code = libc::SI_QUEUE;
            let base = (&mut info as *mut libc::siginfo_t).cast::<u8>();
            *base.add(16).cast::<libc::pid_t>() = pid; // si_pid
            *base.add(20).cast::<libc::uid_t>() = libc::getuid(); // si_uid
            *base.add(24).cast::<usize>() = ROLL_CALL_COOKIE; // si_value
            libc::syscall(
                libc::SYS_rt_tgsigqueueinfo,
                pid,
                tid,
                libc::SIGPROF,
                &info as *const libc::siginfo_t,
            );
        }
    }
    let asked = &ANSWERS[..tids.len()];
    let deadline = Instant::now() + WAIT;
    // A thread that ended since it was listed never answers: not waited for.
    let waiting =
        |a: &Answer| a.thread.load(Ordering::Acquire) == 0 && alive(a.tid.load(Ordering::Relaxed));
    while asked.iter().any(waiting) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut adopted = 0;
    let mut problems = Vec::new();
    for a in asked {
        let tid = a.tid.load(Ordering::Relaxed);
        let thread = a.thread.load(Ordering::Acquire);
        let problem = if thread == 0 {
            "did not answer".to_string()
        } else if let Some(bounds) =
            modules::mapping_containing(&maps, a.sp.load(Ordering::Relaxed))
        {
            match sampler.register_existing_thread(thread, tid, bounds) {
                Ok(()) => {
                    adopted += 1;
                    continue;
                }
                Err(e) => e,
            }
        } else {
            "no stack mapping found".to_string()
        };
        // A thread that ended meanwhile (a thread per request comes and goes in
        // milliseconds) is nothing to tell.
        if alive(tid) {
            problems.push(format!(
                "thread {tid} (started before pyigprof): {problem}; it is not sampled"
            ));
        }
    }
    (adopted, problems)
}
