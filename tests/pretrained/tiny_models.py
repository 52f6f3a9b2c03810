"""Tiny random-init transformers models built in code (no download), one per adapter.

Import it after `needs_extra()`: test modules skip (with the reason) only when the `pretrained` extra
(transformers, safetensors) is missing.
"""
from __future__ import annotations

import numpy as np
import torch
import transformers as T

T.logging.set_verbosity_error()

VOCAB, CONTEXT = 50, 64


def tiny_config(kind: str, n_layers: int = 3, width: int = 32):
    common = {"num_hidden_layers": n_layers, "hidden_size": width, "num_attention_heads": 4,
              "intermediate_size": 2 * width}
    if kind == "gpt2":
        return T.GPT2Config(n_layer=n_layers, n_embd=width, n_head=4, vocab_size=VOCAB, n_positions=CONTEXT)
    if kind == "gpt_neox":  # partial rotary (Pythia's default 0.25) exercises the pass-through half
        return T.GPTNeoXConfig(**common, vocab_size=VOCAB, max_position_embeddings=CONTEXT)
    if kind == "bert":
        return T.BertConfig(**common, vocab_size=VOCAB, max_position_embeddings=CONTEXT)
    if kind == "llama":  # grouped KV heads: 4 query heads share 2 KV heads
        return T.LlamaConfig(**common, num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=CONTEXT)
    if kind == "vit":
        return T.ViTConfig(**common, image_size=16, patch_size=4, num_channels=1)
    raise ValueError(kind)


KINDS = ("gpt2", "gpt_neox", "bert", "llama", "vit")


def tiny_model(kind: str, *, n_layers: int = 3, width: int = 32, seed: int = 0):
    """A random-init base model of `kind` in eval mode with eager attention."""
    torch.manual_seed(seed)
    return T.AutoModel.from_config(tiny_config(kind, n_layers, width), attn_implementation="eager").eval()


def tiny_inputs(kind: str, *, batch: int = 2, n_tokens: int = 10, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "vit":
        return torch.randn(batch, 1, 16, 16, generator=g)
    return torch.randint(0, VOCAB, (batch, n_tokens), generator=g)


def save_model(model, path):
    model.save_pretrained(path)
    return path


def save_ids(path, *, n_inputs: int = 4, n_tokens: int = 16, seed: int = 0):
    np.save(path, np.random.default_rng(seed).integers(0, VOCAB, (n_inputs, n_tokens)))
    return path
