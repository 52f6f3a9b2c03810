"""The CLI: every stage is a subcommand; bad input exits 2 with a one-line message naming the problem."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from brownformer.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_every_stage():
    out = subprocess.run([sys.executable, "-m", "brownformer.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for stage in ("data", "train", "extract", "stats", "figures", "report"):
        assert stage in out.stdout


def test_parser_and_config_load_without_torch():
    # every pipeline job starts the CLI; the stages that need no torch (extraction, statistics) must not pay its
    # import (~2.7 CPU-s per job)
    code = ("import sys; from brownformer.cli import build_parser; from brownformer.config import load_config; "
            "import brownformer.probes.extract, brownformer.probes.replicas, brownformer.stats_stage.stages; "
            f"build_parser(); load_config({str(ROOT / 'config/config.yaml')!r}); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_bad_config_exits_2_and_names_key(tmp_path, capsys, ci_raw):
    raw = dict(ci_raw)
    raw["optimizers"] = {**ci_raw["optimizers"], "adamw": {"type": "adamw", "lr": -1}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    code = main(["data", "--config", str(path), "--dataset", "digits", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert "optimizers.adamw.lr" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists(), "nothing may be written on a bad config"


def test_unknown_dataset_and_override(tmp_path, capsys):
    code = main(["data", "--config", str(ROOT / "config/ci.yaml"), "--dataset", "mnist", "--out", str(tmp_path)])
    assert code == 2 and "mnist" in capsys.readouterr().err
    code = main(["data", "--config", str(ROOT / "config/ci.yaml"), "--set", "train.steps=-3",
                 "--dataset", "digits", "--out", str(tmp_path / "o")])
    assert code == 2 and "train.steps" in capsys.readouterr().err


def test_data_then_train_without_snakemake(tmp_path):
    cfg = str(ROOT / "config/ci.yaml")
    assert main(["data", "--config", cfg, "--dataset", "digits", "--out", str(tmp_path / "digits")]) == 0
    assert main(["train", "--config", cfg, "--run", "vit-pre__adamw__s0", "--data", str(tmp_path / "digits"),
                 "--out", str(tmp_path / "run"), "--set", "train.steps=6", "--no-probes", "--quiet"]) == 0
    assert (tmp_path / "run" / "metrics.parquet").exists()


def test_unknown_run_is_refused(tmp_path, capsys):
    cfg = str(ROOT / "config/ci.yaml")
    code = main(["train", "--config", cfg, "--run", "vit-pre__lion__s0", "--data", str(tmp_path),
                 "--out", str(tmp_path / "run")])
    assert code == 2 and "vit-pre__lion__s0" in capsys.readouterr().err


def test_figures_subcommand_draws_the_catalog_even_without_results(tmp_path):
    from brownformer.results import FIGURES

    code = main(["figures", "--config", str(ROOT / "config/ci.yaml"), "--results", str(tmp_path / "none"),
                 "--out", str(tmp_path / "figs")])
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == sorted(
        f"{stem}.{ext}" for stem in FIGURES for ext in ("png", "svg"))


def test_report_subcommand_refuses_a_missing_config(tmp_path, capsys):
    code = main(["report", "--config", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "out")])
    assert code == 2 and "missing.yaml" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_extract_replicas_refuses_a_run_without_replicas_and_missing_stores(tmp_path, capsys):
    cfg = str(ROOT / "config/ci.yaml")
    code = main(["extract-replicas", "--config", cfg, "--run", "lm-pre__adamw__s0", "--runs-dir", str(tmp_path),
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "has no replicas" in err and len(err.strip().splitlines()) == 1
    code = main(["extract-replicas", "--config", cfg, "--run", "vit-pre__kfac-iterative__s0", "--runs-dir",
                 str(tmp_path), "--out", str(tmp_path / "out")])
    assert code == 2 and "no captures" in capsys.readouterr().err and not (tmp_path / "out").exists()
