"""Replicas: same initialisation, other data order; their contrasts remove any shared drift exactly."""
import dataclasses
import json
import math

import numpy as np
import pytest
from scipy.linalg import helmert

from brownformer.config import RunSpec
from brownformer.data import draw_batch, load_prepared
from brownformer.probes.capture import MATRICES
from brownformer.probes.capture_store import CaptureStore
from brownformer.probes.replicas import extract_replicas, replica_contrasts, replica_mean
from brownformer.io import to_jsonable
from brownformer.stats.diffusion.brownian import trajectory_battery
from brownformer.train import train_run

R = 4
REPLICAS = {"replicas": [{"models": ["vit-pre"], "optimizers": ["adamw"], "count": R}]}


@pytest.fixture(scope="module")
def replica_set(config_of, image_dir, tmp_path_factory):
    # momentum_times 0.2: the 12-step test run keeps captures from step 2 on, spaced >= 2 steps
    cfg = config_of(**REPLICAS)
    cfg = dataclasses.replace(cfg, stats=dataclasses.replace(cfg.stats, momentum_times=0.2))
    root = tmp_path_factory.mktemp("replicas")
    reps = cfg.replica_sets()["vit-pre__adamw__s0"]
    for spec in reps:
        train_run(cfg, spec.run_id, image_dir, root / spec.run_id, probes=True, progress=False)
    out = root / "set" / "trajectories"
    summary = extract_replicas(cfg, "vit-pre__adamw__s0", [root / r.run_id for r in reps], out)
    return cfg, root, reps, out, summary


def test_replicas_share_the_initialisation_and_differ_in_data_order(replica_set, image_dir):
    cfg, root, reps, _, _ = replica_set
    first = [CaptureStore(root / r.run_id / "probes").load(0) for r in reps]  # capture 0: before any update
    for cap in first[1:]:
        np.testing.assert_array_equal(cap["weights"], first[0]["weights"])
        np.testing.assert_array_equal(cap["ln_hat"], first[0]["ln_hat"])
    assert len({r.data_seed for r in reps}) == R and reps[0].data_seed == reps[0].seed
    data = load_prepared(image_dir)
    batches = [draw_batch(data, "train", step=0, seed=r.data_seed, batch_size=cfg.train.batch_size).index for r in reps]
    assert all(not np.array_equal(b, batches[0]) for b in batches[1:])
    last = [CaptureStore(root / r.run_id / "probes").load(len(CaptureStore(root / r.run_id / "probes").index) - 1)
            for r in reps]
    assert all(not np.array_equal(c["weights"], last[0]["weights"]) for c in last[1:])  # the paths separate


def test_contrast_files_follow_the_trajectory_contract(replica_set):
    cfg, root, reps, out, summary = replica_set
    index = json.loads((out / "index.json").read_text())
    assert {e["category"] for e in index["files"]} == {"training", "weights"}
    assert all(e["unit"] == "replica" for e in index["files"])
    window = cfg.analysis_window(reps[0].run_id)
    stores = [CaptureStore(root / r.run_id / "probes") for r in reps]
    steps = [int(s) for s in stores[0].index["step"]]
    ks = [int(stores[0].index["capture"].iloc[i]) for i in window.select(steps)]
    X = np.stack([np.stack([s.load(k)["weights"][1, MATRICES.index("v")] for k in ks]) for s in stores])
    arr = np.load(out / "weights/l1_v.npy")
    side = json.loads((out / "weights/l1_v.sidecar.json").read_text())
    T, rows, cols = X.shape[1:]
    assert arr.shape == (T, (R - 1) * rows, cols) and side["kind"] == "euclidean" and side["drift"] == "none"
    assert side["groups"] == np.repeat(np.arange(R - 1), rows).tolist()  # groups are replica contrasts
    assert side["source"]["captures"] == ks and len(side["times"]) == T
    assert np.all(np.diff([steps[i] for i in window.select(steps)]) >= window.min_gap)
    C = np.einsum("cr,rtnd->tcnd", helmert(R), X.astype(np.float64)).reshape(T, (R - 1) * rows, cols)
    np.testing.assert_allclose(arr, C, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.load(out / "mean/weights/l1_v.npy"), X.astype(np.float64).mean(0), atol=1e-6)
    tok = np.load(out / "training/ln_l0.npy")
    d = cfg.models["vit-pre"].d_model
    U = np.stack([np.stack([s.load(k)["ln_hat"][0].astype(np.float64).reshape(-1, d) / math.sqrt(d) for k in ks]) for s in stores])
    np.testing.assert_allclose(tok, np.einsum("cr,rtnd->tcnd", helmert(R), U).reshape(T, -1, d), atol=1e-5)


def test_too_few_replicas_is_an_error(replica_set, tmp_path):
    cfg, root, reps, _, _ = replica_set
    with pytest.raises(ValueError, match="at least 4"):
        extract_replicas(cfg, reps[0].run_id, [root / r.run_id for r in reps[:3]], tmp_path / "t")


def test_contrasts_remove_a_shared_drift_exactly():
    rng = np.random.default_rng(0)
    T, N, d = 30, 5, 3
    W = rng.standard_normal((R, T, N, d)).cumsum(1)
    drift = np.sin(np.linspace(0, 3, T))[:, None, None] * rng.standard_normal((N, d)) * 50  # any shape, any clock
    C = replica_contrasts(W + drift)
    np.testing.assert_allclose(C, replica_contrasts(W), atol=1e-10)
    np.testing.assert_allclose(replica_contrasts(np.broadcast_to(drift, (R, T, N, d))), 0.0, atol=1e-10)
    np.testing.assert_allclose(replica_mean(W + drift), W.mean(0) + drift, atol=1e-10)
    # orthonormal: the squared norms of the deviations from the mean are those of the contrasts
    dev = (W - W.mean(0))
    np.testing.assert_allclose(np.sum(dev**2, 0), np.sum(C**2, 0), rtol=1e-10)


def test_replica_statistic_is_brownian_where_the_single_path_is_not():
    """Brownian motion plus a curved per-walker drift: one path, with its linear drift removed, looks
    super-diffusive; the contrasts of 8 replicas (same drift, independent noise) are Brownian."""
    rng = np.random.default_rng(1)
    n_rep, T, N, d = 8, 40, 16, 8
    times = np.linspace(1.0, 40.0, T)
    noise = np.concatenate([np.zeros((n_rep, 1, N, d)),
                            np.cumsum(rng.standard_normal((n_rep, T - 1, N, d)) * np.sqrt(np.diff(times))[None, :, None, None],
                                      axis=1)], axis=1)
    drift = 0.02 * (times - times[0])[:, None, None] ** 2 * rng.standard_normal((N, d))  # (T, N, d), curved in t
    X = noise + drift
    single = to_jsonable(trajectory_battery(X[0], kind="euclidean", times=times, drift="per_walker", n_resamples=199,
                                            rng=0))
    assert single["verdict"] == "not brownian" and single["msd_exponent"]["confidence_interval"][0] > 1.1
    C = replica_contrasts(X)  # (7, T, N, d)
    stacked = C.transpose(1, 0, 2, 3).reshape(T, (n_rep - 1) * N, d)
    groups = np.repeat(np.arange(n_rep - 1), N)
    rep = to_jsonable(trajectory_battery(stacked, kind="euclidean", times=times, groups=groups, drift="none",
                                         n_resamples=199,
                                         rng=0))
    assert rep["n_groups"] == n_rep - 1
    assert rep["verdict"] == "brownian", rep["reason"]
    lo, hi = rep["msd_exponent"]["tost_interval"]
    assert 0.9 < lo and hi < 1.1


def test_replica_run_ids_round_trip():
    spec = RunSpec("vit-pre", "adamw", 3, 2)
    assert spec.run_id == "vit-pre__adamw__s3__r2" and RunSpec.parse(spec.run_id) == spec
    assert RunSpec.parse("vit-pre__adamw__s3").replica == 0 and spec.base == RunSpec("vit-pre", "adamw", 3)
    assert spec.noise_seed != RunSpec("vit-pre", "adamw", 3, 1).noise_seed and spec.base.noise_seed is None
