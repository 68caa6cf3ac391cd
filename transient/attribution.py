"""Per-packet flow attribution of a link log: which flow each packet event belongs to.

ccplab-link's ``--flow-log`` writes, beside the stock mahimahi log, one line
per packet event of the log (every ``+`` arrival, ``-`` departure and ``d``
drop line, in the log's order; no header, no ``#`` opportunity lines): the
decimal flow key of that packet, the TCP/UDP port on the receiver's side (0
for a packet with none). The runner gives every flow its own receiver port
(metadata.json ``flows[k].port``), so key k of the flow log names the flow of
the k-th packet event of the log.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .errors import AnalysisError

PACKET_EVENT_KINDS = ("arrival", "departure", "drop")
"""Event kinds that carry a flow key (every kind of a link log but the opportunity)."""


def read_flow_keys(path: str | Path) -> np.ndarray:
    """The flow keys of a flow log, in order: uint16 array of shape (packet events,).

    Raises:
        AnalysisError: unreadable file, or a line that is not a port number
            0..65535 (the message names the file and the line).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AnalysisError(f"{path}: cannot read the flow log: {exc}") from None
    if not raw:
        return np.zeros(0, dtype=np.uint16)
    if not raw.endswith(b"\n"):
        raise AnalysisError(f"{path}: the flow log's last line is cut (no newline at the end)")
    lines = np.frombuffer(raw, dtype=np.uint8)
    ends = np.flatnonzero(lines == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1))
    width = ends - starts
    is_digit = (lines >= ord("0")) & (lines <= ord("9"))
    stray = ~is_digit & (lines != ord("\n"))
    bad_line = (width < 1) | (width > 5)
    if stray.any():
        bad_line[np.searchsorted(ends, np.flatnonzero(stray))] = True
    if bad_line.any():
        k = int(np.flatnonzero(bad_line)[0])
        text = raw[starts[k]:ends[k]].decode(errors="replace")
        raise AnalysisError(f"{path}:{k + 1}: expected a port number, got {text!r}")
    values = np.zeros(len(starts), dtype=np.int64)
    for d in range(5):  # at most 5 digits: add each digit position where the line has one
        pos = ends - width + d
        has = d < width
        values[has] = values[has] * 10 + (lines[pos[has]] - ord("0"))
    if (values > 65535).any():
        k = int(np.flatnonzero(values > 65535)[0])
        raise AnalysisError(f"{path}:{k + 1}: port {values[k]} is above 65535")
    return values.astype(np.uint16)


def attribute(events: pd.DataFrame, keys: np.ndarray, where: str) -> np.ndarray:
    """The flow key of every event (0 for opportunities): uint16 array aligned with ``events``.

    Raises:
        AnalysisError: the flow log has a different number of packet events than the log
            (``where`` names both files).
    """
    packet = (events["kind"] != "opportunity").to_numpy()
    n = int(packet.sum())
    if n != len(keys):
        raise AnalysisError(f"{where}: the link log has {n} packet events but the flow log has {len(keys)} "
                            "keys; they must match one to one")
    out = np.zeros(len(events), dtype=np.uint16)
    out[packet] = keys
    return out
