"""Equal tuning budget for every (model, optimizer) pair of the config's grid.

    python benchmarks/tune.py --config config/config.yaml --workers 2 --out benchmarks/results/tuning.md

Every pair gets the same number of trials (4 by default), the config's steps for that model, one
seed and no probes: first-order optimizers (sgd, adamw, muon) the configured learning rate times
each of ``--lr-factors``; K-FAC the learning rates ``--kfac-lr-factors`` x the dampings
``--dampings`` (2 x 2). The config's own ``tuned`` section is ignored, so the table is what was
searched, not a prior pick. The best final validation metric (accuracy for images, bits per
character for text; a non-finite run is worst) picks the trial. A run "did not train" when it ends
below twice chance accuracy (images) or above 80% of its first evaluation's bits per character
(text); the table marks such runs and the chosen settings must avoid them.

Writes OUT (markdown table), OUT with suffix .json (every trial) and prints the ``tuned:`` block for
config/config.yaml.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import KFAC, base_parser, grid_pairs, load_raw, prepare_data, run_cost, run_jobs  # noqa: E402


def trials(optimizer_type: str, lr: float, args) -> list[dict]:
    """The settings each trial of one pair uses (same count for every optimizer)."""
    if optimizer_type in KFAC:
        return [{"lr": round(lr * f, 6), "damping": d} for f in args.kfac_lr_factors for d in args.dampings]
    return [{"lr": round(lr * f, 6)} for f in args.lr_factors]


def summarize(result: dict) -> dict:
    """Final metric of one trial and whether it trained."""
    m = pd.DataFrame(result["metrics"]).dropna(subset=["val_loss"])
    image = m["val_accuracy"].notna().any()
    metric = "val_accuracy" if image else "val_bpc"
    final = float(m[metric].iloc[-1]) if len(m) else math.nan
    if not result["finite"] or not math.isfinite(final):
        trained = False
    elif image:
        trained = final >= 2 * result["chance"]
    else:
        trained = final <= 0.8 * float(m[metric].iloc[0])
    return {"model": result["model"], "optimizer": result["optimizer"], **result["settings"], "metric": metric,
            "final": final, "final_val_loss": float(m["val_loss"].iloc[-1]) if len(m) else math.nan,
            "finite": result["finite"], "trained": trained,
            "seconds": float(pd.DataFrame(result["metrics"])["wall_time"].iloc[-1])}


def choose(rows: pd.DataFrame) -> pd.DataFrame:
    """Best trial per pair: highest accuracy / lowest bpc among finite runs."""
    score = rows["final"].where(rows["metric"] == "val_accuracy", -rows["final"])
    score = score.where(rows["finite"] & rows["final"].notna(), -math.inf)
    return rows.loc[score.groupby([rows["model"], rows["optimizer"]], sort=False).idxmax()]


def main(argv=None) -> int:
    p = base_parser(__doc__.splitlines()[0], seeds=[0], out="benchmarks/results/tuning.md")
    p.add_argument("--lr-factors", nargs="+", type=float, default=[0.1, 0.3, 1.0, 3.0])
    p.add_argument("--kfac-lr-factors", nargs="+", type=float, default=[1 / 3, 1.0])
    p.add_argument("--dampings", nargs="+", type=float, default=[0.03, 0.1])
    args = p.parse_args(argv)
    raw = load_raw(args.config)
    raw.pop("tuned", None)
    pairs = [(m, o) for m, o in grid_pairs(raw)
             if (not args.models or m in args.models) and (not args.optimizers or o in args.optimizers)]
    jobs, chance = [], {}
    for model, optimizer in pairs:
        data_dir = prepare_data(raw, model, Path(args.data_root))
        meta = json.loads((Path(data_dir) / "meta.json").read_text())
        chance[model] = 1 / meta["n_classes"] if "n_classes" in meta else math.nan
        o = raw["optimizers"][optimizer]
        jobs += [(raw, model, optimizer, seed, s, data_dir) for s in trials(o["type"], o["lr"], args)
                 for seed in args.seeds]
    cost = lambda job: run_cost(job[0], job[1])
    order = sorted(range(len(jobs)), key=lambda i: -cost(jobs[i]))  # long runs first: no straggler at the end
    results = [None] * len(jobs)
    for i, r in zip(order, run_jobs([jobs[i] for i in order], args.workers)):
        results[i] = r
    rows = pd.DataFrame([summarize({**r, "chance": chance[r["model"]]}) for r in results])
    best = choose(rows)
    keys = [k for k in ("lr", "damping") if k in rows]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = (f"# Equal tuning budget per (model, optimizer) of {args.config}'s grid\n\n"
            f"Seeds {args.seeds} (one seed: a tuning run, not a result), the config's steps per model, no probes; "
            f"{len(jobs) // max(len(pairs), 1) // len(args.seeds)} trials per pair: first-order lr = config lr x "
            f"{args.lr_factors}; K-FAC lr = config lr x {args.kfac_lr_factors} x damping {args.dampings}.\n\n"
            "## Every trial\n\n" + rows.to_markdown(index=False, floatfmt=".4g")
            + "\n\n## Chosen settings (best final validation metric)\n\n"
            + best[["model", "optimizer", *keys, "metric", "final", "trained"]].to_markdown(index=False, floatfmt=".4g")
            + "\n")
    out.write_text(text)
    out.with_suffix(".json").write_text(rows.to_json(orient="records", indent=1))
    print(text)
    lines = ["tuned:"]
    for model, g in best.groupby("model", sort=False):
        entries = ", ".join(f"{r.optimizer}: {{" + ", ".join(f"{k}: {getattr(r, k):g}" for k in keys
                                                             if pd.notna(getattr(r, k))) + "}"
                            for r in g.itertuples())
        lines.append(f"  {model}: {{{entries}}}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
