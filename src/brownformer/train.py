"""Training loop: one run = (model variant, optimizer, seed).

Deterministic on CPU (seeded init, stateless batches indexed by step, deterministic kernels), so a
killed run resumed from its last checkpoint ends with the same numbers as an uninterrupted one.
Writes metrics.parquet, manifest.json and checkpoints/last.pt atomically; probes (if given) are
called before every update with the model as it stands after `step` updates.
"""
from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from brownformer.config import ExperimentConfig, RunSpec, TrainConfig
from brownformer.data import PreparedData, eval_batches, load_prepared, sample_batch, to_device
from brownformer.io import atomic_path, write_json
from brownformer.manifest import build_manifest, device_description
from brownformer.models import build_model, loss_fn
from brownformer.optim import build_optimizer

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
    """Linear warm-up to 1 over `warmup_steps`, then cosine decay to `min_lr_ratio` at `steps`."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def model_for_data(cfg: ExperimentConfig, model_name: str, data: PreparedData) -> torch.nn.Module:
    mcfg = cfg.models[model_name]
    if data.kind == "image":
        return build_model(mcfg, n_classes=int(data.meta["n_classes"]), image_shape=tuple(data.meta["image_shape"]))
    return build_model(mcfg, vocab_size=int(data.meta["vocab_size"]))


def _set_determinism(train: TrainConfig, device: torch.device) -> dict:
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = not train.deterministic
        torch.backends.cuda.matmul.allow_tf32 = not train.deterministic
    else:
        torch.set_num_threads(train.threads)
    torch.use_deterministic_algorithms(train.deterministic, warn_only=device.type == "cuda")
    return {"deterministic_algorithms": train.deterministic, "threads": torch.get_num_threads(),
            "cublas_workspace": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}


@torch.no_grad()
def _evaluate(model, batches, kind: str, device, autocast) -> dict:
    model.eval()
    total, correct, count = 0.0, 0, 0
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        with autocast():
            logits = model(x)
        n = y.numel()
        total += loss_fn(logits, y).item() * n
        if kind == "image":
            correct += (logits.argmax(-1) == y).sum().item()
        count += n
    model.train()
    val_loss = total / count
    if kind == "image":
        return {"val_loss": val_loss, "val_accuracy": correct / count}
    return {"val_loss": val_loss, "val_bpc": val_loss / math.log(2)}


def _save_checkpoint(path: Path, state: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def _write_metrics(path: Path, rows: list[dict]) -> None:
    with atomic_path(path) as tmp:
        pd.DataFrame(rows).to_parquet(tmp, index=False)


def train_run(cfg: ExperimentConfig, run_id: str, data_dir: str | Path, out_dir: str | Path, *,
              callbacks: list[StepCallback] | None = None, stop_after: int | None = None,
              progress: bool = True) -> pd.DataFrame:
    """Train one run of the grid; resume from out_dir/checkpoints/last.pt when it exists.

    Args:
        cfg: the validated experiment config.
        run_id: "<model>__<optimizer>__s<seed>", a run of cfg's grid.
        data_dir: the prepared dataset of the run's model (results/data/<dataset>).
        out_dir: the run folder (results/runs/<run_id>).
        callbacks: called as cb(step, model, lr_sum, lr_sq_sum) before each update and once at the end.
        stop_after: stop (with a checkpoint) after this many steps, as if killed; for tests.
    Returns:
        The metrics table (also written to out_dir/metrics.parquet when training completes).
    """
    spec: RunSpec = cfg.run(run_id)
    tcfg, ocfg, mcfg = cfg.train, cfg.optimizers[spec.optimizer], cfg.models[spec.model]
    out_dir = Path(out_dir)
    ckpt_path = out_dir / "checkpoints" / "last.pt"
    device = resolve_device(cfg.device)
    flags = _set_determinism(tcfg, device)
    data = load_prepared(data_dir)
    seq_len = mcfg.seq_len if data.kind == "text" else None
    augment = cfg.dataset_of(spec.model).augment

    torch.manual_seed(spec.seed)
    model = model_for_data(cfg, spec.model, data).to(device)
    optimizer = build_optimizer(model, ocfg.type, ocfg.lr, ocfg.params)
    # Compile a forward function, not the module: state_dict keys stay plain (no "_orig_mod.") so
    # checkpoints load into an uncompiled model for probes and extraction.
    forward = torch.compile(model) if tcfg.compile else model
    use_bf16 = tcfg.precision == "bf16"

    def autocast():
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16)

    val = eval_batches(data, "val", batch_size=tcfg.batch_size, n_batches=tcfg.eval_batches, seq_len=seq_len)
    rows: list[dict] = []
    start_step, lr_sum, lr_sq_sum, wall_offset = 0, 0.0, 0.0, 0.0
    if ckpt_path.exists():
        state = torch.load(ckpt_path, map_location=device, weights_only=False)
        if state["config_hash"] != cfg.run_hash(run_id):
            raise RuntimeError(f"{ckpt_path} was written with another config (hash {state['config_hash'][:12]}); "
                               "delete the run folder to start over")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        start_step, lr_sum, lr_sq_sum = state["step"], state["lr_sum"], state["lr_sq_sum"]
        wall_offset, rows = state["wall_time"], state["metrics_rows"]
        log.info("resuming %s from step %d", run_id, start_step)

    n_train = int(data.meta["sizes"]["train"])
    tokens_per_example = seq_len or (getattr(model, "n_patches", 0) + 1)
    callbacks = callbacks or []
    model.train()
    t0 = time.perf_counter() - wall_offset
    bar = tqdm(range(start_step, tcfg.steps), desc=run_id, disable=not progress, mininterval=5)
    for step in bar:
        for cb in callbacks:
            cb(step, model, lr_sum, lr_sq_sum)
        factor = lr_factor(step, tcfg)
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"] * factor
        lr = optimizer.param_groups[0]["lr"]
        x, y = sample_batch(data, "train", step=step, seed=spec.seed, batch_size=tcfg.batch_size,
                            seq_len=seq_len, augment=augment)
        x, y = to_device((x, y), device)
        with autocast():
            loss = loss_fn(forward(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if tcfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.grad_clip)
        optimizer.step()
        lr_sum += lr
        lr_sq_sum += lr * lr
        done = step + 1
        if done % tcfg.log_every == 0 or done % tcfg.eval_every == 0 or done == tcfg.steps:
            row = {"step": done, "epoch": done * tcfg.batch_size / n_train, "lr": lr, "lr_sum": lr_sum,
                   "train_loss": loss.item(), "val_loss": np.nan, "val_accuracy": np.nan, "val_bpc": np.nan}
            if done % tcfg.eval_every == 0 or done == tcfg.steps:
                row.update(_evaluate(model, val, data.kind, device, autocast))
            if device.type == "cuda":
                torch.cuda.synchronize()
            row["wall_time"] = time.perf_counter() - t0
            row["examples_per_s"] = tcfg.batch_size * (done - start_step) / max(row["wall_time"] - wall_offset, 1e-9)
            row["tokens_per_s"] = row["examples_per_s"] * tokens_per_example
            if device.type == "cuda":
                row["gpu_mem_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
                try:
                    row["gpu_utilization"] = float(torch.cuda.utilization(device))
                except Exception:  # needs pynvml; utilisation is informative only
                    pass
            for key, value in (getattr(optimizer, "last_stats", None) or {}).items():
                if isinstance(value, (int, float)):
                    row[f"opt_{key}"] = float(value)
            for key, value in (getattr(optimizer, "timings", None) or {}).items():
                row[f"opt_time_{key}_total"] = float(value)  # cumulative seconds; figures take differences
            rows.append(row)
            if not math.isfinite(row["train_loss"]):
                log.warning("%s: non-finite training loss at step %d", run_id, done)
            bar.set_postfix(loss=f"{row['train_loss']:.3f}")
        if done % tcfg.checkpoint_every == 0 or done == tcfg.steps or done == stop_after:
            _save_checkpoint(ckpt_path, {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state(),
                "step": done, "lr_sum": lr_sum, "lr_sq_sum": lr_sq_sum, "wall_time": time.perf_counter() - t0,
                "metrics_rows": rows, "config_hash": cfg.run_hash(run_id), "run_id": run_id})
        if stop_after is not None and done >= stop_after:
            log.info("%s: stopping after %d steps as asked", run_id, done)
            return pd.DataFrame(rows)
    for cb in callbacks:
        cb(tcfg.steps, model, lr_sum, lr_sq_sum)
    wall = time.perf_counter() - t0
    metrics = pd.DataFrame(rows)
    _write_metrics(out_dir / "metrics.parquet", rows)
    write_json(out_dir / "manifest.json", build_manifest(
        run_id=run_id, run={"model": spec.model, "optimizer": spec.optimizer, "seed": spec.seed},
        config_hash=cfg.hash, run_hash=cfg.run_hash(run_id), config={"model": asdict(mcfg), "optimizer": asdict(ocfg), "train": asdict(tcfg)},
        seeds={"torch": spec.seed, "data": spec.seed, "split": cfg.dataset_of(spec.model).split_seed,
               "probes": cfg.probes.seed},
        determinism=flags, device=device_description(device), wall_time_s=wall,
        steps=tcfg.steps, n_parameters=sum(p.numel() for p in model.parameters()),
        final={k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rows[-1].items()} if rows else {}))
    log.info("%s: done in %.1fs, final %s", run_id, wall, rows[-1] if rows else {})
    return metrics
