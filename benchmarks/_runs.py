"""Shared helpers for the benchmark scripts: run one training job in a subprocess-safe way."""
from __future__ import annotations

import argparse
import copy
import tempfile
from concurrent.futures import ProcessPoolExecutor
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


def base_parser(description: str, *, seeds: list[int], out: str) -> argparse.ArgumentParser:
    """Arguments every training benchmark takes (config, model, optimizers, seeds, workers, output)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--model", default="vit-pre")
    p.add_argument("--optimizers", nargs="+", default=["sgd", "adamw", "muon", "kfac-eigen", "kfac-iterative"])
    p.add_argument("--seeds", nargs="+", type=int, default=seeds)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--data-root", default="results/data")
    p.add_argument("--out", default=out)
    return p


def run_grid(args, lr_factors=(1.0,)) -> tuple[dict, list[dict]]:
    """Train every (optimizer, lr factor, seed) of args in parallel; return the raw config and results."""
    raw = load_raw(args.config)
    data_dir = prepare_data(raw, args.model, Path(args.data_root))
    jobs = [(raw, args.model, o, s, raw["optimizers"][o]["lr"] * f, data_dir)
            for o in args.optimizers for f in lr_factors for s in args.seeds]
    with ProcessPoolExecutor(args.workers) as pool:
        return raw, list(pool.map(one_run, *zip(*jobs)))
