"""``python -m transient`` (and so ``ccplab analyze``, which shares its flags)."""

import json
import math

import numpy as np

from transient.__main__ import main

from .conftest import simulate_link

STEP_FIELDS = {"at_s", "from_mbps", "to_mbps", "normalized_area", "convergence_s", "overshoot_pct", "rise_time_s",
               "settling_time_s", "damping_ratio", "natural_frequency_rad_s", "fit_r2", "response_class",
               "peak_queueing_delay_ms", "drain_time_s", "drops",
               "throughput_mbps", "p95_queueing_delay_ms", "p95_signal_delay_ms", "power_score"}


def _lines(out):
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_json_prints_one_object_per_run_with_its_steps(results_dir, capsys):
    assert main([str(results_dir), "--json"]) == 0
    runs = _lines(capsys.readouterr().out)
    assert len(runs) == 4 and {r["cca"] for r in runs} == {"ccp:reno", "ccp:cubic"}
    for r in runs:
        (step,) = r["steps"]
        assert STEP_FIELDS <= set(step), STEP_FIELDS - set(step)
        assert step["throughput_mbps"] == r["throughput_mbps"]
        assert all(v is None or not isinstance(v, float) or math.isfinite(v) for v in step.values())
        assert r["power_score"] is None or math.isfinite(r["power_score"])


def test_out_writes_report(results_dir, tmp_path, capsys):
    out = tmp_path / "report"
    assert main([str(results_dir), "--out", str(out)]) == 0
    assert (out / "report.html").exists() and (out / "runs.csv").exists()
    assert "runs/ccp-reno/run-1" in capsys.readouterr().out


def test_bare_log_with_step_rtt_and_method(tmp_path, capsys):
    n = 4000
    p = tmp_path / "uplink.log"
    # 1 packet per 2 ms for 1 s, then full rate
    sends = np.where(np.arange(n) < 1000, (np.arange(n) % 2 == 0).astype(int), 1)
    p.write_text(simulate_link(np.ones(n, int), sends))
    assert main([str(p), "--json", "--rtt-ms", "100", "--step", "0:0:12"]) == 0
    (run,) = _lines(capsys.readouterr().out)
    (step,) = run["steps"]
    assert run["rtt_ms"] == 100 and step["convergence_s"] == 1.0 and step["kind"] == "start"
    assert main([str(p), "--json", "--method", "tpcca", "--capacity-mbps", "12"]) == 0
    (run,) = _lines(capsys.readouterr().out)
    assert run["method"] == "tpcca" and run["steps"][0]["tpcca_gave_up"] is False


def test_bad_input_exits_2_with_message(tmp_path, capsys):
    p = tmp_path / "bad.log"
    p.write_text("0 # 1504\n1 q 1504\n")
    assert main([str(p)]) == 2
    assert f"{p}:2: unknown event kind 'q'" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2
    good = tmp_path / "good.log"
    good.write_text(simulate_link(np.ones(300, int), np.ones(300, int)))
    assert main([str(good), "--method", "tpcca"]) == 2
    assert "--capacity-mbps" in capsys.readouterr().err


def test_bad_step_is_refused_by_the_parser(tmp_path, capsys):
    try:
        main([str(tmp_path), "--step", "0:12"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "bad step '0:12'" in capsys.readouterr().err
