//! The memory counters (`MEM_*`: IgProf's `igprof -mp`, pyigprof's memory profiler): what
//! their counts and amounts are, how amounts are written (bytes in IEC units), and how a
//! profile recorded them (every allocation, or by sampling bytes).
//!
//! | counter | count | amount | peak (`--value peak`) |
//! |---|---|---|---|
//! | `MEM_TOTAL` | allocations | bytes allocated | running maximum of the amount |
//! | `MEM_LIVE` | blocks still allocated | bytes still allocated when the profile was written | the node's own peak of live bytes |
//! | `MEM_MAX` | allocations | the largest single allocation (combined as a maximum) | the same |
//! | `MEM_LIVE_PEAK` | blocks | bytes live when the whole program's live bytes peaked | the same |
//!
//! pyigprof can record allocations by sampling bytes: an allocation of s bytes is
//! recorded with probability p = 1 − exp(−s/R) and weighted by 1/p, R being the mean
//! number of bytes allocated between two recorded allocations. Counts and bytes are then
//! unbiased estimates, and the number of recorded allocations behind an amount of b
//! bytes is about Poisson with mean b/R. Such a dump says R in its statistics
//! ([`RATE_KEY`]); R = 1, and dumps without it (IgProf's), record every allocation: their
//! figures are exact.

use crate::error::Error;
use crate::profile::Profile;

/// The statistic giving R, the mean number of bytes between recorded allocations
/// (`#pyigprof memory rate_bytes=R …`, docs/dump-format.md).
pub const RATE_KEY: &str = "memory.rate_bytes";

/// The statistic giving how many allocations pyigprof recorded.
pub const RECORDED_KEY: &str = "memory.sampled";

/// The statistic giving the bytes the program allocated, which pyigprof counts exactly in
/// each thread apart from its samples (`#pyigprof memory allocated_bytes=…`,
/// docs/dump-format.md): `MEM_TOTAL`'s exact total. (Its `live_bytes` and
/// `peak_live_bytes` are estimates from the samples.)
pub const ALLOCATED_KEY: &str = "memory.allocated_bytes";

/// Which memory counter a counter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `MEM_TOTAL`: every allocation.
    Total,
    /// `MEM_LIVE`: the blocks still allocated.
    Live,
    /// `MEM_MAX`: the largest single allocation.
    Max,
    /// `MEM_LIVE_PEAK`: the blocks live when the program's live bytes peaked.
    LivePeak,
    /// Any other `MEM_*` counter: calls and bytes.
    Other,
}

impl Kind {
    /// The kind of counter `name`; `None` when it is not a memory counter (its name does
    /// not start with `MEM_`).
    pub fn of(name: &str) -> Option<Kind> {
        let kind = match name.strip_prefix("MEM_")? {
            "TOTAL" => Kind::Total,
            "LIVE" => Kind::Live,
            "MAX" => Kind::Max,
            "LIVE_PEAK" => Kind::LivePeak,
            _ => Kind::Other,
        };
        Some(kind)
    }

    /// What the count is a number of, plural: `allocations`, `blocks` or `calls`.
    pub fn count_noun(self) -> &'static str {
        match self {
            Kind::Total | Kind::Max => "allocations",
            Kind::Live | Kind::LivePeak => "blocks",
            Kind::Other => "calls",
        }
    }

    /// The words after an amount of bytes saying what it is (`82.7 MiB live`): empty for
    /// [`Kind::Other`].
    pub fn amount_words(self) -> &'static str {
        match self {
            Kind::Total => "allocated",
            Kind::Live => "live",
            Kind::Max => "largest allocation",
            Kind::LivePeak => "live at the program's peak",
            Kind::Other => "",
        }
    }
}

/// The IEC units of [`format_bytes`], each 1024 times the one before.
const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// `bytes` as reports show it: below 1 KiB the exact number and `B` (`822 B`), else one
/// decimal in the largest IEC unit (steps of 1024) that keeps it below 1024 (`4.9 KiB`,
/// `82.7 MiB`, `1.2 GiB`). Negative amounts keep their sign.
pub fn format_bytes(bytes: i64) -> String {
    let sign = if bytes < 0 { "-" } else { "" };
    let magnitude = bytes.unsigned_abs();
    if magnitude < 1024 {
        return format!("{bytes} B");
    }
    let mut value = magnitude as f64;
    let mut unit = 0;
    // 1023.95 would be written 1024.0: the next unit then.
    while value >= 1023.95 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{sign}{value:.1} {}", UNITS[unit])
}

/// How a profile's memory counters were recorded, when by sampling bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// R, in bytes: the mean number of bytes allocated between two recorded
    /// allocations; of the dumps merged, the largest (a dump without [`RATE_KEY`] counts
    /// as 1: every allocation recorded).
    pub rate_bytes: f64,
    /// Whether the dumps merged were recorded at different rates.
    pub mixed: bool,
    /// How many allocations were recorded ([`RECORDED_KEY`], summed over the dumps);
    /// `None` when some dump does not say.
    pub recorded: Option<u64>,
    /// The bytes the program allocated, counted exactly apart from the samples
    /// ([`ALLOCATED_KEY`], summed over the dumps); `None` when some dump does not say.
    pub allocated: Option<u64>,
}

impl Sampling {
    /// How the dumps of `profile` recorded allocations: `None` when every dump recorded
    /// every allocation (R = 1, or no [`RATE_KEY`]: IgProf's dumps), so that its figures
    /// are exact.
    ///
    /// # Errors
    /// [`Error::Report`] naming the dump when its [`RATE_KEY`] is not a number of bytes
    /// from 1, or its [`RECORDED_KEY`] not a count.
    pub fn of(profile: &Profile) -> Result<Option<Sampling>, Error> {
        let mut rates: Vec<f64> = Vec::new();
        let mut recorded = Some(0u64);
        let mut allocated = Some(0u64);
        for source in &profile.sources {
            let value = |key: &str| source.statistic(key);
            let invalid = |key: &str, text: &str, expected: &str| Error::Report {
                subject: source.path.clone(),
                message: format!("{key} is {text:?}: expected {expected}"),
            };
            let rate = match value(RATE_KEY) {
                None => 1.0,
                Some(text) => match text.parse::<f64>() {
                    Ok(rate) if rate.is_finite() && rate >= 1.0 => rate,
                    _ => return Err(invalid(RATE_KEY, text, "a number of bytes from 1")),
                },
            };
            rates.push(rate);
            recorded = match (recorded, value(RECORDED_KEY)) {
                (Some(sum), Some(text)) => match text.parse::<u64>() {
                    Ok(count) => Some(sum.saturating_add(count)),
                    Err(_) => return Err(invalid(RECORDED_KEY, text, "a count")),
                },
                _ => None,
            };
            allocated = match (allocated, value(ALLOCATED_KEY)) {
                (Some(sum), Some(text)) => match text.parse::<u64>() {
                    Ok(bytes) => Some(sum.saturating_add(bytes)),
                    Err(_) => return Err(invalid(ALLOCATED_KEY, text, "a number of bytes")),
                },
                _ => None,
            };
        }
        let largest = rates.iter().copied().fold(1.0, f64::max);
        let smallest = rates.iter().copied().fold(largest, f64::min);
        Ok((largest > 1.0).then_some(Sampling {
            rate_bytes: largest,
            mixed: smallest < largest,
            recorded,
            allocated,
        }))
    }

    /// What a report says of figures so recorded: `estimates from sampling every 512.0
    /// KiB allocated on average (1,234 allocations recorded)`; for dumps merged at
    /// different rates, `… on average at most (the dumps merged were sampled at different
    /// rates)`.
    pub fn note(&self) -> String {
        let rate = format_bytes(self.rate_bytes.round() as i64);
        let mixed = if self.mixed {
            " at most (the dumps merged were sampled at different rates)"
        } else {
            ""
        };
        let recorded = self
            .recorded
            .map(|count| {
                format!(
                    " ({} {} recorded)",
                    super::thousands(&count.to_string(), ','),
                    pyigprof_pprof::plural(count, "allocation")
                )
            })
            .unwrap_or_default();
        format!("estimates from sampling every {rate} allocated on average{mixed}{recorded}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testing::load;

    #[test]
    fn bytes_in_iec_units() {
        let cases = [
            (0, "0 B"),
            (822, "822 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (5000, "4.9 KiB"),
            (1_048_575, "1.0 MiB"),
            (86_717_235, "82.7 MiB"),
            (1_288_490_189, "1.2 GiB"),
            (-67_108_864, "-64.0 MiB"),
            (-5, "-5 B"),
            (i64::MAX, "8.0 EiB"),
            (i64::MIN, "-8.0 EiB"),
        ];
        for (bytes, text) in cases {
            assert_eq!(format_bytes(bytes), text, "{bytes}");
        }
    }

    #[test]
    fn kinds_name_their_counts_and_amounts() {
        assert_eq!(Kind::of("PERF_TICKS"), None);
        assert_eq!(Kind::of("MEM_LIVE"), Some(Kind::Live));
        assert_eq!(Kind::of("MEM_LIVE_PEAK").unwrap().count_noun(), "blocks");
        assert_eq!(Kind::of("MEM_MAX").unwrap().count_noun(), "allocations");
        assert_eq!(Kind::of("MEM_FOO"), Some(Kind::Other));
        assert_eq!(Kind::of("MEM_TOTAL").unwrap().amount_words(), "allocated");
    }

    fn dump(statistics: &str) -> Profile {
        load(
            "m.txt",
            format!(
                "P=(HEX ID=1 N=(x) T=0.004000)\n\
                 C1 FN0=(F0=([pyigprof])+0 N=(#pyigprof stats samples=0))+0 V0=(PERF_TICKS):(0,0,0)\n\
                 C1 FN1=(F0+0 N=(#pyigprof memory {statistics}))+0\n\
                 C1 FN2=(F1=(/x.py)+1 N=(f))+0 V1=(MEM_TOTAL):(1,40,40)\n"
            )
            .as_bytes(),
        )
    }

    #[test]
    fn sampling_from_the_statistics() {
        let sampled = Sampling::of(&dump("rate_bytes=524288 sampled=1234"))
            .unwrap()
            .unwrap();
        assert_eq!(sampled.rate_bytes, 524288.0);
        assert_eq!(sampled.recorded, Some(1234));
        assert!(!sampled.mixed);
        assert_eq!(
            sampled.note(),
            "estimates from sampling every 512.0 KiB allocated on average (1,234 allocations recorded)"
        );
        // Rate 1, or no rate at all: exact.
        assert_eq!(Sampling::of(&dump("rate_bytes=1 sampled=3")).unwrap(), None);
        let igprof = load(
            "i.txt",
            b"P=(HEX ID=1 N=(x) T=0.01)\nC1 FN0=(F0=(/a)+0 N=(f))+0 V0=(MEM_TOTAL):(1,8,8)\n",
        );
        assert_eq!(Sampling::of(&igprof).unwrap(), None);
        // Merged with an exact dump: the largest rate, said to be mixed.
        let mut merged = dump("rate_bytes=4096");
        crate::parse::load_reader(
            &mut merged,
            "i.txt",
            &b"P=(HEX ID=2 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(f))+0 V0=(MEM_TOTAL):(1,8,8)\n"
                [..],
        )
        .unwrap();
        let sampling = Sampling::of(&merged).unwrap().unwrap();
        assert_eq!((sampling.rate_bytes, sampling.mixed), (4096.0, true));
        assert_eq!(sampling.recorded, None);
        assert_eq!(
            sampling.note(),
            "estimates from sampling every 4.0 KiB allocated on average at most (the dumps merged were sampled at different rates)"
        );
    }

    #[test]
    fn bad_rates_are_one_line_errors() {
        for (statistics, message) in [
            (
                "rate_bytes=fast",
                "pyigprof-analyse: m.txt: memory.rate_bytes is \"fast\": expected a number of bytes from 1",
            ),
            (
                "rate_bytes=0",
                "pyigprof-analyse: m.txt: memory.rate_bytes is \"0\": expected a number of bytes from 1",
            ),
            (
                "rate_bytes=NaN",
                "pyigprof-analyse: m.txt: memory.rate_bytes is \"NaN\": expected a number of bytes from 1",
            ),
            (
                "rate_bytes=512 sampled=-3",
                "pyigprof-analyse: m.txt: memory.sampled is \"-3\": expected a count",
            ),
        ] {
            let error = Sampling::of(&dump(statistics)).unwrap_err();
            assert_eq!(error.to_string(), message, "{statistics}");
        }
    }
}
