"""Section 4 of the report: the optimizer comparison behind claim 4 (steps and seconds to a target)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from brownformer.report.claims import claim_lines, scope_table
from brownformer.report.context import ReportContext
from brownformer.report.markdown import fmt, md_table
from brownformer.results import time_to_target

__all__ = ["comparison_table", "kfac_sentences", "optimizer_comparison", "proposed_optimizers"]


def proposed_optimizers(ctx: ReportContext) -> list[str]:
    """The optimizer claim 4 is about: its role in the config, `report.proposed`."""
    return [ctx.cfg.report.proposed]


def comparison_table(ctx: ReportContext) -> pd.DataFrame:
    """Per model and optimizer: seeds, final metric, steps and seconds to target, ratios to the target optimizer."""
    tt = time_to_target(ctx.results)
    if tt.empty:
        return tt
    target_opt = ctx.cfg.report.target_optimizer
    rows = []
    for (model, opt), g in tt.groupby(["model", "optimizer"], sort=True):
        ref = tt[(tt["model"] == model) & (tt["optimizer"] == target_opt)]
        steps, secs = g["steps"].median(), g["seconds"].median()
        rows.append({"model": model, "optimizer": opt, "metric": g["metric"].iat[0], "target": g["target"].iat[0],
                     "seeds": len(g), "reached": int(g["reached"].sum()), "final (median)": g["final"].median(),
                     "steps to target": steps, "seconds to target": secs,
                     "steps ratio": steps / ref["steps"].median() if len(ref) else np.nan,
                     "seconds ratio": secs / ref["seconds"].median() if len(ref) else np.nan,
                     "total seconds": g["total_seconds"].median()})
    return pd.DataFrame(rows)


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
        fewer = "fewer" if sr < 1 else "more"
        faster = "less" if wr < 1 else "more"
        out.append(f"On `{r['model']}`, `{r['optimizer']}` reached the target {r['metric']} ({fmt(r['target'])}) in "
                   f"{r['reached']}/{r['seeds']} seeds, with {fmt(sr)}× the steps ({fewer} steps) and {fmt(wr)}× the "
                   f"wall-clock ({faster} time) of {target_opt} (medians over seeds).")
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
    per_model = scope_table(ctx, "4", "model")
    if not per_model.empty:
        parts += ["Claim 4 per model variant:", "", md_table(per_model), ""]
    if comp.empty:
        parts.append("Optimizer comparison: not available (no training metrics).")
        return "\n".join(parts)
    parts += [md_table(comp), ""]
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
