"""Steps to claim 4's target of iterative K-FAC at the tuned settings, for one code version (a short check).

    PYTHONPATH=src python benchmarks/kfac_steps_check.py --label branch --models vit-pre vit-post \
        --seeds 100 101 102 --out benchmarks/results/kfac_steps_check_branch.json
    PYTHONPATH=/work/main/src python benchmarks/kfac_steps_check.py --label main ...   # the code before

Each run trains with the config's tuned settings, evaluates every 5 steps on the whole validation split
and stops at its first evaluation on ``report.targets[model]`` (a run that never gets there trains its
whole budget and counts as censored). With ``--compare A.json B.json`` it writes the side-by-side table
(markdown) of two such files to ``--out``. Seeds are tuning-like seeds apart from claim 4's (0-7).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import load_raw, prepare_data, run_jobs  # noqa: E402

WHOLE_SPLIT = 100_000  # eval batches: more than any split holds


def _summary(result: dict, target: float, label: str, seconds: float) -> dict:
    metrics = pd.DataFrame(result["metrics"])
    evals = metrics.dropna(subset=["val_accuracy"]) if "val_accuracy" in metrics else metrics.iloc[:0]
    hit = evals[evals["val_accuracy"] >= target]
    last = metrics.iloc[-1]
    return {"label": label, "model": result["model"], "optimizer": result["optimizer"], "seed": result["seed"],
            "steps_to_target": int(hit["step"].iloc[0]) if len(hit) else None,
            "last_step": int(last["step"]), "final_damping": float(last.get("opt_damping", float("nan"))),
            "cg_iterations_mean": float(metrics.get("opt_cg_iterations_mean", pd.Series([float("nan")])).mean()),
            "seconds": seconds}


def _timed(raw, model, optimizer, seed, data, overrides):
    from _runs import one_run
    start = time.process_time()
    result = one_run(raw, model, optimizer, seed, {}, data, 1, overrides)
    return result, time.process_time() - start


def _compare(paths: list[str], out: Path) -> None:
    rows = pd.DataFrame([r for p in paths for r in json.loads(Path(p).read_text())["runs"]])
    rows["steps"] = rows["steps_to_target"].map(lambda s: ">budget" if s != s or s is None else int(s))
    table = rows.pivot_table(index=["model", "seed"], columns="label", values="steps", aggfunc="first")
    lines = [f"# Iterative K-FAC, steps to target at the tuned settings: {' vs '.join(rows['label'].unique())}\n",
             "Commands: see the JSON files' `command` fields. Evaluation every 5 steps on the whole validation split; "
             "'>budget': the target was not reached.\n", table.to_markdown(), "",
             "Per label (median over seeds of reached runs; CPU seconds of the whole run):\n",
             rows.groupby(["model", "label"]).agg(reached=("steps_to_target", lambda s: int(s.notna().sum())),
                                                  median_steps=("steps_to_target", "median"),
                                                  median_cpu_s=("seconds", "median"),
                                                  cg_iterations=("cg_iterations_mean", "median"),
                                                  final_damping=("final_damping", "median")).to_markdown(floatfmt=".4g")]
    out.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--models", nargs="+", default=["vit-pre"])
    p.add_argument("--optimizer", default="kfac-iterative")
    p.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102])
    p.add_argument("--label", default="branch")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--data-root", default="results/data")
    p.add_argument("--compare", nargs="+", metavar="JSON")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if args.compare:
        _compare(args.compare, Path(args.out))
        return 0
    raw = load_raw(args.config)
    targets = raw["report"]["targets"]
    jobs = []
    for m in args.models:
        data = prepare_data(raw, m, Path(args.data_root))
        grid = f"grid=[{{models: [{m}], optimizers: [{args.optimizer}], probes: false, stop_at_target: true}}]"
        overrides = (f"train.eval_batches={WHOLE_SPLIT}", "train.eval_every=5", grid)
        jobs += [(raw, m, args.optimizer, s, data, overrides) for s in args.seeds]
    results = run_jobs(jobs, args.workers, fn=_timed)
    runs = [_summary(r, targets[r["model"]], args.label, sec) for r, sec in results]
    Path(args.out).write_text(json.dumps({"command": " ".join(sys.argv), "runs": runs}, indent=1) + "\n")
    print(pd.DataFrame(runs).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
