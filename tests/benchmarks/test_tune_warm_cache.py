"""benchmarks/tune_warm_cache.py: the seed runs it trains trial-major are the ones `brownformer tune` reads back,
so a tuning cut to the rounds it completed trains nothing again."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from brownformer.cli import main as cli
from brownformer.tuning import trial

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def warm(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import tune_warm_cache

    return tune_warm_cache


def _config(tmp_path) -> Path:
    raw = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    raw["tuning"] = {"seeds": [100, 101, 102], "models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"],
                     "trials": 4, "method": "quasi-random",
                     "knobs": {o: [{"key": "lr", "low": 1e-3, "high": 1e-1},
                                   {"key": "horizon", "low": 10, "high": 40}] for o in ("adamw", "kfac-iterative")}}
    raw.setdefault("report", {})["targets"] = {"vit-pre": 0.14}
    raw["train"]["steps"] = 20
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_jobs_are_trial_major(warm, tmp_path):
    from brownformer.config import load_config

    jobs = warm.seed_jobs(load_config(_config(tmp_path)), data_root=tmp_path / "data", cache=tmp_path / "c", trials=3)
    assert [j for j, _, _ in jobs] == sorted(j for j, _, _ in jobs) and len(jobs) == 3 * 2 * 3
    assert [(a[2], a[4]) for _, a, _ in jobs[:6]] == [(o, s) for o in ("adamw", "kfac-iterative") for s in (100, 101, 102)]


def test_a_tuning_cut_to_the_warmed_rounds_reads_every_run_from_the_cache(warm, tmp_path, monkeypatch):
    config, cache = _config(tmp_path), tmp_path / "cache"
    data = ["--data-root", str(tmp_path / "data")]
    assert warm.main(["--config", str(config), "--cache", str(cache), "--trials", "2", "--workers", "1", *data]) == 0
    assert len(list(cache.glob("*.json"))) == 2 * 2 * 3  # 2 rounds x 2 optimizers x 3 seeds
    from brownformer.config import load_config

    assert warm.complete_rounds(warm.seed_jobs(load_config(config), data_root=tmp_path / "data", cache=cache,
                                               trials=4)) == 2

    def no_training(*args, **kwargs):
        raise AssertionError("a warmed seed run was trained again")

    monkeypatch.setattr(trial, "_train_seed", no_training)
    out, table = tmp_path / "tuned.yaml", tmp_path / "tuning.md"
    assert cli(["tune", "--config", str(config), "--out", str(out), "--table", str(table), "--trials", "2",
                "--cache", str(cache), *data]) == 0
    trials = json.loads(table.with_suffix(".json").read_text())["trials"]
    assert len(trials) == 2 * 2 and all(len(t["seeds"]) == 3 for t in trials)
    tuned = yaml.safe_load(out.read_text())["tuned"]["vit-pre"]
    assert all(isinstance(tuned[o]["horizon"], int) and 10 <= tuned[o]["horizon"] <= 40 for o in tuned)
