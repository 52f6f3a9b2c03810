"""Claim 3's reading on its pre-fixed window: the report text of sections 3a and 3b."""
from __future__ import annotations

import pandas as pd

from brownformer.report.context import ReportContext
from brownformer.report.markdown import fmt, md_table
from brownformer.results import window_table

__all__ = ["claim3_reading_text"]


def _window_rule(ctx: ReportContext) -> str:
    w = ctx.cfg.stats.window
    lags = {run.optimizer: ctx.cfg.analysis_window(run.run_id).min_gap for run in ctx.cfg.probed_runs()}
    lag = ", ".join(f"{o} {n}" for o, n in sorted(lags.items())) or "none"
    return (f"Claim 3 is read on a window fixed in the config before the data: over training, displacements start "
            f"at the first capture at or after step {w['start_step']} (the warm-up's end) and only lags of at least "
            f"the run's momentum time count ({ctx.cfg.stats.momentum_times:g} x 1/(1 - beta) of its own optimizer, in "
            f"steps: {lag}), on each trajectory's own clock; over "
            "depth the window is every layer. Inside it the curve is MSD = c + D t^alpha (c: the capture noise of "
            "float16 storage, computed from the precision) and read through its local slope against the envelope of Brownian "
            f"motion simulated at the file's shape ({w['envelope_replicates']} replicates). The verdict rests on the "
            "window exponent: the mean over walkers of their own log-log slopes (bias-corrected by the simulations), "
            "which walkers diffusing at different rates leave at 1. “Sub-” or “superdiffusive” is said only "
            "where "
            f"that exponent lies outside the margin and the local slope is flat across the window (late minus early "
            f"half within ±{w['flat_margin']:g}); a curve that bends is a crossover; walkers of which a real share is "
            "Brownian and a real share is not are “mixed”.")


def claim3_reading_text(ctx: ReportContext, claims: tuple[str, ...]) -> str:
    """The window rule, then per claim the readings' counts and the exponents before and after the window."""
    parts = [_window_rule(ctx)]
    t = window_table(ctx.results)
    t = t[t["claim"].isin(claims)] if not t.empty else t
    if t.empty:
        parts.append("No per-file window readings are available (run `brownformer stats run` with this version).")
    else:
        rows = []
        deciding = set(t.loc[t["unit"] == "replica", "claim"])  # 3b/3c are decided on replica contrasts where present
        for (claim, unit), g in t.groupby(["claim", "unit"]):
            counts = g["reading"].fillna("inconclusive").value_counts()
            walk = g["walkers"].fillna("undefined").value_counts()
            role = ("replica contrasts (decide)" if unit == "replica" else
                    "single paths (description)" if claim in deciding else "probe inputs of each run (decide)")
            rows.append({"claim": claim, "files": f"{len(g)}: {role}",
                         "readings": ", ".join(f"{n} {c}" for c, n in counts.items()),
                         "walkers": ", ".join(f"{n} {c}" for c, n in walk.items()),
                         "rates spread": int((g["rates"] == "spread").sum()),
                         "window exponent (median)": fmt(g["window_exponent"].astype(float).median()),
                         "ensemble exponent (median)": fmt(g["ensemble_exponent"].astype(float).median()),
                         "full-range exponent (median)": fmt(g["full_range_exponent"].astype(float).median())})
        parts.append("\nPer claim, the window readings of its trajectory files, the walkers' reading, and the "
                     "exponent in the window against the one-exponent-per-file fit over the whole range:\n")
        parts.append(md_table(pd.DataFrame(rows)))
        cross = t[t["reading"] == "crossover"]
        if not cross.empty:
            parts.append(f"\nExample crossover ({cross.iloc[0]['run']}, {cross.iloc[0]['file']}): "
                         f"{cross.iloc[0]['description']}.")
    if "local_slopes" in ctx.figure_numbers:  # every claim-3 verdict shows its local-slope curves (3a's too)
        parts.append(f"\nThe local-slope curves of every file of {', '.join(claims)}, against the Brownian envelope, are "
                     f"in {ctx.ref('local_slopes')} (where a family also has description-only single-path files, the "
                     "replica-contrast files its verdict rests on are drawn bold).")
    figs = [f for key in ("3a", "3b") for f in ctx.figures_of(key) if key in claims or key == "3b" and "3c" in claims]
    if figs:
        parts.append("\nSee " + " and ".join(ctx.ref(f) for f in dict.fromkeys(figs)) + ".")
    return "\n".join(parts)
