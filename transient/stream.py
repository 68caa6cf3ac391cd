"""A one-flow mm-link log reduced to its per-millisecond sums as it is read, in bounded memory.

`stream_log_arrays` gives the `transient.series.LogArrays` of a log whose
packets all belong to one flow (a bare log, a one-flow run) without ever
holding its events: the file is read a few MB of whole lines at a time,
each piece goes through the same polars query as `transient.read_link_log`
(`transient.mahimahi._polars_events`, the same checks on every line) and is
reduced at once with numpy (per-ms ``bincount``s, per-ms maxima and minima,
the departures' delays); the pieces' per-ms arrays are then added into the
log's.  Memory: the per-ms arrays and the departures' delays, plus one
piece; the text is read with ``read`` (not mapped), so it does not count in
the process's resident memory either.

Every figure is the one `LogArrays.from_columns` computes from the events:
all are sums, maxima and minima of whole numbers (exact in float64 in any
order).  A log this reader cannot vouch for -- a line polars does not take,
odd whitespace, a ``#`` line below the header, a departure delay with a
fraction, a time beyond 2**53 ms, a bad header -- gives None, and the caller
reads the events the usual way (which words any error with file and line).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .mahimahi import _LineCensus, _check_last_line_whole, _polars_events
from .errors import LogFormatError
from .series import LogArrays
from .timezero import FLOW_START_MIN_BYTES

CHUNK_BYTES = 2 << 20
"""Bytes of log text read and reduced at a time (whole lines; a longer line is read whole)."""

_EXACT = 2**53  # below it every whole number, and the sum of two, is exact in float64

# per-ms partial arrays: (kind code, what) as `LogArrays.ms_sum`, and the departures' delay sum and peak
_SUM_KEYS = ((0, "count"), (0, "bytes"), (1, "count"), (1, "bytes"), (2, "bytes"), (3, "packets"))


class _Span:
    """Per-ms arrays over a span of ms that grows to take every piece (allocated once when the span is
    known in advance, as for a log in time order)."""

    def __init__(self, fills: dict, lo: int | None = None, hi: int | None = None) -> None:
        self.fills = fills  # key -> the value of a ms without events (the identity of how it combines)
        self.lo, self.arrays = lo, None
        if lo is not None and hi is not None and hi >= lo:
            self.arrays = {k: np.full(hi - lo + 1, f) for k, f in fills.items()}

    def view(self, key, lo: int, hi: int) -> np.ndarray:
        """The slice of array ``key`` for ms lo..hi (the span grown first when it does not cover them)."""
        if self.arrays is None:
            self.lo = lo
            self.arrays = {k: np.full(hi - lo + 1, f) for k, f in self.fills.items()}
        size = next(iter(self.arrays.values())).size
        if lo < self.lo or hi >= self.lo + size:
            new_lo, new_hi = min(lo, self.lo), max(hi, self.lo + size - 1)
            slack = (new_hi - new_lo + 1) // 8  # room for the next pieces of an unordered log
            new_lo -= slack if lo < self.lo else 0
            new_hi += slack if hi >= self.lo + size else 0
            for k, f in self.fills.items():
                grown = np.full(new_hi - new_lo + 1, f)
                grown[self.lo - new_lo : self.lo - new_lo + size] = self.arrays[k]
                self.arrays[k] = grown
            self.lo = new_lo
        return self.arrays[key][lo - self.lo : hi - self.lo + 1]

    def final(self, key, lo: int, hi: int) -> np.ndarray:
        """Array ``key`` for exactly ms lo..hi (a copy only when the span is wider), dropped from the span."""
        a = self.arrays.pop(key)
        if lo == self.lo and a.size == hi - lo + 1:
            return a
        return a[lo - self.lo : hi - self.lo + 1].copy()


def _last_event_time(path: Path) -> int | None:
    """The time of the log's last line when it is an event (a log in time order ends with its largest)."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(max(size - 4096, 0))
        tail = f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    token = tail.split(b" ", 1)[0]
    return int(token) if token.isdigit() and len(token) <= 16 else None


class _Reduction:
    """The running reduction of the pieces' events into the log's per-ms arrays."""

    def __init__(self, last_time: int | None) -> None:
        self.last_time = last_time
        self.ms: _Span | None = None  # made at the first piece: the span is first ms .. last_time
        self.sent = _Span({"least": np.inf})
        self.delays: list[np.ndarray] = []
        self.n_events = 0
        self.first_event: int | None = None
        self.t_lo, self.t_hi = None, None
        self.data_lo, self.data_hi = None, None
        self.seen = [False] * 4  # a line of each kind

    def add(self, t: np.ndarray, code: np.ndarray, nbytes: np.ndarray, delay: np.ndarray,
            packets: np.ndarray) -> bool:
        """Reduce one piece's events; False when the piece has what this reader leaves to the event reader."""
        if t.size == 0:
            return True
        lo, hi = int(t.min()), int(t.max())
        if hi >= _EXACT:
            return False
        dep = code == 1
        d = delay[dep]
        if not (np.isfinite(d).all() and np.array_equal(d, np.floor(d))):
            return False  # a delay with a fraction: its sums are not exact in every order
        if self.first_event is None:
            self.first_event = int(t[0])
            self.ms = _Span({**{k: 0.0 for k in _SUM_KEYS}, "delay": 0.0, "peak": -np.inf}, lo,
                            self.last_time if self.last_time is not None and self.last_time >= hi else hi)
        self.n_events += t.size
        self.t_lo = lo if self.t_lo is None else min(self.t_lo, lo)
        self.t_hi = hi if self.t_hi is None else max(self.t_hi, hi)
        n = hi - lo + 1
        ms = t - lo
        # one pass for every kind: (ms, kind) keyed counts and sums (a drop's weight is its packets)
        key = ms * 4 + code
        count = np.bincount(key, minlength=4 * n).reshape(n, 4)
        drop = code == 3
        weight = np.where(drop, packets, nbytes) if drop.any() else nbytes
        total = np.bincount(key, weights=weight, minlength=4 * n).reshape(n, 4)
        del key, weight
        seen = count.any(axis=0)
        for (c, what), part in (((0, "count"), count[:, 0]), ((0, "bytes"), total[:, 0]),
                                ((1, "count"), count[:, 1]), ((1, "bytes"), total[:, 1]),
                                ((2, "bytes"), total[:, 2]), ((3, "packets"), total[:, 3])):
            if seen[c]:
                view = self.ms.view((c, what), lo, hi)
                view += part
        del count, total
        if d.size:
            ms_d = ms[dep]
            view = self.ms.view("delay", lo, hi)
            view += np.bincount(ms_d, weights=d, minlength=n)
            np.maximum.at(self.ms.view("peak", lo, hi), ms_d, d)
            sent = t[dep] - d.astype(np.int64)
            s_lo = int(sent.min())
            np.minimum.at(self.sent.view("least", s_lo, int(sent.max())), sent - s_lo, d)
            self.delays.append(d)
        for c in range(4):
            self.seen[c] = self.seen[c] or bool(seen[c])
        arr = code == 0
        big = t[arr & (nbytes >= FLOW_START_MIN_BYTES)]
        if big.size:
            b_lo, b_hi = int(big.min()), int(big.max())
            self.data_lo = b_lo if self.data_lo is None else min(self.data_lo, b_lo)
            self.data_hi = b_hi if self.data_hi is None else max(self.data_hi, b_hi)
        return True

    def arrays(self, base: int | None) -> LogArrays:
        """The log's `LogArrays`; ``base``: the header's base timestamp (subtracted as `read_link_log` does)."""
        shift = base if base is not None and self.t_lo >= base else 0
        lo, hi = self.t_lo, self.t_hi
        n = hi - lo + 1
        sums = {}
        for c, what in _SUM_KEYS:
            if what != "count" and not self.seen[c]:
                self.ms.arrays.pop((c, what))
                sums[c, what] = np.zeros(n, np.int64)  # as np.bincount gives with no weights at all
            else:
                sums[c, what] = self.ms.final((c, what), lo, hi)
        delay_sum = self.ms.final("delay", lo, hi)
        peak = self.ms.final("peak", lo, hi)
        peak[np.isneginf(peak)] = np.nan
        d = np.concatenate(self.delays) if len(self.delays) > 1 else self.delays[0] if self.delays else np.empty(0)
        self.delays.clear()
        if d.size:
            # sum over a ms's departures of (delay - base): every term and sum a whole number, exact
            delay_sum -= sums[1, "count"] * float(d.min())
            queueing = delay_sum
            finite = np.flatnonzero(np.isfinite(self.sent.arrays["least"]))
            s_lo, s_hi = self.sent.lo + int(finite[0]), self.sent.lo + int(finite[-1])
            least = self.sent.final("least", s_lo, s_hi)
            sent_lo = s_lo - shift
        else:
            queueing, least, sent_lo = np.zeros(n), np.empty(0), 0
        data = (self.data_lo - shift, self.data_hi - shift) if self.data_lo is not None else None
        return LogArrays.from_ms_sums(n_events=self.n_events, first_ms=lo - shift,
                                      first_event_ms=self.first_event - shift,
                                      has_packets=self.seen[0] or self.seen[1] or self.seen[3],
                                      sums=sums, dep_delay_ms=d, queueing_ms_sum=queueing, peak_delay_ms=peak,
                                      sent_lo=sent_lo, sent_min_delay=least, data_ms=data)


def stream_log_arrays(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> LogArrays | None:
    """The `LogArrays` of the log at ``path`` with every packet in flow 0, read in pieces (see the module
    docstring); None when the events must be read instead (`transient.read_link_columns`).

    Raises:
        OSError: the file cannot be read.
        LogFormatError: the last line has no newline (cut mid-line), as `read_link_log`.
    """
    import polars as pl

    path = Path(path)
    _check_last_line_whole(path)
    census = _LineCensus(0, [])
    red = _Reduction(_last_event_time(path))
    carry = b""
    with open(path, "rb") as f:
        while True:
            data = f.read(chunk_bytes)
            buf = carry + data if carry else data
            if not buf:
                break
            cut = buf.rfind(b"\n") + 1 if data else len(buf)
            piece, carry = buf[:cut], buf[cut:]
            del buf
            before = census.n_rows
            census._lines(piece, len(piece))
            if census.odd_blanks:
                return None
            rows = census.n_rows - before
            if rows > 0:
                try:
                    df = _polars_events(piece, pl.Int64).collect(engine="in-memory")
                except Exception:  # noqa: BLE001 - any complaint of polars: the event reader words it
                    return None
                if df.height != rows or not df.get_column("ok").all():
                    return None
                if df.get_column("t").null_count():
                    df = df.filter(pl.col("t").is_not_null())  # blank lines
                if not red.add(df.get_column("t").to_numpy(), df.get_column("code").to_numpy(),
                               df.get_column("nbytes").to_numpy(), df.get_column("delay").to_numpy(),
                               df.get_column("packets").to_numpy()):
                    return None
                del df
            del piece
            if not data:
                break
    if red.n_events == 0:
        return None  # no events: the event reader says so
    try:
        _, base = census.header(str(path))
    except LogFormatError:
        return None
    return red.arrays(base)
