//! The command line of `ccp-datapath` (clap): what the binary parses and
//! [`crate::daemon::run`] takes, in the library so tests can check it.

use std::path::PathBuf;

use clap::Parser;

/// eBPF struct_ops datapath for CCP: registers the TCP congestion control
/// `ccp` and lets a Portus algorithm (unix IPC) set each flow's cwnd and
/// pacing rate through libccp fold programs.
///
/// Flows opt in with `iperf3 -C ccp` or setsockopt(TCP_CONGESTION, "ccp").
/// Until the algorithm sets a cwnd/rate for a flow, while the algorithm is
/// away (its socket gone for --fallback-timeout-ms), and after this daemon
/// stops, the flow runs the kernel's own cubic inside BPF, so no flow is ever
/// frozen. The Portus algorithm can start before or after this daemon, and
/// be restarted: a new algorithm is told every live flow again and takes the
/// flows back once it commands. Needs root. Runs until SIGINT/SIGTERM, then
/// unregisters `ccp`.
#[derive(Parser, Debug)]
#[command(name = "ccp-datapath", version)]
pub struct Cli {
    /// Portus's unix datagram socket (Portus binds /tmp/ccp/<name>).
    #[arg(long, default_value = "/tmp/ccp/portus")]
    pub portus_socket: PathBuf,
    /// Directory for this datapath's own socket, bound as
    /// <bind-dir>/ccp-datapath-<pid> (Portus replies to it). Created mode
    /// 0700; an existing one must be owned by root and writable by no one
    /// else, or the datapath refuses to start (a root-owned one others can
    /// enter is tightened to 0700).
    #[arg(long, default_value = "/tmp/ccp")]
    pub bind_dir: PathBuf,
    /// Also accept datagrams from senders whose effective gid is this group
    /// (the bind dir and socket become mode 0770, group GID). Default: root only.
    #[arg(long, value_name = "GID")]
    pub allow_gid: Option<u32>,
    /// Congestion algorithm name sent in each flow's create message when no
    /// --rule matches; Portus matches it against CongAlg::name() (falls back
    /// to its default algorithm).
    #[arg(long, default_value = "reno")]
    pub congalg: String,
    /// Algorithm per flow: KEY=VALUE:ALGORITHM, first match wins, repeatable.
    /// Keys: dport=5201 or dport=5200-5209 (destination port), mark=0x10 or
    /// mark=0x10/0xff (SO_MARK, value/mask), cgroup=/sys/fs/cgroup/PATH (the
    /// socket's cgroup v2). One Portus daemon hosting the named algorithms
    /// serves them all (`ccp-algorithms NAME --also NAME2 ...`).
    #[arg(long = "rule", value_name = "KEY=VALUE:ALGORITHM")]
    pub rules: Vec<String>,
    /// When `ccp` is registered, atomically write this JSON file:
    /// {"ca":"ccp","pid":N,"socket":"<bound socket path>"}. Removed on exit.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
    /// At exit, atomically write this JSON file (temporary file beside it,
    /// then a rename) with the figures of the exit summary line: counters as
    /// integers, latencies in us as numbers, null where the line prints
    /// `-`; keys as the line names them, grouped as it groups them (bpf,
    /// outbox, user_ack_cost_us, event_to_command_us, kernel_fold,
    /// report_to_cwnd_us). Not written when the datapath fails to start.
    #[arg(long, value_name = "PATH")]
    pub stats_file: Option<PathBuf>,
    /// Fallback timeout, ms: after this long without the algorithm (its
    /// socket gone) or without this daemon (heartbeat not stamped), flows run
    /// the kernel's cubic until the algorithm is back.
    #[arg(long, alias = "stale-ms", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub fallback_timeout_ms: u64,
    /// With `--fold kernel`, the control guard's floor, ms: a flow whose
    /// program has not been commanded (no cwnd/rate update or program change
    /// from the algorithm, no new Cwnd or Rate set by the program itself;
    /// an evicted or always-aborting program commands nothing) for
    /// max(16 x the flow's SRTT, this) runs the kernel's cubic, logged at
    /// warn with the cause, until the algorithm commands it again.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub control_timeout_ms: u64,
    /// Force a ring-buffer wakeup at most every this many µs (other ACK
    /// events are picked up by the 1 ms poll or the next wakeup).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub wake_us: u64,
    /// With `--fold kernel`, the report window, ms: after a look that found
    /// reports this daemon looks again N ms later, and a report wakes it
    /// only when no such look is promised. A report waits at most about N
    /// ms; looks and forced wakeups (20-30 us of BPF time each) come at most
    /// 1000/N times a second each.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub report_wake_ms: u64,
    /// With `--fold kernel`: how long, us, a report of a flow that reports
    /// more than 4 times per RTT (a per-ACK program, or a timer short
    /// against the RTT) may wait for the daemon's next look, in place of the
    /// report window. Forced wakeups for such reports come at most once per
    /// this interval; per-RTT programs keep the window.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub report_prompt_us: u64,
    /// Where the algorithms' fold programs run: `kernel` (in BPF, per ACK;
    /// only reports reach user space) or `userspace` (every ACK goes to
    /// libccp in this daemon).
    #[arg(long, value_enum, default_value_t = FoldMode::Kernel)]
    pub fold: FoldMode,
    /// With `--fold kernel`: compile each installed program's main section
    /// to BPF (true) or interpret it per ACK (false). A program the compiler
    /// or the verifier refuses is interpreted either way (logged).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub fold_jit: bool,
    /// Tests only: drop this many flow-create records as if the ring buffer
    /// had been full (the flows must be found again from the flows map).
    #[arg(long, hide = true, default_value_t = 0)]
    pub test_drop_create_records: u32,
    /// More logging (-v: debug incl. each command applied, -vv: trace).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// `--fold`: where fold programs run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldMode {
    Kernel,
    Userspace,
}

