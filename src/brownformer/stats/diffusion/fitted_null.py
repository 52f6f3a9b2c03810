"""The fitted null: Brownian motion simulated from a model fitted to one trajectory file.

The idealised null (simulate.simulate_batch "brownian") shares the file's capture times, groups, within-group
correlation, dimension and (sphere) total decay, with equal rates for every walker and isotropic steps. The
fitted null keeps everything of the data that Brownian motion may have and the idealised null leaves out:

- the observed start X_0 and the observed drift (per walker: X_0 + b_i (t - t_0), b_i = (X_T - X_0)/L; common:
  X_0 + mean_i (X_t - X_0)), which the battery removes exactly, so they matter only through storage rounding;
- per-walker rates s_i^2 = mean over steps and coordinates of the squared drift-handled increments per unit of
  clock (sphere: D_i, spread as the walkers' squared tangent steps, scaled to the observed total decay);
- anisotropy: per-coordinate scales c_j of the increments (mean square 1);
- dependence: the within-group correlation rho_w and the correlation between walkers of different groups rho_b
  (inputs share weights; rows of W share inputs), as noise sqrt(rho_b) xi_all + sqrt(rho_w - rho_b) xi_g +
  sqrt(1 - rho_w) xi_i (estimates are held to 0 <= rho_b <= rho_w <= 0.99, the range a correlation of this form
  can take; the fitted values are recorded);
- the clock: the file's own capture times (real clock values);
- storage precision: when the stored values are float16 numbers (after a scale f of 1 or sqrt(d): the LN files
  store LN output / sqrt(d) from float16 captures), the simulated file is rounded the same way;
- the physics of the idealised null (issue 30): a file whose sidecar declares its optimizer's momentum has its fitted
  euclidean walk passed through the same heavy-ball filter at its training steps (momentum_filter.momentum_filtered); a
  replica-contrast file of tokens on the sphere is simulated as the contrasts of R spherical Brownian motions from a
  common start (stats/sphere/replica_null.py) at its own clock, decay, hyperplane, momentum and fitted within-group
  correlation (one rate per token: the contrasts' per-walker rates are those of saturating walks, not a fit).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from brownformer.stats.diffusion import battery as B
from brownformer.stats.sphere import sphere_battery as S
from brownformer.statsfile import FittedModel, ReplicaContrast

__all__ = ["FittedNull", "fit_null", "simulate_fitted", "storage_precision", "fitted_id"]

_RHO_MAX = 0.99
_SUBSTEP_DECAY, _MAX_SUBSTEPS = 0.02, 200  # as simulate.py: the same discretisation as the idealised null


@dataclass(frozen=True)
class FittedNull:
    """A Brownian model of one file (module docstring); arrays are float64."""

    kind: str
    times: np.ndarray  # (T,)
    labels: np.ndarray  # (N,)
    hyperplane: bool
    drift: str
    rho_within: float
    rho_between: float
    walker_scale: np.ndarray  # (N,) euclidean: sd per unit clock; sphere: D_i
    coord_scale: np.ndarray  # (d,) mean square 1
    path: np.ndarray = field(repr=False)  # (T, N, d) drift path (euclidean) or (1, N, d) start (sphere)
    storage: str = "float64"
    storage_factor: float = 1.0
    radius: float = 1.0
    #: the optimizer's heavy-ball beta and the captures' training steps (euclidean: the walk passes through it)
    momentum: float = 0.0
    steps: tuple[int, ...] | None = None
    #: a sphere replica-contrast file: the sphere its null's walks live on (replica_null.py)
    contrast: ReplicaContrast | None = None

    def summary(self) -> FittedModel:
        """The model's description (no arrays of walkers), as files and the calibration table record it."""
        ws = self.walker_scale
        return FittedModel(kind=self.kind, drift=self.drift, rho_within=self.rho_within, rho_between=self.rho_between,
                           walker_rate_spread=float(np.max(ws) / np.min(ws)) if np.min(ws) > 0 else None,
                           walker_rate_cv=float(np.std(ws) / np.mean(ws)) if np.mean(ws) > 0 else None,
                           anisotropy=float(np.max(self.coord_scale) / max(np.min(self.coord_scale), 1e-12)),
                           storage=self.storage, storage_factor=self.storage_factor, momentum=self.momentum,
                           contrast=self.contrast)


def storage_precision(X: np.ndarray) -> tuple[str, float]:
    """("float16", f) when X * f holds only float16 numbers (f = 1 or sqrt(d); relative tolerance 1e-5, far below
    float16's spacing of ~1e-3), else (dtype name, 1)."""
    d = X.shape[-1]
    for f in (1.0, float(np.sqrt(d))):
        y = np.asarray(X, np.float64) * f
        # float32 files of float16 captures divided by sqrt(d): equal to float16 numbers up to float32 rounding
        if np.all(np.abs(y) < 65504) and np.allclose(y.astype(np.float16).astype(np.float64), y, rtol=1e-5, atol=0):
            return "float16", f
    return str(np.asarray(X).dtype), 1.0


def fitted_id(sha256: str, seed: int, max_walkers: int) -> str:
    """Identifier of a file's fitted null in the calibration table (the model is a function of these)."""
    return "fit-" + hashlib.sha1(f"{sha256}:{seed}:{max_walkers}".encode()).hexdigest()[:12]


def _correlations(z: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(within-group, between-group) mean correlation of standardised increments z (n, N, m)."""
    zz = np.nan_to_num(z)
    G = int(labels.max()) + 1
    tot = zz.sum(1)  # (n, m)
    grp = np.stack([zz[:, labels == g].sum(1) for g in range(G)])  # (G, n, m)
    own = np.sum(zz * zz, axis=(0, 2))  # (N,)
    sizes = np.bincount(labels, minlength=G)
    within_num = np.sum(grp**2) - own.sum()
    within_den = float(np.sum(own * (sizes[labels] - 1)))
    all_num = np.sum(tot**2) - own.sum()
    all_den = float(np.sum(own * (labels.size - 1)))
    between_den = all_den - within_den
    rw = within_num / within_den if within_den > 0 else 0.0
    rb = (all_num - within_num) / between_den if between_den > 0 else 0.0
    return float(rw), float(rb)


def _clamp(rw: float, rb: float) -> tuple[float, float]:
    rw = float(np.clip(np.nan_to_num(rw), 0.0, _RHO_MAX))
    return rw, float(np.clip(np.nan_to_num(rb), 0.0, rw))


def fit_null(X: np.ndarray, *, kind: str, times, labels, hyperplane: bool, drift: str, momentum: float = 0.0,
             steps=None, meta=None) -> FittedNull:
    """Fit the Brownian model of the module docstring to X (T, N, d) (the walkers the battery analysed); `momentum`
    with the captures' `steps`: the optimizer's beta the null carries; `meta`: the sidecar (trajectory_inputs.TrajectorySidecar or its mapping; a sphere replica-contrast
    file, replica_null.sphere_contrasts_of)."""
    from dataclasses import replace

    from brownformer.stats.sphere.replica_null import contrast_decay, replica_start_share, sphere_contrasts_of
    from brownformer.stats.core.shapes import sphere_decay
    null = _fit(X, kind=kind, times=times, labels=labels, hyperplane=hyperplane, drift=drift)
    carry = bool(momentum) and steps is not None and kind == "euclidean"
    replicas, hyper = sphere_contrasts_of(meta, X) if kind == "euclidean" else (0, False)
    contrast = None if not replicas else ReplicaContrast(replicas, replica_start_share(times),
                                                         sphere_decay(contrast_decay(X)), hyper)
    return replace(null, momentum=float(momentum) if carry else 0.0,
                   steps=tuple(int(s) for s in steps) if carry else None, contrast=contrast)


def _fit(X: np.ndarray, *, kind: str, times, labels, hyperplane: bool, drift: str) -> FittedNull:
    X = np.asarray(X, np.float64)
    times = np.asarray(times, float)
    labels = np.asarray(labels)
    storage, f = storage_precision(X)
    T, N, d = X.shape
    dt = np.diff(times)
    if kind == "euclidean":
        _, E, bridge = B.levels(X[None], times, drift)
        e = E[0] / np.sqrt(dt * bridge(dt))[:, None, None]  # (n, N, d) per unit clock
        ws = np.sqrt(np.mean(e**2, axis=(0, 2)))
        cs = np.sqrt(np.mean((e / np.where(ws > 0, ws, 1.0)[None, :, None]) ** 2, axis=(0, 1)))
        cs = cs / np.sqrt(np.mean(cs**2))
        rw, rb = _correlations(B.standardize(e[None])[0], labels)
        if drift == "per_walker":
            path = X[0][None] + ((X[-1] - X[0]) / (times[-1] - times[0]))[None] * (times - times[0])[:, None, None]
        elif drift == "common":
            path = X[0][None] + (X - X[0][None]).mean(1, keepdims=True)
        else:
            path = np.broadcast_to(X[0][None], X.shape).copy()
        rw, rb = _clamp(rw, rb)
        return FittedNull(kind, times, labels, False, drift, rw, rb, ws, cs, path, storage, f, 1.0)
    radius = float(np.mean(np.linalg.norm(X, axis=-1)))
    U = X / np.linalg.norm(X, axis=-1, keepdims=True)
    k, hyper = S.span_dimension(U, hyperplane)
    v = S.tangent_increments(U[None], times)[0]  # (n, N, d)
    local = np.mean(np.sum(v * v, -1), axis=0)  # (N,) 2 (k-1) D_i under the null
    with np.errstate(all="ignore"):
        decay = -np.log(np.mean(np.sum(U[0] * U[-1], -1)))
    span = times[-1] - times[0]
    D = decay / ((k - 1) * span) if np.isfinite(decay) and decay > 0 else np.mean(local) / (2 * (k - 1))
    Di = D * local / np.mean(local)
    cs = np.sqrt(np.mean((v / np.sqrt(local)[None, :, None]) ** 2, axis=(0, 1)))
    active = cs > 0
    cs = np.where(active, cs / np.sqrt(np.mean(cs[active] ** 2)), 0.0)
    with np.errstate(all="ignore"):
        zv = v / np.sqrt(np.mean(np.sum(v * v, -1, keepdims=True), axis=1, keepdims=True))
    rw, rb = _clamp(*_correlations(zv, labels))
    return FittedNull(kind, times, labels, hyper, "none", rw, rb, Di, np.where(active, cs, 1.0), U[:1].copy(),
                      storage, f, radius)


def _noise(rng, R: int, null: FittedNull, n: int) -> np.ndarray:
    """(R, n, N, d) unit-variance noise with the fitted within/between-group correlations, float32."""
    labels = null.labels
    N, d = labels.size, null.coord_scale.size
    G = int(labels.max()) + 1
    rw, rb = null.rho_within, null.rho_between
    out = rng.standard_normal((R, n, N, d), dtype=np.float32) * np.float32(np.sqrt(1 - rw))
    if rw > rb:
        out += np.float32(np.sqrt(rw - rb)) * rng.standard_normal((R, n, G, d), dtype=np.float32)[:, :, labels]
    if rb > 0:
        out += np.float32(np.sqrt(rb)) * rng.standard_normal((R, n, 1, d), dtype=np.float32)
    return out


def _store(Y: np.ndarray, null: FittedNull) -> np.ndarray:
    if null.storage != "float16":
        return Y
    f = np.float32(null.storage_factor)
    return ((Y * f).astype(np.float16).astype(np.float32) / f).astype(np.float32)


def simulate_fitted(null: FittedNull, *, replicates: int, rng) -> np.ndarray:
    """R replicates (R, T, N, d) of the fitted null, stored at the data's precision."""
    rng = np.random.default_rng(rng)
    R, T = int(replicates), null.times.size
    dt = np.diff(null.times)
    N, d = null.labels.size, null.coord_scale.size
    if null.contrast:
        from brownformer.stats.sphere.replica_null import simulate_null
        c = null.contrast
        Y = simulate_null("brownian", times=null.times, labels=null.labels, d=d, kind="euclidean", replicates=R,
                           rng=rng, rho=null.rho_within, hyperplane=c.hyperplane, decay=c.decay,
                           momentum=null.momentum, steps=null.steps, replicas=c.replicas,
                           replica_start=c.replica_start)
        return _store(Y, null)
    if null.kind == "euclidean":
        scale = (np.sqrt(dt)[:, None, None] * null.walker_scale[None, :, None] * null.coord_scale[None, None, :])
        inc = _noise(rng, R, null, T - 1) * scale.astype(np.float32)[None]
        if null.momentum:  # through the optimizer's heavy-ball filter, as the idealised null
            from brownformer.stats.diffusion.simulate import momentum_filtered
            inc = np.diff(momentum_filtered(B.walk_levels(inc), steps=null.steps, momentum=null.momentum,
                                            labels=null.labels, rng=rng), axis=1)
        Y = B.walk_levels(inc) + null.path.astype(np.float32)[None]
        return _store(Y, null)
    k = d - 1 if null.hyperplane else d
    u = np.broadcast_to(null.path[0].astype(np.float32), (R, N, d)).copy()
    out = np.empty((R, T, N, d), dtype=np.float32)
    out[:, 0] = u
    Dmean = float(np.mean(null.walker_scale))
    total = (k - 1) * Dmean * (null.times[-1] - null.times[0])
    per_sub = max(_SUBSTEP_DECAY, total / _MAX_SUBSTEPS)
    c = null.coord_scale.astype(np.float32)
    for i in range(1, T):
        n_sub = max(1, int(np.ceil((k - 1) * Dmean * dt[i - 1] / per_sub)))
        step = np.sqrt(2 * null.walker_scale * dt[i - 1] / n_sub).astype(np.float32)[None, :, None]  # (1, N, 1)
        for _ in range(n_sub):
            xi = _noise(rng, R, null, 1)[:, 0] * c
            if null.hyperplane:
                xi -= xi.mean(-1, keepdims=True)
            u = u + step * xi
            u /= np.linalg.norm(u, axis=-1, keepdims=True)
        out[:, i] = u
    return _store(out * np.float32(null.radius), null)
