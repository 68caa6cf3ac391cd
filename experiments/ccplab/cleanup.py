"""What a killed run leaves behind, how the next run notices it, and ``ccplab clean``.

A run's daemons die with it (``plumbing.processes.supervised``: PR_SET_PDEATHSIG), and
the link always has a duration, so a SIGKILLed ``ccplab run`` normally leaves
only its ``.partial`` directory. What can still be left, and how it is told
apart from a run that is alive:

    processes    carry ``CCPLAB_RUNNER_PID=<pid>`` in their environment (set by
                 ``plumbing.processes``); left over when that runner is dead.
    namespaces   named like ccplab-link's (rattan's ``ns-left-<id>``,
                 ``ns-rattan-<id>``, ``ns-right-<id>``, 6 characters) while no
                 ccplab-link process is alive.
    ``ccp`` CA   registered in the kernel while no ccp-datapath is alive.
    Portus socket  /tmp/ccp/portus while no ccp-* process is alive (harmless:
                 the next run replaces it; ``ccplab clean`` removes it).
    datapath sockets  /tmp/ccp/ccp-datapath-<pid> of a datapath pid that is gone
                 (harmless; ``ccplab clean`` removes them).
    partial dirs ``.<name>.partial-<pid>`` run directories of a dead runner pid.

``find_leftovers`` lists them; the run's preflight refuses to start on any of
the first three (naming ``ccplab clean``) and removes stale partial
directories beside its own output itself (they are incomplete by definition).
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import psutil

from .cca import DATAPATH_CA, PORTUS_SOCKET, kernel_ccs
from .plumbing.netns import namespaces_matching, remove_namespace
from .plumbing.processes import RUNNER_ENV

LINK_NETNS = re.compile(r"^ns-(left|rattan|right)-[A-Za-z0-9]{6}$")
PARTIAL_DIR = re.compile(r"^\..+\.partial-(\d+)$")
DATAPATH_SOCKET = re.compile(r"^ccp-datapath-(\d+)$")
LINK_PROCESS = "ccplab-link"
DATAPATH_PROCESS = "ccp-datapath"
KILL_GRACE_S = 3.0


@dataclass
class Leftovers:
    """What killed runs left on this host (see the module doc for how each is recognised)."""

    processes: list[psutil.Process] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    ccp_registered: bool = False
    portus_socket: Path | None = None
    partial_dirs: list[Path] = field(default_factory=list)
    datapath_sockets: list[Path] = field(default_factory=list)

    def host_state(self) -> list[str]:
        """One line per leftover that blocks the next run (everything but partial directories)."""
        lines = [f"process {p.pid} ({_name(p)}) of dead runner {_runner_pid(p)}" for p in self.processes]
        lines += [f"network namespace {ns} (no ccplab-link is running)" for ns in self.namespaces]
        if self.ccp_registered:
            lines.append(f"congestion control '{DATAPATH_CA}' registered with no ccp-datapath running")
        return lines

    def describe(self) -> list[str]:
        """One line per leftover, the harmless ones (socket, partial directories) included."""
        lines = self.host_state()
        if self.portus_socket is not None:
            lines.append(f"Portus socket {self.portus_socket} with no ccp-* process running")
        lines += [f"datapath socket {s} of a ccp-datapath that is gone" for s in self.datapath_sockets]
        return lines + [f"partial run directory {d}" for d in self.partial_dirs]


def find_leftovers(result_dirs: Iterable[Path] = ()) -> Leftovers:
    """Look for everything a killed run can leave; ``result_dirs`` are searched for stale partial dirs.

    Needs root to read other processes' environments; processes it cannot
    read are not counted as leftovers.
    """
    procs = list(psutil.process_iter(["pid", "name", "environ"]))
    orphans = [p for p in procs if _runner_pid(p) is not None and not psutil.pid_exists(_runner_pid(p))]
    names = {_name(p) for p in procs}
    namespaces = [] if LINK_PROCESS in names else namespaces_matching(LINK_NETNS)
    ccp = DATAPATH_PROCESS not in names and DATAPATH_CA in kernel_ccs()
    ccp_alive = any(n.startswith("ccp-") for n in names)  # an algorithm or datapath still owns the socket
    socket = PORTUS_SOCKET if PORTUS_SOCKET.exists() and not ccp_alive else None
    partials = [d for root in result_dirs for d in stale_partial_dirs(root)]
    return Leftovers(orphans, namespaces, ccp, socket, partials, stale_datapath_sockets())


def stale_datapath_sockets(directory: Path = PORTUS_SOCKET.parent) -> list[Path]:
    """``ccp-datapath-<pid>`` sockets in ``directory`` whose datapath process is gone."""
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    return sorted(p for p in entries if (m := DATAPATH_SOCKET.match(p.name)) and p.is_socket()
                  and not psutil.pid_exists(int(m.group(1))))


def stale_partial_dirs(root: Path) -> list[Path]:
    """``.<name>.partial-<pid>`` directories anywhere under ``root`` whose runner pid is dead."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for path in root.rglob(".*.partial-*"):
        match = PARTIAL_DIR.match(path.name)
        if match and path.is_dir() and not psutil.pid_exists(int(match.group(1))):
            found.append(path)
    return sorted(found)


def remove_stale_partials(parent: Path) -> list[Path]:
    """Remove stale partial run directories directly in ``parent`` (a new run's output directory's parent)."""
    removed = []
    if parent.is_dir():
        for path in parent.iterdir():
            match = PARTIAL_DIR.match(path.name)
            if match and path.is_dir() and not psutil.pid_exists(int(match.group(1))):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def clean(leftovers: Leftovers) -> list[str]:
    """Remove ``leftovers``: stop orphan processes (SIGTERM, SIGKILL after a grace), delete namespaces,
    unregister ``ccp``, remove the socket and partial directories. Returns one line per action."""
    done = []
    for proc in leftovers.processes:
        done.append(f"stopped process {proc.pid} ({_name(proc)})")
        _signal(proc, signal.SIGTERM)
    _, alive = psutil.wait_procs(leftovers.processes, timeout=KILL_GRACE_S)
    for proc in alive:
        _signal(proc, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=KILL_GRACE_S)
    for ns in leftovers.namespaces:
        remove_namespace(ns)
        done.append(f"deleted network namespace {ns}")
    if leftovers.ccp_registered:
        done.append(_unregister_ccp())
    if leftovers.portus_socket is not None:
        leftovers.portus_socket.unlink(missing_ok=True)
        done.append(f"removed {leftovers.portus_socket}")
    for path in leftovers.datapath_sockets:
        path.unlink(missing_ok=True)
        done.append(f"removed {path}")
    for path in leftovers.partial_dirs:
        shutil.rmtree(path, ignore_errors=True)
        done.append(f"removed partial run directory {path}")
    return done


def _unregister_ccp() -> str:
    """A registered ``ccp`` with no datapath is a struct_ops map kept alive elsewhere: unregister it with bpftool."""
    if shutil.which("bpftool") is None:
        return f"could not unregister '{DATAPATH_CA}': bpftool is not installed (apt-get install bpftool)"
    done = subprocess.run(["bpftool", "struct_ops", "unregister", "name", DATAPATH_CA],
                          capture_output=True, text=True)
    if DATAPATH_CA in kernel_ccs():
        return f"could not unregister '{DATAPATH_CA}': {done.stderr.strip() or 'still registered'}"
    return f"unregistered congestion control '{DATAPATH_CA}'"


def _runner_pid(proc: psutil.Process) -> int | None:
    env = proc.info.get("environ") or {}
    try:
        return int(env[RUNNER_ENV])
    except (KeyError, ValueError):
        return None


def _name(proc: psutil.Process) -> str:
    return proc.info.get("name") or "?"


def _signal(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except psutil.NoSuchProcess:
        pass
