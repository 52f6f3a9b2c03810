"""Figure 5 (claim 3, depth as time): mean cosine against the spherical Brownian law; Gram off-diagonal."""
from __future__ import annotations

import numpy as np
import pandas as pd

from brownformer.plots._style import new_figure, no_data, optimizer_palette
from brownformer.plots._traj import capture_number, gram_offdiagonal, mean_cosine_from_start
from brownformer.results import Results
from brownformer.statsfile import BatteryStats

__all__ = ["depth_table", "plot_depth_cosine"]


def depth_table(res: Results) -> pd.DataFrame:
    """Per run, capture (first and last) and layer: mean cosine to layer 0, Gram off-diagonal, D from stats.

    D (diffusion coefficient) is the statistics stage's estimate for that trajectory file when
    present, else NaN (the figure then fits the law at layer 1 and says so); dim is the dimension
    k the tokens span, so the law is exp(-(k-1) D l) on S^(k-1).
    """
    rows = []
    for spec in res.runs:
        entries = [f for f in res.trajectory_files(spec.run_id, "depth") if f["path"].startswith("depth/ln_c")
                   and not f["path"].endswith("_features.npy")]
        if not entries:
            continue
        entries = sorted(entries, key=lambda f: capture_number(f["path"]))
        stats = res.all_run_stats.get(spec.run_id, {})
        for label, entry in (("init", entries[0]), ("trained", entries[-1])):
            X, side = res.load_trajectory(spec.run_id, entry["path"])
            if X is None or X.ndim != 3 or X.shape[0] < 2:
                continue
            times = side.get("times") or list(range(X.shape[0]))
            cos, gram = mean_cosine_from_start(X), gram_offdiagonal(X)
            battery = stats.get(entry["path"].removesuffix(".npy"))
            battery = battery if isinstance(battery, BatteryStats) else None
            D = battery.diffusion_coefficient.estimate if battery else None
            # The sphere the walk lives on: S^(k-1) with k the dimension the tokens span (d - 1 for
            # LayerNorm outputs, which lie in the hyperplane sum(z) = 0), as the statistics stage used.
            span = battery.span_dimension if battery else X.shape[-1] - 1 if side.get("sum_zero") else X.shape[-1]
            for t in range(X.shape[0]):
                rows.append({"model": spec.model, "optimizer": spec.optimizer, "seed": spec.seed, "capture": label,
                             "layer": float(times[t]), "mean_cos": float(cos[t]), "gram_off": float(gram[t]),
                             "dim": int(span), "D": float(D) if isinstance(D, (int, float)) else np.nan})
    return pd.DataFrame(rows)


def plot_depth_cosine(res: Results):
    table = depth_table(res)
    models = sorted({r.model for r in res.runs})
    fig, axes = new_figure(max(len(models), 1), 2, width=3.6, height=2.5)
    palette = optimizer_palette(r.optimizer for r in res.runs)
    for i, model in enumerate(models):
        sub = table[table["model"] == model] if not table.empty else table
        ax_c, ax_g = axes[i, 0], axes[i, 1]
        if sub.empty:
            no_data(ax_c, f"no depth trajectories for {model}", title=f"{model}: mean cosine to layer 0")
            no_data(ax_g, f"no depth trajectories for {model}", title=f"{model}: Gram off-diagonal")
            continue
        fitted_here = False
        for opt, g in sub.groupby("optimizer", sort=True):
            for cap, ls in (("trained", "-"), ("init", ":")):
                gc = g[g["capture"] == cap].groupby("layer").agg(c=("mean_cos", "mean"), go=("gram_off", "mean"),
                                                                 D=("D", "median"), k=("dim", "first")).reset_index()
                if gc.empty:
                    continue
                lab = f"{opt} ({cap})"
                ax_c.plot(gc["layer"], gc["c"], ls, marker="o", ms=3, color=palette[opt], label=lab)
                ax_g.plot(gc["layer"], gc["go"], ls, marker="o", ms=3, color=palette[opt], label=lab)
                if cap != "trained" or len(gc) < 2:
                    continue
                k = int(gc["k"].iat[0])
                D = gc["D"].iat[0]
                if not np.isfinite(D) and 0 < gc["c"].iat[1] < 1:
                    # Display-only: the law through the first step, labelled as such.
                    D = -np.log(gc["c"].iat[1]) / ((k - 1) * (gc["layer"].iat[1] - gc["layer"].iat[0]))
                    fitted_here = True
                if np.isfinite(D):
                    ls_ = np.linspace(gc["layer"].min(), gc["layer"].max(), 50)
                    ax_c.plot(ls_, np.exp(-(k - 1) * D * (ls_ - ls_[0])), "--", color=palette[opt], lw=0.8, alpha=0.7)
        note = "dashed: exp(-(k-1) D l), k = dimension spanned" + (" with D fitted at the first layer" if fitted_here else " with D from stats")
        ax_c.set(xlabel="layer l", ylabel="E⟨u₀, u_l⟩", title=f"{model}: mean cosine to layer 0")
        ax_c.text(0.02, 0.02, note, transform=ax_c.transAxes, fontsize=6, color="0.3")
        ax_c.legend(loc="upper right", fontsize=6)
        ax_g.axhline(0, color="k", lw=0.6)
        ax_g.set(xlabel="layer l", ylabel="mean off-diagonal cos(u_i, u_j)",
                 title=f"{model}: Gram off-diagonal\n(↑ clustering, → 0 diffusion)")
    if not models:
        no_data(axes[0, 0], "the config has no runs")
    return fig
