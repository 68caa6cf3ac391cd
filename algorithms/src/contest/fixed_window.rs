//! fixed-window (contest, docs/algorithms.md): cwnd = W packets, always.
//!
//! Per-ACK rules: none; the window never changes, so the fold program only
//! reports once per RTT (for the log) and not urgently on a loss: losses,
//! timeouts and RTT do not move the window. An RTO is still reported at once
//! (as in every program, `fold.rs`), so the window is commanded again before
//! the kernel's loss window drives the flow. The shared `--init-cwnd-pkts` is
//! ignored (the window is `--window` from the first packet); the floor and
//! ceiling (`--min-cwnd-pkts`, `--max-cwnd-pkts`) still clamp it.

use crate::cc::{Measurement, WindowParams};
use crate::contest::window_control;
use crate::fold::{Cadence, Features, FoldProgram};
use crate::{AlgorithmSpec, Control, Controller};

/// fixed-window as an [`AlgorithmSpec`].
pub struct FixedWindowSpec;

/// fixed-window's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct FixedWindowArgs {
    /// The congestion window, packets (kept for the whole flow).
    #[arg(long, default_value = "12", value_name = "PKTS")]
    pub window: f64,
}

/// One report per RTT (log only); urgent only on an RTO.
pub const PROGRAM: FoldProgram =
    FoldProgram { name: "ccplab_fixed_window", cadence: Cadence::PerRtt(1), urgent_on_loss: false, features: Features::NONE };

impl AlgorithmSpec for FixedWindowSpec {
    const NAME: &'static str = "fixed-window";
    const SUMMARY: &'static str = "contest fixed-window: cwnd = --window packets, always";
    const SOURCE: &'static str = "cellular congestion-control contest (docs/algorithms.md)";
    type Args = FixedWindowArgs;
    type Flow = FixedWindow;

    fn validate(a: &FixedWindowArgs) -> Result<(), String> {
        crate::check_range("window", a.window, 0.0, 1e7)
    }

    fn new_flow(a: &FixedWindowArgs, params: WindowParams) -> FixedWindow {
        FixedWindow { params, window: a.window }
    }

    fn program(_a: &FixedWindowArgs) -> FoldProgram {
        PROGRAM
    }
}

/// The per-flow state: just the window.
#[derive(Clone, Debug)]
pub struct FixedWindow {
    params: WindowParams,
    window: f64,
}

impl Controller for FixedWindow {
    fn initial(&self) -> Control {
        window_control(&self.params, self.window)
    }

    fn on_report(&mut self, _m: &Measurement) -> Control {
        window_control(&self.params, self.window)
    }

    fn state(&self) -> String {
        format!("cwnd_pkts={:.3}", self.params.clamp(self.window))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// [`crate::cc::test_params`] with a ceiling of 100 packets.
    pub(crate) fn params() -> WindowParams {
        WindowParams { max_cwnd_pkts: 100.0, ..crate::cc::test_params() }
    }

    /// A report at `now_ms` acknowledging `acked` packets of [`params`]' 1000-byte MSS, latest RTT `rtt_ms`.
    pub(crate) fn report(now_ms: u64, acked: u64, rtt_ms: u64) -> Measurement {
        Measurement { now_us: now_ms * 1000, acked_bytes: acked * 1000, rtt_us: rtt_ms * 1000, ..Default::default() }
    }

    #[test]
    fn window_never_moves() {
        let mut f = FixedWindowSpec::new_flow(&FixedWindowArgs { window: 20.0 }, params());
        assert_eq!(f.initial().cwnd_bytes, Some(20_000));
        for m in [
            Measurement { lost_pkts: 5, ..Default::default() },
            Measurement { timeout: true, ..Default::default() },
            Measurement { rtt_us: 900_000, acked_bytes: 50_000, ..Default::default() },
        ] {
            assert_eq!(f.on_report(&m).cwnd_bytes, Some(20_000));
        }
        // The ceiling still applies.
        let f = FixedWindowSpec::new_flow(&FixedWindowArgs { window: 500.0 }, params());
        assert_eq!(f.initial().cwnd_bytes, Some(100_000));
    }
}
