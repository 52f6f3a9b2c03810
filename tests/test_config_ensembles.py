"""Which runs train together (`train.ensemble`): one model, one elementwise optimizer, one schedule."""
from __future__ import annotations

import copy

import pytest

from brownformer.config import apply_overrides, from_dict
from brownformer.config.ensembles import ENSEMBLE_OPTIMIZERS, ensembles


def _cfg(raw, size, seeds=(0, 1, 2, 3, 4, 5, 6), **block):
    raw = copy.deepcopy(raw)
    raw["seeds"] = list(seeds)
    raw["grid"] = [{"models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"], **block},
                   {"models": ["lm-pre"], "optimizers": ["adamw"]}]
    raw.pop("replicas", None)
    return from_dict(apply_overrides(raw, [f"train.ensemble={size}"]))


def test_size_one_trains_every_run_alone(raw_config):
    assert ensembles(_cfg(raw_config, 1)) == []


def test_groups_are_one_model_and_optimizer_cut_evenly(raw_config):
    groups = ensembles(_cfg(raw_config, 4))
    assert [g.runs for g in groups] == [
        tuple(f"vit-pre__adamw__s{s}" for s in (0, 1, 2, 3)), tuple(f"vit-pre__adamw__s{s}" for s in (4, 5, 6)),
        tuple(f"lm-pre__adamw__s{s}" for s in (0, 1, 2, 3)), tuple(f"lm-pre__adamw__s{s}" for s in (4, 5, 6))]
    assert all("kfac" not in r for g in groups for r in g.runs) and "kfac-iterative" not in ENSEMBLE_OPTIMIZERS
    assert groups[0].name == "vit-pre__adamw__s0__e4"


def test_a_lone_run_is_no_ensemble_and_other_schedules_do_not_mix(raw_config):
    raw = copy.deepcopy(raw_config)
    raw["models"]["vit-pre"]["steps"] = 30  # vit-pre's schedule differs from lm-pre's anyway; here from its own
    cfg = _cfg(raw, 8, seeds=(0,))
    assert ensembles(cfg) == []  # one seed per pair: nothing to batch
    cfg = _cfg(raw_config, 8, seeds=(0, 1, 2))
    mixed = copy.deepcopy(raw_config)
    mixed["seeds"] = [0, 1, 2]
    mixed["grid"] = [{"models": ["vit-pre"], "optimizers": ["adamw"], "seeds": [0, 1]},
                     {"models": ["vit-pre"], "optimizers": ["adamw"], "seeds": [2, 3], "eval_every": 5}]
    mixed.pop("replicas", None)
    groups = ensembles(from_dict(apply_overrides(mixed, ["train.ensemble=8"])))
    assert [g.runs for g in groups] == [("vit-pre__adamw__s0", "vit-pre__adamw__s1"),
                                        ("vit-pre__adamw__s2", "vit-pre__adamw__s3")]
    assert len(ensembles(cfg)) == 2


def test_the_runs_claim_4_times_train_alone_and_their_replicas_batch(raw_config):
    raw = copy.deepcopy(raw_config)
    raw["report"] = {"targets": {"vit-pre": 0.5}, "target_optimizer": "adamw", "proposed": "kfac-iterative"}
    raw["replicas"] = [{"models": ["vit-pre"], "optimizers": ["adamw"], "seeds": [0], "count": 4}]
    raw["seeds"] = [0, 1, 2]
    raw["grid"] = [{"models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"]},
                   {"models": ["lm-pre"], "optimizers": ["adamw"]}]
    groups = [g.runs for g in ensembles(from_dict(apply_overrides(raw, ["train.ensemble=8"])))]
    assert groups == [tuple(f"lm-pre__adamw__s{s}" for s in (0, 1, 2)),
                      tuple(f"vit-pre__adamw__s0__r{k}" for k in (1, 2, 3))]


def test_dropout_keeps_a_model_out_of_ensembles(raw_config):
    raw = copy.deepcopy(raw_config)
    raw["models"]["vit-pre"]["dropout"] = 0.1
    assert [g.runs[0] for g in ensembles(_cfg(raw, 4))] == ["lm-pre__adamw__s0", "lm-pre__adamw__s4"]


def test_the_ensemble_size_is_not_part_of_a_runs_slice(raw_config):
    one, eight = _cfg(raw_config, 1), _cfg(raw_config, 8)
    assert one.run_hash("vit-pre__adamw__s0") == eight.run_hash("vit-pre__adamw__s0")


@pytest.mark.parametrize("size", [0, -2])
def test_a_bad_size_is_rejected_naming_the_key(raw_config, size):
    from brownformer.config import ConfigError
    with pytest.raises(ConfigError, match=r"key 'train\.ensemble'"):
        _cfg(raw_config, size)
