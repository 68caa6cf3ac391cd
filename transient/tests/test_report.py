import html as htmllib
import re

import pandas as pd
import pytest

from transient import analyze_all, write_report
from transient import plots as plots_mod
from transient import stats
from transient.report import combine

from . import browser
from .synthetic import synthetic_analysis

PNG = b"\x89PNG\r\n\x1a\n"
FAST = {"n_resamples": 499}  # report tests check the page, not the bootstrap's precision


@pytest.fixture(scope="module")
def synthetic():
    return synthetic_analysis(labels=["kernel:cubic", "ccp:reno", "ccp:cubic beta=0.8"], runs=3)


@pytest.fixture(scope="module")
def written(tmp_path_factory, synthetic):
    out = tmp_path_factory.mktemp("report")
    a = synthetic
    page = write_report(out, a.runs, a.steps, a.series, source="synthetic", **FAST)
    return out, page


def _srcs(page):
    text = page.read_text()
    return re.findall(r'<img src="([^"]+)"', text), re.findall(r'<a href="([^"#][^"]*)"', text)


def test_report_writes_every_file_it_references(written, synthetic):
    out, page = written
    assert page == out / "report.html"
    imgs, links = _srcs(page)
    scenarios = sorted(synthetic.runs["scenario"].unique())
    n_steps = synthetic.steps.groupby(["scenario", "step"]).ngroups
    # per scenario: plane, time series, violins; per step: one zoom
    assert len(imgs) == 3 * len(scenarios) + n_steps
    assert sum("zoom-" in i for i in imgs) == n_steps
    for img in imgs:
        png = out / img
        assert png.read_bytes()[:8] == PNG and png.stat().st_size > 10_000, img
        pdf = png.with_suffix(".pdf")
        assert pdf.read_bytes()[:5] == b"%PDF-", pdf
        assert img.replace(".png", ".pdf") in links
    for link in links:
        assert (out / htmllib.unescape(link)).is_file(), link
    for name in ("runs.csv", "steps.csv", "summary_runs.csv", "summary_steps.csv"):
        assert name in links
    assert not list(out.glob(".report-tmp-*")) and not list(out.glob(".*.tmp"))


def test_tables_show_median_and_ci_rounded_from_the_summary(written, synthetic):
    out, page = written
    text = htmllib.unescape(page.read_text())
    summary = pd.read_csv(out / "summary_steps.csv")
    assert len(summary) == synthetic.steps.groupby(["label", "scenario", "step"]).ngroups * len(stats.STEP_METRICS)
    for label in synthetic.runs["label"].unique():
        row = summary[(summary["label"] == label) & (summary["scenario"] == "step-0-12-4")
                      & (summary["step"] == 0) & (summary["metric"] == "normalized_area")].iloc[0]
        assert stats.format_estimate(row["median"], row["ci_low"], row["ci_high"]) in text
    runs_sum = pd.read_csv(out / "summary_runs.csv")
    row = runs_sum[(runs_sum["label"] == "kernel:cubic") & (runs_sum["metric"] == "throughput_mbps")].iloc[0]
    assert stats.format_estimate(row["median"], row["ci_low"], row["ci_high"]) in text
    assert not re.search(r"\d\s*(\+-|±)\s*\d", text)  # no "11.6 +- 0.00888": intervals only


def test_non_converged_runs_are_counted_not_averaged(written):
    out, page = written
    summary = pd.read_csv(out / "summary_steps.csv")
    conv = summary[(summary["label"] == "ccp:reno") & (summary["step"] == 0) & (summary["metric"] == "convergence_s")]
    assert set(conv["n_converged"]) == {2} and set(conv["n_not_converged"]) == {1} and set(conv["n_valid"]) == {2}
    text = page.read_text()
    assert re.search(r"<td class=\"m\">converged</td>.*?<td>2/3</td>", text)


def test_page_lists_metric_definitions_with_sources(written):
    text = written[1].read_text()
    for needle in ("mm-throughput-graph", "BobAnkh/TPCCA", "Seborg", "Normalized Area", "damping ratio",
                   "scipy.stats.bootstrap", "percentile"):
        assert needle in text, needle
    assert ("FIELD" + "-NOTES") not in text, "the page cites public sources only"
    assert "TPCCA faults kept" not in text  # method ccplab


def test_tpcca_method_lists_the_faults_kept(tmp_path):
    a = synthetic_analysis(labels=["kernel:cubic"], runs=2, method="tpcca",
                           scenarios={"s": (12.0, [(0.0, 0.0, 12.0)])})
    faults = ["counts arrivals (+), not departures", "non-convergence becomes bin index 40"]
    text = write_report(tmp_path / "a", a.runs, a.steps, a.series, tpcca_faults=faults, **FAST).read_text()
    assert "TPCCA faults kept" in text and all(htmllib.escape(f) in text for f in faults)
    # the faults can also come with the analysis' metadata
    runs = a.runs.copy()
    runs.attrs["tpcca_faults"] = faults[:1]
    text = write_report(tmp_path / "b", runs, a.steps, a.series, **FAST).read_text()
    assert htmllib.escape(faults[0]) in text and htmllib.escape(faults[1]) not in text
    # by default: the faults the engine's tpcca method declares
    from transient import TPCCA_FAULTS

    text = write_report(tmp_path / "c", a.runs, a.steps, a.series, **FAST).read_text()
    assert TPCCA_FAULTS and all(htmllib.escape(f) in text for f in TPCCA_FAULTS)


def test_failed_report_keeps_the_previous_one(tmp_path, monkeypatch):
    a = synthetic_analysis(labels=["kernel:cubic"], runs=2, scenarios={"s": (12.0, [(0.0, 0.0, 12.0)])})
    page = write_report(tmp_path, a.runs, a.steps, a.series, **FAST)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    def boom(*args, **kwargs):
        raise RuntimeError("plot failed")

    monkeypatch.setattr(plots_mod, "plot_violins", boom)
    with pytest.raises(RuntimeError, match="plot failed"):
        write_report(tmp_path, a.runs.assign(throughput_mbps=1.0), a.steps, a.series, **FAST)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before and page.is_file()
    assert not list(tmp_path.glob(".report-tmp-*"))


def test_failed_first_report_leaves_nothing(tmp_path, monkeypatch):
    a = synthetic_analysis(labels=["kernel:cubic"], runs=2, scenarios={"s": (12.0, [(0.0, 0.0, 12.0)])})
    monkeypatch.setattr(plots_mod, "plot_plane", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("x")))
    with pytest.raises(RuntimeError):
        write_report(tmp_path, a.runs, a.steps, a.series, **FAST)
    assert list(tmp_path.iterdir()) == []


def test_report_without_series_has_no_time_plots(tmp_path, synthetic):
    page = write_report(tmp_path, synthetic.runs, synthetic.steps, None, **FAST)
    imgs, _ = _srcs(page)
    assert imgs and not any("timeseries" in i or "zoom" in i for i in imgs)


def test_bad_tables_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        write_report(tmp_path, pd.DataFrame(columns=["run_id", "cca", "scenario"]), pd.DataFrame())
    with pytest.raises(ValueError, match="scenario"):
        write_report(tmp_path, pd.DataFrame({"run_id": ["a"], "cca": ["x"]}), pd.DataFrame())


def test_combine_keeps_runs_of_different_directories_apart():
    a = synthetic_analysis(labels=["kernel:cubic"], runs=2, scenarios={"s": (12.0, [(0.0, 0.0, 12.0)])})
    both = combine([("exp1", a), ("exp2", a)])
    assert both.runs["run_id"].is_unique and len(both.runs) == 2 * len(a.runs)
    assert set(both.steps["run_id"]) == set(both.runs["run_id"]) == set(both.series)
    assert combine([("only", a)]) is a
    with pytest.raises(ValueError, match="differ"):
        combine([("x", a), ("x", a)])


def test_report_on_a_results_tree_of_real_logs(results_dir):
    """Logs of a simulated drop-tail link analysed by the engine (transient.analyze_all), then reported."""
    a = analyze_all(results_dir)
    page = write_report(results_dir, a.runs, a.steps, a.series, errors=a.errors, **FAST)
    imgs, _ = _srcs(page)
    assert any("zoom-" in i for i in imgs) and any("plane-" in i for i in imgs)
    for img in imgs:
        assert (results_dir / img).is_file() and (results_dir / img).with_suffix(".pdf").is_file()
    text = page.read_text()
    assert "ccp:reno" in text and "ccp:cubic" in text
    assert len(pd.read_csv(results_dir / "runs.csv")) == 4


def test_report_on_real_logs_with_a_step_down(tmp_path):
    """0 -> 12 Mbit/s, then 12 -> 4 at 1.5 s, through a simulated drop-tail link: the step down is reported by its
    queue (peak queueing delay, drops) and gets its own zoomed plot."""
    import numpy as np

    from .conftest import ramp_then_full, simulate_link, write_run

    root = tmp_path / "results"
    n, at = 3000, 1500
    opps = np.ones(n, int)
    opps[at:] = (np.arange(n - at) % 3 == 0).astype(int)  # one delivery opportunity every 3 ms: 4 Mbit/s
    steps = [{"at_s": 0.0, "from_mbps": 0.0, "to_mbps": 12.0}, {"at_s": at / 1000, "from_mbps": 12.0, "to_mbps": 4.0}]
    for cca, ramp in (("ccp:reno", (400, 500)), ("kernel:cubic", (200, 300))):
        for k, r in enumerate(ramp, start=1):
            sends = ramp_then_full(n, r)
            sends[at + 200:] = opps[at + 200:]  # the sender adapts 200 ms after the step down
            text = simulate_link(opps, sends, queue_packets=60)
            write_run(root / "runs" / cca.replace(":", "-") / f"run-{k}", cca, k, text, steps, name="step-0-12-4")
    a = analyze_all(root)
    page = write_report(root, a.runs, a.steps, a.series, **FAST)
    imgs, _ = _srcs(page)
    assert sorted(i for i in imgs if "zoom-" in i) == ["plots/zoom-step-0-12-4-step-0.png",
                                                        "plots/zoom-step-0-12-4-step-1.png"]
    summary = pd.read_csv(root / "summary_steps.csv")
    down = summary[(summary["step"] == 1)]
    assert set(down["kind"]) == {"down"}
    peak = down[down["metric"] == "peak_queueing_delay_ms"]
    assert (peak["n_valid"] == 2).all() and (peak["median"] > 50).all()  # 60 packets at 4 Mbit/s: up to 180 ms
    assert (down[down["metric"] == "drops"]["median"] > 0).all()
    assert "Step 1 (down): 12 → 4 Mbit/s" in page.read_text()


def test_page_loads_every_image_in_chromium(written):
    out, page = written
    images = browser.page_images(page)
    assert len(images) == len(_srcs(page)[0]) > 0
    assert [i for i in images if i["status"] != "loaded"] == []
    assert all(i["width"] >= 600 for i in images)


def test_browser_check_sees_a_missing_image(tmp_path):
    a = synthetic_analysis(labels=["kernel:cubic"], runs=2, scenarios={"s": (12.0, [(0.0, 0.0, 12.0)])})
    page = write_report(tmp_path, a.runs, a.steps, a.series, **FAST)
    victim = tmp_path / _srcs(page)[0][0]
    victim.unlink()
    images = browser.page_images(page)
    assert [i["src"] for i in images if i["status"] == "failed"] == [victim.relative_to(tmp_path).as_posix()]


def test_ccplab_report_compares_several_directories(results_dir, tmp_path, capsys):
    import shutil

    from ccplab import cli

    other = tmp_path / "second" / "results"
    shutil.copytree(results_dir, other)
    out = tmp_path / "page"
    assert cli.main(["report", str(results_dir), str(other), "--out", str(out)]) == 0
    assert str(out / "report.html") in capsys.readouterr().out
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 8 and runs["run_id"].is_unique
    # both inputs are named "results": their parents tell them apart in the run ids
    assert {r.rsplit("/runs/", 1)[0] for r in runs["run_id"]} == {f"{results_dir.parent.name}/results",
                                                                 "second/results"}
    imgs, _ = _srcs(out / "report.html")
    assert imgs and all((out / i).is_file() for i in imgs)
    assert not (results_dir / "report.html").exists()  # --out given: the inputs are left alone


def test_ccplab_report_defaults_to_the_first_directory(results_dir, capsys):
    from ccplab import cli

    assert cli.main(["report", str(results_dir)]) == 0
    assert (results_dir / "report.html").is_file() and (results_dir / "summary_steps.csv").is_file()


def test_ccplab_report_names_a_missing_directory(tmp_path, capsys):
    from ccplab import cli

    missing = tmp_path / "nope"
    assert cli.main(["report", str(missing)]) == 2
    assert f"{missing}: no such file or directory" in capsys.readouterr().err


def test_ccplab_report_passes_the_method_through(results_dir, tmp_path):
    from ccplab import cli
    from transient import TPCCA_FAULTS

    out = tmp_path / "tpcca"
    assert cli.main(["report", str(results_dir), "--method", "tpcca", "--out", str(out)]) == 0
    assert set(pd.read_csv(out / "runs.csv")["method"]) == {"tpcca"}
    text = (out / "report.html").read_text()
    assert "Analysis method: <b>tpcca</b>" in text and htmllib.escape(TPCCA_FAULTS[0]) in text
    assert "Normalized Area (TPCCA, no unit)" in text and "Normalized Area (s)" not in text
    assert cli.main(["report", str(results_dir), "--out", str(tmp_path / "default")]) == 0
    assert set(pd.read_csv(tmp_path / "default" / "runs.csv")["method"]) == {"ccplab"}
    text = (tmp_path / "default" / "report.html").read_text()
    assert "TPCCA faults kept" not in text and "Normalized Area (s)" in text
