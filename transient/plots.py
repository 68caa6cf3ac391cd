"""Matplotlib figures of a results set (Agg backend, PNG, dpi 150).

Each function draws one scenario and writes one PNG to the given path:

* `plot_throughput`: departure throughput over time per CCA (one panel per
  CCA, runs overlaid) against the measured link capacity, step times marked;
* `plot_transient`: Normalized Area and convergence time per CCA across runs
  (box plot with the runs as jittered points; non-converged runs counted);
* `plot_tradeoff`: throughput vs. 95th-percentile per-packet queueing delay,
  one marker per run, delay axis reversed (better is up and to the right),
  as in mahimahi / Remy / Pantheon plots.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot import

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

DPI = 150


def cca_colors(ccas: list[str]) -> dict[str, tuple]:
    """A stable color per CCA (tab10 order of the sorted names)."""
    cmap = plt.get_cmap("tab10")
    return {c: cmap(i % 10) for i, c in enumerate(sorted(ccas))}


def _label(cca: object) -> str:
    return "unknown" if cca is None or (isinstance(cca, float) and np.isnan(cca)) else str(cca)


def plot_throughput(
    runs: pd.DataFrame, series: Mapping[str, pd.DataFrame], steps: pd.DataFrame, path: Path, title: str
) -> bool:
    """Throughput per CCA vs. capacity; returns False (nothing written) if no series."""
    ccas = sorted({_label(c) for c in runs["cca"]})
    have = [rid for rid in runs["run_id"] if rid in series and len(series[rid])]
    if not have:
        return False
    colors = cca_colors(ccas)
    fig, axes = plt.subplots(len(ccas), 1, figsize=(7.0, 1.0 + 2.0 * len(ccas)), sharex=True, squeeze=False)
    step_times = sorted(set(steps["at_s"].dropna())) if len(steps) else []
    for ax, cca in zip(axes[:, 0], ccas):
        sub = runs[runs["cca"].map(_label) == cca]
        caps = []
        for k, rid in enumerate(sub["run_id"]):
            s = series.get(rid)
            if s is None or not len(s):
                continue
            ax.plot(s.index, s["throughput_mbps"], color=colors[cca], lw=0.8, alpha=0.6,
                    label="throughput (each run)" if k == 0 else None)
            caps.append(s["capacity_mbps"])
        if caps:
            cap = pd.concat(caps, axis=1).mean(axis=1)
            ax.plot(cap.index, cap.to_numpy(), color="black", lw=1.2, ls="--",
                    label="capacity (mean over runs)")
        for i, t in enumerate(step_times):
            ax.axvline(t, color="gray", lw=0.8, ls=":", label="capacity step" if i == 0 else None)
        ax.set_ylabel("Mbit/s")
        ax.set_title(f"{cca} ({len(sub)} run{'s' if len(sub) != 1 else ''})", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[-1, 0].set_xlabel("time since trace start (s)")
    fig.suptitle(f"{title}: throughput (1-RTT bins) vs. link capacity", fontsize=11)
    _save(fig, path)
    return True


def plot_transient(steps: pd.DataFrame, path: Path, title: str) -> bool:
    """Box + strip plots of Normalized Area and convergence time; False if no steps."""
    if not len(steps):
        return False
    multi = steps["step"].nunique() > 1
    steps = steps.assign(_cca=steps["cca"].map(_label))
    groups = sorted(steps.groupby(["_cca", "step"]), key=lambda g: (g[0][0], g[0][1]))
    colors = cca_colors(sorted(steps["_cca"].unique()))
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.6))
    rng = np.random.default_rng(0)  # deterministic jitter
    labels = []
    for (cca, step), g in groups:
        n_nc = int((~g["converged"].astype(bool)).sum())
        lab = f"{cca}\nstep {step}" if multi else cca
        labels.append(lab + (f"\n({n_nc}/{len(g)} not conv.)" if n_nc else ""))
    for ax, col, ylabel in (
        (axes[0], "normalized_area", "Normalized Area (TPCCA)"),
        (axes[1], "convergence_time_s", "convergence time (s)"),
    ):
        data = [g[col].dropna().to_numpy() for _, g in groups]
        pos = np.arange(1, len(groups) + 1)
        nonempty = [i for i, d in enumerate(data) if d.size]
        if nonempty:
            ax.boxplot([data[i] for i in nonempty], positions=pos[nonempty], widths=0.5,
                       showfliers=False, medianprops={"color": "black"})
        for p, d, ((cca, _), _) in zip(pos, data, groups):
            ax.scatter(p + rng.uniform(-0.15, 0.15, d.size), d, s=12, color=colors[cca], alpha=0.8, zorder=3)
        ax.set_xticks(pos)
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_xlim(0.4, len(groups) + 0.6)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{title}: transient after each capacity step (one point per run)", fontsize=11)
    _save(fig, path)
    return True


def plot_tradeoff(runs: pd.DataFrame, path: Path, title: str) -> bool:
    """Throughput vs. p95 per-packet queueing delay scatter; False if no data."""
    data = runs.dropna(subset=["throughput_mbps", "p95_queueing_delay_ms"])
    if not len(data):
        return False
    data = data.assign(_cca=data["cca"].map(_label))
    colors = cca_colors(sorted(data["_cca"].unique()))
    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    for cca, g in sorted(data.groupby("_cca"), key=lambda x: x[0]):
        ax.scatter(g["p95_queueing_delay_ms"], g["throughput_mbps"], s=18, color=colors[cca], alpha=0.7, label=cca)
        ax.scatter(g["p95_queueing_delay_ms"].mean(), g["throughput_mbps"].mean(), s=90, marker="X",
                   color=colors[cca], edgecolor="black", linewidth=0.8, zorder=3)
    ax.invert_xaxis()  # less delay to the right: better is up and right
    ax.set_xlabel("95th-percentile per-packet queueing delay (ms)")
    ax.set_ylabel("throughput (Mbit/s)")
    ax.set_title(f"{title}: throughput vs. delay (dots: runs, X: mean)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)
    return True


def _save(fig: plt.Figure, path: Path) -> None:
    try:
        fig.tight_layout()
        fig.savefig(path, dpi=DPI, format="png")
    finally:
        plt.close(fig)
