"""Claim 2: attention is a Markov kernel that is isotropic (vMF) and reversible.

Row-stochasticity holds by construction, so the testable content (three criteria, each with its margin):
  - head isotropy, from the weights: per head M = W_Q^T W_K / sqrt(d_h) and iota_relative =
    (tr M)^2 / (d_h ||M||_F^2) (stats/markov_chain.py `weight_isotropy`). rank(M) <= d_h caps the identity fraction
    (tr M)^2/(d ||M||_F^2) at d_h/d, so no head with d_h < d is isotropic on the whole sphere; iota_relative = 1
    iff the head is isotropic within its d_h-dimensional subspace (M = c P), the best a head can be. Margin
    `head_isotropy` (lower 0.9: anisotropic logits carry at most 1/9 of the isotropic logits' variance). A
    property of the weights, not an estimate: every head of every layer at every capture of the trained model
    must reach it, judged on the captures of the second half of training as for claim 1 (its uncertainty is
    over training seeds, pooled across runs); undefined when the weights
    are stored as projections;
  - reversibility: the detailed-balance residual ||Pi A - A^T Pi||_F / ||Pi A||_F <= min(configured
    `reversibility_residual` ceiling, REVERSIBILITY_NULL_FRACTION x the row-shuffled null's lower bound).
    A symmetric M makes the chain exactly reversible (pi_i ~ Z_i), so the per-head asymmetry
    ||M - M^T||_F / ||M + M^T||_F is reported beside it. Under a causal mask token 1 is absorbing (pi = e_1):
    reversibility is undefined, so the causal LM's claim 2 is at best inconclusive;
  - the consequence of the isotropic kernel: the attention output's relative error when A is replaced by
    the fitted vMF kernel, ||(A - A_vMF) U||_F / ||(A - A_mean-field) U||_F with the token positions U as
    values (stats/kernel_fit.py `vmf_scores`), <= min(configured `vmf_output_error` ceiling,
    OUTPUT_ERROR_NULL_FRACTION x the row-shuffled null's lower bound). The ceiling 0.5 means the isotropic
    kernel reproduces at least 3/4 of the energy of the attention's displacement of tokens away from the mean
    field. The head-averaged attention's own vMF fit is reported beside it.

Units and intervals. Attention matrices of one probe input (all layers and heads) are dependent, so each
capture's per-matrix values are averaged per probe input, then over the captures after initialisation;
the interval is the cluster-bootstrap t-interval over inputs (claims/common.py). The step-0 attention and
weights are a baseline, never pooled into the estimate.
Verdict per run: every criterion supported -> supported; any not supported -> not supported; else
inconclusive. Calibration of the attention-level rule: applied to the row-shuffled, shuffled-key and step-0
nulls (size: how often a null passes; 0 is required) and to the exact vMF kernel at each matrix's fitted
kappa on the real features (power there; 1 is required). Power at the margin edge is not simulated.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from brownformer.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, ClaimRecord

from .common import (did_not_train_record, equivalence_pvalue, equivalence_verdict, finite_or_none, pool_runs,
                     unit_mean_interval)

__all__ = ["markov_claim", "file_verdicts", "per_input_values", "TITLE", "REVERSIBILITY_NULL_FRACTION",
           "OUTPUT_ERROR_NULL_FRACTION"]

TITLE = "Attention is an isotropic (von Mises-Fisher) and reversible Markov kernel"
REVERSIBILITY_NULL_FRACTION = 0.5
OUTPUT_ERROR_NULL_FRACTION = 0.5


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
        if agg and agg.get("confidence_interval") and agg["confidence_interval"][side] is not None:
            bounds.append(float(agg["confidence_interval"][side]))
    if not bounds:
        return math.nan
    return max(bounds) if side == 1 else min(bounds)


def _margins(trained: list[dict], stats) -> dict:
    err_ceiling = tuple(stats.margins["vmf_output_error"])
    rev_ceiling = tuple(stats.margins["reversibility_residual"])
    err_null = _null_bound(trained, "row_shuffled", "vmf_output_error", 0)
    rev_null = _null_bound(trained, "row_shuffled", "reversibility_residual", 0)
    err_hi = min([err_ceiling[1]] + ([OUTPUT_ERROR_NULL_FRACTION * err_null] if math.isfinite(err_null) else []))
    rev_hi = min([rev_ceiling[1]] + ([REVERSIBILITY_NULL_FRACTION * rev_null] if math.isfinite(rev_null) else []))
    return {"vmf_output_error": (err_ceiling[0], err_hi), "reversibility_residual": (rev_ceiling[0], rev_hi),
            "head_isotropy": tuple(stats.margins["head_isotropy"]),
            "configured": {"vmf_output_error": err_ceiling, "reversibility_residual": rev_ceiling},
            "null_bounds": {"vmf_output_error_row_shuffled_lower": err_null,
                            "reversibility_residual_row_shuffled_lower": rev_null}}


def _upper(margin) -> tuple[float, float]:
    """The margin as the one-sided bound it is: output error and residual are >= 0, only the upper edge binds."""
    return (-math.inf, margin[1])


def _combine(parts) -> str:
    return (NOT_SUPPORTED if NOT_SUPPORTED in parts else SUPPORTED if all(p == SUPPORTED for p in parts)
            else INCONCLUSIVE)


def _passes(agg: dict | None, margins: dict, causal: bool) -> bool | None:
    """Would the attention-level rule call these aggregate point statistics "supported"? None without features."""
    agg = agg or {}
    e, r = (agg.get("vmf_output_error") or {}).get("mean"), (agg.get("reversibility_residual") or {}).get("mean")
    if e is None:
        return None
    v_err = equivalence_verdict((e, e), _upper(margins["vmf_output_error"]))
    v_rev = (INCONCLUSIVE if causal or r is None else
             equivalence_verdict((r, r), _upper(margins["reversibility_residual"])))
    return _combine((v_err, v_rev)) == SUPPORTED


def _calibration(trained: list[dict], baseline: list[dict], margins: dict, causal: bool, shape) -> dict:
    """The run's attention-level rule on its nulls (size: a null that passes counts against the rule) and on
    the exact vMF kernel at the fitted concentrations (power at the exact alternative)."""
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
            "method": "the run's rule (output error and reversibility) on the point statistics of the row-shuffled "
                      "and shuffled-key nulls of every capture and of the step-0 attention (size), and of the exact "
                      "vMF kernel at each matrix's fitted kappa on the real features (power at the exact "
                      "alternative; not at the margin edge)"}


def _head_values(files: list[dict]) -> tuple[list[tuple], list[float], str | None]:
    """[(iota_relative, capture step, layer, head)], the asymmetries, and why undefined (or None)."""
    cells, asym = [], []
    for f in files:
        hk = f.get("head_kernels")
        if not hk or hk.get("why_undefined"):
            return [], [], (hk or {}).get("why_undefined") or "no W_Q, W_K captured for this attention file"
        for layer, rec in enumerate(hk["per_layer"]):
            cells += [(float(v), f.get("step"), layer, h) for h, v in enumerate(rec["identity_fraction_relative"])]
            asym += [float(v) for v in rec["asymmetry"]]
    return cells, asym, None


def _head_criterion(trained: list[dict], baseline: list[dict], margin) -> dict:
    """Every head of the trained model (captures of the second half of training, as for claim 1) vs the margin."""
    steps = [f["step"] for f in trained if f.get("step") is not None]
    half = 0.5 * max(steps) if steps else 0.0
    trained = [f for f in trained if f.get("step") is None or f["step"] >= half] or trained
    cells, asym, why = _head_values(trained)
    if why:
        return {"verdict": INCONCLUSIVE, "why_undefined": why, "margin": list(margin)}
    worst = min(cells, key=lambda c: c[0])
    first = next((f["head_kernels"]["per_layer"][0] for f in trained if f.get("head_kernels")), {})
    base_cells, base_asym, _ = _head_values(baseline) if baseline else ([], [], None)
    verdict = SUPPORTED if worst[0] >= margin[0] else NOT_SUPPORTED
    return {"verdict": verdict, "estimate": worst[0], "step": worst[1], "layer": worst[2], "head": worst[3],
            "judged_from_step": half,
            "margin": list(margin), "n_heads_checked": len(cells),
            "n_heads_inside": sum(c[0] >= margin[0] for c in cells),
            "median_iota_relative": float(np.median([c[0] for c in cells])),
            "rank_bound": first.get("rank_bound"), "asymmetry_median": float(np.median(asym)),
            "asymmetry_max": float(np.max(asym)),
            "step0_iota_relative_max": max((c[0] for c in base_cells), default=None),
            "step0_asymmetry_median": float(np.median(base_asym)) if base_asym else None,
            "note": "iota <= d_h/d for one head: no head is isotropic on the whole sphere; iota_relative = 1 iff "
                    "isotropic within its d_h-dimensional subspace"}


def _head_averaged(trained: list[dict]) -> dict | None:
    vals = [((f.get("head_averaged") or {}).get("aggregate") or {}) for f in trained]
    errs = [v["vmf_output_error"]["mean"] for v in vals if (v.get("vmf_output_error") or {}).get("mean") is not None]
    kap = [v["vmf_kappa"]["mean"] for v in vals if (v.get("vmf_kappa") or {}).get("mean") is not None]
    return {"vmf_output_error_mean": float(np.mean(errs)) if errs else None,
            "vmf_kappa_mean": float(np.mean(kap)) if kap else None} if vals else None


def _run_record(run: str, files: list[dict], stats) -> ClaimRecord:
    trained = [f for f in files if f.get("step") != 0]
    baseline = [f for f in files if f.get("step") == 0]
    causal = any(f.get("causal") for f in files)
    if not trained:
        return ClaimRecord("2", TITLE, INCONCLUSIVE, "only the step-0 attention (a baseline) was captured")
    m = _margins(trained, stats)
    units = _pooled_units(trained, "vmf_output_error")
    err, err_se = unit_mean_interval(units, stats=stats, name="attention-output error of the fitted isotropic "
                                                              "(vMF) kernel relative to the mean field "
                                                              "(mean over probe inputs)")
    rev, rev_se = unit_mean_interval(_pooled_units(trained, "reversibility_residual"), stats=stats,
                                     name="detailed-balance residual (mean over probe inputs)")
    heads = _head_criterion(trained, baseline, m["head_isotropy"])
    v_err = equivalence_verdict(err.confidence_interval, _upper(m["vmf_output_error"]))
    v_rev = (INCONCLUSIVE if causal else
             equivalence_verdict(rev.confidence_interval, _upper(m["reversibility_residual"])))
    verdict = _combine((heads["verdict"], v_err, v_rev))
    G = units.size
    p_err = equivalence_pvalue(err.value, err_se, _upper(m["vmf_output_error"]), df=max(G - 1, 1))
    p_rev = (None if causal else
             equivalence_pvalue(rev.value, rev_se, _upper(m["reversibility_residual"]), df=max(G - 1, 1)))
    p = max(p_err, p_rev) if p_err is not None and p_rev is not None else None
    base = {}
    if baseline:
        agg = baseline[0].get("aggregate") or {}
        base = {q: (agg.get(q) or {}).get("mean") for q in ("vmf_output_error", "reversibility_residual",
                                                             "spectral_gap")}
    head_txt = (f"head isotropy min iota/(d_h/d) {heads['estimate']:.3g} vs >= {m['head_isotropy'][0]:g}"
                if "estimate" in heads else f"head isotropy undefined ({heads.get('why_undefined')})")
    (err_lo, err_hi), (rev_lo, rev_hi) = err.confidence_interval, rev.confidence_interval
    reason = (f"{head_txt} ({heads['verdict']}); vMF output error {err.value:.3g} CI [{err_lo:.3g}, "
              f"{err_hi:.3g}] vs <= {m['vmf_output_error'][1]:.3g} ({v_err}); reversibility residual "
              + ("undefined under a causal mask (token 1 absorbing)" if causal else
                 f"{rev.value:.3g} CI [{rev_lo:.3g}, {rev_hi:.3g}] vs <= {m['reversibility_residual'][1]:.3g}")
              + f" ({v_rev})")
    criteria = {"head_isotropy": heads,
                "vmf_output_error": {"verdict": v_err, "estimate": err.value,
                                     "confidence_interval": list(err.confidence_interval),
                                     "margin": list(m["vmf_output_error"]), "pvalue": p_err},
                "reversibility": {"verdict": v_rev, "estimate": rev.value,
                                  "confidence_interval": list(rev.confidence_interval),
                                  "margin": list(m["reversibility_residual"]), "pvalue": p_rev,
                                  **({"why_undefined": "causal mask: token 1 is absorbing, pi = e_1"} if causal else {})}}
    return ClaimRecord(
        "2", TITLE, verdict, reason, estimate=err, margin=m["vmf_output_error"],
        calibration=_calibration(trained, baseline, m, causal, trained[0].get("shape")),
        tests=[{"name": "vMF output-error equivalence (TOST)", "statistic": finite_or_none(err.value),
                "pvalue": p_err, "rejected": None if p_err is None else bool(p_err < stats.alpha)},
               {"name": "reversibility equivalence (TOST)", "statistic": finite_or_none(rev.value),
                "pvalue": p_rev, "rejected": None if p_rev is None else bool(p_rev < stats.alpha)}],
        details={"pvalue": p, "causal": causal, "margins": m, "criteria": criteria,
                 "verdict_head_isotropy": heads["verdict"], "verdict_output_error": v_err,
                 "verdict_reversibility": v_rev, "reversibility": rev.to_dict(), "n_inputs": G,
                 "n_captures": len(trained), "step0_baseline": base, "head_averaged": _head_averaged(trained)})


def file_verdicts(result: dict, stats) -> dict:
    """A verdict per claim-2 criterion for one attention file (`stats attention`), with its margin.

    Same margins as `markov_claim`, but the units are the file's matrices (a user's array carries no
    grouping; each aggregate interval is the percentile bootstrap of the mean over matrices): interval inside
    the margin -> "supported", entirely outside -> "not supported", else (or undefined) "inconclusive".
    """
    agg, null = result.get("aggregate") or {}, (result.get("null_models") or {}).get("row_shuffled") or {}
    out = {}
    for q, frac, why in (("reversibility_residual", REVERSIBILITY_NULL_FRACTION,
                          "undefined under a causal mask: token 1 is absorbing (pi = e_1)"),
                         ("vmf_output_error", OUTPUT_ERROR_NULL_FRACTION, "needs --features (the token features)")):
        ceiling = tuple(stats.margins[q])
        lo_null = ((null.get(q) or {}).get("confidence_interval") or [None])[0]
        margin = (ceiling[0], min(ceiling[1], frac * lo_null) if lo_null is not None else ceiling[1])
        a = agg.get(q) or {}
        if a.get("mean") is None:
            out[q] = {"verdict": INCONCLUSIVE, "margin": list(margin), "why_undefined": why}
            continue
        out[q] = {"verdict": equivalence_verdict(a["confidence_interval"], _upper(margin)), "estimate": a["mean"],
                  "confidence_interval": a["confidence_interval"],
                  "margin": list(margin), "null_row_shuffled_lower": lo_null}
    margin = tuple(stats.margins["head_isotropy"])
    hk = result.get("head_kernels") or {}
    if hk.get("per_layer"):
        worst = min(min(rec["identity_fraction_relative"]) for rec in hk["per_layer"])
        out["head_isotropy"] = {"verdict": SUPPORTED if worst >= margin[0] else NOT_SUPPORTED,
                                "estimate": worst, "margin": list(margin), "rank_bound": hk["per_layer"][0]["rank_bound"]}
    else:
        out["head_isotropy"] = {"verdict": INCONCLUSIVE, "margin": list(margin),
                                "why_undefined": hk.get("why_undefined", "needs --wq and --wk (W_Q, W_K weights)")}
    return out


def markov_claim(files: list[dict], stats, *, excluded: dict[str, str] | None = None) -> ClaimRecord:
    """Claim 2 over every run (module docstring).

    Args:
        files: [{"run", "attention": stats_stage.attention_files.analyze_attention_file output}] (with "step",
            "null_models"; the step-0 capture is the baseline).
        stats: StatsConfig (confidence_level, n_resamples, seed, alpha, margins["head_isotropy"],
            margins["vmf_output_error"], margins["reversibility_residual"]).
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
    pick = decider or (max(trained, key=lambda r: _key(per_run[r].estimate.value)) if trained else None)
    pvals = [per_run[r].details.get("pvalue") for r in trained]
    p_iut = max(pvals) if trained and all(p is not None for p in pvals) else None
    size = [per_run[r].calibration["size"] for r in trained if (per_run[r].calibration or {}).get("size") is not None]
    return ClaimRecord(
        "2", TITLE, verdict, reason + (f"; deciding run {pick}" if pick else ""),
        estimate=per_run[pick].estimate if pick else None, margin=per_run[pick].margin if pick else None,
        calibration={"shape": "per run (see per_run)", "size": max(size) if size else None, "size_se": None,
                     "power": {}, "n_replicates": sum(per_run[r].calibration["n_replicates"] for r in trained),
                     "method": "largest per-run size of the rule on its nulls"} if trained else None,
        tests=[{"name": "head isotropy, vMF output error and reversibility (intersection-union over runs)",
                "statistic": None,
                "pvalue": finite_or_none(p_iut), "rejected": None if p_iut is None else bool(p_iut < stats.alpha)}],
        per_run=per_run, details={"pvalue": p_iut, "deciding_run": pick})


def _key(x: float) -> float:
    return x if math.isfinite(x) else -math.inf
