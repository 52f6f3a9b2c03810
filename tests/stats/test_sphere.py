import numpy as np
import pytest

from brownformer.stats import sphere_summary


def _layernorm(x, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def test_raw_layernorm_on_sphere_affine_not():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 50, 32)) * 3
    z = _layernorm(x)
    gamma, beta = 1 + 0.5 * rng.standard_normal(32), 0.3 * rng.standard_normal(32)
    out = sphere_summary(z, ln_affine=z * gamma + beta, resid=x)
    assert "verdict" not in out.to_dict()  # the definitional check decides nothing
    assert out.ln_raw.fraction_on_sphere == 1.0
    assert abs(out.ln_raw.radius.mean - 1) < 1e-4 and out.ln_raw.sum.max_abs_deviation < 1e-8
    assert out.ln_affine.fraction_on_sphere < 0.5 and out.resid.fraction_on_sphere < 0.5
    assert len(out.ln_raw.per_leading.radius_mean) == 4


def test_sphere_summary_refuses_bad_input():
    with pytest.raises(ValueError, match="non-finite"):
        sphere_summary(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="d >= 2"):
        sphere_summary(np.ones((3, 1)))


def test_geometry_separates_raw_affine_and_residual():
    """Raw LN output: on the sphere (CV ~ 0, offset ~ 0); after gamma/beta: spread and shift with CIs away from 0."""
    from brownformer.stats.sphere.sphere_distance import sphere_geometry
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 32 * 5, 16)) * 3 + 1
    z = _layernorm(x)
    gamma, beta = 1 + 0.5 * rng.standard_normal(16), 0.3 + 0.1 * rng.standard_normal(16)
    raw = sphere_geometry(z, n_inputs=32, n_tokens=5, n_resamples=199)
    aff = sphere_geometry(z * gamma + beta, n_inputs=32, n_tokens=5, n_resamples=199)
    assert raw.n_clusters == 32 and raw.cluster == "probe input"
    assert raw.pooled.fraction_on_sphere.estimate == 1.0 and raw.pooled.radius_cv.estimate < 1e-4
    assert aff.pooled.fraction_on_sphere.estimate < 0.1
    assert aff.pooled.radius_cv.confidence_interval[0] > 0.05
    off = aff.pooled.mean_offset
    assert off.confidence_interval[0] > max(aff.mean_offset_floor) and abs(off.estimate - np.linalg.norm(beta) / 4) < 0.05
    assert len(aff.per_layer.radius_cv.estimate) == 2


def test_tensor_summary_keeps_the_sphere_summary_shape():
    from brownformer.stats.sphere.sphere_distance import tensor_sphere_summary
    z = _layernorm(np.random.default_rng(2).standard_normal((2, 40, 8)))
    out = tensor_sphere_summary(z, tensor="ln_raw", n_resamples=49)
    assert out.definitional and out.distribution.fraction_on_sphere == 1.0
    assert max(out.about.per_layer.radius_spread.estimate) < 1e-4  # eps only
    assert out.geometry.cluster == "walker"
    with pytest.raises(ValueError, match="tensor"):
        tensor_sphere_summary(z, tensor="weights")


# ---------- after the affine map (stats/sphere/sphere_fit.py) ----------

def test_gaussian_null_spread_matches_simulation():
    """s_0 = sqrt(tr S^2 / 2) / tr S against the radius CV of a large Gaussian sample (first order in 1/d)."""
    from brownformer.stats.sphere.sphere_fit import gaussian_null_spread
    rng = np.random.default_rng(3)
    for scales in (np.ones(64), np.exp(rng.uniform(0, np.log(5), 64))):
        x = rng.standard_normal((200_000, 64)) * scales
        r = np.linalg.norm(x, axis=1)
        assert gaussian_null_spread(np.diag(scales**2)) == pytest.approx(r.std() / r.mean(), rel=0.03)


def test_affine_map_fit_recovers_gamma_beta_and_the_wielandt_bound():
    """gamma, beta exact from (z, y) pairs; the Wielandt bound (k^2 - 1)/(k^2 + 1) is the cosine the map gives
    the orthogonal pair e_1 +- e_2 when gamma_1/gamma_2 = k is the extreme ratio."""
    from brownformer.stats.sphere.sphere_fit import affine_map_fit
    rng = np.random.default_rng(4)
    z = _layernorm(rng.standard_normal((2, 60, 10)))
    gamma, beta = np.linspace(0.5, 2.0, 10), rng.standard_normal(10)
    out = affine_map_fit(z, z * gamma + beta)
    np.testing.assert_allclose(out.gamma, np.broadcast_to(gamma, (2, 10)), atol=1e-10)
    np.testing.assert_allclose(out.beta, np.broadcast_to(beta, (2, 10)), atol=1e-10)
    x, y = np.zeros(10), np.zeros(10)
    x[[0, -1]], y[[0, -1]] = (1, 1), (1, -1)  # orthogonal; gamma_0 = 0.5 and gamma_9 = 2 are the extremes
    gx, gy = gamma * x, gamma * y
    cos = abs(gx @ gy) / (np.linalg.norm(gx) * np.linalg.norm(gy))
    assert out.wielandt_cosine[0] == pytest.approx(cos)


def test_sphere_about_separates_sphere_ellipsoid_offset_and_gaussian_cloud():
    from brownformer.stats.sphere.sphere_fit import sphere_about
    rng = np.random.default_rng(5)
    z = _layernorm(rng.standard_normal((1, 40 * 6, 24)), eps=0.0)
    kw = {"n_inputs": 40, "n_tokens": 6, "confidence_level": 0.95, "n_resamples": 199, "rng": 0}
    sphere = sphere_about(2.0 * z + 0.5, np.full(24, 0.5), **kw).per_layer
    assert sphere.radius_spread.estimate[0] < 1e-6  # any radius, any centre: still a sphere about it
    assert sphere.offset.estimate[0] == pytest.approx(0.5 * np.sqrt(24) / (2 * np.sqrt(24)))
    ell = sphere_about(z * np.exp(rng.uniform(0, np.log(100), 24)), np.zeros(24), **kw).per_layer
    assert ell.radius_spread_ratio.ci_low[0] > 0.5
    cloud = sphere_about(rng.standard_normal((1, 240, 24)), None, **kw).per_layer
    assert 0.7 < cloud.radius_spread_ratio.estimate[0] < 1.3  # a Gaussian cloud is its own null


@pytest.mark.parametrize("spread", [0.2, 1.0])
def test_spread_ratio_of_an_evenly_sampled_ellipsoid_matches_its_formula(spread):
    """Tokens uniform on the sphere of radius sqrt(d), mapped by gamma: s / s_0 = v sqrt(d/(d+2)) / sqrt(1 + v^2),
    v = CV of gamma^2 over dimensions (docs/methods/claims12.md), to first order."""
    from brownformer.stats.sphere.sphere_fit import sphere_about
    rng = np.random.default_rng(6)
    d = 32
    u = rng.standard_normal((8_000, d))
    z = np.sqrt(d) * u / np.linalg.norm(u, axis=1, keepdims=True)
    gamma = np.exp(spread * rng.standard_normal(d))
    v = np.std(gamma**2) / np.mean(gamma**2)
    about = sphere_about(z * gamma, np.zeros(d), n_inputs=100, n_tokens=80, confidence_level=0.95, n_resamples=9,
                         rng=0)
    ratio = about.per_layer.radius_spread_ratio.estimate[0]
    assert ratio == pytest.approx(v * np.sqrt(d / (d + 2)) / np.sqrt(1 + v * v), rel=0.05)
