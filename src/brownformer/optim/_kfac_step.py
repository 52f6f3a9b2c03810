"""Helpers of ``kfac.py``: argument checks, the rare paths of a step, the diagnostics.

The factor fold keeps its robustness rules on the device (no host read per step); layers without a
gradient take a per-layer path, which runs only when something is off.
"""
from __future__ import annotations

import torch

from brownformer.optim._base_update import BASES
from brownformer.optim._kfac_capture import FISHERS, LOSS_REDUCTIONS, SCOPES
from brownformer.optim._kfac_groups import LayerGroup
from brownformer.optim._kfac_math import WEIGHT_SHARING, finite_rows

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
    out["preconditioned"] = bool(out.get("preconditioned", False))
    return out


def fold_factor(running: torch.Tensor, batch: torch.Tensor, weight: float, updated: list[bool]
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold a stack of batch factors into the running ones, with the robustness rules on the device.

    ``F <- (1 - weight) F + weight F_batch`` per layer, except: a layer without a batch this step
    (``updated`` False) or with a non-finite batch factor keeps its running factor (the batch factor
    is dropped); a non-finite running factor restarts from its finite batch factor. Returns the new
    stack and the number of dropped non-finite batch factors (a 0-d tensor; no host read).
    """
    batch_finite = finite_rows(batch)  # (k,)
    use = batch_finite
    if not all(updated):
        mask = torch.tensor(updated, device=batch.device)
        use = use & mask
        dropped = (~batch_finite & mask).sum()
    else:
        dropped = (~batch_finite).sum()
    running_finite = finite_rows(running)[:, None, None]
    folded = torch.where(running_finite, running.lerp(batch, weight), batch)
    return torch.where(use[:, None, None], folded, running), dropped


def partial_view(group: LayerGroup, tensors: dict, present: list[int]) -> tuple[LayerGroup, dict, bool]:
    """The layers of ``group`` that got a gradient, with copies of their tensors (never written back).

    Their CG restarts cold next step, which changes speed, not results beyond the CG tolerance.
    """
    sub = LayerGroup([group.layers[j] for j in present], persistent=False)
    index = torch.tensor(present, device=group.device)
    return sub, {k: v[index] for k, v in tensors.items() if k != "cg_solution"}, False
