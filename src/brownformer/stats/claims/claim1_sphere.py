"""Claim 1: LayerNorm outputs lie on a hypersphere, judged on what the next layer reads.

Definitional check (not evidence). Raw LayerNorm z = (x - mu)/sigma has 1^T z = 0 and |z|^2 = d sigma^2/
(sigma^2 + eps): the sphere S^(d-2) of radius sqrt(d) in the hyperplane 1^T z = 0 whenever a token's
variance exceeds ~50 eps. `fraction_on_sphere` of the raw output checks this and is reported as
details["definitional"]; it never decides the claim.

The decision (stats/sphere_fit.py). The next layer reads y = gamma * z + beta, an ellipsoid with centre beta.
For each capture of the trained model (second half of training, step 0 excluded) and each layer, on the LN
output after the affine map:
  - radius_spread_ratio = sd|y - beta| / E|y - beta| divided by the Gaussian-cloud null
    s_0 = sqrt(tr S^2 / 2) / tr S (S the second moment about beta): 0 on a sphere, ~1 for a cloud no rounder
    than a Gaussian of the same covariance; margin `radius_spread_ratio` (upper 0.5: norms at least twice as
    concentrated as concentration of measure alone makes them; for evenly spread tokens this is the
    coefficient of variation of gamma^2 <~ 0.6);
  - offset = |beta| / sqrt(E|y - beta|^2), the centre's distance from the origin in radii; margin
    `sphere_offset` (upper 0.25: an offset o adds a common cosine ~ o^2/(1 + o^2) <= 0.06 between tokens seen
    from the origin, a third of the chance-level cosine 1/sqrt(32) at the default width).
Each interval (t-interval over probe inputs) inside its margin at every (capture, layer) -> that criterion is
supported; any interval entirely outside -> not supported; else inconclusive (intersection-union over captures
and layers). The run is supported when both criteria are, not supported when either is. Runs without LayerNorm
(ln "none") are not applicable; runs that did not train are left out; runs pool by intersection-union. The
residual stream (mean-centred spread and its null) and the recovered gain (spread, condition number, Wielandt
bound) are reported beside the verdict.
"""
from __future__ import annotations

import math

from brownformer.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, ClaimRecord, Estimate

from .common import did_not_train_record, equivalence_pvalue, equivalence_verdict, finite_or_none, pool_runs

__all__ = ["sphere_claim", "TITLE", "CRITERIA"]

TITLE = "LayerNorm outputs, after the affine map the next layer reads, lie on a sphere centred at the origin"
#: criterion -> (quantity of sphere_fit.sphere_about, margin key in StatsConfig.margins)
CRITERIA = {"radius_spread_ratio": "radius_spread_ratio", "offset": "sphere_offset"}
_AFFINE_REPORTED = ("gain_cv", "gain_condition", "wielandt_cosine", "offset_ratio", "relative_residual")


def _ln_placement(run: str, files: list[dict]) -> str | None:
    """LN placement from the trajectory sidecars ("ln"), else from the run id's model name (vit-pre, lm-none...)."""
    for f in files:
        if f["sphere"].get("ln"):
            return f["sphere"]["ln"]
    return next((p for p in ("none", "post", "pre") if p in run.split("__")[0].split("-")), None)


def _tensor(f: dict) -> str:
    return f["sphere"].get("tensor", "ln_raw")


def _trained(files: list[dict]) -> tuple[list[dict], float]:
    """Captures of the trained model: second half of training, step 0 excluded (all when steps are unknown)."""
    steps = [f["sphere"].get("step") for f in files if f["sphere"].get("step") is not None]
    half = 0.5 * max(steps) if steps else 0.0
    keep = [f for f in files if f["sphere"].get("step") is None or (f["sphere"]["step"] >= half
                                                                     and f["sphere"]["step"] != 0)]
    return keep or files, half


def _cells(files: list[dict], quantity: str) -> list[tuple]:
    """(estimate, (lo, hi), capture, layer) of one quantity for every capture and layer."""
    out = []
    for f in files:
        per = ((f["sphere"].get("about") or {}).get("per_layer") or {}).get(quantity)
        if not per:
            continue
        for layer, (e, lo, hi) in enumerate(zip(per["estimate"], per["ci_low"], per["ci_high"])):
            out.append((math.nan if e is None else float(e),
                        (math.nan if lo is None else float(lo), math.nan if hi is None else float(hi)),
                        f.get("capture"), layer))
    return out


def _criterion(cells: list[tuple], margin, confidence_level: float) -> dict:
    """Intersection-union over cells: the worst cell (largest estimate) with its verdict and TOST p-value."""
    if not cells:
        return {"verdict": INCONCLUSIVE, "why": "no values", "margin": list(margin)}
    one_sided = (-math.inf, margin[1])  # both quantities are >= 0: only the upper edge binds
    verdicts = [equivalence_verdict(ci, one_sided) for _, ci, _, _ in cells]
    verdict = (NOT_SUPPORTED if NOT_SUPPORTED in verdicts else SUPPORTED if all(v == SUPPORTED for v in verdicts)
               else INCONCLUSIVE)
    from scipy.special import ndtri
    z = float(ndtri(0.5 + confidence_level / 2))
    pvals = []
    for est, ci, _, _ in cells:
        se = (ci[1] - ci[0]) / (2 * z) if all(map(math.isfinite, ci)) else math.nan
        pvals.append(equivalence_pvalue(est, se, (-math.inf, margin[1])))
    worst = max(range(len(cells)), key=lambda i: -math.inf if not math.isfinite(cells[i][0]) else cells[i][0])
    est, ci, capture, layer = cells[worst]
    return {"verdict": verdict, "estimate": est, "confidence_interval": list(ci), "capture": capture, "layer": layer,
            "margin": list(margin), "n_cells": len(cells), "n_supported": verdicts.count(SUPPORTED),
            "n_not_supported": verdicts.count(NOT_SUPPORTED),
            "pvalue": None if any(p is None for p in pvals) else max(pvals)}


def _baseline(files: list[dict]) -> dict:
    """The step-0 values of each criterion (gamma = 1, beta = 0 at initialisation: the definition again)."""
    init = [f for f in files if f["sphere"].get("step") == 0]
    return {q: max((c[0] for c in _cells(init, q)), default=None) for q in CRITERIA} if init else {}


def _reported(files: list[dict]) -> dict:
    """The last capture's residual-stream geometry and recovered affine map, per layer."""
    last = max((f.get("capture") if f.get("capture") is not None else -1 for f in files), default=None)
    out = {}
    for f in files:
        if (f.get("capture") if f.get("capture") is not None else -1) != last:
            continue
        s = f["sphere"]
        if _tensor(f) == "resid" and s.get("about"):
            out["residual_stream"] = {"radius_spread_ratio": s["about"]["per_layer"]["radius_spread_ratio"]["estimate"],
                                      "centre": s["about"].get("centre")}
        if _tensor(f) == "ln_affine" and s.get("affine_map"):
            out["affine_map"] = {q: s["affine_map"][q] for q in _AFFINE_REPORTED if q in s["affine_map"]}
    return out


def _definitional(files: list[dict]) -> dict:
    fr = []
    for f in files:
        pooled = ((f["sphere"].get("geometry") or {}).get("pooled") or {}).get("fraction_on_sphere")
        if pooled:
            fr.append(float(pooled["estimate"]))
    return {"label": "definitional check, not evidence: LayerNorm before its affine map is on the sphere whenever "
                     "a token's variance exceeds ~50 eps", "min_fraction_on_sphere": min(fr) if fr else None}


def _run_record(run: str, files: list[dict], stats) -> ClaimRecord:
    raw = [f for f in files if _tensor(f) == "ln_raw"]
    aff_all = [f for f in files if _tensor(f) == "ln_affine"]
    aff, half = _trained(aff_all) if aff_all else ([], 0.0)
    trained_raw, _ = _trained(raw) if raw else ([], 0.0)
    details = {"ln": _ln_placement(run, files), "judged_from_step": half, "n_captures": len(aff),
               "definitional": _definitional(trained_raw), "step0_baseline": _baseline(aff_all), **_reported(files)}
    if not aff:
        return ClaimRecord("1", TITLE, INCONCLUSIVE, "no after-affine LayerNorm output captured", details=details)
    crit = {q: _criterion(_cells(aff, q), tuple(stats.margins[key]), stats.confidence_level)
            for q, key in CRITERIA.items()}
    parts = [c["verdict"] for c in crit.values()]
    verdict = (NOT_SUPPORTED if NOT_SUPPORTED in parts else SUPPORTED if all(p == SUPPORTED for p in parts)
               else INCONCLUSIVE)
    pv = [c.get("pvalue") for c in crit.values()]
    details.update({"criteria": crit, "pvalue": None if None in pv else max(pv)})
    r, o = crit["radius_spread_ratio"], crit["offset"]
    reason = (f"worst (capture, layer) from step {half:g} on: radius spread / Gaussian null {_f(r)} vs <= "
              f"{r['margin'][1]:g} ({r['verdict']}); centre offset {_f(o)} radii vs <= {o['margin'][1]:g} "
              f"({o['verdict']})")
    est = Estimate("radius spread / Gaussian-cloud null after the affine map (worst capture and layer)",
                   r.get("estimate", math.nan), tuple(r.get("confidence_interval", (math.nan, math.nan))),
                   stats.confidence_level)
    return ClaimRecord("1", TITLE, verdict, reason, margin=tuple(r["margin"]), details=details, estimate=est,
                       tests=[{"name": f"{q} equivalence (TOST, intersection-union over captures and layers)",
                               "statistic": finite_or_none(c.get("estimate")), "pvalue": c.get("pvalue"),
                               "rejected": None if c.get("pvalue") is None else bool(c["pvalue"] < stats.alpha)}
                              for q, c in crit.items()])


def _f(c: dict) -> str:
    if not math.isfinite(c.get("estimate", math.nan)):
        return "undefined"
    lo, hi = c["confidence_interval"]
    return f"{c['estimate']:.3g} CI [{lo:.3g}, {hi:.3g}]"


def sphere_claim(files: list[dict], stats, *, excluded: dict[str, str] | None = None) -> ClaimRecord:
    """Claim 1 over every run (module docstring).

    Args:
        files: [{"run", "path", "capture", "sphere": stats.sphere_distance.tensor_sphere_summary output (with "ln",
            "step")}] for each run's depth files ("ln_affine" decides; "ln_raw" the definitional check; "resid" reported).
        stats: StatsConfig (confidence_level, alpha, margins["radius_spread_ratio"], margins["sphere_offset"]).
        excluded: run -> reason for runs that did not train.

    Returns:
        The claim's ClaimRecord; per_run holds one record per run with LayerNorm; runs without are in
        details["not_applicable"].
    """
    excluded = dict(excluded or {})
    by_run: dict[str, list] = {}
    for f in files:
        by_run.setdefault(f["run"], []).append(f)
    per_run, not_applicable = {}, {}
    for run, fs in sorted(by_run.items()):
        if run in excluded:
            per_run[run] = did_not_train_record("1", TITLE, excluded[run])
        elif _ln_placement(run, fs) == "none":
            not_applicable[run] = "ln 'none' (no LayerNorm): the claim does not apply"
        else:
            per_run[run] = _run_record(run, fs, stats)
    verdict, reason, decider = pool_runs(per_run, excluded=excluded)
    trained = [r for r, rec in per_run.items() if r not in excluded and rec.estimate is not None]
    worst = decider or (max(trained, key=lambda r: _key(per_run[r].estimate.value)) if trained else None)
    pvals = [per_run[r].details.get("pvalue") for r in trained]
    p_iut = max(pvals) if trained and all(p is not None for p in pvals) else None
    return ClaimRecord(
        "1", TITLE, verdict, reason + (f"; deciding run {worst}" if worst else ""),
        estimate=per_run[worst].estimate if worst else None,
        margin=tuple(stats.margins["radius_spread_ratio"]),
        tests=[{"name": "radius-spread and offset equivalence (intersection-union over runs)", "statistic": None,
                "pvalue": finite_or_none(p_iut), "rejected": None if p_iut is None else bool(p_iut < stats.alpha)}],
        per_run=per_run,
        details={"pvalue": p_iut, "not_applicable": not_applicable, "deciding_run": worst,
                 "decided_on": "LN output after the affine map (what the next layer reads)",
                 "margins": {q: list(stats.margins[k]) for q, k in CRITERIA.items()},
                 "rule": "per run: every (capture, layer) of the second half of training has both intervals inside "
                         "their margins; pooled: all runs supported"})


def _key(x: float) -> float:
    return x if math.isfinite(x) else -math.inf
