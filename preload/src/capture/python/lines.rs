//! From an instruction's byte offset to its source line, reading a copy of the code
//! object's line table (what `PyCode_Addr2Line` computes). Formats, per CPython version:
//! `Objects/lnotab_notes.txt` (≤3.9 `co_lnotab`, 3.10 `co_linetable`) and
//! `Objects/locations.md` (3.11+). Runs when the profile is written, never in the handler.

use super::layout::LineTable;

/// The line of the instruction at byte offset `offset` of a code object whose first line is
/// `first_line` and whose line table (in `format`) is `table`. `None` when the instruction
/// has no line (3.10+ artificial instructions) or lies past the end of the table.
pub fn line_for_offset(
    format: LineTable,
    table: &[u8],
    first_line: i32,
    offset: u32,
) -> Option<i32> {
    match format {
        LineTable::Lnotab { signed_lines } => Some(lnotab(table, first_line, offset, signed_lines)),
        LineTable::Linetable310 => linetable_310(table, first_line, offset),
        LineTable::Locations => locations(table, first_line, offset / 2),
    }
}

/// ≤3.9: pairs of (address increment, line increment); the line of `offset` is the first
/// line plus the line increments of every pair whose address is at or before it.
fn lnotab(table: &[u8], first_line: i32, offset: u32, signed_lines: bool) -> i32 {
    let mut line = first_line;
    let mut addr: u32 = 0;
    for pair in table.chunks_exact(2) {
        addr += u32::from(pair[0]);
        if addr > offset {
            break;
        }
        line += if signed_lines {
            i32::from(pair[1] as i8)
        } else {
            i32::from(pair[1])
        };
    }
    line
}

/// 3.10: pairs of (byte length of a range, line change for it); a change of -128 means the
/// range has no line.
fn linetable_310(table: &[u8], first_line: i32, offset: u32) -> Option<i32> {
    let mut line = first_line;
    let mut end: u32 = 0;
    for pair in table.chunks_exact(2) {
        let start = end;
        end += u32::from(pair[0]);
        let delta = pair[1] as i8;
        let range_line = if delta == -128 {
            None
        } else {
            line += i32::from(delta);
            Some(line)
        };
        if start <= offset && offset < end {
            return range_line;
        }
    }
    None
}

/// 3.11+: entries that each cover 1–8 code units. `unit` is the instruction's index in
/// code units.
fn locations(table: &[u8], first_line: i32, unit: u32) -> Option<i32> {
    let mut pos = 0;
    let mut line = first_line;
    let mut addr: u32 = 0;
    while pos < table.len() {
        let first = table[pos];
        if first & 0x80 == 0 {
            return None; // not at the start of an entry: corrupt or cut table
        }
        pos += 1;
        let code = (first >> 3) & 15;
        let length = u32::from(first & 7) + 1;
        let entry_line = match code {
            15 => None,
            14 => {
                let delta = read_svarint(table, &mut pos)?;
                read_varint(table, &mut pos)?; // end line delta
                read_varint(table, &mut pos)?; // column + 1
                read_varint(table, &mut pos)?; // end column + 1
                line += delta;
                Some(line)
            }
            13 => {
                line += read_svarint(table, &mut pos)?;
                Some(line)
            }
            10..=12 => {
                line += i32::from(code) - 10;
                pos += 2; // column, end column
                Some(line)
            }
            _ => {
                pos += 1; // packed columns
                Some(line)
            }
        };
        if unit < addr + length {
            return entry_line;
        }
        addr += length;
    }
    None
}

/// Reads an unsigned varint of 6-bit chunks (bit 6 = more chunks follow).
fn read_varint(table: &[u8], pos: &mut usize) -> Option<i32> {
    let mut byte = *table.get(*pos)?;
    *pos += 1;
    let mut value = i64::from(byte & 63);
    let mut shift = 0;
    while byte & 64 != 0 {
        byte = *table.get(*pos)?;
        *pos += 1;
        shift += 6;
        if shift > 30 {
            return None;
        }
        value |= i64::from(byte & 63) << shift;
    }
    i32::try_from(value).ok()
}

/// Reads a signed varint: the unsigned value's lowest bit is the sign.
fn read_svarint(table: &[u8], pos: &mut usize) -> Option<i32> {
    let raw = read_varint(table, pos)?;
    Some(if raw & 1 != 0 { -(raw >> 1) } else { raw >> 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lnotab_accumulates_line_steps_up_to_the_offset() {
        // Line 10 at 0..6, line 12 at 6..20, line 11 (negative step, 3.6+) from 20.
        let table = [6, 2, 14, 0xff];
        let f = LineTable::Lnotab { signed_lines: true };
        assert_eq!(line_for_offset(f, &table, 10, 0), Some(10));
        assert_eq!(line_for_offset(f, &table, 10, 5), Some(10));
        assert_eq!(line_for_offset(f, &table, 10, 6), Some(12));
        assert_eq!(line_for_offset(f, &table, 10, 25), Some(11));
        // 2.7: the same byte is an unsigned step.
        let f = LineTable::Lnotab {
            signed_lines: false,
        };
        assert_eq!(line_for_offset(f, &table, 10, 25), Some(10 + 2 + 255));
    }

    #[test]
    fn linetable_310_has_ranges_without_lines() {
        // 0..4 line 5, 4..8 no line, 8..12 line 7.
        let table = [4, 0, 4, 0x80, 4, 2];
        let f = LineTable::Linetable310;
        assert_eq!(line_for_offset(f, &table, 5, 2), Some(5));
        assert_eq!(line_for_offset(f, &table, 5, 6), None);
        assert_eq!(line_for_offset(f, &table, 5, 8), Some(7));
        assert_eq!(line_for_offset(f, &table, 5, 12), None);
    }

    #[test]
    fn locations_table_all_entry_kinds() {
        let table = [
            // code 13 (no columns), 1 unit, line +1 (svarint 2)
            0x80 | (13 << 3),
            2,
            // code 11 (one-line, +1), 2 units, two column bytes
            0x80 | (11 << 3) | 1,
            4,
            9,
            // code 15 (no location), 1 unit
            0x80 | (15 << 3),
            // code 14 (long), 1 unit, line -2 (svarint 5), end line, col, end col
            0x80 | (14 << 3),
            5,
            0,
            1,
            2,
            // code 3 (short, same line), 3 units, one byte
            0x80 | (3 << 3) | 2,
            0x11,
        ];
        let f = LineTable::Locations;
        let line = |unit: u32| line_for_offset(f, &table, 100, unit * 2);
        assert_eq!(line(0), Some(101));
        assert_eq!(line(1), Some(102));
        assert_eq!(line(2), Some(102));
        assert_eq!(line(3), None);
        assert_eq!(line(4), Some(100));
        assert_eq!(line(5), Some(100));
        assert_eq!(line(7), Some(100));
        assert_eq!(line(8), None);
    }

    #[test]
    fn cut_or_corrupt_tables_give_no_line_instead_of_panicking() {
        let f = LineTable::Locations;
        assert_eq!(line_for_offset(f, &[0x80 | (14 << 3), 0x41], 1, 0), None);
        assert_eq!(line_for_offset(f, &[0x05], 1, 0), None);
        assert_eq!(line_for_offset(LineTable::Linetable310, &[3], 1, 0), None);
    }
}

#[cfg(test)]
#[path = "lines_on_interpreters.rs"]
mod on_interpreters;
