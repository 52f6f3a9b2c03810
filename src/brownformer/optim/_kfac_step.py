"""Helpers of ``kfac.py``, pure functions of tensors: the factor fold, the KL bound, the rare paths of a step, the
diagnostics.

The factor fold keeps its robustness rules on the device (no host read per step); layers without a
gradient take a per-layer path, which runs only when something is off.
"""
from __future__ import annotations

import torch

from brownformer.optim._kfac_groups import LayerGroup
from brownformer.optim._kfac_math import all_finite, finite_rows, host_read_free, kl_clip_scale

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


def fold_factors(folds: list[tuple[torch.Tensor, torch.Tensor, list[bool]]], weight: float
                 ) -> tuple[list[torch.Tensor], torch.Tensor | int]:
    """:func:`fold_factor` of every ``(running, batch, updated)`` of a step, and the dropped batch factors in all.

    Where a host read is free (``_kfac_math.HOST_READ_FREE``) and every layer has a batch and every factor is finite
    (the usual step), each fold is ``running.lerp(batch, weight)``, which is what :func:`fold_factor`'s rules select
    then: the same values without its per-stack checks; the count is then the int 0."""
    if host_read_free(folds[0][0].device) and all(all(updated) for _, _, updated in folds) \
            and bool(all_finite([t for running, batch, _ in folds for t in (running, batch)])):
        return [running.lerp(batch, weight) for running, batch, _ in folds], 0
    out = [fold_factor(running, batch, weight, updated) for running, batch, updated in folds]
    return [f for f, _ in out], torch.stack([d for _, d in out]).sum()


def partial_view(group: LayerGroup, tensors: dict, present: list[int]) -> tuple[LayerGroup, dict, bool]:
    """The layers of ``group`` that got a gradient, with copies of their tensors (never written back).

    Their CG restarts cold next step, which changes speed, not results beyond the CG tolerance.
    """
    sub = LayerGroup([group.layers[j] for j in present], persistent=False)
    index = torch.tensor(present, device=group.device)
    return sub, {k: v[index] for k, v in tensors.items() if k != "cg_solution"}, False


def bound_scales(v: list[torch.Tensor], xs: list[torch.Tensor], lr0_sq: list[torch.Tensor], owners: list[list[int]],
                 clips: list[float | None]) -> tuple[list[torch.Tensor], torch.Tensor, bool]:
    """KL-bound factors ``nu`` per item, each param group bounded by its own bound over its own layers.

    ``nu_p = min(1, sqrt(clip_p / sum_{l in p} lr0_l^2 <V_l, X_l>))`` (``_kfac_math.kl_clip_scale``);
    ``owners[i][j]`` is the index of item ``i``'s layer ``j``'s param group, ``clips[p]`` that group's bound (None:
    unbounded), ``lr0_sq[i]`` the item's ``(k, 1, 1)`` squared base lrs. Returns the factors (0-d, or ``(k, 1, 1)``
    when an item's layers have different groups), the smallest ``nu`` (0-d) and whether any group is bounded.
    """
    groups = list(dict.fromkeys(p for item in owners for p in item))  # the groups in use, first-seen order
    if len(groups) == 1:  # the usual case: one bound over every layer (one sum, as kfac-pytorch)
        clip = clips[groups[0]]
        vg = torch.stack([(l * vj * x).sum() for l, vj, x in zip(lr0_sq, v, xs)]).sum()
        nu = kl_clip_scale(vg, kl_clip=clip)
        return [nu] * len(v), nu, clip is not None
    position = {p: i for i, p in enumerate(groups)}
    used = [clips[p] for p in groups]
    vg = torch.zeros(len(groups), dtype=v[0].dtype, device=v[0].device)
    where = []
    for item, l, vj, x in zip(owners, lr0_sq, v, xs):
        index = torch.tensor([position[p] for p in item], device=vj.device)
        vg = vg.index_add(0, index, (l * vj * x).sum(dim=(1, 2)))
        where.append(index)
    nus = torch.stack([kl_clip_scale(vg[i], kl_clip=clip) for i, clip in enumerate(used)])  # (groups,)
    return [nus[index][:, None, None] for index in where], nus.min(), any(c is not None for c in used)


def trust_region_scales(weights: torch.Tensor, x: torch.Tensor, step_scale: torch.Tensor, bound: float) -> torch.Tensor:
    """Per-layer factors ``(k, 1, 1)`` that shorten each layer's step ``step_scale * x_l`` to at most ``bound`` times
    the norm of its parameters ``weights_l`` (both ``(k, out, in[+1])``; ``step_scale`` 0-d or ``(k, 1, 1)``, the lr
    times the KL-bound factor); 1 where the step is within it or the parameters are zero (a zero-initialised layer
    must be able to leave zero). Why: the KL bound limits the step's predicted change of the model's output, which a
    layer with almost no curvature (a post-LN block's MLP at initialisation) meets with a step many times its weights;
    the quadratic model no longer holds there, and compounded over a few steps such steps killed the ViT (issue 33)."""
    step = step_scale * torch.linalg.vector_norm(x, dim=(1, 2), keepdim=True)
    limit = bound * torch.linalg.vector_norm(weights, dim=(1, 2), keepdim=True)
    binding = (limit > 0) & (step > limit)
    return torch.where(binding, limit / torch.where(binding, step, 1.0), 1.0)


def solve_items(groups: list[LayerGroup], cur: dict) -> list:
    """``(group, tensors, persistent)`` for every shape group with gradients (sub-groups for the
    rare layers without one, which are solved but never written back)."""
    items = []
    for g in groups:
        present = [j for j, m in enumerate(g.layers) if m.module.weight.grad is not None]
        if len(present) == len(g):
            items.append((g, cur[g], True))
        elif present:
            items.append(partial_view(g, cur[g], present))
    return items


def stacked_gradients(items: list) -> list[torch.Tensor]:
    """``V = [dL/dW, dL/db]`` per item ``(group, tensors, persistent)``, ``(k, out, in[+1])`` in the factor dtype: a
    whole group's gradients copied into its kept buffer (``LayerGroup.buffer``; one foreach copy for every group), a
    partial group's stacked (``LayerGroup.gradients``). The buffers are rewritten by the next step."""
    targets, sources, out = [], [], []
    for sub, _, persistent in items:
        if not persistent:
            out.append(sub.gradients())
            continue
        stack, views = sub.buffer("gradient")
        targets += views
        sources += [p.grad for p in sub.params()]
        out.append(stack)
    if targets:
        torch._foreach_copy_(targets, sources)
    return out


def commit(groups: list[LayerGroup], state: dict, new: dict, cur: dict) -> None:
    """Store what a step made (new factors, fresh decompositions or preconditioners, CG solutions) as each
    group's stacks and per-layer state views; running factors only where a batch was folded in."""
    for g in groups:
        for key, value in cur[g].items():
            if key in g.stacks and value is g.stacks[key]:
                continue
            if key in ("factor_a", "factor_g") and g not in new:
                continue
            g.bind(state, key, value)
