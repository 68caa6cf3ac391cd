"""One flow through the emulated link: ``ccplab run``.

Order (each step waits until the previous one is ready):
    1. ccplab-link: namespaces + emulated bottleneck replaying the trace
    2. for ccp:NAME: the Portus algorithm (binds /tmp/ccp/portus), then
       ccp-datapath (registers the struct_ops congestion control ``ccp``)
    3. iperf3 server in the receiver namespace, client in the sender namespace
       with TCP_CONGESTION = NAME (kernel) or ``ccp``
Then everything stops in reverse order. The run directory is assembled under
a hidden partial name and renamed into place only when the run succeeded, so
a failed or interrupted run leaves nothing half-written in the results.

A run killed outright (SIGKILL) still cleans up: its daemons die with it
(``processes.supervised``) and the link always has a duration
(``link_duration_s``). The next run's preflight refuses to start on anything
a killed run left on the host, naming ``ccplab clean``, and removes stale
partial directories beside its own output (see ``ccplab.cleanup``).

Files of a run directory:
    metadata.json   what ran (CCA, scenario, versions, times) - written last;
                    ``flow_start_s``: arrival time (s on the link log's clock) of
                    the first full-size packet of the measured data flow
                    (``transient.flow_start_s`` on uplink.log). The trace and
                    the log start at the link's time 0, before iperf3's control
                    connection; the analysis measures transients from
                    ``flow_start_s``, so the handshake is not counted as the
                    CCA's transient (issue 6). Steps keep their trace times.
    uplink.log      per-packet link log, mahimahi mm-link text format
    iperf3.json     iperf3 client's JSON (-J)
    link.log        ccplab-link's own log
    algorithm.log   the Portus algorithm's log (reports, cwnd updates), ccp only
    datapath.log    ccp-datapath's log, ccp only
    iperf3-server.log
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import transient
from transient.atomic import write_atomic

from . import registry
from .binaries import REPO_ROOT, project_binary, system_binary
from .cca import Cca, DATAPATH_CA, kernel_ccs
from .errors import CcplabError
from .cleanup import find_leftovers, remove_stale_partials
from .processes import Daemon, child_env, supervised
from .scenario import Scenario, check_trace

PORTUS_SOCKET = Path("/tmp/ccp/portus")
BTF_VMLINUX = Path("/sys/kernel/btf/vmlinux")  # struct_ops needs the kernel's BTF
IPERF_PORT = 5201
READY_TIMEOUT_S = 30.0
CLIENT_GRACE_S = 60.0  # iperf3's client may take this long past the flow's duration before it is a failure


@dataclass
class RunResult:
    """A finished run: its directory and iperf3's mean receiver throughput (Mbit/s)."""

    run_dir: Path
    iperf3_mbps: float
    socket_cc: str


def preflight(cca: Cca) -> None:
    """Check the machine can run ``cca``; CcplabError says what is missing."""
    if os.geteuid() != 0:
        raise CcplabError("ccplab run needs root (network namespaces, BPF struct_ops): run it as root")
    left = find_leftovers().host_state()
    if left:
        raise CcplabError("a killed run left this behind:\n  " + "\n  ".join(left) +
                          "\nremove it with `ccplab clean` (as root), then run again")
    system_binary("iperf3")
    system_binary("ip", "iproute2")
    system_binary("setpriv", "util-linux")  # daemons die with the runner (processes.supervised)
    project_binary("ccplab-link")
    if cca.kind == "ccp":
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
        registry.lookup(cca.name).binary_path()


def run_one(cca: Cca, scenario: Scenario, out: Path, run_index: int = 1) -> RunResult:
    """Run one flow of ``cca`` through ``scenario``'s link and save it in ``out``.

    ``out`` must not exist yet (nothing already written is overwritten).
    Raises CcplabError on bad input or a failed daemon; KeyboardInterrupt
    passes through after cleanup. Either way no partial directory remains.
    """
    scenario.validate()
    preflight(cca)
    check_trace(scenario.trace)
    out = out.resolve()
    if out.exists():
        raise CcplabError(f"run directory {out} already exists: choose another --out (nothing was overwritten)")
    remove_stale_partials(out.parent)  # what killed runs left here; incomplete by definition
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    partial.mkdir(parents=True)
    started = _now()
    try:
        iperf = _run_flow(cca, scenario, partial)
        mbps, socket_cc = _check_iperf(iperf, cca)
        metadata = {
            "schema": 1, "cca": cca.base, "cca_params": cca.param_dict, "run": run_index, "scenario": scenario.to_json(),
            "flow_start_s": _flow_start_s(partial / "uplink.log"),
            "files": {"link_log": "uplink.log", "iperf3": "iperf3.json", "link": "link.log",
                      "datapath_log": "datapath.log" if cca.kind == "ccp" else None,
                      "algorithm_log": "algorithm.log" if cca.kind == "ccp" else None},
            "socket_congestion_control": socket_cc, "iperf3_receiver_mbps": mbps,
            "started_at": started, "finished_at": _now(), "host": _host_info(),
        }
        write_atomic(partial / "metadata.json", json.dumps(metadata, indent=2) + "\n")
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return RunResult(out, mbps, socket_cc)


def _run_flow(cca: Cca, scenario: Scenario, rundir: Path) -> dict:
    """Start the daemons in order, run the iperf3 client, stop all; returns iperf3's JSON."""
    with ExitStack() as stack:
        link = stack.enter_context(_start_link(scenario, rundir))
        ready = json.loads((rundir / ".link-ready.json").read_text())
        if cca.kind == "ccp":
            stack.enter_context(_start_algorithm(cca, rundir))
            stack.enter_context(_start_datapath(cca, rundir))
        stack.enter_context(_start_iperf_server(ready, rundir))
        result = _run_iperf_client(cca, scenario, ready, rundir)
        if not link.running():
            raise CcplabError(f"the emulated link died during the run:\n{link.log_tail()}")
        # Stop the link (and so its log) as the flow ends, as mm-link ends with its
        # command: stopping the daemons first would add idle time to the log.
        if link.stop() != 0:
            raise CcplabError(f"the emulated link failed while stopping:\n{link.log_tail()}")
    (rundir / ".link-ready.json").unlink(missing_ok=True)
    (rundir / ".datapath-ready.json").unlink(missing_ok=True)
    return result


def _flow_start_s(uplink_log: Path) -> float:
    """The data flow's time zero in the link log (s); CcplabError when the log shows no data flow."""
    try:
        return transient.flow_start_s(uplink_log)
    except (transient.TransientError, OSError) as exc:
        raise CcplabError(f"the run's link log has no data flow: {exc}") from exc


def _started(daemon: Daemon, is_ready) -> Daemon:
    """Start ``daemon`` and wait until ``is_ready()``; stop it again if it never gets there."""
    daemon.start()
    try:
        daemon.wait_ready(is_ready, READY_TIMEOUT_S)
    except BaseException:
        daemon.stop()
        raise
    return daemon


def link_duration_s(scenario: Scenario) -> float:
    """The link's own time limit, s: the longest a healthy run can need (three daemons' readiness
    waits, the flow, the client's grace). The runner stops the link as the flow ends; this limit
    only matters when the runner could not (it was killed), so the link never outlives it for long."""
    return 3 * READY_TIMEOUT_S + scenario.duration_s + CLIENT_GRACE_S + 10.0


def _start_link(scenario: Scenario, rundir: Path) -> Daemon:
    ready_file = rundir / ".link-ready.json"
    link = Daemon("ccplab-link", [
        project_binary("ccplab-link"), "--uplink-trace", scenario.trace,
        "--one-way-delay-ms", scenario.one_way_delay_ms, "--queue-packets", scenario.queue_packets,
        "--uplink-log", rundir / "uplink.log", "--ready-file", ready_file,
        "--duration-s", link_duration_s(scenario),
        *(["--downlink-trace", scenario.downlink_trace] if scenario.downlink_trace is not None else []),
    ], rundir / "link.log")
    return _started(link, ready_file.exists)


def _start_algorithm(cca: Cca, rundir: Path) -> Daemon:
    algo = registry.lookup(cca.name)
    PORTUS_SOCKET.unlink(missing_ok=True)  # so that its appearance means this daemon bound it
    daemon = Daemon(algo.binary, [*algo.argv(cca.param_dict), "--ipc", "unix"], rundir / "algorithm.log")
    return _started(daemon, PORTUS_SOCKET.exists)


def _start_datapath(cca: Cca, rundir: Path) -> Daemon:
    ready_file = rundir / ".datapath-ready.json"
    daemon = Daemon("ccp-datapath", [
        project_binary("ccp-datapath"), "--congalg", cca.name, "--ready-file", ready_file,
    ], rundir / "datapath.log")
    return _started(daemon, ready_file.exists)


def _start_iperf_server(ready: dict, rundir: Path) -> Daemon:
    server = Daemon("iperf3 server", [
        "ip", "netns", "exec", ready["receiver_netns"], "iperf3", "-s", "-1",
        "-B", ready["receiver_ip"], "-p", IPERF_PORT,
    ], rundir / "iperf3-server.log", stop_timeout_s=3)
    return _started(server, lambda: _listening(ready["receiver_netns"], IPERF_PORT))


def _listening(netns: str, port: int) -> bool:
    done = subprocess.run(["ip", "netns", "exec", netns, "ss", "-Hltn", f"sport = :{port}"],
                          capture_output=True, text=True)
    return bool(done.stdout.strip())


def _run_iperf_client(cca: Cca, scenario: Scenario, ready: dict, rundir: Path) -> dict:
    argv = ["ip", "netns", "exec", ready["sender_netns"], "iperf3", "-c", ready["receiver_ip"],
            "-p", str(IPERF_PORT), "-t", str(scenario.duration_s), "-C", cca.socket_cc, "-J"]
    limit_s = scenario.duration_s + CLIENT_GRACE_S
    try:
        done = subprocess.run(supervised(argv), capture_output=True, text=True, timeout=limit_s, env=child_env())
    except subprocess.TimeoutExpired:
        raise CcplabError(f"iperf3 client did not finish within {limit_s:.0f} s") from None
    (rundir / "iperf3.json").write_text(done.stdout)
    try:
        result = json.loads(done.stdout)
    except ValueError:
        raise CcplabError(f"iperf3 client failed (status {done.returncode}): {done.stderr.strip()}") from None
    if "error" in result:
        raise CcplabError(f"iperf3 client failed: {result['error']}")
    return result


def _check_iperf(result: dict, cca: Cca) -> tuple[float, str]:
    """iperf3's receiver throughput (Mbit/s) and the sender's congestion control; checks it is the asked one."""
    end = result.get("end", {})
    socket_cc = end.get("sender_tcp_congestion", "")
    if socket_cc and socket_cc != cca.socket_cc:
        raise CcplabError(f"the flow used congestion control {socket_cc!r}, not {cca.socket_cc!r}")
    mbps = end.get("sum_received", {}).get("bits_per_second", 0.0) / 1e6
    return mbps, socket_cc


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _host_info() -> dict:
    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True)
    return {"kernel": platform.release(), "ccplab_commit": commit.stdout.strip() or None,
            "hostname": platform.node(), "time": time.time()}
