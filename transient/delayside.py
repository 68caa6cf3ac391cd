"""Delay side of a step: the queue a step builds, how long it stays, what it drops.

A saturated link departs at exactly its capacity, so after a step down the
departures follow the new capacity at once and the throughput shows no
transient; the transient is the queue that builds and drains, and the
drops.  So every step (up, down, the flow's start) is also scored here, on
the per-RTT-bin series of `transient.series` from the step to the end of its
span (the next step or the run's end):

* transient window = [step, t_q), t_q = the later of the convergence point
  and the middle of the span (the queue's own transient outlasts the
  throughput's after a step down, and must not count as "standing"); a
  step that did not converge has no steady part: the window is the whole
  span and standing queue and drain time are NaN;
* ``peak_queueing_delay_ms``: largest per-packet queueing delay (delay -
  base, base = smallest delay of the log) of a departure in the window;
* ``standing_queue_ms``: median per-bin queueing delay over [t_q, end);
  ``standing_queue_packets``: mean queue occupancy there;
* ``drain_time_s``: from the step to the start of the first bin, at or after
  the window's highest-delay bin, whose mean queueing delay is back within
  max(10 %, 2 ms) of the standing queue; 0 when the peak bin itself is;
  NaN when it never gets back within the span;
* ``drops``: packets dropped in the window (``d`` lines).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._lazy import lazy_module

pd = lazy_module("pandas")  # loaded when a table is first made (transient._lazy)

from .series import LogArrays

DRAIN_TOLERANCE = (0.10, 2.0)
"""Back at the standing queue = within max(10 % of it, 2 ms)."""


@dataclass(frozen=True)
class DelaySide:
    """Delay metrics of one step (ms, packets, s; NaN where undefined; drops an int)."""

    peak_queueing_delay_ms: float
    standing_queue_packets: float
    standing_queue_ms: float
    drain_time_s: float
    drops: int

    def as_dict(self) -> dict:
        return dict(vars(self))


def delay_side(
    arrays: LogArrays, series: pd.DataFrame, at_s: float, end_s: float, convergence_point_s: float
) -> DelaySide:
    """Delay metrics of the step at ``at_s`` whose span ends at ``end_s`` (see module docstring).

    Args:
        arrays: the log.
        series: `transient.series.binned_series` (or its `BinnedColumns`) from ``at_s`` (one row per bin).
        at_s, end_s: the step's span, s on the log clock.
        convergence_point_s: the throughput's convergence point (NaN if none).
    """
    return delay_sides(arrays, series, at_s, end_s, [convergence_point_s])[0]


def delay_sides(arrays: LogArrays, series: pd.DataFrame, at_s: float, end_s: float,
                convergence_points_s) -> list[DelaySide]:
    """`delay_side` of one span for each of several convergence points (s, NaN if none): the flows
    that answered one event, each converging at its own time."""
    bin_s = float(series.attrs["bin_s"])
    t_bins = np.asarray(series.index)  # a DataFrame's or `BinnedColumns`'
    qd = np.asarray(series["queueing_delay_ms"])
    queue_packets = np.asarray(series["queue_packets"])
    drops_ms = arrays.ms_sum("drop", "packets")
    out = []
    for point in convergence_points_s:
        converged = math.isfinite(point)
        t_q = max(point, at_s + (end_s - at_s) / 2.0) if converged else end_s
        window = t_bins < t_q - 1e-9
        steady = ~window
        win = arrays.ms_window(at_s * 1000.0, t_q * 1000.0)
        peaks = arrays.peak_delay_ms[win]
        # max(delay - base) = max(delay) - base: the subtraction keeps the order
        peak = float(np.nanmax(peaks)) - arrays.base_delay_ms if np.isfinite(peaks).any() else math.nan
        drops = int(drops_ms[win].sum())
        if not converged or not steady.any():
            out.append(DelaySide(peak, math.nan, math.nan, math.nan, drops))
            continue
        standing_ms = _nanmedian(qd[steady])
        standing_pkts = float(np.nanmean(queue_packets[steady]))
        drain = _drain_time(qd, window, standing_ms, bin_s)
        out.append(DelaySide(peak, standing_pkts, standing_ms, drain, drops))
    return out


def _nanmedian(x: np.ndarray) -> float:
    """``np.nanmedian`` of a 1-D float array (NaN when every value is NaN), the same float: the middle
    value, or the mean of the two middle values, of the sorted non-NaN values (numpy's own imports
    numpy.ma, a sizeable share of a big log's analysis)."""
    v = np.sort(x[~np.isnan(x)])
    if v.size == 0:
        return math.nan
    mid = v.size // 2
    return float(v[mid]) if v.size % 2 else float(np.mean(v[mid - 1 : mid + 1]))


def _drain_time(qd: np.ndarray, window: np.ndarray, standing_ms: float, bin_s: float) -> float:
    if not math.isfinite(standing_ms) or not np.isfinite(qd[window]).any():
        return math.nan
    peak_bin = int(np.nanargmax(np.where(window, qd, -np.inf)))
    tol = max(DRAIN_TOLERANCE[0] * standing_ms, DRAIN_TOLERANCE[1])
    back = np.flatnonzero(np.nan_to_num(qd[peak_bin:], nan=0.0) <= standing_ms + tol)  # no departure: nothing waited
    if back.size == 0:
        return math.nan
    k = peak_bin + int(back[0])
    return 0.0 if k == peak_bin else k * bin_s
