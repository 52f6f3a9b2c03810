"""Battery size on Brownian motion and power against each alternative, at small sizes."""
import numpy as np
import pytest

from brownformer.stats import run_calibration
from brownformer.stats.calibration import calibration_for

N_REP = 12
SIZE_MAX = 0.2  # classification size bound at 12 replicates (goal 8%, ~3 SE slack)
POWER_MIN = 0.8


@pytest.fixture(scope="module")
def table():
    return run_calibration(shapes=[(30, 96, 8, "euclidean"), (30, 96, 8, "sphere")], n_replicates=N_REP, rng=0,
                           n_resamples=99)


def test_columns(table):
    for col in ("process", "kind", "T", "N", "d", "test", "rejection_rate", "n_replicates", "brownian_rate"):
        assert col in table


@pytest.mark.parametrize("kind", ["euclidean", "sphere"])
def test_size_and_power(table, kind):
    cls = table[(table.test == "classification") & (table.kind == kind)].set_index("process")["rejection_rate"]
    assert cls["brownian"] <= SIZE_MAX
    for process, rate in cls.drop("brownian").items():
        assert rate >= POWER_MIN, f"power {rate:.2f} against {process} on {kind}"


def test_calibration_lookup(table):
    c = calibration_for(table, kind="sphere", T=32, N=100, d=8)
    assert c["shape"] == {"T": 30, "N": 96, "d": 8, "kind": "sphere"} and not c["exact_match"]
    assert "classification" in c["size"] and np.isfinite(c["classification_min_power"])
