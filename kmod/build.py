"""Building ccp-kernel's module against a kernel's unpacked headers.

ccp-kernel's own Makefile takes the kernel version from the host's `uname -r`; kbuild is
called directly instead, with the version macros its sources test
(`__KERNEL_VERSION_MAJOR__/MINOR__`) and IPC=0 (netlink, compile time: `-D__IPC__=0`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from kmod.kernels import Unpacked

MODULE_NAME = "ccp-cong.ko"


def make_command(headers: Path, src: Path, version: tuple[int, int], cc: str = "gcc-12") -> list[str]:
    """The kbuild command line that builds `src` (an exported ccp-kernel tree) for `headers`."""
    major, minor = version
    return [
        "make", "-C", str(headers), f"M={src}", f"CC={cc}",
        f"KERNEL_VERSION_MAJOR={major}", f"KERNEL_VERSION_MINOR={minor}", "IPC=0", "modules",
    ]


def build_module(u: Unpacked, src: Path, log: Path, jobs: int = 2) -> Path:
    """Build ccp-cong.ko from `src` for kernel `u`; the build's output goes to `log`.

    Returns the module's path. Raises RuntimeError naming the kernel and the log's last lines.
    """
    cmd = make_command(u.headers, src, u.kernel.version) + [f"-j{jobs}"]
    with log.open("w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    ko = src / MODULE_NAME
    if r.returncode != 0 or not ko.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"building {MODULE_NAME} for {u.kernel.release} failed (log {log}):\n{tail}")
    return ko
