"""Shared look and deterministic saving for every figure.

Figures must be byte-identical across two runs on the same results: no dates, no software
version in the metadata, a fixed SVG hash salt (it seeds the element ids) and glyphs drawn as
paths so that the installed fonts' names do not leak in.
"""
from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from brownformer.io import atomic_path  # noqa: E402

log = logging.getLogger(__name__)

__all__ = ["apply_style", "save_figure", "no_data", "optimizer_palette", "new_figure"]

_RC = {
    "svg.hashsalt": "brownformer",
    "svg.fonttype": "path",
    "figure.dpi": 100,
    "savefig.dpi": 130,
    "savefig.bbox": "standard",  # "tight" depends on renderer text extents only, but fixed is simpler
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 7,
    "legend.title_fontsize": 8,
    "path.simplify": False,
}
_PNG_METADATA = {"Software": None}
_SVG_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}


def apply_style() -> None:
    """Seaborn's whitegrid theme plus the deterministic rcParams above."""
    sns.set_theme(style="whitegrid", context="paper")
    plt.rcParams.update(_RC)


def new_figure(nrows: int, ncols: int, *, width: float = 4.2, height: float = 3.2, **kwargs):
    """A figure of nrows x ncols panels of about width x height inches each (axes always 2-D)."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False,
                             layout="constrained", **kwargs)
    return fig, axes


def optimizer_palette(names) -> dict[str, tuple]:
    """A stable colour per optimizer name (sorted, so every figure agrees)."""
    names = sorted(set(names))
    colors = sns.color_palette("colorblind", n_colors=max(len(names), 1))
    return {n: colors[i % len(colors)] for i, n in enumerate(names)}


def no_data(ax, why: str, *, title: str | None = None) -> None:
    """An honest empty panel: says that there is no data and why, draws nothing else."""
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(True)
        spine.set_color("0.7")
    ax.set_facecolor("0.97")
    ax.text(0.5, 0.5, "no data: " + textwrap.fill(why, 40), ha="center", va="center",
            transform=ax.transAxes, fontsize=8, color="0.3")
    if title:
        ax.set_title(title)


def save_figure(fig, out_dir: Path, stem: str) -> list[Path]:
    """Write out_dir/<stem>.png and .svg atomically with fixed metadata; close the figure."""
    out_dir = Path(out_dir)
    paths = []
    for ext, metadata in (("png", _PNG_METADATA), ("svg", _SVG_METADATA)):
        path = out_dir / f"{stem}.{ext}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, metadata=metadata)
        paths.append(path)
    plt.close(fig)
    log.info("wrote %s.{png,svg}", out_dir / stem)
    return paths
