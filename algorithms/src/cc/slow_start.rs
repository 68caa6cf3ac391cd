//! Slow start: per report with byte counting ([`slow_start`]), and user
//! space's side of slow start per ACK in the fold ([`FoldSlowStart`]).

use super::Measurement;

/// Bytes added to the first Cwnd command after slow start in the fold ends, so
/// the fold cannot mistake it for its own value (see [`crate::fold`]'s
/// `SLOW_START`); the datapath converts bytes to whole packets (floor), so
/// the byte changes nothing else.
pub const TAKEOVER_MARK_BYTES: u32 = 1;

/// User space's side of slow start in the fold ([`crate::fold::Growth::SlowStart`]).
///
/// While active the fold grows cwnd per ACK: each report's `dp_cwnd_bytes` is
/// the flow's cwnd (adopted with [`FoldSlowStart::adopt`]), and the command is
/// Cwnd 0 ("leave it"). It ends when a report carries a loss or a timeout (the
/// fold stopped at that ACK) or when the algorithm calls [`FoldSlowStart::stop`]
/// (ssthresh, HyStart, the ceiling); the first command after that carries
/// [`TAKEOVER_MARK_BYTES`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FoldSlowStart {
    active: bool,
    mark_next: bool,
}

impl FoldSlowStart {
    /// Slow start in the fold, active from the flow's start when `on`.
    pub fn new(on: bool) -> Self {
        FoldSlowStart { active: on, mark_next: false }
    }

    /// True while the fold grows cwnd.
    pub fn active(&self) -> bool {
        self.active
    }

    /// Take report `m` into account: while active, `cwnd_pkts` becomes the
    /// fold's cwnd (`dp_cwnd_bytes / mss`, when reported and not a timeout
    /// report: that one holds the kernel's loss window); a loss or timeout ends
    /// slow start in the fold (it stopped at that ACK). Returns whether it was
    /// active for this report.
    pub fn adopt(&mut self, m: &Measurement, cwnd_pkts: &mut f64, mss_bytes: u32) -> bool {
        if !self.active {
            return false;
        }
        // A timeout report's cwnd is the kernel's loss window, not the fold's.
        if m.dp_cwnd_bytes > 0 && !m.timeout {
            *cwnd_pkts = m.dp_cwnd_bytes as f64 / f64::from(mss_bytes.max(1));
        }
        if m.has_loss() || m.timeout {
            self.stop();
        }
        true
    }

    /// The fold registers to send with the flow's initial command of
    /// `cwnd_bytes`: while active, `fcw` (the fold's own cwnd) = that window,
    /// so the fold takes the command as its own value and goes on growing from
    /// it. Without it a fast flow's fold had already grown cwnd when the
    /// initial command arrived (the first ACKs of a veth flow come within
    /// microseconds, the command a report round trip later), took the
    /// unmarked command for user space's takeover and ended slow start for
    /// good while user space went on answering "go on": cwnd stayed at the
    /// initial 10 packets for the whole run (1 flow on veth: 9-12 Gbit/s
    /// instead of 50 in 3 of 7 runs of `ccplab.dpbench`).
    pub fn initial_registers(&self, cwnd_bytes: u32) -> Vec<(&'static str, u32)> {
        if self.active {
            vec![("fcw", cwnd_bytes)]
        } else {
            Vec::new()
        }
    }

    /// User space takes over (the next command is marked).
    pub fn stop(&mut self) {
        if self.active {
            self.active = false;
            self.mark_next = true;
        }
    }

    /// The Cwnd to command for a window of `bytes`: 0 while active, `bytes`
    /// plus the mark on the first command after slow start in the fold ended.
    pub fn command(&mut self, bytes: u32) -> u32 {
        if self.active {
            0
        } else if std::mem::take(&mut self.mark_next) {
            bytes.saturating_add(TAKEOVER_MARK_BYTES)
        } else {
            bytes
        }
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
    fn fold_slow_start_adopts_the_fold_cwnd_until_loss_then_marks_the_takeover() {
        let mut ss = FoldSlowStart::new(true);
        let mut cwnd = 10.0;
        let m = Measurement { dp_cwnd_bytes: 23_000, acked_bytes: 13_000, ..Default::default() };
        assert!(ss.adopt(&m, &mut cwnd, 1000));
        assert_eq!((cwnd, ss.command(23_000)), (23.0, 0), "Cwnd 0 while the fold grows");
        // The loss report: the fold stopped at that ACK; its cwnd is adopted once more.
        let loss = Measurement { dp_cwnd_bytes: 30_000, lost_pkts: 2, ..Default::default() };
        assert!(ss.adopt(&loss, &mut cwnd, 1000));
        assert!(!ss.active());
        assert_eq!(cwnd, 30.0);
        assert_eq!(ss.command(15_000), 15_001, "first command after the fold: marked");
        assert_eq!(ss.command(15_000), 15_000);
        assert!(!ss.adopt(&m, &mut cwnd, 1000), "inactive: the report's cwnd is not adopted");
        // A timeout report holds the kernel's loss window: not adopted.
        let mut rto = FoldSlowStart::new(true);
        let t = Measurement { dp_cwnd_bytes: 1000, timeout: true, ..Default::default() };
        assert!(rto.adopt(&t, &mut cwnd, 1000));
        assert_eq!((cwnd, rto.active()), (30.0, false));
        assert_eq!(cwnd, 30.0);
        // Off from the start (unit tests, other programs): plain commands.
        let mut off = FoldSlowStart::new(false);
        assert_eq!(off.command(5000), 5000);
        off.stop();
        assert_eq!(off.command(5000), 5000, "stop when inactive marks nothing");
    }
}
