"""Analyse runs: whole-run mahimahi metrics plus the transient of every capacity step.

Inputs (written by ccplab's runner):

* a *run directory* holds ``metadata.json`` (schema 1: ``cca``, ``run``,
  ``scenario`` with ``name``, ``trace_kind``, ``steps`` [{at_s, from_mbps,
  to_mbps}], ``one_way_delay_ms``, ``queue_packets``, ...; ``files.link_log``)
  and the mm-link log it names (default ``uplink.log``);
* a *results directory* is any tree containing run directories;
* a bare mm-link *log file* is analysed with the RTT and steps given by the
  caller (default RTT 50 ms, no steps: whole-run metrics only).

Per step (see `transient.tpcca`): convergence (TPCCA detector on the
departure throughput in 1-RTT bins), convergence time from the step,
Normalized Area against the step's nominal new capacity, and the steady
throughput: mean departure throughput from the convergence point to the end
of the step's span (the next step or the run end); when the step never
converged, over the last half of the span instead (``steady_basis`` says
which).  Steady utilization = steady throughput / capacity measured from the
delivery opportunities (``#``) of the same bins.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, NamedTuple, Sequence

import numpy as np
import pandas as pd

from .errors import AnalysisError, TransientError
from .mahimahi import read_link_log
from .metrics import LinkMetrics, link_metrics
from .series import rate_series
from .steps import Step
from .tpcca import SteadyStateParams, step_transient

DEFAULT_RTT_MS = 50.0
"""RTT used when neither the caller nor metadata.json gives one (TPCCA's 2 x 25 ms)."""

RUN_COLUMNS = [
    "run_id", "cca", "run", "scenario", "trace_kind", "queue_packets", "rtt_ms",
    "duration_s", "capacity_mbps", "throughput_mbps", "utilization",
    "p95_queueing_delay_ms", "p95_signal_delay_ms", "power_score", "n_steps",
    "converged", "convergence_time_s", "normalized_area",
    "steady_throughput_mbps", "steady_utilization", "path",
]
"""Columns of the per-run table (`analyze_results`' first frame, runs.csv)."""

STEP_COLUMNS = [
    "run_id", "cca", "run", "scenario", "step", "at_s", "end_s", "from_mbps", "to_mbps",
    "converged", "convergence_time_s", "convergence_point_s", "normalized_area",
    "area_mbit", "steady_level_mbps", "steady_throughput_mbps", "steady_capacity_mbps",
    "steady_utilization", "steady_basis",
]
"""Columns of the per-(run, step) table (`analyze_results`' second frame, steps.csv)."""

_FIRST_STEP_FIELDS = ["converged", "convergence_time_s", "normalized_area", "steady_throughput_mbps", "steady_utilization"]


@dataclass
class RunResult:
    """Analysis of one run.

    Attributes:
        run_id: identifier (path relative to the results directory, or the
            directory / file name).
        path: the run directory or log file.
        info: cca, run, scenario, trace_kind, queue_packets, rtt_ms.
        metrics: whole-run mahimahi metrics.
        steps: one row per step, columns `STEP_COLUMNS`.
        series: `rate_series` of the run in 1-RTT bins.
    """

    run_id: str
    path: Path
    info: dict[str, Any]
    metrics: LinkMetrics
    steps: pd.DataFrame
    series: pd.DataFrame = field(repr=False)

    def summary(self) -> dict[str, Any]:
        """The run's row of the per-run table (`RUN_COLUMNS`)."""
        row: dict[str, Any] = {"run_id": self.run_id, **self.info, **self.metrics.as_dict()}
        row["n_steps"] = len(self.steps)
        first = self.steps.iloc[0] if len(self.steps) else None
        for name in _FIRST_STEP_FIELDS:
            row[name] = first[name] if first is not None else (None if name == "converged" else math.nan)
        row["path"] = str(self.path)
        return {c: row.get(c) for c in RUN_COLUMNS}


class Analysis(NamedTuple):
    """Everything `analyze_all` found.

    runs: per-run table (`RUN_COLUMNS`); steps: per-step table
    (`STEP_COLUMNS`); series: run_id -> rate series (for plots);
    errors: (path, message) of runs skipped with ``on_error="skip"``.
    """

    runs: pd.DataFrame
    steps: pd.DataFrame
    series: dict[str, pd.DataFrame]
    errors: list[tuple[str, str]]


# ---------------------------------------------------------------- metadata


def _number(value: Any, where: str, *, allow_none: bool = False) -> float:
    if value is None and allow_none:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AnalysisError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def load_metadata(run_dir: str | Path) -> dict[str, Any]:
    """Read and check ``run_dir/metadata.json``; returns the parsed object.

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
    if schema != 1:
        raise AnalysisError(f"{path}: unsupported schema {schema!r} (this reader knows schema 1)")
    scenario = meta.get("scenario", {})
    if not isinstance(scenario, dict):
        raise AnalysisError(f"{path}: 'scenario' must be an object")
    files = meta.get("files", {})
    if not isinstance(files, dict):
        raise AnalysisError(f"{path}: 'files' must be an object")
    if not isinstance(scenario.get("steps", []), list):
        raise AnalysisError(f"{path}: 'scenario.steps' must be a list")
    return meta


def steps_from_metadata(meta: dict[str, Any], where: str) -> list[Step]:
    """Parse ``scenario.steps`` into `Step`s sorted by time (a missing from_mbps = the previous step's to, or 0)."""
    steps = []
    prev_to = 0.0
    raws = sorted(meta.get("scenario", {}).get("steps", []) or [],
                  key=lambda r: r.get("at_s", 0) if isinstance(r, dict) and isinstance(r.get("at_s"), (int, float)) else 0)
    for k, raw in enumerate(raws):
        loc = f"{where}: scenario.steps[{k}]"
        if isinstance(raw, dict) and raw.get("from_mbps") is None:
            raw = {**raw, "from_mbps": prev_to}
        try:
            step = Step.from_dict(raw, loc)
        except ValueError as exc:
            raise AnalysisError(str(exc)) from None
        steps.append(step)
        prev_to = step.to_mbps
    return steps


# ---------------------------------------------------------------- analysis


def _step_rows(series: pd.DataFrame, bin_s: float, steps: Sequence[Step], params: SteadyStateParams) -> list[dict]:
    run_end_s = float(series.index[-1]) + bin_s if len(series) else 0.0
    tput = series["throughput_mbps"]
    tput_np = tput.to_numpy()
    cap_np = series["capacity_mbps"].to_numpy()
    rows = []
    for k, step in enumerate(steps):
        end_s = steps[k + 1].at_s if k + 1 < len(steps) else run_end_s
        tr = step_transient(tput, bin_s, step.at_s, step.to_mbps, end_s=end_s, params=params)
        if tr.converged:
            lo, basis = tr.convergence_bin, "convergence"
        else:
            lo, basis = tr.first_bin + (tr.end_bin - tr.first_bin) // 2, "last-half"
        hi = tr.end_bin
        if hi <= lo:
            steady_t = steady_c = math.nan
            basis = "none"
        else:
            steady_t = float(tput_np[lo:hi].mean())
            steady_c = float(cap_np[lo:hi].mean())
        rows.append(
            {
                "step": k,
                "at_s": step.at_s,
                "end_s": end_s,
                "from_mbps": step.from_mbps,
                "to_mbps": step.to_mbps,
                "converged": tr.converged,
                "convergence_time_s": tr.convergence_time_s,
                "convergence_point_s": tr.convergence_point_s,
                "normalized_area": tr.normalized_area,
                "area_mbit": tr.area_mbit,
                "steady_level_mbps": tr.steady_level_mbps,
                "steady_throughput_mbps": steady_t,
                "steady_capacity_mbps": steady_c,
                "steady_utilization": steady_t / steady_c if steady_c > 0 else math.nan,
                "steady_basis": basis,
            }
        )
    return rows


def _analyze_log_file(
    log_path: Path, run_id: str, info: dict[str, Any], rtt_ms: float, steps: Sequence[Step], params: SteadyStateParams, where: Path
) -> RunResult:
    if not rtt_ms > 0:
        raise AnalysisError(f"{where}: RTT must be positive, got {rtt_ms!r} ms")
    try:
        log = read_link_log(log_path)
        metrics = link_metrics(log.events)
    except (TransientError, ValueError, OSError) as exc:
        raise AnalysisError(f"{where}: {exc}") from exc
    series = rate_series(log.events, rtt_ms)
    rows = _step_rows(series, rtt_ms / 1000.0, steps, params)
    ident = {"run_id": run_id, "cca": info["cca"], "run": info["run"], "scenario": info["scenario"]}
    steps_df = pd.DataFrame([{**ident, **r} for r in rows], columns=STEP_COLUMNS)
    return RunResult(run_id, where, {**info, "rtt_ms": rtt_ms}, metrics, steps_df, series)


def analyze_log(
    log_path: str | Path,
    *,
    rtt_ms: float = DEFAULT_RTT_MS,
    steps: Iterable[Step] = (),
    params: SteadyStateParams = SteadyStateParams(),
    run_id: str | None = None,
) -> RunResult:
    """Analyse a bare mm-link log (no metadata).

    Args:
        log_path: the log file.
        rtt_ms: bin width for the throughput series and TPCCA windows (ms).
        steps: capacity changes to analyse (none: whole-run metrics only).
        params: TPCCA detector parameters.
        run_id: identifier in the tables (default: the file name).

    Raises:
        AnalysisError: unreadable or malformed log (message names the file
            and line), or a non-positive RTT.
    """
    log_path = Path(log_path)
    info = {"cca": None, "run": None, "scenario": log_path.stem, "trace_kind": None, "queue_packets": None}
    steps = sorted(steps, key=lambda s: s.at_s)
    return _analyze_log_file(log_path, run_id or log_path.name, info, rtt_ms, steps, params, log_path)


def analyze_run(
    run_dir: str | Path,
    *,
    rtt_ms: float | None = None,
    params: SteadyStateParams = SteadyStateParams(),
    run_id: str | None = None,
) -> RunResult:
    """Analyse one run directory (``metadata.json`` + its mm-link log).

    Args:
        run_dir: the run directory.
        rtt_ms: override the RTT; default 2 x ``scenario.one_way_delay_ms``
            from metadata, else 50 ms.
        params: TPCCA detector parameters.
        run_id: identifier in the tables (default: the directory name).

    Raises:
        AnalysisError: bad metadata or log, naming the path.
    """
    run_dir = Path(run_dir)
    meta = load_metadata(run_dir)
    where = str(run_dir / "metadata.json")
    scenario = meta.get("scenario", {})
    steps = steps_from_metadata(meta, where)
    if rtt_ms is None:
        owd = scenario.get("one_way_delay_ms")
        rtt_ms = 2.0 * _number(owd, f"{where}: scenario.one_way_delay_ms") if owd is not None else DEFAULT_RTT_MS
    log_name = meta.get("files", {}).get("link_log", "uplink.log")
    if not isinstance(log_name, str) or not log_name:
        raise AnalysisError(f"{where}: files.link_log must be a file name, got {log_name!r}")
    run = meta.get("run")
    info = {
        "cca": meta.get("cca"),
        "run": int(run) if isinstance(run, (int, float)) and not isinstance(run, bool) else None,
        "scenario": scenario.get("name"),
        "trace_kind": scenario.get("trace_kind"),
        "queue_packets": scenario.get("queue_packets"),
    }
    return _analyze_log_file(run_dir / log_name, run_id or run_dir.name, info, rtt_ms, steps, params, run_dir)


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
    return runs, steps


def analyze_all(
    path: str | Path,
    *,
    rtt_ms: float | None = None,
    steps: Iterable[Step] | None = None,
    params: SteadyStateParams = SteadyStateParams(),
    on_error: str = "raise",
) -> Analysis:
    """Analyse a log file, a run directory or a results directory.

    Args:
        path: an mm-link log file, a run directory (or its metadata.json), or
            any directory tree containing run directories.
        rtt_ms: RTT override (ms); for a bare log the default is 50 ms.
        steps: steps for a bare log file (ignored for run directories, whose
            steps come from metadata).
        params: TPCCA detector parameters.
        on_error: "raise" (default) stops at the first bad run; "skip"
            warns, leaves the run out and records it in ``Analysis.errors``.

    Raises:
        AnalysisError: nonexistent path, no runs found, or a bad run with
            on_error="raise".
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    path = Path(path)
    if not path.exists():
        raise AnalysisError(f"{path}: no such file or directory")
    if path.is_file() and path.name != "metadata.json":
        res = analyze_log(path, rtt_ms=rtt_ms if rtt_ms is not None else DEFAULT_RTT_MS, steps=steps or (), params=params)
        runs, steps_df = _tables([res])
        return Analysis(runs, steps_df, {res.run_id: res.series}, [])
    root = path.parent if path.is_file() else path
    run_dirs = find_run_dirs(root)
    if not run_dirs:
        raise AnalysisError(f"{root}: no run directories (directories with a metadata.json) found")
    results: list[RunResult] = []
    errors: list[tuple[str, str]] = []
    for d in run_dirs:
        rel = d.relative_to(root).as_posix()
        run_id = d.name if rel == "." else rel
        try:
            results.append(analyze_run(d, rtt_ms=rtt_ms, params=params, run_id=run_id))
        except AnalysisError as exc:
            if on_error == "raise":
                raise
            warnings.warn(f"skipping run: {exc}", stacklevel=2)
            errors.append((str(d), str(exc)))
    if not results:
        raise AnalysisError(f"{root}: every run failed to analyse; first error: {errors[0][1]}")
    runs, steps_df = _tables(results)
    return Analysis(runs, steps_df, {r.run_id: r.series for r in results}, errors)


def analyze_results(
    path: str | Path,
    *,
    rtt_ms: float | None = None,
    steps: Iterable[Step] | None = None,
    params: SteadyStateParams = SteadyStateParams(),
    on_error: str = "raise",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`analyze_all` returning only ``(runs_df, steps_df)`` (see there)."""
    a = analyze_all(path, rtt_ms=rtt_ms, steps=steps, params=params, on_error=on_error)
    return a.runs, a.steps
