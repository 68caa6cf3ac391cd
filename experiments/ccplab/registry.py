"""The algorithm registry, derived from the algorithms' own declaration.

The suite is declared once, in Rust (``algorithms/src/suite.rs``); the binary
``ccp-algorithms --list-json`` prints every algorithm's description::

    [{"name", "binary", "command": ["ccp-algorithms", NAME], "summary", "source",
      "controls": "cwnd" | "cwnd+rate", "program": {"name", "cadence", "urgent_on_loss"},
      "flags": [{"flag": "--beta", "default": "0.7", "help": ..., ["values": [...]]}, ...]}, ...]

This module reads that list (once per process), so the runner's names, the
flags ``ccp:NAME:flag=value`` accepts and ``ccplab algorithms`` all come from
the code that implements them.
"""

from __future__ import annotations

import functools
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .binaries import project_binary
from .errors import CcplabError

SUITE_BINARY = "ccp-algorithms"

# Flags that belong to the runner (it sets the IPC itself) or only print and exit.
RUNNER_FLAGS = frozenset({"--ipc", "--ipc-name", "--verbose", "--dump-program", "--describe-json"})


@dataclass(frozen=True)
class Algorithm:
    """One algorithm of the suite: ``name`` (the Portus CongAlg name), ``command``
    (argv prefix that runs it), ``source``, ``summary``, ``controls`` and ``flags``
    (the binary's own description of each flag)."""

    name: str
    binary: str
    command: tuple[str, ...]
    source: str
    summary: str
    controls: str = "cwnd"
    flags: tuple[dict, ...] = field(default_factory=tuple)
    description: dict = field(default_factory=dict, compare=False, hash=False)

    def binary_path(self) -> Path:
        return project_binary(self.binary)

    def argv(self, params: dict[str, str] | None = None) -> list[str]:
        """The command line running it with ``params`` ({flag name without --: value})."""
        argv = [str(self.binary_path()), *self.command[1:]]
        for key, value in (params or {}).items():
            argv += [f"--{key}", str(value)]
        return argv

    def describe(self) -> dict:
        """The binary's own description (see the module docstring)."""
        return self.description

    def fold_program(self, params: dict[str, str] | None = None) -> str:
        """The fold program text the algorithm installs in the datapath (with ``params``)."""
        return self._query(params, "--dump-program")

    def parameter_names(self) -> list[str]:
        """The flags ``ccp:NAME:flag=value`` may set (without ``--``)."""
        return [f["flag"][2:] for f in self.flags if f["flag"].startswith("--") and f["flag"] not in RUNNER_FLAGS]

    def check_params(self, params: dict[str, str]) -> None:
        """Validate ``params`` against the algorithm's own flags; CcplabError names
        the bad parameter and the allowed ones (names) or the binary's complaint (values)."""
        allowed = self.parameter_names()
        for key in params:
            if key not in allowed:
                raise CcplabError(
                    f"ccp:{self.name} has no parameter {key!r}; allowed: {', '.join(allowed)}")
        if params:
            self._query(params, "--dump-program")  # the binary parses and validates the values

    def _query(self, params: dict[str, str] | None, flag: str) -> str:
        done = subprocess.run([*self.argv(params), flag], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            detail = done.stderr.strip().splitlines()
            raise CcplabError(f"ccp:{self.name} rejected its parameters: {detail[0] if detail else done.returncode}")
        return done.stdout


def _from_description(d: dict) -> Algorithm:
    try:
        return Algorithm(name=d["name"], binary=d["binary"], command=tuple(d["command"]),
                         source=d.get("source", ""), summary=d.get("summary", ""),
                         controls=d.get("controls", "cwnd"), flags=tuple(d.get("flags", [])), description=d)
    except (KeyError, TypeError) as exc:
        raise CcplabError(f"{SUITE_BINARY} --list-json: an entry lacks {exc}") from exc


@functools.lru_cache(maxsize=None)
def _listing(binary: Path) -> tuple[Algorithm, ...]:
    done = subprocess.run([str(binary), "--list-json"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise CcplabError(f"{binary} --list-json failed: {done.stderr.strip()}")
    try:
        entries = json.loads(done.stdout)
    except ValueError as exc:
        raise CcplabError(f"{binary} --list-json printed no JSON: {exc}") from exc
    return tuple(_from_description(d) for d in entries)


def load_registry() -> dict[str, Algorithm]:
    """All algorithms of the suite by name, in the suite's order. Raises CcplabError
    when ``ccp-algorithms`` is not built or does not answer."""
    return {a.name: a for a in _listing(project_binary(SUITE_BINARY))}


def lookup(name: str) -> Algorithm:
    """The algorithm called ``name``; raises CcplabError listing the known ones."""
    algorithms = load_registry()
    if name not in algorithms:
        known = ", ".join(algorithms) or "(none)"
        raise CcplabError(f"unknown CCP algorithm {name!r}; the suite has: {known}")
    return algorithms[name]
