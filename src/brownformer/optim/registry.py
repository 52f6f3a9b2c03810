"""Optimizer registry: config name -> builder and the config keys it takes (registered once).

Each :class:`OptimizerEntry` carries the keys a config may give the optimizer besides ``type`` and
``lr``; the schema's ``optimizers`` properties and ``type`` enum are checked against this registry
by a test (tests/optim/test_registry.py), and ``brownformer.config`` rejects a key the entry does
not list. To add an optimizer: one entry here (a builder and its keys), its keys in the schema.

Every optimizer exposes ``param_groups`` whose groups carry ``initial_lr``, so one learning-rate
schedule (brownformer.train.lr_factor) drives all of them, composite ones included. This module
imports torch only inside the builders, so ``brownformer.config`` can read the keys cheaply.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from brownformer.optim.kfac_settings import (CONFIG_DEFAULTS as _KFAC_CONFIG_DEFAULTS, CONFIG_KEYS as _KFAC_KEYS,
                                             DEFAULTS as _KFAC_DEFAULTS)

__all__ = ["OPTIMIZERS", "REGISTRY", "OptimizerEntry", "build_optimizer", "default_momentum", "implementation_flags"]

@dataclass(frozen=True)
class OptimizerEntry:
    """One optimizer type: how to build it and which config keys (besides type, lr) it takes."""

    name: str
    build: Callable[..., Any]  # (model, lr, params: dict) -> torch.optim.Optimizer
    keys: tuple[str, ...]
    # (device, cuda_graphs) -> constructor flags choosing the fastest implementation there (not science:
    # the same update); None: the optimizer has no such choice
    implementation: Callable[..., dict] | None = None


def _sgd(model, lr, params):
    import torch
    return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr, **params)


def _adamw(model, lr, params):
    import torch
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, **params)


def _adamw_implementation(device, cuda_graphs: bool) -> dict:
    """torch.optim.AdamW flags for `device`: the fastest implementation it has.

    CUDA: `fused` (one kernel for all parameters), plus `capturable` (step counters on the device)
    when the step is captured. CPU: `foreach` (one call per operation over all parameters), which
    gives the same numbers as the per-parameter loop bit for bit.
    """
    if device.type == "cuda":
        return {"fused": True, "capturable": True} if cuda_graphs else {"fused": True}
    return {"foreach": True}


def _muon_split(model) -> tuple[list, list]:
    """Muon takes 2-D weights of hidden nn.Linear layers; embeddings, the patch embedding, the
    head, biases, LayerNorm and positional parameters go to AdamW (Jordan et al. 2024)."""
    import torch.nn as nn
    hidden_ids = {id(m.weight) for name, m in model.named_modules()
                  if isinstance(m, nn.Linear) and name.startswith("blocks.")}
    hidden = [p for p in model.parameters() if p.requires_grad and id(p) in hidden_ids]
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in hidden_ids]
    return hidden, rest


def _muon(model, lr, params):
    import torch
    from brownformer.optim._composite import CompositeOptimizer
    adamw_lr = params.pop("adamw_lr", 3e-3)
    wd = params.pop("weight_decay", 0.0)
    hidden, rest = _muon_split(model)
    return CompositeOptimizer({"muon": torch.optim.Muon(hidden, lr=lr, weight_decay=wd, **params),
                               "adamw": torch.optim.AdamW(rest, lr=adamw_lr, weight_decay=wd)})


def _kfac(inverse: str):
    def build(model, lr, params):  # a key the config omits: the default its runs were trained with (CONFIG_DEFAULTS)
        from brownformer.optim.kfac import KFAC
        return KFAC(model, lr=lr, inverse=inverse, **{**_KFAC_CONFIG_DEFAULTS, **params})
    return build


REGISTRY: dict[str, OptimizerEntry] = {e.name: e for e in (
    OptimizerEntry("sgd", _sgd, ("momentum", "nesterov", "weight_decay")),
    OptimizerEntry("adamw", _adamw, ("betas", "eps", "weight_decay"), implementation=_adamw_implementation),
    OptimizerEntry("muon", _muon, ("adamw_lr", "weight_decay", "momentum", "nesterov")),
    OptimizerEntry("kfac-eigen", _kfac("eigen"), _KFAC_KEYS),
    OptimizerEntry("kfac-iterative", _kfac("cg"), _KFAC_KEYS),
)}
OPTIMIZERS = tuple(REGISTRY)


def implementation_flags(type: str, device, *, cuda_graphs: bool = False) -> dict:
    """The constructor flags that pick the fastest implementation of optimizer ``type`` on ``device``
    (a torch.device); empty for an optimizer without such a choice."""
    entry = REGISTRY[type]
    return entry.implementation(device, cuda_graphs) if entry.implementation else {}


def build_optimizer(model, type: str, lr: float, params: Mapping[str, Any] | None = None):
    """Build the optimizer ``type`` with learning rate ``lr`` and the config's extra ``params``.

    Raises:
        ValueError: unknown type or a parameter the optimizer does not take (names the key).
    """
    if type not in REGISTRY:
        raise ValueError(f"unknown optimizer type {type!r}; known: {', '.join(OPTIMIZERS)}")
    params = {k: (tuple(v) if isinstance(v, list) else v) for k, v in (params or {}).items()}
    try:
        opt = REGISTRY[type].build(model, lr, params)
    except TypeError as exc:
        raise ValueError(f"optimizer {type!r}: bad parameter ({exc})") from None
    for group in opt.param_groups:
        group.setdefault("initial_lr", group["lr"])
    return opt


# heavy-ball momentum an optimizer uses when its config gives none (AdamW's is beta1, not listed here)
_DEFAULT_MOMENTUM = {"sgd": 0.0, "muon": 0.95, "kfac-eigen": _KFAC_DEFAULTS["momentum"],
                     "kfac-iterative": _KFAC_DEFAULTS["momentum"]}


def default_momentum(type: str) -> float:
    """The momentum optimizer ``type`` uses by default (SGD's 0, torch.optim.Muon's 0.95, K-FAC's
    ``optim.kfac_settings``), without importing torch or the optimizer."""
    if type not in _DEFAULT_MOMENTUM:
        raise ValueError(f"optimizer {type!r} has no heavy-ball momentum default; known: {', '.join(_DEFAULT_MOMENTUM)}")
    return _DEFAULT_MOMENTUM[type]
