"""What `snakemake -n` plans after a config edit: only the jobs whose config slice the edit changes, and what
follows them. And every config stands alone: `--configfile` replaces config/config.yaml, never merges over it.

The outputs of a finished run are stood in by empty files (`_finished`): the plan depends only on which
files exist and on their modification times, so no job needs to run. Each dry run takes a few seconds.
config/scaling.yaml stands alone as the others do (tests/workflow/test_scaling.py dry-runs it).
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from brownformer.config import load_config, validate_dict

from .test_workflow import ROOT, _snakemake

CI = "config/ci.yaml"


def _workdir(tmp_path: Path) -> Path:
    """The project's configs, copied so a test can edit them; config/config.yaml is the real default."""
    shutil.copytree(ROOT / "config", tmp_path / "config")
    return tmp_path


def _plan(work: Path, *args: str) -> str:
    out = _snakemake("-n", "--cores", "1", "--directory", str(work), *args, cwd=work, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout + out.stderr


def _jobs(plan: str) -> dict[str, list[str]]:
    """rule -> the wildcard lines of its planned jobs ('' for a job without wildcards)."""
    jobs: dict[str, list[str]] = {}
    for rule, body in re.findall(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", plan, re.M | re.S):
        wildcards = re.search(r"^\s+wildcards: (.*)$", body, re.M)
        jobs.setdefault(rule, []).append(wildcards.group(1) if wildcards else "")
    return jobs


def _finished(work: Path, *args: str) -> None:
    """Empty files for every output of the DAG, marked up to date (snakemake --touch), as after a whole run."""
    for line in re.findall(r"^\s+output: (.*)$", _plan(work, *args), re.M):
        for name in line.split(", "):
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).touch()
    touched = _snakemake("--touch", "--cores", "1", "--directory", str(work), *args, cwd=work, timeout=300)
    assert touched.returncode == 0, touched.stderr[-3000:]
    assert "Nothing to be done" in _plan(work, *args)


def _edit(work: Path, config: str, key: str, value) -> None:
    path = work / config
    raw = yaml.safe_load(path.read_text())
    *parents, last = key.split(".")
    node = raw
    for p in parents:
        node = node[p]
    node[last] = value
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


@pytest.fixture(scope="module")
def _finished_once(tmp_path_factory) -> Path:
    work = _workdir(tmp_path_factory.mktemp("finished"))
    _finished(work, "--configfile", CI)
    return work


@pytest.fixture()
def finished(_finished_once, tmp_path) -> Path:
    """A copy of the finished work folder (modification times kept) that a test may edit."""
    work = tmp_path / "work"
    shutil.copytree(_finished_once, work, symlinks=True)
    return work


def test_an_unchanged_config_plans_nothing_again(finished):
    (finished / CI).write_text(yaml.safe_dump(yaml.safe_load((finished / CI).read_text())))  # new mtime and layout
    assert "Nothing to be done" in _plan(finished, "--configfile", CI)


def test_a_stats_key_reruns_no_training(finished):
    _edit(finished, CI, "stats.n_resamples", 199)
    jobs = _jobs(_plan(finished, "--configfile", CI))
    assert not {"prepare_data", "train_model", "extract_trajectories"} & set(jobs), sorted(jobs)
    cfg = load_config(finished / CI)
    assert len(jobs["compute_stats"]) == len(cfg.probed_runs())
    for rule in ("calibrate_tests", "summarize_stats", "plot_figures", "build_report"):
        assert len(jobs[rule]) == 1, rule


def test_one_models_width_retrains_only_its_runs(finished):
    model = "lm-pre"
    _edit(finished, CI, f"models.{model}.d_model", 32)
    jobs = _jobs(_plan(finished, "--configfile", CI))
    cfg = load_config(finished / CI)
    its_runs = {f"run={r.run_id}" for r in cfg.runs() if r.model == model}
    assert its_runs and len(its_runs) < len(cfg.runs())
    assert "prepare_data" not in jobs
    for rule in ("train_model", "extract_trajectories", "compute_stats"):
        assert set(jobs[rule]) == its_runs, (rule, jobs[rule])
    for rule in ("calibrate_tests", "summarize_stats", "plot_figures", "build_report"):
        assert len(jobs[rule]) == 1, rule


def test_a_report_title_reruns_only_the_cross_run_rules(finished):
    _edit(finished, CI, "report.title", "another title")
    jobs = _jobs(_plan(finished, "--configfile", CI))
    assert set(jobs) == {"summarize_stats", "plot_figures", "build_report", "all"}, sorted(jobs)


def test_every_rule_that_reads_the_config_lists_its_slice():
    """A rule handed the config file (a constant path, which triggers no rerun) must take its slice as an
    input, or a config edit would never rerun it."""
    from brownformer.config.slices import SLICES

    for path in sorted((ROOT / "workflow").rglob("*.smk")) + [ROOT / "workflow" / "Snakefile"]:
        for rule, body in re.findall(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", path.read_text(), re.M | re.S):
            if "CONFIG_FILE" in body:
                kind = re.search(r"^\s+config=config_slice\(\"(\w+)\"\),$", body, re.M)
                assert kind, f"{path.name}: rule {rule} reads the config but lists no config=config_slice(...) input"
                assert kind.group(1) in SLICES, f"{path.name}: rule {rule}: unknown slice {kind.group(1)!r}"


@pytest.mark.parametrize("name", ["ci.yaml", "scaling_ci.yaml", "paper.yaml"])
def test_a_configfile_stands_alone(tmp_path, name):
    """The config the rules read is the --configfile alone (schema defaults filled in), with nothing of
    config/config.yaml merged in."""
    work = _workdir(tmp_path)
    _plan(work, "--configfile", f"config/{name}")
    own = validate_dict(yaml.safe_load((work / "config" / name).read_text()))
    root = own["paths"]["results"]
    assert yaml.safe_load((work / root / "config" / "config.yaml").read_text()) == own


def test_config_edits_apply_to_the_default_config(tmp_path):
    """`--config key=value` without --configfile edits config/config.yaml (it does not replace it)."""
    work = _workdir(tmp_path)
    _plan(work, "--config", "device=cpu")
    default = validate_dict(yaml.safe_load((work / "config" / "config.yaml").read_text()))
    assert yaml.safe_load((work / "results" / "config" / "config.yaml").read_text()) == {**default, "device": "cpu"}
