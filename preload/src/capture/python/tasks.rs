//! asyncio task stacks (CPython 3.11+): which task a sample's coroutine runs for, and
//! which tasks await it — 3.14+ from what asyncio publishes for profilers ([`Asyncio`]),
//! 3.11–3.13 from the `_asyncio` module's own dict and sets and each task's callbacks
//! ([`ModuleAsyncio`]); and, for `pyigprof dump`, the tasks of a running program
//! ([`TaskNow`]).
//!
//! A thread running an event loop has, in its frame chain, `run_forever → _run_once →
//! Handle._run` and then the coroutine of the task whose step it runs: the chain of
//! tasks that await that task is not on any stack (they are suspended). asyncio describes
//! its C tasks for profilers from 3.14 (`_Py_AsyncioModuleDebugOffsets`,
//! [`AsyncioLayout`]): the thread state's running task, each task's name, coroutine and
//! `awaited_by`. A sample whose thread runs a task gets, directly outside the frame of the
//! task's coroutine, one frame per task of its await chain, `<task NAME>` (the running
//! task innermost, the task nobody awaits outermost): so the time of `fetch_user` is found
//! under `<task handler> → <task fetch_user>` whichever connection's loop step ran it.
//!
//! A task's name is the one the program gave it (`create_task(…, name=…)`,
//! `TaskGroup.create_task(…, name=…)`); tasks asyncio numbers itself (`Task-<n>`, an int
//! until something asks for the name, then that str) are named by their coroutine's
//! qualified name instead, so that a server's thousand unnamed `handle_client` tasks are
//! one node, not a thousand, and a task keeps one name whether or not its name was asked
//! for.
//!
//! Everything here that runs in the signal handler ([`Asyncio::running`],
//! [`Asyncio::chain`], [`Names::intern`], [`insert`]) reads through checked reads, writes
//! only pre-mapped memory, and is bounded ([`MAX_CHAIN`] tasks, [`MAX_SET_ENTRIES`]).

use super::code::Codes;
use super::code::{read_text, Types};
use super::layout::{
    AsyncioLayout, Awaited, CoroutineLayout, Layout, ASYNCIO_DEBUG_WORDS, SET_ENTRY, SET_MASK,
    SET_TABLE,
};
use super::layout::{ObjectLayout, TaskObjectLayout, MODULE_DICT, TP_BASICSIZE};
use super::objects::{Builtin, Key, Reader};
use super::read;
use super::stack::position;
use crate::capture::frames::{marker_key, python_key, task_key, Marker};
use crate::capture::unwind::modules;
use crate::mem::{Bytes, ZeroedArray};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Most tasks of one await chain given frames; the outer ones past it are left out.
pub const MAX_CHAIN: usize = 16;
/// Most futures (awaited by, not tasks: a `gather`'s) followed between two tasks.
const MAX_HOPS: usize = 4 * MAX_CHAIN;
/// Most entries of an `awaited_by` set looked at for a task that awaits.
pub const MAX_SET_ENTRIES: u64 = 1024;
/// Most tasks of a thread's task list looked at in one wall-mode pass.
pub const MAX_TASKS_LISTED: usize = 4096;
/// Most coroutines of one suspended task's stack (a coroutine awaiting a coroutine …).
const MAX_COROUTINES: usize = 64;

/// One asyncio task of a running program, as `pyigprof dump` lists it
/// ([`Asyncio::task_now`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskNow {
    /// The task object's address (identifies it within one dump).
    pub address: u64,
    /// Whether its thread runs its step now.
    pub running: bool,
    /// The address of the task that awaits it, if one does.
    pub awaited_by: Option<u64>,
    /// Frame keys, outermost first: `<task NAME>`, then its coroutine's frame and those of
    /// the coroutines it awaits in turn, at their `await` lines (only `<task NAME>` for a
    /// running task, whose frames are on its thread's stack).
    pub keys: Vec<u64>,
}

/// What the handler needs to read tasks: asyncio's offsets, the coroutine's, and the set
/// dummy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asyncio {
    /// asyncio's offsets (from its `.AsyncioDebug` section).
    pub layout: AsyncioLayout,
    /// Where a coroutine keeps its frame and qualified name.
    pub coroutine: CoroutineLayout,
    /// `_PySet_Dummy`'s value: the key of a deleted set entry (0 when unknown).
    pub set_dummy: u64,
}

/// The published [`Asyncio`] (null: none; `_asyncio` not imported yet, or before 3.14).
static ASYNCIO: AtomicPtr<Asyncio> = AtomicPtr::new(std::ptr::null_mut());

/// What [`discover`] knows, once published. Async-signal-safe.
#[inline]
pub fn published() -> Option<&'static Asyncio> {
    // SAFETY: published values are leaked boxes, never freed.
    unsafe { ASYNCIO.load(Ordering::Acquire).as_ref() }
}

/// The objects [`discover`] has read the section headers of (path, load bias).
static CHECKED: std::sync::Mutex<Vec<(std::path::PathBuf, u64)>> =
    std::sync::Mutex::new(Vec::new());

/// [`CHECKED`], for `fork` ([`crate::fork_locks`]): a thread of the program that has just
/// loaded an object holds it while [`discover`] reads that object's sections.
pub(crate) fn fork_lock() -> &'static std::sync::Mutex<Vec<(std::path::PathBuf, u64)>> {
    &CHECKED
}

/// Looks for asyncio's `.AsyncioDebug` section in the objects mapped now (the `_asyncio`
/// extension module, loaded by `import asyncio`, or the executable or libpython that has
/// it built in, as Debian's 3.15) and publishes what it says, once. Reads the objects'
/// section headers from their files: not for the signal handler (after `dlopen`, at
/// start-up). Says on stderr (one line) when the section is there but cannot be used.
pub fn discover(layout: &Layout) {
    if published().is_some() || layout.version < (3, 14) {
        return;
    }
    let (Some(coroutine), Some(snapshot)) = (layout.coroutine, modules::current()) else {
        return;
    };
    let Ok(mut checked) = CHECKED.lock() else {
        return;
    };
    for (index, object) in snapshot.objects.iter().enumerate() {
        let base = object
            .path
            .file_name()
            .map(|n| n.as_encoded_bytes())
            .unwrap_or(b"");
        let candidate =
            index == 0 || base.starts_with(b"_asyncio") || base.starts_with(b"libpython");
        let key = (object.path.clone(), object.bias);
        if !candidate || object.in_memory || checked.contains(&key) {
            continue;
        }
        checked.push(key);
        let Some((at, size)) = crate::capture::symbols::section(object, ".AsyncioDebug") else {
            continue;
        };
        let (major, minor) = layout.version;
        let words: Option<Vec<u64>> = (size == 8 * ASYNCIO_DEBUG_WORDS as u64
            && object.range.0 <= at
            && at + size <= object.range.1)
            .then(|| {
                (0..ASYNCIO_DEBUG_WORDS as u64)
                    .map(|i| read::word(at + 8 * i))
                    .collect()
            })
            .flatten();
        let parsed = match words {
            Some(words) => AsyncioLayout::from_debug_section(&words, major, minor),
            None => Err("the section is not 13 words (another revision of the struct)"),
        };
        match parsed {
            Ok(asyncio) => {
                let dummy = pyigprof_hooks::cpython::symbol(c"_PySet_Dummy") as u64;
                let found = Asyncio {
                    layout: asyncio,
                    coroutine,
                    set_dummy: if dummy == 0 {
                        0
                    } else {
                        read::word(dummy).unwrap_or(0)
                    },
                };
                ASYNCIO.store(Box::into_raw(Box::new(found)), Ordering::Release);
                return;
            }
            Err(why) => crate::notice!(
                "pyigprof: cannot read asyncio's tasks in {}: {why}; no task frames",
                object.path.display()
            ),
        }
    }
}

/// What reading a task's frames needs besides asyncio's offsets: where task names and code
/// records are stored, and how this CPython lays out its objects.
pub struct Readers<'a> {
    /// The task names.
    pub names: &'a Names,
    /// The code records of coroutine frames.
    pub codes: &'a Codes,
    /// The interpreter's layout.
    pub layout: &'a Layout,
    /// Its type objects.
    pub types: &'a Types,
}

impl Readers<'_> {
    /// A reader of the interpreter's objects ([`Reader`]); `None` without their layout.
    /// Allocates nothing: async-signal-safe.
    fn objects(&self) -> Option<Reader<'_>> {
        Reader::new(self.layout.objects.as_ref()?, self.layout, self.types)
    }
}

impl Asyncio {
    /// The task whose step the thread with state `tstate` runs, and the address of its
    /// coroutine's frame (embedded in the coroutine object), which the thread's frame chain
    /// goes through while the task's code runs; `None` between steps. Async-signal-safe.
    #[inline]
    fn running_task(&self, tstate: u64) -> Option<(u64, u64)> {
        let task = read::word(tstate + u64::from(self.layout.running_task))?;
        if task == 0 {
            return None;
        }
        let coro = read::word(task + u64::from(self.layout.coro))?;
        (coro != 0).then(|| (task, coro + u64::from(self.coroutine.frame)))
    }

    /// Writes into `out` the addresses of the suspended tasks (their coroutine suspended,
    /// or not started) that the thread with state `tstate` created, but the one it runs now,
    /// from its task list (at most [`MAX_TASKS_LISTED`] looked at, and `out.len()`
    /// written). Returns how many were written. The thread may run meanwhile: every read
    /// is checked, and a list that changes under the walk gives a few tasks more or
    /// fewer. Async-signal-safe.
    fn listed_suspended(&self, tstate: u64, out: &mut [u64]) -> usize {
        let head = tstate + u64::from(self.layout.thread_tasks);
        let running = read::word(tstate + u64::from(self.layout.running_task)).unwrap_or(0);
        let mut node = read::word(head).unwrap_or(head);
        let mut n = 0;
        for _ in 0..MAX_TASKS_LISTED {
            if node == head || node == 0 || n == out.len() {
                break;
            }
            let task = node.wrapping_sub(u64::from(self.layout.task_node));
            if task != running
                && read::byte(task + u64::from(self.layout.is_task)) == Some(1)
                && read::word(task + u64::from(self.layout.coro))
                    .and_then(|coro| coroutine_state(&self.coroutine, coro))
                    .is_some()
            {
                out[n] = task;
                n += 1;
            }
            node = read::word(node).unwrap_or(0);
        }
        n
    }

    /// Every task in the task list of the thread with state `tstate` (the tasks it created
    /// that have not finished), in list order, at most [`MAX_TASKS_LISTED`]; and the one
    /// whose step the thread runs now (0: none). The thread may run meanwhile: every read
    /// is checked. For `pyigprof dump`.
    pub fn tasks_of_thread(&self, tstate: u64) -> (Vec<u64>, u64) {
        let head = tstate + u64::from(self.layout.thread_tasks);
        let running = read::word(tstate + u64::from(self.layout.running_task)).unwrap_or(0);
        let mut node = read::word(head).unwrap_or(head);
        let mut tasks = Vec::new();
        for _ in 0..MAX_TASKS_LISTED {
            if node == head || node == 0 {
                break;
            }
            let task = node.wrapping_sub(u64::from(self.layout.task_node));
            if read::byte(task + u64::from(self.layout.is_task)) == Some(1) {
                tasks.push(task);
            }
            node = read::word(node).unwrap_or(0);
        }
        (tasks, running)
    }

    /// The future or task that awaits `future` (a task or a future): its `awaited_by`,
    /// or the first live entry of it when it is a set.
    fn awaiter(&self, future: u64) -> Option<u64> {
        let by = read::word(future + u64::from(self.layout.awaited_by))?;
        if by == 0 {
            return None;
        }
        if read::byte(future + u64::from(self.layout.awaited_by_is_set))? == 0 {
            return Some(by);
        }
        let mask = read::word(by + u64::from(SET_MASK))?;
        let table = read::word(by + u64::from(SET_TABLE))?;
        (0..=mask.min(MAX_SET_ENTRIES - 1)).find_map(|i| {
            let key = read::word(table.checked_add(i * SET_ENTRY)?)?;
            (key != 0 && key != self.set_dummy).then_some(key)
        })
    }

    /// The index in `names` of `task`'s name: the str the program gave, else its
    /// coroutine's qualified name.
    fn name(&self, task: u64, with: &Readers<'_>, scratch: &mut [u8]) -> Option<u32> {
        let given = read::word(task + u64::from(self.layout.task_name))?;
        let coro = read::word(task + u64::from(self.layout.coro))?;
        task_name(given, coro, &self.coroutine, with, scratch)
    }
}

/// How one CPython's asyncio tasks are read from the signal handler, for [`chain`]: 3.14+'s
/// published offsets ([`Asyncio`]) or 3.11–3.13's measured ones ([`ModuleAsyncio`]).
/// Every method is async-signal-safe.
pub trait TaskModel {
    /// Writes into `out` the tasks whose steps may be running on the thread with state
    /// `tstate`, each with its coroutine's frame (which that thread's frame chain goes
    /// through while the step runs): 3.14+ its running task; 3.11–3.13 every loop's; how
    /// many.
    fn running(&self, tstate: u64, with: &Readers<'_>, out: &mut [(u64, u64)]) -> usize;
    /// Writes into `out` the suspended tasks (coroutine suspended or not started) of the
    /// thread with state `tstate` (`thread` its `pthread_t`, `main` whether it is the main
    /// thread) but the one it runs now; how many (at most [`MAX_TASKS_LISTED`] looked at).
    fn suspended_tasks(
        &self,
        tstate: u64,
        thread: u64,
        main: bool,
        with: &Readers<'_>,
        out: &mut [u64],
    ) -> usize;
    /// Where a coroutine keeps its frame, name and state.
    fn coroutine(&self) -> &CoroutineLayout;
    /// Whether `at` is a task (else a future between two tasks, such as a `gather`'s).
    fn is_task(&self, at: u64, with: &Readers<'_>) -> bool;
    /// The task's coroutine.
    fn coro(&self, task: u64) -> Option<u64>;
    /// The index in `with.names` of the task's name.
    fn name(&self, task: u64, with: &Readers<'_>, scratch: &mut [u8]) -> Option<u32>;
    /// The task or future that awaits `future`.
    fn awaiter(&self, future: u64, with: &Readers<'_>) -> Option<u64>;
}

impl TaskModel for Asyncio {
    fn running(&self, tstate: u64, _: &Readers<'_>, out: &mut [(u64, u64)]) -> usize {
        match (self.running_task(tstate), out.first_mut()) {
            (Some(running), Some(first)) => {
                *first = running;
                1
            }
            _ => 0,
        }
    }
    fn suspended_tasks(
        &self,
        tstate: u64,
        _: u64,
        _: bool,
        _: &Readers<'_>,
        out: &mut [u64],
    ) -> usize {
        self.listed_suspended(tstate, out)
    }
    fn coroutine(&self) -> &CoroutineLayout {
        &self.coroutine
    }
    fn is_task(&self, at: u64, _: &Readers<'_>) -> bool {
        read::byte(at + u64::from(self.layout.is_task)) == Some(1)
    }
    fn coro(&self, task: u64) -> Option<u64> {
        read::word(task + u64::from(self.layout.coro))
    }
    fn name(&self, task: u64, with: &Readers<'_>, scratch: &mut [u8]) -> Option<u32> {
        Asyncio::name(self, task, with, scratch)
    }
    fn awaiter(&self, future: u64, _: &Readers<'_>) -> Option<u64> {
        Asyncio::awaiter(self, future)
    }
}

/// This process's asyncio tasks as the handler reads them: 3.14+'s published offsets, or
/// 3.11–3.13's module once found.
pub enum Tasks {
    Published(&'static Asyncio),
    Module(ModuleAsyncio),
}

impl Tasks {
    /// The tasks' model for a sample of the thread with state `tstate` ([`published`],
    /// else [`ModuleAsyncio::find`]); `None` without asyncio. Async-signal-safe.
    pub fn find(with: &Readers<'_>, tstate: u64) -> Option<Tasks> {
        match published() {
            Some(asyncio) => Some(Tasks::Published(asyncio)),
            None => ModuleAsyncio::find(with, tstate).map(Tasks::Module),
        }
    }

    /// Its reader.
    pub fn model(&self) -> &dyn TaskModel {
        match self {
            Tasks::Published(asyncio) => *asyncio,
            Tasks::Module(module) => module,
        }
    }
}

/// Task `task` as `pyigprof dump` lists it: its name's frame key (`<task NAME>`), the
/// task that awaits it (through the futures between them, such as a `gather`'s), and the
/// frames of its coroutine and of each coroutine that one awaits, outermost first, at the
/// lines where they wait — none when its coroutine runs (`running`: its frames are on its
/// thread's stack) or has finished. `None` when `task` is not a task or its name cannot be
/// read. `scratch` holds a name ([`super::code::MAX_TEXT`] bytes). Allocates: not for the
/// signal handler.
pub fn task_now<M: TaskModel + ?Sized>(
    model: &M,
    task: u64,
    running: bool,
    with: &Readers<'_>,
    scratch: &mut [u8],
) -> Option<TaskNow> {
    if !model.is_task(task, with) {
        return None;
    }
    let name = task_key(model.name(task, with, scratch)?);
    let mut awaited_by = None;
    let mut at = model.awaiter(task, with);
    for _ in 0..MAX_HOPS {
        let Some(future) = at else { break };
        if model.is_task(future, with) {
            awaited_by = Some(future);
            break;
        }
        at = model.awaiter(future, with);
    }
    let mut frames = vec![0u64; MAX_COROUTINES];
    let n = if running {
        0
    } else {
        model.coro(task).map_or(0, |coro| {
            coroutine_frames(model.coroutine(), coro, with, scratch, &mut frames)
        })
    };
    let mut keys = vec![name];
    keys.extend_from_slice(&frames[..n]);
    Some(TaskNow {
        address: task,
        running,
        awaited_by,
        keys,
    })
}

/// Writes into `out`, innermost first, the frame keys of the await chain of `task`:
/// `<task T>` for the task itself; then for the task that awaits it, the frames of its
/// suspended coroutines (innermost first: the coroutine that awaits, then the one that
/// awaits that coroutine, …, the task's own) and its `<task P>`; and so on out to the
/// task nothing awaits (futures between them, such as a `gather`'s, are followed but have
/// no frame). Stops at a task whose name cannot be read or interned, after [`MAX_CHAIN`]
/// tasks, or when `out` is full. `scratch` holds a name ([`super::code::MAX_TEXT`]
/// bytes). Returns the number of keys written. Async-signal-safe.
pub fn chain<M: TaskModel + ?Sized>(
    model: &M,
    task: u64,
    with: &Readers<'_>,
    scratch: &mut [u8],
    out: &mut [u64],
) -> usize {
    let mut n = 0;
    let mut tasks = 0;
    let mut at = task;
    for _ in 0..MAX_HOPS {
        if at == 0 || n >= out.len() || tasks == MAX_CHAIN {
            break;
        }
        if model.is_task(at, with) {
            let Some(name) = model.name(at, with, scratch) else {
                break;
            };
            if tasks > 0 {
                // An awaiting task: where its coroutines wait, above the task it awaits.
                let room = out.len() - n - 1;
                let frames = model.coro(at).map_or(0, |coro| {
                    coroutine_frames(
                        model.coroutine(),
                        coro,
                        with,
                        scratch,
                        &mut out[n..n + room],
                    )
                });
                out[n..n + frames].reverse();
                n += frames;
            }
            out[n] = task_key(name);
            n += 1;
            tasks += 1;
        }
        at = model.awaiter(at, with).unwrap_or(0);
    }
    n
}

/// Writes into `out` the call stack of the suspended task `task`, outermost first: its
/// await chain's `<task …>` frames (the task nobody awaits first), the frames of its
/// coroutine and of each coroutine that one awaits in turn (at their `await` lines), and
/// `<awaiting>`. `scratch` holds a name ([`super::code::MAX_TEXT`] bytes). `None` when
/// the task's coroutine is no longer suspended or a read fails. Async-signal-safe.
pub fn suspended_stack<M: TaskModel + ?Sized>(
    model: &M,
    task: u64,
    with: &Readers<'_>,
    scratch: &mut [u8],
    out: &mut [u64],
) -> Option<usize> {
    let chain_len = chain(model, task, with, scratch, out);
    if chain_len == 0 || chain_len + 1 >= out.len() {
        return None;
    }
    out[..chain_len].reverse();
    let coro = model.coro(task)?;
    let room = out.len() - chain_len - 1;
    let frames = coroutine_frames(
        model.coroutine(),
        coro,
        with,
        scratch,
        &mut out[chain_len..chain_len + room],
    );
    if frames == 0 {
        return None;
    }
    let n = chain_len + frames;
    out[n] = marker_key(Marker::Awaiting);
    Some(n + 1)
}

/// asyncio's C tasks before 3.14 (3.11–3.13) as the signal handler reads them: the
/// `_asyncio` module's `_current_tasks` (a dict: each running event loop → the task whose
/// step it runs) and its `Task` type, found once through the interpreter's modules
/// ([`ModuleAsyncio::find`]), each task's fields at [`TaskObjectLayout`]'s offsets. Who
/// awaits a task is read from the task itself, as 3.14's `awaited_by` says it: its first
/// callback (`fut_callback0`) is the awaiting task's `task_wakeup` (a builtin method whose
/// `m_self` is that task), `gather`'s `_done_callback` (whose closure's `outer` is the
/// gathering future, itself awaited so), or a `TaskGroup`'s `_on_task_done` (a bound
/// method whose TaskGroup's `_parent_task` is the task) — every object type-checked by
/// its type's name before its fields are read (`shared/design/cpython.md` §7).
#[derive(Clone, Copy, Debug)]
pub struct ModuleAsyncio {
    /// `_asyncio._current_tasks`.
    current_tasks: u64,
    /// `_asyncio.Task`.
    task_type: u64,
    /// The set of weakrefs to the tasks the loops have scheduled (`_scheduled_tasks.data`,
    /// 3.11 `_all_tasks.data`); 0 when not found.
    scheduled: u64,
    /// `_asyncio._eager_tasks` (3.12+: a set of the tasks started eagerly); 0 when none.
    eager: u64,
    fields: TaskObjectLayout,
    coroutine: CoroutineLayout,
}

/// [`ModuleAsyncio`]'s `current_tasks`, `task_type`, `scheduled` and `eager` once found
/// (written before [`MODULE_READY`]).
static MODULE_TASKS: [AtomicU64; 4] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];
/// [`MODULE_TASKS`] is written.
static MODULE_READY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// When the module was last looked for (`CLOCK_MONOTONIC` ns).
static MODULE_LOOKED: AtomicU64 = AtomicU64::new(0);
/// How often, at most, a sample looks for the module until found (only after imports).
const MODULE_LOOK_NS: u64 = 5_000_000;
/// `sys.modules`' number of items when the module was last looked for.
static MODULES_SEEN: AtomicU64 = AtomicU64::new(0);
/// `PyDictObject.ma_used`, after the object header (every version).
const DICT_USED: u64 = 16;
/// `PyFunctionObject.func_closure` (3.11–3.13, measured with ctypes).
const FUNC_CLOSURE: u64 = 72;
/// `PyCellObject.ob_ref`.
const CELL_REF: u64 = 16;
/// `PyCFunctionObject.m_self` and `PyMethodObject.im_self`.
const BOUND_SELF: u64 = 24;
/// `FutureObj.fut_callback0` (3.11–3.13).
const CALLBACK0: u64 = 24;
/// `FutureObj.fut_loop`.
const FUTURE_LOOP: u64 = 16;
/// Index of `outer` in the closure of `gather`'s `_done_callback` (its free variables
/// `children, nfinished, nfuts, outer, return_exceptions`).
const GATHER_OUTER: u64 = 3;

impl ModuleAsyncio {
    /// The module's tasks for a sample of the thread with state `tstate` (3.11–3.13):
    /// published, or looked for now through the interpreter's modules (`_asyncio` imported
    /// yet?, [`ModuleAsyncio::locate`]) when modules were imported since the last look, at
    /// most every [`MODULE_LOOK_NS`]. `None` for other versions, before `_asyncio` is
    /// imported, or when it is not as expected. Async-signal-safe.
    pub fn find(with: &Readers<'_>, tstate: u64) -> Option<ModuleAsyncio> {
        if MODULE_READY.load(Ordering::Acquire) {
            let [current_tasks, task_type, scheduled, eager] =
                std::array::from_fn(|i| MODULE_TASKS[i].load(Ordering::Relaxed));
            return ModuleAsyncio::with_objects(with, [current_tasks, task_type, scheduled, eager]);
        }
        // Looked for again only once modules were imported since (`sys.modules` grew:
        // one read per sample), and not more often than every MODULE_LOOK_NS.
        let objects = with.layout.objects.as_ref()?;
        let interp = read::word(tstate.checked_add(u64::from(objects.thread_interp))?)?;
        let modules = read::word(interp.checked_add(u64::from(objects.interp_modules))?)?;
        let imported = read::word(modules + DICT_USED)?;
        let seen = MODULES_SEEN.load(Ordering::Relaxed);
        let now = crate::sources::timer::clock_ns(libc::CLOCK_MONOTONIC)?;
        let last = MODULE_LOOKED.load(Ordering::Relaxed);
        if imported == seen
            || now.saturating_sub(last) < MODULE_LOOK_NS
            || MODULE_LOOKED
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        MODULES_SEEN.store(imported, Ordering::Relaxed);
        let found = ModuleAsyncio::locate(with, interp)?;
        let words = [
            found.current_tasks,
            found.task_type,
            found.scheduled,
            found.eager,
        ];
        for (slot, word) in MODULE_TASKS.iter().zip(words) {
            slot.store(word, Ordering::Relaxed);
        }
        MODULE_READY.store(true, Ordering::Release);
        Some(found)
    }

    /// The `_asyncio` module of interpreter `interp` as it is now: its `Task` type (its
    /// size checked against [`TaskObjectLayout`]), `_current_tasks` (a dict), the set of
    /// weakrefs of `_scheduled_tasks` (3.11: `_all_tasks`) and `_eager_tasks` (3.12+).
    /// `None` for other versions, before `_asyncio` is imported, or when it is not as
    /// expected. Every read checked, nothing allocated: async-signal-safe.
    pub fn locate(with: &Readers<'_>, interp: u64) -> Option<ModuleAsyncio> {
        let objects = with.layout.objects.as_ref()?;
        let reader = Reader::new(objects, with.layout, with.types)?;
        let globals = asyncio_globals(&reader, objects, interp)?;
        let task_type = reader.item(globals, Key::Text("Task"))?;
        let current_tasks = reader.item(globals, Key::Text("_current_tasks"))?;
        let scheduled = ["_scheduled_tasks", "_all_tasks"]
            .iter()
            .find_map(|name| {
                let set = reader.item(globals, Key::Text(name))?;
                reader.attribute(set, "data")
            })
            .filter(|&data| reader.is(data, Builtin::Set))
            .unwrap_or(0);
        let eager = reader
            .item(globals, Key::Text("_eager_tasks"))
            .filter(|&set| reader.is(set, Builtin::Set))
            .unwrap_or(0);
        let found =
            ModuleAsyncio::with_objects(with, [current_tasks, task_type, scheduled, eager])?;
        (read::word(task_type + TP_BASICSIZE)? == u64::from(found.fields.size)
            && reader.is(current_tasks, Builtin::Dict))
        .then_some(found)
    }

    /// The model of this version's tasks with the module's objects `[current_tasks,
    /// task_type, scheduled, eager]`; `None` for versions other than 3.11–3.13.
    fn with_objects(with: &Readers<'_>, objects: [u64; 4]) -> Option<ModuleAsyncio> {
        let (major, minor) = with.layout.version;
        let [current_tasks, task_type, scheduled, eager] = objects;
        Some(ModuleAsyncio {
            current_tasks,
            task_type,
            scheduled,
            eager,
            fields: TaskObjectLayout::before_314(major, minor)?,
            coroutine: with.layout.coroutine?,
        })
    }

    /// Every pending task of the interpreter (not finished; a finished task stays in the
    /// scheduled `WeakSet` until collected): the running ones, the scheduled ones and the
    /// eager ones (3.12+), sorted by address, at most [`MAX_TASKS_LISTED`] of each set.
    /// Allocates: for `pyigprof dump`, not the signal handler.
    fn pending_tasks(&self, with: &Readers<'_>) -> Vec<u64> {
        let Some(reader) = with.objects() else {
            return Vec::new();
        };
        let mut tasks = Vec::new();
        let mut take = |task: u64| {
            if self.is_task(task, with) {
                tasks.push(task);
            }
            tasks.len() < 3 * MAX_TASKS_LISTED
        };
        reader.for_each_dict_value(self.current_tasks, &mut take);
        if self.scheduled != 0 {
            // A weakref's referent follows its header (`PyWeakReference.wr_object`).
            reader.for_each_set_item(self.scheduled, |weakref| {
                read::word(weakref + 16).is_none_or(&mut take)
            });
        }
        if self.eager != 0 {
            reader.for_each_set_item(self.eager, &mut take);
        }
        tasks.sort_unstable();
        tasks.dedup();
        tasks.retain(|&task| read::uint(task + u64::from(self.fields.state)) == Some(0));
        tasks
    }

    /// The tasks whose steps the event loops run now (every thread's), with their
    /// coroutines' frames, into `out` (at most its length); how many. Async-signal-safe.
    fn running_tasks(&self, with: &Readers<'_>, out: &mut [(u64, u64)]) -> usize {
        let Some(reader) = with.objects() else {
            return 0;
        };
        let mut n = 0;
        reader.for_each_dict_value(self.current_tasks, |task| {
            if n == out.len() {
                return false;
            }
            if self.is_task(task, with) {
                if let Some(coro) = self.coro(task).filter(|&c| c != 0) {
                    out[n] = (task, coro + u64::from(self.coroutine.frame));
                    n += 1;
                }
            }
            true
        });
        n
    }

    /// Writes into `out` the suspended tasks (coroutine suspended or not started) of the
    /// event loop that thread `thread` (its `pthread_t`) runs — a loop whose `_thread_id`
    /// is it; a loop without one (uvloop's) counts as the main thread's (`main`) — from the
    /// scheduled tasks' set (at most [`MAX_TASKS_LISTED`] looked at, `out.len()`
    /// written); how many. The program runs meanwhile: every read is checked, every object
    /// type-checked. Async-signal-safe (the wall-clock source's).
    fn loop_suspended(
        &self,
        with: &Readers<'_>,
        thread: u64,
        main: bool,
        out: &mut [u64],
    ) -> usize {
        let Some(reader) = with.objects() else {
            return 0;
        };
        if self.scheduled == 0 {
            return 0;
        }
        let mut n = 0;
        let mut looked = 0;
        // The loop last seen and whether it is this thread's.
        let mut known: (u64, bool) = (0, false);
        reader.for_each_set_item(self.scheduled, |weakref| {
            looked += 1;
            if n == out.len() || looked > MAX_TASKS_LISTED {
                return false;
            }
            // A weakref's referent follows its header (`PyWeakReference.wr_object`).
            let Some(task) = read::word(weakref + 16) else {
                return true;
            };
            if !self.is_task(task, with)
                || read::uint(task + u64::from(self.fields.state)) != Some(0)
                || self
                    .coro(task)
                    .and_then(|coro| coroutine_state(&self.coroutine, coro))
                    .is_none()
            {
                return true;
            }
            let Some(event_loop) = read::word(task + FUTURE_LOOP) else {
                return true;
            };
            if event_loop != known.0 {
                let ours = match reader.attribute(event_loop, "_thread_id") {
                    Some(ident) => reader.int(ident) == Some(thread),
                    None => main,
                };
                known = (event_loop, ours);
            }
            if known.1 {
                out[n] = task;
                n += 1;
            }
            true
        });
        n
    }
}

/// Whether the type of the object at `obj` is named `name` (its `tp_name`, NUL included).
fn type_named(objects: &ObjectLayout, obj: u64, name: &[u8]) -> bool {
    let mut buf = [0u8; 32];
    let Some(buf) = buf.get_mut(..name.len()) else {
        return false;
    };
    read::type_of(obj)
        .and_then(|ty| read::word(ty + u64::from(objects.type_name)))
        .and_then(|at| read::bytes(at, name.len(), buf))
        .is_some_and(|()| *buf == *name)
}

impl TaskModel for ModuleAsyncio {
    fn running(&self, _: u64, with: &Readers<'_>, out: &mut [(u64, u64)]) -> usize {
        self.running_tasks(with, out)
    }
    fn suspended_tasks(
        &self,
        _: u64,
        thread: u64,
        main: bool,
        with: &Readers<'_>,
        out: &mut [u64],
    ) -> usize {
        self.loop_suspended(with, thread, main, out)
    }
    fn coroutine(&self) -> &CoroutineLayout {
        &self.coroutine
    }
    fn is_task(&self, at: u64, with: &Readers<'_>) -> bool {
        let Some(ty) = read::type_of(at) else {
            return false;
        };
        ty == self.task_type
            || with
                .objects()
                .is_some_and(|reader| reader.is_subclass(ty, self.task_type))
    }
    fn coro(&self, task: u64) -> Option<u64> {
        read::word(task + u64::from(self.fields.coro))
    }
    fn name(&self, task: u64, with: &Readers<'_>, scratch: &mut [u8]) -> Option<u32> {
        let given = read::word(task + u64::from(self.fields.name))?;
        task_name(given, self.coro(task)?, &self.coroutine, with, scratch)
    }
    fn awaiter(&self, future: u64, with: &Readers<'_>) -> Option<u64> {
        let objects = with.layout.objects.as_ref()?;
        let callback = read::word(future + CALLBACK0)?;
        if callback == 0 {
            return None;
        }
        if type_named(objects, callback, b"builtin_function_or_method\0") {
            // An awaiting task's `task_wakeup`.
            return read::word(callback + BOUND_SELF).filter(|&by| by != 0);
        }
        if type_named(objects, callback, b"function\0") {
            // `gather`'s `_done_callback`: its `outer`, the gathering future.
            let closure = read::word(callback + FUNC_CLOSURE)?;
            let cell = read::word(closure + u64::from(objects.tuple_items) + 8 * GATHER_OUTER)?;
            let outer = read::word(cell + CELL_REF)?;
            return type_named(objects, outer, b"_GatheringFuture\0").then_some(outer);
        }
        if type_named(objects, callback, b"method\0") {
            // A TaskGroup's `_on_task_done`: its parent task.
            let group = read::word(callback + BOUND_SELF)?;
            if !type_named(objects, group, b"TaskGroup\0") {
                return None;
            }
            let reader = with.objects()?;
            return reader.attribute(group, "_parent_task");
        }
        None
    }
}

/// The index in `with.names` of a task's name: `given` (its `task_name`) when it is a str
/// the program gave, else the qualified name of its coroutine `coro` (asyncio's own
/// `Task-<n>`, an int until asked for, is no name a user gave). Async-signal-safe.
fn task_name(
    given: u64,
    coro: u64,
    coroutine: &CoroutineLayout,
    with: &Readers<'_>,
    scratch: &mut [u8],
) -> Option<u32> {
    let (layout, types) = (with.layout, with.types);
    let len = match read_text(given, layout, types, scratch) {
        Some(len) if !is_numbered(&scratch[..len]) => len,
        _ => {
            let qualname = read::word(coro + u64::from(coroutine.qualname))?;
            read_text(qualname, layout, types, scratch)?
        }
    };
    with.names.intern(&scratch[..len])
}

/// asyncio's tasks before 3.14 (3.11–3.13) in interpreter `interp`, for `pyigprof dump`
/// (not for the signal handler: it allocates). Those C tasks publish no offsets and are
/// in no per-thread list: they are found where asyncio keeps them ([`ModuleAsyncio`]: the
/// `_asyncio` module's running, scheduled and eager tasks), and read as the handler reads
/// them: awaiters from each task's first callback, so that a `gather`'s children, a
/// `TaskGroup`'s and a task awaited directly all name the task that awaits them. Which
/// thread's loop runs a task is not known here (0). Empty when the module is not imported
/// or anything is not as expected.
pub fn interpreter_tasks(interp: u64, with: &Readers<'_>) -> Vec<TaskNow> {
    let Some(module) = ModuleAsyncio::locate(with, interp) else {
        return Vec::new();
    };
    let mut running = vec![(0, 0); MAX_CHAIN * 16];
    let n = module.running_tasks(with, &mut running);
    let running: Vec<u64> = running[..n].iter().map(|&(task, _)| task).collect();
    let mut scratch = vec![0u8; super::code::MAX_TEXT];
    module
        .pending_tasks(with)
        .into_iter()
        .filter_map(|task| task_now(&module, task, running.contains(&task), with, &mut scratch))
        .collect()
}

/// The globals of the `_asyncio` module of interpreter `interp`, once it is imported
/// (`sys.modules["_asyncio"].__dict__`). Async-signal-safe.
fn asyncio_globals(reader: &Reader<'_>, objects: &ObjectLayout, interp: u64) -> Option<u64> {
    let modules = read::word(interp.checked_add(u64::from(objects.interp_modules))?)?;
    let module = reader.item(modules, Key::Text("_asyncio"))?;
    if !reader.is(module, Builtin::Module) {
        return None;
    }
    read::word(module + MODULE_DICT)
}

/// Writes into `out`, outermost first, the frames of the suspended coroutine at `coro`
/// (at the line where it awaits, or its first line when not started) and of each
/// coroutine it awaits in turn, down to the one that awaits something else (a future);
/// nothing when `coro` is not suspended. At most [`MAX_COROUTINES`] and `out.len()`.
/// Returns the number written. Async-signal-safe.
fn coroutine_frames(
    coroutine: &CoroutineLayout,
    coro: u64,
    with: &Readers<'_>,
    scratch: &mut [u8],
    out: &mut [u64],
) -> usize {
    let (layout, types) = (with.layout, with.types);
    let mut n = 0;
    let mut coro = coro;
    let Some(kind) = read::type_of(coro) else {
        return 0;
    };
    for _ in 0..MAX_COROUTINES {
        let Some(state) = coroutine_state(coroutine, coro) else {
            break;
        };
        if n == out.len() {
            break;
        }
        let frame = coro + u64::from(coroutine.frame);
        let Some(code) = read::word(frame + u64::from(layout.frame_code)) else {
            break;
        };
        let code = code & layout.frame_code_mask;
        let Ok(record) = with.codes.record_for(code, layout, types, scratch) else {
            break;
        };
        out[n] = python_key(record, position(frame, code, layout));
        n += 1;
        if state != coroutine.suspended_yield_from {
            break;
        }
        // What it awaits: a coroutine of the same type goes on the stack; anything
        // else (a future, an iterator) ends it.
        let awaited = awaited(coroutine, frame).unwrap_or(0);
        if awaited == 0 || !read::has_type(awaited, kind) {
            break;
        }
        coro = awaited;
    }
    n
}

/// The state of the coroutine at `coro` when it is suspended or not started (its frame
/// can be read), `None` otherwise (running, finished, or not readable).
fn coroutine_state(coroutine: &CoroutineLayout, coro: u64) -> Option<i8> {
    let state = read::byte(coro + u64::from(coroutine.state))? as i8;
    let c = coroutine;
    [c.created, c.suspended, c.suspended_yield_from]
        .contains(&state)
        .then_some(state)
}

/// What the coroutine whose frame is at `frame` awaits (`coroutine`'s layout): the word at
/// the top of its value stack, flags masked (0 when none). `None` when it cannot be read.
/// Async-signal-safe.
fn awaited(coroutine: &CoroutineLayout, frame: u64) -> Option<u64> {
    let word = match coroutine.awaited {
        Awaited::BelowStackPointer {
            stackpointer,
            words,
        } => read::word(frame + u64::from(stackpointer))?
            .checked_sub(8 * u64::from(words))
            .and_then(read::word)?,
        Awaited::StackTop {
            stacktop,
            localsplus,
        } => {
            let top = u64::from(read::uint(frame + u64::from(stacktop))?);
            if top == 0 || top > 1 << 16 {
                return None;
            }
            read::word(frame + u64::from(localsplus) + 8 * (top - 1))?
        }
    };
    Some(word & !3)
}

/// Inserts `chain` (task frame keys, innermost first) into a thread's Python frame keys
/// `keys[..frames]` (innermost first, grouped by `ends`, see `stack::PyStack`) directly
/// outside the frame at index `after` (the running task's coroutine), in that frame's
/// group. Outer keys that no longer fit in `keys` are dropped (the walk's own cap).
/// Returns the new number of keys. Async-signal-safe.
pub fn insert(
    keys: &mut [u64],
    frames: usize,
    ends: &mut [u16],
    after: usize,
    chain: &[u64],
) -> usize {
    let frames = frames.min(keys.len());
    if after >= frames {
        return frames;
    }
    let at = after + 1;
    let k = chain.len().min(keys.len() - at);
    let total = (frames + k).min(keys.len());
    keys.copy_within(at..total - k, at + k);
    keys[at..at + k].copy_from_slice(&chain[..k]);
    for end in ends.iter_mut() {
        if usize::from(*end) > after {
            *end = (usize::from(*end) + k).min(total) as u16;
        }
    }
    total
}

/// Slots of the task-name table (a power of two; 16 bytes each).
const NAME_SLOTS: usize = 1 << 14;
/// Slots probed for a name before giving up.
const NAME_PROBES: usize = 32;
/// Bytes reserved for task names' text.
const NAME_TEXT: usize = 4 << 20;
/// `NameSlot::text`'s flag: the text is written.
const READY: u64 = 1 << 63;

/// One slot of the task-name table. All-zero is empty.
#[repr(C, align(16))]
struct NameSlot {
    /// The name's hash, never 0 (0 = empty).
    hash: AtomicU64,
    /// `READY | len << 32 | offset` of its text once written; 0 while being written.
    text: AtomicU64,
}

/// Task names, each stored once, by content: a task's frame key holds its name's index
/// here (the slot), so the same name from any task, thread or loop step is the same frame,
/// and the names outlive the tasks. Filled from signal handlers, lock-free; read when the
/// profile is written.
pub struct Names {
    slots: ZeroedArray<NameSlot>,
    text: Bytes,
}

impl Names {
    /// Maps the table ([`NAME_SLOTS`] names, [`NAME_TEXT`] bytes of text).
    pub fn new() -> Option<Names> {
        Some(Names {
            slots: ZeroedArray::new(NAME_SLOTS)?,
            text: Bytes::new(NAME_TEXT)?,
        })
    }

    /// The index of `name`, stored if new; `None` when the table or its text is full, or
    /// another thread is storing a name in the slot this one needs. Async-signal-safe.
    pub fn intern(&self, name: &[u8]) -> Option<u32> {
        let hash = fnv1a(name) | 1;
        for probe in 0..NAME_PROBES {
            let index = (hash as usize).wrapping_add(probe) & (NAME_SLOTS - 1);
            let slot = &self.slots[index];
            let mut seen = slot.hash.load(Ordering::Acquire);
            if seen == 0 {
                match slot
                    .hash
                    .compare_exchange(0, hash, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => {
                        let offset = self.text.alloc(name.len())?;
                        self.text
                            .slice_mut(offset, name.len())
                            .copy_from_slice(name);
                        slot.text.store(
                            READY | (name.len() as u64) << 32 | u64::from(offset),
                            Ordering::Release,
                        );
                        return Some(index as u32);
                    }
                    Err(now) => seen = now,
                }
            }
            if seen == hash {
                match self.text_of(slot) {
                    Some(text) if text == name => return Some(index as u32),
                    Some(_) => {}
                    None => return None,
                }
            }
        }
        None
    }

    /// The name at `index` (from [`Names::intern`]); `None` for an index never stored.
    pub fn get(&self, index: u32) -> Option<&[u8]> {
        self.text_of(self.slots.get(index as usize)?)
    }

    fn text_of(&self, slot: &NameSlot) -> Option<&[u8]> {
        let text = slot.text.load(Ordering::Acquire);
        (text & READY != 0).then(|| {
            self.text.slice(
                (text & 0xffff_ffff) as u32,
                ((text >> 32) & 0x7fff_ffff) as usize,
            )
        })
    }
}

/// Whether `name` is one asyncio gives a task the program did not name, `Task-<n>` (kept
/// as the int `n` until something asks for the name, `Task.get_name()`, `repr`, then as
/// that str).
fn is_numbered(name: &[u8]) -> bool {
    name.strip_prefix(b"Task-")
        .is_some_and(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit))
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stored_once_and_read_back() {
        let names = Names::new().unwrap();
        let a = names.intern(b"fetch_user").unwrap();
        let b = names.intern(b"handler").unwrap();
        assert_ne!(a, b);
        assert_eq!(names.intern(b"fetch_user"), Some(a));
        assert_eq!(names.get(a), Some(&b"fetch_user"[..]));
        assert_eq!(names.get(b), Some(&b"handler"[..]));
        let empty = names.intern(b"").unwrap();
        assert_eq!(names.intern(b""), Some(empty));
        // Never stored, or out of range.
        let unused = (0..NAME_SLOTS as u32)
            .find(|i| ![a, b, empty].contains(i))
            .unwrap();
        assert_eq!(names.get(unused), None);
        assert_eq!(names.get(u32::MAX), None);
    }

    #[test]
    fn only_asyncio_s_own_numbering_is_not_a_name() {
        assert!(is_numbered(b"Task-1"));
        assert!(is_numbered(b"Task-123456"));
        for given in [
            &b"Task-"[..],
            b"Task-1a",
            b"task-1",
            b"fetch_user-1",
            b"Task-1 ",
        ] {
            assert!(!is_numbered(given), "{given:?}");
        }
    }

    #[test]
    fn a_chain_goes_directly_outside_the_coroutine_frame_in_its_group() {
        // Keys innermost first: query, fetch_user (the task's coroutine, index 1) | the
        // loop's group: Handle._run, _run_once.
        let mut keys = [11, 12, 21, 22, 0, 0, 0];
        let mut ends = [2u16, 4];
        let n = insert(&mut keys, 4, &mut ends, 1, &[900, 901]);
        assert_eq!(&keys[..n], &[11, 12, 900, 901, 21, 22]);
        assert_eq!(ends, [4, 6]);
        // Not enough room: the outermost keys are dropped, the ends stay inside.
        let mut keys = [11, 12, 21, 22];
        let mut ends = [2u16, 4];
        let n = insert(&mut keys, 4, &mut ends, 1, &[900, 901]);
        assert_eq!(&keys[..n], &[11, 12, 900, 901]);
        assert_eq!(ends, [4, 4]);
        // An anchor past the frames changes nothing.
        let mut keys = [11, 12, 0];
        let mut ends = [2u16];
        assert_eq!(insert(&mut keys, 2, &mut ends, 5, &[900]), 2);
        assert_eq!(ends, [2]);
    }
}
