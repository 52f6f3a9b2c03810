"""Figures 8 and 9: calibration (size and power) of the test battery; verdict per claim, run and optimizer."""
from __future__ import annotations

import pandas as pd
import seaborn as sns
from matplotlib.colors import ListedColormap

from brownformer.plots._style import new_figure, no_data
from brownformer.results import Results, calibration_matrix, claims_frame
from brownformer.results.tables import goal_text
from brownformer.verdicts import DID_NOT_TRAIN, INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED

__all__ = ["plot_calibration", "plot_claims_overview"]

#: colour scale order of the overview heatmap (worst to best, "did not train" apart)
_VERDICT_ORDER = (DID_NOT_TRAIN, NOT_SUPPORTED, INCONCLUSIVE, SUPPORTED)
_VERDICT_COLORS = ["#000000", "#d55e00", "#bbbbbb", "#009e73"]


def plot_calibration(res: Results):
    fig, axes = new_figure(1, 1, width=6.5, height=3.2)
    ax = axes[0, 0]
    mat = calibration_matrix(res)
    if mat.empty:
        why = "calibration.parquet missing" if res.calibration.empty else \
            f"calibration.parquet has no test/process/rate columns ({', '.join(res.calibration.columns)})"
        no_data(ax, why, title="size and power of the test battery")
        return fig
    cols = sorted(mat.columns, key=lambda c: (c not in ("brownian", "null"), str(c)))
    mat = mat[cols]
    sns.heatmap(mat, annot=True, fmt=".2f", vmin=0, vmax=1, cmap="viridis", ax=ax, cbar_kws={"label": "rejection rate"},
                annot_kws={"fontsize": 7})
    alpha = res.cfg.stats.alpha
    ax.set(xlabel="simulated process (brownian column = size, others = power)", ylabel="test",
           title=f"Size and power at α={alpha}, mean over the simulated shapes\n(goals: {goal_text()})")
    return fig


def plot_claims_overview(res: Results):
    table = claims_frame(res.claims)
    per = table[table["scope"] == "run"]
    fig, axes = new_figure(1, 1, width=max(6.0, 0.45 * per["key"].nunique() + 3) if not per.empty else 6.0,
                           height=max(2.5, 0.5 * (table["claim"].nunique() if not table.empty else 3) + 1.8))
    ax = axes[0, 0]
    if table.empty:
        no_data(ax, "claims.json missing or not following the verdicts contract",
                title="verdict per claim, run and optimizer")
        return fig
    head = table[table["scope"] == "headline"].assign(key="headline (all runs)", optimizer="")
    per = pd.concat([head, per], ignore_index=True)
    codes = per.assign(code=per["verdict"].map({v: i for i, v in enumerate(_VERDICT_ORDER)}))
    order = codes.sort_values(["optimizer", "key"], na_position="first")["key"].drop_duplicates().tolist()
    mat = codes.pivot_table(index="claim", columns="key", values="code", aggfunc="min").reindex(columns=order)
    sns.heatmap(mat, vmin=-0.5, vmax=len(_VERDICT_ORDER) - 0.5, cmap=ListedColormap(_VERDICT_COLORS), ax=ax,
                linewidths=0.5, linecolor="white", cbar_kws={"ticks": list(range(len(_VERDICT_ORDER)))})
    ax.collections[0].colorbar.set_ticklabels(list(_VERDICT_ORDER))
    ax.set(xlabel="run (grouped by optimizer)", ylabel="claim", title="Verdict per claim and run (blank: not evaluated)")
    ax.tick_params(axis="x", labelrotation=60)
    return fig
