"""Tables of the CLI (``runs list``, ``runs show``, ``approvals list``) that never cut an id.

A run id, a step's key, an approval's action or digest prefix is what a person copies into
the next command: cut to "…" or folded over three lines it cannot be copied. So:

- in a terminal, the id columns are as wide as their longest value and never wrap; the
  other columns fold onto more lines;
- when even that does not fit the terminal, and whenever the output is not a terminal (a
  pipe, a file, ``| grep``), the table is plain text: a title, a header and one line per
  row, columns aligned by two spaces, nothing cut and no box characters (``--json`` is the
  form for scripts).

Cells arrive escaped for rich markup (:func:`.common.term`); plain output prints them
through the same console with ``soft_wrap`` so the markup escapes still hold and the line
is never wrapped or cropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

COLUMN_MIN_CHARS = 8
"""Narrowest a folding column may get in a terminal before the table goes plain."""

_GAP = "  "  # between columns of a plain table


@dataclass(frozen=True)
class Column:
    """One column: its header, and whether it holds an id that must never be cut."""

    header: str
    whole: bool = False
    justify: Literal["left", "right"] = "left"


def console() -> Any:
    """A console that prints text as given (no ``:emoji:`` codes, no guessed
    highlighting) and, when the output is not a terminal, never wraps a line: a pipe
    gets whole lines, ids in one piece."""
    from rich.console import Console

    terminal = Console().is_terminal  # rich's own answer: FORCE_COLOR, TTY_COMPATIBLE...
    return Console(emoji=False, highlight=False, soft_wrap=not terminal)


def print_table(
    console: Any, columns: Sequence[Column], rows: Sequence[Sequence[str]], title: str = ""
) -> None:
    """Print ``rows`` (markup-escaped cells, one per column) under ``title``: a rich table
    in a terminal wide enough to show every id whole, plain aligned text otherwise."""
    widths = _widths(columns, rows)
    if console.is_terminal and _fits(columns, widths, console.width):
        console.print(_rich_table(columns, rows, widths, title))
        return
    if title:
        console.print(title, soft_wrap=True)
    if not rows:
        return  # the title says there is nothing: no header over nothing
    console.print(_plain_line([c.header for c in columns], widths, columns), soft_wrap=True)
    for row in rows:
        console.print(_plain_line(row, widths, columns), soft_wrap=True)


def _widths(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[int]:
    """The printed width of each column's widest cell (header included)."""
    out = [_cell_len(c.header) for c in columns]
    for row in rows:
        for i, cell in enumerate(row):
            out[i] = max(out[i], _cell_len(cell))
    return out


def _fits(columns: Sequence[Column], widths: Sequence[int], width: int) -> bool:
    """Whether a boxed table with every id column whole and every other column at least
    :data:`COLUMN_MIN_CHARS` wide fits ``width`` (each column costs its padding and a
    border: three characters, and one more closes the box)."""
    need = sum(
        w if c.whole else min(w, COLUMN_MIN_CHARS) for c, w in zip(columns, widths, strict=True)
    )
    return need + 3 * len(columns) + 1 <= width


def _rich_table(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], widths: Sequence[int], title: str
) -> Any:
    from rich.table import Table

    table = Table(title=title or None)
    for column, w in zip(columns, widths, strict=True):
        if column.whole:
            table.add_column(column.header, no_wrap=True, min_width=w, justify=column.justify)
        else:
            table.add_column(column.header, overflow="fold", justify=column.justify)
    for row in rows:
        table.add_row(*row)
    return table


def _plain_line(cells: Sequence[str], widths: Sequence[int], columns: Sequence[Column]) -> str:
    parts = []
    for cell, w, column in zip(cells, widths, columns, strict=True):
        pad = " " * (w - _cell_len(cell))
        parts.append(pad + cell if column.justify == "right" else cell + pad)
    return _GAP.join(parts).rstrip()


def _cell_len(cell: str) -> int:
    """How many terminal cells ``cell`` (markup-escaped text) takes once printed."""
    from rich.text import Text

    return Text.from_markup(cell).cell_len
