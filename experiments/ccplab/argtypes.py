"""Numeric command-line values with bounds, checked as they are parsed.

Each factory returns an ``argparse`` type: the value is converted and checked
at once, so bad input (0, negative, 2^63, NaN, inf, 1e9 seconds) is refused
with one line naming the option before anything is started or written. The
bounds are what a run on one host can use (a day of flow, 10 s of delay),
not limits of the emulation's model.
"""

from __future__ import annotations

import argparse

from transient.cli_args import number, whole  # the one definition of bounded numbers on a command line

__all__ = ["number", "whole", "Parser", "UsageError", "MAX_DURATION_S", "MAX_DELAY_MS", "MAX_QUEUE_PACKETS",
           "MAX_RATE_MBPS"]

MAX_DURATION_S = 86_400
"""Longest flow a run may ask for, s (one day)."""

MAX_DELAY_MS = 10_000
"""Longest one-way delay, ms (ccplab-link's --ack-delay shares it)."""

MAX_QUEUE_PACKETS = 10_000_000
"""Largest droptail queue, packets (the contest's 'unbounded' queue is 1,000,000)."""

MAX_RATE_MBPS = 100_000.0
"""Largest capacity or noise, Mbit/s."""


class UsageError(Exception):
    """A command line argparse refused; the message is the one line to print."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (`UsageError`) instead of usage + exit.

    ``argument --runs: must be >= 1, got 0`` becomes ``--runs must be >= 1, got 0``
    (the option named first); other argparse messages are kept as they are.
    """

    def error(self, message: str):
        name, sep, rest = message.partition(": ")
        if message.startswith("argument ") and sep and rest.startswith("must be"):
            message = f"{name[len('argument '):].split('/')[0]} {rest}"
        raise UsageError(message)
