//! The lines of an mm-link log as the one-flow reduction takes them.
//!
//! The format is mahimahi's (`transient/mahimahi.py` describes it): a header
//! block of `#` lines at the top, then one event per line, `time symbol
//! number` or, for departures (`-`) and drops (`d`), `time symbol number
//! number`. This reader takes exactly what the analysis's own streaming
//! reader (`transient.stream`) takes, and declines the rest: single spaces,
//! digits only (at most 16 to a number), blank lines skipped, no tab or CR
//! anywhere, a header block it can read. A declined log is read by the
//! analysis's event reader, which words every error with file and line.

/// Why a log is left to the event reader: the 1-based line (0: the file as a
/// whole) and what is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declined {
    pub line: u64,
    pub reason: String,
}

impl Declined {
    pub fn at(line: u64, reason: impl Into<String>) -> Self {
        Declined {
            line,
            reason: reason.into(),
        }
    }
}

/// One event line: time (ms), kind code (0 arrival `+`, 1 departure `-`,
/// 2 delivery opportunity `#`, 3 drop `d`: `transient.mahimahi.EVENT_KINDS`),
/// its first number (bytes, or a drop's packets) and second (a departure's
/// delay in ms or a drop's bytes; 0 for the other kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub time_ms: u64,
    pub code: u8,
    pub first: u64,
    pub second: u64,
}

/// Longest number taken (as the Python readers: two 8-byte words of digits).
pub const MAX_DIGITS: usize = 16;

fn kind_code(symbol: u8) -> Option<u8> {
    match symbol {
        b'+' => Some(0),
        b'-' => Some(1),
        b'#' => Some(2),
        b'd' => Some(3),
        _ => None,
    }
}

/// The decimal number of 1..=16 digits at `buf[i..]`, ended by any non-digit;
/// returns (value, index of the byte after it) or None.
#[inline(always)]
fn number(buf: &[u8], mut i: usize) -> Option<(u64, usize)> {
    let start = i;
    let mut v: u64 = 0;
    while let Some(&c) = buf.get(i) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        v = v * 10 + d as u64;
        i += 1;
        if i - start > MAX_DIGITS {
            return None;
        }
    }
    (i > start).then_some((v, i))
}

/// The event of the line starting at `buf[i]` (not empty), which ends with
/// a newline that `buf` holds; returns it and where the next line starts, or
/// what is wrong with the line for this reader.
#[inline(always)]
pub fn event_at(buf: &[u8], i: usize) -> Result<(Event, usize), &'static str> {
    const SHAPE: &str =
        "not `time symbol number [number]` with single spaces and at most 16 digits a number";
    let (time_ms, i) = number(buf, i).ok_or(SHAPE)?;
    if buf.get(i) != Some(&b' ') {
        return Err(SHAPE);
    }
    let code = buf
        .get(i + 1)
        .copied()
        .and_then(kind_code)
        .ok_or("no event kind + - # d")?;
    if buf.get(i + 2) != Some(&b' ') {
        return Err(SHAPE);
    }
    let (first, j) = number(buf, i + 3).ok_or(SHAPE)?;
    let four = code == 1 || code == 3;
    let (second, k) = if four {
        if buf.get(j) != Some(&b' ') {
            return Err(SHAPE);
        }
        number(buf, j + 1).ok_or(SHAPE)?
    } else {
        (0, j)
    };
    if buf.get(k) != Some(&b'\n') {
        return Err(SHAPE);
    }
    Ok((
        Event {
            time_ms,
            code,
            first,
            second,
        },
        k + 1,
    ))
}

/// The event of one line (without its newline); see [`event_at`].
pub fn event(line: &[u8]) -> Result<Event, &'static str> {
    let mut buf = line.to_vec();
    buf.push(b'\n');
    event_at(&buf, 0).map(|(e, _)| e)
}

/// The header block's base timestamp (`# base timestamp: N`), read as the
/// analysis reads it (`transient.mahimahi._parse_header`). Lines are fed in
/// order; a line this reader cannot vouch for declines the log.
#[derive(Debug, Default)]
pub struct Header {
    pub base: Option<i64>,
}

impl Header {
    /// One header line (starting with `#`, without its newline), 1-based `lineno`.
    pub fn line(&mut self, line: &[u8], lineno: u64) -> Result<(), Declined> {
        let text = std::str::from_utf8(line)
            .map_err(|_| Declined::at(lineno, "header line is not UTF-8 text"))?;
        // whitespace other than the space: the Python reader's \s and strip() take more of it than is
        // worth mirroring here (tab and CR are declined anywhere, as there)
        if text.chars().any(|c| {
            c != ' ' && (c.is_whitespace() || ('\x1c'..='\x1f').contains(&c) || c.is_control())
        }) {
            return Err(Declined::at(
                lineno,
                "header line with whitespace or control characters other than spaces",
            ));
        }
        let Some(rest) = text.strip_prefix('#') else {
            return Err(Declined::at(lineno, "header line not starting with #"));
        };
        let Some(value) = rest.trim_start_matches(' ').strip_prefix("base timestamp:") else {
            return Ok(());
        };
        let value = value
            .trim_start_matches(' ')
            .split(' ')
            .next()
            .unwrap_or("");
        if self.base.is_some() {
            return Err(Declined::at(lineno, "base timestamp defined twice"));
        }
        let digits = value.strip_prefix(['-', '+']).unwrap_or(value);
        if digits.is_empty() || digits.len() > 18 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Declined::at(
                lineno,
                format!("base timestamp {value:?} is not an integer"),
            ));
        }
        let v: i64 = digits.parse().expect("18 digits fit");
        self.base = Some(if value.starts_with('-') { -v } else { v });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_four_kinds() {
        assert_eq!(
            event(b"12 + 1504"),
            Ok(Event {
                time_ms: 12,
                code: 0,
                first: 1504,
                second: 0
            })
        );
        assert_eq!(
            event(b"12 - 1504 37"),
            Ok(Event {
                time_ms: 12,
                code: 1,
                first: 1504,
                second: 37
            })
        );
        assert_eq!(
            event(b"0 # 1504"),
            Ok(Event {
                time_ms: 0,
                code: 2,
                first: 1504,
                second: 0
            })
        );
        assert_eq!(
            event(b"7 d 3 4512"),
            Ok(Event {
                time_ms: 7,
                code: 3,
                first: 3,
                second: 4512
            })
        );
        assert_eq!(
            event(b"0012 + 0"),
            Ok(Event {
                time_ms: 12,
                code: 0,
                first: 0,
                second: 0
            })
        );
        assert_eq!(
            event(b"9999999999999999 + 1").unwrap().time_ms,
            9_999_999_999_999_999
        );
    }

    #[test]
    fn declines_what_the_streaming_reader_declines() {
        for bad in [
            &b"12 + 1504 3"[..],
            b"12 - 1504",
            b"12 d 3",
            b"12 x 1504",
            b"12  + 1504",
            b"12 + 1504 ",
            b" 12 + 1504",
            b"12 - 1504 4.5",
            b"-1 + 1504",
            b"12 + -5",
            b"12+1504",
            b"12 +",
            b"+ 1504",
            b"12 - 1504 3 4",
            b"# 12",
            b"12 ++ 1504",
            b"12\t+ 1504",
            b"12 + 1504\r",
            b"12345678901234567 + 1",
            b"12 + 12345678901234567",
        ] {
            assert!(
                event(bad).is_err(),
                "{:?} taken",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn reads_the_base_timestamp_as_the_python_reader() {
        let mut h = Header::default();
        h.line(b"# mahimahi mm-link [trace] > uplink.log", 1)
            .unwrap();
        h.line(b"# base timestamp: 1732270000000", 2).unwrap();
        assert_eq!(h.base, Some(1_732_270_000_000));
        assert_eq!(h.line(b"# base timestamp: 5", 3).unwrap_err().line, 3);
        let mut h = Header::default();
        h.line(b"#base timestamp:-7 tail", 1).unwrap();
        assert_eq!(h.base, Some(-7));
        for bad in [
            &b"# base timestamp: x"[..],
            b"# base timestamp:",
            b"# base timestamp: 1_000",
            b"# a\tb",
            b"# caf\xff",
        ] {
            assert!(
                Header::default().line(bad, 1).is_err(),
                "{:?} taken",
                String::from_utf8_lossy(bad)
            );
        }
        let mut h = Header::default();
        h.line(
            "# command line: ccplab-link --trace café.trace".as_bytes(),
            1,
        )
        .unwrap();
        assert_eq!(h.base, None);
    }
}
