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
//! A frame is in a copy when the bytes before and after its return address are the
//! template's (read through the fault-recovering loads); it is then recorded at the
//! template's own address, so that it is named as the template (the interpreter's
//! plumbing, which the Python view folds into its caller) rather than `<unmapped code>`,
//! and one function for every copy. Async-signal-safe: [`lookup`] reads a published
//! [`Template`] and the program's code.

use std::sync::atomic::{AtomicPtr, Ordering};

use super::cfi::Rule;
use super::modules::Snapshot;

/// Longest template [`Template`] holds.
const MAX_LEN: usize = 32;

/// A template that the program copies, and the frame of a copy at its return address.
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
    /// How to step out of a copy's frame at that return address.
    rule: Rule,
}

impl Template {
    /// Recognises the code `bytes` at run-time address `at`, the symbol `name`, as one of
    /// the perf-trampoline templates in the table above; `None` for any other code.
    pub fn decode(bytes: &[u8], at: u64, name: &'static str) -> Option<Template> {
        const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
        const SHAPES: [(&[u8], &[u8], Rule); 2] = [
            (
                // sub $8,%rsp; call *%rcx | add $8,%rsp; ret
                &[0x48, 0x83, 0xec, 0x08, 0xff, 0xd1],
                &[0x48, 0x83, 0xc4, 0x08, 0xc3],
                Rule::OffsetSp { sp_offset_by_8: 2 },
            ),
            (
                // push %rbp; mov %rsp,%rbp; call *%rcx | pop %rbp; ret
                &[0x55, 0x48, 0x89, 0xe5, 0xff, 0xd1],
                &[0x5d, 0xc3],
                Rule::OffsetSpAndRestoreBp {
                    sp_offset_by_8: 2,
                    bp_offset_by_8: 0,
                },
            ),
        ];
        let prefix = if bytes.starts_with(&ENDBR64) { 4 } else { 0 };
        let body = &bytes[prefix..];
        let &(before, _, rule) = SHAPES.iter().find(|(before, after, _)| {
            body.len() == before.len() + after.len()
                && body.starts_with(before)
                && body.ends_with(after)
        })?;
        let mut copy = [0u8; MAX_LEN];
        copy[..bytes.len()].copy_from_slice(bytes);
        Some(Template {
            at,
            name,
            bytes: copy,
            len: bytes.len(),
            return_offset: (prefix + before.len()) as u64,
            rule,
        })
    }

    /// Whether the code around `ret`, a return address outside every object, is a copy
    /// of this template: the template's address for `ret` if so.
    fn copy_at(&self, ret: u64) -> Option<u64> {
        let start = ret.checked_sub(self.return_offset)?;
        let mut code = [0u8; MAX_LEN];
        (crate::capture::probe::copy(start, &mut code[..self.len])
            && code[..self.len] == self.bytes[..self.len])
            .then_some(self.at + self.return_offset)
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
    template.copy_at(ret).map(|at| (at, template.rule))
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
        assert_eq!(
            (t.return_offset, t.rule),
            (6, Rule::OffsetSp { sp_offset_by_8: 2 })
        );
        // Debian's sid 3.14 (CET: endbr64 first).
        let t314 = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0xff, 0xd1, 0x5d, 0xc3,
        ];
        let t = Template::decode(&t314, 0x2000, "t").unwrap();
        assert_eq!(t.return_offset, 10);
        assert_eq!(
            t.rule,
            Rule::OffsetSpAndRestoreBp {
                sp_offset_by_8: 2,
                bp_offset_by_8: 0
            }
        );
        // A copy in memory is recognised from its return address, and stands for the
        // template's.
        let copy = Box::new(t314);
        let ret = copy.as_ptr() as u64 + 10;
        assert_eq!(t.copy_at(ret), Some(0x2000 + 10));
        assert_eq!(t.copy_at(ret + 1), None);
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
