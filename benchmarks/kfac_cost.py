"""Cost of eigen and iterative K-FAC against AdamW (foreach) over widths and token counts: where is CG cheaper?

    PYTHONPATH=src python benchmarks/kfac_cost.py --widths 32 64 128 256 512 --patch-sizes 2 1 \
        --out benchmarks/results/kfac_cost.json

The paper (arXiv 2101.00218) says its CG K-FAC is cheaper than K-FAC in time and memory. Per (width, token
count) this times one training step (forward + backward + optimizer step, closure re-evaluations included) of
AdamW (foreach, as training builds it), eigen K-FAC and iterative K-FAC (no eigendecomposition: CG preconditioned
by Newton-Schulz inverses) on a vit-pre-shaped ViT (2x MLP, width/8 heads, ``--blocks`` blocks) on 8x8 inputs,
patch size 2 (17 tokens) or 1 (65 tokens). K-FAC runs at config/config.yaml's ``optimizers`` settings (the ones
the claims use: factors every 5 steps, eigendecomposition every 10, Levenberg-Marquardt every 5), so each time
is amortised over whole periods (``--steps``, a multiple of 10), and at widths 32 and 64 also at the
constructor's defaults (factors every step). Optimizer state memory from the state tensors. On the CPU the
clock is the thread's CPU time with one thread (a shared machine's waiting is not counted); each setting is
measured ``--repeats`` times interleaved and the medians reported. Writes OUT (JSON) and OUT with suffix .md.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import optimizer_overhead as overhead  # noqa: E402

CONFIG_ROWS = ("adamw", "kfac-eigen (config)", "kfac-iterative (config)")
DEFAULT_ROWS = ("kfac-eigen (factors every step)", "kfac-iterative (factors every step)")
DEFAULT_WIDTHS = (32, 64)  # the targets at the optimizer's defaults are stated at these widths


def _one_setting(width: int, patch: int, names, args, device) -> list[dict]:
    overhead.SHAPE.clear()
    overhead.SHAPE.update(d_model=width, mlp_ratio=2, n_heads=max(1, width // 8), n_layers=args.blocks, patch_size=patch)
    makers = overhead.make_optimizers(10, device)
    if args.cg_max_iter is not None:  # iterative K-FAC with a smaller CG budget cap (truncated harder)
        from brownformer.optim import build_optimizer
        settings, lr = overhead.config_kfac("kfac-iterative")
        makers[f"kfac-iterative (config, cg_max_iter={args.cg_max_iter})"] = \
            lambda m: build_optimizer(m, "kfac-iterative", lr, {**settings, "cg_max_iter": args.cg_max_iter})
    repeats = [[overhead.measure(n, makers[n], device=device, batch_size=args.batch_size, steps=args.steps,
                                 warmup=args.warmup, seed=0) for n in names] for _ in range(args.repeats)]
    for rows in repeats:
        for row in rows:
            row["ratio_to_adamw"] = row["total_ms"] / rows[0]["total_ms"]
    medians = [overhead.median_row([rep[i] for rep in repeats]) for i in range(len(names))]
    tokens = (8 // patch) ** 2 + 1
    return [{**row, "width": width, "tokens": tokens, "repeats": [rep[i]["total_ms"] for rep in repeats]}
            for i, row in enumerate(medians)]


def _markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# K-FAC step cost against AdamW (foreach): `{meta['command']}`\n",
             f"device {meta['device']}, 1 thread, batch {meta['batch_size']}, {meta['blocks']} blocks, steps "
             f"{meta['steps']} timed after {meta['warmup']} (whole factor/inverse periods), median of "
             f"{meta['repeats']} interleaved repeats (thread CPU time), torch {meta['torch']}.\n",
             "| width | tokens | optimizer | step ms (fwd+bwd+opt) | / AdamW | optimizer ms | inverse ms | CG iterations | state MiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v: "" if v is None else f"{v:.3g}"
    for r in rows:
        lines.append(f"| {r['width']} | {r['tokens']} | {r['optimizer']} | {fmt(r['total_ms'])} | {fmt(r['ratio_to_adamw'])} "
                     f"| {fmt(r['step_ms'])} | {fmt(r.get('inverse_ms'))} | {fmt(r.get('cg_iterations_per_layer_step'))} "
                     f"| {fmt(r['state_mib'])} |")
    lines += ["", "## Iterative against eigen (config settings): step time ratio and the crossover", ""]
    lines += ["| width | tokens | iterative / eigen | iterative / AdamW | eigen / AdamW |", "|---|---|---|---|---|"]
    for (w, t), group in _by_setting(rows).items():
        it, ei = group.get("kfac-iterative (config)"), group.get("kfac-eigen (config)")
        if it and ei:
            lines.append(f"| {w} | {t} | {it['total_ms'] / ei['total_ms']:.3g} | {fmt(it['ratio_to_adamw'])} "
                         f"| {fmt(ei['ratio_to_adamw'])} |")
    lines += ["", meta["crossover"], ""]
    return "\n".join(lines) + "\n"


def _by_setting(rows):
    out: dict = {}
    for r in rows:
        out.setdefault((r["width"], r["tokens"]), {})[r["optimizer"]] = r
    return out


def _crossover(rows) -> str:
    """The smallest width from which iterative K-FAC's step is cheaper than eigen's at every larger width, per token count."""
    parts = []
    for tokens in sorted({r["tokens"] for r in rows}):
        ratios = sorted((w, g["kfac-iterative (config)"]["total_ms"] / g["kfac-eigen (config)"]["total_ms"])
                        for (w, t), g in _by_setting(rows).items() if t == tokens
                        and "kfac-iterative (config)" in g and "kfac-eigen (config)" in g)
        cheaper_from = None
        for i, (w, _) in enumerate(ratios):
            if all(r < 1 for _, r in ratios[i:]):
                cheaper_from = w
                break
        desc = ", ".join(f"{w}: {r:.2f}" for w, r in ratios)
        parts.append(f"{tokens} tokens: iterative/eigen by width {desc}; " +
                     (f"iterative is cheaper from width {cheaper_from} on" if cheaper_from is not None
                      else "iterative is never cheaper at the widths measured"))
    return "Crossover (step time, config settings): " + "; ".join(parts) + "."


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--widths", nargs="+", type=int, default=[32, 64, 128, 256, 512])
    p.add_argument("--patch-sizes", nargs="+", type=int, default=[2, 1])
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-width-65-tokens", type=int, default=256, help="the 65-token runs stop at this width (time)")
    p.add_argument("--cg-max-iter", type=int, help="also time iterative K-FAC with this CG budget cap")
    p.add_argument("--no-defaults", action="store_true", help="skip the factors-every-step rows")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/kfac_cost.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    rows = []
    for patch in args.patch_sizes:
        for width in args.widths:
            if patch == 1 and width > args.max_width_65_tokens:
                continue
            names = CONFIG_ROWS + (DEFAULT_ROWS if width in DEFAULT_WIDTHS and not args.no_defaults else ())
            if args.cg_max_iter is not None:
                names += (f"kfac-iterative (config, cg_max_iter={args.cg_max_iter})",)
            rows += _one_setting(width, patch, names, args, device)
            print(width, patch, [(r["optimizer"], round(r["ratio_to_adamw"], 3)) for r in rows[-len(names):]], flush=True)
            _write(rows, args, device, argv)  # after every setting: a stopped study keeps what it measured
    _write(rows, args, device, argv)
    return 0


def _write(rows: list[dict], args, device, argv) -> None:
    meta = {"device": str(device), "batch_size": args.batch_size, "blocks": args.blocks, "steps": args.steps,
            "warmup": args.warmup, "repeats": args.repeats, "torch": torch.__version__, "platform": platform.platform(),
            "command": " ".join(["python benchmarks/kfac_cost.py", *(argv if argv is not None else sys.argv[1:])])}
    meta["crossover"] = _crossover(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(_markdown(rows, meta))


if __name__ == "__main__":
    sys.exit(main())
