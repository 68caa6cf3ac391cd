"""The guest's root file system: an initramfs (a "newc" cpio archive, uncompressed).

Format: Linux Documentation/driver-api/early-userspace/buffer-format.rst; each entry is a
110-byte ASCII header ("070701", 13 eight-digit hex fields), the NUL-terminated name, the data,
each padded to 4 bytes; the archive ends with the entry "TRAILER!!!".

Contents: busybox (static) as /bin/busybox with its applets installed by /init, the host's
programs the guest runs (ip, ss, tc, ethtool, iperf3, ccp-algorithms) with the shared libraries
`ldd` lists, kernel modules in load order, the module under test and the run plan.
"""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

TRAILER = "TRAILER!!!"


@dataclass
class Entry:
    """One archive member: a directory, a regular file (data) or a symlink (target)."""

    name: str  # without a leading '/'
    mode: int
    data: bytes = b""


def _pad(n: int) -> bytes:
    return b"\0" * ((4 - n % 4) % 4)


def newc(entries: list[Entry]) -> bytes:
    """The entries as a newc cpio archive, with the trailer. Inode numbers count from 1."""
    out = bytearray()
    for ino, e in enumerate([*entries, Entry(TRAILER, 0)], start=1):
        name = e.name.encode() + b"\0"
        # ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor,
        # namesize, check (0: no checksum in "070701" archives)
        fields = [0 if e.name == TRAILER else ino, e.mode, 0, 0, 1, 0, len(e.data), 0, 0, 0, 0, len(name), 0]
        hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
        out += hdr + name
        out += _pad(len(hdr) + len(name))
        out += e.data + _pad(len(e.data))
    return bytes(out)


def read_newc(archive: bytes) -> dict[str, Entry]:
    """The members of a newc archive by name (for checks); raises ValueError on a bad header."""
    out: dict[str, Entry] = {}
    off = 0
    while True:
        hdr = archive[off:off + 110]
        if len(hdr) < 110 or hdr[:6] != b"070701":
            raise ValueError(f"bad cpio header at offset {off}")
        f = [int(hdr[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = f[1], f[6], f[11]
        name = archive[off + 110:off + 110 + namesize - 1].decode()
        off += 110 + namesize
        off += (4 - off % 4) % 4
        data = archive[off:off + size]
        off += size
        off += (4 - off % 4) % 4
        if name == TRAILER:
            return out
        out[name] = Entry(name, mode, data)


@dataclass
class Tree:
    """An initramfs being assembled; directories are added for every member's parents."""

    entries: dict[str, Entry] = field(default_factory=dict)

    def _dirs(self, name: str) -> None:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self.entries:
                self.entries[d] = Entry(d, stat.S_IFDIR | 0o755)

    def add_dir(self, name: str) -> None:
        name = name.strip("/")
        self._dirs(name + "/x")

    def add_bytes(self, name: str, data: bytes, mode: int = 0o644) -> None:
        name = name.strip("/")
        self._dirs(name)
        self.entries[name] = Entry(name, stat.S_IFREG | mode, data)

    def add_file(self, name: str, src: Path, mode: int | None = None) -> None:
        """`src`'s contents (symlinks followed) as `name`, with `src`'s permission bits unless given."""
        self.add_bytes(name, src.read_bytes(), mode if mode is not None else stat.S_IMODE(src.stat().st_mode))

    def add_symlink(self, name: str, target: str) -> None:
        name = name.strip("/")
        self._dirs(name)
        self.entries[name] = Entry(name, stat.S_IFLNK | 0o777, target.encode())

    def add_program(self, name: str, src: Path) -> None:
        """An executable and every shared library `ldd` lists for it, at their host paths."""
        self.add_file(name, src, 0o755)
        for lib in shared_libraries(src):
            if str(lib).strip("/") not in self.entries:
                self.add_file(str(lib), lib, 0o755)

    def archive(self) -> bytes:
        return newc([self.entries[k] for k in sorted(self.entries)])


_LDD_PATH = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")


def parse_ldd(text: str) -> list[Path]:
    """The library paths in `ldd` output (the loader included; vdso and 'not found' left out).

    Raises ValueError naming a library ldd could not find.
    """
    out = []
    for line in text.splitlines():
        if "not found" in line:
            raise ValueError(f"a shared library is missing: {line.strip()}")
        m = _LDD_PATH.search(line)
        if m:
            out.append(Path(m.group(1)))
    return out


def shared_libraries(program: Path) -> list[Path]:
    """The shared libraries of `program` ([] for a static one)."""
    r = subprocess.run(["ldd", str(program)], capture_output=True, text=True)
    if r.returncode != 0:  # "not a dynamic executable"
        return []
    return parse_ldd(r.stdout)


def which(cmd: str) -> Path:
    """The host path of `cmd`; raises FileNotFoundError naming it."""
    p = shutil.which(cmd) or next((c for c in (f"/usr/sbin/{cmd}", f"/sbin/{cmd}") if Path(c).exists()), None)
    if p is None:
        raise FileNotFoundError(f"{cmd} is not installed on the host (the guest needs it)")
    return Path(p)
