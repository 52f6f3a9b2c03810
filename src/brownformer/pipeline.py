"""Glue between stages that needs more than one subpackage (training with probes)."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

from brownformer.config import ExperimentConfig

log = logging.getLogger(__name__)

__all__ = ["train_with_probes"]


def train_with_probes(cfg: ExperimentConfig, run_id: str, data_dir: str | Path, out_dir: str | Path, *,
                      probes: bool = True, stop_after: int | None = None, progress: bool = True):
    """Train one run; attach the trajectory recorder when probes are enabled in the config."""
    from brownformer.data import load_prepared
    from brownformer.train import model_for_data, resolve_device, train_run

    spec = cfg.run(run_id)
    callbacks = []
    out_dir = Path(out_dir)
    ckpt, index = out_dir / "checkpoints" / "last.pt", out_dir / "probes" / "index.parquet"
    if probes and cfg.probes.enabled and ckpt.exists() and not index.exists():
        # A checkpoint whose probe index is gone (Snakemake deletes a job's outputs before rerunning it)
        # would resume with a store missing every earlier capture: start over so the store is complete.
        log.warning("%s: checkpoint without probe index; restarting from step 0", run_id)
        ckpt.unlink()
        shutil.rmtree(out_dir / "probes", ignore_errors=True)
    if probes and cfg.probes.enabled:
        from brownformer.probes import ProbeRecorder
        data = load_prepared(data_dir)
        device = resolve_device(cfg.device)
        recorder = ProbeRecorder(cfg, spec, data, Path(out_dir) / "probes", device,
                                 model_factory=lambda: model_for_data(cfg, spec.model, data).to(device))
        callbacks.append(recorder)
    return train_run(cfg, run_id, data_dir, out_dir, callbacks=callbacks, stop_after=stop_after, progress=progress)
