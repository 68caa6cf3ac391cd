//! mixture (contest, docs/algorithms.md): cwnd = w_ip x cwnd(interval-
//! prediction) + w_dt x cwnd(delay-threshold --mode aimd), the two run side
//! by side on the same reports, each with its own window and its defaults.
//! Weights `--ip-weight` 0.3 and `--dt-weight` 0.7.
//!
//! Where the rules run: per report, every 10 ms (and at once on a loss): the
//! delay-threshold part applies its per-ACK rules per report as in
//! [`crate::contest::delay_threshold`]; the interval-prediction part cuts the reports
//! into its own 30 ms ticks with `contest::TickClock`.

use crate::contest::window_control;
use crate::contest::delay_threshold::{DelayThreshold, DelayThresholdArgs, Mode};
use crate::fold::{Cadence, Features, FoldProgram};
use crate::cc::{Measurement, WindowParams};
use crate::contest::interval_prediction::{IntervalPrediction, IntervalPredictionArgs};
use crate::{AlgorithmSpec, Control, Controller};

/// mixture as an [`AlgorithmSpec`].
pub struct MixtureSpec;

/// mixture's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct MixtureArgs {
    /// Weight of interval-prediction's window.
    #[arg(long, default_value = "0.3")]
    pub ip_weight: f64,
    /// Weight of delay-threshold (aimd mode)'s window.
    #[arg(long, default_value = "0.7")]
    pub dt_weight: f64,
}

/// Report every 10 ms and at once on loss or timeout (delay-threshold's cadence).
pub const PROGRAM: FoldProgram =
    FoldProgram { name: "ccplab_mixture", cadence: Cadence::IntervalUs(10_000), urgent_on_loss: true, features: Features::NONE };

impl AlgorithmSpec for MixtureSpec {
    const NAME: &'static str = "mixture";
    const SUMMARY: &'static str = "contest mixture: 0.3 x interval-prediction + 0.7 x delay-threshold (aimd), run side by side";
    const SOURCE: &'static str = "cellular congestion-control contest (docs/algorithms.md)";
    type Args = MixtureArgs;
    type Flow = Mixture;

    fn validate(a: &MixtureArgs) -> Result<(), String> {
        crate::check_range("ip-weight", a.ip_weight, -1e-12, 1e3)?;
        crate::check_range("dt-weight", a.dt_weight, -1e-12, 1e3)
    }

    fn new_flow(a: &MixtureArgs, params: WindowParams) -> Mixture {
        // The parts keep their own windows, bounded only by the mixture's ceiling.
        let inner = WindowParams { min_cwnd_pkts: 1.0, ..params };
        Mixture {
            ip: IntervalPrediction::new(&IntervalPredictionArgs::default(), inner),
            dt: DelayThreshold::new(DelayThresholdArgs { mode: Mode::Aimd, ..Default::default() }.rule(), inner),
            args: a.clone(),
            params,
        }
    }

    fn program(_a: &MixtureArgs) -> FoldProgram {
        PROGRAM
    }
}

/// mixture's per-flow state: the two controllers.
#[derive(Clone, Debug)]
pub struct Mixture {
    params: WindowParams,
    args: MixtureArgs,
    ip: IntervalPrediction,
    dt: DelayThreshold,
}

impl Mixture {
    /// The mixed window, packets (before the floor and ceiling).
    pub fn cwnd_pkts(&self) -> f64 {
        self.args.ip_weight * self.ip.cwnd_pkts() + self.args.dt_weight * self.dt.cwnd_pkts()
    }

    /// The parts' windows (interval-prediction, delay-threshold), packets.
    pub fn parts(&self) -> (f64, f64) {
        (self.ip.cwnd_pkts(), self.dt.cwnd_pkts())
    }
}

impl Controller for Mixture {
    fn initial(&self) -> Control {
        window_control(&self.params, self.cwnd_pkts())
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        self.ip.update(m);
        self.dt.update(m);
        window_control(&self.params, self.cwnd_pkts())
    }

    fn state(&self) -> String {
        let (ip, dt) = self.parts();
        format!("cwnd_pkts={:.3} ip_pkts={ip:.3} dt_pkts={dt:.3}", self.params.clamp(self.cwnd_pkts()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contest::fixed_window::tests::params;

    #[test]
    fn weights_mix_the_two_windows_fed_the_same_reports() {
        let a = MixtureArgs { ip_weight: 0.3, dt_weight: 0.7 };
        let mut mix = MixtureSpec::new_flow(&a, params());
        let inner = WindowParams { min_cwnd_pkts: 1.0, ..params() };
        let mut ip = IntervalPrediction::new(&IntervalPredictionArgs::default(), inner);
        let mut dt = DelayThreshold::new(DelayThresholdArgs { mode: Mode::Aimd, ..Default::default() }.rule(), inner);
        for k in 0..40u64 {
            let m = Measurement {
                now_us: k * 10_000,
                acked_bytes: 8_000,
                rtt_us: if k % 7 == 3 { 95_000 } else { 50_000 + k * 300 },
                ..Default::default()
            };
            let c = mix.on_report(&m);
            let (i, d) = (ip.update(&m), dt.update(&m));
            assert_eq!(mix.parts(), (i, d));
            assert_eq!(c.cwnd_bytes, Some(params().to_bytes(params().clamp(0.3 * i + 0.7 * d))));
        }
        // Both parts moved: IP from its ticks, DT grew by 3/cwnd per packet and divided on 95 ms.
        assert!(mix.parts().0 != 10.0 && mix.parts().1 != 10.0);
        let only_dt = MixtureSpec::new_flow(&MixtureArgs { ip_weight: 0.0, dt_weight: 1.0 }, params());
        assert_eq!(only_dt.cwnd_pkts(), 10.0);
    }
}
