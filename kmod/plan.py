"""What the guest runs: cases, one line each in /plan.txt, and the link in /plan.env.

A case line is `ID KIND ORDER SECONDS CCA [DAEMON FLAGS...]` (kmod/guest_init.sh):
KIND `kernel` runs the kernel's own CCA (FLAGS go to the iperf3 client), `ccp` runs `ccp-algorithms CCA --ipc netlink FLAGS`
beside ccp-cong.ko, `ccp-dies` also kills that daemon (SIGKILL) halfway through the flow.
ORDER is `module-first` or `daemon-first` for the ccp kinds, `-` for kernel.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace

KINDS = ("kernel", "ccp", "ccp-dies")
ORDERS = ("module-first", "daemon-first")
#: The kernel's own CCAs the guest can run (reno and cubic built in, bbr as tcp_bbr.ko).
KERNEL_CCAS = ("reno", "cubic", "bbr")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_FLAG = re.compile(r"^[A-Za-z0-9_.=:,+-]+$")


@dataclass(frozen=True)
class Case:
    """One flow in the guest."""

    id: str
    kind: str
    cca: str
    seconds: int
    order: str = "module-first"
    flags: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not _ID.match(self.id):
            raise ValueError(f"case id {self.id!r}: letters, digits, '_', '.', '-' only")
        if self.kind not in KINDS:
            raise ValueError(f"case {self.id}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind == "kernel" and self.cca not in KERNEL_CCAS:
            raise ValueError(f"case {self.id}: kernel CCA {self.cca!r} is not one of {', '.join(KERNEL_CCAS)}")
        if self.kind != "kernel" and self.order not in ORDERS:
            raise ValueError(f"case {self.id}: order {self.order!r} is not one of {', '.join(ORDERS)}")
        if not 1 <= self.seconds <= 600:
            raise ValueError(f"case {self.id}: seconds must be in 1..600, got {self.seconds}")
        if not _ID.match(self.cca):
            raise ValueError(f"case {self.id}: CCA {self.cca!r} is not a plain name")
        for f in self.flags:
            # The guest splits the line on blanks: a flag may not carry spaces or shell syntax.
            if not _FLAG.match(f):
                raise ValueError(f"case {self.id}: daemon flag {f!r} has characters the guest's plan cannot carry")

    def line(self) -> str:
        order = "-" if self.kind == "kernel" else self.order
        return " ".join([self.id, self.kind, order, str(self.seconds), self.cca, *self.flags])

    @property
    def label(self) -> str:
        """kernel:cubic, ccp:fixed-window --window=37, ccp:reno (daemon killed) (as the table shows it)."""
        prefix = "kernel" if self.kind == "kernel" else "ccp"
        text = " ".join([f"{prefix}:{self.cca}", *self.flags])
        return text + " (daemon killed)" if self.kind == "ccp-dies" else text


def parse_line(line: str) -> Case:
    """The case of one plan line (the inverse of Case.line); raises ValueError naming what is wrong."""
    parts = line.split()
    if len(parts) < 5:
        raise ValueError(f"plan line {line!r}: expected ID KIND ORDER SECONDS CCA [FLAGS...]")
    cid, kind, order, secs, cca, *flags = parts
    if not secs.isdigit():
        raise ValueError(f"plan line {line!r}: SECONDS must be a whole number, got {secs!r}")
    return Case(cid, kind, cca, int(secs), order if kind != "kernel" else "module-first", tuple(flags))


def parse_ccp_spec(spec: str) -> tuple[str, tuple[str, ...]]:
    """`NAME[:FLAG=VALUE...]` (the runner's ccp:NAME:flag=value without "ccp:") as
    (NAME, ("--FLAG=VALUE", ...)); raises ValueError naming the spec."""
    name, *items = spec.split(":")
    if not name:
        raise ValueError(f"--ccp {spec!r}: expected NAME[:FLAG=VALUE...]")
    flags = []
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k or not v:
            raise ValueError(f"--ccp {spec!r}: {it!r} is not FLAG=VALUE")
        flags.append(f"--{k.lstrip('-').replace('_', '-')}={v}")
    return name, tuple(flags)


#: The default table: the kernel's reno, cubic, bbr against the suite's reno, cubic, bbr, copa,
#: vegas, a fixed window and three contest algorithms (docs/algorithms.md), on the guest's
#: unpaced sockets (its default CCA is cubic, no fq). reno and cubic also paced: the kernel's
#: with --fq-rate=1G (iperf3 sets SO_MAX_PACING_RATE, which turns the kernel's own pacing on:
#: 200 % / 120 % of cwnd/SRTT) and ccp reno with --socket-pacing=kernel (the daemon commands
#: that rate), a pair `results.kernel_reference` compares.
DEFAULT_KERNEL = ("reno", "cubic", "bbr", "reno:fq-rate=1G", "cubic:fq-rate=1G")
DEFAULT_CCP = ("reno", "cubic", "bbr", "copa", "vegas", "fixed-window:window=37", "aimd",
               "delay-threshold", "rocinante", "reno:socket-pacing=kernel")


def table_cases(kernel_ccas, ccp_specs, seconds: int, order: str, dies: str | None) -> list[Case]:
    """The comparison's cases: each kernel CCA, each ccp spec (`NAME[:FLAG=VALUE...]`), and,
    when `dies` names an algorithm, one flow whose daemon is killed halfway."""
    cases: list[Case] = []

    def add(prefix: str, kind: str, name: str, flags: tuple[str, ...]) -> None:
        # The same algorithm twice (e.g. with other flags) gets -2, -3, ... on its id.
        base = f"{prefix}-{name}"
        n = sum(1 for c in cases if c.id == base or c.id.startswith(base + "-") and c.id[len(base) + 1:].isdigit())
        cases.append(Case(base if n == 0 else f"{base}-{n + 1}", kind, name, seconds, order, flags))

    for c in kernel_ccas:
        # NAME[:FLAG=VALUE...] as for ccp: the flags go to iperf3 (e.g. reno:fq-rate=1G).
        add("kernel", "kernel", *parse_ccp_spec(c))
    for spec in ccp_specs:
        add("ccp", "ccp", *parse_ccp_spec(spec))
    if dies:
        add("dies", "ccp-dies", *parse_ccp_spec(dies))
    return cases


def rounds(cases: list[Case], n: int) -> list[Case]:
    """`cases` n times over, round after round (so slow drifts of the machine spread over
    every row); round k > 1 suffixes each id with ".rk"."""
    return [c if k == 1 else replace(c, id=f"{c.id}.r{k}") for k in range(1, n + 1) for c in cases]


@dataclass(frozen=True)
class Link:
    """The netem bottleneck inside the guest (receiver side's egress)."""

    rate: str = "20mbit"
    delay: str = "20ms"
    limit: int = 100
    port: int = 5201

    def env(self) -> str:
        for name, v in (("rate", self.rate), ("delay", self.delay)):
            if not re.match(r"^[0-9.]+[a-z]*$", v):
                raise ValueError(f"--{name} {v!r}: expected a number with a tc unit, e.g. 20mbit, 20ms")
        return (f"RATE={shlex.quote(self.rate)}\nDELAY={shlex.quote(self.delay)}\n"
                f"LIMIT={int(self.limit)}\nPORT={int(self.port)}\n")


def plan_text(cases: list[Case]) -> str:
    return "".join(c.line() + "\n" for c in cases)
