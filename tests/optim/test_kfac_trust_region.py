"""``layer_step_bound``, K-FAC's per-layer trust region, against a hand computation: on a float64 MLP each layer's
update is the exact damped Kronecker solve (``torch.kron``, not the optimizer's solver) times the lr, shortened to
``bound x ||[W_l, b_l]||`` where it is longer and left alone where it is not."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from brownformer.optim._kfac_step import trust_region_scales
from brownformer.optim.kfac import KFAC

LR, DAMPING = 0.5, 1e-2
LAYERS = ("fc1", "fc2")


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(3, 5))
    model.add_module("act", nn.Tanh())
    model.add_module("fc2", nn.Linear(5, 2))
    return model.double()


def _step(inverse: str, bound: float | None):
    """One K-FAC step (factors of this batch alone, no momentum, no KL bound, no damping adaptation); returns the
    model's parameters before and after, its gradients and the optimizer."""
    model = _model()
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 3, generator=gen, dtype=torch.float64), torch.arange(32) % 2
    opt = KFAC(model, lr=LR, damping=DAMPING, inverse=inverse, momentum=0.0, kl_clip=None, adapt_every=0,
               factor_decay=0.0, factor_every=1, inverse_every=1, cg_max_iter=50, cg_tol=1e-13, fisher="empirical",
               layer_step_bound=bound)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    grads = {k: v.grad.detach().clone() for k, v in model.named_parameters()}
    opt.step()
    after = {k: v.detach().clone() for k, v in model.named_parameters()}
    return model, opt, before, after, grads


def _joined(values: dict, name: str) -> torch.Tensor:
    return torch.cat([values[f"{name}.weight"], values[f"{name}.bias"][:, None]], dim=1)  # [W, b]: (out, in+1)


def _exact_steps(model, opt, grads) -> dict:
    """``lr X_l`` with ``vec(X) = (A kron G + lambda I)^-1 vec(V)`` (column-major vec), from the factors of the step."""
    steps = {}
    for name in LAYERS:
        layer = getattr(model, name)
        a, g = opt.state[layer.weight]["factor_a"], opt.state[layer.weight]["factor_g"]
        v = _joined(grads, name)
        system = torch.kron(a, g) + DAMPING * torch.eye(a.shape[0] * g.shape[0], dtype=a.dtype)
        x = torch.linalg.solve(system, v.T.reshape(-1)).reshape(v.shape[1], v.shape[0]).T
        steps[name] = LR * x
    return steps


@pytest.mark.parametrize("inverse", ["eigen", "cg"])
def test_each_layer_step_is_the_exact_step_shortened_to_the_bound(inverse):
    model, opt, before, _, grads = _step(inverse, None)
    free = _exact_steps(model, opt, grads)
    ratios = {n: float(free[n].norm() / _joined(before, n).norm()) for n in LAYERS}
    low, high = sorted(ratios.values())
    assert high > 1.2 * low, f"the test needs layers with different relative steps, got {ratios}"
    bound = (low * high) ** 0.5  # binds on one layer only

    model, opt, before, after, grads = _step(inverse, bound)
    expected = _exact_steps(model, opt, grads)
    factors = []
    for name in LAYERS:
        limit = bound * _joined(before, name).norm()
        factor = min(1.0, float(limit / expected[name].norm()))
        factors.append(factor)
        taken = _joined(before, name) - _joined(after, name)
        torch.testing.assert_close(taken, expected[name] * factor, rtol=1e-7, atol=1e-12)
        if factor < 1:
            assert float(taken.norm()) == pytest.approx(float(limit), rel=1e-7)
    assert sorted(factors)[1] == 1.0 and sorted(factors)[0] < 1.0
    assert opt.last_stats["layer_step_factor_min"] == pytest.approx(min(factors), rel=1e-7)


def test_without_the_bound_the_step_is_unchanged_and_no_factor_is_reported():
    model, opt, before, after, grads = _step("eigen", None)
    expected = _exact_steps(model, opt, grads)
    for name in LAYERS:
        torch.testing.assert_close(_joined(before, name) - _joined(after, name), expected[name], rtol=1e-7, atol=1e-12)
    assert "layer_step_factor_min" not in opt.last_stats


def test_the_factors_shorten_long_steps_only_and_never_a_zero_layer():
    weights = torch.stack([torch.ones(2, 3), torch.ones(2, 3), torch.zeros(2, 3)]).double()  # norms sqrt(6), 0
    x = torch.stack([torch.full((2, 3), 10.0), torch.full((2, 3), 0.01), torch.ones(2, 3)]).double()
    factors = trust_region_scales(weights, x, torch.tensor(0.5, dtype=torch.float64), 0.1)
    assert factors.shape == (3, 1, 1)
    # layer 0: step 0.5 x 10 sqrt(6), limit 0.1 sqrt(6): factor 0.1 / 5; layer 1: step 0.005 sqrt(6) < limit
    torch.testing.assert_close(factors.flatten(), torch.tensor([0.02, 1.0, 1.0], dtype=torch.float64))


def test_a_bound_that_is_not_positive_is_a_clear_error():
    with pytest.raises(ValueError, match="layer_step_bound"):
        KFAC(_model(), layer_step_bound=0.0)
