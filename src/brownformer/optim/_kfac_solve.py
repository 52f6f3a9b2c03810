"""The solve of one K-FAC step over its shape groups: eigen (exact, amortised basis) or iterative (CG, no eigh).

Both variants solve ``G X A + lambda X = V`` per layer (``_kfac_math``); an *item* is one shape group
``(group, tensors, persistent)`` whose ``tensors`` hold the stacked factors of its layers and, for eigen,
their eigendecompositions, for CG their Kronecker preconditioner (``_kfac_pcg``; Cholesky, no eigendecomposition),
so every product below is one batched call per shape group (or per padded block of shape groups for the
CG, ``_kfac_blocks``), never a loop over layers.
"""
from __future__ import annotations

import torch

from brownformer.optim._kfac_blocks import pad, per_system, plan_blocks, unpad
from brownformer.optim._kfac_groups import EIGEN_KEYS, PRECONDITIONER_KEYS
from brownformer.optim._kfac_math import eigen_solve, factor_eigh, host_read_free
from brownformer.optim._kfac_pcg import block_conjugate_gradient, damped, spd_inverse, split_damping

def eigen_directions(items: list, v: list[torch.Tensor], lam: list[torch.Tensor]) -> list[torch.Tensor]:
    """``X = Q_G [(Q_G^T V Q_A) / (d_G d_A^T + lambda)] Q_A^T`` per item from its amortised eigendecomposition."""
    return [eigen_solve((c["eigenvalues_g"], c["eigenvectors_g"]), (c["eigenvalues_a"], c["eigenvectors_a"]), vj, lj)
            for (_, c, _), vj, lj in zip(items, v, lam)]


def refresh_eigenbases(cur: dict, groups: list, refresh: list) -> list[torch.Tensor]:
    """Eigen K-FAC's decompositions per shape group: fresh for the groups in ``refresh`` (on an accelerator every
    factor in at most two ``eigh`` calls), the stored ones for the others. Returns finiteness flags of the
    refreshed factors (``padded_eigh`` zeroes non-finite entries; these flags fail such a step)."""
    for g in groups:
        if g not in refresh:
            cur[g].update({k: g.stacks[k] for k in EIGEN_KEYS})
    flags = [torch.isfinite(cur[g][k].sum()) for g in refresh for k in ("factor_a", "factor_g")]
    if refresh:
        pairs = factor_eigh([cur[g][k] for g in refresh for k in ("factor_a", "factor_g")])
        for j, g in enumerate(refresh):
            (cur[g]["eigenvalues_a"], cur[g]["eigenvectors_a"]), (cur[g]["eigenvalues_g"],
                                                                  cur[g]["eigenvectors_g"]) = pairs[2 * j: 2 * j + 2]
    return flags


def refresh_preconditioner(tensors: dict, damping: torch.Tensor) -> None:
    """Store ``preconditioner_g = (G + gamma_G I)^-1`` and ``preconditioner_a = (A + gamma_A I)^-1`` for the
    current factors and damping (``_kfac_pcg``; Cholesky, no eigendecomposition)."""
    g, a = tensors["factor_g"], tensors["factor_a"]
    gamma_g, gamma_a = split_damping(g, a, damping)
    for key, factor, gamma in (("preconditioner_g", g, gamma_g), ("preconditioner_a", a, gamma_a)):
        tensors[key] = spd_inverse(damped(factor, gamma))


class IterativeSolver:
    """Iterative K-FAC's solve: truncated CG on the current factors, Kronecker-preconditioned (``_kfac_pcg``).

    Keeps, between steps, the block plan per tuple of item shapes and the padded factors and
    preconditioners (they change only when the factors or the damping do).
    """

    def __init__(self, *, tol: float, warm_start: bool):
        self.tol, self.warm_start = tol, warm_start
        self._plans: dict = {}
        self._padded: tuple | None = None  # (the tensors it was built from, padded G, A, Y_G, Y_A)

    def clear(self) -> None:
        """Forget the padded copies (after the factors were edited in place)."""
        self._padded = None

    def _blocks(self, shapes: list[tuple[int, int, int]]):
        key = tuple(shapes)
        if key not in self._plans:
            self._plans[key] = plan_blocks(shapes)
        return self._plans[key]

    def _padded_tensors(self, items: list, blocks, shapes) -> tuple:
        keys = ("factor_g", "factor_a") + PRECONDITIONER_KEYS
        sources = [c[k] for _, c, _ in items for k in keys]
        if self._padded is None or len(self._padded[0]) != len(sources) or \
                any(a is not b for a, b in zip(self._padded[0], sources)):
            sides = {"factor_g": "g", "factor_a": "a", "preconditioner_g": "g", "preconditioner_a": "a"}
            self._padded = (sources, *(pad([c[k] for _, c, _ in items], blocks, shapes, sides[k]) for k in keys))
        return self._padded[1:]

    def n_blocks(self, items: list) -> int:
        return len(self._blocks([tuple(c["factor_g"].shape[:2]) + (c["factor_a"].shape[1],) for _, c, _ in items]))

    def problem(self, items: list, v: list[torch.Tensor], lam: list[torch.Tensor], *, iterations: list[int]
                ) -> tuple[list, list, tuple, dict]:
        """The block CG this solve runs: ``(blocks, shapes, args, kwargs)`` with
        ``block_conjugate_gradient(*args, **kwargs)`` the call (the items padded into the block plan; a benchmark
        times the same call)."""
        shapes = [tuple(vj.shape) for vj in v]
        blocks = self._blocks(shapes)
        padded_v = pad(v, blocks, shapes, "x")
        x0 = pad([c.get("cg_solution") if self.warm_start else None for _, c, _ in items], blocks, shapes, "x")
        g, a, y_g, y_a = self._padded_tensors(items, blocks, shapes)
        damping = torch.cat([lam[i] for _, _, members in blocks for i in members])
        kwargs = {"x0": x0 if any(x is not None for x in x0) else None, "max_iter": list(iterations), "tol": self.tol,
                  "preconditioner": list(zip(y_g, y_a))}
        return blocks, shapes, (g, a, padded_v, damping), kwargs

    def __call__(self, items: list, v: list[torch.Tensor], lam: list[torch.Tensor], *, iterations: list[int]
                 ) -> tuple[list[torch.Tensor], dict]:
        """Directions ``X`` per item (a diverged system falls back to its gradient) and diagnostics;
        ``iterations[j]`` is block ``j``'s CG budget. Writes each item's ``cg_solution``."""
        blocks, shapes, args, kwargs = self.problem(items, v, lam, iterations=iterations)
        # every block in one loop: the per-iteration scalar work (step sizes, stopping tests) is shared
        result = block_conjugate_gradient(*args, **kwargs)
        xs = unpad(list(result.solution), blocks, shapes)
        all_ok = host_read_free(result.ok.device) and bool(result.ok.all())  # where a read is free: no masking then
        if all_ok:
            for (_, c, _), xj in zip(items, xs):
                c["cg_solution"] = xj
        else:
            for j, ((_, c, _), vj, ok) in enumerate(zip(items, v, per_system(result.ok, blocks, shapes))):
                c["cg_solution"] = torch.where(ok[:, None, None], xs[j], 0.0)
                xs[j] = torch.where(ok[:, None, None], xs[j], vj)  # a diverged system falls back to its gradient
        # per block: systems stopped by the budget, and the most iterations a system used
        stopped = (result.relative_residual > self.tol) & result.ok
        if len(blocks) == 1:
            capped, used = stopped.sum().reshape(1), result.iterations.max().reshape(1)
        else:
            sizes = [sum(shapes[i][0] for i in members) for _, _, members in blocks]
            capped = torch.stack([s.sum() for s in stopped.split(sizes)])
            used = torch.stack([its.max() for its in result.iterations.split(sizes)])
        return xs, {"cg_iterations": result.iterations, "cg_fallbacks": 0 if all_ok else (~result.ok).sum(),
                    "cg_capped": capped.sum(), "cg_block_capped": capped, "cg_block_iterations": used}
