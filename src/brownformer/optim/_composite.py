"""Several optimizers stepping disjoint parameter sets as one (Muon on hidden weights + AdamW)."""
from __future__ import annotations

from typing import Mapping

import torch

__all__ = ["CompositeOptimizer"]


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
