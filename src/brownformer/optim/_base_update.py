"""The first-order update K-FAC applies after preconditioning, per parameter group.

Preconditioned parameters take SGD with momentum on their K-FAC direction ``X`` (Martens & Grosse
2015 use momentum on the natural-gradient step). Parameters outside K-FAC's scope (LayerNorm,
embeddings, positions, CLS token, out-of-scope layers) take their group's ``base`` rule on the raw
gradient: ``"sgd"`` (same rule as above) or ``"adamw"`` (Loshchilov & Hutter 2019), the choice
being a measurement (benchmarks/results/tuning.md). Both are written with ``torch._foreach``
kernels (one kernel per operation and group, as torch.optim's ``foreach`` implementations) and
never read a tensor on the host.
"""
from __future__ import annotations

import torch

from brownformer.optim._kfac_math import host_read_free

_CONSTANTS: dict = {}  # (value, dtype, device) -> 0-d tensor: the update's scalars, made once rather than every step


def _constant(value: float, dtype: torch.dtype, device) -> torch.Tensor:
    """A 0-d tensor holding ``value``, shared between steps (never written: foreach ops only read their scalars)."""
    key = (value, dtype, device)
    tensor = _CONSTANTS.get(key)
    if tensor is None:
        if len(_CONSTANTS) > 256:  # bias corrections change every step: keep the cache small
            _CONSTANTS.clear()
        tensor = _CONSTANTS[key] = torch.tensor(value, dtype=dtype, device=device)
    return tensor


def _scalar(value: float, like: torch.Tensor):
    """``value`` for a foreach op on tensors like ``like``: a 0-d tensor for float32/float64 tensors on a device
    whose host reads are free (the CPU, ``_kfac_math.HOST_READ_FREE``), else the number.

    torch's CPU foreach ops turn a Python scalar into a tensor once per list element (a ``to`` copy each):
    with a 0-d tensor of the same dtype they run 3x faster (measured: 0.08 against 0.25 ms for 52 tensors)
    and give bit-identical results (the scalar is rounded to the tensor's dtype either way). Some overloads
    read the 0-d tensor on the host (``_foreach_add_``), hence only where that read is free."""
    if host_read_free(like.device) and like.dtype in (torch.float32, torch.float64):
        return _constant(value, like.dtype, None)
    return value


def _where(keep: torch.Tensor | bool | None, value: float, otherwise: float, like: torch.Tensor):
    """``value`` if ``keep`` (a 0-d bool tensor on the device; None: always; True: always, as the 0-d tensor a
    True ``keep`` selects) else ``otherwise``."""
    if keep is None:
        return value
    if keep is True:
        return _constant(value, like.dtype, like.device)
    return torch.where(keep, _constant(value, like.dtype, like.device), _constant(otherwise, like.dtype, like.device))


def _mask(grads: list[torch.Tensor], keep: torch.Tensor | bool | None) -> list[torch.Tensor]:
    """Gradients zeroed when ``keep`` is False (they may be non-finite then)."""
    return grads if keep is None or keep is True else [torch.where(keep, g, 0.0) for g in grads]


def sgd_momentum(params: list[torch.Tensor], directions: list[torch.Tensor], states: list[dict], *, lr: float,
                 momentum: float, weight_decay: float, keep: torch.Tensor | None = None) -> None:
    """``d <- d + wd p``; ``buf <- momentum buf + d`` (``buf = d`` at first); ``p <- p - lr buf``.

    ``directions`` may be the parameters' ``.grad`` tensors: they are never modified in place. With
    ``keep`` (a 0-d bool tensor) False the parameters and buffers stay as they were (``directions``
    must then be finite: zero), decided on the device.
    """
    if not params:
        return
    ds = directions
    if weight_decay:
        ds = torch._foreach_add(ds, params, alpha=weight_decay) if keep is None else \
            torch._foreach_add(ds, torch._foreach_mul(params, _where(keep, weight_decay, 0.0, params[0])))
    if momentum:
        old = [(s["momentum_buffer"], d) for s, d in zip(states, ds) if "momentum_buffer" in s]
        for s, d in zip(states, ds):
            if "momentum_buffer" not in s:
                s["momentum_buffer"] = d.clone()
        if old:
            bufs, old_ds = (list(t) for t in zip(*old))
            torch._foreach_mul_(bufs, _where(keep, momentum, 1.0, bufs[0]))
            torch._foreach_add_(bufs, old_ds)
        ds = [s["momentum_buffer"] for s in states]
    if keep is None:
        torch._foreach_add_(params, ds, alpha=-lr)
    else:
        torch._foreach_add_(params, torch._foreach_mul(ds, _where(keep, -lr, 0.0, params[0])))


def adamw(params: list[torch.Tensor], grads: list[torch.Tensor], states: list[dict], *, lr: float,
          betas: tuple[float, float], eps: float, weight_decay: float, step: int,
          keep: torch.Tensor | None = None) -> None:
    """AdamW with bias correction at ``step`` (counted from 1), as ``torch.optim.AdamW``.

    ``p <- p (1 - lr wd)``; ``m <- b1 m + (1 - b1) g``; ``v <- b2 v + (1 - b2) g^2``;
    ``p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``. With ``keep`` False nothing changes.
    """
    if not params:
        return
    beta1, beta2 = betas
    for s, p in zip(states, params):
        if "exp_avg" not in s:
            s["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            s["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    m = [s["exp_avg"] for s in states]
    v = [s["exp_avg_sq"] for s in states]
    grads = _mask(grads, keep)
    if weight_decay:
        torch._foreach_mul_(params, _where(keep, 1 - lr * weight_decay, 1.0, params[0]))
    if keep is None:
        torch._foreach_lerp_(m, grads, 1 - beta1)
        torch._foreach_mul_(v, beta2)
    else:  # grads are zero when not kept: m and v keep their values
        torch._foreach_mul_(m, _where(keep, beta1, 1.0, m[0]))
        torch._foreach_add_(m, grads, alpha=1 - beta1)
        torch._foreach_mul_(v, _where(keep, beta2, 1.0, v[0]))
    torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
    bias1, bias2 = 1 - beta1 ** step, 1 - beta2 ** step
    denom = torch._foreach_sqrt(v)
    torch._foreach_div_(denom, _scalar(bias2 ** 0.5, denom[0]))
    torch._foreach_add_(denom, _scalar(eps, denom[0]))
    if keep is None:
        torch._foreach_addcdiv_(params, m, denom, value=-lr / bias1)
    else:
        ratio = torch._foreach_div(m, denom)
        torch._foreach_mul_(ratio, _where(keep, -lr / bias1, 0.0, params[0]))
        torch._foreach_add_(params, ratio)


def apply_param_groups(param_groups: list[dict], state: dict, directions: dict[int, tuple[list, list]],
                       keep: torch.Tensor | None = None) -> None:
    """Every group's update: SGD with momentum on the preconditioned parameters' directions
    (``directions[i] = (params, directions)`` for group ``i``), the group's ``update`` rule on the raw
    gradient of its other parameters; parameters without a gradient are skipped. ``keep`` (a 0-d bool
    tensor): when False the step changes nothing (the directions must be zero then). ``keep=True`` (a
    Python bool: the caller read a True flag on the host) runs the masked arithmetic without its ``where``
    calls: the same operations on the same values as a True tensor, so the same results."""
    directed = {id(p) for params, _ in directions.values() for p in params}
    for i, group in enumerate(param_groups):
        pre, ds = directions.get(i, ([], []))
        if ds and ds[0].dtype != pre[0].dtype:
            ds = [d.to(p.dtype) for p, d in zip(pre, ds)]
        sgd_momentum(pre, ds, [state[p] for p in pre], lr=group["lr"], momentum=group["momentum"],
                     weight_decay=group["weight_decay"], keep=keep)
        raw = [p for p in group["params"] if p.grad is not None and id(p) not in directed]
        if group["update"] == "adamw":
            adamw(raw, [p.grad for p in raw], [state[p] for p in raw], lr=group["lr"], betas=group["betas"],
                  eps=group["eps"], weight_decay=group["weight_decay"], step=group["step"] + 1, keep=keep)
        else:
            sgd_momentum(raw, _mask([p.grad for p in raw], keep), [state[p] for p in raw], lr=group["lr"],
                         momentum=group["momentum"], weight_decay=group["weight_decay"], keep=keep)
