"""Claim 1: LayerNorm outputs (before the affine) lie on a sphere.

The manifold. Raw LayerNorm z = (x - mu)/sigma has 1^T z = 0 and |z|^2 = d sigma^2/(sigma^2 + eps):
the sphere of radius sqrt(d) inside the hyperplane 1^T z = 0, an S^(d-2) (intrinsic dimension d - 2),
not the ambient S^(d-1). A token is "on the sphere" when |z|/sqrt(d) and 1^T z/sqrt(d) both lie in
the `sphere_radius` / `sphere_sum` margins; stats/sphere.py measures, per capture, the fraction of
tokens on it with a cluster-bootstrap interval over probe inputs (tokens of one input are dependent).

Rule (claims/common.py). Per run: the capture with the smallest fraction among the captures of the
trained model, those in the second half of training (early on activations are tiny and
LayerNorm's eps pulls low-variance tokens, e.g. the CLS token entering layer 0, below radius
0.99: reported as early_min_fraction_on_sphere, not judged); its interval inside the
`fraction_on_sphere` margin -> supported, entirely below -> not supported. Runs without LayerNorm (ln "none") are not applicable;
runs that did not train are left out. Pooled over runs by the intersection-union rule.
"""
from __future__ import annotations

import math

from brownformer.verdicts import INCONCLUSIVE, ClaimRecord, Estimate

from .common import did_not_train_record, equivalence_pvalue, equivalence_verdict, finite_or_none, pool_runs

__all__ = ["sphere_claim", "TITLE"]

TITLE = "LayerNorm outputs lie on the sphere S^(d-2) of radius sqrt(d) in the hyperplane 1^T z = 0"
_TENSOR_LABELS = {"ln_raw": "before_affine", "ln_affine": "after_affine", "resid": "residual"}
_REPORTED = ("fraction_on_sphere", "radius_mean", "radius_cv", "mean_offset", "sum_abs_mean")


def _ln_placement(run: str, files: list[dict]) -> str | None:
    """LN placement from the trajectory sidecars ("ln"), else from the run id's model name (vit-pre, lm-none...)."""
    for f in files:
        if f["sphere"].get("ln"):
            return f["sphere"]["ln"]
    return next((p for p in ("none", "post", "pre") if p in run.split("__")[0].split("-")), None)


def _fraction(sphere: dict) -> tuple[float, tuple[float, float]]:
    """Fraction of tokens on the sphere with its interval (stats/sphere.py's geometry, pooled over layers)."""
    pooled = (sphere.get("geometry") or {}).get("pooled", {}).get("fraction_on_sphere")
    if pooled:
        ci = pooled.get("ci") or [math.nan, math.nan]
        return float(pooled["estimate"]), (float(ci[0]), float(ci[1]))
    return float(sphere["ln_raw"]["fraction_on_sphere"]), (math.nan, math.nan)  # no interval: inconclusive


def _final_tensors(files: list[dict]) -> dict:
    """The last capture's pooled statistics of each tensor (before/after affine, residual), for the report."""
    last = max((f.get("capture") if f.get("capture") is not None else -1 for f in files), default=None)
    out = {}
    for f in files:
        geom = f["sphere"].get("geometry")
        if geom and (f.get("capture") if f.get("capture") is not None else -1) == last:
            out[_TENSOR_LABELS[f["sphere"].get("tensor", "ln_raw")]] = {q: geom["pooled"][q] for q in _REPORTED
                                                                         if q in geom["pooled"]}
    return out


def _run_record(run: str, files: list[dict], stats) -> ClaimRecord:
    margin = tuple(stats.margins["fraction_on_sphere"])
    raw = [f for f in files if f["sphere"].get("tensor", "ln_raw") == "ln_raw"]
    steps = [f["sphere"].get("step") for f in raw if f["sphere"].get("step") is not None]
    half = 0.5 * max(steps) if steps else 0.0
    # the trained model: captures in the second half of training (all captures when steps are unknown)
    trained = [f for f in raw if f["sphere"].get("step") is None or (f["sphere"]["step"] >= half
                                                                      and f["sphere"]["step"] != 0)] or raw
    early = [f for f in raw if f not in trained]
    details = {"ln": _ln_placement(run, files), "n_captures": len(trained), "final": _final_tensors(files),
               "judged_from_step": half}
    if early:
        details["early_min_fraction_on_sphere"] = min(_fraction(f["sphere"])[0] for f in early)
    if not trained:
        return ClaimRecord("1", TITLE, INCONCLUSIVE, "no LayerNorm output files", margin=margin, details=details)
    fr = [(_fraction(f["sphere"]), f) for f in trained]
    (est, ci), worst = min(fr, key=lambda t: t[0][0])
    d = worst["sphere"]["ln_raw"].get("dim")
    details.update({"worst_capture": worst.get("capture"), "worst_step": worst["sphere"].get("step"),
                    "dim": d, "intrinsic_dimension": d - 2 if d else None,
                    "cluster": (worst["sphere"].get("geometry") or {}).get("cluster")})
    verdict = equivalence_verdict(ci, margin)
    z = _z(stats.confidence_level)
    se = (ci[1] - ci[0]) / (2 * z) if all(map(math.isfinite, ci)) else math.nan
    details["p_value"] = equivalence_pvalue(est, se, margin)
    reason = (f"worst capture from step {half:g} on: {est:.4f} of tokens on the sphere, "
              f"{stats.confidence_level:.0%} CI [{ci[0]:.4f}, {ci[1]:.4f}] against margin [{margin[0]}, {margin[1]}]")
    return ClaimRecord("1", TITLE, verdict, reason, margin=margin, details=details,
                       estimate=Estimate("fraction of tokens on the sphere (worst capture)", est, ci,
                                         stats.confidence_level))


def _z(confidence_level: float) -> float:
    from scipy.stats import norm
    return float(norm.ppf(0.5 + confidence_level / 2))


def sphere_claim(files: list[dict], stats, *, excluded: dict[str, str] | None = None) -> ClaimRecord:
    """Claim 1 over every run (module docstring).

    Args:
        files: [{"run", "path", "capture", "sphere": stats.sphere.tensor_sphere_summary output (with "ln", "step")}]
            for each run's depth files ("ln_raw" the claim; "ln_affine", "resid" reported beside it).
        stats: StatsConfig (confidence_level, margins["fraction_on_sphere"]).
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
            not_applicable[run] = ("ln 'none' (no LayerNorm): the claim does not apply; its 'LN output' is the stream "
                                   "rescaled to radius sqrt(d), on the sphere by construction")
        else:
            per_run[run] = _run_record(run, fs, stats)
    verdict, reason, decider = pool_runs(per_run, excluded=excluded)
    trained = [r for r, rec in per_run.items() if r not in excluded and rec.estimate is not None]
    worst = decider or (min(trained, key=lambda r: per_run[r].estimate.value) if trained else None)
    pvals = [per_run[r].details.get("p_value") for r in trained]
    p_iut = max(pvals) if trained and all(p is not None for p in pvals) else None
    return ClaimRecord(
        "1", TITLE, verdict, reason + (f"; deciding run {worst}" if worst else ""),
        estimate=per_run[worst].estimate if worst else None, margin=tuple(stats.margins["fraction_on_sphere"]),
        tests=[{"name": "equivalence of the fraction on the sphere (intersection-union over runs)", "statistic": None,
                "p_value": finite_or_none(p_iut), "reject": None if p_iut is None else bool(p_iut < stats.alpha)}],
        per_run=per_run,
        details={"p_value": p_iut, "manifold": "S^(d-2): |z| = sqrt(d) and 1^T z = 0",
                 "not_applicable": not_applicable, "deciding_run": worst,
                 "rule": "per run: worst capture of the second half of training, CI inside the margin; "
                         "pooled: all runs supported"})
