"""The recorder: captures at the schedule, leaves training untouched, resumes without duplicates."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from brownformer.config import RunSpec
from brownformer.data import load_prepared
from brownformer.probes import ProbeRecorder, capture_schedule
from brownformer.train import model_for_data, train_run


def _recorder(cfg, run_id, data, store_dir):
    spec = RunSpec.parse(run_id)
    return ProbeRecorder(cfg.plan(run_id), data, store_dir, torch.device("cpu"),
                         lambda: model_for_data(cfg, spec.model, data))


def _data_dir(run_id, image_dir, text_dir):
    return text_dir if run_id.startswith("lm") else image_dir


@pytest.mark.parametrize("run_id", ["vit-pre__adamw__s0", "vit-post__sgd__s0", "lm-pre__adamw__s0",
                                    "vit-pre__kfac__s0"])
def test_probes_do_not_change_training(config_of, image_dir, text_dir, tmp_path, run_id):
    cfg = config_of()
    data_dir = _data_dir(run_id, image_dir, text_dir)
    plain = train_run(cfg, run_id, data_dir, tmp_path / "plain", progress=False)
    rec = _recorder(cfg, run_id, load_prepared(data_dir), tmp_path / "probed" / "probes")
    probed = train_run(cfg, run_id, data_dir, tmp_path / "probed", callbacks=[rec], progress=False)
    cols = ["step", "lr", "train_loss", "val_loss"]
    pd.testing.assert_frame_equal(plain[cols], probed[cols], check_exact=True)
    a = torch.load(tmp_path / "plain" / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(tmp_path / "probed" / "checkpoints" / "last.pt", weights_only=False)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert list(rec.store.index["step"]) == capture_schedule(cfg.probes, cfg.train.steps)


def test_capture_leaves_model_grads_mode_and_rng_alone(config_of, image_data, tmp_path):
    cfg = config_of()
    torch.manual_seed(0)
    model = model_for_data(cfg, "vit-pre", image_data)
    model.train()
    x = torch.as_tensor(image_data.splits["train"]["x"][:4])
    model(x).sum().backward()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    grads = [p.grad.clone() for p in model.parameters()]
    rng = torch.get_rng_state()
    np_rng = np.random.get_state()[1].copy()
    rec = _recorder(cfg, "vit-pre__adamw__s0", image_data, tmp_path / "probes")
    rec(0, model, 0.0, 0.0)  # capture 0 carries gradient noise
    assert rec.store.index["has_noise"].tolist() == [True]
    assert torch.equal(torch.get_rng_state(), rng) and (np.random.get_state()[1] == np_rng).all()
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))


def test_store_contents_and_meta(config_of, text_data, tmp_path):
    cfg = config_of()
    torch.manual_seed(0)
    model = model_for_data(cfg, "lm-pre", text_data)
    rec = _recorder(cfg, "lm-pre__adamw__s0", text_data, tmp_path / "probes")
    for step in range(cfg.train.steps + 1):
        rec(step, model, 0.1 * step, 0.01 * step)
    index = rec.store.index
    assert list(index["capture"]) == list(range(len(rec.schedule)))
    assert list(index["has_noise"]) == [k % cfg.probes.noise_every == 0 for k in index["capture"]]
    assert set(index.columns) >= {"capture", "step", "lr_sum", "lr_sq_sum", "file", "sha256", "has_noise", "seconds"}
    meta = json.loads((tmp_path / "probes" / "meta.json").read_text())
    assert meta["causal"] is True and meta["n_tokens"] == 6 and meta["capture_seconds_total"] > 0
    cap = rec.store.load(0)
    L, B, n, d, H = 2, 3, 6, 8, 2
    assert cap["resid"].shape == (L + 1, B, n, d) and cap["resid"].dtype == np.float16
    assert cap["attn"].shape == (L, H, B, n, n)
    assert cap["weights"].shape == (L, 4, d, d) and cap["weights"].dtype == np.float32
    assert cap["noise"].shape == (L, 4, cfg.probes.noise_samples, d * d) and cap["noise"].dtype == np.float32
    assert "noise" not in rec.store.load(1)
    assert np.array_equal(cap["weights"][1, 2], model.blocks[1].attn.v.weight.detach().numpy())


def test_large_matrices_are_projected(config_of, image_data, tmp_path):
    cfg = config_of(probes={"max_weight_size": 32, "projection_dim": 3})
    torch.manual_seed(0)
    rec = _recorder(cfg, "vit-pre__adamw__s0", image_data, tmp_path / "probes")
    rec(0, model_for_data(cfg, "vit-pre", image_data), 0.0, 0.0)
    cap = rec.store.load(0)
    assert cap["weights"].shape == (2, 4, 8, 3) and cap["noise"].shape == (2, 4, 3, 24)
    assert json.loads((tmp_path / "probes" / "meta.json").read_text())["projection"]["projected"]


def test_resume_continues_the_store(config_of, image_dir, image_data, tmp_path):
    cfg = config_of()
    run_id = "vit-pre__adamw__s0"
    whole = _recorder(cfg, run_id, image_data, tmp_path / "whole" / "probes")
    train_run(cfg, run_id, image_dir, tmp_path / "whole", callbacks=[whole], progress=False)
    out = tmp_path / "resumed"
    first = _recorder(cfg, run_id, image_data, out / "probes")
    train_run(cfg, run_id, image_dir, out, callbacks=[first], stop_after=6, progress=False)
    assert list(first.store.index["step"]) == [s for s in first.schedule if s <= 5]
    second = _recorder(cfg, run_id, image_data, out / "probes")  # a fresh process picks the store up
    train_run(cfg, run_id, image_dir, out, callbacks=[second], progress=False)
    index = second.store.index
    assert list(index["step"]) == whole.schedule and index["capture"].is_unique
    for k in index["capture"]:
        a, b = whole.store.load(k), second.store.load(k)
        assert all(np.array_equal(a[name], b[name]) for name in a)
    assert sorted(p.name for p in (out / "probes").glob("c*.npz")) == sorted(index["file"])


def test_store_of_another_config_is_refused(config_of, image_data, tmp_path):
    rec = _recorder(config_of(), "vit-pre__adamw__s0", image_data, tmp_path / "probes")
    rec(0, model_for_data(config_of(), "vit-pre", image_data), 0.0, 0.0)
    with pytest.raises(RuntimeError, match="another run or config"):
        _recorder(config_of(probes={"seed": 6}), "vit-pre__adamw__s0", image_data, tmp_path / "probes")
