"""Per-step cost of each optimizer on the default ViT (and a wider one), as ratios to AdamW measured in the same process.

For sgd, adamw, muon (torch.optim.Muon on 2-D hidden weights, AdamW on the rest), kfac-eigen and
kfac-iterative (with config/config.yaml's settings, and with factors every step) it
times forward+backward, factor collection, inverse/CG and apply, amortized over whole inverse
periods, and records optimizer-state memory, peak memory and CG iterations per step.

    python benchmarks/optimizer_overhead.py --steps 40 --out results/benchmarks/optimizer_overhead.json
    python benchmarks/optimizer_overhead.py --width 64 --mlp-ratio 4 --out ...  # the paper ViT's width

Shapes: the default vit-pre (width 32, 2x MLP, 4 blocks, 4 heads) and, with --width 64
--mlp-ratio 4 --heads 8, the paper ViT's width on the same 8x8 digits input (17 tokens).

Every optimizer is measured --repeats times, interleaved (adamw, sgd, ..., adamw, sgd, ...), and each
column reports the median over repeats, so a transient load on a shared machine moves one repeat,
not the ratios. Writes OUT (JSON, with every repeat) and OUT with suffix .md (a markdown table). On the CPU the clock is the thread's CPU
time (``time.thread_time``, with ``--threads 1``), which a busy shared machine does not inflate;
prints the table.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from brownformer.optim.kfac import KFAC


SHAPE = {"d_model": 32, "mlp_ratio": 2, "n_heads": 4}  # set by main from the arguments (n_layers, patch_size too)


def build_vit(device: torch.device) -> tuple[nn.Module, tuple[int, ...], int]:
    """vit-pre of the given width (digits 8x8x1, 10 classes); returns model, image shape, classes."""
    from brownformer.config import ModelConfig
    from brownformer.models import build_model

    cfg = ModelConfig(name="vit-pre", arch="vit", dataset="digits", ln="pre", **{"n_layers": 4, "patch_size": 2, **SHAPE})
    return build_model(cfg, n_classes=10, image_shape=(1, 8, 8)).to(device), (1, 8, 8), 10


def config_kfac(name: str) -> dict:
    """The K-FAC settings of config/config.yaml's ``optimizers`` block (what the default pipeline runs)."""
    import yaml
    entry = dict(yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
                 ["optimizers"][name])
    return {k: v for k, v in entry.items() if k not in ("type", "lr")}, entry["lr"]


def make_optimizers(inverse_every: int, device: torch.device = torch.device("cpu")) -> dict:
    """The registry's optimizers. K-FAC twice: with config/config.yaml's settings (factors every 5 steps,
    sampled Fisher, KL bound, LM damping through ``step(closure)``: its extra forward every ``adapt_every``
    steps is part of the step time) and with the constructor's defaults (factors every step)."""
    from brownformer.optim import build_optimizer, implementation_flags

    # AdamW as training builds it: its fastest implementation on the device (foreach on the CPU, fused on CUDA);
    # the per-parameter loop torch picks by default on the CPU is slower and flatters every ratio to it
    adamw = implementation_flags("adamw", device)

    kfac = dict(inverse_every=inverse_every, factor_every=1, kl_clip=1e-3, rest_update="adamw", rest_lr=3e-3)
    (eigen, eigen_lr), (iterative, iterative_lr) = config_kfac("kfac-eigen"), config_kfac("kfac-iterative")
    makers = {
        "sgd": lambda m: build_optimizer(m, "sgd", 0.1, {"momentum": 0.9}),
        "adamw": lambda m: build_optimizer(m, "adamw", 3e-3, {"weight_decay": 0.01, **adamw}),
        "muon": lambda m: build_optimizer(m, "muon", 0.02, {"adamw_lr": 3e-3}),
        "kfac-eigen (config)": lambda m: build_optimizer(m, "kfac-eigen", eigen_lr, eigen),
        "kfac-iterative (config)": lambda m: build_optimizer(m, "kfac-iterative", iterative_lr, iterative),
        "kfac-eigen (factors every step)": lambda m: build_optimizer(m, "kfac-eigen", 0.03, kfac),
        "kfac-iterative (factors every step)": lambda m: build_optimizer(m, "kfac-iterative", 0.03, kfac),
    }
    return makers


def _clock(device: torch.device) -> float:
    """CPU: this thread's CPU time (2 cores shared by several jobs: wall-clock would time the
    waiting, not the work; torch runs single-threaded here). GPU: wall-clock after a sync."""
    return time.perf_counter() if device.type == "cuda" else time.thread_time()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _state_bytes(opt) -> int:
    total = 0
    states = [s for part in getattr(opt, "parts", {"": opt}).values() for s in part.state.values()]
    for state in states:
        if isinstance(state, dict):
            total += sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))
    return total


def measure(name: str, make, *, device, batch_size: int, steps: int, warmup: int, seed: int) -> dict:
    torch.manual_seed(seed)
    model, image_shape, n_classes = build_vit(device)
    opt = make(model)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    batches = [(torch.randn(batch_size, *image_shape, generator=gen).to(device),
                torch.randint(0, n_classes, (batch_size,), generator=gen).to(device)) for _ in range(4)]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fwd_bwd, step_time, cg_iters = [], [], []
    timings0 = None
    for i in range(warmup + steps):
        if i == warmup and isinstance(opt, KFAC):
            timings0 = dict(opt.timings)
        x, y = batches[i % len(batches)]
        marks = []

        def closure():  # forward+backward the first time; a forward only when the optimizer re-evaluates
            loss = F.cross_entropy(model(x), y)
            if torch.is_grad_enabled():
                opt.zero_grad(set_to_none=True)
                loss.backward()
                _sync(device)
                marks.append(_clock(device))
            return loss.detach()

        _sync(device)
        t0 = _clock(device)
        if getattr(opt, "wants_closure", False):
            loss = opt.step(closure)  # any re-evaluation of the loss counts as step time
        else:
            loss = closure()
            opt.step()
        _sync(device)
        t2 = _clock(device)
        if i >= warmup:
            fwd_bwd.append(marks[0] - t0)
            step_time.append(t2 - marks[0])
            if isinstance(opt, KFAC) and opt.inverse == "cg":
                cg_iters.append(opt.last_stats["cg_iterations_mean"])  # after the clock: its check is not timed
    row = {"optimizer": name, "steps": steps, "loss_last": loss.item(),
           "forward_backward_ms": 1e3 * statistics.fmean(fwd_bwd), "step_ms": 1e3 * statistics.fmean(step_time),
           "state_mib": _state_bytes(opt) / 2**20}
    row["total_ms"] = row["forward_backward_ms"] + row["step_ms"]
    if isinstance(opt, KFAC):
        spent = {k: 1e3 * (opt.timings[k] - timings0[k]) / steps for k in opt.timings}
        # the hooks only keep tensors during forward/backward (their cost stays in forward_backward_ms);
        # factors, inverse/CG and apply are parts of step_ms
        row.update({f"{k}_ms": v for k, v in spent.items()})
        row["cg_iterations_per_layer_step"] = statistics.fmean(cg_iters) if cg_iters else None
        stats = opt.last_stats
        row["fallbacks"] = stats.get("cg_fallbacks_total", 0)
        row["failures"] = stats.get("failures_total", 0)
    if device.type == "cuda":
        row["peak_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        row["peak_rss_growth_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    return row


def median_row(rows: list[dict]) -> dict:
    """Column-wise median of one optimizer's repeats (the ratio: median of per-repeat ratios)."""
    out = dict(rows[0])
    for key, value in rows[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "steps":
            values = [r[key] for r in rows if r.get(key) is not None]
            out[key] = statistics.median(values) if values else None
    return out


def to_markdown(rows: list[dict], meta: dict) -> str:
    cols = ["optimizer", "total_ms", "ratio_to_adamw", "forward_backward_ms", "factors_ms", "inverse_ms",
            "apply_ms", "step_ms", "cg_iterations_per_layer_step", "state_mib"]
    fmt = lambda v: "" if v is None else (f"{v:.3g}" if isinstance(v, float) else str(v))
    lines = [f"command: `{meta['command']}`", "", f"shape: {meta['shape']}, device: {meta['device']}, threads: {meta['threads']}, batch: {meta['batch_size']}, "
             f"steps: {meta['steps']} (amortized over inverse_every={meta['inverse_every']}), "
             f"median of {meta['repeats']} interleaved repeats, torch {meta['torch']}", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/optimizer_overhead.json"))
    parser.add_argument("--steps", type=int, default=40, help="timed steps (a multiple of --inverse-every)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--inverse-every", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", help="optimizer names to run (default: all)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats; medians reported")
    parser.add_argument("--width", type=int, default=32, help="d_model")
    parser.add_argument("--mlp-ratio", type=float, default=2)
    parser.add_argument("--heads", type=int, default=4)
    args = parser.parse_args(argv)
    SHAPE.update(d_model=args.width, mlp_ratio=args.mlp_ratio, n_heads=args.heads)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if args.device == "auto" else args.device))
    makers = make_optimizers(args.inverse_every, device)
    names = ["adamw"] + [n for n in makers if n != "adamw" and (not args.only or n in args.only)]
    repeats = [[measure(n, makers[n], device=device, batch_size=args.batch_size, steps=args.steps,
                        warmup=args.warmup, seed=args.seed) for n in names] for _ in range(args.repeats)]
    for rows in repeats:
        for row in rows:
            row["ratio_to_adamw"] = row["total_ms"] / rows[0]["total_ms"]
    rows = [median_row([rep[i] for rep in repeats]) for i in range(len(names))]
    meta = {"device": str(device), "threads": args.threads, "shape": dict(SHAPE), "batch_size": args.batch_size, "steps": args.steps,
            "inverse_every": args.inverse_every, "repeats": args.repeats, "torch": torch.__version__,
            "platform": platform.platform(),
            "command": " ".join(["python benchmarks/optimizer_overhead.py", *(argv if argv is not None else sys.argv[1:])])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows, "repeats": repeats}, indent=2))
    table = to_markdown(rows, meta)
    args.out.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
