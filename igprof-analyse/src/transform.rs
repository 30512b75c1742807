//! Options that reshape the call tree before any report is computed, after the view
//! ([`crate::view`]): IgProf's `--value peak`, `--min-count-value`/`--max-count-value`
//! (and the calls and average variants), `--merge-libraries` and `--merge-regexp`, plus
//! `--hide` (frames left out, their cost going to their caller) and `--merge-ancestors`
//! (stacks start at the outermost frame of a function).
//!
//! Each step makes a new [`Profile`] from the previous one; they run in this order
//! ([`Options::apply`]):
//!
//! 1. [`Value::Peak`] (before the view, [`Options::apply_value`]): every node's amount
//!    becomes the dump's third value (peak), so that the view and every report sum
//!    peaks instead of amounts;
//! 2. the count filters ([`CountFilter`]): a node whose own values of the reported
//!    counter are outside the limits loses them (the totals shrink), as IgProf's
//!    `HitFilter` does for each line of a dump;
//! 3. `--hide REGEXP` ([`hide`]);
//! 4. `--merge-ancestors REGEXP` ([`merge_ancestors`]);
//! 5. `--merge-libraries[=REGEXP]` ([`merge_libraries`]);
//! 6. `--merge-regexp RULES` ([`merge_regexp`]).
//!
//! Regular expressions (the `regex` crate's syntax) match a function when they match its
//! name as reports show it (demangled for native code, the qualified name for Python)
//! or, failing that, its file's path (IgProf's rule for `--merge-regexp`). Steps 3–6 never
//! change the totals; only step 2 removes samples.

use regex::Regex;

use crate::error::Error;
use crate::profile::{CounterId, FileId, FunctionId, Node, NodeId, Profile, Values};
use crate::symbol::Label;

/// Which of a dump's counter values reports use: IgProf's `--value normal|peak`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Value {
    /// The second value, the amount (ticks for `PERF_TICKS`, bytes for `MEM_TOTAL`).
    #[default]
    Normal,
    /// The third value, the peak (IgProf's `MEM_LIVE` peak bytes; the same as the ticks
    /// in pyigprof's dumps).
    Peak,
}

/// IgProf's hit filter: limits on the own (self) values of one call-tree node for the
/// reported counter, each `None` when not set. A node outside any limit loses its values
/// of that counter (its callees keep theirs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountFilter {
    /// `--min-count-value`: the smallest amount kept (ticks, bytes).
    pub min_amount: Option<i64>,
    /// `--max-count-value`: the largest amount kept.
    pub max_amount: Option<i64>,
    /// `--min-calls-value`: the smallest count kept (samples, calls).
    pub min_count: Option<i64>,
    /// `--max-calls-value`: the largest count kept.
    pub max_count: Option<i64>,
    /// `--min-average-value`: the smallest amount per count kept (integer division).
    pub min_average: Option<i64>,
    /// `--max-average-value`: the largest amount per count kept.
    pub max_average: Option<i64>,
}

impl CountFilter {
    /// Whether any limit is set.
    pub fn is_active(&self) -> bool {
        *self != CountFilter::default()
    }

    /// Whether a node with `values` keeps them.
    pub fn keeps(&self, values: Values) -> bool {
        let above = |limit: Option<i64>, value: i64| limit.is_none_or(|limit| value >= limit);
        let below = |limit: Option<i64>, value: i64| limit.is_none_or(|limit| value <= limit);
        let average = values.amount.checked_div(values.count);
        above(self.min_amount, values.amount)
            && below(self.max_amount, values.amount)
            && above(self.min_count, values.count)
            && below(self.max_count, values.count)
            // IgProf leaves a node without count alone for the average limits.
            && average.is_none_or(|average| {
                above(self.min_average, average) && below(self.max_average, average)
            })
    }
}

/// One rule of `--merge-regexp`: functions that `pattern` matches (by name, else by
/// file) are renamed, and all the functions with the same new name are one.
#[derive(Debug, Clone)]
pub struct MergeRule {
    /// What to match.
    pub pattern: Regex,
    /// `s/PATTERN/REPLACEMENT/` (IgProf's form): the new name is the matched name (or
    /// path) with its first match replaced (`\\1` or `$1` names a group, `\\0` the match). `None` (a plain
    /// pattern): the new name is the text of the first group, or of the whole match.
    pub replacement: Option<String>,
}

impl MergeRule {
    /// Parses the value of one `--merge-regexp`: IgProf's `s/RE/WITH/[;s/RE/WITH/…]`
    /// (any punctuation character instead of `/`), or one plain regular expression.
    ///
    /// # Errors
    /// A one-line message when a pattern is not a valid regular expression, or when the
    /// value starts with `s/` but is not a list of `s/RE/WITH/`.
    pub fn parse(text: &str) -> Result<Vec<MergeRule>, String> {
        if let Some(rules) = parse_substitutions(text) {
            return rules
                .into_iter()
                .map(|(pattern, with)| {
                    Ok(MergeRule {
                        pattern: compile(&pattern)?,
                        replacement: Some(backreferences(&with)),
                    })
                })
                .collect();
        }
        if text.starts_with("s/") {
            return Err(format!(
                "expected s/REGEXP/REPLACEMENT/[;s/REGEXP/REPLACEMENT/...], found {text:?}"
            ));
        }
        Ok(vec![MergeRule {
            pattern: compile(text)?,
            replacement: None,
        }])
    }

    /// The new name of a function called `name` in `file`, if the rule matches either.
    pub fn rename(&self, name: &str, file: &str) -> Option<String> {
        let subject = [name, file]
            .into_iter()
            .find(|subject| self.pattern.is_match(subject))?;
        Some(match &self.replacement {
            Some(with) => self.pattern.replace(subject, with.as_str()).into_owned(),
            None => {
                let captures = self.pattern.captures(subject)?;
                let matched = captures.get(1).or_else(|| captures.get(0))?;
                matched.as_str().to_string()
            }
        })
    }
}

/// A replacement with IgProf's back-references `\\0`…`\\9` (the whole match, a group)
/// written as the regex crate's `${0}`…`${9}`; `$1` and `${name}` work as they are.
fn backreferences(with: &str) -> String {
    let mut out = String::with_capacity(with.len());
    let mut chars = with.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('\\', Some(digit)) if digit.is_ascii_digit() => {
                out.push_str(&format!("${{{digit}}}"));
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

/// `text` as `s<sep>RE<sep>WITH<sep>` rules separated by `;`, or `None` if it is not
/// exactly that.
fn parse_substitutions(text: &str) -> Option<Vec<(String, String)>> {
    let mut rules = Vec::new();
    let mut rest = text;
    loop {
        let mut chars = rest.strip_prefix('s')?.chars();
        let separator = chars.next()?;
        if separator.is_alphanumeric() || separator.is_whitespace() || separator == '\\' {
            return None;
        }
        let body = chars.as_str();
        let mut parts = body.splitn(3, separator);
        let pattern = parts.next()?;
        let with = parts.next()?;
        let after = parts.next()?;
        rules.push((pattern.to_string(), with.to_string()));
        if after.is_empty() {
            return Some(rules);
        }
        rest = after.strip_prefix(';')?;
    }
}

/// `pattern` compiled, or the regex crate's explanation on one line.
pub fn compile(pattern: &str) -> Result<Regex, String> {
    Regex::new(pattern).map_err(|error| {
        let text = error.to_string();
        // Syntax errors are several lines (pattern, caret, "error: ..."): keep the last.
        let reason = text
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("error: "))
            .unwrap_or_else(|| text.lines().last().unwrap_or(""))
            .trim();
        format!("invalid regular expression {pattern:?}: {reason}")
    })
}

/// `pattern`, the value of command-line option `option`, compiled.
///
/// # Errors
/// [`Error::Option`] naming the option when the pattern is not a valid regular
/// expression.
pub fn compile_option(option: &str, pattern: &str) -> Result<Regex, Error> {
    compile(pattern).map_err(|message| Error::Option {
        option: option.to_string(),
        message,
    })
}

/// Everything the reshaping options ask for; the default changes nothing.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--value`.
    pub value: Value,
    /// The counter the count filter applies to (the reported one).
    pub counter: String,
    /// The count filters.
    pub counts: CountFilter,
    /// `--hide`: functions whose frames are left out, their cost going to their caller.
    pub hide: Option<Regex>,
    /// `--merge-ancestors REGEXP`: the outermost frame of a matching function starts its
    /// stack.
    pub merge_ancestors: Option<Regex>,
    /// `--merge-ancestors A>B/WITH` (IgProf's form, `-ma`).
    pub ancestor_rule: Option<AncestorRule>,
    /// `--merge-libraries`: `Some(None)` merges every file, `Some(Some(re))` the files
    /// whose path `re` matches.
    pub merge_libraries: Option<Option<Regex>>,
    /// `--merge-regexp` rules, tried in order.
    pub merge_rules: Vec<MergeRule>,
}

impl Options {
    /// `profile` with the values `--value` selects: for [`Value::Peak`] every amount
    /// becomes its peak. Applied to the profile as read, before the view, so that the
    /// view sums peaks.
    pub fn apply_value(&self, profile: Profile) -> Profile {
        match self.value {
            Value::Normal => profile,
            Value::Peak => {
                let mut peaks = rebuild(&profile, keep, |_, values| {
                    Some(Values {
                        amount: values.peak,
                        ..values
                    })
                });
                peaks.peaks = true;
                peaks
            }
        }
    }

    /// `profile` (in its view) reshaped by every other option, in the order of the
    /// module documentation.
    pub fn apply(&self, profile: Profile) -> Profile {
        let mut profile = profile;
        if self.counts.is_active() {
            if let Some(counter) = profile.counter_id(&self.counter) {
                let filter = self.counts;
                profile = rebuild(&profile, keep, |id: CounterId, values| {
                    (id != counter || filter.keeps(values)).then_some(values)
                });
            }
        }
        if let Some(pattern) = &self.hide {
            profile = hide(&profile, pattern);
        }
        if let Some(pattern) = &self.merge_ancestors {
            profile = merge_ancestors(&profile, pattern);
        }
        if let Some(rule) = &self.ancestor_rule {
            profile = merge_ancestors_igprof(&profile, rule);
        }
        if let Some(pattern) = &self.merge_libraries {
            profile = merge_libraries(&profile, pattern.as_ref());
        }
        if !self.merge_rules.is_empty() {
            profile = merge_regexp(&profile, &self.merge_rules);
        }
        profile
    }
}

/// The allocation functions IgProf's `MallocFilter` merges into their callers for the
/// memory counters (`MEM_*`), by their names in the dump (mangled: `_Znwm` is
/// `operator new(unsigned long)`), followed by those pyigprof's memory profiles end in
/// besides: glibc's names of its allocator functions (`__libc_malloc` is `malloc`'s
/// address), `mmap`, and CPython's allocator layer (`Objects/obmalloc.c`: the public
/// `PyObject_*`/`PyMem_*` functions, pymalloc's `_PyObject_*`, the raw domain's
/// `_PyMem_Raw*`), so that memory is charged to the interpreter or extension code that
/// asked for it (`PyByteArray_Resize`, `list_resize`, `dict_new`, numpy's allocator).
pub const ALLOCATORS: [&str; 42] = [
    "malloc",
    "calloc",
    "realloc",
    "memalign",
    "posix_memalign",
    "aligned_alloc",
    "valloc",
    "zmalloc",
    "zcalloc",
    "zrealloc",
    "_Znwj",
    "_Znwm",
    "_Znaj",
    "_Znam",
    "__libc_malloc",
    "__libc_calloc",
    "__libc_realloc",
    "__libc_memalign",
    "__libc_valloc",
    "__libc_pvalloc",
    "pvalloc",
    "reallocarray",
    "mmap",
    "mmap64",
    "__mmap",
    "PyObject_Malloc",
    "PyObject_Calloc",
    "PyObject_Realloc",
    "PyMem_Malloc",
    "PyMem_Calloc",
    "PyMem_Realloc",
    "PyMem_RawMalloc",
    "PyMem_RawCalloc",
    "PyMem_RawRealloc",
    "_PyObject_Malloc",
    "_PyObject_Calloc",
    "_PyObject_Realloc",
    "_PyMem_RawMalloc",
    "_PyMem_RawCalloc",
    "_PyMem_RawRealloc",
    "_PyMem_DebugRawAlloc",
    "_PyMem_DebugRawRealloc",
];

/// The pool allocator of old libstdc++ whose frames IgProf's `IgProfGccPoolAllocFilter`
/// drops, values and callees, from `MEM_LIVE` reports: the pool keeps what it took from
/// `malloc`, which is not the program's.
pub const GCC_POOL_ALLOCATOR: [&str; 3] = [
    "_ZNSt24__default_alloc_templateILb1ELi0EE14_S_chunk_allocEjRi",
    "_ZNSt24__default_alloc_templateILb1ELi0EE9_S_refillEj",
    "_ZNSt24__default_alloc_templateILb1ELi0EE8allocateEj",
];

/// Whether `path` is one of IgProf's own libraries (`libigprof.so`, and `IgProf.`/
/// `IgHook.` as CMSSW names them): IgProf looks at the last 20 bytes of the path only.
fn is_igprof_library(path: &str) -> bool {
    let bytes = path.as_bytes();
    let tail = &bytes[bytes.len().saturating_sub(20)..];
    [&b"libigprof."[..], b"IgProf.", b"IgHook."]
        .iter()
        .any(|needle| tail.windows(needle.len()).any(|window| window == *needle))
}

/// IgProf's default filters for reports on `counter` (IgProf `src/analyse.cc`, `setKey`
/// and `prepdata`), which `--no-filter` (`-nf`) turns off. In IgProf's order, each over
/// the whole tree:
/// 1. every counter: frames of IgProf's own libraries (a path ending in `libigprof.…`,
///    `IgProf.…` or `IgHook.…`) are left out: their callees become their callers', and their own values — the profiler's
///    own work and buffers — are dropped (IgProf's `RemoveIgProfFilter` and
///    `mergeToNode`, which moves children and not counts);
/// 2. `MEM_*` counters: a frame of an allocation function ([`ALLOCATORS`]) gives its own
///    values, with those of every frame it calls, to its nearest caller that is not one
///    (`MallocFilter`): memory is charged to the code that asked for it, and the report's
///    totals stay the profile's. IgProf's `MallocFilter` drops the allocator's callees
///    with their values instead; in IgProf's own profiles they have none, but pymalloc's
///    `_PyObject_Malloc → allocate_from_new_pool → arena_map_mark_used → __libc_calloc`
///    in pyigprof's does (IgProf's list has no CPython names, so its analyser keeps it);
/// 3. `MEM_LIVE`: frames of the libstdc++ pool allocator ([`GCC_POOL_ALLOCATOR`]) are
///    dropped with their callees and values (`IgProfGccPoolAllocFilter`).
///
/// Outermost frames are never merged (they have no caller). pyigprof's own frames never
/// reach a profile, so for its CPU profiles the filters change nothing.
pub fn igprof_filters(profile: Profile, counter: &str) -> Profile {
    let ours: Vec<bool> = profile
        .files()
        .iter()
        .map(|path| is_igprof_library(path))
        .collect();
    let mut profile = profile;
    if ours.contains(&true) {
        let hidden: Vec<bool> = profile
            .functions()
            .iter()
            .map(|function| ours[function.file as usize])
            .collect();
        profile = leave_out(&profile, &hidden, Target::Through);
    }
    if counter.starts_with("MEM_") {
        let named = |names: &[&str]| -> Vec<bool> {
            profile
                .functions()
                .iter()
                .map(|function| names.contains(&function.name.as_str()))
                .collect()
        };
        let allocators = named(&ALLOCATORS);
        let pool = if counter == "MEM_LIVE" {
            named(&GCC_POOL_ALLOCATOR)
        } else {
            vec![false; allocators.len()]
        };
        if allocators.contains(&true) || pool.contains(&true) {
            let source = &profile;
            // Per source node: whether it is absorbed by its caller, as an allocation
            // function's frame with a caller, or as a frame an absorbed frame calls
            // (parents come before their children).
            let mut absorbed: Vec<bool> = Vec::with_capacity(source.nodes().len());
            for node in source.nodes() {
                let by_caller = node.parent.map(|caller| absorbed[caller as usize]);
                absorbed.push(match by_caller {
                    None => false,
                    Some(caller) => caller || allocators[node.function as usize],
                });
            }
            profile = rebuild(
                source,
                |out: &mut Builder, node: &Node, parent: Option<NodeId>| match parent {
                    Some(parent) if absorbed[index_in(source, node)] => Target::Into(parent),
                    Some(_) if pool[node.function as usize] => Target::Dropped,
                    _ => keep(out, node, parent),
                },
                |_, values| Some(values),
            );
        }
    }
    profile
}

/// Per function of `profile`: whether `pattern` matches its shown name or its file.
fn matching(profile: &Profile, pattern: &Regex) -> Vec<bool> {
    profile
        .functions()
        .iter()
        .map(|function| {
            pattern.is_match(&Label::of(profile, function).name)
                || pattern.is_match(profile.file(function.file))
        })
        .collect()
}

/// `profile` without the frames of the functions `pattern` matches: the values of such
/// a node go to its caller's node and its callees become the caller's (merging with
/// callees of the same function and offset). Outermost frames have no caller and are
/// kept.
pub fn hide(profile: &Profile, pattern: &Regex) -> Profile {
    leave_out(profile, &matching(profile, pattern), Target::Into)
}

/// `profile` without the frames of the functions marked in `hidden` (indexed by
/// function id) that have a caller: each goes to `target(caller)` ([`Target::Into`]:
/// with its values, as [`hide`]; [`Target::Through`]: without them), its callees
/// becoming the caller's.
fn leave_out(profile: &Profile, hidden: &[bool], target: fn(NodeId) -> Target) -> Profile {
    rebuild(
        profile,
        |out: &mut Builder, node: &Node, parent: Option<NodeId>| match parent {
            Some(parent) if hidden[node.function as usize] => target(parent),
            _ => keep(out, node, parent),
        },
        |_, values| Some(values),
    )
}

/// `profile` with every stack that goes through a function `pattern` matches starting
/// at its outermost such frame: the frames above it (its callers) are left out of those
/// stacks, and the matching frames become outermost frames (merging where they are the
/// same function at the same offset). Stacks without a match are unchanged; so are the
/// totals.
pub fn merge_ancestors(profile: &Profile, pattern: &Regex) -> Profile {
    let matches = matching(profile, pattern);
    // Per node: whether it or one of its callers matches.
    let mut under_match: Vec<bool> = Vec::with_capacity(profile.nodes().len());
    for node in profile.nodes() {
        let above = node
            .parent
            .is_some_and(|parent| under_match[parent as usize]);
        under_match.push(above || matches[node.function as usize]);
    }
    let mut index = 0usize;
    rebuild(
        profile,
        |out: &mut Builder, node: &Node, parent: Option<NodeId>| {
            let at = index;
            index += 1;
            let caller_matched = node
                .parent
                .is_some_and(|caller| under_match[caller as usize]);
            let parent = if under_match[at] && !caller_matched {
                None
            } else {
                parent
            };
            keep(out, node, parent)
        },
        |_, values| Some(values),
    )
}

/// IgProf's `--merge-ancestors ANCESTOR1>ANCESTOR2>…>ANCESTORn/WITH` (`-ma`): in each
/// stack, the frames that the patterns match one after the other, outermost first (other
/// frames may come between them), are found; the frame that the last pattern matches is
/// renamed `WITH`, and every frame it calls, directly or not, `WITH:<its name>`. Frames
/// renamed alike under one caller are one frame. Patterns match the function's shown
/// name. (IgProf's own implementation, `walk_ancestors` in `src/analyse.cc`, appends
/// `:` to `WITH` once per renamed callee, so that its names grow along the tree; this is
/// the intended form.) Totals are unchanged.
#[derive(Debug, Clone)]
pub struct AncestorRule {
    /// The ancestors, outermost first.
    pub ancestors: Vec<Regex>,
    /// The new name.
    pub with: String,
}

impl AncestorRule {
    /// Parses IgProf's `A>B>…/WITH`: `None` when `text` has no unescaped `/` (then it is
    /// not IgProf's form; `\\/` is a slash in a regular expression).
    ///
    /// # Errors
    /// A one-line message for an empty ancestor or `WITH`, or an invalid pattern.
    pub fn parse(text: &str) -> Option<Result<AncestorRule, String>> {
        let bytes = text.as_bytes();
        let slash =
            (0..bytes.len()).find(|&i| bytes[i] == b'/' && (i == 0 || bytes[i - 1] != b'\\'))?;
        let (ancestors, with) = (&text[..slash], &text[slash + 1..]);
        Some((|| {
            if with.is_empty() || ancestors.split('>').any(str::is_empty) {
                return Err(format!(
                    "expected ANCESTOR[>ANCESTOR...]/NAME with no empty part, found {text:?}"
                ));
            }
            Ok(AncestorRule {
                ancestors: ancestors
                    .split('>')
                    .map(compile)
                    .collect::<Result<_, _>>()?,
                with: with.to_string(),
            })
        })())
    }
}

/// `profile` with [`AncestorRule`] `rule` applied.
pub fn merge_ancestors_igprof(profile: &Profile, rule: &AncestorRule) -> Profile {
    let names: Vec<String> = profile
        .functions()
        .iter()
        .map(|function| Label::of(profile, function).name)
        .collect();
    let wanted = rule.ancestors.len();
    // Per source node: how many ancestors its path (itself included) has matched.
    let mut matched: Vec<usize> = Vec::with_capacity(profile.nodes().len());
    rebuild(
        profile,
        |out: &mut Builder, node: &Node, parent: Option<NodeId>| {
            let above = node.parent.map_or(0, |caller| matched[caller as usize]);
            let name = &names[node.function as usize];
            let here = if above < wanted && rule.ancestors[above].is_match(name) {
                above + 1
            } else {
                above
            };
            matched.push(here);
            let renamed = if above == wanted {
                format!("{}:{name}", rule.with)
            } else if here == wanted {
                rule.with.clone()
            } else {
                return keep(out, node, parent);
            };
            let file = out.pseudo_file(MERGED_FILE);
            let function = out.intern(&renamed, file, 0);
            Target::Child {
                parent,
                function,
                offset: 0,
            }
        },
        |_, values| Some(values),
    )
}

/// IgProf's `--merge-libraries`: every function of a file (of the files whose path
/// `pattern` matches; every file for `None`) becomes one function named after the file's
/// path, and a frame of such a function called by a frame of the same one is merged
/// into its caller, so that consecutive frames of one library are one frame. Python
/// source files are merged too (one function per module).
pub fn merge_libraries(profile: &Profile, pattern: Option<&Regex>) -> Profile {
    let files: Vec<bool> = profile
        .files()
        .iter()
        .map(|file| pattern.is_none_or(|pattern| pattern.is_match(file)))
        .collect();
    let renamed: Vec<Option<String>> = profile
        .functions()
        .iter()
        .map(|function| {
            files[function.file as usize].then(|| profile.file(function.file).to_string())
        })
        .collect();
    merge(profile, &renamed)
}

/// IgProf's `--merge-regexp`: each function is renamed by the first of `rules` that
/// matches it ([`MergeRule::rename`]); functions with the same new name are one function
/// (in their file if they share one, else in the pseudo-file `[merged]`), and
/// consecutive frames of that function are one frame.
pub fn merge_regexp(profile: &Profile, rules: &[MergeRule]) -> Profile {
    let renamed: Vec<Option<String>> = profile
        .functions()
        .iter()
        .map(|function| {
            let name = Label::of(profile, function).name;
            let file = profile.file(function.file);
            rules.iter().find_map(|rule| rule.rename(&name, file))
        })
        .collect();
    merge(profile, &renamed)
}

/// The pseudo-file of functions merged from several files.
pub const MERGED_FILE: &str = "[merged]";

/// `profile` with function `f` renamed to `renamed[f]` where it is `Some`: the functions
/// with one new name are one function (offsets 0), and its frames called by its own
/// frames are merged into them.
fn merge(profile: &Profile, renamed: &[Option<String>]) -> Profile {
    // Per new name: the file its functions share (or None: several), Python or not,
    // and the smallest start.
    struct Group {
        file: Option<FileId>,
        python: bool,
        start: i64,
    }
    let mut groups: std::collections::HashMap<&str, Group> = std::collections::HashMap::new();
    for (function, name) in profile.functions().iter().zip(renamed) {
        let Some(name) = name else { continue };
        let python = profile.is_python_code(function.file);
        groups
            .entry(name.as_str())
            .and_modify(|group| {
                if group.file != Some(function.file) {
                    group.file = None;
                }
                group.python &= python;
                group.start = group.start.min(function.start);
            })
            .or_insert(Group {
                file: Some(function.file),
                python,
                start: function.start,
            });
    }
    let mut merged: Vec<Option<FunctionId>> = vec![None; profile.functions().len()];
    rebuild(
        profile,
        |out: &mut Builder, node: &Node, parent: Option<NodeId>| {
            let Some(name) = &renamed[node.function as usize] else {
                return keep(out, node, parent);
            };
            let function = *merged[node.function as usize].get_or_insert_with(|| {
                let group = &groups[name.as_str()];
                match group.file {
                    Some(file) => {
                        let file = out.file(file);
                        // Native starts are addresses: meaningless for a whole group.
                        let start = if group.python { group.start } else { 0 };
                        out.intern(name, file, start)
                    }
                    None => {
                        let file = out.pseudo_file(MERGED_FILE);
                        out.intern(name, file, 0)
                    }
                }
            });
            match parent {
                Some(parent) if out.profile.nodes()[parent as usize].function == function => {
                    Target::Into(parent)
                }
                _ => Target::Child {
                    parent,
                    function,
                    offset: 0,
                },
            }
        },
        |_, values| Some(values),
    )
}

/// Where a node of the source profile goes in the new one.
enum Target {
    /// Into this existing node: its values are added there, its callees become that
    /// node's.
    Into(NodeId),
    /// Its own values dropped; its callees become this existing node's.
    Through(NodeId),
    /// Dropped with its callees and their values.
    Dropped,
    /// A node of `function` at `offset` under `parent` (created or merged with an
    /// existing one).
    Child {
        parent: Option<NodeId>,
        function: FunctionId,
        offset: i64,
    },
}

/// The index of `node`, one of `profile`'s nodes, in `profile.nodes()`.
fn index_in(profile: &Profile, node: &Node) -> usize {
    let start = profile.nodes().as_ptr() as usize;
    let index = (node as *const Node as usize - start) / std::mem::size_of::<Node>();
    debug_assert!(std::ptr::eq(&profile.nodes()[index], node));
    index
}

/// Places each node where it was: same function, offset and caller.
fn keep(out: &mut Builder, node: &Node, parent: Option<NodeId>) -> Target {
    Target::Child {
        parent,
        function: out.function(node.function),
        offset: node.offset,
    }
}

/// The new profile being made, with the source's files and functions copied on first
/// use.
struct Builder<'a> {
    source: &'a Profile,
    profile: Profile,
    files: Vec<Option<FileId>>,
    functions: Vec<Option<FunctionId>>,
}

/// A reshaped profile never has more items than its source (plus one pseudo-file), so
/// its tables cannot overflow where the source's did not.
const FITS: &str = "a reshaped profile has no more items than its source";

impl<'a> Builder<'a> {
    fn new(source: &'a Profile) -> Self {
        let mut profile = Profile::new();
        profile.sources = source.sources.clone();
        profile.hidden_nodes = source.hidden_nodes;
        profile.peaks = source.peaks;
        for name in source.counters() {
            // Same names in the same order: counter ids are unchanged.
            profile.intern_counter(name).expect(FITS);
        }
        Builder {
            source,
            profile,
            files: vec![None; source.files().len()],
            functions: vec![None; source.functions().len()],
        }
    }

    /// The new id of the source's file `id`.
    fn file(&mut self, id: FileId) -> FileId {
        let (source, profile) = (self.source, &mut self.profile);
        *self.files[id as usize].get_or_insert_with(|| {
            let file = profile.intern_file(source.file(id)).expect(FITS);
            profile.set_python_code(file, source.is_python_code(id));
            file
        })
    }

    /// The id of a file of the new profile only, never Python code.
    fn pseudo_file(&mut self, path: &str) -> FileId {
        let file = self.profile.intern_file(path).expect(FITS);
        self.profile.set_python_code(file, false);
        file
    }

    /// The new id of the source's function `id`.
    fn function(&mut self, id: FunctionId) -> FunctionId {
        if let Some(function) = self.functions[id as usize] {
            return function;
        }
        let source = self.source.function(id);
        let file = self.file(source.file);
        let function = self.intern(&source.name, file, source.start);
        self.functions[id as usize] = Some(function);
        function
    }

    /// The id of function (`name`, `file`) of the new profile.
    fn intern(&mut self, name: &str, file: FileId, start: i64) -> FunctionId {
        self.profile.intern_function(name, file, start).expect(FITS)
    }
}

/// A new profile from `source`: each node placed by `place` (given the node and where
/// its parent went, `None` for a root; parents are placed before their children), its
/// values passed through `values` (per counter; `None` drops them).
fn rebuild(
    source: &Profile,
    mut place: impl FnMut(&mut Builder, &Node, Option<NodeId>) -> Target,
    mut values: impl FnMut(CounterId, Values) -> Option<Values>,
) -> Profile {
    let mut out = Builder::new(source);
    // Per source node: where it went, `None` when it and its callees were dropped.
    let mut mapped: Vec<Option<NodeId>> = Vec::with_capacity(source.nodes().len());
    for node in source.nodes() {
        let parent = match node.parent {
            // The callees of a dropped node are dropped.
            Some(parent) => match mapped[parent as usize] {
                None => {
                    mapped.push(None);
                    continue;
                }
                some => some,
            },
            None => None,
        };
        let (id, own) = match place(&mut out, node, parent) {
            Target::Into(id) => (Some(id), true),
            Target::Through(id) => (Some(id), false),
            Target::Dropped => (None, false),
            Target::Child {
                parent,
                function,
                offset,
            } => (
                Some(out.profile.child(parent, function, offset).expect(FITS)),
                true,
            ),
        };
        if let (Some(id), true) = (id, own) {
            for &(counter, own) in &node.values {
                if let Some(kept) = values(counter, own) {
                    out.profile.add_values(id, counter, kept);
                }
            }
        }
        mapped.push(id);
    }
    out.profile
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{load, stacks_named};

    /// Every stack of `profile` with self values, as `frame;frame;… amount`, sorted.
    fn stacks(profile: &Profile) -> Vec<String> {
        stacks_named(profile, |profile, node| {
            profile.function(node.function).name.clone()
        })
    }

    const DUMP: &[u8] = b"P=(HEX ID=1 N=(python3 x.py) T=0.004000)
C1 FN0=(F0=(/lib/libc.so.6)+100 N=(main))+1 V0=(PERF_TICKS):(1,1,1)
C2 FN1=(F1=(/work/x.py)+1 N=(<module>))+4 V0:(1,2,2)
C3 FN2=(F1+a N=(work))+2 V0:(3,9,4)
C4 FN3=(F2=(/lib/libz.so.1)+2a40 N=(deflate))+1f V0:(2,4,4)
C5 FN4=(F2+3000 N=(deflate_slow))+8 V0:(5,20,8)
C6 FN5=(F0+200 N=(memcpy))+3 V0:(1,1,1)
C3 FN6=(F1+20 N=(other))+1
C4 FN3+10 V0:(1,3,3)
";

    /// A memory profile as IgProf writes one: `operator new` calling `malloc`, `malloc`
    /// calling a function that is not an allocator, the profiler's own buffers (values
    /// on IgProf's thread wrapper) and a thread started through it, and the libstdc++
    /// pool allocator. `COUNTER` is replaced by the counter's name. IgProf's own
    /// igprof-analyse gives the figures below for this dump (checked by hand), but for
    /// malloc's callee's 7 bytes, which it drops.
    const MEMORY_DUMP: &str = "P=(HEX ID=1 N=(prog) T=0.010000)
C1 FN0=(F0=(/lib/libc.so.6)+10 N=(__libc_start_main))+0
C2 FN1=(F1=(/bin/prog)+20 N=(main))+0
C3 FN2=(F1+30 N=(_Z4makev))+0
C4 FN3=(F2=(/usr/lib/libstdc++.so.6)+40 N=(_Znwm))+0 V0=(COUNTER):(1,8,8)
C5 FN4=(F0+50 N=(malloc))+0 V0:(4,3e8,258)
C6 FN5=(F0+60 N=(sysmalloc))+0 V0:(1,7,7)
C3 FN6=(F1+70 N=(_Z4fillv))+0
C4 FN4+0 V0:(a,1388,3e8)
C4 FN7=(F1+80 N=(_Z6helperv))+0 V0:(1,64,64)
C3 FN8=(F3=(/usr/lib/libstdc++.so.5)+90 N=(_ZNSt24__default_alloc_templateILb1ELi0EE8allocateEj))+0 V0:(1,5,5)
C4 FN4+0 V0:(1,4,4)
C1 FN9=(F0+a0 N=(start_thread))+0
C2 FNa=(F4=(/opt/igprof/lib/libigprof.so)+b0 N=(_ZN12_GLOBAL__N_113threadWrapperEPv))+0 V0:(3,12c,12c)
C3 FNb=(F1+c0 N=(_Z6workerPv))+0
C4 FNc=(F0+d0 N=(calloc))+0 V0:(2,c8,c8)
";

    #[test]
    fn allocations_of_a_python_program_charge_the_code_that_asked() {
        // A pyigprof memory profile: bytearray's buffer through CPython's allocator layer
        // to glibc's malloc (named __libc_malloc at malloc's address), a dict through
        // pymalloc, an mmap.
        let dump = "P=(HEX ID=1 N=(python3 app.py) T=0.004000)
C1 FN0=(F0=(/usr/bin/python3)+10 N=(main))+0
C2 FN1=(F1=(/app.py)+1 N=(leak))+0
C3 FN2=(F2=(/lib/libpython3.12.so)+20 N=(PyByteArray_Resize))+0
C4 FN3=(F2+30 N=(PyObject_Malloc))+0
C5 FN4=(F2+40 N=(_PyObject_Malloc))+0
C6 FN5=(F2+50 N=(PyMem_RawMalloc))+0
C7 FN6=(F3=(/lib/libc.so.6)+60 N=(__libc_malloc))+0 V0=(MEM_LIVE):(2,200000,200000)
C3 FN7=(F2+70 N=(PyDict_New))+0
C4 FN4+0 V0:(10,640,640)
C3 FN8=(F4=(/lib/mmap.so)+80 N=(new_mmap_object))+0
C4 FN9=(F3+90 N=(mmap64))+0 V0:(1,1000000,1000000)
C3 FNa=(F2+a0 N=(PyList_Append))+0
C4 FN4+0
C5 FNb=(F2+b0 N=(allocate_from_new_pool))+0
C6 FNc=(F2+c0 N=(arena_map_mark_used))+0
C7 FNd=(F3+d0 N=(__libc_calloc))+0 V0:(1,4000,4000)
";
        let live = igprof_filters(load(dump.as_bytes()), "MEM_LIVE");
        assert_eq!(
            stacks(&live),
            [
                "main;leak;PyByteArray_Resize 2097152",
                "main;leak;PyDict_New 1600",
                "main;leak;PyList_Append 16384",
                "main;leak;new_mmap_object 16777216",
            ]
        );
        // pymalloc's own arena map (calloc'ed under _PyObject_Malloc by code that is no
        // allocator) is its caller's: every byte of the profile stays in the report.
        let unfiltered = load(dump.as_bytes());
        assert_eq!(live.total(0), unfiltered.total(0));
    }

    #[test]
    fn igprofs_default_filters() {
        let memory = |counter: &str| load(MEMORY_DUMP.replace("COUNTER", counter).as_bytes());
        // MEM_TOTAL: operator new, malloc and malloc's callee charge make (8 + 1000 +
        // 7: IgProf drops the 7); IgProf's buffers (300) are dropped; the thread's
        // allocation is its worker's, now under start_thread.
        let total = igprof_filters(memory("MEM_TOTAL"), "MEM_TOTAL");
        assert_eq!(
            stacks(&total),
            [
                "__libc_start_main;main;_Z4fillv 5000",
                "__libc_start_main;main;_Z4fillv;_Z6helperv 100",
                "__libc_start_main;main;_Z4makev 1015",
                "__libc_start_main;main;_ZNSt24__default_alloc_templateILb1ELi0EE8allocateEj 9",
                "start_thread;_Z6workerPv 200",
            ]
        );
        assert_eq!(total.total(0).count, 1 + 4 + 1 + 10 + 1 + 1 + 1 + 2);
        // MEM_LIVE: the pool allocator and what it allocated are dropped too.
        let live = igprof_filters(memory("MEM_LIVE"), "MEM_LIVE");
        assert_eq!(live.total(0).amount, 5000 + 100 + 1015 + 200);
        // A CPU profile: only IgProf's own frames go (their own values with them).
        let ticks = igprof_filters(memory("PERF_TICKS"), "PERF_TICKS");
        assert_eq!(
            ticks.total(0).amount,
            8 + 1000 + 7 + 5000 + 100 + 5 + 4 + 200
        );
        assert!(stacks(&ticks).contains(&"start_thread;_Z6workerPv;calloc 200".to_string()));
        assert!(!is_igprof_library("/cmssw/lib/libIgProfExt.so"));
        assert!(is_igprof_library(
            "/a/very/long/directory/name/lib/IgHook.so"
        ));
    }

    #[test]
    fn igprofs_merge_ancestors_renames_the_last_match_and_its_callees() {
        let rule = AncestorRule::parse("main>work/ZIP").unwrap().unwrap();
        let merged = merge_ancestors_igprof(&load(DUMP), &rule);
        assert_eq!(
            stacks(&merged),
            [
                "main 1",
                "main;<module> 2",
                "main;<module>;ZIP 9",
                "main;<module>;ZIP;ZIP:deflate 4",
                "main;<module>;ZIP;ZIP:deflate;ZIP:deflate_slow 32",
                "main;<module>;ZIP;ZIP:deflate;ZIP:deflate_slow;ZIP:memcpy 1",
                "main;<module>;other;deflate 3",
            ]
        );
        assert!(AncestorRule::parse("numpy\\/core").is_none());
        assert!(AncestorRule::parse("a>/x").unwrap().is_err());
        assert_eq!(backreferences(r"\1_\0$1"), "${1}_${0}$1");
        let rule = &MergeRule::parse(r"s/^(de)flate/X\1/").unwrap()[0];
        assert_eq!(
            rule.rename("deflate", "/lib/libz.so.1").as_deref(),
            Some("Xde")
        );
    }

    #[test]
    fn peak_values_replace_amounts() {
        let options = Options {
            value: Value::Peak,
            ..Options::default()
        };
        let profile = options.apply_value(load(DUMP));
        assert_eq!(profile.total(0).amount, 1 + 2 + 4 + 4 + 8 + 1 + 3);
        assert_eq!(profile.total(0).count, 14);
    }

    #[test]
    fn count_filter_drops_small_and_large_nodes() {
        let options = |counts| Options {
            counter: "PERF_TICKS".into(),
            counts,
            ..Options::default()
        };
        let min = options(CountFilter {
            min_amount: Some(4),
            ..CountFilter::default()
        })
        .apply(load(DUMP));
        assert_eq!(
            stacks(&min),
            [
                "main;<module>;work 9",
                "main;<module>;work;deflate 4",
                "main;<module>;work;deflate;deflate_slow 32",
            ]
        );
        let max = options(CountFilter {
            max_amount: Some(3),
            ..CountFilter::default()
        })
        .apply(load(DUMP));
        assert_eq!(max.total(0).amount + min.total(0).amount, 52);
        let average = options(CountFilter {
            min_average: Some(3),
            min_count: Some(2),
            ..CountFilter::default()
        })
        .apply(load(DUMP));
        // Amounts are hex: work 9/3 = 3, deflate_slow 0x20/5 = 6 kept; deflate 4/2 = 2 and
        // the single samples dropped.
        assert_eq!(average.total(0).amount, 41);
    }

    #[test]
    fn hidden_frames_give_their_cost_to_the_caller() {
        let pattern = compile("^deflate$|libc").unwrap();
        let profile = hide(&load(DUMP), &pattern);
        assert_eq!(
            stacks(&profile),
            [
                // main is outermost: kept although it matches (libc).
                "main 1",
                "main;<module> 2",
                "main;<module>;other 3",
                "main;<module>;work 13",
                // memcpy's 1 went to deflate_slow (0x20 = 32 of its own).
                "main;<module>;work;deflate_slow 33",
            ]
        );
        assert_eq!(profile.total(0), load(DUMP).total(0));
    }

    #[test]
    fn stacks_start_at_the_outermost_match() {
        let profile = merge_ancestors(&load(DUMP), &compile("^deflate").unwrap());
        assert_eq!(
            stacks(&profile),
            [
                "deflate 3",
                "deflate 4",
                "deflate;deflate_slow 32",
                "deflate;deflate_slow;memcpy 1",
                "main 1",
                "main;<module> 2",
                "main;<module>;work 9",
            ]
        );
        assert_eq!(profile.total(0), load(DUMP).total(0));
        // deflate (two offsets, two callers) is one function with two root nodes.
        let roots = profile
            .nodes()
            .iter()
            .filter(|n| n.parent.is_none())
            .count();
        assert_eq!(roots, 3);
    }

    #[test]
    fn libraries_merge_into_one_frame() {
        let profile = merge_libraries(&load(DUMP), None);
        assert_eq!(
            stacks(&profile),
            [
                "/lib/libc.so.6 1",
                "/lib/libc.so.6;/work/x.py 11",
                "/lib/libc.so.6;/work/x.py;/lib/libz.so.1 39",
                "/lib/libc.so.6;/work/x.py;/lib/libz.so.1;/lib/libc.so.6 1",
            ]
        );
        let only_libz = merge_libraries(&load(DUMP), Some(&compile("libz").unwrap()));
        assert_eq!(
            stacks(&only_libz),
            [
                "main 1",
                "main;<module> 2",
                "main;<module>;other;/lib/libz.so.1 3",
                "main;<module>;work 9",
                "main;<module>;work;/lib/libz.so.1 36",
                "main;<module>;work;/lib/libz.so.1;memcpy 1",
            ]
        );
        // The Python module stays Python, starting at its first function's line.
        let x = profile
            .functions()
            .iter()
            .find(|f| f.name == "/work/x.py")
            .unwrap();
        assert!(profile.is_python_code(x.file));
        assert_eq!(x.start, 1);
    }

    #[test]
    fn merge_rules_rename_and_collapse() {
        let rules = MergeRule::parse("s/^deflate.*/zlib/;s#^(work|other)$#python:$1#").unwrap();
        assert_eq!(rules.len(), 2);
        let profile = merge_regexp(&load(DUMP), &rules);
        assert_eq!(
            stacks(&profile),
            [
                "main 1",
                "main;<module> 2",
                "main;<module>;python:other;zlib 3",
                "main;<module>;python:work 9",
                "main;<module>;python:work;zlib 36",
                "main;<module>;python:work;zlib;memcpy 1",
            ]
        );
        // A plain pattern names the function by its first group (or the match); a
        // pattern that matches only the file renames by the file's text.
        let plain = MergeRule::parse("lib(z)").unwrap();
        assert!(plain[0].replacement.is_none());
        assert_eq!(plain[0].rename("inflate", "/lib/libz.so.1").unwrap(), "z");
        assert_eq!(plain[0].rename("main", "/lib/libc.so.6"), None);
        let profile = merge_regexp(&load(DUMP), &MergeRule::parse("^(deflate|memcpy)").unwrap());
        // deflate_slow becomes "deflate" too (same file) and merges into its caller.
        let deflate = profile
            .functions()
            .iter()
            .find(|f| f.name == "deflate")
            .unwrap();
        assert_eq!(profile.file(deflate.file), "/lib/libz.so.1");
        let memcpy = profile.functions().iter().find(|f| f.name == "memcpy");
        assert_eq!(profile.file(memcpy.unwrap().file), "/lib/libc.so.6");
        assert!(stacks(&profile).contains(&"main;<module>;work;deflate 36".to_string()));
    }

    #[test]
    fn merged_file_for_functions_of_several_files() {
        let rules = MergeRule::parse("s/^(deflate|memcpy|main)$/copying/").unwrap();
        let profile = merge_regexp(&load(DUMP), &rules);
        let copying = profile
            .functions()
            .iter()
            .find(|f| f.name == "copying")
            .unwrap();
        assert_eq!(profile.file(copying.file), MERGED_FILE);
    }

    #[test]
    fn bad_patterns_are_one_line_errors() {
        let error = compile("(").unwrap_err();
        assert_eq!(error, "invalid regular expression \"(\": unclosed group");
        assert!(MergeRule::parse("s/a/b")
            .unwrap_err()
            .starts_with("expected s/REGEXP/REPLACEMENT/"));
        assert!(MergeRule::parse("s/(/b/")
            .unwrap_err()
            .contains("unclosed group"));
        // Not IgProf's form: a plain pattern.
        assert!(MergeRule::parse("s.*").unwrap()[0].replacement.is_none());
    }
}
