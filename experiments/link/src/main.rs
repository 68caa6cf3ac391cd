//! `ccplab-link`: an emulated bottleneck (its own namespaces and veths,
//! our own mm-link-style cells, frames moved by one thread per
//! direction, see `direct`) between a sender and a receiver network
//! namespace.
//!
//! ```text
//!  sender netns            emulator netns (rattan)                receiver netns
//!  10.1.1.1  --veth-->  [uplink: droptail queue drained by trace  --veth-->  10.2.1.1
//!                        opportunities] -> [one-way delay]
//!            <--veth--  [downlink: delay (+ optional trace)]     <--veth--
//! ```
//! The uplink (sender -> receiver, the data direction) is logged in
//! mahimahi's mm-link format (see `mmlog`).

mod batchio;
mod cell;
mod delay;
mod direct;
#[cfg(feature = "rattan")]
mod emulator;
mod flowdelay;
mod flowkey;
mod linkenv;
mod mmlog;
mod netns;
mod packet;
mod queue;
mod signals;
#[cfg(feature = "rattan")]
mod timer;

use std::{
    panic::AssertUnwindSafe,
    path::PathBuf,
    process::ExitCode,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant as StdInstant},
};

use anyhow::{bail, Context, Result};
use ccplab_traces::Trace;
use ccplab_util::fs::write_atomically;
use clap::Parser;
#[cfg(feature = "rattan")]
use rattan_core::{
    cells::StdPacket,
    metal::io::{af_packet::AfPacketDriver, common::InterfaceDriver},
};

#[cfg(feature = "rattan")]
use crate::{cell::LinkCell, delay::DelayCell, emulator::Emulator, flowdelay::FlowDelayCell};
use crate::{
    cell::{Clock0, LinkCellConfig, LinkCore, LinkStats},
    delay::DelayLine,
    flowdelay::{parse_ack_delay, FlowDelays},
    linkenv::LinkEnv,
    flowkey::PortSide,
    mmlog::{display_path, LogBase, LogHeader, MmLog},
    netns::{CleanupGuard, Namespaces},
    queue::QueueLimit,
    signals::Stop,
};

/// When trace replay (time 0 of the trace and of the log) starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum TraceStart {
    /// At the first IPv4 packet on the uplink (e.g. the client's SYN), so a
    /// step at trace time 0 meets the flow's start.
    FirstPacket,
    /// As soon as the link is up (before the ready file is written).
    Now,
}

/// Emulated bottleneck between two network namespaces, replaying a
/// mahimahi trace on the uplink (sender -> receiver) and logging it in
/// mahimahi's mm-link format.
///
/// Addresses: sender 10.1.1.1 in the sender namespace, receiver 10.2.1.1 in
/// the receiver namespace (rattan-env Isolated mode; fixed per namespace,
/// so parallel runs do not clash). Namespace names are unique per run and
/// written to --ready-file as JSON {"sender_netns", "receiver_netns",
/// "sender_ip", "receiver_ip", "pid", ...} once the link is up. Run e.g.
/// `ip netns exec <receiver_netns> iperf3 -s` and
/// `ip netns exec <sender_netns> iperf3 -c <receiver_ip> -C cubic`.
///
/// Stops on SIGINT/SIGTERM/SIGHUP, after --duration-s, or (--once) when a
/// trace has been played once; then processes
/// left inside its namespaces are stopped (see --keep-processes), the log
/// is flushed and moved into place, the ready file removed and every
/// namespace/veth deleted (also after errors or a panic in a worker).
/// Needs root. Exit status: 0 on a normal stop, 1 on error.
#[derive(Parser, Debug)]
#[command(name = "ccplab-link", version)]
// Exactly one queue limit: usage shows `<--queue-packets <N>|--queue-bytes <B>>`.
#[command(group(clap::ArgGroup::new("queue").required(true).args(["queue_packets", "queue_bytes"])))]
struct Args {
    /// Uplink (data direction) mahimahi trace: one line per 1500-byte
    /// delivery opportunity, ms timestamps, looping with period = last line.
    #[arg(long, value_name = "FILE")]
    uplink_trace: PathBuf,
    /// Downlink (ACK direction) trace; default: unlimited bandwidth.
    /// Its queue is unlimited (infinite), like mahimahi's default.
    #[arg(long, value_name = "FILE")]
    downlink_trace: Option<PathBuf>,
    /// Fixed one-way propagation delay, ms, applied in each direction
    /// (after the uplink queue, like `mm-delay MS mm-link ...`); RTT = 2 x MS
    /// plus queueing.
    #[arg(long, value_name = "MS")]
    one_way_delay_ms: u64,
    /// Uplink droptail limit in packets (waiting, excluding the one in
    /// transit). Give this or --queue-bytes.
    #[arg(long, value_name = "N")]
    queue_packets: Option<u64>,
    /// Uplink droptail limit in bytes (sizes include the 4-byte TUN header).
    /// Give this or --queue-packets.
    #[arg(long, value_name = "B")]
    queue_bytes: Option<u64>,
    /// Where to write the uplink mm-link log (moved into place at exit).
    #[arg(long, value_name = "FILE")]
    uplink_log: PathBuf,
    /// Per-flow attribution of the uplink log: one line per packet event of
    /// --uplink-log (`+`, `-`, `d` lines, same order), each the packet's
    /// receiver-side TCP/UDP port (its destination port; 0: none). The
    /// mahimahi log itself stays stock. Moved into place at exit.
    #[arg(long, value_name = "FILE")]
    flow_log: Option<PathBuf>,
    /// Extra one-way delay for one flow, on its ACK path: packets from
    /// receiver port PORT wait MS more ms (0..=10000) after the common
    /// --one-way-delay-ms, so that flow's RTT is 2 x one-way delay + MS.
    /// Repeatable, one per port.
    #[arg(long, value_name = "PORT=MS", value_parser = parse_ack_delay)]
    ack_delay: Vec<(u16, Duration)>,
    /// mm-link log of the downlink (only with --downlink-trace).
    #[arg(long, value_name = "FILE", requires = "downlink_trace")]
    downlink_log: Option<PathBuf>,
    /// JSON file written atomically once the link is up (removed at exit).
    #[arg(long, value_name = "FILE")]
    ready_file: PathBuf,
    /// Stop after this many seconds (default: run until a signal).
    #[arg(long, value_name = "S")]
    duration_s: Option<f64>,
    /// Play the traces once, as mahimahi's `mm-link --once`: nothing is
    /// delivered after a trace's last timestamp, and the link stops there
    /// (status 0; its log ends at the trace's end and processes inside its
    /// namespaces are stopped as at any stop). Default: the traces loop.
    #[arg(long)]
    once: bool,
    /// When trace replay and log time 0 start.
    #[arg(long, value_enum, default_value_t = TraceStart::FirstPacket)]
    trace_start: TraceStart,
    /// Do not stop processes still running inside the link's namespaces at
    /// exit (by default they get SIGTERM, then SIGKILL after 1 s, because
    /// a process inside keeps a deleted namespace and its veths alive).
    #[arg(long)]
    keep_processes: bool,
    /// Value of the log's `# base timestamp:` line: `zero` (event times are
    /// ms since time 0, mahimahi tools work; unix ms of time 0 is in
    /// `# init timestamp:`) or `unix` (unix ms of time 0).
    #[arg(long, value_enum, default_value_t = LogBase::Zero)]
    log_base: LogBase,
    /// How frames cross the emulator: `direct` (one thread per direction
    /// running receive, cells and send) or through rattan's runtime and
    /// routing (`batched`, `per-packet`; only in a build with the `rattan`
    /// feature, which is on by default).
    #[arg(long, value_enum, default_value_t = Io::Direct)]
    io: Io,
    /// Worker threads of the emulator's runtime (receive, cells, timers;
    /// `--io batched|per-packet` only: `direct` has one thread per direction).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
}

/// How frames cross between the veths and the emulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Io {
    /// One thread per direction: recvmmsg -> the direction's cells ->
    /// sendmmsg, no async runtime or task hops in between.
    Direct,
    /// rattan's runtime and routing between cells; batched receive
    /// (recvmmsg) on the workers, batched send (sendmmsg) on a thread per
    /// interface, which also carries the receiving namespace's TCP work.
    Batched,
    /// rattan's runtime and routing with rattan-core's AF_PACKET driver:
    /// one recvfrom and one sendto per frame, both on the workers.
    PerPacket,
}

/// Sender/receiver addresses of rattan-env's first veth pairs (Isolated mode).
#[derive(serde::Serialize)]
struct Ready {
    sender_netns: String,
    receiver_netns: String,
    emulator_netns: String,
    sender_ip: String,
    receiver_ip: String,
    pid: u32,
    uplink_log: PathBuf,
    trace_start: String,
}

fn main() -> ExitCode {
    // First, so a signal during setup already requests a clean stop.
    if let Err(e) = signals::install_stop_signals() {
        eprintln!("ccplab-link: error: cannot install signal handlers: {e}");
        return ExitCode::FAILURE;
    }
    signals::install_panic_hook();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CCPLAB_LINK_LOG")
                // rattan_core::control warns when a Start/FirstPacket notice
                // finds no listener: none of our cells waits for one.
                .unwrap_or_else(|_| {
                    "warn,netlink_packet_route=error,rattan_core::control=error,ccplab_link=info".into()
                }),
        )
        .init();
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccplab-link: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn queue_limit(args: &Args) -> Result<QueueLimit> {
    match (args.queue_packets, args.queue_bytes) {
        (Some(0), _) => bail!("--queue-packets must be >= 1"),
        (_, Some(b)) if b < 1504 => bail!("--queue-bytes {b} cannot hold one 1504-byte packet"),
        (Some(n), None) => Ok(QueueLimit::Packets(n)),
        (None, Some(b)) => Ok(QueueLimit::Bytes(b)),
        _ => bail!("give exactly one of --queue-packets or --queue-bytes"),
    }
}

fn run(args: Args) -> Result<()> {
    // Validate everything before creating any namespace.
    let uplink = Trace::read(&args.uplink_trace)?;
    let downlink = args.downlink_trace.as_ref().map(Trace::read).transpose()?;
    let limit = queue_limit(&args)?;
    let duration = match args.duration_s {
        Some(s) if !(s.is_finite() && s > 0.0) => bail!("--duration-s {s} must be > 0"),
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let mut ports = args.ack_delay.iter().map(|(p, _)| *p).collect::<Vec<_>>();
    ports.sort_unstable();
    if let Some(w) = ports.windows(2).find(|w| w[0] == w[1]) {
        bail!("--ack-delay: port {} given twice", w[0]);
    }
    let make_log = |trace: &PathBuf, path: &PathBuf, queue: String, flow_log: Option<PathBuf>| {
        MmLog::create(LogHeader {
            trace_path: display_path(trace),
            log_path: path.clone(),
            command_line: command_line.clone(),
            queue,
            base: args.log_base,
            flow_log_path: flow_log,
        })
        .with_context(|| format!("cannot create log {}", path.display()))
    };
    let up_log = make_log(
        &args.uplink_trace,
        &args.uplink_log,
        limit.describe(),
        args.flow_log.clone(),
    )?;
    let down_log = match (&args.downlink_trace, &args.downlink_log) {
        (Some(t), Some(p)) => match make_log(t, p, QueueLimit::Infinite.describe(), None) {
            Ok(l) => Some(l),
            Err(e) => {
                up_log.abandon();
                return Err(e);
            }
        },
        _ => None,
    };
    let logs: Vec<MmLog> = [Some(up_log.clone()), down_log.clone()]
        .into_iter()
        .flatten()
        .collect();

    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let plan = LinkPlan {
            uplink: &uplink,
            downlink: downlink.as_ref(),
            limit,
            duration,
            up_log: up_log.clone(),
            down_log: down_log.clone(),
        };
        run_link(&args, plan)
    }));
    let _ = std::fs::remove_file(&args.ready_file);
    let link_started = up_log.started();
    for log in &logs {
        if link_started || result.as_ref().is_ok_and(|r| r.is_ok()) {
            if let Err(e) = log.finish(mmlog::unix_ms_now()) {
                tracing::error!("cannot save log {}: {e}", log.path().display());
            }
        } else {
            log.abandon();
        }
    }
    match result {
        Ok(r) => r,
        Err(_) => bail!("the link panicked (namespaces were removed)"),
    }
}

/// What the emulator is to do, checked and prepared from the command line.
struct LinkPlan<'a> {
    uplink: &'a Trace,
    downlink: Option<&'a Trace>,
    limit: QueueLimit,
    duration: Option<Duration>,
    up_log: MmLog,
    down_log: Option<MmLog>,
}

/// The uplink cell's settings: the trace's delivery opportunities, the
/// queue limit, the log (flows keyed by destination port) and `--once`.
fn uplink_config(
    args: &Args,
    uplink: &Trace,
    limit: QueueLimit,
    up_log: &MmLog,
    trace_ended: &Arc<AtomicBool>,
) -> LinkCellConfig {
    LinkCellConfig {
        schedule: uplink.timestamps().into(),
        limit,
        sets_clock0: args.trace_start == TraceStart::FirstPacket,
        log: Some(up_log.clone()),
        key_side: PortSide::Destination,
        // Fault injection used by the cleanup test only.
        inject_panic: std::env::var_os("CCPLAB_LINK_FAULT").is_some_and(|v| v == "panic-on-packet"),
        once: args.once,
        trace_ended: trace_ended.clone(),
    }
}

fn run_link(args: &Args, plan: LinkPlan<'_>) -> Result<()> {
    let outcome = match args.io {
        Io::Direct => run_direct(args, plan),
        #[cfg(feature = "rattan")]
        Io::Batched => run_link_on::<batchio::BatchDriver>(args, plan),
        #[cfg(feature = "rattan")]
        Io::PerPacket => run_link_on::<AfPacketDriver>(args, plan),
        #[cfg(not(feature = "rattan"))]
        Io::Batched | Io::PerPacket => bail!(
            "--io {} runs on rattan's runtime, which this ccplab-link was built without \
             (its `rattan` feature, on by default: `cargo build --release -p ccplab-link`)",
            clap::ValueEnum::to_possible_value(&args.io).map_or_else(String::new, |v| v.get_name().to_owned())
        ),
    };
    if args.io != Io::PerPacket {
        let c = batchio::counters();
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let (received, sent) = (get(&c.received), get(&c.sent));
        let (rc, sc) = (get(&c.recv_calls), get(&c.send_calls));
        tracing::info!(
            received,
            sent,
            frames_per_recv = received as f64 / rc.max(1) as f64,
            frames_per_send = sent as f64 / sc.max(1) as f64,
            kernel_drops = get(&c.kernel_drops),
            tx_drops = get(&c.tx_drops),
            truncated = get(&c.truncated),
            "frames"
        );
        if get(&c.kernel_drops) + get(&c.tx_drops) + get(&c.truncated) > 0 {
            tracing::warn!("frames were lost outside the emulated queue (see the counts above)");
        }
    }
    outcome
}

/// The direct datapath: our own namespaces and veths (`linkenv`), and one
/// thread per direction (see `direct`).
fn run_direct(args: &Args, plan: LinkPlan<'_>) -> Result<()> {
    let env = LinkEnv::create().context("cannot create the emulator namespaces (root needed)")?;
    // Declared after env: dropped (cleanup by name) after it.
    let ns = env.names.clone();
    let _cleanup = CleanupGuard(ns.clone());
    let stop = direct::StopFd::new().context("eventfd")?;
    let mut threads = Vec::new();
    let outcome = serve_direct(args, &env, &ns, plan, &stop, &mut threads);
    // processes inside are stopped while the link still forwards (their
    // last packets, e.g. a FIN, can pass)
    if !args.keep_processes {
        netns::stop_processes_inside(&ns);
    }
    stop.trigger();
    for t in threads {
        // a panicked direction has already stopped the link (SIGUSR1)
        let _ = t.join();
    }
    drop(env);
    outcome
}

fn serve_direct(
    args: &Args,
    env: &LinkEnv,
    ns: &Namespaces,
    plan: LinkPlan<'_>,
    stop: &direct::StopFd,
    threads: &mut Vec<std::thread::JoinHandle<()>>,
) -> Result<()> {
    use direct::{Pipeline, Stage, TxPort};
    let LinkPlan {
        uplink,
        downlink,
        limit,
        duration,
        up_log,
        down_log,
    } = plan;
    let clock0 = Clock0::default();
    let trace_ended = Arc::new(AtomicBool::new(false));
    let up_stats = Arc::new(LinkStats::default());
    let delay = Duration::from_millis(args.one_way_delay_ms);
    let left = env.left_inner.clone();
    let right = env.right_inner.clone();
    // The sockets belong to the namespace their creator is in: make them in
    // a thread that enters the emulator's.
    let rattan_ns = env.emulator_ns.clone();
    let sockets = std::thread::scope(|s| {
        s.spawn(|| -> std::io::Result<_> {
            let _in = rattan_env::netns::NetNsGuard::new(rattan_ns)
                .map_err(|e| std::io::Error::other(format!("cannot enter the emulator namespace: {e}")))?;
            Ok((
                direct::rx_socket(left.index as i32)?,
                direct::tx_socket(left.index as i32)?,
                direct::rx_socket(right.index as i32)?,
                direct::tx_socket(right.index as i32)?,
            ))
        })
        .join()
        .expect("socket setup does not panic")
    })
    .context("cannot open the veths' packet sockets")?;
    let (rx_left, tx_left, rx_right, tx_right) = sockets;

    let up_cfg = uplink_config(args, uplink, limit, &up_log, &trace_ended);
    let up = Pipeline::new(vec![
        Stage::Link(LinkCore::new(up_cfg, clock0.clone(), up_stats.clone())),
        Stage::Delay(DelayLine::new(delay)),
    ]);
    // The ACK path: delay [-> per-flow delay] [-> downlink trace].
    let mut down_stages = vec![Stage::Delay(DelayLine::new(delay))];
    if !args.ack_delay.is_empty() {
        down_stages.push(Stage::FlowDelay(FlowDelays::new(&args.ack_delay)));
    }
    if let Some(down) = downlink {
        let cfg = LinkCellConfig {
            schedule: down.timestamps().into(),
            limit: QueueLimit::Infinite,
            sets_clock0: false,
            log: down_log.clone(),
            key_side: PortSide::Source,
            inject_panic: false,
            once: args.once,
            trace_ended: trace_ended.clone(),
        };
        down_stages.push(Stage::Link(LinkCore::new(cfg, clock0.clone(), Arc::new(LinkStats::default()))));
    }
    let down = Pipeline::new(down_stages);
    let to_right = TxPort {
        fd: tx_right,
        ifindex: right.index as i32,
        dst: right.peer().mac_addr.bytes(),
        src: right.mac_addr.bytes(),
    };
    let to_left = TxPort {
        fd: tx_left,
        ifindex: left.index as i32,
        dst: left.peer().mac_addr.bytes(),
        src: left.mac_addr.bytes(),
    };
    for (name, rx, tx, pipe) in [("up", rx_left, to_right, up), ("down", rx_right, to_left, down)] {
        let stop_fd = stop.raw();
        threads.push(
            std::thread::Builder::new()
                .name(format!("link-{name}"))
                .spawn(move || {
                    if let Err(e) = direct::run_direction(rx, tx, pipe, stop_fd) {
                        // the panic hook stops the link (SIGUSR1)
                        panic!("the {name} direction failed: {e}");
                    }
                })
                .context("cannot start a direction thread")?,
        );
    }
    if args.trace_start == TraceStart::Now {
        let t0 = clock0.set(tokio::time::Instant::now());
        for log in [Some(&up_log), down_log.as_ref()].into_iter().flatten() {
            log.start(Clock0::unix_ms_of(t0));
        }
    }
    let ready = Ready {
        sender_netns: ns.sender.clone(),
        receiver_netns: ns.receiver.clone(),
        emulator_netns: ns.emulator.clone(),
        sender_ip: env.sender_ip().to_string(),
        receiver_ip: env.receiver_ip().to_string(),
        pid: std::process::id(),
        uplink_log: display_path(&args.uplink_log),
        trace_start: format!("{:?}", args.trace_start),
    };
    announce_and_wait(args, ready, duration, &trace_ended, &up_stats)
}

/// Writes the ready file, then waits for a stop (signal, --duration-s, the
/// end of a trace played once, a worker panic).
fn announce_and_wait(
    args: &Args,
    ready: Ready,
    duration: Option<Duration>,
    trace_ended: &AtomicBool,
    up_stats: &LinkStats,
) -> Result<()> {
    let json = serde_json::to_string_pretty(&ready)?;
    write_atomically(&args.ready_file, |w| writeln!(w, "{json}"))
        .with_context(|| format!("cannot write ready file {}", args.ready_file.display()))?;
    tracing::info!(
        sender_netns = %ready.sender_netns,
        receiver_netns = %ready.receiver_netns,
        receiver_ip = %ready.receiver_ip,
        "link up"
    );

    let started = StdInstant::now();
    let ended = || trace_ended.load(Ordering::SeqCst);
    let stop =
        signals::wait_for_stop(|| ended() || duration.is_some_and(|d| started.elapsed() >= d));
    let stop = if stop == Stop::Duration && ended() {
        Stop::TraceEnd
    } else {
        stop
    };
    tracing::info!(
        ?stop,
        arrivals = up_stats.arrivals.load(Ordering::Relaxed),
        departures = up_stats.departures.load(Ordering::Relaxed),
        drops = up_stats.drops.load(Ordering::Relaxed),
        bypassed = up_stats.bypassed.load(Ordering::Relaxed),
        "stopping"
    );
    match stop {
        Stop::WorkerPanicked => bail!("a worker thread panicked"),
        Stop::Signal(_) | Stop::Duration | Stop::TraceEnd => Ok(()),
    }
}

#[cfg(feature = "rattan")]
fn run_link_on<D>(args: &Args, plan: LinkPlan<'_>) -> Result<()>
where
    D: InterfaceDriver<Packet = StdPacket>,
    D::Sender: Send + Sync,
    D::Receiver: Send,
{
    // Declared before radix, so dropped after it: a last cleanup by name,
    // also when unwinding.
    let _cleanup: CleanupGuard;
    let mut radix = Emulator::<D>::new(args.workers as usize)
        .context("cannot create the emulator's namespaces (root needed)")?;
    let ns = radix.env().names.clone();
    _cleanup = CleanupGuard(ns.clone());
    let outcome = serve(args, &mut radix, &ns, plan);
    if !args.keep_processes {
        netns::stop_processes_inside(&ns);
    }
    // a panicked worker surfaces here; the names are removed regardless
    if let Err(e) = radix.stop() {
        tracing::error!("emulator teardown: {e:#}; deleting namespaces by name");
    }
    outcome
}

#[cfg(feature = "rattan")]
fn serve<D>(
    args: &Args,
    radix: &mut Emulator<D>,
    ns: &Namespaces,
    plan: LinkPlan<'_>,
) -> Result<()>
where
    D: InterfaceDriver<Packet = StdPacket>,
    D::Sender: Send + Sync,
    D::Receiver: Send,
{
    let LinkPlan {
        uplink,
        downlink,
        limit,
        duration,
        up_log,
        down_log,
    } = plan;
    let err = |e: rattan_core::error::Error| anyhow::anyhow!("rattan: {e}");
    let clock0 = Clock0::default();
    let trace_ended = Arc::new(AtomicBool::new(false));
    let up_stats = Arc::new(LinkStats::default());
    let delay = Duration::from_millis(args.one_way_delay_ms);

    let up_cfg = uplink_config(args, uplink, limit, &up_log, &trace_ended);
    let (c0, st) = (clock0.clone(), up_stats.clone());
    radix
        .build_cell("up".into(), move |rt| {
            let _g = rt.enter();
            LinkCell::<StdPacket>::new(up_cfg, c0, st)
        })
        .map_err(err)?;
    radix
        .build_cell("up_delay".into(), move |rt| {
            let _g = rt.enter();
            DelayCell::<StdPacket>::new(delay)
        })
        .map_err(err)?;
    radix
        .build_cell("down_delay".into(), move |rt| {
            let _g = rt.enter();
            DelayCell::<StdPacket>::new(delay)
        })
        .map_err(err)?;
    radix.link_cell("left".into(), "up".into());
    radix.link_cell("up".into(), "up_delay".into());
    radix.link_cell("up_delay".into(), "right".into());
    // The ACK path: right -> down_delay [-> ack_delay] [-> down] -> left.
    let mut down_tail = "down_delay".to_string();
    if !args.ack_delay.is_empty() {
        let extra = args.ack_delay.clone();
        radix
            .build_cell("ack_delay".into(), move |rt| {
                let _g = rt.enter();
                FlowDelayCell::<StdPacket>::new(&extra)
            })
            .map_err(err)?;
        radix.link_cell("down_delay".into(), "ack_delay".into());
        down_tail = "ack_delay".to_string();
    }
    if let Some(down) = downlink {
        let cfg = LinkCellConfig {
            schedule: down.timestamps().into(),
            limit: QueueLimit::Infinite,
            sets_clock0: false,
            log: down_log.clone(),
            key_side: PortSide::Source,
            inject_panic: false,
            once: args.once,
            trace_ended: trace_ended.clone(),
        };
        let c0 = clock0.clone();
        radix
            .build_cell("down".into(), move |rt| {
                let _g = rt.enter();
                LinkCell::<StdPacket>::new(cfg, c0, Arc::new(LinkStats::default()))
            })
            .map_err(err)?;
        radix.link_cell("right".into(), "down_delay".into());
        radix.link_cell(down_tail, "down".into());
        radix.link_cell("down".into(), "left".into());
    } else {
        radix.link_cell("right".into(), "down_delay".into());
        radix.link_cell(down_tail, "left".into());
    }
    radix.spawn_rattan().map_err(err)?;
    radix.start_rattan().map_err(err)?;
    if args.trace_start == TraceStart::Now {
        let t0 = clock0.set(tokio::time::Instant::now());
        for log in [Some(&up_log), down_log.as_ref()].into_iter().flatten() {
            log.start(Clock0::unix_ms_of(t0));
        }
    }

    let ready = Ready {
        sender_netns: ns.sender.clone(),
        receiver_netns: ns.receiver.clone(),
        emulator_netns: ns.emulator.clone(),
        sender_ip: radix.env().sender_ip().to_string(),
        receiver_ip: radix.env().receiver_ip().to_string(),
        pid: std::process::id(),
        uplink_log: display_path(&args.uplink_log),
        trace_start: format!("{:?}", args.trace_start),
    };
    announce_and_wait(args, ready, duration, &trace_ended, &up_stats)
}
