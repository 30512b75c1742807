//! The gzip stream a profile is written as (RFC 1952), compressed by `flate2` — except a
//! small one, which is stored.
//!
//! Compressing costs a fixed ~0.25 ms before the first byte on this project's VM: the
//! deflate state's tables and window (about 300 KiB, allocated and zeroed by `zlib-rs`),
//! whatever the level, `flate2::Compression::none()` included (the 3.2 KB profile of
//! `python -c pass`: 230–420 µs at every level, 31 µs stored, each in a fresh process).
//! That was a fifth of what a short process paid for being profiled. A profile of at most
//! [`STORED_MAX`] bytes is therefore written as one *stored* deflate block (RFC 1951
//! §3.2.4: a 5-byte header, then the bytes as they are) in a gzip member with its CRC-32
//! ([`crc32`]): a valid gzip file for every reader (zlib's, as IgProf's `igprof-analyse`
//! opens profiles; `flate2`'s; `gzip -t`), at most 64 KiB that a compressor would have made
//! about 3 times smaller. A larger profile is compressed, its first bytes held until it
//! passes the limit.

use std::io::{self, Write};

/// The largest profile written stored, in bytes: what one stored block holds.
pub const STORED_MAX: usize = 65_535;

/// A gzip writer over `W`; [`Gzip::finish`] ends the stream and returns `W`.
pub struct Gzip<W: Write> {
    /// The compression level (0–9, as gzip's) of a profile beyond [`STORED_MAX`] bytes.
    level: u32,
    /// `None` only while switching to the compressor.
    state: Option<State<W>>,
}

enum State<W: Write> {
    /// At most [`STORED_MAX`] bytes so far, held.
    Small { out: W, held: Vec<u8> },
    /// Beyond it: compressed as it comes.
    Compressed(flate2::write::GzEncoder<W>),
}

impl<W: Write> Gzip<W> {
    /// A gzip stream into `out`, compressed at `level` (0–9) if it grows beyond
    /// [`STORED_MAX`] bytes, else stored.
    pub fn new(out: W, level: u32) -> Gzip<W> {
        Gzip {
            level,
            state: Some(State::Small {
                out,
                held: Vec::new(),
            }),
        }
    }

    /// Writes the end of the stream (the stored member, or the compressor's last block and
    /// the trailer) and returns the writer, not flushed.
    ///
    /// # Errors
    /// The writer's.
    pub fn finish(mut self) -> io::Result<W> {
        match self.state.take() {
            Some(State::Small { mut out, held }) => {
                write_stored(&mut out, &held)?;
                Ok(out)
            }
            Some(State::Compressed(gz)) => gz.finish(),
            None => Err(io::Error::other("gzip stream broken by an earlier error")),
        }
    }
}

impl<W: Write> Write for Gzip<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match &mut self.state {
            Some(State::Small { held, .. }) if held.len() + bytes.len() <= STORED_MAX => {
                held.extend_from_slice(bytes);
                return Ok(bytes.len());
            }
            Some(State::Compressed(gz)) => return gz.write(bytes),
            _ => {}
        }
        // Beyond the limit: the compressor takes what was held, then the rest.
        let Some(State::Small { out, held }) = self.state.take() else {
            return Err(io::Error::other("gzip stream broken by an earlier error"));
        };
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::new(self.level));
        gz.write_all(&held)?;
        let written = gz.write(bytes)?;
        self.state = Some(State::Compressed(gz));
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.state {
            Some(State::Compressed(gz)) => gz.flush(),
            // Held until `finish`: a stored block is written whole.
            _ => Ok(()),
        }
    }
}

/// Writes `bytes` (at most [`STORED_MAX`]) to `out` as a whole gzip member of one stored
/// block: the 10-byte header (no name, no time, OS unknown), the final block's header
/// (`BFINAL` 1, `BTYPE` 00, then `LEN` and its complement, little-endian), the bytes, and
/// the trailer (their CRC-32 and length, little-endian).
fn write_stored(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    debug_assert!(bytes.len() <= STORED_MAX);
    let len = bytes.len() as u16;
    let mut head = [0u8; 15];
    head[..10].copy_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
    head[10] = 1;
    head[11..13].copy_from_slice(&len.to_le_bytes());
    head[13..15].copy_from_slice(&(!len).to_le_bytes());
    out.write_all(&head)?;
    out.write_all(bytes)?;
    let mut tail = [0u8; 8];
    tail[..4].copy_from_slice(&crc32(bytes).to_le_bytes());
    tail[4..].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.write_all(&tail)
}

/// The CRC-32 of gzip (RFC 1952 §8: ISO 3309's polynomial, reflected, `0xEDB88320`) of
/// `bytes`, a byte at a time from a table built at compile time.
///
/// Not `crc32fast`'s: its first use asks the CPU which instructions it has (Rust's
/// `is_x86_feature_detected!`, several `CPUID`s), and each `CPUID` traps to the hypervisor
/// in a VM: 66–70 µs of every process on this project's machine (7 µs a `CPUID`), where
/// the 3 KB profile of a `python -c pass` takes this loop about 3 µs.
fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut n = 0;
        while n < 256 {
            let mut c = n as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[n] = c;
            n += 1;
        }
        table
    };
    !bytes.iter().fold(!0u32, |c, &b| {
        TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn crc32_is_gzips() {
        // CRC-32/ISO-HDLC's check value (the ASCII digits), and crc32fast's at several lengths.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        let bytes: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [1, 2, 7, 64, 1000, 65_535, 70_000] {
            assert_eq!(
                crc32(&bytes[..len]),
                crc32fast::hash(&bytes[..len]),
                "{len} bytes"
            );
        }
    }

    /// Bytes that compress a little, as a profile's text does.
    fn text(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| {
                b"C1 FN12=(F3+40 N=(_PyEval_EvalFrameDefault))+0 V0:(1,4,4)\n"[i % 58]
                    ^ (i / 997) as u8
            })
            .collect()
    }

    fn gzip(bytes: &[u8], chunk: usize) -> Vec<u8> {
        let mut gz = Gzip::new(Vec::new(), 6);
        for piece in bytes.chunks(chunk.max(1)) {
            gz.write_all(piece).unwrap();
        }
        gz.finish().unwrap()
    }

    fn gunzip(file: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(file)
            .read_to_end(&mut out)
            .expect("a valid gzip stream");
        out
    }

    #[test]
    fn small_profiles_are_stored_and_read_back_whole() {
        for len in [0, 1, 3_249, STORED_MAX] {
            let bytes = text(len);
            let file = gzip(&bytes, 700);
            // Stored: the bytes and 23 of framing, nothing compressed.
            assert_eq!(file.len(), len + 23, "{len}");
            assert_eq!(&file[15..15 + len], &bytes[..], "{len}");
            assert_eq!(gunzip(&file), bytes, "{len}");
        }
    }

    #[test]
    fn larger_profiles_are_compressed_with_what_was_held_first() {
        for (len, chunk) in [
            (STORED_MAX + 1, 700),
            (200_000, 4_096),
            (200_000, STORED_MAX + 9),
        ] {
            let bytes = text(len);
            let file = gzip(&bytes, chunk);
            assert!(file.len() < len / 2, "{len}: {} bytes", file.len());
            assert_eq!(gunzip(&file), bytes, "{len} in pieces of {chunk}");
        }
    }

    #[test]
    fn the_stored_member_is_what_gzip_itself_accepts() {
        let bytes = text(5_000);
        let file = gzip(&bytes, 5_000);
        let dir = std::env::temp_dir().join(format!("pyigprof-gzip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stored.gz");
        std::fs::write(&path, &file).unwrap();
        let out = std::process::Command::new("gzip")
            .arg("-dc")
            .arg(&path)
            .output()
            .expect("gzip, as every Debian system has");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, bytes);
    }
}
