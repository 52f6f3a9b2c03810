"""Fill `brownformer tune --cache` breadth first: trial 1 of every (model, optimizer), then trial 2, ...

    PYTHONPATH=src nice python benchmarks/tune_warm_cache.py --config config/config.yaml \
        --cache results/tuning/seed_cache --workers 2

`brownformer tune` searches one (model, optimizer) at a time, so a tuning stopped for lack of time has some pairs
at all their trials and others at none. This trains the same seed runs (tuning.trial.run_seed, the same settings
the quasi-random search draws) in trial-major order into the cache: when stopped after k complete rounds,
`brownformer tune --trials k --cache ...` reads every run from the cache and gives every optimizer the same k
trials, none trained twice. Prints each round as it completes; ``--count`` prints how many rounds the cache holds.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from brownformer.config import load_config
from brownformer.tuning.quasi_random import halton_points, unit_to_value
from brownformer.tuning.run import dataset_dir
from brownformer.tuning.space import optimizer_settings, tuning_config
from brownformer.tuning.trial import cached_row_path, run_seed


def seed_jobs(cfg, *, data_root: Path, cache: Path, trials: int) -> list[tuple[int, tuple, dict]]:
    """(trial, run_seed args, kwargs) for every seed run of `trials` trials per pair, trial-major."""
    tc = tuning_config(cfg)
    raw = copy.deepcopy(dict(cfg.raw))
    data = {m: dataset_dir(cfg, m, data_root) for m in tc.models}
    points = {o: halton_points(len(tc.knobs[o]), trials, tc.search_seed) for o in tc.optimizers}
    jobs = []
    for j in range(trials):
        for m in tc.models:
            for o in tc.optimizers:
                values = {k.key: unit_to_value(k, float(u)) for k, u in zip(tc.knobs[o], points[o][j])}
                settings = optimizer_settings(values, raw.get("optimizers", {}).get(o, {}))
                for s in tc.seeds:
                    jobs.append((j, (raw, m, o, settings, s, data[m]),
                                 dict(target=float(cfg.report.targets[m]), eval_every=tc.eval_every, stop_at=None,
                                      cache=cache)))
    return jobs


def complete_rounds(jobs) -> int:
    """How many leading rounds have every seed run in the cache (what `brownformer tune --trials` may read)."""
    done: dict[int, bool] = {}
    for j, args, kwargs in jobs:
        done[j] = done.get(j, True) and cached_row_path(kwargs["cache"], *args[:5], target=kwargs["target"],
                                                        eval_every=kwargs["eval_every"], stop_at=None).is_file()
    return next((j for j in sorted(done) if not done[j]), len(done))


def _run(job):
    _, args, kwargs = job
    return run_seed(*args, **kwargs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--cache", type=Path, required=True)
    p.add_argument("--data-root", type=Path, default=Path("results/data"))
    p.add_argument("--trials", type=int, default=None, help="default: tuning.trials")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--count", action="store_true", help="train nothing: print how many rounds the cache completes")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    trials = args.trials or tuning_config(cfg).trials
    jobs = seed_jobs(cfg, data_root=args.data_root, cache=args.cache, trials=trials)
    if args.count:
        print(f"{complete_rounds(jobs)} of {trials} rounds complete")
        return 0
    per_round = len(jobs) // trials
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:  # FIFO: the rounds finish in order
        for k, _ in enumerate(pool.map(_run, jobs), 1):
            if k % per_round == 0:
                print(f"round {k // per_round} of {trials} complete ({k} seed runs, "
                      f"{time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
