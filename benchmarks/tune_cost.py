"""CPU cost of one metrics-only run per (model, optimizer): the basis of the tuning's and claim 4's budgets.

    PYTHONPATH=src nice python benchmarks/tune_cost.py --models vit-pre vit-post \
        --optimizers adamw muon kfac-iterative --seeds 900 --out benchmarks/results/tune_cost.md

Each run trains as a tuning trial and a claim-4 metrics-only run do (the config's tuned settings, evaluation every
5 steps on the whole validation split, stopped at the first evaluation whose running median reaches
report.targets; a run that never gets there trains its whole budget). CPU seconds (``time.process_time``) are
read, not wall time: on a shared machine the wall clock measures the neighbours. Writes OUT (markdown) and OUT with
suffix .json. The estimates printed below the table: a default grid (``--eval-seeds`` per (model, optimizer)) and a
re-tune (``--trials`` x ``--tuning-seeds`` per (model, optimizer)), each the sum of CPU-s per run over its runs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
import yaml

from brownformer.config import from_dict
from brownformer.tuning.run import dataset_dir
from brownformer.tuning.trial import run_seed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--models", nargs="+", default=["vit-pre", "vit-post"])
    p.add_argument("--optimizers", nargs="+", default=["adamw", "muon", "kfac-iterative"])
    p.add_argument("--seeds", nargs="+", type=int, default=[900])
    p.add_argument("--data-root", default="results/data")
    p.add_argument("--eval-seeds", type=int, default=8)
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--tuning-seeds", type=int, default=3)
    p.add_argument("--out", default="benchmarks/results/tune_cost.md")
    args = p.parse_args(argv)
    raw = yaml.safe_load(Path(args.config).read_text())
    cfg = from_dict(raw)
    rows = []
    for model in args.models:
        data_dir = dataset_dir(cfg, model, Path(args.data_root))
        for optimizer in args.optimizers:
            for seed in args.seeds:
                row = run_seed(raw, model, optimizer, {}, seed, data_dir, target=float(cfg.report.targets[model]),
                               eval_every=5, stop_at=None)
                rows.append({"model": model, "optimizer": optimizer, "seed": seed, "reached": row["reached"],
                             "steps": row["steps_run"], "cpu_seconds": row["cpu_seconds"],
                             "wall_seconds": row["seconds"]})
                print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    per = df.groupby(["model", "optimizer"])["cpu_seconds"].mean()
    grid = float(per.sum() * args.eval_seeds)
    tune = float(per.sum() * args.trials * args.tuning_seeds)
    text = "\n".join([
        "# CPU cost of a metrics-only run per (model, optimizer)", "",
        f"Command: `PYTHONPATH=src nice python benchmarks/tune_cost.py --models {' '.join(args.models)} --optimizers "
        f"{' '.join(args.optimizers)} --seeds {' '.join(map(str, args.seeds))}`; config {args.config}.", "",
        df.to_markdown(index=False, floatfmt=".4g"), "",
        f"Claim 4's runs at {args.eval_seeds} evaluation seeds per (model, optimizer): {grid:.0f} CPU-s "
        f"({grid / 2 / 60:.1f} min on 2 idle cores).",
        f"A re-tune at {args.trials} trials x {args.tuning_seeds} tuning seeds per (model, optimizer), no early "
        f"stopping: {tune:.0f} CPU-s ({tune / 60:.0f} min on 1 core, {tune / 16 / 60:.1f} min on 16).", ""])
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps({"runs": rows, "grid_cpu_seconds": grid,
                                                                "tune_cpu_seconds": tune}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
