"""Helpers shared by the runner (``ccplab``) and the analysis (``transient``), with no dependency on
either: ``atomic`` (``write_atomic``, the project's one atomic file write for Python code)."""
