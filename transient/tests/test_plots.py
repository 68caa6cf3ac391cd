import math

import pandas as pd
import pytest

from transient import plots, stats

from .synthetic import synthetic_analysis

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def analysis():
    return synthetic_analysis(labels=["kernel:cubic", "ccp:reno", "kernel:bbr"], runs=3,
                              scenarios={"step-0-12-4": (20.0, [(0.0, 0.0, 12.0), (10.0, 12.0, 4.0)])})


def _assert_png_and_pdf(base):
    png, pdf = base.with_name(base.name + ".png"), base.with_name(base.name + ".pdf")
    assert png.read_bytes()[:8] == PNG and png.stat().st_size > 10_000
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 5_000


def test_colors_are_okabe_ito_stable_and_distinct():
    c = plots.label_colors(["kernel:cubic", "ccp:reno", "ccp:cubic beta=0.8"])
    assert set(c.values()) <= set(plots.OKABE_ITO) and len(set(c.values())) == 3
    # same label set in another order (another figure, another scenario): same colors
    assert plots.label_colors(["ccp:cubic beta=0.8", "kernel:cubic", "ccp:reno"]) == c


def test_every_figure_is_written_as_png_and_pdf(tmp_path, analysis):
    a = analysis
    colors = plots.label_colors(a.runs["label"])
    steps0 = a.steps[a.steps["step"] == 0]
    assert plots.plot_timeseries(a.runs, a.series, a.steps, colors, tmp_path / "ts", "s")
    assert plots.plot_step_zoom(a.runs, a.series, steps0, colors, tmp_path / "zoom", "s")
    assert plots.plot_violins(a.steps, colors, tmp_path / "violins", "s")
    assert plots.plot_plane(a.runs, stats.run_summary(a.runs, n_resamples=199), colors, tmp_path / "plane", "s")
    for name in ("ts", "zoom", "violins", "plane"):
        _assert_png_and_pdf(tmp_path / name)


def test_nothing_to_draw_writes_nothing(tmp_path, analysis):
    a = analysis
    colors = plots.label_colors(a.runs["label"])
    assert not plots.plot_timeseries(a.runs, {}, a.steps, colors, tmp_path / "ts", "s")
    assert not plots.plot_step_zoom(a.runs, {}, a.steps[a.steps["step"] == 0], colors, tmp_path / "z", "s")
    assert not plots.plot_violins(a.steps.iloc[0:0], colors, tmp_path / "v", "s")
    no_delay = a.runs.assign(p95_queueing_delay_ms=math.nan)
    assert not plots.plot_plane(no_delay, None, colors, tmp_path / "p", "s")
    assert list(tmp_path.iterdir()) == []


def _rows(at, end, conv_points, converged):
    return pd.DataFrame({"at_s": at, "end_s": end, "convergence_point_s": conv_points, "converged": converged})


def test_zoom_window_spans_the_step_to_past_the_slowest_convergence():
    lo, hi = plots.zoom_window(_rows(10.0, 20.0, [11.0, 12.0, 10.5], [True, True, True]))
    assert 9.5 <= lo < 10.0 and 12.0 < hi <= 13.0  # before the step; a little past 12 s, not the step's end


def test_zoom_window_ignores_runs_that_did_not_converge_and_caps_at_the_step_end():
    # the non-converged run's (bogus) point must not stretch the zoom
    lo, hi = plots.zoom_window(_rows(0.0, 20.0, [1.0, 15.0], [True, False]))
    assert hi < 2.0
    lo, hi = plots.zoom_window(_rows(0.0, 20.0, [math.nan, math.nan], [False, False]))
    assert hi == 20.0  # nobody converged: show the whole step
    lo, hi = plots.zoom_window(_rows(0.0, 1.1, [1.0], [True]))
    assert hi == 1.1


def test_zoom_window_covers_the_queue_drain_after_a_step_down():
    rows = _rows(10.0, 20.0, [10.05, 10.05], [True, True]).assign(drain_time_s=[1.5, 2.0])
    lo, hi = plots.zoom_window(rows)
    assert 12.0 < hi <= 13.0  # converged at once (departures follow the capacity), but the queue took 2 s
    lo, hi = plots.zoom_window(rows.assign(drain_time_s=float("nan")))
    assert hi < 10.5
