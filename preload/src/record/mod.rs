//! Recording: counting captured call stacks.
//!
//! - [`trace`]: the trace tree, one per thread, lock-free, in memory mapped ahead of time;
//! - [`threads`]: per-thread slots (trace-tree root, stack bounds, unwinding cache,
//!   scratch buffers), found from the handler by `pthread_t`;
//! - [`memory`]: the memory counters of sampled allocations and the blocks that serve them;
//! - [`lock_names`]: what names each lock (the lock profiler's table);
//! - [`stats`]: the sampler's own statistics (samples, ticks, what was dropped and why);
//! - [`timing`]: how long the handler takes per sample.

pub mod lock_names;
pub mod memory;
pub mod stats;
pub mod threads;
pub mod timing;
pub mod trace;
