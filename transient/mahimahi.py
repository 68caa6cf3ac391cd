"""Reader for mahimahi mm-link packet logs (``--uplink-log`` / ``--downlink-log``).

Format (mahimahi, ``src/frontend/link_queue.cc``; also written by ccplab-link):

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

Time origin: ccplab-link writes ``# base timestamp: 0`` and times relative
to the start of trace replay.  Stock mahimahi writes both the base timestamp
and the event times on its own monotonic clock, and mm-throughput-graph
subtracts the base.  The reader handles both: when every event time is >=
the base timestamp, the base is subtracted (``LinkLog.time_origin ==
"base-subtracted"``); otherwise the times are taken as already relative
(``"relative"``).

Speed: polars' CSV reader parses a well-formed log (multi-threaded); any
line it cannot take goes to a numpy reader of the raw bytes (no Python loop
over lines), which also words every error: the positions of spaces and newlines give every line's tokens, and
each numeric token is read as the unaligned 8-byte word that ends with it and
decoded with SWAR arithmetic (see `_swar_digits`).  Only header lines (a handful) and malformed lines (to word
the error) are looked at in Python.  Parsed logs are cached as Parquet
beside the log (see `transient.cache`), so re-analysis skips parsing.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np

from .cachefiles import STREAMING_BYTES
from .errors import LogFormatError

if TYPE_CHECKING:  # pandas is imported when a DataFrame is made: reading a log for its columns needs none
    import pandas as pd

EVENT_KINDS = ("arrival", "departure", "opportunity", "drop")
"""Categories of ``LinkLog.events['kind']`` (codes 0..3 in this order)."""

_KIND_DTYPE = None


def _kind_dtype() -> "pd.CategoricalDtype":
    """dtype of ``LinkLog.events['kind']`` (also ``KIND_DTYPE``; made on first use)."""
    global _KIND_DTYPE
    if _KIND_DTYPE is None:
        import pandas as pd

        _KIND_DTYPE = pd.CategoricalDtype(list(EVENT_KINDS))
    return _KIND_DTYPE


def __getattr__(name: str):
    if name == "KIND_DTYPE":  # dtype of ``LinkLog.events['kind']``
        return _kind_dtype()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_SYMBOLS = {ord("+"): 0, ord("-"): 1, ord("#"): 2, ord("d"): 3}
_MAX_DIGITS = 16  # two 8-byte SWAR words; unix-ms timestamps have 13


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
            ``time_ms`` (int64, ms on the log clock), ``kind`` (category:
            arrival/departure/opportunity/drop), ``bytes`` (int64, bytes incl.
            TUN header; for drops the total dropped), ``delay_ms`` (float64,
            NaN unless departure), ``packets`` (int64; 1, or npkts for drops).
    """

    path: str
    header: dict[str, str]
    base_timestamp_ms: int | None
    time_origin: str
    events: pd.DataFrame


@dataclass(frozen=True)
class LinkColumns:
    """A parsed mm-link log as numpy columns (what the analysis reads; `LinkLog` without pandas).

    Attributes: path, header, base_timestamp_ms, time_origin as in `LinkLog`;
    ``time_ms`` (int64), ``code`` (int8 kind codes 0..3 of `EVENT_KINDS`),
    ``nbytes`` (int32 or int64), ``delay_ms``
    (float64, NaN unless departure), ``packets`` (int32 or int64): the
    columns of `LinkLog.events` (which are all int64), in file order.
    """

    path: str
    header: dict[str, str]
    base_timestamp_ms: int | None
    time_origin: str
    time_ms: np.ndarray
    code: np.ndarray
    nbytes: np.ndarray
    delay_ms: np.ndarray
    packets: np.ndarray

    def to_log(self) -> LinkLog:
        """The same log as a `LinkLog` (events DataFrame)."""
        import pandas as pd

        events = pd.DataFrame({
            "time_ms": self.time_ms,
            "kind": pd.Categorical.from_codes(self.code, dtype=_kind_dtype(), validate=False),
            "bytes": self.nbytes.astype(np.int64, copy=False),
            "delay_ms": self.delay_ms,
            "packets": self.packets.astype(np.int64, copy=False),
        })
        return LinkLog(self.path, self.header, self.base_timestamp_ms, self.time_origin, events)

    @classmethod
    def of_log(cls, log: LinkLog) -> "LinkColumns":
        ev = log.events
        return cls(log.path, log.header, log.base_timestamp_ms, log.time_origin, ev["time_ms"].to_numpy(np.int64),
                   ev["kind"].cat.codes.to_numpy().astype(np.int8), ev["bytes"].to_numpy(np.int64),
                   ev["delay_ms"].to_numpy(np.float64), ev["packets"].to_numpy(np.int64))


def read_link_columns(path: str | Path, *, cache: bool = True) -> LinkColumns:
    """`read_link_log` as numpy columns (`LinkColumns`): the same checks, errors and cache, no DataFrame.

    The file goes to polars by name (never whole into a Python bytes
    object); a log polars cannot take is read again by the numpy reader.
    """
    if cache:
        from .cache import cached_columns

        return cached_columns(Path(path))
    return parse_link_file(Path(path))


def parse_link_file(path: Path) -> LinkColumns:
    """Parse the log file at ``path`` (no cache); see `read_link_log` for the errors."""
    path = Path(path)
    _check_last_line_whole(path)
    if path.stat().st_size > _STREAMING_BYTES:  # polars streams it from the file
        fast = _parse_polars(path, str(path), _LineCensus.of_path(path))
        raw = None
    else:  # read once, for the census and polars both
        raw = path.read_bytes()
        fast = _parse_polars(raw, str(path), _LineCensus.of_chunks([raw]))
    if fast is not None:
        return fast
    return LinkColumns.of_log(_parse_numpy(raw if raw is not None else path.read_bytes(), str(path)))


def read_link_log(path: str | Path, *, cache: bool = True) -> LinkLog:
    """Read a mahimahi mm-link log file.

    Args:
        path: the log.
        cache: use / write the Parquet cache beside the log
            (``<log>.parquet``, see `transient.cache`); a stale or unreadable
            cache is re-parsed, an unwritable directory only skips caching.

    Raises:
        FileNotFoundError / OSError: the file cannot be read.
        LogFormatError: a malformed line (naming the file and 1-based line:
            unknown event kind, missing or extra field, non-integer time or
            size, negative delay), a bad base timestamp, or no events at all.
    """
    return read_link_columns(path, cache=cache).to_log()


def parse_link_log(text: str, name: str = "<text>") -> LinkLog:
    """Parse the text of an mm-link log; see `read_link_log`. ``name`` is used in errors."""
    return parse_link_bytes(text.encode("utf-8"), name)


def parse_link_bytes(raw: bytes, name: str = "<bytes>") -> LinkLog:
    """Parse the bytes of an mm-link log; see `read_link_log`. ``name`` is used in errors.

    Fast path: polars' multi-threaded CSV reader (space-separated, ``#`` lines
    skipped as comments: they only ever start a line in a header), checked
    column by column.  Anything it cannot take as it is (a malformed line,
    tabs, runs of blanks, a line count that does not add up) goes to the
    numpy reader, which normalises whitespace and words the error with the
    file and line.
    """
    if not raw.endswith(b"\n"):
        raw += b"\n"
    fast = _parse_polars(raw, name, _LineCensus.of_chunks([raw]))
    if fast is not None:
        return fast.to_log()
    return _parse_numpy(raw, name)


def _check_last_line_whole(path: Path) -> None:
    """LogFormatError naming the file and line when the log does not end with a newline: mahimahi ends every
    line with one, so its last line was cut (a killed run, an incomplete copy) and even a last number that
    parses may have lost digits."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b"")) + 1
    raise LogFormatError(str(path), lines, "the last line has no newline: the log was cut mid-line (a killed "
                         "run or an incomplete copy); its last event cannot be trusted")


def _parse_numpy(raw: bytes, name: str) -> LinkLog:
    """The numpy reader (any log polars cannot take; words every error)."""
    if not raw.endswith(b"\n"):
        raw += b"\n"
    try:
        return _parse(raw, name)
    except LogFormatError:
        # mahimahi writes single spaces and LF; a hand-edited log may not.
        # Normalising keeps every newline, so a real error keeps its line.
        tidy = _normalize_whitespace(raw)
        if tidy == raw:
            raise
        return _parse(tidy, name)


@dataclass
class _LineCensus:
    """What the polars reader is checked against, counted over the raw bytes chunk by chunk (C-speed
    ``bytes.count`` / ``find``, no per-line Python): the lines, and the text and numbers of the header
    lines at the top. Polars skips comment lines and gives every other line a row, a blank one all null."""

    n_lines: int = 0
    header_lines: list = None  # (1-based line number, bytes of the line) of the header block at the top
    odd_blanks: bool = False  # a tab or CR: whitespace polars does not split on
    _in_head: bool = True

    @property
    def n_rows(self) -> int:
        """Rows polars must give: every line but the header lines."""
        return self.n_lines - len(self.header_lines)

    def header(self, name: str) -> tuple[dict[str, str], int | None]:
        """The header block as `LinkLog.header` and the base timestamp (LogFormatError as `read_link_log`)."""
        lines = self.header_lines
        raw_head = b"\n".join(text for _, text in lines)
        starts, ends, pos = [], [], 0
        for _, text in lines:
            starts.append(pos)
            ends.append(pos + len(text))
            pos += len(text) + 1
        return _parse_header(raw_head, np.array(starts, np.int64), np.array(ends, np.int64),
                             np.array([n for n, _ in lines], np.int64), name)

    @classmethod
    def of_chunks(cls, chunks) -> "_LineCensus":
        c = cls(0, [])
        carry = b""
        for chunk in chunks:
            buf = carry + chunk if carry else chunk
            cut = buf.rfind(b"\n") + 1  # whole lines only; the rest waits for the next chunk
            c._lines(buf, cut)
            carry = buf[cut:]
        if carry:
            c._lines(carry + b"\n", len(carry) + 1)
        return c

    @classmethod
    def of_path(cls, path: Path) -> "_LineCensus":
        """The census of a file, read 16 MiB at a time."""
        with open(path, "rb") as f:
            return cls.of_chunks(iter(lambda: f.read(1 << 24), b""))

    def _lines(self, buf: bytes, end: int) -> None:
        """Count the whole lines of ``buf[:end]`` (which ends with a newline)."""
        if end <= 0:
            return
        if buf.find(b"\t", 0, end) >= 0 or buf.find(b"\r", 0, end) >= 0:
            self.odd_blanks = True
        pos = 0
        while self._in_head and pos < end:  # the header block: the lines starting with '#' at the top
            if buf[pos] != 35:
                self._in_head = False
                break
            stop = buf.index(b"\n", pos)
            self.header_lines.append((self.n_lines + 1, buf[pos:stop]))
            self.n_lines += 1
            pos = stop + 1
        # a '#' line further down is one polars skips but this count does not: the row counts then
        # differ, and the numpy reader takes the log
        self.n_lines += buf.count(b"\n", pos, end)


_POLARS_SCHEMA = None
_STREAMING_BYTES = STREAMING_BYTES  # logs above this are read by polars' streaming engine


def _polars_events(source: bytes | Path, int_type) -> "pl.LazyFrame":
    """The lazy polars query that reads event lines (bytes, or a file by name): columns ``t`` (Int64),
    ``code`` (Int8 kind code), ``nbytes`` and ``packets`` (``int_type``: a value it cannot hold fails the
    collect), ``delay`` (Float64, null unless departure), ``ok`` (False for a line that is not a
    well-formed event; a blank line gives an all-null row that is ok). Header lines are skipped."""
    global _POLARS_SCHEMA
    import polars as pl

    if _POLARS_SCHEMA is None:  # the symbol as an enum: its physical value is our kind code
        _POLARS_SCHEMA = {"t": pl.Int64, "s": pl.Enum(["+", "-", "#", "d"]), "a": pl.Int64, "b": pl.Float64}
    s, t, a, b = pl.col("s"), pl.col("t"), pl.col("a"), pl.col("b")
    four = (s == "-") | (s == "d")  # departures and drops carry 4 fields, the others 3
    blank = t.is_null() & s.is_null() & a.is_null() & b.is_null()
    ok = blank | (t.is_not_null() & s.is_not_null() & a.is_not_null() & (t >= 0) & (a >= 0)
                  & pl.when(four).then(b.is_not_null() & (b >= 0)).otherwise(b.is_null())
                  & ((s != "d") | (b == b.floor())))
    return (pl.scan_csv(source if isinstance(source, bytes) else str(source), has_header=False, separator=" ",
                        comment_prefix="#", schema=_POLARS_SCHEMA, quote_char=None, missing_columns="insert")
            .select(t, code=s.to_physical().cast(pl.Int8),
                    # Int32 holds any packet size and drop count (a larger value fails the cast, and
                    # the numpy reader takes the log) in half the memory of the widest column
                    nbytes=pl.when(s == "d").then(b).otherwise(a).cast(int_type),
                    delay=pl.when(s == "-").then(b).otherwise(None),
                    packets=pl.when(s == "d").then(a).otherwise(1).cast(int_type),
                    ok=ok.fill_null(False)))


def _parse_polars(source: bytes | Path, name: str, census: _LineCensus | None = None) -> LinkColumns | None:
    """The log (bytes, or a file by name) through polars, or None when the numpy reader must decide
    (see `parse_link_bytes`); ``census``: the same text's `_LineCensus` (counted here from bytes)."""
    try:
        import polars  # noqa: F401 - only whether it is installed
    except ImportError:  # a dependency in pyproject.toml; without it the numpy reader does it all
        return None
    if census is None:
        census = _LineCensus.of_path(source) if isinstance(source, Path) else _LineCensus.of_chunks([source])
    if census.n_rows <= 0 or census.odd_blanks:
        return None
    # a big log in one streaming pass (the columns kept are computed as the text is read, no wide copy);
    # a small one read whole as its raw columns and combined with numpy, which costs polars least
    size = len(source) if isinstance(source, bytes) else source.stat().st_size
    if size > _STREAMING_BYTES:
        columns = _polars_streamed(source, census)
    else:
        columns = _polars_raw(source, census)
    if columns is None:
        return None
    t, code, nbytes, delay, packets = columns
    del columns
    if t.size == 0:
        return None  # no events: the numpy reader says so
    header, base = census.header(name)
    origin = "relative"
    if base is not None and int(t.min()) >= base:
        t = t - base
        origin = "base-subtracted"
    return LinkColumns(name, header, base, origin, t, code, nbytes, delay, packets)


def _polars_streamed(source: bytes | Path, census: _LineCensus):
    """A big log's columns through polars' streaming engine (the columns kept are computed as the text is
    read, no wide copy), or None when the numpy reader must decide."""
    import polars as pl

    try:
        df = _polars_events(source, pl.Int32).collect(engine="streaming")
    except Exception:  # noqa: BLE001 - any complaint of polars: let the numpy reader word it
        return None
    if df.height != census.n_rows or not df.get_column("ok").all():
        return None
    if df.get_column("t").null_count():
        df = df.filter(pl.col("t").is_not_null())  # blank lines
    df.drop_in_place("ok")
    # one column at a time out of polars, so at most one is held twice
    t = df.drop_in_place("t").to_numpy()
    code = df.drop_in_place("code").to_numpy()
    nbytes = df.drop_in_place("nbytes").to_numpy()
    delay = df.drop_in_place("delay").to_numpy().astype(np.float64, copy=False)
    packets = df.drop_in_place("packets").to_numpy()
    return t, code, nbytes, delay, packets


_RAW_SCHEMA = None


def _polars_raw(source: bytes | Path, census: _LineCensus):
    """A log's columns (time, code, bytes, delay, packets; int64 but the delay) from the four raw
    columns of its event lines -- time, symbol, first and second number -- as polars' CSV reader gives
    them (the header block skipped, nothing computed per row in polars), checked and combined with
    numpy; None when the numpy reader must decide: a line polars does not take, a missing or extra
    field, a negative number, a drop's byte count with a fraction, a line count that does not add up."""
    global _RAW_SCHEMA
    import polars as pl

    if _RAW_SCHEMA is None:  # the symbol as an enum: its physical value is our kind code
        _RAW_SCHEMA = {"t": pl.Int64, "s": pl.Enum(["+", "-", "#", "d"]), "a": pl.Int64, "b": pl.Float64}
    try:
        df = pl.read_csv(source if isinstance(source, bytes) else str(source), has_header=False, separator=" ",
                         schema=_RAW_SCHEMA, quote_char=None, missing_columns="insert",
                         skip_lines=len(census.header_lines))
    except Exception:  # noqa: BLE001 - any complaint of polars: let the numpy reader word it
        return None
    if df.height != census.n_rows:
        return None
    if df.get_column("t").null_count():
        blank = pl.all_horizontal(pl.all().is_null())
        if df.select((pl.col("t").is_null() & ~blank).any()).item():
            return None  # a field missing in front
        df = df.filter(~blank)  # blank lines
    if df.get_column("s").null_count() or df.get_column("a").null_count():
        return None
    code = df.get_column("s").to_physical().to_numpy().astype(np.int8)
    t = df.get_column("t").to_numpy()
    a = df.get_column("a").to_numpy()
    second = df.get_column("b")
    dep, drop = code == 1, code == 3
    four = dep | drop  # departures and drops carry a second number, the other kinds none
    if not np.array_equal(second.is_null().to_numpy(), ~four):
        return None
    b = second.to_numpy()  # NaN where none
    del df, second
    b4 = b[four]
    if t.size and (t.min() < 0 or a.min() < 0) or not (np.isfinite(b4).all() and (b4 >= 0).all()):
        return None
    if drop.any():
        dropped = b[drop]
        if not np.array_equal(dropped, np.floor(dropped)) or dropped.max() >= 2.0**63:
            return None
        nbytes = a.copy()
        nbytes[drop] = dropped
        packets = np.where(drop, a, 1)
    else:
        nbytes, packets = a, np.ones(a.size, np.int64)
    delay = np.where(dep, b, np.nan)
    return t, code, nbytes, delay, packets


def _normalize_whitespace(raw: bytes) -> bytes:
    """Single spaces between fields, no leading/trailing blanks, LF line ends (C-speed regexes)."""
    raw = re.sub(rb"[ \t\r\f\v]+", b" ", raw)
    return re.sub(rb"(?m)^ | $", b"", raw)


_PAD = 16  # bytes in front of the text, so every token has 16 readable bytes before its end
_U = np.uint64
_ASCII_ZEROS = _U(0x3030303030303030)
_HIGH_NIBBLES = _U(0xF0F0F0F0F0F0F0F0)
# _LOW_MASKS[n]: the low 8 - n bytes of a word, i.e. the bytes in front of an n-byte token
_LOW_MASKS = np.array([(1 << (8 * (8 - n))) - 1 for n in range(9)], dtype=object).astype(_U)


def _swar_digits(words: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode up to 8 ASCII digits held in the top ``length`` bytes of little-endian uint64 words.

    SWAR ("SIMD within a register"): the bytes below the token are replaced
    by '0', every byte is checked to be '0'..'9', and the 8 digits are
    combined pairwise (x10, x100, x10000) with three multiply-shift steps.
    Returns (values, ok); ok is False where a byte of the token is not a digit.
    """
    low = _LOW_MASKS[np.minimum(length, 8)]  # the bytes below the token
    w = (words & ~low) | (_ASCII_ZEROS & low)
    ok = ((w & _HIGH_NIBBLES) == _ASCII_ZEROS) & (((w + _U(0x0606060606060606)) & _HIGH_NIBBLES) == _ASCII_ZEROS)
    w &= _U(0x0F0F0F0F0F0F0F0F)
    w = (w * _U(2561)) >> _U(8)
    w = ((w & _U(0x00FF00FF00FF00FF)) * _U(6553601)) >> _U(16)
    w = ((w & _U(0x0000FFFF0000FFFF)) * _U(42949672960001)) >> _U(32)
    return w, ok


def _uint_tokens(words: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unsigned decimal integers in the byte ranges [start, end) of the padded text.

    ``words[i]`` is the unaligned little-endian uint64 at byte i.  Tokens of
    9..16 digits are read as two 8-byte halves.  Returns (int64 values, ok);
    ok is False for an empty token, a non-digit or more than 16 digits.
    """
    length = end - start
    lo, ok = _swar_digits(words[end - 8], length)
    ok &= (length >= 1) & (length <= _MAX_DIGITS)
    long = length > 8
    if long.any():
        hi, hi_ok = _swar_digits(words[end[long] - 16], length[long] - 8)
        lo[long] += hi * _U(100_000_000)
        ok[long] &= hi_ok
    return lo.astype(np.int64), ok


def _parse(raw: bytes, name: str) -> LinkLog:
    padded = b"_" * _PAD + raw  # '_': neither separator nor digit
    buf = np.frombuffer(padded, dtype=np.uint8)
    words = np.ndarray(shape=(buf.size - 7,), dtype="<u8", buffer=padded, strides=(1,))
    # Every blank (space, or newline at a line's end) ends a token:
    # token k spans [bounds[k] + 1, bounds[k + 1]).  Control bytes (tab, CR)
    # count as blanks too; they only occur in logs the caller normalises.
    seps = np.flatnonzero(buf <= 32)
    bounds = np.empty(seps.size + 6, dtype=np.int64)
    bounds[0] = _PAD - 1
    bounds[1 : seps.size + 1] = seps
    bounds[seps.size + 1 :] = seps[-1]  # empty sentinel tokens: token ft + 3 always exists
    line_last_tok = np.flatnonzero(buf[seps] == 10)
    line_first_tok = np.empty_like(line_last_tok)
    line_first_tok[:1] = 0
    line_first_tok[1:] = line_last_tok[:-1] + 1
    n_tok = line_last_tok - line_first_tok + 1
    first_start = bounds[line_first_tok] + 1
    blank = (n_tok == 1) & (bounds[line_first_tok + 1] == first_start)
    is_header = ~blank & (buf[first_start] == ord("#"))
    header_lines = np.flatnonzero(is_header)
    header, base = _parse_header(
        padded, first_start[header_lines], seps[line_last_tok[header_lines]], header_lines + 1, name)
    ev_lines = np.flatnonzero(~blank & ~is_header)
    if ev_lines.size == 0:
        raise LogFormatError(name, None, "log has no events (only header lines or empty)")
    events = _parse_events(padded, buf, words, bounds, line_first_tok[ev_lines], n_tok[ev_lines], ev_lines + 1, name)
    origin = "relative"
    if base is not None and int(events["time_ms"].min()) >= base:
        events["time_ms"] -= base
        origin = "base-subtracted"
    return LinkLog(name, header, base, origin, events)


def _parse_header(raw: bytes, starts: np.ndarray, ends: np.ndarray, linenos: np.ndarray, name: str):
    header: dict[str, str] = {}
    base = None
    for s, e, lineno in zip(starts.tolist(), ends.tolist(), linenos.tolist()):
        try:
            line = raw[s:e].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LogFormatError(name, lineno, f"header line is not UTF-8 text ({exc.reason})") from None
        key, sep, value = line[1:].strip().partition(":")
        header[key.strip()] = value.strip() if sep else ""
        m = re.match(r"#\s*base timestamp:\s*(\S*)", line)
        if m:
            if base is not None:
                raise LogFormatError(name, lineno, "base timestamp defined twice")
            try:
                base = int(m.group(1))
            except ValueError:
                raise LogFormatError(name, lineno, f"base timestamp {m.group(1)!r} is not an integer") from None
    return header, base


def _parse_events(padded: bytes, buf: np.ndarray, words: np.ndarray, bounds: np.ndarray,
                  ft: np.ndarray, n_tok: np.ndarray, linenos: np.ndarray, name: str) -> pd.DataFrame:
    """Decode event lines whose first token index is ``ft`` (tokens: time, symbol, field1[, field2])."""
    b0, b1, b2, b3, b4 = (bounds[ft + j] for j in range(5))  # token j = [b_j + 1, b_{j+1})
    code = np.full(ft.size, -1, dtype=np.int8)
    sym = buf[b1 + 1]
    one_char = ((n_tok == 3) | (n_tok == 4)) & (b2 - b1 == 2)
    for char, c in _SYMBOLS.items():
        code[one_char & (sym == char)] = c
    four = (code == 1) | (code == 3)  # departures and drops carry 4 fields, the others 3
    shape_ok = (code >= 0) & (n_tok == np.where(four, 4, 3))

    t, t_ok = _uint_tokens(words, b0 + 1, b1)
    f1, f1_ok = _uint_tokens(words, b2 + 1, b3)
    rows4 = np.flatnonzero(four)
    f2 = np.zeros(ft.size, dtype=np.int64)
    f2_ok = np.zeros(ft.size, dtype=bool)
    f2[rows4], f2_ok[rows4] = _uint_tokens(words, b3[rows4] + 1, b4[rows4])
    dep = code == 1
    delay = f2.astype(np.float64)
    # A departure delay written with a fraction ("4.5"): rare, parsed one by one.
    for i in np.flatnonzero(shape_ok & dep & ~f2_ok).tolist():
        try:
            v = float(padded[b3[i] + 1 : b4[i]])
        except ValueError:
            continue
        if v >= 0 and np.isfinite(v):
            delay[i], f2_ok[i] = v, True
    good = shape_ok & t_ok & f1_ok & (f2_ok | ~four)
    if not good.all():
        i = int(np.flatnonzero(~good)[0])
        line_end = bounds[int(ft[i] + n_tok[i])]
        raise LogFormatError(name, int(linenos[i]), _diagnose(padded[b0[i] + 1 : line_end].decode("utf-8", "replace")))

    import pandas as pd

    is_drop = code == 3
    return pd.DataFrame({
        "time_ms": t,
        "kind": pd.Categorical.from_codes(code, dtype=_kind_dtype(), validate=False),
        "bytes": np.where(is_drop, f2, f1),
        "delay_ms": np.where(dep, delay, np.nan),
        "packets": np.where(is_drop, f1, 1),
    })


def _is_uint(tok: str) -> bool:
    return tok.isascii() and tok.isdigit() and len(tok) <= _MAX_DIGITS


def _diagnose(line: str) -> str:
    """Say what is wrong with one event line (only called for a line the fast check rejected)."""
    f = line.split(" ")
    sym = f[1] if len(f) > 1 else None
    if sym is None:
        return "missing event kind"
    if sym not in ("+", "-", "#", "d"):
        return f"unknown event kind {sym!r} (expected + - # d)"
    if len(f) > 4:
        return f"too many fields ({len(f)}); expected at most 4"
    if not _is_uint(f[0]):
        return f"time {f[0]!r} is not a non-negative integer"
    if len(f) < 3:
        return f"missing size field for {sym!r} event"
    if not _is_uint(f[2]):
        return f"field {f[2]!r} is not a non-negative integer"
    if sym in ("-", "d"):
        if len(f) < 4:
            return f"missing {'delay' if sym == '-' else 'byte count'} field for {sym!r} event"
        if sym == "d" and not _is_uint(f[3]):
            return f"dropped byte count {f[3]!r} is not a non-negative integer"
        if sym == "-":
            return f"delay {f[3]!r} is not a non-negative number"
    if len(f) > 3:
        return f"unexpected extra field {f[3]!r} for {sym!r} event"
    return f"malformed event line {line!r}"
