"""Competing flows through one emulated bottleneck (root, BPF, namespaces): per-flow attribution is
exact, a newcomer halves the first flow's share, and kernel and ccp flows share one run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import transient
from transient.flowlog import attribute_flows, read_flow_ports
from ccplab import cli
from ccplab.cca import kernel_ccs

from netlab import data_socket_acked_bytes, link_ready, namespaces as _namespaces, step_trace_file, wait_for

pytestmark = pytest.mark.network

LINK_MBPS = 12.0


@pytest.fixture
def flat_trace(tmp_path, needs_root):
    """A constant 12 Mbit/s trace (one delivery opportunity per ms)."""
    return step_trace_file(tmp_path / "flat.trace", LINK_MBPS, duration_s=20, sigma_mbps=0, seed=1)


def _run_args(flows: list[str], trace, out, duration_s: int, queue_packets: int = 60,
              one_way_delay_ms: int = 20) -> list[str]:
    return ["run", *(a for f in flows for a in ("--flow", f)), "--trace", str(trace), "--one-way-delay-ms",
            str(one_way_delay_ms), "--queue-packets", str(queue_packets), "--duration-s", str(duration_s),
            "--out", str(out)]


def _attributed(run, meta):
    """(events, flow index of each event) of a run's link log."""
    events = transient.read_link_log(run / "uplink.log").events
    flow = attribute_flows(events, read_flow_ports(run / "uplink.flows"), {f["port"]: f["index"] for f in meta["flows"]},
                           "uplink.log", "uplink.flows")
    return events, flow


def _per_flow_departed_bytes(run, meta) -> tuple[dict[int, int], int]:
    events, flow = _attributed(run, meta)
    dep = (events["kind"] == "departure").to_numpy()
    sizes = events["bytes"].to_numpy()
    per_flow = {f["index"]: int(sizes[dep & (flow == f["index"])].sum()) for f in meta["flows"]}
    return per_flow, int(sizes[dep].sum())


def test_a_newcomer_halves_the_first_flows_share_and_attribution_is_exact(flat_trace, tmp_path):
    before = _namespaces()
    out = tmp_path / "run"
    # RTT 10 ms and a 3-BDP queue: cubic shares the link within a few seconds (at RTT 40 ms it kept
    # 0.72 over the last 3 s of a 14 s run)
    assert cli.main(_run_args(["kernel:cubic", "kernel:cubic@6"], flat_trace, out, duration_s=14, queue_packets=30,
                              one_way_delay_ms=5)) == 0
    meta = json.loads((out / "metadata.json").read_text())
    assert [f["port"] for f in meta["flows"]] == [5201, 5202]
    assert meta["label"] == "kernel:cubic vs kernel:cubic@6"
    second_start = meta["flows"][1]["flow_start_s"]
    # the runner starts the newcomer 6 s after the first flow: its first packet of any size (iperf3's
    # control SYN) reaches the link then. Its first full-size packet (flow_start_s) can come a second or
    # more later: the full drop-tail queue may drop a handshake packet, which waits for the 1 s SYN RTO.
    events, flow = _attributed(out, meta)
    t = events["time_ms"].to_numpy() / 1000.0
    arrived = (events["kind"] == "arrival").to_numpy()
    first_packet = [t[arrived & (flow == f["index"])].min() for f in meta["flows"]]
    assert 5.8 < first_packet[1] - first_packet[0] < 6.5, first_packet
    assert first_packet[1] <= second_start < first_packet[1] + 4, (first_packet, meta["flows"])

    # every departure belongs to one of the two flows (or iperf3's control chatter, port-attributed too)
    per_flow, total = _per_flow_departed_bytes(out, meta)
    assert sum(per_flow.values()) >= 0.999 * total, (per_flow, total)
    # each flow's payload through the link lies between what its iperf3 receiver counted and what its
    # sender wrote (1% slack each way): iperf3 stops counting when TEST_END arrives on the control
    # connection, which overtakes data still waiting in the sender's socket buffer, and the link stops
    # as the clients end, before all of that buffer has left. Full-size packets (1500 IP + 4 TUN bytes)
    # carry 1448 payload bytes (TCP with timestamps); the flows differ 4x here, so a wrong attribution fails.
    dep = (events["kind"] == "departure").to_numpy()
    sizes = events["bytes"].to_numpy()
    for f in meta["flows"]:
        end = json.loads((out / f["iperf3"]).read_text())["end"]
        payload = int((dep & (flow == f["index"]) & (sizes == 1504)).sum()) * 1448
        received, sent = end["sum_received"]["bytes"], end["sum_sent"]["bytes"]
        assert 0.99 * received <= payload <= 1.01 * sent, (f["index"], received, payload, sent)

    # the first flow has the link alone, then about half of it
    def share(lo, hi):
        window = dep & (t >= lo) & (t < hi)
        return sizes[window & (flow == 0)].sum() / sizes[window].sum()

    alone = share(second_start - 4, second_start)
    shared = share(second_start + 4, meta["flows"][0]["flow_end_s"] - 0.5)
    assert alone > 0.97, alone
    assert 0.25 < shared < 0.75, shared  # about half
    assert _namespaces() <= before


def test_kernel_and_ccp_flows_share_one_run_each_with_its_own_congestion_control(flat_trace, tmp_path):
    before = _namespaces()
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "ccplab.cli",
                             *_run_args(["ccp:cubic", "kernel:cubic"], flat_trace, out, duration_s=6)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        partial = tmp_path / f".run.partial-{proc.pid}"
        ready = wait_for(lambda: link_ready(partial), 40, f"the link's ready file in {partial}")
        # ss inside the sender namespace: the socket to flow 0's port runs ccp, the one to flow 1's cubic
        wait_for(lambda: data_socket_acked_bytes(ready, "ccp", 5201) > 100_000
                 and data_socket_acked_bytes(ready, "cubic", 5202) > 100_000, 30,
                 "a ccp socket to port 5201 and a cubic socket to port 5202 carrying data")
        assert data_socket_acked_bytes(ready, "cubic", 5201) == 0, "flow 0's data socket is not cubic"
        assert data_socket_acked_bytes(ready, "ccp", 5202) == 0, "flow 1's data socket is not ccp"
    finally:
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    meta = json.loads((out / "metadata.json").read_text())
    assert [f["socket_congestion_control"] for f in meta["flows"]] == ["ccp", "cubic"]
    assert "flow created" in (out / "datapath.log").read_text()
    # the ccp flow's own evidence: the algorithm the datapath picked and who drove its packets
    evidence = meta["flows"][0]["control"]
    assert evidence["algorithm"] == "cubic" and evidence["valid"], evidence
    link_pkts = meta["flows"][0]["iperf3_receiver_mbps"] * 1e6 / 8 * 6 / 1448
    assert 0.5 * link_pkts < evidence["delivered_pkts"] < 2 * link_pkts, (evidence, link_pkts)
    assert "control" not in meta["flows"][1], "a kernel flow has no ccp evidence"
    assert all(d["alive_at_end"] and d["exit_status"] == 0 for d in meta["daemons"].values()), meta["daemons"]
    assert len(meta["daemons"]) == 2, meta["daemons"]
    for f in meta["flows"]:
        assert f["iperf3_receiver_mbps"] > 0.2 * LINK_MBPS, meta["flows"]
    assert _namespaces() <= before and "ccp" not in kernel_ccs()


def test_a_flow_with_extra_delay_sees_a_longer_rtt(flat_trace, tmp_path):
    """``+60``: that flow's RTT is 60 ms longer; a 5-packet queue keeps queueing under 5 ms for both."""
    out = tmp_path / "run"
    assert cli.main(_run_args(["kernel:cubic", "kernel:cubic+60"], flat_trace, out, duration_s=5,
                              queue_packets=5)) == 0
    rtts = []
    for f in json.loads((out / "metadata.json").read_text())["flows"]:
        streams = json.loads((out / f["iperf3"]).read_text())["end"]["streams"]
        rtts.append(streams[0]["sender"]["min_rtt"] / 1000.0)  # ms
    assert 40 <= rtts[0] <= 47, rtts  # iperf3's min_rtt: the smallest smoothed RTT it sampled
    assert 57 <= rtts[1] - rtts[0] <= 66, rtts


def test_coexist_runs_every_ordered_pair_and_each_alone_and_writes_the_matrix(tmp_path):
    out = tmp_path / "co"
    assert cli.main(["coexist", "--cca", "kernel:cubic", "--cca", "kernel:reno", "--runs", "1",
                     "--second-start-s", "3", "--duration-s", "7", "--capacity-mbps", "12",
                     "--one-way-delay-ms", "20", "--out", str(out)]) == 0
    entries = sorted(p.name for p in (out / "runs").iterdir())
    assert entries == ["kernel-cubic", "kernel-cubic__kernel-cubic@3", "kernel-cubic__kernel-reno@3",
                       "kernel-reno", "kernel-reno__kernel-cubic@3", "kernel-reno__kernel-reno@3"]
    matrix = {(r["first"], r["second"]): r for r in __import__("csv").DictReader((out / "coexist.csv").open())}
    assert set(matrix) == {(a, b) for a in ("kernel:cubic", "kernel:reno") for b in ("kernel:cubic", "kernel:reno")}
    for row in matrix.values():
        assert 0.05 < float(row["first_share"]) < 0.95, row  # both flows got some of the link
        assert 0.5 <= float(row["jain"]) <= 1.0, row
        assert 0.0 <= float(row["throughput_harm"]) <= 1.0, row  # against the second CCA's alone run
    assert (out / "plots" / f"coexist-first-share-{json.loads((out / 'scenario.json').read_text())['scenario']['name']}.png").exists()
    assert "coexistence matrix" in (out / "report.html").read_text()
