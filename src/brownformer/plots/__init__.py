"""Figures of the report, drawn from the results tree through brownformer.results.

`make_figures` is what the `brownformer figures` CLI calls: it draws every entry of the figure
catalog (brownformer.results.catalog.FIGURES). A figure whose inputs are missing still gets
drawn, with panels that say "no data" and why; a figure whose drawing fails is replaced by a
panel naming the error, so one bad input never blocks the report.
"""
from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Callable

from brownformer.config import ExperimentConfig
from brownformer.io import progress
from brownformer.results.catalog import FIGURES, Figure

log = logging.getLogger(__name__)

__all__ = ["make_figures", "drawing_function"]


def drawing_function(figure: Figure) -> Callable:
    """The function a catalog entry names ("module:function"), imported on demand.

    Raises:
        ValueError: the module or function does not exist (names the figure).
    """
    module, _, name = figure.draw.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"figure {figure.stem!r}: cannot find its drawing function {figure.draw!r} ({exc})") from exc


def _draw(cfg: ExperimentConfig, results_dir: Path, out_dir: Path, stems: list[str]) -> tuple[list[Path], list[str]]:
    """Draw the catalog entries `stems` (one process's share); returns (written paths, input notes)."""
    from brownformer.plots._style import apply_style, new_figure, no_data, save_figure
    from brownformer.results import Results

    apply_style()
    res = Results(cfg, Path(results_dir))
    written: list[Path] = []
    for stem in stems:
        figure = FIGURES[stem]
        try:
            fig = drawing_function(figure)(res)
        except Exception as exc:  # an unexpected input shape must not block the other figures
            log.exception("figure %s failed", figure.stem)
            fig, axes = new_figure(1, 1, width=6, height=3)
            no_data(axes[0, 0], f"drawing failed: {type(exc).__name__}: {exc}", title=figure.title)
        written += save_figure(fig, Path(out_dir), figure.stem)
    return written, list(res.notes)


def make_figures(cfg: ExperimentConfig, results_dir: Path, out_dir: Path, *, jobs: int = 1) -> list[Path]:
    """Draw every figure of the catalog as out_dir/<stem>.png and .svg.

    Args:
        cfg: the experiment config (which runs to expect, dataset kinds, target optimizer).
        results_dir: the results folder (docs/ARTIFACTS.md layout).
        out_dir: where the figures go (created).
        jobs: worker processes, one figure each at a time (the figure stage is the last serial step of the
            pipeline, so its wall time is the pipeline's); the files do not depend on it.
    Returns:
        The written paths, png and svg for each figure in catalog order.
    """
    stems = list(FIGURES)
    if jobs > 1 and len(stems) > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=min(jobs, len(stems))) as pool:
            parts = list(progress(pool.map(_draw, *zip(*[(cfg, results_dir, out_dir, [s]) for s in stems])),
                                  desc="figures", total=len(stems)))
    else:
        parts = [_draw(cfg, results_dir, out_dir, stems)]
    written = [p for paths, _ in parts for p in paths]
    for note in sorted({n for _, notes in parts for n in notes}):
        log.info("input note: %s", note)
    return written
