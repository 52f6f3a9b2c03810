"""Training throughput of the paper ViT through the real per-step path: one run, and N runs sharing one card.

    python benchmarks/gpu_throughput.py --out benchmarks/results                  # on a GPU
    python benchmarks/gpu_throughput.py --out /tmp/x --device cpu --steps 3 --warmup 1 --jobs 1 2 \
        --images 512 --batch-size 16                                              # smoke test, CPU

Each measured step is what brownformer.train runs per step: the lr schedule (`TrainStep.set_lr`),
batch `step` gathered, cropped and flipped on the device (`DeviceSampler`), the step itself
(`TrainStep`: eager, or replayed from a CUDA graph with `--modes cuda-graphs`) and the on-device
loss sum (`LossTracker`); the loss is read once, after the timed steps. The data are CIFAR-shaped
random images (3x32x32, 10 classes, `--images` of them on the device), the model and optimizer
settings those of config/paper.yaml.

Concurrent jobs: `--jobs 1 4 8` starts that many worker processes (this script with `--worker`)
training AdamW side by side on one card; every worker builds and warms up, then all start their
timed steps together (a file barrier), and the aggregate rate is all their images over the span
from the first start to the last finish.

Writes <out>/gpu_throughput.json {"device", "date", "torch", "runs": [{"optimizer", "step_ms",
"images_per_s", "mode"}], "concurrent": [{"jobs", "images_per_s_total"}]} and <out>/gpu_throughput.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

OPTIMIZERS = ["sgd", "adamw", "muon", "kfac-eigen", "kfac-iterative"]
MODES = ["eager", "cuda-graphs"]
CONCURRENT_OPTIMIZER = "adamw"
BARRIER_TIMEOUT_S = 240  # workers that are not ready by then are reported, not waited for


def _parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="folder for gpu_throughput.json and .md")
    p.add_argument("--config", default="config/paper.yaml")
    p.add_argument("--model", default="vit-pre")
    p.add_argument("--optimizers", nargs="+", default=OPTIMIZERS)
    p.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    p.add_argument("--jobs", nargs="*", type=int, default=[1, 4, 8], help="concurrent job counts (none: skip)")
    p.add_argument("--steps", type=int, default=150, help="timed steps per measurement")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first (capture happens in them)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--images", type=int, default=10_000, help="synthetic training images held on the device")
    p.add_argument("--device", default="auto")
    # worker mode (internal): one concurrent job
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="eager", help=argparse.SUPPRESS)
    p.add_argument("--barrier", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _device(name: str) -> torch.device:
    return torch.device(("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _synthetic_data(n: int, seed: int = 0):
    from brownformer.data import PreparedData

    rng = np.random.default_rng(seed)
    meta = {"dataset": "synthetic-cifar", "kind": "image", "n_classes": 10, "image_shape": [3, 32, 32],
            "augmentation": "random crop (pad 4) + horizontal flip", "mean": [0.5] * 3, "std": [0.25] * 3}
    x = rng.standard_normal((n, 3, 32, 32), dtype=np.float32)
    return PreparedData(kind="image", meta=meta, splits={"train": {"x": x, "y": rng.integers(0, 10, n)}})


class _Run:
    """The per-step path of brownformer.train for one optimizer, on synthetic device-resident data."""

    def __init__(self, cfg, args, optimizer: str, mode: str, device: torch.device, seed: int = 0):
        from brownformer.data import DeviceSampler
        from brownformer.models import build_model
        from brownformer.optim import build_optimizer
        from brownformer.train import lr_factor
        from brownformer.train_step import LossTracker, TrainStep, adamw_implementation

        cuda_graphs = mode == "cuda-graphs"
        ocfg = cfg.optimizer_for(args.model, optimizer)  # as train_run resolves it
        torch.manual_seed(seed)
        self.model = build_model(cfg.models[args.model], n_classes=10, image_shape=(3, 32, 32)).to(device)
        params = dict(ocfg.params)
        if ocfg.type == "adamw":
            params.update(adamw_implementation(device, cuda_graphs=cuda_graphs))
        opt = build_optimizer(self.model, ocfg.type, ocfg.lr, params)
        self.step_fn = TrainStep(self.model, opt, device=device, grad_clip=cfg.train.grad_clip,
                                 bf16=cfg.train.precision == "bf16", cuda_graphs=cuda_graphs)
        self.sampler = DeviceSampler(_synthetic_data(args.images, seed), "train", device, seed=seed,
                                     batch_size=args.batch_size, augment=True)
        self.tracker, self.device, self.step = LossTracker(device), device, 0
        self.lr_of = lambda s: lr_factor(s, cfg.train)

    def run(self, n: int) -> None:
        for _ in range(n):
            self.step_fn.set_lr(self.lr_of(self.step))
            self.tracker.add(self.step_fn(*self.sampler.batch(self.step)))
            self.step += 1

    def timed(self, n: int) -> dict:
        _sync(self.device)
        t0, wall0 = time.perf_counter(), time.time()
        self.run(n)
        _sync(self.device)
        seconds = time.perf_counter() - t0
        return {"seconds": seconds, "start": wall0, "end": wall0 + seconds, "images": n * self.sampler.batch_size,
                "final_loss": self.tracker.read()[0], "captured": self.step_fn.captured}


def _measure(cfg, args, device, optimizer: str, mode: str) -> dict:
    row = {"optimizer": optimizer, "mode": mode}
    try:
        run = _Run(cfg, args, optimizer, mode, device)
        if mode == "cuda-graphs" and not run.step_fn.capture:
            return {**row, "error": "not capturable (the optimizer's step is not capture-safe); eager only"}
        run.run(args.warmup)
        t = run.timed(args.steps)
        row.update(step_ms=1e3 * t["seconds"] / args.steps, images_per_s=t["images"] / t["seconds"],
                   final_loss=t["final_loss"], finite=math.isfinite(t["final_loss"]))
        if device.type == "cuda":
            row["peak_mem_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    except Exception as exc:  # one broken optimizer must not hide the others
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    return row


def _worker(cfg, args, device) -> int:
    run = _Run(cfg, args, CONCURRENT_OPTIMIZER, args.mode, device, seed=args.seed)
    run.run(args.warmup)
    _sync(device)
    args.result.with_suffix(".ready").touch()
    deadline = time.time() + BARRIER_TIMEOUT_S
    while not args.barrier.exists() and time.time() < deadline:
        time.sleep(0.01)
    args.result.write_text(json.dumps(run.timed(args.steps)))
    return 0


def _concurrent(args, jobs: int, mode: str, tmp: Path) -> dict:
    """Start `jobs` workers, release them together, and sum their images over the common span."""
    barrier = tmp / f"go_{jobs}"
    results = [tmp / f"job{jobs}_{i}.json" for i in range(jobs)]
    base = [sys.executable, __file__, "--worker", "--config", args.config, "--model", args.model, "--mode", mode,
            "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-size", str(args.batch_size),
            "--images", str(args.images), "--device", args.device, "--barrier", str(barrier)]
    procs = [subprocess.Popen([*base, "--result", str(r), "--seed", str(i)]) for i, r in enumerate(results)]
    deadline = time.time() + BARRIER_TIMEOUT_S
    while time.time() < deadline and not all(r.with_suffix(".ready").exists() for r in results):
        if any(p.poll() not in (None, 0) for p in procs):
            break
        time.sleep(0.05)
    barrier.touch()
    for p in procs:
        try:
            p.wait(timeout=BARRIER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
    done = [json.loads(r.read_text()) for r in results if r.exists()]
    row = {"jobs": jobs, "optimizer": CONCURRENT_OPTIMIZER, "mode": mode, "jobs_finished": len(done)}
    if len(done) < jobs:
        row["error"] = f"{jobs - len(done)} of {jobs} jobs failed"
    if done:
        span = max(d["end"] for d in done) - min(d["start"] for d in done)
        row["images_per_s_total"] = sum(d["images"] for d in done) / span
        row["images_per_s_per_job"] = row["images_per_s_total"] / len(done)
    return row


def _grid_hours(cfg, runs: list[dict], concurrent: list[dict]) -> list[str]:
    """The paper grid's wall-clock from the measured rates (steps x runs per optimizer)."""
    best = {}
    for r in runs:
        if "error" not in r and r["step_ms"] < best.get(r["optimizer"], {"step_ms": math.inf})["step_ms"]:
            best[r["optimizer"]] = r
    counts = {}
    for spec in cfg.runs():
        counts[spec.optimizer] = counts.get(spec.optimizer, 0) + 1
    missing = sorted(set(counts) - set(best))
    serial_h = sum(counts[o] * cfg.train.steps * best[o]["step_ms"] / 3.6e6 for o in counts if o in best)
    lines = [f"- paper grid ({sum(counts.values())} runs x {cfg.train.steps} steps), one run after another at the "
             f"best measured mode: {serial_h:.1f} h" + (f" (without {', '.join(missing)}: not measured)" if missing else "")]
    ok = [c for c in concurrent if "images_per_s_total" in c]
    if ok:
        top = max(ok, key=lambda c: c["images_per_s_total"])
        images = sum(counts.values()) * cfg.train.steps * cfg.train.batch_size
        lines.append(f"- at the best aggregate rate ({top['jobs']} concurrent {top['optimizer']} jobs, "
                     f"{top['images_per_s_total']:.0f} images/s): {images / top['images_per_s_total'] / 3600:.1f} h "
                     "(an AdamW-rate estimate; K-FAC jobs take longer by their step ratio)")
    return lines


def _markdown(report: dict, grid: list[str], batch_size: int) -> str:
    lines = [f"### Training throughput, paper ViT, batch {batch_size} ({report['device']}, "
             f"torch {report['torch']}, {report['date']})", "",
             "| optimizer | mode | step ms | images/s | x AdamW (same mode) | notes |", "|---|---|---|---|---|---|"]
    adamw = {r["mode"]: r for r in report["runs"] if r["optimizer"] == "adamw" and "error" not in r}
    for r in report["runs"]:
        if "error" in r:
            lines.append(f"| {r['optimizer']} | {r['mode']} | - | - | - | {r['error']} |")
            continue
        ratio = r["step_ms"] / adamw[r["mode"]]["step_ms"] if r["mode"] in adamw else float("nan")
        lines.append(f"| {r['optimizer']} | {r['mode']} | {r['step_ms']:.2f} | {r['images_per_s']:.0f} | "
                     f"{ratio:.2f} | {'' if r.get('finite', True) else 'non-finite loss'} |")
    lines += ["", "| concurrent jobs | optimizer | mode | images/s total | images/s per job | notes |",
              "|---|---|---|---|---|---|"]
    for c in report["concurrent"]:
        lines.append(f"| {c['jobs']} | {c['optimizer']} | {c['mode']} | {c.get('images_per_s_total', float('nan')):.0f} "
                     f"| {c.get('images_per_s_per_job', float('nan')):.0f} | {c.get('error', '')} |")
    return "\n".join(lines + [""] + grid) + "\n"


def main(argv=None) -> int:
    from brownformer.config import load_config

    args = _parse(argv)
    device = _device(args.device)
    cfg = load_config(args.config)
    if args.worker:
        return _worker(cfg, args, device)
    modes = args.modes if device.type == "cuda" else ["eager"]  # graphs are CUDA-only (a no-op elsewhere)
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
              "torch": torch.__version__, "runs": [], "concurrent": []}
    args.out.mkdir(parents=True, exist_ok=True)

    def write(grid=()):  # after every measurement: a timeout keeps what finished
        (args.out / "gpu_throughput.json").write_text(json.dumps(report, indent=2))
        (args.out / "gpu_throughput.md").write_text(_markdown(report, list(grid), args.batch_size))

    for optimizer in args.optimizers:
        for mode in modes:
            report["runs"].append(_measure(cfg, args, device, optimizer, mode))
            write()
    adamw = [r for r in report["runs"] if r["optimizer"] == CONCURRENT_OPTIMIZER and "error" not in r]
    mode = min(adamw, key=lambda r: r["step_ms"])["mode"] if adamw else "eager"
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in args.jobs:
            report["concurrent"].append(_concurrent(args, jobs, mode, Path(tmp)))
            write()
    grid = _grid_hours(cfg, report["runs"], report["concurrent"])
    write(grid)
    print(_markdown(report, grid, args.batch_size))
    return 0 if all("error" not in r for r in report["runs"] + report["concurrent"]
                    if "not capturable" not in r.get("error", "")) else 1


if __name__ == "__main__":
    raise SystemExit(main())
