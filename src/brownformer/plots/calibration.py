"""Figures 8 and 9: calibration (size and power) of the test battery; verdict per claim, run and optimizer."""
from __future__ import annotations

import pandas as pd
import seaborn as sns
from matplotlib.colors import ListedColormap

from brownformer.plots._load import Results
from brownformer.plots._style import new_figure, no_data
from brownformer.report.claims import claims_table

__all__ = ["calibration_matrix", "plot_calibration", "plot_claims_overview", "VERDICTS"]

VERDICTS = ("not supported", "inconclusive", "supported")
_VERDICT_COLORS = ["#d55e00", "#bbbbbb", "#009e73"]


def _first(df: pd.DataFrame, *names: str) -> str | None:
    return next((n for n in names if n in df.columns), None)


def calibration_matrix(res: Results) -> pd.DataFrame:
    """Rejection rate pivoted to rows = test, columns = simulated process (mean over kinds and sizes)."""
    cal = res.calibration
    if cal.empty:
        return pd.DataFrame()
    test, proc = _first(cal, "test", "test_name", "name"), _first(cal, "process", "alternative", "simulated")
    rate = _first(cal, "rejection_rate", "rate", "reject_rate", "power")
    if not (test and proc and rate):
        return pd.DataFrame()
    return cal.pivot_table(index=test, columns=proc, values=rate, aggfunc="mean").sort_index()


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
           title=f"Size (goal [0.02, 0.08] at α={alpha}) and power (goal ≥ 0.9)")
    return fig


def plot_claims_overview(res: Results):
    table = claims_table(res.claims, res.summary)
    per = table[table["scope"] == "run"] if not table.empty else table
    fig, axes = new_figure(1, 1, width=max(6.0, 0.45 * per["run"].nunique() + 3) if not per.empty else 6.0,
                           height=max(2.5, 0.5 * (per["claim"].nunique() if not per.empty else 3) + 1.8))
    ax = axes[0, 0]
    if table.empty:
        no_data(ax, "claims.json missing or without verdicts", title="verdict per claim, run and optimizer")
        return fig
    head = table[table["scope"] == "headline"].assign(run="headline (all runs)", optimizer="")
    per = pd.concat([head, per], ignore_index=True)
    codes = per.assign(code=per["verdict"].map({v: i for i, v in enumerate(VERDICTS)}))
    order = codes.sort_values(["optimizer", "run"], na_position="first")["run"].drop_duplicates().tolist()
    mat = codes.pivot_table(index="claim", columns="run", values="code", aggfunc="min").reindex(columns=order)
    sns.heatmap(mat, vmin=-0.5, vmax=2.5, cmap=ListedColormap(_VERDICT_COLORS), ax=ax, linewidths=0.5,
                linecolor="white", cbar_kws={"ticks": [0, 1, 2]})
    ax.collections[0].colorbar.set_ticklabels(list(VERDICTS))
    ax.set(xlabel="run (grouped by optimizer)", ylabel="claim", title="Verdict per claim and run (blank: not evaluated)")
    ax.tick_params(axis="x", labelrotation=60)
    return fig

