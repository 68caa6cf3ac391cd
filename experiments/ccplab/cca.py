"""CCA names: ``kernel:NAME`` (the kernel's own module) or ``ccp:NAME`` (a Portus algorithm).

A ``ccp:`` flow runs with the kernel congestion control ``ccp`` (our eBPF
struct_ops datapath), whose decisions come from the Portus algorithm NAME.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import CcplabError
from . import registry

AVAILABLE_CC = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
DATAPATH_CA = "ccp"


@dataclass(frozen=True)
class Cca:
    """A parsed CCA: ``kind`` is "kernel" or "ccp", ``name`` the algorithm."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def socket_cc(self) -> str:
        """The TCP_CONGESTION name the sender socket uses (iperf3 -C)."""
        return DATAPATH_CA if self.kind == "ccp" else self.name

    @property
    def slug(self) -> str:
        """A file-name-safe form, e.g. ``ccp-reno``."""
        return f"{self.kind}-{self.name}"


def kernel_ccs() -> list[str]:
    """Congestion controls the kernel offers now (built-in or registered)."""
    try:
        return AVAILABLE_CC.read_text().split()
    except OSError:
        return []


def parse_cca(text: str) -> Cca:
    """Parse and check ``kernel:NAME`` or ``ccp:NAME``; CcplabError says what is wrong."""
    kind, sep, name = text.partition(":")
    if not sep or not name or kind not in ("kernel", "ccp"):
        raise CcplabError(
            f"bad CCA {text!r}: expected kernel:NAME (e.g. kernel:cubic) or ccp:NAME (e.g. ccp:reno)"
        )
    if kind == "kernel":
        offered = kernel_ccs()
        if name == DATAPATH_CA:
            raise CcplabError("kernel:ccp is the datapath itself; name a Portus algorithm as ccp:NAME")
        if offered and name not in offered:
            raise CcplabError(
                f"unknown kernel CCA {name!r}: this kernel offers {', '.join(offered)}"
            )
    else:
        registry.lookup(name)
    return Cca(kind, name)
