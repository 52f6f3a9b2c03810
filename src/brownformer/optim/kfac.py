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
   (``_kfac_pcg``): preconditioned by the inverses of the factored-damped factors (Cholesky), refreshed when
   the factors or the damping change, with a per-block budget of iterations (set at each check);
3. step bound (KL-clip, on by default): ``X <- nu X``, ``nu = min(1, sqrt(kl_clip / sum_l lr0_l^2
   <V_l, X_l>))`` with the groups' base lrs, so the schedule still scales a bound step; each param group
   is bounded by its own ``kl_clip`` over its own layers; with ``layer_step_bound`` (a per-layer trust region) each
   layer's ``lr nu X_l`` is then shortened to at most that fraction of ``||[W_l, b_l]||``;
4. base update (``_base_update``): SGD with momentum on ``X`` for preconditioned parameters; the
   group's ``update`` rule (``"sgd"`` or ``"adamw"``) on the raw gradient of every other parameter;
5. every ``adapt_every`` steps: a snapshot of the state, and with a closure (``step(closure)``) the
   Levenberg-Marquardt update of ``damping`` from the reduction ratio (``_kfac_control``) of the whole update or,
   with ``lm_scope="preconditioned"``, of the preconditioned layers' part alone (the part the damping acts on).

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

import logging
import math
import time
import warnings
from collections import defaultdict

import torch
import torch.nn as nn
from torch.optim import Optimizer

from brownformer.optim._base_update import apply_param_groups
from brownformer.optim._kfac_capture import FactorCapture, find_layers, unpreconditioned_weights
from brownformer.optim._kfac_control import (DAMPING_MAX, FAILURE_GROWTH, SHORT_STEP, Snapshot, Watch, adapt_damping,
                                             kronecker_quadratic, lm_omega, next_budgets)
from brownformer.optim._kfac_groups import EIGEN_KEYS, LAYER_KEYS, PRECONDITIONER_KEYS, group_layers
from brownformer.optim._kfac_matrix_free import layer_rows, matrix_free_cg, matrix_free_operator, subsample_rows
from brownformer.optim._kfac_math import all_finite, factor_scale, factor_weight, host_read_free
from brownformer.optim._kfac_solve import IterativeSolver, eigen_directions, refresh_eigenbases, refresh_preconditioner
from brownformer.optim._kfac_step import (bound_scales, commit, fold_factors, materialise_stats, solve_items,
                                          stacked_gradients, trust_region_scales)
from brownformer.optim.kfac_settings import ADAMW_REST_LR, DEFAULTS, GROUP_SETTINGS, OPTIMIZER_SETTINGS, SETTINGS, validate

logger = logging.getLogger(__name__)

__all__ = ["KFAC", "DEFAULT_LR", "DEFAULT_DAMPING", "DEFAULT_MOMENTUM"]

DEFAULT_LR, DEFAULT_DAMPING, DEFAULT_MOMENTUM = DEFAULTS["lr"], DEFAULTS["damping"], DEFAULTS["momentum"]


class KFAC(Optimizer):
    """K-FAC optimizer (eigen or iterative/CG inverse) for any model made of ``nn.Linear`` layers.

    Usage is that of any ``torch.optim`` optimizer: ``opt.zero_grad(); loss.backward(); opt.step()``;
    ``opt.step(closure)`` (closure: zero_grad, forward, ``backward()`` only when
    ``torch.is_grad_enabled()``, return the loss) also adapts the damping, evaluating the closure a
    second time under ``torch.no_grad()`` every ``adapt_every`` steps.

    Args:
        model: The model; hooks are registered on its in-scope ``nn.Linear`` layers and on the packed Q, K, V
            projection of every ``nn.MultiheadAttention`` (self-attention; ``_kfac_packed``). A warning lists every
            weight of 2 or more dimensions left to the rest update, and why.
        lr: Learning rate of the preconditioned layers.
        params: Optional param groups (dicts with ``"params"`` and any group setting), as for
            ``torch.optim``; default: one group for the preconditioned layers and one for the rest.
        **settings: Every other argument is a setting of ``brownformer.optim.kfac_settings.SETTINGS``, the one table of
            their defaults, rules and meanings (rendered in docs/methods/kfac.md). ``damping`` is adapted by
            Levenberg-Marquardt when ``step`` gets a closure; ``cg_max_iter`` caps the CG budget per block, the
            budget a step runs being the most iterations a system needed in the last check window; ``scope``'s rule
            is in ``_kfac_capture``; ``rest_lr`` None is ``settings.ADAMW_REST_LR`` with AdamW, ``lr`` with SGD.

    Raises:
        ValueError: On an invalid argument or when no ``nn.Linear`` layer is in scope.

    Attributes:
        last_stats: Diagnostics of the last step (read on access: reading them costs one host sync).
        timings: Accumulated host seconds ``{"factors", "inverse", "apply"}``.
    """

    def __init__(self, model: nn.Module, lr: float = DEFAULTS["lr"], *, params: list[dict] | None = None,
                 damping: float = DEFAULTS["damping"], inverse: str = DEFAULTS["inverse"],
                 factor_decay: float = DEFAULTS["factor_decay"], factor_every: int = DEFAULTS["factor_every"],
                 inverse_every: int = DEFAULTS["inverse_every"], cg_max_iter: int = DEFAULTS["cg_max_iter"],
                 cg_tol: float = DEFAULTS["cg_tol"], curvature: str = DEFAULTS["curvature"],
                 curvature_rows: int = DEFAULTS["curvature_rows"], warm_start: bool = DEFAULTS["warm_start"],
                 weight_sharing: str = DEFAULTS["weight_sharing"], per_head: bool = DEFAULTS["per_head"],
                 scope: str = DEFAULTS["scope"], momentum: float = DEFAULTS["momentum"],
                 weight_decay: float = DEFAULTS["weight_decay"], kl_clip: float | None = DEFAULTS["kl_clip"],
                 fisher: str = DEFAULTS["fisher"], loss_reduction: str = DEFAULTS["loss_reduction"],
                 rest_update: str = DEFAULTS["rest_update"], rest_lr: float | None = DEFAULTS["rest_lr"],
                 betas: tuple[float, float] = DEFAULTS["betas"], eps: float = DEFAULTS["eps"],
                 n_heads: int | None = DEFAULTS["n_heads"], seed: int = DEFAULTS["seed"],
                 adapt_every: int = DEFAULTS["adapt_every"], max_failures: int = DEFAULTS["max_failures"],
                 relative_damping: bool = DEFAULTS["relative_damping"],
                 relative_damping_floor: float = DEFAULTS["relative_damping_floor"],
                 lm_scope: str = DEFAULTS["lm_scope"],
                 layer_step_bound: float | None = DEFAULTS["layer_step_bound"]):
        given = locals()
        settings = validate({s.name: given[s.name] for s in SETTINGS})  # each checked by its rule (ValueError)
        scope, per_head, n_heads, rest_update = (settings[k] for k in ("scope", "per_head", "n_heads", "rest_update"))
        if settings["curvature"] == "matrix-free" and (settings["inverse"] != "cg" or settings["relative_damping"]):
            raise ValueError("curvature='matrix-free' needs inverse='cg' and relative_damping=False (it keeps no factors)")
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
                default_rest = ADAMW_REST_LR if rest_update == "adamw" else settings["lr"]
                rest_lr = settings["rest_lr"]
                params.append({"params": rest, "update": rest_update,
                               "lr": default_rest if rest_lr is None else rest_lr})
        defaults = {**{k: settings[k] for k in GROUP_SETTINGS}, "update": "sgd", "step": 0}
        super().__init__(params, defaults)
        for group in self.param_groups:  # the KL bound and the damping's floor refer to these (see _kfac_control)
            group.setdefault("initial_lr", group["lr"])
            group.setdefault("initial_damping", group["damping"])
        for key in OPTIMIZER_SETTINGS:  # attributes, saved by state_dict
            setattr(self, key, settings[key])
        device = self.layers[0].module.weight.device
        sampled = self.fisher == "sampled"
        # draws the sampled Fisher's labels and the matrix-free curvature's tokens, apart from torch's global stream
        drawn = sampled or self.curvature == "matrix-free"
        self.generator = torch.Generator(device=device).manual_seed(settings["seed"]) if drawn else None
        self.groups = group_layers(self.layers)
        self.capture = FactorCapture(model, self.layers, fisher=self.fisher, loss_reduction=self.loss_reduction,
                                     generator=self.generator)
        self.factor_updates, self.failures = 0, 0
        self.good: Snapshot | None = None
        self.timings = {"factors": 0.0, "inverse": 0.0, "apply": 0.0}
        self.cg_budget: list[int] = []  # CG iterations per block a step runs; set at each check (_kfac_control)
        self.watch = Watch(device)  # what the device saw since the last host check
        self._iterative = IterativeSolver(tol=self.cg_tol, warm_start=self.warm_start)
        self._stats: dict = {}
        self._layer_groups = None  # (number of param groups, {id(weight): group})
        self._mean_scale = None  # relative_damping: mean over layers of their mean Kronecker eigenvalue, this step
        self._tensor_cache: dict = {}
        self._rest: tuple | None = None  # (items' key, the parameters no item's V holds): see _rest_grads
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
        self._check(self.param_groups[0]["step"] - 1)
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
            folded, dropped = fold_factors([(f, b, updated) for g, a, gg, updated in batches
                                            for f, b in zip(g.factors(self.state), (a, gg))], w)
            for j, (g, _, _, _) in enumerate(batches):
                new[g] = (folded[2 * j], folded[2 * j + 1])
            self._totals["dropped_factors"] = self._totals["dropped_factors"] + dropped
            if isinstance(dropped, torch.Tensor):  # else none was dropped (read where that is free)
                self.watch.add(dropped=dropped)
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
        if self.relative_damping:  # the model's curvature scale, the unit of each layer's damping floor (_damping)
            scales = [factor_scale(c["factor_g"], c["factor_a"]).flatten() for c in cur.values()]
            self._mean_scale = torch.cat(scales).mean()
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
        """CG's preconditioner per shape group, refreshed by Cholesky (no eigendecomposition) where the
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
            refresh_preconditioner(cur[g], lam)
            g.preconditioned_for = dampings
            self._decomposed_finite.append(all_finite([cur[g][k] for k in PRECONDITIONER_KEYS]))

    def _damping(self, layers, tensors: dict, dtype, device) -> torch.Tensor:
        """``(k, 1, 1)`` per-layer ``lambda``: the group's ``damping``, or with ``relative_damping``
        ``damping x max(s_l, relative_damping_floor x mean_j s_j)``, ``s_l = (tr A / n_A)(tr G / n_G)`` the layer's mean
        Kronecker eigenvalue (so a layer with small factors, such as Q and K at the loss's scale, is preconditioned
        rather than damped into SGD, while a layer with almost no curvature, 1e-15 of the others', does not get
        steps 1e15 times theirs)."""
        lam = self._layer_tensor(layers, "damping", dtype, device)
        if not self.relative_damping:
            return lam
        scale = factor_scale(tensors["factor_g"], tensors["factor_a"])
        return lam * torch.maximum(scale, self.relative_damping_floor * self._mean_scale.to(scale.dtype))

    def _solve(self, items: list, v: list[torch.Tensor]) -> tuple[list[torch.Tensor], dict, list[torch.Tensor]]:
        """Preconditioned gradients ``X`` per item ``(group, tensors, persistent)``, diagnostics, and the flags that
        the directions are finite: eigen's checked here; CG's are its own health flags (a non-finite system falls
        back to its gradient, which the step's gradient check covers), so none."""
        start = time.perf_counter()
        dtype, device = v[0].dtype, v[0].device
        lam = [self._damping(g.layers, c, dtype, device) for g, c, _ in items]
        if self.inverse == "eigen":
            xs, info = eigen_directions(items, v, lam), {}
            finite = [all_finite(xs)]
        else:
            n_blocks = self._iterative.n_blocks(items)
            if len(self.cg_budget) != n_blocks:
                self.cg_budget = [self.cg_max_iter] * n_blocks
            (xs, info), finite = self._iterative(items, v, lam, iterations=self.cg_budget), []
        self.timings["inverse"] += time.perf_counter() - start
        return xs, info, finite

    @torch.no_grad()
    def step(self, closure=None):
        """One K-FAC step (see the module docstring); returns the closure's loss if given.

        No host read except on check steps (``_check_due``): a failed step is skipped on the
        device and handled at the next check."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        step = self.param_groups[0]["step"]
        if self.curvature == "matrix-free":
            grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
            return self._finish_step(step, loss, closure, grads, *self._matrix_free_solve())
        grads = None  # checked as the solve's V plus the other gradients (_rest_grads), once V is stacked
        new, batches = self._new_factors()
        items, v, xs, info, cur = [], [], [], {}, None
        try:
            cur = self._current(new, step)
            items = solve_items(self.groups, cur)
            v = stacked_gradients(items)
            grads = v + self._rest_grads(items)
            xs, info, finite = self._solve(items, v) if items else ([], {}, [])
            solved = finite + self._decomposed_finite
        except torch.linalg.LinAlgError:  # eigh failed in float64 too: a failed step
            items, v, xs, info, cur, grads = [], [], [], {}, None, None
            solved = [torch.zeros((), dtype=torch.bool, device=self.layers[0].module.weight.device)]
        if cur is not None:
            commit(self.groups, self.state, new, cur)
        if batches:
            self.factor_updates += 1
        if grads is None:
            grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        return self._finish_step(step, loss, closure, grads, items, v, xs, info, solved)

    def _rest_grads(self, items: list) -> list[torch.Tensor]:
        """The gradients that no item's ``V`` holds (the rest update's, a preconditioned layer's without a weight
        gradient): with the items' ``V``, every gradient once, in fewer tensors for the finiteness check."""
        key = (tuple(id(sub) for sub, _, _ in items), len(self.param_groups), sum(len(g["params"]) for g in self.param_groups))
        if not all(persistent for _, _, persistent in items) or self._rest is None or self._rest[0] != key:
            covered = {id(p) for sub, _, _ in items for p in sub.params()}
            rest = [p for group in self.param_groups for p in group["params"] if id(p) not in covered]
            self._rest = (key, rest)  # a partial group is a new object every step: never matched by its id
        return [p.grad for p in self._rest[1] if p.grad is not None]

    def _finish_step(self, step, loss, closure, grads, items, v, xs, info, solved):
        """The step after its solve: the failure flags, the bounded masked update, the scheduled host check."""
        grad_ok = all_finite(grads) if grads else None
        flags = ([] if grad_ok is None else [grad_ok]) + solved
        ok = torch.stack(flags).all() if flags else torch.ones((), dtype=torch.bool, device=self.layers[0].module.weight.device)
        capped, used = info.pop("cg_block_capped", None), info.pop("cg_block_iterations", None)
        cg = {"cg_capped": capped, "cg_iterations": used} if used is not None else {}
        if host_read_free(ok.device) and bool(ok):  # where the read is free, a good step adds no zero failure counts
            self.watch.add(**cg)
            self._totals.setdefault("failures", 0)
        else:
            self.watch.add(failed=~ok, bad_gradient=None if grad_ok is None else ~grad_ok, **cg)
            self._totals["failures"] = self._totals["failures"] + (~ok).long()
        checkpoint = self.adapt_every > 0 and step % self.adapt_every == 0
        pending = Snapshot(step, self._params(), self.state) if checkpoint else None
        stats = self._apply(items, v, xs, info, step, ok)
        self._finish(stats)
        if self._check_due(step):
            self._check(step, scheduled=True, loss=loss, closure=closure, items=items, pending=pending)
        return loss

    def _matrix_free_solve(self) -> tuple[list, list, list, dict, list]:
        """``curvature="matrix-free"``: per shape group, CG on this step's kept rows (``_kfac_matrix_free``), with
        ``A = a^T a / n`` and ``G = R g^T g`` estimated from ``curvature_rows`` of the ``n`` rows (the same tokens for
        ``a`` and ``g``): ``scale = R (n / m) / m``. A group without exactly one kept pass per layer (gradient
        accumulation, no backward) takes its raw gradient this step. Returns ``(items, v, xs, info, solved)``."""
        start = time.perf_counter()
        items, v, xs, solved, iterations, fallbacks = [], [], [], [], [], []
        for g in self.groups:
            single = all(len(m.inputs) == 1 and len(m.output_grads) == 1 for m in g.layers)
            if single and all(m.module.weight.grad is not None for m in g.layers):
                rows_a = layer_rows([m.inputs[0] for m in g.layers], bias=g.has_bias, weight_sharing=self.weight_sharing,
                                    pooled_by=torch.mean, dtype=g.dtype)  # (k, n, in+1)
                rows_g = layer_rows([m.output_grads[0] for m in g.layers], bias=False,
                                    weight_sharing=self.weight_sharing, pooled_by=torch.sum, dtype=g.dtype)  # (k, n, out)
                n, m = rows_a.shape[1], min(self.curvature_rows, rows_a.shape[1])
                kept = subsample_rows(torch.cat([rows_a, rows_g], dim=2), m, self.generator)  # (k, m, in+1+out)
                tensors = {"rows_a": kept[:, :, : rows_a.shape[2]], "rows_g": kept[:, :, rows_a.shape[2]:],
                           "scale": (self.capture.scale or rows_a.shape[0]) * n / m / m}
                vj = g.gradients()
                lam = self._layer_tensor(g.layers, "damping", vj.dtype, vj.device)
                result = matrix_free_cg(tensors["rows_g"], tensors["rows_a"], vj, lam, scale=tensors["scale"],
                                        max_iter=self.cg_max_iter, tol=self.cg_tol)
                xs.append(torch.where(result.ok[:, None, None], result.solution, vj))  # a diverged system: gradient
                items.append((g, tensors, True))
                v.append(vj)
                solved.append(torch.isfinite(xs[-1].sum()))
                iterations.append(result.iterations)
                fallbacks.append((~result.ok).sum())
            for layer in g.layers:
                layer.reset()
        self.capture.seconds = 0.0
        info = {} if not items else {"cg_iterations": torch.cat(iterations), "cg_fallbacks": torch.stack(fallbacks).sum(),
                                     "cg_capped": torch.zeros((), dtype=torch.long)}
        self.timings["inverse"] += time.perf_counter() - start
        return items, v, xs, info, solved

    def _bound_scales(self, items, v, xs) -> tuple[list[torch.Tensor], torch.Tensor, bool]:
        """KL-bound factors per item, each param group bounded by its own ``kl_clip`` (``_kfac_step.bound_scales``)."""
        lr0_sq = [self._layer_tensor(sub.layers, "initial_lr", vj.dtype, vj.device, power=2)
                  for (sub, _, _), vj in zip(items, v)]
        def owners_of(sub):  # index in param_groups of the group of each of the item's layers
            position = {id(group): i for i, group in enumerate(self.param_groups)}
            return [position[id(self._group_of(m))] for m in sub.layers]
        owners = [self._cached(("owners", id(sub), len(self.param_groups)), sub, lambda sub=sub: owners_of(sub))
                  for sub, _, _ in items]
        return bound_scales(v, xs, lr0_sq, owners, [group["kl_clip"] for group in self.param_groups])

    def _trust_region(self, items, xs, scales) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """``layer_step_bound``: the KL-bound factors ``scales`` times each layer's trust-region factor
        (``_kfac_step.trust_region_scales``, on the step ``lr x nu x X_l`` against ``||[W_l, b_l]||``), and the smallest
        such factor (None when the bound is off)."""
        if self.layer_step_bound is None or not items:
            return scales, None
        out, smallest = [], []
        for (sub, _, _), x, scale in zip(items, xs, scales):
            params, _ = sub.split(x)
            weights = sub.gradients({p: p.detach() for p in params})
            lr = self._layer_tensor(sub.layers, "lr", x.dtype, x.device)
            factor = trust_region_scales(weights, x, lr * scale, self.layer_step_bound)
            out.append(scale * factor)
            smallest.append(factor.min())
        return out, torch.stack(smallest).min()

    @staticmethod
    def _directions(sub, persistent: bool, x: torch.Tensor, scale: torch.Tensor) -> tuple[list, list]:
        """The group's parameters and their directions ``x * scale`` (a whole group's written into its kept buffer,
        whose per-parameter views are made once: ``LayerGroup.buffer``)."""
        if not persistent:
            return sub.split(x * scale)
        stack, views = sub.buffer("direction")
        torch.mul(x, scale, out=stack)
        return sub.params(), views

    def _apply(self, items, v, xs, info, step, ok) -> dict:
        """The bounded, masked update: a step whose ``ok`` is False changes no parameter and no buffer."""
        start = time.perf_counter()
        directions, nu = {}, None  # param group index -> (params, directions)
        # where a host read is free, a good step skips the masking's where calls (keep=True: same arithmetic)
        keep = True if host_read_free(ok.device) and bool(ok) else ok
        if items:
            scales, nu, bound = self._bound_scales(items, v, xs)
            scales, trust = self._trust_region(items, xs, scales)
            if trust is not None:
                info["layer_step_factor_min"] = trust
            for (sub, _, persistent), x, scale in zip(items, xs, scales):
                scale = scale if keep is True else torch.where(ok, scale, 0.0)
                params, dirs = self._directions(sub, persistent, x if keep is True else torch.where(ok, x, 0.0), scale)
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
            binding = (nu < 1) & ok
            if bound:
                self._totals["kl_clip_binding_steps"] = self._totals["kl_clip_binding_steps"] + binding.long()
        apply_param_groups(self.param_groups, self.state, directions, keep)
        if "cg_fallbacks" in info:
            self._totals["cg_fallbacks"] = self._totals["cg_fallbacks"] + info["cg_fallbacks"]
            self._totals["cg_capped"] = self._totals["cg_capped"] + info["cg_capped"]
        if "cg_iterations" in info:
            self._totals["cg_steps"] += 1
            self._totals["cg_iterations"] = self._totals["cg_iterations"] + info["cg_iterations"].float().mean()
        self.timings["apply"] += time.perf_counter() - start
        return {"step": step, "preconditioned": ok if items else False, "nu": 1.0 if nu is None else nu,
                "kl_clip_binding": False if nu is None else binding, "cg_budget": max(self.cg_budget, default=0), **info}

    def _capturing(self, step: int) -> bool:
        """Whether the hooks keep the next pass: on factor steps, and on every step for the matrix-free curvature."""
        return self.curvature == "matrix-free" or step % self.factor_every == 0

    def _finish(self, stats: dict) -> None:
        for group in self.param_groups:
            group["step"] += 1
        self.capture.enabled = self._capturing(self.param_groups[0]["step"])
        stats["damping"] = self._group_of(self.layers[0])["damping"]
        self._stats = stats

    # ---- host checks: failures, damping adaptation, CG budgets (the module docstring; _kfac_control) ----------
    def _check_due(self, step: int) -> bool:
        """Scheduled host checks: every ``adapt_every`` steps (every step when ``adapt_every`` is 0)."""
        return self.adapt_every == 0 or step % self.adapt_every == 0

    def _predicted_change(self, items, before: Snapshot) -> tuple[torch.Tensor, torch.Tensor, list]:
        """The two terms of the model's change for the update just applied: ``g^T delta`` and
        ``1/2 sum_l <D_l, G_l D_l A_l>`` (0-d tensors; the prediction is their sum), and the parameters the model
        leaves out with their values before the step (``lm_scope="preconditioned"``: every parameter of no
        preconditioned layer; the loss after the step is then read with these put back, see ``_loss_after``)."""
        params = [p for p in self._params() if p.grad is not None]
        index = {id(p): j for j, p in enumerate(self._params())}
        held = []
        if self.lm_scope == "preconditioned":
            mine = {id(p) for m in self.layers for p in m.module.parameters()}
            held = [(p, before.params[index[id(p)]]) for p in params if id(p) not in mine]
            params = [p for p in params if id(p) in mine]
        delta = torch._foreach_sub([p.detach() for p in params], [before.params[index[id(p)]] for p in params])
        linear = torch.dot(torch.cat([p.grad.flatten() for p in params]), torch.cat([d.flatten() for d in delta]))
        moved = dict(zip(params, delta))
        quadratic = torch.zeros((), dtype=linear.dtype, device=linear.device)
        for sub, c, _ in items:
            d = sub.gradients(moved)
            curvature = kronecker_quadratic(c["factor_g"], c["factor_a"], d) if "factor_g" in c else \
                (d * matrix_free_operator(c["rows_g"], c["rows_a"], d, 0.0, scale=c["scale"])).sum()
            quadratic = quadratic + 0.5 * curvature.to(linear.dtype)
        return linear, quadratic, held

    @staticmethod
    def _loss_after(closure, held: list):
        """The closure's loss (no grad) with each parameter of ``held`` ``[(p, value before the step)]`` at its value
        before the step, then put back: the loss change of the preconditioned part of the update alone."""
        now = [p.detach().clone() for p, _ in held]
        for p, old in held:
            p.copy_(old)
        try:
            with torch.no_grad():
                return closure()
        finally:
            for (p, _), value in zip(held, now):
                p.copy_(value)

    def _check(self, step: int, *, scheduled: bool = False, loss=None, closure=None, items=(), pending=None) -> None:
        """The host check: ONE read of the device's counts (and, on adaptation steps, of the reduction ratio).

        A window with failed steps is one incident (:func:`incident`); a clean scheduled check promotes the
        snapshot ``pending`` to the last good state, adapts the damping (Levenberg-Marquardt when the step
        had a closure) and sets the CG budget. Unscheduled checks (``last_stats``) only handle failures.
        """
        adapt = scheduled and pending is not None and closure is not None and loss is not None
        lm = []
        if adapt:
            linear, quadratic, held = self._predicted_change(items, pending)
            after = self._loss_after(closure, held)
            lm = [torch.as_tensor(t, dtype=torch.float64).reshape(()).to(linear.device)
                  for t in (after, loss, linear, quadratic)]
            self._totals["adaptations"] += 1
        n_cg = self.watch.cg.numel()
        values = torch.cat([self.watch.failures.double(), self.watch.cg.double().flatten(),
                            *(t.reshape(1) for t in lm)]).tolist()
        failed, bad_gradient, dropped = (int(x) for x in values[:3])
        seen = [[int(values[3 + i]), int(values[4 + i])] for i in range(0, n_cg, 2)]
        lm_values = values[3 + n_cg:]
        self.watch.failures.zero_()
        if dropped and not failed:  # else the incident's line says it
            logger.warning("K-FAC: %d non-finite batch factor(s) dropped (running factors kept) by step %d", dropped, step)
        if scheduled:
            self.cg_budget = next_budgets(self.cg_budget, seen, self.cg_max_iter)
            self.watch.cg.zero_()
        if failed:
            reason = "non-finite gradient" if bad_gradient else "preconditioning failed"
            self._incident(step, reason + (f", {dropped} non-finite batch factor(s) dropped" if dropped else ""),
                     failed_steps=failed, restore=bool(bad_gradient))
            return
        if adapt:
            after_value, before_value, linear_value, quadratic_value = lm_values
            predicted_value = linear_value + quadratic_value
            rho = (after_value - before_value) / predicted_value if predicted_value < 0 else float("nan")
            # along delta the model is m(t) = t g^T delta + t^2 Q, minimised at t* = -g^T delta / (2 Q): the step is 1 / t*
            fraction = 2 * quadratic_value / -linear_value if linear_value < 0 else float("nan")
            short = fraction < SHORT_STEP  # NaN (no predicted decrease): not short, rho is NaN and raises the damping
            self._stats["lm_step_fraction"] = fraction
            self._stats["rho"] = rho
            if not math.isfinite(after_value):
                self.good = pending
                self._incident(step, "non-finite loss after the step", failed_steps=1, restore=True)
                self._totals["failures"] = self._totals["failures"] + 1
                return
            omega = lm_omega(self.adapt_every)
            for group in self.param_groups:
                group["damping"] = adapt_damping(group["damping"], rho, omega, short=short)
        elif scheduled and self.adapt_every > 0:  # no closure: a damping raised by a failure decays back
            for group in self.param_groups:
                group["damping"] = max(group["initial_damping"], group["damping"] * lm_omega(self.adapt_every))
        if scheduled:
            if pending is not None:
                self.good = pending
            self.failures = 0
            self._stats["damping"] = self._group_of(self.layers[0])["damping"]

    def _incident(self, step: int, reason: str, *, failed_steps: int, restore: bool) -> None:
        """One failure incident: restore the last good state (``restore``), damping x10, fresh factors;
        one log line; ``max_failures`` incidents in a row raise."""
        self.failures += 1
        if self.failures > self.max_failures:
            raise FloatingPointError(f"K-FAC: {self.failures} failed checks in a row (last by step {step}: "
                                     f"{reason}); lower lr, raise damping or check the data")
        restored = restore and self.good is not None
        if restored:
            self.good.restore(self._params(), self.state)
        old = self._group_of(self.layers[0])["damping"]
        for group in self.param_groups:
            group["damping"] = min(group["damping"] * FAILURE_GROWTH, DAMPING_MAX)
        self.factor_updates = 0  # the next batch factor replaces the running factors (factor_weight(1) = 1)
        for g in self.groups:
            g.preconditioned_for = None
            for key in EIGEN_KEYS + PRECONDITIONER_KEYS + ("cg_solution",):
                if g.stacks.pop(key, None) is not None:
                    for layer in g.layers:
                        self.state[layer.module.weight].pop(key, None)
        where = f"restored the state of step {self.good.step}" if restored else "steps skipped"
        logger.warning("K-FAC by step %d: %s (%d failed step(s) since the last check); %s, damping %.3g -> %.3g, "
                       "factors refreshed (failure %d in a row, at most %d)", step, reason, failed_steps, where, old,
                       self._group_of(self.layers[0])["damping"], self.failures, self.max_failures)
        self._stats.update({"preconditioned": False, "failure": reason, "damping": self._group_of(self.layers[0])["damping"]})

    # ---- per-step lookups, cached (rebuilt only when the param groups or a setting's values change) ---------
    def _group_of(self, layer) -> dict:
        if self._layer_groups is None or self._layer_groups[0] != len(self.param_groups):
            owner = {id(p): group for group in self.param_groups for p in group["params"]}
            self._layer_groups = (len(self.param_groups), owner)
        group = self._layer_groups[1].get(id(layer.module.weight))
        if group is None:
            raise ValueError(f"layer {layer.name!r} is in no param group")
        return group

    def _cached(self, key: tuple, owner, make):
        """``make()`` cached under ``key`` while ``owner`` (whose id is in ``key``) is the object it was made for."""
        entry = self._index_cache.get(key)
        if entry is None or entry[0] is not owner:
            if len(self._index_cache) > 256:  # partial shape groups are new objects every step
                self._index_cache.clear()
            entry = self._index_cache[key] = (owner, make())
        return entry[1]

    def _group_index(self, sub, params: list) -> list[int]:
        """Index in ``param_groups`` of each of ``params`` (a shape group's, in split order)."""
        def make():
            index = {id(p): i for i, group in enumerate(self.param_groups) for p in group["params"]}
            return [index[id(p)] for p in params]
        return self._cached(("index", id(sub), len(self.param_groups)), sub, make)

    def _layer_tensor(self, layers, key: str, dtype, device, power: int = 1) -> torch.Tensor:
        """``(k, 1, 1)`` per-layer values of a group setting (to ``power``), rebuilt only when they change."""
        groups = self._cached(("groups", id(layers), len(self.param_groups)), layers,
                              lambda: [self._group_of(m) for m in layers])
        values = tuple(group[key] for group in groups)
        cache_key = (key, values, dtype, device, power)
        if cache_key not in self._tensor_cache:
            if len(self._tensor_cache) > 64:  # dampings adapt: keep the cache small
                self._tensor_cache.clear()
            self._tensor_cache[cache_key] = torch.tensor(values, dtype=dtype, device=device)[:, None, None] ** power
        return self._tensor_cache[cache_key]

    # ---- persistence: settings, counters, snapshot and per-layer tensors in state_dict --------------------
    def state_dict(self) -> dict:
        """torch's state dict plus ``"kfac"``: every setting, counter and snapshot the next steps use."""
        state = super().state_dict()
        state["kfac"] = {**{k: getattr(self, k) for k in OPTIMIZER_SETTINGS}, "factor_updates": self.factor_updates,
                         "failures": self.failures, "cg_budget": list(self.cg_budget),
                         "preconditioned_for": [None if g.preconditioned_for is None else list(g.preconditioned_for)
                                                for g in self.groups], "watch": self.watch.to_dict(),
                         "good": None if self.good is None else self.good.to_dict(),
                         "totals": {k: (v.item() if isinstance(v, torch.Tensor) else v) for k, v in self._totals.items()}}
        if self.generator is not None:
            state["generator"] = self.generator.get_state()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore; K-FAC tensors keep the factor dtype and are re-stacked per shape group; the saved
        eigenbases are used as they are (never recomputed), so a resumed run is bit-identical."""
        state_dict = dict(state_dict)
        generator_state = state_dict.pop("generator", None)
        settings = state_dict.pop("kfac", None)
        params = self._params()
        keep = {i: {k: v for k, v in s.items() if k in LAYER_KEYS}
                for i, s in state_dict["state"].items() if isinstance(s, dict)}
        super().load_state_dict(state_dict)
        for i, tensors in keep.items():
            self.state[params[i]].update({k: v.to(params[i].device, copy=True) for k, v in tensors.items()})
        for group in self.groups:
            group.restack(self.state)
        if settings is not None:
            for key in OPTIMIZER_SETTINGS:
                if key in settings:  # absent in checkpoints written before the setting existed
                    setattr(self, key, settings[key])
            self.fisher = {"mc": "sampled"}.get(self.fisher, self.fisher)
            self.capture.fisher, self.capture.loss_reduction = self.fisher, self.loss_reduction
            if self.fisher == "sampled" and self.generator is None:
                self.generator = self.capture.generator = torch.Generator(device=self.layers[0].module.weight.device)
            self.factor_updates, self.failures = settings["factor_updates"], settings.get("failures", 0)
            self.cg_budget = list(settings.get("cg_budget", []))
            for g, dampings in zip(self.groups, settings.get("preconditioned_for", [])):
                g.preconditioned_for = None if dampings is None else tuple(dampings)
            if "watch" in settings:
                self.watch.load(settings["watch"])
            self._iterative.tol, self._iterative.warm_start = self.cg_tol, self.warm_start
            good = settings.get("good")
            self.good = None if good is None else Snapshot.from_dict(good, self.layers[0].module.weight.device)
            self._totals = defaultdict(int, settings["totals"])
        if generator_state is not None and self.generator is not None:
            self.generator.set_state(generator_state)
        self.capture.enabled = self._capturing(self.param_groups[0]["step"])
