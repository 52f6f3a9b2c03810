"""Markdown helpers of the report: numbers, intervals and tables as text."""
from __future__ import annotations

import math
from typing import Any

import pandas as pd
from tabulate import tabulate

__all__ = ["fmt", "fmt_ci", "md_table", "kv_table", "setting_text"]


def fmt(x: Any, digits: int = 3) -> str:
    """A number for text: 3 significant digits, 'n/a' for None/NaN."""
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return str(x)
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(v):
        return "n/a"
    if v == int(v) and abs(v) < 1e6:
        return str(int(v))
    return f"{v:.{digits}g}"


def fmt_ci(lo: Any, hi: Any) -> str:
    """"[lo, hi]", or "n/a" when either end is missing."""
    return "n/a" if fmt(lo) == "n/a" or fmt(hi) == "n/a" else f"[{fmt(lo)}, {fmt(hi)}]"


def _cell(v: Any) -> str:
    s = fmt(v) if isinstance(v, float) else ("" if v is None else str(v))
    return s.replace("|", "\\|").replace("\n", " ")


def md_table(df: pd.DataFrame, *, index: bool = False) -> str:
    """A GitHub-flavoured markdown table (cells formatted by `fmt`, laid out by tabulate)."""
    if df is None or df.empty:
        return "_(no rows)_"
    if index:
        df = df.reset_index()
    rows = [[_cell(v) for v in row] for row in df.itertuples(index=False)]
    return tabulate(rows, headers=[_cell(c) for c in df.columns], tablefmt="github", disable_numparse=True)


def setting_text(v: Any) -> str:
    """A config value for text: "none", a number by `fmt`, a list "a, b", a mapping "k=v, ..." (never a repr)."""
    if v is None:
        return "none"
    if isinstance(v, float):
        return fmt(v)
    if isinstance(v, dict):
        return ", ".join(f"{k}={setting_text(x)}" for k, x in v.items()) or "none"
    if isinstance(v, (list, tuple, set, frozenset)):
        return ", ".join(setting_text(x) for x in v) or "none"
    return str(v)


def kv_table(items: dict, *, ncols: int = 3) -> str:
    """Settings as a compact markdown table: `ncols` (setting, value) pairs per row."""
    pairs = [(str(k), setting_text(v)) for k, v in items.items()]
    if not pairs:
        return "_(none)_"
    rows = [pairs[i:i + ncols] for i in range(0, len(pairs), ncols)]
    head = "| " + " | ".join(["setting | value"] * ncols) + " |"
    sep = "|" + "|".join(["---|---"] * ncols) + "|"
    body = ["| " + " | ".join(f"`{_cell(k)}` | {_cell(v)}" for k, v in row + [("", "")] * (ncols - len(row))) + " |"
            for row in rows]
    return "\n".join([head, sep, *body]).replace("| `` |", "|  |")
