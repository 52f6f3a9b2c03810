"""Claim 3 on its pre-fixed window: local slopes against the null envelope, window exponents, walkers.

Reads the "local_slopes" and "walkers" blocks of the per-file statistics (stats/diffusion/window_reading.py);
draws, never decides.
"""
from __future__ import annotations

import numpy as np
from matplotlib.ticker import NullFormatter

from brownformer.plots._style import new_figure, no_data, optimizer_palette
from brownformer.plots._traj import clock_label
from brownformer.results import Results
from brownformer.statsfile import BatteryStats

__all__ = ["plot_local_slopes", "window_rows"]

_FAMILIES = (("depth", "3a: token states over depth"), ("training", "3b: token states over training"),
             ("weights", "3c: weights over training"))
_CLASS_COLORS = {"brownian": "#4c9f70", "subdiffusive": "#3b6ea8", "superdiffusive": "#a83b3b",
                 "crossover": "#d18f2a", "mixed": "#8a5fb0", "inconclusive": "#bbbbbb"}


def _arr(v) -> np.ndarray:
    return np.asarray([np.nan if x is None else x for x in (v or [])], dtype=float)


def window_rows(res: Results) -> list[dict]:
    """One row per battery file with a window block: run, optimizer, family, clock, the block and walkers; unit
    "replica" for a replica set's contrast files (they decide 3b/3c), "path" for a run's own files."""
    rows = []
    sources = [(spec, "path", res.all_run_stats.get(spec.run_id, {})) for spec in res.runs]
    sources += [(spec, "replica", res.replica_stats[spec.run_id]) for spec in res.runs
                if spec.run_id in res.replica_stats]
    for spec, unit, files in sources:
        for key, data in sorted(files.items()):
            fam = key.split("/")[0]
            if fam in dict(_FAMILIES) and isinstance(data, BatteryStats) and data.local_slopes is not None:
                rows.append({"run": spec.run_id, "optimizer": spec.optimizer, "family": fam, "file": key,
                             "unit": unit, "time": data.time, "block": data.local_slopes, "walkers": data.walkers})
    return rows


def _deciding(rows: list[dict]) -> list[dict]:
    """The rows a claim's verdict rests on: a family's replica files where it has any, else all its files."""
    replica = {r["family"] for r in rows if r["unit"] == "replica"}
    return [r for r in rows if r["family"] not in replica or r["unit"] == "replica"]


def _slopes_panel(ax, rows: list[dict], palette, family: str, title: str) -> None:
    rows = [r for r in rows if r["family"] == family and r["block"].tau]
    if not rows:
        no_data(ax, f"no {family} files with a fitting window", title=title)
        return
    deciding = any(r["unit"] == "replica" for r in rows)  # replica files decide 3b/3c; a run's own path describes
    if deciding:
        title += "\n(bold: replicas; faint: one path)"
    for r in sorted(rows, key=lambda r: r["unit"] == "replica"):  # the deciding curves drawn last, on top
        faint = deciding and r["unit"] != "replica"
        b = r["block"]
        tau, ls = _arr(b.tau), _arr(b.local_slope)
        env = b.envelope
        lo, hi = (_arr(env.low), _arr(env.high)) if env is not None else (_arr(None), _arr(None))
        if lo.size == tau.size and not faint:
            ax.fill_between(tau, lo, hi, color="0.6", alpha=0.12, lw=0)
        ax.plot(tau, ls, color=palette[r["optimizer"]], lw=0.5 if faint else (1.4 if deciding else 0.7),
                alpha=0.2 if faint else 0.8)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # a window spans about a decade: minor labels collide
    ax.set(title=title, xlabel=clock_label(rows[0]["time"], since="the window start"),
           ylabel="local slope (d log MSD / d log t)")
    ax.set_ylim(-0.5, 3.0)


def _exponent_panel(ax, rows: list[dict], palette, margin) -> None:
    rows = [r for r in rows if r["block"].effect.estimate is not None]
    title = "window exponent (CI)"
    if not rows:
        no_data(ax, "no defined window exponents", title=title)
        return
    fams = [f for f, _ in _FAMILIES]
    for i, r in enumerate(rows):
        e = r["block"].effect
        x = fams.index(r["family"]) + 0.6 * (i / max(len(rows) - 1, 1) - 0.5)
        lo, hi = e.interval()
        err = [[max(e.estimate - lo, 0)], [max(hi - e.estimate, 0)]] if np.isfinite([lo, hi]).all() else None
        ax.errorbar([x], [e.estimate], yerr=err, fmt="o", ms=3, lw=0.7, color=palette[r["optimizer"]],
                    mec=_CLASS_COLORS.get(r["block"].classification, "k"), mew=1.2)
    if margin is not None:
        ax.axhspan(margin[0], margin[1], color="0.85", zorder=0)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(fams)), ["3a depth", "3b tokens", "3c weights"])
    ax.set_xlim(-0.5, len(fams) - 0.5)
    ax.set(title=title, ylabel="exponent (edge colour: reading)")


def _walkers_panel(ax, rows: list[dict]) -> None:
    title = "per-walker exponents by type"
    per_type: dict[str, list] = {}
    for r in rows:
        for v in (r["walkers"].by_type if r["walkers"] else None) or ():
            q = v.exponent_quantiles
            if q:
                per_type.setdefault(f"{r['family']}: {v.token_type}", []).append(q)
    if not per_type:
        no_data(ax, "no per-walker readings", title=title)
        return
    for i, (name, qs) in enumerate(sorted(per_type.items())):
        q = np.asarray(qs, float)
        xs = i + np.linspace(-0.3, 0.3, len(q)) if len(q) > 1 else np.array([float(i)])
        ax.vlines(xs, q[:, 1], q[:, 3], color="0.4", lw=1.2)
        ax.plot(xs, q[:, 2], "o", ms=2.5, color="k")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(per_type)), sorted(per_type), rotation=30, ha="right", fontsize=6)
    ax.set(title=title, ylabel="exponent (median, 25-75%)")


def _reading_panel(ax, rows: list[dict]) -> None:
    title = "window reading per family"
    if not rows:
        no_data(ax, "no window readings", title=title)
        return
    fams = [f for f, _ in _FAMILIES]
    counts = {c: np.zeros(len(fams)) for c in _CLASS_COLORS}
    for r in rows:
        c = r["block"].classification or "inconclusive"
        counts.setdefault(c, np.zeros(len(fams)))[fams.index(r["family"])] += 1
    bottom = np.zeros(len(fams))
    for c, v in counts.items():
        if v.any():
            ax.bar(range(len(fams)), v, bottom=bottom, color=_CLASS_COLORS.get(c, "0.5"), label=c)
            bottom += v
    ax.set_xticks(range(len(fams)), ["3a depth", "3b tokens", "3c weights"])
    ax.set(title=title, ylabel="trajectory files")
    ax.legend(fontsize=6)


def plot_local_slopes(res: Results):
    """Local slopes with the Brownian null envelope per family; window exponents; walkers; readings."""
    fig, axes = new_figure(2, 3, width=3.6, height=2.9)
    rows = window_rows(res)
    palette = optimizer_palette(r.optimizer for r in res.runs)
    for ax, (fam, title) in zip(axes[0], _FAMILIES):
        _slopes_panel(ax, rows, palette, fam, title)
    _exponent_panel(axes[1, 0], _deciding(rows), palette, res.cfg.stats.margins.get("msd_exponent"))
    _walkers_panel(axes[1, 1], _deciding(rows))
    _reading_panel(axes[1, 2], _deciding(rows))
    handles = [axes[1, 0].plot([], [], color=c, label=o)[0] for o, c in palette.items()]
    axes[1, 0].legend(handles=handles, fontsize=6, loc="lower right")
    fig.text(0.01, 0.005, "grey bands: 95% envelope of the local slope of Brownian motion simulated at each file's "
             "shape; dashed: Brownian value 1; band: equivalence margin; bottom row: the files each verdict rests on",
             fontsize=6, color="0.3")
    return fig
