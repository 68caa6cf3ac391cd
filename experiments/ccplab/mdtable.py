"""A Markdown table of a comparison's run metrics, for documentation pages: ``python -m ccplab.mdtable DIR``.

Reads ``DIR/summary_runs.csv`` (written by the analysis of ``ccplab compare``: one row per label,
scenario and metric with its median and quartiles) and prints one row per label: each metric's median
with its interquartile range, and the number of runs. The table is the analysis's own numbers, so a
page quoting it can be regenerated from the results directory.

Usage::

    python -m ccplab.mdtable results/upstream-compare \\
        --metric throughput_mbps --metric p95_queueing_delay_ms --metric retransmits

Exit status 2 with one line on stderr when the file is missing or lacks a label or metric asked for.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd

from transient.stats import RUN_METRICS

from .errors import CcplabError

DEFAULT_METRICS = ("throughput_mbps", "p95_queueing_delay_ms", "retransmits")
_TITLES = dict(RUN_METRICS)


def _fmt(value: float) -> str:
    """Three significant digits for small values, whole numbers from 100 (a table, not a data file)."""
    if value != value:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def markdown_table(results: Path, metrics: Sequence[str] = DEFAULT_METRICS,
                   labels: Sequence[str] | None = None) -> str:
    """The table of ``results/summary_runs.csv``: one row per label (``labels`` in that order, default all
    sorted), a column per metric ``median [q1-q3]`` and the runs counted. CcplabError names what is missing."""
    path = Path(results) / "summary_runs.csv"
    try:
        summary = pd.read_csv(path)
    except OSError as exc:
        raise CcplabError(f"cannot read {path}: {exc.strerror}; run `ccplab analyze {results}` first") from None
    scenarios = sorted(summary["scenario"].unique())
    if len(scenarios) != 1:
        raise CcplabError(f"{path} holds {len(scenarios)} scenarios ({', '.join(scenarios)}); the table is of one")
    known = list(dict.fromkeys(summary["label"]))
    labels = list(labels) if labels else sorted(known)
    missing = [label for label in labels if label not in known]
    if missing:
        raise CcplabError(f"{path} has no runs of {', '.join(missing)} (it has {', '.join(known)})")
    absent = [m for m in metrics if m not in set(summary["metric"])]
    if absent:
        raise CcplabError(f"{path} has no metric {', '.join(absent)}")
    rows = ["| CCA | " + " | ".join(_TITLES.get(m, m) for m in metrics) + " | runs |",
            "|---|" + "---|" * (len(metrics) + 1)]
    for label in labels:
        cells = []
        n = 0
        for metric in metrics:
            r = summary[(summary["label"] == label) & (summary["metric"] == metric)].iloc[0]
            n = max(n, int(r["n_valid"]))
            spread = f" [{_fmt(r['q1'])}-{_fmt(r['q3'])}]" if int(r["n_valid"]) > 1 else ""
            cells.append(_fmt(r["median"]) + spread)
        rows.append(f"| {label} | " + " | ".join(cells) + f" | {n} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ccplab.mdtable", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="an analysed comparison directory (with summary_runs.csv)")
    parser.add_argument("--metric", action="append", help="a run metric of summary_runs.csv (repeat; default "
                        + ", ".join(DEFAULT_METRICS) + ")")
    parser.add_argument("--label", action="append", help="a row, in order (repeat; default every label, sorted)")
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(markdown_table(args.results, args.metric or DEFAULT_METRICS, args.label))
    except CcplabError as exc:
        print(f"mdtable: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
