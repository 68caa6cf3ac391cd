"""What the datapath benchmark runs: its modes, flow counts, loads, the algorithm and its settings,
the namespaces' defaults, the order of the runs and each run's CPU window."""

from __future__ import annotations

from typing import Sequence

from ..binaries import REPO_ROOT
from ..errors import CcplabError

MODES = ("kernel", "bpf-cubic", "ccp-kernel-fold", "ccp-kernel-interp", "ccp-userspace-fold")
"""Modes in the order they alternate; ``kernel`` is the reference of every ratio."""
REFERENCE_MODE = "bpf-cubic"
"""Not ccp: kernel cubic behind the smallest BPF struct_ops (datapath/bench/kfunc_cubic.bpf.c, every op
one of tcp_cubic.c's kfuncs), the floor of BPF time per ACK that any BPF congestion control pays here."""
REFERENCE_SOURCE = REPO_ROOT / "datapath" / "bench" / "kfunc_cubic.bpf.c"
REFERENCE_CA = "kfcubic"  # its tcp_congestion_ops name

DEFAULT_MODES = ("kernel", "bpf-cubic", "ccp-kernel-fold", "ccp-userspace-fold")
"""What runs without ``--modes``; ``ccp-kernel-interp`` (``--fold kernel --fold-jit false``: fold
programs interpreted in BPF rather than compiled) is there for A/B runs of the compiler."""
FOLD_OF_MODE = {"ccp-kernel-fold": "kernel", "ccp-kernel-interp": "kernel", "ccp-userspace-fold": "userspace"}
DATAPATH_ARGS_OF_MODE = {
    "ccp-kernel-fold": ["--fold", "kernel"],
    "ccp-kernel-interp": ["--fold", "kernel", "--fold-jit", "false"],
    "ccp-userspace-fold": ["--fold", "userspace"],
}
"""ccp-datapath's flags per mode (the rest are common)."""
TARGET_MODE = "ccp-kernel-fold"
FLOWS = (1, 10, 100)
PACED_TOTAL_MBPS = 1000.0
ALGORITHM = "cubic"
# cubic with its defaults (`--pacing kernel`: no rate commanded; ccp-datapath paces a socket
# only where it came paced, and in these namespaces none does, see NAMESPACE_DEFAULT_CA).
# Commanding the kernel's rate once per report instead (`--pacing report`) capped one veth
# flow at 8.1 Gbit/s against kernel cubic's 21.5.
# A 10 ms report floor (`--min-report-interval-us`, default 0): at veth RTTs (40-800 us)
# cubic's four reports per RTT are a report per ACK, each a Portus wakeup and a command
# wakeup (~45 us each here). 1 flow paced: own CPU 1.27x kernel cubic's without it, 0.98x
# with it.
ALGORITHM_PARAMS: dict[str, str] = {"min-report-interval-us": "10000"}

# The namespaces' default congestion control: one that leaves pacing off, as cubic on a stock
# host, so neither kernel cubic nor ccp inherits the TCP-internal pacing bbr (this host's
# default, which new namespaces inherit) leaves on a socket that iperf3 then switches. reno,
# since a namespace may only default to a CA in net.ipv4.tcp_allowed_congestion_control
# ("reno bbr" here; setting cubic fails with EPERM). Inherited, both are paced at 120 % of
# cwnd/SRTT.
NAMESPACE_DEFAULT_CA = "reno"
NAMESPACE_SYSCTLS = (
    # every run starts from the same state: no ssthresh/cwnd cached from the previous run's
    # connections to the same address (per namespace, gone with it)
    ("net.ipv4.tcp_no_metrics_save", "1"),
    ("net.ipv4.tcp_congestion_control", NAMESPACE_DEFAULT_CA),
)

# The algorithm's per-report log line (target ccp::report) is the lab's instrumentation, not
# congestion control: at 100 flows x ~80 reports/s its formatting and one write() per line cost
# about as much CPU as the reports themselves. Off here, as a deployment would run it.
ALGORITHM_LOG_FILTER = "info,ccp::report=off"


LOADS = {"full": False, "paced": True}
"""``--loads`` names: full speed or paced to PACED_TOTAL_MBPS in total (Measurement.paced)."""


def run_plan(flows: Sequence[int], reps: int, modes: Sequence[str] = DEFAULT_MODES,
             loads: Sequence[str] = tuple(LOADS)) -> list[tuple[int, bool, int, str]]:
    """The order of runs: (flows, paced, rep, mode) for each flow count and load (``LOADS`` names,
    full before paced); per configuration the modes alternate, ``reps`` times, every second
    repetition in reverse order (A B, B A, A B, ...): a mode that always ran right after another
    would carry whatever that one leaves behind (its teardown, a warm or cold server) into every
    ratio, in one direction."""
    ordered = [mode for mode in MODES if mode in modes]
    return [(n, paced, rep, mode) for n in flows for paced in (False, True) if paced in {LOADS[x] for x in loads}
            for rep in range(1, reps + 1) for mode in (ordered if rep % 2 else ordered[::-1])]


def paced_stream_rate(flows: int, total_mbps: float = PACED_TOTAL_MBPS) -> str:
    """iperf3 ``-b`` value per stream so ``flows`` streams total ``total_mbps`` (bit/s, integer)."""
    return str(int(total_mbps * 1e6 / flows))


OMIT_S = 2
"""Default seconds at the start of each client run left out of its CPU figures (as iperf3's
``--omit`` leaves them out of its own): the connections' setup (at 100 flows, 200 flow creations
for ccp: iperf3 -C sets the receiver's sockets too) and slow start. Over whole 8 s runs kernel
cubic's own CPU at 100 paced flows varied by 9.5 % (coefficient of variation, 6 runs), over the
window 2-7 s of the same runs by 5.4 %, and by 1.9 % over whole 20 s runs: the noise sits in the
start (docs/NOTES.md)."""
WINDOW_TAIL_S = 1
"""Seconds before the client's end where the steady window closes (the streams' teardown)."""


def steady_window(duration_s: float, omit_s: float) -> tuple[float, float]:
    """(start, end) of the CPU window in seconds after the client starts: ``omit_s`` to
    ``duration_s - WINDOW_TAIL_S``. Raises CcplabError when that leaves less than a second."""
    end = duration_s - WINDOW_TAIL_S
    if end - omit_s < 1:
        raise CcplabError(f"--duration-s {duration_s:g} with --omit-s {omit_s:g} leaves a CPU window of "
                          f"{end - omit_s:g} s; it needs at least 1 s (duration >= omit + {WINDOW_TAIL_S + 1})")
    return float(omit_s), float(end)
