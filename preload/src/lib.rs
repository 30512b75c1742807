//! `libpyigprof.so`: an in-process sampling profiler for CPython programs that records
//! *mixed* call stacks — Python functions and lines together with the native (C, C++,
//! Rust) frames they call — and writes an IgProf-format profile at exit.
//!
//! ```text
//! LD_PRELOAD=libpyigprof.so python3 app.py     # writes pyigprof.<pid>.gz
//! ```
//!
//! The flow of a sample, one folder a stage:
//!
//! | stage | folder | what is there |
//! |---|---|---|
//! | sources | [`sources`] | per-thread CPU timers ([`sources::timer`]), wall mode's sampler process ([`sources::wall`]), the `SIGPROF` handler ([`sources::handler`]), threads that predate the constructor ([`sources::adopt`]) |
//! | capture | [`capture`] | native unwinding ([`capture::unwind`], CFI rows in [`capture::unwind::cfi`]), CPython frames ([`capture::python`]; version knowledge in [`capture::python::layout`]), the splice ([`capture::mixed`]) |
//! | record | [`record`] | the trace tree ([`record::trace`]), per-thread slots ([`record::threads`]), statistics |
//! | output | [`output`] | the dump writer ([`output::dump`]) and when it runs ([`output::lifecycle`]) |
//!
//! [`sampler`] joins them: one [`sampler::Sampler`] holds the state every source shares,
//! and its `sample` captures one call stack and records it. Underneath: settings
//! ([`config`]), memory mapped ahead of time ([`mem`]), the library's own heap ([`alloc`]),
//! and keeping handlers out of critical sections ([`signal_guard`]).
//!
//! Start-up ([`init`], run from `.init_array`): in a process that is not Python nothing
//! happens. Otherwise the constructor reads the settings, finds the interpreter's runtime
//! ([`capture::python::discover`]), maps all sampler memory, installs the `SIGPROF` handler
//! and each thread's timer, and registers an audit hook that attaches to the runtime once
//! it exists.

pub mod alloc;
pub mod attach;
pub mod capture;
pub mod config;
pub mod fork_locks;
pub mod mem;
pub mod messages;
pub mod output;
pub mod record;
pub mod sampler;
pub mod signal_guard;
pub mod sources;

/// The interpreters present, for the unit tests that run them (the end-to-end suite's own
/// module, `tests/support/interpreters.rs`, shared rather than copied).
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../tests/support/interpreters.rs"]
mod test_interpreters;

/// Large blocks of the library's own are mapped directly, not taken from the program's
/// `malloc` (see [`alloc`]).
#[global_allocator]
static ALLOCATOR: alloc::Allocator = alloc::Allocator;

use capture::python::discover;
use capture::unwind::modules;
use config::Config;
use output::lifecycle;
use pyigprof_hooks::{cpython, Callbacks};
use sources::adopt;

/// The library constructor. Runs before `main` (and so before Python initialises).
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

/// Starts profiling if this process is a CPython interpreter (see the crate docs).
pub extern "C" fn init() {
    // Processes that are not Python (a shell, git: children inherit LD_PRELOAD) are left
    // alone unless PYIGPROF_ALL_PROCESSES asks for them. (Tests link this crate as an rlib
    // into ordinary binaries: never start there.)
    let version = cpython::version();
    if version.is_none()
        && !std::env::var_os("PYIGPROF_ALL_PROCESSES").is_some_and(|v| !v.is_empty() && v != "0")
    {
        return;
    }
    if cpython::initialized() {
        // Loaded into a program already running (`pyigprof attach`, ctypes): profiling
        // starts only when the command asks (`attach::pyigprof_attach`).
        return;
    }
    let mut config = Config::from_env();
    if config.left_alone() {
        return; // another process is the one profiled (`pyigprof record`)
    }
    capture::symbols::use_cache(config.symbol_cache.clone());
    if config.clock == config::Clock::Wall && version.is_some_and(|v| v < (3, 5, 0)) {
        // Before PEP 475 (3.5) CPython does not retry system calls interrupted by a signal:
        // `time.sleep`, `select` and blocking reads would end early under a wall-clock timer,
        // which also fires while a thread is blocked. A CPU timer only fires while it runs.
        let (major, minor, micro) = version.unwrap_or_default();
        crate::notice!(
            "pyigprof: PYIGPROF_CLOCK=wall is not used with Python {major}.{minor}.{micro}: \
             before 3.5 a signal ends time.sleep, select and blocking reads early; sampling CPU \
             time instead"
        );
        config.clock = config::Clock::Cpu;
    }
    modules::rescan();
    let runtime = version.and_then(discover::runtime);
    let Some(mut sampler) = sampler::Sampler::new(config.period_ns(), config.clock, runtime) else {
        crate::notice!("pyigprof: cannot map the profiler's memory; not profiling");
        return;
    };
    sampler.cpu = config.profile_cpu;
    sampler.gil_only = config.gil_only;
    sampler.asyncio = config.asyncio.into();
    if config.gil_only && sampler.python.as_ref().is_some_and(|rt| rt.gc.is_none()) {
        crate::notice!(
            "pyigprof: PYIGPROF_GIL=1: cannot tell which thread holds the GIL in this \
             interpreter; keeping every sample"
        );
    }
    if sources::late::wanted(&config) {
        // Probed when the process has run long enough for perf events (sources::late).
        sampler.trigger = sources::Trigger::Event(config.event);
    } else if config.profile_cpu {
        sampler.trigger = sources::Trigger::choose(&config);
    }
    if config.profile_memory && !record::memory::init() {
        crate::notice!("pyigprof: cannot map the memory profiler's counters; not profiling");
        return;
    }
    let sampler = match sources::handler::install(sampler) {
        Ok(s) => s,
        Err(e) => {
            crate::notice!("pyigprof: {e}; not profiling");
            return;
        }
    };
    if config.profile_locks {
        if sources::locks::enable(config.lock_rate_ns) {
            sources::lock_calls::install();
            if let Some(v) = version {
                let runtime = sources::locks::lock_allocator() as usize;
                let wrapped = sources::lock_objects::install(runtime, v, true);
                if wrapped.is_empty() && v >= (3, 13, 1) {
                    let (major, minor, micro) = v;
                    crate::notice!(
                        "pyigprof: cannot find the methods of Python {major}.{minor}.{micro}'s \
                         lock objects: the holds of threading.Lock are not counted, and its \
                         waits are named by the line that first waited"
                    );
                }
            }
        } else {
            crate::notice!("pyigprof: cannot map the lock profiler's tables; not profiling locks");
        }
    }
    if config.profile_memory {
        sources::allocations::enable(config.mem_rate);
        if let Some(v) = version {
            sources::allocations::install_python_allocators(v, false);
        }
        // The live set as the program's own code leaves it: frozen by an `atexit`
        // callback registered when the program starts (3.8+), before the interpreter's
        // finalisation frees the objects the program held.
        cpython::call_when_program_runs(|| {
            if cpython::register_atexit(record::memory::freeze_live) {
                cpython::call_before_finalize(|| {});
            }
        });
        cpython::call_before_finalize(record::memory::freeze_live);
    }
    let profile_cpu = config.profile_cpu;
    let memory = config.profile_memory;
    // asyncio built into the executable or libpython (Debian's 3.15); an `_asyncio`
    // extension module is found when it is loaded.
    sampler.discover_tasks();
    lifecycle::start(config);
    pyigprof_hooks::install(Callbacks {
        thread_started: || {
            with_sampler(|s| {
                // A program that starts threads is not one of the short ones perf events
                // wait for (sources::late): its threads are sampled on them from their start.
                sources::late::start_now(s);
                s.register_current_thread(crate::sources::perf::Wait::Wake)
            })
        },
        objects_added: || {
            modules::rescan();
            if sources::locks::enabled() {
                sources::lock_calls::install();
            }
            with_sampler(|s| s.discover_tasks());
            cpython::try_attach();
            // An extension module is being imported, with the GIL held: the interpreter
            // has chosen its allocators (3.6 resets them in Py_Main, after the
            // constructor, and has no audit hook to wrap them again sooner).
            if let Some(v) = cpython::version() {
                sources::allocations::install_python_allocators(v, true);
            }
        },
        object_closing: modules::forget_handle,
        objects_removed: modules::rescan,
        process_ending: lifecycle::process_ending,
        before_exec: lifecycle::before_exec,
        exec_failed: lifecycle::exec_failed,
        signalling_self: lifecycle::signalling_self,
    });
    // 3.8+ (and a 3.6 whose key was not found in its code) learn the thread-state key when
    // they attach: from the first audit event, or without audit hooks from the first
    // extension-module import.
    if sampler
        .python
        .as_ref()
        .is_some_and(|rt| rt.needs_attachment())
        && !cpython::attach_by_audit_hook(on_attach)
    {
        cpython::attach_later(on_attach);
    } else if memory && version.is_some() {
        // The memory profiler's re-wrapping of the allocators and its atexit callback
        // ride on the audit hook (3.8+; nothing happens without it).
        cpython::attach_by_audit_hook(on_attach);
    }
    alloc::register_fork_handlers();
    // After the heaps': its prepare handler runs before theirs.
    fork_locks::register();
    // SAFETY: registering plain extern "C" functions.
    unsafe {
        libc::pthread_atfork(None, None, Some(lifecycle::after_fork_in_child));
        libc::atexit(lifecycle::at_exit);
    }
    let wall = profile_cpu && sampler.clock == config::Clock::Wall;
    if wall {
        // Before the wall passes start: they read other threads' Python frames through
        // the threads' key slots.
        crate::capture::python::find_key_slots();
    }
    if let Some(ppm) = lifecycle::config().and_then(|c| c.max_overhead_ppm) {
        sources::budget::set(ppm);
    }
    // With perf events, the helper process that holds them first (every thread's event is
    // opened by it). Sampling CPU time in cpu mode, it starts once the process has run a
    // while or starts a thread (sources::late): until then the threads are on POSIX timers.
    if let Some(event) = sampler.trigger.event().filter(|_| profile_cpu) {
        let started = if wall {
            sources::helper::start(sampler, sources::helper::Job::WallAndEvents)
        } else if event.is_time() {
            sources::late::defer();
            Ok(())
        } else {
            sources::helper::start(sampler, sources::helper::Job::Events)
        };
        if let Err(e) = started {
            crate::notice!("pyigprof: {e}; not profiling");
        }
    }
    // The main thread's timer; every later thread starts its own, and threads that already
    // exist are adopted.
    sampler.register_current_thread(crate::sources::perf::Wait::ForAnswer);
    for problem in adopt::adopt_existing_threads(sampler).1 {
        crate::notice!("pyigprof: {problem}");
    }
    if wall {
        if let Err(e) = sources::wall::start(sampler) {
            crate::notice!("pyigprof: {e}; not profiling");
        }
    }
    // Continuous profiling's writer, a thread of pyigprof's, once the program's threads are
    // adopted (it does not answer the roll call: it blocks SIGPROF).
    if let Some(config) = lifecycle::config() {
        output::windows::start(config);
    }
}

fn with_sampler(f: impl FnOnce(&'static sampler::Sampler)) {
    if let Some(s) = sampler::get() {
        f(s)
    }
}

/// The audit hook (or a later attachment) saw the runtime: hand its thread-state key to
/// the sampler.
fn on_attach(attached: cpython::Attached) {
    with_sampler(|s| {
        if let Some(rt) = s.python.as_ref().filter(|rt| rt.needs_attachment()) {
            rt.attach(attached.tss_key);
        }
    });
    // The interpreter chose its allocators by now (its debug hooks replace the wrappers).
    if let Some(v) = cpython::version() {
        sources::allocations::install_python_allocators(v, true);
    }
}
