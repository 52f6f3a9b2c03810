"""Claim 4's tables from default runs' claims.json: per model, each optimizer's steps to each target and K-FAC's
ratio to every baseline, side by side for several runs (e.g. seed offsets 0 and 1000).

    python benchmarks/claim4_tables.py --claims offset_0=/tmp/runE/results/stats/claims.json \
        offset_1000=/tmp/runF/results/stats/claims.json --out benchmarks/results/claim4_16trials.md

Everything printed is read from the files through the project's reader (`verdicts.read_claims` with the typed
per-claim details: the claim's per-model details: Kaplan-Meier medians with their
censoring, the AFT log-rank point estimates of the ratios with their intervals and one-sided p-values, the ratios of
KM medians beside them, the simulated error rates of the rule at each
comparison's shape, the per-model verdict and reason); nothing is recomputed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from brownformer.stats.claims.details import parse_details
from brownformer.verdicts import ClaimsFile, read_claims


def _median_text(m) -> str:
    censored = f" ({m.n_censored} of {m.n} censored)" if m.n_censored else ""
    return f"{m.text}{censored}"


def _ratio_text(r) -> str:
    lo, hi = r.confidence_interval
    hi_text = "inf" if hi is None else f"{hi:.3g}"
    lo_text = "0" if lo is None else f"{lo:.3g}"
    return f"{r.text} [{lo_text}, {hi_text}] (KM {r.km_median_ratio_text}), p {r.pvalue:.3g}"


def model_tables(label: str, claims: ClaimsFile) -> list[str]:
    """The lines of one run's claim-4 tables: the claim's verdict, then per model one row per target level."""
    c4 = claims.claims["4"]
    lines = [f"### {label}: claim 4 **{c4.verdict}**", "", c4.reason, ""]
    for model, rec in sorted(c4.per_model.items()):
        if model not in c4.details.scope:
            continue  # a model outside the claim's scope has no proposed-optimizer runs
        det = rec.details
        optimizers = [det.proposed, *det.baselines]
        rates = det.rule_error_rates.per_baseline if det.rule_error_rates else {}  # none when nothing decided
        lines += [f"#### {model}: **{rec.verdict}** (target {det.metric} {det.target})", "", rec.reason, "",
                  "| target level | " + " | ".join(f"KM median steps {o}" for o in optimizers) + " | "
                  + " | ".join(f"{det.proposed} / {b}: AFT estimate [95% CI] (ratio of KM medians), p(ratio >= margin)"
                               for b in det.baselines)
                  + " | best baseline |",
                  "|---" * (len(optimizers) + len(det.baselines) + 2) + "|"]
        for level, lv in sorted(det.levels.items(), key=lambda kv: float(kv[0])):
            meds = [_median_text(lv.km_median_steps[o]) for o in optimizers]
            ratios = [_ratio_text(lv.steps_ratios[b]) for b in det.baselines]
            lines.append(f"| {level} ({lv.target:.4g}) | " + " | ".join(meds + ratios) + f" | {lv.best_baseline} |")
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
