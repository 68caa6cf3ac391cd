"""``ccplab coexist``: every ordered pair of CCAs sharing one bottleneck, and each CCA alone.

For CCAs A, B, ... the plan is, on one constant-capacity link:

* every ordered pair (X, Y), each CCA against itself too: a flow of X from 0
  and a flow of Y from ``second_start_s`` (default 10 s, as Pantheon's
  multi-flow runs start flows 10 s apart) to the end;
* each CCA alone (one flow for the whole run), the baseline of harm.

Each entry runs ``runs`` times (``ccplab.compare``); then the analysis
(``transient``) scores every flow and the report writes the matrix
(`transient.flows.coexistence_pairs`): for the row CCA X (the first flow)
against the column CCA Y (the newcomer), X's share of the link while both
run, Jain's fairness index there, and the harm X does to Y (Ware et al.,
HotNets 2019: throughput harm (alone - with) / alone, delay harm (with -
alone) / with, Y's figures with X against Y's alone runs; Y's whole life is
shared, so both cover the same stretch).

Layout: ``runs/<X>__<Y>@<start>/run-<k>/`` and ``runs/<X>/run-<k>/`` (see
``ccplab.compare``), the analysis tables, ``coexist.csv`` (one row per
ordered pair: medians and bootstrap CIs), ``plots/coexist-*.{png,pdf}``
(heatmaps) and the report page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .cca import Cca
from .control import ValidityPolicy
from .errors import CcplabError
from .flows import FlowSpec, check_flows

DEFAULT_SECOND_START_S = 10
DEFAULT_CAPACITY_MBPS = 24.0
DEFAULT_ONE_WAY_DELAY_MS = 25
DEFAULT_DURATION_S = 30
PACKET_BYTES = 1500


@dataclass(frozen=True)
class CoexistPlan:
    """The entries of a coexistence matrix: each CCA alone, then every ordered pair."""

    ccas: tuple[Cca, ...]
    second_start_s: int

    def alone(self) -> list[tuple[FlowSpec, ...]]:
        return [(FlowSpec(c),) for c in self.ccas]

    def pairs(self) -> list[tuple[FlowSpec, ...]]:
        return [(FlowSpec(x), FlowSpec(y, start_s=self.second_start_s)) for x in self.ccas for y in self.ccas]

    def entries(self) -> list[tuple[FlowSpec, ...]]:
        return self.alone() + self.pairs()


def make_plan(ccas: Sequence[Cca], second_start_s: int, duration_s: int) -> CoexistPlan:
    """Check the CCAs and timing; CcplabError names what is wrong."""
    if len(ccas) < 1:
        raise CcplabError("coexist needs at least one --cca (each CCA also meets itself)")
    labels = [str(c) for c in ccas]
    dup = sorted({label for label in labels if labels.count(label) > 1})
    if dup:
        raise CcplabError(f"--cca {dup[0]} given twice")
    if second_start_s < 1:
        raise CcplabError(f"--second-start-s must be >= 1, got {second_start_s}")
    if second_start_s >= duration_s:
        raise CcplabError(f"--second-start-s {second_start_s} must be before the end of the {duration_s} s run "
                          "(--duration-s)")
    plan = CoexistPlan(tuple(ccas), second_start_s)
    for flows in plan.pairs():  # e.g. an external algorithm (its own Portus daemon) against a ccp one
        check_flows(flows, duration_s)
    return plan


def queue_packets_for(queue_bdp: float, capacity_mbps: float, one_way_delay_ms: int) -> int:
    """Droptail limit in packets for ``queue_bdp`` bandwidth-delay products (BDP = capacity x 2 x one-way
    delay, in 1500-byte packets), at least 1. CcplabError on a non-positive or non-finite value."""
    if not (isinstance(queue_bdp, (int, float)) and math.isfinite(queue_bdp) and queue_bdp > 0):
        raise CcplabError(f"--queue-bdp must be a number > 0, got {queue_bdp!r}")
    bdp_packets = capacity_mbps * 1e6 * (2 * one_way_delay_ms / 1000.0) / (8 * PACKET_BYTES)
    return max(1, round(queue_bdp * bdp_packets))


def run_coexist(plan: CoexistPlan, runs: int, out: Path, capacity_mbps: float, one_way_delay_ms: int,
                queue_packets: int, duration_s: int, policy: ValidityPolicy = ValidityPolicy(),
                report_wake_ms: int | None = None, report_prompt_us: int | None = None) -> Path:
    """Run the plan (``runs`` times each entry) on a constant ``capacity_mbps`` link into ``out`` (new or
    empty), then analyse it and write the matrix and the report; returns the report's path.

    ``policy``: what makes a ccp run valid (``ccplab.control``); ``report_wake_ms``,
    ``report_prompt_us``: the datapath's settings, None for its defaults (``ccplab.scenario.Scenario``).

    Everything is checked before ``out`` is created (CcplabError names the input); progress goes to
    stderr one line a run.
    """
    from .compare import compare, setup_comparison
    from .scenario import Step

    out, scenario = setup_comparison(plan.entries(), runs, out, one_way_delay_ms, queue_packets, duration_s,
                                     steps=(Step(0.0, 0.0, capacity_mbps),), sigma_mbps=0.0, seed=0,
                                     report_wake_ms=report_wake_ms, report_prompt_us=report_prompt_us)
    compare(plan.entries(), scenario, runs, out, analyze=False, policy=policy)
    return analyze_coexist(out)


def analyze_coexist(out: Path) -> Path:
    """Analyse a coexist directory and write its report (``ccplab.analysis``): with two-flow runs the
    report also writes coexist_runs.csv, coexist.csv and the heatmaps (`transient.flows.coexistence_pairs`).
    Returns the report's path; CcplabError when the analysis fails."""
    from .analysis import analyze_and_report

    return analyze_and_report(out)
