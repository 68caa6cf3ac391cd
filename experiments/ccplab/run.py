"""One run through the emulated link: one flow (``--cca``) or several competing ones (``--flow``).

Daemons (all started at once: none needs another to start; the datapath first, its
BPF load being the longest start-up):
    1. ccplab-link: namespaces + emulated bottleneck replaying the trace, logging
       every packet with its flow (``--flow-log``) and delaying flows' ACKs as asked
    2. if any flow is ccp: ccp-datapath (registers the struct_ops congestion control
       ``ccp``; a rule per ccp flow picks its algorithm by the flow's port; it finds
       the algorithm by its socket whenever that appears) and one Portus algorithm
       daemon hosting every ccp algorithm of the run (binds /tmp/ccp/portus), or the
       external algorithm's own binary (``portus:NAME=COMMAND``; binds
       /tmp/ccp/portus, or /tmp/ccp/X with ``--ipc-name X``), ready when its socket
       appears
    3. once the link is ready: one iperf3 server per flow in the receiver namespace
       (port 5201 + flow index)
Once every daemon is ready, each flow's client starts in the sender namespace at its
START_S with TCP_CONGESTION = NAME (kernel) or ``ccp``.
While the flows run, the runner watches its daemons: one that exits fails the
run at once, naming it. Then everything stops in reverse order. The run
directory is assembled under a hidden partial name and renamed into place only
when the run succeeded, so a failed or interrupted run leaves nothing
half-written in the results.

A run killed outright (SIGKILL) still cleans up: its daemons die with it
(``plumbing.processes.supervised``) and the link always has a duration
(``link_duration_s``). The next run's preflight refuses to start on anything
a killed run left on the host, naming ``ccplab clean``, and removes stale
partial directories beside its own output (see ``ccplab.cleanup``).

Files of a run directory:
    metadata.json   what ran (schema 3: CCA, scenario, versions, times) - written
                    last. ``flows``: one entry per flow (index, cca, cca_params,
                    label, spec, port, start_s, stop_s, extra_delay_ms, iperf3,
                    iperf3_receiver_mbps, socket_congestion_control, external
                    (an external algorithm's command, env and Portus socket;
                    null for the others), and on the
                    link log's clock flow_start_s / flow_end_s: the arrival of
                    its first full-size packet and 1 ms after its last). The
                    top-level ``cca``, ``cca_params``, ``flow_start_s`` and
                    ``files.iperf3`` are the first flow's (a one-flow run reads
                    as before); ``label`` names the set of flows. The analysis
                    measures transients from the data flow's own time zero,
                    not from iperf3's control connection. Top-level
                    ``external``: {label: record} of the run's external
                    algorithms (empty when none). A ccp run adds
                    ``control`` (who drove the flows: ``ccplab.control``),
                    per ccp flow ``control`` (its packets delivered and those
                    ACKed under the fallback, the algorithm the datapath
                    picked), ``valid``, and ``daemons``: each ccp daemon's
                    ``alive_at_end`` and ``exit_status`` once stopped.
    uplink.log      per-packet link log, mahimahi mm-link text format (stock)
    uplink.flows    the flow of each packet event of uplink.log (its receiver
                    port, one line per ``+``/``-``/``d`` line; transient.flowlog)
    iperf3.json     iperf3 client's JSON (-J); iperf3-flow<K>.json per flow when
                    there are several
    link.log        ccplab-link's own log
    algorithm.log   the Portus algorithm's log (reports, cwnd updates), ccp only
    datapath.log    ccp-datapath's log, ccp only
    iperf3-server.log (iperf3-server-flow<K>.log per flow when there are several)

metadata.json's ``receiver`` says how the receiver acknowledged (``acks``:
``every-segment`` with the scenario's ``quickack``, else ``delayed``, Linux's
default) and what its TCP counted (``tcp_in_segs``, ``tcp_out_segs`` of the
receiver's namespace, /proc/net/snmp, and their ratio ``segments_per_ack``: data
segments per ACK, about 1 with quickack and 2 with delayed ACKs on a bulk flow).
``ended_by``: ``flows`` (every client finished) or ``trace-end`` (the scenario's
``trace_once``: the link stopped at the trace's end, stopping the flows; their
iperf3 results then lack the receiver's figures, ``iperf3_receiver_mbps`` is null
and the link log is the measurement).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import transient
from ccplab_util.atomic import write_atomic

from . import registry
from .binaries import REPO_ROOT, project_binary, system_binary
from .cca import Cca, DATAPATH_CA, PORTUS_SOCKET, kernel_ccs
from .flows import BASE_PORT, FlowSpec, check_flows, flows_label, port_of, single_flow
from .errors import CcplabError
from .control import InvalidRunError, ValidityPolicy, control_evidence, flow_evidence, unreleased_flows
from .cleanup import find_leftovers, remove_stale_partials
from .plumbing.locks import ccp_host_claim
from .plumbing.netns import listening, netns_exec, remove_namespace
from .plumbing.processes import (READY_TIMEOUT_S, Daemon, appears, child_env, started, stop_together, supervised,
                                 wait_exit)
from .scenario import Scenario, check_trace

BTF_VMLINUX = Path("/sys/kernel/btf/vmlinux")  # struct_ops needs the kernel's BTF
IPERF_PORT = BASE_PORT  # the first flow's server port
FLOW_LOG = "uplink.flows"  # per-packet flow attribution beside uplink.log (ccplab-link --flow-log)
WATCH_PERIOD_S = 0.1  # how often the runner looks at its clients and daemons while the flows run
CLIENT_GRACE_S = 60.0  # iperf3's client may take this long past the flow's duration before it is a failure
TRACE_END_STOP = re.compile(r"stop(?:\x1b\[[0-9;]*m)*=(?:\x1b\[[0-9;]*m)*TraceEnd")
"""ccplab-link's log line when --once stopped it at the trace's end (colour codes allowed between the words)."""


@dataclass
class RunResult:
    """A finished run: its directory, iperf3's mean receiver throughput of each flow (Mbit/s, in flow
    order) and each flow's sender congestion control."""

    run_dir: Path
    flow_mbps: list[float | None]
    flow_socket_cc: list[str]

    @property
    def iperf3_mbps(self) -> float | None:
        """The first flow's receiver throughput, Mbit/s (the only one of a single-flow run); None when the
        link stopped the flow at the trace's end."""
        return self.flow_mbps[0]

    @property
    def socket_cc(self) -> str:
        """The first flow's sender congestion control."""
        return self.flow_socket_cc[0]

    def describe(self, flows: Sequence[FlowSpec]) -> str:
        """One line: each flow's throughput (iperf3) and congestion control."""
        return ", ".join(f"{f.cca}: " + ("stopped at the trace's end" if mbps is None else f"{mbps:.2f} Mbit/s")
                         + f" ({cc})" for f, mbps, cc in zip(flows, self.flow_mbps, self.flow_socket_cc))


def preflight(cca: Cca) -> None:
    """Check the machine can run ``cca``; CcplabError says what is missing."""
    preflight_flows(single_flow(cca))


def preflight_flows(flows: Sequence[FlowSpec]) -> None:
    """Check the machine can run every flow of ``flows``; CcplabError says what is missing."""
    if os.geteuid() != 0:
        raise CcplabError("ccplab run needs root (network namespaces, BPF struct_ops): run it as root")
    left = find_leftovers().host_state()
    if left:
        raise CcplabError("a killed run left this behind:\n  " + "\n  ".join(left) +
                          "\nremove it with `ccplab clean` (as root), then run again")
    system_binary("iperf3")
    system_binary("ip", "iproute2")
    system_binary("setpriv", "util-linux")  # daemons die with the runner (plumbing.processes.supervised)
    project_binary("ccplab-link")
    ccp_names = [f.cca.name for f in flows if f.cca.kind == "ccp"]
    if any(f.cca.uses_datapath for f in flows):
        if not BTF_VMLINUX.exists():
            raise CcplabError(
                f"no BPF: {BTF_VMLINUX} is missing, so the struct_ops datapath cannot "
                "load (the kernel needs CONFIG_DEBUG_INFO_BTF and CONFIG_BPF_JIT)"
            )
        if DATAPATH_CA in kernel_ccs():
            raise CcplabError(
                "the congestion control 'ccp' is already registered: another ccp-datapath is running; stop it first"
            )
        project_binary("ccp-datapath")
        for name in ccp_names:
            registry.lookup(name).binary_path()
        for f in flows:
            program = Path(f.cca.command[0]) if f.cca.external else None
            if program is not None and not (program.is_file() and os.access(program, os.X_OK)):
                raise CcplabError(f"{f.cca}: program {program} is not an executable file on this host")


def run_one(cca: Cca, scenario: Scenario, out: Path, run_index: int = 1) -> RunResult:
    """Run one flow of ``cca`` through ``scenario``'s link and save it in ``out`` (see `run_flows`)."""
    return run_flows(single_flow(cca), scenario, out, run_index)


def run_flows(flows: Sequence[FlowSpec], scenario: Scenario, out: Path, run_index: int = 1,
              policy: ValidityPolicy = ValidityPolicy()) -> RunResult:
    """Run ``flows`` (``ccplab.flows``) together through ``scenario``'s link and save the run in ``out``.

    ``out`` must not exist yet (nothing already written is overwritten).
    Raises CcplabError on bad input, a flow that fails (named), a daemon that
    dies during the run, or ccp flows the kernel's cubic fallback drove beyond
    ``policy`` (``ccplab.control``; kept, marked invalid, with
    ``policy.keep_invalid``); KeyboardInterrupt passes through after cleanup.
    Either way no partial directory remains.
    """
    scenario.validate()
    check_flows(flows, scenario.duration_s)
    with ccp_host_claim() if any(f.cca.uses_datapath for f in flows) else nullcontext():
        return _claimed_run(flows, scenario, out, run_index, policy)


def _claimed_run(flows: Sequence[FlowSpec], scenario: Scenario, out: Path, run_index: int,
                 policy: ValidityPolicy) -> RunResult:
    """`run_flows` once the host is claimed (ccp) or needs no claim (kernel flows only)."""
    preflight_flows(flows)
    check_trace(scenario.trace)
    out = out.resolve()
    if out.exists():
        raise CcplabError(f"run directory {out} already exists: choose another --out (nothing was overwritten)")
    remove_stale_partials(out.parent)  # what killed runs left here; incomplete by definition
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    partial.mkdir(parents=True)
    started = _now()
    try:
        iperfs, receiver, ended_by, daemons = _run_flows(flows, scenario, partial)
        checked = [_check_iperf(r, f, ended_by) for r, f in zip(iperfs, flows)]
        entries = [{**f.as_json(k), "iperf3": _iperf3_file(k, len(flows)),
                    "iperf3_receiver_mbps": mbps, "socket_congestion_control": cc}
                   for k, (f, (mbps, cc)) in enumerate(zip(flows, checked))]
        entries = _with_measured_times(entries, partial)
        first = flows[0].cca
        any_ccp = any(f.cca.uses_datapath for f in flows)
        control = control_evidence(partial / "datapath.log", policy) if any_ccp else None
        if any_ccp:
            entries, control = _with_flow_control(entries, flows, partial / "datapath.log", policy, control)
        if control is not None and not control["valid"] and not policy.keep_invalid:
            raise InvalidRunError(f"{control['reason']}: the run is not a valid result of "
                              f"{flows_label(flows)} and was not saved (--keep-invalid keeps it, marked)")
        metadata = {
            "schema": 3, "cca": first.base, "cca_params": first.param_dict, "label": flows_label(flows),
            "run": run_index, "scenario": scenario.to_json(), "flow_start_s": entries[0]["flow_start_s"],
            "flows": entries, "external": {str(f.cca): f.cca.external_json() for f in flows if f.cca.external},
            "receiver": receiver, "ended_by": ended_by,
            "files": {"link_log": "uplink.log", "flow_log": FLOW_LOG, "iperf3": entries[0]["iperf3"],
                      "link": "link.log",
                      "datapath_log": "datapath.log" if any_ccp else None,
                      "algorithm_log": "algorithm.log" if any_ccp else None},
            "socket_congestion_control": checked[0][1], "iperf3_receiver_mbps": checked[0][0],
            "valid": control is None or control["valid"], "control": control, "daemons": daemons,
            "started_at": started, "finished_at": _now(), "host": _host_info(),
        }
        write_atomic(partial / "metadata.json", json.dumps(metadata, indent=2) + "\n")
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return RunResult(out, [mbps for mbps, _ in checked], [cc for _, cc in checked])


def _with_flow_control(entries: list[dict], flows: Sequence[FlowSpec], log: Path, policy: ValidityPolicy,
                       control: dict) -> tuple[list[dict], dict]:
    """Each ccp flow's entry gains its ``control`` evidence (``ccplab.control.flow_evidence``, None when
    the datapath logged none for its port); a flow beyond ``policy`` makes the run's ``control`` invalid,
    naming the flow."""
    by_port = flow_evidence(log, policy)
    out = []
    for entry, f in zip(entries, flows):
        if f.cca.uses_datapath:
            ev = by_port.get(entry["port"])
            entry = {**entry, "control": ev}
            if ev is not None and not ev["valid"] and control.get("valid", False):
                control = {**control, "valid": False, "reason": (
                    f"the kernel's cubic fallback drove {ev['fallback_share']:.1%} of flow {entry['index']} "
                    f"({entry['label']}, port {entry['port']})'s packets beyond awaiting the algorithm's answers "
                    f"to RTOs ({ev['fallback_pkts']} of {ev['delivered_pkts']} on the fallback, "
                    f"{ev['rto_await_pkts']} of them awaiting, in {log.name}), more than the "
                    f"{policy.max_fallback_share:.1%} allowed (--max-fallback-share)")}
        out.append(entry)
    return out, control


def _iperf3_file(index: int, n_flows: int) -> str:
    return "iperf3.json" if n_flows == 1 else f"iperf3-flow{index}.json"


def _run_flows(flows: Sequence[FlowSpec], scenario: Scenario, rundir: Path) -> tuple[list[dict], dict, str, dict]:
    """Start the daemons in order, run each flow's iperf3 client at its time, stop all; returns
    each flow's iperf3 JSON (in flow order), the receiver's entry of metadata.json, what ended the
    run (``flows`` or ``trace-end``) and each ccp daemon's ``alive_at_end`` (when the flows ended)
    and ``exit_status`` (after the runner stopped it: 0 is a clean exit on SIGTERM)."""
    ccp_daemons: list[Daemon] = []
    with ExitStack() as stack:
        # Every daemon starts at once, none needs another to start: the datapath first (its BPF load is
        # the longest start-up), then the link, then the algorithm; the link's namespaces and the iperf3
        # servers in them are ready while the datapath still loads. The datapath finds the algorithm by
        # its socket whenever it appears; no flow starts before both are ready.
        ccp = any(f.cca.uses_datapath for f in flows)
        datapath_ready = rundir / ".datapath-ready.json"
        if ccp:
            algorithm_bound = appears(_ccp_algorithms(flows)[0].portus_socket)  # no stale socket is taken
            datapath = stack.enter_context(_start_datapath(flows, scenario, rundir, wait=False))
        link = stack.enter_context(_start_link(flows, scenario, rundir, wait=False))
        watched = [link]
        if ccp:
            ccp_daemons = [stack.enter_context(_start_algorithm(flows, rundir, algorithm_bound)), datapath]
            watched += ccp_daemons
        link.wait_ready((rundir / ".link-ready.json").exists, READY_TIMEOUT_S)
        ready = json.loads((rundir / ".link-ready.json").read_text())
        stack.callback(_remove_namespaces_of_a_killed_link, link, ready)  # runs after the link's stop
        if scenario.quickack:
            set_quickack(ready["receiver_netns"])
        servers = [stack.enter_context(_start_iperf_server(ready, rundir, k, len(flows))) for k in range(len(flows))]
        if ccp:
            datapath.wait_ready(datapath_ready.exists, READY_TIMEOUT_S)
        counters = ReceiverCounters(servers[0].proc.pid)
        results, ended_by = _run_iperf_clients(flows, scenario, ready, rundir, watched, counters.sample,
                                               link if scenario.trace_once else None)
        counters.sample()
        alive = [d.running() for d in ccp_daemons]
        if ended_by == "flows" and not link.running():
            raise CcplabError(f"the emulated link died during the run:\n{link.log_tail()}")
        if ccp and ended_by == "flows":
            _wait_for_releases(rundir / "datapath.log", _release_wait_s(flows, scenario))
        # Stop the link (and so its log) as the flow ends, as mm-link ends with its
        # command: stopping the daemons first would add idle time to the log. The ccp
        # daemons stop with it (the flows are over), their clean-ups overlapping the link's.
        if stop_together([link, *reversed(ccp_daemons)])[0] != 0:
            raise CcplabError(f"the emulated link failed while stopping:\n{link.log_tail()}")
    (rundir / ".link-ready.json").unlink(missing_ok=True)
    (rundir / ".datapath-ready.json").unlink(missing_ok=True)
    daemons = {d.name: {"alive_at_end": up, "exit_status": d.proc.returncode if d.proc else None}
               for d, up in zip(ccp_daemons, alive)}
    return results, {"acks": "every-segment" if scenario.quickack else "delayed", **counters.as_json()}, ended_by, daemons


def _release_wait_s(flows: Sequence[FlowSpec], scenario: Scenario) -> float:
    """How long the runner waits for the ccp sockets' release records after the clients exit, s: two
    of the longest base RTTs and 100 ms, the FIN exchange of a socket closed as its client exits."""
    longest_rtt_ms = 2 * scenario.one_way_delay_ms + max(f.extra_delay_ms for f in flows)
    return (2 * longest_rtt_ms + 100) / 1000.0


def _wait_for_releases(log: Path, timeout_s: float) -> bool:
    """Wait until every flow the datapath logged as created in ``log`` is logged as released (each
    release carries that flow's control evidence, `ccplab.control.flow_evidence`), at most ``timeout_s``;
    True when all were. The clients close their sockets as they exit, so the last release is usually
    logged already; a socket still draining its send buffer is not waited for beyond the timeout (its
    flow then has no per-flow evidence)."""
    deadline = time.monotonic() + timeout_s
    while unreleased_flows(log):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def set_quickack(netns: str) -> None:
    """Make TCP in ``netns`` acknowledge every segment at once: every IPv4 route of the namespace gets
    ``quickack 1`` (RTAX_QUICKACK: a socket whose route has it stays in quick-ACK mode, so it never
    delays an ACK). CcplabError with ip's message when a route cannot be changed."""
    shown = subprocess.run(["ip", "-n", netns, "-4", "route", "show", "table", "all"], capture_output=True,
                           text=True)
    routes = [line.split() for line in shown.stdout.splitlines() if line.strip()]
    # local/broadcast routes of the kernel's local table carry no connection's ACKs
    routes = [r for r in routes if r[0] not in ("local", "broadcast", "multicast")]
    if shown.returncode != 0 or not routes:
        raise CcplabError(f"cannot list the routes of {netns}: {shown.stderr.strip() or 'no route'}")
    for route in routes:
        done = subprocess.run(["ip", "-n", netns, "route", "change", *_without_metric(route, "quickack"),
                               "quickack", "1"], capture_output=True, text=True)
        if done.returncode != 0:
            raise CcplabError(f"cannot set quickack on route {' '.join(route)!r} of {netns}: {done.stderr.strip()}")


ROUTE_STATE_WORDS = ("linkdown", "dead", "offload", "trap", "rt_offload", "rt_trap", "notify")
"""Words ``ip route show`` prints about a route's state, which ``ip route change`` does not take."""


def _without_metric(route: list[str], name: str) -> list[str]:
    """A route as ``ip route show`` prints it, without the ``name VALUE`` pair (to be set again) and the
    state words (`ROUTE_STATE_WORDS`)."""
    out, skip = [], False
    for word in route:
        if skip:
            skip = False
        elif word == name:
            skip = True
        elif word not in ROUTE_STATE_WORDS:
            out.append(word)
    return out


class ReceiverCounters:
    """The receiver namespace's TCP segment counters (/proc/PID/net/snmp of a process inside it, the
    iperf3 server), sampled while the flows run: the last sample survives a link that removes the
    namespace at the trace's end."""

    def __init__(self, pid: int) -> None:
        self.path = Path(f"/proc/{pid}/net/snmp")
        self.in_segs: int | None = None
        self.out_segs: int | None = None

    def sample(self) -> None:
        """Read the counters now (kept from the last read if the process is gone)."""
        try:
            lines = [line.split() for line in self.path.read_text().splitlines() if line.startswith("Tcp:")]
            tcp = dict(zip(lines[0][1:], lines[1][1:]))
            self.in_segs, self.out_segs = int(tcp["InSegs"]), int(tcp["OutSegs"])
        except (OSError, IndexError, KeyError, ValueError):
            pass

    def as_json(self) -> dict:
        """``tcp_in_segs``, ``tcp_out_segs`` and ``segments_per_ack`` (null when never read)."""
        ratio = self.in_segs / self.out_segs if self.in_segs is not None and self.out_segs else None
        return {"tcp_in_segs": self.in_segs, "tcp_out_segs": self.out_segs, "segments_per_ack": ratio}


def _remove_namespaces_of_a_killed_link(link: Daemon, ready: dict) -> None:
    """A link killed outright (SIGKILL) could not delete its namespaces: the runner deletes those its
    ready file named, and stops what still runs inside them (``ccplab.cleanup``), so the next run finds
    the host clean."""
    if link.running() or link.proc is None or link.proc.returncode != -signal.SIGKILL:
        return
    for key in ("sender_netns", "emulator_netns", "receiver_netns"):
        if ready.get(key):
            remove_namespace(ready[key])


def _with_measured_times(entries: list[dict], rundir: Path) -> list[dict]:
    """Each flow's entry with ``flow_start_s`` and ``flow_end_s`` (s on the link log's clock): the
    arrival of its first full-size packet and of its last packet. CcplabError naming the flow whose
    data never reached the link."""
    try:
        bounds = transient.flow_bounds_s(rundir / "uplink.log", rundir / FLOW_LOG, [e["port"] for e in entries])
    except (transient.TransientError, OSError) as exc:
        raise CcplabError(f"the run's link log cannot be read: {exc}") from exc
    out = []
    for e, (start, end) in zip(entries, bounds):
        if start is None:
            raise CcplabError(f"flow {e['index']} ({e['spec']}): no data packet of it reached the link")
        out.append({**e, "flow_start_s": start, "flow_end_s": end})
    return out


def link_duration_s(scenario: Scenario) -> float:
    """The link's own time limit, s: the longest a healthy run can need (three daemons' readiness
    waits, the flow, the client's grace). The runner stops the link as the flow ends; this limit
    only matters when the runner could not (it was killed), so the link never outlives it for long."""
    return 3 * READY_TIMEOUT_S + scenario.duration_s + CLIENT_GRACE_S + 10.0


def _start_link(flows: Sequence[FlowSpec], scenario: Scenario, rundir: Path, wait: bool = True) -> Daemon:
    """The link's daemon, started and ready; with ``wait=False`` not started yet (``with`` starts it,
    the caller waits for its ready file)."""
    ready_file = rundir / ".link-ready.json"
    ack_delays = [f"{port_of(k)}={f.extra_delay_ms}" for k, f in enumerate(flows) if f.extra_delay_ms]
    link = Daemon("ccplab-link", [
        project_binary("ccplab-link"), "--uplink-trace", scenario.trace,
        "--one-way-delay-ms", scenario.one_way_delay_ms, "--queue-packets", scenario.queue_packets,
        "--uplink-log", rundir / "uplink.log", "--flow-log", rundir / FLOW_LOG, "--ready-file", ready_file,
        "--duration-s", link_duration_s(scenario),
        *(["--once"] if scenario.trace_once else []),
        *(arg for d in ack_delays for arg in ("--ack-delay", d)),
        *(["--downlink-trace", scenario.downlink_trace] if scenario.downlink_trace is not None else []),
    ], rundir / "link.log")
    return started(link, ready_file.exists) if wait else link


def _ccp_algorithms(flows: Sequence[FlowSpec]) -> list[Cca]:
    """The distinct ccp algorithms of ``flows``, in order of first use (`check_flows` made the names unique)."""
    seen: dict[str, Cca] = {}
    for f in flows:
        if f.cca.uses_datapath:
            seen.setdefault(f.cca.name, f.cca)
    return list(seen.values())


def algorithm_argv(flows: Sequence[FlowSpec]) -> tuple[str, list[str]]:
    """(name, argv) of the one Portus daemon serving every ccp flow: the first ccp algorithm with its
    flags, hosting each further one with ``--also NAME[:FLAG=VALUE...]`` (the suite's binary); an
    external algorithm's own command as given (`check_flows` left it alone with kernel flows)."""
    first, *others = _ccp_algorithms(flows)
    if first.external:
        return f"portus:{first.name}", list(first.command)
    algo = registry.lookup(first.name)
    if not others:
        return algo.binary, [*algo.argv(first.param_dict), "--ipc", "unix"]
    suite = registry.lookup(first.name)
    argv = [str(project_binary(registry.SUITE_BINARY)), first.name,
            *(a for k, v in first.params for a in (f"--{k}", v)), "--ipc", "unix"]
    for cca in others:
        argv += ["--also", ":".join([cca.name, *(f"{k}={v}" for k, v in cca.params)])]
    return suite.binary, argv


def _start_algorithm(flows: Sequence[FlowSpec], rundir: Path, bound: Callable[[], bool] | None = None) -> Daemon:
    """The Portus algorithm's daemon, started and ready (its socket bound). ``bound``: the readiness
    check `appears` gave before anything else started (default: made here)."""
    name, argv = algorithm_argv(flows)
    first = _ccp_algorithms(flows)[0]
    socket = first.portus_socket
    bound = bound or appears(socket)
    daemon = Daemon(name, argv, rundir / "algorithm.log", env=dict(first.env))
    daemon.start()
    try:
        daemon.wait_ready(bound, READY_TIMEOUT_S)
    except CcplabError as exc:
        alive = daemon.running()
        daemon.stop()
        if first.external and alive:
            raise CcplabError(f"{exc}\n{name} never bound its Portus socket {socket} (a Portus binary binds "
                              "/tmp/ccp/<ipc name>, 'portus' unless its command gives --ipc-name; it must use "
                              "unix-socket IPC)") from None
        raise
    except BaseException:
        daemon.stop()
        raise
    return daemon


def datapath_argv(flows: Sequence[FlowSpec], ready_file: Path, scenario: Scenario | None = None) -> list[str]:
    """ccp-datapath's command line: the first ccp algorithm by default and, per ccp flow, a rule
    choosing its algorithm by the flow's receiver port; ``scenario``'s datapath settings
    (``--report-wake-ms``, ``--report-prompt-us``) only when it sets them."""
    rules = [a for k, f in enumerate(flows) if f.cca.uses_datapath
             for a in ("--rule", f"dport={port_of(k)}:{f.cca.name}")]
    first = _ccp_algorithms(flows)[0]
    socket = ["--portus-socket", str(first.portus_socket)] if first.portus_socket != PORTUS_SOCKET else []
    settings = scenario.datapath_args() if scenario is not None else []
    return [str(project_binary("ccp-datapath")), "--congalg", first.name, *rules, *socket, *settings,
            "--ready-file", str(ready_file)]


def _start_datapath(flows: Sequence[FlowSpec], scenario: Scenario, rundir: Path, wait: bool = True) -> Daemon:
    """ccp-datapath's daemon, started and ready (``ccp`` registered); with ``wait=False`` not started yet
    (``with`` starts it, the caller waits for ``.datapath-ready.json``)."""
    ready_file = rundir / ".datapath-ready.json"
    daemon = Daemon("ccp-datapath", datapath_argv(flows, ready_file, scenario), rundir / "datapath.log")
    return started(daemon, ready_file.exists) if wait else daemon


def _start_iperf_server(ready: dict, rundir: Path, index: int, n_flows: int) -> Daemon:
    port = port_of(index)
    log = "iperf3-server.log" if n_flows == 1 else f"iperf3-server-flow{index}.log"
    server = Daemon(f"iperf3 server of flow {index}", netns_exec(
        ready["receiver_netns"], "iperf3", "-s", "-1", "-B", ready["receiver_ip"], "-p", port,
    ), rundir / log, stop_timeout_s=3)
    return started(server, lambda: listening(ready["receiver_netns"], port, server.proc.pid))


@dataclass
class _Client:
    """One flow's iperf3 client while the run goes on."""

    flow: FlowSpec
    index: int
    json_path: Path
    limit_s: float
    proc: subprocess.Popen | None = None
    started_at: float = 0.0


def _run_iperf_clients(flows: Sequence[FlowSpec], scenario: Scenario, ready: dict, rundir: Path,
                       daemons: Sequence[Daemon], on_watch=lambda: None,
                       once_link: Daemon | None = None) -> tuple[list[dict], str]:
    """Start each flow's client at its START_S after the first, wait for all, watching ``daemons``
    (``on_watch()`` at every look); returns each flow's iperf3 JSON and ``flows``, or ``trace-end`` when
    ``once_link`` (the link playing its trace once) stopped at the trace's end, ending the flows.

    A daemon that exits while the flows run fails the run at once (CcplabError naming it, with its last
    log lines), as does a client that fails or outlives its flow by `CLIENT_GRACE_S`.
    """
    clients = [_Client(f, k, rundir / _iperf3_file(k, len(flows)), f.length_s(scenario.duration_s) + CLIENT_GRACE_S)
               for k, f in enumerate(flows)]
    t0 = time.monotonic()
    ended_by = "flows"
    try:
        while True:
            now = time.monotonic()
            on_watch()
            for c in clients:
                if c.proc is None and now - t0 >= c.flow.start_s:
                    _start_client(c, scenario, ready)
            if once_link is not None and _trace_ended(once_link):
                ended_by = "trace-end"
                # the link stopped what ran in its namespaces (the clients write their JSON on SIGTERM)
                wait_exit([c.proc for c in clients if c.proc is not None], 3.0)
                break
            for d in daemons:
                if not d.running():
                    # said at once: stopping the other daemons takes a few seconds more
                    print(f"ccplab: {d.name} exited (status {d.proc.returncode}) while the flows ran; "
                          "stopping the run", file=sys.stderr, flush=True)
                    raise CcplabError(f"{d.name} exited (status {d.proc.returncode}) while the flows ran:\n"
                                      f"{d.log_tail()}")
            if all(c.proc is not None and c.proc.poll() is not None for c in clients):
                break
            for c in clients:
                if c.proc is not None and c.proc.poll() is None and now - c.started_at > c.limit_s:
                    raise CcplabError(f"flow {c.index} ({c.flow}): its iperf3 client did not finish within "
                                      f"{c.limit_s:.0f} s")
            # until a client exits (woken at once), the next client's start, or the next look at the daemons
            starts = [t0 + c.flow.start_s - time.monotonic() for c in clients if c.proc is None]
            running = [c.proc for c in clients if c.proc is not None and c.proc.poll() is None]
            wait_s = min([WATCH_PERIOD_S, *starts])
            if running:
                wait_exit(running, wait_s)
            elif wait_s > 0:
                time.sleep(wait_s)
    finally:
        for c in clients:
            if c.proc is not None and c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()
    return [_client_result(c, ended_by) for c in clients], ended_by


def _trace_ended(link: Daemon) -> bool:
    """Whether the link (run with --once) is stopping, or stopped, because its trace ended (it says so
    in its log before it stops the processes in its namespaces)."""
    try:
        return TRACE_END_STOP.search(link.log_path.read_text(errors="replace")) is not None
    except OSError:
        return False


def _start_client(c: _Client, scenario: Scenario, ready: dict) -> None:
    argv = netns_exec(ready["sender_netns"], "iperf3", "-c", ready["receiver_ip"], "-p", port_of(c.index),
                      "-t", c.flow.length_s(scenario.duration_s), "-C", c.flow.cca.socket_cc, "-J")
    with open(c.json_path, "wb") as out:
        c.proc = subprocess.Popen(supervised(argv), stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                  env=child_env())
    c.started_at = time.monotonic()


def _client_result(c: _Client, ended_by: str = "flows") -> dict:
    """The client's JSON; CcplabError naming the flow when it failed. A flow the trace's end stopped
    (``ended_by`` ``trace-end``) did not fail: its JSON (possibly cut short or missing) is taken as it is."""
    if c.proc is None:
        return {}
    stderr = c.proc.stderr.read().decode(errors="replace").strip() if c.proc.stderr else ""
    text = c.json_path.read_text(errors="replace")
    try:
        result = json.loads(text)
    except ValueError:
        if ended_by == "trace-end":
            return {}
        raise CcplabError(f"flow {c.index} ({c.flow}): iperf3 client failed (status {c.proc.returncode}): "
                          f"{stderr or text.strip()[:300]}") from None
    if "error" in result and ended_by != "trace-end":
        raise CcplabError(f"flow {c.index} ({c.flow}): iperf3 client failed: {result['error']}")
    return result


def _check_iperf(result: dict, flow: FlowSpec, ended_by: str = "flows") -> tuple[float | None, str]:
    """iperf3's receiver throughput (Mbit/s; None for a flow the trace's end stopped: the receiver's
    figures never reached the client) and the sender's congestion control; checks it is the asked one."""
    end = result.get("end", {})
    socket_cc = end.get("sender_tcp_congestion", "")
    if socket_cc and socket_cc != flow.cca.socket_cc:
        raise CcplabError(f"flow {flow} used congestion control {socket_cc!r}, not {flow.cca.socket_cc!r}")
    if ended_by == "trace-end":
        return None, socket_cc
    mbps = end.get("sum_received", {}).get("bits_per_second", 0.0) / 1e6
    return mbps, socket_cc


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _host_info() -> dict:
    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True)
    return {"kernel": platform.release(), "ccplab_commit": commit.stdout.strip() or None,
            "hostname": platform.node(), "time": time.time()}
