"""The tuning's seed cache (tuning.trial.run_seed with ``cache``): a rerun returns the finished seed's row without
training it again, and any change to what determines the run is another key."""
from __future__ import annotations

import json

import pytest

from brownformer.tuning import trial

from .test_quasi_random import _raw


def test_a_cached_seed_is_not_trained_again_and_other_settings_are(tmp_path, monkeypatch, digits_dir):
    raw, cache = _raw(), tmp_path / "cache"
    kwargs = dict(target=0.14, eval_every=5, stop_at=None, cache=cache)
    first = trial.run_seed(raw, "vit-pre", "adamw", {"lr": 0.003}, 100, str(digits_dir), **kwargs)
    assert len(list(cache.glob("*.json"))) == 1

    def no_training(*args, **kw):
        raise AssertionError("a cached seed was trained again")

    real = trial._train_seed
    monkeypatch.setattr(trial, "_train_seed", no_training)
    again = trial.run_seed(raw, "vit-pre", "adamw", {"lr": 0.003}, 100, str(digits_dir), **kwargs)
    assert json.dumps(again) == json.dumps(first)  # the same row (NaN steps included: compared as written)
    for change in ({"lr": 0.004}, {"lr": 0.003, "horizon": 10}):  # another setting, another schedule: trained
        with pytest.raises(AssertionError, match="trained again"):
            trial.run_seed(raw, "vit-pre", "adamw", change, 100, str(digits_dir), **kwargs)
    with pytest.raises(AssertionError, match="trained again"):  # another seed
        trial.run_seed(raw, "vit-pre", "adamw", {"lr": 0.003}, 101, str(digits_dir), **kwargs)
    monkeypatch.setattr(trial, "_train_seed", real)
    other = trial.run_seed(raw, "vit-pre", "adamw", {"lr": 0.003}, 100, str(digits_dir), **{**kwargs, "target": 0.2})
    assert len(list(cache.glob("*.json"))) == 2 and other["seed"] == 100
