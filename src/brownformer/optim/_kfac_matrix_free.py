"""The matrix-free form of iterative K-FAC's solve: CG on ``G X A + lambda X = V`` without forming ``A`` or ``G``.

The paper's CG-FAC (arXiv 2101.00218) never forms the Kronecker factors: with the layer inputs ``a`` (``n`` rows,
a ones column appended for a bias) and output gradients ``g`` (the same ``n`` rows) of one batch, ``A = s_A a^T a``
and ``G = s_G g^T g`` (``s_A = 1/n``, ``s_G = R``: ``_kfac_math``'s scale convention), so

    G X A = s_G s_A ((g^T (g X)) a^T) a,

four products of ``n x out x in`` flops each and no ``out^2`` or ``in^2`` matrix. A factored CG iteration costs
``2 out in (out + in)`` flops (``_kfac_pcg``), the matrix-free one ``4 n out in``: cheaper when the rows kept are
fewer than ``(out + in) / 2``, which is what a token subsample buys (``subsample_rows``). It uses the current batch
only (no running average: that would need the factors) and the Jacobi preconditioner, exact for the Kronecker
operator's diagonal ``d_G d_A^T + lambda`` (``d_G = s_G sum_rows g^2``, ``d_A = s_A sum_rows a^2``), so no
``eigh`` and no matrix inverse. Every function is batched over ``k`` same-shaped layers.
"""
from __future__ import annotations

import torch

from brownformer.optim._kfac_pcg import CGResult


def layer_rows(kept: list[torch.Tensor], *, bias: bool, weight_sharing: str, pooled_by, dtype) -> torch.Tensor:
    """``(k, n, f[+1])`` rows of ``k`` layers' kept ``(B, ..., f)`` inputs or output gradients of one pass: every
    token a row (``expand``) or one per sequence pooled by ``pooled_by`` (``reduce``: the mean for inputs, the sum
    for output gradients, as ``_kfac_math``'s factors), with a ones column for a bias."""
    rows = []
    for x in kept:
        x = x.to(dtype).reshape(x.shape[0], -1, x.shape[-1])  # (B, T, f)
        if weight_sharing == "reduce":
            x = pooled_by(x, dim=1)[:, None]  # (B, 1, f)
        rows.append(x.reshape(-1, x.shape[-1]))  # (rows, f)
    out = torch.stack(rows)  # (k, n, f)
    if bias:
        out = torch.cat([out, out.new_ones(out.shape[0], out.shape[1], 1)], dim=2)  # (k, n, f + 1)
    return out


def subsample_rows(rows: torch.Tensor, keep: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``keep`` of the ``n`` rows of ``(k, n, f)`` ``rows`` (the same rows for every layer), uniformly without
    replacement; all of them when ``keep >= n``. Draw ``a`` and ``g`` rows with the same generator state (or pass
    them stacked) so a token's input and output gradient stay paired."""
    n = rows.shape[1]
    if keep >= n:
        return rows
    index = torch.randperm(n, generator=generator, device=rows.device)[:keep]
    return rows[:, index]


def matrix_free_operator(g: torch.Tensor, a: torch.Tensor, x: torch.Tensor, damping: torch.Tensor | float, *,
                         scale: float) -> torch.Tensor:
    """``X -> scale ((g^T (g X)) a^T) a + damping X``: ``G X A + damping X`` with ``G A``'s scales folded in ``scale``.

    Args:
        g: ``(k, n, out)`` output-gradient rows.
        a: ``(k, n, in)`` input rows (ones column included for a bias).
        x: ``(k, out, in)``.
        damping: A number or a ``(k, 1, 1)`` tensor.
        scale: ``s_G s_A``.
    """
    gx = torch.bmm(g.transpose(1, 2), torch.bmm(g, x))  # (k, out, in): G X / s_G
    gxa = torch.bmm(torch.bmm(gx, a.transpose(1, 2)), a)  # (k, out, in): G X A / (s_G s_A)
    return gxa.mul_(scale).add_(x * damping)


def jacobi_diagonal(g: torch.Tensor, a: torch.Tensor, *, scale: float) -> torch.Tensor:
    """``(k, out, in)`` diagonal of the undamped operator, ``scale (sum_rows g^2)_i (sum_rows a^2)_j``."""
    return (g.square().sum(dim=1)[:, :, None] * a.square().sum(dim=1)[:, None, :]).mul_(scale)


def matrix_free_cg(g: torch.Tensor, a: torch.Tensor, v: torch.Tensor, damping: torch.Tensor | float, *, scale: float,
                   max_iter: int, tol: float) -> CGResult:
    """Jacobi-preconditioned CG (Saad 2003, alg. 9.1) on :func:`matrix_free_operator` from ``X = 0``.

    A system stops when ``||V - op(X)|| <= tol ||V||`` or after ``max_iter`` iterations (converged systems frozen);
    it is not ``ok`` when it met non-positive curvature or produced non-finite values.

    Returns:
        :class:`~brownformer.optim._kfac_pcg.CGResult` with the ``(k, out, in)`` solution.
    """
    def dots(u, w):  # (k, 1, 1)
        return (u * w).sum(dim=(1, 2), keepdim=True)

    inverse_diagonal = 1.0 / (jacobi_diagonal(g, a, scale=scale) + damping)
    x = torch.zeros_like(v)
    r = v.clone()
    z = r * inverse_diagonal
    p = z.clone()
    rz, b_sq = dots(r, z), dots(v, v)
    threshold = tol ** 2 * b_sq
    active = dots(r, r) > threshold
    healthy = torch.ones_like(active)
    iterations = torch.zeros_like(b_sq, dtype=torch.long)
    for _ in range(max_iter):
        ap = matrix_free_operator(g, a, p, damping, scale=scale)
        p_ap = dots(p, ap)
        healthy &= ~active | (p_ap > 0)
        active &= healthy
        alpha = torch.where(active, rz / p_ap, 0.0)
        x.addcmul_(alpha, p)
        r.addcmul_(alpha, ap, value=-1.0)
        z = r * inverse_diagonal
        rz_new = dots(r, z)
        p = torch.addcmul(z, torch.where(active, rz_new / rz, 0.0), p)
        rz = torch.where(active, rz_new, rz)
        iterations += active
        active &= dots(r, r) > threshold
    rr = dots(r, r)
    rel = (rr / b_sq.clamp_min(torch.finfo(b_sq.dtype).tiny)).sqrt().flatten()
    ok = healthy.flatten() & torch.isfinite(x).flatten(1).all(dim=1) & torch.isfinite(rel)
    return CGResult(solution=x, iterations=iterations.flatten(), relative_residual=rel, ok=ok)
