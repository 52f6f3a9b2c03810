"""CPU seconds of one ensemble trained in this process by each forward of brownformer.ensemble (ENSEMBLE_BACKENDS).

    python benchmarks/ensemble_backends.py --model lm-pre --optimizer adamw --members 8 --steps 500 \
        --backends batched compile

`train_ensemble` as the pipeline calls it (metrics only, the model's settings, evaluation every
`train.eval_every`), `--steps` steps, one thread; CPU seconds are this process's plus its children's (inductor
compiles in worker processes). The compile backend's first ensemble compiles (on the FX graph cache when warm).
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import load_raw, prepare_data  # noqa: E402

from brownformer.config import from_dict  # noqa: E402
from brownformer.ensemble import train_ensemble  # noqa: E402


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--model", default="lm-pre")
    p.add_argument("--optimizer", default="adamw")
    p.add_argument("--members", type=int, default=8)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--backends", nargs="+", default=["batched", "compile"])
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    raw = copy.deepcopy(load_raw(args.config))
    for key in ("tuning", "replicas"):
        raw.pop(key, None)
    seeds = list(range(args.members))
    raw["seeds"] = seeds
    raw["grid"] = [{"models": [args.model], "optimizers": [args.optimizer], "seeds": seeds, "probes": False}]
    raw["models"][args.model]["steps"] = args.steps
    raw["train"]["ensemble"] = args.members
    cfg = from_dict(raw)
    runs = [f"{args.model}__{args.optimizer}__s{s}" for s in seeds]
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare_data(raw, args.model, Path(tmp) / "data")
        for backend in args.backends:
            cpu, wall = _cpu(), time.perf_counter()
            train_ensemble(cfg, runs, data, Path(tmp) / backend, progress=False, backend=backend)
            print(f"{args.model} {args.optimizer}, {args.members} members, {args.steps} steps, backend {backend}: "
                  f"{_cpu() - cpu:.1f} CPU-s, {time.perf_counter() - wall:.1f} s wall", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
