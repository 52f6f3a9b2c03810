"""The verdicts of claims.json as report text: per claim its verdict, estimate with CI, margin,
the calibrated size and power of the exact rule at its shape, and the reason.

Everything comes from brownformer.results (claims_frame over the typed ClaimsFile): this module
formats, it never decides or re-spells a verdict.
"""
from __future__ import annotations

import math

import pandas as pd

from brownformer.report.context import ReportContext
from brownformer.report.deciding import claim4_estimate, deciding
from brownformer.report.markdown import fmt, fmt_ci, md_table
from brownformer.report.phrases import rate_text, tidy
from brownformer.results import claims_frame, did_not_train_frame
from brownformer.verdicts import VERDICTS

__all__ = ["claim_table", "headline_table", "claim_lines", "scope_table", "did_not_train_text", "counts_by_optimizer",
           "calibration_text"]


def claim_table(ctx: ReportContext) -> pd.DataFrame:
    """All verdicts of claims.json as rows (brownformer.results.claims_frame)."""
    return claims_frame(ctx.results.claims)


def calibration_text(row: pd.Series) -> str:
    """"size 0.045 ± 0.01, power ≥ 0.93 (...) at shape ..., 400 replicates" or "not calibrated"."""
    if not row["calibrated"]:
        return "not calibrated"
    size = rate_text(row["size"], row["size_se"], row["n_replicates"])
    if row.get("fitted_files"):  # claim 3: the rule's size under both nulls (stats/diffusion/fitted_null.py)
        size += (f" under the idealised null, {fmt(row['size_fitted'])} under the fitted null "
                 f"({row['fitted_files']} files fitted)" if math.isfinite(row["size_fitted"]) else
                 f" under the idealised null, fitted null not simulated ({row['fitted_files']} files fitted)")
    power = (f"power ≥ {fmt(row['power'])}" + (f" ({row['power_by_alternative']})" if row["power_by_alternative"] else "")
             if math.isfinite(row["power"]) else "power not measured")
    parts = [f"size {size}", power]
    if math.isfinite(row["equivalence_power"]):
        parts.append(f"calls simulated Brownian motion “brownian” in {row['equivalence_power']:.0%} of replicates")
    if row["calibration_shape"]:
        parts.append(f"at shape {row['calibration_shape']}")
    if math.isfinite(row["n_replicates"]):
        parts.append(f"{fmt(row['n_replicates'])} replicates")
    return ", ".join(parts)


def _estimate_text(row: pd.Series) -> str:
    if not row["estimate_name"] and not math.isfinite(row["estimate"]):
        return "n/a"
    level = f" ({row['confidence_level']:.0%} CI)" if math.isfinite(row["confidence_level"]) else ""
    name = f"{row['estimate_name']} " if row["estimate_name"] else ""
    return f"{name}{fmt(row['estimate'])}, CI {fmt_ci(row['ci_low'], row['ci_high'])}{level}"


def headline_table(ctx: ReportContext) -> pd.DataFrame:
    """One row per claim: verdict, estimate with CI, margin, calibration of its rule, Holm p, reason."""
    t = claim_table(ctx)
    head = t[t["scope"] == "headline"]
    return pd.DataFrame({"claim": head["claim"], "statement": head["title"], "verdict": head["verdict"].str.upper(),
                         "estimate (CI)": [_headline_estimate(ctx, r) for _, r in head.iterrows()],
                         "margin": [fmt_ci(lo, hi) for lo, hi in zip(head["margin_low"], head["margin_high"])],
                         "size and power of the rule": [_rule_text(ctx, r) for _, r in head.iterrows()],
                         "Holm p": [fmt(p) for p in head["pvalue_holm"]], "reason": head["reason"].map(tidy)})


def _headline_estimate(ctx: ReportContext, row: pd.Series) -> str:
    """The headline estimate; claim 4's steps ratios (AFT estimates) as deciding.py bounds them (never 0 or inf)."""
    d = deciding(ctx, row["claim"]) if row["claim"] == "4" else None
    return d.estimate if d is not None else _estimate_text(row)


def _rule_text(ctx: ReportContext, row: pd.Series) -> str:
    """The headline record's calibration, else what the deciding record simulated (claim 4: per model)."""
    if row["calibrated"]:
        return calibration_text(row)
    d = deciding(ctx, row["claim"])
    return d.size_power if d is not None else "not calibrated"


def claim_lines(ctx: ReportContext, claim_ids: tuple[str, ...]) -> list[str]:
    """Markdown bullets that open a claim's section: its verdict and the criterion that decided it, then the
    headline record's estimate, calibration and reason (absent claims say so)."""
    t = claim_table(ctx)
    head = t[t["scope"] == "headline"].set_index("claim", drop=False)
    lines = []
    for cid in claim_ids:
        if cid not in head.index:
            lines.append(f"- **Claim {cid}**: verdict not available (no entry in claims.json).")
            continue
        r, d = head.loc[cid], deciding(ctx, cid)
        lines.append(f"- **Claim {cid}** — {r['title']}: **{r['verdict'].upper()}**, decided by {d.estimate} against "
                     f"the margin {d.margin} ({d.why}).")
        headline = _headline_estimate(ctx, r)
        shown = ([f"headline estimate {headline}; margin {fmt_ci(r['margin_low'], r['margin_high'])}"]
                 if headline != d.estimate else [])
        shown.append(f"rule: {_rule_text(ctx, r)}")
        if math.isfinite(r["pvalue_holm"]):
            shown.append(f"Holm p = {fmt(r['pvalue_holm'])}")
        text = "; ".join(shown)
        lines.append("  " + text[0].upper() + text[1:] + (f". Reason: {tidy(r['reason'])}" if r["reason"] else "")
                     + ".")
    return lines


def scope_table(ctx: ReportContext, claim_id: str, scope: str) -> pd.DataFrame:
    """A claim's verdicts per "run", "optimizer" or "model": key, verdict, estimate (CI), margin, reason."""
    t = claim_table(ctx)
    rows = t[(t["claim"] == claim_id) & (t["scope"] == scope)]
    rec = ctx.results.claims.claims.get(claim_id) if ctx.results.claims else None
    per_model = rec.per_model if rec is not None and claim_id == "4" and scope == "model" else {}
    return pd.DataFrame({scope: rows["key"], "verdict": rows["verdict"],
                         "estimate (CI)": [claim4_estimate(per_model[r["key"]], r["key"]) if r["key"] in per_model
                                           else _estimate_text(r) for _, r in rows.iterrows()],
                         "margin": [fmt_ci(lo, hi) for lo, hi in zip(rows["margin_low"], rows["margin_high"])],
                         "reason": rows["reason"].map(tidy)})


def did_not_train_text(ctx: ReportContext) -> str:
    """The runs left out of every claim because they did not train, as a table (or a sentence)."""
    dnt = did_not_train_frame(ctx.results.claims)
    if ctx.results.claims is None:
        return "Runs left out as “did not train”: not available (claims.json missing or unreadable)."
    if dnt.empty:
        return "No run was left out as “did not train” (diverged or ended at chance)."
    return ("Runs left out of every claim because they did not train (diverged or ended at chance); "
            "they are never pooled into a verdict:\n\n" + md_table(dnt))


def counts_by_optimizer(ctx: ReportContext) -> pd.DataFrame:
    """Per claim and optimizer: number of runs with each of the four verdicts."""
    t = claim_table(ctx)
    per = t[t["scope"] == "run"]
    if per.empty or per["optimizer"].isna().all():
        return pd.DataFrame()
    counts = per.groupby(["claim", "optimizer", "verdict"]).size().unstack(fill_value=0)
    for v in VERDICTS:
        if v not in counts:
            counts[v] = 0
    return counts[list(VERDICTS)].reset_index()
