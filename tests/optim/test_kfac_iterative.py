"""The iterative solve (CG in the amortised eigenbasis), its iteration budget, and the device-side
robustness of a step (masked update, factor fold) against exact references and known answers."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from brownformer.optim._kfac_control import next_budgets
from brownformer.optim._kfac_math import eigen_solve, kronecker_operator, symmetric_eigh
from brownformer.optim._kfac_pcg import eigenbasis_cg, rotate, unrotate
from brownformer.optim._kfac_step import fold_factor
from brownformer.optim.kfac import KFAC

EXACT_RTOL = 1e-8  # float64 round-off on systems of a few dozen unknowns


def _spd(k, n, seed):
    gen = torch.Generator().manual_seed(seed)
    m = torch.randn(k, n, 2 * n, generator=gen, dtype=torch.float64)
    return m @ m.transpose(1, 2) / n


def _system(seed=0, k=3, n_out=5, n_in=4):
    gen = torch.Generator().manual_seed(seed + 100)
    return _spd(k, n_out, seed), _spd(k, n_in, seed + 1), torch.randn(k, n_out, n_in, generator=gen, dtype=torch.float64)


def _solve_in_basis(g, a, v, basis_g, basis_a, damping, iterations, tol):
    """Rotate into the eigenbases of (basis_g, basis_a), run eigenbasis_cg, rotate back."""
    q_g, q_a = symmetric_eigh(basis_g)[1], symmetric_eigh(basis_a)[1]
    lam = torch.full((g.shape[0], 1, 1), damping, dtype=torch.float64)
    result = eigenbasis_cg([rotate(q_g, g, q_g)], [rotate(q_a, a, q_a)], [rotate(q_g, v, q_a)], lam,
                           iterations=iterations, tol=tol)
    return unrotate(q_g, result.solution[0], q_a), result


def test_eigenbasis_cg_solves_the_current_system_with_a_stale_basis():
    g, a, v = _system()
    old_g, old_a, _ = _system(seed=7)  # the basis comes from other factors: CG must iterate
    stale_g, stale_a = 0.7 * old_g + 0.3 * g, 0.7 * old_a + 0.3 * a
    x, result = _solve_in_basis(g, a, v, stale_g, stale_a, 1e-2, iterations=200, tol=1e-12)
    exact = eigen_solve(symmetric_eigh(g), symmetric_eigh(a), v, 1e-2)
    assert bool(result.ok.all()) and (result.iterations > 1).all()
    assert float((x - exact).norm() / exact.norm()) < EXACT_RTOL
    residual = v - kronecker_operator(g, a, x, 1e-2)
    assert float(residual.norm() / v.norm()) < 1e-10


def test_eigenbasis_cg_takes_one_iteration_when_the_basis_diagonalises_the_factors():
    g, a, v = _system(seed=3)
    x, result = _solve_in_basis(g, a, v, g, a, 1e-3, iterations=5, tol=1e-10)
    assert result.iterations.tolist() == [1, 1, 1]  # the Jacobi preconditioner is the exact inverse
    exact = eigen_solve(symmetric_eigh(g), symmetric_eigh(a), v, 1e-3)
    assert float((x - exact).norm() / exact.norm()) < EXACT_RTOL


def test_eigenbasis_cg_needs_fewer_iterations_than_plain_cg_on_a_drifted_system():
    from brownformer.optim._kfac_pcg import conjugate_gradient
    g, a, v = _system(seed=5, k=4, n_out=12, n_in=10)
    drift_g, drift_a, _ = _system(seed=9, k=4, n_out=12, n_in=10)
    new_g, new_a = 0.8 * g + 0.2 * drift_g, 0.8 * a + 0.2 * drift_a  # one factor update after the refresh
    _, pre = _solve_in_basis(new_g, new_a, v, g, a, 1e-4, iterations=500, tol=1e-2)
    plain = conjugate_gradient(new_g, new_a, v, 1e-4, max_iter=500, tol=1e-2)
    assert bool(pre.ok.all()) and bool(plain.ok.all())
    assert pre.iterations.sum() < plain.iterations.sum()


@pytest.mark.parametrize("budgets, seen, expected", [
    ([10, 10], [[0, 3], [0, 6]], [3, 6]),  # shrink to what the window used
    ([3, 6], [[2, 3], [0, 1]], [6, 1]),  # a block stopped by its budget doubles it
    ([8], [[1, 8]], [10]),  # never above the cap
    ([4], [[0, 0]], [1]),  # never below one
])
def test_cg_budget_rule(budgets, seen, expected):
    assert next_budgets(budgets, seen, cap=10) == expected


def test_fold_factor_drops_nonfinite_batches_and_restarts_nonfinite_running_factors():
    running = torch.stack([torch.eye(2), torch.eye(2), torch.full((2, 2), float("nan")), 2 * torch.eye(2)])
    batch = torch.stack([3 * torch.eye(2), torch.full((2, 2), float("inf")), 5 * torch.eye(2), 7 * torch.eye(2)])
    folded, dropped = fold_factor(running, batch, 0.25, [True, True, True, False])
    expected = torch.stack([1.5 * torch.eye(2), torch.eye(2), 5 * torch.eye(2), 2 * torch.eye(2)])
    assert torch.equal(folded, expected) and int(dropped) == 1


def test_a_failed_step_changes_nothing_before_the_check():
    """Masked on the device: parameters (AdamW's included), momentum and moments stay as they were."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2)).double()
    opt = KFAC(model, lr=0.1, inverse="cg", adapt_every=10)
    x, y = torch.randn(8, 3, dtype=torch.float64), torch.randint(0, 2, (8,))
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    before = [p.detach().clone() for p in model.parameters()]
    buffers = [{k: v.clone() for k, v in opt.state[p].items() if k in ("momentum_buffer", "exp_avg", "exp_avg_sq")}
               for p in model.parameters()]
    x_bad = x.clone()
    x_bad[0, 0] = float("nan")
    opt.zero_grad()
    F.cross_entropy(model(x_bad), y).backward()
    opt.step()  # step 2: no check until step 10
    assert opt.failures == 0  # not yet seen by the host
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    for p, saved in zip(model.parameters(), buffers):
        assert all(torch.equal(opt.state[p][k], v) for k, v in saved.items())
