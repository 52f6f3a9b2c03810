"""The rows of a training run's metrics.parquet: validation, the optimizer's diagnostics, speed and memory.

`brownformer.train` (one run) and `brownformer.ensemble` (several as one batched model) log the same columns.
A row is read from the device only at log and evaluation steps, with as few transfers as the values allow.
"""
from __future__ import annotations

import math
import time

import torch

from brownformer.models import loss_fn

__all__ = ["evaluate", "val_summary", "optimizer_row", "speed_row", "synced_clock"]


@torch.no_grad()
def evaluate(model, batches, kind: str, autocast) -> dict:
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


def optimizer_row(optimizer) -> dict:
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


def synced_clock(device: torch.device) -> float:
    """perf_counter once the device has finished its queued work (so training kernels still in
    flight are not billed to evaluation, nor evaluation kernels to training)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def speed_row(device: torch.device, t0: float, wall_offset: float, examples: int, tokens_per_example: int) -> dict:
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
