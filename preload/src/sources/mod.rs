//! Sources of samples: what makes a thread stop and hand its call stack to the sampler.
//!
//! - [`timer`]: per-thread POSIX timers on each thread's CPU clock, delivering `SIGPROF`,
//!   the accounting of ticks they stand for, and the registration of threads;
//! - [`wall`]: wall mode's sampler process, which samples threads blocked in system calls
//!   from outside, without signalling them;
//! - [`handler`]: the `SIGPROF` handler, which turns a timer's signal into one sample;
//! - [`adopt`]: threads that existed before the constructor, found and given timers;
//! - [`allocations`]: the allocator hooks (`malloc`, …, and CPython's allocator domains),
//!   which sample allocations for the memory profiler.

pub mod adopt;
pub mod allocations;
pub mod handler;
pub mod timer;
pub mod wall;
