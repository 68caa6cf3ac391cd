"""TPCCA steady-state detector and Normalized Area of a step response.

Source: "Transient Performance of Congestion Control Algorithms" (TPCCA,
SIGCOMM'21 poster; code github BobAnkh/TPCCA, ``utils/area.py``).

Steady-state detection.  The throughput series x (Mbit/s, one value per bin,
normally one RTT) is examined from the bin where the capacity changed.  For a
candidate start bin i, take ``n_windows`` (3) windows of ``window_bins`` (10)
bins starting at i, i + ``shift_bins`` (4), i + 8.  The series is steady at i
when

* the variance of the 3 window means      <= ``mean_var_threshold`` (0.02), and
* the variance of the 3 window variances  <= ``var_var_threshold`` (0.02),

with ``np.var`` (ddof 0) in Mbit/s units (so the second threshold is in
(Mbit/s)^4).  The first steady i gives the convergence point: the middle of
the middle window, i.e. the start of bin ``i + shift_bins + window_bins // 2``.

Normalized Area (TPCCA's transient metric, reference = the nominal new
capacity B in Mbit/s)::

    NA = (12 / B) * sum_{bins k before convergence} |B - x_k| * width
         / (time from the change to convergence)

which is 12/B times the mean absolute throughput error during the transient
(12 Mbit/s is TPCCA's base rate).  The time from the change is measured from
the first bin that starts at or after the change, so it equals
(number of bins summed) x width; it is the true time from the change whenever
the change falls on a bin boundary (steps at 0 s or a multiple of the RTT).

Differences from TPCCA's code (deliberate):

1. Candidate starts are *all* bins from the change whose windows end before
   the run ends (or the next step starts).  TPCCA scans only bins before a
   fixed 40 s.
2. A series that never becomes steady yields ``converged=False`` and NaN
   convergence time and Normalized Area.  TPCCA's detector instead returns
   the number 40, which its caller uses as a *bin index*: a run that never
   converges silently gets convergence at bin 40 (about 2 s at 12 Mbit/s)
   and a finite area.
3. Steps may start anywhere in the run (TPCCA assumes the change at t = 0),
   so step-up, step-down and multi-step runs are analysed step by step.
   For a step down to 0 Mbit/s the normalization 12/B is undefined and the
   Normalized Area is NaN; ``area_mbit`` (the un-normalized area) remains.

Known limitations kept from TPCCA (documented, not fixed): thresholds are
absolute and do not scale with the rate; a plateau at the wrong level counts
as converged (compare ``steady_level_mbps`` with B); dividing by the
convergence time rewards long transients.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

TPCCA_BASE_RATE_MBPS = 12.0
"""TPCCA normalizes the area by B / 12 Mbit/s."""


@dataclass(frozen=True)
class SteadyStateParams:
    """Parameters of the TPCCA steady-state detector (defaults = TPCCA's).

    Attributes:
        window_bins: bins per window (TPCCA: 10 RTT with 1-RTT bins at 12 Mbit/s).
        shift_bins: bins between consecutive window starts (TPCCA: 4 RTT).
        n_windows: number of windows compared (TPCCA: 3).
        mean_var_threshold: max variance of window means, (Mbit/s)^2.
        var_var_threshold: max variance of window variances, (Mbit/s)^4.
    """

    window_bins: int = 10
    shift_bins: int = 4
    n_windows: int = 3
    mean_var_threshold: float = 0.02
    var_var_threshold: float = 0.02

    def __post_init__(self) -> None:
        if self.window_bins < 1 or self.shift_bins < 1 or self.n_windows < 2:
            raise ValueError(
                "need window_bins >= 1, shift_bins >= 1, n_windows >= 2; "
                f"got {self.window_bins}, {self.shift_bins}, {self.n_windows}"
            )
        if self.mean_var_threshold < 0 or self.var_var_threshold < 0:
            raise ValueError("thresholds must be >= 0")

    @property
    def span_bins(self) -> int:
        """Bins covered by all windows of one candidate."""
        return self.shift_bins * (self.n_windows - 1) + self.window_bins

    @property
    def convergence_offset_bins(self) -> int:
        """Convergence bin minus candidate start: middle of the middle window."""
        return self.shift_bins * (self.n_windows // 2) + self.window_bins // 2


@dataclass(frozen=True)
class SteadyState:
    """First steady candidate in a series (indices into that series)."""

    start_index: int
    convergence_index: int
    level_mbps: float  # mean of the windows' means at the steady candidate


def find_steady_state(x: np.ndarray, params: SteadyStateParams = SteadyStateParams()) -> SteadyState | None:
    """Return the first steady candidate of throughput series ``x`` (Mbit/s), or None.

    All candidate starts i with ``i + params.span_bins <= len(x)`` are tested
    at once (window means/variances via a sliding window view).
    """
    x = np.asarray(x, dtype=np.float64)
    W, S, K = params.window_bins, params.shift_bins, params.n_windows
    n_cand = x.size - params.span_bins + 1
    if n_cand <= 0:
        return None
    windows = sliding_window_view(x, W)  # row j = x[j : j + W]
    means = windows.mean(axis=1)
    variances = windows.var(axis=1)  # ddof 0, as TPCCA's np.var
    M = np.stack([means[k * S : k * S + n_cand] for k in range(K)])
    V = np.stack([variances[k * S : k * S + n_cand] for k in range(K)])
    steady = (M.var(axis=0) <= params.mean_var_threshold) & (V.var(axis=0) <= params.var_var_threshold)
    hits = np.flatnonzero(steady)
    if hits.size == 0:
        return None
    i = int(hits[0])
    return SteadyState(i, i + params.convergence_offset_bins, float(M[:, i].mean()))


def normalized_area(x_transient: np.ndarray, bin_s: float, reference_mbps: float) -> tuple[float, float]:
    """TPCCA Normalized Area of the bins before convergence.

    Args:
        x_transient: throughput (Mbit/s) of the bins from the change up to,
            not including, the convergence bin.
        bin_s: bin width in seconds.
        reference_mbps: the reference rate B (nominal new capacity).

    Returns:
        (normalized_area, area_mbit): area_mbit = sum |B - x| * bin_s (Mbit);
        normalized_area = (12 / B) * area_mbit / (len(x) * bin_s).  NaN
        normalized area when B <= 0 or there are no bins.
    """
    x = np.asarray(x_transient, dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan")
    area = float(np.abs(reference_mbps - x).sum() * bin_s)
    if not reference_mbps > 0:
        return float("nan"), area
    return (TPCCA_BASE_RATE_MBPS / reference_mbps) * area / (x.size * bin_s), area


@dataclass(frozen=True)
class StepTransient:
    """Transient of one capacity step (times in s, rates in Mbit/s).

    ``convergence_point_s`` is absolute (run time), ``convergence_time_s`` is
    measured from the step.  Not converged: the three are NaN.
    """

    converged: bool
    convergence_point_s: float
    convergence_time_s: float
    normalized_area: float
    area_mbit: float
    steady_level_mbps: float
    first_bin: int  # index into the full series of the first bin of the step
    end_bin: int  # exclusive index of the step's last complete bin
    convergence_bin: int | None  # index into the full series

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def step_transient(
    throughput: pd.Series,
    bin_s: float,
    at_s: float,
    reference_mbps: float,
    end_s: float | None = None,
    params: SteadyStateParams = SteadyStateParams(),
) -> StepTransient:
    """Detect convergence after a capacity step and compute its Normalized Area.

    Args:
        throughput: Mbit/s per bin, indexed by bin start time (s), bins of
            ``bin_s`` seconds (as `transient.series.rate_series` returns).
        bin_s: bin width (s).
        at_s: time of the capacity change (s).
        reference_mbps: the new nominal capacity B (Mbit/s).
        end_s: end of the step's span (next change or run end); default: the
            end of the series.  Windows never cross it.
        params: detector parameters.
    """
    starts = throughput.index.to_numpy(dtype=np.float64)
    eps = 1e-9 * max(1.0, bin_s)
    first = int(np.searchsorted(starts, at_s - eps, side="left"))
    if end_s is None:
        end = starts.size
    else:
        end = int(np.searchsorted(starts + bin_s, end_s + eps, side="right"))
    end = max(end, first)
    x = throughput.to_numpy(dtype=np.float64)[first:end]
    found = find_steady_state(x, params)
    if found is None:
        nan = float("nan")
        return StepTransient(False, nan, nan, nan, nan, nan, first, end, None)
    c = found.convergence_index
    na, area = normalized_area(x[:c], bin_s, reference_mbps)
    point = round(float(starts[first]) + c * bin_s, 9)  # drop float noise from bin arithmetic
    return StepTransient(True, point, round(point - at_s, 9), na, area, found.level_mbps, first, end, first + c)
