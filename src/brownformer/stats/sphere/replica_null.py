"""The null of a replica-contrast file of tokens on the sphere: R spherical Brownian motions from a common start.

Replicas share the initialisation, so at clock 0 (step 0, sum lr^2 = 0) the R copies of a token sit at one point
of the unit sphere; under claim 3b's null each then moves as a spherical Brownian motion (generator D Laplace-
Beltrami, on S^(k-1), k = d - 1 inside LayerNorm's hyperplane), independently of the other replicas. The contrast
file holds their Helmert contrasts C_c = sum_r H[c, r] u_r (probes/replicas.py), taken in the ambient space. Those
saturate: for independent walks from a common start E<u_r(t), u_s(t)> = exp(-2 (k-1) D t), so the mean squared
contrast norm is 1 - exp(-2 (k-1) D t), bounded by 1; a Euclidean null would read that bend as sub-diffusion. This
null carries it: the statistics of the contrast file are compared with the same statistics of contrasts of
spherical Brownian motions at the file's own clock (its captures' share of the clock from the common start) and
decay, and the rule corrects every key effect by what this null alone gives it (brownian.null_corrected).

The decay is read from the file: at its last capture the mean squared contrast norm s (the sidecar's
`final_spread`) gives decay = (k-1) D t_end = -ln(1 - s)/2; a file whose replicas have decorrelated (s >= 1) is
simulated at shapes.DECAY_DECORRELATED.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import helmert

from brownformer.stats.diffusion.simulate import heavy_ball_brownian, simulate_batch
from brownformer.stats.diffusion.trajectory_inputs import TrajectorySidecar

__all__ = ["simulate_null", "sphere_replica_contrasts", "contrast_decay", "replica_start_share", "sphere_contrasts_of",
           "SPHERE_CONTRAST"]

#: the sidecar value of "contrast_of" that marks a replica-contrast file of points on the unit sphere
SPHERE_CONTRAST = "sphere"


def simulate_null(process: str, *, replicas: int = 0, replica_start: float = 0.0, **kw) -> np.ndarray:
    """simulate.simulate_batch(process, **kw), except at a sphere replica-contrast shape (`replicas` > 0), where the
    null and the exponent edges are the contrasts of `replicas` spherical Brownian motions from a common start
    (`sphere_replica_contrasts`; saturation is part of that null) and the other alternatives stay simulate_batch's
    euclidean ones (their power at such a shape is that of flat walks)."""
    if replicas and (process == "brownian" or process.startswith("clock_")):
        keep = ("times", "labels", "d", "replicates", "rng", "rho", "hyperplane", "decay", "momentum", "steps")
        return sphere_replica_contrasts(process, replicas=replicas, replica_start=replica_start,
                                        **{k: v for k, v in kw.items() if k in keep})
    return simulate_batch(process, **kw)


def sphere_contrasts_of(meta, X: np.ndarray) -> tuple[int, bool]:
    """(R, in LayerNorm's hyperplane) of a replica-contrast file of points on the unit sphere (sidecar "contrast_of":
    "sphere" and "n_replicas"), (0, False) for any other file. The hyperplane is the sidecar's "sum_zero", else
    detected: contrasts of points with sum(z) = 0 sum to 0 as well (sphere_battery.HYPERPLANE_TOL)."""
    from brownformer.stats.sphere.sphere_battery import HYPERPLANE_TOL
    meta = TrajectorySidecar.from_dict(meta)
    if meta.contrast_of != SPHERE_CONTRAST:
        return 0, False
    R = int(meta.n_replicas or 0)
    if R < 3:
        raise ValueError(f"a sphere replica-contrast file needs 'n_replicas' >= 3 in its sidecar; got {R}")
    hyper = meta.sum_zero
    if hyper is None:
        hyper = bool(X.shape[-1] >= 3 and np.max(np.abs(np.asarray(X).sum(-1))) < HYPERPLANE_TOL)
    return R, bool(hyper)


def contrast_decay(X: np.ndarray) -> float | None:
    """(k-1) D t_end of R spherical walks from a common start whose Helmert contrasts X (T, N, d) are: from the mean
    squared contrast norm s at the last capture, -ln(1 - s)/2 (E|C|^2 = 1 - E<u_r, u_s>); None when s >= 1."""
    s = float(np.mean(np.sum(np.asarray(X[-1], np.float64) ** 2, -1)))
    return -0.5 * np.log1p(-s) if 0 < s < 1 else None


def replica_start_share(times) -> float:
    """The share of the clock, counted from the replicas' common start at clock 0, elapsed at the first capture."""
    t = np.asarray(times, float)
    if t[0] < 0 or t[-1] <= 0:
        raise ValueError(f"a replica file's clock must count from the common start (0); got {t[0]}..{t[-1]}")
    return float(t[0] / t[-1])


def sphere_replica_contrasts(process: str, *, times, labels, d: int, replicas: int, replicates: int, rng,
                             rho: float = 0.0, hyperplane: bool = False, decay: float = 1.0,
                             replica_start: float = 0.0, momentum: float = 0.0, steps=None) -> np.ndarray:
    """Helmert contrasts (reps, T, N, d) of `replicas` spherical Brownian motions per token from a common start.

    The contrast file's walkers are (contrast g, token) with labels g (group sizes n_g; under the null the contrasts
    are independent, so contrast g takes the first n_g tokens). Per token, `replicas` walks start at one uniform
    point at clock 0 and are seen at clock a + (1 - a) s_j (a = `replica_start`, s_j the captures' elapsed share,
    the last capture at 1); `decay` = (k-1) D over that clock; the tokens of one replica share the noise with
    correlation `rho` (a replica's tokens move with its weights; a contrast inherits it, H being orthonormal).
    "clock_p" runs the walks on the clock c^p (the exponent edges); `momentum` with `steps` passes the noise through
    heavy-ball momentum from an empty buffer at step 0 (simulate.heavy_ball_brownian).
    """
    rng = np.random.default_rng(rng)
    labels = np.asarray(labels)
    G = int(labels.max()) + 1
    if replicas != G + 1:
        raise ValueError(f"{replicas} replicas give {replicas - 1} contrasts; the file has {G} groups")
    sizes = np.bincount(labels, minlength=G)
    M, R, reps = int(sizes.max()), int(replicas), int(replicates)
    t = np.asarray(times, float)
    s = (t - t[0]) / (t[-1] - t[0])
    clock = np.concatenate([[0.0], replica_start + (1 - replica_start) * s])  # from the common start, end at 1
    if process.startswith("clock_"):
        clock = clock ** float(process.split("_")[1])
    elif process != "brownian":
        raise ValueError(f"the sphere replica null simulates 'brownian' and the exponent edges, not {process!r}")
    k = d - 1 if hyperplane else d
    walkers = np.repeat(np.arange(R), M)  # walker r*M + m: token m of replica r; groups: replicas
    start = np.tile(rng.standard_normal((reps, M, k)), (1, R, 1))  # one start per token, shared by its replicas
    kw = dict(labels=walkers, d=d, kind="sphere", replicates=reps, rng=rng, rho=rho, hyperplane=hyperplane,
              decay=decay, start=start)
    if momentum:
        if steps is None:
            raise ValueError("a momentum null needs the captures' training steps")
        st = np.concatenate([[0], np.asarray(steps, np.int64)])
        if st[1] <= 0:
            raise ValueError("a replica file's first capture must come after the common start (step 0)")
        U = heavy_ball_brownian(times=clock, steps=st, momentum=momentum, **kw)
    else:
        U = simulate_batch("brownian", times=clock, **kw)
    U = U[:, 1:].reshape(reps, t.size, R, M, d)  # drop the common start
    C = np.einsum("cr,itrmd->itcmd", helmert(R), U)  # (reps, T, R - 1, M, d)
    out = np.empty((reps, t.size, labels.size, d), np.float32)
    for g in range(G):
        out[:, :, labels == g] = C[:, :, g, : sizes[g]]
    return out
