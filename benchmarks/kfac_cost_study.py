"""Cost study of the paper's claim (arXiv 2101.00218: CG K-FAC is cheaper than K-FAC): eigen, iterative (factored)
and matrix-free K-FAC against AdamW (foreach), widths 32-512, amortised at the claims' settings.

    PYTHONPATH=src python benchmarks/kfac_cost_study.py --out benchmarks/results/kfac_cost_study.json

Per width ``d`` the layers are those of a 2-block vit-pre (Q, K, V, O ``(d, d+1)``, MLP ``(2d, d+1)`` and
``(d, 2d+1)``; biases in the factors), the rows those of a batch of 32 images of 17 tokens (544 rows, K-FAC-expand).
Every variant runs the optimizer work of one training step, timed by thread CPU time on one thread:

* AdamW: ``torch.optim.AdamW(foreach=True)`` on the layers' weights and biases (as training builds it on the CPU);
* eigen: the factors ``A = a^T a / n``, ``G = R g^T g`` every ``factor_every`` steps, ``eigh`` of both every
  ``inverse_every`` steps, the eigenbasis solve every step (``_kfac_math.eigen_solve``);
* iterative (factored): the same factors, the Cholesky refresh of the preconditioner (``_kfac_solve``) when they
  change, and Kronecker-preconditioned CG every step, no ``eigh``: the optimizer's own solver
  (``_kfac_solve.IterativeSolver``: padded blocks, one CG loop over every layer of the step), timed over all
  shapes together;
* matrix-free: no factors; Jacobi-preconditioned CG on the rows of a token subsample (``--rows``) every step
  (``_kfac_matrix_free``);

then the SGD/momentum update of the K-FAC variants is AdamW's cost or less (not added). The amortised optimizer time
is ``factors / factor_every + decomposition / inverse_every + solve`` (config/config.yaml's ``factor_every`` 5 and
``inverse_every`` 10, the claims' settings). Forward + backward of the vit-pre-shaped model at that width is timed
too, so each variant's whole step is ``forward_backward + optimizer`` (the sampled Fisher's extra backward on factor
steps, and the Levenberg-Marquardt forward every 5 steps, are the same for every K-FAC variant and not included).
Memory: the bytes each variant keeps between steps (factors, eigenbases, preconditioners; AdamW's two moments),
exact from the shapes. CG runs to the project's tolerance 1e-2 with at most 10 iterations on synthetic rows whose
spectrum decays like a trained layer's (inputs with a power-law covariance); its iteration count is reported.
Writes OUT (JSON) and OUT with suffix .md.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import optimizer_overhead as overhead  # noqa: E402

from brownformer.optim._kfac_math import eigen_solve, factor_eigh, stacked_input_factor, stacked_output_factor  # noqa: E402
from brownformer.optim._kfac_matrix_free import matrix_free_cg, subsample_rows  # noqa: E402
from brownformer.optim._kfac_solve import IterativeSolver, refresh_preconditioner  # noqa: E402

BATCH, TOKENS, BLOCKS = 32, 17, 2
DAMPING, CG_TOL, CG_MAX_ITER = 1e-2, 1e-2, 10  # config/config.yaml's damping; the solve's tolerance and cap
VARIANTS = ("adamw", "eigen", "iterative", "matrix-free")


def _shapes(d: int) -> list[tuple[int, int, int]]:
    """``(count, out, in)`` of the preconditioned layers of BLOCKS vit-pre blocks (in without the bias column)."""
    return [(4 * BLOCKS, d, d), (BLOCKS, 2 * d, d), (BLOCKS, d, 2 * d)]


def _rows(k: int, n: int, f: int, gen: torch.Generator) -> torch.Tensor:
    """``(k, n, f)`` rows with a power-law covariance (eigenvalues ~ 1/i), as trained activations have."""
    scale = torch.arange(1, f + 1, dtype=torch.float32).rsqrt()
    return torch.randn(k, n, f, generator=gen) * scale


def _clock(fn, repeats: int) -> float:
    """Median thread CPU seconds of ``fn()`` over ``repeats`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return statistics.median(times)


def _layer_costs(k: int, out: int, n_in: int, n: int, keep: int, repeats: int, gen) -> dict:
    """Seconds and kept bytes of each K-FAC part for ``k`` layers of one shape."""
    a_rows, g_rows = _rows(k, n, n_in, gen), _rows(k, n, out, gen) / n
    v = torch.randn(k, out, n_in + 1, generator=gen)
    lam = torch.full((k, 1, 1), DAMPING)

    def factors():
        return (stacked_input_factor(list(a_rows), bias=True, weight_sharing="expand"),
                stacked_output_factor(list(g_rows), weight_sharing="expand", scale=n))
    a, g = factors()
    pairs = factor_eigh([a, g])
    tensors = {"factor_a": a, "factor_g": g}
    refresh_preconditioner(tensors, lam)

    ones = torch.ones(k, n, 1)
    a_full = torch.cat([a_rows, ones], dim=2)  # (k, n, in+1): the bias's ones column

    def matrix_free():
        pick = torch.Generator().manual_seed(0)
        rows = subsample_rows(torch.cat([a_full, g_rows], dim=2), keep, pick)  # the same tokens for a and g
        a_s, g_s = rows[:, :, : n_in + 1], rows[:, :, n_in + 1:]
        # A = a^T a / n and G = R g^T g from the kept rows: the sum scaled by n / keep, R = n
        return matrix_free_cg(g_s, a_s, v, lam, scale=(n / keep) * n / keep, max_iter=CG_MAX_ITER, tol=CG_TOL)

    out_bytes = 4  # float32
    factor_bytes = k * ((n_in + 1) ** 2 + out ** 2) * out_bytes
    return {
        "factors": _clock(factors, repeats),
        "eigh": _clock(lambda: factor_eigh([a, g]), repeats),
        "eigen_solve": _clock(lambda: eigen_solve(pairs[1], pairs[0], v, lam), repeats),
        "preconditioner": _clock(lambda: refresh_preconditioner(dict(tensors), lam), repeats),
        "matrix_free": _clock(matrix_free, repeats),
        "matrix_free_iterations": float(matrix_free().iterations.float().mean()),
        "system": (tensors, v, lam),
        # kept between steps: factors + eigenbases (eigen); factors + two preconditioners + the last solution
        "eigen_bytes": 2 * factor_bytes + k * (n_in + 1 + out) * out_bytes,
        "iterative_bytes": 2 * factor_bytes + k * out * (n_in + 1) * out_bytes,
        # the kept rows of the subsample until the step (a, g) and nothing after it
        "matrix_free_bytes": k * keep * (n_in + 1 + out) * out_bytes,
    }


def _iterative_solve(systems: list, repeats: int) -> tuple[float, float]:
    """Seconds and mean CG iterations of the optimizer's solver on every layer of a step (all shapes at once)."""
    items = [(None, tensors, True) for tensors, _, _ in systems]
    v, lam = [s[1] for s in systems], [s[2] for s in systems]
    solver = IterativeSolver(tol=CG_TOL, warm_start=False)
    budget = [CG_MAX_ITER] * solver.n_blocks(items)

    def solve():
        return solver([(None, dict(t), True) for _, t, _ in items], v, lam, iterations=budget)
    return _clock(solve, repeats), float(solve()[1]["cg_iterations"].float().mean())


def _adamw(d: int, repeats: int, gen) -> tuple[float, int]:
    params = [torch.randn(out, n_in + 1, generator=gen, requires_grad=True)
              for k, out, n_in in _shapes(d) for _ in range(k)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=True)
    seconds = _clock(opt.step, repeats)
    return seconds, 2 * sum(p.numel() for p in params) * 4


def _forward_backward(d: int, repeats: int) -> float:
    overhead.SHAPE.clear()
    overhead.SHAPE.update(d_model=d, mlp_ratio=2, n_heads=max(1, d // 8), n_layers=BLOCKS, patch_size=2)
    torch.manual_seed(0)
    model, image_shape, n_classes = overhead.build_vit(torch.device("cpu"))
    x, y = torch.randn(BATCH, *image_shape), torch.randint(0, n_classes, (BATCH,))

    def step():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
    return _clock(step, repeats)


def study(widths: list[int], *, keep: int, factor_every: int, inverse_every: int, repeats: int) -> list[dict]:
    rows = []
    for d in widths:
        gen = torch.Generator().manual_seed(d)
        reps = max(1, repeats if d <= 128 else repeats // 2)
        parts = [_layer_costs(k, out, n_in, BATCH * TOKENS, keep, reps, gen) for k, out, n_in in _shapes(d)]
        total = {key: sum(p[key] for p in parts) for key in parts[0] if key not in ("system", "matrix_free_iterations")}
        weights = [k for k, _, _ in _shapes(d)]
        total["cg"], cg_iterations = _iterative_solve([p["system"] for p in parts], reps)
        iters = {"cg_iterations": cg_iterations,
                 "matrix_free_iterations": sum(w * p["matrix_free_iterations"] for w, p in zip(weights, parts)) / sum(weights)}
        adamw_s, adamw_bytes = _adamw(d, reps, gen)
        fwd_bwd = _forward_backward(d, reps)
        optimizer = {
            "adamw": adamw_s,
            "eigen": total["factors"] / factor_every + total["eigh"] / inverse_every + total["eigen_solve"],
            "iterative": (total["factors"] + total["preconditioner"]) / factor_every + total["cg"],
            "matrix-free": total["matrix_free"],
        }
        memory = {"adamw": adamw_bytes, "eigen": total["eigen_bytes"], "iterative": total["iterative_bytes"],
                  "matrix-free": total["matrix_free_bytes"]}
        row = {"width": d, "forward_backward_ms": 1e3 * fwd_bwd, **iters,
               "parts_ms": {k: 1e3 * v for k, v in total.items() if not k.endswith("bytes")}}
        for name in VARIANTS:
            row[f"{name}_optimizer_ms"] = 1e3 * optimizer[name]
            row[f"{name}_step_ratio"] = (fwd_bwd + optimizer[name]) / (fwd_bwd + adamw_s)
            row[f"{name}_state_mib"] = memory[name] / 2**20
        rows.append(row)
        print(d, {n: round(row[f"{n}_step_ratio"], 3) for n in VARIANTS}, flush=True)
    return rows


def _crossover(rows: list[dict], a: str, b: str) -> str:
    """The smallest width from which variant ``a``'s optimizer time is below ``b``'s at every larger width."""
    ratios = [(r["width"], r[f"{a}_optimizer_ms"] / r[f"{b}_optimizer_ms"]) for r in rows]
    for i, (w, _) in enumerate(ratios):
        if all(x < 1 for _, x in ratios[i:]):
            return f"{a} is cheaper than {b} from width {w} on (" + ", ".join(f"{w}: {x:.2f}" for w, x in ratios) + ")"
    return f"{a} is never cheaper than {b} at the widths measured (" + ", ".join(f"{w}: {x:.2f}" for w, x in ratios) + ")"


def to_markdown(rows: list[dict], meta: dict) -> str:
    fmt = lambda v: f"{v:.3g}"
    lines = [f"Command: `{meta['command']}` (torch {meta['torch']}, {meta['platform']}, 1 thread).", "",
             "| width | fwd+bwd ms | " + " | ".join(f"{n} opt ms" for n in VARIANTS) + " | "
             + " | ".join(f"{n} step / AdamW" for n in VARIANTS[1:]) + " | CG its (factored, matrix-free) | "
             + " | ".join(f"{n} MiB" for n in VARIANTS) + " |",
             "|" + "---|" * (3 + 2 * len(VARIANTS) + len(VARIANTS) - 1)]
    for r in rows:
        lines.append(f"| {r['width']} | {fmt(r['forward_backward_ms'])} | "
                     + " | ".join(fmt(r[f'{n}_optimizer_ms']) for n in VARIANTS) + " | "
                     + " | ".join(fmt(r[f'{n}_step_ratio']) for n in VARIANTS[1:])
                     + f" | {r['cg_iterations']:.1f}, {r['matrix_free_iterations']:.1f} | "
                     + " | ".join(fmt(r[f'{n}_state_mib']) for n in VARIANTS) + " |")
    lines += ["", "Crossovers (amortised optimizer time): " + _crossover(rows, "iterative", "eigen") + "; "
              + _crossover(rows, "matrix-free", "eigen") + "; " + _crossover(rows, "matrix-free", "iterative") + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--widths", nargs="+", type=int, default=[32, 64, 128, 256, 512])
    p.add_argument("--rows", type=int, default=64, help="matrix-free: tokens kept of the 544 rows of a step")
    p.add_argument("--factor-every", type=int, default=5)
    p.add_argument("--inverse-every", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5, help="timed calls per part (half above width 128)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/kfac_cost_study.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = study(args.widths, keep=args.rows, factor_every=args.factor_every, inverse_every=args.inverse_every,
                 repeats=args.repeats)
    meta = {"torch": torch.__version__, "platform": platform.platform(), "rows": args.rows,
            "factor_every": args.factor_every, "inverse_every": args.inverse_every,
            "command": " ".join(["PYTHONPATH=src python benchmarks/kfac_cost_study.py",
                                 *(argv if argv is not None else sys.argv[1:])])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    args.out.with_suffix(".md").write_text(to_markdown(rows, meta))
    print(to_markdown(rows, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
