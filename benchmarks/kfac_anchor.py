"""Side-by-side anchor: gpauloski/kfac-pytorch beside both of our K-FAC variants and AdamW on the default vit-pre.

    # kfac-pytorch is installed for this benchmark only (never a dependency of the project or its tests):
    git --git-dir=<fetched github:gpauloski/kfac-pytorch> archive HEAD | tar -x -C /tmp/kfac-pytorch
    pip install --no-deps --target /tmp/kfac_site /tmp/kfac-pytorch
    PYTHONPATH=/tmp/kfac_site:src OMP_NUM_THREADS=1 nice python benchmarks/kfac_anchor.py --workers 2

Protocol (one run, same seeds for every optimizer; the tuning's own machinery, brownformer.tuning):
- model vit-pre of the config, its steps, batch, schedule and clipping; evaluation every 5 steps on the
  whole validation split; target ``report.targets["vit-pre"]``; a seed run stops at the target;
- every optimizer tried on the same number of settings, all seeds each: the three K-FACs on the same
  lr x damping grid (``--kfac-lrs`` x ``--dampings``), AdamW on as many learning rates (``--adamw-lrs``);
  every setting runs all its seeds (one parallel job per optimizer and setting; the table is rewritten as each ends);
- the chosen setting per optimizer is the one with the smallest restricted mean steps to the target
  over the seeds (brownformer.tuning.search.outcome_of), then its per-seed steps, Kaplan-Meier median
  and the time ratio to AdamW and to kfac-pytorch: the AFT log-rank point estimate inside that test's inverted
  interval (stats/comparison/survival.py).
  Tuned and measured on the same seeds: the selection bias is the same for every optimizer.
- ``--tuned`` (claim 4's protocol): ours and AdamW at the config's tuned setting, chosen on the tuning
  seeds (100, 101), one setting each; kfac-pytorch at the best of its grid (lr x damping x ``--kl-clips``)
  chosen on the evaluation seeds themselves: the selection bias favours the anchor.

kfac-pytorch runs as its README says: torch.optim.SGD (momentum 0.9) on the parameters of the modules its
KFACPreconditioner registers (KL-clip on, 1e-3; factors every step, decay 0.95; inverses every 10 steps; every
nn.Linear and nn.Conv2d, ``kfac.layers.register``), its lr following the schedule; every other parameter (LayerNorm,
positions, class token) gets torch.optim.AdamW at the lr our K-FAC gives its rest update (``rest_lr`` of the
config's kfac-iterative entry), as ours does: with SGD on them a ViT stays near chance (issue 11), which would
handicap the anchor. Its damping is searched on its own grid (``--library-dampings``), not ours: its ``G`` is the
mean of ``g g^T`` over the batch's rows for the mean loss, ours ``B sum g g^T`` (``_kfac_math.output_factor``), so
its curvature is ours / (B^2 T_l), T_l the rows per example of layer l (the token count in a block, 1 at the pooled
head): no single damping converts across layers. The table says when its chosen damping or lr is at an edge of its
grid (then the grid should be widened). Ours run with the config's K-FAC settings and the grid's lr and damping.
Writes OUT (markdown) and OUT with suffix .json.
"""
from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import yaml

from brownformer.config import from_dict
from brownformer.io import to_jsonable
from brownformer.stats.comparison.survival import km_median, median_ratio
from brownformer.tuning.run import dataset_dir
from brownformer.tuning.trial import run_trial

LIBRARY = "kfac-pytorch"
KL_CLIP, FACTOR_DECAY, INVERSE_EVERY, MOMENTUM = 1e-3, 0.95, 10, 0.9  # kfac-pytorch's defaults / author's code
REST_LR = 0.009  # replaced in main() by the config's kfac-iterative rest_lr (the rest update ours gets)
# kfac-pytorch's own damping grid: a decade either side of its default 1e-3, in its units (module docstring)
LIBRARY_DAMPINGS = (1e-4, 1e-3, 1e-2)


def split_registered(model, types: tuple) -> tuple[list, list]:
    """The trainable parameters of the modules of ``types`` (kfac.layers.register's rule: every module of
    those types), and every other trainable parameter, each in ``model.parameters()`` order."""
    registered = {id(p) for m in model.modules() if isinstance(m, types) for p in m.parameters()}
    params = [p for p in model.parameters() if p.requires_grad]
    return [p for p in params if id(p) in registered], [p for p in params if id(p) not in registered]


class KfacPytorchSGD:
    """kfac-pytorch's KFACPreconditioner with SGD (momentum) on its layers and AdamW on the rest (a duck-typed torch
    optimizer; the schedule scales every group's ``initial_lr``).

    ``bounds_its_step``: its KL-clip bounds the step, so the training step does not clip its gradients
    (as for our K-FAC: a clip before preconditioning would become part of the step rule)."""

    bounds_its_step = True

    def __init__(self, model, lr: float, damping: float, kl_clip: float = KL_CLIP, rest_lr: float = REST_LR):
        import torch
        from kfac.layers.register import CONV2D_TYPES, LINEAR_TYPES
        from kfac.preconditioner import KFACPreconditioner

        registered, rest = split_registered(model, LINEAR_TYPES + CONV2D_TYPES)
        self.sgd = torch.optim.SGD(registered, lr=lr, momentum=MOMENTUM)
        self.adamw = torch.optim.AdamW(rest, lr=rest_lr, weight_decay=0.0) if rest else None
        self.param_groups = self.sgd.param_groups + (self.adamw.param_groups if self.adamw else [])
        for group in self.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.preconditioner = KFACPreconditioner(
            model, lr=lambda _: self.sgd.param_groups[0]["lr"], damping=damping, kl_clip=kl_clip,
            factor_decay=FACTOR_DECAY, factor_update_steps=1, inv_update_steps=INVERSE_EVERY)

    @property
    def state(self):
        return {**self.sgd.state, **(self.adamw.state if self.adamw else {})}

    def step(self, closure=None):
        self.preconditioner.step()
        self.sgd.step()
        if self.adamw:
            self.adamw.step()

    def zero_grad(self, set_to_none: bool = True):
        self.sgd.zero_grad(set_to_none=set_to_none)
        if self.adamw:
            self.adamw.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return {"sgd": self.sgd.state_dict(), "adamw": self.adamw.state_dict() if self.adamw else None}

    def load_state_dict(self, state):
        self.sgd.load_state_dict(state["sgd"])
        if self.adamw:
            self.adamw.load_state_dict(state["adamw"])


def _use_kfac_pytorch(damping: float | None, kl_clip: float = KL_CLIP, rest_lr: float = REST_LR) -> None:
    """Make brownformer.train build KfacPytorchSGD (``damping`` given) or the registry's optimizers (None)."""
    import brownformer.train as train
    from brownformer.optim import build_optimizer

    def build(model, type, lr, params):
        return KfacPytorchSGD(model, lr, damping, kl_clip, rest_lr)
    train.build_optimizer = build_optimizer if damping is None else build


def trial(raw: dict, model: str, optimizer: str, settings: dict, seeds: list[int], data_dir: str, target: float,
          eval_every: int) -> dict:
    """Every seed of one setting of one optimizer, each seed run stopped at the target."""
    # a worker runs several optimizers
    _use_kfac_pytorch(settings["damping"] if optimizer == LIBRARY else None, settings.get("kl_clip", KL_CLIP),
                      settings.get("rest_lr", REST_LR))
    config_settings = {"lr": settings["lr"]} if optimizer == LIBRARY else settings
    t0 = time.perf_counter()
    outcome = run_trial(raw, model, optimizer, config_settings, seeds, data_dir, target=target,
                        eval_every=eval_every, incumbent=None)
    return {"settings": settings, "outcome": outcome, "seconds": time.perf_counter() - t0}


def _job(args):
    optimizer, index, *rest = args
    return optimizer, index, trial(rest[0], rest[1], optimizer, *rest[2:])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--model", default="vit-pre", help="a model of the config with a report.targets entry (default "
                   "vit-pre, claim 4's); kfac-pytorch and the grids are built for the ViTs")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--kfac-lrs", nargs="+", type=float, default=[0.03, 0.1])
    p.add_argument("--dampings", nargs="+", type=float, default=[0.003, 0.03])
    p.add_argument("--kl-clips", nargs="+", type=float, default=[KL_CLIP],
                   help="kfac-pytorch only: its KL-clip grid (lr x damping x kl_clip; more settings than ours "
                        "make the anchor stronger, i.e. the comparison harder for our K-FAC)")
    p.add_argument("--library-dampings", nargs="+", type=float, default=list(LIBRARY_DAMPINGS),
                   help="kfac-pytorch only: its damping grid, in its own units (the module docstring)")
    p.add_argument("--adamw-lrs", nargs="+", type=float, default=[0.003, 0.006, 0.009, 0.018])
    p.add_argument("--optimizers", nargs="+", default=["kfac-pytorch", "kfac-iterative", "kfac-eigen", "adamw"],
                   help="a subset of the four (the default: all)")
    p.add_argument("--tuned", action="store_true",
                   help="ours and AdamW at the config's tuned setting (chosen on the tuning seeds, as claim 4 runs "
                        "them), kfac-pytorch at the best of its grid on the evaluation seeds (a selection bias in "
                        "the anchor's favour)")
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--data-root", default="results/data")
    p.add_argument("--out", default="benchmarks/results/kfac_anchor.md")
    args = p.parse_args(argv)
    if LIBRARY in args.optimizers:
        import kfac  # noqa: F401  (fails here, before any training, when kfac-pytorch is not installed)
    import logging
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")

    raw = yaml.safe_load(Path(args.config).read_text())
    raw.pop("tuning", None)
    raw["optimizers"][LIBRARY] = {"type": "sgd", "lr": args.kfac_lrs[0], "momentum": MOMENTUM}
    cfg = from_dict(raw)
    rest_lr = cfg.optimizer_for(args.model, "kfac-iterative").params.get("rest_lr") or REST_LR
    if args.model not in cfg.report.targets:
        raise SystemExit(f"--model {args.model!r}: no report.targets entry in {args.config} (known: "
                         f"{sorted(cfg.report.targets)})")
    target = float(cfg.report.targets[args.model])
    data_dir = dataset_dir(cfg, args.model, Path(args.data_root))
    kfac_grid = [{"lr": lr, "damping": d} for lr, d in itertools.product(args.kfac_lrs, args.dampings)]
    grids = {"adamw": [{"lr": lr} for lr in args.adamw_lrs], "kfac-iterative": kfac_grid, "kfac-eigen": kfac_grid,
             LIBRARY: [{"lr": lr, "damping": d, "kl_clip": kl, "rest_lr": rest_lr} for lr, d, kl in
                       itertools.product(args.kfac_lrs, args.library_dampings, args.kl_clips)]}
    if args.tuned:  # one setting each: the tuned block's (shown in the table by its values)
        grids.update({o: [_tuned_settings(cfg, args.model, o)] for o in grids if o != LIBRARY})
    grids = {o: grids[o] for o in args.optimizers}
    if not args.tuned and len({len(g) for o, g in grids.items() if o != LIBRARY}) > 1:
        raise SystemExit("every optimizer gets the same number of settings: give as many AdamW lrs as K-FAC settings")
    t0 = time.perf_counter()
    # one job per (optimizer, setting), K-FACs first (the longest jobs start first); every setting runs all its
    # seeds (no early stop against an incumbent), so the jobs are independent and the table is written as each ends
    jobs = [(o, i, copy.deepcopy(raw), args.model, s, args.seeds, data_dir, target, args.eval_every)
            for o, g in grids.items() for i, s in enumerate(g)]
    done: dict = {o: {} for o in grids}
    with ProcessPoolExecutor(args.workers) as pool:
        for future in as_completed([pool.submit(_job, j) for j in sorted(jobs, key=lambda j: j[0] == "adamw")]):
            o, i, result = future.result()
            done[o][i] = result
            results = {o: [t[i] for i in sorted(t)] for o, t in done.items() if t}
            write(args, results, target, time.perf_counter() - t0, pending=len(jobs) - sum(map(len, done.values())))
    return 0


def _tuned_settings(cfg, model: str, optimizer: str) -> dict:
    """The settings ``optimizer`` trains ``model`` with (the config's tuned block), restricted to the table's knobs."""
    opt = cfg.optimizer_for(model, optimizer)
    return {k: v for k, v in {"lr": opt.lr, **opt.params}.items() if k in ("lr", "damping", "kl_clip", "momentum")}


def _command(args) -> str:
    """The command line that reruns this table (only the options that matter for its optimizers)."""
    ours = [o for o in args.optimizers if o != LIBRARY]
    parts = [("PYTHONPATH=/tmp/kfac_site:src " if LIBRARY in args.optimizers else "PYTHONPATH=src ")
             + "OMP_NUM_THREADS=1 nice python benchmarks/kfac_anchor.py", f"--model {args.model}",
             f"--seeds {' '.join(map(str, args.seeds))}", f"--optimizers {' '.join(args.optimizers)}"]
    if LIBRARY in args.optimizers or (not args.tuned and any(o.startswith("kfac") for o in ours)):
        parts += [f"--kfac-lrs {' '.join(map(str, args.kfac_lrs))}", f"--dampings {' '.join(map(str, args.dampings))}"]
    if LIBRARY in args.optimizers:
        parts.append(f"--library-dampings {' '.join(map(str, args.library_dampings))}")
        parts.append(f"--kl-clips {' '.join(map(str, args.kl_clips))}")
    parts.append("--tuned" if args.tuned else f"--adamw-lrs {' '.join(map(str, args.adamw_lrs))}")
    return " ".join(parts + [f"--workers {args.workers}"])


def _grid_text(args) -> str:
    """What each optimizer was tried at, in words."""
    text = []
    if args.tuned:
        text.append("ours and AdamW at the config's tuned setting (tuning seeds apart)")
        if LIBRARY in args.optimizers:
            text.append(f"kfac-pytorch best of lr {args.kfac_lrs} x damping {args.library_dampings} (its units) x "
                        f"KL-clip {args.kl_clips} on these seeds, AdamW on what it does not register")
    else:
        text.append(f"K-FACs lr {args.kfac_lrs} x damping {args.dampings}"
                    + (f" (kfac-pytorch: damping {args.library_dampings} in its units x KL-clip {args.kl_clips})"
                       if LIBRARY in args.optimizers else "")
                    + f", AdamW lr {args.adamw_lrs}")
    return "; ".join(text) + "."


def at_edge(chosen: dict, grid: list[dict]) -> list[str]:
    """The knobs whose chosen value is the smallest or largest the grid tried (of knobs the grid varies): the
    search did not bracket its winner there."""
    edge = []
    for key, value in chosen.items():
        values = {s[key] for s in grid if key in s}
        if len(values) > 1 and value in (min(values), max(values)):
            edge.append(key)
    return edge


def _chosen(trials: list[dict]) -> dict:
    return min(trials, key=lambda t: t["outcome"].key)


def _times(trial: dict) -> tuple[np.ndarray, np.ndarray]:
    seeds = trial["outcome"].seeds
    reached = np.array([s["reached"] for s in seeds])
    return np.array([s["steps"] if s["reached"] else s["steps_run"] for s in seeds], float), reached


def _num(x: float) -> str:
    return "undefined" if math.isnan(x) else f"{x:.3g}"


def write(args, results: dict, target: float, wall: float, pending: int = 0) -> None:
    rows, every, summary = [], [], {}
    chosen = {o: _chosen(t) for o, t in results.items()}
    for o, trials in results.items():
        for t in trials:
            every.append({"optimizer": o, **t["settings"], "score": t["outcome"].score if t["outcome"].complete
                          else math.nan, "complete": t["outcome"].complete, "seconds": t["seconds"],
                          "per seed": "; ".join(f"s{s['seed']}: " + (f"{s['steps']:g}" if s["reached"] else
                                                f">{s['steps_run']}") for s in t["outcome"].seeds)})
    for o, c in chosen.items():
        times, reached = _times(c)
        row = {"optimizer": o, **{k: c["settings"].get(k) for k in ("lr", "damping", "kl_clip", "momentum")},
               "steps per seed": ", ".join(f"{t:g}" if r else f">{t:g}" for t, r in zip(times, reached)),
               "reached": f"{int(reached.sum())}/{reached.size}", "KM median": km_median(times, reached),
               "at grid edge": ", ".join(at_edge(c["settings"], [t["settings"] for t in results[o]])) or "-",
               "CPU ms/step": 1e3 * float(np.median([s["cpu_seconds"] / max(s["steps_run"], 1)
                                                     for t in results[o] for s in t["outcome"].seeds]))}
        for ref in ("adamw", LIBRARY):
            if o != ref and ref in chosen:
                # the 95% interval the table's header names (a rank-test interval; times on the evaluation grid)
                r = median_ratio((times, reached), _times(chosen[ref]), margin=1.0, confidence_level=0.95,
                                 grid=args.eval_every)
                row[f"/ {ref} [95% CI]"] = (f"{_num(r.estimate)} [{_num(r.confidence_interval[0])}, "
                                            f"{_num(r.confidence_interval[1])}]")
                summary.setdefault(o, {})[ref] = r.to_dict()
        rows.append(row)
    cpu = sum(t["seconds"] for ts in results.values() for t in ts)
    import pandas as pd
    text = "\n".join([
        f"# Side-by-side anchor: {', '.join(args.optimizers)} on the default {args.model}", "",
        f"Command: `{_command(args)}`" + (" (kfac-pytorch installed from its fetched repository for this benchmark "
                                          "only)" if LIBRARY in args.optimizers else "") + ". Protocol: the module docstring.",
        f"Target {target} (report.targets['{args.model}']), evaluation every {args.eval_every} steps, seeds {args.seeds} "
        f"for every optimizer; " + _grid_text(args) + f" Training CPU {cpu:.0f} s ({wall:.0f} s wall, "
        f"{args.workers} workers). A run that never reaches the target within the budget shows as >steps run."
        + (f" PARTIAL: {pending} settings still running when this was written." if pending else ""), "",
        "## Chosen setting per optimizer (restricted mean steps over the seeds), AFT time ratios", "",
        pd.DataFrame(rows).to_markdown(index=False, floatfmt=".4g"), "", "## Every setting", "",
        pd.DataFrame(every).to_markdown(index=False, floatfmt=".4g"), ""])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(to_jsonable({
        "target": target, "seeds": args.seeds, "cpu_seconds": cpu, "wall_seconds": wall,
        "chosen": {o: {"settings": c["settings"], "seeds": list(c["outcome"].seeds)} for o, c in chosen.items()},
        "ratios": summary, "every_setting": every, "pending": pending}), indent=1))
    if not pending:
        print(text)


if __name__ == "__main__":
    sys.exit(main())
