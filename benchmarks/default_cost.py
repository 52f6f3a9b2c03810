"""What a pipeline run cost: CPU per rule, the critical path and the schedule on a given number of idle cores.

    python benchmarks/default_cost.py --log /tmp/default1/.snakemake/log/<run>.snakemake.log \
        --results /tmp/default1/results --cores 2 --out benchmarks/results/default_cost.md

The DAG (jobs, their inputs, outputs, threads and benchmark files) is read from a Snakemake log: the log of the
finished run, or of a dry run (`snakemake -n --forceall ... > dry.log`) of a changed workflow, whose jobs then
take their cost from the benchmark files of the finished run (`--results`) where a job of the same benchmark
path ran there, and from `--cost benchmark_stem=cpu_seconds` otherwise (a job measured alone, or an estimate).

A job's time on idle cores is its CPU seconds over its threads (the measured wall-clock is inflated by other
load on a shared machine, and a job that waits on nothing else is CPU-bound); the critical path is the longest
chain of those times through the DAG, and the schedule is a greedy list schedule on `--cores` cores, the job
with the longest chain still below it first (Snakemake's own scheduler also runs what is ready; its order
differs, so the schedule is an estimate). The estimate of the wall-clock is max(CPU / cores, critical path)
at best and the simulated makespan at the value printed.
"""
from __future__ import annotations

import argparse
import heapq
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

#: a job block of a Snakemake log opens with this line ("rule x:" or "localrule x:")
_JOB_START = re.compile(r"^(?:local)?rule (\S+):$")
#: its fields: indented "key: value" lines
_JOB_FIELD = re.compile(r"^\s{4}(\w+): (.*)$")


@dataclass
class Job:
    """One job of the DAG as the log lists it; `cpu_s` and `wall_s` are filled from its benchmark file."""
    jobid: int
    rule: str
    inputs: list[str]
    outputs: list[str]
    threads: int
    benchmark: str | None
    cpu_s: float = 0.0
    wall_s: float = 0.0
    parents: set[int] = field(default_factory=set)

    @property
    def idle_s(self) -> float:
        """Its time alone on idle cores: CPU over threads, capped by the measured wall-clock."""
        return min(self.cpu_s / self.threads, self.wall_s) if self.wall_s else self.cpu_s / self.threads


def parse_log(path: Path) -> dict[int, Job]:
    """The jobs of a Snakemake log (run or dry run), the target rule `all` left out, with their parents."""
    jobs, rule, fields = {}, None, {}

    def close():
        if rule is not None and rule != "all" and "jobid" in fields:
            split = (lambda key: [s for s in fields.get(key, "").split(", ") if s])
            jid = int(fields["jobid"])
            jobs[jid] = Job(jid, rule, split("input"), split("output"), int(fields.get("threads", 1)),
                            fields.get("benchmark"))

    for line in Path(path).read_text().splitlines():
        start = _JOB_START.match(line)
        if start:
            close()
            rule, fields = start.group(1), {}
        elif rule is not None and (m := _JOB_FIELD.match(line)):
            fields[m.group(1)] = m.group(2)
        elif rule is not None:
            close()
            rule = None
    close()
    producer = {out: jid for jid, job in jobs.items() for out in job.outputs}
    for job in jobs.values():
        job.parents = {producer[i] for i in job.inputs if i in producer}
    return jobs


def attach_costs(jobs: dict[int, Job], results: Path | None, extra: dict[str, float]) -> list[str]:
    """Fill each job's CPU and wall seconds from its benchmark file under `results` (matched on the path below
    benchmarks/, so a dry run's jobs find the finished run's files) or from `extra` (keyed on the benchmark's
    stem, e.g. "calibrate_run/vit-pre__adamw__s0"; wall = CPU / threads). Returns the stems with no cost."""
    missing = []
    for job in jobs.values():
        stem = job.benchmark.split("benchmarks/", 1)[-1].removesuffix(".tsv") if job.benchmark else job.rule
        if stem in extra:
            job.cpu_s, job.wall_s = extra[stem], extra[stem] / job.threads
            continue
        tsv = results / "benchmarks" / f"{stem}.tsv" if results is not None else None
        if tsv is not None and tsv.exists():
            row = pd.read_csv(tsv, sep="\t").iloc[-1]
            job.cpu_s, job.wall_s = float(row["cpu_time"]), float(row["s"])
        else:
            missing.append(stem)
    return missing


def chain_below(jobs: dict[int, Job]) -> dict[int, float]:
    """For each job, the longest chain of idle times from its start to the end of the DAG (itself included)."""
    children = {jid: [] for jid in jobs}
    for jid, job in jobs.items():
        for p in job.parents:
            children[p].append(jid)
    memo: dict[int, float] = {}
    for jid in sorted(jobs, key=lambda j: _depth(jobs, j), reverse=True):  # children before parents
        memo[jid] = jobs[jid].idle_s + max((memo[c] for c in children[jid]), default=0.0)
    return memo


def _depth(jobs: dict[int, Job], jid: int, _memo: dict | None = None) -> int:
    memo = {} if _memo is None else _memo
    stack = [jid]
    while stack:
        j = stack[-1]
        todo = [p for p in jobs[j].parents if p not in memo]
        if todo:
            stack += todo
            continue
        memo[j] = 1 + max((memo[p] for p in jobs[j].parents), default=0)
        stack.pop()
    return memo[jid]


def critical_path(jobs: dict[int, Job]) -> list[int]:
    """The jobs of the longest chain of idle times, first to last."""
    below = chain_below(jobs)
    children = {jid: [c for c, job in jobs.items() if jid in job.parents] for jid in jobs}
    path = [max((j for j in jobs if not jobs[j].parents), key=below.get)]
    while children[path[-1]]:
        path.append(max(children[path[-1]], key=below.get))
    return path


def schedule(jobs: dict[int, Job], cores: int) -> float:
    """Makespan of a greedy list schedule on `cores` idle cores: whenever cores are free, start the ready job
    with the longest chain below it that fits (a job holds min(threads, cores) cores for its idle time)."""
    below = chain_below(jobs)
    waiting = {jid: set(job.parents) for jid, job in jobs.items()}
    ready = [(-below[j], j) for j, p in waiting.items() if not p]
    heapq.heapify(ready)
    running: list[tuple[float, int]] = []
    now, free = 0.0, cores
    while ready or running:
        held = []
        while ready:
            _, j = heapq.heappop(ready)
            need = min(jobs[j].threads, cores)
            if need <= free:
                free -= need
                heapq.heappush(running, (now + jobs[j].idle_s, j))
            else:
                held.append((-below[j], j))
        for item in held:
            heapq.heappush(ready, item)
        now, done = heapq.heappop(running)
        free += min(jobs[done].threads, cores)
        for c, parents in waiting.items():
            if done in parents:
                parents.discard(done)
                if not parents:
                    heapq.heappush(ready, (-below[c], c))
    return now


def cost_report(jobs: dict[int, Job], cores: int, title: str) -> str:
    """Markdown: CPU and idle time per rule, the critical path, the estimate of the wall-clock."""
    frame = pd.DataFrame([{"rule": next((g for g in ("train_ensemble", "train_interleaved") if j.rule.startswith(g)),
                                        j.rule),
                           "cpu_s": j.cpu_s, "wall_s": j.wall_s, "idle_s": j.idle_s} for j in jobs.values()])
    by_rule = frame.groupby("rule").agg(jobs=("cpu_s", "size"), cpu_s=("cpu_s", "sum"), max_job_idle_s=(
        "idle_s", "max")).sort_values("cpu_s", ascending=False)
    total = float(frame.cpu_s.sum())
    path = critical_path(jobs)
    span = schedule(jobs, cores)
    lines = [f"## {title}", "", f"{len(jobs)} jobs; CPU {total:,.0f} s ({total / cores / 60:.1f} min of {cores} "
             f"full cores); critical path {sum(jobs[j].idle_s for j in path):,.0f} s; greedy schedule on "
             f"{cores} idle cores {span:,.0f} s = {span / 60:.1f} min.", "",
             "| rule | jobs | CPU-s | longest job (idle s) |", "|---|---|---|---|"]
    lines += [f"| {r} | {int(row.jobs)} | {row.cpu_s:,.0f} | {row.max_job_idle_s:,.0f} |"
              for r, row in by_rule.iterrows()]
    lines += ["", "Critical path (idle seconds: CPU / threads):", "",
              "| job | threads | CPU-s | idle s |", "|---|---|---|---|"]
    for j in path:
        name = jobs[j].benchmark.split("benchmarks/", 1)[-1] if jobs[j].benchmark else jobs[j].rule
        lines.append(f"| {name} | {jobs[j].threads} | {jobs[j].cpu_s:,.0f} | {jobs[j].idle_s:,.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", type=Path, required=True, help="a Snakemake log (of the run, or of a dry run)")
    ap.add_argument("--results", type=Path, default=None, help="the finished run's results folder (benchmarks/)")
    ap.add_argument("--cost", action="append", default=[], metavar="STEM=CPU_S",
                    help="a job's CPU seconds by its benchmark stem (rule/name), for jobs the results lack")
    ap.add_argument("--cost-file", type=Path, default=None, help="lines STEM=CPU_S, as --cost ('#' comments)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--title", default="Cost of the run")
    ap.add_argument("--out", type=Path, default=None, help="append the markdown here (default: print)")
    args = ap.parse_args(argv)
    costs = list(args.cost)
    if args.cost_file is not None:
        costs += [ln.split("#", 1)[0].strip() for ln in args.cost_file.read_text().splitlines()]
    extra = {k.strip(): float(v) for k, v in (c.split("=", 1) for c in costs if c)}
    jobs = parse_log(args.log)
    missing = attach_costs(jobs, args.results, extra)
    if missing:
        raise SystemExit(f"no cost for {len(missing)} jobs (pass --cost STEM=CPU_S): {', '.join(sorted(missing))}")
    text = cost_report(jobs, args.cores, args.title)
    if args.out is None:
        print(text)
    else:
        with open(args.out, "a") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
