"""Step control of K-FAC, its pure parts: the Levenberg-Marquardt rule, snapshots, the device counters, CG budgets.

The host check that applies them is ``KFAC._check`` (kfac.py); what it does:

* Step bound (kfac-pytorch's KL-clip, scaled with the schedule): the preconditioned directions ``X``
  are scaled by ``nu = min(1, sqrt(kl_clip / sum_l lr0_l^2 <V_l, X_l>))`` where ``lr0`` is the group's
  base lr (``initial_lr``), not its current lr. When the bound binds the step is
  ``lr * nu * X = (lr / lr0) sqrt(kl_clip) X / sqrt(<V, X>)``: its size still follows the schedule's
  factor ``lr / lr0`` (warm-up and decay act), where kfac-pytorch's ``nu`` (from the current lr)
  would cancel the lr and make the bound the step rule.
* Levenberg-Marquardt (Martens & Grosse 2015, sec. 6.5; kfac-jax's damping adaptation): every
  ``adapt_every`` steps, with a closure that re-evaluates the loss on the step's batch,
  ``rho = (h(theta + delta) - h(theta)) / (g^T delta + 1/2 sum_l <D_l, G_l D_l A_l>)`` (actual over
  the change the undamped Kronecker quadratic model predicts, ``delta`` the whole update, momentum and
  the AdamW half included; the parameters K-FAC does not precondition enter the model linearly); with
  ``lm_scope="preconditioned"`` ``delta`` is the preconditioned layers' part only and ``h(theta + delta)`` is read
  with every other parameter at its value before the step (the AdamW part, whose curvature the model lacks and on
  which the damping does not act, then neither lowers rho nor raises the damping);
  ``damping *= omega`` if ``rho > 3/4`` and the step was at least ``SHORT_STEP`` of the model's minimiser along
  it (a shorter step, from a small lr or the KL bound, fits any quadratic model: its rho says nothing about
  the damping), ``/= omega`` if ``rho < 1/4``,
  ``omega = 0.95^adapt_every``.
* Failures (a non-finite gradient, a non-finite loss after the step, a failed solve) are found without
  a host read in the step: the step's update is masked on the device (a failed step changes nothing)
  and the device counts them (:class:`Watch`). The host reads the counts at its next check (every
  ``adapt_every`` steps, with the LM numbers in one copy, or at a read of ``last_stats``); a check that
  finds failed steps is one incident: restore the last good snapshot (parameters and AdamW moments, taken
  at each check step and kept when its window had no failure; momentum restarts from zero), multiply the
  damping by 10 and refresh the factors from the next batch. ``max_failures`` incidents in a row stop
  training with one error, so there is never an endless cycle of restores or skipped steps.
"""
from __future__ import annotations

import torch


LM_LOW, LM_HIGH = 0.25, 0.75  # reduction-ratio thresholds (Martens & Grosse 2015; kfac-jax)
LM_DECAY_PER_STEP = 0.95  # omega = 0.95^adapt_every (Martens & Grosse: (19/20)^T1)
# a step shorter than this fraction of the model's minimiser along it cannot lower the damping: a short enough step
# has rho ~ 1 whatever the damping
SHORT_STEP = 0.5
DAMPING_MIN, DAMPING_MAX = 1e-6, 1e3  # G and A are O(1) at the loss's scale: 1e3 is SGD with lr / 1e3
FAILURE_GROWTH = 10.0  # one order of magnitude per failure
# the first-order state a restore brings back; the momentum buffers are cleared instead (measured: a buffer
# saved a few steps before a divergence already points along it and re-diverged the restored state at once)
SNAPSHOT_KEYS = ("exp_avg", "exp_avg_sq")


def lm_omega(adapt_every: int) -> float:
    """Multiplicative damping change per adaptation, ``0.95^adapt_every``."""
    return LM_DECAY_PER_STEP ** adapt_every


def kronecker_quadratic(g: torch.Tensor, a: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``sum_l <D_l, G_l D_l A_l>``: the curvature term of the undamped Kronecker model, a 0-d tensor."""
    return (d * torch.bmm(torch.bmm(g, d), a)).sum()


def adapt_damping(damping: float, rho: float, omega: float, *, short: bool = False) -> float:
    """One Levenberg-Marquardt update of the (relative) damping from the reduction ratio ``rho``
    (a non-finite ``rho``, e.g. a predicted change that is not a decrease, counts as a poor fit).

    ``short``: the step was much shorter than the model's minimiser along it (a small lr, or the KL bound cut it).
    Any short enough step fits a quadratic model (``rho -> 1``), so its good fit says nothing about a smaller
    damping, which is kept; a poor fit still raises it. (Lowered on every such check, the damping fell 30x in
    400 steps and reached the floor in a vit-post run that then failed to train; issue 33.)"""
    if rho == rho and rho > LM_HIGH and not short:
        damping *= omega
    elif not (rho == rho) or rho < LM_LOW:
        damping /= omega
    return min(max(damping, DAMPING_MIN), DAMPING_MAX)


class Snapshot:
    """Parameters and first-order optimizer state at one step (the state a failure restores)."""

    def __init__(self, step: int, params: list[torch.Tensor], state: dict):
        self.step = step
        # copies by one foreach op; a 0-d one, not 1.0: torch's CPU foreach converts a Python scalar per tensor
        self.params = torch._foreach_mul([p.detach() for p in params], torch.ones((), dtype=params[0].dtype,
                                                                                 device=params[0].device)) if params else []
        self.buffers = [{k: s[k].clone() for k in SNAPSHOT_KEYS if k in s} for s in (state.get(p, {}) for p in params)]

    def restore(self, params: list[torch.Tensor], state: dict) -> None:
        if self.params:
            torch._foreach_copy_([p.data for p in params], self.params)
        for p, saved in zip(params, self.buffers):
            state[p].pop("momentum_buffer", None)
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


class Watch:
    """What the device saw since the host last checked, counted on the device (steps never read it).

    ``failures``: failed steps, of them those with a non-finite gradient, dropped batch factors (reset at
    every check); ``cg``: per CG block, systems stopped by the iteration budget and the most iterations
    a system used (reset at scheduled checks, which set the budgets).
    """

    def __init__(self, device):
        self.failures = torch.zeros(3, dtype=torch.long, device=device)
        self.cg = torch.zeros(0, 2, dtype=torch.long, device=device)

    def add(self, *, failed=None, bad_gradient=None, dropped=None, cg_capped=None, cg_iterations=None) -> None:
        counts = [failed, bad_gradient, dropped]
        if any(c is not None for c in counts):
            zero = torch.zeros((), dtype=torch.long, device=self.failures.device)
            self.failures.add_(torch.stack([zero if c is None else c.long() for c in counts]))
        if cg_iterations is not None:  # per block
            if self.cg.shape[0] != cg_iterations.shape[0]:
                self.cg = torch.zeros(cg_iterations.shape[0], 2, dtype=torch.long, device=self.failures.device)
            self.cg[:, 0].add_(cg_capped)
            torch.maximum(self.cg[:, 1], cg_iterations, out=self.cg[:, 1])

    def to_dict(self) -> dict:
        return {"failures": self.failures.tolist(), "cg": self.cg.tolist()}

    def load(self, saved: dict) -> None:
        self.failures.copy_(torch.tensor(saved["failures"]))
        self.cg = torch.tensor(saved["cg"], dtype=torch.long, device=self.failures.device).reshape(-1, 2)






def next_budgets(budgets: list[int], seen: list[list[int]], cap: int) -> list[int]:
    """CG iterations per block for the next steps: the most any system of the block used in the last
    window (``seen[j] = [capped, used]``), doubled after a window in which the budget stopped some system
    of the block; within ``[1, cap]``. Blocks not seen keep their budget."""
    out = list(budgets)
    for j, (capped, used) in enumerate(seen[:len(out)]):
        out[j] = min(cap, max(1, 2 * out[j] if capped else used))
    return out
