"""Binned time series of an mm-link log (for transient analysis and plots).

Bins are fixed, non-overlapping and start at a given origin on the log clock
(the data flow's start, or a step's time); the width is normally one RTT.
Only complete bins are returned, because a partial bin under-reports rates.

Per bin (rates are bytes x 8 / bin width in Mbit/s, including mahimahi's
4-byte TUN header per packet, as mm-throughput-graph counts them):

* ``throughput_mbps``: departures (``-``), what the link delivered;
* ``capacity_mbps``: delivery opportunities (``#``), what the link offered;
* ``reference_mbps``: the offered capacity smoothed exactly like the
  throughput (same bins, same ``smooth_bins`` moving average), the level
  convergence is judged against, so the trace's own noise is not counted as
  the CCA's error;
* ``sending_mbps``: arrivals (``+``), the sender's rate into the queue
  (incl. packets then dropped);
* ``queueing_delay_ms``: mean over the bin's departures of (delay - base),
  base = the smallest departure delay of the whole log (mahimahi's delay is
  queueing + transmission time in the link; the base removes the
  transmission part); NaN in a bin without departures;
* ``queue_packets``: mean queue occupancy over the bin's milliseconds,
  from the cumulative arrivals - departures - drops at the end of each ms;
* ``drops``: packets dropped in the bin (``d`` lines).
"""

from __future__ import annotations

import math

import numpy as np

from ._lazy import lazy_module

pd = lazy_module("pandas")  # loaded when a table is first made (transient._lazy)

from .timezero import FLOW_START_MIN_BYTES

SERIES_COLUMNS = [
    "throughput_mbps", "capacity_mbps", "reference_mbps", "sending_mbps",
    "queueing_delay_ms", "queue_packets", "drops",
]
"""Columns of `binned_series` (see the module docstring)."""

_CODES = {"arrival": 0, "departure": 1, "opportunity": 2, "drop": 3}

_SUM_BLOCK = 1 << 18  # ms of a narrow per-ms array summed per reduceat (`binned_sum`)
_WHOLE_DTYPES = (np.uint8, np.uint16, np.int16, np.uint32, np.int32)
_FLOAT32_WHOLE = 2**24  # every whole number below it is exact in float32


def compact(values: np.ndarray) -> np.ndarray:
    """``values`` in the narrowest dtype that holds every one of them exactly: whole numbers (ints, or
    floats without NaN or inf) as the smallest of uint8, uint16, int16, uint32, int32 that holds their
    range (else int64); floats with NaN or inf whose finite values are whole and below 2**24 in
    magnitude as float32; anything else unchanged.  The same values always give the same dtype.

    A long log's per-ms arrays are each as long as the log has ms: in the narrowest dtype they take a
    quarter to an eighth of float64's memory, and every sum of them is still exact (the analysis adds
    them up in int64 or float64, see `binned_sum`)."""
    values = np.asarray(values)
    if values.size == 0 or values.dtype.kind not in "iuf":
        return values
    if values.dtype == np.float32 and not np.isfinite(values).all():
        return values  # with NaN or inf a float32 array stays float32 (below: float32, or unchanged)
    if values.dtype.kind == "f":
        lo, hi, gaps = math.inf, -math.inf, False
        for k in range(0, values.size, _SUM_BLOCK):  # a block at a time: no temporary as long as the array
            block = values[k : k + _SUM_BLOCK]
            finite = np.isfinite(block)
            if not finite.all():
                gaps, block = True, block[finite]
            if block.size:
                if not np.array_equal(block, np.trunc(block)):
                    return values
                lo, hi = min(lo, float(block.min())), max(hi, float(block.max()))
        if gaps:
            if max(-lo, hi) >= _FLOAT32_WHOLE:
                return values
            return values.astype(np.float32, copy=False)
    else:
        lo, hi = values.min(), values.max()
    for dt in _WHOLE_DTYPES:
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return values.astype(dt, copy=False)
    return values.astype(np.int64, copy=False)


class LogArrays:
    """A log reduced to per-millisecond sums, computed once per log (the analysis never keeps every event).

    Every quantity the analysis bins or windows is a sum or maximum over the
    events of one millisecond, and event times are whole milliseconds, so
    binning the per-ms sums gives exactly what binning the events gives,
    with a third (a 12 Mbit/s log) to a hundredth (1 Gbit/s) of the rows.
    What is not a per-ms sum is kept as it is needed: the departure delays
    and their flows (percentiles), the smallest delay per sending ms
    (signal delay), each flow's first and last data arrival and drops.

    The per-ms arrays and the departures' delays are kept in the narrowest dtype that holds their
    values exactly (`compact`: e.g. uint16 bytes per ms, float32 peak delays with NaN), so a long log's
    reduction takes a fraction of float64's memory; read them with that in mind (cast before
    subtracting unsigned arrays).

    Attributes (ms on the log clock; per-ms arrays cover first_ms..last_ms):
        n_events: event lines; first_ms, last_ms: the smallest and largest event time;
        first_event_ms: the time of the log's first event line (mahimahi's
            duration starts there);
        n_flows: flows of the attribution (0 when no packet has a flow);
        base_delay_ms: the smallest departure delay (NaN without departures);
        dep_delay_ms, dep_flow: every departure's delay (ms) and flow index;
        sent_lo, sent_min_delay: the smallest departure delay of each sending
            ms (departure time - delay) from sent_lo on (inf where none);
        data_ms, flow_data_ms[k]: (first, last) arrival of >= 1000 bytes, of
            the log and of flow k (None without one); flow_drops[k]: packets;
        ms_sum(kind, what): per-ms sum of "bytes", "count" or "packets" of
            arrivals or departures, opportunities' bytes, drops' packets; queueing_ms_sum: per-ms sum over departures of
            delay - base; peak_delay_ms: per-ms largest departure delay
            (NaN where none); queue_ms: queue occupancy (packets) at the end
            of each ms (cumulative arrivals - departures - drops);
        flow_ms_bytes(kind): (n_flows + 1) x n_ms bytes per ms of arrivals
            or departures, row 0 the packets of no flow, row k + 1 flow k.
    """

    def __init__(self, events: pd.DataFrame, flow: np.ndarray | None = None) -> None:
        """From `LinkLog.events` (and each event's flow index, int, -1 = none; default: every packet flow 0)."""
        self._build(events["time_ms"].to_numpy(np.int64), events["kind"].cat.codes.to_numpy(),
                    events["bytes"].to_numpy(), events["delay_ms"].to_numpy(np.float64),
                    events["packets"].to_numpy(), flow)

    @classmethod
    def from_columns(cls, time_ms: np.ndarray, code: np.ndarray, nbytes: np.ndarray, delay_ms: np.ndarray,
                     packets: np.ndarray, flow: np.ndarray | None = None) -> "LogArrays":
        """From event columns in file order (as `LinkLog.events`, kind as codes 0..3 of `EVENT_KINDS`)."""
        self = cls.__new__(cls)
        self._build(np.asarray(time_ms, np.int64), np.asarray(code), nbytes, np.asarray(delay_ms, np.float64),
                    packets, flow)
        return self

    def _build(self, t, code, nbytes, delay, packets, flow) -> None:
        n_ev = self.n_events = t.size
        self.first_ms = int(t.min()) if n_ev else 0
        self.last_ms = int(t.max()) if n_ev else 0
        self.first_event_ms = int(t[0]) if n_ev else 0
        n = self.n_ms = self.last_ms - self.first_ms + 1
        ms = (t - self.first_ms) if self.first_ms else t
        code = code.astype(np.int8, copy=False)
        masks = [code == c for c in range(4)]
        self._sums: dict[tuple[int, str], np.ndarray] = {}
        self._flow_sums: dict[int, np.ndarray] = {}
        arr, dep, opp, drop = masks
        ms_a, ms_d = ms[arr], ms[dep]
        self._sums[0, "count"] = np.bincount(ms_a, minlength=n).astype(np.float64)
        self._sums[0, "bytes"] = np.bincount(ms_a, weights=nbytes[arr], minlength=n)
        self._sums[1, "count"] = np.bincount(ms_d, minlength=n).astype(np.float64)
        self._sums[1, "bytes"] = np.bincount(ms_d, weights=nbytes[dep], minlength=n)
        self._sums[2, "bytes"] = np.bincount(ms[opp], weights=nbytes[opp], minlength=n)
        self._sums[3, "packets"] = np.bincount(ms[drop], weights=packets[drop], minlength=n)
        for c in (0, 1):
            self._sums[c, "packets"] = self._sums[c, "count"]
        d = self.dep_delay_ms = delay[dep]
        self.base_delay_ms = float(d.min()) if d.size else float("nan")
        self.queueing_ms_sum = np.bincount(ms_d, weights=d - self.base_delay_ms, minlength=n) if d.size \
            else np.zeros(n)
        self.peak_delay_ms = np.full(n, -np.inf)
        np.maximum.at(self.peak_delay_ms, ms_d, d)
        self.peak_delay_ms[np.isneginf(self.peak_delay_ms)] = np.nan
        # signal delay: the smallest delay of each sending ms (mahimahi keys it by the integer time - delay)
        sent = (t[dep].astype(np.float64) - d).astype(np.int64)
        if sent.size:
            self.sent_lo = int(sent.min())
            self.sent_min_delay = np.full(int(sent.max()) - self.sent_lo + 1, np.inf)
            np.minimum.at(self.sent_min_delay, sent - self.sent_lo, d)
        else:
            self.sent_lo, self.sent_min_delay = 0, np.empty(0)
        # the data flow's first and last arrival; per flow: departures' flows, drops, data arrivals, per-ms bytes
        big = arr & (nbytes >= FLOW_START_MIN_BYTES)
        tb = t[big]
        self.data_ms = (int(tb.min()), int(tb.max())) if tb.size else None
        self._queueing_whole = None
        self._series_memo: dict = {}
        self._compact_arrays()
        if flow is None:
            self._one_flow(bool((arr | dep | drop).any()))
            return
        fl = np.asarray(flow).astype(np.int16, copy=False)
        self.n_flows = int(fl.max()) + 1 if n_ev and fl.max() >= 0 else 0
        self.dep_flow = fl[dep]
        self.flow_data_ms = {}
        self.flow_drops = {}
        for k in range(self.n_flows):
            tk = t[big & (fl == k)]
            self.flow_data_ms[k] = (int(tk.min()), int(tk.max())) if tk.size else None
            self.flow_drops[k] = int(packets[drop & (fl == k)].sum())
        for c in (0, 1):
            m = masks[c]
            key = (fl[m].astype(np.int64) + 1) * n + ms[m]
            self._flow_sums[c] = np.bincount(key, weights=nbytes[m], minlength=(self.n_flows + 1) * n
                                             ).reshape(self.n_flows + 1, n)

    def _one_flow(self, has_packets: bool) -> None:
        """One flow, every packet its own: its figures are the link's (no per-event work)."""
        self.n_flows = 1 if has_packets else 0
        self.dep_flow = np.zeros(self.dep_delay_ms.size, np.int16)
        self.flow_data_ms = {0: self.data_ms} if self.n_flows else {}
        self.flow_drops = {0: int(self._sums[3, "packets"].sum())} if self.n_flows else {}
        none = np.broadcast_to(np.float64(0.0), (self.n_ms,))  # no packet without a flow: no memory for zeros
        for c in (0, 1):
            self._flow_sums[c] = [none, self._sums[c, "bytes"]]

    @classmethod
    def from_ms_sums(cls, *, n_events: int, first_ms: int, first_event_ms: int, has_packets: bool,
                     sums: dict[tuple[int, str], np.ndarray], dep_delay_ms: np.ndarray,
                     queueing_ms_sum: np.ndarray, peak_delay_ms: np.ndarray, sent_lo: int,
                     sent_min_delay: np.ndarray, data_ms: tuple[int, int] | None) -> "LogArrays":
        """A one-flow log (every packet flow 0) from its per-ms reduction, as `transient.stream` computes it
        chunk by chunk without holding the events, and `transient.cache` stores it.

        ``sums``: per-ms arrays of whole numbers (any dtype; kept `compact`) (n_ms = last - first ms + 1) keyed (kind code 0..3, what) for
        (0, "count"), (0, "bytes"), (1, "count"), (1, "bytes"), (2, "bytes"), (3, "packets");
        ``has_packets``: the log has an arrival, departure or drop line; the other arguments are the
        attributes of the same name (see the class docstring).
        """
        self = cls.__new__(cls)
        self.n_events, self.first_ms, self.first_event_ms = n_events, first_ms, first_event_ms
        self._sums = {k: sums[k] for k in ((0, "count"), (0, "bytes"), (1, "count"), (1, "bytes"), (2, "bytes"),
                                           (3, "packets"))}
        for c in (0, 1):
            self._sums[c, "packets"] = self._sums[c, "count"]
        n = self.n_ms = self._sums[2, "bytes"].size
        self.last_ms = first_ms + n - 1
        self.dep_delay_ms = dep_delay_ms
        self.base_delay_ms = float(dep_delay_ms.min()) if dep_delay_ms.size else float("nan")
        self.queueing_ms_sum, self.peak_delay_ms = queueing_ms_sum, peak_delay_ms
        self.sent_lo, self.sent_min_delay = sent_lo, sent_min_delay
        self.data_ms = data_ms
        self._queueing_whole = None
        self._series_memo: dict = {}
        self._compact_arrays()
        self._flow_sums = {}
        self._one_flow(has_packets)
        return self

    def _compact_arrays(self) -> None:
        """Every per-ms array and the delays in their narrowest exact dtype (`compact`), and the queue."""
        for key in ((0, "count"), (0, "bytes"), (1, "count"), (1, "bytes"), (2, "bytes"), (3, "packets")):
            self._sums[key] = compact(self._sums[key])
        for c in (0, 1):
            self._sums[c, "packets"] = self._sums[c, "count"]
        # counts are whole: the running queue in a signed dtype (unsigned per-ms counts must not wrap) that
        # holds any count of packets (at most the events, or the drops' packets), then compacted
        packets = self.n_events + int(self._sums[3, "packets"].sum())
        queue = self._sums[0, "count"].astype(np.int32 if packets < 2**31 else np.int64)
        queue -= self._sums[1, "count"]
        queue -= self._sums[3, "packets"].astype(queue.dtype)
        self.queue_ms = compact(np.cumsum(queue, out=queue))
        del queue
        self.dep_delay_ms = compact(self.dep_delay_ms)
        self.queueing_ms_sum = compact(self.queueing_ms_sum)
        self.peak_delay_ms = compact(self.peak_delay_ms)
        self.sent_min_delay = compact(self.sent_min_delay)

    def is_whole(self, per_ms: np.ndarray) -> bool:
        """Whether every value of one of this log's per-ms arrays is a whole number (then any sum of them
        is exact: whole numbers below 2**53 add without rounding). Checked once per array.

        Sums of bytes, packets and counts are whole by construction; only the queueing delays (a
        departure's delay may be written with a fraction) are checked."""
        if per_ms is not self.queueing_ms_sum or per_ms.dtype.kind in "iu":
            return True
        if self._queueing_whole is None:
            self._queueing_whole = bool(np.array_equal(per_ms, np.trunc(per_ms)))
        return self._queueing_whole

    def ms_sum(self, kind: str, what: str) -> np.ndarray:
        """Per-ms sum (n_ms whole numbers in their narrowest dtype, `compact`): "bytes", "count" or
        "packets" of arrivals and departures, "bytes" of opportunities, "packets" of drops (what the
        analysis uses; KeyError for others)."""
        try:
            return self._sums[_CODES[kind], what]
        except KeyError:
            raise KeyError(f"LogArrays keeps no per-ms {what!r} of {kind!r} events") from None

    def flow_ms_bytes(self, kind: str) -> "np.ndarray | list[np.ndarray]":
        """Bytes per ms of "arrival" or "departure" events per flow, n_flows + 1 rows of n_ms: row 0 no
        flow, row k + 1 flow k (index it by row; ``len`` is the row count)."""
        return self._flow_sums[_CODES[kind]]

    def ms_window(self, start_ms: float, end_ms: float) -> slice:
        """The per-ms positions of the event times t with start_ms <= t < end_ms."""
        lo = int(np.clip(np.ceil(start_ms) - self.first_ms, 0, self.n_ms))
        hi = int(np.clip(np.ceil(end_ms) - self.first_ms, 0, self.n_ms))
        return slice(lo, max(lo, hi))


def n_complete_bins(origin_s: float, end_s: float, bin_s: float) -> int:
    """Number of whole bins of ``bin_s`` from ``origin_s`` before ``end_s`` (>= 0)."""
    return max(int(np.floor((end_s - origin_s) / bin_s + 1e-9)), 0)


class BinnedColumns:
    """`binned_series` as plain numpy columns, without pandas: what the analysis of a log reads.

    ``columns``: name -> float64 array (the columns of `SERIES_COLUMNS`), ``index``: each bin's start
    (s on the log clock), ``attrs``: ``{"bin_s": width}``; ``table[name]`` is a column and
    ``len(table)`` the bins; `to_frame` gives the DataFrame of `binned_series` (pandas imported then).
    """

    __slots__ = ("columns", "index", "attrs")

    def __init__(self, columns: dict[str, np.ndarray], index: np.ndarray, attrs: dict) -> None:
        self.columns, self.index, self.attrs = columns, index, attrs

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __len__(self) -> int:
        return self.index.size

    def to_frame(self) -> pd.DataFrame:
        """The DataFrame of `binned_series` (its own copy of every column)."""
        frame = pd.DataFrame({k: v.copy() for k, v in self.columns.items()},
                             index=pd.Index(self.index.copy(), name="t_s"))
        frame.attrs.update(self.attrs)
        return frame


def binned_series(
    arrays: LogArrays, origin_s: float, end_s: float, bin_s: float, smooth_bins: int = 1
) -> pd.DataFrame:
    """Bin a log into the columns of `SERIES_COLUMNS` (see the module docstring).

    Args:
        arrays: the log (`LogArrays`).
        origin_s: start of the first bin, s on the log clock.
        end_s: exclusive end of the span, s; only complete bins are kept.
        bin_s: bin width, s (> 0), normally one RTT.
        smooth_bins: width of the centred moving average applied alike to
            throughput and reference (1 = the bins alone).

    Returns:
        DataFrame indexed by bin start ``t_s`` (s on the log clock), with
        ``attrs["bin_s"] = bin_s``; 0 rows when no complete bin fits.

    Raises:
        ValueError: bin_s not positive or smooth_bins < 1.
    """
    return binned_columns(arrays, origin_s, end_s, bin_s, smooth_bins).to_frame()


def binned_columns(
    arrays: LogArrays, origin_s: float, end_s: float, bin_s: float, smooth_bins: int = 1
) -> BinnedColumns:
    """`binned_series` as `BinnedColumns` (no pandas unless ``smooth_bins`` > 1); the same arguments and
    errors. The columns are shared with later calls for the same span: read them, do not write them."""
    if not bin_s > 0:
        raise ValueError(f"bin width must be positive, got {bin_s!r} s")
    if smooth_bins < 1:
        raise ValueError(f"smooth_bins must be >= 1, got {smooth_bins!r}")
    # the analysis asks for the same span more than once (the run, its first step, its flow): made once
    memo = getattr(arrays, "_series_memo", None)
    key = (float(origin_s), float(end_s), float(bin_s), int(smooth_bins))
    if memo is not None and key in memo:
        return memo[key]
    n = n_complete_bins(origin_s, end_s, bin_s)
    pos = bin_positions(arrays, origin_s, bin_s, n)
    scale = 8.0 / (bin_s * 1e6)

    def binned(per_ms: np.ndarray) -> np.ndarray:
        return binned_sum(per_ms, pos, n, arrays)

    n_dep = binned(arrays.ms_sum("departure", "count"))
    qsum = binned(arrays.queueing_ms_sum)
    with np.errstate(invalid="ignore", divide="ignore"):
        qdelay = np.where(n_dep > 0, qsum / np.maximum(n_dep, 1), np.nan)
    throughput = binned(arrays.ms_sum("departure", "bytes")) * scale
    capacity = binned(arrays.ms_sum("opportunity", "bytes")) * scale
    n_ms = np.diff(pos[2])
    queue = binned(arrays.queue_ms)
    with np.errstate(invalid="ignore", divide="ignore"):
        queue = np.where(n_ms > 0, queue / np.maximum(n_ms, 1), np.nan)
    table = BinnedColumns(
        {
            "throughput_mbps": _smooth(throughput, smooth_bins),
            "capacity_mbps": capacity,
            "reference_mbps": _smooth(capacity, smooth_bins),
            "sending_mbps": binned(arrays.ms_sum("arrival", "bytes")) * scale,
            "queueing_delay_ms": qdelay,
            "queue_packets": queue,
            "drops": binned(arrays.ms_sum("drop", "packets")),
        },
        origin_s + np.arange(n) * bin_s, {"bin_s": bin_s})
    if memo is not None:
        memo[key] = table
    return table


class BinPositions:
    """Where bins 0..n-1 lie in a log's per-ms arrays (`bin_positions`); indexable as the tuple
    ``(window, bins, edges)``: the slice of the ms that fall into a bin, the bin of each of those ms
    (int64, made on first use: it is as long as the window), and where each bin's run of ms starts
    (n + 1 int64 positions in the per-ms arrays, the last the window's end)."""

    __slots__ = ("window", "edges", "_bins")

    def __init__(self, window: slice, edges: np.ndarray) -> None:
        self.window, self.edges, self._bins = window, edges, None

    @property
    def bins(self) -> np.ndarray:
        if self._bins is None:
            self._bins = np.repeat(np.arange(self.edges.size - 1, dtype=np.int64), np.diff(self.edges))
        return self._bins

    def __getitem__(self, k: int):
        return self.bins if k in (1, -2) else (self.window, None, self.edges)[k]

    def __len__(self) -> int:
        return 3

    def __iter__(self):
        return iter((self.window, self.bins, self.edges))


def _bin_of(ms: np.ndarray, origin_ms: float, bin_ms: float) -> np.ndarray:
    """The bin of each ms: floor((t - origin) / width + 1e-9) (the slack keeps a bin edge that lands on a
    whole ms, up to float rounding, in the later bin)."""
    return np.floor((ms - origin_ms) / bin_ms + 1e-9).astype(np.int64)


def bin_positions(arrays: LogArrays, origin_s: float, bin_s: float, n: int) -> BinPositions:
    """Which ms fall into bins 0..n-1 of ``bin_s`` from ``origin_s`` (for `binned_sum`): their
    positions in the per-ms arrays, the bin of each, and where each bin's run of ms starts (n + 1 edges);
    see `BinPositions`.

    A ms t is in bin floor((t - origin) / width + 1e-9) (`_bin_of`).  The bin of a ms grows with it,
    so each bin is a run of ms: only the n + 1 edges are found (the first ms of each bin, by the same
    formula at the few whole ms around origin + k x width), never the bin of every ms of the log.
    """
    origin_ms, bin_ms = origin_s * 1000.0, bin_s * 1000.0
    # the ms that can fall into the bins (one ms of slack each side for the rounding)
    span = arrays.ms_window(np.floor(origin_ms) - 1, np.ceil(origin_ms + n * bin_ms) + 2)
    m0, m1 = arrays.first_ms + span.start, arrays.first_ms + span.stop
    k = np.arange(n + 1, dtype=np.int64)
    # the first ms of bin k is within a ms or two of origin + k x width: try the five whole ms around it
    guess = np.ceil(origin_ms + k * bin_ms).astype(np.int64) - 2
    tries = guess[:, None] + np.arange(5, dtype=np.int64)
    reached = _bin_of(tries, origin_ms, bin_ms) >= k[:, None]
    if not (reached[:, -1].all() and not reached[:, 0].any()):  # cannot happen with float64 ms; be exact anyway
        ms = np.arange(m0, m1)
        edges = span.start + np.searchsorted(_bin_of(ms, origin_ms, bin_ms), k, side="left")
    else:
        first = tries[k, np.argmax(reached, axis=1)]
        edges = np.clip(first, m0, m1) - arrays.first_ms
    edges = edges.astype(np.int64, copy=False)
    return BinPositions(slice(int(edges[0]), int(edges[-1])), edges)


def binned_sum(per_ms: np.ndarray, pos, n: int, arrays: LogArrays | None = None) -> np.ndarray:
    """Sum of a per-ms array over each of n bins at `bin_positions` ``pos`` (float64): each bin's run of
    ms added up when ``arrays`` says its values are whole (`LogArrays.is_whole`: exact in any order, in
    int64 for integer arrays), else ms by ms."""
    edges = pos[2]
    if arrays is not None and arrays.is_whole(per_ms):
        # whole numbers add up exactly in any order: each bin's run of ms summed at C speed, no running sum
        # of the whole log kept (a big log's per-ms arrays are each as long as it has ms)
        out = np.zeros(n)
        full = np.flatnonzero(edges[1:] > edges[:-1])
        if not full.size:
            return out
        starts, stop = edges[full], int(edges[-1])
        acc = np.int64 if per_ms.dtype.kind in "iub" else np.float64  # never a narrow dtype's own: it could wrap
        if per_ms.dtype == acc:
            out[full] = np.add.reduceat(per_ms[starts[0] : stop], starts - starts[0])
            return out
        # summed into the wide dtype a group of bins of about _SUM_BLOCK ms at a time: reduceat casts what it
        # is given whole, and a long log's per-ms array cast whole would be 8 bytes per ms
        sums = np.empty(full.size)
        k = 0
        while k < full.size:
            j = max(int(np.searchsorted(starts, starts[k] + _SUM_BLOCK, side="right")), k + 1)
            hi = int(starts[j]) if j < full.size else stop
            sums[k:j] = np.add.reduceat(per_ms[starts[k] : hi], starts[k:j] - starts[k], dtype=acc)
            k = j
        out[full] = sums
        return out
    return np.bincount(pos[1], weights=per_ms[pos[0]], minlength=n)[:n]


def _smooth(x: np.ndarray, width: int) -> np.ndarray:
    if width == 1 or x.size == 0:
        return x
    return pd.Series(x).rolling(width, center=True, min_periods=1).mean().to_numpy()


def rate_series(events: pd.DataFrame, bin_ms: float, end_ms: float | None = None, origin_ms: float = 0.0) -> pd.DataFrame:
    """`binned_series` of a log's events in ms units (bins from ``origin_ms``, default 0).

    ``end_ms`` defaults to the last event time + 1 ms.  Index ``t_s``.
    """
    arrays = LogArrays(events)
    if end_ms is None:
        end_ms = float(arrays.last_ms) + 1.0 if arrays.n_events else 0.0
    return binned_series(arrays, origin_ms / 1000.0, end_ms / 1000.0, bin_ms / 1000.0)
