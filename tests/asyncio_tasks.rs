//! asyncio task stacks (CPython 3.11+, preload/src/capture/python/tasks.rs: 3.14+ from
//! asyncio's published offsets, 3.11–3.13 from the `_asyncio` module's dict and sets and
//! each task's callbacks): a sample of
//! a thread running a task's step has the task's await chain outside the task's coroutine,
//! one `<task NAME>` frame per task (the task nobody awaits outermost); in wall mode each
//! suspended task gets samples of its own, its await chain, its coroutines at their await
//! lines and `<awaiting>`. On a program with named tasks (a `TaskGroup`, `gather`, a task
//! awaiting another) that measures each task's own CPU time and the time it spends
//! suspended, each task's share of the CPU profile and of the wall profile's suspended
//! time is the share the program measured, within 3 points.

use pyigprof_suite::*;

/// A `TaskGroup` in `main` (unnamed: `<task main>`) runs `handler-1` and `handler-2`; each
/// gathers `fetch_user-N` and `fetch_orders-N` (which burn CPU in `query` between sleeps),
/// then awaits the task `audit-N`, then burns. Every task adds up the CPU time of its own
/// steps (`time.thread_time()` from where it starts or resumes to where it awaits or
/// ends) and the time it spends suspended (from its creation to its first step, and
/// around each await), by the name its profile frame has (the coroutine's qualified name
/// for a task without one). `argv[1]` scales the times. Prints `{"cpu:NAME": s, …,
/// "awaited:NAME": s, …}`.
const PROGRAM: &str = r#"
import asyncio, json, sys, time
scale = float(sys.argv[1])
cpu, awaited, resumed = {}, {}, {}

def key():
    task = asyncio.current_task()
    name = task.get_name()
    return task.get_coro().__qualname__ if name.startswith("Task-") else name

def add(table, seconds):
    k = key()
    table[k] = table.get(k, 0.0) + seconds

def burn(seconds):
    end = time.thread_time() + seconds * scale
    x = 0
    while time.thread_time() < end:
        x += 1

def started(created):
    add(awaited, time.perf_counter() - created)
    resumed[key()] = time.thread_time()

def suspending():
    add(cpu, time.thread_time() - resumed[key()])

async def waited(awaitable):
    suspending()
    t = time.perf_counter()
    result = await awaitable
    add(awaited, time.perf_counter() - t)
    resumed[key()] = time.thread_time()
    return result

async def query(seconds):
    burn(seconds)
    await waited(asyncio.sleep(0.01 * scale))

async def fetch_user(created):
    started(created)
    for _ in range(10):
        await query(0.006)
    suspending()

async def fetch_orders(created):
    started(created)
    for _ in range(10):
        await query(0.015)
    suspending()

async def audit(created):
    started(created)
    burn(0.02)
    await waited(asyncio.sleep(0.05 * scale))
    suspending()

async def handler(n, created):
    started(created)
    now = time.perf_counter
    await waited(asyncio.gather(
        asyncio.create_task(fetch_user(now()), name=f"fetch_user-{n}"),
        asyncio.create_task(fetch_orders(now()), name=f"fetch_orders-{n}"),
    ))
    await waited(asyncio.create_task(audit(now()), name=f"audit-{n}"))
    burn(0.05 * n)
    suspending()

async def main():
    started(time.perf_counter())
    suspending()
    t = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for n in (1, 2):
            tg.create_task(handler(n, time.perf_counter()), name=f"handler-{n}")
    add(awaited, time.perf_counter() - t)
    resumed[key()] = time.thread_time()
    burn(0.03)
    suspending()

asyncio.run(main())
out = {"cpu:" + k: v for k, v in cpu.items()}
out.update({"awaited:" + k: v for k, v in awaited.items()})
print(json.dumps(out))
"#;

/// The tasks of [`PROGRAM`] and the await chain each sample of theirs has, outermost first.
fn tasks() -> Vec<(String, Vec<String>)> {
    let mut out = vec![("main".to_string(), vec!["main".to_string()])];
    for n in [1, 2] {
        let handler = format!("handler-{n}");
        out.push((handler.clone(), vec!["main".into(), handler.clone()]));
        for child in ["fetch_user", "fetch_orders", "audit"] {
            let name = format!("{child}-{n}");
            out.push((name.clone(), vec!["main".into(), handler.clone(), name]));
        }
    }
    out
}

/// The `<task …>` frames of `stack`, outermost first, without the brackets.
fn chain(stack: &Stack) -> Vec<String> {
    stack
        .frames
        .iter()
        .filter_map(|(name, _)| name.strip_prefix("<task ")?.strip_suffix('>'))
        .map(str::to_string)
        .collect()
}

fn asyncio_interpreters() -> Vec<Interpreter> {
    interpreters_for("asyncio_tasks", "interpreters from 3.11", |i| {
        i.version >= (3, 11)
    })
}

#[test]
fn cpu_time_is_split_by_task_under_each_task_s_await_chain() {
    for python in asyncio_interpreters() {
        check_cpu_shares(&python, PROGRAM, &python.name);
    }
}

/// The same program on uvloop (from PyPI, in a venv of one interpreter of 3.11–3.13), whose
/// loop runs asyncio's C tasks: the same chains and shares.
#[test]
fn tasks_on_uvloop_have_their_await_chains_too() {
    let base = &interpreters_for("asyncio_uvloop", "interpreters 3.11-3.13", |i| {
        (3, 11) <= i.version && i.version < (3, 14)
    })[0];
    let (python, version) = uvloop_venv(base);
    let on_uvloop = on_uvloop(PROGRAM);
    check_cpu_shares(
        &python,
        &on_uvloop,
        &format!("{} on uvloop {version}", python.name),
    );
}

/// Runs `program` (a [`PROGRAM`]) at 4 kHz and checks each task's samples: under its whole
/// await chain, its CPU share within 3 points of the program's figure.
fn check_cpu_shares(python: &Interpreter, program: &str, label: &str) {
    let (run, profile) = profiled_ok(python, &["-c", program, "1"], &[("PYIGPROF_HZ", "4000")]);
    let out = run.stdout();
    let total = seconds(&profile);
    let all = stacks(&profile);
    let mut report = Vec::new();
    for (task, wanted_chain) in tasks() {
        // The samples whose innermost task is this one: each under its whole chain.
        let own: Vec<&Stack> = all
            .iter()
            .filter(|s| chain(s).last() == Some(&task))
            .collect();
        for s in &own {
            assert_eq!(
                chain(s),
                wanted_chain,
                "{}: a sample of {task} under another chain: {:?}",
                label,
                s.frames
            );
        }
        let seen = share(&profile, |s| chain(s).last() == Some(&task));
        let measured = 100.0 * json_number(&out, &format!("cpu:{task}")) / total;
        report.push(format!("{task} {seen:.1}/{measured:.1}"));
        assert!(
            (seen - measured).abs() <= 3.0,
            "{}: task {task} has {seen:.1} % of the CPU profile, {measured:.1} % measured \
             ({total:.3} s)\n{out}",
            label
        );
    }
    // The coroutine that burns is inside its task's frame, native frames below it.
    let burns = share(&profile, |s| {
        s.position("<task fetch_orders-1>")
            .zip(s.position("burn"))
            .is_some_and(|(task, burn)| task < burn && s.position("query") > Some(task))
    });
    assert!(
        burns > 5.0,
        "{}: {burns:.1} % in query → burn under fetch_orders-1",
        label
    );
    eprintln!(
        "asyncio_tasks cpu: {}: % seen/measured: {}",
        label,
        report.join(", ")
    );
}

#[test]
fn suspended_tasks_have_their_await_time_in_wall_mode() {
    for python in asyncio_interpreters() {
        let (run, profile) = profiled_ok(
            &python,
            &["-c", PROGRAM, "1"],
            &[("PYIGPROF_CLOCK", "wall"), ("PYIGPROF_HZ", "250")],
        );
        let out = run.stdout();
        let total = seconds(&profile);
        let all = stacks(&profile);
        let mut report = Vec::new();
        for (task, wanted_chain) in tasks() {
            let suspended = |s: &Stack| {
                chain(s).last() == Some(&task)
                    && s.frames
                        .last()
                        .is_some_and(|(name, _)| name == "<awaiting>")
            };
            for s in all.iter().filter(|s| suspended(s)) {
                // The whole chain, or the task alone: a task not yet awaited by the one that
                // created it (`create_task(...)`, then the `await` of it, microseconds
                // later: long enough for the sampler, which reads from outside, when the
                // loop's thread loses its CPU in between) has no awaiter yet.
                let alone = chain(s) == [task.clone()];
                assert!(
                    chain(s) == wanted_chain || alone,
                    "{}: a suspended sample of {task} under {:?}, not {wanted_chain:?}: {:?}",
                    python.name,
                    chain(s),
                    s.frames
                );
                // Rooted at the chain: a suspended task is no thread's stack.
                assert!(
                    s.frames[0].0.starts_with("<task "),
                    "{}: {:?}",
                    python.name,
                    s.frames
                );
            }
            if wanted_chain.len() > 1 {
                let alone = share(&profile, |s| suspended(s) && chain(s) == [task.clone()]);
                assert!(
                    alone <= 1.0,
                    "{}: {alone:.1} % of the wall profile has {task} suspended before \
                     anything awaited it",
                    python.name
                );
            }
            let seen = share(&profile, suspended);
            let measured = 100.0 * json_number(&out, &format!("awaited:{task}")) / total;
            report.push(format!("{task} {seen:.1}/{measured:.1}"));
            assert!(
                (seen - measured).abs() <= 3.0,
                "{}: task {task} suspended {seen:.1} % of the wall profile, {measured:.1} % \
                 measured ({total:.3} s)\n{out}",
                python.name
            );
        }
        // Each task waits at its own await: the fetches in asyncio's sleep under query.
        let in_sleep = share(&profile, |s| {
            s.has("<task fetch_user-2>")
                && s.position("query")
                    .zip(s.position("sleep"))
                    .is_some_and(|(query, sleep)| query < sleep)
                && s.has("<awaiting>")
        });
        assert!(
            in_sleep > 3.0,
            "{}: {in_sleep:.1} % of fetch_user-2 in sleep",
            python.name
        );
        eprintln!(
            "asyncio_tasks wall: {}: % suspended seen/measured: {}",
            python.name,
            report.join(", ")
        );
    }
}

/// Tasks created and finished fast: `root` gathers rounds of four `mid-J` tasks, each of
/// which gathers five `leaf-I` tasks that burn a fifth of a millisecond and yield once.
/// Runs `argv[1]` seconds; prints the tasks created, and the seconds.
const CHURN: &str = r#"
import asyncio, sys, time
seconds = float(sys.argv[1])
created = 0
def burn(s):
    end = time.thread_time() + s
    while time.thread_time() < end:
        pass
async def leaf():
    burn(0.0002)
    await asyncio.sleep(0)
async def mid(j):
    global created
    created += 5
    await asyncio.gather(*(asyncio.create_task(leaf(), name="leaf-%d" % i) for i in range(5)))
async def root():
    global created
    end = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < end:
        created += 4
        await asyncio.gather(*(asyncio.create_task(mid(j), name="mid-%d" % j) for j in range(4)))
    print(created, time.perf_counter() - started)
asyncio.run(root())
"#;

/// Thousands of tasks created and finished per second, sampled at 4 kHz: the program runs
/// to its end, and every sample's await chain is one the program built (`root`, `root →
/// mid-J`, `root → mid-J → leaf-I`, and `asyncio.run`'s shutdown tasks) — a task freed and its memory reused between two reads
/// is never misread into another chain; the checked reads that faulted are said. 5 s in
/// the fast tier, 30 s in the whole matrix.
#[test]
fn tasks_created_and_finished_fast_are_never_misread() {
    let seconds = if tier() == Tier::Full { "30" } else { "5" };
    for python in asyncio_interpreters() {
        let (run, profile) =
            profiled_ok(&python, &["-c", CHURN, seconds], &[("PYIGPROF_HZ", "4000")]);
        let out = run.stdout();
        let figures: Vec<f64> = out.split_whitespace().map(|f| f.parse().unwrap()).collect();
        let per_second = figures[0] / figures[1];
        let all = stacks(&profile);
        let (mut with_tasks, mut leaves) = (0usize, 0usize);
        for s in &all {
            let c = chain(s);
            if c.is_empty() {
                continue;
            }
            with_tasks += 1;
            // asyncio.run's own tasks after `root` ends: the program's too (a 4 kHz sample
            // landed in one on sid's 3.15, in the whole matrix).
            let shutdown = c.len() == 1
                && [
                    "BaseEventLoop.shutdown_asyncgens",
                    "BaseEventLoop.shutdown_default_executor",
                ]
                .contains(&c[0].as_str());
            let shape_ok = shutdown
                || c[0] == "root"
                    && c.get(1).is_none_or(|m| m.starts_with("mid-"))
                    && c.get(2).is_none_or(|l| l.starts_with("leaf-"))
                    && c.len() <= 3;
            assert!(
                shape_ok,
                "{}: a chain the program never built: {c:?}",
                python.name
            );
            leaves += usize::from(c.len() == 3);
        }
        let stats = &profile.sources[0].statistics;
        let stat = |key: &str| {
            stats
                .iter()
                .find(|(k, _)| k == key)
                .map_or("?".to_string(), |(_, v)| v.clone())
        };
        eprintln!(
            "asyncio_tasks churn: {}: {per_second:.0} tasks/s for {seconds} s; {with_tasks} of {} stacks under tasks ({leaves} under a leaf); faulted reads {}, Python stacks abandoned {}",
            python.name,
            all.len(),
            stat("stats.faulted_reads"),
            stat("stats.python_abandoned")
        );
        // The churn must be fast enough for freed tasks' memory to be reused between two
        // reads (about 5,000 a second alone on the machine; 1,900 on Debian's static 3.11
        // with the whole matrix's other tests beside it, December 5).
        assert!(
            per_second >= 1000.0,
            "{}: {per_second:.0} tasks/s",
            python.name
        );
        assert!(
            leaves > 0 && with_tasks > 0,
            "{}: no task chains",
            python.name
        );
    }
}
