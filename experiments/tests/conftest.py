"""Shared fixtures of the runner's tests; the policy and helpers live in netlab.py."""

from __future__ import annotations

import pytest

from netlab import require_binaries, require_netlab


@pytest.fixture
def needs_binaries():
    """Fail (not skip) when the Rust binaries are not built (make test builds them first)."""
    require_binaries()


@pytest.fixture
def needs_root():
    """Fail (not skip) unless this machine can run real flows: see ``require_netlab``."""
    require_netlab()
