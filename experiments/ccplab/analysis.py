"""The bridge from runs to the ``transient`` analysis package (the runner adds nothing to it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .errors import CcplabError


def analyze_and_report(results_dir: Path) -> Path:
    """Analyse every run under ``results_dir`` and write runs.csv, steps.csv, plots/ and report.html there
    (and flows.csv, fairness.csv, flow_steps.csv, summary_flows.csv, harm.csv when a run has several flows).

    Returns the path of report.html. Raises CcplabError when a run cannot be analysed.
    """
    import transient

    try:
        from transient.report import flow_kwargs

        a = transient.analyze_all(results_dir)
        return Path(transient.write_report(results_dir, a.runs, a.steps, a.series, errors=a.errors,
                                           source=str(results_dir), **flow_kwargs(a)))
    except transient.TransientError as exc:
        raise CcplabError(f"analysis of {results_dir} failed: {exc}") from exc


def add_analyze_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``ccplab analyze``: those of ``python -m transient`` (one definition) + --no-report."""
    from transient.cli_args import add_analysis_arguments

    add_analysis_arguments(p)
    p.add_argument("--no-report", action="store_true",
                   help="write nothing: no runs.csv, steps.csv or report.html into an analysed directory, no "
                        "Parquet cache beside a log")


def analyze_command(args: argparse.Namespace) -> int:
    """``ccplab analyze``: analyse each PATH; print a step table or (--json) one JSON object per run
    per line; a single analysed directory gets its report written in place unless --no-report.

    Returns 0, or 2 with the message on stderr when an input is bad (the message names the file, and
    the line of a malformed log).
    """
    from transient.__main__ import analyse_and_print

    for p in args.paths:
        if not Path(p).exists():
            raise CcplabError(f"{p} does not exist")
    write = not args.no_report and len(args.paths) == 1 and Path(args.paths[0]).is_dir()
    out = args.paths[0] if write else None
    return analyse_and_print(args, out, source=str(args.paths[0]), error_prefix="ccplab: error")
