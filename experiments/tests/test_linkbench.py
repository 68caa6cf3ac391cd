"""The link benchmark's pure parts: its arguments, the CPU window, the variant's binary directory and the
table with its target verdicts (no root needed)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import pytest

from ccplab import linkbench
from ccplab.errors import CcplabError
from ccplab.linkbench import KERNEL, Sample, Variant


def test_rates_parse_and_refuse_non_positive_or_text():
    assert linkbench.parse_rates("12,100, 1000") == [12.0, 100.0, 1000.0]
    for bad in ("", "0", "12,-1", "fast"):
        with pytest.raises(argparse.ArgumentTypeError):
            linkbench.parse_rates(bad)


def test_a_variant_is_a_label_and_an_executable_command(tmp_path):
    binary = tmp_path / "link"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    v = linkbench.parse_variant(f"two={binary} --workers 2")
    assert v == Variant("two", (str(binary.resolve()), "--workers", "2"))
    for bad in (f"={binary}", "two=", f"{binary}", f"kernel={binary}", f"x={tmp_path / 'missing'}"):
        with pytest.raises(argparse.ArgumentTypeError):
            linkbench.parse_variant(bad)


def test_cpu_cores_counts_cpu_over_wall_after_the_skip():
    # 1 s of CPU per 2 s of wall after the first 2 s (which were busier)
    samples = [(0.0, 0.0), (1.0, 1.0), (2.0, 2.0), (4.0, 3.0), (6.0, 4.0)]
    assert linkbench.cpu_cores(samples, skip_s=2.0) == pytest.approx(0.5)
    assert linkbench.cpu_cores(samples[:3], skip_s=2.0) is None, "one sample in the window"
    assert linkbench.cpu_cores([], skip_s=2.0) is None


def test_the_variant_directory_runs_its_command_and_keeps_the_other_binaries(tmp_path, monkeypatch):
    default = tmp_path / "release"
    default.mkdir()
    for name in ("ccplab-link", "ccplab-trace"):
        (default / name).write_text("#!/bin/sh\necho default\n")
        (default / name).chmod(0o755)
    echo_args = tmp_path / "echo-args"
    echo_args.write_text('#!/bin/sh\necho "$@"\n')
    echo_args.chmod(0o755)
    monkeypatch.setenv("CCPLAB_BIN_DIR", str(default))
    where = linkbench.variant_bin_dir(Variant("v", (str(echo_args), "--workers", "2")), tmp_path / "bin")
    out = subprocess.run([where / "ccplab-link", "--uplink-trace", "a b"], capture_output=True, text=True)
    assert out.stdout.strip() == "--uplink-trace a b --workers 2", "the runner's arguments, then the variant's"
    assert (where / "ccplab-trace").resolve() == (default / "ccplab-trace").resolve()
    assert os.access(where / "ccplab-link", os.X_OK)


def test_the_table_gives_median_spread_ratio_and_verdicts():
    samples = [Sample("link", 100, a, a * 0.9, 0.3, k) for k, a in enumerate((96.0, 94.0, 97.0))]
    samples += [Sample("link", 1000, a, a * 0.9, 0.9, k) for k, a in enumerate((900.0, 940.0, 930.0))]
    samples += [Sample("link", 2000, a, a * 0.9, 1.1, k) for k, a in enumerate((1200.0, 1300.0, 1250.0))]
    samples += [Sample(KERNEL, 1000, a, a * 0.9, None, k) for k, a in enumerate((990.0, 985.0, 992.0))]
    rows = {(line.split("|")[1].strip(), line.split("|")[2].strip()): line
            for line in linkbench.results_table(samples, ["link"]).splitlines()[2:]}
    assert "96.0 [94.0..97.0] | 0.960 | 86.4 [84.6..87.3] |" in rows[("100", "link")]
    assert rows[("100", "link")].endswith("| PASS |")
    assert "| 0.930 |" in rows[("1000", "link")] and rows[("1000", "link")].endswith("| MISS |")
    assert rows[("2000", "link")].endswith("| - |"), "no target above 1000 Mbit/s"
    assert "| - | 3 | PASS |" in rows[("1000", KERNEL)], "no link CPU for the kernel path"
    assert ("100", KERNEL) not in rows


def test_help_names_the_lock_and_the_variants():
    text = linkbench.build_parser().format_help()
    assert "/tmp/ccplab-netlab.lock" in text and "--variant" in text and "--rates" in text


def test_the_kernel_shaper_holds_a_tick_of_the_rate_and_the_queue_in_bytes():
    args = linkbench.tbf_args(1000)
    assert args[:3] == ["tbf", "rate", "1000mbit"]
    assert int(args[args.index("burst") + 1]) == 500_000, "4 ms at 1 Gbit/s"
    assert int(linkbench.tbf_args(12)[4]) == 65536, "never under 64 KiB"
    assert args[args.index("limit") + 1] == str(linkbench.QUEUE_PACKETS * 1514)


def test_the_link_achieved_rate_counts_departures_after_slow_start(tmp_path):
    """One 1504-byte departure per ms for 6 s, twice as many in the first 2 s (slow start's burst is
    left out): 1504 * 8 bits per ms = 12.032 Mbit/s from 2 s after the flow's first packet to its end."""
    lines = ["# base timestamp: 0"]
    for t in range(6000):
        lines.append(f"{t} + 1504")
        lines += [f"{t} - 1504 20"] * (2 if t < 2000 else 1)
    (tmp_path / "uplink.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "metadata.json").write_text(json.dumps({"flows": [{"flow_start_s": 0.0, "flow_end_s": 6.0}]}))
    assert linkbench.link_delivered_mbps(tmp_path) == pytest.approx(12.032)
    assert linkbench.link_delivered_mbps(tmp_path, skip_s=0) == pytest.approx(12.032 * 8 / 6)
    with pytest.raises(CcplabError, match="too short"):
        linkbench.link_delivered_mbps(tmp_path, skip_s=5.5)
