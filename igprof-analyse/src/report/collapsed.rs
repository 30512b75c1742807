//! The `--collapsed` report: folded stacks, the input format of Brendan Gregg's
//! `flamegraph.pl` and of inferno (`inferno-flamegraph`), also what
//! [`super::flamegraph`] draws.
//!
//! One line per distinct stack of the [`CallTree`] with a self amount:
//! `outermost;…;innermost <amount>`, frames named by [`Label::frame`]
//! (`python_work (/work/app.py:16)`, `deflate [libz.so.1]`). The amount is the counter's
//! (ticks of T seconds for `PERF_TICKS`, bytes for the memory counters, events for the
//! sampled event counters such as `PERF_PAGE_FAULTS`); stacks with a
//! zero or negative amount are left out. The amounts of all lines sum to the counter's
//! total (of its positive amounts).

use std::io::{self, Write};

use super::{CallTree, Measure, Options};
use crate::error::Error;
use crate::profile::Profile;
use crate::symbol::Label;

/// The computed stacks.
#[derive(Debug, Clone, PartialEq)]
pub struct Collapsed {
    /// The counter and its total.
    pub measure: Measure,
    /// Each stack (frames joined by `;`, outermost first) and its amount, in the call
    /// tree's depth-first order.
    pub stacks: Vec<(String, i64)>,
}

/// Computes the folded stacks of `options.counter` in `profile` (the limit and order
/// do not apply).
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`. A profile
/// without any counter has no stacks.
pub fn compute(profile: &Profile, options: &Options) -> Result<Collapsed, Error> {
    let (measure, counter) = Measure::select(profile, &options.counter)?;
    let tree = CallTree::of(profile, counter);
    let mut frames: Vec<Option<String>> = vec![None; profile.functions().len()];
    let mut stacks = Vec::new();
    // The current stack as text, and its length after the frame of each depth.
    let mut path = String::new();
    let mut ends: Vec<usize> = Vec::new();
    for id in tree.preorder() {
        let node = &tree.nodes[id as usize];
        // Back to the parent's frame (preorder visits a node right after its parent's
        // subtrees before it).
        ends.truncate(node.depth);
        path.truncate(ends.last().copied().unwrap_or(0));
        if node.depth > 0 {
            path.push(';');
        }
        let frame = frames[node.function as usize]
            .get_or_insert_with(|| Label::of(profile, profile.function(node.function)).frame());
        path.push_str(frame);
        ends.push(path.len());
        if node.self_values.amount > 0 {
            stacks.push((path.clone(), node.self_values.amount));
        }
    }
    Ok(Collapsed { measure, stacks })
}

/// Writes the stacks, one `stack amount` line each.
///
/// # Errors
/// Those of `out`.
pub fn write(collapsed: &Collapsed, out: &mut dyn Write) -> io::Result<()> {
    for (stack, amount) in &collapsed.stacks {
        writeln!(out, "{stack} {amount}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::load;
    use super::*;

    const RECURSIVE: &[u8] = include_bytes!("../../tests/data/recursive-hex.txt");

    fn text(profile: &Profile) -> String {
        let collapsed = compute(profile, &Options::default()).unwrap();
        let mut out = Vec::new();
        write(&collapsed, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn stacks_of_recursive_dump() {
        assert_eq!(
            text(&load("rec.txt", RECURSIVE)),
            "\
__libc_start_main [libc.so.6];<module> (/work/rec.py:1);fib (/work/rec.py:10) 3
__libc_start_main [libc.so.6];<module> (/work/rec.py:1);fib (/work/rec.py:10);fib (/work/rec.py:10) 1
__libc_start_main [libc.so.6];<module> (/work/rec.py:1);fib (/work/rec.py:10);fib (/work/rec.py:10);fib (/work/rec.py:10) 4
__libc_start_main [libc.so.6];<module> (/work/rec.py:1);fib (/work/rec.py:10);fib (/work/rec.py:10);fib (/work/rec.py:10);deflate_slow [libz.so.1] 8
__libc_start_main [libc.so.6];<module> (/work/rec.py:1);foo::bar() [libc.so.6] 4
std::rt::lang_start [app];deflate [libz.so.1] 4
"
        );
    }

    #[test]
    fn siblings_after_a_deep_branch_start_from_their_parent() {
        let profile = load(
            "t.txt",
            b"P=(HEX ID=1 N=(x) T=0.010000)
C1 FN0=(F0=(/a)+0 N=(a))+0
C2 FN1=(F0+1 N=(b))+0
C3 FN2=(F0+2 N=(c))+0 V0=(PERF_TICKS):(1,5,5)
C2 FN3=(F0+3 N=(d))+0 V0:(1,2,2)
C1 FN4=(F0+4 N=(e))+0 V0:(1,1,1)
",
        );
        assert_eq!(
            text(&profile),
            "a [a];b [a];c [a] 5\na [a];d [a] 2\ne [a] 1\n"
        );
    }

    #[test]
    fn no_counter_no_stacks() {
        let profile = load(
            "t.txt",
            b"P=(HEX ID=1 N=(x) T=0.010000)\nC1 FN0=(F0=(/a)+0 N=(a))+0\n",
        );
        assert_eq!(text(&profile), "");
    }
}
