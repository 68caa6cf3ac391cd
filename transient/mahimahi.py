"""Reader for mahimahi mm-link packet logs (``--uplink-log`` / ``--downlink-log``).

Format (mahimahi, ``src/frontend/link_queue.cc``; also written by ccplab's
runner):

* header lines start with ``#``, e.g. ``# base timestamp: 1732270000000``,
  ``# queue: droptail [packets=40]``, ``# command line: ...``;
* one event per line, times in integer milliseconds:

  ====================  ==========================================================
  ``t + size``          arrival of a packet of ``size`` bytes at the queue
  ``t - size delay``    departure (delivery); ``delay`` = ms spent in the link
                        (queueing + transmission)
  ``t # size``          a delivery opportunity (used or not), normally 1504 bytes
  ``t d npkts nbytes``  ``npkts`` packets totalling ``nbytes`` bytes dropped
  ====================  ==========================================================

Sizes include mahimahi's 4-byte TUN header (a full packet is 1504 bytes).

Time origin: ccplab's runner writes event times relative to the base
timestamp (time 0 = start of trace replay) and an epoch base timestamp.
Original mahimahi writes both the base timestamp and the event times on its
own monotonic clock, and mm-throughput-graph subtracts the base.  The reader
handles both: when every event time is >= the base timestamp, the base is
subtracted (``LinkLog.time_origin == "base-subtracted"``); otherwise the
times are taken as already relative (``"relative"``).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import LogFormatError

EVENT_KINDS = ("arrival", "departure", "opportunity", "drop")
"""Categories of ``LinkLog.events['kind']``."""

_SYMBOL_TO_KIND = {"+": "arrival", "-": "departure", "#": "opportunity", "d": "drop"}
_COLUMNS = ["time_ms", "symbol", "f1", "f2", "extra"]


@dataclass(frozen=True)
class LinkLog:
    """A parsed mm-link log.

    Attributes:
        path: the file it was read from (or "<text>").
        header: ``# key: value`` header lines as ``{key: value}`` (a header
            line without ``:`` is stored with an empty value).
        base_timestamp_ms: the ``# base timestamp:`` value, or None.
        time_origin: "relative" or "base-subtracted" (see module docstring).
        events: one row per event line, in file order, columns
            ``time_ms`` (int64, ms since trace start), ``kind`` (category:
            arrival/departure/opportunity/drop), ``bytes`` (int64, bytes incl.
            TUN header; for drops the total dropped), ``delay_ms`` (float64,
            NaN unless departure), ``packets`` (int64; 1, or npkts for drops).
    """

    path: str
    header: dict[str, str]
    base_timestamp_ms: int | None
    time_origin: str
    events: pd.DataFrame


def read_link_log(path: str | Path) -> LinkLog:
    """Read a mahimahi mm-link log file.

    Raises:
        FileNotFoundError / OSError: the file cannot be read.
        LogFormatError: a malformed line (naming the file and 1-based line:
            unknown event kind, missing or extra field, non-integer time or
            size, negative delay), a bad base timestamp, or no events at all.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LogFormatError(str(path), None, f"not UTF-8 text ({exc})") from None
    return parse_link_log(text, str(path))


def parse_link_log(text: str, name: str = "<text>") -> LinkLog:
    """Parse the text of an mm-link log; see `read_link_log`. ``name`` is used in errors."""
    lines = text.split("\n")
    header_lines: list[tuple[int, str]] = []
    event_lines: list[str] = []
    event_lineno: list[int] = []
    # One pass in Python over the lines is needed anyway to split headers from
    # events and remember line numbers for error messages; the fields
    # themselves are parsed by pandas' C reader below.
    for i, line in enumerate(lines):
        if not line or line.isspace():
            continue
        if line[0] == "#":
            header_lines.append((i + 1, line))
        else:
            event_lines.append(line)
            event_lineno.append(i + 1)
    header, base = _parse_header(header_lines, name)
    if not event_lines:
        raise LogFormatError(name, None, "log has no events (only header lines or empty)")
    lineno = np.asarray(event_lineno, dtype=np.int64)
    raw = _read_fields(event_lines, lineno, name)
    events = _build_events(raw, lineno, name)
    origin = "relative"
    if base is not None and len(events) and int(events["time_ms"].min()) >= base:
        events["time_ms"] -= base
        origin = "base-subtracted"
    return LinkLog(name, header, base, origin, events)


def _parse_header(header_lines: list[tuple[int, str]], name: str) -> tuple[dict[str, str], int | None]:
    header: dict[str, str] = {}
    for _, line in header_lines:
        body = line[1:].strip()
        key, sep, value = body.partition(":")
        header[key.strip()] = value.strip() if sep else ""
    base = None
    for lineno, line in header_lines:
        m = re.match(r"#\s*base timestamp:\s*(\S*)", line)
        if m:
            if base is not None:
                raise LogFormatError(name, lineno, "base timestamp defined twice")
            try:
                base = int(m.group(1))
            except ValueError:
                raise LogFormatError(name, lineno, f"base timestamp {m.group(1)!r} is not an integer") from None
    return header, base


def _read_fields(event_lines: list[str], lineno: np.ndarray, name: str) -> pd.DataFrame:
    """Split event lines into up to 5 whitespace-separated fields (C parser)."""
    try:
        return pd.read_csv(
            io.StringIO("\n".join(event_lines)),
            sep=r"\s+",
            header=None,
            names=_COLUMNS,
            dtype={"symbol": str},
            comment=None,
            skip_blank_lines=False,
            engine="c",
        )
    except pd.errors.ParserError as exc:
        # pandas reports "Expected 5 fields in line N, saw M" with N 1-based
        # over the event lines it was given.
        m = re.search(r"line (\d+), saw (\d+)", str(exc))
        if m:
            row = int(m.group(1)) - 1
            line = int(lineno[row]) if 0 <= row < len(lineno) else None
            raise LogFormatError(name, line, f"too many fields ({m.group(2)}); expected at most 4") from None
        raise LogFormatError(name, None, f"cannot split into fields: {exc}") from None


def _numeric(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Return (values as float64 with NaN where missing/invalid, mask of invalid tokens)."""
    if pd.api.types.is_numeric_dtype(col.dtype):
        vals = col.to_numpy(dtype=np.float64, na_value=np.nan)
        return vals, np.zeros(len(col), dtype=bool)
    num = pd.to_numeric(col, errors="coerce")
    vals = num.to_numpy(dtype=np.float64, na_value=np.nan)
    invalid = col.notna().to_numpy() & np.isnan(vals)
    return vals, invalid


def _tok(value: object) -> str:
    """Show a parsed field as it was written (pandas turns '7' into 7.0)."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return repr(str(int(value)))
    if isinstance(value, (int, np.integer, float, np.floating)):
        return repr(str(value))
    return repr(value)


def _build_events(raw: pd.DataFrame, lineno: np.ndarray, name: str) -> pd.DataFrame:
    symbol = raw["symbol"].to_numpy(dtype=object)
    t, t_bad = _numeric(raw["time_ms"])
    f1, f1_bad = _numeric(raw["f1"])
    f2, f2_bad = _numeric(raw["f2"])
    has_extra = raw["extra"].notna().to_numpy()

    is_arr = symbol == "+"
    is_dep = symbol == "-"
    is_opp = symbol == "#"
    is_drop = symbol == "d"
    known = is_arr | is_dep | is_opp | is_drop
    two_field = is_dep | is_drop

    def nonint(v: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return ~np.isnan(v) & ((v != np.floor(v)) | (v < 0))

    # Each check is (mask of offending rows, message builder); the error
    # reported is the one on the earliest line.
    checks: list[tuple[np.ndarray, object]] = [
        (pd.isna(symbol), lambda i: "missing event kind"),
        (~pd.isna(symbol) & ~known, lambda i: f"unknown event kind {symbol[i]!r} (expected + - # d)"),
        (t_bad | nonint(t), lambda i: f"time {_tok(raw['time_ms'].iloc[i])} is not a non-negative integer"),
        (known & (f1_bad | nonint(f1)), lambda i: f"field {_tok(raw['f1'].iloc[i])} is not a non-negative integer"),
        (known & np.isnan(f1) & ~f1_bad, lambda i: f"missing size field for {symbol[i]!r} event"),
        (two_field & np.isnan(f2) & ~f2_bad, lambda i: f"missing {'delay' if symbol[i] == '-' else 'byte count'} field for {symbol[i]!r} event"),
        (is_drop & (f2_bad | nonint(f2)), lambda i: f"dropped byte count {_tok(raw['f2'].iloc[i])} is not a non-negative integer"),
        (is_dep & (f2_bad | (f2 < 0)), lambda i: f"delay {_tok(raw['f2'].iloc[i])} is not a non-negative number"),
        ((is_arr | is_opp) & ~(np.isnan(f2) & ~f2_bad), lambda i: f"unexpected extra field {_tok(raw['f2'].iloc[i])} for {symbol[i]!r} event"),
        (has_extra, lambda i: f"unexpected extra field {_tok(raw['extra'].iloc[i])}"),
    ]
    first_bad: tuple[int, str] | None = None
    for mask, msg in checks:
        idx = np.flatnonzero(mask)
        if idx.size and (first_bad is None or idx[0] < first_bad[0]):
            first_bad = (int(idx[0]), msg(int(idx[0])))  # type: ignore[operator]
    if first_bad is not None:
        raise LogFormatError(name, int(lineno[first_bad[0]]), first_bad[1])

    kind_codes = np.select([is_arr, is_dep, is_opp, is_drop], [0, 1, 2, 3])
    kind = pd.Categorical.from_codes(kind_codes, categories=list(EVENT_KINDS))
    nbytes = np.where(is_drop, f2, f1).astype(np.int64)
    packets = np.where(is_drop, f1, 1).astype(np.int64)
    delay = np.where(is_dep, f2, np.nan)
    return pd.DataFrame(
        {
            "time_ms": t.astype(np.int64),
            "kind": kind,
            "bytes": nbytes,
            "delay_ms": delay.astype(np.float64),
            "packets": packets,
        }
    )
