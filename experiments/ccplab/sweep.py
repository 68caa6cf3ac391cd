"""``ccplab sweep FILE``: run an experiment file (see ``sweepfile``), resumable, on Dask workers.

Layout of a sweep directory (``--out``)::

    sweep.toml           the experiment file as it was started (a resume must use the same)
    traces/<scenario>.trace(.meta.json)   generated traces (seeded), made once by the driver
    runs/<scenario>/<cca>/run-<k>/        raw run directories (see ccplab.run), kept
    store/               Parquet results (see ccplab.store)

Execution: every run of the plan not yet in the store is submitted, in the
plan's order, as one Dask task needing the resource ``netlab=1``; a worker
started with ``--resources netlab=1`` so runs one at a time (a host has one
``ccp`` registration, and concurrent emulations share its CPUs). The task
runs the flow in a scratch directory on the worker, analyses it there
(``transient``), copies the run directory to the results location (a local
path or any fsspec URL) and returns only the tables; the driver appends them
to the store as each run completes.

Resume: a run counts as finished when its rows are in the store. Runs that
were interrupted (partial directories, a raw directory without rows) are
discarded and rerun. A run that fails is retried once on the worker; then it
is recorded in ``store/failed`` with its error (``--retry-failed`` runs those
again).

Validity (``ccplab.control``, ``--max-fallback-share``): a ccp run the datapath's
kernel-cubic fallback drove beyond the policy is recorded in ``store/failed`` at
once, not retried (a second try would keep the runs that happened to pass), its
error the datapath's evidence; its rows never reach the tables. With
``--keep-invalid`` its run directory is published too, marked invalid in its
metadata.json, and the failure record says where. A worker killed mid-run: Dask reschedules its task on another worker,
whose run replaces the partial one, so nothing is lost or counted twice.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
from ccplab_util.atomic import write_atomic

from . import scenario as sc
from . import store
from .control import InvalidRunError, ValidityPolicy
from .errors import CcplabError
from .sweepfile import RunSpec, ScenarioSpec, Sweep

ATTEMPTS = 2  # a failed run is retried once
LEFTOVER_WAIT_S = 20.0  # a killed worker's daemons take a moment to clean up (SIGTERM via pdeathsig)


@dataclass
class SweepSummary:
    """What ``execute`` did: counts, the failed runs' errors, wall time and the per-run scheduling overhead."""

    planned: int
    skipped: int = 0
    finished: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    wall_s: float = 0.0
    run_s: float = 0.0  # sum of the runs' own wall times on the workers

    @property
    def overhead_per_run_s(self) -> float:
        """(driver wall time - time inside the runs) / runs executed; meaningful with one worker."""
        n = self.finished + len(self.failed)
        return (self.wall_s - self.run_s) / n if n else 0.0


# ------------------------------------------------------------------ the driver


def prepare(sweep: Sweep, out: Path) -> Path:
    """Create ``out`` for ``sweep`` (or check that it holds the same sweep, to resume); generate its traces.

    Raises CcplabError when ``out`` holds something else or a different experiment file.
    """
    out = out.resolve()
    text = sweep.source.read_text()
    copy = out / "sweep.toml"
    if copy.exists():
        if copy.read_text() != text:
            raise CcplabError(f"{out} holds a different sweep ({copy} differs from {sweep.source}): "
                              "resume with the same file, or choose another --out")
    elif out.exists() and any(out.iterdir()):
        raise CcplabError(f"output directory {out} is not empty and holds no sweep.toml: choose another --out")
    for spec in sweep.scenarios:  # check the CCAs and generate traces before the directory exists
        if spec.trace is not None:
            sc.check_trace(spec.trace)
    for flows in sweep.entry_flows():
        parse_entry(flows)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    if not copy.exists():
        write_atomic(copy, text)
    for spec in sweep.scenarios:
        if spec.trace is None and not trace_path(out, spec).exists():
            sc.generate_step_trace(trace_path(out, spec), spec.steps, spec.duration_s, spec.sigma_mbps,
                                   spec.trace_seed)
    return out


def trace_path(out: Path, spec: ScenarioSpec) -> Path:
    """The trace a scenario's runs replay: the user's file, or the generated one in ``out/traces``."""
    return spec.trace if spec.trace is not None else out / "traces" / f"{spec.name}.trace"


def pending(sweep: Sweep, out: Path, retry_failed: bool = False) -> tuple[list[RunSpec], int]:
    """The plan's runs still to do, in plan order, and how many are already done (or recorded failed)."""
    st = out / "store"
    todo, done = [], 0
    for r in sweep.plan():
        key = (sweep.name, r.scenario.name, r.cca_slug, r.repetition)
        if store.has_run(st, "runs", *key) or (not retry_failed and store.has_run(st, "failed", *key)):
            done += 1
        else:
            todo.append(r)
    return todo, done


def payload(sweep: Sweep, out: Path, spec: RunSpec, dest: str, policy: ValidityPolicy = ValidityPolicy()) -> dict:
    """What a worker needs for one run besides the trace's bytes (plain data: it may travel to another host)."""
    s = spec.scenario
    return {"sweep": sweep.name, "run_id": spec.run_id, "cca": spec.cca, "flows": list(spec.flow_texts),
            "repetition": spec.repetition,
            "cca_slug": spec.cca_slug, "scenario": s.name, "one_way_delay_ms": s.one_way_delay_ms,
            "queue_packets": s.queue_packets, "duration_s": s.duration_s,
            "steps": [str(x) for x in s.steps], "trace_name": trace_path(out, s).name, "dest": dest,
            "quickack": s.quickack, **s.datapath(),
            "max_fallback_share": policy.max_fallback_share, "keep_invalid": policy.keep_invalid}


def execute(sweep: Sweep, out: Path, *, scheduler: str | None = None, workers: int = 1,
            retry_failed: bool = False, dest: str | None = None, progress: bool | None = None,
            run_fn: Callable[[dict, bytes], dict] | None = None, use_dask: bool = True,
            policy: ValidityPolicy = ValidityPolicy()) -> SweepSummary:
    """Run every pending run of ``sweep`` into ``out``; returns a SweepSummary.

    ``scheduler``: a Dask scheduler address (tcp://HOST:8786) whose workers have
    ``netlab=1``; None starts a LocalCluster of ``workers`` worker processes with
    netlab=1 each (more than one on a host lets emulations share its CPUs; see
    docs/experiments.md, "Sweeps"). ``use_dask=False`` runs in this process instead. ``dest``: where
    raw run directories go (default ``out/runs``; any fsspec URL). ``progress``:
    a progress bar (default: when stderr is a terminal). ``run_fn(payload, trace_bytes)``:
    the task (default ``run_task``). ``policy``: what makes a ccp run valid (``ccplab.control``;
    an invalid run is recorded failed, see the module's doc). Each scenario's trace is read once and, on
    Dask, sent once to the cluster as a task (not copied into every run's task: the
    TPCCA grid is 1200 runs of 1.5 MB traces). KeyboardInterrupt stops the sweep; finished
    runs stay.
    """
    if run_fn is None and scheduler is None:  # real flows on this host: refuse now, not 2 x every run
        from .flows import check_flows
        from .run import preflight_flows

        for texts in sweep.entry_flows():
            flows = parse_entry(texts)
            for spec in sweep.scenarios:
                check_flows(flows, spec.duration_s)
            preflight_flows(flows)
    out = prepare(sweep, out)
    todo, done = pending(sweep, out, retry_failed)
    summary = SweepSummary(planned=len(todo) + done, skipped=done)
    if not todo:
        return summary
    dest = dest or str(out / "runs")
    run_fn = run_fn or run_task
    started = time.monotonic()
    with _Progress(len(todo) + done, done, sweep.name, progress) as bar:
        traces = {s.name: trace_path(out, s).read_bytes() for s in sweep.scenarios}
        results = (_dask_results if use_dask else _local_results)(
            run_fn, [payload(sweep, out, r, dest, policy) for r in todo], traces, scheduler, workers)
        for result in results:
            _record(out / "store", result, summary)
            bar.advance(result)
    summary.wall_s = time.monotonic() - started
    return summary


def _local_results(run_fn, payloads, traces, scheduler, workers):
    for p in payloads:
        yield run_fn(p, traces[p["scenario"]])


def _dask_results(run_fn, payloads, traces, scheduler, workers):
    """Submit every payload with resources netlab=1; yield the task results as they complete."""
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               resources={"netlab": 1}, dashboard_address=":0")
    try:
        with Client(cluster if cluster is not None else scheduler) as client:
            # one task per trace, not client.scatter: a task's result is recomputed when the worker
            # holding it dies (scattered data would be lost with it, failing every run that needs it)
            shared = {name: client.submit(_trace_bytes, data, key=f"ccplab-trace-{name}")
                      for name, data in traces.items()}
            futures = {client.submit(run_fn, p, shared[p["scenario"]], resources={"netlab": 1}, pure=False,
                                     key=f"ccplab-run-{p['sweep']}-{p['run_id']}"): p for p in payloads}
            for fut in as_completed(futures):
                try:
                    yield fut.result()
                except Exception as exc:  # e.g. KilledWorker: the run killed its workers repeatedly
                    p = futures[fut]
                    yield _failure(p, f"{type(exc).__name__}: {exc}", ATTEMPTS, 0.0)
    finally:
        if cluster is not None:
            cluster.close()


def _trace_bytes(data: bytes) -> bytes:
    """A trace's bytes as a Dask task result (see ``_dask_results``)."""
    return data


def _record(st: Path, result: dict, summary: SweepSummary) -> None:
    key = (result["sweep"], result["scenario"], result["cca_slug"], result["repetition"])
    summary.run_s += result.get("seconds", 0.0)
    if result["status"] == "finished":
        store.append(st, "steps", *key, result["steps"])
        store.append(st, "runs", *key, result["runs"])  # written last: its presence marks the run done
        summary.finished += 1
    else:
        row = pd.DataFrame([{k: result[k] for k in ("run_id", "cca", "repetition", "attempts", "error")}])
        row = row.rename(columns={"run_id": "sweep_run_id"})
        store.append(st, "failed", *key, row)
        summary.failed.append((result["run_id"], result["error"]))


class _Progress:
    """A rich progress bar with ETA and the last run; silent when stderr is not a terminal."""

    def __init__(self, total: int, done: int, name: str, enabled: bool | None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.total, self.done, self.name = total, done, name

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeRemainingColumn(), TextColumn("{task.fields[last]}"),
                                console=Console(stderr=True))
            self.bar.__enter__()
            self.task = self.bar.add_task(f"sweep {self.name}", total=self.total, completed=self.done, last="")
        return self

    def advance(self, result: dict) -> None:
        if self.enabled:
            state = "ok" if result["status"] == "finished" else "FAILED"
            self.bar.update(self.task, advance=1, last=f"{result['run_id']} {state}")

    def __exit__(self, *exc):
        if self.enabled:
            self.bar.__exit__(*exc)


# ------------------------------------------------------------------ the task (runs on a worker)


def real_flow(p: dict, scenario: sc.Scenario, run_dir: Path) -> None:
    """The flow of a run: ``ccplab.run.run_one`` on this host (root, BPF, namespaces)."""
    from .cleanup import find_leftovers
    from .run import run_flows

    _wait_for_clean_host(find_leftovers)
    run_flows(parse_entry(p.get("flows") or p["cca"].split()), scenario, run_dir, run_index=p["repetition"],
              policy=payload_policy(p))


def payload_policy(p: dict) -> ValidityPolicy:
    """The validity policy a payload carries (the default one when it carries none)."""
    default = ValidityPolicy()
    return ValidityPolicy(p.get("max_fallback_share", default.max_fallback_share),
                          p.get("keep_invalid", default.keep_invalid))


def parse_entry(texts):
    """A plan entry's flows from its ``--flow`` values (one CCA, e.g. ``("kernel:cubic",)``, or a set of
    flows); a string is taken as the values joined by spaces."""
    from .flows import parse_flows

    return parse_flows(texts.split() if isinstance(texts, str) else texts)


def run_task(p: dict, trace_bytes: bytes, flow: Callable[[dict, sc.Scenario, Path], None] = real_flow) -> dict:
    """One run on this host: flow, analysis, copy of the run directory to ``p["dest"]``; returns the tables.

    ``flow(p, scenario, run_dir)`` makes the run directory (``real_flow``; tests
    of the sweep machinery pass a synthetic one). Never raises for a failed
    run: after ATTEMPTS tries it returns ``status="failed"`` with the last
    error (so Dask does not retry it again); an invalid run (InvalidRunError:
    the datapath's evidence) fails at its first try, its directory published
    when the payload's ``keep_invalid`` kept it. KeyboardInterrupt passes.
    """
    started = time.monotonic()
    error = ""
    scratch = _scratch_dir(p)
    try:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                runs, steps = _run_and_analyse(p, trace_bytes, scratch, flow)
                _publish(scratch / "run", p["dest"], p["run_id"])
                runs = runs.assign(attempts=attempt, run_seconds=time.monotonic() - started)
                return {**_key(p), "status": "finished", "runs": runs, "steps": steps, "attempts": attempt,
                        "seconds": time.monotonic() - started}
            except InvalidRunError as exc:
                error = f"invalid run: {exc}"
                if (scratch / "run" / "metadata.json").is_file():  # kept (--keep-invalid), marked invalid
                    _publish(scratch / "run", p["dest"], p["run_id"])
                    error += f" (kept, marked invalid: {p['dest'].rstrip('/')}/{p['run_id']})"
                return _failure(p, error, attempt, time.monotonic() - started)
            except Exception as exc:  # any failure of a run is retried once, then recorded with its error
                error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, CcplabError) else str(exc)
                if not isinstance(exc, CcplabError):
                    error += "\n" + traceback.format_exc(limit=5)
        return _failure(p, error, ATTEMPTS, time.monotonic() - started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _scratch_dir(p: dict) -> Path:
    """This process's scratch directory for a run: ``$CCPLAB_SCRATCH/ccplab-sweep/<sweep>/<run_id>/w<pid>``.

    Per process, so two sweeps (or a rerun after a worker died) never share one;
    what dead processes left for the same run is removed here.
    """
    import psutil

    base = Path(os.environ.get("CCPLAB_SCRATCH", tempfile.gettempdir())) / "ccplab-sweep" / p["sweep"] / p["run_id"]
    if base.is_dir():
        for old in base.glob("w*"):
            if old.name[1:].isdigit() and not psutil.pid_exists(int(old.name[1:])):
                shutil.rmtree(old, ignore_errors=True)
    return base / f"w{os.getpid()}"


def _key(p: dict) -> dict:
    return {k: p[k] for k in ("sweep", "scenario", "cca_slug", "repetition", "run_id", "cca")}


def _failure(p: dict, error: str, attempts: int, seconds: float) -> dict:
    return {**_key(p), "status": "failed", "error": error, "attempts": attempts, "seconds": seconds}


def _run_and_analyse(p: dict, trace_bytes: bytes, scratch: Path, flow) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the flow into ``scratch/run`` (replacing what an interrupted attempt left) and analyse it."""
    import transient

    if scratch.exists():
        shutil.rmtree(scratch)  # an interrupted or unpublished earlier attempt: discarded, rerun
    scratch.mkdir(parents=True)
    trace = scratch / p["trace_name"]
    trace.write_bytes(trace_bytes)
    scenario = sc.Scenario(name=p["scenario"], trace=trace, one_way_delay_ms=p["one_way_delay_ms"],
                           queue_packets=p["queue_packets"], duration_s=p["duration_s"],
                           steps=sc.parse_step_args(p["steps"]),
                           trace_kind="step" if p["steps"] else "file", quickack=p.get("quickack", False),
                           **{s.field: p.get(s.field) for s in sc.DATAPATH_SETTINGS})
    flow(p, scenario, scratch / "run")
    from transient.analyze import invalid_reason

    reason = invalid_reason(scratch / "run")
    if reason is not None:  # the runner kept it (--keep-invalid): listed apart, never scored
        raise InvalidRunError(reason)
    try:
        a = transient.analyze_all(scratch / "run")
    except transient.TransientError as exc:
        raise CcplabError(f"analysis of {p['run_id']} failed: {exc}") from exc
    extra = {"sweep_run_id": p["run_id"], "repetition": p["repetition"]}
    return a.runs.assign(**extra), a.steps.assign(**extra)


def _wait_for_clean_host(find_leftovers) -> None:
    """Wait (bounded) until a killed run's daemons on this host have cleaned up; the run's preflight
    then reports anything that is still there."""
    deadline = time.monotonic() + LEFTOVER_WAIT_S
    while find_leftovers().host_state() and time.monotonic() < deadline:
        time.sleep(0.2)  # poll interval of a bounded wait


def _publish(local: Path, dest: str, run_id: str) -> None:
    """Copy a finished run directory to ``dest/run_id`` (local path or fsspec URL), replacing a stale copy."""
    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    fs, root = fsspec.core.url_to_fs(dest)
    target = f"{root.rstrip('/')}/{run_id}"
    if fs.exists(target):
        fs.rm(target, recursive=True)  # a copy from an attempt whose rows never reached the store
    fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
    if isinstance(fs, LocalFileSystem):
        shutil.move(str(local), target)
    else:
        fs.put(str(local), target, recursive=True)
