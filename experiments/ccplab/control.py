"""Who controlled a run's ccp flows: the datapath's evidence, and whether the run is a valid ccp result.

ccp-datapath never freezes a flow: while the algorithm is away, silent or
stuck, the kernel's cubic runs it (its "fallback"). A run whose ccp flows
were driven by that fallback measured kernel cubic, not the algorithm named
on its label, so the runner checks, after every ccp run, the datapath's exit
summary (the ``key=value`` counters of its last summary line in
datapath.log): ACKs under the algorithm's commands (``command_acks``), ACKs
under the fallback (``fallback_acks``), of those the ACKs that came while
the datapath awaited the algorithm's answer to a retransmission timeout
(``rto_await_acks``) and flows the control guard took (``guard_fallbacks``).

The fallback share leaves the RTO's await out: ``(fallback_acks -
rto_await_acks) / (command_acks + fallback_acks)``. After an RTO the
algorithm's last command is stale and the kernel's loss window stands, grown
by the kernel's cubic, until the algorithm answers: the kernel's own RTO
response, which any datapath (ccp-kernel too) runs until the algorithm has
heard of the timeout and answered, not a want of the algorithm. The datapath
bounds the await: it ends with the algorithm's first valid command after the
RTO and at the latest after the control guard's bound, so an algorithm that
never answers an RTO still has its flow counted as the fallback's.

A run whose fallback share exceeds the allowed one
(`DEFAULT_MAX_FALLBACK_SHARE`, ``--max-fallback-share``), or whose datapath
left no summary, is not a valid result: the run fails naming what happened,
unless the user keeps it (``--keep-invalid``), marked ``"valid": false`` in
metadata.json; the analysis then lists it apart instead of scoring it.

Per flow (`flow_evidence`): the datapath logs each flow's creation (its
destination port and the algorithm its rules picked) and its release (the
packets it delivered, ``delivered_pkts``, of them those ACKed while the
fallback ran, ``fallback_pkts``, and of those the ones ACKed while the
datapath awaited the algorithm's answer to an RTO, ``rto_await_pkts``). A ccp
flow whose fallback share, ``(fallback_pkts - rto_await_pkts) /
delivered_pkts``, exceeds the allowed one makes the run invalid the same way,
naming the flow, so a run of several flows cannot pass on the strength of its
other flows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import CcplabError

DEFAULT_MAX_FALLBACK_SHARE = 0.01
"""Largest share of a run's ccp ACKs the kernel's cubic fallback may have driven (1 %)."""

_SUMMARY_MARK = "command_acks="
_PAIR = re.compile(r"\b([a-z_]+)=(\d+)\b")
_CREATED = re.compile(r"flow created flow=(\d+) .*?dst=[0-9.]+:(\d+) .*?algorithm=(\S+)")
# a datapath older than the RTO's await logs no rto_await_pkts: none is left out then
_RELEASED = re.compile(r"flow released flow=(\d+) delivered_pkts=(\d+) fallback_pkts=(\d+)(?: rto_await_pkts=(\d+))?")


class InvalidRunError(CcplabError):
    """A run whose ccp flows the fallback drove beyond the policy (or without the datapath's evidence):
    the message is the evidence. A run of it is a measurement, not an accident, so it is not retried."""


@dataclass(frozen=True)
class ValidityPolicy:
    """How strict the runner is about ccp runs: the largest fallback share allowed (0..1), and
    whether a run beyond it is kept (marked invalid) instead of failing."""

    max_fallback_share: float = DEFAULT_MAX_FALLBACK_SHARE
    keep_invalid: bool = False


def datapath_counters(log: Path) -> dict[str, int] | None:
    """The whole-number ``key=value`` counters of the last exit summary in a datapath log, or None when
    the log holds none (the datapath was killed, or its summary changed: either way no evidence)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    summaries = [line for line in lines if _SUMMARY_MARK in line]
    if not summaries:
        return None
    return {k: int(v) for k, v in _PAIR.findall(summaries[-1])}


def control_evidence(log: Path, policy: ValidityPolicy) -> dict:
    """metadata.json's ``control`` entry of a ccp run: the counters (``command_acks``, ``fallback_acks``,
    ``rto_await_acks``, ``guard_fallbacks``), the fallback share (0..1: the fallback's ACKs beyond the RTOs'
    await, of all the ccp flows' ACKs), ``valid`` and, when not valid, ``reason`` (one sentence naming the
    evidence). A summary without ``rto_await_acks`` (an older datapath) leaves nothing out."""
    counters = datapath_counters(log)
    if counters is None or "fallback_acks" not in counters:
        return {"valid": False, "reason": f"{log.name} has no exit summary of the datapath (command_acks=, "
                "fallback_acks=): nothing shows who controlled the ccp flows", "max_fallback_share":
                policy.max_fallback_share}
    commanded, fallback = counters["command_acks"], counters["fallback_acks"]
    awaiting = min(counters.get("rto_await_acks", 0), fallback)
    share = (fallback - awaiting) / (commanded + fallback) if commanded + fallback else 1.0
    entry = {"command_acks": commanded, "fallback_acks": fallback, "rto_await_acks": awaiting,
             "guard_fallbacks": counters.get("guard_fallbacks"), "fallback_share": round(share, 6),
             "max_fallback_share": policy.max_fallback_share, "valid": share <= policy.max_fallback_share}
    if not entry["valid"]:
        entry["reason"] = (f"the kernel's cubic fallback drove {share:.1%} of the ccp flows' ACKs beyond awaiting "
                           f"the algorithm's answers to RTOs (command_acks={commanded} fallback_acks={fallback} "
                           f"rto_await_acks={awaiting} in {log.name}), more than the "
                           f"{policy.max_fallback_share:.1%} allowed (--max-fallback-share)")
    return entry


def unreleased_flows(log: Path) -> set[int]:
    """The datapath's flow ids in ``log`` with a creation line and no release line yet (all of them
    while the log cannot be read): the flows whose control evidence is still to come."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return {-1}
    created = {int(f) for f, _, _ in _CREATED.findall(text)}
    return created - {int(m[0]) for m in _RELEASED.findall(text)}


def flow_evidence(log: Path, policy: ValidityPolicy) -> dict[int, dict]:
    """Each ccp flow's control evidence in a datapath log, by destination port: the algorithm the
    datapath's rules picked (``algorithm``), ``delivered_pkts``, ``fallback_pkts``, ``rto_await_pkts``
    (0 from a datapath that logs none), ``fallback_share`` (0..1: ``fallback_pkts - rto_await_pkts`` of
    ``delivered_pkts``) and ``valid`` (share within ``policy``).  A port with several flows (a run's iperf3 control
    connection beside its data connection) keeps the one that delivered the most; a flow without a
    release line (the datapath stopped first) has no entry."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return {}
    created = {int(f): (int(port), alg) for f, port, alg in _CREATED.findall(text)}
    out: dict[int, dict] = {}
    for f, delivered, fallback, awaiting in _RELEASED.findall(text):
        if int(f) not in created:
            continue
        port, alg = created[int(f)]
        delivered, fallback = int(delivered), int(fallback)
        awaiting = min(int(awaiting or 0), fallback)
        if port in out and out[port]["delivered_pkts"] >= delivered:
            continue
        share = (fallback - awaiting) / delivered if delivered else 0.0
        out[port] = {"algorithm": alg, "delivered_pkts": delivered, "fallback_pkts": fallback,
                     "rto_await_pkts": awaiting, "fallback_share": round(share, 6),
                     "valid": share <= policy.max_fallback_share}
    return out
