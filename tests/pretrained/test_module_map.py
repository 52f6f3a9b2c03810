"""Any nn.Module through a user's module map; unknown model types are refused."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from brownformer.pretrained.adapters import ADAPTERS, ModuleMap, UnknownModelType, adapter_for
from brownformer.pretrained.hooked_forward import AttentionUnavailable, capture_model

D, H, N_LAYERS, VOCAB = 16, 2, 3, 20


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        B, n, _ = x.shape
        q, k, v = (m(x).view(B, n, H, D // H).transpose(1, 2) for m in (self.q, self.k, self.v))  # (B, H, n, d_h)
        logits = q @ k.transpose(-1, -2) / (D // H) ** 0.5
        logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        return self.o((self.softmax(logits) @ v).transpose(1, 2).reshape(B, n, D))


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.attn = nn.LayerNorm(D), _Attention()

    def forward(self, x):
        return x + self.attn(self.ln(x))


class _TinyLM(nn.Module):
    """Someone's own model: no config, no output_attentions."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(_Block() for _ in range(N_LAYERS))

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return x


MAP = {"layers": "blocks", "norm": "ln", "attention": "attn", "q": "attn.q", "k": "attn.k", "v": "attn.v",
       "o": "attn.o", "probs": "attn.softmax", "n_heads": H, "causal": True}


def test_module_map_captures_any_module():
    torch.manual_seed(0)
    model, idx = _TinyLM().eval(), torch.randint(0, VOCAB, (3, 7))
    cap = capture_model(model, ModuleMap.from_dict(MAP).adapter("tiny-lm"), idx)
    assert cap.attn.shape == (N_LAYERS, H, 3, 7, 7) and cap.resid.shape == (N_LAYERS + 1, 3, 7, D)
    torch.testing.assert_close(torch.from_numpy(cap.attn).sum(-1), torch.ones(N_LAYERS, H, 3, 7))
    assert cap.qk_max_deviation is not None and cap.qk_max_deviation < 1e-5  # per-head Q/K reproduce the softmax
    x0 = model.emb(idx).detach()
    torch.testing.assert_close(torch.from_numpy(cap.resid[0]), x0)
    torch.testing.assert_close(torch.from_numpy(cap.ln_hat[0]), F.layer_norm(x0, (D,)))


def test_module_map_without_attention_probabilities_is_refused():
    no_probs = {k: v for k, v in MAP.items() if k != "probs"}
    with pytest.raises(AttentionUnavailable, match="no attention weights"):
        capture_model(_TinyLM().eval(), ModuleMap.from_dict(no_probs).adapter("tiny-lm"),
                      torch.randint(0, VOCAB, (2, 5)))


def test_module_map_rejects_unknown_keys_and_unknown_model_types_name_the_known_ones():
    with pytest.raises(ValueError, match="unknown key"):
        ModuleMap.from_dict({**MAP, "blocks": "x"})
    with pytest.raises(UnknownModelType, match="'opt' has no adapter.*" + ", ".join(sorted(ADAPTERS))):
        adapter_for("opt")
    assert adapter_for("opt", ModuleMap.from_dict(MAP)).notes == "user module map"
