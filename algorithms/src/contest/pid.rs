//! pid (contest, docs/algorithms.md): a PID controller holding the RTT
//! at a target.
//!
//! Per report: e = target_rtt - RTT (ms); dt = time since the previous report
//! (ms); integral += e dt; cwnd += P e + I integral + D (e - e_prev) / dt.
//! Defaults P 0.2, I 0.00001, D 0.2, target 100 ms. The first report has no
//! derivative term (no previous error).
//!
//! Where the rules run: per report, once per RTT (the controller is defined
//! per report). Difference from the spec: the RTT is the report's latest RTT
//! sample, not the report's mean; the suite's fold program (crate::fold)
//! carries the latest and the smallest sample of a report, not a sum. Reports
//! without an RTT sample are skipped (no error to act on).

use crate::cc::{Measurement, WindowParams};
use crate::contest::window_control;
use crate::fold::{Cadence, Features, FoldProgram};
use crate::{AlgorithmSpec, Control, Controller};

/// pid as an [`AlgorithmSpec`].
pub struct PidSpec;

/// pid's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct PidArgs {
    /// Proportional gain, packets per ms of error.
    #[arg(long, default_value = "0.2")]
    pub p: f64,
    /// Integral gain, packets per ms^2 of accumulated error.
    #[arg(long, default_value = "0.00001")]
    pub i: f64,
    /// Derivative gain, packets per (ms of error per ms).
    #[arg(long, default_value = "0.2")]
    pub d: f64,
    /// RTT the controller holds, ms.
    #[arg(long, default_value = "100", value_name = "MS")]
    pub target_ms: f64,
}

/// One report per RTT.
pub const PROGRAM: FoldProgram =
    FoldProgram { name: "ccplab_pid", cadence: Cadence::PerRtt(1), urgent_on_loss: false, features: Features::NONE };

impl AlgorithmSpec for PidSpec {
    const NAME: &'static str = "pid";
    const SUMMARY: &'static str = "contest pid: cwnd += P e + I sum(e dt) + D de/dt with e = target RTT - RTT (ms)";
    const SOURCE: &'static str = "cellular congestion-control contest (docs/algorithms.md)";
    type Args = PidArgs;
    type Flow = Pid;

    fn validate(a: &PidArgs) -> Result<(), String> {
        for (flag, v) in [("p", a.p), ("i", a.i), ("d", a.d)] {
            crate::check_range(flag, v, -1e-12, 1e6)?;
        }
        crate::check_range("target-ms", a.target_ms, 0.0, 1e6)
    }

    fn new_flow(a: &PidArgs, params: WindowParams) -> Pid {
        Pid { cwnd: params.clamp(params.init_cwnd_pkts), params, args: a.clone(), integral: 0.0, last: None,
            terms: (0.0, 0.0, 0.0) }
    }

    fn program(_a: &PidArgs) -> FoldProgram {
        PROGRAM
    }
}

/// pid's per-flow state.
#[derive(Clone, Debug)]
pub struct Pid {
    params: WindowParams,
    args: PidArgs,
    cwnd: f64,
    /// sum(e dt), ms^2.
    integral: f64,
    /// (time us, error ms) of the previous report with an RTT sample.
    last: Option<(u64, f64)>,
    /// The last (P, I, D) contributions, packets.
    terms: (f64, f64, f64),
}

impl Pid {
    /// Current window, packets.
    pub fn cwnd_pkts(&self) -> f64 {
        self.cwnd
    }

    /// The (P, I, D) terms of the last update, packets.
    pub fn terms(&self) -> (f64, f64, f64) {
        self.terms
    }
}

impl Controller for Pid {
    fn initial(&self) -> Control {
        window_control(&self.params, self.cwnd)
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        if m.rtt_us > 0 {
            let e = self.args.target_ms - m.rtt_us as f64 / 1e3;
            let (pt, it, dt_term) = match self.last {
                None => (self.args.p * e, 0.0, 0.0),
                Some((t, e_prev)) => {
                    let dt = (m.now_us.saturating_sub(t) as f64 / 1e3).max(1e-3);
                    self.integral += e * dt;
                    (self.args.p * e, self.args.i * self.integral, self.args.d * (e - e_prev) / dt)
                }
            };
            self.terms = (pt, it, dt_term);
            self.cwnd = self.params.clamp(self.cwnd + pt + it + dt_term);
            self.last = Some((m.now_us, e));
        }
        window_control(&self.params, self.cwnd)
    }

    fn state(&self) -> String {
        format!("cwnd_pkts={:.3} p={:.3} i={:.3} d={:.3}", self.cwnd, self.terms.0, self.terms.1, self.terms.2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contest::fixed_window::tests::params;

    #[test]
    fn proportional_integral_and_derivative_terms() {
        let a = PidArgs { p: 0.2, i: 0.00001, d: 0.2, target_ms: 100.0 };
        let mut f = PidSpec::new_flow(&a, params());
        let r = |t_ms: u64, rtt_ms: u64| Measurement { now_us: t_ms * 1000, rtt_us: rtt_ms * 1000, ..Default::default() };
        // e = 100 - 60 = 40: only P on the first report: +8.
        f.on_report(&r(0, 60));
        assert_eq!(f.terms(), (8.0, 0.0, 0.0));
        assert!((f.cwnd_pkts() - 18.0).abs() < 1e-12);
        // 50 ms later e = 100 - 120 = -20: P = -4, integral = -20 x 50 = -1000 -> I = -0.01,
        // D = 0.2 x (-20 - 40) / 50 = -0.24.
        f.on_report(&r(50, 120));
        let (p, i, d) = f.terms();
        assert!((p + 4.0).abs() < 1e-12 && (i + 0.01).abs() < 1e-12 && (d + 0.24).abs() < 1e-12, "{:?}", f.terms());
        assert!((f.cwnd_pkts() - (18.0 - 4.25)).abs() < 1e-12);
        // No sample: nothing changes.
        f.on_report(&r(60, 0));
        assert!((f.cwnd_pkts() - 13.75).abs() < 1e-12);
    }
}
