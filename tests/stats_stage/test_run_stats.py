"""One run's statistics on a synthetic trajectories folder laid out as extract writes it, then the
calibration at its files' shapes and the Brownian claims citing it; and the `stats trajectory` CLI."""
import json
import subprocess
import sys

import numpy as np
import pytest

from brownformer.config import DEFAULT_WINDOW, StatsConfig
from brownformer.stats.diffusion.simulate import simulate_batch
from brownformer.stats_stage.stages import calibration_shapes, stats_calibrate, stats_run

# the window from the first capture with every lag (stats_run's default min_lag_steps 0: no momentum time): this
# file tests the calibration plumbing, and the 12-capture fixture keeps too few lags beyond a 10-step momentum time
# to decide its weights file
STATS = StatsConfig(n_resamples=99, calibration_replicates=10, window={**DEFAULT_WINDOW, "start_step": 0})
B, N_TOK, D = 8, 6, 8
STEPS = [0, 1, 2, 4, 8, 16, 32, 40, 64, 80, 100, 120]


def _save(root, rel, X, side):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    np.save(p, X.astype(np.float32))
    if side is not None:
        p.with_suffix(".json").write_text(json.dumps(side))
    return {"path": rel, "category": rel.split("/")[0], "kind": (side or {}).get("kind"), "tensor": "ln",
            "capture": 0}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("run") / "trajectories"
    labels = np.repeat(np.arange(B), N_TOK)
    lr = np.r_[np.linspace(0.1, 1, 5), np.ones(200)] * 0.01  # warm-up, then constant
    clocks = {"step": STEPS, "lr_sum": [float(lr[:s].sum()) for s in STEPS],
              "lr_sq_sum": [float((lr[:s] ** 2).sum()) for s in STEPS]}
    tok = simulate_batch("brownian", times=clocks["lr_sq_sum"], labels=labels, d=D, kind="sphere", replicates=1,
                         rng=1, rho=0.4, hyperplane=True, decay=0.5)[0]
    w = simulate_batch("brownian", times=clocks["lr_sq_sum"], labels=np.arange(16), d=D, kind="euclidean",
                       replicates=1, rng=2)[0]
    s = np.asarray(clocks["lr_sq_sum"]) / clocks["lr_sq_sum"][-1]
    w = w + np.random.default_rng(3).normal(0, 5, (1, 16, D)) * s[:, None, None]  # each row's own drift in the clock
    depth = simulate_batch("brownian", times=np.arange(4.0), labels=labels, d=D, kind="sphere", replicates=1, rng=4,
                           hyperplane=True)[0]
    common = {"n_inputs": B, "n_tokens": N_TOK, "walkers": "probe token", "source": {}}
    files = [
        _save(root, "training/ln_l0.npy", tok, {"kind": "sphere", "time": "lr_sq_sum", "times": clocks["lr_sq_sum"],
                                                 "clocks": clocks, "sum_zero": True, **common}),
        _save(root, "weights/l0_q.npy", w, {"kind": "euclidean", "time": "lr_sq_sum", "times": clocks["lr_sq_sum"],
                                             "clocks": clocks, "drift": "per_walker", "walkers": "row", "source": {}}),
        _save(root, "depth/ln_c0.npy", depth, {"kind": "sphere", "time": "layer", "times": [0, 1, 2, 3], "ln": "pre",
                                                "step": 5, **common}),
        _save(root, "gradnoise/l0_q.npy", np.random.default_rng(5).standard_t(5, (3, 16, 32)),
              {"kind": "euclidean", "time": "step", "times": [0, 5, 10], "walkers": "sample", "source": {}}),
    ]
    (root / "index.json").write_text(json.dumps({"files": files}))
    out = root.parent / "stats"
    summary = stats_run(root, out, stats=STATS, run_id="vit-pre__adamw__s0")
    return root, out, summary


def _read(out, rel):
    return json.loads((out / rel).read_text())


def test_per_file_outputs(run_dir):
    root, out, summary = run_dir
    assert summary.errors == [] and summary.n_files == 4
    tr = _read(out, "training/ln_l0.json")
    assert tr["time"] == "lr_sq_sum" and tr["n_groups"] == B and tr["hyperplane"] and tr["span_dimension"] == D - 1
    assert set(tr["clock_check"]) == {"step", "lr_sum"} and tr["verdict"] in ("brownian", "inconclusive", "not brownian")
    assert tr["input"]["sha256"] and tr["calibration_shape"]["G"] == B
    wt = _read(out, "weights/l0_q.json")
    assert wt["drift_removed"] == "per_walker" and abs(wt["msd_exponent"]["estimate"] - 1) < 0.2
    dp = _read(out, "depth/ln_c0.json")
    assert dp["verdict"] == "inconclusive" and "< 8" in dp["reason"] and dp["sphere"]["tensor"] == "ln_raw"
    hr = next(t for t in dp["tests"] if t["name"] == "harmonic_ratio")  # clock-free: still reported
    assert hr["estimate"] is not None
    assert _read(out, "gradnoise/l0_q.json")["kind"] == "gradient_noise"
    rows = {f.path: f for f in summary.files}
    assert rows["training/ln_l0.npy"].calibration_shape.times[-1] == 1.0


def test_calibration_at_the_files_shapes_and_the_claims_cite_it(run_dir, tmp_path):
    from brownformer.stats.claims.claim3_brownian import brownian_family_claim
    from brownformer.stats_stage.trajectory_io import load_calibration
    root, out, _ = run_dir
    shapes = calibration_shapes([out / "summary.json"])
    rows = json.loads((out / "summary.json").read_text())["files"]
    decided = {r["calibration_shape"]["id"] for r in rows if r.get("verdict") in ("brownian", "not brownian")}
    assert {s.id for s in shapes} == decided and _read(out, "weights/l0_q.json")["calibration_shape"]["id"] in decided
    table = stats_calibrate([out / "summary.json"], tmp_path / "cal.parquet", stats=STATS, replicates=8)
    fitted = {r["shape_id"] for r in table.to_dict("records") if r["process"] == "fitted"}
    n_decided_files = sum(r.get("verdict") in ("brownian", "not brownian") for r in rows)
    assert set(table["shape_id"]) - fitted == decided and len(fitted) == n_decided_files  # one fitted null per file
    wq = _read(out, "weights/l0_q.json")
    assert wq["fitted_null"]["id"] in fitted or wq["verdict"] == "inconclusive"
    files = [{"run": "vit-pre__adamw__s0", "path": "weights/l0_q.npy", "result": wq}]
    written = load_calibration(tmp_path / "cal.parquet")
    claim = brownian_family_claim("3c", files, STATS, calibration=written)
    run = claim.per_run["vit-pre__adamw__s0"]
    assert run.calibration.n_replicates == 8 and run.calibration.shape_id in set(table["shape_id"])
    assert run.details.pooling.rule and claim.details.rule_history
    assert claim.calibration is not None and claim.verdict in ("supported", "not supported", "inconclusive")
    uncalibrated = brownian_family_claim("3c", files, STATS, calibration=None)
    assert uncalibrated.verdict != "supported" and uncalibrated.per_run["vit-pre__adamw__s0"].calibration is None
    excluded = brownian_family_claim("3c", files, STATS, calibration=written,
                                     excluded={"vit-pre__adamw__s0": "diverged"})
    assert excluded.per_run["vit-pre__adamw__s0"].verdict == "did not train" and excluded.verdict == "inconclusive"


def test_stats_trajectory_cli(tmp_path):
    X = simulate_batch("brownian", times=np.arange(10.0), labels=np.arange(20), d=3, kind="euclidean",
                       replicates=1, rng=0)[0]
    np.save(tmp_path / "x.npy", X)
    cmd = [sys.executable, "-m", "brownformer.cli", "stats", "trajectory"]
    ok = subprocess.run(cmd + [str(tmp_path / "x.npy"), "--out", str(tmp_path / "x.json")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    out = json.loads((tmp_path / "x.json").read_text())
    assert out["verdict"] in ("brownian", "inconclusive", "not brownian") and out["brownian"] == (out["verdict"] == "brownian")
    np.save(tmp_path / "small.npy", X[:, :3])
    bad = subprocess.run(cmd + [str(tmp_path / "small.npy"), "--out", str(tmp_path / "s.json")], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "4 walkers" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s.json").exists()


def test_after_affine_depth_file_is_paired_with_its_raw_layernorm_file(tmp_path):
    """depth/lnaff_c<k> gets gamma and beta from depth/ln_c<k> (stored / sqrt(d)) and is measured about beta."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, B * N_TOK, D))
    z = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
    gamma, beta = np.linspace(0.5, 1.5, D), 0.2 * rng.standard_normal(D)
    common = {"time": "layer", "times": [0, 1], "ln": "pre", "step": 50, "n_inputs": B, "n_tokens": N_TOK,
              "walkers": "probe token", "source": {}}
    files = [_save(tmp_path, "depth/ln_c1.npy", z / np.sqrt(D), {"kind": "sphere", **common}),
             _save(tmp_path, "depth/lnaff_c1.npy", z * gamma + beta, {"kind": "euclidean", **common})]
    files[1]["tensor"] = "ln_affine"
    (tmp_path / "index.json").write_text(json.dumps({"files": files}))
    stats_run(tmp_path, tmp_path / "stats", stats=STATS, run_id="vit-pre__adamw__s0")
    sphere = json.loads((tmp_path / "stats" / "depth" / "lnaff_c1.json").read_text())["sphere"]
    np.testing.assert_allclose(sphere["affine_map"]["gamma"], np.broadcast_to(gamma, (2, D)), atol=1e-4)
    np.testing.assert_allclose(sphere["affine_map"]["beta"], np.broadcast_to(beta, (2, D)), atol=1e-4)
    assert sphere["about"]["centre"] == "given"


def test_a_copied_results_folder_still_finds_its_trajectories(run_dir, tmp_path, monkeypatch):
    """summary.json names its trajectories relative to itself, so a run folder copied elsewhere (a replication's
    results compared in another folder) is calibrated from any working directory; a summary written before that
    (relative to the writer's working directory) still resolves from there."""
    import shutil
    from pathlib import Path

    from brownformer.stats_stage.stages import decided_files
    root, out, _ = run_dir
    assert json.loads((out / "summary.json").read_text())["traj_dir"] == "../trajectories"
    moved = tmp_path / "copy" / "run"
    shutil.copytree(root.parent, moved)
    monkeypatch.chdir(tmp_path)
    files = decided_files([moved / "stats" / "summary.json"])
    assert files and all(Path(p).is_file() and (moved / "trajectories") in Path(p).parents for _, p, *_ in files)
    old = json.loads((moved / "stats" / "summary.json").read_text())
    old["traj_dir"] = "copy/run/trajectories"  # the old layout: relative to the writer's working directory
    (tmp_path / "old_summary.json").write_text(json.dumps(old))
    paths = [Path(p) for _, p, *_ in decided_files([tmp_path / "old_summary.json"])]
    assert paths and all(p.is_file() for p in paths)
