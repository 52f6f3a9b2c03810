"""Tiny models and batches shared by the K-FAC tests (float64 unless a test says otherwise)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


class LinearAttention(nn.Module):
    """Softmax self-attention made only of nn.Linear layers (the test's own transformer)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        heads = lambda t: t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, H, T, hs)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        probs = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)  # (B, H, T, T)
        return self.o((probs @ v).transpose(1, 2).reshape(B, T, C))


class TinyBlock(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = LinearAttention(d_model, n_heads)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    """Token classifier: embed -> blocks -> mean-pool -> head; inputs (B, T, d_in)."""

    def __init__(self, d_in: int = 5, d_model: int = 8, n_heads: int = 2, n_blocks: int = 2, n_classes: int = 3):
        super().__init__()
        self.embed = nn.Linear(d_in, d_model)
        self.pos = nn.Parameter(0.1 * torch.randn(1, 6, d_model))
        self.blocks = nn.ModuleList(TinyBlock(d_model, n_heads) for _ in range(n_blocks))
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, x):
        x = self.embed(x) + self.pos[:, : x.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=1))


def make_mlp(d_in: int = 6, hidden: int = 10, n_classes: int = 4) -> nn.Module:
    return nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, n_classes))


def classification_batch(step: int, *, shape: tuple[int, ...], n_classes: int, dtype=torch.float64):
    """A deterministic batch per step: inputs of ``shape`` and labels ``(shape[0],)``."""
    gen = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(*shape, generator=gen, dtype=dtype)
    y = torch.randint(0, n_classes, (shape[0],), generator=gen)
    return x, y


CASES = {
    "mlp": (lambda: make_mlp(), (16, 6), 4),
    "mlp-tokens": (lambda: make_mlp(), (8, 3, 6), 4),
    "transformer": (lambda: TinyTransformer(), (8, 6, 5), 3),
}


def build_case(name: str, seed: int = 0, dtype=torch.float64):
    """``(model, batch_fn, loss_fn)``: ``batch_fn(step) -> (x, y)``; token outputs are mean-pooled."""
    builder, shape, n_classes = CASES[name]
    torch.manual_seed(seed)
    model = builder().to(dtype)

    def loss_fn(model, x, y):
        logits = model(x)
        if logits.dim() == 3:
            logits = logits.mean(dim=1)  # (B, classes): sequence classification
        return F.cross_entropy(logits, y)

    return model, (lambda step: classification_batch(step, shape=shape, n_classes=n_classes, dtype=dtype)), loss_fn


@pytest.fixture
def case_builder():
    return build_case


@pytest.fixture
def tiny_transformer():
    return TinyTransformer


def _reference_factors(model, x, y, *, weight_sharing):
    """A, G per Linear layer from inputs/output-gradients captured with retain_grad (no optimizer)."""
    captured = {}

    def keep(name):
        def hook(module, args, out):
            captured[name] = (args[0], out)
        return hook

    handles = [m.register_forward_hook(keep(name)) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    logits = model(x)
    for _, out in captured.values():
        out.retain_grad()
    loss = F.cross_entropy(logits.mean(dim=1) if logits.dim() == 3 else logits, y)
    loss.backward()
    for h in handles:
        h.remove()
    B = x.shape[0]
    refs = {}
    for name, (a, s) in captured.items():
        a = a.detach().reshape(B, -1, a.shape[-1])  # (B, T, in)
        g = s.grad.reshape(B, -1, s.shape[-1])  # (B, T, out)
        if weight_sharing == "reduce":
            a, g = a.mean(1, keepdim=True), g.sum(1, keepdim=True)
        a = torch.cat([a, torch.ones_like(a[..., :1])], dim=-1)
        factor_a = torch.einsum("nti,ntj->ij", a, a) / (a.shape[0] * a.shape[1])
        factor_g = B * torch.einsum("nti,ntj->ij", g, g)
        refs[name] = (factor_a, factor_g)
    return refs


@pytest.fixture
def reference_factors():
    """A, G per nn.Linear layer of a mean-over-batch loss, from retain_grad (no optimizer involved)."""
    return _reference_factors
