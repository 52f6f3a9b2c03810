"""How far iterative K-FAC's direction is from the exact solve of the same factors, along a training run.

    PYTHONPATH=src python benchmarks/kfac_cost_direction.py --out benchmarks/results/kfac_cost_direction.json

Trains a 2-block vit-pre (width ``--width``) on the digits with ``KFAC(inverse="cg")`` at config/config.yaml's
tuned vit-pre kfac-iterative settings (lr, damping, KL bound, momentum; a constant lr, no schedule) and the `optimizers:` block's factor and
CG settings (factors every 5 steps, ``cg_tol`` 1e-2, at most 10 iterations). At every step it reads, from the
optimizer's public state, the factors the step solved with and the CG solution ``X`` (before the KL bound), and
solves ``G X A + lambda X = V`` exactly in float64 from eigendecompositions of the same factors (the eigen variant's
solve; only this benchmark decomposes). Reported: the median, 90th percentile and maximum over steps of
``||X - X_exact||_F / ||X_exact||_F`` over all preconditioned layers together, and the mean CG iterations.
Writes OUT (JSON) and OUT with suffix .md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import optimizer_overhead as overhead  # noqa: E402

from brownformer.optim import KFAC  # noqa: E402
from brownformer.optim._kfac_math import eigen_solve, symmetric_eigh  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "config" / "config.yaml"
BATCH = 32


def _settings() -> dict:
    """The tuned vit-pre kfac-iterative entry over the optimizers: block's kfac-iterative entry."""
    cfg = yaml.safe_load(CONFIG.read_text())
    entry = {**cfg["optimizers"]["kfac-iterative"], **cfg["tuned"]["vit-pre"]["kfac-iterative"]}
    keys = ("lr", "damping", "kl_clip", "momentum", "factor_every", "cg_max_iter", "cg_tol", "fisher", "adapt_every",
            "rest_lr")
    return {k: entry[k] for k in keys if k in entry}


def _gradient(layer) -> torch.Tensor:
    """``V = [dL/dW, dL/db]`` ``(out, in[+1])`` of one ``nn.Linear``."""
    w = layer.weight.grad
    return w if layer.bias is None else torch.cat([w, layer.bias.grad[:, None]], dim=1)


def run(width: int, steps: int, seed: int) -> dict:
    overhead.SHAPE.clear()
    overhead.SHAPE.update(d_model=width, mlp_ratio=2, n_heads=max(1, width // 8), n_layers=2, patch_size=2)
    torch.manual_seed(seed)
    model, _, _ = overhead.build_vit(torch.device("cpu"))
    from sklearn.datasets import load_digits
    images, labels = load_digits(return_X_y=True)
    images = torch.tensor(images, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    labels = torch.tensor(labels)
    settings = _settings()
    opt = KFAC(model, inverse="cg", seed=seed, **settings)
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    gen = torch.Generator().manual_seed(seed)
    errors, iterations = [], []
    for _ in range(steps):
        pick = torch.randint(0, len(labels), (BATCH,), generator=gen)
        x, y = images[pick], labels[pick]
        seen = {}

        def closure():
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            if torch.is_grad_enabled():
                loss.backward()  # the step's gradient and damping, before the optimizer's re-evaluation clears them
                seen["v"] = {m: _gradient(m).clone() for m in layers if m.weight.grad is not None}
                seen["damping"] = opt.param_groups[0]["damping"]
            return loss
        opt.step(closure)
        err_sq, ref_sq = 0.0, 0.0
        for m, v in seen["v"].items():
            state = opt.state[m.weight]
            if "cg_solution" not in state:
                continue
            g, a = state["factor_g"].double(), state["factor_a"].double()
            exact = eigen_solve(symmetric_eigh(g[None]), symmetric_eigh(a[None]), v.double()[None], seen["damping"])[0]
            err_sq += float((state["cg_solution"].double() - exact).pow(2).sum())
            ref_sq += float(exact.pow(2).sum())
        errors.append((err_sq / ref_sq) ** 0.5)
        iterations.append(opt.last_stats["cg_iterations_mean"])
    ordered = sorted(errors)
    return {"width": width, "steps": steps, "seed": seed, "settings": settings,
            "median_relative_difference": statistics.median(errors),
            "p90_relative_difference": ordered[int(0.9 * (len(ordered) - 1))],
            "max_relative_difference": ordered[-1], "cg_iterations_mean": statistics.mean(iterations)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--widths", nargs="+", type=int, default=[32, 64])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/kfac_cost_direction.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = [run(w, args.steps, args.seed) for w in args.widths]
    command = " ".join(["PYTHONPATH=src python benchmarks/kfac_cost_direction.py",
                        *(argv if argv is not None else sys.argv[1:])])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": command, "torch": torch.__version__, "rows": rows}, indent=2))
    lines = [f"Command: `{command}` (torch {torch.__version__}, 1 thread). Settings: {rows[0]['settings']}.", "",
             "| width | steps | median relative difference to the exact solve | p90 | max | CG iterations (mean) |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['width']} | {r['steps']} | {r['median_relative_difference']:.4f} | "
              f"{r['p90_relative_difference']:.4f} | {r['max_relative_difference']:.4f} | {r['cg_iterations_mean']:.2f} |"
              for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
