"""Does a process's first run pay for warm-up that later runs do not? Claim 4's seconds of runs trained one at a time.

    nice python benchmarks/interleave.py --model vit-pre --optimizers kfac-iterative adamw muon --steps 100 --passes 3

Trains the runs (seed 0 of each optimizer, metrics only, the default config's settings and `eval_every` of claim 4's
blocks) `--passes` times in this one process with `brownformer.interleaved.train_one_at_a_time`, as an interleaved
group's job does, each pass into fresh run folders. Prints each run's training seconds as claim 4 reads them
(`wall_time` less evaluation and probe time) and its process CPU seconds, per pass, and each optimizer's first pass
against the median of the later ones. A first run slower than the later ones by more than noise is a cost that
only the first run of a job pays. Results: benchmarks/results/interleave.md.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import load_raw, prepare_data  # noqa: E402

from brownformer.config import from_dict  # noqa: E402
from brownformer.interleaved import train_one_at_a_time  # noqa: E402
from brownformer.stats.comparison.time_to_target import NOT_TRAINING_TIME  # noqa: E402


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _training_seconds(metrics) -> float:
    """Claim 4's seconds of a finished run: its last row's wall_time less evaluation and probe time."""
    last = metrics.iloc[-1]
    return float(last["wall_time"] - sum(last[c] for c in NOT_TRAINING_TIME if c in last))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--model", default="vit-pre")
    p.add_argument("--optimizers", nargs="+", default=["kfac-iterative", "adamw", "muon"])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--passes", type=int, default=3)
    args = p.parse_args(argv)
    raw = copy.deepcopy(load_raw(args.config))
    for key in ("tuning", "replicas"):
        raw.pop(key, None)
    raw["seeds"] = [0]
    raw["grid"] = [{"models": [args.model], "optimizers": args.optimizers, "seeds": [0], "probes": False,
                    "eval_every": 5}]
    raw["models"][args.model]["steps"] = args.steps
    cfg = from_dict(raw)
    runs = [f"{args.model}__{o}__s0" for o in args.optimizers]
    seconds: dict[str, list[float]] = {r: [] for r in runs}
    cpu_s: dict[str, list[float]] = {r: [] for r in runs}
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare_data(raw, args.model, Path(tmp) / "data")
        for k in range(args.passes):
            for run in runs:  # one call per run, to read each run's CPU; the trainer's loop is the same call
                cpu, wall = _cpu(), time.perf_counter()
                metrics = train_one_at_a_time(cfg, [run], data, Path(tmp) / f"pass{k}", progress=False)[run]
                seconds[run].append(_training_seconds(metrics))
                cpu_s[run].append(_cpu() - cpu)
                print(f"pass {k} {run}: training {seconds[run][-1]:.2f} s (claim 4's seconds), CPU "
                      f"{cpu_s[run][-1]:.2f} s, call {time.perf_counter() - wall:.2f} s", flush=True)
    print(f"\n{args.model}, {args.steps} steps, {args.passes} passes in one process (pid {os.getpid()})")
    print("| run | first pass: training s | later passes (median) | first / later | first pass CPU-s | later CPU-s |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        later, later_cpu = statistics.median(seconds[run][1:]), statistics.median(cpu_s[run][1:])
        print(f"| {run} | {seconds[run][0]:.2f} | {later:.2f} | {seconds[run][0] / later:.3f} | "
              f"{cpu_s[run][0]:.2f} | {later_cpu:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
