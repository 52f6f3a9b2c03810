"""Seeds per CPU-second: an ensemble of k seeds in one `brownformer train` job against k separate jobs.

    python benchmarks/ensemble.py --config config/config.yaml --model vit-pre --optimizer adamw \
        --steps 100 --sizes 1 2 4 8 --repeats 3 --out benchmarks/results/ensemble.md

Every job is a `brownformer train` process (start-up included, as in the pipeline), metrics only, with the
model's claim-4 settings (evaluation every `--eval-every` steps); its CPU seconds (user + sys of the child)
are measured. k separate runs cost k x the one-seed job; the ensemble is one job of k members. Sizes and
repeats are interleaved so a load change on the shared cores hits every size alike; medians over repeats.
Goal (issue 32): 8 seeds in at most 2.5x one seed's CPU time.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import load_raw, prepare_data  # noqa: E402


def _job_config(raw: dict, model: str, optimizer: str, seeds: list[int], steps: int, eval_every: int,
                size: int, probes: bool = False) -> dict:
    """The config of one job: one block of the seeds (metrics only unless `probes`), ensembles of `size`."""
    raw = copy.deepcopy(raw)
    raw.pop("tuning", None)
    raw.pop("replicas", None)
    raw["seeds"] = seeds
    raw["grid"] = [{"models": [model], "optimizers": [optimizer], "seeds": seeds, "probes": probes,
                    "eval_every": eval_every}]
    raw["models"][model]["steps"] = steps
    raw["train"]["ensemble"] = size
    return raw


def _cpu_seconds(cmd: list[str]) -> float:
    """User + sys CPU seconds of the child process `cmd` (it must succeed)."""
    before = os.times()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def _job(raw: dict, args, size: int, work: Path, data_dir: str, rep: int) -> float:
    seeds = list(range(size))
    config = work / f"config_{size}_{rep}.yaml"
    config.write_text(yaml.safe_dump(_job_config(raw, args.model, args.optimizer, seeds, args.steps,
                                                 args.eval_every, max(size, 1), args.probes)))
    runs = [f"{args.model}__{args.optimizer}__s{s}" for s in seeds]
    cmd = ["brownformer", "train", "--config", str(config), "--data", data_dir, "--quiet", "--set", "train.threads=1",
           *([] if args.probes else ["--no-probes"])]
    cmd += [a for r in runs for a in ("--run", r)]
    out = work / f"runs_{size}_{rep}"
    cmd += ["--out", str(out / runs[0])] if size == 1 else ["--runs-dir", str(out)]
    env_cmd = ["env", "OMP_NUM_THREADS=1", *cmd]
    return _cpu_seconds(env_cmd)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--model", default="vit-pre")
    p.add_argument("--optimizer", default="adamw")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=5, help="claim 4's runs evaluate every 5 steps")
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--probes", action="store_true", help="probed runs (captures per member, as claims 1-3 need)")
    p.add_argument("--out", default="benchmarks/results/ensemble.md")
    args = p.parse_args(argv)
    raw = load_raw(args.config)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data_dir = prepare_data(raw, args.model, work / "data")
        for rep in range(args.repeats):
            for size in args.sizes:
                rows.append({"members": size, "repeat": rep, "cpu_s": _job(raw, args, size, work, data_dir, rep)})
                print(f"repeat {rep}: {size} member(s) {rows[-1]['cpu_s']:.1f} CPU-s", flush=True)
    df = pd.DataFrame(rows)
    med = df.groupby("members")["cpu_s"].median()
    one = med.loc[1] if 1 in med.index else float("nan")
    table = pd.DataFrame({
        "seeds": med.index, "ensemble job CPU-s (median)": med.values,
        "separate jobs CPU-s (k x one)": [k * one for k in med.index],
        "ensemble / one seed": med.values / one,
        "seeds per CPU-s, ensemble": med.index / med.values,
        "seeds per CPU-s, separate": [1 / one] * len(med),
    })
    text = "\n".join([
        "# Ensembles: seeds per CPU-second (benchmarks/ensemble.py)", "",
        f"`python benchmarks/ensemble.py --config {args.config} --model {args.model} --optimizer {args.optimizer} "
        f"--steps {args.steps} --eval-every {args.eval_every} --sizes {' '.join(map(str, args.sizes))} "
        f"--repeats {args.repeats}{' --probes' if args.probes else ''}`", "",
        f"Each job is one `brownformer train` process (start-up included), "
        f"{'with probe captures' if args.probes else 'metrics only'}, {args.steps} steps, "
        f"evaluation every {args.eval_every} steps, 1 thread; CPU seconds are the child's user + sys, medians over "
        f"{args.repeats} interleaved repeats on a shared 2-core machine.", "",
        table.to_markdown(index=False, floatfmt=".3g"), "",
        "Every repeat:", "", df.pivot(index="repeat", columns="members", values="cpu_s").to_markdown(floatfmt=".1f"),
        ""])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
