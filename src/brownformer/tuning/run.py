"""`brownformer tune`: the equal-budget tuning of every (model, optimizer) of the config's tuning block.

Each (model, optimizer) pair runs :func:`brownformer.tuning.search.coordinate_search` with
``tuning.trials`` trials; pairs run in parallel worker processes (each pair's search is sequential,
so the result does not depend on the scheduling). The winners are written as the config's ``tuned``
block (:mod:`brownformer.tuning.write`), with every trial in the tuning table.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from brownformer.config import ConfigError, ExperimentConfig

from .search import Outcome, bracket_status, coordinate_search
from .quasi_random import edge_probes, probed_status, quasi_random_search
from .space import Knob, TuningConfig, grid_value, optimizer_settings, start_settings, tuning_config
from .trial import run_trial
from .write import write_tables, write_tuned

log = logging.getLogger(__name__)

__all__ = ["PairResult", "tune_pair", "tune_optimizers", "dataset_dir"]


@dataclass(frozen=True)
class PairResult:
    """The search of one (model, optimizer): every trial, the winner and its knobs' bracket status."""

    model: str
    optimizer: str
    knobs: tuple[Knob, ...]
    start: dict
    trials: list = field(repr=False)  # [(grid index, settings, Outcome)], in the order they ran
    best: int  # position of the winner in `trials`
    status: list  # per knob: "bracketed" | "edge" | "not searched" (coordinate); "inside" | "edge" | "bound"
    seconds: float
    smoothed: list | None = None  # quasi-random: each trial's neighbourhood-smoothed score (the selection's)
    probes: tuple = ()  # quasi-random: the winner's edge knobs trained beyond their face (quasi_random.EdgeProbe)

    @property
    def best_settings(self) -> dict:
        return self.trials[self.best][1]

    @property
    def best_outcome(self) -> Outcome:
        return self.trials[self.best][2]


def _settings(knobs, start: dict, index) -> dict:
    return {k.key: grid_value(k, start[k.key], i) for k, i in zip(knobs, index)}


def tune_pair(raw: dict, model: str, optimizer: str, tc: TuningConfig, start: dict, data_dir: str,
              target: float, cache: Path | None = None) -> PairResult:
    """The search of one (model, optimizer): tuning/search.py's coordinate search or tuning/quasi_random.py's."""
    knobs = tc.knobs[optimizer]
    t0 = time.perf_counter()
    if tc.method == "quasi-random":
        base = raw.get("optimizers", {}).get(optimizer, {})

        def evaluate_at(values: dict) -> Outcome:
            settings = optimizer_settings(values, base)
            return run_trial(raw, model, optimizer, settings, tc.seeds, data_dir, target=target,
                             eval_every=tc.eval_every, incumbent=None, cache=cache)

        done, best, smooth = quasi_random_search(knobs, tc.trials, tc.search_seed, evaluate_at)
        trials = [(u, optimizer_settings(values, base), outcome) for u, values, outcome in done]
        probes = tuple(dataclasses.replace(p, outcome=evaluate_at(p.settings))
                       for p in edge_probes(knobs, done[best][0], done[best][1]))
        status = probed_status(knobs, done[best][0], probes, done[best][2], resolution=tc.eval_every)
        return PairResult(model, optimizer, knobs, start, trials, best, status, time.perf_counter() - t0,
                          smoothed=[float(x) for x in smooth], probes=probes)

    def evaluate(index, incumbent):
        return run_trial(raw, model, optimizer, _settings(knobs, start, index), tc.seeds, data_dir, target=target,
                         eval_every=tc.eval_every, incumbent=incumbent, cache=cache)

    done = coordinate_search(len(knobs), tc.trials, evaluate)
    trials = [(index, _settings(knobs, start, index), outcome) for index, outcome in done]
    best = min(range(len(trials)), key=lambda j: (trials[j][2].key, j))
    return PairResult(model, optimizer, knobs, start, trials, best, bracket_status(done, done[best][0]),
                      time.perf_counter() - t0)


def dataset_dir(cfg: ExperimentConfig, model: str, root: Path) -> str:
    """The prepared dataset of ``model`` under ``root`` (prepared there when missing)."""
    from brownformer.data import prepare_dataset

    ds = cfg.dataset_of(model)
    out = root / ds.name
    if not (out / "meta.json").exists():
        prepare_dataset(ds, out)
    return str(out)


def _job(args):
    return tune_pair(*args)


def tune_optimizers(cfg: ExperimentConfig, out: str | Path, table: str | Path, *, data_root: str | Path = "results/data",
                    into: str | Path | None = None, models=None, optimizers=None, workers: int = 1,
                    trials: int | None = None, source: str = "config",
                    cache: str | Path | None = None) -> list[PairResult]:
    """Tune every (model, optimizer) of the config's tuning block; write the ``tuned`` block and the table.

    Args:
        cfg: The experiment config (its ``tuning`` block, ``report.targets`` and training settings).
        out: YAML file that receives the ``tuned:`` block (the config's, with the tuned pairs replaced).
        table: Markdown tuning table (every trial); the same with suffix .json.
        data_root: Folder of the prepared datasets (prepared there when missing).
        into: A config file whose top-level ``tuned:`` block is rewritten in place (nothing else changes).
        models, optimizers: Restrict the tuning block to these.
        workers: Parallel (model, optimizer) searches.
        trials: Trials per (model, optimizer) instead of ``tuning.trials``.
        cache: Folder of finished seed runs (tuning.trial.run_seed): a rerun reuses them.
        source: The config's name, recorded in the outputs.

    Raises:
        ConfigError: on a bad tuning block (brownformer.tuning.space.tuning_config).
    """
    tc = tuning_config(cfg, models=models, optimizers=optimizers)
    if trials is not None:
        if trials < 1:
            raise ConfigError(f"--trials must be at least 1, got {trials}")
        tc = dataclasses.replace(tc, trials=int(trials))
    raw = copy.deepcopy(dict(cfg.raw))
    jobs = []
    for model in tc.models:
        data_dir = dataset_dir(cfg, model, Path(data_root))
        for optimizer in tc.optimizers:
            start = start_settings(cfg, tc, model, optimizer) if tc.method == "coordinate" else {}
            jobs.append((raw, model, optimizer, tc, start, data_dir, float(cfg.report.targets[model]),
                         None if cache is None else Path(cache)))
    # model by model (a tuning stopped early has every optimizer of the first models), K-FAC first within a model:
    # the longest searches start first, so the workers finish together
    order = sorted(range(len(jobs)), key=lambda j: (tc.models.index(jobs[j][1]), not jobs[j][2].startswith("kfac")))
    t0 = time.perf_counter()
    results: list[PairResult] = []

    def finished(result: PairResult) -> None:
        # written as each pair finishes: a tuning stopped early keeps every pair it completed
        results.append(result)
        write_tuned([result], cfg, out, into=into, source=source, table=table)
        write_tables([result], tc, cfg, table, source=source, wall_seconds=time.perf_counter() - t0, workers=workers)
        log.info("tuned %s %s: %s", result.model, result.optimizer, result.best_settings)

    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            for future in as_completed([pool.submit(_job, jobs[j]) for j in order]):
                finished(future.result())
    else:
        for j in order:
            finished(_job(jobs[j]))
    return results
