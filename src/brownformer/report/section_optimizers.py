"""Section 4 of the report: the optimizer comparison behind claim 4 (steps and seconds to a target).

Times to the target are censored at the budget (a run that never gets there): medians are
Kaplan-Meier medians (stats/survival.py), "not reached" when fewer than half the seeds get there.
The inference (ratios with bootstrap intervals, log-rank tests, the rule's simulated size, the scope)
is quoted from claims.json: this module formats, it never decides.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from brownformer.report.context import ReportContext
from brownformer.report.markdown import fmt, fmt_ci, md_table
from brownformer.report.phrases import count_noun, median_text, rate_text, ratio_text
from brownformer.report.section_claims import claim_lines, scope_table
from brownformer.results import time_to_target_table
from brownformer.stats.survival import km_median

__all__ = ["comparison_table", "display_table", "kfac_sentences", "optimizer_comparison", "proposed_optimizers",
           "claim4_inference"]


def proposed_optimizers(ctx: ReportContext) -> list[str]:
    """The optimizer claim 4 is about: its role in the config, `report.proposed`."""
    return [ctx.cfg.report.proposed]


def _km(g: pd.DataFrame, unit: str) -> float:
    """Kaplan-Meier median of one group's times (a run that never reached the target: censored after every event)."""
    reached = g["reached"].to_numpy(bool)
    if not reached.any():
        return math.inf
    times = g[unit].to_numpy(float)
    censored = g["censored_at"].to_numpy(float) if unit == "steps" and "censored_at" in g else np.full(len(g), np.nan)
    latest = np.nanmax(times[reached])
    censored = np.where(np.isfinite(censored), np.maximum(censored, latest), latest)
    return km_median(np.where(reached, times, censored), reached)


def _budget(g: pd.DataFrame, unit: str) -> float:
    """Where a group's runs that never reached the target were censored: its step budget, or for seconds the
    longest wall-clock of those runs (NaN when every run reached it)."""
    missed = g[~g["reached"].astype(bool)]
    if missed.empty:
        return math.nan
    col = "censored_at" if unit == "steps" and "censored_at" in missed else "total_seconds"
    values = pd.to_numeric(missed[col], errors="coerce") if col in missed else pd.Series(dtype=float)
    return float(values.max()) if values.notna().any() else math.nan


def comparison_table(ctx: ReportContext) -> pd.DataFrame:
    """Per model and optimizer: seeds, censored runs, final metric, Kaplan-Meier median steps and seconds to target
    (inf: not reached within the budget) and where the censored runs stopped; numbers, formatted by
    `display_table`. The final metric and total seconds are medians over the runs that trained their whole budget
    (a run stopped at the target has neither); "stopped at target" counts the others."""
    tt = time_to_target_table(ctx.results)
    if tt.empty:
        return tt
    rows = []
    for (model, opt), g in tt.groupby(["model", "optimizer"], sort=True):
        rows.append({"model": model, "optimizer": opt, "metric": g["metric"].iat[0], "target": g["target"].iat[0],
                     "seeds": len(g), "reached": int(g["reached"].sum()), "censored": int((~g["reached"]).sum()),
                     "final (median)": g["final"].median(),
                     "steps to target": _km(g, "steps"), "seconds to target": _km(g, "seconds"),
                     "steps budget": _budget(g, "steps"), "seconds budget": _budget(g, "seconds"),
                     "total seconds": g["total_seconds"].median(),
                     "stopped at target": int(g["stopped"].sum()) if "stopped" in g else 0})
    return pd.DataFrame(rows)


def _ratio_to_reference(comp: pd.DataFrame, row, unit: str, target_opt: str) -> str:
    """This row's median over the target optimizer's on the same model, as a bound when a median is censored."""
    if row["optimizer"] == target_opt:
        return "1 (reference)"
    ref = comp[(comp["model"] == row["model"]) & (comp["optimizer"] == target_opt)]
    if ref.empty:
        return "n/a"
    r = ref.iloc[0]
    return ratio_text(row[f"{unit} to target"], r[f"{unit} to target"], num_budget=row[f"{unit} budget"],
                      den_budget=r[f"{unit} budget"])


def display_table(ctx: ReportContext, comp: pd.DataFrame) -> pd.DataFrame:
    """The comparison as text: medians with their censoring ("not reached (5 of 8 censored)"), ratios to the
    target optimizer's as bounds where a median is censored (never 0 or inf)."""
    target_opt = ctx.cfg.report.target_optimizer
    out = pd.DataFrame({
        "model": comp["model"], "optimizer": comp["optimizer"], "metric": comp["metric"],
        "target": comp["target"].map(fmt), "seeds": comp["seeds"],
        "final (median)": comp["final (median)"].map(fmt),
        "steps to target": [median_text(r["steps to target"], n=r["seeds"], censored=r["censored"])
                            for _, r in comp.iterrows()],
        "seconds to target": [median_text(r["seconds to target"], n=r["seeds"], censored=r["censored"])
                              for _, r in comp.iterrows()],
        f"steps ratio to {target_opt}": [_ratio_to_reference(comp, r, "steps", target_opt)
                                         for _, r in comp.iterrows()],
        f"seconds ratio to {target_opt}": [_ratio_to_reference(comp, r, "seconds", target_opt)
                                           for _, r in comp.iterrows()],
        "total seconds": comp["total seconds"].map(fmt)})
    if comp["stopped at target"].any():
        out["stopped at target"] = comp["stopped at target"]
    return out


def _number(x) -> float:
    """claims.json numbers: "inf" (not reached within the budget) as inf, None (undefined) as NaN."""
    if x == "inf":
        return math.inf
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


def _ratio_text(r: dict | None) -> str:
    """A ratio of medians with its interval; where a median is not reached, the bound its interval gives."""
    if not r:
        return "n/a"
    est = _number(r.get("estimate"))
    lo, hi = (_number(x) for x in (r.get("confidence_interval") or [None, None]))
    num, den = (_number(m) for m in (r.get("medians") or [est, 1.0]))
    if math.isinf(num) and math.isinf(den):
        return "undefined (neither median reached)"
    if math.isinf(den):  # the other optimizer's median is not reached: the ratio is below the interval's top
        return f"< {fmt(hi)} (its median not reached)" if math.isfinite(hi) else "undefined"
    if math.isinf(num):
        return f"> {fmt(lo)} (the median of the proposed optimizer not reached)" if math.isfinite(lo) else "undefined"
    return f"{fmt(est)} {fmt_ci(lo, hi)}"


def claim4_inference(ctx: ReportContext) -> list[str]:
    """Claim 4's scope and, per model variant, the ratios of Kaplan-Meier medians with their intervals, the
    log-rank tests against every other optimizer and the simulated size of the rule (from claims.json)."""
    claims = ctx.results.claims
    rec = claims.claims.get("4") if claims else None
    if rec is None or not rec.per_model:
        return []
    proposed = rec.details.get("proposed", "the proposed optimizer")
    scope = rec.details.get("scope") or []
    rows, others = [], sorted({o for m in rec.per_model.values() for o in (m.details.get("ratios") or {})})
    for model, m in sorted(rec.per_model.items()):
        d = m.details
        row = {"model": model, "in scope": "yes" if d.get("protocol_met") else "no (protocol not met)",
               "verdict": m.verdict}
        for other in others:
            row[f"{proposed} / {other} steps [CI]"] = _ratio_text((d.get("ratios") or {}).get(other, {}).get("steps"))
            row[f"log-rank p vs {other}"] = fmt((d.get("logrank") or {}).get(other, {}).get("pvalue"))
        rates = d.get("rule_error_rates")
        row["size of the rule"] = (rate_text(float(rates["size"]), n=_number(rates.get("replicates")))
                                   if rates and rates.get("size") is not None else "not calibrated")
        rows.append(row)
    steps = sorted({int(r["censored_at"]) for m in rec.per_model.values() for r in m.details.get("runs") or []
                    if isinstance(r.get("censored_at"), (int, float)) and math.isfinite(r["censored_at"])})
    return ["**Claim 4's scope and inference.** Decided on " + (", ".join(f"`{m}`" for m in scope) or "no model")
            + f" (at least 8 seeds of `{proposed}` and `{ctx.cfg.report.target_optimizer}`, evaluation "
            "every 5 steps on the whole validation split, the fixed target), budget "
            + (", ".join(map(str, steps)) or "n/a") + " steps. Ratios are of Kaplan-Meier medians of the steps to the "
            "target (a run that never reaches it is censored at the budget; a median not reached makes the ratio a "
            "bound, read from the interval), 95% percentile bootstrap over seeds; the log-rank test is one-sided "
            f"(`{proposed}` reaches the target sooner); the size is the simulated rate of \"supported\" with the true "
            "ratio on the margin, at the model's seeds, censoring and evaluation grid (docs/methods/claim4.md). The "
            "tuning that set every optimizer's settings is in the config's `tuned:` block (written by `brownformer "
            "tune`).", "", md_table(pd.DataFrame(rows)), ""]


def kfac_sentences(ctx: ReportContext, comp: pd.DataFrame) -> list[str]:
    """One sentence per (model, proposed optimizer): reached or not, steps and time to target against the target
    optimizer's (Kaplan-Meier medians; a censored median is "not reached", a ratio over it a bound)."""
    target_opt = ctx.cfg.report.target_optimizer
    out = []
    for _, r in comp[comp["optimizer"].isin(proposed_optimizers(ctx))].iterrows():
        if r["reached"] == 0:
            out.append(f"On `{r['model']}`, `{r['optimizer']}` never reached the target {r['metric']} "
                       f"({fmt(r['target'])}) in {count_noun(r['seeds'], 'seed')}.")
            continue
        ref = comp[(comp["model"] == r["model"]) & (comp["optimizer"] == target_opt)]
        base = ""
        if not ref.empty:
            b = ref.iloc[0]
            base = (f"; {target_opt}: median "
                    f"{median_text(b['steps to target'], n=b['seeds'], censored=b['censored'], unit='steps')}")
        out.append(f"On `{r['model']}`, `{r['optimizer']}` reached the target {r['metric']} ({fmt(r['target'])}) in "
                   f"{r['reached']} of {count_noun(r['seeds'], 'seed')}, median "
                   f"{median_text(r['steps to target'], n=r['seeds'], censored=r['censored'], unit='steps')}{base}: "
                   f"steps ratio {_ratio_to_reference(comp, r, 'steps', target_opt)}, wall-clock ratio "
                   f"{_ratio_to_reference(comp, r, 'seconds', target_opt)} (Kaplan-Meier medians over seeds).")
    return out


def optimizer_comparison(ctx: ReportContext) -> str:
    """Section 4: the table, claim 4's verdict with its evidence, and a conclusion per model."""
    comp = comparison_table(ctx)
    target_opt = ctx.cfg.report.target_optimizer
    figs = " and ".join(ctx.ref(s) for s in ctx.figures_of("training"))
    parts = ["## 4. Optimizer comparison (claim 4)", "",
             "Target: claim 4's fixed target of each model variant's validation metric (accuracy for images, "
             "bits per character for text): the config's `report.targets`, else a fixed share of the improvement "
             f"of {target_opt}'s mean curve (brownformer.stats.time_to_target.reference_target). {figs} show the "
             "curves, the steps and seconds to the target and K-FAC's time per step.", ""]
    parts += claim_lines(ctx, ("4",)) + [""]
    parts += claim4_inference(ctx)
    per_model = scope_table(ctx, "4", "model")
    if not per_model.empty:
        parts += ["Claim 4 per model variant:", "", md_table(per_model), ""]
    if comp.empty:
        parts.append("Optimizer comparison: not available (no training metrics).")
        return "\n".join(parts)
    parts += [md_table(display_table(ctx, comp)), ""]
    if comp["stopped at target"].any():
        n_stopped = count_noun(int(comp["stopped at target"].sum()), "metrics-only run")
        parts += [f"{n_stopped} stopped at their first evaluation on the "
                  "target (grid blocks with `stop_at_target`): they count in the steps and seconds to the target; the "
                  "final metric and total seconds are medians over the runs that trained their whole budget.", ""]
    sentences = kfac_sentences(ctx, comp)
    if sentences:
        parts += ["**Conclusion.** " + " ".join(sentences)]
    else:
        in_grid = sorted({r.optimizer for r in ctx.cfg.runs()} & set(proposed_optimizers(ctx)))
        parts.append(f"No run of {', '.join(f'`{o}`' for o in in_grid)} enters claim 4's comparison (it did not "
                     "train or has no metrics; Section 3.2 lists the runs left out), so claim 4 has no evidence here."
                     if in_grid else
                     f"The proposed optimizer `{ctx.cfg.report.proposed}` is not in the grid, so claim 4 is not "
                     "tested here.")
    best = comp.sort_values(["model", "seconds to target"]).groupby("model").head(1)
    parts.append("Fastest to the target in wall-clock per model: " + "; ".join(
        f"`{m}`: `{o}` (median {fmt(s)} s)" if np.isfinite(s) else f"`{m}`: no optimizer's median reached it"
        for m, o, s in zip(best["model"], best["optimizer"], best["seconds to target"])) + ".")
    return "\n".join(parts)
