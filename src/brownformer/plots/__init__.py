"""Figures of the report (FIGURES in catalog.py), drawn from the results tree.

`make_figures` is what the `brownformer figures` CLI calls. A figure whose inputs are missing
still gets drawn, with panels that say "no data" and why; a figure whose drawing fails is
replaced by a panel naming the error, so one bad input never blocks the report.
"""
from __future__ import annotations

import logging
from pathlib import Path

from brownformer.config import ExperimentConfig
from brownformer.plots.catalog import FIGURES

log = logging.getLogger(__name__)

__all__ = ["make_figures", "FIGURES"]


def _drawers():
    from brownformer.plots import calibration, depth, markov, sphere, training, trajectories
    return {
        "training_curves": training.plot_training_curves,
        "time_to_target": training.plot_time_to_target,
        "sphere_norms": sphere.plot_sphere_norms,
        "markov_spectra": markov.plot_markov_spectra,
        "depth_cosine": depth.plot_depth_cosine,
        "training_msd": trajectories.plot_training_msd,
        "increments_tails": trajectories.plot_increments_tails,
        "calibration": calibration.plot_calibration,
        "claims_overview": calibration.plot_claims_overview,
    }


def make_figures(cfg: ExperimentConfig, results_dir: Path, out_dir: Path) -> list[Path]:
    """Draw every figure in FIGURES as out_dir/<stem>.png and .svg.

    Args:
        cfg: the experiment config (which runs to expect, dataset kinds, target optimizer).
        results_dir: the results folder (docs/ARTIFACTS.md layout).
        out_dir: where the figures go (created).
    Returns:
        The written paths, png and svg for each stem in FIGURES order.
    """
    from brownformer.plots._load import Results
    from brownformer.plots._style import apply_style, new_figure, no_data, save_figure

    apply_style()
    res = Results(cfg, Path(results_dir))
    drawers = _drawers()
    written: list[Path] = []
    for number, (stem, title) in enumerate(FIGURES.items(), start=1):
        try:
            fig = drawers[stem](res)
        except Exception as exc:  # an unexpected input shape must not block the other figures
            log.exception("figure %s failed", stem)
            fig, axes = new_figure(1, 1, width=6, height=3)
            no_data(axes[0, 0], f"drawing failed: {type(exc).__name__}: {exc}", title=title)
        written += save_figure(fig, Path(out_dir), stem)
    for note in sorted(set(res.notes)):
        log.info("input note: %s", note)
    return written
