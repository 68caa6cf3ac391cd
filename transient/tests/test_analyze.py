import math

import numpy as np
import pytest

from transient import RUN_COLUMNS, STEP_COLUMNS, AnalysisError, Step, analyze_all, analyze_log, analyze_results, analyze_run

from .conftest import PKT, simulate_link, write_run

RATE = PKT * 8 / 1e3  # one 1504-byte packet per ms = 12.032 Mbit/s


def dead_then_full(n, start_ms):
    return (np.arange(n) >= start_ms).astype(int)


def test_run_dir_step_response_by_hand(tmp_path):
    # Capacity 1 packet/ms from t = 0 (nominal step 0 -> 12). The sender is silent for
    # 0.5 s (10 bins: shorter than the 18-bin detector span, else silence itself would
    # count as steady), then sends at the full rate; the queue never builds (delay 0).
    n = 3000
    run = write_run(tmp_path / "run-1", "ccp:reno", 1, simulate_link(np.ones(n, int), dead_then_full(n, 500)),
                    [{"at_s": 0.0, "from_mbps": 0.0, "to_mbps": 12.0}])
    res = analyze_run(run)
    assert res.info["rtt_ms"] == 50.0 and res.info["cca"] == "ccp:reno" and res.info["run"] == 1
    m = res.metrics
    assert m.duration_s == pytest.approx(2.999)
    assert m.capacity_mbps == pytest.approx(n * PKT * 8 / 2.999 / 1e6)
    assert m.throughput_mbps == pytest.approx(2500 * PKT * 8 / 2.999 / 1e6)
    assert m.p95_queueing_delay_ms == 0 and m.p95_signal_delay_ms == 0
    assert math.isnan(m.power_score)  # zero delay: power undefined

    (step,) = res.steps.to_dict("records")
    # 50 ms bins: 10 empty bins, then RATE. The first candidate whose three windows
    # are all at full rate starts at bin 10 (bin 9's first window has an empty bin:
    # the variance of the means is 0.32 > 0.02), so convergence = bin 10 + 4 + 5 = 19.
    assert step["converged"]
    assert step["convergence_time_s"] == pytest.approx(19 * 0.05)
    area = 10 * 12.0 * 0.05 + 9 * abs(12.0 - RATE) * 0.05
    assert step["area_mbit"] == pytest.approx(area)
    assert step["normalized_area"] == pytest.approx((12 / 12.0) * area / (19 * 0.05))
    assert step["steady_throughput_mbps"] == pytest.approx(RATE)
    assert step["steady_capacity_mbps"] == pytest.approx(RATE)
    assert step["steady_utilization"] == pytest.approx(1.0)
    assert step["steady_basis"] == "convergence"
    assert step["end_s"] == pytest.approx(3.0)  # last event at 2999 ms: 60 complete 50 ms bins
    assert list(res.steps.columns) == STEP_COLUMNS


def test_never_converging_run_uses_last_half_and_nan(tmp_path):
    # Sender alternates 0.4 s on / 0.4 s off forever: never steady.
    n = 4000
    sends = ((np.arange(n) // 400) % 2 == 0).astype(int)
    run = write_run(tmp_path / "r", "ccp:x", 1, simulate_link(np.ones(n, int), sends),
                    [{"at_s": 0.0, "from_mbps": 0.0, "to_mbps": 12.0}])
    (step,) = analyze_run(run).steps.to_dict("records")
    assert step["converged"] is False or step["converged"] == False  # noqa: E712 (numpy bool)
    assert math.isnan(step["convergence_time_s"]) and math.isnan(step["normalized_area"])
    assert step["steady_basis"] == "last-half"
    # last half = bins 40..79 (2 s .. 4 s): on in [2.4, 2.8) and [3.2, 3.6) -> 0.8 s of 2 s
    assert step["steady_throughput_mbps"] == pytest.approx(RATE * 0.8 / 2.0)


def test_results_dir_tables(results_dir):
    runs, steps = analyze_results(results_dir)
    assert list(runs.columns) == RUN_COLUMNS and list(steps.columns) == STEP_COLUMNS
    assert len(runs) == 4 and len(steps) == 4
    assert sorted(runs["run_id"]) == sorted(
        f"runs/{c}/run-{k}" for c in ("ccp-reno", "ccp-cubic") for k in (1, 2))
    assert set(runs["cca"]) == {"ccp:reno", "ccp:cubic"}
    assert runs["run"].dtype == "Int64"
    # The sender that switches to full rate later converges later.
    t = runs.set_index("run_id")["convergence_time_s"]
    assert t["runs/ccp-reno/run-2"] > t["runs/ccp-reno/run-1"] > t["runs/ccp-cubic/run-1"]
    assert runs["n_steps"].tolist() == [1, 1, 1, 1]


def test_bare_log_with_and_without_steps(tmp_path):
    n = 4000
    p = tmp_path / "uplink.log"
    p.write_text(simulate_link(np.ones(n, int), dead_then_full(n, 500)))
    runs, steps = analyze_results(p)
    assert len(runs) == 1 and len(steps) == 0 and runs["rtt_ms"].iloc[0] == 50.0
    assert runs["converged"].isna().all()
    res = analyze_log(p, rtt_ms=100, steps=[Step(0.0, 0.0, 12.0)])
    assert res.steps["converged"].iloc[0]
    # 100 ms bins: 5 empty bins, convergence at bin 5 + 9 = 14
    assert res.steps["convergence_time_s"].iloc[0] == pytest.approx(1.4)


def test_multi_step_spans_end_at_next_step(tmp_path):
    n = 4000
    opps = np.where(np.arange(n) < 2000, 1, 2)
    run = write_run(tmp_path / "r", "ccp:x", 1, simulate_link(opps, opps),
                    [{"at_s": 2.0, "from_mbps": 12.0, "to_mbps": 24.0},
                     {"at_s": 0.0, "from_mbps": 0.0, "to_mbps": 12.0}])
    steps = analyze_run(run).steps
    assert steps["at_s"].tolist() == [0.0, 2.0] and steps["end_s"].tolist()[0] == 2.0
    assert steps["steady_throughput_mbps"].tolist() == pytest.approx([RATE, 2 * RATE])
    assert steps["convergence_time_s"].tolist() == pytest.approx([0.45, 0.45])


@pytest.mark.parametrize(
    "meta, match",
    [
        ("{not json", "invalid JSON"),
        ('{"schema": 2}', "unsupported schema 2"),
        ('{"scenario": {"steps": [{"at_s": "soon", "to_mbps": 12}]}}', r"scenario.steps\[0\].at_s"),
        ('{"scenario": {"one_way_delay_ms": -1}}', "RTT must be positive"),
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
