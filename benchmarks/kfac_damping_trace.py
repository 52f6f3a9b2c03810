"""Per-step trace of one K-FAC run: what goes wrong first when a damping variant fails to train (issue 33 item 3).

    PYTHONPATH=src python benchmarks/kfac_damping_trace.py --model vit-post --seed 900 --steps 150 \
        --variant relative:0.5+lm-preconditioned --out /tmp/trace.json

Trains one (model, variant, seed) as ``kfac_damping.py`` does (the config's tuned iterative settings, closure and
Levenberg-Marquardt as in training, no probes) and records before every update: the train loss, the group damping,
rho and the KL-clip factor nu of the last step (``last_stats``), and per preconditioned layer its mean Kronecker
eigenvalue ``s_l``, its effective ``lambda_l`` and the norm of its last update ``||dW||`` (and over ``||W||``); the
rest update's (AdamW part's) update norm per parameter; every LayerNorm's mean |gamma|. Writes OUT (json rows) and
prints the first steps of each quantity's largest value.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import load_raw, one_run, prepare_data  # noqa: E402
from kfac_damping import variant_settings  # noqa: E402


def layer_lambdas(opt) -> dict:
    """Each preconditioned layer's ``(s_l, lambda_l)`` from the optimizer's running factors (``KFAC._damping``)."""
    import torch

    scales = {}
    for layer in opt.layers:
        state = opt.state[layer.module.weight]
        if "factor_a" in state:
            scales[layer.name] = float(torch.diagonal(state["factor_a"]).mean()
                                       * torch.diagonal(state["factor_g"]).mean())
    floor = opt.relative_damping_floor * float(np.mean(list(scales.values()))) if scales else 0.0
    out = {}
    for layer in opt.layers:
        if layer.name not in scales:
            continue
        # the layer's param group, found from the public param_groups (per-group damping)
        damping = next(g for g in opt.param_groups if any(p is layer.module.weight for p in g["params"]))["damping"]
        lam = damping * (max(scales[layer.name], floor) if opt.relative_damping else 1.0)
        out[layer.name] = (scales[layer.name], lam)
    return out


def trace(raw: dict, model: str, variant: str, seed: int, data: str, steps: int, eval_every: int) -> dict:
    import torch

    import brownformer.train as train

    built, rows, previous = [], [], {}
    original_build, original_run = train.build_optimizer, train.train_run

    def catching(*args, **kwargs):
        built.append(original_build(*args, **kwargs))
        return built[-1]

    def record(step, model_, lr_sum, lr_sq_sum):
        params = dict(model_.named_parameters())
        now = {n: p.detach().clone() for n, p in params.items()}
        if built and step > 0:
            opt = built[0]
            stats = opt.last_stats
            mine = {layer.module.weight: layer.name for layer in opt.layers}
            names = {id(p): n for n, p in params.items()}
            row = {"step": step, "damping": stats.get("damping"), "rho": stats.get("rho", np.nan),
                   "nu": stats.get("nu", np.nan), "lm_step_fraction": stats.get("lm_step_fraction", np.nan),
                   "layers": {}, "rest": {}, "ln_gamma": {}}
            for name, (scale, lam) in layer_lambdas(opt).items():
                row["layers"][name] = {"s": scale, "lambda": lam}
            for p, name in mine.items():
                pname = names[id(p)]
                d = float((now[pname] - previous[pname]).norm())
                row["layers"].setdefault(name, {}).update({"dw": d, "dw_rel": d / max(float(now[pname].norm()), 1e-30)})
            kept = {names[id(q)] for layer in opt.layers for q in layer.module.parameters()}
            for pname in now:
                if pname not in kept:
                    row["rest"][pname] = float((now[pname] - previous[pname]).norm())
            for mname, module in model_.named_modules():
                if isinstance(module, torch.nn.LayerNorm):
                    row["ln_gamma"][mname] = float(module.weight.detach().abs().mean())
            rows.append(row)
        previous.clear()
        previous.update(now)

    def with_callback(*args, **kwargs):
        return original_run(*args, callbacks=[record], **kwargs)

    train.build_optimizer, train.train_run = catching, with_callback
    try:
        settings, overrides = variant_settings(variant)
        result = one_run(raw, model, "kfac-iterative", seed, settings, data, 1,
                         (f"train.steps={steps}", f"train.eval_every={eval_every}", *overrides))
    finally:
        train.build_optimizer, train.train_run = original_build, original_run
    metrics = result["metrics"]
    loss = dict(zip(metrics["step"], metrics["train_loss"]))
    acc = {s: a for s, a in zip(metrics["step"], metrics["val_accuracy"]) if a == a}
    for row in rows:
        row["train_loss"] = loss.get(row["step"], np.nan)
    return {"model": model, "variant": variant, "seed": seed, "rows": rows, "val_accuracy": acc}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--model", default="vit-post")
    p.add_argument("--seed", type=int, default=900)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--variant", default="relative:0.5+lm-preconditioned")
    p.add_argument("--data-root", default="results/data")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    raw = load_raw(args.config)
    data = prepare_data(raw, args.model, Path(args.data_root))
    out = trace(raw, args.model, args.variant, args.seed, data, args.steps, args.eval_every)
    out["command"] = " ".join(sys.argv)
    Path(args.out).write_text(json.dumps(out) + "\n")
    print(json.dumps(out["val_accuracy"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
