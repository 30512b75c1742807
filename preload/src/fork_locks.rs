//! The library's locks across `fork` (`pthread_atfork`). A child has only the thread that
//! forked: a lock another thread held at that moment stays held in the child for good, and
//! the child's first use of it waits forever. The `std` mutexes that the library's threads
//! (the window writer, the pusher, `attach`'s control thread) or the program's threads
//! (after a `dlopen`) hold for a moment are taken by the forking thread before `fork`
//! ([`prepare_fork`]) and released after it in the parent and in the child
//! ([`after_fork`]): the child gets them free, in the state their last holder left.
//!
//! Found December 5 (CI, `windows::recycled_gthread_workers_write_their_last_window`): a
//! gunicorn process forked while its window writer copied the object history; the child's
//! main thread (at its first `dlopen`, importing `_hashlib`) and its own window writer then
//! waited for that lock forever.
//!
//! Registered after the heaps' handlers ([`crate::alloc::prepare_fork`]), so that it runs
//! before theirs (prepare handlers run in the reverse order of their registration): code
//! under these locks allocates from the library's heap. It allocates nothing itself. The
//! locks are taken in the order the code nests them (no code takes one while holding a
//! later one), so that taking them all cannot wait for a thread that waits for one
//! already taken. The pusher's queue is not here: a child leaves its parent's and makes
//! its own ([`crate::output::push::restart_after_fork`]).

use crate::capture::python::tasks;
use crate::capture::symbols;
use crate::capture::unwind::modules;
use crate::sources::lock_calls;
use std::cell::RefCell;

/// The guards [`prepare_fork`] takes, outermost first.
struct Held {
    _lock_calls: lock_calls::ForkGuard,
    _tasks: tasks::ForkGuard,
    _modules: modules::ForkGuard,
    _symbols: symbols::ForkGuard,
}

thread_local! {
    /// What the forking thread holds across `fork`.
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// `pthread_atfork` prepare handler: takes the library's locks, in order: the objects
/// whose lock calls are wrapped and those whose asyncio sections were read (after a
/// `dlopen`, one at a time), the object list (its update lock, then its history, as a
/// rescan takes them), the symbol tables.
pub extern "C" fn prepare_fork() {
    let held = Held {
        _lock_calls: lock_calls::lock_for_fork(),
        _tasks: tasks::lock_for_fork(),
        _modules: modules::lock_for_fork(),
        _symbols: symbols::lock_for_fork(),
    };
    HELD.with(|h| *h.borrow_mut() = Some(held));
}

/// `pthread_atfork` parent and child handler: releases what [`prepare_fork`] took.
pub extern "C" fn after_fork() {
    HELD.with(|h| h.borrow_mut().take());
}

/// Registers [`prepare_fork`] and [`after_fork`] with `pthread_atfork`. To be called after
/// the heaps' handlers are registered. Not from a signal handler.
pub fn register() {
    // SAFETY: registering plain extern "C" functions.
    unsafe {
        libc::pthread_atfork(Some(prepare_fork), Some(after_fork), Some(after_fork));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Another thread holds every one of the locks when this one forks: the fork waits
    /// for them, and the child finds them free (without the handlers, it would wait
    /// forever for the first: it fails after 10 s).
    #[test]
    fn a_fork_child_finds_free_the_locks_another_thread_held() {
        static REGISTERED: std::sync::Once = std::sync::Once::new();
        REGISTERED.call_once(register);
        let (taken, wait) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let held = (
                lock_calls::lock_for_fork(),
                tasks::lock_for_fork(),
                modules::lock_for_fork(),
                symbols::lock_for_fork(),
            );
            taken.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            drop(held);
        });
        wait.recv().unwrap();
        // SAFETY: the child only takes and drops the locks, then `_exit`s.
        let child = unsafe { libc::fork() };
        if child == 0 {
            drop((
                lock_calls::lock_for_fork(),
                tasks::lock_for_fork(),
                modules::lock_for_fork(),
                symbols::lock_for_fork(),
            ));
            let _ = modules::history();
            // SAFETY: ends the child without running the test harness's exit.
            unsafe { libc::_exit(0) };
        }
        assert!(child > 0, "fork failed");
        let started = Instant::now();
        let mut status = 0;
        let ended = loop {
            // SAFETY: waits for our own child without blocking.
            let got = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
            if got == child {
                break true;
            }
            if started.elapsed() > Duration::from_secs(10) {
                // SAFETY: our own child.
                unsafe {
                    libc::kill(child, libc::SIGKILL);
                    libc::waitpid(child, &mut status, 0);
                }
                break false;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        holder.join().unwrap();
        assert!(ended, "the fork child still waits for a lock after 10 s");
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "status {status}"
        );
    }
}
