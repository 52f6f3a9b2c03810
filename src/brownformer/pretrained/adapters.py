"""Where the blocks, norms and attention weights of a pretrained transformer live, keyed by `model_type`.

An `Adapter` names, relative to the model's base module (`model.base_model`), the list of blocks and,
relative to one block, the norm whose output is claim 1's tensor and the attention module; `weights`
returns that block's W_Q, W_K, W_V per head and W_O, undoing the checkpoint's storage layout:

- gpt2: one fused Conv1D `c_attn` with weight (d, 3d) applied as x @ W: columns [0:d) are Q, [d:2d) K,
  [2d:3d) V, each split into heads of d_h consecutive units;
- gpt_neox (Pythia): one Linear `query_key_value` (3d, d) whose output is viewed as (heads, 3 d_h):
  per head [q | k | v] interleaved, not three blocks; parallel residual (attention and MLP read the same
  block input through their own LayerNorms);
- bert: separate query/key/value; post-LN (the LayerNorm after the attention's residual add);
- llama: separate q/k/v projections, RMSNorm (no centring, no bias), grouped KV heads (H_kv <= H);
- vit: separate q/k/v (attention.q_proj in transformers 5, attention.attention.query before).

Any other nn.Module: `ModuleMap`, a user mapping of module paths (see `ModuleMap.from_dict`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn

__all__ = ["Adapter", "HeadWeights", "ModuleMap", "ADAPTERS", "adapter_for", "get_path", "UnknownModelType"]


class UnknownModelType(ValueError):
    """A model_type without an adapter and no user mapping."""


@dataclass(frozen=True)
class HeadWeights:
    """One block's attention weights: q (H, d_h, d), k and v (H_kv, d_h, d), biases (heads, d_h) or None,
    o (d, H d_h) as applied y = o @ concat_heads."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    q_bias: torch.Tensor | None = None
    k_bias: torch.Tensor | None = None
    v_bias: torch.Tensor | None = None

    def matrices(self) -> dict[str, torch.Tensor]:
        """W_Q, W_K, W_V (rows = output units, heads stacked) and W_O as (out, in) matrices."""
        return {"q": self.q.reshape(-1, self.q.shape[-1]), "k": self.k.reshape(-1, self.k.shape[-1]),
                "v": self.v.reshape(-1, self.v.shape[-1]), "o": self.o}


def get_path(root: nn.Module, path: str) -> nn.Module:
    """root.<path> for a dotted path ("" is root); ValueError naming the missing part."""
    mod = root
    for part in [p for p in path.split(".") if p]:
        if not hasattr(mod, part):
            raise ValueError(f"module path {path!r}: {type(mod).__name__} has no attribute {part!r}")
        mod = getattr(mod, part)
    return mod


def _first_path(root: nn.Module, paths: tuple[str, ...]) -> nn.Module:
    for p in paths:
        try:
            return get_path(root, p)
        except ValueError:
            continue
    raise ValueError(f"none of the module paths {list(paths)} exists in {type(root).__name__}")


def _heads(w: torch.Tensor, n: int) -> torch.Tensor:
    return w.reshape(n, -1, w.shape[-1])  # (n, d_h, d): head h owns output units h*d_h .. (h+1)*d_h - 1


def _bias(b: torch.Tensor | None, n: int) -> torch.Tensor | None:
    return None if b is None else b.reshape(n, -1)


def _linear_weights(q: nn.Linear, k: nn.Linear, v: nn.Linear, o: nn.Linear, H: int, H_kv: int) -> HeadWeights:
    return HeadWeights(q=_heads(q.weight, H), k=_heads(k.weight, H_kv), v=_heads(v.weight, H_kv), o=o.weight,
                       q_bias=_bias(q.bias, H), k_bias=_bias(k.bias, H_kv), v_bias=_bias(v.bias, H_kv))


def _gpt2_weights(attn: nn.Module, H: int, H_kv: int) -> HeadWeights:
    W, b = attn.c_attn.weight.T, attn.c_attn.bias  # Conv1D stores (in, out): y = x @ W + b; W.T is (3d, d)
    d = W.shape[1]
    q, k, v = W[:d], W[d:2 * d], W[2 * d:]
    return HeadWeights(q=_heads(q, H), k=_heads(k, H), v=_heads(v, H), o=attn.c_proj.weight.T,
                       q_bias=_bias(b[:d], H), k_bias=_bias(b[d:2 * d], H), v_bias=_bias(b[2 * d:], H))


def _neox_weights(attn: nn.Module, H: int, H_kv: int) -> HeadWeights:
    W, b = attn.query_key_value.weight, attn.query_key_value.bias  # (3d, d): rows per head [q | k | v]
    d = W.shape[1]
    W4 = W.reshape(H, 3, -1, d)  # (H, 3, d_h, d)
    b3 = None if b is None else b.reshape(H, 3, -1)
    return HeadWeights(q=W4[:, 0], k=W4[:, 1], v=W4[:, 2], o=attn.dense.weight,
                       q_bias=None if b3 is None else b3[:, 0], k_bias=None if b3 is None else b3[:, 1],
                       v_bias=None if b3 is None else b3[:, 2])


def _bert_weights(attn: nn.Module, H: int, H_kv: int, block: nn.Module) -> HeadWeights:
    return _linear_weights(attn.query, attn.key, attn.value, block.attention.output.dense, H, H_kv)


def _llama_weights(attn: nn.Module, H: int, H_kv: int) -> HeadWeights:
    return _linear_weights(attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, H, H_kv)


def _vit_weights(attn: nn.Module, H: int, H_kv: int, block: nn.Module) -> HeadWeights:
    if hasattr(attn, "q_proj"):  # transformers >= 5
        return _linear_weights(attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, H, H_kv)
    return _linear_weights(attn.query, attn.key, attn.value, block.attention.output.dense, H, H_kv)


@dataclass(frozen=True)
class Adapter:
    """How to read one architecture (module docstring).

    Attributes:
        model_type: the config's model_type.
        layers: dotted paths (first that exists) from the base model to its nn.ModuleList of blocks.
        norm: paths from a block to the norm claim 1 reads (LN1 of a pre-LN block, the post-attention
            LayerNorm of a post-LN block).
        attention: paths from a block to the attention module (its input is what Q, K, V are computed from).
        placement: "pre" or "post" (LayerNorm placement), "parallel" noted in `notes`.
        norm_kind: "layernorm" (centred: output in the hyperplane sum(z) = 0) or "rmsnorm" (not centred).
        causal: decoder (causal mask) or encoder.
        modality: "text" (input_ids) or "image" (pixel_values).
        rotary: Q and K are rotated by the position embeddings after the projection (RoPE).
        weights: (attention module, H, H_kv[, block]) -> HeadWeights.
        sublayer_norm: paths from a block to its second norm (before the MLP in pre-LN, after it in post-LN):
            with both norms the residual stream is read after every sub-layer (depth at sub-layer resolution).
    """
    model_type: str
    layers: tuple[str, ...]
    norm: tuple[str, ...]
    attention: tuple[str, ...]
    placement: str
    norm_kind: str
    causal: bool
    modality: str
    weights: Callable
    rotary: bool = False
    notes: str = ""
    needs_block: bool = field(default=False)
    probs: str | None = None  # path from a block to a module whose output is the attention probabilities
    n_heads: int | None = None  # None: from the model's config
    n_kv_heads: int | None = None
    # paths from a block to its other norm (the one between the attention and the MLP sub-layers, or after the MLP in
    # post-LN); () where there is no residual state between the sub-layers (parallel residual) or it is unknown
    sublayer_norm: tuple[str, ...] = ()

    def blocks(self, model: nn.Module) -> list[nn.Module]:
        return list(_first_path(getattr(model, "base_model", model), self.layers))

    def norm_of(self, block: nn.Module) -> nn.Module:
        return _first_path(block, self.norm)

    def sublayer_norm_of(self, block: nn.Module) -> nn.Module | None:
        return _first_path(block, self.sublayer_norm) if self.sublayer_norm else None

    def attention_of(self, block: nn.Module) -> nn.Module:
        return _first_path(block, self.attention)

    def head_weights(self, block: nn.Module, H: int, H_kv: int) -> HeadWeights:
        attn = self.attention_of(block)
        return self.weights(attn, H, H_kv, block) if self.needs_block else self.weights(attn, H, H_kv)


ADAPTERS: dict[str, Adapter] = {
    "gpt2": Adapter("gpt2", ("h",), ("ln_1",), ("attn",), "pre", "layernorm", True, "text", _gpt2_weights,
                    notes="fused Conv1D c_attn (x @ W), Q | K | V blocks of d columns", sublayer_norm=("ln_2",)),
    "gpt_neox": Adapter("gpt_neox", ("layers",), ("input_layernorm",), ("attention",), "pre", "layernorm", True,
                        "text", _neox_weights, rotary=True,
                        notes="interleaved per-head [q | k | v] rows; parallel residual when "
                              "use_parallel_residual (attention and MLP read the same block input)"),
    "bert": Adapter("bert", ("encoder.layer",), ("attention.output.LayerNorm",), ("attention.self",), "post",
                    "layernorm", False, "text", _bert_weights, needs_block=True,
                    notes="post-LN: the norm read is the LayerNorm after the attention's residual add",
                    sublayer_norm=("output.LayerNorm",)),
    "llama": Adapter("llama", ("layers",), ("input_layernorm",), ("self_attn",), "pre", "rmsnorm", True, "text",
                     _llama_weights, rotary=True, notes="RMSNorm (no centring); grouped KV heads",
                     sublayer_norm=("post_attention_layernorm",)),
    "vit": Adapter("vit", ("layers", "encoder.layer"), ("layernorm_before",), ("attention", "attention.attention"),
                   "pre", "layernorm", False, "image", _vit_weights, needs_block=True,
                   notes="token 0 is the CLS token", sublayer_norm=("layernorm_after",)),
}


@dataclass(frozen=True)
class ModuleMap:
    """A user's mapping of module paths for an architecture without an adapter.

    Keys (JSON): "layers" (path from the model to its list of blocks), "norm" (from a block), "attention"
    (from a block; its input is what Q, K, V are computed from), "q", "k", "v", "o" (from a block: nn.Linear
    layers, or omitted: no per-head Q/K and no weight trajectories), "probs" (from a block: a module whose
    OUTPUT is the attention probabilities (batch, heads, n, n), e.g. the attention dropout; omitted: the
    model's own output_attentions is used), "placement" ("pre"|"post"), "norm_kind" ("layernorm"|"rmsnorm"),
    "causal" (bool), "modality" ("text"|"image"), "n_heads", "n_kv_heads" (ints, default from the config).
    """
    layers: str
    norm: str
    attention: str
    placement: str = "pre"
    norm_kind: str = "layernorm"
    causal: bool = True
    modality: str = "text"
    q: str | None = None
    k: str | None = None
    v: str | None = None
    o: str | None = None
    probs: str | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None

    @classmethod
    def from_dict(cls, d: dict) -> ModuleMap:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"module map: unknown key(s) {unknown}; known: {sorted(known)}")
        missing = [k for k in ("layers", "norm", "attention") if not d.get(k)]
        if missing:
            raise ValueError(f"module map: missing key(s) {missing}")
        for key, allowed in (("placement", ("pre", "post")), ("norm_kind", ("layernorm", "rmsnorm")),
                             ("modality", ("text", "image"))):
            if key in d and d[key] not in allowed:
                raise ValueError(f"module map: {key} must be one of {allowed}, got {d[key]!r}")
        return cls(**d)

    def adapter(self, model_type: str) -> Adapter:
        has_qkvo = all((self.q, self.k, self.v, self.o))

        def weights(attn, H, H_kv, block):
            if not has_qkvo:
                raise ValueError("module map gives no q/k/v/o paths: per-head weights unavailable")
            q, k, v, o = (get_path(block, p) for p in (self.q, self.k, self.v, self.o))
            return _linear_weights(q, k, v, o, H, H_kv)

        return Adapter(model_type, (self.layers,), (self.norm,), (self.attention,), self.placement, self.norm_kind,
                       self.causal, self.modality, weights if has_qkvo else None, needs_block=True,
                       notes="user module map", probs=self.probs, n_heads=self.n_heads,
                       n_kv_heads=self.n_kv_heads or self.n_heads)


def adapter_for(model_type: str, module_map: ModuleMap | None = None) -> Adapter:
    """The adapter of `model_type`, or the user's module map (which wins when given).

    Raises:
        UnknownModelType: no adapter and no module map (the message lists the known types).
    """
    if module_map is not None:
        return module_map.adapter(model_type)
    if model_type not in ADAPTERS:
        raise UnknownModelType(f"model_type {model_type!r} has no adapter (known: {', '.join(sorted(ADAPTERS))}); "
                               "give a module map (--module-map FILE.json) for any other architecture")
    return ADAPTERS[model_type]
