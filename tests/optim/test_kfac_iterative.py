"""The iterative solve (Kronecker-preconditioned CG, Cholesky inverses, no eigendecomposition), its
iteration budget, and the device-side robustness of a step (masked update, factor fold) against exact
references and known answers."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import jacrev

from brownformer.optim._kfac_control import next_budgets
from brownformer.optim._kfac_math import input_factor, kronecker_operator, output_factor
from brownformer.optim._kfac_pcg import block_conjugate_gradient, conjugate_gradient, damped, spd_inverse, split_damping
from brownformer.optim._kfac_solve import refresh_preconditioner
from brownformer.optim._kfac_step import fold_factor
from brownformer.optim.kfac import KFAC

from tests.optim.conftest import TinyTransformer

EXACT_RTOL = 1e-8  # float64 round-off on systems of a few dozen unknowns
DECOMPOSITIONS = ("eigh", "eigvalsh", "eig", "eigvals", "svd", "svdvals")  # torch.linalg's spectral routines


def _spd(k, n, seed, condition=1.0):
    """SPD stack whose spectrum spans ``condition`` (a random basis, log-spaced eigenvalues up to 1)."""
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(k, n, n, generator=gen, dtype=torch.float64))
    d = torch.logspace(0, -torch.log10(torch.tensor(condition)).item(), n, dtype=torch.float64)
    m = torch.randn(k, n, 2 * n, generator=gen, dtype=torch.float64)
    return q @ torch.diag_embed(d) @ q.transpose(1, 2) + m @ m.transpose(1, 2) / (10 * n)


def _system(seed=0, k=3, n_out=5, n_in=4, condition=1e3):
    gen = torch.Generator().manual_seed(seed + 100)
    return (_spd(k, n_out, seed, condition), _spd(k, n_in, seed + 1, condition),
            torch.randn(k, n_out, n_in, generator=gen, dtype=torch.float64))


def _kronecker_pcg(g, a, v, damping, *, max_iter, tol):
    lam = torch.full((g.shape[0], 1, 1), damping, dtype=torch.float64)
    tensors = {"factor_g": g, "factor_a": a}
    refresh_preconditioner(tensors, lam)
    return block_conjugate_gradient([g], [a], [v], lam, max_iter=max_iter, tol=tol,
                                    preconditioner=[(tensors["preconditioner_g"], tensors["preconditioner_a"])])


def test_spd_inverse_is_the_inverse_and_symmetric():
    m = damped(_spd(3, 7, seed=0, condition=1e4), torch.full((3, 1, 1), 1e-3, dtype=torch.float64))
    y = spd_inverse(m)
    exact = torch.linalg.inv(m)
    assert float((y - exact).norm() / exact.norm()) < EXACT_RTOL
    assert float((y - y.transpose(1, 2)).abs().max()) < EXACT_RTOL * float(y.abs().max())


def test_spd_inverse_of_a_matrix_cholesky_rejects_is_a_scaled_identity():
    """An indefinite matrix (a positive control for the failure path) gets I / ||M||_inf, still SPD; the others
    of the stack keep their exact inverse."""
    m = _spd(2, 5, seed=2, condition=10.0)
    m[1] -= 2.0 * torch.eye(5, dtype=torch.float64) * float(torch.linalg.matrix_norm(m[1], ord=2))  # indefinite
    y = spd_inverse(m)
    assert float((y[0] - torch.linalg.inv(m[0])).norm() / torch.linalg.inv(m[0]).norm()) < EXACT_RTOL
    norm_inf = float(m[1].abs().sum(dim=1).max())
    assert torch.allclose(y[1], torch.eye(5, dtype=torch.float64) / norm_inf)


def test_spd_inverse_of_a_non_finite_matrix_is_not_finite():
    m = _spd(2, 4, seed=3)
    m[0, 1, 2] = float("nan")
    y = spd_inverse(m)
    assert not bool(torch.isfinite(y[0]).all()) and bool(torch.isfinite(y[1]).all())


def test_kronecker_pcg_equals_the_exact_solve_against_torch_func_curvature():
    """On a linear layer with a per-token squared error, A (x) G is the exact GGN (Eschenhagen et al. 2023):
    the preconditioned CG's solution is (GGN + lambda I)^-1 grad with the GGN from torch.func."""
    gen = torch.Generator().manual_seed(0)
    n, t, d_in, d_out, damping = 6, 3, 4, 3, 1e-2
    x = torch.randn(n, t, d_in, generator=gen, dtype=torch.float64)
    wb = torch.randn(d_out, d_in + 1, generator=gen, dtype=torch.float64)
    target = torch.randn(n, t, d_out, generator=gen, dtype=torch.float64)

    def output(p):  # (n, t, d_out)
        return x @ p[:, :-1].T + p[:, -1]

    jac = jacrev(output)(wb).reshape(-1, wb.numel())
    ggn = jac.T @ jac / n  # L = (1/n) sum 1/2 ||f - y||^2: the loss Hessian is the identity
    grad = jac.T @ (output(wb) - target).reshape(-1) / n
    exact = torch.linalg.solve(ggn + damping * torch.eye(wb.numel(), dtype=torch.float64), grad).reshape(wb.shape)

    s = output(wb).detach().requires_grad_()
    (g_out,) = torch.autograd.grad(0.5 * (s - target).pow(2).sum() / n, s)  # (n, t, d_out)
    factor_a = input_factor(x, bias=True, weight_sharing="expand")[None]  # (1, d_in + 1, d_in + 1)
    # G from the columns of the loss Hessian's square root (the identity), backpropagated as the loss is
    factor_g = sum(output_factor(torch.autograd.grad(s[..., k].sum() / n, s, retain_graph=True)[0], weight_sharing="expand", scale=n)
                   for k in range(d_out))[None]  # (1, d_out, d_out)
    v = (g_out.reshape(-1, d_out).T @ torch.cat([x.reshape(-1, d_in), torch.ones(n * t, 1, dtype=torch.float64)], 1))
    torch.testing.assert_close(v.reshape(-1), grad)
    torch.testing.assert_close(torch.kron(factor_g[0], factor_a[0]), ggn)
    result = _kronecker_pcg(factor_g, factor_a, v[None], damping, max_iter=200, tol=1e-13)
    assert bool(result.ok.all())
    assert float((result.solution[0][0] - exact).norm() / exact.norm()) < EXACT_RTOL


def test_kronecker_pcg_needs_fewer_iterations_than_plain_cg():
    g, a, v = _system(seed=5, k=4, n_out=12, n_in=10, condition=1e4)
    pre = _kronecker_pcg(g, a, v, 1e-4, max_iter=500, tol=1e-2)
    plain = conjugate_gradient(g, a, v, 1e-4, max_iter=500, tol=1e-2)
    assert bool(pre.ok.all()) and bool(plain.ok.all())
    residual = v - kronecker_operator(g, a, pre.solution[0], 1e-4)
    assert float(residual.norm() / v.norm()) <= 1e-2 * 1.0001
    assert pre.iterations.sum() < plain.iterations.sum() / 2, (pre.iterations, plain.iterations)


def test_a_fixed_budget_without_host_reads_gives_the_early_stopped_solution():
    """``stop_early=False`` (what a compiled graph needs) runs the whole budget with converged systems frozen: the
    same solutions, iteration counts and health as the CPU's loop that stops once every system has converged."""
    g, a, v = _system(seed=7, k=4, n_out=9, n_in=6, condition=1e3)
    lam = torch.full((4, 1, 1), 1e-3, dtype=torch.float64)
    tensors = {"factor_g": g, "factor_a": a}
    refresh_preconditioner(tensors, lam)
    kwargs = dict(max_iter=40, tol=1e-3, preconditioner=[(tensors["preconditioner_g"], tensors["preconditioner_a"])])
    early = block_conjugate_gradient([g], [a], [v], lam, **kwargs)
    fixed = block_conjugate_gradient([g], [a], [v], lam, stop_early=False, **kwargs)
    assert int(early.iterations.max()) < 40  # converged before the budget: the fixed loop ran idle iterations
    assert torch.equal(early.iterations, fixed.iterations) and torch.equal(early.ok, fixed.ok)
    torch.testing.assert_close(fixed.solution[0], early.solution[0], rtol=0, atol=0)


def test_split_damping_balances_the_factors_and_keeps_the_product():
    g, a, _ = _system(seed=2)
    g = 1e-4 * g  # G is small at the loss's scale: gamma_G must follow it
    lam = torch.full((3, 1, 1), 1e-2, dtype=torch.float64)
    gamma_g, gamma_a = split_damping(g, a, lam)
    torch.testing.assert_close(gamma_g * gamma_a, lam)
    mean = lambda m: torch.diagonal(m, dim1=1, dim2=2).mean(1)[:, None, None]
    torch.testing.assert_close(gamma_g / mean(g), gamma_a / mean(a))


def test_iterative_kfac_calls_no_eigendecomposition(monkeypatch):
    """50 steps of iterative K-FAC on a transformer: 0 calls of torch.linalg's spectral routines; the eigen
    variant, counted the same way, calls eigh (a positive control of the counter)."""
    counts = {}
    for name in DECOMPOSITIONS:
        original = getattr(torch.linalg, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            counts[_name] = counts.get(_name, 0) + 1
            return _original(*args, **kwargs)
        monkeypatch.setattr(torch.linalg, name, counted)
    for inverse in ("cg", "eigen"):
        counts.clear()
        torch.manual_seed(0)
        model = TinyTransformer().double()
        opt = KFAC(model, lr=0.05, inverse=inverse, factor_every=1)
        gen = torch.Generator().manual_seed(1)
        for _ in range(50):
            x, y = torch.randn(8, 6, 5, generator=gen, dtype=torch.float64), torch.randint(0, 3, (8,), generator=gen)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        assert opt.last_stats["preconditioned"]
        if inverse == "cg":
            assert counts == {}, counts
            assert opt.last_stats["cg_iterations_mean"] >= 1
        else:
            assert counts.get("eigh", 0) > 0


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


@pytest.mark.parametrize("rho, short, expected", [
    (0.9, False, 0.5),  # a good fit of a step of the model's own length: lower
    (0.9, True, 1.0),  # a good fit of a step much shorter than the model's minimiser: says nothing, kept
    (0.1, True, 2.0),  # a poor fit raises whatever the step's length
    (float("nan"), False, 2.0),
])
def test_levenberg_marquardt_keeps_the_damping_after_a_short_step(rho, short, expected):
    from brownformer.optim._kfac_control import adapt_damping
    assert adapt_damping(1.0, rho, 0.5, short=short) == pytest.approx(expected)


def test_damping_holds_over_short_steps_and_adapts_over_full_ones(case_builder):
    """LM with a closure: at a tiny lr (steps far below the model's minimiser, rho ~ 1, which lowered the damping
    at every check before and drove it to its floor) the damping stays exactly; at an lr whose steps are of the
    model's length it adapts (here it rises: a full step of this small-damped model fits poorly, rho < 1/4)."""
    finals = {}
    for lr in (1e-4, 1.0):
        model, batch, loss_fn = case_builder("mlp")
        opt = KFAC(model, lr=lr, momentum=0.0, kl_clip=None, damping=1e-1, adapt_every=1)
        for step in range(10):
            x, y = batch(step)

            def closure():
                if torch.is_grad_enabled():
                    opt.zero_grad()
                loss = loss_fn(model, x, y)
                if torch.is_grad_enabled():
                    loss.backward()
                return loss
            opt.step(closure)
        finals[lr] = opt.param_groups[0]["damping"]
    assert finals[1e-4] == 1e-1
    assert finals[1.0] > 1e-1


def test_relative_damping_scales_with_each_layers_factors():
    """relative_damping: lambda_l = damping x (tr A / n_A)(tr G / n_G). Scaling the loss by s scales G by s^2 and
    V by s; with the damping scaled alike the direction is unchanged (absolute damping lacks that invariance)."""
    x, y = torch.randn(16, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64), torch.arange(16) % 2
    directions = {}
    for relative in (False, True):
        for scale in (1.0, 1e-4):
            torch.manual_seed(1)
            model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
            opt = KFAC(model, lr=1.0, momentum=0.0, kl_clip=None, damping=1e-2, relative_damping=relative,
                       fisher="empirical")
            (scale * F.cross_entropy(model(x), y)).backward()
            before = model[0].weight.detach().clone()
            opt.step()
            step = (model[0].weight - before).detach()
            directions[relative, scale] = step / step.norm()
    assert float((directions[True, 1e-4] - directions[True, 1.0]).norm()) < 1e-8
    assert float((directions[False, 1e-4] - directions[False, 1.0]).norm()) > 1e-3
