"""Per-walker diagnostics against exact values on simulated walks, and the token types from sidecars."""
import numpy as np
import pytest

from brownformer.stats.diffusion.walkers import andi_diagnostics, token_types, walker_reading

R, T, N, D = 32, 30, 200, 4
TIMES = np.arange(T, dtype=float)
TAU = TIMES[1:]


def _diag(X):
    Y = X - X[:, :1]
    curve = np.einsum("rtnd,rtnd->rt", Y[:, 1:], Y[:, 1:]) / (X.shape[2] * X.shape[3])
    return dict(andi_diagnostics(X, TIMES, kind="euclidean", k=D, drift="none", ens_tau=TAU, ens_curve=curve))


def _bm(rng, scale=None):
    inc = rng.standard_normal((R, T - 1, N, D))
    if scale is not None:
        inc = inc * scale[None, None, :, None]
    return np.concatenate([np.zeros((R, 1, N, D)), np.cumsum(inc, 1)], 1)


def test_token_types_from_the_sidecar():
    vit, pos = token_types({"n_tokens": 5, "cls_index": 0}, 10)
    assert vit.tolist() == ["cls", "patch", "patch", "patch", "patch"] * 2 and pos.tolist() == [0, 1, 2, 3, 4] * 2
    assert token_types({"n_tokens": 5, "walkers": "...; token 0 of each input is the CLS token"}, 10)[0][5] == "cls"
    lm, pos = token_types({"n_tokens": 5, "cls_index": None}, 10)
    assert set(lm) == {"position"} and pos[7] == 2
    rows, pos = token_types({}, 7)
    assert set(rows) == {"walker"} and pos is None


def test_brownian_motion_has_its_exact_diagnostics():
    out = _diag(_bm(np.random.default_rng(0)))
    # EB of the lag-1 time average of n chi2_D / D steps: Var/mean^2 = 2 / (D n)
    assert np.median(out["eb"]) == pytest.approx(2 / (D * (T - 1)), rel=0.15)
    for name in ("ergodicity_ratio", "ageing_ratio"):
        assert np.median(out[name]) == pytest.approx(1.0, abs=0.05)
    for q in (1, 2, 4):
        assert abs(np.median(out[f"vacf_q{q}"])) < 0.03
    assert abs(np.median(out["alpha2"])) < 0.05


def test_mixed_rates_raise_eb_and_alpha2_by_the_rates_spread():
    rng = np.random.default_rng(1)
    var = np.exp(rng.uniform(0, np.log(10), N))  # per-walker diffusion rates over 10x
    out = _diag(_bm(rng, np.sqrt(var)))
    cv2 = var.var() / var.mean() ** 2  # a Gaussian scale mixture: alpha_2 = Var(s^2) / E(s^2)^2
    assert np.median(out["alpha2"]) == pytest.approx(cv2, abs=0.1)
    assert np.median(out["eb"]) == pytest.approx(cv2 + 2 / (D * (T - 1)), rel=0.2)
    assert np.median(out["ergodicity_ratio"]) == pytest.approx(1.0, abs=0.05)


def test_velocity_autocorrelation_sees_reversion_and_persistence():
    rng = np.random.default_rng(2)
    x, ou = rng.standard_normal((R, N, D)), np.empty((R, T, N, D))
    for t in range(T):
        x = 0.5 * x + rng.standard_normal((R, N, D))
        ou[:, t] = x
    assert np.median(_diag(ou)["vacf_q1"]) < -0.2
    ballistic = np.cumsum(1.0 + 0.3 * rng.standard_normal((R, T, N, D)), 1)
    assert np.median(_diag(ballistic)["vacf_q1"]) > 0.5


def test_slowing_motion_ages():
    rng = np.random.default_rng(3)
    scale = 1 / np.sqrt(1 + np.arange(T - 1))  # step variance ~ 1/t: MSD grows like log t, slower with age
    inc = rng.standard_normal((R, T - 1, N, D)) * scale[None, :, None, None]
    X = np.concatenate([np.zeros((R, 1, N, D)), np.cumsum(inc, 1)], 1)
    assert np.median(_diag(X)["ageing_ratio"]) < 0.7


def test_walker_reading_separates_spread_rates_from_mixtures():
    rng = np.random.default_rng(4)
    null_alpha, null_rate = 1 + 0.1 * rng.standard_normal((40, 100)), np.exp(0.1 * rng.standard_normal((40, 100)))
    types = np.full(100, "walker", dtype=object)
    spread = walker_reading(1 + 0.1 * rng.standard_normal(100), np.exp(rng.uniform(0, np.log(10), 100)), null_alpha,
                            null_rate, types=types, positions=None, mixed_share=0.2)
    assert spread.reading == "brownian-like" and spread.rates == "spread"
    mix = np.r_[1 + 0.1 * rng.standard_normal(50), 0.3 + 0.1 * rng.standard_normal(50)]
    mixed = walker_reading(mix, np.ones(100), null_alpha, null_rate, types=types, positions=None, mixed_share=0.2)
    assert mixed.reading == "mixed" and mixed.rates == "homogeneous"
    shifted = walker_reading(0.5 + 0.1 * rng.standard_normal(100), np.ones(100), null_alpha, null_rate, types=types,
                             positions=None, mixed_share=0.2)
    assert shifted.reading == "anomalous"


def test_row_quantiles_match_numpy():
    from brownformer.stats.diffusion.walkers import row_quantiles
    x = np.random.default_rng(5).standard_normal((6, 11))
    x[1, 3:] = np.nan
    x[2] = np.nan
    got = row_quantiles(x, [0.025, 0.25, 0.5, 0.975])
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        want = np.nanquantile(x, [0.025, 0.25, 0.5, 0.975], axis=-1)
    assert np.allclose(got, want, equal_nan=True)
