//! interval-prediction (contest, docs/algorithms.md): link-speed EWMA
//! times a predicted safe interval.
//!
//! - Per tick (`--tick-ms` 30): sample = packets acknowledged / tick;
//!   estimate = alpha estimate + (1 - alpha) sample (`--alpha` 0.8 is the
//!   weight of the OLD estimate; the first sample starts it).
//! - The last N (`--history` 20) RTT deltas (this RTT - previous RTT, ms):
//!   s = their standard deviation (population), m = their mean.
//! - m > 0: tau = K (0.00067 s^2 - 0.023 s + 0.88); else tau = K (0.00033 s^2
//!   - 0.0116 s + 0.98); K = `--k-ms` (65); tau clamped to [0, K].
//! - cwnd = tau x estimate (tau in s, estimate in packets/s).
//!
//! Where the rules run: per report; the fold program reports once per tick,
//! `contest::TickClock` makes exact ticks. The RTT deltas are taken between
//! the reports' latest RTT samples (one delta per report, the fold program
//! carries one sample per report), not between consecutive ACKs. Before the
//! first tick the window is the shared `--init-cwnd-pkts`.

use crate::cc::{Measurement, WindowParams};
use crate::contest::{window_control, TickClock};
use crate::fold::{Cadence, Features, FoldProgram};
use crate::{AlgorithmSpec, Control, Controller};
use std::collections::VecDeque;

/// interval-prediction as an [`AlgorithmSpec`].
pub struct IntervalPredictionSpec;

/// interval-prediction's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct IntervalPredictionArgs {
    /// Length of a rate-sampling tick, ms.
    #[arg(long, default_value = "30", value_name = "MS")]
    pub tick_ms: f64,
    /// Weight of the OLD estimate: estimate = alpha estimate + (1 - alpha) sample.
    #[arg(long, default_value = "0.8")]
    pub alpha: f64,
    /// How many RTT deltas enter s and m.
    #[arg(long, default_value = "20", value_name = "N")]
    pub history: usize,
    /// K: the largest interval tau, ms.
    #[arg(long, default_value = "65", value_name = "MS")]
    pub k_ms: f64,
}

impl Default for IntervalPredictionArgs {
    fn default() -> Self {
        IntervalPredictionArgs { tick_ms: 30.0, alpha: 0.8, history: 20, k_ms: 65.0 }
    }
}

/// The interval tau (ms) from the RTT deltas' standard deviation `s` and mean
/// `m` (ms), clamped to [0, K].
pub fn tau_ms(k_ms: f64, s: f64, m: f64) -> f64 {
    let poly = if m > 0.0 { 0.00067 * s * s - 0.023 * s + 0.88 } else { 0.00033 * s * s - 0.0116 * s + 0.98 };
    (k_ms * poly).clamp(0.0, k_ms)
}

impl AlgorithmSpec for IntervalPredictionSpec {
    const NAME: &'static str = "interval-prediction";
    const SUMMARY: &'static str = "contest interval-prediction: cwnd = tau(std, mean of RTT deltas) x EWMA link speed";
    const SOURCE: &'static str = "cellular congestion-control contest (docs/algorithms.md)";
    type Args = IntervalPredictionArgs;
    type Flow = IntervalPrediction;

    fn validate(a: &IntervalPredictionArgs) -> Result<(), String> {
        crate::check_range("tick-ms", a.tick_ms, 0.0, 1e5)?;
        crate::check_range("alpha", a.alpha, -1e-12, 1.0)?;
        crate::check_range("k-ms", a.k_ms, 0.0, 1e6)?;
        if a.history < 2 {
            return Err(format!("--history must be >= 2, got {}", a.history));
        }
        Ok(())
    }

    fn new_flow(a: &IntervalPredictionArgs, params: WindowParams) -> IntervalPrediction {
        IntervalPrediction::new(a, params)
    }

    fn program(a: &IntervalPredictionArgs) -> FoldProgram {
        FoldProgram { name: "ccplab_interval_prediction", cadence: Cadence::IntervalUs((a.tick_ms * 1000.0) as u64),
            urgent_on_loss: false, features: Features::NONE }
    }
}

/// interval-prediction's per-flow state.
#[derive(Clone, Debug)]
pub struct IntervalPrediction {
    params: WindowParams,
    args: IntervalPredictionArgs,
    clock: TickClock,
    estimate: Option<f64>,
    last_rtt_ms: Option<f64>,
    deltas: VecDeque<f64>,
    tau_ms: f64,
    cwnd: f64,
}

impl IntervalPrediction {
    /// A new flow at the shared initial window.
    pub fn new(a: &IntervalPredictionArgs, params: WindowParams) -> Self {
        IntervalPrediction {
            clock: TickClock::new((a.tick_ms * 1000.0) as u64),
            cwnd: params.init_cwnd_pkts,
            params,
            args: a.clone(),
            estimate: None,
            last_rtt_ms: None,
            deltas: VecDeque::new(),
            tau_ms: a.k_ms,
        }
    }

    /// Current window, packets (unclamped: the formula's value).
    pub fn cwnd_pkts(&self) -> f64 {
        self.cwnd
    }

    /// The interval of the last update, ms.
    pub fn tau(&self) -> f64 {
        self.tau_ms
    }

    /// (standard deviation, mean) of the kept RTT deltas, ms.
    pub fn delta_stats(&self) -> (f64, f64) {
        let n = self.deltas.len() as f64;
        if n == 0.0 {
            return (0.0, 0.0);
        }
        let mean = self.deltas.iter().sum::<f64>() / n;
        let var = self.deltas.iter().map(|d| (d - mean) * (d - mean)).sum::<f64>() / n;
        (var.sqrt(), mean)
    }

    /// Apply one report (RTT delta, ticks); returns the window in packets.
    pub fn update(&mut self, m: &Measurement) -> f64 {
        if m.rtt_us > 0 {
            let rtt = m.rtt_us as f64 / 1e3;
            if let Some(prev) = self.last_rtt_ms {
                self.deltas.push_back(rtt - prev);
                while self.deltas.len() > self.args.history {
                    self.deltas.pop_front();
                }
            }
            self.last_rtt_ms = Some(rtt);
        }
        for sample in self.clock.advance(m.now_us, m.acked_pkts(self.params.mss_bytes)) {
            let a = self.args.alpha;
            self.estimate = Some(self.estimate.map_or(sample, |e| a * e + (1.0 - a) * sample));
            let (s, mean) = self.delta_stats();
            self.tau_ms = tau_ms(self.args.k_ms, s, mean);
            self.cwnd = self.tau_ms / 1e3 * self.estimate.unwrap_or(0.0);
        }
        self.cwnd
    }
}

impl Controller for IntervalPrediction {
    fn initial(&self) -> Control {
        window_control(&self.params, self.cwnd)
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        let c = self.update(m);
        window_control(&self.params, c)
    }

    fn state(&self) -> String {
        format!("cwnd_pkts={:.3} tau_ms={:.2} estimate_pps={:.1}", self.cwnd, self.tau_ms, self.estimate.unwrap_or(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contest::fixed_window::tests::{params, report};

    #[test]
    fn tau_polynomial_and_clamp() {
        // m > 0, s = 10: 65 x (0.067 - 0.23 + 0.88) = 65 x 0.717.
        assert!((tau_ms(65.0, 10.0, 1.0) - 65.0 * 0.717).abs() < 1e-9);
        // m <= 0, s = 10: 65 x (0.033 - 0.116 + 0.98) = 65 x 0.897.
        assert!((tau_ms(65.0, 10.0, 0.0) - 65.0 * 0.897).abs() < 1e-9);
        // s = 0, m <= 0: 0.98 K; large s: the polynomial exceeds 1 -> K; the m > 0 branch dips
        // below zero nowhere (its minimum is 0.68), so check the upper clamp only.
        assert!((tau_ms(65.0, 0.0, -1.0) - 63.7).abs() < 1e-9);
        assert_eq!(tau_ms(65.0, 100.0, 1.0), 65.0);
    }

    #[test]
    fn window_is_tau_times_rate_estimate() {
        let mut f = IntervalPrediction::new(&IntervalPredictionArgs::default(), params());
        // RTTs 40, 50, 45 ms -> deltas +10, -5: mean 2.5 > 0, s = 7.5.
        f.update(&report(0, 0, 40));
        f.update(&report(15, 0, 50));
        f.update(&report(30, 30, 45)); // the tick's 30 packets: 1000/s (all 30 in the 15 ms after the last report)
        let (s, m) = f.delta_stats();
        assert!((s - 7.5).abs() < 1e-12 && (m - 2.5).abs() < 1e-12);
        let tau = tau_ms(65.0, 7.5, 2.5);
        assert!((f.tau() - tau).abs() < 1e-12);
        assert!((f.cwnd_pkts() - tau / 1e3 * 1000.0).abs() < 1e-9);
        // Next tick 15 packets (500/s): estimate = 0.8 x 1000 + 0.2 x 500 = 900.
        f.update(&report(60, 15, 45));
        let tau = tau_ms(65.0, f.delta_stats().0, f.delta_stats().1);
        assert!((f.cwnd_pkts() - tau / 1e3 * 900.0).abs() < 1e-9);
    }
}
