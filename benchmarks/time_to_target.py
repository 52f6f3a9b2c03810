"""Time to a fixed target: iterative K-FAC against AdamW under the one rule of claim 4.

    python benchmarks/time_to_target.py --config config/config.yaml --models vit-pre vit-post lm-pre \
        --seeds 0 1 2 3 4 5 6 7 --workers 2 --out benchmarks/results/time_to_target.md

Protocol (brownformer.stats.comparison.time_to_target, issue 11 item 4):
1. per model, one long AdamW run (``--reference-factor`` x the model's steps, seed 0, the config's
   tuned settings) fixes the target: ``reference_target(fraction=--fraction)``;
2. every optimizer of ``--optimizers`` runs ``--seeds`` seeds with the config's tuned settings and
   steps, evaluating every 5 steps on the whole validation split (train.eval_every=5,
   train.eval_batches large enough for the whole split), without probes;
3. claim 4's own rule (brownformer.stats.claims.optimizer_claim, over these models as its scope) gives each
   run's steps and seconds to the target (read on the running median, censored at the budget when never
   reached), the Kaplan-Meier medians (bounds when censored), the ratios (K-FAC / each baseline) with the
   AFT log-rank intervals, the targets at every report.target_levels share, the size-gated verdicts.

With ``--config-targets`` step 1 is skipped (the config's report.targets) and every run stops at its
target, as the default run's metrics-only runs do:

    PYTHONPATH=src nice python benchmarks/time_to_target.py --config-targets --models vit-pre vit-post \
        --workers 1 --out benchmarks/results/claim4_both_vits.md

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
from brownformer.stats.claims import optimizer_claim  # noqa: E402
from brownformer.stats.comparison.time_to_target import reference_target  # noqa: E402

WHOLE_SPLIT = 100_000  # eval batches: more than any split holds, so evaluation covers the whole split


def main(argv=None) -> int:
    p = base_parser(__doc__.splitlines()[0], seeds=list(range(8)), out="benchmarks/results/time_to_target.md")
    p.add_argument("--reference-factor", type=float, default=2.0, help="long AdamW run: this many times the steps")
    p.add_argument("--fraction", type=float, default=0.9, help="target: share of the reference's improvement")
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--config-targets", action="store_true",
                   help="use the config's report.targets (no reference runs) and stop every run at its target, "
                        "as the default run's metrics-only runs do")
    args = p.parse_args(argv)
    raw = load_raw(args.config)
    models = args.models or ["vit-pre", "vit-post", "lm-pre"]
    cfg = from_dict(raw)  # the roles (report.proposed, baselines, scope), the margins and the targets are the config's
    optimizers = args.optimizers or [cfg.report.proposed, *cfg.report.baselines]
    data = {m: prepare_data(raw, m, Path(args.data_root)) for m in models}
    common = (f"train.eval_batches={WHOLE_SPLIT}",)
    references = []
    if args.config_targets:
        targets = {m: float(cfg.report.targets[m]) for m in models}
    else:
        jobs = [(raw, m, "adamw", 0, {}, data[m], 1,
                 common + (f"models.{m}.steps={int(args.reference_factor * model_steps(raw, m))}", "train.eval_every=25"))
                for m in models]
        references = run_jobs(jobs, args.workers)
        targets = {r["model"]: reference_target(pd.DataFrame(r["metrics"]), fraction=args.fraction)
                   for r in references}
    jobs = [(raw, m, o, s, {}, data[m], 1, common + (f"train.eval_every={args.eval_every}", f"report.targets.{m}={targets[m]}",
                                                      _stop_block(m, o, args.eval_every, args.config_targets)))
            for m in models for o in optimizers for s in args.seeds]
    runs = run_jobs(jobs, args.workers)
    metrics = {f"{r['model']}__{r['optimizer']}__s{r['seed']}": pd.DataFrame(r["metrics"]) for r in runs}
    report = dataclasses.replace(cfg.report, targets=targets, scope=tuple(models))
    rec = optimizer_claim(metrics, cfg.stats, report)

    lines = [f"# Time to a fixed target ({args.config}): seeds {args.seeds}, eval every {args.eval_every} steps on "
             "the whole validation split, target = " + ("the config's report.targets, runs stopped there"
                                                       if args.config_targets else
                                                       f"{args.fraction} of a {args.reference_factor}x-long AdamW run's "
                                                       "improvement") + "\n",
             f"Claim 4 over {', '.join(models)} against {', '.join(cfg.report.baselines)}: **{rec.verdict}** "
             f"({rec.reason}).\n"]
    for model, mrec in rec.per_model.items():
        d = mrec.details
        rows = [{"versus": b, "level": f, "target": lv["target"], "steps ratio": r["text"],
                 "steps CI": r["confidence_interval"], "one-sided p (ratio >= margin)": r["pvalue"],
                 "censored (K-FAC, baseline)": r["n_censored"]}
                for f, lv in d["levels"].items() for b, r in lv["steps_ratios"].items()]
        medians = pd.DataFrame({o: {"KM median steps": m["text"], "censored": m["n_censored"], "n": m["n"],
                                    "final at budget (median, n)": (d["final_at_budget"][o]["median"],
                                                                    d["final_at_budget"][o]["n"])}
                                for o, m in d["km_median_steps"].items()}).T
        sizes = {b: (r["size"], r["size_not_supported"]) for b, r in ((d["rule_error_rates"] or {}).get("per_baseline") or {}).items()}
        lines += [f"## {model}: verdict **{mrec.verdict}**\n", mrec.reason, "",
                  medians.to_markdown(), "", pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g"), "",
                  f"Simulated error rates at this shape (P(supported), P(not supported) on the margin): {sizes or 'n/a'}",
                  ""]
    text = "\n".join(lines)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(to_jsonable({
        "targets": targets, "fraction": args.fraction, "reference_factor": args.reference_factor,
        "seeds": args.seeds, "eval_every": args.eval_every, "config_targets": args.config_targets,
        "references": {r["model"]: r["metrics"] for r in references}, "claim": rec.to_dict()}), indent=1))
    print(text)
    return 0


def _stop_block(model: str, optimizer: str, every: int, stop: bool) -> str:
    """The run's grid block (an override): metrics only, evaluated every ``every`` steps, stopped at the target."""
    return (f"grid=[{{models: [{model}], optimizers: [{optimizer}], probes: false, eval_every: {every}, "
            f"stop_at_target: {str(stop).lower()}}}]")


if __name__ == "__main__":
    sys.exit(main())
