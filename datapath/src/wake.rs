//! When the main loop looks for reports (`--fold kernel`).
//!
//! Reports come through the report ring buffer. A forced ring-buffer wakeup
//! costs 20-30 us of BPF time inside the ACK's program, and each wakeup of
//! the daemon 60-120 us of its CPU in this VM (docs/NOTES.md), so
//! neither happens per report. The two sides share one stamp,
//! `last_report_look_ns` (ccp.bpf.c), the daemon's promise "I look again
//! by stamp + window" (`--report-wake-ms`):
//!
//! - the BPF side forces a wakeup for a report only when no promise covers
//!   it (the stamp is a window old, or 0), and then stamps it itself, so
//!   the reports after it wait for the look that wakeup brings;
//! - after a look that found reports, the daemon promises the next look one
//!   window later (the flows that reported are likely to again), or one
//!   `--report-prompt-us` later when some came from a flow that reports
//!   several times per RTT (the BPF side forces a wakeup for those only when
//!   the stamp is that old, so a report just after a look would otherwise
//!   wait a whole window at the end of a burst of ACKs);
//! - when the promised look finds none, it withdraws the promise (stamp 0)
//!   and looks once more (a report may have been submitted against the old
//!   promise), then sleeps until the idle poll: the next report wakes it.
//!   A loop woken earlier for something else (Portus's answers, probes,
//!   flow events) that finds none keeps the promise: withdrawing then let
//!   nearly every report of 100 flows force a wakeup (1.9 us of BPF time
//!   per ACK against 1.3).
//!
//! So a report waits at most about one window, looks and forced wakeups each
//! come at most once per window, and a flow reporting now and then (an
//! application-limited flow, once a second) is heard at once.

use std::time::Duration;

/// The shortest poll timeout.
pub const MIN_POLL: Duration = Duration::from_millis(1);

/// What a look means for the promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promise {
    /// Reports were found: stamp now, look again one window later.
    Renew,
    /// Nothing found, but the promised look is still ahead (the loop woke
    /// for something else): leave the stamp as it is.
    Keep,
    /// Nothing found at the promised look (or none was promised): stamp 0,
    /// look once more, then sleep until the idle poll.
    Withdraw,
}

/// The daemon's side of the promise; `window` is `--report-wake-ms`,
/// `prompt` `--report-prompt-us`.
#[derive(Debug, Clone, Copy)]
pub struct ReportLooks {
    window_ns: u64,
    prompt_ns: u64,
    /// When the promised look is due (CLOCK_MONOTONIC ns), if one stands.
    due_ns: Option<u64>,
}

impl ReportLooks {
    /// Looks at most every `window` while reports come (every `prompt` while
    /// some come from flows that report several times per RTT).
    pub fn new(window: Duration, prompt: Duration) -> Self {
        ReportLooks { window_ns: window.as_nanos() as u64, prompt_ns: prompt.as_nanos() as u64, due_ns: None }
    }

    /// A look at `now_ns` found `reports` reports, `prompt` of them from flows
    /// that report several times per RTT: what to do with the stamp.
    /// Only the promised look (or a look without a promise) that finds none
    /// withdraws it: the loop also wakes for Portus's answers, probes and
    /// flow events, and withdrawing then would let the very next report
    /// force a wakeup.
    pub fn looked(&mut self, reports: usize, prompt: usize, now_ns: u64) -> Promise {
        if reports > 0 {
            let wait = if prompt > 0 { self.prompt_ns.min(self.window_ns) } else { self.window_ns };
            self.due_ns = Some(now_ns + wait);
            Promise::Renew
        } else if self.due_ns.is_some_and(|due| now_ns < due) {
            Promise::Keep
        } else {
            self.due_ns = None;
            Promise::Withdraw
        }
    }

    /// The poll timeout at `now_ns`: until the promised look, else `idle`.
    pub fn timeout(&self, now_ns: u64, idle: Duration) -> Duration {
        match self.due_ns {
            Some(due) => Duration::from_nanos(due.saturating_sub(now_ns)).clamp(MIN_POLL, idle.max(MIN_POLL)),
            None => idle,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const WINDOW: Duration = Duration::from_millis(20);
    const IDLE: Duration = Duration::from_millis(100);
    const PROMPT: Duration = Duration::from_millis(1);

    #[test]
    fn reports_of_a_per_ack_reporter_promise_a_look_within_the_prompt_interval() {
        let mut l = ReportLooks::new(WINDOW, PROMPT);
        assert_eq!(l.looked(5, 2, 100 * MS), Promise::Renew);
        assert_eq!(l.timeout(100 * MS, IDLE), PROMPT, "a report just after this look waits at most 1 ms");
        assert_eq!(l.looked(3, 0, 101 * MS), Promise::Renew);
        assert_eq!(l.timeout(101 * MS, IDLE), WINDOW, "per-RTT reporters only: one look per window");
    }

    #[test]
    fn reports_found_promise_a_look_one_window_later() {
        let mut l = ReportLooks::new(WINDOW, PROMPT);
        assert_eq!(l.timeout(0, IDLE), IDLE, "nothing promised before any report");
        assert_eq!(l.looked(3, 0, 100 * MS), Promise::Renew);
        assert_eq!(l.timeout(100 * MS, IDLE), WINDOW);
        assert_eq!(l.looked(1, 0, 120 * MS), Promise::Renew, "while reports keep coming, one look per window");
        assert_eq!(l.timeout(120 * MS, IDLE), WINDOW);
    }

    #[test]
    fn waking_for_something_else_keeps_the_promise() {
        let mut l = ReportLooks::new(WINDOW, PROMPT);
        l.looked(2, 0, 100 * MS);
        assert_eq!(l.looked(0, 0, 105 * MS), Promise::Keep, "woken by Portus's answer 5 ms later");
        assert_eq!(l.timeout(105 * MS, IDLE), Duration::from_millis(15), "the promised look stays where it was");
    }

    #[test]
    fn the_promised_look_without_reports_withdraws_and_sleeps() {
        let mut l = ReportLooks::new(WINDOW, PROMPT);
        l.looked(2, 0, 100 * MS);
        assert_eq!(l.looked(0, 0, 120 * MS), Promise::Withdraw);
        assert_eq!(l.timeout(120 * MS, IDLE), IDLE, "the next report wakes the loop itself");
        assert_eq!(l.looked(0, 0, 150 * MS), Promise::Withdraw, "nothing promised: stays withdrawn");
        assert_eq!(l.looked(1, 0, 151 * MS), Promise::Renew, "a report woke it");
    }

    #[test]
    fn the_timeout_stays_within_the_poll_bounds() {
        let mut l = ReportLooks::new(Duration::from_millis(500), PROMPT);
        l.looked(1, 0, 0);
        assert_eq!(l.timeout(0, IDLE), IDLE, "never longer than the idle poll (the heartbeat needs it)");
        let mut l = ReportLooks::new(WINDOW, PROMPT);
        l.looked(1, 0, 0);
        assert_eq!(l.timeout(20 * MS, IDLE), MIN_POLL, "a look already due: the shortest poll");
    }
}
