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


# The per-ms reduction of a one-flow log (`transient.stream`), what the analysis of such a log reads:
# one table, padded with nulls to its longest column, the true lengths in the metadata; written a slice
# of rows at a time and read a column at a time (pyarrow), so no more than one column is ever held twice.
_ARRAYS_KEY = b"ccplab.logarrays"
_MS_COLUMNS = {(0, "count"): "arrival_count", (0, "bytes"): "arrival_bytes", (1, "count"): "departure_count",
               (1, "bytes"): "departure_bytes", (2, "bytes"): "opportunity_bytes", (3, "packets"): "drop_packets"}
_KINDS = ("arrival", "departure", "opportunity", "drop")
_SLICE_ROWS = 1 << 18


def arrays_cache_path(log_path: Path) -> Path:
    """Where the per-ms reduction of ``log_path`` lives: the same name + ``.ms.parquet``."""
    return log_path.with_name(log_path.name + ".ms.parquet")


def _whole_slice(values: np.ndarray, lo: int, hi: int):
    """Rows lo..hi of a column of whole numbers as a pyarrow int64 array: NaN and inf as null, and null
    beyond its end (Parquet's encodings keep such columns small: most per-ms figures repeat a few values)."""
    import pyarrow as pa

    part = np.asarray(values)[lo:hi]
    missing = np.zeros(hi - lo, bool)
    if part.dtype.kind == "f":
        gone = ~np.isfinite(part)
        part = np.where(gone, 0, part)
        missing[: part.size] = gone
    whole = np.zeros(hi - lo, np.int64)
    whole[: part.size] = part
    missing[part.size :] = True
    return pa.array(whole, mask=missing if missing.any() else None)


def _store_arrays(cpath: Path, arrays, stamp: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    values, counts = np.unique(arrays.dep_delay_ms, return_counts=True)  # only their percentiles are used
    columns = {name: arrays.ms_sum(_KINDS[c], what) for (c, what), name in _MS_COLUMNS.items()}
    columns |= {"queueing": arrays.queueing_ms_sum, "peak_delay": arrays.peak_delay_ms,
                "sent_min_delay": arrays.sent_min_delay, "delay_value": values, "delay_count": counts}
    length = max(v.size for v in columns.values())
    meta = {"stamp": stamp, "n_events": arrays.n_events, "first_ms": arrays.first_ms,
            "first_event_ms": arrays.first_event_ms, "has_packets": bool(arrays.n_flows),
            "sent_lo": arrays.sent_lo, "data_ms": arrays.data_ms,
            "lengths": {k: int(v.size) for k, v in columns.items()},
            "int64": [name for (c, what), name in _MS_COLUMNS.items()
                      if arrays.ms_sum(_KINDS[c], what).dtype == np.int64]}
    schema = pa.schema([(k, pa.int64()) for k in columns], metadata={_ARRAYS_KEY: json.dumps(meta).encode()})
    tmp = cpath.with_name(f".{cpath.name}.{os.getpid()}.tmp")
    try:
        with pq.ParquetWriter(tmp, schema, compression="none") as writer:
            for lo in range(0, length, _SLICE_ROWS):
                hi = min(lo + _SLICE_ROWS, length)
                writer.write_table(pa.table([_whole_slice(v, lo, hi) for v in columns.values()], schema=schema))
        os.replace(tmp, cpath)
    except OSError:
        pass  # read-only directory: analyse uncached rather than fail
    finally:
        tmp.unlink(missing_ok=True)


def _load_arrays(cpath: Path, stamp: dict):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .series import LogArrays

    try:
        pf = pq.ParquetFile(cpath)
        meta = json.loads(pf.schema_arrow.metadata[_ARRAYS_KEY])
        if meta.get("stamp") != stamp:
            return None
        lengths = meta["lengths"]

        def column(name: str, fill: float | None) -> np.ndarray:
            col = pf.read(columns=[name]).column(0).slice(0, lengths[name])
            missing = col.is_null().to_numpy(zero_copy_only=False) if col.null_count else None
            whole = (col.fill_null(0) if missing is not None else col).to_numpy()
            del col
            if fill is None:
                return whole
            out = whole.astype(np.float64)
            if missing is not None:
                out[missing] = fill
            return out

        sums = {key: column(name, 0.0) for key, name in _MS_COLUMNS.items()}
        for key, name in _MS_COLUMNS.items():
            if name in meta["int64"]:
                sums[key] = sums[key].astype(np.int64)
        values, counts = column("delay_value", 0.0), column("delay_count", None)
        data_ms = meta["data_ms"]
        arrays = LogArrays.from_ms_sums(
            n_events=meta["n_events"], first_ms=meta["first_ms"], first_event_ms=meta["first_event_ms"],
            has_packets=meta["has_packets"], sums=sums, dep_delay_ms=np.repeat(values, counts),
            queueing_ms_sum=column("queueing", 0.0), peak_delay_ms=column("peak_delay", np.nan),
            sent_lo=meta["sent_lo"], sent_min_delay=column("sent_min_delay", np.inf),
            data_ms=tuple(data_ms) if data_ms is not None else None)
    except (OSError, KeyError, TypeError, ValueError, pa.ArrowException):
        return None
    pa.default_memory_pool().release_unused()
    return arrays


def cached_log_arrays(log_path: Path):
    """`transient.stream.stream_log_arrays` through a cache beside the log (``<log>.ms.parquet``,
    `arrays_cache_path`): loaded when fresh (same log size and modification time, same `CACHE_VERSION`);
    else, for a log of at most 32 MB with a fresh event cache (`cache_path`, e.g. the runner's), reduced
    from those events; else the log is streamed and the cache (re)written (an unwritable directory only
    skips it).

    Returns None when the log must be read as events (see `stream_log_arrays`); raises what it raises.
    """
    from .mahimahi import _STREAMING_BYTES
    from .series import LogArrays
    from .stream import stream_log_arrays

    with open(log_path, "rb") as f:
        stamp = _stamp(os.fstat(f.fileno()))
    cpath = arrays_cache_path(log_path)
    arrays = _load_arrays(cpath, stamp)
    if arrays is not None:
        return arrays
    if stamp["size"] <= _STREAMING_BYTES and cache_path(log_path).exists():
        # the events are already parsed: reading them beats the text (a big log is streamed instead,
        # so its events are never all in memory)
        cols = _load(cache_path(log_path), stamp, str(log_path))
        if cols is not None:
            return LogArrays.from_columns(cols.time_ms, cols.code, cols.nbytes, cols.delay_ms, cols.packets)
    arrays = stream_log_arrays(log_path)
    if arrays is not None:
        _store_arrays(cpath, arrays, stamp)
    return arrays
