//! Output: writing the trace trees as an IgProf profile.
//!
//! - [`dump`]: the dump writer — trees merged, frames named, IgProf text (gzip);
//! - [`gzip`]: the gzip stream it is written as, stored when small;
//! - [`live`]: what every thread does now, for `pyigprof dump`;
//! - [`windows`]: continuous profiling, a profile per time window (`PYIGPROF_WINDOW`);
//! - [`lifecycle`]: when a profile is written — at exit, before exec, on fatal signals, in
//!   fork children, on a dump signal or interval — and how the process then ends as it
//!   would have.

pub mod dump;
pub mod gzip;
pub mod lifecycle;
pub mod live;
pub mod pprof;
pub mod push;
pub mod windows;
