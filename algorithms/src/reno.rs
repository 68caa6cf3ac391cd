//! Reno window logic (RFC 5681), independent of Portus.
//!
//! This file keeps Reno's own rules ([`RenoRules`]: halve on a congestion
//! event, +1 packet per RTT); slow start, recovery, PRR and the fold's
//! per-ACK parts are the loss-based core's ([`crate::loss_based`]), shared
//! with Cubic.
//!
//! Slow start runs **per ACK in the fold program** ([`crate::fold`]'s
//! `SLOW_START`, as Linux `tcp_slow_start` and CCP's own datapath slow start):
//! every ACK raises cwnd by its acknowledged bytes while the flow is
//! cwnd-limited (cwnd < 2 x the largest in flight of this and the previous
//! round, as `tcp_is_cwnd_limited`'s `max_packets_out`), until the first ACK
//! with a loss or an RTO, or until user space takes over (ssthresh from
//! `--init-ssthresh`, the ceiling). Meanwhile each report's `dp_cwnd` is
//! adopted as cwnd and the command is Cwnd 0 ("leave it",
//! [`crate::cc::FoldSlowStart`]). Fast recovery's PRR window is also
//! applied **per ACK in the fold** (`PRR_PER_ACK`, [`crate::cc::FoldPrr`]):
//! user space computes it at each report and the fold moves it with every
//! ACK's delivered and lost packets until the next report. Everything else is
//! applied **per report** (four reports per RTT, plus an urgent report on every
//! ACK that marks a loss, on an RTO and on entering recovery) with the
//! report's totals:
//!
//! - Slow start after an RTO (§3.1, byte counting as RFC 3465 / Linux): cwnd +=
//!   acked packets, up to ssthresh; the rest of the report's ACKs go to
//!   congestion avoidance.
//! - Congestion avoidance (§3.1): cwnd += acked / cwnd (per ACK: 1/cwnd), i.e.
//!   +1 packet per RTT.
//! - Loss event (fast retransmit / fast recovery, §3.2): ssthresh = max(cwnd /
//!   2, 2), cwnd = ssthresh; once per window: until the recovery point (the
//!   window outstanding at the loss is cumulatively acknowledged, as the
//!   kernel's `high_seq`) the window is neither grown nor cut again. During
//!   that recovery the commanded window follows PRR (RFC 6937, as Linux
//!   `tcp_cwnd_reduction`, [`crate::cc::Prr`]), so the flow keeps sending
//!   one packet per two delivered instead of falling silent until in-flight
//!   drops below ssthresh. PRR counts deliveries from the loss ACK on: the
//!   loss report's earlier ACKs are not (see the Prr docs for what counting
//!   them did).
//! - Retransmission timeout (§3.1, loss window): ssthresh = max(cwnd / 2, 2),
//!   cwnd = 1 packet, then slow start. An RTO during recovery keeps ssthresh
//!   (as Linux `tcp_enter_loss` does while `high_seq` is ahead).
//! - Growth only when cwnd-limited ([`crate::cc::cwnd_limited`], as Linux
//!   `tcp_is_cwnd_limited`): an application-limited flow's cwnd stays put.
//! - **Pacing** (`--pacing kernel`, the default): as the kernel paces
//!   kernel:reno on the same socket. kernel:reno is paced in this lab (bbr, the
//!   namespaces' default congestion control, leaves `SK_PACING_NEEDED` on the
//!   socket, docs/NOTES.md) at Linux `tcp_update_pacing_rate`'s rate, 200 % of
//!   max(cwnd, packets_out)/SRTT while cwnd < ssthresh/2, 120 % after;
//!   ccp-datapath keeps that pacing and sets the same rate per ACK.
//!   `--pacing report` commands the rate with every report instead
//!   ([`crate::cc::Paced`]; in slow start for 1.5 x the reported cwnd, as
//!   the fold doubles cwnd per round between reports), `--pacing off` none.
//!
//! Why per ACK in the fold: growth applied once per report released a whole
//! report's worth of packets at once, a line-rate burst into the queue
//! (measured with `ccplab fidelity`: retransmits 3.0x the kernel's at one
//! report per RTT, 1.2-1.3x at four, and Normalized Area 1.4-2.5x), which the
//! kernel's per-ACK growth never sends. Differences from Linux `reno` that
//! remain: congestion avoidance per report (1/4 RTT); PRR's window moves per
//! ACK but its constants per report, and between a report and its answer the
//! fold holds cwnd (one report round trip, p50 0.16 ms); PRR divides by
//! RecoverFS (RFC 6937) where Linux divides by `prior_cwnd`; the recovery point
//! is estimated from the in-flight, lost and SACKed counts at the loss
//! ([`crate::cc::LossGuard::start`]), and a loss in the report that passes
//! it counts as the old window's; ssthresh uses cwnd rather than
//! FlightSize, as Linux `tcp_reno_ssthresh` does.
//!
//! Why PRR runs per ACK in the fold and the datapath paces: a loss report (the
//! urgent report at the first loss ACK) also carries the packets acknowledged
//! before the loss; a per-report PRR counted them as delivered in recovery,
//! sent too few, let the link idle, then refilled in flight in one burst at
//! twice the link rate that overflowed the queue: a second halving where the
//! kernel halves once. Between reports the kernel also refills in flight one
//! for one where Linux's `tcp_cwnd_reduction` sends about one packet per two
//! delivered. Unpaced, line-rate flights overflowed the queue earlier than
//! kernel:reno's paced ones. With PRR per ACK and the kernel's pacing
//! (`--pacing kernel`, the default) ccp:reno meets the `ccplab fidelity`
//! targets (docs/results/fidelity.md).

use crate::fold::{Cadence, FoldProgram};
use crate::loss_based::{LossBased, LossRules, LossWindow, FOLD_FEATURES};
use crate::cc::{Paced, PacingMode, SocketPacing, WindowParams};
use crate::AlgorithmSpec;

/// Reno (RFC 5681) as an [`AlgorithmSpec`].
pub struct RenoSpec;

/// Reno's flags (beyond the shared window bounds).
#[derive(clap::Args, Clone, Debug)]
pub struct RenoArgs {
    /// Pacing: kernel (the default: the kernel side paces per ACK as it paces
    /// kernel:reno on the same socket), report (the algorithm commands Linux
    /// tcp_update_pacing_rate's rate every report; `true`) or off (`false`).
    #[arg(long, value_enum, default_value = "kernel", value_name = "MODE")]
    pub pacing: PacingMode,
}

impl Default for RenoArgs {
    fn default() -> Self {
        RenoArgs { pacing: PacingMode::Kernel }
    }
}

/// Reno's fold program: four reports per RTT, urgent on loss or timeout.
pub const PROGRAM: FoldProgram =
    FoldProgram { name: "ccplab_reno", cadence: Cadence::PerRtt(4), urgent_on_loss: true, features: FOLD_FEATURES };

impl AlgorithmSpec for RenoSpec {
    const NAME: &'static str = "reno";
    const SUMMARY: &'static str = "TCP Reno: slow start, +1 packet per RTT in congestion avoidance, \
        cwnd halving on a loss event, cwnd = 1 packet after a timeout (per-report updates)";
    const SOURCE: &'static str = "RFC 5681";
    const CONTROLS: &'static str = "cwnd+rate";
    type Args = RenoArgs;
    type Flow = Paced<Reno>;

    fn new_flow(args: &RenoArgs, params: WindowParams) -> Paced<Reno> {
        let reno = Reno::new(params).with_fold(&PROGRAM);
        Paced::new(reno, args.pacing.per_report())
    }

    fn pace_itself(args: &mut Self::Args, socket: SocketPacing) -> Option<SocketPacing> {
        args.pacing = args.pacing.without_datapath_pacing(socket);
        args.pacing.glue_pacing()
    }

    fn program(_args: &RenoArgs) -> FoldProgram {
        PROGRAM
    }
}

/// Reno's own rules (Linux tcp_cong.c's `tcp_reno_ssthresh` and
/// `tcp_reno_cong_avoid`); the rest is the loss-based core's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenoRules;

impl LossRules for RenoRules {
    /// Half the window, at least 2 packets (§3.2 eq. 4 with cwnd for
    /// FlightSize, as Linux `tcp_reno_ssthresh`).
    fn ssthresh(&mut self, cwnd_pkts: f64) -> f64 {
        (cwnd_pkts / 2.0).max(2.0)
    }

    /// +1/cwnd per packet acknowledged: +1 packet per RTT (§3.1).
    fn congestion_avoidance(&mut self, w: &mut LossWindow, _now_us: u64, acked_pkts: f64) {
        w.cwnd += acked_pkts / w.cwnd;
    }
}

/// Reno's per-flow state: the loss-based core with Reno's rules.
pub type Reno = LossBased<RenoRules>;

impl Reno {
    /// A new flow starting at `params.init_cwnd_pkts` in slow start.
    pub fn new(params: WindowParams) -> Self {
        LossBased::with_rules(params, RenoRules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::{Measurement, Phase, WindowAlgorithm};

    const MSS: u32 = 1000;
    const RTT_US: u64 = 50_000;

    /// [`crate::cc::test_params`] (floor 1) with these start values and ceiling.
    fn params(init: f64, ssthresh: f64, max: f64) -> WindowParams {
        WindowParams { mss_bytes: MSS, init_cwnd_pkts: init, init_ssthresh_pkts: ssthresh, max_cwnd_pkts: max, ..crate::cc::test_params() }
    }

    /// A per-RTT report at round `round` that acknowledges `acked_pkts` packets.
    fn ack_report(round: u64, acked_pkts: f64) -> Measurement {
        Measurement {
            now_us: round * RTT_US,
            acked_bytes: (acked_pkts * f64::from(MSS)).round() as u64,
            delivered_pkts: acked_pkts.round() as u64,
            rtt_us: RTT_US,
            min_rtt_us: RTT_US,
            ..Default::default()
        }
    }

    #[test]
    fn slow_start_doubles_per_rtt() {
        let mut r = Reno::new(params(10.0, f64::INFINITY, 1e6));
        let mut expected = 10.0;
        for round in 1..=6 {
            // A full window is acknowledged in each RTT: cwnd += cwnd.
            let bytes = r.on_report(&ack_report(round, r.cwnd_pkts()));
            expected *= 2.0;
            assert_eq!(r.cwnd_pkts(), expected);
            assert_eq!(bytes, (expected * f64::from(MSS)) as u32);
            assert_eq!(r.phase(), Phase::SlowStart);
        }
    }

    #[test]
    fn slow_start_hands_over_to_congestion_avoidance_at_ssthresh() {
        let mut r = Reno::new(params(10.0, 16.0, 1e6));
        r.on_report(&ack_report(1, 10.0));
        // 6 packets fill slow start up to ssthresh 16; the other 4 grow by 4/16.
        assert_eq!(r.cwnd_pkts(), 16.0 + 4.0 / 16.0);
        assert_eq!(r.phase(), Phase::CongestionAvoidance);
    }

    #[test]
    fn congestion_avoidance_adds_one_mss_per_rtt() {
        let mut r = Reno::new(params(20.0, 20.0, 1e6));
        for round in 1..=5 {
            let before = r.cwnd_pkts();
            r.on_report(&ack_report(round, before));
            // RFC 5681: +1/cwnd per ACK; a window of ACKs adds one packet.
            assert!((r.cwnd_pkts() - (before + 1.0)).abs() < 1e-9);
        }
    }

    #[test]
    fn loss_halves_once_per_window_then_recovers_at_the_recovery_point() {
        let mut r = Reno::new(params(40.0, 40.0, 1e6));
        r.on_report(&ack_report(1, 40.0));
        let at_loss = r.cwnd_pkts();
        // 41 packets were outstanding when the loss was detected.
        let loss = Measurement { lost_pkts: 3, inflight_max_pkts: 41, ..ack_report(2, 0.0) };
        r.on_report(&loss);
        let halved = (at_loss / 2.0).max(2.0);
        assert_eq!(r.cwnd_pkts(), halved);
        assert_eq!(r.ssthresh_pkts(), halved);
        assert_eq!(r.phase(), Phase::Recovery);
        // Another loss report of the same window, several RTTs later: no second
        // cut, no growth, as long as the 41 packets are not all acknowledged.
        let again = Measurement { lost_pkts: 1, ..ack_report(5, 20.0) };
        r.on_report(&again);
        assert_eq!(r.cwnd_pkts(), halved);
        r.on_report(&ack_report(6, 20.0));
        assert_eq!(r.cwnd_pkts(), halved);
        assert_eq!(r.phase(), Phase::Recovery);
        // The 41st packet passes the recovery point: congestion avoidance again.
        r.on_report(&ack_report(7, 1.0));
        assert!((r.cwnd_pkts() - (halved + 1.0 / halved)).abs() < 1e-9);
        assert_eq!(r.phase(), Phase::CongestionAvoidance);
        // A loss in a later window cuts again.
        let before = r.cwnd_pkts();
        r.on_report(&Measurement { lost_pkts: 1, ..ack_report(8, 1.0) });
        assert_eq!(r.cwnd_pkts(), before / 2.0);
    }

    #[test]
    fn no_growth_when_not_cwnd_limited() {
        let mut r = Reno::new(params(20.0, 20.0, 1e6));
        // The application kept only 5 packets in flight: cwnd stays at 20.
        for round in 1..=5 {
            r.on_report(&Measurement { inflight_max_pkts: 5, ..ack_report(round, 5.0) });
        }
        assert_eq!(r.cwnd_pkts(), 20.0);
        // Slow start below ssthresh: limited while cwnd < 2 x in flight.
        let mut r = Reno::new(params(10.0, f64::INFINITY, 1e6));
        r.on_report(&Measurement { inflight_max_pkts: 6, ..ack_report(1, 10.0) });
        assert_eq!(r.cwnd_pkts(), 20.0);
        r.on_report(&Measurement { inflight_max_pkts: 6, ..ack_report(2, 6.0) });
        assert_eq!(r.cwnd_pkts(), 20.0);
    }

    #[test]
    fn rto_during_recovery_keeps_ssthresh() {
        let mut r = Reno::new(params(40.0, 40.0, 1e6));
        r.on_report(&Measurement { lost_pkts: 1, inflight_max_pkts: 40, ..ack_report(1, 0.0) });
        assert_eq!(r.ssthresh_pkts(), 20.0);
        r.on_report(&Measurement { timeout: true, ..ack_report(9, 0.0) });
        assert_eq!(r.ssthresh_pkts(), 20.0, "no second cut of ssthresh");
        assert_eq!(r.cwnd_pkts(), 1.0);
    }

    #[test]
    fn timeout_resets_to_one_packet_and_halves_ssthresh() {
        let mut r = Reno::new(params(30.0, f64::INFINITY, 1e6));
        r.on_report(&ack_report(1, 30.0));
        let before = r.cwnd_pkts();
        r.on_report(&Measurement { timeout: true, ..ack_report(2, 0.0) });
        assert_eq!(r.cwnd_pkts(), 1.0);
        assert_eq!(r.ssthresh_pkts(), before / 2.0);
        assert_eq!(r.phase(), Phase::TimeoutRecovery);
        // A second RTO before the recovery point keeps ssthresh.
        r.on_report(&Measurement { timeout: true, now_us: 2 * RTT_US + 10, ..Default::default() });
        assert_eq!(r.ssthresh_pkts(), before / 2.0);
        // Then slow start again: 1 -> 2 -> 4.
        r.on_report(&ack_report(4, 1.0));
        assert_eq!(r.cwnd_pkts(), 2.0);
        r.on_report(&ack_report(5, 2.0));
        assert_eq!(r.cwnd_pkts(), 4.0);
        assert_eq!(r.phase(), Phase::SlowStart);
    }

    #[test]
    fn slow_start_in_the_fold_is_followed_then_taken_over_at_the_first_loss() {
        let mut r = Reno::new(params(10.0, f64::INFINITY, 1e6)).with_fold_slow_start(true);
        // The fold grew cwnd per ACK: user space adopts the datapath's cwnd and leaves it (0).
        let grown = Measurement { dp_cwnd_bytes: 20 * MSS as u64, inflight_max_pkts: 19, ..ack_report(1, 10.0) };
        assert_eq!(r.on_report(&grown), 0);
        assert_eq!((r.cwnd_pkts(), r.phase()), (20.0, Phase::SlowStart));
        assert!(r.fold_slow_start());
        // The first loss: halve the fold's cwnd at that ACK (37 packets), marked takeover.
        let loss = Measurement { lost_pkts: 2, dp_cwnd_bytes: 37 * MSS as u64, inflight_max_pkts: 37, ..ack_report(2, 3.0) };
        // PRR: 37 outstanding, 2 lost, nothing delivered since the loss ACK (the
        // report's 3 acked came before it): 37 - 2 = 35 packets.
        assert_eq!(r.on_report(&loss), 35_000 + crate::cc::TAKEOVER_MARK_BYTES);
        assert!(!r.fold_slow_start());
        assert_eq!((r.cwnd_pkts(), r.ssthresh_pkts(), r.phase()), (18.5, 18.5, Phase::Recovery));
        // From now on user space commands as before; the report's cwnd is not adopted.
        let after = Measurement { dp_cwnd_bytes: 99 * MSS as u64, ..ack_report(3, 37.0) };
        assert_eq!(r.on_report(&after), r.cwnd_bytes());
        assert!((r.cwnd_pkts() - (18.5 + 37.0 / 18.5)).abs() < 1e-9, "CA from 18.5 (recovery ended), not 99");
    }

    #[test]
    fn fast_recovery_commands_the_prr_window_down_to_ssthresh() {
        let mut r = Reno::new(params(40.0, 40.0, 1e6));
        // 40 outstanding, 1 lost, nothing delivered yet: cwnd (state) = ssthresh 20,
        // command 39 (PRR: in flight may not grow before anything is delivered).
        assert_eq!(r.on_report(&Measurement { lost_pkts: 1, inflight_max_pkts: 40, ..ack_report(1, 0.0) }), 39 * MSS);
        assert_eq!(r.cwnd_pkts(), 20.0);
        // 10 SACKed: one new packet per two delivered -> 39 - 5 = 34.
        assert_eq!(r.on_report(&Measurement { sacked_pkts: 10, delivered_pkts: 10, ..ack_report(2, 0.0) }), 34 * MSS);
        // 28 more delivered: 34 - 14 = 20 = ssthresh, and never below it.
        assert_eq!(r.on_report(&Measurement { sacked_pkts: 28, delivered_pkts: 28, ..ack_report(3, 0.0) }), 20 * MSS);
        assert_eq!(r.on_report(&Measurement { sacked_pkts: 2, delivered_pkts: 2, ..ack_report(4, 0.0) }), 20 * MSS);
        // The recovery point (40 packets cumulatively acked): CA from ssthresh, no PRR.
        r.on_report(&ack_report(5, 40.0));
        assert_eq!(r.phase(), Phase::CongestionAvoidance);
        assert_eq!(r.on_report(&ack_report(6, 20.0)), r.cwnd_bytes());
        // An RTO is not PRR: the loss window (1 packet) at once.
        assert_eq!(r.on_report(&Measurement { timeout: true, ..ack_report(7, 0.0) }), MSS);
    }

    #[test]
    fn slow_start_in_the_fold_stops_at_ssthresh() {
        let mut r = Reno::new(params(10.0, 16.0, 1e6)).with_fold_slow_start(true);
        let m = Measurement { dp_cwnd_bytes: 17 * MSS as u64, ..ack_report(1, 7.0) };
        assert_eq!(r.on_report(&m), 16 * MSS + crate::cc::TAKEOVER_MARK_BYTES);
        assert_eq!((r.cwnd_pkts(), r.phase()), (16.0, Phase::CongestionAvoidance));
        // Congestion avoidance per report from here: +1/cwnd per acked packet.
        assert_eq!(r.on_report(&ack_report(2, 16.0)), 17 * MSS);
    }

    #[test]
    fn the_default_program_runs_slow_start_in_the_fold() {
        assert!(PROGRAM.slow_start_in_fold());
        let flow = RenoSpec::new_flow(&RenoArgs::default(), params(10.0, f64::INFINITY, 1e6));
        assert!(flow.fold_slow_start());
        let text = PROGRAM.text();
        assert!(text.contains("(:= fcw (if (&& ss t2) (+ fcw Ack.bytes_acked)))") && text.contains("(ss true)"), "{text}");
    }

    #[test]
    fn the_default_program_runs_prr_per_ack_in_the_fold() {
        assert!(PROGRAM.prr_in_fold());
        let text = PROGRAM.text();
        let (_, sc) = portus::lang::compile(text.as_bytes(), &[]).expect("compiles within Portus's 16 control registers");
        for reg in ["pm", "pn", "pa", "pf", "pss", "pmss", "nrep"] {
            assert!(sc.get(reg).is_some(), "{reg} declared");
        }
        // Every report block counts its report (the fold's side of `pn`): the
        // urgent one, the regular one and the app-limited back-off's.
        assert_eq!(text.matches("(report)").count(), 3, "{text}");
        assert_eq!(text.matches("(:= nrep (+ nrep 1))\n    (report)").count(), 3, "{text}");
        // The flow's registers name only the program's registers.
        let mut flow = RenoSpec::new_flow(&RenoArgs::default(), params(10.0, f64::INFINITY, 1e6));
        crate::Controller::on_report(&mut flow, &ack_report(1, 5.0));
        for (name, _) in crate::Controller::fold_registers(&flow) {
            assert!(sc.get(name).is_some(), "{name} is a register of the program");
        }
    }

    #[test]
    fn floor_and_ceiling_hold() {
        // ssthresh never goes below 2 and cwnd never below the floor of 1 packet.
        let mut r = Reno::new(params(2.0, f64::INFINITY, 25.0));
        r.on_report(&Measurement { lost_pkts: 1, ..ack_report(1, 0.0) });
        assert_eq!(r.ssthresh_pkts(), 2.0);
        assert_eq!(r.cwnd_pkts(), 2.0);
        r.on_report(&Measurement { timeout: true, ..ack_report(3, 0.0) });
        assert_eq!(r.cwnd_pkts(), 1.0);
        // Ceiling: slow start is capped at max_cwnd_pkts = 25.
        let mut r = Reno::new(params(10.0, f64::INFINITY, 25.0));
        for round in 1..=4 {
            r.on_report(&ack_report(round, r.cwnd_pkts()));
            assert!(r.cwnd_pkts() <= 25.0);
        }
        assert_eq!(r.cwnd_pkts(), 25.0);
        assert_eq!(r.cwnd_bytes(), 25 * MSS);
    }
}
