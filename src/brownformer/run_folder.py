"""A run folder on disk: its checkpoint (resume, and when a rerun drops it), metrics.parquet and manifest.json.

`brownformer.train` (one run) and `brownformer.ensemble` (several as one batched model) write the same files
the same way, so a run's folder reads the same however it was trained, and either resumes the other's checkpoint.
"""
from __future__ import annotations

import json
import logging
import math
import shutil
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import torch

from brownformer.config import RunPlan
from brownformer.io import atomic_path, write_json
from brownformer.manifest import build_manifest, device_description
from brownformer.metrics import val_metric_for_kind
from brownformer.probes.capture_store import INDEX_FILE, META_FILE, CaptureStore
from brownformer.target_stop import BUDGET, STOPPED

log = logging.getLogger(__name__)

__all__ = ["save_checkpoint", "restart_if_probe_store_incomplete", "resume_state", "restart_if_rerun",
           "write_run_outputs", "outputs_current", "RUN_OUTPUTS"]

#: the files a finished run leaves in its folder (the pipeline's training outputs)
RUN_OUTPUTS = ("metrics.parquet", "manifest.json", f"probes/{INDEX_FILE}")


def save_checkpoint(path: Path, state: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def _write_metrics(path: Path, rows: list[dict]) -> None:
    with atomic_path(path) as tmp:
        pd.DataFrame(rows).to_parquet(tmp, index=False)


def restart_if_probe_store_incomplete(out_dir: Path, run_id: str) -> None:
    """Delete a checkpoint whose capture store cannot come out complete, so that training restarts.

    Snakemake deletes a job's outputs (probes/index.parquet among them) before rerunning it, but the
    checkpoint stays; resuming from it would leave the store without every earlier capture. A store
    without meta.json (which the recorder writes before any step) is the empty index of a metrics-only
    run: resuming a run that is now probed from its checkpoint would miss those captures too.
    """
    ckpt, store = out_dir / "checkpoints" / "last.pt", out_dir / "probes"
    if ckpt.exists() and not ((store / INDEX_FILE).exists() and (store / META_FILE).exists()):
        log.warning("%s: checkpoint without a probe store; restarting from step 0", run_id)
        ckpt.unlink()
        shutil.rmtree(out_dir / "probes", ignore_errors=True)


def resume_state(ckpt_path: Path, plan: RunPlan, device: torch.device) -> dict | None:
    """The run's checkpoint to resume from, or None when there is none.

    Raises:
        RuntimeError: the checkpoint was written under another run slice (`RunPlan.run_hash`).
    """
    if not ckpt_path.exists():
        return None
    state = torch.load(ckpt_path, map_location=device, weights_only=False)
    if state["config_hash"] != plan.run_hash:
        raise RuntimeError(f"{ckpt_path} was written with another config (hash {state['config_hash'][:12]}); "
                           "delete the run folder to start over")
    return state


def restart_if_rerun(out_dir: Path, run_id: str, steps: int) -> None:
    """Delete a finished run's checkpoint when its metrics.parquet is gone, so that training starts over.

    A killed run never wrote metrics.parquet and its checkpoint is short of the end: it resumes. A finished
    checkpoint (last step reached, or stopped at the target) beside no metrics.parquet means the outputs were
    removed to train the run again (Snakemake deletes a job's outputs before it reruns the job: --forcerun, an
    input that changed); resuming would train nothing. Its captures go too: the rerun records them afresh.
    """
    ckpt = out_dir / "checkpoints" / "last.pt"
    if not ckpt.exists() or (out_dir / "metrics.parquet").exists():
        return
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    if state["step"] >= steps or state.get(STOPPED, False):
        log.warning("%s: finished checkpoint without metrics.parquet (a rerun); training from step 0", run_id)
        ckpt.unlink()
        shutil.rmtree(out_dir / "probes", ignore_errors=True)


def outputs_current(plan: RunPlan, out_dir: Path, *, probes: bool) -> bool:
    """Whether the run folder holds the finished outputs of `plan` as it stands: every file of RUN_OUTPUTS, a
    manifest written under the run's slice (`RunPlan.run_hash`, as `resume_state` checks a checkpoint's) and,
    when the run is to capture probes (`probes` and `plan.probed`), a capture store the recorder opened."""
    if not all((out_dir / name).is_file() for name in RUN_OUTPUTS):
        return False
    if probes and plan.probed and not (out_dir / "probes" / META_FILE).is_file():
        return False
    return json.loads((out_dir / "manifest.json").read_text()).get("run_hash") == plan.run_hash


def write_run_outputs(plan: RunPlan, out_dir: Path, rows: list[dict], *, kind: str, probing: bool,
                      stopped: bool, end_step: int, wall: float, flags: dict, device: torch.device,
                      n_parameters: int, ensemble: list[str] | None = None) -> pd.DataFrame:
    """A finished run's outputs: metrics.parquet, the (empty, when not probing) probe index and manifest.json.

    `plan` is the run's (`ExperimentConfig.plan`), `kind` its data's ("image", "text"); `ensemble` names the runs
    it trained with in one batched model (brownformer.ensemble), None when it trained alone.
    """
    spec, tcfg, target, target_metric = plan.spec, plan.train, plan.stop_target, val_metric_for_kind(kind)
    if target is not None:  # brownformer.target_stop: every row of such a run says whether it stopped early
        rows = [{**row, STOPPED: stopped, BUDGET: tcfg.steps} for row in rows]
    metrics = pd.DataFrame(rows)
    _write_metrics(out_dir / "metrics.parquet", rows)
    if not probing:  # the pipeline declares the index a training output; an existing one keeps its rows
        CaptureStore(out_dir / "probes").write_index()
    write_json(out_dir / "manifest.json", build_manifest(
        run_id=plan.run_id, run={"model": spec.model, "optimizer": spec.optimizer, "seed": spec.seed,
                                 "replica": spec.replica},
        config_hash=plan.config_hash, run_hash=plan.run_hash,
        config={"model": asdict(plan.model), "optimizer": asdict(plan.optimizer), "train": asdict(tcfg)},
        seeds=plan.seeds.manifest(),
        determinism=flags, device=device_description(device), wall_time_s=wall,
        steps=tcfg.steps, steps_trained=end_step,
        stopped_at_target=({"step": end_step, "target": target, "metric": target_metric.column} if stopped else None),
        n_parameters=n_parameters, **({"ensemble": ensemble} if ensemble else {}),
        final={k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rows[-1].items()} if rows else {}))
    log.info("%s: done in %.1fs, final %s", plan.run_id, wall, rows[-1] if rows else {})
    return metrics
