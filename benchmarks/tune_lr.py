"""Equal tuning budget: every optimizer gets the same learning-rate grid and seeds on one model.

Also the stability sweep of the K-FAC issue (5 seeds x 3 learning rates without NaNs).

    python benchmarks/tune_lr.py --config config/config.yaml --model vit-pre \
        --optimizers sgd adamw muon kfac-eigen kfac-iterative --factors 0.3 1 3 --seeds 0 1 \
        --out results/benchmarks/tune_lr.md

The grid is the config's learning rate times each factor. Reports the final validation metric
(median over seeds), the number of runs with a non-finite loss, and the best factor per optimizer.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import base_parser, run_grid  # noqa: E402


def main(argv=None) -> int:
    p = base_parser(__doc__.splitlines()[0], seeds=[0, 1], out="results/benchmarks/tune_lr.md")
    p.add_argument("--factors", nargs="+", type=float, default=[0.3, 1.0, 3.0])
    args = p.parse_args(argv)
    _, results = run_grid(args, args.factors)
    rows = []
    for r in results:
        m = pd.DataFrame(r["metrics"])
        metric = "val_accuracy" if m["val_accuracy"].notna().any() else "val_bpc"
        final = m.dropna(subset=["val_loss"]).iloc[-1]
        rows.append({"optimizer": r["optimizer"], "lr": r["lr"], "seed": r["seed"], "finite": r["finite"],
                     "metric": metric, "final": final[metric], "final_val_loss": final["val_loss"],
                     "wall_time": final["wall_time"]})
    table = pd.DataFrame(rows)
    agg = table.groupby(["optimizer", "lr"]).agg(
        final_median=("final", "median"), val_loss_median=("final_val_loss", "median"),
        non_finite=("finite", lambda s: int((~s).sum())), runs=("seed", "count"),
        seconds_median=("wall_time", "median")).reset_index()
    better_low = table["metric"].iloc[0] == "val_bpc"
    best = agg.loc[agg.groupby("optimizer")["final_median"].idxmin() if better_low
                   else agg.groupby("optimizer")["final_median"].idxmax()]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = (f"# Learning-rate sweep on {args.model} ({args.config}), seeds {args.seeds}\n\n"
            + agg.to_markdown(index=False, floatfmt=".4g") + "\n\n## Best learning rate per optimizer\n\n"
            + best.to_markdown(index=False, floatfmt=".4g") + "\n")
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
