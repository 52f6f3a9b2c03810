"""K-FAC damping over training runs: does it stay within 10x of its start, reach a floor, precondition Q and K,
and does the run train as well as the current damping?

    PYTHONPATH=src python benchmarks/kfac_damping.py --models vit-pre vit-post --seeds 100 101 --steps 400 \
        --variants absolute relative:0.3 --out benchmarks/results/kfac_damping.md

Trains each (model, variant, seed) at the config's tuned iterative K-FAC settings (the ``optimizers:`` entry merged
with ``tuned.<model>.kfac-iterative``; closure and Levenberg-Marquardt as in training) for ``--steps`` steps without
probes, evaluating every ``--eval-every`` steps, and records after every step the damping and, for each attention
Q and K layer, its mean Kronecker eigenvalue ``(tr A / n_A)(tr G / n_G)`` over its ``lambda`` (with
``relative_damping`` that ratio is ``1 / damping``). Variants: ``absolute`` (one ``lambda`` for every layer, the
tuned damping) and ``relative:C[/F]`` (``relative_damping: true`` starting at ``damping = C``, each layer's
``lambda = C x`` its mean eigenvalue, floored at ``F`` (``relative_damping_floor``) x the layers' mean). Per run also the final validation accuracy and the steps to claim 4's target
(``report.targets``, read on the running median as claim 4 reads it; censored at the budget), so a damping is
compared with the current one on the same seeds. Writes OUT (markdown) and OUT with suffix .json (the series).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import base_parser, load_raw, prepare_data, run_jobs  # noqa: E402

ABSOLUTE, RELATIVE, LM_PRECONDITIONED, TRUST = "absolute", "relative", "lm-preconditioned", "trust"
from brownformer.optim._kfac_control import DAMPING_MAX as CEILING, DAMPING_MIN as FLOOR  # noqa: E402
QK_STEP = 50  # the check: Q/K mean eigenvalue / lambda >= 1 by this step


def variant_settings(variant: str) -> tuple[dict, tuple[str, ...]]:
    """``(tuned settings, config overrides)`` of a variant: ``absolute`` or ``relative:C[/F]``, optionally followed by
    ``+lm-preconditioned`` (``lm_scope: preconditioned``: the reduction ratio of the preconditioned part only) and
    ``+trust:T`` (``layer_step_bound: T``: each layer's step at most T times its parameters' norm).

    Raises:
        ValueError: any other name, or a ``C`` or ``T`` that is not a positive number."""
    damping, *suffixes = variant.split("+")
    overrides = ()
    for suffix in suffixes:
        kind, _, bound = suffix.partition(":")
        if suffix == LM_PRECONDITIONED:
            overrides += ("optimizers.kfac-iterative.lm_scope=preconditioned",)
        elif kind == TRUST and _positive(bound):
            overrides += (f"optimizers.kfac-iterative.layer_step_bound={float(bound):.12f}".rstrip("0"),)
        else:
            raise ValueError(f"a variant's suffixes are '+{LM_PRECONDITIONED}' and '+{TRUST}:T' (T > 0), "
                             f"got {variant!r}")
    if damping == ABSOLUTE:
        return {}, overrides
    kind, _, start = damping.partition(":")
    start, _, floor = start.partition("/")
    try:
        value, floor_value = float(start), float(floor) if floor else None
    except ValueError:
        value, floor_value = float("nan"), None
    if kind != RELATIVE or not value > 0 or (floor_value is not None and not floor_value >= 0):
        raise ValueError(f"a variant is {ABSOLUTE!r} or '{RELATIVE}:C[/F]' with C > 0 (the starting relative damping) "
                         f"and F >= 0 (its floor, relative_damping_floor), got {variant!r}")
    if floor_value is not None:
        # positional digits: YAML reads "1e-05" as a string
        overrides = (f"optimizers.kfac-iterative.relative_damping_floor={floor_value:.12f}".rstrip("0"), *overrides)
    return {"damping": value}, ("optimizers.kfac-iterative.relative_damping=true", *overrides)


def _positive(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def steps_to_target(metrics: pd.DataFrame, target: float) -> float:
    """First evaluated step whose running median (claim 4's reading, ``target_stop.smoothed``) reaches ``target``;
    inf when none does."""
    from brownformer.target_stop import smoothed

    evals = metrics.dropna(subset=["val_accuracy"]).sort_values("step")
    hit = evals["step"][(smoothed(evals["val_accuracy"]) >= target).to_numpy()]
    return float(hit.iloc[0]) if len(hit) else float("inf")


def _series(raw, model, variant, seed, data, steps, eval_every, stop_at_target=False):
    """One run; the optimizer is caught when train_run builds it, and read by a callback every step."""
    import torch

    import brownformer.train as train
    from _runs import one_run

    built = []
    original = train.build_optimizer

    def catching(*args, **kwargs):
        built.append(original(*args, **kwargs))
        return built[-1]

    rows = []

    def record(step, model_, lr_sum, lr_sq_sum):
        if not built or step == 0:
            return
        opt = built[0]
        stats = opt.last_stats
        scales = {}  # every layer's mean Kronecker eigenvalue (the relative damping's floor is over all of them)
        for layer in opt.layers:
            state = opt.state[layer.module.weight]
            if "factor_a" in state:
                scales[layer.name] = float(torch.diagonal(state["factor_a"]).mean()
                                           * torch.diagonal(state["factor_g"]).mean())
        floor = opt.relative_damping_floor * float(np.mean(list(scales.values()))) if scales else 0.0
        ratios = []
        for layer in opt.layers:
            if layer.name.rpartition(".")[2] not in ("q", "k") or layer.name not in scales:
                continue
            scale = scales[layer.name]
            group = next(g for g in opt.param_groups if any(p is layer.module.weight for p in g["params"]))
            lam = group["damping"] * (max(scale, floor) if opt.relative_damping else 1.0)
            ratios.append(scale / lam)
        rows.append({"step": step, "damping": stats["damping"], "qk_ratio_min": min(ratios, default=np.nan),
                     "qk_ratio_mean": float(np.mean(ratios)) if ratios else np.nan, "rho": stats.get("rho", np.nan),
                     "layer_step_factor_min": stats.get("layer_step_factor_min", np.nan)})

    original_train_run = train.train_run

    def with_callback(*args, **kwargs):
        return original_train_run(*args, callbacks=[record], **kwargs)
    train.build_optimizer, train.train_run = catching, with_callback
    try:
        settings, overrides = variant_settings(variant)
        if stop_at_target:  # claim 4's metrics-only runs: stopped at their first evaluation on the target
            overrides += (f"grid=[{{models: [{model}], optimizers: [kfac-iterative], probes: false, "
                          f"stop_at_target: true}}]",)
        result = one_run(raw, model, "kfac-iterative", seed, settings, data, 1,
                         (f"train.steps={steps}", f"train.eval_every={eval_every}", *overrides))
    finally:
        train.build_optimizer, train.train_run = original, original_train_run
    metrics = pd.DataFrame(result["metrics"])
    final = metrics.dropna(subset=["val_accuracy"]).iloc[-1]
    return {"model": model, "variant": variant, "seed": seed, "series": rows,
            "final_val_accuracy": float(final["val_accuracy"]), "finite": result["finite"],
            "steps_to_target": steps_to_target(metrics, float(raw["report"]["targets"][model]))}


def _rounded(value):
    """``value`` (nested lists and dicts) with every float to 4 significant digits."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _summary(run: dict) -> dict:
    s = pd.DataFrame(run["series"])
    start = s["damping"].iloc[0]
    at = s[s["step"] <= QK_STEP].iloc[-1]
    return {"model": run["model"], "variant": run["variant"], "seed": run["seed"], "damping_start": start,
            "damping_min": s["damping"].min(), "damping_max": s["damping"].max(),
            "within_10x": bool(s["damping"].max() <= 10 * start and s["damping"].min() >= start / 10),
            "hit_floor": bool(s["damping"].min() <= FLOOR * 1.0001), "hit_ceiling": bool(s["damping"].max() >= CEILING),
            # steps on which layer_step_bound shortened some layer's step, and the most it shortened one
            "trust_binding_fraction": float((s["layer_step_factor_min"] < 1).mean()),
            "trust_factor_min": s["layer_step_factor_min"].min(),
            f"qk_ratio_min_at_{QK_STEP}": at["qk_ratio_min"], f"qk_ratio_mean_at_{QK_STEP}": at["qk_ratio_mean"],
            "final_val_accuracy": run["final_val_accuracy"], "steps_to_target": run["steps_to_target"],
            "finite": run["finite"]}


def per_variant(table: pd.DataFrame) -> pd.DataFrame:
    """Per (model, variant), over its seeds: the median steps to the target (inf when half or more miss it) and how
    many reach it, the damping's widest range against its start, floor and ceiling hits, and the Q/K columns' range."""
    rows = []
    for (model, variant), g in table.groupby(["model", "variant"], sort=False):
        spread = np.maximum(g["damping_max"] / g["damping_start"], g["damping_start"] / g["damping_min"])
        rows.append({"model": model, "variant": variant, "seeds": len(g),
                     "median_steps_to_target": float(np.median(g["steps_to_target"])),
                     "reached": int(np.isfinite(g["steps_to_target"]).sum()),
                     "damping_range_max": float(spread.max()), "within_10x": int(g["within_10x"].sum()),
                     "floor_hits": int(g["hit_floor"].sum()), "ceiling_hits": int(g["hit_ceiling"].sum()),
                     f"qk_mean_at_{QK_STEP}_min": g[f"qk_ratio_mean_at_{QK_STEP}"].min(),
                     f"qk_min_at_{QK_STEP}_min": g[f"qk_ratio_min_at_{QK_STEP}"].min()})
    return pd.DataFrame(rows)


def write_markdown(out: Path, runs: list[dict], command: str, *, steps: int, config: str) -> pd.DataFrame:
    """OUT: the per-variant summary and the per-run table; returns the per-run table."""
    table = pd.DataFrame([_summary(r) for r in runs])
    lines = [f"# K-FAC damping over {steps}-step runs at the tuned iterative settings ({config})\n",
             f"Command: `{command}`. Per run: the damping's range against its start (within 10x?), whether "
             f"it reached the floor {FLOOR:g} or the ceiling {CEILING:g}, the share of steps on which `layer_step_bound` "
             f"shortened a layer's step and the most it shortened one, the Q/K layers' mean Kronecker eigenvalue / "
             f"lambda at step {QK_STEP} (min and mean over the Q and K layers), the final validation accuracy and the "
             f"steps to claim 4's target (inf: not reached in the budget). Series: the .json beside this file.\n",
             "## Per variant\n", per_variant(table).to_markdown(index=False, floatfmt=".3g"), "",
             "## Per run\n", table.to_markdown(index=False, floatfmt=".3g"), ""]
    out.write_text("\n".join(lines) + "\n")
    return table


def main(argv=None) -> int:
    p = base_parser(__doc__.splitlines()[0], seeds=[100, 101], out="benchmarks/results/kfac_damping.md")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--variants", nargs="+", default=[ABSOLUTE, f"{RELATIVE}:0.3"],
                   help=f"{ABSOLUTE!r} (the tuned damping) or '{RELATIVE}:C' (relative damping starting at C)")
    p.add_argument("--stop-at-target", action="store_true",
                   help="stop each run at its first evaluation on claim 4's target (report.targets), as claim 4's runs")
    args = p.parse_args(argv)
    raw = load_raw(args.config)
    models = args.models or ["vit-pre", "vit-post"]
    data = {m: prepare_data(raw, m, Path(args.data_root)) for m in models}
    for v in args.variants:
        variant_settings(v)  # a bad name fails before any training
    jobs = [(raw, m, v, s, data[m], args.steps, args.eval_every, args.stop_at_target) for m in models for v in args.variants
            for s in args.seeds]
    runs = run_jobs(jobs, args.workers, fn=_series)
    command = " ".join(sys.argv)
    out = Path(args.out)
    # compact, 4 significant digits: the series of 32 runs stay well under 1 MB
    out.with_suffix(".json").write_text(json.dumps(_rounded({"command": command, "runs": runs}),
                                                   separators=(",", ":")) + "\n")
    table = write_markdown(out, runs, command, steps=args.steps, config=args.config)
    print(table.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
