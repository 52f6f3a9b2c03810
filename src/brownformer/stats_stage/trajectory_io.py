"""Reading the statistics stage's inputs: a run's trajectories/index.json (`read_index`, its entries as `IndexEntry`),
trajectory arrays (T, N, d) with their optional JSON sidecars (docs/ARTIFACTS.md), the calibration table, and one
file's fitted null."""
from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np

from brownformer.io import find_sidecar, sha256_file
from brownformer.stats.diffusion.trajectory_inputs import TrajectorySidecar, analysis_inputs, validate_trajectory
from brownformer.statsfile import IndexEntry

log = logging.getLogger(__name__)

__all__ = ["IndexEntry", "read_index", "read_sidecar", "load_trajectory", "load_calibration", "fit_file_null"]


def read_index(traj_dir: Path) -> list[IndexEntry]:
    """The entries of traj_dir/index.json (ValueError naming the problem)."""
    index_path = Path(traj_dir) / "index.json"
    if not index_path.exists():
        raise ValueError(f"{index_path} does not exist")
    try:
        files = list(json.loads(index_path.read_text())["files"])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{index_path}: expected {{'files': [...]}} ({exc})") from None
    entries = [IndexEntry.from_dict(e, f"{index_path} files[{i}]") for i, e in enumerate(files)]
    missing = [i for i, e in enumerate(entries) if not e.path]
    if missing:
        raise ValueError(f"{index_path}: files{missing} have no 'path'")
    return entries


def read_sidecar(path: str | Path) -> TrajectorySidecar:
    """FILE.npy's sidecar, parsed once (an empty one when the file has none; ValueError on invalid JSON or an unknown
    key)."""
    side = find_sidecar(path)
    if side is None:
        return TrajectorySidecar()
    try:
        raw = json.loads(side.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{side}: invalid JSON ({exc})") from None
    return replace(TrajectorySidecar.from_dict(raw, str(side)), has_sidecar=True)


def load_trajectory(path: str | Path, *, kind: str | None = None) -> tuple[np.ndarray, TrajectorySidecar]:
    """Load FILE.npy and its optional sidecar FILE.json.

    Without a sidecar the kind defaults to "euclidean" and times to arange(T) (meta "time": "index"). An
    explicit `kind` overrides the sidecar's. meta.time names the clock actually used: the sidecar's "time",
    or "times (unnamed clock)" when the sidecar gives times without naming them.

    Returns:
        (X, meta): X float64 of shape (T, N, d); meta the sidecar parsed once (TrajectorySidecar), its kind, time,
        times, path, sha256 and has_sidecar set.

    Raises:
        ValueError: unreadable file, an array that fails `validate_trajectory`, or a sidecar with an unknown key.
    """
    path = Path(path)
    if path.suffix != ".npy":
        raise ValueError(f"{path}: expected a .npy file")
    try:
        X = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read as .npy ({exc})") from None
    sidecar = find_sidecar(path)
    meta = read_sidecar(path)
    times, time = meta.times, meta.time
    # the clock actually used: the sidecar's name for its times, "times (unnamed clock)" when it gives times
    # without a name, "index" (0..T-1) only when there are no times
    if not time or (time == "index" and times is not None):
        time = "index" if times is None else "times (unnamed clock)"
    if times is not None and len(times) != (X.shape[0] if X.ndim else -1):
        raise ValueError(f"{sidecar}: 'times' has {len(times)} entries, array has T={X.shape[0] if X.ndim else 0}")
    meta = replace(meta, kind=kind or meta.kind or "euclidean", time=time)
    Xv, tv = validate_trajectory(X, kind=meta.kind, times=times)
    meta = replace(meta, times=tv.tolist(), path=str(path), sha256=sha256_file(path), has_sidecar=sidecar is not None)
    log.debug("loaded %s shape=%s kind=%s", path, Xv.shape, meta.kind)
    return Xv, meta


def load_calibration(calibration):
    """A calibration table from a DataFrame or a parquet path (None when missing)."""
    if calibration is None or not isinstance(calibration, (str, Path)):
        return calibration
    p = Path(calibration)
    if not p.exists():
        return None
    import pandas as pd
    return pd.read_parquet(p)


def fit_file_null(path, *, stats, kind: str | None = None):
    """(fitted-null id, fitted_null.FittedNull) of one trajectory file, on the walkers the battery analyses."""
    from brownformer.stats.diffusion.fitted_null import fit_null, fitted_id
    from brownformer.stats.diffusion.local_slope import sidecar_window
    from brownformer.stats.diffusion.window_verdict import momentum_captures
    X, meta = momentum_captures(*load_trajectory(path, kind=kind), stats)  # the captures the verdict reads
    Xs, labels, times, inputs = analysis_inputs(X, meta, stats)
    beta = sidecar_window(meta, start_step=stats.window["start_step"], momentum_times=stats.momentum_times)[2]
    null = fit_null(Xs, kind=meta.kind, times=times, labels=labels, hyperplane=inputs.hyperplane,
                    drift=inputs.drift if meta.kind == "euclidean" else "none", momentum=beta,
                    steps=meta.step_clock(X.shape[0]), meta=meta)
    return fitted_id(meta.sha256, stats.seed, stats.max_walkers), null
