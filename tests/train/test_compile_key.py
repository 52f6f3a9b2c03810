"""``train.compile: true`` trains through ``torch.compile(model)`` and gives the eager run's losses.

Dynamo's wrapper of a module raises on ``len()``, so nothing on the training path may take a module's truth value
(``TrainStep`` did, ``forward or model``, which made every compiled run fail at its first line; found by the CPU
smoke run of scripts/gpu_check.sh). The compile backend here is dynamo's ``"eager"``: the real wrapper and graph
capture, without inductor's C++ code generation (tens of seconds on a CPU).
"""
from __future__ import annotations

import functools

import pandas as pd
import torch

from brownformer.config import apply_overrides, from_dict
from brownformer.train import train_run
from brownformer.train_step import TrainStep


class _Net(torch.nn.Module):  # not a container (nn.Sequential has a len(), which would hide the defect)
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


def test_train_step_takes_a_compiled_module_as_its_forward():
    model = _Net()
    compiled = torch.compile(model, backend="eager")
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1), device=torch.device("cpu"), forward=compiled)
    assert step.forward is compiled
    loss = step(torch.randn(5, 4), torch.randint(0, 3, (5,)))
    assert torch.isfinite(loss)


def test_compiled_training_run_matches_the_eager_one(raw_config, digits_dir, tmp_path, monkeypatch):
    run = "vit-pre__adamw__s0"
    base = ["train.steps=6", "train.log_every=2", "train.eval_every=6", "train.checkpoint_every=6"]
    eager = train_run(from_dict(apply_overrides(raw_config, base)), run, digits_dir, tmp_path / "eager", progress=False)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    compiled = train_run(from_dict(apply_overrides(raw_config, [*base, "train.compile=true"])), run, digits_dir,
                         tmp_path / "compiled", progress=False)
    cols = ["step", "train_loss", "val_loss", "val_accuracy"]
    pd.testing.assert_frame_equal(eager[cols], compiled[cols], check_exact=False, rtol=1e-5)
