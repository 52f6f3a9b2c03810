"""Config slices: each slice holds what its rules read, changes only with it, and its file keeps its mtime
while its content is unchanged."""
from __future__ import annotations

import copy
import json
import os

import pytest

from brownformer.config import config_hash, from_dict
from brownformer.config.slices import SLICES, slice_content, slice_path, write_slices


def _slices(raw: dict) -> dict[tuple[str, str], str]:
    cfg = from_dict(copy.deepcopy(raw))
    return {(kind, key): slice_content(cfg, kind, key) for kind, s in SLICES.items() for key in s.keys(cfg)}


def _changed(before: dict, after: dict) -> set[tuple[str, str]]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def test_a_stats_key_changes_the_stats_study_and_pretrained_slices_only(raw_config):
    before = _slices(raw_config)
    raw_config["stats"]["n_resamples"] += 100
    # the pretrained models' analysis reads the statistics settings too
    pretrained = {("pretrained", name) for name in raw_config.get("pretrained") or {}}
    assert _changed(before, _slices(raw_config)) == {("stats", ""), ("study", "")} | pretrained


def test_one_models_width_changes_its_runs_and_the_study_only(raw_config):
    model = "lm-pre"
    cfg = from_dict(copy.deepcopy(raw_config))
    its_runs = {r.run_id for r in cfg.runs() if r.model == model}
    assert its_runs and len(its_runs) < len(cfg.runs())
    before = _slices(raw_config)
    raw_config["models"][model]["d_model"] *= 2
    assert _changed(before, _slices(raw_config)) == {("run", r) for r in its_runs} | {("study", "")}


def test_a_dataset_key_changes_its_data_and_the_runs_on_it(raw_config):
    cfg = from_dict(copy.deepcopy(raw_config))
    on_pydoc = {r.run_id for r in cfg.runs() if cfg.models[r.model].dataset == "pydoc"}
    before = _slices(raw_config)
    raw_config["datasets"]["pydoc"]["val_fraction"] = 0.1
    assert _changed(before, _slices(raw_config)) == ({("dataset", "pydoc"), ("study", "")}
                                                     | {("run", r) for r in on_pydoc})


def test_resources_change_no_slice(raw_config):
    before = _slices(raw_config)
    raw_config.setdefault("resources", {})["train_threads"] = 2
    assert not _changed(before, _slices(raw_config))


def test_the_run_slice_is_what_run_hash_hashes(raw_config):
    cfg = from_dict(raw_config)
    for r in cfg.runs():
        assert config_hash(json.loads(slice_content(cfg, "run", r.run_id))) == cfg.run_hash(r.run_id)


def test_write_slices_rewrites_only_changed_files(tmp_path, raw_config):
    paths = write_slices(from_dict(copy.deepcopy(raw_config)), tmp_path)
    assert set(paths.values()) == set(tmp_path.rglob("*.json"))
    old = 1_000_000_000  # a fixed past time: a rewrite would move it to now
    for p in paths.values():
        os.utime(p, (old, old))
    write_slices(from_dict(copy.deepcopy(raw_config)), tmp_path)
    assert all(p.stat().st_mtime == old for p in paths.values())
    raw_config["stats"]["alpha"] = 0.01
    write_slices(from_dict(raw_config), tmp_path)
    moved = {p for p in paths.values() if p.stat().st_mtime != old}
    pretrained = {slice_path(tmp_path, "pretrained", name) for name in raw_config.get("pretrained") or {}}
    assert moved == {slice_path(tmp_path, "stats"), slice_path(tmp_path, "study")} | pretrained
    assert json.loads(slice_path(tmp_path, "stats").read_text())["stats"]["alpha"] == 0.01


def test_unknown_slice_is_named(tmp_path):
    with pytest.raises(KeyError, match="trainning"):
        slice_path(tmp_path, "trainning")
