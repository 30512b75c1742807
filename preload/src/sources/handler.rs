//! The `SIGPROF` handler: the one entry point of every signal-driven sample.
//!
//! It tells the signals it is sent apart — a perf event's overflow (`si_code` `POLL_IN`,
//! [`crate::sources::perf`]) and a sampling timer's, by its `si_value` cookie
//! ([`crate::sources::timer`]), become one sample (`Sampler::sample`), the roll call of
//! threads that existed before the constructor is answered ([`crate::sources::adopt`]), and
//! the timer of periodic snapshot profiles runs the action registered for it
//! ([`on_timer`]) — preserves `errno`, and times itself ([`crate::record::timing`]).
//!
//! Handler rules: no allocation, no locks, no C-API calls; memory comes from regions mapped
//! before sampling; every read of the interrupted program's memory is checked.

use crate::capture::unwind::Regs;
use crate::sampler::{Sampler, STATE, YIELDED};
use crate::signal_guard::InFlight;
use crate::sources::timer::{clock_ns, ticks_of, TIMER_COOKIE};
use crate::sources::{adopt, late, perf, timer};
use pyigprof_hooks::{interruptions, signals};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Installs `sampler` as the process's sampler and the `SIGPROF` handler. Returns an error
/// message when the handler cannot be installed.
pub fn install(sampler: Sampler) -> Result<&'static Sampler, String> {
    let sampler = sampler.publish();
    // The handler, kept invisible to the program while it leaves SIGPROF alone
    // (hooks::signals); an inherited "ignore" is overridden.
    if !guard_sigprof() {
        // SAFETY: installing a SA_SIGINFO handler with a valid function.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigprof as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if signals::real_sigaction(libc::SIGPROF, &action, std::ptr::null_mut()) != 0 {
                return Err(format!(
                    "cannot install the SIGPROF handler: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
    }
    remember_restorer(sampler);
    timer::watch_thread_exits(sampler);
    STATE.store(crate::sampler::SAMPLING, Ordering::Release);
    Ok(sampler)
}

/// For `pyigprof attach` ([`crate::attach`]): installs the `SIGPROF` handler for
/// `sampler` (published already) in a running process, over the default action or
/// "ignore", and starts sampling. Errors when the program has a `SIGPROF` handler of its
/// own (another profiler's, `setitimer` users'): pyigprof does not take it over.
pub fn install_attached(sampler: &'static Sampler) -> Result<(), String> {
    if !guard_sigprof() {
        return Err(
            "the process has a SIGPROF handler of its own (another profiler's?); not sampling"
                .into(),
        );
    }
    remember_restorer(sampler);
    STATE.store(crate::sampler::SAMPLING, Ordering::Release);
    Ok(())
}

/// Installs the handler under a guard of `hooks::signals`: kept invisible to the program
/// while it leaves `SIGPROF` alone, over its default action or an inherited "ignore".
/// Returns whether it was installed (not when the program has a handler there).
fn guard_sigprof() -> bool {
    signals::guard(
        libc::SIGPROF,
        on_sigprof,
        libc::SA_RESTART,
        true,
        program_took_sigprof,
    )
}

/// Keeps the `sa_restorer` of the installed `SIGPROF` action (the unwinder recognises
/// signal frames by it).
fn remember_restorer(sampler: &Sampler) {
    // SAFETY: querying the installed action.
    unsafe {
        // glibc fills in its signal trampoline (`__restore_rt`) as sa_restorer.
        let mut installed: libc::sigaction = std::mem::zeroed();
        signals::real_sigaction(libc::SIGPROF, std::ptr::null(), &mut installed);
        sampler.restorer.store(
            installed.sa_restorer.map_or(0, |f| f as usize as u64),
            Ordering::Relaxed,
        );
    }
}

/// The program installed a `SIGPROF` handler of its own: it wins; sampling stops, and the
/// profile written at exit covers the time before.
fn program_took_sigprof(_signal: libc::c_int) {
    if let Some(sampler) = crate::sampler::get() {
        sampler.stop();
        STATE.store(YIELDED, Ordering::Release);
        crate::notice!(
            "pyigprof: the program installed its own SIGPROF handler; sampling stopped \
             (the profile covers the time before)"
        );
    }
}

/// `si_value` of the one other timer whose `SIGPROF` the handler serves (0 = none).
static OTHER_COOKIE: AtomicUsize = AtomicUsize::new(0);
/// What the handler runs for it (a `fn()`; stored before the cookie).
static OTHER_ACTION: AtomicUsize = AtomicUsize::new(0);

/// Makes the handler run `action` (async-signal-safe) for `SIGPROF`s from a POSIX timer
/// whose `si_value` is `cookie` (the snapshot timer of `PYIGPROF_DUMP_INTERVAL`).
pub fn on_timer(cookie: usize, action: fn()) {
    OTHER_ACTION.store(action as usize, Ordering::Release);
    OTHER_COOKIE.store(cookie, Ordering::Release);
}

/// Whether the signal was sent by a sampling timer (si_value carries our cookie).
fn is_ours(info: *const libc::siginfo_t) -> bool {
    is_timer_with(info, TIMER_COOKIE)
}

/// Whether the signal was sent by a POSIX timer whose `si_value` is `cookie`.
fn is_timer_with(info: *const libc::siginfo_t, cookie: usize) -> bool {
    // SAFETY: for SI_TIMER signals si_value is at offset 24 (after si_tid, si_overrun).
    unsafe {
        (*info).si_code == libc::SI_TIMER && *(info as *const u8).add(24).cast::<usize>() == cookie
    }
}

/// The `SIGPROF` handler (`SA_SIGINFO`).
pub extern "C" fn on_sigprof(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    uc: *mut libc::c_void,
) {
    let entered = interruptions::entered();
    // SAFETY: __errno_location is the calling thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    let in_flight = InFlight::enter();
    let overflow = perf::overflow_fd(info);
    if let Some(fd) = overflow {
        // A perf event's overflow: sampled if the event is the thread's own (a signal of
        // an event closed meanwhile is dropped).
        if let (true, Some(sampler)) = (crate::sampler::sampling(), crate::sampler::get()) {
            let start = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0);
            let weight = sampler.trigger.event().and_then(|event| {
                // SAFETY: pthread_self only reads the thread pointer; the owner thread.
                let slot = unsafe { sampler.slots.find_or_claim(libc::pthread_self() as usize) }?;
                let weight = perf::weigh(event, slot, fd)?;
                Some(weight.here + sampler.count_before_sample(slot, weight.before))
            });
            if let Some(weight) = weight {
                sample_here(sampler, weight, uc, start);
            }
        }
    } else if crate::sampler::sampling() && is_ours(info) {
        if let Some(sampler) = crate::sampler::get() {
            let start = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0);
            let ticks = ticks_of(info);
            // Perf events started late: the thread's timer until it moves to its event.
            let ticks = ticks + late::on_timer_sample(sampler, ticks);
            sample_here(sampler, ticks, uc, start);
        }
    } else if is_ours(info) && crate::sampler::paused() {
        // Sampling paused while the trace trees are forgotten between two windows: the
        // POSIX timer's ticks wait for the thread's next sample, as a perf event's skipped
        // overflow leaves its CPU time to the next one.
        if let Some(sampler) = crate::sampler::get() {
            // SAFETY: pthread_self only reads the thread pointer; the owner thread.
            if let Some(slot) =
                unsafe { sampler.slots.find_or_claim(libc::pthread_self() as usize) }
            {
                slot.pending.fetch_add(ticks_of(info), Ordering::Relaxed);
            }
        }
    } else if adopt::is_roll_call(info) {
        adopt::answer(uc.cast());
    } else {
        let cookie = OTHER_COOKIE.load(Ordering::Acquire);
        if cookie != 0 && is_timer_with(info, cookie) {
            // SAFETY: stored from a `fn()` by on_timer before the cookie.
            let action: fn() =
                unsafe { std::mem::transmute::<usize, fn()>(OTHER_ACTION.load(Ordering::Acquire)) };
            action();
        } else if !is_ours(info)
            && overflow.is_none()
            && signals::program_sees_default(libc::SIGPROF)
        {
            // Someone else's SIGPROF (`kill -PROF`, the program's own `ITIMER_PROF`) while
            // the program leaves SIGPROF at its default action: the process ends by it, as
            // it would without pyigprof (the profile is written first).
            crate::output::lifecycle::end_by_signal(libc::SIGPROF);
        }
    }
    drop(in_flight);
    // SAFETY: the kernel's ucontext; then as above.
    unsafe {
        // A system call the program's signal interrupted meanwhile stays interrupted.
        interruptions::keep(entered, uc.cast());
        *libc::__errno_location() = errno;
    }
}

/// Samples the interrupted thread (registers in `uc`) with `weight` ticks (or events),
/// and times the handler from `start` (ns of `CLOCK_MONOTONIC`).
fn sample_here(sampler: &Sampler, weight: u64, uc: *mut libc::c_void, start: u64) {
    // SAFETY: the kernel passes a valid ucontext to SA_SIGINFO handlers.
    unsafe { let_faults_through(uc.cast()) };
    // SAFETY: as above.
    let regs = unsafe { Regs::from_ucontext(uc.cast()) };
    let (native, python) = sampler.sample(weight, regs);
    let end = clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(start);
    sampler
        .stats
        .handler
        .record(end.saturating_sub(start), native, python);
}

/// A thread that blocks `SIGSEGV` or `SIGBUS` (some libraries' worker threads block every
/// signal but a few) would be killed by a fault of the handler's checked reads: a fault
/// raised while its signal is blocked is forced through with the default action. The
/// handler unblocks them in that case (one system call, only in such threads); returning
/// from the handler restores the interrupted mask (`uc_sigmask`) as it was.
/// Async-signal-safe.
///
/// # Safety
/// `uc` is the ucontext the kernel passed to the handler.
unsafe fn let_faults_through(uc: *const libc::ucontext_t) {
    // SAFETY: the kernel's ucontext; plain signal-set calls.
    unsafe {
        let mask = &(*uc).uc_sigmask;
        if libc::sigismember(mask, libc::SIGSEGV) == 1 || libc::sigismember(mask, libc::SIGBUS) == 1
        {
            let mut faults: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut faults);
            libc::sigaddset(&mut faults, libc::SIGSEGV);
            libc::sigaddset(&mut faults, libc::SIGBUS);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &faults, std::ptr::null_mut());
        }
    }
}
