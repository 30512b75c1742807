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
//! already taken; a lock still held after a second is left (a fork from a signal handler
//! that interrupted its own thread holding one would otherwise wait for itself). The
//! pusher's queue is not here: a child leaves its parent's and makes its own
//! ([`crate::output::push::restart_after_fork`]).

use crate::capture::python::tasks;
use crate::capture::symbols;
use crate::capture::unwind::modules::{self, ObjectInfo};
use crate::sources::lock_calls;
use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// The guards [`prepare_fork`] takes, outermost first (`None`: not taken, [`hold`]).
struct Held {
    _lock_calls: Option<MutexGuard<'static, Vec<(u64, u64)>>>,
    _tasks: Option<MutexGuard<'static, Vec<(PathBuf, u64)>>>,
    _update: Option<MutexGuard<'static, ()>>,
    _history: Option<MutexGuard<'static, Vec<ObjectInfo>>>,
    _symbols: Option<MutexGuard<'static, Option<symbols::Loaded>>>,
}

thread_local! {
    /// What the forking thread holds across `fork`.
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// How long [`hold`] tries for a lock: far longer than any holder keeps one (microseconds
/// to copy a list or look a table up), and short enough that a fork from a signal handler
/// whose thread was interrupted holding it (it would wait for itself) goes on.
const LONGEST_WAIT: Duration = Duration::from_secs(1);

/// Takes `lock` (a poisoned one too), trying for up to [`LONGEST_WAIT`]; `None` when it
/// stays held that long (the child then finds it held, as without these handlers).
fn hold<T>(lock: &'static Mutex<T>) -> Option<MutexGuard<'static, T>> {
    let started = Instant::now();
    loop {
        match lock.try_lock() {
            Ok(guard) => return Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) if started.elapsed() < LONGEST_WAIT => {
                std::thread::sleep(Duration::from_micros(50));
            }
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

/// `pthread_atfork` prepare handler: takes the library's locks, in order: the objects
/// whose lock calls are wrapped and those whose asyncio sections were read (after a
/// `dlopen`, one at a time), the object list (its update lock, then its history, as a
/// rescan takes them), the symbol tables.
pub extern "C" fn prepare_fork() {
    let (update, history) = modules::fork_locks();
    let held = Held {
        _lock_calls: hold(lock_calls::fork_lock()),
        _tasks: hold(tasks::fork_lock()),
        _update: hold(update),
        _history: hold(history),
        _symbols: hold(symbols::fork_lock()),
    };
    HELD.with(|h| *h.borrow_mut() = Some(held));
}

/// `pthread_atfork` parent and child handler: releases what [`prepare_fork`] took.
pub extern "C" fn after_fork() {
    HELD.with(|h| h.borrow_mut().take());
}

/// Registers [`prepare_fork`] and [`after_fork`] with `pthread_atfork`, once per process
/// (registered twice, the second prepare handler would wait its second for each lock the
/// first took, and then release them before the fork). To be called after the heaps'
/// handlers are registered. Not from a signal handler.
pub fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: registering plain extern "C" functions.
    ONCE.call_once(|| unsafe {
        libc::pthread_atfork(Some(prepare_fork), Some(after_fork), Some(after_fork));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another thread holds every one of the locks when this one forks: the fork waits
    /// for them, and the child finds them free (without the handlers, it would wait
    /// forever for the first: it fails after 10 s).
    #[test]
    fn a_fork_child_finds_free_the_locks_another_thread_held() {
        register();
        let (taken, wait) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let (update, history) = modules::fork_locks();
            let held = (
                lock_calls::fork_lock().lock().unwrap(),
                tasks::fork_lock().lock().unwrap(),
                update.lock().unwrap(),
                history.lock().unwrap(),
                symbols::fork_lock().lock().unwrap(),
            );
            taken.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            drop(held);
        });
        wait.recv().unwrap();
        // SAFETY: the child only takes and drops the locks, then `_exit`s.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let (update, history) = modules::fork_locks();
            drop((
                lock_calls::fork_lock().lock(),
                tasks::fork_lock().lock(),
                update.lock(),
                history.lock(),
                symbols::fork_lock().lock(),
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

    /// A lock the forking thread itself holds (as when a signal handler that forks has
    /// interrupted code holding it) is left after a second, not waited for forever.
    #[test]
    fn a_fork_by_the_thread_that_holds_a_lock_goes_on() {
        register();
        let held = symbols::fork_lock().lock().unwrap();
        let started = Instant::now();
        // SAFETY: the child only `_exit`s.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: ends the child without running the test harness's exit.
            unsafe { libc::_exit(0) };
        }
        let took = started.elapsed();
        drop(held);
        assert!(child > 0, "fork failed");
        let mut status = 0;
        // SAFETY: our own child, which exits at once.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "status {status}");
        assert!(took < Duration::from_secs(5), "the fork took {took:?}");
    }
}
