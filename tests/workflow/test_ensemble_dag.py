"""The DAG with `train.ensemble`: one job per ensemble declares every member's outputs; other runs train alone."""
from __future__ import annotations

import re

import yaml

from .test_config_slices import CI, _jobs, _plan, _workdir


def _ensemble_config(work, size):
    path = work / CI
    raw = yaml.safe_load(path.read_text())
    raw["seeds"] = [0, 1, 2]
    raw["train"]["ensemble"] = size
    path.write_text(yaml.safe_dump(raw))


def test_an_ensemble_job_trains_every_member_and_a_member_target_plans_it(tmp_path):
    work = _workdir(tmp_path)
    _ensemble_config(work, 3)
    plan = _plan(work, "--configfile", CI)
    jobs = _jobs(plan)
    assert len(jobs["train_ensemble_vit_pre__adamw__s0"]) == 1 and len(jobs["train_ensemble_lm_pre__adamw__s0"]) == 1
    # K-FAC (not elementwise) and its replicas train alone
    assert jobs["train_model"] and all("kfac-iterative" in w for w in jobs["train_model"])
    outputs = re.search(r"^rule train_ensemble_vit_pre__adamw__s0:\n.*?^\s+output: (.*?)$", plan, re.M | re.S).group(1)
    for seed in (0, 1, 2):
        for name in ("metrics.parquet", "manifest.json", "probes/index.parquet"):
            assert f"runs/vit-pre__adamw__s{seed}/{name}" in outputs
    # one member's target: its ensemble's job
    member = _jobs(_plan(work, "results/runs/vit-pre__adamw__s1/metrics.parquet", "--configfile", CI))
    assert "train_ensemble_vit_pre__adamw__s0" in member and "train_model" not in member


def test_ensemble_one_plans_every_run_alone(tmp_path):
    work = _workdir(tmp_path)
    _ensemble_config(work, 1)
    jobs = _jobs(_plan(work, "--configfile", CI))
    assert not [r for r in jobs if r.startswith("train_ensemble")]
    assert len(jobs["train_model"]) == 3 * 3 + 3 * 3  # 3 seeds x (2 vit-pre pairs + lm) + 3 replicas of 3 K-FAC seeds


def test_the_ensemble_job_runs_and_a_forced_rerun_trains_again(tmp_path):
    """One real ensemble job (two 60-step LM seeds, ~20 CPU-s): every member's outputs, then --forcerun retrains."""
    import json

    from .test_workflow import _snakemake
    work = _workdir(tmp_path)
    _ensemble_config(work, 2)
    raw = yaml.safe_load((work / CI).read_text())
    raw["seeds"] = [0, 1]
    (work / CI).write_text(yaml.safe_dump(raw))
    target = "results/runs/lm-pre__adamw__s1/metrics.parquet"
    args = ("--cores", "1", "--directory", str(work), target, "--configfile", CI)
    done = _snakemake(*args, cwd=work, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    manifests = [json.loads((work / f"results/runs/lm-pre__adamw__s{s}/manifest.json").read_text()) for s in (0, 1)]
    assert [m["ensemble"] for m in manifests] == [["lm-pre__adamw__s0", "lm-pre__adamw__s1"]] * 2
    first = manifests[0]["wall_time_s"]
    again = _snakemake("--forcerun", "train_ensemble_lm_pre__adamw__s0", *args, cwd=work, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    log = (work / "results/logs/train_ensemble/lm-pre__adamw__s0__e2.log").read_text()
    assert "training from step 0" in log and "resuming" not in log  # the forced rerun trained, not resumed
    assert json.loads((work / "results/runs/lm-pre__adamw__s0/manifest.json").read_text())["wall_time_s"] != first
