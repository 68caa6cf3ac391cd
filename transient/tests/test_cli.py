import json
import math

import numpy as np

from transient.__main__ import main

from .conftest import simulate_link


def test_json_output_lists_runs_and_steps(results_dir, capsys):
    assert main([str(results_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["runs"]) == 4 and len(data["steps"]) == 4 and data["errors"] == []
    assert {r["cca"] for r in data["runs"]} == {"ccp:reno", "ccp:cubic"}
    assert all(r["power_score"] is None or math.isfinite(r["power_score"]) for r in data["runs"])


def test_out_writes_report(results_dir, tmp_path, capsys):
    out = tmp_path / "report"
    assert main([str(results_dir), "--out", str(out)]) == 0
    assert (out / "report.html").exists() and (out / "runs.csv").exists()
    assert "ccp:reno" in capsys.readouterr().out


def test_bare_log_with_step_and_rtt(tmp_path, capsys):
    n = 4000
    p = tmp_path / "uplink.log"
    p.write_text(simulate_link(np.ones(n, int), (np.arange(n) >= 500).astype(int)))
    assert main([str(p), "--json", "--rtt-ms", "100", "--step", "0:0:12"]) == 0
    (step,) = json.loads(capsys.readouterr().out)["steps"]
    assert step["converged"] is True and abs(step["convergence_time_s"] - 1.4) < 1e-9


def test_bad_input_exits_2_with_message(tmp_path, capsys):
    p = tmp_path / "bad.log"
    p.write_text("0 # 1504\n1 q 1504\n")
    assert main([str(p)]) == 2
    err = capsys.readouterr().err
    assert f"{p}:2: unknown event kind 'q'" in err
    assert main([str(tmp_path / "missing")]) == 2
