"""The Debian kernels the check boots: their packages, unpacked into a cache, and what QEMU
and kbuild need from them.

Nothing is installed on the host: the packages are fetched with `apt-get download` and
unpacked with `dpkg-deb -x` under the cache directory (target/kmod/ by default).
"""

from __future__ import annotations

import lzma
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Kernel:
    """One Debian kernel: its release (`uname -r`) and the packages it comes in."""

    release: str  # e.g. "6.12.117+deb12-amd64"
    common: str  # the architecture-independent headers package's release part
    kbuild: str  # the linux-kbuild package name

    @property
    def packages(self) -> list[str]:
        return [
            f"linux-image-{self.release}",
            f"linux-headers-{self.release}",
            f"linux-headers-{self.common}-common",
            self.kbuild,
        ]

    @property
    def short(self) -> str:
        """Major.minor, e.g. "6.12"."""
        return ".".join(self.release.split(".")[:2])

    @property
    def version(self) -> tuple[int, int]:
        major, minor = self.short.split(".")
        return int(major), int(minor)


#: The kernels `make kmod-check` boots: bookworm's default and its newest backported series.
KERNELS = {
    "6.1": Kernel("6.1.0-56-amd64", "6.1.0-56", "linux-kbuild-6.1"),
    "6.12": Kernel("6.12.117+deb12-amd64", "6.12.117+deb12", "linux-kbuild-6.12.117+deb12"),
}


def select(names: str) -> list[Kernel]:
    """Kernels from a comma-separated list of KERNELS keys ("6.1,6.12").

    Raises ValueError naming the unknown entry and the known ones.
    """
    out = []
    for n in [x.strip() for x in names.split(",") if x.strip()]:
        if n not in KERNELS:
            raise ValueError(f"--kernels: unknown kernel {n!r}; known: {', '.join(KERNELS)}")
        out.append(KERNELS[n])
    if not out:
        raise ValueError("--kernels: empty list")
    return out


@dataclass(frozen=True)
class Unpacked:
    """A kernel's unpacked files."""

    kernel: Kernel
    root: Path  # the tree dpkg-deb unpacked the packages into

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.kernel.release}"

    @property
    def modules(self) -> Path:
        return self.root / "lib" / "modules" / self.kernel.release

    @property
    def headers(self) -> Path:
        return self.root / "usr" / "src" / f"linux-headers-{self.kernel.release}"

    @property
    def common_headers(self) -> Path:
        return self.root / "usr" / "src" / f"linux-headers-{self.kernel.common}-common"

    @property
    def vmlinux(self) -> Path:
        return self.root / f"vmlinux-{self.kernel.release}"


def download(kernel: Kernel, debs: Path) -> list[Path]:
    """The kernel's .deb files in `debs`, fetched with `apt-get download` when missing.

    Raises RuntimeError with apt's message when a package cannot be fetched.
    """
    debs.mkdir(parents=True, exist_ok=True)
    # A .deb is named PACKAGE_VERSION_ARCH.deb ('+' is literal in a glob pattern).
    missing = [p for p in kernel.packages if not list(debs.glob(f"{p}_*.deb"))]
    if missing:
        r = subprocess.run(["apt-get", "download", *missing], cwd=debs, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"apt-get download {' '.join(missing)} failed: {r.stderr.strip()}")
    return [sorted(debs.glob(f"{p}_*.deb"))[-1] for p in kernel.packages]


def unpack(kernel: Kernel, debs: list[Path], root: Path) -> Unpacked:
    """The packages unpacked into `root` (kept when already complete), the headers' Makefile
    pointed at the unpacked common headers, and the uncompressed vmlinux extracted."""
    root = root.resolve()
    u = Unpacked(kernel, root)
    stamp = root / ".unpacked"
    if not stamp.exists():
        root.mkdir(parents=True, exist_ok=True)
        for d in debs:
            subprocess.run(["dpkg-deb", "-x", str(d), str(root)], check=True)
        stamp.write_text("\n".join(d.name for d in debs) + "\n")
    # Every time: the cache may have moved since it was unpacked.
    fix_headers_makefile(u.headers / "Makefile", u.common_headers)
    if not u.vmlinux.exists():
        u.vmlinux.write_bytes(extract_vmlinux(u.vmlinuz.read_bytes()))
    return u


def fix_headers_makefile(makefile: Path, common: Path) -> None:
    """Point the arch headers' Makefile (`include /usr/src/linux-headers-X-common/Makefile`)
    at the unpacked common headers.

    Raises ValueError when the Makefile has no such include line.
    """
    text = makefile.read_text()
    new, n = re.subn(r"^include\s+\S*/linux-headers-[^/\s]+-common/Makefile\s*$",
                     f"include {common}/Makefile", text, flags=re.M)
    if n != 1:
        raise ValueError(f"{makefile}: expected one 'include .../linux-headers-*-common/Makefile' line, found {n}")
    makefile.write_text(new)


#: Compressed-stream magics in a bzImage (as Linux's scripts/extract-vmlinux looks for).
_MAGICS = {"xz": b"\xfd7zXZ\x00", "zstd": b"\x28\xb5\x2f\xfd"}


def extract_vmlinux(vmlinuz: bytes) -> bytes:
    """The uncompressed ELF vmlinux inside a bzImage (xz or zstd payload).

    QEMU boots it with -kernel through its PVH entry, skipping the decompressor.
    Raises ValueError when no payload decompresses to an ELF file.
    """
    for kind, magic in _MAGICS.items():
        start = vmlinuz.find(magic)
        while start >= 0:
            data = _decompress(kind, vmlinuz[start:])
            if data[:4] == b"\x7fELF":
                return data
            start = vmlinuz.find(magic, start + 1)
    raise ValueError("no xz or zstd payload in the kernel image decompresses to an ELF vmlinux")


def _decompress(kind: str, data: bytes) -> bytes:
    if kind == "xz":
        try:
            return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data)
        except lzma.LZMAError:
            return b""
    # zstd: one frame, trailing bytes ignored (zstd exits non-zero on them but writes the frame).
    r = subprocess.run(["zstd", "-dcq"], input=data, capture_output=True)
    return r.stdout
