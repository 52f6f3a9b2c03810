"""Which gate keeps claim 3a inconclusive on one run's depth files (docs/methods/claim3-rules.md, section 6).

    python benchmarks/claim3a_depth_gates.py --results results --run vit-deep__adamw__s0 [--replicates 40]

For every battery depth file of the run (not the after-affine LN files): the rule's verdict on the window, the size
of that windowed rule under the idealised and the fitted null at the file's shape (`--replicates` each, one chunk),
each file's Markov size s_i (Laplace-smoothed, capped at the gate's ceiling) and the run's count threshold k_run,
over all files and over the residual-stream files alone. One JSON line per file, then a summary line.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv=None) -> int:
    from brownformer.config import StatsConfig
    from brownformer.stats.core.calibration import calibrate_fitted, run_calibration
    from brownformer.stats.core.gates import SIZE_GOAL
    from brownformer.stats.core.pooling import markov_threshold, smoothed_size
    from brownformer.stats_stage.run_stats import trajectory_file_stats
    from brownformer.stats_stage.trajectory_io import fit_file_null
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--run", required=True)
    p.add_argument("--replicates", type=int, default=40)
    args = p.parse_args(argv)
    st = StatsConfig()
    root = args.results / "runs" / args.run / "trajectories" / "depth"
    if not root.is_dir():
        print(f"claim3a_depth_gates: {root} does not exist", file=sys.stderr)
        return 2
    rows = []
    for path in sorted(root.glob("*.npy")):
        if path.name.startswith("lnaff"):
            continue
        out = trajectory_file_stats(path, stats=st)
        shape = out.calibration_shape
        cells = {"ideal": run_calibration([shape], n_replicates=args.replicates, rng=st.seed, alternatives=False)}
        fid, null = fit_file_null(path, stats=st)
        cells["fitted"] = calibrate_fitted(null, fid, n_replicates=args.replicates, rng=st.seed, window=shape.window)
        sizes = {}
        for name, t in cells.items():
            v = t[t.test == "verdict"] if "test" in t else t  # no rows (a shape the calibration cannot simulate)
            sizes[name] = None if v.empty else (float(v.iloc[0].rate_not_brownian), int(v.iloc[0].n_replicates))
        s_i = min(SIZE_GOAL[1], max((smoothed_size(r * n, n) for r, n in filter(None, sizes.values())),
                                        default=SIZE_GOAL[1]))
        certified = out.verdict == "not brownian" and all(r <= SIZE_GOAL[1] for r, _ in filter(None, sizes.values()))
        rows.append({"file": path.name, "verdict": out.verdict, "certified_not_brownian": certified,
                     "window_exponent": out.local_slopes.effect.estimate if out.local_slopes else None,
                     "size_idealised": sizes["ideal"][0] if sizes["ideal"] else None,
                     "size_fitted": sizes["fitted"][0] if sizes["fitted"] else None, "s_i": s_i,
                     "reason": out.reason})
        print(json.dumps(rows[-1]), flush=True)
    summary = {"run": args.run, "n_files": len(rows), "certified_not_brownian": sum(r["certified_not_brownian"] for r in rows)}
    for fam, sel in (("all", rows), ("resid", [r for r in rows if r["file"].startswith("resid")])):
        k, bound = markov_threshold([r["s_i"] for r in sel], st.alpha)
        summary[fam] = {"n_files": len(sel), "sum_s_i": sum(r["s_i"] for r in sel), "k_run": k,
                        "certified": sum(r["certified_not_brownian"] for r in sel)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
