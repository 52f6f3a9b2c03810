"""Cost of the statistics against the training they analyse, from one run's Snakemake benchmark files.

    python benchmarks/stats_cost.py --results results [--out benchmarks/results/stats_cost.json]

Reads RESULTS/benchmarks/<rule>/*.tsv (Snakemake `benchmark:` files; column "s" = wall seconds of one job),
sums the seconds per rule and prints the ratio (compute_stats + compute_replica_stats + calibrate_tests +
summarize_stats) / train_model. Target (issue 10): at most 0.5. The calibration's own seconds are listed
separately.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

STATS_RULES = ("compute_stats", "compute_replica_stats", "calibrate_tests", "summarize_stats")
TRAIN_RULE = "train_model"
TARGET_RATIO = 0.5


def rule_seconds(bench_dir: Path) -> dict[str, dict]:
    """{rule: {"seconds": total wall seconds, "jobs": number of benchmark files}} under bench_dir."""
    out: dict[str, dict] = {}
    for tsv in sorted(bench_dir.glob("*/*.tsv")):
        lines = tsv.read_text().strip().splitlines()
        if len(lines) < 2:
            continue
        header = lines[0].split("\t")
        if "s" not in header:
            raise ValueError(f"{tsv}: no 's' column (not a Snakemake benchmark file)")
        col = header.index("s")
        secs = sum(float(row.split("\t")[col]) for row in lines[1:])  # repeated benchmarks: one row each
        r = out.setdefault(tsv.parent.name, {"seconds": 0.0, "jobs": 0})
        r["seconds"] += secs
        r["jobs"] += 1
    return out


def cost_ratio(per_rule: dict[str, dict]) -> dict:
    """Statistics seconds, training seconds, their ratio and whether it meets TARGET_RATIO."""
    stats_s = sum(per_rule.get(r, {}).get("seconds", 0.0) for r in STATS_RULES)
    train_s = per_rule.get(TRAIN_RULE, {}).get("seconds", 0.0)
    ratio = stats_s / train_s if train_s > 0 else None
    return {"stats_seconds": stats_s, "train_seconds": train_s, "ratio": ratio, "target": TARGET_RATIO,
            "meets_target": ratio is not None and ratio <= TARGET_RATIO,
            "per_rule": {r: per_rule[r] for r in sorted(per_rule)},
            "calibration_seconds": per_rule.get("calibrate_tests", {}).get("seconds", 0.0)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=Path("results"), help="results root holding benchmarks/")
    p.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON here")
    args = p.parse_args(argv)
    bench = args.results / "benchmarks"
    if not bench.is_dir():
        print(f"stats_cost: {bench} does not exist (run the pipeline first)", file=sys.stderr)
        return 2
    res = cost_ratio(rule_seconds(bench))
    for rule, v in res["per_rule"].items():
        print(f"{rule:20s} {v['seconds']:9.1f} s  ({v['jobs']} jobs)")
    ratio = "n/a" if res["ratio"] is None else f"{res['ratio']:.2f}"
    print(f"statistics {res['stats_seconds']:.1f} s / training {res['train_seconds']:.1f} s = {ratio} "
          f"(target <= {TARGET_RATIO}; calibration {res['calibration_seconds']:.1f} s)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
