"""A trajectory array checked (`validate_trajectory`), its sidecar parsed once (`TrajectorySidecar`), and the
Brownian battery's inputs read from it.

Pure functions of arrays and sidecars; reading the files is brownformer.stats_stage.trajectory_io.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from brownformer.stats.core.bootstrap import group_labels
from brownformer.stats.core.shapes import select_walkers

__all__ = ["validate_trajectory", "TrajectorySidecar", "SidecarWindow", "battery_inputs", "BatteryInputs", "analysis_inputs", "KINDS"]

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


#: Sidecar keys that describe the array for people (docs/ARTIFACTS.md) and that no statistic reads: kept as written
#: in `TrajectorySidecar.described`.
_DESCRIBED = ("note", "drift_reason", "radius", "ln_none_flag", "features", "groups_reason",
              "samples_independent_across_time", "unit", "contrast", "replica_runs", "n_groups", "final_spread",
              "model", "depth_steps", "depth_steps_note", "norm_kind", "sphere_note")


@dataclass(frozen=True)
class SidecarWindow:
    """A replica file's analysis window as its sidecar records it (probes/replicas.py; its base run's, chosen when
    the captures were): the first step, the least gap between captures, the momentum time in steps, the
    momentum_times it was chosen with, the captures kept and how many the run had. A key a sidecar lacks is None."""

    start_step: int | None = None
    min_gap_steps: int | None = None
    momentum_steps: float | None = None
    momentum_times: float | None = None
    captures: list | None = None
    n_captures_run: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping | SidecarWindow, where: str = "sidecar window") -> SidecarWindow:
        if isinstance(d, cls):
            return d
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}")
        return cls(**d)


@dataclass(frozen=True)
class TrajectorySidecar:
    """A trajectory file's sidecar (docs/ARTIFACTS.md; probes/extract.py, probes/replicas.py and pretrained/ write
    it) as the statistics read it, parsed once. Every key is optional (an array may come without a sidecar); the
    loader (stats_stage.trajectory_io.load_trajectory) adds `path`, `sha256` and `has_sidecar`.

    Attributes:
        kind: "sphere" | "euclidean"; time: the clock's name; times: its values, one per capture.
        clocks: every recorded clock by name (training files; "step" among them); clock_reason, warmup: why.
        momentum: the optimizer's heavy-ball beta; window: a replica file's analysis window (its base run's).
        groups, n_inputs, n_tokens: dependent walkers; cls_index: the CLS token's position; walkers: their description.
        sum_zero: vectors in LayerNorm's hyperplane; ln: where LayerNorm sits; drift, drift_clock: drift handling.
        n_replicas, contrast_of: a replica-contrast file; step, source, causal, axes, vocab_size: where it came from;
        projection: how weights were stored (random projections when "projected").
        described: the descriptive keys (`_DESCRIBED`), as written.
    """

    kind: str | None = None
    time: str | None = None
    times: list | None = None
    clocks: Mapping[str, list] | None = None
    clock_reason: str | None = None
    warmup: Any = None
    momentum: float | None = None
    window: SidecarWindow | None = None
    groups: list | None = None
    n_inputs: int | None = None
    n_tokens: int | None = None
    cls_index: int | None = None
    walkers: str | None = None
    sum_zero: bool | None = None
    ln: str | None = None
    drift: str | None = "common"
    drift_clock: str | None = None
    n_replicas: int | None = None
    contrast_of: str | None = None
    step: int | None = None
    source: Mapping[str, Any] | None = None
    causal: bool | None = None
    axes: Any = None
    vocab_size: int | None = None
    projection: Mapping[str, Any] | None = None
    path: str | None = None
    sha256: str | None = None
    has_sidecar: bool = False
    described: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping, where: str = "sidecar") -> TrajectorySidecar:
        """The sidecar from its JSON (ValueError naming `where` and any unknown key); a TrajectorySidecar is taken
        as it is, None is an absent sidecar."""
        if isinstance(d, cls):
            return d
        d = dict(d or {})
        names = {f.name for f in fields(cls)} - {"described"}
        unknown = sorted(set(d) - names - set(_DESCRIBED))
        if unknown:
            raise ValueError(f"{where}: unknown sidecar key(s) {unknown}")
        described = {k: d.pop(k) for k in _DESCRIBED if k in d}
        if d.get("window") is not None:
            d["window"] = SidecarWindow.from_dict(d["window"], f"{where}.window")
        return cls(**d, described=described)

    @property
    def captures(self) -> list:
        """The capture indices the array holds (its "source"), [] when not recorded."""
        return list((self.source or {}).get("captures") or [])

    @property
    def projected(self) -> bool:
        """Whether the array holds random projections of the weights (probes.max_weight_size)."""
        return bool((self.projection or {}).get("projected"))

    @property
    def head_axis(self) -> int | None:
        """The axis of an attention array's heads (its "axes"), None without one."""
        axes = list(self.axes or [])
        return axes.index("head") if "head" in axes else None

    def step_clock(self, T: int) -> list | None:
        """The "step" clock when it has one value per capture of a (T, ...) array, else None."""
        steps = (self.clocks or {}).get("step")
        return steps if steps is not None and len(steps) == T else None


@dataclass(frozen=True)
class BatteryInputs:
    """What a sidecar tells the battery besides the clock: dependent walkers (`groups`, or `n_inputs` x `n_tokens`),
    whether the vectors lie in LayerNorm's hyperplane (None: detected), and the drift handling."""

    groups: list | None
    n_inputs: int | None
    n_tokens: int | None
    hyperplane: bool | None
    drift: str

    def labels(self, n_walkers: int) -> np.ndarray:
        """(N,) group labels of the walkers (bootstrap.group_labels)."""
        return group_labels(n_walkers, groups=self.groups, n_inputs=self.n_inputs, n_tokens=self.n_tokens)


def battery_inputs(meta: TrajectorySidecar | Mapping, kind: str) -> BatteryInputs:
    """trajectory_battery's inputs from a sidecar: groups, hyperplane and drift handling."""
    meta = TrajectorySidecar.from_dict(meta)
    clock = meta.drift_clock
    if clock is not None and meta.drift != "none" and clock != meta.time:
        raise ValueError(f"sidecar drift_clock {clock!r} differs from its time clock {meta.time!r}: the battery "
                         "removes a drift linear in the time clock only")
    hyperplane = meta.sum_zero
    if hyperplane is None and kind == "sphere" and meta.ln in ("pre", "post"):
        hyperplane = True  # LayerNorm output before the affine: in the hyperplane sum(z) = 0
    return BatteryInputs(meta.groups, meta.n_inputs, meta.n_tokens, hyperplane, meta.drift)


def analysis_inputs(X: np.ndarray, meta: TrajectorySidecar | Mapping, stats):
    """(walker-selected X, labels, times, BatteryInputs) exactly as trajectory_battery selects them."""
    meta = TrajectorySidecar.from_dict(meta)
    inputs = battery_inputs(meta, meta.kind)
    labels = inputs.labels(X.shape[1])
    idx = select_walkers(labels, stats.max_walkers, np.random.default_rng(stats.seed))  # the battery's first draw
    return X[:, idx], np.unique(labels[idx], return_inverse=True)[1], np.asarray(meta.times, float), inputs
