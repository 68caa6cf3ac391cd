//! rocinante (contest, docs/algorithms.md): delay-based AIAD against an
//! adaptive baseline.
//!
//! - An EWMA of the RTT samples (`--ewma-weight` on the newest, default 0.01),
//!   started at the first sample.
//! - A sample is "stable" when RTT <= `--rtt-allowance` x EWMA (the EWMA before
//!   this sample). Stable: cwnd += alpha / cwnd per acknowledged packet; not
//!   stable: cwnd -= beta / cwnd per packet and the EWMA is reset to the
//!   smallest RTT seen (the propagation-delay estimate).
//! - Trickle: the window never falls below max(floor, latest RTT /
//!   `--min-interval-ms`), so at least one packet leaves per min interval, and
//!   the floor defaults to 2 packets.
//!
//! A loss or RTO counts as an unstable sample (the contest's "timeout"). Where
//! the rules run: per report, every 10 ms. The fold program carries only the
//! report's latest RTT sample and how many samples there were, so the EWMA
//! folds the latest sample in once per sample (weight 1 - (1 - w)^n, see
//! `contest::Ewma::update_n`) and the stability test is applied to the latest
//! sample with the report's acknowledged packets: the same totals as per ACK
//! while a report's samples agree. Not in the fold program: a weight of 0.01
//! is below the fold language's `ewma` resolution (tenths).

use crate::cc::{Measurement, WindowParams};
use crate::contest::{window_control, Ewma};
use crate::fold::{Cadence, Features, FoldProgram};
use crate::{AlgorithmSpec, Control, Controller};

/// rocinante as an [`AlgorithmSpec`].
pub struct RocinanteSpec;

/// rocinante's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct RocinanteArgs {
    /// Weight of the newest RTT sample in the EWMA, in (0, 1].
    #[arg(long, default_value = "0.01")]
    pub ewma_weight: f64,
    /// A sample is stable when RTT <= allowance x EWMA.
    #[arg(long, default_value = "1.4")]
    pub rtt_allowance: f64,
    /// Stable: cwnd += alpha / cwnd per packet.
    #[arg(long, default_value = "2")]
    pub alpha: f64,
    /// Not stable: cwnd -= beta / cwnd per packet.
    #[arg(long, default_value = "5")]
    pub beta: f64,
    /// Trickle: at least one packet per this interval (cwnd >= RTT / interval), ms.
    #[arg(long, default_value = "25", value_name = "MS")]
    pub min_interval_ms: f64,
}

/// Report every 10 ms.
pub const PROGRAM: FoldProgram =
    FoldProgram { name: "ccplab_rocinante", cadence: Cadence::IntervalUs(10_000), urgent_on_loss: true, features: Features::NONE };

impl AlgorithmSpec for RocinanteSpec {
    const NAME: &'static str = "rocinante";
    const SUMMARY: &'static str = "contest rocinante: AIAD on RTT <= allowance x EWMA(RTT); EWMA reset to min RTT \
        when unstable; trickle floor";
    const SOURCE: &'static str = "cellular congestion-control contest (docs/algorithms.md)";
    const DEFAULT_MIN_CWND_PKTS: &'static str = "2";
    type Args = RocinanteArgs;
    type Flow = Rocinante;

    fn validate(a: &RocinanteArgs) -> Result<(), String> {
        crate::check_range("ewma-weight", a.ewma_weight, 0.0, 1.0 + 1e-12)?;
        crate::check_range("rtt-allowance", a.rtt_allowance, 0.0, 1e3)?;
        crate::check_range("alpha", a.alpha, 0.0, 1e6)?;
        crate::check_range("beta", a.beta, 0.0, 1e6)?;
        crate::check_range("min-interval-ms", a.min_interval_ms, 0.0, 1e6)
    }

    fn new_flow(a: &RocinanteArgs, params: WindowParams) -> Rocinante {
        Rocinante {
            cwnd: params.clamp(params.init_cwnd_pkts),
            params,
            args: a.clone(),
            ewma: Ewma::new(a.ewma_weight),
            min_rtt_us: 0,
            trickle_pkts: 0.0,
        }
    }

    fn program(_a: &RocinanteArgs) -> FoldProgram {
        PROGRAM
    }
}

/// rocinante's per-flow state.
#[derive(Clone, Debug)]
pub struct Rocinante {
    params: WindowParams,
    args: RocinanteArgs,
    cwnd: f64,
    ewma: Ewma,
    min_rtt_us: u64,
    trickle_pkts: f64,
}

impl Rocinante {
    /// Current window, packets.
    pub fn cwnd_pkts(&self) -> f64 {
        self.cwnd
    }

    /// The RTT baseline (EWMA), us.
    pub fn ewma_us(&self) -> Option<f64> {
        self.ewma.value
    }
}

impl Controller for Rocinante {
    fn initial(&self) -> Control {
        window_control(&self.params, self.cwnd)
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        if m.min_rtt_us > 0 && (self.min_rtt_us == 0 || m.min_rtt_us < self.min_rtt_us) {
            self.min_rtt_us = m.min_rtt_us;
        }
        let acked = m.acked_pkts(self.params.mss_bytes);
        let loss = m.timeout || m.lost_pkts > 0;
        if m.rtt_us > 0 || loss {
            let rtt = m.rtt_us as f64;
            let stable = !loss && self.ewma.value.is_none_or(|e| rtt <= self.args.rtt_allowance * e);
            if stable {
                self.ewma.update_n(rtt, m.rtt_samples.max(1));
                self.cwnd += self.args.alpha * acked / self.cwnd;
            } else {
                self.cwnd -= self.args.beta * acked.max(1.0) / self.cwnd;
                if self.min_rtt_us > 0 {
                    self.ewma.value = Some(self.min_rtt_us as f64);
                }
            }
            if m.rtt_us > 0 {
                self.trickle_pkts = rtt / (self.args.min_interval_ms * 1000.0);
            }
        }
        self.cwnd = self.params.clamp(self.cwnd.max(self.trickle_pkts));
        window_control(&self.params, self.cwnd)
    }

    fn state(&self) -> String {
        format!("cwnd_pkts={:.3} ewma_rtt_us={:.0} min_rtt_us={}", self.cwnd, self.ewma.value.unwrap_or(0.0),
            self.min_rtt_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contest::fixed_window::tests::params;

    fn args() -> RocinanteArgs {
        RocinanteArgs { ewma_weight: 0.01, rtt_allowance: 1.4, alpha: 2.0, beta: 5.0, min_interval_ms: 25.0 }
    }

    fn report(acked: u64, rtt_ms: u64) -> Measurement {
        Measurement { acked_bytes: acked * 1000, rtt_us: rtt_ms * 1000, min_rtt_us: rtt_ms * 1000, rtt_samples: 1,
            ..Default::default() }
    }

    #[test]
    fn decreases_when_rtt_exceeds_allowance_and_resets_ewma_to_min_rtt() {
        let mut r = RocinanteSpec::new_flow(&args(), params());
        r.on_report(&report(5, 42));
        assert_eq!(r.ewma_us(), Some(42_000.0), "EWMA starts at the first sample");
        assert!((r.cwnd_pkts() - 11.0).abs() < 1e-12, "stable: +2 x 5 / 10");
        r.on_report(&report(2, 58));
        // 58 <= 1.4 x 42 = 58.8: stable; EWMA moves 1 % toward 58.
        assert!((r.ewma_us().unwrap() - (0.99 * 42_000.0 + 0.01 * 58_000.0)).abs() < 1e-6);
        let before = r.cwnd_pkts();
        assert!((before - (11.0 + 4.0 / 11.0)).abs() < 1e-12);
        // 70 ms > 1.4 x EWMA (about 59 ms): -5 x 3 / cwnd, EWMA back to the min RTT (42 ms).
        r.on_report(&Measurement { min_rtt_us: 60_000, ..report(3, 70) });
        assert!((r.cwnd_pkts() - (before - 15.0 / before)).abs() < 1e-12);
        assert_eq!(r.ewma_us(), Some(42_000.0));
    }

    #[test]
    fn trickle_keeps_a_packet_per_min_interval() {
        let mut r = RocinanteSpec::new_flow(&args(), WindowParams { min_cwnd_pkts: 2.0, ..params() });
        r.on_report(&report(1, 40));
        for _ in 0..50 {
            r.on_report(&report(10, 400));
        }
        // 400 ms RTT / 25 ms = 16 packets per RTT at least.
        assert!((r.cwnd_pkts() - 16.0).abs() < 1e-9, "{}", r.cwnd_pkts());
    }
}
