"""``--method tpcca``: the TPCCA poster's reference analysis, reproduced exactly, faults included.

Source: "Transient Performance of Congestion Control Algorithms" (SIGCOMM'21
poster), code github BobAnkh/TPCCA, ``utils/parse_tput_delay.py`` (bins)
and ``utils/area.py`` (steady-state detector, area).  Re-written here from
the poster's and those files' definitions, described below (no code copied).

1. Input: only the arrival (``+``) events, time t = ms on the log clock / 1000
   (i.e. minus the base timestamp), size in bytes.
2. Horizon: events with t > end are ignored, end = min(duration, 2 x the
   one-way delay in ms *read as seconds*) (50 s at 25 ms).
3. Bins: size = RTT_s x B / 12 (B = nominal Mbit/s).  The first bin starts
   at 0.  For each event in order: if t > bin_start + size (strictly) the
   open bin is emitted as (bin_start, bits / (t - bin_start) / 1e6 Mbit/s),
   the divisor being the gap to the event that closes it, and a new bin
   starts at t holding that event's bits; otherwise the bits are added to
   the open bin.  The last open bin is never emitted.
4. Detector (W = 10 RTT, S = 4 RTT, limit 40): for each bin i in order, give
   up if t_i >= 40; for k = 0, 1, 2 the window starts at the first bin a_k
   >= i with t >= t_i + k S and ends at the first bin b_k >= a_k with t >=
   t_{a_k} + W (either search giving up on reaching a bin with t >= 40, or
   running out of bins); m_k, v_k = mean and population variance (ddof 0)
   of x over a_k..b_k inclusive; steady when var(m) <= 0.02 and var(v) <=
   0.02; the result is bin s = int((a_1 + b_1) / 2).  Giving up returns 40,
   which is then used as a *bin index*.
5. NA = (12 / B) x [sum_{i < s} |B - x_i| (t_{i+1} - t_i)] / (t_s - t_0);
   convergence time = t_s.

On a bare log the step is 0 -> B (``--capacity-mbps``) at t = 0; for a run
directory B = the nominal rate after the first step at or before the flow's
start.  Only that one step is analysed.

Faults kept on purpose (`TPCCA_FAULTS`, shown in the report):
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

TPCCA_FAULTS = (
    "counts arrivals at the bottleneck (the rate of the sender incl. packets later dropped), not deliveries",
    "time zero is the start of the log, so the iperf3 control-connection handshake before the data flow counts as transient",
    "bins are closed by the next arrival: the divisor is the gap to that arrival, not the bin width, and the last bin is dropped",
    "thresholds (0.02 (Mbit/s)^2 and 0.02 (Mbit/s)^4) are absolute and do not scale with the rate",
    "a flat stretch at the wrong level counts as converged (no check against the capacity)",
    "the convergence point is the middle of the middle window, 9 RTT after the first steady bin even for a perfect tracker",
    "a run that never converges (or whose windows run past 40 s or out of bins) gets bin index 40 as its convergence point and a finite area",
    "the horizon is 2 x the one-way delay in ms read as seconds (50 s at 25 ms)",
    "the area is divided by the convergence time, which rewards long transients with a small mean error",
    "only one step, 0 -> B at time 0, is analysed: no step down, no later steps",
    "the reference is the nominal rate B, so the noise of the trace counts as an error of the CCA",
)
"""The faults of TPCCA's reference analysis that ``--method tpcca`` keeps (for the report; no
apostrophes, so that every HTML escaper renders them alike)."""

__doc__ += "".join(f"\n{k}. {fault}" for k, fault in enumerate(TPCCA_FAULTS, start=1)) + "\n"

GIVE_UP = 40
"""TPCCA's detector limit (s) and the bin index it returns when it gives up."""


@dataclass(frozen=True)
class TpccaResult:
    """TPCCA's answer for one run.

    Attributes:
        bins_t, bins_mbps: the emitted bins (start s, Mbit/s).
        stable_index: the bin index TPCCA returns (40 when it gave up).
        gave_up: the detector gave up (TPCCA would still report index 40).
        convergence_s: t of bin ``stable_index`` (NaN when that bin does
            not exist: TPCCA itself would raise IndexError).
        normalized_area: TPCCA's NA (NaN when its code would fail:
            missing bin, or s = 0 dividing by t_0 - t_0).
        area_mbit: the un-normalized sum |B - x_i| (t_{i+1} - t_i).
    """

    bins_t: np.ndarray
    bins_mbps: np.ndarray
    stable_index: int
    gave_up: bool
    convergence_s: float
    normalized_area: float
    area_mbit: float

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("bins_t"), d.pop("bins_mbps")
        return d


def tpcca_bins(times_s: np.ndarray, nbytes: np.ndarray, bin_size_s: float, end_s: float) -> tuple[np.ndarray, np.ndarray]:
    """TPCCA's arrival bins (step 3 of the module docstring).

    Args:
        times_s: arrival times (s), in log order (nondecreasing).
        nbytes: their sizes (bytes).
        bin_size_s: RTT_s x B / 12.
        end_s: horizon; events after it are ignored.

    Returns:
        (bin starts s, rates Mbit/s) of the emitted bins.

    One Python step per *bin* (not per event): the closing event of a bin is
    found by binary search and the bits by a cumulative sum.
    """
    times_s = np.asarray(times_s, np.float64)
    keep = times_s <= end_s
    keep &= np.cumsum(~keep) == 0  # TPCCA stops at the first event past the horizon
    t = times_s[keep]
    cum_bits = np.concatenate([[0.0], np.cumsum(np.asarray(nbytes, np.float64)[keep] * 8.0)])
    starts, rates = [], []
    bin_start, first_event = 0.0, 0
    while True:
        j = int(np.searchsorted(t, bin_start + bin_size_s, side="right"))  # first event with t > start + size
        if j >= t.size:
            break  # the open bin is never emitted
        starts.append(bin_start)
        rates.append((cum_bits[j] - cum_bits[first_event]) / (t[j] - bin_start) / 1e6)
        bin_start, first_event = float(t[j]), j
    return np.asarray(starts), np.asarray(rates)


def _window_end(t: np.ndarray, start: int, length: float) -> int | None:
    """TPCCA's window search: first bin j >= start with t_j >= t_start + length.

    The scan from ``start`` checks t_j >= 40 *before* the target, so it gives
    up (None) when a bin with t >= 40 comes no later than j, or when it runs
    out of bins.
    """
    j = max(int(np.searchsorted(t, t[start] + length, side="left")), start)
    limit = int(np.searchsorted(t, GIVE_UP, side="left"))  # first bin with t >= 40
    if j >= t.size or limit <= j:
        return None
    return j


def tpcca_stable_index(t: np.ndarray, x: np.ndarray, rtt_s: float) -> tuple[int, bool]:
    """TPCCA's steady-state detector (step 4); returns (bin index, gave_up)."""
    W, S = 10 * rtt_s, 4 * rtt_s
    for i in range(t.size):
        if t[i] >= GIVE_UP:
            return GIVE_UP, True
        stats, mark = [], None
        for k in range(3):
            a = _window_end(t, i, k * S)
            b = _window_end(t, a, W) if a is not None else None
            if a is None or b is None:
                return GIVE_UP, True
            seg = x[a : b + 1]
            stats.append((seg.mean(), seg.var()))
            if k == 1:
                mark = int((a + b) / 2)
        m = np.array(stats)
        if m[:, 0].var() <= 0.02 and m[:, 1].var() <= 0.02:
            return mark, False
    return GIVE_UP, True


def tpcca_analysis(times_s: np.ndarray, nbytes: np.ndarray, capacity_mbps: float, one_way_delay_ms: float,
                   duration_s: float) -> TpccaResult:
    """TPCCA's convergence time and Normalized Area of a run (module docstring, steps 1-5).

    Args:
        times_s, nbytes: the arrival (``+``) events, s on the log clock and bytes.
        capacity_mbps: B, the nominal rate after the step at time 0 (> 0).
        one_way_delay_ms: one-way delay (RTT = 2x), ms.
        duration_s: the run's configured duration, s.

    Raises:
        ValueError: B or the delay not positive.
    """
    if not capacity_mbps > 0:
        raise ValueError(f"TPCCA needs a positive capacity B, got {capacity_mbps!r} Mbit/s")
    if not one_way_delay_ms > 0:
        raise ValueError(f"TPCCA needs a positive one-way delay, got {one_way_delay_ms!r} ms")
    rtt_s = 2.0 * one_way_delay_ms / 1000.0
    end_s = min(duration_s, 2.0 * one_way_delay_ms)  # the ms value read as seconds, as TPCCA does
    t, x = tpcca_bins(times_s, nbytes, rtt_s * capacity_mbps / 12.0, end_s)
    s, gave_up = tpcca_stable_index(t, x, rtt_s)
    if s >= t.size:
        return TpccaResult(t, x, s, gave_up, math.nan, math.nan, math.nan)
    widths = np.diff(t[: s + 1])
    area = float((np.abs(capacity_mbps - x[:s]) * widths).sum())
    span = t[s] - t[0]
    na = (12.0 / capacity_mbps) * area / span if span > 0 else math.nan
    return TpccaResult(t, x, s, gave_up, float(t[s]), na, area)
