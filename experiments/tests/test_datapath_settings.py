"""The datapath's report window and prompt interval (``--report-wake-ms``, ``--report-prompt-us``) and the
run-validity policy (``--max-fallback-share``, ``--keep-invalid``) on every runner command.

No flow runs here: the run functions are replaced by recorders, so each test sees exactly the scenario
and policy a command hands to its runs; ccp-datapath's argv is checked as built.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from ccplab import cli, coexist, compare, contest, store, sweep
from ccplab import run as runmod
from ccplab import scenario as sc
from ccplab.binaries import REPO_ROOT
from ccplab.cca import parse_cca
from ccplab.control import InvalidRunError, ValidityPolicy
from ccplab.errors import CcplabError
from ccplab.flows import parse_flows
from ccplab.sweepfile import load_sweep

from netlab import synthetic_flow, write_sweep

WAKE, PROMPT = sc.DATAPATH_SETTINGS
ONE_SCENARIO = 'name = "x"\nccas = ["ccp:reno"]\n[scenario]\nduration_s = 3\n'


class Called(Exception):
    """Raised by a recorder in place of a run: the command got as far as running."""


def _scenario(**kw) -> sc.Scenario:
    return sc.Scenario("s", Path("t.trace"), 10, 40, 5, **kw)


# ------------------------------------------------------------------ the declaration and the datapath's argv


def test_declared_ranges_and_defaults_are_the_datapaths_own():
    """Each setting's range and default as ccp-datapath's clap declaration gives them (its source)."""
    source = (REPO_ROOT / "datapath" / "src" / "cli.rs").read_text()
    for s in sc.DATAPATH_SETTINGS:
        m = re.search(r"default_value_t = ([\d_]+), value_parser = clap::value_parser!\(u64\)\.range\(([\d_]+)"
                      r"\.\.=([\d_]+)\)\)\]\s*(?:pub\s+)?" + s.field + r": u64", source)
        assert m, f"{s.field} is not declared in datapath/src/cli.rs as expected"
        default, lo, hi = (int(x.replace("_", "")) for x in m.groups())
        assert (s.default, s.lo, s.hi) == (default, lo, hi), s.field
        assert s.flag == "--" + s.field.replace("_", "-")
    assert {s.field for s in sc.DATAPATH_SETTINGS} <= set(sc.Scenario.__dataclass_fields__)


def test_datapath_argv_carries_the_settings_only_when_set(needs_binaries, tmp_path):
    flows = parse_flows(["ccp:reno", "ccp:cubic@1"])
    ready = tmp_path / "ready.json"
    plain = runmod.datapath_argv(flows, ready, _scenario())
    assert plain == runmod.datapath_argv(flows, ready), "no settings: the argv of old"
    assert not {"--report-wake-ms", "--report-prompt-us"} & set(plain)
    wake = runmod.datapath_argv(flows, ready, _scenario(report_wake_ms=5))
    assert wake[wake.index("--report-wake-ms") + 1] == "5" and "--report-prompt-us" not in wake
    both = runmod.datapath_argv(flows, ready, _scenario(report_wake_ms=7, report_prompt_us=250))
    assert both[both.index("--report-wake-ms") + 1] == "7" and both[both.index("--report-prompt-us") + 1] == "250"
    assert both.count("--report-wake-ms") == 1 and both[-2:] == ["--ready-file", str(ready)]
    assert [a for a in both if a not in ("--report-wake-ms", "7", "--report-prompt-us", "250")] == plain


@pytest.mark.parametrize("field, value, flag", [
    ("report_wake_ms", 0, "--report-wake-ms"), ("report_wake_ms", 10_001, "--report-wake-ms"),
    ("report_wake_ms", True, "--report-wake-ms"), ("report_wake_ms", "5", "--report-wake-ms"),
    ("report_prompt_us", 0, "--report-prompt-us"), ("report_prompt_us", 10_000_001, "--report-prompt-us"),
])
def test_out_of_range_settings_fail_naming_the_flag(field, value, flag):
    with pytest.raises(CcplabError, match=f"^{flag} must be a whole number in") as err:
        _scenario(**{field: value}).validate()
    assert repr(value) in str(err.value)


def test_range_ends_are_accepted_and_metadata_records_the_settings():
    for s in sc.DATAPATH_SETTINGS:
        for v in (s.lo, s.hi):
            _scenario(**{s.field: v}).validate()
    assert _scenario(report_wake_ms=5).to_json() == {**_scenario().to_json(), "report_wake_ms": 5}
    assert _scenario().to_json()["report_prompt_us"] is None, "None: the datapath's default"


def test_help_gives_unit_range_default_and_what_it_does(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--report-wake-ms N" in text and "report window" in text and "ms, 1..10000 (default: the datapath's own, 20)" in text
    assert "--report-prompt-us N" in text and "us, 1..10000000 (default: the datapath's own, 1000)" in text


# ------------------------------------------------------------------ each command's parser threads them


@pytest.mark.parametrize("command", [
    ["run", "--cca", "ccp:reno", "--trace", "t", "--one-way-delay-ms", "1", "--queue-packets", "1",
     "--duration-s", "1", "--out", "o"],
    ["compare", "--cca", "ccp:reno", "--out", "o"],
    ["sweep", "f.toml"],
    ["contest"],
    ["coexist", "--cca", "ccp:reno", "--out", "o"],
])
def test_every_command_accepts_the_flags_and_refuses_out_of_range(command, capsys):
    args = cli.build_parser().parse_args(command + ["--report-wake-ms", "5", "--report-prompt-us", "300",
                                                    "--max-fallback-share", "0.2", "--keep-invalid"])
    assert cli._datapath(args) == {"report_wake_ms": 5, "report_prompt_us": 300}
    assert cli._policy(args) == ValidityPolicy(0.2, True)
    defaults = cli.build_parser().parse_args(command)
    assert cli._datapath(defaults) == {} and cli._policy(defaults) == ValidityPolicy()
    assert cli.main(command + ["--report-wake-ms", "0"]) == 2
    assert "--report-wake-ms must be >= 1, got 0" in capsys.readouterr().err
    assert cli.main(command + ["--report-prompt-us", "10000001"]) == 2
    assert "--report-prompt-us must be <= 10000000" in capsys.readouterr().err
    assert cli.main(command + ["--max-fallback-share", "1.5"]) == 2
    assert "--max-fallback-share must be <= 1" in capsys.readouterr().err


def test_run_hands_the_settings_and_policy_to_its_run(monkeypatch, tmp_path):
    got = {}

    def recorder(flows, scenario, out, run_index=1, policy=ValidityPolicy()):
        got.update(scenario=scenario, policy=policy)
        raise Called

    monkeypatch.setattr(runmod, "run_flows", recorder)
    trace = tmp_path / "t.trace"
    trace.write_text("1\n")
    with pytest.raises(Called):
        cli.main(["run", "--cca", "kernel:cubic", "--trace", str(trace), "--one-way-delay-ms", "1",
                  "--queue-packets", "10", "--duration-s", "2", "--out", str(tmp_path / "o"),
                  "--report-wake-ms", "4", "--report-prompt-us", "200", "--max-fallback-share", "0.3"])
    assert (got["scenario"].report_wake_ms, got["scenario"].report_prompt_us) == (4, 200)
    assert got["policy"] == ValidityPolicy(0.3, False)


def test_compare_builds_its_scenario_with_the_settings(monkeypatch, tmp_path, needs_binaries):
    got = {}

    def recorder(ccas, scenario, runs, out, analyze=True, policy=ValidityPolicy()):
        got.update(scenario=scenario, policy=policy)
        raise Called

    monkeypatch.setattr(compare, "preflight_flows", lambda flows: None)  # no root needed to plan
    monkeypatch.setattr(compare, "compare", recorder)
    with pytest.raises(Called):
        cli.main(["compare", "--cca", "kernel:cubic", "--step", "0:0:12", "--duration-s", "2",
                  "--out", str(tmp_path / "o"), "--report-prompt-us", "500", "--keep-invalid"])
    assert (got["scenario"].report_wake_ms, got["scenario"].report_prompt_us) == (None, 500)
    assert got["policy"] == ValidityPolicy(keep_invalid=True)
    with pytest.raises(CcplabError, match="--report-wake-ms must be"):
        compare.setup_comparison([parse_cca("kernel:cubic")], 1, tmp_path / "p", 1, 10, 2,
                                 steps=sc.parse_step_args(["0:0:12"]), report_wake_ms=20_000)
    assert not (tmp_path / "p").exists(), "refused before anything is created"


def test_coexist_hands_the_settings_and_policy_to_its_comparison(monkeypatch, tmp_path):
    got = {}

    def setup(entries, runs, out, owd, queue, duration, **kw):
        got["setup"] = kw
        return out, "the scenario"

    def run(entries, scenario, runs, out, analyze=True, policy=ValidityPolicy()):
        got.update(scenario=scenario, policy=policy)

    monkeypatch.setattr(compare, "setup_comparison", setup)
    monkeypatch.setattr(compare, "compare", run)
    monkeypatch.setattr(coexist, "analyze_coexist", lambda out: out / "report.html")
    assert cli.main(["coexist", "--cca", "kernel:cubic", "--out", str(tmp_path / "o"), "--runs", "1",
                     "--report-wake-ms", "9", "--max-fallback-share", "0.05", "--keep-invalid"]) == 0
    assert got["setup"]["report_wake_ms"] == 9 and got["setup"]["report_prompt_us"] is None
    assert got["scenario"] == "the scenario" and got["policy"] == ValidityPolicy(0.05, True)


def test_contest_runs_its_flows_with_the_settings_and_policy(monkeypatch, tmp_path):
    down = tmp_path / "t3.down"
    down.write_text("".join(f"{t}\n" for t in range(1, 3001)))
    down.with_suffix(".up").write_text(down.read_text())
    got = {}

    def recorder(flows, scenario, out, run_index=1, policy=ValidityPolicy()):
        got.update(flows=flows, scenario=scenario, policy=policy)
        raise Called

    monkeypatch.setattr(runmod, "run_flows", recorder)
    monkeypatch.setattr(runmod, "preflight", lambda cca: None)
    monkeypatch.setattr(contest, "check_trace", lambda path: {})
    with pytest.raises(Called):
        cli.main(["contest", "--trace", str(down), "--cca", "ccp:reno", "--out", str(tmp_path / "o"),
                  "--report-wake-ms", "3", "--report-prompt-us", "100", "--max-fallback-share", "0.5"])
    assert [str(f.cca) for f in got["flows"]] == ["ccp:reno"]
    assert (got["scenario"].report_wake_ms, got["scenario"].report_prompt_us) == (3, 100)
    assert got["scenario"].trace_once and got["policy"] == ValidityPolicy(0.5, False)
    recorded = json.loads((tmp_path / "o" / "contest.json").read_text())
    assert (recorded["report_wake_ms"], recorded["report_prompt_us"]) == (3, 100)
    # the same directory cannot resume under another report window
    with pytest.raises(CcplabError, match="report_wake_ms 3 there, 20 here"):
        contest.resume_setup(contest.make_setup(str(down), ["ccp:reno"], report_wake_ms=20, report_prompt_us=100),
                             tmp_path / "o", ccas_given=False)
    with pytest.raises(CcplabError, match="--report-prompt-us must be"):
        contest.make_setup(str(down), ["ccp:reno"], report_prompt_us=0)


# ------------------------------------------------------------------ sweeps: files, CLI, payload, validity


def test_sweep_file_keys_cross_name_and_reach_the_run(tmp_path):
    path = write_sweep(tmp_path, ONE_SCENARIO + "report_wake_ms = [5, 20]\nreport_prompt_us = 300\n")
    sw = load_sweep(path)
    assert [(s.report_wake_ms, s.report_prompt_us) for s in sw.scenarios] == [(5, 300), (20, 300)]
    assert [s.name.split("_d3")[1] for s in sw.scenarios] == ["_wake5_prompt300", "_wake20_prompt300"]
    assert "datapath --report-wake-ms 5, datapath --report-prompt-us 300" in sw.scenarios[0].describe()
    plain = load_sweep(write_sweep(tmp_path, ONE_SCENARIO, "plain.toml")).scenarios[0]
    assert (plain.report_wake_ms, plain.report_prompt_us) == (None, None) and "wake" not in plain.name
    # the command line's value fills in scenarios that do not give the key; a file's key wins
    cli_default = load_sweep(path, defaults={"report_wake_ms": 7, "report_prompt_us": 9})
    assert [(s.report_wake_ms, s.report_prompt_us) for s in cli_default.scenarios] == [(5, 300), (20, 300)]
    assert load_sweep(write_sweep(tmp_path, ONE_SCENARIO, "p2.toml"),
                      defaults={"report_wake_ms": 7}).scenarios[0].report_wake_ms == 7
    p = sweep.payload(sw, tmp_path / "sw", sw.plan()[0], "dest", ValidityPolicy(0.25, True))
    assert (p["report_wake_ms"], p["report_prompt_us"]) in {(5, 300), (20, 300)}
    assert sweep.payload_policy(p) == ValidityPolicy(0.25, True)
    assert sweep.payload_policy({}) == ValidityPolicy(), "a payload without a policy: the default"


@pytest.mark.parametrize("line, fragment", [
    ("report_wake_ms = 0", "report_wake_ms: --report-wake-ms must be a whole number in 1..10000 (ms), got 0"),
    ("report_wake_ms = 2.5", "report_wake_ms: --report-wake-ms must be a whole number"),
    ("report_prompt_us = [100, 20000000]", "report_prompt_us: --report-prompt-us must be a whole number in "
                                           "1..10000000 (us), got 20000000"),
    ("report_prompt_us = true", "report_prompt_us: --report-prompt-us must be"),
])
def test_bad_sweep_file_settings_name_file_key_and_flag(tmp_path, line, fragment):
    path = write_sweep(tmp_path, ONE_SCENARIO + line + "\n")
    with pytest.raises(CcplabError, match=re.escape(fragment)) as err:
        load_sweep(path)
    assert str(path) in str(err.value)


def test_sweep_command_threads_the_settings_and_policy(monkeypatch, tmp_path, capsys):
    got = {}

    def recorder(sw, out, **kw):
        got.update(sweep=sw, **kw)
        raise Called

    monkeypatch.setattr(sweep, "execute", recorder)
    path = write_sweep(tmp_path, ONE_SCENARIO)
    with pytest.raises(Called):
        cli.main(["sweep", str(path), "--no-dask", "--report-wake-ms", "6", "--max-fallback-share", "0.1",
                  "--keep-invalid"])
    assert [s.report_wake_ms for s in got["sweep"].scenarios] == [6]
    assert got["policy"] == ValidityPolicy(0.1, True)
    assert cli.main(["sweep", str(path), "--dry-run", "--report-prompt-us", "400"]) == 0
    assert "datapath --report-prompt-us 400" in capsys.readouterr().out


def _sweep_run(tmp_path, flow, policy=ValidityPolicy(), text=ONE_SCENARIO + "report_wake_ms = 5\n"):
    return sweep.execute(load_sweep(write_sweep(tmp_path, text)), tmp_path / "sw", use_dask=False, progress=False,
                         run_fn=functools.partial(sweep.run_task, flow=flow), policy=policy)


def test_a_sweep_run_sees_its_settings_and_policy(tmp_path, needs_binaries, monkeypatch):
    monkeypatch.setenv("CCPLAB_SCRATCH", str(tmp_path / "scratch"))
    seen = []

    def flow(p, scenario, run_dir):
        seen.append((scenario.report_wake_ms, scenario.report_prompt_us, sweep.payload_policy(p)))
        synthetic_flow(p, scenario, run_dir)

    summary = _sweep_run(tmp_path, flow, ValidityPolicy(0.02, False))
    assert summary.finished == 1 and seen == [(5, None, ValidityPolicy(0.02, False))]
    meta = json.loads(next((tmp_path / "sw" / "runs").rglob("metadata.json")).read_text())
    assert meta["scenario"]["report_wake_ms"] == 5


EVIDENCE = ("the kernel's cubic fallback drove 40.0% of the ccp flows' ACKs (command_acks=60 fallback_acks=40 "
            "in datapath.log), more than the 1.0% allowed (--max-fallback-share)")


def test_an_invalid_sweep_run_is_recorded_failed_with_the_evidence_at_once(tmp_path, needs_binaries, monkeypatch):
    monkeypatch.setenv("CCPLAB_SCRATCH", str(tmp_path / "scratch"))
    calls = []

    def invalid(p, scenario, run_dir):  # what run_flows raises without --keep-invalid
        calls.append(p["run_id"])
        raise InvalidRunError(f"{EVIDENCE}: the run is not a valid result of ccp:reno and was not saved")

    summary = _sweep_run(tmp_path, invalid)
    assert len(calls) == 1, "an invalid run is not retried"
    [(run_id, error)] = summary.failed
    assert error.startswith("invalid run: ") and "command_acks=60 fallback_acks=40" in error
    st = tmp_path / "sw" / "store"
    failed = store.read(st, "failed")
    assert list(failed["attempts"]) == [1] and "fallback_acks=40" in failed["error"][0]
    assert not (st / "runs").exists() and not (st / "steps").exists(), "no rows in the tables"


def test_a_kept_invalid_sweep_run_is_published_marked_but_left_out_of_the_tables(tmp_path, needs_binaries,
                                                                                   monkeypatch):
    monkeypatch.setenv("CCPLAB_SCRATCH", str(tmp_path / "scratch"))

    def kept(p, scenario, run_dir):  # what run_flows saves with --keep-invalid
        synthetic_flow(p, scenario, run_dir)
        meta = json.loads((run_dir / "metadata.json").read_text())
        meta.update(valid=False, control={"valid": False, "reason": EVIDENCE})
        (run_dir / "metadata.json").write_text(json.dumps(meta))

    summary = _sweep_run(tmp_path, kept, ValidityPolicy(keep_invalid=True))
    [(run_id, error)] = summary.failed
    assert EVIDENCE in error and f"kept, marked invalid: {tmp_path / 'sw' / 'runs'}/{run_id}" in error
    assert json.loads((tmp_path / "sw" / "runs" / run_id / "metadata.json").read_text())["valid"] is False
    st = tmp_path / "sw" / "store"
    assert not (st / "runs").exists() and len(store.read(st, "failed")) == 1


def test_a_real_sweep_flow_runs_under_the_payloads_policy(monkeypatch, tmp_path):
    from ccplab import cleanup

    got = {}

    class Clean:
        def host_state(self):
            return []

    def recorder(flows, scenario, out, run_index=1, policy=ValidityPolicy()):
        got.update(flows=flows, scenario=scenario, policy=policy, run_index=run_index)

    monkeypatch.setattr(cleanup, "find_leftovers", lambda *a: Clean())
    monkeypatch.setattr(runmod, "run_flows", recorder)
    p = {"cca": "ccp:reno", "repetition": 3, "max_fallback_share": 0.4, "keep_invalid": True}
    sweep.real_flow(p, _scenario(report_prompt_us=50), tmp_path / "run")
    assert got["policy"] == ValidityPolicy(0.4, True) and got["run_index"] == 3
    assert got["scenario"].report_prompt_us == 50 and [str(f.cca) for f in got["flows"]] == ["ccp:reno"]


def test_contest_doc_reproduces_the_datapath_settings():
    from ccplab.contest_doc import ContestResult

    setup = {"trace": "t", "duration_s": 3, "quickack": True, "ccas": ["ccp:reno"], "report_wake_ms": 5}
    res = ContestResult(Path("c"), setup, [])
    assert "--report-wake-ms 5" in res.command() and "--report-prompt-us" not in res.command()
    assert res.key != ContestResult(Path("d"), {**setup, "report_wake_ms": None}, []).key, \
        "boards under another report window are not the same board"
