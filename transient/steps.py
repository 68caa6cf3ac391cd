"""The project's one capacity-step syntax: ``AT_S:FROM_MBPS:TO_MBPS``.

A step is a change of the bottleneck's nominal capacity at ``AT_S`` seconds
(on the trace / log clock) from ``FROM_MBPS`` to ``TO_MBPS`` Mbit/s, e.g.
``0:0:12`` (the link opens at 12 Mbit/s at t = 0) or ``10:12:4``.  Traces,
the runner, ``ccplab analyze`` and ``python -m transient`` all parse steps
here, so one spelling and one set of error messages hold everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .errors import StepFormatError

SYNTAX = "AT_S:FROM_MBPS:TO_MBPS"
"""How a step is written on command lines (e.g. ``0:0:12``)."""


@dataclass(frozen=True, order=True)
class Step:
    """A capacity change at ``at_s`` s from ``from_mbps`` to ``to_mbps`` Mbit/s (nominal).

    All three are finite and >= 0 (checked on construction).  Steps sort by
    time.  ``str(step)`` gives the command-line form back, e.g. ``"0:0:12"``.
    """

    at_s: float
    from_mbps: float
    to_mbps: float

    def __post_init__(self) -> None:
        for name in ("at_s", "from_mbps", "to_mbps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise StepFormatError(f"bad step: {name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise StepFormatError(f"bad step: {name} must be a finite number >= 0, got {value!r}")
            object.__setattr__(self, name, float(value))

    @classmethod
    def parse(cls, text: str) -> "Step":
        """Parse ``AT_S:FROM_MBPS:TO_MBPS`` (s, Mbit/s, Mbit/s), e.g. ``"10:12:4"``.

        Raises:
            StepFormatError (a ValueError): not three ``:``-separated numbers,
                or a value that is negative, NaN or infinite; the message
                quotes the text and shows the expected form.
        """
        if not isinstance(text, str):
            raise StepFormatError(f"bad step {text!r}: expected a string {SYNTAX}, e.g. 0:0:12")
        parts = text.strip().split(":")
        if len(parts) != 3:
            raise StepFormatError(
                f"bad step {text!r}: expected {SYNTAX} (3 fields separated by ':'), e.g. 0:0:12 or 10:12:4")
        values = []
        for label, part in zip(("AT_S", "FROM_MBPS", "TO_MBPS"), parts):
            try:
                v = float(part)
            except ValueError:
                raise StepFormatError(f"bad step {text!r}: {label} {part!r} is not a number (expected {SYNTAX})") from None
            if not math.isfinite(v) or v < 0:
                raise StepFormatError(f"bad step {text!r}: {label} must be a finite number >= 0, got {part!r}")
            values.append(v)
        return cls(*values)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "step") -> "Step":
        """Build from ``{"at_s", "from_mbps", "to_mbps"}`` (metadata.json, trace sidecars).

        Raises:
            StepFormatError: not a mapping, a key missing or a bad value; the
                message starts with ``where``.
        """
        if not isinstance(data, Mapping):
            raise StepFormatError(f"{where}: expected an object with at_s, from_mbps, to_mbps, got {data!r}")
        missing = [k for k in ("at_s", "from_mbps", "to_mbps") if k not in data]
        if missing:
            raise StepFormatError(f"{where}: missing {', '.join(missing)}")
        for name in ("at_s", "from_mbps", "to_mbps"):
            value = data[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise StepFormatError(f"{where}.{name}: expected a finite number >= 0, got {value!r}")
        return cls(data["at_s"], data["from_mbps"], data["to_mbps"])

    def as_dict(self) -> dict[str, float]:
        """``{"at_s", "from_mbps", "to_mbps"}`` for JSON."""
        return {"at_s": self.at_s, "from_mbps": self.from_mbps, "to_mbps": self.to_mbps}

    @property
    def kind(self) -> str:
        """"up" when the capacity rises, "down" when it falls, "flat" when unchanged."""
        if self.to_mbps > self.from_mbps:
            return "up"
        if self.to_mbps < self.from_mbps:
            return "down"
        return "flat"

    def __str__(self) -> str:
        return f"{self.at_s:g}:{self.from_mbps:g}:{self.to_mbps:g}"


def parse_steps(texts: Iterable[str]) -> list[Step]:
    """Parse several ``AT_S:FROM_MBPS:TO_MBPS`` strings; returns them sorted by time.

    Raises:
        StepFormatError: a malformed step (see `Step.parse`), or two steps
            at the same time.
    """
    steps = sorted(Step.parse(t) for t in texts)
    for a, b in zip(steps, steps[1:]):
        if a.at_s == b.at_s:
            raise StepFormatError(f"bad steps: two steps at {a.at_s:g} s ({a} and {b})")
    return steps
