"""Size and power of the exact Brownian rule at a real file's shape, and the lookup by shape."""
import json

import numpy as np
import pytest

from brownformer.stats.core.calibration import processes_for, run_calibration
from brownformer.stats.core.shapes import (DECAY_DECORRELATED, CalibrationShape, calibration_for, select_walkers,
                                      shape_of)

N_REP = 40
SIZE_MAX = 0.15  # rate of "not brownian" on Brownian motion at 40 replicates (goal 8%, ~2 SE slack)
TIMES = np.unique(np.r_[np.round(np.geomspace(1, 200, 10)), np.arange(0, 201, 25)]).astype(float)
LABELS = np.repeat(np.arange(8), 6)


@pytest.fixture(scope="module", params=["euclidean", "sphere"])
def table(request):
    shape = shape_of(kind=request.param, times=TIMES, labels=LABELS, d=8, hyperplane=request.param == "sphere",
                     drift="common" if request.param == "euclidean" else "none", rho=0.3, decay=1.0)
    return shape, run_calibration([shape], n_replicates=N_REP, rng=0, n_resamples=49)


def test_columns_and_processes(table):
    shape, t = table
    for col in ("shape_id", "process", "kind", "T", "N", "d", "G", "rho", "test", "rejection_rate", "n_replicates",
                "rate_brownian", "rate_not_brownian", "rate_inconclusive", "role", "seconds"):
        assert col in t
    assert set(t["process"]) == set(processes_for(shape.kind)) and set(t["shape_id"]) == {shape.id}
    assert json.loads(t["times"].iloc[0]) == list(shape.times)


def test_size_and_power_of_the_rule(table):
    shape, t = table
    v = t[t.test == "verdict"].set_index("process")
    assert v.loc["brownian", "rate_not_brownian"] <= SIZE_MAX
    rates = v[["rate_brownian", "rate_not_brownian", "rate_inconclusive"]].sum(axis=1)
    np.testing.assert_allclose(rates, 1.0)
    assert v.loc["iid", "rate_brownian"] == 0.0  # a non-walk is never certified
    for edge in ("clock_0.9", "clock_1.1"):  # at the margin edges TOST certifies at most ~alpha
        assert v.loc[edge, "rate_brownian"] <= 0.15


def test_lookup_needs_the_exact_shape(table):
    shape, t = table
    cal = calibration_for(t, shape)
    assert cal.shape.id == shape.id and cal.n_replicates <= N_REP
    assert set(cal.power.keys()) == set(processes_for(shape.kind)) - {"brownian"}
    n = cal.n_replicates
    p = (cal.size * n + 1) / (n + 2)
    assert cal.size_se == pytest.approx(np.sqrt(p * (1 - p) / n)) and cal.size_se > 0
    assert cal.power_lower.keys() == cal.power.keys()
    assert all(cal.power_lower[p.key].value <= p.value for p in cal.power) and cal.size_upper >= cal.size
    other = CalibrationShape(shape.kind, shape.times, shape.group_sizes, shape.d, shape.hyperplane, shape.drift,
                             0.8, shape.decay)
    assert calibration_for(t, other) is None and calibration_for(None, shape) is None


def test_shape_keeps_the_data_values():
    s = shape_of(kind="sphere", times=TIMES, labels=LABELS, d=8, hyperplane=True, drift="none", rho=0.33, decay=0.7)
    assert CalibrationShape.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    # no grid and no clipping: the simulated correlation and decay are the data's own (issue 19)
    assert s.rho == 0.33 and s.decay == 0.7 and s.times[0] == 0.0 and s.times[-1] == 1.0
    assert shape_of(kind="sphere", times=TIMES, labels=LABELS, d=8, hyperplane=True, drift="none", rho=0.93,
                    decay=23.4).rho == 0.93
    assert shape_of(kind="sphere", times=TIMES, labels=LABELS, d=8, hyperplane=True, drift="none", rho=0.0,
                    decay=None).decay == DECAY_DECORRELATED
    # common-drift removal lowers the estimated correlation; the shape records the generating one
    assert shape_of(kind="euclidean", times=TIMES, labels=LABELS, d=8, hyperplane=False, drift="common", rho=0.52,
                    decay=None).rho > 0.52


def test_select_walkers_keeps_every_group_and_thins_within():
    idx = select_walkers(LABELS, 20, rng=0)
    counts = np.bincount(LABELS[idx], minlength=8)
    assert idx.size <= 20 and np.all(counts == 20 // 8)  # 8 groups of 6 thinned to 2 each, none dropped
    assert select_walkers(LABELS, 100, rng=0).size == LABELS.size
    assert np.array_equal(select_walkers(LABELS, 20, rng=3), select_walkers(LABELS, 20, rng=3))  # seeded
    # replica contrasts: 5 contrasts x 136 walkers at max_walkers 512 keep all 5 groups (102 each)
    contrasts = np.repeat(np.arange(5), 136)
    kept = np.bincount(contrasts[select_walkers(contrasts, 512, rng=0)], minlength=5)
    assert kept.tolist() == [102] * 5
    # unequal groups: small groups stay whole, the large ones share what is left
    uneven = np.repeat(np.arange(4), [3, 5, 50, 80])
    kept = np.bincount(uneven[select_walkers(uneven, 40, rng=0)], minlength=4)
    assert kept.tolist() == [3, 5, 16, 16] and kept.sum() <= 40
    # more groups than walkers allowed: one walker of each of max_walkers groups
    many = np.repeat(np.arange(30), 2)
    kept = np.bincount(many[select_walkers(many, 10, rng=0)], minlength=30)
    assert kept.sum() == 10 and kept.max() == 1


def test_thinned_replica_file_is_decided_and_its_shape_matches_the_data():
    """5 groups x 136 walkers with max_walkers 512: all 5 groups reach the rule (not "inconclusive: 3 groups"),
    and the calibration shape records the thinned sizes (G = 5, N = 510) the data were analysed at."""
    from brownformer.io import to_jsonable
    from brownformer.stats.diffusion.brownian import trajectory_battery
    rng = np.random.default_rng(1)
    X = np.cumsum(rng.normal(size=(20, 5 * 136, 3)), axis=0)
    out = to_jsonable(trajectory_battery(X, kind="euclidean", groups=np.repeat(np.arange(5), 136), max_walkers=512,
                                         drift="none", n_resamples=49, rng=0))
    shape = CalibrationShape.from_dict(out["calibration_shape"])
    assert out["n_groups"] == 5 and out["n_walkers"] == 510 and out["n_walkers_total"] == 680
    assert shape.group_sizes == (102,) * 5 and shape.n_walkers == out["n_walkers"] and "group(s)" not in out["reason"]


def test_short_shapes_are_not_simulated():
    s = shape_of(kind="euclidean", times=np.arange(5.0), labels=LABELS, d=4, hyperplane=False, drift="common",
                 rho=0.0, decay=None)
    assert run_calibration([s], n_replicates=5).empty


def test_replica_contrast_file_keeps_all_five_contrasts_through_the_file_stage(tmp_path):
    """The file path (sidecar groups = contrast index, as extract-replicas writes): the battery, the window reading and
    the fitted null's walkers agree on the thinned selection, and the calibration shape is that selection's."""
    import json as _json

    from brownformer.config import StatsConfig
    from brownformer.stats.diffusion.trajectory_inputs import analysis_inputs
    from brownformer.stats_stage.run_stats import trajectory_file_stats
    from brownformer.stats_stage.trajectory_io import load_trajectory
    rng = np.random.default_rng(2)
    X = np.cumsum(rng.normal(size=(20, 5 * 136, 3)), axis=0).astype(np.float32)
    np.save(tmp_path / "ln_l1.npy", X)
    side = {"kind": "euclidean", "groups": np.repeat(np.arange(5), 136).tolist(), "drift": "none", "unit": "replica"}
    (tmp_path / "ln_l1.json").write_text(_json.dumps(side))
    stats = StatsConfig(n_resamples=49, max_walkers=512)
    out = trajectory_file_stats(tmp_path / "ln_l1.npy", stats=stats)
    shape = out.calibration_shape
    assert (out.n_groups, out.n_walkers, out.n_walkers_total) == (5, 510, 680)
    assert (len(shape.group_sizes), shape.n_walkers) == (5, 510) and "group(s)" not in out.reason
    Xs, labels, *_ = analysis_inputs(*load_trajectory(tmp_path / "ln_l1.npy"), stats)  # the fitted null's walkers
    assert Xs.shape[1] == 510 and np.bincount(labels).tolist() == [102] * 5
