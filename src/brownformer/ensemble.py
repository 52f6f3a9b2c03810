"""Several runs of one (model, optimizer) trained in one process as one batched model.

At d_model 32 a step is a few hundred small kernels; an ensemble runs them once for all its members (on the CPU
that saves the calls, not the passes over the members' activations: 8 vit-pre members cost 4-6x one run's step).
Each member's weights are stacked on a leading member axis (`torch.func.stack_module_state`), the forward runs them
all at once (below), and the loss is the sum of the members' losses, so each member's
gradient is that of its own loss. The optimizer (AdamW or SGD: brownformer.config.ensembles.ENSEMBLE_OPTIMIZERS)
is elementwise, so one step on the stacked tensors is every member's own step; gradient clipping is per member.
Three forwards (`backend`, ENSEMBLE_BACKENDS): "batched" (default) writes every layer with the member axis
(brownformer.ensemble_batched: one batched matmul per linear layer, attention with members folded into the
batch); "vmap" maps `functional_call` of the model over the member axis, attention on the math kernel
(F.scaled_dot_product_attention's fused CPU kernel has no batching rule); "compile" runs the batched forward
(and its backward) under torch.compile in training steps: 10-33% less CPU a step than "batched" but 10-61 CPU-s
to compile (warm or empty inductor cache), so it can pay only in long runs (500 lm-pre steps: break-even). All
equal the runs alone to float rounding (benchmarks/results/ensemble_compute.md).

A member is a run as `brownformer.train.train_run` trains it, to float rounding: its own initialisation
(torch seed), data order (RunSpec.data_seed), probes (its own recorder, called with the member's weights),
checkpoints (the format of a run alone, so either resumes the other) and outputs in its own run folder. Its
metrics' wall_time is its share of the ensemble's (elapsed / members); the manifest lists the ensemble.

Resume: members resume from their own checkpoints; members at one step (and whether stopped at claim 4's
target) train together, so a kill between two members' checkpoint writes costs time, never correctness.
"""
from __future__ import annotations

import copy
import functools
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm.auto import tqdm

from brownformer.config import ExperimentConfig, RunPlan
from brownformer.config.ensembles import ensemble_key
from brownformer.data import DeviceSampler, PreparedData, eval_batches, eval_batches_on, load_prepared
from brownformer.ensemble_batched import batched_logits
from brownformer.metrics import val_metric_for_kind
from brownformer.models import loss_fn
from brownformer.optim import build_optimizer, implementation_flags
from brownformer.target_stop import STOPPED, on_smoothed_target
from brownformer.run_folder import resume_state, save_checkpoint, write_run_outputs
from brownformer.train import StepCallback, lr_factor, open_run, resolve_device, set_determinism, timed_callbacks
from brownformer.train_rows import val_summary
from brownformer.train_step import LossTracker

log = logging.getLogger(__name__)

__all__ = ["ENSEMBLE_BACKENDS", "clip_members", "train_ensemble"]

#: how the members' forward is batched: layers holding the member axis, vmap over one model's forward, or the
#: first under torch.compile (training steps only; evaluation runs it eagerly)
ENSEMBLE_BACKENDS = ("batched", "vmap", "compile")


@dataclass
class _Member:
    """One run of the ensemble: its config, seeds, sampler, probes, and where its training stands."""

    run_id: str
    plan: RunPlan  # the run resolved once (ExperimentConfig.plan)
    out_dir: Path
    model: nn.Module  # the member's own weights between steps: probes, evaluation of one, checkpoints
    sampler: DeviceSampler
    tracker: LossTracker
    callbacks: list[StepCallback]
    probing: bool
    rng: torch.Tensor  # the torch RNG state the run alone would carry (nothing in an AdamW/SGD step draws)
    optimizer_state: dict | None = None  # a checkpoint's, for the stacked optimizer
    start_step: int = 0
    lr_sum: float = 0.0
    lr_sq_sum: float = 0.0
    wall: float = 0.0
    eval_wall: float = 0.0
    probe_wall: float = 0.0
    stopped: bool = False
    done: bool = False
    rows: list[dict] = field(default_factory=list)

    @functools.cached_property
    def synced_steps(self) -> set[int]:
        """The steps where a callback works (a recorder's captures): the member's weights are written out there."""
        return set().union(*(getattr(cb, "schedule", ()) for cb in self.callbacks))


def train_ensemble(cfg: ExperimentConfig, run_ids: list[str], data_dir: str | Path, runs_dir: str | Path, *,
                   probes: bool = False, callbacks: dict[str, list[StepCallback]] | None = None,
                   stop_after: int | None = None, progress: bool = True,
                   backend: str = "batched") -> dict[str, pd.DataFrame]:
    """Train `run_ids` (runs of one `config.ensembles.ensemble_key`) as one batched model.

    Args:
        cfg: the validated experiment config.
        run_ids: the members; each writes runs_dir/<run_id> as `train_run` would.
        data_dir: the prepared dataset of their model, loaded once.
        probes: record each member's probes when the config probes it (as `train_run`).
        callbacks: run id -> extra callbacks of that member, called as in `train_run`.
        stop_after: stop every member (with a checkpoint) after this many steps, as if killed; for tests.
        backend: the batched forward, one of ENSEMBLE_BACKENDS (the same numbers to float rounding).
    Returns:
        Run id -> its metrics table (written to its run folder when it completes).
    Raises:
        ValueError: no runs, a run twice, runs that cannot train together (naming them), or an unknown backend.
    """
    if backend not in ENSEMBLE_BACKENDS:
        raise ValueError(f"unknown ensemble backend {backend!r}; known: {', '.join(ENSEMBLE_BACKENDS)}")
    if not run_ids or len(set(run_ids)) != len(run_ids):
        raise ValueError(f"an ensemble needs distinct runs, got {list(run_ids)}")
    plans = {run_id: cfg.plan(run_id) for run_id in run_ids}
    keys = {run_id: ensemble_key(cfg, plan) for run_id, plan in plans.items()}
    if None in keys.values() or len(set(keys.values())) > 1:
        raise ValueError(f"runs {list(run_ids)} cannot train as one ensemble: it takes runs of one model and one "
                         "AdamW or SGD optimizer, without dropout, with one training schedule")
    device = resolve_device(plans[run_ids[0]].device)
    flags = set_determinism(plans[run_ids[0]].train, device)
    data = load_prepared(data_dir)
    callbacks = callbacks or {}
    members = [_open_member(plans[run_id], Path(runs_dir) / run_id, data, device, probes=probes,
                            callbacks=callbacks.get(run_id, [])) for run_id in run_ids]
    out: dict[str, pd.DataFrame] = {}
    # members at one step train together (after a kill between checkpoint writes they may stand apart)
    for start in sorted({(m.start_step, m.stopped) for m in members}):
        part = [m for m in members if (m.start_step, m.stopped) == start]
        out.update(_train_together(part, data, device, flags, run_ids, stop_after=stop_after, progress=progress,
                                   backend=backend))
    return {run_id: out[run_id] for run_id in run_ids if run_id in out}


def _open_member(plan: RunPlan, out_dir: Path, data: PreparedData, device: torch.device, *,
                 probes: bool, callbacks: list[StepCallback]) -> _Member:
    """A member as `train_run` starts its run: a rerun's checkpoint dropped, probes, init, sampler, resume."""
    run_id, tcfg = plan.run_id, plan.train
    seq_len = plan.model.seq_len if data.kind == "text" else None
    model, callbacks, probing = open_run(plan, data, out_dir, device, probes=probes, callbacks=callbacks)
    sampler = DeviceSampler(data, "train", device, seed=plan.seeds.data, batch_size=tcfg.batch_size, seq_len=seq_len,
                            augment=plan.dataset.augment)
    member = _Member(run_id, plan, out_dir, model, sampler, LossTracker(device), callbacks, probing,
                     torch.get_rng_state())
    state = resume_state(out_dir / "checkpoints" / "last.pt", plan, device)
    if state is not None:
        model.load_state_dict(state["model"])
        member.optimizer_state, member.rng = state["optimizer"], state["rng"]
        member.start_step, member.lr_sum, member.lr_sq_sum = state["step"], state["lr_sum"], state["lr_sq_sum"]
        member.wall, member.rows = state["wall_time"], state["metrics_rows"]
        member.eval_wall, member.probe_wall = state.get("eval_wall_time", 0.0), state.get("probe_wall_time", 0.0)
        if "loss_tracker" in state:
            member.tracker.load(state["loss_tracker"])
        member.stopped = bool(state.get(STOPPED, False))
        log.info("resuming %s from step %d", run_id, member.start_step)
    return member


class _Stack:
    """The members' weights stacked on a leading axis, the batched forward, and the optimizer over them."""

    def __init__(self, members: list[_Member], device: torch.device, backend: str):
        self.n, self.backend = len(members), backend
        # inductor fuses the elementwise work of forward and backward; compiled once per process and shape
        self.compiled = torch.compile(batched_logits) if backend == "compile" else None
        params, buffers = stack_module_state([m.model for m in members])
        self.names = list(params)
        self.params = {k: nn.Parameter(v) for k, v in params.items()}  # (E, *shape) each
        self.buffers = buffers
        self.base = copy.deepcopy(members[0].model).to("meta")  # the architecture only; weights come stacked
        ocfg = members[0].plan.optimizer
        flags = implementation_flags(ocfg.type, device, cuda_graphs=False)
        self.optimizer = build_optimizer(nn.ParameterList(self.params.values()), ocfg.type, ocfg.lr,
                                         {**ocfg.params, **flags})
        saved = [m.optimizer_state for m in members]
        if all(s is not None for s in saved):
            self.optimizer.load_state_dict(_stacked_optimizer_state(saved))

    def forward(self, x: torch.Tensor, *, shared_input: bool = False) -> torch.Tensor:
        """Logits of every member, (E, B, ...): x is (E, B, ...), or one batch (B, ...) for all (shared_input)."""
        if self.backend == "compile" and not shared_input and torch.is_grad_enabled():
            return self.compiled(self.params, self.base, x)
        if self.backend in ("batched", "compile"):
            return batched_logits(self.params, self.base, x.expand(self.n, *x.shape) if shared_input else x)
        def one(params, buffers, inputs):
            return functional_call(self.base, (params, buffers), (inputs,))
        with sdpa_kernel([SDPBackend.MATH]):
            return vmap(one, in_dims=(0, 0, None if shared_input else 0))(self.params, self.buffers, x)

    def clip(self, max_norm: float) -> None:
        clip_members([p.grad for p in self.params.values() if p.grad is not None], self.n, max_norm)

    def set_lr(self, factor: float) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = group["initial_lr"] * factor
        return self.optimizer.param_groups[0]["initial_lr"] * factor

    def write_member(self, i: int, model: nn.Module) -> None:
        """Copy member i's stacked weights into its own module."""
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(self.params[name][i])

    def member_optimizer_state(self, i: int) -> dict:
        """Member i's optimizer state_dict, as its run alone would save it (per-parameter tensors sliced)."""
        full = self.optimizer.state_dict()
        state = {k: {key: _member_entry(key, v, i) for key, v in s.items()} for k, s in full["state"].items()}
        return {"state": state, "param_groups": copy.deepcopy(full["param_groups"])}


def clip_members(grads: list[torch.Tensor], n: int, max_norm: float) -> None:
    """Each member's gradient (stacked tensors (n, ...)) scaled in place to global norm <= max_norm, as
    torch.nn.utils.clip_grad_norm_ scales one run's."""
    norms = torch.stack([g.reshape(n, -1).norm(dim=1) for g in grads], dim=1)  # (E, n_tensors)
    coef = (max_norm / (norms.norm(dim=1) + 1e-6)).clamp(max=1.0)  # (E,)
    for g in grads:
        g.mul_(coef.view(n, *([1] * (g.dim() - 1))))


def _member_entry(key: str, value, i: int):
    """Member i's value of one optimizer state entry: the shared step counter, or its slice of a stacked tensor
    (SGD without momentum keeps None)."""
    if key == "step" or value is None:
        return value.clone() if isinstance(value, torch.Tensor) else value
    return value[i].clone()


def _stacked_optimizer_state(saved: list[dict]) -> dict:
    """The stacked optimizer's state_dict from the members' (their step counters agree: they stand at one step)."""
    def stacked(k, key, value):
        if key == "step" or value is None:
            return value
        return torch.stack([s["state"][k][key] for s in saved])
    state = {k: {key: stacked(k, key, v) for key, v in per_param.items()} for k, per_param in saved[0]["state"].items()}
    return {"state": state, "param_groups": copy.deepcopy(saved[0]["param_groups"])}


@torch.no_grad()
def _evaluate_members(stack: _Stack, batches, kind: str) -> list[dict]:
    """Every member's validation row over the same fixed batches (as brownformer.train's evaluation)."""
    losses, corrects, counts = [], [], []
    for x, y in batches:
        logits = stack.forward(x, shared_input=True)  # (E, B, ...)
        losses.append(vmap(loss_fn, in_dims=(0, None))(logits, y).float())  # (E,)
        if kind == "image":
            corrects.append((logits.argmax(-1) == y).sum(dim=-1))  # (E,)
        counts.append(y.numel())
    per_batch = torch.stack(losses, dim=1).tolist()  # (E, n_batches)
    correct = torch.stack(corrects, dim=1).sum(dim=1).tolist() if kind == "image" else [None] * stack.n
    return [val_summary(per_batch[i], counts, kind, correct=correct[i]) for i in range(stack.n)]


def _train_together(members: list[_Member], data: PreparedData, device: torch.device, flags: dict,
                    ensemble: list[str], *, stop_after: int | None, progress: bool,
                    backend: str) -> dict[str, pd.DataFrame]:
    """Train members that stand at one step to the end of the budget (each stops at its claim-4 target)."""
    tcfg, n = members[0].plan.train, len(members)
    seq_len = members[0].plan.model.seq_len if data.kind == "text" else None
    stack = _Stack(members, device, backend)
    val = eval_batches_on(eval_batches(data, "val", batch_size=tcfg.batch_size, n_batches=tcfg.eval_batches,
                                      seq_len=seq_len), device)
    targets = [m.plan.stop_target for m in members]
    target_metric = val_metric_for_kind(data.kind)
    n_train = int(data.meta["sizes"]["train"])
    tokens_per_example = seq_len or (getattr(members[0].model, "n_patches", 0) + 1)
    start_step = members[0].start_step
    t0 = time.perf_counter()
    end_step = start_step if all(m.stopped for m in members) else tcfg.steps  # stopped at the target: no more
    metrics: dict[str, pd.DataFrame] = {}
    bar = tqdm(range(start_step, end_step), desc=f"{members[0].run_id} (+{n - 1})", disable=not progress,
               mininterval=5)
    for step in bar:
        for i, m in enumerate(members):
            if not m.done and step in m.synced_steps:
                stack.write_member(i, m.model)
            if not m.done:
                m.probe_wall += timed_callbacks(m.callbacks, step, m.model, m.lr_sum, m.lr_sq_sum, device,
                                                m.synced_steps)
        lr = stack.set_lr(lr_factor(step, tcfg))
        batches = [m.sampler.batch(step) for m in members]
        x, y = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])  # (E, B, ...)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=tcfg.precision == "bf16"):
            losses = vmap(loss_fn)(stack.forward(x), y)  # (E,): member i's loss on its own batch
        stack.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()  # member i's weights get the gradient of loss i only
        if tcfg.grad_clip is not None:
            stack.clip(tcfg.grad_clip)
        stack.optimizer.step()
        done = step + 1
        evaluated = done % tcfg.eval_every == 0 or done == tcfg.steps
        logged = done % tcfg.log_every == 0 or evaluated
        vals = None
        if logged and evaluated:
            eval_start = time.perf_counter()
            vals = _evaluate_members(stack, val, data.kind)
            eval_share = (time.perf_counter() - eval_start) / n
        elapsed = (time.perf_counter() - t0) / n  # each member's share of the ensemble's wall-clock
        for i, m in enumerate(members):
            if m.done:
                continue
            m.tracker.add(losses[i].detach())
            m.lr_sum += lr
            m.lr_sq_sum += lr * lr
            if logged:
                m.eval_wall += eval_share if vals is not None else 0.0
                m.rows.append(_member_row(m, done, lr, vals[i] if vals else None, n_train, tcfg.batch_size,
                                          elapsed, start_step, tokens_per_example))
                if not (math.isfinite(m.rows[-1]["train_loss"]) and math.isfinite(m.rows[-1]["train_loss_mean"])):
                    log.warning("%s: non-finite training loss by step %d", m.run_id, done)
                m.stopped = (targets[i] is not None and done < tcfg.steps
                             and on_smoothed_target(m.rows, targets[i], target_metric))
            if done % tcfg.checkpoint_every == 0 or done == tcfg.steps or done == stop_after or m.stopped:
                stack.write_member(i, m.model)
                _save_member(stack, i, m, done, elapsed)
            if m.stopped:
                log.info("%s: stopped at step %d, the first evaluation on claim 4's target %s",
                         m.run_id, done, targets[i])
                metrics[m.run_id] = _finish(stack, i, m, done, elapsed, data, device, flags, ensemble)
        if stop_after is not None and done >= stop_after:
            log.info("%s (+%d): stopping after %d steps as asked", members[0].run_id, n - 1, done)
            return {m.run_id: pd.DataFrame(m.rows) for m in members}
        if all(m.done for m in members):
            break
    elapsed = (time.perf_counter() - t0) / n
    for i, m in enumerate(members):
        if not m.done:
            metrics[m.run_id] = _finish(stack, i, m, end_step, elapsed, data, device, flags, ensemble)
    return metrics


def _member_row(m: _Member, done: int, lr: float, val: dict | None, n_train: int, batch_size: int,
                elapsed: float, start_step: int, tokens_per_example: int) -> dict:
    """A metrics row of member m, with the columns `train_run` writes (AdamW and SGD have no optimizer diagnostics)."""
    train_loss, train_loss_mean = m.tracker.read()
    row = {"step": done, "epoch": done * batch_size / n_train, "lr": lr, "lr_sum": m.lr_sum,
           "train_loss": train_loss, "train_loss_mean": train_loss_mean,
           "val_loss": np.nan, "val_accuracy": np.nan, "val_bpc": np.nan, **(val or {})}
    examples_per_s = batch_size * (done - start_step) / max(elapsed, 1e-9)
    row.update(wall_time=m.wall + elapsed, examples_per_s=examples_per_s,
               tokens_per_s=examples_per_s * tokens_per_example, eval_wall_time=m.eval_wall,
               probe_wall_time=m.probe_wall)
    return row


def _save_member(stack: _Stack, i: int, m: _Member, done: int, elapsed: float) -> None:
    """Member i's checkpoint, in the format of its run trained alone (`train_run` resumes from it, and back)."""
    save_checkpoint(m.out_dir / "checkpoints" / "last.pt", {
        "model": m.model.state_dict(), "optimizer": stack.member_optimizer_state(i), "rng": m.rng,
        "step": done, "lr_sum": m.lr_sum, "lr_sq_sum": m.lr_sq_sum, "wall_time": m.wall + elapsed,
        "eval_wall_time": m.eval_wall, "probe_wall_time": m.probe_wall, "metrics_rows": m.rows,
        "loss_tracker": m.tracker.state(), "config_hash": m.plan.run_hash, "run_id": m.run_id,
        STOPPED: m.stopped})


def _finish(stack: _Stack, i: int, m: _Member, end_step: int, elapsed: float, data: PreparedData,
            device: torch.device, flags: dict, ensemble: list[str]) -> pd.DataFrame:
    """Member i's last callbacks and its outputs (as `train_run` ends a run); it trains no further."""
    stack.write_member(i, m.model)
    for cb in m.callbacks:
        cb(end_step, m.model, m.lr_sum, m.lr_sq_sum)
    m.done = True
    return write_run_outputs(m.plan, m.out_dir, m.rows, kind=data.kind, probing=m.probing, stopped=m.stopped,
                      end_step=end_step, wall=m.wall + elapsed, flags=flags, device=device,
                      n_parameters=sum(p.numel() for p in m.model.parameters()), ensemble=ensemble)
