"""The end-of-run summary as a terminal shows it: a table that fits :data:`WIDTH` columns, wrapped prose, and
the closing lines that say where the report is and what to run next.

The table leaves out columns that are empty in every row (GPU columns on a CPU run), names parameters
without their ``params.`` prefix, shows numbers to 4 significant digits and cuts long text (a genome) with
an ellipsis; columns that do not fit beside each other follow in another block, each block led by the
trial number, so no line is wider than :data:`WIDTH`.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["WIDTH", "fit_table", "wrap", "closing_lines"]

WIDTH = 100  # columns: a terminal's width the summary fits
MAX_CELL = 32  # characters of one cell; longer text ends in an ellipsis
_GAP = "  "
_KEY = "number"


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def _text(value: Any) -> str:
    if _empty(value):
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    text = " ".join(str(value).split())
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def _columns(frame: pd.DataFrame) -> dict[str, list[str]]:
    """Each shown column's cells as text, by its shown name; columns empty in every row left out."""
    shown: dict[str, list[str]] = {}
    for column in frame.columns:
        if column == "reason":
            continue
        values = list(frame[column])
        if all(_empty(v) for v in values):
            continue
        name = column.removeprefix("params.")
        shown[name if name not in shown else column] = [_text(v) for v in values]
    return shown


def _block(names: Sequence[str], cells: dict[str, list[str]], rows: int) -> list[str]:
    widths = {n: max(len(n), *(len(c) for c in cells[n])) for n in names}
    numeric = {n: all(_is_number(c) for c in cells[n]) for n in names}

    def line(parts: Sequence[str]) -> str:
        return _GAP.join(p.rjust(widths[n]) if numeric[n] else p.ljust(widths[n]) for n, p in zip(names, parts))

    return [line(names).rstrip()] + [line([cells[n][i] for n in names]).rstrip() for i in range(rows)]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text == ""
    return True


def fit_table(frame: pd.DataFrame, width: int = WIDTH) -> str:
    """``frame`` (one row per trial) as text no wider than ``width``; "(none)" without rows."""
    if frame.empty:
        return "(none)"
    cells = _columns(frame)
    rows = len(frame)
    key = [_KEY] if _KEY in cells else []
    blocks: list[list[str]] = [list(key)]
    for name in cells:
        if name in key:
            continue
        trial = [*blocks[-1], name]
        widths = [max(len(n), *(len(c) for c in cells[n])) for n in trial]
        if sum(widths) + len(_GAP) * (len(trial) - 1) > width and len(blocks[-1]) > len(key):
            blocks.append([*key, name])
        else:
            blocks[-1] = trial
    text = "\n\n".join("\n".join(_block(names, cells, rows)) for names in blocks)
    cut = any(c.endswith("…") for column in cells.values() for c in column)
    return text + ("\n(… : a value cut short; summary.csv holds it whole)" if cut else "")


def wrap(text: str, width: int = WIDTH) -> str:
    """``text`` wrapped to ``width`` columns, paragraph by paragraph (its line breaks kept)."""
    return "\n".join(textwrap.fill(line, width) if line.strip() else "" for line in text.splitlines())


def closing_lines(folder: str, best: int | None, which: str = "the best trial") -> str:
    """Where the report will be and the commands to run next (``best``: the trial to reproduce, ``which`` it is)."""
    lines = [f"report: hypersweep report {folder}   (writes {folder}/report/index.html)"]
    if best is not None:
        lines.append(f"next:   hypersweep reproduce {folder} {best}   (re-run {which} alone)")
    lines.append(f"        hypersweep status {folder}   (the trials by state, the best, what is running)")
    return "\n".join(lines)
