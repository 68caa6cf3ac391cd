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

import numpy as np
import pandas as pd

SERIES_COLUMNS = [
    "throughput_mbps", "capacity_mbps", "reference_mbps", "sending_mbps",
    "queueing_delay_ms", "queue_packets", "drops",
]
"""Columns of `binned_series` (see the module docstring)."""

_CODES = {"arrival": 0, "departure": 1, "opportunity": 2, "drop": 3}


class LogArrays:
    """The event columns of a log as numpy arrays, with per-ms queue occupancy (computed once per log)."""

    def __init__(self, events: pd.DataFrame) -> None:
        self.t = events["time_ms"].to_numpy(np.int64)
        self.code = events["kind"].cat.codes.to_numpy()
        self.nbytes = events["bytes"].to_numpy(np.float64)
        self.delay = events["delay_ms"].to_numpy(np.float64)
        self.packets = events["packets"].to_numpy(np.float64)
        self._masks = {kind: self.code == c for kind, c in _CODES.items()}
        dep = self._masks["departure"]
        self.base_delay_ms = float(self.delay[dep].min()) if dep.any() else float("nan")
        self.queueing_ms = np.nan_to_num(self.delay - self.base_delay_ms)  # 0 for non-departures
        self.first_ms = int(self.t.min()) if self.t.size else 0
        self.last_ms = int(self.t.max()) if self.t.size else 0
        # queue occupancy at the end of each ms from first_ms to last_ms
        n = self.last_ms - self.first_ms + 1
        ms = self.t - self.first_ms
        change = np.zeros(n)
        for kind, sign in (("arrival", 1.0), ("departure", -1.0), ("drop", -1.0)):
            m = self._masks[kind]
            change += sign * np.bincount(ms[m], weights=self.packets[m], minlength=n)
        self.queue_ms = np.cumsum(change)

    def mask(self, kind: str) -> np.ndarray:
        """Boolean mask of the events of one kind (computed once)."""
        return self._masks[kind]


def n_complete_bins(origin_s: float, end_s: float, bin_s: float) -> int:
    """Number of whole bins of ``bin_s`` from ``origin_s`` before ``end_s`` (>= 0)."""
    return max(int(np.floor((end_s - origin_s) / bin_s + 1e-9)), 0)


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
    if not bin_s > 0:
        raise ValueError(f"bin width must be positive, got {bin_s!r} s")
    if smooth_bins < 1:
        raise ValueError(f"smooth_bins must be >= 1, got {smooth_bins!r}")
    n = n_complete_bins(origin_s, end_s, bin_s)
    bin_ms = bin_s * 1000.0
    origin_ms = origin_s * 1000.0
    idx = np.floor((arrays.t - origin_ms) / bin_ms + 1e-9).astype(np.int64)
    keep = (idx >= 0) & (idx < n)
    scale = 8.0 / (bin_s * 1e6)
    # one pass per weight: key = bin x 4 + kind code, so each bincount fills all four kinds
    key = idx[keep] * 4 + arrays.code[keep]

    def per_kind(weights: np.ndarray | None) -> np.ndarray:
        w = weights[keep] if weights is not None else None
        return np.bincount(key, weights=w, minlength=4 * n)[: 4 * n].reshape(n, 4)

    nbytes = per_kind(arrays.nbytes)
    count = per_kind(None)
    packets = per_kind(arrays.packets)
    qsum = per_kind(arrays.queueing_ms)[:, _CODES["departure"]]
    n_dep = count[:, _CODES["departure"]]
    with np.errstate(invalid="ignore", divide="ignore"):
        qdelay = np.where(n_dep > 0, qsum / np.maximum(n_dep, 1), np.nan)
    throughput = nbytes[:, _CODES["departure"]] * scale
    capacity = nbytes[:, _CODES["opportunity"]] * scale
    frame = pd.DataFrame(
        {
            "throughput_mbps": _smooth(throughput, smooth_bins),
            "capacity_mbps": capacity,
            "reference_mbps": _smooth(capacity, smooth_bins),
            "sending_mbps": nbytes[:, _CODES["arrival"]] * scale,
            "queueing_delay_ms": qdelay,
            "queue_packets": _queue_per_bin(arrays, origin_ms, bin_ms, n),
            "drops": packets[:, _CODES["drop"]],
        },
        index=pd.Index(origin_s + np.arange(n) * bin_s, name="t_s"),
    )
    frame.attrs["bin_s"] = bin_s
    return frame


def _smooth(x: np.ndarray, width: int) -> np.ndarray:
    if width == 1 or x.size == 0:
        return x
    return pd.Series(x).rolling(width, center=True, min_periods=1).mean().to_numpy()


def _queue_per_bin(arrays: LogArrays, origin_ms: float, bin_ms: float, n: int) -> np.ndarray:
    ms = np.arange(arrays.first_ms, arrays.last_ms + 1)
    idx = np.floor((ms - origin_ms) / bin_ms + 1e-9).astype(np.int64)
    keep = (idx >= 0) & (idx < n)
    count = np.bincount(idx[keep], minlength=n)[:n]
    total = np.bincount(idx[keep], weights=arrays.queue_ms[keep], minlength=n)[:n]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def rate_series(events: pd.DataFrame, bin_ms: float, end_ms: float | None = None, origin_ms: float = 0.0) -> pd.DataFrame:
    """`binned_series` of a log's events in ms units (bins from ``origin_ms``, default 0).

    ``end_ms`` defaults to the last event time + 1 ms.  Index ``t_s``.
    """
    arrays = LogArrays(events)
    if end_ms is None:
        end_ms = float(arrays.last_ms) + 1.0 if arrays.t.size else 0.0
    return binned_series(arrays, origin_ms / 1000.0, end_ms / 1000.0, bin_ms / 1000.0)
