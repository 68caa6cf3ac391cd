"""mkdocs hook: replaces each ``<!-- cli-help: PROGRAM ARG... -->`` line of a page with the
``--help`` text that PROGRAM prints now, so the command-line reference cannot drift from the code.

PROGRAM is ``ccplab`` (the runner, run as ``python -m ccplab.cli``) or one of the project's Rust
binaries, looked up in ``$CCPLAB_BIN_DIR`` or else ``target/release`` of the repository (``make
docs`` builds them first). A missing binary or a command that exits non-zero fails the build,
naming the command. ``$CCPLAB_DOCS_PYTHON`` picks the interpreter for ``ccplab`` (default: the one
running mkdocs).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- cli-help: (.+?) -->$", re.MULTILINE)
RUST_BINARIES = {"ccp-datapath", "ccp-algorithms", "ccplab-link", "ccplab-trace", "ccplab-logreduce"}


def _argv(words: list[str]) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, COLUMNS="100", NO_COLOR="1")
    prog, rest = words[0], words[1:]
    if prog == "ccplab":
        python = os.environ.get("CCPLAB_DOCS_PYTHON", sys.executable)
        path = os.pathsep.join([str(ROOT / "experiments"), str(ROOT), env.get("PYTHONPATH", "")])
        env["PYTHONPATH"] = path
        return [python, "-c", "import sys; from ccplab.cli import main; sys.exit(main())", *rest], env
    if prog in RUST_BINARIES:
        bin_dir = Path(os.environ.get("CCPLAB_BIN_DIR", ROOT / "target" / "release"))
        exe = bin_dir / prog
        if not exe.is_file():
            raise PluginError(f"cli-help: {exe} is missing; build it first (cargo build --release --workspace)")
        return [str(exe), *rest], env
    raise PluginError(f"cli-help: unknown program {prog!r} (ccplab or one of {sorted(RUST_BINARIES)})")


def _help(words: list[str]) -> str:
    argv, env = _argv(words)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PluginError(f"cli-help: {' '.join(words)}: {exc}") from exc
    if out.returncode != 0:
        raise PluginError(f"cli-help: {' '.join(words)} exited {out.returncode}: {out.stderr.strip()[:500]}")
    return out.stdout.rstrip()


# All of a page's ccplab commands run in one interpreter: importing the runner dominates.
_BATCH = """
import contextlib, io, json, sys
from ccplab.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    if code not in (0, None):
        sys.exit(f"ccplab {' '.join(argv)} exited {code}")
    out.append(buf.getvalue())
print(json.dumps(out))
"""


def _ccplab_helps(commands: list[list[str]]) -> dict[str, str]:
    argv, env = _argv(["ccplab"])
    argv = [argv[0], "-c", _BATCH, json.dumps([c[1:] for c in commands])]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PluginError(f"cli-help: ccplab: {exc}") from exc
    if out.returncode != 0:
        raise PluginError(f"cli-help: {out.stderr.strip()[-500:]}")
    return {" ".join(c): text.rstrip() for c, text in zip(commands, json.loads(out.stdout))}


def on_page_markdown(markdown: str, **_kwargs) -> str:
    commands = [shlex.split(m.group(1)) for m in MARKER.finditer(markdown)]
    helps = _ccplab_helps([c for c in commands if c[0] == "ccplab"]) if any(c[0] == "ccplab" for c in commands) else {}

    def replace(m: re.Match) -> str:
        words = shlex.split(m.group(1))
        text = helps[" ".join(words)] if words[0] == "ccplab" else _help(words)
        return f"```text\n$ {' '.join(words)}\n{text}\n```"

    return MARKER.sub(replace, markdown)
