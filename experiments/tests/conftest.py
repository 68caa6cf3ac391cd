"""Shared fixtures: built binaries and a way to run the ccplab CLI in-process."""

from __future__ import annotations

import os

import pytest

from ccplab.binaries import bin_dir


def _built(*names: str) -> bool:
    return all((bin_dir() / n).is_file() for n in names)


@pytest.fixture
def needs_binaries():
    """Skip with a reason when the Rust binaries are not built (make test builds them first)."""
    names = ("ccplab-trace", "ccplab-link", "ccp-datapath", "ccp-reno", "ccp-cubic")
    if not _built(*names):
        pytest.skip(f"binaries not built in {bin_dir()}: run `make build`")


@pytest.fixture
def needs_root(needs_binaries):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, BPF struct_ops)")
