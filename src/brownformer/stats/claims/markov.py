"""Claim 2: attention is a Markov kernel that is isotropic (vMF) and reversible.

Row-stochasticity holds by construction, so the testable content (STATISTICS.md 0, 2.c) is
  - isotropy: the vMF score, the share of the structure the best bilinear kernel of the token
    features captures that the one-parameter kernel exp(kappa <u_i, u_j>) captures too, with
    self-attention (the diagonal) excluded (stats/markov.py `vmf_scores`);
  - reversibility: the detailed-balance residual ||Pi A - A^T Pi||_F / ||Pi A||_F.

Units and intervals. Attention matrices of one probe input (all layers and heads) are dependent,
so each capture's per-matrix values are averaged per probe input, then over the captures after
initialisation; the interval is the cluster-bootstrap t-interval over inputs (claims/common.py).
The step-0 attention is a baseline: it is never pooled into the estimate.

Margins, calibrated per run against the nulls of stats/attention_stats.py:
  - vMF score >= max(configured `vmf_explained` floor, the upper confidence bound of the score under
    the row-shuffled null (each row's weights permuted: same row laws, no geometry) and under the
    step-0 attention). A score no null can reach is required, whatever the floor says.
  - reversibility residual <= min(configured `reversibility_residual` ceiling,
    REVERSIBILITY_NULL_FRACTION x the lower confidence bound of the row-shuffled null's residual):
    the chain must be at least twice as close to detailed balance as a random Markov matrix with
    the same row laws. (Near-uniform step-0 attention is trivially reversible, so it is no null
    for reversibility; its residual is reported as the baseline.)
Verdict per run: both intervals inside their margins -> supported; either entirely outside ->
not supported; else inconclusive (always so for reversibility under a causal mask, where pi = e_1).
Calibration of the rule: the same rule applied to the null statistics of every capture (its
"size": how often a null would pass; 0 is required) and to the exact vMF kernel at each matrix's
fitted kappa on the real features (its "power" there; 1 is required) is reported with the verdict.
Power at the margin edge is not simulated.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from brownformer.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, ClaimRecord

from .common import (did_not_train_record, equivalence_pvalue, equivalence_verdict, finite_or_none, pool_runs,
                     unit_mean_interval)

__all__ = ["markov_claim", "per_input_values", "TITLE", "REVERSIBILITY_NULL_FRACTION"]

TITLE = "Attention is an isotropic (von Mises-Fisher) and reversible Markov kernel"
REVERSIBILITY_NULL_FRACTION = 0.5


def per_input_values(result: dict, quantity: str) -> np.ndarray:
    """Per-probe-input means of one per-matrix quantity of an attention result.

    Axes are (layer, head, input, n, n) for our captures: the input axis is the last leading axis
    when there are at least two; otherwise every matrix is its own unit.
    """
    vals = np.array([np.nan if v is None else v for v in result.get("per_matrix", {}).get(quantity, [])], float)
    lead = tuple(result.get("shape", [])[:-2])
    if vals.size == 0 or int(np.prod(lead)) != vals.size or len(lead) < 2:
        return vals
    return _nanmean(vals.reshape(-1, lead[-1]), axis=0)


def _nanmean(a: np.ndarray, axis: int) -> np.ndarray:
    """nanmean without the 'mean of empty slice' warning: all-NaN units stay NaN and are dropped later."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(a, axis=axis)


def _pooled_units(files: list[dict], quantity: str) -> np.ndarray:
    """Per-input values averaged over captures (same probe inputs in every capture), else concatenated."""
    arrays = [per_input_values(f, quantity) for f in files]
    arrays = [a for a in arrays if a.size]
    if not arrays:
        return np.array([])
    if len({a.size for a in arrays}) == 1:
        return _nanmean(np.stack(arrays), axis=0)
    return np.concatenate(arrays)


def _null_bound(files: list[dict], null: str, quantity: str, side: int) -> float:
    """Most extreme confidence bound (side 1: upper, 0: lower) of a null's aggregate over the captures."""
    bounds = []
    for f in files:
        agg = (f.get("null_models") or {}).get(null, {}).get(quantity) if null != "step0" else \
            (f.get("aggregate") or {}).get(quantity)
        if agg and agg.get("ci") and agg["ci"][side] is not None:
            bounds.append(float(agg["ci"][side]))
    if not bounds:
        return math.nan
    return max(bounds) if side == 1 else min(bounds)


def _margins(trained: list[dict], baseline: list[dict], stats) -> dict:
    floor = tuple(stats.margins["vmf_explained"])
    ceiling = tuple(stats.margins["reversibility_residual"])
    vmf_nulls = {"row_shuffled": _null_bound(trained, "row_shuffled", "vmf_explained", 1),
                 "step0": _null_bound(baseline, "step0", "vmf_explained", 1)}
    rev_null = _null_bound(trained, "row_shuffled", "reversibility_residual", 0)
    vmf_lo = min(max([floor[0]] + [v for v in vmf_nulls.values() if math.isfinite(v)]), floor[1])
    rev_hi = min([ceiling[1]] + ([REVERSIBILITY_NULL_FRACTION * rev_null] if math.isfinite(rev_null) else []))
    return {"vmf_explained": (vmf_lo, floor[1]), "reversibility_residual": (ceiling[0], rev_hi),
            "configured": {"vmf_explained": floor, "reversibility_residual": ceiling},
            "null_bounds": {"vmf_explained_upper": vmf_nulls, "reversibility_residual_row_shuffled_lower": rev_null}}


def _rule(vmf_ci, rev_ci, margins: dict, causal: bool) -> tuple[str, str, str]:
    v_vmf = equivalence_verdict(vmf_ci, margins["vmf_explained"])
    v_rev = INCONCLUSIVE if causal else equivalence_verdict(rev_ci, margins["reversibility_residual"])
    parts = (v_vmf, v_rev)
    verdict = (SUPPORTED if parts == (SUPPORTED, SUPPORTED) else NOT_SUPPORTED if NOT_SUPPORTED in parts
               else INCONCLUSIVE)
    return verdict, v_vmf, v_rev


def _passes(agg: dict | None, margins: dict, causal: bool) -> bool | None:
    """Would the rule call these aggregate point statistics "supported"? None without a vMF score."""
    agg = agg or {}
    e, r = (agg.get("vmf_explained") or {}).get("mean"), (agg.get("reversibility_residual") or {}).get("mean")
    if e is None:
        return None
    rev = (r, r) if r is not None else (math.nan, math.nan)
    return _rule((e, e), rev, margins, causal)[0] == SUPPORTED


def _calibration(trained: list[dict], baseline: list[dict], margins: dict, causal: bool, shape) -> dict:
    """The run's rule on its nulls (size: a null that passes counts against the rule) and on the exact
    vMF kernel at the fitted concentrations (power at the exact alternative)."""
    nulls = [(f.get("null_models") or {}).get(k) for f in trained for k in ("row_shuffled", "shuffled_keys")]
    nulls += [f.get("aggregate") for f in baseline]
    passes = [p for p in (_passes(a, margins, causal) for a in nulls) if p is not None]
    alt = [p for p in (_passes((f.get("null_models") or {}).get("vmf_exact"), margins, causal) for f in trained)
           if p is not None]
    n = len(passes)
    size = float(np.mean(passes)) if n else None
    return {"shape": {"attention": shape, "n_captures": len(trained)},
            "size": size, "size_se": math.sqrt(size * (1 - size) / n) if n else None,
            "power": {"exact_vmf_kernel": float(np.mean(alt))} if alt else {},
            "n_replicates": n,
            "method": "the run's rule on the point statistics of the row-shuffled and shuffled-key nulls of every "
                      "capture and of the step-0 attention (size), and of the exact vMF kernel at each matrix's "
                      "fitted kappa on the real features (power at the exact alternative; not at the margin edge)"}


def _run_record(run: str, files: list[dict], stats) -> ClaimRecord:
    trained = [f for f in files if f.get("step") != 0]
    baseline = [f for f in files if f.get("step") == 0]
    causal = any(f.get("causal") for f in files)
    if not trained:
        return ClaimRecord("2", TITLE, INCONCLUSIVE, "only the step-0 attention (a baseline) was captured")
    m = _margins(trained, baseline, stats)
    vmf, vmf_se = unit_mean_interval(_pooled_units(trained, "vmf_explained"), stats=stats,
                                     name="vMF score against the full bilinear kernel (mean over probe inputs)")
    rev, rev_se = unit_mean_interval(_pooled_units(trained, "reversibility_residual"), stats=stats,
                                     name="detailed-balance residual (mean over probe inputs)")
    verdict, v_vmf, v_rev = _rule(vmf.ci, rev.ci, m, causal)
    G = _pooled_units(trained, "vmf_explained").size
    p_vmf = equivalence_pvalue(vmf.value, vmf_se, m["vmf_explained"], df=max(G - 1, 1))
    p_rev = None if causal else equivalence_pvalue(rev.value, rev_se, m["reversibility_residual"], df=max(G - 1, 1))
    p = max(p_vmf, p_rev) if p_vmf is not None and p_rev is not None else None
    base = {}
    if baseline:
        agg = baseline[0].get("aggregate") or {}
        base = {q: (agg.get(q) or {}).get("mean") for q in ("vmf_explained", "reversibility_residual", "spectral_gap")}
    reason = (f"vMF score {vmf.value:.3g} CI [{vmf.ci[0]:.3g}, {vmf.ci[1]:.3g}] vs >= {m['vmf_explained'][0]:.3g} "
              f"({v_vmf}); reversibility residual "
              + ("undefined under a causal mask" if causal else
                 f"{rev.value:.3g} CI [{rev.ci[0]:.3g}, {rev.ci[1]:.3g}] vs <= {m['reversibility_residual'][1]:.3g}")
              + f" ({v_rev})")
    return ClaimRecord(
        "2", TITLE, verdict, reason, estimate=vmf, margin=m["vmf_explained"],
        calibration=_calibration(trained, baseline, m, causal, trained[0].get("shape")),
        tests=[{"name": "vMF score equivalence (TOST)", "statistic": finite_or_none(vmf.value),
                "p_value": p_vmf, "reject": None if p_vmf is None else bool(p_vmf < stats.alpha)},
               {"name": "reversibility equivalence (TOST)", "statistic": finite_or_none(rev.value),
                "p_value": p_rev, "reject": None if p_rev is None else bool(p_rev < stats.alpha)}],
        details={"p_value": p, "causal": causal, "margins": m, "verdict_vmf": v_vmf, "verdict_reversibility": v_rev,
                 "reversibility": rev.to_dict(), "n_inputs": G, "n_captures": len(trained),
                 "step0_baseline": base})


def markov_claim(files: list[dict], stats, *, excluded: dict[str, str] | None = None) -> ClaimRecord:
    """Claim 2 over every run (module docstring).

    Args:
        files: [{"run", "attention": stats.attention_stats.analyze_attention_file output}] (with "step",
            "null_models"; the step-0 capture is the baseline).
        stats: StatsConfig (confidence_level, n_resamples, seed, alpha, margins["vmf_explained"],
            margins["reversibility_residual"]).
        excluded: run -> reason for runs that did not train.
    """
    excluded = dict(excluded or {})
    by_run: dict[str, list] = {}
    for f in files:
        by_run.setdefault(f["run"], []).append(f["attention"])
    per_run = {run: (did_not_train_record("2", TITLE, excluded[run]) if run in excluded
                     else _run_record(run, fs, stats)) for run, fs in sorted(by_run.items())}
    verdict, reason, decider = pool_runs(per_run, excluded=excluded)
    trained = [r for r, rec in per_run.items() if r not in excluded and rec.estimate is not None]
    pick = decider or (min(trained, key=lambda r: per_run[r].estimate.value) if trained else None)
    pvals = [per_run[r].details.get("p_value") for r in trained]
    p_iut = max(pvals) if trained and all(p is not None for p in pvals) else None
    size = [per_run[r].calibration["size"] for r in trained if (per_run[r].calibration or {}).get("size") is not None]
    return ClaimRecord(
        "2", TITLE, verdict, reason + (f"; deciding run {pick}" if pick else ""),
        estimate=per_run[pick].estimate if pick else None, margin=per_run[pick].margin if pick else None,
        calibration={"shape": "per run (see per_run)", "size": max(size) if size else None, "size_se": None,
                     "power": {}, "n_replicates": sum(per_run[r].calibration["n_replicates"] for r in trained),
                     "method": "largest per-run size of the rule on its nulls"} if trained else None,
        tests=[{"name": "vMF and reversibility equivalence (intersection-union over runs)", "statistic": None,
                "p_value": finite_or_none(p_iut), "reject": None if p_iut is None else bool(p_iut < stats.alpha)}],
        per_run=per_run, details={"p_value": p_iut, "deciding_run": pick})
