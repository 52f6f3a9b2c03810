"""Every attention layer preconditioned: nn.MultiheadAttention's packed Q, K, V projection (and so
nn.TransformerEncoder's) equals K-FAC on separate Q, K, V layers; weights left to the rest update are named."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from brownformer.optim.kfac import KFAC

from tests.optim.conftest import LinearAttention

EQUAL_RTOL = 1e-9  # float64: the same maths in another order of operations
D_IN, D_MODEL, HEADS, CLASSES = 5, 8, 2, 3


class _Attend(nn.Module):
    """embed -> self-attention -> mean-pool -> head, with either attention module."""

    def __init__(self, attention: nn.Module, packed: bool):
        super().__init__()
        self.embed, self.attn, self.head, self.packed = nn.Linear(D_IN, D_MODEL), attention, nn.Linear(D_MODEL, CLASSES), packed

    def forward(self, x):
        h = self.embed(x)
        h = self.attn(h, h, h, need_weights=False)[0] if self.packed else self.attn(h)
        return self.head(h.mean(dim=1))


def _twins() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    packed = _Attend(nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True), packed=True).double()
    separate = _Attend(LinearAttention(D_MODEL, HEADS), packed=False).double()
    with torch.no_grad():
        for name in ("embed", "head"):
            getattr(separate, name).load_state_dict(getattr(packed, name).state_dict())
        w, b = packed.attn.in_proj_weight.chunk(3), packed.attn.in_proj_bias.chunk(3)
        for j, proj in enumerate((separate.attn.q, separate.attn.k, separate.attn.v)):
            proj.weight.copy_(w[j])
            proj.bias.copy_(b[j])
        separate.attn.o.load_state_dict(packed.attn.out_proj.state_dict())
    return packed, separate


def _batch(step):
    gen = torch.Generator().manual_seed(step)
    return torch.randn(8, 6, D_IN, generator=gen, dtype=torch.float64), torch.randint(0, CLASSES, (8,), generator=gen)


@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("inverse", ["eigen", "cg"])
def test_packed_projection_equals_separate_qkv_layers(inverse, per_head):
    packed, separate = _twins()
    x, _ = _batch(0)
    torch.testing.assert_close(packed(x), separate(x))
    common = dict(lr=0.1, inverse=inverse, inverse_every=1, momentum=0.9, per_head=per_head, n_heads=HEADS,
                  cg_tol=1e-12, cg_max_iter=500)
    opts = [KFAC(packed, **common), KFAC(separate, **common)]
    assert "attn.in_proj" in [layer.name for layer in opts[0].layers]
    for step in range(6):
        x, y = _batch(step)
        for model, opt in zip((packed, separate), opts):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    assert all(opt.last_stats["preconditioned"] for opt in opts)
    w = torch.cat([separate.attn.q.weight, separate.attn.k.weight, separate.attn.v.weight])
    for actual, expected in [(packed.attn.in_proj_weight, w), (packed.attn.out_proj.weight, separate.attn.o.weight),
                             (packed.embed.weight, separate.embed.weight), (packed.head.weight, separate.head.weight)]:
        err = float((actual - expected).detach().norm() / expected.detach().norm())
        assert err < EQUAL_RTOL, err
    moved = float((packed.attn.in_proj_weight - _twins()[0].attn.in_proj_weight).detach().norm())
    assert moved > 1e-3  # the comparison is not between two unmoved models


def test_transformer_encoder_gets_its_attention_preconditioned():
    """nn.TransformerEncoder: in_proj, out_proj and the MLP layers all get factors; only the positions (no
    nn.Linear weight) are left to AdamW, and the warning says so."""
    torch.manual_seed(0)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.pos = nn.Linear(D_IN, D_MODEL), nn.Parameter(0.1 * torch.randn(1, 6, D_MODEL))
            layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, 16, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(D_MODEL, CLASSES)

        def forward(self, x):
            return self.head(self.encoder(self.embed(x) + self.pos).mean(dim=1))

    model = Encoder().double()
    with pytest.warns(UserWarning, match=r"leaves these 1 weight\(s\).*pos \(a parameter of Encoder"):
        opt = KFAC(model, lr=0.05, inverse="cg")
    names = [layer.name for layer in opt.layers]
    for i in range(2):
        assert {f"encoder.layers.{i}.self_attn.in_proj", f"encoder.layers.{i}.self_attn.out_proj",
                f"encoder.layers.{i}.linear1", f"encoder.layers.{i}.linear2"} <= set(names)
    x, y = _batch(0)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert opt.last_stats["preconditioned"] and losses[-1] < 0.5 * losses[0]
    for layer in opt.layers:
        g = opt.state[layer.module.weight]["factor_g"]
        assert float(g.diagonal().sum()) > 0, layer.name  # every layer, attention included, saw its statistics
    in_proj = opt.state[model.encoder.layers[0].self_attn.in_proj_weight]["factor_g"]
    assert float(in_proj[:D_MODEL, D_MODEL:].abs().max()) == 0  # Q, K, V blocks kept apart
    opt.remove_hooks()
    assert "forward" not in model.encoder.layers[0].self_attn.__dict__  # the original forward is back
    model.eval()
    with torch.no_grad():
        model(x)


def test_cross_attention_through_a_packed_projection_raises():
    mha = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True).double()

    class Cross(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha, self.head = mha, nn.Linear(D_MODEL, CLASSES).double()

        def forward(self, x):
            return self.head(self.mha(x, x.flip(1), x.flip(1), need_weights=False)[0].mean(dim=1))

    model = Cross()
    opt = KFAC(model, lr=0.05)  # kept: a collected optimizer removes its hooks
    with pytest.raises(ValueError, match="self-attention only"):
        model(torch.randn(4, 6, D_MODEL, dtype=torch.float64))
    opt.remove_hooks()


def test_no_warning_when_every_weight_is_preconditioned():
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2))  # LayerNorm: 1-D, not listed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        KFAC(model, lr=0.05)
    with pytest.warns(UserWarning, match=r"stem\.0\.weight \(an nn.Linear outside scope 'mlp'\)"):
        KFAC(_MLPBehind(), lr=0.05, scope="mlp")


class _MLPBehind(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(3, 4))
        self.mlp = nn.Linear(4, 2)

    def forward(self, x):
        return self.mlp(self.stem(x))
