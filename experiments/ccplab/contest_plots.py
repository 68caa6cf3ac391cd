"""Plots of ``ccplab contest`` (PNG + PDF each, via ``transient.plots.save_figure``).

* ``plots/plane``: the throughput/delay plane: x = p95 signal delay (ms, log
  scale, decreasing to the right as in the Sprout/mahimahi contest plots, so
  better is up and right), y = average throughput (Mbit/s); one marker per run
  (small) and the CCA's median (large; in the legend, and labelled beside it
  for up to `DIRECT_LABELS_MAX` CCAs). Every CCA has its own (colour, marker)
  pair (``transient.plots.label_styles``); the log axis is labelled by
  ``transient.plots.log_axis``, whose labels never overlap.
* ``plots/throughput-<cca>``: throughput over time against the link's
  capacity (bins of ``THROUGHPUT_BIN_MS``), the CCA's first run.
* ``plots/sweep`` (with ``--sweep``): the same plane for one CCA over its
  parameter values, each labelled with its value and score; the best score
  (the value with the largest median power score) is starred; right panel:
  score vs value.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from transient.plots import PAPER_STYLE, label_styles, log_axis, save_figure  # noqa: E402

THROUGHPUT_BIN_MS = 500
DIRECT_LABELS_MAX = 8
"""Up to this many CCAs the plane also names each median beside it; past it only the legend does
(names beside crowded points overlap)."""


def write_plots(out: Path, rows: Sequence[dict], board: Sequence[dict], setup) -> list[Path]:
    """Write every contest plot under ``out/plots``; returns the files written."""
    plots = out / "plots"
    plots.mkdir(exist_ok=True)
    written: list[Path] = []
    with plt.rc_context(PAPER_STYLE):
        written += plane(plots / "plane", rows, board, f"{setup.trace_name}, {setup.duration_s} s")
        for r in board:
            first = next(x for x in rows if x["cca"] == r["cca"])
            written += throughput_over_time(plots / f"throughput-{_slug(r['cca'])}", Path(first["run_dir"]),
                                            r["cca"])
        if setup.sweep is not None:
            written += sweep_plot(plots / "sweep", board, setup.sweep)
    return written


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text.replace(":", "-").replace("=", "-"))


def _finite(*xs: float) -> bool:
    return all(x is not None and not math.isnan(float(x)) for x in xs)


def plane(base: Path, rows: Sequence[dict], board: Sequence[dict], title: str) -> list[Path]:
    """Throughput vs p95 signal delay, every CCA (runs small, medians large); writes `plane_figure`."""
    return save_figure(plane_figure(rows, board, title), base)


def plane_figure(rows: Sequence[dict], board: Sequence[dict], title: str) -> plt.Figure:
    """The plane's figure (not saved): one scatter artist per run and one per CCA median (labelled with
    the CCA and its score), in the CCA's (colour, marker) pair."""
    styles = label_styles(r["cca"] for r in board)
    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    for r in rows:
        if _finite(r["p95_signal_delay_ms"], r["throughput_mbps"]):
            color, marker = styles[r["cca"]]
            ax.scatter(r["p95_signal_delay_ms"], r["throughput_mbps"], s=10, alpha=0.4, color=color, marker=marker)
    for r in board:
        if not _finite(r["p95_signal_delay_ms"], r["throughput_mbps"]):
            continue
        color, marker = styles[r["cca"]]
        ax.scatter(r["p95_signal_delay_ms"], r["throughput_mbps"], s=50, color=color, marker=marker,
                   label=f"{r['cca']} (score {r['power_score']:.2f})", edgecolor="black", linewidth=0.5)
        if len(board) <= DIRECT_LABELS_MAX:
            ax.annotate(r["cca"].removeprefix("ccp:"), (r["p95_signal_delay_ms"], r["throughput_mbps"]),
                        fontsize=6.5, xytext=(4, 3), textcoords="offset points")
    ax.invert_xaxis()
    log_axis(ax, "x")
    ax.set_xlabel("95th-percentile signal delay (ms, log scale; better to the right)")
    ax.set_ylabel("average throughput (Mbit/s)")
    ax.set_title(f"throughput/delay plane: {title}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=6.5, frameon=False)
    fig.tight_layout()
    return fig


def throughput_over_time(base: Path, run_dir: Path, cca: str) -> list[Path]:
    """Throughput and capacity over time of one run (bins of THROUGHPUT_BIN_MS)."""
    import transient

    log = transient.read_link_log(run_dir / "uplink.log")
    s = transient.rate_series(log.events, THROUGHPUT_BIN_MS)
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    ax.fill_between(s.index, s["capacity_mbps"], step="post", color="0.85", label="capacity")
    ax.step(s.index, s["throughput_mbps"], where="post", color="C0", linewidth=1.0, label="throughput")
    m = transient.link_metrics(log.events)
    ax.set_title(f"{cca}: {m.throughput_mbps:.2f} of {m.capacity_mbps:.2f} Mbit/s, p95 signal delay "
                 f"{m.p95_signal_delay_ms:.0f} ms, score {m.power_score:.2f}")
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"Mbit/s ({THROUGHPUT_BIN_MS} ms bins)")
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    return save_figure(fig, base)


def sweep_plot(base: Path, board: Sequence[dict], sweep) -> list[Path]:
    """One CCA over its parameter values: writes `sweep_figure`."""
    return save_figure(sweep_figure(board, sweep), base)


def sweep_figure(board: Sequence[dict], sweep) -> plt.Figure:
    """One CCA over its parameter values (not saved): the plane (values labelled, best starred) and score
    vs value."""
    pts = [r for r in board if _finite(r["p95_signal_delay_ms"], r["throughput_mbps"], r["power_score"])]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [1.5, 1]})
    best = max(pts, key=lambda r: r["power_score"]) if pts else None
    ordered = sorted(pts, key=lambda r: float(r["value"]))
    ax.plot([r["p95_signal_delay_ms"] for r in ordered], [r["throughput_mbps"] for r in ordered], color="0.6",
            linewidth=0.8, zorder=1)
    for r in ordered:
        ax.scatter(r["p95_signal_delay_ms"], r["throughput_mbps"], s=18, color="C0", zorder=2)
        ax.annotate(f"{r['value']} ({r['power_score']:.1f})", (r["p95_signal_delay_ms"], r["throughput_mbps"]),
                    fontsize=6.5, xytext=(3, 3), textcoords="offset points")
    if best is not None:
        ax.scatter(best["p95_signal_delay_ms"], best["throughput_mbps"], s=160, marker="*", color="C3", zorder=3,
                   label=f"best {sweep.param}={best['value']}: score {best['power_score']:.2f}")
        ax.legend(loc="lower left", fontsize=7)
    ax.invert_xaxis()
    log_axis(ax, "x")
    ax.set_xlabel("95th-percentile signal delay (ms, log; better to the right)")
    ax.set_ylabel("average throughput (Mbit/s)")
    ax.set_title(f"{sweep.base}: {sweep.param} sweep (labels: value (score))")
    ax2.plot([float(r["value"]) for r in ordered], [r["power_score"] for r in ordered], marker="o", markersize=3)
    if best is not None:
        ax2.scatter([float(best["value"])], [best["power_score"]], s=160, marker="*", color="C3", zorder=3)
    ax2.set_xlabel(sweep.param)
    ax2.set_ylabel("power score (Mbit/s / s)")
    ax2.set_title("score = throughput / p95 signal delay")
    fig.tight_layout()
    return fig
