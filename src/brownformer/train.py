"""Training loop: one run = (model variant, optimizer, seed), with the trajectory probes if asked.

A run reads its settings from its `RunPlan` (ExperimentConfig.plan: the config is asked about the run once), and
`train_plan` goes through four steps: open (device, data, model, optimizer, batches), resume (the checkpoint),
the step loop (logging, evaluation, checkpoints, claim 4's target) and finish (the callbacks' last call, outputs).
Deterministic on CPU (seeded init, stateless batches indexed by step, deterministic kernels), so a
killed run resumed from its last checkpoint ends with the same numbers as an uninterrupted one.
The dataset is loaded once; the training split and the validation batches are moved to the device
once, and each batch is gathered (and cropped/flipped) there (`brownformer.data.DeviceSampler`,
equal to `sample_batch`). The per-step path reads nothing back from the device: the loss is
accumulated there (`train_step.LossTracker`) and fetched, with the optimizer's diagnostics, only
at log and eval steps. Writes metrics.parquet, manifest.json and checkpoints/last.pt atomically;
probes and callbacks are called before every update with the model as it stands after `step` updates.
A run no grid block probes (`probes: false`, metrics only) attaches no recorder and leaves an empty
probes/index.parquet, the capture store's table with no rows. A metrics-only run of blocks with
`stop_at_target` ends at its first evaluation on claim 4's target and says so (brownformer.target_stop).
"""
from __future__ import annotations

import functools
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from brownformer.config import ExperimentConfig, ModelConfig, RunPlan, TrainConfig
from brownformer.data import DeviceSampler, PreparedData, eval_batches, eval_batches_on, load_prepared
from brownformer.metrics import val_metric_for_kind
from brownformer.models import build_model
from brownformer.optim import build_optimizer, implementation_flags
from brownformer.probes import ProbeRecorder
from brownformer.run_folder import (restart_if_probe_store_incomplete, restart_if_rerun, resume_state, save_checkpoint,
                                    write_run_outputs)
from brownformer.target_stop import STOPPED, on_smoothed_target
from brownformer.train_rows import evaluate, optimizer_row, speed_row, synced_clock
from brownformer.train_step import LossTracker, TrainStep

log = logging.getLogger(__name__)

__all__ = ["train_run", "train_plan", "open_run", "lr_factor", "resolve_device", "model_of", "model_for_data",
           "StepCallback"]


class StepCallback(Protocol):
    def __call__(self, step: int, model: torch.nn.Module, lr_sum: float, lr_sq_sum: float) -> None: ...


def resolve_device(name: str) -> torch.device:
    """'auto' picks CUDA when available, else CPU; 'cuda' without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("config key 'device' is 'cuda' but no CUDA device is available")
    return torch.device(name)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to 1 over `warmup_steps`, then cosine decay to `min_lr_ratio` at `horizon` (default `steps`),
    held there after it."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    span = max(1, (cfg.horizon or cfg.steps) - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def set_determinism(train: TrainConfig, device: torch.device) -> dict:
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = not train.deterministic
        torch.backends.cuda.matmul.allow_tf32 = not train.deterministic
    else:
        torch.set_num_threads(train.threads)
    if train.compile:
        torch.use_deterministic_algorithms(train.deterministic, warn_only=device.type == "cuda")
    else:
        # The same switch without the public function's import of torch._inductor (to set inductor's own flag,
        # which only compiled code reads): 1.7 s of every training job's start-up.
        torch._C._set_deterministic_algorithms(train.deterministic, warn_only=device.type == "cuda")
    return {"deterministic_algorithms": train.deterministic, "threads": torch.get_num_threads(),
            "cublas_workspace": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}


def model_of(mcfg: ModelConfig, data: PreparedData) -> torch.nn.Module:
    """A fresh model of the variant `mcfg` sized for `data` (its classes and image shape, or its vocabulary)."""
    if data.kind == "image":
        return build_model(mcfg, n_classes=int(data.meta["n_classes"]), image_shape=tuple(data.meta["image_shape"]))
    return build_model(mcfg, vocab_size=int(data.meta["vocab_size"]))


def model_for_data(cfg: ExperimentConfig, model_name: str, data: PreparedData) -> torch.nn.Module:
    """A fresh model of the config's variant `model_name` sized for `data` (`model_of`)."""
    return model_of(cfg.models[model_name], data)


def open_run(plan: RunPlan, data: PreparedData, out_dir: Path, device: torch.device, *, probes: bool,
             callbacks) -> tuple[torch.nn.Module, list, bool]:
    """What a run's training starts with, alone (train_run) or as an ensemble member (brownformer.ensemble):
    a rerun's finished checkpoint dropped, the probe recorder where the run is probed, and the model initialised
    from the run's seed (a replica then reseeds with its own noise seed). Returns (model, callbacks, probing)."""
    callbacks = list(callbacks)
    probing = probes and plan.probed  # probes.enabled and some grid block probes the run
    restart_if_rerun(out_dir, plan.run_id, plan.train.steps)
    if probing:
        restart_if_probe_store_incomplete(out_dir, plan.run_id)
        callbacks.append(ProbeRecorder(plan, data, out_dir / "probes", device,
                                       model_factory=lambda: model_of(plan.model, data).to(device)))
    torch.manual_seed(plan.seeds.init)
    model = model_of(plan.model, data).to(device)
    if plan.seeds.noise is not None:  # a replica: the run's initialisation, its own dropout/sampling noise from here
        torch.manual_seed(plan.seeds.noise)
    return model, callbacks, probing


@dataclass
class _Run:
    """A run opened for training: its plan, where it writes, and what the step loop works with."""
    plan: RunPlan
    out_dir: Path
    device: torch.device
    flags: dict  # the determinism settings (the manifest records them)
    data: PreparedData
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    callbacks: list[StepCallback]
    probing: bool
    sampler: DeviceSampler
    val: list  # the validation batches, on the device
    tracker: LossTracker
    tokens_per_example: int

    @property
    def ckpt_path(self) -> Path:
        return self.out_dir / "checkpoints" / "last.pt"

    @functools.cached_property
    def synced_steps(self) -> set[int]:
        """The steps where a callback works (a recorder's captures): the clock syncs there on CUDA."""
        return set().union(*(getattr(cb, "schedule", ()) for cb in self.callbacks))


@dataclass
class _Progress:
    """Where a run's training stands: what its checkpoint carries besides weights, optimizer state and RNG."""
    step: int = 0  # updates done
    start_step: int = 0  # where this process started (the resumed step): throughput counts from here
    lr_sum: float = 0.0
    lr_sq_sum: float = 0.0
    wall_offset: float = 0.0  # wall time of the earlier processes of this run
    eval_wall: float = 0.0  # cumulative seconds in evaluate: training wall-clock is wall_time - eval_wall_time
    probe_wall: float = 0.0  # cumulative seconds in the callbacks (probe captures): not training time either
    rows: list[dict] = field(default_factory=list)
    stopped: bool = False  # stopped at claim 4's target (brownformer.target_stop)
    t0: float = 0.0  # perf_counter origin of the run's wall time (now - wall_offset when the loop starts)


def train_run(cfg: ExperimentConfig, run_id: str, data_dir: str | Path, out_dir: str | Path, *,
              probes: bool = False, callbacks: list[StepCallback] | None = None,
              stop_after: int | None = None, stop_when=None, progress: bool = True) -> pd.DataFrame:
    """Train one run of the grid: `train_plan` of the run's plan (`ExperimentConfig.plan`, the one time the
    config is asked about the run). run_id is "<model>__<optimizer>__s<seed>", a run of cfg's grid, or
    "...__r<k>", replica k of one (`replicas:`; same initialisation, its own data order and noise)."""
    return train_plan(cfg.plan(run_id), data_dir, out_dir, probes=probes, callbacks=callbacks,
                      stop_after=stop_after, stop_when=stop_when, progress=progress)


def train_plan(plan: RunPlan, data_dir: str | Path, out_dir: str | Path, *, probes: bool = False,
               callbacks: list[StepCallback] | None = None, stop_after: int | None = None, stop_when=None,
               progress: bool = True) -> pd.DataFrame:
    """Train the run of `plan`; resume from out_dir/checkpoints/last.pt when it exists (a finished one
    without metrics.parquet is a rerun: it trains again from step 0, `restart_if_rerun`).

    Args:
        plan: the run, resolved from the validated config (`ExperimentConfig.plan`).
        data_dir: the prepared dataset of the run's model (results/data/<dataset>), loaded once.
        out_dir: the run folder (results/runs/<run_id>).
        probes: record the trajectory probes into out_dir/probes when the config probes the run
            (`RunPlan.probed`: probes enabled and a grid block that probes it); otherwise
            out_dir/probes/index.parquet is left empty (an earlier run's captures there are kept).
        callbacks: called as cb(step, model, lr_sum, lr_sq_sum) before each update and once at the end;
            their time is the metrics' probe_wall_time (a callback's `schedule`, the steps it works
            at, lets the clock sync there on CUDA).
        stop_after: stop (with a checkpoint) after this many steps, as if killed; for tests.
        stop_when: called with each metrics row as it is logged; True ends the run there (no checkpoint,
            metrics.parquet or manifest written; the rows so far are returned). The tuning stops a trial
            at its target this way.
    Returns:
        The metrics table (also written to out_dir/metrics.parquet when training completes).
    """
    run = _open(plan, Path(data_dir), Path(out_dir), probes=probes, callbacks=callbacks or [])
    at = _resume(run)
    # Built after the resume: a captured step turns the restored learning rates into device tensors.
    step_fn = TrainStep(run.model, run.optimizer, device=run.device, grad_clip=plan.train.grad_clip,
                        # a compiled forward function, not module: state_dict keys stay plain (no "_orig_mod."),
                        # so checkpoints load into an uncompiled model for probes and extraction
                        forward=torch.compile(run.model) if plan.train.compile else run.model,
                        bf16=plan.train.precision == "bf16", cuda_graphs=plan.train.cuda_graphs)
    if not _train_steps(run, at, step_fn, stop_after=stop_after, stop_when=stop_when, progress=progress):
        return pd.DataFrame(at.rows)  # cut short (stop_after, stop_when): no outputs written
    return _finish(run, at)


def _open(plan: RunPlan, data_dir: Path, out_dir: Path, *, probes: bool, callbacks: list[StepCallback]) -> _Run:
    """The run's device (determinism set), data, model (`open_run`), optimizer, batches and loss tracker."""
    tcfg, ocfg = plan.train, plan.optimizer
    device = resolve_device(plan.device)
    flags = set_determinism(tcfg, device)
    data = load_prepared(data_dir)
    seq_len = plan.model.seq_len if data.kind == "text" else None
    model, callbacks, probing = open_run(plan, data, out_dir, device, probes=probes, callbacks=callbacks)
    opt_params = {**ocfg.params, **implementation_flags(ocfg.type, device, cuda_graphs=tcfg.cuda_graphs)}
    optimizer = build_optimizer(model, ocfg.type, ocfg.lr, opt_params)
    sampler = DeviceSampler(data, "train", device, seed=plan.seeds.data, batch_size=tcfg.batch_size, seq_len=seq_len,
                            augment=plan.dataset.augment)
    val = eval_batches_on(eval_batches(data, "val", batch_size=tcfg.batch_size, n_batches=tcfg.eval_batches,
                                       seq_len=seq_len), device)
    return _Run(plan=plan, out_dir=out_dir, device=device, flags=flags, data=data, model=model, optimizer=optimizer,
                callbacks=callbacks, probing=probing, sampler=sampler, val=val, tracker=LossTracker(device),
                tokens_per_example=seq_len or (getattr(model, "n_patches", 0) + 1))


def _resume(run: _Run) -> _Progress:
    """Load the run's checkpoint into its model, optimizer, RNG and loss tracker; where training stands."""
    state = resume_state(run.ckpt_path, run.plan, run.device)
    if state is None:
        return _Progress()
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    if "loss_tracker" in state:  # absent in checkpoints written before the tracker existed
        run.tracker.load(state["loss_tracker"])
    log.info("resuming %s from step %d", run.plan.run_id, state["step"])
    # absent in checkpoints written before they existed: earlier evaluations and captures then count as training
    return _Progress(step=state["step"], start_step=state["step"], lr_sum=state["lr_sum"],
                     lr_sq_sum=state["lr_sq_sum"], wall_offset=state["wall_time"], rows=state["metrics_rows"],
                     eval_wall=state.get("eval_wall_time", 0.0), probe_wall=state.get("probe_wall_time", 0.0),
                     stopped=bool(state.get(STOPPED, False)))  # stopped at the target there: nothing left to train


def _train_steps(run: _Run, at: _Progress, step_fn: TrainStep, *, stop_after: int | None, stop_when,
                 progress: bool) -> bool:
    """The step loop, from `at.step` to the budget's end or claim 4's target, checkpointing on the way.

    Returns:
        True when the run ended (budget or target), False when `stop_after` or `stop_when` cut it short.
    """
    tcfg, target = run.plan.train, run.plan.stop_target  # target None: the whole budget
    run.model.train()
    at.t0 = time.perf_counter() - at.wall_offset
    end_step = at.step if at.stopped else tcfg.steps
    bar = tqdm(range(at.step, end_step), desc=run.plan.run_id, disable=not progress, mininterval=5)
    for step in bar:
        at.probe_wall += timed_callbacks(run.callbacks, step, run.model, at.lr_sum, at.lr_sq_sum, run.device,
                                         run.synced_steps)
        lr = step_fn.set_lr(lr_factor(step, tcfg))
        run.tracker.add(step_fn(*run.sampler.batch(step)))  # no host sync in here: the loss stays on the device
        at.lr_sum += lr
        at.lr_sq_sum += lr * lr
        at.step = done = step + 1
        if done % tcfg.log_every == 0 or done % tcfg.eval_every == 0 or done == tcfg.steps:
            row = _log_row(run, at, lr, step_fn.autocast)
            bar.set_postfix(loss=f"{row['train_loss']:.3f}")
            if stop_when is not None and stop_when(row):
                return False
            # on target before the budget's end (at the last step the run is a full one)
            at.stopped = (target is not None and done < tcfg.steps
                          and on_smoothed_target(at.rows, target, val_metric_for_kind(run.data.kind)))
        if done % tcfg.checkpoint_every == 0 or done == tcfg.steps or done == stop_after or at.stopped:
            _save(run, at)
        if at.stopped:
            log.info("%s: stopped at step %d, the first evaluation on claim 4's target %s", run.plan.run_id, done,
                     target)
            return True
        if stop_after is not None and done >= stop_after:
            log.info("%s: stopping after %d steps as asked", run.plan.run_id, done)
            return False
    return True


def _log_row(run: _Run, at: _Progress, lr: float, autocast) -> dict:
    """The metrics row of step `at.step` (validation too at evaluation steps), appended to `at.rows`."""
    tcfg, done = run.plan.train, at.step
    train_loss, train_loss_mean = run.tracker.read()
    row = {"step": done, "epoch": done * tcfg.batch_size / int(run.data.meta["sizes"]["train"]), "lr": lr,
           "lr_sum": at.lr_sum, "train_loss": train_loss, "train_loss_mean": train_loss_mean,
           "val_loss": np.nan, "val_accuracy": np.nan, "val_bpc": np.nan}
    if done % tcfg.eval_every == 0 or done == tcfg.steps:
        eval_start = synced_clock(run.device)
        row.update(evaluate(run.model, run.val, run.data.kind, autocast))
        at.eval_wall += synced_clock(run.device) - eval_start
    row.update(speed_row(run.device, at.t0, at.wall_offset, tcfg.batch_size * (done - at.start_step),
                          run.tokens_per_example))
    row["eval_wall_time"], row["probe_wall_time"] = at.eval_wall, at.probe_wall
    row.update(optimizer_row(run.optimizer))
    at.rows.append(row)
    if not (math.isfinite(row["train_loss"]) and math.isfinite(row["train_loss_mean"])):
        log.warning("%s: non-finite training loss by step %d", run.plan.run_id, done)
    return row


def _save(run: _Run, at: _Progress) -> None:
    """The run's checkpoint at `at.step` (the format brownformer.ensemble writes too: either resumes the other)."""
    save_checkpoint(run.ckpt_path, {
        "model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(), "rng": torch.get_rng_state(),
        "step": at.step, "lr_sum": at.lr_sum, "lr_sq_sum": at.lr_sq_sum, "wall_time": time.perf_counter() - at.t0,
        "eval_wall_time": at.eval_wall, "probe_wall_time": at.probe_wall, "metrics_rows": at.rows,
        "loss_tracker": run.tracker.state(), "config_hash": run.plan.run_hash, "run_id": run.plan.run_id,
        STOPPED: at.stopped})


def _finish(run: _Run, at: _Progress) -> pd.DataFrame:
    """The callbacks' last call (at the end step) and the run's outputs (metrics, probe index, manifest)."""
    for cb in run.callbacks:
        cb(at.step, run.model, at.lr_sum, at.lr_sq_sum)
    wall = time.perf_counter() - at.t0
    return write_run_outputs(run.plan, run.out_dir, at.rows, kind=run.data.kind, probing=run.probing,
                             stopped=at.stopped, end_step=at.step, wall=wall, flags=run.flags, device=run.device,
                             n_parameters=sum(p.numel() for p in run.model.parameters()))


def timed_callbacks(callbacks: list[StepCallback], step: int, model: torch.nn.Module, lr_sum: float,
                     lr_sq_sum: float, device: torch.device, synced_steps: set[int]) -> float:
    """Call every callback; return the seconds they took (the increments of probe_wall_time).

    On CUDA the clock syncs only at `synced_steps` (where a callback works, e.g. the recorder's
    captures), so queued training kernels are not billed to the probes; a sync on every step would
    stall the sync-free loop, and a callback with nothing to do costs microseconds.
    """
    if not callbacks:
        return 0.0
    clock = functools.partial(synced_clock, device) if step in synced_steps else time.perf_counter
    start = clock()
    for cb in callbacks:
        cb(step, model, lr_sum, lr_sq_sum)
    return clock() - start
