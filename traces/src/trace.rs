//! The [`Trace`] type: parse/validate, write atomically, summarise.

use std::{
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::error::TraceError;

/// Bytes one delivery opportunity can carry (mahimahi's MTU-sized packet;
/// mm-link itself counts 1504 = 1500 + 4-byte TUN header).
pub const PACKET_BYTES: u64 = 1500;

/// Mbit/s carried by one opportunity per millisecond: 1500 B * 8 / 1 ms = 12 Mbit/s.
pub const MBPS_PER_OPPORTUNITY_PER_MS: f64 = (PACKET_BYTES * 8) as f64 / 1000.0;

/// A validated mahimahi trace: non-decreasing millisecond timestamps, at
/// least one, last one > 0. Each entry is one delivery opportunity of one
/// 1500-byte packet; the trace loops with period `period_ms()` (= last
/// timestamp, as in mahimahi's `mm-link`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    timestamps: Vec<u64>,
}

/// Whole-trace statistics (one period).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Delivery opportunities in one period (= lines of the file).
    pub opportunities: u64,
    /// Loop period in ms (= last timestamp).
    pub period_ms: u64,
    /// Mean capacity in Mbit/s = opportunities * 1500 B * 8 / period.
    pub mean_mbps: f64,
}

impl Trace {
    /// Builds a trace from timestamps, with the same checks as [`Trace::parse`]
    /// (`name` is used in error messages; line numbers are 1-based indices).
    pub fn from_timestamps(name: &Path, timestamps: Vec<u64>) -> Result<Self, TraceError> {
        let path = name.to_path_buf();
        if timestamps.is_empty() {
            return Err(TraceError::Empty { path });
        }
        for (i, w) in timestamps.windows(2).enumerate() {
            if w[1] < w[0] {
                return Err(TraceError::Decreasing {
                    path,
                    line: i + 2,
                    prev: w[0],
                    ts: w[1],
                });
            }
        }
        if *timestamps.last().unwrap() == 0 {
            return Err(TraceError::ZeroPeriod {
                path,
                line: timestamps.len(),
            });
        }
        Ok(Self { timestamps })
    }

    /// Reads and validates the trace file at `path`.
    ///
    /// Errors (each names the file and 1-based line): unreadable file, empty
    /// file, blank line (a single trailing newline is fine), a line that is
    /// not a non-negative integer, a timestamp smaller than the one before,
    /// a last timestamp of 0 (the period would be 0).
    pub fn read(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|source| TraceError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, file)
    }

    /// Parses a trace from `reader`; `name` is the input named in errors.
    /// Surrounding spaces/tabs and a trailing `\r` on a line are tolerated.
    pub fn parse(name: &Path, reader: impl Read) -> Result<Self, TraceError> {
        let path: PathBuf = name.to_path_buf();
        let mut timestamps = Vec::new();
        let mut blank_at: Option<usize> = None;
        let mut prev: Option<u64> = None;
        for (i, line) in BufReader::new(reader).lines().enumerate() {
            let lineno = i + 1;
            let line = line.map_err(|source| TraceError::Read {
                path: path.clone(),
                source,
            })?;
            let text = line.trim();
            if text.is_empty() {
                // Defer: a blank line is only an error if anything follows
                // it or it is the only content; `lines()` already swallows a
                // single final newline.
                blank_at.get_or_insert(lineno);
                continue;
            }
            if let Some(line) = blank_at {
                return Err(TraceError::BlankLine { path, line });
            }
            let ts: u64 = text.parse().map_err(|_| TraceError::NotInteger {
                path: path.clone(),
                line: lineno,
                content: line.clone(),
            })?;
            if let Some(p) = prev {
                if ts < p {
                    return Err(TraceError::Decreasing {
                        path,
                        line: lineno,
                        prev: p,
                        ts,
                    });
                }
            }
            prev = Some(ts);
            timestamps.push(ts);
        }
        if timestamps.is_empty() {
            return Err(TraceError::Empty { path });
        }
        if let Some(line) = blank_at {
            // Trailing blank lines beyond the one final newline.
            return Err(TraceError::BlankLine { path, line });
        }
        if prev == Some(0) {
            return Err(TraceError::ZeroPeriod {
                path,
                line: timestamps.len(),
            });
        }
        Ok(Self { timestamps })
    }

    /// Writes the trace (one timestamp per line, final newline) atomically
    /// ([`ccplab_util::fs::write_atomically`]: temporary file beside it,
    /// fsync, rename), so a reader never sees a half-written trace.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), TraceError> {
        let path = path.as_ref();
        let err = |source| TraceError::Write {
            path: path.to_path_buf(),
            source,
        };
        ccplab_util::fs::write_atomically(path, |w| {
            for ts in &self.timestamps {
                writeln!(w, "{ts}")?;
            }
            Ok(())
        })
        .map_err(err)
    }

    /// The opportunity timestamps (ms), non-decreasing.
    pub fn timestamps(&self) -> &[u64] {
        &self.timestamps
    }

    /// Loop period in ms (= last timestamp; mahimahi convention).
    pub fn period_ms(&self) -> u64 {
        *self
            .timestamps
            .last()
            .expect("validated trace is non-empty")
    }

    /// Delivery opportunities per period.
    pub fn opportunities(&self) -> u64 {
        self.timestamps.len() as u64
    }

    /// Mean capacity in Mbit/s: opportunities * 1500 B * 8 bit / period.
    pub fn mean_mbps(&self) -> f64 {
        self.opportunities() as f64 * MBPS_PER_OPPORTUNITY_PER_MS / self.period_ms() as f64
    }

    /// Summary of one period.
    pub fn summary(&self) -> Summary {
        Summary {
            opportunities: self.opportunities(),
            period_ms: self.period_ms(),
            mean_mbps: self.mean_mbps(),
        }
    }

    /// Capacity in Mbit/s per interval of `interval_ms` over one period.
    ///
    /// Interval k covers opportunity timestamps in (k*I, (k+1)*I] (a
    /// timestamp t stands for the millisecond ending at t, so ts 1..=1000
    /// is the first second). The last interval may be shorter than I and is
    /// normalised by its true length. Panics if `interval_ms` is 0.
    pub fn capacity_per_interval(&self, interval_ms: u64) -> Vec<f64> {
        assert!(interval_ms > 0, "interval_ms must be > 0");
        let period = self.period_ms();
        let bins = period.div_ceil(interval_ms) as usize;
        let mut counts = vec![0u64; bins];
        for &ts in &self.timestamps {
            // ts 0 behaves like the first ms of the period.
            let bin = (ts.saturating_sub(1) / interval_ms) as usize;
            counts[bin.min(bins - 1)] += 1;
        }
        counts
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                let start = k as u64 * interval_ms;
                let len = (period - start).min(interval_ms);
                n as f64 * MBPS_PER_OPPORTUNITY_PER_MS / len as f64
            })
            .collect()
    }

    /// Opportunities at each millisecond 0..=period (index = timestamp).
    pub fn opportunities_per_ms(&self) -> Vec<u32> {
        let mut v = vec![0u32; self.period_ms() as usize + 1];
        for &ts in &self.timestamps {
            v[ts as usize] += 1;
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Trace, TraceError> {
        Trace::parse(Path::new("t.trace"), s.as_bytes())
    }

    #[test]
    fn constant_12mbps() {
        let t = parse("1\n").unwrap();
        assert_eq!(t.period_ms(), 1);
        assert!((t.mean_mbps() - 12.0).abs() < 1e-9);
    }

    #[test]
    fn no_trailing_newline_ok() {
        assert_eq!(parse("1\n1\n2").unwrap().opportunities(), 3);
    }

    #[test]
    fn capacity_bins() {
        // 2 opportunities in ms 1..=1000, 1 in 1001..=2000 → 0.024, 0.012 Mbit/s
        let t = parse("1\n1000\n2000\n").unwrap();
        let c = t.capacity_per_interval(1000);
        assert_eq!(c.len(), 2);
        assert!((c[0] - 0.024).abs() < 1e-12 && (c[1] - 0.012).abs() < 1e-12);
    }
}
