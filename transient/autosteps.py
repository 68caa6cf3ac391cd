"""``--steps auto``: capacity steps found in a log's delivery-opportunity rate.

The offered capacity (``#`` lines) is binned in `AUTO_BIN_S` bins and
segmented with ruptures' PELT search (least-squares cost, the "l2" model),
penalty = `PENALTY_FACTOR` x sigma^2 x ln(n), sigma estimated from the bins'
successive differences (median absolute deviation / 0.6745 / sqrt 2, robust
to the steps themselves), segments at least `MIN_SEGMENT_S` long.  Each
change point becomes a `Step` from the mean rate of the segment before to
that of the segment after (rounded to 0.01 Mbit/s); the link's first level
is a step from 0 at the log's time 0, as a trace starts there.
"""

from __future__ import annotations

import math

import numpy as np

from .series import LogArrays, binned_series
from .steps import Step

AUTO_BIN_S = 0.1
PENALTY_FACTOR = 3.0
MIN_SEGMENT_S = 0.5


def detect_steps(arrays: LogArrays) -> list[Step]:
    """Steps of the offered capacity of a log (see module docstring); [] when it has no complete bin.

    Raises:
        ImportError: ruptures is not installed (it is a dependency in pyproject.toml).
    """
    import ruptures as rpt

    end_s = (arrays.last_ms + 1) / 1000.0
    cap = binned_series(arrays, 0.0, end_s, AUTO_BIN_S)["capacity_mbps"].to_numpy()
    if cap.size == 0:
        return []
    min_size = max(int(round(MIN_SEGMENT_S / AUTO_BIN_S)), 2)
    breaks = [cap.size]
    if cap.size >= 2 * min_size:
        diffs = np.diff(cap)
        sigma = float(np.median(np.abs(diffs - np.median(diffs)))) / 0.6745 / math.sqrt(2.0)
        sigma = max(sigma, 1e-3 * max(float(np.abs(cap).max()), 1.0))  # a noiseless trace still needs a penalty
        pen = PENALTY_FACTOR * sigma**2 * math.log(cap.size)
        breaks = rpt.Pelt(model="l2", min_size=min_size, jump=1).fit(cap.reshape(-1, 1)).predict(pen=pen)
    levels, edges = [], [0, *breaks]
    for a, b in zip(edges[:-1], edges[1:]):
        levels.append(round(float(cap[a:b].mean()), 2))
    steps = [Step(0.0, 0.0, levels[0])]
    for k in range(1, len(levels)):
        if levels[k] != levels[k - 1]:
            steps.append(Step(round(edges[k] * AUTO_BIN_S, 6), levels[k - 1], levels[k]))
    return steps
