"""AdamW's learning rate per size of the scaling study, on one short equal grid.

    python benchmarks/tune_scaling_lr.py --config config/scaling.yaml --lrs 0.003 0.009 0.027 \
        --steps 150 --text-steps 300 --workers 1 --out benchmarks/results/scaling_lr.md

Every model of the config gets the same learning rates, seed and steps (images and text may use
different step counts), without probes; the best final validation metric picks the rate. The
config's own `tuned` section is ignored here, so the grid is what was searched, not a prior pick.
Prints the `tuned:` block to paste into the config and writes the table (and JSON rows) to --out.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import load_raw, one_run, prepare_data  # noqa: E402


def _final(row: dict) -> tuple[str, float]:
    m = pd.DataFrame(row["metrics"]).dropna(subset=["val_loss"])
    metric = "val_accuracy" if m["val_accuracy"].notna().any() else "val_bpc"
    return metric, float(m[metric].iloc[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/scaling.yaml")
    p.add_argument("--optimizer", default="adamw")
    p.add_argument("--lrs", nargs="+", type=float, default=[0.003, 0.009, 0.027])
    p.add_argument("--steps", type=int, default=150, help="steps for image models")
    p.add_argument("--text-steps", type=int, default=300, help="steps for text models")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--data-root", default="results/data")
    p.add_argument("--out", default="benchmarks/results/scaling_lr.md")
    args = p.parse_args(argv)

    raw = load_raw(args.config)
    raw.pop("tuned", None)
    raw.pop("scaling", None)  # one model per job: the study's series do not apply
    models = list(dict.fromkeys(m for block in raw["grid"] for m in block["models"]))
    jobs = []
    for model in models:
        spec = copy.deepcopy(raw)
        text = spec["datasets"][spec["models"][model]["dataset"]]["source"] in ("pydoc", "textfile")
        spec["models"][model].pop("steps", None)
        spec["train"]["steps"] = args.text_steps if text else args.steps
        data_dir = prepare_data(spec, model, Path(args.data_root))
        jobs += [(spec, model, args.optimizer, args.seed, lr, data_dir) for lr in args.lrs]
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(one_run, *zip(*jobs)))

    rows = []
    for r in results:
        metric, final = _final(r)
        rows.append({"model": r["model"], "lr": r["lr"], "metric": metric, "final": final, "finite": r["finite"],
                     "seconds": float(pd.DataFrame(r["metrics"])["wall_time"].iloc[-1])})
    table = pd.DataFrame(rows)
    higher = table["metric"] == "val_accuracy"
    score = table["final"].where(higher, -table["final"]).where(table["finite"], float("-inf"))
    best = table.loc[score.groupby(table["model"]).idxmax()].set_index("model").loc[models].reset_index()
    wide = table.pivot_table(index="model", columns="lr", values="final").loc[models]
    text = (f"# AdamW learning rate per size ({args.config}): seed {args.seed}, {args.steps} steps (images), "
            f"{args.text_steps} steps (text), no probes\n\nCommand: `python benchmarks/tune_scaling_lr.py "
            f"{' '.join(sys.argv[1:] if argv is None else argv)}`\n\n"
            "Final validation metric (accuracy for images, bits per "
            "character for text) per learning rate:\n\n" + wide.to_markdown(floatfmt=".4g")
            + "\n\n## Best learning rate per model\n\n"
            + best[["model", "lr", "metric", "final", "seconds"]].to_markdown(index=False, floatfmt=".4g") + "\n")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print(text)
    block = "\n".join(f"  {r.model}: {{{args.optimizer}: {{lr: {r.lr:g}}}}}" for r in best.itertuples())
    print("tuned:\n" + block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
