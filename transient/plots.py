"""Figures of a report, each written twice: ``NAME.png`` for the page and ``NAME.pdf`` for a paper.

Every function draws one scenario (or one step of it) from the analysis
frames (TRANSIENT-CONTRACT column names), writes ``base.png`` and
``base.pdf`` (``base`` = a path without suffix) and returns True, or writes
nothing and returns False when there is nothing to draw:

* `plot_timeseries`: per label, departure throughput (runs overlaid) against
  the reference capacity, and the queueing delay, over the whole run;
* `plot_step_zoom`: one step, from just before it to a little past the
  slowest convergence (or queue drain, `zoom_window`): throughput with the
  reference capacity, the 2% and 5% settling bands around the step's new
  nominal capacity and each run's convergence point; queueing delay beside;
* `plot_violins`: Normalized Area, convergence time (converged runs only)
  and peak queueing delay per label per step: violins of the runs' values
  with the runs as dots, as in the TPCCA poster (a violin needs at least
  `VIOLIN_MIN_RUNS` values: a density of 2 or 3 points is an artefact of
  the kernel, so fewer get dots and a median bar only);
* `plot_plane`: throughput vs. p95 queueing delay, one dot per run and the
  median with its bootstrap 95% CI per label; delay axis reversed (better
  is up and right), as in mahimahi / Remy / Pantheon plots;
* `plot_flow_throughput`: one multi-flow run: per-flow throughput stacked
  (with the offered capacity) and overlaid (with each flow's fair share),
  and Jain's fairness index per RTT bin, each flow's arrival and departure
  marked;
* `plot_coexistence_heatmap`: a matrix of one metric, rows = the first
  flow's CCA, columns = the second's (``ccplab coexist``).

Colors: one per label from the Okabe-Ito palette (colorblind-safe; Okabe &
Ito 2008, "Color Universal Design"), assigned once per report by
`label_colors` so a label has the same color in every figure; past 8 labels
the colors come from matplotlib's tab20 and every label still gets its own
(color, marker) pair (`label_styles`).  Capacity and reference lines are
black/grey, never a label color.

Log-scale delay axes get plain-number labels at 1-2-5-style positions chosen
for the axis' span (`log_axis`), so their labels never pile up when the
delays span less than a factor of ten.
"""

from __future__ import annotations

import textwrap
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot import

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from . import stats  # noqa: E402

DPI = 150
"""Resolution of the PNGs (the PDFs are vector)."""

FORMATS = ("png", "pdf")
"""Every figure is written in these formats, same base name."""

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442"]
"""Okabe-Ito colors, most distinct first (yellow last: faint on white)."""

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
"""Marker per label (second cue besides color, and for more than 8 labels)."""

TAB20 = [matplotlib.colormaps["tab20"](k) for k in (*range(0, 20, 2), *range(1, 20, 2))]
"""tab20's colors, its ten strong hues first, then their light twins: the colors past 8 labels."""

LOG_TICK_SUBS = ((1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9), (1, 1.5, 2, 3, 5, 7), (1, 2, 5), (1, 3), (1,))
"""Mantissas of a log axis' labelled ticks, densest first; `log_axis` takes the densest that fits."""

MAX_LOG_TICKS = 7
"""At most this many labelled ticks on a log axis (labels of 1-4 digits then never touch on a figure
3 inches wide or more)."""

BANDS = (0.02, 0.05)
"""Settling bands drawn around the new nominal capacity (fractions), as in the contract."""

LEGEND_IN = (0.45, 0.7)
"""Height (inches) kept below the panels for the figure legend: time series (1-2 rows), zoom (3 rows)."""

PAPER_STYLE = {
    "font.size": 9, "axes.titlesize": 9, "axes.labelsize": 9, "legend.fontsize": 7.5,
    "xtick.labelsize": 8, "ytick.labelsize": 8, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "pdf.fonttype": 42,  # TrueType in PDFs (editable text)
}


def label_styles(labels) -> dict[str, tuple]:
    """A (color, marker) pair per label, the same for the same set of labels in any order, and distinct
    for up to 160 labels.

    The labels are sorted; label i gets Okabe-Ito color i and marker i when there are at most 8, else
    tab20 color ``i mod 20`` and marker ``(i + i div 20) mod 8`` (two labels of one color are 20 k apart,
    their markers 5 k mod 8 apart, never 0 for k < 8). Colors are hex strings or RGBA tuples.
    """
    ordered = sorted({str(x) for x in labels})
    if len(ordered) <= len(OKABE_ITO):
        return {lab: (OKABE_ITO[i], MARKERS[i]) for i, lab in enumerate(ordered)}
    return {lab: (TAB20[i % len(TAB20)], MARKERS[(i + i // len(TAB20)) % len(MARKERS)])
            for i, lab in enumerate(ordered)}


def label_colors(labels) -> dict[str, str]:
    """A stable color per label: Okabe-Ito in the order of the sorted labels; tab20 past 8 (`label_styles`)."""
    return {lab: color for lab, (color, _) in label_styles(labels).items()}


def label_markers(labels) -> dict[str, str]:
    """A stable marker per label, paired with `label_colors` so no two labels share both (`label_styles`)."""
    return {lab: marker for lab, (_, marker) in label_styles(labels).items()}


def log_axis(ax, which: str = "x") -> None:
    """Put axis ``which`` ("x" or "y") of ``ax`` on a log scale labelled with plain numbers (``%g``) that
    never overlap: the labelled ticks are the densest of `LOG_TICK_SUBS` with at most `MAX_LOG_TICKS`
    inside the axis' current limits (every n-th decade past that), minor ticks unlabelled.

    Call it after the data are drawn (the ticks follow the limits at the call). Works on an inverted axis.
    """
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    lo, hi = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
    lo = max(lo, 1e-12)
    k0, k1 = int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi)))
    ticks: list[float] = []
    for subs in LOG_TICK_SUBS:
        ticks = [m * 10.0 ** k for k in range(k0, k1 + 1) for m in subs if lo <= m * 10.0 ** k <= hi]
        if len(ticks) <= MAX_LOG_TICKS:
            break
    else:
        step = int(np.ceil(len(ticks) / MAX_LOG_TICKS))
        ticks = ticks[::step]
    if len(ticks) < 2:  # a span narrower than the densest mantissas: round numbers of a linear axis
        from matplotlib.ticker import MaxNLocator

        ticks = [v for v in MaxNLocator(nbins=3).tick_values(lo, hi) if lo <= v <= hi]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_locator(LogLocator(base=10, subs=np.arange(2, 10)))
    axis.set_minor_formatter(NullFormatter())


def label_of(df: pd.DataFrame) -> pd.Series:
    """The grouping label of each row: ``label`` (contract), else ``cca``."""
    col = df["label"] if "label" in df.columns else df["cca"]
    return col.map(lambda v: "unknown" if v is None or v != v else str(v))


@contextmanager
def _style() -> Iterator[None]:
    with plt.rc_context(PAPER_STYLE):
        yield


def save_figure(fig: plt.Figure, base: Path) -> list[Path]:
    """Write ``fig`` as base.png and base.pdf (tight layout), close it, return the two paths."""
    out = []
    try:
        for fmt in FORMATS:
            path = base.with_name(f"{base.name}.{fmt}")
            fig.savefig(path, format=fmt, dpi=DPI)
            out.append(path)
    finally:
        plt.close(fig)
    return out


def _step_label(step) -> str:
    kind = step.get("kind")
    kind = f" ({kind})" if isinstance(kind, str) and kind else ""
    return f"step {int(step['step'])}{kind}: {step['from_mbps']:g} → {step['to_mbps']:g} Mbit/s"


def _suptitle(fig: plt.Figure, text: str) -> None:
    """A figure title wrapped to the figure's width (a long title must not be cut at the edges)."""
    width_chars = max(int(fig.get_figwidth() * 12), 30)  # about 12 characters per inch at 10-11 pt
    fig.suptitle(textwrap.fill(text, width_chars))


def _no_data_note(ax, series_col: str, frames) -> None:
    """Write "no data" on a panel whose series column is missing or all NaN in every frame drawn."""
    if not any(series_col in f.columns and f[series_col].notna().any() for f in frames):
        ax.text(0.5, 0.5, f"no {series_col} in the series", transform=ax.transAxes, ha="center",
                va="center", color="dimgrey")


def _legend_below(fig: plt.Figure, axes, ncol: int = 4) -> None:
    """One legend for the figure, below the panels, without duplicate entries."""
    seen: dict[str, object] = {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    if seen:
        fig.legend(list(seen.values()), list(seen.keys()), loc="lower center", ncol=min(ncol, len(seen)),
                   frameon=False, bbox_to_anchor=(0.5, 0.0))


def plot_timeseries(runs: pd.DataFrame, series: Mapping[str, pd.DataFrame], steps: pd.DataFrame,
                    colors: Mapping[str, str], base: Path, title: str) -> bool:
    """Whole-run throughput vs. reference capacity and queueing delay, one row per label.

    Args:
        runs, steps: one scenario's rows; series: run_id -> series frame
        (index t_s on the log clock); colors: `label_colors` of the report;
        base: output path without suffix; title: the scenario name.
    """
    labels = sorted(set(label_of(runs)))
    have = {rid for rid in runs["run_id"] if rid in series and len(series[rid])}
    if not have:
        return False
    step_times = sorted(set(steps["at_s"].dropna())) if len(steps) else []
    with _style():
        fig, axes = plt.subplots(len(labels), 2, figsize=(7.2, 0.6 + 1.7 * len(labels)), sharex=True, sharey="col",
                                 squeeze=False)
        for row, lab in zip(axes, labels):
            ids = [r for r in runs.loc[label_of(runs) == lab, "run_id"] if r in have]
            for rid in ids:
                s = series[rid]
                row[0].plot(s.index, s["throughput_mbps"], color=colors[lab], lw=0.7, alpha=0.7)
                row[1].plot(s.index, s["queueing_delay_ms"], color=colors[lab], lw=0.7, alpha=0.7)
            _no_data_note(row[1], "queueing_delay_ms", [series[r] for r in ids])
            for k, rid in enumerate(ids):  # each run's own bins: runs' bins need not align
                ref = series[rid]["reference_mbps"]
                row[0].plot(ref.index, ref.to_numpy(), color="black", lw=0.8, ls="--", alpha=0.8,
                            label="reference capacity (each run)" if k == 0 else None)
            for ax in row:
                for t in step_times:
                    ax.axvline(t, color="grey", lw=0.8, ls=":")
            row[0].set_ylabel("throughput (Mbit/s)")
            row[1].set_ylabel("queueing delay (ms)")
            row[0].set_title(f"{lab} ({len(ids)} run{'s' if len(ids) != 1 else ''})", loc="left")
        for ax in axes[-1]:
            ax.set_xlabel("time on the link-log clock (s)")
        axes[0, 0].plot([], [], color="dimgrey", lw=0.7, label="throughput / queueing delay, each run (label color)")
        axes[0, 0].plot([], [], color="grey", lw=0.8, ls=":", label="capacity step")
        _suptitle(fig, f"{title}: departure throughput vs. capacity, and queueing delay ({_bin_text(series, have)})")
        fig.tight_layout(rect=(0, LEGEND_IN[0] / fig.get_figheight(), 1, 1))  # room for the legend below
        _legend_below(fig, axes)
        save_figure(fig, base)
    return True


def _bin_text(series: Mapping[str, pd.DataFrame], ids) -> str:
    bins = {series[r].attrs.get("bin_s") for r in ids}
    bins.discard(None)
    return f"{next(iter(bins)) * 1000:g} ms bins" if len(bins) == 1 else "per-run bins"


def zoom_window(step_rows: pd.DataFrame) -> tuple[float, float]:
    """(start, end) on the log clock of a step's zoomed plot, s.

    From just before the step (15% of the shown transient, at least 0.2 s)
    to 25% past the slowest end of a transient among the runs (at least
    0.3 s).  A run's transient ends at its convergence point or, if later,
    when its queue has drained (step + ``drain_time_s``): after a step down
    the departures follow the capacity at once and the transient is the
    queue.  Runs that did not converge have no point and do not stretch the
    zoom (the plot's titles count them); when no run converged and no queue
    drained, the whole step up to its end (``end_s``).  Never past the
    step's end.
    """
    at = float(step_rows["at_s"].min())
    end = float(step_rows["end_s"].max())
    conv = step_rows["convergence_point_s"].where(step_rows["converged"].astype(bool))
    drained = step_rows["at_s"] + step_rows["drain_time_s"] if "drain_time_s" in step_rows else conv * np.nan
    ends = pd.concat([conv, drained], axis=1).max(axis=1).dropna()
    slowest = float(ends.max()) if len(ends) else end
    span = max(slowest - at, 0.2)
    return at - max(0.15 * span, 0.2), min(slowest + max(0.25 * span, 0.3), end)


def plot_step_zoom(runs: pd.DataFrame, series: Mapping[str, pd.DataFrame], step_rows: pd.DataFrame,
                   colors: Mapping[str, str], base: Path, title: str) -> bool:
    """Zoom on one step: throughput, reference, 2%/5% bands, convergence points; queueing delay.

    Args:
        step_rows: the steps-frame rows of ONE step (same scenario, same step
            index) of all runs; series, colors, base, title: as in
            `plot_timeseries`.  The x axis is time since the step (s).
    """
    rows = step_rows[step_rows["run_id"].isin([r for r in series if len(series[r])])]
    if not len(rows):
        return False
    first = rows.iloc[0]
    at, to = float(first["at_s"]), float(first["to_mbps"])
    lo, hi = zoom_window(rows)
    labels = sorted(set(label_of(rows)))
    with _style():
        fig, axes = plt.subplots(len(labels), 2, figsize=(7.2, 0.7 + 1.6 * len(labels)), sharex=True, sharey="col",
                                 squeeze=False)
        for row, lab in zip(axes, labels):
            mine = rows[label_of(rows) == lab]
            for k, r in enumerate(mine.itertuples(index=False)):
                s = series[r.run_id]
                w = s[(s.index >= lo) & (s.index <= hi)]
                x = w.index.to_numpy() - at
                row[0].plot(x, w["throughput_mbps"], color=colors[lab], lw=0.9, alpha=0.75)
                row[1].plot(x, w["queueing_delay_ms"], color=colors[lab], lw=0.9, alpha=0.75)
                row[0].plot(x, w["reference_mbps"], color="black", lw=0.9, ls="--", alpha=0.8, zorder=4,
                            label="reference capacity (each run)" if k == 0 else None)
                if bool(r.converged) and np.isfinite(r.convergence_point_s):
                    tc = float(r.convergence_point_s)
                    y = float(np.interp(tc, s.index.to_numpy(), s["throughput_mbps"].to_numpy()))
                    for ax in row:
                        ax.axvline(tc - at, color=colors[lab], lw=0.8, ls="-.", alpha=0.8)
                    row[0].plot(tc - at, y, marker="o", ms=6, mfc="white", mec="black", mew=1.0, ls="none",
                                label="convergence point" if k == 0 else None, zorder=5)
            _no_data_note(row[1], "queueing_delay_ms", [series[r] for r in mine["run_id"]])
            for band, alpha in zip(sorted(BANDS, reverse=True), (0.18, 0.35)):
                row[0].axhspan(to * (1 - band), to * (1 + band), color="grey", alpha=alpha, lw=0,
                               label=f"±{band:.0%} of {to:g} Mbit/s")
            for ax in row:
                ax.axvline(0, color="grey", lw=0.8, ls=":")
            n_nc = int((~mine["converged"].astype(bool)).sum())
            note = f"; {n_nc}/{len(mine)} not converged" if n_nc else ""
            row[0].set_title(f"{lab} ({len(mine)} runs{note})", loc="left")
            row[0].set_ylabel("throughput (Mbit/s)")
            row[1].set_ylabel("queueing delay (ms)")
        for ax in axes[-1]:
            ax.set_xlabel("time since the step (s)")
            ax.set_xlim(lo - at, hi - at)
        axes[0, 0].plot([], [], color="dimgrey", lw=0.9, label="throughput, each run (label color)")
        axes[0, 1].plot([], [], color="dimgrey", lw=0.8, ls="-.", label="convergence time, each run")
        axes[0, 1].plot([], [], color="grey", lw=0.8, ls=":", label="capacity step")
        _suptitle(fig, f"{title}, {_step_label(first)}: zoom on the transient")
        fig.tight_layout(rect=(0, LEGEND_IN[1] / fig.get_figheight(), 1, 1))  # room for the legend below
        _legend_below(fig, axes, ncol=3)
        save_figure(fig, base)
    return True


VIOLIN_MIN_RUNS = 5
"""Fewest values drawn as a violin (kernel density); fewer: dots and a median bar."""

VIOLIN_METRICS = [
    ("normalized_area", "Normalized Area (s)"),
    ("convergence_s", "convergence time (s)\n(converged runs)"),
    ("peak_queueing_delay_ms", "peak queueing delay (ms)"),
]
"""Rows of the violin figure: (steps column, axis label with unit)."""


def plot_violins(steps: pd.DataFrame, colors: Mapping[str, str], base: Path, title: str) -> bool:
    """Violins (runs as dots) of `VIOLIN_METRICS` per label, one column per step of one scenario.

    The Normalized Area's axis label follows the steps' ``method`` column
    (`transient.stats.step_metric_labels`: seconds for ccplab, no unit for tpcca).
    """
    if not len(steps):
        return False
    methods = steps["method"].dropna().unique() if "method" in steps else ()
    names = dict(stats.step_metric_labels(methods))
    metrics = [(c, names[c] if c == "normalized_area" else label) for c, label in VIOLIN_METRICS]
    steps = steps.assign(_label=label_of(steps))
    labels = sorted(steps["_label"].unique())
    step_ids = sorted(steps["step"].unique())
    rng = np.random.default_rng(0)  # deterministic jitter
    with _style():
        fig, axes = plt.subplots(len(metrics), len(step_ids),
                                 figsize=(max(3.6 * len(step_ids), 5.0), 1.0 + 2.0 * len(metrics)),
                                 squeeze=False, sharex=True)
        pos = np.arange(len(labels))
        for j, sid in enumerate(step_ids):
            st = steps[steps["step"] == sid]
            axes[0, j].set_title(_step_label(st.iloc[0]))
            for i, (col, ylabel) in enumerate(metrics):
                ax = axes[i, j]
                any_values = pd.to_numeric(st[col] if col in st else pd.Series(dtype=float),
                                           errors="coerce").notna().any()
                for p, lab in zip(pos, labels):
                    g = st[st["_label"] == lab]
                    vals = g[col] if col in g else pd.Series(dtype=float)
                    if col == "convergence_s":
                        vals = vals.where(g["converged"].astype(bool))
                    v = pd.to_numeric(vals, errors="coerce").dropna().to_numpy()
                    if v.size >= VIOLIN_MIN_RUNS and np.ptp(v) > 0:
                        parts = ax.violinplot(v, positions=[p], widths=0.7, showextrema=False, showmedians=True)
                        for body in parts["bodies"]:
                            body.set_facecolor(colors[lab])
                            body.set_edgecolor(colors[lab])
                            body.set_alpha(0.35)
                        parts["cmedians"].set_color("black")
                    elif v.size:
                        ax.hlines(np.median(v), p - 0.25, p + 0.25, color="black", lw=1.5, zorder=2)
                    ax.scatter(p + rng.uniform(-0.12, 0.12, v.size), v, s=10, color=colors[lab], zorder=3,
                               edgecolor="black", linewidth=0.3)
                    missing = len(g) - v.size
                    if missing and any_values:
                        why = "not conv." if col == "convergence_s" else "n/a"
                        ax.annotate(f"{missing}/{len(g)}\n{why}", (p, 0), xycoords=("data", "axes fraction"),
                                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                                    fontsize=6.5, color="dimgrey")
                if not any_values:
                    ax.set_yticks([])
                    ax.text(0.5, 0.5, "no values for this step", transform=ax.transAxes, ha="center",
                            va="center", color="dimgrey")
                if j == 0:
                    ax.set_ylabel(ylabel)
                ax.set_xticks(pos)
                ax.set_xticklabels(labels, rotation=25, ha="right")
                ax.set_xlim(-0.6, len(labels) - 0.4)
                ax.grid(axis="x", visible=False)
        _suptitle(fig, f"{title}: per-step transient metrics across runs (violins; dots: runs; bar: median)")
        fig.tight_layout()
        save_figure(fig, base)
    return True


def plot_plane(runs: pd.DataFrame, summary: pd.DataFrame | None, colors: Mapping[str, str], base: Path,
               title: str) -> bool:
    """Throughput vs. p95 queueing delay per run; per label the median with its 95% CI; delay axis reversed.

    Args:
        runs: one scenario's runs; summary: `transient.stats.run_summary`
            rows of that scenario (for the medians and CIs; None: medians
            only, from the runs).
    """
    data = runs.dropna(subset=["throughput_mbps", "p95_queueing_delay_ms"])
    if not len(data):
        return False
    data = data.assign(_label=label_of(data))
    markers = label_markers(colors)
    with _style():
        fig, ax = plt.subplots(figsize=(4.8, 3.6))
        for lab, g in sorted(data.groupby("_label"), key=lambda x: x[0]):
            ax.scatter(g["p95_queueing_delay_ms"], g["throughput_mbps"], s=14, color=colors[lab], alpha=0.45,
                       marker=markers.get(lab, "o"), linewidth=0)
            x, xerr = _median_ci(summary, lab, "p95_queueing_delay_ms", g)
            y, yerr = _median_ci(summary, lab, "throughput_mbps", g)
            ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=markers.get(lab, "o"), ms=7, color=colors[lab],
                        mec="black", mew=0.7, capsize=2.5, lw=1.0, label=lab, zorder=4)
        ax.invert_xaxis()  # less delay to the right: better is up and right
        ax.set_xlabel("p95 per-packet queueing delay (ms; reversed axis)")
        ax.set_ylabel("throughput (Mbit/s)")
        ax.set_title(f"{title}: throughput vs. delay\n(faint: runs; marker + bars: median, bootstrap 95% CI)")
        ax.legend(loc="best", frameon=False)
        fig.tight_layout()
        save_figure(fig, base)
    return True


def _median_ci(summary: pd.DataFrame | None, label: str, metric: str, g: pd.DataFrame):
    """(median, asymmetric error bar [[below], [above]] or None) of ``metric`` for ``label``."""
    if summary is not None and len(summary):
        row = summary[(summary["label"] == label) & (summary["metric"] == metric)]
        if len(row):
            r = row.iloc[0]
            if np.isfinite(r["ci_low"]) and np.isfinite(r["ci_high"]):
                return r["median"], [[r["median"] - r["ci_low"]], [r["ci_high"] - r["median"]]]
            return r["median"], None
    return float(g[metric].median()), None


def _flow_colors(n: int) -> list[str]:
    """One Okabe-Ito color per flow index (flows of one run, not labels: two flows may share a CCA)."""
    return [OKABE_ITO[k % len(OKABE_ITO)] for k in range(n)]


def plot_flow_throughput(flow_series: pd.DataFrame, flows: pd.DataFrame, base: Path, title: str) -> bool:
    """Per-flow departure throughput of one run, stacked and overlaid, and Jain's index over time.

    Args:
        flow_series: the run's per-flow series (`transient.flows.FlowTables.series`:
            index t_s, columns ``flow<k>`` Mbit/s, ``capacity_mbps``, ``n_active``, ``jain``).
        flows: the run's rows of the flows table (flow, label, flow_start_s, flow_end_s).
        base: output path without suffix; title: the figure's title (run id).

    Returns:
        False (nothing written) when the series has no bins or no flow column.
    """
    cols = sorted([c for c in flow_series.columns if c.startswith("flow") and c[4:].isdigit()], key=lambda c: int(c[4:]))
    if not len(flow_series) or not cols:
        return False
    t = flow_series.index.to_numpy()
    colors = _flow_colors(len(cols))
    names = {int(r.flow): f"flow {int(r.flow)}: {r.label}" for r in flows.itertuples(index=False)}
    with _style():
        fig, axes = plt.subplots(3, 1, figsize=(7.2, 6.4), sharex=True, gridspec_kw={"height_ratios": [2, 2, 1]})
        y = np.vstack([flow_series[c].to_numpy() for c in cols])
        axes[0].stackplot(t, y, colors=colors, alpha=0.8, step="post",
                          labels=[names.get(int(c[4:]), c) for c in cols])
        axes[0].step(t, flow_series["capacity_mbps"], where="post", color="black", lw=0.8, ls="--",
                     label="offered capacity")
        n_active = flow_series["n_active"].to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            fair = np.where(n_active > 0, flow_series["capacity_mbps"].to_numpy() / np.maximum(n_active, 1), np.nan)
        for k, c in enumerate(cols):
            axes[1].step(t, flow_series[c], where="post", color=colors[k], lw=0.9)
        axes[1].step(t, fair, where="post", color="black", lw=0.8, ls="--", label="fair share (capacity / n active)")
        axes[2].step(t, flow_series["jain"], where="post", color="black", lw=0.9)
        axes[2].set_ylim(0, 1.05)
        for r in flows.itertuples(index=False):
            k = int(r.flow)
            for ax in axes:
                if np.isfinite(r.flow_start_s):
                    ax.axvline(r.flow_start_s, color=colors[k % len(colors)], lw=0.9, ls=":")
                if np.isfinite(r.flow_end_s):
                    ax.axvline(r.flow_end_s, color=colors[k % len(colors)], lw=0.9, ls="-.")
        axes[1].plot([], [], color="grey", lw=0.9, ls=":", label="a flow's arrival (its color)")
        axes[1].plot([], [], color="grey", lw=0.9, ls="-.", label="a flow's departure")
        axes[0].set_ylabel("throughput (Mbit/s)\nstacked")
        axes[1].set_ylabel("throughput (Mbit/s)\noverlaid")
        axes[2].set_ylabel("Jain's index")
        axes[2].set_xlabel("time on the link-log clock (s)")
        bins = flow_series.attrs.get("bin_s")
        _suptitle(fig, f"{title}: per-flow departure throughput and Jain's fairness index"
                       + (f" ({bins * 1000:g} ms bins)" if bins else ""))
        fig.tight_layout(rect=(0, LEGEND_IN[1] / fig.get_figheight(), 1, 1))
        _legend_below(fig, axes, ncol=3)
        save_figure(fig, base)
    return True


def plot_coexistence_heatmap(matrix: pd.DataFrame, base: Path, title: str, metric_label: str,
                             vmin: float | None = None, vmax: float | None = None, cmap: str = "viridis",
                             fmt: str = "{:.3g}") -> bool:
    """A coexistence matrix as a heatmap with the values written in the cells.

    Args:
        matrix: rows = the first flow's CCA (label), columns = the second's,
            values = one metric (e.g. the first flow's throughput harm or its
            share); NaN cells (pair not run) are left blank and marked "n/a".
        base: output path without suffix; title: the figure's title;
        metric_label: the colorbar's label (with unit).
        vmin, vmax: color scale limits (default: the data's); cmap: a
            matplotlib colormap (viridis: perceptually uniform, colorblind-safe);
            fmt: how a cell's value is written (str.format).

    Returns:
        False (nothing written) when the matrix is empty or all NaN.

    Raises:
        ValueError: a value is not numeric.
    """
    if matrix.empty:
        return False
    values = matrix.apply(pd.to_numeric, errors="raise").to_numpy(float)
    if not np.isfinite(values).any():
        return False
    with _style():
        fig, ax = plt.subplots(figsize=(1.6 + 0.9 * values.shape[1], 1.4 + 0.6 * values.shape[0]))
        im = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
        lo, hi = im.get_clim()
        for (i, j), v in np.ndenumerate(values):
            if np.isfinite(v):
                light = (v - lo) / (hi - lo) < 0.5 if hi > lo else True
                ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=7.5,
                        color="white" if light else "black")
            else:
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=7, color="dimgrey")
        ax.set_xticks(range(values.shape[1]))
        ax.set_xticklabels([str(c) for c in matrix.columns], rotation=25, ha="right")
        ax.set_yticks(range(values.shape[0]))
        ax.set_yticklabels([str(r) for r in matrix.index])
        ax.set_xlabel("second flow's CCA")
        ax.set_ylabel("first flow's CCA")
        ax.grid(False)
        fig.colorbar(im, ax=ax, label=metric_label)
        ax.set_title(title)
        fig.tight_layout()
        save_figure(fig, base)
    return True
