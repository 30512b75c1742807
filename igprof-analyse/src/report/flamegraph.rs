//! `--flamegraph FILE.svg`: an interactive flame graph (SVG with JavaScript for zoom
//! and search) of the folded stacks of [`super::collapsed`], drawn by the `inferno`
//! crate (a Rust port of Brendan Gregg's `flamegraph.pl`).
//!
//! The width of a frame is its cumulative amount: ticks of T seconds for `PERF_TICKS`
//! (the tooltip gives ticks and the share of the total), bytes for the memory counters
//! (`MEM_*`: the tooltip says `bytes`), events for the sampled event counters
//! (`PERF_PAGE_FAULTS`, …: the tooltip says `events`), the counter's amount otherwise.
//! Colours are chosen from each function's name, so the same function has the same
//! colour in every graph.

use std::io::{self, Write};

use inferno::flamegraph;

use super::collapsed::{self, Collapsed};
use super::{header_line, Options, Unit, VIEW_NOTE};
use crate::error::Error;
use crate::profile::Profile;

/// What is drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct FlameGraph {
    /// The stacks and the counter.
    pub stacks: Collapsed,
}

/// Computes the flame graph of `options.counter` in `profile`.
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`, or has no
/// positive amount of it to draw.
pub fn compute(profile: &Profile, options: &Options) -> Result<FlameGraph, Error> {
    let stacks = collapsed::compute(profile, options)?;
    if stacks.stacks.is_empty() {
        return Err(Error::Report {
            subject: super::subject(profile),
            message: format!("no samples of {} to draw a flame graph of", options.counter),
        });
    }
    Ok(FlameGraph { stacks })
}

/// Writes `graph` as SVG. The title is the program's header line
/// ([`header_line`]); the subtitle gives the counter's total, and notes the Python view
/// when frames were hidden. Both are shortened to fit the image's width
/// ([`fit_width`]): the title in its middle (`pyigprof-analyse: /long/pa…py (pid 42)`),
/// the subtitle at its end.
///
/// # Errors
/// Those of `out`, and inferno's if it rejects the stacks.
pub fn write(profile: &Profile, graph: &FlameGraph, out: &mut dyn Write) -> io::Result<()> {
    let measure = &graph.stacks.measure;
    let mut options = flamegraph::Options::default();
    let width = options.image_width.unwrap_or(IMAGE_WIDTH);
    // inferno draws the title 5 px larger than the other text, the subtitle as the rest.
    let title_chars = fit_width(width, options.font_size + 5, options.font_width);
    let subtitle_chars = fit_width(width, options.font_size, options.font_width);
    options.title = elide_middle(&header_line(profile), title_chars);
    let mut subtitle = measure.total_line();
    if profile.hidden_nodes > 0 {
        subtitle.push_str(". ");
        subtitle.push_str(VIEW_NOTE);
    }
    options.subtitle = Some(elide_end(&subtitle, subtitle_chars));
    options.count_name = match measure.unit {
        // inferno writes `(<count> <count_name>, <share>)` for any count: `(1 × 4.000 ms
        // tick, …)` reads right for one tick and for several.
        Unit::Ticks => format!("× {:.3} ms tick", measure.tick_period * 1000.0),
        Unit::Bytes => "bytes".to_string(),
        Unit::Events => "events".to_string(),
        Unit::Amount => measure.counter.clone(),
    };
    options.hash = true;
    // inferno needs the lines sorted.
    let mut lines: Vec<String> = graph
        .stacks
        .stacks
        .iter()
        .map(|(stack, amount)| format!("{stack} {amount}"))
        .collect();
    lines.sort_unstable();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
}

/// inferno's image width when none is set (its `DEFAULT_IMAGE_WIDTH`, which it does not
/// export).
pub const IMAGE_WIDTH: usize = 1200;

/// How many characters of text drawn at `font_size` px fit across an image `width` px
/// wide, with inferno's estimate of a character's width (`font_width` × `font_size`,
/// 0.59 em by default) and its 10 px margins.
pub fn fit_width(width: usize, font_size: usize, font_width: f64) -> usize {
    let usable = width.saturating_sub(2 * 10) as f64;
    let per_char = font_size as f64 * font_width;
    if per_char > 0.0 {
        (usable / per_char).floor().max(1.0) as usize
    } else {
        usize::MAX
    }
}

/// `text` if it has at most `max` characters, else its start and end with `…` between,
/// `max` characters in all.
pub fn elide_middle(text: &str, max: usize) -> String {
    let length = text.chars().count();
    if length <= max {
        return text.to_string();
    }
    let keep = max.saturating_sub(1);
    let tail = keep / 2;
    let head = keep - tail;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(length - tail).collect();
    format!("{start}…{end}")
}

/// `text` if it has at most `max` characters, else its first `max - 1` and `…`.
pub fn elide_end(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let start: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{start}…")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::load;

    #[test]
    fn elision_keeps_both_ends() {
        assert_eq!(elide_middle("abcdefghij", 10), "abcdefghij");
        assert_eq!(elide_middle("abcdefghij", 5), "ab…ij");
        assert_eq!(elide_middle("abcdefghij", 6), "abc…ij");
        assert_eq!(elide_middle("éèêëē", 3), "é…ē");
        assert_eq!(elide_end("abcdefghij", 4), "abc…");
        assert_eq!(elide_end("abc", 4), "abc");
        assert_eq!(fit_width(1200, 17, 0.59), 117);
        assert_eq!(fit_width(1200, 12, 0.59), 166);
        assert_eq!(fit_width(10, 12, 0.59), 1);
    }

    /// The `<text>` with id `id` of `svg`.
    fn text_of(svg: &str, id: &str) -> String {
        let options = roxmltree::ParsingOptions {
            allow_dtd: true,
            ..roxmltree::ParsingOptions::default()
        };
        let document = roxmltree::Document::parse_with_options(svg, options).unwrap();
        let node = document
            .descendants()
            .find(|node| node.has_tag_name("text") && node.attribute("id") == Some(id))
            .unwrap_or_else(|| panic!("no text {id}"));
        node.text().unwrap_or("").to_string()
    }

    #[test]
    fn title_and_subtitle_fit_the_image() {
        let long = format!(
            "/opt/venvs/analysis/bin/python3 -X importtime /home/user/projects/{}/run.py --input /data/{}.csv",
            "deeply/nested/".repeat(8),
            "x".repeat(60)
        );
        let dump = format!(
            "P=(HEX ID=2a N=({long}) T=0.004000)
C1 FN0=(F0=(/work/run.py)+1 N=(<module>))+2 V0=(PERF_TICKS):(3,5,5)
C2 FN1=(F1=(/usr/lib/libpython3.11.so.1.0)+10 N=(PyObject_Vectorcall))+1 V0:(1,1,1)
"
        );
        let profile = crate::view::python(&load(dump.as_bytes()));
        assert!(profile.hidden_nodes > 0);
        let graph = compute(&profile, &Options::default()).unwrap();
        let mut svg = Vec::new();
        write(&profile, &graph, &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        let title = text_of(&svg, "title");
        let subtitle = text_of(&svg, "subtitle");
        // inferno's defaults: 1200 px wide, text 12 px and the title 17 px, 0.59 em a
        // character.
        assert!(svg.contains("width=\"1200\""));
        let drawn = |text: &str, size: f64| text.chars().count() as f64 * size * 0.59;
        assert!(drawn(&title, 17.0) <= 1180.0, "{title}");
        assert!(drawn(&subtitle, 12.0) <= 1180.0, "{subtitle}");
        // The title keeps what it is about at both ends: the file and the process id.
        assert!(
            title.starts_with("pyigprof-analyse: t.txt: /opt/venvs/"),
            "{title}"
        );
        assert!(title.ends_with(".csv (pid 42)"), "{title}");
        assert!(title.contains('…'), "{title}");
        assert!(
            subtitle
                .starts_with("PERF_TICKS: 4 samples, 6 ticks of 4.000 ms = 0.024 s; a 10 % share is 0.9-58.3 % (95 %). Python view"),
            "{subtitle}"
        );

        // A short title is left whole.
        let profile = load(
            b"P=(HEX ID=2a N=(python3 x.py) T=0.004000)
C1 FN0=(F0=(/work/x.py)+1 N=(<module>))+2 V0=(PERF_TICKS):(3,5,5)
",
        );
        let graph = compute(&profile, &Options::default()).unwrap();
        let mut svg = Vec::new();
        write(&profile, &graph, &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert_eq!(
            text_of(&svg, "title"),
            "pyigprof-analyse: t.txt: python3 x.py (pid 42)"
        );
    }
}
