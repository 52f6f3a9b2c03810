"""What fusing the iterative K-FAC's solve would buy on the README snippet: its CG solve eager and compiled, and the
step-time ratio to AdamW with the solve at its eager cost, at its compiled cost and at no cost at all.

The solve timed is the project's own ``_kfac_pcg.block_conjugate_gradient`` on the problem the snippet's K-FAC
(``KFAC(model, inverse="cg")``, its defaults) solves after its last training step (rebuilt from its state:
:func:`cg_problem`), from a cold start: eager as the optimizer runs it (on the CPU it stops when every system has
converged), eager with a fixed iteration count, and ``torch.compile``d (``fullgraph``; a fixed iteration count,
``stop_early=False``, because a compiled graph cannot stop on a host read: the budget the optimizer set). Where
``--device cuda``, also ``mode="reduce-overhead"`` (CUDA graphs).

The step-level columns come from the CPU training loop of tests/optim/test_kfac_defaults.py (thread time, one thread,
interleaved repeats, ratio per repeat): K-FAC's step, the share of it spent in the solve (K-FAC's own
``timings["inverse"]``: the CG, its padding and diagnostics, the preconditioner refreshes), and two projections: the
step with the solve at its compiled cost (``step - solve x (1 - compiled / eager)``, the ratio from the isolated
timings) and with a solve of zero cost, the floor no faster solver, fused or not, can beat, set by the rest of the
step (factors, damping control, the KL bound, the update, bookkeeping).

    PYTHONPATH=src python benchmarks/kfac_compiled_cg.py --out benchmarks/results/kfac_compiled_cg.md
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kfac_op_counts as counts  # noqa: E402  (the snippet's problems and training loop)

from brownformer.optim._kfac_pcg import block_conjugate_gradient  # noqa: E402
from brownformer.optim._kfac_solve import IterativeSolver  # noqa: E402

PROBLEMS = counts.PROBLEMS


def _step_ms(make, problem: str, seed: int, warmup: int, steps: int) -> tuple[float, float, object]:
    """Thread ms per training step after ``warmup`` steps, the ms of it in K-FAC's solve (its ``timings["inverse"]``:
    the CG, its padding and diagnostics, the preconditioner refreshes; 0 for AdamW) and the optimizer."""
    model, sample, loss_fn = counts.snippet_problem(problem, seed)
    opt = make(model)
    counts.train_ms(opt, model, sample, loss_fn, range(warmup))
    before = getattr(opt, "timings", {}).get("inverse", 0.0)
    ms = counts.train_ms(opt, model, sample, loss_fn, range(warmup, warmup + steps))
    return ms, 1e3 * (getattr(opt, "timings", {}).get("inverse", 0.0) - before) / steps, opt


def cg_problem(opt) -> tuple:
    """The CG problem of the optimizer's next solve, ``(args, kwargs)`` of ``block_conjugate_gradient``, as its own
    solver builds it (``IterativeSolver.problem``) from its public state: per shape group the running factors, the
    stored Kronecker preconditioner and the gradients left by the last step, the group's damping and the CG budget
    per block the optimizer set. The preconditioner is the one of the last refresh (the damping may have moved
    since: the iteration count can differ by one from the optimizer's own next solve)."""
    if opt.inverse != "cg" or opt.relative_damping:
        raise ValueError("cg_problem rebuilds the iterative solve at absolute damping (the README snippet's defaults)")
    solver = IterativeSolver(tol=opt.cg_tol, warm_start=False)
    items = [(g, g.stacks, True) for g in opt.groups]
    v = [g.gradients() for g in opt.groups]
    lam = [torch.full((len(g), 1, 1), opt.param_groups[0]["damping"], dtype=vj.dtype) for g, vj in zip(opt.groups, v)]
    n_blocks = solver.n_blocks(items)
    budget = opt.cg_budget if len(opt.cg_budget) == n_blocks else [opt.cg_max_iter] * n_blocks
    _, _, args, kwargs = solver.problem(items, v, lam, iterations=budget)
    return args, kwargs


def _call_us(fn, device: torch.device, calls: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean microseconds per call of ``fn`` (synchronised on an accelerator)."""
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    out = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        out.append(1e6 * (time.perf_counter() - start) / calls)
    return statistics.median(out)


def solve_timings(problem, device: torch.device, calls: int, repeats: int) -> dict:
    """The captured solve eager (early stop where the optimizer has it, fixed), compiled, and how far apart."""
    (g, a, v, damping), kwargs = problem
    move = (lambda ts: [t.to(device) for t in ts])
    g, a, v = move(g), move(a), move(v)
    damping = damping.to(device) if isinstance(damping, torch.Tensor) else damping
    kwargs = dict(kwargs, x0=None,  # a cold start: the same work in every repeat
                  preconditioner=[(yg.to(device), ya.to(device)) for yg, ya in kwargs["preconditioner"]])
    budget = max(kwargs["max_iter"]) if isinstance(kwargs["max_iter"], list) else kwargs["max_iter"]
    fixed = dict(kwargs, max_iter=budget, stop_early=False)  # no host read: the fixed budget a compiled graph runs
    out = {"shapes": [list(t.shape) for t in v], "budget": budget}
    reference = block_conjugate_gradient(g, a, v, damping, **kwargs)
    out["iterations_used"] = int(reference.iterations.max())
    out["eager_us"] = _call_us(lambda: block_conjugate_gradient(g, a, v, damping, **kwargs), device, calls, repeats)
    out["eager_fixed_us"] = _call_us(lambda: block_conjugate_gradient(g, a, v, damping, **fixed), device, calls,
                                     repeats)
    modes = ["default"] + (["reduce-overhead"] if device.type == "cuda" else [])
    for mode in modes:
        torch._dynamo.reset()
        compiled = torch.compile(block_conjugate_gradient, fullgraph=True, dynamic=False, mode=mode)
        start = time.perf_counter()
        for _ in range(3):  # CUDA graphs record on a later call than the first
            result = compiled(g, a, v, damping, **fixed)
        out[f"compile_s[{mode}]"] = time.perf_counter() - start
        out[f"compiled_us[{mode}]"] = _call_us(lambda: compiled(g, a, v, damping, **fixed), device, calls, repeats)
        out[f"compiled_vs_eager_max_relative_difference[{mode}]"] = max(
            float((x - y).abs().max() / y.abs().max().clamp_min(1e-30)) for x, y in zip(result.solution,
                                                                                        reference.solution))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--steps", type=int, default=40, help="timed steps per repeat (a multiple of 20)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--calls", type=int, default=100, help="solve calls per timing repeat")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="where the solve timings run (the step timings are the CPU's)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch._inductor.config.force_disable_caches = True  # compile times from scratch, not from an earlier run's cache
    import warnings
    warnings.filterwarnings("ignore", message="K-FAC preconditions")  # the transformer's positions: expected
    device = torch.device(args.device)
    kfac = counts.OPTIMIZERS["cg, defaults"]
    adamw = counts.OPTIMIZERS["adamw (foreach)"]
    header = ("| problem | AdamW ms/step | K-FAC ms/step | solve ms/step (in the step) | time / AdamW | "
              "solve compiled: time / AdamW | solve free: time / AdamW |")
    lines = [header, "|---" * 7 + "|"]
    steps, captured = {}, {}
    for problem in PROBLEMS:  # every step timing before any compilation (a compiled process runs slower eager code)
        steps[problem] = []
        for _ in range(args.repeats):  # interleaved: a transient load moves one repeat, not the ratio
            base, _, _ = _step_ms(adamw, problem, args.seed, args.warmup, args.steps)
            step, solve, opt = _step_ms(kfac, problem, args.seed, args.warmup, args.steps)
            steps[problem].append((base, step, solve))
        captured[problem] = cg_problem(opt)
    solves = {problem: solve_timings(captured[problem], device, args.calls, args.repeats) for problem in PROBLEMS}
    for problem, rows in steps.items():
        t = solves[problem]
        fused = t["compiled_us[default]"] / t["eager_us"]
        base, step, solve = (statistics.median(r[i] for r in rows) for i in range(3))
        compiled_ratio = statistics.median((s - sv * (1 - fused)) / b for b, s, sv in rows)
        free_ratio = statistics.median((s - sv) / b for b, s, sv in rows)
        ratio = statistics.median(s / b for b, s, _ in rows)
        lines.append(f"| {problem} | {base:.2f} | {step:.2f} | {solve:.2f} | {ratio:.2f} | {compiled_ratio:.2f} | "
                     f"{free_ratio:.2f} |")
        print(lines[-1], flush=True)
    graphs = device.type == "cuda"
    lines += ["", f"Solve timings on {device} (us per call, median of {args.repeats} x {args.calls} calls; "
              "cold start):", "",
              "| problem | systems (k, out, in) per block | iterations used / budget | eager | eager, fixed budget | "
              "compiled | compile s | compiled vs eager |" + (" CUDA graphs | graphs s |" if graphs else ""),
              "|---" * (8 + 2 * graphs) + "|"]
    for problem, t in solves.items():
        row = (f"| {problem} | {t['shapes']} | {t['iterations_used']} / {t['budget']} | {t['eager_us']:.0f} | "
               f"{t['eager_fixed_us']:.0f} | {t['compiled_us[default]']:.0f} | {t['compile_s[default]']:.1f} | "
               f"{t['compiled_us[default]'] / t['eager_us']:.2f}x (max relative difference "
               f"{t['compiled_vs_eager_max_relative_difference[default]']:.1e}) |")
        if graphs:
            row += f" {t['compiled_us[reduce-overhead]']:.0f} | {t['compile_s[reduce-overhead]']:.1f} |"
        lines.append(row)
    print("\n".join(lines[-(len(solves) + 4):]), flush=True)
    if args.out is not None:
        given = argv if argv is not None else sys.argv[1:]
        command = " ".join(["PYTHONPATH=src python benchmarks/kfac_compiled_cg.py", *given])
        args.out.write_text("# The iterative K-FAC's solve fused (benchmarks/kfac_compiled_cg.py)\n\n"
                            f"Command: `{command}` (torch {torch.__version__}, 1 thread; times move with the machine).\n"
                            f"Step times: thread ms per training step of the README snippet (median of {args.repeats} "
                            "interleaved repeats; ratios per repeat).\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
