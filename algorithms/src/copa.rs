//! Copa (Arun and Balakrishnan, NSDI 2018), default mode delta = 0.5, with
//! velocity and the switch to competitive mode, on Portus.
//!
//! Per report (two per RTT, so each report's minimum RTT is the paper's
//! RTT_standing, the minimum over the last srtt/2):
//! - RTT_min: the minimum RTT over the last 10 s; queueing delay
//!   d_q = RTT_standing - RTT_min.
//! - target rate lambda_t = 1 / (delta d_q) packets/s; current rate
//!   lambda = cwnd / RTT_standing. lambda <= lambda_t: increase, else decrease,
//!   by v / (delta cwnd) per acknowledged packet (applied with the report's
//!   total acked packets).
//! - slow start: cwnd doubles per RTT (+acked packets) until lambda first
//!   exceeds lambda_t.
//! - velocity v: once per RTT the direction of cwnd's change is compared with
//!   the previous RTT's; after 3 RTTs in the same direction v doubles every
//!   RTT; a change of direction (or a decision against the current direction)
//!   resets v to 1.
//! - pacing rate = 2 cwnd / RTT_standing (the paper paces at twice the rate).
//! - mode switching (§2.2, `--mode-switch true`; off by default, see the flag):
//!   the queue counts as "nearly empty" when d_q is
//!   below 10 % of the largest queueing delay of the last 4 RTTs. If it was
//!   nearly empty at least once in the last 5 RTTs Copa runs in default mode
//!   (delta = `--delta`); otherwise in competitive mode, where 1/delta grows by
//!   1 per RTT and halves on a loss, never below 1/`--delta`.
//! - losses: ignored in default mode (Copa is delay-based); an RTO resets cwnd
//!   to the floor and v to 1, and slow start restarts.
//!
//! Fold program: [`crate::fold`]'s fields, two reports per RTT, urgent on loss
//! or timeout. Standing queue the paper predicts: about 1/delta packets per
//! flow (2 at delta 0.5); checked by experiments/tests/test_claims.py (docs/algorithms.md). Differences from
//! the paper: per-report rather than per-ACK updates; the largest queueing
//! delay of an RTT is taken from each report's largest RTT sample (`maxrtt`).

use crate::cc::{Measurement, RttEstimator, WindowParams};
use crate::fold::{Cadence, Features, FoldProgram};
use crate::{AlgorithmSpec, Control, Controller};
use std::collections::VecDeque;

/// Copa as an [`AlgorithmSpec`].
pub struct CopaSpec;

/// Copa's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct CopaArgs {
    /// delta of the default mode: the flow aims at 1/delta packets queued. In (0, 1].
    #[arg(long, default_value = "0.5")]
    pub delta: f64,
    /// Switch to competitive mode when the queue never nearly empties in 5 RTTs (§2.2).
    /// Off by default: with per-report control a lone flow's queue rarely drains below
    /// 10 % of its recent maximum, so the rule took a single flow into competitive
    /// mode, where 1/delta grew to ~55 and the queue to ~14 packets (measured).
    #[arg(long, default_value = "false", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub mode_switch: bool,
    /// Pacing rate = gain x cwnd / RTT_standing (the paper: 2).
    #[arg(long, default_value = "2")]
    pub pacing_gain: f64,
    /// Window of the RTT_min filter, seconds.
    #[arg(long, default_value = "10")]
    pub min_rtt_window_s: f64,
}

/// Copa's fold program: two reports per RTT, urgent on loss or timeout.
pub const PROGRAM: FoldProgram =
    FoldProgram { name: "ccplab_copa", cadence: Cadence::PerRtt(2), urgent_on_loss: true, features: Features::NONE };

impl AlgorithmSpec for CopaSpec {
    const NAME: &'static str = "copa";
    const SUMMARY: &'static str = "Copa: target rate 1/(delta d_q), velocity, default/competitive mode switch; \
        sets cwnd and pacing rate";
    const SOURCE: &'static str = "Arun and Balakrishnan, NSDI 2018";
    const CONTROLS: &'static str = "cwnd+rate";
    const DEFAULT_MIN_CWND_PKTS: &'static str = "2";
    type Args = CopaArgs;
    type Flow = Copa;

    fn validate(a: &CopaArgs) -> Result<(), String> {
        crate::check_range("delta", a.delta, 0.0, 1.0 + 1e-12)?;
        crate::check_range("pacing-gain", a.pacing_gain, 0.0, 100.0)?;
        crate::check_range("min-rtt-window-s", a.min_rtt_window_s, 0.0, 3600.0)
    }

    fn new_flow(a: &CopaArgs, params: WindowParams) -> Copa {
        Copa::new(params, a.clone())
    }

    fn program(_args: &CopaArgs) -> FoldProgram {
        PROGRAM
    }
}

/// Default or competitive mode (§2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Default,
    Competitive,
}

/// Copa's per-flow state.
#[derive(Clone, Debug)]
pub struct Copa {
    params: WindowParams,
    args: CopaArgs,
    cwnd: f64,
    slow_start: bool,
    velocity: f64,
    /// +1 increasing, -1 decreasing, 0 unknown: the direction of the last RTT.
    direction: i32,
    same_direction_rtts: u32,
    /// Start of the current velocity RTT: (time us, cwnd then).
    rtt_mark: Option<(u64, f64)>,
    rtt: RttEstimator,
    /// (time us, RTT us) samples within the RTT_min window.
    min_filter: VecDeque<(u64, u64)>,
    /// (time us, standing queueing delay us, largest queueing delay us) per report.
    queue_history: VecDeque<(u64, u64, u64)>,
    mode: Mode,
    /// 1/delta in use.
    delta_inv: f64,
    rtt_standing_us: u64,
    rtt_min_us: u64,
    last_increase: Option<bool>,
}

impl Copa {
    /// A new flow in slow start at the initial cwnd, v = 1, default mode.
    pub fn new(params: WindowParams, args: CopaArgs) -> Self {
        Copa {
            cwnd: params.clamp(params.init_cwnd_pkts),
            params,
            delta_inv: 1.0 / args.delta,
            args,
            slow_start: true,
            velocity: 1.0,
            direction: 0,
            same_direction_rtts: 0,
            rtt_mark: None,
            rtt: RttEstimator::default(),
            min_filter: VecDeque::new(),
            queue_history: VecDeque::new(),
            mode: Mode::Default,
            rtt_standing_us: 0,
            rtt_min_us: 0,
            last_increase: None,
        }
    }

    /// Current cwnd, packets.
    pub fn cwnd_pkts(&self) -> f64 {
        self.cwnd
    }

    /// Current velocity v.
    pub fn velocity(&self) -> f64 {
        self.velocity
    }

    /// Current mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The delta in use (the flag in default mode).
    pub fn delta(&self) -> f64 {
        1.0 / self.delta_inv
    }

    /// True while in slow start.
    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    fn srtt_us(&self) -> u64 {
        self.rtt.srtt_us.max(1.0) as u64
    }

    fn update_min_filter(&mut self, m: &Measurement) {
        if m.min_rtt_us > 0 {
            while self.min_filter.back().is_some_and(|&(_, r)| r >= m.min_rtt_us) {
                self.min_filter.pop_back();
            }
            self.min_filter.push_back((m.now_us, m.min_rtt_us));
        }
        let window_us = (self.args.min_rtt_window_s * 1e6) as u64;
        while self.min_filter.len() > 1
            && self.min_filter.front().is_some_and(|&(t, _)| m.now_us.saturating_sub(t) > window_us)
        {
            self.min_filter.pop_front();
        }
        self.rtt_min_us = self.min_filter.front().map_or(0, |&(_, r)| r);
    }

    /// Mode switching (§2.2) from the queueing delays of the last 5 RTTs.
    fn update_mode(&mut self, now_us: u64, dq_us: u64, m: &Measurement) {
        let dq_max = dq_us.max(m.max_rtt_us.max(m.rtt_us).saturating_sub(self.rtt_min_us));
        self.queue_history.push_back((now_us, dq_us, dq_max));
        let srtt = self.srtt_us();
        while self.queue_history.front().is_some_and(|&(t, _, _)| now_us.saturating_sub(t) > 5 * srtt) {
            self.queue_history.pop_front();
        }
        if !self.args.mode_switch {
            return;
        }
        // Wait for 5 RTTs of history before judging.
        let span = self.queue_history.front().map_or(0, |&(t, _, _)| now_us.saturating_sub(t));
        if span + srtt / 2 < 5 * srtt {
            return;
        }
        let nearly_empty = self.queue_history.iter().any(|&(t, dq, _)| {
            let max4 = self
                .queue_history
                .iter()
                .filter(|&&(u, _, _)| u <= t && t.saturating_sub(u) <= 4 * srtt)
                .map(|&(_, _, mx)| mx)
                .max()
                .unwrap_or(0);
            (dq as f64) <= 0.1 * max4 as f64
        });
        let mode = if nearly_empty { Mode::Default } else { Mode::Competitive };
        if mode != self.mode {
            self.mode = mode;
            self.delta_inv = 1.0 / self.args.delta;
        }
    }

    /// Velocity (§2.1): once per RTT compare the direction with the last RTT's.
    fn update_velocity(&mut self, now_us: u64) {
        let Some((t0, cwnd0)) = self.rtt_mark else {
            self.rtt_mark = Some((now_us, self.cwnd));
            return;
        };
        if now_us.saturating_sub(t0) < self.srtt_us() {
            return;
        }
        let dir = if self.cwnd > cwnd0 { 1 } else if self.cwnd < cwnd0 { -1 } else { 0 };
        if dir != 0 && dir == self.direction {
            self.same_direction_rtts += 1;
            if self.same_direction_rtts >= 3 {
                self.velocity *= 2.0;
            }
        } else {
            self.direction = dir;
            self.same_direction_rtts = 0;
            self.velocity = 1.0;
        }
        self.rtt_mark = Some((now_us, self.cwnd));
    }

    fn control(&self) -> Control {
        let bytes = self.params.to_bytes(self.cwnd);
        let rate = if self.rtt_standing_us > 0 {
            let bps = self.args.pacing_gain * f64::from(bytes) * 1e6 / self.rtt_standing_us as f64;
            Some(bps.min(f64::from(u32::MAX)) as u64)
        } else {
            None
        };
        Control { cwnd_bytes: Some(bytes), rate_bytes_per_sec: rate }
    }
}

impl Controller for Copa {
    fn initial(&self) -> Control {
        Control { cwnd_bytes: Some(self.params.to_bytes(self.cwnd)), rate_bytes_per_sec: None }
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        self.rtt.update(m);
        self.update_min_filter(m);
        if m.timeout {
            self.cwnd = self.params.min_cwnd_pkts;
            self.velocity = 1.0;
            self.direction = 0;
            self.same_direction_rtts = 0;
            self.slow_start = true;
            return self.control();
        }
        if m.min_rtt_us > 0 {
            self.rtt_standing_us = m.min_rtt_us;
        }
        if self.rtt_standing_us == 0 || self.rtt_min_us == 0 {
            return self.control();
        }
        let dq_us = self.rtt_standing_us.saturating_sub(self.rtt_min_us);
        self.update_mode(m.now_us, dq_us, m);
        if self.mode == Mode::Competitive {
            if m.has_loss() {
                self.delta_inv = (self.delta_inv / 2.0).max(1.0 / self.args.delta);
            } else {
                self.delta_inv += m.acked_pkts(self.params.mss_bytes) / self.cwnd;
            }
        }
        // lambda <= lambda_t  <=>  cwnd / RTT_standing <= 1 / (delta d_q).
        let delta = 1.0 / self.delta_inv;
        let increase = self.cwnd * delta * dq_us as f64 <= self.rtt_standing_us as f64;
        let acked = m.acked_pkts(self.params.mss_bytes);
        if self.slow_start && increase {
            self.cwnd += acked;
        } else {
            self.slow_start = false;
            if self.last_increase.is_some_and(|prev| prev != increase) && self.velocity > 1.0 {
                // A decision against the current direction: start over at v = 1.
                self.velocity = 1.0;
                self.same_direction_rtts = 0;
            }
            let step = self.velocity * acked / (delta * self.cwnd);
            self.cwnd += if increase { step } else { -step };
        }
        self.last_increase = Some(increase);
        self.cwnd = self.params.clamp(self.cwnd);
        self.update_velocity(m.now_us);
        self.control()
    }

    fn state(&self) -> String {
        format!(
            "cwnd_pkts={:.3} velocity={} mode={} delta={:.3} rtt_standing_us={} rtt_min_us={} phase={}",
            self.cwnd,
            self.velocity,
            if self.mode == Mode::Default { "default" } else { "competitive" },
            self.delta(),
            self.rtt_standing_us,
            self.rtt_min_us,
            if self.slow_start { "slow_start" } else { "copa" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1000;
    const RTT_MIN: u64 = 40_000;

    fn copa() -> Copa {
        // 10 packets to start, no ssthresh.
        let params = WindowParams { mss_bytes: MSS, min_cwnd_pkts: 2.0, max_cwnd_pkts: 1e6, ..crate::cc::test_params() };
        let args = CopaArgs { delta: 0.5, mode_switch: true, pacing_gain: 2.0, min_rtt_window_s: 10.0 };
        Copa::new(params, args)
    }

    /// A report at `now_us` acknowledging `acked` packets with standing RTT `rtt_us`.
    fn report(now_us: u64, acked: f64, rtt_us: u64) -> Measurement {
        Measurement {
            now_us,
            acked_bytes: (acked * f64::from(MSS)) as u64,
            rtt_us,
            min_rtt_us: rtt_us,
            rtt_samples: 8,
            ..Default::default()
        }
    }

    #[test]
    fn slow_start_until_rate_exceeds_target_then_velocity_doubles() {
        let mut c = copa();
        c.on_report(&report(0, 0.0, RTT_MIN));
        // No queue: target rate infinite, slow start doubles per RTT.
        c.on_report(&report(20_000, 10.0, RTT_MIN));
        assert_eq!(c.cwnd_pkts(), 20.0);
        assert!(c.in_slow_start());
        // Queue 1 ms at cwnd 20: 20 x 0.5 x 1000 <= 40000, still below target.
        // A queue of 10 ms: 20 x 0.5 x 10000 = 100000 > 50000: decrease, slow start over.
        c.on_report(&report(40_000, 20.0, 50_000));
        assert!(!c.in_slow_start());
        assert!(c.cwnd_pkts() < 20.0);
        // Now an empty queue for many RTTs: increasing every RTT; after 3 RTTs in
        // the same direction v doubles once per RTT: 1, 1, 1, 2, 4, 8 ...
        let mut now = 40_000;
        let mut seen = vec![];
        for _ in 0..16 {
            now += 25_000;
            c.on_report(&report(now, c.cwnd_pkts(), RTT_MIN));
            seen.push(c.velocity());
        }
        // Velocity is updated once per RTT (every second report: 50 ms > SRTT).
        let per_rtt: Vec<f64> = seen.iter().step_by(2).cloned().collect();
        assert_eq!(&per_rtt[..6], &[1.0, 1.0, 1.0, 2.0, 4.0, 8.0], "{seen:?}");
        // A decision against the direction resets v to 1.
        now += 20_000;
        c.on_report(&report(now, c.cwnd_pkts(), 200_000));
        assert_eq!(c.velocity(), 1.0);
    }

    #[test]
    fn increase_and_decrease_by_v_over_delta_cwnd() {
        let mut c = copa();
        c.on_report(&report(0, 0.0, RTT_MIN));
        c.on_report(&report(20_000, 0.0, 60_000)); // leaves slow start (decrease)
        let w = c.cwnd_pkts();
        // d_q = 20 ms: increase iff w x 0.5 x 20000 <= 60000, i.e. w <= 6.
        c.on_report(&report(40_000, 4.0, 60_000));
        assert!((c.cwnd_pkts() - (w - 4.0 / (0.5 * w))).abs() < 1e-9);
        // Pacing at 2 cwnd / RTT_standing.
        let ctl = c.control();
        let expected = 2.0 * f64::from(ctl.cwnd_bytes.unwrap()) * 1e6 / 60_000.0;
        assert_eq!(ctl.rate_bytes_per_sec, Some(expected as u64));
    }

    #[test]
    fn mode_switches_to_competitive_when_queue_never_drains_and_back() {
        let mut c = copa();
        let mut now = 0;
        c.on_report(&report(now, 0.0, RTT_MIN));
        // A standing queue of 60 ms that never nearly empties, for 8 RTTs (100 ms
        // each: srtt converges towards 100 ms).
        for _ in 0..40 {
            now += 50_000;
            c.on_report(&report(now, 5.0, 100_000));
        }
        assert_eq!(c.mode(), Mode::Competitive);
        // In competitive mode 1/delta grows (delta falls) while no loss comes.
        assert!(c.delta() < 0.5, "delta {}", c.delta());
        let before = 1.0 / c.delta();
        c.on_report(&Measurement { lost_pkts: 1, ..report(now + 50_000, 0.0, 100_000) });
        assert!((1.0 / c.delta() - (before / 2.0).max(2.0)).abs() < 1e-9);
        // The queue empties once: default mode again with delta = 0.5.
        now += 100_000;
        c.on_report(&report(now, 5.0, RTT_MIN));
        assert_eq!(c.mode(), Mode::Default);
        assert_eq!(c.delta(), 0.5);
    }
}
