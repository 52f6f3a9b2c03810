"""The cross-run summary: every run's statistics -> summary.parquet, training_status.json, claims.json.

claims.json follows brownformer.verdicts (ClaimsFile): claims "1" (sphere), "2" (Markov),
"3a"/"3b"/"3c" (Brownian over depth / training / weights) and "4" (optimizer), each with an
estimate and interval, margin, reason, calibration and a Holm-adjusted p-value across the headline
claims; "did_not_train" lists the runs every claim leaves out (stats/core/training_status.py), with
the reason. training_status.json holds every run's status (trained or not, plateau, final metric,
chance level) for the report; summary.parquet one row per (run, file, quantity).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from brownformer.config import RunSpec
from brownformer.io import atomic_path, sha256_file, write_json
from brownformer.stats.claims import (BROWNIAN_FAMILIES, brownian_family_claim, headline_holm, markov_claim,
                                      optimizer_claim, sphere_claim)
from brownformer.stats.diffusion.replica_sets import base_run, replica_set_key
from brownformer.stats.core.training_status import RULES, ChanceBaseline, TrainingStatus, training_status
from brownformer.statsfile import AttentionStats, BatteryStats, RunStatsFile, RunStatsSummary, parse_stats_file
from brownformer.verdicts import ClaimRecord, ClaimsFile

from .chance_baseline import chance_baseline
from .trajectory_io import load_calibration

log = logging.getLogger(__name__)

__all__ = ["RunOutputs", "collect_run_outputs", "read_stats_file", "summarize", "summarize_results", "SUMMARY_COLUMNS"]

#: one row per (run, file, quantity); the interval is flattened to its bounds, the rest keeps the contract's names
SUMMARY_COLUMNS = ["run", "file", "category", "quantity", "estimate", "ci_low", "ci_high", "pvalue", "rejected"]


@dataclass
class RunOutputs:
    """Every run's per-file statistics, sorted into the claim families, and the summary rows.

    The claim rules take plain mappings: each is the `to_dict()` of a file read through brownformer.statsfile (the
    attention files: the records themselves)."""
    sphere: list[dict]
    attention: list[dict]  # [{"run", "attention": AttentionStats}]
    trajectories: dict[str, list[dict]]  # category (depth, training, weights) -> [{"run", "path", "result"}]
    rows: list[dict]


def _row(base: dict, quantity: str, estimate, interval, pvalue=None, rejected=None) -> dict:
    lo, hi = interval if interval is not None else (None, None)
    return {**base, "quantity": quantity, "estimate": estimate, "ci_low": lo, "ci_high": hi, "pvalue": pvalue,
            "rejected": rejected}


def _rows_for(run: str, rel: str, res: RunStatsFile) -> list[dict]:
    base = {"run": run, "file": rel, "category": res.category}
    rows = []
    if isinstance(res, BatteryStats):
        rows += [_row(base, t.name, t.estimate, t.confidence_interval, t.pvalue, t.rejected) for t in res.tests]
        if res.local_slopes is not None:  # claim 3's window exponent (stats/diffusion/window_reading.py), the verdict's MSD effect
            win = res.local_slopes.effect
            rows.append(_row(base, "window_exponent", win.estimate, win.confidence_interval, win.pvalue))
        rows.append(_row(base, "brownian", float(res.brownian), None))
    elif isinstance(res, AttentionStats):
        rows += [_row(base, q, v.mean, v.confidence_interval) for q, v in res.aggregate.items()]
    return rows


def read_stats_file(path: Path, where: str) -> RunStatsFile:
    """One per-file statistics JSON through the contract (ValueError naming the file and the problem)."""
    try:
        return parse_stats_file(json.loads(path.read_text()), where)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: cannot read {path} ({exc})") from None


def collect_run_outputs(run_stats_dirs: dict[str, str | Path]) -> RunOutputs:
    """Read each run's stats/summary.json and the per-file outputs it lists, through brownformer.statsfile.

    Raises:
        ValueError: a run without summary.json, or an output that is unreadable or breaks the contract.
    """
    out = RunOutputs([], [], {c: [] for c in BROWNIAN_FAMILIES}, [])
    for run, sdir in sorted(run_stats_dirs.items()):
        sdir = Path(sdir)
        path = sdir / "summary.json"
        if not path.exists():
            raise ValueError(f"run {run}: {path} does not exist (run `brownformer stats run` first)")
        try:
            summary = RunStatsSummary.from_dict(json.loads(path.read_text()), f"run {run}: {path}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"run {run}: cannot read {path} ({exc})") from None
        for f in summary.files:
            res = read_stats_file(sdir / f.output, f"run {run}: {sdir / f.output}")
            out.rows.extend(_rows_for(run, f.path, res))
            cat = res.category
            if cat in BROWNIAN_FAMILIES and isinstance(res, BatteryStats):  # files too short for the battery: no tests
                out.trajectories[cat].append({"run": run, "path": f.path, "result": res.to_dict()})  # run: set key
            if cat == "depth" and res.sphere is not None:
                out.sphere.append({"run": run, "path": f.path, "sphere": res.sphere,
                                   "capture": res.entry.capture if res.entry else None})
            elif isinstance(res, AttentionStats):
                out.attention.append({"run": run, "attention": res})
    return out


def _status_rows(status: dict[str, TrainingStatus]) -> list[dict]:
    rows = []
    for run, st in sorted(status.items()):
        for q, v in (("did_not_train", st.did_not_train), ("reached_plateau", st.reached_plateau)):
            rows.append({"run": run, "file": None, "category": "training_status", "quantity": q,
                         "estimate": None if v is None else float(v), "ci_low": None, "ci_high": None,
                         "pvalue": None, "rejected": None})
    return rows


def summarize(run_stats_dirs: dict[str, str | Path], out_dir: str | Path, *, stats, report,
              metrics_by_run: dict[str, pd.DataFrame], baselines: dict[str, ChanceBaseline | None] | None = None,
              calibration_path: str | Path | None = None) -> ClaimsFile:
    """Decide every claim over the runs; write summary.parquet, training_status.json and claims.json.

    Args:
        run_stats_dirs: run id -> that run's stats folder (with summary.json).
        out_dir: e.g. results/stats.
        stats: StatsConfig; report: ReportConfig (claim 4's optimizers and targets).
        metrics_by_run: run id -> metrics table (training status and claim 4).
        baselines: run id -> the chance level of its dataset (None: only divergence is detected).
        calibration_path: the Brownian battery's calibration.parquet (may be missing).

    Returns:
        The ClaimsFile written to out_dir/claims.json.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    baselines = baselines or {}
    status = {run: training_status(df, baselines.get(run)) for run, df in sorted(metrics_by_run.items())}
    excluded = {run: st.reason for run, st in status.items() if st.did_not_train}
    excluded.update({key: f"replica 0 ({base_run(key)}) did not train: {excluded[base_run(key)]}"
                     for key in run_stats_dirs if base_run(key) != key and base_run(key) in excluded})
    for run in excluded:
        log.warning("%s did not train (%s): left out of every claim", run, excluded[run])
    outputs = collect_run_outputs(run_stats_dirs)
    calibration = Path(calibration_path) if calibration_path and Path(calibration_path).exists() else None
    headlines = [sphere_claim(outputs.sphere, stats, excluded=excluded),
                 markov_claim(outputs.attention, stats, excluded=excluded),
                 *(brownian_family_claim(key, outputs.trajectories[cat], stats,
                                         calibration=load_calibration(calibration), excluded=excluded)
                   for cat, key in BROWNIAN_FAMILIES.items()),
                 optimizer_claim(metrics_by_run, stats, report, excluded=excluded)]
    claims: dict[str, ClaimRecord] = {c.claim: c for c in headline_holm(headlines)}
    table = pd.DataFrame(outputs.rows + _status_rows(status), columns=SUMMARY_COLUMNS)
    for col in ("estimate", "ci_low", "ci_high", "pvalue"):
        table[col] = pd.to_numeric(table[col], errors="coerce")
    with atomic_path(out_dir / "summary.parquet") as tmp:
        table.to_parquet(tmp, index=False)
    write_json(out_dir / "training_status.json", {"runs": {run: st.to_dict() for run, st in status.items()},
                                                  "rules": RULES})
    result = ClaimsFile(claims=claims, did_not_train=[{"run": r, "reason": why} for r, why in sorted(excluded.items())],
                        calibration={"path": str(calibration) if calibration else None,
                                     "available": calibration is not None,
                                     "sha256": sha256_file(calibration) if calibration else None},
                        runs=sorted({base_run(r) for r in run_stats_dirs} | set(metrics_by_run)))
    write_json(out_dir / "claims.json", result)  # write_json converts the record once
    return result


def summarize_results(config, results_dir: str | Path, out_dir: str | Path, *, runs: dict[str, str] | None = None,
                      calibration_path: str | Path | None = None) -> ClaimsFile:
    """The `brownformer stats summary` stage: read the results tree of a config's grid and summarize it.

    Args:
        config: ExperimentConfig (grid, stats, report, models -> datasets).
        results_dir: the results root (runs/<run>/{stats,metrics.parquet}, data/<dataset>).
        out_dir: where claims.json, summary.parquet and training_status.json go.
        runs: run id -> stats folder (its parent holds the run's metrics.parquet); default: the statistics
            of every probed run of the grid and the metrics of every run (metrics-only runs included:
            claim 4 and the training status read metrics only), under results_dir/runs.
        calibration_path: calibration.parquet.

    Raises:
        ValueError: a run without metrics.parquet or stats/summary.json.
    """
    results_dir = Path(results_dir)
    if runs:
        stats_dirs = dict(runs)
        metric_files = {run: Path(sdir).parent / "metrics.parquet" for run, sdir in stats_dirs.items()
                        if base_run(run) == run}  # a replica set's metrics are its base run's
    else:
        stats_dirs = {r.run_id: str(results_dir / "runs" / r.run_id / "stats") for r in config.probed_runs()}
        for base in config.replica_sets():  # claims 3b, 3c over replicas (the pipeline always computes these)
            sdir = results_dir / "replicas" / base / "stats"
            if (sdir / "summary.json").exists():
                stats_dirs[replica_set_key(base)] = str(sdir)
            else:
                log.warning("replica set %s has no statistics (%s): claims 3b/3c fall back to single paths there",
                            base, sdir / "summary.json")
        metric_files = {r.run_id: results_dir / "runs" / r.run_id / "metrics.parquet" for r in config.runs()}
    metrics, baselines, chance = {}, {}, {}
    for run, mp in metric_files.items():
        if not mp.exists():
            raise ValueError(f"run {run}: {mp} does not exist")
        metrics[run] = pd.read_parquet(mp)
        model = config.models.get(RunSpec.parse(run).model)
        dataset = model.dataset if model is not None else None
        if dataset is not None and dataset not in chance:
            try:
                chance[dataset] = chance_baseline(results_dir / "data" / dataset)
            except ValueError as exc:  # no prepared data: only divergence can be detected
                log.warning("dataset %s: %s", dataset, exc)
                chance[dataset] = None
        baselines[run] = chance.get(dataset)
    return summarize(stats_dirs, out_dir, stats=config.stats, report=config.report, metrics_by_run=metrics,
                     baselines=baselines, calibration_path=calibration_path)
