"""CCA names: ``kernel:NAME`` (the kernel's own module) or ``ccp:NAME[:flag=value...]``
(a Portus algorithm, optionally with parameters).

A ``ccp:`` flow runs with the kernel congestion control ``ccp`` (our eBPF
struct_ops datapath), whose decisions come from the Portus algorithm NAME.
Parameters are the algorithm's own flags without ``--`` (``ccp:cubic:beta=0.8``,
``ccp:copa:delta=0.1:pacing-gain=1.5``); ``ccplab algorithms NAME`` lists them.
They are validated against the algorithm's binary, so one comparison can hold
several tunings of one algorithm, each labelled by its full name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import CcplabError
from . import registry

AVAILABLE_CC = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
DATAPATH_CA = "ccp"
_PARAM = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)=([^:=,\s]+)$")


@dataclass(frozen=True)
class Cca:
    """A parsed CCA: ``kind`` is "kernel" or "ccp", ``name`` the algorithm,
    ``params`` its flag settings as ((name, value), ...) in the given order."""

    kind: str
    name: str
    params: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return ":".join([self.kind, self.name, *(f"{k}={v}" for k, v in self.params)])

    @property
    def socket_cc(self) -> str:
        """The TCP_CONGESTION name the sender socket uses (iperf3 -C)."""
        return DATAPATH_CA if self.kind == "ccp" else self.name

    @property
    def slug(self) -> str:
        """A file-name-safe form, e.g. ``ccp-reno`` or ``ccp-cubic-beta-0.8``."""
        parts = [self.kind, self.name, *(f"{k}-{v}" for k, v in self.params)]
        return re.sub(r"[^A-Za-z0-9._-]", "_", "-".join(parts))

    @property
    def base(self) -> str:
        """``kind:name`` without parameters (the ``cca`` of the analysis contract)."""
        return f"{self.kind}:{self.name}"

    @property
    def param_dict(self) -> dict[str, str]:
        """The parameters as {flag name: value} (recorded as ``cca_params``)."""
        return dict(self.params)


def kernel_ccs() -> list[str]:
    """Congestion controls the kernel offers now (built-in or registered)."""
    try:
        return AVAILABLE_CC.read_text().split()
    except OSError:
        return []


def _parse_params(text: str, fields: list[str]) -> tuple[tuple[str, str], ...]:
    params: list[tuple[str, str]] = []
    for item in fields:
        m = _PARAM.match(item)
        if not m:
            raise CcplabError(f"bad CCA parameter {item!r} in {text!r}: expected NAME=VALUE, "
                              "e.g. ccp:cubic:beta=0.8")
        key = m.group(1).replace("_", "-")
        if any(key == k for k, _ in params):
            raise CcplabError(f"parameter {key!r} given twice in {text!r}")
        params.append((key, m.group(2)))
    return tuple(params)


def parse_cca(text: str) -> Cca:
    """Parse and check ``kernel:NAME`` or ``ccp:NAME[:flag=value...]``; CcplabError
    says what is wrong (unknown name, unknown parameter with the allowed ones, bad value)."""
    kind, sep, rest = text.partition(":")
    name, *fields = rest.split(":") if rest else [""]
    if not sep or not name or kind not in ("kernel", "ccp"):
        raise CcplabError(
            f"bad CCA {text!r}: expected kernel:NAME (e.g. kernel:cubic) or ccp:NAME[:flag=value...] "
            "(e.g. ccp:reno, ccp:cubic:beta=0.8)"
        )
    if kind == "kernel":
        if fields:
            raise CcplabError(f"kernel CCAs take no parameters here: {text!r}")
        offered = kernel_ccs()
        if name == DATAPATH_CA:
            raise CcplabError("kernel:ccp is the datapath itself; name a Portus algorithm as ccp:NAME")
        if offered and name not in offered:
            raise CcplabError(
                f"unknown kernel CCA {name!r}: this kernel offers {', '.join(offered)}"
            )
        return Cca(kind, name)
    params = _parse_params(text, fields)
    registry.lookup(name).check_params(dict(params))
    return Cca(kind, name, params)
