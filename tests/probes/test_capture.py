"""The capture functions against direct computations on tiny models."""
import math

import pytest
import torch

from brownformer.probes.capture import (MATRICES, attention_weights, capture_activations, gradient_noise,
                                        gradient_noise_reference, projection_matrix)
from brownformer.train import model_for_data



def _model(config_of, name, data, dtype=torch.float32):
    cfg = config_of()
    torch.manual_seed(0)
    model = model_for_data(cfg, name, data).to(dtype).eval()
    return cfg, model


def _inputs(data, n=3):
    if data.kind == "text":
        return torch.as_tensor(data.splits["val"]["x"][: n * 6]).view(n, 6)
    return torch.as_tensor(data.splits["val"]["x"][:n])


@pytest.mark.parametrize("name", ["vit-pre", "vit-post", "vit-none", "lm-pre"])
def test_capture_shapes_and_sphere(config_of, name, image_data, text_data):
    data = text_data if name.startswith("lm") else image_data
    cfg, model = _model(config_of, name, data)
    x = _inputs(data)
    acts = capture_activations(model, x)
    L, d, H = 2, 8, 2
    B, n = x.shape[0], (6 if data.kind == "text" else 5)
    assert acts["resid"].shape == (L + 1, B, n, d)
    assert acts["ln_hat"].shape == acts["ln_out"].shape == (L, B, n, d)
    assert acts["attn"].shape == (L, H, B, n, n)
    norms = acts["ln_hat"].norm(dim=-1)
    # LayerNorm's eps pulls the norm slightly below sqrt(d); ln "none" is scaled exactly.
    tol = 1e-5 if name == "vit-none" else 0.05
    assert torch.allclose(norms, torch.full_like(norms, math.sqrt(d)), atol=tol * math.sqrt(d))
    torch.testing.assert_close(acts["attn"].sum(-1), torch.ones(L, H, B, n))
    with torch.no_grad():  # the capture runs the reference attention path, SDPA may round differently
        torch.testing.assert_close(acts["resid"][-1], model.blocks[-1](model.blocks[0](model.embed(x))))
    if name == "vit-pre":
        torch.testing.assert_close(acts["ln_out"][1], model.blocks[1].ln1(acts["resid"][1]))
    assert all(not b.attn.store_probs and b.attn.probs is None for b in model.blocks)


def test_lm_attention_is_causal(config_of, text_data):
    _, model = _model(config_of, "lm-pre", text_data)
    attn = capture_activations(model, _inputs(text_data))["attn"]
    upper = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert torch.all(attn[..., upper] == 0)


def _noise_batches(data, M=3, bs=4, large=8):
    g = torch.Generator().manual_seed(0)
    def batch(n):
        idx = torch.randint(0, len(data.splits["train"]["y"]), (n,), generator=g)
        return (torch.as_tensor(data.splits["train"]["x"][idx.numpy()]).double(),
                torch.as_tensor(data.splits["train"]["y"][idx.numpy()]))
    return [batch(bs) for _ in range(M)], batch(large)


@pytest.mark.parametrize("projected", [False, True], ids=["full", "projected"])
def test_fused_gradient_noise_equals_batchwise(config_of, image_data, projected):
    _, model = _model(config_of, "vit-pre", image_data, torch.float64)
    proj = {(l, m): (torch.from_numpy(projection_matrix(0, l, m, 8, 3)).double() if projected else None)
            for l in range(2) for m in MATRICES}
    minibatches, large = _noise_batches(image_data)
    fused = gradient_noise(model, minibatches, large, proj)
    reference = gradient_noise_reference(model, minibatches, large, proj)
    assert fused.shape == (2, 4, 3, 8 * (3 if projected else 8))
    torch.testing.assert_close(fused, reference, rtol=1e-10, atol=1e-12)
    assert fused.abs().max() > 0
    assert all(p.grad is None for p in model.parameters())


def test_attention_weights_are_the_matrices(config_of, image_data):
    _, model = _model(config_of, "vit-pre", image_data)
    w = attention_weights(model, {(l, m): None for l in range(2) for m in MATRICES})
    assert w.shape == (2, 4, 8, 8)
    assert torch.equal(w[1, MATRICES.index("v")], model.blocks[1].attn.v.weight)


def test_projection_is_seeded():
    a, b = projection_matrix(3, 1, "k", 16, 4), projection_matrix(3, 1, "k", 16, 4)
    assert (a == b).all() and not (a == projection_matrix(3, 1, "q", 16, 4)).all()
