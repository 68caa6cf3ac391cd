"""CCA names: ``kernel:NAME`` (the kernel's own module), ``ccp:NAME[:flag=value...]``
(a Portus algorithm of the suite, optionally with parameters) or
``portus:NAME=COMMAND`` (any Portus algorithm binary: an external algorithm).

A ``ccp:`` flow runs with the kernel congestion control ``ccp`` (our eBPF
struct_ops datapath), whose decisions come from the Portus algorithm NAME.
Parameters are the algorithm's own flags without ``--`` (``ccp:cubic:beta=0.8``,
``ccp:copa:delta=0.1:pacing-gain=1.5``); ``ccplab algorithms NAME`` lists them.
They are validated against the algorithm's binary, so one comparison can hold
several tunings of one algorithm, each labelled by its full name.

A ``portus:`` flow runs through the same datapath, but under an algorithm the
suite does not know: COMMAND (split as a shell would, ``shlex``) is the
binary and its own arguments, e.g. ``portus:upstream-reno=/opt/gca/bin/reno
--per_ack``; leading ``VAR=VALUE`` words set its environment
(``portus:r=RUST_LOG=debug ./reno``). Its label is ``portus:NAME`` (NAME:
letters, digits, ``._-``, not a name of the suite); the command is recorded in
metadata.json (``external``). A Portus binary binds ``/tmp/ccp/portus``
unless its command gives ``--ipc-name X`` (then ``/tmp/ccp/X``); it must talk
over unix sockets (Portus's ``--ipc unix``, the default of most).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from .errors import CcplabError
from . import registry

AVAILABLE_CC = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
DATAPATH_CA = "ccp"
_PARAM = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)=([^:=,\s]+)$")
_EXTERNAL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")  # ccp-datapath's rule names, 63 bytes at most
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PORTUS_DIR = Path("/tmp/ccp")
DEFAULT_IPC_NAME = "portus"
PORTUS_SOCKET = PORTUS_DIR / DEFAULT_IPC_NAME
"""The suite's Portus socket (an algorithm binds it unless told another ``--ipc-name``)."""
EXTERNAL_KIND = "portus"
DATAPATH_KINDS = ("ccp", EXTERNAL_KIND)


@dataclass(frozen=True)
class Cca:
    """A parsed CCA: ``kind`` is "kernel", "ccp" or "portus" (external), ``name`` the algorithm,
    ``params`` its flag settings as ((name, value), ...) in the given order; for an external
    algorithm ``command`` is its argv (program resolved to an absolute path) and ``env`` the
    ((variable, value), ...) its command line set."""

    kind: str
    name: str
    params: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return ":".join([self.kind, self.name, *(f"{k}={v}" for k, v in self.params)])

    @property
    def spec(self) -> str:
        """The text that parses back to this CCA (with an external algorithm's command; ``str`` is its label)."""
        if self.kind != EXTERNAL_KIND:
            return str(self)
        return f"{self}={shlex.join([*(f'{k}={v}' for k, v in self.env), *self.command])}"

    @property
    def uses_datapath(self) -> bool:
        """True for the flows ccp-datapath controls through a Portus algorithm (``ccp:`` and ``portus:``)."""
        return self.kind in DATAPATH_KINDS

    @property
    def external(self) -> bool:
        """True for an external Portus binary (``portus:NAME=COMMAND``)."""
        return self.kind == EXTERNAL_KIND

    @property
    def ipc_name(self) -> str:
        """The name an external algorithm binds under /tmp/ccp: its ``--ipc-name`` or Portus's default."""
        args = self.command[1:]
        for k, a in enumerate(args):
            if a == "--ipc-name" and k + 1 < len(args):
                return args[k + 1]
            if a.startswith("--ipc-name="):
                return a.split("=", 1)[1]
        return DEFAULT_IPC_NAME

    @property
    def portus_socket(self) -> Path:
        """Where the algorithm's Portus socket appears (its start readiness)."""
        return PORTUS_DIR / (self.ipc_name if self.external else DEFAULT_IPC_NAME)

    def external_json(self) -> dict | None:
        """metadata.json's record of an external algorithm (None for the others)."""
        if not self.external:
            return None
        return {"kind": "external", "command": list(self.command), "env": dict(self.env),
                "portus_socket": str(self.portus_socket)}

    @property
    def socket_cc(self) -> str:
        """The TCP_CONGESTION name the sender socket uses (iperf3 -C)."""
        return DATAPATH_CA if self.uses_datapath else self.name

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


def external_label(text: str) -> str:
    """The label of a CCA text without parsing it against the machine: ``portus:NAME`` for
    ``portus:NAME=COMMAND``, the text itself for any other."""
    if text.startswith(EXTERNAL_KIND + ":") and "=" in text:
        return text.split("=", 1)[0]
    return text


def parse_external(text: str) -> Cca:
    """Parse and check ``portus:NAME=COMMAND`` (see the module docstring); CcplabError, one line, when
    NAME is missing, malformed or a name of the suite, or COMMAND is missing or its program is not an
    executable file (a relative path is taken from the current directory, a bare name from PATH)."""
    rest = text[len(EXTERNAL_KIND) + 1:]
    name, eq, command = rest.partition("=")
    usage = "expected portus:NAME=COMMAND [ARGS...], e.g. 'portus:upstream-reno=/opt/gca/bin/reno --per_ack'"
    if not eq or not command.strip():
        raise CcplabError(f"bad CCA {text!r}: no COMMAND: {usage}")
    if not _EXTERNAL_NAME.match(name):
        raise CcplabError(f"bad CCA {text!r}: NAME {name!r} must be 1-63 letters, digits, '.', '_' or '-' "
                          f"(starting with a letter or digit): {usage}")
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise CcplabError(f"bad CCA {text!r}: COMMAND cannot be split ({exc})") from None
    env: list[tuple[str, str]] = []
    while words and _ENV_WORD.match(words[0]):
        key, _, value = words.pop(0).partition("=")
        env.append((key, value))
    if not words:
        raise CcplabError(f"bad CCA {text!r}: COMMAND sets variables but names no program: {usage}")
    program = words[0]
    path = Path(program) if "/" in program else (Path(found) if (found := shutil.which(program)) else None)
    if path is None:
        raise CcplabError(f"portus:{name}: program {program!r} not found on PATH (give its path)")
    if not path.is_file():
        raise CcplabError(f"portus:{name}: program {program!r} not found ({path.absolute()} is not a file)")
    if not os.access(path, os.X_OK):
        raise CcplabError(f"portus:{name}: program {path.absolute()} is not executable")
    try:
        suite = registry.load_registry()
    except CcplabError:
        suite = {}  # without the suite built no name can clash (its ccp: flows are refused on their own)
    if name in suite:
        raise CcplabError(f"portus:{name}: {name!r} is an algorithm of the suite (ccp:{name}); give the external "
                          "algorithm another NAME")
    return Cca(EXTERNAL_KIND, name, (), (str(path.absolute()), *words[1:]), tuple(env))


def parse_cca(text: str) -> Cca:
    """Parse and check ``kernel:NAME``, ``ccp:NAME[:flag=value...]`` or ``portus:NAME=COMMAND``;
    CcplabError says what is wrong (unknown name, unknown parameter with the allowed ones, bad value,
    an external algorithm's missing or unusable command: `parse_external`)."""
    if text.startswith(EXTERNAL_KIND + ":"):
        return parse_external(text)
    kind, sep, rest = text.partition(":")
    name, *fields = rest.split(":") if rest else [""]
    if not sep or not name or kind not in ("kernel", "ccp"):
        raise CcplabError(
            f"bad CCA {text!r}: expected kernel:NAME (e.g. kernel:cubic), ccp:NAME[:flag=value...] "
            "(e.g. ccp:reno, ccp:cubic:beta=0.8) or portus:NAME=COMMAND (an external Portus binary)"
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


def split_cca_list(items: list[str]) -> list[str]:
    """``--cca`` values as CCA texts: each value is one CCA or several comma-separated; an external
    algorithm's value (``portus:NAME=COMMAND``, whose command may hold commas) is always one."""
    return [t for item in items
            for t in ([item.strip()] if item.strip().startswith(EXTERNAL_KIND + ":") else
                      [n.strip() for n in item.split(",")]) if t]


def rebase_external(text: str, base: Path) -> str:
    """``portus:NAME=COMMAND[suffix]`` with a relative program path (one holding '/') taken from ``base``
    instead of the current directory; any other text as it is. Syntax only (nothing is checked)."""
    if not text.startswith(EXTERNAL_KIND + ":") or "=" not in text:
        return text
    from .flows import split_external_flow

    cca, suffix = split_external_flow(text)
    head, _, command = cca.partition("=")
    try:
        words = shlex.split(command)
    except ValueError:
        return text  # parse_external words the problem
    k = 0
    while k < len(words) and _ENV_WORD.match(words[k]):
        k += 1
    if k == len(words) or "/" not in words[k] or Path(words[k]).is_absolute():
        return text
    words[k] = str(Path(base) / words[k])
    return f"{head}={shlex.join(words)}{suffix}"
