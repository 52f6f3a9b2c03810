"""Training: determinism, resume-after-kill equality, LR schedule, metrics and manifest."""
from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
import torch

from brownformer.config import TrainConfig, apply_overrides, from_dict
from brownformer.train import lr_factor, train_run

RUN = "vit-pre__adamw__s0"


def _cfg(raw, *overrides):
    return from_dict(apply_overrides(raw, ["train.steps=24", "train.eval_every=8", "train.checkpoint_every=8",
                                           "train.log_every=4", *overrides]))


def test_lr_schedule_shape():
    cfg = TrainConfig(steps=100, batch_size=1, warmup_steps=10, min_lr_ratio=0.1)
    f = [lr_factor(s, cfg) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(f[10:], f[11:])), "cosine phase must not increase"
    assert f[-1] >= 0.1 and lr_factor(100, cfg) == pytest.approx(0.1)


def test_metrics_and_manifest(raw_config, digits_dir, tmp_path):
    cfg = _cfg(raw_config)
    metrics = train_run(cfg, RUN, digits_dir, tmp_path / RUN, progress=False)
    on_disk = pd.read_parquet(tmp_path / RUN / "metrics.parquet")
    pd.testing.assert_frame_equal(metrics, on_disk)
    for col in ("step", "epoch", "wall_time", "eval_wall_time", "lr", "train_loss", "val_loss", "val_accuracy"):
        assert col in on_disk
    assert on_disk["step"].iloc[-1] == 24
    assert np.isfinite(on_disk["train_loss"]).all()
    assert on_disk["val_accuracy"].notna().sum() == 3
    manifest = json.loads((tmp_path / RUN / "manifest.json").read_text())
    for key in ("config_hash", "git", "versions", "device", "seeds", "determinism", "wall_time_s"):
        assert key in manifest
    assert manifest["config_hash"] == cfg.hash


@pytest.mark.parametrize("optimizer", ["adamw", "kfac-iterative"])
def test_resume_after_kill_equals_uninterrupted(raw_config, digits_dir, tmp_path, optimizer):
    cfg = _cfg(raw_config)
    run = f"vit-pre__{optimizer}__s0"
    full = train_run(cfg, run, digits_dir, tmp_path / "full", progress=False)
    train_run(cfg, run, digits_dir, tmp_path / "killed", stop_after=12, progress=False)
    assert not (tmp_path / "killed" / "metrics.parquet").exists()
    resumed = train_run(cfg, run, digits_dir, tmp_path / "killed", progress=False)
    cols = ["step", "lr", "train_loss", "val_loss", "val_accuracy"]
    pd.testing.assert_frame_equal(full[cols], resumed[cols], check_exact=True)


def test_eval_wall_time_is_cumulative_evaluation_time_carried_through_resume(raw_config, digits_dir, tmp_path):
    """eval_wall_time grows exactly on evaluated rows, stays within wall_time, and resumes from the checkpoint."""
    cfg = _cfg(raw_config)  # eval every 8 steps, logs every 4, killed after 12: the kill falls between two evals
    out = tmp_path / RUN
    killed = train_run(cfg, RUN, digits_dir, out, stop_after=12, progress=False)
    state = torch.load(out / "checkpoints" / "last.pt", weights_only=False)
    assert state["eval_wall_time"] == killed["eval_wall_time"].iloc[-1]
    metrics = train_run(cfg, RUN, digits_dir, out, progress=False)
    pd.testing.assert_series_equal(metrics["eval_wall_time"].iloc[:len(killed)], killed["eval_wall_time"])
    eval_wall, wall = metrics["eval_wall_time"].to_numpy(), metrics["wall_time"].to_numpy()
    assert np.isfinite(eval_wall).all()
    assert (np.diff(eval_wall) >= 0).all(), "cumulative: never decreases, across the resume too"
    assert ((0 <= eval_wall) & (eval_wall <= wall)).all()
    evaluated = metrics["val_accuracy"].notna().to_numpy()
    grew = np.diff(eval_wall, prepend=0.0) > 0
    np.testing.assert_array_equal(grew, evaluated)  # it changes on evaluated rows only


def test_same_seed_same_numbers_other_seed_differs(raw_config, digits_dir, tmp_path):
    cfg = _cfg(raw_config, "seeds=[0, 1]")
    a = train_run(cfg, RUN, digits_dir, tmp_path / "a", progress=False)
    b = train_run(cfg, RUN, digits_dir, tmp_path / "b", progress=False)
    c = train_run(cfg, "vit-pre__adamw__s1", digits_dir, tmp_path / "c", progress=False)
    np.testing.assert_array_equal(a["train_loss"], b["train_loss"])
    assert not np.array_equal(a["train_loss"], c["train_loss"])


def test_checkpoint_from_other_config_is_refused(raw_config, digits_dir, tmp_path):
    train_run(_cfg(raw_config), RUN, digits_dir, tmp_path / RUN, stop_after=8, progress=False)
    other = _cfg(raw_config, "optimizers.adamw.lr=0.01")
    with pytest.raises(RuntimeError, match="another config"):
        train_run(other, RUN, digits_dir, tmp_path / RUN, progress=False)


@pytest.mark.parametrize("optimizer", ["sgd", "muon"])
def test_baselines_reduce_the_loss(raw_config, digits_dir, tmp_path, optimizer):
    raw = apply_overrides(raw_config, [
        "optimizers.sgd={type: sgd, lr: 0.1, momentum: 0.9}",
        "optimizers.muon={type: muon, lr: 0.02, adamw_lr: 0.003}",
        f"grid=[{{models: [vit-pre], optimizers: [{optimizer}]}}]"])
    cfg = _cfg(raw, "train.steps=40")
    m = train_run(cfg, f"vit-pre__{optimizer}__s0", digits_dir, tmp_path / optimizer, progress=False)
    assert m["train_loss"].iloc[-3:].mean() < m["train_loss"].iloc[:3].mean()


def test_rerun_without_probe_index_restarts_so_the_store_is_complete(raw_config, digits_dir, tmp_path):
    """Snakemake deletes a job's outputs (probes/index.parquet) before rerunning it; the checkpoint stays."""
    cfg = _cfg(raw_config)
    out = tmp_path / RUN
    train_run(cfg, RUN, digits_dir, out, probes=True, progress=False)
    index = out / "probes" / "index.parquet"
    n_captures = len(pd.read_parquet(index))
    assert n_captures > 3
    index.unlink()
    (out / "metrics.parquet").unlink()
    train_run(cfg, RUN, digits_dir, out, probes=True, progress=False)
    assert len(pd.read_parquet(index)) == n_captures


class _StepCounter:
    """A callback counting the updates a run trains (it is called before each one and once at the end)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, step, model, lr_sum, lr_sq_sum):
        self.calls += 1


@pytest.mark.parametrize("stopped_after", [None, 12], ids=["finished", "killed"])
def test_a_rerun_of_a_finished_run_trains_again_and_a_killed_one_resumes(raw_config, digits_dir, tmp_path,
                                                                          stopped_after):
    """What Snakemake leaves of a job it reruns (--forcerun): the checkpoint, without the job's outputs."""
    cfg = _metrics_only(raw_config)
    out = tmp_path / RUN
    first = train_run(cfg, RUN, digits_dir, out, stop_after=stopped_after, progress=False)
    for name in ("metrics.parquet", "manifest.json", "probes/index.parquet"):  # the rule's declared outputs
        (out / name).unlink(missing_ok=True)
    counter = _StepCounter()
    again = train_run(cfg, RUN, digits_dir, out, callbacks=[counter], progress=False)
    steps = cfg.plan(RUN).train.steps
    assert counter.calls == 1 + steps - (stopped_after or 0)  # finished: every step again; killed: the rest only
    cols = ["step", "train_loss", "val_loss"]
    pd.testing.assert_frame_equal(first[cols], again[cols].iloc[:len(first)], check_exact=True)


def test_training_with_probes_loads_the_dataset_once(raw_config, digits_dir, tmp_path, monkeypatch):
    """The recorder gets the loop's dataset: one read (and one checksum pass) of the prepared files."""
    import brownformer.data.dataset_folder as store
    import brownformer.train as train

    calls = []
    real = store.load_prepared

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(train, "load_prepared", counting)
    monkeypatch.setattr(store, "load_prepared", counting)
    train_run(_cfg(raw_config), RUN, digits_dir, tmp_path / RUN, probes=True, progress=False)
    assert len(calls) == 1
    assert (tmp_path / RUN / "probes" / "index.parquet").exists()


def _metrics_only(raw):
    """The same run in a config whose only block naming it says `probes: false`."""
    raw = copy.deepcopy(raw)
    raw["grid"][0]["probes"] = False
    return _cfg(raw)


TIMING = ("wall_time", "eval_wall_time", "probe_wall_time", "examples_per_s", "tokens_per_s")


def test_a_metrics_only_run_trains_the_same_and_leaves_an_empty_probe_index(raw_config, digits_dir, tmp_path):
    plain_cfg, probed_cfg = _metrics_only(raw_config), _cfg(raw_config)
    assert not plain_cfg.probed(RUN) and probed_cfg.probed(RUN)
    plain = train_run(plain_cfg, RUN, digits_dir, tmp_path / "plain", probes=True, progress=False)
    probed = train_run(probed_cfg, RUN, digits_dir, tmp_path / "probed", probes=True, progress=False)
    store = tmp_path / "plain" / "probes"
    assert sorted(p.name for p in store.iterdir()) == ["index.parquet"]  # no meta.json, no c<k>.npz
    empty = pd.read_parquet(store / "index.parquet")
    full = pd.read_parquet(tmp_path / "probed" / "probes" / "index.parquet")
    assert empty.empty and len(full) > 3
    pd.testing.assert_series_equal(empty.dtypes, full.dtypes)  # the recorder's columns, in order, with its types
    assert (tmp_path / "plain" / "manifest.json").exists()
    cols = [c for c in plain.columns if c not in TIMING and not c.startswith("opt_time_")]
    pd.testing.assert_frame_equal(plain[cols], probed[cols], check_exact=True)  # probes never change training
    assert (plain["probe_wall_time"] == 0).all() and probed["probe_wall_time"].iloc[-1] > 0


def test_a_metrics_only_run_that_becomes_probed_restarts_and_captures_everything(raw_config, digits_dir, tmp_path):
    """Its checkpoint sits beside an empty index without meta.json: resuming would miss every capture."""
    from brownformer.probes import capture_schedule

    out, cfg = tmp_path / RUN, _cfg(raw_config)
    train_run(_metrics_only(raw_config), RUN, digits_dir, out, probes=True, progress=False)
    assert (out / "checkpoints" / "last.pt").exists() and pd.read_parquet(out / "probes" / "index.parquet").empty
    train_run(cfg, RUN, digits_dir, out, probes=True, progress=False)
    index = pd.read_parquet(out / "probes" / "index.parquet")
    assert list(index["step"]) == capture_schedule(cfg.probes, cfg.train.steps)


def test_probe_wall_time_holds_every_capture_and_is_carried_through_resume(raw_config, digits_dir, tmp_path):
    cfg = _cfg(raw_config)
    out = tmp_path / RUN
    killed = train_run(cfg, RUN, digits_dir, out, probes=True, stop_after=12, progress=False)
    state = torch.load(out / "checkpoints" / "last.pt", weights_only=False)
    assert state["probe_wall_time"] == killed["probe_wall_time"].iloc[-1]
    metrics = train_run(cfg, RUN, digits_dir, out, probes=True, progress=False)
    pd.testing.assert_series_equal(metrics["probe_wall_time"].iloc[:len(killed)], killed["probe_wall_time"])
    probe, evals, wall = (metrics[c].to_numpy() for c in ("probe_wall_time", "eval_wall_time", "wall_time"))
    assert (np.diff(probe) >= 0).all(), "cumulative: never decreases, across the resume too"
    assert (evals + probe <= wall).all(), "both are parts of wall_time"
    # The callbacks' clock wraps each capture's own clock (index seconds); the capture at step s precedes
    # update s, so a row logged after `step` updates holds every capture at a step below it.
    index = pd.read_parquet(out / "probes" / "index.parquet")
    for step, held in zip(metrics["step"], probe):
        assert held >= index.loc[index["step"] < step, "seconds"].sum() - 1e-9


@pytest.mark.parametrize("deterministic", [True, False])
def test_determinism_switch_is_set_without_compile(deterministic):
    """The start-up shortcut (no torch._inductor import) sets the same global switch the public API does."""
    from brownformer.config import TrainConfig
    from brownformer.train import set_determinism
    before = torch.are_deterministic_algorithms_enabled()
    try:
        set_determinism(TrainConfig(steps=1, batch_size=1, deterministic=deterministic), torch.device("cpu"))
        assert torch.are_deterministic_algorithms_enabled() is deterministic
    finally:
        torch.use_deterministic_algorithms(before)
