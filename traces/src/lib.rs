//! Mahimahi packet-delivery traces: reading, validation, atomic writing,
//! summaries, and seeded step-change trace generation.
//!
//! A mahimahi trace (Netravali et al., "Mahimahi: Accurate Record-and-Replay
//! for HTTP", USENIX ATC 2015; format of `mm-link`) is a text file with one
//! millisecond timestamp per line. Each line is one *delivery opportunity*:
//! the chance to send one 1500-byte packet across the link at that
//! millisecond. A timestamp repeated k times gives k opportunities in that
//! millisecond. The trace loops with period = its last timestamp, so
//! 12 Mbit/s (one 1500-byte packet per ms) is the one-line file `1`.

pub mod cellular;
pub mod error;
pub mod generate;
pub mod trace;

pub use error::{GenerateError, TraceError};
pub use generate::{Segment, StepTraceSpec};
pub use trace::{Summary, Trace, MBPS_PER_OPPORTUNITY_PER_MS, PACKET_BYTES};
