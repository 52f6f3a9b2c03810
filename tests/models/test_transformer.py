"""Model shapes, LayerNorm placement and the reference-vs-SDPA attention agreement."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from brownformer.config import ModelConfig
from brownformer.models import Attention, build_model

ATOL = 1e-5


def _cfg(arch, ln, **kw):
    return ModelConfig(name="m", arch=arch, dataset="d", ln=ln, d_model=16, n_layers=2, n_heads=4, **kw)


@pytest.mark.parametrize("ln", ["pre", "post", "none"])
def test_vit_shapes_and_layers(ln):
    torch.manual_seed(0)
    model = build_model(_cfg("vit", ln, patch_size=2), n_classes=10, image_shape=(1, 8, 8))
    assert model(torch.randn(5, 1, 8, 8)).shape == (5, 10)
    names = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    for part in ("attn.q", "attn.k", "attn.v", "attn.o", "mlp.fc1", "mlp.fc2"):
        assert f"blocks.0.{part}" in names
    n_ln = sum(isinstance(m, nn.LayerNorm) for m in model.modules())
    assert n_ln == {"pre": 2 * 2 + 1, "post": 2 * 2, "none": 0}[ln]


@pytest.mark.parametrize("ln", ["pre", "post"])
def test_lm_is_causal(ln):
    torch.manual_seed(0)
    model = build_model(_cfg("lm", ln, seq_len=12), vocab_size=7).eval()
    idx = torch.randint(0, 7, (2, 12))
    out = model(idx)
    assert out.shape == (2, 12, 7)
    changed = idx.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 7
    # Changing future tokens must not change earlier predictions.
    torch.testing.assert_close(model(changed)[:, :8], out[:, :8], atol=ATOL, rtol=0)


def test_post_ln_output_is_normalised():
    torch.manual_seed(0)
    model = build_model(_cfg("vit", "post"), n_classes=3, image_shape=(1, 8, 8))
    x = model.embed(torch.randn(4, 1, 8, 8))
    y = model.blocks[0](x)  # ends in LN with gamma=1, beta=0 at init
    torch.testing.assert_close(y.mean(-1), torch.zeros(y.shape[:-1]), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(y.shape[:-1]), atol=1e-3, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_reference_attention_matches_sdpa(causal):
    torch.manual_seed(0)
    attn = Attention(16, 4, causal=causal).eval()
    x = torch.randn(3, 9, 16)
    fast = attn(x)
    attn.store_probs = True
    ref = attn(x)
    torch.testing.assert_close(ref, fast, atol=ATOL, rtol=1e-5)
    probs = attn.probs
    assert probs.shape == (3, 4, 9, 9)
    torch.testing.assert_close(probs.sum(-1), torch.ones(3, 4, 9), atol=1e-6, rtol=0)
    if causal:
        assert torch.all(probs.triu(1) == 0)


def test_bad_patch_size():
    with pytest.raises(ValueError, match="patch_size"):
        build_model(_cfg("vit", "pre", patch_size=3), n_classes=10, image_shape=(1, 8, 8))


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vit_readout_is_the_configured_token(pool):
    torch.manual_seed(0)
    model = build_model(_cfg("vit", "post", patch_size=2, pool=pool), n_classes=10, image_shape=(1, 8, 8)).eval()
    images = torch.randn(3, 1, 8, 8)
    tokens = model.run_blocks(model.embed(images))  # (B, n_patches + 1, d)
    feature = tokens[:, 0] if pool == "cls" else tokens[:, 1:].mean(dim=1)
    torch.testing.assert_close(model(images), model.head(feature), atol=ATOL, rtol=0)
