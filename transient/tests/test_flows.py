"""Competing flows: Jain's index, delta-fair convergence, harm and smoothness by hand; attribution and the
per-flow tables on synthetic multi-flow run directories; bad input named."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from transient import AnalysisError, analyze_all
from transient.analyze import FLOW_COLUMNS, FLOW_STEP_COLUMNS, STEP_COLUMNS
from transient.flowlog import read_flow_ports
from transient.flows import delta_fair_convergence_time, harm, jain_index, smoothness_cv

from .synthetic import PKT, credit_sends, simulate_flows, two_flow_rates, write_multiflow_run

N_MS = 10_000
SECOND_START_MS, SECOND_STOP_MS = 4000, 8000
PORTS = (5201, 5202)


# ------------------------------------------------------------------ by hand


def test_jain_index_by_hand():
    assert jain_index([6.0, 6.0]) == pytest.approx(1.0)
    assert jain_index([12.0, 0.0]) == pytest.approx(0.5)  # one flow gets all: 1/n
    assert jain_index([3.0, 1.0]) == pytest.approx(16.0 / 20.0)  # (3+1)^2 / (2 (9+1))
    assert jain_index([3.0, 1.0, np.nan]) == pytest.approx(0.8)  # an inactive flow is not counted
    assert math.isnan(jain_index([0.0, 0.0]))
    per_bin = jain_index(np.array([[1.0, 1.0], [2.0, 0.0]]), axis=1)
    assert per_bin == pytest.approx([1.0, 0.5])


def test_delta_fair_convergence_time_by_hand():
    x1 = [12.0, 10.0, 8.0, 6.5, 6.2, 6.0]
    x2 = [0.0, 2.0, 4.0, 5.5, 5.8, 6.0]
    cap = [12.0] * 6
    # delta 0.1: both within [5.4, 6.6] first in bin 3 -> 0.3 s; delta 0.05: [5.7, 6.3] first in bin 4
    assert delta_fair_convergence_time(x1, x2, cap, 0.1, 0.1) == pytest.approx(0.3)
    assert delta_fair_convergence_time(x1, x2, cap, 0.1, 0.05) == pytest.approx(0.4)
    assert math.isnan(delta_fair_convergence_time(x1[:3], x2[:3], cap[:3], 0.1))  # never fair
    with pytest.raises(ValueError, match="delta"):
        delta_fair_convergence_time(x1, x2, cap, 0.1, 1.5)


def test_harm_by_hand():
    rows = [
        # alone runs of A: throughput 10 and 12 (median 11), p95 delay 10 and 10 ms
        ("a1", "s", 0, "A", 1, 10.0, 10.0), ("a2", "s", 0, "A", 1, 12.0, 10.0),
        # alone run of B: 8 Mbit/s, 20 ms
        ("b1", "s", 0, "B", 1, 8.0, 20.0),
        # A with B: A gets 5.5 at 40 ms; B gets 9 (more than alone) at 16 ms (less than alone)
        ("ab", "s", 0, "A", 2, 5.5, 40.0), ("ab", "s", 1, "B", 2, 9.0, 16.0),
        # C has no alone run
        ("ac", "s", 0, "A", 2, 11.0, 10.0), ("ac", "s", 1, "C", 2, 1.0, 10.0),
    ]
    flows = pd.DataFrame(rows, columns=["run_id", "scenario", "flow", "label", "n_flows", "throughput_mbps",
                                        "p95_queueing_delay_ms"])
    h = harm(flows).set_index(["run_id", "flow"])
    a = h.loc[("ab", 0)]
    assert a["with_labels"] == "B" and a["n_alone_runs"] == 2
    assert a["throughput_harm"] == pytest.approx((11.0 - 5.5) / 11.0)
    assert a["delay_harm"] == pytest.approx((40.0 - 10.0) / 40.0)
    b = h.loc[("ab", 1)]
    assert b["throughput_harm"] == 0.0 and b["delay_harm"] == 0.0  # better off than alone: no harm
    assert h.loc[("ac", 0), "throughput_harm"] == 0.0  # 11 = the alone median
    c = h.loc[("ac", 1)]
    assert c["n_alone_runs"] == 0 and math.isnan(c["throughput_harm"]) and math.isnan(c["delay_harm"])
    with pytest.raises(ValueError, match="label"):
        harm(flows.drop(columns=["label"]))


def test_smoothness_cv_by_hand():
    assert smoothness_cv([1.0, 3.0]) == pytest.approx(0.5)  # population std 1 / mean 2
    assert smoothness_cv([6.0, 6.0, 6.0]) == 0.0
    assert math.isnan(smoothness_cv([5.0])) and math.isnan(smoothness_cv([0.0, 0.0]))


# ------------------------------------------------------------------ synthetic runs


def _two_flow_texts(second_stop_ms=SECOND_STOP_MS, queue=50):
    r0, r1 = two_flow_rates(N_MS, SECOND_START_MS, 500, second_stop_ms)
    r0 = np.where(np.arange(N_MS) >= 100, r0, 0.0)  # flow 0's data from 100 ms
    sends = [credit_sends(r0), credit_sends(r1)]
    return simulate_flows(np.ones(N_MS, int), sends, PORTS, queue_packets=queue,
                          control_at_ms=[98, SECOND_START_MS - 10])


@pytest.fixture(scope="module")
def two_flow_dir(tmp_path_factory) -> Path:
    log, flows = _two_flow_texts()
    d = tmp_path_factory.mktemp("multi") / "r1"
    write_multiflow_run(d, [{"cca": "kernel:cubic", "port": PORTS[0]},
                            {"cca": "kernel:bbr", "port": PORTS[1], "start_s": 3.9, "retransmits": 7,
                             "receiver_bytes": 123456}], log, flows)
    return d


@pytest.fixture(scope="module")
def two_flow(two_flow_dir):
    return analyze_all(two_flow_dir)


def test_attribution_is_exact_and_per_flow_departures_sum_to_the_aggregate(two_flow, two_flow_dir):
    # ground truth from the text itself: the port of each departure line
    lines = [ln for ln in (two_flow_dir / "uplink.log").read_text().splitlines() if not ln.startswith("#")]
    events = [ln.split() for ln in lines if ln.split()[1] != "#"]
    ports = (two_flow_dir / "uplink.flows").read_text().split()
    want = {p: sum(int(e[2]) for e, q in zip(events, ports) if e[1] == "-" and q == str(p)) for p in PORTS}
    f = two_flow.flows.set_index("flow")
    assert f.loc[0, "delivered_bytes"] == want[PORTS[0]] and f.loc[1, "delivered_bytes"] == want[PORTS[1]]
    total = sum(int(e[2]) for e in events if e[1] == "-")
    assert f["delivered_bytes"].sum() == total
    assert two_flow.multi_flow and list(two_flow.flows.columns[: len(FLOW_COLUMNS)]) == FLOW_COLUMNS


def test_second_flow_takes_half_the_link_and_the_first_gives_it_up(two_flow):
    fair = two_flow.fairness.set_index("interval")
    assert fair["active_flows"].tolist() == ["0", "0,1", "0"]
    # ~1: flow 1's 90-byte control packet departs before its data, a departure of the link as well
    assert 1.0 - 1e-3 < fair.loc[0, "share_flow0"] < 1.0
    assert fair.loc[1, "share_flow0"] == pytest.approx(0.5, abs=0.05)  # ~1 -> ~0.5
    assert fair.loc[1, "share_flow1"] == pytest.approx(0.5, abs=0.05)
    assert fair.loc[1, "jain_median"] == pytest.approx(1.0, abs=0.01)
    assert fair.loc[1, "from_s"] == pytest.approx(4.045, abs=0.01)  # flow 1's first full-size packet
    f = two_flow.flows.set_index("flow")
    assert f.loc[0, "flow_start_s"] == pytest.approx(0.1)  # its 90-byte control packet at 98 ms is not data
    assert f.loc[1, "retransmits"] == 7 and f.loc[1, "iperf3_receiver_bytes"] == 123456
    assert f.loc[1, "throughput_mbps"] == pytest.approx(6.0, abs=0.4)  # half of 12.03, ramp included
    assert f.loc[1, "share"] == pytest.approx(0.47, abs=0.03)


def test_arrival_is_a_step_of_each_flows_fair_share(two_flow):
    st = two_flow.flow_steps
    assert list(st.columns) == FLOW_STEP_COLUMNS
    arrival = st[(st["event"] == 1)].set_index("flow")
    cap = 1504 * 8 / 1e3  # 1 packet/ms
    assert arrival.loc[0, "from_mbps"] == pytest.approx(cap) and arrival.loc[0, "to_mbps"] == pytest.approx(cap / 2)
    assert arrival.loc[1, "from_mbps"] == 0.0 and arrival.loc[1, "to_mbps"] == pytest.approx(cap / 2)
    assert arrival["converged"].all()
    # by hand: flow 1's bins k = 0..7 from 4.045 s average (0.07 + 0.05 k) C against a fair share of C / 2,
    # so the gap is sum (0.43 - 0.05 k) = 2.04 bins of C x 50 ms; it holds C / 2 from bin 8 (0.4 s)
    area = 2.04 * cap * 0.05
    assert arrival.loc[1, "area_mbit"] == pytest.approx(area, rel=0.02)
    assert arrival.loc[1, "normalized_area"] == pytest.approx(area / (cap / 2), rel=0.02)
    assert arrival.loc[1, "convergence_s"] == pytest.approx(0.4, abs=0.051)
    # ramp to 0.45 C at 0.45 s after 4.0 s: the first 50 ms bin from 4.045 s averaging >= 0.45 C is bin 8
    assert arrival.loc[0, "delta_fair_convergence_s"] == pytest.approx(0.4, abs=0.051)
    departure = st[st["event_kind"] == "departure"].set_index("flow")
    assert departure.loc[0, "from_mbps"] == pytest.approx(cap / 2) and departure.loc[0, "to_mbps"] == pytest.approx(cap)
    assert math.isnan(departure.loc[0, "delta_fair_convergence_s"])


def test_single_flow_runs_keep_their_tables_and_get_one_flow(results_dir):
    a = analyze_all(results_dir)
    assert list(a.steps.columns) == STEP_COLUMNS and not a.multi_flow
    assert (a.flows["n_flows"] == 1).all() and len(a.flows) == len(a.runs)
    assert a.flows["smoothness_cv"].notna().all()
    # a lone flow gets all the link's departures: share 1, and its departures are the run's
    assert (a.flows["share"] == 1.0).all()
    runs, steps, series, errors = a[:4]  # the original fields keep their positions
    assert runs is a.runs and steps is a.steps


# ------------------------------------------------------------------ bad input


def test_flow_log_length_mismatch_names_both_files(tmp_path, two_flow_dir):
    d = tmp_path / "bad"
    d.mkdir()
    for f in two_flow_dir.iterdir():
        if not f.name.endswith(".parquet"):
            (d / f.name).write_bytes(f.read_bytes())
    lines = (d / "uplink.flows").read_text().splitlines()
    (d / "uplink.flows").write_text("\n".join(lines[:-3]) + "\n")
    with pytest.raises(AnalysisError, match=rf"uplink\.flows has {len(lines) - 3} lines but .*uplink\.log has "
                                            rf"{len(lines)} arrival/departure/drop events"):
        analyze_all(d)


def test_unknown_schema_and_bad_flows_are_named(tmp_path, two_flow_dir):
    d = tmp_path / "schema"
    d.mkdir()
    for f in two_flow_dir.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    meta = json.loads((d / "metadata.json").read_text())
    (d / "metadata.json").write_text(json.dumps({**meta, "schema": 4}))
    with pytest.raises(AnalysisError, match=r"metadata\.json: unsupported schema 4"):
        analyze_all(d)
    dup = [meta["flows"][0], {**meta["flows"][1], "port": meta["flows"][0]["port"]}]
    (d / "metadata.json").write_text(json.dumps({**meta, "flows": dup}))
    with pytest.raises(AnalysisError, match=r"metadata\.json: flows\[1\]\.port 5201 is also flows\[0\]\.port"):
        analyze_all(d)
    no_log = {**meta, "files": {k: v for k, v in meta["files"].items() if k != "flow_log"}}
    (d / "metadata.json").write_text(json.dumps(no_log))
    with pytest.raises(AnalysisError, match="lists 2 flows but no files.flow_log"):
        analyze_all(d)


def test_malformed_flow_log_names_file_and_line(tmp_path):
    p = tmp_path / "uplink.flows"
    p.write_text("5201\n5201\nx52\n5202\n")
    with pytest.raises(AnalysisError, match=r"uplink\.flows: line 3: 'x52' is not a port number"):
        read_flow_ports(p)
    p.write_text("5201\n70000\n")
    with pytest.raises(AnalysisError, match=r"uplink\.flows: line 2: port 70000 is above 65535"):
        read_flow_ports(p)
    p.write_text("5201\n\n5202\n")
    with pytest.raises(AnalysisError, match="line 2"):
        read_flow_ports(p)
    with pytest.raises(AnalysisError, match="cannot read"):
        read_flow_ports(tmp_path / "missing.flows")
    p.write_text("5201\n0\n5202")
    assert read_flow_ports(p).tolist() == [5201, 0, 5202]


def test_unknown_port_counts_in_no_flow(tmp_path):
    log, flows = _two_flow_texts()
    ports = flows.split()
    ports[5] = "9999"  # one of flow 0's packets to a port no flow has
    d = write_multiflow_run(tmp_path / "r", [{"cca": "kernel:cubic", "port": PORTS[0]},
                                              {"cca": "kernel:bbr", "port": PORTS[1]}], log, "\n".join(ports) + "\n")
    a = analyze_all(d)
    events = [ln.split() for ln in log.splitlines() if not ln.startswith("#") and ln.split()[1] != "#"]
    assert events[5][1] in "+-d"
    dep_total = sum(int(e[2]) for e in events if e[1] == "-")
    lost = int(events[5][2]) if events[5][1] == "-" else 0
    assert a.flows["delivered_bytes"].sum() == dep_total - lost


# ------------------------------------------------------------------ report


def test_report_writes_the_flow_tables_and_figures(two_flow, results_dir, tmp_path):
    from transient.report import combine, flow_kwargs, write_report

    out = tmp_path / "report"
    write_report(out, two_flow.runs, two_flow.steps, two_flow.series, n_resamples=199, **flow_kwargs(two_flow))
    for name in ("flows.csv", "fairness.csv", "flow_steps.csv", "summary_flows.csv", "harm.csv"):
        assert (out / name).stat().st_size > 0, name
    flows = pd.read_csv(out / "flows.csv")
    assert flows["delivered_bytes"].tolist() == two_flow.flows["delivered_bytes"].tolist()
    assert (out / "plots" / "flows-r1.png").exists() and (out / "plots" / "flows-r1.pdf").exists()
    html = (out / "report.html").read_text()
    assert "Competing flows" in html and "flows-r1.png" in html and "kernel:bbr + kernel:cubic" in html
    # a single-flow results tree: no flow tables, no section (the report is as before)
    single = analyze_all(results_dir)
    out1 = tmp_path / "single"
    write_report(out1, single.runs, single.steps, single.series, n_resamples=199, **flow_kwargs(single))
    assert not (out1 / "flows.csv").exists() and "Competing flows" not in (out1 / "report.html").read_text()
    # combining keeps each source's flow tables apart
    both = combine([("x", two_flow), ("y", two_flow)])
    assert sorted(both.flows["run_id"].unique()) == ["x/r1", "y/r1"] and set(both.flow_series) == {"x/r1", "y/r1"}
    assert len(both.fairness) == 2 * len(two_flow.fairness)


def test_coexistence_heatmap(tmp_path):
    from transient.plots import plot_coexistence_heatmap

    m = pd.DataFrame([[0.0, 0.4], [0.1, np.nan]], index=["kernel:cubic", "kernel:bbr"],
                     columns=["kernel:cubic", "kernel:bbr"])
    assert plot_coexistence_heatmap(m, tmp_path / "heat", "throughput harm", "harm (0-1)", vmin=0, vmax=1)
    assert (tmp_path / "heat.png").stat().st_size > 0 and (tmp_path / "heat.pdf").stat().st_size > 0
    assert not plot_coexistence_heatmap(m * np.nan, tmp_path / "none", "t", "m")
    assert not (tmp_path / "none.png").exists()
    with pytest.raises(ValueError):
        plot_coexistence_heatmap(m.astype(object).where(m.notna(), "x"), tmp_path / "bad", "t", "m")


def test_per_flow_drops_and_p95_queueing_delay_from_the_log_text(tmp_path):
    # Overload: flow 0 at the capacity, flow 1 at 0.3 of it from 2 s, a 50-packet queue: it fills and drops.
    n = 5000
    t = np.arange(n)
    sends = [credit_sends(np.where(t >= 100, 1.0, 0.0)), credit_sends(np.where(t >= 2000, 0.3, 0.0))]
    log, flows = simulate_flows(np.ones(n, int), sends, PORTS, queue_packets=50)
    d = write_multiflow_run(tmp_path / "r", [{"cca": "kernel:cubic", "port": PORTS[0]},
                                              {"cca": "kernel:bbr", "port": PORTS[1]}], log, flows)
    a = analyze_all(d).flows.set_index("flow")
    events = [ln.split() for ln in log.splitlines() if not ln.startswith("#") and ln.split()[1] != "#"]
    ports = flows.split()
    dep = [(int(e[3]), p) for e, p in zip(events, ports) if e[1] == "-"]
    base = min(q for q, _ in dep)
    for k, port in enumerate(PORTS):
        q = sorted(x - base for x, p in dep if p == str(port))
        assert a.loc[k, "p95_queueing_delay_ms"] == q[int(0.95 * len(q))]  # mahimahi's percentile
        drops = sum(1 for e, p in zip(events, ports) if e[1] == "d" and p == str(port))
        assert a.loc[k, "drops"] == drops
    assert a["drops"].sum() > 0 and a.loc[1, "p95_queueing_delay_ms"] > 40  # the queue stood at ~50 ms


def test_fair_delta_is_an_option(two_flow_dir):
    from transient import AnalysisOptions

    with pytest.raises(AnalysisError, match="fair_delta"):
        AnalysisOptions(fair_delta=1.5)
    wide = analyze_all(two_flow_dir, options=AnalysisOptions(fair_delta=0.3)).flow_steps
    arrival = wide[(wide["event"] == 1) & (wide["flow"] == 1)].iloc[0]
    # within +-30 % of the fair share: the ramp's average passes 0.35 C in bin 6 (0.07 + 0.05 k >= 0.35)
    assert arrival["delta_fair_convergence_s"] == pytest.approx(0.3, abs=0.051)


def test_cli_out_writes_the_flow_tables(two_flow_dir, tmp_path, capsys):
    from transient.__main__ import main

    out = tmp_path / "out"
    assert main([str(two_flow_dir), "--out", str(out), "--fair-delta", "0.2"]) == 0
    steps = pd.read_csv(out / "flow_steps.csv")
    assert set(steps["flow"]) == {0, 1} and (out / "fairness.csv").exists() and (out / "flows.csv").exists()
    printed = capsys.readouterr().out
    assert "jain_median" in printed and "kernel:bbr" in printed  # the per-flow lines after the step table
    with pytest.raises(SystemExit) as exit_:
        main([str(two_flow_dir), "--fair-delta", "2"])
    assert exit_.value.code == 2
    assert "argument --fair-delta: must be <= 1, got 2" in capsys.readouterr().err


def test_coexistence_matrix_by_hand():
    from transient.flows import coexistence_matrix

    rows = [("r1", 0, "A", 0.7), ("r1", 1, "B", 0.3), ("r2", 0, "A", 0.5), ("r2", 1, "B", 0.5),
            ("r3", 0, "B", 0.6), ("r3", 1, "A", 0.4), ("r4", 0, "A", 1.0)]  # r4: one flow, left out
    t = pd.DataFrame(rows, columns=["run_id", "flow", "label", "share"])
    m = coexistence_matrix(t, "share")
    assert m.loc["A", "B"] == pytest.approx(0.6)  # median of 0.7 and 0.5
    assert set(m.index) == {"A", "B"} and set(m.columns) == {"A", "B"}
    assert m.loc["B", "A"] == pytest.approx(0.6) and math.isnan(m.loc["A", "A"])  # A with A was not run
    assert coexistence_matrix(t, "share", flow=1).loc["A", "B"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="throughput_harm"):
        coexistence_matrix(t, "throughput_harm")


def test_an_unfair_split_gives_jains_index_by_hand(tmp_path):
    # From 2 s flow 1 takes 0.2 of the link and flow 0 keeps 0.8: J = 1 / (2 (0.64 + 0.04)) = 0.735
    n = 6000
    t = np.arange(n)
    r1 = np.where(t >= 2000, 0.2, 0.0)
    sends = [credit_sends(np.where(t >= 100, 1.0 - r1, 0.0)), credit_sends(r1)]
    log, flows = simulate_flows(np.ones(n, int), sends, PORTS, queue_packets=50)
    d = write_multiflow_run(tmp_path / "r", [{"cca": "kernel:cubic", "port": PORTS[0]},
                                              {"cca": "kernel:bbr", "port": PORTS[1]}], log, flows)
    a = analyze_all(d)
    both = a.fairness[a.fairness["active_flows"] == "0,1"].iloc[0]
    assert both["jain_median"] == pytest.approx(1.0 / (2 * (0.8**2 + 0.2**2)), abs=0.01)
    assert both["share_flow0"] == pytest.approx(0.8, abs=0.01) and both["share_flow1"] == pytest.approx(0.2, abs=0.01)
    st = a.flow_steps[a.flow_steps["event"] == both["interval"]].set_index("flow")
    assert not st["converged"].any()  # neither reaches its fair share (within 5 %)
    assert math.isnan(st.loc[0, "delta_fair_convergence_s"])  # never within +-10 % of half
    assert st.loc[0, "steady_throughput_mbps"] != st.loc[0, "steady_throughput_mbps"]  # NaN: no steady part
    series = a.flow_series[str(both["run_id"])]
    inside = (series.index >= both["from_s"]) & (series.index + 0.05 <= both["to_s"])
    assert series.loc[inside, "jain"].median() == pytest.approx(both["jain_median"])
