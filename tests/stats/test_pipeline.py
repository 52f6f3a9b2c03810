"""Pipeline on a synthetic trajectories directory laid out as docs/ARTIFACTS.md describes."""
import json

import numpy as np
import pandas as pd
import pytest

from brownformer.config import StatsConfig
from brownformer.stats import optimizer_claim, simulate, stats_for_run, summarize
from brownformer.stats.simulate import spherical_brownian_motion


def _save(root, rel, X, meta):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    np.save(p, X)
    if meta is not None:
        p.with_suffix(".json").write_text(json.dumps(meta))
    return {"path": rel, "category": rel.split("/")[0], "kind": (meta or {}).get("kind"), "time": (meta or {}).get("time"),
            "layer": 0, "tensor": rel.split("/")[1].split("_")[0], "capture": 0}


def _short_depth(root, rng, B=8, n=5, d=8):
    """A 2-layer model's depth files (T = 2: too short for the battery) at capture 1: LN before and after
    the affine, and the residual stream (T = 3)."""
    x = rng.standard_normal((3, B * n, d)) * 2 + 0.5
    z = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    gamma, beta = 1 + 0.5 * rng.standard_normal(d), 0.4 * np.ones(d)
    side = {"time": "layer", "ln": "pre", "step": 7, "n_inputs": B, "n_tokens": n}
    out = [_save(root, "depth/ln_c1.npy", z[:2] / np.sqrt(d), {"kind": "sphere", "times": [0, 1], **side}),
           _save(root, "depth/lnaff_c1.npy", z[:2] * gamma + beta, {"kind": "euclidean", "times": [0, 1], **side}),
           _save(root, "depth/resid_c1.npy", x, {"kind": "euclidean", "times": [0, 1, 2], **side})]
    for e, t in zip(out, ("ln", "ln_affine", "resid")):
        e.update(tensor=t, capture=1)
    return out


@pytest.fixture(scope="module")
def traj_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("run") / "trajectories"
    rng = np.random.default_rng(0)
    U = rng.standard_normal((16, 64, 8))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    A = np.exp(4 * np.einsum("bid,bjd->bij", U, U))
    A2 = np.exp(2 * np.einsum("bid,bjd->bij", U, U))
    A = np.broadcast_to((A / A.sum(-1, keepdims=True))[None, None], (2, 2, 16, 64, 64)).copy()
    A2 = np.broadcast_to((A2 / A2.sum(-1, keepdims=True))[None, None], (2, 2, 16, 64, 64)).copy()
    ln = spherical_brownian_motion(4, 120, 16, diffusion=0.01, rng=1)
    ln = ln - ln.mean(-1, keepdims=True)
    ln /= np.linalg.norm(ln, axis=-1, keepdims=True)  # on the sphere and in the hyperplane
    files = [
        _save(root, "depth/ln_c0.npy", ln, {"kind": "sphere", "time": "layer", "times": [0, 1, 2, 3]}),
        _save(root, "depth/resid_c0.npy", simulate("brownian", 4, 120, 16, rng=2), {"kind": "euclidean", "time": "layer"}),
        _save(root, "training/ln_l0.npy", simulate("brownian", 12, 80, 8, kind="sphere", rng=3),
              {"kind": "sphere", "time": "step", "times": list(range(0, 120, 10))}),
        _save(root, "weights/l0_q.npy", simulate("drift", 12, 32, 16, rng=4), {"kind": "euclidean", "time": "step"}),
        _save(root, "gradnoise/l0_q.npy", rng.standard_t(5, size=(3, 16, 64)), {"kind": "euclidean", "time": "step"}),
        _save(root, "attention/c0.npy", A, {"causal": False, "step": 0}),
        _save(root, "attention/c0_features.npy", np.broadcast_to(U[None], (2, 16, 64, 8)).copy(), None),
        _save(root, "attention/c5.npy", A2, {"causal": False, "step": 5}),
        _save(root, "attention/c5_features.npy", np.broadcast_to(U[None], (2, 16, 64, 8)).copy(), None),
        *_short_depth(root, rng),
    ]
    (root / "index.json").write_text(json.dumps({"files": files}))
    return root


@pytest.fixture(scope="module")
def run_out(traj_dir):
    cfg = StatsConfig(n_resamples=99)
    out = traj_dir.parent / "stats"
    return cfg, out, stats_for_run(traj_dir, out, config=cfg, run_id="vit-pre__adamw__s0")


def test_stats_for_run_writes_mirrored_outputs(run_out, traj_dir):
    cfg, out, summary = run_out
    assert summary["errors"] == [] and summary["n_files"] == 10
    for rel in ("depth/ln_c0.json", "training/ln_l0.json", "weights/l0_q.json", "gradnoise/l0_q.json", "attention/c0.json"):
        res = json.loads((out / rel).read_text())
        assert len(res["input"]["sha256"]) == 64
    depth = json.loads((out / "depth/ln_c0.json").read_text())
    assert depth["sphere"]["verdict"] == "supported" and depth["kind"] == "sphere"
    att = json.loads((out / "attention/c0.json").read_text())
    assert abs(att["aggregate"]["vmf_kappa"]["mean"] - 4) < 1e-2 and att["n_matrices"] == 64
    assert json.loads((out / "weights/l0_q.json").read_text())["classification"] == "superdiffusive"


def _metrics(speed, seed):
    steps = np.arange(0, 200, 10)
    rng = np.random.default_rng(seed)
    loss = 2.0 * np.exp(-speed * steps / 100) + 0.5 + 0.01 * rng.random(steps.size)
    return pd.DataFrame({"step": steps, "wall_time": steps * 0.1, "val_loss": loss})


def test_optimizer_claim_supported_when_clearly_faster():
    runs = {f"m__{o}__s{s}": _metrics(sp, s) for o, sp in (("adamw", 1.0), ("sgd", 0.8), ("kfac-iterative", 3.0))
            for s in range(4)}
    out = optimizer_claim(runs)
    assert out["verdict"] == "supported"
    slow = {k.replace("kfac-iterative", "kfac-iterative"): (_metrics(0.5, i) if "kfac" in k else v)
            for i, (k, v) in enumerate(runs.items())}
    assert optimizer_claim(slow)["verdict"] == "not supported"


def test_summarize_writes_claims(run_out, tmp_path):
    cfg, out, _ = run_out
    res = summarize({"vit-pre__adamw__s0": out}, tmp_path / "missing.parquet", tmp_path / "stats", config=cfg,
                    metrics_by_run={"vit-pre__adamw__s0": _metrics(1.0, 0)})
    claims = json.loads((tmp_path / "stats" / "claims.json").read_text())["claims"]
    assert set(claims) == {"1", "2", "3a", "3b", "3c", "4"}
    assert claims["1"]["verdict"] == "supported"
    assert claims["2"]["verdict"] == "supported"  # exact vMF kernel with symmetric logits
    assert claims["3c"]["verdict"] == "not supported"
    table = pd.read_parquet(tmp_path / "stats" / "summary.parquet")
    assert {"run", "file", "quantity", "estimate", "ci_low", "ci_high", "p_value"} <= set(table.columns)
    assert res["calibration"]["available"] is False


def test_missing_index_refused(tmp_path):
    with pytest.raises(ValueError, match="index.json"):
        stats_for_run(tmp_path, tmp_path / "o", config=StatsConfig(), run_id="a__b__s0")


def test_short_depth_files_keep_their_sphere_part(run_out):
    cfg, out, summary = run_out
    ln = json.loads((out / "depth/ln_c1.json").read_text())
    assert "battery_error" in ln and "tests" not in ln
    assert ln["sphere"]["tensor"] == "ln_raw" and ln["sphere"]["verdict"] == "supported"
    assert ln["sphere"]["ln"] == "pre" and ln["sphere"]["step"] == 7 and ln["sphere"]["geometry"]["n_clusters"] == 8
    aff = json.loads((out / "depth/lnaff_c1.json").read_text())
    assert aff["sphere"]["tensor"] == "ln_affine" and "tests" not in aff
    assert len(aff["sphere"]["ln_affine"]["per_leading"]["radius_mean"]) == 2  # read by the sphere figure
    assert aff["sphere"]["geometry"]["pooled"]["mean_offset"]["ci"][0] > 0.2
    resid = json.loads((out / "depth/resid_c1.json").read_text())
    assert resid["sphere"]["tensor"] == "resid" and "tests" in resid


def test_attention_null_models_and_init(run_out):
    cfg, out, _ = run_out
    init = json.loads((out / "attention/c0.json").read_text())
    assert {"row_shuffled", "shuffled_keys"} <= set(init["null_models"]) and "init" not in init["null_models"]
    later = json.loads((out / "attention/c5.json").read_text())
    assert set(later["null_models"]) == {"row_shuffled", "shuffled_keys", "init"}
    assert later["null_models_info"]["n_matrices"] <= 128
    kappa = later["init_comparison"]["quantities"]["vmf_kappa"]
    assert abs(kappa["difference"] + 2) < 1e-2 and kappa["ci"][1] < 0  # kappa 2 now, 4 at step 0
    assert abs(later["null_models"]["shuffled_keys"]["vmf_kappa"]["mean"]) < 1


def test_claims_per_run_verdicts_and_contrast(run_out, tmp_path):
    cfg, out, _ = run_out
    summarize({"vit-pre__adamw__s0": out}, None, tmp_path, config=cfg,
              metrics_by_run={"vit-pre__adamw__s0": _metrics(1.0, 0)})
    claims = json.loads((tmp_path / "claims.json").read_text())["claims"]
    run = claims["1"]["per_run"]["vit-pre__adamw__s0"]
    assert run["ln"] == "pre" and run["verdict"] == "supported"
    cap = next(c for c in run["captures"] if c["capture"] == 1)
    assert cap["step"] == 7 and len(cap["per_layer"]) == 3  # resid has the extra output time
    assert {"before_affine", "after_affine", "residual"} <= set(cap["per_layer"][0])
    contrast = claims["1"]["contrast"]
    assert contrast["after_affine"]["radius_cv"]["estimate"] > contrast["before_affine"]["radius_cv"]["estimate"]
    for name in ("3a", "3b", "3c"):
        per = claims[name]["per_run"]["vit-pre__adamw__s0"]
        assert per["verdict"] in ("supported", "not supported", "inconclusive") and "effect_size" in per
        assert claims[name]["per_optimizer"]["adamw"]["n_runs"] == 1
    assert claims["3c"]["per_run"]["vit-pre__adamw__s0"]["verdict"] == "not supported"


def test_sphere_claim_not_applicable_without_layernorm():
    from brownformer.stats.claims import sphere_claim
    from brownformer.stats.sphere import tensor_sphere_summary
    z = np.random.default_rng(3).standard_normal((2, 20, 8))
    z *= np.sqrt(8) / np.linalg.norm(z, axis=-1, keepdims=True)  # ln "none": rescaled stream
    sph = {**tensor_sphere_summary(z, tensor="ln_raw", n_resamples=49), "ln": "none"}
    out = sphere_claim([{"run": "vit-none__sgd__s0", "sphere": sph, "capture": 0}])
    assert out["per_run"]["vit-none__sgd__s0"]["verdict"] == "not applicable"
    assert out["verdict"] == "inconclusive" and out["not_applicable"] == ["vit-none__sgd__s0"] and "reason" in out
