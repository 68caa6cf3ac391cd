"""Per-packet flow attribution of an mm-link log (``uplink.flows``, written by ccplab-link).

Format (the runner's contract, schema 3 of metadata.json): a text file with
one line per *non-opportunity* event of the mm-link log beside it, in the
same order -- every ``+`` arrival, ``-`` departure and ``d`` drop line
(ccplab-link writes one ``d`` line per dropped packet), header lines and
``#`` delivery opportunities excluded -- each line the decimal TCP (or UDP)
destination port of that packet, 0 when the packet was neither.  Line i of
the file therefore belongs to row i of
``events[events.kind != "opportunity"]`` of `transient.read_link_log`.

The port says the flow: each flow of a multi-flow run has its own iperf3
server port (metadata ``flows[k].port``).  iperf3's control connection uses
the same server port as its data connection, so a flow's control packets
count as that flow's (they are small and few).  A port no flow has (e.g. 0)
maps to flow -1: counted in the link's totals, in no flow.

Speed: polars' CSV reader parses the file (multi-threaded; one integer
column), no Python loop over lines; only a malformed file is searched (one
regular expression over the bytes) to name its first bad line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import numpy as np

from .errors import AnalysisError

if TYPE_CHECKING:
    import pandas as pd

NO_FLOW = -1
"""Flow index of a packet no flow claims (unknown port) and of every delivery opportunity."""

MAX_PORT = 65535

_BAD_LINE = re.compile(rb"(?m)^(?![0-9]{1,5}\r?$).*$")


def read_flow_ports(path: str | Path) -> np.ndarray:
    """The destination port of every line of a flow attribution file, as int32.

    Args:
        path: the ``uplink.flows`` file.

    Returns:
        int32 array, one element per line (an empty file: empty array).

    Raises:
        AnalysisError: the file is missing or unreadable, or a line is not a
            port number 0-65535 (the message names the file and the line).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AnalysisError(f"{path}: cannot read the flow attribution file: {exc.strerror or exc}") from None
    if not raw.strip():
        return np.zeros(0, np.int32)
    ports = _parse(raw)
    if ports is None or (ports.size and (ports.min() < 0 or ports.max() > MAX_PORT)):
        raise AnalysisError(f"{path}: {_first_bad_line(raw)}")
    return ports


def _parse(raw: bytes) -> np.ndarray | None:
    """The ports through polars (None when a line is not a plain integer)."""
    import polars as pl

    try:
        frame = pl.read_csv(raw, has_header=False, new_columns=["port"], schema_overrides={"port": pl.Int64},
                            separator=",", comment_prefix=None)
    except Exception:  # noqa: BLE001 - polars raises several kinds of error for one bad line; we word our own
        return None
    if frame.width != 1 or frame["port"].null_count():
        return None
    ports = frame["port"].to_numpy()
    if ports.size != raw.count(b"\n") + (0 if raw.endswith(b"\n") else 1):
        return None  # blank lines were skipped: the file is not one port per event
    return ports.astype(np.int32)


def _first_bad_line(raw: bytes) -> str:
    """Say which line of a file `_parse` rejected is wrong, and how."""
    if not raw.endswith(b"\n"):
        raw += b"\n"
    m = _BAD_LINE.search(raw)
    if m is not None and m.start() < len(raw):
        line = raw.count(b"\n", 0, m.start()) + 1
        return f"line {line}: {m.group().decode('utf-8', 'replace').strip()!r} is not a port number"
    values = np.array(raw.split(), dtype=np.int64)  # every line is 1-5 digits here
    big = np.flatnonzero(values > MAX_PORT)
    if big.size:
        return f"line {int(big[0]) + 1}: port {int(values[big[0]])} is above {MAX_PORT}"
    return "malformed flow attribution file"


def attribute_flows(events: pd.DataFrame, ports: np.ndarray, port_to_flow: Mapping[int, int],
                    log_name: str, flow_log_name: str) -> np.ndarray:
    """The flow index of every event of a log (int16; -1: no flow, and every opportunity).

    Args:
        events: `transient.LinkLog.events` of the mm-link log.
        ports: `read_flow_ports` of its flow attribution file.
        port_to_flow: destination port -> flow index (metadata ``flows``).
        log_name, flow_log_name: the two files, for the error.

    Raises:
        AnalysisError: the file's line count is not the log's number of
            arrival, departure and drop events (both files and counts named).
    """
    return attribute_flow_codes(events["kind"].cat.codes.to_numpy(), ports, port_to_flow, log_name, flow_log_name)


def attribute_flow_codes(code: np.ndarray, ports: np.ndarray, port_to_flow: Mapping[int, int],
                         log_name: str, flow_log_name: str) -> np.ndarray:
    """`attribute_flows` from the events' kind codes (0..3 of `transient.EVENT_KINDS`, 2 = opportunity)."""
    is_packet = code != 2
    n_packet = int(is_packet.sum())
    if n_packet != ports.size:
        raise AnalysisError(
            f"{flow_log_name} has {ports.size} lines but {log_name} has {n_packet} arrival/departure/drop "
            "events: the flow attribution does not belong to this log")
    lut = np.full(MAX_PORT + 1, NO_FLOW, np.int16)
    for port, flow in port_to_flow.items():
        lut[int(port)] = int(flow)
    flow = np.full(code.size, NO_FLOW, np.int16)
    flow[is_packet] = lut[ports]
    return flow
