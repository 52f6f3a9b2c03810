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

from brownformer.io import atomic_path, write_json

from .brownian import analyze_noise, analyze_trajectory
from .claims import brownian_claim, headline_holm, markov_claim, optimizer_claim, sphere_claim
from .markov import QUANTITIES, _broadcast_features, analyze_attention, attention_null_models
from .results import to_jsonable
from .sphere import tensor_sphere_summary
from .trajectory_io import load_trajectory, sha256_file

log = logging.getLogger(__name__)

__all__ = ["stats_for_run", "summarize", "TRAJECTORY_CATEGORIES"]

TRAJECTORY_CATEGORIES = ("depth", "training", "weights")
CLAIM_FAMILIES = {"depth": "3a depth-brownian", "training": "3b training-brownian", "weights": "3c weights-brownian"}


def _write_json(path: Path, obj) -> None:
    """Atomic JSON write (brownformer.io); result objects and numpy values made plain first."""
    write_json(path, to_jsonable(obj))


def _load_calibration(calibration):
    if calibration is None or isinstance(calibration, pd.DataFrame):
        return calibration
    p = Path(calibration)
    return pd.read_parquet(p) if p.exists() else None


def _depth_tensor(entry: dict, path: Path) -> str:
    """Which claim-1 tensor a depth file holds: "ln_raw", "ln_affine" or "resid" (index tensor, else file name)."""
    tensor, name = entry.get("tensor"), path.name
    if tensor == "ln_affine" or name.startswith("lnaff"):
        return "ln_affine"
    if tensor == "ln" or (tensor is None and name.startswith("ln")):
        return "ln_raw"
    return "resid"


def _read_sidecar(path: Path) -> dict:
    side = path.with_suffix(".json")
    if not side.exists():
        return {}
    try:
        return json.loads(side.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{side}: invalid JSON ({exc})") from None


def _sphere_part(entry: dict, path: Path, config) -> dict:
    """Claim 1 on one depth file, independent of the battery (works for any number of layers)."""
    X = np.load(path, allow_pickle=False)
    if X.ndim != 3:
        raise ValueError(f"{path}: depth file must be (layers, walkers, d), got shape {X.shape}")
    meta = _read_sidecar(path)
    tensor = _depth_tensor(entry, path)
    z = X.astype(np.float64)
    if tensor == "ln_raw":  # depth/ln files hold LN output / sqrt(d); claim 1 is about z = LN output itself
        z = z * np.sqrt(X.shape[-1])
    out = tensor_sphere_summary(z, tensor=tensor, margins=dict(config.margins), n_inputs=meta.get("n_inputs"),
                                n_tokens=meta.get("n_tokens"), confidence_level=config.confidence_level,
                                n_resamples=min(config.n_resamples, 999), rng=config.seed)
    out.update({"ln": meta.get("ln"), "step": meta.get("step"), "capture": entry.get("capture"),
                "times": meta.get("times") or list(range(X.shape[0]))})
    return out


def _analyze_depth(entry: dict, path: Path, config, calibration) -> dict:
    sphere = _sphere_part(entry, path, config)
    if sphere["tensor"] == "ln_affine":  # claim 1 only: not one of the Brownian families
        out = {"kind": entry.get("kind") or "euclidean", "battery": "not run: after-affine LN output is analysed "
               "for claim 1 only"}
    else:
        try:
            out = _analyze_trajectory_file(entry, path, config, calibration)
        except ValueError as exc:  # e.g. T < 3 for a 2-layer model: keep the sphere part
            log.info("%s: battery skipped (%s)", path, exc)
            out = {"kind": entry.get("kind"), "battery_error": str(exc)}
    out["sphere"] = sphere
    return out


def _analyze_trajectory_file(entry: dict, path: Path, config, calibration) -> dict:
    X, meta = load_trajectory(path, kind=entry.get("kind"))
    out = analyze_trajectory(X, kind=meta["kind"], times=meta["times"], confidence_level=config.confidence_level,
                             n_resamples=config.n_resamples, alpha=config.alpha, margins=dict(config.margins),
                             max_walkers=config.max_walkers, rng=config.seed, calibration=calibration)
    out["time"] = meta.get("time")
    return out


#: null models are recomputed on at most this many matrices (seeded subsample) to keep the stage fast
MAX_NULL_MATRICES = 128
#: per-matrix quantities compared between a capture and the initialisation-time attention
INIT_QUANTITIES = (*QUANTITIES, "vmf_kappa", "vmf_explained")


def _load_attention(path: Path):
    A = np.load(path, allow_pickle=False)
    meta = _read_sidecar(path)
    fpath = path.with_name(path.stem + "_features.npy")
    feats = np.load(fpath, allow_pickle=False) if fpath.exists() else None
    return A, meta, feats, fpath


def _null_subsample(A: np.ndarray, feats, rng: np.random.Generator):
    """At most MAX_NULL_MATRICES matrices (and their features), flattened to (k, n, n) and (k, n, d)."""
    n = A.shape[-1]
    flat = A.reshape(-1, n, n)
    F = None if feats is None else _broadcast_features(feats, A.shape).reshape(-1, n, np.shape(feats)[-1])
    idx = np.arange(flat.shape[0])
    if idx.size > MAX_NULL_MATRICES:
        idx = np.sort(rng.choice(idx.size, MAX_NULL_MATRICES, replace=False))
    return flat[idx], (None if F is None else np.ascontiguousarray(F[idx])), idx


def _paired_difference(cur: dict, init: dict, shape: list, *, confidence_level: float, rng, n_resamples=999) -> dict:
    """Mean per-matrix difference (this capture - initialisation) of each quantity, matrices paired by
    position (layer, head, input); percentile bootstrap over probe inputs (axis -3 of the attention)."""
    lead = tuple(shape[:-2])
    out = {}
    for q in INIT_QUANTITIES:
        if q not in cur.get("per_matrix", {}) or q not in init.get("per_matrix", {}):
            continue
        a = np.array([np.nan if v is None else v for v in cur["per_matrix"][q]], float)
        b = np.array([np.nan if v is None else v for v in init["per_matrix"][q]], float)
        if a.shape != b.shape or not np.isfinite(a - b).any():
            continue
        diff = (a - b).reshape(lead) if len(lead) >= 1 else (a - b)
        units = np.nanmean(diff.reshape(-1, lead[-1]), axis=0) if len(lead) >= 2 else diff.ravel()
        units = units[np.isfinite(units)]
        est = float(np.nanmean(a - b))
        if units.size >= 3 and np.ptp(units) > 0:
            from scipy.stats import bootstrap
            ci = bootstrap((units,), np.mean, n_resamples=n_resamples, confidence_level=confidence_level,
                           method="percentile", rng=rng).confidence_interval
            ci = [float(ci.low), float(ci.high)]
        else:
            ci = [est, est]
        out[q] = {"capture_mean": float(np.nanmean(a)), "init_mean": float(np.nanmean(b)), "difference": est,
                  "ci": ci, "n_units": int(units.size)}
    return {"quantities": out, "unit": "probe input" if len(lead) >= 2 else "matrix",
            "method": "mean of paired per-matrix differences (capture - step 0); percentile bootstrap CI"}


def _analyze_attention_file(path: Path, config, init: dict | None) -> dict:
    """analyze_attention plus null models: row-shuffled and shuffled-key statistics on a subsample, and
    the step-0 attention of the same run (`init`: {"path", "result"}) with paired differences."""
    A, meta, feats, fpath = _load_attention(path)
    is_init = init is not None and Path(init["path"]) == path
    out = (dict(init["result"]) if is_init else
           analyze_attention(A, features=feats, causal=meta.get("causal"), confidence_level=config.confidence_level,
                             rng=config.seed))
    if feats is not None:
        out["features_input"] = {"path": str(fpath), "sha256": sha256_file(fpath)}
    out["step"] = meta.get("step")
    rng = np.random.default_rng(config.seed)
    sub_A, sub_F, idx = _null_subsample(A, feats, rng)
    nulls = attention_null_models(sub_A, features=sub_F, rng=rng)
    nulls_info = {"n_matrices": int(idx.size), "of": int(out["n_matrices"]),
                  "row_shuffled": "each row's weights permuted (random Markov matrix with the same row laws)",
                  "shuffled_keys": "vMF fit with key features permuted across tokens"}
    if init is not None and not is_init:
        nulls["init"] = init["result"]["aggregate"]
        nulls_info["init"] = f"attention at step 0 ({init['path']})"
        out["init_comparison"] = _paired_difference(out, init["result"], out["shape"],
                                                    confidence_level=config.confidence_level, rng=rng)
    out["null_models"] = nulls
    out["null_models_info"] = nulls_info
    return out


def _init_attention(entries: list, traj_dir: Path, config) -> dict | None:
    """The run's attention at step 0 (sidecar "step" == 0), analysed once: {"path", "result"} or None."""
    for entry in entries:
        rel = Path(entry["path"])
        path = rel if rel.is_absolute() else traj_dir / rel
        if entry.get("category") != "attention" or path.name.endswith("_features.npy") or not path.exists():
            continue
        if _read_sidecar(path).get("step") == 0:
            try:
                A, meta, feats, _ = _load_attention(path)
                return {"path": str(path), "result": analyze_attention(
                    A, features=feats, causal=meta.get("causal"), confidence_level=config.confidence_level, rng=config.seed)}
            except (ValueError, OSError) as exc:
                log.warning("%s: initialisation attention unusable as a null model (%s)", path, exc)
                return None
    return None


def _analyze_entry(entry: dict, path: Path, config, calibration, init_attention: dict | None = None) -> dict:
    cat = entry.get("category", "")
    if cat == "attention":
        return _analyze_attention_file(path, config, init_attention)
    if cat == "gradnoise":
        return analyze_noise(np.load(path, allow_pickle=False), confidence_level=config.confidence_level, rng=config.seed)
    if cat == "depth":
        return _analyze_depth(entry, path, config, calibration)
    return _analyze_trajectory_file(entry, path, config, calibration)


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
    init = _init_attention(entries, traj_dir, config)
    for entry in entries:
        rel = Path(entry["path"])
        path = rel if rel.is_absolute() else traj_dir / rel
        if path.name.endswith("_features.npy"):
            continue  # consumed with its attention file
        rel_out = (path.relative_to(traj_dir) if path.is_relative_to(traj_dir) else Path(path.name)).with_suffix(".json")
        try:
            result = _analyze_entry(entry, path, config, cal, init)
        except (ValueError, OSError) as exc:
            log.warning("%s: %s", path, exc)
            errors.append({"path": str(rel), "error": str(exc)})
            continue
        result.update({"run_id": run_id, "category": entry.get("category"), "entry": entry,
                       "input": {"path": str(path), "sha256": sha256_file(path)}})
        _write_json(out_dir / rel_out, result)
        row = {"path": str(rel), "output": str(rel_out), "category": entry.get("category")}
        for k in ("kind", "classification", "brownian", "msd_exponent", "diffusion_coefficient", "battery_error"):
            if k in result:
                row[k] = result[k]
        if "sphere" in result:
            row["sphere_tensor"], row["sphere_verdict"] = result["sphere"]["tensor"], result["sphere"]["verdict"]
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


_RULES = {
    "1 sphere": "a run is supported when at least 99% of its LayerNorm outputs (before the affine map, captures "
                "after initialisation) lie within the radius and hyperplane margins; LayerNorm's eps pulls "
                "low-variance tokens below radius 0.99",
    "2 markov": "a run is supported when the isotropic vMF kernel explains at least half of the attention's KL "
                "and the chain is reversible within the margin",
    "4 optimizer": "supported when iterative K-FAC's steps and seconds to the target lie below every baseline's "
                   "(bootstrap CIs over seeds)",
}


def _verdict_reason(claim: dict) -> str:
    """One sentence on how the headline verdict follows from the per-run verdicts (shown in the report)."""
    per_run = claim.get("per_run") or claim.get("per_model") or {}
    counts: dict[str, int] = {}
    for rec in per_run.values():
        v = rec.get("verdict") if isinstance(rec, dict) else None
        if v:
            counts[v] = counts.get(v, 0) + 1
    parts = [f"{n} {v}" for v, n in sorted(counts.items())]
    unit = "models" if "per_model" in claim and "per_run" not in claim else "runs"
    text = f"Per-{unit[:-1]} verdicts: {', '.join(parts)}" if parts else ""
    rule = next((r for k, r in _RULES.items() if str(claim.get("claim", "")).startswith(k)), None)
    if rule is None and str(claim.get("claim", "")).startswith("3"):
        rule = ("a run is supported when its trajectories are classified Brownian (every test inside its "
                "equivalence margin, BH within the family) and the calibration shows power >= 0.9 at that shape")
    return "; ".join(x for x in (text, f"rule: {rule}" if rule else "") if x)


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
                if "tests" in res:  # files too short for the battery carry "battery_error" instead
                    fam[cat].append({"run": run, "path": f["path"], "result": res})
                if cat == "depth" and res.get("sphere"):
                    if "tensor" not in res["sphere"]:  # written before after-affine files existed
                        res["sphere"]["tensor"] = _depth_tensor(res.get("entry") or {}, Path(f["path"]))
                    fam["sphere"].append({"run": run, "path": f["path"], "sphere": res["sphere"],
                                          "capture": (res.get("entry") or {}).get("capture")})
            elif cat == "attention":
                fam["attention"].append({"run": run, "attention": res})
        mp = sdir.parent / "metrics.parquet"
        if run not in metrics and mp.exists():
            metrics[run] = pd.read_parquet(mp)
    table = pd.DataFrame(rows, columns=["run", "file", "category", "quantity", "estimate", "ci_low", "ci_high",
                                        "p_value", "reject"])
    with atomic_path(out_dir / "summary.parquet") as tmp:
        table.to_parquet(tmp, index=False)
    claims = {"1": sphere_claim(fam["sphere"]), "2": markov_claim(fam["attention"], margins=None)}
    for cat, name in CLAIM_FAMILIES.items():
        claims[name.split()[0]] = brownian_claim(name, fam[cat], alpha=config.alpha)
    headline_holm(claims)
    claims["4"] = (optimizer_claim(metrics, target_optimizer=target_optimizer, proposed=proposed,
                                   confidence_level=config.confidence_level, rng=config.seed)
                   if metrics else {"claim": "4 optimizer", "verdict": "inconclusive", "reason": "no metrics"})
    for claim in claims.values():
        claim.setdefault("reason", _verdict_reason(claim))
    cal = _load_calibration(calibration_path)
    result = {"claims": claims, "calibration": {"path": str(calibration_path) if calibration_path else None,
                                                "available": cal is not None,
                                                "sha256": sha256_file(calibration_path) if cal is not None else None},
              "runs": sorted(run_stats_dirs), "n_rows": int(len(table))}
    _write_json(out_dir / "claims.json", result)
    return to_jsonable(result)
