//! The command line every algorithm shares, and its `main`.
//!
//! `ccp-algorithms <alg> [--ipc unix|netlink] [--ipc-name NAME] [--init-cwnd-pkts N]
//! [--ss-thresh-pkts N|inf] [--min-cwnd-pkts N] [--max-cwnd-pkts N] [-v...]
//! [<algorithm flags>] [--dump-program] [--describe-json]`
//!
//! Exit status: 0 on a clean stop (SIGINT/SIGTERM) or after `--dump-program` /
//! `--describe-json`; 2 on bad flags (clap); 1 on a runtime error (IPC socket
//! in use or not creatable, Portus failure).

use crate::portus_glue::{PortusAlg, WindowBounds};
use crate::AlgorithmSpec;
use anyhow::{bail, Context};
use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, ValueEnum};
use portus::ipc::{BackendBuilder, Blocking};
use portus::RunBuilder;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tracing::{error, info};

/// Directory in which Portus binds its unix socket (hard-coded in portus 0.9).
pub const UNIX_SOCKET_DIR: &str = "/tmp/ccp";

/// The binary that runs every algorithm of the suite (`ccp-algorithms NAME`).
pub const MULTIPLEXER: &str = "ccp-algorithms";

/// IPC mechanism between the algorithm (Portus) and the datapath.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IpcKind {
    /// Unix datagram socket /tmp/ccp/<ipc-name> (eBPF and user-space datapaths).
    Unix,
    /// Netlink (NETLINK_USERSOCK group 22): only ccp-kernel can be the peer.
    Netlink,
}

/// Flags every algorithm binary shares.
#[derive(Args, Clone, Debug)]
pub struct CommonArgs {
    /// IPC to the datapath: unix (Portus binds /tmp/ccp/<ipc-name>) or netlink (ccp-kernel hosts).
    #[arg(long, value_enum, default_value = "unix")]
    pub ipc: IpcKind,
    /// Unix socket name: Portus binds /tmp/ccp/<ipc-name>; a plain file name (unix IPC only).
    #[arg(long, default_value = "portus", value_name = "NAME")]
    pub ipc_name: String,
    /// Initial congestion window, packets (RFC 6928 / Linux default 10).
    #[arg(long, default_value = "10", value_name = "PKTS")]
    pub init_cwnd_pkts: f64,
    /// Initial slow-start threshold, packets; "inf" = none (RFC 5681).
    #[arg(long, default_value = "inf", value_name = "PKTS")]
    pub ss_thresh_pkts: f64,
    /// Floor of the congestion window, packets.
    #[arg(long, default_value = "1", value_name = "PKTS")]
    pub min_cwnd_pkts: f64,
    /// Ceiling of the congestion window, packets.
    #[arg(long, default_value = "100000", value_name = "PKTS")]
    pub max_cwnd_pkts: f64,
    /// More logging: -v debug, -vv trace (RUST_LOG overrides). Default: info.
    #[arg(short, long, action = ArgAction::Count)]
    pub verbose: u8,
    /// Print the fold program exactly as installed in the datapath, then exit.
    #[arg(long)]
    pub dump_program: bool,
    /// Print {"name","summary","source","controls","command","program","flags":[{"flag","default","help"}]} as JSON, then exit.
    #[arg(long)]
    pub describe_json: bool,
}

impl CommonArgs {
    /// The window bounds, or an error naming the bad flag.
    pub fn bounds(&self) -> Result<WindowBounds, String> {
        let positive = |name: &str, v: f64, allow_inf: bool| -> Result<(), String> {
            if v > 0.0 && (v.is_finite() || allow_inf) {
                Ok(())
            } else {
                Err(format!("--{name} must be a number > 0, got {v}"))
            }
        };
        positive("init-cwnd-pkts", self.init_cwnd_pkts, false)?;
        positive("ss-thresh-pkts", self.ss_thresh_pkts, true)?;
        positive("min-cwnd-pkts", self.min_cwnd_pkts, false)?;
        positive("max-cwnd-pkts", self.max_cwnd_pkts, false)?;
        if self.max_cwnd_pkts < self.min_cwnd_pkts {
            return Err(format!(
                "--max-cwnd-pkts ({}) must be >= --min-cwnd-pkts ({})",
                self.max_cwnd_pkts, self.min_cwnd_pkts
            ));
        }
        Ok(WindowBounds {
            init_cwnd_pkts: self.init_cwnd_pkts,
            init_ssthresh_pkts: self.ss_thresh_pkts,
            min_cwnd_pkts: self.min_cwnd_pkts,
            max_cwnd_pkts: self.max_cwnd_pkts,
        })
    }

    /// The unix socket path Portus will bind, or an error naming `--ipc-name`.
    pub fn unix_socket_path(&self) -> Result<PathBuf, String> {
        let n = &self.ipc_name;
        if n.is_empty() || n.contains('/') || n == "." || n == ".." || n.contains('\0') {
            return Err(format!("--ipc-name must be a plain file name, got {n:?}"));
        }
        let p = Path::new(UNIX_SOCKET_DIR).join(n);
        // sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
        if p.as_os_str().len() > 107 {
            return Err(format!("--ipc-name {n:?} makes the socket path longer than 107 bytes"));
        }
        Ok(p)
    }
}

/// The full command line of an algorithm binary: shared flags + the algorithm's own.
#[derive(Parser, Clone, Debug)]
pub struct Cli<A: Args> {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub alg: A,
}

/// `ccp-algorithms NAME`, the command line that runs algorithm `S`.
fn invocation<S: AlgorithmSpec>() -> &'static str {
    Box::leak(format!("{MULTIPLEXER} {}", S::NAME).into_boxed_str())
}

/// The clap `Command` of algorithm `S` (name, about and floor default from the spec).
pub fn command<S: AlgorithmSpec>() -> clap::Command {
    Cli::<S::Args>::command()
        .name(S::NAME)
        .bin_name(invocation::<S>())
        .about(format!("{} [{}]", S::SUMMARY, S::SOURCE))
        .long_about(format!(
            "{} [{}]\n\nRuns a Portus congestion-control daemon that registers the algorithm name \
             {:?}; datapaths asking for that congAlg get it. Controls: {}. Logs one line per report to stderr.",
            S::SUMMARY,
            S::SOURCE,
            S::NAME,
            S::CONTROLS
        ))
        .mut_arg("min_cwnd_pkts", |a| a.default_value(S::DEFAULT_MIN_CWND_PKTS))
}

/// Flags that are actions rather than configuration (left out of `--describe-json`).
const META_FLAGS: [&str; 4] = ["help", "version", "dump_program", "describe_json"];

/// The `--describe-json` document of algorithm `S`, derived from its clap Command so the
/// flags have one source of truth.
pub fn describe<S: AlgorithmSpec>() -> serde_json::Value {
    let cmd = command::<S>();
    let flags: Vec<serde_json::Value> = cmd
        .get_arguments()
        .filter(|a| !META_FLAGS.contains(&a.get_id().as_str()))
        .map(|a| {
            let flag = match (a.get_long(), a.get_short()) {
                (Some(l), _) => format!("--{l}"),
                (None, Some(s)) => format!("-{s}"),
                (None, None) => a.get_id().to_string(),
            };
            let defaults: Vec<String> =
                a.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
            let default = if defaults.is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::Value::String(defaults.join(","))
            };
            let mut o = serde_json::json!({
                "flag": flag,
                "default": default,
                "help": a.get_help().map(|h| h.to_string()).unwrap_or_default(),
            });
            let values: Vec<String> =
                a.get_possible_values().iter().map(|v| v.get_name().to_owned()).collect();
            if !values.is_empty() && values != ["true", "false"] {
                o["values"] = serde_json::json!(values);
            }
            o
        })
        .collect();
    let prog = S::program(&default_args::<S>());
    serde_json::json!({
        "name": S::NAME,
        "binary": MULTIPLEXER,
        "command": [MULTIPLEXER, S::NAME],
        "summary": S::SUMMARY,
        "source": S::SOURCE,
        "controls": S::CONTROLS,
        "program": {
            "name": prog.name,
            "cadence": format!("{:?}", prog.cadence),
            "urgent_on_loss": prog.urgent_on_loss,
        },
        "flags": flags,
    })
}

/// The algorithm's flags at their defaults.
fn default_args<S: AlgorithmSpec>() -> S::Args {
    let m = command::<S>().try_get_matches_from([S::NAME]).expect("defaults parse");
    S::Args::from_arg_matches(&m).expect("defaults parse")
}

/// The fold program of `S` with default flags (for the suite table).
pub fn default_program<S: AlgorithmSpec>() -> String {
    S::program(&default_args::<S>()).text()
}

/// Parse `args` (including argv[0]) into the binary's command line; clap errors
/// (bad flags, `--help`) are returned as `clap::Error`.
pub fn parse_from<S: AlgorithmSpec, T: Into<std::ffi::OsString> + Clone>(
    args: impl IntoIterator<Item = T>,
) -> Result<Cli<S::Args>, clap::Error> {
    let mut cmd = command::<S>();
    let m = cmd.try_get_matches_from_mut(args)?;
    let cli = Cli::<S::Args>::from_arg_matches(&m)?;
    let check = cli.common.bounds().map(|_| ()).and_then(|_| S::validate(&cli.alg));
    let check = check.and_then(|_| match cli.common.ipc {
        IpcKind::Unix => cli.common.unix_socket_path().map(|_| ()),
        IpcKind::Netlink => Ok(()),
    });
    check.map_err(|msg| cmd.error(clap::error::ErrorKind::ValueValidation, msg))?;
    Ok(cli)
}

/// The `main` of algorithm `S` on this process's command line.
pub fn main<S: AlgorithmSpec>() -> ExitCode {
    main_from::<S>(std::env::args_os().collect())
}

/// The `main` of algorithm `S` on command line `args` (argv[0] included).
pub fn main_from<S: AlgorithmSpec>(args: Vec<std::ffi::OsString>) -> ExitCode {
    let cli = match parse_from::<S, _>(args) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    if cli.common.dump_program {
        print!("{}", S::program(&cli.alg).text());
        return ExitCode::SUCCESS;
    }
    if cli.common.describe_json {
        println!("{}", serde_json::to_string_pretty(&describe::<S>()).expect("json"));
        return ExitCode::SUCCESS;
    }
    init_logging(cli.common.verbose);
    match run::<S>(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(target: "ccp", "{} failed: {e:#}", invocation::<S>());
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr without colours; level info, -v debug, -vv trace; RUST_LOG overrides.
fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// Run the Portus daemon until SIGINT/SIGTERM (clean, Ok) or an IPC failure (Err).
pub fn run<S: AlgorithmSpec>(cli: &Cli<S::Args>) -> anyhow::Result<()> {
    let bounds = cli.common.bounds().map_err(anyhow::Error::msg)?;
    let alg = PortusAlg::<S>::new(cli.alg.clone(), bounds);
    let keep_running = Arc::new(AtomicBool::new(true));
    install_signal_handlers(keep_running.clone())?;
    let result = match cli.common.ipc {
        IpcKind::Unix => {
            let path = cli.common.unix_socket_path().map_err(anyhow::Error::msg)?;
            ensure_not_in_use(&path)?;
            let sock = portus::ipc::unix::Socket::<Blocking>::new(&cli.common.ipc_name)
                .map_err(|e| anyhow::anyhow!("cannot bind unix socket {}: {}", path.display(), e.0))?;
            let _cleanup = SocketFile::claim(&path);
            info!(target: "ccp", "ready alg={} ipc=unix socket={}", S::NAME, path.display());
            RunBuilder::new(BackendBuilder { sock })
                .default_alg(alg)
                .with_stop_handle(keep_running.clone())
                .run()
        }
        IpcKind::Netlink => {
            let sock = portus::ipc::netlink::Socket::<Blocking>::new()
                .map_err(|e| anyhow::anyhow!("cannot open netlink socket (NETLINK_USERSOCK): {}", e.0))?;
            info!(target: "ccp", "ready alg={} ipc=netlink", S::NAME);
            RunBuilder::new(BackendBuilder { sock })
                .default_alg(alg)
                .with_stop_handle(keep_running.clone())
                .run()
        }
    };
    match result {
        Ok(()) => {
            info!(target: "ccp", "stopped alg={}", S::NAME);
            Ok(())
        }
        Err(_) if !keep_running.load(Ordering::SeqCst) => Ok(()),
        Err(e) => bail!("portus stopped: {}", e.0),
    }
}

/// Portus unlinks and rebinds its socket path unconditionally, which would
/// silently steal the datapath from a running daemon: refuse if something is
/// bound there (a datagram connect succeeds); a stale file (ECONNREFUSED) is fine.
fn ensure_not_in_use(path: &Path) -> anyhow::Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let probe = std::os::unix::net::UnixDatagram::unbound().context("creating a probe socket")?;
    match probe.connect(path) {
        Ok(()) => bail!(
            "IPC socket {} is in use by another process (another CCP daemon?); stop it or pick another --ipc-name",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
        Err(e) => Err(e).with_context(|| format!("probing IPC socket {}", path.display())),
    }
}

/// Removes the socket file on exit if it is still the one this process bound.
struct SocketFile {
    path: PathBuf,
    ino: Option<u64>,
}

impl SocketFile {
    fn claim(path: &Path) -> Self {
        SocketFile { path: path.to_owned(), ino: std::fs::metadata(path).ok().map(|m| m.ino()) }
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let now = std::fs::metadata(&self.path).ok().map(|m| m.ino());
        if now.is_some() && now == self.ino {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// SIGINT/SIGTERM clear `keep_running`; Portus notices within its 1 s receive
/// timeout and returns. A second signal exits at once (status 130).
/// (signal-hook, through the project's one helper ccplab_util::signals.)
fn install_signal_handlers(keep_running: Arc<AtomicBool>) -> anyhow::Result<()> {
    use ccplab_util::signals::{StopSignals, SIGINT, SIGTERM};
    let signals = StopSignals::install(&[SIGINT, SIGTERM]).context("installing signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            while let Ok(sig) = signals.next() {
                if !keep_running.swap(false, Ordering::SeqCst) {
                    std::process::exit(130);
                }
                info!(target: "ccp", "signal {sig}: stopping (within 1 s)");
            }
        })
        .context("spawning the signal thread")?;
    Ok(())
}
