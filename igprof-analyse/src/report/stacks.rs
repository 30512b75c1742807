//! IgProf's `--top N` report (`-tn N`): the N call stacks with the largest self amount,
//! each printed from its innermost frame out, as IgProf's `igprof-analyse --top N` prints
//! them (IgProf `src/analyse.cc`, `topN` and `TopNBuilderFilter`):
//!
//! ```text
//! ## Entry 1 (0.45 seconds)
//! #0 SHA256_Update
//! #1 digest
//! #2 <module>
//! #3 _start
//! #4 <spontaneous>
//! ```
//!
//! A stack is one node of the call tree by function ([`CallTree`]: a function's frames
//! at different offsets under the same callers are one, as IgProf's nodes are one per
//! symbol) and its callers; its value is the node's own amount of the counter: seconds
//! with 2 decimals for tick counters, events for the sampled event counters
//! (`PERF_PAGE_FAULTS`, …: `12'345 events`), else the amount followed by `bytes`, with
//! thousands separated by `'` as IgProf writes them. Ties keep the order of
//! the tree (depth first). pyigprof's own `--top` lists functions instead.

use std::io::{self, Write};

use super::{CallTree, Measure, Options, Unit};
use crate::error::Error;
use crate::profile::Profile;
use crate::symbol::Label;

/// The computed report.
#[derive(Debug, Clone, PartialEq)]
pub struct Stacks {
    /// The counter and its total.
    pub measure: Measure,
    /// The call tree the stacks are taken from.
    pub calls: CallTree,
    /// The heaviest stacks: (own amount, innermost node of [`Stacks::calls`]), largest
    /// first.
    pub entries: Vec<(i64, u32)>,
}

/// The `limit` nodes of `profile` with the largest own amount of `options.counter`
/// (nodes without any are left out).
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`.
pub fn compute(profile: &Profile, options: &Options, limit: usize) -> Result<Stacks, Error> {
    let (measure, counter) = Measure::select(profile, &options.counter)?;
    let calls = CallTree::of(profile, counter);
    let mut entries: Vec<(i64, u32)> = calls
        .nodes
        .iter()
        .enumerate()
        .map(|(index, node)| (node.self_values.amount, index as u32))
        .filter(|&(amount, _)| amount > 0)
        .collect();
    // Stable: ties stay in the tree's order.
    entries.sort_by_key(|&(amount, _)| std::cmp::Reverse(amount));
    entries.truncate(limit);
    Ok(Stacks {
        measure,
        calls,
        entries,
    })
}

/// `value` with its thousands separated by `'`, as IgProf's `thousands()`.
fn thousands(value: &str) -> String {
    super::thousands(value, '\'')
}

/// Writes `stacks` as IgProf does: `## Entry <rank> (<value>)`, then `#<i> <function>`
/// from the innermost frame (0) to `<spontaneous>`, then an empty line.
///
/// # Errors
/// Those of `out`.
pub fn write(profile: &Profile, stacks: &Stacks, out: &mut dyn Write) -> io::Result<()> {
    for (rank, &(amount, node)) in stacks.entries.iter().enumerate() {
        let value = match stacks.measure.unit {
            Unit::Ticks => format!(
                "{} seconds",
                thousands(&format!("{:.2}", stacks.measure.seconds(amount)))
            ),
            // IgProf's form (its exact bytes), which scripts of IgProf's output read.
            Unit::Bytes | Unit::Amount => format!("{} bytes", thousands(&amount.to_string())),
            // IgProf's form, in events rather than bytes.
            Unit::Events => format!("{} events", thousands(&amount.to_string())),
        };
        writeln!(out, "## Entry {} ({value})", rank + 1)?;
        let mut frame = 0;
        let mut cursor = Some(node);
        while let Some(at) = cursor {
            let node = &stacks.calls.nodes[at as usize];
            let name = Label::of(profile, profile.function(node.function)).name;
            writeln!(out, "#{frame} {name}")?;
            frame += 1;
            cursor = node.parent;
        }
        writeln!(out, "#{frame} <spontaneous>")?;
        writeln!(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testing::load;

    #[test]
    fn thousands_are_separated_as_igprof_does() {
        assert_eq!(thousands("0.45"), "0.45");
        assert_eq!(thousands("1234.50"), "1'234.50");
        assert_eq!(thousands("2127280"), "2'127'280");
        assert_eq!(thousands("-1000"), "-1'000");
    }

    #[test]
    fn the_heaviest_stacks_innermost_first() {
        let profile = load(
            "t.txt",
            b"P=(HEX ID=1 N=(x) T=0.004000)\n\
              C1 FN0=(F0=(/a)+1 N=(main))+0 V0=(PERF_TICKS):(1,1,1)\n\
              C2 FN1=(F0+2 N=(f))+0\n\
              C3 FN2=(F0+3 N=(g))+0 V0:(5,5,5)\n\
              C2 FN3=(F0+4 N=(h))+0 V0:(4,4,4)\n\
              C2 FN3+8 V0:(5,5,5)\n",
        );
        let options = Options::default();
        let stacks = compute(&profile, &options, 2).unwrap();
        let mut out = Vec::new();
        write(&profile, &stacks, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "## Entry 1 (0.04 seconds)\n#0 h\n#1 main\n#2 <spontaneous>\n\n\
             ## Entry 2 (0.02 seconds)\n#0 g\n#1 f\n#2 main\n#3 <spontaneous>\n\n"
        );
    }
}
