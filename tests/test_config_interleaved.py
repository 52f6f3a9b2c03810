"""Which runs one job trains one at a time (`train.interleave`): claim 4's timed runs of a model, whole seeds."""
from __future__ import annotations

import copy

import pytest

from brownformer.config import ConfigError, apply_overrides, from_dict
from brownformer.config.ensembles import ensembles
from brownformer.config.interleaved import interleaved_groups, optimizer_order

#: claim 4 on vit-pre: the proposed optimizer, two baselines named in another order than the config's optimizers,
#: and Muon, which the report does not name as a baseline
PROPOSED, BASELINES, REST = "kfac-iterative", ("sgd", "adamw"), "muon"


def _raw(raw, seeds=(0, 1, 2, 3, 4)):
    raw = copy.deepcopy(raw)
    raw["optimizers"]["sgd"] = {"type": "sgd", "lr": 0.05, "momentum": 0.9}
    raw["optimizers"]["muon"] = {"type": "muon", "lr": 0.01, "adamw_lr": 0.003}
    raw["seeds"] = list(seeds)
    raw["report"] = {"targets": {"vit-pre": 0.5, "lm-pre": 2.0}, "target_optimizer": "adamw", "proposed": PROPOSED,
                     "baselines": list(BASELINES)}
    raw["grid"] = [{"models": ["vit-pre"], "optimizers": ["adamw", "muon", "kfac-iterative", "sgd"]},
                   # lm-pre has a target but no K-FAC run: claim 4 times nothing there, its AdamW runs batch
                   {"models": ["lm-pre"], "optimizers": ["adamw"]}]
    raw["replicas"] = [{"models": ["vit-pre"], "optimizers": ["adamw"], "seeds": [0], "count": 4}]
    return raw


def _groups(raw, interleave, *overrides):
    cfg = from_dict(apply_overrides(raw, [f"train.interleave={interleave}", "train.ensemble=8", *overrides]))
    return cfg, [g.runs for g in interleaved_groups(cfg)]


def _seed(seed):
    return tuple(f"vit-pre__{o}__s{seed}" for o in (PROPOSED, *BASELINES, REST))


def test_groups_are_whole_seeds_of_one_model_seed_major_in_claim_4s_order(raw_config):
    cfg, groups = _groups(_raw(raw_config), 2)
    # 5 seeds in chunks of at most 2, as even as that allows: 2 + 1 + 2
    assert groups == [_seed(0) + _seed(1), _seed(2), _seed(3) + _seed(4)]
    assert interleaved_groups(cfg)[0].name == "vit-pre__kfac-iterative__s0__i8"
    # the untimed runs are elsewhere: lm-pre's AdamW and vit-pre's replicas in ensembles, none in two groups
    batched = {r for e in ensembles(cfg) for r in e.runs}
    assert {"lm-pre__adamw__s0", "vit-pre__adamw__s0__r1", "vit-pre__adamw__s0__r2"} <= batched
    members = [r for g in groups for r in g]
    assert len(members) == len(set(members)) == 5 * 4 and not batched & set(members)


def test_optimizer_order_is_the_proposed_then_the_baselines_then_the_rest(raw_config):
    cfg = from_dict(_raw(raw_config))
    assert optimizer_order(cfg, ["muon", "adamw", "sgd", "kfac-iterative"]) == [PROPOSED, *BASELINES, REST]
    assert optimizer_order(cfg, ["muon", "adamw"]) == ["adamw", "muon"]


def test_interleave_one_groups_each_seed_and_a_lone_run_is_no_group(raw_config):
    raw = _raw(raw_config, seeds=(0, 1))
    raw["grid"].append({"models": ["vit-pre"], "optimizers": ["kfac-iterative"], "seeds": [7]})
    _, groups = _groups(raw, 1)
    assert groups == [_seed(0), _seed(1)]  # seed 7 has K-FAC only: one run, its own job
    _, groups = _groups(raw, 8)
    assert groups == [_seed(0) + _seed(1) + ("vit-pre__kfac-iterative__s7",)]


def test_interleave_zero_gives_every_run_its_own_job(raw_config):
    assert _groups(_raw(raw_config), 0)[1] == []


def test_a_model_without_the_proposed_optimizer_or_a_target_has_no_group(raw_config):
    raw = _raw(raw_config)
    raw["report"]["targets"] = {"lm-pre": 2.0}
    assert _groups(raw, 4)[1] == []


def test_interleave_is_not_part_of_a_runs_slice(raw_config):
    off, on = _groups(_raw(raw_config), 0)[0], _groups(_raw(raw_config), 4)[0]
    assert off.run_hash("vit-pre__muon__s0") == on.run_hash("vit-pre__muon__s0")


def test_a_negative_interleave_is_rejected_naming_the_key(raw_config):
    with pytest.raises(ConfigError, match=r"key 'train\.interleave'"):
        _groups(_raw(raw_config), -1)
