"""Parquet cache of parsed mm-link logs, beside the log (``uplink.log`` -> ``uplink.log.parquet``).

The cache holds `LinkLog.events` (kind as int8 codes) and, in the Parquet
schema metadata, the header, base timestamp, time origin, this reader's
`CACHE_VERSION` and the log's size and modification time (ns).  It is used
only when all of these match the log on disk, so editing, replacing or
re-running a log re-parses it; a cache from an older reader is ignored too.
Writes go to a temporary file renamed over the cache; a directory that is not
writable (e.g. a read-only results archive) just goes uncached.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import polars as pl

from .mahimahi import LinkColumns, LinkLog, parse_link_file

CACHE_VERSION = 1
"""Bump when the parsed representation changes: older caches are then re-parsed."""

_META_KEY = "ccplab.linklog"


def cache_path(log_path: Path) -> Path:
    """Where the cache of ``log_path`` lives: the same name + ``.parquet``."""
    return log_path.with_name(log_path.name + ".parquet")


def _stamp(st: os.stat_result) -> dict:
    return {"version": CACHE_VERSION, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _load(cpath: Path, stamp: dict, name: str) -> LinkColumns | None:
    try:
        meta = json.loads(pl.read_parquet_metadata(cpath)[_META_KEY])
        if meta.get("stamp") != stamp:
            return None
        df = pl.read_parquet(cpath, columns=["time_ms", "kind", "bytes", "delay_ms", "packets"])
    except (OSError, KeyError, TypeError, ValueError, pl.exceptions.PolarsError):
        return None
    cols = {c: df.drop_in_place(c).to_numpy() for c in ("time_ms", "kind", "bytes", "delay_ms", "packets")}
    return LinkColumns(name, meta["header"], meta["base"], meta["origin"],
                       cols["time_ms"].astype(np.int64, copy=False), cols["kind"].astype(np.int8, copy=False),
                       cols["bytes"], cols["delay_ms"].astype(np.float64, copy=False), cols["packets"])


def _store(cpath: Path, cols: LinkColumns, stamp: dict) -> None:
    df = pl.DataFrame({
        "time_ms": cols.time_ms,
        "kind": cols.code.astype(np.int8, copy=False),
        "bytes": cols.nbytes,
        "delay_ms": cols.delay_ms,
        "packets": cols.packets,
    })
    meta = {"stamp": stamp, "header": cols.header, "base": cols.base_timestamp_ms, "origin": cols.time_origin}
    try:
        _write_table(cpath, df, {_META_KEY: json.dumps(meta)})
    except (OSError, pl.exceptions.PolarsError):
        pass  # read-only directory: analyse uncached rather than fail


def _write_table(cpath: Path, df: pl.DataFrame, metadata: dict[str, str]) -> None:
    """Write the cache straight to a temporary file beside it, then rename it over (never half a cache;
    not built in memory first: a big log's cache is hundreds of MB). Uncompressed: the encodings alone
    give ~40 % of the log, and it reads fastest."""
    tmp = cpath.with_name(f".{cpath.name}.{os.getpid()}.tmp")
    try:
        df.write_parquet(tmp, compression="uncompressed", metadata=metadata)
        os.replace(tmp, cpath)
    finally:
        tmp.unlink(missing_ok=True)


def cached_columns(log_path: Path) -> LinkColumns:
    """`transient.mahimahi.read_link_columns` through the cache: load it when fresh, else parse and (re)write it.

    Raises what `transient.mahimahi.parse_link_bytes` raises, and OSError
    when the log itself cannot be read.
    """
    with open(log_path, "rb") as f:
        stamp = _stamp(os.fstat(f.fileno()))
    cpath = cache_path(log_path)
    cols = _load(cpath, stamp, str(log_path))
    if cols is not None:
        return cols
    cols = parse_link_file(log_path)
    _store(cpath, cols, stamp)
    return cols


def cached_read(log_path: Path) -> LinkLog:
    """`read_link_log` through the cache (see `cached_columns`)."""
    return cached_columns(log_path).to_log()
