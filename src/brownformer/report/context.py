"""What the report notebook works from: config, the results reader, figures and their captions."""
from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, field
from pathlib import Path

from brownformer.config import ExperimentConfig, load_config
from brownformer.results import FIGURES, Results

log = logging.getLogger(__name__)

__all__ = ["ReportContext"]

# Captions for `snakemake --report` live in workflow/report/<caption>; the report reuses them
# when the checkout is at hand (the installed package falls back to the catalog title alone).
_CAPTION_DIRS = (Path.cwd() / "workflow" / "report", Path(__file__).resolve().parents[3] / "workflow" / "report")


@dataclass
class ReportContext:
    """Config, results reader and figures folder of one report, plus what was missing while building it."""
    cfg: ExperimentConfig
    config_path: Path
    results: Results
    figures_dir: Path
    missing: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, config_path: str | Path, results_dir: str | Path, figures_dir: str | Path) -> ReportContext:
        cfg = load_config(config_path)
        return cls(cfg, Path(config_path), Results(cfg, Path(results_dir)), Path(figures_dir))

    @property
    def figure_numbers(self) -> dict[str, int]:
        """stem -> figure number (the catalog order)."""
        return {stem: i for i, stem in enumerate(FIGURES, start=1)}

    def caption(self, stem: str) -> str:
        """The figure's caption file (workflow/report/...), or "" when the checkout is not at hand."""
        for d in _CAPTION_DIRS:
            p = d / FIGURES[stem].caption
            if p.is_file():
                return p.read_text().strip()
        return ""

    def figure_html(self, stem: str) -> str:
        """The figure embedded as base64 PNG with its numbered caption (HTML; renders in notebook and export)."""
        n = self.figure_numbers[stem]
        title, caption = FIGURES[stem].title, self.caption(stem)
        path = self.figures_dir / f"{stem}.png"
        cap = f"<figcaption><b>Figure {n}.</b> {title}. {caption}</figcaption>"
        if not path.is_file():
            self.missing.append(f"figure {stem}.png")
            return f"<figure id='fig-{stem}'><p><i>Figure {n} is not available ({path} missing).</i></p>{cap}</figure>"
        data = base64.b64encode(path.read_bytes()).decode()
        return (f"<figure id='fig-{stem}' style='margin:1.5em 0'><img alt='Figure {n}: {title}' "
                f"style='max-width:100%' src='data:image/png;base64,{data}'/>{cap}</figure>")

    def ref(self, stem: str) -> str:
        """"Figure <n>" for a catalog stem."""
        return f"Figure {self.figure_numbers[stem]}"

    def figures_of(self, group: str) -> list[str]:
        """Stems of the catalog's figures shown in the report section `group`, in figure order."""
        return [stem for stem, fig in FIGURES.items() if fig.group == group]
