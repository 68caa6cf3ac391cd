"""The guest's plan: case lines, their checks, the default table."""

import pytest

from kmod import plan


def test_case_lines_round_trip_and_bad_cases_name_the_field():
    c = plan.Case("ccp-fixed-window", "ccp", "fixed-window", 10, "daemon-first", ("--window=37",))
    assert c.line() == "ccp-fixed-window ccp daemon-first 10 fixed-window --window=37"
    assert plan.parse_line(c.line()) == c
    k = plan.Case("kernel-bbr", "kernel", "bbr", 10)
    assert k.line() == "kernel-bbr kernel - 10 bbr" and k.label == "kernel:bbr"
    assert plan.parse_line(k.line()) == k
    with pytest.raises(ValueError, match="kind 'x'"):
        plan.Case("a", "x", "reno", 10)
    with pytest.raises(ValueError, match="kernel CCA 'vegas'"):
        plan.Case("a", "kernel", "vegas", 10)
    with pytest.raises(ValueError, match="order 'later'"):
        plan.Case("a", "ccp", "reno", 10, "later")
    with pytest.raises(ValueError, match="seconds must be in 1..600"):
        plan.Case("a", "ccp", "reno", 0)
    with pytest.raises(ValueError, match="cannot carry"):
        plan.Case("a", "ccp", "reno", 5, flags=("--x=$(reboot)",))
    with pytest.raises(ValueError, match="expected ID KIND ORDER SECONDS CCA"):
        plan.parse_line("a ccp -")
    with pytest.raises(ValueError, match="SECONDS must be a whole number"):
        plan.parse_line("a ccp module-first ten reno")


def test_ccp_specs_become_daemon_flags():
    assert plan.parse_ccp_spec("cubic") == ("cubic", ())
    assert plan.parse_ccp_spec("fixed-window:window=37:min_cwnd_pkts=2") == \
        ("fixed-window", ("--window=37", "--min-cwnd-pkts=2"))
    with pytest.raises(ValueError, match="'window' is not FLAG=VALUE"):
        plan.parse_ccp_spec("fixed-window:window")
    with pytest.raises(ValueError, match="expected NAME"):
        plan.parse_ccp_spec(":a=b")


def test_default_table_has_every_comparison_once_and_repeats_get_their_own_ids():
    cases = plan.table_cases(plan.DEFAULT_KERNEL, plan.DEFAULT_CCP, 10, "module-first", "reno")
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)) == 5 + 10 + 1
    assert ids[:5] == ["kernel-reno", "kernel-cubic", "kernel-bbr", "kernel-reno-2", "kernel-cubic-2"]
    assert cases[3].flags == ("--fq-rate=1G",) and cases[3].label == "kernel:reno --fq-rate=1G"
    assert cases[-2].id == "ccp-reno-2" and cases[-2].label == "ccp:reno --socket-pacing=kernel"
    assert ids[-1] == "dies-reno" and cases[-1].kind == "ccp-dies"
    assert cases[-1].label == "ccp:reno (daemon killed)"
    two = plan.table_cases([], ["fixed-window:window=10", "fixed-window:window=37"], 5, "daemon-first", None)
    assert [c.id for c in two] == ["ccp-fixed-window", "ccp-fixed-window-2"]
    assert all(c.order == "daemon-first" for c in two)


def test_link_env_refuses_values_the_guest_would_run_as_shell():
    assert "RATE=20mbit\nDELAY=20ms\nLIMIT=100\nPORT=5201\n" == plan.Link().env()
    with pytest.raises(ValueError, match="--rate"):
        plan.Link(rate="20mbit; reboot").env()


def test_rounds_repeat_the_table_round_after_round_with_their_own_ids():
    base = plan.table_cases(["reno"], ["cubic"], 10, "module-first", None)
    got = plan.rounds(base, 3)
    assert [c.id for c in got] == ["kernel-reno", "ccp-cubic", "kernel-reno.r2", "ccp-cubic.r2",
                                   "kernel-reno.r3", "ccp-cubic.r3"]
    assert got[3].label == "ccp:cubic" and plan.parse_line(got[3].line()) == got[3]
    assert plan.rounds(base, 1) == base
