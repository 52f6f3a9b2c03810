"""Cost of the report's "Can the rules say yes?" appendix: computing the controls against reading their cache.

    python benchmarks/controls_cost.py [--config config/config.yaml]

Times, in one process, (1) positive_controls_claims12 at the config's stats settings (what the appendix computes on
a cold cache), (2) `controls_appendix` on a cold results folder (compute + write the cache) and (3) on the warm one
(read the cache). Prints a markdown table; the ratio cold / warm is what caching buys.
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

from brownformer.config import load_config
from brownformer.report.context import ReportContext
from brownformer.report.section_controls import controls_appendix
from brownformer.results import Results
from brownformer.stats.controls import positive_controls_claims12 as controls12


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="config/config.yaml")
    args = ap.parse_args()
    cfg = load_config(args.config)
    stats = dataclasses.replace(cfg.stats, n_resamples=controls12.CONTROL_RESAMPLES)
    t0 = time.perf_counter()
    controls12.positive_controls_claims12(stats, rng=stats.seed)
    compute = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        ctx = ReportContext(cfg, Path(args.config), Results(cfg, Path(tmp)), Path(tmp) / "figures")
        t0 = time.perf_counter()
        controls_appendix(ctx)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        controls_appendix(ctx)
        warm = time.perf_counter() - t0
    print("| step | wall s |\n|---|---|")
    print(f"| positive_controls_claims12 | {compute:.2f} |\n| appendix, cold cache | {cold:.2f} |\n"
          f"| appendix, warm cache | {warm:.3f} |\n\ncold / warm: {cold / warm:.0f}x")


if __name__ == "__main__":
    main()
