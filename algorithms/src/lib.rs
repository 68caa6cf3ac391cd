//! ccp-algorithms: congestion-control algorithms for the Congestion Control
//! Plane (CCP), written against Portus 0.9.
//!
//! Layout (one module per idea):
//! - [`window`]: the pure window vocabulary (measurement, bounds, slow start, RTT).
//! - [`reno`], [`cubic`]: each algorithm's pure window logic, unit-tested on
//!   scripted reports without any datapath.
//! - [`fold`]: the fold program installed in the datapath and its report decoding.
//! - [`portus_glue`]: the thin Portus adapter (CongAlg / Flow), logging.
//! - [`cli`]: the shared command line (`--ipc`, window bounds, `--dump-program`,
//!   `--describe-json`) and the `main` every binary calls.
//!
//! Adding an algorithm: write its pure logic (a [`window::WindowAlgorithm`]),
//! an [`AlgorithmSpec`] naming it and its extra flags, a two-line binary calling
//! [`cli::main`], and an entry in `algorithms/registry.toml`.

pub mod cli;
pub mod cubic;
pub mod fold;
pub mod portus_glue;
pub mod reno;
pub mod window;

use window::{WindowAlgorithm, WindowParams};

/// Everything the shared CLI and Portus glue need to know about one algorithm.
pub trait AlgorithmSpec: 'static {
    /// Registry name, and the CongAlg name Portus matches against the
    /// datapath's requested congAlg string (e.g. "reno").
    const NAME: &'static str;
    /// Binary name (e.g. "ccp-reno").
    const BINARY: &'static str;
    /// One-line summary.
    const SUMMARY: &'static str;
    /// Source of truth for the algorithm (RFC, paper).
    const SOURCE: &'static str;
    /// Default floor of cwnd in packets (1; 2 where ALGORITHMS.md says so).
    const DEFAULT_MIN_CWND_PKTS: &'static str = "1";
    /// The algorithm's own flags (clap), beside the shared ones.
    type Args: clap::Args + Clone + Send + std::fmt::Debug + 'static;
    /// The pure per-flow window logic.
    type Window: WindowAlgorithm + 'static;

    /// Check the algorithm's flags; the error names the flag and what is wrong.
    fn validate(_args: &Self::Args) -> Result<(), String> {
        Ok(())
    }

    /// Create the window logic of a new flow.
    fn new_window(args: &Self::Args, params: WindowParams) -> Self::Window;

    /// The fold program (name, text) this algorithm installs.
    fn program() -> (&'static str, &'static str) {
        (fold::PER_RTT_PROGRAM, fold::PER_RTT_FOLD)
    }
}

/// Reno (RFC 5681) as an [`AlgorithmSpec`].
pub struct RenoSpec;

/// Reno has no flags beyond the shared window bounds.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RenoArgs {}

impl AlgorithmSpec for RenoSpec {
    const NAME: &'static str = "reno";
    const BINARY: &'static str = "ccp-reno";
    const SUMMARY: &'static str = "TCP Reno: slow start, +1 packet per RTT in congestion avoidance, \
        cwnd halving on a loss event, cwnd = 1 packet after a timeout (per-report updates)";
    const SOURCE: &'static str = "RFC 5681";
    type Args = RenoArgs;
    type Window = reno::Reno;

    fn new_window(_args: &RenoArgs, params: WindowParams) -> reno::Reno {
        reno::Reno::new(params)
    }
}

/// CUBIC (RFC 9438) as an [`AlgorithmSpec`].
pub struct CubicSpec;

/// CUBIC's flags (RFC 9438 constants).
#[derive(clap::Args, Clone, Debug)]
pub struct CubicArgs {
    /// C, the cubic scaling constant, packets/s^3 (RFC 9438 §4.1). Must be > 0.
    #[arg(long = "c", default_value = "0.4")]
    pub c: f64,
    /// beta_cubic, the multiplicative decrease factor (RFC 9438 §4.6). In (0, 1).
    #[arg(long, default_value = "0.7")]
    pub beta: f64,
    /// Fast convergence (RFC 9438 §4.7): lower W_max when a loss happens below it.
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub fast_convergence: bool,
    /// Reno-friendly region (RFC 9438 §4.3): cwnd = W_est when W_cubic(t) < W_est.
    #[arg(long, default_value = "true", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub reno_friendly: bool,
}

impl AlgorithmSpec for CubicSpec {
    const NAME: &'static str = "cubic";
    const BINARY: &'static str = "ccp-cubic";
    const SUMMARY: &'static str = "CUBIC: W_cubic(t) = C(t-K)^3 + W_max growth, beta = 0.7 decrease, \
        fast convergence, Reno-friendly region (per-report updates)";
    const SOURCE: &'static str = "RFC 9438";
    type Args = CubicArgs;
    type Window = cubic::Cubic;

    fn validate(a: &CubicArgs) -> Result<(), String> {
        if !(a.c.is_finite() && a.c > 0.0) {
            return Err(format!("--c must be a finite number > 0, got {}", a.c));
        }
        if !(a.beta > 0.0 && a.beta < 1.0) {
            return Err(format!("--beta must be in (0, 1), got {}", a.beta));
        }
        Ok(())
    }

    fn new_window(a: &CubicArgs, params: WindowParams) -> cubic::Cubic {
        let cp = cubic::CubicParams {
            c: a.c,
            beta: a.beta,
            fast_convergence: a.fast_convergence,
            reno_friendly: a.reno_friendly,
        };
        cubic::Cubic::new(params, cp)
    }
}
