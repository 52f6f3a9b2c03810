"""Step control of K-FAC: the lr-scaled KL bound, Levenberg-Marquardt damping, recovery from failures.

* Step bound (kfac-pytorch's KL-clip, scaled with the schedule): the preconditioned directions ``X``
  are scaled by ``nu = min(1, sqrt(kl_clip / sum_l lr0_l^2 <V_l, X_l>))`` where ``lr0`` is the group's
  base lr (``initial_lr``), not its current lr. When the bound binds the step is
  ``lr * nu * X = (lr / lr0) sqrt(kl_clip) X / sqrt(<V, X>)``: its size still follows the schedule's
  factor ``lr / lr0`` (warm-up and decay act), where kfac-pytorch's ``nu`` (from the current lr)
  would cancel the lr and make the bound the step rule.
* Damping relative to the factors: layer ``l`` solves ``G X A + lambda_l X = V`` with
  ``lambda_l = damping * tau_l``, ``tau_l = (tr A_l / n_a)(tr G_l / n_g)`` the mean eigenvalue of
  ``A_l (x) G_l``: one dimensionless ``damping`` means the same for every layer and every loss scale.
* Levenberg-Marquardt (Martens & Grosse 2015, sec. 6.5; kfac-jax's damping adaptation): every
  ``adapt_every`` steps, with a closure that re-evaluates the loss on the step's batch,
  ``rho = (h(theta + delta) - h(theta)) / (g^T delta + 1/2 sum_l <D_l, G_l D_l A_l>)`` (actual over
  the change the undamped Kronecker quadratic model predicts, ``delta`` the whole update, momentum and
  the AdamW half included; the parameters K-FAC does not precondition enter the model linearly);
  ``damping *= omega`` if ``rho > 3/4``, ``/= omega`` if ``rho < 1/4``, ``omega = 0.95^adapt_every``.
* Failures (a non-finite gradient, a non-finite loss after the step, a failed solve) restore the last
  good snapshot (parameters and first-order state, taken every ``adapt_every`` steps), multiply the
  damping by 10 and refresh the factors from the next batch; ``max_failures`` consecutive failures
  stop the run with one error.
"""
from __future__ import annotations

import torch

LM_LOW, LM_HIGH = 0.25, 0.75  # reduction-ratio thresholds (Martens & Grosse 2015; kfac-jax)
LM_DECAY_PER_STEP = 0.95  # omega = 0.95^adapt_every (Martens & Grosse: (19/20)^T1)
DAMPING_MIN, DAMPING_MAX = 1e-6, 1e3  # relative damping: 1e3 x the mean eigenvalue is SGD with lr / lambda
FAILURE_GROWTH = 10.0  # one order of magnitude per failure
SNAPSHOT_KEYS = ("momentum_buffer", "exp_avg", "exp_avg_sq")  # the first-order state a restore brings back
TAU_FLOOR = 1e-30  # a layer whose factors are exactly 0 (no curvature yet) keeps a positive damping


def lm_omega(adapt_every: int) -> float:
    """Multiplicative damping change per adaptation, ``0.95^adapt_every``."""
    return LM_DECAY_PER_STEP ** adapt_every


def mean_eigenvalue(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``tau = (tr A / n_a)(tr G / n_g)`` per stacked layer, ``(k, 1, 1)``: the mean eigenvalue of ``A (x) G``."""
    tau = a.diagonal(dim1=1, dim2=2).mean(-1) * g.diagonal(dim1=1, dim2=2).mean(-1)  # (k,)
    return tau.clamp_min(TAU_FLOOR)[:, None, None]


def kronecker_quadratic(g: torch.Tensor, a: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``sum_l <D_l, G_l D_l A_l>``: the curvature term of the undamped Kronecker model, a 0-d tensor."""
    return (d * torch.bmm(torch.bmm(g, d), a)).sum()


def adapt_damping(damping: float, rho: float, omega: float) -> float:
    """One Levenberg-Marquardt update of the (relative) damping from the reduction ratio ``rho``
    (a non-finite ``rho``, e.g. a predicted change that is not a decrease, counts as a poor fit)."""
    if rho == rho and rho > LM_HIGH:
        damping *= omega
    elif not (rho == rho) or rho < LM_LOW:
        damping /= omega
    return min(max(damping, DAMPING_MIN), DAMPING_MAX)


class Snapshot:
    """Parameters and first-order optimizer state at one step (the state a failure restores)."""

    def __init__(self, step: int, params: list[torch.Tensor], state: dict):
        self.step = step
        self.params = torch._foreach_mul([p.detach() for p in params], 1.0) if params else []
        self.buffers = [{k: s[k].clone() for k in SNAPSHOT_KEYS if k in s} for s in (state.get(p, {}) for p in params)]

    def restore(self, params: list[torch.Tensor], state: dict) -> None:
        if self.params:
            torch._foreach_copy_([p.data for p in params], self.params)
        for p, saved in zip(params, self.buffers):
            for key in SNAPSHOT_KEYS:
                if key in saved:
                    state[p][key].copy_(saved[key])
                else:
                    state[p].pop(key, None)

    def to_dict(self) -> dict:
        return {"step": self.step, "params": list(self.params), "buffers": self.buffers}

    @classmethod
    def from_dict(cls, saved: dict, device) -> "Snapshot":
        snap = cls.__new__(cls)
        snap.step = saved["step"]
        snap.params = [t.to(device) for t in saved["params"]]
        snap.buffers = [{k: v.to(device) for k, v in b.items()} for b in saved["buffers"]]
        return snap
