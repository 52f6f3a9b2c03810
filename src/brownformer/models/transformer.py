"""Transformer variants used in every experiment: one block, two models (ViT and char-LM).

Written in nanoGPT's shape so the maths is visible: Q, K, V and O are separate nn.Linear layers
(K-FAC keeps one Kronecker factor pair per layer), the MLP is fc1 -> GELU -> fc2, and LayerNorm
placement is a model variant:

    pre : x <- x + Attn(LN1(x));  x <- x + MLP(LN2(x));  final LN before the head
    post: x <- LN1(x + Attn(x));  x <- LN2(x + MLP(x))   (Vaswani et al. 2017)
    none: x <- x + Attn(x);       x <- x + MLP(x)        (control without normalisation)

Attention has a fast path (F.scaled_dot_product_attention) and a reference path that
materialises softmax(Q K^T / sqrt(d_k)); the reference path runs whenever `store_probs` is set so
that probes can read the transition matrices of claim 2 (tests check both paths agree).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from brownformer.config import ModelConfig

__all__ = ["Attention", "MLP", "Block", "VisionTransformer", "CharTransformer", "build_model", "loss_fn"]


class Attention(nn.Module):
    """Multi-head self-attention with separate Q, K, V, O projections."""

    def __init__(self, d_model: int, n_heads: int, *, causal: bool, dropout: float = 0.0):
        super().__init__()
        self.n_heads, self.causal, self.dropout = n_heads, causal, dropout
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)
        self.store_probs = False  # set by probes; forces the reference path
        self.probs: torch.Tensor | None = None  # (B, H, T, T) when store_probs

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        return x.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, H, T, hs)

    def reference_attention(self, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
        """softmax(q k^T / sqrt(hs)) v, returning the probabilities too. Shapes (B, H, T, hs)."""
        T = q.size(-2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, T, T)
        if self.causal:
            mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        probs = scores.softmax(dim=-1)
        drop = F.dropout(probs, self.dropout, self.training)
        return drop @ v, probs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        if self.store_probs:
            y, probs = self.reference_attention(q, k, v)
            self.probs = probs.detach()
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=self.causal)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C): heads concatenated
        return self.o(y)


class MLP(nn.Module):
    def __init__(self, d_model: int, hidden: int, dropout: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden)
        self.fc2 = nn.Linear(hidden, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(F.gelu(self.fc1(x))))


class Block(nn.Module):
    """One transformer block; `ln` in {"pre", "post", "none"} places the LayerNorms."""

    def __init__(self, d_model: int, n_heads: int, mlp_hidden: int, *, ln: str, causal: bool,
                 dropout: float = 0.0):
        super().__init__()
        if ln not in ("pre", "post", "none"):
            raise ValueError(f"ln must be 'pre', 'post' or 'none', got {ln!r}")
        self.ln_placement = ln
        norm = (lambda: nn.LayerNorm(d_model)) if ln != "none" else nn.Identity
        self.ln1, self.ln2 = norm(), norm()
        self.attn = Attention(d_model, n_heads, causal=causal, dropout=dropout)
        self.mlp = MLP(d_model, mlp_hidden, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ln_placement == "post":
            x = self.ln1(x + self.attn(x))
            return self.ln2(x + self.mlp(x))
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class _Backbone(nn.Module):
    """Shared stack: blocks plus the final LayerNorm (pre-LN only) and weight init."""

    def __init__(self, cfg: ModelConfig, *, causal: bool):
        super().__init__()
        self.cfg = cfg
        hidden = int(round(cfg.mlp_ratio * cfg.d_model))
        self.blocks = nn.ModuleList(
            Block(cfg.d_model, cfg.n_heads, hidden, ln=cfg.ln, causal=causal, dropout=cfg.dropout)
            for _ in range(cfg.n_layers))
        # Post-LN blocks already end in a LayerNorm; "none" is the control without any.
        self.ln_f = nn.LayerNorm(cfg.d_model) if cfg.ln == "pre" else nn.Identity()

    def _init_weights(self, module: nn.Module) -> None:
        # nanoGPT / GPT-2 init: N(0, 0.02) weights, zero biases; LayerNorm keeps gamma=1, beta=0.
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def run_blocks(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)


class VisionTransformer(_Backbone):
    """ViT (Dosovitskiy et al. 2021): linear patch embedding, CLS token, learned positions."""

    def __init__(self, cfg: ModelConfig, *, n_classes: int, image_shape: tuple[int, int, int]):
        super().__init__(cfg, causal=False)
        C, H, W = image_shape
        p = cfg.patch_size
        if H % p or W % p:
            raise ValueError(f"patch_size={p} does not divide the image size {H}x{W}")
        self.patch_size, self.n_patches = p, (H // p) * (W // p)
        # "mean" reads out the mean patch token: at post-LN the CLS token starts almost input-independent
        # (measured: SGD and K-FAC stay at chance on the 4-layer post-LN digits ViT with a CLS readout).
        self.pool = cfg.pool
        self.patch_embed = nn.Linear(C * p * p, cfg.d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.d_model))
        self.pos_emb = nn.Parameter(torch.zeros(1, self.n_patches + 1, cfg.d_model))
        self.head = nn.Linear(cfg.d_model, n_classes)
        self.apply(self._init_weights)
        nn.init.normal_(self.pos_emb, std=0.02)
        nn.init.normal_(self.cls_token, std=0.02)

    def patchify(self, images: torch.Tensor) -> torch.Tensor:
        B, C, H, W = images.shape
        p = self.patch_size
        x = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, H/p, W/p, p, p)
        return x.permute(0, 2, 3, 1, 4, 5).reshape(B, -1, C * p * p)  # (B, n_patches, C*p*p)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(self.patchify(images))  # (B, n_patches, d)
        cls = self.cls_token.expand(x.size(0), -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_emb  # (B, n_patches + 1, d)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.run_blocks(self.embed(images))  # (B, n_patches + 1, d)
        if self.pool == "mean":
            return self.head(x[:, 1:].mean(dim=1))  # (B, n_classes): logits from the mean patch token
        return self.head(x[:, 0])  # (B, n_classes): logits from the CLS token


class CharTransformer(_Backbone):
    """Causal character-level language model (GPT-style) sharing the same block."""

    def __init__(self, cfg: ModelConfig, *, vocab_size: int):
        super().__init__(cfg, causal=True)
        self.tok_emb = nn.Embedding(vocab_size, cfg.d_model)
        self.pos_emb = nn.Parameter(torch.zeros(1, cfg.seq_len, cfg.d_model))
        self.head = nn.Linear(cfg.d_model, vocab_size)
        self.apply(self._init_weights)
        nn.init.normal_(self.pos_emb, std=0.02)

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence length {T} exceeds the model's seq_len={self.cfg.seq_len}")
        return self.tok_emb(idx) + self.pos_emb[:, :T]  # (B, T, d)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.run_blocks(self.embed(idx)))  # (B, T, vocab)


def build_model(cfg: ModelConfig, *, n_classes: int | None = None, vocab_size: int | None = None,
                image_shape: tuple[int, int, int] | None = None) -> nn.Module:
    """Instantiate the model a ModelConfig describes (arch "vit" needs n_classes and image_shape)."""
    if cfg.arch == "vit":
        if n_classes is None or image_shape is None:
            raise ValueError("a ViT needs n_classes and image_shape")
        return VisionTransformer(cfg, n_classes=n_classes, image_shape=tuple(image_shape))
    if cfg.arch == "lm":
        if vocab_size is None:
            raise ValueError("a character LM needs vocab_size")
        return CharTransformer(cfg, vocab_size=vocab_size)
    raise ValueError(f"unknown arch {cfg.arch!r}")


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over examples (ViT) or over every predicted character (LM)."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))
