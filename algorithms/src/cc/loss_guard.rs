//! One reduction per window of losses: [`LossGuard`] tells a new congestion
//! event from further losses of the same window, as the kernel's recovery.

use super::{Measurement, Phase};

/// Tells apart a new congestion event from further losses of the same window,
/// as the kernel's recovery does.
///
/// RFC 5681 §3.2 and RFC 9438 §4.6 reduce cwnd once per loss event. Linux ends
/// fast recovery (and the Loss state after an RTO) when `snd_una` passes the
/// recovery point `high_seq`, the `snd_nxt` of the moment recovery started. In
/// report terms: recovery ends once the data cumulatively acknowledged since
/// the reduction covers the window that was outstanding then
/// ([`Measurement::outstanding_pkts`] x MSS). Losses before that belong to the
/// same window, and an RTO during recovery does not lower ssthresh a second
/// time (as `tcp_enter_loss` keeps ssthresh while `high_seq` is ahead).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LossGuard {
    /// Bytes cumulatively acknowledged over the flow's reports.
    acked_total: u64,
    /// Recovery ends when `acked_total` reaches this (None = not in recovery).
    recovery_point: Option<u64>,
    after_timeout: bool,
    /// Packets SACKed since the cumulative ACK last advanced (the reports'
    /// `sacked` since the last one with acknowledged bytes, that one's
    /// included): the kernel's `sacked_out`, which in-flight counts leave out.
    sacked_since_ack: u64,
}

/// What one report asks of a loss-based window (RFC 5681 §3, RFC 9438 §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportEvent {
    /// A retransmission timeout: reset the window.
    Timeout,
    /// The first loss of a window: one multiplicative decrease.
    LossEvent,
    /// No new congestion signal: grow (slow start or congestion avoidance).
    Growth,
    /// During recovery (before the recovery point): neither grow nor cut again.
    Hold,
}

impl LossGuard {
    /// Count report `m`'s acknowledged bytes (ending recovery at the recovery
    /// point), then classify it: a timeout wins; after an RTO the window grows
    /// and ignores losses until the recovery point; during fast recovery
    /// everything holds; otherwise a loss is a new event, else growth.
    pub fn classify(&mut self, m: &Measurement) -> ReportEvent {
        self.acked_total += m.acked_bytes;
        self.sacked_since_ack =
            if m.acked_bytes > 0 { m.sacked_pkts } else { self.sacked_since_ack.saturating_add(m.sacked_pkts) };
        let mut ended_now = false;
        if self.recovery_point.is_some_and(|p| self.acked_total >= p) {
            self.recovery_point = None;
            self.after_timeout = false;
            ended_now = true;
        }
        if m.timeout {
            ReportEvent::Timeout
        } else if self.after_timeout() {
            // Linux grows cwnd (slow start from the loss window) in the Loss
            // state (tcp_may_raise_cwnd), but losses of that window do not cut again.
            ReportEvent::Growth
        } else if self.active() {
            ReportEvent::Hold
        } else if m.has_loss() && !ended_now {
            ReportEvent::LossEvent
        } else {
            // A loss in the report that passes the recovery point is taken as
            // one of the old window's (a retransmission marked lost as the hole
            // fills): the report cannot tell which packet it was, and two more
            // halvings at the end of the first recovery were measured on
            // ccp:reno (cwnd 101 -> 25 packets) where kernel:reno cut once.
            ReportEvent::Growth
        }
    }

    /// True during recovery (fast recovery or after an RTO), before the recovery point.
    pub fn active(&self) -> bool {
        self.recovery_point.is_some()
    }

    /// True during the recovery that follows an RTO.
    pub fn after_timeout(&self) -> bool {
        self.active() && self.after_timeout
    }

    /// The phase a loss-based window is in: the recovery states first, then slow
    /// start below ssthresh, else congestion avoidance.
    pub fn phase(&self, cwnd_pkts: f64, ssthresh_pkts: f64) -> Phase {
        if self.after_timeout() {
            Phase::TimeoutRecovery
        } else if self.active() {
            Phase::Recovery
        } else if cwnd_pkts < ssthresh_pkts {
            Phase::SlowStart
        } else {
            Phase::CongestionAvoidance
        }
    }

    /// Start recovery: it lasts until `outstanding_pkts` (in flight and lost, as
    /// [`Measurement::outstanding_pkts`]) plus the packets SACKed since the
    /// cumulative ACK last advanced, x `mss_bytes`, more bytes are cumulatively
    /// acknowledged: snd_nxt - snd_una, the kernel's `high_seq`.
    ///
    /// Why the SACKed packets: RACK marks a hole lost only a reorder window
    /// after later packets were SACKed, so by the loss report `sacked_out` holds
    /// a quarter RTT or more of SACKed packets that are outstanding but not in
    /// flight. Without them the recovery point fell short and the old window's
    /// last losses, reported just after it, cut cwnd a second time (paced
    /// ccp:reno, 24 -> 6 Mbit/s step: 127 -> 64 -> 33 packets where kernel:reno
    /// cut once).
    pub fn start(&mut self, outstanding_pkts: f64, mss_bytes: u32, after_timeout: bool) {
        let pkts = outstanding_pkts.max(1.0) + self.sacked_since_ack as f64;
        let bytes = (pkts * f64::from(mss_bytes)) as u64;
        self.recovery_point = Some(self.acked_total + bytes);
        self.after_timeout = after_timeout;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_lasts_until_the_recovery_point() {
        let acked = |bytes| Measurement { acked_bytes: bytes, ..Default::default() };
        let mut g = LossGuard::default();
        assert_eq!(g.classify(&acked(5000)), ReportEvent::Growth);
        g.start(10.0, 1000, false);
        // A loss of the same window, however late, holds until 10 packets are acked.
        let loss = Measurement { lost_pkts: 2, ..acked(4000) };
        assert_eq!(g.classify(&loss), ReportEvent::Hold);
        assert_eq!(g.classify(&acked(5999)), ReportEvent::Hold);
        assert!(g.active() && !g.after_timeout());
        // The report that passes the recovery point: a loss in it is the old window's.
        assert_eq!(g.classify(&Measurement { lost_pkts: 1, ..acked(1) }), ReportEvent::Growth);
        assert!(!g.active());
        assert_eq!(g.classify(&loss), ReportEvent::LossEvent);
        // A timeout always wins; after it the window grows but ignores losses.
        g.start(3.0, 1000, false);
        assert_eq!(g.classify(&Measurement { timeout: true, ..Default::default() }), ReportEvent::Timeout);
        g.start(3.0, 1000, true);
        assert_eq!(g.classify(&Measurement { lost_pkts: 2, ..acked(0) }), ReportEvent::Growth);
        assert!(g.after_timeout());
    }

    #[test]
    fn recovery_point_counts_the_packets_sacked_since_the_cumulative_ack_stalled() {
        let m = |acked: u64, sacked: u64| Measurement { acked_bytes: acked, sacked_pkts: sacked, ..Default::default() };
        let mut g = LossGuard::default();
        g.classify(&m(5000, 2));
        // A hole: no cumulative ACK, 6 + 4 packets SACKed before RACK marks it lost.
        g.classify(&m(0, 6));
        assert_eq!(g.classify(&Measurement { lost_pkts: 1, ..m(0, 4) }), ReportEvent::LossEvent);
        // 10 in flight + lost, plus the 2 + 6 + 4 SACKed (the first report's 2 came
        // with acked bytes, after the ACK that advanced): 22 packets.
        g.start(10.0, 1000, false);
        assert_eq!(g.classify(&m(21_999, 0)), ReportEvent::Hold);
        assert!(g.active());
        assert_eq!(g.classify(&Measurement { lost_pkts: 1, ..m(1, 0) }), ReportEvent::Growth, "recovery ends at 22 packets");
        assert!(!g.active());
    }
}
