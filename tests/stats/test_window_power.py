"""The window rule has the power to say "brownian" (issue 30, item 3).

Plain Brownian motion (fBm with H = 0.5) of 200 one-dimensional walkers at 200 times was "inconclusive" under the
window rule (exponent interval [1.00, 1.11] against [0.9, 1.1]): the window exponent read each walker's displacement
from one origin only, whose log-log slope is noisy in one dimension. On an evenly spaced clock the displacements
now start at several origins near the window's start (local_slope.window_features), which narrows the interval
about 1.4x here; an irregular clock keeps one origin.
"""
import numpy as np
import pytest

from brownformer.config import DEFAULT_STATS
from brownformer.stats.diffusion import local_slope
from brownformer.stats.diffusion.simulate import fgn_increments
from brownformer.stats_stage.run_stats import trajectory_file_stats


@pytest.fixture(scope="module")
def plain_bm(tmp_path_factory):
    inc = fgn_increments(199, 0.5, 200, np.random.default_rng(100)).reshape(199, 200, 1)
    path = tmp_path_factory.mktemp("bm") / "bm.npy"
    np.save(path, np.concatenate([np.zeros((1, 200, 1)), np.cumsum(inc, 0)]))
    return path


def test_plain_brownian_motion_200_walkers_200_times_is_brownian(plain_bm):
    out = trajectory_file_stats(plain_bm, stats=DEFAULT_STATS)
    assert out.verdict == "brownian", out.reason
    lo, hi = out.local_slopes.effect.tost_interval
    assert 0.9 <= lo < 1.0 < hi <= 1.1


def test_origins_narrow_the_interval_against_one_origin(plain_bm, monkeypatch):
    """The same file read with one origin (the old estimator) has a wider interval: the gain is the estimator's."""
    many = trajectory_file_stats(plain_bm, stats=DEFAULT_STATS).local_slopes.effect.tost_interval
    monkeypatch.setattr(local_slope, "MAX_ORIGINS", 1)
    one = trajectory_file_stats(plain_bm, stats=DEFAULT_STATS).local_slopes.effect.tost_interval
    assert (many[1] - many[0]) < 0.8 * (one[1] - one[0])


def test_origins_only_on_an_even_clock_and_near_the_start():
    even, uneven = np.arange(101.0), np.r_[0.0, np.geomspace(1, 100, 100)]
    assert local_slope._origins(uneven, 5).tolist() == [0]
    a = local_slope._origins(even, 5)
    assert a[0] == 0 and a.max() <= local_slope.ORIGIN_SHARE * 100 and a.size <= local_slope.MAX_ORIGINS
    assert local_slope._origins(even, 100).tolist() == [0]  # the longest lag has one origin


def test_an_inconclusive_verdict_reports_the_power_at_its_shape(tmp_path):
    """A short file: the reason says how often the window exponent certifies Brownian motion at that shape."""
    X = np.cumsum(np.random.default_rng(5).standard_normal((12, 16, 1)), 0)
    np.save(tmp_path / "short.npy", X)
    out = trajectory_file_stats(tmp_path / "short.npy", stats=DEFAULT_STATS)
    assert out.verdict == "inconclusive" and "power at this shape" in out.reason, out.reason


def test_saturating_spherical_brownian_motion_is_brownian_as_kind_sphere(tmp_path):
    """Issue 30, item 2: spherical BM whose mean cosine falls to exp(-1.5) over the file (the chord MSD saturates)
    is "brownian" with `--kind sphere`: the sphere's exponent is read on psi = -ln(mean cos)/(k - 1), which is
    linear in t for spherical BM, not on the saturating chord; the calibration shape records kind, decay and
    hyperplane."""
    from brownformer.stats.diffusion.simulate import simulate_batch
    from brownformer.stats_stage.stages import stats_trajectory
    X = simulate_batch("brownian", times=np.arange(60.0), labels=np.arange(256), d=16, kind="sphere", replicates=1,
                       rng=1, decay=1.5)[0]
    np.save(tmp_path / "sph.npy", X)
    out = stats_trajectory(tmp_path / "sph.npy", None, stats=DEFAULT_STATS, kind="sphere")
    assert out["verdict"] == "brownian", out["reason"]
    shape = out["calibration_shape"]
    assert shape["kind"] == "sphere" and shape["hyperplane"] is False and shape["decay"] == pytest.approx(1.5, abs=0.15)
