//! spoderman (contest, docs/algorithms.md): Sprout-style Bayesian
//! inference of the delivery rate, with resampling, driving a proportional
//! window controller.
//!
//! The rate lambda is one of `--bins` (256) values evenly spaced on [0,
//! `--max-rate-pps`] (1000 packets/s = 12 Mbit/s at 1500 bytes; scale it to the
//! link), each with a weight, all equal at the start. Each tick (`--tick-ms`
//! 20):
//! 1. evolve: each bin's weight spreads to its neighbours as Brownian motion
//!    with variance sigma^2 x tick (`--sigma` 200 packets/s per sqrt(s)): a
//!    Gaussian kernel over the fixed bins, cut at 4 standard deviations and
//!    renormalized per source bin, so no weight leaves [0, max rate];
//! 2. observe: k packets delivered in the tick; w_i *= Poisson(k; lambda_i
//!    tick), computed in the log domain (k ln(mu) - mu; the k! is common to
//!    every bin and cancels in the normalization);
//! 3. normalize;
//! 4. if N_eff = 1 / sum(w_i^2) < `--neff-threshold` (30), resample: w_i +=
//!    eta / N (`--eta` 0.1), normalize again.
//!
//! Target window = (the `--quantile` (5 %) of the rate distribution) x
//! `--horizon-ms` (100) - packets estimated in the queue; cwnd += Kp (target -
//! cwnd) each tick (`--kp` 0.5). The queue estimate is Little's law: the
//! posterior mean rate x the queueing delay (latest RTT - minimum RTT).
//!
//! Where the rules run: per report; the fold program reports once per tick and
//! `contest::TickClock` makes exact ticks (k may be fractional when a report
//! spans two ticks; the Poisson log-likelihood is used as is). Logarithm and
//! exponential come from `contest::{ln, exp}` (pure Rust; libccp's `log`).

use crate::cc::{Measurement, WindowParams};
use crate::contest::{exp, ln, window_control, TickClock};
use crate::fold::{Cadence, Features, FoldProgram};
use crate::{AlgorithmSpec, Control, Controller};

/// spoderman as an [`AlgorithmSpec`].
pub struct SpodermanSpec;

/// spoderman's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct SpodermanArgs {
    /// Number of rate bins.
    #[arg(long, default_value = "256")]
    pub bins: usize,
    /// Largest rate of the bins, packets/s (scale it to the link).
    #[arg(long, default_value = "1000", value_name = "PPS")]
    pub max_rate_pps: f64,
    /// Tick length, ms.
    #[arg(long, default_value = "20", value_name = "MS")]
    pub tick_ms: f64,
    /// Brownian motion of the rate, packets/s per sqrt(s).
    #[arg(long, default_value = "200")]
    pub sigma: f64,
    /// Resample when N_eff = 1 / sum(w^2) falls below this.
    #[arg(long, default_value = "30")]
    pub neff_threshold: f64,
    /// Resampling: w_i += eta / N.
    #[arg(long, default_value = "0.1")]
    pub eta: f64,
    /// Quantile of the rate distribution the target uses (cautious forecast).
    #[arg(long, default_value = "0.05")]
    pub quantile: f64,
    /// Forecast horizon, ms.
    #[arg(long, default_value = "100", value_name = "MS")]
    pub horizon_ms: f64,
    /// Proportional gain: cwnd += kp (target - cwnd) per tick.
    #[arg(long, default_value = "0.5")]
    pub kp: f64,
}

impl Default for SpodermanArgs {
    fn default() -> Self {
        SpodermanArgs { bins: 256, max_rate_pps: 1000.0, tick_ms: 20.0, sigma: 200.0, neff_threshold: 30.0,
            eta: 0.1, quantile: 0.05, horizon_ms: 100.0, kp: 0.5 }
    }
}

impl AlgorithmSpec for SpodermanSpec {
    const NAME: &'static str = "spoderman";
    const SUMMARY: &'static str = "contest spoderman: Bayesian delivery-rate inference (256 bins, Brownian evolve, \
        Poisson observe, resampling) and a P controller toward quantile x horizon - queue";
    const SOURCE: &'static str = "cellular congestion-control contest (docs/algorithms.md); Sprout (Winstein et al., NSDI 2013)";
    type Args = SpodermanArgs;
    type Flow = Spoderman;

    fn validate(a: &SpodermanArgs) -> Result<(), String> {
        if !(2..=100_000).contains(&a.bins) {
            return Err(format!("--bins must be in [2, 100000], got {}", a.bins));
        }
        crate::check_range("max-rate-pps", a.max_rate_pps, 0.0, 1e9)?;
        crate::check_range("tick-ms", a.tick_ms, 0.0, 1e5)?;
        crate::check_range("sigma", a.sigma, -1e-12, 1e9)?;
        crate::check_range("neff-threshold", a.neff_threshold, -1e-12, 1e9)?;
        crate::check_range("eta", a.eta, -1e-12, 1e6)?;
        crate::check_range("quantile", a.quantile, 0.0, 1.0)?;
        crate::check_range("horizon-ms", a.horizon_ms, 0.0, 1e6)?;
        crate::check_range("kp", a.kp, 0.0, 1.0 + 1e-12)
    }

    fn new_flow(a: &SpodermanArgs, params: WindowParams) -> Spoderman {
        Spoderman::new(a, params)
    }

    fn program(a: &SpodermanArgs) -> FoldProgram {
        FoldProgram { name: "ccplab_spoderman", cadence: Cadence::IntervalUs((a.tick_ms * 1000.0) as u64),
            urgent_on_loss: false, features: Features::NONE }
    }
}

/// spoderman's per-flow state.
#[derive(Clone, Debug)]
pub struct Spoderman {
    params: WindowParams,
    args: SpodermanArgs,
    clock: TickClock,
    /// Rate of each bin, packets/s.
    rates: Vec<f64>,
    /// Weight of each bin (sums to 1).
    weights: Vec<f64>,
    /// Brownian kernel over bin offsets -r..=r.
    kernel: Vec<f64>,
    cwnd: f64,
    min_rtt_us: u64,
    queue_delay_s: f64,
    /// Resamplings so far.
    pub resamples: u64,
}

impl Spoderman {
    /// A flow with equal weights at the shared initial window.
    pub fn new(a: &SpodermanArgs, params: WindowParams) -> Self {
        let n = a.bins;
        let width = a.max_rate_pps / (n - 1) as f64;
        let rates = (0..n).map(|i| i as f64 * width).collect();
        let sd_bins = a.sigma * (a.tick_ms / 1e3).sqrt() / width;
        let r = (4.0 * sd_bins).ceil() as i64;
        let kernel = (-r..=r)
            .map(|d| if sd_bins > 0.0 { exp(-((d * d) as f64) / (2.0 * sd_bins * sd_bins)) } else { f64::from(d == 0) })
            .collect();
        Spoderman {
            clock: TickClock::new((a.tick_ms * 1000.0) as u64),
            weights: vec![1.0 / n as f64; n],
            rates,
            kernel,
            cwnd: params.init_cwnd_pkts,
            params,
            args: a.clone(),
            min_rtt_us: 0,
            queue_delay_s: 0.0,
            resamples: 0,
        }
    }

    /// The bins' weights.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// Effective number of bins, 1 / sum(w^2).
    pub fn neff(&self) -> f64 {
        1.0 / self.weights.iter().map(|w| w * w).sum::<f64>()
    }

    /// Posterior mean rate, packets/s.
    pub fn mean_rate(&self) -> f64 {
        self.rates.iter().zip(&self.weights).map(|(r, w)| r * w).sum()
    }

    /// The rate below which the distribution holds probability `q`, packets/s.
    pub fn quantile(&self, q: f64) -> f64 {
        let mut acc = 0.0;
        for (r, w) in self.rates.iter().zip(&self.weights) {
            acc += w;
            if acc >= q {
                return *r;
            }
        }
        *self.rates.last().expect("bins")
    }

    /// Current window, packets.
    pub fn cwnd_pkts(&self) -> f64 {
        self.cwnd
    }

    fn normalize(&mut self) {
        let sum: f64 = self.weights.iter().sum();
        if sum > 0.0 && sum.is_finite() {
            self.weights.iter_mut().for_each(|w| *w /= sum);
        } else {
            // Every bin ruled out (numerically): start over from equal weights.
            let n = self.weights.len() as f64;
            self.weights.iter_mut().for_each(|w| *w = 1.0 / n);
        }
    }

    /// Step 1: spread every bin's weight with the Brownian kernel.
    pub fn evolve(&mut self) {
        let n = self.weights.len() as i64;
        let r = (self.kernel.len() / 2) as i64;
        let mut out = vec![0.0; self.weights.len()];
        for (i, &w) in self.weights.iter().enumerate() {
            if w == 0.0 {
                continue;
            }
            let i = i as i64;
            let (lo, hi) = ((i - r).max(0), (i + r).min(n - 1));
            let mass: f64 = (lo..=hi).map(|j| self.kernel[(j - i + r) as usize]).sum();
            for j in lo..=hi {
                out[j as usize] += w * self.kernel[(j - i + r) as usize] / mass;
            }
        }
        self.weights = out;
    }

    /// Steps 2-4: weigh by the Poisson likelihood of `k` packets in a tick,
    /// normalize, resample when N_eff is below the threshold. Returns whether it resampled.
    pub fn observe(&mut self, k: f64) -> bool {
        let tick_s = self.args.tick_ms / 1e3;
        let loglik: Vec<f64> = self
            .rates
            .iter()
            .zip(&self.weights)
            .map(|(rate, &w)| {
                let mu = rate * tick_s;
                let l = if mu > 0.0 { k * ln(mu) - mu } else if k < 1e-9 { 0.0 } else { f64::NEG_INFINITY };
                if w > 0.0 { ln(w) + l } else { f64::NEG_INFINITY }
            })
            .collect();
        let top = loglik.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        self.weights = loglik.iter().map(|l| if top.is_finite() { exp(l - top) } else { 0.0 }).collect();
        self.normalize();
        if self.neff() < self.args.neff_threshold {
            let add = self.args.eta / self.weights.len() as f64;
            self.weights.iter_mut().for_each(|w| *w += add);
            self.normalize();
            self.resamples += 1;
            return true;
        }
        false
    }

    /// One tick with `k` packets delivered: evolve, observe, move cwnd toward the target.
    pub fn tick(&mut self, k: f64) {
        self.evolve();
        self.observe(k);
        let queue_pkts = self.mean_rate() * self.queue_delay_s;
        let target = self.quantile(self.args.quantile) * self.args.horizon_ms / 1e3 - queue_pkts;
        self.cwnd += self.args.kp * (target - self.cwnd);
    }
}

impl Controller for Spoderman {
    fn initial(&self) -> Control {
        window_control(&self.params, self.cwnd)
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        if m.min_rtt_us > 0 && (self.min_rtt_us == 0 || m.min_rtt_us < self.min_rtt_us) {
            self.min_rtt_us = m.min_rtt_us;
        }
        if m.rtt_us > 0 && self.min_rtt_us > 0 {
            self.queue_delay_s = m.rtt_us.saturating_sub(self.min_rtt_us) as f64 / 1e6;
        }
        let tick_s = self.clock.tick_s();
        for rate in self.clock.advance(m.now_us, m.acked_pkts(self.params.mss_bytes)) {
            self.tick(rate * tick_s);
        }
        self.cwnd = self.params.clamp(self.cwnd);
        window_control(&self.params, self.cwnd)
    }

    fn state(&self) -> String {
        format!("cwnd_pkts={:.3} mean_pps={:.1} q_pps={:.1} neff={:.1} resamples={}", self.cwnd, self.mean_rate(),
            self.quantile(self.args.quantile), self.neff(), self.resamples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contest::fixed_window::tests::params;

    #[test]
    fn resamples_exactly_when_neff_falls_below_threshold() {
        let a = SpodermanArgs::default();
        let mut s = Spoderman::new(&a, params());
        assert!((s.neff() - 256.0).abs() < 1e-9);
        // 15 ticks at 500 packets/s (10 per 20 ms), then an outage of 15 ticks with nothing delivered.
        let ks: Vec<f64> = std::iter::repeat(10.0).take(15).chain(std::iter::repeat(0.0).take(15)).collect();
        let (mut yes, mut no) = (0, 0);
        for (t, &k) in ks.iter().enumerate() {
            s.evolve();
            // The same step without resampling gives the N_eff the rule looks at.
            let mut plain = s.clone();
            plain.args.neff_threshold = 0.0;
            plain.observe(k);
            let resampled = s.observe(k);
            assert_eq!(resampled, plain.neff() < 30.0, "tick {t}: N_eff {}", plain.neff());
            if resampled {
                yes += 1;
                // Every bin got eta / N before the final normalization.
                let floor = 0.1 / 256.0 / 1.1;
                assert!(s.weights().iter().all(|&w| w >= floor - 1e-15));
            } else {
                no += 1;
                assert_eq!(s.weights(), plain.weights());
            }
            if t == 14 {
                assert!((s.mean_rate() - 500.0).abs() < 80.0, "posterior mean {}", s.mean_rate());
            }
        }
        assert!(yes > 0 && no > 0, "both branches taken: {yes} resampled, {no} not");
        assert_eq!(s.resamples, yes);
        assert!(s.quantile(0.05) < 50.0, "the outage pulls the rate toward 0");
    }

    #[test]
    fn evolve_keeps_mass_and_spreads_with_sigma() {
        let a = SpodermanArgs::default();
        let mut s = Spoderman::new(&a, params());
        s.weights = vec![0.0; 256];
        s.weights[128] = 1.0;
        s.evolve();
        assert!((s.weights.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // Variance in rate units = sigma^2 x tick = 200^2 x 0.02 = 800 (sd 28.3 packets/s).
        let mean = s.mean_rate();
        let var: f64 = s.rates.iter().zip(&s.weights).map(|(r, w)| w * (r - mean) * (r - mean)).sum();
        assert!((var - 800.0).abs() / 800.0 < 0.05, "variance {var}");
    }

    #[test]
    fn window_moves_toward_quantile_times_horizon() {
        let a = SpodermanArgs { neff_threshold: 0.0, ..SpodermanArgs::default() };
        let mut s = Spoderman::new(&a, params());
        s.tick(10.0);
        let target = s.quantile(0.05) * 0.1;
        assert!((s.cwnd_pkts() - (10.0 + 0.5 * (target - 10.0))).abs() < 1e-9);
        assert!(s.quantile(0.05) < s.mean_rate());
    }
}
