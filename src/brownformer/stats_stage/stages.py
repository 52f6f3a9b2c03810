"""The `brownformer stats trajectory|run|calibrate` stages as plain functions with typed arguments.

cli.py unpacks its arguments and calls one of these; nothing here sees argparse. Imports are local so
that `brownformer stats trajectory` loads only the battery (start-up matters: it is a user command).
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["stats_trajectory", "stats_attention", "stats_run", "stats_calibrate", "merge_calibrations",
           "calibration_shapes"]


def stats_trajectory(file: Path, out: Path | None, *, stats, kind: str | None = None, calibrate: bool = False,
                     echo=None) -> dict:
    """Battery, verdict and description of any (T, N, d) array (docs/ARTIFACTS.md, `stats trajectory`) -> OUT.json.

    Without `calibrate` the output says the verdict is uncalibrated ("calibration": null, "calibration_note").
    With it, the rule is simulated at the array's own shape (idealised null, every alternative) and from a model
    fitted to it (fitted null); a cost estimate is passed to `echo` (default: stderr) first; "verdict" is then the
    rule's verdict after the gates (claims/claim3_brownian.py file_verdict), "rule_verdict" the rule's own.
    """
    from brownformer.io import to_jsonable, write_json

    from .run_stats import trajectory_file_stats
    record = trajectory_file_stats(file, stats=stats, kind=kind)
    if calibrate:
        from .user_calibration import calibrate_result
        record = calibrate_result(file, record, stats=stats, kind=kind, echo=echo)
    if out is not None:
        write_json(out, record)
    return to_jsonable(record)  # what OUT.json holds: the CLI prints it


def stats_attention(file: Path, out: Path | None, *, stats, features: Path | None = None, wq: Path | None = None,
                    wk: Path | None = None, n_heads: int | None = None) -> dict:
    """Markov-chain statistics of any (..., n, n) array (docs/ARTIFACTS.md, `stats attention`) with a verdict per claim-2
    criterion and its margin (claims/claim2_markov.py `file_verdicts`) -> OUT.json."""
    from dataclasses import replace

    from brownformer.io import to_jsonable, write_json

    from brownformer.stats.claims.claim2_markov import file_verdicts
    from .attention_files import attention_file_stats
    result = attention_file_stats(file, features=features, wq=wq, wk=wk, n_heads=n_heads, stats=stats)
    record = replace(result, verdicts=file_verdicts(result, stats))
    if out is not None:
        write_json(out, record)
    return to_jsonable(record)  # what OUT.json holds: the CLI prints it


def stats_run(traj_dir: Path, out: Path, *, stats, run_id: str, min_lag_steps: int = 0) -> dict:
    """Every file of one run's trajectories/index.json -> out/<same path>.json and out/summary.json;
    `min_lag_steps`: the run's momentum time in steps (claim 3's window; config.ExperimentConfig.analysis_window)."""
    from .run_stats import stats_for_run
    return stats_for_run(traj_dir, out, stats=stats, run_id=run_id, min_lag_steps=min_lag_steps)


def calibration_shapes(run_summaries: list[Path]) -> list:
    """The distinct calibration shapes of the decided battery files listed in runs' stats/summary.json files.

    A file whose verdict is "inconclusive" stays so whatever the calibration says (it can only certify or
    downgrade a decision), so its shape is simulated only when some decided file shares it. Where replica files
    decide a family (claims 3b, 3c), its single-path files are not simulated (stats/diffusion/replica_sets.py).
    """
    return list({s.id: s for s, *_ in decided_files(run_summaries)}.values())


def trajectory_dir(summary_path: Path, summary) -> Path:
    """The trajectories folder a run's stats summary was made from: ``traj_dir`` is relative to the summary's own
    folder (so a results folder can be copied or moved), absolute, or, in summaries written before 2026-12-06,
    relative to the working directory of the run that wrote it (used when the summary-relative folder is absent)."""
    traj = Path(summary.traj_dir)
    if traj.is_absolute():
        return traj
    beside = Path(os.path.normpath(Path(summary_path).parent / traj))  # 'stats/../trajectories' -> 'trajectories'
    return beside if beside.exists() or not traj.exists() else traj


def decided_files(run_summaries: list[Path], context: list[Path] = ()) -> list[tuple]:
    """(shape, trajectory path, verdict, category, replica) of every decided battery file of the runs'
    stats/summary.json files, leaving out the single-path files of families that replica files decide
    (stats/diffusion/replica_sets.py); replica: whether the file holds replica contrasts. The `context` summaries (the
    replica sets', when one run is calibrated on its own) take part in that choice; their files are not listed."""
    from brownformer.stats.diffusion.replica_sets import calibrated_files
    from brownformer.statsfile import RunStatsSummary
    from .run_stats import BATTERY_CATEGORIES
    own = {Path(p) for p in run_summaries}
    pairs = []
    for path in [*run_summaries, *(p for p in context if Path(p) not in own)]:
        path = Path(path)
        try:
            summary = RunStatsSummary.from_dict(json.loads(path.read_text()), f"{path} (a run's stats summary)")
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a run's stats summary ({exc})") from None
        pairs += [(row, trajectory_dir(path, summary), path in own) for row in summary.files]
    kept = {id(row) for row in calibrated_files([row for row, *_ in pairs])}
    out = []
    for row, traj, listed in pairs:
        if (listed and id(row) in kept and row.category in BATTERY_CATEGORIES and row.calibration_shape is not None
                and row.verdict in ("brownian", "not brownian")):
            rel = Path(row.path)
            out.append((row.calibration_shape, rel if rel.is_absolute() else traj / rel, row.verdict, row.category,
                        row.unit == "replica"))
    return out


def _cell(job):
    from brownformer.stats.core.calibration import calibrate_fitted, run_calibration
    what, item, process, kwargs, stats = job
    if what == "shape":
        return run_calibration([item], processes=[process], **kwargs)
    from .trajectory_io import fit_file_null
    fid, null = fit_file_null(item[0], stats=stats, kind=item[1])
    return calibrate_fitted(null, fid, window=item[2], **kwargs)


def stats_calibrate(run_summaries: list[Path], out: Path, *, stats, replicates: int | None = None,
                    jobs: int = 1, context: list[Path] = (), merge: list[Path] = ()):
    """Size and power of the Brownian rule at every shape of the runs' battery files -> calibration.parquet.

    The idealised null is simulated at every decided file's exact shape, the alternatives only at shapes where some
    file says "brownian" (power only certifies "brownian"; a rejection rests on size alone), and the fitted null
    (fitted_null.py) of every decided file of the categories in stats.fitted_null and of every decided replica file
    (they decide 3b/3c and are few: 2 x 20 in the default run, ~0.1 s each).

    Args:
        run_summaries: results/runs/<R>/stats/summary.json of every run.
        out: the parquet to write.
        stats: StatsConfig (calibration_replicates, alpha, margins, seed, n_resamples: the data's own count).
        replicates: overrides stats.calibration_replicates (the null's cap).
        jobs: worker processes, one cell each at a time; results do not depend on it.
        context: summaries that take part in choosing the files (decided_files) but are not calibrated: the
            pipeline calibrates each run on its own with the replica sets as context, then merges the tables
            (merge_calibrations); every cell's numbers depend only on its shape and process, so the merge holds
            the rows of one job over all runs.
        merge: instead of simulating, the tables of single runs to merge into `out` (merge_calibrations).

    Raises:
        ValueError: neither run summaries nor tables to merge, or both.
    """
    if bool(run_summaries) == bool(merge):
        raise ValueError("stats calibrate: give run summaries (--run-stats) or tables to merge (--merge), not both")
    if merge:
        return merge_calibrations(merge, out)
    import pandas as pd

    from brownformer.io import atomic_path, progress

    files = decided_files(run_summaries, context)
    shapes = {s.id: s for s, *_ in files}
    if files:  # most runs have nothing to calibrate: they write the empty table without loading the simulations
        from brownformer.stats.core.calibration import processes_for
    certify = {s.id for s, _, v, *_ in files if v == "brownian"}
    n = int(replicates or stats.calibration_replicates)
    kwargs = {"n_replicates": n, "rng": stats.seed, "alpha": stats.alpha, "margins": dict(stats.margins),
              "n_resamples": stats.n_resamples}
    cells = [("shape", s, p, kwargs, stats) for s in shapes.values() for p in processes_for(s.kind)
             if p == "brownian" or s.id in certify]
    fitted = {str(p): (s, p) for s, p, _, cat, replica in files if cat in stats.fitted_null or replica}
    cells += [("fitted", (path, s.kind, s.window), "fitted", kwargs, stats) for s, path in fitted.values()]
    log.info("calibrating %d shapes and %d fitted nulls (%d cells), null cap %d replicates", len(shapes), len(fitted),
             len(cells), n)
    if jobs > 1 and len(cells) > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            parts = list(progress(pool.map(_cell, cells), desc="calibration cells", total=len(cells)))
    else:
        parts = [_cell(c) for c in progress(cells, desc="calibration cells")]
    parts = [p for p in parts if len(p)]
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["shape_id", "process", "test", "rejection_rate"])
    with atomic_path(Path(out)) as tmp:
        table.to_parquet(tmp, index=False)
    return table


def merge_calibrations(parts: list[Path], out: Path):
    """The calibration tables of single runs (stats_calibrate on each) -> one calibration.parquet.

    A shape that several runs share was simulated in each with the same numbers (its cells' streams come from
    the shape and the process), so its rows are kept once: the first part's, in the order given.
    """
    import pandas as pd

    from brownformer.io import atomic_path

    from brownformer.stats.core.calibration import KEY_COLUMNS
    tables = [pd.read_parquet(p) for p in parts]
    tables = [t for t in tables if len(t)]
    table = (pd.concat(tables, ignore_index=True).drop_duplicates(list(KEY_COLUMNS), ignore_index=True) if tables
             else pd.DataFrame(columns=["shape_id", "process", "test", "rejection_rate"]))
    with atomic_path(Path(out)) as tmp:
        table.to_parquet(tmp, index=False)
    return table
