//! The vocabulary of window algorithms: the per-flow [`WindowAlgorithm`],
//! the [`Phase`] it names in logs, and the cwnd-limited test that gates growth.

use super::{Measurement, WindowParams};

/// Whether the flow was limited by its congestion window during report `m`,
/// as Linux `tcp_is_cwnd_limited`: in slow start when cwnd < 2 x the largest
/// in-flight count, otherwise when the in-flight count reached cwnd (a slack of
/// max(3 packets, 10 %) absorbs delayed ACKs and TSO deferral, which keep
/// in-flight a little below cwnd in a cwnd-limited flow). A report without the
/// in-flight field counts as limited (the algorithm then grows as before).
///
/// Window growth only when cwnd-limited keeps an application- or
/// receive-window-limited flow's cwnd from climbing without bound (RFC 7661).
pub fn cwnd_limited(m: &Measurement, cwnd_pkts: f64, in_slow_start: bool) -> bool {
    if m.inflight_max_pkts == 0 {
        return true;
    }
    let used = m.inflight_max_pkts as f64;
    if in_slow_start {
        cwnd_pkts < 2.0 * used
    } else {
        used >= cwnd_pkts - (0.1 * cwnd_pkts).max(3.0)
    }
}

/// Where an algorithm is in its window cycle (for logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    SlowStart,
    CongestionAvoidance,
    /// Within one RTT after a loss-triggered reduction: no growth, no second cut.
    Recovery,
    /// Within one RTT after an RTO reset.
    TimeoutRecovery,
}

impl Phase {
    /// Short name used in log lines.
    pub fn as_str(&self) -> &'static str {
        match self {
            Phase::SlowStart => "slow_start",
            Phase::CongestionAvoidance => "cong_avoid",
            Phase::Recovery => "recovery",
            Phase::TimeoutRecovery => "rto_recovery",
        }
    }
}

/// The window logic of one flow, independent of Portus.
pub trait WindowAlgorithm: Send {
    /// Apply one report; returns the new cwnd in bytes (already clamped).
    fn on_report(&mut self, m: &Measurement) -> u32;
    /// Current cwnd in packets.
    fn cwnd_pkts(&self) -> f64;
    /// Current slow-start threshold in packets.
    fn ssthresh_pkts(&self) -> f64;
    /// Current phase (for logs).
    fn phase(&self) -> Phase;
    /// Window bounds and MSS in use.
    fn params(&self) -> &WindowParams;
    /// Current cwnd in bytes.
    fn cwnd_bytes(&self) -> u32 {
        self.params().to_bytes(self.cwnd_pkts())
    }
    /// The packets still outstanding after report `m` (the kernel's
    /// `packets_out`: in flight plus SACKed plus lost), as far as the window
    /// logic knows; by default the report's estimate
    /// ([`Measurement::outstanding_pkts`]). For pacing ([`super::Paced`]).
    fn packets_out_pkts(&self, m: &Measurement) -> f64 {
        m.outstanding_pkts() as f64
    }
    /// Control registers of the algorithm's fold program to set with each
    /// command ([`crate::Controller::fold_registers`]); none by default.
    fn fold_registers(&self) -> Vec<(&'static str, u32)> {
        Vec::new()
    }
    /// Control registers to set with the initial command
    /// ([`crate::Controller::initial_fold_registers`]); none by default.
    fn initial_fold_registers(&self) -> Vec<(&'static str, u32)> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cwnd_limited_as_tcp_is_cwnd_limited() {
        let m = |inflight| Measurement { inflight_max_pkts: inflight, ..Default::default() };
        // Slow start: limited while cwnd < 2 x in flight.
        assert!(cwnd_limited(&m(6), 10.0, true));
        assert!(!cwnd_limited(&m(5), 10.0, true));
        // Congestion avoidance: the window must be (nearly) full.
        assert!(cwnd_limited(&m(98), 100.0, false));
        assert!(!cwnd_limited(&m(50), 100.0, false));
        assert!(cwnd_limited(&m(0), 100.0, false), "unknown counts as limited");
    }
}
