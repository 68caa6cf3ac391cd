//! Answers that would only repeat what the datapath already holds are not sent.
//!
//! An application-limited reno or cubic flow reports once a second
//! ([`crate::fold::APP_LIMITED_REPORT_US`]) and the algorithm holds its
//! window, so its answer is the previous one again: 508 of 741 answers did
//! so in one 100-flow paced `dpbench` run. Each answer costs both daemons a
//! send, a wakeup, a receive and a staging of the registers, and changes
//! nothing.
//!
//! An answer is skipped only when nothing it sets can have moved in the
//! datapath since the last answer sent:
//! - the flow's program is one whose fold writes the control registers its
//!   algorithm sends only at a loss or a timeout, and otherwise only Cwnd
//!   ([`crate::fold::Features::skips_repeated_answers`]);
//! - the report carries no loss and no timeout (the ACKs at which the fold
//!   writes those registers, and after which the answer always goes);
//! - the report's cwnd (`Report.cwnd`) is the answer's Cwnd in whole packets
//!   (the datapath applies `bytes / mss`): the fold did not move it; or the
//!   answer's Cwnd is 0, "leave it" while slow start runs in the fold
//!   ([`crate::cc::FoldSlowStart`]): the fold owns cwnd then, and a 0 sent
//!   again would change nothing (its slow start takes a Cwnd of 0 as its own);
//! - the answer equals the last one sent, field for field;
//! - fewer than [`MAX_SKIPPED_IN_A_ROW`] answers in a row were skipped, so
//!   an answer lost on the way (the datapath's queue was full) is sent again
//!   within that many reports.

use crate::cc::Measurement;

/// At most this many repeated answers in a row are skipped; the next goes.
/// With one report a second while app-limited, a lost answer is repeated
/// within 8 s; at the regular cadence within 8 RTTs.
pub const MAX_SKIPPED_IN_A_ROW: u32 = 7;

/// One flow's record of the answers it sent (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepeatFilter {
    on: bool,
    mss_bytes: u32,
    last_sent: Option<Vec<(&'static str, u32)>>,
    skipped_in_a_row: u32,
    skipped: u64,
}

impl RepeatFilter {
    /// A filter for a flow with this MSS (bytes, > 0); `on` = its program
    /// declares [`crate::fold::Features::skips_repeated_answers`] and the daemon's
    /// `--skip-repeated-answers` holds. Off, every answer is sent.
    pub fn new(on: bool, mss_bytes: u32) -> Self {
        RepeatFilter { on, mss_bytes: mss_bytes.max(1), ..Default::default() }
    }

    /// Whether to send `answer` (update_field's fields, e.g. `("Cwnd", bytes)`),
    /// the answer to report `m`; None for the flow's initial command, which is
    /// always sent. An answer to be sent is recorded as the last one sent.
    pub fn should_send(&mut self, answer: &[(&'static str, u32)], m: Option<&Measurement>) -> bool {
        if m.is_some_and(|m| self.is_repeat(answer, m)) && self.skipped_in_a_row < MAX_SKIPPED_IN_A_ROW {
            self.skipped_in_a_row += 1;
            self.skipped += 1;
            return false;
        }
        self.skipped_in_a_row = 0;
        self.last_sent = Some(answer.to_vec());
        true
    }

    /// Answers skipped so far.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    fn is_repeat(&self, answer: &[(&'static str, u32)], m: &Measurement) -> bool {
        let cwnd_bytes = answer.iter().find(|(name, _)| *name == "Cwnd").map(|(_, v)| u64::from(*v));
        let pkts = |bytes: u64| bytes / u64::from(self.mss_bytes);
        self.on
            && m.lost_pkts == 0
            && !m.timeout
            && cwnd_bytes.is_some_and(|c| c == 0 || pkts(c) == pkts(m.dp_cwnd_bytes))
            && self.last_sent.as_deref() == Some(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1448;

    fn quiet_report(dp_cwnd_bytes: u64) -> Measurement {
        Measurement { dp_cwnd_bytes, acked_bytes: 10 * u64::from(MSS), ..Default::default() }
    }

    fn answer(cwnd_pkts: u32) -> Vec<(&'static str, u32)> {
        vec![("Cwnd", cwnd_pkts * MSS), ("pm", 1), ("pn", 0)]
    }

    #[test]
    fn a_repeat_of_what_the_datapath_holds_is_skipped_and_a_change_is_sent() {
        let mut f = RepeatFilter::new(true, MSS);
        assert!(f.should_send(&answer(20), None), "the initial command always goes");
        assert!(!f.should_send(&answer(20), Some(&quiet_report(20 * u64::from(MSS)))));
        assert!(f.should_send(&answer(21), Some(&quiet_report(20 * u64::from(MSS)))), "a new cwnd goes");
        let mut regs = answer(21);
        regs[2].1 = 5;
        assert!(f.should_send(&regs, Some(&quiet_report(21 * u64::from(MSS)))), "a changed register goes");
        assert_eq!(f.skipped(), 1);
    }

    #[test]
    fn loss_timeout_or_a_cwnd_the_fold_moved_always_get_the_answer() {
        let held = 20 * u64::from(MSS);
        let mut f = RepeatFilter::new(true, MSS);
        assert!(f.should_send(&answer(20), None));
        let loss = Measurement { lost_pkts: 1, ..quiet_report(held) };
        assert!(f.should_send(&answer(20), Some(&loss)), "the fold may have written pm at the loss ACK");
        let timeout = Measurement { timeout: true, ..quiet_report(held) };
        assert!(f.should_send(&answer(20), Some(&timeout)));
        assert!(f.should_send(&answer(20), Some(&quiet_report(held - u64::from(MSS)))), "the fold moved cwnd");
        // the datapath applies whole packets: the takeover mark's extra byte is the same window
        assert!(!f.should_send(&answer(20), Some(&quiet_report(held + 1))));
        assert_eq!(f.skipped(), 1);
    }

    #[test]
    fn every_eighth_repeat_goes_in_case_an_answer_was_lost() {
        let mut f = RepeatFilter::new(true, MSS);
        assert!(f.should_send(&answer(20), None));
        let m = quiet_report(20 * u64::from(MSS));
        let sent: Vec<bool> = (0..16).map(|_| f.should_send(&answer(20), Some(&m))).collect();
        let expected: Vec<bool> = (1..=16).map(|k| k % (MAX_SKIPPED_IN_A_ROW + 1) as usize == 0).collect();
        assert_eq!(sent, expected);
    }

    #[test]
    fn off_or_without_a_cwnd_every_answer_goes() {
        let m = quiet_report(20 * u64::from(MSS));
        let mut off = RepeatFilter::new(false, MSS);
        assert!((0..3).all(|_| off.should_send(&answer(20), Some(&m))));
        let mut on = RepeatFilter::new(true, MSS);
        let rate_only = vec![("Rate", 125_000)];
        assert!((0..3).all(|_| on.should_send(&rate_only, Some(&m))));
    }

    #[test]
    fn leave_it_repeats_while_the_fold_grows_cwnd() {
        // slow start in the fold: Cwnd 0 ("leave it"), the report's cwnd the fold's own
        let leave = vec![("Cwnd", 0), ("pm", 1), ("pn", 0)];
        let mut f = RepeatFilter::new(true, MSS);
        assert!(f.should_send(&leave, Some(&quiet_report(12 * u64::from(MSS)))));
        assert!(!f.should_send(&leave, Some(&quiet_report(14 * u64::from(MSS)))));
        let loss = Measurement { lost_pkts: 2, ..quiet_report(16 * u64::from(MSS)) };
        assert!(f.should_send(&leave, Some(&loss)), "a loss ends the fold's slow start: the answer goes");
        assert!(f.should_send(&answer(11), Some(&quiet_report(11 * u64::from(MSS)))), "user space takes over");
    }
}
