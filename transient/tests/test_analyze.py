"""The ccplab method (default) on synthetic logs with known answers, and the analysis' inputs."""

import json
import math

import numpy as np
import pytest

from transient import (
    RUN_COLUMNS, STEP_COLUMNS, AnalysisError, AnalysisOptions, Step, analyze_all, analyze_log, analyze_results,
    analyze_run,
)

from .conftest import PKT, simulate_link, write_run

RATE = PKT * 8 / 1e3  # one 1504-byte packet per ms = 12.032 Mbit/s


def noisy_opportunities(n_ms, mbps, sigma, seed):
    """Delivery opportunities per ms of a rate mbps + N(0, sigma) per ms (fractional credit, as ccplab-trace)."""
    rate = np.clip(mbps + np.random.default_rng(seed).normal(0, sigma, n_ms), 0, None)
    credit = np.floor(np.cumsum(rate / RATE))
    return np.diff(np.concatenate([[0.0], credit])).astype(int)


def tracker_log(n_ms, start_ms, opps):
    """A sender that fills every delivery opportunity from start_ms; before it, a few small
    control-connection packets (iperf3's handshake), as in a real run."""
    lines = ["# base timestamp: 0"]
    for t in range(n_ms):
        if t < start_ms and t % 60 == 0:
            lines += [f"{t} + 90", f"{t} - 90 0"]
        for _ in range(opps[t]):
            lines.append(f"{t} # {PKT}")
            if t >= start_ms:
                lines += [f"{t} + {PKT}", f"{t} - {PKT} 0"]
    return "\n".join(lines) + "\n"


def test_perfect_tracker_gets_na_at_the_noise_floor_not_the_handshake_gap(tmp_path):
    # Step 0 -> 12 Mbit/s at 0 s with sigma 2 noise; the data flow starts 259 ms later.
    n, start = 4000, 259
    p = tmp_path / "uplink.log"
    p.write_text(tracker_log(n, start, noisy_opportunities(n, 12.0, 2.0, seed=3)))
    res = analyze_log(p, options=AnalysisOptions(capacity_mbps=12.0))
    assert res.info["flow_start_s"] == pytest.approx(0.259)
    first = res.steps.iloc[0]
    assert first["kind"] == "start" and first["at_s"] == pytest.approx(0.259)
    assert first["converged"] and first["convergence_s"] == 0.0  # within the first window: at once
    assert first["normalized_area"] == 0.0  # departures = offered capacity in every bin
    # TPCCA on the same log counts the 259 ms gap (~3 Mbit) and the trace's noise
    tp = analyze_log(p, options=AnalysisOptions(method="tpcca", capacity_mbps=12.0)).steps.iloc[0]
    assert tp["area_mbit"] > 0.259 * 12 * 0.9 and tp["normalized_area"] > 1.0


def test_half_rate_then_full_by_hand(tmp_path):
    # Capacity 1 packet/ms (12.032 Mbit/s) from 0 s; the sender sends 1 packet per 2 ms
    # for 1 s, then 1 per ms; no queue.  50 ms bins: x = r / 2 for bins 0..19, then x = r.
    # Candidates i <= 19 hold half-rate bins (i = 19: window means -0.05, 0, 0 of r ->
    # variance 5.6e-4 > 1.4e-4, and bin 19 is 50 % below r), so convergence is bin 20.
    n = 3000
    sends = np.where(np.arange(n) < 1000, (np.arange(n) % 2 == 0).astype(int), 1)
    run = write_run(tmp_path / "run-1", "ccp:reno", 1, simulate_link(np.ones(n, int), sends),
                    [{"at_s": 0.0, "from_mbps": 0.0, "to_mbps": 12.0}])
    res = analyze_run(run)
    assert res.info["rtt_ms"] == 50.0 and res.info["cca"] == "ccp:reno" and res.info["flow_start_s"] == 0.0
    (step,) = res.steps.to_dict("records")
    assert step["converged"] and step["convergence_s"] == pytest.approx(1.0)
    assert step["convergence_point_s"] == pytest.approx(1.0)
    area = 20 * (RATE / 2) * 0.05
    assert step["area_mbit"] == pytest.approx(area)
    # NA = area / |delta B| = seconds of the whole step lost: 1 s at half rate = 0.5 s
    assert step["normalized_area"] == pytest.approx(area / 12.0)
    assert step["steady_throughput_mbps"] == pytest.approx(RATE)
    assert step["steady_utilization"] == pytest.approx(1.0)
    assert step["end_s"] == pytest.approx(3.0)
    assert list(res.steps.columns) == STEP_COLUMNS


def test_slower_convergence_never_scores_better(tmp_path):
    # Same half-rate start, lasting 0.5 s, 1 s and 1.5 s: NA must grow with the delay
    # (TPCCA's division by the convergence time gives all three the same NA).
    n = 4000
    nas = []
    for k, half_ms in enumerate((500, 1000, 1500)):
        sends = np.where(np.arange(n) < half_ms, (np.arange(n) % 2 == 0).astype(int), 1)
        p = tmp_path / f"u{k}.log"
        p.write_text(simulate_link(np.ones(n, int), sends))
        nas.append(analyze_log(p, options=AnalysisOptions(capacity_mbps=12.0)).steps["normalized_area"].iloc[0])
    assert nas[0] < nas[1] < nas[2]
    assert nas == pytest.approx([0.25, 0.5, 0.75], rel=0.01)


def test_never_converging_step_gives_null_not_a_number(tmp_path):
    # Sender alternates 0.4 s on / 0.4 s off forever: never steady.
    n = 4000
    sends = ((np.arange(n) // 400) % 2 == 0).astype(int)
    run = write_run(tmp_path / "r", "ccp:x", 1, simulate_link(np.ones(n, int), sends),
                    [{"at_s": 0.0, "from_mbps": 0.0, "to_mbps": 12.0}])
    res = analyze_run(run)
    (step,) = res.steps.to_dict("records")
    assert step["converged"] == False  # noqa: E712 (numpy bool)
    for name in ("convergence_s", "convergence_point_s", "normalized_area", "steady_throughput_mbps",
                 "standing_queue_ms", "drain_time_s"):
        assert math.isnan(step[name]), name
    (js,) = res.as_json()["steps"]
    assert js["convergence_s"] is None and js["normalized_area"] is None and js["converged"] is False


def test_flat_at_the_wrong_level_is_not_converged(tmp_path):
    # A sender stuck at half the capacity is steady but 50 % off: not converged.
    n = 3000
    p = tmp_path / "u.log"
    p.write_text(simulate_link(np.ones(n, int), (np.arange(n) % 2 == 0).astype(int)))
    step = analyze_log(p, options=AnalysisOptions(capacity_mbps=12.0)).steps.iloc[0]
    assert not step["converged"] and math.isnan(step["normalized_area"])


def step_down_log():
    """Capacity 2 packets/ms (24 Mbit/s) until 2 s, then 1 per 2 ms (6 Mbit/s) until 5 s.
    The sender keeps 2/ms until 2.3 s, pauses 0.2 s, then sends 1 per 2 ms: a queue of
    100 packets (limit) builds, drops, and drains by 2.5 s."""
    n = 5000
    t = np.arange(n)
    opps = np.where(t < 2000, 2, (t % 2 == 0).astype(int))
    sends = np.where(t < 2300, 2, np.where(t < 2500, 0, (t % 2 == 0).astype(int)))
    return simulate_link(opps, sends, queue_packets=100)


def test_step_down_is_scored_by_its_queue(tmp_path):
    run = write_run(tmp_path / "r", "kernel:cubic", 1, step_down_log(),
                    [{"at_s": 0.0, "from_mbps": 0.0, "to_mbps": 24.0}, {"at_s": 2.0, "from_mbps": 24.0, "to_mbps": 6.0}])
    steps = analyze_run(run).steps
    assert steps["kind"].tolist() == ["start", "down"]
    assert steps["at_s"].tolist() == [0.0, 2.0] and steps["end_s"].tolist() == pytest.approx([2.0, 5.0], abs=0.002)
    down = steps.iloc[1]
    # departures follow the new capacity at once: invisible in throughput...
    assert down["converged"] and down["convergence_s"] == 0.0 and down["normalized_area"] == 0.0
    # ...but not in the queue: 100 packets at 0.5 packet/ms = 200 ms of queueing delay
    assert 190 <= down["peak_queueing_delay_ms"] <= 200
    # 600 arrivals in [2.0, 2.3), 150 departures, 100 queued: 350 dropped
    assert abs(down["drops"] - 350) <= 2
    # the queue is empty again from 2.5 s: drained 0.5 s after the step, nothing standing
    assert down["drain_time_s"] == pytest.approx(0.5)
    assert down["standing_queue_ms"] == 0.0 and down["standing_queue_packets"] == pytest.approx(0.0, abs=0.5)
    start = steps.iloc[0]
    assert start["converged"] and start["drops"] == 0 and start["peak_queueing_delay_ms"] == 0.0


def test_every_step_from_its_own_change(tmp_path):
    n = 6000
    opps = np.where(np.arange(n) < 2000, 1, np.where(np.arange(n) < 4000, 2, 1))
    p = tmp_path / "u.log"
    p.write_text(simulate_link(opps, opps))
    res = analyze_log(p, steps=[Step(4.0, 24.0, 12.0), Step(0.0, 0.0, 12.0), Step(2.0, 12.0, 24.0)])
    st = res.steps
    assert st["kind"].tolist() == ["start", "up", "down"] and st["step"].tolist() == [0, 1, 2]
    assert st["end_s"].tolist() == [2.0, 4.0, 6.0]
    assert st["convergence_s"].tolist() == [0.0, 0.0, 0.0]
    assert st["steady_throughput_mbps"].tolist() == pytest.approx([RATE, 2 * RATE, RATE])


def test_results_dir_tables(results_dir):
    runs, steps = analyze_results(results_dir)
    assert list(runs.columns) == RUN_COLUMNS and list(steps.columns) == STEP_COLUMNS
    assert len(runs) == 4 and len(steps) == 4
    assert sorted(runs["run_id"]) == sorted(
        f"runs/{c}/run-{k}" for c in ("ccp-reno", "ccp-cubic") for k in (1, 2))
    assert set(runs["cca"]) == {"ccp:reno", "ccp:cubic"} and runs["run"].dtype == "Int64"
    assert (runs["method"] == "ccplab").all() and runs["retransmits"].isna().all()  # no iperf3.json
    # The sender that reaches full rate later converges later.
    t = steps.set_index("run_id")["convergence_s"]
    assert t["runs/ccp-reno/run-2"] > t["runs/ccp-reno/run-1"] > t["runs/ccp-cubic/run-1"]
    assert runs["n_steps"].tolist() == [1, 1, 1, 1]


def test_schema_2_metadata_flow_start_and_retransmits(tmp_path):
    n = 3000
    run = write_run(tmp_path / "r", "ccp:cubic", 1, simulate_link(np.ones(n, int), np.ones(n, int)),
                    [{"at_s": 0.0, "from_mbps": 0.0, "to_mbps": 12.0}])
    meta = json.loads((run / "metadata.json").read_text())
    meta.update(schema=2, flow_start_s=0.5, cca_params={"beta": 0.8})
    (run / "metadata.json").write_text(json.dumps(meta))
    (run / "iperf3.json").write_text(json.dumps({"end": {"sum_sent": {"retransmits": 7}}}))
    res = analyze_run(run)
    assert res.info["flow_start_s"] == 0.5 and res.steps["at_s"].iloc[0] == 0.5  # metadata's value wins
    row = res.summary()
    assert row["retransmits"] == 7 and row["cca_params"] == "beta=0.8" and row["label"] == "ccp:cubic beta=0.8"


def test_bare_log_without_steps_judges_against_the_offered_capacity(tmp_path):
    n = 3000
    p = tmp_path / "uplink.log"
    p.write_text(simulate_link(np.ones(n, int), np.ones(n, int)))
    res = analyze_log(p)
    assert res.info["rtt_ms"] == 50.0
    (step,) = res.steps.to_dict("records")
    assert step["kind"] == "start" and step["to_mbps"] == pytest.approx(RATE) and step["converged"]


def test_auto_steps_find_the_capacity_change(tmp_path):
    n = 4000
    opps = np.where(np.arange(n) < 2000, 1, (np.arange(n) % 2 == 0).astype(int))
    p = tmp_path / "uplink.log"
    p.write_text(simulate_link(opps, opps))
    res = analyze_log(p, options=AnalysisOptions(auto_steps=True))
    st = res.steps
    assert st["kind"].tolist() == ["start", "down"]
    assert st["at_s"].iloc[1] == pytest.approx(2.0)
    assert st["to_mbps"].tolist() == pytest.approx([RATE, RATE / 2], abs=0.01)


@pytest.mark.parametrize(
    "meta, match",
    [
        ("{not json", "invalid JSON"),
        ('{"schema": 4}', "unsupported schema 4"),
        ('{"scenario": {"steps": [{"at_s": "soon", "to_mbps": 12}]}}', r"scenario.steps\[0\].at_s"),
        ('{"scenario": {"one_way_delay_ms": "x"}}', "one_way_delay_ms: expected a finite number"),
        ('{"files": {"link_log": "missing.log"}}', "missing.log"),
    ],
)
def test_bad_metadata_names_the_path(tmp_path, meta, match):
    d = tmp_path / "run"
    d.mkdir()
    (d / "metadata.json").write_text(meta)
    (d / "uplink.log").write_text("0 # 1504\n5 - 1504 1\n")
    with pytest.raises(AnalysisError, match=match) as err:
        analyze_run(d)
    assert str(d) in str(err.value)


def test_bad_log_in_results_dir_raises_or_is_skipped(results_dir):
    bad = results_dir / "runs" / "ccp-reno" / "run-1" / "uplink.log"
    text = bad.read_text().splitlines()
    text[10] = "12 ? 1504"
    bad.write_text("\n".join(text) + "\n")
    with pytest.raises(AnalysisError, match=r"uplink.log:11: unknown event kind '\?'"):
        analyze_results(results_dir)
    with pytest.warns(UserWarning, match="skipping run"):
        a = analyze_all(results_dir, on_error="skip")
    assert len(a.runs) == 3 and len(a.errors) == 1 and "run-1" in a.errors[0][0]


def test_missing_or_empty_paths(tmp_path):
    with pytest.raises(AnalysisError, match="no such file"):
        analyze_results(tmp_path / "nope")
    with pytest.raises(AnalysisError, match="no run directories"):
        analyze_results(tmp_path)


def test_single_run_dir_and_its_metadata_file(results_dir):
    run = results_dir / "runs" / "ccp-reno" / "run-2"
    for target in (run, run / "metadata.json"):
        runs, steps = analyze_results(target)
        assert runs["run_id"].tolist() == ["run-2"] and steps["run"].tolist() == [2]


def test_parallel_analysis_equals_serial(results_dir):
    serial = analyze_all(results_dir, workers=1)
    parallel = analyze_all(results_dir, workers=2)
    assert serial.runs.drop(columns=["path"]).equals(parallel.runs.drop(columns=["path"]))
    assert serial.steps.equals(parallel.steps)


def test_last_step_ends_with_the_data_flow_not_the_logs_idle_tail(tmp_path):
    """The link runs on for a moment after the sender stops; the last step's span ends at the
    flow's last data arrival, so the idle tail is not read as an undershoot of the last step."""
    n, flow_ms = 4000, 3000
    opps = np.ones(n, dtype=int)
    sends = np.where(np.arange(n) < flow_ms, 1, 0)  # the sender tracks the link, then stops
    p = tmp_path / "u.log"
    p.write_text(simulate_link(opps, sends))
    last = analyze_log(p, steps=[Step(0.0, 0.0, 12.0)]).steps.iloc[-1]
    assert last["end_s"] == pytest.approx(flow_ms / 1000.0, abs=0.002), "span ends 1 ms after the last data arrival"
    assert last["converged"] and last["normalized_area"] == pytest.approx(0.0, abs=0.02)
    assert not last["peak_time_s"] > last["end_s"] - last["at_s"], "peak inside the flow's span"
