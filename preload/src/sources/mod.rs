//! Sources of samples: what makes a thread stop and hand its call stack to the sampler.
//!
//! - [`timer`]: the registration of threads and their sampling clocks, either per-thread
//!   POSIX timers on each thread's CPU clock, delivering `SIGPROF`, and the accounting of
//!   ticks they stand for, or
//! - [`perf`]: per-thread perf events (`task-clock`, not tied to the kernel's tick, or
//!   another event: page faults, hardware counters), opt-in and chosen at start-up where
//!   the kernel allows them ([`Trigger`]);
//! - [`late`]: perf events started late, a process's first milliseconds on timers;
//! - [`random`]: the random intervals between samples;
//! - [`budget`]: the overhead budget, which lengthens them when the profiler costs more
//!   than `PYIGPROF_MAX_OVERHEAD`;
//! - [`wall`]: wall mode's sampler process, which samples threads blocked in system calls
//!   from outside, without signalling them;
//! - [`handler`]: the `SIGPROF` handler, which turns a timer's signal into one sample;
//! - [`adopt`]: threads that existed before the constructor, found and given timers;
//! - [`allocations`]: the allocator hooks (`malloc`, …, and CPython's allocator domains),
//!   which sample allocations for the memory profiler;
//! - [`locks`]: the lock profiler's accounting: waits and holds of locks sampled on
//!   nanoseconds, and the locks' names;
//! - [`lock_calls`]: the semaphore, mutex, read-write lock and condition variable hooks
//!   that time them.

pub mod adopt;
pub mod allocations;
pub mod budget;
pub mod handler;
pub mod helper;
pub mod late;
pub mod lock_calls;
pub mod lock_objects;
pub mod locks;
pub mod perf;
pub mod random;
pub mod timer;
pub mod wall;

/// What interrupts each thread for a sample, chosen at start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// A perf event per thread ([`perf`]): `task-clock` for CPU time, or the event
    /// `PYIGPROF_EVENT` names.
    Event(perf::Event),
    /// A POSIX timer per thread on its CPU clock ([`timer`]), checked by the kernel on its
    /// scheduler tick; `why` says why perf events are not used (`the default`, `wall
    /// mode`, or `perf_event_open`'s refusal).
    Timer {
        /// Why not a perf event.
        why: &'static str,
    },
}

impl Trigger {
    /// The counter the samples are counted under: `PERF_TICKS` for CPU time, the event's
    /// (`PERF_PAGE_FAULTS`, …) otherwise.
    pub fn counter(&self) -> &'static str {
        match self {
            Trigger::Event(e) => e.counter,
            Trigger::Timer { .. } => "PERF_TICKS",
        }
    }

    /// The event, if a perf event samples.
    pub fn event(&self) -> Option<&perf::Event> {
        match self {
            Trigger::Event(e) => Some(e),
            Trigger::Timer { .. } => None,
        }
    }

    /// Chooses what samples the threads, at start-up. POSIX timers with
    /// `PYIGPROF_PERF_EVENTS=0`. In wall mode, whose running threads are sampled on their
    /// CPU time (counted only while they run: a blocked thread is never interrupted),
    /// `task-clock` if the kernel opens it, else POSIX CPU timers. Otherwise, in cpu mode:
    /// the event asked for (`task-clock` unless `PYIGPROF_EVENT` names another) if the
    /// kernel opens it; else `task-clock`, saying on stderr why the event asked for is not
    /// sampled; else POSIX timers, the summary line saying why.
    pub fn choose(config: &crate::config::Config) -> Trigger {
        if config.clock == crate::config::Clock::Wall && !config.event.is_time() {
            crate::notice!(
                "pyigprof: PYIGPROF_EVENT={} is not sampled in wall mode (PYIGPROF_CLOCK=wall \
                 samples time); sampling wall time",
                config.event.name
            );
        }
        if !config.perf_events {
            return Trigger::Timer {
                why: "PYIGPROF_PERF_EVENTS=0",
            };
        }
        if config.clock == crate::config::Clock::Wall {
            let task_clock = perf::Event::task_clock(config.period_ns());
            return match perf::probe(&task_clock) {
                Ok(()) => Trigger::Event(task_clock),
                Err(refused) => refused_by(refused),
            };
        }
        let event = config.event;
        let task_clock = perf::Event::task_clock(config.period_ns());
        if event.counter == "PERF_CONTEXT_SWITCHES" {
            // Counted as the thread goes off CPU: the overflow's signal would then wake it
            // and interrupt the call it blocks in (measured: 26 samples per time.sleep, each
            // sleep interrupted and retried).
            crate::notice!(
                "pyigprof: cannot sample the event context-switches: its signal would interrupt \
                 the blocking call where the thread went off CPU; sampling CPU time instead \
                 (PYIGPROF_CLOCK=wall shows where threads block)"
            );
            if perf::probe(&task_clock).is_ok() {
                return Trigger::Event(task_clock);
            }
            return Trigger::Timer {
                why: "perf_event_open:refused",
            };
        }
        let mut refused = match perf::probe(&event) {
            Ok(()) => return Trigger::Event(event),
            Err(e) => e,
        };
        if !event.is_time() {
            crate::notice!(
                "pyigprof: cannot sample the event {}: {}; sampling CPU time instead",
                event.name,
                perf::describe(refused)
            );
            match perf::probe(&task_clock) {
                Ok(()) => return Trigger::Event(task_clock),
                Err(e) => refused = e,
            }
        }
        refused_by(refused)
    }

    /// What sampled the profile: the trigger chosen, but POSIX timers for a process whose
    /// perf events were to start late ([`late`]) and never did (it ended within its first
    /// [`late::TIMERS_FIRST_NS`] of CPU time without starting a thread).
    /// Not from a signal handler (a refusal's reason is formatted).
    pub fn used(&self) -> Trigger {
        match self {
            Trigger::Event(e) if e.is_time() && late::on_timers() => match late::refused() {
                Some(errno) => refused_by(errno),
                None => {
                    const _: () = assert!(late::TIMERS_FIRST_NS == 20_000_000, "the why says");
                    Trigger::Timer {
                        why: "perf events start after the first 20 ms of CPU time",
                    }
                }
            },
            other => *other,
        }
    }

    /// How the trigger is named in the statistics (`#pyigprof sampling …`) and the summary:
    /// `task-clock perf events at random intervals`, `page-faults perf events every 100`,
    /// `POSIX CPU timers (the default; …)`.
    pub fn describe(&self) -> String {
        match self {
            Trigger::Event(e) if e.randomized() && late::started_late() => format!(
                "{} perf events at random intervals (after POSIX CPU timers for the first {} \
                 ms of CPU time)",
                e.name,
                late::TIMERS_FIRST_NS / 1_000_000
            ),
            Trigger::Event(e) if e.randomized() => {
                format!("{} perf events at random intervals", e.name)
            }
            Trigger::Event(e) => format!("{} perf events every {}", e.name, e.period),
            Trigger::Timer { why } => format!(
                "POSIX CPU timers ({why}; at the kernel's ticks, not random: a program \
                 that repeats in step with them may be seen at one phase; \
                 perf events sample at the rate asked for, at random instants)"
            ),
        }
    }
}

/// POSIX timers because the kernel refused the perf event with `errno`
/// (`perf_event_open:EACCES`, …).
fn refused_by(errno: i32) -> Trigger {
    Trigger::Timer {
        why: Box::leak(
            format!(
                "perf_event_open:{}",
                perf::errno_name(errno).replace(' ', "-")
            )
            .into_boxed_str(),
        ),
    }
}
