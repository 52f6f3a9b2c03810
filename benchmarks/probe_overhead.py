"""Cost of trajectory capture: one run trained with and without probes, same process.

    python benchmarks/probe_overhead.py --config config/config.yaml --run vit-pre__adamw__s0 --repeats 2

Overhead = (wall time with probes - without) / without, median over repeats; also the capture
seconds the recorder logged and the store size in MB. Target (issue 4): under 15%.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

from brownformer.config import load_config
from brownformer.data import prepare_dataset
from brownformer.train import train_run


def _dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--run", default="vit-pre__adamw__s0")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default="results/benchmarks/probe_overhead.json")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    spec = cfg.run(args.run)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data_dir = tmp / "data"
        prepare_dataset(cfg.dataset_of(spec.model), data_dir)
        for r in range(args.repeats):  # interleaved, so drifts in machine load hit both alike
            for probes in (False, True):
                out = tmp / f"run_{r}_{probes}"
                metrics = train_run(cfg, args.run, data_dir, out, probes=probes, progress=False)
                index = out / "probes" / "index.parquet"
                rows.append({"repeat": r, "probes": probes, "wall_s": float(metrics["wall_time"].iloc[-1]),
                             "capture_s": float(pd.read_parquet(index)["seconds"].sum()) if index.exists() else 0.0,
                             "store_mb": _dir_mb(out / "probes") if probes else 0.0})
    table = pd.DataFrame(rows)
    base = statistics.median(table[~table.probes].wall_s)
    with_p = statistics.median(table[table.probes].wall_s)
    result = {"run": args.run, "config": args.config, "repeats": args.repeats, "wall_without_s": base,
              "wall_with_s": with_p, "overhead": with_p / base - 1,
              "capture_s": statistics.median(table[table.probes].capture_s),
              "store_mb": statistics.median(table[table.probes].store_mb), "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
