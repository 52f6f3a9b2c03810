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
