"""The ``ccplab`` method (default): convergence and Normalized Area of one step, corrected.

What is measured against what.  The throughput x_k is what the link
delivered (departures) in bin k of one RTT; the reference r_k is the capacity
the link offered in the same bin (its ``#`` delivery opportunities), binned
and smoothed the same way (`transient.series`).  A sender that fills every
delivery opportunity has x = r exactly, whatever the trace's noise, so the
trace's noise is never counted as the CCA's error.

Convergence.  As in TPCCA, candidate starts i are tested with ``n_windows``
(3) windows of ``window_bins`` (10) bins, ``shift_bins`` (4) apart, but on
the relative tracking error e_k = (x_k - r_k) / L, L = mean reference over
the candidate's windows (so the thresholds scale with the rate).  Bin i is
the convergence point when

* stable: the population variance of the 3 window means of e is at most
  ``mean_var_threshold`` and that of the 3 window variances at most
  ``var_var_threshold`` (defaults: TPCCA's 0.02 (Mbit/s)^2 and 0.02
  (Mbit/s)^4 at its 12 Mbit/s base rate, made relative: 0.02 / 12^2 and
  0.02 / 12^4), and
* in band: every window's mean |e| and the bin i itself are within
  ``band`` (5 %) of the reference, i.e. the level is right, not just flat,

for the first such i.  The convergence point is the start of bin i (not the
middle of TPCCA's middle window, which adds 9 bins even to a perfect
tracker).  Windows never cross the step's span (the next step or the run's
end); when no candidate passes, the step did not converge: convergence time
and Normalized Area are NaN (null in JSON), never a made-up point.

Normalized Area (NA) = area / |delta B|, with area = sum over the bins
before convergence of |r_k - x_k| x bin width (Mbit) and delta B = the
step's nominal change (Mbit/s).  Unit: seconds, "seconds of the whole step
lost".  Why: the area grows with every bin spent off the reference, so a
slower transient always scores worse (TPCCA divides by the convergence time,
which rewards a long transient with a small mean error); dividing by |delta
B| makes steps of different sizes and rates comparable (a sender that
starts one RTT late on any step up loses about one RTT).  A step with delta
B = 0 has NaN NA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

TPCCA_BASE_RATE_MBPS = 12.0


@dataclass(frozen=True)
class ConvergenceParams:
    """Detector parameters of the ccplab method (bins are one RTT each).

    Attributes:
        window_bins, shift_bins, n_windows: TPCCA's 10 RTT windows 4 RTT apart, 3 of them.
        mean_var_threshold: max population variance of the windows' mean relative error.
        var_var_threshold: max population variance of the windows' relative error variance.
        band: max |relative error| of each window mean and of the convergence bin.
    """

    window_bins: int = 10
    shift_bins: int = 4
    n_windows: int = 3
    mean_var_threshold: float = 0.02 / TPCCA_BASE_RATE_MBPS**2
    var_var_threshold: float = 0.02 / TPCCA_BASE_RATE_MBPS**4
    band: float = 0.05

    def __post_init__(self) -> None:
        if self.window_bins < 1 or self.shift_bins < 1 or self.n_windows < 2:
            raise ValueError(f"need window_bins >= 1, shift_bins >= 1, n_windows >= 2; got "
                             f"{self.window_bins}, {self.shift_bins}, {self.n_windows}")
        if min(self.mean_var_threshold, self.var_var_threshold, self.band) < 0:
            raise ValueError("thresholds and band must be >= 0")

    @property
    def span_bins(self) -> int:
        """Bins covered by one candidate's windows."""
        return self.shift_bins * (self.n_windows - 1) + self.window_bins


@dataclass(frozen=True)
class Convergence:
    """Result for one step (bins counted from the step's first bin).

    converged: a candidate passed; index: its bin (None if not);
    area_mbit: sum |r - x| x width over the bins before convergence (over
    the whole span when not converged); normalized_area: area / |delta B|
    (s), NaN when not converged or delta B = 0.
    """

    converged: bool
    index: int | None
    area_mbit: float
    normalized_area: float


def first_converged_bin(x: np.ndarray, r: np.ndarray, params: ConvergenceParams = ConvergenceParams()) -> int | None:
    """Index of the first bin where ``x`` has converged to ``r`` (see module docstring), or None.

    Args:
        x: throughput per bin (Mbit/s); r: reference per bin (Mbit/s), same length.
    """
    return first_converged_bins(np.asarray(x, np.float64)[:, None], r, params)[0]


def first_converged_bins(x: np.ndarray, r: np.ndarray, params: ConvergenceParams = ConvergenceParams()) -> list[int | None]:
    """`first_converged_bin` of every column of ``x`` (n bins x k series) against one reference ``r`` (n)."""
    x = np.asarray(x, np.float64)
    r = np.asarray(r, np.float64)
    W, S, K = params.window_bins, params.shift_bins, params.n_windows
    n_cand = x.shape[0] - params.span_bins + 1
    if n_cand <= 0:
        return [None] * x.shape[1]
    r_means = sliding_window_view(r, W).mean(axis=1)
    level = np.mean([r_means[k * S : k * S + n_cand] for k in range(K)], axis=0)  # L per candidate
    ok_level = (level > 0)[:, None]
    safe = np.where(level > 0, level, 1.0)[:, None]
    err = x - r[:, None]
    e_windows = sliding_window_view(err, W, axis=0)  # (n - W + 1, k, W)
    e_mean, e_var = e_windows.mean(axis=2), e_windows.var(axis=2)
    means = np.stack([e_mean[k * S : k * S + n_cand] for k in range(K)]) / safe  # (K, candidates, k)
    varis = np.stack([e_var[k * S : k * S + n_cand] for k in range(K)]) / safe**2
    stable = (means.var(axis=0) <= params.mean_var_threshold) & (varis.var(axis=0) <= params.var_var_threshold)
    in_band = (np.abs(means) <= params.band).all(axis=0) & (np.abs(err[:n_cand]) / safe <= params.band)
    hit = ok_level & stable & in_band
    first = hit.argmax(axis=0)
    return [int(i) if hit[i, j] else None for j, i in enumerate(first)]


def step_convergence(
    x: np.ndarray, r: np.ndarray, bin_s: float, delta_mbps: float, params: ConvergenceParams = ConvergenceParams()
) -> Convergence:
    """Convergence and Normalized Area of one step's bins (from the step to the end of its span).

    Args:
        x, r: throughput and reference per bin (Mbit/s).
        bin_s: bin width (s).
        delta_mbps: the step's nominal change to - from (Mbit/s).
    """
    return step_convergences(np.asarray(x, np.float64)[:, None], r, bin_s, [delta_mbps], params)[0]


def step_convergences(x: np.ndarray, r: np.ndarray, bin_s: float, deltas_mbps, params: ConvergenceParams = ConvergenceParams()
                      ) -> list[Convergence]:
    """`step_convergence` of every column of ``x`` (n bins x k series, Mbit/s) against one reference ``r``
    (n, Mbit/s), column j's step of ``deltas_mbps[j]`` Mbit/s."""
    x = np.asarray(x, np.float64)
    r = np.asarray(r, np.float64)
    out = []
    for j, i in enumerate(first_converged_bins(x, r, params)):
        stop = i if i is not None else x.shape[0]
        area = float(np.abs(r[:stop] - x[:stop, j]).sum() * bin_s)
        na = math.nan if i is None or deltas_mbps[j] == 0 else area / abs(deltas_mbps[j])
        out.append(Convergence(i is not None, i, area, na))
    return out
