"""Factors collected by the optimizer's hooks equal expectations computed independently."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from brownformer.optim.kfac import KFAC

RTOL = 1e-10  # same float64 arithmetic up to summation order
ATOL = 1e-14
MC_RTOL = 0.1  # Monte-Carlo Fisher from one sample per row of 4000 rows


@pytest.mark.parametrize("case", ["mlp", "mlp-tokens", "transformer"])
@pytest.mark.parametrize("weight_sharing", ["expand", "reduce"])
def test_hook_factors_equal_independent_expectations(case_builder, reference_factors, case, weight_sharing):
    model, batch, loss_fn = case_builder(case)
    x, y = batch(0)
    refs = reference_factors(model, x, y, weight_sharing=weight_sharing)
    model.zero_grad()
    # the loss averages mean-pooled logits over the batch: R = B, whatever the model's output rows
    opt = KFAC(model, lr=1e-3, factor_decay=0.0, weight_sharing=weight_sharing, loss_reduction="batch",
               fisher="empirical")
    loss_fn(model, x, y).backward()
    opt.step()
    for layer in opt.layers:
        state = opt.state[layer.module.weight]
        for key, expected in zip(("factor_a", "factor_g"), refs[layer.name]):
            # reduce: sum_t dL/dk_t = 0 (softmax is shift-invariant over keys), so G of the keys is
            # round-off only; the absolute floor covers it
            err = (state[key] - expected).norm() / expected.norm().clamp_min(ATOL / RTOL)
            assert err < RTOL, f"{layer.name} {key}: relative error {err:.3g}"


def test_per_head_gives_block_diagonal_g_for_qkv_only(tiny_transformer):
    torch.manual_seed(0)
    model = tiny_transformer().double()
    opt = KFAC(model, lr=1e-3, factor_decay=0.0, per_head=True, fisher="empirical")
    x = torch.randn(4, 6, 5, dtype=torch.float64)
    F.cross_entropy(model(x), torch.tensor([0, 1, 2, 0])).backward()
    opt.step()
    head = 8 // 2
    for layer in opt.layers:
        g = opt.state[layer.module.weight]["factor_g"]
        off_diagonal = g[:head, head:].abs().max() if g.shape[0] == 8 else None
        if layer.name.endswith(("attn.q", "attn.k", "attn.v")):
            assert layer.head_size == head and off_diagonal == 0
        elif layer.name.endswith("attn.o"):
            assert layer.head_size is None and off_diagonal > 0


def test_mc_fisher_matches_exact_fisher_of_softmax_regression():
    """One linear layer: E_y[B^2 g g^T] per row is diag(p) - p p^T; G averages it over rows."""
    torch.manual_seed(0)
    B, d_in, n_classes = 4000, 3, 4
    model = nn.Linear(d_in, n_classes).double()
    x = torch.randn(B, d_in, dtype=torch.float64)
    y = torch.randint(0, n_classes, (B,))
    with torch.no_grad():
        p = model(x).softmax(dim=-1)  # (B, classes)
    expected = (torch.diag_embed(p) - p[:, :, None] * p[:, None, :]).mean(dim=0)
    opt = KFAC(model, lr=1e-3, factor_decay=0.0, fisher="sampled", seed=3)
    F.cross_entropy(model(x), y).backward()
    opt.step()
    factor_g = opt.state[model.weight]["factor_g"]
    err = (factor_g - expected).norm() / expected.norm()
    assert err < MC_RTOL, f"relative error {err:.3g}\n{factor_g}\n{expected}"


def test_factors_stay_float32_under_bf16_autocast():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = KFAC(model, lr=1e-3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(torch.randn(16, 4))
    F.cross_entropy(logits.float(), torch.randint(0, 3, (16,))).backward()
    opt.step()
    for layer in opt.layers:
        assert opt.state[layer.module.weight]["factor_a"].dtype == torch.float32
        assert opt.state[layer.module.weight]["factor_g"].dtype == torch.float32


@pytest.mark.parametrize("case", ["mlp-tokens", "transformer"])
def test_accumulated_passes_average_their_factors(case_builder, reference_factors, case):
    """Two backward passes before one step: the batch factor is the mean of the passes' factors."""
    model, batch, loss_fn = case_builder(case)
    refs = [reference_factors(model, *batch(step), weight_sharing="expand") for step in (0, 1)]
    model.zero_grad()
    opt = KFAC(model, lr=1e-3, factor_decay=0.0, loss_reduction="batch", fisher="empirical")
    for step in (0, 1):
        loss_fn(model, *batch(step)).backward()
    opt.step()
    for layer in opt.layers:
        state = opt.state[layer.module.weight]
        for i, key in enumerate(("factor_a", "factor_g")):
            expected = (refs[0][layer.name][i] + refs[1][layer.name][i]) / 2
            err = (state[key] - expected).norm() / expected.norm().clamp_min(ATOL / RTOL)
            assert err < RTOL, f"{layer.name} {key}: relative error {err:.3g}"
