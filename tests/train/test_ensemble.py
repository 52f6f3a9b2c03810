"""Ensembles: each member of a batched model trains as its run alone, resumes, and writes its own outputs."""
from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
import torch

from brownformer.config import apply_overrides, from_dict
from brownformer.ensemble import ENSEMBLE_BACKENDS, train_ensemble
from brownformer.train import train_run

SEEDS = [0, 1, 2]
COMPARED = ["train_loss", "train_loss_mean", "val_loss", "val_accuracy"]
RTOL, ATOL = 1e-4, 1e-6  # batched matmuls sum in another order than one run's: float32 rounding, 24 steps


def _cfg(raw, optimizer="adamw", *overrides):
    raw = copy.deepcopy(raw)
    raw["optimizers"]["sgd"] = {"type": "sgd", "lr": 0.05, "momentum": 0.9}
    raw["seeds"] = SEEDS
    raw["grid"] = [{"models": ["vit-pre"], "optimizers": [optimizer]}]
    raw.pop("replicas", None)
    return from_dict(apply_overrides(raw, ["train.steps=24", "train.eval_every=8", "train.checkpoint_every=8",
                                           "train.log_every=4", "train.ensemble=3", *overrides]))


def _runs(optimizer="adamw"):
    return [f"vit-pre__{optimizer}__s{s}" for s in SEEDS]


def _weights(run_dir):
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    return state["model"]


#: every backend once (compiling takes minutes on a loaded CPU: AdamW only, marked slow), the eager ones per optimizer
BACKEND_CASES = [pytest.param("adamw", "compile", marks=pytest.mark.slow, id="adamw-compile"),
                 *(pytest.param(o, b, id=f"{o}-{b}") for o in ("adamw", "sgd") for b in ENSEMBLE_BACKENDS
                   if b != "compile")]


@pytest.mark.parametrize(("optimizer", "backend"), BACKEND_CASES)
def test_each_member_equals_its_run_trained_alone(raw_config, digits_dir, tmp_path, optimizer, backend):
    cfg = _cfg(raw_config, optimizer)
    together = train_ensemble(cfg, _runs(optimizer), digits_dir, tmp_path / "ens", progress=False, backend=backend)
    for run in _runs(optimizer):
        alone = train_run(cfg, run, digits_dir, tmp_path / "alone" / run, progress=False)
        pd.testing.assert_frame_equal(together[run][["step", *COMPARED]], alone[["step", *COMPARED]],
                                      check_exact=False, rtol=RTOL, atol=ATOL)
        ens_w, alone_w = _weights(tmp_path / "ens" / run), _weights(tmp_path / "alone" / run)
        for name in alone_w:
            if name.endswith("attn.k.bias"):
                # softmax is invariant to q.b_k (one shift per query row): b_k's gradient is 0 in exact arithmetic,
                # its float rounding noise, which AdamW normalises to full-size steps: another order, another walk
                continue
            torch.testing.assert_close(ens_w[name], alone_w[name], rtol=RTOL, atol=ATOL, msg=name)
        manifest = json.loads((tmp_path / "ens" / run / "manifest.json").read_text())
        assert manifest["run_hash"] == cfg.run_hash(run) and manifest["ensemble"] == _runs(optimizer)
    # the members differ: their own initialisation and data order
    first, second = (together[r]["train_loss"].to_numpy() for r in _runs(optimizer)[:2])
    assert not np.allclose(first, second)


def test_gradient_clipping_is_per_member(raw_config, digits_dir, tmp_path):
    """A clip that binds (tiny max norm) must scale each member by its own norm, not the ensemble's."""
    cfg = _cfg(raw_config, "sgd", "train.grad_clip=0.01", "train.steps=8")
    run = _runs("sgd")[1]
    together = train_ensemble(cfg, _runs("sgd"), digits_dir, tmp_path / "ens", progress=False)
    alone = train_run(cfg, run, digits_dir, tmp_path / "alone", progress=False)
    pd.testing.assert_frame_equal(together[run][COMPARED], alone[COMPARED], check_exact=False, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("optimizer, extra", [("adamw", ()), ("sgd", ("optimizers.sgd.momentum=0.0",))],
                         ids=["adamw", "sgd-without-momentum"])
def test_a_killed_ensemble_resumes_and_its_members_resume_alone(raw_config, digits_dir, tmp_path, optimizer, extra):
    cfg = _cfg(raw_config, optimizer, *extra)
    runs = _runs(optimizer)
    full = train_ensemble(cfg, runs, digits_dir, tmp_path / "full", progress=False)
    train_ensemble(cfg, runs, digits_dir, tmp_path / "killed", stop_after=12, progress=False)
    assert not any((tmp_path / "killed" / r / "metrics.parquet").exists() for r in runs)
    resumed = train_ensemble(cfg, runs[:2], digits_dir, tmp_path / "killed", progress=False)
    alone = train_run(cfg, runs[2], digits_dir, tmp_path / "killed" / runs[2], progress=False)
    for run in runs[:2]:  # the ensemble's own checkpoints: the same stacked state, the same numbers
        pd.testing.assert_frame_equal(full[run][["step", *COMPARED]], resumed[run][["step", *COMPARED]],
                                      check_exact=True)
    pd.testing.assert_frame_equal(full[runs[2]][COMPARED], alone[COMPARED], check_exact=False, rtol=RTOL,
                                  atol=ATOL)


def test_members_capture_their_own_probes(raw_config, digits_dir, tmp_path):
    cfg = _cfg(raw_config)
    run = _runs()[1]
    train_ensemble(cfg, _runs(), digits_dir, tmp_path / "ens", probes=True, progress=False)
    train_run(cfg, run, digits_dir, tmp_path / "alone", probes=True, progress=False)
    ens_index = pd.read_parquet(tmp_path / "ens" / run / "probes" / "index.parquet")
    alone_index = pd.read_parquet(tmp_path / "alone" / "probes" / "index.parquet")
    assert list(ens_index["step"]) == list(alone_index["step"]) and len(ens_index) > 3
    for k in (0, len(alone_index) - 1):  # the first and last captures hold the same token states
        with np.load(sorted((tmp_path / "alone" / "probes").glob("*.npz"))[k]) as a, \
                np.load(sorted((tmp_path / "ens" / run / "probes").glob("*.npz"))[k]) as b:
            key = next(n for n in a.files if n.startswith("resid"))
            np.testing.assert_allclose(b[key].astype(np.float32), a[key].astype(np.float32), rtol=1e-2, atol=1e-2)


def test_an_unknown_backend_is_refused_naming_it(raw_config, digits_dir, tmp_path):
    with pytest.raises(ValueError, match="'jit'"):
        train_ensemble(_cfg(raw_config), _runs(), digits_dir, tmp_path, progress=False, backend="jit")


def test_runs_that_cannot_train_together_are_refused_naming_them(raw_config, digits_dir, tmp_path):
    cfg = _cfg(raw_config, "kfac-iterative")
    with pytest.raises(ValueError, match="cannot train as one ensemble"):
        train_ensemble(cfg, _runs("kfac-iterative"), digits_dir, tmp_path, progress=False)
    with pytest.raises(ValueError, match="distinct"):
        train_ensemble(_cfg(raw_config), [_runs()[0]] * 2, digits_dir, tmp_path, progress=False)


def test_the_cli_trains_an_ensemble_into_each_members_folder(raw_config, digits_dir, tmp_path):
    import yaml

    from brownformer.cli import main
    raw = copy.deepcopy(raw_config)
    raw["seeds"] = [0, 1]
    raw.pop("replicas", None)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    runs = ["vit-pre__adamw__s0", "vit-pre__adamw__s1"]
    common = ["train", "--config", str(config), "--data", str(digits_dir), "--quiet", "--set", "train.steps=8"]
    members = [a for r in runs for a in ("--run", r)]
    assert main([*common, *members, "--runs-dir", str(tmp_path / "runs")]) == 0
    assert all((tmp_path / "runs" / r / "metrics.parquet").exists() for r in runs)
    assert main([*common, *members, "--out", str(tmp_path / "one")]) == 2  # several runs need --runs-dir
    assert main([*common, "--run", "vit-pre__kfac-iterative__s0", "--run", runs[0],
                 "--runs-dir", str(tmp_path / "mixed")]) == 2  # K-FAC cannot join an ensemble
