//! Capture: from the registers of an interrupted thread to one mixed call stack.
//!
//! - [`unwind`]: native frames, unwound with CFI (framehop, with a per-thread cache of CFI
//!   rows, [`unwind::cfi`]) or frame pointers, over the loaded objects ([`unwind::modules`]);
//! - [`python`]: the thread's Python frames, read from CPython's own frame chain — all
//!   version-specific CPython knowledge is in [`python::layout`];
//! - [`mixed`]: the splice of the Python frames into the native stack where the
//!   interpreter's evaluator ran them;
//! - [`frames`]: what a frame key (a `u64` trace-tree key) means;
//! - [`waits`]: why a blocked thread waits (GIL, lock, I/O, sleep, …), from its system call;
//! - [`probe`]: reads of the program's memory that fail instead of faulting;
//! - [`symbols`]: ELF symbol tables of the loaded objects (start-up and writing only).

pub mod frames;
pub mod mixed;
pub mod probe;
pub mod python;
pub mod symbols;
pub mod unwind;
pub mod waits;
