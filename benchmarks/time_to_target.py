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

Seconds are steps x measured step cost (docs/methods/claim4.md sec. 3): each optimizer's KM median steps times its
median training seconds per step (wall-clock less evaluation time when the metrics carry ``eval_wall_time``;
otherwise evaluation is included for every optimizer alike and the ratio leans towards 1). Writes OUT (markdown), OUT
with suffix .json (targets, the reference runs and the claim) and OUT with suffix .claims.json (claim 4 alone, a
claims.json through the project's writer). The tables are read back from that file through the typed reader
(`verdicts.read_claims` with the claim details' parser), as benchmarks/claim4_tables.py reads the default run's,
which can read it too.
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
from brownformer.report.deciding import km_ratio_cell, ratio_cell  # noqa: E402
from brownformer.report.markdown import fmt, md_table  # noqa: E402
from brownformer.stats.claims import optimizer_claim  # noqa: E402
from brownformer.stats.claims.comparison_records import SECONDS  # noqa: E402
from brownformer.stats.claims.details import Claim4ModelDetails, parse_details  # noqa: E402
from brownformer.stats.comparison.time_to_target import reference_target  # noqa: E402
from brownformer.verdicts import ClaimRecord, ClaimsFile, read_claims  # noqa: E402

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

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    claims = read_claims(write_claims(rec, out.with_suffix(".claims.json"), runs=sorted(metrics)),
                         parse_details=parse_details)
    head = (f"# Time to a fixed target ({args.config}): seeds {args.seeds}, eval every {args.eval_every} steps on "
            "the whole validation split, target = " + ("the config's report.targets, runs stopped there"
                                                      if args.config_targets else
                                                      f"{args.fraction} of a {args.reference_factor}x-long AdamW "
                                                      "run's improvement") + "\n")
    text = "\n".join([head, *claim_tables(claims.claims["4"], models, cfg.report.baselines)])
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(to_jsonable({
        "targets": targets, "fraction": args.fraction, "reference_factor": args.reference_factor,
        "seeds": args.seeds, "eval_every": args.eval_every, "config_targets": args.config_targets,
        "references": {r["model"]: r["metrics"] for r in references}, "claim": rec.to_dict()}), indent=1))
    print(text)
    return 0


def write_claims(rec: ClaimRecord, path: Path, *, runs: list[str]) -> Path:
    """Claim 4's record as a claims.json of its own, through the project's writer (`verdicts.ClaimsFile`)."""
    path.write_text(json.dumps(ClaimsFile({"4": rec}, runs=runs).to_dict(), indent=1))
    return path


def _seconds_medians(d) -> dict[str, str]:
    """optimizer -> its KM median training seconds with the unit, as the seconds ratios' records hold them."""
    out = {}
    for b, clocks in (d.ratios or {}).items():
        seconds = clocks.get(SECONDS)
        for o, m in zip((d.proposed, b), seconds.medians if seconds else ()):
            out[o] = f"{m.text} s" if m.text != "undefined" else "n/a"
    return out


def claim_tables(c4: ClaimRecord, models, baselines) -> list[str]:
    """The markdown lines of claim 4 as read back typed (`read_claims(..., parse_details=...)`): the verdict, then per
    model the medians (steps, training seconds, final metric at the budget) and, per target level and baseline, the
    steps ratio's AFT estimate [CI] with the ratio of KM medians in its own column and the one-sided p."""
    lines = [f"Claim 4 over {', '.join(models)} against {', '.join(baselines)}: **{c4.verdict}** ({c4.reason}).\n"]
    for model, mrec in c4.per_model.items():
        d = mrec.details
        if not isinstance(d, Claim4ModelDetails):  # a record without a comparison has nothing to tabulate
            lines += [f"## {model}: verdict **{mrec.verdict}**\n", mrec.reason, ""]
            continue
        seconds = _seconds_medians(d)
        final = {o: d.final_at_budget.get(o) or {} for o in d.km_median_steps}
        medians = pd.DataFrame([{"optimizer": o, "KM median steps": m.text, "KM median training seconds":
                                 seconds.get(o, "n/a"), "censored": m.n_censored, "n": m.n,
                                 "final at budget (median, n)": f"{fmt(final[o].get('median'))}, "
                                                                f"{final[o].get('n', 0)}"}
                                for o, m in d.km_median_steps.items()])
        rows = [{"versus": b, "level": f, "target": fmt(lv.target, 4), "steps ratio (AFT estimate) [95% CI]":
                 ratio_cell(r), "ratio of KM medians": km_ratio_cell(r), "one-sided p (ratio >= margin)": fmt(r.pvalue),
                 "censored (K-FAC, baseline)": ", ".join(map(str, r.n_censored))}
                for f, lv in sorted(d.levels.items(), key=lambda kv: float(kv[0])) for b, r in lv.steps_ratios.items()]
        per_baseline = d.rule_error_rates.per_baseline if d.rule_error_rates else {}
        sizes = "; ".join(f"vs {b}: {fmt(r.size)}, {fmt(r.size_not_supported)}" for b, r in per_baseline.items())
        lines += [f"## {model}: verdict **{mrec.verdict}**\n", mrec.reason, "", md_table(medians), "",
                  md_table(pd.DataFrame(rows)), "",
                  f"Simulated error rates at this shape (P(supported), P(not supported) on the margin): "
                  f"{sizes or 'n/a'}", ""]
    return lines


def _stop_block(model: str, optimizer: str, every: int, stop: bool) -> str:
    """The run's grid block (an override): metrics only, evaluated every ``every`` steps, stopped at the target."""
    return (f"grid=[{{models: [{model}], optimizers: [{optimizer}], probes: false, eval_every: {every}, "
            f"stop_at_target: {str(stop).lower()}}}]")


if __name__ == "__main__":
    sys.exit(main())
