//! Error types. Every variant names the input (file) and, for content
//! errors, the 1-based line, so a user can open the file at the fault.

use std::path::PathBuf;

/// Why a trace could not be read or written.
///
/// `path` is the file as given (or `<reader>` when parsed from a stream);
/// `line` is 1-based.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: cannot read trace: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: cannot write trace: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: trace is empty (a mahimahi trace needs at least one timestamp line)")]
    Empty { path: PathBuf },
    #[error("{path}:{line}: blank line (only a single trailing newline is allowed)")]
    BlankLine { path: PathBuf, line: usize },
    #[error("{path}:{line}: {content:?} is not a non-negative integer millisecond timestamp")]
    NotInteger {
        path: PathBuf,
        line: usize,
        content: String,
    },
    #[error("{path}:{line}: timestamp {ts} ms is smaller than the previous timestamp {prev} ms (timestamps must not decrease)")]
    Decreasing {
        path: PathBuf,
        line: usize,
        prev: u64,
        ts: u64,
    },
    #[error("{path}:{line}: last timestamp is 0, but mahimahi uses the last timestamp as the loop period, which must be > 0 ms")]
    ZeroPeriod { path: PathBuf, line: usize },
}

/// Why a step-change trace specification is invalid.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GenerateError {
    #[error("duration must be a positive whole number of milliseconds, got {0} ms")]
    BadDuration(f64),
    #[error("the schedule is empty: give at least the rate from time 0")]
    EmptySchedule,
    #[error("the schedule must start at 0 ms, first segment starts at {0} ms")]
    ScheduleNotFromZero(u64),
    #[error("schedule start times must strictly increase: {prev} ms then {next} ms")]
    ScheduleNotIncreasing { prev: u64, next: u64 },
    #[error("segment starting at {start_ms} ms starts at or after the end of the trace ({duration_ms} ms)")]
    SegmentAfterEnd { start_ms: u64, duration_ms: u64 },
    #[error("rate {0} Mbit/s is invalid: rates must be finite and >= 0")]
    BadRate(f64),
    #[error("sigma {0} Mbit/s is invalid: must be finite and >= 0")]
    BadSigma(f64),
}
