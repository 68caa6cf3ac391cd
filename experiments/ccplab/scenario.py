"""An experiment scenario: a trace (generated step change or a user's file) and a link setup.

A generated step-change trace gets a sidecar ``<trace>.meta.json`` that
records its steps, noise and seed, so ``ccplab run --trace FILE`` and the
analysis know where the capacity changes. A user's own trace (for example
../shared/traces/cellular/*) has no steps: only whole-run metrics apply.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .binaries import project_binary
from .errors import CcplabError


@dataclass(frozen=True)
class Step:
    """A capacity change at ``at_s`` seconds of trace time, from ``from_mbps`` to ``to_mbps`` (Mbit/s)."""

    at_s: float
    from_mbps: float
    to_mbps: float

    @classmethod
    def parse(cls, text: str) -> "Step":
        """Parse ``AT_S:FROM_MBPS:TO_MBPS``, e.g. ``0:0:12``."""
        parts = text.split(":")
        try:
            at_s, from_mbps, to_mbps = (float(p) for p in parts)
        except ValueError:
            raise CcplabError(
                f"bad step {text!r}: expected AT_S:FROM_MBPS:TO_MBPS, e.g. 0:0:12"
            ) from None
        if at_s < 0 or from_mbps < 0 or to_mbps < 0:
            raise CcplabError(f"bad step {text!r}: time and rates must be >= 0")
        return cls(at_s, from_mbps, to_mbps)


@dataclass(frozen=True)
class Scenario:
    """What every run of a comparison shares: trace, delays, queue, duration.

    ``one_way_delay_ms``: fixed delay each way (RTT = 2x). ``queue_packets``:
    droptail limit of the bottleneck queue, packets. ``duration_s``: flow length.
    """

    name: str
    trace: Path
    one_way_delay_ms: int
    queue_packets: int
    duration_s: int
    steps: tuple[Step, ...] = ()
    sigma_mbps: float | None = None
    seed: int | None = None
    trace_kind: str = "file"

    def to_json(self) -> dict:
        data = asdict(self)
        data["trace"] = str(self.trace)
        data["steps"] = [asdict(s) for s in self.steps]
        return data

    def validate(self) -> None:
        """Reject values that cannot make a run (CcplabError names the parameter)."""
        if self.one_way_delay_ms < 0:
            raise CcplabError(f"--one-way-delay-ms must be >= 0, got {self.one_way_delay_ms}")
        if self.queue_packets < 1:
            raise CcplabError(f"--queue-packets must be >= 1, got {self.queue_packets}")
        if self.duration_s < 1:
            raise CcplabError(f"--duration-s must be >= 1, got {self.duration_s}")


def check_trace(path: Path) -> dict:
    """Validate a mahimahi trace with ``ccplab-trace check --json``.

    Returns {"path", "opportunities", "period_ms", "mean_mbps"}; raises
    CcplabError carrying the checker's message (file and line) on a bad trace.
    """
    if not path.is_file():
        raise CcplabError(f"trace {path} does not exist or is not a file")
    done = subprocess.run(
        [str(project_binary("ccplab-trace")), "check", "--json", str(path)],
        capture_output=True, text=True, timeout=120,
    )
    if done.returncode != 0:
        raise CcplabError(f"bad trace: {done.stderr.strip() or done.stdout.strip()}")
    return json.loads(done.stdout)


def sidecar_path(trace: Path) -> Path:
    return trace.with_name(trace.name + ".meta.json")


def generate_step_trace(out: Path, step: Step, duration_s: int, sigma_mbps: float, seed: int) -> Path:
    """Write a seeded step-change trace (TPCCA poster model) and its sidecar; returns ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(project_binary("ccplab-trace")), "step",
         "--before-mbps", str(step.from_mbps), "--after-mbps", str(step.to_mbps),
         "--at-s", str(step.at_s), "--duration-s", str(duration_s),
         "--sigma-mbps", str(sigma_mbps), "--seed", str(seed), "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    if done.returncode != 0:
        raise CcplabError(f"trace generation failed: {done.stderr.strip()}")
    meta = {"trace_kind": "step", "steps": [asdict(step)], "sigma_mbps": sigma_mbps, "seed": seed,
            "duration_s": duration_s}
    write_json_atomic(sidecar_path(out), meta)
    return out


def trace_annotations(trace: Path) -> dict:
    """Steps/noise/seed of a trace from its sidecar, or {} for a plain user trace."""
    side = sidecar_path(trace)
    if not side.exists():
        return {}
    try:
        meta = json.loads(side.read_text())
        meta["steps"] = [Step(**s) for s in meta.get("steps", [])]
    except (ValueError, TypeError) as exc:
        raise CcplabError(f"bad trace sidecar {side}: {exc}") from exc
    return meta


def scenario_for_trace(name: str, trace: Path, one_way_delay_ms: int, queue_packets: int,
                       duration_s: int, steps: tuple[Step, ...] = ()) -> Scenario:
    """A scenario on an existing trace; steps given explicitly win over the sidecar's."""
    notes = trace_annotations(trace)
    return Scenario(
        name=name, trace=trace.resolve(), one_way_delay_ms=one_way_delay_ms,
        queue_packets=queue_packets, duration_s=duration_s,
        steps=tuple(steps) or tuple(notes.get("steps", ())),
        sigma_mbps=notes.get("sigma_mbps"), seed=notes.get("seed"),
        trace_kind=notes.get("trace_kind", "file"),
    )


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)



# The built-in default scenario of `ccplab demo` (issue 2): step 0 -> 12 Mbit/s at
# t = 0 with sigma 2 Mbit/s noise, one-way delay 25 ms, droptail 40 packets,
# 3 runs of 20 s for each CCA below.
DEMO_STEP = Step(at_s=0.0, from_mbps=0.0, to_mbps=12.0)
DEMO_SIGMA_MBPS = 2.0
DEMO_SEED = 1
DEMO_ONE_WAY_DELAY_MS = 25
DEMO_QUEUE_PACKETS = 40
DEMO_DURATION_S = 20
DEMO_RUNS = 3
DEMO_CCAS = ("kernel:cubic", "kernel:bbr", "ccp:reno", "ccp:cubic")
