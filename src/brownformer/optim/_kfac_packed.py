"""nn.MultiheadAttention's packed Q, K, V projection as one K-FAC layer with a block-diagonal ``G``.

``nn.MultiheadAttention`` (and so ``nn.TransformerEncoderLayer``/``DecoderLayer``) keeps Q, K and V in one
``in_proj_weight`` ``(3E, E)`` and calls ``F.multi_head_attention_forward`` with it, so neither the
projection's output nor ``out_proj``'s forward is visible to module hooks. For self-attention the packed
projection ``[q, k, v] = x W^T + b`` is one linear map of one input: its Kronecker factors are the shared
``A = E[x x^T]`` and ``G`` over the ``3E`` outputs, kept block-diagonal with one ``E x E`` block each for Q, K
and V (``head_size = E``; per head with ``per_head``), which is exactly K-FAC on three separate Q, K, V
layers: ``A (x) blockdiag(G_Q, G_K, G_V)`` decouples into their three systems.

To see the projection's output, the capture replaces the module's ``forward`` (an instance attribute,
removed with the hooks) by :func:`packed_forward` while it collects factors: the projection is computed
here and handed to the capture, then ``F.multi_head_attention_forward`` runs on the projected Q, K, V with
identity projections (exact: a product with the identity adds only zeros) and ``out_proj`` is called as a
module, so its own hook sees it. Outside factor steps, in eval mode or without grad the original forward
runs. Cross-attention (different query and key) cannot share one ``A``: it raises.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(eq=False)
class PackedProjection:
    """The in-projection of one ``nn.MultiheadAttention``, with the attributes K-FAC reads of an ``nn.Linear``."""

    owner: nn.MultiheadAttention

    @property
    def weight(self) -> nn.Parameter:
        return self.owner.in_proj_weight

    @property
    def bias(self) -> nn.Parameter | None:
        return self.owner.in_proj_bias

    @property
    def out_features(self) -> int:
        return self.owner.in_proj_weight.shape[0]

    @property
    def in_features(self) -> int:
        return self.owner.in_proj_weight.shape[1]

    @property
    def training(self) -> bool:
        return self.owner.training

    def parameters(self):
        yield self.weight
        if self.bias is not None:
            yield self.bias


def is_packed(module: nn.Module) -> bool:
    """Whether ``module`` is an ``nn.MultiheadAttention`` with a packed, trainable ``in_proj_weight``."""
    # in_proj_weight is None exactly when Q, K, V have their own weights (kdim/vdim other than embed_dim)
    return isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None \
        and module.in_proj_weight.requires_grad


class ForwardOverride:
    """A replaced ``forward`` of one module; ``remove()`` restores the class's (a hook-like handle)."""

    def __init__(self, module: nn.Module, forward):
        self.module = module
        module.forward = forward

    def remove(self) -> None:
        self.module.__dict__.pop("forward", None)


def packed_forward(mha: nn.MultiheadAttention, active, on_projection):
    """The ``forward`` replacement of ``mha`` (module docstring): ``active()`` says whether to capture;
    ``on_projection(x, proj)`` receives the batch-first input ``(B, L, E)`` and projection ``(B, L, 3E)``."""
    original = type(mha).forward.__get__(mha)

    def forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        args = dict(key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
                    average_attn_weights=average_attn_weights, is_causal=is_causal)
        if not (active() and mha.training and torch.is_grad_enabled()):
            return original(query, key, value, **args)
        if query is not key or key is not value:
            raise ValueError("K-FAC preconditions nn.MultiheadAttention's packed in_proj_weight for self-attention "
                             "only (query, key and value the same tensor); leave this module out (scope or params)")
        batched = query.dim() == 3
        x = query if not batched else (query if mha.batch_first else query.transpose(0, 1))
        x = x if batched else x[None]  # (B, L, E)
        proj = F.linear(x, mha.in_proj_weight, mha.in_proj_bias)  # (B, L, 3E)
        on_projection(x, proj)
        q, k, v = proj.transpose(0, 1).chunk(3, dim=-1)  # each (L, B, E), the layout F.mha takes
        if not batched:
            q, k, v = q[:, 0], k[:, 0], v[:, 0]  # (L, E)
        eye = torch.eye(mha.embed_dim, dtype=proj.dtype, device=proj.device)
        out, weights = F.multi_head_attention_forward(
            q, k, v, mha.embed_dim, mha.num_heads, None, None, mha.bias_k, mha.bias_v, mha.add_zero_attn,
            mha.dropout, eye, None, training=mha.training, key_padding_mask=key_padding_mask,
            need_weights=need_weights, attn_mask=attn_mask, use_separate_proj_weight=True, q_proj_weight=eye,
            k_proj_weight=eye, v_proj_weight=eye, average_attn_weights=average_attn_weights, is_causal=is_causal)
        out = mha.out_proj(out)  # (L, B, E) or (L, E): a module call, so out_proj's own hook sees it
        return (out.transpose(0, 1) if batched and mha.batch_first else out), weights

    return forward
