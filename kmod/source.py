"""CCP_KERNEL_SRC: a ccp-kernel checkout, and which of its branches fits which kernel.

ccp-kernel (github.com/ccp-project/ccp-kernel) keeps one branch per kernel API: `main` is
written for Linux >= 6.10, whose `tcp_congestion_ops.cong_control` takes
`(struct sock *sk, u32 ack, int flag, const struct rate_sample *rs)`; `4.19-6.9-compat` for the
older `(struct sock *sk, const struct rate_sample *rs)`. Which one fits is decided here by
comparing the parameter count of `tcp_ccp_cong_control` in the source with that of the
`cong_control` member in the kernel's include/net/tcp.h, never by the branch's name.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: Files whose presence makes a directory a ccp-kernel tree (with its libccp submodule).
REQUIRED_FILES = ("tcp_ccp.c", "ccp_nl.c", "Makefile", "libccp/ccp.c", "libccp/ccp.h")


class SourceError(ValueError):
    """CCP_KERNEL_SRC is missing, not a ccp-kernel tree, or has no branch for a kernel."""


def check_tree(src: str | Path | None) -> Path:
    """The ccp-kernel checkout at `src` as an absolute path.

    Raises SourceError naming CCP_KERNEL_SRC when it is unset, not a directory, or lacks one
    of REQUIRED_FILES (e.g. the libccp submodule was not checked out).
    """
    if src is None or str(src).strip() == "":
        raise SourceError(
            "CCP_KERNEL_SRC is not set: give a checkout of github.com/ccp-project/ccp-kernel "
            "with its libccp submodule (make kmod-check CCP_KERNEL_SRC=DIR)"
        )
    path = Path(src).expanduser()
    if not path.is_dir():
        raise SourceError(f"CCP_KERNEL_SRC={src}: no such directory")
    missing = [f for f in REQUIRED_FILES if not (path / f).is_file()]
    if missing:
        hint = " (git submodule update --init)" if any(f.startswith("libccp/") for f in missing) else ""
        raise SourceError(f"CCP_KERNEL_SRC={src} is not a ccp-kernel tree: missing {', '.join(missing)}{hint}")
    return path.resolve()


def _param_count(pattern: str, text: str, missing: str) -> int:
    """Number of parameters in the C parameter list that `pattern`'s group 1 finds in `text`
    ("void" counts 0).

    Raises SourceError with `missing` when `pattern` does not match.
    """
    m = re.search(pattern, text)
    if not m:
        raise SourceError(missing)
    args = " ".join(m.group(1).split())
    if args in ("", "void"):
        return 0
    return args.count(",") + 1


def source_cong_control_params(tcp_ccp_c: str) -> int:
    """Parameter count of `tcp_ccp_cong_control`'s definition in tcp_ccp.c's text.

    Raises SourceError when the definition is not found.
    """
    return _param_count(r"\bvoid\s+tcp_ccp_cong_control\s*\(([^)]*)\)\s*\{", tcp_ccp_c,
                        "tcp_ccp.c has no definition of tcp_ccp_cong_control")


def headers_cong_control_params(tcp_h: str) -> int:
    """Parameter count of the `cong_control` member in a kernel's include/net/tcp.h text.

    Raises SourceError when the member is not found.
    """
    return _param_count(r"\(\s*\*\s*cong_control\s*\)\s*\(([^)]*)\)", tcp_h,
                        "include/net/tcp.h has no cong_control member")


@dataclass(frozen=True)
class Candidate:
    """A version of the ccp-kernel source: the work tree (ref None) or a git ref."""

    ref: str | None
    params: int

    @property
    def label(self) -> str:
        return self.ref or "work tree"


def _git(src: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(src), *args], check=True, capture_output=True, text=True).stdout


def candidates(src: Path) -> list[Candidate]:
    """The work tree's tcp_ccp.c, then every branch's (local first, then remote), with
    their cong_control parameter counts; branches without a parsable tcp_ccp.c are skipped."""
    out = [Candidate(None, source_cong_control_params((src / "tcp_ccp.c").read_text(errors="replace")))]
    if not (src / ".git").exists() or shutil.which("git") is None:
        return out
    refs = _git(src, "for-each-ref", "--format=%(refname:short)", "refs/heads", "refs/remotes").split()
    seen = set()
    for ref in refs:
        if ref.endswith("/HEAD") or ref in seen:
            continue
        seen.add(ref)
        try:
            text = _git(src, "show", f"{ref}:tcp_ccp.c")
            out.append(Candidate(ref, source_cong_control_params(text)))
        except (subprocess.CalledProcessError, SourceError):
            continue
    return out


def pick(cands: list[Candidate], kernel_params: int, kernel: str) -> Candidate:
    """The first candidate whose cong_control takes `kernel_params` parameters.

    Raises SourceError naming the kernel and what each candidate has.
    """
    for c in cands:
        if c.params == kernel_params:
            return c
    have = ", ".join(f"{c.label}: {c.params}" for c in cands)
    raise SourceError(
        f"no version of CCP_KERNEL_SRC fits kernel {kernel}: its cong_control takes {kernel_params} "
        f"parameters; tcp_ccp_cong_control takes {have} (ccp-kernel's main is for Linux >= 6.10, "
        f"4.19-6.9-compat for older kernels)"
    )


def export(src: Path, cand: Candidate, dest: Path) -> Path:
    """A copy of `src` at `cand` in `dest` (replaced), ready for kbuild: the work tree copied,
    or the ref's files (git archive) with the work tree's libccp. Returns `dest`.

    Raises SourceError when the ref's libccp submodule commit differs from the checked-out one.
    """
    if dest.exists():
        shutil.rmtree(dest)
    if cand.ref is None:
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".git", "*.o", "*.ko", "*.mod*", ".*.cmd"))
        return dest
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(src), "archive", cand.ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    want = _git(src, "ls-tree", cand.ref, "libccp").split()
    have = _git(src / "libccp", "rev-parse", "HEAD").strip() if (src / "libccp" / ".git").exists() else None
    if want and have and want[2] != have:
        raise SourceError(
            f"CCP_KERNEL_SRC: {cand.ref} wants libccp {want[2][:7]}, the checkout has {have[:7]} "
            f"(check out that libccp commit, or build from a checkout of {cand.ref})"
        )
    shutil.rmtree(dest / "libccp", ignore_errors=True)
    shutil.copytree(src / "libccp", dest / "libccp", ignore=shutil.ignore_patterns(".git", "*.o"))
    return dest
