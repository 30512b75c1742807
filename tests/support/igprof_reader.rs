//! IgProf's own reader of text dumps, as a test oracle: the grammar and the rules of
//! `IgProfAnalyzerApplication::readDump` and its `IgTokenizer` (IgProf `src/analyse.cc`),
//! restated so that a test can tell whether IgProf's `igprof-analyse` would read a
//! profile, and with which totals, without IgProf on the machine.
//!
//! What IgProf's reader requires, and is checked here:
//! - the header `P=(`, optionally `HEX `, then `ID=<token> N=(<no ")">) T=<decimal>)` and a newline;
//! - then only call-tree lines, each ending in a newline, up to the end of the file (there
//!   are no comments: a line that does not start with `C` is a syntax error);
//! - `C<depth> ` with 1 ≤ depth ≤ one more than the previous line's;
//! - `FN<id>` followed by `=(F<fid>[=(<path>)]+<start> N=(<name>))` or by nothing when
//!   the id was defined before (else: "symbol N referenced before definition"); a
//!   definition whose name IgProf has not met yet must have an id no smaller than every id
//!   defined before (else: the assertion `symid >= m_symbols.size()` in
//!   `SymbolInfoFactory::createSymbolInfo`; IgProf merges functions by name, after naming
//!   the unnamed ones `@{<file>+<offset>}`);
//! - `F<fid>` without a path refers to a file defined before;
//! - `+<offset>` then ` V<cid>[=(<counter>)]:(<count>,<amount>,<peak>)` zero or more
//!   times, each counter defined before it is used, each possibly followed by
//!   `;LK=(0x<address>,<size>)` leak records;
//! - at least one counter in the file ("No counter values in profile data.").
//!
//! Numbers are hexadecimal in the `HEX` variant, decimal otherwise; names and paths may
//! hold any byte but `)` and newline.

use std::collections::{HashMap, HashSet};

/// What IgProf's reader takes from a dump it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgprofRead {
    /// The key counter: the first counter the file defines (IgProf's default for `-r`).
    pub counter: String,
    /// Sum of the key counter's counts (samples, for `PERF_TICKS`).
    pub count: i64,
    /// Sum of the key counter's amounts (ticks, for `PERF_TICKS`).
    pub amount: i64,
    /// Call-tree lines read.
    pub lines: usize,
}

/// Reads `text` (a dump, uncompressed) as IgProf's reader would: its totals, or the
/// reason IgProf would stop (with the line number, counted from 1).
pub fn read(text: &[u8]) -> Result<IgprofRead, String> {
    let mut reader = Reader {
        text,
        pos: 0,
        line: 1,
    };
    let mut state = State {
        hex: reader.header().map_err(|e| format!("line 1: {e}"))?,
        ..State::default()
    };
    while reader.pos < text.len() {
        reader.line += 1;
        let line = reader.line;
        reader
            .call_line(&mut state)
            .map_err(|e| format!("line {line}: {e}"))?;
    }
    let counter = state
        .key
        .ok_or_else(|| "No counter values in profile data.".to_string())?;
    Ok(IgprofRead {
        counter,
        count: state.count,
        amount: state.amount,
        lines: reader.line - 1,
    })
}

#[derive(Default)]
struct State {
    hex: bool,
    depth: usize,
    /// Function ids defined so far, and the smallest id a new name may take.
    functions: HashSet<i64>,
    next_function: i64,
    names: HashSet<Vec<u8>>,
    files: HashMap<i64, Vec<u8>>,
    counters: HashMap<i64, bool>,
    key: Option<String>,
    count: i64,
    amount: i64,
}

struct Reader<'a> {
    text: &'a [u8],
    pos: usize,
    line: usize,
}

impl Reader<'_> {
    fn next(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn skip(&mut self, expected: &str) -> Result<(), String> {
        if self.text[self.pos..].starts_with(expected.as_bytes()) {
            self.pos += expected.len();
            Ok(())
        } else {
            let found = &self.text[self.pos..(self.pos + 20).min(self.text.len())];
            Err(format!(
                "syntax error: expected {expected:?}, found {:?}",
                String::from_utf8_lossy(found)
            ))
        }
    }

    /// The bytes up to (not including) the first of `delimiters` or the end.
    fn token(&mut self, delimiters: &[u8]) -> &[u8] {
        let start = self.pos;
        while self.next().is_some_and(|b| !delimiters.contains(&b)) {
            self.pos += 1;
        }
        &self.text[start..self.pos]
    }

    /// A name or path up to `)`, which is skipped; a newline inside is an error.
    fn until_close(&mut self) -> Result<Vec<u8>, String> {
        let token = self.token(b")").to_vec();
        if token.contains(&b'\n') || self.next().is_none() {
            return Err("syntax error: a name without its closing ')'".into());
        }
        self.pos += 1;
        Ok(token)
    }

    fn number(&mut self, delimiters: &[u8], hex: bool) -> Result<i64, String> {
        let token = String::from_utf8_lossy(self.token(delimiters)).into_owned();
        let digits = token.strip_prefix('-').unwrap_or(&token);
        let value = i64::from_str_radix(digits, if hex { 16 } else { 10 })
            .map_err(|_| format!("syntax error: {token:?} is not a number"))?;
        Ok(if token.starts_with('-') {
            -value
        } else {
            value
        })
    }

    fn header(&mut self) -> Result<bool, String> {
        self.skip("P=(")?;
        let hex = self.text[self.pos..].starts_with(b"HEX ");
        if hex {
            self.pos += 4;
        }
        self.skip("ID=")?;
        self.token(b" ");
        self.skip(" N=(")?;
        self.until_close()?;
        self.skip(" T=")?;
        let period = String::from_utf8_lossy(self.token(b")")).into_owned();
        period
            .parse::<f64>()
            .map_err(|_| format!("syntax error: T={period:?}"))?;
        self.skip(")\n")?;
        Ok(hex)
    }

    fn call_line(&mut self, state: &mut State) -> Result<(), String> {
        let hex = state.hex;
        self.skip("C")?;
        let depth = self.number(b" ", hex)?;
        if depth < 1 || depth as usize > state.depth + 1 {
            return Err(format!(
                "depth {depth} after a line at depth {}",
                state.depth
            ));
        }
        state.depth = depth as usize;
        self.skip(" FN")?;
        let id = self.number(b"+=", hex)?;
        if self.next() == Some(b'=') {
            self.skip("=(F")?;
            let file = self.number(b"+=", hex)?;
            if self.next() == Some(b'=') {
                self.skip("=(")?;
                let path = self.until_close()?;
                state.files.insert(file, path);
            }
            let Some(path) = state.files.get(&file).cloned() else {
                return Err(format!("file {file} referenced before definition"));
            };
            self.skip("+")?;
            let start = self.number(b" ", hex)?;
            self.skip(" N=(")?;
            let name = symlookup(self.until_close()?, &path, start);
            self.skip(")")?;
            if state.names.insert(name) {
                if id < state.next_function {
                    return Err(format!(
                        "assertion `symid >= m_symbols.size()' failed: FN{id:x} defined \
                         after FN{:x}",
                        state.next_function - 1
                    ));
                }
                state.next_function = id + 1;
            } else {
                state.next_function = state.next_function.max(id + 1);
            }
            state.functions.insert(id);
        } else if !state.functions.contains(&id) {
            return Err(format!("symbol {id} referenced before definition"));
        }
        self.skip("+")?;
        self.number(b" \n", hex)?;
        while self.next() != Some(b'\n') {
            self.skip(" V")?;
            let counter = self.number(b":=", hex)?;
            if self.next() == Some(b'=') {
                self.skip("=(")?;
                let name = String::from_utf8_lossy(&self.until_close()?).into_owned();
                let key = state.key.get_or_insert_with(|| name.clone());
                state.counters.insert(counter, *key == name);
            }
            let Some(&is_key) = state.counters.get(&counter) else {
                return Err(format!("counter {counter} used before definition"));
            };
            self.skip(":(")?;
            let count = self.number(b",", hex)?;
            self.skip(",")?;
            let amount = self.number(b",", hex)?;
            self.skip(",")?;
            self.number(b")", hex)?;
            self.skip(")")?;
            while self.next() == Some(b';') {
                self.skip(";LK=(0x")?;
                self.number(b",", true)?;
                self.skip(",")?;
                self.number(b")", hex)?;
                self.skip(")")?;
            }
            if is_key {
                state.count += count;
                state.amount += amount;
            }
        }
        self.skip("\n")
    }
}

/// The name IgProf's reader gives a function (`symlookup` in `src/analyse.cc`): an
/// unnamed one (`@?…`) in a named file at a positive offset becomes
/// `@{<file's base name>+<offset in decimal>}`. Functions are merged by this name.
fn symlookup(name: Vec<u8>, file: &[u8], start: i64) -> Vec<u8> {
    if !name.starts_with(b"@?") || file.is_empty() || start <= 0 {
        return name;
    }
    if file == b"<dynamically generated>" {
        return format!("@?0x{start:x}{{<dynamically-generated>}}").into_bytes();
    }
    let base = file.rsplit(|&b| b == b'/').next().unwrap_or(file);
    [b"@{", base, format!("+{start}}}").as_bytes()].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_documented_dump_and_refuses_what_igprof_refuses() {
        let good = b"P=(HEX ID=4d2 N=(python3 x.py) T=0.004000)\n\
                     C1 FN0=(F0=(/lib/libc.so.6)+271c0 N=(__libc_start_main))+8a\n\
                     C2 FN1=(F1=(/x.py)+1 N=(<module>))+1b V0=(PERF_TICKS):(5,14,14)\n\
                     C2 FN1+4 V0:(1,1,1)\n";
        let read_good = read(good).unwrap();
        assert_eq!((read_good.count, read_good.amount), (6, 0x15));
        assert_eq!(read_good.counter, "PERF_TICKS");
        // `@?` names become `@{file+offset}` first: the same `@?` name in two files is two
        // functions, so the second must take a larger id too.
        let same_name = b"P=(HEX ID=1 N=(x) T=0.004000)\n\
                          C1 FN1=(F0=(/a/liba.so)+10 N=(@?0x10))+0 V0=(PERF_TICKS):(1,1,1)\n\
                          C1 FN0=(F1=(/b/libb.so)+10 N=(@?0x10))+0\n";
        assert!(read(same_name)
            .unwrap_err()
            .starts_with("line 3: assertion"));
        let cases: [(&[u8], &str); 5] = [
            (
                b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN1=(F0=(/a)+0 N=(f))+0 V0=(PERF_TICKS):(1,1,1)\nC1 FN0=(F0+0 N=(g))+0\n",
                "line 3: assertion",
            ),
            (
                b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN1+0\n",
                "line 2: symbol 1 referenced before definition",
            ),
            (
                b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(f))+0 V0=(PERF_TICKS):(1,1,1)\n#pyigprof stats samples=1\n",
                "line 3: syntax error",
            ),
            (
                b"P=(HEX ID=1 N=(x) T=0.004000)\nC1 FN0=(F0=(/a)+0 N=(f))+0\n",
                "No counter values",
            ),
            (
                b"P=(HEX ID=1 N=(x) T=0.004000)\nC2 FN0=(F0=(/a)+0 N=(f))+0\n",
                "line 2: depth 2",
            ),
        ];
        for (text, error) in cases {
            let got = read(text).unwrap_err();
            assert!(got.starts_with(error), "{got}");
        }
    }
}
