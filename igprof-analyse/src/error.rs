//! Errors of the analyser.
//!
//! Every error displays as exactly one line that starts with `pyigprof-analyse: ` and
//! names the file (and, for syntax errors, the line) at fault, so that the binary can
//! print it on stderr as is and exit with status 2.

use std::fmt;

/// The prefix of every message, the name of the program.
pub const PROGRAM: &str = "pyigprof-analyse";

/// What went wrong while reading profiles or computing a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A line does not follow the dump format (docs/dump-format.md, IgProf
    /// doc/dump-format). Displays as
    /// `pyigprof-analyse: <file>:<line>: expected <expected>, found <found>`.
    Syntax {
        /// The profile's path as given on the command line.
        file: String,
        /// The 1-based line number.
        line: u64,
        /// What the format requires at that point, e.g. `a depth from 1 to 3`.
        expected: String,
        /// What the line has instead: a quoted excerpt, or `end of line`.
        found: String,
    },
    /// The file (or its decompressed content) has no bytes at all.
    /// Displays as `pyigprof-analyse: <file>: empty file, expected a profile starting with P=(`.
    Empty {
        /// The profile's path.
        file: String,
    },
    /// The file starts with the gzip magic bytes (1f 8b) but does not decompress,
    /// e.g. because it is truncated. Displays as
    /// `pyigprof-analyse: <file>: not a valid gzip stream: <detail>`.
    Gzip {
        /// The profile's path.
        file: String,
        /// The decompressor's explanation.
        detail: String,
    },
    /// A pyigprof dump that ends before the call tree its statistics announce (a line
    /// boundary where its writing stopped: a full disk, a process killed while writing).
    /// Displays as `pyigprof-analyse: <file>: cut short: <what>; …`.
    CutShort {
        /// The profile's path.
        file: String,
        /// What was read against what was announced.
        what: crate::profile::CutShort,
    },
    /// The file cannot be opened or read. Displays as
    /// `pyigprof-analyse: <file>: cannot read: <detail>`.
    Io {
        /// The profile's path.
        file: String,
        /// The operating system's explanation.
        detail: String,
    },
    /// An output file (`--flamegraph`, `--speedscope`, `--sqlite`, `--callgrind`,
    /// `--pprof`) cannot be written. Displays as
    /// `pyigprof-analyse: <file>: cannot write: <detail>`.
    Write {
        /// The output file's path.
        file: String,
        /// The operating system's explanation.
        detail: String,
    },
    /// A command-line option has a value that cannot be used, e.g. an invalid regular
    /// expression. Displays as `pyigprof-analyse: <option>: <message>`.
    Option {
        /// The option, e.g. `--hide`.
        option: String,
        /// One line of explanation.
        message: String,
    },
    /// The profiles are fine but the requested report cannot be computed from them
    /// (e.g. an unknown counter). Displays as `pyigprof-analyse: <subject>: <message>`.
    Report {
        /// The files concerned, comma separated.
        subject: String,
        /// One line of explanation.
        message: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Syntax {
                file,
                line,
                expected,
                found,
            } => {
                write!(
                    f,
                    "{PROGRAM}: {file}:{line}: expected {expected}, found {found}"
                )
            }
            Error::Empty { file } => {
                write!(
                    f,
                    "{PROGRAM}: {file}: empty file, expected a profile starting with P=("
                )
            }
            Error::Gzip { file, detail } => {
                write!(f, "{PROGRAM}: {file}: not a valid gzip stream: {detail}")
            }
            Error::CutShort { file, what } => write!(
                f,
                "{PROGRAM}: {file}: cut short: {what}; its writing stopped before the end \
                 (--read-cut-short reads what there is)"
            ),
            Error::Io { file, detail } => write!(f, "{PROGRAM}: {file}: cannot read: {detail}"),
            Error::Write { file, detail } => {
                write!(f, "{PROGRAM}: {file}: cannot write: {detail}")
            }
            Error::Option { option, message } => write!(f, "{PROGRAM}: {option}: {message}"),
            Error::Report { subject, message } => write!(f, "{PROGRAM}: {subject}: {message}"),
        }
    }
}

impl std::error::Error for Error {}

/// Renders what the parser found at an error position as one line: `end of line` when
/// nothing is left, otherwise a quoted excerpt (at most 40 characters, control
/// characters escaped, `...` appended when cut).
pub(crate) fn describe_found(rest: &[u8]) -> String {
    if rest.is_empty() {
        return "end of line".to_string();
    }
    const MAX: usize = 40;
    let text = String::from_utf8_lossy(rest);
    let mut excerpt: String = text.chars().take(MAX).collect();
    if text.chars().nth(MAX).is_some() {
        excerpt.push_str("...");
    }
    format!("{excerpt:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_displays_as_one_line() {
        let errors = [
            Error::Syntax {
                file: "a.txt".into(),
                line: 3,
                expected: "a depth from 1 to 2".into(),
                found: describe_found(b"C3 FN0+0\n\r\tx"),
            },
            Error::Empty { file: "e".into() },
            Error::Gzip {
                file: "g".into(),
                detail: "corrupt deflate stream".into(),
            },
            Error::Io {
                file: "i".into(),
                detail: "No such file or directory".into(),
            },
            Error::Write {
                file: "o.svg".into(),
                detail: "Permission denied (os error 13)".into(),
            },
            Error::Report {
                subject: "r".into(),
                message: "m".into(),
            },
            Error::Option {
                option: "--hide".into(),
                message: "invalid regular expression \"(\": unclosed group".into(),
            },
        ];
        for error in errors {
            let text = error.to_string();
            assert!(text.starts_with("pyigprof-analyse: "), "{text}");
            assert!(!text.contains('\n') && !text.contains('\r'), "{text}");
        }
    }

    #[test]
    fn found_excerpts_are_quoted_and_cut() {
        assert_eq!(describe_found(b""), "end of line");
        assert_eq!(describe_found(b"FN5+0"), "\"FN5+0\"");
        let long = [b'x'; 50];
        assert_eq!(describe_found(&long), format!("\"{}...\"", "x".repeat(40)));
    }
}
