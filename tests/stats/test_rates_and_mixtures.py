"""Issue 19's "done when" at the level of a file's verdict (trajectory_file_stats: battery, window, rule), not only
of the window reading (test_local_slope.py): Brownian walkers with rates spread over 10x are called Brownian on the
sphere and in R^d, and mixtures of Brownian and non-Brownian walkers are reported as mixed."""
import json

import numpy as np
import pytest

from brownformer.config import DEFAULT_WINDOW, StatsConfig
from brownformer.stats.diffusion.simulate import spherical_brownian_motion
from brownformer.stats_stage.run_stats import trajectory_file_stats

T, N, D = 40, 128, 16
STATS = StatsConfig(n_resamples=199, window={**DEFAULT_WINDOW, "start_step": 0, "envelope_replicates": 29})
RATE_SPREAD = 10.0


def _file(tmp_path, X, kind):
    p = tmp_path / f"{kind}.npy"
    np.save(p, X.astype(np.float32))
    p.with_suffix(".json").write_text(json.dumps({"kind": kind, "times": list(range(T)), "n_inputs": 16,
                                                  "n_tokens": N // 16, "drift": "none"}))
    return trajectory_file_stats(p, stats=STATS)


def _sphere_walkers(rates, rng):
    """Each walker its own spherical Brownian motion; E<u_0, u_T> from exp(-1) (slowest) down."""
    return np.concatenate([spherical_brownian_motion(T, 1, D, diffusion=r / ((D - 1) * T), rng=rng.integers(2**31))
                           for r in rates], axis=1)


def _great_circles(n, rng, turn=1.2):
    """Walkers moving at constant angular speed along a great circle (ballistic: MSD ~ t^2 at short lags)."""
    a = rng.standard_normal((n, D))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b = rng.standard_normal((n, D))
    b -= np.sum(a * b, 1, keepdims=True) * a
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    th = turn * np.arange(T)[:, None, None] / T
    return np.cos(th) * a[None] + np.sin(th) * b[None]


@pytest.mark.parametrize("kind", ["euclidean", "sphere"])
def test_brownian_walkers_with_rates_spread_over_10x_get_a_brownian_verdict(tmp_path, kind):
    rng = np.random.default_rng(21)
    rates = np.exp(rng.uniform(0, np.log(RATE_SPREAD), N))
    if kind == "euclidean":
        X = np.cumsum(rng.standard_normal((T, N, D)) * np.sqrt(rates)[None, :, None], 0)
    else:
        X = _sphere_walkers(rates, rng)
    out = _file(tmp_path, X, kind)
    assert out.verdict == "brownian", out.reason
    assert out.classification == "brownian" and out.walkers.rates == "spread"


@pytest.mark.parametrize("kind", ["euclidean", "sphere"])
def test_brownian_and_ballistic_walkers_together_are_mixed(tmp_path, kind):
    rng = np.random.default_rng(22)
    X = np.empty((T, N, D))
    if kind == "euclidean":
        X[:, ::2] = np.cumsum(rng.standard_normal((T, N // 2, D)), 0)
        X[:, 1::2] = np.cumsum(0.5 * rng.standard_normal((1, N // 2, D)) + 0.1 * rng.standard_normal((T, N // 2, D)), 0)
    else:
        X[:, ::2] = _sphere_walkers(np.ones(N // 2), rng)
        X[:, 1::2] = _great_circles(N // 2, rng)
    out = _file(tmp_path, X, kind)
    assert out.walkers.reading == "mixed" and out.classification == "mixed", out.walkers.why
    assert out.verdict != "brownian"


def test_rate_strata_keep_the_harmonic_edge_at_the_margin():
    """Strata ranked by each walker's median tangent step: the uniform resets of the harmonic-ratio edge are rare
    jumps, which must not sort walkers (ranked by the mean step, the edge 0.9 read 0.93 at 4 strata)."""
    from brownformer.config import DEFAULT_MARGINS
    from brownformer.stats.diffusion.brownian import battery_batch
    from brownformer.stats.diffusion.simulate import simulate_batch
    from brownformer.stats.sphere.sphere_battery import RATE_STRATA
    times = np.arange(30.0)
    labels = np.repeat(np.arange(16), 4)  # 64 walkers: RATE_STRATA strata of 16
    X = simulate_batch("harmonic_low", times=times, labels=labels, d=8, kind="sphere", replicates=30, rng=5,
                       rho=0.2, decay=1.0)
    bat = battery_batch(X, kind="sphere", times=times, labels=labels, margins=DEFAULT_MARGINS, alpha=0.05,
                        drift="none", hyperplane=False, n_resamples=99, rng=6)
    assert RATE_STRATA == 4
    assert np.nanmean(bat.stats["harmonic_ratio"].estimate) == pytest.approx(DEFAULT_MARGINS["harmonic_ratio"][0],
                                                                            abs=0.015)
