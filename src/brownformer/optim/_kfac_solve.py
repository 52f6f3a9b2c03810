"""The solve of one K-FAC step over its shape groups: eigen (exact, amortised basis) or iterative (CG).

Both variants solve ``G X A + lambda X = V`` per layer (``_kfac_math``); an *item* is one shape group
``(group, tensors, persistent)`` whose ``tensors`` hold the stacked factors and eigendecompositions of
its layers, so every product below is one batched call per shape group (or per padded block of shape
groups for the CG, ``_kfac_blocks``), never a loop over layers.
"""
from __future__ import annotations

import torch

from brownformer.optim._kfac_blocks import pad, per_system, plan_blocks, unpad
from brownformer.optim._kfac_math import eigen_solve
from brownformer.optim._kfac_pcg import eigenbasis_cg, rotate, unrotate

ROTATED_KEYS = ("rotated_g", "rotated_a")  # Q^T F Q of the current factors: a cache, never saved


def eigen_directions(items: list, v: list[torch.Tensor], lam: list[torch.Tensor]) -> list[torch.Tensor]:
    """``X = Q_G [(Q_G^T V Q_A) / (d_G d_A^T + lambda)] Q_A^T`` per item from its amortised eigendecomposition."""
    return [eigen_solve((c["eigenvalues_g"], c["eigenvectors_g"]), (c["eigenvalues_a"], c["eigenvectors_a"]), vj, lj)
            for (_, c, _), vj, lj in zip(items, v, lam)]


def rotate_factors(tensors: dict) -> None:
    """Store ``G' = Q_G^T G Q_G`` and ``A' = Q_A^T A Q_A`` (the current factors in the amortised eigenbasis)."""
    q_g, q_a = tensors["eigenvectors_g"], tensors["eigenvectors_a"]
    tensors["rotated_g"] = rotate(q_g, tensors["factor_g"], q_g)
    tensors["rotated_a"] = rotate(q_a, tensors["factor_a"], q_a)


class IterativeSolver:
    """Iterative K-FAC's solve (``_kfac_pcg``): CG on the current factors in the amortised eigenbasis.

    Keeps, between steps, the block plan per tuple of item shapes and the padded rotated factors
    (they change only when the factors or the basis do).
    """

    def __init__(self, *, tol: float, warm_start: bool):
        self.tol, self.warm_start = tol, warm_start
        self._plans: dict = {}
        self._padded: tuple | None = None  # (the rotated factors it was built from, padded G', padded A')

    def _blocks(self, shapes: list[tuple[int, int, int]]):
        key = tuple(shapes)
        if key not in self._plans:
            self._plans[key] = plan_blocks(shapes)
        return self._plans[key]

    def _padded_factors(self, items: list, blocks, shapes) -> tuple[list, list]:
        sources = [c[k] for _, c, _ in items for k in ROTATED_KEYS]
        if self._padded is None or len(self._padded[0]) != len(sources) or \
                any(a is not b for a, b in zip(self._padded[0], sources)):
            self._padded = (sources, pad([c["rotated_g"] for _, c, _ in items], blocks, shapes, "g"),
                            pad([c["rotated_a"] for _, c, _ in items], blocks, shapes, "a"))
        return self._padded[1], self._padded[2]

    def direct(self, items: list, v: list[torch.Tensor], lam: list[torch.Tensor]) -> tuple[list[torch.Tensor], dict]:
        """Zero iterations, for factors the basis diagonalises: ``X = M V`` (the preconditioner is the
        exact inverse, and CG's first iterate would return it with step size 1)."""
        xs = eigen_directions(items, v, lam)
        zero = torch.zeros((), dtype=torch.long, device=v[0].device)
        if self.warm_start:
            for (_, c, _), x in zip(items, xs):
                c["cg_solution"] = x
        return xs, {"cg_iterations": zero.expand(sum(vj.shape[0] for vj in v)), "cg_fallbacks": zero, "cg_capped": zero}

    def n_blocks(self, items: list) -> int:
        return len(self._blocks([tuple(c["factor_g"].shape[:2]) + (c["factor_a"].shape[1],) for _, c, _ in items]))

    def __call__(self, items: list, v: list[torch.Tensor], lam: list[torch.Tensor], *, iterations: list[int]
                 ) -> tuple[list[torch.Tensor], dict]:
        """Directions ``X`` per item (a diverged system falls back to its gradient) and diagnostics;
        ``iterations[j]`` is block ``j``'s CG budget. Writes each item's ``cg_solution`` (and its rotated factors,
        made here when the item lacks them: only steps that iterate read them)."""
        for _, c, _ in items:
            if "rotated_g" not in c:
                rotate_factors(c)
        shapes = [tuple(vj.shape) for vj in v]
        blocks = self._blocks(shapes)
        rotated_v = pad([rotate(c["eigenvectors_g"], vj, c["eigenvectors_a"]) for (_, c, _), vj in zip(items, v)],
                        blocks, shapes, "x")
        x0 = pad([rotate(c["eigenvectors_g"], c["cg_solution"], c["eigenvectors_a"])
                  if self.warm_start and "cg_solution" in c else None for _, c, _ in items], blocks, shapes, "x")
        g_rot, a_rot = self._padded_factors(items, blocks, shapes)
        results = [eigenbasis_cg([g_rot[j]], [a_rot[j]], [rotated_v[j]], torch.cat([lam[i] for i in members]),
                                 iterations=iterations[j], tol=self.tol, x0=None if x0[j] is None else [x0[j]])
                   for j, (_, _, members) in enumerate(blocks)]
        solutions = [r.solution[0] for r in results]
        ok_all = torch.cat([r.ok for r in results])
        xs = []
        for (_, c, _), vj, y, ok in zip(items, v, unpad(solutions, blocks, shapes), per_system(ok_all, blocks, shapes)):
            ok = ok[:, None, None]
            x = unrotate(c["eigenvectors_g"], y, c["eigenvectors_a"])
            xs.append(torch.where(ok, x, vj))  # a diverged system falls back to its gradient
            c["cg_solution"] = torch.where(ok, x, 0.0)
        # per block: systems stopped by the budget, and the most iterations a system used
        capped = torch.stack([((r.relative_residual > self.tol) & r.ok).sum() for r in results])
        used = torch.stack([r.iterations.max() for r in results])
        return xs, {"cg_iterations": torch.cat([r.iterations for r in results]), "cg_fallbacks": (~ok_all).sum(),
                    "cg_capped": capped.sum(), "cg_block_capped": capped, "cg_block_iterations": used}
