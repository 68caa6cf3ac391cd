"""Analyse runs: whole-run mahimahi metrics plus the transient of every capacity step.

Inputs:

* a *run directory* (ccplab's runner) holds ``metadata.json`` (schema 1 or
  2: ``cca``, ``run``, ``scenario`` with ``name``, ``trace_kind``,
  ``steps`` [{at_s, from_mbps, to_mbps}], ``one_way_delay_ms``,
  ``queue_packets``, ``duration_s``; schema 2 adds ``flow_start_s``;
  ``files.link_log``, ``files.iperf3``) and the mm-link log it names;
* a *results directory* is any tree containing run directories;
* a bare mm-link *log file* (ours or stock mahimahi's) is analysed with the
  RTT, steps and capacity the caller gives (`AnalysisOptions`).

Time zero of the transient is the data flow's start (`transient.flow_start_s`:
metadata's ``flow_start_s`` when present, else computed from the log), so
iperf3's control connection is not counted as the CCA's transient.  All
times in the tables are seconds on the log clock.

Two methods (``AnalysisOptions.method``):

* ``"ccplab"`` (default, corrected; `transient.convergence`,
  `transient.secondorder`, `transient.delayside`): every step is analysed,
  the flow's start too (kind "start": from 0 at ``flow_start_s`` to the
  nominal rate in force then), then each later step (kind "up" / "down"),
  each from its own change to its own convergence or the next step;
  throughput = departures judged against the offered capacity; explicit NaN
  when a step did not converge; second-order and delay metrics per step.
* ``"tpcca"``: TPCCA's reference analysis exactly, faults included
  (`transient.tpcca`): one step 0 -> B at time 0; only convergence and
  Normalized Area (the other step metrics are NaN).

Steps come from, in order of precedence: ``AnalysisOptions.steps``
(``--step``), ``auto_steps`` (``--steps auto``, `transient.autosteps`), the
run's metadata, ``capacity_mbps`` (a step 0 -> capacity at 0), else none:
the flow's start is then analysed against the measured offered capacity
(its nominal ``to_mbps`` = the mean offered capacity of the span).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, NamedTuple, Sequence

import numpy as np

from ._lazy import lazy_module

pd = lazy_module("pandas")  # loaded when a table is first made (transient._lazy)

from .convergence import ConvergenceParams, step_convergence
from .delayside import delay_side
from .errors import AnalysisError, TransientError
from .flowlog import attribute_flow_codes, read_flow_ports
from .flows import (
    DEFAULT_FAIR_DELTA, FAIRNESS_COLUMNS, FLOW_COLUMNS, FLOW_STEP_COLUMNS, FlowSpec, FlowTables, analyze_flows,
    flows_from_metadata,
)
from .mahimahi import LinkColumns, read_link_columns
from .metrics import LinkMetrics, link_metrics_of
from .secondorder import NAN_SECOND_ORDER, second_order_metrics
from .series import LogArrays, binned_columns, binned_series
from .steps import Step
from .timezero import no_data_flow_message
from .tpcca import TPCCA_FAULTS, tpcca_analysis

DEFAULT_RTT_MS = 50.0
"""RTT used when neither the caller nor metadata.json gives one (TPCCA's 2 x 25 ms)."""

from .methods import METHODS  # noqa: E402 - re-exported here, where it always was

SCHEMAS = (1, 2, 3)
"""metadata.json schemas this reader understands (3: several flows, ``flows`` and ``files.flow_log``)."""

RUN_COLUMNS = [
    "run_id", "cca", "cca_params", "label", "run", "scenario", "trace_kind", "queue_packets", "rtt_ms",
    "duration_s", "flow_start_s", "method", "capacity_mbps", "throughput_mbps", "utilization",
    "p95_queueing_delay_ms", "p95_signal_delay_ms", "power_score", "retransmits", "n_steps", "path",
]
"""Columns of the per-run table (runs.csv; TRANSIENT-CONTRACT.md). Rates Mbit/s, delays ms, times s."""

STEP_COLUMNS = [
    "run_id", "cca", "cca_params", "label", "run", "scenario", "method", "step", "kind",
    "at_s", "end_s", "from_mbps", "to_mbps",
    "converged", "convergence_s", "convergence_point_s", "normalized_area", "area_mbit",
    "steady_throughput_mbps", "steady_utilization",
    "rise_time_s", "peak_time_s", "overshoot_pct", "settling_time_s", "settling_time_5pct_s",
    "damping_ratio", "natural_frequency_rad_s", "fit_r2", "response_class", "dead_time_s",
    "peak_queueing_delay_ms", "standing_queue_packets", "standing_queue_ms", "drain_time_s", "drops",
    "tpcca_gave_up",
]
"""Columns of the per-(run, step) table (steps.csv; TRANSIENT-CONTRACT.md).

``tpcca_gave_up`` (tpcca method only, else NA): TPCCA's detector gave up and
its convergence point is the fallback bin index 40 (TPCCA still reports it
as converged)."""

class _Missing:
    """A missing value in a step row (`RunResult.step_rows`): ``pd.NA`` in the tables, None in JSON."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<NA>"

    def __reduce__(self):
        return "MISSING"


MISSING = _Missing()
"""The one missing value of `RunResult.step_rows` (a table has ``pd.NA`` there)."""

JSON_RUN_FIELDS = ["throughput_mbps", "p95_queueing_delay_ms", "p95_signal_delay_ms", "power_score"]
"""Run-level fields copied into every step of ``--json`` output (besides the run's own fields)."""


@dataclass(frozen=True)
class AnalysisOptions:
    """How to analyse (all optional).

    Attributes:
        method: "ccplab" (default) or "tpcca".
        rtt_ms: RTT = bin width (ms); default 2 x metadata's one-way delay, else 50.
        capacity_mbps: nominal capacity (Mbit/s).  tpcca: B, winning over
            the steps; ccplab: the step 0 -> it at 0 s when no step is known
            (a bare log, a run without steps).
        steps: explicit steps (override metadata's).
        auto_steps: find steps in the ``#`` rate (ruptures).
        params: ccplab convergence detector parameters.
        smooth_bins: moving average (bins) applied alike to throughput and reference.
        fair_delta: delta of RFC 5166's delta-fair convergence time of two
            flows (`transient.flows`), in (0, 1).
        cache: read and write the Parquet cache beside each log
            (`transient.cache`); False writes nothing beside the inputs.
    """

    method: str = "ccplab"
    rtt_ms: float | None = None
    capacity_mbps: float | None = None
    steps: tuple[Step, ...] | None = None
    auto_steps: bool = False
    params: ConvergenceParams = ConvergenceParams()
    smooth_bins: int = 1
    fair_delta: float = DEFAULT_FAIR_DELTA
    cache: bool = True

    def __post_init__(self) -> None:
        if not (isinstance(self.fair_delta, (int, float)) and 0 < self.fair_delta < 1):
            raise AnalysisError(f"fair_delta must be in (0, 1), got {self.fair_delta!r}")
        if self.method not in METHODS:
            raise AnalysisError(f"unknown method {self.method!r}; expected one of {', '.join(METHODS)}")
        if self.rtt_ms is not None and not (isinstance(self.rtt_ms, (int, float)) and self.rtt_ms > 0):
            raise AnalysisError(f"RTT must be positive, got {self.rtt_ms!r} ms")
        if self.capacity_mbps is not None and not self.capacity_mbps > 0:
            raise AnalysisError(f"capacity must be positive, got {self.capacity_mbps!r} Mbit/s")
        if self.steps is not None and self.auto_steps:
            raise AnalysisError("give either explicit steps or auto steps, not both")


class RunResult:
    """Analysis of one run.

    Attributes:
        run_id: identifier (path relative to the results directory, or the
            directory / file name).
        path: the run directory or log file.
        info: the run's descriptive fields of `RUN_COLUMNS`.
        metrics: whole-run mahimahi metrics.
        steps: one row per analysed step, columns `STEP_COLUMNS`.
        series: `transient.series.binned_series` of the run (RTT bins aligned
            with the flow's start, from the log's start).
        flow_tables: the per-flow analysis (`transient.flows.FlowTables`;
            None with the tpcca method).
        step_rows: the steps' rows as dicts (`STEP_COLUMNS`; a missing value
            is `MISSING`), what ``steps`` is made of.
        n_flows: the flows of the run.

    ``steps``, ``series`` and ``flow_tables`` may be given as functions that make them: each is then
    made on first use (so printing a log's step table needs no pandas), and kept.
    """

    def __init__(self, run_id: str, path: Path, info: dict[str, Any], metrics: LinkMetrics, steps, series,
                 flow_tables=None, *, step_rows: list[dict[str, Any]] | None = None, n_flows: int = 1) -> None:
        self.run_id, self.path, self.info, self.metrics = run_id, path, info, metrics
        self._made = {"steps": steps, "series": series, "flow_tables": flow_tables}
        self.step_rows = step_rows
        self.n_flows = n_flows

    def _get(self, name: str):
        value = self._made[name]
        if callable(value):
            value = self._made[name] = value()
        return value

    steps = property(lambda self: self._get("steps"), doc="one row per analysed step (`STEP_COLUMNS`)")
    series = property(lambda self: self._get("series"), doc="`binned_series` of the run")
    flow_tables = property(lambda self: self._get("flow_tables"), doc="`transient.flows.FlowTables` or None")

    def materialize(self) -> "RunResult":
        """Make every deferred table now (and let go of what they were made from); returns self."""
        for name in self._made:
            self._get(name)
        return self

    def __getstate__(self) -> dict:  # another process gets the tables, not the functions that make them
        self.materialize()
        return self.__dict__

    def __repr__(self) -> str:
        return f"RunResult(run_id={self.run_id!r}, path={self.path!r}, info={self.info!r}, metrics={self.metrics!r})"

    def summary(self) -> dict[str, Any]:
        """The run's row of the per-run table (`RUN_COLUMNS`)."""
        row: dict[str, Any] = {"run_id": self.run_id, **self.info, **self.metrics.as_dict()}
        row["n_steps"] = len(self.step_rows) if self.step_rows is not None else len(self.steps)
        row["path"] = str(self.path)
        return {c: row.get(c) for c in RUN_COLUMNS}

    def as_json(self) -> dict[str, Any]:
        """One JSON-ready object: the run's fields and its ``steps`` (NaN -> None)."""
        run = {k: _plain(v) for k, v in self.summary().items()}
        steps = []
        for rec in self.steps.to_dict(orient="records"):
            step = {k: _plain(v) for k, v in rec.items() if k not in ("run_id", "cca", "cca_params", "label", "run", "scenario", "method")}
            step.update({k: run[k] for k in JSON_RUN_FIELDS})
            steps.append(step)
        run["steps"] = steps
        return run


class _AnalysisFields(NamedTuple):
    runs: pd.DataFrame
    steps: pd.DataFrame
    series: dict[str, pd.DataFrame]
    errors: list[tuple[str, str]]
    flows: pd.DataFrame | None = None
    fairness: pd.DataFrame | None = None
    flow_steps: pd.DataFrame | None = None
    flow_series: dict[str, pd.DataFrame] | None = None


class Analysis(_AnalysisFields):
    """Everything `analyze_all` found (TRANSIENT-CONTRACT.md).

    runs: per-run table (`RUN_COLUMNS`); steps: per-step table
    (`STEP_COLUMNS`); series: run_id -> `binned_series` (plots);
    errors: (path, message) of runs skipped with ``on_error="skip"``;
    flows: per-flow table (`FLOW_COLUMNS`, every run, a single-flow run as
    its flow 0); fairness: per (run, interval of a constant set of active
    flows) (`FAIRNESS_COLUMNS` + ``share_flow<k>``); flow_steps: per (run,
    arrival/departure event, active flow) (`FLOW_STEP_COLUMNS`);
    flow_series: run_id -> per-flow series (`transient.flows.FlowTables`).
    The four flow fields come after the original four (whose positions
    stay) and default to empty tables, so ``Analysis(runs, steps, series,
    errors)`` still builds one.
    """

    __slots__ = ()

    def __new__(cls, runs, steps, series, errors, flows=None, fairness=None, flow_steps=None, flow_series=None):
        # the empty tables are made here, not as class defaults: pandas loads when a table is first made
        return super().__new__(
            cls, runs, steps, series, errors,
            flows if flows is not None else pd.DataFrame(columns=FLOW_COLUMNS),
            fairness if fairness is not None else pd.DataFrame(columns=FAIRNESS_COLUMNS),
            flow_steps if flow_steps is not None else pd.DataFrame(columns=FLOW_STEP_COLUMNS),
            flow_series if flow_series is not None else {})

    @property
    def multi_flow(self) -> bool:
        """Whether any run had more than one flow (then flows.csv, fairness.csv, flow_steps.csv are written)."""
        return bool(len(self.flows)) and bool((pd.to_numeric(self.flows["n_flows"]) > 1).any())


def _plain(v: Any) -> Any:
    """A JSON-ready scalar: NaN/NA -> None, numpy scalars -> Python."""
    if v is None or v is MISSING or (type(v).__name__ == "NAType" and v is pd.NA):
        return None
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    return v


# ---------------------------------------------------------------- metadata


def _number(value: Any, where: str, *, allow_none: bool = False) -> float:
    if value is None and allow_none:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AnalysisError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def load_metadata(run_dir: str | Path) -> dict[str, Any]:
    """Read and check ``run_dir/metadata.json`` (schema 1, 2 or 3); returns the parsed object.

    Raises:
        AnalysisError: missing/unreadable file, invalid JSON, unsupported
            schema, or wrongly typed fields (named with the file path).
    """
    path = Path(run_dir) / "metadata.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AnalysisError(f"{run_dir}: not a run directory (no metadata.json)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise AnalysisError(f"{path}: invalid JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise AnalysisError(f"{path}: expected a JSON object at top level")
    schema = meta.get("schema", 1)
    if schema not in SCHEMAS:
        raise AnalysisError(f"{path}: unsupported schema {schema!r} (this reader knows schemas {SCHEMAS})")
    for key in ("scenario", "files"):
        if not isinstance(meta.get(key, {}), dict):
            raise AnalysisError(f"{path}: '{key}' must be an object")
    if not isinstance(meta.get("scenario", {}).get("steps", []) or [], list):
        raise AnalysisError(f"{path}: 'scenario.steps' must be a list")
    if meta.get("flow_start_s") is not None:
        _number(meta["flow_start_s"], f"{path}: flow_start_s")
    return meta


def steps_from_metadata(meta: dict[str, Any], where: str) -> list[Step]:
    """Parse ``scenario.steps`` into `Step`s sorted by time (a missing from_mbps = the previous step's to, or 0)."""
    raws = meta.get("scenario", {}).get("steps", []) or []
    steps = []
    prev_to = 0.0
    order = sorted(range(len(raws)), key=lambda k: raws[k].get("at_s", 0)
                   if isinstance(raws[k], dict) and isinstance(raws[k].get("at_s"), (int, float)) else 0)
    for k in order:
        raw = raws[k]
        if isinstance(raw, dict) and raw.get("from_mbps") is None:
            raw = {**raw, "from_mbps": prev_to}
        try:
            step = Step.from_dict(raw, f"{where}: scenario.steps[{k}]")
        except ValueError as exc:
            raise AnalysisError(str(exc)) from None
        steps.append(step)
        prev_to = step.to_mbps
    return steps


def _cca_params(meta: dict[str, Any]) -> str:
    p = meta.get("cca_params", "")
    if isinstance(p, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(p.items()))
    return str(p) if p else ""


def _retransmits(run_dir: Path, meta: dict[str, Any]) -> float:
    name = meta.get("files", {}).get("iperf3", "iperf3.json")
    try:
        data = json.loads((run_dir / name).read_text(encoding="utf-8"))
        return float(data["end"]["sum_sent"]["retransmits"])
    except (OSError, TypeError, KeyError, ValueError):
        return math.nan  # no iperf3 record (e.g. a bare log): unknown, not zero


# ---------------------------------------------------------------- one run


@dataclass(frozen=True)
class _RunSpec:
    """Everything needed to analyse one log."""

    log_path: Path
    where: Path
    run_id: str
    info: dict[str, Any]
    rtt_ms: float
    steps: tuple[Step, ...] | None  # None: none known
    flow_start_s: float | None  # None: compute from the log
    duration_s: float | None  # configured duration (TPCCA's horizon); None: the log's
    flows: tuple[FlowSpec, ...] | None = None  # None: one flow, every packet
    flow_log: Path | None = None  # the flow attribution file (schema 3)
    run_dir: Path | None = None  # where the flows' iperf3 JSON files are


def _analysed_steps(steps: Sequence[Step], flow_start: float, nominal_now: float | None) -> list[tuple[str, Step]]:
    """The flow's start as a step from 0 to the rate in force then, and every later step."""
    before = [s for s in steps if s.at_s <= flow_start + 1e-9]
    later = [s for s in steps if s.at_s > flow_start + 1e-9]
    if before:
        rate = before[-1].to_mbps
    elif later:
        rate = later[0].from_mbps
    else:
        rate = nominal_now if nominal_now is not None else math.nan
    out = [("start", Step(flow_start, 0.0, rate) if math.isfinite(rate) else None)]
    out += [(s.kind, s) for s in later]
    return out  # type: ignore[return-value]


def _ccplab_step_row(arrays: LogArrays, kind: str, step: Step | None, at_s: float, end_s: float, bin_s: float,
                     opts: AnalysisOptions, input_s: float | None = None) -> dict[str, Any]:
    """One step's row; ``input_s``: when the input step came (s on the log clock, <= at_s; default at_s),
    the time origin of the second-order fit and of ``dead_time_s``."""
    series = binned_columns(arrays, at_s, end_s, bin_s, opts.smooth_bins)
    x = series["throughput_mbps"]
    r = series["reference_mbps"]
    if step is None:  # no nominal rate known: judge against what the link offered
        to = float(np.mean(series["capacity_mbps"])) if len(series) else math.nan
        step = Step(at_s, 0.0, to) if math.isfinite(to) else None
    from_mbps = step.from_mbps if step else math.nan
    to_mbps = step.to_mbps if step else math.nan
    delta = to_mbps - from_mbps if step else 0.0
    conv = step_convergence(x, r, bin_s, delta, opts.params)
    point = at_s + conv.index * bin_s if conv.converged else math.nan
    if conv.converged and conv.index < len(x):
        steady_t = float(x[conv.index:].mean())
        ref = float(r[conv.index:].mean())
        steady_u = steady_t / ref if ref > 0 else math.nan
    else:
        steady_t = steady_u = math.nan
    y = series["sending_mbps"] - (r - to_mbps)  # the trace's noise taken out
    lead = max(at_s - input_s, 0.0) if input_s is not None else 0.0
    so = second_order_metrics(y, bin_s, from_mbps, to_mbps, lead_s=lead) if step else NAN_SECOND_ORDER
    ds = delay_side(arrays, series, at_s, end_s, point)
    return {
        "kind": kind, "at_s": at_s, "end_s": end_s, "from_mbps": from_mbps, "to_mbps": to_mbps,
        "converged": conv.converged,
        "convergence_s": round(point - at_s, 9) if conv.converged else math.nan,
        "convergence_point_s": round(point, 9) if conv.converged else math.nan,
        "normalized_area": conv.normalized_area, "area_mbit": conv.area_mbit,
        "steady_throughput_mbps": steady_t, "steady_utilization": steady_u,
        **so.as_dict(), **ds.as_dict(), "tpcca_gave_up": MISSING,
    }


def _ccplab_rows(arrays: LogArrays, spec: _RunSpec, flow_start: float, run_end: float, opts: AnalysisOptions) -> list[dict]:
    bin_s = spec.rtt_ms / 1000.0
    steps = list(spec.steps or ())
    analysed = _analysed_steps(steps, flow_start, opts.capacity_mbps)
    # the flow's start responds to the capacity step in force then (its input), not to its own first packet
    in_force = [s.at_s for s in steps if s.at_s <= flow_start + 1e-9]
    rows = []
    for k, (kind, step) in enumerate(analysed):
        at_s = flow_start if kind == "start" else step.at_s
        end_s = analysed[k + 1][1].at_s if k + 1 < len(analysed) else run_end
        if end_s <= at_s:
            continue
        input_s = (in_force[-1] if in_force else at_s) if kind == "start" else at_s
        rows.append(_ccplab_step_row(arrays, kind, step, at_s, end_s, bin_s, opts, input_s))
    return rows


def _tpcca_rows(arrivals: tuple[np.ndarray, np.ndarray], spec: _RunSpec, run_end: float,
                opts: AnalysisOptions) -> list[dict]:
    b = opts.capacity_mbps if opts.capacity_mbps is not None else (spec.steps[0].to_mbps if spec.steps else None)
    if b is None:
        raise AnalysisError(f"{spec.where}: --method tpcca needs the capacity B of the step at 0 s: give --capacity-mbps")
    duration = spec.duration_s if spec.duration_s is not None else run_end
    try:
        res = tpcca_analysis(arrivals[0], arrivals[1], b, spec.rtt_ms / 2.0, duration)
    except ValueError as exc:
        raise AnalysisError(f"{spec.where}: {exc}") from None
    ok = math.isfinite(res.convergence_s)
    nan = math.nan
    return [{
        "kind": "start", "at_s": 0.0, "end_s": run_end, "from_mbps": 0.0, "to_mbps": float(b),
        "converged": ok, "convergence_s": res.convergence_s, "convergence_point_s": res.convergence_s,
        "normalized_area": res.normalized_area, "area_mbit": res.area_mbit,
        "steady_throughput_mbps": nan, "steady_utilization": nan,
        **NAN_SECOND_ORDER.as_dict(), "response_class": None,
        "peak_queueing_delay_ms": nan, "standing_queue_packets": nan, "standing_queue_ms": nan,
        "drain_time_s": nan, "drops": MISSING, "tpcca_gave_up": res.gave_up,
    }]


def _analyze(spec: _RunSpec, opts: AnalysisOptions) -> RunResult:
    try:
        arrivals = None
        arrays = _one_flow_arrays(spec, opts)
        if arrays is None:
            cols = read_link_columns(spec.log_path, cache=opts.cache)
            flow = _event_flows(cols, spec)
            # the analysis holds per-ms sums, not the events (`LogArrays`); tpcca alone reads the arrivals
            arrivals = _arrivals(cols) if opts.method == "tpcca" else None
            arrays = LogArrays.from_columns(cols.time_ms, cols.code, cols.nbytes, cols.delay_ms, cols.packets, flow)
            del cols, flow
        metrics = link_metrics_of(arrays)
    except (TransientError, ValueError, OSError) as exc:
        raise AnalysisError(f"{spec.where}: {exc}") from exc
    run_end = (arrays.last_ms + 1) / 1000.0
    start = spec.flow_start_s if spec.flow_start_s is not None else _data_ms(arrays, spec)[0] / 1000.0
    if opts.auto_steps:
        spec = replace(spec, steps=tuple(_auto_steps(arrays)))
    elif opts.steps is not None:
        spec = replace(spec, steps=tuple(sorted(opts.steps)))
    elif not spec.steps and opts.capacity_mbps is not None:
        spec = replace(spec, steps=(Step(0.0, 0.0, opts.capacity_mbps),))
    if opts.method == "tpcca":
        rows = _tpcca_rows(arrivals, spec, run_end, opts)
    else:
        # steps end with the data flow, not with the log's idle tail (`flow_end_s`)
        rows = _ccplab_rows(arrays, spec, start, min(run_end, (_data_ms(arrays, spec)[1] + 1) / 1000.0), opts)
    info = {**spec.info, "rtt_ms": spec.rtt_ms, "flow_start_s": start, "method": opts.method,
            "duration_s": spec.duration_s if spec.duration_s is not None else metrics.duration_s}
    ident = {k: info.get(k) for k in ("cca", "cca_params", "label", "run", "scenario")}
    rows = [{"run_id": spec.run_id, **ident, "method": opts.method, "step": k, **r} for k, r in enumerate(rows)]
    bin_s = spec.rtt_ms / 1000.0
    origin = start - math.floor(start / bin_s + 1e-9) * bin_s  # bins aligned with the flow's start

    # the tables are made when first asked for (pandas is imported then): printing the steps needs none
    def steps_frame() -> pd.DataFrame:
        return pd.DataFrame([{k: (pd.NA if v is MISSING else v) for k, v in row.items()} for row in rows],
                            columns=STEP_COLUMNS)

    def series() -> pd.DataFrame:
        return binned_series(arrays, origin, run_end, bin_s, opts.smooth_bins)

    flow_tables = None
    if opts.method == "ccplab":
        specs = spec.flows or (FlowSpec(0, info.get("cca"), info.get("cca_params") or "", None, 0.0, math.nan,
                                        start, math.nan, 0.0, None),)
        in_force = [s.at_s for s in spec.steps or () if s.at_s <= start + 1e-9]  # as the steps table's start

        def flow_tables() -> FlowTables:
            return analyze_flows(arrays, None, specs, run_id=spec.run_id, info=info, bin_s=bin_s,
                                 origin_s=origin, run_end=run_end, params=opts.params,
                                 smooth_bins=opts.smooth_bins, fair_delta=opts.fair_delta, run_dir=spec.run_dir,
                                 first_input_s=in_force[-1] if in_force else start)
    return RunResult(spec.run_id, spec.where, info, metrics, steps_frame, series, flow_tables, step_rows=rows,
                     n_flows=len(spec.flows) if spec.flows else 1)


def _one_flow_arrays(spec: _RunSpec, opts: AnalysisOptions) -> LogArrays | None:
    """The log's `LogArrays` reduced as it is read (`transient.stream`, through its cache when
    ``opts.cache``) when every packet is the one flow's and the method needs no event (ccplab);
    None when the events must be read."""
    one_flow = spec.flow_log is None and (spec.flows is None or len(spec.flows) <= 1)
    if opts.method != "ccplab" or not one_flow:
        return None
    if opts.cache:
        from .cache import cached_log_arrays

        return cached_log_arrays(spec.log_path)
    from .cache import reduced_log_arrays

    return reduced_log_arrays(spec.log_path)


def _event_flows(cols: LinkColumns, spec: _RunSpec) -> np.ndarray | None:
    """Each event's flow index (int16) from the flow attribution file, or None: a lone flow, every packet."""
    if spec.flow_log is not None:
        ports = read_flow_ports(spec.flow_log)
        port_to_flow = {f.port: f.index for f in spec.flows or () if f.port is not None}
        return attribute_flow_codes(cols.code, ports, port_to_flow, str(spec.log_path), str(spec.flow_log))
    if spec.flows is not None and len(spec.flows) > 1:
        raise AnalysisError(f"{spec.where}: metadata lists {len(spec.flows)} flows but no files.flow_log "
                            "attributes the packets to them")
    return None  # one flow, every packet (`LogArrays` needs no per-event flow for that)


def _arrivals(cols: LinkColumns) -> tuple[np.ndarray, np.ndarray]:
    """The arrival events' times (s) and bytes, in file order (what TPCCA bins)."""
    arr = cols.code == 0
    return cols.time_ms[arr] / 1000.0, cols.nbytes[arr].astype(np.int64)


def _data_ms(arrays: LogArrays, spec: _RunSpec) -> tuple[int, int]:
    """(first, last) data arrival of the log, ms (the rule of `transient.flow_start_s` / `flow_end_s`)."""
    if arrays.data_ms is None:
        raise AnalysisError(no_data_flow_message(str(spec.log_path)))
    return arrays.data_ms


def _auto_steps(arrays: LogArrays) -> list[Step]:
    from .autosteps import detect_steps

    return detect_steps(arrays)


def _bare_info(log_path: Path) -> dict[str, Any]:
    return {"cca": None, "cca_params": "", "label": log_path.name, "run": None, "scenario": log_path.stem,
            "trace_kind": None, "queue_packets": None, "retransmits": math.nan}


def analyze_log(
    log_path: str | Path,
    *,
    options: AnalysisOptions = AnalysisOptions(),
    run_id: str | None = None,
    rtt_ms: float | None = None,
    steps: Iterable[Step] | None = None,
) -> RunResult:
    """Analyse a bare mm-link log (ours or stock mahimahi's; no metadata).

    Args:
        log_path: the log file.
        options: method, RTT (default 50 ms), capacity, steps (see `AnalysisOptions`).
        run_id: identifier in the tables (default: the file name).
        rtt_ms, steps: shorthands that override ``options``.

    Raises:
        AnalysisError: unreadable or malformed log (message names the file
            and line), no data flow, or bad options.
    """
    log_path = Path(log_path)
    if rtt_ms is not None or steps is not None:
        options = replace(options, rtt_ms=rtt_ms if rtt_ms is not None else options.rtt_ms,
                          steps=tuple(steps) if steps is not None else options.steps)
    spec = _RunSpec(log_path, log_path, run_id or log_path.name, _bare_info(log_path),
                    options.rtt_ms or DEFAULT_RTT_MS, None, None, None)
    return _analyze(spec, options)


def analyze_run(
    run_dir: str | Path,
    *,
    options: AnalysisOptions = AnalysisOptions(),
    run_id: str | None = None,
    rtt_ms: float | None = None,
) -> RunResult:
    """Analyse one run directory (``metadata.json`` + its mm-link log).

    Args:
        run_dir: the run directory.
        options: see `AnalysisOptions`; its RTT defaults to 2 x
            ``scenario.one_way_delay_ms``, else 50 ms.
        run_id: identifier in the tables (default: the directory name).
        rtt_ms: shorthand overriding ``options.rtt_ms``.

    Raises:
        AnalysisError: bad metadata or log, naming the path.
    """
    run_dir = Path(run_dir)
    if rtt_ms is not None:
        options = replace(options, rtt_ms=rtt_ms)
    meta = load_metadata(run_dir)
    where = f"{run_dir / 'metadata.json'}"
    scenario = meta.get("scenario", {})
    rtt = options.rtt_ms
    if rtt is None:
        owd = scenario.get("one_way_delay_ms")
        rtt = 2.0 * _number(owd, f"{where}: scenario.one_way_delay_ms") if owd is not None else DEFAULT_RTT_MS
    log_name = meta.get("files", {}).get("link_log", "uplink.log")
    if not isinstance(log_name, str) or not log_name:
        raise AnalysisError(f"{where}: files.link_log must be a file name, got {log_name!r}")
    run = meta.get("run")
    cca = meta.get("cca")
    params = _cca_params(meta)
    label = f"{cca} {params}".strip() if cca else None
    if len(meta.get("flows") or []) > 1 and isinstance(meta.get("label"), str):
        label = meta["label"]  # competing flows: the set of flows (e.g. "kernel:cubic vs ccp:bbr@10")
    info = {
        "cca": cca, "cca_params": params, "label": label,
        "run": int(run) if isinstance(run, (int, float)) and not isinstance(run, bool) else None,
        "scenario": scenario.get("name"), "trace_kind": scenario.get("trace_kind"),
        "queue_packets": scenario.get("queue_packets"), "retransmits": _retransmits(run_dir, meta),
    }
    dur = scenario.get("duration_s")
    flows = flows_from_metadata(meta, where)  # without a 'flows' list: the one flow of the top-level keys
    flow_log = meta.get("files", {}).get("flow_log")
    if flow_log is not None and (not isinstance(flow_log, str) or not flow_log):
        raise AnalysisError(f"{where}: files.flow_log must be a file name, got {flow_log!r}")
    spec = _RunSpec(run_dir / log_name, run_dir, run_id or run_dir.name, info, rtt,
                    tuple(steps_from_metadata(meta, where)) or None,
                    float(meta["flow_start_s"]) if meta.get("flow_start_s") is not None else None,
                    _number(dur, f"{where}: scenario.duration_s") if dur is not None else None,
                    tuple(flows), run_dir / flow_log if flow_log else None, run_dir)
    return _analyze(spec, options)


def invalid_reason(run_dir: Path) -> str | None:
    """Why the runner marked ``run_dir`` invalid (metadata ``"valid": false``, e.g. its ccp flows ran
    under the kernel's cubic fallback), or None for a valid run or one whose metadata cannot say."""
    try:
        meta = json.loads((Path(run_dir) / "metadata.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # analyze_run words the problem
    if isinstance(meta, dict) and meta.get("valid") is False:
        control = meta.get("control") if isinstance(meta.get("control"), dict) else {}
        return str(control.get("reason") or "no reason recorded")
    return None


def find_run_dirs(root: str | Path) -> list[Path]:
    """All directories under ``root`` (inclusive) holding a metadata.json, sorted.

    Hidden directories (name starting with '.') are skipped; the search does
    not descend into a run directory.
    """
    root = Path(root)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        if "metadata.json" in filenames:
            found.append(Path(dirpath))
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return sorted(found)


def _tables(results: list[RunResult]) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs = pd.DataFrame([r.summary() for r in results], columns=RUN_COLUMNS)
    runs["run"] = runs["run"].astype("Int64")
    frames = [r.steps for r in results if len(r.steps)]
    steps = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=STEP_COLUMNS)
    if len(steps):
        steps["run"] = steps["run"].astype("Int64")
        steps["drops"] = steps["drops"].astype("Int64")
    if (runs["method"] == "tpcca").any():
        runs.attrs["tpcca_faults"] = list(TPCCA_FAULTS)  # the report lists what that method keeps
    return runs, steps


def _flow_frames(results: list[RunResult]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict]:
    """(flows, fairness, flow_steps, flow_series) of all runs (empty tables when no run has them)."""
    tables = [r.flow_tables for r in results if r.flow_tables is not None]

    def cat(name: str, cols: list[str]) -> pd.DataFrame:
        frames = [getattr(t, name) for t in tables if len(getattr(t, name))]
        if not frames:
            return pd.DataFrame(columns=cols)
        out = pd.concat(frames, ignore_index=True)
        return out.reindex(columns=cols + [c for c in out.columns if c not in cols])

    flows = cat("flows", FLOW_COLUMNS)
    fairness = cat("fairness", FAIRNESS_COLUMNS)
    shares = sorted([c for c in fairness.columns if c.startswith("share_flow")], key=lambda c: int(c[10:]))
    fairness = fairness.reindex(columns=FAIRNESS_COLUMNS + shares)
    flow_steps = cat("flow_steps", FLOW_STEP_COLUMNS)
    for df, cols in ((flows, ("run", "drops", "port")), (flow_steps, ("run", "drops")), (fairness, ())):
        for c in cols:
            if len(df):
                df[c] = pd.to_numeric(df[c]).astype("Int64")
    series = {r.run_id: r.flow_tables.series for r in results if r.flow_tables is not None}
    return flows, fairness, flow_steps, series


def analyze_paths(
    path: str | Path,
    *,
    options: AnalysisOptions = AnalysisOptions(),
    on_error: str = "raise",
    workers: int | None = None,
) -> tuple[list[RunResult], list[tuple[str, str]]]:
    """(`RunResult` of every run under ``path``, errors of skipped runs).

    ``path`` is a log file, a run directory or a results tree; see
    `analyze_all` for the arguments and errors.  ``workers``: processes
    that analyse runs in parallel (default 1; worth it for many long runs
    on an otherwise idle machine, see ``make bench``).
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    path = Path(path)
    if not path.exists():
        raise AnalysisError(f"{path}: no such file or directory")
    if path.is_file() and path.name != "metadata.json":
        return [analyze_log(path, options=options)], []
    root = path.parent if path.is_file() else path
    run_dirs = find_run_dirs(root)
    if not run_dirs:
        raise AnalysisError(f"{root}: no run directories (directories with a metadata.json) found")
    errors: list[tuple[str, str]] = []
    invalid = {d: reason for d in run_dirs if (reason := invalid_reason(d)) is not None}
    for d, reason in invalid.items():  # kept by the runner only to be shown apart, never scored
        errors.append((str(d), f"marked invalid by the runner: {reason}"))
    run_dirs = [d for d in run_dirs if d not in invalid]
    if not run_dirs:
        raise AnalysisError(f"{root}: every run is marked invalid; first: {errors[0][1]}")
    jobs = [(d, options, d.name if d.relative_to(root).as_posix() == "." else d.relative_to(root).as_posix())
            for d in run_dirs]
    results: list[RunResult] = []
    for d, outcome in zip(run_dirs, _map_runs(jobs, workers)):
        if isinstance(outcome, RunResult):
            results.append(outcome.materialize())  # each run's tables now: not every run's per-ms arrays held
            continue
        if on_error == "raise":
            raise AnalysisError(outcome)
        warnings.warn(f"skipping run: {outcome}", stacklevel=2)
        errors.append((str(d), outcome))
    if not results:
        raise AnalysisError(f"{root}: every run failed to analyse; first error: {errors[0][1]}")
    return results, errors


def _analyze_job(job: tuple[Path, AnalysisOptions, str]) -> RunResult | str:
    """Worker: one run's `RunResult`, or the AnalysisError message (exceptions with custom
    constructors do not cross process boundaries reliably)."""
    d, options, run_id = job
    try:
        return analyze_run(d, options=options, run_id=run_id)
    except AnalysisError as exc:
        return str(exc)


def _map_runs(jobs: list, workers: int | None) -> list[RunResult | str]:
    if workers is None or workers <= 1 or len(jobs) < 2:
        return [_analyze_job(j) for j in jobs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # forkserver, not fork: pyarrow's thread pools do not survive fork; preloading
    # this module and what it imports on first use into the server makes each worker start without
    # re-importing.
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["transient.analyze", "pandas", "polars"])
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return list(pool.map(_analyze_job, jobs, chunksize=max(len(jobs) // (4 * workers), 1)))


def analyze_all(
    path: str | Path,
    *,
    options: AnalysisOptions = AnalysisOptions(),
    on_error: str = "raise",
    rtt_ms: float | None = None,
    steps: Iterable[Step] | None = None,
    workers: int | None = None,
) -> Analysis:
    """Analyse a log file, a run directory or a results directory.

    Args:
        path: an mm-link log file, a run directory (or its metadata.json), or
            any directory tree containing run directories.
        options: method, RTT, capacity, steps (see `AnalysisOptions`).
        on_error: "raise" (default) stops at the first bad run; "skip"
            warns, leaves the run out and records it in ``Analysis.errors``.
        rtt_ms, steps: shorthands that override ``options``.
        workers: processes analysing runs in parallel (see `analyze_paths`).

    Raises:
        AnalysisError: nonexistent path, no runs found, or a bad run with
            on_error="raise".
    """
    if rtt_ms is not None or steps is not None:
        options = replace(options, rtt_ms=rtt_ms if rtt_ms is not None else options.rtt_ms,
                          steps=tuple(steps) if steps is not None else options.steps)
    results, errors = analyze_paths(path, options=options, on_error=on_error, workers=workers)
    runs, steps_df = _tables(results)
    flows, fairness, flow_steps, flow_series = _flow_frames(results)
    return Analysis(runs, steps_df, {r.run_id: r.series for r in results}, errors, flows, fairness, flow_steps,
                    flow_series)


def analyze_results(path: str | Path, **kw: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`analyze_all` returning only ``(runs_df, steps_df)`` (see there)."""
    a = analyze_all(path, **kw)
    return a.runs, a.steps
