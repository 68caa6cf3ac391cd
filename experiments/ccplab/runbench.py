"""Per-run overhead benchmark: ``make bench`` runs ``python -m ccplab.runbench`` (under the host lock).

A run's overhead is what ``ccplab run`` costs beyond its flow: the wall time
of the whole command (interpreter start, imports, preflight, the link's,
algorithm's and datapath's start and readiness, iperf3's setup, the flow's
``--duration-s``, stopping every daemon, reading the link log for the flow's
times, metadata) minus the flow's duration.  For each CCA (default
kernel:cubic and ccp:cubic) it runs ``--runs`` runs of a ``--duration-s``
flow through a constant 12 Mbit/s link (10 ms each way, 100-packet queue),
alternating the CCAs run by run so a shared machine's drift hits both
alike, and prints the median overhead with its spread (min, max,
interquartile range) in seconds.

Anything that runs flows must hold the host lock:
``flock /tmp/ccplab-netlab.lock python -m ccplab.runbench``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .cca import parse_cca
from .errors import CcplabError

DEFAULT_CCAS = ("kernel:cubic", "ccp:cubic")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def one_run(cca: str, trace: Path, duration_s: int, out: Path) -> float:
    """Wall time (s) of one ``ccplab run`` of ``cca`` (a fresh interpreter, as a user runs it).

    Raises CcplabError with the command's stderr when the run fails.
    """
    argv = [sys.executable, "-m", "ccplab.cli", "run", "--cca", cca, "--trace", str(trace),
            "--one-way-delay-ms", "10", "--queue-packets", "100", "--duration-s", str(duration_s),
            "--out", str(out)]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise CcplabError(f"ccplab run --cca {cca} failed (status {done.returncode}):\n{done.stderr.strip()}")
    return wall


def summary(overheads: list[float]) -> str:
    """``median M s (min A, max B, IQR C; N runs)`` of overheads in seconds."""
    q = statistics.quantiles(overheads, n=4) if len(overheads) > 1 else [overheads[0]] * 3
    return (f"median {statistics.median(overheads):.2f} s (min {min(overheads):.2f}, max {max(overheads):.2f}, "
            f"IQR {q[2] - q[0]:.2f}; {len(overheads)} runs)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccplab.runbench", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=_positive_int, default=5, help="runs per CCA (default %(default)s)")
    p.add_argument("--duration-s", type=_positive_int, default=5, help="flow duration, s (default %(default)s)")
    p.add_argument("--cca", action="append", default=None,
                   help=f"a CCA (repeat; default {' and '.join(DEFAULT_CCAS)})")
    args = p.parse_args(argv)
    ccas = args.cca or list(DEFAULT_CCAS)
    try:
        for c in ccas:
            parse_cca(c)
        from .scenario import generate_step_trace
        from transient.steps import Step

        tmp = Path(tempfile.mkdtemp(prefix="ccplab-runbench-"))
        try:
            trace = generate_step_trace(tmp / "const-12.trace", [Step(0.0, 0.0, 12.0)], args.duration_s, 0.0, 0)
            overhead: dict[str, list[float]] = {c: [] for c in ccas}
            for k in range(args.runs):
                for c in ccas if k % 2 == 0 else reversed(ccas):
                    wall = one_run(c, trace, args.duration_s, tmp / f"run-{c.replace(':', '-')}-{k}")
                    overhead[c].append(wall - args.duration_s)
                    print(f"  {c:<14} run {k + 1}: {wall:.2f} s wall, {wall - args.duration_s:.2f} s overhead",
                          flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except CcplabError as exc:
        print(f"runbench: error: {exc}", file=sys.stderr)
        return 2
    print(f"per-run overhead beyond a {args.duration_s} s flow (ccplab run, wall time - duration; target < 1 s):")
    for c in ccas:
        print(f"  {c:<14} {summary(overhead[c])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
