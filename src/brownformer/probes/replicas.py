"""Replica trajectories: R runs from one initialisation -> the drift (their mean path) and the diffusion around it.

Replicas share the initialisation and differ in data order (and dropout noise), so whatever they have in
common, the drift of training included, is the replica-mean path, and the training noise is what each replica
does around it. R replicas X_0..X_{R-1} (T, N, d) give R - 1 orthonormal contrasts (Helmert)

    C_c = sum_r H[c, r] X_r,    H (R - 1, R) with H 1 = 0 and H H^T = I,

the deviations X_r - mean_s X_s written in an orthonormal basis of the space they span. Any path common to the
replicas (a drift on whatever clock) cancels exactly (H 1 = 0); if X_r = drift + W_r with W_r independent and
identically distributed, the C_c are R - 1 independent copies of W (H H^T = I): no drift left to remove, no
correlation between the units. The plain deviations X_r - mean would carry a correlation -1/(R - 1) between
replicas; the contrasts are the same information with independent units.

Each contrast file is a trajectory of the project's contract (T, (R - 1) N, d): walker c*N + i is walker i of
contrast c, `groups` is the contrast index (the walkers of one contrast, every token of every probe input or
every row of one weight matrix, are dependent and resampled together), "drift": "none". Only captures of the
training-time analysis window are kept (after warm-up and the momentum time, spaced by it:
ExperimentConfig.analysis_window). The mean path is written beside (not listed in index.json).
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
from scipy.linalg import helmert

from brownformer.config import ExperimentConfig
from brownformer.io import sidecar_path, staged_folder, write_json
from brownformer.probes.capture_store import CaptureStore
from brownformer.probes.extract import PRIMARY_CLOCK
from brownformer.probes.layout import MATRICES

log = logging.getLogger(__name__)

__all__ = ["replica_contrasts", "replica_mean", "extract_replicas", "MIN_REPLICAS"]

MIN_REPLICAS = 4  # 3 contrasts: the fewest a t-interval over units (G - 1 degrees of freedom) can use

_DRIFT_REASON = ("none: the drift is the replica-mean path and the contrasts are orthogonal to it, so any path the "
                 "replicas share (a drift linear in lr_sum, lr_sq_sum or neither) cancels exactly")
_SPHERE_NOTE = ("ambient contrasts of points of radius ~1 in LayerNorm's hyperplane: they saturate (contrasts of "
                "unrelated unit vectors have a mean squared norm of 1), so claim 3's null is the contrasts of "
                "n_replicas spherical Brownian motions from a common start (contrast_of: sphere)")
_CLOCK_REASON = ("sum of lr^2: SGD noise adds a variance proportional to lr^2 per step, so under the Brownian null "
                 "the noise part of the weights (and of the tokens they move) diffuses linearly in this clock; "
                 "step and lr_sum ride along in 'clocks' as checks")


def replica_contrasts(X: np.ndarray) -> np.ndarray:
    """Helmert contrasts of R replicas: (R, T, N, d) -> (R - 1, T, N, d), orthonormal and orthogonal to the mean.

    C_c = sum_r H[c, r] X_r with H = scipy.linalg.helmert(R) (rows orthonormal, each summing to 0).

    Raises:
        ValueError: fewer than 2 replicas or not a 4-d array.
    """
    X = np.asarray(X)
    if X.ndim != 4 or X.shape[0] < 2:
        raise ValueError(f"replicas must have shape (R >= 2, T, N, d); got {X.shape}")
    H = helmert(X.shape[0]).astype(np.float64)  # (R - 1, R)
    return np.tensordot(H, X.astype(np.float64), axes=(1, 0))


def replica_mean(X: np.ndarray) -> np.ndarray:
    """The drift estimate: the replica-mean path (R, T, N, d) -> (T, N, d)."""
    return np.asarray(X, np.float64).mean(axis=0)


def _stack_contrasts(C: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """(R - 1, T, N, d) -> ((T, (R - 1) N, d) float32, groups): walker c*N + i is walker i of contrast c."""
    K, T, N, d = C.shape
    return np.ascontiguousarray(C.transpose(1, 0, 2, 3).reshape(T, K * N, d), dtype=np.float32), \
        np.repeat(np.arange(K), N).tolist()


def _open_stores(run_dirs: list[Path]) -> tuple[list[CaptureStore], list[dict]]:
    stores, metas = [], []
    for rd in run_dirs:
        store = CaptureStore(Path(rd) / "probes")
        meta = store.read_meta()
        if meta is None or store.index.empty:
            raise FileNotFoundError(f"{Path(rd) / 'probes'}: no captures (was the replica trained with probes?)")
        stores.append(store)
        metas.append(meta)
    ref = stores[0].index
    for rd, store in zip(run_dirs[1:], stores[1:]):
        same = len(store.index) == len(ref) and all(
            np.array_equal(store.index[c].to_numpy(), ref[c].to_numpy()) for c in ("capture", "step")) and all(
            np.allclose(store.index[c].to_numpy(), ref[c].to_numpy(), rtol=1e-12) for c in ("lr_sum", "lr_sq_sum"))
        if not same:
            raise ValueError(f"{rd}: its captures (steps or lr clocks) differ from {run_dirs[0]}'s; replicas must "
                             "share the capture schedule and the learning-rate schedule")
    return stores, metas


def _write_contrast(tmp: Path, rel: str, X: np.ndarray, sidecar: dict) -> dict:
    """Contrasts of X (R, T, N, d) to tmp/rel with their sidecar, the mean path to tmp/mean/rel; the index entry."""
    C = replica_contrasts(X)
    arr, groups = _stack_contrasts(C)
    for path, array in ((tmp / rel, arr), (tmp / "mean" / rel, replica_mean(X).astype(np.float32))):
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, array)
    spread = float(np.mean(np.sum(C[:, -1] ** 2, -1)))  # mean squared contrast norm at the last capture
    write_json(sidecar_path(tmp / rel), {**sidecar, "groups": groups, "n_groups": C.shape[0],
                                                  "final_spread": spread})
    src = sidecar["source"]
    return {"path": rel, "category": rel.split("/")[0], "kind": "euclidean", "time": PRIMARY_CLOCK,
            "layer": src["layer"], "tensor": src["tensor"], "capture": None, "unit": "replica"}


def _load_window(stores: list[CaptureStore], ks: list[int], meta: dict) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (R, T, L, B n, d) (LN output / sqrt(d)) and weights (R, T, L, 4, rows, cols) at captures ks."""
    L, d, B, n = meta["n_layers"], meta["d_model"], meta["n_inputs"], meta["n_tokens"]
    tokens, weights = [], []
    for store in stores:
        caps = [store.load(k) for k in ks]
        tokens.append(np.stack([c["ln_hat"].astype(np.float32).reshape(L, B * n, d) / math.sqrt(d) for c in caps]))
        weights.append(np.stack([c["weights"].astype(np.float32) for c in caps]))
    return np.stack(tokens), np.stack(weights)


def extract_replicas(cfg: ExperimentConfig, base_run: str, run_dirs: list[str | Path], out_dir: str | Path) -> dict:
    """Write the replica-contrast trajectories of one replica set (module docstring) and index.json.

    Args:
        cfg: the experiment config (its analysis window for the base run's optimizer).
        base_run: the grid run the replicas belong to ("<model>__<optimizer>__s<seed>").
        run_dirs: results/runs/<R> of replica 0 (the base run), 1, ..., R - 1, each with probes/.
        out_dir: the replica set's trajectories folder, replaced as a whole.
    Returns:
        The summary (also written to out_dir/summary.json).
    Raises:
        ValueError: fewer than MIN_REPLICAS replicas, or replicas whose capture schedules differ.
        FileNotFoundError: a replica without captures.
    """
    run_dirs = [Path(r) for r in run_dirs]
    R = len(run_dirs)
    if R < MIN_REPLICAS:
        raise ValueError(f"{base_run}: {R} replicas; at least {MIN_REPLICAS} are needed (R - 1 >= 3 contrasts)")
    stores, metas = _open_stores(run_dirs)
    meta, index = metas[0], stores[0].index
    window = cfg.analysis_window(base_run)
    steps = [int(s) for s in index["step"]]
    keep = window.select(steps)
    ks = [int(index["capture"].iloc[i]) for i in keep]
    clocks = {"step": [steps[i] for i in keep], "lr_sum": [float(index["lr_sum"].iloc[i]) for i in keep],
              "lr_sq_sum": [float(index["lr_sq_sum"].iloc[i]) for i in keep]}
    tokens, weights = _load_window(stores, ks, meta)
    window_info = {"start_step": window.start_step, "min_gap_steps": window.min_gap,
                   "momentum_steps": window.momentum_steps, "momentum_times": cfg.stats.momentum_times,
                   "captures": ks, "n_captures_run": len(steps)}
    common = {"kind": "euclidean", "time": PRIMARY_CLOCK, "times": clocks[PRIMARY_CLOCK], "clocks": clocks,
              "clock_reason": _CLOCK_REASON, "drift": "none", "drift_reason": _DRIFT_REASON, "unit": "replica",
              "n_replicas": R, "contrast": "helmert", "window": window_info, "replica_runs": [m["run"] for m in metas],
              "momentum": 1.0 - 1.0 / window.momentum_steps}  # the base run's beta: claim 3's null carries it

    def source(layer, tensor):
        return {"run": base_run, "layer": layer, "head": None, "tensor": tensor, "captures": ks, "steps": clocks["step"]}

    B, n, rows = meta["n_inputs"], meta["n_tokens"], weights.shape[-2]
    entries = []
    with staged_folder(out_dir) as tmp:
        for l in range(meta["n_layers"]):
            entries.append(_write_contrast(tmp, f"training/ln_l{l}.npy", tokens[:, :, l], {
                **common, "source": source(l, "ln"), "sphere_note": _SPHERE_NOTE, "contrast_of": "sphere",
                "sum_zero": True,
                "walkers": f"contrast c of {R} replicas (Helmert), walker c*{B * n} + i*{n} + t: token t of probe "
                           f"input i ({B} inputs x {n} tokens; LN output before the affine / sqrt(d))"}))
        for l in range(meta["n_layers"]):
            for j, m in enumerate(MATRICES):
                entries.append(_write_contrast(tmp, f"weights/l{l}_{m}.npy", weights[:, :, l, j], {
                    **common, "source": source(l, m), "projection": meta.get("projection"),
                    "walkers": f"contrast c of {R} replicas (Helmert), walker c*{rows} + r: row r of W_{m.upper()}; "
                               "the rows of one contrast are one group (they share inputs; K-FAC's factors mix them)"}))
        write_json(tmp / "index.json", {"run": base_run, "unit": "replica", "files": entries,
                                        "extra": {"mean": "mean/<path>: the replica-mean path (T, N, d), the drift"}})
        summary = {"run": base_run, "n_replicas": R, "replica_runs": common["replica_runs"], "n_files": len(entries),
                   "window": window_info}
        write_json(tmp / "summary.json", summary)
    log.info("%s: %d replica-contrast files from %d replicas, %d captures in the window", base_run, len(entries), R,
             len(ks))
    return summary
