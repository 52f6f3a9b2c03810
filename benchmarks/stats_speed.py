"""CPU seconds of the statistics stage's four heaviest commands, two source trees interleaved (issue 32's budget).

    python benchmarks/stats_speed.py --run-root /tmp/final0 --base /tmp/base/src --new /tmp/snap/src \
        --repeats 2 --out /tmp/stats_speed

RUN_ROOT is a finished default run (its config/config.yaml and results/, read only). The commands are the
pipeline's: compute_stats of vit-post__adamw__s1, compute_replica_stats of vit-pre__adamw__s0, calibrate_run of
vit-deep__adamw__s1 and calibrate_replica_set of vit-pre__adamw__s0 (their replica-set context as the rules give it),
each run from RUN_ROOT with the BLAS/OpenMP thread variables Snakemake exports to a job of `threads: 1`. Every command
runs for the base tree, then the new one, `--repeats` times, so both see the same load; CPU = user + system seconds
of the child. Outputs go to OUT/<tree>_<repeat>/results/... in the same layout, so that
`python benchmarks/compare_dag_outputs.py OUT/base_1 OUT/new_1` checks they are identical.
Results: benchmarks/results/stats_speed.md.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
from pathlib import Path

#: what Snakemake exports to every shell job of `threads: 1`
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "GOTO_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
RUN, RUN_DEEP, REPLICA_SET = "vit-post__adamw__s1", "vit-deep__adamw__s1", "vit-pre__adamw__s0"


def commands(root: Path, out: Path) -> dict[str, list[str]]:
    """The four commands, arguments relative to RUN_ROOT as the pipeline writes them, outputs under `out`."""
    cfg, res = str(root / "config" / "config.yaml"), root / "results"
    context = [str(p) for p in sorted((res / "replicas").glob("*/stats/summary.json"))]
    cli = [sys.executable, "-m", "brownformer", "stats"]
    return {
        "compute_stats": cli + ["run", "--config", cfg, "--run", RUN, "--traj-dir",
                                f"results/runs/{RUN}/trajectories", "--out", str(out / "runs" / RUN / "stats")],
        "compute_replica_stats": cli + ["run", "--config", cfg, "--run", REPLICA_SET, "--traj-dir",
                                        f"results/replicas/{REPLICA_SET}/trajectories",
                                        "--out", str(out / "replicas" / REPLICA_SET / "stats")],
        "calibrate_run": cli + ["calibrate", "--config", cfg, "--run-stats",
                                str(res / "runs" / RUN_DEEP / "stats" / "summary.json"), "--context", *context,
                                "--jobs", "1", "--out", str(out / "calibration" / f"{RUN_DEEP}.parquet")],
        "calibrate_replica_set": cli + ["calibrate", "--config", cfg, "--run-stats",
                                        str(res / "replicas" / REPLICA_SET / "stats" / "summary.json"),
                                        "--context", *context, "--jobs", "1",
                                        "--out", str(out / "calibration" / f"{REPLICA_SET}.parquet")]}


def cpu_seconds(cmd: list[str], *, src: Path, cwd: Path, log: Path) -> float:
    """User + system CPU seconds of one command run with `src` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src), **{v: "1" for v in THREAD_VARIABLES}}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log, "w") as fh:
        subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=fh, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run-root", type=Path, required=True, help="a finished default run (config/, results/)")
    p.add_argument("--base", type=Path, required=True, help="src/ of the tree to compare against")
    p.add_argument("--new", type=Path, required=True, help="src/ of the tree measured")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    rows = {}
    for i in range(1, args.repeats + 1):
        for tree, src in (("base", args.base), ("new", args.new)):
            out = args.out / f"{tree}_{i}"
            for name, cmd in commands(args.run_root.resolve(), out / "results").items():
                (out / "logs").mkdir(parents=True, exist_ok=True)
                secs = cpu_seconds(cmd, src=src.resolve(), cwd=args.run_root, log=out / "logs" / f"{name}.log")
                rows.setdefault(name, {}).setdefault(tree, []).append(secs)
                print(f"{tree} {i} {name}: {secs:.1f} CPU-s", file=sys.stderr, flush=True)
    print("| command | base CPU-s | new CPU-s | new / base |\n|---|---|---|---|")
    total = {"base": 0.0, "new": 0.0}
    for name, r in rows.items():
        b, n = (sum(r[t]) / len(r[t]) for t in ("base", "new"))
        total["base"] += b
        total["new"] += n
        runs = lambda t: ", ".join(f"{x:.1f}" for x in r[t])  # noqa: E731
        print(f"| {name} | {b:.1f} ({runs('base')}) | {n:.1f} ({runs('new')}) | {n / b:.2f} |")
    print(f"| sum | {total['base']:.1f} | {total['new']:.1f} | {total['new'] / total['base']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
