"""Command line: ``python -m transient PATH... [--method M] [--step AT:FROM:TO]... [--json] [--out DIR]``.

PATH is an mm-link log, a run directory or a results directory (flags:
`transient.cli_args`).  Prints one line per step (or, with --json, one JSON
object per run per line); --out writes runs.csv, steps.csv, plots and
report.html there (and, when a run has several flows, flows.csv,
fairness.csv, flow_steps.csv, summary_flows.csv and harm.csv).  Exit status 0 on success, 2 on bad input (the message
names the file, and the line for a malformed log).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


from typing import TYPE_CHECKING

from ._lazy import lazy_module

pd = lazy_module("pandas")  # loaded when the table is printed (transient._lazy)

from .cli_args import add_analysis_arguments, options_from_args, print_json_lines
from .errors import TransientError
from .textable import format_rows

if TYPE_CHECKING:  # the analysis (numpy) is imported once the reducer of a bare log is under way
    from .analyze import RunResult

SUMMARY_COLUMNS = ["run_id", "step", "kind", "at_s", "from_mbps", "to_mbps", "converged", "convergence_s",
                   "normalized_area", "overshoot_pct", "response_class", "peak_queueing_delay_ms", "drops"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m transient",
        description="Transient performance of CCAs from mm-link logs / ccplab run directories: whole-run "
                    "mahimahi metrics and, per capacity step, convergence, Normalized Area, second-order "
                    "metrics and the queue it builds.")
    add_analysis_arguments(p)
    p.add_argument("--out", metavar="DIR", help="write runs.csv, steps.csv, plots and report.html to DIR (with "
                   "several flows in a run also flows.csv, fairness.csv, flow_steps.csv, summary_flows.csv, harm.csv)")
    return p


def run_analysis(args: argparse.Namespace) -> tuple[list[RunResult], list[tuple[str, str]]]:
    """Analyse every PATH of parsed ``args``; returns (results, skipped-run errors)."""
    from .analyze import analyze_paths

    options = options_from_args(args)
    results, errors = [], []
    for path in args.paths:
        res, err = analyze_paths(path, options=options, on_error="skip" if args.skip_bad else "raise",
                                 workers=args.workers)
        results += res
        errors += err
    return results, errors


def print_summary(results: Sequence[RunResult]) -> None:
    """One line per (run, step) with the headline figures."""
    from .analyze import _tables

    rows = [row for r in results for row in (r.step_rows or [])]
    if rows and all(r.step_rows is not None for r in results):
        text = format_rows(rows, SUMMARY_COLUMNS)  # no pandas import for the table alone
        if text is not None:
            print(text)
            return
    _, steps = _tables(list(results))
    if not len(steps):
        print("no steps analysed")
        return
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.precision", 3):
        print(steps[SUMMARY_COLUMNS].to_string(index=False))


FLOW_SUMMARY_COLUMNS = ["run_id", "flow", "label", "flow_start_s", "throughput_mbps", "share",
                        "p95_queueing_delay_ms", "drops", "smoothness_cv", "start_convergence_s"]
FAIRNESS_SUMMARY_COLUMNS = ["run_id", "interval", "from_s", "to_s", "active_flows", "jain_median"]


def print_flow_summary(results: Sequence[RunResult]) -> None:
    """When a run has several flows: one line per flow and one per interval of a constant set of active flows."""
    if all(r.n_flows <= 1 for r in results):
        return
    from .analyze import _flow_frames
    flows, fairness, _, _ = _flow_frames(list(results))
    multi = set(flows.loc[pd.to_numeric(flows["n_flows"]) > 1, "run_id"]) if len(flows) else set()
    if not multi:
        return
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.precision", 3):
        print()
        print(flows.loc[flows["run_id"].isin(multi), FLOW_SUMMARY_COLUMNS].to_string(index=False))
        print()
        print(fairness.loc[fairness["run_id"].isin(multi), FAIRNESS_SUMMARY_COLUMNS].to_string(index=False))


def _start_reducer(args: argparse.Namespace) -> None:
    """Start the compiled reducer on the one bare log of ``args`` when its per-ms cache is to be made
    (`transient.reducer.start`), so it reads the log while this process imports the analysis."""
    if len(args.paths) != 1 or args.method != "ccplab" or getattr(args, "no_report", False):
        return
    if args.step is not None and args.steps == "auto":
        return  # refused by `options_from_args`: nothing to reduce for
    from pathlib import Path

    from .reducer import start_for_cache

    path = Path(args.paths[0])
    if path.is_file() and path.name != "metadata.json":
        start_for_cache(path)


def analyse_and_print(args: argparse.Namespace, out: str | None, source: str, error_prefix: str = "error") -> int:
    """Analyse every PATH of parsed ``args`` and print the step table (or, with --json, one JSON object per
    run per line); skipped runs are listed on stderr.  With ``out`` (a directory) runs.csv, steps.csv, plots
    and report.html are written there, ``source`` naming the input in the report.

    The CLI glue shared by ``python -m transient`` and ``ccplab analyze``.  Returns 0, or 2 with
    "``error_prefix``: message" on stderr when an input is bad (nothing is printed to stdout then).
    """
    try:
        _start_reducer(args)
        results, errors = run_analysis(args)
        if out:
            from .analyze import _flow_frames, _tables
            from .report import write_report

            runs, steps = _tables(results)
            flows, fairness, flow_steps, flow_series = _flow_frames(results)
            report = write_report(out, runs, steps, {r.run_id: r.series for r in results},
                                  errors=errors, source=source, flows=flows, fairness=fairness,
                                  flow_steps=flow_steps, flow_series=flow_series)
    except (TransientError, ValueError, OSError, argparse.ArgumentTypeError) as exc:
        print(f"{error_prefix}: {exc}", file=sys.stderr)
        return 2
    for path, err in errors:
        print(f"skipped {path}: {err}", file=sys.stderr)
    if args.json:
        print_json_lines(results)
    else:
        print_summary(results)
        print_flow_summary(results)
    if out:
        print(f"report: {report}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return analyse_and_print(args, args.out, source=" ".join(args.paths))

if __name__ == "__main__":
    sys.exit(main())
