"""Figure 3 (claim 1): norms of LayerNorm outputs before the affine map (the definition), the radius spread after
it relative to a Gaussian cloud (the claim's statistic), and the residual stream (contrast)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns

from brownformer.plots._style import new_figure, no_data
from brownformer.plots._traj import capture_number
from brownformer.results import Results

__all__ = ["sphere_norm_table", "plot_sphere_norms"]


def sphere_norm_table(res: Results) -> pd.DataFrame:
    """||x|| / sqrt(d) per walker and layer from the depth trajectories of each run (last capture).

    `depth/ln_c<k>` holds LN outputs before the affine map already divided by sqrt(d), so their
    norms are reported as stored; `depth/resid_c<k>` (the residual stream) is divided by sqrt(d)
    here. Rows: model, ln, optimizer, source ("LN before affine" | "residual stream"), layer, norm.
    """
    rows = []
    for spec in res.runs:
        ln = res.cfg.models[spec.model].ln
        for prefix, source, scale in (("depth/ln_c", "LN before affine", False), ("depth/resid_c", "residual stream", True)):
            entries = [f for f in res.trajectory_files(spec.run_id, "depth") if f["path"].startswith(prefix)
                       and not f["path"].endswith("_features.npy")]
            if not entries:
                continue
            last = max(entries, key=lambda f: capture_number(f["path"]))
            X, _ = res.load_trajectory(spec.run_id, last["path"])
            if X is None or X.ndim != 3:
                continue
            norms = np.linalg.norm(X.astype(np.float64), axis=-1)  # (layers, walkers)
            if scale:
                norms = norms / np.sqrt(X.shape[-1])
            for layer in range(norms.shape[0]):
                rows += [{"model": spec.model, "ln": ln, "optimizer": spec.optimizer, "source": source,
                          "layer": layer, "norm": float(v)} for v in norms[layer]]
    return pd.DataFrame(rows)


def _after_affine(res: Results) -> pd.DataFrame:
    """Per layer, the radius spread after the affine map over the Gaussian-cloud null (stats JSON "sphere"."about"
    of the ln_affine files): 0 on a sphere, ~1 for a cloud no rounder than a Gaussian; one row per capture."""
    rows = []
    for spec in res.runs:
        for key, data in res.all_run_stats.get(spec.run_id, {}).items():
            sphere = getattr(data, "sphere", None)  # depth files (BatteryStats or SphereStats)
            if sphere is None or sphere.tensor != "ln_affine":
                continue
            for layer, val in enumerate(sphere.about.per_layer.radius_spread_ratio.estimate):
                if isinstance(val, (int, float)):
                    rows.append({"model": spec.model, "ln": res.cfg.models[spec.model].ln, "layer": layer,
                                 "ratio": float(val)})
    return pd.DataFrame(rows)


def plot_sphere_norms(res: Results):
    fig, axes = new_figure(1, 3, width=4.0, height=3.2)
    table = sphere_norm_table(res)
    titles = {"LN before affine": "LN output before affine", "residual stream": "residual stream (contrast)"}
    for ax, source in zip(axes[0, [0, 2]], ("LN before affine", "residual stream")):
        sub = table[table["source"] == source] if not table.empty else table
        if sub.empty:
            no_data(ax, f"no depth trajectories ({source})", title=titles[source])
            continue
        sns.boxplot(data=sub, x="layer", y="norm", hue="ln", ax=ax, fliersize=1.5, linewidth=0.8,
                    hue_order=sorted(sub["ln"].unique()))
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set(ylabel="‖x‖ / √d", title=titles[source])
        ax.legend(title="LN placement", loc="best")
    after = _after_affine(res)
    ax = axes[0, 1]
    if after.empty:
        no_data(ax, "the statistics stage wrote no after-affine sphere statistics", title="LN output after affine")
    else:
        for ln, g in after.groupby("ln", sort=True):
            agg = g.groupby("layer")["ratio"].agg(["median", "min", "max"]).reset_index()
            ax.errorbar(agg["layer"], agg["median"], yerr=[agg["median"] - agg["min"], agg["max"] - agg["median"]],
                        marker="o", ms=3, capsize=2, label=f"{ln}-LN")
        ax.legend(title="median, range over runs and captures", fontsize=6)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.axhline(float(res.cfg.stats.margins["radius_spread_ratio"][1]), color="tab:red", lw=0.8, ls=":")
        ax.set(ylabel="radius spread / Gaussian cloud's", title="LN output after affine (the claim)")
    fig.suptitle("Claim 1: before the affine map on the sphere by definition (dashed: 1); after it, radius spread "
                 "relative to a Gaussian cloud (dotted: margin)", fontsize=9)
    return fig
