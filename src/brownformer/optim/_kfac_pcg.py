"""Conjugate gradient on damped Kronecker systems, preconditioned without any eigendecomposition.

The system is the one both K-FAC variants solve, ``G X A + lambda X = V`` with the *current* factors
(Martens & Grosse 2015; the iterative K-FAC of arXiv 2101.00218 solves it by CG). Iterative K-FAC runs
truncated preconditioned CG (Saad 2003, alg. 9.1) on it, every system of a padded block at once
(``_kfac_blocks``), with the Kronecker-factored preconditioner

    M^-1 R = (G + gamma_G I)^-1 R (A + gamma_A I)^-1,   gamma_A = pi sqrt(lambda),  gamma_G = sqrt(lambda) / pi,
    pi^2 = (tr A / n_A) / (tr G / n_G)

(the factored Tikhonov damping of Martens & Grosse 2015 sec. 6.3: the exact inverse of
``(G + gamma_G I) (x) (A + gamma_A I)``, which differs from the operator only by the cross terms
``gamma_A G + gamma_G A``; it is kfac-pytorch's whole step, which CG then corrects to the exact damping). The two
inverses come from Cholesky factorisations (:func:`spd_inverse`), three batched calls per stack and no
``eigh``, refreshed only when the factors or the damping change. An exact preconditioner matters: Newton-Schulz
iterations warm-started from the previous inverse (this module's earlier choice) left ``||Y M - I||`` at 1-8 after
a factor update of a ViT's early steps, and so a direction 9.5-13% (median) away from the exact solve at ``tol``
1e-2, against 1.9-4.4% with exact inverses (benchmarks/results/kfac_cost_direction.md).

The loop is :func:`block_conjugate_gradient`: every iteration runs on all systems of a block at once
(converged systems frozen); the caller chooses how many iterations to run at most (on an accelerator
exactly that many, without a host read; on the CPU the loop stops when every system has converged).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from brownformer.optim._kfac_math import all_finite, finite_rows, host_read_free, kronecker_operator


def _dots(us: list[torch.Tensor], ws: list[torch.Tensor]) -> torch.Tensor:
    """Per-system inner products ``<U_l, W_l>`` of block lists, concatenated: ``(sum_j k_j, 1, 1)``."""
    # an elementwise product and a sum, not a (k, 1, n) @ (k, n, 1) bmm: on the CPU that bmm costs 4-10x more
    # (34 against 9 us at (8, 32, 33), 106 against 15 us at (8, 64, 65), measured) and was CG's largest cost
    return torch.cat([(u * w).sum(dim=(1, 2), keepdim=True) for u, w in zip(us, ws)])


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
    max_iter: int | list[int] = 10,
    tol: float = 1e-2,
    preconditioner: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    stop_early: bool | None = None,
) -> CGResult:
    """:func:`conjugate_gradient` on several blocks of differently shaped systems in one loop.

    Block ``j`` holds ``k_j`` systems of one shape (``g[j]`` ``(k_j, out_j, out_j)``, ``a[j]``
    ``(k_j, in_j, in_j)``, ``v[j]`` ``(k_j, out_j, in_j)``). The iterations of all blocks run
    together, so the per-iteration scalar work (step sizes, stopping tests) is one tensor operation
    over every system instead of one per block. Every system follows exactly the recurrence and
    stopping rule of :func:`conjugate_gradient`. ``x0`` is None or a list with a warm start (or None
    for a cold start) per block; ``damping`` is a number or a ``(sum_j k_j, 1, 1)`` tensor (one value
    per system). ``preconditioner``: optional Kronecker-factored ``M^-1`` per block, a pair ``(Y_G, Y_A)``
    of ``(k_j, out_j, out_j)`` and ``(k_j, in_j, in_j)`` symmetric positive definite stacks applied as
    ``Z = Y_G R Y_A``, for preconditioned CG (Saad 2003, alg. 9.1): ``Z`` replaces ``R`` in the step sizes
    and directions; the stopping rule stays on ``||R||``. ``max_iter`` is one cap for every system or a list
    with one cap per block (blocks with different budgets still share one loop).

    Converged systems are masked (their step sizes are zero). On an accelerator the loop runs exactly
    ``max_iter`` iterations and never reads the device on the host; on the CPU, where a host read
    waits for nothing, it stops as soon as no system is active (the skipped iterations would change
    no result: same solutions, iteration counts and diagnostics). ``stop_early`` overrides that choice
    (False: exactly ``max_iter`` iterations and no host read anywhere, as a compiled graph needs).

    Returns:
        :class:`CGResult` whose ``solution`` is a tuple with one ``(k_j, out_j, in_j)`` tensor per block
        and whose diagnostics concatenate the blocks' systems in order.
    """
    bounds = [0]
    for vj in v:
        bounds.append(bounds[-1] + vj.shape[0])
    blocks = [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]  # systems of block j

    lam = [damping[sl] if isinstance(damping, torch.Tensor) else damping for sl in blocks]

    def precondition(j, rj):  # block j's preconditioner
        return rj if preconditioner is None else torch.bmm(torch.bmm(preconditioner[j][0], rj), preconditioner[j][1])

    def operator(xs):
        return [kronecker_operator(gj, aj, xj, lj) for gj, aj, xj, lj in zip(g, a, xs, lam)]

    single = len(v) == 1  # one block: no per-block slices or concatenations
    b_sq = _dots(v, v)  # (L, 1, 1); per-system scalars keep the block's broadcast shape
    x, r = _start(operator, v, x0, blocks)
    z = [precondition(j, rj) for j, rj in enumerate(r)]
    p = [zj.clone() for zj in z] if preconditioner is None else list(z)  # z is r itself without a preconditioner
    rz_parts = [(rj * zj).sum(dim=(1, 2), keepdim=True) for rj, zj in zip(r, z)]  # as _dots, kept per block
    rr_parts = rz_parts if preconditioner is None else [(rj * rj).sum(dim=(1, 2), keepdim=True) for rj in r]
    p_ap_parts, ap = list(rz_parts), [None] * len(v)  # a block that never iterates: read only where masked
    rz = rz_parts[0] if single else torch.cat(rz_parts)
    rr = rr_parts[0] if single else torch.cat(rr_parts)
    iterations = torch.zeros_like(b_sq, dtype=torch.long)
    threshold = tol**2 * b_sq
    active = rr > threshold
    caps = None
    if isinstance(max_iter, list):  # per-block caps: a system stops at its block's cap
        if len(set(max_iter)) > 1:
            caps = torch.cat([torch.full((sl.stop - sl.start, 1, 1), c, dtype=torch.long, device=b_sq.device)
                              for sl, c in zip(blocks, max_iter)])
        max_iter = max(max_iter, default=0)
    stop_early = host_read_free(v[0].device) if stop_early is None else stop_early
    live = list(range(len(v)))  # blocks with an active system (all of them where reading that is not free)
    for _ in range(max_iter):
        if stop_early:  # one read: which blocks still iterate (a stopped block's values no longer change)
            flags = active.view(-1).tolist()
            live = [j for j in live if any(flags[blocks[j]])]
            if not live:
                break
        for j in live:
            ap[j] = kronecker_operator(g[j], a[j], p[j], lam[j])
            p_ap_parts[j] = (p[j] * ap[j]).sum(dim=(1, 2), keepdim=True)
        p_ap = p_ap_parts[0] if single else torch.cat(p_ap_parts)
        active &= p_ap > 0  # non-positive curvature stops a system (unhealthy: see below)
        alpha = torch.where(active, rz / p_ap, 0.0)
        for j in live:
            step = alpha if single else alpha[blocks[j]]
            x[j].addcmul_(step, p[j])
            r[j].addcmul_(step, ap[j], value=-1.0)
            z[j] = precondition(j, r[j])
            rz_parts[j] = (r[j] * z[j]).sum(dim=(1, 2), keepdim=True)
            if preconditioner is not None:
                rr_parts[j] = (r[j] * r[j]).sum(dim=(1, 2), keepdim=True)
        rz_new = rz_parts[0] if single else torch.cat(rz_parts)
        rr = rz_new if preconditioner is None else rr_parts[0] if single else torch.cat(rr_parts)
        beta = torch.where(active, rz_new / rz, 0.0)
        for j in live:
            p[j] = torch.addcmul(z[j], beta if single else beta[blocks[j]], p[j])
        rz = torch.where(active, rz_new, rz)
        iterations += active
        active &= rr > threshold
        if caps is not None:
            active &= iterations < caps
    # a system stops converged (rr <= threshold), at its cap, or on non-positive curvature: the one way to stop
    # above the threshold and below the cap, so that is what makes it unhealthy (as if flagged when it happened)
    healthy = ~((rr > threshold) & (iterations < (max_iter if caps is None else caps)))
    rel = (rr / b_sq.clamp_min(torch.finfo(b_sq.dtype).tiny)).sqrt().flatten()
    finite = torch.cat([finite_rows(xj) for xj in x])
    ok = healthy.flatten() & finite & torch.isfinite(rel) & (_energy(x, v, r) <= 0).flatten()
    return CGResult(solution=tuple(x), iterations=iterations.flatten(), relative_residual=rel, ok=ok)


def spd_inverse(m: torch.Tensor) -> torch.Tensor:
    """Inverses of a stack of symmetric positive definite matrices from their Cholesky factors (no eigendecomposition).

    ``M = L L^T`` (``torch.linalg.cholesky_ex``, which reports a failure instead of raising), then
    ``M^-1 = L^-T L^-1`` with ``L^-1`` from a triangular solve (``torch.cholesky_inverse`` would read the device on
    the host). A matrix Cholesky rejects (not numerically positive definite) gets ``I / ||M||_inf`` instead, still
    symmetric positive definite, so CG stays correct and only slower; a non-finite matrix gives a non-finite result,
    which the caller counts as a failed step. No host read except, where one is free, to skip the fallback.

    Args:
        m: ``(k, n, n)`` symmetric positive definite matrices (damped factors).

    Returns:
        ``(k, n, n)`` inverses.
    """
    k, n, _ = m.shape
    chol, info = torch.linalg.cholesky_ex(m)
    eye = torch.eye(n, dtype=m.dtype, device=m.device).expand(k, n, n)
    chol_inv = torch.linalg.solve_triangular(chol, eye, upper=False)  # (k, n, n) L^-1
    inverse = torch.bmm(chol_inv.transpose(1, 2), chol_inv)
    if host_read_free(m.device) and bool((info == 0).all()) and bool(all_finite([inverse, m])):
        return inverse  # every matrix factored (on the CPU the read is free: the fallback's work is skipped)
    good = (info == 0) & finite_rows(inverse) & finite_rows(m)  # Cholesky reads one triangle only
    norm_inf = m.abs().sum(dim=2).amax(dim=1).clamp_min(torch.finfo(m.dtype).tiny)  # (k,)
    return torch.where(good[:, None, None], inverse, eye / norm_inf[:, None, None])


def split_damping(g: torch.Tensor, a: torch.Tensor, damping: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The factored Tikhonov damping ``(gamma_G, gamma_A)`` with ``gamma_G gamma_A = lambda`` (module docstring).

    ``pi^2 = (tr A / n_A) / (tr G / n_G)`` balances the two so each is the same fraction of its factor's mean
    eigenvalue (Martens & Grosse 2015, sec. 6.3). ``g`` ``(k, out, out)``, ``a`` ``(k, in, in)``, ``damping``
    ``(k, 1, 1)``; returns two ``(k, 1, 1)`` tensors.
    """
    tiny = torch.finfo(g.dtype).tiny
    mean_g = torch.diagonal(g, dim1=1, dim2=2).mean(dim=1).clamp_min(tiny)[:, None, None]  # (k, 1, 1)
    mean_a = torch.diagonal(a, dim1=1, dim2=2).mean(dim=1).clamp_min(tiny)[:, None, None]
    pi = (mean_a / mean_g).sqrt()
    root = damping.sqrt()
    return root / pi, pi * root


def damped(m: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """``M + gamma I`` for a ``(k, n, n)`` stack and ``(k, 1, 1)`` ``gamma`` (a new tensor)."""
    out = m.clone()
    torch.diagonal(out, dim1=1, dim2=2).add_(gamma[:, :, 0])
    return out
