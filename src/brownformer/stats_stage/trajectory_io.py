"""Reading trajectory arrays (T, N, d) and their optional JSON sidecars (docs/ARTIFACTS.md)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from brownformer.io import sha256_file

log = logging.getLogger(__name__)

__all__ = ["load_trajectory", "validate_trajectory", "sha256_file", "KINDS"]

KINDS = ("sphere", "euclidean")


def validate_trajectory(X, *, kind: str, times=None) -> tuple[np.ndarray, np.ndarray]:
    """Check a trajectory array and its time axis; return float64 copies.

    Raises:
        ValueError: wrong ndim, fewer than 3 times or 4 walkers, non-finite values, unknown
            kind, times of the wrong length or not strictly increasing, zero vectors on the sphere.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    X = np.asarray(X)
    if X.ndim != 3:
        raise ValueError(f"trajectory must have shape (T, N, d) = (time, walkers, dims); got ndim={X.ndim}, shape={X.shape}")
    T, N, d = X.shape
    if T < 3:
        raise ValueError(f"trajectory needs at least 3 time points, got T={T}")
    if N < 4:  # cross-sectional standardisation and a bootstrap over walkers need a few of them
        raise ValueError(f"trajectory needs at least 4 walkers, got N={N}")
    if d < 1 or (kind == "sphere" and d < 2):
        raise ValueError(f"trajectory dimension d={d} too small for kind {kind!r} (a sphere needs d >= 2)")
    if not np.issubdtype(X.dtype, np.number) or np.iscomplexobj(X):
        raise ValueError(f"trajectory must be a real numeric array, got dtype {X.dtype}")
    X = X.astype(np.float64)
    bad = ~np.isfinite(X)
    if bad.any():
        cols = np.flatnonzero(bad.all(axis=(0, 1)))
        where = f" (dimension(s) {cols[:5].tolist()} entirely NaN/inf)" if cols.size else ""
        raise ValueError(f"trajectory contains {int(bad.sum())} non-finite values (NaN/inf){where}")
    if kind == "sphere" and (np.linalg.norm(X, axis=-1) == 0).any():
        raise ValueError("sphere trajectory contains zero vectors, which have no direction")
    if times is None:
        times = np.arange(T, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64).ravel()
    if times.shape != (T,):
        raise ValueError(f"times has length {times.size}, expected T={T}")
    if not np.all(np.isfinite(times)) or np.any(np.diff(times) <= 0):
        raise ValueError("times must be finite and strictly increasing")
    return X, times


def load_trajectory(path: str | Path, *, kind: str | None = None) -> tuple[np.ndarray, dict]:
    """Load FILE.npy and its optional sidecar FILE.json.

    Without a sidecar the kind defaults to "euclidean" and times to arange(T) (meta "time": "index"). An
    explicit `kind` overrides the sidecar's. meta "time" names the clock actually used: the sidecar's "time",
    or "times (unnamed clock)" when the sidecar gives times without naming them.

    Returns:
        (X, meta): X float64 of shape (T, N, d); meta with at least "kind", "time", "times", "path", "sha256".

    Raises:
        ValueError: unreadable file or an array that fails `validate_trajectory`.
    """
    path = Path(path)
    if path.suffix != ".npy":
        raise ValueError(f"{path}: expected a .npy file")
    try:
        X = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read as .npy ({exc})") from None
    sidecar = path.with_suffix(".json")
    meta: dict = {}
    if sidecar.exists():
        try:
            meta = json.loads(sidecar.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{sidecar}: invalid JSON ({exc})") from None
    meta = dict(meta)
    meta["kind"] = kind or meta.get("kind") or "euclidean"
    times = meta.get("times")
    # the clock actually used: the sidecar's name for its times, "times (unnamed clock)" when it gives times
    # without a name, "index" (0..T-1) only when there are no times
    if not meta.get("time") or (meta.get("time") == "index" and times is not None):
        meta["time"] = "index" if times is None else "times (unnamed clock)"
    if times is not None and len(times) != (X.shape[0] if X.ndim else -1):
        raise ValueError(f"{sidecar}: 'times' has {len(times)} entries, array has T={X.shape[0] if X.ndim else 0}")
    Xv, tv = validate_trajectory(X, kind=meta["kind"], times=times)
    meta["times"] = tv.tolist()
    meta["path"] = str(path)
    meta["sha256"] = sha256_file(path)
    meta["has_sidecar"] = sidecar.exists()
    log.debug("loaded %s shape=%s kind=%s", path, Xv.shape, meta["kind"])
    return Xv, meta
