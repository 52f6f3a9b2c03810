"""Host synchronisations per K-FAC step on the default ViT, counted with torch.profiler.

    python benchmarks/host_syncs.py --steps 40 --warmup 20

Counts ``aten::_local_scalar_dense`` (every ``.item()``, ``bool(tensor)``, ``float(tensor)`` runs one)
inside ``opt.step()`` over ``--steps`` steps after ``--warmup`` steps (the factors are a plain mean for
the first 20 factor updates, with eigendecompositions at updates 1, 2, 4, 8, 16), for both inverses.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import optimizer_overhead as overhead  # noqa: E402

from brownformer.optim import build_optimizer  # noqa: E402


def count(kind: str, steps: int, warmup: int) -> tuple[int, int]:
    """(syncs inside step over the timed steps, steps)."""
    torch.manual_seed(0)
    model, shape, n_classes = overhead.build_vit(torch.device("cpu"))
    opt = build_optimizer(model, kind, 0.05, {"damping": 0.1, "rest_update": "adamw", "rest_lr": 0.009})
    gen = torch.Generator().manual_seed(0)

    def one():
        x, y = torch.randn(64, *shape, generator=gen), torch.randint(0, n_classes, (64,), generator=gen)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        with torch.profiler.record_function("kfac_step"):
            opt.step()

    for _ in range(warmup):
        one()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            one()
    events = prof.events()
    windows = [(e.time_range.start, e.time_range.end) for e in events if e.name == "kfac_step"]
    syncs = sum(1 for e in events if e.name == "aten::_local_scalar_dense"
                and any(lo <= e.time_range.start <= hi for lo, hi in windows))
    return syncs, len(windows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=20)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print("| optimizer | steps | host syncs | per step |\n|---|--:|--:|--:|")
    for kind in ("kfac-eigen", "kfac-iterative"):
        syncs, n = count(kind, args.steps, args.warmup)
        print(f"| {kind} | {n} | {syncs} | {syncs / n:.2f} |")
    syncs, n = count("kfac-eigen", args.warmup, 0)
    print(f"| kfac-eigen, first {args.warmup} steps (eigh at updates 1, 2, 4, 8, 16) | {n} | {syncs} | {syncs / n:.2f} |")


if __name__ == "__main__":
    main()
