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
    Martens & Grosse 2015 for the 2-D case). ``a`` is augmented with a ones column when the
    layer has a bias.

    Args:
        a: Layer input ``(B, ..., in)``, any float dtype; the product is taken in ``a``'s dtype.
        bias: Append a ones column (the layer has a bias).
        weight_sharing: ``"expand"`` or ``"reduce"``.

    Returns:
        ``(in[+1], in[+1])`` symmetric PSD matrix.
    """
    return stacked_input_factor([a], bias=bias, weight_sharing=weight_sharing, dtype=a.dtype)[0]


def _rows(x: torch.Tensor, weight_sharing: str, pool) -> torch.Tensor:
    """``(B, ..., F)`` -> ``(rows, F)``: every token a row, or one pooled row per sequence."""
    x = _as_sequences(x)  # (B, T, F)
    if weight_sharing == "reduce":
        x = pool(x, dim=1)  # (B, F)
    return x.reshape(-1, x.shape[-1])  # (rows, F)


def stacked_input_factor(a: list[torch.Tensor], *, bias: bool, weight_sharing: str = "expand",
                         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """:func:`input_factor` of ``k`` layers whose inputs have one shape, in ``dtype``.

    One product per layer straight from its input (stacking the inputs first would copy every
    activation), written into one ``(k, in[+1], in[+1])`` tensor.
    """
    rows = [_rows(t.to(dtype), weight_sharing, torch.mean) for t in a]  # k x (rows, in)
    n, F = rows[0].shape
    factor = rows[0].new_empty(len(rows), F + int(bias), F + int(bias))  # (k, in+1, in+1)
    top = factor if not bias else rows[0].new_empty(len(rows), F, F)  # (k, in, in)
    for j, x in enumerate(rows):
        torch.mm(x.T, x, out=top[j])
    if bias:  # [[a^T a, sum a], [sum a^T, rows]] / rows without materialising the ones column
        total = torch.stack([x.sum(dim=0) for x in rows])  # (k, in)
        factor[:, :F, :F] = top
        factor[:, :F, F] = total
        factor[:, F, :F] = total
        factor[:, F, F] = n
    return factor.div_(n)


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
    return stacked_output_factor([g], weight_sharing=weight_sharing, dtype=g.dtype)[0]


def stacked_output_factor(g: list[torch.Tensor], *, weight_sharing: str = "expand",
                          dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """:func:`output_factor` of ``k`` layers whose output gradients have one shape: ``(k, out, out)``."""
    B = g[0].shape[0]
    rows = [_rows(t.to(dtype), weight_sharing, torch.sum) for t in g]  # k x (rows, out)
    factor = rows[0].new_empty(len(rows), rows[0].shape[1], rows[0].shape[1])
    for j, x in enumerate(rows):
        torch.mm(x.T, x, out=factor[j])
    return factor.mul_(B)


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


def _dots(us: list[torch.Tensor], ws: list[torch.Tensor]) -> torch.Tensor:
    """Per-system inner products ``<U_l, W_l>`` of block lists, concatenated: ``(sum_j k_j, 1, 1)``."""
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
    restart = _energy(x, v, r) > 0
    if bool(restart.any()):
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
    damping: float,
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
    damping: float,
    *,
    x0: list[torch.Tensor | None] | None = None,
    max_iter: int = 10,
    tol: float = 1e-2,
) -> CGResult:
    """:func:`conjugate_gradient` on several blocks of differently shaped systems in one loop.

    Block ``j`` holds ``k_j`` systems of one shape (``g[j]`` ``(k_j, out_j, out_j)``, ``a[j]``
    ``(k_j, in_j, in_j)``, ``v[j]`` ``(k_j, out_j, in_j)``). The iterations of all blocks run
    together, so the per-iteration scalar work (step sizes, stopping tests) is one tensor operation
    over every system instead of one per block, and a single host check per iteration ends the loop.
    Every system follows exactly the recurrence and stopping rule of :func:`conjugate_gradient`.
    ``x0`` is None or a list with a warm start (or None for a cold start) per block.

    Returns:
        :class:`CGResult` whose ``solution`` is a tuple with one ``(k_j, out_j, in_j)`` tensor per block
        and whose diagnostics concatenate the blocks' systems in order.
    """
    bounds = [0]
    for vj in v:
        bounds.append(bounds[-1] + vj.shape[0])
    blocks = [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]  # systems of block j

    def operator(xs):
        return [kronecker_operator(gj, aj, xj, damping) for gj, aj, xj in zip(g, a, xs)]

    b_norm = _dots(v, v).sqrt_()  # (L, 1, 1); per-system scalars keep the block's broadcast shape
    x, r = _start(operator, v, x0, blocks)
    p = [rj.clone() for rj in r]
    rs = _dots(r, r)
    iterations = torch.zeros_like(b_norm, dtype=torch.long)
    healthy = torch.ones_like(b_norm, dtype=torch.bool)
    threshold = (tol * b_norm) ** 2
    active = rs > threshold
    for _ in range(max_iter):
        if not bool(active.any()):
            break
        ap = operator(p)
        p_ap = _dots(p, ap)
        healthy &= ~active | (p_ap > 0)
        active &= healthy
        alpha = (rs / p_ap).masked_fill_(~active, 0.0)
        for xj, rj, pj, apj, sl in zip(x, r, p, ap, blocks):
            xj.addcmul_(alpha[sl], pj)
            rj.addcmul_(alpha[sl], apj, value=-1.0)
        rs_new = _dots(r, r)
        beta = (rs_new / rs).masked_fill_(~active, 0.0)
        p = [torch.addcmul(rj, beta[sl], pj) for rj, pj, sl in zip(r, p, blocks)]
        rs = torch.where(active, rs_new, rs)
        iterations += active
        active &= rs > threshold
    rel = (rs.sqrt() / b_norm.clamp_min(torch.finfo(b_norm.dtype).tiny)).flatten()
    finite = torch.cat([torch.isfinite(xj).flatten(1).all(dim=1) for xj in x])
    ok = healthy.flatten() & finite & torch.isfinite(rel) & (_energy(x, v, r) <= 0).flatten()
    return CGResult(solution=tuple(x), iterations=iterations.flatten(), relative_residual=rel, ok=ok)


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
