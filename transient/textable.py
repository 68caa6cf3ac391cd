"""A table of rows printed as pandas' ``DataFrame.to_string(index=False)`` prints it, without pandas.

The command line prints a log's step table; importing pandas for that alone takes longer than
analysing a big log's cached reduction.  `format_rows` covers the columns such a table has -- text,
whole numbers (a missing one ``<NA>``, as pandas' Int64), booleans, floats (NaN; ``precision``
decimals, the zeros every value of the column ends with dropped, as pandas does) -- and returns None
for anything else (a float column pandas would print in scientific notation, mixed kinds), for which
the caller asks pandas.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Sequence

def _is_bool(v: Any) -> bool:
    return isinstance(v, bool) or type(v).__name__ == "bool_"  # numpy's too (not imported here)


def _is_missing(v: Any) -> bool:
    return v is None or type(v).__name__ in ("_Missing", "NAType")


def _column(values: list[Any], precision: int) -> tuple[list[str], bool] | None:
    """The cells of one column and whether pandas counts it numeric (its header then gets a leading
    space); None when pandas would print it otherwise than this covers."""
    present = [v for v in values if not _is_missing(v)]
    if all(isinstance(v, str) for v in present):
        return ["NaN" if _is_missing(v) else v for v in values], False
    if present and all(_is_bool(v) for v in present):
        if len(present) < len(values):
            return None  # pandas makes it an object column
        return [str(bool(v)) for v in values], True
    if all(isinstance(v, Integral) and not _is_bool(v) for v in present):
        return ["<NA>" if _is_missing(v) else str(int(v)) for v in values], True
    if not all(isinstance(v, Real) and not _is_bool(v) for v in present):
        return None
    if any(_is_missing(v) for v in values):
        return None  # None among floats: pandas' object column
    floats = [float(v) for v in values]
    finite = [abs(v) for v in floats if math.isfinite(v)]
    if any(v >= 1e6 or 0 < v < 10.0**-precision for v in finite) or any(math.isinf(v) for v in floats):
        return None  # scientific notation, inf: left to pandas
    text = [f"{v:.{precision}f}" for v in floats]
    shown = [t for t, v in zip(text, floats) if math.isfinite(v)]
    cut = 0  # the trailing zeros every finite value has, one decimal kept
    while shown and all(len(t) - cut - 1 > t.index(".") + 1 and t[len(t) - cut - 1] == "0" for t in shown):
        cut += 1
    return ["NaN" if not math.isfinite(v) else (t[: len(t) - cut] if cut else t) for t, v in zip(text, floats)], True


def format_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str], precision: int = 3) -> str | None:
    """``rows`` (dicts) as the text of ``DataFrame(rows)[columns].to_string(index=False)`` with
    ``display.precision`` = ``precision``, or None where that is not covered (see the module docstring).
    Columns right-aligned, one space apart; no rows: None."""
    if not rows:
        return None
    out_cols = []
    for name in columns:
        col = _column([row.get(name) for row in rows], precision)
        if col is None:
            return None
        cells, numeric = col
        header = (" " + name) if numeric else name
        width = max(len(header), *(len(c) for c in cells))
        out_cols.append([header.rjust(width)] + [c.rjust(width) for c in cells])
    return "\n".join(" ".join(col[i] for col in out_cols) for i in range(len(rows) + 1))
