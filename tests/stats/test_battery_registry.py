"""The battery's registry is what the battery computes, reports and decides on: an entry is the whole of a statistic."""
import numpy as np
import pytest

from brownformer.config import DEFAULT_MARGINS
from brownformer.stats.diffusion import rule
from brownformer.stats.diffusion.battery_registry import KINDS, STATISTICS, batch_statistics
from brownformer.io import to_jsonable
from brownformer.stats.diffusion.brownian import trajectory_battery, battery_batch
from brownformer.stats.diffusion.simulate import simulate_batch

TIMES = np.arange(12, dtype=float)
N_WALKERS = 48


def _walks(kind, replicates=2):
    return simulate_batch("brownian", times=TIMES, labels=np.arange(N_WALKERS) % 8, d=6, kind=kind,
                          replicates=replicates, rng=3, decay=0.5)


def test_rule_reads_its_maps_from_the_registry():
    for kind in KINDS:
        assert rule.KEY_EFFECTS[kind] == tuple(s.name for s in STATISTICS if kind in s.key_in)
        for name in rule.KEY_EFFECTS[kind]:
            assert name in rule.MARGIN_KEYS, f"key effect {name} has no margin"
    assert rule.MARGIN_KEYS == {s.name: s.margin_key for s in STATISTICS if s.margin_key}
    names = [s.name for s in STATISTICS]
    assert len(names) == len(set(names)), "a statistic registered twice"


@pytest.mark.parametrize("kind", KINDS)
def test_battery_batch_computes_the_registered_statistics(kind):
    """Without `describe` only what the verdict needs (the calibration's speed); with it every batch entry of the
    kind."""
    X = _walks(kind)
    labels = np.arange(N_WALKERS) % 8
    kw = dict(kind=kind, times=TIMES, labels=labels, margins=DEFAULT_MARGINS, alpha=0.05, n_resamples=49, rng=0,
              drift="common" if kind == "euclidean" else "none")
    lean = battery_batch(X, **kw)
    key = set(rule.KEY_EFFECTS[kind])
    descriptive = {s.name for s in STATISTICS if kind in s.compute and not s.per_trajectory and kind not in s.key_in
                   and not s.always}
    assert key <= set(lean.stats) and not descriptive & set(lean.stats)
    full = battery_batch(X, describe=True, **kw)
    assert list(full.stats) == [s.name for s in batch_statistics(kind, True)]
    assert descriptive <= set(full.stats)
    for name in key:  # the lean battery and the full one draw the same numbers for the key effects
        np.testing.assert_array_equal(lean.stats[name].estimate, full.stats[name].estimate)


@pytest.mark.parametrize("kind", KINDS)
def test_analyze_trajectory_reports_every_entry_and_decides_on_the_key_ones(kind):
    out = to_jsonable(trajectory_battery(_walks(kind, 1)[0], kind=kind, times=TIMES, groups=np.arange(N_WALKERS) % 8,
                                         n_resamples=49, rng=0))
    tests = {t["name"] for t in out["tests"]}
    for s in STATISTICS:
        if kind in s.compute and s.name != "diffusion_coefficient":  # an estimate, reported beside the tests
            assert s.name in tests, f"{s.name} not reported for {kind}"
    assert list(out["effects"]) == list(rule.KEY_EFFECTS[kind]) == out["key_effects"]
    for name, effect in out["effects"].items():
        assert effect["margin"] == list(DEFAULT_MARGINS[rule.MARGIN_KEYS[name]])
