"""The host's two locks: the netlab lock (real flows) and the ccp claim (one ccp run per host).

The netlab lock `NETLAB_LOCK` is the one every real-flow experiment, test and
benchmark of the host shares (``flock /tmp/ccplab-netlab.lock CMD``): runs that
share a host's CPU and namespaces distort each other's figures. `netlab_lock`
takes it unless the process already runs under it.

The ccp claim: the ``ccp`` congestion control, the Portus socket /tmp/ccp/portus and the
datapath exist once per host. A run with a ccp flow takes an exclusive,
non-blocking ``flock`` on `CCP_CLAIM` before its preflight and holds it to
its end; a second run started at the same instant finds it taken and is
refused, naming the holder, before it checks, creates or unlinks anything
(so no run can remove another run's socket). The kernel drops the lock when
its holder dies, however it dies, so a killed run never leaves it taken.
Runs with kernel flows only need no claim: several may share a host.
"""

from __future__ import annotations

import fcntl
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import CcplabError

NETLAB_LOCK = Path("/tmp/ccplab-netlab.lock")
"""The netlab lock file, the one ``flock`` takes in the Makefile and the docs."""
CCP_CLAIM = Path("/run/ccplab-ccp.lock")
"""The claim file (root's /run: no other user can create or replace it)."""


@contextmanager
def ccp_host_claim(path: Path = CCP_CLAIM) -> Iterator[None]:
    """Hold the host's ccp claim for the ``with`` body; CcplabError naming the holder's pid when another
    process holds it. The file keeps the holder's pid for that message."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise CcplabError(f"cannot open the host's ccp claim {path}: {exc.strerror} (ccp runs need root)") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise CcplabError(f"another ccp run (pid {holder}) is using this host's ccp datapath ({path} is "
                              "held): one ccp run per host at a time; wait for it to end") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


@contextmanager
def netlab_lock(path: Path = NETLAB_LOCK) -> Iterator[None]:
    """Hold the host's netlab lock for the ``with`` body: nothing to do when this process already runs
    under ``flock`` on it (it inherited a descriptor of the lock file), else take it here, waiting
    (blocking, no timeout) for whoever holds it; says on stderr that it waits."""
    if _holds(path):
        yield
        return
    with open(path, "a") as f:
        print(f"waiting for the netlab lock {path} ...", file=sys.stderr, flush=True)
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _holds(path: Path) -> bool:
    """Whether one of this process's open descriptors is ``path`` (``flock path CMD`` passes its own on)."""
    found = False
    for fd in os.listdir("/proc/self/fd"):
        try:
            found |= os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:
            pass
    return found
