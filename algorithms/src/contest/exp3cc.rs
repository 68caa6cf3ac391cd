//! exp3cc (contest, docs/algorithms.md): the congestion window chosen by
//! a non-stationary multi-armed bandit, Exp3 with restarts (Besbes, Gur and
//! Zeevi, "Stochastic multi-armed-bandit problem with non-stationary rewards",
//! NeurIPS 2014/2015).
//!
//! - Arms: the windows [0, W_max] cut into n = ceil(W_max / delta) intervals
//!   (`--w-max` 100, `--delta` 5: n = 20).
//! - Epoch length tau = (n ln n)^(1/3) (T / V_T)^(2/3) rounds (horizon T =
//!   `--horizon-rounds` 10000, variation budget V_T = `--variation-budget`
//!   100); an epoch lasts ceil(tau) rounds. gamma = min(1, sqrt(n ln n / ((e -
//!   1) tau))). Defaults: tau = 84.3, gamma = 0.643.
//! - Each epoch starts with all weights 1. Each round: p_i = (1 - gamma) w_i /
//!   sum w + gamma / n; draw arm a; cwnd = uniform in [delta a, delta (a + 1))
//!   (at least the floor); when cwnd packets have been acknowledged since the
//!   round began, reward R = acknowledged packets / elapsed time, scaled into
//!   [0, 1] by the largest rate seen so far; w_a *= exp(gamma R / (n p_a)).
//! - The draws come from a seeded generator (`--seed`, ChaCha8) so a run can
//!   be repeated (the same reports give the same windows).
//!
//! Where the rules run: per report, every 10 ms; a round ends at the first
//! report by which its window has been acknowledged (so it may overshoot by
//! one report's packets, counted in its reward). Logarithm, exponential and
//! powers come from `contest::{ln, exp, pow}` (pure Rust): the libccp crate's
//! exported `log` would capture a C-library `log` call (docs/NOTES.md, "libccp's `log` symbol").

use crate::cc::{Measurement, WindowParams};
use crate::contest::{exp, ln, pow, window_control, SeededRng};
use crate::fold::{Cadence, Features, FoldProgram};
use crate::{AlgorithmSpec, Control, Controller};

/// exp3cc as an [`AlgorithmSpec`].
pub struct Exp3ccSpec;

/// exp3cc's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct Exp3ccArgs {
    /// Largest window of the arms, packets.
    #[arg(long, default_value = "100", value_name = "PKTS")]
    pub w_max: f64,
    /// Width of an arm's window interval, packets.
    #[arg(long, default_value = "5", value_name = "PKTS")]
    pub delta: f64,
    /// Horizon T, rounds.
    #[arg(long, default_value = "10000")]
    pub horizon_rounds: f64,
    /// Variation budget V_T.
    #[arg(long, default_value = "100")]
    pub variation_budget: f64,
    /// Seed of the random generator (same seed and reports: same windows).
    #[arg(long, default_value = "1")]
    pub seed: u64,
}

impl Default for Exp3ccArgs {
    fn default() -> Self {
        Exp3ccArgs { w_max: 100.0, delta: 5.0, horizon_rounds: 10_000.0, variation_budget: 100.0, seed: 1 }
    }
}

/// (n arms, epoch length tau in rounds, gamma) of Exp3 with restarts.
pub fn schedule(a: &Exp3ccArgs) -> (usize, f64, f64) {
    let n = (a.w_max / a.delta).ceil() as usize;
    let nln = n as f64 * ln(n as f64);
    let tau = pow(nln, 1.0 / 3.0) * pow(a.horizon_rounds / a.variation_budget, 2.0 / 3.0);
    let gamma = (nln / ((std::f64::consts::E - 1.0) * tau)).sqrt().min(1.0);
    (n, tau, gamma)
}

/// Report every 10 ms.
pub const PROGRAM: FoldProgram =
    FoldProgram { name: "ccplab_exp3cc", cadence: Cadence::IntervalUs(10_000), urgent_on_loss: false, features: Features::NONE };

impl AlgorithmSpec for Exp3ccSpec {
    const NAME: &'static str = "exp3cc";
    const SUMMARY: &'static str = "contest exp3cc: window chosen by Exp3 with restarts over n = W_max/delta window \
        intervals, reward = delivery rate of the round";
    const SOURCE: &'static str = "cellular congestion-control contest (docs/algorithms.md); Besbes, Gur and Zeevi 2015";
    type Args = Exp3ccArgs;
    type Flow = Exp3cc;

    fn validate(a: &Exp3ccArgs) -> Result<(), String> {
        crate::check_range("w-max", a.w_max, 0.0, 1e7)?;
        crate::check_range("delta", a.delta, 0.0, 1e7)?;
        crate::check_range("horizon-rounds", a.horizon_rounds, 0.0, 1e12)?;
        crate::check_range("variation-budget", a.variation_budget, 0.0, 1e12)?;
        if (a.w_max / a.delta).ceil() < 2.0 {
            return Err(format!("--w-max / --delta must give at least 2 arms, got {} / {}", a.w_max, a.delta));
        }
        Ok(())
    }

    fn new_flow(a: &Exp3ccArgs, params: WindowParams) -> Exp3cc {
        Exp3cc::new(a, params)
    }

    fn program(_a: &Exp3ccArgs) -> FoldProgram {
        PROGRAM
    }
}

/// The round being played.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Round {
    arm: usize,
    p: f64,
    cwnd: f64,
    start_us: Option<u64>,
    acked: f64,
}

/// exp3cc's per-flow state.
#[derive(Clone, Debug)]
pub struct Exp3cc {
    params: WindowParams,
    delta: f64,
    n: usize,
    epoch_rounds: u64,
    gamma: f64,
    weights: Vec<f64>,
    round_in_epoch: u64,
    round: Round,
    max_rate: f64,
    rng: SeededRng,
    /// Rounds finished so far.
    pub rounds: u64,
}

impl Exp3cc {
    /// A new flow; draws the first round's window.
    pub fn new(a: &Exp3ccArgs, params: WindowParams) -> Self {
        let (n, tau, gamma) = schedule(a);
        let mut e = Exp3cc {
            params,
            delta: a.delta,
            n,
            epoch_rounds: tau.ceil().max(1.0) as u64,
            gamma,
            weights: vec![1.0; n],
            round_in_epoch: 0,
            round: Round { arm: 0, p: 1.0, cwnd: 1.0, start_us: None, acked: 0.0 },
            max_rate: 0.0,
            rng: SeededRng::new(a.seed),
            rounds: 0,
        };
        e.draw(None);
        e
    }

    /// The arms' probabilities p_i.
    pub fn probabilities(&self) -> Vec<f64> {
        let sum: f64 = self.weights.iter().sum();
        let n = self.n as f64;
        self.weights.iter().map(|w| (1.0 - self.gamma) * w / sum + self.gamma / n).collect()
    }

    /// The arms' weights.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// (epoch length in rounds, gamma).
    pub fn epoch(&self) -> (u64, f64) {
        (self.epoch_rounds, self.gamma)
    }

    /// The current round's (arm, window in packets).
    pub fn current(&self) -> (usize, f64) {
        (self.round.arm, self.round.cwnd)
    }

    fn draw(&mut self, start_us: Option<u64>) {
        if self.round_in_epoch >= self.epoch_rounds {
            self.weights.iter_mut().for_each(|w| *w = 1.0);
            self.round_in_epoch = 0;
        }
        let p = self.probabilities();
        let u = self.rng.uniform();
        let mut acc = 0.0;
        let mut arm = self.n - 1;
        for (i, pi) in p.iter().enumerate() {
            acc += pi;
            if u < acc {
                arm = i;
                break;
            }
        }
        let cwnd = self.delta * (arm as f64 + self.rng.uniform());
        self.round = Round { arm, p: p[arm], cwnd: self.params.clamp(cwnd), start_us, acked: 0.0 };
    }

    /// End the current round with `acked` packets in `elapsed_s`: reward and weight update.
    fn finish(&mut self, acked: f64, elapsed_s: f64) {
        let rate = acked / elapsed_s.max(1e-6);
        self.max_rate = self.max_rate.max(rate);
        let reward = if self.max_rate > 0.0 { rate / self.max_rate } else { 0.0 };
        let a = self.round.arm;
        self.weights[a] *= exp(self.gamma * reward / (self.n as f64 * self.round.p));
        self.round_in_epoch += 1;
        self.rounds += 1;
    }
}

impl Controller for Exp3cc {
    fn initial(&self) -> Control {
        window_control(&self.params, self.round.cwnd)
    }

    fn on_report(&mut self, m: &Measurement) -> Control {
        match self.round.start_us {
            None => self.round.start_us = Some(m.now_us),
            Some(start) => {
                self.round.acked += m.acked_pkts(self.params.mss_bytes);
                if self.round.acked >= self.round.cwnd.max(1.0) {
                    self.finish(self.round.acked, m.now_us.saturating_sub(start) as f64 / 1e6);
                    self.draw(Some(m.now_us));
                }
            }
        }
        window_control(&self.params, self.round.cwnd)
    }

    fn state(&self) -> String {
        format!("cwnd_pkts={:.3} arm={} rounds={} epoch_round={}", self.round.cwnd, self.round.arm, self.rounds,
            self.round_in_epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contest::fixed_window::tests::params;

    #[test]
    fn epoch_length_and_gamma_match_the_formulas() {
        // n = 20; n ln n = 59.914645471079815 (computed outside: 20 x ln 20).
        let (n, tau, gamma) = schedule(&Exp3ccArgs::default());
        assert_eq!(n, 20);
        assert!((tau - 84.30325266224389).abs() < 1e-9, "tau {tau}");
        assert!((gamma - 0.6431275774771515).abs() < 1e-12, "gamma {gamma}");
        let e = Exp3cc::new(&Exp3ccArgs::default(), params());
        assert_eq!(e.epoch(), (85, gamma));
        // A small budget over a long horizon gives long epochs and gamma clipped at 1 for few arms.
        let (n, _, g) = schedule(&Exp3ccArgs { w_max: 10.0, delta: 5.0, horizon_rounds: 1.0, ..Default::default() });
        assert_eq!(n, 2);
        assert_eq!(g, 1.0);
    }

    /// Drive a flow with a link of `pps` packets/s, 10 ms reports; returns its windows.
    fn drive(seed: u64, reports: u64) -> (Vec<f64>, Exp3cc) {
        let mut e = Exp3cc::new(&Exp3ccArgs { seed, ..Default::default() }, params());
        let mut windows = vec![e.current().1];
        for k in 0..reports {
            let w = e.current().1;
            // A window of w packets per 50 ms RTT, at most 1000 packets/s: acked per 10 ms.
            let acked = (w / 0.05).min(1000.0) * 0.01;
            let c = e.on_report(&Measurement { now_us: k * 10_000, acked_bytes: (acked * 1000.0) as u64, ..Default::default() });
            windows.push(f64::from(c.cwnd_bytes.unwrap()) / 1000.0);
        }
        (windows, e)
    }

    #[test]
    fn a_seed_repeats_a_run_and_rounds_update_weights() {
        let (a, ea) = drive(7, 2000);
        let (b, _) = drive(7, 2000);
        let (c, _) = drive(8, 2000);
        assert_eq!(a, b, "same seed, same windows");
        assert_ne!(a, c, "another seed draws other windows");
        assert!(ea.rounds > 100, "rounds end when the window is acknowledged: {}", ea.rounds);
        let p = ea.probabilities();
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert!(p.iter().all(|&x| x >= ea.epoch().1 / 20.0 - 1e-12), "gamma / n exploration floor");
        // Every window lies in its arm's interval (floor 1 packet).
        assert!(a.iter().all(|&w| (1.0..100.0).contains(&w)));
    }

    #[test]
    fn weight_update_follows_exp3() {
        let mut e = Exp3cc::new(&Exp3ccArgs::default(), params());
        let (arm, w) = e.current();
        let p = e.probabilities()[arm];
        e.on_report(&Measurement { now_us: 0, ..Default::default() });
        // The whole window acknowledged 100 ms later: the first reward is 1 (the largest rate so far).
        e.on_report(&Measurement { now_us: 100_000, acked_bytes: (w.ceil() * 1000.0) as u64, ..Default::default() });
        let expected = exp(e.epoch().1 * 1.0 / (20.0 * p));
        assert!((e.weights()[arm] - expected).abs() < 1e-12);
        assert_eq!(e.rounds, 1);
    }
}
