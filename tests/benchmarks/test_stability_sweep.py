"""benchmarks/stability_sweep.py: the non-finite rule on a known table, and a tiny sweep on config/ci.yaml."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def sweep(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import stability_sweep

    return stability_sweep


def test_first_nonfinite_reads_train_losses_everywhere_and_val_values_only_where_evaluated(sweep):
    nan = math.nan
    metrics = pd.DataFrame({  # eval_every 10, 25 steps: evaluated at 10, 20 and the last step 25
        "step": [5, 10, 15, 20, 25],
        "train_loss": [2.0, 1.9, 1.8, 1.7, 1.6],
        "train_loss_mean": [2.0, 1.9, 1.8, np.inf, 1.6],  # a non-finite step inside the window ending at 20
        "val_loss": [nan, 1.5, nan, 1.4, 1.3],  # NaN off the evaluation steps means "not evaluated"
        "val_accuracy": [nan, 0.5, nan, 0.6, 0.7],
        "val_bpc": [nan] * 5,
    })
    assert sweep.first_nonfinite(metrics, 10, 25) == {
        "nonfinite_train": True, "nonfinite_val": False, "nonfinite": True, "first_nonfinite_step": 20}
    metrics["train_loss_mean"] = metrics["train_loss"]
    assert not sweep.first_nonfinite(metrics, 10, 25)["nonfinite"]
    metrics.loc[metrics["step"] == 10, "val_loss"] = nan  # a diverged evaluation
    assert sweep.first_nonfinite(metrics, 10, 25) == {
        "nonfinite_train": False, "nonfinite_val": True, "nonfinite": True, "first_nonfinite_step": 10}


def test_tiny_sweep_on_the_ci_config_writes_every_run_and_the_tables(sweep, digits_dir, tmp_path):
    argv = ["--config", str(ROOT / "config" / "ci.yaml"), "--models", "vit-pre", "--seeds", "0",
            "--lr-factors", "1", "3", "--steps", "3", "--workers", "1",
            "--data-root", str(digits_dir.parent), "--out", str(tmp_path)]
    assert sweep.main(argv) == 0
    out = json.loads((tmp_path / "stability.json").read_text())
    assert {"config", "models", "optimizers", "lr_factors", "seeds", "steps", "date", "torch",
            "chance"} <= set(out["settings"])
    assert out["settings"]["optimizers"] == ["kfac-iterative"]  # the ci config's only K-FAC optimizer
    runs = out["runs"]
    assert len(runs) == 2
    for run in runs:
        assert {"model", "optimizer", "lr_factor", "lr", "seed", "steps", "final_train_loss", "nonfinite",
                "first_nonfinite_step", "opt_cg_fallbacks_total", "opt_damping_final", "metric", "final",
                "did_not_train", "did_not_train_reason", "error"} <= set(run)
        assert run["error"] is None and run["steps"] == 3 and run["metric"] == "val_accuracy"
    # no tuned block in ci.yaml: the optimizer's own lr (0.05) times each factor
    assert [r["lr"] for r in runs] == pytest.approx([0.05, 0.15])
    text = (tmp_path / "stability.md").read_text()
    assert "## vit-pre (3 steps)" in text and "- kfac-iterative: " in text


def test_a_crashed_run_is_counted_apart_and_does_not_break_the_tables(sweep):
    run = {"model": "m", "optimizer": "kfac-eigen", "lr_factor": 1.0, "lr": 0.1, "seed": 0, "steps": 5}
    crashed = sweep.summarize(run, {"error": "LinAlgError: eigh failed"}, None, 5)
    assert crashed["did_not_train"] and crashed["nonfinite"] is None
    text = sweep.markdown(pd.DataFrame([crashed]), {"config": "c", "date": "d", "seeds": [0], "lr_factors": [1.0],
                                                    "steps_note": "5", "torch": "t"})
    table = sweep.model_table(pd.DataFrame([crashed])).iloc[0]
    assert (table["non_finite"], table["did_not_train"], table["crashed"]) == ("0/1", "1/1", 1)
    assert "- kfac-eigen: 0 non-finite runs of 1 (1 crashed, 1 did not train) on 1 models" in text
