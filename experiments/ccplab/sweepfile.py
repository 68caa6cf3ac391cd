"""Experiment files (TOML) for ``ccplab sweep``: CCAs x scenarios x repetitions, with cross products.

Format (every key but ``name`` optional; see experiments/sweeps/*.toml)::

    name = "tpcca"            # the sweep's name: [A-Za-z0-9._-]+
    seed = 2021               # seed of the run order (default 0)
    repetitions = 100         # runs of each CCA x scenario (default 1)
    ccas = ["ccp:reno", "ccp:cubic", "kernel:bbr"]   # a string or a list
    flows = [["kernel:cubic", "ccp:bbr@10"]]  # sets of competing flows (``ccplab.flows``
                              # syntax), each run like one CCA; with or instead of ccas
    # an external Portus algorithm: "portus:NAME=COMMAND" (``ccplab.cca``) in ccas or flows;
    # a relative program path in COMMAND is taken from this file's directory

    [scenario]                # or [[scenario]] several times; lists give cross products
    one_way_delay_ms = 25     # ms each way (RTT = 2x)
    queue_packets = [40, 100] # droptail limit, packets
    duration_s = 60           # flow length, s
    steps = ["0:0:12", "0:0:48"]   # each item: the steps of one generated trace,
                              # AT_S:FROM_MBPS:TO_MBPS separated by spaces
                              # ("0:0:12 10:12:4" is one trace with two steps)
    sigma_mbps = 2.0          # per-ms capacity noise of generated traces, Mbit/s
    trace_seed = 1            # seed of the generated traces' noise
    # trace = "traces/x.trace"   instead of steps: a mahimahi trace (path relative to
    #                            this file); a list gives one scenario per trace
    # name = "..."               scenario name (default: built from the values)
    # quickack = true            the receiver ACKs every segment (default false: Linux's
    #                            delayed ACKs); [false, true] runs both
    # report_wake_ms = [5, 20]   ccp-datapath's report window, ms (1..10000; default: the
    #                            datapath's own, 20, or ccplab sweep --report-wake-ms)
    # report_prompt_us = 1000    ccp-datapath's prompt interval of per-ACK reporters, us
    #                            (1..10000000; default: the datapath's own, 1000, or
    #                            ccplab sweep --report-prompt-us)

Every list-valued key of a scenario table is crossed with the others: the
example gives 2 x 2 = 4 scenarios. The plan is every (scenario, CCA,
repetition); its order is seeded and shuffled within each repetition (a
randomized complete block design: every combination runs once per round,
so drift over hours of runs spreads evenly over CCAs and scenarios instead
of landing on the one that ran last).
"""

from __future__ import annotations

import itertools
import random
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transient.steps import Step

from . import scenario as sc
from .cca import EXTERNAL_KIND, rebase_external
from .errors import CcplabError
from .flows import flow_label_text

NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
SCENARIO_KEYS = {"name", "one_way_delay_ms", "queue_packets", "duration_s", "steps", "sigma_mbps",
                 "trace_seed", "trace", "quickack", *(s.field for s in sc.DATAPATH_SETTINGS)}
TOP_KEYS = {"name", "seed", "repetitions", "ccas", "flows", "scenario"}
DEFAULTS = {"one_way_delay_ms": sc.DEMO_ONE_WAY_DELAY_MS, "queue_packets": sc.DEMO_QUEUE_PACKETS,
            "duration_s": sc.DEFAULT_DURATION_S, "sigma_mbps": sc.DEMO_SIGMA_MBPS, "trace_seed": sc.DEMO_SEED,
            "quickack": False}
RUN_OVERHEAD_S = 2.5
"""Seconds a run takes beyond its flow (link and daemons up, iperf3 handshake, teardown, analysis,
scheduling). Measured on a 2-core VM: 0.9 s for a kernel CCA, 2.1 s for a ccp one (datapath and
algorithm start), plus 0.5 s of Dask scheduling per run; see docs/experiments.md, "Sweeps". Used only
for --dry-run's estimate."""


@dataclass(frozen=True)
class ScenarioSpec:
    """One scenario of a sweep: a generated step trace (``steps``) or a user's ``trace``, and the link setup."""

    name: str
    one_way_delay_ms: int
    queue_packets: int
    duration_s: int
    steps: tuple[Step, ...] = ()
    sigma_mbps: float = 0.0
    trace_seed: int = 0
    trace: Path | None = None
    quickack: bool = False
    report_wake_ms: int | None = None  # the datapath's settings (sc.DATAPATH_SETTINGS); None: its defaults
    report_prompt_us: int | None = None

    def datapath(self) -> dict[str, int | None]:
        """The datapath's settings by `sc.Scenario` field (None: the datapath's default)."""
        return {s.field: getattr(self, s.field) for s in sc.DATAPATH_SETTINGS}

    def describe(self) -> str:
        source = f"trace {self.trace}" if self.trace else (
            "steps " + " ".join(str(s) for s in self.steps) + f", sigma {self.sigma_mbps:g} Mbit/s")
        settings = "".join(f", datapath {s.flag} {getattr(self, s.field)}" for s in sc.DATAPATH_SETTINGS
                           if getattr(self, s.field) is not None)
        return (f"{source}, one-way delay {self.one_way_delay_ms} ms, queue {self.queue_packets} packets, "
                f"{self.duration_s} s" + (", receiver ACKs every segment" if self.quickack else "") + settings)


@dataclass(frozen=True)
class RunSpec:
    """One run of the plan: ``run_id`` = ``<scenario>/<cca slug>/run-<repetition>`` (also its directory).

    ``cca`` is a CCA's label, or a set of competing flows as their labels joined by spaces; ``flows``
    the ``--flow`` values that run (an external algorithm's with its command; default: ``cca`` split
    at spaces)."""

    scenario: ScenarioSpec
    cca: str
    repetition: int
    flows: tuple[str, ...] = ()

    @property
    def flow_texts(self) -> tuple[str, ...]:
        return self.flows or tuple(self.cca.split())

    @property
    def cca_slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9._=-]+", "-", self.cca.replace(":", "-", 1))

    @property
    def run_id(self) -> str:
        return f"{self.scenario.name}/{self.cca_slug}/run-{self.repetition}"


@dataclass(frozen=True)
class Sweep:
    """A parsed experiment file."""

    name: str
    seed: int
    repetitions: int
    ccas: tuple[str, ...]
    scenarios: tuple[ScenarioSpec, ...]
    source: Path
    entries: tuple[tuple[str, ...], ...] = ()
    """The flows of each of ``ccas`` (default: each label split at spaces)."""

    def entry_flows(self) -> list[tuple[str, ...]]:
        """The ``--flow`` values of each entry of ``ccas``, in order."""
        return list(self.entries) if self.entries else [tuple(c.split()) for c in self.ccas]

    def plan(self) -> list[RunSpec]:
        """Every (scenario, CCA, repetition) in the seeded order: one shuffled block per repetition."""
        rng = random.Random(self.seed)
        order = []
        pairs = list(zip(self.ccas, self.entry_flows()))
        for rep in range(1, self.repetitions + 1):
            block = [RunSpec(s, c, rep, flows) for s in self.scenarios for c, flows in pairs]
            rng.shuffle(block)
            order += block
        return order

    def estimate_s(self) -> float:
        """Estimated wall time of the whole plan at one run at a time, s."""
        return sum(r.scenario.duration_s + RUN_OVERHEAD_S for r in self.plan())


def load_sweep(path: Path, defaults: dict[str, Any] | None = None) -> Sweep:
    """Parse and check an experiment file; CcplabError names the file and the key that is wrong.

    CCA names are checked by shape here (``kind:NAME``); the machine check
    (``ccplab.cca.parse_cca``) happens when the sweep starts. ``defaults``: values of scenario keys
    for every scenario table that does not give them (``ccplab sweep --report-wake-ms``, ...).
    """
    path = Path(path)
    where = str(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise CcplabError(f"cannot read experiment file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CcplabError(f"{where}: not valid TOML: {exc}") from None
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise CcplabError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(TOP_KEYS))})")
    name = _name(data.get("name"), f"{where}: name")
    seed = _int(data.get("seed", 0), f"{where}: seed", minimum=0)
    reps = _int(data.get("repetitions", 1), f"{where}: repetitions", minimum=1)
    ccas = data.get("ccas", [] if "flows" in data else None)
    ccas = [ccas] if isinstance(ccas, str) else ccas
    if not isinstance(ccas, list) or not all(isinstance(c, str) and ":" in c for c in ccas):
        raise CcplabError(f"{where}: ccas must be a list of CCA names like \"kernel:cubic\", \"ccp:reno\"")
    entries = [(rebase_external(c, path.parent),) for c in ccas] + [
        tuple(rebase_external(f, path.parent) for f in fs) for fs in _flow_sets(data.get("flows", []), f"{where}: flows")]
    ccas = [" ".join(flow_label_text(f) for f in e) for e in entries]
    if not ccas:
        raise CcplabError(f"{where}: ccas must be a non-empty list of CCA names like \"kernel:cubic\" "
                          "(or give flows: sets of competing flows)")
    if len(set(ccas)) != len(ccas):
        raise CcplabError(f"{where}: ccas/flows list a CCA or a set of flows twice")
    tables = data.get("scenario", {})
    tables = [tables] if isinstance(tables, dict) else tables
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables) or not tables:
        raise CcplabError(f"{where}: scenario must be a table [scenario] or tables [[scenario]]")
    scenarios = []
    for k, table in enumerate(tables):
        scenarios += _expand(table, f"{where}: scenario[{k}]", path.parent, defaults or {})
    names = [s.name for s in scenarios]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise CcplabError(f"{where}: two scenarios are both named {dup[0]!r}: give them distinct names")
    return Sweep(name, seed, reps, tuple(ccas), tuple(scenarios), path.resolve(), tuple(entries))


def _flow_sets(value: Any, where: str) -> list[tuple[str, ...]]:
    """``flows``: a list of flow sets, each a list of ``--flow`` values (only an external algorithm's
    holds spaces, in its command)."""
    if not isinstance(value, list) or not all(
            isinstance(fs, list) and fs and all(isinstance(f, str) and ":" in f and
                                                (" " not in f or f.startswith(EXTERNAL_KIND + ":")) for f in fs)
            for fs in value):
        raise CcplabError(f"{where} must be a list of flow sets, each a non-empty list of flows like "
                          "[\"kernel:cubic\", \"ccp:bbr@10\"]")
    return [tuple(fs) for fs in value]


def _expand(table: dict[str, Any], where: str, base: Path, defaults: dict[str, Any]) -> list[ScenarioSpec]:
    """The cross product of a scenario table's list-valued keys, one ScenarioSpec each."""
    unknown = set(table) - SCENARIO_KEYS
    if unknown:
        raise CcplabError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
                          f"(known: {', '.join(sorted(SCENARIO_KEYS))})")
    if "steps" in table and "trace" in table:
        raise CcplabError(f"{where}: give steps (a generated trace) or trace (a file), not both")
    values = {**DEFAULTS, "steps": "0:0:12", **defaults, **table}
    if "trace" in table:
        values.pop("steps")
    prefix = values.pop("name", None)
    if prefix is not None:
        _name(prefix, f"{where}: name")
    keys = sorted(values)
    axes = [v if isinstance(v, list) else [v] for v in (values[k] for k in keys)]
    if any(not axis for axis in axes):
        raise CcplabError(f"{where}: an empty list gives no scenario")
    single = all(len(a) == 1 for a in axes)
    return [_scenario(dict(zip(keys, combo)), where, base, prefix, single) for combo in itertools.product(*axes)]


def _scenario(v: dict[str, Any], where: str, base: Path, prefix: str | None, single: bool) -> ScenarioSpec:
    """One scenario; named ``prefix`` (a table of one scenario), ``prefix_<auto>`` or ``<auto>``."""
    owd = _int(v["one_way_delay_ms"], f"{where}: one_way_delay_ms", minimum=0)
    queue = _int(v["queue_packets"], f"{where}: queue_packets", minimum=1)
    duration = _int(v["duration_s"], f"{where}: duration_s", minimum=1)
    sigma = _float(v["sigma_mbps"], f"{where}: sigma_mbps")
    tseed = _int(v["trace_seed"], f"{where}: trace_seed", minimum=0)
    if not isinstance(v["quickack"], bool):
        raise CcplabError(f"{where}: quickack must be true or false, got {v['quickack']!r}")
    datapath = {}
    for setting in sc.DATAPATH_SETTINGS:
        value = v.get(setting.field)
        try:
            setting.check(value)
        except CcplabError as exc:
            raise CcplabError(f"{where}: {setting.field}: {exc}") from None
        datapath[setting.field] = value
    trace, steps = None, ()
    if "trace" in v:
        if not isinstance(v["trace"], str):
            raise CcplabError(f"{where}: trace must be a path (string), got {v['trace']!r}")
        trace = (base / v["trace"]).resolve()
        if not trace.is_file():
            raise CcplabError(f"{where}: trace {trace} does not exist")
        source = re.sub(r"[^A-Za-z0-9._-]+", "-", trace.stem)
    else:
        if not isinstance(v["steps"], str):
            raise CcplabError(f"{where}: steps must be a string of AT_S:FROM_MBPS:TO_MBPS (or a list of them), "
                              f"got {v['steps']!r}")
        steps = sc.parse_step_args(v["steps"].replace(",", " ").split(), option=f"{where}: steps")
        try:
            sc.check_steps_within(steps, duration)
        except CcplabError as exc:
            raise CcplabError(f"{where}: {exc}") from None
        source = sc.step_trace_name(steps) + (f"-sigma{sigma:g}" if sigma else "")
    auto = (f"{source}_owd{owd}_q{queue}_d{duration}" + ("_quickack" if v["quickack"] else "")
            + "".join(f"_{s.name_tag}{datapath[s.field]}" for s in sc.DATAPATH_SETTINGS
                      if datapath[s.field] is not None))
    name = auto if prefix is None else prefix if single else f"{prefix}_{auto}"
    _name(name, f"{where}: name")
    return ScenarioSpec(name, owd, queue, duration, steps, sigma, tseed, trace, v["quickack"], **datapath)


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise CcplabError(f"{where} must be letters, digits, '.', '_' or '-', got {value!r}")
    return value


def _int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CcplabError(f"{where} must be a whole number >= {minimum}, got {value!r}")
    return value


def _float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise CcplabError(f"{where} must be a number >= 0, got {value!r}")
    return float(value)


def format_plan(sweep: Sweep, limit: int = 20) -> str:
    """The --dry-run text: scenarios, CCAs, the first ``limit`` runs in order, run count and estimated time."""
    plan = sweep.plan()
    lines = [f"sweep {sweep.name} ({sweep.source.name}): {len(sweep.scenarios)} scenario(s) x "
             f"{len(sweep.ccas)} CCA(s) x {sweep.repetitions} repetition(s) = {len(plan)} runs, order seed {sweep.seed}"]
    lines += [f"  scenario {s.name}: {s.describe()}" for s in sweep.scenarios]
    lines.append(f"  CCAs: {', '.join(sweep.ccas)}")
    lines.append(f"  order (first {min(limit, len(plan))} of {len(plan)}):")
    lines += [f"    {k + 1:>5}. {r.run_id}" for k, r in enumerate(plan[:limit])]
    est = sweep.estimate_s()
    lines.append(f"estimated time at one run at a time: {_hms(est)} ({len(plan)} runs x flow + "
                 f"{RUN_OVERHEAD_S:g} s overhead each)")
    return "\n".join(lines)


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"
