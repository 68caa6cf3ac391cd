//! sprout-ewma (contest, docs/algorithms.md): window = estimated
//! bottleneck rate x target delay.
//!
//! Once per tick (`--tick-ms`, default 30): sample = packets acknowledged in
//! the tick / tick length (packets/s); deviation dev = (1 - rho) dev + rho
//! |rate - sample| (rate = the estimate before this tick: the prediction
//! error); rate = (1 - a) rate + a sample (`--ewma` a, default 0.25; the first
//! sample starts it); cwnd = max(min_window, min(max_window, (rate - k dev) x
//! target_delay)) with k = `--dev-factor` (default 0.2). `--dev-factor 0
//! --target-delay-ms 0` is the plain EWMA-rate x min-RTT scheme (a target
//! delay of 0 means the flow's minimum RTT).
//!
//! Where the rules run: per report; the fold program reports once per tick
//! and `contest::TickClock` cuts the reports into ticks of exactly the tick
//! length (a late report's packets are spread over the ticks it spans).
//! Nothing runs per ACK: the scheme samples per tick.

use crate::cc::{Measurement, WindowParams};
use crate::contest::{window_control, TickClock};
use crate::fold::{Cadence, Features, FoldProgram};
use crate::{AlgorithmSpec, Control, Controller};

/// sprout-ewma as an [`AlgorithmSpec`].
pub struct SproutEwmaSpec;

/// sprout-ewma's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct SproutEwmaArgs {
    /// Length of a rate-sampling tick, ms.
    #[arg(long, default_value = "30", value_name = "MS")]
    pub tick_ms: f64,
    /// EWMA weight a of the newest rate sample.
    #[arg(long, default_value = "0.25")]
    pub ewma: f64,
    /// EWMA weight rho of the newest deviation |rate - sample|.
    #[arg(long, default_value = "0.25")]
    pub rho: f64,
    /// k in cwnd = (rate - k dev) x target delay; 0 = the plain EWMA scheme.
    #[arg(long, default_value = "0.2")]
    pub dev_factor: f64,
    /// Target delay, ms; 0 = the flow's minimum RTT.
    #[arg(long, default_value = "60", value_name = "MS")]
    pub target_delay_ms: f64,
    /// Smallest window, packets.
    #[arg(long, default_value = "3", value_name = "PKTS")]
    pub min_window: f64,
    /// Largest window, packets.
    #[arg(long, default_value = "80", value_name = "PKTS")]
    pub max_window: f64,
    /// Window before the first tick, packets.
    #[arg(long, default_value = "12", value_name = "PKTS")]
    pub initial_window: f64,
}

impl AlgorithmSpec for SproutEwmaSpec {
    const NAME: &'static str = "sprout-ewma";
    const SUMMARY: &'static str = "contest sprout-ewma: cwnd = (EWMA delivery rate - k dev) x target delay, per 30 ms tick";
    const SOURCE: &'static str = "cellular congestion-control contest (docs/algorithms.md); Sprout (Winstein et al., NSDI 2013)";
    type Args = SproutEwmaArgs;
    type Flow = SproutEwma;

    fn validate(a: &SproutEwmaArgs) -> Result<(), String> {
        crate::check_range("tick-ms", a.tick_ms, 0.0, 1e5)?;
        crate::check_range("ewma", a.ewma, 0.0, 1.0 + 1e-12)?;
        crate::check_range("rho", a.rho, 0.0, 1.0 + 1e-12)?;
        crate::check_range("dev-factor", a.dev_factor, -1e-12, 1e6)?;
        crate::check_range("target-delay-ms", a.target_delay_ms, -1e-12, 1e6)?;
        crate::check_range("min-window", a.min_window, 0.0, 1e7)?;
        crate::check_range("max-window", a.max_window, 0.0, 1e7)?;
        crate::check_range("initial-window", a.initial_window, 0.0, 1e7)?;
        if a.max_window < a.min_window {
            return Err(format!("--max-window ({}) must be >= --min-window ({})", a.max_window, a.min_window));
        }
        Ok(())
    }

    fn new_flow(a: &SproutEwmaArgs, params: WindowParams) -> SproutEwma {
        SproutEwma {
            clock: TickClock::new((a.tick_ms * 1000.0) as u64),
            cwnd: a.initial_window,
            rate: None,
            dev: 0.0,
            min_rtt_us: 0,
            args: a.clone(),
            params,
        }
    }

    fn program(a: &SproutEwmaArgs) -> FoldProgram {
        FoldProgram { name: "ccplab_sprout_ewma", cadence: Cadence::IntervalUs((a.tick_ms * 1000.0) as u64),
            urgent_on_loss: false, features: Features::NONE }
    }
}

/// sprout-ewma's per-flow state.
#[derive(Clone, Debug)]
pub struct SproutEwma {
    params: WindowParams,
    args: SproutEwmaArgs,
    clock: TickClock,
    cwnd: f64,
    /// Delivery-rate estimate, packets/s.
    rate: Option<f64>,
    /// Deviation of the samples from the estimate, packets/s.
    dev: f64,
    min_rtt_us: u64,
}

impl SproutEwma {
    /// Current window, packets.
    pub fn cwnd_pkts(&self) -> f64 {
        self.cwnd
    }

    /// (rate estimate, deviation), packets/s.
    pub fn estimate(&self) -> (Option<f64>, f64) {
        (self.rate, self.dev)
    }

    /// Fold one tick's delivery-rate sample (packets/s) and recompute the window.
    pub fn tick(&mut self, sample: f64) {
        let a = &self.args;
        let rate = match self.rate {
            None => sample,
            Some(r) => {
                self.dev = (1.0 - a.rho) * self.dev + a.rho * (r - sample).abs();
                (1.0 - a.ewma) * r + a.ewma * sample
            }
        };
        self.rate = Some(rate);
        let target_s = if a.target_delay_ms > 0.0 { a.target_delay_ms / 1e3 } else { self.min_rtt_us as f64 / 1e6 };
        self.cwnd = ((rate - a.dev_factor * self.dev) * target_s).min(a.max_window).max(a.min_window);
    }
}

impl Controller for SproutEwma {
    fn initial(&self) -> Control {
        window_control(&self.params, self.cwnd)
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        if m.min_rtt_us > 0 && (self.min_rtt_us == 0 || m.min_rtt_us < self.min_rtt_us) {
            self.min_rtt_us = m.min_rtt_us;
        }
        for sample in self.clock.advance(m.now_us, m.acked_pkts(self.params.mss_bytes)) {
            self.tick(sample);
        }
        window_control(&self.params, self.cwnd)
    }

    fn state(&self) -> String {
        format!("cwnd_pkts={:.3} rate_pps={:.1} dev_pps={:.1}", self.cwnd, self.rate.unwrap_or(0.0), self.dev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contest::fixed_window::tests::params;
    use clap::Parser;

    #[derive(Parser)]
    struct P {
        #[command(flatten)]
        a: SproutEwmaArgs,
    }

    fn args(extra: &[&str]) -> SproutEwmaArgs {
        P::parse_from(std::iter::once("t").chain(extra.iter().copied())).a
    }

    #[test]
    fn window_formula_with_deviation() {
        let mut s = SproutEwmaSpec::new_flow(&args(&[]), params());
        assert_eq!(s.initial().cwnd_bytes, Some(12_000));
        // Reports every 30 ms: 30 packets (1000/s), then 15 packets (500/s).
        s.on_report(&Measurement { now_us: 0, ..Default::default() });
        s.on_report(&Measurement { now_us: 30_000, acked_bytes: 30_000, ..Default::default() });
        assert_eq!(s.estimate(), (Some(1000.0), 0.0));
        assert!((s.cwnd_pkts() - 60.0).abs() < 1e-9, "1000/s x 60 ms");
        s.on_report(&Measurement { now_us: 60_000, acked_bytes: 15_000, ..Default::default() });
        // dev = 0.25 x |1000 - 500| = 125; rate = 0.75 x 1000 + 0.25 x 500 = 875;
        // cwnd = (875 - 0.2 x 125) x 0.06 = 51.
        assert_eq!(s.estimate(), (Some(875.0), 125.0));
        assert!((s.cwnd_pkts() - 51.0).abs() < 1e-9);
        // Bounds: a huge rate stops at max-window 80, nothing at min-window 3.
        s.tick(1e6);
        assert_eq!(s.cwnd_pkts(), 80.0);
        let mut z = SproutEwmaSpec::new_flow(&args(&[]), params());
        z.tick(0.0);
        assert_eq!(z.cwnd_pkts(), 3.0);
    }

    #[test]
    fn plain_variant_uses_min_rtt() {
        let mut s = SproutEwmaSpec::new_flow(&args(&["--dev-factor", "0", "--target-delay-ms", "0"]), params());
        s.on_report(&Measurement { now_us: 0, min_rtt_us: 40_000, ..Default::default() });
        s.on_report(&Measurement { now_us: 30_000, acked_bytes: 30_000, ..Default::default() });
        s.on_report(&Measurement { now_us: 60_000, acked_bytes: 15_000, ..Default::default() });
        assert!((s.cwnd_pkts() - 875.0 * 0.04).abs() < 1e-9, "rate x min RTT, no deviation term");
    }
}
