import re

import pandas as pd
import pytest

from transient import analyze_all, write_report
from transient import plots as plots_mod
from transient.analyze import RUN_COLUMNS, STEP_COLUMNS


def test_report_files_exist_and_html_references_them(results_dir):
    a = analyze_all(results_dir)
    out = write_report(results_dir, a.runs, a.steps, a.series)
    assert out == results_dir / "report.html"
    for name in ("runs.csv", "steps.csv", "report.html"):
        assert (results_dir / name).stat().st_size > 0
    runs = pd.read_csv(results_dir / "runs.csv")
    steps = pd.read_csv(results_dir / "steps.csv")
    assert list(runs.columns) == RUN_COLUMNS and len(runs) == 4
    assert list(steps.columns) == STEP_COLUMNS and len(steps) == 4
    html = out.read_text()
    imgs = re.findall(r'<img src="([^"]+)"', html)
    assert sorted(imgs) == sorted(
        f"plots/{k}-step-0-12.png" for k in ("throughput", "transient", "tradeoff"))
    for img in imgs:
        png = results_dir / img
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    # per-CCA summary and the metric explanations are there
    assert "ccp:reno" in html and "ccp:cubic" in html and "Normalized Area" in html
    assert "mm-throughput-graph" in html and "BobAnkh/TPCCA" in html
    assert not list(results_dir.glob(".report-tmp-*"))


def test_failed_report_leaves_nothing_half_written(results_dir, monkeypatch):
    a = analyze_all(results_dir)

    def boom(*args, **kwargs):
        raise RuntimeError("plot failed")

    monkeypatch.setattr(plots_mod, "plot_tradeoff", boom)
    with pytest.raises(RuntimeError, match="plot failed"):
        write_report(results_dir, a.runs, a.steps, a.series)
    for name in ("runs.csv", "steps.csv", "report.html", "plots"):
        assert not (results_dir / name).exists()
    assert not list(results_dir.glob(".report-tmp-*"))


def test_report_without_steps_or_series(tmp_path, results_dir):
    a = analyze_all(results_dir)
    out = write_report(tmp_path / "out", a.runs, a.steps.iloc[0:0], None)
    html = out.read_text()
    assert "plots/tradeoff-step-0-12.png" in html
    assert "throughput-step-0-12.png" not in html and "transient-step-0-12.png" not in html


def test_empty_runs_table_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        write_report(tmp_path, pd.DataFrame(columns=RUN_COLUMNS), pd.DataFrame(columns=STEP_COLUMNS))
