"""Pure tensor maths of K-FAC: Kronecker factors, damped Kronecker solves, conjugate gradient.

Notation (one ``nn.Linear`` layer ``s = W a + b``): ``a`` is the layer input with a ones column
appended when the layer has a bias, ``g = dL/ds`` the gradient of the backpropagated loss ``L``
with respect to the output, ``V = dL/d[W, b]`` the gradient as an ``(out, in[+1])`` matrix.
Every function here is a pure function of tensors so it can be tested on its own.

Scale convention: ``L`` is a mean over the leading (batch) dimension ``B`` of the layer input,
``L = (1/B) sum_n l_n``; each per-example loss ``l_n`` may sum (or mean) over its tokens. Then
``B g`` is the per-example gradient and ``G = B sum_rows g g^T`` estimates the per-example factor,
so ``A (x) G`` matches the GGN of ``L`` exactly in the known exact cases (Eschenhagen et al. 2023):
deep linear networks with a per-token loss summed over tokens (``expand``) or a loss on
token-pooled outputs (``reduce``). A loss that is a mean over ``B * T`` tokens makes ``G`` ``T``
times smaller than that GGN block, which acts like a ``T`` times larger damping.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

WEIGHT_SHARING = ("expand", "reduce")


def _as_sequences(x: torch.Tensor) -> torch.Tensor:
    """Reshape ``(B, ..., F)`` to ``(B, T, F)``; a 2-D input gets ``T = 1``."""
    B, F = x.shape[0], x.shape[-1]
    return x.reshape(B, -1, F)  # (B, T, F)


def input_factor(a: torch.Tensor, *, bias: bool, weight_sharing: str = "expand") -> torch.Tensor:
    """Input Kronecker factor ``A`` of one batch.

    ``expand`` treats every token as an example, ``A = 1/(B T) sum_{n,t} a_nt a_nt^T``;
    ``reduce`` averages tokens first, ``A = 1/B sum_n abar_n abar_n^T`` with
    ``abar_n = 1/T sum_t a_nt`` (Eschenhagen et al. 2023, K-FAC-expand / K-FAC-reduce;
    Martens & Grosse 2015 for the 2-D case).

    Args:
        a: Layer input ``(B, ..., in)``, any float dtype; the product is taken in ``a``'s dtype.
        bias: Append a ones column (the layer has a bias).
        weight_sharing: ``"expand"`` or ``"reduce"``.

    Returns:
        ``(in[+1], in[+1])`` symmetric PSD matrix.
    """
    a = _as_sequences(a)  # (B, T, in)
    if weight_sharing == "reduce":
        a = a.mean(dim=1, keepdim=True)  # (B, 1, in)
    a = a.reshape(-1, a.shape[-1])  # (B*T, in)
    rows = a.shape[0]
    factor = a.T @ a / rows
    if not bias:
        return factor
    # [[a^T a, sum a], [sum a^T, rows]] / rows without materialising the ones column
    mean = a.mean(dim=0)
    top = torch.cat([factor, mean[:, None]], dim=1)  # (in, in+1)
    bottom = torch.cat([mean, mean.new_ones(1)])[None, :]  # (1, in+1)
    return torch.cat([top, bottom], dim=0)


def output_factor(g: torch.Tensor, *, weight_sharing: str = "expand") -> torch.Tensor:
    """Output-gradient Kronecker factor ``G`` of one batch, for a loss averaged over ``B``.

    ``expand``: ``G = B sum_{n,t} g_nt g_nt^T``; ``reduce``: ``G = B sum_n gsum_n gsum_n^T`` with
    ``gsum_n = sum_t g_nt`` (Eschenhagen et al. 2023); the factor ``B`` undoes the ``1/B`` of the
    mean-reduced loss (see the module docstring).

    Args:
        g: Gradient of the loss w.r.t. the layer output, ``(B, ..., out)``.
        weight_sharing: ``"expand"`` or ``"reduce"``.

    Returns:
        ``(out, out)`` symmetric PSD matrix.
    """
    B = g.shape[0]
    g = _as_sequences(g)  # (B, T, out)
    if weight_sharing == "reduce":
        g = g.sum(dim=1, keepdim=True)  # (B, 1, out)
    g = g.reshape(-1, g.shape[-1])  # (B*T, out)
    return (g.T @ g) * B


def block_diagonal(m: torch.Tensor, block: int) -> torch.Tensor:
    """Zero the off-diagonal ``block x block`` blocks of a square matrix (per-head ``G``)."""
    n = m.shape[-1]
    idx = torch.arange(n, device=m.device) // block
    return m * (idx[:, None] == idx[None, :])


def kronecker_operator(g: torch.Tensor, a: torch.Tensor, x: torch.Tensor, damping: float) -> torch.Tensor:
    """Apply the damped Kronecker operator ``X -> G X A + damping X`` (batched over dim 0).

    ``G X A`` is ``(A (x) G) vec(X)`` in column-major ``vec``; with ``G, A`` PSD and
    ``damping > 0`` the operator is symmetric positive definite.
    """
    return torch.baddbmm(x, torch.bmm(g, x), a, beta=damping)


def eigen_solve(
    eig_g: tuple[torch.Tensor, torch.Tensor],
    eig_a: tuple[torch.Tensor, torch.Tensor],
    v: torch.Tensor,
    damping: float,
) -> torch.Tensor:
    """Solve ``G X A + damping X = V`` exactly from eigendecompositions (batched over dim 0).

    With ``G = Q_g diag(d_g) Q_g^T`` and ``A = Q_a diag(d_a) Q_a^T``:
    ``X = Q_g [(Q_g^T V Q_a) / (d_g d_a^T + damping)] Q_a^T`` (Martens & Grosse 2015, with the
    exact Kronecker damping instead of the factored Tikhonov split, so it solves the same system
    as :func:`conjugate_gradient`; George et al. 2018 use the same eigenbasis form).
    """
    (dg, qg), (da, qa) = eig_g, eig_a
    rotated = qg.transpose(1, 2) @ v @ qa  # (k, out, in)
    rotated = rotated / (dg[:, :, None] * da[:, None, :] + damping)
    return qg @ rotated @ qa.transpose(1, 2)


def symmetric_eigh(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched ``eigh`` of PSD factors; eigenvalues clamped at 0; float64 retry on failure.

    Raises:
        torch.linalg.LinAlgError: If ``eigh`` fails in float64 as well.
    """
    try:
        d, q = torch.linalg.eigh(m)
    except torch.linalg.LinAlgError:
        logger.warning("eigh failed in %s; retrying in float64", m.dtype)
        d, q = torch.linalg.eigh(m.double())
        d, q = d.to(m.dtype), q.to(m.dtype)
    return d.clamp_min(0.0), q


def _energy(x: torch.Tensor, v: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """CG objective ``phi(X) = 1/2 <X, op(X)> - <V, X> = -1/2 <X, V + R>`` with ``R = V - op(X)``.

    CG decreases ``phi`` monotonically from ``phi(0) = 0`` (the residual norm need not decrease),
    so ``phi > 0`` means a warm start worse than zero or a numerical breakdown.
    """
    return -0.5 * (x * (v + r)).sum(dim=(1, 2))


@dataclass(frozen=True)
class CGResult:
    """Batched conjugate-gradient outcome: solutions and per-system diagnostics."""

    solution: torch.Tensor
    iterations: torch.Tensor
    relative_residual: torch.Tensor
    ok: torch.Tensor


def conjugate_gradient(
    g: torch.Tensor,
    a: torch.Tensor,
    v: torch.Tensor,
    damping: float,
    *,
    x0: torch.Tensor | None = None,
    max_iter: int = 10,
    tol: float = 1e-2,
) -> CGResult:
    """Solve ``G X A + damping X = V`` for a batch of layers by conjugate gradient.

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
    b_norm = torch.linalg.vector_norm(v, dim=(1, 2))  # (k,)
    x = torch.zeros_like(v) if x0 is None else x0.clone()
    r = v - kronecker_operator(g, a, x, damping)
    restart = _energy(x, v, r) > 0
    if restart.any():
        x[restart] = 0.0
        r[restart] = v[restart]
    p = r.clone()
    rs = (r * r).sum(dim=(1, 2))  # (k,)
    iterations = torch.zeros_like(b_norm, dtype=torch.long)
    healthy = torch.ones_like(restart)
    threshold = (tol * b_norm) ** 2
    active = rs > threshold
    for _ in range(max_iter):
        if not bool(active.any()):
            break
        ap = kronecker_operator(g, a, p, damping)
        p_ap = (p * ap).sum(dim=(1, 2))
        healthy &= ~active | (p_ap > 0)
        active &= healthy
        alpha = torch.where(active, rs / torch.where(active, p_ap, 1.0), 0.0)[:, None, None]
        x.add_(alpha * p)
        r.sub_(alpha * ap)
        rs_new = (r * r).sum(dim=(1, 2))
        beta = torch.where(active, rs_new / torch.where(rs > 0, rs, 1.0), 0.0)[:, None, None]
        p = r + beta * p
        rs = torch.where(active, rs_new, rs)
        iterations += active.long()
        active &= rs > threshold
    rel = rs.sqrt() / b_norm.clamp_min(torch.finfo(v.dtype).tiny)
    ok = healthy & torch.isfinite(x).all(dim=2).all(dim=1) & torch.isfinite(rel) & (_energy(x, v, r) <= 0)
    return CGResult(solution=x, iterations=iterations, relative_residual=rel, ok=ok)


def kl_clip_scale(vg_sum: torch.Tensor, *, lr: float, kl_clip: float | None) -> torch.Tensor:
    """KL-clip factor ``nu = min(1, sqrt(kl_clip / |lr^2 sum_l <V_l, X_l>|))`` (kfac-pytorch).

    ``vg_sum`` is ``sum_l <V_l, X_l>`` over preconditioned layers (raw gradient ``V``,
    preconditioned ``X``): ``lr^2`` times it approximates the KL divergence of the step
    (Ba et al. 2017). A zero or non-finite sum, or ``kl_clip=None``, gives ``nu = 1``.
    """
    one = torch.ones((), dtype=vg_sum.dtype, device=vg_sum.device)
    if kl_clip is None or lr == 0.0:
        return one
    vg = (vg_sum * lr**2).abs()
    nu = torch.sqrt(kl_clip / vg).clamp(max=1.0)
    return torch.where(torch.isfinite(nu) & (vg > 0), nu, one)
