//! The reader never panics: a few thousand deterministic mutations of the test dumps
//! (truncations, byte flips, deleted, duplicated and swapped lines), plain and gzip, each
//! give either a profile (a consistent tree that the Python view and the `--top` report
//! accept) or one error line that names the file and, for a dump that decompresses, the
//! line at fault within the dump. (`cargo fuzz run parse` in igprof-analyse/fuzz explores
//! further; docs/analyser.md.)

use igprof_analyse::error::Error;
use igprof_analyse::parse::load_reader;
use igprof_analyse::report::top;
use igprof_analyse::{view, Profile};

/// The dumps of tests/data, decompressed; for the real profile, its first 400 lines.
fn seeds() -> Vec<Vec<u8>> {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut seeds: Vec<Vec<u8>> = [
        "recursive-hex.txt",
        "lines-hex.txt",
        "igprof-ls-decimal.txt",
    ]
    .iter()
    .map(|name| std::fs::read(data.join(name)).unwrap())
    .collect();
    let mixed = std::fs::read(data.join("mixed-base-1.gz")).unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&mixed[..]), &mut text)
        .unwrap();
    let head: Vec<&str> = text.lines().take(400).collect();
    seeds.push(format!("{}\n#pyigprof stats samples=1\n", head.join("\n")).into_bytes());
    seeds
}

fn gzip(text: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(text).unwrap();
    encoder.finish().unwrap()
}

/// xorshift64*: the same mutations on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One mutation of `seed`, by kind `round % 6`.
fn mutate(seed: &[u8], round: usize, rng: &mut Rng) -> Vec<u8> {
    let mut data = seed.to_vec();
    let mut lines: Vec<Vec<u8>> = seed
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    match round % 6 {
        0 => data.truncate(rng.below(data.len() + 1)),
        1 => {
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(data.len());
                data[at] ^= 1 << rng.below(8);
            }
        }
        2 => {
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(data.len());
                data[at] = b"C()+=: VFN0123456789abcdef#%\n"[rng.below(29)];
            }
        }
        3 => {
            let (a, b) = (rng.below(lines.len()), rng.below(lines.len()));
            lines.swap(a, b);
            data = lines.concat();
        }
        4 => {
            lines.remove(rng.below(lines.len()));
            data = lines.concat();
        }
        _ => {
            let at = rng.below(lines.len());
            let line = lines[rng.below(lines.len())].clone();
            lines.insert(at, line);
            data = lines.concat();
        }
    }
    data
}

#[test]
fn mutated_dumps_give_a_profile_or_an_error_naming_the_line() {
    let seeds = seeds();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut accepted, mut rejected) = (0, 0);
    for round in 0..3000 {
        let seed = &seeds[round % seeds.len()];
        let plain = mutate(seed, round / seeds.len(), &mut rng);
        let lines = plain.split(|&b| b == b'\n').count() as u64;
        // Every third input compressed: the mutation is then inside the dump.
        let compressed = round % 3 == 0;
        let input = if compressed {
            gzip(&plain)
        } else {
            plain.clone()
        };
        let mut profile = Profile::new();
        match load_reader(&mut profile, "m.txt", &input[..]) {
            Ok(()) => {
                accepted += 1;
                for (index, node) in profile.nodes().iter().enumerate() {
                    assert!(node.parent.is_none_or(|parent| (parent as usize) < index));
                    assert!((node.function as usize) < profile.functions().len());
                }
                let shown = view::python(&profile);
                assert_eq!(
                    shown.total(0).amount,
                    profile.total(0).amount,
                    "{:?}",
                    String::from_utf8_lossy(&plain)
                );
                // A report is computed or refused with an error, never a panic.
                let _ = top::compute(&shown, &top::Options::default());
            }
            Err(error) => {
                rejected += 1;
                let text = error.to_string();
                assert!(text.starts_with("pyigprof-analyse: m.txt"), "{text}");
                assert!(!text.contains('\n'), "{text}");
                match error {
                    Error::Syntax { line, .. } => {
                        assert!((1..=lines).contains(&line), "{text} ({lines} lines)")
                    }
                    Error::Empty { .. } => assert!(plain.is_empty(), "{text}"),
                    other => panic!("unexpected error for a dump read from memory: {other}"),
                }
            }
        }
    }
    // Both outcomes are exercised.
    assert!(
        accepted > 300 && rejected > 300,
        "{accepted} accepted, {rejected} rejected"
    );
}
