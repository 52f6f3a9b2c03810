"""Optimizer registry: config name -> torch.optim.Optimizer for a model.

Every optimizer exposes `param_groups` whose groups carry `initial_lr`, so one learning-rate
schedule (brownformer.train.lr_factor) drives all of them, composite ones included.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch
import torch.nn as nn

__all__ = ["OPTIMIZERS", "build_optimizer", "CompositeOptimizer"]

OPTIMIZERS = ("sgd", "adamw", "muon", "kfac-eigen", "kfac-iterative")


class CompositeOptimizer(torch.optim.Optimizer):
    """Several optimizers stepping disjoint parameter sets as one (Muon + AdamW).

    Subclasses Optimizer only for isinstance checks and the usual API; the state lives in the parts.
    """

    def __init__(self, parts: Mapping[str, torch.optim.Optimizer]):
        self.parts = dict(parts)
        self.defaults = {}
        self.state = {}

    @property
    def param_groups(self) -> list[dict]:  # type: ignore[override]
        return [g for opt in self.parts.values() for g in opt.param_groups]

    @torch.no_grad()
    def step(self, closure=None):
        for opt in self.parts.values():
            opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.parts.values():
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {name: opt.state_dict() for name, opt in self.parts.items()}

    def load_state_dict(self, state_dict: dict) -> None:
        for name, opt in self.parts.items():
            opt.load_state_dict(state_dict[name])

    def __repr__(self) -> str:
        return f"CompositeOptimizer({', '.join(f'{k}: {type(v).__name__}' for k, v in self.parts.items())})"


def _muon_split(model: nn.Module) -> tuple[list, list]:
    """Muon takes 2-D weights of hidden nn.Linear layers; embeddings, the patch embedding, the
    head, biases, LayerNorm and positional parameters go to AdamW (Jordan et al. 2024)."""
    hidden, rest = [], []
    hidden_ids = set()
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and name.startswith("blocks."):
            hidden_ids.add(id(module.weight))
    for p in model.parameters():
        if p.requires_grad:
            (hidden if id(p) in hidden_ids else rest).append(p)
    return hidden, rest


def build_optimizer(model: nn.Module, type: str, lr: float, params: Mapping[str, Any] | None = None
                    ) -> torch.optim.Optimizer:
    """Build the optimizer `type` with learning rate `lr` and the config's extra `params`.

    Raises:
        ValueError: unknown type or a parameter the optimizer does not take (names the key).
    """
    params = dict(params or {})
    trainable: Iterable = [p for p in model.parameters() if p.requires_grad]
    try:
        if type == "sgd":
            opt = torch.optim.SGD(trainable, lr=lr, **params)
        elif type == "adamw":
            opt = torch.optim.AdamW(trainable, lr=lr, **params)
        elif type == "muon":
            adamw_lr = params.pop("adamw_lr", 3e-3)
            wd = params.pop("weight_decay", 0.0)
            hidden, rest = _muon_split(model)
            opt = CompositeOptimizer({
                "muon": torch.optim.Muon(hidden, lr=lr, weight_decay=wd, **params),
                "adamw": torch.optim.AdamW(rest, lr=adamw_lr, weight_decay=wd),
            })
        elif type in ("kfac-eigen", "kfac-iterative"):
            from brownformer.optim.kfac import KFAC
            inverse = "eigen" if type == "kfac-eigen" else "cg"
            opt = KFAC(model, lr=lr, inverse=inverse, **params)
        else:
            raise ValueError(f"unknown optimizer type {type!r}; known: {', '.join(OPTIMIZERS)}")
    except TypeError as exc:
        raise ValueError(f"optimizer {type!r}: bad parameter ({exc})") from None
    for group in opt.param_groups:
        group.setdefault("initial_lr", group["lr"])
    return opt
