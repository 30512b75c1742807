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
    /// path) with its first match replaced (`$1` names a group). `None` (a plain
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
                        replacement: Some(with),
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
    /// `--merge-ancestors`: the outermost frame of a matching function starts its stack.
    pub merge_ancestors: Option<Regex>,
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
            Value::Peak => rebuild(&profile, keep, |_, values| {
                Some(Values {
                    amount: values.peak,
                    ..values
                })
            }),
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
        if let Some(pattern) = &self.merge_libraries {
            profile = merge_libraries(&profile, pattern.as_ref());
        }
        if !self.merge_rules.is_empty() {
            profile = merge_regexp(&profile, &self.merge_rules);
        }
        profile
    }
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
    let hidden = matching(profile, pattern);
    rebuild(
        profile,
        |out: &mut Builder, node: &Node, parent: Option<NodeId>| match parent {
            Some(parent) if hidden[node.function as usize] => Target::Into(parent),
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
    /// A node of `function` at `offset` under `parent` (created or merged with an
    /// existing one).
    Child {
        parent: Option<NodeId>,
        function: FunctionId,
        offset: i64,
    },
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
    let mut mapped: Vec<NodeId> = Vec::with_capacity(source.nodes().len());
    for node in source.nodes() {
        let parent = node.parent.map(|parent| mapped[parent as usize]);
        let target = place(&mut out, node, parent);
        let id = match target {
            Target::Into(id) => id,
            Target::Child {
                parent,
                function,
                offset,
            } => out.profile.child(parent, function, offset).expect(FITS),
        };
        for &(counter, own) in &node.values {
            if let Some(kept) = values(counter, own) {
                out.profile.add_values(id, counter, kept);
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
