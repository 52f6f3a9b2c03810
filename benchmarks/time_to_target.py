"""Steps and wall-clock for each optimizer to reach AdamW's final validation accuracy.

    python benchmarks/time_to_target.py --config config/config.yaml --model vit-pre --seeds 0 1 2 \
        --out results/benchmarks/time_to_target.md

Every optimizer runs with its configured (tuned: benchmarks/tune_lr.py) learning rate, same steps,
batches and seeds; no probes. The decision rule is the report's claim 4 (brownformer.stats
optimizer_claim): median over seeds with bootstrap CIs. Ratios are to AdamW in the same process.
"""
from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import load_raw, one_run, prepare_data  # noqa: E402

from brownformer.io import to_jsonable  # noqa: E402
from brownformer.stats import optimizer_claim  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--model", default="vit-pre")
    p.add_argument("--optimizers", nargs="+", default=["sgd", "adamw", "muon", "kfac-eigen", "kfac-iterative"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--data-root", default="results/data")
    p.add_argument("--out", default="results/benchmarks/time_to_target.md")
    args = p.parse_args(argv)

    raw = load_raw(args.config)
    data_dir = prepare_data(raw, args.model, Path(args.data_root))
    jobs = [(raw, args.model, o, s, raw["optimizers"][o]["lr"], data_dir) for o in args.optimizers for s in args.seeds]
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(one_run, *zip(*jobs)))
    metrics = {f"{r['model']}__{r['optimizer']}__s{r['seed']}": pd.DataFrame(r["metrics"]) for r in results}
    claim = optimizer_claim(metrics, target_optimizer="adamw", proposed="kfac-iterative")
    model = claim["per_model"][args.model] if "per_model" in claim else claim
    per = model["per_optimizer"]
    def med(o, unit):  # JSON turned "never reached" (inf) into None
        v = per[o][unit]["median"]
        return np.inf if v is None else float(v)

    rows = []
    for o in args.optimizers:
        s, w = med(o, "steps"), med(o, "seconds")
        rows.append({"optimizer": o, "steps_median": s, "steps_ratio_to_adamw": s / med("adamw", "steps"),
                     "seconds_median": w, "seconds_ratio_to_adamw": w / med("adamw", "seconds"),
                     "steps_ci": per[o]["steps"]["ci"], "seconds_ci": per[o]["seconds"]["ci"],
                     "never_reached": int(sum(v is None or v == np.inf for v in per[o]["steps"]["values"]))})
    table = pd.DataFrame(rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = (f"# Time to AdamW's final {model['metric']} ({model['target']:.4f}) on {args.model}, seeds {args.seeds}\n\n"
            + table.to_markdown(index=False, floatfmt=".3g")
            + f"\n\nVerdict (claim 4 rule): {model['verdict']} {model.get('verdict_by_unit')}\n")
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(to_jsonable({"claim": claim, "table": rows}), indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
