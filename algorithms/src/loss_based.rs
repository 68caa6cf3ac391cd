//! The loss-based window core Reno and Cubic share, as Linux shares
//! tcp_cong.c and tcp_input.c's recovery between its congestion controls.
//!
//! [`LossBased`] runs what is the same for every loss-based algorithm, per
//! report of its fold program ([`FOLD_FEATURES`]):
//! - slow start per ACK in the fold until the first loss, a timeout or user
//!   space's takeover (at ssthresh, the ceiling or the algorithm's own exit,
//!   [`LossRules::slow_start_exit`]), [`FoldSlowStart`];
//! - after it, slow start per report with byte counting up to ssthresh
//!   ([`slow_start`]), growth only when cwnd-limited ([`cwnd_limited`]);
//! - one reduction per window of losses ([`LossGuard`]) to the algorithm's
//!   ssthresh, with PRR (RFC 6937) during fast recovery, applied per ACK by
//!   the fold ([`Prr`], [`FoldPrr`]);
//! - after a timeout, cwnd = 1 packet (the loss window) and slow start.
//!
//! An algorithm ([`LossRules`]) keeps only its own rules, as Linux's
//! `tcp_congestion_ops`: the ssthresh after a congestion event (`ssthresh`),
//! congestion avoidance (`cong_avoid` after slow start), what it forgets at a
//! timeout (`CA_EVENT_LOSS`) and an early end of slow start (HyStart).

use crate::cc::{
    commanded_window, cwnd_limited, slow_start, FoldPrr, FoldSlowStart, LossGuard, Measurement, Phase, Prr,
    ReportEvent, RttEstimator, WindowAlgorithm, WindowParams,
};
use crate::fold::{Features, FoldProgram, Growth};

/// The fold features of a loss-based window algorithm: slow start per ACK
/// until the first loss or user space takes over, PRR per ACK in recovery,
/// repeated answers skipped (the fold writes what user space sends besides
/// Cwnd only at a loss or a timeout) and reports backed off while the flow is
/// far from cwnd-limited (it grows only when cwnd-limited).
pub const FOLD_FEATURES: Features =
    Features { growth: Growth::SlowStart, prr: true, skips_repeated_answers: true, backs_off_when_app_limited: true };

/// The window a loss-based flow keeps, which its rules read and change.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossWindow {
    /// Window bounds and MSS.
    pub params: WindowParams,
    /// Congestion window, packets.
    pub cwnd: f64,
    /// Slow-start threshold, packets (`f64::INFINITY` = none).
    pub ssthresh: f64,
    /// Smoothed RTT of the reports (RFC 6298).
    pub rtt: RttEstimator,
}

/// What a loss-based algorithm decides itself; the rest is [`LossBased`]'s.
pub trait LossRules: Clone + std::fmt::Debug + Send {
    /// The slow-start threshold after a congestion event (a loss event, or a
    /// timeout outside recovery) at `cwnd_pkts`, packets; the rules also note
    /// what they keep of the event (Linux's `ssthresh` op).
    fn ssthresh(&mut self, cwnd_pkts: f64) -> f64;

    /// Congestion avoidance: grow `w.cwnd` for `acked_pkts` packets newly
    /// delivered in the report received at `now_us` (Linux's `cong_avoid`
    /// after slow start). Called only while the flow is cwnd-limited.
    fn congestion_avoidance(&mut self, w: &mut LossWindow, now_us: u64, acked_pkts: f64);

    /// A timeout: forget what the rules keep of the past (Linux's
    /// `CA_EVENT_LOSS`); nothing by default.
    fn on_timeout(&mut self) {}

    /// See report `m` before the core applies it; nothing by default.
    fn observe(&mut self, _m: &Measurement) {}

    /// Slow start ends early during report `m`, which found cwnd at
    /// `cwnd_pkts` (before the report's growth) and the smoothed RTT at
    /// `srtt_us`: the fraction of the report's growth after which it ended
    /// (ssthresh = the cwnd at that moment, the rest is congestion
    /// avoidance), or None to go on (HyStart in tcp_cubic.c). None by default.
    fn slow_start_exit(&mut self, _m: &Measurement, _cwnd_pkts: f64, _srtt_us: f64) -> Option<f64> {
        None
    }
}

/// A loss-based window algorithm: the shared core around rules `R`.
#[derive(Clone, Debug)]
pub struct LossBased<R> {
    w: LossWindow,
    guard: LossGuard,
    fold_ss: FoldSlowStart,
    /// Proportional Rate Reduction during fast recovery (None outside it).
    prr: Option<Prr>,
    /// PRR applied per ACK by the fold program (its constants).
    fold_prr: FoldPrr,
    rules: R,
}

impl<R: LossRules> LossBased<R> {
    /// A new flow with `rules`, starting at `params.init_cwnd_pkts` in slow start.
    pub fn with_rules(params: WindowParams, rules: R) -> Self {
        LossBased {
            w: LossWindow {
                cwnd: params.clamp(params.init_cwnd_pkts),
                ssthresh: params.init_ssthresh_pkts,
                params,
                rtt: RttEstimator::default(),
            },
            guard: LossGuard::default(),
            fold_ss: FoldSlowStart::default(),
            prr: None,
            fold_prr: FoldPrr::default(),
            rules,
        }
    }

    /// The same flow with the initial slow start run per ACK by the fold
    /// program ([`crate::fold::Growth::SlowStart`]) when `on`.
    /// A flow taken over at or above its ssthresh (a running flow announced
    /// again, [`crate::portus_glue::WindowBounds::params_for_flow`]) starts in
    /// congestion avoidance: no slow start in the fold.
    pub fn with_fold_slow_start(mut self, on: bool) -> Self {
        self.fold_ss = FoldSlowStart::new(on && self.w.cwnd < self.w.ssthresh);
        self
    }

    /// The same flow with PRR applied per ACK by the fold program
    /// ([`crate::fold::Features::prr`]) when `on`.
    pub fn with_fold_prr(mut self, on: bool) -> Self {
        self.fold_prr = FoldPrr::new(on);
        self
    }

    /// The same flow with what `program` runs per ACK: slow start and PRR
    /// in the fold when it has them.
    pub fn with_fold(self, program: &FoldProgram) -> Self {
        self.with_fold_slow_start(program.slow_start_in_fold()).with_fold_prr(program.prr_in_fold())
    }

    /// True while the fold program runs slow start.
    pub fn fold_slow_start(&self) -> bool {
        self.fold_ss.active()
    }

    /// Smoothed RTT in microseconds (0 before the first sample).
    pub fn srtt_us(&self) -> f64 {
        self.w.rtt.srtt_us
    }

    /// The algorithm's rules and what they keep.
    pub fn rules(&self) -> &R {
        &self.rules
    }

    /// The algorithm's rules, to change.
    pub fn rules_mut(&mut self) -> &mut R {
        &mut self.rules
    }

    /// A timeout: ssthresh from the rules (kept when the RTO hits during
    /// recovery, as Linux `tcp_enter_loss` while `high_seq` is ahead), cwnd =
    /// 1 packet, recovery until the window outstanding is acknowledged.
    fn on_timeout(&mut self, m: &Measurement) {
        if !self.guard.active() {
            self.w.ssthresh = self.rules.ssthresh(self.w.cwnd);
        }
        let outstanding = (m.outstanding_pkts() as f64).max(self.w.cwnd);
        self.w.cwnd = 1.0;
        self.rules.on_timeout();
        self.guard.start(outstanding, self.w.params.mss_bytes, true);
    }

    /// A loss event: cwnd = ssthresh from the rules, fast recovery with PRR
    /// from the window outstanding.
    fn on_loss_event(&mut self, m: &Measurement) {
        let outstanding = (m.outstanding_pkts() as f64).max(1.0);
        self.w.ssthresh = self.rules.ssthresh(self.w.cwnd);
        self.w.cwnd = self.w.ssthresh;
        self.guard.start(outstanding, self.w.params.mss_bytes, false);
        self.prr = Some(Prr::new(outstanding, self.w.ssthresh));
    }

    /// A report of slow start in the fold (cwnd grew from `before` to
    /// `w.cwnd` per ACK): the rules' early exit is checked on it as in
    /// [`LossBased::grow`], and ends it with the fold's growth after that
    /// moment undone (the kernel would be in congestion avoidance); so do
    /// ssthresh (a finite `--init-ssthresh`) and the ceiling, with cwnd held
    /// at that bound. User space takes over.
    fn check_fold_slow_start(&mut self, m: &Measurement, before: f64) {
        let grown = (self.w.cwnd - before).max(0.0);
        if let Some(frac) = self.rules.slow_start_exit(m, before, self.w.rtt.srtt_us) {
            self.w.cwnd = self.w.params.clamp(before + grown * frac);
            self.w.ssthresh = self.w.cwnd;
            self.fold_ss.stop();
            return;
        }
        let bound = self.w.ssthresh.min(self.w.params.max_cwnd_pkts);
        if self.w.cwnd >= bound {
            self.w.cwnd = bound;
            self.fold_ss.stop();
        }
    }

    /// Growth for report `m`: slow start (ended early by the rules' exit),
    /// then the rules' congestion avoidance; nothing when the flow did not use
    /// its window.
    fn grow(&mut self, m: &Measurement) {
        let in_ss = self.w.cwnd < self.w.ssthresh;
        if !cwnd_limited(m, self.w.cwnd, in_ss) {
            return;
        }
        // Linux grows by acked_sacked, not by the bytes the cumulative ACK
        // passed (which count packets SACKed earlier again).
        let acked = m.delivered_pkts as f64;
        if in_ss {
            if let Some(frac) = self.rules.slow_start_exit(m, self.w.cwnd, self.w.rtt.srtt_us) {
                // Slow start ended when the exit fired: ssthresh = the cwnd
                // of that moment, the rest of the report is CA.
                let at_exit = self.w.cwnd + acked * frac;
                self.w.cwnd = self.w.params.clamp(at_exit);
                self.w.ssthresh = self.w.cwnd;
                self.rules.congestion_avoidance(&mut self.w, m.now_us, acked * (1.0 - frac));
                return;
            }
        }
        let leftover = slow_start(&mut self.w.cwnd, self.w.ssthresh, acked);
        if leftover > 0.0 {
            self.rules.congestion_avoidance(&mut self.w, m.now_us, leftover);
        }
    }
}

impl<R: LossRules> WindowAlgorithm for LossBased<R> {
    fn on_report(&mut self, m: &Measurement) -> u32 {
        self.w.rtt.update(m);
        self.rules.observe(m);
        let before = self.w.cwnd;
        self.fold_prr.count(m);
        let fold_grew = self.fold_ss.adopt(m, &mut self.w.cwnd, self.w.params.mss_bytes);
        match self.guard.classify(m) {
            ReportEvent::Timeout => self.on_timeout(m),
            ReportEvent::LossEvent => self.on_loss_event(m),
            ReportEvent::Growth if fold_grew => self.check_fold_slow_start(m, before),
            ReportEvent::Growth => self.grow(m),
            ReportEvent::Hold => {}
        }
        self.w.cwnd = self.w.params.clamp(self.w.cwnd);
        let pkts = commanded_window(&mut self.prr, &self.guard, &self.w.params, self.w.cwnd, m);
        let bytes = self.w.params.to_bytes(pkts);
        self.fold_ss.command(bytes)
    }

    fn cwnd_pkts(&self) -> f64 {
        self.w.cwnd
    }

    fn ssthresh_pkts(&self) -> f64 {
        self.w.ssthresh
    }

    fn phase(&self) -> Phase {
        self.guard.phase(self.w.cwnd, self.w.ssthresh)
    }

    fn params(&self) -> &WindowParams {
        &self.w.params
    }

    fn fold_registers(&self) -> Vec<(&'static str, u32)> {
        self.fold_prr.registers(self.prr.as_ref(), &self.guard, self.w.params.mss_bytes)
    }

    fn initial_fold_registers(&self) -> Vec<(&'static str, u32)> {
        self.fold_ss.initial_registers(self.cwnd_bytes())
    }

    fn packets_out_pkts(&self, m: &Measurement) -> f64 {
        let unacked = self.prr.map_or(0.0, |p| p.unacked_pkts());
        (m.outstanding_pkts() as f64).max(unacked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The assignments `(:= NAME` in a program's text, each with the
    /// condition of the `(when COND` block it sits in.
    fn assignments_by_condition(text: &str) -> Vec<(String, String)> {
        let mut cond = String::new();
        let mut found = vec![];
        for line in text.lines().map(str::trim) {
            if let Some(c) = line.strip_prefix("(when ") {
                cond = c.to_string();
            } else if let Some(rest) = line.strip_prefix("(:= ") {
                let name = rest.split_whitespace().next().unwrap_or_default();
                found.push((name.to_string(), cond.clone()));
            }
        }
        found
    }

    /// Rules that note when the core calls them: ssthresh 0.6 x cwnd, +1
    /// packet per congestion-avoidance call, slow start ends at once when
    /// `exit` is set.
    #[derive(Clone, Debug, Default)]
    struct Noted {
        ssthresh_calls: u32,
        timeouts: u32,
        observed: u32,
        exit: Option<f64>,
    }

    impl LossRules for Noted {
        fn ssthresh(&mut self, cwnd_pkts: f64) -> f64 {
            self.ssthresh_calls += 1;
            0.6 * cwnd_pkts
        }
        fn congestion_avoidance(&mut self, w: &mut LossWindow, _now_us: u64, _acked_pkts: f64) {
            w.cwnd += 1.0;
        }
        fn on_timeout(&mut self) {
            self.timeouts += 1;
        }
        fn observe(&mut self, _m: &Measurement) {
            self.observed += 1;
        }
        fn slow_start_exit(&mut self, _m: &Measurement, _cwnd_pkts: f64, _srtt_us: f64) -> Option<f64> {
            self.exit
        }
    }

    #[test]
    fn the_core_asks_its_rules_once_per_congestion_event_and_grows_with_them() {
        let params = crate::cc::test_params();
        let full = |acked: u64| Measurement {
            acked_bytes: acked * 1000,
            delivered_pkts: acked,
            rtt_us: 50_000,
            inflight_max_pkts: 40,
            ..Default::default()
        };
        let mut f = LossBased::with_rules(params, Noted::default());
        // Slow start per report (no fold): 10 + 10 packets.
        f.on_report(&full(10));
        assert_eq!(f.cwnd_pkts(), 20.0);
        // A loss: ssthresh from the rules (0.6 x 20), cwnd to it, PRR in recovery.
        let bytes = f.on_report(&Measurement { lost_pkts: 2, inflight_pkts: 18, ..full(0) });
        assert_eq!((f.ssthresh_pkts(), f.phase()), (12.0, Phase::Recovery));
        assert!(bytes >= 12_000, "PRR's window is at least ssthresh: {bytes}");
        // More losses of the same window: no second call.
        f.on_report(&Measurement { lost_pkts: 1, ..full(1) });
        assert_eq!(f.rules().ssthresh_calls, 1);
        // Recovery ends once the outstanding window is acknowledged; then the rules' CA.
        f.on_report(&full(30));
        let cwnd = f.cwnd_pkts();
        f.on_report(&full(12));
        assert_eq!((f.cwnd_pkts(), f.phase()), (cwnd + 1.0, Phase::CongestionAvoidance));
        // A timeout: ssthresh again, cwnd 1 packet, the rules forget.
        f.on_report(&Measurement { timeout: true, ..full(0) });
        assert_eq!((f.cwnd_pkts(), f.rules().ssthresh_calls, f.rules().timeouts), (1.0, 2, 1));
        assert_eq!(f.rules().observed, 6, "every report is shown to the rules");
        // The rules' early exit ends slow start in the fold, with the growth after it undone.
        let mut g = LossBased::with_rules(params, Noted { exit: Some(0.5), ..Default::default() }).with_fold(
            &FoldProgram { name: "t", cadence: crate::fold::Cadence::PerRtt(4), urgent_on_loss: true, features: FOLD_FEATURES },
        );
        assert!(g.fold_slow_start());
        assert_eq!(g.on_report(&Measurement { dp_cwnd_bytes: 30_000, ..full(20) }), 20_000 + 1, "taken over, marked");
        assert_eq!((g.cwnd_pkts(), g.ssthresh_pkts(), g.fold_slow_start()), (20.0, 20.0, false));
    }

    #[test]
    fn programs_that_skip_repeated_answers_write_what_user_space_sends_only_at_loss_or_timeout() {
        // what a loss-based algorithm sends besides Cwnd: the PRR registers
        let guard = crate::cc::LossGuard::default();
        let sent: Vec<&str> =
            crate::cc::FoldPrr::new(true).registers(None, &guard, 1448).iter().map(|(n, _)| *n).collect();
        assert!(sent.contains(&"pm"), "{sent:?}");
        for prog in [crate::reno::PROGRAM, crate::cubic::PROGRAM] {
            assert_eq!(prog.features, FOLD_FEATURES, "{}", prog.name);
            assert!(prog.skips_repeated_answers(), "{}", prog.name);
            let writes = assignments_by_condition(&prog.text());
            assert!(writes.iter().any(|(n, _)| n == "pm"), "{}: the parser finds the fold's writes", prog.name);
            for (name, cond) in writes.iter().filter(|(n, _)| sent.contains(&n.as_str()) || n == "Rate") {
                assert!(
                    cond.contains("Ack.lost_pkts_sample") || cond.contains("Flow.was_timeout"),
                    "{}: {name} is written under {cond:?}, not only at a loss or a timeout",
                    prog.name
                );
            }
        }
    }

}
