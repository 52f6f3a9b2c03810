"""One attention capture beyond markov_chain's statistics: the subsample its null models are computed on, the
paired comparison with the step-0 attention, the exact vMF alternative, and the text summary of `stats attention`.

Pure functions of arrays and statistics records; reading the capture files is brownformer.stats_stage.attention_files.
"""
from __future__ import annotations

from dataclasses import fields

import numpy as np

from brownformer.stats.core.bootstrap import ClusterBootstrap
from brownformer.stats.markov.markov_chain import QUANTITIES, analyze_attention, broadcast_features
from brownformer.statsfile import AttentionStats, InitComparison, Keyed, PairedDifference, QuantityAggregates

__all__ = ["null_subsample", "paired_difference", "exact_vmf_alternative", "summary_text", "MAX_NULL_MATRICES",
           "INIT_QUANTITIES"]

#: null models are recomputed on at most this many matrices (seeded subsample) to keep the stage fast
MAX_NULL_MATRICES = 128
#: per-matrix quantities compared between a capture and the initialisation-time attention
INIT_QUANTITIES = (*QUANTITIES, "vmf_kappa", "vmf_output_error")


def null_subsample(A: np.ndarray, feats, rng: np.random.Generator):
    """At most MAX_NULL_MATRICES matrices (and their features), flattened to (k, n, n) and (k, n, d)."""
    n = A.shape[-1]
    flat = A.reshape(-1, n, n)
    F = None if feats is None else broadcast_features(feats, A.shape).reshape(-1, n, np.shape(feats)[-1])
    idx = np.arange(flat.shape[0])
    if idx.size > MAX_NULL_MATRICES:
        idx = np.sort(rng.choice(idx.size, MAX_NULL_MATRICES, replace=False))
    return flat[idx], (None if F is None else np.ascontiguousarray(F[idx])), idx


def paired_difference(cur: AttentionStats, init: AttentionStats, shape: list, *, stats) -> InitComparison:
    """Mean per-matrix difference (this capture - initialisation) of each quantity, matrices paired by
    position (layer, head, input); cluster-bootstrap t-interval over probe inputs (axis -3 of the
    attention, stats/core/bootstrap.py) at stats.confidence_level."""
    lead = tuple(shape[:-2])
    out = []
    for q in INIT_QUANTITIES:
        cur_values, init_values = cur.per_matrix.get(q), init.per_matrix.get(q)
        if cur_values is None or init_values is None:
            continue
        a = np.array([np.nan if v is None else v for v in cur_values], float)
        b = np.array([np.nan if v is None else v for v in init_values], float)
        if a.shape != b.shape or not np.isfinite(a - b).any():
            continue
        diff = a - b
        if len(lead) >= 2:  # per probe input: mean over layers and heads (all-NaN inputs dropped below)
            D = diff.reshape(-1, lead[-1])
            ok = np.isfinite(D)
            units = np.where(ok.any(0), np.where(ok, D, 0.0).sum(0) / np.maximum(ok.sum(0), 1), np.nan)
        else:
            units = diff
        units = units[np.isfinite(units)]
        est = float(np.nanmean(diff))
        ci = [est, est]
        if units.size >= 3 and np.ptp(units) > 0:
            boot = ClusterBootstrap(np.arange(units.size), n_resamples=stats.n_resamples, rng=stats.seed)
            lo, hi = boot.estimate(units[:, None], lambda m: m[..., 0]).interval(stats.confidence_level)
            ci = [float(lo[0]), float(hi[0])]
        out.append(PairedDifference(capture_mean=float(np.nanmean(a)), init_mean=float(np.nanmean(b)), difference=est,
                                    confidence_interval=ci, n_units=int(units.size), quantity=q))
    return InitComparison(quantities=Keyed.of(out), unit="probe input" if len(lead) >= 2 else "matrix",
                          method="mean of paired per-matrix differences (capture - step 0); cluster-bootstrap "
                                 "t-interval over units")


def exact_vmf_alternative(F: np.ndarray, kappa: np.ndarray, stats) -> QuantityAggregates:
    """Aggregates of analyze_attention on A_ij = softmax_j(kappa <u_i, u_j>) built from features F (k, n, d)."""
    U = F / np.linalg.norm(F, axis=-1, keepdims=True)
    S = np.nan_to_num(kappa)[:, None, None] * (U @ np.swapaxes(U, -1, -2))  # (k, n, n) logits
    A = np.exp(S - S.max(-1, keepdims=True))
    A /= A.sum(-1, keepdims=True)
    return analyze_attention(A, features=F, causal=False, confidence_level=stats.confidence_level,
                             rng=stats.seed).aggregate


def summary_text(result: AttentionStats | dict) -> str:
    """A short human summary of `stats attention`: one verdict line per claim-2 criterion, then the chain;
    `result`: the record, or its JSON (parsed once)."""
    names = {"head_isotropy": "head isotropy   min (tr M)^2/(d_h |M|_F^2)", "vmf_output_error":
             "vMF output error ||(A - A_vMF) U|| / ||(A - A_mean) U||", "reversibility_residual":
             "reversibility   ||Pi A - A^T Pi|| / ||Pi A||"}
    r = AttentionStats.from_dict(result, "stats attention result")
    lines = [f"{r.n_matrices} matrices of {r.n} x {r.n}" + (" (causal)" if r.causal else "")]
    criteria = [(f.name, getattr(r.verdicts, f.name)) for f in fields(r.verdicts)] if r.verdicts else []
    for q, v in criteria:
        lo, hi = v.margin
        bound = f">= {lo:.3g}" if q == "head_isotropy" else f"<= {hi:.3g}"
        if v.why_undefined is None:
            ci = v.confidence_interval
            val = f"{v.estimate:.3g}" + (f" [{ci[0]:.3g}, {ci[1]:.3g}]" if ci and None not in ci else "")
        else:
            val = f"undefined ({v.why_undefined})"
        lines.append(f"{v.verdict.upper():<14} {names[q]}: {val}; margin {bound}")
    gap = r.aggregate.spectral_gap
    if gap is not None and gap.mean is not None:
        lines.append(f"spectral gap {gap.mean:.3g}; per-matrix values and nulls in the JSON")
    return "\n".join(lines)
