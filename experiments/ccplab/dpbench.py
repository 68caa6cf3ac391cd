"""Datapath benchmark: ``make bench`` runs ``python -m ccplab.dpbench``.

What it measures, on this host, in one run:

* a veth pair (MTU 1500, the kernel's default offloads: TSO/GSO on) between
  two network namespaces it creates, iperf3 flows from one to the other;
* four modes ALTERNATING back to back for every configuration (so drift of a
  shared machine hits all of them alike; every second repetition in reverse
  order, so no mode always follows the same one, ``run_plan``): ``kernel`` (the kernel's cubic),
  ``bpf-cubic`` (the kernel's cubic behind the smallest BPF struct_ops,
  datapath/bench/kfunc_cubic.bpf.c, compiled with clang and registered with
  bpftool for each run: the floor of BPF time per ACK, its programs' time per
  ``pkts_acked`` call), ``ccp-kernel-fold`` (``ccp-datapath --fold kernel`` + the Portus
  ``ccp-algorithms cubic``) and ``ccp-userspace-fold`` (``--fold userspace``:
  libccp folds every ACK in user space), each ``--reps`` times; ``--modes`` can add
  ``ccp-kernel-interp`` (``--fold kernel --fold-jit false``: the fold programs interpreted in
  BPF instead of compiled to it), to measure what the compiler saves;
* 1, 10 and 100 parallel flows (``iperf3 -P``), at full speed and paced to
  1 Gbit/s in total. Pacing is iperf3's own ``-b RATE`` per stream
  (1 Gbit/s / flows), not ``--fq-rate``: ``--fq-rate`` is SO_MAX_PACING_RATE,
  which only caps the rate the congestion control sets, at a level of its
  own. ``-b`` limits the application's writes the same way under every
  congestion control, which "equal paced throughput" needs.

Per run it records: throughput (iperf3 receiver, Gbit/s); busy CPU of the
host's cores over the run's steady window (``--omit-s`` seconds after the
client starts, 2 by default, to 1 s before its end: connection setup, flow
creation and slow start left out, as iperf3's ``--omit`` leaves them out of
its own figures; /proc/stat: everything but idle and iowait, as a fraction of
all cores, 1.0 = both cores busy) and, since the machine may be shared, the
part of it the run itself used ("own": CPU time of the iperf3 client and
server, ccp-datapath, the algorithm and the ksoftirqd threads
(/proc/PID/task/*/schedstat, ns; not /proc/PID/stat's utime+stime, which come
in whole 10 ms ticks) over the same window and on the same scale;
ccp-datapath + algorithm alone as "dmn"); "own" and "dmn" over the client's
whole lifetime too (``own_cpu_run``, ``daemons_cpu_run``; the client's part
from getrusage of the reaped child), which counts what each flow's setup and
teardown cost.
schedstat gives a task's scheduler run time (exact, ns), while
/proc/stat's busy share is sampled by the tick (HZ 250 here): a paced, 1 ms
periodic load can alias with the tick, so "own" can exceed "busy". Without
CONFIG_IRQ_TIME_ACCOUNTING (this kernel) a softirq runs on the time of the
task it interrupts: the veth's packet processing runs in the softirq of the
sending task (or in ksoftirqd) and is counted; softirq work done inside
another task or the idle task is not. For ccp, the BPF
cost per ACK (``kernel.bpf_stats_enabled=1`` during the benchmark, restored
after; ``run_time_ns / run_cnt`` of the datapath's ``ccp_cong_control``
from ``bpftool -j prog show``, and the time of its struct_ops programs
that run per ACK, i.e. all but ``init`` and ``release``, per ``cong_control`` call; the JSON also
has each program's share, those two included); messages crossing from the kernel to user
space (the datapath's exit summary: per-ACK snapshots ``invokes`` +
``unknown_flow_acks`` in ``--fold userspace``, ``kernel fold: reports=`` in
``--fold kernel``; create/release/state events are not counted) per second
per flow and per RTT per flow (RTT: mean of iperf3's per-stream sender
``mean_rtt``); and the latency from kernel record to command: ``report->cwnd
us: p50 p99`` of the summary in ``--fold kernel`` (n/a while the datapath does
not log it) and ``event->command us: p50 p99`` in ``--fold userspace``.

Targets for ``--fold kernel``, shown as ratios with PASS/MISS (medians over the
repetitions; a ratio is the median of the per-repetition ratios, see ``evaluate_targets``):
throughput >= 0.97x kernel cubic at full speed at 1, 10 and 100 flows; own
CPU <= 1.05x kernel cubic's when paced (and only when the paced throughputs
are equal within 3%: otherwise MISS); BPF time per ACK (all programs) under
1.5 us; at most 2 user-space messages per RTT per flow. Beside each median: its 95% bootstrap
interval over the repetitions (``median_interval``, scipy.stats.bootstrap), and a verdict whose
interval reaches across the bound says so: on a VM whose repetitions spread by +-15% such a
PASS or MISS is the noise's to decide. ``--from JSON`` prints the tables of a run saved with
``--json`` again (no root, nothing run).

Needs root, kernel BTF, iperf3, ip, ss, bpftool, clang (``bpf-cubic``) and the built binaries
(``cargo build --release -p ccp-datapath -p ccp-algorithms``). Runs under the
host's netlab lock (``flock /tmp/ccplab-netlab.lock``); started without it,
it takes the lock itself. Everything it starts, the namespaces and the
sysctl are undone on exit, on an error and on SIGINT/SIGTERM/SIGHUP;
namespaces of a benchmark that was SIGKILLed are removed by the next one.
Exit status 0 after printing (a MISS is a figure, not a failure), 2 when the
machine cannot run it (the message names what is missing), 130 when
interrupted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import psutil

from . import registry
from .binaries import REPO_ROOT, bin_dir, project_binary, system_binary
from .cca import DATAPATH_CA, PORTUS_SOCKET, kernel_ccs
from .errors import CcplabError
from .plumbing.locks import netlab_lock
from .plumbing.netns import (VethPair, listening, namespaces_matching, netns_exec, remove_namespace,
                             veth_namespaces, wait_no_connections)
from .plumbing.processes import READY_TIMEOUT_S, Daemon, appears, child_env, run_tool, started, supervised

MODES = ("kernel", "bpf-cubic", "ccp-kernel-fold", "ccp-kernel-interp", "ccp-userspace-fold")
"""Modes in the order they alternate; ``kernel`` is the reference of every ratio."""
REFERENCE_MODE = "bpf-cubic"
"""Not ccp: kernel cubic behind the smallest BPF struct_ops (datapath/bench/kfunc_cubic.bpf.c, every op
one of tcp_cubic.c's kfuncs), the floor of BPF time per ACK that any BPF congestion control pays here."""
REFERENCE_SOURCE = REPO_ROOT / "datapath" / "bench" / "kfunc_cubic.bpf.c"
REFERENCE_CA = "kfcubic"  # its tcp_congestion_ops name
REFERENCE_PER_ACK_PROG = "kc_pkts_acked"  # runs once per ACK that acks data (its run count is the ACKs)
REFERENCE_PER_FLOW_PROGS = ("kc_init",)
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

# The targets (see the module docstring).
# The algorithm's per-report log line (target ccp::report) is the lab's instrumentation, not
# congestion control: at 100 flows x ~80 reports/s its formatting and one write() per line cost
# about as much CPU as the reports themselves. Off here, as a deployment would run it.
ALGORITHM_LOG_FILTER = "info,ccp::report=off"
MIN_THROUGHPUT_RATIO = 0.97
MAX_CPU_RATIO = 1.05
EQUAL_THROUGHPUT_TOLERANCE = 0.03  # "equal paced throughput": within 3%
MAX_BPF_NS_PER_ACK = 1500.0
MAX_MSGS_PER_RTT = 2.0

BPF_STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")
PROC_STAT = Path("/proc/stat")
NS_PREFIX = "dpbench"
NS_NAME = re.compile(rf"^{NS_PREFIX}-(snd|rcv)-(\d+)$")
SENDER_IP, RECEIVER_IP, PREFIX_LEN = "10.203.0.1", "10.203.0.2", 24
MTU = 1500
IPERF_PORT = 5201
CLIENT_GRACE_S = 30.0
CONG_CONTROL_PROG = "ccp_cong_contro"  # prefix: bpftool shows the BTF name or the kernel's 15-character one
PER_FLOW_PROGS = ("ccp_init", "ccp_release")
"""Programs that run once per connection, not per ACK: left out of the per-ACK figure. Each wakes
the daemon (a forced ring-buffer wakeup, 7-20 us here), and iperf3 -C sets the congestion control
on the receiver's sockets too, so a short 100-flow run spreads ~200 of them over few ACKs."""


# ---------------------------------------------------------------- pure parts

@dataclass(frozen=True)
class CpuCounters:
    """Clock ticks from the aggregate ``cpu`` line of /proc/stat: busy (all but idle and iowait) and total."""

    busy: int
    total: int


def cpu_counters(proc_stat: str) -> CpuCounters:
    """Parse /proc/stat text (proc(5): ``cpu user nice system idle iowait irq softirq steal guest
    guest_nice``). guest and guest_nice are already inside user and nice, so they are not added again.

    Raises CcplabError when there is no aggregate ``cpu`` line or it has fewer than 4 numbers.
    """
    for line in proc_stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            try:
                values = [int(v) for v in fields[1:]]
            except ValueError:
                raise CcplabError(f"/proc/stat: non-numeric cpu line {line!r}") from None
            if len(values) < 4:
                raise CcplabError(f"/proc/stat: cpu line has {len(values)} fields, need at least 4: {line!r}")
            total = sum(values[:8])  # user..steal
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            return CpuCounters(busy=total - idle, total=total)
    raise CcplabError("/proc/stat has no aggregate 'cpu' line")


def busy_fraction(before: CpuCounters, after: CpuCounters) -> float:
    """Busy share of all cores between two samples, 0..1 (1.0 = every core busy the whole time).

    Raises CcplabError when no time passed (equal totals) or the counters went backwards.
    """
    total = after.total - before.total
    busy = after.busy - before.busy
    if total <= 0 or busy < 0:
        raise CcplabError(f"/proc/stat counters did not advance (total {before.total} -> {after.total})")
    return busy / total


def own_fraction(before: CpuCounters, after: CpuCounters, process_ticks: float) -> float:
    """The run's own share of all cores: ``process_ticks`` (CPU ticks its processes used between the
    two /proc/stat samples) over the total ticks between them (the scale of ``busy_fraction``)."""
    total = after.total - before.total
    if total <= 0:
        raise CcplabError(f"/proc/stat counters did not advance (total {before.total} -> {after.total})")
    return process_ticks / total


def run_time_ns(schedstat: str) -> int:
    """Time on CPU (ns) of a /proc/PID/task/TID/schedstat line: its first field, the task's
    sum_exec_runtime (the kernel's Documentation/scheduler/sched-stats.rst).

    Raises CcplabError when the line is not of that form.
    """
    fields = schedstat.split()
    try:
        if len(fields) != 3:
            raise ValueError
        return int(fields[0])
    except ValueError:
        raise CcplabError(f"not a /proc/PID/task/TID/schedstat line: {schedstat[:80]!r}") from None


@dataclass(frozen=True)
class ProgCost:
    """One BPF program's cumulative cost while ``kernel.bpf_stats_enabled`` was 1."""

    name: str
    run_time_ns: int
    run_cnt: int


def _struct_ops_progs(bpftool_json: str) -> list[dict]:
    """The ``struct_ops`` programs in ``bpftool -j prog show`` output; CcplabError when the text is
    not bpftool's JSON list."""
    try:
        progs = json.loads(bpftool_json)
    except ValueError as exc:
        raise CcplabError(f"bpftool -j prog show printed no JSON: {exc}") from None
    if not isinstance(progs, list):
        raise CcplabError("bpftool -j prog show: expected a JSON list of programs")
    return [p for p in progs if p.get("type") == "struct_ops"]


def _cost(prog: dict) -> ProgCost:
    # bpftool omits run_time_ns/run_cnt while they are 0
    return ProgCost(prog["name"], int(prog.get("run_time_ns", 0)), int(prog.get("run_cnt", 0)))


def ccp_prog_costs(bpftool_json: str, after_id: int, pid: int | None = None) -> list[ProgCost]:
    """The datapath's struct_ops programs in ``bpftool -j prog show`` output.

    Selects programs of type ``struct_ops`` named ``ccp_*`` with an id above ``after_id`` (the
    highest id before the datapath started, so an earlier instance's programs are not counted) and,
    when bpftool lists owning processes (``pids``) and ``pid`` is given, owned by ``pid``.
    bpftool omits ``run_time_ns``/``run_cnt`` while they are 0; they count as 0.

    Raises CcplabError when the text is not bpftool's JSON list.
    """
    out = []
    for p in _struct_ops_progs(bpftool_json):
        if not str(p.get("name", "")).startswith("ccp_") or int(p.get("id", 0)) <= after_id:
            continue
        owners = [o.get("pid") for o in p.get("pids", [])]
        if pid is not None and owners and pid not in owners:
            continue
        out.append(_cost(p))
    return out


def max_prog_id(bpftool_json: str) -> int:
    """Highest program id in ``bpftool -j prog show`` output (0 when none)."""
    try:
        return max((int(p.get("id", 0)) for p in json.loads(bpftool_json)), default=0)
    except (ValueError, TypeError, AttributeError) as exc:
        raise CcplabError(f"bpftool -j prog show: unexpected output ({exc})") from None


def bpf_ns_per_ack(costs: Sequence[ProgCost]) -> tuple[float | None, float | None]:
    """(``cong_control`` ns per call, the per-ACK programs' ns per ``cong_control`` call).

    ``cong_control`` runs once per ACK, so the second figure is the BPF time the datapath costs per
    ACK: cong_control with what it tail-calls (counted in its own time), pkts_acked, cwnd_event,
    set_state, ssthresh and undo_cwnd; not PER_FLOW_PROGS (per connection; in
    ``bpf_ns_per_ack_by_prog``). (None, None) when cong_control never ran.
    """
    cc = [c for c in costs if c.name.startswith(CONG_CONTROL_PROG)]
    acks = sum(c.run_cnt for c in cc)
    if acks == 0:
        return None, None
    per_ack = [c for c in costs if not c.name.startswith(PER_FLOW_PROGS)]
    return sum(c.run_time_ns for c in cc) / acks, sum(c.run_time_ns for c in per_ack) / acks


def reference_costs(bpftool_json: str, after_id: int) -> list[ProgCost]:
    """The reference CCA's programs (``kc_*``, type ``struct_ops``, id above ``after_id``) in ``bpftool
    -j prog show`` output, as ``ccp_prog_costs`` selects the datapath's. Raises CcplabError when the
    text is not bpftool's JSON list."""
    return [_cost(p) for p in _struct_ops_progs(bpftool_json)
            if str(p.get("name", "")).startswith("kc_") and int(p.get("id", 0)) > after_id]


def reference_ns_per_ack(costs: Sequence[ProgCost]) -> float | None:
    """The reference CCA's BPF ns per ACK: all its programs but ``kc_init`` over the run count of
    ``kc_pkts_acked`` (the kernel calls pkts_acked once per ACK that acks data, as cong_control for
    ccp). None when pkts_acked never ran."""
    acks = sum(c.run_cnt for c in costs if c.name == REFERENCE_PER_ACK_PROG)
    if acks == 0:
        return None
    return sum(c.run_time_ns for c in costs if c.name not in REFERENCE_PER_FLOW_PROGS) / acks


def bpf_ns_per_ack_by_prog(costs: Sequence[ProgCost]) -> dict[str, float] | None:
    """Each program's BPF ns per ``cong_control`` call, PER_FLOW_PROGS included (the others add up
    to ``bpf_ns_per_ack``'s second figure); programs that never ran are left out. None when
    cong_control never ran."""
    acks = sum(c.run_cnt for c in costs if c.name.startswith(CONG_CONTROL_PROG))
    if acks == 0:
        return None
    out: dict[str, float] = {}
    for c in costs:
        if c.run_cnt:
            out[c.name] = out.get(c.name, 0.0) + c.run_time_ns / acks
    return out


def summary_line(datapath_log: str) -> str:
    """The datapath's last summary line (the one it logs at exit, containing ``kernel fold:``).

    Raises CcplabError when the log has none (the datapath did not exit cleanly).
    """
    lines = [line for line in datapath_log.splitlines() if "kernel fold:" in line and "invokes=" in line]
    if not lines:
        raise CcplabError("the datapath logged no summary line (did it exit cleanly?)")
    return lines[-1]


def summary_field(line: str, key: str, after: str = "") -> float | None:
    """Value of ``key=V`` in a summary line, the first one after the label ``after`` (e.g.
    ``"kernel fold:"``); None when the value is ``-`` (no sample) or the key/label is absent.

    Raises CcplabError when the value is neither a number nor ``-``.
    """
    start = line.find(after) if after else 0
    if start < 0:
        return None
    m = re.search(rf"(?<![\w>-]){re.escape(key)}=([^\s,;]+)", line[start + len(after):])
    if m is None or m.group(1) == "-":
        return None
    try:
        return float(m.group(1))
    except ValueError:
        raise CcplabError(f"datapath summary: {key}={m.group(1)!r} is not a number") from None


def crossing_messages(line: str, fold: str) -> int:
    """Kernel-to-user-space records of one datapath run, from its summary line: per-ACK snapshots
    in ``--fold userspace`` (``invokes`` + ``unknown_flow_acks``), reports in ``--fold kernel``.

    Raises CcplabError when a needed counter is missing.
    """
    keys = [("invokes", ""), ("unknown_flow_acks", "")] if fold == "userspace" else [("reports", "kernel fold:")]
    total = 0
    for key, after in keys:
        v = summary_field(line, key, after)
        if v is None:
            raise CcplabError(f"datapath summary has no {after}{key}= counter: {line[-200:]}")
        total += int(v)
    return total


def command_latency_us(line: str, fold: str) -> tuple[float | None, float | None]:
    """(p50, p99) in us from the kernel record to the command reaching the kernel: ``report->cwnd
    us:`` in ``--fold kernel``, ``event->command us:`` in ``--fold userspace``; None when not logged."""
    label = "report->cwnd us:" if fold == "kernel" else "event->command us:"
    return summary_field(line, "p50", label), summary_field(line, "p99", label)


@dataclass(frozen=True)
class IperfFigures:
    """One iperf3 client result: receiver Gbit/s, seconds, streams, mean sender RTT (us), sender CC."""

    gbps: float
    seconds: float
    streams: int
    mean_rtt_us: float | None
    sender_cc: str


def iperf_figures(result: dict) -> IperfFigures:
    """Figures of an iperf3 ``-J`` client result. Raises CcplabError on an iperf3 error or missing sums."""
    if "error" in result:
        raise CcplabError(f"iperf3 client failed: {result['error']}")
    end = result.get("end", {})
    received = end.get("sum_received")
    if not received or "bits_per_second" not in received:
        raise CcplabError("iperf3 result has no end.sum_received.bits_per_second")
    streams = end.get("streams", [])
    rtts = [s["sender"]["mean_rtt"] for s in streams if s.get("sender", {}).get("mean_rtt")]
    return IperfFigures(gbps=received["bits_per_second"] / 1e9, seconds=float(received.get("seconds", 0.0)),
                        streams=len(streams), mean_rtt_us=statistics.fmean(rtts) if rtts else None,
                        sender_cc=end.get("sender_tcp_congestion", ""))


def per_flow_rates(messages: int, seconds: float, flows: int, rtt_us: float | None) -> tuple[float, float | None]:
    """(messages per second per flow, messages per RTT per flow = that x RTT). Raises CcplabError
    for a non-positive duration or flow count."""
    if seconds <= 0 or flows <= 0:
        raise CcplabError(f"cannot rate {messages} messages over {seconds} s and {flows} flows")
    per_s = messages / seconds / flows
    return per_s, (per_s * rtt_us / 1e6 if rtt_us else None)


@dataclass
class Measurement:
    """One run of one mode in one configuration (see the module doc for each figure)."""

    mode: str
    flows: int
    paced: bool
    rep: int
    gbps: float
    busy: float
    own_cpu: float
    rtt_us: float | None
    daemons_cpu: float | None = None  # ccp-datapath + the algorithm: part of own_cpu
    cong_control_ns: float | None = None
    bpf_ns_per_ack: float | None = None
    msgs_per_s_per_flow: float | None = None
    msgs_per_rtt_per_flow: float | None = None
    latency_p50_us: float | None = None
    latency_p99_us: float | None = None
    # ns per cong_control call of each ccp struct_ops program (bpftool names, 15 characters):
    # where bpf_ns_per_ack goes (ccp_set_state, ccp_init, ccp_release ... beside ccp_cong_control)
    bpf_ns_per_ack_by_prog: dict[str, float] | None = None
    # own_cpu and daemons_cpu over the client's whole lifetime, setup and teardown included (the
    # two above cover its steady window, see OMIT_S; runs saved by an older dpbench have only
    # whole-lifetime figures, in own_cpu and daemons_cpu, and None here)
    own_cpu_run: float | None = None
    daemons_cpu_run: float | None = None


@dataclass(frozen=True)
class TargetRow:
    """One target check: what, the configuration, the figure, the bound, PASS or MISS (with why), and
    the 95% bootstrap interval of the figure's median over repetitions ("" with fewer than 3)."""

    what: str
    config: str
    figure: str
    bound: str
    verdict: str
    interval: str = ""


INTERVAL_CONFIDENCE = 0.95
"""Confidence level of the interval printed beside each target's median."""


def median_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The ``INTERVAL_CONFIDENCE`` percentile-bootstrap interval of the median of ``values``
    (scipy.stats.bootstrap, 9999 resamples, a fixed seed so a saved run prints the same interval
    again); None with fewer than 3 values. On this VM one repetition's ratio spreads by +-15%
    (docs/datapath.md, "Performance"), so a median a few percent from a bound decides nothing: the interval
    says how far the repetitions let it move."""
    if len(values) < 3:
        return None
    if min(values) == max(values):
        return (values[0], values[0])
    import numpy as np
    from scipy.stats import bootstrap
    res = bootstrap((np.asarray(values, dtype=float),), np.median, confidence_level=INTERVAL_CONFIDENCE,
                    n_resamples=9999, method="percentile", rng=np.random.default_rng(0))
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def _with_interval(verdict: str, interval: tuple[float, float] | None, bound: float) -> str:
    """``verdict``, noting when the median's interval reaches across ``bound``."""
    if interval is None or not interval[0] <= bound <= interval[1] or verdict.startswith("MISS ("):
        return verdict
    return f"{verdict} (the 95% interval spans the bound)"


def _interval_text(interval: tuple[float, float] | None, fmt: Callable[[float], str]) -> str:
    return "" if interval is None else f"{fmt(interval[0])}-{fmt(interval[1])}"


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _of(ms: Sequence[Measurement], mode: str, flows: int, paced: bool) -> list[Measurement]:
    return [m for m in ms if m.mode == mode and m.flows == flows and m.paced == paced]


def _verdict(ok: bool | None, why: str = "") -> str:
    if ok is None:
        return "MISS (no data)"
    return "PASS" if ok else ("MISS" + (f" ({why})" if why else ""))


def evaluate_targets(ms: Sequence[Measurement], flows: Sequence[int] = FLOWS) -> list[TargetRow]:
    """The four targets for ``ccp-kernel-fold`` against ``kernel`` (medians over repetitions).

    Throughput at full speed per flow count; CPU when paced per flow count (MISS when the paced
    throughputs differ by more than 3%, since the CPU ratio then compares unequal work); BPF time per
    ACK and messages per RTT per flow per flow count, the worse of full speed and paced. CPU is the
    run's own CPU over its steady window (``Measurement.own_cpu``, :func:`steady_window`): on a
    shared machine the host's busy share also counts whatever else runs. A ratio is the median over repetitions of ccp's figure over kernel cubic's in
    the same repetition (run back to back, so drift hits both), other figures the median over
    repetitions: one repetition's outlier (kernel cubic's own CPU at one paced flow ran 0.050 and
    0.062 of both cores in two repetitions of one run) moves a mean of few repetitions by more than
    the 5% the CPU target allows.
    """
    rows: list[TargetRow] = []
    for n in flows:
        ratios = _paired_ratios(ms, n, False, lambda m: m.gbps)
        ratio, ci = _median(ratios), median_interval(ratios)
        rows.append(TargetRow("throughput vs kernel cubic", f"{n} flows, full", _x(ratio),
                              f">= {MIN_THROUGHPUT_RATIO:.2f}x",
                              _with_interval(_verdict(None if ratio is None else ratio >= MIN_THROUGHPUT_RATIO),
                                             ci, MIN_THROUGHPUT_RATIO),
                              _interval_text(ci, _x)))
    for n in flows:
        kp, cp = _of(ms, "kernel", n, True), _of(ms, TARGET_MODE, n, True)
        kg, cg = _median([m.gbps for m in kp]), _median([m.gbps for m in cp])
        ratios = _paired_ratios(ms, n, True, lambda m: m.own_cpu)
        ratio, ci = _median(ratios), median_interval(ratios)
        equal = kg is not None and cg is not None and kg > 0 and abs(cg / kg - 1) <= EQUAL_THROUGHPUT_TOLERANCE
        why = "" if equal or ratio is None else f"throughput {cg:.3f} vs {kg:.3f} Gbit/s, not equal"
        ok = None if ratio is None else (ratio <= MAX_CPU_RATIO and equal)
        rows.append(TargetRow("own CPU vs kernel cubic", f"{n} flows, paced", _x(ratio),
                              f"<= {MAX_CPU_RATIO:.2f}x", _with_interval(_verdict(ok, why), ci, MAX_CPU_RATIO),
                              _interval_text(ci, _x)))
    for n in flows:
        # the worse of full speed and paced, by median; its interval
        per_load = [[m.bpf_ns_per_ack for m in _of(ms, TARGET_MODE, n, p) if m.bpf_ns_per_ack is not None]
                    for p in (False, True)]
        per_load = [v for v in per_load if v]
        worst_values = max(per_load, key=statistics.median) if per_load else []
        worst, ci = _median(worst_values), median_interval(worst_values)
        rows.append(TargetRow("BPF time per ACK", f"{n} flows", "n/a" if worst is None else f"{worst / 1000:.2f} us",
                              f"< {MAX_BPF_NS_PER_ACK / 1000:.1f} us",
                              _with_interval(_verdict(None if worst is None else worst < MAX_BPF_NS_PER_ACK),
                                             ci, MAX_BPF_NS_PER_ACK),
                              _interval_text(ci, lambda v: f"{v / 1000:.2f}")))
    for n in flows:
        worst = _worst([_median([m.msgs_per_rtt_per_flow for m in _of(ms, TARGET_MODE, n, p)]) for p in (False, True)])
        rows.append(TargetRow("user-space msgs per RTT per flow", f"{n} flows",
                              "n/a" if worst is None else f"{worst:.2f}", f"<= {MAX_MSGS_PER_RTT:g}",
                              _verdict(None if worst is None else worst <= MAX_MSGS_PER_RTT)))
    return rows


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _paired_ratios(ms: Sequence[Measurement], flows: int, paced: bool,
                   figure: Callable[[Measurement], float]) -> list[float]:
    """Per repetition, ``figure`` of ccp-kernel-fold over kernel cubic's in the same repetition
    (repetitions without both, or with kernel cubic's figure 0, left out), in repetition order."""
    kernel = {m.rep: figure(m) for m in _of(ms, "kernel", flows, paced)}
    ccp = {m.rep: figure(m) for m in _of(ms, TARGET_MODE, flows, paced)}
    return [ccp[r] / kernel[r] for r in sorted(kernel.keys() & ccp.keys()) if kernel[r]]


def _paired_ratio(ms: Sequence[Measurement], flows: int, paced: bool,
                  figure: Callable[[Measurement], float]) -> float | None:
    """Median of :func:`_paired_ratios`; None without a repetition that has both."""
    return _median(_paired_ratios(ms, flows, paced, figure))


def _worst(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _x(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.3f}x"


def _fmt(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def results_table(ms: Sequence[Measurement], flows: Sequence[int] = FLOWS) -> str:
    """The per-configuration table: one row per flow count x load x mode, figures as means over
    repetitions except Gbit/s, which lists each repetition in run order, then the mean."""
    head = (f"{'flows':>5} {'load':<6} {'mode':<19} {'Gbit/s (each run)':<24} {'mean':>6} {'busy%':>6} {'own%':>6} {'dmn%':>5} {'run%':>5} "
            f"{'cc ns':>6} {'bpf ns/ACK':>10} {'msg/s/flow':>11} {'msg/RTT':>8} {'RTT us':>8} "
            f"{'cmd lat p50/p99 us':>19}")
    lines = [head, "-" * len(head)]
    for n in flows:
        for paced in (False, True):
            for mode in MODES:
                rs = _of(ms, mode, n, paced)
                if not rs:
                    continue
                runs = " ".join(f"{m.gbps:.2f}" for m in rs)
                busy, own = _mean([m.busy for m in rs]), _mean([m.own_cpu for m in rs])
                dmn = _mean([m.daemons_cpu for m in rs])
                run = _mean([m.own_cpu_run for m in rs])
                lat = (f"{_fmt(_mean([m.latency_p50_us for m in rs]), '.0f')}/"
                       f"{_fmt(_mean([m.latency_p99_us for m in rs]), '.0f')}") if mode in FOLD_OF_MODE else "-"
                lines.append(
                    f"{n:>5} {'1G' if paced else 'full':<6} {mode:<19} {runs:<24} "
                    f"{_fmt(_mean([m.gbps for m in rs]), '.2f'):>6} {_fmt(None if busy is None else 100 * busy, '.1f'):>6} "
                    f"{_fmt(None if own is None else 100 * own, '.1f'):>6} "
                    f"{'-' if dmn is None else f'{100 * dmn:.1f}':>5} "
                    f"{'-' if run is None else f'{100 * run:.1f}':>5} "
                    f"{_fmt(_mean([m.cong_control_ns for m in rs]), '.0f'):>6} "
                    f"{_fmt(_mean([m.bpf_ns_per_ack for m in rs]), '.0f'):>10} "
                    f"{_fmt(_mean([m.msgs_per_s_per_flow for m in rs]), '.0f'):>11} "
                    f"{_fmt(_mean([m.msgs_per_rtt_per_flow for m in rs]), '.2f'):>8} "
                    f"{_fmt(_mean([m.rtt_us for m in rs]), '.0f'):>8} {lat:>19}")
    return "\n".join(lines)


def targets_table(rows: Sequence[TargetRow]) -> str:
    """The targets of ``--fold kernel`` as a table: what, configuration, figure, its 95% interval
    (:func:`median_interval`), bound, PASS/MISS."""
    head = f"{'target (--fold kernel)':<34} {'config':<16} {'figure':>10} {'95% interval':>15} {'bound':>10}  verdict"
    return "\n".join([head, "-" * len(head)] +
                     [f"{r.what:<34} {r.config:<16} {r.figure:>10} {r.interval:>15} {r.bound:>10}  {r.verdict}"
                      for r in rows])


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


# ---------------------------------------------------------------- the host side

def preflight(modes: Sequence[str] = DEFAULT_MODES) -> None:
    """CcplabError naming what this host lacks to run the benchmark's ``modes`` (before taking the lock)."""
    if os.geteuid() != 0:
        raise CcplabError("the datapath benchmark needs root (network namespaces, BPF struct_ops, sysctls)")
    if not Path("/sys/kernel/btf/vmlinux").exists():
        raise CcplabError("kernel BTF /sys/kernel/btf/vmlinux is missing (BPF struct_ops needs it)")
    for tool, package in (("iperf3", None), ("ip", "iproute2"), ("ss", "iproute2"), ("bpftool", None),
                          ("setpriv", "util-linux")):
        system_binary(tool, package)
    for name in ("ccp-datapath", "ccp-algorithms"):
        project_binary(name)
    if REFERENCE_MODE in modes:
        system_binary("clang")  # compiles the reference CCA
    if "cubic" not in kernel_ccs():
        raise CcplabError("the kernel offers no 'cubic' congestion control (tcp_available_congestion_control)")


@contextmanager
def bpf_stats_enabled() -> Iterator[None]:
    """``kernel.bpf_stats_enabled`` = 1 inside, its previous value restored after (also on errors)."""
    try:
        before = BPF_STATS_SYSCTL.read_text().strip()
    except OSError as exc:
        raise CcplabError(f"cannot read {BPF_STATS_SYSCTL}: {exc}") from None
    BPF_STATS_SYSCTL.write_text("1")
    try:
        yield
    finally:
        BPF_STATS_SYSCTL.write_text(before)


def unregister_reference() -> bool:
    """Unregister the reference CCA if it is registered (a killed benchmark's); True if it was."""
    if REFERENCE_CA not in kernel_ccs():
        return False
    run_tool(["bpftool", "struct_ops", "unregister", "name", REFERENCE_CA], f"unregistering {REFERENCE_CA}")
    return True


@contextmanager
def registered_reference(workdir: Path) -> Iterator[None]:
    """The reference CCA (REFERENCE_SOURCE) compiled against the running kernel's BTF into
    ``workdir`` (once) and registered as REFERENCE_CA inside, unregistered after (also on errors).
    Raises CcplabError naming the step that failed (clang, bpftool) with its output."""
    obj = workdir / "kfunc_cubic.bpf.o"
    if not obj.exists():
        header = workdir / "vmlinux.h"
        header.write_text(run_tool(["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "c"],
                               "dumping the kernel's BTF as vmlinux.h", timeout_s=120))
        run_tool(["clang", "-O2", "-g", "-target", "bpf", "-mcpu=v3", "-I", str(workdir), "-c",
              str(REFERENCE_SOURCE), "-o", str(obj)], f"compiling {REFERENCE_SOURCE.name}", timeout_s=120)
    run_tool(["bpftool", "struct_ops", "register", str(obj)], f"registering {REFERENCE_CA}")
    try:
        yield
    finally:
        unregister_reference()


def remove_stale_namespaces() -> list[str]:
    """Delete namespaces a SIGKILLed benchmark left (``dpbench-*-<pid>`` of a dead pid); their names."""
    stale = [n for n in namespaces_matching(NS_NAME) if not psutil.pid_exists(int(NS_NAME.match(n).group(2)))]
    for ns in stale:
        remove_namespace(ns)
    return stale


def bench_namespaces() -> VethPair:
    """This benchmark's two namespaces (``dpbench-snd-<pid>``, ``dpbench-rcv-<pid>``, so a later
    benchmark tells a killed one's apart) and their veth pair: MTU 1500, 10.203.0.1/24 and .2."""
    return VethPair(f"{NS_PREFIX}-snd-{os.getpid()}", f"{NS_PREFIX}-rcv-{os.getpid()}", SENDER_IP, RECEIVER_IP,
                    PREFIX_LEN, MTU, NAMESPACE_SYSCTLS)


def offloads(ns: str) -> str:
    """The sender veth's segmentation/receive offloads as ``tso=on gso=on gro=off`` (ethtool -k), or why not."""
    done = subprocess.run(netns_exec(ns, "ethtool", "-k", "veth0"), capture_output=True, text=True)
    if done.returncode != 0:
        return "offloads unknown (ethtool missing or failed)"
    names = {"tcp-segmentation-offload": "tso", "generic-segmentation-offload": "gso",
             "generic-receive-offload": "gro"}
    found = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in names:
            found[names[key.strip()]] = value.split()[0] if value.split() else "?"
    return " ".join(f"{k}={found.get(k, '?')}" for k in ("tso", "gso", "gro"))


def _bpftool_progs() -> str:
    return run_tool(["bpftool", "-j", "prog", "show"], "bpftool -j prog show")


@dataclass(frozen=True)
class RunCpu:
    """CPU shares of all cores over one client run's steady window: host busy, the run's own, its
    daemons' part of own; and the last two over the client's whole lifetime (``_run``)."""

    busy: float
    own: float
    daemons: float | None
    own_run: float
    daemons_run: float | None


@dataclass(frozen=True)
class WindowSample:
    """CPU counters at one edge of the steady window: /proc/stat, and in clock ticks (ns resolution)
    the run's own processes (client, server, ksoftirqd, daemons) and the daemons alone."""

    counters: CpuCounters
    own_ticks: float
    daemon_ticks: float


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


class Bench:
    """The host side of one benchmark: namespaces, a persistent iperf3 server, and per run the
    Portus algorithm and ccp-datapath (fresh per run, so their counters cover that run only)."""

    def __init__(self, stack: ExitStack, workdir: Path, duration_s: int, algorithm_params: dict[str, str],
                 omit_s: int = OMIT_S):
        self.workdir = workdir
        self.duration_s = duration_s
        self.window = steady_window(duration_s, omit_s)
        self.algorithm_params = algorithm_params
        self.snd, self.rcv = stack.enter_context(veth_namespaces(bench_namespaces()))
        server = Daemon("iperf3 server", netns_exec(self.rcv, "iperf3", "-s", "-B", RECEIVER_IP, "-p", IPERF_PORT),
                        workdir / "iperf3-server.log", stop_timeout_s=3)
        stack.enter_context(started(server, lambda: listening(self.rcv, IPERF_PORT)))
        self.server_pid = server.proc.pid
        self.ksoftirqd_pids = ksoftirqd_pids()
        self.runs = 0

    def measure(self, mode: str, flows: int, paced: bool, rep: int) -> Measurement:
        """One run: the flows of ``mode`` for ``duration_s`` s; raises CcplabError when a part fails."""
        self.runs += 1
        fold = FOLD_OF_MODE.get(mode)
        if mode == REFERENCE_MODE:
            first_id = max_prog_id(_bpftool_progs())
            with registered_reference(self.workdir):
                result, cpu = self._client(REFERENCE_CA, flows, paced, [])
                ns = reference_ns_per_ack(reference_costs(_bpftool_progs(), first_id))
            fig = self._checked(result, REFERENCE_CA, flows)
            return Measurement(mode, flows, paced, rep, fig.gbps, cpu.busy, cpu.own, fig.mean_rtt_us,
                               bpf_ns_per_ack=ns, own_cpu_run=cpu.own_run)
        if fold is None:
            result, cpu = self._client("cubic", flows, paced, [])
            fig = self._checked(result, "cubic", flows)
            return Measurement(mode, flows, paced, rep, fig.gbps, cpu.busy, cpu.own, fig.mean_rtt_us,
                               own_cpu_run=cpu.own_run)
        log = self.workdir / f"run{self.runs:02d}-{mode}-{flows}-{'paced' if paced else 'full'}-datapath.log"
        with ExitStack() as stack:
            algo = registry.lookup(ALGORITHM)
            algorithm = stack.enter_context(started(
                Daemon(algo.binary, [*algo.argv(self.algorithm_params), "--ipc", "unix"],
                       log.with_name(log.name.replace("datapath", "algorithm")),
                       env={"RUST_LOG": ALGORITHM_LOG_FILTER}), appears(PORTUS_SOCKET)))
            first_id = max_prog_id(_bpftool_progs())
            ready = self.workdir / ".datapath-ready.json"
            datapath = stack.enter_context(started(Daemon("ccp-datapath", [
                project_binary("ccp-datapath"), *DATAPATH_ARGS_OF_MODE[mode], "--congalg", ALGORITHM, "--ready-file", ready,
            ], log), appears(ready)))
            result, cpu = self._client(DATAPATH_CA, flows, paced, [datapath.proc.pid, algorithm.proc.pid])
            costs = ccp_prog_costs(_bpftool_progs(), first_id, datapath.proc.pid)
            status = datapath.stop()
        fig = self._checked(result, DATAPATH_CA, flows)
        if status != 0:
            raise CcplabError(f"ccp-datapath exited with status {status}:\n{datapath.log_tail()}")
        line = summary_line(log.read_text(errors="replace"))
        cc_ns, all_ns = bpf_ns_per_ack(costs)
        by_prog = bpf_ns_per_ack_by_prog(costs)
        per_s, per_rtt = per_flow_rates(crossing_messages(line, fold), fig.seconds, flows, fig.mean_rtt_us)
        p50, p99 = command_latency_us(line, fold)
        return Measurement(mode, flows, paced, rep, fig.gbps, cpu.busy, cpu.own, fig.mean_rtt_us, cpu.daemons,
                           cc_ns, all_ns, per_s, per_rtt, p50, p99, by_prog,
                           own_cpu_run=cpu.own_run, daemons_cpu_run=cpu.daemons_run)

    def _client(self, cc: str, flows: int, paced: bool, daemon_pids: list[int]) -> tuple[dict, "RunCpu"]:
        """Run the iperf3 client; its JSON result and the CPU shares over the steady window (from
        ``omit_s`` after its start to ``WINDOW_TAIL_S`` before its end, :func:`steady_window`) and
        over its whole lifetime."""
        argv = netns_exec(self.snd, "iperf3", "-c", RECEIVER_IP, "-p", IPERF_PORT, "-t", self.duration_s,
                           "-P", flows, "-C", cc, "-J", *(["-b", paced_stream_rate(flows)] if paced else []))
        limit_s = self.duration_s + CLIENT_GRACE_S
        window_start_s, window_end_s = self.window
        # iperf3 3.x refuses a client while the server still finishes a test ("the server is busy")
        wait_no_connections(self.rcv, IPERF_PORT, READY_TIMEOUT_S)
        pids = [self.server_pid, *self.ksoftirqd_pids]
        before, pids_before, daemons_before = cpu_counters(PROC_STAT.read_text()), _cpu_ticks_of(pids), _cpu_ticks_of(daemon_pids)
        child_before = _children_ticks()
        began = time.monotonic()
        client = subprocess.Popen(supervised(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=child_env())
        try:
            # setpriv and `ip netns exec` exec iperf3: the child's pid is the client's
            time.sleep(window_start_s)  # a measurement window, not a synchronisation
            w0 = self._window_sample(client, pids, daemon_pids)
            time.sleep(max(0.0, began + window_end_s - time.monotonic()))
            w1 = self._window_sample(client, pids, daemon_pids)
            out, err = client.communicate(timeout=max(1.0, began + limit_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise CcplabError(f"iperf3 client ({flows} flows, {cc}) did not finish within {limit_s:.0f} s") from None
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        whole_client = _children_ticks() - child_before
        after, pids_after, daemons_after = cpu_counters(PROC_STAT.read_text()), _cpu_ticks_of(pids), _cpu_ticks_of(daemon_pids)
        if w0 is None or w1 is None:
            raise CcplabError(f"iperf3 client ({flows} flows, {cc}) ended before its steady window "
                              f"({window_start_s:g}-{window_end_s:g} s), status {client.returncode}: {err.strip()[-500:]}")
        daemons = daemons_after - daemons_before
        cpu = RunCpu(busy=busy_fraction(w0.counters, w1.counters),
                     own=own_fraction(w0.counters, w1.counters, w1.own_ticks - w0.own_ticks),
                     daemons=own_fraction(w0.counters, w1.counters, w1.daemon_ticks - w0.daemon_ticks)
                     if daemon_pids else None,
                     own_run=own_fraction(before, after, whole_client + pids_after - pids_before + daemons),
                     daemons_run=own_fraction(before, after, daemons) if daemon_pids else None)
        try:
            return json.loads(out), cpu
        except ValueError:
            raise CcplabError(f"iperf3 client failed (status {client.returncode}): {err.strip()}") from None

    @staticmethod
    def _window_sample(client: subprocess.Popen, pids: Sequence[int], daemon_pids: Sequence[int]) -> "WindowSample | None":
        """CPU counters at one edge of the steady window; None when the client has already exited."""
        if client.poll() is not None:
            return None
        try:
            client_ticks = _cpu_ticks_of([client.pid])
        except CcplabError:  # exited between the poll and the read
            return None
        daemon_ticks = _cpu_ticks_of(daemon_pids)
        return WindowSample(cpu_counters(PROC_STAT.read_text()),
                            own_ticks=client_ticks + _cpu_ticks_of(pids) + daemon_ticks, daemon_ticks=daemon_ticks)

    @staticmethod
    def _checked(result: dict, cc: str, flows: int) -> IperfFigures:
        fig = iperf_figures(result)
        if fig.sender_cc and fig.sender_cc != cc:
            raise CcplabError(f"the flows used congestion control {fig.sender_cc!r}, not {cc!r}")
        if fig.streams != flows:
            raise CcplabError(f"iperf3 ran {fig.streams} streams, not {flows}")
        return fig


def _cpu_ticks_of(pids: Sequence[int]) -> float:
    """CPU time of the live processes ``pids``, all their threads, in clock ticks (the scale of
    /proc/stat) at nanosecond resolution (/proc/PID/task/*/schedstat). /proc/PID/stat's utime +
    stime come in whole ticks (10 ms): the daemons use 2-8 ticks in a paced run, so a whole tick
    was 12-50 % of their figure. CcplabError if a process has gone."""
    ns = 0
    for pid in pids:
        try:
            ns += sum(run_time_ns(t.read_text()) for t in Path(f"/proc/{pid}/task").glob("*/schedstat"))
        except OSError:
            raise CcplabError(f"process {pid} (a daemon of the benchmark) exited during a run") from None
        if not Path(f"/proc/{pid}").exists():
            raise CcplabError(f"process {pid} (a daemon of the benchmark) exited during a run")
    return ns * os.sysconf("SC_CLK_TCK") / 1e9


def ksoftirqd_pids() -> list[int]:
    """Pids of the kernel's per-CPU softirq threads (``ksoftirqd/N``)."""
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if (p / "comm").read_text().startswith("ksoftirqd/"):
                    pids.append(int(p.name))
            except OSError:  # exited while we looked
                pass
    return sorted(pids)


def _children_ticks() -> float:
    """CPU time (clock ticks) of this process's reaped children (getrusage RUSAGE_CHILDREN)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (ru.ru_utime + ru.ru_stime) * os.sysconf("SC_CLK_TCK")


def background_busy(seconds: float = 2.0) -> float:
    """Busy share of all cores over ``seconds`` before any flow (the shared machine's own load)."""
    before = cpu_counters(PROC_STAT.read_text())
    time.sleep(seconds)  # a measurement window, not a synchronisation
    return busy_fraction(before, cpu_counters(PROC_STAT.read_text()))


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (done.stdout.strip() or "unknown") + ("+dirty" if dirty else "")


def _raise_on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_bench(args: argparse.Namespace) -> int:
    window = steady_window(args.duration_s, args.omit_s)  # a bad pair fails before anything runs
    preflight(args.modes)
    plan = run_plan(args.flows, args.reps, args.modes, args.loads)
    params = {**ALGORITHM_PARAMS, **dict(args.algorithm_param)}
    with netlab_lock(), ExitStack() as stack:
        if DATAPATH_CA in kernel_ccs():  # checked under the lock: whoever held it is done
            raise CcplabError(f"congestion control '{DATAPATH_CA}' is already registered: a ccp-datapath runs "
                              "outside the netlab lock (or a killed one left it: `ccplab clean`)")
        if unregister_reference():
            print(f"unregistered {REFERENCE_CA}, left registered by a killed benchmark", file=sys.stderr)
        stale = remove_stale_namespaces()
        if stale:
            print(f"removed namespaces of a killed benchmark: {', '.join(stale)}", file=sys.stderr)
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ccplab-dpbench-")))
        if args.keep_logs:
            stack.callback(_copy_logs, workdir, args.keep_logs)
        stack.enter_context(bpf_stats_enabled())
        bench = Bench(stack, workdir, args.duration_s, params, args.omit_s)
        idle = background_busy()
        print(f"datapath benchmark: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {_commit()}"
              f"{'' if bin_dir() == REPO_ROOT / 'target' / 'release' else f' (binaries from {bin_dir()})'}, "
              f"{os.cpu_count()} cores, veth MTU {MTU} ({offloads(bench.snd)}), iperf3 -t {args.duration_s} "
              f"(CPU over {window[0]:g}-{window[1]:g} s of each run), "
              f"algorithm ccp-algorithms {ALGORITHM} {params} (RUST_LOG={ALGORITHM_LOG_FILTER}); "
              f"paced = iperf3 -b per stream, "
              f"{PACED_TOTAL_MBPS / 1000:g} Gbit/s in total; background busy {100 * idle:.1f}% before the runs",
              flush=True)
        measurements: list[Measurement] = []
        for i, (flows, paced, rep, mode) in enumerate(plan, 1):
            m = bench.measure(mode, flows, paced, rep)
            measurements.append(m)
            print(f"  [{i}/{len(plan)}] {flows:>3} flows {'paced' if paced else 'full '} {mode:<19} "
                  f"{m.gbps:6.2f} Gbit/s busy {100 * m.busy:5.1f}%", file=sys.stderr, flush=True)
    print()
    print(results_table(measurements, args.flows))
    print()
    print(targets_table(evaluate_targets(measurements, args.flows)))
    print("\nbusy% = share of both cores (/proc/stat) over the steady window of each run; own% = the part of it "
          "used by iperf3 client and server, ccp-datapath, the algorithm and ksoftirqd (scheduler run time; busy% is "
          "tick-sampled), dmn% = ccp-datapath + algorithm; run% = own% over the whole run, setup and teardown "
          "included; cc ns = BPF ns per ccp_cong_control call "
          "(what it tail-calls included); bpf ns/ACK = BPF ns of the ccp programs that run per ACK (all but "
          "init and release) per cong_control call; msg = kernel-to-user records "
          "(userspace fold: per-ACK snapshots; kernel fold: reports); cmd lat = report->cwnd (kernel fold) or "
          "event->command (userspace fold), us.")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(m) for m in measurements], indent=1))
        print(f"measurements: {args.json}")
    return 0


def _copy_logs(workdir: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for p in workdir.glob("*.log"):
        (dest / p.name).write_bytes(p.read_bytes())


def _flow_counts(text: str) -> list[int]:
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--flows {text!r}: expected comma-separated integers, e.g. 1,10,100")
    if not counts or any(c < 1 or c > 128 for c in counts):
        raise argparse.ArgumentTypeError(f"--flows {text!r}: each count must be 1..128 (iperf3's -P limit)")
    return counts


def _names(flag: str, allowed: Sequence[str]):
    """argparse type: a comma-separated subset of ``allowed``, in ``allowed``'s order."""
    def parse(text: str) -> list[str]:
        names = text.split(",")
        bad = [n for n in names if n not in allowed]
        if bad or not text:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected a comma-separated subset of "
                                             f"{','.join(allowed)}")
        return [a for a in allowed if a in names]
    return parse


def _param(text: str) -> tuple[str, str]:
    """argparse type: ``FLAG=VALUE`` (FLAG without ``--``) for the algorithm's command line."""
    flag, sep, value = text.partition("=")
    if not sep or not flag or not value or flag.startswith("-"):
        raise argparse.ArgumentTypeError(f"--algorithm-param {text!r}: expected FLAG=VALUE without --, "
                                         "e.g. min-report-interval-us=20000")
    return flag, value


def _whole_number(minimum: int, what: str) -> Callable[[str], int]:
    """argparse type: an integer >= ``minimum``, refused as not being ``what``."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = minimum - 1
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return v
    return parse


_positive = _whole_number(1, "a positive integer")
_non_negative = _whole_number(0, "a whole number of seconds >= 0")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ccplab.dpbench",
        description="Datapath benchmark: kernel cubic vs ccp-datapath (cubic) with the fold in "
                    "the kernel and in user space, alternating, over a veth pair; prints throughput, busy CPU, BPF "
                    "cost per ACK, user-space messages per flow, command latency and the targets. "
                    "Needs root; runs under the netlab lock.")
    p.add_argument("--duration-s", type=_positive, default=8, help="seconds per iperf3 run (default %(default)s)")
    p.add_argument("--omit-s", type=_non_negative, default=OMIT_S,
                   help="seconds at the start of each run left out of the CPU figures (connection setup, slow "
                        f"start; as iperf3 --omit); the window closes {WINDOW_TAIL_S} s before the run's end "
                        "(default %(default)s)")
    p.add_argument("--reps", type=_positive, default=4,
                   help="repetitions of the alternation (default %(default)s; the targets take medians over them)")
    p.add_argument("--flows", type=_flow_counts, default=list(FLOWS),
                   help="parallel flow counts, comma-separated (default 1,10,100)")
    p.add_argument("--loads", type=_names("--loads", list(LOADS)), default=list(LOADS),
                   help="loads to run, comma-separated subset of full,paced (default: both)")
    p.add_argument("--modes", type=_names("--modes", MODES), default=list(DEFAULT_MODES),
                   help=f"modes to alternate, comma-separated subset of {','.join(MODES)} (default: "
                        f"{','.join(DEFAULT_MODES)}; ccp-kernel-interp interprets the fold programs instead "
                        "of compiling them; the targets compare ccp-kernel-fold with kernel)")
    p.add_argument("--algorithm-param", type=_param, action="append", default=[], metavar="FLAG=VALUE",
                   help=f"a flag of ccp-algorithms {ALGORITHM} (without --) over ALGORITHM_PARAMS "
                        f"{ALGORITHM_PARAMS}; repeatable; printed in the header")
    p.add_argument("--json", type=Path, help="also write every measurement to this JSON file")
    p.add_argument("--keep-logs", type=Path, metavar="DIR", help="copy the daemons' logs into DIR")
    p.add_argument("--from", dest="from_json", type=Path, metavar="JSON",
                   help="run nothing: print the tables and targets of a run saved with --json")
    return p


def load_measurements(path: Path) -> list[Measurement]:
    """The measurements a run wrote with ``--json`` (a list of :class:`Measurement` fields).

    Raises CcplabError naming ``path`` when it cannot be read, is not JSON, or an entry is not a
    measurement."""
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise CcplabError(f"--from {path}: cannot read it: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise CcplabError(f"--from {path}: not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(raw, list):
        raise CcplabError(f"--from {path}: expected a list of measurements (a --json file), got {type(raw).__name__}")
    out = []
    for i, entry in enumerate(raw):
        try:
            out.append(Measurement(**entry))
        except TypeError as exc:
            raise CcplabError(f"--from {path}: entry {i} is not a measurement ({exc})") from exc
    return out


def print_saved(path: Path) -> int:
    """Print the results and targets tables of a saved run (``--from``); no root, no network."""
    ms = load_measurements(path)
    flows = sorted({m.flows for m in ms})
    print(f"saved run {path}: {len(ms)} measurements, {max((m.rep for m in ms), default=0)} repetitions")
    print(results_table(ms, flows))
    print()
    print(targets_table(evaluate_targets(ms, flows)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (see the module doc)."""
    args = build_parser().parse_args(argv)
    if args.from_json is not None:
        try:
            return print_saved(args.from_json)
        except CcplabError as exc:
            print(f"dpbench: error: {exc}", file=sys.stderr)
            return 2
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_on_signal)
    try:
        return run_bench(args)
    except CcplabError as exc:
        print(f"dpbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dpbench: interrupted; cleaned up", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
