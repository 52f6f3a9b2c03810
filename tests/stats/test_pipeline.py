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


@pytest.fixture(scope="module")
def traj_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("run") / "trajectories"
    rng = np.random.default_rng(0)
    U = rng.standard_normal((16, 64, 8))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    A = np.exp(4 * np.einsum("bid,bjd->bij", U, U))
    A = np.broadcast_to((A / A.sum(-1, keepdims=True))[None, None], (2, 2, 16, 64, 64)).copy()
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
        _save(root, "attention/c0.npy", A, {"causal": False}),
        _save(root, "attention/c0_features.npy", np.broadcast_to(U[None], (2, 16, 64, 8)).copy(), None),
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
    assert summary["errors"] == [] and summary["n_files"] == 6
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
