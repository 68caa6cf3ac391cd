"""The bridge from runs to the ``transient`` analysis package (the runner adds nothing to it)."""

from __future__ import annotations

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


def analyze_path(path: Path, as_json: bool, rtt_ms: float | None, write: bool) -> int:
    """``ccplab analyze``: the transient CLI on ``path``; a directory gets its report written in place."""
    from transient.__main__ import main as transient_main

    if not path.exists():
        raise CcplabError(f"{path} does not exist")
    argv = [str(path)]
    if as_json:
        argv.append("--json")
    if rtt_ms is not None:
        argv += ["--rtt-ms", str(rtt_ms)]
    if write and path.is_dir():
        argv += ["--out", str(path)]
    return transient_main(argv)
