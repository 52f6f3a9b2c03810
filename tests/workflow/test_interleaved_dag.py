"""The DAG with `train.interleave`: claim 4's timed runs of a model train one at a time, a few seeds per job."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from .test_config_slices import CI, _jobs, _plan, _workdir

#: config/ci.yaml's claim-4 pair on vit-pre (K-FAC first: a group's order), timed once vit-pre has a target
PAIR = ("kfac-iterative", "adamw")


def _claim4_config(work, interleave, seeds=(0, 1, 2)):
    path = work / CI
    raw = yaml.safe_load(path.read_text())
    raw["seeds"] = list(seeds)
    raw["report"]["targets"] = {"vit-pre": 0.5}  # claim 4 now times vit-pre's runs (ci.yaml sets no target)
    raw["train"]["interleave"] = interleave
    path.write_text(yaml.safe_dump(raw))


def _members(seeds):
    return [f"vit-pre__{o}__s{s}" for s in seeds for o in PAIR]


def test_a_group_job_trains_whole_seeds_and_a_member_target_plans_it(tmp_path):
    work = _workdir(tmp_path)
    _claim4_config(work, 2)
    plan = _plan(work, "--configfile", CI)
    jobs = _jobs(plan)
    assert len(jobs["train_interleaved_vit_pre__kfac_iterative__s0"]) == 1  # seeds 0, 1
    assert len(jobs["train_interleaved_vit_pre__kfac_iterative__s2"]) == 1  # seed 2
    # what else trains: lm-pre's AdamW (no K-FAC there: untimed) and K-FAC's replicas, each alone
    assert all("__r" in w or "lm-pre" in w for w in jobs["train_model"])
    assert not {f"run={m}" for m in _members((0, 1, 2))} & set(jobs["train_model"])
    rule = re.search(r"^rule train_interleaved_vit_pre__kfac_iterative__s0:\n(.*?)(?=^\S|\Z)", plan, re.M | re.S)
    outputs = re.search(r"^\s+output: (.*)$", rule.group(1), re.M).group(1)
    for run in _members((0, 1)):
        for name in ("metrics.parquet", "manifest.json", "probes/index.parquet"):
            assert f"runs/{run}/{name}" in outputs
    shell = re.search(r"^Shell command: (brownformer train .*)$", plan[rule.start():], re.M).group(1)
    assert " ".join(f"--run {r}" for r in _members((0, 1))) in shell and "--one-at-a-time" in shell
    member = _jobs(_plan(work, "results/runs/vit-pre__adamw__s1/metrics.parquet", "--configfile", CI))
    assert "train_interleaved_vit_pre__kfac_iterative__s0" in member and "train_model" not in member


def test_interleave_zero_plans_every_timed_run_alone(tmp_path):
    work = _workdir(tmp_path)
    _claim4_config(work, 0)
    jobs = _jobs(_plan(work, "--configfile", CI))
    assert not [r for r in jobs if r.startswith("train_interleaved")]
    assert {f"run={m}" for m in _members((0, 1, 2))} <= set(jobs["train_model"])


@pytest.mark.slow
def test_the_group_job_runs_each_member_alone(tmp_path):
    """One real group job (seed 0's K-FAC and AdamW runs of ci.yaml, 60 steps, AdamW probed)."""
    from .test_workflow import _snakemake
    work = _workdir(tmp_path)
    _claim4_config(work, 1, seeds=(0,))
    target = "results/runs/vit-pre__adamw__s0/metrics.parquet"
    done = _snakemake("--cores", "1", "--directory", str(work), target, "--configfile", CI, cwd=work, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    log = (work / "results/logs/train_interleaved/vit-pre__kfac-iterative__s0__i2.log").read_text()
    assert "[1/2] vit-pre__kfac-iterative__s0: training" in log and "[2/2] vit-pre__adamw__s0: training" in log
    for run in _members((0,)):
        manifest = json.loads((work / f"results/runs/{run}/manifest.json").read_text())
        assert manifest["steps_trained"] == 60 and "ensemble" not in manifest
    assert (work / "results/runs/vit-pre__adamw__s0/probes/meta.json").is_file()  # probed as it is alone
