"""One HTML page comparing CCAs (labels: CCA + parameters) across scenarios, with tables and figures.

Output directory layout (``write_report``)::

    report.html           the page (written last)
    runs.csv, steps.csv   the analysis tables as given (TRANSIENT-CONTRACT columns first)
    summary_runs.csv      per label x scenario: median, IQR, bootstrap 95% CI of each run metric
    summary_steps.csv     per label x scenario x step: the same for each step metric (+ convergence counts)
    flows.csv, fairness.csv, flow_steps.csv, summary_flows.csv, harm.csv
                          only when a run has several flows: the per-flow tables (transient.flows), the
                          per-flow summary (median, IQR, CI per label x scenario) and the harm table
    plots/NAME.png        every figure for the page ...
    plots/NAME.pdf        ... and the same figure as a PDF for a paper

Atomicity: all figures are rendered into a temporary directory inside the
output directory first; only when everything rendered are they moved into
``plots/`` (``os.replace``), then the tables and finally report.html are
written with `transient.atomic.write_atomic`.  A failure while rendering
leaves the previous report (or none) untouched; no reader ever sees half a
file.

Statistics and rounding come from `transient.stats` (median, IQR, seeded
percentile-bootstrap CI of the median; figures printed to the digits their
interval supports); figures from `transient.plots`.
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
import numpy as np
import pandas as pd
from markupsafe import Markup, escape

from . import plots, stats
from .analyze import RUN_COLUMNS, STEP_COLUMNS
from .flows import COEXISTENCE_METRICS, coexistence_pairs, coexistence_summary
from .flows import harm as flow_harm
from ccplab_util.atomic import write_atomic
from .series import SERIES_COLUMNS

OVERVIEW_RUN_METRICS = ["throughput_mbps", "p95_queueing_delay_ms", "power_score"]
"""Run metrics of the cross-scenario overview table."""

OVERVIEW_STEP_METRICS = ["convergence_s", "normalized_area", "peak_queueing_delay_ms"]
"""Step metrics of the cross-scenario overview table."""

METRIC_NOTES = [
    ("capacity, throughput, utilization (per run)",
     "Bytes of all delivery opportunities (#) and of all departures (-) x 8 / (last - first event time); "
     "utilization = throughput / capacity.", "mahimahi mm-throughput-graph"),
    ("p95 queueing delay (per run)",
     "sorted(delays)[int(0.95 N)] over the per-packet link delay of every departure (queueing + transmission, "
     "no propagation).", "mahimahi mm-throughput-graph"),
    ("p95 signal delay (per run)",
     "Minimum time for a message created at time t to reach the receiver, per ms of sending time (an ms "
     "without a departure inherits the next ms's value + 1); 95th percentile over ms.",
     "mahimahi mm-throughput-graph; Sprout (Winstein et al., NSDI 2013)"),
    ("power score (per run)", "throughput (Mbit/s) / p95 signal delay (s); Kleinrock's power.",
     "the mahimahi-based congestion-control contest (MIT 6.829)"),
    ("converged, convergence time (per step)",
     "Seconds from the step to the convergence point. Method ccplab: the throughput x (departures per RTT "
     "bin) is compared with the reference r (the capacity the link offered in the same bins, smoothed alike, so "
     "trace noise is not the CCA's error); on the relative error e = (x - r) / mean(r), three 10-RTT windows "
     "4 RTT apart must be stable (variance of window means <= 0.02/12^2, of window variances <= 0.02/12^4: "
     "TPCCA's thresholds made relative) and in band (every window mean and the bin itself within 5% of r); "
     "the point is the start of the first such bin. Otherwise the step did not converge: no number. Method "
     "tpcca: the reference detector, faults kept (see below). Summarised over converged runs only; the others "
     "are counted (\"k/n converged\").",
     "TPCCA poster (SIGCOMM 2021, github BobAnkh/TPCCA), corrected as in transient.convergence"),
    ("Normalized Area (per step)",
     "Method ccplab: gap area / |delta B|, gap area = sum over the bins before convergence of |r - x| x bin "
     "width (Mbit), delta B = the step's nominal change (Mbit/s); unit s (\"seconds of the whole step "
     "lost\"): a slower transient always scores worse and steps of any size compare. Method tpcca: (12 / B) x "
     "sum |B - x_i| dt / (t_s - t_0) over arrival bins, B = nominal new rate (dividing by the convergence "
     "time rewards long transients). Lower is better.",
     "TPCCA poster; transient.convergence"),
    ("gap area", "sum of |r - x| x bin width from the step to convergence (Mbit).", "transient.convergence"),
    ("steady throughput, steady utilization",
     "Mean departure throughput from the convergence point to the step's end; divided by the capacity "
     "offered in the same bins.", "transient.convergence"),
    ("rise time, peak time, overshoot, settling time",
     "On the sender's rate (arrivals per RTT bin) with the trace's noise taken out, normalized to the step "
     "(u = 0 old level, 1 new level; departures cannot overshoot a step up): rise time from the first crossing "
     "of 0.1 to that of 0.9; peak time at the largest u; overshoot 100 (max u - 1) %; settling time: end of "
     "the last bin outside ±2% (±5%) of the new nominal rate (the bands drawn in the zoomed plots). For a "
     "second-order system: PO = 100 exp(-zeta pi / sqrt(1 - zeta^2)), t_p = pi / (w_n sqrt(1 - zeta^2)), 2% "
     "settling time about 4 / (zeta w_n).",
     "Ogata, Modern Control Engineering, 5th ed., 5.3; "
     "transient.secondorder"),
    ("damping ratio, natural frequency, fit R², response class",
     "zeta and w_n (rad/s) of a second-order-plus-dead-time step response (gain K, dead time theta: "
     "u = K g(t - theta)) fitted to u with t counted from the input step, not from the first sample "
     "(scipy.optimize.curve_fit); theta is the dead time column; R² = 1 - SS_res / SS_tot of that fit. Class: not second-order when R² is too "
     "low, undamped (limit cycle) when zeta < 0.05, underdamped below 0.9, critically damped 0.9-1.1, "
     "overdamped above. Logarithmic decrement: zeta = delta / sqrt(4 pi^2 + delta^2).",
     "Ogata 5.3; Seborg, Edgar and Mellichamp, Process Dynamics and Control (empirical models from step tests); "
     "transient.secondorder"),
    ("peak queueing delay, standing queue, drain time, drops (per step)",
     "A saturated link departs at its capacity, so a step down shows in the queue, not in the throughput; "
     "every step is also scored here. Peak queueing delay: largest per-packet delay above the log's smallest "
     "(the base) during the transient; standing queue: median queueing delay (ms) and mean occupancy "
     "(packets) after the transient; drain time: from the step until the queue is back within max(10%, 2 ms) "
     "of its standing level; drops: packets dropped (d lines) during the transient.",
     "transient.delayside"),
    ("per-flow throughput, share, p95 queueing delay, smoothness (competing flows)",
     "Each packet's flow from the link's flow attribution (its destination port). Throughput: the flow's "
     "departed bytes x 8 / its span (first full-size to last packet); share: its departed bytes / all the "
     "link's over its span; p95 queueing delay: mahimahi's sorted(q)[int(0.95 N)] of its departures' delay minus the "
     "run's smallest; smoothness: std / mean of its per-RTT throughput after it converged to its fair share, "
     "median over its intervals.", "RFC 5166 (smoothness); transient.flows"),
    ("Jain's fairness index",
     "J = (sum x)^2 / (n sum x^2) over the flows active in an RTT bin (1: equal shares, 1/n: one flow has "
     "all); per interval of a constant set of active flows, its median over the interval's bins.",
     "Jain, Chiu & Hawe, DEC-TR-301 (1984); RFC 5166, Fairness and Convergence"),
    ("arrivals and departures, delta-fair convergence time",
     "Every change of the set of active flows is a step of each active flow's fair share (offered capacity / "
     "n active), scored like a capacity step (convergence, Normalized Area, second order, delay side). "
     "delta-fair convergence time (two flows): from the second flow's start until both throughputs are within "
     "(1 ± delta) of the fair share, delta 0.1.",
     "RFC 5166, Fairness and Convergence (after Floyd, Handley & Padhye 2000); transient.flows"),
    ("harm",
     "For a flow of CCA A sharing the link with CCA B, against the median of A's single-flow runs in the same "
     "scenario: throughput harm (alone - with) / alone, delay harm (with - alone) / with (p95 queueing delay), "
     "each in [0, 1], 0 when not worse than alone.",
     "Ware, Mukerjee, Seshan & Sherry, Beyond Jain's Fairness Index, HotNets 2019"),
    ("statistics",
     f"Per label x scenario (x step): median, interquartile range (25th-75th percentile), and a "
     f"{stats.CONFIDENCE:.0%} confidence interval of the median by the {stats.CI_METHOD} bootstrap "
     f"(scipy.stats.bootstrap, {stats.N_RESAMPLES} resamples, seeded; BCa is unstable for medians of few "
     "runs). Cells read \"median [CI low, CI high]\", rounded to the digits the interval supports (its "
     "width's first significant digit, second when that digit is 1); below: IQR and n (values / runs).",
     "Efron & Tibshirani, An Introduction to the Bootstrap (1993), ch. 13"),
]
"""(metric, definition, source) listed on the page."""

_TEMPLATE = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True).from_string(
    """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Transient performance: {{ labels|join(", ") }}</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 1150px; margin: 1.5em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
h3 { margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; font-size: 0.82em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; vertical-align: top; white-space: nowrap; }
th { background: #f2f2f2; } td.m, th.m { text-align: left; }
td small { color: #666; } th .sw { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.3em; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #444; } figcaption a { color: #666; }
dt { font-weight: bold; margin-top: 0.6em; } dd { margin-left: 1.5em; } dd i { color: #555; }
.meta { color: #444; } nav ul { columns: 2; font-size: 0.9em; } .warn { color: #a40; }
</style></head><body>
<h1>Transient performance of congestion control: {{ labels|length }} CCA configuration(s) across
{{ scenarios|length }} scenario(s)</h1>
<p class="meta">Sources: {% for s in sources %}<code>{{ s }}</code>{{ ", " if not loop.last }}{% endfor %}.
Analysis method: <b>{{ methods|join(", ") }}</b>. {{ n_runs }} run(s), {{ n_steps }} step record(s).
Generated {{ generated }}.<br>
Tables: <a href="runs.csv">runs.csv</a>, <a href="steps.csv">steps.csv</a>,
<a href="summary_runs.csv">summary_runs.csv</a>, <a href="summary_steps.csv">summary_steps.csv</a>{% if flows %},
<a href="flows.csv">flows.csv</a>, <a href="fairness.csv">fairness.csv</a>, <a href="flow_steps.csv">flow_steps.csv</a>,
<a href="summary_flows.csv">summary_flows.csv</a>, <a href="harm.csv">harm.csv</a>{% endif %}.
Every figure is also a PDF (link under it). Cells: median [{{ ci_text }}], IQR and n below.</p>
{% if external %}<p class="meta">External algorithms: {% for l in external %}<b>{{ l }}</b>{{ ", " if not loop.last }}{% endfor %}:
Portus algorithms of their own binaries, not of the suite, run through the same link and ccp-datapath (each
run's command is in its metadata.json, <code>external</code>).</p>{% endif %}
{% if errors %}<h2 class="warn">Runs not analysed</h2><ul>{% for p, e in errors %}<li><code>{{ p }}</code>: {{ e }}</li>{% endfor %}</ul>{% endif %}
<nav><b>Contents</b><ul>
<li><a href="#overview">Overview across scenarios</a></li>
{% if flows %}<li><a href="#flows">Competing flows</a></li>{% endif %}
{% for sc in scenarios %}<li><a href="#{{ sc.anchor }}">Scenario {{ sc.name }}</a>: {% for st in sc.steps %}<a href="#{{ st.anchor }}">step {{ st.index }}</a>{{ ", " if not loop.last }}{% endfor %}</li>
{% endfor %}<li><a href="#metrics">Metric definitions and sources</a></li>
{% if tpcca %}<li><a href="#tpcca">TPCCA faults kept</a></li>{% endif %}
<li><a href="#runs">Per-run results</a></li></ul></nav>

<h2 id="overview">Overview across scenarios</h2>
{{ overview }}
{% if flows %}
<h2 id="flows">Competing flows</h2>
<p class="meta">Runs with several flows sharing the bottleneck: {{ flows.n_runs }} run(s). Per flow, grouped by its
CCA; cells median [{{ ci_text }}], IQR and n below.</p>
{% for sc in flows.scenarios %}
<h3>Scenario {{ sc.name }}: per flow</h3>
{{ sc.table }}
{% if sc.fairness %}<h3>Scenario {{ sc.name }}: fairness per set of active flows</h3>{{ sc.fairness }}{% endif %}
{% if sc.harm %}<h3>Scenario {{ sc.name }}: harm (against the CCA's single-flow runs)</h3>{{ sc.harm }}{% endif %}
{% if sc.matrix %}<h3>Scenario {{ sc.name }}: coexistence matrix (two-flow runs)</h3>{{ sc.matrix }}
{% for fig in sc.matrix_figures %}{{ fig }}{% endfor %}{% endif %}
{% for fig in sc.figures %}{{ fig }}{% endfor %}
{% if sc.more %}<p class="meta">{{ sc.more }} more run(s) without a figure (see flows.csv).</p>{% endif %}
{% endfor %}
{% endif %}
{% for sc in scenarios %}
<h2 id="{{ sc.anchor }}">Scenario {{ sc.name }}</h2>
<p class="meta">{{ sc.description }}</p>
<h3>Whole runs</h3>
{{ sc.table }}
{% for fig in sc.figures %}{{ fig }}{% endfor %}
{% for st in sc.steps %}
<h3 id="{{ st.anchor }}">{{ st.title }}</h3>
{{ st.table }}
{% for fig in st.figures %}{{ fig }}{% endfor %}
{% endfor %}
{% endfor %}
<h2 id="metrics">Metric definitions and sources</h2><dl>
{% for name, text, source in notes %}<dt>{{ name }}</dt><dd>{{ text }} <i>Source: {{ source }}.</i></dd>
{% endfor %}</dl>
{% if tpcca %}<h2 id="tpcca">TPCCA faults kept (method tpcca)</h2>
<p>Runs analysed with <code>--method tpcca</code> reproduce the TPCCA reference analysis exactly, including these
known faults (use the default method <code>ccplab</code> for the corrected analysis):</p>
{% if tpcca_faults %}<ol>{% for f in tpcca_faults %}<li>{{ f }}</li>{% endfor %}</ol>
{% else %}<p class="warn">The analysis did not list the faults it kept.</p>{% endif %}{% endif %}
<h2 id="runs">Per-run results</h2>
<details><summary>{{ n_runs }} runs (click to open)</summary>
{{ run_table }}
</details>
</body></html>
""")


# ------------------------------------------------------------------ inputs


def _with_columns(df: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    """``df`` with every column of ``cols`` present (missing -> NaN); label falls back to cca + params."""
    df = df.copy()
    for c in cols:
        if c not in df.columns:
            df[c] = np.nan
    if df["label"].isna().any():
        params = df["cca_params"].astype(object).map(lambda p: f" {p}" if isinstance(p, str) and p else "")
        fallback = df["cca"].astype(str) + params
        df["label"] = df["label"].astype(object).where(df["label"].notna(), fallback)
    df["label"] = df["label"].astype(str)
    df["scenario"] = df["scenario"].map(lambda s: "unnamed" if s is None or s != s else str(s))
    return df


def _series_with_columns(s: pd.DataFrame) -> pd.DataFrame:
    """A run's series with every column of `transient.series.SERIES_COLUMNS` (missing -> NaN), attrs kept."""
    if all(c in s.columns for c in SERIES_COLUMNS):
        return s
    out = s.reindex(columns=list(s.columns) + [c for c in SERIES_COLUMNS if c not in s.columns])
    out.attrs.update(s.attrs)
    return out


def combine(analyses: Sequence[tuple[str, object]]):
    """Concatenate several analyses (``(source name, transient.Analysis)``) into one Analysis.

    With more than one source, every run_id (in runs, steps, series keys and
    errors) is prefixed with ``"<source name>/"`` so runs of different
    directories never collide; with one source nothing changes.

    Raises:
        ValueError: no analyses, or two sources with the same name.
    """
    from . import Analysis

    if not analyses:
        raise ValueError("combine: no analyses given")
    names = [n for n, _ in analyses]
    if len(set(names)) != len(names):
        raise ValueError(f"combine: source names must differ, got {names}")
    if len(analyses) == 1:
        return analyses[0][1]
    runs, steps, series, errors = [], [], {}, []
    flow_frames: dict[str, list[pd.DataFrame]] = {"flows": [], "fairness": [], "flow_steps": []}
    flow_series: dict[str, pd.DataFrame] = {}
    for name, a in analyses:
        prefix = f"{name}/"
        runs.append(a.runs.assign(run_id=prefix + a.runs["run_id"].astype(str)))
        steps.append(a.steps.assign(run_id=prefix + a.steps["run_id"].astype(str)) if len(a.steps) else a.steps)
        series.update({prefix + str(k): v for k, v in a.series.items()})
        errors.extend((f"{prefix}{p}", e) for p, e in a.errors)
        for key, frames in flow_frames.items():
            df = getattr(a, key)
            frames.append(df.assign(run_id=prefix + df["run_id"].astype(str)) if len(df) else df)
        flow_series.update({prefix + str(k): v for k, v in a.flow_series.items()})
    combined = pd.concat(runs, ignore_index=True)
    faults = [f for _, a in analyses for f in (a.runs.attrs.get("tpcca_faults") or [])]
    combined.attrs = {"tpcca_faults": list(dict.fromkeys(faults))} if faults else {}
    flow_tables = [pd.concat(flow_frames[k], ignore_index=True) for k in ("flows", "fairness", "flow_steps")]
    return Analysis(combined, pd.concat(steps, ignore_index=True), series, errors, *flow_tables, flow_series)


def source_names(paths: Sequence[Path]) -> list[str]:
    """Short distinct names of input paths: the last component, more parents while two are equal."""
    paths = [Path(p).resolve() for p in paths]
    for depth in range(1, max(len(p.parts) for p in paths) + 1):
        names = ["/".join(p.parts[-depth:]) for p in paths]
        if len(set(names)) == len(names):
            return names
    return [f"{i}-{p.name}" for i, p in enumerate(paths)]  # the same path twice


def report_paths(paths: Sequence[str | Path], out: str | Path | None = None, *, method: str | None = None,
                 **kwargs) -> Path:
    """``ccplab report``: analyse each path, combine them and write one report.

    Args:
        paths: results directories, run directories (or link logs), one or
            more; each is analysed with ``transient.analyze_all(path,
            on_error="skip")`` (runs that fail are listed on the page).
        out: output directory (default: the first path, or its directory when
            it is a file).
        method: the analysis method ("ccplab" or "tpcca"), passed to
            analyze_all as ``options=AnalysisOptions(method=...)``; None: its
            default.
        **kwargs: passed to `write_report`.

    Returns:
        Path of report.html.

    Raises:
        transient.AnalysisError: a path does not exist or holds no run.
        ValueError: no paths.
    """
    from .analyze import analyze_all
    from .errors import AnalysisError

    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("report_paths: no paths given")
    for p in paths:
        if not p.exists():
            raise AnalysisError(f"{p}: no such file or directory")
    extra = {}
    if method is not None:
        from .analyze import AnalysisOptions

        extra["options"] = AnalysisOptions(method=method)
    analyses = [(name, analyze_all(p, on_error="skip", **extra)) for name, p in zip(source_names(paths), paths)]
    a = combine(analyses)
    if out is None:
        out = paths[0] if paths[0].is_dir() else paths[0].parent
    return write_report(out, a.runs, a.steps, a.series, errors=a.errors, source=[str(p) for p in paths],
                        **flow_kwargs(a), **kwargs)


def flow_kwargs(a) -> dict:
    """The flow tables of a `transient.Analysis` as `write_report` keyword arguments."""
    return {"flows": a.flows, "fairness": a.fairness, "flow_steps": a.flow_steps, "flow_series": a.flow_series}


# ------------------------------------------------------------------ tables


def _cell(row: pd.Series | None) -> Markup:
    """A summary row as 'median [CI]' with 'IQR [q1, q3] · n' below, rounded by `stats.format_estimate`."""
    if row is None or row["n_valid"] == 0:
        n = 0 if row is None else int(row["n"])
        return Markup(f"n/a<br><small>0/{n} values</small>") if n else Markup("")
    main = stats.format_estimate(row["median"], row["ci_low"], row["ci_high"])
    iqr = stats.format_interval(row["q1"], row["q3"], like=(row["median"], row["ci_low"], row["ci_high"]))
    n = f"n={int(row['n_valid'])}" + (f"/{int(row['n'])}" if row["n_valid"] != row["n"] else "")
    return Markup(f"{escape(main)}<br><small>IQR {escape(iqr)} · {n}</small>")


def _table(header: Sequence[Markup | str], rows: Sequence[Sequence[Markup | str]], first_left: int = 1) -> Markup:
    """An HTML table; the first ``first_left`` columns are left-aligned (names), the rest right (numbers)."""
    def cell(tag: str, i: int, v: Markup | str) -> str:
        cls = ' class="m"' if i < first_left else ""
        return f"<{tag}{cls}>{v if isinstance(v, Markup) else escape(v)}</{tag}>"

    out = ["<table><tr>" + "".join(cell("th", i, h) for i, h in enumerate(header)) + "</tr>"]
    out += ["<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in rows]
    return Markup("\n".join(out) + "</table>")


def _label_header(label: str, colors: Mapping[str, str]) -> Markup:
    return Markup(f'<span class="sw" style="background:{colors[label]}"></span>{escape(label)}')


def _metric_rows(summary: pd.DataFrame, labels: Sequence[str], metrics: Sequence[tuple[str, str]]) -> list:
    """Rows metric x columns label of one scenario (or one step) summary."""
    idx = {(r["label"], r["metric"]): r for _, r in summary.iterrows()}
    rows = []
    for metric, name in metrics:
        cells = [_cell(idx.get((lab, metric))) for lab in labels]
        if any(str(c) for c in cells) and any(
                idx.get((lab, metric)) is not None and idx[(lab, metric)]["n_valid"] > 0 for lab in labels):
            rows.append([name, *cells])
    return rows


def _class_counts(steps: pd.DataFrame) -> str:
    counts = steps["response_class"].dropna().value_counts()
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "n/a"


def _figure(name: str, caption: str) -> Markup:
    return Markup(f'<figure><img src="plots/{escape(name)}.png" alt="{escape(caption)}">'
                  f'<figcaption>{escape(caption)} <a href="plots/{escape(name)}.pdf">PDF</a></figcaption></figure>')


def _slug(*parts: object) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(str(p) for p in parts)).strip("_") or "x"


def _scenario_description(runs: pd.DataFrame) -> str:
    first = runs.iloc[0]
    bits = []
    for col, fmt in (("trace_kind", "trace {}"), ("rtt_ms", "RTT {:g} ms"), ("queue_packets", "droptail {:g} packets"),
                     ("duration_s", "{:g} s runs")):
        v = first.get(col)
        if v is not None and v == v:
            bits.append(fmt.format(v))
    per = runs.groupby("label").size()
    bits.append("runs per CCA: " + ", ".join(f"{k} {v}" for k, v in per.items()))
    return "; ".join(bits) + "."


def _overview(run_sum: pd.DataFrame, step_sum: pd.DataFrame, labels: Sequence[str], scen_names: Sequence[str],
              colors: Mapping[str, str], methods: Sequence[str]) -> Markup:
    """Rows label x columns (scenario, metric): the headline figures of every scenario side by side."""
    names = dict(stats.RUN_METRICS) | dict(stats.step_metric_labels(methods))
    cols = []  # (header, getter(label) -> row or None)
    for sc in scen_names:
        rs = run_sum[run_sum["scenario"] == sc]
        for m in OVERVIEW_RUN_METRICS:
            cols.append((f"{sc}: {names[m]}", rs, None, m))
        ss = step_sum[step_sum["scenario"] == sc]
        for sid in sorted(ss["step"].unique()):
            for m in OVERVIEW_STEP_METRICS:
                sub = ss[(ss["step"] == sid) & (ss["metric"] == m)]
                if len(sub) and sub["n_valid"].sum() > 0:
                    cols.append((f"{sc}, step {int(sid)}: {names[m]}", ss, sid, m))
    rows = []
    for lab in labels:
        cells = []
        for _, frame, sid, m in cols:
            sel = (frame["label"] == lab) & (frame["metric"] == m)
            if sid is not None:
                sel &= frame["step"] == sid
            hit = frame[sel]
            cells.append(_cell(hit.iloc[0] if len(hit) else None))
        rows.append([_label_header(lab, colors), *cells])
    # Transposed (columns = labels) reads better when there are many scenario x metric columns.
    header = ["", *[_label_header(lab, colors) for lab in labels]]
    body = [[Markup(escape(h))] + [r[i + 1] for r in rows] for i, (h, *_rest) in enumerate(cols)]
    return _table(header, body)


# ------------------------------------------------------------------ report


def write_report(
    results_dir: str | Path,
    runs_df: pd.DataFrame,
    steps_df: pd.DataFrame,
    series: Mapping[str, pd.DataFrame] | None = None,
    *,
    errors: Sequence[tuple[str, str]] = (),
    source: str | Sequence[str] | None = None,
    tpcca_faults: Sequence[str] | None = None,
    n_resamples: int = stats.N_RESAMPLES,
    flows: pd.DataFrame | None = None,
    fairness: pd.DataFrame | None = None,
    flow_steps: pd.DataFrame | None = None,
    flow_series: Mapping[str, pd.DataFrame] | None = None,
) -> Path:
    """Write report.html, the tables and plots/*.png + *.pdf into ``results_dir``.

    Args:
        results_dir: output directory (created if missing).
        runs_df, steps_df, series: `transient.Analysis` frames (TRANSIENT-CONTRACT
            columns; an absent column is treated as missing values, a missing
            ``label`` as ``cca`` + ``cca_params``).  ``series`` None or empty:
            no time-series or zoom figures.
        errors: (path, message) of runs that could not be analysed, listed.
        source: what was analysed (one name or several) for the page header
            (default: results_dir).
        tpcca_faults: the TPCCA faults the tpcca method kept, listed when a
            run's method is tpcca (default: ``runs_df.attrs["tpcca_faults"]``).
        n_resamples: bootstrap resamples (`transient.stats.summarize`).
        flows, fairness, flow_steps, flow_series: the `transient.Analysis`
            flow tables.  When a run has more than one flow the page gets a
            "Competing flows" section (per-flow tables with bootstrap CIs,
            fairness and harm tables, per-run throughput and Jain figures) and
            flows.csv, fairness.csv, flow_steps.csv, summary_flows.csv and
            harm.csv are written; otherwise none of them (a single-flow
            report is exactly as before).

    Returns:
        Path of report.html.

    Raises:
        ValueError: runs_df is empty or lacks run_id / scenario / cca.
    """
    missing = [c for c in ("run_id", "cca", "scenario") if c not in runs_df.columns]
    if missing:
        raise ValueError(f"runs table lacks columns {missing}; has {list(runs_df.columns)}")
    if runs_df.empty:
        raise ValueError("runs table is empty: nothing to report")
    out = Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    series = {k: _series_with_columns(v) for k, v in (series or {}).items()}
    # The engine's column lists (TRANSIENT-CONTRACT): a column it did not fill is missing values, not an error.
    runs = _with_columns(runs_df, RUN_COLUMNS)
    steps = _with_columns(steps_df, STEP_COLUMNS)
    steps["converged"] = steps["converged"].map(lambda v: bool(v) if v is not None and v == v else False)
    run_sum = stats.run_summary(runs, n_resamples=n_resamples)
    step_sum = stats.step_summary(steps, n_resamples=n_resamples)
    labels = sorted(runs["label"].unique())
    multi = _multi_flow_rows(flows)
    colors = plots.label_colors(labels if multi is None else set(labels) | set(multi["label"].astype(str)))
    scen_names = sorted(runs["scenario"].unique())
    methods = sorted({str(m) for m in runs["method"].dropna()}) or ["unknown"]
    faults = list(tpcca_faults if tpcca_faults is not None else
                  runs_df.attrs.get("tpcca_faults") or _engine_tpcca_faults())

    tmp = Path(tempfile.mkdtemp(prefix=".report-tmp-", dir=out))
    try:
        pdir = tmp / "plots"
        pdir.mkdir()
        scenarios = [_scenario_section(sc, runs, steps, series, run_sum, step_sum, colors, pdir)
                     for sc in scen_names]
        flow_tables = None
        if multi is not None:
            flow_sum = stats.run_summary(flows.assign(label=flows["label"].astype(str)),
                                         metrics=[m for m, _ in stats.FLOW_METRICS], n_resamples=n_resamples)
            harm_df = flow_harm(flows)
            pairs = coexistence_pairs(flows, fairness)
            coexist = coexistence_summary(pairs, n_resamples=n_resamples)
            flow_part = _flows_section(multi, flow_sum, harm_df, fairness, flow_steps, flow_series or {},
                                       colors, pdir, n_resamples, coexist)
            flow_tables = (flow_sum, harm_df, pairs, coexist)
        sources = [source] if isinstance(source, str) else list(source or [str(out)])
        html = _TEMPLATE.render(
            labels=labels, sources=sources, methods=methods, n_runs=len(runs), n_steps=len(steps),
            generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            ci_text=f"{stats.CONFIDENCE:.0%} bootstrap CI", errors=list(errors), scenarios=scenarios,
            overview=_overview(run_sum, step_sum, labels, scen_names, colors, methods),
            notes=METRIC_NOTES, tpcca="tpcca" in methods, tpcca_faults=faults,
            run_table=_run_table(runs), flows=flow_part if multi is not None else None,
            external=sorted(set(external_labels(runs)) | set(external_labels(multi) if multi is not None else [])),
        )
        # Publish: figures first, then the tables, the page that references them last.
        (out / "plots").mkdir(exist_ok=True)
        for f in sorted(pdir.iterdir()):
            os.replace(f, out / "plots" / f.name)
        write_atomic(out / "runs.csv", runs_df.to_csv(index=False))
        write_atomic(out / "steps.csv", steps_df.to_csv(index=False))
        write_atomic(out / "summary_runs.csv", run_sum.to_csv(index=False))
        write_atomic(out / "summary_steps.csv", step_sum.to_csv(index=False))
        if flow_tables is not None:
            write_atomic(out / "flows.csv", flows.to_csv(index=False))
            write_atomic(out / "fairness.csv", (fairness if fairness is not None else pd.DataFrame()).to_csv(index=False))
            write_atomic(out / "flow_steps.csv",
                         (flow_steps if flow_steps is not None else pd.DataFrame()).to_csv(index=False))
            write_atomic(out / "summary_flows.csv", flow_tables[0].to_csv(index=False))
            write_atomic(out / "harm.csv", flow_tables[1].to_csv(index=False))
            if len(flow_tables[2]):
                write_atomic(out / "coexist_runs.csv", flow_tables[2].to_csv(index=False))
                write_atomic(out / "coexist.csv", flow_tables[3].to_csv(index=False))
        write_atomic(out / "report.html", html)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / "report.html"


EXTERNAL_PREFIX = "portus:"
"""The label prefix of an external Portus algorithm (the runner's ``portus:NAME=COMMAND``)."""


def external_labels(frame: pd.DataFrame) -> list[str]:
    """The external algorithms among a table's CCAs (``cca`` starting with `EXTERNAL_PREFIX`), sorted."""
    if "cca" not in frame.columns:
        return []
    return sorted({str(c) for c in frame["cca"].dropna() if str(c).startswith(EXTERNAL_PREFIX)})


MAX_FLOW_FIGURES = 12
"""Per-run competing-flow figures drawn per scenario (the rest are in flows.csv)."""


def _multi_flow_rows(flows: pd.DataFrame | None) -> pd.DataFrame | None:
    """The flows table's rows of runs with more than one flow, or None when there are none."""
    if flows is None or flows.empty or "n_flows" not in flows.columns:
        return None
    multi = flows[pd.to_numeric(flows["n_flows"], errors="coerce") > 1]
    if multi.empty:
        return None
    return multi.assign(label=multi["label"].astype(str),
                        scenario=multi["scenario"].map(lambda s: "unnamed" if s is None or s != s else str(s)))


def _flows_section(multi: pd.DataFrame, flow_sum: pd.DataFrame, harm_df: pd.DataFrame,
                   fairness: pd.DataFrame | None, flow_steps: pd.DataFrame | None,
                   flow_series: Mapping[str, pd.DataFrame], colors: Mapping[str, str], pdir: Path,
                   n_resamples: int, coexist: pd.DataFrame) -> dict:
    """The "Competing flows" part of the page; per-run figures are rendered into ``pdir``."""
    scenarios = []
    for sc in sorted(multi["scenario"].unique()):
        m = multi[multi["scenario"] == sc]
        matrix_figures, matrix_table = _coexistence_part(coexist[coexist["scenario"].astype(str) == str(sc)]
                                                         if len(coexist) else coexist, sc, pdir)
        labels = sorted(m["label"].unique())
        header = ["metric", *[_label_header(lab, colors) for lab in labels]]
        n_row = ["flows", *[str(int((m["label"] == lab).sum())) for lab in labels]]
        table = _table(header, [n_row, *_metric_rows(flow_sum[flow_sum["scenario"] == sc], labels,
                                                     stats.FLOW_METRICS)])
        run_ids = list(dict.fromkeys(m["run_id"]))
        figures = []
        for rid in run_ids[:MAX_FLOW_FIGURES]:
            name = f"flows-{_slug(rid)}"
            if rid in flow_series and plots.plot_flow_throughput(flow_series[rid], m[m["run_id"] == rid],
                                                                 pdir / name, str(rid)):
                figures.append(_figure(name, f"Run {rid}: each flow's departure throughput stacked (with the "
                                       "offered capacity) and overlaid (with the fair share), and Jain's "
                                       "fairness index per RTT bin; dotted: a flow's arrival, dash-dotted: "
                                       "its departure."))
        scenarios.append({"name": sc, "table": table, "figures": figures,
                          "matrix_figures": matrix_figures, "matrix": matrix_table,
                          "fairness": _fairness_table(m, fairness, flow_steps, n_resamples),
                          "harm": _harm_table(harm_df[harm_df["scenario"].astype(str) == sc], n_resamples),
                          "more": max(len(run_ids) - MAX_FLOW_FIGURES, 0)})
    return {"n_runs": int(multi["run_id"].nunique()), "scenarios": scenarios}


def _coexistence_part(summary: pd.DataFrame, scenario: str, pdir: Path) -> tuple[list[Markup], Markup | None]:
    """Heatmaps (one per `COEXISTENCE_METRICS`) and the table of a scenario's two-flow pairs; nothing
    when it has none."""
    if summary.empty:
        return [], None
    figures = []
    for metric, meaning, lo, hi in COEXISTENCE_METRICS:
        name = f"coexist-{metric.replace('_', '-')}-{_slug(scenario)}"
        matrix = summary.pivot(index="first", columns="second", values=metric)
        if plots.plot_coexistence_heatmap(matrix, pdir / name, meaning, metric, vmin=lo, vmax=hi, fmt="{:.2f}"):
            figures.append(_figure(name, f"{meaning[0].upper()}{meaning[1:]}: rows the first flow's CCA, columns "
                                   "the second's (median over runs; coexist.csv has the CIs)."))
    header = ["first flow", "second flow", "runs", *[meaning for _, meaning, *_ in COEXISTENCE_METRICS]]
    rows = [[escape(str(r["first"])), escape(str(r["second"])), str(int(r["runs"])),
             *[escape(stats.format_estimate(r[m], r[f"{m}_ci_low"], r[f"{m}_ci_high"]))
               for m, *_ in COEXISTENCE_METRICS]] for _, r in summary.iterrows()]
    return figures, _table(header, rows, first_left=2)


def _fairness_table(multi: pd.DataFrame, fairness: pd.DataFrame | None, flow_steps: pd.DataFrame | None,
                    n_resamples: int) -> Markup | None:
    """Per set of active CCAs (intervals of two or more flows): Jain's median and delta-fair convergence."""
    if fairness is None or fairness.empty:
        return None
    fz = fairness[fairness["run_id"].isin(set(multi["run_id"])) & (pd.to_numeric(fairness["n"]) > 1)]
    if fz.empty:
        return None
    label_of = {(r.run_id, int(r.flow)): r.label for r in multi.itertuples(index=False)}
    sets = [" + ".join(sorted(label_of.get((rid, int(k)), "?") for k in str(act).split(",")))
            for rid, act in zip(fz["run_id"], fz["active_flows"])]
    fz = fz.assign(_set=sets)
    dfc = pd.DataFrame(columns=["run_id", "event", "delta_fair_convergence_s"])
    if flow_steps is not None and len(flow_steps):
        dfc = flow_steps.drop_duplicates(["run_id", "event"])[["run_id", "event", "delta_fair_convergence_s"]]
    fz = fz.merge(dfc.rename(columns={"event": "interval"}), on=["run_id", "interval"], how="left")
    rows = []
    for key, g in fz.groupby("_set", sort=True):
        j = stats.summarize(g["jain_median"], n_resamples=n_resamples)
        d = stats.summarize(g["delta_fair_convergence_s"], n_resamples=n_resamples)
        rows.append([key, _cell(pd.Series({**j.as_dict()})),
                     _cell(pd.Series({**d.as_dict()})) if d.n_valid else "n/a"])
    return _table(["active CCAs", "Jain's index (median per interval)", "delta-fair convergence (s, delta 0.1)"],
                  rows)


def _harm_table(h: pd.DataFrame, n_resamples: int) -> Markup | None:
    """Per (CCA, the CCAs it shared the link with): throughput and delay harm, when alone runs exist."""
    h = h[h["n_alone_runs"] > 0] if len(h) else h
    if h.empty:
        return None
    rows = []
    for (lab, other), g in h.groupby(["label", "with_labels"], sort=True):
        cells = [_cell(pd.Series(stats.summarize(g[c], n_resamples=n_resamples).as_dict()))
                 for c in ("throughput_harm", "delay_harm")]
        rows.append([lab, other, *cells])
    return _table(["CCA (harmed)", "with", "throughput harm", "delay harm"], rows, first_left=2)


def _engine_tpcca_faults() -> list[str]:
    """The faults the analysis' tpcca method keeps (`transient.tpcca.TPCCA_FAULTS`), [] if it lists none."""
    from . import tpcca

    return list(getattr(tpcca, "TPCCA_FAULTS", ()))


def _scenario_section(sc: str, runs: pd.DataFrame, steps: pd.DataFrame, series: Mapping[str, pd.DataFrame],
                      run_sum: pd.DataFrame, step_sum: pd.DataFrame, colors: Mapping[str, str],
                      pdir: Path) -> dict:
    """Tables and figures of one scenario; figures are rendered into ``pdir``."""
    r = runs[runs["scenario"] == sc]
    s = steps[steps["scenario"] == sc]
    rs = run_sum[run_sum["scenario"] == sc]
    labels = sorted(r["label"].unique())
    header = ["metric", *[_label_header(lab, colors) for lab in labels]]
    n_row = ["runs", *[str(int((r["label"] == lab).sum())) for lab in labels]]
    table = _table(header, [n_row, *_metric_rows(rs, labels, stats.RUN_METRICS)])
    figures = []
    base = _slug(sc)
    if plots.plot_plane(r, rs, colors, pdir / f"plane-{base}", sc):
        figures.append(_figure(f"plane-{base}", "Throughput vs. p95 per-packet queueing delay: faint markers are "
                               "runs; large markers the median with its bootstrap 95% CI. Delay axis reversed: "
                               "better is up and to the right."))
    if plots.plot_timeseries(r, series, s, colors, pdir / f"timeseries-{base}", sc):
        figures.append(_figure(f"timeseries-{base}", "Departure throughput (runs overlaid) against the reference "
                               "capacity, and queueing delay, over the whole run; dotted: capacity steps."))
    if plots.plot_violins(s, colors, pdir / f"violins-{base}", sc):
        figures.append(_figure(f"violins-{base}", "Per step and CCA: Normalized Area, convergence time (converged "
                               "runs only; the count of the others is written at the bottom) and peak queueing "
                               "delay; violins are the runs' distribution, dots the runs, bars the median."))
    step_sections = []
    for sid in sorted(s["step"].dropna().unique()):
        st = s[s["step"] == sid]
        ss = step_sum[(step_sum["scenario"] == sc) & (step_sum["step"] == sid)]
        first = st.iloc[0]
        conv_row = ["converged", *[
            f"{int(g['converged'].sum())}/{len(g)}" for g in (st[st["label"] == lab] for lab in labels)]]
        cls_row = ["response class (runs)", *[_class_counts(st[st["label"] == lab]) for lab in labels]]
        extra_rows = [cls_row]
        if "tpcca_gave_up" in st.columns and st["tpcca_gave_up"].notna().any():
            # TPCCA reports these as converged at bin index 40 (a fault it keeps): say how many.
            extra_rows.append(["TPCCA gave up (bin 40)", *[
                f"{int(g['tpcca_gave_up'].fillna(False).astype(bool).sum())}/{len(g)}"
                for g in (st[st["label"] == lab] for lab in labels)]])
        step_table = _table(header, [conv_row, *_metric_rows(ss, labels, stats.step_metric_labels(s["method"].dropna())),
                                     *extra_rows])
        name = f"zoom-{_slug(sc, 'step', int(sid))}"
        figs = []
        if plots.plot_step_zoom(r, series, st, colors, pdir / name, sc):
            figs.append(_figure(name, "Zoom on the transient: from just before the step to a little past the "
                                "slowest convergence or queue drain. Dashed: reference capacity; grey bands: ±2% and ±5% of "
                                "the new nominal capacity; circles and dash-dotted lines: each run's "
                                "convergence point."))
        step_sections.append({
            "index": int(sid), "anchor": _slug(sc, "step", int(sid)), "table": step_table, "figures": figs,
            "title": f"Step {int(sid)}{_kind(first)}: {_num(first['from_mbps'])} → {_num(first['to_mbps'])} "
                     f"Mbit/s at {_num(first['at_s'])} s on the log clock",
        })
    return {"name": sc, "anchor": _slug("scenario", sc), "description": _scenario_description(r),
            "table": table,
            "figures": figures, "steps": step_sections}


def _kind(step: pd.Series) -> str:
    kind = step.get("kind")
    return f" ({kind})" if isinstance(kind, str) and kind else ""


def _num(v: object) -> str:
    return "?" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):g}"


_RUN_TABLE_COLUMNS = ["label", "scenario", "run", "method", "throughput_mbps", "utilization",
                      "p95_queueing_delay_ms", "p95_signal_delay_ms", "power_score", "retransmits", "run_id"]


def _run_table(runs: pd.DataFrame) -> Markup:
    cols = [c for c in _RUN_TABLE_COLUMNS if c in runs.columns]
    rows = [[stats.format_estimate(v) if isinstance(v, float) else ("" if v is None else str(v)) for v in row]
            for row in runs.sort_values(["scenario", "label", "run"])[cols].itertuples(index=False)]
    return _table(cols, rows, first_left=4)
