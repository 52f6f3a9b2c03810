"""Figures 1 and 2: training curves, and steps and seconds to claim 4's target.

The time-to-target table comes from brownformer.results.time_to_target_table, which the report's
optimizer comparison quotes too, so the figure and the text cannot disagree.
"""
from __future__ import annotations

import logging
import re

import numpy as np
import pandas as pd

from brownformer.metrics import val_metric
from brownformer.plots._style import new_figure, no_data, optimizer_palette
from brownformer.results import Results, time_to_target_table
from brownformer.target_stop import stopped_runs

log = logging.getLogger(__name__)

__all__ = ["overhead_breakdown", "plot_training_curves", "plot_time_to_target"]

_METRIC_LABELS = {"val_accuracy": "val accuracy", "val_bpc": "val bits per char", "val_loss": "val loss"}
# Optimizer diagnostics that are timings, by component (matched on the opt_* column name).
_TIMING = re.compile(r"(time|_s$|_ms$|seconds)")
_COMPONENTS = (("factors", re.compile(r"factor|cov|stat")), ("inverse / CG", re.compile(r"inv|eig|cg|solve")),
               ("apply", re.compile(r"apply|precond|update|step")))


def overhead_breakdown(res: Results) -> pd.DataFrame:
    """Mean per-step time of each optimizer component from the opt_* timing columns of metrics.

    Returns:
        Rows optimizer, model, component, seconds (mean over logged rows and seeds); empty when
        no run logged timings.
    """
    m = res.metrics
    if m.empty:
        return pd.DataFrame()
    timing_cols = [c for c in m.columns if c.startswith("opt_") and _TIMING.search(c)]
    rows = []
    for col in timing_cols:
        comp = next((name for name, pat in _COMPONENTS if pat.search(col[4:])), col[4:])
        scale = 1e-3 if col.endswith("_ms") else 1.0
        cumulative = "total" in col or "cum" in col
        for (opt, model), g in m[m[col].notna()].groupby(["optimizer", "model"], sort=True):
            if cumulative:  # accumulated seconds: per step = last value / steps, per run
                last = g.sort_values("step").groupby("run").tail(1)
                per_step = float((last[col] / last["step"].clip(lower=1)).mean())
            else:
                per_step = float(g[col].mean())
            rows.append({"optimizer": opt, "model": model, "component": comp, "column": col,
                         "seconds": per_step * scale})
    return pd.DataFrame(rows)


def _band(ax, g: pd.DataFrame, x: str, y: str, color, label: str) -> None:
    """Median over seeds as a line, the seeds' min-max as a band (x = median over seeds too)."""
    agg = g.groupby("step").agg(x=(x, "median"), med=(y, "median"), lo=(y, "min"), hi=(y, "max"),
                                n=(y, "size")).reset_index()
    ax.plot(agg["x"], agg["med"], color=color, lw=1.2, label=label)
    if (agg["n"] > 1).any():
        ax.fill_between(agg["x"], agg["lo"], agg["hi"], color=color, alpha=0.2, lw=0)


def plot_training_curves(res: Results):
    """Figure 1: rows = model variants; columns = train loss and validation metric vs steps and seconds.

    Runs stopped at claim 4's target (brownformer.target_stop) stay out of the median and the band (their
    curves end early: a median over seeds would switch to the other runs where they end); each is drawn as
    a thin line of its optimizer's colour ending in an x where it stopped."""
    models = sorted({r.model for r in res.runs})
    fig, axes = new_figure(max(len(models), 1), 4, width=3.3, height=2.6)
    stopped = stopped_runs(res.metrics)
    m = res.metrics
    palette = optimizer_palette(r.optimizer for r in res.runs)
    for i, model in enumerate(models):
        g_model = m[m["model"] == model] if not m.empty else m
        try:
            col = val_metric(g_model).column
        except ValueError:  # no evaluation logged yet: the panels below say "no data"
            col = "val metric"
        label = _METRIC_LABELS.get(col, col)
        panels = [("step", "train_loss", "steps", "train loss"), ("step", col, "steps", label),
                  ("wall_time", "train_loss", "wall-clock (s)", "train loss"), ("wall_time", col, "wall-clock (s)", label)]
        for j, (x, y, xl, yl) in enumerate(panels):
            ax = axes[i, j]
            title = f"{model}: {yl}"
            if g_model.empty or y not in g_model or x not in g_model or g_model[y].notna().sum() == 0:
                no_data(ax, f"no metrics.parquet with {y} for {model}", title=title)
                continue
            for opt, g in g_model[g_model[y].notna()].groupby("optimizer", sort=True):
                full = g[~g["run"].isin(stopped)]
                if len(full):
                    _band(ax, full, x, y, palette[opt], opt)
                for _, run in g[g["run"].isin(stopped)].groupby("run", sort=True):
                    run = run.sort_values("step")
                    ax.plot(run[x], run[y], color=palette[opt], lw=0.5, alpha=0.6)
                    ax.plot(run[x].iat[-1], run[y].iat[-1], marker="x", ms=3, color=palette[opt], lw=0)
            ax.set(xlabel=xl, ylabel=yl, title=title)
            if y == "train_loss":
                ax.set_yscale("log")

    if not models:
        no_data(axes[0, 0], "the config has no runs")
    handles = [axes[0, 0].plot([], [], color=c, label=o)[0] for o, c in palette.items()]
    fig.legend(handles=handles, title="optimizer", loc="outside lower center", ncol=max(len(handles), 1))
    thin = (f"; thin lines: {len(stopped)} runs stopped at claim 4's target (x), not in the median" if stopped
            else "")
    fig.suptitle(f"Training curves (median over full runs; bands span seeds{thin})", fontsize=10)
    return fig


def _strip(ax, tt: pd.DataFrame, value: str, palette, ylabel: str) -> None:
    models = sorted(tt["model"].unique())
    opts = sorted(tt["optimizer"].unique())
    width = 0.8 / max(len(models), 1)
    markers = "osD^v<>p"
    finite = tt[value].dropna()
    ceiling = (finite.max() * 1.15) if len(finite) else 1.0
    for k, model in enumerate(models):
        for o, opt in enumerate(opts):
            g = tt[(tt["model"] == model) & (tt["optimizer"] == opt)]
            if g.empty:
                continue
            xpos = o - 0.4 + width * (k + 0.5)
            ok = g[g["reached"]]
            ax.scatter(np.full(len(ok), xpos), ok[value], color=palette[opt], marker=markers[k % len(markers)],
                       s=18, zorder=3, edgecolor="k", linewidth=0.3)
            if len(ok):
                ax.hlines(ok[value].median(), xpos - width * 0.4, xpos + width * 0.4, color="k", lw=1.2, zorder=4)
            miss = len(g) - len(ok)
            if miss:
                ax.scatter([xpos], [ceiling], marker="x", color=palette[opt], s=25, zorder=3)
                ax.annotate(str(miss), (xpos, ceiling), fontsize=6, ha="center", va="bottom",
                            xytext=(0, 3), textcoords="offset points")
    ax.set_xticks(range(len(opts)), opts, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    if tt[value].isna().any():
        ax.text(0.01, 0.99, "x: runs that never reach the target (count above)", transform=ax.transAxes,
                fontsize=6, va="top", color="0.3")
    ax.set_ylim(bottom=0, top=ceiling * 1.25)
    if len(models) > 1:
        handles = [ax.scatter([], [], marker=markers[k % len(markers)], color="0.5", s=18, label=m)
                   for k, m in enumerate(models)]
        ax.legend(handles=handles, title="model (marker)", loc="upper center", bbox_to_anchor=(0.5, -0.28),
                  ncol=min(len(models), 3))


def plot_time_to_target(res: Results):
    """Figure 2: steps and seconds to the target, per optimizer and model, seeds as points; K-FAC overhead."""
    fig, axes = new_figure(1, 3, width=4.0, height=3.3)
    tt = time_to_target_table(res)
    target_opt = res.cfg.report.target_optimizer
    # claim 4's record may name optimizers beyond this config's grid (a claims file from another run)
    palette = optimizer_palette({*(r.optimizer for r in res.runs), *tt.get("optimizer", [])})
    if tt.empty or not np.isfinite(tt["target"]).any():
        why = ("no validation metrics" if tt.empty else f"no claim-4 target (no {target_opt} run to set it)")
        no_data(axes[0, 0], why, title="steps to target")
        no_data(axes[0, 1], why, title="seconds to target")
    else:
        _strip(axes[0, 0], tt, "steps", palette, "steps to target")
        axes[0, 0].set_title("steps to the target (claim 4's runs)")
        _strip(axes[0, 1], tt, "seconds", palette, "seconds to target")
        axes[0, 1].set_title("wall-clock to the target (claim 4's runs)")
    ov = overhead_breakdown(res)
    ax = axes[0, 2]
    if ov.empty:
        no_data(ax, "no optimizer timing columns (opt_*time*) in metrics.parquet", title="K-FAC time per step")
    else:
        per = ov.groupby(["optimizer", "component"])["seconds"].mean().unstack(fill_value=0.0).sort_index()
        bottom = np.zeros(len(per))
        colors = optimizer_palette(per.columns)
        for comp in per.columns:
            ax.bar(range(len(per)), per[comp].to_numpy() * 1e3, bottom=bottom, label=comp, color=colors[comp])
            bottom += per[comp].to_numpy() * 1e3
        ax.set_xticks(range(len(per)), per.index, rotation=30, ha="right")
        ax.set(ylabel="ms per step (mean over logged steps)", title="optimizer time per step by component")
        ax.legend(title="component")
    return fig
