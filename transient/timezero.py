"""Time zero of the measured data flow in an mm-link log.

Rule: the flow starts at the arrival (``+`` event, time on the log clock) of
the first packet of at least `FLOW_START_MIN_BYTES` (1000) bytes.

Why this rule: a ccplab run (like a TPCCA one) starts the link, then iperf3.
iperf3 first opens a *control* connection and exchanges a cookie (37 bytes),
its JSON parameters (a few hundred bytes) and one-byte state messages; only
then does it open the *data* connection and send full-size segments (1448 B
of payload, 1504 B on the mahimahi log with headers and the 4-byte TUN
header).  No control message before the test is anywhere near 1000 bytes, so
the first arrival that large is the first data segment of the measured flow.
In the demo's logs it arrives about 259 ms after the log's time 0; counting
those 259 ms as the CCA's transient adds about 3 Mbit of "missing"
throughput to every run.  (The data connection's SYN comes about one RTT
earlier, but it is as small as the control traffic and no congestion
controller acts before its first data segment, so the first data segment is
the meaningful start.)

The runner records this value in metadata.json as ``flow_start_s``; the
analysis uses that value when present and computes it otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, Union

from .errors import AnalysisError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from .mahimahi import LinkLog

FLOW_START_MIN_BYTES = 1000
"""Smallest arrival (bytes incl. TUN header) taken as a data-connection packet."""


def flow_start_s(log_or_path: Union[str, Path, "LinkLog", pd.DataFrame]) -> float:
    """Arrival time (s on the log clock) of the first packet of the data flow.

    Args:
        log_or_path: an mm-link log file (str / Path), a parsed
            `transient.LinkLog`, or its ``events`` DataFrame.

    Returns:
        time of the first ``+`` event with >= 1000 bytes, in seconds on the
        log clock (ms / 1000, after the base timestamp handling of
        `transient.read_link_log`).

    Raises:
        AnalysisError: the log has no arrival of >= 1000 bytes (no data
            flow); the message names the log.
        LogFormatError / OSError: the file is malformed or unreadable.
    """
    from .mahimahi import LinkLog, read_link_log  # late: mahimahi imports nothing from here

    if isinstance(log_or_path, (str, Path)):
        log = read_link_log(log_or_path)
        events, name = log.events, log.path
    elif isinstance(log_or_path, LinkLog):
        events, name = log_or_path.events, log_or_path.path
    elif "pandas" in sys.modules and isinstance(log_or_path, sys.modules["pandas"].DataFrame):  # none without it
        events, name = log_or_path, "<events>"
    else:
        raise TypeError(f"flow_start_s: expected a path, LinkLog or events DataFrame, got {type(log_or_path).__name__}")
    return float(_data_arrival_ms(events, name).min()) / 1000.0


def flow_end_s(events: pd.DataFrame, name: str = "<events>") -> float:
    """End of the measured data flow: 1 ms after its last data-size arrival (s on the log clock).

    The same rule as `flow_start_s` (arrivals of >= 1000 bytes) from the other
    end. The link log runs on for a moment after the sender stops (iperf3's
    result exchange, the runner stopping the link); those idle bins are not
    part of the last step's response, and counting them would show a fall of
    the sending rate to 0 as an undershoot of the last step.

    Args:
        events: a parsed log's events (``transient.LinkLog.events``).
        name: the log's name, for the error.

    Raises:
        AnalysisError: no arrival of >= 1000 bytes (no data flow).
    """
    return (float(_data_arrival_ms(events, name).max()) + 1.0) / 1000.0


def no_data_flow_message(name: str) -> str:
    """The error of a log without a data flow (``name``: the log)."""
    return (f"{name}: no data flow: no arrival ('+' line) of >= {FLOW_START_MIN_BYTES} bytes, "
            "so the flow's start (time zero) cannot be found")


def _data_arrival_ms(events: pd.DataFrame, name: str) -> np.ndarray:
    """Arrival times (ms) of the data flow's packets (>= `FLOW_START_MIN_BYTES`)."""
    import numpy as np

    big = (events["kind"] == "arrival").to_numpy() & (events["bytes"].to_numpy() >= FLOW_START_MIN_BYTES)
    idx = np.flatnonzero(big)
    if idx.size == 0:
        raise AnalysisError(no_data_flow_message(name))
    return events["time_ms"].to_numpy()[idx]


def flow_bounds_s(log_path: Union[str, Path], flow_log_path: Union[str, Path],
                  ports: Sequence[int]) -> list[tuple[float | None, float | None]]:
    """Each flow's (start, end) on the log clock, s, by the rule of `flow_start_s` / `flow_end_s`.

    Args:
        log_path: the mm-link log; flow_log_path: its flow attribution
            (`transient.flowlog`); ports: the receiver port of each flow.

    Returns:
        one (start, end) per port, in order: the arrival of the flow's first
        packet of >= `FLOW_START_MIN_BYTES` and 1 ms after its last one;
        (None, None) for a flow with no such packet.

    Raises:
        AnalysisError: unreadable or mismatched flow log (names the files).
    """
    small = _flow_bounds_small(Path(log_path), Path(flow_log_path), ports)
    if small is not None:
        return small
    from .flowlog import attribute_flow_codes, read_flow_ports
    from .mahimahi import read_link_columns

    cols = read_link_columns(log_path)  # numpy columns: no DataFrame (the runner calls this after every run)
    flow = attribute_flow_codes(cols.code, read_flow_ports(flow_log_path), {p: k for k, p in enumerate(ports)},
                                str(log_path), str(flow_log_path))
    big = (cols.code == 0) & (cols.nbytes >= FLOW_START_MIN_BYTES)
    t_ms = cols.time_ms
    out: list[tuple[float | None, float | None]] = []
    for k in range(len(ports)):
        mine = t_ms[big & (flow == k)]
        out.append((float(mine.min()) / 1000.0, (float(mine.max()) + 1.0) / 1000.0) if mine.size else (None, None))
    return out


SMALL_LOG_BYTES = 4 << 20
"""Logs up to this size get `flow_bounds_s` from a plain line scan: importing numpy and polars would
cost the runner more (0.4-0.7 s here under load) than scanning a short run's log (about 10 ms per MB)."""


def _flow_bounds_small(log_path: Path, flow_log_path: Path,
                       ports: Sequence[int]) -> list[tuple[float | None, float | None]] | None:
    """`flow_bounds_s` of a small, well-formed log by a line scan in Python; None when the log is big
    or anything is unusual (the columnar reader then decides, and words any error)."""
    try:
        if log_path.stat().st_size > SMALL_LOG_BYTES:
            return None
        lines = log_path.read_bytes().split(b"\n")
        port_lines = flow_log_path.read_bytes().split(b"\n")
    except OSError:
        return None
    if port_lines and port_lines[-1] == b"":
        port_lines.pop()
    flow_of = {int(p): k for k, p in enumerate(ports)}
    first: list[int | None] = [None] * len(ports)
    last: list[int | None] = [None] * len(ports)
    base, t_min, j = None, None, 0
    for line in lines:
        if not line:
            continue
        if line[:1] == b"#":
            if b"base timestamp" in line and not line.startswith(b"# base timestamp:"):
                return None  # spelled unusually: the columnar reader's rule decides
            if line.startswith(b"# base timestamp:"):
                value = line[len(b"# base timestamp:"):].strip()
                if base is not None or not value.isdigit():
                    return None
                base = int(value)
            continue
        f = line.split(b" ")
        if not (f[0].isdigit() and len(f) in (3, 4) and f[2].isdigit()):
            return None
        kind, t = f[1], int(f[0])
        if len(f) != (4 if kind in (b"-", b"d") else 3) or kind not in (b"+", b"-", b"#", b"d"):
            return None
        if len(f) == 4 and not f[3].replace(b".", b"", 1).isdigit():
            return None
        t_min = t if t_min is None else min(t_min, t)
        if kind == b"#":
            continue
        if j >= len(port_lines) or not port_lines[j].isdigit() or int(port_lines[j]) > 65535:
            return None
        k = flow_of.get(int(port_lines[j]))
        j += 1
        if k is not None and kind == b"+" and int(f[2]) >= FLOW_START_MIN_BYTES:
            first[k] = t if first[k] is None else min(first[k], t)
            last[k] = t if last[k] is None else max(last[k], t)
    if j != len(port_lines) or t_min is None:
        return None
    shift = base if base is not None and t_min >= base else 0  # as `transient.read_link_log`
    return [((first[k] - shift) / 1000.0, (last[k] - shift + 1.0) / 1000.0) if first[k] is not None
            else (None, None) for k in range(len(ports))]
