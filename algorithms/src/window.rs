//! Pure window logic shared by the algorithms: the measurement a report carries,
//! the window bounds (floor, ceiling, MSS), RTT smoothing, the once-per-window
//! loss-event guard and slow start.
//!
//! Nothing here talks to Portus, so every algorithm can be unit-tested on a
//! scripted sequence of [`Measurement`]s. Windows are kept in packets (f64) as in
//! the RFCs' formulas and handed to the datapath in bytes (packets x MSS).

/// One report of the fold program (see [`crate::fold`]), as the window logic sees it.
///
/// All counters are totals since the previous report.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Measurement {
    /// When the report was received, in microseconds on a monotonic clock
    /// (any origin; only differences are used).
    pub now_us: u64,
    /// Bytes newly and cumulatively acknowledged (sum of `Ack.bytes_acked`).
    pub acked_bytes: u64,
    /// Packets SACKed / misordered (sum of `Ack.packets_misordered`).
    pub sacked_pkts: u64,
    /// Packets the datapath marked lost (sum of `Ack.lost_pkts_sample`).
    pub lost_pkts: u64,
    /// The datapath signalled a retransmission timeout (RTO).
    pub timeout: bool,
    /// Latest RTT sample in microseconds; 0 = no sample in this report.
    pub rtt_us: u64,
    /// Smallest RTT sample in this report in microseconds; 0 = no sample.
    pub min_rtt_us: u64,
    /// Packets in flight at the last ACK of the report.
    pub inflight_pkts: u64,
    /// The cwnd the datapath was using at the last ACK, in bytes (informational).
    pub dp_cwnd_bytes: u64,
}

impl Measurement {
    /// Acknowledged data in packets (`acked_bytes / mss`, fractional).
    pub fn acked_pkts(&self, mss_bytes: u32) -> f64 {
        self.acked_bytes as f64 / f64::from(mss_bytes.max(1))
    }

    /// A loss event per RFC 5681: the datapath marked at least one packet lost.
    ///
    /// SACKed packets alone are not a loss event (they may be reordering); the
    /// datapath's loss detection (dupthresh / RACK) turns them into `lost_pkts`.
    pub fn has_loss(&self) -> bool {
        self.lost_pkts > 0
    }
}

/// Window bounds and start values, in packets; shared by every algorithm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowParams {
    /// Maximum segment size in bytes, from the datapath's flow-create message.
    pub mss_bytes: u32,
    /// Initial cwnd in packets.
    pub init_cwnd_pkts: f64,
    /// Initial slow-start threshold in packets (`f64::INFINITY` = none).
    pub init_ssthresh_pkts: f64,
    /// Floor of cwnd in packets (1 for Reno and Cubic).
    pub min_cwnd_pkts: f64,
    /// Ceiling of cwnd in packets.
    pub max_cwnd_pkts: f64,
}

impl WindowParams {
    /// Clamp a window in packets to `[min_cwnd_pkts, max_cwnd_pkts]`.
    pub fn clamp(&self, cwnd_pkts: f64) -> f64 {
        cwnd_pkts.max(self.min_cwnd_pkts).min(self.max_cwnd_pkts)
    }

    /// Convert a window in packets to bytes for the datapath: round(pkts x MSS),
    /// saturated to `u32` (the datapath's Cwnd register width in libccp messages).
    pub fn to_bytes(&self, cwnd_pkts: f64) -> u32 {
        let bytes = (cwnd_pkts * f64::from(self.mss_bytes)).round();
        if bytes >= f64::from(u32::MAX) {
            u32::MAX
        } else if bytes <= 0.0 {
            0
        } else {
            bytes as u32
        }
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
}

/// Smoothed RTT per RFC 6298 (alpha = 1/8), from the reports' latest samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RttEstimator {
    /// Smoothed RTT in microseconds; 0 until the first sample.
    pub srtt_us: f64,
}

impl RttEstimator {
    /// Fold in a report's latest RTT sample (ignored when 0 = no sample).
    pub fn update(&mut self, m: &Measurement) {
        if m.rtt_us == 0 {
            return;
        }
        let sample = m.rtt_us as f64;
        self.srtt_us = if self.srtt_us == 0.0 {
            sample
        } else {
            0.875 * self.srtt_us + 0.125 * sample
        };
    }
}

/// Tells apart a new congestion event from further losses of the same window.
///
/// RFC 5681 §3.2 and RFC 9438 §4.6 reduce cwnd once per loss event; losses
/// reported within one smoothed RTT after a reduction belong to the same
/// window (the reports are urgent, so several may arrive in that RTT).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LossGuard {
    until_us: Option<u64>,
    after_timeout: bool,
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
    /// Within one RTT of a reduction: neither grow nor cut again.
    Hold,
}

impl LossGuard {
    /// Classify report `m`: a timeout wins, then a loss outside the guard,
    /// then growth outside the guard; anything inside the guard holds.
    pub fn classify(&self, m: &Measurement) -> ReportEvent {
        if m.timeout {
            ReportEvent::Timeout
        } else if self.active(m.now_us) {
            ReportEvent::Hold
        } else if m.has_loss() {
            ReportEvent::LossEvent
        } else {
            ReportEvent::Growth
        }
    }

    /// True while within one RTT after the last reduction at time `now_us`.
    pub fn active(&self, now_us: u64) -> bool {
        self.until_us.is_some_and(|t| now_us < t)
    }

    /// True while within one RTT after an RTO reset.
    pub fn after_timeout(&self, now_us: u64) -> bool {
        self.active(now_us) && self.after_timeout
    }

    /// The phase a loss-based window is in at `now_us`: the guard's recovery
    /// states first, then slow start below ssthresh, else congestion avoidance.
    pub fn phase(&self, now_us: u64, cwnd_pkts: f64, ssthresh_pkts: f64) -> Phase {
        if self.after_timeout(now_us) {
            Phase::TimeoutRecovery
        } else if self.active(now_us) {
            Phase::Recovery
        } else if cwnd_pkts < ssthresh_pkts {
            Phase::SlowStart
        } else {
            Phase::CongestionAvoidance
        }
    }

    /// Start the guard at `now_us` for one RTT (`rtt_us`; 0 = no guard).
    pub fn start(&mut self, now_us: u64, rtt_us: f64, after_timeout: bool) {
        self.until_us = Some(now_us + rtt_us.max(0.0) as u64);
        self.after_timeout = after_timeout;
    }
}

/// Slow start per RFC 5681 §3.1 with byte counting (RFC 3465, as Linux
/// `tcp_slow_start`): cwnd grows by the acknowledged packets, but not beyond
/// ssthresh. Returns the acknowledged packets left over for congestion avoidance.
///
/// Applied per report with the report's total, which is what the per-ACK rule
/// sums to.
pub fn slow_start(cwnd_pkts: &mut f64, ssthresh_pkts: f64, acked_pkts: f64) -> f64 {
    if *cwnd_pkts >= ssthresh_pkts {
        return acked_pkts;
    }
    let room = ssthresh_pkts - *cwnd_pkts;
    let used = acked_pkts.min(room);
    *cwnd_pkts += used;
    acked_pkts - used
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> WindowParams {
        WindowParams {
            mss_bytes: 1000,
            init_cwnd_pkts: 10.0,
            init_ssthresh_pkts: f64::INFINITY,
            min_cwnd_pkts: 1.0,
            max_cwnd_pkts: 50.0,
        }
    }

    #[test]
    fn clamp_and_bytes() {
        let p = params();
        assert_eq!(p.clamp(0.2), 1.0);
        assert_eq!(p.clamp(60.0), 50.0);
        assert_eq!(p.to_bytes(2.5), 2500);
        assert_eq!(p.to_bytes(1e12), u32::MAX);
    }

    #[test]
    fn slow_start_stops_at_ssthresh_and_returns_leftover() {
        let mut w = 10.0;
        assert_eq!(slow_start(&mut w, 16.0, 4.0), 0.0);
        assert_eq!(w, 14.0);
        assert_eq!(slow_start(&mut w, 16.0, 5.0), 3.0);
        assert_eq!(w, 16.0);
        assert_eq!(slow_start(&mut w, 16.0, 5.0), 5.0);
        assert_eq!(w, 16.0);
    }

    #[test]
    fn srtt_follows_rfc6298() {
        let mut r = RttEstimator::default();
        r.update(&Measurement { rtt_us: 0, ..Default::default() });
        assert_eq!(r.srtt_us, 0.0);
        r.update(&Measurement { rtt_us: 800, ..Default::default() });
        assert_eq!(r.srtt_us, 800.0);
        r.update(&Measurement { rtt_us: 1600, ..Default::default() });
        assert_eq!(r.srtt_us, 800.0 * 7.0 / 8.0 + 1600.0 / 8.0);
    }

    #[test]
    fn loss_guard_lasts_one_rtt() {
        let mut g = LossGuard::default();
        assert!(!g.active(0));
        g.start(1000, 500.0, false);
        assert!(g.active(1499));
        assert!(!g.after_timeout(1499));
        assert!(!g.active(1500));
    }
}
