"""Report sections computed from the results: abstract, verdicts, per-claim results, optimizer comparison."""
from __future__ import annotations

import logging
import re

import numpy as np
import pandas as pd

from brownformer.plots.training import time_to_target
from brownformer.report.claims import VERDICT_LABELS, claims_table
from brownformer.report.context import ReportContext, fmt, fmt_ci, md_table

log = logging.getLogger(__name__)

__all__ = ["verdicts", "abstract", "verdict_table", "results_sections", "optimizer_comparison", "comparison_table"]

# Which claims.json entries belong to which claim of the paper (matched on the claim's name).
CLAIM_GROUPS = (
    ("Claim 1: tokens on a hypersphere after LayerNorm", r"sphere|layernorm|^ln", ("sphere_norms",)),
    ("Claim 2: attention as a Markov transition matrix", r"markov|attention|kernel|revers", ("markov_spectra",)),
    ("Claim 3 (depth): token updates across layers", r"depth|layer", ("depth_cosine",)),
    ("Claim 3 (training): trajectories over training", r"train|weight|step|grad|brown", ("training_msd", "increments_tails")),
    ("Claim 4: iterative K-FAC against first-order baselines", r"kfac|k-fac|optim", ()),
)


def verdicts(ctx: ReportContext) -> pd.DataFrame:
    return claims_table(ctx.results.claims, ctx.results.summary)


def _group_of(claim: str) -> int:
    last = len(CLAIM_GROUPS) - 1
    if re.search(CLAIM_GROUPS[last][1], claim, flags=re.I):  # "kfac_training" is claim 4, not 3
        return last
    for i, (_, pattern, _) in enumerate(CLAIM_GROUPS):
        if re.search(pattern, claim, flags=re.I):
            return i
    return len(CLAIM_GROUPS)


def _headline(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return table
    head = table[table["scope"] == "headline"]
    if head.empty:  # only per-run verdicts: summarise each claim by its most common verdict
        head = (table.groupby("claim")["verdict"].agg(lambda s: s.value_counts().idxmax()).reset_index()
                .assign(title=lambda d: d["claim"], estimate_name="", effect_size=np.nan, ci_low=np.nan,
                        ci_high=np.nan, p_value=np.nan, tests="majority of per-run verdicts", scope="headline"))
    return head


def verdict_table(ctx: ReportContext) -> pd.DataFrame:
    """Headline verdicts: claim, statement, verdict, effect size with CI, p-value, tests."""
    head = _headline(verdicts(ctx))
    if head.empty:
        return head
    statements = [CLAIM_GROUPS[_group_of(c)][0].split(": ", 1)[-1] if t == c and _group_of(c) < len(CLAIM_GROUPS) else t
                  for c, t in zip(head["claim"], head["title"])]
    return pd.DataFrame({"claim": head["claim"], "statement": statements, "verdict": head["verdict"].str.upper(),
                         "effect size": [f"{n}: {fmt(e)}" if n else fmt(e) for n, e in
                                         zip(head["estimate_name"], head["effect_size"])],
                         "CI": [fmt_ci(lo, hi) for lo, hi in zip(head["ci_low"], head["ci_high"])],
                         "p": [fmt(p) for p in head["p_value"]], "tests": head["tests"]})


def _counts_by_optimizer(table: pd.DataFrame) -> pd.DataFrame:
    per = table[table["scope"] == "run"]
    if per.empty or per["optimizer"].isna().all():
        return pd.DataFrame()
    counts = per.groupby(["claim", "optimizer", "verdict"]).size().unstack(fill_value=0)
    for v in VERDICT_LABELS:
        if v not in counts:
            counts[v] = 0
    return counts[list(VERDICT_LABELS)].reset_index()


def comparison_table(ctx: ReportContext) -> pd.DataFrame:
    """Per model and optimizer: seeds, final metric, steps and seconds to target, ratios to the target optimizer."""
    tt = time_to_target(ctx.results)
    if tt.empty:
        return tt
    target_opt = ctx.cfg.report.get("target_optimizer", "adamw")
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


def _kfac_sentences(ctx: ReportContext, comp: pd.DataFrame) -> list[str]:
    target_opt = ctx.cfg.report.get("target_optimizer", "adamw")
    out = []
    for _, r in comp[comp["optimizer"].str.contains("kfac", case=False)].iterrows():
        if r["reached"] == 0:
            out.append(f"On `{r['model']}`, `{r['optimizer']}` never reached {target_opt}'s final "
                       f"{r['metric']} ({fmt(r['target'])}) in {r['seeds']} seed(s): not better.")
            continue
        sr, wr = r["steps ratio"], r["seconds ratio"]
        fewer = "fewer" if sr < 1 else "more"
        faster = "less" if wr < 1 else "more"
        out.append(f"On `{r['model']}`, `{r['optimizer']}` reached {target_opt}'s final {r['metric']} in "
                   f"{r['reached']}/{r['seeds']} seeds, with {fmt(sr)}× the steps ({fewer} steps) and {fmt(wr)}× the "
                   f"wall-clock ({faster} time) of {target_opt} (medians over seeds; targets: ≤ 0.75× steps, ≤ 1.0× time).")
    return out


def abstract(ctx: ReportContext) -> str:
    cfg, res = ctx.cfg, ctx.results
    runs = cfg.runs()
    n_trained = res.metrics["run"].nunique() if not res.metrics.empty else 0
    head = _headline(verdicts(ctx))
    if head.empty:
        verdict_text = "No verdicts were available when this report was built (claims.json missing)."
    else:
        counts = head["verdict"].value_counts()
        verdict_text = (f"Of {len(head)} headline claims, {counts.get('supported', 0)} are supported, "
                        f"{counts.get('not supported', 0)} not supported and {counts.get('inconclusive', 0)} "
                        "inconclusive: " + "; ".join(f"{c}: {v}" for c, v in zip(head["claim"], head["verdict"])) + ".")
    comp = comparison_table(ctx)
    kfac = " ".join(_kfac_sentences(ctx, comp)) if not comp.empty else "No training metrics were available."
    title = cfg.report.get("title", "Brownian motion in the transformer: a replication")
    return "\n".join([
        f"# {title}", "",
        "**Abstract.** We test the claims of “The Brownian motion in the transformer model” (arXiv 2107.05264) "
        f"on {len(cfg.models)} model variant(s) ({', '.join(cfg.models)}) trained with {len(cfg.optimizers)} "
        f"optimizer(s) ({', '.join(cfg.optimizers)}) over {len(cfg.seeds)} seed(s): {n_trained} of {len(runs)} "
        f"runs finished. {verdict_text} {kfac}"])


def _claim_section(ctx: ReportContext, i: int, table: pd.DataFrame) -> list[str]:
    title, _, figs = CLAIM_GROUPS[i]
    parts = [f"### 3.{i + 3} {title}"]
    rows = table[table["claim"].map(_group_of) == i] if not table.empty else table
    head = _headline(rows) if not rows.empty else rows
    if head.empty:
        parts.append("Verdict: not available (no matching entry in claims.json).")
    for _, r in head.iterrows():
        parts.append(f"- **{r['claim']}** — {r['title']}: **{r['verdict']}**; {r['estimate_name'] or 'effect size'} "
                     f"{fmt(r['effect_size'])}, CI {fmt_ci(r['ci_low'], r['ci_high'])}, p = {fmt(r['p_value'])}"
                     + (f"; tests: {r['tests']}" if r["tests"] else "") + (f". {r['reason']}" if r["reason"] else "") + ".")
    if figs:
        parts.append("\nSee " + " and ".join(ctx.ref(f) for f in figs) + ".")
    return parts


def results_sections(ctx: ReportContext) -> list[tuple[str, list[str]]]:
    """(markdown, figure stems to show after it) for each results subsection, in order."""
    table = verdicts(ctx)
    vt = verdict_table(ctx)
    counts = _counts_by_optimizer(table)
    out = [("\n".join(["## 3. Results", "", "### 3.1 Verdicts",
                       "Headline verdicts (Holm-corrected across claims where the statistics stage applied it):", "",
                       md_table(vt) if not vt.empty else "Verdicts: not available (claims.json missing or empty).", "",
                       "Per-run verdicts by optimizer (number of runs):", "",
                       md_table(counts) if not counts.empty else "Per-run verdicts: not available."]), []),
           ("### 3.2 Training runs\nLoss and validation metric of every run against steps and wall-clock "
            f"({ctx.ref('training_curves')}), and the steps and seconds each optimizer needs to reach the target "
            f"({ctx.ref('time_to_target')}); Section 4 compares the optimizers.", ["training_curves", "time_to_target"])]
    for i in range(len(CLAIM_GROUPS) - 1):
        out.append(("\n".join(_claim_section(ctx, i, table)), list(CLAIM_GROUPS[i][2])))
    out.append(("### 3.7 Calibration of the test battery\nSize on Brownian motion and power against each "
                "alternative at the sizes of the real trajectories (" + ctx.ref("calibration") + "). "
                + _calibration_text(ctx), ["calibration"]))
    out.append((f"### 3.8 Overview\nThe verdict of every claim on every run ({ctx.ref('claims_overview')}).",
                ["claims_overview"]))
    return out


def _calibration_text(ctx: ReportContext) -> str:
    from brownformer.plots.calibration import calibration_matrix
    mat = calibration_matrix(ctx.results)
    if mat.empty:
        return "Calibration table: not available."
    null_col = next((c for c in mat.columns if str(c) in ("brownian", "null")), None)
    parts = []
    if null_col is not None:
        size = mat[null_col]
        bad = size[(size < 0.02) | (size > 0.08)]
        parts.append(f"Size ranges {fmt(size.min())}–{fmt(size.max())}; "
                     + ("all tests within [0.02, 0.08]." if bad.empty else
                        f"outside [0.02, 0.08]: {', '.join(f'{k} ({fmt(v)})' for k, v in bad.items())}."))
    alt = mat.drop(columns=[null_col]) if null_col is not None else mat
    if not alt.empty:
        low = alt.stack()
        low = low[low < 0.9]
        parts.append(f"{len(low)} of {alt.size} (test, alternative) pairs have power below 0.9.")
    return " ".join(parts)


def optimizer_comparison(ctx: ReportContext) -> str:
    comp = comparison_table(ctx)
    target_opt = ctx.cfg.report.get("target_optimizer", "adamw")
    parts = ["## 4. Optimizer comparison (claim 4)", "",
             f"Target: the median over seeds of {target_opt}'s final validation metric for each model variant "
             f"(accuracy for images, bits per character for text). {ctx.ref('training_curves')} shows the curves, "
             f"{ctx.ref('time_to_target')} the steps and seconds to the target and K-FAC's time per step.", ""]
    if comp.empty:
        parts.append("Optimizer comparison: not available (no training metrics).")
        return "\n".join(parts)
    parts += [md_table(comp), ""]
    table = verdicts(ctx)
    kfac_rows = table[table["claim"].map(_group_of) == len(CLAIM_GROUPS) - 1] if not table.empty else table
    for _, r in _headline(kfac_rows).iterrows() if not kfac_rows.empty else []:
        parts.append(f"Statistics-stage verdict for **{r['claim']}** (the proposed optimizer's time to target has a "
                     f"bootstrap CI over seeds entirely below every baseline's, in steps and seconds): **{r['verdict']}**.")
    per_model = kfac_rows[kfac_rows["scope"] == "model"] if not kfac_rows.empty else kfac_rows
    for _, r in per_model.iterrows():
        parts.append(f"- `{r['model']}`: {r['verdict']}")
    parts.append("")
    sentences = _kfac_sentences(ctx, comp)
    if sentences:
        parts += ["**Conclusion.** " + " ".join(sentences)]
    else:
        parts.append("No K-FAC optimizer is in the grid, so claim 4 is not tested here.")
    best = comp.sort_values(["model", "seconds to target"]).groupby("model").head(1)
    parts.append("Fastest to the target in wall-clock per model: " + "; ".join(
        f"`{m}`: `{o}` ({fmt(s)} s)" if np.isfinite(s) else f"`{m}`: none reached it"
        for m, o, s in zip(best["model"], best["optimizer"], best["seconds to target"])) + ".")
    return "\n".join(parts)
