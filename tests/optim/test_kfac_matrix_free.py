"""The matrix-free CG (optim/_kfac_matrix_free.py) against the factored operator and the exact solve, in float64.

The reference forms ``A = a^T a / n`` and ``G = R g^T g`` from the same rows (``_kfac_math``'s factors) and solves
``G X A + lambda X = V`` exactly by a dense solve of the Kronecker system, independently of any CG."""
from __future__ import annotations

import pytest
import torch

from brownformer.optim._kfac_math import input_factor, kronecker_operator, output_factor
from brownformer.optim._kfac_matrix_free import jacobi_diagonal, matrix_free_cg, matrix_free_operator, subsample_rows
from brownformer.optim.kfac import KFAC

EXACT_RTOL = 1e-8  # float64 round-off on systems of a few dozen unknowns
CASES = [  # (layers, rows, out, in): fewer rows than unknowns (rank-deficient factors) and more
    (2, 6, 5, 4), (3, 40, 4, 7), (1, 3, 6, 6),
]


def _rows(k, n, n_out, n_in, seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(k, n, n_in - 1, generator=gen, dtype=torch.float64)
    a = torch.cat([a, torch.ones(k, n, 1, dtype=torch.float64)], dim=2)  # a bias's ones column
    g = torch.randn(k, n, n_out, generator=gen, dtype=torch.float64) / n
    v = torch.randn(k, n_out, n_in, generator=gen, dtype=torch.float64)
    return g, a, v


def _factors(g, a, r):
    """``(G, A)`` stacks by ``_kfac_math`` (its input factor adds the ones column itself: pass the rows without it)."""
    big_a = torch.stack([input_factor(x[:, :-1], bias=True, weight_sharing="expand") for x in a])
    big_g = torch.stack([output_factor(y, weight_sharing="expand", scale=r) for y in g])
    return big_g, big_a


@pytest.mark.parametrize("k, n, n_out, n_in", CASES, ids=[f"k{k}-n{n}-{o}x{i}" for k, n, o, i in CASES])
def test_matrix_free_operator_is_the_factored_operator(k, n, n_out, n_in):
    g, a, x = _rows(k, n, n_out, n_in, seed=1)
    r, lam = n, 0.3
    big_g, big_a = _factors(g, a, r)
    got = matrix_free_operator(g, a, x, lam, scale=r / n)
    want = kronecker_operator(big_g, big_a, x, lam)
    torch.testing.assert_close(got, want, rtol=EXACT_RTOL, atol=0)
    diagonal = torch.diagonal(big_g, dim1=1, dim2=2)[:, :, None] * torch.diagonal(big_a, dim1=1, dim2=2)[:, None, :]
    torch.testing.assert_close(jacobi_diagonal(g, a, scale=r / n), diagonal, rtol=EXACT_RTOL, atol=0)


@pytest.mark.parametrize("k, n, n_out, n_in", CASES, ids=[f"k{k}-n{n}-{o}x{i}" for k, n, o, i in CASES])
def test_matrix_free_cg_converges_to_the_exact_factored_solve(k, n, n_out, n_in):
    g, a, v = _rows(k, n, n_out, n_in, seed=2)
    r, lam = n, torch.tensor([1e-2, 1e-1, 1.0][:k], dtype=torch.float64)[:, None, None]
    big_g, big_a = _factors(g, a, r)
    # in exact arithmetic CG ends within the unknowns' count; rounding loses conjugacy on ill-conditioned ones
    result = matrix_free_cg(g, a, v, lam, scale=r / n, max_iter=4 * n_out * n_in, tol=1e-12)
    # column-major vec: vec(G X A) = (A^T (x) G) vec(X); A symmetric
    for j in range(k):
        system = torch.kron(big_a[j], big_g[j]) + lam[j, 0, 0] * torch.eye(n_out * n_in, dtype=torch.float64)
        exact = torch.linalg.solve(system, v[j].T.reshape(-1)).reshape(n_in, n_out).T
        torch.testing.assert_close(result.solution[j], exact, rtol=1e-7, atol=1e-9)
    assert result.ok.all() and (result.relative_residual <= 1e-12).all()


def test_a_truncated_matrix_free_cg_stops_at_its_budget_and_still_descends():
    g, a, v = _rows(2, 30, 6, 6, seed=3)
    result = matrix_free_cg(g, a, v, 1e-3, scale=1.0, max_iter=2, tol=1e-12)
    assert (result.iterations == 2).all() and result.ok.all()
    op_x = matrix_free_operator(g, a, result.solution, 1e-3, scale=1.0)
    energy = 0.5 * (result.solution * op_x).sum(dim=(1, 2)) - (v * result.solution).sum(dim=(1, 2))
    assert (energy < 0).all()  # below phi(0) = 0: CG decreases its objective from the start


def test_subsample_rows_keeps_pairs_and_all_rows_when_asked_for_more():
    rows = torch.arange(2 * 10 * 3, dtype=torch.float64).reshape(2, 10, 3)
    assert subsample_rows(rows, 20) is rows
    kept = subsample_rows(rows, 4, torch.Generator().manual_seed(0))
    assert kept.shape == (2, 4, 3) and len({tuple(r.tolist()) for r in kept[0]}) == 4
    # the same rows of every layer: row i of layer 1 is row i of layer 0 shifted by 30
    torch.testing.assert_close(kept[1] - kept[0], torch.full_like(kept[0], 30.0))


SOLVE_RTOL, SOLVE_ATOL = 1e-7, 1e-9  # CG to relative residual 1e-13, amplified by the systems' conditioning


def _twin_steps(curvature: str, steps: int = 3, rows: int = 10_000):
    """A float64 MLP on fixed batches, K-FAC with this step's factors only (``factor_every=1``, ``factor_decay=0``)
    and CG to round-off."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3)).double()
    opt = KFAC(model, lr=0.1, inverse="cg", curvature=curvature, curvature_rows=rows, factor_decay=0.0,
               factor_every=1, cg_tol=1e-13, cg_max_iter=500, fisher="empirical", kl_clip=None, momentum=0.0,
               adapt_every=0)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(16, 4, generator=gen, dtype=torch.float64), torch.randint(0, 3, (16,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()], opt


def test_the_matrix_free_option_steps_as_the_factored_solve_of_the_same_batch():
    """With every row kept and the factors of the current batch only, both curvatures solve one system: after
    three steps the weights agree to CG's round-off."""
    factored, _ = _twin_steps("factored")
    matrix_free, opt = _twin_steps("matrix-free")
    for a, b in zip(factored, matrix_free):
        torch.testing.assert_close(b, a, rtol=SOLVE_RTOL, atol=SOLVE_ATOL)
    assert not any("factor_a" in s for s in opt.state.values())  # it never formed a factor
    assert opt.last_stats["cg_iterations_mean"] > 0
    subsampled, _ = _twin_steps("matrix-free", rows=4)  # positive control: 4 of 16 rows is another curvature
    assert any(not torch.allclose(a, b, rtol=SOLVE_RTOL, atol=SOLVE_ATOL) for a, b in zip(factored, subsampled))


def test_the_matrix_free_option_needs_the_iterative_solve():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    with pytest.raises(ValueError, match="matrix-free"):
        KFAC(model, inverse="eigen", curvature="matrix-free")
