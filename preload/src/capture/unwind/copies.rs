//! Code that the program copies at run time from a template in one of its objects, and
//! how to step out of a frame of a copy: the copy has no CFI of its own (it lives in an
//! anonymous mapping) and the template may have none either, but the template says exactly
//! what the frame is.
//!
//! The case this is for: CPython's perf trampolines (3.12+, `PYTHONPERFSUPPORT=1`,
//! `-X perf`, `-X perf_jit`, `sys.activate_stack_trampoline`; `Python/perf_trampoline.c`),
//! which copy the bytes `_Py_trampoline_func_start` … `_Py_trampoline_func_end`
//! (`Python/asm_trampoline.S`) once per code object into executable arenas and call the
//! evaluator through the copy, so that `perf` sees one symbol per Python function. Every
//! Python call then has a frame of a copy between two evaluator frames, and without this
//! the walk stopped there (2.6–3.4 % complete stacks). The templates, x86-64 (an
//! `endbr64` first where CPython was built with CET):
//!
//! | CPython | template | frame at the return address |
//! |---|---|---|
//! | 3.12, 3.13 | `sub $8,%rsp; call *%rcx; add $8,%rsp; ret` | CFA = RSP + 16, RBP unchanged |
//! | 3.14+ | `push %rbp; mov %rsp,%rbp; call *%rcx; pop %rbp; ret` | CFA = RSP + 16, RBP saved at RSP |
//!
//! A frame is in a copy when the bytes before and after its return address — or, for an
//! interrupted instruction (a sample can land on any of the copy's own instructions, each
//! with its own frame), around that instruction — are the template's (read through the
//! fault-recovering loads); it is then recorded at the template's own address, so that it is named as the template (the interpreter's
//! plumbing, which the Python view folds into its caller) rather than `<unmapped code>`,
//! and one function for every copy. Async-signal-safe: [`lookup`] reads a published
//! [`Template`] and the program's code.

use std::sync::atomic::{AtomicPtr, Ordering};

use super::cfi::Rule;
use super::modules::Snapshot;

/// Longest template [`Template`] holds.
const MAX_LEN: usize = 32;
/// Most [`Template::steps`].
const MAX_STEPS: usize = 4;

/// A template that the program copies, and how to step out of a frame of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Template {
    /// The template's run-time address (in its object).
    pub at: u64,
    /// Its symbol, which names the frames of its copies.
    pub name: &'static str,
    /// Its bytes: `bytes[..len]`.
    bytes: [u8; MAX_LEN],
    len: usize,
    /// Offset of the return address of its one call (the instruction after the call).
    return_offset: u64,
    /// How to step out of a copy's frame whose instruction pointer is at an offset
    /// (bytes) into it: `steps[i].1` holds from offset `steps[i].0` to the next entry's,
    /// offsets rising from 0. `steps[..nsteps]` are used.
    steps: [(u8, Rule); MAX_STEPS],
    nsteps: usize,
}

impl Template {
    /// Recognises the code `bytes` at run-time address `at`, the symbol `name`, as one of
    /// the perf-trampoline templates in the table above; `None` for any other code.
    pub fn decode(bytes: &[u8], at: u64, name: &'static str) -> Option<Template> {
        const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
        // The return address alone on the stack: at the entry and at the final `ret`.
        const ENTRY: Rule = Rule::OffsetSp { sp_offset_by_8: 1 };
        /// A template's code before and after its call, and its steps (offsets into the
        /// code after any `endbr64`).
        type Shape = (&'static [u8], &'static [u8], &'static [(u8, Rule)]);
        const SHAPES: [Shape; 2] = [
            (
                // 0: sub $8,%rsp; 4: call *%rcx | 6: add $8,%rsp; 10: ret
                &[0x48, 0x83, 0xec, 0x08, 0xff, 0xd1],
                &[0x48, 0x83, 0xc4, 0x08, 0xc3],
                &[
                    (0, ENTRY),
                    (4, Rule::OffsetSp { sp_offset_by_8: 2 }),
                    (10, ENTRY),
                ],
            ),
            (
                // 0: push %rbp; 1: mov %rsp,%rbp; 4: call *%rcx | 6: pop %rbp; 7: ret
                &[0x55, 0x48, 0x89, 0xe5, 0xff, 0xd1],
                &[0x5d, 0xc3],
                &[
                    (0, ENTRY),
                    (
                        1,
                        Rule::OffsetSpAndRestoreBp {
                            sp_offset_by_8: 2,
                            bp_offset_by_8: 0,
                        },
                    ),
                    (7, ENTRY),
                ],
            ),
        ];
        let prefix = if bytes.starts_with(&ENDBR64) { 4 } else { 0 };
        let body = &bytes[prefix..];
        let &(before, _, body_steps) = SHAPES.iter().find(|(before, after, _)| {
            body.len() == before.len() + after.len()
                && body.starts_with(before)
                && body.ends_with(after)
        })?;
        let mut copy = [0u8; MAX_LEN];
        copy[..bytes.len()].copy_from_slice(bytes);
        // An `endbr64` first is the entry's too (offset 0 stays ENTRY).
        let mut steps = [(0, ENTRY); MAX_STEPS];
        for (i, &(offset, rule)) in body_steps.iter().enumerate() {
            steps[i] = (
                if offset == 0 {
                    0
                } else {
                    offset + prefix as u8
                },
                rule,
            );
        }
        Some(Template {
            at,
            name,
            bytes: copy,
            len: bytes.len(),
            return_offset: (prefix + before.len()) as u64,
            steps,
            nsteps: body_steps.len(),
        })
    }

    /// The rule that steps out of a copy's frame whose instruction pointer is `offset`
    /// bytes into it.
    fn rule_at(&self, offset: u64) -> Rule {
        self.steps[..self.nsteps]
            .iter()
            .rev()
            .find(|&&(from, _)| u64::from(from) <= offset)
            .map_or(Rule::NoCfi, |&(_, rule)| rule)
    }

    /// Whether the code at `start` is a copy of this template.
    fn is_copy(&self, start: u64) -> bool {
        let mut code = [0u8; MAX_LEN];
        crate::capture::probe::copy(start, &mut code[..self.len])
            && code[..self.len] == self.bytes[..self.len]
    }

    /// Whether the code around `ret`, a return address outside every object, is a copy
    /// of this template: the template's address for `ret` and the rule at it if so.
    fn copy_at(&self, ret: u64) -> Option<(u64, Rule)> {
        let start = ret.checked_sub(self.return_offset)?;
        self.is_copy(start).then_some((
            self.at + self.return_offset,
            self.rule_at(self.return_offset),
        ))
    }

    /// Whether `pc`, an interrupted instruction outside every object, lies in a copy of
    /// this template: the template's address for `pc` and the rule at it if so. Tries each
    /// offset (at most the template's length in reads of it).
    fn copy_containing(&self, pc: u64) -> Option<(u64, Rule)> {
        (0..self.len as u64).find_map(|offset| {
            let start = pc.checked_sub(offset)?;
            self.is_copy(start)
                .then_some((self.at + offset, self.rule_at(offset)))
        })
    }
}

/// The published template (null: none).
static TEMPLATE: AtomicPtr<Template> = AtomicPtr::new(std::ptr::null_mut());

/// Publishes `template` for [`lookup`]. Not async-signal-safe (allocates once); a template
/// published earlier stays readable (leaked: a handler may be reading it).
pub fn register(template: Template) {
    let current = TEMPLATE.load(Ordering::Acquire);
    // SAFETY: published templates are leaked boxes, never freed.
    if unsafe { current.as_ref() } == Some(&template) {
        return;
    }
    TEMPLATE.store(Box::into_raw(Box::new(template)), Ordering::Release);
}

/// The registered template whose bytes hold `pc` (a frame recorded at the template's
/// address by [`lookup`]): its address and symbol, which name the frame where the object's
/// symbol table does not (an assembler label without type or size). Not for the handler
/// (it may be, but has no need).
pub fn covering(pc: u64) -> Option<(u64, &'static str)> {
    // SAFETY: published templates are leaked boxes, never freed.
    let template = unsafe { TEMPLATE.load(Ordering::Acquire).as_ref() }?;
    (template.at <= pc && pc < template.at + template.len as u64)
        .then_some((template.at, template.name))
}

/// For a frame whose return address is `ret` (its lookup address is `ret - 1`): when
/// `ret` lies outside every object's code and in a copy of the registered template, the
/// return address it stands for in the template, and the rule that steps out of it.
/// Async-signal-safe.
#[inline]
pub fn lookup(snapshot: &Snapshot, ret: u64) -> Option<(u64, Rule)> {
    // SAFETY: published templates are leaked boxes, never freed.
    let template = unsafe { TEMPLATE.load(Ordering::Acquire).as_ref() }?;
    if snapshot.in_code(ret) {
        return None;
    }
    template.copy_at(ret)
}

/// For a frame whose instruction pointer `pc` was interrupted (a thread's innermost frame,
/// or the frame a signal interrupted): when `pc` lies outside every object's code and in a
/// copy of the registered template, the address it stands for in the template, and the
/// rule that steps out of the frame there (the copy's own instructions move the stack
/// pointer and the frame pointer: a sample can land on any of them). Async-signal-safe.
#[inline]
pub fn lookup_interrupted(snapshot: &Snapshot, pc: u64) -> Option<(u64, Rule)> {
    // SAFETY: published templates are leaked boxes, never freed.
    let template = unsafe { TEMPLATE.load(Ordering::Acquire).as_ref() }?;
    if snapshot.in_code(pc) {
        return None;
    }
    template.copy_containing(pc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpythons_templates_are_recognised_and_others_are_not() {
        // pyenv's 3.12 (libpython3.12.so, no CET).
        let t312 = [
            0x48, 0x83, 0xec, 0x08, 0xff, 0xd1, 0x48, 0x83, 0xc4, 0x08, 0xc3,
        ];
        let t = Template::decode(&t312, 0x1000, "t").unwrap();
        assert_eq!(t.return_offset, 6);
        // The frame at each instruction: sub (entry), call, add (the return address), ret.
        let sp = |n| Rule::OffsetSp { sp_offset_by_8: n };
        let at_312: Vec<Rule> = [0, 4, 6, 10].iter().map(|&o| t.rule_at(o)).collect();
        assert_eq!(at_312, [sp(1), sp(2), sp(2), sp(1)]);
        // Debian's sid 3.14 (CET: endbr64 first).
        let t314 = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0xff, 0xd1, 0x5d, 0xc3,
        ];
        let t = Template::decode(&t314, 0x2000, "t").unwrap();
        assert_eq!(t.return_offset, 10);
        let saved_bp = Rule::OffsetSpAndRestoreBp {
            sp_offset_by_8: 2,
            bp_offset_by_8: 0,
        };
        // endbr64 and push (entry), mov and call and pop (RBP saved at RSP), ret.
        let at_314: Vec<Rule> = [0, 4, 5, 8, 10, 11].iter().map(|&o| t.rule_at(o)).collect();
        assert_eq!(at_314, [sp(1), sp(1), saved_bp, saved_bp, saved_bp, sp(1)]);
        // A copy in memory is recognised from its return address, and stands for the
        // template's.
        let copy = Box::new(t314);
        let start = copy.as_ptr() as u64;
        assert_eq!(t.copy_at(start + 10), Some((0x2000 + 10, saved_bp)));
        assert_eq!(t.copy_at(start + 11), None);
        // An interrupted instruction anywhere in a copy is recognised too, with the rule
        // of its offset; code after the copy is not.
        for (offset, rule) in [(0, sp(1)), (5, saved_bp), (8, saved_bp), (11, sp(1))] {
            assert_eq!(
                t.copy_containing(start + offset),
                Some((0x2000 + offset, rule))
            );
        }
        let mut two = [0x90u8; 40];
        two[8..20].copy_from_slice(&t314);
        let two = Box::new(two);
        let base = two.as_ptr() as u64;
        assert_eq!(t.copy_containing(base + 8 + 11), Some((0x2000 + 11, sp(1))));
        assert_eq!(t.copy_containing(base + 8 + 12), None);
        assert_eq!(t.copy_containing(base + 7), None);
        // Other code, and a template with more after its call, are not templates.
        assert!(Template::decode(&t312[..10], 0, "t").is_none());
        assert!(Template::decode(
            &[0x55, 0x48, 0x89, 0xe5, 0xff, 0xd1, 0x5d, 0x90, 0xc3],
            0,
            "t"
        )
        .is_none());
    }
}
