"""The README snippet's problems (tests/optim/test_kfac_defaults.py) at factors every step and every 5 steps:
held-out loss and time per step (forward, backward and optimizer, thread CPU time, one thread) against
``torch.optim.AdamW(foreach=True)`` at its defaults, both K-FAC variants, both seeds.

    PYTHONPATH=src python benchmarks/kfac_snippet_defaults.py > benchmarks/results/kfac_snippet_defaults.md

The evidence for the constructor's ``factor_every`` default (optim/kfac_settings.py). The first AdamW run of a
process includes its warm-up (one-time costs), so its time is not a ratio's base; the table's ratios use the
same seed's AdamW run.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.optim import test_kfac_defaults as snippet  # noqa: E402
from tests.optim.conftest import TinyTransformer  # noqa: E402

from brownformer.optim.kfac import KFAC  # noqa: E402

PROBLEMS = (("mlp-regression", 60), ("transformer", 200))
FACTOR_EVERY = (1, 5)


def _run(make_optimizer, problem: str, seed: int, steps: int) -> tuple[float, float]:
    build = snippet.regression_problem(seed) if problem == "mlp-regression" else snippet.sequence_problem(seed, TinyTransformer)
    model, sample, loss_fn = build
    start = time.thread_time()
    loss = snippet.held_out_loss(model, sample, loss_fn, make_optimizer, steps)
    return loss, 1e3 * (time.thread_time() - start) / steps


def main() -> int:
    torch.set_num_threads(1)
    _run(lambda m: torch.optim.AdamW(m.parameters(), foreach=True), "mlp-regression", 0, 5)  # warm-up
    print("| problem | seed | AdamW loss | AdamW ms/step | variant | factor_every | loss | loss / AdamW | ms/step | "
          "time / AdamW |\n|---|---|---|---|---|---|---|---|---|---|")
    for problem, steps in PROBLEMS:
        for seed in snippet.SEEDS:
            base_loss, base_ms = _run(lambda m: torch.optim.AdamW(m.parameters(), foreach=True), problem, seed, steps)
            for every in FACTOR_EVERY:
                for inverse in ("cg", "eigen"):
                    loss, ms = _run(lambda m: KFAC(m, inverse=inverse, factor_every=every), problem, seed, steps)
                    print(f"| {problem} | {seed} | {base_loss:.4f} | {base_ms:.2f} | {inverse} | {every} | {loss:.4f} "
                          f"| {loss / base_loss:.2f} | {ms:.2f} | {ms / base_ms:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
