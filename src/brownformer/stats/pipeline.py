"""Pipeline orchestration: stats for one run's trajectories, and the cross-run summary.

Layout (docs/ARTIFACTS.md): traj_dir/index.json lists {"path", "category", "kind", ...}; each
.npy has a sidecar .json. One output JSON per input file is written under out_dir at the same
relative path (".npy" -> ".json"), with the input's sha256; out_dir/summary.json lists them.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from .brownian import analyze_noise, analyze_trajectory
from .claims import brownian_claim, headline_holm, markov_claim, optimizer_claim, sphere_claim
from .markov import analyze_attention
from .results import to_jsonable
from .sphere import sphere_summary
from .trajectory_io import load_trajectory, sha256_file

log = logging.getLogger(__name__)

__all__ = ["stats_for_run", "summarize", "TRAJECTORY_CATEGORIES"]

TRAJECTORY_CATEGORIES = ("depth", "training", "weights")
CLAIM_FAMILIES = {"depth": "3a depth-brownian", "training": "3b training-brownian", "weights": "3c weights-brownian"}


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_jsonable(obj), indent=1, allow_nan=False))


def _load_calibration(calibration):
    if calibration is None or isinstance(calibration, pd.DataFrame):
        return calibration
    p = Path(calibration)
    return pd.read_parquet(p) if p.exists() else None


def _analyze_entry(entry: dict, path: Path, config, calibration) -> dict:
    cat = entry.get("category", "")
    if cat == "attention":
        A = np.load(path, allow_pickle=False)
        side = path.with_suffix(".json")
        meta = json.loads(side.read_text()) if side.exists() else {}
        fpath = path.with_name(path.stem + "_features.npy")
        feats = np.load(fpath, allow_pickle=False) if fpath.exists() else None
        out = analyze_attention(A, features=feats, causal=meta.get("causal"), confidence_level=config.confidence_level,
                                rng=config.seed)
        if feats is not None:
            out["features_input"] = {"path": str(fpath), "sha256": sha256_file(fpath)}
        return out
    if cat == "gradnoise":
        return analyze_noise(np.load(path, allow_pickle=False), confidence_level=config.confidence_level, rng=config.seed)
    X, meta = load_trajectory(path, kind=entry.get("kind"))
    out = analyze_trajectory(X, kind=meta["kind"], times=meta["times"], confidence_level=config.confidence_level,
                             n_resamples=config.n_resamples, alpha=config.alpha, margins=dict(config.margins),
                             max_walkers=config.max_walkers, rng=config.seed, calibration=calibration)
    out["time"] = meta.get("time")
    if cat == "depth":
        d = X.shape[-1]
        is_ln = Path(entry["path"]).name.startswith("ln")
        # depth/ln files hold LN output / sqrt(d); claim 1 is about z = LN output itself
        out["sphere"] = (sphere_summary(X * np.sqrt(d), margins=dict(config.margins)) if is_ln
                         else sphere_summary(X, margins=dict(config.margins)))
    return out


def stats_for_run(traj_dir, out_dir, *, config, run_id: str, calibration=None) -> dict:
    """Analyse every file listed in traj_dir/index.json; write per-file JSON and out_dir/summary.json.

    Args:
        traj_dir: a run's trajectories/ directory.
        out_dir: where to write (e.g. results/runs/<R>/stats).
        config: brownformer.config.StatsConfig.
        run_id: "<model>__<optimizer>__s<seed>".
        calibration: optional calibration table (DataFrame or parquet path) attached to each trajectory result.

    Returns:
        The summary dict also written to out_dir/summary.json.

    Raises:
        ValueError: missing or malformed index.json.
    """
    traj_dir, out_dir = Path(traj_dir), Path(out_dir)
    index_path = traj_dir / "index.json"
    if not index_path.exists():
        raise ValueError(f"{index_path} does not exist")
    try:
        entries = json.loads(index_path.read_text())["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{index_path}: expected {{'files': [...]}} ({exc})") from None
    cal = _load_calibration(calibration)
    files, errors = [], []
    for entry in entries:
        rel = Path(entry["path"])
        path = rel if rel.is_absolute() else traj_dir / rel
        if path.name.endswith("_features.npy"):
            continue  # consumed with its attention file
        rel_out = (path.relative_to(traj_dir) if path.is_relative_to(traj_dir) else Path(path.name)).with_suffix(".json")
        try:
            result = _analyze_entry(entry, path, config, cal)
        except (ValueError, OSError) as exc:
            log.warning("%s: %s", path, exc)
            errors.append({"path": str(rel), "error": str(exc)})
            continue
        result.update({"run_id": run_id, "category": entry.get("category"), "entry": entry,
                       "input": {"path": str(path), "sha256": sha256_file(path)}})
        _write_json(out_dir / rel_out, result)
        row = {"path": str(rel), "output": str(rel_out), "category": entry.get("category")}
        for k in ("kind", "classification", "brownian", "msd_exponent", "diffusion_coefficient"):
            if k in result:
                row[k] = result[k]
        files.append(row)
        log.info("%s: %s", rel, row.get("classification", "done"))
    summary = {"run_id": run_id, "traj_dir": str(traj_dir), "index_sha256": sha256_file(index_path),
               "n_files": len(files), "files": files, "errors": errors}
    _write_json(out_dir / "summary.json", summary)
    return to_jsonable(summary)


def _rows_for(run: str, rel: str, res: dict) -> list[dict]:
    base = {"run": run, "file": rel, "category": res.get("category")}
    rows = []
    for t in res.get("tests", []):
        ci = t.get("ci") or [None, None]
        rows.append({**base, "quantity": t["name"], "estimate": t.get("estimate"), "ci_low": ci[0], "ci_high": ci[1],
                     "p_value": t.get("p_value"), "reject": t.get("reject")})
    for q, v in (res.get("aggregate") or {}).items():
        rows.append({**base, "quantity": q, "estimate": v.get("mean"), "ci_low": v["ci"][0], "ci_high": v["ci"][1],
                     "p_value": None, "reject": None})
    if "classification" in res:
        rows.append({**base, "quantity": "brownian", "estimate": float(res["brownian"]), "ci_low": None, "ci_high": None,
                     "p_value": None, "reject": None})
    return rows


def summarize(run_stats_dirs: dict, calibration_path, out_dir, *, config, metrics_by_run: dict | None = None,
              target_optimizer: str = "adamw", proposed: str = "kfac-iterative") -> dict:
    """Collect every run's outputs into summary.parquet and decide each claim in claims.json.

    Args:
        run_stats_dirs: run_id -> that run's stats directory (with summary.json).
        calibration_path: calibration.parquet (may be missing: verdicts are then uncalibrated).
        out_dir: e.g. results/stats.
        config: StatsConfig.
        metrics_by_run: run_id -> metrics DataFrame for claim 4; default: <stats_dir>/../metrics.parquet.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, fam = [], {"sphere": [], "attention": [], **{c: [] for c in TRAJECTORY_CATEGORIES}}
    metrics = dict(metrics_by_run or {})
    for run, sdir in sorted(run_stats_dirs.items()):
        sdir = Path(sdir)
        summ = json.loads((sdir / "summary.json").read_text())
        for f in summ["files"]:
            res = json.loads((sdir / f["output"]).read_text())
            rows.extend(_rows_for(run, f["path"], res))
            cat = res.get("category")
            if cat in TRAJECTORY_CATEGORIES:
                fam[cat].append({"run": run, "path": f["path"], "result": res})
                if cat == "depth" and Path(f["path"]).name.startswith("ln") and res.get("sphere"):
                    fam["sphere"].append({"run": run, "sphere": res["sphere"]})
            elif cat == "attention":
                fam["attention"].append({"run": run, "attention": res})
        mp = sdir.parent / "metrics.parquet"
        if run not in metrics and mp.exists():
            metrics[run] = pd.read_parquet(mp)
    table = pd.DataFrame(rows, columns=["run", "file", "category", "quantity", "estimate", "ci_low", "ci_high",
                                        "p_value", "reject"])
    table.to_parquet(out_dir / "summary.parquet", index=False)
    claims = {"1": sphere_claim(fam["sphere"]), "2": markov_claim(fam["attention"], margins=None)}
    for cat, name in CLAIM_FAMILIES.items():
        claims[name.split()[0]] = brownian_claim(name, fam[cat], alpha=config.alpha)
    headline_holm(claims)
    claims["4"] = (optimizer_claim(metrics, target_optimizer=target_optimizer, proposed=proposed,
                                   confidence_level=config.confidence_level, rng=config.seed)
                   if metrics else {"claim": "4 optimizer", "verdict": "inconclusive", "reason": "no metrics"})
    cal = _load_calibration(calibration_path)
    result = {"claims": claims, "calibration": {"path": str(calibration_path) if calibration_path else None,
                                                "available": cal is not None,
                                                "sha256": sha256_file(calibration_path) if cal is not None else None},
              "runs": sorted(run_stats_dirs), "n_rows": int(len(table))}
    _write_json(out_dir / "claims.json", result)
    return to_jsonable(result)
