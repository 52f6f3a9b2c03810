"""Local slopes, the pre-fixed window and the window reading against simulated walks with known answers."""
import numpy as np
import pytest

from brownformer.config import DEFAULT_WINDOW, StatsConfig
from brownformer.stats.diffusion.local_slope import (fit_offset_power, fitting_window, local_slopes, storage_offset,
                                             walker_slopes)
from brownformer.stats.diffusion.simulate import fgn_increments, spherical_brownian_motion
from brownformer.stats.diffusion.window_reading import key_effects_on_window, window_effects, window_reading
from brownformer.stats.core.gates import cp_bounds
from brownformer.statsfile import EffectResult, Keyed, KeyedValue, ShapeCalibration, ShapeSummary

T, G, N_PER, D = 40, 8, 16, 16
N = G * N_PER
LABELS = np.repeat(np.arange(G), N_PER)
TIMES = np.arange(T, dtype=float)
STATS = StatsConfig(n_resamples=199, window={**DEFAULT_WINDOW, "envelope_replicates": 29})
RATE_SPREAD = 10.0  # the case: rates spread over 10x


def _read(X, kind="euclidean", **kw):
    return window_reading(X, TIMES, kind=kind, labels=LABELS, k=X.shape[-1], hyperplane=False, drift="none",
                          steps=None, meta={}, stats=STATS, **kw)


def _rates(rng):
    return np.exp(rng.uniform(0, np.log(RATE_SPREAD), N))


def _ou(rng, n, phi=0.7):
    x, out = rng.standard_normal((n, D)) / np.sqrt(1 - phi**2), np.empty((T, n, D))
    for t in range(T):
        x = phi * x + rng.standard_normal((n, D))
        out[t] = x
    return out


def test_window_starts_after_warmup_and_skips_lags_shorter_than_the_momentum_time():
    steps = np.array([0, 2, 5, 10, 19, 20, 25, 29, 30, 31, 50, 100])
    win = fitting_window(np.arange(12.0), steps, start_step=20, min_lag_steps=10)
    assert win.start == 5 and win.min_lag_steps == 10
    assert (steps[win.used] - 20 >= 10).all() and steps[win.used].tolist() == [30, 31, 50, 100]
    whole = fitting_window(np.arange(12.0), None, start_step=20, min_lag_steps=10)
    assert whole.start == 0 and whole.used.tolist() == list(range(1, 12))


@pytest.mark.parametrize("alpha,c", [(1.0, 0.0), (0.5, 0.0), (1.5, 0.0), (1.0, 2.0)])
def test_offset_power_fit_recovers_exact_curves(alpha, c):
    tau = np.geomspace(1, 1000, 30)
    a, cc, D = fit_offset_power(tau, c + 0.3 * tau**alpha)
    assert a == pytest.approx(alpha, abs=0.02) and cc == pytest.approx(c, abs=0.05 * max(c, 0.1))
    assert D == pytest.approx(0.3, rel=0.1)


def test_local_slope_of_a_power_law_is_its_exponent_everywhere():
    tau = np.geomspace(1, 1e4, 40)
    assert np.allclose(local_slopes(tau, tau**0.7), 0.7)


def test_mean_per_walker_slope_is_one_for_brownian_walkers_of_any_rate():
    # E log|Y_i(t)|^2 = log t + const per walker, so the slope's mean is exactly 1 whatever the rates
    rng = np.random.default_rng(0)
    rates = np.exp(rng.uniform(0, np.log(RATE_SPREAD), 100))
    Y = np.cumsum(rng.standard_normal((64, T - 1, 100, 3)) * np.sqrt(rates)[None, None, :, None], 1)  # Y_t - Y_0
    s = walker_slopes(TIMES[1:], np.einsum("rtnd,rtnd->rnt", Y, Y), np.zeros(64))
    assert np.nanmean(s.alpha) == pytest.approx(1.0, abs=0.02)
    assert np.log10(np.nanquantile(s.rate, 0.9) / np.nanquantile(s.rate, 0.1)) > 0.5  # the spread is seen


def test_local_slope_of_brownian_motion_is_one_inside_its_envelope():
    rng = np.random.default_rng(1)
    out = _read(np.cumsum(rng.standard_normal((T, N, D)), 0))
    ls, env = np.asarray(out.local_slopes.local_slope, float), out.local_slopes.envelope
    assert abs(np.nanmedian(ls) - 1) < 0.05
    inside = (ls >= np.asarray(env.low) - 0.02) & (ls <= np.asarray(env.high) + 0.02)
    assert inside[np.isfinite(ls)].mean() >= 0.9 and out.local_slopes.classification == "brownian"


@pytest.mark.parametrize("kind", ["euclidean", "sphere"])
def test_brownian_walkers_with_rates_spread_over_10x_are_called_brownian(kind):
    rng = np.random.default_rng(2)
    rates = _rates(rng)
    if kind == "euclidean":
        X = np.cumsum(rng.standard_normal((T, N, D)) * np.sqrt(rates)[None, :, None], 0)
    else:  # each walker its own spherical Brownian motion; E<u_0, u_T> from exp(-1) (slowest) to exp(-10)
        X = np.concatenate([spherical_brownian_motion(T, 1, D, diffusion=r / ((D - 1) * T), rng=i)
                            for i, r in enumerate(rates)], axis=1)
    out = _read(X, kind=kind)
    assert out.local_slopes.classification == "brownian", out.local_slopes.description
    assert out.walkers.reading == "brownian-like" and out.walkers.rates == "spread"
    if kind == "sphere":  # the ensemble curve bends (mean of exponentials): the window exponent does not
        assert out.local_slopes.ensemble_exponent.estimate < 0.9 < out.local_slopes.effect.tost_interval[0]


@pytest.mark.parametrize("other", ["ou", "ballistic"])
def test_mixtures_of_brownian_and_non_brownian_walkers_are_mixed(other):
    rng = np.random.default_rng(3)
    X = np.empty((T, N, D))
    X[:, ::2] = np.cumsum(rng.standard_normal((T, N // 2, D)), 0)
    if other == "ou":
        X[:, 1::2] = _ou(rng, N // 2)
    else:  # a constant velocity per walker plus a little noise
        X[:, 1::2] = np.cumsum(0.5 * rng.standard_normal((1, N // 2, D)) + 0.1 * rng.standard_normal((T, N // 2, D)), 0)
    out = _read(X)
    assert out.walkers.reading == "mixed" and out.local_slopes.classification == "mixed", out.walkers.why


def test_fast_then_arrested_walk_is_a_crossover_not_subdiffusion():
    rng = np.random.default_rng(4)
    inc = rng.standard_normal((T, N, D)) * np.where(np.arange(T) < 12, 1.0, 0.1)[:, None, None]
    out = _read(np.cumsum(inc, 0))
    assert out.local_slopes.classification == "crossover" and out.local_slopes.curvature.tost_interval[1] < -STATS.window["flat_margin"]
    assert "crossover" in out.local_slopes.description


@pytest.mark.parametrize("hurst,expected", [(0.3, "subdiffusive"), (0.7, "superdiffusive")])
def test_flat_power_laws_are_sub_or_superdiffusive(hurst, expected):
    rng = np.random.default_rng(5)
    X = np.cumsum(fgn_increments(T, hurst, N * D, rng).reshape(T, N, D), 0)
    out = _read(X)
    assert out.local_slopes.classification == expected and out.walkers.reading == "anomalous"
    assert out.local_slopes.effect.estimate == pytest.approx(2 * hurst, abs=0.1)


def test_window_effect_replaces_the_full_range_exponent_in_the_verdict():
    rng = np.random.default_rng(6)
    out = _read(np.cumsum(rng.standard_normal((T, N, D)), 0))
    typed = key_effects_on_window(Keyed.of([EffectResult.effect(0.5, name="msd_exponent"),
                                            EffectResult.effect(1.0, name="variance_ratio")]), out.local_slopes)
    assert typed["msd_exponent"].estimate == out.local_slopes.effect.estimate and typed["msd_exponent"].key
    assert typed["variance_ratio"].estimate == 1.0
    result = {"effects": {"msd_exponent": {"estimate": 0.5}, "variance_ratio": {"estimate": 1.0}},
              "local_slopes": out.local_slopes.to_dict()}  # the same on the file as JSON
    eff = window_effects(result)
    assert eff["msd_exponent"].estimate == out.local_slopes.effect.estimate and eff["variance_ratio"].estimate == 1.0
    assert out.local_slopes.effect.null.size <= 0.2 and out.local_slopes.effect.null.n_replicates == 29


@pytest.mark.parametrize("window_estimate,null_size,expected", [
    (1.0, 0.0, "brownian"),  # the full-range exponent is outside, the window's inside: the window decides
    (0.5, 0.0, "not brownian"),
    (0.5, 0.5, "inconclusive"),  # the window exponent's own rule does not keep its size at this shape
])
def test_claim_verdict_rests_on_the_window_exponent(monkeypatch, window_estimate, null_size, expected):
    from brownformer.stats.claims import claim3_brownian as claim
    lower = {"clock_0.9": cp_bounds(380, 400)[0]}  # the gate's bound on a power of 0.95 in 400 replicates
    cal = ShapeCalibration(ShapeSummary("x", "euclidean", "euclidean", 2, 1, 2, 1, False, "none", 0.0, 0.0, None),
                           0.03, 0.03, 0.01, 0.95, KeyedValue.mapping({"clock_0.9": 0.95}), KeyedValue.mapping(lower),
                           Keyed(), 400, 400)
    monkeypatch.setattr(claim, "calibration_for", lambda table, shape: cal)
    from brownformer.config import DEFAULT_MARGINS
    from brownformer.stats.diffusion.rule import KEY_EFFECTS, MARGIN_KEYS

    def inside(test):  # every other key effect (the battery's registry) well inside its margin
        lo, hi = DEFAULT_MARGINS[MARGIN_KEYS[test]]
        mid, half = (lo + hi) / 2, (hi - lo) / 10
        return {"estimate": mid, "tost_interval": [mid - half, mid + half], "pvalue": 0.9}

    e = window_estimate
    p = 0.9 if e == 1 else 1e-6
    result = {"kind": "euclidean", "n_times": 20, "msd_exponent": {"estimate": 0.5},
              "effects": {**{t: inside(t) for t in KEY_EFFECTS["euclidean"]},
                          "msd_exponent": {"estimate": 0.5, "tost_interval": [0.45, 0.55], "pvalue": 1e-6}},
              "local_slopes": {"effect": {"estimate": e, "tost_interval": [e - 0.02, e + 0.02], "pvalue": p,
                                          "null": {"size": null_size, "equivalence_power": 1.0 - null_size,
                                                   "n_replicates": 39, "quantiles": [e - 0.1, e, e + 0.1],
                                                   "what": "the window rule on Brownian motion"}}},
              "calibration_shape": {"kind": "euclidean", "times": [0, 1], "group_sizes": [1], "d": 2,
                                    "hyperplane": False, "drift": "none", "rho": 0.0, "decay": 0.0}}
    verdict, _, _ = claim.file_verdict(result, StatsConfig(), table=object())
    assert verdict == expected


def test_storage_offset_is_the_float16_rounding_variance():
    rng = np.random.default_rng(7)
    X = rng.uniform(0.55, 0.95, (20, 50, 8)).astype(np.float16).astype(np.float32)  # ulp 2^-11 on [0.5, 1)
    assert storage_offset(X, kind="euclidean", k=8) == pytest.approx(2 * 2.0**-22 / 12)
    # the expected squared displacement of two float16 roundings of the same values matches it
    a = rng.uniform(0.55, 0.95, (4000, 8))
    b = a + rng.uniform(-0.01, 0.01, a.shape)  # a later capture: many ulps away, so its rounding is independent
    err = (b.astype(np.float16) - a.astype(np.float16)) - (b - a)
    assert np.mean(err**2) == pytest.approx(2 * 2.0**-22 / 12, rel=0.1)
    assert storage_offset(rng.standard_normal((20, 50, 8)), kind="euclidean", k=8) == 0.0
    assert storage_offset(X / np.sqrt(8), kind="sphere", k=7) > 0  # the token files: float16 / sqrt(d)


def test_storage_offset_checks_every_value_past_its_first_look():
    # the values past the first few decide as well: one value off float16's grid at the end gives no offset
    X = np.full((20, 50, 8), 0.75, np.float32)
    assert storage_offset(X, kind="euclidean", k=8) == pytest.approx(2 * 2.0**-22 / 12)
    X[-1, -1, -1] = 0.75 + 1e-4
    assert storage_offset(X, kind="euclidean", k=8) == 0.0
    # and a grid value past a non-finite one
    X = np.full((20, 50, 8), 0.75, np.float32)
    X[-1, -1, -1] = np.inf
    assert storage_offset(X, kind="euclidean", k=8) == 0.0
