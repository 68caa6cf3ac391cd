"""``ccplab fidelity``: each standard algorithm as ``kernel:X`` and as ``ccp:X`` through
the same links, and how far the CCP version is from the kernel's.

Scenarios (one-way delay 25 ms each way unless said):

=================  =========================================================
fixed12-q1bdp      12 Mbit/s fixed, droptail 1 BDP (50 packets)
fixed12-q4bdp      12 Mbit/s fixed, droptail 4 BDP (200 packets)
step0-12           TPCCA step 0 -> 12 Mbit/s at 0 s, sigma 2 Mbit/s, 100 packets
step0-48           TPCCA step 0 -> 48 Mbit/s at 0 s, sigma 2 Mbit/s, 100 packets
down24-6           24 -> 6 Mbit/s at 10 s (at half the run when shorter), 100 packets
verizon-lte        traces/cellular/Verizon-LTE-short.down, 1000 packets
=================  =========================================================

Per (scenario, algorithm X) and metric the table holds the medians of the
kernel's and the CCP flow's runs, and the ratio ccp/kernel as the median of
every pairwise ratio ccp_run_i / kernel_run_j with its 25th and 75th
percentiles (the spread). Metrics (from ``transient``'s runs.csv / steps.csv):
throughput (Mbit/s), p95 queueing delay (ms), retransmits (iperf3),
Normalized Area and convergence time (s) (means over a run's steps).

Targets: throughput ratio within 5 %, p95 queueing delay within
15 %, retransmits at most 1.5x, Normalized Area within the kernel's own
run-to-run spread (|median_ccp - median_kernel| <= max - min of the kernel's
runs); convergence time has none (reported only).

Outputs in ``--out``: one comparison directory per scenario (runs, report),
``fidelity.csv`` (columns below) and ``fidelity.html``.

A long suite can run in pieces: ``--sides kernel`` or ``--sides ccp`` runs one side
only, one ``--scenarios`` chunk per invocation (so others can take the host lock
between chunks), and ``ccplab fidelity --from DIR... --out OUT`` renders the table
from those results directories without running anything (:func:`merge_results`).
"""

from __future__ import annotations

import html
import itertools
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ccplab_util.atomic import write_atomic

from .binaries import REPO_ROOT
from .cca import parse_cca
from .errors import CcplabError
from .scenario import Step

ALGORITHMS = ("reno", "cubic", "bbr")
SIDES = ("kernel", "ccp")
ONE_WAY_DELAY_MS = 25
RTT_S = 2 * ONE_WAY_DELAY_MS / 1000
PACKET_BYTES = 1500
CSV_COLUMNS = ["scenario", "algorithm", "metric", "kernel_median", "ccp_median", "ratio_median",
               "ratio_p25", "ratio_p75", "kernel_runs", "ccp_runs", "target", "meets_target"]


def bdp_packets(mbps: float) -> int:
    """Bandwidth-delay product at ``mbps`` and the 50 ms RTT, in 1500-byte packets."""
    return round(mbps * 1e6 * RTT_S / 8 / PACKET_BYTES)


@dataclass(frozen=True)
class FidelityScenario:
    """One link of the fidelity suite: steps (generated trace) or a trace file."""

    name: str
    queue_packets: int
    steps: tuple[Step, ...] = ()
    sigma_mbps: float = 0.0
    trace: Path | None = None

    def steps_for(self, duration_s: int) -> tuple[Step, ...]:
        """The steps, a late step moved to half the run when the run is shorter."""
        return tuple(s if s.at_s < duration_s else Step(duration_s / 2, s.from_mbps, s.to_mbps)
                     for s in self.steps)


SCENARIOS = {s.name: s for s in (
    FidelityScenario("fixed12-q1bdp", bdp_packets(12), (Step(0, 0, 12),)),
    FidelityScenario("fixed12-q4bdp", 4 * bdp_packets(12), (Step(0, 0, 12),)),
    FidelityScenario("step0-12", 100, (Step(0, 0, 12),), sigma_mbps=2.0),
    FidelityScenario("step0-48", 100, (Step(0, 0, 48),), sigma_mbps=2.0),
    FidelityScenario("down24-6", 100, (Step(0, 0, 24), Step(10, 24, 6))),
    FidelityScenario("verizon-lte", 1000, trace=REPO_ROOT / "traces" / "cellular" / "Verizon-LTE-short.down"),
)}

# Slack of every bound below. The bounds are inclusive, and ratios of whole milliseconds or
# packets land on them exactly (p95 17 ms / 20 ms = 0.85), where binary floating point does
# not: abs(0.85 - 1) is 0.15000000000000002 > 0.15, which rejected a ratio the target admits.
BOUND_SLACK = 1e-9


def _at_most(value: float, bound: float) -> bool:
    """``value <= bound``, inclusive up to :data:`BOUND_SLACK`."""
    return value <= bound + BOUND_SLACK


def _within(ratio: float, tolerance: float) -> bool:
    """``ratio`` in [1 - tolerance, 1 + tolerance], bounds included."""
    return _at_most(abs(ratio - 1), tolerance)


# metric -> (table, column, target check(ratio_median, kernel values, ccp values) or None, target text)
METRICS = {
    "throughput_mbps": ("runs", "throughput_mbps", lambda r, k, c: _within(r, 0.05), "ratio in [0.95, 1.05]"),
    "p95_queueing_delay_ms": ("runs", "p95_queueing_delay_ms", lambda r, k, c: _within(r, 0.15),
                              "ratio in [0.85, 1.15]"),
    "retransmits": ("runs", "retransmits", lambda r, k, c: _at_most(r, 1.5), "ratio <= 1.5"),
    "normalized_area": ("steps", "normalized_area",
                        lambda r, k, c: _at_most(abs(statistics.median(c) - statistics.median(k)), max(k) - min(k)),
                        "|median ccp - median kernel| <= kernel's max - min"),
    "convergence_s": ("steps", "convergence_s", None, ""),
}


def parse_scenarios(text: str | None) -> list[FidelityScenario]:
    """``a,b`` -> those scenarios (all when None); CcplabError names an unknown one and the known ones."""
    if not text:
        return list(SCENARIOS.values())
    out = []
    for name in (n.strip() for n in text.split(",") if n.strip()):
        if name not in SCENARIOS:
            raise CcplabError(f"--scenarios: unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
        out.append(SCENARIOS[name])
    return out


def parse_algorithms(text: str | None) -> list[str]:
    """``reno,cubic`` -> those (default reno, cubic, bbr); each must exist as kernel:X and ccp:X."""
    names = [n.strip() for n in (text or ",".join(ALGORITHMS)).split(",") if n.strip()]
    for n in names:
        parse_cca(f"kernel:{n}")
        parse_cca(f"ccp:{n}")
    return names


def _finite(values) -> list[float]:
    out = []
    for v in values:
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    if s[lo] == s[hi]:  # also +inf (kernel 0, ccp > 0): inf - inf would be NaN
        return s[lo]
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def ratio_stats(kernel: Sequence[float], ccp: Sequence[float]) -> dict:
    """Medians of both sides and the pairwise ratios ccp_i / kernel_j: median, p25, p75.

    NaN where a side has no finite value; a kernel value of 0 with a ccp value of 0
    counts as ratio 1 (both retransmitted nothing), with a ccp value > 0 as +inf.
    """
    k, c = _finite(kernel), _finite(ccp)
    row = {"kernel_median": statistics.median(k) if k else math.nan,
           "ccp_median": statistics.median(c) if c else math.nan,
           "kernel_runs": len(k), "ccp_runs": len(c)}
    ratios = []
    for a, b in itertools.product(c, k):
        ratios.append(a / b if b else (1.0 if a == 0 else math.inf))
    if ratios:
        row.update(ratio_median=_quantile(ratios, 0.5), ratio_p25=_quantile(ratios, 0.25),
                   ratio_p75=_quantile(ratios, 0.75))
    else:
        row.update(ratio_median=math.nan, ratio_p25=math.nan, ratio_p75=math.nan)
    return row


def _per_run(frame, column: str, cca: str) -> list[float]:
    """One value per run of ``cca``: the column itself (runs) or its mean over the run's steps."""
    sub = frame[frame["cca"] == cca]
    if sub.empty or column not in sub:
        return []
    return _finite(sub.groupby("run")[column].mean(numeric_only=False).tolist())


def fidelity_rows(scenario: str, algorithms: Sequence[str], runs, steps) -> list[dict]:
    """The table rows of one scenario from its analysed ``runs`` and ``steps`` frames."""
    rows = []
    for alg in algorithms:
        for metric, (table, column, check, target) in METRICS.items():
            frame = runs if table == "runs" else steps
            k = _per_run(frame, column, f"kernel:{alg}")
            c = _per_run(frame, column, f"ccp:{alg}")
            row = {"scenario": scenario, "algorithm": alg, "metric": metric, **ratio_stats(k, c), "target": target}
            ok = None
            if check is not None and k and c and not math.isnan(row["ratio_median"]):
                ok = bool(check(row["ratio_median"], k, c))
            row["meets_target"] = ok
            rows.append(row)
    return rows


def parse_sides(text: str | None) -> tuple[str, ...]:
    """``kernel``, ``ccp`` or ``kernel,ccp`` (default both) -> the sides to run; CcplabError otherwise."""
    names = tuple(n.strip() for n in (text or ",".join(SIDES)).split(",") if n.strip())
    bad = [n for n in names if n not in SIDES]
    if bad or not names:
        raise CcplabError(f"--sides: expected kernel, ccp or kernel,ccp, got {text!r}")
    return tuple(s for s in SIDES if s in names)


def run_fidelity(out: Path, scenarios: Sequence[FidelityScenario], algorithms: Sequence[str],
                 runs: int, duration_s: int, seed: int = 1, sides: Sequence[str] = SIDES) -> list[dict]:
    """Run every scenario (kernel:X and/or ccp:X, per ``sides``, for each algorithm, ``runs``
    each) into ``out/<scenario>/`` with the runner's comparison, analyse, and write
    fidelity.csv and fidelity.html in ``out`` (ratios are NaN for a side not run; merge
    one-sided directories with :func:`merge_results`). Returns the rows. Raises
    CcplabError (bad input, a failed run)."""
    from .compare import check_out_dir, compare, setup_comparison
    import pandas as pd

    out = check_out_dir(out)
    ccas = [parse_cca(f"{kind}:{alg}") for alg in algorithms for kind in SIDES if kind in sides]
    rows: list[dict] = []
    for sc in scenarios:
        steps = () if sc.trace is not None else sc.steps_for(duration_s)
        where, scenario = setup_comparison(ccas, runs, out / sc.name, ONE_WAY_DELAY_MS, sc.queue_packets,
                                           duration_s, trace=sc.trace, steps=steps,
                                           sigma_mbps=sc.sigma_mbps, seed=seed)
        compare(ccas, scenario, runs, where, analyze=True)
        run_frame = pd.read_csv(where / "runs.csv")
        step_frame = pd.read_csv(where / "steps.csv")
        rows += fidelity_rows(sc.name, algorithms, run_frame, step_frame)
        write_outputs(out, rows)  # after each scenario, so a long run shows progress
    return rows


def _scenario_tables(src: Path) -> dict[str, tuple[Path, Path]]:
    """The analysed scenarios of one fidelity results directory: name -> (runs.csv, steps.csv)."""
    found = {}
    for name in SCENARIOS:
        runs, steps = src / name / "runs.csv", src / name / "steps.csv"
        if runs.is_file() and steps.is_file():
            found[name] = (runs, steps)
    return found


def merge_results(sources: Sequence[Path], algorithms: Sequence[str]) -> list[dict]:
    """The fidelity rows of several ``ccplab fidelity --out`` directories taken together.

    Each source holds ``<scenario>/runs.csv`` and ``steps.csv`` (a chunk: some scenarios,
    one or both sides). Per scenario the tables of every source are concatenated; a
    source's run numbers are offset so runs of one CCA from two sources stay distinct.
    Rows come in the suite's scenario order. Raises CcplabError naming a source that is
    not a directory or holds no analysed scenario, or a scenario whose runs.csv lacks
    the ``cca``/``run`` columns.
    """
    import pandas as pd

    per_scenario: dict[str, list[tuple[object, object]]] = {}
    for i, src in enumerate(sources):
        if not Path(src).is_dir():
            raise CcplabError(f"--from: {src} is not a directory")
        tables = _scenario_tables(Path(src))
        if not tables:
            raise CcplabError(f"--from: {src} holds no analysed scenario (<scenario>/runs.csv and steps.csv; "
                              f"scenarios: {', '.join(SCENARIOS)})")
        for name, (runs_csv, steps_csv) in tables.items():
            frames = []
            for csv in (runs_csv, steps_csv):
                f = pd.read_csv(csv)
                if not {"cca", "run"} <= set(f.columns):
                    raise CcplabError(f"--from: {csv} lacks the cca/run columns")
                f["run"] = f["run"].astype(str) + f"@{i}"
                frames.append(f)
            per_scenario.setdefault(name, []).append(tuple(frames))
    rows: list[dict] = []
    for name in SCENARIOS:
        if name in per_scenario:
            parts = per_scenario[name]
            runs = pd.concat([p[0] for p in parts], ignore_index=True)
            steps = pd.concat([p[1] for p in parts], ignore_index=True)
            rows += fidelity_rows(name, algorithms, runs, steps)
    return rows


def write_outputs(out: Path, rows: list[dict]) -> tuple[Path, Path]:
    """fidelity.csv and fidelity.html in ``out`` (written atomically)."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=CSV_COLUMNS)
    csv_path, html_path = out / "fidelity.csv", out / "fidelity.html"
    write_atomic(csv_path, frame.to_csv(index=False))
    write_atomic(html_path, render_html(rows))
    return csv_path, html_path


def _fmt(v, digits=3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def format_table(rows: list[dict]) -> str:
    """A plain-text table: one line per (scenario, algorithm, metric)."""
    head = f"{'scenario':<15} {'alg':<6} {'metric':<22} {'kernel':>8} {'ccp':>8} {'ratio':>7} {'p25-p75':>13}  ok"
    lines = [head, "-" * len(head)]
    for r in rows:
        ok = {True: "yes", False: "NO", None: ""}[r["meets_target"]]
        spread = f"{_fmt(r['ratio_p25'])}-{_fmt(r['ratio_p75'])}"
        lines.append(f"{r['scenario']:<15} {r['algorithm']:<6} {r['metric']:<22} {_fmt(r['kernel_median']):>8} "
                     f"{_fmt(r['ccp_median']):>8} {_fmt(r['ratio_median']):>7} {spread:>13}  {ok}")
    return "\n".join(lines)


def render_html(rows: list[dict]) -> str:
    """A self-contained page with the table and the targets."""
    cells = []
    for r in rows:
        ok = r["meets_target"]
        colour = {True: "#d8f0d8", False: "#f6d2d2", None: "#ffffff"}[ok]
        cells.append("<tr style='background:%s'>" % colour + "".join(
            f"<td>{html.escape(_fmt(r[c]) if c != 'meets_target' else {True: 'yes', False: 'no', None: ''}[ok])}</td>"
            for c in CSV_COLUMNS) + "</tr>")
    return ("<!doctype html><meta charset='utf-8'><title>ccplab fidelity</title>"
            "<h1>CCP vs kernel: ratio ccp/kernel per scenario and metric</h1>"
            "<p>Ratio = median of the pairwise ratios ccp run / kernel run (p25-p75 = spread). "
            "Targets: throughput within 5 %, p95 queueing delay within 15 %, retransmits at most 1.5x, "
            "Normalized Area within the kernel's own run-to-run spread.</p>"
            "<table border=1 cellspacing=0 cellpadding=3><tr>" +
            "".join(f"<th>{c}</th>" for c in CSV_COLUMNS) + "</tr>" + "".join(cells) + "</table>\n")


def fidelity_command(args) -> int:
    """``ccplab fidelity``: run (or with ``--from``, merge earlier results), write
    fidelity.csv/.html in ``--out``, print the table."""
    algorithms = parse_algorithms(args.algorithms)
    sources = getattr(args, "from_dirs", None)
    if sources:
        from .compare import check_out_dir

        out = check_out_dir(args.out)
        rows = merge_results(sources, algorithms)
        out.mkdir(parents=True, exist_ok=True)
        write_outputs(out, rows)
        print(format_table(rows))
        print(f"fidelity.csv and fidelity.html in {out}", file=sys.stderr)
        return 0
    if args.runs < 1:
        raise CcplabError(f"--runs must be >= 1, got {args.runs}")
    if args.duration_s < 4:
        raise CcplabError(f"--duration-s must be >= 4, got {args.duration_s}")
    scenarios = parse_scenarios(args.scenarios)
    sides = parse_sides(getattr(args, "sides", None))
    rows = run_fidelity(args.out, scenarios, algorithms, args.runs, args.duration_s, sides=sides)
    print(format_table(rows))
    print(f"fidelity.csv and fidelity.html in {args.out.resolve()}", file=sys.stderr)
    return 0
