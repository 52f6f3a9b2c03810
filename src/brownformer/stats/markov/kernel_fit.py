"""Kernel fits of attention (claim 2): is A_ij ~ softmax_j(kappa <u_i, u_j>), an isotropic vMF kernel?

The one-parameter vMF kernel is fitted per matrix with self-attention (the diagonal) excluded, and judged by
a consequence: how far the attention output moves when A is replaced by the fitted kernel, relative to how
far it is from the mean field (`vmf_scores`). No comparison with a "best bilinear kernel": with n <= d + 1
tokens every logit matrix is bilinear in the features, so that normalisation was vacuous.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from brownformer.statsfile import ByQuantity

__all__ = ["VmfFitResult", "fit_vmf_kernel", "fit_vmf_kernels", "vmf_scores", "head_subspace_gram", "MIN_DISPLACEMENT"]


@dataclass(frozen=True)
class VmfFitResult:
    """The one-parameter vMF kernel fit of each matrix (`fit_vmf_kernels`: arrays of shape (K,); `fit_vmf_kernel`:
    plain numbers): kappa_hat, the fit's KL, the uniform kernel's KL, 1 - KL / KL_uniform, and whether kappa_hat is
    at the search bound."""

    kappa: np.ndarray | float
    kl: np.ndarray | float
    kl_uniform: np.ndarray | float
    explained_vs_uniform: np.ndarray | float
    at_bound: np.ndarray | bool


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


def _gram(U: np.ndarray, key_order) -> np.ndarray:
    """<u_i, u_perm(j)> of the unit features, (K, n, n)."""
    U = U / np.linalg.norm(U, axis=-1, keepdims=True)
    return U @ np.swapaxes(U if key_order is None else U[:, key_order], -1, -2)


def fit_vmf_kernels(A: np.ndarray, U: np.ndarray, *, causal: bool = False, kappa_max: float = 1e3,
                    key_order: np.ndarray | None = None, gram: np.ndarray | None = None) -> VmfFitResult:
    """One-parameter von Mises-Fisher kernel fits A_ij ~ softmax_{j != i}(kappa <u_i, u_j>), per matrix.

    kappa_hat = argmin_kappa mean_i KL(A_i. || softmax_j(kappa <u_i,u_j>)) over the off-diagonal rows
    (`_offdiagonal_rows`; a one-parameter softmax regression, docs/METHODS.md); u = features
    normalised to unit length. Returns, per matrix, kappa, the fit's KL, the uniform kernel's
    (kappa = 0) and "explained_vs_uniform" = 1 - KL / KL_uniform (descriptive); `vmf_scores` adds the
    output error, the consequence claim 2 is decided on.

    Args:
        A: (K, n, n) attention; U: (K, n, d) token features.
        key_order: optional permutation of the key tokens (the shuffled-keys null model).
        gram: (K, n, n) the similarities the kernel is a function of, in place of <u_i, u_j> (a head's subspace:
            `head_subspace_gram`).

    Returns:
        VmfFitResult of arrays of shape (K,).
    """
    G = _gram(U, key_order) if gram is None else np.asarray(gram, float)  # (K, n, n)
    B, mask, keep = _offdiagonal_rows(A, causal)
    kappa = _vmf_kappa(B, G, mask, keep, kappa_max=kappa_max)
    kl = _kernel_kl(kappa[:, None, None] * G, B, mask, keep)
    kl0 = _kernel_kl(np.zeros_like(G), B, mask, keep)
    with np.errstate(divide="ignore", invalid="ignore"):
        explained = np.where(kl0 > 0, 1 - kl / kl0, np.nan)
    return VmfFitResult(kappa=kappa, kl=kl, kl_uniform=kl0, explained_vs_uniform=explained,
                        at_bound=np.abs(kappa) > 0.99 * kappa_max)


def fit_vmf_kernel(A: np.ndarray, U: np.ndarray, *, causal: bool = False, kappa_max: float = 1e3,
                   key_order: np.ndarray | None = None) -> VmfFitResult:
    """`fit_vmf_kernels` for one (n, n) matrix and its (n, d) features; plain floats."""
    fit = fit_vmf_kernels(A[None], U[None], causal=causal, kappa_max=kappa_max, key_order=key_order)
    return VmfFitResult(kappa=float(fit.kappa[0]), kl=float(fit.kl[0]), kl_uniform=float(fit.kl_uniform[0]),
                        explained_vs_uniform=float(fit.explained_vs_uniform[0]), at_bound=bool(fit.at_bound[0]))


def vmf_scores(flat: np.ndarray, F: np.ndarray, *, causal: bool, key_order=None,
               gram=None) -> ByQuantity[np.ndarray]:
    """vMF fit of every matrix and the consequence of replacing the attention by it (diagonal excluded).

    The consequence is read on the attention output with the token positions as values, the walk's one-step
    mean E_{j ~ A_i.}[u_j] (attention applies its kernel to the value field; any value map V = U W^T + b
    gives the same ratio when W is a multiple of an orthogonal map):
        output_error = ||(B - P_vMF) U||_F / ||(B - P_unif) U||_F,
    B the attention rows off the diagonal (renormalised), P_vMF = softmax_{j != i}(kappa_hat <u_i, u_j>),
    P_unif the uniform rows (the mean field, kappa = 0). 0: the isotropic kernel moves every token exactly
    as the attention does; 1: no better than the mean field; NaN when the attention moves no token away
    from the mean field (||(B - P_unif) U|| below MIN_DISPLACEMENT of ||U||).

    Args:
        flat: (K, n, n) validated attention; F: (K, n, d) features (normalised here).
        key_order: permutation of the key tokens in the fit (null model); the values stay in place.
        gram: (K, n, n) similarities of the kernel in place of <u_i, u_j> (a head's subspace); the values stay U.

    Returns:
        vmf_kappa, vmf_kl, vmf_kl_uniform, vmf_explained_vs_uniform and vmf_output_error, arrays of shape (K,).
    """
    fits = fit_vmf_kernels(flat, F, causal=causal, key_order=key_order, gram=gram)
    U = F / np.linalg.norm(F, axis=-1, keepdims=True)
    G = _gram(F, key_order) if gram is None else np.asarray(gram, float)  # (K, n, n)
    B, mask, keep = _offdiagonal_rows(flat, causal)
    P = np.where(mask, np.exp(_masked_log_softmax(fits.kappa[:, None, None] * G, mask)), 0.0)
    unif = np.where(mask, 1.0, 0.0) / np.maximum(mask.sum(-1, keepdims=True), 1)
    rows = keep[..., None]
    err = np.linalg.norm(np.where(rows, (B - P) @ U, 0.0), axis=(-2, -1))
    base = np.linalg.norm(np.where(rows, (B - unif) @ U, 0.0), axis=(-2, -1))
    scale = np.linalg.norm(np.where(rows, U, 0.0), axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        output_error = np.where(base > MIN_DISPLACEMENT * scale, err / base, np.nan)
    return ByQuantity(vmf_kappa=fits.kappa, vmf_kl=fits.kl, vmf_kl_uniform=fits.kl_uniform,
                      vmf_explained_vs_uniform=fits.explained_vs_uniform, vmf_output_error=output_error)


def head_subspace_gram(U: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """<P u_i, P u_j> for unit features u and P the orthogonal projection onto a head's subspace (rows of `basis`).

    A head whose logit form is M = c P (isotropic within its d_h-dimensional subspace) attends exactly as
    softmax_j(kappa <P u_i, P u_j>), so this Gram matrix, not <u_i, u_j>, is what an isotropic head's kernel is a
    function of; projections are not renormalised (the head sees the component in its subspace as it is).

    Args:
        U: (K, n, d) features (normalised here); basis: (d_h, d) orthonormal rows.

    Returns:
        (K, n, n).
    """
    U = U / np.linalg.norm(U, axis=-1, keepdims=True)
    Up = U @ np.asarray(basis, float).T  # (K, n, d_h)
    return Up @ np.swapaxes(Up, -1, -2)


#: below this share of ||U|| the attention displaces no token from the mean field (near-uniform attention at
#: initialisation, logits ~1e-3): the output error would be a ratio of rounding errors, so it is NaN
MIN_DISPLACEMENT = 1e-4
