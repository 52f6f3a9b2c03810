"""benchmarks/default_cost.py: the DAG of a Snakemake log, the critical path and the 2-core schedule, on a small
log whose answer is worked out by hand."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LOG = """Building DAG of jobs...
[Tue Dec  1 12:26:14 2026]
localrule prepare_data:
    input: cfg.json
    output: data/a.npz
    log: logs/prepare_data/a.log
    jobid: 1
    benchmark: results/benchmarks/prepare_data/a.tsv
    wildcards: dataset=a
Shell command: brownformer data
[Tue Dec  1 12:26:14 2026]
rule train_model:
    input: data/a.npz
    output: runs/x/metrics.parquet
    jobid: 2
    benchmark: results/benchmarks/train_model/x.tsv
    threads: 2
    resources: tmpdir=/tmp
[Tue Dec  1 12:26:15 2026]
rule train_model:
    input: data/a.npz
    output: runs/y/metrics.parquet
    jobid: 3
    benchmark: results/benchmarks/train_model/y.tsv
[Tue Dec  1 12:26:15 2026]
rule side_job:
    input: cfg.json
    output: side.json
    jobid: 5
    benchmark: results/benchmarks/side_job/side.tsv
[Tue Dec  1 12:26:16 2026]
rule summarize:
    input: runs/x/metrics.parquet, runs/y/metrics.parquet
    output: claims.json
    jobid: 4
    benchmark: results/benchmarks/summarize/summarize.tsv
[Tue Dec  1 12:26:17 2026]
localrule all:
    input: claims.json, side.json
    jobid: 0
"""
#: CPU seconds per benchmark stem (the run's .tsv files)
CPU = {"prepare_data/a": 10.0, "train_model/x": 100.0, "train_model/y": 30.0, "side_job/side": 40.0,
       "summarize/summarize": 5.0}


@pytest.fixture()
def cost(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import default_cost

    (tmp_path / "run.log").write_text(LOG)
    for stem, cpu in CPU.items():
        tsv = tmp_path / "results" / "benchmarks" / f"{stem}.tsv"
        tsv.parent.mkdir(parents=True, exist_ok=True)
        tsv.write_text(f"s\th:m:s\tmax_rss\tcpu_time\n{cpu * 3}\t0:00:01\t1\t{cpu}\n")  # wall inflated by load
    return default_cost, tmp_path


def test_the_dag_and_its_costs_from_the_log_and_the_benchmark_files(cost):
    default_cost, tmp = cost
    jobs = default_cost.parse_log(tmp / "run.log")
    assert sorted(jobs) == [1, 2, 3, 4, 5]  # `all` left out
    assert jobs[4].parents == {2, 3} and jobs[2].parents == {1} and not jobs[5].parents and jobs[2].threads == 2
    assert default_cost.attach_costs(jobs, tmp / "results", {}) == []
    assert jobs[2].idle_s == 50.0 and jobs[3].idle_s == 30.0  # CPU over threads, not the inflated wall-clock


def test_critical_path_and_schedule_on_two_cores(cost):
    default_cost, tmp = cost
    jobs = default_cost.parse_log(tmp / "run.log")
    default_cost.attach_costs(jobs, tmp / "results", {"side_job/side": 40.0})
    assert default_cost.critical_path(jobs) == [1, 2, 4]  # 10 + 50 + 5 s
    # by hand: 0-10 prepare and side (0-40); at 10 x (2 threads) waits for 2 free cores, y fills the free one
    # (10-40); at 40 both cores free: x 40-90, then summarize 90-95
    assert default_cost.schedule(jobs, cores=2) == pytest.approx(95.0)
    assert default_cost.schedule(jobs, cores=8) == pytest.approx(65.0)  # enough cores: the critical path


def test_a_job_without_a_cost_is_named(cost):
    default_cost, tmp = cost
    jobs = default_cost.parse_log(tmp / "run.log")
    (tmp / "results" / "benchmarks" / "side_job" / "side.tsv").unlink()
    assert default_cost.attach_costs(jobs, tmp / "results", {}) == ["side_job/side"]
