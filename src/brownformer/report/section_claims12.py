"""Claims 1 and 2 in the report: each run's verdict per criterion with its estimate, interval and margin.

Read from claims.json (the per-run records' details.criteria, written by stats/claims/claim1_sphere.py and
stats/claims/claim2_markov.py); this module formats, it never decides.
"""
from __future__ import annotations

import math

import pandas as pd

from brownformer.report.context import ReportContext
from brownformer.report.markdown import fmt, fmt_ci, md_table
from brownformer.stats.claims.details import criteria_of

__all__ = ["criteria_table", "sphere_text", "markov_text", "CRITERION_NAMES", "CRITERION_LABELS", "bound_text"]

#: what each claim-1/2 criterion (details.criteria of a decided record) measures, in full and as a short label
CRITERION_NAMES = {"radius_spread_ratio": "radius spread / Gaussian cloud's (after the affine map)",
                   "offset": "centre offset from the origin (radii)",
                   "head_isotropy": "min over heads of (tr M)²/(d_h ‖M‖²_F), M = W_Qᵀ W_K",
                   "vmf_output_error": "attention-output error of the fitted vMF kernel",
                   "reversibility": "detailed-balance residual"}
CRITERION_LABELS = {"radius_spread_ratio": "radius spread / Gaussian cloud", "offset": "centre offset (radii)",
                    "head_isotropy": "head isotropy (relative to d_h/d)", "vmf_output_error": "vMF output error",
                    "reversibility": "detailed-balance residual"}
#: the criteria judged by a lower bound (every other one by an upper bound)
_LOWER_BOUNDED = ("head_isotropy",)


def bound_text(name: str, margin) -> str:
    """A criterion's margin as the bound it is: '≥ 0.5' (head isotropy) or '≤ 0.25'."""
    lo, hi = (_num(m) for m in (margin or [math.nan, math.nan]))
    return f"≥ {fmt(lo)}" if name in _LOWER_BOUNDED else f"≤ {fmt(hi)}"


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def criteria_table(ctx: ReportContext, claim_id: str) -> pd.DataFrame:
    """run | criterion | estimate (CI) | margin | verdict, for every configuration record of one claim (decided over
    its seeds; the per-seed records are description), else every run record."""
    claims = ctx.results.claims
    rec = claims.claims.get(claim_id) if claims else None
    rows = []
    for run, sub in sorted(((rec.per_model or rec.per_run) if rec else {}).items()):
        for name, c in criteria_of(sub.details):
            ci = c.confidence_interval or [None, None]
            est = _num(c.estimate)
            value = (f"{fmt(est)}" + (f" {fmt_ci(_num(ci[0]), _num(ci[1]))}" if ci[0] is not None else "")
                     if math.isfinite(est) else f"undefined ({getattr(c, 'why_undefined', None) or 'no value'})")
            rows.append({"run": run, "criterion": CRITERION_NAMES.get(name, name), "estimate (CI)": value,
                         "margin": bound_text(name, c.margin), "verdict": c.verdict})
    return pd.DataFrame(rows, columns=["run", "criterion", "estimate (CI)", "margin", "verdict"])


def _figures(ctx: ReportContext, key: str) -> str:
    figs = ctx.figures_of(key)
    return ("\n\nSee " + " and ".join(ctx.ref(f) for f in figs) + ".") if figs else ""


def sphere_text(ctx: ReportContext) -> str:
    """Claim 1: the definitional check named as such, then the criteria per run."""
    intro = ("Before the affine map every LayerNorm output lies on the sphere of radius √d in the hyperplane "
             "Σz = 0 by definition (whenever a token's variance exceeds ~50 ε): checked, not evidence. The claim is "
             "decided on what the model computes: in a pre-LN block γ and β fold into the next linear maps (a gauge), "
             "so on z itself; in a post-LN block after the affine map, on the spread of token radii about the "
             "centre β relative to a Gaussian cloud of the same covariance, and the distance of β from the origin. "
             "Each interval is over seeds (training runs); every layer must be inside both margins "
             "(methods: docs/methods/claims12.md).")
    return _claim_text(ctx, "1", intro)


def markov_text(ctx: ReportContext) -> str:
    """Claim 2: the three criteria per run, with the rank bound stated."""
    intro = ("Row-stochasticity holds by construction. Per head, M = W_Qᵀ W_K/√d_h has rank ≤ d_h, which caps its "
             "identity fraction (tr M)²/(d ‖M‖²_F) at d_h/d: no single head is isotropic on the whole sphere, so "
             "each head is judged relative to that bound (1 = isotropic within its subspace). The fitted isotropic "
             "(von Mises–Fisher) kernel is judged by a consequence, the relative error of the attention output when "
             "it replaces the attention, against the mean field; reversibility by the detailed-balance residual "
             "(undefined for the causal LM, whose first token absorbs the chain).")
    return _claim_text(ctx, "2", intro)


def _claim_text(ctx: ReportContext, key: str, intro: str) -> str:
    """The intro, the per-criterion table of claim `key` and its figures."""
    t = criteria_table(ctx, key)
    body = md_table(t) if not t.empty else "Per-criterion values: not available (claims.json has none)."
    return intro + "\n\n" + body + _figures(ctx, key)
