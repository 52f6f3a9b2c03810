"""Iterative K-FAC's solve: conjugate gradient in the amortised Kronecker eigenbasis, Jacobi-preconditioned.

The system is the one both variants solve, ``G X A + lambda X = V`` with the *current* factors
(Martens & Grosse 2015; the iterative K-FAC of arXiv 2101.00218 solves it by CG). Given orthogonal
``Q_G``, ``Q_A`` from the last refresh (eigenvectors of the factors of that step), the substitution
``X = Q_G Y Q_A^T`` turns it into the equivalent system

    G' Y A' + lambda Y = V',   G' = Q_G^T G Q_G,  A' = Q_A^T A Q_A,  V' = Q_G^T V Q_A,

with the same CG iterates' norms (the rotation is orthogonal: residuals, the tolerance and the CG
objective are unchanged). CG runs on it with the Jacobi preconditioner
``M^-1 = 1 / (diag(G') diag(A')^T + lambda)``, elementwise, so a preconditioned iteration costs what
an unpreconditioned one does. On the refresh step ``G'``, ``A'`` are diagonal, the preconditioner is
the exact inverse and one iteration solves the system exactly; between refreshes the factors drift
(new batch factors every ``factor_every`` steps) and CG corrects for the drift in a few iterations.
So what is iterated is the damped Kronecker system of the current factors, to relative residual
``tol``; what is amortised is only the basis that preconditions it (Saad 2003, ch. 9-10).

Every iteration runs on all systems of a block at once (converged systems frozen, their step sizes
zero) and never reads the device on the host: the caller chooses how many iterations to run.
"""
from __future__ import annotations

import torch

from brownformer.optim._kfac_math import CGResult, _dots, _energy, _start, kronecker_operator


def rotate(q_g: torch.Tensor, m: torch.Tensor, q_a: torch.Tensor) -> torch.Tensor:
    """``Q_G^T M Q_A`` (batched): a gradient into the eigenbasis, or a factor with ``q_a = q_g``."""
    return torch.matmul(torch.matmul(q_g.transpose(1, 2), m), q_a)


def unrotate(q_g: torch.Tensor, y: torch.Tensor, q_a: torch.Tensor) -> torch.Tensor:
    """``Q_G Y Q_A^T`` (batched): a solution back from the eigenbasis."""
    return torch.matmul(torch.matmul(q_g, y), q_a.transpose(1, 2))


def jacobi(g_rot: torch.Tensor, a_rot: torch.Tensor, damping: float | torch.Tensor) -> torch.Tensor:
    """Inverse diagonal ``1 / (diag(G') diag(A')^T + lambda)`` of the damped Kronecker operator, ``(k, out, in)``."""
    d_g = torch.diagonal(g_rot, dim1=1, dim2=2)  # (k, out)
    d_a = torch.diagonal(a_rot, dim1=1, dim2=2)  # (k, in)
    return (d_g[:, :, None] * d_a[:, None, :] + damping).reciprocal()


def eigenbasis_cg(
    g: list[torch.Tensor],
    a: list[torch.Tensor],
    v: list[torch.Tensor],
    damping: torch.Tensor,
    *,
    iterations: int,
    tol: float,
    x0: list[torch.Tensor | None] | None = None,
) -> CGResult:
    """Jacobi-preconditioned CG on blocks of rotated systems ``G' Y A' + lambda Y = V'`` (module docstring).

    Block ``j`` holds ``k_j`` systems of one shape (``g[j]`` ``(k_j, out, out)``, ``a[j]`` ``(k_j, in, in)``,
    ``v[j]`` ``(k_j, out, in)``); ``damping`` is ``(sum_j k_j, 1, 1)``. Hestenes & Stiefel (1952) PCG with
    ``M^-1`` of :func:`jacobi`; a system stops when ``||V' - op(Y)||_F <= tol ||V'||_F`` and is frozen
    while the others run; exactly ``iterations`` iterations are run (no host read). A warm start
    ``x0`` with a larger CG objective than ``Y = 0`` is replaced by zero. A system is not ``ok`` when
    it produced non-finite values, met non-positive curvature, or ended with an objective above 0.

    Returns:
        :class:`CGResult`: ``solution`` one tensor per block; ``iterations`` per system;
        ``relative_residual``; ``ok``. ``relative_residual > tol`` marks a system stopped by the budget.
    """
    bounds = [0]
    for vj in v:
        bounds.append(bounds[-1] + vj.shape[0])
    blocks = [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
    lam = [damping[sl] for sl in blocks]
    inverse_diagonal = [jacobi(gj, aj, lj) for gj, aj, lj in zip(g, a, lam)]

    def operator(xs):
        return [kronecker_operator(gj, aj, xj, lj) for gj, aj, xj, lj in zip(g, a, xs, lam)]

    b_sq = _dots(v, v)  # (L, 1, 1)
    threshold = tol**2 * b_sq
    x, r = _start(operator, v, x0, blocks)
    z = [dj * rj for dj, rj in zip(inverse_diagonal, r)]
    p = [zj.clone() for zj in z]
    rz, rr = _dots(r, z), _dots(r, r)
    done = torch.zeros_like(b_sq, dtype=torch.long)
    healthy = torch.ones_like(b_sq, dtype=torch.bool)
    active = rr > threshold
    for _ in range(iterations):
        ap = operator(p)
        p_ap = _dots(p, ap)
        healthy &= ~active | (p_ap > 0)
        active &= healthy
        alpha = torch.where(active, rz / p_ap, 0.0)
        for xj, rj, pj, apj, sl in zip(x, r, p, ap, blocks):
            xj.addcmul_(alpha[sl], pj)
            rj.addcmul_(alpha[sl], apj, value=-1.0)
        z = [dj * rj for dj, rj in zip(inverse_diagonal, r)]
        rz_new, rr = _dots(r, z), _dots(r, r)
        beta = torch.where(active, rz_new / rz, 0.0)
        p = [torch.addcmul(zj, beta[sl], pj) for zj, pj, sl in zip(z, p, blocks)]
        rz = torch.where(active, rz_new, rz)
        done += active
        active &= rr > threshold
    rel = (rr / b_sq.clamp_min(torch.finfo(b_sq.dtype).tiny)).sqrt().flatten()
    finite = torch.cat([torch.isfinite(xj).flatten(1).all(dim=1) for xj in x])
    ok = healthy.flatten() & finite & torch.isfinite(rel) & (_energy(x, v, r) <= 0).flatten()
    return CGResult(solution=tuple(x), iterations=done.flatten(), relative_residual=rel, ok=ok)
