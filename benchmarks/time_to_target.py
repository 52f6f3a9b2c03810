"""Steps and wall-clock for each optimizer to reach AdamW's final validation accuracy.

    python benchmarks/time_to_target.py --config config/config.yaml --model vit-pre --seeds 0 1 2 \
        --out results/benchmarks/time_to_target.md

Every optimizer runs with its configured (tuned: benchmarks/tune_lr.py) learning rate, same steps,
batches and seeds; no probes. The decision rule is the report's claim 4 (brownformer.stats
optimizer_claim): median over seeds with bootstrap CIs. Ratios are to AdamW in the same process.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import base_parser, run_grid  # noqa: E402

from brownformer.io import to_jsonable  # noqa: E402
from brownformer.stats import optimizer_claim  # noqa: E402


def main(argv=None) -> int:
    p = base_parser(__doc__.splitlines()[0], seeds=[0, 1, 2], out="results/benchmarks/time_to_target.md")
    args = p.parse_args(argv)
    _, results = run_grid(args)
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
