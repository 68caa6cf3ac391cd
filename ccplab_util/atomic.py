"""The project's one atomic file write for Python code.

Readers never see a half-written file: the data goes to a temporary file in
the same directory (same filesystem, so the rename is atomic), is flushed and
fsynced, and then replaces the target with ``os.replace``.  On any error the
temporary file is removed and the previous content of ``path`` (if any) is
left untouched.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path`` as a Path.

    Args:
        path: the target file; its directory must exist.
        data: text (written as UTF-8) or bytes.

    Raises:
        TypeError: data is neither str nor bytes.
        OSError: the directory does not exist or is not writable (the
            message names the path); ``path`` is then unchanged.
    """
    path = Path(path)
    if isinstance(data, str):
        payload = data.encode("utf-8")
    elif isinstance(data, (bytes, bytearray, memoryview)):
        payload = bytes(data)
    else:
        raise TypeError(f"write_atomic({path}): data must be str or bytes, not {type(data).__name__}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp creates 0600; give the file the mode a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path
