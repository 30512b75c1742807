//! IgProf's `igprof-analyse` command lines, run on an IgProf memory profile written to
//! IgProf's grammar (tests/data/igprof-mem.txt: `MEM_TOTAL`, `MEM_LIVE` and `MEM_MAX`, as
//! `igprof -mp` writes them) and on the recursive CPU profile of the other tests. The
//! figures are the ones IgProf's own analyser prints for the same files (its default
//! filters, `MEM_MAX` as a maximum, the first counter by default, `--top N` stacks);
//! names differ in being demangled here, and `malloc`'s callee's 7 bytes, which IgProf's
//! filter drops, are its caller's here (docs/analyser.md: nothing is dropped).
//!
//! The memory profile: `main` calls `make()` (`operator new` → `malloc`, 8 + 1000 bytes,
//! and a callee of `malloc` of 7 bytes), `fill()` (`malloc` 5000 bytes in 10 calls, and
//! `helper()` 100), and libstdc++'s pool allocator (5, and `malloc` 4 below it); a thread
//! runs `worker(void*)` (`calloc` 200) through IgProf's wrapper, which holds 300 bytes of
//! the profiler's own buffers.

mod common;

use common::{assert_fails, data, run, run_resolving, stderr, stdout};

const MEMORY: &str = "igprof-mem.txt";

/// The functions of the `--json` document (by cumulative amount unless `args` give an
/// order): (name, self amount, cumulative amount), exact bytes.
fn rows(args: &[&str]) -> Vec<(String, i64, i64)> {
    let mut all = vec!["--json"];
    if !args.contains(&"-o") {
        all.extend(["--order", "cumulative"]);
    }
    all.extend_from_slice(args);
    let output = run(&all, &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let document: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(document["unit"], "bytes");
    document["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|function| {
            (
                function["name"].as_str().unwrap().to_string(),
                function["self"]["amount"].as_i64().unwrap(),
                function["cumulative"]["amount"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn amount(rows: &[(String, i64, i64)], name: &str) -> Option<(i64, i64)> {
    rows.iter()
        .find(|(n, ..)| n == name)
        .map(|&(_, own, cumulative)| (own, cumulative))
}

#[test]
fn the_first_counter_is_reported_by_default_with_igprofs_filters() {
    let output = run(&[MEMORY], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("\nMEM_TOTAL: 21 allocations, 6.2 KiB allocated (6,324 bytes)\n"),
        "{}",
        stdout(&output)
    );
    let filtered = rows(&[MEMORY]);
    // operator new, malloc and malloc's own callee charge their caller (IgProf drops the
    // callee's 7 bytes); IgProf's buffers are gone; the thread's memory is its worker's.
    assert_eq!(amount(&filtered, "make()"), Some((1015, 1015)));
    assert_eq!(amount(&filtered, "fill()"), Some((5000, 5100)));
    assert_eq!(amount(&filtered, "worker(void*)"), Some((200, 200)));
    for gone in [
        "malloc",
        "operator new(unsigned long)",
        "sysmalloc",
        "calloc",
    ] {
        assert_eq!(amount(&filtered, gone), None, "{gone}");
    }
    // -nf: every frame as the profile has it.
    let unfiltered = rows(&["-nf", MEMORY]);
    assert_eq!(amount(&unfiltered, "malloc"), Some((6004, 6011)));
    assert_eq!(amount(&unfiltered, "main"), Some((0, 6124)));
    assert_eq!(
        amount(&unfiltered, "(anonymous namespace)::threadWrapper(void*)"),
        Some((300, 500))
    );
    // MEM_LIVE also leaves out the pool allocator.
    let live = rows(&["-r", "MEM_LIVE", MEMORY]);
    assert_eq!(amount(&live, "main"), Some((0, 6115)));
    assert_eq!(
        amount(
            &live,
            "std::__default_alloc_template<true, 0>::allocate(unsigned int)"
        ),
        None
    );
}

#[test]
fn mem_max_is_the_largest_single_amount_not_a_sum() {
    let max = rows(&["-r", "MEM_MAX", MEMORY]);
    assert_eq!(amount(&max, "main"), Some((0, 1000)));
    assert_eq!(amount(&max, "__libc_start_main"), Some((0, 1000)));
    assert_eq!(amount(&max, "make()"), Some((600, 600)));
    assert_eq!(amount(&max, "fill()"), Some((1000, 1000)));
    assert_eq!(
        amount(
            &max,
            "std::__default_alloc_template<true, 0>::allocate(unsigned int)"
        ),
        Some((5, 5))
    );
    let output = run(&["-r", "MEM_MAX", MEMORY], &data());
    assert!(stdout(&output).contains("\nMEM_MAX: 21 allocations, 1000 B largest allocation\n"));
}

#[test]
fn top_n_with_a_space_lists_the_heaviest_stacks_as_igprof_does() {
    let expected = "## Entry 1 (5'000 bytes)\n#0 fill()\n#1 main\n#2 __libc_start_main\n#3 <spontaneous>\n\n\
                    ## Entry 2 (1'015 bytes)\n#0 make()\n#1 main\n#2 __libc_start_main\n#3 <spontaneous>\n\n";
    for spelling in [&["--top", "2"][..], &["-tn", "2"], &["--top-stacks", "2"]] {
        let mut args = spelling.to_vec();
        args.push(MEMORY);
        let output = run(&args, &data());
        assert_eq!(
            stdout(&output),
            expected,
            "{spelling:?}: {}",
            stderr(&output)
        );
    }
    // --top with no number, or --top=N, is pyigprof's table of functions.
    let table = run(&["--top", MEMORY], &data());
    assert!(stdout(&table).contains("function  (file)"));
    // On a CPU profile the value is in seconds.
    let dir = common::TempDir::new("top_n_cpu");
    dir.write("rec.txt", include_bytes!("data/recursive-hex.txt"));
    let output = run(&["--top", "1", "rec.txt"], &dir.0);
    assert!(
        stdout(&output).starts_with("## Entry 1 (0.03 seconds)\n#0 "),
        "{}",
        stdout(&output)
    );
}

#[test]
fn igprofs_merge_ancestors_and_back_references() {
    let merged = rows(&["-ma", "main>fill/FILL", MEMORY]);
    assert_eq!(amount(&merged, "FILL"), Some((5000, 5100)));
    assert_eq!(amount(&merged, "FILL:helper()"), Some((100, 100)));
    assert_eq!(amount(&merged, "fill()"), None);
    let long = rows(&["--merge-ancestors", "main>fill/FILL", MEMORY]);
    assert_eq!(merged, long);
    // \1 in -mr is IgProf's back-reference.
    let renamed = rows(&["-mr", r"s/^(make|fill)\(\)$/\1-phase/", MEMORY]);
    assert_eq!(amount(&renamed, "make-phase"), Some((1015, 1015)));
    assert_eq!(amount(&renamed, "fill-phase"), Some((5000, 5100)));
}

#[test]
fn igprofs_short_spellings_are_its_options() {
    let same = |short: &[&str], long: &[&str]| {
        let a = run(&[short, &[MEMORY]].concat(), &data());
        let b = run(&[long, &[MEMORY]].concat(), &data());
        assert_eq!(a.status.code(), Some(0), "{short:?}: {}", stderr(&a));
        assert_eq!(stdout(&a), stdout(&b), "{short:?} against {long:?}");
    };
    same(&["-t"], &["--text"]);
    same(&["-T"], &["--tree"]);
    same(&["-js"], &["--json"]);
    // Demangling and the files of functions are always shown here: -d and -l change
    // nothing.
    same(&["-t", "-d", "-l"], &["--text"]);
    same(&["-o", "ascending"], &["--order", "cumulative"]);
    // -g (names from the binaries) is the default; accepted without --no-resolve.
    let output = run_resolving(&["-g", "--top=3", MEMORY], &data());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // IgProf's --order descending: the smallest cumulative cost first.
    let ascending = rows(&["-o", "descending", MEMORY]);
    let cumulative: Vec<i64> = ascending.iter().map(|row| row.2).collect();
    assert!(cumulative.windows(2).all(|w| w[0] <= w[1]), "{ascending:?}");
}

#[test]
fn verbose_says_what_was_read_and_reported() {
    let output = run(&["-v", MEMORY], &data());
    assert_eq!(output.status.code(), Some(0));
    let text = stderr(&output);
    assert!(
        text.contains(
            "read igprof-mem.txt: 15 call-tree nodes, 13 functions, 5 files, counters: \
             MEM_TOTAL, MEM_LIVE, MEM_MAX; reporting MEM_TOTAL (the first counter)"
        ),
        "{text}"
    );
    assert!(
        text.contains("IgProf's default filters for MEM_TOTAL"),
        "{text}"
    );
}

#[test]
fn igprof_options_without_a_meaning_here_say_so_and_exit_2() {
    assert_fails(
        &run(&["-r", "MEM_TOTAL,MEM_LIVE", MEMORY], &data()),
        "pyigprof-analyse: --report: one counter per report, found \"MEM_TOTAL,MEM_LIVE\" \
         (IgProf's igprof-analyse also reports one: it takes \"MEM_TOTAL,MEM_LIVE\" as one \
         name); run once per counter\n",
    );
    for option in [
        "--show-pages",
        "--show-page-ranges",
        "--show-locality-metrics",
        "--dump-allocations",
    ] {
        let output = run(&[option, MEMORY], &data());
        assert_eq!(output.status.code(), Some(2), "{option}");
        assert_eq!(stdout(&output), "");
        let text = stderr(&output);
        assert!(
            text.starts_with(&format!(
                "pyigprof-analyse: {option}: IgProf's reports on the memory pages"
            )) && text.lines().count() == 1,
            "{text}"
        );
    }
}
