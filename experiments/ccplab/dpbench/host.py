"""The host side of the benchmark: preflight, the BPF statistics sysctl, the reference CCA, the
namespaces and `Bench`, which runs one measurement at a time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import psutil

from .. import registry
from ..binaries import project_binary, system_binary
from ..cca import DATAPATH_CA, PORTUS_SOCKET, kernel_ccs
from ..errors import CcplabError
from ..plumbing.netns import (VethPair, listening, namespaces_matching, netns_exec, remove_namespace,
                              veth_namespaces, wait_no_connections)
from ..plumbing.processes import READY_TIMEOUT_S, Daemon, appears, child_env, run_tool, started, supervised
from .measure import (PROC_STAT, IperfFigures, Measurement, RunCpu, WindowSample, bpf_ns_per_ack,
                      bpf_ns_per_ack_by_prog, busy_fraction, ccp_prog_costs, children_ticks, command_latency_us,
                      cpu_counters, cpu_ticks_of, crossing_messages, datapath_stats, iperf_figures, ksoftirqd_pids, max_prog_id,
                      own_fraction, per_flow_rates, reference_costs, reference_ns_per_ack, TcpSegments, tcp_segments,
                      bpf_cpu_share)
from .plan import (ALGORITHM, ALGORITHM_LOG_FILTER, DATAPATH_ARGS_OF_MODE, DEFAULT_MODES, FOLD_OF_MODE,
                   NAMESPACE_SYSCTLS, OMIT_S, REFERENCE_CA, REFERENCE_MODE, REFERENCE_SOURCE, paced_stream_rate,
                   steady_window)

BPF_STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")
NS_PREFIX = "dpbench"
NS_NAME = re.compile(rf"^{NS_PREFIX}-(snd|rcv)-(\d+)$")
SENDER_IP, RECEIVER_IP, PREFIX_LEN = "10.203.0.1", "10.203.0.2", 24
MTU = 1500
IPERF_PORT = 5201
CLIENT_GRACE_S = 30.0
STATS_SUFFIX = "datapath-stats.json"
"""How each ccp run's stats file (``ccp-datapath --stats-file``) is named in the work directory, after the run."""


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


def datapath_argv(mode: str, ready_file: Path, stats_file: Path) -> list[str]:
    """ccp-datapath's command line for a run of ``mode`` (a ccp mode): its fold flags, the algorithm,
    the file whose appearance says it is ready and the stats file it writes at exit (`datapath_stats`)."""
    return [str(project_binary("ccp-datapath")), *DATAPATH_ARGS_OF_MODE[mode], "--congalg", ALGORITHM,
            "--ready-file", str(ready_file), "--stats-file", str(stats_file)]


def _segment_rates(segs: TcpSegments, fig: IperfFigures, ns_per_ack: float | None) -> dict[str, float | None]:
    """Measurement's segment fields: ACKs and data segments per second of the iperf3 run, and the
    BPF time they imply as a share of all cores."""
    if fig.seconds <= 0:
        return {"acks_per_s": None, "segs_out_per_s": None, "bpf_cpu": None}
    acks_per_s = segs.in_segs / fig.seconds
    return {"acks_per_s": acks_per_s, "segs_out_per_s": segs.out_segs / fig.seconds,
            "bpf_cpu": bpf_cpu_share(ns_per_ack, acks_per_s, os.cpu_count() or 1)}


class Bench:
    """The host side of one benchmark: namespaces, a persistent iperf3 server, and per run the
    Portus algorithm and ccp-datapath (fresh per run, so their counters cover that run only)."""

    def __init__(self, stack: ExitStack, workdir: Path, duration_s: int, algorithm_params: dict[str, str],
                 omit_s: int = OMIT_S, pin_cpu: int | None = None):
        self.workdir = workdir
        self.pin_cpu = pin_cpu
        self.duration_s = duration_s
        self.window = steady_window(duration_s, omit_s)
        self.algorithm_params = algorithm_params
        self.snd, self.rcv = stack.enter_context(veth_namespaces(bench_namespaces()))
        server = Daemon("iperf3 server", netns_exec(self.rcv, "iperf3", "-s", "-B", RECEIVER_IP, "-p", IPERF_PORT),
                        workdir / "iperf3-server.log", stop_timeout_s=3)
        stack.enter_context(started(server, lambda: listening(self.rcv, IPERF_PORT, server.proc.pid)))
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
                result, cpu, segs = self._client(REFERENCE_CA, flows, paced, [])
                ns = reference_ns_per_ack(reference_costs(_bpftool_progs(), first_id))
            fig = self._checked(result, REFERENCE_CA, flows)
            return Measurement(mode, flows, paced, rep, fig.gbps, cpu.busy, cpu.own, fig.mean_rtt_us,
                               bpf_ns_per_ack=ns, own_cpu_run=cpu.own_run, **_segment_rates(segs, fig, ns))
        if fold is None:
            result, cpu, segs = self._client("cubic", flows, paced, [])
            fig = self._checked(result, "cubic", flows)
            return Measurement(mode, flows, paced, rep, fig.gbps, cpu.busy, cpu.own, fig.mean_rtt_us,
                               own_cpu_run=cpu.own_run, **_segment_rates(segs, fig, None))
        log = self.workdir / f"run{self.runs:02d}-{mode}-{flows}-{'paced' if paced else 'full'}-datapath.log"
        stats_file = log.with_name(log.name.replace("datapath.log", STATS_SUFFIX))
        with ExitStack() as stack:
            algo = registry.lookup(ALGORITHM)
            algorithm = stack.enter_context(started(
                Daemon(algo.binary, [*algo.argv(self.algorithm_params), "--ipc", "unix"],
                       log.with_name(log.name.replace("datapath", "algorithm")),
                       env={"RUST_LOG": ALGORITHM_LOG_FILTER}), appears(PORTUS_SOCKET)))
            first_id = max_prog_id(_bpftool_progs())
            ready = self.workdir / ".datapath-ready.json"
            datapath = stack.enter_context(started(
                Daemon("ccp-datapath", datapath_argv(mode, ready, stats_file), log), appears(ready)))
            result, cpu, segs = self._client(DATAPATH_CA, flows, paced, [datapath.proc.pid, algorithm.proc.pid])
            costs = ccp_prog_costs(_bpftool_progs(), first_id, datapath.proc.pid)
            status = datapath.stop()
        fig = self._checked(result, DATAPATH_CA, flows)
        if status != 0:
            raise CcplabError(f"ccp-datapath exited with status {status}:\n{datapath.log_tail()}")
        stats = datapath_stats(stats_file)
        cc_ns, all_ns = bpf_ns_per_ack(costs)
        by_prog = bpf_ns_per_ack_by_prog(costs)
        per_s, per_rtt = per_flow_rates(crossing_messages(stats, fold), fig.seconds, flows, fig.mean_rtt_us)
        p50, p99 = command_latency_us(stats, fold)
        return Measurement(mode, flows, paced, rep, fig.gbps, cpu.busy, cpu.own, fig.mean_rtt_us, cpu.daemons,
                           cc_ns, all_ns, per_s, per_rtt, p50, p99, by_prog,
                           own_cpu_run=cpu.own_run, daemons_cpu_run=cpu.daemons_run,
                           **_segment_rates(segs, fig, all_ns))

    def _client(self, cc: str, flows: int, paced: bool,
                daemon_pids: list[int]) -> tuple[dict, "RunCpu", TcpSegments]:
        """Run the iperf3 client; its JSON result, the CPU shares over the steady window (from
        ``omit_s`` after its start to ``WINDOW_TAIL_S`` before its end, :func:`steady_window`) and
        over its whole lifetime, and the sender namespace's TCP segments over that lifetime."""
        argv = netns_exec(self.snd, "iperf3", "-c", RECEIVER_IP, "-p", IPERF_PORT, "-t", self.duration_s,
                          "-P", flows, "-C", cc, "-J", *(["-b", paced_stream_rate(flows)] if paced else []),
                          *([] if self.pin_cpu is None else ["-A", f"{self.pin_cpu},{self.pin_cpu}"]))
        limit_s = self.duration_s + CLIENT_GRACE_S
        window_start_s, window_end_s = self.window
        # iperf3 3.x refuses a client while the server still finishes a test ("the server is busy")
        wait_no_connections(self.rcv, IPERF_PORT, READY_TIMEOUT_S)
        segs_before = self._sender_segments()
        pids = [self.server_pid, *self.ksoftirqd_pids]
        before, pids_before, daemons_before = cpu_counters(PROC_STAT.read_text()), cpu_ticks_of(pids), cpu_ticks_of(daemon_pids)
        child_before = children_ticks()
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
        whole_client = children_ticks() - child_before
        after, pids_after, daemons_after = cpu_counters(PROC_STAT.read_text()), cpu_ticks_of(pids), cpu_ticks_of(daemon_pids)
        segs = self._sender_segments() - segs_before
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
            return json.loads(out), cpu, segs
        except ValueError:
            raise CcplabError(f"iperf3 client failed (status {client.returncode}): {err.strip()}") from None

    def _sender_segments(self) -> TcpSegments:
        return tcp_segments(run_tool(netns_exec(self.snd, "cat", "/proc/net/snmp"),
                                     f"reading /proc/net/snmp in namespace {self.snd}"))

    @staticmethod
    def _window_sample(client: subprocess.Popen, pids: Sequence[int], daemon_pids: Sequence[int]) -> "WindowSample | None":
        """CPU counters at one edge of the steady window; None when the client has already exited."""
        if client.poll() is not None:
            return None
        try:
            client_ticks = cpu_ticks_of([client.pid])
        except CcplabError:  # exited between the poll and the read
            return None
        daemon_ticks = cpu_ticks_of(daemon_pids)
        return WindowSample(cpu_counters(PROC_STAT.read_text()),
                            own_ticks=client_ticks + cpu_ticks_of(pids) + daemon_ticks, daemon_ticks=daemon_ticks)

    @staticmethod
    def _checked(result: dict, cc: str, flows: int) -> IperfFigures:
        fig = iperf_figures(result)
        if fig.sender_cc and fig.sender_cc != cc:
            raise CcplabError(f"the flows used congestion control {fig.sender_cc!r}, not {cc!r}")
        if fig.streams != flows:
            raise CcplabError(f"iperf3 ran {fig.streams} streams, not {flows}")
        return fig
