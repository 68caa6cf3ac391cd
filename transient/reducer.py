"""The compiled per-ms reducer of a one-flow log (``ccplab-logreduce``, the ``logreduce/`` crate).

It reads a log once, at compiled speed, into the per-ms arrays of `transient.stream` and writes them as the
cache `transient.cache` reads (``<log>.ms.npz``); on a log it does not take (anything but the
strict form the streaming reader takes, see that binary's ``--help``) it declines, and the Python
readers do the work and word any error.  Found as the runner finds the project's binaries:
``$CCPLAB_BIN_DIR/ccplab-logreduce``, else ``target/release/`` of this checkout (``cargo build
--release -p ccplab-logreduce``); without it the Python streaming reader reduces the log.
"""

from __future__ import annotations

import os
import subprocess
import warnings
from pathlib import Path

BINARY = "ccplab-logreduce"
DECLINED = 3
"""The binary's exit status for a log it leaves to the Python readers."""

_REPO_ROOT = Path(__file__).resolve().parents[1]


def reducer_binary() -> Path | None:
    """The reducer's path (``$CCPLAB_BIN_DIR``, else this checkout's target/release), or None when it is
    not built there."""
    override = os.environ.get("CCPLAB_BIN_DIR")
    path = (Path(override) if override else _REPO_ROOT / "target" / "release") / BINARY
    return path if path.is_file() and os.access(path, os.X_OK) else None


_STARTED: dict[tuple[str, str], subprocess.Popen] = {}  # reducers under way, by (log, archive)


def _launch(binary: Path, log_path: Path, out: Path) -> subprocess.Popen:
    from .cachefiles import CACHE_VERSION
    from .timezero import FLOW_START_MIN_BYTES

    return subprocess.Popen([str(binary), str(log_path), "--out", str(out), "--cache-version", str(CACHE_VERSION),
                             "--data-min-bytes", str(FLOW_START_MIN_BYTES)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def start_for_cache(log_path: Path) -> bool:
    """Start reducing ``log_path`` into its per-ms cache (`transient.cache.arrays_cache_path`) in the
    background when that cache does not exist yet, the directory is writable and the analysis will not
    take the log's event cache instead; `reduce_to` of the same log and archive then waits for it.
    True when started. Checks with ``os`` alone: no numpy is imported here."""
    from .cachefiles import STREAMING_BYTES, arrays_cache_path, cache_path

    binary = reducer_binary()
    out = arrays_cache_path(log_path)
    if binary is None or out.exists() or not os.access(out.parent, os.W_OK):
        return False
    try:
        size = log_path.stat().st_size
    except OSError:
        return False
    if size <= STREAMING_BYTES and cache_path(log_path).exists():
        return False  # a small log's event cache is read instead (`transient.cache.cached_log_arrays`)
    key = (str(log_path), str(out))
    if key not in _STARTED:
        if not _STARTED:
            import atexit

            atexit.register(_wait_all)
        _STARTED[key] = _launch(binary, log_path, out)
    return True


def _wait_all() -> None:
    """Wait for the reducers started ahead that the analysis never asked for (it stopped first): none
    outlives the command (what they write is a whole cache or nothing)."""
    while _STARTED:
        _STARTED.popitem()[1].communicate()


def reduce_to(log_path: Path, out: Path) -> bool:
    """Reduce the log at ``log_path`` into the per-ms cache archive ``out`` (replaced whole); True when
    written, False when the binary is not built or declines the log (then the Python readers take it).

    A reducer that fails otherwise (it cannot write ``out``, a crash) also gives False, with a warning
    carrying its message: the Python readers still give the right figures.
    """
    proc = _STARTED.pop((str(log_path), str(out)), None)  # started ahead (`start_for_cache`)
    if proc is None:
        binary = reducer_binary()
        if binary is None:
            return False
        proc = _launch(binary, log_path, out)
    _, err = proc.communicate()
    if proc.returncode == 0:
        return True
    if proc.returncode != DECLINED:
        warnings.warn(f"{proc.args[0]} failed (status {proc.returncode}): "
                      f"{err.decode(errors='replace').strip()[-500:]}; reading {log_path} in Python",
                      RuntimeWarning, stacklevel=2)
    return False
