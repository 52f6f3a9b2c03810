"""K-FAC for nn.Linear layers with an eigen (exact) or conjugate-gradient (iterative) inverse.

One step, for every preconditioned layer with gradient ``V = dL/d[W, b]`` (Martens & Grosse 2015;
Grosse & Martens 2016; the iterative variant of arXiv 2101.00218):

1. factors: ``A <- rho A + (1 - rho) A_batch``, ``G <- rho G + (1 - rho) G_batch`` (running
   averages from the identity; batch factors from hooks, see ``_kfac_capture``), every
   ``factor_every`` steps;
2. solve ``G X A + lambda X = V``: ``inverse="eigen"`` from eigendecompositions refreshed every
   ``inverse_every`` steps; ``inverse="cg"`` by conjugate gradient on the current factors,
   warm-started from the previous solution, batched over same-shaped layers;
3. KL-clip (kfac-pytorch): ``X <- nu X``, ``nu = min(1, sqrt(kl_clip / (lr^2 sum_l <V_l, X_l>)))``;
4. base update on every parameter (``X`` for preconditioned layers, the raw gradient otherwise):
   ``d <- d + weight_decay p``; ``buf <- momentum buf + d``; ``p <- p - lr buf`` (SGD).

Robustness: a non-finite gradient skips the whole step; a non-finite batch factor is dropped (a
non-finite running factor is reset to the identity); an eigendecomposition failure or a
non-finite eigen update makes that step use the raw gradients and multiplies the damping by 10
(logged); a CG system that diverges falls back to its raw gradient and is counted.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

import torch
import torch.nn as nn
from torch.optim import Optimizer

from brownformer.optim._kfac_capture import FISHERS, SCOPES, FactorCapture, find_layers
from brownformer.optim._kfac_math import (WEIGHT_SHARING, conjugate_gradient, eigen_solve,
                                          kl_clip_scale, symmetric_eigh)

logger = logging.getLogger(__name__)

__all__ = ["KFAC"]

INVERSES = ("eigen", "cg")
_LAYER_KEYS = ("factor_a", "factor_g", "cg_solution", "eigenvalues_a", "eigenvectors_a",
               "eigenvalues_g", "eigenvectors_g")
_DAMPING_GROWTH = 10.0  # one order of magnitude per failure: a failure means the damping was far too small


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


class KFAC(Optimizer):
    """K-FAC optimizer (eigen or iterative/CG inverse) for any model made of ``nn.Linear`` layers.

    Usage is that of any ``torch.optim`` optimizer: ``opt.zero_grad(); loss.backward(); opt.step()``.
    The loss must be a mean over the batch (dimension 0 of the layer inputs) for ``G`` to have its
    documented scale (``_kfac_math``). Gradient accumulation over several backward passes averages
    the batch factors of the passes.

    Args:
        model: The model; hooks are registered on its in-scope ``nn.Linear`` layers.
        lr: Learning rate (``> 0``).
        damping: ``lambda`` in ``G X A + lambda X = V`` (author's code: 3e-3).
        inverse: ``"eigen"`` or ``"cg"`` (the paper's iterative K-FAC).
        factor_decay: Running-average decay ``rho`` in ``[0, 1)`` (0.95).
        factor_every: Collect factors every this many steps (1).
        inverse_every: Eigendecompose every this many steps (10, author's code); unused by ``cg``,
            which always solves with the current factors.
        cg_max_iter: CG iteration cap (10, author's code).
        cg_tol: CG relative-residual tolerance (1e-2, author's code).
        warm_start: Start CG from the previous step's solution (True).
        weight_sharing: ``"expand"`` (every token an example) or ``"reduce"`` (tokens averaged
            per sequence), Eschenhagen et al. 2023.
        per_head: Block-diagonal ``G`` per head for the attention Q, K, V projections.
        scope: ``"all"``, ``"attention"`` or ``"mlp"`` (rule in ``_kfac_capture``).
        momentum: SGD momentum in ``[0, 1)`` (0.9).
        weight_decay: Coupled (L2) weight decay ``>= 0`` applied after preconditioning.
        kl_clip: KL-clip bound ``> 0`` or None to disable (1e-3, author's code).
        fisher: ``"empirical"`` (training labels, the default by measurement on the
            ill-conditioned test problem) or ``"mc"`` (labels sampled from the model).
        n_heads: Head count for ``per_head`` (else read from the attention module).
        seed: Seed of the generator that samples ``mc`` labels.

    Raises:
        ValueError: On an invalid argument or when no ``nn.Linear`` layer is in scope.

    Attributes:
        last_stats: Diagnostics of the last step (damping, nu, cg iterations, fallbacks...).
        timings: Accumulated seconds ``{"factors", "inverse", "apply"}`` (host clock; synchronize
            the device before reading them on a GPU).
    """

    def __init__(self, model: nn.Module, lr: float, *, damping: float = 3e-3, inverse: str = "eigen",
                 factor_decay: float = 0.95, factor_every: int = 1, inverse_every: int = 10,
                 cg_max_iter: int = 10, cg_tol: float = 1e-2, warm_start: bool = True,
                 weight_sharing: str = "expand", per_head: bool = False, scope: str = "all",
                 momentum: float = 0.9, weight_decay: float = 0.0, kl_clip: float | None = 1e-3,
                 fisher: str = "empirical", n_heads: int | None = None, seed: int = 0):
        _check(lr > 0, f"lr must be > 0, got {lr}")
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
        _check(n_heads is None or n_heads >= 1, f"n_heads must be >= 1, got {n_heads}")
        self.layers = find_layers(model, scope=scope, per_head=per_head, n_heads=n_heads)
        params = [p for p in model.parameters() if p.requires_grad]
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, damping=damping, step=0)
        super().__init__(params, defaults)
        self.inverse, self.factor_decay, self.kl_clip = inverse, factor_decay, kl_clip
        self.factor_every, self.inverse_every = int(factor_every), int(inverse_every)
        self.cg_max_iter, self.cg_tol, self.warm_start = int(cg_max_iter), cg_tol, warm_start
        device = self.layers[0].module.weight.device
        self.generator = torch.Generator(device=device).manual_seed(seed) if fisher == "mc" else None
        self.capture = FactorCapture(model, self.layers, weight_sharing=weight_sharing, fisher=fisher,
                                     generator=self.generator)
        self.last_stats: dict[str, float] = {}
        self.timings = {"factors": 0.0, "inverse": 0.0, "apply": 0.0}
        self._totals = defaultdict(int)

    # ---- persistence -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.generator is not None:
            state["generator"] = self.generator.get_state()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore; K-FAC tensors keep their saved dtype (torch would cast them to the param's)."""
        state_dict = dict(state_dict)
        generator_state = state_dict.pop("generator", None)
        params = [p for group in self.param_groups for p in group["params"]]
        keep = {i: {k: v for k, v in s.items() if k in _LAYER_KEYS}
                for i, s in state_dict["state"].items() if isinstance(s, dict)}
        super().load_state_dict(state_dict)
        for i, tensors in keep.items():
            self.state[params[i]].update({k: v.to(params[i].device, copy=True) for k, v in tensors.items()})
        if generator_state is not None and self.generator is not None:
            self.generator.set_state(generator_state)
        self.capture.enabled = self.param_groups[0]["step"] % self.factor_every == 0

    # ---- one step ----------------------------------------------------------------------------
    def _layer_state(self, layer) -> dict:
        return self.state[layer.module.weight]

    def _update_factors(self, group: dict) -> bool:
        """Fold the collected batch factors into the running averages; True if any changed."""
        start, changed = time.perf_counter(), False
        rho = self.factor_decay
        for layer in self.layers:
            if layer.count_a == 0 or layer.count_g == 0:
                layer.reset()
                continue
            state = self._layer_state(layer)
            for key, total, count in (("factor_a", layer.sum_a, layer.count_a), ("factor_g", layer.sum_g, layer.count_g)):
                batch = total / count
                if key not in state or not torch.isfinite(state[key]).all():
                    state[key] = torch.eye(batch.shape[0], dtype=batch.dtype, device=batch.device)
                if not torch.isfinite(batch).all():
                    logger.warning("non-finite %s batch factor in %s: dropped", key, layer.name)
                    self._totals["dropped_factors"] += 1
                    continue
                state[key].mul_(rho).add_(batch, alpha=1 - rho)
                changed = True
            layer.reset()
        self.timings["factors"] += time.perf_counter() - start + self.capture.seconds
        self.capture.seconds = 0.0
        return changed

    def _factors(self, layer, key: str) -> torch.Tensor:
        state = self._layer_state(layer)
        if key not in state:
            n = layer.shape[0] if key == "factor_g" else layer.shape[1]
            w = layer.module.weight
            dtype = torch.float64 if w.dtype == torch.float64 else torch.float32
            state[key] = torch.eye(n, dtype=dtype, device=w.device)
        return state[key]

    def _shape_groups(self, layers) -> dict[tuple, list]:
        groups = defaultdict(list)
        for layer in layers:
            groups[layer.shape].append(layer)
        return groups

    def _eigendecompose(self, layers) -> None:
        for members in self._shape_groups(layers).values():
            for side in ("a", "g"):
                d, q = symmetric_eigh(torch.stack([self._factors(m, f"factor_{side}") for m in members]))
                for j, m in enumerate(members):
                    self._layer_state(m)[f"eigenvalues_{side}"] = d[j]
                    self._layer_state(m)[f"eigenvectors_{side}"] = q[j]

    def _solve(self, members, v: torch.Tensor, damping: float, stats: dict) -> torch.Tensor:
        """Preconditioned gradients ``X`` (k, out, in) of one same-shaped group."""
        states = [self._layer_state(m) for m in members]
        if self.inverse == "eigen":
            eig = {k: torch.stack([s[k] for s in states]) for k in _LAYER_KEYS[3:]}
            return eigen_solve((eig["eigenvalues_g"], eig["eigenvectors_g"]),
                               (eig["eigenvalues_a"], eig["eigenvectors_a"]), v, damping)
        g = torch.stack([self._factors(m, "factor_g") for m in members])
        a = torch.stack([self._factors(m, "factor_a") for m in members])
        x0 = None
        if self.warm_start and all("cg_solution" in s for s in states):
            x0 = torch.stack([s["cg_solution"] for s in states])
        result = conjugate_gradient(g, a, v, damping, x0=x0, max_iter=self.cg_max_iter, tol=self.cg_tol)
        x = torch.where(result.ok[:, None, None], result.solution, v)
        for j, s in enumerate(states):
            s["cg_solution"] = x[j].clone() if bool(result.ok[j]) else torch.zeros_like(v[j])
        stats["cg_iterations"].extend(result.iterations.tolist())
        stats["cg_fallbacks"] += int((~result.ok).sum())
        return x

    @torch.no_grad()
    def step(self, closure=None):
        """One K-FAC step (see the module docstring); returns the closure's loss if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        group = self.param_groups[0]
        step, lr, damping = group["step"], group["lr"], group["damping"]
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        stats = {"step": step, "cg_iterations": [], "cg_fallbacks": 0, "preconditioned": False, "nu": 1.0}
        grad_max = torch._foreach_norm([p.grad for p in params], float("inf")) if params else []
        if params and not bool(torch.isfinite(torch.stack(grad_max)).all()):
            logger.warning("step %d: non-finite gradient; step skipped", step)
            self._totals["skipped_steps"] += 1
            for layer in self.layers:
                layer.reset()
            self._finish(group, stats)
            return loss
        self._update_factors(group)
        layers = [m for m in self.layers if m.module.weight.grad is not None]
        start = time.perf_counter()
        precondition = True
        if self.inverse == "eigen" and layers:
            stale = any("eigenvalues_a" not in self._layer_state(m) for m in layers)
            if stale or step % self.inverse_every == 0:
                try:
                    self._eigendecompose(self.layers)
                except torch.linalg.LinAlgError:
                    precondition = False
        self.timings["inverse"] += time.perf_counter() - start if self.inverse == "eigen" else 0.0
        updates, vg_sum = {}, torch.zeros(())
        for members in self._shape_groups(layers).values():
            start = time.perf_counter()
            v = torch.stack([self._grad_matrix(m) for m in members])  # (k, out, in[+1])
            x = self._solve(members, v, damping, stats) if precondition else v
            if not bool(torch.isfinite(x).all()):
                precondition = False
            self.timings["inverse" if self.inverse == "cg" else "apply"] += time.perf_counter() - start
            vg_sum = vg_sum.to(x) + (v * x).sum()
            updates.update({m.name: x[j] for j, m in enumerate(members)})
        if not precondition:
            logger.warning("step %d: preconditioning failed; raw gradients used, damping %.3g -> %.3g",
                           step, damping, damping * _DAMPING_GROWTH)
            self._totals["preconditioning_skipped"] += 1
            group["damping"] = damping * _DAMPING_GROWTH
            updates = {m.name: self._grad_matrix(m) for m in layers}
            vg_sum = sum((u * u).sum() for u in updates.values()) if updates else torch.zeros(())
        start = time.perf_counter()
        nu = kl_clip_scale(vg_sum, lr=lr, kl_clip=self.kl_clip) if updates else torch.ones(())
        directions = {}
        for m in layers:
            x = updates[m.name] * nu
            directions[m.module.weight] = x[:, : m.module.in_features]
            if m.has_bias:
                directions[m.module.bias] = x[:, -1]
        self._base_update(params, directions, group)
        self.timings["apply"] += time.perf_counter() - start
        stats.update(preconditioned=precondition and bool(updates), nu=float(nu))
        self._finish(group, stats)
        return loss

    @staticmethod
    def _grad_matrix(layer) -> torch.Tensor:
        """``[dL/dW, dL/db]`` as an ``(out, in[+1])`` matrix in the factor dtype."""
        w = layer.module.weight
        dtype = torch.float64 if w.dtype == torch.float64 else torch.float32
        parts = [w.grad] + ([layer.module.bias.grad[:, None]] if layer.has_bias else [])
        return torch.cat(parts, dim=1).to(dtype)

    def _base_update(self, params, directions: dict, group: dict) -> None:
        """SGD with momentum and coupled weight decay on ``directions`` (raw grads by default)."""
        lr, momentum, weight_decay = group["lr"], group["momentum"], group["weight_decay"]
        ds = [directions[p].to(p.dtype) if p in directions else p.grad.clone() for p in params]
        if weight_decay:
            torch._foreach_add_(ds, params, alpha=weight_decay)
        if momentum:
            bufs = []
            for p, d in zip(params, ds):
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = d.clone()
                else:
                    state["momentum_buffer"].mul_(momentum).add_(d)
                bufs.append(state["momentum_buffer"])
            ds = bufs
        torch._foreach_add_(params, ds, alpha=-lr)

    def _finish(self, group: dict, stats: dict) -> None:
        group["step"] += 1
        self.capture.enabled = group["step"] % self.factor_every == 0
        iters = stats.pop("cg_iterations")
        self._totals["cg_fallbacks"] += stats["cg_fallbacks"]
        stats.update(damping=group["damping"],
                     cg_iterations_mean=sum(iters) / len(iters) if iters else 0.0,
                     cg_iterations_max=max(iters) if iters else 0,
                     **{f"{k}_total": v for k, v in self._totals.items()})
        self.last_stats = stats
