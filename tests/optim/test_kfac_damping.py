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
