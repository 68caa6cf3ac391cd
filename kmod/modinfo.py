"""Kernel module dependencies, read from each module's .modinfo strings.

The guest loads modules with busybox insmod, which resolves nothing: the initramfs carries the
modules it needs with everything they depend on, in an order where each comes after its
dependencies. `depends=` in a module's .modinfo section lists them (what depmod reads).
"""

from __future__ import annotations

import lzma
import re
import subprocess
from pathlib import Path

#: Module file endings: plain, and as Debian compresses them (xz since 6.x kernels' packages, zstd).
SUFFIXES = (".ko", ".ko.xz", ".ko.zst")

_DEPENDS = re.compile(rb"(?:^|\x00)depends=([^\x00]*)\x00")


def depends(ko: bytes) -> list[str]:
    """The module names a module file depends on (its .modinfo `depends=`); [] if none."""
    m = _DEPENDS.search(ko)
    if not m or not m.group(1):
        return []
    return [d.decode() for d in m.group(1).split(b",") if d]


def module_name(path: Path) -> str:
    """tcp_bbr for .../tcp_bbr.ko(.xz|.zst); '-' read as '_', as the kernel does."""
    name = path.name
    for suf in SUFFIXES[::-1]:
        if name.endswith(suf):
            return name[: -len(suf)].replace("-", "_")
    raise ValueError(f"{path}: not a kernel module file ({', '.join(SUFFIXES)})")


def module_bytes(path: Path) -> bytes:
    """A module file's contents, decompressed (busybox insmod loads plain .ko files only)."""
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".zst"):
        return subprocess.run(["zstd", "-dcq"], input=data, capture_output=True, check=True).stdout
    return data


def index(modules_dir: Path) -> dict[str, Path]:
    """{module name: path} of every module file under `modules_dir`."""
    return {module_name(p): p for suf in SUFFIXES for p in modules_dir.rglob("*" + suf)}


def load_order(wanted: list[str], modules: dict[str, Path], builtin: set[str]) -> list[Path]:
    """The module files to load for `wanted`, dependencies first, each once.

    Names in `builtin` (the kernel's modules.builtin) need no file. Raises ValueError naming
    a module that is neither a file nor built in.
    """
    order: list[Path] = []
    seen: set[str] = set()

    def visit(name: str, chain: tuple[str, ...]) -> None:
        name = name.replace("-", "_")
        if name in seen:
            return
        seen.add(name)
        path = modules.get(name)
        if path is None:
            if name in builtin:
                return
            via = f" (needed by {' -> '.join(chain)})" if chain else ""
            raise ValueError(f"kernel module {name} not found and not built in{via}")
        for dep in depends(module_bytes(path)):
            visit(dep, chain + (name,))
        order.append(path)

    for w in wanted:
        visit(w, ())
    return order


def builtin_names(modules_builtin: Path) -> set[str]:
    """Module names of a kernel's modules.builtin file (kernel/net/ipv4/tcp_cubic.ko -> tcp_cubic)."""
    if not modules_builtin.exists():
        return set()
    return {module_name(Path(line.strip())) for line in modules_builtin.read_text().splitlines() if line.strip()}
