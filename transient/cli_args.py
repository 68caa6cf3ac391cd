"""Command-line options of the analysis, shared by ``python -m transient`` and ``ccplab analyze``.

One definition, so both commands take the same flags with the same help:
``--method``, ``--step`` (repeatable), ``--steps auto``, ``--rtt-ms``,
``--capacity-mbps``, ``--json``, ``--skip-bad``, ``--workers``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Callable, Sequence, TextIO

from typing import TYPE_CHECKING

from .methods import METHODS
from .steps import SYNTAX, Step

if TYPE_CHECKING:  # the analysis (pandas, numpy) is imported when a command runs, not to build its parser
    from .analyze import AnalysisOptions, RunResult


def whole(lo: int, hi: int) -> Callable[[str], int]:
    """An int type in [lo, hi]; the message says "must be a whole number" / ">= lo" / "<= hi", got TEXT."""
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {text}")
        if value > hi:
            raise argparse.ArgumentTypeError(f"must be <= {hi}, got {text}")
        return value
    return parse


def number(lo: float, hi: float, *, lo_open: bool = False) -> Callable[[str], float]:
    """A finite float type in [lo, hi] (or (lo, hi] with ``lo_open``); NaN and inf are refused."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if value < lo or (lo_open and value == lo):
            raise argparse.ArgumentTypeError(f"must be {'>' if lo_open else '>='} {lo:g}, got {text}")
        if value > hi:
            raise argparse.ArgumentTypeError(f"must be <= {hi:g}, got {text}")
        return value
    return parse


def _step(text: str) -> Step:
    try:
        return Step.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_analysis_arguments(p: argparse.ArgumentParser) -> None:
    """Add the analysis flags (and the positional PATH...) to ``p``."""
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="mm-link log (ccplab-link's or stock mahimahi's), run directory (with metadata.json) "
                        "or results directory (searched for run directories)")
    p.add_argument("--method", choices=METHODS, default="ccplab",
                   help="ccplab (default): every step from the data flow's start, departures vs the offered "
                        "capacity, explicit null when not converged; tpcca: the TPCCA poster's reference "
                        "analysis exactly, faults included (one step 0 -> B at 0 s)")
    p.add_argument("--step", type=_step, action="append", default=None, metavar=SYNTAX,
                   help="a capacity step (s, Mbit/s, Mbit/s), e.g. 0:0:12 or 10:12:4; repeatable; "
                        "overrides the steps in metadata.json")
    p.add_argument("--steps", choices=["auto"], default=None,
                   help="auto: find the steps in the log's delivery-opportunity (#) rate (ruptures change points)")
    p.add_argument("--rtt-ms", type=number(0.0, 600_000.0, lo_open=True), default=None,
                   help="RTT in ms = bin width (default: 2 x one_way_delay_ms from metadata.json, else 50)")
    p.add_argument("--capacity-mbps", type=number(0.0, 100_000.0, lo_open=True), default=None,
                   help="nominal capacity of a bare log, Mbit/s: the step 0 -> it at 0 s "
                        "(TPCCA's B; needed by --method tpcca when no step is known)")
    p.add_argument("--fair-delta", type=number(0.0, 1.0, lo_open=True), default=None, metavar="DELTA",
                   help="delta of RFC 5166's delta-fair convergence time of two flows, in (0, 1) (default 0.1)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object per run per line (JSON Lines): the run's fields and a 'steps' "
                        "list (NaN -> null)")
    p.add_argument("--skip-bad", action="store_true", help="skip runs that fail to analyse instead of stopping")
    p.add_argument("--workers", type=whole(1, 256), default=1,
                   help="processes analysing the runs of a results directory in parallel (default 1)")


def options_from_args(args: argparse.Namespace) -> "AnalysisOptions":
    """`AnalysisOptions` from parsed flags. Raises AnalysisError on a bad combination."""
    from .analyze import AnalysisOptions

    if args.step is not None and args.steps == "auto":
        raise argparse.ArgumentTypeError("give either --step or --steps auto, not both")
    delta = getattr(args, "fair_delta", None)
    return AnalysisOptions(method=args.method, rtt_ms=args.rtt_ms, capacity_mbps=args.capacity_mbps,
                           steps=tuple(args.step) if args.step else None, auto_steps=args.steps == "auto",
                           cache=not getattr(args, "no_report", False),
                           **({"fair_delta": delta} if delta is not None else {}))


def print_json_lines(results: Sequence["RunResult"], out: TextIO | None = None) -> None:
    """One JSON object per run per line (`RunResult.as_json`) on ``out`` (default: the current stdout)."""
    out = out or sys.stdout
    for r in results:
        out.write(json.dumps(r.as_json(), allow_nan=False) + "\n")
