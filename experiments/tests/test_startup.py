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
import re
import shutil
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


def _make_dry_run(target: str) -> str:
    """The commands ``make -n TARGET`` would run in the repository (nothing is run: the recursive
    make is itself a dry run)."""
    from ccplab.binaries import REPO_ROOT

    if shutil.which("make") is None:
        pytest.fail("make is not installed (apt-get install make)", pytrace=False)
    done = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_demo_builds_exactly_the_binaries_the_demo_runs_and_no_test_tool():
    from ccplab import scenario as sc
    from ccplab.registry import SUITE_BINARY

    kinds = {n.split(":")[0] for n in sc.DEMO_CCAS}
    assert kinds <= {"kernel", "ccp"}, f"a demo CCA of another kind: {sc.DEMO_CCAS}"
    needed = {"ccplab-link", "ccplab-trace"}  # the link; the step trace and its check
    if "ccp" in kinds:
        needed |= {"ccp-datapath", SUITE_BINARY}  # every suite algorithm runs from the suite's binary
    commands = _make_dry_run("demo").splitlines()
    builds = [c for c in commands if c.startswith("cargo build")]
    assert len(builds) == 1 and "--workspace" not in builds[0], builds
    assert set(re.findall(r"--bin (\S+)", builds[0])) == needed
    assert not any("chromium" in c or "'.[test]'" in c for c in commands), "a test-only tool in make demo"
    assert any(c.endswith("bin/ccplab demo") for c in commands)
