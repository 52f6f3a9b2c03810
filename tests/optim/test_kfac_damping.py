"""Levenberg-Marquardt's reduction ratio against a hand computation: the whole update, or only the preconditioned
layers' part (``lm_scope``), on a float64 model with a parameter K-FAC leaves to AdamW."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

from brownformer.optim.kfac import KFAC

RHO_RTOL = 1e-9  # float64 round-off of a few dozen products


class ScaledMLP(nn.Module):
    """Two nn.Linear layers (preconditioned) and a per-class logit scale (not an nn.Linear: the rest update)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(3, 4), nn.Linear(4, 2)
        self.scale = nn.Parameter(torch.ones(2))

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x))) * self.scale


def _one_adapted_step(lm_scope: str):
    """One K-FAC step with a closure (an adaptation step) and what the hand computation needs."""
    torch.manual_seed(0)
    model = ScaledMLP().double()
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 3, generator=gen, dtype=torch.float64), torch.arange(16) % 2
    opt = KFAC(model, lr=0.5, momentum=0.0, kl_clip=None, damping=1e-1, adapt_every=1, factor_decay=0.0,
               fisher="empirical", rest_lr=0.1, lm_scope=lm_scope)

    def loss_at(params=None):
        out = model(x) if params is None else functional_call(model, params, (x,))
        return F.cross_entropy(out, y)

    def closure():
        if torch.is_grad_enabled():
            opt.zero_grad()
        loss = loss_at()
        if torch.is_grad_enabled():
            loss.backward()
        return loss

    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    opt.step(closure)
    after = {k: v.detach().clone() for k, v in model.named_parameters()}
    grads = {k: v.grad.detach().clone() for k, v in model.named_parameters()}
    return model, opt, loss_at, before, after, grads


def _kronecker_curvature(opt, model, before, after) -> float:
    """``sum_l vec(D_l)^T (A_l kron G_l) vec(D_l)`` with ``D_l = [dW, db]``, from ``torch.kron`` (not the optimizer's
    batched products)."""
    total = 0.0
    for name in ("fc1", "fc2"):
        layer = getattr(model, name)
        d = torch.cat([after[f"{name}.weight"] - before[f"{name}.weight"],
                       (after[f"{name}.bias"] - before[f"{name}.bias"])[:, None]], dim=1)  # (out, in+1)
        a, g = opt.state[layer.weight]["factor_a"], opt.state[layer.weight]["factor_g"]
        vec = d.T.reshape(-1)  # column-major vec(D): (in+1) * out
        total += float(vec @ torch.kron(a, g) @ vec)
    return total


@pytest.mark.parametrize("lm_scope", ["whole", "preconditioned"])
def test_reduction_ratio_is_the_hand_computed_one(lm_scope):
    """rho = (h(theta') - h(theta)) / (g^T delta + 1/2 sum_l vec(D_l)^T (A_l kron G_l) vec(D_l)): for "whole" over
    every parameter (the logit scale linearly) at the step taken; for "preconditioned" over the two nn.Linear layers
    only, with the loss read at their new values and the logit scale as before the step."""
    model, opt, loss_at, before, after, grads = _one_adapted_step(lm_scope)
    mine = [k for k in before if not k.startswith("scale")]
    moved = list(before) if lm_scope == "whole" else mine
    linear = sum(float((grads[k] * (after[k] - before[k])).sum()) for k in moved)
    predicted = linear + 0.5 * _kronecker_curvature(opt, model, before, after)
    point = after if lm_scope == "whole" else {**before, **{k: after[k] for k in mine}}
    with torch.no_grad():
        actual = float(loss_at(point) - loss_at(before))
    assert opt.last_stats["rho"] == pytest.approx(actual / predicted, rel=RHO_RTOL)
    # the closure's evaluation put every parameter back where the step left it
    assert all(torch.equal(p, after[k]) for k, p in model.named_parameters())


def test_the_two_scopes_differ_when_the_rest_moves():
    """Positive control: the rest update moved the logit scale, so the two ratios are not the same number."""
    rho = {scope: _one_adapted_step(scope)[1].last_stats["rho"] for scope in ("whole", "preconditioned")}
    assert rho["whole"] != pytest.approx(rho["preconditioned"], rel=1e-3)


def test_a_wrong_lm_scope_raises():
    with pytest.raises(ValueError, match="lm_scope"):
        KFAC(ScaledMLP(), lm_scope="rest")


class QuietBranch(nn.Module):
    """A layer whose output enters at 1e-6 (a branch beside the main first layer): its ``G``, and so its mean
    Kronecker eigenvalue, is ~1e-12 of the main layer's."""

    def __init__(self):
        super().__init__()
        self.fc0, self.fc2 = nn.Linear(3, 4), nn.Linear(4, 2)
        self.fc1 = nn.Linear(3, 4, bias=False)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc0(x) + 1e-6 * self.fc1(x)))


@pytest.mark.parametrize("floor", [0.0, 1e-4])
def test_relative_damping_is_floored_at_a_fraction_of_the_layers_mean_scale(floor):
    """lambda_l = damping x max(s_l, floor x mean_j s_j), s_l = (tr A / n_A)(tr G / n_G): one exact (eigen) step at lr
    1 equals the hand solve (A kron G + lambda_l I) vec(X) = vec(V) with that lambda, layer by layer; at floor 0 the
    quiet layer's lambda is its own tiny scale, at 1e-4 the floor's (a positive control: the two steps differ)."""
    torch.manual_seed(0)
    model = QuietBranch().double()
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 3, generator=gen, dtype=torch.float64), torch.arange(32) % 2
    damping = 0.5
    opt = KFAC(model, lr=1.0, momentum=0.0, kl_clip=None, damping=damping, factor_decay=0.0, fisher="empirical",
               relative_damping=True, relative_damping_floor=floor, adapt_every=0)
    F.cross_entropy(model(x), y).backward()
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    grads = {k: v.grad.detach().clone() for k, v in model.named_parameters()}
    opt.step()
    layers = {"fc0": True, "fc1": False, "fc2": True}  # has a bias
    factors = {n: (opt.state[getattr(model, n).weight]["factor_a"], opt.state[getattr(model, n).weight]["factor_g"])
               for n in layers}
    scale = {n: float(torch.diagonal(a).mean() * torch.diagonal(g).mean()) for n, (a, g) in factors.items()}
    assert scale["fc1"] < 1e-9 * scale["fc0"]  # the quiet layer is quiet
    mean = sum(scale.values()) / len(scale)
    for name, bias in layers.items():
        a, g = factors[name]
        lam = damping * max(scale[name], floor * mean)
        v = grads[f"{name}.weight"]
        step = before[f"{name}.weight"] - getattr(model, name).weight.detach()
        if bias:
            v = torch.cat([v, grads[f"{name}.bias"][:, None]], dim=1)
            step = torch.cat([step, (before[f"{name}.bias"] - getattr(model, name).bias.detach())[:, None]], dim=1)
        kron = torch.kron(a, g) + lam * torch.eye(a.shape[0] * g.shape[0], dtype=torch.float64)
        expected = torch.linalg.solve(kron, v.T.reshape(-1)).reshape(v.shape[1], v.shape[0]).T
        assert torch.allclose(step, expected, rtol=1e-6, atol=1e-12 * float(expected.abs().max())), name
