"""Stability of the K-FAC variants: non-finite runs over seeds x learning rates, on every model.

    python benchmarks/stability_sweep.py --config config/config.yaml --workers 2 --out benchmarks/results

Issue 11's target: 0 non-finite runs over 5 seeds x 3 learning rates for each K-FAC variant, on every
model variant. For each model of the config's grid (``--models``), each optimizer of the config whose
type is a K-FAC variant (``--optimizers``), each learning rate = the model's tuned lr
(``ExperimentConfig.optimizer_for``: the ``tuned:`` block, else the optimizer's own) x ``--lr-factors``,
and each seed: train without probes for the model's steps (``--steps`` overrides every model's).

Per run: the final training loss; whether a logged training loss (the step's or the log window's
mean) or an evaluated validation loss/metric was NaN or inf, and the first logged step where one was;
the optimizer's counters at the end (every ``opt_*_total`` of the metrics row, e.g. CG fallbacks,
skipped steps, dropped factors, preconditioning skipped: K-FAC creates a counter when it first fires,
so an absent one never fired), its damping at the end and at most; the final validation metric; and
whether the run "did not train" (brownformer.stats.core.training_status, against the val split's chance
level). A run that raises is recorded with its error and counted apart.

Writes OUT/stability.json (settings, date, torch version, every run) and OUT/stability.md.
"""
from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import KFAC, base_parser, grid_pairs, load_raw, model_steps, one_run, prepare_data, run_cost, run_jobs  # noqa: E402

from brownformer.config import from_dict  # noqa: E402
from brownformer.io import to_jsonable  # noqa: E402
from brownformer.metrics import val_metric  # noqa: E402
from brownformer.stats.core.training_status import training_status  # noqa: E402
from brownformer.stats_stage.chance_baseline import chance_baseline  # noqa: E402

log = logging.getLogger("stability_sweep")
LR_FACTORS = [1 / 3, 1.0, 3.0]
SEEDS = [0, 1, 2, 3, 4]
TRAIN_LOSSES = ("train_loss", "train_loss_mean")


def plan(raw: dict, models: list[str], optimizers: list[str], args) -> list[dict]:
    """One entry per run: model, optimizer, lr factor, the lr and damping it trains with, seed, steps."""
    cfg = from_dict(raw)
    runs = []
    for model in models:
        steps = args.steps or model_steps(raw, model)
        for optimizer in optimizers:
            tuned = cfg.optimizer_for(model, optimizer)
            own = cfg.tuned_for(model, optimizer)
            source = "tuned" if own is not None and own.lr is not None else "optimizer"
            for factor in args.lr_factors:
                runs += [{"model": model, "optimizer": optimizer, "lr_factor": factor, "lr": tuned.lr * factor,
                          "base_lr": tuned.lr, "base_lr_source": source, "damping": tuned.params.get("damping"),
                          "seed": seed, "steps": steps} for seed in args.seeds]
    return runs


def guarded_run(*job) -> dict:
    """``one_run`` that returns a run's exception instead of ending the sweep (a crash is an outcome here)."""
    try:
        return one_run(*job)
    except Exception as exc:  # noqa: BLE001 -- any failure of one run is recorded, the others go on
        return {"error": f"{type(exc).__name__}: {exc}"}


def evaluated(metrics: pd.DataFrame, eval_every: int, steps: int) -> pd.Series:
    """Rows where train.py evaluated (every eval_every steps and the last): there a NaN val value is a
    diverged evaluation, elsewhere it only means "not evaluated"."""
    return (metrics["step"] % eval_every == 0) | (metrics["step"] == steps)


def first_nonfinite(metrics: pd.DataFrame, eval_every: int, steps: int) -> dict:
    """Whether a logged train loss / an evaluated val value was non-finite, and the first such step."""
    train_bad = ~np.isfinite(metrics[[c for c in TRAIN_LOSSES if c in metrics]].to_numpy(float)).all(axis=1)
    try:
        val_columns = list(dict.fromkeys(["val_loss", val_metric(metrics).column]))
    except ValueError:  # never a finite evaluation: val_loss alone says whether it was NaN
        val_columns = ["val_loss"]
    val_bad = evaluated(metrics, eval_every, steps).to_numpy() & ~np.isfinite(
        metrics[val_columns].to_numpy(float)).all(axis=1)
    either = train_bad | val_bad
    return {"nonfinite_train": bool(train_bad.any()), "nonfinite_val": bool(val_bad.any()),
            "nonfinite": bool(either.any()),
            "first_nonfinite_step": int(metrics.loc[either, "step"].min()) if either.any() else None}


def optimizer_counters(metrics: pd.DataFrame) -> dict:
    """The optimizer's cumulative counters (``opt_*_total`` except timers) at the end, and its damping."""
    last = metrics.iloc[-1]
    out = {c: float(last[c]) for c in metrics if c.startswith("opt_") and c.endswith("_total")
           and not c.startswith("opt_time_")}
    if "opt_damping" in metrics:
        out["opt_damping_final"] = float(last["opt_damping"])
        out["opt_damping_max"] = float(metrics["opt_damping"].max())
    return out


def summarize(run: dict, result: dict, baseline, eval_every: int) -> dict:
    """One row of stability.json from a planned run and what training returned."""
    if "error" in result:
        return {**run, "error": result["error"], "final_train_loss": None, "nonfinite_train": None,
                "nonfinite_val": None, "nonfinite": None, "first_nonfinite_step": None, "metric": None,
                "final": None, "did_not_train": True, "did_not_train_reason": f"crashed: {result['error']}",
                "seconds": None}
    metrics = pd.DataFrame(result["metrics"])
    status = training_status(metrics, baseline)
    return {**run, "error": None, "final_train_loss": float(metrics["train_loss"].iloc[-1]),
            **first_nonfinite(metrics, eval_every, run["steps"]), **optimizer_counters(metrics),
            "metric": status.metric, "final": status.final, "did_not_train": status.did_not_train,
            "did_not_train_reason": status.reason, "seconds": float(metrics["wall_time"].iloc[-1])}


def model_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (optimizer, lr factor) of one model: non-finite, did-not-train and crashed counts over seeds,
    the median final val metric, and the optimizer's counters summed over seeds (blank: no run had one)."""
    counters = [c for c in rows if c.startswith("opt_") and c.endswith("_total") and rows[c].notna().any()]
    metric = rows["metric"].dropna().iat[0] if rows["metric"].notna().any() else "final"
    g = rows.groupby(["optimizer", "lr_factor"], sort=False)
    runs = g.size().astype(str)
    table = pd.DataFrame({
        "lr": g["lr"].first(),
        "non_finite": g["nonfinite"].apply(lambda s: int(s.eq(True).sum())).astype(str) + "/" + runs,
        "did_not_train": g["did_not_train"].apply(lambda s: int(s.eq(True).sum())).astype(str) + "/" + runs,
        "crashed": g["error"].apply(lambda s: int(s.notna().sum())),
        f"median_{metric}": g["final"].median(),
        "first_nonfinite_step": g["first_nonfinite_step"].min().map(lambda v: "" if pd.isna(v) else str(int(v))),
        **{c.removeprefix("opt_"): g[c].sum(min_count=1) for c in counters},
        **({"damping_max": g["opt_damping_max"].max()} if "opt_damping_max" in rows else {}),
    })
    return table.reset_index()


def markdown(rows: pd.DataFrame, settings: dict) -> str:
    """A table per model and one summary line per K-FAC variant."""
    lines = [f"# K-FAC stability sweep ({settings['config']}), {settings['date']}\n",
             f"Issue 11 target: 0 non-finite runs over {len(settings['seeds'])} seeds x {len(settings['lr_factors'])} "
             f"learning rates per K-FAC variant on every model. Seeds {settings['seeds']}; lr = the model's tuned lr x "
             f"{[round(f, 4) for f in settings['lr_factors']]}; steps: {settings['steps_note']}; no probes; "
             f"torch {settings['torch']}. Non-finite: a logged training loss or an evaluated validation value was "
             "NaN/inf. Did not train: brownformer.stats.core.training_status (diverged, crashed, or at the val split's "
             "chance level). Counters: summed over seeds; damping_max: the largest damping any seed reached.\n"]
    for model, g in rows.groupby("model", sort=False):
        table = model_table(g).to_markdown(index=False, floatfmt=".4g")
        lines += [f"## {model} ({int(g['steps'].iat[0])} steps)\n", table, ""]
    lines.append("## Summary\n")
    for optimizer, g in rows.groupby("optimizer", sort=False):
        lines.append(f"- {optimizer}: {int(g['nonfinite'].eq(True).sum())} non-finite runs of {len(g)} "
                     f"({int(g['error'].notna().sum())} crashed, {int(g['did_not_train'].eq(True).sum())} did not "
                     f"train) on {g['model'].nunique()} models")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = base_parser(__doc__.splitlines()[0], seeds=SEEDS, out="benchmarks/results")
    p.add_argument("--lr-factors", nargs="+", type=float, default=LR_FACTORS,
                   help="multiples of each model's tuned lr (default 1/3 1 3)")
    p.add_argument("--steps", type=int, help="train every model this many steps (default: each model's own)")
    args = p.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    raw = load_raw(args.config)
    models = args.models or list(dict.fromkeys(m for m, _ in grid_pairs(raw)))
    optimizers = args.optimizers or [name for name, o in raw["optimizers"].items() if o["type"] in KFAC]
    runs = plan(raw, models, optimizers, args)
    data = {m: prepare_data(raw, m, Path(args.data_root)) for m in models}
    baselines = {m: chance_baseline(data[m]) for m in models}
    log.info("%d runs: models %s x optimizers %s x lr factors %s x seeds %s, %d workers",
             len(runs), models, optimizers, args.lr_factors, args.seeds, args.workers)
    steps_overrides = {m: f"models.{m}.steps={args.steps}" for m in models} if args.steps else {}
    jobs = [(raw, r["model"], r["optimizer"], r["seed"], {"lr": r["lr"]}, data[r["model"]], 1,
             tuple(o for o in [steps_overrides.get(r["model"])] if o)) for r in runs]
    # long runs first, so that no long straggler starts at the end
    order = sorted(range(len(jobs)), key=lambda i: -run_cost(raw, runs[i]["model"]))
    results = [None] * len(jobs)
    for i, result in zip(order, run_jobs([jobs[i] for i in order], args.workers, fn=guarded_run, desc="stability")):
        results[i] = result
    eval_every = int(raw["train"]["eval_every"])
    records = [summarize(r, res, baselines[r["model"]], eval_every) for r, res in zip(runs, results)]
    rows = pd.DataFrame(records)

    settings = {"config": args.config, "models": models, "optimizers": optimizers, "lr_factors": args.lr_factors,
                "seeds": args.seeds, "steps": {m: args.steps or model_steps(raw, m) for m in models},
                "steps_note": f"{args.steps} for every model (--steps)" if args.steps else "each model's own",
                "eval_every": eval_every, "log_every": int(raw["train"]["log_every"]), "workers": args.workers,
                "chance": {m: asdict(b) for m, b in baselines.items()},
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "torch": torch.__version__}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stability.json").write_text(json.dumps(to_jsonable(
        {"settings": settings, "runs": records}), indent=1))
    text = markdown(rows, settings)
    (out / "stability.md").write_text(text)
    print(text)
    log.info("wrote %s and %s", out / "stability.json", out / "stability.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
