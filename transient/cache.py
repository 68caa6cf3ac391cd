"""Parquet cache of parsed mm-link logs, beside the log (``uplink.log`` -> ``uplink.log.parquet``).

The cache holds `LinkLog.events` (kind as int8 codes) and, in the Parquet
schema metadata, the header, base timestamp, time origin, this reader's
`CACHE_VERSION` and the log's size and modification time (ns).  It is used
only when all of these match the log on disk, so editing, replacing or
re-running a log re-parses it; a cache from an older reader is ignored too.
Writes go through `transient.atomic.write_atomic`; a directory that is not
writable (e.g. a read-only results archive) just goes uncached.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .atomic import write_atomic
from .mahimahi import EVENT_KINDS, LinkLog, parse_link_bytes

CACHE_VERSION = 1
"""Bump when the parsed representation changes: older caches are then re-parsed."""

_META_KEY = b"ccplab.linklog"


def cache_path(log_path: Path) -> Path:
    """Where the cache of ``log_path`` lives: the same name + ``.parquet``."""
    return log_path.with_name(log_path.name + ".parquet")


def _stamp(st: os.stat_result) -> dict:
    return {"version": CACHE_VERSION, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _load(cpath: Path, stamp: dict, name: str) -> LinkLog | None:
    try:
        table = pq.read_table(cpath)
        meta = json.loads(table.schema.metadata[_META_KEY])
    except (OSError, KeyError, TypeError, ValueError, pa.ArrowException):
        return None
    if meta.get("stamp") != stamp:
        return None
    cols = {c: table.column(c).to_numpy() for c in ("time_ms", "kind", "bytes", "delay_ms", "packets")}
    events = pd.DataFrame({
        "time_ms": cols["time_ms"].astype(np.int64, copy=False),
        "kind": pd.Categorical.from_codes(cols["kind"].astype(np.int8), categories=list(EVENT_KINDS)),
        "bytes": cols["bytes"].astype(np.int64, copy=False),
        "delay_ms": cols["delay_ms"].astype(np.float64, copy=False),
        "packets": cols["packets"].astype(np.int64, copy=False),
    })
    return LinkLog(name, meta["header"], meta["base"], meta["origin"], events)


def _store(cpath: Path, log: LinkLog, stamp: dict) -> None:
    ev = log.events
    table = pa.table({
        "time_ms": ev["time_ms"].to_numpy(),
        "kind": ev["kind"].cat.codes.to_numpy().astype(np.int8),
        "bytes": ev["bytes"].to_numpy(),
        "delay_ms": ev["delay_ms"].to_numpy(),
        "packets": ev["packets"].to_numpy(),
    })
    meta = {"stamp": stamp, "header": log.header, "base": log.base_timestamp_ms, "origin": log.time_origin}
    table = table.replace_schema_metadata({_META_KEY: json.dumps(meta).encode()})
    out = io.BytesIO()
    pq.write_table(table, out, compression="none")  # encodings alone give ~40 % of the log; reading is fastest
    try:
        write_atomic(cpath, out.getvalue())
    except OSError:
        pass  # read-only directory: analyse uncached rather than fail


def cached_read(log_path: Path) -> LinkLog:
    """`read_link_log` through the cache: load it when fresh, else parse and (re)write it.

    Raises what `transient.mahimahi.parse_link_bytes` raises, and OSError
    when the log itself cannot be read.
    """
    with open(log_path, "rb") as f:
        stamp = _stamp(os.fstat(f.fileno()))
        cpath = cache_path(log_path)
        log = _load(cpath, stamp, str(log_path))
        if log is not None:
            return log
        raw = f.read()
    log = parse_link_bytes(raw, str(log_path))
    _store(cpath, log, stamp)
    return log
