"""One trial of the tuning: a setting trained on each tuning seed, each run stopped at the target.

A seed run trains the model exactly as a metrics-only run of the grid does (the config's steps,
batch, schedule, clipping, evaluation on the validation batches every ``eval_every`` steps) with
the trial's setting written to ``tuned.<model>.<optimizer>``, and stops at its first evaluation whose
running median (brownformer.target_stop.smoothed, as claim 4 reads it) is on the target (its time), at a non-finite training loss (it diverged: censored), or, when an incumbent
exists, once the trial's mean time can no longer match the incumbent's even if every remaining seed
reached the target at its first evaluation (it cannot win: the remaining seeds are skipped). Deterministic given the config: the incumbent a trial
sees depends only on the trials of its own (model, optimizer) before it.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import tempfile
import time
from pathlib import Path

from brownformer.config import config_hash, from_dict
from brownformer.metrics import METRIC_PREFERENCE, val_metric
from brownformer.target_stop import on_smoothed_target, smoothed

from .search import Outcome, capped_time, outcome_of

log = logging.getLogger(__name__)

__all__ = ["trial_config", "run_seed", "run_trial", "cached_row_path"]


def trial_config(raw: dict, model: str, optimizer: str, settings: dict, seed: int, eval_every: int):
    """The config of one seed run: the trial's settings in ``tuned``, one metrics-only grid block."""
    raw = copy.deepcopy(dict(raw))
    raw.pop("tuning", None)
    tuned = raw.setdefault("tuned", {}) or {}
    raw["tuned"] = tuned
    tuned.setdefault(model, {})[optimizer] = {**tuned.get(model, {}).get(optimizer, {}), **settings}
    raw["seeds"] = [seed]
    raw["seed_offset"] = 0  # the tuning's seeds are its own: a replication on shifted seeds keeps the tuned settings
    raw["grid"] = [{"models": [model], "optimizers": [optimizer], "seeds": [seed], "probes": False,
                    "eval_every": eval_every}]
    raw.setdefault("probes", {})["enabled"] = False
    return from_dict(raw)


def run_seed(raw: dict, model: str, optimizer: str, settings: dict, seed: int, data_dir: str, *, target: float,
             eval_every: int, stop_at: float | None, cache: Path | None = None) -> dict:
    """Train one seed of a trial (module docstring); returns its row for the tuning table.

    With ``cache`` (a folder) the row is kept there under the hash of everything that determines it (the run's
    config slice, the target, the early stop), and a later call with the same key returns it without training:
    a tuning stopped and rerun, e.g. with fewer trials, does not train its finished seeds again. The key does not
    cover the code: a cache is for reruns of one checkout."""
    cfg = trial_config(raw, model, optimizer, settings, seed, eval_every)
    run_id = f"{model}__{optimizer}__s{seed}"
    if cache is None:
        return _train_seed(cfg, run_id, data_dir, target=target, eval_every=eval_every, stop_at=stop_at)
    path = _row_path(cache, cfg, run_id, target, stop_at)
    if path.is_file():
        return json.loads(path.read_text())
    row = _train_seed(cfg, run_id, data_dir, target=target, eval_every=eval_every, stop_at=stop_at)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row))
    tmp.replace(path)  # whole or absent: a tuning killed mid-write leaves no half row
    return row


def cached_row_path(cache: Path, raw: dict, model: str, optimizer: str, settings: dict, seed: int, *, target: float,
                    eval_every: int, stop_at: float | None) -> Path:
    """Where `run_seed` keeps (or finds) this seed run's row in ``cache``."""
    cfg = trial_config(raw, model, optimizer, settings, seed, eval_every)
    return _row_path(cache, cfg, f"{model}__{optimizer}__s{seed}", target, stop_at)


def _row_path(cache: Path, cfg, run_id: str, target: float, stop_at: float | None) -> Path:
    return Path(cache) / f"{config_hash({'run': cfg.run_slice(run_id), 'target': target, 'stop_at': stop_at})}.json"


def _train_seed(cfg, run_id: str, data_dir: str, *, target: float, eval_every: int, stop_at: float | None) -> dict:
    from brownformer.train import train_run

    seen: list[dict] = []

    def stop_when(row: dict) -> bool:
        seen.append(row)
        if not math.isfinite(row["train_loss"]):
            return True  # diverged: censored
        m = next((m for m in METRIC_PREFERENCE if not math.isnan(row.get(m.column, math.nan))), None)
        if m is None:
            return False  # a log row without evaluation
        if on_smoothed_target(seen, target, m):  # the crossing claim 4 reads: the running median on the target
            return True
        return stop_at is not None and row["step"] >= stop_at

    start, cpu_start = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        metrics = train_run(cfg, run_id, data_dir, Path(tmp) / run_id, stop_when=stop_when, progress=False)
    m = val_metric(metrics)
    evals = metrics.dropna(subset=[m.column])
    value = smoothed(evals[m.column].to_numpy(float)).to_numpy()
    hit = evals[value >= target] if m.higher_is_better else evals[value <= target]
    last = evals.iloc[-1] if len(evals) else None
    steps_run = int(metrics["step"].iat[-1]) if len(metrics) else 0
    budget = cfg.plan(run_id).train.steps
    diverged = bool(len(metrics)) and not math.isfinite(float(metrics["train_loss"].iat[-1]))
    value = float(last[m.column]) if last is not None else math.nan
    sign = 1.0 if m.higher_is_better else -1.0
    return {"seed": cfg.seeds[0], "reached": not hit.empty, "steps": float(hit["step"].iat[0]) if len(hit) else math.nan,
            "steps_run": steps_run, "censored_at": float(budget + eval_every), "metric_value": value, "metric": sign * value if math.isfinite(value) else -math.inf,
            "diverged": diverged, "stopped": hit.empty and not diverged and steps_run < budget,
            "seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu_start}


def run_trial(raw: dict, model: str, optimizer: str, settings: dict, seeds, data_dir: str, *, target: float,
              eval_every: int, incumbent: Outcome | None, cache: Path | None = None) -> Outcome:
    """Every tuning seed of one setting, with early stopping against the incumbent (module docstring)."""
    best = incumbent.score if incumbent is not None and math.isfinite(incumbent.score) else None
    n, rows = len(seeds), []
    for k, seed in enumerate(seeds):
        stop_at = None
        if best is not None:
            # the largest time this seed may take so that the mean can still match the incumbent's, the seeds
            # after it reaching the target at their first evaluation
            stop_at = n * best - sum(capped_time(r) for r in rows) - (n - k - 1) * eval_every
            if stop_at < eval_every:
                break  # it cannot win even if this seed reached the target at its first evaluation
        row = run_seed(raw, model, optimizer, settings, seed, data_dir, target=target, eval_every=eval_every,
                       stop_at=stop_at, cache=cache)
        rows.append(row)
        log.info("%s %s %s seed %d: %s", model, optimizer, settings, seed,
                 f"target at step {row['steps']:g}" if row["reached"] else f"no target by step {row['steps_run']}")
        if row["stopped"]:
            break
    outcome = outcome_of(rows, n, settings.get("lr", math.nan))
    if best is not None and outcome.complete and outcome.score > best:
        outcome = dataclasses.replace(outcome, complete=False)  # cannot win: ranks after every complete trial
    return outcome
