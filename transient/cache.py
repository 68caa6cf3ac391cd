"""Parquet cache of parsed mm-link logs, beside the log (``uplink.log`` -> ``uplink.log.parquet``).

The cache holds `LinkLog.events` (kind as int8 codes) and, in the Parquet
schema metadata, the header, base timestamp, time origin, this reader's
`CACHE_VERSION` and the log's size and modification time (ns).  It is used
only when all of these match the log on disk, so editing, replacing or
re-running a log re-parses it; a cache from an older reader is ignored too.
Writes go to a temporary file renamed over the cache; a directory that is not
writable (e.g. a read-only results archive) just goes uncached.

A one-flow log's per-ms reduction (what `transient.stream` computes, all
the analysis of such a log reads) has a cache of its own beside the log,
``<log>.ms.npz`` (`cached_log_arrays`), stamped and replaced the same way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from ._lazy import lazy_module
from .mahimahi import LinkColumns, LinkLog, parse_link_file
from .cachefiles import CACHE_VERSION, STREAMING_BYTES, arrays_cache_path, cache_path  # noqa: F401 - public here too
from .reducer import reduce_to


_META_KEY = "ccplab.linklog"

pl = lazy_module("polars")  # only the event cache needs it: a big log's per-ms cache is read with numpy alone


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


# The per-ms reduction of a one-flow log (`transient.stream`), what the analysis of such a log reads: one
# uncompressed numpy archive (.npz) of its compact per-ms arrays (`transient.series.compact`: a byte or two
# per ms for most), the departures' delays as a histogram when they are whole (only their percentiles and
# minimum are used), and a JSON header. Written and read at memory speed, with numpy alone.
_MS_COLUMNS = {(0, "count"): "arrival_count", (0, "bytes"): "arrival_bytes", (1, "count"): "departure_count",
               (1, "bytes"): "departure_bytes", (2, "bytes"): "opportunity_bytes", (3, "packets"): "drop_packets"}
_KINDS = ("arrival", "departure", "opportunity", "drop")
_HISTOGRAM_MAX = 1 << 24  # whole delays below it (ms) are stored as counts per value


def _store_arrays(cpath: Path, arrays, stamp: dict) -> None:
    d = arrays.dep_delay_ms
    columns = {name: arrays.ms_sum(_KINDS[c], what) for (c, what), name in _MS_COLUMNS.items()}
    columns |= {"queueing": arrays.queueing_ms_sum, "peak_delay": arrays.peak_delay_ms,
                "sent_min_delay": arrays.sent_min_delay}
    histogram = d.dtype.kind in "iu" and (d.size == 0 or (int(d.min()) >= 0 and int(d.max()) < _HISTOGRAM_MAX))
    if histogram:
        from .series import compact

        columns["delay_counts"] = compact(np.bincount(d))
    else:
        columns["delay_values"] = d
    meta = {"stamp": stamp, "n_events": arrays.n_events, "first_ms": arrays.first_ms,
            "first_event_ms": arrays.first_event_ms, "has_packets": bool(arrays.n_flows),
            "sent_lo": arrays.sent_lo, "data_ms": arrays.data_ms, "delay_dtype": d.dtype.str}
    columns["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    tmp = cpath.with_name(f".{cpath.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **columns)
        os.replace(tmp, cpath)
    except OSError:
        pass  # read-only directory: analyse uncached rather than fail
    finally:
        tmp.unlink(missing_ok=True)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an uncompressed ``.npz`` archive (as `numpy.savez` and ``ccplab-logreduce`` write
    it), by name: the file mapped (copy-on-write), each array a view of it (writable).
    ``np.load`` reads each member apart through zipfile, checksum and all: several times as long for a
    big log's cache, which is loaded right after it is written. (A cache cut in place while mapped would
    fault; its writers only ever rename a whole new one over it.)

    Raises OSError, ValueError (a compressed member, an object dtype, an array past the file's end) or
    zipfile.BadZipFile.
    """
    import io
    import zipfile

    from numpy.lib import format as npy

    import mmap

    with open(path, "rb") as f:
        # mapped copy-on-write: the pages the system already holds, no copy; the arrays stay writable
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        members = zipfile.ZipFile(f).infolist()  # the central directory at the end alone
    view = memoryview(buf)
    out = {}
    for info in members:
        at = info.header_offset
        if info.compress_type != zipfile.ZIP_STORED or view[at : at + 4] != b"PK\x03\x04":
            raise ValueError(f"{path}: {info.filename} is not a stored member")
        start = at + 30 + int.from_bytes(view[at + 26 : at + 28], "little") + \
            int.from_bytes(view[at + 28 : at + 30], "little")
        head = io.BytesIO(view[start : start + min(info.file_size, 1 << 16)])
        version = npy.read_magic(head)
        shape, fortran, dtype = (npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0)(head)
        if dtype.hasobject:
            raise ValueError(f"{path}: {info.filename} holds Python objects")
        count = int(np.prod(shape, dtype=np.int64))
        if head.tell() + count * dtype.itemsize > info.file_size:
            raise ValueError(f"{path}: {info.filename} is cut")
        arr = np.frombuffer(buf, dtype, count, offset=start + head.tell())
        out[info.filename.removesuffix(".npy")] = arr.reshape(shape, order="F" if fortran else "C")
    return out


def _load_arrays(cpath: Path, stamp: dict):
    import zipfile

    from .series import LogArrays

    try:
        z = _read_npz(cpath)
        meta = json.loads(z["meta"].tobytes())
        if meta.get("stamp") != stamp:
            return None
        sums = {key: z[name] for key, name in _MS_COLUMNS.items()}
        if "delay_counts" in z:
            counts = z["delay_counts"]
            delays = np.repeat(np.arange(counts.size, dtype=np.dtype(meta["delay_dtype"])), counts)
        else:
            delays = z["delay_values"]
        data_ms = meta["data_ms"]
        return LogArrays.from_ms_sums(
            n_events=meta["n_events"], first_ms=meta["first_ms"], first_event_ms=meta["first_event_ms"],
            has_packets=meta["has_packets"], sums=sums, dep_delay_ms=delays, queueing_ms_sum=z["queueing"],
            peak_delay_ms=z["peak_delay"], sent_lo=meta["sent_lo"], sent_min_delay=z["sent_min_delay"],
            data_ms=tuple(data_ms) if data_ms is not None else None)
    except (OSError, KeyError, TypeError, ValueError, EOFError, zipfile.BadZipFile):
        return None


def cached_log_arrays(log_path: Path):
    """`transient.stream.stream_log_arrays` through a cache beside the log (``<log>.ms.npz``,
    `arrays_cache_path`): loaded when fresh (same log size and modification time, same `CACHE_VERSION`);
    else, for a log of at most 32 MB with a fresh event cache (`cache_path`, e.g. the runner's), reduced
    from those events; else the compiled reducer (`transient.reducer`) writes the cache and it is loaded,
    or, where that is not built or declines the log, the log is streamed in Python and the cache
    (re)written (an unwritable directory only skips it).

    Returns None when the log must be read as events (see `stream_log_arrays`); raises what it raises.
    """
    from .series import LogArrays
    from .stream import stream_log_arrays

    with open(log_path, "rb") as f:
        stamp = _stamp(os.fstat(f.fileno()))
    cpath = arrays_cache_path(log_path)
    arrays = _load_arrays(cpath, stamp)
    if arrays is not None:
        return arrays
    if stamp["size"] <= STREAMING_BYTES and cache_path(log_path).exists():
        # the events are already parsed: reading them beats the text (a big log is streamed instead,
        # so its events are never all in memory)
        cols = _load(cache_path(log_path), stamp, str(log_path))
        if cols is not None:
            return LogArrays.from_columns(cols.time_ms, cols.code, cols.nbytes, cols.delay_ms, cols.packets)
    if os.access(cpath.parent, os.W_OK):
        if reduce_to(log_path, cpath):  # the compiled reducer writes the cache itself
            arrays = _load_arrays(cpath, stamp)
            if arrays is not None:
                return arrays
        arrays = stream_log_arrays(log_path)
        if arrays is not None:
            _store_arrays(cpath, arrays, stamp)
        return arrays
    return reduced_log_arrays(log_path)  # read-only directory: analyse uncached rather than fail


def reduced_log_arrays(log_path: Path):
    """`transient.stream.stream_log_arrays` of ``log_path`` without a cache beside it: by the compiled
    reducer (`transient.reducer`) through a temporary archive when it is built and takes the log, else
    by the Python streaming reader. Returns None and raises as `stream_log_arrays`."""
    import tempfile

    from .stream import stream_log_arrays

    with open(log_path, "rb") as f:
        stamp = _stamp(os.fstat(f.fileno()))
    with tempfile.TemporaryDirectory(prefix="transient-ms-") as tmp:
        out = Path(tmp) / "log.ms.npz"
        if reduce_to(log_path, out):
            arrays = _load_arrays(out, stamp)
            if arrays is not None:
                return arrays
    return stream_log_arrays(log_path)
