"""Command line: ``python -m transient PATH [--json] [--rtt-ms MS] [--out DIR]``.

PATH is an mm-link log, a run directory or a results directory.  Prints the
per-run table (or, with --json, ``{"runs": [...], "steps": [...],
"errors": [...]}`` with NaN as null); --out writes runs.csv, steps.csv,
plots/ and report.html there.  Exit status 0 on success, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

import pandas as pd

from .analyze import analyze_all
from .steps import Step
from .errors import TransientError
from .report import write_report
from .tpcca import SteadyStateParams


def _step(text: str) -> Step:
    try:
        return Step.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m transient",
        description="Whole-run mahimahi metrics and TPCCA transient metrics (convergence time, "
        "Normalized Area) of mm-link logs / ccplab run directories.",
    )
    p.add_argument("path", help="mm-link log file, run directory (with metadata.json) or results directory")
    p.add_argument("--json", action="store_true", help="print runs and steps as JSON records (NaN -> null)")
    p.add_argument("--rtt-ms", type=float, default=None,
                   help="RTT in ms = bin width of the throughput series (default: 2 x one_way_delay_ms "
                   "from metadata.json, else 50)")
    p.add_argument("--out", metavar="DIR", help="write runs.csv, steps.csv, plots/*.png and report.html to DIR")
    p.add_argument("--step", type=_step, action="append", default=None, metavar="AT:FROM:TO",
                   help="capacity step (s:Mbit/s:Mbit/s) of a bare log file; repeatable")
    p.add_argument("--skip-bad", action="store_true", help="skip runs that fail to analyse instead of stopping")
    p.add_argument("--mean-var-threshold", type=float, default=SteadyStateParams.mean_var_threshold,
                   help="TPCCA: max variance of window means, (Mbit/s)^2 (default %(default)s)")
    p.add_argument("--var-var-threshold", type=float, default=SteadyStateParams.var_var_threshold,
                   help="TPCCA: max variance of window variances, (Mbit/s)^4 (default %(default)s)")
    return p


def _records(df: pd.DataFrame) -> list[dict]:
    return json.loads(df.to_json(orient="records")) if len(df) else []


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        params = SteadyStateParams(mean_var_threshold=args.mean_var_threshold, var_var_threshold=args.var_var_threshold)
        a = analyze_all(args.path, rtt_ms=args.rtt_ms, steps=args.step, params=params,
                        on_error="skip" if args.skip_bad else "raise")
        if args.out:
            report = write_report(args.out, a.runs, a.steps, a.series, errors=a.errors, source=args.path)
    except (TransientError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump({"runs": _records(a.runs), "steps": _records(a.steps),
                   "errors": [{"path": p, "error": e} for p, e in a.errors]}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        cols = ["run_id", "cca", "throughput_mbps", "utilization", "p95_queueing_delay_ms",
                "p95_signal_delay_ms", "power_score", "converged", "convergence_time_s", "normalized_area"]
        with pd.option_context("display.width", 200, "display.max_columns", 20, "display.precision", 3):
            print(a.runs[cols].to_string(index=False))
    if args.out:
        print(f"report: {report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
