"""The forward of an ensemble written with the member axis in every layer, instead of `vmap` over one model.

The stacked weights are brownformer.models' own parameters with a leading member axis E (the names of
`named_parameters()`, as `torch.func.stack_module_state` gives them), so the optimizer, checkpoints and a
member's own module are those of the vmap ensemble; only the forward differs:

    linear      y[e] = x[e] W[e]^T + b[e]          one baddbmm over the members
    attention   members folded into the batch      softmax(q k^T / sqrt(hs)) v as two batched matmuls
    LayerNorm   normalised over the last axis, then each member's gamma and beta broadcast
    embedding   one table lookup in the (E*V, d) stack, member e's ids offset by e*V

Why: vmap adds operations of its own (copies of batched views, the math attention kernel's mask handling);
here each layer is one call for all members: 11-23% less CPU per 8-member vit-pre step than vmap
(benchmarks/results/ensemble_compute.md). A member's logits and gradients are those of its model alone up to
float rounding (a batched GEMM may block a sum differently from the one-model GEMM):
tests/train/test_ensemble_batched.py. With `taps`, each linear layer's input and output per member are kept
(the activations and output gradients per-member K-FAC factors are made of).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from brownformer.models import CharTransformer, VisionTransformer

__all__ = ["batched_logits"]


class _Weights(NamedTuple):
    params: dict[str, torch.Tensor]  # name -> (E, *shape)
    taps: dict[str, tuple[torch.Tensor, torch.Tensor]] | None  # linear layer -> (its input, its output)


def _linear(w: _Weights, name: str, x: torch.Tensor) -> torch.Tensor:
    """Member-wise nn.Linear `name`: x (E, ..., in) -> (E, ..., out)."""
    weight, bias = w.params[f"{name}.weight"], w.params.get(f"{name}.bias")  # (E, out, in), (E, out)
    E, *lead, n_in = x.shape
    flat = x.reshape(E, -1, n_in)  # (E, N, in)
    y = (torch.bmm(flat, weight.transpose(1, 2)) if bias is None
         else torch.baddbmm(bias.unsqueeze(1), flat, weight.transpose(1, 2)))  # (E, N, out)
    if w.taps is not None:
        if y.requires_grad:
            y.retain_grad()  # its gradient after backward: the output gradients of K-FAC's G factor
        w.taps[name] = (flat, y)
    return y.view(E, *lead, weight.size(1))  # (E, ..., out)


def _layer_norm(w: _Weights, name: str, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Member-wise nn.LayerNorm `name` (or the identity of ln 'none'): x (E, ..., d)."""
    if not isinstance(module, nn.LayerNorm):
        return x
    E, d = x.size(0), x.size(-1)
    shape = (E, *([1] * (x.dim() - 2)), d)  # each member's gamma and beta, broadcast over its tokens
    normed = F.layer_norm(x, (d,), eps=module.eps)
    return torch.addcmul(w.params[f"{name}.bias"].view(shape), normed, w.params[f"{name}.weight"].view(shape))


def _softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(hs)) v as two batched matmuls, q, k, v (N, H, T, hs) -> (N, H, T, hs).

    Not F.scaled_dot_product_attention: at T = 17 and hs = 8 its fused CPU kernel, called over members x batch,
    took 40% of an 8-member vit-pre step (benchmarks/results/ensemble_compute.md); two bmm calls over all
    N*H heads cost less.
    """
    N, H, T, hs = q.shape
    scores = torch.matmul(q, k.transpose(-2, -1)) * hs ** -0.5  # (N, H, T, T)
    if causal:
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.matmul(scores.softmax(dim=-1), v)


def _attention(w: _Weights, name: str, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Member-wise brownformer.models.Attention: x (E, B, T, C) -> (E, B, T, C)."""
    E, B, T, C = x.shape
    H = module.n_heads

    def heads(y):
        return y.view(E * B, T, H, C // H).transpose(1, 2)  # (E*B, H, T, hs): members folded into the batch
    q, k, v = (heads(_linear(w, f"{name}.{p}", x)) for p in ("q", "k", "v"))
    y = _softmax_attention(q, k, v, causal=module.causal)  # (E*B, H, T, hs)
    return _linear(w, f"{name}.o", y.transpose(1, 2).reshape(E, B, T, C))


def _blocks(w: _Weights, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The blocks and the final LayerNorm of `model` (brownformer.models' _Backbone), member-wise."""
    for i, block in enumerate(model.blocks):
        pre = f"blocks.{i}"

        def attn(y):
            return _attention(w, f"{pre}.attn", block.attn, y)

        def mlp(y):
            return _linear(w, f"{pre}.mlp.fc2", F.gelu(_linear(w, f"{pre}.mlp.fc1", y)))

        def ln1(y):
            return _layer_norm(w, f"{pre}.ln1", block.ln1, y)

        def ln2(y):
            return _layer_norm(w, f"{pre}.ln2", block.ln2, y)
        if block.ln_placement == "post":
            x = ln1(x + attn(x))
            x = ln2(x + mlp(x))
        else:
            x = x + attn(ln1(x))
            x = x + mlp(ln2(x))
    return _layer_norm(w, "ln_f", model.ln_f, x)


def _vit(w: _Weights, model: VisionTransformer, images: torch.Tensor) -> torch.Tensor:
    E, B = images.shape[:2]
    patches = model.patchify(images.flatten(0, 1)).view(E, B, model.n_patches, -1)  # (E, B, P, C*p*p)
    x = _linear(w, "patch_embed", patches)  # (E, B, P, d)
    cls = w.params["cls_token"].expand(E, B, 1, x.size(-1))  # (E, 1, 1, d) -> (E, B, 1, d)
    x = torch.cat([cls, x], dim=2) + w.params["pos_emb"]  # (E, B, P + 1, d); pos_emb (E, 1, P + 1, d)
    x = _blocks(w, model, x)
    pooled = x[:, :, 1:].mean(dim=2) if model.pool == "mean" else x[:, :, 0]  # (E, B, d)
    return _linear(w, "head", pooled)  # (E, B, n_classes)


def _char(w: _Weights, model: CharTransformer, idx: torch.Tensor) -> torch.Tensor:
    E, B, T = idx.shape
    if T > model.cfg.seq_len:
        raise ValueError(f"sequence length {T} exceeds the model's seq_len={model.cfg.seq_len}")
    table = w.params["tok_emb.weight"]  # (E, V, d)
    V = table.size(1)
    offset = (torch.arange(E, device=idx.device) * V).view(E, 1, 1)  # member e's rows of the flat table
    x = F.embedding(idx + offset, table.flatten(0, 1)) + w.params["pos_emb"][:, :, :T]  # (E, B, T, d)
    return _linear(w, "head", _blocks(w, model, x))  # (E, B, T, vocab)


def batched_logits(params: dict[str, torch.Tensor], model: nn.Module, x: torch.Tensor, *,
                   taps: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None) -> torch.Tensor:
    """Every member's logits: `params` are `model`'s parameters stacked on a member axis E, x is (E, B, ...).

    Args:
        params: name -> (E, *shape) for every parameter of `model` (`torch.func.stack_module_state`).
        model: the architecture (a VisionTransformer or CharTransformer without dropout; any device, meta too).
        x: each member's batch, stacked.
        taps: when given, filled with linear layer name -> (its input (E, N, in), its output (E, N, out)); the
            output keeps its gradient after backward (`.grad`): what per-member K-FAC factors are made of.
    Returns:
        (E, B, n_classes) for a ViT, (E, B, T, vocab) for the LM.
    Raises:
        ValueError: a model with dropout, or of another class.
    """
    if model.cfg.dropout:
        raise ValueError("the batched ensemble forward has no dropout (ensembles take models without it)")
    if isinstance(model, VisionTransformer):
        return _vit(_Weights(params, taps), model, x)
    if isinstance(model, CharTransformer):
        return _char(_Weights(params, taps), model, x)
    raise ValueError(f"no batched forward for {type(model).__name__}")
