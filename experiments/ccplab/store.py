"""The sweep results store: Parquet datasets that pandas, polars or DuckDB read directly.

Layout under ``<sweep dir>/store/`` (hive partitioning, one file per run, so
appending a run is writing one file, atomically)::

    runs/sweep=<name>/scenario=<scenario>/<cca>-run-<k>.parquet    one row per run
    steps/sweep=<name>/scenario=<scenario>/<cca>-run-<k>.parquet   one row per (run, step)
    failed/sweep=<name>/scenario=<scenario>/<cca>-run-<k>.parquet  a run that failed twice:
                                                                   run_id, cca, repetition, attempts, error

Columns of runs/steps are the analysis engine's (``transient.Analysis``; see
the transient contract) plus ``sweep_run_id`` (= ``<scenario>/<cca>/run-<k>``,
also the raw run directory under ``runs/``), ``repetition``, ``attempts``
and ``run_seconds``. ``sweep`` and ``scenario`` come from the partition
path. Read e.g. ``pandas.read_parquet(".../store/runs")`` or DuckDB's
``read_parquet('.../store/runs/**/*.parquet', hive_partitioning = true)``.
"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ccplab_util.atomic import write_atomic

TABLES = ("runs", "steps", "failed")
PARTITION_COLUMNS = ("sweep", "scenario")
BOOL_COLUMNS = {"converged"}
STRING_COLUMNS = {"run_id", "sweep_run_id", "cca", "cca_params", "label", "scenario", "trace_kind", "method",
                  "kind", "response_class", "path", "error"}


def run_file(store: Path, table: str, sweep: str, scenario: str, cca_slug: str, repetition: int) -> Path:
    """Path of one run's file in ``table``."""
    return store / table / f"sweep={sweep}" / f"scenario={scenario}" / f"{cca_slug}-run-{repetition}.parquet"


def append(store: Path, table: str, sweep: str, scenario: str, cca_slug: str, repetition: int,
           frame: pd.DataFrame) -> Path:
    """Write ``frame`` as one run's file of ``table`` (atomically; partition columns dropped from the data)."""
    path = run_file(store, table, sweep, scenario, cca_slug, repetition)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _arrow(frame.drop(columns=[c for c in PARTITION_COLUMNS if c in frame.columns]))
    buf = io.BytesIO()
    pq.write_table(data, buf)
    return write_atomic(path, buf.getvalue())


def has_run(store: Path, table: str, sweep: str, scenario: str, cca_slug: str, repetition: int) -> bool:
    return run_file(store, table, sweep, scenario, cca_slug, repetition).is_file()


def read(store: Path, table: str) -> pd.DataFrame:
    """A whole table of the store as one DataFrame (partition columns included); empty if none."""
    root = store / table
    if not root.is_dir() or not any(root.rglob("*.parquet")):
        return pd.DataFrame()
    frame = pd.read_parquet(root)
    for col in PARTITION_COLUMNS:
        if col in frame.columns:
            frame[col] = frame[col].astype(str)
    return frame


def _arrow(frame: pd.DataFrame) -> pa.Table:
    """Arrow table with a type for every column, so every run's file has the same schema:
    a column that is all null in one run (no step converged) still gets its real type."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    fields = []
    for f in table.schema:
        if pa.types.is_null(f.type):
            kind = pa.bool_() if f.name in BOOL_COLUMNS else pa.string() if f.name in STRING_COLUMNS else pa.float64()
            fields.append(pa.field(f.name, kind))
        else:
            fields.append(f)
    return table.cast(pa.schema(fields))
