"""Claim 4's tables from default runs' claims.json: per model, each optimizer's steps to each target and K-FAC's
ratio to every baseline, side by side for several runs (e.g. seed offsets 0 and 1000).

    python benchmarks/claim4_tables.py --claims offset_0=/tmp/runE/results/stats/claims.json \
        offset_1000=/tmp/runF/results/stats/claims.json --out benchmarks/results/claim4_16trials.md

Everything printed is read from the files through the project's reader (`verdicts.read_claims` with the typed
per-claim details: the claim's per-model details: Kaplan-Meier medians with their
censoring, the AFT log-rank point estimates of the ratios (the headline) with their intervals and one-sided
p-values, the ratios of KM medians beside them in their own columns, the seconds ratio with each optimizer's median
training seconds, the simulated error rates of the rule at each comparison's shape, the per-model verdict and
reason); nothing is recomputed. Tables written before issue 31's fix (claim4_16trials.md) quote the ratio of KM
medians where this prints the AFT estimate.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from brownformer.report.deciding import km_ratio_cell, ratio_cell
from brownformer.report.markdown import fmt
from brownformer.stats.claims.comparison_records import SECONDS, STEPS
from brownformer.stats.claims.details import parse_details
from brownformer.verdicts import ClaimsFile, read_claims


def _median_text(m) -> str:
    censored = f" ({m.n_censored} of {m.n} censored)" if m.n_censored else ""
    return f"{m.text}{censored}"


def _ratio_text(r) -> str:
    """The AFT point estimate with its interval (the report's cell: a bound with the end that bounds it, never 0 or
    inf) and the one-sided p at the margin."""
    return f"{ratio_cell(r)}, p {fmt(r.pvalue)}" if r else "n/a"


def _headline(det) -> str:
    """The model's headline at the deciding target: the steps ratio against the best baseline (AFT estimate, with the
    ratio of KM medians beside it) and the seconds ratio with each optimizer's median training seconds."""
    clocks = (det.ratios or {}).get(det.baseline) or {}
    steps, seconds = clocks.get(STEPS), clocks.get(SECONDS)
    if steps is None:
        return "Headline: no steps ratio (no best baseline)."
    text = (f"Headline: {det.proposed} / {det.baseline} (best baseline), steps ratio (AFT estimate) "
            f"{_ratio_text(steps)}; ratio of KM medians {km_ratio_cell(steps)}")
    if seconds is not None:
        medians = " vs ".join(f"{m.text} s" if m.text != "undefined" else "n/a" for m in seconds.medians)
        text += f"; seconds ratio {_ratio_text(seconds)} (KM median training seconds {medians})"
    return text + "."


def model_tables(label: str, claims: ClaimsFile) -> list[str]:
    """The lines of one run's claim-4 tables: the claim's verdict, then per model its headline and one row per target
    level: KM medians, and per baseline the AFT estimate [CI] with its p and the ratio of KM medians in its own
    column."""
    c4 = claims.claims["4"]
    lines = [f"### {label}: claim 4 **{c4.verdict}**", "", c4.reason, ""]
    for model, rec in sorted(c4.per_model.items()):
        if model not in c4.details.scope:
            continue  # a model outside the claim's scope has no proposed-optimizer runs
        det = rec.details
        optimizers = [det.proposed, *det.baselines]
        rates = det.rule_error_rates.per_baseline if det.rule_error_rates else {}  # none when nothing decided
        ratio_heads = [h for b in det.baselines
                       for h in (f"{det.proposed} / {b}: AFT estimate [95% CI], p(ratio >= margin)",
                                 f"{det.proposed} / {b}: ratio of KM medians")]
        lines += [f"#### {model}: **{rec.verdict}** (target {det.metric} {fmt(det.target, 4)})", "", rec.reason, "",
                  _headline(det), "",
                  "| target level | " + " | ".join(f"KM median steps {o}" for o in optimizers) + " | "
                  + " | ".join(ratio_heads) + " | best baseline |",
                  "|---" * (len(optimizers) + len(ratio_heads) + 2) + "|"]
        for level, lv in sorted(det.levels.items(), key=lambda kv: float(kv[0])):
            meds = [_median_text(lv.km_median_steps[o]) if o in lv.km_median_steps else "n/a" for o in optimizers]
            ratios = [cell for b in det.baselines
                      for cell in (_ratio_text(lv.steps_ratios.get(b)), km_ratio_cell(lv.steps_ratios.get(b)))]
            lines.append(f"| {level} ({fmt(lv.target, 4)}) | " + " | ".join(meds + ratios)
                         + f" | {lv.best_baseline or 'none'} |")
        lines += ["", "Simulated error rates of the rule at each comparison's shape (true ratio on the margin): "
                  + "; ".join(f"vs {b}: P(supported) {rates[b].size:.3g}, P(not supported) "
                              f"{rates[b].size_not_supported:.3g} (gate {rates[b].max_size:g})"
                              for b in det.baselines if b in rates) + "." if rates else
                  "No comparison decided: no error rates simulated.", ""]
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--claims", nargs="+", required=True, metavar="LABEL=PATH", help="claims.json files, labelled")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    lines = ["# Claim 4 on both ViTs, read from the default runs' claims.json", "",
             "Command: `python benchmarks/claim4_tables.py --claims " + " ".join(args.claims) + "`", ""]
    for item in args.claims:
        label, _, path = item.partition("=")
        if not path:
            p.error(f"--claims wants LABEL=PATH, got {item!r}")
        lines += model_tables(label, read_claims(Path(path), parse_details=parse_details))
    text = "\n".join(lines)
    if args.out is None:
        print(text)
    else:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
