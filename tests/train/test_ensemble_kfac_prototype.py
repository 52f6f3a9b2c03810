"""benchmarks/ensemble_kfac.py's batched CG: each stacked problem G X A + lambda X = V solved as a dense solve does."""
from __future__ import annotations

from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-10  # float64, CG run for as many steps as unknowns: exact up to rounding


def test_batched_kronecker_cg_equals_the_dense_kronecker_solve(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from ensemble_kfac import batched_kronecker_cg
    gen = torch.Generator().manual_seed(0)
    L, n_out, n_in, damping = 3, 4, 5, 1e-2
    a = torch.randn(L, 20, n_in, generator=gen, dtype=torch.float64)
    g = torch.randn(L, 20, n_out, generator=gen, dtype=torch.float64)
    A, G = a.transpose(1, 2) @ a / 20, g.transpose(1, 2) @ g / 20  # (L, in, in), (L, out, out)
    V = torch.randn(L, n_out, n_in, generator=gen, dtype=torch.float64)
    X = batched_kronecker_cg(G, A, V, damping, 3 * n_out * n_in)
    for i in range(L):
        # row-major vec: vec(G X A) = (G kron A^T) vec(X)
        M = torch.kron(G[i].contiguous(), A[i].T.contiguous()) + damping * torch.eye(n_out * n_in, dtype=torch.float64)
        torch.testing.assert_close(X[i].reshape(-1), torch.linalg.solve(M, V[i].reshape(-1)), rtol=TOL, atol=TOL)
