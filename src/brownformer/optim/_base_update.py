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

BASES = ("sgd", "adamw")


def sgd_momentum(params: list[torch.Tensor], directions: list[torch.Tensor], states: list[dict], *, lr: float,
                 momentum: float, weight_decay: float) -> None:
    """``d <- d + wd p``; ``buf <- momentum buf + d`` (``buf = d`` at first); ``p <- p - lr buf``.

    ``directions`` may be the parameters' ``.grad`` tensors: they are never modified in place.
    """
    if not params:
        return
    ds = directions
    if weight_decay:
        ds = torch._foreach_add(ds, params, alpha=weight_decay)
    if momentum:
        old = [(s["momentum_buffer"], d) for s, d in zip(states, ds) if "momentum_buffer" in s]
        for s, d in zip(states, ds):
            if "momentum_buffer" not in s:
                s["momentum_buffer"] = d.clone()
        if old:
            bufs, old_ds = (list(t) for t in zip(*old))
            torch._foreach_mul_(bufs, momentum)
            torch._foreach_add_(bufs, old_ds)
        ds = [s["momentum_buffer"] for s in states]
    torch._foreach_add_(params, ds, alpha=-lr)


def adamw(params: list[torch.Tensor], grads: list[torch.Tensor], states: list[dict], *, lr: float,
          betas: tuple[float, float], eps: float, weight_decay: float, step: int) -> None:
    """AdamW with bias correction at ``step`` (counted from 1), as ``torch.optim.AdamW``.

    ``p <- p (1 - lr wd)``; ``m <- b1 m + (1 - b1) g``; ``v <- b2 v + (1 - b2) g^2``;
    ``p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``.
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
    if weight_decay:
        torch._foreach_mul_(params, 1 - lr * weight_decay)
    torch._foreach_lerp_(m, grads, 1 - beta1)
    torch._foreach_mul_(v, beta2)
    torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
    bias1, bias2 = 1 - beta1 ** step, 1 - beta2 ** step
    denom = torch._foreach_sqrt(v)
    torch._foreach_div_(denom, bias2 ** 0.5)
    torch._foreach_add_(denom, eps)
    torch._foreach_addcdiv_(params, m, denom, value=-lr / bias1)


def apply_param_groups(param_groups: list[dict], state: dict, directions: dict) -> None:
    """Every group's update: SGD with momentum on ``directions[p]`` (preconditioned parameters), the
    group's ``update`` rule on the raw gradient of the others; parameters without a gradient are skipped."""
    for group in param_groups:
        with_grad = [p for p in group["params"] if p.grad is not None]
        pre = [p for p in with_grad if p in directions]
        raw = [p for p in with_grad if p not in directions]
        sgd_momentum(pre, [directions[p].to(p.dtype) for p in pre], [state[p] for p in pre], lr=group["lr"],
                     momentum=group["momentum"], weight_decay=group["weight_decay"])
        if group["update"] == "adamw":
            adamw(raw, [p.grad for p in raw], [state[p] for p in raw], lr=group["lr"], betas=group["betas"],
                  eps=group["eps"], weight_decay=group["weight_decay"], step=group["step"] + 1)
        else:
            sgd_momentum(raw, [p.grad for p in raw], [state[p] for p in raw], lr=group["lr"],
                         momentum=group["momentum"], weight_decay=group["weight_decay"])
