"""Several runs trained one at a time in one process, each as `brownformer train --run X --out DIR` trains it.

Claim 4 compares training wall-clock, so its timed runs train alone (brownformer.config.interleaved); a job per run
would pay a process start-up each (Python, `import torch`, the dataset). Here one process trains them in the given
order (an interleaved group's: seed-major across optimizers), each with `train_run` into its own run folder: the
same outputs, checkpoints, resume and rerun rules as the run in its own process, so its wall-clock is a lone run's.

A run whose outputs are already those of its current config (`run_folder.outputs_current`) is not trained again;
a half-trained one resumes from its checkpoint as `train_run` always does.

Warm-up. A process's first steps with an optimizer pay one-time costs the later runs of the process do not (lazy
imports and first calls inside torch.optim and K-FAC, kernel and allocator set-up): measured on vit-pre, the first
run's training loop took 7% (K-FAC), 3% (AdamW) and 26% (Muon) more CPU than the same run later in the process
(benchmarks/results/interleave.md). In a group that would bill them to the first seed of each optimizer only. So
before its first run the job trains each optimizer of the group `WARM_UP_STEPS` untimed steps (the settings of that
optimizer's first run, into a scratch folder that is then deleted, under a forked RNG): every run of the job then
starts warm and its seconds are the steady cost of its steps, for every optimizer and seed alike.
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import pandas as pd
import torch

from brownformer.config import ExperimentConfig, RunPlan
from brownformer.run_folder import outputs_current
from brownformer.train import StepCallback, train_plan

log = logging.getLogger(__name__)

__all__ = ["WARM_UP_STEPS", "train_one_at_a_time"]

#: untimed steps per optimizer before a job's first run: two of K-FAC's inverse updates (every 10 steps in the
#: default config) and a few evaluations, so every code path a run's steps take has run once
WARM_UP_STEPS = 20


def train_one_at_a_time(cfg: ExperimentConfig, run_ids: list[str], data_dir: str | Path, runs_dir: str | Path, *,
                        probes: bool = False, callbacks: dict[str, list[StepCallback]] | None = None,
                        stop_after: int | None = None, progress: bool = True,
                        warm_up: int = WARM_UP_STEPS) -> dict[str, pd.DataFrame]:
    """Train `run_ids` in order, one after the other, each into runs_dir/<run_id> as `train_run` trains it.

    Args:
        cfg: the validated experiment config.
        run_ids: the runs, in training order; their models read one prepared dataset.
        data_dir: that dataset (results/data/<dataset>).
        runs_dir: the folder of their run folders (results/runs).
        probes: record each run's probes when the config probes it (as `train_run`).
        callbacks: run id -> extra callbacks of that run, called as in `train_run`.
        stop_after: stop each run (with a checkpoint) after this many steps, as if killed; for tests.
        warm_up: untimed steps per optimizer before the first run that trains (0: none; benchmarks/interleave.py).
    Returns:
        Run id -> its metrics table (a run already complete: the one in its folder; cut short: its rows so far).
    Raises:
        ValueError: no runs, a run twice, or runs whose models read different datasets (naming them).
    """
    if not run_ids or len(set(run_ids)) != len(run_ids):
        raise ValueError(f"training one at a time needs distinct runs, got {list(run_ids)}")
    plans = {run_id: cfg.plan(run_id) for run_id in run_ids}
    datasets = {run_id: plan.model.dataset for run_id, plan in plans.items()}
    if len(set(datasets.values())) > 1:
        raise ValueError(f"runs trained one at a time read one prepared dataset; these read several: {datasets}")
    out, warm = {}, False
    for k, (run_id, plan) in enumerate(plans.items(), start=1):
        run_dir = Path(runs_dir) / run_id
        if outputs_current(plan, run_dir, probes=probes):
            log.info("[%d/%d] %s: outputs complete for its config; not trained again", k, len(plans), run_id)
            out[run_id] = pd.read_parquet(run_dir / "metrics.parquet")
            continue
        if not warm and warm_up > 0:
            _warm_up(list(plans.values()), data_dir, warm_up)
            warm = True
        log.info("[%d/%d] %s: training into %s", k, len(plans), run_id, run_dir)
        out[run_id] = train_plan(plan, data_dir, run_dir, probes=probes, callbacks=(callbacks or {}).get(run_id),
                                 stop_after=stop_after, progress=progress)
    return out


def _warm_up(plans: list[RunPlan], data_dir: str | Path, steps: int) -> None:
    """`steps` untimed steps of each optimizer of `plans` (its first run's plan), metrics only, in a scratch folder
    deleted after; the torch RNG is restored after (each run seeds its own anyway: `train.open_run`)."""
    first = {}
    for plan in plans:
        first.setdefault(plan.spec.optimizer, plan)
    with tempfile.TemporaryDirectory(prefix="warm_up_") as scratch, torch.random.fork_rng(devices=[]):
        for optimizer, plan in first.items():
            log.info("warm-up: %d untimed steps of %s (%s's settings)", steps, optimizer, plan.run_id)
            train_plan(plan, data_dir, Path(scratch) / plan.run_id, probes=False, stop_after=steps, progress=False)
