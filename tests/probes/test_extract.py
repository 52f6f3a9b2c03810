"""extract_trajectories: every file of docs/ARTIFACTS.md, values equal to the captured tensors."""
import json
import math

import numpy as np
import pytest
import torch

from brownformer.config import RunSpec
from brownformer.data import load_prepared
from brownformer.io import sidecar_path
from brownformer.probes import ProbeRecorder, describe_layout, extract_trajectories
from brownformer.probes.capture import MATRICES
from brownformer.probes.capture_store import CaptureStore
from brownformer.train import model_for_data, train_run

SIDECAR_KEYS = {"kind", "time", "times", "walkers", "source"}
SOURCE_KEYS = {"run", "layer", "head", "tensor", "captures"}


def _run(cfg, run_id, data_dir, run_dir):
    spec, data = RunSpec.parse(run_id), load_prepared(data_dir)
    rec = ProbeRecorder(cfg.plan(run_id), data, run_dir / "probes", torch.device("cpu"),
                        lambda: model_for_data(cfg, spec.model, data))
    train_run(cfg, run_id, data_dir, run_dir, callbacks=[rec], progress=False)
    return run_dir


@pytest.fixture(scope="module", params=["vit-pre__adamw__s0", "lm-pre__adamw__s0", "vit-none__sgd__s0"])
def extracted(request, config_of, image_dir, text_dir, tmp_path_factory):
    cfg = config_of()
    run_dir = tmp_path_factory.mktemp("run") / request.param
    _run(cfg, request.param, text_dir if request.param.startswith("lm") else image_dir, run_dir)
    summary = extract_trajectories(cfg, run_dir, run_dir / "trajectories")
    return cfg, run_dir, run_dir / "trajectories", summary


def _load(out, rel):
    return np.load(out / rel), json.loads(sidecar_path(out / rel).read_text())


def test_index_lists_every_file_with_a_sidecar(extracted):
    cfg, run_dir, out, summary = extracted
    index = json.loads((out / "index.json").read_text())
    paths = {e["path"] for e in index["files"]}
    assert paths == {str(p.relative_to(out)) for p in out.rglob("*.npy")}
    L, C = 2, len(CaptureStore(run_dir / "probes").index)
    assert summary["counts"] == {"training": L, "weights": 4 * L, "gradnoise": 4 * L,
                                 "depth": 3 * min(C, 8), "attention": 2 * min(C, 8)}
    for entry in index["files"]:
        arr, side = _load(out, entry["path"])
        assert arr.dtype == np.float32
        assert SIDECAR_KEYS <= set(side) and SOURCE_KEYS <= set(side["source"])
        assert side["kind"] == entry["kind"]
        if side["kind"] in ("sphere", "euclidean"):
            assert arr.ndim == 3 and len(side["times"]) == arr.shape[0]
        if side["kind"] == "sphere":  # LayerNorm's eps pulls the radius below 1 where variance is small
            norms = np.linalg.norm(arr, axis=-1)
            assert norms.max() < 1.002 and norms.min() > 0.9
    assert summary["store_mb"] > 0 and summary["capture_overhead"] is not None


def test_trajectories_equal_the_captured_tensors(extracted):
    cfg, run_dir, out, _ = extracted
    store = CaptureStore(run_dir / "probes")
    meta = store.read_meta()
    d, ks = meta["d_model"], list(store.index["capture"])
    training, side = _load(out, "training/ln_l1.npy")
    # one array per layer on the primary clock (sum of lr^2), the other clocks recorded beside it
    assert side["time"] == "lr_sq_sum" and side["times"] == pytest.approx(list(store.index["lr_sq_sum"]))
    assert side["clocks"]["step"] == list(store.index["step"])
    assert side["clocks"]["lr_sum"] == pytest.approx(list(store.index["lr_sum"]))
    assert np.all(np.diff(side["times"]) > 0) and side["warmup"] and side["clock_reason"]
    assert side["n_inputs"] * side["n_tokens"] == training.shape[1]  # groups of dependent walkers
    assert side["sum_zero"] is (meta["ln"] != "none")
    if side["sum_zero"]:  # LayerNorm output before the affine lies in the hyperplane sum(z) = 0
        assert np.abs(training.sum(-1)).max() < 2e-3  # up to the captures' storage rounding
    weights, side_w = _load(out, "weights/l0_k.npy")
    assert side_w["time"] == "lr_sq_sum" and side_w["drift"] == "per_walker"
    assert side_w["drift_clock"] == side_w["time"]  # the drift is removed on the clock the sidecar declares
    assert side_w["groups"] == [0] * weights.shape[1]  # rows of one matrix are dependent: one group
    noise, side_noise = _load(out, "gradnoise/l1_o.npy")
    noise_ks = [k for k, h in zip(ks, store.index["has_noise"]) if h]
    assert side_noise["source"]["captures"] == noise_ks and noise.shape[0] == len(noise_ks)
    for i, k in enumerate(ks):
        cap = store.load(k)
        np.testing.assert_array_equal(training[i], cap["ln_hat"][1].reshape(-1, d).astype(np.float32) / math.sqrt(d))
        np.testing.assert_array_equal(weights[i], cap["weights"][0, MATRICES.index("k")])
        if k in noise_ks:
            np.testing.assert_array_equal(noise[noise_ks.index(k)], cap["noise"][1, MATRICES.index("o")])
    k = ks[-1]
    cap = store.load(k)
    depth, side = _load(out, f"depth/ln_c{k}.npy")
    assert side["time"] == "layer" and side["times"] == [0, 1] and side["kind"] == "sphere"
    assert side["n_inputs"] * side["n_tokens"] == depth.shape[1] and side["sum_zero"] is (meta["ln"] != "none")
    np.testing.assert_array_equal(depth, cap["ln_hat"].reshape(2, -1, d).astype(np.float32) / math.sqrt(d))
    resid, side = _load(out, f"depth/resid_c{k}.npy")
    assert resid.shape[0] == 3 and side["kind"] == "euclidean"
    np.testing.assert_array_equal(resid, cap["resid"].reshape(3, -1, d).astype(np.float32))
    lnaff, side = _load(out, f"depth/lnaff_c{k}.npy")
    assert side["kind"] == "euclidean" and side["time"] == "layer" and side["ln"] == meta["ln"]
    assert side["n_inputs"] * side["n_tokens"] == lnaff.shape[1]
    np.testing.assert_array_equal(lnaff, cap["ln_out"].reshape(2, -1, d).astype(np.float32))
    entry = next(e for e in json.loads((out / "index.json").read_text())["files"] if e["path"] == f"depth/lnaff_c{k}.npy")
    assert entry["category"] == "depth" and entry["tensor"] == "ln_affine" and entry["capture"] == k


def test_attention_files(extracted):
    cfg, run_dir, out, summary = extracted
    meta = CaptureStore(run_dir / "probes").read_meta()
    k = summary["per_capture_files"]["captures"][-1]
    attn, side = _load(out, f"attention/c{k}.npy")
    feats = np.load(out / f"attention/c{k}_features.npy")
    L, H, B, n = 2, 2, meta["n_inputs"], meta["n_tokens"]
    assert attn.shape == (L, H, B, n, n) and feats.shape == (L, B, n, meta["d_model"])
    np.testing.assert_allclose(attn.sum(-1), 1.0, atol=1e-6)
    assert side["causal"] is meta["causal"] is (meta["arch"] == "lm")
    if side["causal"]:
        assert np.all(attn[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] == 0)
    norms = np.linalg.norm(feats, axis=-1)
    assert norms.max() < 1.002 and norms.min() > 0.9
    if meta["ln"] in ("pre", "none"):  # the attention acts on LN1's output: the depth ln features
        depth = np.load(out / f"depth/ln_c{k}.npy").reshape(feats.shape)
        np.testing.assert_allclose(feats, depth, atol=5e-3)


def test_rerun_replaces_the_folder(extracted, tmp_path):
    cfg, run_dir, out, summary = extracted
    (out / "stale.npy").write_bytes(b"")
    again = extract_trajectories(cfg, run_dir, out)
    assert not (out / "stale.npy").exists() and again["counts"] == summary["counts"]
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".trajectories")]


def test_missing_store_is_an_error(config_of, tmp_path):
    with pytest.raises(FileNotFoundError, match="no captures"):
        extract_trajectories(config_of(), tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_layout_text_names_every_family():
    text = describe_layout()
    for family in ("depth/ln_c", "depth/lnaff_c", "depth/resid_c", "training/ln_l", "lr_sq_sum", "weights/l", "gradnoise/l",
                   "attention/c", "index.json", "summary.json"):
        assert family in text


@pytest.mark.parametrize("centered", [True, False])
def test_unit_features_equal_the_capture_normalisation(centered):
    """The extraction's numpy normalisation is the recorder's torch one (to float32 rounding)."""
    from brownformer.probes.capture import sphere_normalize
    from brownformer.probes.extract import unit_features

    x = np.random.default_rng(3).normal(1.0, 3.0, size=(3, 2, 5, 16)).astype(np.float32)
    expected = sphere_normalize(torch.from_numpy(x), centered=centered).numpy() / math.sqrt(16)
    np.testing.assert_allclose(unit_features(x, centered=centered), expected, rtol=0, atol=1e-6)
    assert np.allclose(np.linalg.norm(unit_features(x, centered=centered), axis=-1), 1.0, atol=1e-6)
