"""A misspelt or invalid config key: one line per problem naming the key, what is wrong, the keys allowed there and
the close matches; under `snakemake -n` at most 20 lines in all, instead of Snakemake's schema dump."""
from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from brownformer.config import ConfigError, from_dict
from brownformer.config.checks import MAX_PROBLEMS, config_problems

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def ci():
    return yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())


def test_a_valid_config_has_no_problems(ci):
    assert config_problems(ci) == []


def test_misspelt_keys_at_any_depth_are_named_with_close_matches(ci):
    raw = copy.deepcopy(ci)
    raw["trian"] = {}
    raw["train"]["stpes"] = 3
    problems = config_problems(raw)
    assert len(problems) == 2
    top, nested = sorted(problems)
    assert top.startswith("config: key 'train.stpes': unknown key 'stpes'; did you mean 'steps'?")
    assert "allowed here: " in top and "warmup_steps" in top  # the keys of `train`, not of the top level
    assert nested.startswith("config: key 'trian': unknown key 'trian'; did you mean 'train'?")


def test_a_key_with_no_close_match_lists_the_allowed_keys(ci):
    (line,) = config_problems({**ci, "badkey": 1})
    assert "'badkey': unknown key 'badkey' (allowed here: " in line and "did you mean" not in line


def test_many_problems_are_capped(ci):
    raw = {**ci, **{f"bad{i}": i for i in range(3 * MAX_PROBLEMS)}}
    problems = config_problems(raw)
    assert len(problems) == MAX_PROBLEMS and problems[-1].startswith("... and ")


def test_the_package_raises_the_first_problem_in_one_line(ci):
    with pytest.raises(ConfigError, match=r"key 'train.stpes': unknown key 'stpes'; did you mean 'steps'\?") as exc:
        from_dict({**ci, "train": {**ci["train"], "stpes": 3}})
    assert "\n" not in str(exc.value)


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake not installed")
@pytest.mark.parametrize("how", ["--config badkey=1", "nested key in a copy of ci.yaml"])
def test_snakemake_dry_run_names_the_key_in_at_most_20_lines(ci, tmp_path, how):
    if how.startswith("--config"):
        args, key = ["--config", "badkey=1"], "badkey"
    else:
        ci["train"]["stpes"] = 3
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump(ci))
        args, key = ["--configfile", str(tmp_path / "bad.yaml")], "train.stpes"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert f"key '{key}': unknown key '{key.split('.')[-1]}'" in text
    assert len(text.strip().splitlines()) <= 20, text
