"""The README snippet (``KFAC(model, inverse=...)`` at its defaults) against ``torch.optim.AdamW(foreach=True)`` at its
defaults on the snippet test's problems (tests/optim/test_kfac_defaults.py): held-out loss and time per step
(forward, backward, optimizer, K-FAC's closure re-evaluations; thread CPU time, one thread), both K-FAC variants,
both seeds, the iterative variant at the amortisation a config-built K-FAC keeps (factors and the damping adaptation
every 5 steps: ``kfac_settings.CONFIG_DEFAULTS``, the constructor's defaults before) and with a 10x looser CG
tolerance (a measured option, not a default).

    PYTHONPATH=src python benchmarks/kfac_snippet_defaults.py --repeats 3 --out benchmarks/results/kfac_snippet_defaults.md

The evidence for the constructor's ``factor_every`` / ``adapt_every`` defaults (optim/kfac_settings.py) and the
README's numbers.
Each (problem, seed) runs AdamW and every K-FAC variant ``--repeats`` times interleaved; a time ratio is the
median over repeats of K-FAC's time over the same repeat's AdamW time (min-max in brackets), so a transient load
on a shared machine moves one repeat, not the ratio. The losses are deterministic (the same in every repeat).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.optim import test_kfac_defaults as snippet  # noqa: E402
from tests.optim.conftest import TinyTransformer  # noqa: E402

from brownformer.optim.kfac import KFAC  # noqa: E402

PROBLEMS = (("mlp-regression", 60), ("transformer", 200))
VARIANTS = {  # label -> optimizer builder; "defaults" is the README snippet
    "cg, defaults": lambda m: KFAC(m, inverse="cg"),
    "eigen, defaults": lambda m: KFAC(m, inverse="eigen"),
    "cg, factor/adapt every 5": lambda m: KFAC(m, inverse="cg", factor_every=5, adapt_every=5),
    "cg, cg_tol 0.1": lambda m: KFAC(m, inverse="cg", cg_tol=0.1),
}


def _adamw(model):
    return torch.optim.AdamW(model.parameters(), foreach=True)


def _run(make_optimizer, problem: str, seed: int, steps: int) -> tuple[float, float]:
    build = snippet.regression_problem(seed) if problem == "mlp-regression" else snippet.sequence_problem(seed, TinyTransformer)
    model, sample, loss_fn = build
    start = time.thread_time()
    loss = snippet.held_out_loss(model, sample, loss_fn, make_optimizer, steps)
    return loss, 1e3 * (time.thread_time() - start) / steps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=None, help="markdown file (default: print only)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    _run(_adamw, "mlp-regression", 0, 5)  # warm-up: the first run of a process pays one-time costs
    lines = ["| problem | seed | AdamW loss | AdamW ms/step | variant | loss | loss / AdamW | ms/step | "
             "time / AdamW, median [min, max] |", "|---|---|---|---|---|---|---|---|---|"]
    for problem, steps in PROBLEMS:
        for seed in snippet.SEEDS:
            runs = {name: [] for name in ("adamw", *VARIANTS)}
            for _ in range(args.repeats):
                runs["adamw"].append(_run(_adamw, problem, seed, steps))
                for name, make in VARIANTS.items():
                    runs[name].append(_run(make, problem, seed, steps))
            base_loss, base_ms = runs["adamw"][0][0], statistics.median(ms for _, ms in runs["adamw"])
            for name in VARIANTS:
                ratios = [ms / base for (_, ms), (_, base) in zip(runs[name], runs["adamw"])]
                loss, ms = runs[name][0][0], statistics.median(ms for _, ms in runs[name])
                lines.append(f"| {problem} | {seed} | {base_loss:.4f} | {base_ms:.2f} | {name} | {loss:.4f} | "
                             f"{loss / base_loss:.2f} | {ms:.2f} | {statistics.median(ratios):.2f} "
                             f"[{min(ratios):.2f}, {max(ratios):.2f}] |")
                print(lines[-1], flush=True)
    if args.out is not None:
        command = " ".join(["PYTHONPATH=src python benchmarks/kfac_snippet_defaults.py",
                            *(argv if argv is not None else sys.argv[1:])])
        args.out.write_text(f"Command: `{command}` (torch {torch.__version__}, 1 thread, thread CPU time).\n\n"
                            + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
