"""bf16 autocast on CPU: the ViT trains with finite losses close to float32, and K-FAC keeps its
factors and solves in float32 under autocast (docs/methods/kfac.md: factors in float32 even under bf16).

The same code path runs on CUDA (tests/test_gpu.py); here it is checked where CI can run it.
"""
from __future__ import annotations


import pytest
import torch

from brownformer.config import ModelConfig
from brownformer.models import build_model, loss_fn
from brownformer.optim import build_optimizer

# bf16 keeps 8 bits of mantissa (relative rounding 2^-8 ~ 4e-3 per operation); through 2 blocks
# the loss moves by well under 2% and the gradient direction barely at all.
LOSS_RTOL = 2e-2
GRAD_COSINE_MIN = 0.98
SEED = 0

def _tiny_vit(ln: str = "pre") -> torch.nn.Module:
    torch.manual_seed(SEED)
    cfg = ModelConfig(name=f"vit-{ln}", arch="vit", dataset="cifar10", ln=ln, d_model=32, n_layers=2,
                      n_heads=4, mlp_ratio=2, patch_size=8)
    return build_model(cfg, n_classes=10, image_shape=(3, 32, 32))


def _batch(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(SEED)
    return torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


def _loss_and_grads(model, x, y, *, bf16: bool) -> tuple[float, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(x)
        loss = loss_fn(logits, y)
    if bf16:
        assert logits.dtype == torch.bfloat16, "autocast did not reach the linear layers"
    assert loss.dtype == torch.float32  # loss_fn upcasts the logits
    loss.backward()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
    return loss.item(), grads


@pytest.mark.parametrize("ln", ["pre", "post"])
def test_bf16_autocast_forward_backward_is_close_to_fp32(ln):
    model = _tiny_vit(ln)
    x, y = _batch()
    loss32, grad32 = _loss_and_grads(model, x, y, bf16=False)
    loss16, grad16 = _loss_and_grads(model, x, y, bf16=True)
    assert torch.isfinite(torch.tensor(loss16)) and torch.isfinite(grad16).all()
    assert loss16 == pytest.approx(loss32, rel=LOSS_RTOL)
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())  # master weights stay float32
    cosine = torch.nn.functional.cosine_similarity(grad32, grad16, dim=0).item()
    assert cosine > GRAD_COSINE_MIN, f"gradient direction changed under bf16: cosine {cosine:.4f}"


def test_bf16_training_steps_decrease_the_loss():
    model = _tiny_vit()
    opt = build_optimizer(model, "adamw", 1e-2, {})
    x, y = _batch()
    losses = []
    for _ in range(8):  # one fixed batch: the loss must fall within a few steps
        loss, _ = _loss_and_grads(model, x, y, bf16=True)
        opt.step()
        losses.append(loss)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("kind", ["kfac-eigen", "kfac-iterative"])
def test_kfac_factors_and_solves_stay_float32_under_autocast(kind):
    model = _tiny_vit()
    opt = build_optimizer(model, kind, 0.05, {"damping": 3e-3, "inverse_every": 1})
    x, y = _batch()
    for _ in range(3):
        loss, _ = _loss_and_grads(model, x, y, bf16=True)
        opt.step()
    assert torch.isfinite(torch.tensor(loss))
    assert all(torch.isfinite(p).all() and p.dtype == torch.float32 for p in model.parameters())
    seen = 0
    for layer in opt.layers:
        state = opt.state[layer.module.weight]
        for key in ("factor_a", "factor_g"):
            assert state[key].dtype == torch.float32, (layer.name, key, state[key].dtype)
            seen += 1
        for key, value in state.items():
            if torch.is_tensor(value) and value.is_floating_point():
                assert value.dtype == torch.float32, (layer.name, key, value.dtype)
    assert seen == 2 * len(opt.layers) > 0
