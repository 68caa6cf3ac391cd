//! The command line every algorithm shares, and its `main`.
//!
//! `ccp-algorithms <alg> [--ipc unix|netlink] [--ipc-name NAME] [--init-cwnd-pkts N]
//! [--ss-thresh-pkts N|inf] [--min-cwnd-pkts N] [--max-cwnd-pkts N] [-v...]
//! [<algorithm flags>] [--also NAME[:FLAG=VALUE...]]... [--dump-program] [--describe-json]`
//!
//! `--also` hosts more algorithms in the same Portus daemon (see [`parse_host_spec`]);
//! `<alg>` stays the default for flows whose congAlg names none of them.
//!
//! Exit status: 0 on a clean stop (SIGINT/SIGTERM) or after `--dump-program` /
//! `--describe-json`; 2 on bad flags (clap); 1 on a runtime error (IPC socket
//! in use or not creatable, Portus failure).

use crate::portus_glue::{HostedAlg, Hosting, PortusAlg, WindowBounds};
use crate::cc::SocketPacing;
use crate::AlgorithmSpec;
use anyhow::{bail, Context};
use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, ValueEnum};
use portus::ipc::Blocking;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tracing::{debug, error, info};

/// Directory in which Portus binds its unix socket (hard-coded in portus 0.9).
pub const UNIX_SOCKET_DIR: &str = "/tmp/ccp";

/// The binary that runs every algorithm of the suite (`ccp-algorithms NAME`).
pub const MULTIPLEXER: &str = "ccp-algorithms";

/// Largest `--min-report-interval-us` (1 s: well past any RTT of the lab).
pub const MAX_REPORT_FLOOR_US: u64 = 1_000_000;

/// IPC mechanism between the algorithm (Portus) and the datapath.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IpcKind {
    /// Unix datagram socket `/tmp/ccp/<ipc-name>` (eBPF and user-space datapaths).
    Unix,
    /// Netlink (NETLINK_USERSOCK group 22): only ccp-kernel can be the peer.
    Netlink,
}

/// Whether the datapath paces cwnd-only flows itself (`--datapath-paces`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DatapathPaces {
    /// yes with --ipc unix (ccp-datapath), no with --ipc netlink (ccp-kernel).
    Auto,
    /// The datapath paces per ACK as the kernel paces reno and cubic.
    Yes,
    /// It does not: the daemon commands the kernel's pacing rate every report.
    No,
}

impl DatapathPaces {
    /// The answer for a daemon on `ipc`.
    pub fn resolve(self, ipc: IpcKind) -> bool {
        match self {
            DatapathPaces::Yes => true,
            DatapathPaces::No => false,
            DatapathPaces::Auto => ipc == IpcKind::Unix,
        }
    }
}

/// Flags every algorithm binary shares.
#[derive(Args, Clone, Debug)]
pub struct CommonArgs {
    /// IPC to the datapath: unix (Portus binds `/tmp/ccp/<ipc-name>`) or netlink (ccp-kernel hosts).
    #[arg(long, value_enum, default_value = "unix")]
    pub ipc: IpcKind,
    /// Unix socket name: Portus binds `/tmp/ccp/<ipc-name>`; a plain file name (unix IPC only).
    #[arg(long, default_value = "portus", value_name = "NAME")]
    pub ipc_name: String,
    /// Whether the datapath paces cwnd-only flows itself, per ACK at Linux
    /// tcp_update_pacing_rate's rate (ccp-datapath does; ccp-kernel turns pacing on
    /// and leaves the rate at its connect-time value, capping every such flow).
    /// no: the daemon commands the pacing of --socket-pacing for every algorithm
    /// that commands cwnd only (reno and cubic command the kernel's rate
    /// themselves with --socket-pacing kernel). auto: yes with --ipc unix, no with
    /// --ipc netlink.
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    pub datapath_paces: DatapathPaces,
    /// Where the datapath does not pace (--datapath-paces): how the flow's socket
    /// would be paced by Linux. unpaced: as on a host's default qdisc, the daemon
    /// commands a rate no link reaches (libccp's largest, 34 Gbit/s), so cwnd alone
    /// limits the flow, as kernel reno and cubic there. kernel: as on an fq qdisc
    /// or with SO_MAX_PACING_RATE, Linux tcp_update_pacing_rate's rate every report.
    /// Algorithms that command their own rate (bbr, copa) are unchanged.
    #[arg(long, value_enum, default_value = "unpaced", value_name = "HOW")]
    pub socket_pacing: SocketPacing,
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
    /// Floor of the fold program's regular report interval, us (0 = none): a per-RTT
    /// cadence reports after max(RTT/k, this), a fixed one after max(interval, this);
    /// loss and timeout reports are never held back. At veth or datacenter RTTs
    /// (tens of us) a per-RTT cadence means a report, and two daemon wakeups, per
    /// ACK (docs/datapath.md, "Performance"). At most 1000000.
    #[arg(long, default_value = "0", value_name = "US",
          value_parser = clap::value_parser!(u64).range(0..=MAX_REPORT_FLOOR_US))]
    pub min_report_interval_us: u64,
    /// Do not send an answer that repeats the last one sent, to a report without loss or
    /// timeout whose cwnd is the answer's (reno and cubic; every 8th repeat still goes).
    /// An application-limited flow's answers mostly repeat; each costs both daemons a
    /// wakeup (algorithms/src/repeats.rs).
    #[arg(long, default_value = "true", action = ArgAction::Set, value_name = "BOOL")]
    pub skip_repeated_answers: bool,
    /// More logging: -v debug, -vv trace (RUST_LOG overrides). Default: info.
    #[arg(short, long, action = ArgAction::Count)]
    pub verbose: u8,
    /// Print the fold program exactly as installed in the datapath, then exit.
    #[arg(long)]
    pub dump_program: bool,
    /// Print {"name","summary","source","controls","command","program","flags":[{"flag","default","help"}]} as JSON, then exit.
    #[arg(long)]
    pub describe_json: bool,
    /// Host another algorithm of the suite in this daemon, with its own flags written as
    /// NAME:FLAG=VALUE:... (the runner's ccp:NAME:flag=value syntax, without "ccp:"), e.g.
    /// --also cubic:beta=0.8 --also fixed-window:window=10. Portus gives a flow the algorithm
    /// whose name equals the flow's congAlg; this command's own algorithm takes all others.
    #[arg(long, value_name = "NAME[:FLAG=VALUE...]")]
    pub also: Vec<String>,
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
            min_report_interval_us: self.min_report_interval_us,
            skip_repeated_answers: self.skip_repeated_answers,
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
/// (`--also` configures the daemon, not the algorithm: not a `ccp:NAME:flag=value` parameter.)
const META_FLAGS: [&str; 5] = ["help", "version", "dump_program", "describe_json", "also"];

/// Flags of the daemon as a whole: not settable per hosted algorithm in `--also`.
const DAEMON_FLAGS: [&str; 8] =
    ["ipc", "ipc-name", "datapath-paces", "socket-pacing", "verbose", "also", "dump-program", "describe-json"];

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

/// Parse `args` (including `argv[0]`) into the binary's command line; clap errors
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
    let check = check.and_then(|_| hosting::<S>(&cli).map(|_| ()));
    check.map_err(|msg| cmd.error(clap::error::ErrorKind::ValueValidation, msg))?;
    Ok(cli)
}

/// One `--also` value, `NAME[:FLAG=VALUE...]`, as (NAME, [(FLAG, VALUE)]): FLAG is
/// the algorithm's flag without `--` (`_` read as `-`, as the runner does), in the
/// given order. Errors name the value and what is wrong (empty name, an item
/// without `=`, a flag given twice).
pub fn parse_host_spec(text: &str) -> Result<(String, Vec<(String, String)>), String> {
    let mut items = text.split(':');
    let name = items.next().unwrap_or("");
    if name.is_empty() {
        return Err(format!("--also {text:?}: expected NAME[:FLAG=VALUE...], e.g. cubic:beta=0.8"));
    }
    let mut params: Vec<(String, String)> = Vec::new();
    for item in items {
        let (k, v) = item
            .split_once('=')
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .ok_or_else(|| format!("--also {text}: {item:?} is not FLAG=VALUE (e.g. {name}:beta=0.8)"))?;
        let k = k.trim_start_matches("--").replace('_', "-");
        if params.iter().any(|(p, _)| *p == k) {
            return Err(format!("--also {text}: flag {k} given twice"));
        }
        params.push((k, v.to_string()));
    }
    Ok((name.to_string(), params))
}

/// Algorithm `S` with `params` ({flag without --: value}) for a multi-algorithm
/// daemon, validated exactly as `ccp-algorithms NAME --FLAG VALUE...` would be
/// (its own flags and the shared window bounds, with `S`'s defaults). Errors name
/// the algorithm and the flag.
pub fn hosted<S: AlgorithmSpec>(params: &[(String, String)]) -> Result<Box<dyn HostedAlg>, String> {
    let cmd = command::<S>();
    let settable: Vec<&str> = cmd
        .get_arguments()
        .filter(|a| !META_FLAGS.contains(&a.get_id().as_str()))
        .filter_map(|a| a.get_long())
        .filter(|l| !DAEMON_FLAGS.contains(l))
        .collect();
    let mut argv = vec![S::NAME.to_string()];
    for (k, v) in params {
        if DAEMON_FLAGS.contains(&k.as_str()) {
            return Err(format!("--also {}: --{k} belongs to the whole daemon; give it once, outside --also", S::NAME));
        }
        if !settable.contains(&k.as_str()) {
            return Err(format!("--also {}: {} has no flag --{k}; its flags: --{}", S::NAME, S::NAME, settable.join(", --")));
        }
        argv.push(format!("--{k}"));
        argv.push(v.clone());
    }
    let mut cmd = command::<S>();
    let m = cmd.try_get_matches_from_mut(&argv).map_err(|e| format!("--also {}: {}", S::NAME, clap_message(&e)))?;
    let cli = Cli::<S::Args>::from_arg_matches(&m).map_err(|e| format!("--also {}: {}", S::NAME, clap_message(&e)))?;
    let bounds = cli.common.bounds().map_err(|e| format!("--also {}: {e}", S::NAME))?;
    S::validate(&cli.alg).map_err(|e| format!("--also {}: {e}", S::NAME))?;
    Ok(Box::new(PortusAlg::<S>::new(cli.alg, bounds)))
}

/// The first line of a clap error without its "error: " prefix.
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let line = text.lines().next().unwrap_or("").trim();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

/// The algorithms the daemon of `cli` hosts: `S` with its flags first (the
/// default), then each `--also` in order. Errors name the `--also` value or the
/// algorithm (unknown, hosted twice, too many fold programs for libccp).
pub fn hosting<S: AlgorithmSpec>(cli: &Cli<S::Args>) -> Result<Hosting, String> {
    let bounds = cli.common.bounds()?;
    let mut algs: Vec<Box<dyn HostedAlg>> = vec![Box::new(PortusAlg::<S>::new(cli.alg.clone(), bounds))];
    for spec in &cli.common.also {
        let (name, params) = parse_host_spec(spec)?;
        let entry = crate::suite::find(&name).ok_or_else(|| {
            format!("--also {spec}: unknown algorithm {name:?}; the suite: {}", crate::suite::names().join(", "))
        })?;
        algs.push((entry.host)(&params)?);
    }
    if !cli.common.datapath_paces.resolve(cli.common.ipc) {
        for alg in &mut algs {
            alg.without_datapath_pacing(cli.common.socket_pacing);
        }
    }
    Hosting::new(algs)
}

/// The `main` of algorithm `S` on this process's command line.
pub fn main<S: AlgorithmSpec>() -> ExitCode {
    main_from::<S>(std::env::args_os().collect())
}

/// The `main` of algorithm `S` on command line `args` (`argv[0]` included).
pub fn main_from<S: AlgorithmSpec>(args: Vec<std::ffi::OsString>) -> ExitCode {
    let cli = match parse_from::<S, _>(args) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    if cli.common.dump_program {
        // Every hosted algorithm's program, in hosted order (just S's without --also).
        let hosting = hosting::<S>(&cli).expect("validated by parse_from");
        for (_, text) in hosting.programs() {
            print!("{text}");
        }
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
/// It hosts `S` (the default) and every `--also` algorithm.
pub fn run<S: AlgorithmSpec>(cli: &Cli<S::Args>) -> anyhow::Result<()> {
    let hosting = hosting::<S>(cli).map_err(anyhow::Error::msg)?;
    // " hosted=reno,cubic" only when there is more than one: the single-algorithm line stays as it was.
    let hosted = match hosting.names().as_slice() {
        [_] => String::new(),
        names => format!(" hosted={}", names.join(",")),
    };
    let keep_running = Arc::new(AtomicBool::new(true));
    let unix_path = match cli.common.ipc {
        IpcKind::Unix => Some(cli.common.unix_socket_path().map_err(anyhow::Error::msg)?),
        IpcKind::Netlink => None,
    };
    install_signal_handlers(keep_running.clone(), unix_path.clone())?;
    let result = match cli.common.ipc {
        IpcKind::Unix => {
            let path = unix_path.expect("set for unix above");
            ensure_not_in_use(&path)?;
            let sock = crate::portus_glue::UnixIpc::bind(&path).context("cannot bind the unix socket")?;
            let _cleanup = SocketFile::claim(&path);
            info!(target: "ccp", "ready alg={} ipc=unix socket={}{hosted}", S::NAME, path.display());
            hosting.run(sock, keep_running.clone())
        }
        IpcKind::Netlink => {
            let sock = portus::ipc::netlink::Socket::<Blocking>::new()
                .map_err(|e| anyhow::anyhow!("cannot open netlink socket (NETLINK_USERSOCK): {}", e.0))?;
            info!(target: "ccp", "ready alg={} ipc=netlink{hosted}", S::NAME);
            hosting.run(sock, keep_running.clone())
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

/// SIGINT/SIGTERM clear `keep_running`, and with the unix IPC a one-byte
/// datagram from an unbound socket to `wake` (the daemon's own socket) ends
/// the blocking receive at once: Portus's receive loop checks the flag only
/// between receives, so without the wake-up it noticed only at its 1 s
/// receive timeout (the daemon took up to 1 s to exit). The datagram has no
/// sender address, so the receive reports an error, which Portus skips.
/// Netlink (ccp-kernel) keeps the 1 s bound. A second signal exits at once
/// (status 130). (signal-hook, through the project's one helper ccplab_util::signals.)
fn install_signal_handlers(keep_running: Arc<AtomicBool>, wake: Option<PathBuf>) -> anyhow::Result<()> {
    use ccplab_util::signals::{StopSignals, SIGINT, SIGTERM};
    let signals = StopSignals::install(&[SIGINT, SIGTERM]).context("installing signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            while let Ok(sig) = signals.next() {
                if !keep_running.swap(false, Ordering::SeqCst) {
                    std::process::exit(130);
                }
                info!(target: "ccp", "signal {sig}: stopping");
                if let Some(path) = &wake {
                    let sent = std::os::unix::net::UnixDatagram::unbound().and_then(|s| s.send_to(&[0], path));
                    if let Err(e) = sent {
                        debug!(target: "ccp", "wake-up datagram to {} not sent ({e}): stopping within 1 s", path.display());
                    }
                }
            }
        })
        .context("spawning the signal thread")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{contest::fixed_window::FixedWindowSpec, cubic::CubicSpec, reno::RenoSpec};

    /// The validation message of `ccp-algorithms reno ARGS...` (it must fail).
    fn refused(args: &[&str]) -> String {
        let argv = std::iter::once("reno").chain(args.iter().copied());
        match parse_from::<RenoSpec, _>(argv) {
            Ok(_) => panic!("{args:?} must be refused"),
            Err(e) => {
                assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{args:?}: {e}");
                e.to_string()
            }
        }
    }

    #[test]
    fn host_specs_parse_like_the_runner_parameters() {
        assert_eq!(parse_host_spec("cubic").unwrap(), ("cubic".into(), vec![]));
        let (n, p) = parse_host_spec("cubic:beta=0.8:fast_convergence=false").unwrap();
        assert_eq!(n, "cubic");
        assert_eq!(p, vec![("beta".into(), "0.8".into()), ("fast-convergence".into(), "false".into())]);
        assert!(parse_host_spec("").unwrap_err().contains("expected NAME[:FLAG=VALUE...]"));
        assert!(parse_host_spec("cubic:beta").unwrap_err().contains("\"beta\" is not FLAG=VALUE"));
        assert!(parse_host_spec("cubic:beta=").unwrap_err().contains("is not FLAG=VALUE"));
        assert!(parse_host_spec("cubic:beta=0.8:beta=0.9").unwrap_err().contains("flag beta given twice"));
    }

    #[test]
    fn also_hosts_each_algorithm_with_its_own_flags() {
        let cli = parse_from::<RenoSpec, _>(["reno", "--also", "cubic:beta=0.8", "--also", "fixed-window:window=7"]).unwrap();
        let h = hosting::<RenoSpec>(&cli).unwrap();
        assert_eq!(h.names(), ["reno", "cubic", "fixed-window"]);
        assert_eq!(h.pick("cubic").name(), "cubic");
        assert_eq!(h.pick("fixed-window").name(), "fixed-window");
        // Unknown or empty names get the first (Portus's default_alg rule).
        assert_eq!(h.pick("vegas").name(), "reno");
        assert_eq!(h.pick("").name(), "reno");
        let progs: Vec<&str> = h.programs().iter().map(|(n, _)| *n).collect();
        assert_eq!(progs, ["ccplab_reno", "ccplab_cubic", "ccplab_fixed_window"]);
        // Without --also: one algorithm, as before.
        let one = parse_from::<CubicSpec, _>(["cubic"]).unwrap();
        assert_eq!(hosting::<CubicSpec>(&one).unwrap().names(), ["cubic"]);
    }

    #[test]
    fn hosted_flags_are_validated_by_their_own_algorithm() {
        let e = refused(&["--also", "cubic:beta=1.5"]);
        assert!(e.contains("--also cubic: --beta must be a number in (0, 1), got 1.5"), "{e}");
        let e = refused(&["--also", "cubic:beta=abc"]);
        assert!(e.contains("--also cubic:") && e.contains("abc") && e.contains("--beta"), "{e}");
        let e = refused(&["--also", "fixed-window:beta=0.5"]);
        assert!(e.contains("fixed-window has no flag --beta; its flags:") && e.contains("--window"), "{e}");
        let e = refused(&["--also", "fixed-window:window=0"]);
        assert!(e.contains("--also fixed-window: --window must be"), "{e}");
        // The shared window bounds are each algorithm's own, with its defaults.
        let e = refused(&["--also", "cubic:min-cwnd-pkts=5:max-cwnd-pkts=2"]);
        assert!(e.contains("--also cubic: --max-cwnd-pkts (2) must be >= --min-cwnd-pkts (5)"), "{e}");
        let e = refused(&["--also", "cubic:ipc-name=x"]);
        assert!(e.contains("--ipc-name belongs to the whole daemon"), "{e}");
        let e = refused(&["--also", "nosuch"]);
        assert!(e.contains("unknown algorithm \"nosuch\"") && e.contains("cubic"), "{e}");
        let e = refused(&["--also", "reno"]);
        assert!(e.contains("reno is hosted twice"), "{e}");
        let e = refused(&["--also", "cubic", "--also", "cubic:beta=0.5"]);
        assert!(e.contains("cubic is hosted twice"), "{e}");
    }

    #[test]
    fn at_most_libccps_program_limit() {
        use crate::portus_glue::LIBCCP_MAX_PROGRAMS;
        let others: Vec<&str> = crate::suite::names().into_iter().filter(|n| *n != "reno").collect();
        assert!(others.len() >= LIBCCP_MAX_PROGRAMS, "the suite is large enough to exceed the limit");
        let mut argv = vec!["reno".to_string()];
        for n in &others[..LIBCCP_MAX_PROGRAMS - 1] {
            argv.extend(["--also".to_string(), n.to_string()]);
        }
        let cli = parse_from::<RenoSpec, _>(argv.clone()).expect("10 programs fit");
        assert_eq!(hosting::<RenoSpec>(&cli).unwrap().programs().len(), LIBCCP_MAX_PROGRAMS);
        argv.extend(["--also".to_string(), others[LIBCCP_MAX_PROGRAMS - 1].to_string()]);
        let e = match parse_from::<RenoSpec, _>(argv) {
            Ok(_) => panic!("11 programs must be refused"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("11 hosted algorithms install 11 fold programs; a libccp datapath holds at most 10"), "{e}");
    }

    #[test]
    fn also_is_not_an_algorithm_parameter() {
        let d = describe::<FixedWindowSpec>();
        assert!(d["flags"].as_array().unwrap().iter().all(|f| f["flag"] != "--also"));
    }
}
