"""did_not_train / reached_plateau against metrics tables whose answer is known by construction."""
import json

import numpy as np
import pandas as pd
import pytest

from brownformer.metrics import val_metric
from brownformer.stats.core.training_status import CHANCE_SE_MULTIPLE, did_not_train, reached_plateau, training_status
from brownformer.stats_stage.chance_baseline import chance_baseline

N_VAL, N_CLASSES = 270, 10


def _table(values, *, column="val_accuracy", loss=None):
    steps = np.arange(1, len(values) + 1) * 25
    return pd.DataFrame({"step": steps, "train_loss": loss if loss is not None else np.linspace(2.3, 1.0, len(values)),
                         column: values, "wall_time": steps * 0.1})


@pytest.fixture
def image_data(tmp_path):
    y = np.arange(N_VAL) % N_CLASSES  # balanced: chance = 1/10
    np.savez(tmp_path / "val.npz", x=np.zeros((N_VAL, 1)), y=y)
    (tmp_path / "meta.json").write_text(json.dumps({"n_classes": N_CLASSES}))
    return tmp_path


def test_chance_accuracy_and_margin_are_binomial(image_data):
    base = chance_baseline(image_data)
    c = 1 / N_CLASSES
    assert base.value == pytest.approx(c)
    assert base.margin == pytest.approx(CHANCE_SE_MULTIPLE * np.sqrt(c * (1 - c) / N_VAL))


def test_chance_level_run_flagged_and_trained_run_not(image_data):
    base = chance_baseline(image_data)
    rng = np.random.default_rng(0)
    # a chance-level classifier: accuracy of uniform random guesses on the val labels
    chance_acc = [float((rng.integers(0, N_CLASSES, N_VAL) == np.arange(N_VAL) % N_CLASSES).mean()) for _ in range(8)]
    flag, reason = did_not_train(_table(chance_acc, loss=np.full(8, 2.30)), base)
    assert flag and "chance" in reason
    flag, reason = did_not_train(_table(np.linspace(0.2, 0.9, 8)), base)
    assert not flag and "trained" in reason


def test_diverged_run_flagged_without_baseline():
    loss = np.linspace(2.3, 1.0, 6)
    loss[3] = np.nan
    flag, reason = did_not_train(_table(np.linspace(0.2, 0.9, 6), loss=loss))
    assert flag and "diverged" in reason and "step 100" in reason


def test_language_model_unigram_level(tmp_path):
    rng = np.random.default_rng(1)
    p = np.array([0.5, 0.25, 0.125, 0.125])
    x_train, x_val = rng.choice(4, 20000, p=p), rng.choice(4, 5000, p=p)
    np.savez(tmp_path / "train.npz", x=x_train)
    np.savez(tmp_path / "val.npz", x=x_val)
    (tmp_path / "meta.json").write_text(json.dumps({"vocab_size": 4}))
    base = chance_baseline(tmp_path)
    assert base.metric == "val_bpc"
    assert base.value == pytest.approx(-(p * np.log2(p)).sum(), abs=0.03)  # entropy of the law: 1.75 bits
    assert did_not_train(_table([2.0, 1.9, 1.76], column="val_bpc"), base)[0]
    assert not did_not_train(_table([2.0, 1.5, 1.2], column="val_bpc"), base)[0]


def test_plateau_rule():
    rising = _table(np.linspace(0.1, 0.9, 20))
    flat = _table(np.r_[np.linspace(0.1, 0.9, 15), np.full(5, 0.9)])
    assert reached_plateau(rising) is False
    assert reached_plateau(flat) is True
    assert reached_plateau(_table([0.5])) is None


def test_status_carries_numbers(image_data):
    st = training_status(_table(np.linspace(0.2, 0.9, 8)), chance_baseline(image_data))
    d = st.to_dict()
    assert d["did_not_train"] is False and d["metric"] == "val_accuracy" and d["final"] == pytest.approx(0.9)
    assert d["chance"] == pytest.approx(0.1)


def test_metric_accessor_prefers_accuracy_then_bpc():
    df = pd.DataFrame({"step": [1], "val_accuracy": [np.nan], "val_bpc": [2.0], "val_loss": [1.4]})
    m = val_metric(df)
    assert m.column == "val_bpc" and not m.higher_is_better
    with pytest.raises(ValueError, match="val_accuracy"):
        val_metric(pd.DataFrame({"step": [1]}))
