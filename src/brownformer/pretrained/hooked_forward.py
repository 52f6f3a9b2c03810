"""One forward pass of a pretrained transformer with hooks: residual stream, norm outputs, attention, Q/K.

Per block l (adapters.py says which modules):
    resid[l]    the block's input (resid[L] = the last block's output): the residual stream
    ln_hat[l]   the norm's input normalised WITHOUT its affine map, with the module's own eps:
                LayerNorm (x - mean) / sqrt(var + eps); RMSNorm x / sqrt(mean(x^2) + eps); |ln_hat| ~ sqrt(d)
    ln_out[l]   the norm's output (after its affine map)
    attn[l]     the attention probabilities per head, as the model returns them (eager attention)
With a second norm per block (`Adapter.sublayer_norm`), the same at sub-layer resolution, in forward order
(two points per block: the states around the attention and the MLP sub-layers):
    sub_hat, sub_out (2L, B, n, d)  both norms' pre-affine inputs and outputs
    sub_resid (2L+1, B, n, d)       the residual stream after every sub-layer: pre-LN, the norms' inputs and the
                                    last block's output; post-LN, the first block's input and the norms' outputs
Per-head Q and K are computed from the attention module's input and the weights the adapter extracts
(rotated by the model's own RoPE function where the model uses one); softmax(Q K^T * scaling + mask)
must reproduce attn: the largest deviation is returned as a check on the adapter's weight layout.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .adapters import Adapter, HeadWeights, get_path

log = logging.getLogger(__name__)

__all__ = ["ModelCapture", "AttentionUnavailable", "capture_model", "pre_affine", "per_head_qk",
           "attention_from_qk", "head_counts", "QK_TOLERANCE"]

#: largest |softmax(Q K^T) - attention| accepted before the adapter's layout is declared wrong (float32)
QK_TOLERANCE = 1e-4


class AttentionUnavailable(ValueError):
    """The model returned no attention weights (a fused or non-eager attention kernel)."""


@dataclass
class ModelCapture:
    """Arrays of one forward pass (float32, numpy): resid (L+1, B, n, d), ln_hat and ln_out (L, B, n, d),
    attn (L, H, B, n, n); qk_max_deviation: max |softmax(QK^T) - attn| (None without per-head weights)."""
    resid: np.ndarray
    ln_hat: np.ndarray
    ln_out: np.ndarray
    attn: np.ndarray
    qk_max_deviation: float | None
    sub_hat: np.ndarray | None = None
    sub_out: np.ndarray | None = None
    sub_resid: np.ndarray | None = None


def head_counts(config, adapter: Adapter | None = None) -> tuple[int, int]:
    """(H, H_kv): attention heads and key/value heads (grouped-query attention: H_kv < H); a module map's
    n_heads / n_kv_heads win over the config."""
    if adapter is not None and adapter.n_heads:
        return int(adapter.n_heads), int(adapter.n_kv_heads or adapter.n_heads)
    H = int(getattr(config, "num_attention_heads", 0) or getattr(config, "n_head", 0))
    if H <= 0:
        raise ValueError("config has no num_attention_heads")
    return H, int(getattr(config, "num_key_value_heads", None) or H)


def pre_affine(norm: nn.Module, x: torch.Tensor, norm_kind: str) -> torch.Tensor:
    """The norm's output without its affine map, with the module's own eps (module docstring)."""
    d = x.shape[-1]
    if norm_kind == "rmsnorm":
        eps = next((getattr(norm, a) for a in ("variance_epsilon", "eps", "epsilon") if getattr(norm, a, None)
                    is not None), torch.finfo(torch.float32).eps)
        x32 = x.float()
        return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    eps = getattr(norm, "eps", None)
    if eps is None:
        eps = getattr(norm, "variance_epsilon", 1e-5)
    return F.layer_norm(x.float(), (d,), eps=float(eps))


def per_head_qk(weights: HeadWeights, x: torch.Tensor, *, rotary_fn=None, position_embeddings=None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head queries (B, H, n, d_h) and keys (B, H_kv, n, d_h) of the attention input x (B, n, d)."""
    q = torch.einsum("bnd,hed->bhne", x, weights.q)
    k = torch.einsum("bnd,hed->bhne", x, weights.k)
    if weights.q_bias is not None:
        q = q + weights.q_bias[None, :, None, :]
    if weights.k_bias is not None:
        k = k + weights.k_bias[None, :, None, :]
    if rotary_fn is not None and position_embeddings is not None:
        cos, sin = position_embeddings
        q, k = rotary_fn(q, k, cos, sin)
    return q, k


def attention_from_qk(q: torch.Tensor, k: torch.Tensor, *, scaling: float, causal: bool) -> torch.Tensor:
    """softmax(Q K^T * scaling + causal mask), grouped KV heads repeated: (B, H, n, n)."""
    H, H_kv = q.shape[1], k.shape[1]
    if H != H_kv:
        k = k.repeat_interleave(H // H_kv, dim=1)  # head h reads KV head h // (H / H_kv), as repeat_kv does
    logits = (q.float() @ k.float().transpose(-1, -2)) * scaling
    if causal:
        n = logits.shape[-1]
        mask = torch.ones(n, n, dtype=torch.bool, device=logits.device).triu(1)
        logits = logits.masked_fill(mask, float("-inf"))
    return logits.softmax(-1)


def _first_tensor(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _rotary_fn(adapter: Adapter, attn_module: nn.Module):
    """The model's own apply_rotary_pos_emb (its modeling module), or None."""
    if not adapter.rotary:
        return None
    fn = getattr(sys.modules.get(type(attn_module).__module__), "apply_rotary_pos_emb", None)
    if fn is None:
        log.warning("%s: no apply_rotary_pos_emb found; per-head Q/K check skipped", type(attn_module).__name__)
    return fn


@torch.no_grad()
def capture_model(model: nn.Module, adapter: Adapter, inputs: torch.Tensor) -> ModelCapture:
    """One forward pass over `inputs` (input_ids (B, n) or pixel_values (B, C, H, W)) recording the module
    docstring's tensors. With `adapter.probs` (a module map for any nn.Module) the model is called as
    model(inputs) and the attention is that module's output; else as a transformers model with
    output_attentions=True.

    Raises:
        AttentionUnavailable: the model returned no attention weights.
        ValueError: the adapter's layout does not reproduce the model's attention (QK_TOLERANCE).
    """
    blocks, probs_path = adapter.blocks(model), adapter.probs
    if not probs_path and not hasattr(model, "config"):
        raise AttentionUnavailable(f"{type(model).__name__} returned no attention weights (not a transformers model, "
                                   "and the module map names no 'probs' module)")
    resid, ln_hat, ln_out, attn_in, pos_emb, probs = [], [], [], [], [], []
    sub_in, sub_hat, sub_out = [], [], []
    handles = []

    def on_block(module, args, kwargs):
        resid.append(_first_tensor(args if args else [kwargs["hidden_states"]]).detach())

    def on_norm(module, args, out):
        ln_hat.append(pre_affine(module, args[0].detach(), adapter.norm_kind))
        ln_out.append(_first_tensor(out).detach().float())

    def on_any_norm(module, args, out):  # both norms of a block, in the order the forward pass runs them
        sub_in.append(args[0].detach().float())
        sub_hat.append(pre_affine(module, args[0].detach(), adapter.norm_kind))
        sub_out.append(_first_tensor(out).detach().float())

    def on_attention(module, args, kwargs):
        attn_in.append((args[0] if args else kwargs["hidden_states"]).detach())
        pos_emb.append(kwargs.get("position_embeddings"))

    for block in blocks:
        handles.append(block.register_forward_pre_hook(on_block, with_kwargs=True))
        handles.append(adapter.norm_of(block).register_forward_hook(on_norm))
        handles.append(adapter.attention_of(block).register_forward_pre_hook(on_attention, with_kwargs=True))
        second = adapter.sublayer_norm_of(block)
        if second is not None:
            handles += [adapter.norm_of(block).register_forward_hook(on_any_norm),
                        second.register_forward_hook(on_any_norm)]
        if probs_path:
            handles.append(get_path(block, probs_path).register_forward_hook(
                lambda m, a, out: probs.append(_first_tensor(out).detach())))
    handles.append(blocks[-1].register_forward_hook(lambda m, a, out: resid.append(_first_tensor(out).detach())))
    was_training = model.training
    model.eval()
    try:
        if probs_path:
            out = model(inputs)
        else:
            out = model(**{"pixel_values" if adapter.modality == "image" else "input_ids": inputs},
                        output_attentions=True)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    attentions = probs if probs_path else getattr(out, "attentions", None)
    if not attentions or len(attentions) != len(blocks) or any(a is None for a in attentions):
        raise AttentionUnavailable(f"{type(model).__name__} returned no attention weights "
                                   "(needs eager attention with output_attentions; fused kernels give none)")
    attn = torch.stack([a.float() for a in attentions])  # (L, B, H, n, n)
    dev = _qk_check(model, adapter, blocks, attn_in, pos_emb, attn)
    sub = _sublayer_arrays(adapter.placement, resid, sub_in, sub_hat, sub_out, len(blocks))
    return ModelCapture(resid=torch.stack(resid).float().numpy(), ln_hat=torch.stack(ln_hat).numpy(),
                        ln_out=torch.stack(ln_out).numpy(), attn=attn.transpose(1, 2).contiguous().numpy(),
                        qk_max_deviation=dev, **sub)


def _sublayer_arrays(placement: str, resid, sub_in, sub_hat, sub_out, L: int) -> dict:
    """sub_hat, sub_out, sub_resid (module docstring); {} when the adapter names no second norm."""
    if not sub_hat:
        return {}
    if len(sub_hat) != 2 * L:
        raise ValueError(f"expected 2 norm calls per block ({2 * L}), saw {len(sub_hat)}: the adapter's sublayer_norm "
                         "is not called once per block")
    states = sub_in + [resid[-1].float()] if placement == "pre" else [resid[0].float()] + sub_out
    return {"sub_hat": torch.stack(sub_hat).numpy(), "sub_out": torch.stack(sub_out).numpy(),
            "sub_resid": torch.stack(states).numpy()}


def _qk_check(model, adapter: Adapter, blocks, attn_in, pos_emb, attn: torch.Tensor) -> float | None:
    """max |softmax(Q K^T * scaling + mask) - attention| over layers, from the adapter's per-head weights."""
    if adapter.weights is None or len(attn_in) != len(blocks):
        return None
    H, H_kv = head_counts(getattr(model, "config", None), adapter)
    worst = 0.0
    for l, block in enumerate(blocks):
        module = adapter.attention_of(block)
        rotary = _rotary_fn(adapter, module)
        if adapter.rotary and rotary is None:
            return None
        w = adapter.head_weights(block, H, H_kv)
        q, k = per_head_qk(w, attn_in[l].to(w.q.dtype), rotary_fn=rotary, position_embeddings=pos_emb[l])
        scaling = float(getattr(module, "scaling", q.shape[-1] ** -0.5))
        worst = max(worst, float((attention_from_qk(q, k, scaling=scaling, causal=adapter.causal)
                                  - attn[l]).abs().max()))
    if worst > QK_TOLERANCE:
        raise ValueError(f"the {adapter.model_type} adapter's per-head Q/K do not reproduce the model's attention "
                         f"(max deviation {worst:.2e} > {QK_TOLERANCE}): wrong weight layout")
    return worst
