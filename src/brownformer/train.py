"""Training loop: one run = (model variant, optimizer, seed), with the trajectory probes if asked.

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
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from brownformer.config import ExperimentConfig, RunSpec, TrainConfig
from brownformer.data import DeviceSampler, PreparedData, eval_batches, eval_batches_on, load_prepared
from brownformer.metrics import val_metric_for_kind
from brownformer.models import build_model, loss_fn
from brownformer.optim import build_optimizer, implementation_flags
from brownformer.probes import ProbeRecorder
from brownformer.run_folder import (restart_if_probe_store_incomplete, restart_if_rerun, resume_state, save_checkpoint,
                                    write_run_outputs)
from brownformer.target_stop import STOPPED, on_smoothed_target
from brownformer.train_step import LossTracker, TrainStep

log = logging.getLogger(__name__)

__all__ = ["train_run", "lr_factor", "resolve_device", "model_for_data", "StepCallback"]


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


def model_for_data(cfg: ExperimentConfig, model_name: str, data: PreparedData) -> torch.nn.Module:
    mcfg = cfg.models[model_name]
    if data.kind == "image":
        return build_model(mcfg, n_classes=int(data.meta["n_classes"]), image_shape=tuple(data.meta["image_shape"]))
    return build_model(mcfg, vocab_size=int(data.meta["vocab_size"]))


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


@torch.no_grad()
def _evaluate(model, batches, kind: str, autocast) -> dict:
    """Validation loss (and accuracy or bits per character) over fixed batches already on the device.

    Per-batch results stay on the device until one transfer at the end; the sums are then formed on
    the host in float64, batch by batch, as `loss.item() * n` always was.
    """
    model.eval()
    losses, corrects, counts = [], [], []
    for x, y in batches:
        with autocast():
            logits = model(x)
        losses.append(loss_fn(logits, y).float())
        if kind == "image":
            corrects.append((logits.argmax(-1) == y).sum())
        counts.append(y.numel())
    model.train()
    return val_summary(torch.stack(losses).tolist(), counts, kind,
                       correct=int(torch.stack(corrects).sum()) if kind == "image" else None)


def val_summary(losses: list[float], counts: list[int], kind: str, *, correct: int | None = None) -> dict:
    """The validation row from per-batch mean losses and sizes, summed on the host in float64 batch by batch
    (as `loss.item() * n` always was), and the number of correct predictions (images)."""
    total, count = 0.0, 0
    for loss, n in zip(losses, counts):
        total += loss * n
        count += n
    val_loss = total / count
    if kind == "image":
        return {"val_loss": val_loss, "val_accuracy": correct / count}
    return {"val_loss": val_loss, "val_bpc": val_loss / math.log(2)}


def _optimizer_row(optimizer) -> dict:
    """The optimizer's own diagnostics for a log row: numbers and 0-d tensors (fetched together)."""
    stats = getattr(optimizer, "last_stats", None) or {}  # read only here: K-FAC's costs a host sync
    row = {f"opt_{k}": float(v) for k, v in stats.items() if isinstance(v, (int, float))}
    tensors = {k: v for k, v in stats.items() if isinstance(v, torch.Tensor) and v.numel() == 1}
    if tensors:
        values = torch.stack([v.reshape(()).double() for v in tensors.values()]).tolist()
        row.update({f"opt_{k}": v for k, v in zip(tensors, values)})
    for key, value in (getattr(optimizer, "timings", None) or {}).items():
        row[f"opt_time_{key}_total"] = float(value)  # cumulative seconds; figures take differences
    return row


def open_run(cfg: ExperimentConfig, run_id: str, spec: RunSpec, data, out_dir: Path, device: torch.device, *,
             probes: bool, callbacks) -> tuple[torch.nn.Module, list, bool]:
    """What a run's training starts with, alone (train_run) or as an ensemble member (brownformer.ensemble):
    a rerun's finished checkpoint dropped, the probe recorder where the run is probed, and the model initialised
    from the run's seed (a replica then reseeds with its own noise seed). Returns (model, callbacks, probing)."""
    callbacks = list(callbacks)
    probing = probes and cfg.probed(run_id)  # probes.enabled and some grid block probes the run
    restart_if_rerun(out_dir, run_id, cfg.train.steps)
    if probing:
        restart_if_probe_store_incomplete(out_dir, run_id)
        callbacks.append(ProbeRecorder(cfg, spec, data, out_dir / "probes", device,
                                       model_factory=lambda: model_for_data(cfg, spec.model, data).to(device)))
    torch.manual_seed(spec.seed)
    model = model_for_data(cfg, spec.model, data).to(device)
    if spec.noise_seed is not None:  # a replica: the run's initialisation, its own dropout/sampling noise from here
        torch.manual_seed(spec.noise_seed)
    return model, callbacks, probing


def train_run(cfg: ExperimentConfig, run_id: str, data_dir: str | Path, out_dir: str | Path, *,
              probes: bool = False, callbacks: list[StepCallback] | None = None,
              stop_after: int | None = None, stop_when=None, progress: bool = True) -> pd.DataFrame:
    """Train one run of the grid; resume from out_dir/checkpoints/last.pt when it exists (a finished one
    without metrics.parquet is a rerun: it trains again from step 0, `restart_if_rerun`).

    Args:
        cfg: the validated experiment config.
        run_id: "<model>__<optimizer>__s<seed>", a run of cfg's grid, or "...__r<k>", replica k of one
            (`replicas:`; same initialisation, its own data order and noise: RunSpec.data_seed, noise_seed).
        data_dir: the prepared dataset of the run's model (results/data/<dataset>), loaded once.
        out_dir: the run folder (results/runs/<run_id>).
        probes: record the trajectory probes into out_dir/probes when the config probes the run
            (`ExperimentConfig.probed`: probes enabled and a grid block that probes it); otherwise
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
    cfg = cfg.for_run(run_id)  # the run's model may override train.steps
    spec: RunSpec = cfg.run(run_id)
    tcfg, ocfg, mcfg = cfg.train, cfg.optimizer_for(spec.model, spec.optimizer), cfg.models[spec.model]
    out_dir = Path(out_dir)
    ckpt_path = out_dir / "checkpoints" / "last.pt"
    device = resolve_device(cfg.device)
    flags = set_determinism(tcfg, device)
    data = load_prepared(data_dir)
    seq_len = mcfg.seq_len if data.kind == "text" else None
    model, callbacks, probing = open_run(cfg, run_id, spec, data, out_dir, device, probes=probes,
                                         callbacks=callbacks or [])
    opt_params = {**ocfg.params, **implementation_flags(ocfg.type, device, cuda_graphs=tcfg.cuda_graphs)}
    optimizer = build_optimizer(model, ocfg.type, ocfg.lr, opt_params)
    sampler = DeviceSampler(data, "train", device, seed=spec.data_seed, batch_size=tcfg.batch_size, seq_len=seq_len,
                            augment=cfg.dataset_of(spec.model).augment)
    val = eval_batches_on(eval_batches(data, "val", batch_size=tcfg.batch_size, n_batches=tcfg.eval_batches,
                                       seq_len=seq_len), device)
    tracker = LossTracker(device)
    target = cfg.stop_target(run_id)  # None: the whole budget
    target_metric = val_metric_for_kind(data.kind)
    stopped = False
    rows: list[dict] = []
    start_step, lr_sum, lr_sq_sum, wall_offset = 0, 0.0, 0.0, 0.0
    eval_wall = 0.0  # cumulative seconds in _evaluate: training wall-clock is wall_time - eval_wall_time
    probe_wall = 0.0  # cumulative seconds in the callbacks (probe captures): not training time either
    state = resume_state(ckpt_path, cfg, run_id, device)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        start_step, lr_sum, lr_sq_sum = state["step"], state["lr_sum"], state["lr_sq_sum"]
        wall_offset, rows = state["wall_time"], state["metrics_rows"]
        # absent in checkpoints written before they existed: earlier evaluations and captures then count as training
        eval_wall, probe_wall = state.get("eval_wall_time", 0.0), state.get("probe_wall_time", 0.0)
        if "loss_tracker" in state:  # absent in checkpoints written before the tracker existed
            tracker.load(state["loss_tracker"])
        stopped = bool(state.get(STOPPED, False))  # it stopped at the target there: nothing left to train
        log.info("resuming %s from step %d", run_id, start_step)
    # Compile a forward function, not the module: state_dict keys stay plain (no "_orig_mod.") so
    # checkpoints load into an uncompiled model for probes and extraction.
    step_fn = TrainStep(model, optimizer, device=device, forward=torch.compile(model) if tcfg.compile else model,
                        grad_clip=tcfg.grad_clip, bf16=tcfg.precision == "bf16", cuda_graphs=tcfg.cuda_graphs)

    n_train = int(data.meta["sizes"]["train"])
    tokens_per_example = seq_len or (getattr(model, "n_patches", 0) + 1)
    model.train()
    synced_steps = set().union(*(getattr(cb, "schedule", ()) for cb in callbacks))
    t0 = time.perf_counter() - wall_offset
    end_step = start_step if stopped else tcfg.steps
    bar = tqdm(range(start_step, end_step), desc=run_id, disable=not progress, mininterval=5)
    for step in bar:
        probe_wall += timed_callbacks(callbacks, step, model, lr_sum, lr_sq_sum, device, synced_steps)
        lr = step_fn.set_lr(lr_factor(step, tcfg))
        tracker.add(step_fn(*sampler.batch(step)))  # no host sync in here: the loss stays on the device
        lr_sum += lr
        lr_sq_sum += lr * lr
        done = step + 1
        if done % tcfg.log_every == 0 or done % tcfg.eval_every == 0 or done == tcfg.steps:
            train_loss, train_loss_mean = tracker.read()
            row = {"step": done, "epoch": done * tcfg.batch_size / n_train, "lr": lr, "lr_sum": lr_sum,
                   "train_loss": train_loss, "train_loss_mean": train_loss_mean,
                   "val_loss": np.nan, "val_accuracy": np.nan, "val_bpc": np.nan}
            if done % tcfg.eval_every == 0 or done == tcfg.steps:
                eval_start = _synced_clock(device)
                row.update(_evaluate(model, val, data.kind, step_fn.autocast))
                eval_wall += _synced_clock(device) - eval_start
            row.update(_speed_row(device, t0, wall_offset, tcfg.batch_size * (done - start_step), tokens_per_example))
            row["eval_wall_time"], row["probe_wall_time"] = eval_wall, probe_wall
            row.update(_optimizer_row(optimizer))
            rows.append(row)
            if not (math.isfinite(row["train_loss"]) and math.isfinite(row["train_loss_mean"])):
                log.warning("%s: non-finite training loss by step %d", run_id, done)
            bar.set_postfix(loss=f"{row['train_loss']:.3f}")
            if stop_when is not None and stop_when(row):
                return pd.DataFrame(rows)
            # on target before the budget's end (at the last step the run is a full one)
            stopped = target is not None and done < tcfg.steps and on_smoothed_target(rows, target, target_metric)
        if done % tcfg.checkpoint_every == 0 or done == tcfg.steps or done == stop_after or stopped:
            save_checkpoint(ckpt_path, {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state(),
                "step": done, "lr_sum": lr_sum, "lr_sq_sum": lr_sq_sum, "wall_time": time.perf_counter() - t0,
                "eval_wall_time": eval_wall, "probe_wall_time": probe_wall, "metrics_rows": rows,
                "loss_tracker": tracker.state(), "config_hash": cfg.run_hash(run_id), "run_id": run_id,
                STOPPED: stopped})
        if stopped:
            end_step = done
            log.info("%s: stopped at step %d, the first evaluation on claim 4's target %s", run_id, done, target)
            break
        if stop_after is not None and done >= stop_after:
            log.info("%s: stopping after %d steps as asked", run_id, done)
            return pd.DataFrame(rows)
    for cb in callbacks:
        cb(end_step, model, lr_sum, lr_sq_sum)
    wall = time.perf_counter() - t0
    return write_run_outputs(cfg, run_id, out_dir, rows, kind=data.kind, probing=probing, stopped=stopped,
                             end_step=end_step, wall=wall, flags=flags, device=device,
                             n_parameters=sum(p.numel() for p in model.parameters()))


def timed_callbacks(callbacks: list[StepCallback], step: int, model: torch.nn.Module, lr_sum: float,
                     lr_sq_sum: float, device: torch.device, synced_steps: set[int]) -> float:
    """Call every callback; return the seconds they took (the increments of probe_wall_time).

    On CUDA the clock syncs only at `synced_steps` (where a callback works, e.g. the recorder's
    captures), so queued training kernels are not billed to the probes; a sync on every step would
    stall the sync-free loop, and a callback with nothing to do costs microseconds.
    """
    if not callbacks:
        return 0.0
    clock = functools.partial(_synced_clock, device) if step in synced_steps else time.perf_counter
    start = clock()
    for cb in callbacks:
        cb(step, model, lr_sum, lr_sq_sum)
    return clock() - start


def _synced_clock(device: torch.device) -> float:
    """perf_counter once the device has finished its queued work (so training kernels still in
    flight are not billed to evaluation, nor evaluation kernels to training)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _speed_row(device: torch.device, t0: float, wall_offset: float, examples: int, tokens_per_example: int) -> dict:
    """Wall time, throughput since this process started, and (CUDA) memory and utilisation."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    row = {"wall_time": wall, "examples_per_s": examples / max(wall - wall_offset, 1e-9)}
    row["tokens_per_s"] = row["examples_per_s"] * tokens_per_example
    if device.type == "cuda":
        row["gpu_mem_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        try:
            row["gpu_utilization"] = float(torch.cuda.utilization(device))
        except Exception:  # needs pynvml; utilisation is informative only
            pass
    return row
