"""Whole-run link metrics, defined exactly as mahimahi's ``mm-throughput-graph``.

Source: mahimahi (Netravali et al., USENIX ATC'15), ``scripts/mm-throughput-graph``:

* duration = last event time - first event time (first = the first event line
  of the log, last = the largest event time);
* capacity (Mbit/s) = sum of delivery-opportunity (``#``) bytes x 8 / duration;
* throughput (Mbit/s) = sum of departure (``-``) bytes x 8 / duration;
* utilization = throughput / capacity;
* 95th-percentile per-packet queueing delay = ``sorted(delays)[int(0.95 N)]``
  over the delays of all departures (ms, queueing + transmission in the link);
* signal delay (ms) = the minimum time for a message created at time t to
  reach the receiver: each departure at t with delay d gives a direct sample
  ``sig[t - d] = min(d, sig[t - d])``; walking back from the last sending
  time to the first, a millisecond without a direct sample gets
  ``sig[t] = sig[t + 1] + 1``; the 95th percentile is taken over all those
  milliseconds, again as ``sorted(sig)[int(0.95 N)]``.

Power score = throughput (Mbit/s) / p95 signal delay (s): the score of the
MIT 6.829 congestion-control contest built on mahimahi/Sprout (Winstein et
al., NSDI'13), and Kleinrock's "power" with signal delay as the delay.

The walk-back is vectorized: for every millisecond t, let u(t) be the next
millisecond >= t that has a direct sample; the walk-back gives
``sig[t] = sig_direct[u(t)] + (u(t) - t)``.  u(t) is a reverse cumulative
minimum over the sample positions.  (On a FIFO link the departure time
``t + sig_direct[t]`` grows with t, so this also equals the reverse
cumulative minimum of ``sig_direct[u] + u`` minus t.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from ._lazy import lazy_module

pd = lazy_module("pandas")  # loaded when a table is first made (transient._lazy)

if TYPE_CHECKING:
    from .series import LogArrays


@dataclass(frozen=True)
class LinkMetrics:
    """Whole-run metrics of one mm-link log (units in the field names).

    ``p95_*`` and ``power_score`` are NaN when the log has no departures;
    ``utilization`` is NaN when the capacity is zero.
    """

    duration_s: float
    capacity_mbps: float
    throughput_mbps: float
    utilization: float
    p95_queueing_delay_ms: float
    p95_signal_delay_ms: float
    power_score: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def mahimahi_percentile(values: np.ndarray, q: float = 0.95) -> float:
    """``sorted(values)[int(q N)]`` as in mm-throughput-graph (NaN when empty).

    Note: this index is one above numpy's "lower" percentile for some N; it
    is kept for comparability with published mahimahi numbers.
    """
    values = np.asarray(values)
    if values.dtype.kind not in "iuf":
        values = values.astype(np.float64)
    if values.size == 0:
        return float("nan")
    idx = min(int(q * values.size), values.size - 1)
    # in the values' own dtype: the same element, without a float64 copy of a long array
    return float(np.partition(values, idx)[idx])


def signal_delay_series(events: pd.DataFrame) -> pd.Series:
    """Per-millisecond signal delay (ms), indexed by sending time (ms).

    Args:
        events: `LinkLog.events` (only departures are used).

    Returns:
        float64 Series over every ms from the first to the last sending time
        (departure time - delay) of any departed packet; empty if none.
    """
    dep = events.loc[events["kind"] == "departure", ["time_ms", "delay_ms"]]
    if dep.empty:
        return pd.Series([], dtype=np.float64, index=pd.Index([], dtype=np.int64, name="sent_ms"))
    # mahimahi keys the hash by the (integer) timestamp - delay.
    sent = (dep["time_ms"].to_numpy(np.float64) - dep["delay_ms"].to_numpy()).astype(np.int64)
    delay = dep["delay_ms"].to_numpy()
    lo, hi = int(sent.min()), int(sent.max())
    sig_direct = np.full(hi - lo + 1, np.inf)
    np.minimum.at(sig_direct, sent - lo, delay)  # the smallest delay of each sending ms
    return pd.Series(_walk_back(sig_direct), index=pd.Index(np.arange(lo, hi + 1), name="sent_ms"),
                     name="signal_delay_ms")


def _walk_back(sig_direct: np.ndarray) -> np.ndarray:
    """Signal delay of every sending ms from the smallest direct sample of each (inf: none); see module docstring."""
    n = sig_direct.size
    pos = np.flatnonzero(np.isfinite(sig_direct))
    # u(t): next position >= t with a direct sample (reverse running minimum of
    # the sample positions; positions without a sample hold n = "none yet").
    cand = np.full(n, n, dtype=np.int64)
    cand[pos] = pos
    nxt = np.minimum.accumulate(cand[::-1])[::-1]
    return sig_direct[nxt] + (nxt - np.arange(n))


def _signal_delays(sig_direct: np.ndarray) -> np.ndarray:
    """The values of `_walk_back`, in the same order, as int32 (int64 when they would not fit) when every
    direct sample is a whole number (an integer or float32 array, `transient.series.compact`): a long
    log's walk-back in a fraction of float64's memory, for its percentile."""
    n = sig_direct.size
    if n == 0 or n >= 2**31 - 1 or sig_direct.dtype.kind == "f" and sig_direct.dtype.itemsize > 4:
        return _walk_back(sig_direct)  # float64 samples (a delay with a fraction, or beyond float32's whole range)
    cand = np.arange(n, dtype=np.int32)  # each ms's own position where it has a sample, else n
    if sig_direct.dtype.kind == "f":
        cand[~np.isfinite(sig_direct)] = n
    nxt = np.minimum.accumulate(cand[::-1])[::-1]
    del cand
    # every ms takes a sample (the last ms has one), and every sample is taken by its own ms: the samples'
    # largest is the taken values' largest
    taken = sig_direct[nxt]
    out = taken.astype(np.int64 if n + max(float(taken.max()), 0.0) >= 2**31 else np.int32)
    del taken
    out += nxt
    del nxt
    out -= np.arange(n, dtype=out.dtype)
    return out


def link_metrics(events: pd.DataFrame) -> LinkMetrics:
    """Whole-run metrics of a log's events (see the module docstring).

    Raises:
        ValueError: no events, or all events at the same millisecond (zero
            duration, which mahimahi would divide by).
    """
    if events.empty:
        raise ValueError("no events")
    from .series import LogArrays

    return link_metrics_of(LogArrays(events))


def window_link_metrics(events: pd.DataFrame, start_ms: int, end_ms: int) -> LinkMetrics:
    """`link_metrics` over a fixed window of the log: only events at ``start_ms <= t <= end_ms`` count and
    the duration is the window's, ``(end_ms - start_ms) / 1000`` s, whatever the log holds outside it.

    Runs whose logs end at different times (an end-of-test exchange waiting behind a queue, a link
    stopped later) are scored over the same stretch this way. Packets still queued at ``end_ms`` count
    as not delivered, as in a trace played once (``mm-link --once``).

    Raises:
        ValueError: ``end_ms <= start_ms``, or no event in the window.
    """
    if end_ms <= start_ms:
        raise ValueError(f"empty window [{start_ms}, {end_ms}] ms")
    t = events["time_ms"]
    inside = events[(t >= start_ms) & (t <= end_ms)]
    if inside.empty:
        raise ValueError(f"no events in the window [{start_ms}, {end_ms}] ms")
    from .series import LogArrays

    return link_metrics_of(LogArrays(inside), duration_s=(end_ms - start_ms) / 1000.0)


def link_metrics_of(arrays: "LogArrays", duration_s: float | None = None) -> LinkMetrics:
    """`link_metrics` of a log already reduced to `transient.series.LogArrays` (what the analysis holds);
    ``duration_s``: the span the rates are over (default mahimahi's: last event - first event line).

    Raises:
        ValueError: zero duration (all events in the same millisecond).
    """
    if duration_s is None:
        duration_s = (arrays.last_ms - arrays.first_event_ms) / 1000.0
    if duration_s <= 0:
        raise ValueError("zero duration: all events happen in the same millisecond")
    cap_bits = 8.0 * arrays.ms_sum("opportunity", "bytes").sum()
    dep_bits = 8.0 * arrays.ms_sum("departure", "bytes").sum()
    capacity = cap_bits / duration_s / 1e6
    throughput = dep_bits / duration_s / 1e6
    utilization = throughput / capacity if capacity > 0 else float("nan")
    p95_q = mahimahi_percentile(arrays.dep_delay_ms)
    p95_s = mahimahi_percentile(_signal_delays(arrays.sent_min_delay)) if arrays.sent_min_delay.size else float("nan")
    power = throughput / (p95_s / 1000.0) if p95_s > 0 else float("nan")
    return LinkMetrics(duration_s, capacity, throughput, utilization, p95_q, p95_s, power)
