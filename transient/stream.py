"""A one-flow mm-link log reduced to its per-millisecond sums as it is read, in bounded memory.

`stream_log_arrays` gives the `transient.series.LogArrays` of a log whose
packets all belong to one flow (a bare log, a one-flow run) without ever
holding its events: the file is read a few MB of whole lines at a time (the
next piece parsed in a worker thread while this one is reduced);
each piece's event lines (the header block skipped) are parsed with numpy
alone (`_piece_columns`: the newlines, spaces and symbols found once over the
bytes, the numbers decoded from unaligned 8-byte words), checked, and reduced
at once (per-ms sums with ``np.bincount`` / ``np.add.at``, per-ms maxima and
minima, the departures' delays), each piece's per-ms figures kept in a narrow
dtype; the pieces are then combined into the log's arrays one quantity at a
time, each in the narrowest dtype that holds it exactly
(`transient.series.compact`).  Memory: the compact per-ms arrays and delays,
plus two pieces and one array as long as the log has ms; the text is read
with ``read`` (not mapped), so it does not count in the process's resident
memory either, and neither polars nor pandas is imported.

Every figure is the one `LogArrays.from_columns` computes from the events:
all are sums, maxima and minima of whole numbers (exact in any order).  A log
this reader cannot vouch for -- anything but ``time symbol number [number]``
with single spaces and digits only, a ``#`` line below the header, a
departure delay with a fraction, a time beyond 2**53 ms, a bad header --
gives None, and the caller reads the events the usual way (which words any
error with file and line).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import LogFormatError
from .mahimahi import _LOW_MASKS, _PAD, _LineCensus, _check_last_line_whole
from .series import LogArrays, compact
from .timezero import FLOW_START_MIN_BYTES

CHUNK_BYTES = 4 << 20
"""Bytes of log text read and reduced at a time (whole lines; a longer line is read whole)."""

_MERGE_SLACK_MS = 1 << 20  # the parts may cover this many ms more than twice the events' span before a merge
_NONE = np.iinfo(np.int64).max  # no departure sent in that ms
_EXACT = 2**53  # time stamps beyond it are left to the event reader (float64 rounding in its figures)

# the per-ms sums: (kind code, what) as `LogArrays.ms_sum`; the weight of every kind is its first number
# (bytes, or a drop line's packets)
_SUM_KEYS = ((0, "count"), (0, "bytes"), (1, "count"), (1, "bytes"), (2, "bytes"), (3, "packets"))

_FILLER = b"_" * _PAD  # neither digit nor blank


_CODE = np.full(256, -1, np.int8)  # the kind code of each symbol (`transient.mahimahi.EVENT_KINDS`), else -1
for _code, _symbol in enumerate(b"+-#d"):
    _CODE[_symbol] = _code
_ZEROS = np.uint64(0x3030303030303030)
_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)


def _numbers(words: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """The unsigned decimal numbers at byte ranges [start, end) of the padded text, every byte of them
    known to be a digit (``words[i]``: the unaligned little-endian 8-byte word at byte i); None for a
    number of more than 16 digits. SWAR: the bytes in front of a number in its word made '0', then the
    eight digits combined pairwise with three multiply-shift steps (as `transient.mahimahi._swar_digits`)."""
    length = end - start
    if length.size and int(length.max()) > 16:
        return None

    def eight(word: np.ndarray, n: np.ndarray) -> np.ndarray:
        low = _LOW_MASKS[n]
        w = ((word & ~low) | (_ZEROS & low)) & _NIBBLES
        w = (w * np.uint64(2561)) >> np.uint64(8)
        w = ((w & np.uint64(0x00FF00FF00FF00FF)) * np.uint64(6553601)) >> np.uint64(16)
        return ((w & np.uint64(0x0000FFFF0000FFFF)) * np.uint64(42949672960001)) >> np.uint64(32)

    value = eight(words[end - 8], np.minimum(length, 8))
    long = np.flatnonzero(length > 8)
    if long.size:
        value[long] += eight(words[end[long] - 16], length[long] - 8) * np.uint64(100_000_000)
    return value.view(np.int64)  # below 10**16: the same bits


def _piece_columns(text: bytes, rows: int):
    """The event lines of ``text`` (whole lines, no header) as numpy (time, code, first, second number;
    the second 0 where a line has none), or None when a line is not exactly ``time symbol number`` or,
    for departures and drops, ``time symbol number number`` (single spaces, digits only, at most 16
    of them), or the lines are not the ``rows`` counted (blank lines are dropped).

    Vectorized over the bytes: the newlines and other non-digits found once; a valid line has exactly
    one non-digit that is a kind symbol, with a space on either side, and, for a second number, one more
    space -- the spaces left once those beside the symbols are taken out, one per such line and inside
    it -- every other byte a digit; the numbers are decoded from unaligned 8-byte words."""
    padded = _FILLER + text + _FILLER[:8]  # 16 bytes in front: every number has a whole word ending with it
    buf = np.frombuffer(padded, np.uint8)
    body = buf[_PAD : _PAD + len(text)]
    ends = np.flatnonzero(body == 10)
    if ends.size != rows:
        return None
    space = body == 32
    other = (body - np.uint8(48)) > 9  # not a digit (bytes below '0' wrap around)
    other &= ~space
    other &= body != 10
    sym = np.flatnonzero(other)
    del other
    starts = np.empty_like(ends)
    starts[:1], starts[1:] = 0, ends[:-1] + 1
    blank = ends == starts
    if blank.any():
        ends, starts = ends[~blank], starts[~blank]
    if sym.size != ends.size or not ((sym >= starts + 2) & (sym <= ends - 3)).all():
        return None  # a line without its symbol, or with another non-digit; an empty time or first number
    code = _CODE[body[sym]]
    if code.size and code.min() < 0:
        return None  # not a kind symbol
    four = (code == 1) | (code == 3)  # departures and drops carry a second number
    if not (space[sym - 1].all() and space[sym + 1].all()):
        return None  # a symbol without a space on either side
    space[sym - 1] = space[sym + 1] = False
    third = np.flatnonzero(space)  # the other spaces: one per departure and drop, in line order
    del space
    rows4 = np.flatnonzero(four)
    if third.size != rows4.size or not ((third >= sym[rows4] + 3) & (third <= ends[rows4] - 2)).all():
        return None  # a space too many or too few in a line, or an empty first or second number
    words = np.ndarray(shape=(buf.size - 7,), dtype="<u8", buffer=padded, strides=(1,))
    t = _numbers(words, starts + _PAD, sym - 1 + _PAD)
    first_end = ends.copy()
    first_end[rows4] = third
    a = _numbers(words, sym + 2 + _PAD, first_end + _PAD)
    b4 = _numbers(words, third + 1 + _PAD, ends[rows4] + _PAD)
    if t is None or a is None or b4 is None:
        return None
    b = np.zeros(t.size, np.int64)
    b[rows4] = b4
    return t, code, a, b


def _unsigned(top: int) -> type:
    """The narrowest of uint8, uint16, uint32, uint64 that holds 0..top."""
    for kind in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(kind).max:
            return kind
    return np.uint64


def _holding(values: np.ndarray) -> type:
    """The narrowest of uint8, uint16, uint32 (values >= 0) or int16, int32 (some < 0) that holds the
    whole numbers ``values``, else int64."""
    top = int(values.max()) if values.size else 0
    if not values.size or int(values.min()) >= 0:
        return _unsigned(top) if top <= np.iinfo(np.uint32).max else np.int64
    low = int(values.min())
    for kind in (np.int16, np.int32):
        if np.iinfo(kind).min <= low and top <= np.iinfo(kind).max:
            return kind
    return np.int64


class _Part:
    """One piece's per-ms figures over its own span of ms (compact dtypes)."""

    __slots__ = ("lo", "arrays")

    def __init__(self, lo: int, arrays: dict) -> None:
        self.lo, self.arrays = lo, arrays


class _Reduction:
    """The running reduction of the pieces' events: each piece's per-ms figures, added up at the end."""

    def __init__(self) -> None:
        self.parts: list[_Part] = []  # per-ms sums, delay sums and peaks over each piece's ms
        self.sent: list[_Part] = []  # smallest delay per sending ms over each piece's sending ms
        self.delays: list[np.ndarray] = []
        self.n_events = 0
        self.first_event: int | None = None
        self.t_lo, self.t_hi = None, None
        self.data_lo, self.data_hi = None, None
        self.seen = np.zeros(4, bool)  # a line of each kind
        self._part_ms = 0  # ms the parts cover, overlaps counted twice

    def add(self, t: np.ndarray, code: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
        """Reduce one piece's events; False when the piece has what this reader leaves to the event reader."""
        if t.size == 0:
            return True
        lo, hi = int(t.min()), int(t.max())
        if hi >= _EXACT:
            return False
        if self.first_event is None:
            self.first_event = int(t[0])
        self.n_events += t.size
        self.t_lo = lo if self.t_lo is None else min(self.t_lo, lo)
        self.t_hi = hi if self.t_hi is None else max(self.t_hi, hi)
        n = hi - lo + 1
        ms = t - lo
        key = ms * 4 + code
        count = np.bincount(key, minlength=4 * n)
        total = np.zeros(4 * n, np.int64)
        np.add.at(total, key, a)
        del key
        for c in np.flatnonzero(~self.seen):
            self.seen[c] = bool(np.count_nonzero(code == c))
        # a piece's part needs no exact narrowest dtype (`_combined` sizes the log's): one that holds it
        count = count.reshape(n, 4).astype(_unsigned(int(count.max())))
        total = total.reshape(n, 4).astype(_unsigned(int(total.max())))
        figures = {(c, what): (count if what == "count" else total)[:, c] for c, what in _SUM_KEYS}
        del count, total
        dep = code == 1
        d = b[dep]
        if d.size:
            ms_d = ms[dep]
            delay = np.zeros(n, np.int64)
            np.add.at(delay, ms_d, d)
            peak = np.full(n, -1, np.int64)  # delays are >= 0: -1 is a ms without a departure
            np.maximum.at(peak, ms_d, d)
            top = int(peak.max())
            figures["delay"] = delay.astype(_unsigned(int(delay.max())))
            figures["peak"] = peak.astype(_holding(np.array([-1, top])))
            del delay, peak, ms_d
            sent = t[dep] - d  # the sending ms of each departure
            s_lo = int(sent.min())
            least = np.full(int(sent.max()) - s_lo + 1, _NONE)  # int64 like d: ufunc.at's fast path
            np.minimum.at(least, sent - s_lo, d)
            # narrowed, a sending ms without a departure as the dtype's largest value (`_combined` reads it so)
            kind = _unsigned(top + 1)
            none = least == _NONE
            least = least.astype(kind)
            least[none] = np.iinfo(kind).max
            self.sent.append(_Part(s_lo, {"least": least}))
            del none, least, sent
            self.delays.append(d.astype(_unsigned(top)))
        self.parts.append(_Part(lo, figures))
        self._part_ms += n
        big = t[(code == 0) & (a >= FLOW_START_MIN_BYTES)]
        if big.size:
            b_lo, b_hi = int(big.min()), int(big.max())
            self.data_lo = b_lo if self.data_lo is None else min(self.data_lo, b_lo)
            self.data_hi = b_hi if self.data_hi is None else max(self.data_hi, b_hi)
        if self._part_ms > 2 * (self.t_hi - self.t_lo + 1) + _MERGE_SLACK_MS:
            self._merge()  # pieces far out of time order: keep the parts to about the log's span
        return True

    @staticmethod
    def _combined(parts: list[_Part], key, lo: int, n: int, fill, how) -> np.ndarray:
        """Figure ``key`` of every part over ms lo..lo+n-1, ``fill`` where no part has the ms, the parts
        combined by ``how`` (np.add, np.maximum or np.minimum; taken out of the parts).

        In a dtype that holds the result exactly and no wider: for a float ``fill`` float32 when every
        part's values are (whole numbers below 2**24 or float32), else float64; for integers the narrowest
        that holds ``fill`` and the largest value a ms can get (np.add: a part's maximum plus those of the
        parts it overlaps in time, e.g. at a piece's first and last ms)."""
        mine = [(p.lo, p.arrays.pop(key)) for p in parts if key in p.arrays]
        if isinstance(fill, float):
            narrow = all(a.dtype == np.float32 or (a.dtype.kind in "iu" and (not a.size or int(a.max()) < 2**24))
                         for _, a in mine)
            dtype = np.float32 if narrow else np.float64
        else:
            tops = [int(a.max()) if a.size else 0 for _, a in mine]
            bound = max(tops, default=0)
            if how is np.add:
                order = sorted(range(len(mine)), key=lambda i: mine[i][0])
                reach = [0] * len(mine)  # the maxima of the parts overlapping each, its own included
                for x, i in enumerate(order):
                    reach[i] += tops[i]
                    end = mine[i][0] + mine[i][1].size
                    for j in order[x + 1 :]:
                        if mine[j][0] >= end:
                            break
                        reach[i] += tops[j]
                        reach[j] += tops[i]
                bound = max(reach, default=0)
            dtype = _holding(np.array([min(fill, 0), bound]))
        out = np.full(n, fill, dtype)
        for p_lo, part in mine:
            view = out[p_lo - lo : p_lo - lo + part.size]
            values = part.astype(dtype, copy=False)
            if isinstance(fill, float) and part.dtype.kind == "u":  # a piece's smallest delays: none = max
                values = values.copy() if values is part else values
                values[part == np.iinfo(part.dtype).max] = fill
            how(view, values, out=view)
        return out

    _HOW = {"delay": (0, np.add), "peak": (-1, np.maximum)}

    def _merge(self) -> None:
        """The parts as one part over the span of the events so far (bounded memory for an unordered log)."""
        lo, n = self.t_lo, self.t_hi - self.t_lo + 1
        keys = {k for p in self.parts for k in p.arrays}
        merged = {k: compact(self._combined(self.parts, k, lo, n, *self._HOW.get(k, (0, np.add)))) for k in keys}
        self.parts, self._part_ms = [_Part(lo, merged)], n
        if self.sent:
            s_lo = min(p.lo for p in self.sent)
            s_n = max(p.lo + p.arrays["least"].size for p in self.sent) - s_lo
            self.sent = [_Part(s_lo, {"least": compact(self._combined(self.sent, "least", s_lo, s_n, np.inf,
                                                                       np.minimum))})]

    def arrays(self, base: int | None) -> LogArrays:
        """The log's `LogArrays`; ``base``: the header's base timestamp (subtracted as `read_link_log` does)."""
        shift = base if base is not None and self.t_lo >= base else 0
        lo, n = self.t_lo, self.t_hi - self.t_lo + 1
        sums = {key: compact(self._combined(self.parts, key, lo, n, 0, np.add)) for key in _SUM_KEYS}
        d = np.concatenate(self.delays) if len(self.delays) > 1 else self.delays[0] if self.delays else np.empty(0)
        self.delays.clear()
        if d.size:
            base_delay = int(d.min())
            # sum over a ms's departures of (delay - base): every term and sum a whole number, exact
            queueing = self._combined(self.parts, "delay", lo, n, 0, np.add)
            if base_delay:  # each ms's count x base is at most its delay sum: it fits, and the result is >= 0
                queueing -= np.multiply(sums[1, "count"], base_delay, dtype=queueing.dtype)
            queueing = compact(queueing)
            peak = compact(self._combined(self.parts, "peak", lo, n, -1, np.maximum))
            missing = peak < 0
            peak = peak.astype(np.float32 if peak.dtype.itemsize <= 2 else np.float64)  # exact: |peak| < 2**24
            peak[missing] = np.nan
            del missing
            s_lo = min(p.lo for p in self.sent)
            s_n = max(p.lo + p.arrays["least"].size for p in self.sent) - s_lo
            least = self._combined(self.sent, "least", s_lo, s_n, np.inf, np.minimum)
            sent_lo = s_lo - shift
        else:
            queueing, peak, least, sent_lo = np.zeros(n), np.full(n, np.nan), np.empty(0), 0
        self.parts.clear()
        self.sent.clear()
        data = (self.data_lo - shift, self.data_hi - shift) if self.data_lo is not None else None
        return LogArrays.from_ms_sums(n_events=self.n_events, first_ms=lo - shift,
                                      first_event_ms=self.first_event - shift,
                                      has_packets=bool(self.seen[0] or self.seen[1] or self.seen[3]),
                                      sums=sums, dep_delay_ms=d, queueing_ms_sum=queueing, peak_delay_ms=peak,
                                      sent_lo=sent_lo, sent_min_delay=least, data_ms=data)


def _pieces(path: Path, chunk_bytes: int, census: _LineCensus):
    """(text, lines) of each piece of whole lines of the file with event lines in it -- the header block
    skipped -- read ``chunk_bytes`` at a time and counted into ``census``; a last None when a piece has
    whitespace the parser does not take (tab, CR)."""
    carry = b""
    with open(path, "rb") as f:
        while data := f.read(chunk_bytes):
            buf = carry + data if carry else data
            cut = buf.rfind(b"\n") + 1
            piece, carry = buf[:cut], buf[cut:]
            del buf
            rows, heads = census.n_rows, len(census.header_lines)
            census._lines(piece, len(piece))
            if census.odd_blanks:
                yield None
                return
            rows = census.n_rows - rows
            skip = sum(len(text) + 1 for _, text in census.header_lines[heads:])  # the header block's bytes
            if rows > 0:
                yield (piece[skip:] if skip else piece), rows


def stream_log_arrays(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> LogArrays | None:
    """The `LogArrays` of the log at ``path`` with every packet in flow 0, read in pieces (see the module
    docstring); None when the events must be read instead (`transient.read_link_columns`).

    The next piece is parsed in a worker thread while this one is reduced (numpy releases the GIL for its
    work on whole arrays). A second parsing thread (parsing costs about three times reducing) gained
    nothing on a busy 2-core machine and held one more piece.

    Raises:
        OSError: the file cannot be read.
        LogFormatError: the last line has no newline (cut mid-line), as `read_link_log`.
    """
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    path = Path(path)
    _check_last_line_whole(path)  # so the file ends with a whole line: no piece is left over at its end
    census = _LineCensus(0, [])
    red = _Reduction()
    pieces = _pieces(path, chunk_bytes, census)
    pending: deque = deque()

    def reduced() -> bool:
        cols = pending.popleft().result()
        return cols is not None and red.add(*cols)

    try:
        with ThreadPoolExecutor(1, thread_name_prefix="transient-parse") as pool:
            for piece in pieces:
                if piece is None:
                    return None
                pending.append(pool.submit(_piece_columns, *piece))
                del piece
                if len(pending) > 1 and not reduced():
                    return None
            while pending:
                if not reduced():
                    return None
    finally:
        pieces.close()
    if red.n_events == 0:
        return None  # no events: the event reader says so
    try:
        _, base = census.header(str(path))
    except LogFormatError:
        return None
    arrays = red.arrays(base)  # (which empties the reduction's parts)
    _release_free_memory()
    return arrays


def _release_free_memory() -> None:
    """Give the C heap's free memory back to the system (glibc's ``malloc_trim``; elsewhere nothing): the
    pieces' buffers leave tens of MB free but held, which would count again under what the analysis
    imports and allocates next."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
