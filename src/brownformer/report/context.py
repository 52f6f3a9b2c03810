"""What the report notebook works from: config, results, figures, captions, and markdown helpers."""
from __future__ import annotations

import base64
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from brownformer.config import ExperimentConfig, load_config
from brownformer.plots._load import Results
from brownformer.plots.catalog import FIGURES

log = logging.getLogger(__name__)

__all__ = ["ReportContext", "md_table", "kv_table", "fmt", "fmt_ci"]

# Captions for `snakemake --report` live in workflow/report/<stem>.rst; the report reuses them
# when the checkout is at hand (the installed package falls back to the catalog title alone).
_CAPTION_DIRS = (Path.cwd() / "workflow" / "report", Path(__file__).resolve().parents[3] / "workflow" / "report")


def fmt(x: Any, digits: int = 3) -> str:
    """A number for text: 3 significant digits, 'n/a' for None/NaN."""
    if x is None:
        return "n/a"
    if isinstance(x, (bool,)):
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
    return "n/a" if fmt(lo) == "n/a" or fmt(hi) == "n/a" else f"[{fmt(lo)}, {fmt(hi)}]"


def _cell(v: Any) -> str:
    s = fmt(v) if isinstance(v, float) else ("" if v is None else str(v))
    return s.replace("|", "\\|").replace("\n", " ")


def md_table(df: pd.DataFrame, *, index: bool = False) -> str:
    """A GitHub-flavoured markdown table (no tabulate dependency)."""
    if df is None or df.empty:
        return "_(no rows)_"
    if index:
        df = df.reset_index()
    head = "| " + " | ".join(_cell(c) for c in df.columns) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body])


def kv_table(items: dict, *, ncols: int = 3) -> str:
    """Settings as a compact markdown table: `ncols` (setting, value) pairs per row."""
    pairs = [(str(k), "none" if v is None else (fmt(v) if isinstance(v, float) else str(v))) for k, v in items.items()]
    if not pairs:
        return "_(none)_"
    rows = [pairs[i:i + ncols] for i in range(0, len(pairs), ncols)]
    head = "| " + " | ".join(["setting | value"] * ncols) + " |"
    sep = "|" + "|".join(["---|---"] * ncols) + "|"
    body = ["| " + " | ".join(f"`{_cell(k)}` | {_cell(v)}" for k, v in row + [("", "")] * (ncols - len(row))) + " |"
            for row in rows]
    return "\n".join([head, sep, *body]).replace("| `` |", "|  |")


@dataclass
class ReportContext:
    cfg: ExperimentConfig
    config_path: Path
    results: Results
    figures_dir: Path
    missing: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, config_path: str | Path, results_dir: str | Path, figures_dir: str | Path) -> "ReportContext":
        cfg = load_config(config_path)
        return cls(cfg, Path(config_path), Results(cfg, Path(results_dir)), Path(figures_dir))

    @property
    def figure_numbers(self) -> dict[str, int]:
        return {stem: i for i, stem in enumerate(FIGURES, start=1)}

    def caption(self, stem: str) -> str:
        for d in _CAPTION_DIRS:
            p = d / f"{stem}.rst"
            if p.is_file():
                return p.read_text().strip()
        return ""

    def figure_html(self, stem: str) -> str:
        """The figure embedded as base64 PNG with its numbered caption (HTML; renders in notebook and export)."""
        n = self.figure_numbers[stem]
        title, caption = FIGURES[stem], self.caption(stem)
        path = self.figures_dir / f"{stem}.png"
        cap = f"<figcaption><b>Figure {n}.</b> {title}. {caption}</figcaption>"
        if not path.is_file():
            self.missing.append(f"figure {stem}.png")
            return f"<figure id='fig-{stem}'><p><i>Figure {n} is not available ({path} missing).</i></p>{cap}</figure>"
        data = base64.b64encode(path.read_bytes()).decode()
        return (f"<figure id='fig-{stem}' style='margin:1.5em 0'><img alt='Figure {n}: {title}' "
                f"style='max-width:100%' src='data:image/png;base64,{data}'/>{cap}</figure>")

    def ref(self, stem: str) -> str:
        return f"Figure {self.figure_numbers[stem]}"
