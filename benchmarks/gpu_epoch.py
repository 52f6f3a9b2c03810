"""Training throughput of the paper ViT per optimizer on one GPU: images/s, step time, memory, FLOP/s.

    python benchmarks/gpu_epoch.py --out results/benchmarks/gpu_epoch           # eager, bf16
    python benchmarks/gpu_epoch.py --out DIR --compile --tag gpu_epoch_compile  # torch.compile

The model and optimizer settings come from config/paper.yaml; the data are CIFAR-shaped synthetic
tensors (3x32x32, 10 classes) already on the device, so the step time is the model and optimizer
alone. The input pipeline of the training loop (stateless draws on the host, gather + crop/flip on
the device: brownformer.data.DeviceSampler) is timed separately; brownformer.train runs the two one
after the other on the device, so an epoch takes about steps_per_epoch * (step + input).
benchmarks/gpu_throughput.py times the loop's whole per-step path together.

Model FLOPs per step are counted, not estimated: 2 * in * out per row through every nn.Linear and
4 * T^2 * d per example and layer for QK^T and AV, times 3 for forward plus backward
(~ 6 * params * tokens + 12 * L * B * T^2 * d). K-FAC's own work is not model FLOPs, so its
lower FLOP/s is its overhead. The fraction is of the dense bf16 rate of the card (default: the
790 TFLOP/s measured on this workplace's H200 by an 8192^3 bf16 matmul).

Writes <out>/<tag>.json and <out>/<tag>.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

OPTIMIZERS = ["sgd", "adamw", "muon", "kfac-eigen", "kfac-iterative"]
CIFAR_TRAIN_IMAGES = 45_000
H200_BF16_DENSE_TFLOPS = 790.0
CHECK_STEPS = 5  # compiled vs eager comparison
COMPILE_LOSS_RTOL = 5e-2  # bf16 fusions reorder sums; a broken hook changes the loss far more


def _parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for <tag>.json and <tag>.md")
    p.add_argument("--tag", default="gpu_epoch", help="file name stem of the outputs")
    p.add_argument("--config", default="config/paper.yaml")
    p.add_argument("--model", default="vit-pre")
    p.add_argument("--optimizers", nargs="+", default=OPTIMIZERS)
    p.add_argument("--steps", type=int, default=100, help="timed steps (rounded up to whole inverse periods)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first (K-FAC inverts inside)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--device", default="auto")
    p.add_argument("--compile", action="store_true", help="torch.compile the model, as train.compile does")
    p.add_argument("--no-deterministic", dest="deterministic", action="store_false",
                   help="allow TF32 and cuDNN autotuning (the paper config runs deterministic)")
    p.add_argument("--input-batches", type=int, default=50, help="batches for the input-pipeline timing (0: skip)")
    p.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS)
    return p.parse_args(argv)


def _device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def count_model_flops(model: nn.Module, x: torch.Tensor) -> int:
    """Forward+backward matmul FLOPs of one step: 3 x (linear rows * 2 * in * out + attention)."""
    from brownformer.models import Attention

    total = 0

    def linear_hook(module, inputs, output):
        nonlocal total
        rows = inputs[0].numel() // module.in_features
        total += 2 * rows * module.in_features * module.out_features

    def attention_hook(module, inputs, output):
        nonlocal total
        B, T, C = inputs[0].shape
        total += 2 * 2 * B * T * T * C  # Q K^T and (probs) V, every head together

    handles = [m.register_forward_hook(linear_hook) for m in model.modules() if isinstance(m, nn.Linear)]
    handles += [m.register_forward_hook(attention_hook) for m in model.modules() if isinstance(m, Attention)]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return 3 * total


def _kfac_factors_moved(opt) -> bool | None:
    """True when every K-FAC layer has factors that left the identity (its hooks fired)."""
    layers = getattr(opt, "layers", None)
    if layers is None:
        return None
    for layer in layers:
        a = opt.state.get(layer.module.weight, {}).get("factor_a")
        if a is None or torch.allclose(a, torch.eye(a.shape[0], device=a.device, dtype=a.dtype)):
            return False
    return True


class _Trainer:
    """One model + optimizer on synthetic device tensors, stepping exactly as brownformer.train does."""

    def __init__(self, mcfg, ocfg, grad_clip, device, bf16, batch_size, compile_model, seed=0, pool=8):
        from brownformer.models import build_model
        from brownformer.optim import build_optimizer
        from brownformer.train_step import TrainStep, adamw_implementation

        torch.manual_seed(seed)
        self.model = build_model(mcfg, n_classes=10, image_shape=(3, 32, 32)).to(device)
        params = dict(ocfg.params)
        if ocfg.type == "adamw":  # the implementation brownformer.train picks for the device
            params.update(adamw_implementation(device, cuda_graphs=False))
        self.opt = build_optimizer(self.model, ocfg.type, ocfg.lr, params)
        self.forward = torch.compile(self.model) if compile_model else self.model
        self.step_fn = TrainStep(self.model, self.opt, device=device, forward=self.forward, grad_clip=grad_clip,
                                 bf16=bf16)
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(pool, batch_size, 3, 32, 32, generator=g).to(device)  # (pool, B, C, H, W)
        self.y = torch.randint(0, 10, (pool, batch_size), generator=g).to(device)
        self.device, self.i = device, 0

    def step(self) -> torch.Tensor:
        k = self.i % len(self.x)
        self.i += 1
        return self.step_fn(self.x[k], self.y[k])


def _time_steps(tr: _Trainer, n: int) -> tuple[float, torch.Tensor]:
    _sync(tr.device)
    t0 = time.perf_counter()
    for _ in range(n):
        loss = tr.step()
    _sync(tr.device)
    return (time.perf_counter() - t0) / n, loss


def bench_optimizer(name, cfg, args, device, flops_per_step) -> dict:
    bf16 = args.precision == "bf16"
    mcfg, ocfg = cfg.models[args.model], cfg.optimizers[name]
    row: dict = {"optimizer": name, "compiled": args.compile}
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        if args.compile:  # the compiled model must follow the eager one step for step
            eager = _Trainer(mcfg, ocfg, cfg.train.grad_clip, device, bf16, args.batch_size, False)
            ref = [eager.step().float().item() for _ in range(CHECK_STEPS)]
            ref_moved = _kfac_factors_moved(eager.opt)
            del eager
            # A fresh cache per optimizer: dynamo would otherwise reuse the previous model's graph
            # (same forward code, guards pass) and skip the K-FAC hooks registered on this one.
            torch._dynamo.reset()
        tr = _Trainer(mcfg, ocfg, cfg.train.grad_clip, device, bf16, args.batch_size, args.compile)
        t0 = time.perf_counter()
        first = tr.step()
        _sync(device)
        row["first_step_s"] = time.perf_counter() - t0  # includes compilation when compiled
        if args.compile:
            got = [first.float().item()] + [tr.step().float().item() for _ in range(CHECK_STEPS - 1)]
            row["loss_rel_diff_vs_eager"] = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, ref))
            row["matches_eager"] = row["loss_rel_diff_vs_eager"] < COMPILE_LOSS_RTOL
            row["kfac_hooks_fired"] = _kfac_factors_moved(tr.opt) if ref_moved is not None else None
        for _ in range(args.warmup):
            tr.step()
        step_s, loss = _time_steps(tr, args.steps)
        row.update(step_ms=1e3 * step_s, images_per_s=args.batch_size / step_s,
                   tokens_per_s=args.batch_size * (tr.model.n_patches + 1) / step_s,
                   model_tflops=flops_per_step / step_s / 1e12, final_loss=loss.float().item(),
                   finite=bool(torch.isfinite(loss).item()))
        row["fraction_of_peak"] = row["model_tflops"] / args.peak_tflops
        if device.type == "cuda":
            row["peak_mem_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        timings = getattr(tr.opt, "timings", None)
        if timings:
            row["kfac_timings_s"] = {k: float(v) for k, v in timings.items()}
    except Exception as exc:  # report and go on: one broken optimizer must not hide the others
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    return row


def time_input_pipeline(cfg, args, device) -> float | None:
    """ms per batch of brownformer.data.DeviceSampler (host draws, gather + crop/flip on the device)."""
    if args.input_batches <= 0:
        return None
    from brownformer.data import DeviceSampler, PreparedData

    rng = np.random.default_rng(0)
    x = rng.standard_normal((CIFAR_TRAIN_IMAGES, 3, 32, 32), dtype=np.float32)
    meta = {"dataset": "synthetic", "kind": "image", "n_classes": 10, "image_shape": [3, 32, 32],
            "augmentation": "random crop (pad 4) + horizontal flip", "mean": [0.0] * 3, "std": [1.0] * 3}
    data = PreparedData(kind="image", meta=meta,
                        splits={"train": {"x": x, "y": rng.integers(0, 10, CIFAR_TRAIN_IMAGES)}})
    augment = cfg.datasets[cfg.models[args.model].dataset].augment
    sampler = DeviceSampler(data, "train", device, seed=0, batch_size=args.batch_size, augment=augment)
    _sync(device)
    t0 = time.perf_counter()
    for step in range(args.input_batches):
        sampler.batch(step)
    _sync(device)
    return 1e3 * (time.perf_counter() - t0) / args.input_batches


def _markdown(report: dict) -> str:
    r = report
    lines = [f"### Training step of the paper ViT ({r['model']}, batch {r['batch_size']}, {r['precision']}"
             f"{', torch.compile' if r['compile'] else ''}) on {r['device_name']}", "",
             f"model FLOPs per step {r['model_flops_per_step'] / 1e9:.2f} GFLOP (counted); "
             f"peak taken as {r['peak_tflops']:.0f} TFLOP/s; {r['steps']} timed steps after {r['warmup']} warm-up; "
             f"input pipeline {r['input_ms_per_batch'] if r['input_ms_per_batch'] is None else round(r['input_ms_per_batch'], 2)} ms/batch (DeviceSampler, before each step)",
             "", "| optimizer | step ms | x AdamW | images/s | tokens/s | peak MiB | model TFLOP/s | % of peak "
             "| epoch s (step only) | epoch s (+ input) | first step s | notes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in r["results"]:
        if "error" in row:
            lines.append(f"| {row['optimizer']} | - | - | - | - | - | - | - | - | - | - | {row['error']} |")
            continue
        notes = [] if row.get("finite", True) else ["non-finite loss"]
        if row.get("compiled"):
            notes.append(f"matches eager: {row.get('matches_eager')} (rel {row.get('loss_rel_diff_vs_eager', float('nan')):.1e})")
            if row.get("kfac_hooks_fired") is not None:
                notes.append(f"K-FAC hooks fired: {row['kfac_hooks_fired']}")
        lines.append(
            f"| {row['optimizer']} | {row['step_ms']:.2f} | {row.get('ratio_to_adamw', float('nan')):.2f} | "
            f"{row['images_per_s']:.0f} | {row['tokens_per_s']:.3g} | {row.get('peak_mem_mib', float('nan')):.0f} | "
            f"{row['model_tflops']:.2f} | {100 * row['fraction_of_peak']:.2f} | {row['epoch_s']:.1f} | "
            f"{row.get('epoch_s_with_input', float('nan')):.1f} | {row['first_step_s']:.1f} | {'; '.join(notes)} |")
    return "\n".join(lines) + "\n"


def _derive(results: list[dict], steps_per_epoch: int, input_ms: float | None) -> None:
    """Epoch times and ratios to AdamW (when AdamW has been measured)."""
    adamw = next((r for r in results if r["optimizer"] == "adamw" and "error" not in r), None)
    for row in results:
        if "error" in row:
            continue
        row["epoch_s"] = steps_per_epoch * row["step_ms"] / 1e3
        if input_ms is not None:
            row["epoch_s_with_input"] = steps_per_epoch * (row["step_ms"] + input_ms) / 1e3
        if adamw is not None:
            row["ratio_to_adamw"] = row["step_ms"] / adamw["step_ms"]


def main(argv=None) -> int:
    from brownformer.config import load_config

    args = _parse(argv)
    device = _device(args.device)
    if args.deterministic and device.type == "cuda":  # the paper config's determinism flags (train.py)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = not args.deterministic
    torch.backends.cudnn.benchmark = not args.deterministic
    cfg = load_config(args.config)
    period = max([int(cfg.optimizers[o].params.get("inverse_every", 1)) for o in args.optimizers] + [1])
    args.steps = period * math.ceil(args.steps / period)  # whole inverse periods: the mean includes them
    steps_per_epoch = math.ceil(CIFAR_TRAIN_IMAGES / args.batch_size)

    from brownformer.models import build_model
    probe = build_model(cfg.models[args.model], n_classes=10, image_shape=(3, 32, 32)).to(device)
    flops = count_model_flops(probe, torch.zeros(args.batch_size, 3, 32, 32, device=device).normal_())
    n_params = sum(p.numel() for p in probe.parameters())
    del probe
    input_ms = time_input_pipeline(cfg, args, device)

    report = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda, "model": args.model, "n_parameters": n_params,
        "batch_size": args.batch_size, "precision": args.precision, "compile": args.compile,
        "deterministic": args.deterministic, "steps": args.steps, "warmup": args.warmup,
        "steps_per_epoch": steps_per_epoch, "model_flops_per_step": flops, "peak_tflops": args.peak_tflops,
        "input_ms_per_batch": input_ms, "results": [],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    results = report["results"]
    for name in args.optimizers:  # files rewritten after each optimizer: a timeout keeps what finished
        results.append(bench_optimizer(name, cfg, args, device, flops))
        _derive(results, steps_per_epoch, input_ms)
        (args.out / f"{args.tag}.json").write_text(json.dumps(report, indent=2))
        (args.out / f"{args.tag}.md").write_text(_markdown(report))
    print(_markdown(report))
    return 0 if all("error" not in r and r.get("finite", True) for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
