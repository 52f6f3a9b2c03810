"""The one Brownian decision rule: its logic, its behaviour on processes with known answers, and that the
claims and the calibration apply the very same function."""
import numpy as np
import pytest

from brownformer.config import DEFAULT_MARGINS, StatsConfig
from brownformer.stats.diffusion import rule
from brownformer.io import to_jsonable
from brownformer.stats.diffusion.brownian import trajectory_battery, battery_batch
from brownformer.stats.diffusion.rule import KEY_EFFECTS, Effect, decide, decide_one
from brownformer.stats.diffusion.simulate import simulate_batch
from brownformer.stats.diffusion.window_reading import window_effects
from brownformer.stats.core.gates import cp_bounds
from brownformer.statsfile import Keyed, KeyedValue, ShapeCalibration, ShapeSummary

ALPHA = 0.05
N_RESAMPLES = 199  # bootstrap resamples of these batteries (enough for the rates checked here, and fast)
#: log- plus linear-spaced captures, as the probe schedule writes them (irregular spacing)
TIMES = np.unique(np.r_[np.round(np.geomspace(1, 300, 16)), np.arange(0, 301, 20)]).astype(float)
GROUPS = np.repeat(np.arange(8), 17)  # 8 probe inputs x 17 tokens (the ViT probes)
BROWNIAN_RATE_MIN = 0.9  # issue 10: grouped Brownian walkers are called Brownian in >= 90% of replicates
COVERAGE_MIN = 0.85  # and the exponent's 95% interval covers 1 in >= 85%


def _effects(values: dict, kind="euclidean"):
    """Effects with a given (estimate, low, high, p) per key test (a default inside every margin)."""
    out = {}
    for t in KEY_EFFECTS[kind]:
        lo, hi = DEFAULT_MARGINS[rule.MARGIN_KEYS[t]]
        mid = (lo + hi) / 2
        est, tlo, thi, p = values.get(t, (mid, mid - 0.01, mid + 0.01, 0.5))
        out[t] = Effect(np.array([est]), np.array([tlo]), np.array([thi]), np.array([p]))
    return out


@pytest.mark.parametrize("values,expected", [
    ({}, "brownian"),
    ({"msd_exponent": (0.5, 0.45, 0.55, 1e-9)}, "not brownian"),  # interval outside the margin
    ({"msd_exponent": (0.85, 0.6, 1.0, 0.01)}, "not brownian"),  # calibrated rejection, estimate outside
    ({"msd_exponent": (0.95, 0.85, 1.05, 0.01)}, "inconclusive"),  # rejects, but the estimate is negligible
    ({"variance_ratio": (1.0, 0.85, 1.15, 0.5)}, "inconclusive"),  # interval overlaps a margin edge
    ({"gaussianity": (np.nan, np.nan, np.nan, np.nan)}, "inconclusive"),  # undefined key effect
    ({"msd_exponent": (1.0, np.nan, np.nan, 0.5)}, "inconclusive"),  # estimate without an interval
], ids=["inside", "outside", "rejection", "negligible", "overlap", "undefined", "no-interval"])
def test_rule_logic(values, expected):
    verdicts, reasons = decide(_effects(values), kind="euclidean", margins=DEFAULT_MARGINS, alpha=ALPHA,
                                n_times=20)
    assert verdicts[0] == expected and reasons[0]


def test_too_few_time_points_are_inconclusive_whatever_the_effects():
    """Depth of 3-5 layers: even effects far outside their margins give no verdict (issue 10, item 7)."""
    outside = _effects({"msd_exponent": (0.5, 0.45, 0.55, 1e-9)})
    for effects in (_effects({}), outside):
        v, reasons = decide(effects, kind="euclidean", margins=DEFAULT_MARGINS, alpha=ALPHA, n_times=7)
        assert v[0] == "inconclusive" and "< 8" in reasons[0]


@pytest.mark.parametrize("kind", ["euclidean", "sphere"])
def test_no_undefined_key_effect_yields_brownian(kind):
    for t in KEY_EFFECTS[kind]:
        for bad in ((np.nan, 0.95, 1.05, 0.5), (1.0, np.nan, 1.05, 0.5), (1.0, 0.95, np.nan, 0.5)):
            v, _ = decide(_effects({t: bad}, kind), kind=kind, margins=DEFAULT_MARGINS, alpha=ALPHA, n_times=20)
            assert v[0] != "brownian", t
        missing = {k: e for k, e in _effects({}, kind).items() if k != t}
        v, reasons = decide(missing, kind=kind, margins=DEFAULT_MARGINS, alpha=ALPHA, n_times=20)
        assert v[0] == "inconclusive" and t in reasons[0]


def test_stored_effects_give_the_same_verdict():
    """decide_one on the JSON an analysis stores reproduces the analysis' own verdict."""
    X = simulate_batch("clock_0.9", times=TIMES, labels=GROUPS, d=8, kind="euclidean", replicates=1, rng=3)[0]
    out = to_jsonable(trajectory_battery(X, kind="euclidean", times=TIMES, groups=GROUPS.tolist(), n_resamples=99))
    verdict, reason = decide_one(window_effects(out), kind="euclidean", margins=DEFAULT_MARGINS, alpha=ALPHA,
                                 n_times=out["n_times"])
    assert (verdict, reason) == (out["verdict"], out["reason"]) and out["brownian"] == (verdict == "brownian")


@pytest.mark.parametrize("kind", ["euclidean", "sphere"])
def test_independent_points_are_never_brownian(kind):
    X = simulate_batch("iid", times=TIMES, labels=GROUPS, d=16, kind=kind, replicates=20, rng=4)
    bat = battery_batch(X, kind=kind, times=TIMES, labels=GROUPS, margins=DEFAULT_MARGINS, alpha=ALPHA, n_resamples=N_RESAMPLES, rng=0)
    assert not np.any(bat.verdicts == "brownian")
    if kind == "euclidean":  # white-noise positions: a flat MSD is evidence, not just a failure to certify
        assert np.all(bat.verdicts == "not brownian")


@pytest.mark.parametrize("kind", ["euclidean", "sphere"])
def test_grouped_brownian_walkers_are_certified_and_covered(kind):
    """Within-group correlation 0.6 (tokens of one input move together), groups resampled."""
    X = simulate_batch("brownian", times=TIMES, labels=GROUPS, d=32, kind=kind, replicates=60, rng=5, rho=0.6,
                       hyperplane=kind == "sphere")
    bat = battery_batch(X, kind=kind, times=TIMES, labels=GROUPS, margins=DEFAULT_MARGINS, alpha=ALPHA, n_resamples=N_RESAMPLES, rng=1,
                        hyperplane=kind == "sphere" or None)
    assert np.mean(bat.verdicts == "brownian") >= BROWNIAN_RATE_MIN, dict(zip(*np.unique(bat.reasons, return_counts=True)))
    lo, hi = bat.stats["msd_exponent"].interval(0.95)
    assert np.mean((lo < 1) & (1 < hi)) >= COVERAGE_MIN


def test_walker_resampling_would_undercover_grouped_walkers():
    """The same data with every walker its own group: the interval is too narrow (why groups matter)."""
    X = simulate_batch("brownian", times=TIMES, labels=GROUPS, d=16, kind="euclidean", replicates=60, rng=5, rho=0.6)
    ignore = battery_batch(X, kind="euclidean", times=TIMES, labels=np.arange(GROUPS.size), margins=DEFAULT_MARGINS,
                           alpha=ALPHA, n_resamples=N_RESAMPLES, rng=1)
    grouped = battery_batch(X, kind="euclidean", times=TIMES, labels=GROUPS, margins=DEFAULT_MARGINS, alpha=ALPHA, n_resamples=N_RESAMPLES, rng=1)
    width = {name: np.mean(np.subtract(*b.stats["msd_exponent"].interval(0.95)[::-1])) for name, b in
             (("ignore", ignore), ("grouped", grouped))}
    assert width["ignore"] < 0.7 * width["grouped"]


def test_claims_and_calibration_call_the_same_rule(monkeypatch, tmp_path):
    """A spy on rule.decide sees the calibration's verdicts and the claim's verdict go through it."""
    from brownformer.stats.core.calibration import run_calibration
    from brownformer.stats.claims.claim3_brownian import file_verdict
    from brownformer.stats.core.shapes import CalibrationShape
    calls = []
    original = rule.decide

    def spy(*args, **kwargs):
        calls.append(kwargs.get("kind"))
        return original(*args, **kwargs)

    monkeypatch.setattr(rule, "decide", spy)
    X = simulate_batch("brownian", times=TIMES, labels=GROUPS, d=8, kind="euclidean", replicates=1, rng=6)[0]
    out = to_jsonable(trajectory_battery(X, kind="euclidean", times=TIMES, groups=GROUPS.tolist(), n_resamples=49))
    n_analysis = len(calls)
    shape = CalibrationShape.from_dict(out["calibration_shape"])
    table = run_calibration([shape], n_replicates=5, processes=["brownian"], n_resamples=19)
    n_calibration = len(calls) - n_analysis
    verdict, _, cal = file_verdict(out, StatsConfig(), table)
    assert n_analysis == 1 and n_calibration == 1 and len(calls) == 3
    assert cal is not None and cal["shape"]["id"] == shape.id


@pytest.mark.parametrize("rule_verdict,power,expected", [
    ("not brownian", 0.5, "not brownian"),  # a rejection rests on the size alone
    ("brownian", 0.5, "inconclusive"),  # certifying needs power at every alternative
    ("brownian", 0.95, "brownian"),
])
def test_each_verdict_is_held_to_its_own_false_positive_rate(monkeypatch, rule_verdict, power, expected):
    from brownformer.stats.claims import claim3_brownian as claim
    monkeypatch.setattr(claim, "decide_one", lambda *a, **k: (rule_verdict, "stub"))
    power = {"clock_0.9": power, "iid": 1.0}
    lower = {p: cp_bounds(int(round(v * 400)), 400)[0] for p, v in power.items()}  # the gate's bounds at 400
    cal = ShapeCalibration(ShapeSummary("x", "euclidean", "euclidean", 2, 1, 2, 1, False, "none", 0.0, 0.0, None),
                           0.03, 0.03, 0.01, 0.9, KeyedValue.mapping(power), KeyedValue.mapping(lower), Keyed(), 400,
                           400)
    monkeypatch.setattr(claim, "calibration_for", lambda table, shape: cal)
    result = {"kind": "euclidean", "n_times": 20, "effects": {},
              "calibration_shape": {"kind": "euclidean", "times": [0, 1], "group_sizes": [1], "d": 2,
                                    "hyperplane": False, "drift": "none", "rho": 0.0, "decay": 0.0}}
    verdict, _, got = claim.file_verdict(result, StatsConfig(), table=object())
    assert verdict == expected and got["size"] == cal.size and got["fitted"] is None
