//! When the main loop looks for reports (`--fold kernel`).
//!
//! Reports come through the report ring buffer. A forced ring-buffer wakeup
//! costs 20-30 us of BPF time inside the ACK's program, and each wakeup of
//! the daemon 60-120 us of its CPU in this VM (datapath/README.md), so
//! neither happens per report. The two sides share one stamp,
//! `last_report_look_ns` (ccp.bpf.c), the daemon's promise "I look again
//! by stamp + window" (`--report-wake-ms`):
//!
//! - the BPF side forces a wakeup for a report only when no promise covers
//!   it (the stamp is a window old, or 0), and then stamps it itself, so
//!   the reports after it wait for the look that wakeup brings;
//! - after a look that found reports, the daemon promises the next look one
//!   window later (the flows that reported are likely to again);
//! - after a look that found none, it withdraws the promise (stamp 0) and
//!   looks once more (a report may have been submitted against the old
//!   promise), then sleeps until the idle poll: the next report wakes it.
//!
//! So a report waits at most about one window, looks and forced wakeups each
//! come at most once per window, and a flow reporting now and then (an
//! application-limited flow, once a second) is heard at once.

use std::time::Duration;

/// The shortest poll timeout.
pub const MIN_POLL: Duration = Duration::from_millis(1);

/// The promise the loop keeps; `window` is `--report-wake-ms`.
#[derive(Debug, Clone, Copy)]
pub struct ReportLooks {
    window: Duration,
    promised: bool,
}

impl ReportLooks {
    /// Looks at most every `window` while reports come.
    pub fn new(window: Duration) -> Self {
        ReportLooks { window, promised: false }
    }

    /// A look (with the look after a withdrawal, if the first found none)
    /// found `reports` reports. Returns whether to promise the next look
    /// (stamp now); without a promise the stamp stays 0.
    pub fn looked(&mut self, reports: usize) -> bool {
        self.promised = reports > 0;
        self.promised
    }

    /// The poll timeout: the window while a promise stands, else `idle`.
    pub fn timeout(&self, idle: Duration) -> Duration {
        if self.promised {
            self.window.clamp(MIN_POLL, idle.max(MIN_POLL))
        } else {
            idle
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_millis(20);
    const IDLE: Duration = Duration::from_millis(100);

    #[test]
    fn reports_found_keep_a_look_one_window_later() {
        let mut l = ReportLooks::new(WINDOW);
        assert_eq!(l.timeout(IDLE), IDLE, "nothing promised before any report");
        assert!(l.looked(3));
        assert_eq!(l.timeout(IDLE), WINDOW);
        assert!(l.looked(1));
        assert_eq!(l.timeout(IDLE), WINDOW, "while reports keep coming, one look per window");
    }

    #[test]
    fn a_look_without_reports_withdraws_the_promise_and_sleeps() {
        let mut l = ReportLooks::new(WINDOW);
        l.looked(2);
        assert!(!l.looked(0));
        assert_eq!(l.timeout(IDLE), IDLE, "the next report wakes the loop itself");
        assert!(l.looked(1), "a later look found one");
        assert_eq!(l.timeout(IDLE), WINDOW);
    }

    #[test]
    fn the_window_stays_within_the_poll_bounds() {
        let mut l = ReportLooks::new(Duration::from_millis(500));
        l.looked(1);
        assert_eq!(l.timeout(IDLE), IDLE, "never longer than the idle poll (the heartbeat needs it)");
        let mut l = ReportLooks::new(Duration::from_micros(10));
        l.looked(1);
        assert_eq!(l.timeout(IDLE), MIN_POLL);
    }
}
