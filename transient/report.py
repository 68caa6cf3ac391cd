"""Write a results report: runs.csv, steps.csv, plots/*.png and report.html.

Everything is first written into a temporary directory next to the outputs
and only then renamed into place (report.html last), so a failure leaves
either the previous report or none, never half a file.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Sequence

import jinja2
from markupsafe import Markup
import pandas as pd

from . import plots
from .analyze import RUN_COLUMNS, STEP_COLUMNS

SUMMARY_METRICS = [
    ("throughput_mbps", "throughput (Mbit/s)"),
    ("utilization", "utilization"),
    ("p95_queueing_delay_ms", "p95 queueing delay (ms)"),
    ("p95_signal_delay_ms", "p95 signal delay (ms)"),
    ("power_score", "power score"),
    ("convergence_time_s", "convergence time (s)"),
    ("normalized_area", "Normalized Area"),
    ("steady_utilization", "steady utilization"),
]
"""(column, label) of the per-CCA summary table."""

METRIC_NOTES = [
    ("capacity, throughput, utilization",
     "Sum of bytes of delivery opportunities (#) and of departures (-) x 8 / (last - first event time); "
     "utilization = throughput / capacity. Source: mahimahi mm-throughput-graph."),
    ("p95 per-packet queueing delay",
     "sorted(delays)[int(0.95 N)] over the link delay of every departed packet (queueing + transmission, "
     "no propagation). Source: mahimahi mm-throughput-graph."),
    ("p95 signal delay",
     "Minimum time for a message created at time t to reach the receiver, per millisecond of sending time "
     "(ms without a departure inherit the next ms's value + 1); 95th percentile over ms. "
     "Source: mahimahi mm-throughput-graph / Sprout (NSDI'13)."),
    ("power score",
     "throughput (Mbit/s) / p95 signal delay (s): the score of the mahimahi-based congestion-control contest "
     "(MIT 6.829); Kleinrock's power."),
    ("converged, convergence time",
     "TPCCA steady-state detector (SIGCOMM'21 poster, github BobAnkh/TPCCA) on the departure throughput in "
     "1-RTT bins: three 10-RTT windows starting 4 RTT apart; steady when the variance of their means and of "
     "their variances are both <= 0.02 (Mbit/s units). Convergence point = middle of the middle window; "
     "convergence time is measured from the capacity step. Unlike TPCCA, a run that never becomes steady "
     "is reported as not converged (NaN), not as bin 40. As in TPCCA, a plateau at the wrong level (even a "
     "silent sender) counts as steady: compare steady_level_mbps in steps.csv with the step's to_mbps."),
    ("Normalized Area",
     "(12 / B) x sum over bins before convergence of |B - throughput| x bin width, divided by the time from "
     "the step to convergence; B = nominal new capacity (Mbit/s). Source: TPCCA. Lower is better."),
    ("steady throughput, steady utilization",
     "Mean departure throughput from the convergence point to the end of the step (next step or run end), "
     "or over the last half of the step if it never converged (steady_basis = last-half); divided by the "
     "capacity measured from delivery opportunities in the same bins."),
]

_TEMPLATE = jinja2.Template(
    """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Transient performance report</title>
<style>
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th { background: #f0f0f0; } td.t { text-align: left; }
img { max-width: 100%; margin: 0.5em 0; } dt { font-weight: bold; margin-top: 0.5em; }
</style></head><body>
<h1>Transient performance report</h1>
<p>Results: <code>{{ source }}</code>. Generated {{ generated }}. {{ n_runs }} run(s), {{ n_steps }} step record(s).
Tables: <a href="runs.csv">runs.csv</a>, <a href="steps.csv">steps.csv</a>.</p>
{% if errors %}<h2>Runs not analysed</h2><ul>{% for p, e in errors %}<li><code>{{ p }}</code>: {{ e }}</li>{% endfor %}</ul>{% endif %}
{% for sc in scenarios %}
<h2>Scenario {{ sc.name }}</h2>
<h3>Summary per CCA (mean &plusmn; std over runs)</h3>
<table><tr><th>CCA</th><th>runs</th><th>converged</th>{% for _, label in metrics %}<th>{{ label }}</th>{% endfor %}</tr>
{% for row in sc.summary %}<tr><td class="t">{{ row.cca }}</td><td>{{ row.n }}</td><td>{{ row.converged }}</td>{% for v in row.cells %}<td>{{ v }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% for img, caption in sc.images %}<figure><img src="{{ img }}" alt="{{ caption }}"><figcaption>{{ caption }}</figcaption></figure>
{% endfor %}
{% endfor %}
<h2>Per-run results</h2>
<table><tr>{% for c in run_cols %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in run_rows %}<tr>{% for v in row %}<td{% if loop.index <= 4 %} class="t"{% endif %}>{{ v }}</td>{% endfor %}</tr>
{% endfor %}</table>
<h2>Metrics</h2><dl>
{% for name, text in notes %}<dt>{{ name }}</dt><dd>{{ text }}</dd>
{% endfor %}</dl>
</body></html>
""",
    autoescape=True,
)

_RUN_TABLE_COLUMNS = [
    "cca", "scenario", "run", "run_id", "throughput_mbps", "utilization", "p95_queueing_delay_ms",
    "p95_signal_delay_ms", "power_score", "converged", "convergence_time_s", "normalized_area",
    "steady_utilization",
]


def _fmt(v: object) -> str:
    if v is None or v is pd.NA:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _mean_std(values: pd.Series) -> str:
    v = pd.to_numeric(values, errors="coerce").dropna()
    if v.empty:
        return "NaN"
    if len(v) == 1:
        return _fmt(float(v.iloc[0]))
    mean, std = float(v.mean()), float(v.std(ddof=1))
    if std <= 1e-9 * max(abs(mean), 1e-12):  # identical runs: show 0, not float noise
        std = 0.0
    return f"{_fmt(mean)} &plusmn; {_fmt(std)}"


def summary_by_cca(runs: pd.DataFrame) -> list[dict]:
    """Rows of the per-CCA summary of one scenario (mean +- sample std over runs)."""
    out = []
    labels = runs["cca"].map(plots._label)
    for cca, g in sorted(runs.groupby(labels), key=lambda x: x[0]):
        conv = g["converged"].dropna()
        out.append(
            {
                "cca": cca,
                "n": len(g),
                "converged": f"{int(conv.astype(bool).sum())}/{len(conv)}" if len(conv) else "n/a",
                "cells": [Markup(_mean_std(g[c])) for c, _ in SUMMARY_METRICS],
            }
        )
    return out


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "scenario"


def write_report(
    results_dir: str | Path,
    runs_df: pd.DataFrame,
    steps_df: pd.DataFrame,
    series: Mapping[str, pd.DataFrame] | None = None,
    *,
    errors: Sequence[tuple[str, str]] = (),
    source: str | None = None,
) -> Path:
    """Write runs.csv, steps.csv, plots/*.png and report.html into ``results_dir``.

    Args:
        results_dir: output directory (created if missing).
        runs_df, steps_df: the tables from `transient.analyze.analyze_results`.
        series: run_id -> rate series (`Analysis.series`); without it the
            throughput-over-time figure is left out.
        errors: (path, message) of runs that could not be analysed, listed
            in the report.
        source: what to call the analysed input in the report (default
            results_dir).

    Returns:
        Path of report.html.

    Raises:
        ValueError: runs_df lacks the expected columns or is empty.
    """
    missing = [c for c in ("run_id", "cca", "scenario") if c not in runs_df.columns]
    if missing:
        raise ValueError(f"runs table lacks columns {missing}")
    if runs_df.empty:
        raise ValueError("runs table is empty: nothing to report")
    out = Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    series = series or {}
    tmp = Path(tempfile.mkdtemp(prefix=".report-tmp-", dir=out))
    try:
        (tmp / "plots").mkdir()
        runs_df.reindex(columns=[c for c in RUN_COLUMNS if c in runs_df.columns] or runs_df.columns).to_csv(
            tmp / "runs.csv", index=False)
        steps_df.reindex(columns=STEP_COLUMNS).to_csv(tmp / "steps.csv", index=False)
        scenarios = []
        scen_labels = runs_df["scenario"].map(lambda s: "unnamed" if s is None or s is pd.NA or s != s else str(s))
        for name in sorted(scen_labels.unique()):
            r = runs_df[scen_labels == name]
            s = steps_df[steps_df["run_id"].isin(r["run_id"])] if len(steps_df) else steps_df
            slug = _slug(name)
            images = []
            for fname, ok, caption in (
                (f"throughput-{slug}.png", lambda p: plots.plot_throughput(r, series, s, p, name),
                 "Departure throughput in 1-RTT bins per CCA (runs overlaid) against the measured capacity; dotted: capacity steps."),
                (f"transient-{slug}.png", lambda p: plots.plot_transient(s, p, name),
                 "Normalized Area and convergence time per CCA (box: quartiles over converged runs; dots: runs)."),
                (f"tradeoff-{slug}.png", lambda p: plots.plot_tradeoff(r, p, name),
                 "Throughput vs. 95th-percentile per-packet queueing delay (x reversed: better is up and right)."),
            ):
                if ok(tmp / "plots" / fname):
                    images.append((f"plots/{fname}", caption))
            scenarios.append({"name": name, "summary": summary_by_cca(r), "images": images})
        run_cols = [c for c in _RUN_TABLE_COLUMNS if c in runs_df.columns]
        run_rows = [[_fmt(v) for v in row] for row in runs_df[run_cols].itertuples(index=False)]
        html = _TEMPLATE.render(
            source=source or str(out),
            generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            n_runs=len(runs_df), n_steps=len(steps_df), errors=list(errors), scenarios=scenarios,
            metrics=SUMMARY_METRICS, run_cols=run_cols, run_rows=run_rows, notes=METRIC_NOTES,
        )
        (tmp / "report.html").write_text(html, encoding="utf-8")
        # Publish: data and images first, the page that references them last.
        (out / "plots").mkdir(exist_ok=True)
        for png in sorted((tmp / "plots").iterdir()):
            os.replace(png, out / "plots" / png.name)
        for name in ("runs.csv", "steps.csv", "report.html"):
            os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / "report.html"
