//! Reading profiles with a progress bar.
//!
//! Large dumps (hundreds of megabytes) take seconds to read. [`read_profiles`] reads
//! like [`crate::parse::read_profiles`] and, once reading has taken longer than
//! [`DELAY`] (or the number of seconds in the environment variable [`DELAY_VARIABLE`]),
//! shows a bar on stderr with the bytes read of the input files (as stored,
//! i.e. compressed bytes for gzip files) out of their total size, the rate and the time
//! left. Nothing is drawn when stderr is not a terminal (a pipe, a file, a CI log): the
//! `indicatif` crate hides its bars there. The bar is erased when reading ends.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::Error;
use crate::parse::load_reader;
use crate::profile::Profile;

/// How long reading runs before the bar appears, so that short analyses print nothing.
pub const DELAY: Duration = Duration::from_millis(500);

/// The environment variable that replaces [`DELAY`]: a number of seconds (`0`: show the
/// bar at once). Values that are not a number from 0 are ignored.
pub const DELAY_VARIABLE: &str = "PYIGPROF_ANALYSE_PROGRESS_DELAY";

/// [`DELAY`], or what [`DELAY_VARIABLE`] says.
fn delay() -> Duration {
    std::env::var(DELAY_VARIABLE)
        .ok()
        .and_then(|text| text.trim().parse::<f64>().ok())
        .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
        .unwrap_or(DELAY)
}

/// Reads every dump in `paths`, in order, into one profile, as
/// [`crate::parse::read_profiles`] does, with a progress bar on a terminal. With
/// `accept_cut_short`, a dump that ends before the call tree it announces is read as far
/// as it goes ([`crate::profile::Source::cut_short`] says so) instead of refused.
///
/// # Errors
/// See [`crate::parse::read_profiles`].
pub fn read_profiles<P: AsRef<Path>>(
    paths: &[P],
    accept_cut_short: bool,
) -> Result<Profile, Error> {
    let total: u64 = paths
        .iter()
        .filter_map(|path| path.as_ref().metadata().ok())
        .map(|metadata| metadata.len())
        .sum();
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let mut counting = Counting {
        bar: bar.clone(),
        started: Instant::now(),
        delay: delay(),
        shown: false,
    };
    let mut profile = Profile::new();
    let result = paths.iter().try_for_each(|path| {
        let path = path.as_ref();
        let name = path.display().to_string();
        bar.set_prefix(format!("reading {name}"));
        let file = File::open(path).map_err(|error| Error::Io {
            file: name.clone(),
            detail: error.to_string(),
        })?;
        load_reader(
            &mut profile,
            &name,
            Reader {
                inner: file,
                counting: &mut counting,
            },
        )
    });
    bar.finish_and_clear();
    result?;
    if !accept_cut_short {
        crate::parse::whole(&profile)?;
    }
    Ok(profile)
}

/// Counts the bytes read into the bar, and shows the bar once `delay` has passed.
struct Counting {
    bar: ProgressBar,
    started: Instant,
    delay: Duration,
    shown: bool,
}

/// A reader that reports what it reads to a [`Counting`].
struct Reader<'a, R> {
    inner: R,
    counting: &'a mut Counting,
}

impl<R: Read> Read for Reader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let count = self.inner.read(buf)?;
        let counting = &mut *self.counting;
        counting.bar.inc(count as u64);
        if !counting.shown && counting.started.elapsed() >= counting.delay {
            counting.shown = true;
            // Hidden again by indicatif itself when stderr is not a terminal.
            counting
                .bar
                .set_draw_target(ProgressDrawTarget::stderr_with_hz(4));
            counting.bar.tick();
        }
        Ok(count)
    }
}
