"""The `brownformer stats trajectory|run|calibrate` stages as plain functions with typed arguments.

cli.py unpacks its arguments and calls one of these; nothing here sees argparse. Imports are local so
that `brownformer stats trajectory` loads only the battery (start-up matters: it is a user command).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["stats_trajectory", "stats_run", "stats_calibrate", "calibration_shapes"]


def stats_trajectory(file: Path, out: Path, *, stats, kind: str | None = None) -> dict:
    """Battery, verdict and description of any (T, N, d) array (DESIGN.md `stats trajectory`) -> OUT.json."""
    from brownformer.io import write_json

    from .run_stats import trajectory_file_stats
    result = trajectory_file_stats(file, stats=stats, kind=kind)
    write_json(out, result)
    return result


def stats_run(traj_dir: Path, out: Path, *, stats, run_id: str) -> dict:
    """Every file of one run's trajectories/index.json -> out/<same path>.json and out/summary.json."""
    from .run_stats import stats_for_run
    return stats_for_run(traj_dir, out, stats=stats, run_id=run_id)


def calibration_shapes(run_summaries: list[Path]) -> list:
    """The distinct calibration shapes of the decided battery files listed in runs' stats/summary.json files.

    A file whose verdict is "inconclusive" stays so whatever the calibration says (it can only certify or
    downgrade a decision), so its shape is simulated only when some decided file shares it. Where replica files
    decide a family (claims 3b, 3c), its single-path files are not simulated (stats/replicas.py).
    """
    from .replicas import calibrated_files
    from .run_stats import BATTERY_CATEGORIES
    from .shapes import CalibrationShape
    shapes, rows = {}, []
    for path in run_summaries:
        path = Path(path)
        try:
            rows += json.loads(path.read_text())["files"]
        except (OSError, json.JSONDecodeError, KeyError) as exc:
            raise ValueError(f"{path}: not a run's stats summary ({exc})") from None
    for f in calibrated_files(rows):  # families decided on replicas: their single-path files are description only
        if (f.get("category") in BATTERY_CATEGORIES and f.get("calibration_shape")
                and f.get("verdict") in ("brownian", "not brownian")):
            shape = CalibrationShape.from_dict(f["calibration_shape"])
            shapes.setdefault(shape.id, shape)
    return list(shapes.values())


def _cell(job):
    from .calibration import run_calibration
    shape, process, kwargs = job
    return run_calibration([shape], processes=[process], **kwargs)


def stats_calibrate(run_summaries: list[Path], out: Path, *, stats, replicates: int | None = None,
                    jobs: int = 1):
    """Size and power of the Brownian rule at every shape of the runs' battery files -> calibration.parquet.

    Args:
        run_summaries: results/runs/<R>/stats/summary.json of every run.
        out: the parquet to write.
        stats: StatsConfig (calibration_replicates, alpha, margins, seed, n_resamples).
        replicates: overrides stats.calibration_replicates.
        jobs: worker processes, one (shape, process) cell each at a time; results do not depend on it.
    """
    import pandas as pd

    from brownformer.io import atomic_path

    from .calibration import processes_for
    shapes = calibration_shapes(run_summaries)
    n = int(replicates or stats.calibration_replicates)
    kwargs = {"n_replicates": n, "rng": stats.seed, "alpha": stats.alpha, "margins": dict(stats.margins),
              "n_resamples": min(stats.n_resamples, 199)}
    cells = [(s, p, kwargs) for s in shapes for p in processes_for(s.kind)]
    log.info("calibrating %d shapes (%d cells) x %d replicates", len(shapes), len(cells), n)
    if jobs > 1 and len(cells) > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            parts = list(pool.map(_cell, cells))
    else:
        parts = [_cell(c) for c in cells]
    parts = [p for p in parts if len(p)]
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["shape_id", "process", "test", "rejection_rate"])
    with atomic_path(Path(out)) as tmp:
        table.to_parquet(tmp, index=False)
    return table
