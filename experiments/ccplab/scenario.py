"""An experiment scenario: a trace (generated step change or a user's file) and a link setup.

A generated step-change trace gets a sidecar ``<trace>.meta.json`` that
records its steps, noise and seed, so ``ccplab run --trace FILE`` and the
analysis know where the capacity changes. A user's own trace (for example
traces/cellular/*) has no steps: only whole-run metrics apply.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ccplab_util.atomic import write_atomic
from transient.errors import StepFormatError
from transient.steps import Step, parse_steps

from .binaries import project_binary
from .errors import CcplabError


def parse_step_args(texts: Iterable[str], option: str = "--step") -> tuple[Step, ...]:
    """Parse ``AT_S:FROM_MBPS:TO_MBPS`` options with the project's one parser (``transient.steps``).

    Returns the steps sorted by time; CcplabError (naming ``option``) on a
    malformed step or two steps at the same time.
    """
    try:
        return tuple(parse_steps(texts))
    except StepFormatError as exc:
        raise CcplabError(f"{option}: {exc}") from None


@dataclass(frozen=True)
class DatapathSetting:
    """A ccp-datapath option a scenario may set: its `Scenario` field (also the sweep-file key), the
    option (ccp-datapath's and ccplab's), its range (whole numbers, both ends included), the datapath's
    own default and what it does (ccp-datapath's doc, datapath/src/cli.rs); ``name_tag``: how a set
    value shows in a sweep scenario's automatic name (``..._wake5``)."""

    field: str
    name_tag: str
    flag: str
    unit: str
    lo: int
    hi: int
    default: int
    doc: str

    @property
    def help(self) -> str:
        """The CLI's help text: what it does, unit, range and default."""
        return (f"{self.doc}; {self.unit}, {self.lo}..{self.hi} (default: the datapath's own, {self.default}); "
                "passed to ccp-datapath and recorded in metadata.json; for ccp and portus flows")

    def check(self, value: int | None) -> None:
        """CcplabError naming the option when ``value`` is set and not a whole number in range."""
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or not self.lo <= value <= self.hi:
            raise CcplabError(f"{self.flag} must be a whole number in {self.lo}..{self.hi} ({self.unit}), "
                              f"got {value!r}")


DATAPATH_SETTINGS = (
    DatapathSetting(
        "report_wake_ms", "wake", "--report-wake-ms", "ms", 1, 10_000, 20,
        "the datapath's report window: after a look that found reports of the in-kernel fold programs it looks "
        "again this much later, and a report wakes it only when no such look is promised, so a report waits at "
        "most about this long; looks and forced wakeups (20-30 us of BPF time each) come at most 1000/N times "
        "a second each"),
    DatapathSetting(
        "report_prompt_us", "prompt", "--report-prompt-us", "us", 1, 10_000_000, 1000,
        "how long a report of a flow that reports more than 4 times per RTT (a per-ACK program, or a timer "
        "short against the RTT) may wait for the datapath's next look, in place of the report window; forced "
        "wakeups for such reports come at most once per this interval; per-RTT programs keep the window"),
)
"""The datapath options a run may set, declared once: `Scenario`'s fields, the CLI's flags
(``ccplab.cli``), the sweep files' keys (``ccplab.sweepfile``) and ccp-datapath's argv
(``ccplab.run.datapath_argv``) all derive from it. Both act with the datapath's default
``--fold kernel``."""


@dataclass(frozen=True)
class Scenario:
    """What every run of a comparison shares: trace, delays, queue, duration.

    ``one_way_delay_ms``: fixed delay each way (RTT = 2x). ``queue_packets``:
    droptail limit of the bottleneck queue, packets. ``duration_s``: flow length.
    ``quickack``: the receiver acknowledges every segment at once (a ``quickack 1``
    route in its namespace, as the cellular contest's receiver acknowledged every
    datagram) instead of Linux's delayed ACKs (about one ACK per two segments).
    ``trace_once``: the link plays the traces once and stops at their end
    (``ccplab-link --once``, as ``mm-link --once``) instead of looping them.
    ``report_wake_ms``, ``report_prompt_us``: ccp-datapath's report window (ms) and prompt interval
    (us) for the run's ccp flows (`DATAPATH_SETTINGS`); None = the datapath's own default.
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
    # ACK-direction (downlink) trace, e.g. a cellular .up file; None = unlimited (ccplab contest sets it).
    downlink_trace: Path | None = None
    quickack: bool = False
    trace_once: bool = False
    report_wake_ms: int | None = None
    report_prompt_us: int | None = None

    def to_json(self) -> dict:
        data = asdict(self)
        data["trace"] = str(self.trace)
        data["downlink_trace"] = None if self.downlink_trace is None else str(self.downlink_trace)
        data["steps"] = [s.as_dict() for s in self.steps]
        return data

    def validate(self) -> None:
        """Reject values that cannot make a run (CcplabError names the parameter)."""
        if self.one_way_delay_ms < 0:
            raise CcplabError(f"--one-way-delay-ms must be >= 0, got {self.one_way_delay_ms}")
        if self.queue_packets < 1:
            raise CcplabError(f"--queue-packets must be >= 1, got {self.queue_packets}")
        if self.duration_s < 1:
            raise CcplabError(f"--duration-s must be >= 1, got {self.duration_s}")
        for setting in DATAPATH_SETTINGS:
            setting.check(getattr(self, setting.field))
        check_steps_within(self.steps, self.duration_s)

    def datapath_args(self) -> list[str]:
        """ccp-datapath's options for the settings this scenario gives (none for the defaults)."""
        return [a for s in DATAPATH_SETTINGS if getattr(self, s.field) is not None
                for a in (s.flag, str(getattr(self, s.field)))]


def check_steps_within(steps: Sequence[Step], duration_s: float) -> None:
    """Every step happens before the run ends (CcplabError naming the step otherwise)."""
    for step in steps:
        if step.at_s >= duration_s:
            raise CcplabError(f"step {step} is at {step.at_s:g} s, not before the end of the "
                              f"{duration_s:g} s run (--duration-s)")


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


TRACE_TAIL_S = 5
"""Seconds a generated trace runs past the flow's duration (so it never loops during the flow)."""


def generate_step_trace(out: Path, steps: Sequence[Step], duration_s: int, sigma_mbps: float, seed: int) -> Path:
    """Write a seeded step-change trace (TPCCA poster model) with ``steps`` and its sidecar; returns ``out``.

    ``ccplab-trace step`` checks the steps (each FROM_MBPS must be the rate in
    effect before it); its message is raised as a CcplabError.
    """
    if not steps:
        raise CcplabError("a generated trace needs at least one step AT_S:FROM_MBPS:TO_MBPS")
    check_steps_within(steps, duration_s)
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = [str(project_binary("ccplab-trace")), "step"]
    for step in steps:
        argv += ["--step", str(step)]
    # The trace is longer than the flow: replay starts with the link's first packet
    # (iperf3's control connection, ~0.3 s before the data flow), and a mahimahi
    # trace loops; a trace of exactly the flow's length would jump back to its
    # first step during the flow's last moments.
    argv += ["--duration-s", str(duration_s + TRACE_TAIL_S), "--sigma-mbps", str(sigma_mbps),
             "--seed", str(seed), "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise CcplabError(f"trace generation failed: {done.stderr.strip()}")
    meta = {"trace_kind": "step", "steps": [s.as_dict() for s in steps], "sigma_mbps": sigma_mbps, "seed": seed,
            "duration_s": duration_s}
    write_atomic(sidecar_path(out), json.dumps(meta, indent=2) + "\n")
    return out


def step_trace_name(steps: Sequence[Step]) -> str:
    """A file-name-safe scenario name for generated steps, e.g. ``step-0-12-at-0s_12-4-at-10s``."""
    return "step-" + "_".join(f"{s.from_mbps:g}-{s.to_mbps:g}-at-{s.at_s:g}s" for s in steps)


def trace_annotations(trace: Path) -> dict:
    """Steps/noise/seed of a trace from its sidecar, or {} for a plain user trace."""
    side = sidecar_path(trace)
    if not side.exists():
        return {}
    try:
        meta = json.loads(side.read_text())
        meta["steps"] = [Step.from_dict(s, f"{side}: steps[{k}]") for k, s in enumerate(meta.get("steps", []))]
    except (ValueError, TypeError, AttributeError) as exc:
        raise CcplabError(f"bad trace sidecar {side}: {exc}") from exc
    return meta


def scenario_for_trace(name: str, trace: Path, one_way_delay_ms: int, queue_packets: int,
                       duration_s: int, steps: tuple[Step, ...] = (), quickack: bool = False,
                       report_wake_ms: int | None = None, report_prompt_us: int | None = None) -> Scenario:
    """A scenario on an existing trace; steps given explicitly win over the sidecar's; ``quickack``,
    ``report_wake_ms``, ``report_prompt_us``: see `Scenario`."""
    notes = trace_annotations(trace)
    return Scenario(
        name=name, trace=trace.resolve(), one_way_delay_ms=one_way_delay_ms,
        queue_packets=queue_packets, duration_s=duration_s,
        steps=tuple(steps) or tuple(notes.get("steps", ())),
        sigma_mbps=notes.get("sigma_mbps"), seed=notes.get("seed"),
        trace_kind=notes.get("trace_kind", "file"), quickack=quickack,
        report_wake_ms=report_wake_ms, report_prompt_us=report_prompt_us,
    )


# The built-in default scenario of `ccplab demo`: both kinds of step,
# the link opening 0 -> 12 Mbit/s at t = 0 and a step down 12 -> 4 Mbit/s at 6 s,
# sigma 2 Mbit/s noise, one-way delay 25 ms, droptail 40 packets, 3 runs of 12 s
# for each CCA below. Each step gets 6 s (120 RTTs): every CCA of the demo converges
# within about 1 s of either step, and the demo's twelve runs take under three minutes.
DEMO_STEPS = (Step(at_s=0.0, from_mbps=0.0, to_mbps=12.0), Step(at_s=6.0, from_mbps=12.0, to_mbps=4.0))
DEMO_SIGMA_MBPS = 2.0
DEMO_SEED = 1
DEMO_ONE_WAY_DELAY_MS = 25
DEMO_QUEUE_PACKETS = 40
DEMO_DURATION_S = 12
DEFAULT_DURATION_S = 20
"""The flow duration of ``run``, ``compare`` and sweeps when none is given, s (the demo's is shorter)."""
DEMO_RUNS = 3
DEMO_CCAS = ("kernel:cubic", "kernel:bbr", "ccp:reno", "ccp:cubic")
