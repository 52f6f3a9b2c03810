"""Claim 2 inside one seed: its nested estimates (per-input values averaged over captures, the worst head), its margins,
and its description (within-seed intervals over probe inputs, the rule on its nulls). One seed never decides:
claim2_markov.py pools the seeds of a configuration (its docstring has the criteria and margins).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from brownformer.statsfile import QuantityAggregates
from brownformer.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, ClaimRecord

from .common import equivalence_verdict, finite_or_none, unit_mean_interval
from .details import (AttentionShape, Claim2Margins, Claim2SeedDetails, HeadAveraged, HeadCheck, RuleCalibration,
                      UndefinedHeadCheck, WorstHead)
from .claim_inputs import AttentionFile, PerMatrix

__all__ = ["seed_record", "per_input_values", "upper_margin", "combine", "fmt_value", "SeedValues", "TITLE",
           "NO_HEAD_FIT", "OUTPUT_ERROR", "RESIDUAL", "SUBSPACE_FIT"]

TITLE = "Attention is an isotropic (von Mises-Fisher) and reversible Markov kernel"
#: why the output-error criterion is undefined in a seed without a fit in each head's subspace
NO_HEAD_FIT = ("no fit in each head's subspace (W_Q, W_K missing or projected); the whole-sphere fit is not the "
               "claim's when d_h < d")
#: the attention quantities the criteria read (stats/markov/markov_chain.py's names)
OUTPUT_ERROR, RESIDUAL, KAPPA = "vmf_output_error", "reversibility_residual", "vmf_kappa"
SUBSPACE_FIT = "per head, in its subspace"
_WHOLE_SPACE_FIT = "whole sphere = each head's subspace (d_h = d)"


@dataclass(frozen=True)
class SeedValues:
    """What one seed brings to its configuration: the nested estimates, why each is undefined, and (for a fixed
    model) each criterion's (estimate, interval, standard error) over its probe inputs."""
    causal: bool
    fit: str | None
    values: dict[str, float]
    why: dict[str, str | None]
    within: dict[str, tuple]
    n_inputs: int


def per_input_values(result: PerMatrix, quantity: str) -> np.ndarray:
    """Per-probe-input means of one per-matrix quantity of an attention result.

    Axes are (layer, head, input, n, n) for our captures: the input axis is the last leading axis
    when there are at least two; otherwise every matrix is its own unit.
    """
    vals = np.array([np.nan if v is None else v for v in result.per_matrix.get(quantity, [])], float)
    lead = tuple((result.shape or [])[:-2])
    if vals.size == 0 or int(np.prod(lead)) != vals.size or len(lead) < 2:
        return vals
    return _nanmean(vals.reshape(-1, lead[-1]), axis=0)


def _nanmean(a: np.ndarray, axis: int) -> np.ndarray:
    """nanmean without the 'mean of empty slice' warning: all-NaN units stay NaN and are dropped later."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(a, axis=axis)


def _fit_kind(trained: list[AttentionFile]) -> str | None:
    """Which vMF fit is the claim's here: "per head, in its subspace" (head_kernels.subspace_vmf in every file);
    "whole sphere = each head's subspace (d_h = d)" when every head spans the whole space; else None."""
    if trained and all(f.subspace_fit for f in trained):
        return SUBSPACE_FIT
    bounds = [rec.rank_bound for f in trained for rec in f.head_layers]
    if bounds and all(b is not None and b >= 1 for b in bounds):
        return _WHOLE_SPACE_FIT
    return None


def _pooled_units(files: list[AttentionFile], quantity: str, *, subspace: bool = False) -> np.ndarray:
    """Per-input values averaged over captures (same probe inputs in every capture), else concatenated; with
    `subspace`, of the per-head subspace fit instead of the file's own per-matrix values."""
    arrays = [per_input_values(f.subspace_fit if subspace else f.values, quantity) for f in files]
    arrays = [a for a in arrays if a.size]
    if not arrays:
        return np.array([])
    if len({a.size for a in arrays}) == 1:
        return _nanmean(np.stack(arrays), axis=0)
    return np.concatenate(arrays)


def _null_bound(files: list[AttentionFile], quantity: str, side: int) -> float:
    """Most extreme confidence bound (side 1: upper, 0: lower) of the row-shuffled null's aggregate over the
    captures."""
    bounds = []
    for f in files:
        agg = (f.null_models.row_shuffled or {}).get(quantity)
        if agg and agg.confidence_interval and agg.confidence_interval[side] is not None:
            bounds.append(float(agg.confidence_interval[side]))
    if not bounds:
        return math.nan
    return max(bounds) if side == 1 else min(bounds)


def _margins(trained: list[AttentionFile], stats) -> Claim2Margins:
    """The criteria's margins, the configured ones fixed before the data, and the row-shuffled null's lower bounds
    beside them (reported, never moving a margin)."""
    return Claim2Margins(
        vmf_output_error=tuple(stats.margins[OUTPUT_ERROR]), reversibility_residual=tuple(stats.margins[RESIDUAL]),
        head_isotropy=tuple(stats.margins["head_isotropy"]),
        null_bounds={"vmf_output_error_row_shuffled_lower": _null_bound(trained, OUTPUT_ERROR, 0),
                     "reversibility_residual_row_shuffled_lower": _null_bound(trained, RESIDUAL, 0)})


def upper_margin(margin) -> tuple[float, float]:
    """The margin as the one-sided bound it is: output error and residual are >= 0, only the upper edge binds."""
    return (-math.inf, margin[1])


def combine(parts) -> str:
    return (NOT_SUPPORTED if NOT_SUPPORTED in parts else SUPPORTED if all(p == SUPPORTED for p in parts)
            else INCONCLUSIVE)


def _mean(agg: QuantityAggregates | None, quantity: str) -> float | None:
    a = (agg or {}).get(quantity)
    return a.mean if a else None


def _passes(agg: QuantityAggregates | None, margins: Claim2Margins, causal: bool) -> bool | None:
    """Would the attention-level rule call these aggregate point statistics "supported"? None without features."""
    e, r = _mean(agg, OUTPUT_ERROR), _mean(agg, RESIDUAL)
    if e is None:
        return None
    v_err = equivalence_verdict((e, e), upper_margin(margins.vmf_output_error))
    v_rev = (INCONCLUSIVE if causal or r is None else
             equivalence_verdict((r, r), upper_margin(margins.reversibility_residual)))
    return combine((v_err, v_rev)) == SUPPORTED


def _calibration(trained: list[AttentionFile], baseline: list[AttentionFile], margins: Claim2Margins, causal: bool,
                 shape) -> RuleCalibration:
    """The run's attention-level rule on its nulls (size: a null that passes counts against the rule) and on
    the exact vMF kernel at the fitted concentrations (power at the exact alternative)."""
    nulls = [n for f in trained for n in (f.null_models.row_shuffled, f.null_models.shuffled_keys)]
    nulls += [f.aggregate for f in baseline]
    passes = [p for p in (_passes(a, margins, causal) for a in nulls) if p is not None]
    alt = [p for p in (_passes(f.null_models.vmf_exact, margins, causal) for f in trained) if p is not None]
    n = len(passes)
    size = float(np.mean(passes)) if n else None
    return RuleCalibration(
        shape=AttentionShape(attention=shape, n_captures=len(trained)), size=size,
        size_se=math.sqrt(size * (1 - size) / n) if n else None,
        power={"exact_vmf_kernel": float(np.mean(alt))} if alt else {}, n_replicates=n,
        method="the run's rule (output error and reversibility) on the point statistics of the row-shuffled and "
               "shuffled-key nulls of every capture and of the step-0 attention (size), and of the exact vMF kernel "
               "at each matrix's fitted kappa on the real features (power at the exact alternative; not at the "
               "margin edge)")


def _head_values(files: list[AttentionFile]) -> tuple[list[tuple], list[float], str | None]:
    """[(iota_relative, capture step, layer, head)], the asymmetries, and why undefined (or None)."""
    cells, asym = [], []
    for f in files:
        if not f.has_head_kernels or f.heads_undefined:
            return [], [], f.heads_undefined or "no W_Q, W_K captured for this attention file"
        for layer, rec in enumerate(f.head_layers):
            cells += [(float(v), f.step, layer, h) for h, v in enumerate(rec.identity_fraction_relative)]
            asym += [float(v) for v in rec.asymmetry]
    return cells, asym, None


def _head_criterion(trained: list[AttentionFile], baseline: list[AttentionFile],
                    margin) -> HeadCheck | UndefinedHeadCheck:
    """Every head of the trained model (captures of the second half of training, as for claim 1) vs the margin."""
    steps = [f.step for f in trained if f.step is not None]
    half = 0.5 * max(steps) if steps else 0.0
    trained = [f for f in trained if f.step is None or f.step >= half] or trained
    cells, asym, why = _head_values(trained)
    if why:
        return UndefinedHeadCheck(INCONCLUSIVE, why, list(margin))
    worst = min(cells, key=lambda c: c[0])
    first = next((f.head_layers[0] for f in trained if f.has_head_kernels), None)
    base_cells, base_asym, _ = _head_values(baseline) if baseline else ([], [], None)
    verdict = SUPPORTED if worst[0] >= margin[0] else NOT_SUPPORTED
    return HeadCheck(verdict=verdict, estimate=worst[0], step=worst[1], layer=worst[2], head=worst[3],
                     judged_from_step=half, margin=list(margin), n_heads_checked=len(cells),
                     n_heads_inside=sum(c[0] >= margin[0] for c in cells),
                     median_iota_relative=float(np.median([c[0] for c in cells])),
                     rank_bound=first.rank_bound if first else None, asymmetry_median=float(np.median(asym)),
                     asymmetry_max=float(np.max(asym)),
                     step0_iota_relative_max=max((c[0] for c in base_cells), default=None),
                     step0_asymmetry_median=float(np.median(base_asym)) if base_asym else None,
                     note="iota <= d_h/d for one head: no head is isotropic on the whole sphere; iota_relative = 1 "
                          "iff isotropic within its d_h-dimensional subspace")


def _head_averaged(trained: list[AttentionFile]) -> HeadAveraged | None:
    vals = [f.head_averaged for f in trained]
    errs = [m for v in vals if (m := _mean(v, OUTPUT_ERROR)) is not None]
    kap = [m for v in vals if (m := _mean(v, KAPPA)) is not None]
    return HeadAveraged(vmf_output_error_mean=float(np.mean(errs)) if errs else None,
                        vmf_kappa_mean=float(np.mean(kap)) if kap else None) if vals else None


def _late(files: list[AttentionFile]) -> list[AttentionFile]:
    """Captures of the second half of training (as for claim 1)."""
    steps = [f.step for f in files if f.step is not None]
    half = 0.5 * max(steps) if steps else 0.0
    return [f for f in files if f.step is None or f.step >= half] or files


def _worst_head(trained: list[AttentionFile]) -> tuple[float, WorstHead]:
    """A seed's head isotropy: per (layer, head) the mean iota_relative over the late captures, then the minimum."""
    cells, _, why = _head_values(_late(trained))
    if why:
        return math.nan, WorstHead(why_undefined=why)
    per: dict[tuple, list] = {}
    for v, _, layer, head in cells:
        per.setdefault((layer, head), []).append(v)
    means = {k: float(np.mean(v)) for k, v in per.items()}
    (layer, head), worst = min(means.items(), key=lambda kv: kv[1])
    return worst, WorstHead(layer=layer, head=head, n_heads=len(means))


def seed_record(run: str, files: list[AttentionFile], stats) -> tuple[ClaimRecord, SeedValues]:
    """One seed's description (never a decision) and its nested estimates."""
    trained = [f for f in files if f.step != 0]
    baseline = [f for f in files if f.step == 0]
    causal = any(f.causal for f in files)
    fit = _fit_kind(trained)
    if not trained:
        return (ClaimRecord("2", TITLE, INCONCLUSIVE, "only the step-0 attention (a baseline) was captured"),
                SeedValues(causal, None, {}, {}, {}, 0))
    m = _margins(trained, stats)
    err_units = _pooled_units(trained, OUTPUT_ERROR, subspace=fit == SUBSPACE_FIT)
    err, err_se = unit_mean_interval(err_units, stats=stats, name="vMF output error, this seed (over probe inputs)")
    whole, _ = unit_mean_interval(_pooled_units(trained, OUTPUT_ERROR), stats=stats,
                                  name="vMF output error of one kappa on the whole sphere (description)")
    rev, rev_se = unit_mean_interval(_pooled_units(trained, RESIDUAL), stats=stats,
                                     name="detailed-balance residual, this seed (over probe inputs)")
    iso, where = _worst_head(trained)
    values = {"head_isotropy": iso, OUTPUT_ERROR: err.estimate if fit else math.nan,
              "reversibility": math.nan if causal else rev.estimate}
    why = {"head_isotropy": where.why_undefined, OUTPUT_ERROR: None if fit else NO_HEAD_FIT,
           "reversibility": "causal mask: token 1 is absorbing, pi = e_1" if causal else None}
    heads = _head_criterion(trained, baseline, m.head_isotropy)
    base = {q: _mean(baseline[0].aggregate, q) for q in (OUTPUT_ERROR, RESIDUAL, "spectral_gap")} if baseline else {}
    details = Claim2SeedDetails(
        values={k: finite_or_none(v) for k, v in values.items()}, worst_head=where,
        within_seed={OUTPUT_ERROR: err.to_dict(), "reversibility": rev.to_dict(),
                     "interval_over": "probe inputs of this one seed"},
        head_isotropy=heads, vmf_fit=fit or NO_HEAD_FIT, whole_sphere_fit=whole.to_dict(), causal=causal, margins=m,
        n_inputs=int(err_units.size), n_captures=len(trained), step0_baseline=base,
        head_averaged=_head_averaged(trained))
    reason = ("one seed does not decide (seeds are the unit of inference); within this seed: head isotropy "
              f"{fmt_value(iso)}, vMF output error {fmt_value(err.estimate)}, reversibility residual "
              + ("undefined (causal)" if causal else fmt_value(rev.estimate)))
    rec = ClaimRecord("2", TITLE, INCONCLUSIVE, reason, details=details,
                      calibration=_calibration(trained, baseline, m, causal, trained[0].values.shape))
    # over this seed's probe inputs: what a fixed model (unit "inputs") is decided on; the worst head is exact
    undefined = (math.nan, (math.nan, math.nan), math.nan)
    within = {"head_isotropy": (iso, (iso, iso), 0.0 if math.isfinite(iso) else math.nan),
              OUTPUT_ERROR: (err.estimate, err.confidence_interval, err_se) if fit else undefined,
              "reversibility": undefined if causal else (rev.estimate, rev.confidence_interval, rev_se)}
    return rec, SeedValues(causal, fit, values, why, within, int(err_units.size))


def fmt_value(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "undefined"
