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
from brownformer.report.markdown import fmt, md_table
from brownformer.report.section_claims import claim_lines, scope_table
from brownformer.results import time_to_target_table
from brownformer.stats.survival import km_median

__all__ = ["comparison_table", "kfac_sentences", "optimizer_comparison", "proposed_optimizers", "claim4_inference"]


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


def comparison_table(ctx: ReportContext) -> pd.DataFrame:
    """Per model and optimizer: seeds, final metric, Kaplan-Meier median steps and seconds to target, ratios to the
    target optimizer's (inf: the median is not reached within the budget). The final metric and total seconds are
    medians over the runs that trained their whole budget (a run stopped at the target has neither); a column
    "stopped at target" counts the others when there are any."""
    tt = time_to_target_table(ctx.results)
    if tt.empty:
        return tt
    target_opt = ctx.cfg.report.target_optimizer
    rows = []
    for (model, opt), g in tt.groupby(["model", "optimizer"], sort=True):
        ref = tt[(tt["model"] == model) & (tt["optimizer"] == target_opt)]
        steps, secs = _km(g, "steps"), _km(g, "seconds")
        rows.append({"model": model, "optimizer": opt, "metric": g["metric"].iat[0], "target": g["target"].iat[0],
                     "seeds": len(g), "reached": int(g["reached"].sum()), "final (median)": g["final"].median(),
                     "steps to target": steps, "seconds to target": secs,
                     "steps ratio": _ratio(steps, _km(ref, "steps")) if len(ref) else np.nan,
                     "seconds ratio": _ratio(secs, _km(ref, "seconds")) if len(ref) else np.nan,
                     "total seconds": g["total_seconds"].median(),
                     "stopped at target": int(g["stopped"].sum()) if "stopped" in g else 0})
    table = pd.DataFrame(rows)
    return table if table["stopped at target"].any() else table.drop(columns="stopped at target")


def _ratio(a: float, b: float) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


def _spelled(x) -> str:
    """claims.json numbers: "inf" stays infinite (not reached within the budget), None is undefined."""
    if x is None:
        return "undefined"
    if x == "inf" or (isinstance(x, float) and math.isinf(x)):
        return "∞"
    return fmt(x)


def _ratio_text(r: dict | None) -> str:
    if not r:
        return "n/a"
    lo, hi = r.get("confidence_interval") or [None, None]
    return f"{_spelled(r.get('estimate'))} [{_spelled(lo)}, {_spelled(hi)}]"


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
        row["size of the rule"] = fmt(rates["size"]) if rates else "n/a"
        rows.append(row)
    steps = sorted({int(r["censored_at"]) for m in rec.per_model.values() for r in m.details.get("runs") or []
                    if isinstance(r.get("censored_at"), (int, float)) and math.isfinite(r["censored_at"])})
    return ["**Claim 4's scope and inference.** Decided on " + (", ".join(f"`{m}`" for m in scope) or "no model")
            + f" (at least 8 seeds of `{proposed}` and `{ctx.cfg.report.target_optimizer}`, evaluation "
            "every 5 steps on the whole validation split, the fixed target), budget "
            + (", ".join(map(str, steps)) or "n/a") + " steps. Ratios are of Kaplan-Meier medians of the steps to the "
            "target (a run that never reaches it is censored at the budget; ∞: the proposed optimizer's median is not "
            "reached, undefined: neither is), 95% percentile bootstrap over seeds; the log-rank test is one-sided "
            f"(`{proposed}` reaches the target sooner); the size is the simulated rate of \"supported\" with the true "
            "ratio on the margin, at the model's seeds, censoring and evaluation grid (docs/methods/claim4.md). The "
            "tuning that set every optimizer's settings is in the config's `tuned:` block (written by `brownformer "
            "tune`).", "", md_table(pd.DataFrame(rows)), ""]


def kfac_sentences(ctx: ReportContext, comp: pd.DataFrame) -> list[str]:
    """One sentence per (model, proposed optimizer): reached or not, steps and time ratios to the target."""
    target_opt = ctx.cfg.report.target_optimizer
    out = []
    for _, r in comp[comp["optimizer"].isin(proposed_optimizers(ctx))].iterrows():
        if r["reached"] == 0:
            out.append(f"On `{r['model']}`, `{r['optimizer']}` never reached the target {r['metric']} "
                       f"({fmt(r['target'])}) in {r['seeds']} seed(s).")
            continue
        sr, wr = r["steps ratio"], r["seconds ratio"]
        if not (np.isfinite(sr) and np.isfinite(wr)):
            out.append(f"On `{r['model']}`, `{r['optimizer']}` reached the target {r['metric']} ({fmt(r['target'])}) "
                       f"in {r['reached']}/{r['seeds']} seeds; steps ratio to {target_opt} {_spelled(sr)}, seconds "
                       f"ratio {_spelled(wr)} (Kaplan-Meier medians; ∞: its median is not reached within the budget).")
            continue
        fewer = "fewer" if sr < 1 else "more"
        faster = "less" if wr < 1 else "more"
        out.append(f"On `{r['model']}`, `{r['optimizer']}` reached the target {r['metric']} ({fmt(r['target'])}) in "
                   f"{r['reached']}/{r['seeds']} seeds, with {fmt(sr)}× the steps ({fewer} steps) and {fmt(wr)}× the "
                   f"wall-clock ({faster} time) of {target_opt} (Kaplan-Meier medians over seeds).")
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
    parts += [md_table(comp), ""]
    if "stopped at target" in comp:
        parts += [f"{int(comp['stopped at target'].sum())} metrics-only runs stopped at their first evaluation on the "
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
        f"`{m}`: `{o}` ({fmt(s)} s)" if np.isfinite(s) else f"`{m}`: none reached it"
        for m, o, s in zip(best["model"], best["optimizer"], best["seconds to target"])) + ".")
    return "\n".join(parts)
