//! tutorial: the algorithm that docs/writing-an-algorithm.md builds, step by
//! step, from an empty file. Kept as small as a complete suite member can be.
//!
//! Additive increase, multiplicative decrease on a window (Chiu and Jain,
//! "Analysis of the increase and decrease algorithms for congestion avoidance
//! in computer networks", 1989; the congestion-avoidance rule of RFC 5681
//! section 3.1):
//!
//! - every report: cwnd += acked packets / cwnd, i.e. one packet per RTT;
//! - a report with a packet marked lost or a retransmission timeout:
//!   cwnd = cwnd x `--decrease`, at most once per RTT (one window of losses is
//!   one congestion event);
//! - no slow start: the flow starts at `--init-cwnd-pkts` and only grows
//!   linearly, which is what makes the start slow next to the kernel's reno.
//!
//! The fold program reports once per RTT and at once on a loss or a timeout;
//! the rules run in user space on each report.

use crate::cc::{Measurement, WindowParams};
use crate::contest::{window_control, OncePerRtt};
use crate::fold::{Cadence, Features, FoldProgram};
use crate::{AlgorithmSpec, Control, Controller};

/// tutorial as an [`AlgorithmSpec`]: its name, flags and fold program.
pub struct TutorialSpec;

/// tutorial's own flags (the shared ones, such as `--init-cwnd-pkts`, come from the CLI).
#[derive(clap::Args, Clone, Debug)]
pub struct TutorialArgs {
    /// Multiplicative decrease: cwnd = cwnd x decrease on a loss or timeout, in (0, 1).
    #[arg(long, default_value = "0.5")]
    pub decrease: f64,
}

/// One report per RTT, and one at once on a loss or a timeout.
pub const PROGRAM: FoldProgram =
    FoldProgram { name: "ccplab_tutorial", cadence: Cadence::PerRtt(1), urgent_on_loss: true, features: Features::NONE };

impl AlgorithmSpec for TutorialSpec {
    const NAME: &'static str = "tutorial";
    const SUMMARY: &'static str =
        "teaching AIMD (docs/writing-an-algorithm.md): +1 packet per RTT, cwnd x --decrease once per RTT on loss or RTO";
    const SOURCE: &'static str = "Chiu and Jain 1989; RFC 5681 section 3.1 (congestion avoidance)";
    type Args = TutorialArgs;
    type Flow = Tutorial;

    fn validate(a: &TutorialArgs) -> Result<(), String> {
        crate::check_range("decrease", a.decrease, 0.0, 1.0)
    }

    fn new_flow(a: &TutorialArgs, params: WindowParams) -> Tutorial {
        Tutorial { cwnd_pkts: params.clamp(params.init_cwnd_pkts), params, decrease: a.decrease, guard: OncePerRtt::default(), rtt_us: 0 }
    }

    fn program(_a: &TutorialArgs) -> FoldProgram {
        PROGRAM
    }
}

/// tutorial's per-flow state.
#[derive(Clone, Debug)]
pub struct Tutorial {
    params: WindowParams,
    decrease: f64,
    /// The window, packets (fractional: growth adds 1/cwnd per packet).
    cwnd_pkts: f64,
    /// Lets a decrease happen at most once per RTT.
    guard: OncePerRtt,
    /// Latest RTT sample, us (0 until the first).
    rtt_us: u64,
}

impl Tutorial {
    /// Current window, packets.
    pub fn cwnd_pkts(&self) -> f64 {
        self.cwnd_pkts
    }
}

impl Controller for Tutorial {
    fn initial(&self) -> Control {
        window_control(&self.params, self.cwnd_pkts)
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        if m.rtt_us > 0 {
            self.rtt_us = m.rtt_us;
        }
        if m.lost_pkts > 0 || m.timeout {
            if self.guard.try_act(m.now_us, self.rtt_us) {
                self.cwnd_pkts = self.params.clamp(self.cwnd_pkts * self.decrease);
            }
        } else {
            let acked_pkts = m.acked_bytes as f64 / f64::from(self.params.mss_bytes);
            self.cwnd_pkts = self.params.clamp(self.cwnd_pkts + acked_pkts / self.cwnd_pkts);
        }
        window_control(&self.params, self.cwnd_pkts)
    }

    fn state(&self) -> String {
        format!("cwnd_pkts={:.3}", self.cwnd_pkts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contest::fixed_window::tests::{params, report};

    fn flow() -> Tutorial {
        TutorialSpec::new_flow(&TutorialArgs { decrease: 0.5 }, params())
    }

    #[test]
    fn starts_at_the_initial_window() {
        // params(): 1000-byte MSS, 10-packet initial window.
        assert_eq!(flow().initial().cwnd_bytes, Some(10_000));
    }

    #[test]
    fn grows_one_packet_per_rtt() {
        let mut f = flow();
        // One RTT's worth of ACKs (a whole window) in one report: +1 packet.
        let c = f.on_report(&report(50, 10, 50));
        assert_eq!(c.cwnd_bytes, Some(11_000));
        // Ten more RTTs of full windows: about +10 packets.
        for k in 0..10 {
            let w = f.cwnd_pkts().round() as u64;
            f.on_report(&report(100 + 50 * k, w, 50));
        }
        assert!((f.cwnd_pkts() - 21.0).abs() < 0.3, "cwnd {}", f.cwnd_pkts());
    }

    #[test]
    fn halves_once_per_rtt_on_loss_and_on_timeout() {
        let mut f = flow();
        f.on_report(&report(50, 10, 50));
        let loss = Measurement { lost_pkts: 2, ..report(60, 0, 50) };
        assert_eq!(f.on_report(&loss).cwnd_bytes, Some(5_500));
        // A second loss report within the same RTT is the same congestion event.
        let again = Measurement { now_us: 90_000, ..loss };
        assert_eq!(f.on_report(&again).cwnd_bytes, Some(5_500));
        // One RTT later, a timeout is a new event.
        let rto = Measurement { timeout: true, ..report(200, 0, 50) };
        assert_eq!(f.on_report(&rto).cwnd_bytes, Some(2_750));
    }

    #[test]
    fn the_floor_and_the_flag_range_hold() {
        let mut f = flow();
        for k in 0..20 {
            f.on_report(&Measurement { lost_pkts: 1, ..report(100 * k, 0, 50) });
        }
        assert_eq!(f.cwnd_pkts(), 1.0, "clamped to --min-cwnd-pkts");
        assert!(TutorialSpec::validate(&TutorialArgs { decrease: 1.0 }).unwrap_err().contains("--decrease"));
        assert!(TutorialSpec::validate(&TutorialArgs { decrease: 0.7 }).is_ok());
    }
}
