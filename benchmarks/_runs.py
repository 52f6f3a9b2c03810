"""Shared helpers for the benchmark scripts: run training jobs without probes, in parallel."""
from __future__ import annotations

import argparse
import copy
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import yaml
from tqdm.auto import tqdm

from brownformer.config import apply_overrides, from_dict


#: optimizer types that precondition with K-FAC (the eigen-decomposition and the conjugate-gradient inverse)
KFAC = ("kfac-eigen", "kfac-iterative")


def load_raw(path: str | Path) -> dict:
    with open(path) as fh:
        return yaml.safe_load(fh)


def one_run(raw: dict, model: str, optimizer: str, seed: int, settings: dict | float, data_dir: str,
            threads: int = 1, overrides: tuple[str, ...] = ()) -> dict:
    """Train (model, optimizer, seed) with ``settings`` (a dict, or a bare learning rate) written to
    ``tuned.<model>.<optimizer>`` so the config's resolver applies them, and extra ``overrides``;
    no probes. Returns the metrics rows."""
    from brownformer.train import train_run

    settings = dict(settings) if isinstance(settings, dict) else {"lr": float(settings)}
    sets = [f"tuned.{model}.{optimizer}.{k}={v}" for k, v in settings.items()]
    raw = apply_overrides(copy.deepcopy(raw), sets + [
        f"seeds=[{seed}]", "probes.enabled=false", f"train.threads={threads}",
        f"grid=[{{models: [{model}], optimizers: [{optimizer}]}}]", *overrides])
    raw.setdefault("probes", {})
    cfg = from_dict(raw)
    run_id = f"{model}__{optimizer}__s{seed}"
    with tempfile.TemporaryDirectory() as tmp:
        metrics = train_run(cfg, run_id, data_dir, Path(tmp) / run_id, progress=False)
    return {"model": model, "optimizer": optimizer, "seed": seed, "settings": settings, "lr": settings.get("lr"),
            "overrides": list(overrides), "metrics": metrics.to_dict("list"),
            "finite": bool(np.isfinite(metrics["train_loss"]).all())}


def prepare_data(raw: dict, model: str, root: Path) -> str:
    from brownformer.data import prepare_dataset

    cfg = from_dict(copy.deepcopy(raw))
    ds = cfg.dataset_of(model)
    out = root / ds.name
    if not (out / "meta.json").exists():
        prepare_dataset(ds, out)
    return str(out)


def model_steps(raw: dict, model: str) -> int:
    """Training steps of ``model``: its own ``steps``, else the config's ``train.steps``."""
    return int(raw["models"][model].get("steps") or raw["train"]["steps"])


def run_cost(raw: dict, model: str) -> int:
    """A run's relative cost (steps x layers): the scripts start the longest runs first so workers finish together."""
    return model_steps(raw, model) * int(raw["models"][model]["n_layers"])


def grid_pairs(raw: dict) -> list[tuple[str, str]]:
    """Every (model, optimizer) pair of the config's grid, in order, without duplicates."""
    pairs: dict = {}
    for block in raw["grid"]:
        for m in block["models"]:
            for o in block["optimizers"]:
                pairs.setdefault((m, o), None)
    return list(pairs)


def base_parser(description: str, *, seeds: list[int], out: str) -> argparse.ArgumentParser:
    """Arguments every training benchmark takes (config, models, optimizers, seeds, workers, output)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--models", nargs="+", help="default: every model of the config's grid")
    p.add_argument("--optimizers", nargs="+", help="default: every optimizer the grid runs on each model")
    p.add_argument("--seeds", nargs="+", type=int, default=seeds)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--data-root", default="results/data")
    p.add_argument("--out", default=out)
    return p


def run_jobs(jobs: list[tuple], workers: int, *, fn=one_run, desc: str | None = None) -> list[dict]:
    """Run ``fn(*job)`` (default :func:`one_run`; any picklable top-level function) for every job in a
    process pool; results in job order. ``desc`` shows a progress bar (stderr) under that label."""
    with ProcessPoolExecutor(workers) as pool:
        futures = [pool.submit(fn, *job) for job in jobs]
        for _ in tqdm(as_completed(futures), total=len(futures), desc=desc, disable=desc is None):
            pass
        return [f.result() for f in futures]
