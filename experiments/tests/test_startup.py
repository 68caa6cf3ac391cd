"""What a ``ccplab`` command imports before it does its work.

Every ``ccplab run`` is a fresh interpreter, and a comparison runs many: the
analysis stack (numpy, pandas, scipy, matplotlib, polars, pyarrow, dask)
costs over a second to import, so the CLI, the parser and the runner import
it only where an analysis or a plot is made (``transient`` loads its names on
first use). Checked in a fresh interpreter, since this test process has
imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numpy", "pandas", "scipy", "matplotlib", "polars", "pyarrow", "dask", "distributed", "jinja2", "ruptures")
"""Top-level packages of the analysis and the sweeps, none of which a run's start needs."""


def imported_after(code: str) -> set[str]:
    """The top-level packages of `HEAVY` that a fresh interpreter has imported after running ``code``."""
    probe = (f"import json, sys\n{code}\n"
             f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_probe_sees_an_import():
    assert imported_after("import numpy") == {"numpy"}


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["compare", "--help"], ["demo", "--help"],
                                  ["analyze", "--help"], ["sweep", "--help"]])
def test_parsing_a_command_line_imports_no_analysis(argv):
    code = ("from ccplab import cli\n"
            f"try:\n    cli.build_parser().parse_args({argv!r})\nexcept SystemExit:\n    pass")
    assert imported_after(code) == set()


def test_the_runner_imports_no_analysis():
    # what `ccplab run` loads to start, run and save a run (the link log of a short run is read
    # without numpy; `transient.timezero` decides by its size)
    code = "import ccplab.cli, ccplab.run, ccplab.control, ccplab.cleanup, ccplab.runbench, transient.timezero"
    assert imported_after(code) == set()
