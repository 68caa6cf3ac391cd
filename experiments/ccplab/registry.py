"""The algorithm registry: algorithms/registry.toml, read by name.

Each entry names a Portus algorithm of the suite and the binary that runs it.
The flags of an algorithm come from its binary (``--describe-json``), so that
clap's definitions are the one source of truth; its fold program comes from
``--dump-program``.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .binaries import REPO_ROOT, project_binary
from .errors import CcplabError

REGISTRY_PATH = REPO_ROOT / "algorithms" / "registry.toml"


@dataclass(frozen=True)
class Algorithm:
    """One registry entry: ``name`` (the Portus CongAlg name), ``binary``, ``source``, ``summary``."""

    name: str
    binary: str
    source: str
    summary: str

    def binary_path(self) -> Path:
        return project_binary(self.binary)

    def describe(self) -> dict:
        """The binary's own description: {"name", "summary", "source", "flags": [...]}."""
        return json.loads(self._query("--describe-json"))

    def fold_program(self) -> str:
        """The fold program text the algorithm installs in the datapath."""
        return self._query("--dump-program")

    def _query(self, flag: str) -> str:
        done = subprocess.run(
            [str(self.binary_path()), flag], capture_output=True, text=True, timeout=30
        )
        if done.returncode != 0:
            raise CcplabError(f"{self.binary} {flag} failed: {done.stderr.strip()}")
        return done.stdout


def load_registry(path: Path = REGISTRY_PATH) -> dict[str, Algorithm]:
    """All algorithms of the suite by name. Raises CcplabError on a malformed file."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CcplabError(f"cannot read the algorithm registry {path}: {exc}") from exc
    algorithms = {}
    for i, entry in enumerate(data.get("algorithm", []), start=1):
        try:
            algo = Algorithm(
                name=entry["name"],
                binary=entry["binary"],
                source=entry.get("source", ""),
                summary=entry.get("summary", ""),
            )
        except KeyError as exc:
            raise CcplabError(f"{path}: algorithm entry {i} lacks {exc}") from exc
        algorithms[algo.name] = algo
    return algorithms


def lookup(name: str) -> Algorithm:
    """The algorithm called ``name``; raises CcplabError listing the known ones."""
    algorithms = load_registry()
    if name not in algorithms:
        known = ", ".join(sorted(algorithms)) or "(none)"
        raise CcplabError(f"unknown CCP algorithm {name!r}; the suite has: {known}")
    return algorithms[name]
