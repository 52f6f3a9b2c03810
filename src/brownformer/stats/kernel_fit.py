"""Kernel fits of attention (claim 2): is A_ij ~ softmax_j(kappa <u_i, u_j>), an isotropic vMF kernel?

The vMF fit is scored against the best full bilinear kernel of the same token features, with
self-attention (the diagonal) excluded: the score says how much of the structure any kernel of
these features can capture the one-parameter isotropic kernel captures too (STATISTICS.md 2.c).
"""
from __future__ import annotations

import numpy as np
from scipy import optimize, special

__all__ = ["fit_vmf_kernel", "fit_vmf_kernels", "fit_bilinear_kernel", "vmf_scores", "MIN_STRUCTURE_KL"]


def _offdiagonal_rows(A: np.ndarray, causal: bool):
    """Off-diagonal part of A (..., n, n) with each row renormalised to sum 1.

    Attending to oneself is not evidence for a similarity kernel (<u_i, u_i> = 1 is every kernel's
    maximum), so the kernel fits score the attention a token pays to the others only.

    Returns:
        (B, mask, keep): B (..., n, n) the renormalised rows; mask (n, n) the admissible keys
        (j != i, and j <= i under a causal mask); keep (..., n) rows with off-diagonal mass.
    """
    n = A.shape[-1]
    mask = ~np.eye(n, dtype=bool)
    if causal:
        mask &= np.tril(np.ones((n, n), bool))
    B = np.where(mask, A, 0.0)
    mass = B.sum(-1, keepdims=True)
    keep = mass[..., 0] > 1e-12
    B = np.where(keep[..., None], B / np.where(mass > 0, mass, 1.0), 0.0)
    return B, mask, keep


def _masked_log_softmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    z = np.where(mask, logits, -1e30)  # finite so that 0 * masked entries stays 0
    return z - special.logsumexp(z, axis=-1, keepdims=True)


def _kernel_kl(logits: np.ndarray, B: np.ndarray, mask: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Mean over kept rows of KL(B_i. || softmax_j(logits_ij)), per matrix of (..., n, n)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logB = np.where(B > 0, np.log(np.where(B > 0, B, 1.0)), 0.0)
    row = np.sum(np.where(mask, B * (logB - _masked_log_softmax(logits, mask)), 0.0), -1)  # (..., n)
    return np.sum(row * keep, -1) / np.maximum(keep.sum(-1), 1)


def fit_bilinear_kernel(A: np.ndarray, F: np.ndarray, *, causal: bool = False, key_order: np.ndarray | None = None,
                        M0: np.ndarray | None = None, maxiter: int = 200) -> np.ndarray:
    """KL of the best full bilinear kernel A_ij ~ softmax_{j != i}(f_i^T M f_j), per matrix.

    f = [u, 1] (unit features and a constant): the attention logits of a layer are
    (W_Q x_i + b_Q)^T (W_K x_j + b_K) / sqrt(d_h), a bilinear form in [x, 1], so when the features are
    the attention's input this family contains the true kernel and its KL is the floor any kernel
    of these features can reach. When the n feature rows are linearly independent (n <= d + 1, e.g.
    17 ViT tokens in width 32) every n x n logit matrix S is f_i^T M f_j for M = F^+ S F^+T, so the
    floor is exactly 0 and nothing is fitted. Otherwise one convex softmax regression per matrix
    (M is (d+1) x (d+1)), started from the least-squares fit of log A and solved jointly with L-BFGS
    (the objective is a sum of independent terms); gradient dKL/dM = F^T (P - B) F / n_rows.

    Args:
        A: (K, n, n) row-stochastic; F: (K, n, d) features (normalised here).
        key_order: permutation of the key tokens (null model).
        M0: optional start (K, d+1, d+1); default the least-squares fit of log A.

    Returns:
        (K,) mean row KL of the fitted kernel on the off-diagonal rows.
    """
    K, n, d = F.shape
    U = F / np.linalg.norm(F, axis=-1, keepdims=True)
    Fq = np.concatenate([U, np.ones((K, n, 1))], -1)  # (K, n, d+1)
    kl = np.zeros(K)
    full_rank = np.linalg.matrix_rank(Fq) >= n  # (K,): any logit matrix is bilinear in these features
    if full_rank.all():
        return kl
    idx = np.flatnonzero(~full_rank)
    kl[idx] = _fit_bilinear(A[idx], Fq[idx], causal=causal, key_order=key_order,
                            M0=None if M0 is None else np.asarray(M0, float)[idx], maxiter=maxiter)
    return kl


def _fit_bilinear(A: np.ndarray, Fq: np.ndarray, *, causal: bool, key_order, M0, maxiter: int) -> np.ndarray:
    K, n, d1 = Fq.shape
    d = d1 - 1
    Fk = Fq if key_order is None else Fq[:, key_order]
    B, mask, keep = _offdiagonal_rows(A, causal)
    w = keep / np.maximum(keep.sum(-1, keepdims=True), 1)  # (K, n) row weights of each matrix's mean

    def objective(x):
        M = x.reshape(K, d + 1, d + 1)
        logits = np.einsum("kia,kab,kjb->kij", Fq, M, Fk, optimize=True)  # (K, n, n)
        logp = _masked_log_softmax(logits, mask)
        ce = -np.sum(np.where(mask, B * logp, 0.0), -1)  # (K, n)
        R = (np.where(mask, np.exp(logp), 0.0) - B) * w[..., None]  # dCE/dlogits, (K, n, n)
        grad = np.einsum("kia,kij,kjb->kab", Fq, R, Fk, optimize=True)
        return float(np.sum(ce * w)), grad.ravel()

    if M0 is None:  # least squares on log B (masked entries at the row mean): M = F^+ log B F^+T
        with np.errstate(divide="ignore"):
            logB = np.log(np.maximum(B, 1e-30))
        row_mean = np.sum(np.where(mask, logB, 0.0), -1, keepdims=True) / np.maximum(mask.sum(-1, keepdims=True), 1)
        Y = np.where(mask, logB, row_mean) - row_mean
        M0 = np.linalg.pinv(Fq) @ Y @ np.swapaxes(np.linalg.pinv(Fk), -1, -2)
    x0 = np.asarray(M0, float).ravel()
    res = optimize.minimize(objective, x0, jac=True, method="L-BFGS-B", options={"maxiter": maxiter})
    logits = np.einsum("kia,kab,kjb->kij", Fq, res.x.reshape(K, d + 1, d + 1), Fk, optimize=True)
    return _kernel_kl(logits, B, mask, keep)


def _vmf_kappa(B: np.ndarray, G: np.ndarray, mask: np.ndarray, keep: np.ndarray, *, kappa_max: float,
               tol: float = 1e-10, max_iter: int = 100) -> np.ndarray:
    """kappa_hat of every matrix at once: the root of the convex objective's derivative.

    With P = softmax_j(kappa G_ij) over the admissible keys and row weights w_i (mean over kept rows),
    f'(kappa) = sum_i w_i (E_P[G_i.] - E_B[G_i.]) and f''(kappa) = sum_i w_i Var_P(G_i.) >= 0, so
    Newton steps kept inside a shrinking bracket [lo, hi] (bisection when a step leaves it) converge
    for every matrix together. B, G: (K, n, n); returns (K,).
    """
    K = B.shape[0]
    w = keep / np.maximum(keep.sum(-1, keepdims=True), 1)  # (K, n)
    Gm = np.where(mask, G, 0.0)
    e_data = np.sum(w * np.sum(B * Gm, -1), -1)  # (K,) data mean of G
    kappa, lo, hi = np.zeros(K), np.full(K, -kappa_max), np.full(K, kappa_max)
    for _ in range(max_iter):
        P = np.where(mask, np.exp(_masked_log_softmax(kappa[:, None, None] * G, mask)), 0.0)
        m1 = np.sum(P * Gm, -1)  # (K, n)
        grad = np.sum(w * m1, -1) - e_data
        hess = np.sum(w * (np.sum(P * Gm * Gm, -1) - m1 * m1), -1)
        if np.all(np.abs(grad) < tol):
            break
        lo, hi = np.where(grad < 0, kappa, lo), np.where(grad > 0, kappa, hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            newton = kappa - grad / hess
        inside = (hess > 0) & (newton > lo) & (newton < hi)
        kappa = np.where(np.abs(grad) < tol, kappa, np.where(inside, newton, 0.5 * (lo + hi)))
    return kappa


def fit_vmf_kernels(A: np.ndarray, U: np.ndarray, *, causal: bool = False, kappa_max: float = 1e3,
                    key_order: np.ndarray | None = None) -> dict:
    """One-parameter von Mises-Fisher kernel fits A_ij ~ softmax_{j != i}(kappa <u_i, u_j>), per matrix.

    kappa_hat = argmin_kappa mean_i KL(A_i. || softmax_j(kappa <u_i,u_j>)) over the off-diagonal rows
    (`_offdiagonal_rows`; a one-parameter softmax regression, STATISTICS.md 2.c); u = features
    normalised to unit length. Returns, per matrix, kappa, the fit's KL, the uniform kernel's
    (kappa = 0) and "explained_vs_uniform" = 1 - KL / KL_uniform; `vmf_scores` adds the full
    bilinear kernel's KL and the score against it.

    Args:
        A: (K, n, n) attention; U: (K, n, d) token features.
        key_order: optional permutation of the key tokens (the shuffled-keys null model).

    Returns:
        {"kappa", "kl", "kl_uniform", "explained_vs_uniform", "at_bound"}: arrays of shape (K,).
    """
    U = U / np.linalg.norm(U, axis=-1, keepdims=True)
    G = U @ np.swapaxes(U if key_order is None else U[:, key_order], -1, -2)  # (K, n, n)
    B, mask, keep = _offdiagonal_rows(A, causal)
    kappa = _vmf_kappa(B, G, mask, keep, kappa_max=kappa_max)
    kl = _kernel_kl(kappa[:, None, None] * G, B, mask, keep)
    kl0 = _kernel_kl(np.zeros_like(G), B, mask, keep)
    with np.errstate(divide="ignore", invalid="ignore"):
        explained = np.where(kl0 > 0, 1 - kl / kl0, np.nan)
    return {"kappa": kappa, "kl": kl, "kl_uniform": kl0, "explained_vs_uniform": explained,
            "at_bound": np.abs(kappa) > 0.99 * kappa_max}


def fit_vmf_kernel(A: np.ndarray, U: np.ndarray, *, causal: bool = False, kappa_max: float = 1e3,
                   key_order: np.ndarray | None = None) -> dict:
    """`fit_vmf_kernels` for one (n, n) matrix and its (n, d) features; plain floats."""
    fit = fit_vmf_kernels(A[None], U[None], causal=causal, kappa_max=kappa_max, key_order=key_order)
    return {k: (bool(v[0]) if k == "at_bound" else float(v[0])) for k, v in fit.items()}


#: below this KL gap (nats per row) between the uniform and the best bilinear kernel the attention
#: carries no structure to explain (near-uniform attention at initialisation, logits ~1e-3): the
#: score would be a ratio of rounding errors, so it is undefined (NaN) instead
MIN_STRUCTURE_KL = 1e-4


def vmf_scores(flat: np.ndarray, F: np.ndarray, *, causal: bool, key_order=None) -> dict:
    """vMF fit of every matrix and its score against the full bilinear kernel (diagonal excluded).

    explained = (KL_uniform - KL_vMF) / (KL_uniform - KL_bilinear): the share of the structure that
    the best kernel of these features captures which the isotropic one-parameter kernel captures
    too (1 = isotropic, 0 = no better than uniform); NaN when KL_uniform - KL_bilinear <
    MIN_STRUCTURE_KL.

    Args:
        flat: (K, n, n) validated attention; F: (K, n, d) features.
    """
    fits = fit_vmf_kernels(flat, F, causal=causal, key_order=key_order)
    kappa, kl_vmf, kl0 = fits["kappa"], fits["kl"], fits["kl_uniform"]
    # the vMF kernel is in the bilinear family: the floor never exceeds its KL (guards the optimiser's tolerance)
    kl_bil = np.minimum(fit_bilinear_kernel(flat, F, causal=causal, key_order=key_order), kl_vmf)
    gap = kl0 - kl_bil
    with np.errstate(divide="ignore", invalid="ignore"):
        explained = np.where(gap > MIN_STRUCTURE_KL, (kl0 - kl_vmf) / gap, np.nan)
    return {"vmf_kappa": kappa, "vmf_kl": kl_vmf, "vmf_kl_uniform": kl0, "vmf_kl_bilinear": kl_bil,
            "vmf_explained": explained, "vmf_explained_vs_uniform": fits["explained_vs_uniform"]}
