"""Conjugate gradient on damped Kronecker systems, and iterative K-FAC's use of it: CG in the amortised
Kronecker eigenbasis, Jacobi-preconditioned.

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

The loop is :func:`_kfac_math.block_conjugate_gradient` with an elementwise preconditioner: every
iteration runs on all systems of a block at once (converged systems frozen); the caller chooses how many
iterations to run at most (on an accelerator exactly that many, without a host read; on the CPU the loop
stops when every system has converged).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from brownformer.optim._kfac_math import finite_rows, host_read_free, kronecker_operator


def _dots(us: list[torch.Tensor], ws: list[torch.Tensor]) -> torch.Tensor:
    """Per-system inner products ``<U_l, W_l>`` of block lists, concatenated: ``(sum_j k_j, 1, 1)``."""
    # one batched product per block: (k, 1, n) @ (k, n, 1) -> (k, 1, 1). (u * w).sum() is 2-3x faster on the CPU
    # but rounds differently, and a changed rounding changes CG iteration counts and so the trajectory (~3e-3
    # in the loss after 80 vit-pre steps, measured): kept for bit-identical results
    return torch.cat([torch.bmm(u.reshape(u.shape[0], 1, -1), w.reshape(w.shape[0], -1, 1)) for u, w in zip(us, ws)])


def _energy(x: list[torch.Tensor], v: list[torch.Tensor], r: list[torch.Tensor]) -> torch.Tensor:
    """CG objective ``phi(X) = 1/2 <X, op(X)> - <V, X> = -1/2 <X, V + R>`` with ``R = V - op(X)``.

    CG decreases ``phi`` monotonically from ``phi(0) = 0`` (the residual norm need not decrease),
    so ``phi > 0`` means a warm start worse than zero or a numerical breakdown.
    """
    return _dots(x, [vj + rj for vj, rj in zip(v, r)]).mul_(-0.5)


def _start(operator, v, x0, blocks) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Initial iterates and residuals; a warm start worse than ``X = 0`` is replaced by zero."""
    if x0 is None:
        return [torch.zeros_like(vj) for vj in v], [vj.clone() for vj in v]
    x = [torch.zeros_like(vj) if xj is None else xj.clone() for vj, xj in zip(v, x0)]
    r = [vj - oj for vj, oj in zip(v, operator(x))]
    restart = _energy(x, v, r) > 0  # masked unconditionally: no host check of the flags
    for xj, rj, vj, sl in zip(x, r, v, blocks):
        xj.masked_fill_(restart[sl], 0.0)
        torch.where(restart[sl], vj, rj, out=rj)
    return x, r


@dataclass(frozen=True)
class CGResult:
    """Batched conjugate-gradient outcome: solutions and per-system diagnostics.

    ``solution`` is one ``(k, out, in)`` tensor (:func:`conjugate_gradient`) or a tuple of them,
    one per block (:func:`block_conjugate_gradient`); the diagnostics are ``(sum_j k_j,)``.
    """

    solution: torch.Tensor | tuple[torch.Tensor, ...]
    iterations: torch.Tensor
    relative_residual: torch.Tensor
    ok: torch.Tensor


def conjugate_gradient(
    g: torch.Tensor,
    a: torch.Tensor,
    v: torch.Tensor,
    damping: float | torch.Tensor,
    *,
    x0: torch.Tensor | None = None,
    max_iter: int = 10,
    tol: float = 1e-2,
) -> CGResult:
    """Solve ``G X A + damping X = V`` for a batch of same-shaped layers by conjugate gradient.

    Hestenes & Stiefel (1952) CG on the SPD operator of :func:`kronecker_operator`, the
    iterative K-FAC of arXiv 2101.00218. Each system stops at ``max_iter`` iterations or when
    ``||V - op(X)||_F <= tol ||V||_F``; converged systems are frozen while the others continue.
    A warm start ``x0`` with a larger CG objective than ``X = 0`` is replaced by zero. A system is
    not ``ok`` (diverged) when it produced non-finite values, met non-positive curvature
    ``p^T op(p) <= 0``, or ended with a CG objective above that of ``X = 0``.

    Args:
        g: ``(k, out, out)`` output factors.
        a: ``(k, in, in)`` input factors.
        v: ``(k, out, in)`` right-hand sides (gradients).
        damping: ``> 0``.
        x0: Optional ``(k, out, in)`` warm start.
        max_iter: Iteration cap.
        tol: Relative-residual tolerance.

    Returns:
        :class:`CGResult` with per-system ``iterations``, ``relative_residual`` and ``ok``.
    """
    result = block_conjugate_gradient([g], [a], [v], damping, x0=None if x0 is None else [x0],
                                      max_iter=max_iter, tol=tol)
    return CGResult(solution=result.solution[0], iterations=result.iterations,
                    relative_residual=result.relative_residual, ok=result.ok)


def block_conjugate_gradient(
    g: list[torch.Tensor],
    a: list[torch.Tensor],
    v: list[torch.Tensor],
    damping: float | torch.Tensor,
    *,
    x0: list[torch.Tensor | None] | None = None,
    max_iter: int = 10,
    tol: float = 1e-2,
    preconditioner: list[torch.Tensor] | None = None,
) -> CGResult:
    """:func:`conjugate_gradient` on several blocks of differently shaped systems in one loop.

    Block ``j`` holds ``k_j`` systems of one shape (``g[j]`` ``(k_j, out_j, out_j)``, ``a[j]``
    ``(k_j, in_j, in_j)``, ``v[j]`` ``(k_j, out_j, in_j)``). The iterations of all blocks run
    together, so the per-iteration scalar work (step sizes, stopping tests) is one tensor operation
    over every system instead of one per block. Every system follows exactly the recurrence and
    stopping rule of :func:`conjugate_gradient`. ``x0`` is None or a list with a warm start (or None
    for a cold start) per block; ``damping`` is a number or a ``(sum_j k_j, 1, 1)`` tensor (one value
    per system). ``preconditioner``: optional elementwise ``M^-1`` per block (``v[j]``'s shape), for
    preconditioned CG (Saad 2003, alg. 9.1): ``z = M^-1 r`` replaces ``r`` in the step sizes and
    directions; the stopping rule stays on ``||r||``.

    Converged systems are masked (their step sizes are zero). On an accelerator the loop runs exactly
    ``max_iter`` iterations and never reads the device on the host; on the CPU, where a host read
    waits for nothing, it stops as soon as no system is active (the skipped iterations would change
    no result: same solutions, iteration counts and diagnostics).

    Returns:
        :class:`CGResult` whose ``solution`` is a tuple with one ``(k_j, out_j, in_j)`` tensor per block
        and whose diagnostics concatenate the blocks' systems in order.
    """
    bounds = [0]
    for vj in v:
        bounds.append(bounds[-1] + vj.shape[0])
    blocks = [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]  # systems of block j

    lam = [damping[sl] if isinstance(damping, torch.Tensor) else damping for sl in blocks]

    def operator(xs):
        return [kronecker_operator(gj, aj, xj, lj) for gj, aj, xj, lj in zip(g, a, xs, lam)]

    def precondition(rs):
        return rs if preconditioner is None else [dj * rj for dj, rj in zip(preconditioner, rs)]

    b_sq = _dots(v, v)  # (L, 1, 1); per-system scalars keep the block's broadcast shape
    x, r = _start(operator, v, x0, blocks)
    z = precondition(r)
    p = [zj.clone() for zj in z]
    rz = _dots(r, z)
    rr = rz if preconditioner is None else _dots(r, r)
    iterations = torch.zeros_like(b_sq, dtype=torch.long)
    healthy = torch.ones_like(b_sq, dtype=torch.bool)
    threshold = tol**2 * b_sq
    active = rr > threshold
    stop_early = host_read_free(v[0].device)
    for _ in range(max_iter):
        if stop_early and not bool(active.any()):
            break
        ap = operator(p)
        p_ap = _dots(p, ap)
        healthy &= ~active | (p_ap > 0)
        active &= healthy
        alpha = torch.where(active, rz / p_ap, 0.0)
        for xj, rj, pj, apj, sl in zip(x, r, p, ap, blocks):
            xj.addcmul_(alpha[sl], pj)
            rj.addcmul_(alpha[sl], apj, value=-1.0)
        z = precondition(r)
        rz_new = _dots(r, z)
        rr = rz_new if preconditioner is None else _dots(r, r)
        beta = torch.where(active, rz_new / rz, 0.0)
        p = [torch.addcmul(zj, beta[sl], pj) for zj, pj, sl in zip(z, p, blocks)]
        rz = torch.where(active, rz_new, rz)
        iterations += active
        active &= rr > threshold
    rel = (rr / b_sq.clamp_min(torch.finfo(b_sq.dtype).tiny)).sqrt().flatten()
    finite = torch.cat([finite_rows(xj) for xj in x])
    ok = healthy.flatten() & finite & torch.isfinite(rel) & (_energy(x, v, r) <= 0).flatten()
    return CGResult(solution=tuple(x), iterations=iterations.flatten(), relative_residual=rel, ok=ok)


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
    ``v[j]`` ``(k_j, out, in)``); ``damping`` is ``(sum_j k_j, 1, 1)``. :func:`block_conjugate_gradient`
    with ``M^-1`` of :func:`jacobi`, at most ``iterations`` iterations (a host read only on the CPU).

    Returns:
        :class:`CGResult`; ``relative_residual > tol`` marks a system stopped by the budget.
    """
    bounds = [0]
    for vj in v:
        bounds.append(bounds[-1] + vj.shape[0])
    inverse_diagonal = [jacobi(gj, aj, damping[lo:hi]) for gj, aj, lo, hi in zip(g, a, bounds[:-1], bounds[1:])]
    return block_conjugate_gradient(g, a, v, damping, x0=x0, max_iter=iterations, tol=tol,
                                    preconditioner=inverse_diagonal)
