"""The project's one atomic file write, as part of the analysis's API (`transient.write_atomic`).

It lives in ``ccplab_util.atomic``, which the runner imports too without importing the analysis.
"""

from __future__ import annotations

from ccplab_util.atomic import write_atomic

__all__ = ["write_atomic"]
