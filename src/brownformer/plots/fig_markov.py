"""Figure 4 (claim 2): attention read as a Markov chain, per layer over training, with null models."""
from __future__ import annotations

import numpy as np
import pandas as pd

from brownformer.plots._style import new_figure, no_data, optimizer_palette
from brownformer.plots._traj import capture_number
from brownformer.results import Results
from brownformer.statsfile import AttentionStats, MatrixAggregate

__all__ = ["markov_table", "plot_markov_spectra", "MARKOV_METRICS"]

MARKOV_METRICS = {
    "spectral_gap": "spectral gap 1 − |λ₂|",
    "stationary_entropy": "stationary entropy (nats)",
    "reversibility_residual": "reversibility residual",
    "dobrushin": "Dobrushin coefficient",
    "vmf_output_error": "vMF kernel: relative output error",
}


def _per_layer(data: AttentionStats, metric: str) -> dict[int, float]:
    """{layer: mean value} from the per-matrix values in (L, H, B) order, else {-1: the aggregate mean}."""
    values = data.per_matrix.get(metric)
    if values:
        arr = np.array([np.nan if v is None else v for v in values], dtype=float)
        lead = data.shape[:-2]  # (L, H, B) of the full (L, H, B, n, n) shape
        if len(lead) >= 2 and int(np.prod(lead)) == arr.size:
            return {layer: float(np.nanmean(row)) for layer, row in enumerate(arr.reshape(int(lead[0]), -1))}
        return {-1: float(np.nanmean(arr))}
    agg = _mean(data.aggregate.get(metric))
    return {} if agg is None else {-1: agg}


def _mean(aggregate: MatrixAggregate | None) -> float | None:
    v = None if aggregate is None else aggregate.mean
    return float(v) if isinstance(v, (int, float)) and np.isfinite(v) else None


def _nulls(data: AttentionStats, metric: str) -> dict[str, float]:
    """{null model: aggregate mean} (stats_stage/attention_files.py: row-shuffled, shuffled keys, step 0, exact vMF)."""
    out = {}
    for name, agg in (data.null_models.items() if data.null_models is not None else ()):
        v = _mean(agg.get(metric))
        if v is not None:
            out[name] = v
    return out


def markov_table(res: Results) -> pd.DataFrame:
    """Rows run, model, optimizer, capture, layer (-1 = all layers), metric, value, source ("attention" or a null)."""
    rows = []
    for spec in res.runs:
        for key, data in res.all_run_stats.get(spec.run_id, {}).items():
            if not key.startswith("attention/") or not isinstance(data, AttentionStats):
                continue
            cap = capture_number(key)
            for metric in MARKOV_METRICS:
                for layer, v in _per_layer(data, metric).items():
                    rows.append({"run": spec.run_id, "model": spec.model, "optimizer": spec.optimizer, "capture": cap,
                                 "layer": layer, "metric": metric, "value": v, "source": "attention"})
                for name, v in _nulls(data, metric).items():
                    rows.append({"run": spec.run_id, "model": spec.model, "optimizer": spec.optimizer, "capture": cap,
                                 "layer": -1, "metric": metric, "value": v, "source": name})
    return pd.DataFrame(rows)


def plot_markov_spectra(res: Results):
    fig, grid = new_figure(2, 3, width=3.6, height=2.8)
    axes = grid.reshape(1, -1)
    grid[1, 2].set_axis_off()
    table = markov_table(res)
    palette = optimizer_palette(r.optimizer for r in res.runs)
    null_styles = {}
    for ax, (metric, label) in zip(axes[0], MARKOV_METRICS.items()):
        sub = table[table["metric"] == metric] if not table.empty else table
        if sub.empty:
            no_data(ax, f"no {metric} in the attention stats outputs", title=label)
            continue
        att = sub[sub["source"] == "attention"]
        for (opt, layer), g in att.groupby(["optimizer", "layer"], sort=True):
            agg = g.groupby("capture")["value"].agg(["median", "min", "max"]).reset_index()
            ls = ["-", "--", "-.", ":"][layer % 4] if layer >= 0 else "-"
            ax.plot(agg["capture"], agg["median"], ls, marker="o", ms=2.5, color=palette[opt],
                    label=f"{opt}" + (f" L{layer}" if layer >= 0 else ""))
            if len(g["run"].unique()) > 1:
                ax.fill_between(agg["capture"], agg["min"], agg["max"], color=palette[opt], alpha=0.15, lw=0)
        for name, g in sub[sub["source"] != "attention"].groupby("source", sort=True):
            null_styles.setdefault(name, "xP*+"[len(null_styles) % 4])
            agg = g.groupby("capture")["value"].median().reset_index()
            ax.plot(agg["capture"], agg["value"], null_styles[name], color="0.3", ms=4, ls="none",
                    label=f"null: {name}")
        ax.set(xlabel="capture (training time →)", title=label)
        if not grid[1, 2].get_legend():
            grid[1, 2].legend(*ax.get_legend_handles_labels(), loc="center", fontsize=7, title="optimizer, layer")
    fig.suptitle("Claim 2: attention as a Markov transition matrix (line style = layer; grey markers = null models)",
                 fontsize=10)
    return fig
