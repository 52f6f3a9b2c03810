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

Cost (CPU, where per-call overhead of a few dozen small layers dominates): the hooks only keep
references; each step computes the batch factors of all layers of one shape together
(``_kfac_groups``, Q/K/V share one ``A``), keeps factors and solutions stacked per shape group, runs
the CG of all groups in one loop (``block_conjugate_gradient``) with one host check per iteration
and one finiteness check per step in the common case, and applies the base update with
``torch._foreach`` kernels. The arithmetic is unchanged (float64 runs agree with the per-layer
implementation to round-off).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

import torch
import torch.nn as nn
from torch.optim import Optimizer

from brownformer.optim._kfac_capture import FISHERS, SCOPES, FactorCapture, find_layers
from brownformer.optim._kfac_groups import LAYER_KEYS, LayerGroup, group_layers
from brownformer.optim._kfac_math import (WEIGHT_SHARING, block_conjugate_gradient, eigen_solve,
                                          kl_clip_scale, symmetric_eigh)

logger = logging.getLogger(__name__)

__all__ = ["KFAC"]

INVERSES = ("eigen", "cg")
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

    The per-layer state tensors (``factor_a``, ``factor_g``, ``cg_solution``, ``eigen*``) are views of
    per-shape stacks: edit them in place (or through ``load_state_dict``), do not rebind them.

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
        self.weight_sharing = weight_sharing
        self.groups = group_layers(self.layers)
        self.capture = FactorCapture(model, self.layers, fisher=fisher, generator=self.generator)
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
        """Restore; K-FAC tensors are restored in the factor dtype (torch would cast them to the
        param's) and re-stacked per shape group."""
        state_dict = dict(state_dict)
        generator_state = state_dict.pop("generator", None)
        params = [p for group in self.param_groups for p in group["params"]]
        keep = {i: {k: v for k, v in s.items() if k in LAYER_KEYS}
                for i, s in state_dict["state"].items() if isinstance(s, dict)}
        super().load_state_dict(state_dict)
        for i, tensors in keep.items():
            self.state[params[i]].update({k: v.to(params[i].device, copy=True) for k, v in tensors.items()})
        for group in self.groups:
            group.restack(self.state)
        if generator_state is not None and self.generator is not None:
            self.generator.set_state(generator_state)
        self.capture.enabled = self.param_groups[0]["step"] % self.factor_every == 0

    # ---- one step ----------------------------------------------------------------------------
    def _update_factors(self) -> None:
        """Fold the kept batch statistics into the running factors, one batched update per group."""
        start = time.perf_counter()
        if any(m.inputs or m.output_grads for m in self.layers):
            batches = [(group, *group.batch_factors(self.weight_sharing)) for group in self.groups]
            for layer in self.layers:
                layer.reset()
            self._fold(batches)
        self.timings["factors"] += time.perf_counter() - start + self.capture.seconds
        self.capture.seconds = 0.0

    def _fold(self, batches: list) -> None:
        """``F <- rho F + (1 - rho) F_batch`` on every stack; per layer only when something is off.

        One host check covers all batch factors. A non-finite batch factor is dropped; a
        non-finite running factor restarts from the identity (the rules of the module docstring).
        """
        rho = self.factor_decay
        sums = torch.stack([t.sum() for _, a, g, _ in batches for t in (a, g)])
        if bool(torch.isfinite(sums).all()) and all(all(updated) for *_, updated in batches):
            for group, a, g, _ in batches:
                for factor, batch in zip(group.factors(self.state), (a, g)):
                    factor.mul_(rho).add_(batch, alpha=1 - rho)
            running = torch.stack([f.sum() for group, *_ in batches for f in group.factors(self.state)])
            if bool(torch.isfinite(running).all()):
                return
            for group, a, g, _ in batches:  # a running factor was non-finite before this update
                for factor, batch in zip(group.factors(self.state), (a, g)):
                    for j in (~torch.isfinite(factor).flatten(1).all(dim=1)).nonzero().flatten().tolist():
                        eye = torch.eye(factor.shape[1], dtype=factor.dtype, device=factor.device)
                        factor[j] = eye.mul_(rho).add_(batch[j], alpha=1 - rho)
            return
        for group, a, g, updated in batches:
            for j, layer in enumerate(group.layers):
                if not updated[j]:
                    continue
                for key, factor, batch in zip(("factor_a", "factor_g"), group.factors(self.state), (a, g)):
                    factor, batch = factor[j], batch[j]
                    if not bool(torch.isfinite(factor).all()):
                        factor.copy_(torch.eye(factor.shape[0], dtype=factor.dtype, device=factor.device))
                    if not bool(torch.isfinite(batch).all()):
                        logger.warning("non-finite %s batch factor in %s: dropped", key, layer.name)
                        self._totals["dropped_factors"] += 1
                        continue
                    factor.mul_(rho).add_(batch, alpha=1 - rho)

    def _eigendecompose(self) -> None:
        for group in self.groups:
            for side, factor in zip("ag", group.factors(self.state)):
                d, q = symmetric_eigh(factor)
                group.bind(self.state, f"eigenvalues_{side}", d)
                group.bind(self.state, f"eigenvectors_{side}", q)

    def _refresh_inverse(self, step: int) -> bool:
        """eigen: eigendecompose every ``inverse_every`` steps (or when missing); False on failure."""
        if self.inverse != "eigen":
            return True
        start = time.perf_counter()
        try:
            if any("eigenvalues_a" not in g.stacks for g in self.groups) or step % self.inverse_every == 0:
                self._eigendecompose()
        except torch.linalg.LinAlgError:
            return False
        finally:
            self.timings["inverse"] += time.perf_counter() - start
        return True

    def _solve(self, groups: list[LayerGroup], v: list[torch.Tensor], damping: float, stats: dict
               ) -> list[torch.Tensor] | None:
        """Preconditioned gradients ``X`` (one ``(k, out, in[+1])`` per group), None on failure."""
        if self.inverse == "eigen":
            start = time.perf_counter()
            xs = [eigen_solve((g.stacks["eigenvalues_g"], g.stacks["eigenvectors_g"]),
                              (g.stacks["eigenvalues_a"], g.stacks["eigenvectors_a"]), vj, damping)
                  for g, vj in zip(groups, v)]
            finite = bool(torch.stack([torch.isfinite(x).all() for x in xs]).all())
            self.timings["apply"] += time.perf_counter() - start
            return xs if finite else None
        start = time.perf_counter()
        factors = [g.factors(self.state) for g in groups]
        x0 = None
        if self.warm_start:
            x0 = [g.stacks.get("cg_solution") for g in groups]
        result = block_conjugate_gradient([f[1] for f in factors], [f[0] for f in factors], v, damping, x0=x0,
                                          max_iter=self.cg_max_iter, tol=self.cg_tol)
        xs = []
        for g, vj, solution, ok in zip(groups, v, result.solution, result.ok.split([len(g) for g in groups])):
            ok = ok[:, None, None]
            xs.append(torch.where(ok, solution, vj))  # a diverged system falls back to its gradient
            kept = torch.where(ok, solution, 0.0)
            if not g.persistent:
                continue
            if "cg_solution" in g.stacks:
                g.stacks["cg_solution"].copy_(kept)
            else:
                g.bind(self.state, "cg_solution", kept)
        stats["cg_iterations"] = result.iterations.tolist()
        stats["cg_fallbacks"] = int((~result.ok).sum())
        self.timings["inverse"] += time.perf_counter() - start
        return xs

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
        self._update_factors()
        healthy = self._refresh_inverse(step)
        groups = [g for g in self.groups if all(m.module.weight.grad is not None for m in g.layers)]
        if len(groups) < len(self.groups):
            groups += self._partial_groups()
        v = [g.gradients() for g in groups]
        xs = (self._solve(groups, v, damping, stats) if healthy else None) if groups else []
        start = time.perf_counter()
        if xs is None:
            logger.warning("step %d: preconditioning failed; raw gradients used, damping %.3g -> %.3g",
                           step, damping, damping * _DAMPING_GROWTH)
            self._totals["preconditioning_skipped"] += 1
            group["damping"] = damping * _DAMPING_GROWTH
            xs = v
        directions = {}
        if groups:
            vg_sum = torch.stack([torch.dot(vj.reshape(-1), x.reshape(-1)) for vj, x in zip(v, xs)]).sum()
            nu = kl_clip_scale(vg_sum, lr=lr, kl_clip=self.kl_clip)
            for g, x in zip(groups, xs):
                directions.update(g.split(x * nu))
            stats.update(preconditioned=xs is not v, nu=float(nu))
        self._base_update(params, directions, group)
        self.timings["apply"] += time.perf_counter() - start
        self._finish(group, stats)
        return loss

    def _partial_groups(self) -> list[LayerGroup]:
        """Layers without a gradient this step, removed from their groups (rare: unused layers).

        The sub-groups get copies of the stacks; their solutions are not written back, so their
        CG restarts cold next step, which changes speed, not results beyond the CG tolerance.
        """
        subgroups = []
        for g in self.groups:
            present = [j for j, m in enumerate(g.layers) if m.module.weight.grad is not None]
            if 0 < len(present) < len(g):
                g.factors(self.state)
                sub = LayerGroup([g.layers[j] for j in present], persistent=False)
                scratch: dict = defaultdict(dict)
                for key, stack in g.stacks.items():
                    if key != "cg_solution":
                        sub.bind(scratch, key, stack[present])
                subgroups.append(sub)
        return subgroups

    def _base_update(self, params, directions: dict, group: dict) -> None:
        """SGD with momentum and coupled weight decay on ``directions`` (raw grads by default)."""
        lr, momentum, weight_decay = group["lr"], group["momentum"], group["weight_decay"]
        ds = [directions[p].to(p.dtype) if p in directions else p.grad for p in params]
        if weight_decay:
            ds = torch._foreach_add(ds, params, alpha=weight_decay)  # never in place: ds may be p.grad
        if momentum:
            bufs, new = [], []
            for p, d in zip(params, ds):
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = d.clone()
                    new.append(True)
                else:
                    new.append(False)
                bufs.append(state["momentum_buffer"])
            old = [(b, d) for b, d, n in zip(bufs, ds, new) if not n]
            if old:
                old_bufs, old_ds = zip(*old)
                torch._foreach_mul_(list(old_bufs), momentum)
                torch._foreach_add_(list(old_bufs), list(old_ds))
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
