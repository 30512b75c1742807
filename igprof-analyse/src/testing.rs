//! Helpers shared by the crate's unit tests.

use crate::parse::load_reader;
use crate::profile::{Node, NodeId, Profile};

/// A profile read from dump text `text` (named `t.txt` in messages).
pub fn load(text: &[u8]) -> Profile {
    let mut profile = Profile::new();
    load_reader(&mut profile, "t.txt", text).unwrap();
    profile
}

/// Every stack of `profile` with a self amount in counter 0, as `frame;frame;… amount`
/// (outermost first), sorted; `frame` names one node.
pub fn stacks_named(profile: &Profile, frame: impl Fn(&Profile, &Node) -> String) -> Vec<String> {
    let mut stacks: Vec<String> = Vec::new();
    for (index, node) in profile.nodes().iter().enumerate() {
        let amount = node.value(0).amount;
        if amount == 0 {
            continue;
        }
        let mut names = Vec::new();
        let mut at = Some(index as NodeId);
        while let Some(id) = at {
            let node = &profile.nodes()[id as usize];
            names.push(frame(profile, node));
            at = node.parent;
        }
        names.reverse();
        stacks.push(format!("{} {amount}", names.join(";")));
    }
    stacks.sort();
    stacks
}
