"""K-FAC for nn.Linear layers with an eigen (exact) or conjugate-gradient (iterative) inverse.

One step, for every preconditioned layer with gradient ``V = dL/d[W, b]`` (Martens & Grosse 2015;
Grosse & Martens 2016; the iterative variant of arXiv 2101.00218; docs/methods/kfac.md):

1. factors, every ``factor_every`` steps: ``F <- (1 - w) F + w F_batch`` from zero, with
   ``w = max(1 - rho^factor_every, 1/n)`` at the ``n``-th update (``_kfac_math.factor_weight``). ``G``
   comes from labels sampled from the model (``fisher="sampled"``, the true Fisher; default) or from
   the training labels (``"empirical"``), scaled by the loss's reduction (``loss_reduction``);
2. solve ``G X A + lambda X = V`` (``lambda`` the group's ``damping``): ``inverse="eigen"`` exactly, from
   eigendecompositions refreshed every ``inverse_every`` steps (for the factors of the last refresh);
   ``inverse="cg"`` for the current factors by truncated conjugate gradient with no eigendecomposition
   (``_kfac_pcg``): preconditioned by the inverses of the factored-damped factors, which Newton-Schulz
   iterations (matrix products) update from the previous ones when the factors or the damping change,
   with a per-block budget of iterations (set at each check);
3. step bound (KL-clip, on by default): ``X <- nu X``, ``nu = min(1, sqrt(kl_clip / sum_l lr0_l^2
   <V_l, X_l>))`` with the groups' base lrs, so the schedule still scales a bound step; each param group
   is bounded by its own ``kl_clip`` over its own layers;
4. base update (``_base_update``): SGD with momentum on ``X`` for preconditioned parameters; the
   group's ``update`` rule (``"sgd"`` or ``"adamw"``) on the raw gradient of every other parameter;
5. every ``adapt_every`` steps: a snapshot of the state, and with a closure (``step(closure)``) the
   Levenberg-Marquardt update of ``damping`` from the reduction ratio (``_kfac_control``).

Settings per parameter group (``param_groups``, like ``lr``; a schedule edits them between steps):
``lr``, ``momentum``, ``weight_decay``, ``damping``, ``kl_clip``, ``update``, ``betas``, ``eps``.
A layer uses the group that holds its weight.

Robustness (``_kfac_control``), with no host read in a step (on the CPU a few free reads skip known work,
``_kfac_math.HOST_READ_FREE``): a failed step (non-finite gradient or
solve) is skipped on the device (its update is masked) and counted; the host handles it at the next
check (every ``adapt_every`` steps, or a read of ``last_stats``): restore the last good snapshot, raise
the damping x10, refresh the factors; ``max_failures`` failed checks in a row raise
``FloatingPointError``. A non-finite batch factor is dropped on the device. A diverged CG system falls
back to its raw gradient, on the device.

Hooks (``_kfac_capture``) only keep tensors; ``remove_hooks()`` removes them, and a second K-FAC on
the same model (or the garbage collection of this one) removes this one's hooks.
"""

from __future__ import annotations

import time
import warnings
from collections import defaultdict

import torch
import torch.nn as nn
from torch.optim import Optimizer

from brownformer.optim import _kfac_control as control
from brownformer.optim._base_update import apply_param_groups
from brownformer.optim._kfac_capture import FactorCapture, find_layers, unpreconditioned_weights
from brownformer.optim._kfac_groups import PRECONDITIONER_KEYS, group_layers
from brownformer.optim._kfac_lookup import KFACLookups
from brownformer.optim._kfac_math import all_finite, factor_scale, factor_weight, host_read_free
from brownformer.optim._kfac_solve import (NEWTON_SCHULZ_COLD, NEWTON_SCHULZ_WARM, IterativeSolver, eigen_directions,
                                           refresh_eigenbases, refresh_preconditioner)
from brownformer.optim._kfac_state import KFACPersistence
from brownformer.optim.defaults import DEFAULT_DAMPING, DEFAULT_LR, DEFAULT_MOMENTUM, DEFAULT_REST_LR
from brownformer.optim._kfac_step import (bound_scales, check_arguments, commit, fold_factor, materialise_stats,
                                          solve_items)

__all__ = ["KFAC", "DEFAULT_LR", "DEFAULT_DAMPING"]



class KFAC(KFACPersistence, KFACLookups, Optimizer):
    """K-FAC optimizer (eigen or iterative/CG inverse) for any model made of ``nn.Linear`` layers.

    Usage is that of any ``torch.optim`` optimizer: ``opt.zero_grad(); loss.backward(); opt.step()``;
    ``opt.step(closure)`` (closure: zero_grad, forward, ``backward()`` only when
    ``torch.is_grad_enabled()``, return the loss) also adapts the damping, evaluating the closure a
    second time under ``torch.no_grad()`` every ``adapt_every`` steps.

    Args:
        model: The model; hooks are registered on its in-scope ``nn.Linear`` layers and on the packed Q, K, V
            projection of every ``nn.MultiheadAttention`` (self-attention; ``_kfac_packed``). A warning lists every
            weight of 2 or more dimensions left to the rest update, and why.
        lr: Learning rate (``>= 0``) of the preconditioned layers (default ``DEFAULT_LR``).
        params: Optional param groups (dicts with ``"params"`` and any group setting), as for
            ``torch.optim``; default: one group for the preconditioned layers and one for the rest.
        damping: Initial ``lambda`` in ``G X A + lambda X = V`` (``DEFAULT_DAMPING``; adapted by
            Levenberg-Marquardt when ``step`` gets a closure; the author's code used a fixed 3e-3).
        inverse: ``"eigen"`` or ``"cg"`` (the paper's iterative K-FAC).
        factor_decay: Decay ``rho`` per step of the running factors, in ``[0, 1)`` (0.95).
        factor_every: Collect factors every this many steps (1).
        inverse_every: Eigendecompose every this many steps (10; ``eigen`` only: ``cg`` never does).
        cg_max_iter: Cap of the CG iteration budget per block (10, author's code); the budget a step
            runs is the most iterations a system needed in the last check window (``_kfac_control``).
        cg_tol: CG relative-residual tolerance that freezes a system (1e-2, author's code).
        warm_start: Start CG from the previous step's solution (False: it costs one operator application
            and the Kronecker preconditioner's first iterate is already close).
        weight_sharing: ``"expand"`` or ``"reduce"`` (Eschenhagen et al. 2023).
        per_head: Block-diagonal ``G`` per head for the attention Q, K, V projections.
        scope: ``"all"``, ``"attention"`` or ``"mlp"`` (rule in ``_kfac_capture``).
        momentum: SGD momentum in ``[0, 1)`` (``DEFAULT_MOMENTUM``).
        weight_decay: Weight decay ``>= 0`` (coupled for SGD, decoupled for AdamW).
        kl_clip: Step bound ``> 0`` at the base lr (1e-3, kfac-pytorch's default) or None (off).
        fisher: ``"sampled"`` (labels sampled from the model: the true Fisher; default) or
            ``"empirical"`` (training labels); ``"mc"`` is an alias of ``"sampled"``.
        loss_reduction: ``"mean"`` (the loss averages every row of the model output, e.g.
            ``F.cross_entropy`` on ``(B, T, C)`` logits) or ``"batch"`` (it averages over dim 0 only).
        rest_update: ``"sgd"`` or ``"adamw"`` (default) for parameters K-FAC does not precondition.
        rest_lr: Learning rate of those parameters (default ``DEFAULT_REST_LR`` for AdamW, ``lr`` for SGD).
        betas, eps: AdamW settings of ``rest_update="adamw"``.
        n_heads: Head count for ``per_head`` (else read from the attention module).
        seed: Seed of the generator that samples the labels of ``fisher="sampled"``.
        adapt_every: Damping adaptation and snapshot period in steps (5; 0: neither).
        max_failures: Checks in a row that find failed steps before ``FloatingPointError`` (5).
        relative_damping: ``lambda`` of each layer is ``damping`` times its mean Kronecker eigenvalue
            ``(tr A / n_A)(tr G / n_G)`` (False: ``damping`` itself, the same for every layer).

    Raises:
        ValueError: On an invalid argument or when no ``nn.Linear`` layer is in scope.

    Attributes:
        last_stats: Diagnostics of the last step (read on access: reading them costs one host sync).
        timings: Accumulated host seconds ``{"factors", "inverse", "apply"}``.
    """

    def __init__(self, model: nn.Module, lr: float = DEFAULT_LR, *, params: list[dict] | None = None,
                 damping: float = DEFAULT_DAMPING, inverse: str = "eigen", factor_decay: float = 0.95, factor_every: int = 1,
                 inverse_every: int = 10, cg_max_iter: int = 10, cg_tol: float = 1e-2, warm_start: bool = False,
                 weight_sharing: str = "expand", per_head: bool = False, scope: str = "all",
                 momentum: float = DEFAULT_MOMENTUM, weight_decay: float = 0.0, kl_clip: float | None = 1e-3,
                 fisher: str = "sampled", loss_reduction: str = "mean", rest_update: str = "adamw",
                 rest_lr: float | None = None, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 n_heads: int | None = None, seed: int = 0, adapt_every: int = 5, max_failures: int = 5,
                 relative_damping: bool = False):
        fisher = {"mc": "sampled"}.get(fisher, fisher)
        check_arguments(lr=lr, damping=damping, inverse=inverse, factor_decay=factor_decay,
                        factor_every=factor_every, inverse_every=inverse_every, cg_max_iter=cg_max_iter,
                        cg_tol=cg_tol, weight_sharing=weight_sharing, scope=scope, momentum=momentum,
                        weight_decay=weight_decay, kl_clip=kl_clip, fisher=fisher, loss_reduction=loss_reduction,
                        rest_update=rest_update, rest_lr=rest_lr, n_heads=n_heads, adapt_every=adapt_every,
                        max_failures=max_failures)
        self.layers = find_layers(model, scope=scope, per_head=per_head, n_heads=n_heads)
        left = unpreconditioned_weights(model, self.layers, scope)
        if left:  # said once per optimizer: a weight silently left to the first-order update hides a lost preconditioner
            warnings.warn(f"K-FAC preconditions {len(self.layers)} layer(s) and leaves these {len(left)} weight(s) of 2 "
                          f"or more dimensions to the rest update ({rest_update!r}): "
                          + "; ".join(f"{name} ({why})" for name, why in left), stacklevel=2)
        if params is None:
            mine = {id(p) for m in self.layers for p in m.module.parameters() if p.requires_grad}
            rest = [p for p in model.parameters() if p.requires_grad and id(p) not in mine]
            params = [{"params": [p for m in self.layers for p in m.module.parameters() if p.requires_grad]}]
            if rest:
                default_rest = DEFAULT_REST_LR if rest_update == "adamw" else lr
                params.append({"params": rest, "update": rest_update,
                               "lr": default_rest if rest_lr is None else rest_lr})
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, damping=damping, kl_clip=kl_clip,
                        update="sgd", betas=tuple(betas), eps=eps, step=0)
        super().__init__(params, defaults)
        for group in self.param_groups:  # the KL bound and the damping's floor refer to these (see _kfac_control)
            group.setdefault("initial_lr", group["lr"])
            group.setdefault("initial_damping", group["damping"])
        self.inverse, self.factor_decay = inverse, factor_decay
        self.factor_every, self.inverse_every = int(factor_every), int(inverse_every)
        self.cg_max_iter, self.cg_tol, self.warm_start = int(cg_max_iter), cg_tol, warm_start
        self.weight_sharing, self.fisher, self.loss_reduction = weight_sharing, fisher, loss_reduction
        self.adapt_every, self.max_failures = int(adapt_every), int(max_failures)
        self.relative_damping = bool(relative_damping)
        device = self.layers[0].module.weight.device
        self.generator = torch.Generator(device=device).manual_seed(seed) if fisher == "sampled" else None
        self.groups = group_layers(self.layers)
        self.capture = FactorCapture(model, self.layers, fisher=fisher, loss_reduction=loss_reduction,
                                     generator=self.generator)
        self.factor_updates, self.failures = 0, 0
        self.good: control.Snapshot | None = None
        self.timings = {"factors": 0.0, "inverse": 0.0, "apply": 0.0}
        self.cg_budget: list[int] = []  # CG iterations per block a step runs; set at each check (_kfac_control)
        self.watch = control.Watch(device)  # what the device saw since the last host check
        self._iterative = IterativeSolver(tol=cg_tol, warm_start=warm_start)
        self._stats: dict = {}
        self._layer_groups = None  # (number of param groups, {id(weight): group})
        self._tensor_cache: dict = {}
        self._index_cache: dict = {}  # per shape group: its layers' param groups and indices
        self._totals: dict = defaultdict(int)  # python ints, or 0-d tensors summed on the device

    # ---- API ---------------------------------------------------------------------------------
    @property
    def wants_closure(self) -> bool:
        """Whether ``step`` uses a closure (to adapt the damping); training loops pass one when True."""
        return self.adapt_every > 0

    @property
    def bounds_its_step(self) -> bool:
        """Whether the KL bound is on in every group (then global gradient clipping is not needed)."""
        return all(group["kl_clip"] is not None for group in self.param_groups)

    def remove_hooks(self) -> None:
        """Remove the factor-collecting hooks from the model (the optimizer keeps its factors)."""
        self.capture.remove()

    @property
    def last_stats(self) -> dict:
        """The last step's diagnostics as plain numbers (materialised here, not in ``step``); a host read,
        so failures the device recorded since the last check are handled here first (``_kfac_control``)."""
        control.check(self, self.param_groups[0]["step"] - 1)
        return materialise_stats(self._stats, self._totals)

    def state_changed(self) -> None:
        """Drop what ``step`` derives from the state and keeps between steps (padded copies of the factors, the
        CG preconditioner's freshness); call it after editing a factor or an eigenbasis in ``state`` in place."""
        self._iterative.clear()
        for g in self.groups:
            g.preconditioned_for = None

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    # ---- one step ----------------------------------------------------------------------------
    def _new_factors(self) -> tuple[dict, list]:
        """Running factors after folding this step's batch: ``{group: (A, G)}`` (temporaries) and the
        batch factors ``[(group, A_b, G_b, updated)]`` (empty when nothing was collected).

        Robust on the device, layer by layer: a non-finite batch factor is dropped (the running factor
        stays, counted in ``dropped_factors``), a non-finite running factor restarts from its batch factor."""
        start = time.perf_counter()
        batches = []
        if any(m.inputs or m.output_grads for m in self.layers):
            batches = [(g, *g.batch_factors(self.weight_sharing, self.capture.scale)) for g in self.groups]
            for layer in self.layers:
                layer.reset()
        new = {}
        if batches:
            w = factor_weight(self.factor_updates + 1, decay=self.factor_decay, every=self.factor_every)
            dropped = []
            for g, a, gg, updated in batches:
                pairs = [fold_factor(f, b, w, updated) for f, b in zip(g.factors(self.state), (a, gg))]
                new[g] = tuple(f for f, _ in pairs)
                dropped += [d for _, d in pairs]
            self._totals["dropped_factors"] = self._totals["dropped_factors"] + torch.stack(dropped).sum()
            self.watch.add(dropped=torch.stack(dropped).sum())
        self.timings["factors"] += time.perf_counter() - start + self.capture.seconds
        self.capture.seconds = 0.0
        return new, batches

    def _current(self, new: dict, step: int) -> dict:
        """Per shape group, the tensors this step solves with: the new factors and, for ``eigen``, the
        (possibly fresh) eigendecompositions; for ``cg``, the (possibly refreshed) preconditioner."""
        start = time.perf_counter()
        cur = {}
        for g in self.groups:
            a, gg = new.get(g) or g.factors(self.state)
            cur[g] = {"factor_a": a, "factor_g": gg}
        self._decomposed_finite = []
        if self.inverse == "eigen":
            self._eigen_bases(cur, new, step)
        else:
            self._preconditioners(cur, new)
        self.timings["inverse"] += time.perf_counter() - start
        return cur

    def _eigen_bases(self, cur: dict, new: dict, step: int) -> None:
        n = self.factor_updates + 1
        # while the running factors are a plain mean of few batches they change fast, and an
        # eigenbasis of the first batch kept for inverse_every steps would divide new directions by
        # lambda: refresh at factor updates 1, 2, 4, 8, ... until the average settles
        warming = factor_weight(n, decay=self.factor_decay, every=self.factor_every) \
            > 1 - self.factor_decay ** self.factor_every and n & (n - 1) == 0
        refresh = [g for g in self.groups
                   if "eigenvalues_a" not in g.stacks or step % self.inverse_every == 0 or (g in new and warming)]
        self._decomposed_finite = refresh_eigenbases(cur, self.groups, refresh)

    def _preconditioners(self, cur: dict, new: dict) -> None:
        """CG's preconditioner per shape group, refreshed by Newton-Schulz (no eigendecomposition) where the
        factors or the damping changed since the last refresh; a non-finite one fails the step."""
        for g in self.groups:
            dampings = tuple(self._group_of(m)["damping"] for m in g.layers)
            have = all(k in g.stacks for k in PRECONDITIONER_KEYS)
            if have:
                cur[g].update({k: g.stacks[k] for k in PRECONDITIONER_KEYS})
            if "cg_solution" in g.stacks:
                cur[g]["cg_solution"] = g.stacks["cg_solution"]
            if have and g not in new and g.preconditioned_for == dampings:
                continue
            lam = self._damping(g.layers, cur[g], g.dtype, g.device)
            refresh_preconditioner(cur[g], lam, steps=NEWTON_SCHULZ_WARM if have else NEWTON_SCHULZ_COLD)
            g.preconditioned_for = dampings
            self._decomposed_finite += [torch.isfinite(cur[g][k].sum()) for k in PRECONDITIONER_KEYS]

    def _damping(self, layers, tensors: dict, dtype, device) -> torch.Tensor:
        """``(k, 1, 1)`` per-layer ``lambda``: the group's ``damping``, times the layer's mean Kronecker eigenvalue
        ``(tr A / n_A) (tr G / n_G)`` with ``relative_damping`` (so a layer with small factors, such as Q and K at
        the loss's scale, is preconditioned rather than damped into SGD)."""
        lam = self._layer_tensor(layers, "damping", dtype, device)
        if not self.relative_damping:
            return lam
        return lam * factor_scale(tensors["factor_g"], tensors["factor_a"])

    def _solve(self, items: list, v: list[torch.Tensor]) -> tuple[list[torch.Tensor], dict]:
        """Preconditioned gradients ``X`` per item ``(group, tensors, persistent)`` and diagnostics."""
        start = time.perf_counter()
        dtype, device = v[0].dtype, v[0].device
        lam = [self._damping(g.layers, c, dtype, device) for g, c, _ in items]
        if self.inverse == "eigen":
            xs, info = eigen_directions(items, v, lam), {}
        else:
            n_blocks = self._iterative.n_blocks(items)
            if len(self.cg_budget) != n_blocks:
                self.cg_budget = [self.cg_max_iter] * n_blocks
            xs, info = self._iterative(items, v, lam, iterations=self.cg_budget)
        self.timings["inverse"] += time.perf_counter() - start
        return xs, info

    @torch.no_grad()
    def step(self, closure=None):
        """One K-FAC step (see the module docstring); returns the closure's loss if given.

        No host read except on check steps (``control.check_due``): a failed step is skipped on the
        device and handled at the next check."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        step = self.param_groups[0]["step"]
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        new, batches = self._new_factors()
        items, v, xs, info, cur = [], [], [], {}, None
        try:
            cur = self._current(new, step)
            items = solve_items(self.groups, cur)
            v = [sub.gradients() for sub, _, _ in items]
            xs, info = self._solve(items, v) if items else ([], {})
            solved = [torch.isfinite(x.sum()) for x in xs] + self._decomposed_finite
        except torch.linalg.LinAlgError:  # eigh failed in float64 too: a failed step
            items, v, xs, info, cur = [], [], [], {}, None
            solved = [torch.zeros((), dtype=torch.bool, device=self.layers[0].module.weight.device)]
        grad_ok = all_finite(grads) if grads else None
        solve_ok = torch.stack(solved).all() if solved else None
        flags = [f for f in (grad_ok, solve_ok) if f is not None]
        ok = torch.stack(flags).all() if flags else torch.ones((), dtype=torch.bool, device=self.layers[0].module.weight.device)
        if cur is not None:
            commit(self.groups, self.state, new, cur)
        if batches:
            self.factor_updates += 1
        capped, used = info.pop("cg_block_capped", None), info.pop("cg_block_iterations", None)
        self.watch.add(failed=~ok, bad_gradient=None if grad_ok is None else ~grad_ok,
                       **({"cg_capped": capped, "cg_iterations": used} if used is not None else {}))
        self._totals["failures"] = self._totals["failures"] + (~ok).long()
        checkpoint = self.adapt_every > 0 and step % self.adapt_every == 0
        pending = control.Snapshot(step, self._params(), self.state) if checkpoint else None
        stats = self._apply(items, v, xs, info, step, ok)
        self._finish(stats)
        if control.check_due(self, step):
            control.check(self, step, scheduled=True, loss=loss, closure=closure, items=items, pending=pending)
        return loss

    def _bound_scales(self, items, v, xs) -> tuple[list[torch.Tensor], torch.Tensor, bool]:
        """KL-bound factors per item, each param group bounded by its own ``kl_clip`` (``_kfac_step.bound_scales``)."""
        lr0_sq = [self._layer_tensor(sub.layers, "initial_lr", vj.dtype, vj.device, power=2)
                  for (sub, _, _), vj in zip(items, v)]
        return bound_scales(v, xs, lr0_sq, [[self._group_of(m) for m in sub.layers] for sub, _, _ in items])

    def _apply(self, items, v, xs, info, step, ok) -> dict:
        """The bounded, masked update: a step whose ``ok`` is False changes no parameter and no buffer."""
        start = time.perf_counter()
        directions, nu = {}, None  # param group index -> (params, directions)
        # where a host read is free, a good step skips the masking's where calls (keep=True: same arithmetic)
        keep = True if host_read_free(ok.device) and bool(ok) else ok
        if items:
            scales, nu, bound = self._bound_scales(items, v, xs)
            for (sub, _, _), x, scale in zip(items, xs, scales):
                scale = scale if keep is True else torch.where(ok, scale, 0.0)
                params, dirs = sub.split(x * scale if keep is True else torch.where(ok, x, 0.0).mul_(scale))
                index = self._group_index(sub, params)
                if index[0] == index[-1] and len(set(index)) == 1:  # the usual case: one param group
                    pre, ds = directions.setdefault(index[0], ([], []))
                    pre.extend(params)
                    ds.extend(dirs)
                    continue
                for p, d, i in zip(params, dirs, index):
                    pre, ds = directions.setdefault(i, ([], []))
                    pre.append(p)
                    ds.append(d)
            if bound:
                self._totals["kl_clip_binding_steps"] = self._totals["kl_clip_binding_steps"] + ((nu < 1) & ok).long()
        apply_param_groups(self.param_groups, self.state, directions, keep)
        if "cg_fallbacks" in info:
            self._totals["cg_fallbacks"] = self._totals["cg_fallbacks"] + info["cg_fallbacks"]
            self._totals["cg_capped"] = self._totals["cg_capped"] + info["cg_capped"]
        if "cg_iterations" in info:
            self._totals["cg_steps"] += 1
            self._totals["cg_iterations"] = self._totals["cg_iterations"] + info["cg_iterations"].float().mean()
        self.timings["apply"] += time.perf_counter() - start
        return {"step": step, "preconditioned": ok if items else False, "nu": 1.0 if nu is None else nu,
                "kl_clip_binding": False if nu is None else (nu < 1) & ok, "cg_budget": max(self.cg_budget, default=0), **info}

    def _finish(self, stats: dict) -> None:
        for group in self.param_groups:
            group["step"] += 1
        self.capture.enabled = self.param_groups[0]["step"] % self.factor_every == 0
        stats["damping"] = self._group_of(self.layers[0])["damping"]
        self._stats = stats
