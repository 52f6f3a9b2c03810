"""Time to a fixed target: iterative K-FAC against AdamW under the one rule of claim 4.

    python benchmarks/time_to_target.py --config config/config.yaml --models vit-pre vit-post lm-pre \
        --seeds 0 1 2 3 4 5 6 7 --workers 2 --out benchmarks/results/time_to_target.md

Protocol (brownformer.stats.time_to_target, issue 11 item 4):
1. per model, one long AdamW run (``--reference-factor`` x the model's steps, seed 0, the config's
   tuned settings) fixes the target: ``reference_target(fraction=--fraction)``;
2. every optimizer of ``--optimizers`` runs ``--seeds`` seeds with the config's tuned settings and
   steps, evaluating every 5 steps on the whole validation split (train.eval_every=5,
   train.eval_batches large enough for the whole split), without probes;
3. ``time_to_target`` gives each run's steps and seconds to the target (censored at the budget when
   never reached), the Kaplan-Meier median per optimizer, the ratios (K-FAC / other) of the medians
   with bootstrap CIs, the one-sided log-rank p-values, and the verdict (steps ratio <= 0.75 and
   wall-clock ratio <= 1.0 with the whole CI; at least 8 seeds per optimizer).

Seconds are the run's wall-clock at the target minus its evaluation time when the metrics carry
``eval_wall_time``; otherwise evaluation is included for every optimizer alike (the ratio then
leans towards 1). Writes OUT (markdown), OUT with suffix .json (targets, runs and ratios).
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import base_parser, load_raw, model_steps, prepare_data, run_jobs  # noqa: E402

from brownformer.config import from_dict  # noqa: E402
from brownformer.io import to_jsonable  # noqa: E402
from brownformer.stats.time_to_target import reference_target, time_to_target  # noqa: E402

WHOLE_SPLIT = 100_000  # eval batches: more than any split holds, so evaluation covers the whole split


def main(argv=None) -> int:
    p = base_parser(__doc__.splitlines()[0], seeds=list(range(8)), out="benchmarks/results/time_to_target.md")
    p.add_argument("--reference-factor", type=float, default=2.0, help="long AdamW run: this many times the steps")
    p.add_argument("--fraction", type=float, default=0.9, help="target: share of the reference's improvement")
    p.add_argument("--eval-every", type=int, default=5)
    args = p.parse_args(argv)
    raw = load_raw(args.config)
    models = args.models or ["vit-pre", "vit-post", "lm-pre"]
    optimizers = args.optimizers or ["adamw", "kfac-iterative"]
    data = {m: prepare_data(raw, m, Path(args.data_root)) for m in models}
    common = (f"train.eval_batches={WHOLE_SPLIT}",)
    jobs = [(raw, m, "adamw", 0, {}, data[m], 1,
             common + (f"models.{m}.steps={int(args.reference_factor * model_steps(raw, m))}", "train.eval_every=25"))
            for m in models]
    jobs += [(raw, m, o, s, {}, data[m], 1, common + (f"train.eval_every={args.eval_every}",))
             for m in models for o in optimizers for s in args.seeds]
    results = run_jobs(jobs, args.workers)
    references, runs = results[:len(models)], results[len(models):]
    targets = {r["model"]: reference_target(pd.DataFrame(r["metrics"]), fraction=args.fraction) for r in references}
    metrics = {f"{r['model']}__{r['optimizer']}__s{r['seed']}": pd.DataFrame(r["metrics"]) for r in runs}
    cfg = from_dict(raw)  # the roles (report.proposed, report.target_optimizer) and the margins are the config's
    # 9999 resamples: the count the recorded results (benchmarks/results) used
    outcome = time_to_target(metrics, targets, stats=dataclasses.replace(cfg.stats, n_resamples=9999),
                             report=cfg.report)

    lines = [f"# Time to a fixed target ({args.config}): seeds {args.seeds}, eval every {args.eval_every} steps on "
             f"the whole validation split, target = {args.fraction} of a {args.reference_factor}x-long AdamW run's "
             "improvement\n"]
    rows = []
    for model, res in outcome.items():
        for other, ratio in res.ratios.items():
            rows.append({"model": model, "versus": other, "target": res.target, "metric": res.metric,
                         "steps_ratio": ratio["steps"].estimate, "steps_ci": ratio["steps"].confidence_interval,
                         "seconds_ratio": ratio["seconds"].estimate,
                         "seconds_ci": ratio["seconds"].confidence_interval,
                         "logrank_p": res.logrank[other]["pvalue"], "verdict": res.verdict})
        per_run = res.runs.groupby("optimizer").agg(reached=("reached", "sum"), seeds=("seed", "count"),
                                                    final_median=("final", "median"))
        per_run["km_median_steps"] = pd.Series(res.medians)
        lines += [f"## {model}: target {res.metric} {res.target:.4g}; verdict **{res.verdict}** ({res.reason})\n",
                  per_run.to_markdown(floatfmt=".4g"), ""]
    lines += ["## Ratios (kfac-iterative / other) of Kaplan-Meier medians, 95% percentile bootstrap CI; one-sided "
              "log-rank p (K-FAC sooner)\n",
              pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g"), ""]
    text = "\n".join(lines)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(to_jsonable({
        "targets": targets, "fraction": args.fraction, "reference_factor": args.reference_factor,
        "seeds": args.seeds, "eval_every": args.eval_every,
        "references": {r["model"]: r["metrics"] for r in references},
        "results": {m: r.to_dict() for m, r in outcome.items()}}), indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
