"""Several flows through one bottleneck: ``--flow CCA[@START_S[:STOP_S]][+DELAY_MS]``.

A run holds one or more flows, each with its own CCA (``kernel:NAME``,
``ccp:NAME[:flag=value...]`` or ``portus:NAME=COMMAND``, see ``ccplab.cca``), started START_S seconds
after the first flow (default 0) and stopped at STOP_S (default: the run's
end). ``+DELAY_MS`` adds DELAY_MS ms to that flow's RTT (extra one-way delay
on its ACK path, ``ccplab-link --ack-delay``), for RTT-fairness experiments.
Examples::

    --flow kernel:cubic --flow ccp:bbr@10 --flow ccp:cubic:beta=0.8@20:40
    --flow kernel:cubic --flow kernel:cubic+40        # same start, RTT + 40 ms

Each flow talks to its own iperf3 server, port ``BASE_PORT + index``, so the
link attributes every packet to its flow by that port and ccp-datapath picks
each ccp flow's algorithm by it (``--rule dport=PORT:NAME``). All ccp flows
share one datapath and one algorithm daemon hosting every algorithm named
(``ccp-algorithms NAME --also NAME2...``); the datapath tells hosted
algorithms apart by name only, so two ccp flows of one algorithm with
different parameters cannot share a run (refused before anything starts).
The datapath talks to one Portus socket, so an external algorithm
(``portus:NAME=COMMAND``, its own daemon) shares a run with kernel flows and
with flows of itself only. Its timing and delay suffixes follow the command
(``portus:r=/opt/gca/bin/reno --per_ack@10+20``).

``--cca X`` is one flow of X from 0 to the end, so single-flow runs are the
one-flow case of this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from .cca import EXTERNAL_KIND, Cca, parse_cca
from .errors import CcplabError

BASE_PORT = 5201
"""iperf3 server port of flow 0; flow k uses BASE_PORT + k."""

MAX_FLOWS = 32
"""Most flows one run may hold (one iperf3 server and client each)."""

MAX_EXTRA_DELAY_MS = 10_000
"""Largest ``+DELAY_MS`` (ccplab-link's --ack-delay limit)."""

_TIMING = re.compile(r"^(?P<start>\d+)(?::(?P<stop>\d+))?$")
_DELAY = re.compile(r"^\d+$")
_DELAY_SUFFIX = re.compile(r"^(?P<body>.*)\+(?P<delay>[^+@]*)$")
# an external algorithm's command may hold '@' and '+': only a suffix of digits after its last word is timing
_EXTERNAL_SUFFIX = re.compile(r"^(?P<cca>.*?)(?:@(?P<timing>\d+(?::\d+)?))?(?:\+(?P<delay>\d+))?$", re.S)


@dataclass(frozen=True)
class FlowSpec:
    """One flow of a run.

    ``start_s``: seconds after the first flow's start (whole seconds, >= 0);
    ``stop_s``: when it stops, or None for the run's end; ``extra_delay_ms``:
    added to its RTT (ms, on its ACK path).
    """

    cca: Cca
    start_s: int = 0
    stop_s: int | None = None
    extra_delay_ms: int = 0

    def __str__(self) -> str:
        text = str(self.cca)
        if self.start_s or self.stop_s is not None:
            text += f"@{self.start_s}" + (f":{self.stop_s}" if self.stop_s is not None else "")
        if self.extra_delay_ms:
            text += f"+{self.extra_delay_ms}"
        return text

    def length_s(self, duration_s: int) -> int:
        """How long the flow sends, s, in a run of ``duration_s``."""
        return (self.stop_s if self.stop_s is not None else duration_s) - self.start_s

    def as_json(self, index: int) -> dict:
        """The flow's entry of metadata.json ``flows`` (before its measured times are added)."""
        return {"index": index, "cca": self.cca.base, "cca_params": self.cca.param_dict,
                "label": str(self.cca), "spec": str(self), "port": port_of(index),
                "start_s": float(self.start_s), "stop_s": None if self.stop_s is None else float(self.stop_s),
                "extra_delay_ms": self.extra_delay_ms, "external": self.cca.external_json()}


def port_of(index: int) -> int:
    """The receiver (iperf3 server) port of flow ``index``."""
    return BASE_PORT + index


def split_external_flow(text: str) -> tuple[str, str]:
    """``portus:NAME=COMMAND[@START_S[:STOP_S]][+DELAY_MS]`` as (CCA text, suffix), by syntax only."""
    m = _EXTERNAL_SUFFIX.match(text)
    suffix = text[len(m["cca"]):]
    return m["cca"], suffix


def flow_label_text(text: str) -> str:
    """A ``--flow`` value as its label, without parsing it against the machine: an external
    algorithm's command left out (``portus:r=/x/reno@10`` -> ``portus:r@10``)."""
    if text.startswith(EXTERNAL_KIND + ":"):
        cca, suffix = split_external_flow(text)
        return cca.split("=", 1)[0] + suffix
    return text


def parse_flow(text: str) -> FlowSpec:
    """Parse ``CCA[@START_S[:STOP_S]][+DELAY_MS]``; CcplabError names the flow and what is wrong."""
    if text.startswith(EXTERNAL_KIND + ":"):
        cca_text, suffix = split_external_flow(text)
        timing_flow = parse_flow("kernel:reno" + suffix) if suffix else None  # the suffix's syntax, shared
        try:
            cca = parse_cca(cca_text)
        except CcplabError as exc:
            raise CcplabError(f"--flow {flow_label_text(text)!r}: {exc}") from None
        if timing_flow is None:
            return FlowSpec(cca)
        return FlowSpec(cca, timing_flow.start_s, timing_flow.stop_s, timing_flow.extra_delay_ms)
    m = _DELAY_SUFFIX.match(text)
    body, delay = (m["body"], m["delay"]) if m else (text, None)
    if delay is not None and not _DELAY.match(delay):
        raise CcplabError(f"--flow {text!r}: +DELAY_MS must be a whole number of ms, got {delay!r}")
    extra = int(delay) if delay else 0
    if extra > MAX_EXTRA_DELAY_MS:
        raise CcplabError(f"--flow {text!r}: +DELAY_MS is at most {MAX_EXTRA_DELAY_MS} ms, got {extra}")
    cca_text, at, timing = body.partition("@")
    start, stop = 0, None
    if at:
        m = _TIMING.match(timing)
        if not m:
            raise CcplabError(f"--flow {text!r}: expected @START_S or @START_S:STOP_S in whole seconds >= 0 "
                              f"after the CCA, got @{timing!r}")
        start = int(m["start"])
        stop = int(m["stop"]) if m["stop"] is not None else None
        if stop is not None and stop <= start:
            raise CcplabError(f"--flow {text!r}: STOP_S {stop} must be after START_S {start}")
    try:
        cca = parse_cca(cca_text)
    except CcplabError as exc:
        raise CcplabError(f"--flow {text!r}: {exc}") from None
    return FlowSpec(cca, start, stop, extra)


def parse_flows(texts: Iterable[str]) -> tuple[FlowSpec, ...]:
    """Parse every ``--flow`` value (see `parse_flow`) and check them together (`check_flows` without a duration)."""
    flows = tuple(parse_flow(t) for t in texts)
    check_flows(flows)
    return flows


def check_flows(flows: Sequence[FlowSpec], duration_s: int | None = None) -> None:
    """Refuse a set of flows that cannot make a run; CcplabError names the flow.

    Checks: at least one and at most `MAX_FLOWS` flows; one flow starting at 0
    (the run's time zero is the first flow's start); with ``duration_s``, every
    flow starts and stops within the run; two ccp flows of one algorithm with
    different parameters (the datapath's rules choose algorithms by name).
    """
    if not flows:
        raise CcplabError("no flow given: use --cca CCA or --flow CCA[@START_S[:STOP_S]]")
    if len(flows) > MAX_FLOWS:
        raise CcplabError(f"{len(flows)} flows given; a run holds at most {MAX_FLOWS}")
    if min(f.start_s for f in flows) != 0:
        raise CcplabError(f"no flow starts at 0: the run's time zero is its first flow's start "
                          f"(flows: {', '.join(map(str, flows))})")
    if duration_s is not None:
        for f in flows:
            if f.start_s >= duration_s:
                raise CcplabError(f"flow {f}: starts at {f.start_s} s, not before the end of the "
                                  f"{duration_s} s run (--duration-s)")
            if f.stop_s is not None and f.stop_s > duration_s:
                raise CcplabError(f"flow {f}: stops at {f.stop_s} s, after the end of the {duration_s} s run "
                                  "(--duration-s)")
    daemons = {}
    for f in flows:
        if f.cca.uses_datapath:
            daemons.setdefault(_daemon_of(f.cca), f)
    if len(daemons) > 1:
        a, b = list(daemons.values())[:2]
        raise CcplabError(
            f"flows {a} and {b}: each needs its own Portus daemon, and ccp-datapath talks to one: an external "
            "algorithm (portus:NAME=COMMAND) shares a run only with kernel flows and flows of itself")
    tunings: dict[str, FlowSpec] = {}
    for f in flows:
        if f.cca.kind != "ccp":
            continue
        seen = tunings.setdefault(f.cca.name, f)
        if seen.cca.params != f.cca.params:
            raise CcplabError(
                f"flows {seen} and {f}: the datapath cannot tell two tunings of ccp:{f.cca.name} apart (its "
                "rules choose a hosted algorithm by name); run them in separate runs")


def _daemon_of(cca: Cca) -> tuple:
    """Which Portus daemon serves ``cca``: the suite's one daemon for every ccp:NAME, an external
    algorithm's own command for portus:NAME."""
    return ("suite",) if cca.kind == "ccp" else (cca.name, cca.command, cca.env)


def single_flow(cca: Cca) -> tuple[FlowSpec, ...]:
    """``--cca X``: one flow of X for the whole run."""
    return (FlowSpec(cca),)


def flows_label(flows: Sequence[FlowSpec]) -> str:
    """The label of a set of flows in tables and reports: its CCA for one flow at 0, else
    the flows joined by `` vs `` (e.g. ``kernel:cubic vs ccp:bbr@10``)."""
    if len(flows) == 1 and flows[0].start_s == 0 and flows[0].stop_s is None and not flows[0].extra_delay_ms:
        return str(flows[0].cca)
    return " vs ".join(map(str, flows))


def flows_slug(flows: Sequence[FlowSpec]) -> str:
    """A file-name-safe form of `flows_label` (the CCA's slug for one plain flow)."""
    if len(flows) == 1 and flows_label(flows) == str(flows[0].cca):
        return flows[0].cca.slug
    return re.sub(r"[^A-Za-z0-9._+@-]", "_", "__".join(
        f.cca.slug + (f"@{f.start_s}" + (f"-{f.stop_s}" if f.stop_s is not None else "")
                      if f.start_s or f.stop_s is not None else "")
        + (f"+{f.extra_delay_ms}" if f.extra_delay_ms else "") for f in flows))
