"""Real flows through the emulated link (root, BPF, namespaces): the runner end to end.

Each test runs the whole chain: ccplab-trace -> ccplab-link -> (ccp-reno ->
ccp-datapath) -> iperf3 -> mahimahi log -> transient analysis, and checks
that nothing is left behind.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

import transient
from ccplab import cli
from ccplab.binaries import project_binary
from ccplab.cca import kernel_ccs

pytestmark = pytest.mark.network

LINK_MBPS = 12.0


@pytest.fixture
def step_trace(tmp_path, needs_root):
    """A seeded 0 -> 12 Mbit/s step at t = 0 with sigma 2 Mbit/s, 12 s long."""
    path = tmp_path / "step.trace"
    subprocess.run([str(project_binary("ccplab-trace")), "step", "--before-mbps", "0", "--after-mbps", "12",
                    "--at-s", "0", "--duration-s", "12", "--sigma-mbps", "2", "--seed", "7", "--out", str(path)],
                   check=True, capture_output=True)
    return path


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _run(cca: str, trace, out, duration_s: int = 8) -> int:
    return cli.main(["run", "--cca", cca, "--trace", str(trace), "--step", "0:0:12", "--one-way-delay-ms", "25",
                     "--queue-packets", "40", "--duration-s", str(duration_s), "--out", str(out)])


def _assert_left_nothing(before: set[str]) -> None:
    assert _namespaces() <= before, f"namespaces left behind: {_namespaces() - before}"
    assert "ccp" not in kernel_ccs(), "the datapath's congestion control is still registered"
    assert not any(name.startswith("ccp-") for name in _pgrep_names()), "a ccp daemon is still running"


def _pgrep_names() -> list[str]:
    out = subprocess.run(["ps", "-eo", "comm="], capture_output=True, text=True).stdout
    return [line.strip() for line in out.splitlines()]


def test_ccp_reno_flow_is_controlled_by_the_portus_algorithm(step_trace, tmp_path):
    before = _namespaces()
    out = tmp_path / "run"
    assert _run("ccp:reno", step_trace, out) == 0

    meta = json.loads((out / "metadata.json").read_text())
    assert meta["cca"] == "ccp:reno"
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


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_run_cleans_up(step_trace, tmp_path, sig):
    """Ctrl-C (or SIGTERM) in the middle of a ccp run: exit 130, daemons stopped, no partial directory."""
    before = _namespaces()
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "ccplab.cli", "run", "--cca", "ccp:reno", "--trace",
                             str(step_trace), "--one-way-delay-ms", "25", "--queue-packets", "40",
                             "--duration-s", "30", "--out", str(out)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while "ccp" not in kernel_ccs() and time.monotonic() < deadline:  # the datapath is up
            time.sleep(0.1)
        time.sleep(1.0)  # the flow is running
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not out.exists() and not list(tmp_path.glob(".run.partial*"))
    _assert_left_nothing(before)
