"""Network namespaces: commands inside one, a veth pair between two, readiness of a listener, removal.

ccplab-link builds the namespaces of a run itself (and removes them); the
datapath benchmark builds its own pair with `veth_namespaces`. Whatever
builds them, a namespace is removed the same way (`remove_namespace`): what
still runs inside is killed first, since a live process keeps the
namespace's veth alive after ``ip netns del``. Names of namespaces a killed
owner left are recognised by pattern (`namespaces_matching`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from ..errors import CcplabError
from .processes import run_tool

NETNS_DIR = Path("/var/run/netns")
"""Where ``ip netns`` keeps its named namespaces."""


def netns_exec(ns: str, *argv: object) -> list[str]:
    """``argv`` as a command run inside namespace ``ns`` (``ip netns exec``, which execs it: the
    process's pid is the command's own)."""
    return ["ip", "netns", "exec", ns, *(str(a) for a in argv)]


def namespaces_matching(pattern: re.Pattern[str]) -> list[str]:
    """The host's named namespaces whose whole name matches ``pattern``, sorted (none without NETNS_DIR)."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir() if pattern.match(p.name))
    except FileNotFoundError:
        return []


def remove_namespace(ns: str) -> None:
    """Stop what runs in network namespace ``ns`` (SIGKILL) and delete it (no error if it is gone already)."""
    done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    for pid in done.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


TCP_LISTEN = "0A"
"""The LISTEN state in /proc/net/tcp's ``st`` column (include/net/tcp_states.h)."""


def listening(ns: str, port: int, pid: int) -> bool:
    """Whether a TCP socket listens on ``port`` in namespace ``ns``, read from the TCP table of process
    ``pid`` (``/proc/PID/net/tcp`` and ``tcp6``: its network namespace's sockets), once ``pid`` runs in
    ``ns``: a server's readiness, with ``pid`` the server started there (``netns_exec`` keeps the pid).
    False while ``pid`` is not in ``ns`` yet or is gone. No subprocess: a run checks this every 20 ms."""
    try:
        if os.stat(f"/proc/{pid}/ns/net").st_ino != (NETNS_DIR / ns).stat().st_ino:
            return False
        hex_port = f"{port:04X}"
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f, None)  # the header
                for line in f:
                    fields = line.split()  # sl local_address rem_address st ...
                    if len(fields) > 3 and fields[3] == TCP_LISTEN and fields[1].rsplit(":", 1)[-1] == hex_port:
                        return True
    except (FileNotFoundError, ProcessLookupError):
        return False
    return False


def wait_no_connections(ns: str, port: int, timeout_s: float) -> None:
    """Until no established TCP connection on local ``port`` is left in namespace ``ns`` (``ss``);
    CcplabError after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = subprocess.run(netns_exec(ns, "ss", "-Htn", "state", "established", f"( sport = :{port} )"),
                              capture_output=True, text=True)
        if not done.stdout.strip():
            return
        time.sleep(0.05)  # poll interval of a bounded wait: ss offers no event to wait on
    raise CcplabError(f"the server on port {port} in {ns} still had connections {timeout_s:.0f} s later")


@dataclass(frozen=True)
class VethPair:
    """Two namespaces joined by one veth pair, each end named ``veth0``: the sender's address and the
    receiver's (IPv4, prefix length ``prefix_len``), the MTU (bytes), and sysctls set in both
    namespaces (``net.ipv4.X`` names and values, in order) before the link comes up."""

    sender: str
    receiver: str
    sender_ip: str
    receiver_ip: str
    prefix_len: int = 24
    mtu: int = 1500
    sysctls: Sequence[tuple[str, str]] = ()


@contextmanager
def veth_namespaces(pair: VethPair) -> Iterator[tuple[str, str]]:
    """Create ``pair``'s namespaces (loopback up, its sysctls), the veth pair between them with its
    addresses and MTU; yields (sender, receiver). Both namespaces are removed on exit, also when
    setting them up fails half-way. CcplabError naming the step that failed, with ip's message."""
    try:
        for ns in (pair.sender, pair.receiver):
            run_tool(["ip", "netns", "add", ns], f"ip netns add {ns}")
            run_tool(["ip", "-n", ns, "link", "set", "lo", "up"], f"lo up in {ns}")
            for name, value in pair.sysctls:
                run_tool(netns_exec(ns, "sysctl", "-qw", f"{name}={value}"), f"{name} in {ns}")
        run_tool(["ip", "-n", pair.sender, "link", "add", "veth0", "mtu", pair.mtu, "type", "veth",
                  "peer", "name", "veth0", "netns", pair.receiver, "mtu", pair.mtu], "creating the veth pair")
        for ns, ip in ((pair.sender, pair.sender_ip), (pair.receiver, pair.receiver_ip)):
            run_tool(["ip", "-n", ns, "addr", "add", f"{ip}/{pair.prefix_len}", "dev", "veth0"], f"address in {ns}")
            run_tool(["ip", "-n", ns, "link", "set", "veth0", "up"], f"veth up in {ns}")
        yield pair.sender, pair.receiver
    finally:
        for ns in (pair.sender, pair.receiver):
            remove_namespace(ns)
