"""The per-step path of the training loop: no host syncs, a device-side loss, CUDA-graph key on CPU.

Host syncs are counted as the issue asks: `aten::item` / `aten::_local_scalar_dense` events in a
torch.profiler trace of 5 consecutive steps of the real loop (train_run), none of them a log,
eval or checkpoint step. The profiler is started and stopped by a step callback, so the window is
exactly steps 5..9 as train_run runs them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from brownformer.config import apply_overrides, from_dict
from brownformer.optim import _kfac_math
from brownformer.train import train_run
from brownformer.train_step import LossTracker

SYNC_OPS = ("aten::item", "aten::_local_scalar_dense")
WINDOW = range(5, 10)  # profiled steps; the only log/eval/checkpoint step is the last one (20)


def _cfg(raw, optimizer: str, *overrides):
    return from_dict(apply_overrides(raw, [
        "train.steps=20", "train.log_every=20", "train.eval_every=20", "train.checkpoint_every=20",
        f"grid=[{{models: [vit-pre], optimizers: [{optimizer}]}}]", *overrides]))


class _HostReads(TorchDispatchMode):
    """Records every `_local_scalar_dense` (what .item()/float()/bool() run): (tensor kind, value read)."""

    def __init__(self):
        super().__init__()
        self.reads: list[tuple[str, torch.dtype, int, object]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads.append((args[0].device.type, args[0].dtype, args[0].dim(), out))
        return out


def _inside_sync(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in SYNC_OPS:
            return True
        parent = parent.cpu_parent
    return False


class _Window:
    """Step callback: profiles (and records host reads in) the steps of WINDOW."""

    def __init__(self):
        self.prof = profile(activities=[ProfilerActivity.CPU])
        self.reads = _HostReads()
        self.optimizer_ranges: list[tuple[float, float]] = []

    def __call__(self, step, model, lr_sum, lr_sq_sum):
        if step == WINDOW.start:
            self.prof.start()
            self.reads.__enter__()
        elif step == WINDOW.stop:
            self.reads.__exit__(None, None, None)
            self.prof.stop()

    def syncs(self) -> tuple[int, int]:
        """(sync events outside optimizer.step, sync events inside it)."""
        events = list(self.prof.events())
        ranges = [(e.time_range.start, e.time_range.end) for e in events if e.name.startswith("Optimizer.step#")]
        assert len(ranges) == len(WINDOW), "expected one optimizer step per profiled training step"
        inside = outside = 0
        for e in events:
            # item() calls _local_scalar_dense: count each read once, at its outermost event
            if e.name in SYNC_OPS and not _inside_sync(e):
                if any(lo <= e.time_range.start <= hi for lo, hi in ranges):
                    inside += 1
                else:
                    outside += 1
        return outside, inside


def _profiled_run(raw, optimizer, digits_dir, tmp_path, *overrides) -> _Window:
    window = _Window()
    train_run(_cfg(raw, optimizer, *overrides), f"vit-pre__{optimizer}__s0", digits_dir, tmp_path / optimizer,
              callbacks=[window], progress=False)
    return window


def test_adamw_step_path_reads_nothing_but_adamws_host_step_counters(raw_config, digits_dir, tmp_path):
    """The loop itself makes no host sync; inside AdamW.step the only reads are of its step counters.

    torch.optim keeps AdamW's `step` counters on the host unless the step is fused or capturable, and
    reads them there (no device involved); on CUDA the loop uses fused AdamW, which keeps them on the
    device and reads none. Every other read would be a sync on a GPU.
    """
    window = _profiled_run(raw_config, "adamw", digits_dir, tmp_path)
    outside, inside = window.syncs()
    assert outside == 0, f"{outside} host syncs in the training loop outside the optimizer step"
    reads = window.reads.reads
    assert len(reads) == inside
    assert all(kind == "cpu" and dim == 0 and dtype == torch.float32 and value == int(value)
               for kind, dtype, dim, value in reads), "a host read that is not an integer-valued step counter"
    counters = {value for *_, value in reads}  # AdamW's counters read steps 6..10 (none when fused, on CUDA)
    assert counters <= {float(s + 1) for s in WINDOW}, f"reads of values {sorted(counters)}, not the step counters"


# config/ci.yaml runs only the iterative K-FAC; the eigen variant gets the same settings here. Factors every 4
# steps keep the window free of eigendecomposition refreshes (steps 0, 4 and every inverse_every): eigh checks
# its result on the host, once per factor shape and refresh, on a GPU as well.
_KFAC = ["optimizers.kfac-eigen={type: kfac-eigen, lr: 0.05, damping: 0.1, inverse_every: 10, rest_update: adamw, "
         "factor_every: 4}", "optimizers.kfac-iterative.factor_every=4"]


@pytest.mark.parametrize("optimizer", ["kfac-eigen", "kfac-iterative"])
def test_kfac_step_path_makes_no_host_sync(raw_config, digits_dir, tmp_path, optimizer, monkeypatch):
    """K-FAC's finiteness check stays on the device (a failed step is skipped there and handled at the
    next check). The scheduled check, every adapt_every steps, copies its counts and the
    Levenberg-Marquardt numbers to the host in one tolist() (on a GPU one sync per adapt_every steps);
    that copy is not an item() read, and no step makes one. Counted on the path of a device whose host
    reads are not free: the CPU's read-to-skip-work shortcuts (``_kfac_math.HOST_READ_FREE``) switched off."""
    monkeypatch.setattr(_kfac_math, "HOST_READ_FREE", ())
    window = _profiled_run(raw_config, optimizer, digits_dir, tmp_path, *_KFAC)
    outside, inside = window.syncs()
    assert outside == 0, f"{outside} host syncs in the training loop outside the optimizer step"
    assert inside == 0, f"{inside} host syncs inside {optimizer}'s step over {len(WINDOW)} steps"


def test_cuda_graphs_key_is_a_no_op_on_cpu(raw_config, digits_dir, tmp_path):
    run = "vit-pre__adamw__s0"
    base = ["train.steps=12", "train.log_every=4", "train.eval_every=8"]
    off = train_run(from_dict(apply_overrides(raw_config, base)), run, digits_dir, tmp_path / "off", progress=False)
    on = train_run(from_dict(apply_overrides(raw_config, [*base, "train.cuda_graphs=true"])), run, digits_dir,
                   tmp_path / "on", progress=False)
    cols = ["step", "lr", "train_loss", "train_loss_mean", "val_loss", "val_accuracy"]
    pd.testing.assert_frame_equal(off[cols], on[cols], check_exact=True)


def test_loss_tracker_returns_the_last_loss_and_the_mean_since_the_last_read():
    losses = np.random.default_rng(0).uniform(0.5, 3.0, size=7).astype(np.float32)
    tracker = LossTracker(torch.device("cpu"))
    for v in losses[:4]:
        tracker.add(torch.tensor(v))
    assert tracker.read() == (float(losses[3]), pytest.approx(float(np.mean(losses[:4], dtype=np.float64)), rel=1e-15))
    state = None
    for i, v in enumerate(losses[4:]):
        tracker.add(torch.tensor(v))
        if i == 0:
            state = tracker.state()
    resumed = LossTracker(torch.device("cpu"))
    resumed.load(state)
    for v in losses[5:]:
        resumed.add(torch.tensor(v))
    expected = (float(losses[-1]), pytest.approx(float(np.mean(losses[4:], dtype=np.float64)), rel=1e-15))
    assert tracker.read() == expected and resumed.read() == expected


def test_resume_mid_log_interval_keeps_the_mean_loss(raw_config, digits_dir, tmp_path):
    """A kill between two log steps: the checkpoint carries the partial sum of the training losses."""
    cfg = from_dict(apply_overrides(raw_config, ["train.steps=16", "train.log_every=4", "train.eval_every=8",
                                                 "train.checkpoint_every=8"]))
    run = "vit-pre__adamw__s0"
    full = train_run(cfg, run, digits_dir, tmp_path / "full", progress=False)
    train_run(cfg, run, digits_dir, tmp_path / "killed", stop_after=10, progress=False)
    resumed = train_run(cfg, run, digits_dir, tmp_path / "killed", progress=False)
    cols = ["step", "train_loss", "train_loss_mean", "val_loss"]
    pd.testing.assert_frame_equal(full[cols], resumed[cols], check_exact=True)
    assert (full["train_loss_mean"] != full["train_loss"]).any(), "the mean must cover more than the log step"
