"""Where the caches beside a log live and the reader version that stamps them (`transient.cache`).

Without numpy, so the command line can look for a log's cache before it imports the analysis.
"""

from __future__ import annotations

from pathlib import Path

CACHE_VERSION = 1
"""Bump when the parsed representation changes: older caches are then re-parsed."""

STREAMING_BYTES = 32 << 20
"""Logs above this size (bytes) are read in a streaming pass (polars' engine, the per-ms reducers), and
never reduced from their event cache."""


def cache_path(log_path: Path) -> Path:
    """Where the cache of ``log_path``'s events lives: the same name + ``.parquet``."""
    return log_path.with_name(log_path.name + ".parquet")


def arrays_cache_path(log_path: Path) -> Path:
    """Where the per-ms reduction of ``log_path`` lives: the same name + ``.ms.npz``."""
    return log_path.with_name(log_path.name + ".ms.npz")
