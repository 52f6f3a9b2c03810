"""Helpers of ``kfac.py``: argument checks, the rare paths of a step, the diagnostics.

The rare paths (per-layer factor folding after a failed check, layers without a gradient) run only
when something is off, where host checks per layer are affordable.
"""
from __future__ import annotations

import logging

import torch

from brownformer.optim._base_update import BASES
from brownformer.optim._kfac_capture import FISHERS, LOSS_REDUCTIONS, SCOPES
from brownformer.optim._kfac_groups import LayerGroup
from brownformer.optim._kfac_math import WEIGHT_SHARING

logger = logging.getLogger(__name__)

INVERSES = ("eigen", "cg")


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def check_arguments(*, lr, damping, inverse, factor_decay, factor_every, inverse_every, cg_max_iter, cg_tol,
                    weight_sharing, scope, momentum, weight_decay, kl_clip, fisher, loss_reduction, rest_update,
                    rest_lr, n_heads, adapt_every, max_failures) -> None:
    """Validate ``KFAC``'s arguments, each with a ValueError naming it."""
    _check(lr >= 0, f"lr must be >= 0, got {lr}")
    _check(damping > 0, f"damping must be > 0, got {damping}")
    _check(inverse in INVERSES, f"inverse must be one of {INVERSES}, got {inverse!r}")
    _check(0 <= factor_decay < 1, f"factor_decay must be in [0, 1), got {factor_decay}")
    _check(int(factor_every) == factor_every >= 1, f"factor_every must be an int >= 1, got {factor_every}")
    _check(int(inverse_every) == inverse_every >= 1, f"inverse_every must be an int >= 1, got {inverse_every}")
    _check(int(cg_max_iter) == cg_max_iter >= 1, f"cg_max_iter must be an int >= 1, got {cg_max_iter}")
    _check(cg_tol > 0, f"cg_tol must be > 0, got {cg_tol}")
    _check(weight_sharing in WEIGHT_SHARING, f"weight_sharing must be one of {WEIGHT_SHARING}, got {weight_sharing!r}")
    _check(scope in SCOPES, f"scope must be one of {SCOPES}, got {scope!r}")
    _check(0 <= momentum < 1, f"momentum must be in [0, 1), got {momentum}")
    _check(weight_decay >= 0, f"weight_decay must be >= 0, got {weight_decay}")
    _check(kl_clip is None or kl_clip > 0, f"kl_clip must be > 0 or None, got {kl_clip}")
    _check(fisher in FISHERS, f"fisher must be one of {FISHERS}, got {fisher!r}")
    _check(loss_reduction in LOSS_REDUCTIONS, f"loss_reduction must be one of {LOSS_REDUCTIONS}, got {loss_reduction!r}")
    _check(rest_update in BASES, f"rest_update must be one of {BASES}, got {rest_update!r}")
    _check(rest_lr is None or rest_lr >= 0, f"rest_lr must be >= 0, got {rest_lr}")
    _check(n_heads is None or n_heads >= 1, f"n_heads must be >= 1, got {n_heads}")
    _check(int(adapt_every) == adapt_every >= 0, f"adapt_every must be an int >= 0, got {adapt_every}")
    _check(int(max_failures) == max_failures >= 0, f"max_failures must be an int >= 0, got {max_failures}")


def materialise_stats(stats: dict, totals: dict) -> dict:
    """The last step's diagnostics as plain numbers (the device values are read here, once)."""
    out = {}
    for key, value in {**stats, **{f"{k}_total": v for k, v in totals.items()}}.items():
        out[key] = value.item() if isinstance(value, torch.Tensor) and value.dim() == 0 else value
    iters = out.pop("cg_iterations", None)
    has_iters = isinstance(iters, torch.Tensor) and iters.numel() > 0
    out["cg_iterations_mean"] = float(iters.float().mean()) if has_iters else 0.0
    out["cg_iterations_max"] = int(iters.max()) if has_iters else 0
    steps = max(out.get("step", 0) + 1 - out.get("failures_total", 0), 1)
    out["kl_clip_binding_fraction"] = out.get("kl_clip_binding_steps_total", 0) / steps
    return out


def fold_per_layer(groups: list[LayerGroup], state: dict, batches: list, weight: float) -> int:
    """Fold batch factors layer by layer with the robustness rules; returns how many were dropped.

    A non-finite batch factor is dropped (the running factor stays); a non-finite running factor
    restarts from its (finite) batch factor; otherwise ``F <- (1 - weight) F + weight F_batch``.
    """
    dropped = 0
    for group, a, g, updated in batches:
        for key, factor, batch in zip(("factor_a", "factor_g"), group.factors(state), (a, g)):
            for j, layer in enumerate(group.layers):
                if not updated[j]:
                    continue
                if not bool(torch.isfinite(batch[j]).all()):
                    logger.warning("non-finite %s batch factor in %s: dropped", key, layer.name)
                    dropped += 1
                elif not bool(torch.isfinite(factor[j]).all()):
                    logger.warning("non-finite running %s in %s: restarted from the batch", key, layer.name)
                    factor[j].copy_(batch[j])
                else:
                    factor[j].lerp_(batch[j], weight)
    return dropped


def partial_view(group: LayerGroup, tensors: dict, present: list[int]) -> tuple[LayerGroup, dict, bool]:
    """The layers of ``group`` that got a gradient, with copies of their tensors (never written back).

    Their CG restarts cold next step, which changes speed, not results beyond the CG tolerance.
    """
    sub = LayerGroup([group.layers[j] for j in present], persistent=False)
    index = torch.tensor(present, device=group.device)
    return sub, {k: v[index] for k, v in tensors.items() if k != "cg_solution"}, False
