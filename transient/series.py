"""Binned rate time series of an mm-link log (for transient analysis and plots).

Bins are fixed, non-overlapping and start at time 0 (start of trace replay);
the default width is one RTT.  TPCCA (github BobAnkh/TPCCA) bins arrivals
(``+``) in RTT x B/12 seconds; here throughput is what the link delivered
(departures, ``-``), which is what the receiver sees and cannot exceed the
capacity, and the width is a parameter.

Rates are bytes x 8 / bin width, in Mbit/s, including mahimahi's 4-byte TUN
header per packet (as mm-throughput-graph does).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def rate_series(events: pd.DataFrame, bin_ms: float, end_ms: float | None = None) -> pd.DataFrame:
    """Bin departures, delivery opportunities and arrivals into rates.

    Args:
        events: `LinkLog.events` (time_ms relative to trace start, >= 0).
        bin_ms: bin width in ms (> 0), e.g. the RTT.
        end_ms: exclusive end of the analysed span; default the last event
            time + 1 ms.  Only complete bins (start + width <= end_ms) are
            returned, because a partial bin under-reports the rate.

    Returns:
        DataFrame indexed by bin start time in seconds (``time_s``) with
        float64 columns ``throughput_mbps`` (departures), ``capacity_mbps``
        (delivery opportunities, ``#``) and ``ingress_mbps`` (arrivals, ``+``).
        Empty (0 rows) if the span holds no complete bin.

    Raises:
        ValueError: bin_ms is not positive.
    """
    if not bin_ms > 0:
        raise ValueError(f"bin width must be positive, got {bin_ms!r} ms")
    times = events["time_ms"].to_numpy()
    if end_ms is None:
        end_ms = float(times.max()) + 1.0 if times.size else 0.0
    n_bins = int(np.floor(end_ms / bin_ms + 1e-9))
    idx = np.floor(times / bin_ms).astype(np.int64)
    keep = (idx >= 0) & (idx < n_bins)
    kind = events["kind"]
    nbytes = events["bytes"].to_numpy(np.float64)
    scale = 8.0 / (bin_ms * 1000.0)  # bytes per bin -> Mbit/s

    def rate(kind_name: str) -> np.ndarray:
        m = keep & (kind == kind_name).to_numpy()
        return np.bincount(idx[m], weights=nbytes[m], minlength=n_bins)[:n_bins] * scale

    index = pd.Index(np.arange(n_bins) * bin_ms / 1000.0, name="time_s")
    return pd.DataFrame(
        {
            "throughput_mbps": rate("departure"),
            "capacity_mbps": rate("opportunity"),
            "ingress_mbps": rate("arrival"),
        },
        index=index,
    )
