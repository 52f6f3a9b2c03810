"""One run's statistics: every file of trajectories/index.json -> one JSON per file, and summary.json.

Every file written here is a record of the typed contract brownformer.statsfile (built by the statistics, written by
its `to_dict`; schema_version, scipy's names), which the readers parse once (`parse_stats_file`, `RunStatsSummary`).
Layout: out_dir mirrors traj_dir (".npy" -> ".json"); out_dir/summary.json lists
{"schema_version", "run_id", "n_files", "files": [{"path", "output", "category", "verdict", "calibration_shape", ...}],
"errors": [{"path", "error"}]}; the calibration stage reads the shapes to simulate from it.

What each per-file JSON holds (read by stats_stage/summary.py, the figures and the report); every file also
has "schema_version", "run_id", "category", "entry" (its index.json entry) and "input" {"path", "sha256"}:

- depth/ln_c<k>.json, depth/resid_c<k>.json (category "depth", claims 1 and 3a): the Brownian battery
  (`trajectory_file_stats`, below) over layers as time, plus "sphere" (claim 1: tensor_sphere_summary);
  with fewer than rule.MIN_TIME_POINTS layers the verdict is "inconclusive" and only clock-free statistics
  are defined. depth/lnaff_c<k>.json: "sphere" only ("battery": why not), with gamma and beta recovered from
  the same capture's depth/ln_c<k>.npy ("affine_map") and the geometry about beta ("about"), which claim 1 decides on.
- training/ln_l<l>.json (category "training", claim 3b), weights/l<l>_<m>.json ("weights", claim 3c): the
  battery on the sidecar's primary clock ("time"), with "clock_check": the MSD exponent on the other
  recorded clocks.
- The battery's fields (brownian.trajectory_battery; statsfile.BatteryStats): "kind", "n_times", "n_walkers",
  "n_groups", "dim", "span_dimension", "msd_exponent" {estimate, confidence_interval, tost_interval, pvalue},
  "diffusion_coefficient" {estimate, confidence_interval}, "tests" [{name, statistic, pvalue, rejected, estimate,
  confidence_interval, tost_interval, why_undefined, ...}], "effects" {key test: {estimate, confidence_interval,
  tost_interval, pvalue, margin}},
  "verdict" ("brownian" | "not brownian" | "inconclusive"), "reason", "brownian" (bool), "classification",
  "within_group_correlation", "calibration_shape" {id, kind, T, N, d, G, rho, decay, times, group_sizes}.
  The calibration stage simulates the shapes of the decided files; the claims (stats/claims/claim3_brownian.py)
  look each file's shape up in calibration.parquet and cite size and power at exactly that shape.
- Claim 3's window reading (stats/diffusion/window_reading.py, docs/methods/claim3-local-slopes.md) on every battery file:
  "local_slopes" {window, tau, curve, local_slope, envelope {low, median, high}, effect (the window exponent with
  its null size), curvature, ensemble_exponent, classification, description} and "walkers" {reading, rates,
  quantiles overall / by_type / by_position, diagnostics {eb, ergodicity_ratio, ageing_ratio, vacf_q1/2/4, alpha2}
  with their Brownian ranges}. "verdict", "reason" and "classification" rest on the window exponent; the full-range
  ones are kept as "verdict_full_range", "reason_full_range", "classification_full_range". "local_slopes"."spec"
  (window_reading.WindowSpec) is also the "calibration_shape"."window", so that the calibration simulates the rule
  on that window (its shape id covers it).
- gradnoise/*.json: descriptive.analyze_noise; attention/*.json: attention_files.attention_file_record.
"""
from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from brownformer.io import progress, sha256_file, write_json
from brownformer.stats.diffusion.window_verdict import trajectory_result
from brownformer.statsfile import (BatteryStats, Clock, FileError, FittedNullInfo, InputFile, RunStatsFile,
                                   RunStatsSummary, SphereStats, SphereSummary, SummaryRow)

from .trajectory_io import IndexEntry, load_calibration, load_trajectory, read_index, read_sidecar

log = logging.getLogger(__name__)

__all__ = ["stats_for_run", "trajectory_file_stats", "BATTERY_CATEGORIES"]

BATTERY_CATEGORIES = ("depth", "training", "weights")


def trajectory_file_stats(path, *, stats, kind: str | None = None, calibration=None,
                          min_lag_steps: int = 0) -> BatteryStats:
    """The battery, verdict and description of one trajectory file (docs/ARTIFACTS.md, `stats trajectory`).

    Args:
        path: FILE.npy (T, N, d) with an optional sidecar FILE.json (kind, time, times, groups or
            n_inputs/n_tokens, sum_zero, drift, clocks). Without a sidecar: euclidean, times 0..T-1,
            independent walkers, common drift removed.
        stats: StatsConfig; kind: overrides the sidecar; calibration: table or parquet path.
        min_lag_steps: the run's momentum time in steps (config.ExperimentConfig.analysis_window(run).min_gap): the
            window's shortest lag on a training-step clock (a replica file's sidecar "window" takes precedence).

    Returns:
        The file's statistics record (statsfile.BatteryStats), its clock, input and fitted-null id attached.

    Raises:
        ValueError: unreadable file, invalid trajectory or sidecar (a one-line message).
    """
    from brownformer.stats.core.shapes import fitted_calibration_for
    from brownformer.stats.diffusion.fitted_null import fitted_id
    X, meta = load_trajectory(path, kind=kind)
    table = load_calibration(calibration)
    result = trajectory_result(X, meta, stats=stats, calibration=table, min_lag_steps=min_lag_steps)
    fid = fitted_id(meta.sha256, stats.seed, stats.max_walkers)
    return replace(result, time=meta.time, clock=Clock(time=meta.time, why=meta.clock_reason, warmup=meta.warmup),
                   input=InputFile(path=str(path), sha256=meta.sha256, sidecar=meta.has_sidecar),
                   fitted_null=FittedNullInfo(fid, fitted_calibration_for(table, fid)))


def _depth_tensor(entry: IndexEntry, path: Path) -> str:
    """Which claim-1 tensor a depth file holds: "ln_raw", "ln_affine" or "resid"."""
    tensor, name = entry.tensor, path.name
    if tensor == "ln_affine" or name.startswith("lnaff"):
        return "ln_affine"
    if tensor == "ln" or (tensor is None and name.startswith("ln")):
        return "ln_raw"
    return "resid"


def _sphere_part(entry: IndexEntry, path: Path, stats) -> SphereSummary:
    """Claim 1 on one depth file, independent of the battery (any number of layers)."""
    from brownformer.stats.sphere.sphere_distance import SPHERE_MAX_RESAMPLES, tensor_sphere_summary
    X = np.load(path, allow_pickle=False)
    if X.ndim != 3:
        raise ValueError(f"{path}: depth file must be (layers, walkers, d), got shape {X.shape}")
    meta = read_sidecar(path)
    tensor = _depth_tensor(entry, path)
    z = X.astype(np.float64)
    if tensor == "ln_raw":  # depth/ln files hold LN output / sqrt(d); claim 1 is about z = LN output itself
        z = z * np.sqrt(X.shape[-1])
    z_raw = None
    raw_path = path.with_name(path.name.replace("lnaff_", "ln_", 1))
    if tensor == "ln_affine" and raw_path != path and raw_path.exists():  # the same tokens before the affine
        z_raw = np.load(raw_path, allow_pickle=False).astype(np.float64) * np.sqrt(X.shape[-1])
    out = tensor_sphere_summary(z, tensor=tensor, z_raw=z_raw, margins=dict(stats.margins),
                                n_inputs=meta.n_inputs, n_tokens=meta.n_tokens, confidence_level=stats.confidence_level,
                                n_resamples=min(stats.n_resamples, SPHERE_MAX_RESAMPLES), rng=stats.seed)
    return replace(out, ln=meta.ln, step=meta.step, capture=entry.capture,
                   times=meta.times or list(range(X.shape[0])))


def _analyze_entry(entry: IndexEntry, path: Path, stats, calibration, init_attention,
                   min_lag_steps: int = 0) -> RunStatsFile:
    """One index entry's statistics record (the stage attaches run, category, entry and input)."""
    cat = entry.category or ""
    if cat == "attention":
        from .attention_files import attention_file_record
        return attention_file_record(path, stats, init_attention)
    if cat == "gradnoise":
        from brownformer.stats.diffusion.descriptive import analyze_noise
        return analyze_noise(np.load(path, allow_pickle=False), confidence_level=stats.confidence_level)
    if cat != "depth":
        return trajectory_file_stats(path, stats=stats, kind=entry.kind, calibration=calibration,
                                     min_lag_steps=min_lag_steps)
    sphere = _sphere_part(entry, path, stats)
    if sphere.tensor == "ln_affine":
        return SphereStats(sphere=sphere, kind=entry.kind or "euclidean",
                           battery="not run: the after-affine LN output is analysed for claim 1 only")
    try:
        return replace(trajectory_file_stats(path, stats=stats, kind=entry.kind, calibration=calibration),
                       sphere=sphere)
    except ValueError as exc:  # e.g. T < 3 for a 2-layer model: keep the sphere part
        log.info("%s: battery skipped (%s)", path, exc)
        return SphereStats(sphere=sphere, kind=entry.kind, battery_error=str(exc))


def stats_for_run(traj_dir, out_dir, *, stats, run_id: str, calibration=None, min_lag_steps: int = 0) -> dict:
    """Analyse every file listed in traj_dir/index.json; write per-file JSON and out_dir/summary.json.

    Args:
        traj_dir: a run's trajectories/ directory.
        out_dir: where to write (e.g. results/runs/<R>/stats).
        stats: brownformer.config.StatsConfig.
        run_id: "<model>__<optimizer>__s<seed>".
        calibration: calibration table (DataFrame or parquet path); each battery file gets the rows at its shape.
        min_lag_steps: the run's momentum time in steps (config.ExperimentConfig.analysis_window(run_id).min_gap).

    Returns:
        The summary dict also written to out_dir/summary.json.

    Raises:
        ValueError: missing or malformed index.json.
    """
    traj_dir, out_dir = Path(traj_dir), Path(out_dir)
    entries = read_index(traj_dir)
    cal = load_calibration(calibration)
    init = None
    if any(e.category == "attention" for e in entries):
        from .attention_files import init_attention
        init = init_attention(entries, traj_dir, stats)
    files, errors = [], []
    for entry in progress(entries, desc=f"statistics {run_id or traj_dir.name}"):
        rel, path = Path(entry.path), entry.resolve(traj_dir)
        if path.name.endswith("_features.npy"):
            continue  # consumed with its attention file
        rel_out = (path.relative_to(traj_dir) if path.is_relative_to(traj_dir) else Path(path.name)).with_suffix(".json")
        try:
            result = _analyze_entry(entry, path, stats, cal, init, min_lag_steps)
        except (ValueError, OSError) as exc:
            log.warning("%s: %s", path, exc)
            errors.append(FileError(path=str(rel), error=str(exc)))
            continue
        record = replace(result, run_id=run_id, category=entry.category, entry=entry,
                         input=InputFile(path=str(path), sha256=sha256_file(path)))
        write_json(out_dir / rel_out, record)
        files.append(_summary_row(entry, rel, rel_out, record))
        log.info("%s: %s", rel, getattr(record, "verdict", None) or "done")
    # traj_dir relative to the summary's own folder, so a results folder copied or moved elsewhere still resolves it
    summary = RunStatsSummary(run_id=run_id, traj_dir=os.path.relpath(traj_dir.resolve(), out_dir.resolve()),
                              index_sha256=sha256_file(traj_dir / "index.json"),
                              n_files=len(files), files=files, errors=errors)
    write_json(out_dir / "summary.json", summary)
    return summary


def _summary_row(entry: IndexEntry, rel: Path, rel_out: Path, record) -> SummaryRow:
    """A file's line in summary.json, read off its typed record (fields a record lacks stay None: not written)."""
    slopes, sphere = getattr(record, "local_slopes", None), getattr(record, "sphere", None)
    return SummaryRow(
        path=str(rel), output=str(rel_out), category=entry.category,
        unit=entry.unit or None,  # "replica": contrasts of a replica set (stats/diffusion/replica_sets.py)
        kind=getattr(record, "kind", None), verdict=getattr(record, "verdict", None),
        classification=getattr(record, "classification", None), brownian=getattr(record, "brownian", None),
        msd_exponent=getattr(record, "msd_exponent", None), battery_error=getattr(record, "battery_error", None),
        calibration_shape=getattr(record, "calibration_shape", None),
        window_exponent=slopes.effect.estimate if slopes is not None else None,
        sphere_tensor=sphere.tensor if sphere is not None else None)
