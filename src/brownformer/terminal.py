"""What a deciding CLI prints on stdout: one short, aligned verdict table (or the JSON, or nothing).

Every subcommand that decides something (`stats trajectory`, `stats attention`, `pretrained`) hands its rows
to `emit`; the log file keeps the details. A row is one decided thing (a claim, a file); its cells are plain
strings already formatted by the caller, so that the numbers on the terminal are the ones in the JSON.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import IO, Any, Sequence

# The columns every verdict table has, in order; a caller may leave a cell empty ("").
COLUMNS = ("item", "verdict", "estimate [95% CI]", "margin", "size / power", "reason")


@dataclass(frozen=True)
class VerdictRow:
    """One decided thing: what it is, the verdict, and the numbers that decided it (already formatted)."""

    item: str
    verdict: str
    estimate: str = ""
    margin: str = ""
    size_power: str = ""
    reason: str = ""

    def cells(self) -> tuple[str, ...]:
        return (self.item, self.verdict, self.estimate, self.margin, self.size_power, self.reason)


@dataclass(frozen=True)
class VerdictTable:
    """A titled table of verdict rows, with optional notes printed under it (e.g. "not calibrated")."""

    title: str
    rows: Sequence[VerdictRow]
    notes: Sequence[str] = field(default_factory=tuple)


def format_table(table: VerdictTable, *, max_reason: int = 90) -> str:
    """The table as aligned plain text; long reasons are cut at `max_reason` characters (the JSON has them whole)."""
    rows = [tuple(c if i < 5 else _clip(c, max_reason) for i, c in enumerate(r.cells())) for r in table.rows]
    widths = [max([len(COLUMNS[i])] + [len(r[i]) for r in rows]) for i in range(len(COLUMNS))]
    # drop columns that are empty in every row, so a short table stays short
    keep = [i for i in range(len(COLUMNS)) if i < 2 or any(r[i] for r in rows)]
    line = lambda cells: "  ".join(cells[i].ljust(widths[i]) for i in keep).rstrip()  # noqa: E731
    out = [table.title, line(COLUMNS), line(tuple("-" * w for w in widths))]
    out += [line(r) for r in rows]
    out += [f"note: {n}" for n in table.notes]
    return "\n".join(out)


def emit(table: VerdictTable, payload: Any = None, *, as_json: bool = False, quiet: bool = False,
         stream: IO[str] | None = None) -> None:
    """Print the table (default), only `payload` as JSON (`--json`), or nothing (`--quiet`)."""
    stream = stream or sys.stdout
    if quiet:
        return
    if as_json:
        from brownformer.io import to_jsonable
        print(json.dumps(to_jsonable(payload), allow_nan=False), file=stream)
        return
    print(format_table(table), file=stream)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
