"""One ccp run per host at a time, claimed atomically before anything is created.

The ``ccp`` congestion control, the Portus socket /tmp/ccp/portus and the
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
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import CcplabError

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
