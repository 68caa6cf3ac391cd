"""Real flows through the emulated link (root, BPF, namespaces): the runner end to end.

Each test runs the whole chain: ccplab-trace -> ccplab-link -> (ccp-reno ->
ccp-datapath) -> iperf3 -> mahimahi log -> transient analysis, and checks
that nothing is left behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import psutil
import pytest

import transient
from ccplab import cli
from ccplab.cca import kernel_ccs
from ccplab.plumbing.processes import RUNNER_ENV

from netlab import data_socket_acked_bytes, link_ready, namespaces as _namespaces, step_trace_file, wait_for

pytestmark = pytest.mark.network

LINK_MBPS = 12.0


@pytest.fixture
def step_trace(tmp_path, needs_root):
    """A seeded 0 -> 12 Mbit/s step at t = 0 with sigma 2 Mbit/s, 12 s long."""
    return step_trace_file(tmp_path / "step.trace", 12, duration_s=12, sigma_mbps=2, seed=7)


def _run(cca: str, trace, out, duration_s: int = 8) -> int:
    return cli.main(["run", "--cca", cca, "--trace", str(trace), "--step", "0:0:12", "--one-way-delay-ms", "25",
                     "--queue-packets", "40", "--duration-s", str(duration_s), "--out", str(out)])


def _assert_left_nothing(before: set[str]) -> None:
    assert _namespaces() <= before, f"namespaces left behind: {_namespaces() - before}"
    assert "ccp" not in kernel_ccs(), "the datapath's congestion control is still registered"
    # every process a run starts carries its runner's pid (in-process runs: this pytest's)
    left = _children_of_runner(os.getpid())
    assert not left, f"processes of the run still running: {left}"


def test_ccp_reno_flow_is_controlled_by_the_portus_algorithm(step_trace, tmp_path):
    before = _namespaces()
    out = tmp_path / "run"
    # a parameter (at its default value) goes to the algorithm and into metadata.json
    assert _run("ccp:reno:init-cwnd-pkts=10", step_trace, out) == 0

    meta = json.loads((out / "metadata.json").read_text())
    assert meta["cca"] == "ccp:reno"
    assert meta["cca_params"] == {"init-cwnd-pkts": "10"}
    assert meta["socket_congestion_control"] == "ccp"  # iperf3's socket used our struct_ops CA

    algo_log = (out / "algorithm.log").read_text()
    reports = re.findall(r"report sid=\d+ .* -> cwnd=(\d+) bytes", algo_log)
    # one report per RTT (50 ms) over ~8 s, with slack for the start: the algorithm is in the loop
    assert len(reports) >= 60, f"only {len(reports)} reports in algorithm.log"
    assert len(set(reports)) > 10, "the algorithm's cwnd never changed"
    assert "flow created" in (out / "datapath.log").read_text()

    # the Portus Reno fills the 12 Mbit/s link: iperf3 and the link log agree
    assert meta["iperf3_receiver_mbps"] > 0.75 * LINK_MBPS
    result = transient.analyze_run(out)
    assert result.metrics.throughput_mbps > 0.75 * LINK_MBPS
    assert result.info["label"] == "ccp:reno init-cwnd-pkts=10", "the label of reports shows the parameters"
    assert result.metrics.utilization > 0.8
    assert result.metrics.p95_queueing_delay_ms <= 40 * 1.2 + 5  # a 40-packet droptail queue at 1 pkt/ms
    _assert_left_nothing(before)


def test_kernel_cubic_flow(step_trace, tmp_path):
    before = _namespaces()
    out = tmp_path / "run"
    assert _run("kernel:cubic", step_trace, out, duration_s=6) == 0
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["socket_congestion_control"] == "cubic"
    assert not (out / "algorithm.log").exists()
    assert transient.analyze_run(out).metrics.throughput_mbps > 0.7 * LINK_MBPS
    _assert_left_nothing(before)


def test_compare_writes_the_report(step_trace, tmp_path):
    before = _namespaces()
    out = tmp_path / "cmp"
    code = cli.main(["compare", "--cca", "kernel:reno,ccp:cubic", "--runs", "1", "--trace", str(step_trace),
                     "--one-way-delay-ms", "25", "--queue-packets", "40", "--duration-s", "6", "--out", str(out)])
    assert code == 0
    assert sorted(p.parent.name + "/" + p.name for p in (out / "runs").glob("*/run-*")) == [
        "ccp-cubic/run-1", "kernel-reno/run-1"]
    runs = transient.analyze_results(out)[0]
    assert set(runs["cca"]) == {"kernel:reno", "ccp:cubic"}
    html = (out / "report.html").read_text()
    assert "ccp:cubic" in html and "kernel:reno" in html and "Normalized Area" in html
    assert all(p.stat().st_size > 1000 for p in (out / "plots").glob("*.png"))
    _assert_left_nothing(before)


def _wait_for_ccp_data_flow(proc, partial, timeout_s: float = 40.0, min_acked: int = 200_000) -> None:
    """Return once the run's iperf3 data socket, under the ``ccp`` CA, has had ``min_acked`` bytes acked.

    Fails at once, with the runner's stderr, if the runner ``proc`` exits first.
    """
    def alive(signal_value):
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            pytest.fail(f"ccplab run exited with status {proc.returncode} before its flow ran: {err}")
        return signal_value

    ready = wait_for(lambda: alive(link_ready(partial)), timeout_s, f"the link's ready file in {partial}")
    wait_for(lambda: alive(data_socket_acked_bytes(ready, "ccp") >= min_acked), timeout_s,
             f"a ccp data socket with {min_acked} bytes acked in namespace {ready['sender_netns']}")


def _start_ccp_reno_run(trace, out) -> subprocess.Popen:
    """`ccplab run` of ccp:reno over ``trace`` (25 ms one way, 40-packet queue, 30 s) into ``out``, in the
    background with stderr piped: long enough to be interrupted mid-flow."""
    return subprocess.Popen([sys.executable, "-m", "ccplab.cli", "run", "--cca", "ccp:reno", "--trace",
                             str(trace), "--one-way-delay-ms", "25", "--queue-packets", "40",
                             "--duration-s", "30", "--out", str(out)], stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_run_cleans_up(step_trace, tmp_path, sig):
    """Ctrl-C (or SIGTERM) in the middle of a ccp run: exit 130, daemons stopped, no partial directory."""
    before = _namespaces()
    out = tmp_path / "run"
    proc = _start_ccp_reno_run(step_trace, out)
    try:
        _wait_for_ccp_data_flow(proc, tmp_path / f".run.partial-{proc.pid}")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not out.exists() and not list(tmp_path.glob(".run.partial*"))
    _assert_left_nothing(before)


def _children_of_runner(pid: int) -> list[int]:
    """Processes that carry runner ``pid`` in their environment (its daemons, iperf3s)."""
    found = []
    for p in psutil.process_iter(["pid", "environ"]):
        if (p.info.get("environ") or {}).get(RUNNER_ENV) == str(pid):
            found.append(p.pid)
    return found


def test_sigkilled_run_leaves_nothing_and_the_next_run_succeeds(step_trace, tmp_path, capsys):
    """SIGKILL of `ccplab run` mid-flow (no cleanup code can run in it)."""
    before = _namespaces()
    out = tmp_path / "run"
    proc = _start_ccp_reno_run(step_trace, out)
    partial = tmp_path / f".run.partial-{proc.pid}"
    try:
        _wait_for_ccp_data_flow(proc, partial)
        assert len(_children_of_runner(proc.pid)) >= 5  # link, algorithm, datapath, 2 x iperf3
    finally:
        proc.kill()
        proc.wait(10)
    # its daemons die with it: the link deletes its namespaces, the datapath unregisters ccp
    wait_for(lambda: not _children_of_runner(proc.pid) and _namespaces() <= before and "ccp" not in kernel_ccs(),
             20, f"the killed runner's processes {_children_of_runner(proc.pid)}, namespaces "
                 f"{_namespaces() - before} and ccp registration to go")
    # only its partial directory is left, and ccplab clean finds exactly that
    assert partial.is_dir() and not out.exists()
    assert cli.main(["clean", "--dry-run", str(tmp_path)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line for line in listed if "partial" in line] == [f"would remove: partial run directory {partial}"]
    # the next run into the same place removes the stale partial directory and succeeds
    assert _run("ccp:reno", step_trace, out, duration_s=4) == 0
    assert json.loads((out / "metadata.json").read_text())["socket_congestion_control"] == "ccp"
    assert not list(tmp_path.glob(".run.partial*"))
    _assert_left_nothing(before)


def test_preflight_names_ccplab_clean_for_a_left_namespace(step_trace, tmp_path, capsys):
    """A namespace named like the link's with no ccplab-link alive blocks the next run until `ccplab clean`."""
    name = "ns-left-zzTEST"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        code = _run("kernel:cubic", step_trace, tmp_path / "run", duration_s=2)
        err = capsys.readouterr().err
        assert code == 2
        assert f"network namespace {name}" in err and "ccplab clean" in err
        assert not (tmp_path / "run").exists()
        assert cli.main(["clean"]) == 0
        assert f"deleted network namespace {name}" in capsys.readouterr().out
        assert name not in _namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_compare_with_a_step_up_and_a_step_down(tmp_path, needs_root):
    """The demo's two kinds of step , scaled to 8 s: 0 -> 12 at 0 s, 12 -> 4 Mbit/s at 4 s."""
    before = _namespaces()
    out = tmp_path / "cmp"
    code = cli.main(["compare", "--cca", "kernel:cubic", "--runs", "1", "--step", "0:0:12", "--step", "4:12:4",
                     "--sigma-mbps", "0", "--one-way-delay-ms", "25", "--queue-packets", "40", "--duration-s", "8",
                     "--out", str(out)])
    assert code == 0
    run = out / "runs" / "kernel-cubic" / "run-1"
    meta = json.loads((run / "metadata.json").read_text())
    assert [(s["at_s"], s["from_mbps"], s["to_mbps"]) for s in meta["scenario"]["steps"]] == [(0, 0, 12), (4, 12, 4)]
    # the data flow starts after iperf3's control connection, well inside the first second
    assert 0 < meta["flow_start_s"] < 1.0
    # the link offered 12 Mbit/s (1 packet/ms) before 4 s and 4 Mbit/s after: count its delivery opportunities
    opportunities = [int(line.split()[0]) for line in (run / "uplink.log").read_text().splitlines()
                     if not line.startswith("#") and line.split()[1] == "#"]
    first = sum(1000 <= t < 4000 for t in opportunities) / 3.0
    second = sum(5000 <= t < 7000 for t in opportunities) / 2.0
    assert 990 <= first <= 1010 and 325 <= second <= 342, (first, second)
    # the analysis scores both: the start from the data flow's time zero, and the step down
    steps = transient.analyze_results(out)[1].sort_values("at_s")
    assert list(steps["to_mbps"]) == [12.0, 4.0]
    assert list(steps["at_s"]) == pytest.approx([meta["flow_start_s"], 4.0], abs=0.002)
    _assert_left_nothing(before)
