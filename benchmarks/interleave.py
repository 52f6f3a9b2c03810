"""Does a run's place in a one-at-a-time job change its cost? Claim 4's seconds of runs trained in one process.

    nice python benchmarks/interleave.py --steps 100 --passes 4

Trains the runs (seed 0 of each optimizer, metrics only, the default config's settings and `eval_every` of claim 4's
blocks) `--passes` times in this one process with `brownformer.one_at_a_time.train_one_at_a_time`, as an
interleaved group's job does, each pass into fresh run folders (one call per pass, as a job makes one). Prints each
run's training seconds as claim 4 reads them (`wall_time` less evaluation and probe time) and its training loop's
CPU seconds (which other jobs on a shared machine stretch less than wall-clock), whole, of its first step and of its
first steps, per pass, and the first pass against the median of the later ones. A first pass slower than the later
ones beyond noise is a cost that only a job's first runs pay. Results: benchmarks/results/interleave.md.
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
from brownformer.one_at_a_time import train_one_at_a_time  # noqa: E402
from brownformer.stats.comparison.time_to_target import NOT_TRAINING_TIME  # noqa: E402


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


class _LoopCPU:
    """A step callback reading this process's CPU clock before every step and at its last call (after the loop):
    the training loop's CPU seconds, which another job's load on the machine stretches far less than wall-clock,
    and those of its first `HEAD` steps, where a one-time cost lands. Its own time (microseconds) is billed to
    probe time, outside claim 4's seconds."""

    def __init__(self):
        self.clock: list[float] = []

    def __call__(self, step, model, lr_sum, lr_sq_sum):
        self.clock.append(time.process_time())

    @property
    def seconds(self) -> float:
        return self.clock[-1] - self.clock[0]

    @property
    def head(self) -> float:
        return self.clock[HEAD] - self.clock[0]

    @property
    def first_step(self) -> float:
        return self.clock[1] - self.clock[0]


#: the first steps of a run, where lazy imports, first calls and allocator growth cost once
HEAD = 10


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
    measured = {key: {r: [] for r in runs} for key in ("seconds", "loop_cpu", "step_cpu", "head_cpu")}
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare_data(raw, args.model, Path(tmp) / "data")
        for k in range(args.passes):  # one call per pass, as a group's job makes one
            loops = {run: _LoopCPU() for run in runs}
            cpu = _cpu()
            out = train_one_at_a_time(cfg, runs, data, Path(tmp) / f"pass{k}", callbacks={r: [c] for r, c in
                                                                                         loops.items()},
                                      progress=False)
            for run in runs:
                measured["seconds"][run].append(_training_seconds(out[run]))
                measured["loop_cpu"][run].append(loops[run].seconds)
                measured["head_cpu"][run].append(loops[run].head)
                measured["step_cpu"][run].append(loops[run].first_step)
                print(f"pass {k} {run}: training {measured['seconds'][run][-1]:.2f} s wall (claim 4's seconds), "
                      f"loop CPU {loops[run].seconds:.2f} s, its first step {loops[run].first_step:.3f} s, its "
                      f"first {HEAD} {loops[run].head:.3f} s", flush=True)
            print(f"pass {k}: {_cpu() - cpu:.2f} CPU-s in all", flush=True)
    print(f"\n{args.model}, {args.steps} steps, {args.passes} passes in one process; first pass against the median "
          "of the later ones")
    print(f"| run | claim 4's s: first | later | first / later | loop CPU-s: first | later | first / later | "
          f"CPU-s of step 1: first | later | of steps 1-{HEAD}: first | later | first-pass excess in steps 1-{HEAD} "
          "/ later loop CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        cells = []
        for key in ("seconds", "loop_cpu", "step_cpu", "head_cpu"):
            first, later = measured[key][run][0], statistics.median(measured[key][run][1:])
            cells += [f"{first:.2f}", f"{later:.2f}"] + ([f"{first / later:.3f}"] if key in ("seconds", "loop_cpu")
                                                         else [])
        excess = measured["head_cpu"][run][0] - statistics.median(measured["head_cpu"][run][1:])
        cells.append(f"{excess / statistics.median(measured['loop_cpu'][run][1:]):+.1%}")
        print(f"| {run} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
