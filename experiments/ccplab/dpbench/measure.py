"""The figures of one benchmark run, from what the host and the tools report: /proc/stat and
schedstat (CPU), ``bpftool -j prog show`` (BPF time), iperf3's JSON (throughput, RTT) and the
datapath's stats file (messages, command latency); `Measurement` holds them."""

from __future__ import annotations

import json
import os
import resource
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import CcplabError

REFERENCE_PER_ACK_PROG = "kc_pkts_acked"  # runs once per ACK that acks data (its run count is the ACKs)
REFERENCE_PER_FLOW_PROGS = ("kc_init",)
PROC_STAT = Path("/proc/stat")
CONG_CONTROL_PROG = "ccp_cong_contro"  # prefix: bpftool shows the BTF name or the kernel's 15-character one
PER_FLOW_PROGS = ("ccp_init", "ccp_release")
"""Programs that run once per connection, not per ACK: left out of the per-ACK figure. Each wakes
the daemon (a forced ring-buffer wakeup, 7-20 us here), and iperf3 -C sets the congestion control
on the receiver's sockets too, so a short 100-flow run spreads ~200 of them over few ACKs."""

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


_COUNT, _US = "a whole number", "a number of us or null"
STATS_SCHEMA: dict = {
    **dict.fromkeys(["flows_created", "bpf_flow_ids", "active", "resynced", "invokes", "commands",
                     "skipped_invalid", "unknown_flow_acks", "bad_records", "refused_msgs", "untrusted_msgs"], _COUNT),
    "bpf": dict.fromkeys(["command_acks", "fallback_acks", "rto_await_acks", "guard_fallbacks", "cwnd_clamped", "rate_floored",
                          "dropped_events"], _COUNT),
    "outbox": dict.fromkeys(["deferred", "peak", "dropped"], _COUNT),
    "user_ack_cost_us": dict.fromkeys(["mean", "p50", "p99"], _US),
    "event_to_command_us": {"p50": _US, "p99": _US, "n": _COUNT},
    "kernel_fold": dict.fromkeys(["invocations", "compiled_runs", "aborted", "reports", "reports_dropped",
                                  "no_state_flows", "installs", "compiled", "interpreted", "staged", "refused",
                                  "evictions_refused", "replaced_unused"], _COUNT),
    "report_to_cwnd_us": {"p50": _US, "p99": _US, "n": _COUNT},
}
"""The JSON object ``ccp-datapath --stats-file PATH`` writes at exit: the figures of its exit summary
line, counters as integers, microsecond figures as numbers or null where the line prints ``n/a`` (no
sample). Keys beyond these are allowed (read by nothing here)."""


def datapath_stats(path: Path) -> dict:
    """The datapath's stats file (`STATS_SCHEMA`), checked: every key present with a value of its kind.

    Raises CcplabError naming ``path`` when it is missing or unreadable (the datapath writes it when it
    exits cleanly) or not JSON, and naming ``path`` and the key (``kernel_fold.reports``) when a key is
    missing or its value is not of its kind.
    """
    try:
        stats = json.loads(path.read_text())
    except FileNotFoundError:
        raise CcplabError(f"datapath stats file {path} is missing (ccp-datapath writes it when it exits "
                          "cleanly, with --stats-file)") from None
    except OSError as exc:
        raise CcplabError(f"datapath stats file {path}: cannot read it: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise CcplabError(f"datapath stats file {path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    _check_stats(stats, STATS_SCHEMA, path, "")
    return stats


def _check_stats(value: object, schema: dict, path: Path, where: str) -> None:
    if not isinstance(value, dict):
        raise CcplabError(f"datapath stats file {path}: {where or 'the file'} is not a JSON object")
    for key, kind in schema.items():
        name = f"{where}.{key}" if where else key
        if key not in value:
            raise CcplabError(f"datapath stats file {path}: no key {name!r}")
        v = value[key]
        if isinstance(kind, dict):
            _check_stats(v, kind, path, name)
        elif not _of_kind(v, kind):
            raise CcplabError(f"datapath stats file {path}: {name} is {v!r}, not {kind}")


def _of_kind(value: object, kind: str) -> bool:
    whole = isinstance(value, int) and not isinstance(value, bool)  # JSON true is not a count
    if kind == _COUNT:
        return whole and value >= 0
    return value is None or whole or isinstance(value, float)


def crossing_messages(stats: dict, fold: str) -> int:
    """Kernel-to-user-space records of one datapath run, from its stats (`datapath_stats`): per-ACK
    snapshots in ``--fold userspace`` (``invokes`` + ``unknown_flow_acks``), reports in ``--fold
    kernel`` (``kernel_fold.reports``)."""
    if fold == "userspace":
        return stats["invokes"] + stats["unknown_flow_acks"]
    return stats["kernel_fold"]["reports"]


def command_latency_us(stats: dict, fold: str) -> tuple[float | None, float | None]:
    """(p50, p99) in us from the kernel record to the command reaching the kernel, from the datapath's
    stats (`datapath_stats`): ``report_to_cwnd_us`` in ``--fold kernel``, ``event_to_command_us`` in
    ``--fold userspace``; None where there was no sample."""
    lat = stats["report_to_cwnd_us" if fold == "kernel" else "event_to_command_us"]
    return lat["p50"], lat["p99"]


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



def cpu_ticks_of(pids: Sequence[int]) -> float:
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


def children_ticks() -> float:
    """CPU time (clock ticks) of this process's reaped children (getrusage RUSAGE_CHILDREN)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (ru.ru_utime + ru.ru_stime) * os.sysconf("SC_CLK_TCK")


def background_busy(seconds: float = 2.0) -> float:
    """Busy share of all cores over ``seconds`` before any flow (the shared machine's own load)."""
    before = cpu_counters(PROC_STAT.read_text())
    time.sleep(seconds)  # a measurement window, not a synchronisation
    return busy_fraction(before, cpu_counters(PROC_STAT.read_text()))



@dataclass(frozen=True)
class RunCpu:
    """CPU shares of all cores over one client run's steady window: host busy, the run's own, its
    daemons' part of own; and the last two over the client's whole lifetime (``_run``)."""

    busy: float
    own: float
    daemons: float | None
    own_run: float
    daemons_run: float | None


def bpf_cpu_share(ns_per_ack: float | None, acks_per_s: float | None, cores: int) -> float | None:
    """BPF time as a share of all ``cores`` (0..1): ``ns_per_ack`` (ns per cong_control call) x
    ``acks_per_s``; None when either is unknown."""
    if ns_per_ack is None or acks_per_s is None:
        return None
    return ns_per_ack * acks_per_s / 1e9 / cores


@dataclass(frozen=True)
class TcpSegments:
    """A network namespace's TCP segment counters, /proc/net/snmp ``Tcp: InSegs OutSegs`` (RFC 1213's
    tcpInSegs, tcpOutSegs; Linux counts a TSO/GSO packet as the MSS-sized segments it carries)."""

    in_segs: int
    out_segs: int

    def __sub__(self, earlier: "TcpSegments") -> "TcpSegments":
        return TcpSegments(self.in_segs - earlier.in_segs, self.out_segs - earlier.out_segs)


def tcp_segments(snmp: str) -> TcpSegments:
    """Parse /proc/net/snmp text (a ``Tcp:`` header line, then a ``Tcp:`` values line).

    Raises CcplabError when there is no such pair or it lacks InSegs or OutSegs."""
    rows = [line.split() for line in snmp.splitlines() if line.startswith("Tcp:")]
    if len(rows) < 2:
        raise CcplabError("/proc/net/snmp: no Tcp: header and values lines")
    fields = dict(zip(rows[0][1:], rows[1][1:]))
    try:
        return TcpSegments(int(fields["InSegs"]), int(fields["OutSegs"]))
    except (KeyError, ValueError):
        raise CcplabError(f"/proc/net/snmp: the Tcp: lines lack a numeric InSegs or OutSegs: {rows[0][:12]}") from None


@dataclass(frozen=True)
class WindowSample:
    """CPU counters at one edge of the steady window: /proc/stat, and in clock ticks (ns resolution)
    the run's own processes (client, server, ksoftirqd, daemons) and the daemons alone."""

    counters: CpuCounters
    own_ticks: float
    daemon_ticks: float


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
    # the sender namespace's TCP segments over the client's whole lifetime, per second of its
    # iperf3 run (TcpSegments): what packet work the run did, the same for every mode at a paced
    # load, so a CPU difference there is the congestion control's own
    acks_per_s: float | None = None
    segs_out_per_s: float | None = None
    # ccp's BPF time as a share of all cores, the scale of own_cpu (bpf_cpu_share)
    bpf_cpu: float | None = None


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
