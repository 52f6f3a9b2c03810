"""K-FAC for nn.Linear layers with an eigen (exact) or conjugate-gradient (iterative) inverse.

One step, for every preconditioned layer with gradient ``V = dL/d[W, b]`` (Martens & Grosse 2015;
Grosse & Martens 2016; the iterative variant of arXiv 2101.00218; docs/methods/kfac.md):

1. factors, every ``factor_every`` steps: ``F <- (1 - w) F + w F_batch`` from zero, with
   ``w = max(1 - rho^factor_every, 1/n)`` at the ``n``-th update (``_kfac_math.factor_weight``). ``G``
   comes from labels sampled from the model (``fisher="sampled"``, the true Fisher; default) or from
   the training labels (``"empirical"``), scaled by the loss's reduction (``loss_reduction``);
2. solve ``G X A + lambda_l X = V`` with ``lambda_l = damping * tau_l`` relative to the layer's mean
   Kronecker eigenvalue (``_kfac_control``): ``inverse="eigen"`` from eigendecompositions refreshed
   every ``inverse_every`` steps, all factors in at most two batched ``eigh`` calls;
   ``inverse="cg"`` by masked conjugate-gradient iterations on the current factors, warm-started
   from the previous solution;
3. step bound (KL-clip, on by default): ``X <- nu X``, ``nu = min(1, sqrt(kl_clip / sum_l lr0_l^2
   <V_l, X_l>))`` with the groups' base lrs, so the schedule still scales a bound step;
4. base update (``_base_update``): SGD with momentum on ``X`` for preconditioned parameters; the
   group's ``update`` rule (``"sgd"`` or ``"adamw"``) on the raw gradient of every other parameter;
5. every ``adapt_every`` steps: a snapshot of the state, and with a closure (``step(closure)``) the
   Levenberg-Marquardt update of ``damping`` from the reduction ratio (``_kfac_control``).

Settings per parameter group (``param_groups``, like ``lr``; a schedule edits them between steps):
``lr``, ``momentum``, ``weight_decay``, ``damping``, ``kl_clip``, ``update``, ``betas``, ``eps``.
A layer uses the group that holds its weight.

Robustness, decided by ONE host check per step (all finiteness flags of the step together; plus one
read of the reduction ratio on adaptation steps): a non-finite batch factor is dropped (a non-finite
running factor restarts from the batch factor). A non-finite gradient, a non-finite loss after the
step or a failed solve is a failure: the last good snapshot is restored, the damping multiplied by 10
and the factors refreshed from the next batch, with one log line; ``max_failures`` consecutive
failures raise ``FloatingPointError``. A CG system that diverges falls back to its raw gradient on the
device, without a host check, and is counted.

Hooks (``_kfac_capture``) only keep tensors; ``remove_hooks()`` removes them, and a second K-FAC on
the same model (or the garbage collection of this one) removes this one's hooks.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict

import torch
import torch.nn as nn
from torch.optim import Optimizer

from brownformer.optim import _kfac_control as control
from brownformer.optim._base_update import apply_param_groups
from brownformer.optim._kfac_blocks import pad, per_system, plan_blocks, unpad
from brownformer.optim._kfac_capture import FactorCapture, find_layers
from brownformer.optim._kfac_groups import EIGEN_KEYS, LAYER_KEYS, group_layers
from brownformer.optim._kfac_math import block_conjugate_gradient, eigen_solve, factor_weight, kl_clip_scale, padded_eigh
from brownformer.optim._kfac_step import check_arguments, fold_per_layer, materialise_stats, partial_view

logger = logging.getLogger(__name__)

__all__ = ["KFAC", "DEFAULT_LR"]

DEFAULT_LR = 0.1  # with momentum 0.9 a full natural-gradient step per ~10 steps; the KL bound caps early steps
DEFAULT_REST_LR = 1e-3  # torch.optim.AdamW's default, for the parameters K-FAC does not precondition
_CG_CHECK_AT = 5  # one host check after 5 CG iterations (a warm-started solve needs ~3.4 on the ViT)
SETTINGS = ("inverse", "factor_decay", "factor_every", "inverse_every", "cg_max_iter", "cg_tol", "warm_start",
            "weight_sharing", "fisher", "loss_reduction", "adapt_every", "max_failures")


class KFAC(Optimizer):
    """K-FAC optimizer (eigen or iterative/CG inverse) for any model made of ``nn.Linear`` layers.

    Usage is that of any ``torch.optim`` optimizer: ``opt.zero_grad(); loss.backward(); opt.step()``;
    ``opt.step(closure)`` (closure: zero_grad, forward, ``backward()`` only when
    ``torch.is_grad_enabled()``, return the loss) also adapts the damping, evaluating the closure a
    second time under ``torch.no_grad()`` every ``adapt_every`` steps.

    Args:
        model: The model; hooks are registered on its in-scope ``nn.Linear`` layers.
        lr: Learning rate (``>= 0``) of the preconditioned layers (default ``DEFAULT_LR``).
        params: Optional param groups (dicts with ``"params"`` and any group setting), as for
            ``torch.optim``; default: one group for the preconditioned layers and one for the rest.
        damping: Initial relative damping: ``lambda_l = damping x`` the mean eigenvalue of
            ``A_l (x) G_l`` (1e-3; adapted by Levenberg-Marquardt when ``step`` gets a closure).
        inverse: ``"eigen"`` or ``"cg"`` (the paper's iterative K-FAC).
        factor_decay: Decay ``rho`` per step of the running factors, in ``[0, 1)`` (0.95).
        factor_every: Collect factors every this many steps (1).
        inverse_every: Eigendecompose every this many steps (10); unused by ``cg``.
        cg_max_iter: CG iterations, always run with converged systems masked (10, author's code).
        cg_tol: CG relative-residual tolerance that freezes a system (1e-2, author's code).
        warm_start: Start CG from the previous step's solution (True).
        weight_sharing: ``"expand"`` or ``"reduce"`` (Eschenhagen et al. 2023).
        per_head: Block-diagonal ``G`` per head for the attention Q, K, V projections.
        scope: ``"all"``, ``"attention"`` or ``"mlp"`` (rule in ``_kfac_capture``).
        momentum: SGD momentum in ``[0, 1)`` (0.9).
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
        max_failures: Consecutive failed steps before ``FloatingPointError`` (5).

    Raises:
        ValueError: On an invalid argument or when no ``nn.Linear`` layer is in scope.

    Attributes:
        last_stats: Diagnostics of the last step (read on access: reading them costs one host sync).
        timings: Accumulated host seconds ``{"factors", "inverse", "apply"}``.
    """

    def __init__(self, model: nn.Module, lr: float = DEFAULT_LR, *, params: list[dict] | None = None,
                 damping: float = 1e-3, inverse: str = "eigen", factor_decay: float = 0.95, factor_every: int = 1,
                 inverse_every: int = 10, cg_max_iter: int = 10, cg_tol: float = 1e-2, warm_start: bool = True,
                 weight_sharing: str = "expand", per_head: bool = False, scope: str = "all",
                 momentum: float = 0.9, weight_decay: float = 0.0, kl_clip: float | None = 1e-3,
                 fisher: str = "sampled", loss_reduction: str = "mean", rest_update: str = "adamw",
                 rest_lr: float | None = None, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 n_heads: int | None = None, seed: int = 0, adapt_every: int = 5, max_failures: int = 5):
        fisher = {"mc": "sampled"}.get(fisher, fisher)
        check_arguments(lr=lr, damping=damping, inverse=inverse, factor_decay=factor_decay,
                        factor_every=factor_every, inverse_every=inverse_every, cg_max_iter=cg_max_iter,
                        cg_tol=cg_tol, weight_sharing=weight_sharing, scope=scope, momentum=momentum,
                        weight_decay=weight_decay, kl_clip=kl_clip, fisher=fisher, loss_reduction=loss_reduction,
                        rest_update=rest_update, rest_lr=rest_lr, n_heads=n_heads, adapt_every=adapt_every,
                        max_failures=max_failures)
        self.layers = find_layers(model, scope=scope, per_head=per_head, n_heads=n_heads)
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
        device = self.layers[0].module.weight.device
        self.generator = torch.Generator(device=device).manual_seed(seed) if fisher == "sampled" else None
        self.groups = group_layers(self.layers)
        self.capture = FactorCapture(model, self.layers, fisher=fisher, loss_reduction=loss_reduction,
                                     generator=self.generator)
        self.factor_updates, self.failures = 0, 0
        self.good: control.Snapshot | None = None
        self.timings = {"factors": 0.0, "inverse": 0.0, "apply": 0.0}
        self._stats: dict = {}
        self._blocks: dict = {}  # CG block plan per tuple of item shapes
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

    def _group_of(self, layer) -> dict:
        w = layer.module.weight
        for group in self.param_groups:
            if any(p is w for p in group["params"]):
                return group
        raise ValueError(f"layer {layer.name!r} is in no param group")

    @property
    def last_stats(self) -> dict:
        """The last step's diagnostics as plain numbers (materialised here, not in ``step``)."""
        return materialise_stats(self._stats, self._totals)

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    # ---- persistence -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """torch's state dict plus ``"kfac"``: every setting, counter and snapshot the next steps use."""
        state = super().state_dict()
        state["kfac"] = {**{k: getattr(self, k) for k in SETTINGS}, "factor_updates": self.factor_updates,
                         "failures": self.failures, "good": None if self.good is None else self.good.to_dict(),
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
            for key in SETTINGS:
                if key in settings:  # absent in checkpoints written before the setting existed
                    setattr(self, key, settings[key])
            self.fisher = {"mc": "sampled"}.get(self.fisher, self.fisher)
            self.capture.fisher, self.capture.loss_reduction = self.fisher, self.loss_reduction
            if self.fisher == "sampled" and self.generator is None:
                self.generator = self.capture.generator = torch.Generator(device=self.layers[0].module.weight.device)
            self.factor_updates, self.failures = settings["factor_updates"], settings.get("failures", 0)
            good = settings.get("good")
            self.good = None if good is None else control.Snapshot.from_dict(good, self.layers[0].module.weight.device)
            self._totals = defaultdict(int, settings["totals"])
        if generator_state is not None and self.generator is not None:
            self.generator.set_state(generator_state)
        self.capture.enabled = self.param_groups[0]["step"] % self.factor_every == 0

    # ---- one step ----------------------------------------------------------------------------
    def _new_factors(self) -> tuple[dict, list]:
        """Running factors after folding this step's batch: ``{group: (A, G)}`` (temporaries) and the
        batch factors ``[(group, A_b, G_b, updated)]`` (empty when nothing was collected)."""
        start = time.perf_counter()
        batches = []
        if any(m.inputs or m.output_grads for m in self.layers):
            batches = [(g, *g.batch_factors(self.weight_sharing, self.capture.scale)) for g in self.groups]
            for layer in self.layers:
                layer.reset()
        new = {}
        if batches:
            w = factor_weight(self.factor_updates + 1, decay=self.factor_decay, every=self.factor_every)
            for g, a, gg, updated in batches:
                old = g.factors(self.state)
                if all(updated):
                    new[g] = tuple(f.lerp(b, w) for f, b in zip(old, (a, gg)))
                else:  # a layer without a batch this step keeps its factors
                    mask = torch.tensor(updated, device=g.device)[:, None, None]
                    new[g] = tuple(torch.where(mask, f.lerp(b, w), f) for f, b in zip(old, (a, gg)))
        self.timings["factors"] += time.perf_counter() - start + self.capture.seconds
        self.capture.seconds = 0.0
        return new, batches

    def _current(self, new: dict, step: int) -> dict:
        """Per shape group, the tensors this step solves with (new factors, fresh eigenbases)."""
        cur = {}
        start = time.perf_counter()
        n = self.factor_updates + 1
        # while the running factors are a plain mean of few batches they change fast, and an
        # eigenbasis of the first batch kept for inverse_every steps would divide new directions by
        # lambda: refresh at factor updates 1, 2, 4, 8, ... until the average settles
        warming = factor_weight(n, decay=self.factor_decay, every=self.factor_every) \
            > 1 - self.factor_decay ** self.factor_every and n & (n - 1) == 0
        refresh = []
        for g in self.groups:
            a, gg = new.get(g) or g.factors(self.state)
            cur[g] = {"factor_a": a, "factor_g": gg}
            if self.inverse == "eigen":
                if "eigenvalues_a" not in g.stacks or step % self.inverse_every == 0 or (g in new and warming):
                    refresh.append(g)
                else:
                    cur[g].update({k: g.stacks[k] for k in EIGEN_KEYS})
            elif self.warm_start and "cg_solution" in g.stacks:
                cur[g]["cg_solution"] = g.stacks["cg_solution"]
        # padded_eigh zeroes non-finite entries; these flags make such a factor fail the step's check
        self._decomposed_finite = [torch.isfinite(cur[g][k].sum()) for g in refresh for k in ("factor_a", "factor_g")]
        if refresh:  # every factor in at most two eigh calls: each call is a host sync
            pairs = padded_eigh([cur[g][k] for g in refresh for k in ("factor_a", "factor_g")])
            for j, g in enumerate(refresh):
                (cur[g]["eigenvalues_a"], cur[g]["eigenvectors_a"]), (cur[g]["eigenvalues_g"],
                                                                      cur[g]["eigenvectors_g"]) = pairs[2 * j: 2 * j + 2]
        self.timings["inverse"] += time.perf_counter() - start
        return cur

    def _layer_tensor(self, layers, key: str, dtype, device, scale: float = 1.0) -> torch.Tensor:
        return torch.tensor([self._group_of(m)[key] * scale for m in layers], dtype=dtype, device=device)

    def _solve(self, items: list, v: list[torch.Tensor]) -> tuple[list[torch.Tensor], dict]:
        """Preconditioned gradients ``X`` per item ``(group, tensors, persistent)`` and diagnostics."""
        start = time.perf_counter()
        dtype, device = v[0].dtype, v[0].device
        lam = [self._layer_tensor(g.layers, "damping", dtype, device)[:, None, None] for g, _, _ in items]
        info: dict = {}
        if self.inverse == "eigen":
            xs = [eigen_solve((c["eigenvalues_g"], c["eigenvectors_g"]), (c["eigenvalues_a"], c["eigenvectors_a"]),
                              vj, lj) for (g, c, _), vj, lj in zip(items, v, lam)]
        else:
            shapes = [tuple(vj.shape) for vj in v]
            blocks = self._blocks.get(tuple(shapes)) or self._blocks.setdefault(tuple(shapes), plan_blocks(shapes))
            x0 = [c.get("cg_solution") for _, c, _ in items] if self.warm_start else [None] * len(items)
            result = block_conjugate_gradient(
                pad([c["factor_g"] for _, c, _ in items], blocks, shapes, "g"),
                pad([c["factor_a"] for _, c, _ in items], blocks, shapes, "a"), pad(v, blocks, shapes, "x"),
                torch.cat([torch.cat([lam[i] for i in members]) for _, _, members in blocks]),
                x0=pad(x0, blocks, shapes, "x"), max_iter=self.cg_max_iter, tol=self.cg_tol,
                check_at=min(self.cg_max_iter, _CG_CHECK_AT))
            xs = []
            for (g, c, _), vj, solution, ok in zip(items, v, unpad(list(result.solution), blocks, shapes),
                                                   per_system(result.ok, blocks, shapes)):
                ok = ok[:, None, None]
                xs.append(torch.where(ok, solution, vj))  # a diverged system falls back to its gradient
                c["cg_solution"] = torch.where(ok, solution, 0.0)
            info = {"cg_iterations": result.iterations, "cg_fallbacks": (~result.ok).sum()}
        self.timings["inverse"] += time.perf_counter() - start
        return xs, info

    def _items(self, cur: dict) -> list:
        """``(group, tensors, persistent)`` for every shape group with gradients (sub-groups for the
        rare layers without one, which are solved but never written back)."""
        items = []
        for g in self.groups:
            present = [j for j, m in enumerate(g.layers) if m.module.weight.grad is not None]
            if len(present) == len(g):
                items.append((g, cur[g], True))
            elif present:
                items.append(partial_view(g, cur[g], present))
        return items

    @torch.no_grad()
    def step(self, closure=None):
        """One K-FAC step (see the module docstring); returns the closure's loss if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        step = self.param_groups[0]["step"]
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        new, batches = self._new_factors()
        flags = [torch.isfinite(torch.stack(torch._foreach_norm(grads, float("inf")))).all()] if grads else []
        flags += [torch.isfinite(f.sum()) for pair in new.values() for f in pair]
        try:
            cur = self._current(new, step)
            items = self._items(cur)
            v = [sub.gradients() for sub, _, _ in items]
            xs, info = self._solve(items, v) if items else ([], {})
            flags += [torch.isfinite(x.sum()) for x in xs] + self._decomposed_finite
        except torch.linalg.LinAlgError:
            flags.append(torch.zeros((), dtype=torch.bool, device=self.layers[0].module.weight.device))
        healthy = bool(torch.stack(flags).all()) if flags else True  # the one host check of the step
        if not healthy:
            return self._slow_step(step, grads, batches, loss, closure)
        self._commit(new, cur, batches)
        return self._update(step, items, v, xs, info, loss, closure)

    def _update(self, step, items, v, xs, info, loss, closure):
        """Apply a healthy step; on adaptation steps snapshot before and adapt the damping after."""
        checkpoint = self.adapt_every > 0 and step % self.adapt_every == 0
        pending = control.Snapshot(step, self._params(), self.state) if checkpoint else None
        stats = self._apply(items, v, xs, info, step)
        if checkpoint and closure is not None and loss is not None:
            after, rho = self._reduction_ratio(items, pending, loss, closure)
            stats["rho"] = rho
            if not math.isfinite(after):
                self.good = pending
                return self._fail(step, "non-finite loss after the step", loss, restore=True)
            omega = control.lm_omega(self.adapt_every)
            for group in self.param_groups:
                group["damping"] = control.adapt_damping(group["damping"], rho, omega)
        elif checkpoint:  # no closure: a damping raised by a failure decays back to its initial value
            for group in self.param_groups:
                group["damping"] = max(group["initial_damping"], group["damping"] * control.lm_omega(self.adapt_every))
        if checkpoint:
            self.good = pending
        self.failures = 0
        self._finish(stats)
        return loss

    def _reduction_ratio(self, items, before: "control.Snapshot", loss, closure) -> tuple[float, float]:
        """``(loss after the step, rho)``: the closure re-evaluated once, one host read."""
        params = [p for p in self._params() if p.grad is not None]
        index = {id(p): j for j, p in enumerate(self._params())}
        delta = torch._foreach_sub([p.detach() for p in params], [before.params[index[id(p)]] for p in params])
        predicted = torch.stack([(g * d).sum() for g, d in zip((p.grad for p in params), delta)]).sum()
        moved = dict(zip(params, delta))
        for sub, c, _ in items:
            d = sub.gradients(moved)
            predicted = predicted + 0.5 * control.kronecker_quadratic(c["factor_g"], c["factor_a"], d)
        with torch.no_grad():
            after = closure()
        after_value, before_value, predicted_value = torch.stack(
            [torch.as_tensor(t, dtype=torch.float64).reshape(()).to(predicted.device) for t in
             (after, loss, predicted)]).tolist()
        self._totals["adaptations"] += 1
        rho = (after_value - before_value) / predicted_value if predicted_value < 0 else float("nan")
        return after_value, rho

    def _commit(self, new: dict, cur: dict, batches: list) -> None:
        for g in self.groups:
            for key, value in cur[g].items():
                if key in g.stacks and value is g.stacks[key]:
                    continue
                if key in ("factor_a", "factor_g") and g not in new:
                    continue
                g.bind(self.state, key, value)
        if batches:
            self.factor_updates += 1

    def _apply(self, items, v, xs, info, step, preconditioned: bool = True) -> dict:
        start = time.perf_counter()
        directions, nu = {}, None
        if items:
            lr0 = [self._layer_tensor(sub.layers, "initial_lr", vj.dtype, vj.device) for (sub, _, _), vj in zip(items, v)]
            vg = torch.stack([(l ** 2 * (vj * x).sum(dim=(1, 2))).sum() for l, vj, x in zip(lr0, v, xs)]).sum()
            kl_clip = self._group_of(self.layers[0])["kl_clip"]
            nu = kl_clip_scale(vg, kl_clip=kl_clip)
            for (sub, _, _), x in zip(items, xs):
                directions.update(sub.split(x * nu if kl_clip is not None else x))
            if kl_clip is not None:
                self._totals["kl_clip_binding_steps"] = self._totals["kl_clip_binding_steps"] + (nu < 1).long()
        apply_param_groups(self.param_groups, self.state, directions)
        if "cg_fallbacks" in info:
            self._totals["cg_fallbacks"] = self._totals["cg_fallbacks"] + info["cg_fallbacks"]
        self.timings["apply"] += time.perf_counter() - start
        return {"step": step, "preconditioned": preconditioned, "nu": 1.0 if nu is None else nu,
                "kl_clip_binding": False if nu is None else (nu < 1), **info}

    def _slow_step(self, step, grads, batches, loss, closure):
        """The rare path after a failed check: find what failed and apply the robustness rules."""
        if grads and not bool(torch.isfinite(torch.stack(torch._foreach_norm(grads, float("inf")))).all()):
            return self._fail(step, "non-finite gradient", loss, restore=True)
        if batches:
            dropped = fold_per_layer(self.groups, self.state, batches,
                                     factor_weight(self.factor_updates + 1, decay=self.factor_decay,
                                                   every=self.factor_every))
            self._totals["dropped_factors"] += dropped
            self.factor_updates += 1
        try:
            cur = self._current({}, step)
            items = self._items(cur)
            v = [sub.gradients() for sub, _, _ in items]
            xs, info = self._solve(items, v) if items else ([], {})
            healthy = all(bool(torch.isfinite(x).all()) for x in xs) and all(bool(f) for f in self._decomposed_finite)
        except torch.linalg.LinAlgError:
            healthy = False
        if not healthy:
            return self._fail(step, "preconditioning failed", loss, restore=False)
        self._commit({}, cur, [])
        return self._update(step, items, v, xs, info, loss, closure)

    def _fail(self, step: int, reason: str, loss, *, restore: bool):
        """One failure incident: restore the last good state (``restore``), damping x10, fresh factors;
        one log line; ``max_failures`` in a row raise."""
        self.failures += 1
        self._totals["failures"] += 1
        if self.failures > self.max_failures:
            raise FloatingPointError(f"K-FAC: {self.failures} consecutive failed steps (last at step {step}: "
                                     f"{reason}); lower lr, raise damping or check the data")
        restored = restore and self.good is not None
        if restored:
            self.good.restore(self._params(), self.state)
        old = self._group_of(self.layers[0])["damping"]
        for group in self.param_groups:
            group["damping"] = min(group["damping"] * control.FAILURE_GROWTH, control.DAMPING_MAX)
        self.factor_updates = 0  # the next batch factor replaces the running factors (factor_weight(1) = 1)
        for g in self.groups:
            for key in EIGEN_KEYS + ("cg_solution",):
                if g.stacks.pop(key, None) is not None:
                    for layer in g.layers:
                        self.state[layer.module.weight].pop(key, None)
        where = f"restored the state of step {self.good.step}" if restored else "step skipped"
        logger.warning("K-FAC step %d: %s; %s, damping %.3g -> %.3g, factors refreshed (failure %d in a row, "
                       "at most %d)", step, reason, where, old, self._group_of(self.layers[0])["damping"],
                       self.failures, self.max_failures)
        self._finish({"step": step, "preconditioned": False, "nu": 1.0, "failure": reason})
        return loss

    def _finish(self, stats: dict) -> None:
        for group in self.param_groups:
            group["step"] += 1
        self.capture.enabled = self.param_groups[0]["step"] % self.factor_every == 0
        stats["damping"] = self._group_of(self.layers[0])["damping"]
        self._stats = stats
