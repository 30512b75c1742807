//! Decoding of the `%XX` escapes in names and paths (docs/dump-format.md, "Escaping").
//!
//! pyigprof writes `%`, `)`, bytes below 0x20 and 0x7f as `%` followed by two upper-case
//! hex digits (before November 2026 also `(` and bytes from 0x80 up). IgProf writes names
//! raw, so the reader ([`crate::parse`]) decodes only the dumps that show they are
//! pyigprof's.

/// Decodes `%XX` escapes (hex digits of either case) and then the bytes as UTF-8,
/// replacing invalid sequences with U+FFFD (paths need not be UTF-8).
///
/// # Errors
/// The byte offset in `raw` of a `%` that is not followed by two hex digits.
pub fn unescape(raw: &[u8]) -> Result<String, usize> {
    if !raw.contains(&b'%') {
        return Ok(String::from_utf8_lossy(raw).into_owned());
    }
    let mut bytes = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let byte = raw[i];
        if byte == b'%' {
            let high = raw.get(i + 1).and_then(|&b| hex_digit(b));
            let low = raw.get(i + 2).and_then(|&b| hex_digit(b));
            match (high, low) {
                (Some(high), Some(low)) => bytes.push(high << 4 | low),
                _ => return Err(i),
            }
            i += 3;
        } else {
            bytes.push(byte);
            i += 1;
        }
    }
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
    })
}

/// The value of one hex digit (`0-9`, `a-f`, `A-F`).
pub(crate) fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_doc_example() {
        assert_eq!(unescape(b"f%28%C3%BC%29").unwrap(), "f(\u{fc})");
        assert_eq!(unescape(b"/tmp/a %281%29.py").unwrap(), "/tmp/a (1).py");
    }

    #[test]
    fn plain_text_is_unchanged() {
        assert_eq!(
            unescape(b"python3 examples/compress.py").unwrap(),
            "python3 examples/compress.py"
        );
        assert_eq!(unescape(b"").unwrap(), "");
    }

    #[test]
    fn lower_case_digits_percent_and_control_bytes() {
        assert_eq!(unescape(b"100%25%0a%09x%7f").unwrap(), "100%\n\tx\u{7f}");
        assert_eq!(unescape(b"%c3%a9").unwrap(), "\u{e9}");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(
            unescape(b"/data/caf%E9.py").unwrap(),
            "/data/caf\u{fffd}.py"
        );
        assert_eq!(unescape(b"raw\xffbyte").unwrap(), "raw\u{fffd}byte");
    }

    #[test]
    fn invalid_escapes_give_their_offset() {
        assert_eq!(unescape(b"ab%G1"), Err(2));
        assert_eq!(unescape(b"ab%4"), Err(2));
        assert_eq!(unescape(b"%"), Err(0));
        assert_eq!(unescape(b"%41%4x"), Err(3));
    }
}
