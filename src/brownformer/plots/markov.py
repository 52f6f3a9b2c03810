"""Figure 4 (claim 2): attention read as a Markov chain, per layer over training, with null models."""
from __future__ import annotations

import numpy as np
import pandas as pd

from brownformer.results import Results, dig
from brownformer.plots._style import new_figure, no_data, optimizer_palette
from brownformer.plots._traj import capture_number

__all__ = ["markov_table", "plot_markov_spectra", "MARKOV_METRICS"]

MARKOV_METRICS = {
    "spectral_gap": "spectral gap 1 − |λ₂|",
    "stationary_entropy": "stationary entropy (nats)",
    "reversibility_residual": "reversibility residual",
    "dobrushin": "Dobrushin coefficient",
    "vmf_output_error": "vMF kernel: relative output error",
}


def _scalar(v) -> float | None:
    if isinstance(v, dict):
        v = v.get("mean", v.get("estimate", v.get("median")))
    if isinstance(v, (int, float)) and np.isfinite(v):
        return float(v)
    return None


def _per_layer(data: dict, metric: str) -> dict[int, float]:
    """{layer: mean value} from per-matrix lists (in (L, H, B) order when "shape" is given), else {-1: aggregate}."""
    values = dig(data, "per_matrix", metric)
    if values is None and isinstance(data.get(metric), list):
        values = data[metric]
    shape = data.get("shape") or dig(data, "per_matrix", "shape")
    if isinstance(values, list) and values:
        arr = np.array([np.nan if v is None else v for v in values], dtype=float)
        lead = None
        if isinstance(shape, list) and shape:
            # "shape" is either the leading (L, H, B) or the full (L, H, B, n, n) shape
            lead = shape if int(np.prod(shape)) == arr.size else shape[:-2] if int(np.prod(shape[:-2])) == arr.size else None
        if lead is not None and len(lead) >= 2:
            L = int(lead[0])
            return {layer: float(np.nanmean(row)) for layer, row in enumerate(arr.reshape(L, -1))}
        return {-1: float(np.nanmean(arr))}
    agg = _scalar(dig(data, "aggregate", metric)) if dig(data, "aggregate", metric) is not None else _scalar(data.get(metric))
    return {} if agg is None else {-1: agg}


def _nulls(data: dict, metric: str) -> dict[str, float]:
    out = {}
    # attention_null_models() output: {"row_shuffled"|"shuffled_features"|"init": aggregate dict}
    nulls = data.get("null_models") or data.get("nulls") or data.get("null") or {}
    for name, nd in (nulls.items() if isinstance(nulls, dict) else []):
        if not isinstance(nd, dict):
            continue
        v = _scalar(dig(nd, "aggregate", metric)) if "aggregate" in nd else _scalar(nd.get(metric))
        if v is not None:
            out[name] = v
    return out


def markov_table(res: Results) -> pd.DataFrame:
    """Rows run, model, optimizer, capture, layer (-1 = all layers), metric, value, source ("attention" or a null)."""
    rows = []
    for spec in res.runs:
        for key, data in res.all_run_stats.get(spec.run_id, {}).items():
            if not key.startswith("attention/") or not isinstance(data, dict):
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
