"""Several CCAs (or sets of competing flows) x several runs of one scenario, then the analysis and report.

Each entry of a comparison is a CCA (one flow for the whole run) or a set of
flows sharing the bottleneck (``ccplab.flows``, ``--flow``).

Layout of a comparison directory:
    scenario.json                   the shared scenario
    trace/<name>.trace(.meta.json)  the generated trace (all steps in one), when it was generated
    runs/<entry>/run-<k>/           one run directory each (see ccplab.run); <entry> is the CCA's
                                    slug (e.g. ccp-cubic) or the flows' (``ccplab.flows.flows_slug``)
    runs.csv, steps.csv, report.html, plots/   written by the analysis
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from ccplab_util.atomic import write_atomic

from . import scenario as sc
from .cca import Cca
from .control import ValidityPolicy
from .errors import CcplabError
from .flows import FlowSpec, check_flows, flows_label, flows_slug, single_flow
from .run import preflight_flows, run_flows
from .scenario import Scenario, Step

Entry = Cca | Sequence[FlowSpec]
"""One entry of a comparison: a CCA, or the flows of one multi-flow scenario."""


def entry_flows(entry: Entry) -> tuple[FlowSpec, ...]:
    """The flows of a comparison entry (a CCA is one flow of it for the whole run)."""
    return single_flow(entry) if isinstance(entry, Cca) else tuple(entry)


def check_out_dir(out: Path) -> Path:
    """The resolved comparison directory; CcplabError if it exists and is not empty. Creates nothing."""
    out = out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CcplabError(f"output directory {out} is not empty: choose another --out (nothing was overwritten)")
    return out


def prepare_out_dir(out: Path) -> Path:
    """Create the comparison directory; refuse a non-empty one so nothing is overwritten."""
    out = check_out_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def check_runs(runs: int) -> None:
    if runs < 1:
        raise CcplabError(f"--runs must be >= 1, got {runs}")


def setup_comparison(ccas: Sequence[Entry], runs: int, out: Path, one_way_delay_ms: int, queue_packets: int,
                     duration_s: int, trace: Path | None = None, steps: Sequence[Step] = (),
                     sigma_mbps: float = 0.0, seed: int = 0, quickack: bool = False,
                     report_wake_ms: int | None = None, report_prompt_us: int | None = None) -> tuple[Path, Scenario]:
    """Check every input, then create ``out`` with its scenario; returns (out, scenario).

    The scenario runs on ``trace`` (a user's file) or, without one, on a trace
    generated from ``steps`` (Mbit/s, seconds) with noise ``sigma_mbps`` and
    ``seed``, saved under ``out/trace/``. All input is checked (runs, link
    setup, steps, CCAs and the machine, the trace) BEFORE ``out`` is created,
    so refused input leaves nothing behind. ``quickack``: the receiver ACKs every
    segment; ``report_wake_ms``, ``report_prompt_us``: the datapath's report window
    and prompt interval, None for its defaults (`Scenario`). Raises CcplabError.
    """
    check_runs(runs)
    if not ccas:
        raise CcplabError("no CCA given: use --cca kernel:NAME or --cca ccp:NAME")
    datapath = {"report_wake_ms": report_wake_ms, "report_prompt_us": report_prompt_us}
    Scenario("check", Path("."), one_way_delay_ms, queue_packets, duration_s, tuple(steps), **datapath).validate()
    labels = [flows_label(entry_flows(e)) for e in ccas]
    dup = sorted({label for label in labels if labels.count(label) > 1})
    if dup:
        raise CcplabError(f"{dup[0]} is given twice (each entry of a comparison needs its own label)")
    for entry in ccas:
        check_flows(entry_flows(entry), duration_s)
    for entry in ccas:  # the input first, then the machine
        preflight_flows(entry_flows(entry))
    out = check_out_dir(out)
    if trace is not None:
        sc.check_trace(trace)
        out = prepare_out_dir(out)
        return out, sc.scenario_for_trace(trace.stem, trace, one_way_delay_ms, queue_packets, duration_s,
                                          quickack=quickack, **datapath)
    name = sc.step_trace_name(steps)
    with tempfile.TemporaryDirectory(prefix="ccplab-trace-") as tmp:
        made = sc.generate_step_trace(Path(tmp) / f"{name}.trace", steps, duration_s, sigma_mbps, seed)
        out = prepare_out_dir(out)
        (out / "trace").mkdir()
        for part in (made, sc.sidecar_path(made)):
            shutil.move(part, out / "trace" / part.name)
    path = out / "trace" / made.name
    return out, sc.scenario_for_trace(name, path, one_way_delay_ms, queue_packets, duration_s, quickack=quickack,
                                      **datapath)


def compare(ccas: Sequence[Entry], scenario: Scenario, runs: int, out: Path, analyze: bool = True,
            policy: ValidityPolicy = ValidityPolicy()) -> Path:
    """Run every entry (a CCA or a set of flows) ``runs`` times on ``scenario`` into ``out``; returns the
    report path (or ``out``). ``policy``: what makes a ccp run valid (``ccplab.control``).

    Progress goes to stderr, one line a run. The first failing run stops the
    comparison with a CcplabError; finished runs stay in place.
    """
    check_runs(runs)
    entries = [entry_flows(e) for e in ccas]
    for flows in entries:
        check_flows(flows, scenario.duration_s)
        preflight_flows(flows)
    plan = {"scenario": scenario.to_json(), "ccas": [flows_label(f) for f in entries],
            "flows": [[str(f) for f in flows] for flows in entries], "runs": runs}
    write_atomic(out / "scenario.json", json.dumps(plan, indent=2) + "\n")
    total = len(entries) * runs
    done = 0
    for flows in entries:
        label = flows_label(flows)
        for k in range(1, runs + 1):
            done += 1
            started = time.monotonic()
            _progress(f"[{done}/{total}] {label} run {k}/{runs} ({scenario.duration_s} s) ...")
            result = run_flows(flows, scenario, out / "runs" / flows_slug(flows) / f"run-{k}", run_index=k,
                               policy=policy)
            _progress(f"[{done}/{total}] {label} run {k}/{runs}: {result.describe(flows)}, "
                      f"{time.monotonic() - started:.1f} s")
    if not analyze:
        return out
    from .analysis import analyze_and_report

    _progress("analysing ...")
    return analyze_and_report(out)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
