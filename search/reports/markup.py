"""The report's building blocks: a :class:`Section`, and escaped HTML / Markdown pieces.

Every piece of user text goes through :func:`e` (HTML) or :func:`md_table` (Markdown).
A section with nothing to show is *left out* (:func:`left_out`): the page names it, and
why, in one line instead of drawing an empty heading.
"""

from __future__ import annotations

import dataclasses
import html
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from search.reports.plots import Drawn

__all__ = ["Section", "LeftOut", "left_out", "guard", "e", "fmt", "table", "md_table", "figure", "note", "kv"]


@dataclasses.dataclass(frozen=True)
class Section:
    """One section of the report, as HTML and as Markdown; ``omitted``: why it is left out ("" when shown).

    A builder leaves ``id`` empty: :func:`search.reports.report.build_sections` gives each section the name it is
    registered under, so an id is written once, in the registry."""

    title: str
    html: str
    md: str
    omitted: str = ""
    id: str = ""

    @property
    def shown(self) -> bool:
        return not self.omitted


def left_out(title: str, why: str) -> Section:
    return Section(title, "", "", omitted=why)


class LeftOut(Exception):
    """Raised inside a :func:`guard`-ed build: the section has nothing to show, and this is why."""


def guard(title: str, build: Callable[[], tuple[str, str]]) -> Section:
    """A section whose figures or numbers fail to build still renders, with the error as a note."""
    try:
        body, md = build()
    except LeftOut as why:
        return left_out(title, str(why))
    except Exception as exc:  # noqa: BLE001 - one broken figure must not cost the whole report
        text = f"this section could not be drawn: {type(exc).__name__}: {exc}"
        body, md = note(text), text
    return Section(title, body, md)


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.6g}"
    return str(value)


LONG_CELL = 40  # characters: a longer genome string wraps in a box of its own, after its '|' and '+'


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "") -> str:
    """An HTML table inside a box that scrolls sideways when the table is wider than its section."""
    head = "".join(f"<th>{_header(c)}</th>" for c in columns)
    thead = f"<thead><tr>{head}</tr></thead>" if any(columns) else ""
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    klass = f' class="{e(cls)}"' if cls else ""
    return f'<div class="wide"><table{klass}>{thead}<tbody>{body}</tbody></table></div>'


def _header(name: Any) -> str:
    """A column name that may break after each '_' (``examples_to_target``): a header is never what makes a
    table wider than its section."""
    return "<wbr>".join(e(part) + "_" for part in str(name).split("_"))[:-1] if "_" in str(name) else e(name)


def _cell(value: Any) -> str:
    """A cell's escaped text; a long architecture genome string (blocks or cell nodes joined by '|') may break
    after each '|' and '+' (other long text breaks at its spaces)."""
    text = fmt(value)
    if len(text) <= LONG_CELL or "|" not in text:
        return e(text)
    breakable = "".join(e(ch) + ("<wbr>" if ch in "|+" else "") for ch in text)
    return f'<span class="long">{breakable}</span>'


def md_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return fmt(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def figure(drawn: Drawn | str, alt: str) -> str:
    """An embedded figure; a :class:`Drawn` figure's legend is repeated as its caption (readable as text)."""
    if isinstance(drawn, str):
        return f'<figure><img src="{drawn}" alt="{e(alt)}"></figure>'
    caption = f'<figcaption class="legend">legend: {e("; ".join(drawn.legend))}</figcaption>' if drawn.legend else ""
    return f'<figure><img src="{drawn.uri}" alt="{e(alt)}">{caption}</figure>'


def note(text: str) -> str:
    return f'<p class="note">{e(text)}</p>'


def kv(pairs: Sequence[tuple[str, Any]]) -> tuple[str, str]:
    return table(("", ""), pairs, "kv"), md_table(("key", "value"), pairs)
