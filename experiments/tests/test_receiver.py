"""The contest's link on real flows: a receiver that ACKs every segment, and a trace played once.

Needs root, namespaces and the built binaries (fails naming what is missing);
run under the host lock: ``flock /tmp/ccplab-netlab.lock pytest experiments/tests/test_receiver.py``.
"""

from __future__ import annotations

import csv
import json

import pytest

import transient
from ccplab import cli

from netlab import namespaces as _namespaces

DATA_BYTES = 1000  # a departure this large is a data segment (ACK-only and control packets are far smaller)


def _constant_trace(path, ms: int):
    """One 1504-byte opportunity per ms (12 Mbit/s) for ``ms`` ms."""
    path.write_text("".join(f"{t}\n" for t in range(1, ms + 1)))
    return path


def _run(trace, out, *extra) -> dict:
    assert cli.main(["run", "--cca", "kernel:cubic", "--trace", str(trace), "--one-way-delay-ms", "20",
                     "--queue-packets", "100", "--duration-s", "5", "--out", str(out), *extra]) == 0
    return json.loads((out / "metadata.json").read_text())


def test_a_route_as_shown_becomes_a_route_to_change():
    from ccplab.run import _without_metric

    shown = "10.2.1.0/24 dev veth1 proto kernel scope link src 10.2.1.1 quickack 1 linkdown".split()
    assert _without_metric(shown, "quickack") == \
        "10.2.1.0/24 dev veth1 proto kernel scope link src 10.2.1.1".split()
    assert _without_metric("default via 10.2.1.2 dev veth1".split(), "quickack") == \
        "default via 10.2.1.2 dev veth1".split()


def test_the_link_log_line_of_a_trace_end_is_recognised(tmp_path):
    from ccplab.plumbing.processes import Daemon
    from ccplab.run import _trace_ended

    log = tmp_path / "link.log"
    link = Daemon("ccplab-link", ["true"], log)
    for text, ended in (("INFO ccplab_link: stopping stop=Duration arrivals=3\n", False),
                        ("INFO ccplab_link: stopping stop=TraceEnd arrivals=3\n", True),
                        ("\x1b[3mstop\x1b[0m\x1b[2m=\x1b[0mTraceEnd\n", True)):
        log.write_text(text)
        assert _trace_ended(link) is ended, text


@pytest.mark.network
def test_quickack_receiver_acks_every_segment_delayed_acks_every_second(tmp_path, needs_root):
    before = _namespaces()
    trace = _constant_trace(tmp_path / "c12.trace", 10_000)
    per_ack = {}
    for name, extra in (("delayed", ()), ("every-segment", ("--quickack",))):
        meta = _run(trace, tmp_path / name, *extra)
        rec = meta["receiver"]
        assert rec["acks"] == name and meta["scenario"]["quickack"] == (name == "every-segment")
        # the receiver's TCP counters against the link's own count of the data segments it delivered
        dep = transient.read_link_log(tmp_path / name / "uplink.log").events
        data = int(((dep["kind"] == "departure") & (dep["bytes"] >= DATA_BYTES)).sum())
        assert rec["tcp_in_segs"] >= 0.9 * data, (rec, data)
        per_ack[name] = data / rec["tcp_out_segs"]
        print(f"{name}: {rec['tcp_in_segs']} segments in, {rec['tcp_out_segs']} out, "
              f"{data} data departures on the link: {per_ack[name]:.2f} data packets per ACK")
        assert rec["segments_per_ack"] == pytest.approx(rec["tcp_in_segs"] / rec["tcp_out_segs"])
    assert 0.9 <= per_ack["every-segment"] <= 1.15, per_ack
    assert per_ack["delayed"] >= 1.4, per_ack  # 1.65 measured on this link (quick-ACK mode at the start)
    assert _namespaces() <= before


@pytest.mark.network
def test_contest_plays_the_trace_once_and_scores_to_its_end(tmp_path, needs_root):
    before = _namespaces()
    down = _constant_trace(tmp_path / "c12-4s.down", 4000)
    down.with_suffix(".up").write_text(down.read_text())
    out = tmp_path / "contest"
    # the flow would run 4 s from its start, past the 4 s trace (which starts at the control connection)
    assert cli.main(["contest", "--trace", str(down), "--cca", "kernel:cubic", "--out", str(out)]) == 0
    run_dir = out / "runs" / "kernel-cubic" / "run-1"
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["ended_by"] == "trace-end" and meta["scenario"]["trace_once"]
    assert meta["receiver"]["acks"] == "every-segment"
    assert meta["iperf3_receiver_mbps"] is None, "the trace's end cut the flow before iperf3's own figures"
    ev = transient.read_link_log(run_dir / "uplink.log").events
    assert int(ev["time_ms"].max()) <= 4000, "nothing is logged after the trace's end"
    assert int(ev[ev["kind"] == "departure"]["time_ms"].max()) >= 3900, "the link delivered up to the end"
    with open(out / "runs.csv") as f:
        row = next(csv.DictReader(f))
    assert float(row["window_end_s"]) == 4.0
    assert float(row["window_start_s"]) == pytest.approx(meta["flow_start_s"], abs=0.001)
    assert float(row["capacity_mbps"]) == pytest.approx(1504 * 8 / 1000, rel=0.01)
    assert 0.8 <= float(row["segments_per_ack"]) <= 1.2
    assert json.loads((out / "contest.json").read_text())["receiver"] == "ACK every segment"
    assert _namespaces() <= before
