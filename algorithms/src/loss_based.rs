//! The loss-based window core Reno and Cubic share.

use crate::fold::{Features, Growth};

/// The fold features of a loss-based window algorithm: slow start per ACK
/// until the first loss or user space takes over, PRR per ACK in recovery,
/// repeated answers skipped (the fold writes what user space sends besides
/// Cwnd only at a loss or a timeout) and reports backed off while the flow is
/// far from cwnd-limited (it grows only when cwnd-limited).
pub const FOLD_FEATURES: Features =
    Features { growth: Growth::SlowStart, prr: true, skips_repeated_answers: true, backs_off_when_app_limited: true };

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

    #[test]
    fn programs_that_skip_repeated_answers_write_what_user_space_sends_only_at_loss_or_timeout() {
        // what a loss-based algorithm sends besides Cwnd: the PRR registers
        let guard = crate::window::LossGuard::default();
        let sent: Vec<&str> =
            crate::window::FoldPrr::new(true).registers(None, &guard, 1448).iter().map(|(n, _)| *n).collect();
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
