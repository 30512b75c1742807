//! Reading IgProf-format profiles (written by pyigprof or by IgProf itself) and
//! printing reports from them.
//!
//! The file format is described in docs/dump-format.md of this repository and in
//! IgProf's doc/dump-format. The pieces:
//! - [`parse`]: streaming reader of dumps, plain or gzip, HEX or decimal variant, into
//! - [`profile`]: one merged call tree with its tables of functions, files, counters;
//! - [`view`]: which frames reports show (the Python view hides the interpreter's
//!   plumbing below Python code and shows its work; `--all-frames` shows all);
//! - [`report`]: reports on a profile, one module each ([`report::top`],
//!   [`report::lines`], [`report::tree`], [`report::text`], [`report::collapsed`],
//!   [`report::flamegraph`], [`report::speedscope`], [`report::callgrind`],
//!   [`report::pprof`], [`report::sqlite`], [`report::json`], and
//!   [`report::diff`], which compares two profiles; [`report::memory`] says what the
//!   memory counters measure and writes their bytes, [`report::events`] the same for
//!   the sampled event counters such as `PERF_PAGE_FAULTS`);
//! - [`transform`]: options that reshape the call tree after the view (IgProf's
//!   `--value peak`, count filters, `--merge-libraries`, `--merge-regexp`; `--hide`,
//!   `--merge-ancestors`);
//! - [`stats`]: the significance test of comparisons;
//! - [`symbol`]: how functions are named in reports (demangling, Python locations,
//!   interpreter files);
//! - [`resolve`]: names for native functions a dump leaves unnamed (`@?0x…`), from the
//!   symbol tables and debug information of the binaries on this machine;
//! - [`progress`]: reading profiles with a progress bar on a terminal;
//! - [`error`]: the one-line errors the command prints before exiting with status 2.
//!
//! ```
//! use igprof_analyse::{parse, report::top};
//!
//! let dump = b"P=(HEX ID=4d2 N=(python3 x.py) T=0.004000)
//! C1 FN0=(F0=(/work/x.py)+1 N=(<module>))+2 V0=(PERF_TICKS):(3,5,5)
//! ";
//! let mut profile = igprof_analyse::Profile::new();
//! parse::load_reader(&mut profile, "x.txt", &dump[..]).unwrap();
//! let report = top::compute(&profile, &top::Options::default()).unwrap();
//! assert_eq!(report.measure.total.amount, 5); // ticks, i.e. 5 × 4 ms = 0.020 s
//! assert_eq!(report.rows[0].item.label.line(), "<module> (/work/x.py:1)");
//! ```

pub mod debuginfod;
pub mod error;
pub mod escape;
pub mod parse;
pub mod profile;
pub mod progress;
pub mod report;
pub mod resolve;
pub mod stats;
pub mod symbol;
#[cfg(test)]
mod testing;
pub mod transform;
pub mod view;

pub use error::Error;
pub use parse::read_profiles;
pub use profile::Profile;
