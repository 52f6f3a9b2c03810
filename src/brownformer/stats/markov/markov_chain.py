"""Claim 2: attention matrices as Markov transition matrices (docs/METHODS.md, "Formulas").

Row-stochasticity holds by construction and is only checked (bad input is refused). The
testable content: stationary law pi (left Perron vector), spectral gap 1 - |lambda_2|, entropy
rate, Dobrushin coefficient, reversibility (detailed balance), deviation from doubly
stochastic, and whether the kernel is an isotropic von Mises-Fisher kernel
A_ij ~ exp(kappa <u_i, u_j>) of the normalised token features.
"""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np

from brownformer.config import DEFAULT_STATS

from brownformer.io import to_jsonable
from brownformer.stats.markov.kernel_fit import fit_vmf_kernel, head_subspace_gram, vmf_scores
from brownformer.statsfile import (AttentionStats, ByQuantity, HeadAveragedFit, HeadIsotropy, HeadKernels,
                                   MatrixAggregate, NullModels, QuantityAggregates, SubspaceFit)

log = logging.getLogger(__name__)

__all__ = ["validate_attention", "row_sum_error", "dobrushin", "chain_statistics", "fit_vmf_kernel",
           "vmf_scores", "analyze_attention", "weight_isotropy", "head_subspace_vmf", "attention_null_models",
           "is_causal", "broadcast_features", "QUANTITIES"]

QUANTITIES = ("spectral_gap", "stationary_entropy", "entropy_rate", "reversibility_residual", "dobrushin",
              "doubly_stochastic_deviation")
#: quantities built on the stationary law, meaningless when pi = e_1 (causal mask: token 1 absorbing)
UNDEFINED_CAUSAL = ("stationary_entropy", "entropy_rate", "reversibility_residual", "entropy_production")


def validate_attention(A, *, atol: float = 1e-3) -> np.ndarray:
    """Check that A (..., n, n) holds row-stochastic matrices; return float64 rows renormalised.

    `atol` tolerates float16/float32 storage (row sums off by ~1e-3); anything beyond is refused.

    Raises:
        ValueError: naming the problem (shape, non-finite, negative, rows not summing to one).
    """
    A = np.asarray(A)
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"attention must have shape (..., n, n) with square matrices; got {A.shape}")
    if A.shape[-1] < 2:
        raise ValueError("attention matrices must be at least 2 x 2")
    A = A.astype(np.float64)
    if not np.all(np.isfinite(A)):
        raise ValueError(f"attention contains {int((~np.isfinite(A)).sum())} non-finite entries")
    if (A < -atol).any():
        raise ValueError(f"attention has negative entries (min {A.min():.3g}); not a transition matrix")
    dev = np.abs(A.sum(-1) - 1.0)
    if dev.max() > atol:
        raise ValueError(f"attention is not row-stochastic: max |row sum - 1| = {dev.max():.3g} > {atol:g}")
    A = np.clip(A, 0.0, None)
    return A / A.sum(-1, keepdims=True)


def row_sum_error(A) -> float:
    """max |sum_j A_ij - 1| over every row of the input as given (before `validate_attention` renormalises)."""
    A = np.asarray(A, dtype=np.float64)
    return float(np.max(np.abs(A.sum(-1) - 1.0))) if A.size else 0.0


def dobrushin(A: np.ndarray, *, max_elements: int = 2**22) -> np.ndarray:
    """Dobrushin coefficient delta(A) = 1/2 max_{i,j} ||A_i. - A_j.||_1 of each matrix of A (M, n, n).

    Rows are compared in chunks of c rows against all n rows, so memory is c * n * n
    (<= max_elements floats) instead of n^3 per matrix.
    """
    M, n, _ = A.shape
    chunk = max(1, min(n, max_elements // (n * n)))
    out = np.zeros(M)
    for m in range(M):
        for i0 in range(0, n, chunk):
            rows = A[m, i0:i0 + chunk]  # (c, n)
            l1 = np.abs(rows[:, None, :] - A[m][None, :, :]).sum(-1)  # (c, n)
            out[m] = max(out[m], 0.5 * l1.max())
    return out


def is_causal(A: np.ndarray, atol: float = 1e-6) -> bool:
    """True when every matrix is lower triangular (a causal mask)."""
    return bool(np.all(np.abs(np.triu(A, 1)) <= atol))


def _stationary(P: np.ndarray) -> np.ndarray:
    """Left Perron vector pi of each matrix (pi P = pi, sum pi = 1), eigenvalue closest to 1."""
    w, V = np.linalg.eig(np.swapaxes(P, -1, -2))
    idx = np.argmin(np.abs(w - 1.0), axis=-1)
    pi = np.take_along_axis(V, idx[..., None, None], axis=-1)[..., 0].real
    pi = np.abs(pi)
    return pi / pi.sum(-1, keepdims=True)


def chain_statistics(A: np.ndarray, *, causal: bool = False) -> ByQuantity[np.ndarray]:
    """Markov-chain summaries of each (n, n) matrix of A (M, n, n) (already validated).

    Formulas (Levin, Peres & Wilmer 2017):
      spectral gap gamma = 1 - |lambda_2| (second-largest eigenvalue modulus);
      stationary entropy -sum pi ln pi (<= ln n);
      entropy rate H = -sum_i pi_i sum_j A_ij ln A_ij;
      reversibility residual ||Pi A - A^T Pi||_F / ||Pi A||_F (0 iff detailed balance);
      entropy production e_p = 1/2 sum (pi_i A_ij - pi_j A_ji) ln(pi_i A_ij / (pi_j A_ji));
      Dobrushin delta = 1/2 max_{i,j} ||A_i. - A_j.||_1;
      doubly-stochastic deviation ||A^T 1 - 1||_2 / sqrt(n).
    Under a causal mask pi = e_1, so the pi-based entries are NaN, and the mean absorption time replaces the
    normalised stationary entropy.

    Returns:
        one (M,) array per quantity.
    """
    M, n, _ = A.shape
    ev = np.sort(np.abs(np.linalg.eigvals(A)), axis=-1)[:, ::-1]
    out = {"spectral_gap": 1.0 - ev[:, 1]}
    out["dobrushin"] = dobrushin(A)
    out["doubly_stochastic_deviation"] = np.linalg.norm(A.sum(-2) - 1.0, axis=-1) / np.sqrt(n)
    if causal:
        for k in UNDEFINED_CAUSAL:
            out[k] = np.full(M, np.nan)
        Q = A[:, 1:, 1:]  # transient block; fundamental matrix N = (I - Q)^-1 gives absorption times
        out["mean_absorption_time"] = np.linalg.solve(np.eye(n - 1) - Q, np.ones((M, n - 1))[..., None])[..., 0].mean(-1)
        return ByQuantity(**out)
    pi = _stationary(A)
    with np.errstate(divide="ignore", invalid="ignore"):
        logA = np.where(A > 0, np.log(np.where(A > 0, A, 1.0)), 0.0)
        entropy = -np.sum(np.where(pi > 0, pi * np.log(np.where(pi > 0, pi, 1.0)), 0.0), -1)
        out["stationary_entropy"] = entropy
        out["entropy_rate"] = -np.einsum("mi,mij,mij->m", pi, A, logA)
        flow = pi[..., :, None] * A  # Pi A
        out["reversibility_residual"] = (np.linalg.norm(flow - np.swapaxes(flow, -1, -2), axis=(-2, -1))
                                         / np.linalg.norm(flow, axis=(-2, -1)))
        lr = np.where((flow > 0) & (np.swapaxes(flow, -1, -2) > 0), np.log(flow) - np.log(np.swapaxes(flow, -1, -2)), 0.0)
        out["entropy_production"] = 0.5 * np.sum((flow - np.swapaxes(flow, -1, -2)) * lr, axis=(-2, -1))
    out["stationary_entropy_normalized"] = entropy / np.log(n)
    return ByQuantity(**out)


def broadcast_features(features, A_shape) -> np.ndarray:
    """Token features (..., n, d) broadcast to attention of shape A_shape (..., n, n); (L, B, n, d) features of
    (L, H, B, n, n) attention get the head axis (every head reads the same tokens).

    Raises:
        ValueError: non-finite features, or a shape that does not match the attention's.
    """
    F = np.asarray(features, dtype=np.float64)
    if not np.all(np.isfinite(F)):
        raise ValueError("features contain non-finite values")
    lead = A_shape[:-2]
    if F.shape[:-2] != lead and F.ndim == len(A_shape) - 1 and len(lead) >= 2:
        F = np.expand_dims(F, 1)  # (L, B, n, d) -> (L, 1, B, n, d) to match attention (L, H, B, n, n)
    try:
        return np.broadcast_to(F, lead + F.shape[-2:])
    except ValueError:
        raise ValueError(f"features of shape {np.shape(features)} do not match attention of shape {A_shape}") from None


#: bootstrap resamples of each aggregate mean over matrices
N_AGGREGATE_RESAMPLES = 499


def _aggregate(values: np.ndarray, confidence_level: float, rng) -> MatrixAggregate:
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return MatrixAggregate(mean=None, confidence_interval=[None, None], median=None, n=0)
    if v.size >= 3 and np.ptp(v) > 0:
        # percentile bootstrap of the mean (what scipy.stats.bootstrap(method="percentile") computes), as one
        # (499, n) draw: this runs ~450 times per run, where scipy's per-call overhead was a quarter of the stage
        means = v[rng.integers(0, v.size, size=(N_AGGREGATE_RESAMPLES, v.size))].mean(1)
        a = (1 - confidence_level) / 2
        ci = np.quantile(means, [a, 1 - a]).tolist()
    else:
        ci = [float(v.mean()), float(v.mean())]
    return MatrixAggregate(mean=float(v.mean()), confidence_interval=ci, median=float(np.median(v)), sd=float(v.std()),
                           n=int(v.size))


def _aggregates(per: ByQuantity[np.ndarray], confidence_level: float, rng) -> QuantityAggregates:
    """The MatrixAggregate of each quantity, drawn from `rng` in the order written."""
    return QuantityAggregates(**{k: _aggregate(v, confidence_level, rng) for k, v in per.items()})


def analyze_attention(A, *, features=None, causal: bool | None = None,
                      confidence_level: float = DEFAULT_STATS.confidence_level, atol: float = 1e-3,
                      rng=DEFAULT_STATS.seed, key_order=None, head_axis: int | None = None) -> AttentionStats:
    """Markov-chain statistics of every matrix of A (..., n, n), per matrix and aggregated.

    Args:
        A: row-stochastic matrices; leading dims are flattened in C order ("matrix order").
        features: optional token features (..., n, d) aligned with A (or (L, B, n, d) for A of
            shape (L, H, B, n, n)); enables the vMF kernel fit.
        causal: force the causal interpretation; default: detected (all matrices lower triangular).
        confidence_level: for the bootstrap CI of each aggregate mean (over matrices).
        atol: row-sum tolerance of `validate_attention`.
        key_order: permutation of key tokens for the vMF fit (null model); None = identity.
        head_axis: the axis of A that indexes heads (1 for our (L, H, B, n, n) captures); with features, the
            head-averaged attention mean_h A_h (still row-stochastic) gets its own vMF fit ("head_averaged").

    Returns:
        The file's AttentionStats without null models and head kernels: shape, n_matrices, n, causal, undefined
        (quantities set to None and why), per_matrix (each quantity's values, NaN as None), aggregate (each one's
        MatrixAggregate), the uniform chain's stationary entropy.

    Raises:
        ValueError: non-row-stochastic, negative, non-finite or non-square input.
    """
    A_in = A
    A = validate_attention(A, atol=atol)
    shape = A.shape
    n = shape[-1]
    flat = A.reshape(-1, n, n)
    causal = is_causal(flat) if causal is None else bool(causal)
    per = chain_statistics(flat, causal=causal)
    if features is not None:
        F = broadcast_features(features, shape).reshape(-1, n, np.shape(features)[-1])
        per = per.merged(vmf_scores(flat, F, causal=causal, key_order=key_order))
    rng = np.random.default_rng(rng)
    why = "causal mask: token 1 is absorbing, pi = e_1"
    out = AttentionStats(shape=list(shape), n_matrices=int(flat.shape[0]), n=n, causal=causal,
                         max_row_sum_error=to_jsonable(row_sum_error(A_in)),
                         undefined=ByQuantity(**({k: why for k in UNDEFINED_CAUSAL} if causal else {})),
                         per_matrix=per.map(to_jsonable), aggregate=_aggregates(per, confidence_level, rng),
                         uniform_reference=ByQuantity(stationary_entropy=float(np.log(n))))
    if features is not None and head_axis is not None and len(shape) > 3:
        Abar = A.mean(axis=head_axis)  # (..., n, n) without the head axis
        Fbar = np.take(broadcast_features(features, shape), 0, axis=head_axis).reshape(-1, n, np.shape(features)[-1])
        hv = vmf_scores(Abar.reshape(-1, n, n), Fbar, causal=causal)
        out = replace(out, head_averaged=HeadAveragedFit(shape=list(Abar.shape), per_matrix=hv.map(to_jsonable),
                                                         aggregate=_aggregates(hv, confidence_level, rng)))
    return out


def weight_isotropy(W_q, W_k, n_heads: int, *, gain=None) -> HeadIsotropy:
    """Per head h, the bilinear form of the logits M_h = W_Q,h^T W_K,h / sqrt(d_h) (q.k / sqrt(d_h) = x^T M y).

    identity fraction iota = (tr M)^2 / (d ||M||_F^2) in [0, 1], = 1 iff M ~ I (isotropic kernel exp(kappa x.y));
        for M = c I + E with tr E = 0 it is the share of ||M||_F^2 in c I, and (1 - iota)/iota is the variance of
        the anisotropic logits relative to the isotropic ones for independent uniform unit tokens;
    rank bound: |tr M| <= sum of singular values <= sqrt(rank) ||M||_F, so iota <= rank(M)/d <= d_h/d: one head
        with d_h < d cannot be isotropic on S^(d-1);
    iota_relative = iota d / d_h in [0, 1], = 1 iff M = c P with P an orthogonal projection of rank d_h (the best
        a rank-d_h kernel can do: isotropic within its subspace);
    asymmetry = ||M - M^T||_F / ||M + M^T||_F (0 for symmetric M, which makes the attention exactly reversible
        with pi_i ~ Z_i = sum_j exp(S_ij); biases add per-key terms f_j, which keep it reversible).
    subspace_basis (per head, d_h x d orthonormal rows): the eigenvectors of the symmetric part (M + M^T)/2 with
        the d_h largest |eigenvalues|, the subspace an isotropic head M = c P attends in (`head_subspace_vmf`).
    W in torch.nn.Linear layout (d_out, d_in), heads in row blocks; the heads' mean M is reported too.
    gain: the LayerNorm gamma (d,) feeding W_Q and W_K in a pre-LN block. It folds into the form,
    M = diag(gain) W_Q^T W_K diag(gain) / sqrt(d_h), the form on the pre-affine z the model computes on: invariant
    under gamma -> s gamma, W -> W diag(1/s) (claim1_sphere.py); without it the form is gauge-dependent.

    Raises:
        ValueError: shapes that do not match or rows not divisible by n_heads.
    """
    W_q, W_k = np.asarray(W_q, float), np.asarray(W_k, float)
    if W_q.shape != W_k.shape or W_q.ndim != 2 or W_q.shape[0] % n_heads:
        raise ValueError(f"W_q {W_q.shape} and W_k {W_k.shape} must be equal 2-D shapes with rows divisible by "
                         f"n_heads={n_heads}")
    dh, d = W_q.shape[0] // n_heads, W_q.shape[1]
    if gain is not None:
        g = np.asarray(gain, float).reshape(-1)
        if g.size != d:
            raise ValueError(f"gain has {g.size} entries, W_q has {d} input dimensions")
        W_q, W_k = W_q * g, W_k * g  # W diag(g): the folded map from z
    Ms = np.stack([W_q[h * dh:(h + 1) * dh].T @ W_k[h * dh:(h + 1) * dh] for h in range(n_heads)]) / np.sqrt(dh)

    def iota(M):
        return np.trace(M, axis1=-2, axis2=-1) ** 2 / (d * np.sum(M * M, axis=(-2, -1)))

    io = iota(Ms)
    bound = min(dh, d) / d
    asym = (np.linalg.norm(Ms - np.swapaxes(Ms, -1, -2), axis=(-2, -1))
            / np.linalg.norm(Ms + np.swapaxes(Ms, -1, -2), axis=(-2, -1)))
    return HeadIsotropy(
        identity_fraction=to_jsonable(io), rank_bound=bound, identity_fraction_relative=to_jsonable(io / bound),
        asymmetry=to_jsonable(asym), n_heads=int(n_heads), d=d, d_head=dh,
        identity_fraction_mean=to_jsonable(float(np.mean(io))), asymmetry_mean=to_jsonable(float(np.mean(asym))),
        head_mean_identity_fraction=to_jsonable(float(iota(Ms.mean(0)))), gain_folded=gain is not None,
        subspace_basis=to_jsonable([_head_subspace(M, dh) for M in Ms]),
        kappa_equivalent=to_jsonable((np.trace(Ms, axis1=-2, axis2=-1) / d).tolist()))


def _head_subspace(M: np.ndarray, dh: int) -> np.ndarray:
    """(d_h, d) orthonormal eigenvectors of (M + M^T)/2 with the d_h largest |eigenvalues|."""
    w, V = np.linalg.eigh((M + M.T) / 2)
    return V[:, np.argsort(-np.abs(w))[:dh]].T


def head_subspace_vmf(A, features, head_kernels: HeadKernels | None, *, head_axis: int = 1, causal: bool = False,
                      confidence_level: float = DEFAULT_STATS.confidence_level, rng=DEFAULT_STATS.seed) -> SubspaceFit:
    """The isotropic-kernel fit inside each head's subspace: A_h,ij ~ softmax_{j != i}(kappa <P_h u_i, P_h u_j>).

    P_h projects onto head h's d_h-dimensional query/key subspace (weight_isotropy's subspace_basis, from
    W_Q^T W_K of that head and layer). One kappa per matrix, scored by its consequence as `vmf_scores` does
    (the attention output's error relative to the mean field, the token positions as values). A head isotropic
    within its subspace (M = c P) gives 0; with d_h < d the whole-sphere fit cannot reach 0 for any head.

    Args:
        A: (L, H, B, n, n) attention (validated here); features: (L, B, n, d) the tokens the heads read.
        head_kernels: the same capture's HeadKernels (weight_isotropy per layer).
        head_axis: must be 1 (layers first).

    Returns:
        SubspaceFit: per_matrix vmf_kappa and vmf_output_error, [L*H*B] in A's order, their aggregates, the shape,
        gain_folded, the method; only why_undefined when the weights or features do not fit.
    """
    layers = (head_kernels.per_layer if head_kernels is not None else None) or []
    A = validate_attention(A)
    if head_axis != 1 or A.ndim != 5 or features is None or len(layers) != A.shape[0]:
        return SubspaceFit(why_undefined="needs (L, H, B, n, n) attention, its features and W_Q, W_K of every layer")
    L, H, B, n, _ = A.shape
    F = np.asarray(features, float)
    F = F[:, 0] if F.ndim == 5 else F  # (L, B, n, d)
    kappa, error = np.full((L, H, B), np.nan), np.full((L, H, B), np.nan)
    for l, rec in enumerate(layers):
        bases = rec.subspace_basis
        if bases is None or len(bases) != H:
            return SubspaceFit(why_undefined=f"layer {l}: no subspace basis for each of {H} heads")
        if np.shape(bases[0])[-1] != F.shape[-1]:
            return SubspaceFit(why_undefined=f"W_Q, W_K read {np.shape(bases[0])[-1]} dimensions, the features have "
                                             f"{F.shape[-1]}")
        for h in range(H):
            G = head_subspace_gram(F[l], np.asarray(bases[h], float))  # (B, n, n)
            sc = vmf_scores(A[l, h], F[l], causal=causal, gram=G)
            kappa[l, h], error[l, h] = sc.vmf_kappa, sc.vmf_output_error
    per = ByQuantity(vmf_kappa=kappa.reshape(-1), vmf_output_error=error.reshape(-1))
    rng = np.random.default_rng(rng)
    return SubspaceFit(per_matrix=per.map(to_jsonable), aggregate=_aggregates(per, confidence_level, rng),
                       shape=list(A.shape), gain_folded=all(r.gain_folded for r in layers),
                       method="per head: softmax_{j != i}(kappa <P_h u_i, P_h u_j>), P_h the head's subspace")


def attention_null_models(A, *, features=None, init_attention=None, rng=DEFAULT_STATS.seed, n_shuffles: int = 1,
                          confidence_level: float = DEFAULT_STATS.confidence_level) -> NullModels:
    """The same statistics under null models (docs/METHODS.md, "Formulas").

    - "row_shuffled": each row's weights permuted independently (keeps every row's weight
      distribution, destroys structure; the random-Markov-matrix baseline of a large gap).
    - "shuffled_keys": key features permuted across tokens in the vMF fit, logits kappa <u_i, u_perm(j)>
      (breaks the link between attention and geometry, including the self-similarity diagonal;
      kappa -> 0 and "explained" -> 0 if the fit meant anything).
      Permuting tokens of A itself would change nothing: every statistic is permutation invariant.
    - "init": the statistics of the given attention at initialisation.
    confidence_level and rng (a seed or Generator) as in `analyze_attention`.

    Returns:
        NullModels: each null's aggregates (row_shuffled only without a causal mask, shuffled_keys only with
        features, init only with `init_attention`).
    """
    A = validate_attention(A)
    rng = np.random.default_rng(rng)
    n = A.shape[-1]
    flat = A.reshape(-1, n, n)
    causal = is_causal(flat)
    out = {}
    if not causal:
        shuf = np.take_along_axis(flat, rng.random(flat.shape).argsort(-1), axis=-1)
        out["row_shuffled"] = analyze_attention(shuf.reshape(A.shape), features=features, causal=False,
                                                confidence_level=confidence_level, rng=rng).aggregate
    if features is not None:
        perm = rng.permutation(n)
        out["shuffled_keys"] = analyze_attention(A, features=features, causal=causal, confidence_level=confidence_level,
                                                 rng=rng, key_order=perm).aggregate
    if init_attention is not None:
        out["init"] = analyze_attention(init_attention, features=features, confidence_level=confidence_level,
                                       rng=rng).aggregate
    return NullModels(**out)
