"""Exceptions raised by the `transient` package.

Every error names the input it is about (a file, a run directory, a key) and
what is wrong with it, so a failed analysis can be fixed without a debugger.
"""

from __future__ import annotations


class TransientError(Exception):
    """Base class for all errors raised by `transient`."""


class LogFormatError(TransientError):
    """A mahimahi mm-link log is malformed.

    Attributes:
        path: the log file (str), or "<text>" when parsing a string.
        line: 1-based line number of the offending line, or None when the
            problem is not tied to one line (e.g. a log with no events).
        reason: what is wrong, in words.
    """

    def __init__(self, path: str, line: int | None, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {reason}")


class AnalysisError(TransientError):
    """A run directory, results directory or its metadata cannot be analysed.

    The message starts with the offending path.
    """


class StepFormatError(TransientError, ValueError):
    """A capacity step is malformed (see `transient.steps`); the message quotes it."""
