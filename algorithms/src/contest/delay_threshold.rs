//! delay-threshold (contest, docs/algorithms.md): compare each RTT
//! sample with a threshold theta.
//!
//! - `--mode aiad`: RTT <= theta: cwnd += alpha / cwnd; else cwnd -= beta /
//!   cwnd (per acknowledged packet). Defaults alpha 1, beta 10, theta 90 ms.
//! - `--mode aimd`: RTT <= theta: cwnd += alpha / cwnd per packet; else cwnd
//!   /= md, at most once per RTT. Defaults alpha 3, md 1.02, theta 80 ms.
//! - `--mode mimd`: RTT <= theta: cwnd *= mi once per RTT; else cwnd /= md
//!   once per RTT. Defaults mi 1.5, md 1.05, theta 80 ms.
//!
//! A packet marked lost or an RTO counts as an RTT above theta (the contest's
//! "timeout", docs/algorithms.md). Where the rules run: per report, every 10 ms
//! (and at once on a loss), with the report's acknowledged packets as the
//! per-ACK count. aiad compares the report's latest RTT sample with theta (the
//! same totals as per ACK while all of a report's ACKs fall on one side);
//! aimd and mimd decrease when any ACK of the report was above theta (the
//! report's largest sample, exact for "once per RTT on an RTT above theta")
//! and otherwise apply the increase. Not in the fold program because the once-per-RTT guards and the
//! float divisions need state the shared fold program does not keep.

use crate::cc::{Measurement, WindowParams};
use crate::contest::{window_control, OncePerRtt};
use crate::fold::{Cadence, Features, FoldProgram};
use crate::{AlgorithmSpec, Control, Controller};

/// delay-threshold as an [`AlgorithmSpec`].
pub struct DelayThresholdSpec;

/// How the window reacts on each side of the threshold.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Additive increase, additive decrease (per packet).
    Aiad,
    /// Additive increase per packet, multiplicative decrease once per RTT.
    Aimd,
    /// Multiplicative increase and decrease, each at most once per RTT.
    Mimd,
}

/// delay-threshold's flags; unset numbers take the mode's defaults.
#[derive(clap::Args, Clone, Debug)]
pub struct DelayThresholdArgs {
    /// aiad, aimd or mimd.
    #[arg(long, value_enum, default_value = "aiad")]
    pub mode: Mode,
    /// RTT threshold theta, ms [default: 90 aiad, 80 aimd/mimd].
    #[arg(long, value_name = "MS")]
    pub theta_ms: Option<f64>,
    /// Additive increase per packet: cwnd += alpha/cwnd [default: 1 aiad, 3 aimd].
    #[arg(long)]
    pub alpha: Option<f64>,
    /// Additive decrease per packet in aiad: cwnd -= beta/cwnd [default: 10].
    #[arg(long)]
    pub beta: Option<f64>,
    /// Multiplicative decrease: cwnd /= md once per RTT [default: 1.02 aimd, 1.05 mimd].
    #[arg(long)]
    pub md: Option<f64>,
    /// Multiplicative increase in mimd: cwnd *= mi once per RTT [default: 1.5].
    #[arg(long)]
    pub mi: Option<f64>,
}

impl Default for DelayThresholdArgs {
    fn default() -> Self {
        DelayThresholdArgs { mode: Mode::Aiad, theta_ms: None, alpha: None, beta: None, md: None, mi: None }
    }
}

/// The numbers of one mode with every default filled in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule {
    pub mode: Mode,
    pub theta_us: u64,
    pub alpha: f64,
    pub beta: f64,
    pub md: f64,
    pub mi: f64,
}

impl DelayThresholdArgs {
    /// The mode's rule: flags given win, the rest are the mode's defaults in the contest's spec (docs/algorithms.md).
    pub fn rule(&self) -> Rule {
        let (theta, alpha, md) = match self.mode {
            Mode::Aiad => (90.0, 1.0, 1.02),
            Mode::Aimd => (80.0, 3.0, 1.02),
            Mode::Mimd => (80.0, 0.0, 1.05),
        };
        Rule {
            mode: self.mode,
            theta_us: (self.theta_ms.unwrap_or(theta) * 1000.0) as u64,
            alpha: self.alpha.unwrap_or(alpha),
            beta: self.beta.unwrap_or(10.0),
            md: self.md.unwrap_or(md),
            mi: self.mi.unwrap_or(1.5),
        }
    }
}

/// Report every 10 ms and at once on loss or timeout.
pub const PROGRAM: FoldProgram =
    FoldProgram { name: "ccplab_delay_threshold", cadence: Cadence::IntervalUs(10_000), urgent_on_loss: true, features: Features::NONE };

impl AlgorithmSpec for DelayThresholdSpec {
    const NAME: &'static str = "delay-threshold";
    const SUMMARY: &'static str = "contest delay-threshold: RTT <= theta grows, above shrinks (--mode aiad|aimd|mimd)";
    const SOURCE: &'static str = "cellular congestion-control contest (docs/algorithms.md)";
    type Args = DelayThresholdArgs;
    type Flow = DelayThreshold;

    fn validate(a: &DelayThresholdArgs) -> Result<(), String> {
        for (flag, v, lo) in [("theta-ms", a.theta_ms, 0.0), ("alpha", a.alpha, 0.0), ("beta", a.beta, 0.0),
            ("md", a.md, 1.0), ("mi", a.mi, 1.0)]
        {
            if let Some(v) = v {
                crate::check_range(flag, v, lo, 1e6)?;
            }
        }
        Ok(())
    }

    fn new_flow(a: &DelayThresholdArgs, params: WindowParams) -> DelayThreshold {
        DelayThreshold::new(a.rule(), params)
    }

    fn program(_a: &DelayThresholdArgs) -> FoldProgram {
        PROGRAM
    }
}

/// delay-threshold's per-flow state.
#[derive(Clone, Debug)]
pub struct DelayThreshold {
    params: WindowParams,
    rule: Rule,
    cwnd: f64,
    up: OncePerRtt,
    down: OncePerRtt,
}

impl DelayThreshold {
    /// A new flow at the shared initial window.
    pub fn new(rule: Rule, params: WindowParams) -> Self {
        DelayThreshold { cwnd: params.clamp(params.init_cwnd_pkts), params, rule, up: OncePerRtt::default(),
            down: OncePerRtt::default() }
    }

    /// Current window, packets.
    pub fn cwnd_pkts(&self) -> f64 {
        self.cwnd
    }

    /// Apply one report to the window (clamped); reports without an RTT sample
    /// and without a loss change nothing.
    pub fn update(&mut self, m: &Measurement) -> f64 {
        let loss = m.timeout || m.lost_pkts > 0;
        if m.rtt_us == 0 && !loss {
            return self.cwnd;
        }
        let sample = match self.rule.mode {
            Mode::Aiad => m.rtt_us,
            Mode::Aimd | Mode::Mimd => crate::contest::largest_rtt_us(m),
        };
        let above = loss || sample > self.rule.theta_us;
        let acked = m.acked_pkts(self.params.mss_bytes);
        let rtt = if m.rtt_us > 0 { m.rtt_us } else { self.rule.theta_us };
        let r = self.rule;
        match (r.mode, above) {
            (Mode::Aiad | Mode::Aimd, false) => self.cwnd += r.alpha * acked / self.cwnd,
            (Mode::Aiad, true) => self.cwnd -= r.beta * acked / self.cwnd,
            (Mode::Aimd | Mode::Mimd, true) => {
                if self.down.try_act(m.now_us, rtt) {
                    self.cwnd /= r.md;
                }
            }
            (Mode::Mimd, false) => {
                if self.up.try_act(m.now_us, rtt) {
                    self.cwnd *= r.mi;
                }
            }
        }
        self.cwnd = self.params.clamp(self.cwnd);
        self.cwnd
    }
}

impl Controller for DelayThreshold {
    fn initial(&self) -> Control {
        window_control(&self.params, self.cwnd)
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        let c = self.update(m);
        window_control(&self.params, c)
    }

    fn state(&self) -> String {
        format!("cwnd_pkts={:.3} mode={:?}", self.cwnd, self.rule.mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contest::fixed_window::tests::{params, report};

    fn flow(mode: Mode) -> DelayThreshold {
        DelayThreshold::new(DelayThresholdArgs { mode, ..Default::default() }.rule(), params())
    }

    #[test]
    fn defaults_per_mode() {
        let r = |mode| DelayThresholdArgs { mode, ..Default::default() }.rule();
        assert_eq!((r(Mode::Aiad).theta_us, r(Mode::Aiad).alpha, r(Mode::Aiad).beta), (90_000, 1.0, 10.0));
        assert_eq!((r(Mode::Aimd).theta_us, r(Mode::Aimd).alpha, r(Mode::Aimd).md), (80_000, 3.0, 1.02));
        assert_eq!((r(Mode::Mimd).theta_us, r(Mode::Mimd).mi, r(Mode::Mimd).md), (80_000, 1.5, 1.05));
    }

    #[test]
    fn aiad_adds_and_subtracts_per_packet() {
        let mut f = flow(Mode::Aiad);
        f.update(&report(0, 5, 90));
        assert!((f.cwnd_pkts() - 10.5).abs() < 1e-12, "90 ms <= theta: +5/10");
        f.update(&report(10, 2, 91));
        assert!((f.cwnd_pkts() - (10.5 - 20.0 / 10.5)).abs() < 1e-12, "above: -10 x 2 / cwnd");
        let c = f.cwnd_pkts();
        f.update(&report(20, 2, 0));
        assert_eq!(f.cwnd_pkts(), c, "no RTT sample: no change");
    }

    #[test]
    fn aimd_divides_once_per_rtt() {
        let mut f = flow(Mode::Aimd);
        f.update(&report(0, 10, 50));
        assert!((f.cwnd_pkts() - 13.0).abs() < 1e-12, "+3 x 10 / 10");
        f.update(&report(10, 10, 100));
        f.update(&report(20, 10, 100));
        assert!((f.cwnd_pkts() - 13.0 / 1.02).abs() < 1e-12);
        f.update(&report(110, 0, 100));
        assert!((f.cwnd_pkts() - 13.0 / 1.02 / 1.02).abs() < 1e-12);
        // One ACK above theta (the report's largest sample) is enough; aiad looks at the latest.
        let c = f.cwnd_pkts();
        f.update(&Measurement { max_rtt_us: 81_000, ..report(300, 5, 60) });
        assert!((f.cwnd_pkts() - c / 1.02).abs() < 1e-12);
        let mut g = flow(Mode::Aiad);
        g.update(&Measurement { max_rtt_us: 120_000, ..report(0, 5, 60) });
        assert!((g.cwnd_pkts() - 10.5).abs() < 1e-12);
    }

    #[test]
    fn mimd_multiplies_once_per_rtt_and_loss_counts_as_above() {
        let mut f = flow(Mode::Mimd);
        f.update(&report(0, 10, 50));
        f.update(&report(10, 10, 50));
        assert!((f.cwnd_pkts() - 15.0).abs() < 1e-12, "x1.5 once per RTT");
        f.update(&report(60, 10, 50));
        assert!((f.cwnd_pkts() - 22.5).abs() < 1e-12);
        f.update(&Measurement { lost_pkts: 1, ..report(70, 0, 40) });
        assert!((f.cwnd_pkts() - 22.5 / 1.05).abs() < 1e-12, "a loss is above theta");
    }
}
