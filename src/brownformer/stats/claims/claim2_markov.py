"""Claim 2: attention is a Markov kernel that is isotropic (vMF) and reversible, decided per head over seeds.

Row-stochasticity holds by construction, so the testable content (three criteria, each with its margin):
  - head isotropy, from the weights: per head M = W_Q^T W_K / sqrt(d_h) (with the pre-LN gamma folded in where
    the stage passes it: `weight_isotropy(gain=...)`, the form on the z the model computes on) and iota_relative =
    (tr M)^2 / (d_h ||M||_F^2) (stats/markov_chain.py `weight_isotropy`). rank(M) <= d_h caps the identity fraction
    (tr M)^2/(d ||M||_F^2) at d_h/d, so no head with d_h < d is isotropic on the whole sphere; iota_relative = 1
    iff the head is isotropic within its d_h-dimensional subspace (M = c P), the best a head can be. Margin
    `head_isotropy` (lower 0.9: anisotropic logits carry at most 1/9 of the isotropic logits' variance). Per seed
    the worst head (min over layers and heads of its mean over the captures of the second half of training);
    undefined when the weights are stored as projections;
  - the isotropic kernel inside each head's subspace, judged by its consequence: per head,
    A_h,ij ~ softmax_j(kappa <P_h u_i, P_h u_j>) with P_h the head's query/key subspace (markov_chain.py
    `head_subspace_vmf`), and the attention output's relative error when A_h is replaced by it,
    ||(A - A_vMF) U||_F / ||(A - A_mean-field) U||_F (token positions U as values), <= the configured
    `vmf_output_error` ceiling 0.5 (the isotropic kernel reproduces at least 3/4 of the energy of the
    attention's displacement of tokens away from the mean field). Where a file has no head subspaces (weights
    missing) the whole-sphere fit stands in, labelled so, with its margin lowered to OUTPUT_ERROR_NULL_FRACTION of
    the row-shuffled null's lower bound (that fit is not the claim's, so passing it must at least beat a null);
  - reversibility: the detailed-balance residual r = ||Pi A - A^T Pi||_F / ||Pi A||_F <= the configured
    `reversibility_residual` margin 0.1, fixed before the data (rule_history). Its consequence: the additive
    reversibilisation A_rev = (A + Pi^-1 A^T Pi)/2 is the reversible chain with the same pi nearest to A, and
    Pi (A - A_rev) = (Pi A - A^T Pi)/2, so r <= 0.1 means that replacing the attention by a reversible chain moves
    its probability flows pi_i A_ij by at most 5% (Frobenius, relative). A symmetric M makes the chain exactly
    reversible (pi_i ~ Z_i); the per-head asymmetry ||M - M^T||_F / ||M + M^T||_F is reported beside it. Under a
    causal mask token 1 is absorbing (pi = e_1): reversibility is undefined, so a causal LM is at best inconclusive.

Seeds as the unit (stats/pooling.py `seed_pool`). Attention matrices of one probe input (all layers and heads)
are dependent and all inputs of one run share its weights, so per seed (one training run) each quantity is one
number: the mean over probe inputs of the per-input means over layers and heads, averaged over the captures
after initialisation (the worst head for isotropy). Per configuration (model, optimizer) the t-interval over
seeds; an interval inside its margin -> supported, entirely outside -> not supported; fewer than MIN_SEEDS seeds:
inconclusive, "n seeds < minimum". A configuration is supported when every criterion is, not supported when one
is not; configurations pool by intersection-union, each beside the pooled verdict (per_model). Each seed's record
(per_run) keeps its within-seed intervals over probe inputs and its nulls as description; it never decides.
The step-0 attention and weights are a baseline, never pooled into the estimate.

Calibration. Size: the attention-level rule on the row-shuffled, shuffled-key and step-0 nulls of every seed
(a null that passes counts against the rule). Power at a point where the claim is true but not trivially true:
each criterion's true value halfway between its ideal (0, or 1 for isotropy) and its margin edge, the seeds'
observed spread, at this configuration's number of seeds and at POWER_DESIGN_SEEDS (noncentral t,
`seed_interval_power`); the positive controls (stats/positive_controls_claims12.py) simulate it end to end.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from brownformer.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, ClaimRecord, Estimate

from ..pooling import MIN_SEEDS, seed_interval_power, seed_pool
from ..rule_history import claim_rule_history
from .common import (configuration_of, did_not_train_record, equivalence_pvalue, equivalence_verdict, finite_or_none,
                     pool_runs, seed_unit, seed_verdict, unit_mean_interval)

__all__ = ["markov_claim", "file_verdicts", "per_input_values", "TITLE", "OUTPUT_ERROR_NULL_FRACTION",
           "POWER_DESIGN_SEEDS", "CRITERIA"]

TITLE = "Attention is an isotropic (von Mises-Fisher) and reversible Markov kernel"
#: the whole-sphere vMF fit (a stand-in where head subspaces are missing) must beat the row-shuffled null by this
OUTPUT_ERROR_NULL_FRACTION = 0.5
#: the seed count issue 32 asks of every deciding configuration: the power is also stated there
POWER_DESIGN_SEEDS = 5
#: criterion -> (margin key, which edge binds, the ideal value)
CRITERIA = {"head_isotropy": ("head_isotropy", "lower", 1.0), "vmf_output_error": ("vmf_output_error", "upper", 0.0),
            "reversibility": ("reversibility_residual", "upper", 0.0)}


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


def _subspace_fit(f: dict) -> dict | None:
    """The per-head subspace vMF fit of one attention file (markov_chain.head_subspace_vmf, kept in head_kernels)."""
    fit = (f.get("head_kernels") or {}).get("subspace_vmf")
    return fit if (fit or {}).get("per_matrix") else None


def _pooled_units(files: list[dict], quantity: str, *, subspace: bool = False) -> np.ndarray:
    """Per-input values averaged over captures (same probe inputs in every capture), else concatenated; with
    `subspace`, of the per-head subspace fit instead of the file's own per-matrix values."""
    arrays = [per_input_values(_subspace_fit(f) if subspace else f, quantity) for f in files]
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


def _margins(trained: list[dict], stats, *, subspace: bool) -> dict:
    """The criteria's margins: the configured ones, fixed before the data; only the whole-sphere stand-in of the
    output error is lowered to OUTPUT_ERROR_NULL_FRACTION of the row-shuffled null (module docstring)."""
    err_ceiling = tuple(stats.margins["vmf_output_error"])
    err_null = _null_bound(trained, "row_shuffled", "vmf_output_error", 0)
    rev_null = _null_bound(trained, "row_shuffled", "reversibility_residual", 0)
    err_hi = err_ceiling[1]
    if not subspace and math.isfinite(err_null):
        err_hi = min(err_hi, OUTPUT_ERROR_NULL_FRACTION * err_null)
    return {"vmf_output_error": (err_ceiling[0], err_hi),
            "reversibility_residual": tuple(stats.margins["reversibility_residual"]),
            "head_isotropy": tuple(stats.margins["head_isotropy"]),
            "configured": {"vmf_output_error": err_ceiling},
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


def _late(files: list[dict]) -> list[dict]:
    """Captures of the second half of training (as for claim 1)."""
    steps = [f["step"] for f in files if f.get("step") is not None]
    half = 0.5 * max(steps) if steps else 0.0
    return [f for f in files if f.get("step") is None or f["step"] >= half] or files


def _worst_head(trained: list[dict]) -> tuple[float, dict]:
    """A seed's head isotropy: per (layer, head) the mean iota_relative over the late captures, then the minimum."""
    cells, _, why = _head_values(_late(trained))
    if why:
        return math.nan, {"why_undefined": why}
    per: dict[tuple, list] = {}
    for v, _, layer, head in cells:
        per.setdefault((layer, head), []).append(v)
    means = {k: float(np.mean(v)) for k, v in per.items()}
    (layer, head), worst = min(means.items(), key=lambda kv: kv[1])
    return worst, {"layer": layer, "head": head, "n_heads": len(means)}


def _seed_record(run: str, files: list[dict], stats) -> tuple[ClaimRecord, dict]:
    """One seed's description (never a decision) and its nested estimates {criterion: value}."""
    trained = [f for f in files if f.get("step") != 0]
    baseline = [f for f in files if f.get("step") == 0]
    causal = any(f.get("causal") for f in files)
    subspace = bool(trained) and all(_subspace_fit(f) for f in trained)
    if not trained:
        return (ClaimRecord("2", TITLE, INCONCLUSIVE, "only the step-0 attention (a baseline) was captured"),
                {"causal": causal, "subspace": False, "values": {}, "margins": None})
    m = _margins(trained, stats, subspace=subspace)
    err_units = _pooled_units(trained, "vmf_output_error", subspace=subspace)
    err, _ = unit_mean_interval(err_units, stats=stats, name="vMF output error, this seed (over probe inputs)")
    rev, _ = unit_mean_interval(_pooled_units(trained, "reversibility_residual"), stats=stats,
                                name="detailed-balance residual, this seed (over probe inputs)")
    iso, where = _worst_head(trained)
    values = {"head_isotropy": iso, "vmf_output_error": err.value,
              "reversibility": math.nan if causal else rev.value}
    heads = _head_criterion(trained, baseline, m["head_isotropy"])
    base = {}
    if baseline:
        agg = baseline[0].get("aggregate") or {}
        base = {q: (agg.get(q) or {}).get("mean") for q in ("vmf_output_error", "reversibility_residual",
                                                             "spectral_gap")}
    details = {"values": {k: finite_or_none(v) for k, v in values.items()}, "worst_head": where,
               "within_seed": {"vmf_output_error": err.to_dict(), "reversibility": rev.to_dict(),
                               "interval_over": "probe inputs of this one seed"},
               "head_isotropy": heads, "vmf_fit": "per head, in its subspace" if subspace else
               "whole sphere (no head subspaces in the files: a stand-in, not the claim's per-head fit)",
               "causal": causal, "margins": m, "n_inputs": int(err_units.size), "n_captures": len(trained),
               "step0_baseline": base, "head_averaged": _head_averaged(trained)}
    reason = ("one seed does not decide (seeds are the unit of inference); within this seed: head isotropy "
              f"{_g(iso)}, vMF output error {_g(err.value)}, reversibility residual "
              + ("undefined (causal)" if causal else _g(rev.value)))
    rec = ClaimRecord("2", TITLE, INCONCLUSIVE, reason, details=details,
                      calibration=_calibration(trained, baseline, m, causal, trained[0].get("shape")))
    return rec, {"causal": causal, "subspace": subspace, "values": values, "margins": m}


def _g(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "undefined"


def _power(pool, margin, edge: str, ideal: float, stats) -> dict:
    """Power of the seed-level rule where the claim is true but not trivially: halfway to the margin edge."""
    bound = margin[0] if edge == "lower" else margin[1]
    true = 0.5 * (ideal + bound)
    sd = pool.standard_error * math.sqrt(pool.n_seeds) if pool.n_seeds >= 2 else math.nan
    one = (bound, math.inf) if edge == "lower" else (-math.inf, bound)
    at = {n: seed_interval_power(n, sd, true, one, confidence_level=stats.confidence_level)
          if math.isfinite(sd) else None for n in sorted({pool.n_seeds, MIN_SEEDS, POWER_DESIGN_SEEDS})}
    return {"true_value": true, "seed_sd": finite_or_none(sd), "power_at_n_seeds": {str(k): v for k, v in at.items()},
            "method": "noncentral t: per-seed estimates N(true value, observed seed SD^2)"}


def _configuration_record(config: str, seeds: dict[str, tuple[ClaimRecord, dict]], stats) -> ClaimRecord:
    causal = any(info["causal"] for _, info in seeds.values())
    subspace = all(info["subspace"] for _, info in seeds.values())
    margins = [info["margins"] for _, info in seeds.values() if info["margins"]]
    crit, powers = {}, {}
    for name, (key, edge, ideal) in CRITERIA.items():
        if key == "vmf_output_error" and margins:
            hi = min(m["vmf_output_error"][1] for m in margins)  # the strictest seed's (only the stand-in lowers it)
            margin = (margins[0]["vmf_output_error"][0], hi)
        else:
            margin = tuple(stats.margins[key])
        pool = seed_pool({s: info["values"].get(name) for s, (_, info) in seeds.items()},
                         confidence_level=stats.confidence_level)
        one = (margin[0], math.inf) if edge == "lower" else (-math.inf, margin[1])
        verdict, why = seed_verdict(pool, one)
        if name == "reversibility" and causal:
            verdict, why = INCONCLUSIVE, "causal mask: token 1 is absorbing, pi = e_1"
        p = (equivalence_pvalue(pool.estimate, pool.standard_error, one, df=pool.df or None)
             if pool.decidable and verdict != INCONCLUSIVE or (pool.decidable and not causal) else None)
        crit[name] = {"verdict": verdict, "estimate": pool.estimate, "confidence_interval":
                      list(pool.confidence_interval), "margin": list(margin), "why": why, "pool": pool.to_dict(),
                      "pvalue": p}
        powers[name] = _power(pool, margin, edge, ideal, stats)
    verdict = _combine([c["verdict"] for c in crit.values()])
    pv = [c["pvalue"] for c in crit.values()]
    e = crit["vmf_output_error"]
    reason = f"{len(seeds)} seed(s); " + "; ".join(
        f"{n.replace('_', ' ')} {_g(c['estimate'])} CI [{_g(c['confidence_interval'][0])}, "
        f"{_g(c['confidence_interval'][1])}] vs {'>=' if CRITERIA[n][1] == 'lower' else '<='} "
        f"{c['margin'][0 if CRITERIA[n][1] == 'lower' else 1]:.3g} ({c['verdict']}"
        + (f": {c['why']}" if c["why"] else "") + ")" for n, c in crit.items())
    sizes = [r.calibration["size"] for r, _ in seeds.values() if (r.calibration or {}).get("size") is not None]
    est = Estimate("attention-output error of the isotropic (vMF) kernel "
                   + ("in each head's subspace" if subspace else "on the whole sphere (stand-in)")
                   + ", relative to the mean field (mean over seeds)", e["estimate"], tuple(e["confidence_interval"]),
                   stats.confidence_level)
    return ClaimRecord(
        "2", TITLE, verdict, reason, estimate=est, margin=tuple(e["margin"]),
        calibration={"shape": {"n_seeds": len(seeds)}, "size": max(sizes) if sizes else None, "size_se": None,
                     "power": powers, "n_replicates": sum(r.calibration["n_replicates"] for r, _ in seeds.values()
                                                          if r.calibration),
                     "method": "size: largest per-seed pass rate of the rule on its nulls; power: module docstring"},
        tests=[{"name": f"{n} equivalence over seeds (TOST)", "statistic": finite_or_none(c["estimate"]),
                "pvalue": c["pvalue"], "rejected": None if c["pvalue"] is None else bool(c["pvalue"] < stats.alpha)}
               for n, c in crit.items()],
        details={"pvalue": None if None in pv else max(pv), "causal": causal, "criteria": crit,
                 "vmf_fit": "per head, in its subspace" if subspace else "whole sphere (stand-in)",
                 "seeds": sorted(seeds), **{f"verdict_{n}": c["verdict"] for n, c in crit.items()}})


def file_verdicts(result: dict, stats) -> dict:
    """A verdict per claim-2 criterion for one attention file (`stats attention`), with its margin.

    The margins of one seed in `markov_claim` (the whole-sphere fit: a user's file carries no head subspaces), but
    the units are the file's matrices (a user's array carries no
    grouping; each aggregate interval is the percentile bootstrap of the mean over matrices): interval inside
    the margin -> "supported", entirely outside -> "not supported", else (or undefined) "inconclusive".
    """
    agg, null = result.get("aggregate") or {}, (result.get("null_models") or {}).get("row_shuffled") or {}
    out = {}
    for q, frac, why in (("reversibility_residual", None,
                          "undefined under a causal mask: token 1 is absorbing (pi = e_1)"),
                         ("vmf_output_error", OUTPUT_ERROR_NULL_FRACTION, "needs --features (the token features)")):
        ceiling = tuple(stats.margins[q])
        lo_null = ((null.get(q) or {}).get("confidence_interval") or [None])[0]
        margin = (ceiling[0], min(ceiling[1], frac * lo_null) if lo_null is not None and frac else ceiling[1])
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
    """Claim 2 over every configuration, seeds as the unit (module docstring).

    Args:
        files: [{"run", "attention": stats_stage.attention_files.analyze_attention_file output}] (with "step",
            "null_models", "head_kernels" with, where the stage computed it, "subspace_vmf"
            (markov_chain.head_subspace_vmf); the step-0 capture is the baseline).
        stats: StatsConfig (confidence_level, n_resamples, seed, alpha, margins["head_isotropy"],
            margins["vmf_output_error"], margins["reversibility_residual"]).
        excluded: run -> reason for runs that did not train.

    Returns:
        The claim's ClaimRecord: per_model one record per configuration decided on its seeds, per_run one
        descriptive record per seed.
    """
    excluded = dict(excluded or {})
    by_run: dict[str, list] = {}
    for f in files:
        by_run.setdefault(f["run"], []).append(f["attention"])
    per_run, configs = {}, {}
    for run, fs in sorted(by_run.items()):
        if run in excluded:
            per_run[run] = did_not_train_record("2", TITLE, excluded[run])
            continue
        rec, info = _seed_record(run, fs, stats)
        per_run[run] = rec
        config, seed = configuration_of(run)
        configs.setdefault(config, {})[seed] = (rec, info)
    per_model = {c: _configuration_record(c, seeds, stats) for c, seeds in sorted(configs.items())}
    verdict, reason, decider = pool_runs(per_model, excluded={}, unit="configurations")
    whys = {c: next((k["why"] for k in rec.details["criteria"].values() if k["why"]), None)
            for c, rec in per_model.items()}
    reason += "".join(f"; {c}: {why}" for c, why in sorted(whys.items()) if why)
    if excluded:
        reason += f"; {len(excluded)} run(s) that did not train left out"
    decided = [c for c, rec in per_model.items() if rec.estimate is not None and math.isfinite(rec.estimate.value)]
    pick = decider or (max(decided, key=lambda c: per_model[c].estimate.value) if decided else None)
    pvals = [per_model[c].details.get("pvalue") for c in per_model]
    p_iut = max(pvals) if per_model and all(p is not None for p in pvals) else None
    sizes = [rec.calibration["size"] for rec in per_model.values() if (rec.calibration or {}).get("size") is not None]
    return ClaimRecord(
        "2", TITLE, verdict, reason + (f"; deciding configuration {pick}" if pick else ""),
        estimate=per_model[pick].estimate if pick else None, margin=per_model[pick].margin if pick else None,
        calibration={"shape": "per configuration (see per_model)", "size": max(sizes) if sizes else None,
                     "size_se": None, "power": {c: rec.calibration["power"] for c, rec in per_model.items()},
                     "n_replicates": sum(rec.calibration["n_replicates"] for rec in per_model.values()),
                     "method": "largest per-configuration size of the rule on its nulls; power per configuration"}
        if per_model else None,
        tests=[{"name": "head isotropy, vMF output error and reversibility over seeds (intersection-union over "
                        "configurations)", "statistic": None,
                "pvalue": finite_or_none(p_iut), "rejected": None if p_iut is None else bool(p_iut < stats.alpha)}],
        per_run=per_run, per_model=per_model, seeds=seed_unit({c: len(s) for c, s in configs.items()}),
        details={"pvalue": p_iut, "deciding_configuration": pick, "rule_history": claim_rule_history("2"),
                 "rule": "per configuration, the t-interval over seeds of each criterion inside its margin; "
                         "pooled: every configuration supported"})
