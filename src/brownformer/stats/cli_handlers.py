"""Handlers for `brownformer stats ...` subcommands; each takes an argparse Namespace and calls one library function.

Expected attributes: trajectory: file, kind, out; attention: file, features, out; run: traj_dir, out,
run_id, calibration; calibrate: out, replicates (optional); summary: runs (list of run stats dirs
or run_id=dir), calibration, out. `config` (an ExperimentConfig) is passed separately.
"""
from __future__ import annotations

import json
import logging
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from brownformer.io import atomic_path

from .brownian import analyze_trajectory
from .calibration import DEFAULT_SHAPES, run_calibration
from .markov import analyze_attention
from .pipeline import _write_json, stats_for_run, summarize
from .trajectory_io import load_trajectory, sha256_file

log = logging.getLogger(__name__)

__all__ = ["stats_trajectory", "stats_attention", "stats_run", "stats_calibrate", "stats_summary"]


def _stats_config(config):
    from brownformer.config import StatsConfig
    return getattr(config, "stats", None) or StatsConfig()


def stats_trajectory(args, config=None) -> dict:
    sc = _stats_config(config)
    X, meta = load_trajectory(args.file, kind=getattr(args, "kind", None))
    out = analyze_trajectory(X, kind=meta["kind"], times=meta["times"], confidence_level=sc.confidence_level,
                             n_resamples=sc.n_resamples, alpha=sc.alpha, margins=dict(sc.margins),
                             max_walkers=sc.max_walkers, rng=sc.seed)
    out["input"] = {"path": str(args.file), "sha256": meta["sha256"], "sidecar": meta["has_sidecar"]}
    _write_json(Path(args.out), out)
    return out


def stats_attention(args, config=None) -> dict:
    sc = _stats_config(config)
    try:
        A = np.load(args.file, allow_pickle=False)
        F = np.load(args.features, allow_pickle=False) if getattr(args, "features", None) else None
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read input: {exc}") from None
    out = analyze_attention(A, features=F, confidence_level=sc.confidence_level, rng=sc.seed)
    out["input"] = {"path": str(args.file), "sha256": sha256_file(args.file)}
    if F is not None:
        out["features_input"] = {"path": str(args.features), "sha256": sha256_file(args.features)}
    _write_json(Path(args.out), out)
    return out


def stats_run(args, config=None) -> dict:
    run_id = getattr(args, "run_id", None) or getattr(args, "run", None) or Path(args.traj_dir).parent.name
    return stats_for_run(args.traj_dir, args.out, config=_stats_config(config), run_id=run_id,
                         calibration=getattr(args, "calibration", None))


def _shapes_from_indexes(index_paths, max_walkers: int) -> list[tuple]:
    """Distinct (T, N, d, kind) of the trajectory files listed in trajectories/index.json files,
    with N capped at max_walkers as analyze_trajectory caps it (attention/noise files excluded)."""
    shapes = set()
    for index_path in index_paths:
        index_path = Path(index_path)
        for entry in json.loads(index_path.read_text())["files"]:
            if entry.get("category") not in ("depth", "training", "weights") or entry.get("tensor") == "ln_affine":
                continue  # after-affine LN output is analysed for claim 1 only, without the battery
            arr = np.load(index_path.parent / entry["path"], mmap_mode="r")
            if arr.ndim != 3:
                continue
            T, N, d = arr.shape
            if T < 3:  # too short for the battery; stats_for_run reports such files as errors
                continue
            shapes.add((int(T), int(min(N, max_walkers)), int(d), entry.get("kind", "euclidean")))
    return sorted(shapes)


def _calibrate_one(job):
    shape, seed, kwargs = job
    return run_calibration(shapes=[shape], rng=seed, **kwargs)


def stats_calibrate(args, config=None):
    sc = _stats_config(config)
    n = getattr(args, "replicates", None) or sc.calibration_replicates
    shapes = _shapes_from_indexes(getattr(args, "traj_index", None) or [], sc.max_walkers) or DEFAULT_SHAPES
    log.info("calibrating %d shapes x %d replicates: %s", len(shapes), n, shapes)
    kwargs = dict(n_replicates=n, alpha=sc.alpha, margins=dict(sc.margins), n_resamples=min(sc.n_resamples, 199))
    # One seed stream per shape ([seed, i]), so the table does not depend on how many workers ran it.
    jobs = getattr(args, "jobs", None) or 1
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        parts = list(pool.map(_calibrate_one, [(shape, [sc.seed, i], kwargs) for i, shape in enumerate(shapes)]))
    df = pd.concat(parts, ignore_index=True)
    with atomic_path(Path(args.out)) as tmp:
        df.to_parquet(tmp, index=False)
    return df


def stats_summary(args, config=None) -> dict:
    runs = {}
    if not getattr(args, "runs", None):
        if config is None:
            raise ValueError("stats summary needs --runs or a --config whose grid names the runs")
        args.runs = [f"{r.run_id}={Path(args.results) / 'runs' / r.run_id / 'stats'}" for r in config.runs()]
    for item in args.runs:
        run_id, _, path = str(item).partition("=")
        if not path:
            path = run_id
            p = Path(path)
            run_id = p.parent.name if p.name == "stats" else p.name
        runs[run_id] = path
    target = "adamw"
    if config is not None and getattr(config, "report", None):
        target = config.report.get("target_optimizer", target)
    return summarize(runs, getattr(args, "calibration", None), args.out, config=_stats_config(config),
                     target_optimizer=target)
