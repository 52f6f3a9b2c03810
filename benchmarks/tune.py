"""Equal-budget tuning: a shortcut for `brownformer tune` with the repository's paths.

    python benchmarks/tune.py [--config config/config.yaml] [--models ...] [--optimizers ...] [--workers 2]

Superseded by the `brownformer tune` subcommand (rule tune_optimizers), which this calls: the config's
`tuning` block (seeds disjoint from the grid's, the same number of trials per (model, optimizer), log
grids whose edge winners extend them, selection on steps to report.targets; docs/methods/claim4.md).
Writes results/tuning/tuned.yaml, the table benchmarks/results/tuning.md (+ .json) and rewrites the
config's `tuned:` block in place (`--no-into` to leave the config alone).
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--models", nargs="+")
    p.add_argument("--optimizers", nargs="+")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--data-root", default="results/data")
    p.add_argument("--out", default="results/tuning/tuned.yaml")
    p.add_argument("--table", default="benchmarks/results/tuning.md")
    p.add_argument("--no-into", action="store_true", help="do not rewrite the config's tuned block")
    args = p.parse_args(argv)
    from brownformer.cli import main as cli

    cmd = ["tune", "--config", args.config, "--out", args.out, "--table", args.table, "--data-root", args.data_root,
           "--workers", str(args.workers)]
    cmd += [] if args.no_into else ["--into", args.config]
    cmd += ["--models", *args.models] if args.models else []
    cmd += ["--optimizers", *args.optimizers] if args.optimizers else []
    return cli(cmd)


if __name__ == "__main__":
    sys.exit(main())
