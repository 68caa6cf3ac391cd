"""Locate the project's built binaries (ccplab-link, ccplab-trace, ccp-datapath, ccp-*).

They are built by ``cargo build --release`` into ``<repo>/target/release``.
``CCPLAB_BIN_DIR`` overrides that directory (for example an installed copy).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .errors import CcplabError

REPO_ROOT = Path(__file__).resolve().parents[2]


def bin_dir() -> Path:
    """Directory holding the project's binaries (``$CCPLAB_BIN_DIR`` or target/release)."""
    override = os.environ.get("CCPLAB_BIN_DIR")
    return Path(override) if override else REPO_ROOT / "target" / "release"


def project_binary(name: str) -> Path:
    """Path of a project binary; raises CcplabError naming it if it is not built."""
    path = bin_dir() / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise CcplabError(
            f"binary {name!r} not found at {path}: build the project first "
            "(`make build`, or `cargo build --release`), or set CCPLAB_BIN_DIR"
        )
    return path


def system_binary(name: str, package: str | None = None) -> Path:
    """Path of a system tool on PATH (iperf3, ip); raises CcplabError if missing."""
    found = shutil.which(name)
    if not found:
        hint = f" (install it: apt-get install {package or name})"
        raise CcplabError(f"{name} is not installed or not on PATH{hint}")
    return Path(found)
