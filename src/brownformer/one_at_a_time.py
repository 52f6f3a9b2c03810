"""Several runs trained one at a time in one process, each as `brownformer train --run X --out DIR` trains it.

Claim 4 compares training wall-clock, so its timed runs train alone (brownformer.config.interleaved); a job per run
would pay a process start-up each (Python, `import torch`, the dataset). Here one process trains them in the given
order (an interleaved group's: seed-major across optimizers), each with `train_run` into its own run folder: the
same outputs, checkpoints, resume and rerun rules as the run in its own process, so its wall-clock is a lone run's.

A run whose outputs are already those of its current config (`run_folder.outputs_current`) is not trained again;
a half-trained one resumes from its checkpoint as `train_run` always does.

A process's first run pays nothing measurable inside its clock that the later ones do not: on vit-pre its first
step and its first ten steps cost no more CPU than a later run's, and the one-time costs of a process (imports, the
first model build: 1.7 CPU-s for the first K-FAC run) come before a run's clock starts. An untimed warm-up of each
optimizer before the first run, and a garbage collection between runs, were tried and changed nothing beyond the
noise of a shared machine, so the trainer does neither (benchmarks/results/interleave.md).
"""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from brownformer.config import ExperimentConfig
from brownformer.run_folder import outputs_current
from brownformer.train import StepCallback, train_plan

log = logging.getLogger(__name__)

__all__ = ["train_one_at_a_time"]


def train_one_at_a_time(cfg: ExperimentConfig, run_ids: list[str], data_dir: str | Path, runs_dir: str | Path, *,
                        probes: bool = False, callbacks: dict[str, list[StepCallback]] | None = None,
                        stop_after: int | None = None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Train `run_ids` in order, one after the other, each into runs_dir/<run_id> as `train_run` trains it.

    Args:
        cfg: the validated experiment config.
        run_ids: the runs, in training order; their models read one prepared dataset.
        data_dir: that dataset (results/data/<dataset>).
        runs_dir: the folder of their run folders (results/runs).
        probes: record each run's probes when the config probes it (as `train_run`).
        callbacks: run id -> extra callbacks of that run, called as in `train_run`.
        stop_after: stop each run (with a checkpoint) after this many steps, as if killed; for tests.
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
    out = {}
    for k, (run_id, plan) in enumerate(plans.items(), start=1):
        run_dir = Path(runs_dir) / run_id
        if outputs_current(plan, run_dir, probes=probes):
            log.info("[%d/%d] %s: outputs complete for its config; not trained again", k, len(plans), run_id)
            out[run_id] = pd.read_parquet(run_dir / "metrics.parquet")
            continue
        log.info("[%d/%d] %s: training into %s", k, len(plans), run_id, run_dir)
        out[run_id] = train_plan(plan, data_dir, run_dir, probes=probes, callbacks=(callbacks or {}).get(run_id),
                                 stop_after=stop_after, progress=progress)
    return out

