"""A small fake results tree in the layout of docs/ARTIFACTS.md, for the figures and report tests.

Numbers are simulated (fixed seeds) and only need the right shapes and plausible ranges. The per-run
statistics are built with the constructors of their contract (brownformer.statsfile), not copied by hand.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd

from brownformer.config import from_dict
from brownformer.io import write_json
from brownformer.statsfile import (AttentionStats, BatterySettings, BatteryStats, EffectResult, Envelope, EuclideanCurves,
                                   Keyed, KeyedValue, LocalSlopes, NoiseCapture,
                                   NoiseStats, RunStatsSummary, SlopeWindow, SphereStats, SphereSummary, SummaryRow,
                                   LayerValues, WalkerReading, WalkerType, WindowRuleNull)
from brownformer.statsfile import ByQuantity, MatrixAggregate, NullModels, QuantityAggregates
from brownformer.verdicts import ClaimRecord, ClaimsFile

RAW_CONFIG = {
    "seeds": [0, 1],
    "device": "cpu",
    "datasets": {"digits": {"source": "digits"}, "pydoc": {"source": "pydoc"}},
    "models": {
        "vit-pre": {"arch": "vit", "dataset": "digits", "ln": "pre", "d_model": 8, "n_layers": 2, "n_heads": 2},
        "lm-pre": {"arch": "lm", "dataset": "pydoc", "ln": "pre", "d_model": 8, "n_layers": 2, "n_heads": 2,
                   "seq_len": 8},
    },
    "optimizers": {"adamw": {"type": "adamw", "lr": 0.003},
                   "kfac-iterative": {"type": "kfac-iterative", "lr": 0.05, "damping": 0.003}},
    "grid": [{"models": ["vit-pre"], "optimizers": ["adamw", "kfac-iterative"]},
             {"models": ["lm-pre"], "optimizers": ["adamw"]}],
    "train": {"steps": 40, "batch_size": 8, "eval_every": 10, "log_every": 5},
    "report": {"title": "fake replication"},
    "probes": {}, "stats": {}, "resources": {},
}

D, L, N, T = 8, 2, 6, 7
DID_NOT_TRAIN_RUN = "lm-pre__adamw__s1"


def fake_config():
    return from_dict(RAW_CONFIG, source="fake")


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def _metrics(kind: str, optimizer: str, seed: int, rng) -> pd.DataFrame:
    rate = 0.08 if optimizer.startswith("kfac") else 0.05
    rows = []
    for step in range(5, 45, 5):
        loss = 2.3 * np.exp(-rate * step) + 0.1 + 0.02 * rng.random()
        row = {"step": step, "epoch": step / 100, "lr": 0.003, "lr_sum": 0.003 * step, "train_loss": loss,
               "val_loss": np.nan, "val_accuracy": np.nan, "val_bpc": np.nan,
               "wall_time": step * (0.05 if optimizer.startswith("kfac") else 0.03) + 0.01 * seed,
               "examples_per_s": 100.0}
        if step % 10 == 0:
            row["val_loss"] = loss + 0.05
            if kind == "image":
                row["val_accuracy"] = 1 - np.exp(-rate * step) * 0.9
            else:
                row["val_bpc"] = (loss + 0.05) / np.log(2)
        if optimizer.startswith("kfac"):
            row.update(opt_time_factors=0.004, opt_time_inverse=0.006, opt_time_apply=0.002, opt_cg_iters=4.0)
        rows.append(row)
    return pd.DataFrame(rows)


def _sphere_walk(T_, N_, d, rng, step=0.3):
    u = rng.standard_normal((N_, d))
    u /= np.linalg.norm(u, axis=-1, keepdims=True)
    out = [u]
    for _ in range(T_ - 1):
        u = u + step * rng.standard_normal((N_, d)) / np.sqrt(d)
        u /= np.linalg.norm(u, axis=-1, keepdims=True)
        out.append(u)
    return np.stack(out)


def _traj(root: Path, rel: str, X: np.ndarray, kind: str, time: str, times) -> dict:
    path = root / "trajectories" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, X.astype(np.float32))
    _write_json(path.with_suffix(".sidecar.json"), {"kind": kind, "time": time, "times": list(times),
                                            "walkers": "probe token", "source": {}})
    return {"path": rel, "category": rel.split("/")[0], "kind": kind, "time": time}


def _battery(kind: str, rng, *, brownian: bool, run: str, entry: dict) -> BatteryStats:
    """One battery file, built with the contract's constructors (a contract change breaks this at once)."""
    exponent = 1.0 + 0.05 * rng.standard_normal() if brownian else 0.6

    def test(name, est, lo, hi, null):
        return EffectResult(name, statistic=0.3, pvalue=0.4, estimate=est, confidence_interval=(lo, hi),
                          null_value=null, method="fake", n=N, rejected=False)

    tests = [test("msd_exponent", exponent, exponent - 0.1, exponent + 0.1, 1.0),
             test("variance_ratio", 1.02, 0.9, 1.15, 1.0), test("hurst", 0.52, 0.44, 0.6, 0.5),
             test("tail_index", 0.97, 0.85, 1.1, 1.0)]
    tau = np.geomspace(0.01, 1.0, T - 1)
    local = exponent + 0.05 * rng.standard_normal(T - 1)
    effect = EffectResult.effect(exponent, (exponent - 0.1, exponent + 0.1), (exponent - 0.08, exponent + 0.08), 0.4,
                                 margin=(0.9, 1.1), key=True, null=WindowRuleNull(0.04, 0.9, 19, [0.9, 1.0, 1.1], "fake"))
    window = LocalSlopes(classification="brownian" if brownian else "crossover", description="fake", effect=effect,
                         window=SlopeWindow(start_index=1, used_indices=list(range(2, T)), n_points=T - 1,
                                            start_step=5, min_lag_steps=5, start_clock=0.01, why="fake"),
                         tau=tau.tolist(), local_slope=local.tolist(), curve=(tau**exponent).tolist(),
                         envelope=Envelope(low=(0.8 + 0 * tau).tolist(), median=(1 + 0 * tau).tolist(),
                                           high=(1.2 + 0 * tau).tolist(), n_replicates=19, level=0.95))
    walkers = WalkerReading("brownian-like", "fake", rates="spread",
                            by_type=Keyed.of(WalkerType(3, [exponent - 0.3, exponent - 0.1, exponent, exponent + 0.1,
                                                            exponent + 0.3], [0.1, 0.2, 0.3, 0.4, 0.5], token_type=t)
                                             for t in ("cls", "patch")))
    verdict = "brownian" if brownian else "not brownian"
    return BatteryStats(
        kind=kind, n_times=T, n_walkers=N, n_walkers_total=N, n_groups=N, dim=D, span_dimension=D, hyperplane=False,
        times=list(range(T)), drift_removed="common", tests=tests,
        effects=Keyed.of([dataclasses.replace(effect, name="msd_exponent")]),
        msd_exponent=EffectResult.effect(exponent, (exponent - 0.1, exponent + 0.1), (exponent - 0.08, exponent + 0.08)),
        diffusion_coefficient=EffectResult.effect(0.01, (0.008, 0.012)), key_effects=["msd_exponent"], verdict=verdict,
        reason="fake", brownian=brownian, classification="brownian" if brownian else "subdiffusive", flags=[],
        within_group_correlation=0.0, calibration_shape={},
        curves=EuclideanCurves(msd=(tau**exponent).tolist(), tau=tau.tolist(), early_slope=exponent, late_slope=exponent),
        settings=BatterySettings(0.95, 0.05, 0.9, 19, N, KeyedValue.mapping({"msd_exponent": [0.9, 1.1]}), "fake"),
        calibration=None,
        local_slopes=window, walkers=walkers, time="lr_sq_sum", run_id=run, category=entry["category"], entry=entry)


def _sphere(tensor: str, radius_spread_ratio: list | None = None) -> SphereSummary:
    """A sphere summary of 3 layers of random tokens (the producer's record), its ratios set where given."""
    from brownformer.stats.sphere.sphere_distance import tensor_sphere_summary
    s = tensor_sphere_summary(np.random.default_rng(0).standard_normal((3, 12, 4)), tensor=tensor, n_resamples=9)
    if radius_spread_ratio is not None:
        ratio = LayerValues(radius_spread_ratio, radius_spread_ratio, radius_spread_ratio)
        layers = dataclasses.replace(s.about.per_layer, radius_spread_ratio=ratio)
        s = dataclasses.replace(s, about=dataclasses.replace(s.about, per_layer=layers))
    return dataclasses.replace(s, step=40, capture=0)


def _attention_stats(rng, run: str) -> AttentionStats:
    """Attention statistics (stats/markov/markov_chain.py analyze_attention + null models) from the contract's constructor."""
    shape = [L, 2, 2, 4, 4]
    n_mat = L * 2 * 2
    per = {k: (base + 0.05 * rng.standard_normal(n_mat)).tolist() for k, base in
           {"spectral_gap": 0.6, "stationary_entropy": 1.3, "reversibility_residual": 0.2, "dobrushin": 0.4,
            "vmf_output_error": 0.7}.items()}
    agg = {k: MatrixAggregate(mean=float(np.mean(v)), confidence_interval=[float(np.min(v)), float(np.max(v))],
                              median=float(np.median(v)), sd=float(np.std(v)), n=n_mat) for k, v in per.items()}
    shuffled = {k: dataclasses.replace(v, mean=v.mean * 1.2) for k, v in agg.items()}
    return AttentionStats(shape=shape, n_matrices=n_mat, n=4, causal=False, per_matrix=ByQuantity(**per),
                          aggregate=QuantityAggregates(**agg),
                          null_models=NullModels(row_shuffled=QuantityAggregates(**shuffled)),
                          run_id=run, category="attention", entry={"path": "attention/c0.npy", "category": "attention"})


def _noise_stats(run: str) -> NoiseStats:
    tail = EffectResult("tail_index", statistic=0.9, pvalue=0.3, estimate=0.9, confidence_interval=(0.8, 1.0))
    return NoiseStats(kind="gradient_noise", n_captures=3, n_samples=16, n_params=D, run_id=run, category="gradnoise",
                      per_capture=[NoiseCapture(c, 128, excess_kurtosis=1.0, tail_index=tail) for c in range(3)])


def _write_run_stats(run_dir: Path, run: str, files: list[dict], rng) -> None:
    """runs/<run>/stats/: every per-file statistics file and summary.json, through brownformer.statsfile."""
    stats = {}
    for f in files:
        if f["category"] == "gradnoise":
            stats[f["path"]] = _noise_stats(run)
        else:
            stats[f["path"]] = _battery(f["kind"], rng, brownian=f["category"] != "depth", run=run, entry=f)
    stats["depth/ln_c0.npy"] = dataclasses.replace(stats["depth/ln_c0.npy"], sphere=_sphere("ln_raw"))
    stats["depth/lnaff_c0.npy"] = SphereStats(
        sphere=_sphere("ln_affine", radius_spread_ratio=[0.2, 0.4, 0.3]), kind="euclidean", run_id=run,
        battery="not run: the after-affine LN output is analysed for claim 1 only", category="depth")
    stats["attention/c0.npy"] = _attention_stats(rng, run)
    rows = []
    for rel, obj in stats.items():
        out = Path(rel).with_suffix(".json")
        write_json(run_dir / "stats" / out, obj.to_dict())
        rows.append(SummaryRow(rel, str(out), obj.category, verdict=getattr(obj, "verdict", None)))
    write_json(run_dir / "stats" / "summary.json", RunStatsSummary(
        run_id=run, traj_dir=str(run_dir / "trajectories"), index_sha256="0" * 64, n_files=len(rows), files=rows,
        errors=[]).to_dict())


def build_fake_results(root: Path, *, with_stats: bool = True) -> Path:
    """Write runs/<run>/{metrics.parquet,manifest.json,trajectories,stats}, stats/*, benchmarks/ under root."""
    cfg = fake_config()
    rng = np.random.default_rng(0)
    for spec in cfg.runs():
        run = root / "runs" / spec.run_id
        run.mkdir(parents=True, exist_ok=True)
        kind = "image" if spec.model.startswith("vit") else "text"
        _metrics(kind, spec.optimizer, spec.seed, rng).to_parquet(run / "metrics.parquet", index=False)
        _write_json(run / "manifest.json", {
            "run_id": spec.run_id, "config_hash": cfg.hash, "git": {"sha": "0123456789abcdef", "dirty": True},
            "versions": {"python": "3.11.7", "torch": "2.13.0", "cuda": None, "numpy": "2.0"},
            "device": {"type": "cpu", "platform": "Linux", "processor": "x86_64", "torch_threads": 1},
            "seeds": {"torch": spec.seed, "data": spec.seed, "split": 0, "probes": 1234},
            "wall_time_s": 1.5, "steps": 40})
        files = []
        depth = _sphere_walk(L + 1, N, D, rng)
        files.append(_traj(run, "depth/ln_c0.npy", depth, "sphere", "layer", range(L + 1)))
        files.append(_traj(run, "depth/resid_c0.npy", depth * 3 + rng.standard_normal(depth.shape) * 0.1,
                           "euclidean", "layer", range(L + 1)))
        steps = [0, 5, 10, 15, 20, 30, 40]
        files.append(_traj(run, "training/ln_l0.npy", _sphere_walk(T, N, D, rng, 0.1), "sphere", "step", steps))
        w = np.cumsum(rng.standard_normal((T, N, D)), axis=0)
        files.append(_traj(run, "weights/l0_q.npy", w, "euclidean", "step", steps))
        files.append(_traj(run, "gradnoise/l0_q.npy", rng.standard_t(4, (3, 16, D)), "euclidean", "step", [0, 20, 40]))
        att = rng.random((L, 2, 2, 4, 4))
        att /= att.sum(-1, keepdims=True)
        (run / "trajectories" / "attention").mkdir(parents=True, exist_ok=True)
        np.save(run / "trajectories" / "attention" / "c0.npy", att)
        _write_json(run / "trajectories" / "index.json", {"files": files})
        if with_stats:
            _write_run_stats(run, spec.run_id, files, rng)
    if with_stats:
        _write_claims(root, cfg)
        bench = root / "benchmarks"
        for rule, job, s in (("train_model", "vit-pre__adamw__s0", 12.5), ("plot_figures", "plot_figures", 3.25)):
            (bench / rule).mkdir(parents=True, exist_ok=True)
            (bench / rule / f"{job}.tsv").write_text(f"s\th:m:s\tmax_rss\n{s}\t0:00:{int(s):02d}\t100.0\n")
    return root


def _write_claims(root: Path, cfg) -> None:
    """claims.json in the verdicts contract (brownformer.verdicts), with one run that did not train."""
    runs = [s.run_id for s in cfg.runs()]
    trained = [r for r in runs if r != DID_NOT_TRAIN_RUN]
    cal = {"shape": {"T": T, "N": N, "d": D, "kind": "sphere"}, "size": 0.045, "size_se": 0.01,
           "power": {"iid_sphere": 0.97, "exponent_0.9": 0.81}, "n_replicates": 400}

    def rec(cid, title, verdict, est=None, margin=None, calibration=None, reason="", per_run=None):
        return ClaimRecord(cid, title, verdict, reason=reason, estimate=est, margin=margin, calibration=calibration,
                           per_run={r: ClaimRecord(cid, title, v) for r, v in (per_run or {}).items()})

    claims = {
        "1": rec("1", "tokens on the sphere", "supported", EffectResult.headline("fraction on the sphere", 1.0, (0.99, 1.0), 0.95),
                 (0.99, 1.01), cal, "every LN output within the margin", {r: "supported" for r in trained}),
        "2": rec("2", "attention is a reversible isotropic kernel", "not supported",
                 EffectResult.headline("reversibility residual", 0.2, (0.15, 0.25), 0.95), (0.0, 0.1), None,
                 "residual CI above the margin", {r: "not supported" for r in trained}),
        "3a": rec("3a", "Brownian over depth", "inconclusive", EffectResult.headline("MSD exponent", 0.7, (0.4, 1.0), 0.9),
                  (0.9, 1.1), cal, "fewer than 8 layers", {r: "inconclusive" for r in trained}),
        "4": rec("4", "iterative K-FAC trains faster", "did not train", reason="the K-FAC runs diverged"),
    }
    claims["4"] = dataclasses.replace(claims["4"], per_model={"vit-pre": ClaimRecord(
        "4", "iterative K-FAC trains faster", "inconclusive", reason="too few seeds for a CI",
        estimate=EffectResult.headline("steps ratio", 0.75, (0.5, 1.1), 0.95), margin=(0.0, 0.75))})
    claims_file = ClaimsFile(claims, did_not_train=[{"run": DID_NOT_TRAIN_RUN, "reason": "diverged: loss NaN at step 20"}],
                             calibration={"available": True}, runs=runs)
    _write_json(root / "stats" / "claims.json", claims_file.to_dict())
    rows = [{"run": r, "file": "depth/ln_c0.npy", "category": "depth", "quantity": "msd_exponent", "estimate": 0.7,
             "ci_low": 0.4, "ci_high": 1.0, "pvalue": 0.2, "rejected": False} for r in runs]
    pd.DataFrame(rows).to_parquet(root / "stats" / "summary.parquet", index=False)
    cal = []  # the layout of brownformer.stats.core.calibration.run_calibration: per-test rows and the rule's row
    for process in ("brownian", "ou", "fbm_0.3", "iid_sphere"):
        null = process == "brownian"
        rates = ({"rate_brownian": 0.9, "rate_not_brownian": 0.04, "rate_inconclusive": 0.06} if null else
                 {"rate_brownian": 0.05, "rate_not_brownian": 0.85, "rate_inconclusive": 0.1})
        common = {"shape_id": "abc123", "process": process, "kind": "sphere", "T": T, "N": N, "d": D,
                  "n_replicates": 400, "role": "size" if null else "power", **rates}
        cal.append({**common, "test": "verdict", "rejection_rate": 1 - rates["rate_brownian"], "goal_met": True})
        for test in ("msd_exponent", "variance_ratio", "hurst", "tail_index"):
            cal.append({**common, "test": test, "rejection_rate": 0.05 if null else 0.9, "goal_met": None})
    pd.DataFrame(cal).to_parquet(root / "stats" / "calibration.parquet", index=False)
