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
    assert out["verdict"] == "supported"
    assert abs(out["ln_raw"]["radius"]["mean"] - 1) < 1e-4 and out["ln_raw"]["sum"]["max_abs_deviation"] < 1e-8
    assert out["ln_affine"]["verdict"] == "not supported" and out["resid"]["verdict"] == "not supported"
    assert len(out["ln_raw"]["per_leading"]["radius_mean"]) == 4


def test_sphere_summary_refuses_bad_input():
    with pytest.raises(ValueError, match="non-finite"):
        sphere_summary(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="d >= 2"):
        sphere_summary(np.ones((3, 1)))


def test_geometry_separates_raw_affine_and_residual():
    """Raw LN output: on the sphere (CV ~ 0, offset ~ 0); after gamma/beta: spread and shift with CIs away from 0."""
    from brownformer.stats.sphere import sphere_geometry
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 32 * 5, 16)) * 3 + 1
    z = _layernorm(x)
    gamma, beta = 1 + 0.5 * rng.standard_normal(16), 0.3 + 0.1 * rng.standard_normal(16)
    raw = sphere_geometry(z, n_inputs=32, n_tokens=5, n_resamples=199)
    aff = sphere_geometry(z * gamma + beta, n_inputs=32, n_tokens=5, n_resamples=199)
    assert raw["n_clusters"] == 32 and raw["cluster"] == "probe input"
    assert raw["pooled"]["fraction_on_sphere"]["estimate"] == 1.0 and raw["pooled"]["radius_cv"]["estimate"] < 1e-4
    assert aff["pooled"]["fraction_on_sphere"]["estimate"] < 0.1
    assert aff["pooled"]["radius_cv"]["ci"][0] > 0.05
    off = aff["pooled"]["mean_offset"]
    assert off["ci"][0] > max(aff["mean_offset_floor"]) and abs(off["estimate"] - np.linalg.norm(beta) / 4) < 0.05
    assert len(aff["per_layer"]["radius_cv"]["estimate"]) == 2


def test_tensor_summary_keeps_the_sphere_summary_shape():
    from brownformer.stats.sphere import tensor_sphere_summary
    z = _layernorm(np.random.default_rng(2).standard_normal((2, 40, 8)))
    out = tensor_sphere_summary(z, tensor="ln_raw", n_resamples=49)
    assert out["verdict"] == "supported" and out["ln_raw"]["fraction_on_sphere"] == 1.0
    assert out["geometry"]["cluster"] == "walker"
    with pytest.raises(ValueError, match="tensor"):
        tensor_sphere_summary(z, tensor="weights")
