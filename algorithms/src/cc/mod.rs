//! The congestion-control building blocks the algorithms share, one module
//! per idea:
//! - `measurement`: what a report says ([`Measurement`]);
//! - `bounds`: window bounds and start values ([`WindowParams`]);
//! - `rtt`: RTT estimation ([`RttEstimator`]);
//! - `window`: the window-algorithm vocabulary ([`WindowAlgorithm`],
//!   [`Phase`], [`cwnd_limited`]);
//! - `loss_guard`: one reduction per window of losses ([`LossGuard`]);
//! - `prr`: Proportional Rate Reduction ([`Prr`], [`FoldPrr`]);
//! - `slow_start`: slow start per report and in the fold ([`slow_start()`],
//!   [`FoldSlowStart`]);
//! - `pacing`: the kernel's pacing rate ([`KernelPacing`], [`Paced`],
//!   [`ReportPacer`]).
//!
//! Each is used under its name here (`crate::cc::Measurement`): a rate
//! controller takes what a report says and an RTT estimate without the
//! window vocabulary. Nothing here talks to Portus, so every algorithm can be
//! unit-tested on a scripted sequence of [`Measurement`]s. Windows are kept in
//! packets (f64) as in the RFCs' formulas and handed to the datapath in bytes
//! (packets x MSS).

mod bounds;
mod loss_guard;
mod measurement;
mod pacing;
mod prr;
mod rtt;
mod slow_start;
mod window;

pub use bounds::WindowParams;
pub use loss_guard::{LossGuard, ReportEvent};
pub use measurement::Measurement;
pub use pacing::{
    KernelPacing, Paced, PacingMode, ReportPacer, SocketPacing, FOLD_SLOW_START_PACING_WINDOW, UNPACED_RATE_BYTES_PER_SEC,
};
pub use prr::{commanded_window, FoldPrr, Prr};
pub use rtt::RttEstimator;
pub use slow_start::{slow_start, FoldSlowStart, TAKEOVER_MARK_BYTES};
pub use window::{cwnd_limited, Phase, WindowAlgorithm};

/// The window bounds the unit tests use (1000-byte packets, 10 to start, at
/// most 50, no ssthresh).
#[cfg(test)]
pub(crate) use bounds::tests::params as test_params;
