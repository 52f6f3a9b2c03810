"""Shared helpers for the benchmark scripts: run one training job in a subprocess-safe way."""
from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import numpy as np
import yaml

from brownformer.config import apply_overrides, from_dict


def load_raw(path: str | Path) -> dict:
    with open(path) as fh:
        return yaml.safe_load(fh)


def one_run(raw: dict, model: str, optimizer: str, seed: int, lr: float, data_dir: str, threads: int = 1) -> dict:
    """Train (model, optimizer, seed) at learning rate `lr` without probes; return its metrics rows."""
    from brownformer.train import train_run

    raw = apply_overrides(copy.deepcopy(raw), [
        f"optimizers.{optimizer}.lr={lr}", f"seeds=[{seed}]", "probes.enabled=false",
        f"train.threads={threads}", f"grid=[{{models: [{model}], optimizers: [{optimizer}]}}]"])
    raw.setdefault("probes", {})
    cfg = from_dict(raw)
    run_id = f"{model}__{optimizer}__s{seed}"
    with tempfile.TemporaryDirectory() as tmp:
        metrics = train_run(cfg, run_id, data_dir, Path(tmp) / run_id, progress=False)
    return {"model": model, "optimizer": optimizer, "seed": seed, "lr": lr,
            "metrics": metrics.to_dict("list"), "finite": bool(np.isfinite(metrics["train_loss"]).all())}


def prepare_data(raw: dict, model: str, root: Path) -> str:
    from brownformer.data import prepare_dataset

    cfg = from_dict(copy.deepcopy(raw))
    ds = cfg.dataset_of(model)
    out = root / ds.name
    if not (out / "meta.json").exists():
        prepare_dataset(ds, out)
    return str(out)
