"""Figures 6 and 7 (claim 3, training as time): MSD, variance ratio, Hurst; increments, tails, gradient noise."""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from brownformer.plots._style import new_figure, no_data, optimizer_palette
from brownformer.plots._traj import clock_label, displacement_msd, find_test, mean_cosine_from_start
from brownformer.results import Results
from brownformer.statsfile import BatteryStats, NoiseStats

__all__ = ["estimates_table", "plot_training_msd", "plot_increments_tails"]

_CATEGORY_MARKER = {"weights": "o", "training": "s", "depth": "D", "gradnoise": "^"}


def estimates_table(res: Results, pattern: str, categories=("weights", "training")) -> pd.DataFrame:
    """One row per trajectory statistics file with a test matching `pattern`: run, optimizer, file, estimate, CI,
    the test's null value and the file's classification (gradient noise: one row per capture)."""
    rows = []
    for spec in res.runs:
        for key, data in sorted(res.all_run_stats.get(spec.run_id, {}).items()):
            if key.split("/")[0] not in categories:
                continue
            if isinstance(data, NoiseStats):
                hits = [(f"{key}#{cap.capture}", find_test([cap.tail_index] if cap.tail_index else [], pattern), None)
                        for cap in data.per_capture]
            elif isinstance(data, BatteryStats):
                hits = [(key, find_test(data.tests, pattern), data.classification)]
            else:
                continue
            for file, t, classification in hits:
                if t is None:
                    continue
                lo, hi = t.confidence_interval
                rows.append({"run": spec.run_id, "model": spec.model, "optimizer": spec.optimizer, "file": file,
                             "category": key.split("/")[0], "estimate": t.estimate, "lo": lo, "hi": hi,
                             "null": t.null_value if isinstance(data, BatteryStats) else np.nan,
                             "classification": classification})
    return pd.DataFrame(rows)


def _ci_panel(ax, table: pd.DataFrame, palette, *, margin=None, reference=None, title: str, ylabel: str,
              why_empty: str) -> None:
    if table.empty:
        no_data(ax, why_empty, title=title)
        return
    opts = sorted(table["optimizer"].unique())
    for o, opt in enumerate(opts):
        g = table[table["optimizer"] == opt].reset_index(drop=True)
        xs = o + np.linspace(-0.3, 0.3, len(g)) if len(g) > 1 else np.array([float(o)])
        for x, (_, r) in zip(xs, g.iterrows()):
            yerr = None
            if np.isfinite(r["lo"]) and np.isfinite(r["hi"]):
                yerr = [[max(r["estimate"] - r["lo"], 0)], [max(r["hi"] - r["estimate"], 0)]]
            ax.errorbar([x], [r["estimate"]], yerr=yerr, fmt=_CATEGORY_MARKER.get(r["category"], "o"),
                        color=palette[opt], ms=3, lw=0.8, capsize=1.5)
            if np.isfinite(r.get("null", np.nan)):
                ax.plot([x], [r["null"]], "x", color="0.2", ms=4)
    if margin is not None:
        ax.axhspan(margin[0], margin[1], color="0.85", zorder=0, label="equivalence margin")
    if reference is not None:
        ax.axhline(reference, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(opts)), opts, rotation=30, ha="right")
    ax.set(title=title, ylabel=ylabel)


def _msd_panel(ax, res: Results, palette, category: str) -> str | None:
    """Draw the category's curves on their own clock; the clock's name (sidecar "time"), None when nothing drew."""
    drew = None
    for spec in res.runs:
        for entry in res.trajectory_files(spec.run_id, category):
            if category == "training" and entry["path"].endswith("_lrsum.npy"):
                continue
            X, side = res.load_trajectory(spec.run_id, entry["path"])
            if X is None or X.ndim != 3 or X.shape[0] < 3:
                continue
            t = np.asarray(side.get("times") or range(X.shape[0]), dtype=float)
            lag = t[1:] - t[0]
            if category == "weights":
                y = displacement_msd(X)[1:]
            else:
                # Sphere: psi(t) = -ln E<u_0,u_t> / (d-1), linear in t for spherical BM; cut at the noise floor.
                c = mean_cosine_from_start(X)[1:]
                floor = 3 / np.sqrt(X.shape[-1] * X.shape[1])
                keep = c > floor
                lag, y = lag[keep], -np.log(c[keep]) / (X.shape[-1] - 1)
            ok = (lag > 0) & (y > 0) & np.isfinite(y)
            if ok.sum() >= 2:
                ax.loglog(lag[ok], y[ok], color=palette[spec.optimizer], lw=0.7, alpha=0.6)
                drew = drew or side.get("time") or "index"
    return drew


def _slope_one(ax) -> None:
    lines = ax.get_lines()
    xs = np.concatenate([ln.get_xdata() for ln in lines]) if lines else np.array([])
    ys = np.concatenate([ln.get_ydata() for ln in lines]) if lines else np.array([])
    if len(xs):
        x0, x1 = xs.min(), xs.max()
        y0 = np.exp(np.median(np.log(ys)))
        xm = np.exp(np.median(np.log(xs)))
        ax.loglog([x0, x1], [y0 * x0 / xm, y0 * x1 / xm], "k--", lw=1, label="slope 1 (Brownian)")


def plot_training_msd(res: Results):
    fig, axes = new_figure(2, 3, width=3.6, height=2.9)
    palette = optimizer_palette(r.optimizer for r in res.runs)
    margins = res.cfg.stats.margins
    for ax, cat, title, ylabel in ((axes[0, 0], "weights", "weights: MSD", "E‖w_t − w_0‖² / p"),
                                   (axes[0, 1], "training", "token states on the sphere", "ψ(t) = −ln E⟨u₀,u_t⟩ / (d−1)")):
        clock = _msd_panel(ax, res, palette, cat)
        if clock:
            _slope_one(ax)
            ax.set(xlabel=clock_label(clock), ylabel=ylabel, title=title)
            handles = [ax.plot([], [], color=c, label=o)[0] for o, c in palette.items()]
            ax.legend(handles=handles + [ax.get_lines()[-len(handles) - 1]], fontsize=6, loc="upper left")
        else:
            no_data(ax, f"no {cat} trajectories over training", title=title)
    ex = estimates_table(res, "msd_exponent|msd").assign(null=np.nan)  # null = the dashed reference
    _ci_panel(axes[0, 2], ex, palette, margin=margins.get("msd_exponent"), reference=1.0,
              title="MSD exponent (CI)", ylabel="exponent", why_empty="no MSD exponents in the stats outputs")
    vr = estimates_table(res, "variance_ratio").assign(null=np.nan)
    _ci_panel(axes[1, 0], vr, palette, margin=margins.get("variance_ratio"), reference=1.0,
              title="variance ratio (CI)", ylabel="VR(q)", why_empty="no variance-ratio tests in the stats outputs")
    hu = estimates_table(res, "hurst|dfa").assign(null=np.nan)
    _ci_panel(axes[1, 1], hu, palette, margin=margins.get("hurst"), reference=0.5,
              title="Hurst / DFA exponent (CI)", ylabel="H", why_empty="no Hurst/DFA estimates in the stats outputs")
    cls = estimates_table(res, "msd_exponent|msd|variance_ratio|hurst", categories=("weights", "training", "depth"))
    ax = axes[1, 2]
    cls = cls.drop_duplicates("file" if cls.empty else ["run", "file"]) if not cls.empty else cls
    if cls.empty or cls["classification"].isna().all():
        no_data(ax, "no classifications in the stats outputs", title="classification")
    else:
        counts = cls.groupby(["optimizer", "classification"]).size().unstack(fill_value=0).sort_index()
        colors = optimizer_palette(counts.columns)
        bottom = np.zeros(len(counts))
        for c in counts.columns:
            ax.bar(range(len(counts)), counts[c], bottom=bottom, label=c, color=colors[c])
            bottom += counts[c].to_numpy()
        ax.set_xticks(range(len(counts)), counts.index, rotation=30, ha="right")
        ax.set(ylabel="trajectory files", title="classification (all time axes)")
        ax.legend(fontsize=6)
    fig.text(0.01, 0.005, "markers: ○ weights, □ token states; grey band: pre-registered equivalence margin; "
             "dashed: Brownian value", fontsize=6, color="0.3")
    return fig


def _standardized_increments(res: Results, category: str, *, per_optimizer: bool = True) -> dict[str, np.ndarray]:
    pooled: dict[str, list[np.ndarray]] = {}
    for spec in res.runs:
        for entry in res.trajectory_files(spec.run_id, category):
            X, _ = res.load_trajectory(spec.run_id, entry["path"])
            if X is None or X.ndim != 3 or X.shape[0] < 2:
                continue
            # weights: increments over time; gradnoise: already noise samples (captures, M, p)
            Z = np.diff(X.astype(np.float64), axis=0) if category == "weights" else X.astype(np.float64)
            Z = Z.reshape(-1, Z.shape[-1])  # (samples, coordinates)
            sd = Z.std(axis=0)
            Z = (Z[:, sd > 0] - Z[:, sd > 0].mean(axis=0)) / sd[sd > 0]
            pooled.setdefault(spec.optimizer, []).append(Z.ravel())
    return {k: np.concatenate(v) for k, v in sorted(pooled.items()) if sum(len(a) for a in v)}


def _density_panel(ax, samples: dict[str, np.ndarray], palette, title: str) -> None:
    bins = np.linspace(-8, 8, 81)
    centers = 0.5 * (bins[1:] + bins[:-1])
    for opt, z in samples.items():
        h, _ = np.histogram(z, bins=bins, density=True)
        ok = h > 0
        kurt = sps.kurtosis(z, fisher=True, bias=False) if len(z) > 3 else np.nan
        ax.semilogy(centers[ok], h[ok], drawstyle="steps-mid", color=palette[opt], lw=1,
                    label=f"{opt} (excess kurtosis {kurt:.2f}, n={len(z)})")
    ax.semilogy(centers, sps.norm.pdf(centers), "k--", lw=0.8, label="N(0, 1)")
    ax.set(xlabel="standardized value", ylabel="density", title=title, ylim=(1e-5, 1))
    ax.legend(fontsize=6, loc="lower center")


def plot_increments_tails(res: Results):
    fig, axes = new_figure(1, 3, width=4.0, height=3.3)
    palette = optimizer_palette(r.optimizer for r in res.runs)
    inc = _standardized_increments(res, "weights")
    if inc:
        _density_panel(axes[0, 0], inc, palette, "weight increments (per coordinate standardized)")
    else:
        no_data(axes[0, 0], "no weight trajectories", title="weight increments")
    tails = estimates_table(res, "tail", categories=("weights", "training", "gradnoise"))
    _ci_panel(axes[0, 1], tails.assign(null=np.nan) if not tails.empty else tails, palette, reference=1.0,
              title="Hill tail index ÷ Gaussian-surrogate median (CI)", ylabel="ratio (< 1: heavier tails)",
              why_empty="no tail-index estimates in the stats outputs")
    noise = _standardized_increments(res, "gradnoise")
    if noise:
        _density_panel(axes[0, 2], noise, palette, "gradient noise (minibatch − large batch)")
    else:
        no_data(axes[0, 2], "no gradient-noise captures", title="gradient noise")
    return fig
