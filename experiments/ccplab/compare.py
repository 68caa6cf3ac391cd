"""Several CCAs x several runs of one scenario, then the transient analysis and report.

Layout of a comparison directory:
    scenario.json                   the shared scenario
    trace/<name>.trace(.meta.json)  the generated trace, when it was generated
    runs/<kind>-<name>/run-<k>/     one run directory each (see ccplab.run)
    runs.csv, steps.csv, report.html, plots/   written by the analysis
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Sequence

from .cca import Cca
from .errors import CcplabError
from .run import preflight, run_one
from .scenario import Scenario, write_json_atomic


def prepare_out_dir(out: Path) -> Path:
    """Create the comparison directory; refuse a non-empty one so nothing is overwritten."""
    out = out.resolve()
    if out.exists() and any(out.iterdir()):
        raise CcplabError(f"output directory {out} is not empty: choose another --out (nothing was overwritten)")
    out.mkdir(parents=True, exist_ok=True)
    return out


def compare(ccas: Sequence[Cca], scenario: Scenario, runs: int, out: Path, analyze: bool = True) -> Path:
    """Run every CCA ``runs`` times on ``scenario`` into ``out``; returns the report path (or ``out``).

    Progress goes to stderr, one line a run. The first failing run stops the
    comparison with a CcplabError; finished runs stay in place.
    """
    if runs < 1:
        raise CcplabError(f"--runs must be >= 1, got {runs}")
    for cca in ccas:
        preflight(cca)
    write_json_atomic(out / "scenario.json", {"scenario": scenario.to_json(), "ccas": [str(c) for c in ccas],
                                              "runs": runs})
    total = len(ccas) * runs
    done = 0
    for cca in ccas:
        for k in range(1, runs + 1):
            done += 1
            started = time.monotonic()
            _progress(f"[{done}/{total}] {cca} run {k}/{runs} ({scenario.duration_s} s flow) ...")
            result = run_one(cca, scenario, out / "runs" / cca.slug / f"run-{k}", run_index=k)
            _progress(f"[{done}/{total}] {cca} run {k}/{runs}: {result.iperf3_mbps:.2f} Mbit/s (iperf3), "
                      f"socket cc {result.socket_cc}, {time.monotonic() - started:.1f} s")
    if not analyze:
        return out
    from .analysis import analyze_and_report

    _progress("analysing ...")
    return analyze_and_report(out)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
