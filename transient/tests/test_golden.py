"""Whole-run metrics against mahimahi's own mm-throughput-graph on real ccplab-link logs.

The logs and the figures the reference script printed for them are in
golden/ (README.md there says how they were recorded and the command used).
The script prints rates to 0.01 Mbit/s, utilization to 0.1 % and delays to
whole ms; each figure of ours, printed the same way, must be identical.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from transient import link_metrics, read_link_log

GOLDEN = Path(__file__).parent / "golden"
FIGURES = json.loads((GOLDEN / "figures.json").read_text())["logs"]


@pytest.fixture(params=sorted(FIGURES), ids=lambda name: name.removesuffix(".log.gz"))
def golden(request, tmp_path):
    name = request.param
    log = tmp_path / name.removesuffix(".gz")
    log.write_bytes(gzip.decompress((GOLDEN / name).read_bytes()))
    return name, read_link_log(log, cache=False)


def test_figures_match_mm_throughput_graph(golden):
    name, log = golden
    want = FIGURES[name]
    m = link_metrics(log.events)
    ours = {
        "average_capacity_mbps": f"{m.capacity_mbps:.2f}",
        "average_throughput_mbps": f"{m.throughput_mbps:.2f}",
        "utilization_pct": f"{100 * m.utilization:.1f}",
        "p95_queueing_delay_ms": f"{m.p95_queueing_delay_ms:.0f}",
        "p95_signal_delay_ms": f"{m.p95_signal_delay_ms:.0f}",
    }
    wrong = {k: f"ours {ours[k]} != mm-throughput-graph {want[k]}" for k in want if ours[k] != want[k]}
    assert not wrong, f"{name}: metrics differ from mahimahi's reference script: {wrong}"


def test_drop_lines_do_not_enter_any_figure(golden):
    # Deliberate difference in input only: the reference script dies on `d`
    # lines, so it was run on the log without them; our reader keeps them
    # (they score a step's drops) and the whole-run figures must ignore them.
    name, log = golden
    ev = log.events
    no_drops = ev[ev["kind"] != "drop"].reset_index(drop=True)
    assert link_metrics(ev) == link_metrics(no_drops)


def test_stock_clock_log_is_rebased_to_the_same_events(tmp_path):
    a = read_link_log(_unzip(tmp_path, "cubic-step.log.gz"), cache=False)
    b = read_link_log(_unzip(tmp_path, "cubic-step-stockclock.log.gz"), cache=False)
    assert (a.base_timestamp_ms, b.base_timestamp_ms) == (0, 4242000)
    assert b.time_origin == "base-subtracted"
    assert a.events.equals(b.events)


def _unzip(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name.removesuffix(".gz")
    out.write_bytes(gzip.decompress((GOLDEN / name).read_bytes()))
    return out


@pytest.mark.parametrize("name", ["cubic-step.log.gz", "cubic-step-stockclock.log.gz"])
def test_both_methods_on_real_logs_ours_and_stock_clock(tmp_path, name):
    from transient import AnalysisOptions, Step, analyze_log

    log = _unzip(tmp_path, name)
    steps = (Step(0, 0, 12), Step(2, 12, 4))  # the trace's steps (README.md)
    res = analyze_log(log, options=AnalysisOptions(steps=steps))
    st = res.steps
    # the data flow starts 264 ms after the log's time 0 (iperf3's control connection first)
    assert res.info["flow_start_s"] == pytest.approx(0.264)
    assert st["kind"].tolist() == ["start", "down"] and st["at_s"].tolist() == pytest.approx([0.264, 2.0])
    assert st["converged"].all() and st["drops"].sum() > 0
    down = st.iloc[1]
    assert down["peak_queueing_delay_ms"] > down["standing_queue_ms"] >= 0  # the step down builds a queue
    tp = analyze_log(log, options=AnalysisOptions(method="tpcca", capacity_mbps=12)).steps.iloc[0]
    assert tp["normalized_area"] > 0 and tp["convergence_s"] > 0
