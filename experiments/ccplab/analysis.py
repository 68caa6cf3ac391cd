"""The bridge from runs to the ``transient`` analysis package (the runner adds nothing to it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import CcplabError


def analyze_and_report(results_dir: Path) -> Path:
    """Analyse every run under ``results_dir`` and write runs.csv, steps.csv, plots/ and report.html there.

    Returns the path of report.html. Raises CcplabError when a run cannot be analysed.
    """
    import transient

    try:
        a = transient.analyze_all(results_dir)
        return Path(transient.write_report(results_dir, a.runs, a.steps, a.series, errors=a.errors,
                                           source=str(results_dir)))
    except transient.TransientError as exc:
        raise CcplabError(f"analysis of {results_dir} failed: {exc}") from exc


def add_analyze_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``ccplab analyze``: those of ``python -m transient`` (one definition) + --no-report."""
    from transient.cli_args import add_analysis_arguments

    add_analysis_arguments(p)
    p.add_argument("--no-report", action="store_true",
                   help="do not write runs.csv, steps.csv and report.html into an analysed directory")


def analyze_command(args: argparse.Namespace) -> int:
    """``ccplab analyze``: analyse each PATH; print a step table or (--json) one JSON object per run
    per line; a single analysed directory gets its report written in place unless --no-report.

    Returns 0, or 2 with the message on stderr when an input is bad (the message names the file, and
    the line of a malformed log).
    """
    import transient
    from transient.__main__ import print_summary, run_analysis
    from transient.analyze import _tables
    from transient.cli_args import print_json_lines

    for p in args.paths:
        if not Path(p).exists():
            raise CcplabError(f"{p} does not exist")
    try:
        results, errors = run_analysis(args)
        write = not args.no_report and len(args.paths) == 1 and Path(args.paths[0]).is_dir()
        if write:
            runs, steps = _tables(results)
            report = transient.write_report(args.paths[0], runs, steps, {r.run_id: r.series for r in results},
                                            errors=errors, source=str(args.paths[0]))
    except (transient.TransientError, ValueError, OSError, argparse.ArgumentTypeError) as exc:
        print(f"ccplab: error: {exc}", file=sys.stderr)
        return 2
    for path, err in errors:
        print(f"skipped {path}: {err}", file=sys.stderr)
    if args.json:
        print_json_lines(results)
    else:
        print_summary(results)
    if write:
        print(f"report: {report}", file=sys.stderr)
    return 0
