//! TCP Vegas (Brakmo and Peterson 1995) as Linux tcp_vegas.c, on Portus.
//!
//! Once per round (one report per RTT = one Vegas round), with `baseRTT` the
//! smallest RTT sample of the flow and `rtt` the smallest sample of the round:
//! - `diff = cwnd x (rtt - baseRTT) / baseRTT`, the packets the flow keeps
//!   queued at the bottleneck; `target = cwnd x baseRTT / rtt`.
//! - slow start: if `diff > gamma`, leave it: cwnd = min(cwnd, target + 1),
//!   ssthresh = min(ssthresh, cwnd - 1); otherwise grow by the acked packets
//!   (tcp_slow_start).
//! - congestion avoidance: `diff > beta`: cwnd -= 1 (and ssthresh = min(ssthresh,
//!   cwnd - 1)); `diff < alpha`: cwnd += 1; else hold. So the flow holds
//!   alpha..beta packets in the queue.
//! - then cwnd >= 2 and ssthresh = max(ssthresh, 3/4 cwnd) (tcp_current_ssthresh).
//! - a round with at most 2 RTT samples falls back to Reno (tcp_vegas.c does
//!   the same: too few samples to tell a queue from delayed ACKs).
//! - losses and timeouts as Reno ([`crate::reno`]): Linux Vegas is off outside
//!   the Open state and uses tcp_reno_ssthresh.
//!
//! Fold program: [`crate::fold`]'s fields, one report per RTT, urgent on loss
//! or timeout. Differences from Linux: the round is the report interval (the
//! latest RTT sample) rather than "until snd_nxt of the round start is acked";
//! increases only when cwnd-limited (Linux Vegas' own rule does not check).

use crate::cc::{
    cwnd_limited, slow_start, LossGuard, Measurement, ReportEvent, WindowAlgorithm,
    WindowParams,
};
use crate::fold::{Cadence, Features, FoldProgram};
use crate::AlgorithmSpec;

/// Vegas as an [`AlgorithmSpec`].
pub struct VegasSpec;

/// Vegas's flags (Linux tcp_vegas.c module parameters).
#[derive(clap::Args, Clone, Debug)]
pub struct VegasArgs {
    /// Lower bound of packets queued: below it cwnd += 1 per RTT.
    #[arg(long, default_value = "2", value_name = "PKTS")]
    pub alpha: f64,
    /// Upper bound of packets queued: above it cwnd -= 1 per RTT.
    #[arg(long, default_value = "4", value_name = "PKTS")]
    pub beta: f64,
    /// Slow start ends when more than gamma packets are queued.
    #[arg(long, default_value = "1", value_name = "PKTS")]
    pub gamma: f64,
}

/// Vegas's fold program: one report (= one Vegas round) per RTT.
pub const PROGRAM: FoldProgram =
    FoldProgram { name: "ccplab_vegas", cadence: Cadence::PerRtt(1), urgent_on_loss: true, features: Features::NONE };

impl AlgorithmSpec for VegasSpec {
    const NAME: &'static str = "vegas";
    const SUMMARY: &'static str = "TCP Vegas: keep alpha..beta packets queued (diff = cwnd (rtt - baseRTT) / baseRTT), \
        +-1 packet per RTT; Reno on loss";
    const SOURCE: &'static str = "Brakmo and Peterson 1995; Linux tcp_vegas.c";
    const DEFAULT_MIN_CWND_PKTS: &'static str = "2";
    type Args = VegasArgs;
    type Flow = Vegas;

    fn validate(a: &VegasArgs) -> Result<(), String> {
        crate::check_range("alpha", a.alpha, 0.0, 1e6)?;
        crate::check_range("beta", a.beta, 0.0, 1e6)?;
        crate::check_range("gamma", a.gamma, 0.0, 1e6)?;
        if a.beta < a.alpha {
            return Err(format!("--beta ({}) must be >= --alpha ({})", a.beta, a.alpha));
        }
        Ok(())
    }

    fn new_flow(a: &VegasArgs, params: WindowParams) -> Vegas {
        Vegas::new(params, a.alpha, a.beta, a.gamma)
    }

    fn program(_args: &VegasArgs) -> FoldProgram {
        PROGRAM
    }
}

/// Vegas's per-flow state.
#[derive(Clone, Debug)]
pub struct Vegas {
    params: WindowParams,
    alpha: f64,
    beta: f64,
    gamma: f64,
    cwnd: f64,
    ssthresh: f64,
    /// Smallest RTT sample of the flow, us (0 = none yet).
    base_rtt_us: u64,
    /// `diff` of the last Vegas round, packets (for logs and tests).
    last_diff: Option<f64>,
    guard: LossGuard,
}

impl Vegas {
    /// A new flow in slow start.
    pub fn new(params: WindowParams, alpha: f64, beta: f64, gamma: f64) -> Self {
        Vegas {
            cwnd: params.clamp(params.init_cwnd_pkts),
            ssthresh: params.init_ssthresh_pkts,
            params,
            alpha,
            beta,
            gamma,
            base_rtt_us: 0,
            last_diff: None,
            guard: LossGuard::default(),
        }
    }

    /// The packets queued by the flow as Vegas estimated them last, if any.
    pub fn last_diff(&self) -> Option<f64> {
        self.last_diff
    }

    /// The flow's minimum RTT, us.
    pub fn base_rtt_us(&self) -> u64 {
        self.base_rtt_us
    }

    fn reno_growth(&mut self, m: &Measurement, acked: f64) {
        let leftover = slow_start(&mut self.cwnd, self.ssthresh, acked);
        if leftover > 0.0 && cwnd_limited(m, self.cwnd, false) {
            self.cwnd += leftover / self.cwnd;
        }
    }

    fn vegas_round(&mut self, m: &Measurement) {
        let acked = m.acked_pkts(self.params.mss_bytes);
        let in_ss = self.cwnd < self.ssthresh;
        if !cwnd_limited(m, self.cwnd, in_ss) && m.inflight_max_pkts > 0 {
            self.last_diff = None;
            return;
        }
        if m.rtt_samples <= 2 || self.base_rtt_us == 0 || m.min_rtt_us == 0 {
            self.last_diff = None;
            self.reno_growth(m, acked);
            return;
        }
        let base = self.base_rtt_us as f64;
        let rtt = m.min_rtt_us as f64;
        let diff = self.cwnd * (rtt - base) / base;
        let target = self.cwnd * base / rtt;
        self.last_diff = Some(diff);
        if in_ss {
            if diff > self.gamma {
                self.cwnd = self.cwnd.min(target + 1.0);
                self.ssthresh = self.ssthresh.min(self.cwnd - 1.0);
            } else {
                slow_start(&mut self.cwnd, self.ssthresh, acked);
            }
        } else if diff > self.beta {
            self.cwnd -= 1.0;
            self.ssthresh = self.ssthresh.min(self.cwnd - 1.0);
        } else if diff < self.alpha {
            self.cwnd += 1.0;
        }
        self.cwnd = self.cwnd.max(2.0);
        // tcp_current_ssthresh: max(ssthresh, 3/4 cwnd).
        self.ssthresh = self.ssthresh.max(0.75 * self.cwnd);
    }
}

impl WindowAlgorithm for Vegas {
    fn on_report(&mut self, m: &Measurement) -> u32 {
        if m.min_rtt_us > 0 && (self.base_rtt_us == 0 || m.min_rtt_us < self.base_rtt_us) {
            self.base_rtt_us = m.min_rtt_us;
        }
        match self.guard.classify(m) {
            ReportEvent::Timeout => {
                if !self.guard.active() {
                    self.ssthresh = (self.cwnd / 2.0).max(2.0);
                }
                let outstanding = (m.outstanding_pkts() as f64).max(self.cwnd);
                self.cwnd = 1.0;
                self.guard.start(outstanding, self.params.mss_bytes, true);
            }
            ReportEvent::LossEvent => {
                self.ssthresh = (self.cwnd / 2.0).max(2.0);
                self.cwnd = self.ssthresh;
                self.guard.start((m.outstanding_pkts() as f64).max(1.0), self.params.mss_bytes, false);
            }
            ReportEvent::Growth if self.guard.after_timeout() => {
                let acked = m.acked_pkts(self.params.mss_bytes);
                self.reno_growth(m, acked);
            }
            ReportEvent::Growth => self.vegas_round(m),
            ReportEvent::Hold => {}
        }
        self.cwnd = self.params.clamp(self.cwnd);
        self.cwnd_bytes()
    }

    fn cwnd_pkts(&self) -> f64 {
        self.cwnd
    }

    fn ssthresh_pkts(&self) -> f64 {
        self.ssthresh
    }

    fn phase(&self) -> crate::cc::Phase {
        self.guard.phase(self.cwnd, self.ssthresh)
    }

    fn params(&self) -> &WindowParams {
        &self.params
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::Phase;

    const MSS: u32 = 1000;
    const BASE: u64 = 40_000;

    fn params(init: f64, ssthresh: f64) -> WindowParams {
        WindowParams {
            mss_bytes: MSS,
            init_cwnd_pkts: init,
            init_ssthresh_pkts: ssthresh,
            min_cwnd_pkts: 2.0,
            max_cwnd_pkts: 1e6,
        }
    }

    /// A round acknowledging `acked` packets whose smallest RTT is `rtt_us`.
    fn round(acked: f64, rtt_us: u64) -> Measurement {
        Measurement {
            acked_bytes: (acked * f64::from(MSS)) as u64,
            rtt_us,
            min_rtt_us: rtt_us,
            rtt_samples: 10,
            ..Default::default()
        }
    }

    fn vegas(init: f64, ssthresh: f64) -> Vegas {
        let mut v = Vegas::new(params(init, ssthresh), 2.0, 4.0, 1.0);
        // First round sees the propagation delay: baseRTT = 40 ms.
        v.on_report(&Measurement { rtt_samples: 1, ..round(0.0, BASE) });
        v
    }

    #[test]
    fn diff_rule_in_congestion_avoidance() {
        // cwnd 20: rtt 42 ms -> diff = 20 x 2 / 40 = 1 < alpha: +1.
        let mut v = vegas(20.0, 10.0);
        v.on_report(&round(20.0, 42_000));
        assert_eq!(v.last_diff(), Some(1.0));
        assert_eq!(v.cwnd_pkts(), 21.0);
        // cwnd 21: rtt 44 ms -> diff = 21 x 4 / 40 = 2.1 in [alpha, beta]: hold.
        v.on_report(&round(21.0, 44_000));
        assert!((v.last_diff().unwrap() - 2.1).abs() < 1e-9);
        assert_eq!(v.cwnd_pkts(), 21.0);
        // rtt 50 ms -> diff = 21 x 10 / 40 = 5.25 > beta: -1.
        v.on_report(&round(21.0, 50_000));
        assert_eq!(v.cwnd_pkts(), 20.0);
        // The queue estimate uses the round's minimum, baseRTT the flow's.
        assert_eq!(v.base_rtt_us(), BASE);
    }

    #[test]
    fn slow_start_ends_when_more_than_gamma_queued() {
        let mut v = vegas(10.0, f64::INFINITY);
        v.on_report(&round(10.0, BASE));
        assert_eq!(v.cwnd_pkts(), 20.0, "no queue: slow start doubles");
        // rtt 48 ms: diff = 20 x 8 / 40 = 4 > gamma: cwnd = min(cwnd, target + 1)
        // with target = 20 x 40 / 48 = 16.67; ssthresh = cwnd - 1, then >= 3/4 cwnd.
        v.on_report(&round(20.0, 48_000));
        let target = 20.0 * 40.0 / 48.0;
        assert!((v.cwnd_pkts() - (target + 1.0)).abs() < 1e-9);
        assert!((v.ssthresh_pkts() - (target + 1.0 - 1.0)).abs() < 1e-9);
        assert_eq!(v.phase(), Phase::CongestionAvoidance);
    }

    #[test]
    fn few_samples_fall_back_to_reno_and_loss_halves() {
        let mut v = vegas(20.0, 10.0);
        v.on_report(&Measurement { rtt_samples: 2, ..round(20.0, 60_000) });
        assert_eq!(v.last_diff(), None);
        assert!((v.cwnd_pkts() - 21.0).abs() < 1e-9, "Reno: +1 per window");
        let c = v.cwnd_pkts();
        v.on_report(&Measurement { lost_pkts: 1, inflight_max_pkts: 21, ..round(0.0, 42_000) });
        assert_eq!(v.cwnd_pkts(), c / 2.0);
        assert_eq!(v.phase(), Phase::Recovery);
    }
}
