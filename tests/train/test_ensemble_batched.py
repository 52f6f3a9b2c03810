"""The batched ensemble forward: each member's logits and gradients are those of its own model alone."""
from __future__ import annotations

import pytest
import torch
from torch.func import stack_module_state

from brownformer.config import ModelConfig
from brownformer.ensemble_batched import batched_logits
from brownformer.models import build_model, loss_fn

MEMBERS = 3
# float64: the batched layers compute the same sums as the model alone, in another order, so they agree to
# rounding (about 1e-15 relative); a wrong broadcast, head split or member mix-up is off by O(1)
TOL = 1e-10
CASES = {
    "vit-pre": dict(arch="vit", ln="pre", patch_size=2),
    "vit-post-mean": dict(arch="vit", ln="post", patch_size=2, pool="mean"),
    "vit-none": dict(arch="vit", ln="none", patch_size=2),
    "lm-pre-causal": dict(arch="lm", ln="pre", seq_len=8),
}


def _members(case: dict) -> list[torch.nn.Module]:
    cfg = ModelConfig(name="m", dataset="d", **case, d_model=16, n_layers=2, n_heads=4, mlp_ratio=2)
    models = []
    for seed in range(MEMBERS):
        torch.manual_seed(seed)
        model = (build_model(cfg, n_classes=5, image_shape=(1, 4, 4)) if cfg.arch == "vit"
                 else build_model(cfg, vocab_size=11))
        models.append(model.double())
    return models


def _batches(model, generator) -> tuple[torch.Tensor, torch.Tensor]:
    if model.cfg.arch == "vit":  # (E, B, C, H, W) images and (E, B) labels
        return (torch.randn(MEMBERS, 6, 1, 4, 4, generator=generator, dtype=torch.float64),
                torch.randint(0, 5, (MEMBERS, 6), generator=generator))
    return (torch.randint(0, 11, (MEMBERS, 6, 8), generator=generator),  # (E, B, T) ids, next-character targets
            torch.randint(0, 11, (MEMBERS, 6, 8), generator=generator))


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_each_members_logits_and_gradients_are_its_model_alone(case):
    models = _members(case)
    params, _ = stack_module_state(models)  # name -> (E, *shape)
    params = {name: p.detach().requires_grad_() for name, p in params.items()}
    x, y = _batches(models[0], torch.Generator().manual_seed(0))
    logits = batched_logits(params, models[0], x)
    sum(loss_fn(logits[e], y[e]) for e in range(MEMBERS)).backward()  # member e's gradient is that of loss e
    for e, model in enumerate(models):
        alone = model(x[e])
        loss_fn(alone, y[e]).backward()
        torch.testing.assert_close(logits[e], alone, rtol=TOL, atol=TOL, msg=f"member {e} logits")
        for name, p in model.named_parameters():
            torch.testing.assert_close(params[name].grad[e], p.grad, rtol=TOL, atol=TOL, msg=f"member {e} {name}")


def test_members_do_not_mix():
    """Changing one member's weights changes its logits only: no member reads another's rows."""
    models = _members(CASES["vit-pre"])
    params, _ = stack_module_state(models)
    x, _ = _batches(models[0], torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = batched_logits(params, models[0], x)
        params["blocks.0.mlp.fc1.weight"][1].normal_(generator=torch.Generator().manual_seed(2))
        after = batched_logits(params, models[0], x)
    assert not torch.allclose(before[1], after[1])
    torch.testing.assert_close(after[[0, 2]], before[[0, 2]], rtol=0, atol=0)


def test_dropout_is_refused():
    cfg = ModelConfig(name="m", dataset="d", arch="vit", ln="pre", patch_size=2, d_model=16, n_layers=1, n_heads=4,
                      mlp_ratio=2, dropout=0.1)
    model = build_model(cfg, n_classes=5, image_shape=(1, 4, 4))
    params, _ = stack_module_state([model])
    with pytest.raises(ValueError, match="dropout"):
        batched_logits(params, model, torch.zeros(1, 2, 1, 4, 4))


def test_taps_hold_each_members_layer_inputs_and_output_gradients():
    """What per-member K-FAC factors need: each linear layer's input and output gradient, as hooks on the
    member's own nn.Linear modules see them."""
    models = _members(CASES["lm-pre-causal"])
    params, _ = stack_module_state(models)
    params = {name: p.detach().requires_grad_() for name, p in params.items()}
    x, y = _batches(models[0], torch.Generator().manual_seed(3))
    taps = {}
    logits = batched_logits(params, models[0], x, taps=taps)
    sum(loss_fn(logits[e], y[e]) for e in range(MEMBERS)).backward()
    linears = {name: m for name, m in models[0].named_modules() if isinstance(m, torch.nn.Linear)}
    assert set(taps) == set(linears)
    for e, model in enumerate(models):
        seen = {}
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_hook(lambda m, i, o, name=name: seen.__setitem__((name, "in"), i[0]))
                module.register_full_backward_hook(
                    lambda m, gi, go, name=name: seen.__setitem__((name, "grad_out"), go[0]))
        loss_fn(model(x[e]), y[e]).backward()
        for name, (inputs, outputs) in taps.items():
            n_in = inputs.size(-1)
            torch.testing.assert_close(inputs[e], seen[name, "in"].reshape(-1, n_in), rtol=TOL, atol=TOL)
            torch.testing.assert_close(outputs.grad[e], seen[name, "grad_out"].reshape(-1, outputs.size(-1)),
                                       rtol=TOL, atol=TOL, msg=f"member {e} {name}")
