"""`brownformer tune` on config/ci.yaml shapes: fairness checks, a tiny real search, the tuned block it writes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from brownformer.cli import main
from brownformer.config import ConfigError, from_dict
from brownformer.tuning.space import Knob, grid_value, tuning_config
from brownformer.tuning.write import replace_tuned_block

ROOT = Path(__file__).resolve().parents[2]
TUNING = {"seeds": [100, 101, 102], "models": ["vit-pre"], "optimizers": ["adamw"], "trials": 3,
          "knobs": {"adamw": [{"key": "lr", "step": 3}],
                    "kfac-iterative": [{"key": "lr", "step": 3}, {"key": "damping", "step": 10},
                                       {"key": "momentum", "step": 2, "scale": "complement"}]}}


def _raw(**tuning) -> dict:
    raw = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    raw["tuning"] = {**TUNING, **tuning}
    raw.setdefault("report", {})["targets"] = {"vit-pre": 0.14}
    raw["train"]["steps"] = 40  # ci.yaml's 60 steps are enough to tell the lrs apart; 40 keep the test short
    return raw


def test_tuning_seeds_must_be_disjoint_from_the_evaluation_seeds():
    with pytest.raises(ConfigError, match=r"tuning.seeds.*\[0\].*disjoint"):
        tuning_config(from_dict(_raw(seeds=[0, 100, 101])))
    assert tuning_config(from_dict(_raw())).seeds == (100, 101, 102)


def test_tuning_needs_a_target_and_known_knobs():
    raw = _raw()
    raw["report"]["targets"] = {}
    with pytest.raises(ConfigError, match="report.targets"):
        tuning_config(from_dict(raw))
    with pytest.raises(ConfigError, match="not a setting"):
        tuning_config(from_dict(_raw(knobs={"adamw": [{"key": "damping", "step": 10}]})))


def test_grid_values_are_logarithmic_and_momentum_stays_below_one():
    assert [grid_value(Knob("lr", 3.0), 0.01, i) for i in (-1, 0, 1, 0.5)] == [0.003333, 0.01, 0.03, 0.01732]
    m = Knob("momentum", 2.0, "complement")
    assert [grid_value(m, 0.9, i) for i in (-1, 0, 1, 2)] == [0.8, 0.9, 0.95, 0.975]


def test_replace_tuned_block_changes_only_that_block():
    text = "seeds: [0]\n# about tuned\ntuned:\n  a: {x: {lr: 1}}\n\n  # note\n  b: {}\n\ngrid:\n  - x\n"
    out = replace_tuned_block(text, "tuned:\n  a: {x: {lr: 2}}\n")
    assert out == "seeds: [0]\n# about tuned\ntuned:\n  a: {x: {lr: 2}}\n\ngrid:\n  - x\n"
    assert replace_tuned_block("seeds: [0]\n", "tuned: {}\n") == "seeds: [0]\n\ntuned: {}\n"


def test_tiny_tuning_writes_the_tuned_block_and_every_trial(tmp_path):
    raw = _raw()
    config = tmp_path / "config.yaml"
    text = yaml.safe_dump(raw, sort_keys=False)
    config.write_text(text)
    out, table = tmp_path / "tuned.yaml", tmp_path / "tuning.md"
    rc = main(["tune", "--config", str(config), "--out", str(out), "--table", str(table), "--into", str(config),
               "--data-root", str(tmp_path / "data")])
    assert rc == 0
    trials = json.loads(table.with_suffix(".json").read_text())["trials"]
    assert len(trials) == 3 and sum(t["chosen"] for t in trials) == 1
    chosen = next(t for t in trials if t["chosen"])
    tuned = yaml.safe_load(out.read_text())["tuned"]
    assert tuned["vit-pre"]["adamw"]["lr"] == chosen["lr"]
    assert {t["lr"] for t in trials} == {0.001, 0.003, 0.009}  # start 0.003 (ci.yaml) and its two neighbours
    # the chosen trial has the smallest restricted mean steps to the target of the complete trials
    steps = [t["steps (mean)"] for t in trials if t["complete"]]
    assert chosen["steps (mean)"] == min(steps)
    rewritten = yaml.safe_load(config.read_text())
    assert rewritten["tuned"] == tuned and {k: v for k, v in rewritten.items() if k != "tuned"} == raw


def test_cli_names_a_bad_tuning_block_in_one_line(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(_raw(seeds=[0, 1, 2])))
    rc = main(["tune", "--config", str(config), "--out", str(tmp_path / "t.yaml"), "--table", str(tmp_path / "t.md")])
    assert rc == 2 and "disjoint" in capsys.readouterr().err


def _pair(model, optimizer, lr, steps):
    from brownformer.tuning.run import PairResult
    from brownformer.tuning.search import outcome_of
    seeds = [{"seed": s, "reached": True, "steps": steps, "steps_run": steps, "censored_at": 405, "metric": 0.9,
              "diverged": False, "seconds": 1.0} for s in (100, 101)]
    return PairResult(model, optimizer, (Knob("lr", 3.0),), {"lr": lr}, [((0.0,), {"lr": lr}, outcome_of(seeds, 2))],
                      0, ["not searched"], 2.0)


def test_separate_tuning_runs_share_one_table_and_one_tuned_block(tmp_path):
    from brownformer.tuning.write import write_tables, write_tuned
    cfg = from_dict(_raw())
    tc = tuning_config(cfg)
    table, tuned = tmp_path / "tuning.md", tmp_path / "tuned.yaml"
    first, second = [_pair("vit-pre", "adamw", 0.01, 150)], [_pair("vit-pre", "kfac-iterative", 0.1, 90)]
    write_tables(first, tc, cfg, table, source="c", wall_seconds=1.0, workers=1)
    write_tables(second, tc, cfg, table, source="c", wall_seconds=1.0, workers=1)
    data = json.loads(table.with_suffix(".json").read_text())
    assert {(c["optimizer"], c["lr"]) for c in data["chosen"]} == {("adamw", 0.01), ("kfac-iterative", 0.1)}
    write_tables([_pair("vit-pre", "adamw", 0.03, 120)], tc, cfg, table, source="c", wall_seconds=1.0, workers=1)
    data = json.loads(table.with_suffix(".json").read_text())
    assert sorted((c["optimizer"], c["lr"]) for c in data["chosen"]) == [("adamw", 0.03), ("kfac-iterative", 0.1)]
    assert len(data["trials"]) == 2  # a redone pair replaces its earlier trials
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(_raw()))
    write_tuned(second, from_dict(yaml.safe_load(config.read_text())), tuned, into=config)
    write_tuned(first, from_dict(yaml.safe_load(config.read_text())), tuned, into=config)
    block = yaml.safe_load(config.read_text())["tuned"]["vit-pre"]
    assert block["adamw"]["lr"] == 0.01 and block["kfac-iterative"]["lr"] == 0.1


def test_tuning_one_optimizer_keeps_the_others_entries_as_the_config_holds_them(tmp_path):
    """Re-tuning K-FAC alone rewrites the block from the config's parsed entries: AdamW's betas (a tuple once
    parsed) are written and read back as the same pair (2026-12-01: it raised 'does not read back')."""
    from brownformer.tuning.write import write_tuned
    raw = _raw()
    raw.setdefault("tuned", {}).setdefault("vit-pre", {})["adamw"] = {"lr": 0.002, "betas": [0.6, 0.97]}
    cfg = from_dict(raw)
    out = tmp_path / "tuned.yaml"
    write_tuned([_pair("vit-pre", "kfac-iterative", 0.1, 90)], cfg, out)
    block = yaml.safe_load(out.read_text())["tuned"]["vit-pre"]
    assert block["adamw"] == {"lr": 0.002, "betas": [0.6, 0.97]} and block["kfac-iterative"]["lr"] == 0.1
