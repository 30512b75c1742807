//! Fuzz target: any bytes given to the dump reader, as a file of its own and after a
//! valid dump (merging), give a profile or one error line naming the file; the Python
//! view and the `--top` report of what is accepted never panic either.
#![no_main]

use igprof_analyse::parse::load_reader;
use igprof_analyse::report::top;
use igprof_analyse::{view, Profile};
use libfuzzer_sys::fuzz_target;

/// A valid dump the input is merged into.
const BASE: &[u8] = b"P=(HEX ID=1 N=(python3 x.py) T=0.004000)
C1 FN0=(F0=(/x.py)+1 N=(<module>))+2 V0=(PERF_TICKS):(1,1,1)
";

fuzz_target!(|data: &[u8]| {
    let mut alone = Profile::new();
    check(load_reader(&mut alone, "fuzz.txt", data), &alone);
    let mut merged = Profile::new();
    load_reader(&mut merged, "base.txt", BASE).expect("the base dump is valid");
    check(load_reader(&mut merged, "fuzz.txt", data), &merged);
});

fn check(result: Result<(), igprof_analyse::Error>, profile: &Profile) {
    match result {
        Ok(()) => {
            for (index, node) in profile.nodes().iter().enumerate() {
                assert!(node.parent.is_none_or(|parent| (parent as usize) < index));
            }
            let shown = view::python(profile);
            assert_eq!(shown.total(0).amount, profile.total(0).amount);
            let _ = top::compute(&shown, &top::Options::default());
        }
        Err(error) => {
            let text = error.to_string();
            assert!(text.starts_with("pyigprof-analyse: fuzz.txt"), "{text}");
            assert!(!text.contains('\n'), "{text}");
        }
    }
}
