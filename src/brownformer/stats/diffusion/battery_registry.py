"""The Brownian battery's statistics as one registry: per statistic its name, the kinds it applies to with the
computation for each, its margin key, and the kinds in which the verdict decides on it (a key effect).

`brownian.battery_batch` computes the batch entries the verdict needs, then (with `describe`) the descriptive ones,
each group in registry order (`batch_statistics`: the order of the results and of the draws from `rng`);
`brownian.trajectory_battery` computes the per-trajectory entries of its description; `rule.MARGIN_KEYS` and
`rule.KEY_EFFECTS` (whose order the verdict's reasons and the calibration tables follow) are read from here. Adding
a statistic is its function and one entry (and its margin in the schema, `stats.margins`).

A computation takes the inputs every statistic of one kind shares (`BatteryInputs`, `TrajectoryInputs`), prepared
once per call, so an entry says which of them it reads and nothing is recomputed per statistic.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from brownformer.stats.diffusion import battery as B
from brownformer.stats.diffusion import descriptive as desc
from brownformer.stats.sphere import sphere_battery as S
from brownformer.stats.core.bootstrap import ClusterBootstrap

__all__ = ["BatteryStatistic", "BatteryInputs", "TrajectoryInputs", "STATISTICS", "KINDS", "euclidean_inputs",
           "sphere_inputs", "MARGIN_KEYS", "KEY_EFFECTS", "batch_statistics"]

KINDS = ("euclidean", "sphere")


@dataclass(frozen=True)
class BatteryStatistic:
    """One statistic of the battery.

    name: its name in the results (`tests`, `effects`); compute: kind -> computation on that kind's shared inputs
    (the kinds it applies to); margin_key: key of its equivalence margin in `stats.margins` (None: no margin);
    key_in: the kinds in which the verdict decides on it (elsewhere it is descriptive, computed by `battery_batch`
    only with `describe`); always: computed even when descriptive (it comes free with another entry);
    per_trajectory: computed on one trajectory's description (`trajectory_battery`), not in `battery_batch`;
    window_effect: the effect the window reading replaces when a window is given (the MSD exponent);
    flag: the classification it raises when outside its margin (`brownian._classify`).
    """

    name: str
    compute: Mapping[str, Callable[[Any], Any]]
    margin_key: str | None = None
    key_in: tuple[str, ...] = ()
    always: bool = False
    per_trajectory: bool = False
    window_effect: bool = False
    flag: str | None = None


@dataclass
class BatteryInputs:
    """What the statistics of one kind share, for R trajectories: the bootstrap and rng, the standardised increments
    `z` (both kinds' autocorrelation and the within-group correlation read them), and per kind the levels and
    increments (euclidean: Y, E, bridge, u; sphere: U, v, strata). Joint computations are cached in `joint`, the
    curves they yield collected in `curves`."""

    kind: str
    times: np.ndarray
    boot: ClusterBootstrap
    rng: np.random.Generator
    z: np.ndarray
    k: int
    drift: str = "none"
    hyperplane: bool = False
    Y: np.ndarray | None = None
    E: np.ndarray | None = None
    bridge: Callable | None = None
    u: np.ndarray | None = None
    U: np.ndarray | None = None
    v: np.ndarray | None = None
    strata: tuple | None = None
    curves: dict = field(default_factory=dict)
    joint: dict = field(default_factory=dict)

    def once(self, key: str, fn: Callable[[], Any]):
        """A computation several entries read (the MSD fit, the cosine law), done once."""
        if key not in self.joint:
            self.joint[key] = fn()
        return self.joint[key]


def euclidean_inputs(X, times, drift: str, boot: ClusterBootstrap, rng) -> BatteryInputs:
    Y, E, bridge = B.levels(X, times, drift)
    dt = np.diff(times)
    u = E * (1 / np.sqrt(dt * bridge(dt))).astype(X.dtype)[None, :, None, None]
    return BatteryInputs("euclidean", times, boot, rng, B.standardize(u), X.shape[-1], drift=drift, Y=Y, E=E,
                         bridge=bridge, u=u)


def sphere_inputs(X, times, hyperplane: bool | None, boot: ClusterBootstrap, rng) -> BatteryInputs:
    k, hyper = S.span_dimension(X, hyperplane)
    U = X / np.linalg.norm(X, axis=-1, keepdims=True)
    v = S.tangent_increments(U, times)
    strata = S.rate_strata(U, times, v)  # walkers of similar rate, for the two ensemble laws
    with np.errstate(all="ignore"):
        zv = v / np.sqrt(np.mean(np.sum(v * v, -1, keepdims=True), axis=2, keepdims=True))
    return BatteryInputs("sphere", times, boot, rng, zv, k, hyperplane=hyper, U=U, v=v, strata=strata)


def _msd(c: BatteryInputs):
    def fit():
        expo, dcoef, c.curves["msd"] = B.msd_exponent(c.Y, c.times, c.bridge, c.boot)
        return expo, dcoef
    return c.once("msd", fit)


def _cosine_law(c: BatteryInputs):
    def fit():
        expo, dcoef, harmonic, curves = S.cosine_law(c.U, c.times, c.k, c.boot, c.strata)
        c.curves.update(curves)
        return expo, dcoef, harmonic
    return c.once("cosine_law", fit)


def _acf_null(c: BatteryInputs):
    return B.bridge_acf(c.times, B.MAX_ACF_LAG) if c.drift == "per_walker" else None


@dataclass(frozen=True)
class TrajectoryInputs:
    """One trajectory's description inputs: `one` (one coordinate per walker of the walker-scaled standardised
    increments), the increments and the basis of their space, the displacements X_T - X_0 (log map on the sphere)."""

    one: np.ndarray
    increments: np.ndarray
    basis: np.ndarray | None
    displacement: np.ndarray
    labels: np.ndarray
    rng: np.random.Generator
    confidence_level: float


def _both(fn):
    return {kind: fn for kind in KINDS}


#: the battery in computation order. On the sphere the heat-kernel law is tested exactly by the harmonic ratio,
#: while the kurtosis of finite tangent steps depends on the step size: descriptive there.
STATISTICS: tuple[BatteryStatistic, ...] = (
    BatteryStatistic("msd_exponent", {"euclidean": lambda c: _msd(c)[0], "sphere": lambda c: _cosine_law(c)[0]},
                     margin_key="msd_exponent", key_in=KINDS, window_effect=True),
    BatteryStatistic("diffusion_coefficient",
                     {"euclidean": lambda c: _msd(c)[1], "sphere": lambda c: _cosine_law(c)[1]}, always=True),
    BatteryStatistic("harmonic_ratio", {"sphere": lambda c: _cosine_law(c)[2]}, margin_key="harmonic_ratio",
                     key_in=("sphere",), flag="non-gaussian"),
    BatteryStatistic("variance_ratio",
                     {"euclidean": lambda c: B.variance_ratio(c.Y, c.times, c.bridge, c.boot),
                      "sphere": lambda c: S.sphere_variance_ratio(c.U, c.times, c.k, c.boot, c.strata)},
                     margin_key="variance_ratio", key_in=KINDS, flag="correlated"),
    BatteryStatistic("increment_autocorrelation",
                     {"euclidean": lambda c: B.autocorrelation(c.z, c.boot, null_acf=_acf_null(c)),
                      "sphere": lambda c: B.autocorrelation(c.z, c.boot, what="tangent increments")},
                     margin_key="increment_autocorrelation", key_in=KINDS, flag="correlated"),
    BatteryStatistic("hurst", {"euclidean": lambda c: B.hurst(c.Y, c.times, c.bridge, c.boot),
                               "sphere": lambda c: S.sphere_hurst(c.U, c.times, c.boot)},
                     margin_key="hurst", flag="correlated"),
    # euclidean: its own scales (battery.kurtosis), on the unstandardised increments
    BatteryStatistic("gaussianity", {"euclidean": lambda c: B.kurtosis(c.u, c.boot, centred=c.drift == "common"),
                                     "sphere": lambda c: B.kurtosis(S.random_tangent_projection(c.v, c.U, c.hyperplane,
                                                                                                c.rng), c.boot)},
                     margin_key="excess_kurtosis", key_in=("euclidean",), flag="non-gaussian"),
    BatteryStatistic("volatility_clustering", {"euclidean": lambda c: B.volatility(c.z, c.boot)},
                     margin_key="volatility_autocorrelation", flag="correlated"),
    BatteryStatistic("tail_index", _both(lambda t: desc.tail_test(t.one, confidence_level=t.confidence_level)),
                     margin_key="tail_index_ratio", per_trajectory=True),
    BatteryStatistic("isotropy", _both(lambda t: desc.isotropy_test(t.increments, t.basis)), per_trajectory=True),
    BatteryStatistic("drift", _both(lambda t: desc.drift_test(t.displacement, t.labels, rng=t.rng)),
                     margin_key="drift_fraction", per_trajectory=True),
)


#: test name -> key of its equivalence margin in `stats.margins`
MARGIN_KEYS: dict[str, str] = {s.name: s.margin_key for s in STATISTICS if s.margin_key is not None}
#: kind -> the effects the verdict needs, in registry order
KEY_EFFECTS: dict[str, tuple[str, ...]] = {kind: tuple(s.name for s in STATISTICS if kind in s.key_in) for kind in KINDS}


def batch_statistics(kind: str, describe: bool) -> list[BatteryStatistic]:
    """The entries `battery_batch` computes for `kind`: the key and the always-computed ones, then (with `describe`)
    the descriptive ones, each group in registry order."""
    mine = [s for s in STATISTICS if kind in s.compute and not s.per_trajectory]
    first = [s for s in mine if kind in s.key_in or s.always]
    return first + ([s for s in mine if s not in first] if describe else [])
