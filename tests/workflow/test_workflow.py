"""The Snakemake DAG: dry-run, lint, schema validation before any job, and the whole pipeline end to end."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _snakemake(*args, cwd=ROOT, timeout=1800):
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile"), *args]
    # Rules call the `brownformer` entry point: take the one installed beside this interpreter.
    env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def _workdir(tmp_path: Path, config_name: str = "ci.yaml") -> Path:
    """A working directory holding the config the Snakefile loads by default."""
    (tmp_path / "config").mkdir()
    shutil.copy(ROOT / "config" / config_name, tmp_path / "config" / "config.yaml")
    return tmp_path


def test_dry_run_default_config(tmp_path):
    out = _snakemake("-n", "--cores", "1", "--directory", str(_workdir(tmp_path, "config.yaml")))
    assert out.returncode == 0, out.stderr[-3000:]
    # the default trains every run in a batched ensemble or an interleaved group of claim 4's timed runs
    # (train.ensemble, train.interleave): no train_model job is left
    for rule in ("prepare_data", "train_ensemble_", "train_interleaved_", "extract_trajectories", "compute_stats",
                 "calibrate_tests", "summarize_stats", "plot_figures", "build_report"):
        assert rule in out.stdout


def test_every_rule_env_is_the_top_level_envs_file():
    """The specified layout: conda environments live in envs/ at the top level, and each rule's `conda:` resolves
    there (Snakemake reads the path relative to the .smk file that declares it)."""
    import re
    common = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    env = re.search(r'^ENV = "([^"]+)"', common, re.M).group(1)
    resolved = (ROOT / "workflow" / "rules" / env).resolve()
    assert resolved == ROOT / "envs" / "brownformer.yaml" and resolved.is_file()
    pip = yaml.safe_load(resolved.read_text())["dependencies"][-1]["pip"]
    editable = next(item for item in pip if item.startswith("-e "))
    assert (resolved.parent / editable[3:]).resolve() == ROOT  # the env installs this checkout
    assert not (ROOT / "workflow" / "envs").exists()


def test_lint_is_clean():
    out = _snakemake("--lint", "--cores", "1")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "good condition" in out.stdout + out.stderr


@pytest.mark.parametrize("key,value,named", [
    ("optimizers.adamw.type", "adamx", "adamx"),
    ("models.vit-pre.dataset", "mnist", "mnist"),
    ("train.steps", -5, "steps"),
])
def test_bad_config_fails_before_any_job(tmp_path, key, value, named):
    work = _workdir(tmp_path)
    raw = yaml.safe_load((work / "config" / "config.yaml").read_text())
    node = raw
    *parents, last = key.split(".")
    for p in parents:
        node = node[p]
    node[last] = value
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(raw))
    out = _snakemake("--cores", "1", "--directory", str(work))
    assert out.returncode != 0
    assert named in out.stderr + out.stdout
    assert not (work / "results" / "data").exists() and not (work / "results" / "runs").exists()


@pytest.mark.slow
def test_whole_dag_on_ci_config(tmp_path):
    work = _workdir(tmp_path)
    out = _snakemake("--cores", "2", "--directory", str(work), timeout=1500)
    assert out.returncode == 0, out.stderr[-5000:]
    from brownformer.config import load_config
    from brownformer.results.catalog import FIGURES

    cfg = load_config(work / "config" / "config.yaml")
    probed = {r.run_id for r in cfg.probed_runs()}
    for run in cfg.runs():
        rdir = work / "results" / "runs" / run.run_id
        metrics = pd.read_parquet(rdir / "metrics.parquet")
        assert len(metrics) > 3 and metrics["train_loss"].notna().all()
        if run.run_id not in probed:  # metrics only (here: stopped at claim 4's target)
            assert cfg.stop_target(run.run_id) is None or metrics["stopped_at_target"].all()
            continue
        index = json.loads((rdir / "trajectories" / "index.json").read_text())
        assert index["files"], f"{run.run_id}: no trajectories extracted"
        assert (rdir / "stats" / "summary.json").stat().st_size > 100
    for base, reps in cfg.replica_sets().items():  # replicas: trained, combined into contrasts, analysed
        index = json.loads((work / "results" / "replicas" / base / "trajectories" / "index.json").read_text())
        assert index["files"] and all(f["unit"] == "replica" for f in index["files"])
        assert all((work / "results" / "runs" / r.run_id / "metrics.parquet").exists() for r in reps)
        assert (work / "results" / "replicas" / base / "stats" / "summary.json").stat().st_size > 100
        tokens = [f for f in index["files"] if f["category"] == "training"]  # 3b: analysed on the sphere (issue 30)
        for f in tokens:
            res = json.loads((work / "results" / "replicas" / base / "stats" / f["path"]).with_suffix(".json")
                             .read_text())
            shape = res["calibration_shape"]
            assert shape["geometry"] == "sphere" and shape["hyperplane"] and shape["window"]["replicas"] == len(reps)
    claims = json.loads((work / "results" / "stats" / "claims.json").read_text())
    assert claims
    for name in FIGURES:
        assert (work / "figures" / f"{name}.png").stat().st_size > 1000
    html = (work / "results" / "report" / "report.html").read_text()
    assert len(html) > 10_000 and "reproducibility" in html.lower()
    for section in ("Introduction", "Methods", "Results", "Limitations", "Appendix"):
        assert section in html
    # Snakemake's own report packs every figure with its caption.
    rep = _snakemake("--cores", "1", "--directory", str(work), "--report", "results/report/snakemake-report.zip")
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert (work / "results" / "report" / "snakemake-report.zip").stat().st_size > 10_000
    # Rerunning is a no-op: nothing to be done.
    again = _snakemake("-n", "--cores", "1", "--directory", str(work))
    assert "Nothing to be done" in again.stdout + again.stderr
