"""The scaling figure: each claim's key statistic against depth and against width, with CIs."""
from __future__ import annotations

import textwrap

import numpy as np

from brownformer.plots._style import new_figure, no_data, optimizer_palette
from brownformer.results import Results
from brownformer.stats.claims.scaling import SCALING_CLAIMS, STUDY_COMMAND, claim_points, pooled_by_model, series_of

__all__ = ["plot_scaling"]



def _panel(ax, rows, palette, *, claim: str, series: str, group: str) -> None:
    """One claim along one series: per optimizer the seed-pooled estimate with its CI; the margin shaded."""
    margin = rows[["margin_low", "margin_high"]].dropna()
    if not margin.empty:
        lo, hi = float(margin["margin_low"].iloc[0]), float(margin["margin_high"].iloc[0])
        ax.axhspan(lo, hi, color="0.9", zorder=0, label="margin")
    optimizers = sorted(rows["optimizer"].unique())
    half_span = 0.04 * (len(optimizers) - 1)  # log2 units: optimizers sit symmetrically around each size
    for i, opt in enumerate(optimizers):
        g = rows[(rows["optimizer"] == opt) & np.isfinite(rows["value"].to_numpy(float))].sort_values("size")
        # a small multiplicative offset per optimizer keeps overlapping error bars apart on the log axis
        x = g["size"].to_numpy(float) * 2 ** (0.08 * i - half_span)
        y = g["value"].to_numpy(float)
        err = np.vstack([y - g["ci_low"].to_numpy(float), g["ci_high"].to_numpy(float) - y])
        ax.errorbar(x, y, yerr=np.where(np.isfinite(err), np.abs(err), 0), marker="o", ms=3, capsize=2,
                    color=palette[opt], label=opt)
    ax.set_xscale("log", base=2)
    sizes = sorted(rows["size"].unique())
    ax.set_xticks(sizes, [str(int(s)) for s in sizes])
    ax.minorticks_off()
    ax.set_xlabel("layers" if series == "depth" else "d_model")
    name = next((n for n in rows["name"] if n), "estimate")
    ax.set_ylabel(textwrap.fill(name, 30), fontsize=7)
    ax.set_title(f"claim {claim}: {group}, {series}", fontsize=8)


def plot_scaling(res: Results):
    """Rows: the claims; columns: (group, series). A config without a `scaling` key gets one panel
    saying how to produce the study."""
    points = series_of(res.cfg)
    if not points:
        fig, axes = new_figure(1, 1, width=6, height=2.5)
        no_data(axes[0, 0], f"this config has no scaling study; run `{STUDY_COMMAND}`",
                title="Claims against depth and width")
        return fig
    table = pooled_by_model(claim_points(res.cfg, res.claims))
    columns = sorted({(p.group, p.series) for p in points})
    claims = [c for c in SCALING_CLAIMS if c in set(table["claim"])] or list(SCALING_CLAIMS)
    fig, axes = new_figure(len(claims), len(columns), width=3.0, height=2.2)
    palette = optimizer_palette(r.optimizer for r in res.cfg.runs())
    for i, claim in enumerate(claims):
        for j, (group, series) in enumerate(columns):
            rows = table[(table["claim"] == claim) & (table["group"] == group) & (table["series"] == series)]
            if not np.isfinite(rows["value"].to_numpy(float)).any():
                no_data(axes[i, j], "no estimate (did not train, or undefined)")
                axes[i, j].set_title(f"claim {claim}: {group}, {series}", fontsize=8)
            else:
                _panel(axes[i, j], rows, palette, claim=claim, series=series, group=group)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=7)
    return fig
