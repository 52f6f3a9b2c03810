"""Dispatched operations per training step of the README snippet: K-FAC (iterative, eigen) against AdamW (foreach).

On the CPU at the snippet's sizes a step's time is set by how many small operations it dispatches, not by their
arithmetic, so the count is the machine-independent part of the step-time ratio (kfac_snippet_defaults.md measures
the times, which move with the machine and its load). Every ATen operation the step dispatches is counted through a
``TorchDispatchMode`` and attributed to the innermost frame of ``brownformer/optim`` that issued it; operations
outside the optimizer are the model's forward and backward (the closure), and the closure's re-evaluation for the
damping adaptation is counted apart. Operations are counted after autograd, as the kernels see them.

    PYTHONPATH=src python benchmarks/kfac_op_counts.py --out benchmarks/results/kfac_op_counts.md

The problems, seeds and batches are those of tests/optim/test_kfac_defaults.py; counts are averaged over
``--steps`` steps after ``--warmup`` steps (a multiple of the defaults' factor/adaptation periods, so every
amortised part is counted at its rate). ``cg, max_iter 1`` is the iterative variant capped at one CG iteration:
the preconditioner's direction, optimally scaled (a measured floor, not a default).
"""
from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.optim import test_kfac_defaults as snippet  # noqa: E402
from tests.optim.conftest import TinyTransformer  # noqa: E402

from brownformer.optim.kfac import KFAC  # noqa: E402

OPTIMIZERS = {
    "adamw (foreach)": lambda m: torch.optim.AdamW(m.parameters(), foreach=True),
    "eigen, defaults": lambda m: KFAC(m, inverse="eigen"),
    "cg, defaults": lambda m: KFAC(m, inverse="cg"),
    "cg, max_iter 1": lambda m: KFAC(m, inverse="cg", cg_max_iter=1),
}
PROBLEMS = ("mlp-regression", "transformer")
MODEL = "model forward + backward"
REEVALUATION = "damping adaptation: closure re-evaluation"
PARTS = {  # innermost brownformer/optim file -> part of the step
    "_kfac_pcg.py": "solve", "_kfac_solve.py": "solve", "_kfac_blocks.py": "solve (padding into blocks)",
    "_kfac_capture.py": "factor capture (hooks, sampled backward)", "_kfac_math.py": "factor math, KL bound",
    "_base_update.py": "rest update (AdamW part), momentum", "_kfac_control.py": "damping control",
    "_kfac_groups.py": "per-group buffers", "_kfac_step.py": "step bookkeeping", "kfac.py": "step bookkeeping",
    "_kfac_matrix_free.py": "solve", "_kfac_packed.py": "factor capture (hooks, sampled backward)",
}
FUNCTIONS = {  # functions of _kfac_math.py that belong to another part
    "eigen_solve": "solve", "kronecker_operator": "solve", "symmetric_eigh": "solve",
    "all_finite": "finiteness checks", "finite_rows": "finiteness checks",
}


class _OpCounter(TorchDispatchMode):
    """Counts every dispatched operation by the part of the step that issued it."""

    def __init__(self):
        super().__init__()
        self.parts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        frames = traceback.extract_stack()
        names = {f.name for f in frames}
        optim = [f for f in frames if "brownformer/optim" in f.filename.replace("\\", "/")]
        if "_loss_after" in names:
            part = REEVALUATION
        elif optim and not (optim[-1].name == "step" and "closure" in names):  # issued by the optimizer's code
            part = FUNCTIONS.get(optim[-1].name) or PARTS.get(Path(optim[-1].filename).name, "other optimizer")
        elif "closure" in names:
            part = MODEL
        elif any("torch/optim" in f.filename.replace("\\", "/") for f in frames):
            part = "optimizer (torch.optim)"
        else:
            part = "batch sampling"
        self.parts[part] += 1
        return func(*args, **(kwargs or {}))


def snippet_problem(name: str, seed: int):
    if name == "mlp-regression":
        return snippet.regression_problem(seed)
    return snippet.sequence_problem(seed, TinyTransformer)


def train_ms(opt, model, sample, loss_fn, steps: range) -> float:
    """Runs the snippet's steps; returns thread CPU ms per step."""
    start = time.thread_time()
    snippet.train(opt, model, sample, loss_fn, steps)
    return 1e3 * (time.thread_time() - start) / len(steps)


def count(problem: str, label: str, seed: int, warmup: int, steps: int) -> tuple[collections.Counter, float]:
    """Operations per step by part, and the median thread ms per step of 3 timed (uncounted) repeats."""
    model, sample, loss_fn = snippet_problem(problem, seed)
    opt = OPTIMIZERS[label](model)
    train_ms(opt, model, sample, loss_fn, range(warmup))
    counter = _OpCounter()
    with counter:
        train_ms(opt, model, sample, loss_fn, range(warmup, warmup + steps))
    per_step = collections.Counter({k: v / steps for k, v in counter.parts.items()})
    ms = statistics.median(train_ms(opt, model, sample, loss_fn, range(warmup + steps * (1 + r), warmup + steps * (2 + r)))
                           for r in range(3))
    return per_step, ms


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--steps", type=int, default=40, help="counted steps (a multiple of 20: every amortised part)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    import warnings
    warnings.filterwarnings("ignore", message="K-FAC preconditions")  # the transformer's positions: expected
    lines = []
    for problem in PROBLEMS:
        counts = {label: count(problem, label, args.seed, args.warmup, args.steps) for label in OPTIMIZERS}
        base_ops, base_ms = sum(counts["adamw (foreach)"][0].values()), counts["adamw (foreach)"][1]
        parts = sorted({k for c, _ in counts.values() for k in c}, key=lambda k: (k != MODEL, k))
        lines += [f"\n## {problem} (seed {args.seed})\n",
                  "| part (operations per step) | " + " | ".join(OPTIMIZERS) + " |",
                  "|---" * (len(OPTIMIZERS) + 1) + "|"]
        for part in parts:
            lines.append(f"| {part} | " + " | ".join(f"{c.get(part, 0):.1f}" for c, _ in counts.values()) + " |")
        totals = [sum(c.values()) for c, _ in counts.values()]
        lines.append("| **all operations** | " + " | ".join(f"**{t:.1f}**" for t in totals) + " |")
        lines.append("| operations / AdamW's | " + " | ".join(f"{t / base_ops:.2f}" for t in totals) + " |")
        lines.append("| thread ms per step (median of 3 repeats) | " + " | ".join(f"{ms:.2f}" for _, ms in counts.values()) + " |")
        lines.append("| time / AdamW's | " + " | ".join(f"{ms / base_ms:.2f}" for _, ms in counts.values()) + " |")
        lines.append("| us per operation | " + " | ".join(f"{1e3 * ms / t:.1f}" for (_, ms), t in zip(counts.values(), totals)) + " |")
        print("\n".join(lines[-(len(parts) + 8):]), flush=True)
    if args.out is not None:
        command = " ".join(["PYTHONPATH=src python benchmarks/kfac_op_counts.py", *(argv if argv is not None else sys.argv[1:])])
        args.out.write_text(f"# Operations per step of the README snippet (benchmarks/kfac_op_counts.py)\n\nCommand: `{command}` "
                            f"(torch {torch.__version__}, 1 thread; counts are exact, times move with the machine).\n"
                            + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
