"""The repository's prose stays user-facing: the top README fits on one page, and no README,
documentation page or code comment carries a date, an issue number or a reference to the
team's private notes (those belong in git history and the issue tracker; comments say why, not
when). Also checks the results-page generator (docs/gen_results.py) on small inputs."""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", "target", ".venv", "results", "__pycache__", "node_modules", "site", ".pytest_cache"}
README_MAX_LINES = 150

DATE = re.compile(r"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b")
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+")
# the team's private notes, named by parts so this file does not itself refer to them
NOTES_NAME = "FIELD" + "-NOTES"
PRIVATE = re.compile("|".join([NOTES_NAME, "ALGORITHMS" + r"\.md", r"\.\." + "/shared"]))
CODE_SUFFIXES = {".rs", ".py", ".c", ".h", ".toml", ".sh"}


def _gen_results():
    spec = importlib.util.spec_from_file_location("gen_results", ROOT / "docs" / "gen_results.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GEN = _gen_results()


def _files(suffixes: set[str] | None = None, names: set[str] = frozenset()) -> list[Path]:
    out = []
    for p in ROOT.rglob("*"):
        if any(part in SKIP_DIRS for part in p.relative_to(ROOT).parts):
            continue
        if p.is_file() and ((suffixes and p.suffix in suffixes) or p.name in names):
            out.append(p)
    return sorted(out)


def findings(text: str) -> list[str]:
    """Every date, issue number or private-notes reference in ``text``."""
    return [m.group(0) for rx in (DATE, ISSUE, PRIVATE) for m in rx.finditer(text)]


def python_comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of every ``#`` comment and every docstring of a Python source."""
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((node.body[0].lineno, doc))
    return out


C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
HASH_COMMENT = re.compile(r"(?:^|\s)#[^\n]*")


def c_like_comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of every ``//`` and ``/* */`` comment (Rust, C, BPF C)."""
    return [(source.count("\n", 0, m.start()) + 1, m.group(0)) for m in C_COMMENT.finditer(source)]


def hash_comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of every ``#`` comment (Makefile, TOML, shell)."""
    return [(source.count("\n", 0, m.start()) + 1, m.group(0)) for m in HASH_COMMENT.finditer(source)]


def comments_of(path: Path) -> list[tuple[int, str]]:
    source = path.read_text(errors="replace")
    if path.suffix == ".py":
        return python_comments(source)
    if path.suffix in {".rs", ".c", ".h"}:
        return c_like_comments(source)
    return hash_comments(source)


def test_the_scanners_find_what_they_look_for():
    py = '"""Module (see issue 7)."""\nx = "2026-11-23"  # measured 2026-11-23\ny = 1\n'
    assert [findings(t) for _, t in python_comments(py)] == [["2026-11-23"], ["issue 7"]]
    rs = f'let s = "2026-01-01";\n// per {NOTES_NAME}\n/* a\n * since 2025-02-03 */\n'
    assert [(n, findings(t)) for n, t in c_like_comments(rs)] == [(2, [NOTES_NAME]), (3, ["2025-02-03"])]
    assert [findings(t) for _, t in hash_comments("a = 1 # Issue 12\nb = $$(date +%Y%m%d)\n")] == [["Issue 12"]]
    assert findings("build 2026-13-40, issue tracker, tissue 5") == [], "no false positives on non-dates"


def test_top_readme_fits_on_one_page():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; at most {README_MAX_LINES} (move detail into docs/)"


def test_readmes_and_doc_pages_hold_no_dates_or_issue_numbers():
    pages = _files({".md"})
    assert ROOT / "docs" / "index.md" in pages and ROOT / "README.md" in pages
    bad = []
    for p in pages:
        text = p.read_text(errors="replace")
        if text.startswith(GEN.MARKER):
            continue  # a generated results page carries the date of its run, by design
        for n, line in enumerate(text.splitlines(), 1):
            if found := findings(line):
                bad.append(f"{p.relative_to(ROOT)}:{n}: {', '.join(found)}")
    assert not bad, "dates, issue numbers or private notes in docs:\n" + "\n".join(bad)


def test_code_comments_say_why_not_when():
    files = _files(CODE_SUFFIXES, {"Makefile", "run"})
    assert ROOT / "algorithms" / "src" / "suite.rs" in files and ROOT / "Makefile" in files
    bad = []
    for p in files:
        for n, text in comments_of(p):
            if found := findings(text):
                bad.append(f"{p.relative_to(ROOT)}:{n}: {', '.join(found)}")
    assert not bad, "dates, issue numbers or private notes in code comments:\n" + "\n".join(bad)


def test_results_pages_render_from_benchmark_output(tmp_path):
    fid = tmp_path / "fid"
    fid.mkdir()
    (fid / "fidelity.csv").write_text(
        "scenario,algorithm,metric,kernel_median,ccp_median,ratio_median,ratio_p25,ratio_p75,kernel_runs,ccp_runs,"
        "target,meets_target\n"
        "step0-12,reno,throughput_mbps,11.2,11.1,0.991,0.98,1.0,3,3,\"ratio in [0.95, 1.05]\",True\n"
        "step0-12,reno,retransmits,10,20,2.0,1.5,2.5,3,3,ratio <= 1.5,False\n"
        "step0-12,reno,normalized_area,0.1,0.1,1.0,0.9,1.1,3,3,|median ccp - median kernel| <= kernel's max - min,True\n")
    assert GEN.main(["fidelity", str(fid), "--commit", "abc1234", "--out-dir", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "fidelity.md").read_text()
    assert page.startswith(GEN.MARKER) and "commit `abc1234`" in page and "fidelity.csv" in page
    assert "Targets met: 2 of 3" in page
    assert "| step0-12 | reno | retransmits | 10 | 20 | 2 (1.5-2.5) | ratio <= 1.5 | **no** |" in page
    # a "|" inside a cell would split it into two columns
    assert r"| \|median ccp - median kernel\| <= kernel's max - min | yes |" in page

    con = tmp_path / "con"
    con.mkdir()
    (con / "leaderboard.csv").write_text("cca,power_score\nccp:tutorial,123.456\nkernel:cubic,99\n")
    (con / "contest.json").write_text('{"trace": "Verizon-LTE-short", "down": "/some/host/traces/V.down", "runs": 1, '
                                      '"ccas": ["x"]}')
    assert GEN.main(["contest", str(con), "--commit", "abc1234", "--out-dir", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "contest.md").read_text()
    assert "| ccp:tutorial | 123 |" in page and "trace Verizon-LTE-short" in page
    assert "down V.down" in page and "/some/host" not in page, "a machine's path on the page"


@pytest.mark.parametrize("page", ["fidelity", "contest", "datapath", "analysis-speed", "link-speed", "run-overhead"])
def test_results_generator_names_a_missing_input(tmp_path, capsys, page):
    assert GEN.main([page, str(tmp_path / "nothing"), "--out-dir", str(tmp_path / "out")]) == 2
    assert "nothing" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("page, printed", [
    ("link-speed", "| 1000 | link | 993.1 [749.4..994.9] | 0.993 | 938.8 [682.7..939.5] | 0.87 | 3 | PASS |"),
    ("run-overhead", "  ccp:cubic      median 0.93 s (min 0.90, max 1.01, IQR 0.05; 5 runs)")])
def test_printed_benchmark_pages_quote_the_output_whole(tmp_path, page, printed):
    out = tmp_path / f"bench-{page}.txt"
    out.write_text(f"header line\n{printed}\n")
    assert GEN.main([page, str(out), "--commit", "abc1234", "--out-dir", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / GEN.PAGES[page][1]).read_text()
    assert text.startswith(GEN.MARKER) and "commit `abc1234`" in text and f"bench-{page}.txt" in text
    assert f"```text\nheader line\n{printed}\n```" in text
    out.write_text("")
    assert GEN.main([page, str(out), "--out-dir", str(tmp_path / "out")]) == 2, "an empty output is no page"


def test_datapath_page_names_its_run_file_without_this_machines_path(tmp_path):
    """The page quotes ``dpbench --from``, which names the file it read: only the file's name may
    reach the page, never the directory it sat in on the machine that ran the benchmark."""
    src = ROOT / "experiments" / "tests" / "data" / "dpbench-mini.json"
    saved = tmp_path / "bench runs" / "bench-datapath.json"
    saved.parent.mkdir()
    saved.write_bytes(src.read_bytes())
    page = GEN.render_datapath(saved, "abc1234")
    assert "saved run bench-datapath.json: 4 measurements" in page
    assert str(tmp_path) not in page


def test_datapath_page_adds_each_further_run_under_its_name_and_refuses_a_missing_one(tmp_path, capsys):
    src = ROOT / "experiments" / "tests" / "data" / "dpbench-mini.json"
    main, cell = tmp_path / "bench-datapath-main.json", tmp_path / "bench-datapath-1free-x.json"
    main.write_bytes(src.read_bytes())
    cell.write_bytes(src.read_bytes())
    out = tmp_path / "out"
    assert GEN.main(["datapath", str(main), str(cell), "--out-dir", str(out), "--commit", "abc1234"]) == 0
    page = (out / "datapath.md").read_text()
    assert page.index("saved run bench-datapath-main.json") < page.index("## bench-datapath-1free-x.json")
    assert "saved run bench-datapath-1free-x.json: 4 measurements" in page
    assert GEN.main(["datapath", str(main), str(tmp_path / "gone.json"), "--out-dir", str(out)]) == 2
    assert "gone.json: no such file" in capsys.readouterr().err
