//! aimd (contest, docs/algorithms.md): TCP-style AIMD driven by a
//! delay-timeout signal.
//!
//! - per acknowledged packet: cwnd += alpha / cwnd;
//! - congestion event (a packet marked lost, an RTO, or an RTT sample above
//!   `--timeout-ms`): cwnd = cwnd / beta, at most once per RTT.
//! - `--slow-start`: while cwnd < ssthresh, cwnd += 2 per acknowledged packet;
//!   on a congestion event ssthresh = 0.75 cwnd, cwnd = ssthresh / 2, and slow
//!   start again; in congestion avoidance cwnd += 1.5 / cwnd per packet; the
//!   timeout defaults to 100 ms and the initial window to 35 packets.
//! - `--consecutive-timeouts N`: after more than N congestion events in a row
//!   with no progress (no report free of a congestion signal in between):
//!   ssthresh = cwnd / 2, cwnd = 1, slow start.
//!
//! The contest's "ACK" acknowledged one datagram, so "per ACK" is applied per
//! acknowledged packet. Where the rules run: per report, from a fold program
//! that reports every 10 ms and at once on a loss or timeout. The growth sums
//! to the same total as per ACK (alpha x acked packets / cwnd); the RTT test
//! uses the report's largest RTT sample, so "some ACK exceeded the timeout"
//! is exact; a report with a congestion signal does not also grow. Why not in the fold program: the shared fold program
//! (crate::fold) is the same for the whole suite and the decrease needs the
//! once-per-RTT guard and a float division, which the fold language (integer,
//! no state across reports besides registers) would make opaque; 10 ms is a
//! quarter of the contest link's 42 ms minimum RTT.
//!
//! On a link that never drops (the contest's unbounded queue) the only
//! congestion signal is the delay threshold: aimd saws between the threshold
//! and half of it.

use crate::cc::{Measurement, WindowParams};
use crate::contest::{congestion_signal, window_control, OncePerRtt};
use crate::fold::{Cadence, Features, FoldProgram};
use crate::{AlgorithmSpec, Control, Controller};

/// aimd as an [`AlgorithmSpec`].
pub struct AimdSpec;

/// aimd's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct AimdArgs {
    /// Additive increase: cwnd += alpha / cwnd per acknowledged packet.
    #[arg(long, default_value = "1")]
    pub alpha: f64,
    /// Multiplicative decrease: cwnd = cwnd / beta on a congestion event (> 1).
    #[arg(long, default_value = "2")]
    pub beta: f64,
    /// An RTT sample above this is a congestion event, ms [default: 80; 100 with --slow-start].
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<f64>,
    /// Initial window, packets [default: --init-cwnd-pkts (10); 35 with --slow-start].
    #[arg(long, value_name = "PKTS")]
    pub initial_window: Option<f64>,
    /// Slow-start variant: +2 per packet below ssthresh, ssthresh = 0.75 cwnd and cwnd = ssthresh / 2 on an event, +1.5/cwnd above.
    #[arg(long, default_value = "false", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub slow_start: bool,
    /// After more than N congestion events in a row without progress: ssthresh = cwnd / 2, cwnd = 1, slow start (contest: 5). Default off.
    #[arg(long, value_name = "N")]
    pub consecutive_timeouts: Option<u32>,
}

/// Report every 10 ms and at once on loss or timeout.
pub const PROGRAM: FoldProgram =
    FoldProgram { name: "ccplab_aimd", cadence: Cadence::IntervalUs(10_000), urgent_on_loss: true, features: Features::NONE };

impl AlgorithmSpec for AimdSpec {
    const NAME: &'static str = "aimd";
    const SUMMARY: &'static str = "contest aimd: +alpha/cwnd per packet, cwnd/beta once per RTT on loss, RTO or \
        RTT > --timeout-ms; --slow-start and --consecutive-timeouts variants";
    const SOURCE: &'static str = "cellular congestion-control contest (docs/algorithms.md)";
    type Args = AimdArgs;
    type Flow = Aimd;

    fn validate(a: &AimdArgs) -> Result<(), String> {
        crate::check_range("alpha", a.alpha, 0.0, 1e6)?;
        crate::check_range("beta", a.beta, 1.0, 1e6)?;
        if let Some(t) = a.timeout_ms {
            crate::check_range("timeout-ms", t, 0.0, 1e6)?;
        }
        if let Some(w) = a.initial_window {
            crate::check_range("initial-window", w, 0.0, 1e7)?;
        }
        Ok(())
    }

    fn new_flow(a: &AimdArgs, params: WindowParams) -> Aimd {
        Aimd::new(a, params)
    }

    fn program(_a: &AimdArgs) -> FoldProgram {
        PROGRAM
    }
}

/// aimd's per-flow state.
#[derive(Clone, Debug)]
pub struct Aimd {
    params: WindowParams,
    alpha: f64,
    beta: f64,
    timeout_us: u64,
    slow_start: bool,
    consecutive_limit: Option<u32>,
    cwnd: f64,
    ssthresh: f64,
    guard: OncePerRtt,
    /// Congestion events in a row without a signal-free report in between.
    in_a_row: u32,
    /// Decreases so far (for tests and logs).
    pub decreases: u64,
}

impl Aimd {
    /// A new flow with these flags.
    pub fn new(a: &AimdArgs, params: WindowParams) -> Self {
        let timeout_ms = a.timeout_ms.unwrap_or(if a.slow_start { 100.0 } else { 80.0 });
        let init = a.initial_window.unwrap_or(if a.slow_start { 35.0 } else { params.init_cwnd_pkts });
        Aimd {
            alpha: a.alpha,
            beta: a.beta,
            timeout_us: (timeout_ms * 1000.0) as u64,
            slow_start: a.slow_start,
            consecutive_limit: a.consecutive_timeouts,
            cwnd: params.clamp(init),
            ssthresh: params.init_ssthresh_pkts,
            params,
            guard: OncePerRtt::default(),
            in_a_row: 0,
            decreases: 0,
        }
    }

    /// Current window, packets.
    pub fn cwnd_pkts(&self) -> f64 {
        self.cwnd
    }

    /// Current slow-start threshold, packets.
    pub fn ssthresh_pkts(&self) -> f64 {
        self.ssthresh
    }

    fn grow(&mut self, acked: f64) {
        if !self.slow_start {
            self.cwnd += self.alpha * acked / self.cwnd;
        } else if self.cwnd < self.ssthresh {
            self.cwnd = (self.cwnd + 2.0 * acked).min(self.ssthresh.max(self.cwnd));
        } else {
            self.cwnd += 1.5 * acked / self.cwnd;
        }
    }

    fn decrease(&mut self) {
        self.decreases += 1;
        self.in_a_row += 1;
        if self.consecutive_limit.is_some_and(|n| self.in_a_row > n) {
            self.ssthresh = self.cwnd / 2.0;
            self.cwnd = 1.0;
            self.in_a_row = 0;
        } else if self.slow_start {
            self.ssthresh = 0.75 * self.cwnd;
            self.cwnd = self.ssthresh / 2.0;
        } else {
            self.cwnd /= self.beta;
        }
    }
}

impl Controller for Aimd {
    fn initial(&self) -> Control {
        window_control(&self.params, self.cwnd)
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        if congestion_signal(m, self.timeout_us) {
            // Once per RTT: the latest sample, or the threshold when the report has none.
            let rtt = if m.rtt_us > 0 { m.rtt_us } else { self.timeout_us };
            if self.guard.try_act(m.now_us, rtt) {
                self.decrease();
            }
        } else {
            self.in_a_row = 0;
            self.grow(m.acked_pkts(self.params.mss_bytes));
        }
        self.cwnd = self.params.clamp(self.cwnd);
        window_control(&self.params, self.cwnd)
    }

    fn state(&self) -> String {
        format!("cwnd_pkts={:.3} ssthresh_pkts={:.3} events_in_a_row={}", self.cwnd, self.ssthresh, self.in_a_row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contest::fixed_window::tests::{params, report};

    fn args() -> AimdArgs {
        AimdArgs {
            alpha: 1.0,
            beta: 2.0,
            timeout_ms: None,
            initial_window: None,
            slow_start: false,
            consecutive_timeouts: None,
        }
    }

    #[test]
    fn additive_increase_and_one_decrease_per_rtt() {
        let mut a = Aimd::new(&args(), params());
        assert_eq!(a.cwnd_pkts(), 10.0);
        a.on_report(&report(0, 5, 50));
        assert!((a.cwnd_pkts() - 10.5).abs() < 1e-12, "+1/cwnd per packet");
        // RTT 90 ms > 80 ms: halve; a second high RTT within that RTT does nothing.
        a.on_report(&report(10, 0, 90));
        assert!((a.cwnd_pkts() - 5.25).abs() < 1e-12);
        a.on_report(&report(50, 0, 95));
        a.on_report(&Measurement { lost_pkts: 3, ..report(99, 0, 0) });
        assert!((a.cwnd_pkts() - 5.25).abs() < 1e-12, "at most once per RTT");
        // One RTT (90 ms) after the decrease, a loss decreases again.
        a.on_report(&Measurement { lost_pkts: 1, ..report(100, 0, 60) });
        assert!((a.cwnd_pkts() - 2.625).abs() < 1e-12);
        assert_eq!(a.decreases, 2);
        // At the threshold exactly is not a signal.
        let c = a.cwnd_pkts();
        a.on_report(&report(300, 1, 80));
        assert!(a.cwnd_pkts() > c);
    }

    #[test]
    fn any_ack_above_the_timeout_is_an_event() {
        let mut a = Aimd::new(&args(), params());
        // The latest sample is 50 ms but one ACK of the report saw 95 ms (> 80 ms).
        a.on_report(&Measurement { max_rtt_us: 95_000, ..report(0, 4, 50) });
        assert_eq!(a.cwnd_pkts(), 5.0, "halved, no growth in the same report");
    }

    #[test]
    fn slow_start_variant() {
        let mut a = Aimd::new(&AimdArgs { slow_start: true, ..args() }, params());
        assert_eq!(a.cwnd_pkts(), 35.0, "initial window 35");
        a.on_report(&report(0, 5, 90));
        assert_eq!(a.cwnd_pkts(), 45.0, "+2 per packet; 90 ms is below the 100 ms timeout");
        a.on_report(&report(10, 0, 101));
        assert!((a.ssthresh_pkts() - 33.75).abs() < 1e-12);
        assert!((a.cwnd_pkts() - 16.875).abs() < 1e-12);
        // Slow start again up to ssthresh, then +1.5/cwnd per packet.
        a.on_report(&report(200, 10, 50));
        assert!((a.cwnd_pkts() - 33.75).abs() < 1e-12, "slow start stops at ssthresh");
        a.on_report(&report(210, 9, 50));
        assert!((a.cwnd_pkts() - (33.75 + 1.5 * 9.0 / 33.75)).abs() < 1e-12);
    }

    #[test]
    fn consecutive_timeouts_reset_to_one() {
        let mut a = Aimd::new(&AimdArgs { consecutive_timeouts: Some(2), initial_window: Some(40.0), ..args() }, params());
        for k in 0..3 {
            a.on_report(&report(k * 200, 0, 150));
        }
        assert_eq!(a.cwnd_pkts(), 1.0, "the third event in a row resets");
        assert!((a.ssthresh_pkts() - 5.0).abs() < 1e-12, "ssthresh = cwnd / 2 = 10 / 2");
        // Progress in between keeps the count at zero.
        let mut b = Aimd::new(&AimdArgs { consecutive_timeouts: Some(2), initial_window: Some(40.0), ..args() }, params());
        for k in 0..4 {
            b.on_report(&report(k * 400, 0, 150));
            b.on_report(&report(k * 400 + 200, 1, 50));
        }
        assert!(b.cwnd_pkts() > 1.0);
    }
}
