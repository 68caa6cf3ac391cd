"""``ccplab contest``: the cellular congestion-control contest on real TCP flows.

The contest setup (docs/algorithms.md, after the MIT 6.829 contest on
mahimahi/Sprout): the data direction replays a cellular trace (default
``traces/cellular/Verizon-LTE-short.down``), the ACKs its ``.up`` twin, 20 ms
one-way delay each way, an unbounded queue, the trace played once
(``ccplab-link --once``, as ``mm-link --once``: nothing is delivered after the
trace's end, where the link stops the flow), and a receiver that acknowledges
every segment at once, as the contest's receiver acknowledged every datagram
(``--delayed-acks``: Linux's delayed ACKs instead). The flow lasts the trace's
length unless ``--duration-s`` says less; the link starts the trace at the
flow's first packet.

Every CCA gets the same link and is scored over the same window: from its
data flow's first packet (``flow_start_s``) to the trace's end, or to
``--duration-s`` after the flow's start when that comes first
(`score_window_ms`), whatever its end-of-test exchange adds to the log. Per
CCA the leaderboard shows what mahimahi's ``mm-throughput-graph`` prints
(average capacity, average throughput with utilization, p95 per-packet
queueing delay, p95 signal delay; ``transient.window_link_metrics`` computes
them the same way over the window) and the power score = throughput (Mbit/s)
/ p95 signal delay (s), sorted by score.

Resuming: run the same command again with the same ``--out``: runs already in
``runs/`` are kept and only the missing ones run (``--max-new-runs N`` stops
after N new runs, so a long leaderboard can run in pieces); ``--cca`` given
again adds CCAs to the ones recorded, and without ``--cca`` the recorded ones
are used. The link setup (trace, duration, delay, receiver) must be the same.

"Unbounded" queue: a droptail limit of `UNBOUNDED_QUEUE_PACKETS` packets,
which no flow reaches here (a TCP sender's socket buffer keeps far fewer
packets in flight), so nothing is dropped for lack of room, as in the contest.

Output directory:
    contest.json          the setup (trace, CCAs, runs, sweep, receiver, scoring window)
    runs.csv              one row per run: cca, run, (sweep) value, the metrics below, the scoring
                          window (window_start_s, window_end_s on the log clock) and the
                          receiver's segments per ACK
    leaderboard.csv       one row per CCA: median of each metric, min and max of the score
    plots/plane.{png,pdf}             throughput vs p95 signal delay, every CCA
    plots/throughput-<cca>.{png,pdf}  throughput over time against the capacity (run 1)
    plots/sweep.{png,pdf}             with --sweep: throughput vs p95 signal delay per value
    runs/<cca>/run-<k>/   run directories (see ccplab.run)

Metric columns (units in the names): capacity_mbps, throughput_mbps, utilization,
p95_queueing_delay_ms, p95_signal_delay_ms, power_score.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Sequence

from ccplab_util.atomic import write_atomic

from . import registry
from .binaries import REPO_ROOT
from .cca import Cca, parse_cca
from .compare import check_out_dir
from .errors import CcplabError
from .control import ValidityPolicy
from .scenario import DATAPATH_SETTINGS, Scenario, check_trace

DATAPATH = {s.field: s for s in DATAPATH_SETTINGS}
CELLULAR_DIR = REPO_ROOT / "traces" / "cellular"
DEFAULT_TRACE = "Verizon-LTE-short"
CONTEST_ONE_WAY_DELAY_MS = 20
UNBOUNDED_QUEUE_PACKETS = 1_000_000
DEFAULT_KERNEL_CCAS = ("kernel:cubic", "kernel:bbr")
METRICS = ("capacity_mbps", "throughput_mbps", "utilization", "p95_queueing_delay_ms", "p95_signal_delay_ms",
           "power_score")
RUN_COLUMNS = ("cca", "run", "value", *METRICS, "duration_s", "window_start_s", "window_end_s", "segments_per_ack",
               "run_dir")
BEST_SETTING_SWEEPS = {
    "fixed-window": "window=5..90:5",
    "aimd": "timeout-ms=50..150:10",
    "delay-threshold": "theta-ms=50..150:10",
    "rocinante": "rtt-allowance=1.1..2:0.1",
    "sprout-ewma": "target-delay-ms=20..140:20",
    "pid": "target-ms=50..200:25",
    "interval-prediction": "k-ms=35..155:15",
    "mixture": "ip-weight=0..0.6:0.1",
    "spoderman": "quantile=0.05..0.5:0.05",
    "exp3cc": "w-max=20..100:10",
}
"""``--best NAME``: the one parameter of each contest algorithm swept for its best setting (the one its
rule is most sensitive to: a window, a delay threshold or target, a weight), as ``--sweep NAME:SPEC``."""
LINK_KEYS = ("trace", "trace_end_ms", "duration_s", "one_way_delay_ms", "queue_packets", "quickack", "trace_once",
             "report_wake_ms", "report_prompt_us")
"""What a resumed contest must share with the runs already in its directory (the trace by name and
length, not by path: a checkout elsewhere resumes it; the datapath's settings, absent = its defaults)."""


# ---------------------------------------------------------------- inputs

def resolve_trace(text: str) -> tuple[Path, Path]:
    """The (data, ACK) traces of ``--trace``: a NAME of traces/cellular (``TMobile-LTE-short`` ->
    NAME.down and NAME.up) or a PATH to a ``.down`` file whose ``.up`` twin lies beside it.

    CcplabError names the missing file and, for a name, the names available.
    """
    path = Path(text)
    if path.suffix == ".down" or path.is_file():
        down = path.resolve()
        if not down.is_file():
            raise CcplabError(f"--trace {text}: no such file")
        if down.suffix != ".down":
            raise CcplabError(f"--trace {text}: a trace path must end in .down (its ACK twin is the .up file)")
        up = down.with_suffix(".up")
    else:
        down, up = CELLULAR_DIR / f"{text}.down", CELLULAR_DIR / f"{text}.up"
        if not down.is_file():
            raise CcplabError(f"--trace {text}: no cellular trace of that name; available: "
                              f"{', '.join(available_traces())} (or give a path to a .down file)")
    if not up.is_file():
        raise CcplabError(f"--trace {text}: the ACK-direction trace {up} is missing (the contest needs both)")
    return down, up


def available_traces() -> list[str]:
    """Names of the cellular traces with both directions in traces/cellular."""
    return sorted(p.stem for p in CELLULAR_DIR.glob("*.down") if p.with_suffix(".up").is_file())


def trace_length_s(trace: Path) -> int:
    """Length of one play of a mahimahi trace, whole seconds (its last timestamp, ms, rounded up)."""
    return max(1, math.ceil(trace_end_ms(trace) / 1000))


def trace_end_ms(trace: Path) -> int:
    """The last timestamp of a mahimahi trace, ms: where one play of it ends (CcplabError if unreadable)."""
    last = None
    with trace.open("rb") as f:
        for line in f:
            if line.strip():
                last = line
    try:
        ms = int(last) if last is not None else 0
    except ValueError:
        raise CcplabError(f"trace {trace}: last line {last!r} is not a millisecond timestamp") from None
    if ms <= 0:
        raise CcplabError(f"trace {trace}: empty or zero-length trace")
    return ms


def score_window_ms(flow_start_s: float, duration_s: float, end_ms: int) -> tuple[int, int]:
    """The stretch of a run's log its score covers, ms on the log clock (trace time 0 = log time 0):
    from the data flow's first packet (``flow_start_s``, s) to ``duration_s`` later or the trace's end
    (``end_ms``, where the link playing it once stops), whichever comes first. The same for every CCA,
    however long its log runs on.

    Raises CcplabError when the flow started at or after the trace's end.
    """
    start = int(round(flow_start_s * 1000))
    end = min(start + int(round(duration_s * 1000)), end_ms)
    if end <= start:
        raise CcplabError(f"the flow started at {flow_start_s:.3f} s, not before the trace's end ({end_ms} ms)")
    return start, end


@dataclass(frozen=True)
class Sweep:
    """A one-parameter sweep: CCA ``base`` (``ccp:NAME[:fixed=value...]``), parameter ``param``, ``values``."""

    base: str
    param: str
    values: tuple[str, ...]

    def cca_texts(self) -> list[str]:
        """The CCA of each value, e.g. ``ccp:fixed-window:window=5``."""
        return [f"{self.base}:{self.param}={v}" for v in self.values]




def _number(text: str, spec: str) -> Decimal:
    try:
        d = Decimal(text)
    except InvalidOperation:
        raise CcplabError(f"--sweep {spec!r}: {text!r} is not a number") from None
    if not d.is_finite():
        raise CcplabError(f"--sweep {spec!r}: {text!r} is not a finite number")
    return d


def _fmt(d: Decimal) -> str:
    """A value as the algorithm's flag takes it: 5, 0.25 (no exponent, no trailing zeros)."""
    s = format(d.normalize(), "f")
    return s


def parse_sweep(spec: str) -> Sweep:
    """Parse ``[ccp:]NAME[:flag=value...]:PARAM=START..STOP[:STEP]`` (STOP included, STEP default 1)
    or ``[ccp:]NAME[:flag=value...]:PARAM=V1,V2,...``.

    Examples: ``fixed-window:window=5..90:5`` (18 values), ``aimd:beta=1.5,2,4``,
    ``delay-threshold:mode=aimd:theta-ms=60..120:20``. Values are exact decimals
    (``0.1..0.5:0.1`` gives 0.1 0.2 0.3 0.4 0.5). Only the syntax is checked here;
    the algorithm and its parameters are checked by ``parse_cca`` (see `sweep_ccas`).

    Raises CcplabError naming what is wrong.
    """
    fields = spec.split(":")
    if fields and fields[0] == "ccp":
        fields = fields[1:]
    if fields and fields[0] == "kernel":
        raise CcplabError(f"--sweep {spec!r}: only ccp:NAME algorithms have parameters to sweep")
    if len(fields) < 2 or not fields[0]:
        raise CcplabError(f"--sweep {spec!r}: expected NAME:PARAM=START..STOP[:STEP] or NAME:PARAM=V1,V2,..."
                          " e.g. fixed-window:window=5..90:5")
    swept = [i for i, f in enumerate(fields) if "=" in f and (".." in f or "," in f)]
    if len(swept) != 1:
        raise CcplabError(f"--sweep {spec!r}: exactly one parameter must have a range A..B or a list A,B,...")
    i = swept[0]
    field = fields[i]
    step_text = None
    rest = fields[i + 1:]
    if rest and "=" not in rest[0]:
        step_text, rest = rest[0], rest[1:]
    if rest:
        raise CcplabError(f"--sweep {spec!r}: put fixed parameters before the swept one ({rest[0]!r} follows it)")
    name, _, value = field.partition("=")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name):
        raise CcplabError(f"--sweep {spec!r}: bad parameter name {name!r}")
    if ".." in value:
        if "," in value:
            raise CcplabError(f"--sweep {spec!r}: give a range or a list, not both")
        lo_text, _, hi_text = value.partition("..")
        lo, hi = _number(lo_text, spec), _number(hi_text, spec)
        step = _number(step_text, spec) if step_text is not None else Decimal(1)
        if step <= 0:
            raise CcplabError(f"--sweep {spec!r}: the step must be > 0, got {step_text}")
        if hi < lo:
            raise CcplabError(f"--sweep {spec!r}: the range {lo_text}..{hi_text} is empty (STOP < START)")
        count = int((hi - lo) / step) + 1
        if count > 1000:
            raise CcplabError(f"--sweep {spec!r}: {count} values; at most 1000")
        values = tuple(_fmt(lo + k * step) for k in range(count))
    else:
        if step_text is not None:
            raise CcplabError(f"--sweep {spec!r}: a step ({step_text}) only goes with a range A..B")
        items = value.split(",")
        if any(not v for v in items):
            raise CcplabError(f"--sweep {spec!r}: empty value in the list {value!r}")
        values = tuple(items)
    if len(set(values)) != len(values):
        raise CcplabError(f"--sweep {spec!r}: a value repeats")
    base = ":".join(["ccp", *fields[:i]])
    return Sweep(base, name.replace("_", "-"), values)


def best_sweep(name: str) -> str:
    """The ``--sweep`` spec of ``--best NAME`` (`BEST_SETTING_SWEEPS`); CcplabError lists the names."""
    name = name.removeprefix("ccp:")
    if name not in BEST_SETTING_SWEEPS:
        raise CcplabError(f"--best {name}: no declared sweep; one of {', '.join(BEST_SETTING_SWEEPS)} "
                          "(or --sweep NAME:PARAM=... for any algorithm's parameter)")
    return f"{name}:{BEST_SETTING_SWEEPS[name]}"


def sweep_ccas(sweep: Sweep) -> list[Cca]:
    """The CCAs of a sweep, each checked against the algorithm (CcplabError names a bad one)."""
    return [parse_cca(t) for t in sweep.cca_texts()]


def default_ccas() -> list[Cca]:
    """Every algorithm of the suite (ccp:NAME, default flags) plus kernel:cubic and kernel:bbr."""
    names = list(registry.load_registry())
    return [parse_cca(f"ccp:{n}") for n in names] + [parse_cca(t) for t in DEFAULT_KERNEL_CCAS]


# ---------------------------------------------------------------- running

@dataclass(frozen=True)
class ContestSetup:
    """Everything a contest needs, checked: the traces, the link, the CCAs, runs, sweep."""

    trace_name: str
    down: Path
    up: Path
    duration_s: int
    runs: int
    ccas: tuple[Cca, ...]
    one_way_delay_ms: int = CONTEST_ONE_WAY_DELAY_MS
    sweep: Sweep | None = None
    quickack: bool = True  # the receiver ACKs every segment, as the contest's did (False: Linux's delayed ACKs)
    report_wake_ms: int | None = None  # the datapath's settings (ccplab.scenario.Scenario); None: its defaults
    report_prompt_us: int | None = None

    @cached_property
    def end_ms(self) -> int:
        """Where the link, playing both traces once, stops: the end of the shorter one, ms."""
        return min(trace_end_ms(self.down), trace_end_ms(self.up))

    @property
    def receiver(self) -> str:
        """How the receiver acknowledges, in words (the leaderboard's header)."""
        return "ACK every segment" if self.quickack else "delayed ACKs"

    def scenario(self) -> Scenario:
        return Scenario(name=f"contest-{self.trace_name}", trace=self.down, one_way_delay_ms=self.one_way_delay_ms,
                        queue_packets=UNBOUNDED_QUEUE_PACKETS, duration_s=self.duration_s, downlink_trace=self.up,
                        quickack=self.quickack, trace_once=True, report_wake_ms=self.report_wake_ms,
                        report_prompt_us=self.report_prompt_us)

    def to_json(self) -> dict:
        return {"trace": self.trace_name, "down": str(self.down), "up": str(self.up),
                "duration_s": self.duration_s, "runs": self.runs, "one_way_delay_ms": self.one_way_delay_ms,
                "queue_packets": UNBOUNDED_QUEUE_PACKETS, "quickack": self.quickack, "trace_once": True,
                "receiver": self.receiver, "trace_end_ms": self.end_ms,
                "report_wake_ms": self.report_wake_ms, "report_prompt_us": self.report_prompt_us,
                "scoring_window": "flow start to min(flow start + duration_s, trace_end_ms)",
                "ccas": [str(c) for c in self.ccas],
                "sweep": None if self.sweep is None else {"base": self.sweep.base, "param": self.sweep.param,
                                                          "values": list(self.sweep.values)}}


def make_setup(trace: str = DEFAULT_TRACE, ccas: Sequence[str] = (), runs: int = 1, duration_s: int | None = None,
               sweep: str | None = None, one_way_delay_ms: int = CONTEST_ONE_WAY_DELAY_MS,
               quickack: bool = True, report_wake_ms: int | None = None,
               report_prompt_us: int | None = None) -> ContestSetup:
    """Check the contest's input (CcplabError names the bad one); creates nothing.

    ``ccas``: CCA texts (default: `default_ccas`); ``sweep``: a `parse_sweep` spec (then no ``ccas``);
    ``duration_s``: default the trace's length; it may not exceed it (the trace is played once);
    ``quickack``: the receiver ACKs every segment (False: Linux's delayed ACKs); ``report_wake_ms``,
    ``report_prompt_us``: the datapath's settings, None for its defaults (``ccplab.scenario.Scenario``).
    """
    if runs < 1:
        raise CcplabError(f"--runs must be >= 1, got {runs}")
    if one_way_delay_ms < 0:
        raise CcplabError(f"--one-way-delay-ms must be >= 0, got {one_way_delay_ms}")
    DATAPATH["report_wake_ms"].check(report_wake_ms)
    DATAPATH["report_prompt_us"].check(report_prompt_us)
    down, up = resolve_trace(trace)
    length = trace_length_s(down)
    if duration_s is None:
        duration_s = length
    if duration_s < 1 or duration_s > length:
        raise CcplabError(f"--duration-s must be in [1, {length}] (the trace {down.name} lasts {length} s and "
                          f"is played once), got {duration_s}")
    parsed_sweep = None
    if sweep is not None:
        if ccas:
            raise CcplabError("give either --sweep or --cca, not both")
        parsed_sweep = parse_sweep(sweep)
        cca_list = sweep_ccas(parsed_sweep)
    elif ccas:
        cca_list = [parse_cca(t) for t in ccas]
    else:
        cca_list = default_ccas()
    slugs = [c.slug for c in cca_list]
    if len(set(slugs)) != len(slugs):
        raise CcplabError(f"a CCA is listed twice: {', '.join(sorted(s for s in slugs if slugs.count(s) > 1))}")
    name = down.name[:-len(".down")] if down.name.endswith(".down") else down.stem
    return ContestSetup(name, down, up, duration_s, runs, tuple(cca_list), one_way_delay_ms, parsed_sweep, quickack,
                        report_wake_ms, report_prompt_us)


def run_metrics(run_dir: Path, setup: ContestSetup) -> dict[str, float]:
    """The mm-throughput-graph figures of one run directory's uplink log over the contest's scoring
    window (`score_window_ms`; ``transient.window_link_metrics``), the window (``window_start_s``,
    ``window_end_s``) and the receiver's data segments per ACK (NaN when not recorded)."""
    import transient

    try:
        meta = json.loads((run_dir / "metadata.json").read_text())
        start, end = score_window_ms(float(meta["flow_start_s"]), setup.duration_s, setup.end_ms)
        log = transient.read_link_log(run_dir / "uplink.log")
        m = transient.window_link_metrics(log.events, start, end).as_dict()
    except (transient.TransientError, ValueError, OSError, KeyError, TypeError) as exc:
        raise CcplabError(f"{run_dir}: cannot score the run: {exc}") from exc
    per_ack = (meta.get("receiver") or {}).get("segments_per_ack")
    return {**m, "window_start_s": start / 1000, "window_end_s": end / 1000,
            "segments_per_ack": float("nan") if per_ack is None else float(per_ack)}


def resume_setup(setup: ContestSetup, out: Path, ccas_given: bool) -> ContestSetup:
    """The setup to run into ``out``: ``setup`` itself for a new or empty directory; for a contest
    directory (with contest.json) its recorded CCAs, plus ``setup``'s when ``ccas_given`` (the union,
    recorded first), and the larger run count. CcplabError when ``out`` is neither, or its link setup
    (`LINK_KEYS`) differs from ``setup``'s."""
    out = out.resolve()
    recorded_file = out / "contest.json"
    if not recorded_file.is_file():
        check_out_dir(out)
        return setup
    try:
        recorded = json.loads(recorded_file.read_text())
    except (OSError, ValueError) as exc:
        raise CcplabError(f"{recorded_file}: unreadable ({exc})") from exc
    mine = setup.to_json()
    differ = [k for k in LINK_KEYS if recorded.get(k) != mine[k]]
    if differ:
        what = "; ".join(f"{k} {recorded.get(k)!r} there, {mine[k]!r} here" for k in differ)
        raise CcplabError(f"{out} holds a contest with another setup ({what}): choose another --out")
    old = [parse_cca(t) for t in recorded.get("ccas", [])]
    if recorded.get("sweep") != mine["sweep"] and (ccas_given or setup.sweep is not None):
        raise CcplabError(f"{out} holds a contest of another --sweep/--cca set: choose another --out")
    sweep = setup.sweep
    if recorded.get("sweep") is not None:
        rs = recorded["sweep"]
        sweep = Sweep(rs["base"], rs["param"], tuple(rs["values"]))
    names = {str(c) for c in old}
    ccas = old + [c for c in setup.ccas if str(c) not in names] if ccas_given or setup.sweep else old
    return ContestSetup(setup.trace_name, setup.down, setup.up, setup.duration_s,
                        max(setup.runs, int(recorded.get("runs", 1))), tuple(ccas), setup.one_way_delay_ms, sweep,
                        setup.quickack, setup.report_wake_ms, setup.report_prompt_us)


def run_dir_of(out: Path, cca: Cca, k: int) -> Path:
    """Where run ``k`` (1-based) of ``cca`` goes: ``out/runs/<slug>/run-<k>`` (complete once it exists: a
    run directory appears only when its run succeeded)."""
    return out / "runs" / cca.slug / f"run-{k}"


def pending_runs(setup: ContestSetup, out: Path) -> list[tuple[Cca, int]]:
    """The (CCA, run index) pairs of ``setup`` whose run directory is not in ``out`` yet, in order."""
    return [(c, k) for c in setup.ccas for k in range(1, setup.runs + 1) if not run_dir_of(out, c, k).is_dir()]


def run_contest(setup: ContestSetup, out: Path, max_new_runs: int | None = None, runner=None,
                policy: ValidityPolicy = ValidityPolicy()) -> list[dict]:
    """Run every CCA ``setup.runs`` times into ``out`` (new, empty, or a contest directory to resume:
    runs already there are kept, see `resume_setup`); write the tables and plots of every run there.

    ``max_new_runs``: stop after that many new runs (the rest stay pending for the next call).
    ``runner(cca, scenario, run_dir, run_index)``: makes a run directory (default: one flow of ``cca``
    by ``ccplab.run.run_flows`` under ``policy``, what makes a ccp run valid, ``ccplab.control``).
    A run kept invalid (``policy.keep_invalid``) stays in ``out`` but out of the tables (`collect_rows`).
    Returns the per-run rows (`RUN_COLUMNS`) of the finished runs. Progress on stderr.
    Raises CcplabError (a run failed: finished runs stay in place, and a new call resumes).
    """
    if runner is None:
        from .flows import single_flow
        from .run import preflight, run_flows

        def runner(cca, scenario, run_dir, k):
            return run_flows(single_flow(cca), scenario, run_dir, k, policy=policy)
        for cca in setup.ccas:
            preflight(cca)
        for tr in (setup.down, setup.up):
            check_trace(tr)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "contest.json", json.dumps(setup.to_json(), indent=2) + "\n")
    scenario = setup.scenario()
    todo = pending_runs(setup, out)
    if max_new_runs is not None:
        todo = todo[:max_new_runs]
    total = len(setup.ccas) * setup.runs
    done = total - len(pending_runs(setup, out))
    if done:
        _progress(f"{done} of {total} runs already in {out}: kept")
    for cca, k in todo:
        done += 1
        started = time.monotonic()
        _progress(f"[{done}/{total}] {cca} run {k}/{setup.runs} ({setup.duration_s} s on {setup.trace_name}, "
                  f"{setup.receiver}) ...")
        runner(cca, scenario, run_dir_of(out, cca, k), k)
        m = run_metrics(run_dir_of(out, cca, k), setup)
        _progress(f"[{done}/{total}] {cca}: {m['throughput_mbps']:.2f} Mbit/s, p95 signal delay "
                  f"{m['p95_signal_delay_ms']:.0f} ms, score {m['power_score']:.2f} "
                  f"({time.monotonic() - started:.0f} s)")
    rows = collect_rows(setup, out)
    board = leaderboard(rows)
    _write_csv(out / "runs.csv", rows, list(RUN_COLUMNS))
    _write_csv(out / "leaderboard.csv", board, list(board[0].keys()) if board else ["cca"])
    if rows:
        from . import contest_plots

        contest_plots.write_plots(out, rows, board, setup)
    return rows


def collect_rows(setup: ContestSetup, out: Path) -> list[dict]:
    """One row per finished run of ``setup`` in ``out`` (`RUN_COLUMNS`), in the setup's order. A run the
    runner marked invalid (kept by ``--keep-invalid``) is left out, named on stderr with the reason."""
    from transient.analyze import invalid_reason

    values = setup.sweep.values if setup.sweep else [None] * len(setup.ccas)
    rows = []
    for cca, value in zip(setup.ccas, values):
        for k in range(1, setup.runs + 1):
            d = run_dir_of(out, cca, k)
            reason = invalid_reason(d) if d.is_dir() else None
            if reason is not None:
                _progress(f"{cca} run {k} is marked invalid, left out of the tables: {reason}")
            elif d.is_dir():
                rows.append({"cca": str(cca), "run": k, "value": value, **run_metrics(d, setup), "run_dir": str(d)})
    return rows


def leaderboard(rows: Sequence[dict]) -> list[dict]:
    """One row per CCA: the median of each metric over its runs (and of the receiver's segments per ACK),
    the score's min and max (the spread), the throughput's and p95 signal delay's min and max, and the run
    count, sorted by median score, best first (NaN scores last)."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["cca"], []).append(r)
    board = []
    for cca, rs in by.items():
        row: dict = {"cca": cca, "runs": len(rs), "value": rs[0].get("value")}
        for m in METRICS:
            vals = [float(r[m]) for r in rs if not math.isnan(float(r[m]))]
            row[m] = statistics.median(vals) if vals else float("nan")
        scores = [float(r["power_score"]) for r in rs if not math.isnan(float(r["power_score"]))]
        row["score_min"] = min(scores) if scores else float("nan")
        row["score_max"] = max(scores) if scores else float("nan")
        per_ack = [float(r["segments_per_ack"]) for r in rs if not math.isnan(float(r.get("segments_per_ack", "nan")))]
        row["segments_per_ack"] = statistics.median(per_ack) if per_ack else float("nan")
        for m, short in (("throughput_mbps", "throughput"), ("p95_signal_delay_ms", "p95_signal_delay")):
            vals = [float(r[m]) for r in rs if not math.isnan(float(r[m]))]
            row[f"{short}_min"] = min(vals) if vals else float("nan")
            row[f"{short}_max"] = max(vals) if vals else float("nan")
        board.append(row)
    board.sort(key=lambda r: (math.isnan(r["power_score"]), -r["power_score"] if not math.isnan(r["power_score"]) else 0))
    return board


def format_leaderboard(board: Sequence[dict], setup: ContestSetup) -> str:
    """The leaderboard as text, one line per CCA (medians; spread = min..max score when runs > 1)."""
    head = (f"contest on {setup.trace_name} ({setup.duration_s} s, {setup.one_way_delay_ms} ms each way, "
            f"unbounded queue, trace played once, receiver: {setup.receiver}; scored from each flow's start to "
            f"{'the trace end' if setup.duration_s * 1000 >= setup.end_ms else f'{setup.duration_s} s later'}), "
            f"{setup.runs} run(s) per CCA" + (", medians" if setup.runs > 1 else ""))
    w = max([40, *(len(r["cca"]) for r in board)])  # the CCA column fits the longest name
    cols = f"{'#':>2}  {'CCA':<{w}} {'capacity':>9} {'throughput (util)':>19} {'p95 qdelay':>11} " \
           f"{'p95 signal':>11} {'score':>7} {'seg/ACK':>8}" + ("  score min..max" if setup.runs > 1 else "")
    lines = [head, cols, f"{'':>2}  {'':<{w}} {'Mbit/s':>9} {'Mbit/s':>19} {'ms':>11} {'ms':>11} {'Mbit/s/s':>7} "
             f"{'':>8}"]
    for i, r in enumerate(board, 1):
        util = f"{r['throughput_mbps']:.2f} ({100 * r['utilization']:.0f}%)"
        line = (f"{i:>2}  {r['cca']:<{w}} {r['capacity_mbps']:>9.2f} {util:>19} {r['p95_queueing_delay_ms']:>11.0f} "
                f"{r['p95_signal_delay_ms']:>11.0f} {r['power_score']:>7.2f} {r.get('segments_per_ack', math.nan):>8.2f}")
        if setup.runs > 1:
            line += f"  {r['score_min']:.2f}..{r['score_max']:.2f}"
        lines.append(line)
    return "\n".join(lines)


def _write_csv(path: Path, rows: Sequence[dict], columns: list[str]) -> None:
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    write_atomic(path, buf.getvalue())


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


__all__ = ["BEST_SETTING_SWEEPS", "best_sweep", "CELLULAR_DIR", "UNBOUNDED_QUEUE_PACKETS", "ContestSetup", "Sweep", "available_traces", "check_out_dir",
           "collect_rows", "default_ccas", "format_leaderboard", "leaderboard", "make_setup", "parse_sweep",
           "pending_runs", "resolve_trace", "resume_setup", "run_contest", "run_dir_of", "run_metrics",
           "score_window_ms", "sweep_ccas", "trace_end_ms", "trace_length_s"]
